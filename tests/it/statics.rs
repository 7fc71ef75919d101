//! Static executables (issue 13, D4, D12): `testbins/static/threads.c` built as glibc
//! `-static`, glibc `-static-pie` and `musl-gcc -static`, rewritten with the default spec and
//! run next to the original; Debian's static `busybox`; a static Go program, which is refused.
//!
//! | test | checks |
//! | --- | --- |
//! | `<kind>::same_behaviour` | stdout, stderr and exit status of the rewritten program equal the original's |
//! | `<kind>::exact_counts` | per thread: main calls `tick` 7 times, the workers 100, 200 and 300; each worker's `pthread_mutex_lock` / `_unlock` as often as its `tick` |
//! | `<kind>::thread_records` | five threads; each created one names main as its creator, its start routine (`worker`, `waiter`) and `returned` |
//! | `<kind>::lock_wait` | the waiter's wait on `held` (main keeps it 60 ms after it saw the waiter blocked): one acquisition, contended, ≥ 20 ms |
//! | `<kind>::ends_recorded` | the parent's profile says `exit 0` (main's return), the child's `exit 3` (`exit(3)`): `exit`, `_exit`, `_Exit` and `__libc_start_main` are wrapped by name (D22) |
//! | `<kind>::fork_child` | the forked child has its own profile (fork_child, parent pid) with `child_work` called 5 times; the parent none |
//! | `<kind>::no_stint_variables` | run without any `STINT_*` variable: same behaviour, the cwd stays empty, the profiles go to `$XDG_RUNTIME_DIR/stint` |
//! | `<kind>::segments` | the output's kind in the rewrite report, and no segment both writable and executable |
//! | `busybox::*` | `sort`, `md5sum` and `sh -c` of the rewritten `/bin/busybox` print exactly what the original does; two runs of `sort` on the same input give the same calls per function |
//! | `go_program_is_refused` | `CGO_ENABLED=0 go build` output: exit 2, one line naming the reason, no output file |
//!
//! musl-gcc (musl-tools), busybox (busybox-static) and go (golang-go) missing skip their
//! tests loudly on a developer's machine and fail them under CI, where `.ci/run` installs them.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// The three kinds of static executable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Glibc,
    GlibcPie,
    Musl,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Glibc => "glibc-static",
            Kind::GlibcPie => "glibc-static-pie",
            Kind::Musl => "musl-static",
        }
    }

    /// The compiler, its flags, and the package that has it.
    fn compiler(self) -> (&'static str, &'static [&'static str], &'static str) {
        match self {
            Kind::Glibc => ("gcc", &["-O2", "-static", "-pthread"], "gcc"),
            Kind::GlibcPie => ("gcc", &["-O2", "-fPIE", "-static-pie", "-pthread"], "gcc"),
            Kind::Musl => ("musl-gcc", &["-O2", "-static"], "musl-tools"),
        }
    }

    /// `kind` in the rewrite report.
    fn report_kind(self) -> &'static str {
        match self {
            Kind::Glibc | Kind::Musl => "static",
            Kind::GlibcPie => "static-pie",
        }
    }
}

/// Whether `program` runs; else None after a loud message, or a failure under CI.
fn have_tool(program: &str, package: &str) -> Option<()> {
    if std::process::Command::new(program).arg("--version").output().is_ok() {
        return Some(());
    }
    if under_ci() {
        panic!("{program}: missing under CI; .ci/run must `apt-get install {package}`");
    }
    eprintln!("\n!!!!!!!!!! SKIPPED: {program} is not installed (apt-get install {package}); this test checks nothing here !!!!!!!!!!\n");
    None
}

/// The original and the rewritten program of one kind (built once per test process).
struct Built {
    original: PathBuf,
    rewritten: PathBuf,
    /// `stint rewrite --report` of it.
    report: Value,
}

fn built(kind: Kind) -> Option<&'static Built> {
    static CELLS: [OnceLock<Option<Built>>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let cell = &CELLS[kind as usize];
    cell.get_or_init(|| {
        let (cc, flags, package) = kind.compiler();
        have_tool(cc, package)?;
        let dir = fresh_dir(&format!("statics-{}", kind.name()));
        let original = dir.join("threads");
        let src = testbins_dir().join("static").join("threads.c");
        let mut args: Vec<&str> = flags.to_vec();
        args.extend(["-o", path_str(&original), path_str(&src)]);
        tool(cc, &args);
        let rewritten = dir.join("out").join("threads");
        std::fs::create_dir_all(rewritten.parent().unwrap()).unwrap();
        let report_file = dir.join("rewrite.json");
        let o = stint(&[
            "rewrite",
            path_str(&original),
            "-o",
            path_str(&rewritten),
            "--report",
            path_str(&report_file),
            "-q",
        ]);
        assert!(o.status == 0 && o.stderr.is_empty(), "{}: stint rewrite failed: {o:?}", kind.name());
        let report = serde_json::from_slice(&std::fs::read(&report_file).unwrap()).expect("rewrite report JSON");
        Some(Built { original, rewritten, report })
    })
    .as_ref()
}

/// One run of the original and one of the rewritten program, with the rewritten run's
/// profiles: the parent's and the forked child's.
struct Runs {
    want: Outcome,
    got: Outcome,
    parent: Value,
    child: Value,
}

fn runs(kind: Kind) -> Option<&'static Runs> {
    static CELLS: [OnceLock<Option<Runs>>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    CELLS[kind as usize]
        .get_or_init(|| {
            let b = built(kind)?;
            let _share = cpu_share();
            let cwd = fresh_dir(&format!("statics-run-{}", kind.name()));
            let profiles = fresh_dir(&format!("statics-profiles-{}", kind.name()));
            let want = Run::new(&b.original, &cwd).timeout(Duration::from_secs(60)).run();
            let got = Run::new(&b.rewritten, &cwd)
                .env("STINT_PROFILE", &profile_template(&profiles, "threads"))
                .timeout(Duration::from_secs(60))
                .run();
            let files = dir_entries(&profiles);
            assert_eq!(files.len(), 2, "{}: profiles {files:?}, want the parent's and the child's", kind.name());
            let reports: Vec<Value> = files.iter().map(|f| report_json(&profiles.join(f))).collect();
            let (child, parent): (Vec<Value>, Vec<Value>) =
                reports.into_iter().partition(|r| r["fork_child"].as_bool() == Some(true));
            assert!(parent.len() == 1 && child.len() == 1, "{}: want one parent and one fork child", kind.name());
            Some(Runs {
                want,
                got,
                parent: parent.into_iter().next().unwrap(),
                child: child.into_iter().next().unwrap(),
            })
        })
        .as_ref()
}

use crate::common::thread_calls as calls;

/// The threads of a report whose start routine is `routine`.
fn started_by<'v>(r: &'v Value, routine: &str) -> Vec<&'v Value> {
    threads(r).iter().filter(|t| t["start_routine"] == routine).collect()
}

fn same_behaviour(kind: Kind) {
    let Some(r) = runs(kind) else { return };
    assert!(r.want.status == 0 && r.want.stdout_str().contains("total 600"), "{}: original: {:?}", kind.name(), r.want);
    assert!(
        r.want.same_behaviour(&r.got),
        "{}: {}",
        kind.name(),
        describe_difference("original", &r.want, "rewritten", &r.got)
    );
}

fn exact_counts(kind: Kind) {
    let Some(r) = runs(kind) else { return };
    let ctx = kind.name();
    let main = main_thread(&r.parent);
    assert_eq!(calls(main, "tick"), 7, "{ctx}: main's tick");
    assert_eq!(calls(main, "child_work"), 0, "{ctx}: main's child_work (the child's)");
    assert_eq!(calls(main, "pthread_create"), 4, "{ctx}: main's pthread_create");
    assert_eq!(calls(main, "pthread_join"), 4, "{ctx}: main's pthread_join");
    let workers = started_by(&r.parent, "worker");
    let mut ticks: Vec<u64> = workers.iter().map(|t| calls(t, "tick")).collect();
    ticks.sort_unstable();
    assert_eq!(ticks, [100, 200, 300], "{ctx}: tick per worker");
    for t in workers {
        let n = calls(t, "tick");
        assert_eq!(calls(t, "pthread_mutex_lock"), n, "{ctx}: worker {}: pthread_mutex_lock", t["tid"]);
        assert_eq!(calls(t, "pthread_mutex_unlock"), n, "{ctx}: worker {}: pthread_mutex_unlock", t["tid"]);
    }
}

fn thread_records(kind: Kind) {
    let Some(r) = runs(kind) else { return };
    let ctx = kind.name();
    let pid = r.parent["pid"].as_u64().expect("pid");
    assert_eq!(threads(&r.parent).len(), 5, "{ctx}: threads");
    assert_eq!(main_thread(&r.parent)["tid"].as_u64(), Some(pid), "{ctx}: the main thread's tid is the pid");
    assert_eq!(started_by(&r.parent, "worker").len(), 3, "{ctx}: threads started by worker");
    assert_eq!(started_by(&r.parent, "waiter").len(), 1, "{ctx}: threads started by waiter");
    for t in threads(&r.parent).iter().filter(|t| t["main"] != true) {
        assert_eq!(t["creator_tid"].as_u64(), Some(pid), "{ctx}: thread {}: creator", t["tid"]);
        assert_eq!(t["exit"], "returned", "{ctx}: thread {}: how it ended", t["tid"]);
    }
}

fn lock_wait(kind: Kind) {
    let Some(r) = runs(kind) else { return };
    let ctx = kind.name();
    let waiter = started_by(&r.parent, "waiter");
    let w: Vec<&Value> =
        waiter[0]["waits"].as_array().into_iter().flatten().filter(|w| w["object_name"] == "held").collect();
    assert_eq!(w.len(), 1, "{ctx}: the waiter's waits on held: {}", waiter[0]["waits"]);
    assert_eq!(w[0]["kind"], "mutex", "{ctx}");
    assert_eq!(w[0]["count"].as_u64(), Some(1), "{ctx}: acquisitions of held");
    assert_eq!(w[0]["contended"].as_u64(), Some(1), "{ctx}: held was locked when the waiter came");
    let ns = w[0]["wait_ns"].as_u64().unwrap_or(0);
    assert!(ns >= 20_000_000, "{ctx}: the waiter waited {ns} ns on held, main kept it 60 ms");
    for t in started_by(&r.parent, "worker") {
        let cl: Vec<&Value> =
            t["waits"].as_array().into_iter().flatten().filter(|w| w["object_name"] == "counter_lock").collect();
        assert_eq!(cl.len(), 1, "{ctx}: worker {}: waits on counter_lock", t["tid"]);
        assert_eq!(cl[0]["count"].as_u64(), Some(calls(t, "tick")), "{ctx}: worker {}: acquisitions", t["tid"]);
    }
}

fn fork_child(kind: Kind) {
    let Some(r) = runs(kind) else { return };
    let ctx = kind.name();
    assert_eq!(r.child["ppid"], r.parent["pid"], "{ctx}: the child's parent");
    assert_eq!(calls(main_thread(&r.child), "child_work"), 5, "{ctx}: the child's child_work");
    assert_eq!(calls(main_thread(&r.child), "tick"), 0, "{ctx}: the child runs no tick");
    assert!(r.got.stdout_str().contains("child exited 3"), "{ctx}: {:?}", r.got);
}

fn ends_recorded(kind: Kind) {
    let Some(r) = runs(kind) else { return };
    let ctx = kind.name();
    let ended = |p: &Value| (p["ended"]["how"].clone(), p["ended"]["exit_status"].clone());
    // main returns 0 (its thunk, or libc's exit, both wrapped here); the child calls exit(3).
    assert_eq!(ended(&r.parent), (Value::from("exit"), Value::from(0)), "{ctx}: the parent's end");
    assert_eq!(ended(&r.child), (Value::from("exit"), Value::from(3)), "{ctx}: the child's end");
}

fn no_stint_variables(kind: Kind) {
    let Some(b) = built(kind) else { return };
    let _share = cpu_share();
    let ctx = kind.name();
    let run = |bin: &Path, xdg: &Path| {
        let cwd = fresh_dir(&format!("statics-cwd-{ctx}"));
        let mut r = Run::new(bin, &cwd).env("XDG_RUNTIME_DIR", path_str(xdg)).timeout(Duration::from_secs(60));
        for (k, _) in std::env::vars() {
            if k.starts_with("STINT_") {
                r = r.without(&k);
            }
        }
        let o = r.run();
        assert_eq!(dir_entries(&cwd), Vec::<String>::new(), "{ctx}: the cwd must stay empty");
        o
    };
    let xdg = fresh_dir(&format!("statics-xdg-{ctx}"));
    std::fs::set_permissions(&xdg, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let want = run(&b.original, &xdg);
    let got = run(&b.rewritten, &xdg);
    assert!(want.same_behaviour(&got), "{ctx}: {}", describe_difference("original", &want, "rewritten", &got));
    let files = dir_entries(&xdg.join("stint"));
    assert_eq!(files.len(), 2, "{ctx}: profiles in $XDG_RUNTIME_DIR/stint: {files:?}");
    assert!(files.contains(&format!("threads.{}.stint", got.pid)), "{ctx}: {files:?}");
}

fn segments(kind: Kind) {
    use object::read::elf::{FileHeader as _, ProgramHeader as _};
    let Some(b) = built(kind) else { return };
    let ctx = kind.name();
    assert_eq!(b.report["kind"], kind.report_kind(), "{ctx}: kind in the rewrite report");
    let data = std::fs::read(&b.rewritten).unwrap();
    let hdr = object::elf::FileHeader64::<object::Endianness>::parse(&*data).expect("ELF header");
    let en = hdr.endian().unwrap();
    let mut loads = 0;
    for ph in hdr.program_headers(en, &*data).expect("program headers") {
        let f = ph.p_flags(en);
        assert!(f & object::elf::PF_W == 0 || f & object::elf::PF_X == 0, "{ctx}: a writable and executable segment");
        loads += (ph.p_type(en) == object::elf::PT_LOAD) as u32;
        assert_ne!(ph.p_type(en), object::elf::PT_INTERP, "{ctx}: the output got an interpreter");
    }
    assert!(loads >= 3, "{ctx}: {loads} PT_LOADs");
}

macro_rules! static_kind_tests {
    ($($module:ident => $kind:expr),* $(,)?) => {$(
        mod $module {
            use super::*;
            #[test] fn same_behaviour() { super::same_behaviour($kind) }
            #[test] fn exact_counts() { super::exact_counts($kind) }
            #[test] fn thread_records() { super::thread_records($kind) }
            #[test] fn lock_wait() { super::lock_wait($kind) }
            #[test] fn fork_child() { super::fork_child($kind) }
            #[test] fn ends_recorded() { super::ends_recorded($kind) }
            #[test] fn no_stint_variables() { super::no_stint_variables($kind) }
            #[test] fn segments() { super::segments($kind) }
        }
    )*};
}

static_kind_tests!(glibc_static => Kind::Glibc, glibc_static_pie => Kind::GlibcPie, musl_static => Kind::Musl);

/// Debian's busybox (static, non-PIE, stripped).
mod busybox {
    use super::*;

    /// `/bin/busybox` and its rewritten copy, named `busybox` (busybox picks the applet by
    /// the name it is run as).
    fn pair() -> Option<(PathBuf, &'static Path)> {
        static OUT: OnceLock<PathBuf> = OnceLock::new();
        let bin = crate::debian::debian_binary("/bin/busybox", "busybox-static")?;
        let out = OUT.get_or_init(|| {
            let out = fresh_dir("statics-busybox").join("busybox");
            rewrite(&bin, &out);
            out
        });
        Some((bin, out))
    }

    /// Run the original and the rewritten busybox with `args` and `stdin`; they must behave
    /// the same. The rewritten run's report.
    fn compare(args: &[&str], stdin: &[u8]) -> Value {
        let Some((bin, out)) = pair() else { return Value::Null };
        let _share = cpu_share();
        let cwd = fresh_dir("statics-busybox-cwd");
        std::fs::write(cwd.join("input.txt"), b"fixed input for md5sum\n").unwrap();
        let profiles = fresh_dir("statics-busybox-profiles");
        let want = Run::new(&bin, &cwd).args(args).stdin(stdin.to_vec()).run();
        let got = Run::new(out, &cwd)
            .args(args)
            .stdin(stdin.to_vec())
            .env("STINT_PROFILE", &profile_template(&profiles, "busybox"))
            .run();
        assert!(
            want.same_behaviour(&got),
            "busybox {}: {}",
            args.join(" "),
            describe_difference("original", &want, "rewritten", &got)
        );
        let files = dir_entries(&profiles);
        assert_eq!(files.len(), 1, "busybox {}: profiles {files:?}", args.join(" "));
        report_json(&profiles.join(&files[0]))
    }

    /// Lines in a fixed pseudo-random order.
    fn lines() -> Vec<u8> {
        let mut x: u32 = 12345;
        let mut v = Vec::new();
        for i in 0..2000 {
            x = x.wrapping_mul(1103515245).wrapping_add(12345);
            v.extend(format!("{:08x} line {i}\n", x >> 3).bytes());
        }
        v
    }

    /// (function, calls) of the main thread, sorted.
    fn counts(r: &Value) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = main_thread(r)["functions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| (f["name"].as_str().unwrap_or("").to_string(), f["calls"].as_u64().unwrap_or(0)))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn sort_same_output_and_calls_twice() {
        let a = compare(&["sort"], &lines());
        if a.is_null() {
            return;
        }
        let b = compare(&["sort"], &lines());
        let (ca, cb) = (counts(&a), counts(&b));
        assert!(ca.len() > 20, "busybox sort: only {} functions counted", ca.len());
        assert!(
            total_calls(main_thread(&a)) > 2000,
            "busybox sort of 2000 lines: {} calls",
            total_calls(main_thread(&a))
        );
        assert_eq!(ca, cb, "busybox sort: the calls per function differ between two runs on the same input");
    }

    #[test]
    fn md5sum_same_output() {
        let r = compare(&["md5sum", "input.txt"], b"");
        if !r.is_null() {
            assert_eq!(threads(&r).len(), 1, "busybox md5sum: threads");
        }
    }

    #[test]
    fn sh_loop_same_output() {
        let script =
            "i=0; s=0; while [ $i -lt 300 ]; do i=$((i+1)); s=$((s+i)); done; echo $s; echo to-stderr >&2; exit 4";
        let r = compare(&["sh", "-c", script], b"");
        if !r.is_null() {
            assert!(total_calls(main_thread(&r)) > 300, "busybox sh: {} calls", total_calls(main_thread(&r)));
        }
    }
}

/// A static Go program is refused with one line: Go's runtime switches stacks and runs its
/// own threads.
#[test]
fn go_program_is_refused() {
    if have_tool("go", "golang-go").is_none() {
        return;
    }
    let _share = cpu_share();
    let dir = fresh_dir("statics-go");
    std::fs::write(
        dir.join("main.go"),
        "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"hi\\n\") }\n",
    )
    .unwrap();
    let prog = dir.join("prog");
    let mut cmd = std::process::Command::new("go");
    cmd.args(["build", "-o", path_str(&prog), "main.go"])
        .current_dir(&dir)
        .env("CGO_ENABLED", "0")
        .env("GO111MODULE", "off");
    if std::env::var_os("HOME").is_none() {
        cmd.env("GOCACHE", dir.join("cache"));
    }
    let o = cmd.output().expect("go build");
    assert!(o.status.success(), "go build: {}", String::from_utf8_lossy(&o.stderr));
    let out = dir.join("prog.stint");
    let r = stint(&["rewrite", path_str(&prog), "-o", path_str(&out)]);
    assert_eq!(r.status, 2, "stint rewrite of a Go program: {r:?}");
    let err = r.stderr_str();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("prog") && err.contains("Go program") && err.contains("stacks"), "{err}");
    assert!(!out.exists(), "no output file for a refused program");
    let left: Vec<String> = dir_entries(&dir).into_iter().filter(|f| f.starts_with("prog.")).collect();
    assert!(left.is_empty(), "no output or temporary file for a refused program: {left:?}");
}
