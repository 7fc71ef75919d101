//! Run-time control (D10): `stint ctl` against a running rewritten program, control files,
//! snapshots, and a control page overwritten with garbage.
//!
//! The program is `testbins/ctl_loop.c`: two workers named worker-a and worker-b call
//! `tick()` exactly N times per `work N` command on stdin, main calls `heartbeat()` once per
//! command and prints `done N` when both workers are idle again. Between commands every
//! thread is blocked, so counts are exact: a change made between two commands applies to
//! every call of the next one.
//!
//! Each test holds the CPU turn (`common::cpu_turn`) while its program runs, so it does not
//! run next to the timed checks of `timers` and `locks`.

use crate::common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

/// A rewritten ctl_loop, running, driven through its stdin.
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    profile: PathBuf,
    input: Vec<String>,
    /// Lines the program answered with, after the first command.
    answers: Vec<String>,
    original: PathBuf,
    dir: PathBuf,
}

/// A spec whose every entry can only count calls: they take the calls-only path
/// (`codegen::calls_trampoline`), which `stint ctl` reaches through `owner_tpx`. `lock_wait`
/// (off) installs the thread-library wrappers, so that the workers' names, which main gives
/// them after creating them, are recorded whenever the workers register.
const CALLS_ONLY: &str = "metrics:\n  - {name: calls, kind: counter, at: entry, on_at_start: true}\n  - {name: lock_wait, kind: wait, at: sync_calls, on_at_start: false}\n";

/// The original ctl_loop and its rewrite with `spec` (None: the default spec).
fn binaries(variant: Variant, spec: Option<&str>) -> (PathBuf, PathBuf) {
    let p = program("ctl_loop");
    let original = build(&p, variant);
    let name = if spec.is_some() { "calls-only" } else { "default" };
    let rewritten = run_root().join("control").join(variant.name()).join(name).join("ctl_loop");
    static REWRITE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = REWRITE.lock().unwrap_or_else(|e| e.into_inner());
    if !rewritten.exists() {
        match spec {
            None => rewrite(&original, &rewritten),
            Some(text) => {
                let dir = rewritten.parent().unwrap();
                std::fs::create_dir_all(dir).unwrap();
                let file = dir.join("spec.yaml");
                std::fs::write(&file, text).unwrap();
                let o = stint(&[
                    "rewrite",
                    path_str(&original),
                    "-o",
                    path_str(&rewritten),
                    "--spec",
                    path_str(&file),
                    "-q",
                ]);
                assert!(o.status == 0, "stint rewrite --spec: {o:?}");
            }
        }
    }
    (original, rewritten)
}

impl Session {
    /// Start the rewritten program with `control` as its control file (None: no file).
    fn start(label: &str, control: Option<&str>) -> Session {
        Session::start_spec(label, control, None)
    }

    /// The same, rewritten with `spec`.
    fn start_spec(label: &str, control: Option<&str>, spec: Option<&str>) -> Session {
        let (original, rewritten) = binaries(Variant::PieO2, spec);
        let dir = fresh_dir(label);
        let mut cmd = Command::new(&rewritten);
        cmd.current_dir(&dir)
            .env("STINT_PROFILE", profile_template(&dir, "ctl_loop"))
            .env_remove("STINT_CONTROL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(text) = control {
            let path = dir.join("control.yaml");
            std::fs::write(&path, text).unwrap();
            cmd.env("STINT_CONTROL", &path);
        }
        let mut child = cmd.spawn().expect("start ctl_loop");
        let stdin = child.stdin.take();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let profile = dir.join(format!("ctl_loop.{}.stint", child.id()));
        let mut s = Session { child, stdin, lines, profile, input: Vec::new(), answers: Vec::new(), original, dir };
        s.command("work 1", "done 1"); // every thread has started and is idle
        s.answers.clear();
        s
    }

    /// Send a command and wait for the line it answers with.
    fn command(&mut self, cmd: &str, want: &str) {
        self.input.push(cmd.to_string());
        let w = self.stdin.as_mut().unwrap();
        writeln!(w, "{cmd}").unwrap();
        w.flush().unwrap();
        match self.lines.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => {
                assert_eq!(l, want, "answer to {cmd:?}");
                self.answers.push(l);
            }
            Err(e) => panic!("no answer to {cmd:?} ({e}); stderr: {}", self.stderr_so_far()),
        }
    }

    fn stderr_so_far(&mut self) -> String {
        let _ = self.child.kill();
        let mut s = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
        }
        s
    }

    fn ctl(&self, args: &[&str]) -> Outcome {
        let mut a = vec!["ctl", self.profile.to_str().unwrap()];
        a.extend_from_slice(args);
        stint(&a)
    }

    fn ctl_ok(&self, args: &[&str]) -> String {
        let o = self.ctl(args);
        assert_eq!(o.status, 0, "stint ctl {args:?}: {o:?}");
        o.stdout_str()
    }

    fn report(&self, extra: &[&str]) -> Value {
        let mut a = vec!["report", self.profile.to_str().unwrap(), "--json"];
        a.extend_from_slice(extra);
        let o = stint(&a);
        assert_eq!(o.status, 0, "stint report {extra:?}: {o:?}");
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// Quit, and check the run behaved exactly as the original given the same input.
    /// Returns the rewritten program's stderr.
    fn finish(mut self) -> String {
        self.input.push("quit".into());
        drop(self.stdin.take());
        let out = self.child.wait_with_output().expect("wait");
        let mut stdout = std::mem::take(&mut self.answers);
        stdout.extend(self.lines.iter());
        let input = self.input.iter().map(|l| format!("{l}\n")).collect::<String>();
        let orig = Run::new(&self.original, &self.dir).stdin(input.into_bytes()).timeout(Duration::from_secs(60)).run();
        let want: Vec<String> = orig.stdout_str().lines().skip(1).map(str::to_string).collect(); // after "done 1"
        assert_eq!(out.status.code(), Some(orig.status), "exit status differs from the original");
        assert_eq!(stdout, want, "stdout differs from the original");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

/// Calls of `function` by the thread named `thread` (0 if not listed).
fn calls(r: &Value, thread: &str, function: &str) -> u64 {
    threads(r)
        .iter()
        .filter(|t| t["name"].as_str() == Some(thread) || (thread == "main" && t["main"] == true))
        .flat_map(|t| t["functions"].as_array().cloned().unwrap_or_default())
        .filter(|f| f["name"].as_str() == Some(function))
        .map(|f| f["calls"].as_u64().unwrap_or(0))
        .sum()
}

fn tid_of(r: &Value, name: &str) -> String {
    threads(r)
        .iter()
        .find(|t| t["name"].as_str() == Some(name))
        .and_then(|t| t["tid"].as_u64())
        .unwrap_or_else(|| panic!("no thread named {name} in {r:#}"))
        .to_string()
}

#[test]
fn enable_and_disable_while_running() {
    let _turn = cpu_turn();
    let mut s = Session::start("ctl-enable", Some("on: []\n"));
    s.command("work 100", "done 100");
    let r = s.report(&[]);
    assert_eq!(calls(&r, "worker-a", "tick") + calls(&r, "worker-b", "tick"), 0, "everything off at start: {r:#}");

    let line = s.ctl_ok(&["enable", "calls"]);
    assert!(line.starts_with("calls on at all"), "{line}");
    s.command("work 1000", "done 1000");
    let r = s.report(&[]);
    assert_eq!(calls(&r, "worker-a", "tick"), 1000, "{r:#}");
    assert_eq!(calls(&r, "worker-b", "tick"), 1000, "{r:#}");
    assert_eq!(calls(&r, "main", "heartbeat"), 1, "main's command after the enable");

    s.ctl_ok(&["disable", "calls"]);
    s.command("work 500", "done 500");
    let r = s.report(&[]);
    assert_eq!(calls(&r, "worker-a", "tick"), 1000, "disabled: no more counts");
    assert_eq!(calls(&r, "worker-b", "tick"), 1000, "disabled: no more counts");
    assert_eq!(calls(&r, "main", "heartbeat"), 1);

    // Only tick, by glob.
    let line = s.ctl_ok(&["enable", "calls", "--function", "ti?k"]);
    assert!(line.contains("at 1 of") && line.contains("tick"), "{line}");
    s.command("work 7", "done 7");
    let r = s.report(&[]);
    assert_eq!(calls(&r, "worker-a", "tick"), 1007);
    assert_eq!(calls(&r, "main", "heartbeat"), 1, "heartbeat is not in the focus");
    let status = s.ctl_ok(&["status"]);
    assert!(status.contains("calls        1 of"), "{status}");
    let err = s.finish();
    assert_eq!(err, "", "nothing on stderr");
}

/// `stint ctl P enable m1 m2 m3` turns on every metric it names, not only the last one (each
/// metric's change starts from what the previous one wrote, not from a stale read).
#[test]
fn enable_several_metrics_at_once() {
    let _turn = cpu_turn();
    let mut s = Session::start("ctl-several", Some("on: []\n"));
    s.command("work 10", "done 10");
    let lines = s.ctl_ok(&["enable", "calls", "cpu_time", "wall_time"]);
    assert_eq!(lines.lines().count(), 3, "one line per metric: {lines}");
    let status: Value = serde_json::from_str(&s.ctl_ok(&["status", "--json"])).unwrap();
    let metrics = status["metrics"].as_array().unwrap_or_else(|| panic!("no metrics in {status:#}"));
    for name in ["calls", "cpu_time", "wall_time"] {
        let m = metrics.iter().find(|m| m["metric"] == name).unwrap_or_else(|| panic!("no {name} in {status:#}"));
        assert!(m["points"].as_u64().unwrap() > 0, "{name} is built in: {m}");
        assert_eq!(m["points_on"], m["points"], "{name} on at every point: {m}");
        assert_eq!(m["threads"], "all", "{name} on for every thread: {m}");
    }
    s.command("work 100", "done 100");
    let r = s.report(&[]);
    assert_eq!(calls(&r, "worker-a", "tick"), 100, "{r:#}");
    s.ctl_ok(&["disable", "calls", "cpu_time"]);
    let status: Value = serde_json::from_str(&s.ctl_ok(&["status", "--json"])).unwrap();
    for m in status["metrics"].as_array().unwrap() {
        let want_on = m["metric"] == "wall_time";
        assert_eq!(m["points_on"].as_u64() != Some(0), want_on, "after disabling calls and cpu_time: {m}");
    }
    // Both disables took effect, not only the last: no more calls counted.
    s.command("work 100", "done 100");
    let r = s.report(&[]);
    assert_eq!(calls(&r, "worker-a", "tick"), 100, "calls off after `disable calls cpu_time`: {r:#}");
    let err = s.finish();
    assert_eq!(err, "", "nothing on stderr");
}

#[test]
fn enable_for_one_thread() {
    let _turn = cpu_turn();
    // lock_wait on: the workers register at their first wrapped call.
    let mut s = Session::start("ctl-thread", Some("on: [lock_wait]\n"));
    let r = s.report(&[]);
    let a = tid_of(&r, "worker-a");
    let line = s.ctl_ok(&["enable", "calls", "--thread", &a]);
    assert!(line.trim_end().ends_with(&format!("thread {a}")), "{line}");
    s.command("work 700", "done 700");
    let r = s.report(&[]);
    assert_eq!(calls(&r, "worker-a", "tick"), 700, "{r:#}");
    assert_eq!(calls(&r, "worker-b", "tick"), 0, "worker-b is outside the focus: {r:#}");
    assert_eq!(calls(&r, "main", "heartbeat"), 0, "main is outside the focus");
    let st: Value = serde_json::from_str(&s.ctl_ok(&["status", "--json"])).unwrap();
    let measures: Vec<(String, String)> = st["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["tid"].to_string(), t["measures"].as_str().unwrap().to_string()))
        .collect();
    assert!(measures.iter().any(|(t, m)| *t == a && m == "all"), "{measures:?}");
    assert!(measures.iter().filter(|(t, _)| *t != a).all(|(_, m)| m == "all but calls"), "{measures:?}");

    // Off for that thread again: nothing more anywhere.
    s.ctl_ok(&["disable", "calls", "--thread", &a]);
    s.command("work 5", "done 5");
    assert_eq!(calls(&s.report(&[]), "worker-a", "tick"), 700);

    // A tid that is not a thread of the program.
    let o = s.ctl(&["enable", "calls", "--thread", "1"]);
    assert_eq!(o.status, 2);
    assert!(o.stderr_str().contains("1 is not a live thread"), "{o:?}");
    s.finish();
}

/// A thread mask with the calls-only path: `stint ctl --thread` disarms the named thread's
/// and every other thread's path with the mask it writes; the runtime re-arms only where the
/// mask counts calls. Off at start: the first command's calls register the threads (the
/// calls-only path registers a thread at its first entry, on or off) and count nothing.
#[test]
fn calls_only_enable_for_one_thread() {
    let _turn = cpu_turn();
    let mut s = Session::start_spec("ctl-calls-thread", Some("on: []\n"), Some(CALLS_ONLY));
    let r = s.report(&[]);
    assert_eq!(calls(&r, "worker-a", "tick"), 0, "off at start: {r:#}");
    let a = tid_of(&r, "worker-a");
    s.ctl_ok(&["enable", "calls", "--thread", &a]);
    s.command("work 700", "done 700");
    let r = s.report(&[]);
    assert_eq!(calls(&r, "worker-a", "tick"), 700, "{r:#}");
    assert_eq!(calls(&r, "worker-b", "tick"), 0, "worker-b is outside the focus: {r:#}");
    assert_eq!(calls(&r, "main", "heartbeat"), 0, "main is outside the focus: {r:#}");
    // Every thread again, then off for worker-a alone.
    s.ctl_ok(&["enable", "calls"]);
    s.command("work 30", "done 30");
    s.ctl_ok(&["disable", "calls", "--thread", &a]);
    s.command("work 5", "done 5");
    let r = s.report(&[]);
    assert_eq!(calls(&r, "worker-a", "tick"), 730, "{r:#}");
    assert_eq!(calls(&r, "worker-b", "tick"), 35, "{r:#}");
    assert_eq!(calls(&r, "main", "heartbeat"), 2, "{r:#}");
    s.finish();
}

/// The same first snapshot with calls-only entries (the threads take it at their next event:
/// a wrapped call or a calls-only entry, whose path `stint ctl` disarms with the key).
#[test]
fn calls_only_snapshot_is_a_baseline() {
    let _turn = cpu_turn();
    let mut s = Session::start_spec("ctl-calls-snapshot", None, Some(CALLS_ONLY));
    first_snapshot(&mut s);
    s.finish();
}

/// `work 300`, a snapshot while every thread is blocked, `work 200`: the counts since the
/// snapshot are the last command's, and every thread took it.
fn first_snapshot(s: &mut Session) {
    s.command("work 300", "done 300");
    let line = s.ctl_ok(&["snapshot", "--wait-ms", "50"]);
    // Every thread is blocked: none reaches a safe point before its next event.
    assert!(line.starts_with("snapshot 1: 0 of 3 live threads took it; 3 idle"), "{line}");
    s.command("work 200", "done 200");
    let since = s.report(&["--since-snapshot"]);
    assert_eq!(calls(&since, "worker-a", "tick"), 200, "{since:#}");
    assert_eq!(calls(&since, "worker-b", "tick"), 200, "{since:#}");
    assert_eq!(calls(&since, "main", "heartbeat"), 1, "{since:#}");
    let total = s.report(&[]);
    assert_eq!(calls(&total, "worker-a", "tick"), 501, "work 1, 300 and 200");
    let status = s.ctl_ok(&["status"]);
    assert!(status.contains("snapshot 1: 3 of 3 live threads took it"), "{status}");
}

/// A thread that runs nothing but calls-only entries (`bench_calls`' loop: no wrapped call,
/// no import) still takes a request: `stint ctl` writes 0 into its `owner_tpx` with the key,
/// so its next entry goes to the runtime's safe point. The loop runs until the test kills it
/// (by pid).
#[test]
fn calls_only_loop_takes_a_snapshot() {
    let _turn = cpu_turn();
    let dir = fresh_dir("ctl-calls-loop");
    let bin = build(&program("bench_calls"), Variant::PieO2);
    let spec = dir.join("calls.yaml");
    std::fs::write(&spec, "metrics: [{name: calls, kind: counter, at: entry, on_at_start: true}]\n").unwrap();
    let out = dir.join("bench_calls");
    let o = stint(&["rewrite", path_str(&bin), "-o", path_str(&out), "--spec", path_str(&spec), "-q"]);
    assert_eq!(o.status, 0, "stint rewrite --spec: {o:?}");
    let mut child = Command::new(&out)
        .arg("100000000000")
        .current_dir(&dir)
        .env("STINT_PROFILE", profile_template(&dir, "bench_calls"))
        .env_remove("STINT_CONTROL")
        .stdout(Stdio::null())
        .spawn()
        .expect("start bench_calls");
    let profile = dir.join(format!("bench_calls.{}.stint", child.id()));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !profile.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let snap = stint(&["ctl", path_str(&profile), "snapshot", "--wait-ms", "10000"]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(snap.status, 0, "{snap:?}");
    assert!(snap.stdout_str().starts_with("snapshot 1: 1 of 1 live threads took it"), "{snap:?}");
}

#[test]
fn snapshot_is_a_baseline() {
    let _turn = cpu_turn();
    let mut s = Session::start("ctl-snapshot", Some("on: [calls]\n"));
    first_snapshot(&mut s);

    // A second snapshot replaces the first.
    s.ctl_ok(&["snapshot", "--wait-ms", "0"]);
    s.command("work 9", "done 9");
    let since = s.report(&["--since-snapshot"]);
    assert_eq!(calls(&since, "worker-b", "tick"), 9, "{since:#}");
    s.finish();
}

#[test]
fn control_file_foci() {
    let _turn = cpu_turn();
    let s = Session::start(
        "ctl-foci",
        Some("# only worker-a's ticks\non: [calls, lock_wait]\nfunctions:\n  - tick\nthreads: [worker-a]\n"),
    );
    let mut s = s;
    s.command("work 40", "done 40");
    let r = s.report(&[]);
    assert_eq!(calls(&r, "worker-a", "tick"), 41, "{r:#}");
    assert_eq!(calls(&r, "worker-b", "tick"), 0, "{r:#}");
    assert_eq!(calls(&r, "main", "heartbeat"), 0, "{r:#}");
    assert_eq!(calls(&r, "worker-a", "pthread_mutex_lock"), 0, "wrapper call counts follow functions:");
    let waits = threads(&r).iter().find(|t| t["name"] == "worker-a").unwrap()["waits"].as_array().unwrap().len();
    assert!(waits > 0, "lock waits of worker-a are measured: {r:#}");
    let status = s.ctl_ok(&["status"]);
    assert!(status.contains("control file:") && status.contains("applied at start"), "{status}");
    assert_eq!(s.finish(), "");
}

#[test]
fn bad_control_files_leave_the_program_running() {
    let _turn = cpu_turn();
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("unknown", Some("on: [calls, bogus]\n"), "line 1: unknown metric"),
        ("syntax", Some("on: [calls\n"), "line 1: "),
        ("key", Some("on: [calls]\nfunction: [x]\n"), "line 2: unknown key"),
        ("missing", None, "cannot read: ENOENT"),
    ];
    for &(label, text, why) in cases {
        let (original, rewritten) = binaries(Variant::PieO2, None);
        let dir = fresh_dir(&format!("ctl-bad-{label}"));
        let path = dir.join("control.yaml");
        if let Some(t) = text {
            std::fs::write(&path, t).unwrap();
        }
        let input = b"work 50\nwork 60\n".to_vec();
        let orig = Run::new(&original, &dir).stdin(input.clone()).run();
        let run = Run::new(&rewritten, &dir)
            .env("STINT_PROFILE", &profile_template(&dir, "ctl_loop"))
            .env("STINT_CONTROL", path.to_str().unwrap())
            .stdin(input)
            .run();
        assert_eq!((run.status, run.stdout.clone()), (orig.status, orig.stdout.clone()), "{label}: {run:?}");
        let err = run.stderr_str();
        assert_eq!(err.lines().count(), 1, "{label}: one line: {err}");
        assert!(
            err.starts_with("stint: ctl_loop: control file '")
                && err.contains(why)
                && err.ends_with("; running with every metric off\n"),
            "{label}: {err}"
        );
        let profile = dir.join(format!("ctl_loop.{}.stint", run.pid));
        let r = report_json(&profile);
        let total: u64 = threads(&r).iter().map(total_calls).sum();
        assert_eq!(total, 0, "{label}: every metric off: {r:#}");
        let st = stint(&["ctl", profile.to_str().unwrap(), "status"]);
        assert!(st.stdout_str().contains("control file: rejected: "), "{label}: {st:?}");
    }
}

/// xorshift64*: deterministic garbage.
fn garbage(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

fn overwrite(path: &Path, off: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, off).unwrap();
}

#[test]
fn corrupted_control_page_leaves_the_program_running() {
    let _turn = cpu_turn();
    let mut s = Session::start("ctl-corrupt", Some("on: [calls, lock_wait]\n"));
    s.command("work 100", "done 100");
    let control_off = stint_layout::CONTROL_OFFSET;
    for seed in 1..=20u64 {
        overwrite(&s.profile, control_off, &garbage(seed, 4096));
        // Make the ring look busy so the threads read the garbage at their safe points.
        let head = seed * 7 + 3;
        overwrite(
            &s.profile,
            control_off + std::mem::offset_of!(stint_layout::Control, req_head) as u64,
            &head.to_le_bytes(),
        );
        s.command("work 10", "done 10");
    }
    // The gates are untouched: counting went on exactly.
    let r = s.report(&[]);
    assert_eq!(calls(&r, "worker-a", "tick"), 301, "{r:#}");
    // Garbage in the gate bytes too: metrics flip on and off at random, the program runs on.
    let h = stint_layout::FileHeader::parse(&std::fs::read(&s.profile).unwrap(), u64::MAX).unwrap();
    for seed in 21..=30u64 {
        overwrite(&s.profile, h.ctl_offset, &garbage(seed, h.n_points as usize));
        s.command("work 10", "done 10");
    }
    assert_eq!(s.finish(), "");
}

#[test]
fn ctl_refuses_what_it_cannot_do() {
    let _turn = cpu_turn();
    let mut s = Session::start("ctl-errors", Some("on: [calls]\n"));
    s.command("work 3", "done 3");
    let o = s.ctl(&["enable", "bogus"]);
    assert_eq!(o.status, 2);
    assert!(o.stderr_str().starts_with("unknown metric 'bogus'"), "{o:?}");
    let o = s.ctl(&["enable", "calls", "--function", "no_such_*"]);
    assert_eq!(o.status, 2);
    assert!(o.stderr_str().contains("no function matches no_such_*"), "{o:?}");
    // A symbolic link to the profile is not followed.
    let link = s.dir.join("link.stint");
    std::os::unix::fs::symlink(&s.profile, &link).unwrap();
    let o = stint(&["ctl", link.to_str().unwrap(), "status"]);
    assert_eq!(o.status, 2);
    assert!(o.stderr_str().contains("is a symbolic link"), "{o:?}");
    let profile = s.profile.clone();
    s.finish();
    // The process has ended: changes are refused, status still works.
    let p = profile.to_str().unwrap();
    let o = stint(&["ctl", p, "disable", "calls"]);
    assert_eq!(o.status, 2);
    assert!(o.stderr_str().contains("is not running; its profile is final"), "{o:?}");
    let o = stint(&["ctl", p, "status"]);
    assert_eq!(o.status, 0, "{o:?}");
    assert!(o.stdout_str().lines().next().unwrap().ends_with("ended)"), "{o:?}");
}
