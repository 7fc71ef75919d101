//! Sampling short, frequent calls (issues 12 and 14; `stint rewrite --sampling`): after its
//! first `SAMPLE_LEARN` (512) timed calls on a thread, a point whose mean call is shorter than
//! `SAMPLE_FACTOR` (20) timed calls' cost is timed one call in `SAMPLE_EVERY` (64, drawn by a
//! Weyl hash of the entry count); the other calls push a frame marked untimed (no `rdtsc`),
//! so counts, call paths, recursion and frames left by `longjmp` stay exact. The report scales
//! the timed calls' time to all calls and gives the error bound (twice the standard error,
//! with the timed calls' mean squared span standing for their variance: conservative) in
//! `sampled` (JSON) and a `~` mark (tables).
//!
//! `testbins/sampling.c`: `rec(3)` 20,000 times (four nested `rec` nodes of 20,000 calls),
//! `hop` → `leaf` 20,000 times with every 100th `leaf` longjmp-ing out of both frames, and
//! `drive` calling `work` (≈ 20 ns of arithmetic) 200,000 times, timed by the program itself.
//!
//! | check | bound |
//! | --- | --- |
//! | calls of every function, the four `rec` nodes, `abandoned_frames` | exact (200 jumps × 2 frames) |
//! | `work`'s estimated CPU time against the original's CPU time of `drive` (its caller, so the original's figure also holds the loop) | within the stated error bound + 15 % (the compensation's own error, see `compensation.rs`), in one of up to [`PAIRS`] interleaved (original, sampled) pairs |
//! | without `--sampling` | no function is `sampled`; every call timed |
//! | `stint ctl … sampling off` (`testbins/ctl_loop.c`) | every call after it timed: the run's timed count grows by exactly the calls made after it, on each worker; `status` says `off` |
//! | `stint ctl … sampling on` | sampled again at once: 600–1400 of 64,000 calls timed since a snapshot (1 in 64: 1,000; the whole run's count would be more) |
//! | `sampling` without sampling code | exit 2, one line, the control page unchanged |
//! | a control page written by hand | any non-zero `sampling_off` is off once a well-formed request is seen; forged, unknown and out-of-ring requests change nothing, counts stay exact |
//! | `testbins/sampling_stall.c`: one of `tiny`'s 511 learning calls sleeps 1 ms | `tiny` is sampled all the same (the learning calls' time off a CPU is left out of the decision); its wall estimate holds the sleep once; counts exact |
//! | `sampling_stall`: 11 learning calls sleep 50 µs (a function that blocks) | `tiny` stays timed on every call |
//! | `sampling_stall`: a call drawn to be timed after the decision sleeps 5 ms | the wall estimate's bound reaches the sleep and the loop's wall time bounds it from above; under 8 × the sleep (scaled by 64 it was 332 ms) |
//! | `testbins/sampling_eh.cpp`, -O2 and -O0 | C++ exceptions through sampled (mostly untimed) frames: counts and call paths exact, 2 abandoned frames per throw, `unmatched_exits` 0, the original's output |
//!
//! Why pairs: on these 2-core guests a whole process now and then runs about 40 % slower
//! than the one before it (4.15 against 5.8–6.0 ms of `drive` in the original, with nothing
//! else running, most often just after a rewrite), so one original and one sampled run
//! disagree by more than the bound in about one try in six. A wrong estimate disagrees in
//! every pair; a slow process only in its own.
use crate::common::*;
use serde_json::Value;

const CALLS: &str = "200000";
/// (original, sampled) pairs tried before an estimate outside its bound fails the test.
const PAIRS: usize = 5;

struct Runs {
    /// The original's CPU ns of `drive`.
    orig_drive_cpu: f64,
    dir: std::path::PathBuf,
    orig: std::path::PathBuf,
    sampled_bin: std::path::PathBuf,
    sampled: Value,
    sampled_table: String,
    exact: Value,
}

fn runs() -> &'static Runs {
    static R: std::sync::OnceLock<Runs> = std::sync::OnceLock::new();
    R.get_or_init(|| {
        let _turn = cpu_turn();
        let bin = build(&program("sampling"), Variant::PieO2);
        let dir = fresh_dir("sampling");
        let (sampled_bin, exact_bin) = (dir.join("sampling-sampled"), dir.join("sampling-exact"));
        let o = stint(&["rewrite", path_str(&bin), "-o", path_str(&sampled_bin), "--sampling"]);
        assert_eq!(o.status, 0, "rewrite --sampling: {}", o.stderr_str());
        rewrite(&bin, &exact_bin);
        let times = dir.join("orig.times");
        let orig = Run::new(&bin, &dir).args([CALLS]).env("TIMES_FILE", path_str(&times)).run();
        assert_eq!(orig.status, 0, "original: {}", orig.stderr_str());
        let mut docs = Vec::new();
        for (name, b) in [("sampled", &sampled_bin), ("exact", &exact_bin)] {
            let prof = dir.join(format!("{name}.stint"));
            let r = Run::new(b, &dir).args([CALLS]).env("STINT_PROFILE", path_str(&prof)).run();
            assert!(r.same_behaviour(&orig), "{}", describe_difference("original", &orig, name, &r));
            docs.push(prof);
        }
        let table = stint(&["report", path_str(&docs[0])]);
        assert_eq!(table.status, 0, "{}", table.stderr_str());
        Runs {
            orig_drive_cpu: side_cpu_ns(&times, "drive"),
            dir: dir.clone(),
            orig: bin.clone(),
            sampled_bin: sampled_bin.clone(),
            sampled: report_json(&docs[0]),
            sampled_table: String::from_utf8_lossy(&table.stdout).into_owned(),
            exact: report_json(&docs[1]),
        }
    })
}

#[test]
fn counts_and_call_paths_stay_exact_under_sampling() {
    let doc = &runs().sampled;
    let t = main_thread(doc);
    for (name, calls) in [("rec", 80_000u64), ("hop", 20_000), ("leaf", 20_000), ("work", 200_000), ("drive", 1)] {
        assert_eq!(main_function(doc, name)["calls"], calls, "{name}");
    }
    for name in ["rec", "hop", "leaf", "work"] {
        let s = &main_function(doc, name)["sampled"];
        let (timed, calls) = (s["timed"].as_u64(), s["calls"].as_u64());
        assert!(timed.zip(calls).is_some_and(|(t, c)| t > 0 && t < c / 8), "{name} not sampled: {s}");
    }
    let recs: Vec<&Value> =
        t["calltree"].as_array().expect("calltree").iter().filter(|n| n["function"] == "rec").collect();
    assert_eq!(recs.len(), 4, "rec → rec → rec → rec: {recs:?}");
    assert!(recs.iter().all(|n| n["calls"] == 20_000), "{recs:?}");
    // Each level's inclusive time holds the levels below it (timed draws are not periodic).
    for w in recs.windows(2) {
        assert!(w[0]["cpu_ns"].as_u64() >= w[1]["cpu_ns"].as_u64(), "{recs:?}");
    }
    assert_eq!(t["abandoned_frames"], 400, "200 longjmps through hop and leaf");
    assert_eq!(t["unmatched_exits"], 0);
}

/// One more (original, sampled) pair: the original's CPU ns of `drive`, and the sampled
/// report of `work`.
fn another_pair(r: &Runs, k: usize) -> (f64, Value) {
    let _turn = cpu_turn();
    let times = r.dir.join(format!("orig-{k}.times"));
    let orig = Run::new(&r.orig, &r.dir).args([CALLS]).env("TIMES_FILE", path_str(&times)).run();
    assert_eq!(orig.status, 0, "original: {}", orig.stderr_str());
    let prof = r.dir.join(format!("sampled-{k}.stint"));
    let s = Run::new(&r.sampled_bin, &r.dir).args([CALLS]).env("STINT_PROFILE", path_str(&prof)).run();
    assert!(s.same_behaviour(&orig), "{}", describe_difference("original", &orig, "sampled", &s));
    (side_cpu_ns(&times, "drive"), main_function(&report_json(&prof), "work").clone())
}

#[test]
fn a_sampled_estimate_is_within_its_bound() {
    let r = runs();
    let mut tries = Vec::new();
    for k in 0..PAIRS {
        let (orig, work) =
            if k == 0 { (r.orig_drive_cpu, main_function(&r.sampled, "work").clone()) } else { another_pair(r, k) };
        let est = work["cpu_ns"].as_f64().expect("work timed");
        let bound = work["sampled"]["cpu_error_ns"].as_f64().expect("cpu_error_ns");
        // A bound over a quarter of the time: a preemption inside a timed call (scaled by the
        // sampling rate) on a loaded machine; the pair says nothing, try the next. The CPU
        // time of one run of the original itself moves by up to 40 % between runs while the
        // rest of the suite runs on the other core (CI, 8d67f18: 4.28–6.05 ms in 5 runs, the
        // estimates 3.71–5.65 ms), so one pair is compared within 35 %; a wrongly scaled
        // estimate is off by multiples.
        let allowed = bound + 0.35 * orig;
        if bound > 0.0 && bound < 0.25 * orig && (est - orig).abs() <= allowed {
            return;
        }
        tries.push(format!(
            "estimated {est:.0} ns ± {bound:.0}, the original's drive {orig:.0} ns (allowed {allowed:.0})"
        ));
    }
    panic!(
        "work, in every one of {PAIRS} pairs (the bound must also be under 25 % of the time):\n{}",
        tries.join("\n")
    );
}

#[test]
fn the_table_marks_estimates_and_states_the_bound() {
    let text = &runs().sampled_table;
    let work = text.lines().find(|l| l.ends_with(" work")).unwrap_or_else(|| panic!("no work row:\n{text}"));
    assert!(work.contains('~'), "{work}");
    let note = text.lines().find(|l| l.trim_start().starts_with("work: timed ")).unwrap_or_else(|| panic!("{text}"));
    assert!(note.contains(" of 200000 calls, cpu ±"), "{note}");
    let main = text.lines().find(|l| l.ends_with(" main")).unwrap_or_else(|| panic!("{text}"));
    assert!(!main.contains('~'), "main is not sampled: {main}");
}

#[test]
fn without_sampling_every_call_is_timed() {
    let doc = &runs().exact;
    for f in main_thread(doc)["functions"].as_array().expect("functions") {
        assert!(f.get("sampled").is_none(), "{f}");
    }
    assert_eq!(main_function(doc, "work")["calls"], 200_000);
    assert!(main_function(doc, "work")["cpu_ns"].as_u64().is_some_and(|v| v > 0));
}

// ---- `stint ctl … sampling off|on` ------------------------------------------------------
//
// `testbins/ctl_loop.c` rewritten with `--sampling`: two workers call `tick()` (a few
// instructions: sampled after its first 512 calls) exactly N times per `work N` command on
// stdin; between commands every thread is blocked, so a change made between two commands
// applies to every call of the next one.

/// A running ctl_loop, driven through its stdin.
struct Live {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    profile: std::path::PathBuf,
    input: String,
    answers: Vec<String>,
    original: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Live {
    /// Start ctl_loop rewritten with `--sampling` (or without: `sampling` false).
    fn start(label: &str, sampling: bool) -> Live {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let original = build(&program("ctl_loop"), Variant::PieO2);
        let dir = fresh_dir(label);
        let rewritten = dir.join("ctl_loop");
        let mut args = vec!["rewrite", path_str(&original), "-o", path_str(&rewritten), "-q"];
        if sampling {
            args.push("--sampling");
        }
        let o = stint(&args);
        assert_eq!(o.status, 0, "rewrite: {}", o.stderr_str());
        let mut child = Command::new(&rewritten)
            .current_dir(&dir)
            .env("STINT_PROFILE", profile_template(&dir, "ctl_loop"))
            .env_remove("STINT_CONTROL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ctl_loop");
        let stdin = child.stdin.take();
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let profile = dir.join(format!("ctl_loop.{}.stint", child.id()));
        Live { child, stdin, lines, profile, input: String::new(), answers: Vec::new(), original, dir }
    }

    /// `work n`, answered by `done n`.
    fn work(&mut self, n: u64) {
        use std::io::Write;
        let cmd = format!("work {n}");
        self.input.push_str(&format!("{cmd}\n"));
        let w = self.stdin.as_mut().expect("stdin");
        writeln!(w, "{cmd}").and_then(|_| w.flush()).expect("write to ctl_loop");
        let l = self.lines.recv_timeout(std::time::Duration::from_secs(60)).expect("an answer to work");
        assert_eq!(l, format!("done {n}"));
        self.answers.push(l);
    }

    fn ctl(&self, args: &[&str]) -> Outcome {
        let mut a = vec!["ctl", path_str(&self.profile)];
        a.extend_from_slice(args);
        stint(&a)
    }

    fn ctl_ok(&self, args: &[&str]) -> String {
        let o = self.ctl(args);
        assert_eq!(o.status, 0, "stint ctl {args:?}: {}", o.stderr_str());
        o.stdout_str()
    }

    fn report(&self, extra: &[&str]) -> Value {
        let mut a = vec!["report", path_str(&self.profile), "--json"];
        a.extend_from_slice(extra);
        let o = stint(&a);
        assert_eq!(o.status, 0, "stint report {extra:?}: {}", o.stderr_str());
        serde_json::from_slice(&o.stdout).expect("report JSON")
    }

    /// Quit; the run's stdout and exit status must be the original's for the same input.
    fn finish(mut self) {
        self.input.push_str("quit\n");
        drop(self.stdin.take());
        let out = self.child.wait_with_output().expect("wait");
        let mut stdout = std::mem::take(&mut self.answers);
        stdout.extend(self.lines.iter());
        let orig = Run::new(&self.original, &self.dir).stdin(self.input.clone().into_bytes()).run();
        assert_eq!(out.status.code(), Some(orig.status), "exit status differs from the original");
        assert_eq!(stdout, orig.stdout_str().lines().map(str::to_string).collect::<Vec<_>>());
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "stderr");
    }
}

/// `tick`'s (calls, timed calls) on each worker; timed = calls when it is not sampled.
fn tick_timed(doc: &Value) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = threads(doc)
        .iter()
        .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("worker-")))
        .filter_map(|t| function_row(t, "tick"))
        .map(|f| {
            let calls = f["calls"].as_u64().expect("calls");
            (calls, f["sampled"]["timed"].as_u64().unwrap_or(calls))
        })
        .collect();
    v.sort();
    v
}

/// Sessions started before a session's `tick` was sampled on both workers, at most this many.
const LEARN_TRIES: usize = 4;

/// A live session whose workers each called `tick` `n` times and sample it. Whether a point
/// is sampled is decided on its first 511 calls; since the decision leaves out their time
/// off a CPU (helper `sampling2`), only more than 4 switched-out learning calls keep it
/// timed, which a very loaded host can still do. Such a session is finished (its behaviour
/// still checked) and another started; the failure names what each one showed.
fn sampled_session(label: &str, n: u64) -> Live {
    let mut seen = Vec::new();
    for i in 0..LEARN_TRIES {
        let mut s = Live::start(&format!("{label}-{i}"), true);
        s.work(n);
        let ticks = tick_timed(&s.report(&[]));
        if ticks.len() == 2 && ticks.iter().all(|&(c, t)| c == n && t < n) {
            return s;
        }
        seen.push(format!("session {}: {ticks:?}", i + 1));
        s.finish();
    }
    panic!("tick was not sampled on both workers in any of {LEARN_TRIES} sessions (calls, timed): {}", seen.join("; "));
}

#[test]
fn ctl_sampling_off_times_every_call_from_then_on() {
    let _turn = cpu_turn();
    let mut s = sampled_session("ctl-sampling-off", 5000);
    let before = tick_timed(&s.report(&[]));
    let line = s.ctl_ok(&["sampling", "off", "--wait-ms", "0"]);
    assert!(line.starts_with("sampling off: ") && line.contains("every call is timed from now on"), "{line}");
    s.ctl_ok(&["snapshot", "--wait-ms", "0"]);
    s.work(3000);
    // Phase 2: every one of its calls timed, on each worker.
    let after = tick_timed(&s.report(&[]));
    let phase2: Vec<(u64, u64)> = after.iter().zip(&before).map(|(a, b)| (a.0 - b.0, a.1 - b.1)).collect();
    assert_eq!(phase2, vec![(3000, 3000); 2], "before {before:?}, after {after:?}");
    // The view since the snapshot: nothing to estimate.
    assert_eq!(tick_timed(&s.report(&["--since-snapshot"])), vec![(3000, 3000); 2]);
    let status = s.ctl_ok(&["status"]);
    assert!(status.lines().nth(1).is_some_and(|l| l.starts_with("sampling: off (2 ")), "{status}");
    let json: Value = serde_json::from_str(&s.ctl_ok(&["status", "--json"])).expect("status JSON");
    assert_eq!(json["sampling"], "off");
    s.finish();
}

#[test]
fn ctl_sampling_on_again_samples_again() {
    let _turn = cpu_turn();
    let mut s = sampled_session("ctl-sampling-on", 2000);
    s.ctl_ok(&["sampling", "off", "--wait-ms", "0"]);
    s.work(1000);
    let line = s.ctl_ok(&["sampling", "on", "--wait-ms", "0"]);
    assert!(line.starts_with("sampling on: "), "{line}");
    s.ctl_ok(&["snapshot", "--wait-ms", "0"]);
    s.work(64_000);
    // Sampled again at once (no second learning phase): about 1 call in 64 timed.
    let since = tick_timed(&s.report(&["--since-snapshot"]));
    assert_eq!(since.len(), 2, "{since:?}");
    for &(calls, timed) in &since {
        assert_eq!(calls, 64_000);
        assert!((600..=1400).contains(&timed), "timed {timed} of {calls} (1 in 64: 1000)");
    }
    let json: Value = serde_json::from_str(&s.ctl_ok(&["status", "--json"])).expect("status JSON");
    assert_eq!(json["sampling"], "on");
    s.finish();
}

#[test]
fn ctl_sampling_without_sampling_code_is_refused() {
    let _turn = cpu_turn();
    let mut s = Live::start("ctl-sampling-none", false);
    s.work(1000);
    let bytes = std::fs::read(&s.profile).expect("profile");
    let h = stint_layout::FileHeader::parse(&bytes, u64::MAX).expect("header");
    let page = |b: &[u8]| b[h.control_offset as usize..][..std::mem::size_of::<stint_layout::Control>()].to_vec();
    for state in ["off", "on"] {
        let o = s.ctl(&["sampling", state]);
        assert_eq!(o.status, 2, "{o:?}");
        assert_eq!(
            o.stderr_str(),
            format!(
                "{}: rewritten without --sampling; every call is timed and there is no sampling to switch\n",
                s.profile.display()
            )
        );
    }
    assert_eq!(page(&std::fs::read(&s.profile).expect("profile")), page(&bytes), "the control page changed");
    let json: Value = serde_json::from_str(&s.ctl_ok(&["status", "--json"])).expect("status JSON");
    assert!(json["sampling"].is_null(), "{json}");
    assert!(!s.ctl_ok(&["status"]).contains("sampling:"));
    s.work(10);
    s.finish();
}

// ---- C++ exceptions through sampled frames ------------------------------------------------

/// `testbins/sampling_eh.cpp` in `variant`: every 100th of 100,000 `leaf` calls throws
/// through `leaf` and `mid` (both sampled: most of their frames untimed) to `drive`'s catch.
fn exceptions_through_sampled_frames(variant: Variant) {
    let _turn = cpu_turn();
    let bin = build(&program("sampling_eh"), variant);
    let dir = fresh_dir(&format!("sampling-eh-{}", variant.name()));
    let out = dir.join("sampling_eh");
    let o = stint(&["rewrite", path_str(&bin), "-o", path_str(&out), "--sampling", "-q"]);
    assert_eq!(o.status, 0, "rewrite --sampling: {}", o.stderr_str());
    let orig = Run::new(&bin, &dir).args(["100000"]).run();
    assert_eq!(orig.stdout_str(), "sum 14799852000 caught 1000\n", "the original");
    let prof = dir.join("eh.stint");
    let r = Run::new(&out, &dir).args(["100000"]).env("STINT_PROFILE", path_str(&prof)).run();
    assert!(r.same_behaviour(&orig), "{}", describe_difference("original", &orig, "sampled", &r));
    let doc = report_json(&prof);
    let t = main_thread(&doc);
    for (name, calls) in [("mid", 100_000u64), ("leaf", 100_000), ("drive", 1)] {
        assert_eq!(main_function(&doc, name)["calls"], calls, "{name}");
    }
    for name in ["mid", "leaf"] {
        let s = &main_function(&doc, name)["sampled"];
        let (timed, calls) = (s["timed"].as_u64(), s["calls"].as_u64());
        assert!(timed.zip(calls).is_some_and(|(t, c)| t > 0 && t < c / 8), "{name} not sampled: {s}");
    }
    // Each throw leaves leaf's and mid's frames without their exits: closed as abandoned.
    assert_eq!(t["abandoned_frames"], 2000, "1000 throws × 2 frames");
    assert_eq!(t["unmatched_exits"], 0);
    let tree = t["calltree"].as_array().expect("calltree");
    let node =
        |f: &str| tree.iter().filter(|n| n["function"] == f).map(|n| n["calls"].as_u64().unwrap_or(0)).sum::<u64>();
    assert_eq!((node("mid"), node("leaf")), (100_000, 100_000), "call paths");
}

#[test]
fn exceptions_through_sampled_frames_o2() {
    exceptions_through_sampled_frames(Variant::PieO2);
}

#[test]
fn exceptions_through_sampled_frames_o0() {
    exceptions_through_sampled_frames(Variant::PieO0);
}

#[test]
fn a_control_page_written_by_hand_switches_sampling_and_nothing_else() {
    let _turn = cpu_turn();
    let mut s = sampled_session("ctl-sampling-forged", 2000);
    let h = stint_layout::FileHeader::parse(&std::fs::read(&s.profile).expect("profile"), u64::MAX).expect("header");
    let at = |field: usize| h.control_offset + field as u64;
    let profile = s.profile.clone();
    let write = |off: u64, bytes: &[u8]| {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&profile).expect("open profile");
        f.write_all_at(bytes, off).expect("write");
    };
    let head = at(std::mem::offset_of!(stint_layout::Control, req_head));
    let ring = at(std::mem::offset_of!(stint_layout::Control, requests));
    let size = std::mem::size_of::<stint_layout::Request>() as u64;
    let request = |i: u64, seq: u64, op: u32| {
        let r = stint_layout::Request { seq, op, _pad: u32::MAX, realtime_ns: u64::MAX };
        write(ring + i * size, stint_layout::Pod::as_bytes(&r));
    };
    // Any non-zero flag means off; a well-formed request makes the threads apply it at their
    // next safe point (with no key poked, as `stint ctl` would, somewhere in the next job).
    write(at(std::mem::offset_of!(stint_layout::Control, sampling_off)), &u32::MAX.to_le_bytes());
    request(0, 1, stint_layout::REQ_SAMPLING);
    write(head, &1u64.to_le_bytes());
    s.work(1000);
    let before = tick_timed(&s.report(&[]));
    s.work(1000);
    let after = tick_timed(&s.report(&[]));
    let delta: Vec<(u64, u64)> = after.iter().zip(&before).map(|(a, b)| (a.0 - b.0, a.1 - b.1)).collect();
    assert_eq!(delta, vec![(1000, 1000); 2], "every call timed: {before:?} → {after:?}");
    // Garbage: wrong sequence numbers, an unknown op, a head far beyond the ring.
    for (i, (seq, op)) in [(1u64, 2u32), (7, 2), (3, 99), (4, 2)].into_iter().enumerate() {
        request(i as u64, seq, op);
    }
    write(head, &(u64::MAX / 2).to_le_bytes());
    s.work(1000);
    write(head, &0u64.to_le_bytes()); // backwards
    s.work(1000);
    let calls: Vec<u64> = tick_timed(&s.report(&[])).iter().map(|c| c.0).collect();
    assert_eq!(calls, vec![6000, 6000], "counts exact");
    s.finish();
}

// ---- a thread switched out inside a sampled function's calls -------------------------------
//
// `testbins/sampling_stall.c`: `loop` calls `tiny` N times; the calls named by its arguments
// sleep inside `tiny` (a switch out that the exit's re-synchronisation of the CPU clock sees).

/// Calls of `tiny` in each run.
const STALL_CALLS: u64 = 100_000;

/// `sampling_stall` rewritten with `--sampling` and run with `args` after N (AT EVERY US):
/// the report JSON (compensated and raw) and the program's own wall times, after checking that the run
/// behaves as the original's and that the counts are exact.
fn stalled_run(label: &str, args: &[&str]) -> Stalled {
    let _turn = cpu_turn();
    let bin = build(&program("sampling_stall"), Variant::PieO2);
    let dir = fresh_dir(label);
    let out = dir.join("sampling_stall");
    let o = stint(&["rewrite", path_str(&bin), "-o", path_str(&out), "--sampling", "-q"]);
    assert_eq!(o.status, 0, "rewrite --sampling: {}", o.stderr_str());
    let calls = STALL_CALLS.to_string();
    let mut all = vec![calls.as_str()];
    all.extend_from_slice(args);
    let orig = Run::new(&bin, &dir).args(all.iter().copied()).run();
    assert_eq!(orig.status, 0, "original: {}", orig.stderr_str());
    let (prof, times) = (dir.join("stall.stint"), dir.join("stall.times"));
    let r = Run::new(&out, &dir)
        .args(all.iter().copied())
        .env("STINT_PROFILE", path_str(&prof))
        .env("TIMES_FILE", path_str(&times))
        .run();
    assert!(r.same_behaviour(&orig), "{}", describe_difference("original", &orig, "sampled", &r));
    let doc = report_json(&prof);
    // Also the raw figures (`--raw`), for the lower bounds: a compensated figure can lose
    // more than the calls cost when a calibration under load reads high (100,000 calls of
    // `tiny` once came to 1.078 ms for a 1.085 ms sleep with two busy loops beside the
    // suite); the raw one holds the stall and every call's measured time.
    let o = stint(&["report", path_str(&prof), "--format", "json", "--raw"]);
    assert_eq!(o.status, 0, "stint report --raw: {o:?}");
    let raw: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {o:?}"));
    assert_eq!(main_function(&doc, "tiny")["calls"], STALL_CALLS, "calls of tiny");
    assert_eq!(main_function(&doc, "loop")["calls"], 1, "calls of loop");
    let text = std::fs::read_to_string(&times).expect("times file");
    let wall = |key: &str| -> f64 {
        let l = text.lines().find(|l| l.split_whitespace().next() == Some(key)).expect(key);
        l.split_whitespace().nth(3).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{l:?}"))
    };
    Stalled { doc, raw, loop_wall: wall("loop"), stall: wall("stall") }
}

/// What [`stalled_run`] returns: the report JSON, compensated and raw, and the program's own
/// wall ns of the loop around the calls and of the stall.
struct Stalled {
    doc: Value,
    raw: Value,
    loop_wall: f64,
    stall: f64,
}

/// (timed, calls) of `tiny`'s `sampled` object, or `None` when it was timed on every call.
fn tiny_sampled(doc: &Value) -> Option<(u64, u64)> {
    let s = &main_function(doc, "tiny")["sampled"];
    s["timed"].as_u64().zip(s["calls"].as_u64())
}

/// The first entry number at or after `from` that the entry routine times once the point is
/// sampled (its hash draw, `SAMPLE_HASH`).
fn timed_entry(from: u32) -> u32 {
    let limit = ((1u64 << 32) / stint_layout::SAMPLE_EVERY) as u32;
    (from..).find(|n| n.wrapping_mul(stint_layout::SAMPLE_HASH) < limit).expect("a timed entry")
}

#[test]
fn a_call_switched_out_while_learning_still_gets_the_point_sampled() {
    // Call 100 of the 511 learning calls sleeps 1 ms: 5 times the whole budget of wall time.
    let Stalled { doc, raw, stall, .. } = stalled_run("stall-learn", &["100", "0", "1000"]);
    let (timed, calls) = tiny_sampled(&doc).unwrap_or_else(|| panic!("tiny not sampled: {doc}"));
    assert!(timed < calls / 8, "tiny: timed {timed} of {calls}");
    // The learning calls are the exact part of the estimate: the sleep is in it (the raw
    // figure), once (the compensated one, ≈ 1.1–1.2 ms here, not 64 × the sleep).
    let wall_raw = main_function(&raw, "tiny")["wall_ns"].as_f64().expect("wall_ns");
    let wall = main_function(&doc, "tiny")["wall_ns"].as_f64().expect("wall_ns");
    assert!(
        wall_raw >= stall && wall < 3.0 * stall,
        "tiny's wall {wall:.0} ns ({wall_raw:.0} raw), the sleep {stall:.0} ns"
    );
}

#[test]
fn a_function_that_blocks_while_learning_stays_timed() {
    // Calls 10, 60, 110, … sleep 50 µs each: 11 of the learning calls switched out.
    let Stalled { doc, .. } = stalled_run("stall-block", &["10", "50", "50"]);
    assert_eq!(tiny_sampled(&doc), None, "tiny sampled: {}", main_function(&doc, "tiny"));
}

#[test]
fn a_stall_in_a_timed_call_counts_once_in_the_wall_estimate() {
    // A call the routine times after the decision sleeps 5 ms: one call in 64 timed, so the
    // estimate used to scale it to ≈ 64 × 5 ms.
    let at = timed_entry(5_000).to_string();
    let Stalled { doc, raw, loop_wall, stall } = stalled_run("stall-timed", &[&at, "0", "5000"]);
    let tiny = main_function(&doc, "tiny");
    let (timed, calls) = tiny_sampled(&doc).unwrap_or_else(|| panic!("tiny not sampled: {tiny}"));
    assert!(timed < calls / 8, "tiny: timed {timed} of {calls}");
    let est = tiny["wall_ns"].as_f64().expect("wall_ns");
    let est_raw = main_function(&raw, "tiny")["wall_ns"].as_f64().expect("wall_ns");
    let bound = tiny["sampled"]["wall_error_ns"].as_f64().expect("wall_error_ns");
    // The truth lies between the sleep (against the raw estimate) and the whole loop around
    // the calls (against the compensated one).
    assert!(
        est_raw + bound >= stall && est - bound <= loop_wall,
        "tiny {est:.0} ({est_raw:.0} raw) ± {bound:.0} ns, sleep {stall:.0}, loop {loop_wall:.0}"
    );
    // Scaled, it was ≈ 64 × the sleep (332 ms for a 5.2 ms sleep); the timed call's CPU
    // time (the sleep's system calls, tens of µs) is still scaled, as it should be.
    assert!(est < 8.0 * stall, "tiny {est:.0} ns: the 5 ms sleep ({stall:.0} ns) scaled");
}
