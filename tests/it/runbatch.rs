//! `stint run` and `stint batch`: the program run by `stint run` behaves as the original
//! (stdout, stderr, argv[0], exit status, death by a signal, signals sent to `stint run`), the
//! report goes to stderr or `-o`, the cache is reused; `batch` rewrites the executables of a
//! tree and skips the rest with reasons, `--in-place` and `--restore` give the files back.

use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;

/// A C program of this module: prints its argv[0], calls `work` 3 times, then per its first
/// argument exits with 5 (`exit`), raises SIGTERM (`term`), aborts (`abort`), or waits for a
/// signal (`wait`, after printing `ready`); with no argument it exits 0.
const ENDS_C: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static volatile int n;
__attribute__((noipa)) void work(void) { n++; }
int main(int argc, char **argv) {
    for (int i = 0; i < 3; i++) work();
    printf("argv0=%s\n", argv[0]);
    fprintf(stderr, "to stderr\n");
    fflush(stdout);
    if (argc < 2) return 0;
    if (!strcmp(argv[1], "exit")) return 5;
    if (!strcmp(argv[1], "term")) raise(SIGTERM);
    if (!strcmp(argv[1], "abort")) abort();
    if (!strcmp(argv[1], "wait")) {
        printf("ready\n");
        fflush(stdout);
        for (;;) pause();
    }
    return 1;
}
"#;

/// `ENDS_C` built once into this module's directory.
fn ends() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let dir = run_root().join("runbatch-src");
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("ends.c");
        std::fs::write(&src, ENDS_C).unwrap();
        let bin = dir.join("ends");
        tool("gcc", &["-O2", "-Wall", "-Werror", path_str(&src), "-o", path_str(&bin)]);
        bin
    })
    .clone()
}

/// `stint ARGS` in `cwd` with its own cache directory.
fn stint_in(cwd: &Path, cache: &Path, args: &[&str]) -> Outcome {
    Run::new(stint_bin(), cwd).env("XDG_CACHE_HOME", path_str(cache)).args(args).timeout(Duration::from_secs(300)).run()
}

/// The original program's outcome.
fn original(bin: &Path, cwd: &Path, args: &[&str]) -> Outcome {
    Run::new(bin, cwd).args(args).run()
}

/// Calls of `function` in the main thread of a `stint-profile/1` document.
fn main_calls(doc: &serde_json::Value, function: &str) -> u64 {
    let t = main_thread(doc);
    let fs = t.get("functions").and_then(|f| f.as_array()).expect("functions");
    fs.iter().filter(|f| f["name"] == function).map(|f| f["calls"].as_u64().unwrap()).sum()
}

/// In a table report, the calls of `function` in the first thread section after `heading`.
fn table_calls(table: &str, heading: &str, function: &str) -> Option<u64> {
    let rest = &table[table.find(heading)?..];
    rest.lines()
        .skip(1)
        .take_while(|l| !l.starts_with("== "))
        .find(|l| l.split_whitespace().next_back() == Some(function))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
}

#[test]
fn run_passes_stdout_and_status_and_reports_on_stderr() {
    let _cpu = cpu_share();
    let bin = build(&program("forker"), Variant::PieO2);
    let dir = fresh_dir("runbatch-run");
    let orig = original(&bin, &dir, &[]);
    assert_eq!(orig.status, 7, "{orig:?}");
    let o = stint_in(&dir, &dir.join("cache"), &["run", "--", path_str(&bin)]);
    assert_eq!(o.status, orig.status, "{o:?}");
    assert_eq!(o.stdout, orig.stdout, "stdout differs: {o:?}");
    let err = o.stderr_str();
    assert!(err.starts_with(&orig.stderr_str()), "the program's stderr comes first: {o:?}");
    let report = &err[orig.stderr.len()..];
    // The main process first, its forked child after, each under its own header.
    let main_at = report.find("== forker pid ").expect("main header");
    let child_at = report.find(" (child of ").expect("child header");
    assert!(main_at < child_at, "{report}");
    assert_eq!(table_calls(report, "== forker pid ", "g"), Some(7), "{report}");
    let child_heading = &report[report[..child_at].rfind("== ").unwrap()..child_at];
    assert_eq!(table_calls(report, child_heading, "g"), Some(5), "{report}");
    assert_eq!(dir_entries(&dir), ["cache"], "nothing left in the cwd");
}

#[test]
fn run_json_to_file_leaves_the_output_alone() {
    let _cpu = cpu_share();
    let bin = build(&program("forker"), Variant::PieO2);
    let dir = fresh_dir("runbatch-json");
    let orig = original(&bin, &dir, &[]);
    let json = dir.join("f.json");
    let o =
        stint_in(&dir, &dir.join("cache"), &["run", "--format", "json", "-o", path_str(&json), "--", path_str(&bin)]);
    assert!(o.same_behaviour(&orig), "{}", describe_difference("original", &orig, "stint run", &o));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).expect("valid JSON");
    let docs = v.as_array().expect("an array: the program forked");
    assert_eq!(docs.len(), 2, "{v}");
    assert!(docs.iter().all(|d| d["schema"] == "stint-profile/1"), "{v}");
    assert_eq!(docs[0]["fork_child"], false);
    assert_eq!(docs[1]["ppid"], docs[0]["pid"]);
    assert_eq!(main_calls(&docs[0], "g"), 7);
    assert_eq!(main_calls(&docs[1], "g"), 5);
}

#[test]
fn run_single_process_json_is_one_document_with_exact_calls() {
    let _cpu = cpu_share();
    let dir = fresh_dir("runbatch-one");
    let o = stint_in(&dir, &dir.join("cache"), &["run", "--format", "json", "-o", "one.json", "--", path_str(&ends())]);
    assert_eq!(o.status, 0, "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("one.json")).unwrap()).unwrap();
    assert!(v.is_object(), "{v}");
    assert_eq!(main_calls(&v, "work"), 3);
}

#[test]
fn run_keeps_argv0_stdin_and_exit_code() {
    let _cpu = cpu_share();
    let dir = fresh_dir("runbatch-argv0");
    // Found through PATH: argv[0] stays the bare name.
    let bindir = ends().parent().unwrap().to_path_buf();
    let path = format!("{}:{}", path_str(&bindir), std::env::var("PATH").unwrap_or_default());
    let orig = Run::new(Path::new("sh"), &dir).args(["-c", "exec ends exit"]).env("PATH", &path).run();
    assert_eq!(orig.status, 5);
    assert_eq!(orig.stdout_str(), "argv0=ends\n");
    let o = Run::new(stint_bin(), &dir)
        .env("PATH", &path)
        .env("XDG_CACHE_HOME", path_str(&dir.join("cache")))
        .args(["run", "-o", "r.txt", "--", "ends", "exit"])
        .run();
    assert!(o.same_behaviour(&orig), "{}", describe_difference("original", &orig, "stint run", &o));
    // stdin reaches the program: cat copies it byte for byte.
    let input: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    let cat = Run::new(stint_bin(), &dir)
        .env("XDG_CACHE_HOME", path_str(&dir.join("cache")))
        .args(["run", "-o", "cat.txt", "--", "cat"])
        .stdin(input.clone())
        .run();
    assert_eq!(cat.status, 0, "{cat:?}");
    assert!(cat.stdout == input, "cat's output differs from its input");
}

fn assert_dies_like_original(arg: &str, signal: i32) {
    let _cpu = cpu_share();
    let dir = fresh_dir(&format!("runbatch-{arg}"));
    let orig = original(&ends(), &dir, &[arg]);
    assert_eq!(orig.signal, Some(signal), "{orig:?}");
    let o = stint_in(&dir, &dir.join("cache"), &["run", "-o", "r.txt", "--", path_str(&ends()), arg]);
    assert!(o.same_behaviour(&orig), "{}", describe_difference("original", &orig, "stint run", &o));
    // The report was still written.
    let r = std::fs::read_to_string(dir.join("r.txt")).unwrap();
    assert_eq!(table_calls(&r, "== ends pid ", "work"), Some(3), "{r}");
}

#[test]
fn run_dies_by_the_programs_sigterm() {
    assert_dies_like_original("term", libc::SIGTERM);
}

#[test]
fn run_dies_by_the_programs_abort() {
    assert_dies_like_original("abort", libc::SIGABRT);
}

#[test]
fn run_forwards_sigterm_to_the_program() {
    let _cpu = cpu_share();
    let dir = fresh_dir("runbatch-forward");
    let mut child = Command::new(stint_bin())
        .args(["run", "-o", "r.txt", "--", path_str(&ends()), "wait"])
        .current_dir(&dir)
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        seen.push(l.clone());
        if l == "ready" {
            break;
        }
    }
    assert_eq!(seen.last().map(String::as_str), Some("ready"), "{seen:?}");
    // SAFETY: kill(2) on the child we started and have not waited for.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    let r = std::fs::read_to_string(dir.join("r.txt")).expect("report written before dying");
    assert_eq!(table_calls(&r, "== ends pid ", "work"), Some(3), "{r}");
}

#[test]
fn run_reuses_the_cached_rewrite() {
    let _cpu = cpu_share();
    let dir = fresh_dir("runbatch-cache");
    let cache = dir.join("cache");
    let first = stint_in(&dir, &cache, &["run", "-v", "-o", "r1.txt", "--", path_str(&ends())]);
    let line = |o: &Outcome, what: &str| -> Option<PathBuf> {
        o.stderr_str()
            .lines()
            .find_map(|l| l.split_once(what).map(|(_, p)| PathBuf::from(p.split(" (").next().unwrap())))
    };
    let made = line(&first, ": rewrote into ").unwrap_or_else(|| panic!("first run rewrites: {first:?}"));
    assert!(made.starts_with(cache.join("stint")), "{}", made.display());
    assert_eq!(made.file_name().unwrap(), "ends", "the cached copy keeps the program's name");
    let mtime = std::fs::metadata(&made).unwrap().modified().unwrap();
    let second = stint_in(&dir, &cache, &["run", "-v", "-o", "r2.txt", "--", path_str(&ends())]);
    assert_eq!(line(&second, ": cached rewrite "), Some(made.clone()), "{second:?}");
    assert_eq!(std::fs::metadata(&made).unwrap().modified().unwrap(), mtime, "not written again");
    // Another spec is another cache entry.
    let spec = "metrics:\n  - name: calls\n    kind: counter\n    at: entry\n    functions: [\"*\"]\n    exclude: []\n    on_at_start: true\n";
    std::fs::write(dir.join("spec.yaml"), spec).unwrap();
    let third = stint_in(&dir, &cache, &["run", "-v", "--spec", "spec.yaml", "-o", "r3.txt", "--", path_str(&ends())]);
    let other = line(&third, ": rewrote into ");
    assert!(other.is_some() && other != Some(made), "{third:?}");
}

#[test]
fn run_refuses_bad_input_before_running() {
    let _cpu = cpu_share();
    let dir = fresh_dir("runbatch-bad");
    let script = dir.join("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho ran > ran.txt\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = dir.join("cache");
    for (args, names) in [
        (vec!["run", "--", path_str(&script)], path_str(&script).to_string()),
        (vec!["run", "--", "no-such-program-of-stint"], "no-such-program-of-stint".to_string()),
        (vec!["run", "--spec", "missing.yaml", "--", path_str(&ends())], "missing.yaml".to_string()),
        (vec!["batch", "no-such-dir", "-o", "out"], "no-such-dir".to_string()),
    ] {
        let o = stint_in(&dir, &cache, &args);
        assert_eq!(o.status, 2, "{args:?}: {o:?}");
        let err = o.stderr_str();
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.starts_with(&names), "{args:?}: names the file first: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: {o:?}");
    }
    assert!(!dir.join("ran.txt").exists(), "the script was not run");
}

/// A directory with three test programs (one in a subdirectory), a script, a symbolic link
/// and a shared library.
fn batch_tree(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    let mut programs = Vec::new();
    for (name, rel) in [("recurse", "recurse"), ("calltree", "calltree"), ("selfcopy", "sub/selfcopy")] {
        let dest = tree.join(rel);
        std::fs::copy(build(&program(name), Variant::PieO2), &dest).unwrap();
        programs.push((name, dest));
    }
    std::fs::write(tree.join("run-tests.sh"), "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(tree.join("run-tests.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("recurse", tree.join("link")).unwrap();
    let src = dir.join("lib.c");
    std::fs::write(&src, "int f(int x) { return x + 1; }\n").unwrap();
    tool("gcc", &["-shared", "-fPIC", path_str(&src), "-o", path_str(&tree.join("libf.so"))]);
    std::fs::write(tree.join("notes.txt"), "not executable\n").unwrap();
    programs
}

/// Summary rows of `stint batch`: file → (status, reason).
fn summary_rows(out: &str) -> std::collections::BTreeMap<String, (String, String)> {
    out.lines()
        .skip(1)
        .filter(|l| l.starts_with("rewritten") || l.starts_with("skipped") || l.starts_with("FAILED"))
        .map(|l| {
            let status = l.split_whitespace().next().unwrap().to_string();
            let file = l.split_whitespace().find(|w| w.contains("/tree/")).unwrap().to_string();
            let reason = l[l.find(&file).unwrap() + file.len()..].trim().to_string();
            (Path::new(&file).file_name().unwrap().to_string_lossy().into_owned(), (status, reason))
        })
        .collect()
}

#[test]
fn batch_rewrites_executables_and_skips_the_rest_with_reasons() {
    let _cpu = cpu_share();
    let dir = fresh_dir("runbatch-batch");
    let programs = batch_tree(&dir);
    let out = dir.join("out");
    let o = stint_in(&dir, &dir.join("cache"), &["batch", path_str(&dir.join("tree")), "-o", path_str(&out)]);
    assert_eq!(o.status, 0, "{o:?}");
    let rows = summary_rows(&o.stdout_str());
    let status = |f: &str| rows.get(f).map(|(s, r)| (s.as_str(), r.as_str()));
    for (name, _) in &programs {
        assert_eq!(status(name).map(|s| s.0), Some("rewritten"), "{}", o.stdout_str());
    }
    assert_eq!(status("run-tests.sh"), Some(("skipped", "script")));
    assert_eq!(status("link"), Some(("skipped", "symbolic link")));
    assert!(status("libf.so").is_some_and(|(s, r)| s == "skipped" && r.contains("shared library")), "{rows:?}");
    assert_eq!(status("notes.txt"), None, "files that are not executable are not listed");
    assert!(o.stdout_str().ends_with("3 rewritten, 3 skipped, 0 failed\n"), "{}", o.stdout_str());
    assert_eq!(dir_entries(&out), ["calltree", "recurse", "sub"], "only the rewritten files, mirrored");
    for (name, orig_path) in &programs {
        let rewritten = out.join(orig_path.strip_prefix(dir.join("tree")).unwrap());
        assert_eq!(file_mode(&rewritten), file_mode(orig_path), "{name}: mode kept");
        let p = program(name);
        let profiles = fresh_dir(&format!("runbatch-batch-{name}"));
        let a = Run::new(orig_path, &dir).args(&p.args).run();
        let b = Run::new(&rewritten, &dir).args(&p.args).env("STINT_PROFILE", &profile_template(&profiles, name)).run();
        assert!(a.same_behaviour(&b), "{}", describe_difference("original", &a, "rewritten", &b));
        assert_eq!(dir_entries(&profiles).len(), 1, "{name}: the rewritten copy measures");
    }
}

#[test]
fn batch_in_place_then_restore_gives_the_files_back() {
    let _cpu = cpu_share();
    let dir = fresh_dir("runbatch-inplace");
    let programs = batch_tree(&dir);
    let tree = dir.join("tree");
    let before: Vec<Vec<u8>> = programs.iter().map(|(_, p)| std::fs::read(p).unwrap()).collect();
    let o = stint_in(&dir, &dir.join("cache"), &["batch", "--in-place", path_str(&tree), "--jobs", "2"]);
    assert_eq!(o.status, 0, "{o:?}");
    for ((name, path), bytes) in programs.iter().zip(&before) {
        let orig = PathBuf::from(format!("{}.orig", path.display()));
        assert!(std::fs::read(&orig).unwrap() == *bytes, "{name}: the original is kept beside");
        assert!(std::fs::read(path).unwrap() != *bytes, "{name}: rewritten in place");
        assert_eq!(file_mode(path), file_mode(&orig), "{name}");
        let p = program(name);
        let profiles = fresh_dir(&format!("runbatch-inplace-{name}"));
        let a = Run::new(&orig, &dir).args(&p.args).run();
        let b = Run::new(path, &dir).args(&p.args).env("STINT_PROFILE", &profile_template(&profiles, name)).run();
        assert_eq!((a.status, &a.stdout), (b.status, &b.stdout), "{name}");
    }
    // A second --in-place never overwrites the kept originals: the rewritten files are skipped.
    let again = stint_in(&dir, &dir.join("cache"), &["batch", "--in-place", path_str(&tree)]);
    assert_eq!(again.status, 0, "{again:?}");
    assert!(again.stdout_str().contains("0 rewritten"), "{again:?}");
    let r = stint_in(&dir, &dir.join("cache"), &["batch", "--restore", path_str(&tree)]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(r.stdout_str().ends_with("3 restored\n"), "{r:?}");
    for ((name, path), bytes) in programs.iter().zip(&before) {
        assert!(std::fs::read(path).unwrap() == *bytes, "{name}: byte-identical after --restore");
    }
    assert!(!dir_entries(&tree).iter().any(|f| f.ends_with(".orig")), "{:?}", dir_entries(&tree));
}

#[test]
fn batch_exits_1_when_a_rewrite_fails() {
    let _cpu = cpu_share();
    let dir = fresh_dir("runbatch-fail");
    // A truncated ELF: the magic is right, the headers are not there.
    let bad = dir.join("truncated");
    std::fs::write(&bad, b"\x7fELF\x02\x01\x01\0").unwrap();
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = stint_in(&dir, &dir.join("cache"), &["batch", path_str(&bad), "-o", path_str(&dir.join("out"))]);
    assert_eq!(o.status, 1, "{o:?}");
    assert!(o.stdout_str().contains("FAILED"), "{o:?}");
    assert!(o.stdout_str().ends_with("0 rewritten, 0 skipped, 1 failed\n"), "{o:?}");
}

#[test]
fn run_debian_programs_behave_like_the_originals() {
    let _cpu = cpu_share();
    let dir = fresh_dir("runbatch-debian");
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    for i in 0..5 {
        std::fs::write(work.join(format!("f{i}.txt")), format!("{i}\n").repeat(1000 * i + 1)).unwrap();
    }
    let cache = dir.join("cache");
    let lines: Vec<u8> = (0..2000).map(|i| format!("{}\n", (i * 7919) % 1009)).collect::<String>().into_bytes();
    /// A Debian program, its arguments and its stdin.
    type Case<'a> = (&'a str, Vec<&'a str>, Option<Vec<u8>>);
    let cases: [Case; 3] = [
        ("sha256sum", vec!["f0.txt", "f1.txt", "f2.txt", "f3.txt", "f4.txt"], None),
        ("sort", vec!["-n"], Some(lines)),
        ("sha256sum", vec!["no-such-file"], None),
    ];
    for (prog, args, stdin) in cases {
        let mut orig = Run::new(Path::new(prog), &work).args(&args);
        let mut args_run = vec!["run", "-o", "../r.txt", "--", prog];
        args_run.extend(&args);
        let mut run = Run::new(stint_bin(), &work).env("XDG_CACHE_HOME", path_str(&cache)).args(&args_run);
        if let Some(s) = stdin {
            orig = orig.stdin(s.clone());
            run = run.stdin(s);
        }
        let (a, b) = (orig.run(), run.run());
        assert!(a.same_behaviour(&b), "{}", describe_difference(prog, &a, "stint run", &b));
        assert!(std::fs::metadata(dir.join("r.txt")).unwrap().len() > 0, "{prog}: a report");
        assert_eq!(
            dir_entries(&work),
            ["f0.txt", "f1.txt", "f2.txt", "f3.txt", "f4.txt"],
            "{prog}: nothing new in the cwd"
        );
    }
}

#[test]
fn run_control_file_reaches_the_program() {
    let _cpu = cpu_share();
    let dir = fresh_dir("runbatch-control");
    let cache = dir.join("cache");
    std::fs::write(dir.join("none.yaml"), "on: []\n").unwrap();
    std::fs::write(dir.join("calls.yaml"), "on: [calls]\n").unwrap();
    let csv_rows = |control: &str| -> Vec<Vec<String>> {
        let out = format!("{control}.csv");
        let o = stint_in(
            &dir,
            &cache,
            &["run", "--control", control, "--format", "csv", "-o", &out, "--", path_str(&ends())],
        );
        assert_eq!(o.status, 0, "{o:?}");
        let text = std::fs::read_to_string(dir.join(&out)).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("pid,ppid,program,tid,thread,function,address,calls,cpu_ns,wall_ns"));
        lines.map(|l| l.split(',').map(str::to_string).collect()).collect()
    };
    assert_eq!(csv_rows("none.yaml"), Vec::<Vec<String>>::new(), "every metric off: no calls");
    let rows = csv_rows("calls.yaml");
    let work = rows.iter().find(|r| r[5] == "work").expect("work counted");
    assert_eq!(work[7], "3", "{rows:?}");
    assert_eq!(work[2], "ends");
}

#[test]
fn batch_never_writes_two_files_to_one_output() {
    let _cpu = cpu_share();
    let dir = fresh_dir("runbatch-collide");
    for d in ["a", "b"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
        std::fs::copy(build(&program("recurse"), Variant::PieO2), dir.join(d).join("t")).unwrap();
    }
    let o = stint_in(&dir, &dir.join("cache"), &["batch", "a", "b", "-o", "out"]);
    assert_eq!(o.status, 1, "{o:?}");
    let out = o.stdout_str();
    assert!(
        out.lines().any(|l| l.starts_with("FAILED") && l.contains("b/t") && l.contains("is also the output of a/t")),
        "{out}"
    );
    assert!(out.ends_with("1 rewritten, 0 skipped, 1 failed\n"), "{out}");
    assert!(std::fs::read(dir.join("out/t")).unwrap() != std::fs::read(dir.join("a/t")).unwrap(), "a/t rewritten");
}

#[test]
fn run_removes_its_profiles_unless_keep() {
    let _cpu = cpu_share();
    let dir = fresh_dir("runbatch-keep");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let bin = ends();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "-o", "r.txt"];
        args.extend(extra);
        args.extend(["--", path_str(&bin)]);
        Run::new(stint_bin(), &dir)
            .env("XDG_CACHE_HOME", path_str(&dir.join("cache")))
            .env("TMPDIR", path_str(&tmp))
            .args(&args)
            .run()
    };
    let o = run(&[]);
    assert_eq!(o.status, 0, "{o:?}");
    assert_eq!(dir_entries(&tmp), Vec::<String>::new(), "profiles removed");
    let o = run(&["--keep"]);
    let kept = o.stderr_str().lines().find_map(|l| l.strip_prefix("stint: profiles kept in ").map(PathBuf::from));
    let kept = kept.unwrap_or_else(|| panic!("the directory is named: {o:?}"));
    assert!(kept.starts_with(&tmp), "{}", kept.display());
    assert_eq!(file_mode(&kept), 0o700, "private");
    let files = dir_entries(&kept);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].starts_with("ends.") && files[0].ends_with(".stint"), "{files:?}");
    let r = report_json(&kept.join(&files[0]));
    assert_eq!(main_calls(&r, "work"), 3);
}
