//! Raw Linux x86-64 system calls: the runtime's only way to talk to the kernel (D6).
//!
//! No libc: errno belongs to the program, and libc's locks may be held by the very thread
//! we interrupt. Every call returns `Result<usize, Errno>` decoded from the kernel's
//! `-4095..=-1` convention. `syscall` clobbers rcx and r11; everything else survives.
//!
//! # Which calls are `unsafe`
//! A call that can change memory the program or the runtime already uses is an `unsafe fn`
//! with a `# Safety` section: [`mmap`] (with `MAP_FIXED` it replaces whatever was mapped
//! there), [`munmap`], [`set_gs_base`] (every trampoline dereferences `gs:`) and
//! [`rt_sigaction`] (a handler runs on any thread at any instruction). Calls that only read
//! the kernel's view, write to a file descriptor or fill a buffer the caller lends them are
//! safe functions. This module is the bottom layer of rt-lib: it uses nothing of the crate.
#![allow(unsafe_code)]

use core::arch::asm;

/// A kernel error number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    pub const EINTR: Errno = Errno(4);
    pub const EEXIST: Errno = Errno(17);
    pub const EPERM: Errno = Errno(1);
    pub const EBUSY: Errno = Errno(16);
    pub const EINVAL: Errno = Errno(22);

    /// Short symbolic name for messages.
    pub fn name(self) -> &'static str {
        match self.0 {
            1 => "EPERM (operation not permitted)",
            2 => "ENOENT (no such file or directory)",
            12 => "ENOMEM (out of memory)",
            13 => "EACCES (permission denied)",
            17 => "EEXIST (file exists)",
            20 => "ENOTDIR (not a directory)",
            21 => "EISDIR (is a directory)",
            22 => "EINVAL (invalid argument)",
            24 => "EMFILE (too many open files)",
            27 => "EFBIG (file too large)",
            28 => "ENOSPC (no space left on device)",
            30 => "EROFS (read-only file system)",
            36 => "ENAMETOOLONG (file name too long)",
            40 => "ELOOP (path ends in a symbolic link)",
            _ => "system error",
        }
    }
}

pub type SysResult = Result<usize, Errno>;

fn decode(ret: isize) -> SysResult {
    if (-4095..0).contains(&ret) {
        Err(Errno(-ret as i32))
    } else {
        Ok(ret as usize)
    }
}

macro_rules! syscall {
    ($nr:expr $(, $a:expr)*) => { syscall!(@n $nr; [$($a),*]) };
    (@n $nr:expr; []) => {{
        let ret: isize;
        // Safety: the caller checked the arguments of this system call.
        unsafe { asm!("syscall", inlateout("rax") $nr as isize => ret, lateout("rcx") _, lateout("r11") _, options(nostack)); }
        decode(ret)
    }};
    (@n $nr:expr; [$a1:expr]) => {{
        let ret: isize;
        // Safety: as above.
        unsafe { asm!("syscall", inlateout("rax") $nr as isize => ret, in("rdi") $a1, lateout("rcx") _, lateout("r11") _, options(nostack)); }
        decode(ret)
    }};
    (@n $nr:expr; [$a1:expr, $a2:expr]) => {{
        let ret: isize;
        // Safety: as above.
        unsafe { asm!("syscall", inlateout("rax") $nr as isize => ret, in("rdi") $a1, in("rsi") $a2, lateout("rcx") _, lateout("r11") _, options(nostack)); }
        decode(ret)
    }};
    (@n $nr:expr; [$a1:expr, $a2:expr, $a3:expr]) => {{
        let ret: isize;
        // Safety: as above.
        unsafe { asm!("syscall", inlateout("rax") $nr as isize => ret, in("rdi") $a1, in("rsi") $a2, in("rdx") $a3, lateout("rcx") _, lateout("r11") _, options(nostack)); }
        decode(ret)
    }};
    (@n $nr:expr; [$a1:expr, $a2:expr, $a3:expr, $a4:expr]) => {{
        let ret: isize;
        // Safety: as above.
        unsafe { asm!("syscall", inlateout("rax") $nr as isize => ret, in("rdi") $a1, in("rsi") $a2, in("rdx") $a3, in("r10") $a4, lateout("rcx") _, lateout("r11") _, options(nostack)); }
        decode(ret)
    }};
    (@n $nr:expr; [$a1:expr, $a2:expr, $a3:expr, $a4:expr, $a5:expr, $a6:expr]) => {{
        let ret: isize;
        // Safety: as above.
        unsafe { asm!("syscall", inlateout("rax") $nr as isize => ret, in("rdi") $a1, in("rsi") $a2, in("rdx") $a3, in("r10") $a4, in("r8") $a5, in("r9") $a6, lateout("rcx") _, lateout("r11") _, options(nostack)); }
        decode(ret)
    }};
}

const SYS_READ: usize = 0;
const SYS_WRITE: usize = 1;
const SYS_CLOSE: usize = 3;
const SYS_PREAD64: usize = 17;
const SYS_PWRITE64: usize = 18;
const SYS_FSTAT: usize = 5;
const SYS_MMAP: usize = 9;
const SYS_MUNMAP: usize = 11;
const SYS_SCHED_YIELD: usize = 24;
const SYS_MADVISE: usize = 28;
const SYS_GETPID: usize = 39;
const SYS_FTRUNCATE: usize = 77;
const SYS_MKDIR: usize = 83;
const SYS_GETUID: usize = 102;
const SYS_GETGID: usize = 104;
const SYS_GETEUID: usize = 107;
const SYS_GETEGID: usize = 108;
const SYS_GETPPID: usize = 110;
const SYS_PRCTL: usize = 157;
const SYS_ARCH_PRCTL: usize = 158;
const SYS_GETTID: usize = 186;
const SYS_CLOCK_GETTIME: usize = 228;
const SYS_OPENAT: usize = 257;
const SYS_PRLIMIT64: usize = 302;
const SYS_FALLOCATE: usize = 285;
const RLIMIT_AS: usize = 9;
const SYS_UNLINKAT: usize = 263;
const SYS_GETDENTS64: usize = 217;
const SYS_NANOSLEEP: usize = 35;
const SYS_RSEQ: usize = 334;

pub const AT_FDCWD: isize = -100;
pub const O_RDONLY: usize = 0;
pub const O_WRONLY: usize = 0o1;
pub const O_RDWR: usize = 0o2;
pub const O_APPEND: usize = 0o2000;
pub const O_CREAT: usize = 0o100;
pub const O_EXCL: usize = 0o200;
pub const O_NOFOLLOW: usize = 0o400000;
pub const O_DIRECTORY: usize = 0o200000;
pub const O_CLOEXEC: usize = 0o2000000;

pub const PROT_NONE: usize = 0;
pub const PROT_READ: usize = 1;
pub const PROT_WRITE: usize = 2;
pub const MAP_SHARED: usize = 0x01;
pub const MAP_PRIVATE: usize = 0x02;
pub const MAP_FIXED: usize = 0x10;
pub const MAP_ANONYMOUS: usize = 0x20;
pub const MAP_NORESERVE: usize = 0x4000;
/// madvise: page faults in the range read no pages around the faulting one.
pub const MADV_RANDOM: usize = 1;
/// madvise: a fork child sees the range zero-filled (private anonymous memory, Linux 4.14).
pub const MADV_WIPEONFORK: usize = 18;

const ARCH_SET_GS: usize = 0x1001;
const ARCH_SET_FS: usize = 0x1002;
const ARCH_GET_FS: usize = 0x1003;
const ARCH_GET_GS: usize = 0x1004;

pub const CLOCK_REALTIME: usize = 0;
pub const CLOCK_MONOTONIC: usize = 1;

/// Write all of `buf` to `fd`, retrying on EINTR and short writes; errors are dropped
/// (used only for diagnostics on stderr).
pub fn write_all(fd: i32, mut buf: &[u8]) {
    while !buf.is_empty() {
        match syscall!(SYS_WRITE, fd as isize, buf.as_ptr(), buf.len()) {
            Ok(0) => return,
            Ok(n) => buf = &buf[n.min(buf.len())..],
            Err(Errno::EINTR) => continue,
            Err(_) => return,
        }
    }
}

/// read(2) into `buf`.
pub fn read(fd: i32, buf: &mut [u8]) -> SysResult {
    syscall!(SYS_READ, fd as isize, buf.as_mut_ptr(), buf.len())
}

/// pread64(2) into `buf` at file offset `off`.
pub fn pread(fd: i32, buf: &mut [u8], off: u64) -> SysResult {
    syscall!(SYS_PREAD64, fd as isize, buf.as_mut_ptr(), buf.len(), off as usize)
}

/// pwrite64(2) of `buf` at file offset `off`.
pub fn pwrite(fd: i32, buf: &[u8], off: u64) -> SysResult {
    syscall!(SYS_PWRITE64, fd as isize, buf.as_ptr(), buf.len(), off as usize)
}

/// openat(AT_FDCWD, path, flags, mode); `path` must be NUL-terminated.
pub fn open(path: &[u8], flags: usize, mode: usize) -> SysResult {
    debug_assert!(path.last() == Some(&0));
    syscall!(SYS_OPENAT, AT_FDCWD, path.as_ptr(), flags, mode)
}

/// unlinkat(AT_FDCWD, path, 0); `path` must be NUL-terminated. Errors are dropped.
pub fn unlink(path: &[u8]) {
    debug_assert!(path.last() == Some(&0));
    let _ = syscall!(SYS_UNLINKAT, AT_FDCWD, path.as_ptr(), 0usize);
}

/// openat(dir, name, flags, mode); `name` must be NUL-terminated.
pub fn openat(dir: i32, name: &[u8], flags: usize, mode: usize) -> SysResult {
    debug_assert!(name.last() == Some(&0));
    syscall!(SYS_OPENAT, dir as isize, name.as_ptr(), flags, mode)
}

/// getdents64(2): directory entries of `fd` into `buf` (`linux_dirent64` records); 0 at
/// the end.
pub fn getdents64(fd: i32, buf: &mut [u8]) -> SysResult {
    syscall!(SYS_GETDENTS64, fd as isize, buf.as_mut_ptr(), buf.len())
}

/// mkdir(path, mode); `path` must be NUL-terminated.
pub fn mkdir(path: &[u8], mode: usize) -> SysResult {
    debug_assert!(path.last() == Some(&0));
    syscall!(SYS_MKDIR, path.as_ptr(), mode)
}

/// Owner and mode of an open file (fstat's `st_uid` and `st_mode`).
pub fn owner_and_mode(fd: i32) -> Result<(u32, u32), Errno> {
    // struct stat of x86-64 Linux: 144 bytes, st_mode at 24, st_uid at 28.
    let mut st = [0u64; 18];
    syscall!(SYS_FSTAT, fd as isize, st.as_mut_ptr())?;
    let w = st[3];
    Ok(((w >> 32) as u32, w as u32))
}

/// The soft `RLIMIT_AS` of this process in bytes (`None`: unlimited or unreadable).
pub fn address_space_limit() -> Option<u64> {
    let mut lim = [0u64; 2]; // struct rlimit64 { rlim_cur, rlim_max }
    syscall!(SYS_PRLIMIT64, 0usize, RLIMIT_AS, 0usize, lim.as_mut_ptr()).ok()?;
    (lim[0] != u64::MAX).then_some(lim[0])
}

pub fn geteuid() -> u32 {
    syscall!(SYS_GETEUID).unwrap_or(usize::MAX) as u32
}

pub fn close(fd: i32) {
    let _ = syscall!(SYS_CLOSE, fd as isize);
}

pub fn ftruncate(fd: i32, len: u64) -> SysResult {
    syscall!(SYS_FTRUNCATE, fd as isize, len as usize)
}

/// Give `[off, off + len)` of the file blocks now, so that writing it through a shared
/// mapping never raises SIGBUS on a full file system. `Ok` also where the file system cannot
/// allocate ahead (EOPNOTSUPP): nothing better can be done there.
pub fn allocate(fd: i32, off: u64, len: u64) -> SysResult {
    match syscall!(SYS_FALLOCATE, fd as isize, 0usize, off as usize, len as usize) {
        Err(Errno(95)) => Ok(0), // EOPNOTSUPP
        r => r,
    }
}

/// mmap; `addr` 0 lets the kernel choose.
///
/// # Safety
/// With `MAP_FIXED`, `[addr, addr + len)` must hold nothing that any live reference, the
/// program or another thread still uses as it was: the kernel replaces it silently. Without
/// `MAP_FIXED` the call only adds memory and is harmless.
pub unsafe fn mmap(addr: usize, len: usize, prot: usize, flags: usize, fd: i32, off: u64) -> SysResult {
    syscall!(SYS_MMAP, addr, len, prot, flags, fd as isize, off as usize)
}

/// munmap.
///
/// # Safety
/// Nothing may use `[addr, addr + len)` afterwards: no reference into it may be live, and no
/// thread's GS base may point into it.
pub unsafe fn munmap(addr: usize, len: usize) -> SysResult {
    syscall!(SYS_MUNMAP, addr, len)
}

/// madvise with an advice that only changes how the kernel pages the range in (never its
/// contents in this process; `MADV_WIPEONFORK` zeroes them in a fork child).
pub fn madvise(addr: usize, len: usize, advice: usize) -> SysResult {
    syscall!(SYS_MADVISE, addr, len, advice)
}

pub fn sched_yield() {
    let _ = syscall!(SYS_SCHED_YIELD);
}

pub fn getpid() -> u32 {
    syscall!(SYS_GETPID).unwrap_or(0) as u32
}

pub fn getppid() -> u32 {
    syscall!(SYS_GETPPID).unwrap_or(0) as u32
}

/// Real and effective user or group ids differ (a set-id program), whatever the auxv says.
pub fn setid() -> bool {
    syscall!(SYS_GETUID) != syscall!(SYS_GETEUID) || syscall!(SYS_GETGID) != syscall!(SYS_GETEGID)
}

pub fn gettid() -> u32 {
    syscall!(SYS_GETTID).unwrap_or(0) as u32
}

/// The calling thread's name (comm), NUL-padded, as `prctl(PR_GET_NAME)` gives it.
pub fn thread_name(out: &mut [u8; 16]) {
    const PR_GET_NAME: usize = 16;
    let _ = syscall!(SYS_PRCTL, PR_GET_NAME, out.as_mut_ptr());
}

/// Point this thread's GS base at `base`.
///
/// # Safety
/// Every trampoline reads (and, once the owner check passes, writes) `gs:`-relative memory:
/// `base` must be a column header (or the runtime's dummy header) that stays mapped for as
/// long as the thread may run instrumented code.
pub unsafe fn set_gs_base(base: usize) -> SysResult {
    syscall!(SYS_ARCH_PRCTL, ARCH_SET_GS, base)
}

/// This thread's GS base (0 if it cannot be read).
pub fn gs_base() -> u64 {
    let mut base = 0u64;
    match syscall!(SYS_ARCH_PRCTL, ARCH_GET_GS, &mut base as *mut u64) {
        Ok(_) => base,
        Err(_) => 0,
    }
}

/// This thread's FS base (0: none yet, as in a static program before its libc set up TLS).
pub fn fs_base() -> u64 {
    let mut base = 0u64;
    match syscall!(SYS_ARCH_PRCTL, ARCH_GET_FS, &mut base as *mut u64) {
        Ok(_) => base,
        Err(_) => 0,
    }
}

/// Point this thread's FS base at `base`.
///
/// # Safety
/// Only where the thread has no TLS yet (FS base 0): every `fs:` access of the program and
/// of the trampolines then reads `base`, which must stay mapped and readable until the
/// program's libc replaces it.
pub unsafe fn set_fs_base(base: usize) -> SysResult {
    syscall!(SYS_ARCH_PRCTL, ARCH_SET_FS, base)
}

/// clock_gettime in nanoseconds (0 on failure).
pub fn clock_ns(clock: usize) -> u64 {
    let mut ts = [0i64; 2];
    match syscall!(SYS_CLOCK_GETTIME, clock, ts.as_mut_ptr()) {
        Ok(_) => (ts[0] as u64).wrapping_mul(1_000_000_000).wrapping_add(ts[1] as u64),
        Err(_) => 0,
    }
}

/// CLOCK_THREAD_CPUTIME_ID: CPU time of the calling thread.
pub const CLOCK_THREAD_CPUTIME_ID: usize = 3;

/// The time-stamp counter.
#[inline(always)]
pub fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // Safety: rdtsc only reads the counter.
    unsafe { asm!("rdtsc", out("eax") lo, out("edx") hi, options(nostack, nomem, preserves_flags)) };
    (hi as u64) << 32 | lo as u64
}

const SYS_PERF_EVENT_OPEN: usize = 298;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_FLAG_FD_CLOEXEC: usize = 8;
/// `perf_event_attr` bits: disabled(0) inherit(1) pinned(2) exclusive(3) exclude_user(4)
/// exclude_kernel(5) exclude_hv(6).
const ATTR_EXCLUDE_KERNEL_HV: u64 = 1 << 5 | 1 << 6;
/// Offset of the `lock` (sequence) word in `struct perf_event_mmap_page`.
pub const PERF_PAGE_LOCK_OFFSET: usize = 8;

/// Open a task-clock event for the calling thread and map its user page read-only; the fd
/// is closed again (the mapping keeps the event alive), so the program never sees it.
/// Returns the page's address.
pub fn perf_task_clock_page() -> SysResult {
    // struct perf_event_attr, PERF_ATTR_SIZE_VER0 = 64 bytes is accepted by every kernel:
    // type u32, size u32, config u64, sample_period u64, sample_type u64, read_format u64,
    // flags u64, wakeup u32, bp_type u32, config1 u64.
    let mut attr = [0u64; 8];
    attr[0] = PERF_TYPE_SOFTWARE as u64 | (64u64 << 32);
    attr[1] = PERF_COUNT_SW_TASK_CLOCK;
    attr[5] = ATTR_EXCLUDE_KERNEL_HV;
    let fd = syscall!(SYS_PERF_EVENT_OPEN, attr.as_ptr(), 0usize, -1isize, -1isize, PERF_FLAG_FD_CLOEXEC, 0usize)?;
    // Safety: not MAP_FIXED: the kernel picks a free range, nothing existing changes.
    let page = unsafe { mmap(0, 4096, PROT_READ, MAP_SHARED, fd as i32, 0) };
    close(fd as i32);
    page
}

/// `rseq(area, len, 0, sig)`: register `area` as the calling thread's rseq area. The kernel
/// (kernel/rseq.c) answers EBUSY when exactly this area, length and signature are registered
/// already, EPERM when the area and length are but the signature is not, EINVAL when another
/// area (or length) is, or when `area` is not 32-byte aligned; with no area registered it
/// registers this one (and writes its `cpu_id` fields from then on). Comparing addresses
/// reads no memory, so probing with an address the thread does not own is harmless once an
/// area is registered.
///
/// # Safety
/// With no area registered, `area` must be `len` writable bytes that stay valid (and unused
/// by anything else) for the rest of the thread's life: the kernel writes to it at every
/// return to user space after a preemption, a migration or a signal.
pub unsafe fn rseq_register(area: usize, len: u32, sig: u32) -> SysResult {
    syscall!(SYS_RSEQ, area, len as usize, 0usize, sig as usize)
}

/// `nanosleep` of `ns` nanoseconds (the calling thread blocks: a voluntary context switch,
/// even for 0 on Linux, which puts the thread on an hrtimer and schedules).
pub fn nanosleep(ns: u64) -> SysResult {
    let ts = [(ns / 1_000_000_000) as i64, (ns % 1_000_000_000) as i64];
    syscall!(SYS_NANOSLEEP, ts.as_ptr(), 0usize)
}

/// The thread pointer: `fs:[0]` holds it by the x86-64 TLS ABI.
#[inline(always)]
pub fn thread_pointer() -> u64 {
    let tp: u64;
    // Safety: reading fs:[0] is defined by the psABI for every thread with TLS set up.
    unsafe { asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags)) };
    tp
}

/// The 32-bit word at `fs:[off]`.
///
/// # Safety
/// `off` must lie inside the thread control block of the running thread.
#[inline(always)]
pub unsafe fn fs_u32(off: u32) -> u32 {
    let v: u32;
    // Safety: guaranteed by the caller.
    unsafe {
        asm!("mov {:e}, dword ptr fs:[{}]", out(reg) v, in(reg) off as u64, options(nostack, readonly, preserves_flags))
    };
    v
}

/// The current GS base as seen through `gs:[0]`, the column's self pointer.
///
/// # Safety
/// The GS base of this thread must point at a column header (the runtime sets it at init
/// for the main thread; other threads inherit it).
#[inline(always)]
pub unsafe fn gs_self() -> u64 {
    let v: u64;
    // Safety: guaranteed by the caller.
    unsafe { asm!("mov {}, qword ptr gs:[0]", out(reg) v, options(nostack, readonly, preserves_flags)) };
    v
}

// ---- Signals (the trap tactic, `trap.rs`) ----

const SYS_RT_SIGACTION: usize = 13;
const SYS_TGKILL: usize = 234;

pub const SIGTRAP: i32 = 5;
/// `sa_handler` value of the default action.
pub const SIG_DFL: usize = 0;
/// `sa_handler` value of "ignore".
pub const SIG_IGN: usize = 1;
pub const SA_SIGINFO: u64 = 0x0000_0004;
pub const SA_RESTORER: u64 = 0x0400_0000;
pub const SA_ONSTACK: u64 = 0x0800_0000;
pub const SA_NODEFER: u64 = 0x4000_0000;

/// The kernel's `struct sigaction` on x86-64 (not glibc's: the mask is the kernel's 8-byte
/// sigset and the restorer is explicit).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelSigaction {
    pub handler: usize,
    pub flags: u64,
    pub restorer: usize,
    pub mask: u64,
}

/// rt_sigaction(sig, act, oldact, 8): install `act` (if any), return the previous action
/// in `old` (if any).
///
/// # Safety
/// `act.handler` (unless `SIG_DFL`/`SIG_IGN`) and `act.restorer` must be code that is sound
/// to enter from any thread at any instruction with the kernel's handler ABI, for as long as
/// the action stays installed.
pub unsafe fn rt_sigaction(sig: i32, act: Option<&KernelSigaction>, old: Option<&mut KernelSigaction>) -> SysResult {
    let act = act.map_or(core::ptr::null(), |a| a as *const KernelSigaction);
    let old = old.map_or(core::ptr::null_mut(), |o| o as *mut KernelSigaction);
    syscall!(SYS_RT_SIGACTION, sig as isize, act, old, 8usize)
}

const SYS_RT_SIGPROCMASK: usize = 14;

/// rt_sigprocmask(how, set, old, 8) on the calling thread's 8-byte kernel mask (`set`
/// and `old` optional).
pub fn rt_sigprocmask(how: usize, set: Option<&u64>, old: Option<&mut u64>) -> SysResult {
    let set = set.map_or(core::ptr::null(), |s| s as *const u64);
    let old = old.map_or(core::ptr::null_mut(), |o| o as *mut u64);
    syscall!(SYS_RT_SIGPROCMASK, how as isize, set, old, 8usize)
}

/// tgkill(tgid, tid, sig): send `sig` to one thread.
pub fn tgkill(tgid: u32, tid: u32, sig: i32) -> SysResult {
    syscall!(SYS_TGKILL, tgid as isize, tid as isize, sig as isize)
}
