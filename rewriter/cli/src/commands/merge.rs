//! `stint merge`: many runs (profile files, `stint-profile/1` JSON, directories of `*.stint`)
//! summed into one `stint-profile/1` document per program ([`stint_profile::merge`]), written
//! to a temporary name beside `-o` and renamed (or printed with `-o -`). One program gives one
//! JSON object; several give an array of them, one per program.

use std::io::Write;

use stint_profile::merge;

use crate::args::MergeArgs;

pub fn run(a: MergeArgs) -> anyhow::Result<()> {
    let merged = merge::merge_paths_named(&a.files, &a.names.resolver())?;
    let mut text = merge::to_json_text(&merged)?;
    text.push('\n');
    if a.output.as_os_str() == "-" {
        std::io::stdout().lock().write_all(text.as_bytes())?;
        return Ok(());
    }
    crate::cache::write_atomically(&a.output, text.as_bytes(), 0o644)?;
    if !a.quiet {
        for m in &merged {
            let fns: usize = m.profile.threads.iter().map(|t| t.functions.len()).sum();
            eprintln!(
                "{}: {} runs of {}, {} thread roles, {} function rows",
                a.output.display(),
                m.runs,
                m.profile.program,
                m.profile.threads.len(),
                fns
            );
        }
    }
    Ok(())
}
