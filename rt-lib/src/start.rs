//! Start-up (`stint_rt_init`): the SIGTRAP handler, the dummy column, the environment, and
//! the first profile.
//!
//! Runs once, from the entry stub, on the only thread, before the program's entry point:
//! the one phase allowed to initialise the dummy header and the start-up strings.
//!
//! Layering: the top with the entry points; uses `sys`, `text`, `state`, `trap`, `process`
//! and `profile_file`.
#![allow(unsafe_code)]

use crate::process;
use crate::profile_file;
use crate::state::{Rt, CONTROL_PATH_MAX, LOG_PATH_MAX};
use crate::sys;
use crate::text::{copy_into, Writer};
use crate::trap;
use stint_layout::{
    cct_hash, cct_index_offset, cct_nodes_offset, column_size, counter_offset, metric_bit, Calibration, CctNode,
    ColumnHeader, Frame, Pod, ProfileDir, CALIB_ENTRY_EXIT_OFFSET, CALIB_IMPORT_OFFSET, CALIB_PLAIN_OFFSET,
    CALIB_SCALE, CALIB_SPLIT_OFFSET, CCT_CAP, CCT_NODE_SIZE, CFG_NO_CALL_PATHS, CONFIG_MAGIC, ENV_CALLTREE_NODES,
    ENV_CONTROL, ENV_DIR, ENV_LOG, ENV_PROFILE, METRIC_CALLS, N_COUNTER_SLOTS, SHADOW_CAP, SHADOW_OFFSET,
    SLOT_WALL_TICKS, TIMER_BITS, TMP_PROFILE_DIR_PREFIX, XDG_PROFILE_SUBDIR,
};

/// Start-up, from the entry stub.
///
/// # Safety
/// Single-threaded, before the program's entry point, once; `sp` is the initial process
/// stack (argc, argv, envp, auxv).
pub unsafe fn init(rt: &Rt, sp: *const usize) {
    let (cfg, st) = (&rt.cfg, rt.st);
    if cfg.magic != CONFIG_MAGIC {
        return;
    }
    if !install_dummy_tls() {
        return; // gates stay off: the program runs unmeasured
    }
    // The int3 bytes of the trap tactic are in the code whether or not we measure: their
    // handler goes in first, before anything can fail.
    // Safety: `trap_handler_rel` names the rewriter's stub for this block.
    unsafe { trap::install(cfg, cfg.at::<u8>(cfg.trap_handler_rel) as usize) };
    {
        // Safety: start-up, before any GS base points at the dummy.
        let d = unsafe { st.dummy_mut() };
        d.owner_tp = u64::MAX;
        d.owner_key = u32::MAX;
        d.exit_key = u32::MAX;
        d.self_addr = st.dummy_addr();
    }
    // Safety: the dummy header lives in RtState for the whole run.
    if unsafe { sys::set_gs_base(st.dummy_addr() as usize) }.is_err() {
        return; // gates stay off: the program runs unmeasured
    }
    st.set_pid(sys::getpid());
    // Safety: start-up is single-threaded; this is the only reference.
    let su = unsafe { st.startup() };
    if cfg.tid_offset != 0 {
        // Safety: the rewriter only sets tid_offset for glibc programs, whose thread
        // control block is larger than the offset.
        su.tid_key_ok = (unsafe { sys::fs_u32(cfg.tid_offset) } == sys::gettid()) as u32;
    }

    // Safety: the kernel lays out the initial stack this way.
    let env = unsafe { scan_stack(sp) };
    let (control, secure) = (env.control, env.secure);
    if secure || sys::setid() {
        // AT_SECURE (setuid, file capabilities): ignore STINT_* and measure nothing.
        if control.is_some() {
            let mut line = [0u8; 256];
            let n = copy_into(
                &mut line,
                &[b"stint: ", cfg.program_name(), b": STINT_CONTROL ignored in a setuid or AT_SECURE process\n"],
            );
            sys::write_all(2, line.get(..n).unwrap_or(&[]));
        }
        return;
    }
    if let Some(l) = env.log {
        // A path too long for the buffer is ignored (diagnostics stay on stderr).
        if l.len() < LOG_PATH_MAX {
            copy_into(&mut su.log_path, &[l, b"\0"]);
        }
    }
    su.initial_sp = sp as u64;
    su.proc_start_ticks = process::start_ticks();
    if let Some(c) = control {
        if c.len() >= CONTROL_PATH_MAX {
            let log = su.log_path;
            profile_file::warn(rt, &log, b"control file path too long", c, None);
            su.template_len = 0; // never measure with metrics the user wanted off
            return;
        }
        su.control_len = copy_into(&mut su.control_path, &[c]) as u32;
    }
    let n = match env.profile {
        Some(v) => copy_into(&mut su.template, &[v]),
        None => {
            su.private_dir = 1;
            default_template(&mut su.template, env.dir, env.xdg_runtime_dir, cfg.program_name())
        }
    };
    su.template_len = n as u32;
    let nodes = if cfg.flags & CFG_NO_CALL_PATHS != 0 { 0 } else { calltree_nodes(env.calltree_nodes) };
    st.set_cct_mask(if nodes == 0 { 0 } else { 2 * nodes - 1 });
    // Safety: start-up, single-threaded, before the control region is mapped; GS points at
    // the dummy.
    su.calib = unsafe { calibrate(rt) };
    profile_file::create(rt, su, 0, &[]);
}

/// A static program (glibc `-static`, `-static-pie`, musl) reaches its entry point with FS
/// base 0: its libc sets up TLS later (glibc's `__libc_setup_tls`, after
/// `_dl_relocate_static_pie`, tunables and the IFUNC resolvers; musl's `__init_tls`), and
/// every trampoline of a function that runs before that reads `fs:[0]` and `fs:[tid_offset]`
/// (the thread key, D8), which would fault. So, as E9Patch does, we give the thread a
/// zero-filled read-only page as its FS base until the libc replaces it with the real
/// thread control block: the thread pointer read there is 0, which no thread has, so
/// [`crate::threads::slow`] measures nothing ("no thread yet") and the trampolines run the
/// program's own instructions. The first event after the libc's `arch_prctl(ARCH_SET_FS)`
/// finds a real thread pointer and registers the main thread as in a dynamic program.
/// A dynamic program's FS base is set by ld.so before our entry stub runs: nothing changes
/// for it, and its trampolines are the same instructions.
/// False if the thread has no TLS and no dummy could be installed (then nothing may measure).
fn install_dummy_tls() -> bool {
    if sys::fs_base() != 0 {
        return true;
    }
    // Safety: without MAP_FIXED the call only adds memory.
    let Ok(page) = (unsafe { sys::mmap(0, 4096, sys::PROT_READ, sys::MAP_PRIVATE | sys::MAP_ANONYMOUS, -1, 0) }) else {
        return false;
    };
    // Safety: FS base is 0 (no TLS yet); the page is never unmapped, and 4096 bytes hold
    // every tid offset the rewriter uses (`tid_offset` < 0x1000).
    unsafe { sys::set_fs_base(page) }.is_ok()
}

/// What start-up reads from the initial stack.
#[derive(Default)]
struct Env {
    /// `STINT_PROFILE`: the profile path template.
    profile: Option<&'static [u8]>,
    /// `STINT_CONTROL`: the control file.
    control: Option<&'static [u8]>,
    /// `STINT_DIR`: the directory of profiles when `STINT_PROFILE` is not set.
    dir: Option<&'static [u8]>,
    /// `STINT_LOG`: where diagnostics go instead of stderr.
    log: Option<&'static [u8]>,
    /// `XDG_RUNTIME_DIR`.
    xdg_runtime_dir: Option<&'static [u8]>,
    /// `STINT_CALLTREE_NODES`: nodes per thread's calling-context tree.
    calltree_nodes: Option<&'static [u8]>,
    /// AT_SECURE from the auxiliary vector.
    secure: bool,
}

/// The profile path template when `STINT_PROFILE` is not set (D15): a private per-user
/// directory ([`ProfileDir`]: `$STINT_DIR`, else `$XDG_RUNTIME_DIR/stint`, else
/// `/tmp/stint-<euid>`), never the current one (a profile growing in the cwd changed what
/// `git add -A` and `sha256sum *` saw); then `/<program>.%p.stint`. A `%`
/// in the directory is escaped so that only the file name's `%p` expands.
fn default_template(out: &mut [u8], dir: Option<&[u8]>, xdg: Option<&[u8]>, program: &[u8]) -> usize {
    let mut uid = [0u8; 10];
    let parts: [&[u8]; 2] = match ProfileDir::choose(dir, xdg) {
        ProfileDir::Named(d) => [d, b""],
        ProfileDir::XdgRuntime(x) => [x, XDG_PROFILE_SUBDIR.as_bytes()],
        ProfileDir::Tmp => [TMP_PROFILE_DIR_PREFIX.as_bytes(), decimal(sys::geteuid(), &mut uid)],
    };
    let mut w = Writer::new(out);
    for &c in parts.iter().flat_map(|p| p.iter()) {
        w.put(if c == b'%' { b"%%" } else { core::slice::from_ref(&c) });
    }
    w.put(b"/");
    w.put(program);
    w.put(b".%p.stint");
    w.len()
}

/// `v` in decimal, in `buf`.
fn decimal(mut v: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        if let Some(d) = buf.get_mut(i) {
            *d = b'0' + (v % 10) as u8;
        }
        v /= 10;
        if v == 0 || i == 0 {
            break;
        }
    }
    buf.get(i..).unwrap_or(&[])
}

/// Finds `STINT_PROFILE`, `STINT_CONTROL`, `STINT_DIR`, `STINT_LOG` and `XDG_RUNTIME_DIR` in the
/// environment and AT_SECURE in the auxiliary vector.
///
/// # Safety
/// `sp` is the initial process stack.
unsafe fn scan_stack(sp: *const usize) -> Env {
    // Safety (whole function): walking the kernel-built initial stack.
    unsafe {
        let argc = *sp;
        let mut p = sp.add(1 + argc + 1);
        let mut env = Env::default();
        while *p != 0 {
            let s = cstr(*p as *const u8);
            if let Some(v) = env_value(s, ENV_PROFILE) {
                env.profile = Some(v);
            }
            if let Some(v) = env_value(s, ENV_CONTROL) {
                env.control = Some(v);
            }
            if let Some(v) = env_value(s, ENV_DIR) {
                env.dir = Some(v);
            }
            if let Some(v) = env_value(s, ENV_CALLTREE_NODES) {
                env.calltree_nodes = Some(v);
            }
            if let Some(v) = env_value(s, ENV_LOG) {
                env.log = Some(v);
            }
            if let Some(v) = env_value(s, "XDG_RUNTIME_DIR") {
                env.xdg_runtime_dir = Some(v);
            }
            p = p.add(1);
        }
        // In secure mode ld.so deletes unsafe variables (LD_LIBRARY_PATH, ...) by shifting
        // the rest of envp down, which leaves extra NULLs before auxv; auxv's first type is
        // never 0, so skip them.
        while *p == 0 {
            p = p.add(1);
        }
        while *p != 0 {
            const AT_SECURE: usize = 23;
            if *p == AT_SECURE {
                env.secure = *p.add(1) != 0;
            }
            p = p.add(2);
        }
        env
    }
}

/// Nodes per thread's calling-context tree: `STINT_CALLTREE_NODES` (decimal, rounded down to
/// a power of two, at most `CCT_CAP`; 0 turns call paths off), else `CCT_CAP`.
fn calltree_nodes(v: Option<&[u8]>) -> u32 {
    let Some(v) = v.filter(|v| !v.is_empty() && v.len() <= 9 && v.iter().all(u8::is_ascii_digit)) else {
        return CCT_CAP;
    };
    let n = v.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0')).min(CCT_CAP);
    if n == 0 {
        0
    } else {
        1 << (31 - n.leading_zeros())
    }
}

/// The value of `NAME=value` if `s` is that variable.
fn env_value<'s>(s: &'s [u8], name: &str) -> Option<&'s [u8]> {
    let rest = s.strip_prefix(name.as_bytes())?;
    rest.strip_prefix(b"=")
}

/// # Safety
/// `p` points to a NUL-terminated string that lives for the whole run.
unsafe fn cstr(p: *const u8) -> &'static [u8] {
    let mut n = 0;
    // Safety: guaranteed by the caller.
    unsafe {
        while *p.add(n) != 0 {
            n += 1;
        }
        core::slice::from_raw_parts(p, n)
    }
}

/// Entry/exit pairs per calibration batch, and batches per kind of event (after one warm-up
/// batch): 8,000 calls of each of three kinds (with call paths, without, counted only), about
/// half a millisecond at start.
const CALIB_PER_BATCH: u32 = 1000;
const CALIB_BATCHES: usize = 7;

/// Measure what one instrumented event costs (D21) with the calibration routine the rewriter
/// emitted (`RtConfig::calib_rel`, `stint_layout::CALIB_*_OFFSET`): a callee entered and left
/// through trampolines made by the same code generator as the program's, which call the
/// program's own timer routines, for point 0 with its gate set to every metric (or to calls
/// only) for the duration, on a scratch column. Each kind of event is the least of
/// [`CALIB_BATCHES`] batches: the whole pair from TSC reads around the batch minus the same
/// loop around a plain function, the part inside the function's own span from what the
/// routines added to the node (or the flat counter).
/// All zero when the program has no timed point, no routine, or the scratch column cannot be
/// mapped.
///
/// # Safety
/// Start-up, single-threaded, before `profile_file::create` maps the control region over the
/// rewriter's zero pages (the gate byte written here is restored before returning); GS points
/// at the dummy column and is put back there.
unsafe fn calibrate(rt: &Rt) -> Calibration {
    let cfg = &rt.cfg;
    let none = Calibration::default();
    if cfg.n_points == 0
        || cfg.ctl_len == 0
        || cfg.calib_rel == 0
        || !cfg.point_info().iter().any(|&b| b & TIMER_BITS != 0)
    {
        return none;
    }
    let geo = cfg.geometry();
    let len = column_size(geo.n_points, N_COUNTER_SLOTS) as usize;
    let prot = sys::PROT_READ | sys::PROT_WRITE;
    // Safety: not MAP_FIXED: new memory only.
    let Ok(base) = (unsafe { sys::mmap(0, len, prot, sys::MAP_PRIVATE | sys::MAP_ANONYMOUS, -1, 0) }) else {
        return none;
    };
    let point = 0u32;
    // The word the trampolines compare with the column's key.
    // Safety: `tid_offset` is 0 or inside glibc's thread control block (rewriter contract).
    let key = unsafe { sys::fs_u32(cfg.tid_offset) };
    // The column the routines see: this thread owns it, its CPU clock never needs a
    // re-synchronisation (its sequence word is its own `seq`), one call-path node for
    // (root, point) so that an entry is a one-probe hit.
    let mut h = ColumnHeader {
        self_addr: base as u64,
        owner_tp: sys::thread_pointer(),
        owner_key: key,
        exit_key: key,
        seq_ptr: (base + core::mem::offset_of!(ColumnHeader, seq)) as u64,
        sync_tsc: sys::rdtsc(),
        sync_ticks: u64::MAX >> 1,
        thread_mask: u32::MAX,
        shadow_ready: SHADOW_CAP, // a private mapping: no file blocks to allocate
        ..ColumnHeader::default()
    };
    let mask = rt.st.cct_mask();
    let index = cct_index_offset(geo.n_points, N_COUNTER_SLOTS) as usize;
    let nodes = cct_nodes_offset(geo.n_points, N_COUNTER_SLOTS) as usize;
    let wall = counter_offset(geo.n_points, SLOT_WALL_TICKS, point) as usize;
    // The scratch column is written by the routines through GS between these accesses:
    // every access here is a volatile one through the raw address, never a live reference.
    let put = |off: usize, bytes: &[u8]| {
        for (i, &b) in bytes.iter().enumerate() {
            // Safety: `off + i < len` (offsets inside one column), our private mapping.
            unsafe { core::ptr::write_volatile((base + off + i) as *mut u8, b) };
        }
    };
    // Safety: as for `put`; an aligned u64 (node and counter fields are 8-aligned).
    let get = |off: usize| unsafe { core::ptr::read_volatile((base + off) as *const u64) };
    // The calls are nested in a caller's frame, as almost every call is: node 1 (the
    // callee, under node 0) is the one the entries hit, and the caller's frame is on the
    // shadow stack above the loop's stack pointer.
    put(nodes, CctNode { parent: 0, point, ..CctNode::default() }.as_bytes());
    put(nodes + CCT_NODE_SIZE as usize, CctNode { parent: 1, point, ..CctNode::default() }.as_bytes());
    put(index + 4 * (cct_hash(0, point) & mask) as usize, &1u32.to_le_bytes());
    put(index + 4 * (cct_hash(1, point) & mask) as usize, &2u32.to_le_bytes());
    put(SHADOW_OFFSET as usize, Frame { sp: u64::MAX, point, node: 1, ..Frame::default() }.as_bytes());
    let gate = cfg.control_region();
    // Safety: the control region is the rewriter's writable zero pages until the profile is
    // mapped over it; point 0 < n_points ≤ ctl_len.
    let saved = unsafe { core::ptr::read_volatile(gate) };
    let run = |h: &ColumnHeader, bits: u8, entry: u64, spent: usize| -> (u64, u64) {
        put(0, h.as_bytes());
        let mut pair = [0u64; CALIB_BATCHES];
        let mut inner = [0u64; CALIB_BATCHES];
        // One batch more than kept: the first warms the caches and the branch predictors.
        for k in 0..=CALIB_BATCHES {
            let before = get(spent);
            // Safety: start-up; the scratch column is set up above, the gate is writable.
            let ticks = unsafe { calib_batch(rt, base, gate, bits, entry) };
            let after = get(spent);
            if let (Some(p), Some(i)) =
                (k.checked_sub(1).and_then(|k| pair.get_mut(k)), k.checked_sub(1).and_then(|k| inner.get_mut(k)))
            {
                *p = ticks.saturating_mul(CALIB_SCALE) / CALIB_PER_BATCH as u64;
                *i = after.wrapping_sub(before).saturating_mul(CALIB_SCALE) / CALIB_PER_BATCH as u64;
            }
        }
        (median(&mut pair), median(&mut inner))
    };
    let all = TIMER_BITS | metric_bit(METRIC_CALLS);
    let node_wall = nodes + CCT_NODE_SIZE as usize + core::mem::offset_of!(CctNode, wall_ticks);
    let paths = ColumnHeader { cct_mask: mask, depth: 1, ..h };
    let with_paths = |entry: u64| if mask != 0 { run(&paths, all, entry, node_wall) } else { (0, 0) };
    let (pair, inner) = with_paths(CALIB_SPLIT_OFFSET);
    let (pair_ee, inner_ee) = with_paths(CALIB_ENTRY_EXIT_OFFSET);
    let (pair_import, inner_import) = with_paths(CALIB_IMPORT_OFFSET);
    h.cct_mask = 0;
    h.depth = 1;
    let (pair_flat, inner_flat) = run(&h, all, CALIB_SPLIT_OFFSET, wall);
    let (count, _) = run(&h, metric_bit(METRIC_CALLS), CALIB_SPLIT_OFFSET, wall);
    // Safety: as above; back to what the rewriter emitted.
    unsafe { core::ptr::write_volatile(gate, saved) };
    // Safety: the dummy lives in RtState for the whole run; nothing refers to the scratch
    // column any more and GS no longer points at it.
    unsafe {
        let _ = sys::set_gs_base(rt.st.dummy_addr() as usize);
        let _ = sys::munmap(base, len);
    }
    let (pair, inner) = if mask != 0 { (pair, inner) } else { (pair_flat, inner_flat) };
    Calibration {
        pair_ticks: pair,
        inner_ticks: inner.min(pair),
        pair_flat_ticks: pair_flat,
        inner_flat_ticks: inner_flat.min(pair_flat),
        count_ticks: count,
        batches: CALIB_BATCHES as u32,
        per_batch: CALIB_PER_BATCH,
        pair_ee_ticks: pair_ee,
        inner_ee_ticks: inner_ee.min(pair_ee),
        pair_import_ticks: pair_import,
        inner_import_ticks: inner_import.min(pair_import),
    }
}

/// The middle value: what a call typically costs. The least would be the cost in the best
/// case (caches and predictors warm, nothing else on the core), which the program's calls
/// do not all get: it leaves 2–3 % of a timed call in the caller.
fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// One batch: [`CALIB_PER_BATCH`] calls through the calibration routine's entry at `entry`
/// (`CALIB_*_OFFSET`), for point 0 with its gate set to `bits`. Returns the TSC ticks of the
/// batch minus those of the same loop around a plain function (`CALIB_PLAIN_OFFSET`).
///
/// # Safety
/// Start-up, single-threaded; `col` is a mapped scratch column owned by this thread (its
/// header set up as `calibrate` does), `gate` the writable gate byte of point 0, and
/// `RtConfig::calib_rel` the rewriter's routine. GS points at `col` on return.
unsafe fn calib_batch(rt: &Rt, col: usize, gate: *mut u8, bits: u8, entry: u64) -> u64 {
    let routine = rt.cfg.at::<u8>(rt.cfg.calib_rel) as u64;
    // Safety: `col` is a column this thread owns for the batch.
    if unsafe { sys::set_gs_base(col) }.is_err() {
        return 0;
    }
    // Safety: the caller's contract (a writable gate byte at start-up).
    unsafe { core::ptr::write_volatile(gate, bits) };
    let time = |at: u64| {
        let t0 = sys::rdtsc();
        // Safety: the routine (rewriter-generated, `RtConfig::calib_rel`) clobbers rax, rdi
        // and the flags only (the trampolines' and timer routines' contract); it touches the
        // scratch column (GS), the gate byte and the stack below the red zone, which is
        // stepped over first.
        unsafe {
            core::arch::asm!(
                "lea rsp, [rsp - 128]",
                "call {f}",
                "lea rsp, [rsp + 128]",
                f = in(reg) at,
                inout("rdi") CALIB_PER_BATCH as u64 => _,
                out("rax") _,
            );
        }
        sys::rdtsc().wrapping_sub(t0)
    };
    let instrumented = time(routine + entry);
    instrumented.saturating_sub(time(routine + CALIB_PLAIN_OFFSET))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_template_is_the_private_directory() {
        let mut out = [0u8; 256];
        let n = default_template(&mut out, Some(b"/d/x"), Some(b"/run/user/1"), b"prog");
        assert_eq!(&out[..n], b"/d/x/prog.%p.stint", "STINT_DIR first");
        let n = default_template(&mut out, Some(b""), Some(b"/run/user/1"), b"prog");
        assert_eq!(&out[..n], b"/run/user/1/stint/prog.%p.stint", "empty STINT_DIR: XDG_RUNTIME_DIR");
        let n = default_template(&mut out, None, Some(b"relative"), b"prog");
        let uid = sys::geteuid();
        let want = std::format!("/tmp/stint-{uid}/prog.%p.stint");
        assert_eq!(&out[..n], want.as_bytes(), "a relative XDG_RUNTIME_DIR is ignored");
        let n = default_template(&mut out, Some(b"/a%p"), None, b"prog");
        assert_eq!(&out[..n], b"/a%%p/prog.%p.stint", "a % in the directory is not a pattern");
    }

    #[test]
    fn decimal_digits() {
        let mut b = [0u8; 10];
        assert_eq!(decimal(0, &mut b), b"0");
        assert_eq!(decimal(1000, &mut b), b"1000");
        assert_eq!(decimal(u32::MAX, &mut b), b"4294967295");
    }

    #[test]
    fn env_value_needs_the_whole_name_and_an_equals_sign() {
        assert_eq!(env_value(b"STINT_PROFILE=/x/%p", ENV_PROFILE), Some(&b"/x/%p"[..]));
        assert_eq!(env_value(b"STINT_PROFILE=", ENV_PROFILE), Some(&b""[..]));
        assert_eq!(env_value(b"STINT_PROFILEX=1", ENV_PROFILE), None);
        assert_eq!(env_value(b"STINT_PROFIL", ENV_PROFILE), None);
        assert_eq!(calltree_nodes(None), CCT_CAP);
        assert_eq!(calltree_nodes(Some(b"0")), 0);
        assert_eq!(calltree_nodes(Some(b"5")), 4);
        assert_eq!(calltree_nodes(Some(b"99999999")), CCT_CAP);
        assert_eq!(calltree_nodes(Some(b"x")), CCT_CAP);
    }

    #[test]
    fn scan_finds_variables_and_at_secure() {
        let prof = b"STINT_PROFILE=/p\0";
        let ctl = b"STINT_CONTROL=/c\0";
        let other = b"HOME=/h\0";
        let arg = b"prog\0";
        // argc, argv[0], NULL, envp..., NULL, (extra NULL as in secure mode), auxv, AT_NULL.
        let stack: Vec<usize> = vec![
            1,
            arg.as_ptr() as usize,
            0,
            other.as_ptr() as usize,
            prof.as_ptr() as usize,
            ctl.as_ptr() as usize,
            0,
            0,
            6,
            4096, // AT_PAGESZ
            23,
            1, // AT_SECURE
            0,
            0,
        ];
        // Safety: a stack laid out like the kernel's, strings NUL-terminated.
        let env = unsafe { scan_stack(stack.as_ptr()) };
        assert_eq!(env.profile, Some(&b"/p"[..]));
        assert_eq!(env.control, Some(&b"/c"[..]));
        assert_eq!(env.dir, None);
        assert!(env.secure);
    }
}
