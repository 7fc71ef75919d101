//! The profile reader (issue 14): parsing a profile file into the typed model, as every
//! command does first (`stint report`, `top` each refresh, `merge`), for a file of 2,000
//! points and 16 threads each counting calls at every point, and of 20 points and 1 thread.

use stint_profile::synthetic::{synthetic_meta, write_synthetic};

fn main() {
    divan::main();
}

fn file(points: usize, threads: u32) -> Vec<u8> {
    let names: Vec<(String, String)> =
        (0..points).map(|i| (format!("function_{i}"), format!("{:#x}", 0x1000 + 16 * i))).collect();
    let refs: Vec<(&str, &str)> = names.iter().map(|(f, a)| (f.as_str(), a.as_str())).collect();
    let meta = synthetic_meta("bench", &refs);
    let threads: Vec<(u32, Vec<(u32, u64)>)> =
        (0..threads).map(|t| (1000 + t, (0..points as u32).map(|p| (p, 1 + p as u64 * 3)).collect())).collect();
    write_synthetic(&meta, &threads)
}

#[divan::bench(args = [(20, 1), (2000, 16)])]
fn parse(bencher: divan::Bencher, (points, threads): (usize, u32)) {
    let bytes = file(points, threads);
    bencher.bench(|| stint_profile::profile::parse(&bytes).map(|p| p.threads.len()).unwrap_or(0));
}
