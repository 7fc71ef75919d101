//! The test harness shared by stint's integration tests: builds the C programs in
//! `testbins/`, runs programs with a time limit, drives the `stint` binary, and reads the
//! directives each test program carries in its header comment.
//!
//! # Test program directives
//!
//! A program in `testbins/` describes itself in lines starting with `//# ` in its header
//! comment (before the first line that is not a `//` comment). Anything the grammar below
//! does not accept fails the test that reads the program, so a typo never turns a check
//! off silently.
//!
//! ```text
//! //# args: ARG...             arguments for the program (once; default: none)
//! //# cflags: FLAG...          extra gcc flags for every variant (once; e.g. -pthread)
//! //# variants: VARIANT...     variants to build (once; default: pie-O0 pie-O2 nopie-O0
//!                              nopie-O2 pie-O2-stripped); see `Variant`
//! //# exit: N                  exit status of the program (once; default 0). The original is
//!                              checked against it; the rewritten one against the original.
//! //# expect: [child] CHECK    a check on the profile of the run (with `child`: on the
//!                              profile of the process the program forked)
//! ```
//!
//! `CHECK` is one of (`F`, `G` are C identifiers of functions in the program; `N` a
//! non-negative integer; counts are exact):
//!
//! ```text
//! profiles N                   the run leaves N profile files (default 1; not with child;
//!                              more than 2 without child checks: a process tree that its
//!                              own test module checks, as `proctree`)
//! threads N                    the report lists N threads
//! threads from F N             N threads have F as their first function
//! main calls F N               the main thread called F N times (0: F is not listed)
//! thread F calls G N           every thread whose first function is F called G N times;
//!                              there must be at least one such thread
//! ```
//!
//! Functions are matched by their address as `nm` shows it in the unstripped build of the
//! same variant (for `pie-O2-stripped`: the `pie-O2` build, which has the same addresses);
//! the report must name them `F`, or `sub_<hex address>` in a stripped variant. Every
//! function a check names is a *counted* function: its entry must be patched, not skipped.
#![allow(dead_code)]

mod checks;
pub use checks::*;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

/// The `stint` binary under test.
pub fn stint_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_stint"))
}

/// `testbins/` in the source tree.
pub fn testbins_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testbins")
}

/// Whether we run under CI (`CI` set and not "false"/"0"): there a missing tool or
/// package is a failure, not a skip.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// The CPU, shared between the tests of one process. The checks of `timers`, `locks`,
/// `control` and `top` compare times and run programs that must not share the CPU with
/// other busy tests, so each holds the turn (exclusive) around its build, rewrite and runs;
/// they used to be separate test binaries that cargo ran one after another, and in one
/// process the harness runs tests in parallel. The other tests that run programs (gcc,
/// the rewriter, the test programs, gdb) measure nothing and hold a share ([`cpu_share`]):
/// they run next to each other, never next to a turn. Both are taken
/// before any build, so no thread waits for the lock while it builds a program another
/// thread waits for. A test that failed while holding either does not poison it.
static CPU: RwLock<()> = RwLock::new(());

/// The exclusive turn of a CPU-sensitive test (see [`CPU`]).
pub fn cpu_turn() -> RwLockWriteGuard<'static, ()> {
    CPU.write().unwrap_or_else(|e| e.into_inner())
}

/// A share of the CPU for a busy test that measures nothing (see [`CPU`]); not to be
/// taken twice by one thread (a turn waiting in between would deadlock it).
pub fn cpu_share() -> RwLockReadGuard<'static, ()> {
    CPU.read().unwrap_or_else(|e| e.into_inner())
}

/// The synthetic-profile writers of `stint_profile`, for tests that need a profile no
/// process wrote: the one place the tests name their module.
pub mod synthetic {
    pub use stint_profile::synthetic::{patch_column, synthetic_meta, write_synthetic};
}

// ---------------------------------------------------------------------------------------
// Directories
// ---------------------------------------------------------------------------------------

/// This test process's own directory under `CARGO_TARGET_TMPDIR`, named after the test
/// crate (`it`) and the pid; modules that name paths in it themselves use a subdirectory
/// named after the module. It holds builds, rewritten programs and the profiles of the runs,
/// and is removed when the test process exits (`atexit`), so a test run leaves no profile
/// behind; set `STINT_KEEP_TEST_DIRS=1` to keep it for inspection. Directories of earlier
/// runs whose process is gone (kept, or left by a killed run or by the test binaries of
/// older layouts, `stint-<crate>-<pid>`) are removed the first time this is called.
pub fn run_root() -> &'static Path {
    ROOT.get_or_init(|| {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
        if let Ok(entries) = std::fs::read_dir(base) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let pid = name.strip_prefix("stint-").and_then(|r| r.rsplit_once('-')).map(|(_, pid)| pid);
                if let Some(pid) = pid.and_then(|p| p.parse::<u32>().ok()) {
                    if !Path::new(&format!("/proc/{pid}")).exists() {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        let root = base.join(format!("stint-{}-{}", env!("CARGO_CRATE_NAME"), std::process::id()));
        std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{}: cannot create: {e}", root.display()));
        if std::env::var_os("STINT_KEEP_TEST_DIRS").is_none_or(|v| v.is_empty() || v == "0") {
            // Safety: registering a plain `extern "C" fn` with the C library.
            unsafe { libc::atexit(remove_run_root) };
        }
        root
    })
}

static ROOT: OnceLock<PathBuf> = OnceLock::new();

/// `atexit` handler: remove this process's [`run_root`] (every test has finished).
extern "C" fn remove_run_root() {
    if let Some(root) = ROOT.get() {
        let _ = std::fs::remove_dir_all(root);
    }
}

/// A fresh, empty directory under [`run_root`], named `label-N`.
pub fn fresh_dir(label: &str) -> PathBuf {
    static N: Mutex<u64> = Mutex::new(0);
    let n = {
        let mut g = N.lock().unwrap_or_else(|e| e.into_inner());
        *g += 1;
        *g
    };
    let dir = run_root().join(format!("{}-{n}", label.replace(['/', ' '], "_")));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: cannot create: {e}", dir.display()));
    dir
}

/// Names of the entries of a directory, sorted.
pub fn dir_entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: cannot list: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Permission bits of a file.
pub fn file_mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777
}

// ---------------------------------------------------------------------------------------
// Running programs
// ---------------------------------------------------------------------------------------

/// What a finished program did.
#[derive(Clone, PartialEq, Eq)]
pub struct Outcome {
    pub pid: u32,
    /// Exit code, or `128 + signal` if it was killed by a signal.
    pub status: i32,
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
    /// Status, stdout and stderr, without pid and time, for comparing two runs.
    pub fn same_behaviour(&self, other: &Outcome) -> bool {
        self.status == other.status
            && self.signal == other.signal
            && self.stdout == other.stdout
            && self.stderr == other.stderr
    }
}

impl fmt::Debug for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sig = self.signal.map(|s| format!(" (signal {s})")).unwrap_or_default();
        write!(
            f,
            "status {}{sig}, pid {}, {:.3} s\n--- stdout ({} bytes) ---\n{}\n--- stderr ({} bytes) ---\n{}",
            self.status,
            self.pid,
            self.elapsed.as_secs_f64(),
            self.stdout.len(),
            excerpt(&self.stdout, 4000),
            self.stderr.len(),
            excerpt(&self.stderr, 4000)
        )
    }
}

/// At most `max` bytes of `b` as text, noting what was cut.
pub fn excerpt(b: &[u8], max: usize) -> String {
    if b.len() <= max {
        String::from_utf8_lossy(b).into_owned()
    } else {
        format!("{}\n[... {} more bytes]", String::from_utf8_lossy(&b[..max]), b.len() - max)
    }
}

/// Explain how two runs differ (status, and the first differing byte of each stream).
pub fn describe_difference(a_name: &str, a: &Outcome, b_name: &str, b: &Outcome) -> String {
    let mut out = String::new();
    if a.status != b.status || a.signal != b.signal {
        out += &format!("exit status: {a_name} {} {:?}, {b_name} {} {:?}\n", a.status, a.signal, b.status, b.signal);
    }
    for (stream, x, y) in [("stdout", &a.stdout, &b.stdout), ("stderr", &a.stderr, &b.stderr)] {
        if x != y {
            let at = x.iter().zip(y.iter()).position(|(p, q)| p != q).unwrap_or(x.len().min(y.len()));
            out += &format!("{stream} differs at byte {at} ({a_name} {} bytes, {b_name} {} bytes)\n", x.len(), y.len());
        }
    }
    format!("{out}--- {a_name}: {a:?}\n--- {b_name}: {b:?}")
}

/// A program to run, with what it gets.
pub struct Run<'a> {
    pub program: &'a Path,
    pub args: Vec<String>,
    pub cwd: &'a Path,
    /// Variables set on top of the test's environment.
    pub env: Vec<(String, String)>,
    /// Variables removed from the test's environment.
    pub env_remove: Vec<String>,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Duration,
}

impl<'a> Run<'a> {
    pub fn new(program: &'a Path, cwd: &'a Path) -> Self {
        Run {
            program,
            args: Vec::new(),
            cwd,
            env: Vec::new(),
            env_remove: vec![
                stint_layout::ENV_PROFILE.to_string(),
                "STINT_CONTROL".to_string(),
                stint_layout::ENV_DIR.to_string(),
            ],
            stdin: None,
            timeout: Duration::from_secs(300),
        }
    }
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<str>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(|s| s.as_ref().to_string()));
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env_remove.retain(|x| x != k);
        self.env.push((k.to_string(), v.to_string()));
        self
    }
    /// Remove `k` from the program's environment.
    pub fn without(mut self, k: &str) -> Self {
        self.env.retain(|(x, _)| x != k);
        self.env_remove.push(k.to_string());
        self
    }
    pub fn stdin(mut self, data: Vec<u8>) -> Self {
        self.stdin = Some(data);
        self
    }
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Run to completion; kill the program and fail the test if it outlives the timeout.
    pub fn run(self) -> Outcome {
        let mut cmd = Command::new(self.program);
        cmd.args(&self.args).current_dir(self.cwd);
        for k in &self.env_remove {
            cmd.env_remove(k);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.stdin(if self.stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let what = format!("{} {}", self.program.display(), self.args.join(" "));
        let start = Instant::now();
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
        let pid = child.id();
        let feeder = self.stdin.map(|data| {
            let mut w = child.stdin.take().expect("piped stdin");
            std::thread::spawn(move || {
                let _ = w.write_all(&data); // the program may exit without reading it all
            })
        });
        let reader = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                let _ = r.read_to_end(&mut v);
                v
            })
        };
        let out = reader(Box::new(child.stdout.take().expect("piped stdout")));
        let err = reader(Box::new(child.stderr.take().expect("piped stderr")));
        let status: ExitStatus = loop {
            if let Some(s) = child.try_wait().unwrap_or_else(|e| panic!("{what}: wait: {e}")) {
                break s;
            }
            if start.elapsed() > self.timeout {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what}: still running after {:?}; killed", self.timeout);
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let elapsed = start.elapsed();
        if let Some(f) = feeder {
            let _ = f.join();
        }
        let stdout = out.join().expect("stdout reader");
        let stderr = err.join().expect("stderr reader");
        let signal = status.signal();
        let code = status.code().unwrap_or_else(|| 128 + signal.unwrap_or(0));
        Outcome { pid, status: code, signal, stdout, stderr, elapsed }
    }
}

/// Run a tool (gcc, nm, strip …) that must succeed; returns its stdout.
pub fn tool(program: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: cannot run ({e}); is it installed?"));
    if !out.status.success() {
        panic!(
            "{program} {} failed with {}:\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out.stdout
}

// ---------------------------------------------------------------------------------------
// The stint binary
// ---------------------------------------------------------------------------------------

/// Run `stint ARGS` in `cwd`.
pub fn stint(args: &[&str]) -> Outcome {
    let cwd = run_root();
    Run::new(stint_bin(), cwd).args(args).timeout(Duration::from_secs(600)).run()
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap_or_else(|| panic!("{}: not UTF-8", p.display()))
}

/// `stint rewrite input -o output`, which must succeed and leave an executable.
pub fn rewrite(input: &Path, output: &Path) {
    if let Some(dir) = output.parent() {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    }
    let o = stint(&["rewrite", path_str(input), "-o", path_str(output)]);
    assert!(o.status == 0, "stint rewrite {} failed: {o:?}", input.display());
    assert!(output.is_file(), "stint rewrite {}: exit 0 but no {}", input.display(), output.display());
    assert!(file_mode(output) & 0o100 != 0, "{}: not executable", output.display());
}

/// `stint inspect FILE --json`, parsed.
pub fn inspect_json(input: &Path) -> serde_json::Value {
    let o = stint(&["inspect", path_str(input), "--json"]);
    assert!(o.status == 0, "stint inspect {} --json failed: {o:?}", input.display());
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stint inspect {} --json: not JSON ({e}): {o:?}", input.display()))
}

/// `stint report FILE --format json`, parsed.
pub fn report_json(profile: &Path) -> serde_json::Value {
    let o = stint(&["report", path_str(profile), "--format", "json"]);
    assert!(o.status == 0, "stint report {} --format json failed: {o:?}", profile.display());
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stint report {} --format json: not JSON ({e}): {o:?}", profile.display()))
}

/// The row of `function` among thread `t`'s functions in a `stint-profile/1` document.
pub fn function_row<'a>(t: &'a serde_json::Value, function: &str) -> Option<&'a serde_json::Value> {
    t["functions"].as_array()?.iter().find(|f| f["name"] == function)
}

/// The main thread's row of `function` in a report; panics naming the report when absent.
pub fn main_function<'a>(doc: &'a serde_json::Value, function: &str) -> &'a serde_json::Value {
    function_row(main_thread(doc), function).unwrap_or_else(|| panic!("no {function} in {doc}"))
}

/// The main thread's CPU ns of `function` in a report; panics when it is not timed.
pub fn main_cpu_ns(doc: &serde_json::Value, function: &str) -> f64 {
    let f = main_function(doc, function);
    f["cpu_ns"].as_f64().unwrap_or_else(|| panic!("{function} is not timed: {f}"))
}

/// The median of `v` (the upper middle one of an even count); `v` is not empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One round of an overhead-compensation test: the original run with `arg`, writing its own
/// CPU times to `orig-<i>.times` in `dir` (`TIMES_FILE`), then the rewritten program with the
/// same argument writing profile `run-<i>.stint`, which must behave the same. Returns the
/// original's side file, the profile, and the profile's report as JSON, compensated and
/// `--raw`.
pub struct CompensationRound {
    pub orig_side: PathBuf,
    pub profile: PathBuf,
    pub doc: serde_json::Value,
    pub raw: serde_json::Value,
}

pub fn compensation_round(bin: &Path, rewritten: &Path, dir: &Path, i: usize, arg: &str) -> CompensationRound {
    let orig_side = dir.join(format!("orig-{i}.times"));
    let o = Run::new(bin, dir).args([arg]).env("TIMES_FILE", path_str(&orig_side)).run();
    assert_eq!(o.status, 0, "original: {}", o.stderr_str());
    let profile = dir.join(format!("run-{i}.stint"));
    let r = Run::new(rewritten, dir).args([arg]).env("STINT_PROFILE", path_str(&profile)).run();
    assert!(r.same_behaviour(&o), "{}", describe_difference("original", &o, "rewritten", &r));
    let doc = report_json(&profile);
    let raw_out = stint(&["report", path_str(&profile), "--format", "json", "--raw"]);
    assert_eq!(raw_out.status, 0, "{}", raw_out.stderr_str());
    let raw = serde_json::from_slice(&raw_out.stdout).expect("report --raw: JSON");
    CompensationRound { orig_side, profile, doc, raw }
}

/// `function`'s CPU ns from the side file a test program writes with its own thread clock
/// (`TIMES_FILE`: lines `FUNCTION TID CPU_NS WALL_NS`), to compare a report with.
pub fn side_cpu_ns(path: &Path, function: &str) -> f64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(function))
        .unwrap_or_else(|| panic!("{}: no {function} line", path.display()));
    line.split_whitespace().nth(2).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("bad line {line:?}"))
}

/// Calls of `function` on thread `t`, summed over its rows (0 when it has none).
pub fn thread_calls(t: &serde_json::Value, function: &str) -> u64 {
    t["functions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["name"] == function)
        .map(|f| f["calls"].as_u64().unwrap_or(0))
        .sum()
}

/// Calls of `function` in a `stint-profile/1` document (a report or a merged program),
/// summed over its threads.
pub fn calls_of(doc: &serde_json::Value, function: &str) -> u64 {
    doc["threads"].as_array().into_iter().flatten().map(|t| thread_calls(t, function)).sum()
}

/// The `STINT_PROFILE` value that puts a program's profiles into `dir`.
pub fn profile_template(dir: &Path, program: &str) -> String {
    format!("{}/{program}.%p.stint", path_str(dir))
}

/// `0x` + lowercase hex without padding, as `nm` addresses appear in reports.
pub fn hex(a: u64) -> String {
    format!("0x{a:x}")
}

/// Whether `s` is an address as reports write them: `0x`, lowercase hex, no leading zero.
pub fn is_report_address(s: &str) -> bool {
    let Some(h) = s.strip_prefix("0x") else { return false };
    !h.is_empty()
        && h.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        && (h == "0" || !h.starts_with('0'))
}

// ---------------------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------------------

/// Field `key` of a JSON object, or a test failure naming `what`.
pub fn field<'v>(v: &'v serde_json::Value, key: &str, what: &str) -> &'v serde_json::Value {
    v.get(key).unwrap_or_else(|| panic!("{what}: no field {key:?} in {}", excerpt(v.to_string().as_bytes(), 2000)))
}

/// Checks every profile report must pass, whatever program wrote it. Returns the problems.
pub fn report_invariants(r: &serde_json::Value, program: &str, pid: u32, fork_child: bool) -> Vec<String> {
    let mut bad = Vec::new();
    let mut want = |ok: bool, msg: String| {
        if !ok {
            bad.push(msg)
        }
    };
    want(
        r.get("schema") == Some(&"stint-profile/1".into()),
        format!("schema is {:?}, want \"stint-profile/1\"", r.get("schema")),
    );
    want(
        r.get("program").and_then(|p| p.as_str()) == Some(program),
        format!("program is {:?}, want {program:?}", r.get("program")),
    );
    want(r.get("pid").and_then(|p| p.as_u64()) == Some(pid as u64), format!("pid is {:?}, want {pid}", r.get("pid")));
    want(r.get("ppid").is_some_and(|p| p.is_u64()), format!("ppid is {:?}, want a number", r.get("ppid")));
    want(
        r.get("fork_child").and_then(|p| p.as_bool()) == Some(fork_child),
        format!("fork_child is {:?}, want {fork_child}", r.get("fork_child")),
    );
    want(
        r.get("skipped_reentrant").and_then(|p| p.as_u64()) == Some(0),
        format!("skipped_reentrant is {:?}, want 0", r.get("skipped_reentrant")),
    );
    want(
        r.get("lost_threads").and_then(|p| p.as_u64()) == Some(0),
        format!("lost_threads is {:?}, want 0", r.get("lost_threads")),
    );
    let Some(threads) = r.get("threads").and_then(|t| t.as_array()) else {
        bad.push("no threads array".into());
        return bad;
    };
    let mains: Vec<&serde_json::Value> =
        threads.iter().filter(|t| t.get("main").and_then(|m| m.as_bool()) == Some(true)).collect();
    if mains.len() != 1 {
        bad.push(format!("{} threads have main = true, want exactly 1", mains.len()));
    }
    for (i, t) in threads.iter().enumerate() {
        let tid = t.get("tid").and_then(|x| x.as_u64());
        let is_main = t.get("main").and_then(|m| m.as_bool());
        let label = format!("thread #{i} (tid {tid:?})");
        if tid.is_none() || is_main.is_none() {
            bad.push(format!("{label}: tid or main missing: {t}"));
            continue;
        }
        if is_main == Some(true) && tid != Some(pid as u64) {
            bad.push(format!("{label}: main = true but tid != pid {pid}"));
        }
        if is_main == Some(false) && tid == Some(pid as u64) {
            bad.push(format!("{label}: tid == pid but main = false"));
        }
        for key in ["name", "start_routine"] {
            if !t.get(key).is_some_and(|x| x.is_null() || x.is_string()) {
                bad.push(format!("{label}: {key} is {:?}, want a string or null", t.get(key)));
            }
        }
        let first = t.get("first_function").and_then(|x| x.as_str());
        let Some(funcs) = t.get("functions").and_then(|x| x.as_array()) else {
            bad.push(format!("{label}: no functions array"));
            continue;
        };
        if funcs.is_empty() {
            bad.push(format!("{label}: listed with no calls (threads that ran no instrumented code must not appear)"));
        }
        let mut addrs = std::collections::HashSet::new();
        let mut first_seen = false;
        for f in funcs {
            let name = f.get("name").and_then(|x| x.as_str());
            let addr = f.get("address").and_then(|x| x.as_str());
            let calls = f.get("calls").and_then(|x| x.as_u64());
            match (name, addr, calls) {
                (Some(n), Some(a), Some(c)) => {
                    if n.is_empty() || !is_report_address(a) || c == 0 {
                        bad.push(format!("{label}: bad function entry {f} (want a name, \"0x<hex>\", calls > 0)"));
                    }
                    if !addrs.insert(a.to_string()) {
                        bad.push(format!("{label}: address {a} listed twice"));
                    }
                    first_seen |= Some(n) == first;
                }
                _ => bad.push(format!("{label}: function entry {f} lacks name, address or calls")),
            }
        }
        match first {
            None => bad.push(format!("{label}: first_function is {:?}, want a name", t.get("first_function"))),
            Some(fname) if !first_seen => {
                bad.push(format!("{label}: first_function {fname} has no calls in the thread"))
            }
            Some(_) => {}
        }
    }
    bad
}

/// The threads of a report.
pub fn threads(r: &serde_json::Value) -> &Vec<serde_json::Value> {
    field(r, "threads", "report").as_array().expect("threads is an array")
}

/// The main thread of a report.
pub fn main_thread(r: &serde_json::Value) -> &serde_json::Value {
    threads(r).iter().find(|t| t.get("main").and_then(|m| m.as_bool()) == Some(true)).expect("report has a main thread")
}

/// Total calls of a thread.
pub fn total_calls(t: &serde_json::Value) -> u64 {
    t.get("functions")
        .and_then(|f| f.as_array())
        .map(|fs| fs.iter().filter_map(|f| f.get("calls").and_then(|c| c.as_u64())).sum())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------
// Test programs: directives
// ---------------------------------------------------------------------------------------

/// How a test program is compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    /// `-O0 -fPIE -pie`
    PieO0,
    /// `-O2 -fPIE -pie`
    PieO2,
    /// `-O0 -fno-pie -no-pie`
    NopieO0,
    /// `-O2 -fno-pie -no-pie`
    NopieO2,
    /// `pie-O2`, then `strip`: functions are known only from `.eh_frame`.
    PieO2Stripped,
}

impl Variant {
    pub const ALL: [Variant; 5] =
        [Variant::PieO0, Variant::PieO2, Variant::NopieO0, Variant::NopieO2, Variant::PieO2Stripped];

    pub fn name(self) -> &'static str {
        match self {
            Variant::PieO0 => "pie-O0",
            Variant::PieO2 => "pie-O2",
            Variant::NopieO0 => "nopie-O0",
            Variant::NopieO2 => "nopie-O2",
            Variant::PieO2Stripped => "pie-O2-stripped",
        }
    }

    pub fn parse(s: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == s)
    }

    /// gcc flags of the variant (the stripped one is built as `pie-O2`).
    pub fn gcc_flags(self) -> &'static [&'static str] {
        match self {
            Variant::PieO0 => &["-O0", "-fPIE", "-pie"],
            Variant::PieO2 | Variant::PieO2Stripped => &["-O2", "-fPIE", "-pie"],
            Variant::NopieO0 => &["-O0", "-fno-pie", "-no-pie"],
            Variant::NopieO2 => &["-O2", "-fno-pie", "-no-pie"],
        }
    }

    /// The variant whose unstripped build has this variant's addresses and symbols.
    pub fn symbols_from(self) -> Variant {
        match self {
            Variant::PieO2Stripped => Variant::PieO2,
            v => v,
        }
    }

    pub fn stripped(self) -> bool {
        self == Variant::PieO2Stripped
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which profile a check reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The profile of the process the test started.
    Main,
    /// The profile of the process it forked (`expect: child ...`).
    Child,
}

/// One `expect:` check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    Profiles(u64),
    Threads(u64),
    ThreadsFrom { first: String, n: u64 },
    MainCalls { func: String, n: u64 },
    ThreadCalls { first: String, func: String, n: u64 },
}

impl Check {
    /// Functions the check names: they must be counted (patched) in every variant.
    pub fn functions(&self) -> Vec<&str> {
        match self {
            Check::Profiles(_) | Check::Threads(_) => vec![],
            Check::ThreadsFrom { first, .. } => vec![first],
            Check::MainCalls { func, .. } => vec![func],
            Check::ThreadCalls { first, func, .. } => vec![first, func],
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    /// Line in the source file (1-based), for messages.
    pub line: usize,
    pub scope: Scope,
    pub check: Check,
}

/// A test program and what its directives say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    /// File stem: `calltree` for `testbins/calltree.c`. Also the binary's name.
    pub name: String,
    pub source: PathBuf,
    pub args: Vec<String>,
    pub cflags: Vec<String>,
    pub variants: Vec<Variant>,
    pub exit: i32,
    pub expects: Vec<Expect>,
}

impl Program {
    /// Number of profile files a run leaves (`expect: profiles`, default 1).
    pub fn profiles(&self) -> u64 {
        self.expects
            .iter()
            .find_map(|e| match e.check {
                Check::Profiles(n) => Some(n),
                _ => None,
            })
            .unwrap_or(1)
    }

    /// Every function some check names, once, in order of first mention.
    pub fn counted_functions(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for e in &self.expects {
            for f in e.check.functions() {
                if !v.iter().any(|x| x == f) {
                    v.push(f.to_string());
                }
            }
        }
        v
    }

    pub fn expects_in(&self, scope: Scope) -> impl Iterator<Item = &Expect> {
        self.expects.iter().filter(move |e| e.scope == scope)
    }
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn count(s: &str) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!("{s:?} is not a count (digits only)"));
    }
    s.parse::<u64>().map_err(|e| format!("{s:?}: {e}"))
}

fn ident(s: &str) -> Result<String, String> {
    if is_ident(s) {
        Ok(s.to_string())
    } else {
        Err(format!("{s:?} is not a function name"))
    }
}

/// Parse the `CHECK` of an `expect:` line (the words after `expect:` and `child`).
fn parse_check(words: &[&str]) -> Result<Check, String> {
    match words {
        ["profiles", n] => Ok(Check::Profiles(count(n)?)),
        ["threads", n] => Ok(Check::Threads(count(n)?)),
        ["threads", "from", f, n] => Ok(Check::ThreadsFrom { first: ident(f)?, n: count(n)? }),
        ["main", "calls", f, n] => Ok(Check::MainCalls { func: ident(f)?, n: count(n)? }),
        ["thread", first, "calls", f, n] => Ok(Check::ThreadCalls { first: ident(first)?, func: ident(f)?, n: count(n)? }),
        _ => Err(format!(
            "unknown check {:?}; want one of: profiles N | threads N | threads from F N | main calls F N | thread F calls G N",
            words.join(" ")
        )),
    }
}

/// Parse the directives of a test program's source text. `name` is the program's name.
pub fn parse_directives(name: &str, source: &Path, text: &str) -> Result<Program, String> {
    let mut p = Program {
        name: name.to_string(),
        source: source.to_path_buf(),
        args: Vec::new(),
        cflags: Vec::new(),
        variants: Variant::ALL.to_vec(),
        exit: 0,
        expects: Vec::new(),
    };
    let mut seen: HashMap<&'static str, usize> = HashMap::new();
    let mut in_header = true;
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        let err = |m: String| format!("{}:{lineno}: {m}", source.display());
        let trimmed = line.trim_start();
        if !trimmed.starts_with("//") {
            in_header = false;
        }
        let Some(rest) = trimmed.strip_prefix("//#") else { continue };
        if !in_header {
            return Err(err("directive after the header comment; directives go in the comment at the top".into()));
        }
        let Some(rest) = rest.strip_prefix(' ') else {
            return Err(err("a directive is `//# key: value` (one space after //#)".into()));
        };
        let Some((key, value)) = rest.split_once(':') else {
            return Err(err(format!("{rest:?}: a directive is `//# key: value`")));
        };
        let words: Vec<&str> = value.split_whitespace().collect();
        let key: &'static str = match key {
            "args" => "args",
            "cflags" => "cflags",
            "variants" => "variants",
            "exit" => "exit",
            "expect" => "expect",
            other => {
                return Err(err(format!("unknown directive {other:?}; known: args, cflags, variants, exit, expect")))
            }
        };
        if key != "expect" {
            if let Some(prev) = seen.insert(key, lineno) {
                return Err(err(format!("{key} given twice (first on line {prev})")));
            }
        }
        match key {
            "args" => p.args = words.iter().map(|s| s.to_string()).collect(),
            "cflags" => {
                if let Some(bad) = words.iter().find(|w| !w.starts_with('-')) {
                    return Err(err(format!("cflags: {bad:?} is not a flag")));
                }
                p.cflags = words.iter().map(|s| s.to_string()).collect();
            }
            "variants" => {
                if words.is_empty() {
                    return Err(err("variants: name at least one".into()));
                }
                let mut vs = Vec::new();
                for w in &words {
                    let v = Variant::parse(w).ok_or_else(|| {
                        err(format!("unknown variant {w:?}; known: {}", Variant::ALL.map(|v| v.name()).join(" ")))
                    })?;
                    if vs.contains(&v) {
                        return Err(err(format!("variant {w} given twice")));
                    }
                    vs.push(v);
                }
                p.variants = vs;
            }
            "exit" => {
                let [w] = words.as_slice() else { return Err(err("exit: want one number".into())) };
                let n = count(w).map_err(&err)?;
                if n > 255 {
                    return Err(err(format!("exit: {n} is not an exit status (0-255)")));
                }
                p.exit = n as i32;
            }
            _ => {
                let (scope, words) = match words.as_slice() {
                    ["child", rest @ ..] => (Scope::Child, rest),
                    all => (Scope::Main, all),
                };
                let check = parse_check(words).map_err(&err)?;
                if scope == Scope::Child && matches!(check, Check::Profiles(_)) {
                    return Err(err("profiles counts the files of the whole run; not with child".into()));
                }
                if p.expects.iter().any(|e| e.scope == scope && e.check == check) {
                    return Err(err("the same check twice".into()));
                }
                p.expects.push(Expect { line: lineno, scope, check });
            }
        }
    }
    if p.expects.is_empty() {
        return Err(format!(
            "{}: no `//# expect:` directive; a test program must say what it expects",
            source.display()
        ));
    }
    let profiles = p.profiles();
    if profiles == 0 {
        return Err(format!("{}: expect: profiles 0 leaves nothing to check", source.display()));
    }
    let has_child = p.expects.iter().any(|e| e.scope == Scope::Child);
    if has_child && profiles < 2 {
        return Err(format!("{}: child checks need `expect: profiles N` with N >= 2", source.display()));
    }
    if !has_child && profiles == 2 {
        return Err(format!("{}: two profiles (a parent and its fork child) need child checks", source.display()));
    }
    Ok(p)
}

/// Load and parse `testbins/NAME.c` (or `NAME.cpp`); a malformed directive fails the test.
pub fn program(name: &str) -> Program {
    let c = testbins_dir().join(format!("{name}.c"));
    let cpp = testbins_dir().join(format!("{name}.cpp"));
    let source = if !c.is_file() && cpp.is_file() { cpp } else { c };
    let text = std::fs::read_to_string(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
    parse_directives(name, &source, &text).unwrap_or_else(|e| panic!("{e}"))
}

/// Each of `programs` is listed in `listed` (test name → (program, variant)) in exactly the
/// variants its `//# variants:` directive names (a program may be listed more than once per
/// variant, e.g. in several modes). `what` names the list in the message.
pub fn assert_lists_every_variant(programs: &[&str], listed: &[(&str, &str)], what: &str) {
    let mut want: Vec<(String, String)> = Vec::new();
    for name in programs {
        let p = program(name);
        want.extend(p.variants.iter().map(|v| (name.to_string(), v.name().to_string())));
    }
    let mut have: Vec<(String, String)> = listed.iter().map(|(p, v)| (p.to_string(), v.to_string())).collect();
    want.sort();
    have.sort();
    have.dedup();
    assert_eq!(have, want, "{what} must list each of its programs in each of its variants");
}

/// Names of all test programs (`testbins/*.c`), sorted.
pub fn all_programs() -> Vec<String> {
    let mut v: Vec<String> =
        dir_entries(&testbins_dir()).into_iter().filter_map(|f| f.strip_suffix(".c").map(str::to_string)).collect();
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------
// Test programs: builds
// ---------------------------------------------------------------------------------------

type BuildCell = Arc<OnceLock<Result<PathBuf, String>>>;

/// Build `program` in `variant` (once per test process) and return the binary's path:
/// `<run root>/build/<variant>/<program>`, so the binary's file name is the program name.
pub fn build(p: &Program, variant: Variant) -> PathBuf {
    static CACHE: OnceLock<Mutex<HashMap<(String, Variant), BuildCell>>> = OnceLock::new();
    let cell = {
        let mut map = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        map.entry((p.name.clone(), variant)).or_default().clone()
    };
    cell.get_or_init(|| build_uncached(p, variant)).clone().unwrap_or_else(|e| panic!("{e}"))
}

fn build_uncached(p: &Program, variant: Variant) -> Result<PathBuf, String> {
    let dir = run_root().join("build").join(variant.name());
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let out = dir.join(&p.name);
    if variant.stripped() {
        let unstripped = build(p, Variant::PieO2);
        std::fs::copy(&unstripped, &out).map_err(|e| format!("{}: copy: {e}", out.display()))?;
        run_tool("strip", &[path_str(&out)])?;
        return Ok(out);
    }
    let mut args: Vec<&str> = vec!["-Wall", "-Werror"];
    args.extend(variant.gcc_flags());
    args.extend(p.cflags.iter().map(String::as_str));
    args.extend([path_str(&p.source), "-o", path_str(&out)]);
    let compiler = if p.source.extension().is_some_and(|e| e == "cpp") { "g++" } else { "gcc" };
    run_tool(compiler, &args).map_err(|e| format!("building {} {variant}: {e}", p.name))?;
    Ok(out)
}

fn run_tool(program: &str, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("{program}: cannot run ({e})"))?;
    if !out.status.success() {
        return Err(format!(
            "{program} {} failed with {}:\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out.stdout)
}

/// Defined text symbols of a binary (`nm --defined-only`): name → address. Where a name
/// appears twice (local symbols of different objects), the first is kept.
pub fn text_symbols(binary: &Path) -> BTreeMap<String, u64> {
    let out = tool("nm", &["--defined-only", path_str(binary)]);
    let mut m = BTreeMap::new();
    for line in String::from_utf8_lossy(&out).lines() {
        let mut w = line.split_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (w.next(), w.next(), w.next()) else { continue };
        if !matches!(kind, "T" | "t" | "W" | "w") {
            continue;
        }
        if let Ok(a) = u64::from_str_radix(addr, 16) {
            m.entry(name.to_string()).or_insert(a);
        }
    }
    m
}

/// Text symbols of `program` as built in `variant`, taken from the unstripped build with
/// the same addresses.
pub fn symbols(p: &Program, variant: Variant) -> BTreeMap<String, u64> {
    text_symbols(&build(p, variant.symbols_from()))
}

/// One `#[test]` per (program, variant): `name: "program" "variant" => check;` runs
/// `check(variant)`; `LISTED` names every pair, for the "every program is tested" checks.
#[allow(unused_macros)]
macro_rules! program_tests {
    ($($test:ident: $prog:literal $variant:literal => $check:expr;)*) => {
        $(
            #[test]
            fn $test() {
                let v = Variant::parse($variant).unwrap_or_else(|| panic!("unknown variant {}", $variant));
                let check: &dyn Fn(Variant) = &$check;
                check(v);
            }
        )*
        /// (program, variant) of every test above.
        const LISTED: &[(&str, &str)] = &[$(($prog, $variant)),*];
    };
}
#[allow(unused_imports)]
pub(crate) use program_tests;
