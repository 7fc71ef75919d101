//! The profile file's security rules (DEVELOPERS "Security"): created 0600 with O_EXCL and
//! without following symlinks (a taken name, a symlink included, means the next free name,
//! D22). A rewritten program that cannot create its profile says so in
//! one line on stderr and otherwise runs exactly like the original, unmeasured.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn hello(dir: &Path) -> (PathBuf, PathBuf) {
    let src = dir.join("hello.c");
    std::fs::write(&src, "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 4; }\n").unwrap();
    let bin = dir.join("hello");
    tool("gcc", &["-O2", src.to_str().unwrap(), "-o", bin.to_str().unwrap()]);
    let out = dir.join("hello.stint");
    rewrite(&bin, &out);
    (bin, out)
}

fn run(bin: &Path, profile: &Path) -> std::process::Output {
    Command::new(bin).env("STINT_PROFILE", profile).output().expect("run")
}

/// The original's stdout and status, one stderr line naming the path and the reason.
fn assert_refused(out: &std::process::Output, profile: &Path, reason: &str) {
    assert_eq!(out.stdout, b"hello\n");
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "want one line on stderr: {err:?}");
    assert!(err.contains(&profile.display().to_string()) && err.contains(reason), "{err:?} lacks {reason}");
    assert!(err.contains("running without measurement"), "{err:?}");
}

#[test]
fn profile_is_private_and_exclusive() {
    let _share = cpu_share();
    let dir = fresh_dir("security-mode");
    let (_, out) = hello(&dir);
    let profile = dir.join("p.stint");
    let o = run(&out, &profile);
    assert_eq!((o.stdout.as_slice(), o.status.code(), o.stderr.len()), (&b"hello\n"[..], Some(4), 0));
    assert_eq!(std::fs::metadata(&profile).unwrap().permissions().mode() & 0o777, 0o600);
    // A second run with the same path must not touch the existing file: it takes the next
    // free name (D22), silently.
    let before = std::fs::read(&profile).unwrap();
    let o = run(&out, &profile);
    assert_eq!((o.stdout.as_slice(), o.status.code(), o.stderr.len()), (&b"hello\n"[..], Some(4), 0), "{o:?}");
    assert_eq!(std::fs::read(&profile).unwrap(), before, "existing profile was modified");
    let next = dir.join("p.1.stint");
    assert_eq!(std::fs::metadata(&next).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn profile_path_symlink_is_not_followed() {
    let _share = cpu_share();
    let dir = fresh_dir("security-symlink");
    let (_, out) = hello(&dir);
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "precious\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let link = dir.join("p.stint");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    // The name is taken (by the link): the next free name, a regular file of our own (D22).
    let o = run(&out, &link);
    assert_eq!((o.status.code(), o.stderr.len()), (Some(4), 0), "{o:?}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(std::fs::symlink_metadata(dir.join("p.1.stint")).unwrap().file_type().is_file());
    // A dangling symlink must not be followed to create its target either.
    let target = dir.join("created-through-link");
    let dangling = dir.join("q.stint");
    std::os::unix::fs::symlink(&target, &dangling).unwrap();
    let o = run(&out, &dangling);
    assert_eq!((o.status.code(), o.stderr.len()), (Some(4), 0), "{o:?}");
    assert!(!target.exists(), "the runtime created a file through a dangling symlink");
    assert!(std::fs::symlink_metadata(dir.join("q.1.stint")).unwrap().file_type().is_file());
}

#[test]
fn empty_profile_variable_turns_measurement_off() {
    let _share = cpu_share();
    let dir = fresh_dir("security-off");
    let (_, out) = hello(&dir);
    let o = Command::new(&out).env("STINT_PROFILE", "").current_dir(&dir).output().unwrap();
    assert_eq!((o.stdout.as_slice(), o.status.code(), o.stderr.len()), (&b"hello\n"[..], Some(4), 0));
    let stray: Vec<_> = dir_entries(&dir).into_iter().filter(|n| n.ends_with(".stint") && n != "hello.stint").collect();
    assert!(stray.is_empty(), "profile written although STINT_PROFILE is empty: {stray:?}");
}

/// A setuid program runs with AT_SECURE: the runtime must ignore `STINT_PROFILE` (an
/// unprivileged user must not make a privileged process create files where they choose) and
/// measure nothing, silently. Needs root (to make a setuid-root file and drop to nobody).
#[test]
fn setuid_process_ignores_stint_variables() {
    let _share = cpu_share();
    // /proc/self belongs to the effective user.
    let root = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0).unwrap_or(false);
    if !root || Command::new("setpriv").arg("--version").output().is_err() {
        assert!(!under_ci(), "CI must run this test as root with setpriv (util-linux)");
        eprintln!("skipped: needs root and setpriv");
        return;
    }
    let dir = fresh_dir("security-setuid");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (_, out) = hello(&dir);
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o4755)).unwrap();
    // The directory chain must be searchable by nobody.
    let mut p = dir.parent();
    while let Some(d) = p {
        let m = std::fs::metadata(d).unwrap().permissions().mode();
        if m & 0o001 == 0 {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(m | 0o001)).unwrap();
        }
        p = d.parent();
    }
    let profile = dir.join("evil.%p.stint");
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&out)
        .env("STINT_PROFILE", &profile)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(o.stdout, b"hello\n", "{o:?}");
    assert_eq!(o.status.code(), Some(4));
    assert!(o.stderr.is_empty(), "stderr: {}", String::from_utf8_lossy(&o.stderr));
    let made: Vec<_> =
        dir_entries(&dir).into_iter().filter(|n| n.starts_with("evil.") || n.starts_with("hello.stint.")).collect();
    assert!(made.is_empty(), "a setuid process wrote a profile: {made:?}");
    // The same binary without setuid does honour the variable (the test can fail).
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = Command::new(&out).env("STINT_PROFILE", &profile).current_dir(&dir).output().unwrap();
    assert_eq!(o.status.code(), Some(4));
    assert!(dir_entries(&dir).iter().any(|n| n.starts_with("evil.")), "control run wrote no profile");
}

/// When the profile cannot be set up after it was created (here: the 64 GiB address-space
/// reservation fails under `ulimit -v`), the runtime removes the file it made, says so in one
/// line, and the program runs unmeasured.
#[test]
fn failed_profile_setup_leaves_no_file() {
    let _share = cpu_share();
    let dir = fresh_dir("security-full");
    let (_, out) = hello(&dir);
    // A file system with no room for the profile (a 16 KiB tmpfs): the file is created, then
    // its blocks are refused; the program runs unmeasured and the file is gone.
    let mnt = dir.join("full");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16k,mode=0700", "tmpfs", path_str(&mnt)])
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        assert!(!under_ci(), "mount -t tmpfs failed: CI runs as root and must be able to");
        eprintln!("\n!!!!!!!!!! SKIPPED: cannot mount a tmpfs here (not root); this test checks nothing !!!!!!!!!!\n");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&mnt);
    let profile = mnt.join("p.stint");
    let o = run(&out, &profile);
    assert_refused(&o, &profile, "ENOSPC");
    assert!(!profile.exists(), "an unusable profile file was left behind");
}
