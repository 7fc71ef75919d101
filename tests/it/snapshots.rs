//! Structural snapshots (STYLE 19) of what `stint` prints for `testbins/calltree.c` built
//! as `pie-O0`: the rewrite plan (`stint inspect --json`), and the profile of one run as
//! JSON (`stint report --format json`) and as a table (`stint report`).
//!
//! Addresses, pids, tids, times and temporary paths are redacted, so a snapshot changes
//! only when what stint finds, plans or counts changes. Snapshots live in
//! `tests/it/snapshots/`; after an intended change, regenerate them with
//!
//! ```text
//! INSTA_UPDATE=always cargo test --release -p stint --test it -- snapshots::
//! ```
//!
//! and review the diff before committing.

use crate::common::*;
use serde_json::Value;
use std::path::PathBuf;

/// Redact a JSON document in place: `0x…` addresses, `sub_<hex>` names, pids, tids,
/// times, and the temporary directory.
fn redact_json(v: &mut Value, key: Option<&str>, tmp: &str) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                // The start-up calibration only: a later one runs in a process that ran
                // 100 ms or more, which a loaded machine can make of this short program.
                if let (true, Value::Array(runs)) = (k == "calibrations", &mut *x) {
                    runs.truncate(1);
                }
                redact_json(x, Some(k), tmp);
            }
        }
        Value::Array(a) => {
            for x in a {
                redact_json(x, key, tmp);
            }
        }
        Value::Number(_) => {
            if let Some(k) = key {
                if let Some(r) = redacted_number_key(k) {
                    *v = Value::String(r.into());
                }
            }
        }
        Value::String(s) => {
            if is_report_address(s) {
                *v = Value::String("[addr]".into());
            } else if let Some(h) = s.strip_prefix("sub_") {
                if !h.is_empty() && h.bytes().all(|c| c.is_ascii_hexdigit()) {
                    *v = Value::String("sub_[addr]".into());
                }
            } else if key == Some("reason") {
                // skip reasons name addresses: "branch target at 0x1254 inside the window"
                *v = Value::String(redact_text(s, tmp, &[], &[]));
            } else if key == Some("clock_source") {
                *v = Value::String("[clock]".into());
            } else if s.contains(tmp) {
                *v = Value::String(s.replace(tmp, "[tmp]"));
            } else if key.is_some_and(|k| redacted_number_key(k) == Some("[time]")) {
                *v = Value::String("[time]".into());
            }
        }
        _ => {}
    }
}

/// What a number under `key` is replaced with, if it varies from run to run.
fn redacted_number_key(key: &str) -> Option<&'static str> {
    let k = key.to_ascii_lowercase();
    match k.as_str() {
        "pid" | "ppid" | "parent_pid" => Some("[pid]"),
        "tid" => Some("[tid]"),
        // the machine's TSC rate and how often a thread was descheduled
        "tsc_hz" => Some("[hz]"),
        "resyncs" => Some("[count]"),
        // times the overhead compensation clamped at 0 (D21): depends on the times
        "clamped" => Some("[count]"),
        // counts of functions (`timed_functions`), not times
        _ if k.ends_with("_functions") => None,
        _ if k.contains("time")
            || k.ends_with("_ns")
            || k.ends_with("_ps")
            || k.ends_with("_us")
            || k.ends_with("_ms")
            || k.ends_with("_s") =>
        {
            Some("[time]")
        }
        _ if k.contains("elapsed") || k.contains("started") || k.contains("duration") => Some("[time]"),
        // when the image ended (`ended.at`, ns since the epoch)
        "at" => Some("[time]"),
        _ => None,
    }
}

/// Redact a text report: the temporary directory, the given pids and tids (as whole
/// words), `0x…` addresses, `sub_<hex>` names, clock times and durations.
fn redact_text(text: &str, tmp: &str, pids: &[u64], tids: &[u64]) -> String {
    let text = text.replace(tmp, "[tmp]");
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    let word_char = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        let at_word_start = i == 0 || !word_char(b[i - 1]);
        if at_word_start {
            // 0x addresses and sub_<hex> names
            for (prefix, repl) in [("0x", "[addr]"), ("sub_", "sub_[addr]")] {
                if text[i..].starts_with(prefix) {
                    let n = b[i + prefix.len()..].iter().take_while(|c| c.is_ascii_hexdigit()).count();
                    let end = i + prefix.len() + n;
                    if n > 0 && (end == b.len() || !word_char(b[end])) {
                        out += repl;
                        i = end;
                        break;
                    }
                }
            }
            if i < b.len() && b[i].is_ascii_digit() && (i == 0 || !word_char(b[i - 1])) {
                // a number: a clock time (12:34:56), a duration (1.5 ms), a pid or a tid
                let digits = |from: usize| from + b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
                let mut end = digits(i);
                // `.` or `:` continues the number only if a digit follows (1.25, 12:34:56;
                // not the dot in calltree.4242.stint)
                while end + 1 < b.len() && (b[end] == b'.' || b[end] == b':') && b[end + 1].is_ascii_digit() {
                    end = digits(end + 1);
                }
                let num = &text[i..end];
                let rest = &text[end..];
                let unit = ["ns", "µs", "us", "ms", "s", "sec"].iter().find(|u| {
                    let r = rest.strip_prefix(' ').unwrap_or(rest);
                    r.starts_with(**u) && !r[u.len()..].starts_with(|c: char| c.is_ascii_alphanumeric())
                });
                let whole = end == b.len() || !word_char(b[end]);
                if num.contains(':') && whole {
                    out += "[time]";
                    i = end;
                    continue;
                }
                if let Some(u) = unit {
                    let r_off = if rest.starts_with(' ') { 1 } else { 0 };
                    out += "[time]";
                    i = end + r_off + u.len();
                    continue;
                }
                if whole && !num.contains('.') {
                    if let Ok(n) = num.parse::<u64>() {
                        if pids.contains(&n) {
                            out += "[pid]";
                            i = end;
                            continue;
                        }
                        if tids.contains(&n) {
                            out += "[tid]";
                            i = end;
                            continue;
                        }
                    }
                }
                out += num;
                i = end;
                continue;
            }
        }
        if i < b.len() {
            let ch = text[i..].chars().next().expect("char");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn with_snapshot_settings(f: impl FnOnce()) {
    insta::with_settings!({snapshot_path => "snapshots", prepend_module_to_snapshot => false, omit_expression => true}, {
        f();
    });
}

/// The plan of calltree pie-O0: functions found, points and tactics, summary.
#[test]
fn inspect_calltree_pie_o0() {
    let _share = cpu_share();
    let p = program("calltree");
    let bin = build(&p, Variant::PieO0);
    let mut v = inspect_json(&bin);
    let tmp = run_root().to_string_lossy().into_owned();
    redact_json(&mut v, None, &tmp);
    with_snapshot_settings(|| insta::assert_json_snapshot!("inspect_calltree_pie_o0", v));
}

/// Rewrite calltree pie-O0, run it once, and return its profile file.
fn calltree_profile() -> PathBuf {
    let p = program("calltree");
    let bin = build(&p, Variant::PieO0);
    let out = run_root().join("snapshots").join("rewritten").join("pie-O0").join("calltree");
    static REWRITE: std::sync::Once = std::sync::Once::new();
    REWRITE.call_once(|| rewrite(&bin, &out));
    let profiles = fresh_dir("profiles-snapshot");
    let cwd = fresh_dir("cwd-snapshot");
    let o = Run::new(&out, &cwd)
        .args(&p.args)
        .env(stint_layout::ENV_PROFILE, &profile_template(&profiles, "calltree"))
        .run();
    assert_eq!(o.status, p.exit, "rewritten calltree: {o:?}");
    let file = profiles.join(format!("calltree.{}.stint", o.pid));
    assert!(file.is_file(), "no profile {}", file.display());
    file
}

/// The profile of one run of calltree pie-O0 as JSON.
#[test]
fn report_json_calltree_pie_o0() {
    let _share = cpu_share();
    let file = calltree_profile();
    let mut json = report_json(&file);
    redact_json(&mut json, None, &run_root().to_string_lossy());
    with_snapshot_settings(|| insta::assert_json_snapshot!("report_calltree_pie_o0_json", json));
}

/// The profile of one run of calltree pie-O0 as a table (`stint report --sort calls`: the
/// default order, by CPU time, varies from run to run among the short functions).
#[test]
fn report_table_calltree_pie_o0() {
    let _share = cpu_share();
    let file = calltree_profile();
    let json = report_json(&file);
    let pids: Vec<u64> = ["pid", "ppid"].iter().filter_map(|k| json.get(*k).and_then(|x| x.as_u64())).collect();
    let tids: Vec<u64> = threads(&json).iter().filter_map(|t| t.get("tid").and_then(|x| x.as_u64())).collect();
    let table = stint(&["report", file.to_str().unwrap(), "--sort", "calls"]);
    assert!(table.status == 0, "stint report {}: {table:?}", file.display());
    let text = redact_text(&table.stdout_str(), &run_root().to_string_lossy(), &pids, &tids);
    // What the overhead compensation had to clamp or cap depends on how busy the host was
    // during the calibration (the JSON snapshot redacts `clamped` for the same reason): the
    // compensation line keeps its fixed part.
    let text: String = text
        .lines()
        .map(|l| match l.strip_prefix("times compensated: ") {
            Some(mut rest) => {
                if rest.ends_with(" times clamped at 0") {
                    rest = rest.rfind("; ").map_or(rest, |i| &rest[..i]);
                }
                if let Some(i) = rest.find("; calibration capped at ") {
                    rest = &rest[..i];
                }
                format!("times compensated: {rest}")
            }
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    // The timer columns (ms, µs with decimals) vary from run to run, and with them the column
    // widths: replace them and squeeze runs of spaces.
    let text: String = text
        .lines()
        .map(|l| {
            l.split_whitespace()
                .map(|w| match w {
                    _ if w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.') => "[t]",
                    // perf events may be refused where the tests run (containers)
                    "perf-task-clock+tsc;" | "rseq+tsc;" | "clock_gettime;" => "[clock];",
                    _ => w,
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n");
    with_snapshot_settings(|| insta::assert_snapshot!("report_calltree_pie_o0_table", text));
}

/// The redactions themselves (these need no rewriter).
#[test]
fn redactions() {
    let tmp = "/x/target/tmp/stint-snapshots-1";
    let mut v = serde_json::json!({
        "pid": 4242, "ppid": 1, "program": "calltree",
        "threads": [{"tid": 4243, "first_function": "sub_1189", "start_ns": 17,
                     "functions": [{"name": "mid", "address": "0x1189", "calls": 1000}]}],
        "path": "/x/target/tmp/stint-snapshots-1/p.stint", "size": 12,
        "points": [{"reason": "branch target at 0x1254 inside the window"}], "timed_functions": 9
    });
    redact_json(&mut v, None, tmp);
    assert_eq!(
        v,
        serde_json::json!({
            "pid": "[pid]", "ppid": "[pid]", "program": "calltree",
            "threads": [{"tid": "[tid]", "first_function": "sub_[addr]", "start_ns": "[time]",
                         "functions": [{"name": "mid", "address": "[addr]", "calls": 1000}]}],
            "path": "[tmp]/p.stint", "size": 12,
            "points": [{"reason": "branch target at [addr] inside the window"}], "timed_functions": 9
        })
    );
    let t = redact_text(
        "calltree pid 4242 (/x/target/tmp/stint-snapshots-1/calltree.4242.stint) at 12:34:56\n\
         thread 4243 main: mid 0x1189 1000 calls, sub_4f20 3, took 1.25 ms, 3s\n",
        tmp,
        &[4242],
        &[4243],
    );
    assert_eq!(
        t,
        "calltree pid [pid] ([tmp]/calltree.[pid].stint) at [time]\n\
         thread [tid] main: mid [addr] 1000 calls, sub_[addr] 3, took [time], [time]\n"
    );
}
