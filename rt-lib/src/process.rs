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
//! Layering: uses `sys`; used by `profile_file` and `start`.
#![allow(unsafe_code)]

use crate::sys;
use stint_layout::TextField;

/// The process's start time in clock ticks since boot, from `/proc/self/stat`; 0 if it
/// cannot be read (no /proc).
pub fn start_ticks() -> u64 {
    let Ok(fd) = sys::open(b"/proc/self/stat\0", sys::O_RDONLY | sys::O_CLOEXEC, 0) else {
        return 0;
    };
    let mut buf = [0u8; 1024];
    let n = sys::read(fd as i32, &mut buf).unwrap_or(0);
    sys::close(fd as i32);
    parse_start_ticks(buf.get(..n).unwrap_or(&[]))
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses, so fields are counted after the last `)`.
fn parse_start_ticks(stat: &[u8]) -> u64 {
    let Some(close) = stat.iter().rposition(|&c| c == b')') else { return 0 };
    let rest = stat.get(close + 1..).unwrap_or(&[]);
    // After ")": field 3 (state) is the first; starttime is field 22, the 20th.
    let Some(field) = rest.split(|&c| c == b' ').filter(|f| !f.is_empty()).nth(19) else { return 0 };
    let mut v: u64 = 0;
    for &c in field {
        if !c.is_ascii_digit() {
            return 0;
        }
        v = v.saturating_mul(10).saturating_add((c - b'0') as u64);
    }
    v
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

#[cfg(test)]
mod tests {
    use super::*;
    use stint_layout::text_field;

    #[test]
    fn start_ticks_is_field_22_even_with_odd_command_names() {
        let line = b"4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200\n";
        assert_eq!(parse_start_ticks(line), 987654);
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
