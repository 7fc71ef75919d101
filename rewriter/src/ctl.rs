//! `stint ctl` (being written).

/// Arguments of `stint ctl`.
#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("stint ctl: not built yet")
}
