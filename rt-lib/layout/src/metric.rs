//! The one list of metrics (DESIGN D13): for each, its id (the bit in a gate byte and the row
//! in the control region), its name as specs, control files and the meta spell it, its kind,
//! where it is measured, the counter slot it uses in a column if it counts per point, and the
//! unit of its values. Specs (`stint-rewrite`'s spec.rs), the meta the rewriter writes, the
//! control-file parser and every reader derive from [`METRICS`]; the `METRIC_*`, `SLOT_*`,
//! `TIMER_BITS` and `WRAP_BITS` constants at the crate root are derived from it too.

use crate::kinds::u32_enum;

u32_enum! {
    /// A metric (the value is its id: `metric_bit(id)` is its bit in a gate byte).
    pub enum Metric {
        /// Calls of the function (a counter at its entry).
        Calls = 0 => "calls",
        /// Inclusive CPU time of the thread in the function (virtual timer, D11).
        CpuTime = 1 => "cpu_time",
        /// Inclusive wall time in the function (TSC).
        WallTime = 2 => "wall_time",
        /// Wall time blocked in thread-library calls, per thread and sync object, with counts
        /// of acquisitions and contended acquisitions; also drives the thread states.
        LockWait = 3 => "lock_wait",
        /// Time a mutex or rwlock is held, per thread and object.
        LockHold = 4 => "lock_hold",
        /// The per-thread ring of state transitions (for timelines).
        StateTrace = 5 => "state_trace",
    }
}

u32_enum! {
    /// What a metric's values are (the spec's `kind:` and the meta's `kind`).
    pub enum MetricKind {
        /// A count per point.
        Counter = 0 => "counter",
        /// Inclusive time per point, from the entry to the exits.
        Timer = 1 => "timer",
        /// Per thread and sync object, measured by the thread-library wrappers.
        Wait = 2 => "wait",
        /// A per-thread record of events.
        Trace = 3 => "trace",
    }
}

u32_enum! {
    /// Where a metric is measured (the spec's `at:`).
    pub enum MetricSite {
        /// At a function's entry.
        Entry = 0 => "entry",
        /// From a function's entry to its exits.
        Function = 1 => "function",
        /// In the wrappers around the thread-library functions (D4); a spec's globs select
        /// among those functions.
        SyncCalls = 2 => "sync_calls",
    }
}

/// One row of [`METRICS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricDef {
    pub metric: Metric,
    pub kind: MetricKind,
    pub at: MetricSite,
    /// Counter slot in each column for metrics counted per point (`counters[slot][point]`).
    pub slot: Option<u32>,
    /// Unit of the values, if not a plain count: `tsc` (TSC ticks; `FileHeader::tsc_hz`
    /// converts).
    pub unit: Option<&'static str>,
}

impl MetricDef {
    pub const fn id(&self) -> u32 {
        self.metric as u32
    }

    pub const fn name(&self) -> &'static str {
        self.metric.name()
    }

    /// The metric's bit in a gate byte.
    pub const fn bit(&self) -> u8 {
        1 << self.metric as u32
    }
}

/// Counter slots per point in a column.
pub const SLOT_CALLS: u32 = 0;
/// Inclusive CPU time, TSC ticks (`FileHeader::tsc_hz` converts).
pub const SLOT_CPU_TICKS: u32 = 1;
/// Inclusive wall time, TSC ticks.
pub const SLOT_WALL_TICKS: u32 = 2;
/// Open frames of the point on this thread (recursion depth, the low 16 bits: at most
/// `SHADOW_CAP` frames are kept); time is added when the outermost closes, so recursion is
/// not counted twice. The bits above are the point's sampling state on the thread
/// ([`SAMPLE_ON`], entries in units of [`SAMPLE_UNIT`]). State, not a metric.
pub const SLOT_ACTIVE: u32 = 3;
/// `SLOT_ACTIVE`: the open frames.
pub const ACTIVE_MASK: u64 = 0xffff;
/// `SLOT_ACTIVE`: one entry of the point seen by the entry routine (bits 16..62 count them).
pub const SAMPLE_UNIT: u64 = 1 << 16;
/// `SLOT_ACTIVE`: the point's calls are short and frequent on this thread: one entry in
/// [`SAMPLE_EVERY`] is timed, the others are counted and framed without a clock read.
pub const SAMPLE_ON: u64 = 1 << 63;
/// Entries timed before the runtime decides whether a point is sampled ([`SAMPLE_LEARN`]-th
/// entry: mean inclusive time per call below [`SAMPLE_FACTOR`] × a timed call's cost).
pub const SAMPLE_LEARN: u64 = 512;
/// One entry in this many of a sampled point is timed (a power of two).
pub const SAMPLE_EVERY: u64 = 64;
/// A point is sampled when its mean call is shorter than this many timed calls' cost.
pub const SAMPLE_FACTOR: u64 = 20;
/// `SLOT_ACTIVE` entries of a point decided not to be sampled (or with sampling off): at
/// or above the learning count, so the routine times every call and counts no more.
pub const SAMPLE_NEVER: u64 = 1 << 62;
/// `SLOT_ACTIVE`, with [`SAMPLE_ON`]: the point is sampled but `stint ctl … sampling off`
/// paused it: every entry is timed (a `FRAME_SAMPLED` frame, counted in
/// [`SLOT_SAMPLED_TIMED`]) until `sampling on` clears the bit. Set and cleared by the
/// runtime at a safe point of the thread, never by the entry routine.
pub const SAMPLE_PAUSED: u64 = 1 << 61;
const _: () = assert!(SAMPLE_EVERY.is_power_of_two() && SAMPLE_EVERY < 1 << 32);

/// The entry routine times an entry of a sampled point when the entry's number `n` (the
/// count in `SLOT_ACTIVE`) has `(n × SAMPLE_HASH mod 2^32) < 2^32 / SAMPLE_EVERY`: one entry
/// in [`SAMPLE_EVERY`] on average, in a Weyl sequence rather than every N-th, so that a
/// program's own period (a recursion of depth 4, a loop calling f then g) does not time
/// the same call site or depth every time.
pub const SAMPLE_HASH: u32 = 0x9e37_79b1;
/// Sums of the squared CPU and wall spans (TSC ticks²) of a sampled point's timed calls
/// after the runtime decided to sample it ([`FRAME_SAMPLED`](crate::FRAME_SAMPLED) frames):
/// the variance behind the estimate's error bound. Layout version 7.
pub const SLOT_SAMPLED_SQ_CPU: u32 = 4;
pub const SLOT_SAMPLED_SQ_WALL: u32 = 5;
/// Timed calls of a sampled point after the decision (its `FRAME_SAMPLED` frames closed):
/// with the [`SAMPLE_LEARN`] before it, the timed calls its estimate scales from.
pub const SLOT_SAMPLED_TIMED: u32 = 6;
/// CPU and wall ticks of a sampled point's calls before the runtime decided to sample it
/// (its `SLOT_CPU_TICKS` and `SLOT_WALL_TICKS` at the decision: the first
/// [`SAMPLE_LEARN`] − 1 calls, every one timed). Readers keep them apart from the sampled
/// calls' time, so that learning calls (cold caches, first-call slow paths) do not weigh
/// 64 times more than a sampled call in the estimate. Layout version 8.
///
/// After the decision `SLOT_LEARN_WALL` also gathers, once each, the ticks a timed call of
/// the point spent off a CPU (its wall span minus its CPU span: the thread was switched out
/// inside it, preempted or blocked): the part of the wall estimate that is not scaled (a
/// stall in one call in [`SAMPLE_EVERY`] is not taken for a stall in every untimed call).
///
/// Before the decision (while the point learns, and only then) the two slots count the
/// learning calls that were off a CPU inside (`SLOT_LEARN_CPU`) and their ticks off a CPU
/// (`SLOT_LEARN_WALL`): the decision discounts those ticks from the learning calls' wall
/// time and keeps a point timed when more than [`SAMPLE_SWITCHES`] calls were switched out
/// (a function that blocks). The exit routine sends such a frame (spans that differ) to
/// the runtime, which closes it (`timer::close`).
pub const SLOT_LEARN_CPU: u32 = 7;
pub const SLOT_LEARN_WALL: u32 = 8;
/// Learning calls switched out inside that a point may have and still be sampled: a preemption or two lands in a learning window now and then; a
/// function that blocks is switched out in most of its calls.
pub const SAMPLE_SWITCHES: u64 = 4;
pub const N_COUNTER_SLOTS: u32 = 9;

/// Every metric this layout version knows, indexed by id.
pub const METRICS: [MetricDef; Metric::ALL.len()] = [
    MetricDef {
        metric: Metric::Calls,
        kind: MetricKind::Counter,
        at: MetricSite::Entry,
        slot: Some(SLOT_CALLS),
        unit: None,
    },
    MetricDef {
        metric: Metric::CpuTime,
        kind: MetricKind::Timer,
        at: MetricSite::Function,
        slot: Some(SLOT_CPU_TICKS),
        unit: Some("tsc"),
    },
    MetricDef {
        metric: Metric::WallTime,
        kind: MetricKind::Timer,
        at: MetricSite::Function,
        slot: Some(SLOT_WALL_TICKS),
        unit: Some("tsc"),
    },
    MetricDef {
        metric: Metric::LockWait,
        kind: MetricKind::Wait,
        at: MetricSite::SyncCalls,
        slot: None,
        unit: Some("tsc"),
    },
    MetricDef {
        metric: Metric::LockHold,
        kind: MetricKind::Wait,
        at: MetricSite::SyncCalls,
        slot: None,
        unit: Some("tsc"),
    },
    MetricDef {
        metric: Metric::StateTrace,
        kind: MetricKind::Trace,
        at: MetricSite::SyncCalls,
        slot: None,
        unit: None,
    },
];

const _: () = {
    let mut i = 0;
    while i < METRICS.len() {
        assert!(METRICS[i].metric as usize == i, "METRICS is indexed by metric id");
        i += 1;
    }
    // Every metric is a bit of a gate byte, below GATE_HOOK.
    assert!(METRICS.len() <= 6);
};

impl Metric {
    /// The metric's row of [`METRICS`].
    pub const fn def(self) -> &'static MetricDef {
        &METRICS[self as usize]
    }
}

/// The gate bits of the metrics of `kind`.
pub const fn kind_bits(kind: MetricKind) -> u8 {
    let (mut bits, mut i) = (0, 0);
    while i < METRICS.len() {
        if METRICS[i].kind as u32 == kind as u32 {
            bits |= METRICS[i].bit();
        }
        i += 1;
    }
    bits
}

/// The gate bits of the metrics measured at `site`.
pub const fn site_bits(site: MetricSite) -> u8 {
    let (mut bits, mut i) = (0, 0);
    while i < METRICS.len() {
        if METRICS[i].at as u32 == site as u32 {
            bits |= METRICS[i].bit();
        }
        i += 1;
    }
    bits
}

/// Metric names (index = metric id = gate bit), as specs and control files spell them.
pub const METRIC_NAMES: [&str; METRICS.len()] = {
    let mut names = [""; METRICS.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = METRICS[i].name();
        i += 1;
    }
    names
};

/// The id of a metric name.
pub fn metric_id(name: &[u8]) -> Option<u32> {
    METRIC_NAMES.iter().position(|m| m.as_bytes() == name).map(|i| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_what_the_runtime_was_built_for() {
        assert_eq!(METRIC_NAMES, ["calls", "cpu_time", "wall_time", "lock_wait", "lock_hold", "state_trace"]);
        assert_eq!(kind_bits(MetricKind::Timer), 0b110);
        assert_eq!(site_bits(MetricSite::SyncCalls), 0b11_1000);
        assert_eq!(metric_id(b"lock_hold"), Some(4));
        assert_eq!(metric_id(b"cycles"), None);
        let slots = METRICS.map(|d| d.slot);
        assert_eq!(slots, [Some(SLOT_CALLS), Some(SLOT_CPU_TICKS), Some(SLOT_WALL_TICKS), None, None, None]);
        assert!(slots.iter().flatten().all(|&s| s < N_COUNTER_SLOTS && s != SLOT_ACTIVE));
    }
}
