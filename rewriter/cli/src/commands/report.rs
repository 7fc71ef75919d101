//! `stint report`: load a profile (whole, or since the newest snapshot) and print one of the
//! tables of [`stint_profile::report`] or the `stint-profile/1` document
//! ([`stint_profile::json`]).

use std::io::Write;

use anyhow::anyhow;
use std::path::PathBuf;

use stint_profile::{discover, json, profile, report};

use crate::args::{By, Format, ReportArgs};

pub fn run(a: ReportArgs) -> anyhow::Result<()> {
    let path = match (&a.profile, &a.last) {
        (Some(p), _) => p.clone(),
        (None, last) => last_profile(last.as_deref().filter(|p| !p.is_empty()))?,
    };
    let p = if a.since_snapshot { profile::load_since_snapshot(&path) } else { profile::load(&path) }
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let mut out = std::io::stdout().lock();
    let format = if a.json { Format::Json } else { a.format };
    match (format, a.by) {
        (Format::Json, _) => {
            serde_json::to_writer_pretty(&mut out, &json::profile_json(&p))?;
            writeln!(out)?;
        }
        (Format::Table, By::Function) => {
            let opts = report::TableOptions { top: a.top };
            write!(out, "{}", report::to_table_with(&p, &opts))?;
        }
        (Format::Table, By::Thread) => write!(out, "{}", report::to_thread_table(&p))?,
        (Format::Table, By::Lock) => write!(out, "{}", report::to_lock_table(&p))?,
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
