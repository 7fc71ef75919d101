//! CSV forms of the `stint report` tables (RFC 4180: comma-separated, CRLF-free `\n` line
//! ends, a field quoted when it holds a comma, a quote or a line break, quotes doubled):
//! per (thread, function) ([`functions_csv`]), per thread ([`threads_csv`]) and per (sync
//! object, thread) ([`locks_csv`]). One header line, then one record per row; figures are
//! plain integers in ns (no units, no rounding), so a spreadsheet or `awk` can sum them.
//!
//! A time that was not measured is written as the table writes it: `off` where the metric
//! was off, `open` for a timed function none of whose calls returned yet, an empty field for a function measured by calls only or a file without a TSC
//! calibration.

use crate::profile::Profile;
use crate::report::{
    end_ns, first_used_in, functions_sorted, select_threads, start_ns, start_routine, waits_by_time, TableOptions,
    Timing,
};
use stint_layout::{exit_kind_name, state_name, EXIT_UNKNOWN, N_STATES, STATE_EXITED};

/// One field, quoted if it needs to be.
pub fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// One record: the fields quoted as needed, joined by commas, ended by `\n`.
pub fn record<S: AsRef<str>>(fields: &[S]) -> String {
    let mut line = fields.iter().map(|f| field(f.as_ref())).collect::<Vec<_>>().join(",");
    line.push('\n');
    line
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(String::new, |n| n.to_string())
}

/// `tid,thread,function,address,calls,cpu_ns,wall_ns`: one record per (thread, function), in
/// the order and selection of `opts` (sort, thread filter, top; `width` does not shorten
/// names here).
pub fn functions_csv(p: &Profile, opts: &TableOptions) -> String {
    let mut out = record(&["tid", "thread", "function", "address", "calls", "cpu_ns", "wall_ns"]);
    for t in select_threads(p, opts.thread.as_deref()) {
        let mut rows = functions_sorted(p, t, opts.sort.unwrap_or_default());
        rows.truncate(opts.top.filter(|&n| n > 0).unwrap_or(usize::MAX));
        for f in rows {
            let (cpu, wall) = match f.timing {
                Timing::Off => ("off".to_owned(), "off".to_owned()),
                Timing::Open => ("open".to_owned(), "open".to_owned()),
                Timing::CallsOnly => (String::new(), String::new()),
                Timing::Timed => (opt(f.cpu_ns), opt(f.wall_ns)),
            };
            out.push_str(&record(&[
                t.tid.to_string(),
                t.name.clone().unwrap_or_default(),
                f.name,
                f.address,
                f.calls.to_string(),
                cpu,
                wall,
            ]));
        }
    }
    out
}

/// `tid,name,start_routine,creator,start_ns,end_ns,exit,<STATE>_ns…,wait_ns`: one record per
/// selected thread; a state's time is its TSC ticks in ns (empty without a calibration).
pub fn threads_csv(p: &Profile, opts: &TableOptions) -> String {
    let states: Vec<u32> = (0..N_STATES).filter(|&s| s != STATE_EXITED).collect();
    let mut head: Vec<String> =
        ["tid", "name", "start_routine", "creator", "start_ns", "end_ns", "exit"].map(String::from).to_vec();
    head.extend(states.iter().map(|&s| format!("{}_ns", state_name(s).unwrap_or("unknown"))));
    head.push("wait_ns".into());
    let mut out = record(&head);
    for t in select_threads(p, opts.thread.as_deref()) {
        let exit = if t.alive && t.exit_kind == EXIT_UNKNOWN { "" } else { exit_kind_name(t.exit_kind) };
        let mut row = vec![
            t.tid.to_string(),
            t.name.clone().unwrap_or_default(),
            start_routine(p, t).unwrap_or_default(),
            opt(t.creator_tid.map(u64::from)),
            start_ns(p, t).to_string(),
            opt(end_ns(p, t)),
            exit.to_owned(),
        ];
        row.extend(states.iter().map(|&s| opt(p.ticks_to_ns(t.state_ticks[s as usize]))));
        let wait = t.waits.iter().fold(0u64, |a, w| a.saturating_add(w.wait_ticks));
        row.push(opt(p.ticks_to_ns(wait)));
        out.push_str(&record(&row));
    }
    out
}

/// `object,kind,first_used_in,tid,thread,calls,contended,wait_ns,hold_ns`: one record per
/// (sync object, selected thread that waited on it), the thread's waits most first.
pub fn locks_csv(p: &Profile, opts: &TableOptions) -> String {
    let mut out =
        record(&["object", "kind", "first_used_in", "tid", "thread", "calls", "contended", "wait_ns", "hold_ns"]);
    for t in select_threads(p, opts.thread.as_deref()) {
        for w in waits_by_time(t) {
            let o = p.object(w.object);
            out.push_str(&record(&[
                o.map_or_else(String::new, |o| format!("{:#x}", o.address)),
                o.map_or("unknown", |o| o.kind_name()).to_owned(),
                o.and_then(|o| first_used_in(p, o)).unwrap_or_default(),
                t.tid.to_string(),
                t.name.clone().unwrap_or_default(),
                w.count.to_string(),
                w.contended.to_string(),
                opt(p.ticks_to_ns(w.wait_ticks)),
                opt(p.ticks_to_ns(w.hold_ticks)),
            ]));
        }
    }
    out
}
