//! `stint diff BASE NEW`: load both inputs ([`stint_profile::diff::load_input`]: profile
//! files or `stint-profile/1` JSON), compare them ([`stint_profile::diff::diff`]) and print
//! the table, markdown or `stint-diff/1` JSON. A regression past the gate returns
//! [`Regressed`] after printing, which `main` turns into exit status 1 (bad input is 2).

use std::io::Write;
use std::path::Path;

use anyhow::anyhow;
use stint_profile::diff::{self, DiffOptions, Gate, Metric, Side, Which};
use stint_profile::json::ProfileJson;

use crate::args::{DiffArgs, DiffFormat, DiffMetric};

/// The diff found regressions (already printed): exit 1.
#[derive(Debug)]
pub struct Regressed;

impl std::fmt::Display for Regressed {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("regression")
    }
}

impl std::error::Error for Regressed {}

pub fn run(a: DiffArgs) -> anyhow::Result<()> {
    let metric = match a.metric {
        DiffMetric::Calls => Metric::Calls,
        DiffMetric::Cpu => Metric::Cpu,
        DiffMetric::Wall => Metric::Wall,
        DiffMetric::SelfTime => Metric::SelfTime,
        DiffMetric::LockWait => Metric::LockWait,
        DiffMetric::Hold => Metric::Hold,
    };
    let gate = a.threshold.map(|pct| Gate {
        threshold_pct: pct,
        // --min-abs is in calls, or ms for times; the library compares in calls or ns.
        min_abs: a
            .min_abs
            .map_or(0, |n| if metric == Metric::Calls { n.ceil() as u64 } else { (n * 1e6).ceil() as u64 }),
    });
    let names = a.names.resolver();
    let base = load(&a.base, &names)?;
    let new = load(&a.new, &names)?;
    let (bf, nf) = (a.base.display().to_string(), a.new.display().to_string());
    let opts = DiffOptions { metric, by_thread: a.by_thread, gate };
    let d = diff::diff(&Side { doc: &base, file: &bf }, &Side { doc: &new, file: &nf }, &opts).map_err(|(w, e)| {
        let file = if w == Which::Base { &bf } else { &nf };
        anyhow!("{file}: {e}")
    })?;
    let mut out = std::io::stdout().lock();
    match a.format {
        DiffFormat::Table => write!(out, "{}", diff::to_table(&d))?,
        DiffFormat::Markdown => write!(out, "{}", diff::to_markdown(&d))?,
        DiffFormat::Json => {
            serde_json::to_writer_pretty(&mut out, &d)?;
            writeln!(out)?;
        }
    }
    out.flush()?;
    if d.regressed() {
        return Err(Regressed.into());
    }
    Ok(())
}

fn load(path: &Path, names: &stint_profile::symbols::Resolver) -> anyhow::Result<ProfileJson> {
    diff::load_input_named(path, names).map_err(|e| anyhow!("{}: {e}", path.display()))
}
