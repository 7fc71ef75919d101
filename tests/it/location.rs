//! Where a rewritten program puts its profile when `STINT_PROFILE` is not set (DESIGN D15):
//! a private per-user directory, never the current one.
//!
//! | test | what it checks |
//! | --- | --- |
//! | `default_location_leaves_cwd_alone` | no `STINT_*`: same output, nothing new in the cwd, the profile in `$XDG_RUNTIME_DIR/stint` (dir 0700, file 0600), `stint report --last` finds it |
//! | `stint_dir_overrides` | `STINT_DIR` names the directory; created 0700 when missing |
//! | `tmp_fallback_without_xdg` | no `XDG_RUNTIME_DIR`: `/tmp/stint-<euid>` |
//! | `symlinked_directory_is_refused` | a profile directory that is a symbolic link: one `stint:` line, same stdout and status, no file |
//! | `directory_open_to_others_is_refused` | mode 0755: refused the same way |
//! | `directory_of_another_user_is_refused` | owned by uid 65534 (needs root, as CI runs): refused |
//! | `git_work_tree_stays_clean` | a rewritten program run inside a git work tree: `git status` shows nothing new |
//! | `sha256sum_star_is_unchanged` | `/usr/bin/sha256sum` rewritten and run as `sha256sum *` in a directory prints what the original prints |
//! | `ls_la_is_unchanged` | `/usr/bin/ls` rewritten: `ls -la` of its cwd prints what the original prints (no new entry, same directory mtime) |
//! | `tar_of_cwd_is_unchanged` | `/usr/bin/tar` rewritten: `tar cf - .` in its cwd writes the same archive bytes |

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::common::*;

/// A C program that prints its arguments, built and rewritten in `dir`: (original, rewritten).
fn echo_program(dir: &Path) -> (PathBuf, PathBuf) {
    let src = dir.join("echoargs.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(int c, char **v) { for (int i = 1; i < c; i++) puts(v[i]); return 3; }\n",
    )
    .unwrap();
    let bin = dir.join("echoargs");
    tool("gcc", &["-O2", path_str(&src), "-o", path_str(&bin)]);
    let out = dir.join("rewritten").join("echoargs");
    rewrite(&bin, &out);
    (bin, out)
}

/// An empty directory to run in.
fn empty_cwd(dir: &Path) -> PathBuf {
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    cwd
}

/// A private `XDG_RUNTIME_DIR`, as a login session has.
fn xdg(dir: &Path) -> PathBuf {
    let x = dir.join("xdg");
    std::fs::create_dir_all(&x).unwrap();
    std::fs::set_permissions(&x, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    x
}

/// Run the original and the rewritten program with `env` in an empty cwd; both must print
/// the same and exit the same, and the cwd must stay empty. Returns the rewritten run.
fn run_both(dir: &Path, env: &[(&str, Option<&str>)]) -> Outcome {
    let (bin, out) = echo_program(dir);
    let cwd = empty_cwd(dir);
    let go = |p: &Path| {
        let mut r = Run::new(p, &cwd).args(["a", "b c"]);
        for (k, v) in env {
            r = match v {
                Some(v) => r.env(k, v),
                None => r.without(k),
            };
        }
        r.run()
    };
    let orig = go(&bin);
    let rw = go(&out);
    assert_eq!(rw.status, orig.status, "exit status: {rw:?}");
    assert_eq!(rw.stdout, orig.stdout, "stdout: {rw:?}");
    assert_eq!(dir_entries(&cwd), Vec::<String>::new(), "the cwd must stay empty");
    rw
}

/// The one profile in `dir`, checked to be `<program>.<pid>.stint`, mode 0600.
fn the_profile(dir: &Path, program: &str, pid: u32) -> PathBuf {
    let want = format!("{program}.{pid}.stint");
    assert_eq!(dir_entries(dir), vec![want.clone()], "{}", dir.display());
    let p = dir.join(want);
    assert_eq!(file_mode(&p), 0o600, "{}", p.display());
    p
}

/// A refused directory: one `stint:` line on stderr naming it, and no profile anywhere.
fn assert_refused(rw: &Outcome, dir: &Path, why: &str) {
    let err = rw.stderr_str();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("stint: echoargs: ") && err.contains(why) && err.contains(path_str(dir)), "{err}");
    assert!(err.trim_end().ends_with("running without measurement"), "{err}");
}

#[test]
fn default_location_leaves_cwd_alone() {
    let _share = cpu_share();
    let dir = fresh_dir("default");
    let x = xdg(&dir);
    let rw = run_both(&dir, &[("XDG_RUNTIME_DIR", Some(path_str(&x)))]);
    assert_eq!(rw.stderr_str(), "", "nothing on stderr");
    let pdir = x.join("stint");
    assert_eq!(file_mode(&pdir), 0o700, "{}", pdir.display());
    let prof = the_profile(&pdir, "echoargs", rw.pid);
    let o = Run::new(stint_bin(), &dir)
        .args(["report", "--last", "echoargs", "--json"])
        .env("XDG_RUNTIME_DIR", path_str(&x))
        .run();
    assert_eq!(o.status, 0, "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["pid"], rw.pid, "report --last read {}: {v:#}", prof.display());
    let o = Run::new(stint_bin(), &dir).args(["report", "--last", "other"]).env("XDG_RUNTIME_DIR", path_str(&x)).run();
    assert_eq!(o.status, 2, "no profile of another program: {o:?}");
    assert!(o.stderr_str().contains("no profile of other"), "{o:?}");
}

#[test]
fn stint_dir_overrides() {
    let _share = cpu_share();
    let dir = fresh_dir("stint-dir");
    let x = xdg(&dir);
    let mine = dir.join("mine");
    let rw = run_both(&dir, &[("XDG_RUNTIME_DIR", Some(path_str(&x))), ("STINT_DIR", Some(path_str(&mine)))]);
    assert_eq!(rw.stderr_str(), "", "nothing on stderr");
    assert_eq!(file_mode(&mine), 0o700, "created private");
    the_profile(&mine, "echoargs", rw.pid);
    assert!(!x.join("stint").exists(), "STINT_DIR wins over XDG_RUNTIME_DIR");
}

#[test]
fn tmp_fallback_without_xdg() {
    let _share = cpu_share();
    let dir = fresh_dir("tmp-fallback");
    let rw = run_both(&dir, &[("XDG_RUNTIME_DIR", None)]);
    assert_eq!(rw.stderr_str(), "", "nothing on stderr");
    let euid = std::fs::metadata("/proc/self").unwrap().uid();
    let tmp = PathBuf::from(format!("/tmp/stint-{euid}"));
    let prof = tmp.join(format!("echoargs.{}.stint", rw.pid));
    assert!(prof.is_file(), "{} missing", prof.display());
    assert_eq!(file_mode(&prof), 0o600);
    assert_eq!(file_mode(&tmp) & 0o077, 0, "{} is private", tmp.display());
    let _ = std::fs::remove_file(&prof);
}

#[test]
fn symlinked_directory_is_refused() {
    let _share = cpu_share();
    let dir = fresh_dir("symlink");
    let real = dir.join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let rw = run_both(&dir, &[("STINT_DIR", Some(path_str(&link)))]);
    assert_refused(&rw, &link, "cannot open profile directory");
    assert_eq!(dir_entries(&real), Vec::<String>::new(), "nothing written through the link");
}

#[test]
fn directory_open_to_others_is_refused() {
    let _share = cpu_share();
    let dir = fresh_dir("open-dir");
    let open = dir.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let rw = run_both(&dir, &[("STINT_DIR", Some(path_str(&open)))]);
    assert_refused(&rw, &open, "open to other users");
    assert_eq!(dir_entries(&open), Vec::<String>::new());
}

#[test]
fn directory_of_another_user_is_refused() {
    let _share = cpu_share();
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root: this check must run there");
        eprintln!("directory_of_another_user_is_refused: needs root to chown; skipped");
        return;
    }
    let dir = fresh_dir("other-user");
    let theirs = dir.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
    let rw = run_both(&dir, &[("STINT_DIR", Some(path_str(&theirs)))]);
    assert_refused(&rw, &theirs, "belongs to another user");
    assert_eq!(dir_entries(&theirs), Vec::<String>::new());
}

#[test]
fn git_work_tree_stays_clean() {
    let _share = cpu_share();
    let dir = fresh_dir("git");
    let x = xdg(&dir);
    let (_, out) = echo_program(&dir);
    let tree = dir.join("tree");
    std::fs::create_dir(&tree).unwrap();
    std::fs::write(tree.join("file.txt"), "content\n").unwrap();
    let git = |args: &[&str]| {
        let o = Run::new(Path::new("/usr/bin/git"), &tree)
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"])
            .args(args)
            .run();
        assert_eq!(o.status, 0, "git {args:?}: {o:?}");
        o.stdout_str()
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "one"]);
    let rw = Run::new(&out, &tree).args(["x"]).env("XDG_RUNTIME_DIR", path_str(&x)).run();
    assert_eq!(rw.status, 3, "{rw:?}");
    assert_eq!(git(&["status", "--porcelain", "--ignored"]), "", "the work tree is as it was");
    the_profile(&x.join("stint"), "echoargs", rw.pid);
}

#[test]
fn sha256sum_star_is_unchanged() {
    let _share = cpu_share();
    let dir = fresh_dir("sha256sum");
    let x = xdg(&dir);
    let out = dir.join("rewritten").join("sha256sum");
    rewrite(Path::new("/usr/bin/sha256sum"), &out);
    let files = dir.join("files");
    std::fs::create_dir(&files).unwrap();
    for (i, name) in ["a", "b.txt", "c d"].iter().enumerate() {
        std::fs::write(files.join(name), format!("{i}\n").repeat(1000 * (i + 1))).unwrap();
    }
    // `sha256sum *` as a shell expands it: every entry of the directory, sorted.
    let star = |p: &Path| Run::new(p, &files).args(dir_entries(&files)).env("XDG_RUNTIME_DIR", path_str(&x)).run();
    let orig = star(Path::new("/usr/bin/sha256sum"));
    let rw = star(&out);
    assert_eq!((rw.status, &rw.stdout, &rw.stderr), (orig.status, &orig.stdout, &orig.stderr), "{rw:?}");
    assert_eq!(dir_entries(&files), vec!["a", "b.txt", "c d"], "no new entry for a second `sha256sum *` to see");
}

/// `/usr/bin/<tool>` rewritten, run with `args` in a directory of a few files, with no
/// `STINT_*` variable: stdout, stderr and status equal the original's run the same way.
fn real_tool_in_cwd(tool_name: &str, args: &[&str]) {
    let _share = cpu_share();
    let dir = fresh_dir(tool_name);
    let x = xdg(&dir);
    let out = dir.join("rewritten").join(tool_name);
    rewrite(&Path::new("/usr/bin").join(tool_name), &out);
    let files = dir.join("files");
    std::fs::create_dir(&files).unwrap();
    for name in ["one", "two.txt"] {
        std::fs::write(files.join(name), name.repeat(100)).unwrap();
    }
    let go = |p: &Path| Run::new(p, &files).args(args).env("XDG_RUNTIME_DIR", path_str(&x)).run();
    let orig = go(&Path::new("/usr/bin").join(tool_name));
    let rw = go(&out);
    assert_eq!((rw.status, &rw.stderr), (orig.status, &orig.stderr), "{tool_name}: {rw:?}");
    assert!(rw.stdout == orig.stdout, "{tool_name} {args:?}: stdout differs from the original's");
    assert_eq!(dir_entries(&files), vec!["one", "two.txt"]);
    the_profile(&x.join("stint"), tool_name, rw.pid);
}

#[test]
fn ls_la_is_unchanged() {
    real_tool_in_cwd("ls", &["-la", "--time-style=full-iso"]);
}

#[test]
fn tar_of_cwd_is_unchanged() {
    real_tool_in_cwd("tar", &["cf", "-", "."]);
}
