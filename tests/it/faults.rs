//! Faults a production run meets (issue 13): the program must go on exactly as the original
//! would, and the profile must say what it could measure.
//!
//! | test | what it checks |
//! | --- | --- |
//! | `small_address_space_limit_still_measures` | under `ulimit -v` the profile's reservation shrinks: same output, exact calls |
//! | `threads_past_the_reservation_are_counted_lost` | churn's 2,000 threads under `ulimit -v`: same output, some threads measured, each of the rest counted lost once |
//! | `sigkill_leaves_a_readable_profile` | a program killed mid-run: its profile reads, twice the same, with the calls made |
//! | `profile_directory_that_cannot_exist_runs_unmeasured` | `STINT_DIR` under a file: one `stint:` line, otherwise the original's behaviour |

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;

/// Run `bin` under `ulimit -v kib` (through sh) with profiles into `dir`.
fn under_as_limit(bin: &Path, kib: u64, dir: Option<&Path>) -> Outcome {
    let cwd = fresh_dir("faults-cwd");
    let script = format!("ulimit -v {kib} && exec \"$0\"");
    let mut r = Run::new(Path::new("sh"), &cwd).args(["-c", &script, path_str(bin)]);
    if let Some(d) = dir {
        r = r.env("STINT_DIR", path_str(d));
    }
    r.run()
}

fn single_profile(dir: &Path) -> serde_json::Value {
    let files = dir_entries(dir);
    assert_eq!(files.len(), 1, "one profile in {}: {files:?}", dir.display());
    report_json(&dir.join(&files[0]))
}

#[test]
fn small_address_space_limit_still_measures() {
    let _share = cpu_share();
    let bin = build(&program("recurse"), Variant::parse("pie-O2").unwrap());
    let dir = fresh_dir("faults-as");
    let exe = dir.join("recurse");
    rewrite(&bin, &exe);
    // 300 MB: far below the 64 GiB the profile reserves without a limit.
    let want = under_as_limit(&bin, 300_000, None);
    let profiles = dir.join("p");
    let got = under_as_limit(&exe, 300_000, Some(&profiles));
    assert!(want.same_behaviour(&got), "{}", describe_difference("original", &want, "rewritten", &got));
    let r = single_profile(&profiles);
    assert_eq!((calls_of(&r, "rec"), calls_of(&r, "is_even")), (400, 150), "{r}");
}

#[test]
fn threads_past_the_reservation_are_counted_lost() {
    let _share = cpu_share();
    let bin = build(&program("churn"), Variant::parse("pie-O2").unwrap());
    let dir = fresh_dir("faults-churn");
    let exe = dir.join("churn");
    rewrite(&bin, &exe);
    let want = under_as_limit(&bin, 300_000, None);
    assert_eq!(want.status, 0, "the original churn under ulimit -v: {want:?}");
    let profiles = dir.join("p");
    let got = under_as_limit(&exe, 300_000, Some(&profiles));
    assert!(want.same_behaviour(&got), "{}", describe_difference("original", &want, "rewritten", &got));
    let r = single_profile(&profiles);
    let threads = r["threads"].as_array().expect("threads").len();
    let lost = r["lost_threads"].as_u64().expect("lost_threads");
    assert!(threads > 1 && threads < 2001 && lost > 0, "{threads} threads measured, lost {lost}");
    // Each thread is measured or counted lost, once (not once per event it made).
    assert_eq!(threads as u64 + lost, 2001, "{threads} threads measured, lost {lost}");
    // Every measured worker counted exactly.
    for t in r["threads"].as_array().unwrap().iter().filter(|t| t["main"] == false) {
        let f = t["functions"].as_array().unwrap().iter().find(|f| f["name"] == "f");
        assert_eq!(f.and_then(|f| f["calls"].as_u64()), Some(10), "{t}");
    }
}

#[test]
fn sigkill_leaves_a_readable_profile() {
    let _share = cpu_share();
    let bin = build(&program("top_spin"), Variant::PieO2);
    let dir = fresh_dir("faults-kill");
    let exe = dir.join("top_spin");
    rewrite(&bin, &exe);
    let mut child = std::process::Command::new(&exe)
        .arg("20000")
        .env("STINT_PROFILE", profile_template(&dir, "top_spin"))
        .env_remove("STINT_CONTROL")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("top_spin");
    let profile = dir.join(format!("top_spin.{}.stint", child.id()));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // The file exists from its `O_EXCL` creation on, before its header is published:
        // until then the reader refuses it, and the loop waits.
        let live = stint(&["report", path_str(&profile), "--format", "json"]);
        let doc = (live.status == 0).then(|| serde_json::from_slice::<serde_json::Value>(&live.stdout).ok()).flatten();
        if doc.is_some_and(|d| calls_of(&d, "work") > 1000) {
            break;
        }
        assert!(Instant::now() < deadline, "top_spin made no calls of work");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
    let a = report_json(&profile);
    let b = report_json(&profile);
    assert_eq!(a, b, "a dead process's profile reads the same twice");
    assert!(calls_of(&a, "work") > 1000, "{a}");
    assert_eq!(a["threads"].as_array().map(Vec::len), Some(3), "{a}");
    assert!(a["threads"].as_array().unwrap().iter().all(|t| t["running"] == false), "{a}");
}

#[test]
fn profile_directory_that_cannot_exist_runs_unmeasured() {
    let _share = cpu_share();
    let bin = build(&program("recurse"), Variant::parse("pie-O2").unwrap());
    let dir = fresh_dir("faults-nodir");
    let exe = dir.join("recurse");
    rewrite(&bin, &exe);
    let file = dir.join("a-file");
    std::fs::write(&file, "not a directory\n").unwrap();
    let cwd = fresh_dir("faults-nodir-cwd");
    let want = Run::new(&bin, &cwd).run();
    let got = Run::new(&exe, &cwd).env("STINT_DIR", path_str(&file.join("profiles"))).run();
    assert_eq!((got.status, &got.stdout), (want.status, &want.stdout));
    let extra = got.stderr_str();
    let extra = extra.strip_prefix(&want.stderr_str()).unwrap_or(&extra).to_owned();
    let lines: Vec<&str> = extra.lines().collect();
    assert_eq!(lines.len(), 1, "one line about the lost measurement: {extra:?}");
    assert!(lines[0].starts_with("stint: recurse: ") && lines[0].contains("running without measurement"), "{extra:?}");
    assert_eq!(dir_entries(&cwd), Vec::<String>::new());
}
