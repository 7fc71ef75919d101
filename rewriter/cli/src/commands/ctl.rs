//! `stint ctl`: switch metrics on and off in a running rewritten program, per function and
//! per thread, show what is on, and post snapshot requests (D10). The operations are
//! [`stint_profile::ctl`]'s; this module calls them and prints what they return.

use std::io::Write;
use std::time::Duration;

use anyhow::Result;
use stint_profile::ctl::{Access, Focus, LiveProfile, Status};

use crate::args::{CtlAction, CtlArgs, FocusArgs, OnOff};

pub fn run(args: CtlArgs) -> Result<()> {
    let path = &args.profile;
    let mut out = std::io::stdout().lock();
    match args.action {
        CtlAction::Status { json } => {
            let status = LiveProfile::open(path, Access::Read)?.status();
            let text = if json { serde_json::to_string_pretty(&status)? + "\n" } else { status_text(&status) };
            write!(out, "{text}")?;
        }
        CtlAction::Enable(f) => focus(path, f, true, &mut out)?,
        CtlAction::Disable(f) => focus(path, f, false, &mut out)?,
        CtlAction::Snapshot { wait_ms } => {
            let live = LiveProfile::open(path, Access::Change)?;
            writeln!(out, "{}", live.snapshot(Duration::from_millis(wait_ms))?)?;
        }
        CtlAction::Sampling { state, wait_ms } => {
            let live = LiveProfile::open(path, Access::Change)?;
            writeln!(out, "{}", live.sampling(state == OnOff::On, Duration::from_millis(wait_ms))?)?;
        }
    }
    Ok(())
}

/// `enable` / `disable`: one line per metric, printed as each is applied.
fn focus(path: &std::path::Path, f: FocusArgs, on: bool, out: &mut impl Write) -> Result<()> {
    let focus = Focus::new(&f.metrics, on, f.functions, f.threads)?;
    let live = LiveProfile::open(path, Access::Change)?;
    for sel in focus.selections() {
        writeln!(out, "{}", live.apply(&sel)?)?;
    }
    Ok(())
}

/// The table of `stint ctl … status`.
fn status_text(st: &Status) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let state = if st.alive { "running" } else { "ended" };
    let _ = writeln!(s, "{}: {} (pid {}, {state})", st.profile, st.program, st.pid);
    let c = &st.control;
    match c.control_file.as_str() {
        "none" => {}
        "applied" => {
            let _ = writeln!(s, "control file: {} (applied at start)", c.control_message);
        }
        other => {
            let _ = writeln!(s, "control file: {other}: {}", c.control_message);
        }
    }
    // Only for a program rewritten with sampling (the others have nothing to switch).
    if let Some(state) = &st.sampling {
        let _ = writeln!(s, "sampling: {state} ({} function-thread pairs sampled)", st.sampled_points);
    }
    let _ = writeln!(s, "\nMETRIC       POINTS ON      THREADS   FUNCTIONS");
    for m in &st.metrics {
        if m.points == 0 {
            let _ = writeln!(s, "{:<12} not built in", m.metric);
            continue;
        }
        let _ = writeln!(
            s,
            "{:<12} {:<14} {:<9} {}",
            m.metric,
            format!("{} of {}", m.points_on, m.points),
            m.threads,
            m.functions
        );
    }
    let _ = writeln!(s, "\nTID      NAME             STATE              MEASURES             CLOCK");
    for t in &st.threads {
        let _ = writeln!(
            s,
            "{:<8} {:<16} {:<18} {:<20} {}",
            t.tid,
            t.name.as_deref().unwrap_or("-"),
            t.state.as_deref().unwrap_or("?"),
            t.measures,
            t.clock_source.as_deref().unwrap_or("-")
        );
    }
    if st.ended_threads > 0 {
        let _ = writeln!(s, "({} ended threads not shown)", st.ended_threads);
    }
    if c.last_snapshot != 0 {
        let took = st.threads.iter().filter(|t| t.snapshot == c.last_snapshot).count();
        let _ = writeln!(s, "\nsnapshot {}: {took} of {} live threads took it", c.last_snapshot, st.threads.len());
    }
    if c.changes != 0 {
        let _ = writeln!(s, "changes by stint ctl: {}", c.changes);
    }
    s
}
