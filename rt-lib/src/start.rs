//! Start-up (`stint_rt_init`): the SIGTRAP handler, the dummy column, the environment, and
//! the first profile.
//!
//! Runs once, from the entry stub, on the only thread, before the program's entry point:
//! the one phase allowed to initialise the dummy header and the start-up strings.
//!
//! Layering: the top with the entry points; uses `sys`, `text`, `state`, `trap`, `process`,
//! `profile_file`, `calib` and `wrap` (the calibration of a wrapper event).
#![allow(unsafe_code)]

use crate::calib::{self, SPOIL_EVERY, SPOIL_START};
use crate::process;
use crate::profile_file;
use crate::state::{Rt, CONTROL_PATH_MAX, LOG_PATH_MAX};
use crate::sys;
use crate::text::{copy_into, Writer};
use crate::trap;
use stint_layout::{
    ProfileDir, CCT_CAP, CFG_NO_CALL_PATHS, CONFIG_MAGIC, ENV_CALLTREE_NODES, ENV_CONTROL, ENV_DIR, ENV_LOG,
    ENV_PROFILE, ENV_TEST_SPOIL_CALIBRATION, POINT_INFO_WRAP, TMP_PROFILE_DIR_PREFIX, XDG_PROFILE_SUBDIR,
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
    crate::state::init_cookie(rt, su);
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
    st.set_calib_spoil(match env.spoil {
        Some(b"start") => SPOIL_START,
        Some(b"every") => SPOIL_EVERY,
        Some(b"again") => calib::SPOIL_NONE_AGAIN,
        _ => 0,
    });
    su.calib_tsc = sys::rdtsc();
    su.calib = calib::spoiled(rt, unsafe { calib::calibrate(rt, rt.st.dummy_addr() as usize) }, true);
    // The wrappers' fast-path event (wrapcomp), counted at call-path nodes only: at start-up
    // alone (its stand-in of the profile file needs a runtime that measures nothing yet).
    // Only where a wrapper can count one: ≈ 0.4 ms a process that programs without
    // thread-library calls (most of a test suite's short processes) do not pay, and the
    // fast-path one (≈ 0.3 ms) only where a mutex is wrapped (issue 14).
    let wrapped = thread_library_wrappers(rt);
    if su.calib.pair_ticks != 0 && rt.st.cct_mask() != 0 && wrapped.any {
        let gate = rt.cfg.control_region();
        if wrapped.mutex {
            // Safety: start-up, single-threaded, before the profile exists; point 0's gate
            // byte is the rewriter's writable zero page (n_points > 0: something was
            // calibrated), and calibrate_lock puts it and GS (the dummy column) back.
            su.calib.wrap_event_ticks = unsafe { crate::wrap::calibrate_lock(rt, gate) };
        }
        // The slow path's event (slowwrap), on the same stand-ins. A slow event costs about
        // twice a fast one (33 against 15 ns here); a figure above 4 times is a window the
        // host slowed as a whole (one start-up in a few at load 12 read 97 ns), so it is
        // measured once more and the lesser kept. 0: an event was not counted (none).
        // Safety: start-up, single-threaded, before the profile exists; point 0's gate byte
        // is the rewriter's writable zero page, and calibrate_slow puts it and GS back.
        let mut slow = unsafe { crate::wrap::calibrate_slow(rt, gate) };
        let fast = su.calib.wrap_event_ticks;
        if slow == 0 || (fast != 0 && slow > 4 * fast) {
            // Safety: as above.
            let again = unsafe { crate::wrap::calibrate_slow(rt, gate) };
            if again != 0 && (slow == 0 || again < slow) {
                slow = again;
            }
        }
        su.calib.wrap_slow_ticks = slow;
    }
    st.set_sample_pair(su.calib.pair_ticks.max(su.calib.pair_flat_ticks));
    profile_file::create(rt, su, 0, &[]);
}

/// Which thread-library functions ([`stint_layout::WrappedFn`]) the program's points wrap:
/// those whose events the start-up calibrations measure.
struct Wrapped {
    /// Any of them (their full path counts slow events).
    any: bool,
    /// `pthread_mutex_lock` or `_unlock`, the only ones whose fast path counts an event.
    mutex: bool,
}

/// The [`Wrapped`] of the program, told by the wrapper points' names (a name table would be
/// relocated data, which the image must not have). The process functions' wrappers (`exit`,
/// `__libc_start_main`, `wait*`: [`stint_layout::ProcessFn`]) count no event.
fn thread_library_wrappers(rt: &Rt) -> Wrapped {
    let mut rest = rt.cfg.point_names();
    let mut w = Wrapped { any: false, mutex: false };
    for &i in rt.cfg.point_info() {
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        let name = rest.get(..end).unwrap_or(&[]);
        rest = rest.get(end + 1..).unwrap_or(&[]);
        if i & POINT_INFO_WRAP != 0 && is_thread_library(name) {
            w.any = true;
            w.mutex |= name == b"pthread_mutex_lock" || name == b"pthread_mutex_unlock";
        }
    }
    w
}

/// Every [`stint_layout::WrappedFn`] name, by prefix, and no `ProcessFn` or `SignalFn` one.
fn is_thread_library(name: &[u8]) -> bool {
    (name.starts_with(b"pthread_") || name.starts_with(b"sem_")) && name != b"pthread_sigmask"
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
    /// `STINT_TEST_SPOIL_CALIBRATION`: the test hook.
    spoil: Option<&'static [u8]>,
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
            if let Some(v) = env_value(s, ENV_TEST_SPOIL_CALIBRATION) {
                env.spoil = Some(v);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_library_wrappers_are_told_from_process_ones_by_name() {
        for f in stint_layout::WrappedFn::ALL {
            assert!(is_thread_library(f.name().as_bytes()), "{}", f.name());
        }
        for f in stint_layout::ProcessFn::ALL {
            assert!(!is_thread_library(f.name().as_bytes()), "{}", f.name());
        }
        for f in stint_layout::SignalFn::ALL {
            assert!(!is_thread_library(f.name().as_bytes()), "{}", f.name());
        }
    }

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
