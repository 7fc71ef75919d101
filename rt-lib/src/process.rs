//! The process an image runs in (D22): its identity across `exec`, its arguments, and where
//! the runtime's rare diagnostics go.
//!
//! - **Identity.** A pid alone does not tell the image this one replaced by `exec` (same
//!   pid, same process) from an earlier process that had the same pid. The kernel's start
//!   time of the process (`/proc/self/stat` field 22, clock ticks since boot) is kept across
//!   `exec` and differs for a recycled pid, so (pid, start ticks) names one process.
//! - **Arguments** come from the initial stack the kernel built (argc, argv): read at start,
//!   and again by a fork child, whose copy of that stack is the parent's.
//! - **Diagnostics** (D22): the runtime writes nothing on the program's stdout or stderr in
//!   normal operation. When measurement is really lost it writes one `stint:` line, to stderr
//!   or, if `STINT_LOG` names a file, appended to that file (created 0600, never through a
//!   symbolic link; stderr if it cannot be opened, so the loss is never silent).
//!
//! - **Ends** (D22): how an image ended is recorded in its header ([`record_end`]): by the
//!   image itself when `main` returns (the main thunk) or it calls `exit`/`_exit`/`_Exit` or
//!   `syscall(SYS_exit_group)`, and by a rewritten parent that reaps it with `wait*`
//!   ([`record_child_end`]: the child's profile is found in the parent's profile directory
//!   by pid and parent pid), which is how a death by a signal gets recorded. No signal
//!   handler is ever installed for this. The scans of the directory use under 1 KiB of the
//!   caller's stack ([`scan_profiles`], [`open_dir_of`]): a `wait` wrapper may run on a
//!   thread with a tiny stack.
//! - **Profiles of this process** in a directory ([`scan_profiles`]): an image that `exec`
//!   replaced may have had another program name, so its profile is looked for by header (pid
//!   and kernel start time), not by name.
//!
//! - **A stack of its own** ([`on_own_stack`]): a fork child's runtime start-up (a new
//!   profile file, its header, meta and paths) runs on a stack the runtime maps for it, not on
//!   the forking thread's, which may be a `PTHREAD_STACK_MIN` thread's (issue 14).
//!
//! Layering: uses `sys` and `text`; used by `profile_file`, `threads`, `wrap` and `start`.
#![allow(unsafe_code)]

use crate::sys;
use crate::text::copy_into;
use core::mem::offset_of;
use stint_layout::{FileHeader, ProcessEnd, TextField, FILE_MAGIC, FILE_VERSION};

/// The process's start time in clock ticks since boot, from `/proc/self/stat`; 0 if it
/// cannot be read (no /proc).
pub fn start_ticks() -> u64 {
    stat_of(b"/proc/self/stat\0").map_or(0, |(_, t)| t)
}

/// (parent pid, start ticks) of the process whose `stat` file is `path` (NUL-terminated).
fn stat_of(path: &[u8]) -> Option<(u32, u64)> {
    let fd = sys::open(path, sys::O_RDONLY | sys::O_CLOEXEC, 0).ok()?;
    let mut buf = [0u8; 1024];
    let n = sys::read(fd as i32, &mut buf).unwrap_or(0);
    sys::close(fd as i32);
    let stat = buf.get(..n).unwrap_or(&[]);
    let ppid = stat_field(stat, 4).min(u32::MAX as u64) as u32;
    Some((ppid, parse_start_ticks(stat)))
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line.
fn parse_start_ticks(stat: &[u8]) -> u64 {
    stat_field(stat, 22)
}

/// Numeric field `k` (1-based, `k` ≥ 3) of a `/proc/<pid>/stat` line; 0 if absent or not a
/// number. The command name (field 2) is in parentheses and may hold spaces and
/// parentheses, so fields are counted after the last `)`.
fn stat_field(stat: &[u8], k: usize) -> u64 {
    let Some(close) = stat.iter().rposition(|&c| c == b')') else { return 0 };
    let rest = stat.get(close + 1..).unwrap_or(&[]);
    // After ")": field 3 (state) is the first.
    let Some(field) = rest.split(|&c| c == b' ' || c == b'\n').filter(|f| !f.is_empty()).nth(k.saturating_sub(3))
    else {
        return 0;
    };
    let mut v: u64 = 0;
    for &c in field {
        if !c.is_ascii_digit() {
            return 0;
        }
        v = v.saturating_mul(10).saturating_add((c - b'0') as u64);
    }
    v
}

/// Whether an ancestor of this process (its parent, the parent's parent, … up to 64 levels)
/// measures into a profile in the directory of `own_path` (a profile there of that pid and
/// kernel start time that records no end): with `children: off` in the control file such a
/// process is a child and does not measure (D22).
pub fn ancestor_measures(own_path: &[u8]) -> bool {
    let Some(dfd) = open_dir_of(own_path) else { return false };
    let mut found = [(0u32, 0u64); 64];
    let mut k = 0usize;
    scan_profiles(dfd, None, |_, _, h| {
        if h.end_how == ProcessEnd::Running as u32 && h.proc_start_ticks != 0 {
            if let Some(slot) = found.get_mut(k) {
                *slot = (h.pid, h.proc_start_ticks);
                k += 1;
            }
        }
        false
    });
    sys::close(dfd);
    let found = found.get(..k).unwrap_or(&[]);
    let mut pid = sys::getppid();
    for _ in 0..64 {
        if pid <= 1 || found.is_empty() {
            return false;
        }
        let mut path = [0u8; 32];
        let mut w = crate::text::Writer::new(&mut path);
        w.put(b"/proc/");
        w.num(pid as u64);
        w.put(b"/stat\0");
        let len = w.len();
        let Some((ppid, ticks)) = path.get(..len).and_then(stat_of) else { return false };
        if found.contains(&(pid, ticks)) {
            return true;
        }
        pid = ppid;
    }
    false
}

/// Bytes of the stack [`on_own_stack`] maps (reserved, not committed: only the pages the
/// work touches cost memory).
const OWN_STACK: usize = 256 * 1024;

/// Run `f` on a stack of its own, mapped for the call and unmapped after it; on the caller's
/// stack if no stack can be mapped (what it did before). For work that needs more stack than
/// the program's thread may have: a fork child's start-up runs on the stack of whatever thread
/// forked, and a thread of `PTHREAD_STACK_MIN` bytes has a few KiB left.
pub fn on_own_stack<F: FnOnce()>(f: F) {
    let rw = sys::PROT_READ | sys::PROT_WRITE;
    let flags = sys::MAP_PRIVATE | sys::MAP_ANONYMOUS | sys::MAP_NORESERVE;
    // Safety: without MAP_FIXED the call only adds memory.
    let Ok(base) = (unsafe { sys::mmap(0, OWN_STACK, rw, flags, -1, 0) }) else {
        f();
        return;
    };
    let mut slot = Some(f);
    /// The stack's first frame: takes the closure out of the caller's slot and runs it.
    extern "C" fn enter<F: FnOnce()>(slot: *mut Option<F>) {
        // Safety: `slot` is the live `Option` of `on_own_stack`'s frame, which waits for us.
        if let Some(f) = unsafe { (*slot).take() } {
            f();
        }
    }
    let top = (base + OWN_STACK) & !15;
    // Safety: `top` is the 16-aligned end of a mapping of ours, so the call finds the stack
    // aligned as the ABI wants; r12 (callee-saved, so `enter` keeps it) holds our stack
    // pointer across the call and puts it back; every register the C ABI lets `enter`
    // change is declared clobbered. The red zone below our stack pointer is not touched (the
    // call pushes on the new stack). `enter` never unwinds (the runtime aborts on panic).
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {enter}",
            "mov rsp, r12",
            top = in(reg) top,
            enter = in(reg) enter::<F> as *const () as usize,
            in("rdi") &raw mut slot,
            out("r12") _,
            clobber_abi("C"),
        );
    }
    // Safety: the mapping is ours and the call that used it has returned.
    let _ = unsafe { sys::munmap(base, OWN_STACK) };
}

/// Copy the arguments of the initial stack `sp` into `out` (each NUL-terminated, cut at an
/// argument boundary when they do not fit). Returns (argc, cut).
///
/// # Safety
/// `sp` is 0 or the initial process stack the kernel built (argc, then argc pointers to
/// NUL-terminated strings), still mapped.
pub unsafe fn read_argv(sp: u64, out: &mut TextField) -> (u32, bool) {
    *out = TextField::default();
    if sp == 0 {
        return (0, false);
    }
    let sp = sp as *const usize;
    // Safety: per the contract.
    let argc = unsafe { *sp };
    let mut flat = [0u8; core::mem::size_of::<TextField>()];
    let mut used = 0usize;
    let mut cut = false;
    for i in 0..argc {
        // Safety: argv[i] for i < argc is a valid string pointer (the contract).
        let p = unsafe { *sp.add(1 + i) } as *const u8;
        if p.is_null() {
            break;
        }
        let mut len = 0usize;
        // Safety: NUL-terminated (the contract); we stop at the NUL or when out of room.
        while unsafe { *p.add(len) } != 0 {
            len += 1;
        }
        // Keep one NUL at the end of the field too.
        let room = flat.len();
        let Some(dst) = flat.get_mut(used..used + len + 1).filter(|_| used + len + 1 < room) else {
            cut = true;
            break;
        };
        // Safety: `len` bytes at `p` were just read.
        let src = unsafe { core::slice::from_raw_parts(p, len) };
        if let Some((last, head)) = dst.split_last_mut() {
            head.copy_from_slice(src);
            *last = 0;
        }
        used += len + 1;
    }
    for (d, &s) in out.iter_mut().flat_map(|r| r.iter_mut()).zip(flat.iter()) {
        *d = s;
    }
    (argc as u32, cut)
}

/// Write one diagnostic line: appended to the `STINT_LOG` file when `log` (NUL-terminated)
/// names one that can be opened, else on stderr.
pub fn diagnostic(log: &[u8], line: &[u8]) {
    if log.first().is_some_and(|&c| c != 0) && log.contains(&0) {
        let flags = sys::O_WRONLY | sys::O_APPEND | sys::O_CREAT | sys::O_NOFOLLOW | sys::O_CLOEXEC;
        if let Ok(fd) = sys::open(log, flags, 0o600) {
            sys::write_all(fd as i32, line);
            sys::close(fd as i32);
            return;
        }
    }
    sys::write_all(2, line);
}

/// Record how the image of `hdr` ended: the status (or signal), the time, then `end_how`
/// (last, so a reader that sees the end sees its status).
///
/// # Safety
/// `hdr` is the mapped header of a profile of this process (or of a child's, mapped by the
/// caller), writable.
pub unsafe fn record_end(hdr: *mut FileHeader, how: ProcessEnd, status: u32) {
    let now = sys::clock_ns(sys::CLOCK_REALTIME);
    // Safety: per the contract; plain stores of aligned fields, `end_how` last.
    unsafe {
        core::ptr::write_volatile(&raw mut (*hdr).end_status, status);
        core::ptr::write_volatile(&raw mut (*hdr).end_realtime_ns, now);
        core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
        core::ptr::write_volatile(&raw mut (*hdr).end_how, how as u32);
    }
}

/// The same as [`record_end`] into the profile file open as `fd` (read-write).
fn record_end_fd(fd: i32, how: ProcessEnd, status: u32) {
    let now = sys::clock_ns(sys::CLOCK_REALTIME);
    let _ = sys::pwrite(fd, &status.to_le_bytes(), offset_of!(FileHeader, end_status) as u64);
    let _ = sys::pwrite(fd, &now.to_le_bytes(), offset_of!(FileHeader, end_realtime_ns) as u64);
    let _ = sys::pwrite(fd, &(how as u32).to_le_bytes(), offset_of!(FileHeader, end_how) as u64);
}

/// How a child ended, from the status word `wait`/`waitpid`/`wait4` stored: (exit, status)
/// or (signal, number); `None` for a stopped or continued child.
pub fn wait_status(status: i32) -> Option<(ProcessEnd, u32)> {
    let sig = (status & 0x7f) as u32;
    match sig {
        0 => Some((ProcessEnd::Exit, ((status >> 8) & 0xff) as u32)),
        0x7f => None,                  // stopped
        _ if status == 0xffff => None, // continued
        s => Some((ProcessEnd::Signal, s)),
    }
}

/// `CLD_EXITED`, `CLD_KILLED`, `CLD_DUMPED` (`siginfo_t::si_code` for `SIGCHLD`).
const CLD_EXITED: i32 = 1;
const CLD_KILLED: i32 = 2;
const CLD_DUMPED: i32 = 3;

/// How a child ended, from the `siginfo_t` `waitid` filled: (pid, how, status or signal);
/// `None` when no child was reported (`WNOHANG`) or it only stopped or continued.
pub fn waitid_status(info: &[u8; 128]) -> Option<(u32, ProcessEnd, u32)> {
    let word = |off: usize| {
        let b = info.get(off..off + 4).and_then(|b| <[u8; 4]>::try_from(b).ok()).unwrap_or([0; 4]);
        i32::from_ne_bytes(b)
    };
    // si_signo at 0, si_code at 8, then (SIGCHLD) si_pid at 16, si_uid, si_status at 24.
    let (code, pid, status) = (word(8), word(16), word(24));
    if pid <= 0 {
        return None;
    }
    match code {
        CLD_EXITED => Some((pid as u32, ProcessEnd::Exit, (status & 0xff) as u32)),
        CLD_KILLED | CLD_DUMPED => Some((pid as u32, ProcessEnd::Signal, status as u32)),
        _ => None,
    }
}

/// What the scans of a profile directory look at in a profile's header: the identity and
/// end fields, which come before the header's large text fields, so a scan reads
/// [`IDS_PREFIX`] bytes of each file instead of the whole header (a wrapper of `wait` runs on
/// the caller's stack, which may be small).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfileIds {
    pub pid: u32,
    pub ppid: u32,
    pub end_how: u32,
    pub start_monotonic_ns: u64,
    pub proc_start_ticks: u64,
}

/// The bytes of a header [`ProfileIds`] come from.
const IDS_PREFIX: usize = offset_of!(FileHeader, argv);
const _: () = assert!(offset_of!(FileHeader, end_how) + 4 <= IDS_PREFIX);
const _: () = assert!(offset_of!(FileHeader, proc_start_ticks) + 8 <= IDS_PREFIX);
const _: () = assert!(IDS_PREFIX <= 256);

/// The [`ProfileIds`] of the profile open as `fd`, if its header is complete (it is written
/// magic last) and of this layout.
pub fn read_ids(fd: i32) -> Option<ProfileIds> {
    let mut b = [0u8; IDS_PREFIX];
    if sys::pread(fd, &mut b, 0).ok()? != IDS_PREFIX {
        return None;
    }
    let u32_at = |off: usize| b.get(off..off + 4).and_then(|x| <[u8; 4]>::try_from(x).ok()).map(u32::from_le_bytes);
    let u64_at = |off: usize| b.get(off..off + 8).and_then(|x| <[u8; 8]>::try_from(x).ok()).map(u64::from_le_bytes);
    let magic = b.get(offset_of!(FileHeader, magic)..offset_of!(FileHeader, magic) + 8)?;
    if magic != FILE_MAGIC || u32_at(offset_of!(FileHeader, version))? != FILE_VERSION {
        return None;
    }
    Some(ProfileIds {
        pid: u32_at(offset_of!(FileHeader, pid))?,
        ppid: u32_at(offset_of!(FileHeader, ppid))?,
        end_how: u32_at(offset_of!(FileHeader, end_how))?,
        start_monotonic_ns: u64_at(offset_of!(FileHeader, start_monotonic_ns))?,
        proc_start_ticks: u64_at(offset_of!(FileHeader, proc_start_ticks))?,
    })
}

/// Call `f(name_nul, fd, ids)` for every profile file (a name ending in `.stint`, and
/// holding `needle` if given, whose header is complete and of this layout) in the directory
/// open as `dfd`; each file is opened read-write, never through a symbolic link, and closed
/// after `f` unless `f` returns true (then `f` keeps the descriptor). Under 1 KiB of stack:
/// the directory is read in small chunks (a record is at most 280 bytes).
pub fn scan_profiles(dfd: i32, needle: Option<&[u8]>, mut f: impl FnMut(&[u8], i32, &ProfileIds) -> bool) {
    let mut buf = [0u8; 512];
    loop {
        let n = match sys::getdents64(dfd, &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut off = 0usize;
        while let Some(rec) = buf.get(off..n) {
            // linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name.
            let reclen = rec.get(16..18).map_or(0, |b| u16::from_ne_bytes([b[0], b[1]]) as usize);
            if reclen == 0 {
                break;
            }
            let name_nul = rec.get(19..reclen.min(rec.len())).unwrap_or(&[]);
            let len = name_nul.iter().position(|&c| c == 0).unwrap_or(name_nul.len());
            off += reclen;
            let (Some(name), Some(name_nul)) = (name_nul.get(..len), name_nul.get(..len + 1)) else { continue };
            let holds = |n: &[u8]| name.windows(n.len().max(1)).any(|w| w == n);
            if !name.ends_with(b".stint") || needle.is_some_and(|n| !holds(n)) {
                continue;
            }
            let flags = sys::O_RDWR | sys::O_NOFOLLOW | sys::O_CLOEXEC;
            let Ok(fd) = sys::openat(dfd, name_nul, flags, 0) else { continue };
            let fd = fd as i32;
            let keep = read_ids(fd).is_some_and(|ids| f(name_nul, fd, &ids));
            if !keep {
                sys::close(fd);
            }
        }
    }
}

/// Open the directory of `path` (the runtime's profile path; read-only, a directory, not
/// inherited by exec). The directory's name is copied into a small stack buffer when it
/// fits (the usual `/tmp/stint-<uid>` or `$XDG_RUNTIME_DIR/stint`), else into one page
/// mapped for the moment: the wrappers of `wait` must stay small on the caller's stack.
pub fn open_dir_of(path: &[u8]) -> Option<i32> {
    let flags = sys::O_RDONLY | sys::O_DIRECTORY | sys::O_CLOEXEC;
    let mut small = [0u8; 192];
    let need = path.iter().rposition(|&b| b == b'/').map_or(2, |i| i.max(1) + 1);
    if need <= small.len() {
        let n = dir_of(&mut small, path);
        return small.get(..n).and_then(|d| sys::open(d, flags, 0).ok()).map(|fd| fd as i32);
    }
    const PAGE: usize = 4096;
    let prot = sys::PROT_READ | sys::PROT_WRITE;
    // Safety: a fresh private anonymous mapping, unmapped below.
    let at = unsafe { sys::mmap(0, PAGE, prot, sys::MAP_PRIVATE | sys::MAP_ANONYMOUS, -1, 0) }.ok()?;
    // Safety: the page just mapped, ours until the munmap.
    let page = unsafe { core::slice::from_raw_parts_mut(at as *mut u8, PAGE) };
    let n = dir_of(page, path);
    let fd = page.get(..n).filter(|_| n > 0).and_then(|d| sys::open(d, flags, 0).ok()).map(|fd| fd as i32);
    // Safety: our mapping, no longer used.
    let _ = unsafe { sys::munmap(at, PAGE) };
    fd
}

/// The directory part of `path` (NUL-terminated, into `out`): `.` for a bare name.
pub fn dir_of(out: &mut [u8], path: &[u8]) -> usize {
    match path.iter().rposition(|&b| b == b'/') {
        Some(0) => copy_into(out, &[b"/", b"\0"]),
        Some(i) => copy_into(out, &[path.get(..i).unwrap_or(b"."), b"\0"]),
        None => copy_into(out, &[b".\0"]),
    }
}

/// A rewritten parent reaped child `child` (`how`, `status`): record it in the child's
/// profile, found in the directory of the parent's own profile `own_path` (children write
/// theirs next to it, whatever their program name) as the newest profile of pid `child`
/// whose parent is this process (`me`) and that `exec` did not end. The parent's view wins
/// over what the child recorded: it is what the kernel reported. Raw system calls only
/// (errno is the program's).
pub fn record_child_end(own_path: &[u8], me: u32, child: u32, how: ProcessEnd, status: u32) {
    let Some(dfd) = open_dir_of(own_path) else { return };
    let mut best: Option<(i32, u64)> = None;
    scan_profiles(dfd, None, |_, fd, h| {
        let fits = h.pid == child && h.ppid == me && h.end_how != ProcessEnd::Exec as u32;
        if !fits || best.is_some_and(|(_, t)| t >= h.start_monotonic_ns) {
            return false;
        }
        if let Some((old, _)) = best.replace((fd, h.start_monotonic_ns)) {
            sys::close(old);
        }
        true
    });
    if let Some((fd, _)) = best {
        record_end_fd(fd, how, status);
        sys::close(fd);
    }
    sys::close(dfd);
}

#[cfg(test)]
mod tests {
    use super::*;
    use stint_layout::text_field;

    #[test]
    fn wait_status_words_decode_to_exit_or_signal() {
        assert_eq!(wait_status(3 << 8), Some((ProcessEnd::Exit, 3)));
        assert_eq!(wait_status(0), Some((ProcessEnd::Exit, 0)));
        assert_eq!(wait_status(9), Some((ProcessEnd::Signal, 9)));
        assert_eq!(wait_status(11 | 0x80), Some((ProcessEnd::Signal, 11)), "core dumped");
        assert_eq!(wait_status((19 << 8) | 0x7f), None, "stopped");
        assert_eq!(wait_status(0xffff), None, "continued");
        let mut info = [0u8; 128];
        assert_eq!(waitid_status(&info), None, "WNOHANG, nothing reported");
        info[8..12].copy_from_slice(&CLD_KILLED.to_ne_bytes());
        info[16..20].copy_from_slice(&4242i32.to_ne_bytes());
        info[24..28].copy_from_slice(&9i32.to_ne_bytes());
        assert_eq!(waitid_status(&info), Some((4242, ProcessEnd::Signal, 9)));
        info[8..12].copy_from_slice(&CLD_EXITED.to_ne_bytes());
        info[24..28].copy_from_slice(&300i32.to_ne_bytes());
        assert_eq!(waitid_status(&info), Some((4242, ProcessEnd::Exit, 44)));
    }

    #[test]
    fn dir_of_a_path() {
        let mut out = [0u8; 64];
        let n = dir_of(&mut out, b"/a/b/p.1.stint");
        assert_eq!(&out[..n], b"/a/b\0");
        let n = dir_of(&mut out, b"/p.stint");
        assert_eq!(&out[..n], b"/\0");
        let n = dir_of(&mut out, b"p.stint");
        assert_eq!(&out[..n], b".\0");
    }

    #[test]
    fn start_ticks_is_field_22_even_with_odd_command_names() {
        let line = b"4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200\n";
        assert_eq!(parse_start_ticks(line), 987654);
        assert_eq!(stat_field(line, 4), 1, "the parent pid");
        assert_eq!(parse_start_ticks(b"4242 (x) S 1"), 0, "too few fields");
        assert_eq!(parse_start_ticks(b""), 0);
        assert_ne!(start_ticks(), 0, "this process has a start time");
    }

    #[test]
    fn argv_is_copied_and_cut_at_an_argument_boundary() {
        let a = b"prog\0";
        let b = b"--flag=1\0";
        let stack: Vec<usize> = vec![2, a.as_ptr() as usize, b.as_ptr() as usize, 0];
        let mut f = TextField::default();
        // Safety: a stack laid out like the kernel's.
        let (argc, cut) = unsafe { read_argv(stack.as_ptr() as u64, &mut f) };
        assert_eq!((argc, cut), (2, false));
        assert_eq!(&f.as_flattened()[..14], b"prog\0--flag=1\0");
        assert_eq!(text_field(&f), b"prog");
        let long = vec![b'x'; 700];
        let long_nul: Vec<u8> = long.iter().copied().chain([0]).collect();
        let stack: Vec<usize> = vec![3, a.as_ptr() as usize, long_nul.as_ptr() as usize, long_nul.as_ptr() as usize, 0];
        // Safety: as above.
        let (argc, cut) = unsafe { read_argv(stack.as_ptr() as u64, &mut f) };
        assert_eq!((argc, cut), (3, true));
        assert_eq!(f.as_flattened().iter().filter(|&&c| c != 0).count(), 4 + 700, "prog and one long argument");
    }
}
