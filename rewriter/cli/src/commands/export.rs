//! `stint export`: profile files to the formats of the viewers people already use (D20). Reads
//! every profile (an unreadable one stops the export with `file: problem`), renders the
//! format's bytes with its module in `crate::export` (one `match` arm per format), and writes
//! them to a temporary name beside the output and renames it (or prints them with `-o -`),
//! so a failed export never leaves a partial file. A progress bar on stderr steps per thread
//! (shown only on a terminal, and only when the export takes a while). `openmetrics` is the
//! exposition `stint serve` answers on `/metrics` ([`stint_profile::openmetrics`]), for
//! node_exporter's textfile collector; it goes to stdout without `-o`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use indicatif::{ProgressBar, ProgressStyle};
use stint_profile::openmetrics::{self, Status};
use stint_profile::profile::{self, Profile};

use crate::args::{ExportArgs, ExportFormat, ExportWeight};
use crate::cache::write_atomically;
use crate::export::{chrome, firefox, folded, perfetto, pprof, Weight};

pub fn run(a: ExportArgs) -> anyhow::Result<()> {
    let profiles = a
        .profiles
        .iter()
        .map(|p| profile::load(p).map_err(|e| anyhow!("{}: {e}", p.display())))
        .collect::<anyhow::Result<Vec<Profile>>>()?;
    let weight = match a.weight {
        Some(ExportWeight::Calls) => Weight::Calls,
        Some(ExportWeight::Cpu) => Weight::Cpu,
        Some(ExportWeight::Wall) => Weight::Wall,
        None => Weight::default_for(&profiles),
    };
    let threads: usize = profiles.iter().map(|p| p.threads.len()).sum();
    let progress = ProgressBar::new(threads as u64);
    progress.set_style(
        ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} threads").unwrap_or(ProgressStyle::default_bar()),
    );
    progress.set_message(format!("export {:?}", a.format).to_lowercase());
    let (bytes, ext): (Vec<u8>, &str) = match a.format {
        ExportFormat::Perfetto => (perfetto::render(&profiles, &progress), "pftrace"),
        ExportFormat::Chrome => (chrome::render(&profiles, &progress)?, "trace.json"),
        ExportFormat::Firefox => (firefox::render(&profiles, weight, &progress)?, "firefox.json"),
        ExportFormat::Pprof => (pprof::render(&profiles, &progress)?, "pb.gz"),
        ExportFormat::Folded => (folded::render(&profiles, weight, &progress), "folded"),
        ExportFormat::Openmetrics => {
            let opts = openmetrics::Options { top: a.top, ..openmetrics::Options::default() };
            let with_status: Vec<(Profile, Status)> = profiles.iter().map(|p| (p.clone(), Status::of(p))).collect();
            (openmetrics::render(&with_status, &opts).into_bytes(), "prom")
        }
        ExportFormat::Svg => (
            folded::render_svg(&profiles, weight, &progress)
                .map_err(|e| anyhow!("{}: {e} (try --weight calls)", a.profiles[0].display()))?,
            "svg",
        ),
    };
    progress.finish_and_clear();
    // OpenMetrics is text for a collector or a pipe: stdout unless -o says otherwise.
    let to_stdout = PathBuf::from("-");
    let output = match (&a.output, a.format) {
        (Some(o), _) => o.clone(),
        (None, ExportFormat::Openmetrics) => to_stdout,
        (None, _) => default_output(&a.profiles[0], ext),
    };
    if output.as_os_str() == "-" {
        std::io::stdout().lock().write_all(&bytes)?;
        return Ok(());
    }
    write_atomically(&output, &bytes, 0o644)?;
    if !a.quiet {
        eprintln!("{}: {} bytes, {threads} thread(s) of {} profile(s)", output.display(), bytes.len(), profiles.len());
    }
    Ok(())
}

/// `prog.1234.stint` → `./prog.1234.<ext>`: in the current directory, never beside the
/// profile (profiles live in a runtime directory that is not the user's).
fn default_output(profile: &Path, ext: &str) -> PathBuf {
    let name = profile.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "profile".into());
    let stem = name.strip_suffix(".stint").unwrap_or(&name);
    PathBuf::from(format!("{stem}.{ext}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_output_is_the_profile_name_with_the_format_extension() {
        assert_eq!(
            default_output(Path::new("/run/user/1/stint/prog.42.stint"), "pb.gz"),
            PathBuf::from("prog.42.pb.gz")
        );
        assert_eq!(default_output(Path::new("x.bin"), "svg"), PathBuf::from("x.bin.svg"));
    }
}
