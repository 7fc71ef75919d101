//! Perfetto export: a native protobuf trace (`perfetto.protos.Trace`) that ui.perfetto.dev and
//! trace_processor open.
//!
//! The messages are the few of `protos/perfetto/trace/perfetto_trace.proto` this export
//! writes, by hand with prost's derive; tags and types are the published schema's (a test
//! decodes the output with that schema). What is written, from [`super::timeline`]:
//! - a process track per profile (pid, program name);
//! - a thread track per thread (tid, name), child of its process;
//! - on each thread track, one slice per state interval of the thread's transition ring
//!   (`RUN`, `BLOCKED_MUTEX`, …; category `state`), and inside a BLOCKED_* slice a lock-wait
//!   slice named after the object (`mutex 0x7ffd…`, category `lock`);
//! - a counter track per process, `blocked threads`, stepping at every block and wake-up.
//!
//! All packets are on one sequence; the first clears incremental state (trace_processor
//! drops track events on a sequence whose state was never cleared).

use indicatif::ProgressBar;
use prost::Message;
use stint_profile::profile::Profile;

use super::timeline;

#[derive(Clone, PartialEq, Message)]
pub struct Trace {
    #[prost(message, repeated, tag = "1")]
    pub packet: Vec<TracePacket>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ProcessDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ThreadDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(int64, optional, tag = "2")]
    pub tid: Option<i64>,
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct CounterDescriptor {
    #[prost(string, optional, tag = "6")]
    pub unit_name: Option<String>,
}

/// `TrackEvent.Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum EventType {
    SliceBegin = 1,
    SliceEnd = 2,
    Counter = 4,
}

#[derive(Clone, PartialEq, Message)]
pub struct TrackEvent {
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    #[prost(enumeration = "EventType", optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct DebugAnnotation {
    #[prost(string, optional, tag = "6")]
    pub string_value: Option<String>,
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
}

/// The only sequence of the trace.
const SEQUENCE: u32 = 1;
/// `TracePacket.SequenceFlags`.
const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

fn descriptor(d: TrackDescriptor) -> TracePacket {
    TracePacket { trusted_packet_sequence_id: Some(SEQUENCE), track_descriptor: Some(d), ..Default::default() }
}

fn event(ts: u64, e: TrackEvent) -> TracePacket {
    TracePacket {
        timestamp: Some(ts),
        trusted_packet_sequence_id: Some(SEQUENCE),
        track_event: Some(e),
        sequence_flags: Some(SEQ_NEEDS_INCREMENTAL_STATE),
        ..Default::default()
    }
}

fn slice(ts: u64, track: u64, ty: EventType, name: Option<&str>, category: &str, object: Option<&str>) -> TracePacket {
    event(
        ts,
        TrackEvent {
            r#type: Some(ty as i32),
            track_uuid: Some(track),
            name: name.map(str::to_owned),
            categories: if ty == EventType::SliceBegin { vec![category.to_owned()] } else { vec![] },
            debug_annotations: object
                .map(|o| DebugAnnotation { name: Some("object".into()), string_value: Some(o.to_owned()) })
                .into_iter()
                .collect(),
            ..Default::default()
        },
    )
}

/// The trace message for `profiles`.
pub fn build(profiles: &[Profile], progress: &ProgressBar) -> Trace {
    let mut descriptors = Vec::new();
    // (ts, order of emission, packet): sorted by time, emission order kept at equal times, so
    // an end at t comes before the next begin at t and nested slices stay nested.
    let mut events: Vec<(u64, usize, TracePacket)> = Vec::new();
    let mut uuid = 0u64;
    let mut next_uuid = || {
        uuid += 1;
        uuid
    };
    for proc in timeline(profiles, progress) {
        let pid = proc.pid as i32;
        let process_uuid = next_uuid();
        descriptors.push(descriptor(TrackDescriptor {
            uuid: Some(process_uuid),
            process: Some(ProcessDescriptor { pid: Some(pid), process_name: Some(proc.name.clone()) }),
            ..Default::default()
        }));
        for th in &proc.threads {
            let track = next_uuid();
            descriptors.push(descriptor(TrackDescriptor {
                uuid: Some(track),
                parent_uuid: Some(process_uuid),
                thread: Some(ThreadDescriptor {
                    pid: Some(pid),
                    tid: Some(th.tid as i64),
                    thread_name: Some(th.name.clone()),
                }),
                ..Default::default()
            }));
            for s in &th.slices {
                let mut push = |ts: u64, p: TracePacket| events.push((ts, events.len(), p));
                let obj = s.object.as_deref();
                push(s.start_ns, slice(s.start_ns, track, EventType::SliceBegin, Some(&s.state), s.category(), obj));
                if let Some(o) = obj {
                    push(s.start_ns, slice(s.start_ns, track, EventType::SliceBegin, Some(o), "lock", None));
                    push(s.end_ns, slice(s.end_ns, track, EventType::SliceEnd, None, "lock", None));
                }
                push(s.end_ns, slice(s.end_ns, track, EventType::SliceEnd, None, s.category(), None));
            }
        }
        let counter = next_uuid();
        descriptors.push(descriptor(TrackDescriptor {
            uuid: Some(counter),
            parent_uuid: Some(process_uuid),
            name: Some("blocked threads".into()),
            counter: Some(CounterDescriptor { unit_name: Some("threads".into()) }),
            ..Default::default()
        }));
        for &(ts, n) in &proc.blocked {
            let e = TrackEvent {
                r#type: Some(EventType::Counter as i32),
                track_uuid: Some(counter),
                counter_value: Some(n),
                ..Default::default()
            };
            events.push((ts, events.len(), event(ts, e)));
        }
    }
    events.sort_by_key(|&(ts, order, _)| (ts, order));
    let mut packet = descriptors;
    packet.extend(events.into_iter().map(|e| e.2));
    if let Some(first) = packet.first_mut() {
        first.sequence_flags = Some(SEQ_INCREMENTAL_STATE_CLEARED);
    }
    Trace { packet }
}

/// The protobuf bytes of the trace.
pub fn render(profiles: &[Profile], progress: &ProgressBar) -> Vec<u8> {
    build(profiles, progress).encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::super::testing::tree_profile;
    use super::*;

    #[test]
    fn a_track_per_thread_and_nested_lock_slices() {
        let p = tree_profile();
        let t = build(std::slice::from_ref(&p), &ProgressBar::hidden());
        let threads: Vec<_> = t
            .packet
            .iter()
            .filter_map(|x| x.track_descriptor.as_ref()?.thread.as_ref())
            .map(|d| (d.tid, d.thread_name.clone()))
            .collect();
        assert_eq!(threads, vec![(Some(100), Some("100".into())), (Some(101), Some("worker".into()))]);
        let evs: Vec<_> = t
            .packet
            .iter()
            .filter_map(|x| Some((x.timestamp?, x.track_event.as_ref()?)))
            .filter(|(_, e)| e.r#type != Some(EventType::Counter as i32))
            .map(|(ts, e)| (ts, e.r#type.unwrap(), e.name.clone().unwrap_or_default()))
            .collect();
        let want: Vec<(u64, i32, String)> = vec![
            (10, 1, "thread".into()),
            (50, 1, "RUN".into()),
            (100, 2, "".into()),
            (100, 1, "RUN".into()),
            (300, 2, "".into()),
            (300, 1, "BLOCKED_MUTEX".into()),
            (300, 1, "mutex 0x5000".into()),
            (700, 2, "".into()),
            (700, 2, "".into()),
            (700, 1, "RUN".into()),
            (900, 2, "".into()),
            (1000, 2, "".into()),
        ];
        assert_eq!(evs, want);
        let counters: Vec<_> =
            t.packet.iter().filter_map(|x| Some((x.timestamp?, x.track_event.as_ref()?.counter_value?))).collect();
        assert_eq!(counters, vec![(300, 1), (700, 0)]);
        assert_eq!(t.packet[0].sequence_flags, Some(SEQ_INCREMENTAL_STATE_CLEARED));
    }
}
