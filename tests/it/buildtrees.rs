//! `stint batch --in-place` on the build trees test suites really have (issue 10): a CMake
//! project run by `ctest`, and a cargo project's `target/release/deps` test binaries run by
//! themselves, each rewritten in place, run by its own runner with `STINT_DIR`, merged, and
//! put back with `--restore`.
//!
//! | test | what it checks |
//! | --- | --- |
//! | `ctest_passes_on_the_rewritten_tree` | `ctest` over the rewritten tree passes every test, as over the original |
//! | `ctest_profiles_merge_with_exact_calls` | one profile per test; merged calls of each test's function exact |
//! | `ctest_restore_gives_the_build_back` | `--restore` puts back byte-identical files; `ctest` still passes |
//! | `cargo_deps_tests_pass_rewritten` | the rewritten `deps/<crate>-<hash>` test binary prints the same test results |
//! | `cargo_deps_calls_are_exact` | calls of the crate's `work` from its tests, exact in the profile |
//!
//! CMake's own probe executables under `CMakeFiles/` are executables too: batch rewrites
//! them like any other (nothing runs them after the configure step).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::common::*;

/// Tests of the CMake project: (name, calls of `step` the test makes).
const CTESTS: &[(&str, u64)] = &[("t_add", 300), ("t_mul", 70), ("t_threads", 4 * 250)];

const CMAKE_LISTS: &str = "cmake_minimum_required(VERSION 3.13)
project(stint_ctest C)
enable_testing()
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)
add_library(calc STATIC calc.c)
foreach(t t_add t_mul t_threads)
  add_executable(${t} ${t}.c)
  target_link_libraries(${t} calc Threads::Threads)
  add_test(NAME ${t} COMMAND ${t})
endforeach()
";

const CALC_C: &str = "__attribute__((noinline)) long step(long acc, long x) { return acc * 31 + x; }\n";

fn test_source(name: &str, calls: u64) -> String {
    if name == "t_threads" {
        format!(
            "#include <pthread.h>\n#include <stdio.h>\nlong step(long, long);\n\
             static void *w(void *a) {{ long s = (long)a; for (int i = 0; i < {n}; i++) s = step(s, i); return (void *)s; }}\n\
             int main(void) {{ pthread_t t[4]; for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, w, (void *)i);\n\
             long x = 0; for (int i = 0; i < 4; i++) {{ void *r; pthread_join(t[i], &r); x ^= (long)r; }}\n\
             printf(\"%ld\\n\", x); return 0; }}\n",
            n = calls / 4
        )
    } else {
        format!(
            "#include <stdio.h>\nlong step(long, long);\n\
             int main(void) {{ long s = 0; for (int i = 0; i < {calls}; i++) s = step(s, i); printf(\"%ld\\n\", s); return s == 0; }}\n"
        )
    }
}

struct CTree {
    dir: PathBuf,
    build: PathBuf,
    /// Hashes of every regular file of the build tree before the rewrite.
    before: Vec<(PathBuf, String)>,
    /// `ctest` on the original and on the rewritten tree.
    ctest_orig: Outcome,
    ctest_rewritten: Outcome,
    batch: Outcome,
    merged: serde_json::Value,
    profiles: usize,
}

fn ctest(build: &Path, profiles: &Path) -> Outcome {
    Run::new(Path::new("ctest"), build)
        .args(["--test-dir", path_str(build), "--output-on-failure", "-j", "1"])
        .env("STINT_DIR", path_str(profiles))
        .run()
}

/// Regular files below `dir` with their SHA-256, sorted by path.
fn hashes(dir: &Path) -> Vec<(PathBuf, String)> {
    let out = tool(
        "sh",
        &["-c", &format!("cd '{}' && find . -type f -print0 | sort -z | xargs -0 sha256sum", path_str(dir))],
    );
    String::from_utf8_lossy(&out)
        .lines()
        .map(|l| {
            let (h, p) = l.split_once("  ").expect("sha256sum line");
            (PathBuf::from(p), h.to_owned())
        })
        .collect()
}

fn ctree() -> &'static CTree {
    static T: OnceLock<CTree> = OnceLock::new();
    T.get_or_init(|| {
        let _share = cpu_share();
        let dir = fresh_dir("ctest");
        let src = dir.join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("CMakeLists.txt"), CMAKE_LISTS).unwrap();
        std::fs::write(src.join("calc.c"), CALC_C).unwrap();
        for &(name, calls) in CTESTS {
            std::fs::write(src.join(format!("{name}.c")), test_source(name, calls)).unwrap();
        }
        let build = dir.join("build");
        tool("cmake", &["-S", path_str(&src), "-B", path_str(&build), "-DCMAKE_BUILD_TYPE=Release"]);
        tool("cmake", &["--build", path_str(&build)]);
        let before = hashes(&build);
        let ctest_orig = ctest(&build, &dir.join("p-orig"));
        let batch = stint(&["batch", "--in-place", path_str(&build)]);
        let profiles = dir.join("p");
        let ctest_rewritten = ctest(&build, &profiles);
        let n = std::fs::read_dir(&profiles).map(|d| d.count()).unwrap_or(0);
        let merged_path = dir.join("merged.json");
        let o = stint(&["merge", path_str(&profiles), "-o", path_str(&merged_path), "-q"]);
        assert_eq!(o.status, 0, "stint merge: {o:?}");
        let merged = serde_json::from_slice(&std::fs::read(&merged_path).unwrap()).expect("merged JSON");
        CTree { dir, build, before, ctest_orig, ctest_rewritten, batch, merged, profiles: n }
    })
}

/// The merged document of `program` in a multi-program merge (an array) or a single one.
fn merged_program<'a>(merged: &'a serde_json::Value, program: &str) -> &'a serde_json::Value {
    match merged.as_array() {
        Some(all) => all.iter().find(|d| d["program"] == program).unwrap_or_else(|| panic!("no {program} in {merged}")),
        None => merged,
    }
}

#[test]
fn ctest_passes_on_the_rewritten_tree() {
    let t = ctree();
    assert_eq!(t.batch.status, 0, "stint batch --in-place: {:?}", t.batch);
    assert_eq!(t.ctest_orig.status, 0, "ctest on the original tree: {:?}", t.ctest_orig);
    assert_eq!(t.ctest_rewritten.status, 0, "ctest on the rewritten tree: {:?}", t.ctest_rewritten);
    let out = t.ctest_rewritten.stdout_str();
    assert!(out.contains("100% tests passed, 0 tests failed out of 3"), "{out}");
    assert!(!out.contains("stint:") && !t.ctest_rewritten.stderr_str().contains("stint:"), "{out}");
}

#[test]
fn ctest_profiles_merge_with_exact_calls() {
    let t = ctree();
    assert_eq!(t.profiles, CTESTS.len(), "one profile per test in {}", t.dir.display());
    for &(name, calls) in CTESTS {
        let doc = merged_program(&t.merged, name);
        assert_eq!(doc["runs"], 1, "{name}: {doc}");
        assert_eq!(calls_of(doc, "step"), calls, "{name}: calls of step");
        assert_eq!(calls_of(doc, "main"), 1, "{name}: calls of main");
    }
}

#[test]
fn ctest_restore_gives_the_build_back() {
    let t = ctree();
    // Its own copy: the other tests of the tree read the rewritten one.
    let copy = t.dir.join("restore");
    tool("cp", &["-a", path_str(&t.build), path_str(&copy)]);
    let o = stint(&["batch", "--restore", path_str(&copy)]);
    assert_eq!(o.status, 0, "stint batch --restore: {o:?}");
    // ctest's own records of the runs (Testing/) are new files, not ours.
    let restored: Vec<_> = hashes(&copy).into_iter().filter(|(p, _)| !p.starts_with("./Testing")).collect();
    assert_eq!(restored, t.before, "the restored tree differs from the build");
}

/// The cargo project: a library function `work` and two tests calling it a known number of times.
const CARGO_TOML: &str =
    "[package]\nname = \"stintdemo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n\n[workspace]\n";
const LIB_RS: &str = "#[inline(never)]\npub fn work(x: u64) -> u64 {\n    std::hint::black_box(x.wrapping_mul(2654435761) ^ 7)\n}\n\n\
#[cfg(test)]\nmod tests {\n    #[test]\n    fn hundred() {\n        let s = (0..100u64).fold(0u64, |s, x| s.wrapping_add(super::work(x)));\n        assert_ne!(s, 0);\n    }\n\n    #[test]\n    fn twenty() {\n        let s = (0..20u64).fold(0u64, |s, x| s.wrapping_add(super::work(x)));\n        assert_ne!(s, 1);\n    }\n}\n";

struct CargoDeps {
    orig: Outcome,
    rewritten: Outcome,
    batch: Outcome,
    merged: serde_json::Value,
}

/// Test output without its timing (`finished in 0.00s`).
fn results(o: &Outcome) -> String {
    o.stdout_str().lines().map(|l| l.split("; finished in").next().unwrap_or(l)).collect::<Vec<_>>().join("\n")
}

fn cargo_deps() -> &'static CargoDeps {
    static T: OnceLock<CargoDeps> = OnceLock::new();
    T.get_or_init(|| {
        let _share = cpu_share();
        let dir = fresh_dir("cargo-deps");
        let proj = dir.join("stintdemo");
        std::fs::create_dir_all(proj.join("src")).unwrap();
        std::fs::write(proj.join("Cargo.toml"), CARGO_TOML).unwrap();
        std::fs::write(proj.join("src/lib.rs"), LIB_RS).unwrap();
        let target = dir.join("target");
        let o = std::process::Command::new(env!("CARGO"))
            .args(["test", "--release", "--offline", "--no-run", "--manifest-path", path_str(&proj.join("Cargo.toml"))])
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .expect("cargo");
        assert!(o.status.success(), "cargo test --no-run: {}", String::from_utf8_lossy(&o.stderr));
        let deps = target.join("release/deps");
        let bin = std::fs::read_dir(&deps)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                name.starts_with("stintdemo-") && p.extension().is_none()
            })
            .unwrap_or_else(|| panic!("no test binary in {}", deps.display()));
        let cwd = dir.join("cwd");
        std::fs::create_dir_all(&cwd).unwrap();
        // One test thread: the harness's own threads then do the same work in every run.
        let args = ["--test-threads", "1"];
        let orig = Run::new(&bin, &cwd).args(args).run();
        let batch = stint(&["batch", "--in-place", path_str(&deps)]);
        let profiles = dir.join("p");
        let rewritten = Run::new(&bin, &cwd).args(args).env("STINT_DIR", path_str(&profiles)).run();
        let merged_path = dir.join("merged.json");
        let o = stint(&["merge", path_str(&profiles), "-o", path_str(&merged_path), "-q"]);
        assert_eq!(o.status, 0, "stint merge: {o:?}");
        let merged = serde_json::from_slice(&std::fs::read(&merged_path).unwrap()).expect("merged JSON");
        CargoDeps { orig, rewritten, batch, merged }
    })
}

#[test]
fn cargo_deps_tests_pass_rewritten() {
    let t = cargo_deps();
    assert_eq!(t.batch.status, 0, "stint batch --in-place: {:?}", t.batch);
    assert_eq!(t.orig.status, 0, "{:?}", t.orig);
    assert_eq!(t.rewritten.status, t.orig.status, "{:?}", t.rewritten);
    assert_eq!(results(&t.rewritten), results(&t.orig));
    assert!(results(&t.orig).contains("test result: ok. 2 passed"), "{:?}", t.orig);
    assert_eq!(t.rewritten.stderr, t.orig.stderr);
}

#[test]
fn cargo_deps_calls_are_exact() {
    let t = cargo_deps();
    let doc = match t.merged.as_array() {
        Some(all) => {
            assert_eq!(all.len(), 1, "one program: {}", t.merged);
            &all[0]
        }
        None => &t.merged,
    };
    assert_eq!(calls_of(doc, "stintdemo::work"), 120, "{doc}");
}
