//! Wall time of each pass of the rewriter on one input (`cargo bench -p stint-rewrite --bench
//! phases -- /usr/bin/gdb`): where a rewrite spends its time, bytes in and out (the input is
//! read before the clock starts, nothing is written). Not a divan bench: one run, one line per
//! pass.

use std::time::Instant;
use stint_rewrite::spec::Spec;
use stint_rewrite::{Options, Phase};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let paths = if args.is_empty() { vec!["/usr/bin/gdb".to_string()] } else { args };
    for path in paths {
        let Ok(data) = std::fs::read(&path) else {
            eprintln!("{path}: not readable, skipped");
            continue;
        };
        let spec = Spec::default_spec();
        let opts = Options { program: "bench", input: None, spec: &spec, traps: false };
        let start = Instant::now();
        let mut last: Option<(Phase, Instant)> = None;
        let mut rows = Vec::new();
        let res = stint_rewrite::rewrite_observed(&data, &opts, &mut |ph| {
            let now = Instant::now();
            if let Some((p, t)) = last.replace((ph, now)) {
                rows.push((p, now - t));
            }
        });
        let total = start.elapsed();
        match res {
            Ok((out, _)) => {
                println!("{path}: {:.3} s, {} -> {} bytes", total.as_secs_f64(), data.len(), out.len());
                for (p, d) in rows {
                    println!("  {:<9} {:7.3} s", p.name(), d.as_secs_f64());
                }
            }
            Err(e) => println!("{path}: {e}"),
        }
    }
}
