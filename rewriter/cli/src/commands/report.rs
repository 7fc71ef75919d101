//! `stint report`: load a profile (whole, or since the newest snapshot) and print one of the
//! tables of [`stint_profile::report`] or the `stint-profile/1` document
//! ([`stint_profile::json`]).

use std::io::Write;

use anyhow::anyhow;
use stint_profile::{json, profile, report};

use crate::args::{By, Format, ReportArgs};

pub fn run(a: ReportArgs) -> anyhow::Result<()> {
    let p = if a.since_snapshot { profile::load_since_snapshot(&a.profile) } else { profile::load(&a.profile) }
        .map_err(|e| anyhow!("{}: {e}", a.profile.display()))?;
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
