//! `stint report`: load a profile (whole, or since the newest snapshot) and print one of the
//! tables of [`stint_profile::report`], its CSV form ([`stint_profile::csv`]) or the
//! `stint-profile/1` document ([`stint_profile::json`]), or a call-path view
//! ([`stint_profile::callviews`]: `--calltree`, `--callers`, `--callees`). Turns `--sort`, `--top`, `--thread`
//! and `--width` (default: the terminal's width) into [`report::TableOptions`]. Several
//! inputs, a directory or a JSON document (`stint merge` output) are summed per program
//! ([`stint_profile::merge`]) and shown as the merged table (or the merged JSON, as `stint
//! merge` writes it). `--tree` shows the inputs as process trees ([`stint_profile::proctree`]),
//! and `--sum` adds their merge.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use stint_profile::{callviews, csv, discover, json, merge, proctree, profile, report};

use crate::args::{By, Format, ReportArgs, Sort};

pub fn run(a: ReportArgs) -> anyhow::Result<()> {
    if a.tree {
        return run_tree(&a);
    }
    let path = match (a.profile.as_slice(), &a.last) {
        ([], last) => last_profile(last.as_deref().filter(|p| !p.is_empty()))?,
        ([one], _) if is_profile_file(one)? => one.clone(),
        (many, _) => return run_merged(&a, many),
    };
    let mut p = profile::load_opts(&path, a.since_snapshot, a.raw).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    p.resolve_names(&a.names.resolver());
    let sort = match a.sort {
        None => None,
        Some(Sort::Calls) => Some(report::SortBy::Calls),
        Some(Sort::Cpu) => Some(report::SortBy::Cpu),
        Some(Sort::Wall) => Some(report::SortBy::Wall),
        Some(Sort::SelfTime) => {
            if p.threads.iter().all(|t| t.calltree.is_empty()) {
                bail!(
                    "{}: --sort self: the profile has no call paths (written with call_paths off, or --since-snapshot); use cpu, wall or calls",
                    path.display()
                );
            }
            Some(report::SortBy::SelfCpu)
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
    let tree_opts =
        callviews::TreeOptions { thread: a.thread.clone(), depth: a.depth, sort: sort.unwrap_or_default(), width };
    let call_view = a.calltree || a.callers.is_some() || a.callees.is_some();
    if call_view && format != Format::Table {
        bail!("--calltree, --callers, --callees: tables only (the JSON has threads[].calltree)");
    }
    if a.calltree {
        write!(out, "{}", callviews::to_calltree_table(&p, &tree_opts))?;
        return Ok(());
    }
    if let Some((f, callers)) = a.callers.as_deref().map(|f| (f, true)).or(a.callees.as_deref().map(|f| (f, false))) {
        write!(out, "{}", callviews::to_relatives_table(&p, f, callers, &tree_opts))?;
        return Ok(());
    }
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
    if a.calltree || a.callers.is_some() || a.callees.is_some() {
        bail!("--calltree, --callers, --callees: need one profile file");
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

/// `--tree`: the profiles as process trees ([`proctree`]); with `--sum`, then merged.
fn run_tree(a: &ReportArgs) -> anyhow::Result<()> {
    /// `--tree --sum --format json`: the tree document with the merge added.
    #[derive(serde::Serialize)]
    struct TreeSum<'a> {
        #[serde(flatten)]
        tree: proctree::TreeJson,
        merged: &'a [merge::MergedJson],
    }
    let tree = load_tree(&a.profile)?;
    let merged = if a.sum {
        let paths: Vec<PathBuf> = tree.nodes.iter().map(|n| n.path.clone()).collect();
        merge::merge_paths(&paths)?
    } else {
        Vec::new()
    };
    let mut out = std::io::stdout().lock();
    let format = if a.json { Format::Json } else { a.format };
    match format {
        Format::Json if a.sum => {
            serde_json::to_writer_pretty(&mut out, &TreeSum { tree: proctree::to_json(&tree), merged: &merged })?;
            writeln!(out)?;
        }
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, &proctree::to_json(&tree))?;
            writeln!(out)?;
        }
        Format::Table => {
            write!(out, "{}", proctree::to_table(&tree))?;
            for m in &merged {
                writeln!(out)?;
                write!(out, "{}", merge::to_table(m, a.top))?;
            }
        }
        Format::Csv => bail!("--tree: --format table or json"),
    }
    Ok(())
}

/// Every profile file among `paths` (directories: their `*.stint`), as a tree.
pub fn load_tree(paths: &[PathBuf]) -> anyhow::Result<proctree::Tree> {
    let files = merge::expand(paths)?;
    let mut items = Vec::new();
    for f in files {
        let p = profile::load(&f).map_err(|e| anyhow!("{}: {e}", f.display()))?;
        items.push((f, p));
    }
    Ok(proctree::Tree::build(items))
}
