//! Wall and CPU time (all threads) of each pass of the rewriter on one input (`cargo bench -p stint-rewrite --bench
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
        let mut last: Option<(Phase, Instant, f64)> = None;
        let mut rows = Vec::new();
        let res = stint_rewrite::rewrite_observed(&data, &opts, &mut |ph| {
            let (now, cpu) = (Instant::now(), cpu_seconds());
            if let Some((p, t, c)) = last.replace((ph, now, cpu)) {
                rows.push((p, now - t, cpu - c));
            }
        });
        let total = start.elapsed();
        match res {
            Ok((out, _)) => {
                println!("{path}: {:.3} s, {} -> {} bytes", total.as_secs_f64(), data.len(), out.len());
                println!("  {:<9} {:>9} {:>9}", "pass", "wall", "cpu");
                for (p, d, c) in rows {
                    println!("  {:<9} {:7.3} s {:7.2} s", p.name(), d.as_secs_f64(), c);
                }
            }
            Err(e) => println!("{path}: {e}"),
        }
    }
}

/// CPU time of the process so far, all threads (user + system, from `/proc/self/stat`, in
/// clock ticks of 10 ms; 0 where it cannot be read).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}
