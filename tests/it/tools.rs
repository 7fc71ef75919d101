//! Rewritten programs survive the binutils people run on executables: `strip` and `objcopy`
//! rebuild a file from its sections, so the memory stint adds must be described by sections
//! (`.stint`, `.stint.bss`) or it is dropped and the program crashes.

use crate::common::*;
use std::process::Command;

#[test]
fn rewritten_program_survives_strip_and_objcopy() {
    let _share = cpu_share();
    let dir = fresh_dir("tools-strip");
    let p = program("matmul");
    let variant = p.variants.iter().copied().find(|v| v.name() == "pie-O2").expect("matmul has pie-O2");
    let original = build(&p, variant);
    let rewritten = dir.join("matmul.stint");
    rewrite(&original, &rewritten);
    let want = Command::new(&original).args(&p.args).output().unwrap();
    for (tool_name, args) in [("strip", vec!["-o"]), ("objcopy", vec![])] {
        let out = dir.join(format!("matmul.{tool_name}"));
        let mut a: Vec<&str> = args.clone();
        if tool_name == "strip" {
            a.extend([out.to_str().unwrap(), rewritten.to_str().unwrap()]);
        } else {
            a.extend([rewritten.to_str().unwrap(), out.to_str().unwrap()]);
        }
        tool(tool_name, &a);
        let profiles = dir.join(tool_name);
        std::fs::create_dir_all(&profiles).unwrap();
        let got = Command::new(&out).args(&p.args).env("STINT_PROFILE", profiles.join("m.%p.stint")).output().unwrap();
        assert_eq!(
            (&got.stdout, &got.stderr, got.status.code()),
            (&want.stdout, &want.stderr, want.status.code()),
            "{tool_name}: rewritten program behaves differently after {tool_name}"
        );
        let files = dir_entries(&profiles);
        assert_eq!(files.len(), 1, "{tool_name}: profiles {files:?}");
        let r = report_json(&profiles.join(&files[0]));
        let innerp: Vec<u64> = threads(&r)
            .iter()
            .flat_map(|t| t["functions"].as_array().unwrap().iter())
            .filter(|f| f["name"] == "innerp")
            .map(|f| f["calls"].as_u64().unwrap())
            .collect();
        assert!(!innerp.is_empty() && innerp.iter().all(|&c| c == innerp[0]), "{tool_name}: innerp counts {innerp:?}");
    }
}
