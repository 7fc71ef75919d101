//! stint's runtime: the code the rewriter links into every rewritten program.
//!
//! # Rules (D6)
//! - `no_std`, no libc, no allocator: the program's errno, malloc and locks are never
//!   touched, because the thread we run on may be inside any of them (a trampoline can fire
//!   inside malloc, or in a signal handler that interrupted malloc).
//! - Safe to enter from a signal handler: global bookkeeping uses thread-conscious locks
//!   ([`runtime::TcLock`]); a thread that finds itself already holding one skips the event
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
//! # Entry points (called by rewriter-generated stubs)
//! - [`stint_rt_init`]: from the entry stub, before the program's own entry point.
//! - [`stint_rt_slow`]: from a trampoline whose thread check missed.
#![cfg_attr(not(test), no_std)]
#![deny(unsafe_code)]

pub mod control;
pub mod runtime;
pub mod sys;
pub mod trap;
pub mod wrap;

#[cfg(stint_image)]
mod image;

pub use stint_layout::RtConfig;

/// Initialise the runtime: create the profile file, map it, set the initial gates.
///
/// `sp` is the process's initial stack pointer (argc, argv, envp, auxv).
///
/// # Safety
/// `config` must be the rewriter-emitted block of this program and `sp` the initial stack.
#[allow(unsafe_code)]
#[no_mangle]
pub unsafe extern "C" fn stint_rt_init(config: *const RtConfig, sp: *const usize) {
    // Safety: forwarded contract.
    unsafe { runtime::init(runtime::Cfg(config), sp) }
}

/// Slow path of the timer routines: enter (`op` 0) or leave (`op` 1) `point` with the
/// function-entry stack pointer `sp`, at TSC `tsc`.
///
/// # Safety
/// `config` must be the rewriter-emitted block of this program; GS points at the calling
/// thread's own column.
#[allow(unsafe_code)]
#[no_mangle]
pub unsafe extern "C" fn stint_rt_timer(config: *const RtConfig, op: u32, point: u32, sp: u64, tsc: u64) {
    // Safety: forwarded contract.
    unsafe { runtime::timer(runtime::Cfg(config), op, point, sp, tsc) }
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
    unsafe { runtime::slow(runtime::Cfg(config), point) as u32 }
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
    site: *const stint_layout::WrapSite,
) -> usize {
    // Safety: forwarded contract.
    unsafe { wrap::wrap([a0, a1, a2, a3], ra, site) }
}
