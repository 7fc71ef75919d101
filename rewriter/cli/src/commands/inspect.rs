//! `stint inspect`: what `rewrite` would instrument, and how ([`stint_rewrite::inspect`]),
//! as text or as the rewrite report's JSON.

use std::io::Write;

use anyhow::anyhow;

use crate::args::InspectArgs;
use crate::input::{load_spec, program_name, read_input};

pub fn run(a: InspectArgs) -> anyhow::Result<()> {
    let spec = load_spec(&a.spec)?;
    let data = read_input(&a.input)?;
    let program = program_name(&a.input);
    let opts = stint_rewrite::Options { program: &program, input: None, spec: &spec, traps: a.traps };
    let report = stint_rewrite::inspect(&data, &opts).map_err(|e| anyhow!("{}: {e}", a.input.display()))?;
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", report.to_text(a.skipped))?;
    }
    Ok(())
}
