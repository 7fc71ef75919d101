//! Finding the live profile files of this user's processes (what `stint ls` lists).
//!
//! There is no registry of running rewritten programs, and none is needed: a measuring
//! process maps its profile file (D9: the whole file, and the control page a second time at
//! a fixed address), so the kernel already lists it in `/proc/<pid>/maps`. We read the maps
//! of every process owned by our uid (`--all`: of every process whose maps we may read), take
//! the mapped regular files, and keep those whose first 8 bytes are
//! [`stint_layout::FILE_MAGIC`]. Each (pid, path) is listed once however often it is mapped.
//!
//! A fork child keeps its parent's mappings until its first event detaches it (it then
//! creates a profile of its own, flagged `FLAG_FORK_CHILD`): a file whose header names
//! another pid is the parent's, seen through the child, and is not listed for the child.
//! (A process in another pid namespace is matched by the innermost pid of its `NSpid`.)
//!
//! A `(deleted)` mapping is skipped: its path names nothing any more. A path whose inode is
//! not the mapped one (the file was replaced) is skipped too.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use stint_layout::FILE_MAGIC;
use thiserror::Error;

use crate::profile::{self, Profile, ProfileError};
use crate::report::uptime_ns;

/// A mapped profile file that could not be read (it is left out of the list).
#[derive(Debug, Error)]
#[error("{}: {error}", path.display())]
pub struct DiscoverError {
    pub path: PathBuf,
    pub error: ProfileError,
}

/// One live profile: the process that maps it and what the file says.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub pid: u32,
    /// The parent as the runtime recorded it at start (for a fork child: the rewritten
    /// program it was forked from).
    pub ppid: u32,
    pub fork_child: bool,
    pub program: String,
    pub path: PathBuf,
    /// Seconds since the process started measuring.
    pub uptime_s: Option<f64>,
    /// Threads in the profile, and how many of them still run.
    pub threads: usize,
    pub threads_live: usize,
    pub alive: bool,
}

/// One line of `stint ls --json` (an array of these, by pid). Fields in output order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EntryJson {
    pub pid: u32,
    /// The parent at start (for a fork child: the rewritten program it was forked from).
    pub ppid: u32,
    pub program: String,
    /// The profile file (lossily UTF-8).
    pub path: String,
    /// Seconds since the process started measuring, to the millisecond.
    pub uptime_s: Option<f64>,
    /// Threads in the profile.
    pub threads: usize,
    /// Of those, the ones still running.
    pub threads_live: usize,
    /// The process still runs.
    pub alive: bool,
    /// The process is a fork child of a rewritten program.
    pub fork_child: bool,
}

impl From<&Entry> for EntryJson {
    fn from(e: &Entry) -> EntryJson {
        EntryJson {
            pid: e.pid,
            ppid: e.ppid,
            program: e.program.clone(),
            path: e.path.to_string_lossy().into_owned(),
            uptime_s: e.uptime_s.map(|s| (s * 1000.0).round() / 1000.0),
            threads: e.threads,
            threads_live: e.threads_live,
            alive: e.alive,
            fork_child: e.fork_child,
        }
    }
}

/// The live profiles, sorted by pid then path, and the mapped profiles that could not be
/// read.
pub fn scan(all: bool) -> (Vec<Entry>, Vec<DiscoverError>) {
    let (found, warnings) = scan_profiles(all);
    (found.into_iter().map(|(e, _)| e).collect(), warnings)
}

/// [`scan`], with each profile as it was read (for callers that use its contents, so a
/// profile is read once per scan).
pub fn scan_profiles(all: bool) -> (Vec<(Entry, Profile)>, Vec<DiscoverError>) {
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    let mut found: BTreeSet<(u32, PathBuf)> = BTreeSet::new();
    // path -> is a profile (the same libraries are mapped by every process).
    let mut magic: HashMap<(PathBuf, u64), bool> = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return (Vec::new(), Vec::new()) };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let proc_dir = e.path();
        if !all {
            match (me, std::fs::metadata(&proc_dir).map(|m| m.uid())) {
                (Some(me), Ok(uid)) if uid == me => {}
                _ => continue,
            }
        }
        let Ok(maps) = std::fs::read_to_string(proc_dir.join("maps")) else { continue };
        for line in maps.lines() {
            let Some((inode, path)) = parse_maps_line(line) else { continue };
            let key = (PathBuf::from(path), inode);
            let is_profile = *magic.entry(key.clone()).or_insert_with(|| has_profile_magic(&key.0, inode));
            if is_profile {
                found.insert((pid, key.0));
            }
        }
    }
    let mut entries = Vec::new();
    let mut warnings = Vec::new();
    for (pid, path) in found {
        match profile::load(&path) {
            Ok(p) if owns(pid, &p) => {
                let e = entry(pid, path, &p, profile::realtime_now_ns());
                entries.push((e, p));
            }
            Ok(_) => {} // the parent's file, still mapped in a fork child
            Err(error) => warnings.push(DiscoverError { path, error }),
        }
    }
    (entries, warnings)
}

/// `(inode, path)` of a line of `/proc/<pid>/maps` that maps a file by absolute path:
/// `start-end perms offset dev inode path`. Anonymous and special mappings (`[heap]`, no
/// path, inode 0) and deleted files give `None`.
pub fn parse_maps_line(line: &str) -> Option<(u64, &str)> {
    let mut rest = line;
    let mut fields = [""; 5];
    for f in &mut fields {
        rest = rest.trim_start_matches(' ');
        let end = rest.find(' ')?;
        *f = &rest[..end];
        rest = &rest[end..];
    }
    let inode: u64 = fields[4].parse().ok()?;
    // The path is the rest, after the padding; it may contain spaces.
    let path = rest.trim_start_matches(' ');
    if inode == 0 || !path.starts_with('/') || path.ends_with(" (deleted)") {
        return None;
    }
    Some((inode, path))
}

/// Whether `path` is a regular file with inode `inode` that starts with the profile magic.
fn has_profile_magic(path: &Path, inode: u64) -> bool {
    // Never open device files (mapping one is legal; opening one may have effects).
    let Ok(m) = std::fs::metadata(path) else { return false };
    if !m.is_file() || m.ino() != inode || m.len() < FILE_MAGIC.len() as u64 {
        return false;
    }
    let mut head = [0u8; 8];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && head == FILE_MAGIC
}

/// Whether profile `p` is the own profile of process `pid` (not its parent's, still mapped
/// in a fork child that has not detached yet).
fn owns(pid: u32, p: &Profile) -> bool {
    if p.pid == pid {
        return true;
    }
    // In another pid namespace the header has the process's own view of its pid.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let nspid = status.lines().find_map(|l| l.strip_prefix("NSpid:"));
    nspid.and_then(|l| l.split_whitespace().last()).and_then(|s| s.parse::<u32>().ok()) == Some(p.pid)
        && nspid.is_some_and(|l| l.split_whitespace().count() > 1)
}

fn entry(pid: u32, path: PathBuf, p: &Profile, now_ns: u64) -> Entry {
    Entry {
        pid,
        ppid: p.ppid,
        fork_child: p.fork_child(),
        program: p.program.clone(),
        path,
        uptime_s: uptime_ns(p, now_ns).map(|ns| ns as f64 / 1e9),
        threads: p.threads.len(),
        threads_live: p.threads.iter().filter(|t| t.alive).count(),
        alive: p.alive,
    }
}

/// The directory a rewritten program puts its profile in when `STINT_PROFILE` is not set
/// (DESIGN D15), by the runtime's rule: `$STINT_DIR`, else `$XDG_RUNTIME_DIR/stint` (an
/// absolute path only), else `/tmp/stint-<euid>`.
pub fn default_dir() -> PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use stint_layout::{ProfileDir, TMP_PROFILE_DIR_PREFIX, XDG_PROFILE_SUBDIR};
    let (dir, xdg) = (std::env::var_os(stint_layout::ENV_DIR), std::env::var_os("XDG_RUNTIME_DIR"));
    let bytes = match ProfileDir::choose(dir.as_deref().map(OsStrExt::as_bytes), xdg.as_deref().map(OsStrExt::as_bytes))
    {
        ProfileDir::Named(d) => d.to_vec(),
        ProfileDir::XdgRuntime(x) => [x, XDG_PROFILE_SUBDIR.as_bytes()].concat(),
        ProfileDir::Tmp => {
            let euid = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX);
            format!("{TMP_PROFILE_DIR_PREFIX}{euid}").into_bytes()
        }
    };
    PathBuf::from(std::ffi::OsString::from_vec(bytes))
}

/// The newest profile in `dir` (by modification time), of `program` if given: the files
/// named `<program>.<pid>.stint` (any program when `None`).
pub fn newest_in(dir: &Path, program: Option<&str>) -> std::io::Result<Option<PathBuf>> {
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(".stint") else { continue };
        let Some((prog, pid)) = stem.rsplit_once('.') else { continue };
        // `<program>.<pid>.<n>.stint`: the next free name of an image whose first one was
        // taken (D22: an exec in the same pid, a forked child of a fixed name).
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let prog = match prog.rsplit_once('.') {
            Some((p, pid)) if digits(pid) => p,
            _ => prog,
        };
        if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) || program.is_some_and(|p| p != prog) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let mtime = meta.modified()?;
        if best.as_ref().is_none_or(|(t, _)| mtime > *t) {
            best = Some((mtime, entry.path()));
        }
    }
    Ok(best.map(|(_, p)| p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_counts_next_free_names_as_the_program() {
        let dir = std::env::temp_dir().join(format!("stint-discover-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let at = |name: &str, secs: u64| {
            let f = std::fs::File::create(dir.join(name)).unwrap();
            f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)).unwrap();
        };
        at("prog.10.stint", 100);
        at("prog.10.1.stint", 200);
        at("other.11.stint", 300);
        let newest = newest_in(&dir, Some("prog")).unwrap();
        let any = newest_in(&dir, None).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(newest, Some(dir.join("prog.10.1.stint")), "the exec'd image's profile is prog's");
        assert_eq!(any, Some(dir.join("other.11.stint")));
    }

    #[test]
    fn maps_lines() {
        let l = "7f3c1a200000-7f3c1a3ff000 rw-s 00000000 fd:01 1310799                    /tmp/x.4242.stint";
        assert_eq!(parse_maps_line(l), Some((1310799, "/tmp/x.4242.stint")));
        // Spaces in the path are kept; the padding before it is not.
        let l = "00400000-00401000 r--s 00002000 08:02 77 /tmp/my dir/p.stint";
        assert_eq!(parse_maps_line(l), Some((77, "/tmp/my dir/p.stint")));
        for l in [
            "7ffd5a3c1000-7ffd5a3e2000 rw-p 00000000 00:00 0                          [stack]",
            "7f3c1a400000-7f3c1a401000 rw-p 00000000 00:00 0 ",
            "7f3c1a400000-7f3c1a401000 rw-p 00000000 00:00 0",
            "7f3c1a200000-7f3c1a3ff000 rw-s 00000000 fd:01 99 /tmp/x.stint (deleted)",
            "7f3c1a200000-7f3c1a3ff000 rw-s 00000000 fd:01 99 relative/path",
            "garbage",
            "",
            "a b c d notanumber /tmp/x",
        ] {
            assert_eq!(parse_maps_line(l), None, "{l:?}");
        }
    }

    #[test]
    fn our_own_mappings_are_files_not_profiles() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let files: Vec<(u64, &str)> = maps.lines().filter_map(parse_maps_line).collect();
        // The test binary itself is mapped.
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(files.iter().any(|(_, p)| Path::new(p) == exe), "{exe:?} not in {files:?}");
        assert!(files.iter().all(|(i, p)| !has_profile_magic(Path::new(p), *i)));
    }

    #[test]
    fn magic_check_needs_the_right_inode_and_bytes() {
        let dir = std::env::temp_dir().join(format!("stint-ls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("p.stint");
        let meta = crate::synthetic::synthetic_meta("p", &[("main", "0x1000")]);
        std::fs::write(&good, crate::synthetic::write_synthetic(&meta, &[(4242, vec![(0, 1)])])).unwrap();
        let ino = std::fs::metadata(&good).unwrap().ino();
        assert!(has_profile_magic(&good, ino));
        assert!(!has_profile_magic(&good, ino + 1));
        let short = dir.join("short");
        std::fs::write(&short, b"STINT").unwrap();
        assert!(!has_profile_magic(&short, std::fs::metadata(&short).unwrap().ino()));
        let other = dir.join("other");
        std::fs::write(&other, b"\x7fELF\x02\x01\x01\x00rest").unwrap();
        assert!(!has_profile_magic(&other, std::fs::metadata(&other).unwrap().ino()));
        assert!(!has_profile_magic(&dir, std::fs::metadata(&dir).unwrap().ino()));
        assert!(!has_profile_magic(Path::new("/dev/null"), std::fs::metadata("/dev/null").unwrap().ino()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_of_another_pid_is_not_ours() {
        let meta = crate::synthetic::synthetic_meta("p", &[("main", "0x1000")]);
        let b = crate::synthetic::write_synthetic(&meta, &[(u32::MAX - 1, vec![(0, 1)])]);
        let p = profile::parse_with(&b, &profile::Observer::ENDED).unwrap();
        assert!(owns(u32::MAX - 1, &p));
        assert!(!owns(std::process::id(), &p));
    }
}
