//! Wall time, CPU time (all threads) and the calling thread's CPU time of each pass of the
//! rewriter on one input (`cargo bench -p stint-rewrite --bench
//! phases -- /usr/bin/gdb`): where a rewrite spends its time, bytes in and out (the input is
//! read before the clock starts, nothing is written). Not a divan bench: one run, one line per
//! pass. The calling thread's CPU time is the part no other core can take (on a loaded
//! machine the wall time is not): a pass whose `main` is close to its `cpu` runs on one core.
//! `faults` counts the pass's minor page faults (fresh memory touched), `peak` the peak RSS
//! at its end.

use std::time::Instant;

/// The allocator `stint` uses, set as `stint` sets it (`rewriter/cli/src/main.rs`: freed
/// memory purged after 50 ms, option 15), so that these figures are the command's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
use stint_rewrite::spec::Spec;
use stint_rewrite::{Options, Phase};

fn main() {
    // SAFETY: setting an option by its index, as `stint` does.
    unsafe { libmimalloc_sys::mi_option_set(15, 50) }
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
        let mut last: Option<(Phase, Instant, f64, f64, u64)> = None;
        let mut rows = Vec::new();
        let res = stint_rewrite::rewrite_observed(&data, &opts, &mut |ph| {
            let (now, cpu, main) =
                (Instant::now(), cpu_seconds("/proc/self/stat"), cpu_seconds("/proc/thread-self/stat"));
            let faults = minor_faults();
            if let Some((p, t, c, m, f)) = last.replace((ph, now, cpu, main, faults)) {
                rows.push((p, now - t, cpu - c, main - m, faults - f, peak_rss_mib()));
            }
        });
        let total = start.elapsed();
        match res {
            Ok((out, _)) => {
                println!("{path}: {:.3} s, {} -> {} bytes", total.as_secs_f64(), data.len(), out.len());
                println!("  {:<9} {:>9} {:>9} {:>9} {:>8} {:>9}", "pass", "wall", "cpu", "main", "faults", "peak");
                for (p, d, c, m, f, rss) in rows {
                    println!("  {:<9} {:7.3} s {:7.2} s {:7.2} s {f:8} {rss:5} MiB", p.name(), d.as_secs_f64(), c, m);
                }
            }
            Err(e) => println!("{path}: {e}"),
        }
    }
}

/// Minor page faults so far of the process (all threads): field 10 of `/proc/self/stat`
/// (each is a page the kernel cleared or mapped for the first time).
fn minor_faults() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0 };
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return 0 };
    rest.split_whitespace().nth(7).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Peak resident memory so far (`VmHWM` of `/proc/self/status`), MiB; 0 where unknown.
fn peak_rss_mib() -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return 0 };
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    kib.unwrap_or(0) / 1024
}

/// CPU time so far (user + system) of the process (`/proc/self/stat`, all threads) or of the
/// calling thread (`/proc/thread-self/stat`), in clock ticks of 10 ms; 0 where it cannot be
/// read.
fn cpu_seconds(stat: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(stat) else { return 0.0 };
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}
