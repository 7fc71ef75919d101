//! Chrome trace-event JSON (the "JSON Object Format" of the Trace Event Format document),
//! which chrome://tracing, Perfetto and speedscope open: the same content as the Perfetto
//! export, from [`super::timeline`] — process and thread names as metadata events (`ph: M`),
//! state intervals as complete events (`ph: X`, category `state`) with lock waits nested
//! inside them (category `lock`, named after the object), and the `blocked threads` counter
//! (`ph: C`). Timestamps are microseconds (fractional) since the first profile's start.

use indicatif::ProgressBar;
use serde::Serialize;
use stint_profile::profile::Profile;

use super::timeline;

/// The document.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChromeTrace {
    pub trace_events: Vec<ChromeEvent>,
    pub display_time_unit: &'static str,
}

/// One trace event. Fields a phase does not use are left out.
#[derive(Serialize)]
pub struct ChromeEvent {
    pub name: String,
    pub ph: &'static str,
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cat: Option<&'static str>,
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub args: serde_json::Map<String, serde_json::Value>,
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn args(k: &str, v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert(k.to_owned(), v);
    m
}

/// The trace document for `profiles`.
pub fn build(profiles: &[Profile], progress: &ProgressBar) -> ChromeTrace {
    let mut ev = Vec::new();
    for proc in timeline(profiles, progress) {
        let pid = proc.pid;
        let meta = |name: &str, tid: Option<u32>, value: &str| ChromeEvent {
            name: name.to_owned(),
            ph: "M",
            pid,
            tid,
            ts: None,
            dur: None,
            cat: None,
            args: args("name", value.into()),
        };
        ev.push(meta("process_name", None, &proc.name));
        for th in &proc.threads {
            ev.push(meta("thread_name", Some(th.tid), &th.name));
            for s in &th.slices {
                let complete = |name: &str, cat: &'static str, args| ChromeEvent {
                    name: name.to_owned(),
                    ph: "X",
                    pid,
                    tid: Some(th.tid),
                    ts: Some(us(s.start_ns)),
                    dur: Some(us(s.end_ns - s.start_ns)),
                    cat: Some(cat),
                    args,
                };
                match &s.object {
                    Some(o) => {
                        ev.push(complete(&s.state, "state", args("object", o.as_str().into())));
                        ev.push(complete(o, "lock", serde_json::Map::new()));
                    }
                    None => ev.push(complete(&s.state, s.category(), serde_json::Map::new())),
                }
            }
        }
        for &(ns, n) in &proc.blocked {
            ev.push(ChromeEvent {
                name: "blocked threads".into(),
                ph: "C",
                pid,
                tid: None,
                ts: Some(us(ns)),
                dur: None,
                cat: None,
                args: args("blocked", n.into()),
            });
        }
    }
    ChromeTrace { trace_events: ev, display_time_unit: "ns" }
}

/// The JSON bytes.
pub fn render(profiles: &[Profile], progress: &ProgressBar) -> serde_json::Result<Vec<u8>> {
    let mut v = serde_json::to_vec(&build(profiles, progress))?;
    v.push(b'\n');
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::super::testing::tree_profile;
    use super::*;

    #[test]
    fn names_states_lock_waits_and_counter() {
        let p = tree_profile();
        let v: serde_json::Value =
            serde_json::from_slice(&render(std::slice::from_ref(&p), &ProgressBar::hidden()).unwrap()).unwrap();
        let evs = v["traceEvents"].as_array().unwrap();
        let names: Vec<_> = evs
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .map(|e| (e["tid"].as_u64().unwrap(), e["args"]["name"].as_str().unwrap()))
            .collect();
        assert_eq!(names, vec![(100, "100"), (101, "worker")]);
        let lock: Vec<_> = evs.iter().filter(|e| e["cat"] == "lock").collect();
        assert_eq!(lock.len(), 1);
        assert_eq!(
            (lock[0]["name"].as_str(), lock[0]["ts"].as_f64(), lock[0]["dur"].as_f64()),
            (Some("mutex 0x5000"), Some(0.3), Some(0.4))
        );
        let states = evs.iter().filter(|e| e["cat"] == "state").count();
        assert_eq!(states, 4);
        assert_eq!(evs.iter().filter(|e| e["cat"] == "thread").count(), 1);
        let counter: Vec<_> =
            evs.iter().filter(|e| e["ph"] == "C").map(|e| e["args"]["blocked"].as_i64().unwrap()).collect();
        assert_eq!(counter, vec![1, 0]);
    }
}
