//! Names from separate debug info (issue 11): `testbins/names/big_lock.c` is built with `-g`,
//! split with `objcopy --only-keep-debug` into a stripped program and its `.debug` file, and
//! each stripped program is rewritten and run once. Its report, read with the debug file
//! found by build-id (under a test-made `STINT_DEBUG_ROOT`), by `.gnu_debuglink` (next to
//! the program), through a real `debuginfod` serving a local directory on 127.0.0.1, or
//! named with `--symbols`, must name every function and every lock exactly as the report of
//! the unstripped build does; without the debug info, the same profile shows `sub_<hex>`
//! (so the comparison is not vacuous).
//!
//! Lock objects: the global `big_lock` and the mutex at offset 0x20 of the global `table`
//! are named `big_lock` and `table+0x20`; the `pthread_t` objects of `pthread_join` name the
//! thread they joined (its tid and name).
//!
//! Every report runs with `DEBUGINFOD_URLS` removed and `STINT_DEBUG_ROOT` pointing at an
//! empty directory unless the test sets them, so the machine's `/usr/lib/debug` and servers
//! play no part. A missing `debuginfod` skips its test loudly outside CI and fails it under
//! CI (`.ci/run` installs the `debuginfod` package).

use crate::common::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const WORKERS: u64 = 4;
const ROUNDS: u64 = 2000;

/// The unstripped build, its debug file and its build-id.
struct Built {
    full: PathBuf,
    debug: PathBuf,
    build_id: String,
}

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let dir = fresh_dir("names-build");
        let src = testbins_dir().join("names").join("big_lock.c");
        let full = dir.join("big_lock");
        let flags = ["-O2", "-g", "-fPIE", "-pie", "-pthread", "-Wall", "-Werror", "-Wl,--build-id"];
        let mut args: Vec<&str> = flags.to_vec();
        args.extend([path_str(&src), "-o", path_str(&full)]);
        tool("gcc", &args);
        let debug = dir.join("big_lock.debug");
        tool("objcopy", &["--only-keep-debug", path_str(&full), path_str(&debug)]);
        let data = std::fs::read(&full).expect("read the build");
        let file = object::File::parse(&*data).expect("the build is ELF");
        let id = object::Object::build_id(&file).expect("notes").expect("gcc -Wl,--build-id gives a build-id");
        let build_id = id.iter().map(|b| format!("{b:02x}")).collect();
        Built { full, debug, build_id }
    })
}

/// A stripped copy of the build in a directory of its own; with `link`, it gets a
/// `.gnu_debuglink` and the debug file lies next to it. The file keeps the name `big_lock`.
fn stripped(label: &str, link: bool) -> PathBuf {
    let b = built();
    let dir = fresh_dir(label);
    let out = dir.join("big_lock");
    let debuglink = format!("--add-gnu-debuglink={}", path_str(&b.debug));
    let mut args = vec!["--strip-all"];
    if link {
        args.push(&debuglink);
    }
    args.extend([path_str(&b.full), path_str(&out)]);
    tool("objcopy", &args);
    if link {
        std::fs::copy(&b.debug, dir.join("big_lock.debug")).expect("copy the debug file");
    }
    assert!(!text_symbols(&out).contains_key("crunch"), "{}: still has symbols", out.display());
    out
}

/// Rewrite `bin` and run it once: its profile.
fn profile_of(bin: &Path) -> PathBuf {
    let _share = cpu_share();
    let dir = bin.parent().expect("a directory");
    let out = dir.join("big_lock.stint");
    rewrite(bin, &out);
    let profiles = dir.join("profiles");
    std::fs::create_dir_all(&profiles).expect("profile directory");
    let o = Run::new(&out, dir).env(stint_layout::ENV_PROFILE, &profile_template(&profiles, "big_lock")).run();
    assert_eq!((o.status, o.stdout_str()), (0, format!("total {}\n", WORKERS * ROUNDS)), "{o:?}");
    let files = dir_entries(&profiles);
    assert_eq!(files.len(), 1, "{}: {files:?}", profiles.display());
    profiles.join(&files[0])
}

/// The profiles of the unstripped build, the stripped one without a link and the stripped
/// one with a link (each run once per test process).
fn unstripped_profile() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| profile_of(&built().full))
}

fn stripped_profile() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| profile_of(&stripped("names-stripped", false)))
}

fn linked_profile() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| profile_of(&stripped("names-linked", true)))
}

/// `stint report PROFILE ARGS` isolated from this machine's debug info, with `env` added.
fn report(profile: &Path, args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let empty = fresh_dir("names-empty-root");
    let mut all = vec!["report", path_str(profile)];
    all.extend(args);
    let mut r = Run::new(stint_bin(), run_root())
        .args(all)
        .without("DEBUGINFOD_URLS")
        .without("DEBUGINFOD_CACHE_PATH")
        .env("STINT_DEBUG_ROOT", path_str(&empty))
        .timeout(Duration::from_secs(120));
    for (k, v) in env {
        r = r.env(k, v);
    }
    let o = r.run();
    assert_eq!(o.status, 0, "stint report {}: {o:?}", args.join(" "));
    o
}

fn report_json_with(profile: &Path, args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let mut all = vec!["--format", "json"];
    all.extend(args);
    let o = report(profile, &all, env);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {o:?}"))
}

/// What a report names: (thread name, function, calls) of every function row, and (kind,
/// name) of every sync object (names of thread objects without their tids, which differ
/// from run to run).
type Names = (BTreeSet<(String, String, u64)>, BTreeSet<(String, String)>);

fn names(r: &serde_json::Value) -> Names {
    let mut functions = BTreeSet::new();
    for t in threads(r) {
        let tname = t["name"].as_str().unwrap_or("-").to_owned();
        for f in field(t, "functions", "thread").as_array().expect("functions") {
            let name = f["name"].as_str().expect("function name").to_owned();
            functions.insert((tname.clone(), name, f["calls"].as_u64().expect("calls")));
        }
    }
    let mut objects = BTreeSet::new();
    for o in field(r, "objects", "report").as_array().expect("objects") {
        let kind = o["kind"].as_str().expect("kind").to_owned();
        let name = o["name"].as_str().unwrap_or("-");
        let name = match kind.as_str() {
            // `thread 1235 worker-1`: keep the thread's name only.
            "thread" => name.rsplit(' ').next().unwrap_or("-").to_owned(),
            _ => name.to_owned(),
        };
        objects.insert((kind, name));
    }
    (functions, objects)
}

fn function_names(n: &Names) -> BTreeSet<&str> {
    n.0.iter().map(|(_, f, _)| f.as_str()).collect()
}

/// The unstripped build's names: the reference every other test compares with.
fn reference() -> &'static Names {
    static N: OnceLock<Names> = OnceLock::new();
    N.get_or_init(|| names(&report_json_with(unstripped_profile(), &[], &[])))
}

#[test]
fn unstripped_build_names_functions_and_locks() {
    let n = reference();
    let fns = function_names(n);
    for f in ["main", "worker_main", "crunch"] {
        assert!(fns.contains(f), "{f} missing: {fns:?}");
    }
    for i in 1..=WORKERS {
        let t = format!("worker-{i}");
        assert!(n.0.contains(&(t.clone(), "crunch".into(), ROUNDS)), "{t} calls crunch {ROUNDS}: {:?}", n.0);
    }
    let mut want: BTreeSet<(String, String)> =
        [("mutex", "big_lock"), ("mutex", "table+0x20")].map(|(k, v)| (k.into(), v.into())).into();
    want.extend((1..=WORKERS).map(|i| ("thread".into(), format!("worker-{i}"))));
    assert_eq!(n.1, want);
}

#[test]
fn stripped_without_debug_info_has_no_names() {
    let n = names(&report_json_with(stripped_profile(), &[], &[]));
    let fns = function_names(&n);
    assert!(!fns.contains("crunch") && fns.iter().any(|f| f.starts_with("sub_")), "{fns:?}");
    assert!(n.1.contains(&("mutex".into(), "-".into())), "mutexes must be unnamed: {:?}", n.1);
}

#[test]
fn found_by_build_id() {
    let b = built();
    let root = fresh_dir("names-debug-root");
    let dir = root.join(".build-id").join(&b.build_id[..2]);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&b.debug, dir.join(format!("{}.debug", &b.build_id[2..]))).unwrap();
    let r = report_json_with(stripped_profile(), &[], &[("STINT_DEBUG_ROOT", path_str(&root))]);
    assert_eq!(&names(&r), reference());
}

#[test]
fn found_by_debuglink() {
    let r = report_json_with(linked_profile(), &[], &[]);
    assert_eq!(&names(&r), reference());
}

#[test]
fn debuglink_with_another_crc_is_not_used() {
    // The debug file plus one byte: still ELF with the same build-id, but not the file the
    // link names.
    let bin = stripped("names-bad-crc", true);
    let mut bytes = std::fs::read(&built().debug).unwrap();
    bytes.push(0);
    std::fs::write(bin.with_file_name("big_lock.debug"), bytes).unwrap();
    let n = names(&report_json_with(&profile_of(&bin), &[], &[]));
    let fns = function_names(&n);
    assert!(
        !fns.contains("crunch") && fns.iter().any(|f| f.starts_with("sub_")),
        "another CRC's file was used: {fns:?}"
    );
}

#[test]
fn named_with_symbols_flag() {
    let r = report_json_with(stripped_profile(), &["--symbols", path_str(&built().debug)], &[]);
    assert_eq!(&names(&r), reference());
}

#[test]
fn lock_table_names_data_symbols_and_join_targets() {
    let r = report_json_with(unstripped_profile(), &[], &[]);
    let o = report(unstripped_profile(), &["--by", "lock"], &[]);
    let text = o.stdout_str();
    for want in ["(big_lock)", "(table+0x20)"] {
        assert!(text.contains(want), "--by lock lacks {want}:\n{text}");
    }
    // Every join target is the worker thread of that pthread_t: its tid and name.
    let workers: Vec<(u64, String)> = threads(&r)
        .iter()
        .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("worker-")))
        .map(|t| (t["tid"].as_u64().unwrap(), t["name"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(workers.len() as u64, WORKERS);
    let joined: Vec<&serde_json::Value> =
        field(&r, "objects", "report").as_array().unwrap().iter().filter(|o| o["kind"] == "thread").collect();
    assert_eq!(joined.len() as u64, WORKERS, "{joined:?}");
    for o in joined {
        let tids = o["threads"].as_array().unwrap_or_else(|| panic!("no threads: {o}"));
        assert_eq!(tids.len(), 1, "{o}");
        let (tid, name) = workers.iter().find(|(t, _)| tids[0] == *t).unwrap_or_else(|| panic!("{o}: not a worker"));
        assert_eq!(o["name"], format!("thread {tid} {name}"));
        let line = format!("(thread {tid} {name})");
        assert!(text.contains(&line), "--by lock lacks {line}:\n{text}");
    }
}

/// Each thread's waits name the function that made its longest call: worker_main for the
/// workers' big_lock, read_shared for main's (big_lock's first user is worker_main), main for
/// the joins; with the names from debug info in the stripped build too.
#[test]
fn waits_name_their_caller() {
    for (what, r) in [
        ("unstripped", report_json_with(unstripped_profile(), &[], &[])),
        ("stripped --symbols", report_json_with(stripped_profile(), &["--symbols", path_str(&built().debug)], &[])),
    ] {
        let mut seen = Vec::new();
        for t in threads(&r) {
            let tname = t["name"].as_str().unwrap_or("-");
            let main = t["tid"] == r["pid"];
            for w in t["waits"].as_array().unwrap() {
                let caller = w["longest_wait_in"].as_str().unwrap_or_else(|| panic!("{what}: {tname}: {w}"));
                let want = match (main, w["object_name"].as_str(), w["kind"].as_str()) {
                    (true, Some("big_lock"), _) => "read_shared",
                    (true, _, Some("thread")) => "main",
                    (false, Some("big_lock" | "table+0x20"), _) => "worker_main",
                    _ => panic!("{what}: unexpected wait of {tname}: {w}"),
                };
                assert_eq!(caller, want, "{what}: {tname}: {w}");
                assert!(w["longest_wait_ns"].as_u64().is_some_and(|ns| Some(ns) <= w["wait_ns"].as_u64()), "{w}");
                seen.push((main, w["object_name"].as_str().unwrap_or("-").to_owned(), w["count"].as_u64().unwrap()));
            }
        }
        // big_lock: ROUNDS calls by each worker, one by main.
        let big: u64 = seen.iter().filter(|(m, n, _)| !m && n == "big_lock").map(|(_, _, c)| c).sum();
        assert_eq!(big, WORKERS * ROUNDS, "{what}");
        assert!(seen.contains(&(true, "big_lock".into(), 1)), "{what}: {seen:?}");
    }
}

/// A `debuginfod -F DIR` on 127.0.0.1, stopped (by its pid) when dropped.
struct Debuginfod {
    child: Child,
    url: String,
}

impl Drop for Debuginfod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` on 127.0.0.1:port: the HTTP status, if the server answered.
fn http_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// Serve `dir` until build-id `id` is indexed; `None` (skipped) if debuginfod is missing
/// outside CI.
fn debuginfod(dir: &Path, id: &str) -> Option<Debuginfod> {
    if Command::new("debuginfod").arg("--version").output().is_err() {
        if under_ci() {
            panic!("debuginfod: missing under CI; .ci/run must `apt-get install debuginfod`");
        }
        eprintln!("\n!!!!!!!!!! SKIPPED: debuginfod is not installed (apt-get install debuginfod); this test checks nothing here !!!!!!!!!!\n");
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let db = dir.parent().unwrap().join("debuginfod.sqlite");
    let child = Command::new("debuginfod")
        .args(["-F", path_str(dir), "-p", &port.to_string(), "-d", path_str(&db)])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start debuginfod");
    let server = Debuginfod { child, url: format!("http://127.0.0.1:{port}") };
    let start = Instant::now();
    while http_status(port, &format!("/buildid/{id}/debuginfo")) != Some(200) {
        assert!(start.elapsed() < Duration::from_secs(60), "debuginfod on port {port} did not serve {id} within 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    Some(server)
}

#[test]
fn found_through_debuginfod() {
    let b = built();
    let serve = fresh_dir("names-debuginfod").join("served");
    std::fs::create_dir_all(&serve).unwrap();
    std::fs::copy(&b.debug, serve.join("big_lock.debug")).unwrap();
    let Some(server) = debuginfod(&serve, &b.build_id) else { return };
    let cache = fresh_dir("names-debuginfod-cache");
    let url = server.url.clone();
    let env = [("DEBUGINFOD_URLS", url.as_str()), ("DEBUGINFOD_CACHE_PATH", path_str(&cache))];
    let r = report_json_with(stripped_profile(), &[], &env);
    assert_eq!(&names(&r), reference());
    assert!(cache.join(&b.build_id).join("debuginfo").is_file(), "not cached: {:?}", dir_entries(&cache));
    // --no-debuginfod asks no server (the cache is the server's: it is not read either).
    let off = report_json_with(stripped_profile(), &["--no-debuginfod"], &env);
    assert!(!function_names(&names(&off)).contains("crunch"));
    // With the server gone, the cache still names them.
    drop(server);
    let again = report_json_with(stripped_profile(), &[], &env);
    assert_eq!(&names(&again), reference());
}

#[test]
fn unreachable_debuginfod_is_a_warning() {
    // A port nothing listens on: the report still succeeds, says why names are missing.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let cache = fresh_dir("names-unreachable-cache");
    let o = report(stripped_profile(), &[], &[("DEBUGINFOD_URLS", &url), ("DEBUGINFOD_CACHE_PATH", path_str(&cache))]);
    let text = o.stdout_str();
    assert!(text.contains(&format!("debuginfod {url}")), "no warning naming the server:\n{text}");
    assert!(text.contains("sub_"), "{text}");
}
