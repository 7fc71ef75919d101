//! The profile file (D9): create it, size it, map it, grow it, leave it (a fork child).
//!
//! ```text
//! program image (rewritten)                 anywhere (kernel's choice)
//! ┌──────────────────────────────┐          ┌──────────────────────────────────┐
//! │ ... original segments ...    │          │ reserved 64 GiB PROT_NONE        │
//! │ RW tail: RtState (2 pages)   │          │ ├ profile file [0, file_len)      │
//! │          control region ─────┼─ same ──▶│ │  header | ctl | meta | columns  │
//! │ RX: config, stubs, tramps    │  pages   │ └ grows in place (MAP_FIXED)      │
//! └──────────────────────────────┘          └──────────────────────────────────┘
//! ```
//! The control region of the file is mapped twice: in the big mapping (where `stint`
//! commands see it) and over the rewriter-reserved pages inside the program, so a trampoline
//! tests a gate with one RIP-relative load. Until start-up maps it, those pages are the
//! program's zero-filled bss: every gate is off, so code that runs before our entry stub (a
//! library constructor calling back into the program, an IFUNC resolver) is never measured.
//!
//! Where each part of the file goes is computed by `stint_layout::FileLayout` (through
//! [`file_layout`]), the same computation the tests' synthetic profiles use.
//!
//! Layering: uses `sys`, `text`, `state`, `clock` and `control` (the control file is applied
//! before the gates go live); used by `threads` (growth, fork) and `start`.
#![allow(unsafe_code)]

use crate::clock;
use crate::control;
use crate::process;
use crate::state::{Rt, Startup, ALL_METRICS, CONTROL_PATH_MAX, PATH_MAX};
use crate::sys::{self, Errno};
use crate::text::copy_into;
use core::mem::{offset_of, size_of};
use stint_layout::{
    set_text_field, Calibration, Control, FileHeader, FileLayout, FileShape, ProcessEnd, RtConfig, CFG_NO_SAMPLING,
    CONTROL_OFFSET, FILE_MAGIC, FILE_VERSION, FLAG_ARGV_TRUNCATED, FLAG_FORK_CHILD, FLAG_LOAD_BIAS,
    FLAG_PATH_TRUNCATED, FLAG_SAMPLING, FLAG_TID_KEY_VERIFIED, OBJ_BUCKETS, OBJ_CAP,
};

/// Address space reserved for the profile mapping; the file grows inside it. Under an
/// `RLIMIT_AS` the reservation takes at most `1 / AS_LIMIT_SHARE` of the limit (the program
/// needs the rest: a thread's stack alone is 8 MiB), and where the kernel refuses that, a
/// quarter is tried, and so on down to what the file needs at first: fewer threads fit then
/// (the others are counted as lost), but the program is measured.
const RESERVE: usize = 1 << 36;
const AS_LIMIT_SHARE: u64 = 16;
/// Columns the file holds at first; it doubles when full.
const INITIAL_COLUMNS: u32 = 16;

/// Where the parts of a new profile file go: the one computation of stint-layout, which the
/// synthetic profiles of the tests use too.
fn file_layout(cfg: &RtConfig) -> FileLayout {
    FileLayout::new(FileShape {
        n_points: cfg.n_points,
        n_metrics: cfg.n_metrics,
        n_counter_slots: cfg.n_counter_slots,
        ctl_len: cfg.ctl_len,
        meta_len: cfg.meta_len,
        obj_buckets: OBJ_BUCKETS,
        obj_cap: OBJ_CAP,
    })
}

/// How a profile file is opened: created here, never an existing file, never through a
/// symbolic link.
const NEW_FILE: usize = sys::O_RDWR | sys::O_CREAT | sys::O_EXCL | sys::O_NOFOLLOW | sys::O_CLOEXEC;

/// Names tried for one profile (`p.stint`, `p.1.stint`, …, `p.<N-1>.stint`) before the
/// runtime gives up with one line (D22: no image is refused a profile because a name is
/// taken; the bound only stops a directory full of them from costing unbounded time).
const MAX_NAMES: u32 = 1000;

/// The private per-user directory of `path_nul`'s file (D15), opened: created 0700 if
/// missing; it must then be a directory (not a symbolic link), owned by this user, with no
/// access for group or others. Files are created relative to this descriptor, so the checked
/// directory is the one they land in. Each refusal writes one line and returns `Err`.
fn open_private_dir(rt: &Rt, log: &[u8], path_nul: &[u8]) -> Result<i32, ()> {
    let path = path_nul.split_last().map_or(&[][..], |(_, p)| p);
    let slash = path.iter().rposition(|&b| b == b'/').ok_or(())?;
    let mut dir = [0u8; PATH_MAX];
    let n = copy_into(&mut dir, &[path.get(..slash.max(1)).unwrap_or(b"/"), b"\0"]);
    let Some(dir_nul) = dir.get(..n) else {
        warn(rt, log, b"profile directory path too long", path, None);
        return Err(());
    };
    let dir_path = dir_nul.split_last().map_or(&[][..], |(_, d)| d);
    match sys::mkdir(dir_nul, 0o700) {
        Ok(_) | Err(Errno::EEXIST) => {}
        Err(e) => {
            warn(rt, log, b"cannot create profile directory", dir_path, Some(e));
            return Err(());
        }
    }
    let dfd = match sys::open(dir_nul, sys::O_RDONLY | sys::O_DIRECTORY | sys::O_NOFOLLOW | sys::O_CLOEXEC, 0) {
        Ok(fd) => fd as i32,
        Err(e) => {
            warn(rt, log, b"cannot open profile directory", dir_path, Some(e));
            return Err(());
        }
    };
    let refusal: Option<&[u8]> = match sys::owner_and_mode(dfd) {
        Err(_) => Some(b"cannot check profile directory"),
        Ok((uid, _)) if uid != sys::geteuid() => Some(b"profile directory belongs to another user"),
        Ok((_, mode)) if mode & 0o077 != 0 => Some(b"profile directory is open to other users (chmod 700)"),
        Ok(_) => None,
    };
    if let Some(why) = refusal {
        warn(rt, log, why, dir_path, None);
        sys::close(dfd);
        return Err(());
    }
    Ok(dfd)
}

/// The `k`-th name for a profile whose first name is `base`, NUL-terminated, into `out`:
/// `base` itself for 0, else `.k` inserted before a final `.stint` (appended when there is
/// none). Returns the length without the NUL.
fn nth_name(out: &mut [u8], base: &[u8], k: u32) -> Option<usize> {
    let mut digits = [0u8; 10];
    let mut w = crate::text::Writer::new(&mut digits);
    w.num(k as u64);
    let nd = w.len();
    let num = digits.get(..nd)?;
    let (stem, ext): (&[u8], &[u8]) = match base.strip_suffix(b".stint") {
        Some(stem) if k > 0 => (stem, b".stint"),
        _ => (base, b""),
    };
    let parts: [&[u8]; 5] = if k == 0 { [base, b"", b"", b"", b"\0"] } else { [stem, b".", num, ext, b"\0"] };
    let want: usize = parts.iter().map(|p| p.len()).sum();
    if want > out.len() {
        return None;
    }
    Some(copy_into(out, &parts) - 1)
}

/// The image this one replaced by `exec`, found among the names already taken: the newest
/// profile of this very process (same pid and kernel start time) that records no end.
struct Predecessor {
    start_monotonic_ns: u64,
    path: [u8; PATH_MAX],
    len: usize,
}

/// Whether the existing file `name_nul` (relative to `dfd`) is a profile of an earlier image
/// of this process; if so and it is newer than `best`, remember it.
fn consider_predecessor(dfd: i32, name_nul: &[u8], path: &[u8], me: (u32, u64), best: &mut Option<Predecessor>) {
    if me.1 == 0 {
        return; // no process identity: never guess
    }
    let Ok(fd) = sys::openat(dfd, name_nul, sys::O_RDONLY | sys::O_NOFOLLOW | sys::O_CLOEXEC, 0) else {
        return;
    };
    let ids = process::read_ids(fd as i32);
    sys::close(fd as i32);
    if let Some(ids) = ids {
        consider_header(&ids, path, me, best);
    }
}

/// Whether the profile with header fields `h` (of the file at `path`, a complete header of
/// this layout) is the profile of an earlier image of this
/// process (`me`: pid and start ticks) newer than `best`; if so remember it.
fn consider_header(h: &process::ProfileIds, path: &[u8], me: (u32, u64), best: &mut Option<Predecessor>) {
    let (pid, start_ticks) = me;
    let same_process = start_ticks != 0
        && h.pid == pid
        && h.proc_start_ticks == start_ticks
        && h.end_how == ProcessEnd::Running as u32;
    if !same_process || best.as_ref().is_some_and(|b| b.start_monotonic_ns >= h.start_monotonic_ns) {
        return;
    }
    let mut p = Predecessor { start_monotonic_ns: h.start_monotonic_ns, path: [0; PATH_MAX], len: 0 };
    p.len = copy_into(&mut p.path, &[path]);
    *best = Some(p);
}

/// Mark the profile `name_nul` (relative to `dfd`) as ended by `exec`: its image is gone,
/// replaced by this one. Two fields of its header, written in place.
fn mark_ended_by_exec(dfd: i32, name_nul: &[u8]) {
    let Ok(fd) = sys::openat(dfd, name_nul, sys::O_RDWR | sys::O_NOFOLLOW | sys::O_CLOEXEC, 0) else {
        return;
    };
    let now = sys::clock_ns(sys::CLOCK_REALTIME);
    let _ = sys::pwrite(fd as i32, &now.to_le_bytes(), offset_of!(FileHeader, end_realtime_ns) as u64);
    let _ = sys::pwrite(fd as i32, &(ProcessEnd::Exec as u32).to_le_bytes(), offset_of!(FileHeader, end_how) as u64);
    sys::close(fd as i32);
}

/// Expand `%p` (pid) and `%%` in the template into `su.path`, NUL-terminated; returns the
/// length without the NUL. Written without indexing so the image has no panic paths.
fn expand_path(su: &mut Startup, pid: u32) -> Option<usize> {
    let mut digits = [0u8; 10];
    let mut nd = 0;
    let mut v = pid;
    for d in digits.iter_mut() {
        *d = b'0' + (v % 10) as u8;
        nd += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let tmpl = su.template.get(..su.template_len as usize)?;
    let mut out = su.path.iter_mut();
    let mut n = 0;
    let mut it = tmpl.iter().peekable();
    while let Some(&c) = it.next() {
        let subst = if c == b'%' { it.peek().copied().copied() } else { None };
        match subst {
            Some(b'p') => {
                it.next();
                for &d in digits.iter().take(nd).rev() {
                    *out.next()? = d;
                    n += 1;
                }
            }
            Some(b'%') => {
                it.next();
                *out.next()? = b'%';
                n += 1;
            }
            _ => {
                *out.next()? = c;
                n += 1;
            }
        }
    }
    *out.next()? = 0;
    Some(n)
}

/// One diagnostic line (on stderr, or into `STINT_LOG`, see [`process::diagnostic`]):
/// `stint: <program>: <what> '<path>'[: <errno>]; running without measurement`. Only for a
/// real loss of measurement.
pub fn warn(rt: &Rt, log: &[u8], what: &[u8], path: &[u8], err: Option<Errno>) {
    let mut buf = [0u8; 512 + crate::state::PATH_MAX];
    let e: &[u8] = err.map(|e| e.name().as_bytes()).unwrap_or(b"");
    let sep: &[u8] = if err.is_some() { b": " } else { b"" };
    let n = copy_into(
        &mut buf,
        &[
            b"stint: ",
            rt.cfg.program_name(),
            b": ",
            what,
            b" '",
            path,
            b"'",
            sep,
            e,
            b"; running without measurement\n",
        ],
    );
    process::diagnostic(log, buf.get(..n).unwrap_or(&[]));
}

/// Create the profile file: the first free name of the template's (see [`nth_name`]),
/// O_EXCL each time, never through a symbolic link, in the checked private directory when
/// the template is the default one. On the way, a taken name that holds a running profile of
/// this same process is the image this one replaced by `exec` (the newest such). Returns the
/// descriptor and that predecessor; the path created is left in `su.path` (`su.path_len`).
fn create_file(rt: &Rt, su: &mut Startup, log: &[u8], plen: usize) -> Result<(i32, Option<Predecessor>), ()> {
    let mut base = [0u8; PATH_MAX];
    let blen = copy_into(&mut base, &[su.path.get(..plen).unwrap_or(&[])]);
    let base = base.get(..blen).unwrap_or(&[]);
    let (dfd, dir_len) = if su.private_dir != 0 {
        let slash = base.iter().rposition(|&b| b == b'/').ok_or(())?;
        let path_nul = su.path.get(..plen + 1).ok_or(())?;
        (open_private_dir(rt, log, path_nul)?, slash + 1)
    } else {
        (sys::AT_FDCWD as i32, 0)
    };
    let me = (sys::getpid(), su.proc_start_ticks);
    let mut pred = None;
    let mut result = Err(());
    for k in 0..MAX_NAMES {
        let Some(n) = nth_name(&mut su.path, base, k) else {
            warn(rt, log, b"profile path too long", base, None);
            break;
        };
        let (Some(path), Some(name_nul)) = (su.path.get(..n), su.path.get(dir_len..n + 1)) else { break };
        match sys::openat(dfd, name_nul, NEW_FILE, 0o600) {
            Ok(fd) => {
                su.path_len = n as u32;
                result = Ok(fd as i32);
                break;
            }
            Err(Errno::EEXIST) => consider_predecessor(dfd, name_nul, path, me, &mut pred),
            Err(e) => {
                warn(rt, log, b"cannot create profile", path, Some(e));
                break;
            }
        }
        if k + 1 == MAX_NAMES {
            warn(rt, log, b"every profile name is taken (1000 tried)", base, None);
        }
    }
    if result.is_ok() && pred.is_none() && su.private_dir != 0 {
        // The image `exec` replaced may have had another program name (its profile another
        // base name) in the same private directory, where names hold the pid
        // (`<program>.<pid>[.<k>].stint`): look for it by header among those.
        let dir = base.get(..dir_len).unwrap_or(&[]);
        let mut needle = [0u8; 12];
        let mut w = crate::text::Writer::new(&mut needle);
        w.put(b".");
        w.num(me.0 as u64);
        w.put(b".");
        let nl = w.len();
        process::scan_profiles(dfd, needle.get(..nl), |name_nul, _, h| {
            let name = name_nul.split_last().map_or(&[][..], |(_, n)| n);
            let mut path = [0u8; PATH_MAX];
            let n = copy_into(&mut path, &[dir, name]);
            if let Some(path) = path.get(..n).filter(|_| n + 1 < PATH_MAX) {
                consider_header(h, path, me, &mut pred);
            }
            false
        });
    }
    if let (Ok(_), Some(p)) = (&result, &pred) {
        if let Some(name_nul) = p.path.get(dir_len..p.len + 1) {
            mark_ended_by_exec(dfd, name_nul);
        }
    }
    if su.private_dir != 0 {
        sys::close(dfd);
    }
    result.map(|fd| (fd, pred))
}

/// Create, size and map a profile file for this process; on success set the gates and
/// mark the runtime active. On failure write one line and leave every gate off.
/// `parent_profile` is the path of the profile of the process this one was forked from
/// (empty if none). Single-threaded: start-up, or the thread that handles a fork (it owns
/// `su`).
pub fn create(rt: &Rt, su: &mut Startup, extra_flags: u32, parent_profile: &[u8]) -> bool {
    let st = rt.st;
    let cfg = rt.cfg;
    let pid = sys::getpid();
    st.set_pid(pid);
    su.path_len = 0;
    if su.template_len == 0 {
        return false; // STINT_PROFILE= (empty): measurement off by request
    }
    let log = su.log_path;
    // `children: off` (D22): a fork child, or an image whose ancestor measures, does not.
    // Read before the path is expanded: reading the control file uses the same scratch.
    let children_off = control::children_off(su);
    let Some(plen) = expand_path(su, pid) else {
        warn(rt, &log, b"profile path too long", su.template.get(..su.template_len as usize).unwrap_or(&[]), None);
        return false;
    };
    if children_off
        && (extra_flags & FLAG_FORK_CHILD != 0 || process::ancestor_measures(su.path.get(..plen).unwrap_or(&[])))
    {
        return false;
    }
    let Ok((fd, pred)) = create_file(rt, su, &log, plen) else {
        return false;
    };
    // Copy the path so `su` can be lent to the control file below.
    let path_copy = su.path;
    let plen = su.path_len as usize;
    // Published (for a later fork child to name as its parent) only once the profile is.
    su.path_len = 0;
    let (Some(path), Some(path_nul)) = (path_copy.get(..plen), path_copy.get(..plen + 1)) else {
        return false;
    };
    let ctl_len = cfg.ctl_len;
    let lay = file_layout(&cfg);
    let file_len = lay.file_len(INITIAL_COLUMNS);

    let fail = |what: &[u8], e: Errno| {
        warn(rt, &log, what, path, Some(e));
        // We created it (O_EXCL): remove it rather than leave a file no reader accepts.
        sys::unlink(path_nul);
        sys::close(fd);
        st.set_active(false);
        false
    };
    if let Err(e) = sys::ftruncate(fd, file_len) {
        return fail(b"cannot size profile", e);
    }
    // Blocks for everything but the columns now (each column gets its blocks when a thread
    // takes it): on a full file system the program runs unmeasured instead of dying of
    // SIGBUS at its first write to the mapping.
    if let Err(e) = sys::allocate(fd, 0, lay.columns_offset) {
        return fail(b"no space for profile", e);
    }
    let flags = sys::MAP_PRIVATE | sys::MAP_ANONYMOUS | sys::MAP_NORESERVE;
    let page_up = |n: u64| (n as usize + 0xfff) & !0xfff;
    let least = page_up(file_len);
    let mut size = match sys::address_space_limit() {
        Some(limit) => page_up(limit / AS_LIMIT_SHARE).min(RESERVE).max(least),
        None => RESERVE,
    };
    let base = loop {
        // Safety: not MAP_FIXED: the kernel picks a free range.
        match unsafe { sys::mmap(0, size, sys::PROT_NONE, flags, -1, 0) } {
            Ok(b) => break b,
            Err(_) if size > least => size = page_up((size / 4) as u64).max(least),
            Err(e) => return fail(b"cannot reserve address space for profile", e),
        }
    };
    st.set_reserve(size);
    let rw = sys::PROT_READ | sys::PROT_WRITE;
    // Safety: MAP_FIXED inside the range we just reserved, which nothing uses yet.
    if let Err(e) = unsafe { sys::mmap(base, file_len as usize, rw, sys::MAP_SHARED | sys::MAP_FIXED, fd, 0) } {
        // Safety: our reservation; nothing refers to it.
        let _ = unsafe { sys::munmap(base, size) };
        return fail(b"cannot map profile", e);
    }
    no_readahead(base, file_len as usize);
    st.set_base(base);
    st.set_mapped(file_len as usize);
    st.set_fd(fd);

    // Safety: the header page is mapped read-write at `base`; the file is not published
    // (no magic, `active` off), so nothing else reads or writes it yet.
    let hdr = unsafe { &mut *(base as *mut FileHeader) };
    hdr.version = FILE_VERSION;
    hdr.header_size = size_of::<FileHeader>() as u32;
    hdr.pid = pid;
    hdr.ppid = sys::getppid();
    su.flags = extra_flags
        | FLAG_LOAD_BIAS
        | if su.tid_key_ok != 0 { FLAG_TID_KEY_VERIFIED } else { 0 }
        | if cfg.flags & CFG_NO_SAMPLING == 0 { FLAG_SAMPLING } else { 0 };
    hdr.flags = su.flags;
    lay.apply(hdr, INITIAL_COLUMNS);
    hdr.n_columns = 0;
    hdr.start_realtime_ns = sys::clock_ns(sys::CLOCK_REALTIME);
    hdr.start_monotonic_ns = sys::clock_ns(sys::CLOCK_MONOTONIC);
    hdr.tid_offset = cfg.tid_offset;
    if st.tsc_hz() == 0 {
        st.set_tsc_hz(clock::tsc_frequency().0);
    }
    hdr.tsc_hz = st.tsc_hz();
    hdr.start_tsc = sys::rdtsc();
    hdr.proc_start_ticks = su.proc_start_ticks;
    // Safety: `initial_sp` is 0 or the initial stack start-up was given; a fork child's copy
    // of it is its parent's, mapped at the same address.
    let (argc, cut) = unsafe { process::read_argv(su.initial_sp, &mut hdr.argv) };
    hdr.argc = argc;
    let mut flags = su.flags;
    if cut {
        flags |= FLAG_ARGV_TRUNCATED;
    }
    if let Some(p) = &pred {
        if !set_text_field(&mut hdr.exec_from, p.path.get(..p.len).unwrap_or(&[])) {
            flags |= FLAG_PATH_TRUNCATED;
        }
    }
    if !set_text_field(&mut hdr.parent_profile, parent_profile) {
        flags |= FLAG_PATH_TRUNCATED;
    }
    hdr.flags = flags;
    hdr.load_bias = cfg.bias();
    hdr.calib_count = 0;
    hdr.calib = Calibration::default();
    // Safety: `hdr` is the header being written, not yet published.
    unsafe { record_calibration(hdr, su.calib, su.calib_tsc) };
    // Safety: the control page lies inside the mapped file, after the header page; not
    // published yet.
    let control = unsafe { &mut *((base + CONTROL_OFFSET as usize) as *mut Control) };
    control.new_thread_mask = ALL_METRICS;
    let meta = cfg.meta();
    let init_gates = cfg.initial_gates();
    // Safety: both regions lie inside the mapped file (the meta after the control region,
    // the gates at its start, `n_points ≤ ctl_len` bytes) and are not published yet.
    let gates = unsafe {
        core::ptr::copy_nonoverlapping(meta.as_ptr(), (base + lay.meta_offset as usize) as *mut u8, meta.len());
        core::slice::from_raw_parts_mut((base + lay.ctl_offset as usize) as *mut u8, init_gates.len())
    };
    gates.copy_from_slice(init_gates);
    if su.control_len != 0 {
        let mut path = [0u8; CONTROL_PATH_MAX];
        let n = copy_into(&mut path, &[su.control_path.get(..su.control_len as usize).unwrap_or(&[])]);
        control::apply_file(rt, su, path.get(..n).unwrap_or(&[]), gates, control);
    }
    st.set_active(true);
    // Now the gates go live: map the control region over the reserved pages in the program.
    let ctl_addr = cfg.control_region() as usize;
    let shared = sys::MAP_SHARED | sys::MAP_FIXED;
    // Safety: the rewriter reserved `ctl_len` bytes at `ctl_rel` for exactly this; the
    // runtime holds no reference into them (gates are read with volatile loads).
    if let Err(e) = unsafe { sys::mmap(ctl_addr, ctl_len as usize, rw, shared, fd, lay.ctl_offset) } {
        st.set_active(false);
        // Safety: no thread has a column yet (registration needs `active`), and the header
        // and control references above are dead.
        let _ = unsafe { sys::munmap(base, size) };
        return fail(b"cannot map control region of profile", e);
    }
    // Safety: publishing the header: readers check the magic last.
    unsafe { core::ptr::write_volatile(&raw mut hdr.magic, FILE_MAGIC) };
    // The control file used `su.path` as scratch: put this profile's path back.
    su.path = path_copy;
    su.path_len = plen as u32;
    true
}

/// The first write to a page of the mapping faults it in; with the default advice the kernel
/// also reads ahead up to the device's `read_ahead_kb` (8 MiB on this project's test
/// machine), zero-filling megabytes of the file's unwritten blocks that no thread will touch:
/// about 2 ms of CPU per run and the page cache they occupy (issue 14). Random access: one
/// page per fault. Advice only: a kernel that refuses it changes nothing else.
fn no_readahead(addr: usize, len: usize) {
    let _ = sys::madvise(addr, len, sys::MADV_RANDOM);
}

/// Double the number of columns the file holds, mapping the new part in place. Called with
/// the registration lock held; `hdr` is the mapped header.
///
/// # Safety
/// The caller holds the registration lock (growth and column allocation are serialised by
/// it) and `hdr` is this process's mapped header.
pub unsafe fn grow(rt: &Rt, hdr: *mut FileHeader) -> bool {
    let st = rt.st;
    // Safety: a field of the mapped header that only the lock holder writes.
    let cap = unsafe { (*hdr).capacity_columns };
    let new_cap = cap.saturating_mul(2);
    // From our own config, not the header's fields: the file is shared with other processes.
    let new_len = file_layout(&rt.cfg).file_len(new_cap);
    if new_len as usize > st.reserve() || sys::ftruncate(st.fd(), new_len).is_err() {
        return false;
    }
    let old = st.mapped();
    let prot = sys::PROT_READ | sys::PROT_WRITE;
    let flags = sys::MAP_SHARED | sys::MAP_FIXED;
    // Safety: [base + old, base + new_len) is the unused, PROT_NONE rest of our reservation.
    if unsafe { sys::mmap(st.base() + old, new_len as usize - old, prot, flags, st.fd(), old as u64) }.is_err() {
        return false;
    }
    no_readahead(st.base() + old, new_len as usize - old);
    st.set_mapped(new_len as usize);
    // Safety: as above.
    unsafe {
        (*hdr).capacity_columns = new_cap;
        (*hdr).file_len = new_len;
    }
    true
}

/// A fork child leaves its parent's file: private zero gates, GS back to the dummy, the
/// mapping and the descriptor released; then it starts a profile of its own. The caller is
/// the one thread that won the fork hand-off.
pub fn fork_child(rt: &Rt, su: &mut Startup, extra_flags: u32) {
    let st = rt.st;
    let rw = sys::PROT_READ | sys::PROT_WRITE;
    let private = sys::MAP_PRIVATE | sys::MAP_ANONYMOUS | sys::MAP_FIXED;
    let ctl_addr = rt.cfg.control_region() as usize;
    // Safety: the control region the rewriter reserved: replacing the parent's gates with
    // zero pages only turns every point off; nothing holds a reference into it.
    if unsafe { sys::mmap(ctl_addr, rt.cfg.ctl_len as usize, rw, private, -1, 0) }.is_err() {
        // Cannot detach the gates from the parent's file: never touch it again.
        st.set_active(false);
        st.set_pid(sys::getpid());
        return;
    }
    st.set_active(false);
    // Safety: the dummy header lives in RtState for the whole run.
    let _ = unsafe { sys::set_gs_base(st.dummy_addr() as usize) };
    // Safety: `active` is off (no registration, no header lookups), and this thread's GS
    // moved to the dummy. Known gap, as before this module existed: a thread the child
    // created before its first instrumented event inherited its creator's GS base, which
    // may point into this mapping; its next trampoline then faults.
    let _ = unsafe { sys::munmap(st.base(), st.reserve()) };
    // Safety: this is the child's only thread, and it registers nothing before this returns.
    unsafe { st.forget_lost() };
    sys::close(st.fd());
    st.set_base(0);
    st.set_mapped(0);
    // A new process: its own start time (the copy in `su` is the parent's), and its own fork
    // cookie (the kernel zeroed the parent's: no column of the parent matched this process).
    su.proc_start_ticks = process::start_ticks();
    crate::state::renew_cookie(rt, su);
    // The parent's profile path, as the parent created it (`su` is the parent's copy; a
    // parent that never measured, such as the middle process of a double fork, passes on
    // its own parent's).
    let parent = su.path;
    let parent_len = su.path_len as usize;
    create(rt, su, extra_flags, parent.get(..parent_len).unwrap_or(&[]));
}

/// Per kind of event, the least of two runs' figures (0: not measured in that run). A busy
/// host only ever makes a run slower (a sibling thread of the core, a preempted batch), so
/// the least is the run that was least disturbed.
pub fn least(a: Calibration, b: Calibration) -> Calibration {
    if a.batches == 0 {
        return b;
    }
    if b.batches == 0 {
        return a;
    }
    let m = |x: u64, y: u64| match (x, y) {
        (0, v) | (v, 0) => v,
        (x, y) => x.min(y),
    };
    Calibration {
        pair_ticks: m(a.pair_ticks, b.pair_ticks),
        inner_ticks: m(a.inner_ticks, b.inner_ticks),
        pair_flat_ticks: m(a.pair_flat_ticks, b.pair_flat_ticks),
        inner_flat_ticks: m(a.inner_flat_ticks, b.inner_flat_ticks),
        count_ticks: m(a.count_ticks, b.count_ticks),
        pair_ee_ticks: m(a.pair_ee_ticks, b.pair_ee_ticks),
        inner_ee_ticks: m(a.inner_ee_ticks, b.inner_ee_ticks),
        pair_import_ticks: m(a.pair_import_ticks, b.pair_import_ticks),
        inner_import_ticks: m(a.inner_import_ticks, b.inner_import_ticks),
        pair_untimed_ticks: m(a.pair_untimed_ticks, b.pair_untimed_ticks),
        pair_untimed_ee_ticks: m(a.pair_untimed_ee_ticks, b.pair_untimed_ee_ticks),
        inner_sampled_ticks: m(a.inner_sampled_ticks, b.inner_sampled_ticks),
        inner_sampled_ee_ticks: m(a.inner_sampled_ee_ticks, b.inner_sampled_ee_ticks),
        wrap_event_ticks: m(a.wrap_event_ticks, b.wrap_event_ticks),
        wrap_slow_ticks: m(a.wrap_slow_ticks, b.wrap_slow_ticks),
        ..a
    }
}

/// Record calibration run `run`, begun at TSC `tsc`, in the header: its own figures in the
/// next `calib_runs` slot, and `calib` (what readers subtract) the least of the runs.
///
/// # Safety
/// `hdr` is this process's mapped header; one writer of the calibration fields at a time
/// (start-up, or the one `calib::calibrate_again`).
pub unsafe fn record_calibration(hdr: *mut FileHeader, run: Calibration, tsc: u64) {
    if run.batches == 0 {
        return;
    }
    // Safety: per the contract; fields written through the raw pointer (other threads write
    // other header fields meanwhile, and readers read it live).
    unsafe {
        let k = (*hdr).calib_count as usize;
        if let Some(slot) = (*hdr).calib_runs.get_mut(k) {
            *slot = run;
        }
        if let Some(slot) = (*hdr).calib_tsc.get_mut(k) {
            *slot = tsc;
        }
        (*hdr).calib = least((*hdr).calib, run);
        (*hdr).calib_count = (*hdr).calib_count.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stint_layout::{column_size, objects_len, GATES_OFFSET, PAGE};

    #[test]
    fn path_template_expands_pid() {
        // Safety: Startup is valid zero-filled.
        let mut su: Box<Startup> = unsafe { Box::new(core::mem::zeroed()) };
        let n = copy_into(&mut su.template, &[b"/tmp/x.%p.%%.stint"]);
        su.template_len = n as u32;
        let len = expand_path(&mut su, 4242).unwrap();
        assert_eq!(&su.path[..len], b"/tmp/x.4242.%.stint");
        assert_eq!(su.path[len], 0);
        su.template_len = 3;
        su.template[..3].copy_from_slice(b"a%p");
        let len = expand_path(&mut su, 0).unwrap();
        assert_eq!(&su.path[..len], b"a0");
    }

    #[test]
    fn too_long_a_path_is_refused() {
        // Safety: Startup is valid zero-filled.
        let mut su: Box<Startup> = unsafe { Box::new(core::mem::zeroed()) };
        su.template.fill(b'%');
        su.template_len = su.template.len() as u32;
        assert!(expand_path(&mut su, 1).is_some(), "%% halves the length");
        su.template.fill(b'p');
        su.template[0] = b'%';
        assert!(expand_path(&mut su, u32::MAX).is_some());
        // Safety: Startup is valid zero-filled.
        let mut su2: Box<Startup> = unsafe { Box::new(core::mem::zeroed()) };
        su2.template.fill(b'x');
        su2.template_len = su2.template.len() as u32;
        // Fits: PATH_MAX > TEMPLATE_MAX.
        assert_eq!(expand_path(&mut su2, 1), Some(su2.template.len()));
    }

    #[test]
    fn layout_puts_parts_in_order_on_page_bounds() {
        let cfg = RtConfig { n_points: 100, n_counter_slots: 4, ctl_len: 4096, meta_len: 123, ..RtConfig::default() };
        let l = file_layout(&cfg);
        assert_eq!(l.ctl_offset, GATES_OFFSET);
        assert_eq!(l.meta_offset, GATES_OFFSET + 4096);
        assert_eq!(l.objects_offset % PAGE, 0);
        assert!(l.objects_offset >= l.meta_offset + 123);
        assert_eq!(l.columns_offset, l.objects_offset + objects_len(OBJ_BUCKETS, OBJ_CAP));
        assert_eq!(l.file_len(INITIAL_COLUMNS), l.columns_offset + 16 * column_size(100, 4));
    }

    /// Per kind of event the least of two runs; a figure a run did not measure (0) and a run
    /// that measured nothing (no batches) never win.
    #[test]
    fn the_least_of_the_runs_is_kept_per_kind() {
        let a = Calibration { pair_ticks: 36, inner_ticks: 19, count_ticks: 0, batches: 7, ..Calibration::default() };
        let b = Calibration { pair_ticks: 18, inner_ticks: 20, count_ticks: 2, batches: 7, ..Calibration::default() };
        let l = least(a, b);
        assert_eq!((l.pair_ticks, l.inner_ticks, l.count_ticks, l.batches), (18, 19, 2, 7));
        assert_eq!(least(Calibration::default(), b), b);
        assert_eq!(least(a, Calibration::default()), a);
    }
}
