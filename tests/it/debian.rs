//! Real programs from Debian packages (installed by `.ci/run`): pigz, sqlite3 and lua5.4,
//! all stripped PIEs built by someone else's toolchain. Each is rewritten with every
//! function instrumented (the default spec), run on a workload next to the original, and
//! must behave byte for byte the same; then its profile must parse and show the threads
//! and calls such a run must have.
//!
//! A missing binary skips its test with a loud message on a developer's machine, and fails
//! it under CI (`CI=true`), where `.ci/run` installs the packages.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The binary at `path`, or None (with a loud message) when it is missing outside CI.
pub(crate) fn debian_binary(path: &str, package: &str) -> Option<PathBuf> {
    let p = PathBuf::from(path);
    if p.is_file() {
        return Some(p);
    }
    if under_ci() {
        panic!("{path}: missing under CI; .ci/run must `apt-get install {package}`");
    }
    eprintln!("\n!!!!!!!!!! SKIPPED: {path} is not installed (apt-get install {package}); this test checks nothing here !!!!!!!!!!\n");
    None
}

/// The rewritten copy of a Debian binary (once per test process), after printing the
/// coverage summary of `stint inspect --json` for the CI log.
pub(crate) fn rewritten(bin: &Path) -> PathBuf {
    let name = bin.file_name().unwrap().to_string_lossy().into_owned();
    let inspect = inspect_json(bin);
    eprintln!("{name}: stint inspect summary: {}", field(&inspect, "summary", "stint inspect --json"));
    let out = run_root().join("debian").join("rewritten").join(&name);
    rewrite(bin, &out);
    out
}

/// Run the original and the rewritten program the same way; they must behave the same.
/// Returns the original's outcome, the rewritten one's, and the rewritten run's report.
pub(crate) fn compare(
    name: &str,
    original: &Path,
    rewritten: &Path,
    args: &[&str],
    stdin: Option<Vec<u8>>,
) -> (Outcome, Outcome, serde_json::Value) {
    // The rewritten program runs as a user runs it: no STINT_* variable, the profile in the
    // default directory (D15: here a private XDG_RUNTIME_DIR of the test), never the cwd.
    let run = |bin: &Path, xdg: Option<&Path>| {
        let cwd = fresh_dir(&format!("cwd-{name}"));
        let mut r = Run::new(bin, &cwd).args(args);
        if let Some(s) = &stdin {
            r = r.stdin(s.clone());
        }
        if let Some(x) = xdg {
            r = r.env("XDG_RUNTIME_DIR", path_str(x));
        }
        let o = r.run();
        assert_eq!(dir_entries(&cwd), Vec::<String>::new(), "{name}: the cwd must stay as it was");
        o
    };
    let want = run(original, None);
    let xdg = fresh_dir(&format!("xdg-{name}"));
    std::fs::set_permissions(&xdg, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let got = run(rewritten, Some(&xdg));
    let profiles = xdg.join("stint");
    assert!(
        want.same_behaviour(&got),
        "{name} {}: the rewritten program behaves differently\n{}",
        args.join(" "),
        describe_difference("original", &want, "rewritten", &got)
    );
    let files = dir_entries(&profiles);
    let file = format!("{name}.{}.stint", got.pid);
    assert!(files == [file.clone()], "{name}: profiles {files:?}, want [{file}]");
    assert_eq!(file_mode(&profiles.join(&file)), 0o600, "{name}: profile mode");
    let report = report_json(&profiles.join(&file));
    let bad = report_invariants(&report, name, got.pid, false);
    assert!(bad.is_empty(), "{name}: report:\n  {}", bad.join("\n  "));
    let per_thread: Vec<(u64, u64)> =
        threads(&report).iter().map(|t| (t.get("tid").and_then(|x| x.as_u64()).unwrap_or(0), total_calls(t))).collect();
    eprintln!("{name} {}: {} threads, calls per thread (tid, calls): {per_thread:?}", args.join(" "), per_thread.len());
    (want, got, report)
}

/// About 20 MB of deterministic text (`corpus::text`), written once per test process.
pub(crate) fn big_text() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = fresh_dir("pigz-input").join("big.txt");
        std::fs::write(&path, crate::corpus::text(20 << 20)).expect("write big.txt");
        path
    })
}

#[test]
fn pigz_compresses_and_decompresses() {
    let _share = cpu_share();
    let Some(pigz) = debian_binary("/usr/bin/pigz", "pigz") else { return };
    let pigz_st = rewritten(&pigz);
    let input = big_text();
    let input_bytes = std::fs::read(input).unwrap();

    let (_, gz, report) = compare("pigz", &pigz, &pigz_st, &["-p", "2", "-c", input.to_str().unwrap()], None);
    let n = threads(&report).len();
    assert!(n >= 3, "pigz -p 2: {n} threads in the report, want at least 3 (main and two compressing threads)");
    for t in threads(&report) {
        assert!(total_calls(t) > 0, "pigz -p 2: a thread with no calls: {t}");
    }

    // What the rewritten pigz wrote must be a valid gzip stream of the input.
    let cwd = fresh_dir("cwd-pigz-d");
    let plain = Run::new(&pigz, &cwd).args(["-d", "-c"]).stdin(gz.stdout.clone()).run();
    assert!(plain.status == 0, "pigz -d of the rewritten pigz's output failed: {plain:?}");
    assert!(
        plain.stdout == input_bytes,
        "pigz -d of the rewritten pigz's output is not the input ({} bytes, want {})",
        plain.stdout.len(),
        input_bytes.len()
    );

    // And the rewritten pigz decompresses it too, exactly like the original.
    let (_, _, report) = compare("pigz", &pigz, &pigz_st, &["-d", "-c"], Some(gz.stdout.clone()));
    assert!(total_calls(main_thread(&report)) > 0, "pigz -d: no calls on the main thread");
}

const SQL: &str = "\
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)
INSERT INTO t SELECT i, i % 37, 'name-' || (i * 7919 % 10007), (i * 31 % 1000) / 10.0 FROM n;
CREATE TABLE g(grp INTEGER PRIMARY KEY, label TEXT);
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 36)
INSERT INTO g SELECT i, printf('group %02d', i) FROM n;
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(val), min(name), max(name), avg(grp) FROM t;
SELECT g.label, count(*), round(sum(t.val), 1) FROM t JOIN g USING (grp) GROUP BY g.label ORDER BY g.label;
SELECT id, name, val FROM t WHERE name LIKE 'name-1%' ORDER BY name, id LIMIT 300;
.mode csv
SELECT id, grp, name FROM t ORDER BY id DESC LIMIT 200;
SELECT id, grp, name, val FROM t WHERE id % 3 = 0 ORDER BY id;
.mode line
SELECT * FROM g WHERE grp < 20;
.mode list
SELECT * FROM no_such_table;
SELECT group_concat(label, ',') FROM (SELECT label FROM g ORDER BY grp DESC LIMIT 5);
";

#[test]
fn sqlite3_runs_a_script() {
    let _share = cpu_share();
    let Some(sqlite3) = debian_binary("/usr/bin/sqlite3", "sqlite3") else { return };
    let st = rewritten(&sqlite3);
    let (want, _, report) = compare("sqlite3", &sqlite3, &st, &[":memory:"], Some(SQL.as_bytes().to_vec()));
    assert!(want.stdout.len() > 5000, "sqlite3: the workload printed only {} bytes\n{want:?}", want.stdout.len());
    assert!(want.stderr_str().contains("no_such_table"), "sqlite3: the failing statement wrote no error\n{want:?}");
    let calls = total_calls(main_thread(&report));
    assert!(calls > 1000, "sqlite3: {calls} calls on the main thread, want more than 1000");
}

const LUA: &str = r#"
local t = {}
for i = 1, 2000 do t[i] = (i * 7919) % 1009 end
table.sort(t)
local sum = 0
for _, v in ipairs(t) do sum = sum + v end
print(string.format("sorted %d values, sum %d, min %d, max %d", #t, sum, t[1], t[#t]))
local function counter()
  local n = 0
  return function(k) n = n + (k or 1); return n end
end
local c = counter()
for i = 1, 100 do c(i) end
print("closure", c(0))
local words = {}
for w in ("the quick brown fox jumps over the lazy dog"):gmatch("%a+") do words[#words + 1] = w:upper() end
print(table.concat(words, "-"))
print((("hello world from lua"):gsub("o", "0")))
print(string.format("%5.2f|%-6s|%x|%q", math.pi, "ab", 255, "a\nb"))
local co = coroutine.create(function(a, b)
  local x = coroutine.yield(a + b)
  local y = coroutine.yield(x * 2)
  return x + y
end)
print(coroutine.resume(co, 1, 2))
print(coroutine.resume(co, 10))
print(coroutine.resume(co, 5))
print(coroutine.resume(co))
local gen = coroutine.wrap(function() for i = 1, 5 do coroutine.yield(i * i) end end)
local squares = {}
for i = 1, 5 do squares[i] = gen() end
print(table.concat(squares, " "))
print(pcall(error, "boom"))
print(select(2, pcall(function() error({code = 42}) end)).code)
print(select(2, pcall(function() local x = nil; return x.field end)))
local ok, e = pcall(function() error("deep failure", 2) end)
print(ok, e)
local fib = {}
local function memo(n) if n < 3 then return 1 end if not fib[n] then fib[n] = memo(n - 1) + memo(n - 2) end return fib[n] end
print("fib(80)", memo(80))
local keys = {}
local m = {}
for i = 1, 300 do m["k" .. i] = i * i end
for k in pairs(m) do keys[#keys + 1] = k end
table.sort(keys)
print(#keys, keys[1], keys[#keys], m[keys[1]])
local s = string.rep("abc", 1000)
print(#s, s:sub(10, 20), select(2, s:gsub("b", "B")))
io.stderr:write("lua: a line on stderr\n")
os.exit(5)
"#;

#[test]
fn lua_runs_a_script() {
    let _share = cpu_share();
    let Some(lua) = debian_binary("/usr/bin/lua5.4", "lua5.4") else { return };
    let st = rewritten(&lua);
    let (want, _, report) = compare("lua5.4", &lua, &st, &["-e", LUA], None);
    assert!(want.status == 5, "lua5.4: the script should exit with 5\n{want:?}");
    assert!(want.stdout_str().contains("fib(80)\t23416728348467685"), "lua5.4: unexpected output\n{want:?}");
    assert!(!want.stderr.is_empty(), "lua5.4: nothing on stderr\n{want:?}");
    let calls = total_calls(main_thread(&report));
    assert!(calls > 1000, "lua5.4: {calls} calls on the main thread, want more than 1000");
}
