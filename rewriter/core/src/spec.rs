//! Specs (D13): which metrics exist, where they are measured, and whether they are on at
//! start. A spec is data; this module turns YAML into a checked [`Spec`] and answers "is
//! function f selected by metric m". `specs/default.yaml` is compiled into the binary.
//! Function globs are matched by `stint_layout::glob::glob_match`, the matcher the runtime
//! uses for control files, so a glob selects the same functions in both.

use crate::error::{Error, Result};
use serde::Deserialize;
use stint_layout::glob::glob_match;

/// The built-in default spec.
pub const DEFAULT_SPEC: &str = include_str!("../../../specs/default.yaml");

/// Metrics measured by the thread-library wrappers (D4): their globs select among those
/// functions. Which metrics exist, their ids, kinds (`kind:`) and sites (`at:`) come from
/// `stint_layout::METRICS`, the one list of metrics.
const SYNC_BITS: u8 = stint_layout::site_bits(stint_layout::MetricSite::SyncCalls);

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    metrics: Vec<RawMetric>,
    /// Whether each thread keeps a calling-context tree of the timed functions (D16).
    #[serde(default = "yes")]
    call_paths: bool,
    /// Whether the runtime may time one call in N of a point whose calls are short and
    /// frequent (counts stay exact). Off by default: see README "Sampling short calls".
    #[serde(default)]
    sampling: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetric {
    name: String,
    kind: String,
    at: String,
    #[serde(default = "all")]
    functions: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    on_at_start: bool,
}

fn all() -> Vec<String> {
    vec!["*".into()]
}

/// One metric of a checked spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metric {
    pub name: String,
    /// Row in the control region.
    pub id: u32,
    pub functions: Vec<String>,
    pub exclude: Vec<String>,
    pub on_at_start: bool,
}

impl Metric {
    /// Whether function `name` gets this metric.
    pub fn selects(&self, name: &str) -> bool {
        let glob = |g: &String| glob_match(g.as_bytes(), name.as_bytes());
        self.functions.iter().any(glob) && !self.exclude.iter().any(glob)
    }
}

/// A checked spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub metrics: Vec<Metric>,
    /// Each thread keeps a calling-context tree of its timed functions (D16); the runtime's
    /// `STINT_CALLTREE_NODES=0` turns it off for one run.
    pub call_paths: bool,
    /// The runtime times one call in `SAMPLE_EVERY` of a point whose calls are short and
    /// frequent, and estimates its time (counts exact); `false` times every call.
    pub sampling: bool,
}

impl Spec {
    /// Parse and check a spec. Errors name the metric and the problem.
    pub fn parse(text: &str) -> Result<Spec> {
        let raw: RawSpec = serde_yaml_ng::from_str(text).map_err(|e| Error::Spec(e.to_string()))?;
        if raw.metrics.is_empty() {
            return Err(Error::Spec("no metrics: nothing to measure".into()));
        }
        let mut metrics = Vec::new();
        for m in raw.metrics {
            let Some(def) = stint_layout::METRICS.iter().find(|d| d.name() == m.name) else {
                return Err(Error::Spec(format!(
                    "metric {:?}: unknown (this version knows: {})",
                    m.name,
                    stint_layout::METRIC_NAMES.join(", ")
                )));
            };
            let (id, kind, at) = (def.id(), def.kind.name(), def.at.name());
            if m.kind != kind {
                return Err(Error::Spec(format!(
                    "metric {:?}: kind {:?} not supported (expected {kind})",
                    m.name, m.kind
                )));
            }
            if m.at != at {
                return Err(Error::Spec(format!("metric {:?}: at {:?} not supported (expected {at})", m.name, m.at)));
            }
            if metrics.iter().any(|x: &Metric| x.name == m.name) {
                return Err(Error::Spec(format!("metric {:?}: defined twice", m.name)));
            }
            for g in m.functions.iter().chain(&m.exclude) {
                if g.is_empty() {
                    return Err(Error::Spec(format!("metric {:?}: empty function glob", m.name)));
                }
            }
            metrics.push(Metric {
                name: m.name,
                id,
                functions: m.functions,
                exclude: m.exclude,
                on_at_start: m.on_at_start,
            });
        }
        Ok(Spec { metrics, call_paths: raw.call_paths, sampling: raw.sampling })
    }

    /// `metric_bit`s of the function metrics (calls, timers) that select function `name`.
    pub fn bits_for(&self, name: &str) -> u8 {
        self.selecting(name) & !SYNC_BITS
    }

    /// `metric_bit`s a wrapper of thread-library function `name` measures: `calls` if it
    /// selects the name, and the `sync_calls` metrics that select it. 0: not wrapped.
    /// The process functions (`exit`, `wait*`: D22) are wrapped whatever the spec says, with
    /// the hook bit alone: their wrappers record how processes end and measure nothing.
    pub fn wrap_bits_for(&self, name: &str) -> u8 {
        if stint_layout::ProcessFn::from_name(name).is_some() {
            return stint_layout::GATE_HOOK;
        }
        let b = self.selecting(name) & (SYNC_BITS | stint_layout::metric_bit(stint_layout::METRIC_CALLS));
        if b & SYNC_BITS == 0 && stint_layout::wrap_id(name) != Some(stint_layout::WRAP_PTHREAD_CREATE) {
            // Calls alone are counted by an entry point where there is one (static programs);
            // a wrapper is worth its cost only for what only it can measure. pthread_create
            // is always wrapped when selected: it names the threads (start routine, creator).
            return b & SYNC_BITS;
        }
        let id = stint_layout::wrap_id(name);
        if b != 0 && matches!(id, Some(stint_layout::WRAP_PTHREAD_CREATE | stint_layout::WRAP_SETNAME_NP)) {
            // These name threads (start routine, name) for the thread focus: they run even
            // when every metric is off.
            return b | stint_layout::GATE_HOOK;
        }
        b
    }

    fn selecting(&self, name: &str) -> u8 {
        self.metrics.iter().filter(|m| m.selects(name)).fold(0, |b, m| b | stint_layout::metric_bit(m.id))
    }

    /// `metric_bit`s of the metrics on at start.
    pub fn on_at_start_bits(&self) -> u8 {
        self.metrics.iter().filter(|m| m.on_at_start).fold(0, |b, m| b | stint_layout::metric_bit(m.id))
    }

    pub fn default_spec() -> Spec {
        Spec::parse(DEFAULT_SPEC).expect("built-in default spec is valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_spec_counts_and_times_everything() {
        let s = Spec::default_spec();
        let all = stint_layout::metric_bit(stint_layout::METRIC_CALLS) | stint_layout::TIMER_BITS;
        assert_eq!((s.bits_for("main"), s.bits_for("ns::f")), (all, all));
        assert_eq!(s.bits_for("sched_yield"), 0, "spin-wait loops make its counts scheduling-dependent");
        let wait = stint_layout::metric_bit(stint_layout::METRIC_LOCK_WAIT);
        let hold = stint_layout::metric_bit(stint_layout::METRIC_LOCK_HOLD);
        let trace = stint_layout::metric_bit(stint_layout::METRIC_STATE_TRACE);
        assert_eq!(s.on_at_start_bits(), all | wait | hold);
        let calls = stint_layout::metric_bit(0);
        assert_eq!(s.wrap_bits_for("pthread_mutex_lock"), calls | wait | hold | trace);
        let s = Spec::parse(
            "metrics: [{name: calls, kind: counter, at: entry, on_at_start: true},\n\
             {name: wall_time, kind: timer, at: function, functions: [\"parse_*\"]}]",
        )
        .unwrap();
        let (calls, wall) = (stint_layout::metric_bit(0), stint_layout::metric_bit(stint_layout::METRIC_WALL_TIME));
        assert_eq!((s.bits_for("parse_x"), s.bits_for("main")), (calls | wall, calls));
        assert_eq!(s.on_at_start_bits(), calls);
        // Without a sync metric only pthread_create is wrapped (to name threads).
        assert_eq!(s.wrap_bits_for("pthread_mutex_lock"), 0);
        assert_eq!(s.wrap_bits_for("pthread_create"), calls | stint_layout::GATE_HOOK);
        assert_eq!(s.wrap_bits_for("pthread_setname_np"), 0, "without sync metrics setname is not wrapped");
        // The process functions (D22) are wrapped by any spec, with the hook bit alone.
        for f in ["exit", "_exit", "_Exit", "wait", "waitpid", "wait4", "waitid"] {
            assert_eq!(s.wrap_bits_for(f), stint_layout::GATE_HOOK, "{f}");
        }
        assert_eq!(s.wrap_bits_for("execve"), 0);
    }

    #[test]
    fn globs() {
        let glob = |p: &str, t: &str| glob_match(p.as_bytes(), t.as_bytes());
        assert!(glob("parse_*", "parse_header"));
        assert!(!glob("parse_*", "xparse_header"));
        assert!(glob("a?c*", "abcdef"));
        assert!(glob("*", ""));
        assert!(!glob("?", ""));
        // Specs select through the same matcher as control files.
        let m = Metric {
            name: "calls".into(),
            id: 0,
            functions: vec!["parse_*".into(), "ma?n".into()],
            exclude: vec!["*_test".into()],
            on_at_start: true,
        };
        assert!(m.selects("parse_x") && m.selects("main") && !m.selects("parse_test") && !m.selects("mainly"));
    }

    #[test]
    fn bad_specs_are_explained() {
        let e = Spec::parse("metrics: [{name: cycles, kind: counter, at: entry}]").unwrap_err().to_string();
        assert!(e.contains("\"cycles\": unknown"), "{e}");
        let e = Spec::parse("metrics: [{name: calls, kind: timer, at: entry}]").unwrap_err().to_string();
        assert!(e.contains("kind \"timer\""), "{e}");
        assert!(Spec::parse("metrics: [").is_err());
        assert!(Spec::parse("metrics: [{name: calls, kind: counter, at: entry, colour: red}]").is_err());
    }
}
