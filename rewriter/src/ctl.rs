//! `stint ctl` (being written).
use std::path::Path;

/// Arguments of `stint ctl`.
#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("stint ctl: not built yet")
}

/// One change to a running program's metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Metric id (`stint_layout::METRIC_*`).
    pub metric: u32,
    /// Turn it on (true) or off.
    pub on: bool,
    /// Only the points whose function name matches this glob (`*`, `?`).
    pub function: Option<String>,
    /// Only this thread (kernel tid).
    pub thread: Option<u32>,
}

/// Apply `change` to the live profile at `path`; returns a one-line summary of what changed
/// ("cpu_time on at 12 points, thread 4247").
pub fn apply(path: &Path, change: &Change) -> anyhow::Result<String> {
    let _ = (path, change);
    anyhow::bail!("stint ctl: not built yet")
}
