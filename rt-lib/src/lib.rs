//! stint's runtime: the code the rewriter links into every rewritten program.
//!
//! # Rules (D6)
//! - `no_std`, no libc, no allocator: the program's errno, malloc and locks are never
//!   touched, because the thread we run on may be inside any of them (a trampoline can fire
//!   inside malloc, or in a signal handler that interrupted malloc).
//! - Safe to enter from a signal handler: global bookkeeping uses thread-conscious locks
//!   ([`state::TcLock`]); a thread that finds itself already holding one skips the event
//!   and counts it, never deadlocks (seeds/000 §3.2).
//! - No statics: every entry point receives the address of the read-only [`RtConfig`] the
//!   rewriter emitted, and finds its writable state through it. The image therefore needs
//!   no relocations; the build checks that linking it at two bases gives identical bytes.
//! - No assumptions about the caller's stack alignment or FP state: the stubs the rewriter
//!   generates save every caller-saved register (and x87/SSE state with `fxsave`), align
//!   the stack and then call in. The image is built for plain x86-64 (no AVX), so
//!   `fxsave` covers everything this code may touch.
//! - Hot paths (gate, preamble, counter) are trampoline machine code emitted by the
//!   rewriter; only slow paths come here: start-up, a thread's first event, a fork.
//!
//! # One context per entry
//! Each entry point turns its raw config pointer into one [`state::Rt`] (the config block
//! and the shared [`state::RtState`]) under its `# Safety` contract, and passes it down by
//! reference. Nothing holds `&'static mut`; the state is shared (atomics, a lock-guarded
//! cell, a start-up-only cell), and the only `&mut` into the profile file is a thread's
//! [`column::Column`] of its own column.
//!
//! # Layers (a module uses only modules of its own or a lower layer)
//! ```text
//! sys, text                 system calls; bounded byte strings
//! column, state, clock      a column's regions; the context and shared state; CPU clocks
//! control, process          control page, safe points, snapshots, the control file;
//!                           the process's identity, arguments and diagnostics
//! profile_file              create, map, grow and leave the profile file
//! threads, signals          registration, own column, fork hand-off, start/name hand-off;
//!                           the signal wrappers of programs with trap sites
//! calib                     what an event costs: at start, and again at the end (D21)
//! timer, wrap, trap         timer slow path; thread-library wrappers; SIGTRAP handler
//! start, lib.rs             start-up; the extern "C" entry points
//! ```
//!
//! # Entry points (called by rewriter-generated stubs)
//! - [`stint_rt_init`]: from the entry stub, before the program's own entry point.
//! - [`stint_rt_slow`]: from a trampoline whose thread check missed.
//! - [`stint_rt_timer`]: from a timer routine that needs more than a push or a pop.
//! - [`stint_rt_wrap`]: from a wrapped import's thunk.
//! - [`stint_rt_wrap_lock`]: from a mutex lock or unlock thunk's fast path.
//! - [`stint_rt_trap`]: from the SIGTRAP handler stub.
//! - [`stint_rt_main`]: from `__libc_start_main`'s thunk and the main thunk.
#![cfg_attr(not(test), no_std)]
#![deny(unsafe_code)]

mod calib;
mod clock;
mod column;
mod control;
mod process;
mod profile_file;
mod signals;
mod start;
mod state;
mod sys;
mod text;
mod threads;
mod timer;
mod trap;
mod wrap;

#[cfg(stint_image)]
mod image;

use state::{Config, Rt};
pub use stint_layout::RtConfig;
use stint_layout::{ColumnHeader, WrapSite, CONFIG_MAGIC};

/// Initialise the runtime: create the profile file, map it, set the initial gates.
///
/// `sp` is the process's initial stack pointer (argc, argv, envp, auxv).
///
/// # Safety
/// `config` must be the rewriter-emitted block of this program (the contract of
/// `Rt::enter`) and `sp` the initial stack; called once, before the program's entry point.
#[allow(unsafe_code)]
#[no_mangle]
pub unsafe extern "C" fn stint_rt_init(config: *const RtConfig, sp: *const usize) {
    // Safety: forwarded contract.
    if unsafe { Config::from_raw(config) }.magic != CONFIG_MAGIC {
        return;
    }
    // Safety: forwarded contract; the magic says the block is the rewriter's.
    let rt = unsafe { Rt::enter(config) };
    // Safety: forwarded contract.
    unsafe { start::init(&rt, sp) }
}

/// Slow path of the timer routines: enter (`op` 0) or leave (`op` 1) `point` with the
/// function-entry stack pointer `sp`, at TSC `tsc`.
///
/// # Safety
/// `config` must be the rewriter-emitted block of this program; GS points at the calling
/// thread's own column (the routine checked its owner) and its `busy` flag is set.
#[allow(unsafe_code)]
#[no_mangle]
pub unsafe extern "C" fn stint_rt_timer(config: *const RtConfig, op: u32, point: u32, sp: u64, tsc: u64) {
    // Safety: forwarded contract.
    let rt = unsafe { Rt::enter(config) };
    if point >= rt.cfg.n_points || !rt.st.active() {
        return;
    }
    // Safety: forwarded contract: the thread's own column, mapped while `active`, written
    // only by this thread (the routine that called us holds `busy`).
    let mut col = unsafe { threads::file_column(&rt, sys::gs_self() as *mut ColumnHeader) };
    timer::timer(&rt, &mut col, op, point, sp, tsc)
}

/// Slow path of a point: register the calling thread (or notice a fork). Returns 1 if the
/// event should be counted in the column GS now points at, 0 to skip it.
///
/// # Safety
/// `config` must be the rewriter-emitted block of this program.
#[allow(unsafe_code)]
#[no_mangle]
pub unsafe extern "C" fn stint_rt_slow(config: *const RtConfig, point: u32) -> u32 {
    // Safety: forwarded contract.
    let rt = unsafe { Rt::enter(config) };
    threads::slow(&rt, point) as u32
}

/// A wrapped thread-library call (D4): the wrapper thunk of the import jumped here with the
/// call's own arguments in `a0..a3`, the caller's return address in `ra` and the import's
/// descriptor in `site`. Returns what the real function returned.
///
/// # Safety
/// `site` is a rewriter-emitted descriptor; the arguments are the program's.
#[allow(unsafe_code)]
#[no_mangle]
pub unsafe extern "C" fn stint_rt_wrap(
    a0: usize,
    a1: usize,
    a2: usize,
    a3: usize,
    ra: usize,
    site: *const WrapSite,
) -> usize {
    // Safety: forwarded contract.
    unsafe { wrap::wrap([a0, a1, a2, a3], ra, site) }
}

/// The mutex fast path of a wrapped lock or unlock; the thunk jumps here instead of
/// `stint_rt_wrap` when the thread measures only calls and lock metrics (see `wrap`).
///
/// # Safety
/// As `stint_rt_wrap`.
#[allow(unsafe_code)]
#[no_mangle]
pub unsafe extern "C" fn stint_rt_wrap_lock(
    a0: usize,
    a1: usize,
    a2: usize,
    a3: usize,
    ra: usize,
    site: *const WrapSite,
) -> usize {
    // Safety: forwarded contract.
    unsafe { wrap::wrap_lock([a0, a1, a2, a3], ra, site) }
}

/// `__libc_start_main`'s thunk and the main thunk (D22): `op` 0 (`value` = the program's
/// `main`) keeps `main` and returns the real `__libc_start_main`; `op` 1 returns `main`;
/// `op` 2 (`value` = `main`'s return value) records it as this image's exit status and
/// returns it.
///
/// # Safety
/// `site` is the rewriter-emitted descriptor of `__libc_start_main`.
#[allow(unsafe_code)]
#[no_mangle]
pub unsafe extern "C" fn stint_rt_main(site: *const WrapSite, op: usize, value: usize) -> usize {
    // Safety: forwarded contract.
    unsafe { wrap::main_hook(site, op, value) }
}

/// The body of the SIGTRAP handler; the rewriter's stub jumps here (see `trap`).
///
/// # Safety
/// `config` is this program's block; `info` and `uc` are the `siginfo_t` and `ucontext_t`
/// the kernel passed to the handler (`info` may be null: then the trap is assumed to come
/// from an `int3`).
#[allow(unsafe_code)]
#[no_mangle]
pub unsafe extern "C" fn stint_rt_trap(config: *const RtConfig, info: *const u8, uc: *mut u8) {
    // Safety: forwarded contract (a handler needs the block only, not the state).
    let cfg = unsafe { Config::from_raw(config) };
    // Safety: forwarded contract.
    unsafe { trap::on_trap(&cfg, info, uc) }
}

/// The layering of the module documentation, checked on the sources.
#[cfg(test)]
mod layering {
    /// Lowest first; a module may use modules of its own layer or lower ones.
    const LAYERS: &[&[&str]] = &[
        &["sys", "text"],
        &["column", "state", "clock"],
        &["control", "process"],
        &["profile_file"],
        &["threads", "signals"],
        &["calib"],
        &["timer", "wrap", "trap"],
        &["start"],
    ];

    const SOURCES: &[(&str, &str)] = &[
        ("sys", include_str!("sys.rs")),
        ("text", include_str!("text.rs")),
        ("column", include_str!("column.rs")),
        ("state", include_str!("state.rs")),
        ("clock", include_str!("clock.rs")),
        ("control", include_str!("control.rs")),
        ("process", include_str!("process.rs")),
        ("profile_file", include_str!("profile_file.rs")),
        ("threads", include_str!("threads.rs")),
        ("signals", include_str!("signals.rs")),
        ("calib", include_str!("calib.rs")),
        ("timer", include_str!("timer.rs")),
        ("wrap", include_str!("wrap.rs")),
        ("trap", include_str!("trap.rs")),
        ("start", include_str!("start.rs")),
    ];

    fn layer(m: &str) -> Option<usize> {
        LAYERS.iter().position(|l| l.contains(&m))
    }

    /// The crate modules `src` names as `crate::<module>` outside its test module.
    fn uses(src: &str) -> Vec<&str> {
        let code = src.split("#[cfg(test)]\nmod tests").next().unwrap();
        let mut out: Vec<&str> = code
            .match_indices("crate::")
            .map(|(i, _)| {
                let rest = &code[i + 7..];
                let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
                &rest[..end]
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn every_module_is_listed_once() {
        for (m, _) in SOURCES {
            assert!(layer(m).is_some(), "{m} has no layer");
        }
        let listed: usize = LAYERS.iter().map(|l| l.len()).sum();
        assert_eq!(listed, SOURCES.len());
    }

    #[test]
    fn no_module_uses_a_higher_layer_and_there_are_no_cycles() {
        for (m, src) in SOURCES {
            for u in uses(src) {
                let (lm, lu) = (layer(m).unwrap(), layer(u).unwrap_or_else(|| panic!("{m} uses crate::{u}")));
                assert!(lu <= lm, "{m} (layer {lm}) uses {u} (layer {lu})");
                if lu == lm {
                    let back = SOURCES.iter().find(|(n, _)| n == &u).map(|(_, s)| uses(s)).unwrap_or_default();
                    assert!(!back.contains(m), "{m} and {u} use each other");
                }
            }
        }
    }
}
