//! Start-up (`stint_rt_init`): the SIGTRAP handler, the dummy column, the environment, and
//! the first profile.
//!
//! Runs once, from the entry stub, on the only thread, before the program's entry point:
//! the one phase allowed to initialise the dummy header and the start-up strings.
//!
//! Layering: the top with the entry points; uses `sys`, `text`, `state`, `trap` and
//! `profile_file`.
#![allow(unsafe_code)]

use crate::profile_file;
use crate::state::{Rt, CONTROL_PATH_MAX};
use crate::sys;
use crate::text::copy_into;
use crate::trap;
use stint_layout::{CONFIG_MAGIC, ENV_CONTROL, ENV_PROFILE};

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
    let (env, control, secure) = unsafe { scan_stack(sp) };
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
    if let Some(c) = control {
        if c.len() >= CONTROL_PATH_MAX {
            profile_file::warn(rt, b"control file path too long", c, None);
            su.template_len = 0; // never measure with metrics the user wanted off
            return;
        }
        su.control_len = copy_into(&mut su.control_path, &[c]) as u32;
    }
    let n = match env {
        Some(v) => copy_into(&mut su.template, &[v]),
        None => copy_into(&mut su.template, &[b"./", cfg.program_name(), b".%p.stint"]),
    };
    su.template_len = n as u32;
    profile_file::create(rt, su, 0);
}

/// Finds `STINT_PROFILE` and `STINT_CONTROL` in the environment and AT_SECURE in the
/// auxiliary vector.
///
/// # Safety
/// `sp` is the initial process stack.
unsafe fn scan_stack(sp: *const usize) -> (Option<&'static [u8]>, Option<&'static [u8]>, bool) {
    // Safety (whole function): walking the kernel-built initial stack.
    unsafe {
        let argc = *sp;
        let mut p = sp.add(1 + argc + 1);
        let mut found = None;
        let mut control = None;
        while *p != 0 {
            let s = cstr(*p as *const u8);
            if let Some(v) = env_value(s, ENV_PROFILE) {
                found = Some(v);
            }
            if let Some(v) = env_value(s, ENV_CONTROL) {
                control = Some(v);
            }
            p = p.add(1);
        }
        // In secure mode ld.so deletes unsafe variables (LD_LIBRARY_PATH, ...) by shifting
        // the rest of envp down, which leaves extra NULLs before auxv; auxv's first type is
        // never 0, so skip them.
        while *p == 0 {
            p = p.add(1);
        }
        let mut secure = false;
        while *p != 0 {
            const AT_SECURE: usize = 23;
            if *p == AT_SECURE {
                secure = *p.add(1) != 0;
            }
            p = p.add(2);
        }
        (found, control, secure)
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
    fn env_value_needs_the_whole_name_and_an_equals_sign() {
        assert_eq!(env_value(b"STINT_PROFILE=/x/%p", ENV_PROFILE), Some(&b"/x/%p"[..]));
        assert_eq!(env_value(b"STINT_PROFILE=", ENV_PROFILE), Some(&b""[..]));
        assert_eq!(env_value(b"STINT_PROFILEX=1", ENV_PROFILE), None);
        assert_eq!(env_value(b"STINT_PROFIL", ENV_PROFILE), None);
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
        let (p, c, secure) = unsafe { scan_stack(stack.as_ptr()) };
        assert_eq!(p, Some(&b"/p"[..]));
        assert_eq!(c, Some(&b"/c"[..]));
        assert!(secure);
    }
}
