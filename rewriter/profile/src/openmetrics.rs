//! The OpenMetrics exposition of a set of profiles, for Prometheus (DESIGN D20: outputs go
//! where users already look): what `stint serve` answers on `/metrics` and `stint export
//! --format openmetrics` writes for one file. [`render`] is a pure function from typed
//! profiles to text; [`Scraper`] is the state `serve` keeps between scrapes (which files to
//! read, which ended processes were already shown once, the error counter).
//!
//! The text is encoded by `prometheus-client` (the Prometheus project's Rust client): a
//! [`Collector`] hands it one family at a time, and the crate writes the `# HELP`, `# TYPE`,
//! `# UNIT` lines, the `_total` suffix of counters, the escaping of label values (`\\`, `"`,
//! newline) and the closing `# EOF`; it writes the older Prometheus text format 0.0.4 from
//! the same families ([`TextFormat::Prometheus`]) for clients that ask for it.
//!
//! # Families
//! All names start with `stint_`, times are seconds, counters end in `_total`. Every
//! per-process family has the labels `program` and `pid`; no family has a tid (thread ids
//! churn; Prometheus' guidance is to keep label cardinality low): threads are counted by
//! state and by role (`crate::merge::role`: main, the thread's name, its start routine).
//!
//! | family | type | extra labels | what |
//! | --- | --- | --- | --- |
//! | `stint_process_ended` | gauge | | 1 in the one exposition that shows a process after it ended |
//! | `stint_process_start_time_seconds` | gauge | | when measuring started (Unix time) |
//! | `stint_function_calls_total` | counter | `function` | calls, for the top-N functions by CPU time |
//! | `stint_function_cpu_seconds_total` | counter | `function` | inclusive CPU time (timed functions) |
//! | `stint_function_wall_seconds_total` | counter | `function` | inclusive wall time (timed functions) |
//! | `stint_lock_acquisitions_total` | counter | `lock`, `kind` | calls that acquired or waited successfully |
//! | `stint_lock_contended_total` | counter | `lock`, `kind` | of those, the ones that found the object busy |
//! | `stint_lock_wait_seconds_total` | counter | `lock`, `kind` | time blocked |
//! | `stint_lock_hold_seconds_total` | counter | `lock`, `kind` | time held (mutexes, rwlocks) |
//! | `stint_threads` | gauge | `state` | threads the profile holds, by the state they are in |
//! | `stint_thread_state_seconds_total` | counter | `state` | time all threads spent in each state |
//! | `stint_role_threads` | gauge | `role` | running threads by role |
//! | `stint_clock_source_threads` | gauge | `source` | threads by the clock of their CPU timer |
//! | `stint_lost_threads_total` | counter | | threads that got no column (not measured) |
//! | `stint_skipped_events_total` | counter | `reason` | events not recorded: `reentrant`, `timer`, `wrapper` |
//! | `stint_lost_objects_total` | counter | | sync objects not recorded (table full) |
//! | `stint_scrape_profiles` | gauge | | `serve`: profiles in this exposition |
//! | `stint_scrape_skipped_files` | gauge | | `serve`: files skipped in this scrape (corrupt, foreign) |
//! | `stint_scrape_errors_total` | counter | | `serve`: files skipped since it started |
//! | `stint_scrape_duration_seconds` | gauge | | `serve`: time to read the profiles of this scrape |
//!
//! Functions are named as the report names them (D14), summed over threads and points of the
//! same name; the top N by inclusive CPU time (then calls, then name) are listed, so one
//! program adds at most N series per function family. Lock objects are named as the report
//! names them: by the function that first used them, else their address; objects of one kind
//! with the same name are summed (as `stint merge` does); the top N by wait time are listed.
//! Without a TSC calibration the time families have no samples.
//!
//! # Ended processes
//! A profile whose process has ended is shown once more with `stint_process_ended 1`, so the
//! last figures reach Prometheus, and then no more: [`Scraper`] remembers it (by path, pid
//! and start time) for as long as the file exists.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use stint_layout::{OBJ_MUTEX, OBJ_RWLOCK, STATE_EXITED};

use crate::json::profile_json;
use crate::profile::{self, Profile};
use crate::report::{self, first_used_in, state_label};

/// Functions and locks listed per process when the caller does not say.
pub const DEFAULT_TOP: usize = 10;

/// Whether a process still ran when its profile was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Live,
    /// Ended: this is the exposition that shows it once more, marked.
    Ended,
}

impl Status {
    /// The status of a profile as it was read.
    pub fn of(p: &Profile) -> Status {
        if p.alive {
            Status::Live
        } else {
            Status::Ended
        }
    }
}

/// The two text formats Prometheus reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextFormat {
    /// OpenMetrics 1.0 text (`# EOF` at the end).
    OpenMetrics,
    /// The Prometheus text format 0.0.4.
    Prometheus,
}

impl TextFormat {
    /// The HTTP `Content-Type` of the format.
    pub fn content_type(self) -> &'static str {
        match self {
            TextFormat::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            TextFormat::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// The format for an HTTP `Accept` header: OpenMetrics unless the client names
    /// `text/plain` and not OpenMetrics (Prometheus names both, curl neither).
    pub fn negotiate(accept: Option<&str>) -> TextFormat {
        match accept {
            Some(a) if a.contains("text/plain") && !a.contains("application/openmetrics-text") => {
                TextFormat::Prometheus
            }
            _ => TextFormat::OpenMetrics,
        }
    }
}

/// Figures of one `serve` scrape (families without program labels).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScrapeStats {
    /// Files skipped in this scrape.
    pub skipped: u64,
    /// Files skipped since the server started.
    pub errors_total: u64,
    /// Seconds spent finding and reading the profiles.
    pub duration_s: f64,
}

/// What [`render`] puts in.
#[derive(Clone, Debug)]
pub struct Options {
    /// Functions (by CPU time) and lock objects (by wait time) listed per process.
    pub top: usize,
    pub format: TextFormat,
    /// The scrape families of `serve`; `None` for an export of files.
    pub scrape: Option<ScrapeStats>,
}

impl Default for Options {
    fn default() -> Options {
        Options { top: DEFAULT_TOP, format: TextFormat::OpenMetrics, scrape: None }
    }
}

type Labels = Vec<(String, String)>;

#[derive(Clone, Copy, Debug)]
enum Value {
    Int(u64),
    Float(f64),
}

/// One metric family: its name without the prefix, the unit and the `_total` suffix.
#[derive(Debug)]
struct Family {
    name: &'static str,
    help: &'static str,
    seconds: bool,
    counter: bool,
    samples: Vec<(Labels, Value)>,
}

impl Family {
    fn new(name: &'static str, help: &'static str, counter: bool, seconds: bool) -> Family {
        Family { name, help, seconds, counter, samples: Vec::new() }
    }
}

/// The families of one exposition, handed to `prometheus-client` as a collector.
#[derive(Debug)]
struct Families(Vec<Family>);

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            let unit = f.seconds.then_some(Unit::Seconds);
            let ty = if f.counter {
                ConstCounter::<u64>::new(0).metric_type()
            } else {
                ConstGauge::<i64>::new(0).metric_type()
            };
            let mut m = encoder.encode_descriptor(f.name, f.help, unit.as_ref(), ty)?;
            for (labels, v) in &f.samples {
                let s = m.encode_family(labels)?;
                match (f.counter, *v) {
                    (true, Value::Int(n)) => ConstCounter::new(n).encode(s)?,
                    (true, Value::Float(x)) => ConstCounter::new(x).encode(s)?,
                    (false, Value::Int(n)) => ConstGauge::new(n).encode(s)?,
                    (false, Value::Float(x)) => ConstGauge::new(x).encode(s)?,
                }
            }
        }
        Ok(())
    }
}

/// Index of each family in the list [`render`] builds.
mod fam {
    pub const ENDED: usize = 0;
    pub const START: usize = 1;
    pub const CALLS: usize = 2;
    pub const CPU: usize = 3;
    pub const WALL: usize = 4;
    pub const LOCK_COUNT: usize = 5;
    pub const LOCK_CONTENDED: usize = 6;
    pub const LOCK_WAIT: usize = 7;
    pub const LOCK_HOLD: usize = 8;
    pub const THREADS: usize = 9;
    pub const STATE_SECONDS: usize = 10;
    pub const ROLE: usize = 11;
    pub const CLOCK: usize = 12;
    pub const LOST_THREADS: usize = 13;
    pub const SKIPPED: usize = 14;
    pub const LOST_OBJECTS: usize = 15;
}

fn families() -> Vec<Family> {
    vec![
        Family::new("process_ended", "1 in the last exposition of a process that has ended, else 0", false, false),
        Family::new("process_start_time", "When the process started measuring, Unix time", false, true),
        Family::new("function_calls", "Calls of the function, top functions by CPU time", true, false),
        Family::new("function_cpu", "Inclusive CPU time of the function", true, true),
        Family::new("function_wall", "Inclusive wall time of the function", true, true),
        Family::new("lock_acquisitions", "Calls that acquired or waited on the object successfully", true, false),
        Family::new("lock_contended", "Acquisitions that found the object busy", true, false),
        Family::new("lock_wait", "Time threads were blocked on the object", true, true),
        Family::new("lock_hold", "Time the mutex or rwlock was held", true, true),
        Family::new("threads", "Threads the profile holds, by the state they are in", false, false),
        Family::new("thread_state", "Time all threads spent in each state", true, true),
        Family::new("role_threads", "Running threads by role (main, name, start routine)", false, false),
        Family::new("clock_source_threads", "Threads by the clock of their CPU timer", false, false),
        Family::new("lost_threads", "Threads that found no free column (not measured)", true, false),
        Family::new(
            "skipped_events",
            "Events not recorded (reentrant: in a signal handler; timer; wrapper)",
            true,
            false,
        ),
        Family::new("lost_objects", "Sync objects not recorded because the table was full", true, false),
    ]
}

/// The exposition of `profiles` (each with whether its process ended) in `opts.format`.
pub fn render(profiles: &[(Profile, Status)], opts: &Options) -> String {
    let mut fams = families();
    for (p, status) in profiles {
        add_profile(&mut fams, p, *status, opts.top);
    }
    if let Some(s) = opts.scrape {
        let mut one = |name, help, counter, seconds, v| {
            let mut f = Family::new(name, help, counter, seconds);
            f.samples.push((Vec::new(), v));
            fams.push(f);
        };
        one("scrape_profiles", "Profiles in this exposition", false, false, Value::Int(profiles.len() as u64));
        one(
            "scrape_skipped_files",
            "Files skipped in this scrape (corrupt or foreign)",
            false,
            false,
            Value::Int(s.skipped),
        );
        one("scrape_errors", "Files skipped since the server started", true, false, Value::Int(s.errors_total));
        one(
            "scrape_duration",
            "Time to find and read the profiles of this scrape",
            false,
            true,
            Value::Float(s.duration_s),
        );
    }
    let mut registry = Registry::with_prefix("stint");
    registry.register_collector(Box::new(Families(fams)));
    let mut out = String::new();
    // Writing into a String does not fail, and every family is well formed.
    let _ = match opts.format {
        TextFormat::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
        TextFormat::Prometheus => prometheus_client::encoding::prometheus_text::encode(&mut out, &registry),
    };
    out
}

fn seconds(ns: u64) -> Value {
    Value::Float(ns as f64 / 1e9)
}

fn add_profile(fams: &mut [Family], p: &Profile, status: Status, top: usize) {
    let base: Labels = vec![("program".into(), p.program.clone()), ("pid".into(), p.pid.to_string())];
    let with = |k: &str, v: &str| {
        let mut l = base.clone();
        l.push((k.to_owned(), v.to_owned()));
        l
    };
    let mut push = |i: usize, labels: Labels, v: Value| fams[i].samples.push((labels, v));

    push(fam::ENDED, base.clone(), Value::Int(u64::from(status == Status::Ended)));
    push(fam::START, base.clone(), Value::Float(p.start_realtime_ns as f64 / 1e9));

    // Functions: summed over threads by name; the top N by CPU time, then calls, then name.
    let mut funcs: BTreeMap<String, (u64, Option<u64>, Option<u64>)> = BTreeMap::new();
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    };
    for t in &p.threads {
        for f in report::functions(p, t) {
            let e = funcs.entry(f.name).or_default();
            e.0 = e.0.saturating_add(f.calls);
            e.1 = add(e.1, f.cpu_ns);
            e.2 = add(e.2, f.wall_ns);
        }
    }
    let mut funcs: Vec<_> = funcs.into_iter().collect();
    funcs.sort_by(|(an, a), (bn, b)| b.1.unwrap_or(0).cmp(&a.1.unwrap_or(0)).then(b.0.cmp(&a.0)).then(an.cmp(bn)));
    for (name, (calls, cpu, wall)) in funcs.into_iter().take(top) {
        push(fam::CALLS, with("function", &name), Value::Int(calls));
        if let Some(cpu) = cpu {
            push(fam::CPU, with("function", &name), seconds(cpu));
        }
        if let Some(wall) = wall {
            push(fam::WALL, with("function", &name), seconds(wall));
        }
    }

    // Lock objects: (kind, name) → (count, contended, wait ticks, hold ticks, held kind);
    // top N by wait.
    type LockSums = (u64, u64, u64, u64, bool);
    let mut locks: BTreeMap<(String, String), LockSums> = BTreeMap::new();
    for t in &p.threads {
        for w in &t.waits {
            let o = p.object(w.object);
            let name = o
                .and_then(|o| first_used_in(p, o))
                .or_else(|| o.map(|o| format!("{:#x}", o.address)))
                .unwrap_or_else(|| format!("object {}", w.object));
            let kind = o.map_or("unknown", |o| o.kind_name());
            let e = locks.entry((kind.to_owned(), name)).or_default();
            e.0 = e.0.saturating_add(w.count);
            e.1 = e.1.saturating_add(w.contended);
            e.2 = e.2.saturating_add(w.wait_ticks);
            e.3 = e.3.saturating_add(w.hold_ticks);
            e.4 |= matches!(w.kind, OBJ_MUTEX | OBJ_RWLOCK);
        }
    }
    let mut locks: Vec<_> = locks.into_iter().collect();
    locks.sort_by(|(ak, a), (bk, b)| b.2.cmp(&a.2).then(b.0.cmp(&a.0)).then(ak.cmp(bk)));
    for ((kind, name), (count, contended, wait, hold, holds)) in locks.into_iter().take(top) {
        let mut l = with("lock", &name);
        l.push(("kind".into(), kind));
        push(fam::LOCK_COUNT, l.clone(), Value::Int(count));
        push(fam::LOCK_CONTENDED, l.clone(), Value::Int(contended));
        if let Some(ns) = p.ticks_to_ns(wait) {
            push(fam::LOCK_WAIT, l.clone(), seconds(ns));
        }
        if let (true, Some(ns)) = (holds, p.ticks_to_ns(hold)) {
            push(fam::LOCK_HOLD, l, seconds(ns));
        }
    }

    // Threads by state, time per state, by role, by clock source.
    let mut by_state: BTreeMap<u32, u64> = BTreeMap::new();
    let mut state_ticks: BTreeMap<u32, u64> = BTreeMap::new();
    let mut clocks: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut timer_skipped, mut wrap_skipped) = (0u64, 0u64);
    for t in &p.threads {
        *by_state.entry(t.thread_state).or_default() += 1;
        for (s, &ticks) in t.state_ticks.iter().enumerate() {
            if s as u32 != STATE_EXITED && ticks != 0 {
                let e = state_ticks.entry(s as u32).or_default();
                *e = e.saturating_add(ticks);
            }
        }
        if let Some(c) = &t.clock_source {
            *clocks.entry(c.as_str()).or_default() += 1;
        }
        timer_skipped = timer_skipped.saturating_add(t.timer_skipped);
        wrap_skipped = wrap_skipped.saturating_add(t.wrap_skipped);
    }
    for (s, n) in by_state {
        push(fam::THREADS, with("state", state_label(s)), Value::Int(n));
    }
    for (s, ticks) in state_ticks {
        if let Some(ns) = p.ticks_to_ns(ticks) {
            push(fam::STATE_SECONDS, with("state", state_label(s)), seconds(ns));
        }
    }
    let doc = profile_json(p);
    let mut roles: BTreeMap<String, u64> = BTreeMap::new();
    for t in doc.threads.iter().filter(|t| t.running) {
        *roles.entry(crate::merge::role(&doc, t).to_string()).or_default() += 1;
    }
    for (role, n) in roles {
        push(fam::ROLE, with("role", &role), Value::Int(n));
    }
    for (c, n) in clocks {
        push(fam::CLOCK, with("source", c), Value::Int(n));
    }

    // The profile's health.
    push(fam::LOST_THREADS, base.clone(), Value::Int(p.lost_threads));
    for (reason, n) in [("reentrant", p.skipped_reentrant), ("timer", timer_skipped), ("wrapper", wrap_skipped)] {
        push(fam::SKIPPED, with("reason", reason), Value::Int(n));
    }
    push(fam::LOST_OBJECTS, base, Value::Int(p.objects_lost));
}

/// Where [`Scraper`] finds profiles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The live profiles of this user's processes, as `stint ls` finds them
    /// ([`crate::discover::scan`]).
    Live,
    /// The files a glob names: `*` and `?` in the last path component only (a directory
    /// stands for every `*.stint` in it).
    Glob { dir: PathBuf, pattern: String },
}

impl Source {
    /// The source for a `--profiles` argument.
    pub fn glob(arg: &str) -> Source {
        let path = Path::new(arg);
        if path.is_dir() {
            return Source::Glob { dir: path.to_owned(), pattern: "*.stint".into() };
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        let pattern = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Source::Glob { dir, pattern }
    }

    /// The candidate files, sorted, each with its profile when listing them already read it,
    /// and the errors of listing them: (path, line).
    fn files(&self) -> (Vec<Candidate>, Vec<(PathBuf, String)>) {
        match self {
            Source::Live => {
                let (found, errors) = crate::discover::scan_profiles(false);
                let files = found.into_iter().map(|(e, p)| (e.path, Some(p))).collect();
                (files, errors.iter().map(|e| (e.path.clone(), format!("{e}; skipped"))).collect())
            }
            Source::Glob { dir, pattern } => match std::fs::read_dir(dir) {
                Ok(rd) => {
                    let mut v: Vec<Candidate> = rd
                        .flatten()
                        .filter(|e| {
                            stint_layout::glob::glob_match(pattern.as_bytes(), e.file_name().as_encoded_bytes())
                        })
                        .map(|e| e.path())
                        .filter(|p| p.is_file())
                        .map(|p| (p, None))
                        .collect();
                    v.sort_by(|a, b| a.0.cmp(&b.0));
                    (v, Vec::new())
                }
                Err(e) => (Vec::new(), vec![(dir.clone(), format!("{}: cannot list: {e}", dir.display()))]),
            },
        }
    }
}

/// A file a scrape reads, with its profile if listing it read it already.
type Candidate = (PathBuf, Option<Profile>);

/// The result of one scrape.
#[derive(Debug)]
pub struct Scrape {
    /// The profiles read, with their status, by path.
    pub profiles: Vec<(Profile, Status)>,
    /// One line per file skipped (`path: problem`), for the log.
    pub skipped: Vec<String>,
    pub stats: ScrapeStats,
}

/// What `stint serve` keeps between scrapes: where profiles are, the ended processes
/// already shown once, the live files of the last scrape (a live source loses an ended
/// process's file from `/proc`, so it is read once more from its path), and the error count.
#[derive(Debug)]
pub struct Scraper {
    source: Source,
    errors_total: u64,
    /// (path, pid, start) of ended processes already shown.
    ended_shown: HashSet<(PathBuf, u32, u64)>,
    /// Live files of the last scrape.
    last_live: Vec<PathBuf>,
    /// The problems of the last scrape, by path (a bad file is logged once while it stays
    /// bad, and counted every scrape).
    logged: HashMap<PathBuf, String>,
}

impl Scraper {
    pub fn new(source: Source) -> Scraper {
        Scraper { source, errors_total: 0, ended_shown: HashSet::new(), last_live: Vec::new(), logged: HashMap::new() }
    }

    /// Read every profile of the source (and, for a live source, the files of processes
    /// that were live last time). A file that cannot be read as a profile is skipped and
    /// counted; its line is in `skipped` the first time only.
    pub fn scrape(&mut self) -> Scrape {
        let start = Instant::now();
        let (mut files, listing_errors) = self.source.files();
        if self.source == Source::Live {
            for f in &self.last_live {
                if !files.iter().any(|(p, _)| p == f) && f.is_file() {
                    files.push((f.clone(), None));
                }
            }
        }
        let mut errors = listing_errors;
        let mut profiles = Vec::new();
        let mut live = Vec::new();
        let mut seen_ended = HashSet::new();
        for (path, read) in files {
            match read.map_or_else(|| profile::load(&path), Ok) {
                Ok(p) => {
                    if p.alive {
                        live.push(path);
                        profiles.push((p, Status::Live));
                    } else {
                        let key = (path, p.pid, p.start_realtime_ns);
                        if self.ended_shown.insert(key.clone()) {
                            profiles.push((p, Status::Ended));
                        }
                        seen_ended.insert(key);
                    }
                }
                Err(e) => {
                    let line = format!("{}: {e}; skipped", path.display());
                    errors.push((path, line));
                }
            }
        }
        // Each problem is logged once (while it lasts), and counted every time.
        let count = errors.len() as u64;
        let mut skipped = Vec::new();
        let mut logged = HashMap::new();
        for (path, line) in errors {
            if self.logged.get(&path) != Some(&line) {
                skipped.push(line.clone());
            }
            logged.insert(path, line);
        }
        self.logged = logged;
        // Forget ended processes whose file is gone (or no longer read).
        self.ended_shown.retain(|k| seen_ended.contains(k));
        self.last_live = live;
        self.errors_total = self.errors_total.saturating_add(count);
        let stats =
            ScrapeStats { skipped: count, errors_total: self.errors_total, duration_s: start.elapsed().as_secs_f64() };
        Scrape { profiles, skipped, stats }
    }

    /// The profile of process `pid` as it is now, if the source has it (ended or not).
    pub fn find(&self, pid: u32) -> Option<Profile> {
        let (mut files, _) = self.source.files();
        files.extend(self.last_live.iter().map(|f| (f.clone(), None)));
        files.into_iter().filter_map(|(f, read)| read.or_else(|| profile::load(&f).ok())).find(|p| p.pid == pid)
    }

    /// The files of the live profiles of the last scrape.
    pub fn live_files(&self) -> &[PathBuf] {
        &self.last_live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{parse_with, Observer};
    use crate::synthetic::{patch_column, patch_header, put_object, put_wait, synthetic_meta_points, write_synthetic};
    use stint_layout::meta::MetricMeta;
    use stint_layout::{
        Metric, SyncObject, WaitEntry, CLOCK_SOURCE_SYSCALL, OBJ_CONDVAR, STATE_BLOCKED_MUTEX, STATE_RUN, TIMER_BITS,
    };

    const LIVE: Observer = Observer {
        thread_alive: |_, _| true,
        process_alive: |_| true,
        now_tsc: || 0,
        thread_cpu_ns: |_, _| None,
        thread_sched_ns: |_, _| None,
    };

    /// A program `srv` with main (pid 4242) and two workers; function `hot` takes the most
    /// CPU, `many` has the most calls; a mutex first used in `worker` is contended.
    fn sample(program: &str) -> Profile {
        let meta = synthetic_meta_points(
            program,
            &[
                ("entry", "main", "0x1000", 0x40),
                ("entry", "worker", "0x1100", 0x40),
                ("entry", "hot", "0x1200", 0x40),
                ("entry", "many", "0x1300", 0x40),
                ("wrap", "pthread_mutex_lock", "0x0", 0),
            ],
        );
        let mut b = write_synthetic(
            &meta,
            &[(4242, vec![(0, 1), (3, 500)]), (4243, vec![(1, 1), (2, 3), (3, 7)]), (4244, vec![(1, 1), (2, 4)])],
        );
        put_object(
            &mut b,
            0,
            &SyncObject { address: 0x5000, first_pc: 0x1110, kind: OBJ_MUTEX, first_tid: 4243, ..Default::default() },
        );
        put_object(
            &mut b,
            1,
            &SyncObject { address: 0x5040, first_pc: 0, kind: OBJ_CONDVAR, first_tid: 4243, ..Default::default() },
        );
        let w = WaitEntry {
            object: 1,
            kind: OBJ_MUTEX,
            count: 10,
            contended: 3,
            wait_ticks: 2_000_000,
            hold_ticks: 500_000,
            ..WaitEntry::default()
        };
        put_wait(&mut b, 1, 0, &w);
        put_wait(&mut b, 2, 0, &WaitEntry { count: 5, contended: 1, wait_ticks: 1_000_000, hold_ticks: 0, ..w });
        put_wait(
            &mut b,
            2,
            1,
            &WaitEntry { object: 2, kind: OBJ_CONDVAR, count: 2, contended: 0, wait_ticks: 7, hold_ticks: 0, ..w },
        );
        patch_column(&mut b, 1, |c| {
            c.thread_state = STATE_BLOCKED_MUTEX;
            c.state_ticks[STATE_RUN as usize] = 1_000_000_000;
            c.clock_source = CLOCK_SOURCE_SYSCALL;
            c.timer_skipped = 2;
        });
        patch_column(&mut b, 2, |c| {
            c.thread_state = STATE_EXITED;
            c.wrap_skipped = 5;
        });
        patch_header(&mut b, |h| {
            h.tsc_hz = 1_000_000_000;
            h.lost_threads = 1;
            h.skipped_reentrant = 4;
        });
        parse_with(&b, &LIVE).unwrap()
    }

    fn lines_of<'a>(text: &'a str, family: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(family) && l[family.len()..].starts_with(['{', ' '])).collect()
    }

    /// `sample` with CPU and wall timers: `worker` 3 s CPU (inclusive), `hot` 2 s, `many` and
    /// `main` none.
    fn timed(program: &str) -> Profile {
        let mut p = sample(program);
        p.metrics.push(MetricMeta::of(Metric::CpuTime.def()));
        p.metrics.push(MetricMeta::of(Metric::WallTime.def()));
        for id in [1, 2] {
            p.points[id].bits = TIMER_BITS;
        }
        p.threads[1].times = vec![(1, 1_500_000_000, 4_000_000_000), (2, 1_000_000_000, 1_000_000_000)];
        p.threads[2].times = vec![(1, 1_500_000_000, 4_000_000_000), (2, 1_000_000_000, 1_000_000_000)];
        p
    }

    #[test]
    fn families_units_and_eof() {
        let text = render(&[(sample("srv"), Status::Live)], &Options::default());
        assert!(text.ends_with("\n# EOF\n"), "{text}");
        assert!(text.contains("# TYPE stint_function_cpu_seconds counter\n# UNIT stint_function_cpu_seconds seconds\n"));
        // No timers: by calls.
        assert_eq!(
            lines_of(&text, "stint_function_calls_total"),
            [
                r#"stint_function_calls_total{program="srv",pid="4242",function="many"} 507"#,
                r#"stint_function_calls_total{program="srv",pid="4242",function="hot"} 7"#,
                r#"stint_function_calls_total{program="srv",pid="4242",function="worker"} 2"#,
                r#"stint_function_calls_total{program="srv",pid="4242",function="main"} 1"#,
            ]
        );
        assert_eq!(lines_of(&text, "stint_function_cpu_seconds_total"), Vec::<&str>::new());
        assert_eq!(lines_of(&text, "stint_process_ended"), [r#"stint_process_ended{program="srv",pid="4242"} 0"#]);
        assert_eq!(
            lines_of(&text, "stint_process_start_time_seconds"),
            [r#"stint_process_start_time_seconds{program="srv",pid="4242"} 1700000000.0"#]
        );
        assert_eq!(
            lines_of(&text, "stint_lost_threads_total"),
            [r#"stint_lost_threads_total{program="srv",pid="4242"} 1"#]
        );
        assert_eq!(
            lines_of(&text, "stint_skipped_events_total"),
            [
                r#"stint_skipped_events_total{program="srv",pid="4242",reason="reentrant"} 4"#,
                r#"stint_skipped_events_total{program="srv",pid="4242",reason="timer"} 2"#,
                r#"stint_skipped_events_total{program="srv",pid="4242",reason="wrapper"} 5"#,
            ]
        );
        assert_eq!(
            lines_of(&text, "stint_clock_source_threads"),
            [r#"stint_clock_source_threads{program="srv",pid="4242",source="clock_gettime"} 1"#]
        );
        assert!(!text.contains("tid"), "{text}");
        assert!(!text.contains("stint_scrape"), "{text}");
    }

    #[test]
    fn top_functions_by_cpu_with_seconds() {
        let opts = Options { top: 2, ..Options::default() };
        let text = render(&[(timed("srv"), Status::Live)], &opts);
        assert_eq!(
            lines_of(&text, "stint_function_calls_total"),
            [
                r#"stint_function_calls_total{program="srv",pid="4242",function="worker"} 2"#,
                r#"stint_function_calls_total{program="srv",pid="4242",function="hot"} 7"#,
            ]
        );
        assert_eq!(
            lines_of(&text, "stint_function_cpu_seconds_total"),
            [
                r#"stint_function_cpu_seconds_total{program="srv",pid="4242",function="worker"} 3.0"#,
                r#"stint_function_cpu_seconds_total{program="srv",pid="4242",function="hot"} 2.0"#,
            ]
        );
        assert_eq!(
            lines_of(&text, "stint_function_wall_seconds_total"),
            [
                r#"stint_function_wall_seconds_total{program="srv",pid="4242",function="worker"} 8.0"#,
                r#"stint_function_wall_seconds_total{program="srv",pid="4242",function="hot"} 2.0"#,
            ]
        );
        let none = render(&[(timed("srv"), Status::Live)], &Options { top: 0, ..Options::default() });
        assert_eq!(lines_of(&none, "stint_function_calls_total"), Vec::<&str>::new());
    }

    #[test]
    fn locks_named_as_the_report_names_them() {
        let text = render(&[(sample("srv"), Status::Live)], &Options::default());
        let m = r#"program="srv",pid="4242",lock="worker",kind="mutex""#;
        let c = r#"program="srv",pid="4242",lock="0x5040",kind="condvar""#;
        assert_eq!(
            lines_of(&text, "stint_lock_acquisitions_total"),
            [format!("stint_lock_acquisitions_total{{{m}}} 15"), format!("stint_lock_acquisitions_total{{{c}}} 2")]
        );
        assert_eq!(
            lines_of(&text, "stint_lock_contended_total"),
            [format!("stint_lock_contended_total{{{m}}} 4"), format!("stint_lock_contended_total{{{c}}} 0")]
        );
        assert_eq!(
            lines_of(&text, "stint_lock_wait_seconds_total"),
            [
                format!("stint_lock_wait_seconds_total{{{m}}} 0.003"),
                format!("stint_lock_wait_seconds_total{{{c}}} 7e-9")
            ]
        );
        // Only mutexes and rwlocks are held.
        assert_eq!(
            lines_of(&text, "stint_lock_hold_seconds_total"),
            [format!("stint_lock_hold_seconds_total{{{m}}} 0.0005")]
        );
        let one = render(&[(sample("srv"), Status::Live)], &Options { top: 1, ..Options::default() });
        assert_eq!(
            lines_of(&one, "stint_lock_acquisitions_total"),
            [format!("stint_lock_acquisitions_total{{{m}}} 15")]
        );
    }

    #[test]
    fn threads_by_state_and_role() {
        let text = render(&[(sample("srv"), Status::Live)], &Options::default());
        assert_eq!(
            lines_of(&text, "stint_threads"),
            [
                r#"stint_threads{program="srv",pid="4242",state="RUN"} 1"#,
                r#"stint_threads{program="srv",pid="4242",state="BLOCKED_MUTEX"} 1"#,
                r#"stint_threads{program="srv",pid="4242",state="EXITED"} 1"#,
            ]
        );
        assert_eq!(
            lines_of(&text, "stint_thread_state_seconds_total"),
            [r#"stint_thread_state_seconds_total{program="srv",pid="4242",state="RUN"} 1.0"#]
        );
        // The exited worker does not run; the other is known by its first function.
        assert_eq!(
            lines_of(&text, "stint_role_threads"),
            [
                r#"stint_role_threads{program="srv",pid="4242",role="main"} 1"#,
                r#"stint_role_threads{program="srv",pid="4242",role="worker"} 1"#,
            ]
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let text = render(&[(sample("a\"b\\c\nd"), Status::Live)], &Options::default());
        assert_eq!(
            lines_of(&text, "stint_process_ended"),
            [r#"stint_process_ended{program="a\"b\\c\nd",pid="4242"} 0"#]
        );
        assert_eq!(text.lines().filter(|l| l.starts_with("d\"")).count(), 0, "{text}");
    }

    #[test]
    fn ended_marker_and_the_prometheus_format() {
        let opts = Options { format: TextFormat::Prometheus, ..Options::default() };
        let text = render(&[(sample("srv"), Status::Ended)], &opts);
        assert_eq!(lines_of(&text, "stint_process_ended"), [r#"stint_process_ended{program="srv",pid="4242"} 1"#]);
        assert!(!text.contains("# EOF") && !text.contains("# UNIT"), "{text}");
        assert!(text.contains("# TYPE stint_function_calls_total counter\n"), "{text}");
        assert_eq!(TextFormat::negotiate(None), TextFormat::OpenMetrics);
        assert_eq!(TextFormat::negotiate(Some("*/*")), TextFormat::OpenMetrics);
        assert_eq!(TextFormat::negotiate(Some("text/plain;version=0.0.4;q=0.5")), TextFormat::Prometheus);
        let prom = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1";
        assert_eq!(TextFormat::negotiate(Some(prom)), TextFormat::OpenMetrics);
    }

    #[test]
    fn scrape_families() {
        let s = ScrapeStats { skipped: 2, errors_total: 5, duration_s: 0.25 };
        let text = render(&[], &Options { scrape: Some(s), ..Options::default() });
        for line in [
            "stint_scrape_profiles 0",
            "stint_scrape_skipped_files 2",
            "stint_scrape_errors_total 5",
            "stint_scrape_duration_seconds 0.25",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert!(text.ends_with("\n# EOF\n"));
    }

    /// A fresh directory under the system's temporary directory, removed by the guard.
    struct TempDir(PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn temp_dir(label: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("stint-openmetrics-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    #[test]
    fn scraper_shows_ended_once_and_counts_bad_files() {
        let dir = temp_dir("scraper");
        let meta = synthetic_meta_points("p", &[("entry", "main", "0x1000", 0)]);
        let me = std::process::id();
        std::fs::write(dir.0.join("live.1.stint"), write_synthetic(&meta, &[(me, vec![(0, 1)])])).unwrap();
        let ended = write_synthetic(&meta, &[(u32::MAX - 1, vec![(0, 2)])]);
        std::fs::write(dir.0.join("ended.2.stint"), &ended).unwrap();
        std::fs::write(dir.0.join("garbage.3.stint"), b"not a profile at all").unwrap();
        std::fs::write(dir.0.join("truncated.4.stint"), &ended[..ended.len() / 2]).unwrap();
        std::fs::write(dir.0.join("other.txt"), b"ignored by the glob").unwrap();
        let mut s = Scraper::new(Source::glob(&format!("{}/*.stint", dir.0.display())));
        let first = s.scrape();
        let shown: Vec<(u32, Status)> = first.profiles.iter().map(|(p, st)| (p.pid, *st)).collect();
        assert_eq!(shown, [(u32::MAX - 1, Status::Ended), (me, Status::Live)]);
        assert_eq!((first.stats.skipped, first.stats.errors_total), (2, 2));
        assert_eq!(first.skipped.len(), 2, "{:?}", first.skipped);
        assert!(first.skipped[0].contains("garbage.3.stint: ") && first.skipped[1].contains("truncated.4.stint: "));
        let second = s.scrape();
        let shown: Vec<(u32, Status)> = second.profiles.iter().map(|(p, st)| (p.pid, *st)).collect();
        assert_eq!(shown, [(me, Status::Live)]);
        assert_eq!((second.stats.skipped, second.stats.errors_total), (2, 4));
        assert_eq!(second.skipped, Vec::<String>::new());
        assert_eq!(s.find(me).map(|p| p.pid), Some(me));
        assert_eq!(s.find(u32::MAX - 1).map(|p| p.alive), Some(false));
        assert!(s.find(7).is_none());
        // A bad file that goes away is forgotten; when it comes back it is logged again.
        std::fs::remove_file(dir.0.join("garbage.3.stint")).unwrap();
        let third = s.scrape();
        assert_eq!((third.stats.skipped, third.stats.errors_total, third.skipped.len()), (1, 5, 0));
        std::fs::write(dir.0.join("garbage.3.stint"), b"not a profile at all").unwrap();
        assert_eq!(s.scrape().skipped.len(), 1);
        // A directory that cannot be listed is one problem, logged once.
        let mut gone = Scraper::new(Source::glob(&format!("{}/nothing/*.stint", dir.0.display())));
        let (a, b) = (gone.scrape(), gone.scrape());
        assert_eq!((a.stats.skipped, a.skipped.len(), b.stats.skipped, b.skipped.len()), (1, 1, 1, 0));
        assert!(a.skipped[0].contains("nothing: cannot list: "), "{:?}", a.skipped);
        // The directory form means every *.stint in it.
        assert_eq!(
            Source::glob(&dir.0.display().to_string()),
            Source::Glob { dir: dir.0.clone(), pattern: "*.stint".into() }
        );
    }
}
