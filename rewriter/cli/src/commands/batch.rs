//! `stint batch`: find every ELF executable under the given directories (and the files
//! given), rewrite them in parallel into a mirrored output tree or in place (original kept as
//! `<name>.orig`), and print a summary: rewritten with entry coverage, skipped with the
//! reason, failed. `--restore` undoes `--in-place`.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::anyhow;
use stint_rewrite::spec::Spec;
use stint_rewrite::ErrorKind;

use crate::args::BatchArgs;
use crate::cache::write_atomically;
use crate::input::{load_spec, program_name};

/// Suffix of the original an `--in-place` rewrite keeps beside the rewritten file.
const ORIG: &str = ".orig";

/// One file the batch looked at.
struct Item {
    /// The file as found.
    path: PathBuf,
    /// Where its rewrite goes (the same path for `--in-place`).
    dest: PathBuf,
}

/// What became of one file.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// Rewritten; entry coverage in percent.
    Rewritten(f64),
    Skipped(String),
    Failed(String),
}

pub fn run(a: BatchArgs) -> anyhow::Result<()> {
    if a.restore {
        return restore(&a.inputs);
    }
    let spec = load_spec(&a.spec)?;
    let mut items = Vec::new();
    let mut results: Vec<(PathBuf, Outcome)> = Vec::new();
    for input in &a.inputs {
        let meta = std::fs::symlink_metadata(input).map_err(|e| anyhow!("{}: {e}", input.display()))?;
        if meta.is_dir() {
            walk(input, input, a.output.as_deref(), &mut items, &mut results)?;
        } else {
            let dest = match &a.output {
                Some(out) => out.join(input.file_name().ok_or_else(|| anyhow!("{}: not a file", input.display()))?),
                None => input.clone(),
            };
            match precheck(input, &meta, true) {
                Some(reason) => results.push((input.clone(), Outcome::Skipped(reason))),
                None => items.push(Item { path: input.clone(), dest }),
            }
        }
    }
    // Two inputs whose files mirror to the same place (`-o out a/ b/`, both with `t`): the
    // first keeps it, the others fail rather than overwrite it.
    let mut seen: std::collections::HashMap<PathBuf, PathBuf> = std::collections::HashMap::new();
    items.retain(|it| match seen.get(&it.dest) {
        Some(first) => {
            let why = format!("{} is also the output of {}", it.dest.display(), first.display());
            results.push((it.path.clone(), Outcome::Failed(why)));
            false
        }
        None => {
            seen.insert(it.dest.clone(), it.path.clone());
            true
        }
    });
    if let Some(out) = &a.output {
        std::fs::create_dir_all(out).map_err(|e| anyhow!("{}: cannot create directory: {e}", out.display()))?;
    }
    let jobs = a.jobs.map(|n| n.get()).unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    results.extend(rewrite_all(&items, &spec, jobs, a.in_place));
    results.sort_by(|x, y| x.0.cmp(&y.0));
    let mut out = std::io::stdout().lock();
    write!(out, "{}", summary(&results))?;
    out.flush()?;
    if results.iter().any(|(_, o)| matches!(o, Outcome::Failed(_))) {
        std::process::exit(1);
    }
    Ok(())
}

/// Collect the executables below `dir` (not following symbolic links); files that are not
/// executable are left out silently (a build tree is full of objects and sources), the rest
/// that cannot be rewritten go to `skipped` with the reason.
fn walk(
    root: &Path,
    dir: &Path,
    output: Option<&Path>,
    items: &mut Vec<Item>,
    skipped: &mut Vec<(PathBuf, Outcome)>,
) -> anyhow::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| anyhow!("{}: {e}", dir.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!("{}: {e}", dir.display()))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        // Never descend into (or rewrite) our own output tree.
        if output.is_some_and(|o| same_file(o, &path)) {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        if meta.is_dir() {
            walk(root, &path, output, items, skipped)?;
            continue;
        }
        if !meta.file_type().is_symlink() && (!meta.is_file() || meta.permissions().mode() & 0o111 == 0) {
            continue;
        }
        let dest = match output {
            Some(out) => out.join(path.strip_prefix(root).expect("below root")),
            None => path.clone(),
        };
        match precheck(&path, &meta, false) {
            Some(reason) => skipped.push((path, Outcome::Skipped(reason))),
            None => items.push(Item { path, dest }),
        }
    }
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => {
            use std::os::unix::fs::MetadataExt;
            x.dev() == y.dev() && x.ino() == y.ino()
        }
        _ => false,
    }
}

/// Why `path` is not worth handing to the rewriter, if it is not; the rewriter itself says
/// why for the ELF files it refuses.
fn precheck(path: &Path, meta: &std::fs::Metadata, given: bool) -> Option<String> {
    if meta.file_type().is_symlink() {
        return Some("symbolic link".into());
    }
    if !meta.is_file() {
        return Some("not a regular file".into());
    }
    if path.to_string_lossy().ends_with(ORIG) {
        return Some("original kept by --in-place".into());
    }
    if given && meta.permissions().mode() & 0o111 == 0 {
        return Some("not executable".into());
    }
    let mut magic = [0u8; 4];
    let n = std::fs::File::open(path).and_then(|mut f| f.read(&mut magic)).unwrap_or(0);
    if magic[..n.min(2)] == *b"#!" {
        return Some("script".into());
    }
    if magic[..n] != *b"\x7fELF" {
        return Some("not an ELF file".into());
    }
    None
}

/// Rewrite `items` on `jobs` threads, with a progress bar on a terminal.
fn rewrite_all(items: &[Item], spec: &Spec, jobs: usize, in_place: bool) -> Vec<(PathBuf, Outcome)> {
    let bar =
        indicatif::ProgressBar::with_draw_target(Some(items.len() as u64), indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {wide_msg}") {
        bar.set_style(style);
    }
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(items.len()));
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                bar.set_message(item.path.display().to_string());
                let outcome = rewrite_one(item, spec, in_place);
                results.lock().unwrap_or_else(|e| e.into_inner()).push((item.path.clone(), outcome));
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    results.into_inner().unwrap_or_else(|e| e.into_inner())
}

fn rewrite_one(item: &Item, spec: &Spec, in_place: bool) -> Outcome {
    let data = match std::fs::read(&item.path) {
        Ok(d) => d,
        Err(e) => return Outcome::Failed(format!("cannot read: {e}")),
    };
    let program = program_name(&item.path);
    let input = crate::input::absolute_input(&item.path);
    let opts = stint_rewrite::Options { program: &program, input: input.as_deref(), spec, traps: false };
    let (out, report) = match stint_rewrite::rewrite(&data, &opts) {
        Ok(r) => r,
        Err(e) => {
            return match e.kind() {
                ErrorKind::NotElf | ErrorKind::Foreign | ErrorKind::UnsupportedKind | ErrorKind::AlreadyRewritten => {
                    Outcome::Skipped(e.to_string())
                }
                _ => Outcome::Failed(e.to_string()),
            }
        }
    };
    let mode = std::fs::metadata(&item.path).map(|m| m.permissions().mode() & 0o7777).unwrap_or(0o755);
    let written = if in_place {
        replace_in_place(&item.path, &out, mode)
    } else {
        item.dest
            .parent()
            .map_or(Ok(()), |d| std::fs::create_dir_all(d).map_err(|e| anyhow!("{}: {e}", d.display())))
            .and_then(|()| write_atomically(&item.dest, &out, mode))
    };
    match written {
        Ok(()) => Outcome::Rewritten(report.summary.entry_coverage_pct),
        Err(e) => Outcome::Failed(crate::one_line(&e)),
    }
}

/// Keep the original as `<path>.orig` (a hard link, never replacing an existing one) and
/// rename the rewritten file over `path`: at no moment is `path` missing or half-written.
fn replace_in_place(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    let orig = orig_of(path);
    let kept = match std::fs::hard_link(path, &orig) {
        // A file system without hard links: a copy (never over an existing file) will do.
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => copy_new(path, &orig, mode),
        r => r,
    };
    kept.map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => anyhow!("{} exists already; restore or remove it first", orig.display()),
        _ => anyhow!("{}: cannot keep the original: {e}", orig.display()),
    })?;
    write_atomically(path, bytes, mode).inspect_err(|_| {
        let _ = std::fs::remove_file(&orig);
    })
}

/// Copy `from` to a new file `to` (which must not exist) with `mode`.
fn copy_new(from: &Path, to: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut src = std::fs::File::open(from)?;
    let mut dst = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(to)?;
    let res = std::io::copy(&mut src, &mut dst).and_then(|_| dst.sync_all());
    if res.is_err() {
        let _ = std::fs::remove_file(to);
    }
    res
}

fn orig_of(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(ORIG);
    PathBuf::from(s)
}

/// `--restore`: rename every `<name>.orig` below the inputs (or given) back to `<name>`.
fn restore(inputs: &[PathBuf]) -> anyhow::Result<()> {
    let mut origs = Vec::new();
    for input in inputs {
        let meta = std::fs::symlink_metadata(input).map_err(|e| anyhow!("{}: {e}", input.display()))?;
        if meta.is_dir() {
            find_origs(input, &mut origs)?;
        } else if input.to_string_lossy().ends_with(ORIG) {
            origs.push(input.clone());
        } else if orig_of(input).is_file() {
            origs.push(orig_of(input));
        } else {
            return Err(anyhow!("{}: no {} beside it to restore", input.display(), ORIG));
        }
    }
    origs.sort();
    let mut out = std::io::stdout().lock();
    for orig in &origs {
        let s = orig.to_string_lossy();
        let target = PathBuf::from(&s[..s.len() - ORIG.len()]);
        std::fs::rename(orig, &target).map_err(|e| anyhow!("{}: cannot restore: {e}", target.display()))?;
        writeln!(out, "restored {}", target.display())?;
    }
    writeln!(out, "{} restored", origs.len())?;
    Ok(())
}

fn find_origs(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for e in std::fs::read_dir(dir).map_err(|e| anyhow!("{}: {e}", dir.display()))? {
        let e = e.map_err(|e| anyhow!("{}: {e}", dir.display()))?;
        let ft = e.file_type().map_err(|e| anyhow!("{}: {e}", e))?;
        let path = e.path();
        if ft.is_dir() {
            find_origs(&path, out)?;
        } else if ft.is_file() && path.to_string_lossy().ends_with(ORIG) {
            out.push(path);
        }
    }
    Ok(())
}

/// The summary table: one row per file, then the totals.
fn summary(results: &[(PathBuf, Outcome)]) -> String {
    let mut rows = vec![vec!["status".to_string(), "coverage".into(), "file".into(), "reason".into()]];
    let (mut done, mut skipped, mut failed) = (0, 0, 0);
    for (path, o) in results {
        let (status, coverage, reason) = match o {
            Outcome::Rewritten(pct) => {
                done += 1;
                ("rewritten", format!("{pct:.1}%"), String::new())
            }
            Outcome::Skipped(r) => {
                skipped += 1;
                ("skipped", String::new(), r.clone())
            }
            Outcome::Failed(r) => {
                failed += 1;
                ("FAILED", String::new(), r.clone())
            }
        };
        rows.push(vec![status.into(), coverage, path.display().to_string(), reason]);
    }
    let widths = stint_profile::report::column_widths(&rows);
    let mut s = String::new();
    for r in &rows {
        let line = format!(
            "{:<w0$}  {:>w1$}  {:<w2$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s.push_str(&format!("{done} rewritten, {skipped} skipped, {failed} failed\n"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_counts_each_outcome() {
        let r = vec![
            (PathBuf::from("a"), Outcome::Rewritten(99.5)),
            (PathBuf::from("b.sh"), Outcome::Skipped("script".into())),
            (PathBuf::from("c"), Outcome::Failed("boom".into())),
        ];
        let s = summary(&r);
        assert!(s.ends_with("1 rewritten, 1 skipped, 1 failed\n"), "{s}");
        assert!(s.lines().any(|l| l.starts_with("rewritten") && l.contains("99.5%") && l.contains(" a")), "{s}");
        assert!(s.lines().any(|l| l.starts_with("skipped") && l.ends_with("b.sh  script")), "{s}");
    }

    #[test]
    fn copy_new_never_overwrites() {
        let dir = std::env::temp_dir().join(format!("stint-batch-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::write(&a, b"original").unwrap();
        copy_new(&a, &b, 0o640).unwrap();
        assert_eq!(std::fs::read(&b).unwrap(), b"original");
        std::fs::write(&a, b"changed").unwrap();
        assert_eq!(copy_new(&a, &b, 0o640).unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&b).unwrap(), b"original");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn orig_is_beside_the_file() {
        assert_eq!(orig_of(Path::new("d/x")), PathBuf::from("d/x.orig"));
    }
}
