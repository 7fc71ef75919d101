//! Entry coverage (issue 12): functions whose entries the planner could not patch before,
//! end to end.
//!
//! `testbins/entrycov.c` has one hand-written function per shape (see its header): jump
//! tables whose base register the backward slice loses, a callback tail-called after the
//! epilogue, and a jump with two possible tables that must stay a refusal; entry windows with
//! a branch target inside (loops back to just after the prologue, by rel8 and rel32 jumps),
//! one whose target's address is taken (a refusal), and a lone `ret` before nops. The tests
//! check which entries `stint inspect` patches, then run the rewritten program and check
//! every call is counted exactly and the program behaves as the original.

use crate::common::*;
use serde_json::Value;

/// The entry point of `function` in `stint inspect --json`: (tactic, skip reason).
fn entry(inspect: &Value, function: &str) -> (String, String) {
    let p = field(inspect, "points", "inspect")
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["kind"] == "entry" && p["function"] == function)
        .unwrap_or_else(|| panic!("{function}: no entry in inspect"));
    let s = |k: &str| p[k].as_str().unwrap_or_default().to_string();
    (s("tactic"), s("reason"))
}

#[test]
fn entries_of_lost_tables_are_patched() {
    let bin = build(&program("entrycov"), Variant::PieO2);
    let inspect = inspect_json(&bin);
    for f in ["ij_dom", "ij_flow", "ij_ptr"] {
        assert_eq!(entry(&inspect, f), ("window".to_string(), String::new()), "{f}");
    }
    assert_eq!(
        entry(&inspect, "ij_two"),
        ("skipped".to_string(), "unresolved indirect jump in the function".to_string()),
        "two possible tables: refused"
    );
}

#[test]
fn entries_with_targets_inside_are_patched() {
    let bin = build(&program("entrycov"), Variant::PieO2);
    let inspect = inspect_json(&bin);
    for f in ["ew_jmp8", "ew_loop", "ew_cmp", "ew_far"] {
        assert_eq!(entry(&inspect, f), ("window+jumps".to_string(), String::new()), "{f}");
    }
    assert_eq!(entry(&inspect, "tn_ret"), ("window+padding".to_string(), String::new()), "tn_ret");
    let (tactic, reason) = entry(&inspect, "ew_taken");
    assert_eq!(tactic, "skipped", "ew_taken: its target's address is taken");
    assert!(reason.starts_with("branch target at 0x"), "ew_taken: {reason}");
    let s = field(&inspect, "summary", "inspect");
    assert_eq!(s["by_tactic"]["window+jumps"], 4, "entries by tactic: {}", s["by_tactic"]);
}

#[test]
fn counts_are_exact_and_behaviour_unchanged() {
    let _turn = cpu_turn();
    let bin = build(&program("entrycov"), Variant::PieO2);
    let dir = fresh_dir("entrycov");
    let out = dir.join("entrycov");
    rewrite(&bin, &out);
    let profiles = dir.join("profiles");
    std::fs::create_dir_all(&profiles).expect("profiles dir");
    let original = Run::new(&bin, &dir).run();
    let measured = Run::new(&out, &dir).env(stint_layout::ENV_PROFILE, &profile_template(&profiles, "entrycov")).run();
    assert!(
        original.same_behaviour(&measured),
        "{}",
        describe_difference("original", &original, "rewritten", &measured)
    );
    // acc, then cb's own count: 100 calls of ij_ptr(i) call cb i times, then tail-call it.
    // Then the entry-window shapes' sum (ew_loop and ew_far return ew_leaf(1) = 2).
    assert_eq!(String::from_utf8_lossy(&original.stdout).trim(), "1600 5050\n1581");
    let files = dir_entries(&profiles);
    assert_eq!(files.len(), 1, "{files:?}");
    let report = report_json(&profiles.join(&files[0]));
    // ext: once per ij_dom call, and per ij_flow call with a negative argument (i < 50);
    // ij_two's entry is not patched, so it has no row of its own.
    for (f, n) in [("ij_dom", 100), ("ij_flow", 100), ("ij_ptr", 100), ("cb", 5050), ("ext", 150), ("ij_two", 0)] {
        assert_eq!(calls_of(&report, f), n, "calls of {f}");
    }
    // Each loop's jumps back to just after the prologue are no calls: one per call of the
    // function. ew_leaf: i % 5 + 1 times per ew_loop call, i % 3 + 1 per ew_far call.
    for (f, n) in
        [("ew_jmp8", 100), ("ew_loop", 100), ("ew_cmp", 100), ("ew_far", 100), ("ew_leaf", 499), ("tn_ret", 100)]
    {
        assert_eq!(calls_of(&report, f), n, "calls of {f}");
    }
    assert_eq!(calls_of(&report, "ew_taken"), 0, "ew_taken's entry is not patched");
}
