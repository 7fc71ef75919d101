//! Seed inputs the shell script `seeds.sh` cannot make by itself:
//!
//! - `seeds synthetic DIR`: profile files written by `stint_profile::synthetic` (one thread,
//!   several threads, with calling-context trees), in the profile target's sparse encoding;
//! - `seeds encode FILE OUT`: a real profile file in that encoding.

use std::path::Path;
use stint_fuzz::sparse;
use stint_profile::synthetic::{synthetic_meta, write_synthetic, write_synthetic_with_trees, SyntheticNode};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["synthetic", dir] => synthetic(Path::new(dir)),
        ["encode", file, out] => std::fs::read(file).and_then(|b| std::fs::write(out, sparse::encode(&b))),
        _ => {
            eprintln!("usage: seeds synthetic DIR | seeds encode PROFILE OUT");
            std::process::exit(2);
        }
    };
    if let Err(e) = result {
        eprintln!("seeds: {e}");
        std::process::exit(1);
    }
}

fn synthetic(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let meta = synthetic_meta("prog", &[("main", "0x1139"), ("work", "0x1200"), ("_ZN2ns4workEv", "0x1300")]);
    let node = |parent, point, calls| SyntheticNode { parent, point, calls, cpu: 100 * calls, wall: 150 * calls };
    let files = [
        ("synthetic-one-thread", write_synthetic(&meta, &[(4242, vec![(0, 1), (1, 10)])])),
        (
            "synthetic-threads",
            write_synthetic(&meta, &[(4242, vec![(0, 1), (1, 3)]), (4243, vec![(1, 5), (2, 7)]), (4244, vec![])]),
        ),
        (
            "synthetic-trees",
            write_synthetic_with_trees(
                &meta,
                &[
                    (4242, vec![(0, 1), (1, 2)], vec![node(None, 0, 1), node(Some(0), 1, 2), node(Some(1), 2, 4)], 0),
                    (4243, vec![(2, 3)], vec![node(None, 2, 3)], 5),
                ],
            ),
        ),
        ("synthetic-no-threads", write_synthetic(&meta, &[])),
    ];
    for (name, file) in files {
        std::fs::write(dir.join(name), sparse::encode(&file))?;
    }
    Ok(())
}
