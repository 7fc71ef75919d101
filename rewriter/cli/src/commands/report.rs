//! `stint report`: load a profile (whole, or since the newest snapshot) and print one of the
//! tables of [`stint_profile::report`], its CSV form ([`stint_profile::csv`]) or the
//! `stint-profile/1` document ([`stint_profile::json`]). Turns `--sort`, `--top`, `--thread`
//! and `--width` (default: the terminal's width) into [`report::TableOptions`]. Several
//! inputs, a directory or a JSON document (`stint merge` output) are summed per program
//! ([`stint_profile::merge`]) and shown as the merged table (or the merged JSON, as `stint
//! merge` writes it).

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use stint_profile::{csv, discover, json, merge, profile, report};

use crate::args::{By, Format, ReportArgs, Sort};

pub fn run(a: ReportArgs) -> anyhow::Result<()> {
    let path = match (a.profile.as_slice(), &a.last) {
        ([], last) => last_profile(last.as_deref().filter(|p| !p.is_empty()))?,
        ([one], _) if is_profile_file(one)? => one.clone(),
        (many, _) => return run_merged(&a, many),
    };
    let mut p = if a.since_snapshot { profile::load_since_snapshot(&path) } else { profile::load(&path) }
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    p.resolve_names(&a.names.resolver());
    let sort = match a.sort {
        None => None,
        Some(Sort::Calls) => Some(report::SortBy::Calls),
        Some(Sort::Cpu) => Some(report::SortBy::Cpu),
        Some(Sort::Wall) => Some(report::SortBy::Wall),
        Some(Sort::SelfTime) => {
            bail!("--sort self: self time needs call paths, which profiles do not record yet; use cpu, wall or calls")
        }
    };
    if let Some(pat) = &a.thread {
        if report::select_threads(&p, Some(pat)).is_empty() {
            let tids: Vec<String> = p.threads.iter().map(|t| t.tid.to_string()).collect();
            bail!("{}: no thread matches --thread {pat} (threads: {})", path.display(), tids.join(" "));
        }
    }
    let stdout = std::io::stdout();
    let width = a.width.or_else(|| {
        stdout.is_terminal().then(|| crossterm::terminal::size().ok()).flatten().map(|(cols, _)| cols as usize)
    });
    let opts = report::TableOptions { top: a.top, sort, thread: a.thread.clone(), width };
    let mut out = stdout.lock();
    let format = if a.json { Format::Json } else { a.format };
    match (format, a.by) {
        (Format::Json, _) => {
            serde_json::to_writer_pretty(&mut out, &json::profile_json(&p))?;
            writeln!(out)?;
        }
        (Format::Table, By::Function) => write!(out, "{}", report::to_table_with(&p, &opts))?,
        (Format::Table, By::Thread) => write!(out, "{}", report::to_thread_table(&p))?,
        (Format::Table, By::Lock) => write!(out, "{}", report::to_lock_table(&p))?,
        (Format::Csv, By::Function) => write!(out, "{}", csv::functions_csv(&p, &opts))?,
        (Format::Csv, By::Thread) => write!(out, "{}", csv::threads_csv(&p, &opts))?,
        (Format::Csv, By::Lock) => write!(out, "{}", csv::locks_csv(&p, &opts))?,
    }
    Ok(())
}

/// Whether `path` is one profile file (by its magic), not JSON or a directory.
fn is_profile_file(path: &Path) -> anyhow::Result<bool> {
    if path.is_dir() {
        return Ok(false);
    }
    let mut head = [0u8; 8];
    let mut f = std::fs::File::open(path).with_context(|| path.display().to_string())?;
    let n = f.read(&mut head).with_context(|| path.display().to_string())?;
    Ok(merge::is_profile_file(&head[..n]))
}

/// Several inputs (or JSON, or a directory): the merged profile, per program.
fn run_merged(a: &ReportArgs, paths: &[PathBuf]) -> anyhow::Result<()> {
    if a.since_snapshot {
        bail!("--since-snapshot: needs one profile file");
    }
    let merged = merge::merge_paths_named(paths, &a.names.resolver())?;
    let mut out = std::io::stdout().lock();
    let format = if a.json { Format::Json } else { a.format };
    match (format, a.by) {
        (Format::Json, _) => writeln!(out, "{}", merge::to_json_text(&merged)?)?,
        (Format::Table, By::Function) => {
            for (k, m) in merged.iter().enumerate() {
                if k > 0 {
                    writeln!(out)?;
                }
                write!(out, "{}", merge::to_table(m, a.top))?;
            }
        }
        (Format::Table, _) => bail!("--by thread|lock: needs one profile file (merged profiles show --by function)"),
        (Format::Csv, _) => bail!("--format csv: needs one profile file (merged profiles: --format json or the table)"),
    }
    Ok(())
}

/// The newest profile of `program` (any program if `None`) in the profile directory.
fn last_profile(program: Option<&str>) -> anyhow::Result<PathBuf> {
    let dir = discover::default_dir();
    let newest = discover::newest_in(&dir, program).map_err(|e| anyhow!("{}: {e}", dir.display()))?;
    newest.ok_or_else(|| match program {
        Some(p) => anyhow!("{}: no profile of {p} (files named {p}.<pid>.stint)", dir.display()),
        None => anyhow!("{}: no profiles", dir.display()),
    })
}
