//! `stint export`: real rewritten test programs exported to every format, each read back by
//! a real consumer where one installs from the registries, and its figures compared with
//! `stint report --format json` of the same profile (exact calls; times equal after the unit
//! conversion) and its names with `nm`.
//!
//! Two runs serve every test (once per test process): `calltree.c` (one thread, known calls,
//! recursion) with the default spec, and `locks_mutex.c` (three threads, one mutex wait)
//! with the default spec plus `state_trace` on, so its timeline has state slices.
//!
//! | test | what it checks |
//! | --- | --- |
//! | `pprof_calls_per_function_as_go_tool_pprof_lists_them` | `go tool pprof -top -sample_index=calls`: every function of calltree with the report's calls; `-raw`: locations at the `nm` addresses |
//! | `pprof_cpu_and_wall_equal_the_report` | locks_mutex, `-sample_index=cpu`/`wall -unit=ns`: cum per function = the report's ns summed over threads |
//! | `pprof_thread_label_per_thread` | `go tool pprof -tags`: one `thread` label value per thread of the report |
//! | `perfetto_decodes_with_the_published_schema` | the trace decodes with `perfetto_trace.proto` (PyPI `perfetto`, python protobuf): a process track, one thread track per thread, the mutex wait as a `lock` slice naming the object's address from the report |
//! | `chrome_json_has_every_thread_and_the_wait` | thread_name per tid of the report; the waiter's `lock` slice names the mutex |
//! | `firefox_processed_format` | `meta.preprocessedProfileVersion` 55, one thread per thread, CPU weights summing to the report's CPU ns |
//! | `folded_calls_equal_the_report` | calltree `--weight calls`: per function the sum of its leaf lines = the report's calls |
//! | `folded_cpu_cum_equals_the_report` | locks_mutex `--weight cpu`: per thread and function the lines through it sum to the report's cpu_ns |
//! | `svg_names_every_function` | calltree's flame graph has a frame for every function `nm` names and the report lists |
//! | `stdout_and_default_name` | `-o -` prints what the default file (`<profile>.folded` in the cwd) holds |
//! | `corrupt_profile_exits_2_without_output` | a truncated profile: exit 2, one line naming the file, no output file |

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::common::*;

/// The PyPI package whose wheel carries the published Perfetto trace schema (as the
/// serialized descriptor inside its generated `perfetto_trace_pb2.py`).
const PERFETTO_PYPI: &str = "perfetto==0.59.1";

/// A run of a rewritten test program: its directory and profile.
struct Case {
    dir: PathBuf,
    profile: PathBuf,
    report: serde_json::Value,
    nm: BTreeMap<String, u64>,
}

fn run_case(name: &str, spec: Option<&str>) -> Case {
    let _share = cpu_share();
    let p = program(name);
    let bin = build(&p, Variant::PieO2);
    let dir = fresh_dir(&format!("export-{name}"));
    let out = dir.join(name);
    match spec {
        None => rewrite(&bin, &out),
        Some(text) => {
            let spec = dir.join("spec.yaml");
            std::fs::write(&spec, text).unwrap();
            let o = stint(&["rewrite", path_str(&bin), "-o", path_str(&out), "--spec", path_str(&spec), "-q"]);
            assert!(o.status == 0, "rewrite {name} --spec: {o:?}");
        }
    }
    let original = Run::new(&bin, &dir).args(&p.args).env("STINT_PROFILE", "").run();
    let o = Run::new(&out, &dir).args(&p.args).env("STINT_PROFILE", &profile_template(&dir, name)).run();
    assert!(o.same_behaviour(&original), "{name}: {}", describe_difference("original", &original, "rewritten", &o));
    let profile = dir.join(format!("{name}.{}.stint", o.pid));
    assert!(profile.is_file(), "{}: missing; {:?}", profile.display(), dir_entries(&dir));
    let report = report_json(&profile);
    Case { dir, profile, report, nm: symbols(&p, Variant::PieO2) }
}

fn calltree() -> &'static Case {
    static C: OnceLock<Case> = OnceLock::new();
    C.get_or_init(|| run_case("calltree", None))
}

/// locks_mutex with the default spec and `state_trace` on at start.
fn locks() -> &'static Case {
    static C: OnceLock<Case> = OnceLock::new();
    C.get_or_init(|| {
        let default =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../specs/default.yaml")).unwrap();
        let mut spec: serde_yaml_ng::Value = serde_yaml_ng::from_str(&default).unwrap();
        let metrics = spec["metrics"].as_sequence_mut().expect("default spec: metrics");
        let st = metrics.iter_mut().find(|m| m["name"] == "state_trace").expect("default spec: state_trace");
        st["on_at_start"] = true.into();
        run_case("locks_mutex", Some(&serde_yaml_ng::to_string(&spec).unwrap()))
    })
}

/// `stint export PROFILE --format F ARGS… -o OUT -q`, which must succeed; OUT's bytes.
fn export(c: &Case, format: &str, extra: &[&str]) -> Vec<u8> {
    let out = c.dir.join(format!("out.{format}.{}", extra.join("")));
    let mut args = vec!["export", path_str(&c.profile), "--format", format, "-o", path_str(&out), "-q"];
    args.extend_from_slice(extra);
    let o = stint(&args);
    assert!(o.status == 0 && o.stderr.is_empty(), "stint {args:?}: {o:?}");
    std::fs::read(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()))
}

/// A function row of the report: (calls, cpu_ns, wall_ns).
type Row = (u64, Option<u64>, Option<u64>);

/// The report's (thread tid, function) → row.
fn report_rows(r: &serde_json::Value) -> BTreeMap<(u64, String), Row> {
    let mut m = BTreeMap::new();
    for t in threads(r) {
        for f in t["functions"].as_array().unwrap() {
            m.insert(
                (t["tid"].as_u64().unwrap(), f["name"].as_str().unwrap().to_owned()),
                (f["calls"].as_u64().unwrap(), f["cpu_ns"].as_u64(), f["wall_ns"].as_u64()),
            );
        }
    }
    m
}

/// Sums per function name over the threads of the report.
fn by_name(
    r: &serde_json::Value,
    pick: impl Fn(&(u64, Option<u64>, Option<u64>)) -> Option<u64>,
) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for ((_, f), v) in report_rows(r) {
        if let Some(x) = pick(&v) {
            *m.entry(f).or_default() += x;
        }
    }
    m
}

/// `go`, or `None` (skip) outside CI when it is not installed.
fn go() -> Option<&'static str> {
    if Command::new("go").arg("version").output().is_ok_and(|o| o.status.success()) {
        return Some("go");
    }
    assert!(!under_ci(), "go: missing under CI; .ci/run must `apt-get install golang-go`");
    eprintln!("\n!!!!!!!!!! SKIPPED: go is not installed (apt-get install golang-go); this test checks nothing here !!!!!!!!!!\n");
    None
}

/// `go tool pprof ARGS FILE`'s stdout.
fn pprof(go: &str, file: &Path, args: &[&str]) -> String {
    let mut a = vec!["tool", "pprof"];
    a.extend_from_slice(args);
    a.push(path_str(file));
    // pprof keeps fetched profiles under $HOME/pprof unless PPROF_TMPDIR says otherwise.
    let o = Command::new(go).args(&a).env("PPROF_TMPDIR", file.parent().unwrap()).output().unwrap();
    assert!(o.status.success(), "go {a:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// The rows of `pprof -top`: name → (flat, cum), values with their unit suffix removed.
fn top_rows(text: &str, unit: &str) -> BTreeMap<String, (u64, u64)> {
    let mut m = BTreeMap::new();
    let mut table = false;
    for line in text.lines() {
        if line.trim_start().starts_with("flat") {
            table = true;
            continue;
        }
        if !table {
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        assert!(w.len() >= 6, "pprof -top row: {line:?}");
        let num =
            |s: &str| s.strip_suffix(unit).unwrap_or(s).parse::<u64>().unwrap_or_else(|_| panic!("{s:?} in {line:?}"));
        m.insert(w[5..].join(" "), (num(w[0]), num(w[3])));
    }
    m
}

#[test]
fn pprof_calls_per_function_as_go_tool_pprof_lists_them() {
    let Some(go) = go() else { return };
    let c = calltree();
    let file = c.dir.join("calls.pb.gz");
    std::fs::write(&file, export(c, "pprof", &[])).unwrap();
    let top = top_rows(&pprof(go, &file, &["-top", "-nodecount=10000", "-nodefraction=0", "-sample_index=calls"]), "");
    let flat: BTreeMap<String, u64> = top.iter().map(|(k, v)| (k.clone(), v.0)).collect();
    let want = by_name(&c.report, |v| Some(v.0).filter(|&n| n != 0));
    assert_eq!(flat, want, "pprof -top flat calls vs the report");
    assert_eq!(flat.get("leaf"), Some(&60));
    assert_eq!(flat.get("fib"), Some(&1973));
    // Locations sit at the functions' addresses as nm has them.
    let raw = pprof(go, &file, &["-raw"]);
    let locs = raw.split_once("Locations\n").expect("pprof -raw: Locations").1;
    let mut checked = 0;
    for line in locs.lines().take_while(|l| !l.starts_with("Mappings")) {
        let w: Vec<&str> = line.split_whitespace().collect();
        let (Some(addr), Some(name)) = (w.get(1), w.get(3)) else { continue };
        if let Some(&a) = c.nm.get(*name) {
            assert_eq!(*addr, hex(a), "{name}: {line}");
            checked += 1;
        }
    }
    assert!(checked >= 8, "only {checked} locations named by nm:\n{locs}");
}

#[test]
fn pprof_cpu_and_wall_equal_the_report() {
    let Some(go) = go() else { return };
    let c = locks();
    let file = c.dir.join("times.pb.gz");
    std::fs::write(&file, export(c, "pprof", &[])).unwrap();
    for (index, pick) in [("cpu", 1), ("wall", 2)] {
        let top = top_rows(
            &pprof(
                go,
                &file,
                &["-top", "-nodecount=10000", "-nodefraction=0", "-unit=ns", &format!("-sample_index={index}")],
            ),
            "ns",
        );
        let cum: BTreeMap<String, u64> = top.iter().map(|(k, v)| (k.clone(), v.1)).filter(|x| x.1 != 0).collect();
        let want = by_name(&c.report, |v| if pick == 1 { v.1 } else { v.2 }.filter(|&n| n != 0));
        // Per call path the ticks become ns on their own, so a function's cum (a sum over its
        // paths) may differ from the report's one conversion by a ns per path. A function the
        // report cannot time (`_start`, still open) has a cum from its callees.
        for (f, &n) in &want {
            let got = cum.get(f).copied().unwrap_or(0);
            assert!(
                got.abs_diff(n) <= 10,
                "pprof -top -sample_index={index}: {f} cum {got} vs the report's {n}: {cum:?}"
            );
        }
        assert!(["main", "holder", "waiter"].iter().all(|f| cum.contains_key(*f)), "{cum:?}");
    }
}

#[test]
fn pprof_thread_label_per_thread() {
    let Some(go) = go() else { return };
    let c = locks();
    let file = c.dir.join("tags.pb.gz");
    std::fs::write(&file, export(c, "pprof", &[])).unwrap();
    let text = pprof(go, &file, &["-tags", "-sample_index=calls"]);
    let section = text.split_once("thread:").expect("pprof -tags: thread").1;
    let tids: BTreeSet<String> = threads(&c.report).iter().map(|t| t["tid"].to_string()).collect();
    let labelled: BTreeSet<String> =
        section.lines().filter_map(|l| l.rsplit_once('(')?.1.strip_suffix(')').map(str::to_owned)).collect();
    assert_eq!(labelled, tids, "pprof -tags:\n{text}");
}

/// A Python with `google.protobuf` (Debian's python3-protobuf), or `None` (skip) outside CI.
fn python_with_protobuf() -> Option<&'static str> {
    for py in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(py).args(["-c", "import google.protobuf"]).output().is_ok_and(|o| o.status.success());
        if ok {
            return Some(py);
        }
    }
    assert!(
        !under_ci(),
        "python3 with protobuf: missing under CI; .ci/run must `apt-get install python3-protobuf python3-pip`"
    );
    eprintln!("\n!!!!!!!!!! SKIPPED: no python3 with protobuf (apt-get install python3-protobuf); this test checks nothing here !!!!!!!!!!\n");
    None
}

/// Decodes a trace with the schema of the `perfetto` wheel (argv: wheel, trace) and prints
/// a JSON summary: process and thread tracks, slices per track, counter values.
const DECODE_PERFETTO: &str = r#"
import ast, json, sys, zipfile
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
wheel, trace = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    src = z.read('perfetto/protos/perfetto/trace/perfetto_trace_pb2.py').decode()
blob = next(ast.literal_eval(n.args[0]) for n in ast.walk(ast.parse(src))
            if isinstance(n, ast.Call) and getattr(n.func, 'attr', '') == 'AddSerializedFile')
fd = descriptor_pb2.FileDescriptorProto.FromString(blob)
assert fd.name.endswith('perfetto_trace.proto'), fd.name
pool = descriptor_pool.DescriptorPool()
pool.Add(fd)
Trace = message_factory.MessageFactory(pool).GetPrototype(pool.FindMessageTypeByName('perfetto.protos.Trace'))
t = Trace.FromString(open(trace, 'rb').read())
out = {'processes': [], 'threads': [], 'slices': [], 'counters': []}
tid_of = {}
for p in t.packet:
    if p.HasField('track_descriptor'):
        d = p.track_descriptor
        if d.HasField('process'):
            out['processes'].append([d.process.pid, d.process.process_name])
        if d.HasField('thread'):
            out['threads'].append([d.thread.tid, d.thread.thread_name])
            tid_of[d.uuid] = d.thread.tid
    if p.HasField('track_event'):
        e = p.track_event
        if e.type == 1:
            out['slices'].append([tid_of.get(e.track_uuid), e.name, list(e.categories), p.timestamp])
        if e.type == 4:
            out['counters'].append(e.counter_value)
print(json.dumps(out))
"#;

#[test]
fn perfetto_decodes_with_the_published_schema() {
    let Some(py) = python_with_protobuf() else { return };
    let c = locks();
    let trace = c.dir.join("trace.pftrace");
    std::fs::write(&trace, export(c, "perfetto", &[])).unwrap();
    let wheels = fresh_dir("export-perfetto-wheel");
    let o = Command::new(py)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-q",
            "-d",
            path_str(&wheels),
            PERFETTO_PYPI,
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "pip download {PERFETTO_PYPI}: {}", String::from_utf8_lossy(&o.stderr));
    let wheel = wheels.join(dir_entries(&wheels).into_iter().find(|f| f.ends_with(".whl")).expect("a wheel"));
    let script = c.dir.join("decode_perfetto.py");
    std::fs::write(&script, DECODE_PERFETTO).unwrap();
    let o = Command::new(py).args([path_str(&script), path_str(&wheel), path_str(&trace)]).output().unwrap();
    assert!(o.status.success(), "decode: {}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pid = c.report["pid"].as_u64().unwrap();
    assert_eq!(v["processes"], serde_json::json!([[pid, "locks_mutex"]]));
    let tids: Vec<u64> = v["threads"].as_array().unwrap().iter().map(|t| t[0].as_u64().unwrap()).collect();
    let want: Vec<u64> = threads(&c.report).iter().map(|t| t["tid"].as_u64().unwrap()).collect();
    assert_eq!(tids, want, "one thread track per thread");
    // The waiter blocked on m: a lock slice on its track naming the object's address.
    let mutex = c.report["objects"].as_array().unwrap().iter().find(|o| o["kind"] == "mutex").expect("a mutex object");
    let name = format!("mutex {}", mutex["address"].as_str().unwrap());
    let locks: Vec<&serde_json::Value> =
        v["slices"].as_array().unwrap().iter().filter(|s| s[2] == serde_json::json!(["lock"])).collect();
    assert!(locks.iter().any(|s| s[1] == name.as_str()), "no lock slice {name:?}: {locks:?}");
    let waiter = threads(&c.report).iter().find(|t| t["first_function"] == "waiter").unwrap()["tid"].as_u64().unwrap();
    assert!(locks.iter().any(|s| s[0] == waiter), "no lock slice on the waiter {waiter}: {locks:?}");
    assert!(v["counters"].as_array().unwrap().iter().any(|n| n == 1), "blocked-threads counter: {v}");
}

#[test]
fn chrome_json_has_every_thread_and_the_wait() {
    let c = locks();
    let v: serde_json::Value = serde_json::from_slice(&export(c, "chrome", &[])).unwrap();
    let evs = v["traceEvents"].as_array().unwrap();
    let tids: BTreeSet<u64> =
        evs.iter().filter(|e| e["name"] == "thread_name").map(|e| e["tid"].as_u64().unwrap()).collect();
    let want: BTreeSet<u64> = threads(&c.report).iter().map(|t| t["tid"].as_u64().unwrap()).collect();
    assert_eq!(tids, want);
    let waiter = threads(&c.report).iter().find(|t| t["first_function"] == "waiter").unwrap();
    let wait = evs
        .iter()
        .find(|e| e["cat"] == "lock" && e["tid"] == waiter["tid"])
        .unwrap_or_else(|| panic!("no lock wait of the waiter: {v}"));
    assert!(wait["name"].as_str().unwrap().starts_with("mutex 0x"), "{wait}");
    // The holder sleeps 200 ms holding m: the wait is most of that.
    let ms = wait["dur"].as_f64().unwrap() / 1000.0;
    assert!((100.0..10_000.0).contains(&ms), "waiter's wait {ms} ms");
}

#[test]
fn firefox_processed_format() {
    let c = locks();
    let v: serde_json::Value = serde_json::from_slice(&export(c, "firefox", &["--weight", "cpu"])).unwrap();
    assert_eq!(v["meta"]["preprocessedProfileVersion"], 55);
    assert_eq!(v["meta"]["product"], "locks_mutex");
    let fx = v["threads"].as_array().unwrap();
    assert_eq!(fx.len(), threads(&c.report).len());
    let interval_ns = (v["meta"]["interval"].as_f64().unwrap() * 1e6).round() as u64;
    for t in threads(&c.report) {
        let tid = t["tid"].to_string();
        let f =
            fx.iter().find(|x| x["tid"] == tid.as_str() || x["tid"] == t["tid"]).unwrap_or_else(|| panic!("tid {tid}"));
        let total: u64 = f["samples"]["weight"].as_array().unwrap().iter().map(|w| w.as_u64().unwrap()).sum();
        // With call paths the self weights sum to the inclusive time of the thread's
        // outermost timed function (the largest); each sample's weight is rounded down to the
        // interval, and each path's ns converted on its own.
        let cpu: u64 =
            t["functions"].as_array().unwrap().iter().filter_map(|f| f["cpu_ns"].as_u64()).max().unwrap_or(0);
        let n = f["samples"]["length"].as_u64().unwrap();
        assert!(
            total * interval_ns <= cpu + n && cpu < (total + n) * interval_ns + n,
            "tid {tid}: {total} × {interval_ns} vs {cpu}"
        );
    }
    let markers: u64 = fx.iter().map(|t| t["markers"]["length"].as_u64().unwrap()).sum();
    assert!(markers >= 1, "no lock-wait marker");
}

/// Folded lines: (thread, frames root first, value).
fn folded(bytes: &[u8]) -> Vec<(String, Vec<String>, u64)> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(|l| {
            let (stack, v) = l.rsplit_once(' ').unwrap_or_else(|| panic!("{l:?}"));
            let mut frames: Vec<String> = stack.split(';').map(str::to_owned).collect();
            let thread = frames.remove(0);
            (thread, frames, v.parse().unwrap_or_else(|_| panic!("{l:?}")))
        })
        .collect()
}

#[test]
fn folded_calls_equal_the_report() {
    let c = calltree();
    let mut leaf: BTreeMap<String, u64> = BTreeMap::new();
    for (_, frames, v) in folded(&export(c, "folded", &["--weight", "calls"])) {
        *leaf.entry(frames.last().unwrap().clone()).or_default() += v;
    }
    assert_eq!(leaf, by_name(&c.report, |v| Some(v.0).filter(|&n| n != 0)));
}

#[test]
fn folded_cpu_cum_equals_the_report() {
    let c = locks();
    let lines = folded(&export(c, "folded", &["--weight", "cpu"]));
    for t in threads(&c.report) {
        let label = lines.iter().map(|l| &l.0).find(|l| l.ends_with(&format!("({})", t["tid"]))).cloned();
        for f in t["functions"].as_array().unwrap() {
            let Some(cpu) = f["cpu_ns"].as_u64().filter(|&n| n != 0) else { continue };
            let name = f["name"].as_str().unwrap();
            let label = label.as_ref().unwrap_or_else(|| panic!("no lines of thread {}", t["tid"]));
            let cum: u64 = lines.iter().filter(|l| &l.0 == label && l.1.iter().any(|x| x == name)).map(|l| l.2).sum();
            // Each path's ns are converted on their own: a ns per path of difference.
            assert!(cum.abs_diff(cpu) <= 10, "thread {label} {name}: {cum} vs {cpu}");
        }
    }
}

#[test]
fn svg_names_every_function() {
    let c = calltree();
    let svg = String::from_utf8(export(c, "svg", &["--weight", "calls"])).unwrap();
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
    let names = by_name(&c.report, |v| Some(v.0));
    let mut checked = 0;
    for name in names.keys().filter(|n| c.nm.contains_key(*n)) {
        assert!(svg.contains(&format!("<title>{name} (")), "{name} missing from the flame graph");
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} functions checked");
}

#[test]
fn stdout_and_default_name() {
    let c = calltree();
    let cwd = fresh_dir("export-default-name");
    let o =
        Run::new(stint_bin(), &cwd).args(["export", path_str(&c.profile), "-f", "folded", "--weight", "calls"]).run();
    assert!(o.status == 0, "{o:?}");
    let stem = c.profile.file_name().unwrap().to_str().unwrap().strip_suffix(".stint").unwrap();
    let file = cwd.join(format!("{stem}.folded"));
    assert_eq!(dir_entries(&cwd), vec![format!("{stem}.folded")]);
    let o = stint(&["export", path_str(&c.profile), "-f", "folded", "--weight", "calls", "-o", "-"]);
    assert!(o.status == 0 && !o.stdout.is_empty(), "{o:?}");
    assert_eq!(o.stdout, std::fs::read(&file).unwrap());
}

#[test]
fn corrupt_profile_exits_2_without_output() {
    let c = calltree();
    let dir = fresh_dir("export-corrupt");
    let bad = dir.join("bad.stint");
    let bytes = std::fs::read(&c.profile).unwrap();
    std::fs::write(&bad, &bytes[..bytes.len() / 3]).unwrap();
    for format in ["pprof", "perfetto", "chrome", "firefox", "folded", "svg"] {
        let out = dir.join(format!("out.{format}"));
        let o = stint(&["export", path_str(&bad), "-f", format, "-o", path_str(&out)]);
        assert_eq!(o.status, 2, "{format}: {o:?}");
        let err = o.stderr_str();
        assert!(err.starts_with(&format!("{}: ", bad.display())) && err.lines().count() == 1, "{format}: {err:?}");
        assert_eq!(dir_entries(&dir), vec!["bad.stint".to_owned()], "{format}: output left behind");
    }
}
