//! `stint ls` (being written).

/// Arguments of `stint ls`.
#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("stint ls: not built yet")
}
