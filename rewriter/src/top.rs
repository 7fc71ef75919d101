//! `stint top` (being written).

/// Arguments of `stint top`.
#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("stint top: not built yet")
}
