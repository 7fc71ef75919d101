//! The real-program corpus (issue 13): Debian programs installed by `.ci/run`, each rewritten
//! with every function instrumented (the default spec) and run on a deterministic workload
//! four ways: the original, and the rewritten program with metrics on (`STINT_DIR`), with
//! every metric off (a control file `on: []`), and with no `STINT_*` variable at all (the
//! profile in a private `XDG_RUNTIME_DIR`). Each rewritten run must give the original's
//! stdout, stderr and exit status byte for byte, leave the cwd as the original leaves it, and
//! write one readable profile: with calls (and at least the threads the workload starts) when
//! metrics are on, with none when they are off.
//!
//! One `#[test]` per program, so a failure names it; each appends its row to the pass table
//! `target/tmp/corpus.txt`, which `.ci/run` prints at the end. Under `CI=true` a missing
//! program fails its test; elsewhere it is skipped loudly. The redis test starts the servers
//! on 127.0.0.1 and a free port and stops them by pid.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;

/// One program of the corpus and its workload.
struct Case {
    /// Name in the table (and of the profile: the binary's file name).
    name: &'static str,
    bin: &'static str,
    package: &'static str,
    args: &'static [&'static str],
    /// Bytes on stdin (`None`: /dev/null).
    stdin: Option<Vec<u8>>,
    /// Files the workload reads, created in the cwd before each run.
    files: &'static [(&'static str, &'static str)],
    env: &'static [(&'static str, &'static str)],
    /// Threads the metrics-on profile must show at least.
    threads: usize,
}

/// `n` bytes of deterministic text: numbered lines of words drawn by a fixed LCG (sortable,
/// compressible, greppable); the input of every text workload of the real-program tests.
pub(crate) fn text(n: usize) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "thread",
        "column",
        "counter",
        "trampoline",
        "profile",
        "mutex",
        "condvar",
        "join",
        "stack",
        "entry",
        "window",
        "segment",
        "timer",
        "virtual",
        "lock",
        "rewrite",
    ];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut s = String::with_capacity(n + 128);
    while s.len() < n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        s += &format!("{:06} ", (x >> 40) % 1_000_000);
        for _ in 0..8 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            s += WORDS[(x >> 33) as usize % WORDS.len()];
            s.push(' ');
        }
        s.push('\n');
    }
    s.into_bytes()
}

/// How a rewritten program is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    On,
    Off,
    Default,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::On => "on",
            Mode::Off => "off",
            Mode::Default => "default",
        }
    }
}

/// What one run of a rewritten program showed, against the original.
struct Checked {
    problems: Vec<String>,
    threads: usize,
    calls: u64,
}

fn run_in(bin: &Path, case: &Case, label: &str, setup: impl FnOnce(Run) -> Run) -> (Outcome, Vec<String>) {
    let cwd = fresh_dir(&format!("corpus-{}-{label}", case.name));
    for (name, content) in case.files {
        std::fs::write(cwd.join(name), content).unwrap();
    }
    let mut r = Run::new(bin, &cwd).args(case.args).timeout(Duration::from_secs(240));
    for (k, v) in case.env {
        r = r.env(k, v);
    }
    if let Some(s) = &case.stdin {
        r = r.stdin(s.clone());
    }
    let o = setup(r).run();
    (o, dir_entries(&cwd))
}

fn threads_and_calls(report: &serde_json::Value) -> (usize, u64) {
    let threads = report["threads"].as_array().cloned().unwrap_or_default();
    let calls = threads
        .iter()
        .flat_map(|t| t["functions"].as_array().cloned().unwrap_or_default())
        .map(|f| f["calls"].as_u64().unwrap_or(0))
        .sum();
    (threads.len(), calls)
}

/// Run the rewritten program in `mode` and check it against the original's outcome.
fn check(case: &Case, rewritten: &Path, mode: Mode, want: &Outcome, want_cwd: &[String]) -> Checked {
    let dir = fresh_dir(&format!("corpus-{}-{}-profiles", case.name, mode.label()));
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let control = dir.join("off.yaml");
    std::fs::write(&control, "on: []\n").unwrap();
    let profiles = match mode {
        Mode::On | Mode::Off => dir.join("p"),
        Mode::Default => dir.join("stint"),
    };
    let (got, cwd) = run_in(rewritten, case, mode.label(), |r| match mode {
        Mode::On => r.env("STINT_DIR", path_str(&profiles)),
        Mode::Off => r.env("STINT_DIR", path_str(&profiles)).env("STINT_CONTROL", path_str(&control)),
        Mode::Default => r.env("XDG_RUNTIME_DIR", path_str(&dir)),
    });
    let mut problems = Vec::new();
    if !want.same_behaviour(&got) {
        problems.push(format!(
            "metrics {}: behaves differently\n{}",
            mode.label(),
            describe_difference("original", want, "rewritten", &got)
        ));
    }
    if cwd != want_cwd {
        problems.push(format!("metrics {}: cwd holds {cwd:?}, the original's {want_cwd:?}", mode.label()));
    }
    let file = format!("{}.{}.stint", case.name, got.pid);
    let files = dir_entries(&profiles);
    if files != [file.clone()] {
        problems.push(format!("metrics {}: profiles {files:?} in {}, want [{file}]", mode.label(), profiles.display()));
        return Checked { problems, threads: 0, calls: 0 };
    }
    let path = profiles.join(&file);
    if file_mode(&path) != 0o600 {
        problems.push(format!("metrics {}: profile mode {:o}", mode.label(), file_mode(&path)));
    }
    let o = stint(&["report", path_str(&path), "--format", "json"]);
    let Ok(report) = serde_json::from_slice::<serde_json::Value>(&o.stdout) else {
        problems.push(format!("metrics {}: stint report: {o:?}", mode.label()));
        return Checked { problems, threads: 0, calls: 0 };
    };
    let (threads, calls) = threads_and_calls(&report);
    match mode {
        Mode::Off if calls != 0 => problems.push(format!("metrics off: {calls} calls counted")),
        Mode::Off => {}
        _ => {
            for bad in report_invariants(&report, case.name, got.pid, false) {
                problems.push(format!("metrics {}: report: {bad}", mode.label()));
            }
            if threads < case.threads {
                problems.push(format!("metrics {}: {threads} threads, want at least {}", mode.label(), case.threads));
            }
        }
    }
    Checked { problems, threads, calls }
}

/// Append a row to the pass table `.ci/run` prints.
fn table_row(row: &str) {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("corpus.txt");
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).expect("corpus table");
    writeln!(f, "{row}").expect("corpus table");
}

/// The whole check of one program: rewrite, the original's run, three rewritten runs.
fn corpus(case: Case) {
    let bin = PathBuf::from(case.bin);
    if !bin.is_file() {
        if under_ci() {
            panic!("{}: missing under CI; .ci/run must `apt-get install {}`", case.bin, case.package);
        }
        eprintln!(
            "\n!!!!!!!!!! SKIPPED: {} is not installed (apt-get install {}) !!!!!!!!!!\n",
            case.bin, case.package
        );
        return;
    }
    let _share = cpu_share();
    let inspect = inspect_json(&bin);
    let summary = &inspect["summary"];
    let pct = |key: &str| summary[key].as_f64().map_or("-".to_string(), |p| format!("{p:.2}%"));
    let coverage = format!(
        "entries {:>7} exits {:>7} timed {:>4}/{:<4}",
        pct("entry_coverage_pct"),
        pct("exit_coverage_pct"),
        summary["timed_functions"],
        summary["timer_functions"]
    );
    let rewritten = fresh_dir(&format!("corpus-{}", case.name)).join(case.name);
    rewrite(&bin, &rewritten);
    let (want, want_cwd) = run_in(&bin, &case, "original", |r| r);
    let mut problems = Vec::new();
    let mut cells = Vec::new();
    let mut on = (0, 0);
    for mode in [Mode::On, Mode::Off, Mode::Default] {
        let c = check(&case, &rewritten, mode, &want, &want_cwd);
        cells.push(format!("{}={}", mode.label(), if c.problems.is_empty() { "pass" } else { "FAIL" }));
        if mode == Mode::On {
            on = (c.threads, c.calls);
        }
        problems.extend(c.problems);
    }
    table_row(&format!(
        "{:<11} {:<4}  {}  {coverage}  threads {:>2}  calls {:>11}  exit {}",
        case.name,
        if problems.is_empty() { "PASS" } else { "FAIL" },
        cells.join(" "),
        on.0,
        on.1,
        want.status
    ));
    assert!(problems.is_empty(), "{}:\n{}", case.name, problems.join("\n"));
}

#[test]
fn pigz() {
    corpus(Case {
        name: "pigz",
        bin: "/usr/bin/pigz",
        package: "pigz",
        args: &["-p", "2", "-c", "-n"],
        stdin: Some(text(4 << 20)),
        files: &[],
        env: &[],
        threads: 3,
    });
}

#[test]
fn pbzip2() {
    corpus(Case {
        name: "pbzip2",
        bin: "/usr/bin/pbzip2",
        package: "pbzip2",
        args: &["-p2", "-c", "-b5"],
        stdin: Some(text(2 << 20)),
        files: &[],
        env: &[],
        threads: 3,
    });
}

#[test]
fn zstd() {
    corpus(Case {
        name: "zstd",
        bin: "/usr/bin/zstd",
        package: "zstd",
        args: &["-T2", "-q", "-c", "-3", "--no-progress"],
        stdin: Some(text(4 << 20)),
        files: &[],
        env: &[],
        threads: 2,
    });
}

#[test]
fn xz() {
    corpus(Case {
        name: "xz",
        bin: "/usr/bin/xz",
        package: "xz-utils",
        args: &["-T2", "--block-size=1MiB", "-c", "-1"],
        stdin: Some(text(3 << 20)),
        files: &[],
        env: &[],
        // Its compression threads are liblzma's: they run no instrumented code (library
        // time comes from import points, not from the library's own threads).
        threads: 1,
    });
}

#[test]
fn sort_parallel() {
    corpus(Case {
        name: "sort",
        bin: "/usr/bin/sort",
        package: "coreutils",
        args: &["--parallel=2", "-S", "64M", "-k", "2,2", "-k", "1n"],
        // Enough lines for sort to use both threads (it does not below some tens of thousands).
        stdin: Some(text(12 << 20)),
        files: &[],
        env: &[("LC_ALL", "C")],
        threads: 2,
    });
}

#[test]
fn sqlite3() {
    let sql = "create table t(a integer primary key, b text);\n\
        with recursive c(x) as (select 1 union all select x + 1 from c where x < 20000)\n\
        insert into t select x, hex(x * 7919) from c;\n\
        create index tb on t(b);\n\
        select count(*), sum(a), min(b), max(b) from t;\n\
        select b, count(*) from t group by length(b) order by 1;\n\
        select * from t where a % 4999 = 0;\n";
    corpus(Case {
        name: "sqlite3",
        bin: "/usr/bin/sqlite3",
        package: "sqlite3",
        args: &[":memory:"],
        stdin: Some(sql.as_bytes().to_vec()),
        files: &[],
        env: &[],
        threads: 1,
    });
}

#[test]
fn lua() {
    let script = "local t = {}\nfor i = 1, 200000 do t[i] = (i * 7919) % 10007 end\n\
        table.sort(t)\nlocal s = 0\nfor i, v in ipairs(t) do s = s + v * i end\n\
        print(#t, s, string.format('%q', string.rep('ab', 3)))\n\
        local ok, err = pcall(function() error('boom') end)\nprint(ok, err)\n";
    corpus(Case {
        name: "lua5.4",
        bin: "/usr/bin/lua5.4",
        package: "lua5.4",
        args: &["-"],
        stdin: Some(script.as_bytes().to_vec()),
        files: &[],
        env: &[],
        threads: 1,
    });
}

#[test]
fn python3() {
    let script = "import hashlib, json, re, zlib, threading, sys\n\
        data = [{'n': i, 's': str(i * 7919)} for i in range(20000)]\n\
        blob = json.dumps(data, sort_keys=True).encode()\n\
        print(hashlib.sha256(blob).hexdigest(), len(zlib.compress(blob, 6)))\n\
        print(len(re.findall(r'\"s\": \"(\\d*7)\"', blob.decode())))\n\
        out = [0, 0]\n\
        def work(k):\n    out[k] = sum(hashlib.md5(str(i).encode()).digest()[0] for i in range(20000 * (k + 1)))\n\
        ts = [threading.Thread(target=work, args=(k,)) for k in range(2)]\n\
        [t.start() for t in ts]; [t.join() for t in ts]\n\
        print(out)\n\
        try:\n    {}['missing']\nexcept KeyError as e:\n    print('caught', repr(e), file=sys.stderr)\n";
    corpus(Case {
        name: "python3.11",
        bin: "/usr/bin/python3.11",
        package: "python3.11",
        args: &["-"],
        stdin: Some(script.as_bytes().to_vec()),
        files: &[],
        env: &[("PYTHONHASHSEED", "0"), ("PYTHONDONTWRITEBYTECODE", "1")],
        threads: 3,
    });
}

#[test]
fn cppcheck() {
    const BAD: &str = "#include <stdlib.h>\n\
        int f(int i) { int a[4]; a[4] = i; return a[0]; }\n\
        int g(void) { int *p = 0; return *p; }\n\
        void h(void) { char *q = malloc(10); q[0] = 1; }\n";
    corpus(Case {
        name: "cppcheck",
        bin: "/usr/bin/cppcheck",
        package: "cppcheck",
        args: &["--enable=warning", "--quiet", "--error-exitcode=3", "-j", "1", "bad.c"],
        stdin: None,
        files: &[("bad.c", BAD)],
        env: &[],
        threads: 1,
    });
}

#[test]
fn gzip() {
    corpus(Case {
        name: "gzip",
        bin: "/usr/bin/gzip",
        package: "gzip",
        args: &["-c", "-n", "-6"],
        stdin: Some(text(2 << 20)),
        files: &[],
        env: &[],
        threads: 1,
    });
}

#[test]
fn bzip2() {
    corpus(Case {
        name: "bzip2",
        bin: "/usr/bin/bzip2",
        package: "bzip2",
        args: &["-c", "-9"],
        stdin: Some(text(1 << 20)),
        files: &[],
        env: &[],
        threads: 1,
    });
}

#[test]
fn grep() {
    corpus(Case {
        name: "grep",
        bin: "/usr/bin/grep",
        package: "grep",
        args: &["-c", "-E", "^[0-9]{6} (mutex|lock) .*join"],
        stdin: Some(text(2 << 20)),
        files: &[],
        env: &[("LC_ALL", "C")],
        threads: 1,
    });
}

#[test]
fn sed() {
    corpus(Case {
        name: "sed",
        bin: "/usr/bin/sed",
        package: "sed",
        args: &["-E", "s/(thread|mutex) (\\w+)/\\2 \\1/g; /^0/d"],
        stdin: Some(text(1 << 20)),
        files: &[],
        env: &[("LC_ALL", "C")],
        threads: 1,
    });
}

#[test]
fn mawk() {
    corpus(Case {
        name: "mawk",
        bin: "/usr/bin/mawk",
        package: "mawk",
        args: &["{ n[$2]++; s += $1 } END { for (k in n) c++; printf \"%d %d\\n\", c, s }"],
        stdin: Some(text(2 << 20)),
        files: &[],
        env: &[("LC_ALL", "C")],
        threads: 1,
    });
}

#[test]
fn tar() {
    corpus(Case {
        name: "tar",
        bin: "/usr/bin/tar",
        package: "tar",
        args: &[
            "--mtime=@0",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "--sort=name",
            "--mode=0644",
            "-cf",
            "-",
            "a.txt",
            "b.txt",
        ],
        stdin: None,
        files: &[("a.txt", "alpha\n"), ("b.txt", "beta\nbeta\n")],
        env: &[],
        threads: 1,
    });
}

#[test]
fn diff() {
    corpus(Case {
        name: "diff",
        bin: "/usr/bin/diff",
        package: "diffutils",
        args: &["a.txt", "b.txt"],
        stdin: None,
        files: &[("a.txt", "one\ntwo\nthree\nfour\n"), ("b.txt", "one\n2\nthree\nfour\nfive\n")],
        env: &[],
        threads: 1,
    });
}

/// What a redis-server run gave its clients: the transcript of a fixed `redis-cli` session,
/// whether `redis-benchmark` succeeded, the server's exit status after SIGTERM, its pid.
#[derive(Debug, PartialEq, Eq)]
struct RedisRun {
    transcript: String,
    benchmark_ok: bool,
    status: Option<i32>,
    pid: u32,
}

/// The fixed client session (deterministic replies).
const REDIS_SESSION: &str = "SET a 1\nINCRBY a 41\nGET a\nRPUSH l x y z\nLRANGE l 0 -1\n\
    HSET h f1 v1 f2 v2\nHGETALL h\nSADD s m1 m2 m3\nSCARD s\nDEL a l h s\nDBSIZE\n";

/// Start `bin` on 127.0.0.1 and a free port, run the session and a short benchmark against
/// it, stop it by pid with SIGTERM.
fn redis_run(bin: &Path, cwd: &Path, env: &[(&str, &str)]) -> RedisRun {
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().unwrap().port().to_string();
    let mut cmd = std::process::Command::new(bin);
    cmd.args(["--port", &port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--io-threads", "2"])
        .args(["--io-threads-do-reads", "yes", "--daemonize", "no", "--logfile", "", "--loglevel", "warning"])
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    for k in ["STINT_PROFILE", "STINT_DIR", "STINT_CONTROL"] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut server = cmd.spawn().unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let pid = server.id();
    let cli = |args: &[&str], stdin: &str| {
        let mut c = std::process::Command::new("redis-cli");
        c.args(["-h", "127.0.0.1", "-p", &port]).args(args);
        c.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        let mut child = c.spawn().expect("redis-cli (apt-get install redis-tools)");
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while String::from_utf8_lossy(&cli(&["PING"], "").stdout).trim() != "PONG" {
        assert!(std::time::Instant::now() < deadline, "{}: no PONG on port {port}", bin.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    let transcript = String::from_utf8_lossy(&cli(&[], REDIS_SESSION).stdout).into_owned();
    let bench = std::process::Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port, "-n", "5000", "-c", "8", "-q", "-t", "set,get,lpush", "-P", "4"])
        .output()
        .expect("redis-benchmark (apt-get install redis-tools)");
    // Stopped by pid, never by name.
    // Safety: kill(2) with the pid of our own child; no memory is involved.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = server.wait().expect("wait for redis-server").code();
    RedisRun { transcript, benchmark_ok: bench.status.success(), status, pid }
}

#[test]
fn redis_server() {
    let bin = Path::new("/usr/bin/redis-server");
    if !bin.is_file() {
        assert!(!under_ci(), "/usr/bin/redis-server: missing under CI; .ci/run must `apt-get install redis-server`");
        eprintln!("\n!!!!!!!!!! SKIPPED: redis-server is not installed (apt-get install redis-server) !!!!!!!!!!\n");
        return;
    }
    let _share = cpu_share();
    let rewritten = fresh_dir("corpus-redis").join("redis-server");
    rewrite(bin, &rewritten);
    let want = redis_run(bin, &fresh_dir("corpus-redis-orig"), &[]);
    assert!(want.benchmark_ok && want.status == Some(0), "the original redis-server: {want:?}");
    assert!(want.transcript.contains("42\n") && want.transcript.contains("\nx\ny\nz\n"), "{want:?}");
    let mut problems = Vec::new();
    let mut cells = Vec::new();
    let mut on = (0, 0);
    for mode in [Mode::On, Mode::Off, Mode::Default] {
        let dir = fresh_dir(&format!("corpus-redis-{}", mode.label()));
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let control = dir.join("off.yaml");
        std::fs::write(&control, "on: []\n").unwrap();
        let profiles = dir.join(if mode == Mode::Default { "stint" } else { "p" });
        let cwd = fresh_dir(&format!("corpus-redis-{}-cwd", mode.label()));
        let env: Vec<(&str, &str)> = match mode {
            Mode::On => vec![("STINT_DIR", path_str(&profiles))],
            Mode::Off => vec![("STINT_DIR", path_str(&profiles)), ("STINT_CONTROL", path_str(&control))],
            Mode::Default => vec![("XDG_RUNTIME_DIR", path_str(&dir))],
        };
        let got = redis_run(&rewritten, &cwd, &env);
        let mut bad = Vec::new();
        if (&got.transcript, got.benchmark_ok, got.status) != (&want.transcript, want.benchmark_ok, want.status) {
            bad.push(format!("metrics {}: {got:?}, the original: {want:?}", mode.label()));
        }
        if !dir_entries(&cwd).is_empty() {
            bad.push(format!("metrics {}: cwd holds {:?}", mode.label(), dir_entries(&cwd)));
        }
        let file = profiles.join(format!("redis-server.{}.stint", got.pid));
        match std::fs::read(&file) {
            Err(e) => bad.push(format!("metrics {}: {}: {e}", mode.label(), file.display())),
            Ok(_) => {
                let (threads, calls) = threads_and_calls(&report_json(&file));
                match mode {
                    Mode::Off if calls != 0 => bad.push(format!("metrics off: {calls} calls counted")),
                    Mode::Off => {}
                    // The main thread, the io thread, and redis' background (bio) threads.
                    _ if threads < 3 || calls == 0 => {
                        bad.push(format!("metrics {}: {threads} threads, {calls} calls", mode.label()))
                    }
                    _ => {}
                }
                if mode == Mode::On {
                    on = (threads, calls);
                }
            }
        }
        cells.push(format!("{}={}", mode.label(), if bad.is_empty() { "pass" } else { "FAIL" }));
        problems.extend(bad);
    }
    table_row(&format!(
        "{:<11} {:<4}  {}  (server: client transcript, benchmark, exit)  threads {:>2}  calls {:>11}  exit {}",
        "redis",
        if problems.is_empty() { "PASS" } else { "FAIL" },
        cells.join(" "),
        on.0,
        on.1,
        want.status.unwrap_or(-1)
    ));
    assert!(problems.is_empty(), "redis-server:\n{}", problems.join("\n"));
}
