//! `stint diff`: two runs side by side and a CI gate (STYLE 23). Owns reading a diff input
//! (a profile file or any `stint-profile/1` JSON document, told apart by their first bytes),
//! matching rows by function name (addresses change between builds; tids between runs),
//! the change per row, the regression rule, and the three renderings (table, markdown, the
//! `stint-diff/1` JSON of [`DiffJson`]).
//!
//! Rows: per function, the metric summed over all threads; with `by_thread`, per thread role
//! (its name, else its start routine, else `main` for the main thread, else its first
//! function) and function. For `lock_wait` and `hold` the rows are sync objects, named by
//! kind and the function that first used them (`mutex@worker`), summed from the threads'
//! waits.
//!
//! A row regresses when the metric grew by more than the relative threshold *and* by at
//! least the absolute minimum; a function only the new run has counts as grown from zero.
//! Without a threshold nothing regresses (the diff only prints).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use stint_layout::FILE_MAGIC;
use thiserror::Error;

use crate::json::{profile_json, ProfileJson};
use crate::profile::{parse, ProfileError};

/// `schema` of the JSON `stint diff --format json` prints.
pub const DIFF_SCHEMA: &str = "stint-diff/1";

/// Why two inputs could not be compared. Messages name the problem only; the caller
/// prefixes the file.
#[derive(Debug, Error)]
pub enum DiffError {
    #[error("cannot read: {0}")]
    Read(std::io::Error),
    #[error("{0}")]
    Profile(#[from] ProfileError),
    #[error("not stint-profile JSON: {0}")]
    Json(serde_json::Error),
    #[error("schema {0:?}, want stint-profile/1")]
    Schema(String),
    #[error("neither a profile file nor stint-profile/1 JSON")]
    NotAProfile,
    #[error("self times need call paths (not in this profile)")]
    NoSelfTimes,
    #[error("{metric} was off in this run (no value for any {what})")]
    MetricOff { metric: &'static str, what: &'static str },
}

/// What is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Calls,
    Cpu,
    Wall,
    #[serde(rename = "self")]
    SelfTime,
    LockWait,
    Hold,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::Calls => "calls",
            Metric::Cpu => "cpu",
            Metric::Wall => "wall",
            Metric::SelfTime => "self",
            Metric::LockWait => "lock_wait",
            Metric::Hold => "hold",
        }
    }

    /// The unit of the values in [`DiffRow`]: `calls` or `ns`.
    pub fn unit(self) -> &'static str {
        if self == Metric::Calls {
            "calls"
        } else {
            "ns"
        }
    }

    fn is_lock(self) -> bool {
        matches!(self, Metric::LockWait | Metric::Hold)
    }

    /// The value of `n` of this metric, for display: calls as they are, times in ms.
    fn show(self, n: u64) -> String {
        if self == Metric::Calls {
            n.to_string()
        } else {
            format!("{:.3}", n as f64 / 1e6)
        }
    }

    /// A change with its sign; none for one that shows as zero (`0.000`, not `-0.000`).
    fn show_signed(self, n: i64) -> String {
        let shown = self.show(n.unsigned_abs());
        let sign = if shown.bytes().all(|b| b == b'0' || b == b'.') {
            ""
        } else if n > 0 {
            "+"
        } else {
            "-"
        };
        format!("{sign}{shown}")
    }

    /// The display unit of [`Metric::show`].
    fn shown_unit(self) -> &'static str {
        if self == Metric::Calls {
            "calls"
        } else {
            "ms"
        }
    }
}

/// The gate: a row regresses when it grew by more than `threshold_pct` percent of its base
/// and by at least `min_abs` (in the metric's unit: calls, or ns).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    pub threshold_pct: f64,
    pub min_abs: u64,
}

/// How to compare.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DiffOptions {
    pub metric: Metric,
    /// Rows per thread role and function instead of per function.
    pub by_thread: bool,
    /// `None`: only print, nothing regresses.
    pub gate: Option<Gate>,
}

/// One side of the diff: its document and the file it came from (for the header).
pub struct Side<'a> {
    pub doc: &'a ProfileJson,
    pub file: &'a str,
}

/// The run a side names in the header.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunJson {
    pub program: String,
    pub pid: u32,
    pub file: String,
}

/// Where a row stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// In both runs.
    Both,
    /// Only in the new run.
    New,
    /// Only in the base run.
    Gone,
    /// In both, but the metric has no value in one of them (untimed, or off).
    Off,
}

/// One row: a function (or a sync object), its values in both runs and the change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiffRow {
    /// The function's name, or for lock metrics `kind@first_used_in`.
    pub name: String,
    /// The thread role, with `by_thread`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    /// In [`Metric::unit`]; `null` where the run lacks the row or the metric had no value.
    pub base: Option<u64>,
    pub new: Option<u64>,
    /// `new - base` (a missing side counts as 0); `null` for `off`.
    pub change: Option<i64>,
    /// The change in percent of `base`; `null` where `base` is missing or 0.
    pub change_pct: Option<f64>,
    pub status: Status,
    /// The row grew past the gate.
    pub regression: bool,
}

/// The whole comparison, as `stint diff --format json` prints it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiffJson {
    /// Always [`DIFF_SCHEMA`].
    pub schema: String,
    pub metric: Metric,
    /// `calls` or `ns`.
    pub unit: String,
    pub by_thread: bool,
    pub base: RunJson,
    pub new: RunJson,
    /// `null` without `--threshold`.
    pub gate: Option<Gate>,
    /// Sorted by the size of the change, largest first.
    pub rows: Vec<DiffRow>,
    /// The rows that regressed, by name (`thread: name` with `by_thread`).
    pub regressions: Vec<String>,
}

impl DiffJson {
    pub fn regressed(&self) -> bool {
        !self.regressions.is_empty()
    }
}

/// Reads a diff input from its bytes: a profile file (by its magic) or a `stint-profile/1`
/// JSON document (its first non-blank byte is `{`); the extension does not matter.
pub fn parse_input(bytes: &[u8]) -> Result<ProfileJson, DiffError> {
    if bytes.starts_with(&FILE_MAGIC) {
        return Ok(profile_json(&parse(bytes)?));
    }
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        // `stint merge` of several programs (a test suite): one document per program.
        let docs: Vec<serde_json::Value> = serde_json::from_slice(bytes).map_err(DiffError::Json)?;
        let docs = docs
            .iter()
            .map(|d| parse_input(&serde_json::to_vec(d).map_err(DiffError::Json)?))
            .collect::<Result<Vec<_>, _>>()?;
        return suite(docs).ok_or(DiffError::NotAProfile);
    }
    if first != Some(&b'{') {
        return Err(DiffError::NotAProfile);
    }
    #[derive(Deserialize)]
    struct Head {
        schema: Option<String>,
    }
    let head: Head = serde_json::from_slice(bytes).map_err(DiffError::Json)?;
    match head.schema.as_deref() {
        Some(s) if s.starts_with("stint-profile/") => {}
        other => return Err(DiffError::Schema(other.unwrap_or("(none)").to_owned())),
    }
    serde_json::from_slice(bytes).map_err(DiffError::Json)
}

/// Several programs' documents as one: functions and the objects' first users are named
/// `program: function`, so rows of different programs (every one has a `main`) never meet.
/// A single document stays as it is.
fn suite(mut docs: Vec<ProfileJson>) -> Option<ProfileJson> {
    if docs.len() <= 1 {
        return docs.pop();
    }
    let names: Vec<String> = docs.iter().map(|d| d.program.clone()).collect();
    let mut all = docs[0].clone();
    all.program = format!("{} programs ({})", docs.len(), names.join(", "));
    all.pid = 0;
    all.ppid = 0;
    all.threads.clear();
    all.objects.clear();
    for d in docs {
        let prefix = |n: &str| format!("{}: {n}", d.program);
        for mut t in d.threads {
            for f in &mut t.functions {
                f.name = prefix(&f.name);
            }
            all.threads.push(t);
        }
        for mut o in d.objects {
            o.first_used_in = o.first_used_in.map(|f| prefix(&f));
            all.objects.push(o);
        }
    }
    Some(all)
}

/// Reads a diff input from a file ([`parse_input`]).
pub fn load_input(path: &std::path::Path) -> Result<ProfileJson, DiffError> {
    parse_input(&std::fs::read(path).map_err(DiffError::Read)?)
}

/// [`load_input`], a profile file's names resolved with `names` ([`crate::symbols`]) first.
pub fn load_input_named(path: &std::path::Path, names: &crate::symbols::Resolver) -> Result<ProfileJson, DiffError> {
    let bytes = std::fs::read(path).map_err(DiffError::Read)?;
    if bytes.starts_with(&FILE_MAGIC) {
        let mut p = parse(&bytes)?;
        p.resolve_names(names);
        return Ok(profile_json(&p));
    }
    parse_input(&bytes)
}

/// Which side of the diff an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    Base,
    New,
}

/// Compares `base` with `new`. An error says which side it is about.
pub fn diff(base: &Side, new: &Side, opts: &DiffOptions) -> Result<DiffJson, (Which, DiffError)> {
    let b = rows_of(base.doc, opts).map_err(|e| (Which::Base, e))?;
    let n = rows_of(new.doc, opts).map_err(|e| (Which::New, e))?;
    let mut keys: Vec<&(Option<String>, String)> = b.keys().chain(n.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut rows: Vec<DiffRow> = keys
        .into_iter()
        .map(|k| {
            let (bv, nv) = (b.get(k), n.get(k));
            let status = match (bv, nv) {
                (Some(Some(_)), Some(Some(_))) => Status::Both,
                (None, _) => Status::New,
                (_, None) => Status::Gone,
                _ => Status::Off,
            };
            let (bv, nv) = (bv.copied().flatten(), nv.copied().flatten());
            // A side without the row counts as 0; a side with the row but no value is unknown.
            let change = match status {
                Status::Both => Some(nv.unwrap_or(0) as i128 - bv.unwrap_or(0) as i128),
                Status::New => nv.map(i128::from),
                Status::Gone => bv.map(|b| -i128::from(b)),
                Status::Off => None,
            }
            .map(|c| c.clamp(i64::MIN as i128, i64::MAX as i128) as i64);
            let change_pct = match (bv, change) {
                (Some(base), Some(c)) if base > 0 => Some(c as f64 * 100.0 / base as f64),
                _ => None,
            };
            let regression = match (opts.gate, change) {
                (Some(g), Some(c)) if c > 0 => c as u64 >= g.min_abs && change_pct.is_none_or(|p| p > g.threshold_pct),
                _ => false,
            };
            DiffRow {
                name: k.1.clone(),
                thread: k.0.clone(),
                base: bv,
                new: nv,
                change,
                change_pct,
                status,
                regression,
            }
        })
        .collect();
    rows.sort_by(|x, y| {
        let size = |r: &DiffRow| r.change.map_or(0, |c| c.unsigned_abs());
        size(y)
            .cmp(&size(x))
            .then(y.regression.cmp(&x.regression))
            .then_with(|| (&x.thread, &x.name).cmp(&(&y.thread, &y.name)))
    });
    let regressions = rows.iter().filter(|r| r.regression).map(row_label).collect();
    let run = |s: &Side| RunJson { program: s.doc.program.clone(), pid: s.doc.pid, file: s.file.to_owned() };
    Ok(DiffJson {
        schema: DIFF_SCHEMA.to_owned(),
        metric: opts.metric,
        unit: opts.metric.unit().to_owned(),
        by_thread: opts.by_thread,
        base: run(base),
        new: run(new),
        gate: opts.gate,
        rows,
        regressions,
    })
}

fn row_label(r: &DiffRow) -> String {
    match &r.thread {
        Some(t) => format!("{t}: {}", r.name),
        None => r.name.clone(),
    }
}

type Key = (Option<String>, String);

/// The metric per row of one document: `Some(None)` for a row that exists but has no value.
fn rows_of(doc: &ProfileJson, opts: &DiffOptions) -> Result<BTreeMap<Key, Option<u64>>, DiffError> {
    let mut rows: BTreeMap<Key, Option<u64>> = BTreeMap::new();
    let mut add = |key: Key, v: Option<u64>| {
        let slot = rows.entry(key).or_insert(None);
        if let Some(v) = v {
            *slot = Some(slot.unwrap_or(0).saturating_add(v));
        }
    };
    if opts.metric == Metric::SelfTime {
        return Err(DiffError::NoSelfTimes);
    }
    let objects: BTreeMap<&str, Option<&str>> =
        doc.objects.iter().map(|o| (o.address.as_str(), o.first_used_in.as_deref())).collect();
    for t in &doc.threads {
        // The same roles `stint merge` sums threads by.
        let role = opts.by_thread.then(|| crate::merge::role(doc, t).to_string());
        match opts.metric {
            Metric::SelfTime => {}
            Metric::Calls | Metric::Cpu | Metric::Wall => {
                for f in &t.functions {
                    let v = match opts.metric {
                        Metric::Calls => Some(f.calls),
                        Metric::Cpu => f.cpu_ns,
                        _ => f.wall_ns,
                    };
                    add((role.clone(), f.name.clone()), v);
                }
            }
            Metric::LockWait | Metric::Hold => {
                for w in &t.waits {
                    let user = w.object.as_deref().and_then(|a| objects.get(a).copied().flatten());
                    let name = format!("{}@{}", w.kind, user.or(w.object.as_deref()).unwrap_or("?"));
                    let v = if opts.metric == Metric::LockWait { w.wait_ns } else { w.hold_ns };
                    add((role.clone(), name), v);
                }
            }
        }
    }
    // A timed metric with no value anywhere was off: comparing it would pass any gate.
    if opts.metric != Metric::Calls && !rows.is_empty() && rows.values().all(Option::is_none) {
        let what = if opts.metric.is_lock() { "sync object" } else { "function" };
        return Err(DiffError::MetricOff { metric: opts.metric.name(), what });
    }
    Ok(rows)
}

fn status_cell(r: &DiffRow) -> &'static str {
    if r.regression {
        return "REGRESSION";
    }
    match r.status {
        Status::Both => "",
        Status::New => "new",
        Status::Gone => "gone",
        Status::Off => "off",
    }
}

fn value_cell(m: Metric, r: &DiffRow, v: Option<u64>, missing: Status) -> String {
    match v {
        Some(v) => m.show(v),
        None if r.status == missing => "-".into(),
        None => "off".into(),
    }
}

fn cells(d: &DiffJson, r: &DiffRow) -> [String; 5] {
    let m = d.metric;
    [
        value_cell(m, r, r.base, Status::New),
        value_cell(m, r, r.new, Status::Gone),
        r.change.map_or("-".into(), |c| m.show_signed(c)),
        r.change_pct.map_or("-".into(), |p| format!("{p:+.1}%")),
        status_cell(r).to_owned(),
    ]
}

fn gate_line(d: &DiffJson) -> String {
    match d.gate {
        None => "none (no --threshold: nothing fails)".into(),
        Some(g) => format!(
            "a row regresses when it grows by more than {}% and by at least {} {}",
            g.threshold_pct,
            if d.metric == Metric::Calls { g.min_abs.to_string() } else { (g.min_abs as f64 / 1e6).to_string() },
            d.metric.shown_unit()
        ),
    }
}

/// `calls`, or a time metric with its display unit: `cpu (ms)`.
fn title(m: Metric) -> String {
    if m == Metric::Calls {
        m.name().to_owned()
    } else {
        format!("{} ({})", m.name(), m.shown_unit())
    }
}

fn what(d: &DiffJson) -> &'static str {
    if d.metric.is_lock() {
        "sync object"
    } else {
        "function"
    }
}

/// The table: a header naming both runs, then base, new, change, %, status, (thread,) name.
pub fn to_table(d: &DiffJson) -> String {
    let mut s = String::new();
    let _ =
        writeln!(s, "stint diff: {} per {}{}", title(d.metric), what(d), if d.by_thread { " and thread" } else { "" });
    let _ = writeln!(s, "base: {} pid {}  {}", d.base.program, d.base.pid, d.base.file);
    let _ = writeln!(s, "new:  {} pid {}  {}", d.new.program, d.new.pid, d.new.file);
    let _ = writeln!(s, "gate: {}", gate_line(d));
    let _ = writeln!(s);
    let mut head: Vec<String> = ["BASE", "NEW", "CHANGE", "%", "STATUS"].map(String::from).to_vec();
    if d.by_thread {
        head.push("THREAD".into());
    }
    head.push(what(d).to_uppercase());
    let mut table: Vec<Vec<String>> = vec![head];
    for r in &d.rows {
        let mut row = cells(d, r).to_vec();
        if d.by_thread {
            row.push(r.thread.clone().unwrap_or_default());
        }
        row.push(r.name.clone());
        table.push(row);
    }
    let ncol = table[0].len();
    let width: Vec<usize> = (0..ncol).map(|c| table.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    for row in &table {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let w = width[c];
            if c < 4 {
                let _ = write!(line, "{cell:>w$}  ");
            } else if c + 1 < ncol {
                let _ = write!(line, "{cell:<w$}  ");
            } else {
                line.push_str(cell);
            }
        }
        let _ = writeln!(s, "{}", line.trim_end());
    }
    if d.rows.is_empty() {
        let _ = writeln!(s, "(no {}s in either run)", what(d));
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "{}", summary(d));
    s
}

fn summary(d: &DiffJson) -> String {
    let count = |st: Status| d.rows.iter().filter(|r| r.status == st).count();
    let mut s = format!("{} {}s: {} new, {} gone", d.rows.len(), what(d), count(Status::New), count(Status::Gone));
    if d.gate.is_some() {
        match d.regressions.len() {
            0 => s.push_str("; no regression"),
            n => {
                let _ = write!(s, "; {n} REGRESSION{}: {}", if n == 1 { "" } else { "S" }, d.regressions.join(", "));
            }
        }
    }
    s
}

fn md_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('|', "\\|").replace('`', "'")
}

/// A GitHub-flavoured markdown table for a PR comment, under a header naming both runs.
pub fn to_markdown(d: &DiffJson) -> String {
    let mut s = String::new();
    let run = |r: &RunJson| format!("`{}` pid {} (`{}`)", md_escape(&r.program), r.pid, md_escape(&r.file));
    let _ = writeln!(s, "### stint diff: {}\n", title(d.metric));
    let _ = writeln!(s, "base {} → new {}\n", run(&d.base), run(&d.new));
    let _ = writeln!(s, "Gate: {}.\n", gate_line(d));
    let thread = if d.by_thread { " thread |" } else { "" };
    let thread_rule = if d.by_thread { "---|" } else { "" };
    let _ = writeln!(s, "| {} |{thread} base | new | change | % | status |", what(d));
    let _ = writeln!(s, "|---|{thread_rule}--:|--:|--:|--:|---|");
    for r in &d.rows {
        let [b, n, c, p, st] = cells(d, r);
        let st = if r.regression { format!("**{st}**") } else { st };
        let th = match &r.thread {
            Some(t) => format!(" {} |", md_escape(t)),
            None => String::new(),
        };
        let _ = writeln!(s, "| `{}` |{th} {b} | {n} | {c} | {p} | {st} |", md_escape(&r.name));
    }
    let _ = writeln!(s, "\n{}", md_escape(&summary(d)));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{FunctionJson, ObjectJson, StateTimes, ThreadJson, WaitJson, SCHEMA};

    fn func(name: &str, calls: u64, cpu_ns: Option<u64>) -> FunctionJson {
        FunctionJson {
            name: name.into(),
            address: "0x1000".into(),
            calls,
            cpu_ns,
            wall_ns: cpu_ns,
            running: false,
            sampled: None,
        }
    }

    fn thread(tid: u32, name: Option<&str>, main: bool, functions: Vec<FunctionJson>) -> ThreadJson {
        ThreadJson {
            tid,
            name: name.map(String::from),
            start_routine: None,
            first_function: None,
            main,
            clock_source: None,
            timer_skipped: 0,
            unmatched_exits: 0,
            abandoned_frames: 0,
            shadow_overflow: 0,
            resyncs: 0,
            functions,
            running: false,
            creator_tid: None,
            start_ns: 0,
            end_ns: None,
            exit: "returned".into(),
            exit_value: Some(0),
            state: "EXITED".into(),
            states: StateTimes::default(),
            waits: vec![],
            wrap_skipped: 0,
            run_split: None,
            transitions: vec![],
            calltree: vec![],
            calltree_lost: 0,
        }
    }

    fn doc(pid: u32, threads: Vec<ThreadJson>) -> ProfileJson {
        ProfileJson {
            schema: SCHEMA.into(),
            program: "prog".into(),
            pid,
            ppid: 1,
            fork_child: false,
            threads,
            skipped_reentrant: 0,
            lost_threads: 0,
            tsc_hz: 1,
            objects: vec![],
            objects_lost: 0,
            warnings: vec![],
            process: Default::default(),
            compensation: None,
        }
    }

    fn gate(pct: f64, min_abs: u64) -> Option<Gate> {
        Some(Gate { threshold_pct: pct, min_abs })
    }

    fn run(b: &ProfileJson, n: &ProfileJson, metric: Metric, g: Option<Gate>) -> DiffJson {
        let opts = DiffOptions { metric, by_thread: false, gate: g };
        diff(&Side { doc: b, file: "a" }, &Side { doc: n, file: "b" }, &opts).unwrap()
    }

    fn row<'d>(d: &'d DiffJson, name: &str) -> &'d DiffRow {
        d.rows.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("no row {name}: {d:?}"))
    }

    #[test]
    fn calls_sum_over_threads_and_match_by_name() {
        let b = doc(
            1,
            vec![thread(1, None, true, vec![func("f", 10, None)]), thread(2, None, false, vec![func("f", 5, None)])],
        );
        let n = doc(2, vec![thread(7, None, true, vec![func("f", 16, None)])]);
        let d = run(&b, &n, Metric::Calls, None);
        let f = row(&d, "f");
        assert_eq!((f.base, f.new, f.change, f.status), (Some(15), Some(16), Some(1), Status::Both));
        assert!((f.change_pct.unwrap() - 100.0 / 15.0).abs() < 1e-9);
        assert!(!f.regression, "no gate, no regression");
        assert!(!d.regressed());
    }

    #[test]
    fn exact_gate_fails_on_one_more_call() {
        let b = doc(1, vec![thread(1, None, true, vec![func("f", 10, None), func("g", 3, None)])]);
        let n = doc(2, vec![thread(1, None, true, vec![func("f", 11, None), func("g", 2, None)])]);
        let d = run(&b, &n, Metric::Calls, gate(0.0, 0));
        assert_eq!(d.regressions, vec!["f".to_string()]);
        assert!(!row(&d, "g").regression, "a decrease is no regression");
    }

    #[test]
    fn same_run_passes_exact_gate() {
        let b = doc(1, vec![thread(1, None, true, vec![func("f", 10, Some(5)), func("g", 3, Some(1))])]);
        let d = run(&b, &b, Metric::Calls, gate(0.0, 0));
        assert!(!d.regressed());
        assert!(d.rows.iter().all(|r| r.change == Some(0)));
    }

    #[test]
    fn relative_threshold_is_strict() {
        let b = doc(1, vec![thread(1, None, true, vec![func("f", 100, None), func("g", 100, None)])]);
        let n = doc(2, vec![thread(1, None, true, vec![func("f", 105, None), func("g", 106, None)])]);
        let d = run(&b, &n, Metric::Calls, gate(5.0, 0));
        assert_eq!(d.regressions, vec!["g".to_string()]);
    }

    #[test]
    fn min_abs_ignores_small_changes() {
        // cpu: +2 ms on 1 ms is +200%, but under a 5 ms minimum.
        let b =
            doc(1, vec![thread(1, None, true, vec![func("f", 1, Some(1_000_000)), func("g", 1, Some(100_000_000))])]);
        let n =
            doc(2, vec![thread(1, None, true, vec![func("f", 1, Some(3_000_000)), func("g", 1, Some(110_000_000))])]);
        let d = run(&b, &n, Metric::Cpu, gate(5.0, 5_000_000));
        assert_eq!(d.regressions, vec!["g".to_string()]);
        assert_eq!(d.unit, "ns");
        // Sorted by size of change: g (+10 ms) before f (+2 ms).
        assert_eq!(d.rows.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["g", "f"]);
    }

    #[test]
    fn changes_too_small_to_show_have_no_sign() {
        assert_eq!(Metric::Cpu.show_signed(-400), "0.000");
        assert_eq!(Metric::Cpu.show_signed(600), "+0.001");
        assert_eq!(Metric::Cpu.show_signed(-2_500_000), "-2.500");
        assert_eq!(Metric::Calls.show_signed(-3), "-3");
        assert_eq!(Metric::Calls.show_signed(0), "0");
    }

    #[test]
    fn new_and_gone_functions() {
        let b = doc(1, vec![thread(1, None, true, vec![func("old", 4, None), func("f", 1, None)])]);
        let n = doc(2, vec![thread(1, None, true, vec![func("fresh", 2, None), func("f", 1, None)])]);
        let d = run(&b, &n, Metric::Calls, gate(0.0, 0));
        let (old, fresh) = (row(&d, "old"), row(&d, "fresh"));
        assert_eq!((old.status, old.base, old.new, old.change), (Status::Gone, Some(4), None, Some(-4)));
        assert_eq!((fresh.status, fresh.base, fresh.new, fresh.change), (Status::New, None, Some(2), Some(2)));
        assert_eq!(fresh.change_pct, None);
        assert_eq!(d.regressions, vec!["fresh".to_string()], "a new function with calls regresses");
        // Under a minimum larger than its calls it does not.
        assert!(!run(&b, &n, Metric::Calls, gate(0.0, 3)).regressed());
    }

    #[test]
    fn untimed_function_is_off_not_zero() {
        let b = doc(1, vec![thread(1, None, true, vec![func("f", 1, Some(10)), func("u", 1, None)])]);
        let n = doc(2, vec![thread(1, None, true, vec![func("f", 1, Some(10)), func("u", 9, None)])]);
        let d = run(&b, &n, Metric::Cpu, gate(0.0, 0));
        let u = row(&d, "u");
        assert_eq!((u.status, u.change, u.regression), (Status::Off, None, false));
        assert!(to_table(&d).lines().any(|l| l.contains("off") && l.ends_with(" u")), "{}", to_table(&d));
    }

    #[test]
    fn untimed_function_only_in_one_run() {
        let b = doc(1, vec![thread(1, None, true, vec![func("f", 1, Some(10)), func("u", 1, None)])]);
        let n = doc(2, vec![thread(1, None, true, vec![func("f", 1, Some(10))])]);
        let d = run(&b, &n, Metric::Cpu, gate(0.0, 0));
        let u = row(&d, "u");
        assert_eq!((u.status, u.change), (Status::Gone, None));
        let line = to_table(&d).lines().find(|l| l.ends_with(" u")).unwrap().to_owned();
        assert_eq!(line.split_whitespace().collect::<Vec<_>>(), ["off", "-", "-", "-", "gone", "u"]);
        let back = run(&n, &b, Metric::Cpu, gate(0.0, 0));
        let u = row(&back, "u");
        assert_eq!((u.status, u.change, u.regression), (Status::New, None, false));
    }

    #[test]
    fn metric_off_everywhere_is_an_error() {
        let b = doc(1, vec![thread(1, None, true, vec![func("f", 1, None)])]);
        let opts = DiffOptions { metric: Metric::Wall, by_thread: false, gate: gate(0.0, 0) };
        let e = diff(&Side { doc: &b, file: "a" }, &Side { doc: &b, file: "b" }, &opts).unwrap_err();
        assert_eq!(e.0, Which::Base);
        assert_eq!(e.1.to_string(), "wall was off in this run (no value for any function)");
    }

    #[test]
    fn self_needs_call_paths() {
        let b = doc(1, vec![thread(1, None, true, vec![func("f", 1, Some(1))])]);
        let opts = DiffOptions { metric: Metric::SelfTime, by_thread: false, gate: None };
        let e = diff(&Side { doc: &b, file: "a" }, &Side { doc: &b, file: "b" }, &opts).unwrap_err();
        assert_eq!(e.1.to_string(), "self times need call paths (not in this profile)");
    }

    #[test]
    fn by_thread_matches_roles_not_tids() {
        let b = doc(
            1,
            vec![
                thread(10, None, true, vec![func("f", 1, None)]),
                thread(11, Some("worker"), false, vec![func("f", 5, None)]),
                thread(12, Some("worker"), false, vec![func("f", 5, None)]),
            ],
        );
        let n = doc(
            2,
            vec![
                thread(20, None, true, vec![func("f", 1, None)]),
                thread(99, Some("worker"), false, vec![func("f", 11, None)]),
            ],
        );
        let opts = DiffOptions { metric: Metric::Calls, by_thread: true, gate: gate(0.0, 0) };
        let d = diff(&Side { doc: &b, file: "a" }, &Side { doc: &n, file: "b" }, &opts).unwrap();
        assert_eq!(d.rows.len(), 2);
        assert!(d.rows.iter().any(|r| r.thread.as_deref() == Some("main")), "{d:?}");
        let w = d.rows.iter().find(|r| r.thread.as_deref() == Some("worker")).unwrap();
        assert_eq!((w.base, w.new), (Some(10), Some(11)));
        assert_eq!(d.regressions, vec!["worker: f".to_string()]);
    }

    #[test]
    fn inherited_names_give_way_to_start_routines() {
        let mut t = vec![
            thread(10, Some("prog"), true, vec![func("f", 1, None)]),
            thread(11, Some("prog"), false, vec![func("f", 2, None)]),
            thread(12, Some("prog"), false, vec![func("f", 4, None)]),
            thread(13, Some("io"), false, vec![func("f", 8, None)]),
        ];
        t[1].start_routine = Some("reader".into());
        t[2].start_routine = Some("writer".into());
        t[3].start_routine = Some("writer".into());
        let b = doc(1, t);
        let opts = DiffOptions { metric: Metric::Calls, by_thread: true, gate: None };
        let d = diff(&Side { doc: &b, file: "a" }, &Side { doc: &b, file: "b" }, &opts).unwrap();
        let mut roles: Vec<(&str, u64)> =
            d.rows.iter().map(|r| (r.thread.as_deref().unwrap(), r.base.unwrap())).collect();
        roles.sort();
        assert_eq!(roles, [("io", 8), ("main", 1), ("reader", 2), ("writer", 4)]);
    }

    #[test]
    fn lock_waits_by_object_user() {
        let wait = |addr: &str, ns: u64| WaitJson {
            object: Some(addr.into()),
            object_name: None,
            kind: "mutex".into(),
            wait_ns: Some(ns),
            count: 1,
            contended: 1,
            hold_ns: Some(ns * 2),
            longest_wait_ns: None,
            longest_wait_in: None,
        };
        let obj = |addr: &str, user: &str| ObjectJson {
            address: addr.into(),
            kind: "mutex".into(),
            first_used_in: Some(user.into()),
            first_tid: 1,
            name: None,
            threads: vec![],
        };
        let mut b = doc(1, vec![thread(1, None, true, vec![])]);
        b.threads[0].waits = vec![wait("0x10", 100)];
        b.objects = vec![obj("0x10", "worker")];
        let mut n = doc(2, vec![thread(1, None, true, vec![]), thread(2, None, false, vec![])]);
        // Another address in the new run, and two threads waiting on it.
        n.threads[0].waits = vec![wait("0x20", 100)];
        n.threads[1].waits = vec![wait("0x20", 50)];
        n.objects = vec![obj("0x20", "worker")];
        let d = run(&b, &n, Metric::LockWait, None);
        let m = row(&d, "mutex@worker");
        assert_eq!((m.base, m.new), (Some(100), Some(150)));
        let h = run(&b, &n, Metric::Hold, None);
        assert_eq!(row(&h, "mutex@worker").new, Some(300));
    }

    #[test]
    fn inputs_told_apart_by_first_bytes() {
        let d = doc(3, vec![thread(1, None, true, vec![func("f", 2, None)])]);
        let text = format!("\n  {}", serde_json::to_string(&d).unwrap());
        assert_eq!(parse_input(text.as_bytes()).unwrap(), d);
        assert!(matches!(parse_input(b"garbage"), Err(DiffError::NotAProfile)));
        assert!(matches!(parse_input(b"{\"schema\": \"stint-diff/1\"}"), Err(DiffError::Schema(_))));
        assert!(matches!(parse_input(b"{\"schema\": "), Err(DiffError::Json(_))));
        // A profile's magic with a truncated header is a profile error, not JSON.
        assert!(matches!(parse_input(&FILE_MAGIC), Err(DiffError::Profile(_))));
        let meta = crate::synthetic::synthetic_meta("pigz", &[("main", "0x1139"), ("worker", "0x1189")]);
        let bytes = crate::synthetic::write_synthetic(&meta, &[(1234, vec![(0, 1), (1, 2)])]);
        let p = parse_input(&bytes).unwrap();
        assert_eq!((p.program.as_str(), p.threads[0].functions.len()), ("pigz", 2));
    }

    #[test]
    fn a_merge_of_several_programs_is_one_suite() {
        let mut a = doc(1, vec![thread(1, None, true, vec![func("main", 1, None), func("f", 2, None)])]);
        a.program = "alpha".into();
        let mut b = doc(2, vec![thread(2, None, true, vec![func("main", 1, None)])]);
        b.program = "beta".into();
        let text = serde_json::to_string(&vec![&a, &b]).unwrap();
        let s = parse_input(text.as_bytes()).unwrap();
        assert_eq!(s.program, "2 programs (alpha, beta)");
        let names: Vec<&str> = s.threads.iter().flat_map(|t| t.functions.iter().map(|f| f.name.as_str())).collect();
        assert_eq!(names, ["alpha: main", "alpha: f", "beta: main"], "every program's main stays its own row");
        let one = serde_json::to_string(&vec![&a]).unwrap();
        assert_eq!(parse_input(one.as_bytes()).unwrap(), a, "an array of one is that document");
        assert!(matches!(parse_input(b"[1]"), Err(DiffError::NotAProfile)));
        assert!(matches!(parse_input(b"[]"), Err(DiffError::NotAProfile)));
    }

    #[test]
    fn json_reads_back() {
        let b = doc(1, vec![thread(1, None, true, vec![func("f", 1, None)])]);
        let n = doc(2, vec![thread(1, None, true, vec![func("f", 2, None)])]);
        let d = run(&b, &n, Metric::Calls, gate(0.0, 0));
        let text = serde_json::to_string(&d).unwrap();
        let back: DiffJson = serde_json::from_str(&text).unwrap();
        assert_eq!(back, d);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["schema"], "stint-diff/1");
        assert_eq!(v["rows"][0]["regression"], true);
        assert_eq!(v["regressions"][0], "f");
    }

    #[test]
    fn table_and_markdown_name_both_runs_and_the_regression() {
        let b = doc(1, vec![thread(1, None, true, vec![func("f|g", 10, None)])]);
        let n = doc(2, vec![thread(1, None, true, vec![func("f|g", 12, None)])]);
        let d = run(&b, &n, Metric::Calls, gate(0.0, 0));
        let t = to_table(&d);
        assert!(t.contains("base: prog pid 1  a\n") && t.contains("new:  prog pid 2  b\n"), "{t}");
        let line = t.lines().find(|l| l.ends_with("f|g")).unwrap();
        assert_eq!(line.split_whitespace().collect::<Vec<_>>(), ["10", "12", "+2", "+20.0%", "REGRESSION", "f|g"]);
        assert!(t.ends_with("1 REGRESSION: f|g\n"), "{t}");
        let m = to_markdown(&d);
        assert!(m.contains("| function | base | new | change | % | status |\n|---|--:|--:|--:|--:|---|\n"), "{m}");
        assert!(m.contains("| `f\\|g` | 10 | 12 | +2 | +20.0% | **REGRESSION** |"), "{m}");
    }
}
