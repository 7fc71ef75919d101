//! Merging many runs into one profile (`stint merge`, `stint report A B C`): this module owns
//! reading the inputs (profile files, `stint-profile/1` JSON documents, directories of
//! `*.stint` files), summing them per program, the merged document ([`MergedJson`]) and its
//! table ([`to_table`]).
//!
//! # What is summed, and how
//! - **Programs**: inputs are grouped by `program`; each program gets one merged document.
//!   Forked children's profiles (`<program>.<childpid>.stint`) are just more inputs of the
//!   same program.
//! - **Threads by role**, not by tid (tids differ between runs): the main thread, else the
//!   thread's name, else its start routine, else its first function. A name a thread only
//!   inherited (its creator's name, or the program's cut to 15 bytes: the comm a thread has
//!   when nobody names it) is no role; such a merged thread's `name` is `null`, so a merged
//!   document merges again by the same roles. A merged thread's `tid`
//!   (and `creator_tid`, and an object's `first_tid`) is `0`/`null`: it stands for many
//!   threads. Its counters, states and waits are sums; `start_ns` is the earliest start,
//!   `end_ns` the latest end (`null` if any is unknown); `exit`, `exit_value` and `state` are
//!   kept when every run agrees, else `unknown` / `null`; `state` is the first run's. The
//!   transition rings (per-run timelines) are dropped.
//! - **Functions by name** per thread role: calls summed; a time is the sum of the runs that
//!   have it and stays `null` only if it is `null` in every input. The address is the first
//!   run's.
//! - **Sync objects** are deduplicated by (kind, first_used_in) (addresses differ between
//!   runs); the first run's address names the merged object, and every wait on any run's
//!   object is summed into the wait on the merged one.
//! - The top level: `pid`/`ppid` of the first input when one run is merged, else `0`;
//!   `fork_child` only if every input is one; `skipped_reentrant`, `lost_threads`,
//!   `objects_lost` summed; `tsc_hz` the first non-zero; each warning kept once, prefixed
//!   with the inputs it came from unless every input has it. Two fields are added after the contract's: `runs` (how many runs were summed; a
//!   merged input counts its own `runs`) and `merged_from` (the input files; a merged input
//!   contributes its own list).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use stint_layout::FILE_MAGIC;
use thiserror::Error;

use crate::json::{
    profile_json, CallNodeJson, CompensationJson, FunctionJson, ObjectJson, ProfileJson, StateTimes, ThreadJson,
    WaitJson, SCHEMA,
};
use crate::profile::{parse, ProfileError};
use crate::symbols::Resolver;

/// Why inputs could not be merged. Each names the input it is about, and carries its cause
/// in its one-line message (not as a `source`, so it is printed once).
#[derive(Debug, Error)]
pub enum MergeError {
    #[error("{}: cannot read: {err}", path.display())]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{}: {err}", path.display())]
    Profile { path: PathBuf, err: ProfileError },
    #[error("{}: not a stint-profile/1 document: {err}", path.display())]
    Json { path: PathBuf, err: serde_json::Error },
    #[error("{}: schema {found:?}, expected {SCHEMA:?}", path.display())]
    Schema { path: PathBuf, found: String },
    #[error("{}: neither a stint profile nor stint-profile/1 JSON", path.display())]
    Unknown { path: PathBuf },
    /// All zeros where a profile's header goes: the runtime creates the file (its name
    /// reserved with `O_EXCL`) and sizes it before it writes the header, so a reader that
    /// comes in between, or a process killed in between, leaves this.
    #[error("{}: a profile whose header is not written yet (its process is still creating it, or died doing so)", path.display())]
    Unpublished { path: PathBuf },
    #[error("{}: no *.stint files in this directory", path.display())]
    EmptyDir { path: PathBuf },
    #[error("no input files")]
    NoInputs,
}

/// A merged profile: the `stint-profile/1` document with two added fields. It reads as a
/// [`ProfileJson`] too (readers ignore fields they do not know).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MergedJson {
    #[serde(flatten)]
    pub profile: ProfileJson,
    /// How many runs (profiles) were summed.
    pub runs: u64,
    /// The input files, in input order.
    pub merged_from: Vec<String>,
}

/// One run (or an already merged document) read from an input.
#[derive(Clone, Debug)]
pub struct Input {
    pub profile: ProfileJson,
    pub runs: u64,
    pub merged_from: Vec<String>,
}

/// The fields a merged document adds, read from any `stint-profile/1` document.
#[derive(Deserialize)]
struct Added {
    runs: Option<u64>,
    merged_from: Option<Vec<String>>,
}

/// Expand directories (every `*.stint` in them, by name) and keep files as given.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, MergeError> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let rd = std::fs::read_dir(p).map_err(|err| MergeError::Read { path: p.clone(), err })?;
            let mut files: Vec<PathBuf> = rd
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|f| f.extension().is_some_and(|x| x == "stint") && f.is_file())
                .collect();
            if files.is_empty() {
                return Err(MergeError::EmptyDir { path: p.clone() });
            }
            files.sort();
            out.extend(files);
        } else {
            out.push(p.clone());
        }
    }
    if out.is_empty() {
        return Err(MergeError::NoInputs);
    }
    Ok(out)
}

/// Whether `bytes` are a profile file (by its magic, not its name).
pub fn is_profile_file(bytes: &[u8]) -> bool {
    bytes.starts_with(&FILE_MAGIC)
}

/// Read one input file: a profile (by magic), a `stint-profile/1` JSON document, or a JSON
/// array of them (`stint merge` output for several programs).
pub fn read_input(path: &Path) -> Result<Vec<Input>, MergeError> {
    read_input_named(path, &Resolver::none())
}

/// [`read_input`], a profile file's names resolved with `names` ([`crate::symbols`]).
pub fn read_input_named(path: &Path, names: &Resolver) -> Result<Vec<Input>, MergeError> {
    let bytes = std::fs::read(path).map_err(|err| MergeError::Read { path: path.to_owned(), err })?;
    read_input_bytes_named(path, &bytes, names)
}

/// [`read_input`] on bytes already read; `path` names the input.
pub fn read_input_bytes(path: &Path, bytes: &[u8]) -> Result<Vec<Input>, MergeError> {
    read_input_bytes_named(path, bytes, &Resolver::none())
}

/// [`read_input_bytes`] with names resolved by `names`.
pub fn read_input_bytes_named(path: &Path, bytes: &[u8], names: &Resolver) -> Result<Vec<Input>, MergeError> {
    let name = path.display().to_string();
    if is_profile_file(bytes) {
        let mut p = parse(bytes).map_err(|err| MergeError::Profile { path: path.to_owned(), err })?;
        p.resolve_names(names);
        return Ok(vec![Input { profile: profile_json(&p), runs: 1, merged_from: vec![name] }]);
    }
    if !bytes.is_empty() && bytes.iter().take(stint_layout::HEADER_RESERVED as usize).all(|&b| b == 0) {
        return Err(MergeError::Unpublished { path: path.to_owned() });
    }
    if !matches!(bytes.iter().find(|b| !b.is_ascii_whitespace()), Some(b'{' | b'[')) {
        return Err(MergeError::Unknown { path: path.to_owned() });
    }
    let json = |err| MergeError::Json { path: path.to_owned(), err };
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(json)?;
    let docs = match value {
        serde_json::Value::Array(docs) => docs,
        one => vec![one],
    };
    docs.into_iter()
        .map(|value| {
            let schema = value.get("schema").and_then(|s| s.as_str()).unwrap_or("").to_owned();
            if schema != SCHEMA {
                return Err(MergeError::Schema { path: path.to_owned(), found: schema });
            }
            let added: Added = serde_json::from_value(value.clone()).map_err(json)?;
            let profile: ProfileJson = serde_json::from_value(value).map_err(json)?;
            Ok(Input {
                profile,
                runs: added.runs.unwrap_or(1),
                merged_from: added.merged_from.filter(|m| !m.is_empty()).unwrap_or_else(|| vec![name.clone()]),
            })
        })
        .collect()
}

/// Read every input (directories expanded) and merge them, one document per program, in
/// the order programs first appear.
pub fn merge_paths(paths: &[PathBuf]) -> Result<Vec<MergedJson>, MergeError> {
    merge_paths_named(paths, &Resolver::none())
}

/// [`merge_paths`], the profile files' names resolved with `names` first.
pub fn merge_paths_named(paths: &[PathBuf], names: &Resolver) -> Result<Vec<MergedJson>, MergeError> {
    let mut inputs = Vec::new();
    for p in expand(paths)? {
        inputs.extend(read_input_named(&p, names)?);
    }
    Ok(merge(&inputs))
}

/// Merge inputs, one document per program, in the order programs first appear.
pub fn merge(inputs: &[Input]) -> Vec<MergedJson> {
    let mut order: Vec<&str> = Vec::new();
    for i in inputs {
        if !order.contains(&i.profile.program.as_str()) {
            order.push(&i.profile.program);
        }
    }
    order
        .iter()
        .map(|prog| {
            let group: Vec<&Input> = inputs.iter().filter(|i| i.profile.program == *prog).collect();
            merge_program(&group)
        })
        .collect()
}

/// The role a thread plays in its program, the same across runs (tids are not): how `merge`
/// sums threads and `diff --by-thread` matches them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Main,
    Named(String),
    Routine(String),
    First(Option<String>),
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Role::Main => f.write_str("main"),
            Role::Named(n) | Role::Routine(n) => f.write_str(n),
            Role::First(Some(n)) => f.write_str(n),
            Role::First(None) => f.write_str("?"),
        }
    }
}

/// The role of thread `t` of run `run`.
pub fn role(run: &ProfileJson, t: &ThreadJson) -> Role {
    // A thread nobody named carries the comm it inherited from its creator (for threads of
    // the main thread: the program's name, cut to 15 bytes). That is no role; its start
    // routine is.
    let creator = t.creator_tid.and_then(|c| run.threads.iter().find(|x| x.tid == c && x.tid != t.tid));
    let program = run.program.as_str();
    let inherited = |n: &str| {
        creator.is_some_and(|c| c.name.as_deref() == Some(n))
            || (!n.is_empty() && program.starts_with(n) && (n == program || n.len() == 15))
    };
    if t.main {
        Role::Main
    } else if let Some(n) = t.name.as_deref().filter(|n| !inherited(n)) {
        Role::Named(n.to_owned())
    } else if let Some(r) = &t.start_routine {
        Role::Routine(r.clone())
    } else {
        Role::First(t.first_function.clone())
    }
}

/// An object's identity across runs: (kind, the function that first used it, else its address).
fn object_key(o: &ObjectJson) -> (String, String) {
    (o.kind.clone(), o.first_used_in.clone().unwrap_or_else(|| o.address.clone()))
}

fn add(a: u64, b: u64) -> u64 {
    a.saturating_add(b)
}

/// Sum of two optional times: `None` only if both are.
fn add_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(add(a.unwrap_or(0), b.unwrap_or(0))),
    }
}

fn merge_program(group: &[&Input]) -> MergedJson {
    let first = &group[0].profile;
    let runs = group.iter().fold(0u64, |s, i| add(s, i.runs));
    let single = runs == 1;

    // Objects: deduplicated by key; each input's addresses mapped to the merged object's.
    let mut objects: Vec<ObjectJson> = Vec::new();
    let mut addr_maps: Vec<BTreeMap<String, String>> = Vec::new();
    for i in group {
        let mut map = BTreeMap::new();
        for o in &i.profile.objects {
            let key = object_key(o);
            let merged = match objects.iter().find(|m| object_key(m) == key) {
                Some(m) => m.address.clone(),
                None => {
                    // Over several runs tids mean nothing: a join target keeps no thread.
                    let (first_tid, threads, name) = match single {
                        true => (o.first_tid, o.threads.clone(), o.name.clone()),
                        false if o.kind == "thread" => (0, Vec::new(), None),
                        false => (0, Vec::new(), o.name.clone()),
                    };
                    objects.push(ObjectJson { first_tid, threads, name, ..o.clone() });
                    o.address.clone()
                }
            };
            map.insert(o.address.clone(), merged);
        }
        addr_maps.push(map);
    }

    let mut threads: Vec<ThreadJson> = Vec::new();
    let mut roles: Vec<Role> = Vec::new();
    let mut exit_agrees: Vec<bool> = Vec::new();
    for (i, map) in group.iter().zip(&addr_maps) {
        for t in &i.profile.threads {
            let r = role(&i.profile, t);
            let mut t = t.clone();
            for w in &mut t.waits {
                w.object = w.object.as_ref().map(|a| map.get(a).cloned().unwrap_or_else(|| a.clone()));
            }
            match roles.iter().position(|x| *x == r) {
                Some(k) => {
                    let m = &mut threads[k];
                    exit_agrees[k] &= m.exit == t.exit && m.exit_value == t.exit_value;
                    add_thread(m, &t);
                }
                None => {
                    if !single && !matches!(r, Role::Named(_) | Role::Main) {
                        // Inherited, not a role: a later merge of this document (without
                        // creator tids) must not take it for one.
                        t.name = None;
                    }
                    roles.push(r);
                    exit_agrees.push(true);
                    // Call paths are kept (and summed per path below); state transitions are
                    // one run's timeline and mean nothing summed.
                    threads.push(ThreadJson { transitions: Vec::new(), ..t });
                }
            }
        }
    }
    for (t, &exit_same) in threads.iter_mut().zip(&exit_agrees) {
        if !exit_same {
            t.exit = "unknown".into();
            t.exit_value = None;
        }
        if !single {
            t.tid = 0;
            t.creator_tid = None;
        }
        sort_functions(&mut t.functions);
        t.waits.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(b.count.cmp(&a.count)));
    }

    let warnings = merged_warnings(group);
    let sum = |f: fn(&ProfileJson) -> u64| group.iter().fold(0u64, |s, i| add(s, f(&i.profile)));
    MergedJson {
        profile: ProfileJson {
            schema: SCHEMA.to_owned(),
            program: first.program.clone(),
            pid: if single { first.pid } else { 0 },
            ppid: if single { first.ppid } else { 0 },
            fork_child: group.iter().all(|i| i.profile.fork_child),
            threads,
            skipped_reentrant: sum(|p| p.skipped_reentrant),
            lost_threads: sum(|p| p.lost_threads),
            tsc_hz: group.iter().map(|i| i.profile.tsc_hz).find(|&h| h != 0).unwrap_or(0),
            objects,
            objects_lost: sum(|p| p.objects_lost),
            warnings,
            process: Default::default(),
            compensation: merged_compensation(group),
        },
        runs,
        merged_from: group.iter().flat_map(|i| i.merged_from.iter().cloned()).collect(),
    }
}

/// The `compensation` key of a merged document: kept when every input has one and all agree
/// on `applied` (every time compensated, or every time raw), so that the sums are of one kind;
/// the per-event costs are the inputs' means (each run calibrated its own), `clamped` their
/// sum. `None` when an input was not calibrated or the inputs mix compensated and raw times.
fn merged_compensation(group: &[&Input]) -> Option<CompensationJson> {
    let all: Vec<&CompensationJson> = group.iter().map(|i| i.profile.compensation.as_ref()).collect::<Option<_>>()?;
    let first = *all.first()?;
    if all.iter().any(|c| c.applied != first.applied) {
        return None;
    }
    let n = all.len() as u64;
    let mean = |f: fn(&CompensationJson) -> u64| all.iter().fold(0u64, |s, c| s.saturating_add(f(c))) / n;
    Some(CompensationJson {
        applied: first.applied,
        timed_call_ps: mean(|c| c.timed_call_ps),
        timed_call_flat_ps: mean(|c| c.timed_call_flat_ps),
        inside_ps: mean(|c| c.inside_ps),
        inside_flat_ps: mean(|c| c.inside_flat_ps),
        counted_call_ps: mean(|c| c.counted_call_ps),
        timed_call_entry_exit_ps: mean(|c| c.timed_call_entry_exit_ps),
        inside_entry_exit_ps: mean(|c| c.inside_entry_exit_ps),
        timed_call_import_ps: mean(|c| c.timed_call_import_ps),
        inside_import_ps: mean(|c| c.inside_import_ps),
        untimed_call_ps: mean(|c| c.untimed_call_ps),
        untimed_call_entry_exit_ps: mean(|c| c.untimed_call_entry_exit_ps),
        inside_sampled_ps: mean(|c| c.inside_sampled_ps),
        inside_sampled_entry_exit_ps: mean(|c| c.inside_sampled_entry_exit_ps),
        wrapper_event_ps: mean(|c| c.wrapper_event_ps),
        wrapper_slow_event_ps: mean(|c| c.wrapper_slow_event_ps),
        wrapper_slow_events: all.iter().fold(0u64, |s, c| s.saturating_add(c.wrapper_slow_events)),
        clamped: all.iter().fold(0u64, |s, c| s.saturating_add(c.clamped)),
        ..CompensationJson::default()
    })
}

/// Add thread `t` (of another run, same role) into `m`.
/// Add the call paths of `src` to `dst`, path by path: a node is the same node when its
/// parent is and its function has the same name (addresses differ between builds, names do
/// not). Both trees list parents before children; so does the result.
fn merge_calltree(dst: &mut Vec<CallNodeJson>, src: &[CallNodeJson]) {
    let mut index: BTreeMap<(Option<u32>, String), u32> =
        dst.iter().enumerate().map(|(i, n)| ((n.parent, n.function.clone()), i as u32)).collect();
    // Where each node of `src` went in `dst`.
    let mut to_dst: Vec<u32> = Vec::with_capacity(src.len());
    for n in src {
        // A parent that does not come before its child (a corrupt document) makes a root.
        let parent = n.parent.and_then(|p| to_dst.get(p as usize).copied());
        let key = (parent, n.function.clone());
        let i = match index.get(&key) {
            Some(&i) => {
                let d = &mut dst[i as usize];
                d.calls = add(d.calls, n.calls);
                d.cpu_ns = add_opt(d.cpu_ns, n.cpu_ns);
                d.wall_ns = add_opt(d.wall_ns, n.wall_ns);
                d.self_cpu_ns = add_opt(d.self_cpu_ns, n.self_cpu_ns);
                d.self_wall_ns = add_opt(d.self_wall_ns, n.self_wall_ns);
                i
            }
            None => {
                dst.push(CallNodeJson { parent, ..n.clone() });
                let i = (dst.len() - 1) as u32;
                index.insert(key, i);
                i
            }
        };
        to_dst.push(i);
    }
}

fn add_thread(m: &mut ThreadJson, t: &ThreadJson) {
    if m.clock_source.is_none() {
        m.clock_source = t.clock_source.clone();
    }
    m.timer_skipped = add(m.timer_skipped, t.timer_skipped);
    m.unmatched_exits = add(m.unmatched_exits, t.unmatched_exits);
    m.abandoned_frames = add(m.abandoned_frames, t.abandoned_frames);
    m.shadow_overflow = add(m.shadow_overflow, t.shadow_overflow);
    m.resyncs = add(m.resyncs, t.resyncs);
    m.wrap_skipped = add(m.wrap_skipped, t.wrap_skipped);
    for f in &t.functions {
        match m.functions.iter_mut().find(|g| g.name == f.name) {
            Some(g) => {
                g.calls = add(g.calls, f.calls);
                g.cpu_ns = add_opt(g.cpu_ns, f.cpu_ns);
                g.wall_ns = add_opt(g.wall_ns, f.wall_ns);
            }
            None => m.functions.push(f.clone()),
        }
    }
    merge_calltree(&mut m.calltree, &t.calltree);
    m.calltree_lost = add(m.calltree_lost, t.calltree_lost);
    m.running |= t.running;
    m.start_ns = m.start_ns.min(t.start_ns);
    m.end_ns = match (m.end_ns, t.end_ns) {
        (Some(a), Some(b)) => Some(a.max(b)),
        _ => None,
    };
    let mut states = m.states.0.clone();
    for (name, ns) in &t.states.0 {
        match states.iter_mut().find(|(n, _)| n == name) {
            Some((_, s)) => *s = add_opt(*s, *ns),
            None => states.push((name.clone(), *ns)),
        }
    }
    m.states = StateTimes(states);
    for w in &t.waits {
        match m.waits.iter_mut().find(|v| v.object == w.object && v.kind == w.kind) {
            Some(v) => add_wait(v, w),
            None => m.waits.push(w.clone()),
        }
    }
}

fn add_wait(v: &mut WaitJson, w: &WaitJson) {
    v.wait_ns = add_opt(v.wait_ns, w.wait_ns);
    v.count = add(v.count, w.count);
    v.contended = add(v.contended, w.contended);
    v.hold_ns = add_opt(v.hold_ns, w.hold_ns);
    // The longest call of all, and its caller.
    if w.longest_wait_ns > v.longest_wait_ns || (v.longest_wait_in.is_none() && w.longest_wait_in.is_some()) {
        v.longest_wait_ns = w.longest_wait_ns;
        v.longest_wait_in = w.longest_wait_in.clone();
    }
}

/// Most calls first, then by name (as the report orders them).
fn sort_functions(f: &mut [FunctionJson]) {
    f.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.name.cmp(&b.name)).then_with(|| a.address.cmp(&b.address)));
}

/// The merged documents as JSON text: one object for one program, an array for several.
pub fn to_json_text(merged: &[MergedJson]) -> serde_json::Result<String> {
    match merged {
        [one] => serde_json::to_string_pretty(one),
        many => serde_json::to_string_pretty(many),
    }
}

/// How a merged thread is headed in the table: its role.
fn thread_heading(t: &ThreadJson) -> String {
    let mut h = String::from("thread");
    if t.main {
        h.push_str(" (main)");
    } else if let Some(n) = &t.name {
        let _ = write!(h, " {n}");
    }
    if let Some(r) = &t.start_routine {
        let _ = write!(h, "  start: {r}");
    } else if let (false, Some(f)) = (t.main, &t.first_function) {
        let _ = write!(h, "  first: {f}");
    }
    h
}

/// Milliseconds with three decimals, `-` if unknown.
fn ms(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |n| format!("{:.3}", n as f64 / 1e6))
}

/// The merged profile as a table: a line about the program and the runs, per thread role its
/// functions (at most `top`, the rest summed in one line), then the totals.
///
/// ```text
/// program calltree  runs 3  threads 1
///
/// thread (main)
///   calls  function            address
///      30  leaf                0x1139
///
/// total: 1 thread role, 30 calls in 3 runs
/// ```
pub fn to_table(m: &MergedJson, top: Option<usize>) -> String {
    let p = &m.profile;
    let timed = p.threads.iter().flat_map(|t| &t.functions).any(|f| f.cpu_ns.is_some() || f.wall_ns.is_some());
    let calls_w = p
        .threads
        .iter()
        .flat_map(|t| t.functions.iter().map(|f| f.calls))
        .max()
        .unwrap_or(0)
        .to_string()
        .len()
        .max("calls".len());
    let name_w =
        p.threads.iter().flat_map(|t| &t.functions).map(|f| f.name.chars().count()).max().unwrap_or(0).clamp(18, 48);
    let mut out = String::new();
    let _ = write!(out, "program {}  runs {}  threads {}", p.program, m.runs, p.threads.len());
    if p.lost_threads != 0 {
        let _ = write!(out, "  (threads without a column: {})", p.lost_threads);
    }
    out.push('\n');
    let mut total = 0u64;
    for t in &p.threads {
        let _ = write!(out, "\n{}\n", thread_heading(t));
        total = t.functions.iter().fold(total, |s, f| add(s, f.calls));
        if t.functions.is_empty() {
            out.push_str("  (no calls)\n");
            continue;
        }
        let head =
            if timed { format!("{:>11}  {:>11}  {:>10}  ", "cpu ms", "wall ms", "cpu/call us") } else { String::new() };
        let _ = writeln!(out, "  {:>calls_w$}  {head}{:<name_w$}  address", "calls", "function");
        let keep = top.unwrap_or(usize::MAX).min(t.functions.len());
        for f in &t.functions[..keep] {
            let times = if timed {
                let per_call = f.cpu_ns.filter(|_| f.calls > 0).map(|c| c as f64 / f.calls as f64 / 1e3);
                format!(
                    "{:>11}  {:>11}  {:>10}  ",
                    ms(f.cpu_ns),
                    ms(f.wall_ns),
                    per_call.map_or("-".into(), |us| format!("{us:.3}"))
                )
            } else {
                String::new()
            };
            let line = format!("  {:>calls_w$}  {times}{:<name_w$}  {}", f.calls, f.name, f.address);
            let _ = writeln!(out, "{}", line.trim_end());
        }
        let rest = &t.functions[keep..];
        if !rest.is_empty() {
            let calls = rest.iter().fold(0u64, |s, f| add(s, f.calls));
            let more = if rest.len() == 1 { "function" } else { "functions" };
            let _ = writeln!(out, "  {calls:>calls_w$}  ({} more {more})", rest.len());
        }
    }
    let roles = if p.threads.len() == 1 { "thread role" } else { "thread roles" };
    let _ = writeln!(out, "\ntotal: {} {roles}, {total} calls in {} runs", p.threads.len(), m.runs);
    for w in &p.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

/// The warnings of a group, each text once, in order of first appearance: a warning every
/// input has (the rewriter's notes about the program, the same in each of its profiles) is
/// kept as it is; one only some inputs have is prefixed with the profiles it came from.
fn merged_warnings(group: &[&Input]) -> Vec<String> {
    let mut texts: Vec<(&str, Vec<String>)> = Vec::new();
    for i in group {
        let from = i.merged_from.first().cloned().unwrap_or_default();
        for w in &i.profile.warnings {
            match texts.iter_mut().find(|(t, _)| *t == w.as_str()) {
                Some((_, froms)) => {
                    if !froms.contains(&from) {
                        froms.push(from.clone())
                    }
                }
                None => texts.push((w, vec![from.clone()])),
            }
        }
    }
    let everyone = group.iter().filter_map(|i| i.merged_from.first()).collect::<std::collections::BTreeSet<_>>().len();
    texts
        .into_iter()
        .map(|(w, froms)| {
            if group.len() == 1 || froms.len() >= everyone {
                w.to_owned()
            } else if froms.len() <= 3 {
                format!("{}: {w}", froms.join(", "))
            } else {
                format!("{} of {everyone} profiles: {w}", froms.len())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(parent: Option<u32>, function: &str, calls: u64, cpu: u64) -> CallNodeJson {
        CallNodeJson {
            parent,
            function: function.into(),
            calls,
            cpu_ns: Some(cpu),
            wall_ns: Some(cpu),
            self_cpu_ns: Some(cpu / 2),
            self_wall_ns: Some(cpu / 2),
        }
    }

    #[test]
    fn call_paths_are_summed_path_by_path() {
        // Run 1: main → a → b; run 2: main → c → b, main → a (b reached through c only).
        let mut m = vec![node(None, "main", 1, 100), node(Some(0), "a", 3, 40), node(Some(1), "b", 3, 30)];
        let t = vec![
            node(None, "main", 1, 90),
            node(Some(0), "c", 5, 50),
            node(Some(1), "b", 5, 45),
            node(Some(0), "a", 2, 20),
        ];
        merge_calltree(&mut m, &t);
        let got: Vec<(Option<u32>, &str, u64, Option<u64>)> =
            m.iter().map(|n| (n.parent, n.function.as_str(), n.calls, n.cpu_ns)).collect();
        assert_eq!(
            got,
            [
                (None, "main", 2, Some(190)),
                (Some(0), "a", 5, Some(60)),
                (Some(1), "b", 3, Some(30)),
                (Some(0), "c", 5, Some(50)),
                (Some(3), "b", 5, Some(45)),
            ]
        );
    }
    use crate::synthetic::{synthetic_meta, write_synthetic};

    fn run(pid: u32, threads: &[(u32, Vec<(u32, u64)>)]) -> Input {
        let meta = synthetic_meta("pigz", &[("main", "0x1139"), ("worker", "0x1189")]);
        let bytes = write_synthetic(&meta, threads);
        read_input_bytes(Path::new(&format!("pigz.{pid}.stint")), &bytes).unwrap().remove(0)
    }

    fn calls(t: &ThreadJson, name: &str) -> Option<u64> {
        t.functions.iter().find(|f| f.name == name).map(|f| f.calls)
    }

    fn function(name: &str, calls: u64, cpu: Option<u64>) -> FunctionJson {
        FunctionJson {
            name: name.into(),
            address: "0x10".into(),
            calls,
            cpu_ns: cpu,
            wall_ns: None,
            running: false,
            sampled: None,
        }
    }

    fn doc(program: &str, threads: Vec<ThreadJson>, objects: Vec<ObjectJson>) -> Input {
        let profile = ProfileJson {
            schema: SCHEMA.into(),
            program: program.into(),
            pid: 1,
            ppid: 0,
            fork_child: false,
            threads,
            skipped_reentrant: 1,
            lost_threads: 0,
            tsc_hz: 0,
            objects,
            objects_lost: 0,
            warnings: vec![],
            process: Default::default(),
            compensation: None,
        };
        Input { profile, runs: 1, merged_from: vec![format!("{program}.json")] }
    }

    fn thread(
        tid: u32,
        main: bool,
        name: Option<&str>,
        functions: Vec<FunctionJson>,
        waits: Vec<WaitJson>,
    ) -> ThreadJson {
        let text = format!(
            r#"{{"tid": {tid}, "main": {main}, "timer_skipped": 0, "unmatched_exits": 0, "abandoned_frames": 0,
                "shadow_overflow": 0, "resyncs": 0, "functions": [], "running": false, "start_ns": 0,
                "exit": "returned", "exit_value": 0, "state": "EXITED", "states": {{"RUN": 10}}, "waits": [],
                "wrap_skipped": 0}}"#
        );
        let mut t: ThreadJson = serde_json::from_str(&text).unwrap();
        t.name = name.map(str::to_owned);
        t.functions = functions;
        t.waits = waits;
        t
    }

    #[test]
    fn a_warning_every_run_has_is_kept_once() {
        let inputs: Vec<Input> = (0..3)
            .map(|k| {
                let mut d = doc("pigz", vec![thread(7, true, None, vec![], vec![])], vec![]);
                d.merged_from = vec![format!("pigz.{k}.stint")];
                d.profile.warnings.push("pthread_mutex_lock is imported but no wrapper sees it".into());
                if k == 1 {
                    d.profile.warnings.push("objects lost".into());
                }
                d
            })
            .collect();
        let merged = merge(&inputs);
        assert_eq!(
            merged[0].profile.warnings,
            ["pthread_mutex_lock is imported but no wrapper sees it", "pigz.1.stint: objects lost"]
        );
    }

    #[test]
    fn compensation_is_kept_when_every_run_agrees() {
        let comp = |applied: bool, ps: u64| CompensationJson {
            applied,
            timed_call_ps: ps,
            inside_ps: ps / 2,
            clamped: 1,
            ..CompensationJson::default()
        };
        let with = |cs: &[Option<CompensationJson>]| -> Vec<Input> {
            cs.iter()
                .enumerate()
                .map(|(k, c)| {
                    let mut i = run(100 + k as u32, &[(100 + k as u32, vec![(0, 1)])]);
                    i.profile.compensation = c.clone();
                    i
                })
                .collect()
        };
        let m = merge(&with(&[Some(comp(true, 18_000)), Some(comp(true, 19_000))]));
        let c = m[0].profile.compensation.as_ref().expect("both compensated: kept");
        assert_eq!((c.applied, c.timed_call_ps, c.inside_ps, c.clamped), (true, 18_500, 9_250, 2));
        let m = merge(&with(&[Some(comp(false, 18_000)), Some(comp(false, 18_000))]));
        assert_eq!(m[0].profile.compensation.as_ref().map(|c| c.applied), Some(false), "both raw: kept, raw");
        let m = merge(&with(&[Some(comp(true, 18_000)), Some(comp(false, 18_000))]));
        assert_eq!(m[0].profile.compensation, None, "compensated and raw mixed");
        let m = merge(&with(&[Some(comp(true, 18_000)), None]));
        assert_eq!(m[0].profile.compensation, None, "one run not calibrated");
    }

    #[test]
    fn calls_of_three_runs_are_summed_per_function() {
        let inputs: Vec<Input> = (0..3).map(|k| run(100 + k, &[(100 + k, vec![(0, 1), (1, 2 + k as u64)])])).collect();
        let merged = merge(&inputs);
        assert_eq!(merged.len(), 1);
        let m = &merged[0];
        assert_eq!(m.runs, 3);
        assert_eq!(m.merged_from, ["pigz.100.stint", "pigz.101.stint", "pigz.102.stint"]);
        assert_eq!(m.profile.threads.len(), 1);
        let t = &m.profile.threads[0];
        assert_eq!((calls(t, "main"), calls(t, "worker")), (Some(3), Some(2 + 3 + 4)));
        assert_eq!((m.profile.pid, t.tid), (0, 0));
    }

    #[test]
    fn threads_are_matched_by_role_not_tid() {
        let a = doc(
            "p",
            vec![
                thread(10, true, None, vec![function("main", 1, None)], vec![]),
                thread(11, false, Some("io"), vec![function("read", 5, None)], vec![]),
            ],
            vec![],
        );
        let b = doc(
            "p",
            vec![
                thread(20, true, None, vec![function("main", 1, None)], vec![]),
                thread(22, false, Some("net"), vec![function("send", 2, None)], vec![]),
                thread(21, false, Some("io"), vec![function("read", 7, None)], vec![]),
            ],
            vec![],
        );
        let m = &merge(&[a, b])[0];
        let names: Vec<Option<&str>> = m.profile.threads.iter().map(|t| t.name.as_deref()).collect();
        assert_eq!(names, [None, Some("io"), Some("net")]);
        assert_eq!(calls(&m.profile.threads[1], "read"), Some(12));
        assert_eq!(m.profile.threads[0].states.get("RUN"), Some(Some(20)));
        assert_eq!(m.profile.skipped_reentrant, 2);
    }

    #[test]
    fn an_inherited_name_is_no_role_the_start_routine_is() {
        let worker = |tid, name: &str, routine: &str, calls| {
            let mut t = thread(tid, false, Some(name), vec![function("work", calls, None)], vec![]);
            t.start_routine = Some(routine.into());
            t
        };
        let long = "a-very-long-program-name";
        let a = doc(long, vec![worker(2, &long[..15], "reader", 1), worker(3, &long[..15], "writer", 2)], vec![]);
        let b = doc(long, vec![worker(5, &long[..15], "writer", 4), worker(6, "pool-1", "writer", 8)], vec![]);
        let m = &merge(&[a, b])[0].profile;
        let got: Vec<(Option<&str>, Option<u64>)> =
            m.threads.iter().map(|t| (t.start_routine.as_deref(), calls(t, "work"))).collect();
        assert_eq!(got, [(Some("reader"), Some(1)), (Some("writer"), Some(6)), (Some("writer"), Some(8))]);
    }

    #[test]
    fn a_name_inherited_from_the_creator_is_no_role() {
        let named = |tid, name: &str, routine: &str, creator| {
            let mut t = thread(tid, false, Some(name), vec![function("work", 1, None)], vec![]);
            t.start_routine = Some(routine.into());
            t.creator_tid = Some(creator);
            t
        };
        let run = || {
            let main = thread(1, true, Some("p"), vec![function("main", 1, None)], vec![]);
            doc("p", vec![main, named(2, "beta-w", "beta_main", 1), named(3, "beta-w", "child_main", 2)], vec![])
        };
        let m = &merge(&[run(), run()])[0].profile;
        let got: Vec<(Option<&str>, Option<u64>)> =
            m.threads.iter().map(|t| (t.start_routine.as_deref(), calls(t, "work"))).collect();
        assert_eq!(got, [(None, None), (Some("beta_main"), Some(2)), (Some("child_main"), Some(2))]);
        assert_eq!(m.threads[2].name, None);
        // Merged again (no creator tids now), the roles stay apart.
        let text = to_json_text(&merge(&[run(), run()])).unwrap();
        let again = merge(&read_input_bytes(Path::new("m.json"), text.as_bytes()).unwrap());
        assert_eq!(again[0].profile.threads.len(), 3);
    }

    #[test]
    fn a_time_is_null_only_if_null_in_every_input() {
        let a =
            doc("p", vec![thread(1, true, None, vec![function("f", 1, None), function("g", 1, None)], vec![])], vec![]);
        let b = doc(
            "p",
            vec![thread(2, true, None, vec![function("f", 1, Some(5)), function("g", 1, None)], vec![])],
            vec![],
        );
        let t = &merge(&[a, b])[0].profile.threads[0];
        let cpu = |n: &str| t.functions.iter().find(|f| f.name == n).unwrap().cpu_ns;
        assert_eq!((cpu("f"), cpu("g")), (Some(5), None));
    }

    #[test]
    fn objects_are_deduplicated_by_kind_and_first_user_and_waits_summed() {
        let obj = |addr: &str| ObjectJson {
            address: addr.into(),
            kind: "mutex".into(),
            first_used_in: Some("push".into()),
            first_tid: 3,
            name: None,
            threads: vec![],
        };
        let wait = |addr: &str, n| WaitJson {
            object: Some(addr.into()),
            object_name: None,
            kind: "mutex".into(),
            wait_ns: Some(n * 10),
            count: n,
            contended: 1,
            hold_ns: None,
            longest_wait_ns: None,
            longest_wait_in: None,
        };
        let a = doc("p", vec![thread(1, true, None, vec![], vec![wait("0xa000", 2)])], vec![obj("0xa000")]);
        let b = doc("p", vec![thread(2, true, None, vec![], vec![wait("0xb000", 3)])], vec![obj("0xb000")]);
        let m = &merge(&[a, b])[0].profile;
        assert_eq!(m.objects.len(), 1);
        assert_eq!((m.objects[0].address.as_str(), m.objects[0].first_tid), ("0xa000", 0));
        let w = &m.threads[0].waits;
        assert_eq!(w.len(), 1);
        assert_eq!(
            (w[0].object.as_deref(), w[0].count, w[0].contended, w[0].wait_ns),
            (Some("0xa000"), 5, 2, Some(50))
        );
    }

    #[test]
    fn merged_waits_keep_the_longest_call_and_join_targets_lose_their_tids() {
        let wait = |ns, caller: &str| WaitJson {
            object: Some("0xa000".into()),
            object_name: Some("big_lock".into()),
            kind: "mutex".into(),
            wait_ns: Some(ns),
            count: 1,
            contended: 1,
            hold_ns: None,
            longest_wait_ns: Some(ns),
            longest_wait_in: Some(caller.into()),
        };
        let obj = |kind: &str, name: &str| ObjectJson {
            address: "0xa000".into(),
            kind: kind.into(),
            first_used_in: Some("push".into()),
            first_tid: 3,
            name: Some(name.into()),
            threads: vec![3],
        };
        let objs = || vec![obj("mutex", "big_lock"), obj("thread", "thread 3 worker")];
        let a = doc("p", vec![thread(1, true, None, vec![], vec![wait(30, "pop")])], objs());
        let b = doc("p", vec![thread(2, true, None, vec![], vec![wait(70, "push")])], objs());
        let c = doc("p", vec![thread(3, true, None, vec![], vec![wait(20, "drain")])], objs());
        let m = &merge(&[a, b, c])[0].profile;
        let w = &m.threads[0].waits[0];
        assert_eq!((w.wait_ns, w.longest_wait_ns, w.longest_wait_in.as_deref()), (Some(120), Some(70), Some("push")));
        let names: Vec<_> = m.objects.iter().map(|o| (o.kind.as_str(), o.name.as_deref(), o.threads.len())).collect();
        assert_eq!(names, [("mutex", Some("big_lock"), 0), ("thread", None, 0)]);
    }

    #[test]
    fn programs_get_one_document_each() {
        let a = doc("a", vec![thread(1, true, None, vec![function("main", 1, None)], vec![])], vec![]);
        let b = doc("b", vec![thread(2, true, None, vec![function("main", 1, None)], vec![])], vec![]);
        let c = doc("a", vec![thread(3, true, None, vec![function("main", 1, None)], vec![])], vec![]);
        let m = merge(&[a, b, c]);
        let got: Vec<(&str, u64)> = m.iter().map(|d| (d.profile.program.as_str(), d.runs)).collect();
        assert_eq!(got, [("a", 2), ("b", 1)]);
    }

    #[test]
    fn a_merged_document_reads_back_with_its_runs() {
        let inputs: Vec<Input> = (0..2).map(|k| run(100 + k, &[(100 + k, vec![(1, 4)])])).collect();
        let m = &merge(&inputs)[0];
        let text = serde_json::to_string_pretty(m).unwrap();
        let back = read_input_bytes(Path::new("merged.json"), text.as_bytes()).unwrap().remove(0);
        assert_eq!((back.runs, back.merged_from.len()), (2, 2));
        assert_eq!(back.profile, m.profile);
        // Merging it with one more run counts 3 runs.
        let again = &merge(&[back, run(200, &[(200, vec![(1, 4)])])])[0];
        assert_eq!((again.runs, calls(&again.profile.threads[0], "worker")), (3, Some(12)));
    }

    #[test]
    fn an_array_of_programs_reads_as_its_documents() {
        let a = doc("a", vec![thread(1, true, None, vec![function("main", 1, None)], vec![])], vec![]);
        let b = doc("b", vec![thread(2, true, None, vec![function("main", 2, None)], vec![])], vec![]);
        let merged = merge(&[a, b]);
        let text = to_json_text(&merged).unwrap();
        assert!(text.starts_with('['), "{text}");
        let back = read_input_bytes(Path::new("all.json"), text.as_bytes()).unwrap();
        let got: Vec<(&str, u64)> = back.iter().map(|i| (i.profile.program.as_str(), i.runs)).collect();
        assert_eq!(got, [("a", 1), ("b", 1)]);
        assert_eq!(merge(&back), merged);
    }

    #[test]
    fn bad_inputs_name_the_file() {
        let e = read_input_bytes(Path::new("junk.bin"), b"\x7fELF....").unwrap_err();
        assert_eq!(e.to_string(), "junk.bin: neither a stint profile nor stint-profile/1 JSON");
        let e = read_input_bytes(Path::new("new.stint"), &[0u8; 8192]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "new.stint: a profile whose header is not written yet (its process is still creating it, or died doing so)"
        );
        let e = read_input_bytes(Path::new("x.json"), br#"{"schema": "other/2"}"#).unwrap_err();
        assert!(e.to_string().starts_with("x.json: schema \"other/2\""), "{e}");
        let e = read_input_bytes(Path::new("t.json"), b"{\"schema\": ").unwrap_err();
        assert!(e.to_string().starts_with("t.json: not a stint-profile/1 document"), "{e}");
        let e = read_input(Path::new("/nonexistent/p.stint")).unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/p.stint: cannot read"), "{e}");
    }

    #[test]
    fn the_table_sums_and_counts_runs() {
        let inputs: Vec<Input> = (0..2).map(|k| run(100 + k, &[(100 + k, vec![(0, 1), (1, 3)])])).collect();
        let table = to_table(&merge(&inputs)[0], Some(1));
        assert!(table.starts_with("program pigz  runs 2  threads 1\n"), "{table}");
        assert!(table.contains("\n      6  worker"), "{table}");
        assert!(table.contains("\n      2  (1 more function)"), "{table}");
        assert!(table.ends_with("total: 1 thread role, 8 calls in 2 runs\n"), "{table}");
    }
}
