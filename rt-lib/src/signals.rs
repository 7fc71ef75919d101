//! Safe traps (D3, issue 12): wrappers of the signal functions a program calls, so that while
//! the program has trap sites SIGTRAP is never blocked and the runtime's SIGTRAP handler is
//! never replaced, and the program still sees what it asked for.
//!
//! # Why
//! A trap site is an `int3`. If the thread that reaches it blocks SIGTRAP (servers block every
//! signal in their workers with `sigfillset` + `pthread_sigmask`), the kernel force-delivers
//! the synchronous SIGTRAP with the default action and the process dumps core; if the program
//! installs its own SIGTRAP handler (debuggers, some runtimes), our traps go to it. The
//! rewriter therefore wraps these functions (the same PLT, GOT-call-site and static-entry
//! mechanism as the thread-library wrappers, `wrap`) in every program that has trap sites,
//! and only there.
//!
//! # What each wrapper does
//! - `sigprocmask`, `pthread_sigmask` (how, set, old): the set is copied (the caller's memory
//!   is never written, except the output it asks for) with SIGTRAP removed. Whether the thread
//!   asked for SIGTRAP to be blocked is remembered per thread (two bits per tid, [`Threads`]);
//!   the `old` set the program reads back has SIGTRAP in it when it had asked.
//! - `sigblock`, `sigsetmask`, `siggetmask` (4.2BSD int masks), `sighold`, `sigrelse`
//!   (System V): the same, on the int mask or the one signal.
//! - `sigsuspend` (mask), `ppoll` (.., mask): their temporary mask is also what a handler that
//!   runs during the wait starts with; SIGTRAP is removed from a copy. `pselect` and
//!   `epoll_pwait` take their mask as the 6th and 5th argument, which the 4-argument wrapper
//!   call does not pass on: not wrapped. `sigwait`, `sigwaitinfo` and `sigtimedwait` change no
//!   mask and run no handler: nothing to do.
//! - `sigaction` (sig, act, old) for another signal: `act` is copied with SIGTRAP removed from
//!   its `sa_mask` (a handler whose mask is full would otherwise run with SIGTRAP blocked);
//!   `old->sa_mask` gets SIGTRAP back when the program had put it there.
//! - `sigaction(SIGTRAP, ..)`, `signal`, `bsd_signal`, `ssignal`, `sysv_signal`, `sigignore`
//!   for SIGTRAP: nothing is installed. The action is remembered as the kernel would hold it
//!   (flags with `SA_RESTORER`, as libc installs them) and the previous one is returned. The
//!   trap handler (`trap`) hands the SIGTRAPs that are not trap sites to it:
//!   [`run_program_handler`], or SIG_IGN / SIG_DFL behaviour.
//!
//! Every wrapper calls the real function for what it does not emulate, and never sets errno.
//! Raw `rt_sigprocmask` / `rt_sigaction` system calls, and the calls shared libraries make
//! (they do not pass the program's PLT), are not seen.
//!
//! # Per thread
//! A thread that has not called a mask function yet (it inherited its mask from its creator,
//! or from the process before a fork) is taken to have asked for SIGTRAP to be blocked when
//! its real mask blocks every other standard signal (1–31 but SIGKILL and SIGSTOP): the
//! `sigfillset` pattern. Bits stay with a tid after its thread ends.
//!
//! Layering: uses `sys` and `state`.
#![allow(unsafe_code)]

use crate::state::{Config, RtState, SignalState, TcAcquire, TcLock};
use crate::sys::{self, SIGTRAP, SIG_IGN};
use core::sync::atomic::{fence, AtomicU64, Ordering};
use stint_layout::{SignalFn, MUSL_TID_OFFSET};

/// A wrapped function, called with the wrapper's four argument registers.
pub type Real = unsafe extern "C" fn(usize, usize, usize, usize) -> usize;

/// SIGTRAP's bit in a kernel sigset word (and in a 4.2BSD int mask).
pub const TRAP_BIT: u64 = 1 << (SIGTRAP - 1);
const SIG_BLOCK: usize = 0;
const SIG_UNBLOCK: usize = 1;
const SIG_SETMASK: usize = 2;
const SA_RESTORER: u64 = sys::SA_RESTORER;
const SA_RESTART: u64 = 0x1000_0000;
const SA_INTERRUPT: u64 = 0x2000_0000;
const SA_NODEFER: u64 = sys::SA_NODEFER;
const SA_RESETHAND: u64 = 0x8000_0000;
/// `SIG_ERR`, `(void (*)(int)) -1`.
const SIG_ERR: usize = usize::MAX;
/// Signals 1–31 but SIGTRAP, SIGKILL (9) and SIGSTOP (19): blocked all together, the thread
/// blocked "everything".
const OTHER_STANDARD: u64 = 0x7fff_ffff & !(TRAP_BIT | 1 << 8 | 1 << 18);

/// glibc's and musl's `struct sigaction` on x86-64 (checked with `offsetof` against both):
/// handler at 0, `sa_mask` (128 bytes) at 8, `sa_flags` (int) at 136, `sa_restorer` at 144.
const ACT_WORDS: usize = 19;
const ACT_MASK_WORD: usize = 1;
const ACT_FLAGS_WORD: usize = 17;
const ACT_RESTORER_WORD: usize = 18;
/// `sigset_t`: 128 bytes, of which the kernel reads the first 8.
const SIGSET_WORDS: usize = 16;

/// A SIGTRAP action as the kernel would hold it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Action {
    pub handler: usize,
    pub flags: u64,
    pub restorer: usize,
    pub mask: u64,
}

/// The wrapped signal function `f` (see the module documentation).
pub fn call(st: &RtState, cfg: &Config, f: SignalFn, a: [usize; 4], real: Real) -> usize {
    // Safety: the real function with (possibly replaced) arguments of the same meaning.
    let call = |a: [usize; 4]| unsafe { real(a[0], a[1], a[2], a[3]) };
    let st = &st.signals;
    if cfg.n_traps == 0 {
        return call(a);
    }
    let musl = cfg.tid_offset == MUSL_TID_OFFSET;
    let sig = a[0] as i32;
    match f {
        SignalFn::Sigprocmask | SignalFn::PthreadSigmask => set_mask(st, a, call),
        SignalFn::Sigaction => action(st, a, musl, call),
        // glibc's signal is BSD's: SA_RESTART, the signal itself in the mask; musl's has an
        // empty mask.
        SignalFn::Signal | SignalFn::BsdSignal | SignalFn::Ssignal => {
            signal(st, a, SA_RESTART, if musl { 0 } else { TRAP_BIT }, call)
        }
        SignalFn::SysvSignal => signal(st, a, SA_RESETHAND | SA_NODEFER | SA_INTERRUPT, 0, call),
        SignalFn::Sigsuspend => temporary_mask(a, 0, call),
        SignalFn::Ppoll => temporary_mask(a, 3, call),
        SignalFn::Sigblock | SignalFn::Sigsetmask | SignalFn::Siggetmask => int_mask(st, f, a, call),
        SignalFn::Sighold | SignalFn::Sigrelse if sig == SIGTRAP => {
            Threads::of(st).set(sys::gettid(), f == SignalFn::Sighold);
            0
        }
        SignalFn::Sigignore if sig == SIGTRAP => {
            let restorer = kernel_restorer();
            swap_trap_action(st, Some(Action { handler: SIG_IGN, flags: SA_RESTORER, restorer, mask: 0 }));
            0
        }
        SignalFn::Sighold | SignalFn::Sigrelse | SignalFn::Sigignore => call(a),
    }
}

/// `sigprocmask` / `pthread_sigmask` (how, set, old).
fn set_mask(st: &SignalState, a: [usize; 4], call: impl FnOnce([usize; 4]) -> usize) -> usize {
    let (how, set, old) = (a[0], a[1], a[2]);
    let tid = sys::gettid();
    let threads = Threads::of(st);
    let was = threads.blocked(tid);
    let mut local = [0u64; SIGSET_WORDS];
    let mut args = a;
    let mut asks = false;
    if set != 0 {
        // Safety: the program's sigset_t; libc reads its first word too (the kernel's size).
        let w = unsafe { (set as *const u64).read_unaligned() };
        asks = w & TRAP_BIT != 0;
        local[0] = w & !TRAP_BIT;
        args[1] = local.as_ptr() as usize;
    }
    let r = call(args);
    // pthread_sigmask returns 0 or an error number, sigprocmask 0 or -1.
    if r as i32 == 0 {
        if old != 0 && was {
            // Safety: the sigset_t the real call just filled for the caller.
            unsafe { or_word(old, TRAP_BIT) };
        }
        if set != 0 {
            let now = match how {
                SIG_BLOCK => was || asks,
                SIG_UNBLOCK => was && !asks,
                SIG_SETMASK => asks,
                _ => was,
            };
            threads.set(tid, now);
        }
    }
    r
}

/// `sigsuspend(mask)`, `ppoll(.., mask)`: the mask (argument `at`) with SIGTRAP removed.
fn temporary_mask(a: [usize; 4], at: usize, call: impl FnOnce([usize; 4]) -> usize) -> usize {
    let mut local = [0u64; SIGSET_WORDS];
    let mut args = a;
    if let Some(p) = args.get_mut(at).filter(|p| **p != 0) {
        // Safety: the program's sigset_t (first word, as the kernel reads it).
        local[0] = unsafe { (*p as *const u64).read_unaligned() } & !TRAP_BIT;
        *p = local.as_ptr() as usize;
    }
    call(args)
}

/// `sigblock(mask)`, `sigsetmask(mask)`, `siggetmask()`: 4.2BSD int masks, the old one
/// returned.
fn int_mask(st: &SignalState, f: SignalFn, a: [usize; 4], call: impl FnOnce([usize; 4]) -> usize) -> usize {
    let tid = sys::gettid();
    let threads = Threads::of(st);
    let was = threads.blocked(tid);
    let asks = a[0] as u64 & TRAP_BIT != 0;
    let r = call([a[0] & !(TRAP_BIT as usize), a[1], a[2], a[3]]);
    if r as i32 == -1 {
        return r;
    }
    match f {
        SignalFn::Sigblock => threads.set(tid, was || asks),
        SignalFn::Sigsetmask => threads.set(tid, asks),
        _ => {}
    }
    if was {
        r | TRAP_BIT as usize
    } else {
        r
    }
}

/// `sigaction(sig, act, old)`.
fn action(st: &SignalState, a: [usize; 4], musl: bool, call: impl FnOnce([usize; 4]) -> usize) -> usize {
    let (sig, act, old) = (a[0] as i32, a[1], a[2]);
    if sig == SIGTRAP {
        let new = (act != 0).then(|| {
            // Safety: the program's struct sigaction (libc reads it whole too).
            let u = unsafe { (act as *const [u64; ACT_WORDS]).read_unaligned() };
            Action {
                handler: u[0] as usize,
                flags: (u[ACT_FLAGS_WORD] & 0xffff_ffff) | SA_RESTORER,
                restorer: kernel_restorer(),
                mask: u[ACT_MASK_WORD],
            }
        });
        let prev = swap_trap_action(st, new);
        if old != 0 {
            // Safety: the caller's struct sigaction for the old action; written as libc
            // writes it (handler, the mask's first word, flags, and with glibc the restorer).
            unsafe {
                let o = old as *mut u64;
                o.write_unaligned(prev.handler as u64);
                o.add(ACT_MASK_WORD).write_unaligned(prev.mask);
                (o.add(ACT_FLAGS_WORD) as *mut u32).write_unaligned(prev.flags as u32);
                if !musl {
                    o.add(ACT_RESTORER_WORD).write_unaligned(prev.restorer as u64);
                }
            }
        }
        return 0;
    }
    let bit = sig_bit(sig);
    let had = st.masks_with_trap.load(Ordering::Relaxed) & bit != 0;
    // Safety: as above.
    let mut local =
        if act != 0 { unsafe { (act as *const [u64; ACT_WORDS]).read_unaligned() } } else { [0; ACT_WORDS] };
    let mut args = a;
    let mut asks = false;
    if act != 0 {
        asks = local[ACT_MASK_WORD] & TRAP_BIT != 0;
        local[ACT_MASK_WORD] &= !TRAP_BIT;
        args[1] = local.as_ptr() as usize;
    }
    let r = call(args);
    if r as i32 == 0 {
        if old != 0 && had {
            // Safety: the struct sigaction the real call just filled.
            unsafe { or_word(old + 8 * ACT_MASK_WORD, TRAP_BIT) };
        }
        if act != 0 && asks {
            st.masks_with_trap.fetch_or(bit, Ordering::Relaxed);
        } else if act != 0 {
            st.masks_with_trap.fetch_and(!bit, Ordering::Relaxed);
        }
    }
    r
}

/// `signal(sig, handler)` and its variants: for SIGTRAP, the action libc would install
/// (`flags`, `mask`) is remembered and the previous handler returned.
fn signal(st: &SignalState, a: [usize; 4], flags: u64, mask: u64, call: impl FnOnce([usize; 4]) -> usize) -> usize {
    let (sig, handler) = (a[0] as i32, a[1]);
    if sig != SIGTRAP || handler == SIG_ERR {
        let r = call(a);
        if r != SIG_ERR {
            // The new action's mask holds at most the signal itself.
            st.masks_with_trap.fetch_and(!sig_bit(sig), Ordering::Relaxed);
        }
        return r;
    }
    let act = Action { handler, flags: flags | SA_RESTORER, restorer: kernel_restorer(), mask };
    swap_trap_action(st, Some(act)).handler
}

/// The bit of `sig` in a 64-signal word (0 for a signal out of range).
fn sig_bit(sig: i32) -> u64 {
    if (1..=64).contains(&sig) {
        1 << (sig - 1)
    } else {
        0
    }
}

/// `*(u64 *) at |= bit`.
///
/// # Safety
/// `at` is 8 writable bytes of the caller's.
unsafe fn or_word(at: usize, bit: u64) {
    let p = at as *mut u64;
    // Safety: per the contract.
    unsafe { p.write_unaligned(p.read_unaligned() | bit) };
}

/// The restorer our SIGTRAP handler is installed with (glibc's program would read its own
/// `__restore_rt` there; ours has the same bytes): 0 if it cannot be read.
fn kernel_restorer() -> usize {
    let mut k = sys::KernelSigaction::default();
    // Safety: only reads the action.
    match unsafe { sys::rt_sigaction(SIGTRAP, None, Some(&mut k)) } {
        Ok(_) => k.restorer,
        Err(_) => 0,
    }
}

/// Replace the program's SIGTRAP action with `new` (if any); return the one before.
/// Writers take `lock`; the trap handler reads without it ([`trap_action`]).
fn swap_trap_action(st: &SignalState, new: Option<Action>) -> Action {
    let lock = TcLock::new(&st.lock);
    // SelfHeld: a handler interrupted a writer on this thread; go on without the lock (the
    // handler's write wins, as the later call).
    let held = lock.acquire(sys::gettid()) == TcAcquire::Yes;
    let prev = load_action(st);
    if let Some(n) = new {
        st.seq.fetch_add(1, Ordering::AcqRel);
        for (slot, v) in st.trap_act.iter().zip([n.handler as u64, n.flags, n.restorer as u64, n.mask]) {
            slot.store(v, Ordering::Relaxed);
        }
        st.seq.fetch_add(1, Ordering::Release);
    }
    if held {
        lock.release();
    }
    prev
}

fn load_action(st: &SignalState) -> Action {
    let w = |i: usize| st.trap_act.get(i).map_or(0, |a: &AtomicU64| a.load(Ordering::Relaxed));
    Action { handler: w(0) as usize, flags: w(1), restorer: w(2) as usize, mask: w(3) }
}

/// The program's SIGTRAP action, read by the trap handler (a sequence-count read: a writer
/// on another thread is waited for a few rounds, one this handler interrupted is not).
pub fn trap_action(st: &RtState) -> Action {
    let st = &st.signals;
    for _ in 0..64 {
        let s0 = st.seq.load(Ordering::Acquire);
        if s0 & 1 == 0 {
            let a = load_action(st);
            fence(Ordering::Acquire);
            if st.seq.load(Ordering::Relaxed) == s0 {
                return a;
            }
        }
        core::hint::spin_loop();
    }
    load_action(st)
}

/// Whether the calling thread asked for SIGTRAP to be blocked (see the module documentation).
pub fn trap_blocked_here(st: &RtState) -> bool {
    Threads::of(&st.signals).blocked(sys::gettid())
}

/// Run the program's SIGTRAP handler `act` for a SIGTRAP that is not a trap site, from inside
/// ours: as the kernel would, a one-shot action (`SA_RESETHAND`) is reset to SIG_DFL and
/// `sa_mask` is blocked for the handler's run (SIGTRAP itself stays unblocked: trap sites
/// inside the handler must keep working); `rt_sigreturn` restores the interrupted mask.
///
/// # Safety
/// `info` and `uc` are what the kernel passed to our handler; `act.handler` is the program's
/// handler (not SIG_DFL / SIG_IGN).
pub unsafe fn run_program_handler(st: &RtState, act: &Action, info: *const u8, uc: *mut u8) {
    if act.flags & SA_RESETHAND != 0 {
        swap_trap_action(&st.signals, Some(Action::default()));
    }
    let block = act.mask & !TRAP_BIT;
    if block != 0 {
        let _ = sys::rt_sigprocmask(SIG_BLOCK, Some(&block), None);
    }
    // Safety: per the contract, the program's handler, called as the kernel would (a
    // one-argument handler ignores the other two).
    let h = unsafe { core::mem::transmute::<usize, extern "C" fn(i32, *const u8, *mut u8)>(act.handler) };
    h(SIGTRAP, info, uc);
}

/// Take a SIGTRAP action found installed at start (a library constructor's) as the
/// program's.
pub fn adopt(st: &RtState, k: sys::KernelSigaction) {
    swap_trap_action(
        &st.signals,
        Some(Action { handler: k.handler, flags: k.flags, restorer: k.restorer, mask: k.mask }),
    );
}

/// Two bits per tid (asked, blocked) in a bitmap mapped on first use: 1 MiB of address
/// space for the kernel's largest `pid_max`, of which only the pages of used tids become
/// resident.
struct Threads<'a> {
    st: &'a SignalState,
}

/// Tids the bitmap covers (PID_MAX_LIMIT on 64-bit).
const TIDS: usize = 1 << 22;
const BITMAP_BYTES: usize = TIDS * 2 / 8;

impl<'a> Threads<'a> {
    fn of(st: &'a SignalState) -> Threads<'a> {
        Threads { st }
    }

    /// The word holding `tid`'s bits, and their shift; `None` without memory for the map.
    fn word(&self, tid: u32) -> Option<(&'a AtomicU64, u32)> {
        let t = tid as usize;
        if t >= TIDS {
            return None;
        }
        let mut map = self.st.threads.load(Ordering::Acquire);
        if map == 0 {
            let rw = sys::PROT_READ | sys::PROT_WRITE;
            let flags = sys::MAP_PRIVATE | sys::MAP_ANONYMOUS | sys::MAP_NORESERVE;
            // Safety: without MAP_FIXED the kernel picks free addresses.
            let fresh = unsafe { sys::mmap(0, BITMAP_BYTES, rw, flags, -1, 0) }.ok()?;
            map = match self.st.threads.compare_exchange(0, fresh, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => fresh,
                Err(other) => {
                    // Safety: our own mapping, never published.
                    let _ = unsafe { sys::munmap(fresh, BITMAP_BYTES) };
                    other
                }
            };
        }
        // Safety: an aligned u64 inside the mapping, which is never unmapped once published.
        let w = unsafe { AtomicU64::from_ptr((map as *mut u64).add(t * 2 / 64)) };
        Some((w, (t * 2 % 64) as u32))
    }

    /// Whether thread `tid` asked for SIGTRAP to be blocked; for a thread that never said,
    /// whether its real mask blocks every other standard signal.
    fn blocked(&self, tid: u32) -> bool {
        if let Some((w, sh)) = self.word(tid) {
            let v = w.load(Ordering::Relaxed) >> sh;
            if v & 1 != 0 {
                return v & 2 != 0;
            }
        }
        let mut cur = 0u64;
        sys::rt_sigprocmask(SIG_BLOCK, None, Some(&mut cur)).is_ok() && cur & OTHER_STANDARD == OTHER_STANDARD
    }

    fn set(&self, tid: u32, blocked: bool) {
        if let Some((w, sh)) = self.word(tid) {
            let v = (1 | (blocked as u64) << 1) << sh;
            let _ = w.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| Some(x & !(3 << sh) | v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sig_bits() {
        assert_eq!(sig_bit(SIGTRAP), TRAP_BIT);
        assert_eq!(TRAP_BIT, 0x10);
        assert_eq!((sig_bit(0), sig_bit(65), sig_bit(64)), (0, 0, 1 << 63));
        assert_eq!(OTHER_STANDARD.count_ones(), 28);
    }

    #[test]
    fn per_thread_bits() {
        let st = SignalState::default();
        let t = Threads::of(&st);
        for tid in [1u32, 2, 31, 32, 33, 4_194_303] {
            t.set(tid, true);
            assert!(t.blocked(tid), "{tid}");
            t.set(tid, false);
            assert!(!t.blocked(tid), "{tid}");
        }
        t.set(7, true);
        t.set(8, false);
        assert!(t.blocked(7) && !t.blocked(8));
        let map = st.threads.load(Ordering::Relaxed);
        // Safety: the test's own mapping.
        let _ = unsafe { sys::munmap(map, BITMAP_BYTES) };
    }

    #[test]
    fn trap_action_round_trip() {
        let st = SignalState::default();
        assert_eq!(load_action(&st), Action::default());
        let a = Action { handler: 0x1234, flags: SA_RESTORER | SA_RESETHAND, restorer: 0x99, mask: TRAP_BIT | 2 };
        assert_eq!(swap_trap_action(&st, Some(a)), Action::default());
        assert_eq!(swap_trap_action(&st, None), a);
        assert_eq!(st.seq.load(Ordering::Relaxed), 2);
        assert_eq!(st.lock.load(Ordering::Relaxed), 0);
    }
}
