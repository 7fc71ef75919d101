//! Firefox Profiler export: the processed profile format, written by the
//! `fxprof-processed-profile` crate (the format's own library, used by samply).
//!
//! stint measures, it does not sample, so each call path becomes ONE sample whose weight is
//! the path's self figure: self CPU time by default (the profiler's call tree, flame graph and
//! "running time" then show CPU time per path), or calls / self wall time with `--weight`.
//! Weights are integers in units of the declared sampling interval: 1 ns, or a coarser power
//! of ten when the largest path would not fit an `i32`. The samples of a thread are laid out
//! one after the other from the thread's start, each as long as its weight, with its CPU
//! delta set to its self CPU time. Lock waits from the transition ring are interval markers
//! (`LockWait`, with the object and the state) on the thread that waited.

use fxprof_processed_profile::{
    CategoryColor, CategoryHandle, CpuDelta, Frame, FrameFlags, FrameInfo, MarkerFieldFlags, MarkerFieldFormat,
    MarkerTiming, Profile as FxProfile, ReferenceTimestamp, SamplingInterval, StaticSchemaMarker,
    StaticSchemaMarkerField, StringHandle, Timestamp,
};
use indicatif::ProgressBar;
use stint_profile::calltree::paths;
use stint_profile::profile::Profile;

use super::{function_name, ns, thread_label, timeline, Weight};

/// A lock wait: the thread was blocked on `object` in `state`.
struct LockWait {
    name: StringHandle,
    object: StringHandle,
    state: StringHandle,
    category: CategoryHandle,
}

impl StaticSchemaMarker for LockWait {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "LockWait";
    const CHART_LABEL: Option<&'static str> = Some("{marker.data.object}");
    const TOOLTIP_LABEL: Option<&'static str> = Some("{marker.data.state} on {marker.data.object}");
    const TABLE_LABEL: Option<&'static str> = Some("{marker.data.state} on {marker.data.object}");
    const FIELDS: &'static [StaticSchemaMarkerField] = &[
        StaticSchemaMarkerField {
            key: "object",
            label: "Object",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
        StaticSchemaMarkerField {
            key: "state",
            label: "State",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
    ];

    fn name(&self, _: &mut FxProfile) -> StringHandle {
        self.name
    }
    fn category(&self, _: &mut FxProfile) -> CategoryHandle {
        self.category
    }
    fn string_field_value(&self, field_index: u32) -> StringHandle {
        if field_index == 0 {
            self.object
        } else {
            self.state
        }
    }
    fn number_field_value(&self, _: u32) -> f64 {
        0.0
    }
}

/// The Firefox Profiler document for `profiles`, weighed by `weight`.
pub fn build(profiles: &[Profile], weight: Weight, progress: &ProgressBar) -> FxProfile {
    let origin = profiles.iter().map(|p| p.start_realtime_ns).min().unwrap_or(0);
    // The unit of a weight: 1 ns (or 1 call), times ten until the largest path fits an i32.
    let max = profiles
        .iter()
        .flat_map(|p| p.threads.iter().flat_map(move |t| paths(t).into_iter().map(move |s| weight.of(p, &s))))
        .max()
        .unwrap_or(0);
    let mut unit = 1u64;
    while max / unit > i32::MAX as u64 {
        unit *= 10;
    }
    let product = profiles.iter().map(|p| p.program.as_str()).collect::<Vec<_>>().join(", ");
    let interval =
        if weight == Weight::Calls { SamplingInterval::from_millis(1) } else { SamplingInterval::from_nanos(unit) };
    let mut fx =
        FxProfile::new(&product, ReferenceTimestamp::from_millis_since_unix_epoch(origin as f64 / 1e6), interval);
    let code = fx.add_category("Code", CategoryColor::Yellow);
    let lock = fx.add_category("Lock wait", CategoryColor::Red);
    let timelines = timeline(profiles, &ProgressBar::hidden());
    for (p, tl) in profiles.iter().zip(timelines) {
        let base = p.start_realtime_ns.saturating_sub(origin);
        let process = fx.add_process(&p.program, p.pid, Timestamp::from_nanos_since_reference(base));
        for (t, track) in p.threads.iter().zip(tl.threads) {
            let start = base.saturating_add(t.registered_monotonic_ns.saturating_sub(p.start_monotonic_ns));
            let th = fx.add_thread(process, t.tid, Timestamp::from_nanos_since_reference(start), t.is_main(p));
            fx.set_thread_name(th, &thread_label(p, t));
            let mut at = start;
            for s in paths(t) {
                let w = weight.of(p, &s) / unit;
                if w == 0 {
                    continue;
                }
                let frames: Vec<FrameInfo> = s
                    .stack
                    .iter()
                    .map(|&point| FrameInfo {
                        frame: Frame::Label(fx.intern_string(&function_name(p, point))),
                        category_pair: code.into(),
                        flags: FrameFlags::empty(),
                    })
                    .collect();
                let stack = fx.intern_stack_frames(th, frames.into_iter());
                let cpu = CpuDelta::from_nanos(ns(p, s.self_cpu_ticks));
                fx.add_sample(th, Timestamp::from_nanos_since_reference(at), stack, cpu, w as i32);
                at = at.saturating_add(if weight == Weight::Calls { w } else { w * unit });
            }
            for sl in track.slices.iter().filter(|s| s.object.is_some()) {
                let object = sl.object.as_deref().unwrap_or_default();
                let m = LockWait {
                    name: fx.intern_string(object),
                    object: fx.intern_string(object),
                    state: fx.intern_string(&sl.state),
                    category: lock,
                };
                let timing = MarkerTiming::Interval(
                    Timestamp::from_nanos_since_reference(sl.start_ns),
                    Timestamp::from_nanos_since_reference(sl.end_ns),
                );
                fx.add_marker(th, timing, m);
            }
            progress.inc(1);
        }
    }
    fx
}

/// The JSON bytes.
pub fn render(profiles: &[Profile], weight: Weight, progress: &ProgressBar) -> serde_json::Result<Vec<u8>> {
    let mut v = serde_json::to_vec(&build(profiles, weight, progress))?;
    v.push(b'\n');
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::super::testing::tree_profile;
    use super::*;

    #[test]
    fn processed_format_with_one_sample_per_path_and_lock_markers() {
        let p = tree_profile();
        let v: serde_json::Value =
            serde_json::from_slice(&render(std::slice::from_ref(&p), Weight::Cpu, &ProgressBar::hidden()).unwrap())
                .unwrap();
        assert_eq!(v["meta"]["preprocessedProfileVersion"], 55);
        // One ns per unit of weight (the interval is in ms).
        assert!((v["meta"]["interval"].as_f64().unwrap() - 1e-6).abs() < 1e-12, "{}", v["meta"]["interval"]);
        let threads = v["threads"].as_array().unwrap();
        assert_eq!(threads.len(), 2);
        let worker = threads.iter().find(|t| t["name"] == "worker").unwrap();
        // Five paths, self CPU 100, 100, 300, 50, 450 ns.
        let weights: Vec<i64> =
            worker["samples"]["weight"].as_array().unwrap().iter().map(|w| w.as_i64().unwrap()).collect();
        assert_eq!(weights, vec![100, 100, 300, 50, 450]);
        let strings = worker["stringArray"].as_array().unwrap();
        for f in ["main", "a", "b", "c", "mutex 0x5000"] {
            assert!(strings.iter().any(|s| s == f), "{f} missing from {strings:?}");
        }
        assert_eq!(worker["markers"]["length"], 1);
    }
}
