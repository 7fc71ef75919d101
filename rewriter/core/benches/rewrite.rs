//! The rewriter on big inputs (issue 14's target: gdb, about 20,000 functions, in ≤ 0.5 s):
//! the whole pipeline, bytes in and bytes out (no file I/O), with the default spec; and the
//! analysis and plan alone (`stint inspect`). Inputs that are not installed are skipped.

use stint_rewrite::spec::Spec;
use stint_rewrite::Options;

fn main() {
    divan::main();
}

const INPUTS: &[&str] = &["/usr/bin/gdb", "/bin/bash"];

fn input(path: &str) -> Option<Vec<u8>> {
    std::fs::read(std::fs::canonicalize(path).ok()?).ok()
}

/// `stint rewrite` of the input with the default spec.
#[divan::bench(args = INPUTS, sample_count = 5, sample_size = 1)]
fn rewrite(bencher: divan::Bencher, path: &str) {
    let Some(data) = input(path) else { return };
    let spec = Spec::default_spec();
    let opts = Options { program: "bench", input: None, spec: &spec, traps: false };
    bencher.bench(|| stint_rewrite::rewrite(&data, &opts).map(|(out, _)| out.len()).unwrap_or(0));
}

/// Passes 1–3 only: parse, analysis, plan.
#[divan::bench(args = INPUTS, sample_count = 5, sample_size = 1)]
fn plan(bencher: divan::Bencher, path: &str) {
    let Some(data) = input(path) else { return };
    let spec = Spec::default_spec();
    bencher.bench(|| stint_rewrite::plan_program(&data, &spec, false).map(|p| p.plan.points.len()).unwrap_or(0));
}
