//! Exporters (DESIGN D20): thin functions from the typed profile model to the formats people
//! already open — pprof, Perfetto, Chrome trace JSON, Firefox Profiler, folded stacks and SVG
//! flame graphs. Each format is one module returning the output's bytes; `commands/export.rs`
//! picks the module and writes the bytes (temporary name + rename).
//!
//! Every exporter is built on the same two views of a profile, both defined here or in
//! `stint_profile::calltree`:
//! - **call paths** ([`stint_profile::calltree::paths`]): one sample per path with exact calls
//!   and inclusive/self CPU and wall ticks; on a profile without a calling-context tree this
//!   is one single-frame path per function, so every export works on flat profiles too;
//! - **the timeline** ([`timeline`]): per thread, the state intervals of its transition ring
//!   (RUN, BLOCKED_MUTEX on `mutex 0x…`, …) and a process counter of blocked threads.
//!
//! They live in the CLI crate (not stint-profile) because they pull in format crates (prost,
//! flate2, fxprof-processed-profile, inferno) that no other reader of profiles needs.

pub mod chrome;
pub mod firefox;
pub mod folded;
pub mod perfetto;
pub mod pprof;

use indicatif::ProgressBar;
use stint_layout::{state_name, STATE_EXITED, STATE_RUN};
use stint_profile::calltree::{paths, PathSample};
use stint_profile::profile::{Profile, ThreadProfile};

/// What a flame graph or folded-stack line weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    /// Calls of the leaf through the path.
    Calls,
    /// Self CPU time of the leaf, nanoseconds.
    Cpu,
    /// Self wall time of the leaf, nanoseconds.
    Wall,
}

impl Weight {
    /// `cpu` when any thread of the profiles measured time, else `calls` (the default spec
    /// counts calls only, and a CPU-weighted graph of it would be empty).
    pub fn default_for(profiles: &[Profile]) -> Weight {
        let timed =
            profiles.iter().any(|p| p.tsc_hz != 0 && p.threads.iter().any(|t| t.times.iter().any(|x| x.1 != 0)));
        if timed {
            Weight::Cpu
        } else {
            Weight::Calls
        }
    }

    /// The path's value under this weight (times in ns; 0 without a calibration).
    pub fn of(self, p: &Profile, s: &PathSample) -> u64 {
        match self {
            Weight::Calls => s.calls,
            Weight::Cpu => ns(p, s.self_cpu_ticks),
            Weight::Wall => ns(p, s.self_wall_ticks),
        }
    }

    /// Unit of the values, for titles and legends.
    pub fn unit(self) -> &'static str {
        match self {
            Weight::Calls => "calls",
            Weight::Cpu => "ns CPU",
            Weight::Wall => "ns wall",
        }
    }
}

/// TSC ticks in ns, 0 when the profile has no calibration.
pub fn ns(p: &Profile, ticks: u64) -> u64 {
    p.ticks_to_ns(ticks).unwrap_or(0)
}

/// How exports name a thread: its name when no other thread of its process has the same
/// one, `name (tid)` when several share it (threads inherit the program's name), else its
/// tid.
pub fn thread_label(p: &Profile, t: &ThreadProfile) -> String {
    match t.name.as_deref().filter(|n| !n.is_empty()) {
        Some(n) if p.threads.iter().filter(|o| o.name.as_deref() == Some(n)).count() > 1 => format!("{n} ({})", t.tid),
        Some(n) => n.to_owned(),
        None => t.tid.to_string(),
    }
}

/// The function name of point `id` (`point#<id>` for an id the meta does not list).
pub fn function_name(p: &Profile, id: u32) -> String {
    p.point(id).map(|pm| pm.function.clone()).unwrap_or_else(|| format!("point#{id}"))
}

/// The function's address in the input ELF, 0 when unknown.
pub fn function_address(p: &Profile, id: u32) -> u64 {
    p.point(id).and_then(|pm| pm.address_value()).unwrap_or(0)
}

/// The call paths of every thread of every profile, with the progress bar stepped once per
/// thread.
pub fn all_paths<'a>(
    profiles: &'a [Profile],
    progress: &ProgressBar,
) -> Vec<(&'a Profile, &'a ThreadProfile, Vec<PathSample>)> {
    let mut out = Vec::new();
    for p in profiles {
        for t in &p.threads {
            out.push((p, t, paths(t)));
            progress.inc(1);
        }
    }
    out
}

/// How a sync object is named in exports: `mutex 0x7ffd1234`.
pub fn object_label(p: &Profile, index: u32) -> String {
    match p.object(index) {
        Some(o) => format!("{} {:#x}", o.kind_name(), o.address),
        None => format!("object #{index}"),
    }
}

/// One state interval of a thread, ns since the first profile's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateSlice {
    pub start_ns: u64,
    pub end_ns: u64,
    /// `RUN`, `BLOCKED_MUTEX`, …
    pub state: String,
    /// The object a blocked thread waited for (`mutex 0x…`).
    pub object: Option<String>,
}

impl StateSlice {
    /// `thread` for a lifetime slice, `state` for a state interval.
    pub fn category(&self) -> &'static str {
        if self.state == LIFETIME {
            "thread"
        } else {
            "state"
        }
    }
}

/// The name of the one slice of a thread whose profile recorded no transitions (state_trace
/// off): its lifetime, so every thread still has a visible track.
pub const LIFETIME: &str = "thread";

/// One thread's track of the timeline.
#[derive(Clone, Debug)]
pub struct ThreadTrack {
    pub tid: u32,
    pub name: String,
    pub slices: Vec<StateSlice>,
}

/// One process of the timeline: its threads' tracks and the number of blocked threads over
/// time.
#[derive(Clone, Debug)]
pub struct ProcessTrack {
    pub pid: u32,
    pub name: String,
    pub threads: Vec<ThreadTrack>,
    /// `(ns, threads blocked from then on)`, ascending by time.
    pub blocked: Vec<(u64, i64)>,
}

/// The timeline of each profile, on one time axis: ns since the start of the earliest
/// profile (CLOCK_REALTIME at start orders several processes).
pub fn timeline(profiles: &[Profile], progress: &ProgressBar) -> Vec<ProcessTrack> {
    let origin = profiles.iter().map(|p| p.start_realtime_ns).min().unwrap_or(0);
    profiles
        .iter()
        .map(|p| {
            let base = p.start_realtime_ns.saturating_sub(origin);
            let at = |tsc: u64| base.saturating_add(p.tsc_to_ns_since_start(tsc).unwrap_or(0));
            let mut changes: Vec<(u64, i64)> = Vec::new();
            let threads = p
                .threads
                .iter()
                .map(|t| {
                    let end = thread_end(p, t).map(|e| base.saturating_add(e));
                    let registered =
                        base.saturating_add(t.registered_monotonic_ns.saturating_sub(p.start_monotonic_ns));
                    let mut slices = Vec::new();
                    match t.transitions.first() {
                        None => slices.push(StateSlice {
                            start_ns: registered,
                            end_ns: end.unwrap_or(registered).max(registered),
                            state: LIFETIME.to_owned(),
                            object: None,
                        }),
                        // The whole ring is kept: the thread ran from its registration to its
                        // first transition.
                        Some(first) if t.ring_head == t.transitions.len() as u64 && registered < at(first.tsc) => {
                            slices.push(StateSlice {
                                start_ns: registered,
                                end_ns: at(first.tsc),
                                state: state_name(STATE_RUN).unwrap_or("RUN").to_owned(),
                                object: None,
                            })
                        }
                        Some(_) => {}
                    }
                    for (i, tr) in t.transitions.iter().enumerate() {
                        if tr.state == STATE_EXITED {
                            continue;
                        }
                        let start_ns = at(tr.tsc);
                        let end_ns = match t.transitions.get(i + 1) {
                            Some(next) => at(next.tsc),
                            None => end.unwrap_or(start_ns),
                        }
                        .max(start_ns);
                        let blocked = tr.state != STATE_RUN;
                        if blocked {
                            changes.push((start_ns, 1));
                            changes.push((end_ns, -1));
                        }
                        slices.push(StateSlice {
                            start_ns,
                            end_ns,
                            state: state_name(tr.state).unwrap_or("UNKNOWN").to_owned(),
                            object: tr.object.filter(|_| blocked).map(|o| object_label(p, o)),
                        });
                    }
                    progress.inc(1);
                    ThreadTrack { tid: t.tid, name: thread_label(p, t), slices }
                })
                .collect();
            // Ends before starts at equal times, so a hand-over reads as no change.
            changes.sort_by_key(|&(ns, d)| (ns, d));
            let mut blocked = Vec::new();
            let mut n = 0i64;
            for (ns, d) in changes {
                n += d;
                match blocked.last_mut() {
                    Some((last, v)) if *last == ns => *v = n,
                    _ => blocked.push((ns, n)),
                }
            }
            ProcessTrack { pid: p.pid, name: p.program.clone(), threads, blocked }
        })
        .collect()
}

/// When the thread's last state interval ends, ns since its process's start: its recorded
/// end, else its last wrapper event.
pub(crate) fn thread_end(p: &Profile, t: &ThreadProfile) -> Option<u64> {
    match t.end_monotonic_ns {
        Some(e) => Some(e.saturating_sub(p.start_monotonic_ns)),
        None => (t.last_tsc != 0).then(|| p.tsc_to_ns_since_start(t.last_tsc)).flatten(),
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A profile value with a calling-context tree, built directly (the tree reader belongs to
    //! another part): main(0) → a(1) → b(2) ×3, main → c(3) → b ×5, on two threads, with a
    //! mutex wait in the second thread's transitions.

    use stint_layout::meta::{PointMeta, POINT_ENTRY};
    use stint_layout::{OBJ_MUTEX, STATE_BLOCKED_MUTEX, STATE_RUN};
    use stint_profile::calltree::CallNode;
    use stint_profile::profile::{ObjectProfile, Profile, TransitionProfile};

    /// 1 GHz TSC: one tick is one ns, so expected values read directly.
    pub const HZ: u64 = 1_000_000_000;

    fn node(parent: Option<u32>, point: u32, calls: u64, cpu: u64, wall: u64) -> CallNode {
        CallNode { parent, point, calls, cpu_ticks: cpu, wall_ticks: wall, ..CallNode::default() }
    }

    pub fn tree_profile() -> Profile {
        let json = stint_profile::synthetic::synthetic_meta(
            "demo",
            &[("main", "0x1000"), ("a", "0x1100"), ("b", "0x1200"), ("c", "0x1300")],
        );
        let bytes = stint_profile::synthetic::write_synthetic(&json, &[(100, vec![(0, 1)]), (101, vec![(0, 1)])]);
        let mut p = stint_profile::profile::parse_with(&bytes, &stint_profile::profile::Observer::ENDED).unwrap();
        p.tsc_hz = HZ;
        p.points = ["main", "a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, f)| PointMeta {
                id: i as u32,
                kind: POINT_ENTRY.into(),
                function: (*f).into(),
                address: format!("{:#x}", 0x1000 + 0x100 * i),
                bits: 0,
                size: 0x80,
                tail_jumps_to: Vec::new(),
                entry_exit: false,
            })
            .collect();
        let tree = vec![
            node(None, 0, 1, 1000, 2000),
            node(Some(0), 1, 1, 400, 500),
            node(Some(1), 2, 3, 300, 300),
            node(Some(0), 3, 1, 500, 600),
            node(Some(3), 2, 5, 450, 550),
        ];
        for (i, t) in p.threads.iter_mut().enumerate() {
            t.calltree = tree.clone();
            t.name = (i == 1).then(|| "worker".to_owned());
        }
        p.objects = vec![ObjectProfile {
            index: 0,
            address: 0x5000,
            first_pc: 0,
            kind: OBJ_MUTEX,
            first_tid: 101,
            symbol: None,
        }];
        let s = p.start_tsc;
        p.threads[1].transitions = vec![
            TransitionProfile { tsc: s + 100, state: STATE_RUN, object: None },
            TransitionProfile { tsc: s + 300, state: STATE_BLOCKED_MUTEX, object: Some(0) },
            TransitionProfile { tsc: s + 700, state: STATE_RUN, object: None },
        ];
        p.threads[1].ring_head = 3;
        p.threads[1].registered_monotonic_ns = p.start_monotonic_ns + 50;
        p.threads[1].end_monotonic_ns = Some(p.start_monotonic_ns + 900);
        p.threads[0].registered_monotonic_ns = p.start_monotonic_ns + 10;
        p.threads[0].end_monotonic_ns = Some(p.start_monotonic_ns + 1000);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::testing::tree_profile;
    use super::*;

    #[test]
    fn timeline_has_state_slices_with_the_object_and_a_blocked_counter() {
        let p = tree_profile();
        let tl = timeline(std::slice::from_ref(&p), &ProgressBar::hidden());
        assert_eq!(tl.len(), 1);
        assert_eq!(tl[0].threads.len(), 2);
        let w = &tl[0].threads[1];
        assert_eq!(w.name, "worker");
        let got: Vec<_> =
            w.slices.iter().map(|s| (s.start_ns, s.end_ns, s.state.as_str(), s.object.as_deref())).collect();
        assert_eq!(
            got,
            vec![
                (50, 100, "RUN", None),
                (100, 300, "RUN", None),
                (300, 700, "BLOCKED_MUTEX", Some("mutex 0x5000")),
                (700, 900, "RUN", None)
            ]
        );
        // No transitions: one lifetime slice.
        let m = &tl[0].threads[0];
        let got: Vec<_> = m.slices.iter().map(|s| (s.start_ns, s.end_ns, s.state.as_str())).collect();
        assert_eq!(got, vec![(10, 1000, LIFETIME)]);
        assert_eq!(tl[0].blocked, vec![(300, 1), (700, 0)]);
    }

    #[test]
    fn threads_sharing_a_name_are_told_apart_by_tid() {
        let mut p = tree_profile();
        assert_eq!((thread_label(&p, &p.threads[0]), thread_label(&p, &p.threads[1])), ("100".into(), "worker".into()));
        p.threads[0].name = Some("worker".into());
        assert_eq!(thread_label(&p, &p.threads[0]), "worker (100)");
    }

    #[test]
    fn weight_defaults_to_calls_without_times() {
        let mut p = tree_profile();
        assert_eq!(Weight::default_for(std::slice::from_ref(&p)), Weight::Calls);
        p.threads[0].times = vec![(0, 5, 6)];
        assert_eq!(Weight::default_for(std::slice::from_ref(&p)), Weight::Cpu);
    }
}
