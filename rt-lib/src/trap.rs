//! The trap tactic's runtime side (D3): the SIGTRAP handler that resumes a thread which
//! ran into one of the rewriter's `int3` bytes at the site's trampoline.
//!
//! # How a trap runs
//! Where no jump window fits, the rewriter (opt-in, `--traps`) writes one `int3` (0xCC) over
//! the first byte of an instruction and lists the site in the trap table (`RtConfig::traps_rel`,
//! `n_traps` entries of [`TrapEntry`], sorted by `site_rel` ascending, both addresses relative
//! to the `RtConfig` block). When the `int3` executes, the kernel delivers SIGTRAP with
//! `si_code == SI_KERNEL` and the saved RIP one past the `int3`. The handler looks the site up
//! (binary search), sets the saved RIP to the site's trampoline (which re-executes the
//! displaced instruction and continues) and returns; `rt_sigreturn` restores every register,
//! the vector state and the signal mask from the frame the kernel saved, so nothing the
//! program sees changes except where it continues. The handler measures nothing.
//!
//! # The handler stub (emitted by the rewriter)
//! A signal handler gets no argument that leads to the config block, and the runtime has no
//! statics, so the rewriter emits a two-instruction stub next to the config block and
//! installs *it* as the handler (its address is [`install`]'s `handler`):
//! ```text
//! trap_stub:
//!     lea  rdi, [rip + config]     ; replaces `sig`; rsi = siginfo*, rdx = ucontext* stay
//!     jmp  stint_rt_trap           ; a jump: the return address stays the restorer
//! ```
//! The kernel enters a handler with rdi = signal, rsi = `siginfo_t *`, rdx = `ucontext_t *`,
//! `rsp ≡ 8 (mod 16)` as after a call, the return address = `sa_restorer`, and a fresh FPU
//! state (the program's is saved in the frame). [`stint_rt_trap`] therefore takes
//! `(config, info, uc)` and returns straight into the restorer.
//!
//! # Caveats (why traps are the last resort)
//! - The program's own calls of `sigprocmask`, `pthread_sigmask`, `sigaction`, `signal` and
//!   their relatives are wrapped in every program with trap sites (`signals`): SIGTRAP is
//!   never blocked and our handler never replaced by them; the program's own SIGTRAP action
//!   is remembered and SIGTRAPs that are not trap sites go to it ([`not_ours`]). A SIGTRAP
//!   that is blocked anyway (a raw `rt_sigprocmask`, a shared library's own call, a
//!   `setcontext` mask) and reaches a trap site kills the thread's process: the kernel
//!   force-delivers a synchronous signal that is blocked or ignored by resetting its action
//!   to SIG_DFL and unblocking it (`force_sig_info_to_task`), so the process dumps core.
//! - A SIGTRAP handler installed by a raw `rt_sigaction` or a shared library after start
//!   replaces ours. One installed before start (a library constructor) is adopted as the
//!   program's action. Under a debugger every trap site stops the program as an unknown
//!   SIGTRAP (gdb: `handle SIGTRAP` cannot pass it silently; use `signal SIGTRAP`).
//! - Code that runs before `stint_rt_init` installs the handler (IFUNC resolvers of a dynamic
//!   executable, shared-library constructors calling back into the program) must not contain
//!   trap sites: there the `int3` kills the process.
//! - One handler per process: if several rewritten objects in one process ever carry trap
//!   tables, the last `install` wins and the others' traps are not ours to it.
//!
//! Layering: uses `sys`, `text`, `state` and `signals` (the program's SIGTRAP action).
#![allow(unsafe_code)]

use crate::signals;
use crate::state::{Config, Rt, RtState};
use crate::sys::{self, Errno, KernelSigaction, SA_NODEFER, SA_ONSTACK, SA_RESTORER, SA_SIGINFO, SIGTRAP, SIG_DFL};
use crate::text::copy_into;
use core::mem::size_of;
use stint_layout::{RtConfig, TrapEntry, CONFIG_MAGIC};

/// Offset of `uc_mcontext` in the kernel's (and glibc's) x86-64 `ucontext_t`:
/// `uc_flags` (8) + `uc_link` (8) + `uc_stack` (`ss_sp` 8, `ss_flags` 4 + 4 padding,
/// `ss_size` 8 = 24) = 40.
pub const UC_MCONTEXT_OFFSET: usize = 8 + 8 + 24;
/// Index of RIP in `uc_mcontext.gregs` (glibc `REG_RIP`; the kernel's `struct sigcontext`
/// has r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, then rip: 16 words before it).
pub const REG_RIP: usize = 16;
/// Offset of the saved RIP: 40 + 16 * 8 = 168. Checked against glibc 2.36 with
/// `offsetof(ucontext_t, uc_mcontext.gregs[REG_RIP])`.
pub const UC_RIP_OFFSET: usize = UC_MCONTEXT_OFFSET + REG_RIP * 8;
/// Offset of `si_code` in `siginfo_t` (after `si_signo` and `si_errno`, two ints).
pub const SI_CODE_OFFSET: usize = 8;
/// `si_code` of a signal the kernel raised itself: for SIGTRAP on x86-64, an `int3` (or
/// `int $3`). `kill`, `tgkill` and `sigqueue` give SI_USER, SI_TKILL or SI_QUEUE, single-step
/// and hardware breakpoints TRAP_TRACE / TRAP_HWBKPT.
pub const SI_KERNEL: i32 = 0x80;
const INT3: u8 = 0xcc;

/// `sa_flags` of our handler:
/// - `SA_SIGINFO`: we need the `ucontext_t` (and `si_code`).
/// - `SA_RESTORER`: the raw syscall needs an explicit return trampoline ([`restorer`]).
/// - `SA_ONSTACK`: if the program set up an alternate signal stack for the thread, the
///   signal frame (1–4 KiB with the xsave area) goes there rather than onto a stack that may
///   be small or nearly exhausted (a trap at the entry of a deeply recursive function); with
///   no alternate stack it has no effect.
/// - `SA_NODEFER`: without it SIGTRAP is blocked while our handler runs. If an asynchronous
///   signal interrupts the handler and the program's handler for it runs trapped code (any
///   instrumented function), that `int3` raises SIGTRAP while it is blocked, and the kernel
///   then resets SIGTRAP to SIG_DFL and kills the process. The handler is reentrant (it reads
///   the read-only table and writes only its own frame's RIP), so nesting is harmless, and
///   the mask during the handler stays exactly the interrupted code's mask (`sa_mask` is
///   empty too), which is what the program would see without us.
pub const TRAP_SA_FLAGS: u64 = SA_SIGINFO | SA_ONSTACK | SA_RESTORER | SA_NODEFER;

/// Install the SIGTRAP handler if the program has trap sites. `handler` is the address of
/// the rewriter-generated stub (see the module documentation). Runs first in start-up and
/// regardless of measurement: the `int3` bytes are in the code either way.
///
/// # Safety
/// `handler` is the rewriter's stub for this `config` (or code with the same contract): it
/// loads the block's address and jumps to `stint_rt_trap`, and stays mapped for the run.
pub unsafe fn install(config: &Config, handler: usize) {
    if config.magic != CONFIG_MAGIC || config.n_traps == 0 {
        return;
    }
    if handler == 0 {
        say(config, b"no SIGTRAP handler stub", None);
        return;
    }
    let act = KernelSigaction { handler, flags: TRAP_SA_FLAGS, restorer: restorer as *const () as usize, mask: 0 };
    let mut old = KernelSigaction::default();
    // Safety: the stub reaches `stint_rt_trap`, which is reentrant and touches only the
    // read-only trap table and the frame the kernel passes; `restorer` is rt_sigreturn.
    match unsafe { sys::rt_sigaction(SIGTRAP, Some(&act), Some(&mut old)) } {
        Err(e) => say(config, b"cannot install the SIGTRAP handler", Some(e)),
        // Only a library constructor can have set one this early (exec resets handlers):
        // it becomes the program's action, which the SIGTRAPs that are not ours go to.
        Ok(_) if old != KernelSigaction::default() => match program_state(config) {
            Some(st) => signals::adopt(st, old),
            None => say(config, b"replaced an existing SIGTRAP handler", None),
        },
        Ok(_) => {}
    }
}

/// The program's runtime state, if the block names one (the rewriter's always does; the unit
/// tests' fake blocks do not).
fn program_state<'a>(config: &Config<'a>) -> Option<&'a RtState> {
    if config.state_rel == 0 {
        return None;
    }
    // Safety: a block with a state names the rewriter's `RT_STATE_SIZE` bytes (the contract
    // of `Rt::enter`, which `stint_rt_trap`'s and `install`'s callers keep).
    Some(unsafe { Rt::enter(config.addr() as *const RtConfig) }.st)
}

/// One diagnostic line on stderr: `stint: <program>: <what>[: <errno>]; ...`.
fn say(config: &Config, what: &[u8], err: Option<Errno>) {
    let name = config.program_name();
    let e: &[u8] = err.map(|e| e.name().as_bytes()).unwrap_or(b"");
    let sep: &[u8] = if err.is_some() { b": " } else { b"" };
    let tail: &[u8] = if err.is_some() || what.starts_with(b"no ") {
        b"; the program will die of SIGTRAP at its first trap site\n"
    } else {
        b"; SIGTRAPs that are not stint's will dump core\n"
    };
    let mut buf = [0u8; 512];
    let n = copy_into(&mut buf, &[b"stint: ", name, b": ", what, sep, e, tail]);
    sys::write_all(2, buf.get(..n).unwrap_or(&[]));
}

/// `rt_sigreturn` for our handler, the `sa_restorer` the kernel makes the handler return to.
/// The bytes are glibc's `__restore_rt` exactly (`mov rax, 15; syscall`, written out so no
/// assembler shortens the `mov`): libgcc's fallback unwinder, glibc's SFrame backtracer and
/// gdb recognise a signal frame by these 9 bytes at the return address, so backtraces through
/// our handler keep working. gdb accepts them only from a function without a name or named
/// `__restore_rt`, hence the symbol name (glibc's own `__restore_rt` is a local symbol, so
/// there is no clash). Position-independent (no operand is an address).
#[unsafe(naked)]
#[export_name = "__restore_rt"]
extern "C" fn restorer() {
    core::arch::naked_asm!(".byte 0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00", ".byte 0x0f, 0x05")
}

/// The trap table: `n` entries at `base`, read unaligned (the rewriter need not align it).
pub struct Table {
    base: *const u8,
    n: usize,
}

impl Table {
    /// The block's trap table (`n_traps` entries at `traps_rel`, per `Config::from_raw`).
    pub fn of(config: &Config) -> Table {
        Table { base: config.at::<u8>(config.traps_rel), n: config.n_traps as usize }
    }

    #[cfg(test)]
    pub fn from_slice(t: &[TrapEntry]) -> Table {
        Table { base: t.as_ptr() as *const u8, n: t.len() }
    }

    pub fn entry(&self, i: usize) -> Option<TrapEntry> {
        if i >= self.n {
            return None;
        }
        // Safety: i < n, and the constructor guarantees n entries at base.
        Some(unsafe { (self.base.wrapping_add(i * size_of::<TrapEntry>()) as *const TrapEntry).read_unaligned() })
    }

    /// The `resume_rel` of the entry whose `site_rel` is `site_rel` (binary search over the
    /// sorted table, no indexing, no panics).
    pub fn lookup(&self, site_rel: i64) -> Option<i64> {
        let (mut lo, mut hi) = (0usize, self.n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let e = self.entry(mid)?;
            if e.site_rel == site_rel {
                return Some(e.resume_rel);
            }
            if e.site_rel < site_rel {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        None
    }
}

/// The body of the SIGTRAP handler (`stint_rt_trap`; the rewriter's stub jumps there, see
/// the module documentation).
///
/// # Safety
/// `info` and `uc` are the `siginfo_t` and `ucontext_t` the kernel passed to the handler
/// (`info` may be null: then the trap is assumed to come from an `int3`).
pub unsafe fn on_trap(config: &Config, info: *const u8, uc: *mut u8) {
    let rip_slot = uc.wrapping_add(UC_RIP_OFFSET) as *mut u64;
    // Safety: `uc` is the kernel's ucontext_t.
    let rip = unsafe { rip_slot.read_unaligned() };
    let code = if info.is_null() {
        SI_KERNEL
    } else {
        // Safety: `info` is the kernel's siginfo_t.
        unsafe { (info.wrapping_add(SI_CODE_OFFSET) as *const i32).read_unaligned() }
    };
    // Only an executed int3 is ours: a SIGTRAP sent by kill() while the thread stands one byte
    // past a site (a 1-byte `ret` site is followed by another instruction) is not.
    if code == SI_KERNEL {
        let base = config.addr();
        let table = Table::of(config);
        if let Some(resume_rel) = table.lookup(rip.wrapping_sub(1).wrapping_sub(base) as i64) {
            // Safety: as above.
            unsafe { rip_slot.write_unaligned(base.wrapping_add(resume_rel as u64)) };
            return;
        }
    }
    if let Some(st) = program_state(config) {
        let act = signals::trap_action(st);
        // Sent by a process (kill, tgkill, sigqueue: si_code <= 0), or raised by the CPU
        // (an int3 of the program's, a single step), which the kernel never holds pending:
        // blocked or ignored, it kills with the default action.
        let sent = code <= 0;
        if act.handler == sys::SIG_IGN && sent {
            return;
        }
        if act.handler != SIG_DFL && act.handler != sys::SIG_IGN && (sent || !signals::trap_blocked_here(st)) {
            // Safety: the kernel's frame, and the program's own handler.
            unsafe { signals::run_program_handler(st, &act, info, uc) };
            return;
        }
    }
    // Safety: forwarded.
    unsafe { not_ours(code, rip_slot, rip) }
}

/// A SIGTRAP that is not one of our sites, and the program's action for it is SIG_DFL (or
/// it is ignored or blocked, which for a synchronous SIGTRAP kills as SIG_DFL does): do what
/// SIG_DFL would have done: restore it, then
/// - for an `int3` of the program's own (`si_code` SI_KERNEL and 0xCC before RIP): rewind RIP
///   onto it and return, so it executes again under SIG_DFL and the core dump shows the
///   program's own registers at the faulting instruction, as without stint (merely
///   returning would skip the `int3` and run on);
/// - otherwise (kill/tgkill/sigqueue, single-step, `int $3`): re-raise it at this thread with
///   tgkill. SIGTRAP is not blocked here (SA_NODEFER, and the interrupted code did not block
///   it or we would not run), so it is delivered, with the default action, as the syscall
///   returns.
///
/// The core then shows this handler's frames, and the program's state one signal frame up.
/// Restoring SIG_DFL is process-wide: another thread reaching one of our sites before the
/// process dies dumps core there instead; either way the process dies of SIGTRAP, as it
/// would have without stint.
///
/// # Safety
/// `rip_slot` is the saved RIP in the kernel's ucontext_t, holding `rip`.
unsafe fn not_ours(code: i32, rip_slot: *mut u64, rip: u64) {
    let dfl = KernelSigaction { handler: SIG_DFL, ..KernelSigaction::default() };
    // Safety: the default action runs no code of ours or the program's.
    let _ = unsafe { sys::rt_sigaction(SIGTRAP, Some(&dfl), None) };
    // Reading the byte before RIP only when the kernel says an int3 (or `int $3`) just ran
    // there: that byte was fetched a moment ago, so it is mapped (an execute-only page,
    // possible with protection keys, would fault here; nothing else can).
    // Safety: as argued above.
    if code == SI_KERNEL && unsafe { (rip.wrapping_sub(1) as *const u8).read_volatile() } == INT3 {
        // Safety: see the function contract.
        unsafe { rip_slot.write_unaligned(rip.wrapping_sub(1)) };
        return;
    }
    let _ = sys::tgkill(sys::getpid(), sys::gettid(), SIGTRAP);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stint_rt_trap;
    use core::mem::offset_of;
    use std::os::unix::process::ExitStatusExt;
    use stint_layout::RtConfig;

    fn table(sites: &[i64]) -> Vec<TrapEntry> {
        sites.iter().map(|&s| TrapEntry { site_rel: s, resume_rel: s.wrapping_mul(10).wrapping_add(1) }).collect()
    }

    #[test]
    fn lookup_finds_exact_sites_only() {
        let t = table(&[-50, -3, 0, 7, 8, 100, 4096, i64::MAX]);
        let tab = Table::from_slice(&t);
        for e in &t {
            assert_eq!(tab.lookup(e.site_rel), Some(e.resume_rel), "site {}", e.site_rel);
        }
        for miss in [i64::MIN, -51, -49, -4, -1, 1, 6, 9, 99, 101, 4095, 4097, i64::MAX - 1] {
            assert_eq!(tab.lookup(miss), None, "miss {miss}");
        }
        // Every table length from 0 to 9 (odd and even halvings).
        for n in 0..10i64 {
            let t = table(&(0..n).map(|i| i * 2).collect::<Vec<_>>());
            let tab = Table::from_slice(&t);
            for k in -1..=2 * n {
                let want = (k >= 0 && k % 2 == 0 && k < 2 * n).then_some(k * 10 + 1);
                assert_eq!(tab.lookup(k), want, "n {n} key {k}");
            }
        }
        assert_eq!(Table::from_slice(&[]).lookup(0), None);
        assert_eq!(Table::from_slice(&[]).entry(0), None);
    }

    #[test]
    fn offsets_match_the_abi() {
        assert_eq!(UC_RIP_OFFSET, 168);
        assert_eq!(SI_CODE_OFFSET, 8);
        assert_eq!(size_of::<KernelSigaction>(), 32);
        assert_eq!(offset_of!(KernelSigaction, restorer), 16);
        assert_eq!(size_of::<TrapEntry>(), 16);
    }

    /// A config block followed by a trap table at an odd (unaligned) offset.
    #[repr(C, align(8))]
    struct FakeBlock {
        cfg: RtConfig,
        bytes: [u8; 1 + 3 * 16],
    }

    fn fake_block(sites: &[(i64, i64)]) -> Box<FakeBlock> {
        let mut b = Box::new(FakeBlock { cfg: RtConfig::default(), bytes: [0; 49] });
        b.cfg.magic = CONFIG_MAGIC;
        b.cfg.traps_rel = (offset_of!(FakeBlock, bytes) + 1) as i64;
        b.cfg.n_traps = sites.len() as u64;
        for (i, &(s, r)) in sites.iter().enumerate() {
            let at = 1 + i * 16;
            b.bytes[at..at + 8].copy_from_slice(&s.to_le_bytes());
            b.bytes[at + 8..at + 16].copy_from_slice(&r.to_le_bytes());
        }
        b
    }

    fn fake_frame(rip: u64, code: i32) -> (Vec<u8>, [u8; 128]) {
        let mut uc = vec![0u8; 1024];
        uc[UC_RIP_OFFSET..UC_RIP_OFFSET + 8].copy_from_slice(&rip.to_le_bytes());
        let mut info = [0u8; 128];
        info[0..4].copy_from_slice(&SIGTRAP.to_le_bytes());
        info[SI_CODE_OFFSET..SI_CODE_OFFSET + 4].copy_from_slice(&code.to_le_bytes());
        (uc, info)
    }

    fn saved_rip(uc: &[u8]) -> u64 {
        u64::from_le_bytes(uc[UC_RIP_OFFSET..UC_RIP_OFFSET + 8].try_into().unwrap())
    }

    #[test]
    fn trap_at_a_site_resumes_at_its_trampoline() {
        let b = fake_block(&[(-0x2000, 0x500), (-0x1000, 0x600), (0x3000, 0x700)]);
        let base = &b.cfg as *const RtConfig as u64;
        for (site, resume) in [(-0x2000i64, 0x500i64), (-0x1000, 0x600), (0x3000, 0x700)] {
            let (mut uc, info) = fake_frame(base.wrapping_add(site as u64) + 1, SI_KERNEL);
            // Safety: fake but complete buffers.
            unsafe { stint_rt_trap(&b.cfg, info.as_ptr(), uc.as_mut_ptr()) };
            assert_eq!(saved_rip(&uc), base.wrapping_add(resume as u64));
            // The rest of the frame is untouched.
            assert!(uc[..UC_RIP_OFFSET].iter().chain(&uc[UC_RIP_OFFSET + 8..]).all(|&x| x == 0));
            // A null siginfo counts as an int3.
            let (mut uc, _) = fake_frame(base.wrapping_add(site as u64) + 1, SI_KERNEL);
            // Safety: as above.
            unsafe { stint_rt_trap(&b.cfg, core::ptr::null(), uc.as_mut_ptr()) };
            assert_eq!(saved_rip(&uc), base.wrapping_add(resume as u64));
        }
    }

    #[test]
    fn install_without_traps_does_nothing() {
        let b = fake_block(&[]);
        // Safety: a block without traps: nothing is installed.
        unsafe { install(&Config::from_raw(&b.cfg), 0x1234) };
        let mut old = KernelSigaction { handler: 99, ..Default::default() };
        // Safety: only reads the action.
        unsafe { sys::rt_sigaction(SIGTRAP, None, Some(&mut old)) }.unwrap();
        assert_eq!(old.handler, SIG_DFL);
    }

    // ---- End to end, each in a child process (the handler is process-wide, and some of
    // these die of SIGTRAP on purpose). `child_*` tests do nothing unless the parent test
    // started them. ----

    #[repr(C)]
    struct Block {
        cfg: RtConfig,
        table: [TrapEntry; 2],
        name: [u8; 4],
    }

    static mut STINT_TEST_BLOCK: core::mem::MaybeUninit<Block> = core::mem::MaybeUninit::zeroed();
    /// Set once the nesting stub has run its nested trap (so the nested handler does not).
    static mut STINT_TEST_NESTED: u8 = 0;

    // Two trapped functions (they return 2 if the int3 fell through, 1 or 3 via their
    // trampolines), a foreign int3, the stub exactly as the rewriter emits it, and a stub
    // that runs trapped code inside the handler before doing its job (a nested trap, once).
    core::arch::global_asm!(
        ".pushsection .text.stint_test_trap, \"ax\"",
        ".globl stint_test_trapped_a, stint_test_trapped_b, stint_test_resume_a, stint_test_resume_b",
        ".globl stint_test_foreign_int3, stint_test_stub, stint_test_stub_nested",
        "stint_test_trapped_a:",
        "  int3",
        "  mov eax, 2",
        "  ret",
        "stint_test_resume_a:",
        "  mov eax, 1",
        "  ret",
        "stint_test_trapped_b:",
        "  mov eax, 3",
        "  int3", // over a `ret`
        "  mov eax, 2",
        "  ret",
        "stint_test_resume_b:",
        "  ret",
        "stint_test_foreign_int3:",
        "  int3",
        "  mov eax, 4",
        "  ret",
        "stint_test_stub:",
        "  lea rdi, [rip + {block}]",
        "  jmp {trap}",
        "stint_test_stub_nested:",
        "  cmp byte ptr [rip + {nested}], 0",
        "  jne 2f",
        "  mov byte ptr [rip + {nested}], 1",
        "  push rsi",
        "  push rdx",
        "  push rdx", // keep rsp ≡ 0 (mod 16) at the call
        "  call stint_test_trapped_a",
        "  cmp eax, 1",
        "  je 1f",
        "  ud2",
        "1:",
        "  pop rdx",
        "  pop rdx",
        "  pop rsi",
        "2:",
        "  lea rdi, [rip + {block}]",
        "  jmp {trap}",
        ".popsection",
        block = sym STINT_TEST_BLOCK,
        nested = sym STINT_TEST_NESTED,
        trap = sym stint_rt_trap,
    );

    extern "C" {
        fn stint_test_trapped_a() -> u32;
        fn stint_test_trapped_b() -> u32;
        fn stint_test_resume_a();
        fn stint_test_resume_b();
        fn stint_test_foreign_int3() -> u32;
        fn stint_test_stub();
        fn stint_test_stub_nested();
    }

    const CHILD_ENV: &str = "STINT_TRAP_TEST_CHILD";

    /// Is this process the child started for `name`?
    fn is_child(name: &str) -> bool {
        std::env::var(CHILD_ENV).is_ok_and(|v| v == name)
    }

    fn run_child(name: &str) -> std::process::ExitStatus {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &format!("trap::tests::{name}"), "--test-threads=1", "--nocapture"])
            .env(CHILD_ENV, name)
            .output()
            .unwrap();
        eprintln!("child {name}: {:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
        out.status
    }

    fn no_core_dumps() {
        let zero = [0u64; 2];
        // Safety: setrlimit(RLIMIT_CORE, {0, 0}).
        unsafe {
            core::arch::asm!("syscall", inlateout("rax") 160usize => _, in("rdi") 4usize, in("rsi") zero.as_ptr(),
                lateout("rcx") _, lateout("r11") _, options(nostack));
        }
    }

    /// Fill the block with sites a and b (sorted) and install `stub`.
    fn setup(stub: unsafe extern "C" fn()) {
        no_core_dumps();
        let b = (&raw mut STINT_TEST_BLOCK) as *mut Block;
        let base = b as u64;
        let rel = |f: u64| f.wrapping_sub(base) as i64;
        let mut t = [
            TrapEntry {
                site_rel: rel(stint_test_trapped_a as *const () as u64),
                resume_rel: rel(stint_test_resume_a as *const () as u64),
            },
            TrapEntry {
                site_rel: rel(stint_test_trapped_b as *const () as u64 + 5),
                resume_rel: rel(stint_test_resume_b as *const () as u64),
            },
        ];
        t.sort_by_key(|e| e.site_rel);
        // Safety: single-threaded child, before anything reads the block.
        unsafe {
            (*b).cfg.magic = CONFIG_MAGIC;
            (*b).cfg.traps_rel = offset_of!(Block, table) as i64;
            (*b).cfg.n_traps = 2;
            (*b).cfg.name_rel = offset_of!(Block, name) as i64;
            (*b).cfg.name_len = 4;
            (*b).table = t;
            install(&Config::from_raw(&raw const (*b).cfg), stub as *const () as usize);
        }
        let mut now = KernelSigaction::default();
        // Safety: only reads the action.
        unsafe { sys::rt_sigaction(SIGTRAP, None, Some(&mut now)) }.unwrap();
        assert_eq!(now.flags, TRAP_SA_FLAGS);
        assert_eq!(now.handler, stub as *const () as usize);
        let r = now.restorer as *const u8;
        // Safety: our restorer, 9 bytes of code.
        assert_eq!(unsafe { core::slice::from_raw_parts(r, 9) }, [0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05]);
    }

    #[test]
    fn child_sites_resume() {
        if is_child("child_sites_resume") {
            setup(stub_fn());
            for _ in 0..1000 {
                // Safety: test functions above.
                unsafe {
                    assert_eq!(stint_test_trapped_a(), 1);
                    assert_eq!(stint_test_trapped_b(), 3);
                }
            }
        }
    }

    #[test]
    fn child_nested_trap_in_handler() {
        if is_child("child_nested_trap_in_handler") {
            setup(stub_nested_fn());
            // Safety: test functions above.
            unsafe { assert_eq!(stint_test_trapped_b(), 3) };
            // Safety: single-threaded child.
            assert_eq!(unsafe { (&raw const STINT_TEST_NESTED).read_volatile() }, 1);
        }
    }

    #[test]
    fn child_foreign_int3_dumps_core() {
        if is_child("child_foreign_int3_dumps_core") {
            setup(stub_fn());
            // Safety: test function above.
            unsafe { stint_test_foreign_int3() };
            std::process::exit(0); // not reached
        }
    }

    #[test]
    fn child_sent_sigtrap_dumps_core() {
        if is_child("child_sent_sigtrap_dumps_core") {
            setup(stub_fn());
            let _ = sys::tgkill(sys::getpid(), sys::gettid(), SIGTRAP);
            std::process::exit(0); // not reached
        }
    }

    #[test]
    fn child_blocked_sigtrap_is_fatal() {
        if is_child("child_blocked_sigtrap_is_fatal") {
            setup(stub_fn());
            let set = 1u64 << (SIGTRAP - 1);
            // Safety: rt_sigprocmask(SIG_BLOCK, &set, NULL, 8).
            unsafe {
                core::arch::asm!("syscall", inlateout("rax") 14usize => _, in("rdi") 0usize, in("rsi") &set,
                    in("rdx") 0usize, in("r10") 8usize, lateout("rcx") _, lateout("r11") _, options(nostack));
                stint_test_trapped_a();
            }
            std::process::exit(0); // not reached
        }
    }

    fn stub_fn() -> unsafe extern "C" fn() {
        stint_test_stub
    }

    fn stub_nested_fn() -> unsafe extern "C" fn() {
        stint_test_stub_nested
    }

    #[test]
    fn end_to_end_in_child_processes() {
        if std::env::var(CHILD_ENV).is_ok() {
            return;
        }
        assert_eq!(run_child("child_sites_resume").code(), Some(0));
        // SA_NODEFER: without it the nested int3 would be fatal.
        assert_eq!(run_child("child_nested_trap_in_handler").code(), Some(0));
        assert_eq!(run_child("child_foreign_int3_dumps_core").signal(), Some(SIGTRAP));
        assert_eq!(run_child("child_sent_sigtrap_dumps_core").signal(), Some(SIGTRAP));
        // The caveat: a thread that blocks SIGTRAP dies at a trap site.
        assert_eq!(run_child("child_blocked_sigtrap_is_fatal").signal(), Some(SIGTRAP));
    }
}
