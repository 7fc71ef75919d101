//! The fuzz targets of stint (issue 13), as plain functions of the input bytes: the AFL
//! binaries in `src/bin/` call them under `afl::fuzz!`, and the same binaries replay files
//! given on the command line without AFL (to reproduce a crash in a debugger, or to check a
//! corpus). A target passes when the code under test returns, with a value or a typed
//! error; a panic, an abort or a hang is a finding.
//!
//! Each target bounds its own work so that a hang is a bug in the code, not the size of the
//! input: inputs past a target's limit are ignored (AFL's own limit is 1 MB).

use stint_layout::control_file;
use stint_profile::profile::{self, Observer};
use stint_rewrite::spec::Spec;
use stint_rewrite::Options;

/// Largest ELF input the rewrite target looks at (the seeds are small test programs).
pub const MAX_ELF: usize = 1 << 20;
/// Largest spec text the spec target looks at (real specs are a few hundred bytes).
pub const MAX_SPEC: usize = 64 << 10;
/// Largest (encoded) profile input the profile target looks at.
pub const MAX_PROFILE: usize = 1 << 20;

/// The targets, by the name `run.sh` and the binaries use.
pub const TARGETS: [&str; 4] = ["rewrite", "spec", "control", "profile"];

/// Run target `name` on `data`. Unknown names are a usage error of the caller.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "rewrite" => rewrite(data),
        "spec" => spec(data),
        "control" => control(data),
        "profile" => profile(data),
        _ => panic!("unknown fuzz target {name:?} (targets: {})", TARGETS.join(", ")),
    }
}

/// The whole rewriting pipeline (input → analysis → plan → place → codegen → unwind →
/// emit) on `data` with the default spec. The fuzz build has debug assertions on, so an
/// output also passes `emit::validate_output`. Inputs of odd length use the trap tactic
/// (`int3`) where no jump fits (a length change rarely changes anything else of an ELF, so
/// both tactics see the same programs at half the cost of running both on every input).
pub fn rewrite(data: &[u8]) {
    if data.len() > MAX_ELF {
        return;
    }
    let spec = Spec::default_spec();
    let opts = Options { program: "fuzz", input: Some("fuzz"), spec: &spec, traps: data.len() % 2 == 1 };
    let _ = stint_rewrite::rewrite(data, &opts);
}

/// The spec parser; an accepted spec is then asked what it selects.
pub fn spec(data: &[u8]) {
    if data.len() > MAX_SPEC {
        return;
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(s) = Spec::parse(text) {
        for name in ["main", "pthread_mutex_lock", "pthread_create", "", "parse_x"] {
            let _ = (s.bits_for(name), s.wrap_bits_for(name));
        }
        let _ = s.on_at_start_bits();
    }
}

/// The control-file parser the runtime runs at start (the same `no_std` code, built for the
/// host); an accepted file is then asked what it selects, as the runtime does.
pub fn control(data: &[u8]) {
    if let Ok(cf) = control_file::parse(data) {
        for f in cf.functions() {
            let _ = cf.function_selected(f);
        }
        for name in [&b"main"[..], b"worker-1", b""] {
            let _ = cf.function_selected(name);
            let _ = cf.thread_selected(1, name);
            let _ = cf.thread_selected(i32::MAX as u32, name);
        }
        let _ = (cf.has_functions(), cf.has_threads(), cf.threads().len(), cf.on, cf.call_paths);
    }
}

/// An observer for which every process and thread still runs, at a fixed late TSC: the
/// reader then adds open intervals (state times, open frames) up to that moment.
const ALIVE: Observer = Observer {
    thread_alive: |_, _| true,
    process_alive: |_| true,
    now_tsc: || u64::MAX / 2,
    thread_cpu_ns: |_, _| Some(1 << 40),
    thread_sched_ns: |_, _| Some((1 << 40, 1 << 30)),
};

/// The profile reader on the bytes of a profile file (`data` is the file in the [`sparse`]
/// encoding): in full as a post-mortem, and since the newest snapshot as a live file; an
/// accepted profile then goes through the views every command shares (JSON, tables, call
/// paths).
pub fn profile(data: &[u8]) {
    if data.len() > MAX_PROFILE {
        return;
    }
    let Some(file) = sparse::decode(data) else { return };
    for (obs, since) in [(Observer::ENDED, false), (ALIVE, true)] {
        let Ok(p) = profile::parse_opts(&file, &obs, since) else { continue };
        let _ = stint_profile::report::to_json(&p);
        let _ = stint_profile::report::to_table(&p);
        let _ = stint_profile::report::to_lock_table(&p);
        for t in &p.threads {
            let _ = stint_profile::calltree::paths(t);
            let _ = stint_profile::report::functions(&p, t);
        }
    }
}

/// Replay: run target `name` on every file named on the command line (a directory stands for
/// the files in it) and say how many ran; a panic ends the process as it would under AFL.
pub fn replay(name: &str) {
    let mut files = Vec::new();
    for arg in std::env::args_os().skip(1) {
        let path = std::path::PathBuf::from(arg);
        match std::fs::read_dir(&path) {
            Ok(dir) => {
                let mut inner: Vec<_> = dir.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
                inner.sort();
                files.extend(inner);
            }
            Err(_) => files.push(path),
        }
    }
    if files.is_empty() {
        eprintln!("usage: {name} FILE|DIR... (replays the inputs through target {name})");
        std::process::exit(2);
    }
    for f in &files {
        match std::fs::read(f) {
            Ok(data) => run(name, &data),
            Err(e) => {
                eprintln!("{}: {e}", f.display());
                std::process::exit(2);
            }
        }
    }
    println!("{name}: {} inputs, no panic", files.len());
}

/// The encoding of profile files in the profile target's inputs. A profile file is mostly
/// zeros (a 10-function program's file is 12 MB, 39 of its 3100 pages hold data) and AFL
/// takes inputs up to 1 MB, so an input is a list of records `skip: u32 LE, len: u16 LE,
/// len bytes`: `skip` zero bytes, then the bytes. A trailing partial record is taken as far
/// as it goes (so every input decodes, and byte flips stay local).
pub mod sparse {
    /// Largest decoded file (the reader reads whole files; this bounds an execution).
    pub const MAX_DECODED: usize = 32 << 20;
    /// Zero runs shorter than this are kept as bytes by [`encode`].
    const MIN_SKIP: usize = 16;

    /// The file an input stands for; `None` if it would be larger than [`MAX_DECODED`].
    pub fn decode(mut input: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        while !input.is_empty() {
            let field = |at: usize, n: usize| {
                let mut b = [0u8; 4];
                for (k, x) in b.iter_mut().enumerate().take(n) {
                    *x = input.get(at + k).copied().unwrap_or(0);
                }
                u32::from_le_bytes(b) as usize
            };
            let (skip, len) = (field(0, 4), field(4, 2));
            let bytes = input.get(6..).unwrap_or(&[]);
            let bytes = bytes.get(..len).unwrap_or(bytes);
            if out.len() + skip + bytes.len() > MAX_DECODED {
                return None;
            }
            out.resize(out.len() + skip, 0);
            out.extend_from_slice(bytes);
            input = input.get(6 + bytes.len()..).unwrap_or(&[]);
        }
        Some(out)
    }

    /// The input that [`decode`]s to `file` (zero runs of 16 bytes or more become skips).
    pub fn encode(file: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < file.len() {
            let zeros = file[i..].iter().take_while(|&&b| b == 0).count();
            let (skip, at) = if zeros >= MIN_SKIP || i + zeros == file.len() { (zeros, i + zeros) } else { (0, i) };
            // Literal bytes up to the next long zero run (or the record's limit).
            let mut end = at;
            while end < file.len() && end - at < u16::MAX as usize {
                let run = file[end..].iter().take(MIN_SKIP).take_while(|&&b| b == 0).count();
                if run >= MIN_SKIP || end + run == file.len() {
                    break;
                }
                end += run.max(1);
            }
            let end = end.min(at + u16::MAX as usize);
            out.extend_from_slice(&(skip as u32).to_le_bytes());
            out.extend_from_slice(&((end - at) as u16).to_le_bytes());
            out.extend_from_slice(&file[at..end]);
            i = end;
        }
        out
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn encode_then_decode_is_the_file() {
            let mut file = vec![0u8; 100_000];
            file[0] = 1;
            file[5] = 2;
            file[40_000..40_010].copy_from_slice(b"0123456789");
            file[99_999] = 3;
            let enc = encode(&file);
            assert!(enc.len() < 100, "{} bytes", enc.len());
            assert_eq!(decode(&enc).unwrap(), file);
            let zeros = vec![0u8; 70_000];
            assert_eq!(decode(&encode(&zeros)).unwrap(), zeros);
            let noise: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8 | 1).collect();
            assert_eq!(decode(&encode(&noise)).unwrap(), noise);
        }

        #[test]
        fn every_input_decodes_within_the_limit() {
            assert_eq!(decode(&[]).unwrap(), Vec::<u8>::new());
            assert_eq!(decode(&[3, 0, 0, 0, 9, 0, b'a']).unwrap(), b"\0\0\0a");
            assert_eq!(decode(&[1]).unwrap(), vec![0u8]);
            assert!(decode(&[0xff, 0xff, 0xff, 0xff, 0, 0]).is_none(), "4 GiB of zeros is past the limit");
        }
    }
}
