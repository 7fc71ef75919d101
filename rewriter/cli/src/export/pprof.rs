//! pprof export: a gzipped `profile.proto` (github.com/google/pprof, `proto/profile.proto`)
//! that `go tool pprof` reads.
//!
//! The messages below are the subset of `perftools.profiles` this export fills, written by
//! hand with prost's derive (no protoc at build time); field numbers are the schema's. Sample
//! types are `calls/count`, `cpu/nanoseconds` and `wall/nanoseconds`; each call path is one
//! sample with EXCLUSIVE values (the leaf's calls and self times), so pprof's flat column is
//! self time / calls per function and its cum column sums the paths through a function. Each
//! sample carries a `thread` label (name, else tid) and a numeric `pid` label. One location
//! per function, at the function's address in the input ELF, under one mapping with
//! `has_functions` set (nothing left for pprof to symbolize).

use std::collections::HashMap;
use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use indicatif::ProgressBar;
use prost::Message;
use stint_profile::profile::Profile;

use super::{all_paths, function_address, function_name, ns, thread_label};

#[derive(Clone, PartialEq, Message)]
pub struct PprofProfile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// The string table: index 0 is "", as the format requires.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings::default();
        s.get("");
        s
    }
    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// The pprof message for `profiles` (before compression).
pub fn build(profiles: &[Profile], progress: &ProgressBar) -> PprofProfile {
    let mut st = Strings::new();
    let sample_type = ["calls", "count", "cpu", "nanoseconds", "wall", "nanoseconds"]
        .chunks(2)
        .map(|c| ValueType { r#type: st.get(c[0]), unit: st.get(c[1]) })
        .collect();
    let (thread_key, pid_key) = (st.get("thread"), st.get("pid"));
    // One mapping per input program, one function + location per (program, function).
    let mut mappings: Vec<Mapping> = Vec::new();
    let mut mapping_of: HashMap<String, u64> = HashMap::new();
    let mut functions: Vec<Function> = Vec::new();
    let mut locations: Vec<Location> = Vec::new();
    let mut location_of: HashMap<(u64, String, u64), u64> = HashMap::new();
    let mut samples = Vec::new();
    for (p, t, paths) in all_paths(profiles, progress) {
        let file = p.input.clone().unwrap_or_else(|| p.program.clone());
        let mapping_id = *mapping_of.entry(file.clone()).or_insert_with(|| {
            let id = mappings.len() as u64 + 1;
            mappings.push(Mapping {
                id,
                memory_start: 0,
                memory_limit: u64::MAX,
                file_offset: 0,
                filename: st.get(&file),
                build_id: 0,
                has_functions: true,
            });
            id
        });
        let thread = st.get(&thread_label(p, t));
        for s in paths {
            let values = [s.calls, ns(p, s.self_cpu_ticks), ns(p, s.self_wall_ticks)];
            if values == [0, 0, 0] {
                continue;
            }
            let location_id = s
                .stack
                .iter()
                .rev()
                .map(|&point| {
                    let (name, address) = (function_name(p, point), function_address(p, point));
                    let key = (mapping_id, name, address);
                    if let Some(&id) = location_of.get(&key) {
                        return id;
                    }
                    let id = locations.len() as u64 + 1;
                    let fname = st.get(&key.1);
                    functions.push(Function { id, name: fname, system_name: fname, filename: st.get(&file) });
                    locations.push(Location { id, mapping_id, address, line: vec![Line { function_id: id, line: 0 }] });
                    location_of.insert(key, id);
                    id
                })
                .collect();
            samples.push(Sample {
                location_id,
                value: values.iter().map(|&v| v.min(i64::MAX as u64) as i64).collect(),
                label: vec![
                    Label { key: thread_key, str: thread, num: 0 },
                    Label { key: pid_key, str: 0, num: p.pid as i64 },
                ],
            });
        }
    }
    let start = profiles.iter().map(|p| p.start_realtime_ns).min().unwrap_or(0);
    // The profiles cover up to the last end any of them saw: a recorded process end, else its
    // threads' last recorded end or wrapper event.
    let end = profiles
        .iter()
        .map(|p| {
            let last_thread = p.threads.iter().filter_map(|t| super::thread_end(p, t)).max().unwrap_or(0);
            p.process.end_realtime_ns.max(p.start_realtime_ns.saturating_add(last_thread))
        })
        .max()
        .unwrap_or(start);
    let comment = vec![st.get("stint export: exact calls and times per call path; values are exclusive")];
    let default_sample_type = if profiles.iter().any(|p| p.tsc_hz != 0) { st.get("cpu") } else { st.get("calls") };
    PprofProfile {
        sample_type,
        sample: samples,
        mapping: mappings,
        location: locations,
        function: functions,
        string_table: st.table,
        time_nanos: start.min(i64::MAX as u64) as i64,
        duration_nanos: end.saturating_sub(start).min(i64::MAX as u64) as i64,
        comment,
        default_sample_type,
    }
}

/// The gzipped `profile.proto` bytes.
pub fn render(profiles: &[Profile], progress: &ProgressBar) -> std::io::Result<Vec<u8>> {
    let raw = build(profiles, progress).encode_to_vec();
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&raw)?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use super::super::testing::tree_profile;
    use super::*;

    /// (stack of names leaf first, values, thread label) per sample.
    fn readable(m: &PprofProfile) -> Vec<(Vec<String>, Vec<i64>, String)> {
        let name = |loc: u64| {
            let l = &m.location[loc as usize - 1];
            let f = &m.function[l.line[0].function_id as usize - 1];
            m.string_table[f.name as usize].clone()
        };
        m.sample
            .iter()
            .map(|s| {
                let thread = s.label.iter().find(|l| m.string_table[l.key as usize] == "thread").unwrap();
                (
                    s.location_id.iter().map(|&l| name(l)).collect(),
                    s.value.clone(),
                    m.string_table[thread.str as usize].clone(),
                )
            })
            .collect()
    }

    #[test]
    fn one_sample_per_path_with_exclusive_values_and_a_thread_label() {
        let p = tree_profile();
        let m = build(std::slice::from_ref(&p), &ProgressBar::hidden());
        let types: Vec<_> = m
            .sample_type
            .iter()
            .map(|v| format!("{}/{}", m.string_table[v.r#type as usize], m.string_table[v.unit as usize]))
            .collect();
        assert_eq!(types, ["calls/count", "cpu/nanoseconds", "wall/nanoseconds"]);
        let got = readable(&m);
        assert_eq!(got.len(), 10);
        let worker: Vec<_> = got.iter().filter(|s| s.2 == "worker").map(|s| (s.0.join(";"), s.1.clone())).collect();
        assert_eq!(
            worker,
            vec![
                ("main".to_owned(), vec![1, 100, 900]),
                ("a;main".to_owned(), vec![1, 100, 200]),
                ("b;a;main".to_owned(), vec![3, 300, 300]),
                ("c;main".to_owned(), vec![1, 50, 50]),
                ("b;c;main".to_owned(), vec![5, 450, 550]),
            ]
        );
        // The other thread has no name: labelled by tid.
        assert_eq!(got.iter().filter(|s| s.2 == "100").count(), 5);
        // One location per function, at its address.
        let addrs: Vec<u64> = m.location.iter().map(|l| l.address).collect();
        assert_eq!(addrs, [0x1000, 0x1100, 0x1200, 0x1300]);
    }

    #[test]
    fn duration_runs_to_the_last_thread_end() {
        let mut p = tree_profile();
        p.threads[0].end_monotonic_ns = Some(p.start_monotonic_ns + 7_000);
        p.threads[1].end_monotonic_ns = Some(p.start_monotonic_ns + 9_000);
        let m = build(std::slice::from_ref(&p), &ProgressBar::hidden());
        assert_eq!((m.time_nanos as u64, m.duration_nanos), (p.start_realtime_ns, 9_000));
        // A recorded process end later than every thread end wins.
        p.process.end_realtime_ns = p.start_realtime_ns + 12_000;
        assert_eq!(build(std::slice::from_ref(&p), &ProgressBar::hidden()).duration_nanos, 12_000);
    }

    #[test]
    fn output_is_gzip_that_decodes_back() {
        let p = tree_profile();
        let gz = render(std::slice::from_ref(&p), &ProgressBar::hidden()).unwrap();
        assert_eq!(&gz[..2], &[0x1f, 0x8b]);
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw).unwrap();
        let back = PprofProfile::decode(&raw[..]).unwrap();
        assert_eq!(back, build(std::slice::from_ref(&p), &ProgressBar::hidden()));
    }
}
