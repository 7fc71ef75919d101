//! `stint export`: one profile file written in a format other tools read. Each format is one
//! arm of the `match` below, a thin call into the library that renders it; the output goes
//! to stdout, or to `-o FILE` through a temporary file and a rename (never half-written).
//!
//! - `openmetrics`: the exposition `stint serve` answers on `/metrics`
//!   ([`stint_profile::openmetrics`]), for node_exporter's textfile collector; a process that
//!   has ended carries `stint_process_ended 1`.

use std::io::Write;

use anyhow::anyhow;
use stint_profile::openmetrics::{self, Status};
use stint_profile::profile;

use crate::args::{ExportArgs, ExportFormat};

pub fn run(a: ExportArgs) -> anyhow::Result<()> {
    let p = profile::load(&a.profile).map_err(|e| anyhow!("{}: {e}", a.profile.display()))?;
    let bytes = match a.format {
        ExportFormat::Openmetrics => {
            let opts = openmetrics::Options { top: a.top, ..openmetrics::Options::default() };
            let status = Status::of(&p);
            openmetrics::render(&[(p, status)], &opts).into_bytes()
        }
    };
    match &a.output {
        Some(path) => crate::cache::write_atomically(path, &bytes, 0o644),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes)?;
            out.flush()?;
            Ok(())
        }
    }
}
