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
//! program fails its test; elsewhere it is skipped loudly. The server tests (redis-server,
//! memcached) start the servers on 127.0.0.1 and a free port, drive them over TCP and stop
//! them by pid. A program whose output legitimately varies between runs (rg's parallel walk
//! orders its lines as the threads finish; sysbench prints timings) is compared through an
//! [`Extra`] that sorts or masks what varies, and checks more of its profile.

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

/// What a case adds to the byte-for-byte check of [`corpus`].
#[derive(Clone, Copy)]
struct Extra {
    /// Writes more input into the cwd before each run (after `Case::files`).
    prepare: fn(&Path),
    /// Maps stdout before the comparison: output that varies between two runs of the
    /// original is sorted or masked here, and nothing else.
    stdout: fn(&[u8]) -> Vec<u8>,
    /// More checks of a report with metrics on (and by default): what is wrong, if anything.
    report: fn(&serde_json::Value) -> Vec<String>,
}

/// No extra: stdout byte for byte, the common report checks only.
const PLAIN: Extra = Extra { prepare: |_| {}, stdout: |b| b.to_vec(), report: |_| Vec::new() };

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

fn run_in(
    bin: &Path,
    case: &Case,
    extra: Extra,
    label: &str,
    setup: impl FnOnce(Run) -> Run,
) -> (Outcome, Vec<String>) {
    let cwd = fresh_dir(&format!("corpus-{}-{label}", case.name));
    for (name, content) in case.files {
        std::fs::write(cwd.join(name), content).unwrap();
    }
    (extra.prepare)(&cwd);
    let mut r = Run::new(bin, &cwd).args(case.args).timeout(Duration::from_secs(240));
    for (k, v) in case.env {
        r = r.env(k, v);
    }
    if let Some(s) = &case.stdin {
        r = r.stdin(s.clone());
    }
    let o = setup(r).run();
    let stdout = (extra.stdout)(&o.stdout);
    (Outcome { stdout, ..o }, dir_entries(&cwd))
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
fn check(case: &Case, extra: Extra, rewritten: &Path, mode: Mode, want: &Outcome, want_cwd: &[String]) -> Checked {
    let dir = fresh_dir(&format!("corpus-{}-{}-profiles", case.name, mode.label()));
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let control = dir.join("off.yaml");
    std::fs::write(&control, "on: []\n").unwrap();
    let profiles = match mode {
        Mode::On | Mode::Off => dir.join("p"),
        Mode::Default => dir.join("stint"),
    };
    let (got, cwd) = run_in(rewritten, case, extra, mode.label(), |r| match mode {
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
            for bad in report_invariants(&report, case.name, got.pid, false).into_iter().chain((extra.report)(&report))
            {
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
    corpus_with(case, PLAIN);
}

/// [`corpus`] with a case's [`Extra`].
fn corpus_with(case: Case, extra: Extra) {
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
    let (want, want_cwd) = run_in(&bin, &case, extra, "original", |r| r);
    let mut problems = Vec::new();
    let mut cells = Vec::new();
    let mut on = (0, 0);
    for mode in [Mode::On, Mode::Off, Mode::Default] {
        let c = check(&case, extra, &rewritten, mode, &want, &want_cwd);
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

/// A one-process case of the wider set of `tests/it/exitcov.rs`'s coverage table: `bin` run
/// with `args` on `files` and `stdin`, with `LC_ALL=C` (no fork: a forked child would write a
/// profile of its own).
fn small(name: &'static str, bin: &'static str, package: &'static str, args: &'static [&'static str]) -> Case {
    Case { name, bin, package, args, stdin: None, files: SMALL_FILES, env: &[("LC_ALL", "C")], threads: 1 }
}

const SMALL_FILES: &[(&str, &str)] = &[
    ("a.txt", "alpha beta\ngamma alpha\ndelta\n"),
    ("Mk", "X := $(strip  a  b  a )\n$(info $(X) $(words $(X)) $(subst a,z,$(X)) $(sort $(X)))\nall: ;\n"),
];

#[test]
fn bash() {
    corpus(small(
        "bash",
        "/usr/bin/bash",
        "bash",
        &["-c", "x=abcdef; for i in 1 2 3; do echo $((i * i)) ${x:i:2}; done; declare -A m; m[k]=${#x}; echo ${m[k]}"],
    ));
}

#[test]
fn make() {
    corpus(small("make", "/usr/bin/make", "make", &["-f", "Mk"]));
}

#[test]
fn gawk() {
    let args: &[&str] =
        &["{ n[$2]++; s += $1 } END { c = length(n); printf \"%d %d %s\\n\", c, s, toupper(substr($2, 1, 3)) }"];
    corpus(Case { stdin: Some(text(1 << 20)), ..small("gawk", "/usr/bin/gawk", "gawk", args) });
}

#[test]
fn perl() {
    let args: &[&str] = &["-e", "my %h; while (<STDIN>) { my @f = split; $h{$f[1]}++ } print join(',', map { \"$_=$h{$_}\" } sort keys %h), \"\\n\""];
    corpus(Case { stdin: Some(text(256 << 10)), ..small("perl", "/usr/bin/perl", "perl-base", args) });
}

#[test]
fn openssl() {
    corpus(small("openssl", "/usr/bin/openssl", "openssl", &["dgst", "-sha256", "a.txt"]));
}

#[test]
fn curl() {
    corpus(small("curl", "/usr/bin/curl", "curl", &["-s", "file:///etc/debian_version"]));
}

#[test]
fn vim_tiny() {
    corpus(small(
        "vim.tiny",
        "/usr/bin/vim.tiny",
        "vim-tiny",
        &["-es", "-n", "-u", "NONE", "-i", "NONE", "-c", "%s/alpha/omega/g", "-c", "%p", "-c", "q!", "a.txt"],
    ));
}

#[test]
fn nano() {
    corpus(small("nano", "/usr/bin/nano", "nano", &["--version"]));
}

#[test]
fn less() {
    corpus(small("less", "/usr/bin/less", "less", &["a.txt"]));
}

#[test]
fn ls() {
    corpus(small("ls", "/usr/bin/ls", "coreutils", &["-1", "-s", "-R", "."]));
}

#[test]
fn cp() {
    corpus(small("cp", "/usr/bin/cp", "coreutils", &["-v", "a.txt", "c.txt"]));
}

#[test]
fn find() {
    corpus(small("find", "/usr/bin/find", "findutils", &[".", "-maxdepth", "1", "-name", "*.txt", "-size", "-1k"]));
}

#[test]
fn tmux() {
    corpus(small("tmux", "/usr/bin/tmux", "tmux", &["-V"]));
}

#[test]
fn nginx() {
    corpus(small("nginx", "/usr/sbin/nginx", "nginx", &["-v"]));
}

#[test]
fn psql() {
    corpus(small("psql", "/usr/lib/postgresql/15/bin/psql", "postgresql-client-15", &["--version"]));
}

#[test]
fn zsh() {
    corpus(small(
        "zsh",
        "/usr/bin/zsh",
        "zsh",
        &[
            "-f",
            "-c",
            "integer i; for i in {1..5}; do print $((i * i)); done; typeset -A m; m[k]=abc; print ${(U)m[k]}",
        ],
    ));
}

#[test]
fn strace() {
    corpus(small("strace", "/usr/bin/strace", "strace", &["-V"]));
}

#[test]
fn htop() {
    corpus(small("htop", "/usr/bin/htop", "htop", &["--version"]));
}

#[test]
fn rsync() {
    corpus(small("rsync", "/usr/bin/rsync", "rsync", &["--version"]));
}

/// rg's input: `text(3 MiB)` cut into 24 files over three directories.
fn rg_tree(cwd: &Path) {
    let t = text(3 << 20);
    let lines: Vec<&[u8]> = t.split_inclusive(|&b| b == b'\n').collect();
    for (i, part) in lines.chunks(lines.len().div_ceil(24)).enumerate() {
        let dir = cwd.join("tree").join(format!("d{}", i % 3));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i:02}.txt")), part.concat()).unwrap();
    }
}

/// Output lines sorted (their order follows the threads of a parallel run).
fn sorted_lines(b: &[u8]) -> Vec<u8> {
    let mut lines: Vec<&[u8]> = b.split_inclusive(|&c| c == b'\n').collect();
    lines.sort();
    lines.concat()
}

/// Every thread of a report counted calls (its start routine at least is instrumented).
fn threads_have_calls(r: &serde_json::Value) -> Vec<String> {
    threads(r)
        .iter()
        .filter(|t| total_calls(t) == 0)
        .map(|t| format!("thread {} ({}) counted no call", t["tid"], t["name"]))
        .collect()
}

#[test]
fn ripgrep() {
    // A Rust program: two searcher threads walk the tree (-j2) besides the main thread.
    corpus_with(
        Case {
            name: "rg",
            bin: "/usr/bin/rg",
            package: "ripgrep",
            args: &["-j2", "-n", "-i", "-w", "MUTEX (join|lock)|^0+1 ", "tree"],
            stdin: None,
            files: &[],
            env: &[],
            threads: 3,
        },
        Extra { prepare: rg_tree, stdout: sorted_lines, report: threads_have_calls },
    );
}

/// `b` with every number that has a decimal point replaced by `#`, and the spaces before it by
/// one (sysbench's timings and rates, right-aligned in columns as wide as the number; the
/// counts it prints have no decimal point).
fn mask_decimals(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let n = b[i..].iter().take_while(|c| c.is_ascii_digit() || **c == b'.').count();
        if n > 0 && b[i..i + n].contains(&b'.') && b[i].is_ascii_digit() {
            while out.last() == Some(&b' ') {
                out.pop();
            }
            out.extend_from_slice(b" #");
            i += n;
        } else {
            out.extend_from_slice(&b[i..i + n.max(1)]);
            i += n.max(1);
        }
    }
    out
}

#[test]
fn sysbench() {
    // Two worker threads share 2,000 events of the CPU test: `sb_event_stop` (an exported
    // function of sysbench) runs once per event, on whichever worker took it.
    corpus_with(
        Case {
            name: "sysbench",
            bin: "/usr/bin/sysbench",
            package: "sysbench",
            args: &["cpu", "--threads=2", "--cpu-max-prime=2000", "--time=0", "--events=2000", "run"],
            stdin: None,
            files: &[],
            env: &[],
            threads: 3,
        },
        Extra {
            prepare: |_| {},
            stdout: mask_decimals,
            report: |r| {
                let mut bad = threads_have_calls(r);
                if calls_of(r, "sb_event_stop") != 2000 {
                    bad.push(format!("sb_event_stop: {} calls, want 2000", calls_of(r, "sb_event_stop")));
                }
                bad
            },
        },
    );
}

/// What a server run gave its clients: the transcript of a fixed client session, whether the
/// load from several clients at once got every reply right, the server's exit status after
/// SIGTERM, its pid.
#[derive(Debug, PartialEq, Eq)]
struct ServerRun {
    transcript: String,
    load_ok: bool,
    status: Option<i32>,
    pid: u32,
}

/// A free TCP port on 127.0.0.1 (the server binds it right after).
fn free_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().unwrap().port().to_string()
}

/// `bin` started in `cwd` with `args`, no `STINT_*` variable but those of `env`, stdin from
/// /dev/null, stdout and stderr piped (`quiet`: to /dev/null).
fn spawn_server(bin: &Path, cwd: &Path, args: &[&str], env: &[(&str, &str)], quiet: bool) -> std::process::Child {
    let out = || if quiet { std::process::Stdio::null() } else { std::process::Stdio::piped() };
    let mut cmd = std::process::Command::new(bin);
    cmd.args(args).current_dir(cwd).stdin(std::process::Stdio::null()).stdout(out()).stderr(out());
    for k in ["STINT_PROFILE", "STINT_DIR", "STINT_CONTROL"] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap_or_else(|e| panic!("{}: {e}", bin.display()))
}

/// Stop a server of ours by pid (never by name) with SIGTERM and wait for it: its exit
/// status and what it wrote to stderr (if piped).
fn stop_server(server: std::process::Child) -> (Option<i32>, String) {
    // Safety: kill(2) with the pid of our own child; no memory is involved.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    let out = server.wait_with_output().expect("wait for the server");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The server test: rewrite `bin`, run it with `run` as the original and with metrics on, off
/// and by default; each rewritten run must give the original's [`ServerRun`] (but the pid),
/// leave its cwd empty, and write one profile: with calls on at least `threads` threads and
/// nothing `report` objects to when metrics are on (and by default), with no calls when off.
fn server_corpus(
    name: &str,
    bin: &str,
    package: &str,
    threads: usize,
    expect: &[&str],
    run: fn(&Path, &Path, &[(&str, &str)]) -> ServerRun,
    report: fn(&serde_json::Value) -> Vec<String>,
) {
    let bin = Path::new(bin);
    if !bin.is_file() {
        assert!(!under_ci(), "{}: missing under CI; .ci/run must `apt-get install {package}`", bin.display());
        eprintln!("\n!!!!!!!!!! SKIPPED: {} is not installed (apt-get install {package}) !!!!!!!!!!\n", bin.display());
        return;
    }
    let file_name = bin.file_name().unwrap().to_string_lossy().into_owned();
    let _share = cpu_share();
    let rewritten = fresh_dir(&format!("corpus-{name}")).join(&file_name);
    rewrite(bin, &rewritten);
    let want = run(bin, &fresh_dir(&format!("corpus-{name}-orig")), &[]);
    assert!(want.load_ok && want.status == Some(0), "the original {file_name}: {want:?}");
    assert!(expect.iter().all(|e| want.transcript.contains(e)), "the original {file_name}: {want:?}, want {expect:?}");
    let mut problems = Vec::new();
    let mut cells = Vec::new();
    let mut on = (0, 0);
    for mode in [Mode::On, Mode::Off, Mode::Default] {
        let dir = fresh_dir(&format!("corpus-{name}-{}", mode.label()));
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let control = dir.join("off.yaml");
        std::fs::write(&control, "on: []\n").unwrap();
        let profiles = dir.join(if mode == Mode::Default { "stint" } else { "p" });
        let cwd = fresh_dir(&format!("corpus-{name}-{}-cwd", mode.label()));
        let env: Vec<(&str, &str)> = match mode {
            Mode::On => vec![("STINT_DIR", path_str(&profiles))],
            Mode::Off => vec![("STINT_DIR", path_str(&profiles)), ("STINT_CONTROL", path_str(&control))],
            Mode::Default => vec![("XDG_RUNTIME_DIR", path_str(&dir))],
        };
        let got = run(&rewritten, &cwd, &env);
        let mut bad = Vec::new();
        if (&got.transcript, got.load_ok, got.status) != (&want.transcript, want.load_ok, want.status) {
            bad.push(format!("metrics {}: {got:?}, the original: {want:?}", mode.label()));
        }
        if !dir_entries(&cwd).is_empty() {
            bad.push(format!("metrics {}: cwd holds {:?}", mode.label(), dir_entries(&cwd)));
        }
        let file = profiles.join(format!("{file_name}.{}.stint", got.pid));
        match std::fs::read(&file) {
            Err(e) => bad.push(format!("metrics {}: {}: {e}", mode.label(), file.display())),
            Ok(_) => {
                let doc = report_json(&file);
                let (n, calls) = threads_and_calls(&doc);
                match mode {
                    Mode::Off if calls != 0 => bad.push(format!("metrics off: {calls} calls counted")),
                    Mode::Off => {}
                    _ if n < threads || calls == 0 => {
                        bad.push(format!("metrics {}: {n} threads (want {threads}), {calls} calls", mode.label()))
                    }
                    _ => bad.extend(report(&doc).into_iter().map(|b| format!("metrics {}: report: {b}", mode.label()))),
                }
                if mode == Mode::On {
                    on = (n, calls);
                }
            }
        }
        cells.push(format!("{}={}", mode.label(), if bad.is_empty() { "pass" } else { "FAIL" }));
        problems.extend(bad);
    }
    table_row(&format!(
        "{:<11} {:<4}  {}  (server: client transcript, load, exit)  threads {:>2}  calls {:>11}  exit {}",
        name,
        if problems.is_empty() { "PASS" } else { "FAIL" },
        cells.join(" "),
        on.0,
        on.1,
        want.status.unwrap_or(-1)
    ));
    assert!(problems.is_empty(), "{file_name}:\n{}", problems.join("\n"));
}

/// The fixed client session (deterministic replies).
const REDIS_SESSION: &str = "SET a 1\nINCRBY a 41\nGET a\nRPUSH l x y z\nLRANGE l 0 -1\n\
    HSET h f1 v1 f2 v2\nHGETALL h\nSADD s m1 m2 m3\nSCARD s\nDEL a l h s\nDBSIZE\n";

/// Start redis-server `bin` on 127.0.0.1 and a free port, run the session and a short
/// `redis-benchmark` (the load) against it, stop it by pid with SIGTERM.
fn redis_run(bin: &Path, cwd: &Path, env: &[(&str, &str)]) -> ServerRun {
    let port = free_port();
    let args = ["--port", &port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--io-threads", "2"];
    let args =
        [&args[..], &["--io-threads-do-reads", "yes", "--daemonize", "no", "--logfile", "", "--loglevel", "warning"]];
    let server = spawn_server(bin, cwd, &args.concat(), env, true);
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
    let (status, _) = stop_server(server);
    ServerRun { transcript, load_ok: bench.status.success(), status, pid }
}

#[test]
fn redis_server() {
    // The main thread, the io thread, and redis' background (bio) threads.
    server_corpus("redis", "/usr/bin/redis-server", "redis-server", 3, &["42\n", "\nx\ny\nz\n"], redis_run, |_| {
        Vec::new()
    });
}

/// The fixed memcached session, text and meta protocol, ending in `quit` (the server then
/// closes the connection): every reply is deterministic.
const MEMCACHED_SESSION: &str = "set a 0 0 3\r\nabc\r\nget a\r\nadd a 0 0 1\r\nx\r\nappend a 0 0 2\r\nde\r\n\
    prepend a 0 0 1\r\n_\r\nget a\r\nset n 5 0 2\r\n41\r\nincr n 1\r\ndecr n 50\r\nincr a 1\r\n\
    get a n missing\r\ntouch n 100\r\nmg n v f\r\nms m 2\r\nhi\r\nmg m v\r\nmn\r\ndelete a\r\n\
    delete a\r\nget a\r\nversion\r\nquit\r\n";

/// Start memcached `bin` on 127.0.0.1 and a free port with two worker threads, run the
/// session, then 4 clients at once storing and reading back 200 keys each (the load), stop it
/// by pid with SIGTERM. The transcript ends with what it wrote to stderr.
fn memcached_run(bin: &Path, cwd: &Path, env: &[(&str, &str)]) -> ServerRun {
    use std::io::{BufRead, BufReader, Read};
    use std::net::TcpStream;
    let port = free_port();
    // -u: memcached refuses to run as root without it (and ignores it otherwise).
    let args = ["-u", "root", "-l", "127.0.0.1", "-p", &port, "-U", "0", "-t", "2", "-m", "16", "-c", "64"];
    let server = spawn_server(bin, cwd, &args, env, false);
    let pid = server.id();
    let addr = format!("127.0.0.1:{port}");
    let connect = || {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match TcpStream::connect(&addr) {
                Ok(c) => {
                    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                    return c;
                }
                Err(e) => assert!(std::time::Instant::now() < deadline, "{}: {addr}: {e}", bin.display()),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let mut c = connect();
    c.write_all(MEMCACHED_SESSION.as_bytes()).unwrap();
    let mut transcript = String::new();
    if let Err(e) = c.read_to_string(&mut transcript) {
        transcript += &format!("\n(read: {e})");
    }
    let load_ok = std::thread::scope(|s| {
        let clients: Vec<_> = (0..4)
            .map(|k| {
                let mut c = connect();
                s.spawn(move || {
                    let mut r = BufReader::new(c.try_clone().unwrap());
                    let mut line = String::new();
                    let mut reply = |line: &mut String| {
                        line.clear();
                        r.read_line(line).is_ok()
                    };
                    (0..200).all(|i| {
                        let (key, value) = (format!("k{k}-{i}"), format!("{}", i * 7919 + k));
                        let set = format!("set {key} 0 0 {}\r\n{value}\r\nget {key}\r\n", value.len());
                        c.write_all(set.as_bytes()).is_ok()
                            && reply(&mut line)
                            && line == "STORED\r\n"
                            && reply(&mut line)
                            && line == format!("VALUE {key} 0 {}\r\n", value.len())
                            && reply(&mut line)
                            && line == format!("{value}\r\n")
                            && reply(&mut line)
                            && line == "END\r\n"
                    })
                })
            })
            .collect();
        clients.into_iter().all(|c| c.join().unwrap_or(false))
    });
    let (status, stderr) = stop_server(server);
    ServerRun { transcript: transcript + &stderr, load_ok, status, pid }
}

#[test]
fn memcached() {
    // The main thread, two workers, and the log, hash-table, crawler, LRU and slab threads;
    // the two workers are named.
    server_corpus("memcached", "/usr/bin/memcached", "memcached", 8, &["STORED\r\n42\r\n"], memcached_run, |r| {
        let mut bad = threads_have_calls(r);
        let workers: Vec<u64> = threads(r).iter().filter(|t| t["name"] == "mc-worker").map(total_calls).collect();
        if workers.len() != 2 {
            bad.push(format!("calls of the mc-worker threads {workers:?}, want two"));
        }
        bad
    });
}
