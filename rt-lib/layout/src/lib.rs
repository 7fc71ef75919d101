//! The one definition of everything the rewriter, the runtime (rt-lib) and the `stint`
//! commands share in memory or on disk (DESIGN D9): the profile file, the per-thread
//! column, the read-only configuration block the rewriter emits into the output, and the
//! offsets the trampolines hard-code.
//!
//! The runtime writes these structures; the rewriter emits `RtConfig` and reserves
//! `RT_STATE_SIZE` bytes for the runtime's state; `stint report` and friends read the file.
//! Nobody restates a layout: they all compile this crate.
//!
//! # The profile file
//! ```text
//! offset                     contents
//! 0                          FileHeader (one page)
//! ctl_offset                 control region: one gate byte per point, one bit per metric
//!                            (bit m = metric m on); mapped a second time at a fixed address
//!                            inside the rewritten program so a trampoline tests every metric
//!                            of a point with one RIP-relative load and one branch (D10)
//! meta_offset                self-description: UTF-8 JSON written by the rewriter
//!                            (program, metrics, points with names and addresses)
//! columns_offset + i*column_size
//!                            column i: ColumnHeader, the thread's measurement shadow stack
//!                            (SHADOW_CAP frames), then counters[slot][point]
//! ```
//! One column per thread incarnation, never reused, so a thread's counts outlive it and a new
//! thread on a recycled glibc stack never inherits an old thread's counts (D8).
//!
//! # How a thread finds its column
//! The GS base of every thread points at a column (or, before registration, at the dummy
//! column inside the runtime state, whose owner never matches). The hot path compares the
//! column's owner against the running thread's thread pointer (`fs:[0]`, fixed by the x86-64
//! ABI) and the libc thread-id word (`fs:[tid_offset]`); on a match it increments
//! `gs:[COUNTERS_OFFSET + 8*slot]`. A new thread inherits its creator's GS base, so its first
//! event misses and registers it.
#![no_std]
#![deny(unsafe_code)]

use core::mem::{offset_of, size_of};

/// Page size assumed for every mapping and alignment in the file.
pub const PAGE: u64 = 4096;

/// `FileHeader::magic` once the runtime has finished writing the header.
pub const FILE_MAGIC: [u8; 8] = *b"STINTPRF";
/// Layout version of the profile file. Bump on any incompatible change.
pub const FILE_VERSION: u32 = 2;

/// `FileHeader::flags`: `fs:[tid_offset]` held the kernel tid in the main thread at start,
/// so the hot-path key includes the libc thread id (otherwise it is the thread pointer only).
pub const FLAG_TID_KEY_VERIFIED: u32 = 1 << 0;
/// `FileHeader::flags`: this profile belongs to a process created by `fork` of a
/// rewritten program (`ppid` names the parent).
pub const FLAG_FORK_CHILD: u32 = 1 << 1;

/// Header at offset 0 of the profile file. All fields little-endian integers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileHeader {
    /// `FILE_MAGIC`, written last by the runtime so a reader never sees a half header.
    pub magic: [u8; 8],
    pub version: u32,
    /// `size_of::<FileHeader>()` of the writer.
    pub header_size: u32,
    pub pid: u32,
    pub ppid: u32,
    pub flags: u32,
    /// Number of instrumentation points (the length of each gate row and counter row).
    pub n_points: u32,
    /// Number of metrics (rows in the control region).
    pub n_metrics: u32,
    /// Number of counter slots per point in a column (metrics that count per point).
    pub n_counter_slots: u32,
    pub ctl_offset: u64,
    pub ctl_len: u64,
    pub meta_offset: u64,
    pub meta_len: u64,
    pub columns_offset: u64,
    pub column_size: u64,
    /// Columns handed out so far; a column is complete once its `state` is `COLUMN_LIVE`.
    pub n_columns: u32,
    /// Columns that fit in the file as currently sized.
    pub capacity_columns: u32,
    /// CLOCK_REALTIME at start, ns since the epoch.
    pub start_realtime_ns: u64,
    /// CLOCK_MONOTONIC at start, ns.
    pub start_monotonic_ns: u64,
    /// Events skipped because the thread already held a runtime lock (a signal handler
    /// interrupted the runtime), D7.
    pub skipped_reentrant: u64,
    /// Threads that could not get a column (the file could not grow).
    pub lost_threads: u64,
    /// Thread-conscious lock word guarding column allocation: 0 or the holder's tid.
    pub reg_lock: u32,
    /// The fs-relative offset of libc's thread-id word the runtime was built to check.
    pub tid_offset: u32,
    /// Size of the whole file as last grown by the runtime.
    pub file_len: u64,
    /// TSC ticks per second, calibrated against CLOCK_MONOTONIC at start (0: unknown).
    pub tsc_hz: u64,
}

/// Size reserved for the header at the start of the file.
pub const HEADER_RESERVED: u64 = PAGE;
const _: () = assert!(size_of::<FileHeader>() as u64 <= HEADER_RESERVED);

/// `ColumnHeader::state` values.
pub const COLUMN_EMPTY: u32 = 0;
pub const COLUMN_LIVE: u32 = 1;

/// Start of every column: who owns it, and a record of the thread that outlives it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ColumnHeader {
    /// Address of this column in the writer's mapping (`gs:[0]`): the slow path uses it to
    /// find the column the thread currently points at.
    pub self_addr: u64,
    /// Thread pointer (`fs:[0]`) of the owning thread.
    pub owner_tp: u64,
    /// Value of the 32-bit word at `fs:[tid_offset]` when the key was last refreshed.
    pub owner_key: u32,
    /// Kernel thread id (gettid) of the owner.
    pub tid: u32,
    /// Index of this column in the file.
    pub index: u32,
    /// `COLUMN_EMPTY` or `COLUMN_LIVE` (published with release ordering).
    pub state: u32,
    /// Process id of the owner.
    pub pid: u32,
    /// Point whose event registered the thread (`u32::MAX` if none).
    pub first_point: u32,
    /// CLOCK_MONOTONIC at registration, ns.
    pub registered_monotonic_ns: u64,
    /// Start routine address in the input ELF's address space, 0 if unknown.
    pub start_routine: u64,
    /// Thread name (NUL-padded), empty if unknown.
    pub name: [u8; 16],
    // ---- the virtual timers and the shadow stack (hot path: trampolines use these) ----
    /// Address of a u32 that changes whenever the thread is scheduled in: the `lock` word of
    /// the thread's perf task-clock page, or `seq_never` when there is none (every timer event
    /// then re-synchronises with the syscall).
    pub seq_ptr: u64,
    /// `rdtsc − CPU time in TSC ticks`, valid while `*seq_ptr == seq`.
    pub cpu_off: u64,
    /// `*seq_ptr` at the last synchronisation.
    pub seq: u32,
    /// Never equal to `seq` (see `seq_ptr`).
    pub seq_never: u32,
    /// Non-zero while the thread is inside a timer routine; an event that finds it set came
    /// from a signal handler that interrupted the routine, and is skipped (D7).
    pub busy: u32,
    /// Frames on the shadow stack (may exceed `SHADOW_CAP`: the deeper ones are not kept).
    pub depth: u32,
    /// `CLOCK_SOURCE_*`: how this thread's CPU time is read.
    pub clock_source: u32,
    pub _pad0: u32,
    /// Timer events skipped because a signal handler interrupted a timer routine.
    pub timer_skipped: u64,
    /// Exits that matched no frame (function entered while its timers were off, or frames
    /// lost to overflow).
    pub unmatched_exits: u64,
    /// Frames not kept because the shadow stack was full (their calls are counted, not timed).
    pub shadow_overflow: u64,
    /// Frames closed by a later event because their function left by exception or longjmp.
    pub abandoned_frames: u64,
    /// Re-synchronisations of the CPU timer with CLOCK_THREAD_CPUTIME_ID.
    pub resyncs: u64,
}

/// Bytes reserved for the column header; the shadow stack starts here.
pub const COLUMN_HEADER_RESERVED: u64 = 256;

/// One open function activation on a thread's measurement shadow stack (D3). Control flow
/// never depends on it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// Stack pointer at the function's entry (pointing at its return address).
    pub sp: u64,
    pub point: u32,
    /// `metric_bit`s of the timers this frame measures (the gate at entry).
    pub bits: u32,
    /// TSC at entry.
    pub wall_start: u64,
    /// Thread CPU time at entry, in TSC ticks (`rdtsc − cpu_off`).
    pub cpu_start: u64,
}

/// Frames a column's shadow stack keeps.
pub const SHADOW_CAP: u32 = 512;
pub const FRAME_SIZE: u32 = size_of::<Frame>() as u32;
/// Offset of the shadow stack in a column.
pub const SHADOW_OFFSET: u32 = COLUMN_HEADER_RESERVED as u32;

/// `ColumnHeader::clock_source`: no timer event yet.
pub const CLOCK_SOURCE_NONE: u32 = 0;
/// A perf task-clock event's page tells when the thread was scheduled in; between two
/// schedulings CPU time advances with the TSC (D11).
pub const CLOCK_SOURCE_PERF_TSC: u32 = 1;
/// Perf events refused: every timer event reads CLOCK_THREAD_CPUTIME_ID (a system call).
pub const CLOCK_SOURCE_SYSCALL: u32 = 2;

/// Name of a clock source for reports.
pub fn clock_source_name(s: u32) -> Option<&'static str> {
    match s {
        CLOCK_SOURCE_PERF_TSC => Some("perf-task-clock+tsc"),
        CLOCK_SOURCE_SYSCALL => Some("clock_gettime"),
        _ => None,
    }
}
const _: () = assert!(size_of::<ColumnHeader>() as u64 <= COLUMN_HEADER_RESERVED);

/// Offsets the trampolines hard-code (`gs:[...]`).
pub const COL_SELF_OFFSET: u32 = offset_of!(ColumnHeader, self_addr) as u32;
pub const COL_OWNER_TP_OFFSET: u32 = offset_of!(ColumnHeader, owner_tp) as u32;
pub const COL_OWNER_KEY_OFFSET: u32 = offset_of!(ColumnHeader, owner_key) as u32;
pub const COL_SEQ_PTR_OFFSET: u32 = offset_of!(ColumnHeader, seq_ptr) as u32;
pub const COL_CPU_OFF_OFFSET: u32 = offset_of!(ColumnHeader, cpu_off) as u32;
pub const COL_SEQ_OFFSET: u32 = offset_of!(ColumnHeader, seq) as u32;
pub const COL_BUSY_OFFSET: u32 = offset_of!(ColumnHeader, busy) as u32;
pub const COL_DEPTH_OFFSET: u32 = offset_of!(ColumnHeader, depth) as u32;
pub const COL_TIMER_SKIPPED_OFFSET: u32 = offset_of!(ColumnHeader, timer_skipped) as u32;
pub const FRAME_SP_OFFSET: u32 = offset_of!(Frame, sp) as u32;
pub const FRAME_POINT_OFFSET: u32 = offset_of!(Frame, point) as u32;
pub const FRAME_BITS_OFFSET: u32 = offset_of!(Frame, bits) as u32;
pub const FRAME_WALL_OFFSET: u32 = offset_of!(Frame, wall_start) as u32;
pub const FRAME_CPU_OFFSET: u32 = offset_of!(Frame, cpu_start) as u32;
/// Counters start after the shadow stack.
pub const COUNTERS_OFFSET: u32 = SHADOW_OFFSET + SHADOW_CAP * FRAME_SIZE;

/// Offset of `tid` in glibc's `struct pthread` on x86-64 (glibc 2.26 and later); the
/// runtime verifies it against gettid() in the main thread before trusting it.
pub const GLIBC_TID_OFFSET: u32 = 0x2d0;

/// Column size for `n_points` points and `n_counter_slots` 8-byte counters per point,
/// rounded to whole pages so columns never share a cache line or page (D7).
pub const fn column_size(n_points: u32, n_counter_slots: u32) -> u64 {
    let bytes = COUNTERS_OFFSET as u64 + n_points as u64 * n_counter_slots as u64 * 8;
    align_up(bytes, PAGE)
}

/// Offset of the counter for (`slot`, `point`) from the start of a column.
pub const fn counter_offset(n_points: u32, slot: u32, point: u32) -> u64 {
    COUNTERS_OFFSET as u64 + (slot as u64 * n_points as u64 + point as u64) * 8
}

/// Length of the control region: one byte per point, whole pages.
pub const fn ctl_len(n_points: u32) -> u64 {
    if n_points == 0 {
        PAGE
    } else {
        align_up(n_points as u64, PAGE)
    }
}

/// Offset of the gate byte of `point` inside the control region.
pub const fn gate_offset(point: u32) -> u64 {
    point as u64
}

/// The bit of `metric` in a gate byte.
pub const fn metric_bit(metric: u32) -> u8 {
    1 << metric
}

pub const fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// Metric ids known to the runtime (the bit number in a gate byte). The spec names metrics;
/// these are the ones the code generator knows how to build.
pub const METRIC_CALLS: u32 = 0;
/// Inclusive CPU time of the thread in the function (virtual timer, D11).
pub const METRIC_CPU_TIME: u32 = 1;
/// Inclusive wall time in the function (TSC).
pub const METRIC_WALL_TIME: u32 = 2;
/// Number of metrics (bits used in a gate byte) for this layout version.
pub const N_METRICS: u32 = 3;
/// Gate bits of the timer metrics: a frame is pushed when any of them is on.
pub const TIMER_BITS: u8 = metric_bit(METRIC_CPU_TIME) | metric_bit(METRIC_WALL_TIME);

/// Counter slots per point in a column.
pub const SLOT_CALLS: u32 = 0;
/// Inclusive CPU time, TSC ticks (`FileHeader::tsc_hz` converts).
pub const SLOT_CPU_TICKS: u32 = 1;
/// Inclusive wall time, TSC ticks.
pub const SLOT_WALL_TICKS: u32 = 2;
/// Open frames of the point on this thread (recursion depth); time is added when the
/// outermost closes, so recursion is not counted twice. State, not a metric.
pub const SLOT_ACTIVE: u32 = 3;
pub const N_COUNTER_SLOTS: u32 = 4;

/// Read-only block the rewriter emits into the new code segment and passes to every
/// runtime entry. Addresses are stored relative to the block's own address, so it needs
/// no relocation in a PIE.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtConfig {
    /// `CONFIG_MAGIC`.
    pub magic: [u8; 8],
    pub version: u32,
    pub n_points: u32,
    pub n_metrics: u32,
    pub n_counter_slots: u32,
    /// fs-relative offset of libc's thread-id word, 0 if the program's libc is unknown.
    pub tid_offset: u32,
    pub _pad: u32,
    /// Control region in the program's address space (page aligned), relative to this block.
    pub ctl_rel: i64,
    pub ctl_len: u64,
    /// Self-description JSON, relative to this block.
    pub meta_rel: i64,
    pub meta_len: u64,
    /// Initial gate bytes (`ctl_len` bytes is not required: `n_metrics * n_points`).
    pub gates_rel: i64,
    /// Program name (UTF-8, no NUL) used in the default profile path.
    pub name_rel: i64,
    pub name_len: u64,
    /// Address of the runtime state (`RT_STATE_SIZE` bytes, zero-initialised), relative.
    pub state_rel: i64,
    /// Trap table (`n_traps` × [`TrapEntry`], sorted by site), relative to this block.
    pub traps_rel: i64,
    pub n_traps: u64,
    /// The SIGTRAP handler stub the rewriter generated (valid when `n_traps > 0`), relative.
    pub trap_handler_rel: i64,
}

pub const CONFIG_MAGIC: [u8; 8] = *b"STINTCFG";
pub const CONFIG_VERSION: u32 = 2;

/// A site patched with `int3` (the trap tactic): the runtime's SIGTRAP handler resumes
/// the thread at the site's trampoline. Both addresses are relative to the `RtConfig` block.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrapEntry {
    /// Address of the `int3` byte.
    pub site_rel: i64,
    /// Where the thread continues (the trampoline of the site).
    pub resume_rel: i64,
}

/// Bytes the rewriter reserves (zero-filled, writable) for the runtime's own state. The
/// runtime's state struct starts with the dummy column header that every thread's GS base
/// points at before it registers.
pub const RT_STATE_SIZE: u64 = PAGE;

/// Marker at the start of the code segment the rewriter adds; finding it in an input means
/// the input was already rewritten.
pub const SEGMENT_MAGIC: [u8; 16] = *b"STINT-SEGMENT-v1";

/// Environment variable naming the profile path (`%p` becomes the pid).
pub const ENV_PROFILE: &str = "STINT_PROFILE";

/// Why a byte string is not a profile file this version can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatError {
    /// Shorter than the header, or a region runs past the end.
    Truncated,
    /// No magic: not a profile, or the runtime has not finished writing the header.
    BadMagic,
    /// Written by another layout version.
    Version(u32),
    /// Header values that contradict each other.
    Inconsistent(&'static str),
}

impl core::fmt::Display for FormatError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FormatError::Truncated => f.write_str("file is truncated"),
            FormatError::BadMagic => f.write_str("not a stint profile (bad magic)"),
            FormatError::Version(v) => {
                write!(f, "profile layout version {v} is not supported (this stint reads {FILE_VERSION})")
            }
            FormatError::Inconsistent(what) => write!(f, "corrupt header: {what}"),
        }
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(x)
}

macro_rules! read_fields {
    ($b:expr, $ty:ident { $($f:ident: $kind:ident),* $(,)? }) => {{
        let mut v = $ty::default();
        $( v.$f = read_fields!(@read $b, offset_of!($ty, $f), $kind); )*
        v
    }};
    (@read $b:expr, $off:expr, u32) => { u32_at($b, $off) };
    (@read $b:expr, $off:expr, u64) => { u64_at($b, $off) };
    (@read $b:expr, $off:expr, bytes8) => {{ let mut a = [0u8; 8]; a.copy_from_slice(&$b[$off..$off + 8]); a }};
    (@read $b:expr, $off:expr, bytes16) => {{ let mut a = [0u8; 16]; a.copy_from_slice(&$b[$off..$off + 16]); a }};
}

impl FileHeader {
    /// Parse and validate the header of a profile file (or a prefix of it at least
    /// `HEADER_RESERVED` bytes long). Checks that every region lies inside `total_len`.
    pub fn parse(b: &[u8], total_len: u64) -> Result<FileHeader, FormatError> {
        if b.len() < size_of::<FileHeader>() {
            return Err(FormatError::Truncated);
        }
        let h = read_fields!(
            b,
            FileHeader {
                magic: bytes8,
                version: u32,
                header_size: u32,
                pid: u32,
                ppid: u32,
                flags: u32,
                n_points: u32,
                n_metrics: u32,
                n_counter_slots: u32,
                ctl_offset: u64,
                ctl_len: u64,
                meta_offset: u64,
                meta_len: u64,
                columns_offset: u64,
                column_size: u64,
                n_columns: u32,
                capacity_columns: u32,
                start_realtime_ns: u64,
                start_monotonic_ns: u64,
                skipped_reentrant: u64,
                lost_threads: u64,
                reg_lock: u32,
                tid_offset: u32,
                file_len: u64,
                tsc_hz: u64,
            }
        );
        if h.magic != FILE_MAGIC {
            return Err(FormatError::BadMagic);
        }
        if h.version != FILE_VERSION {
            return Err(FormatError::Version(h.version));
        }
        // The runtime grows the file before it raises file_len, so a shorter file was cut.
        if h.file_len > total_len {
            return Err(FormatError::Truncated);
        }
        let region_ok = |off: u64, len: u64| off.checked_add(len).is_some_and(|end| end <= total_len);
        if !region_ok(h.ctl_offset, h.ctl_len) || !region_ok(h.meta_offset, h.meta_len) {
            return Err(FormatError::Truncated);
        }
        let counters = (h.n_points as u64).checked_mul(h.n_counter_slots as u64).and_then(|n| n.checked_mul(8));
        if counters.is_none_or(|c| c > u32::MAX as u64) {
            return Err(FormatError::Inconsistent("point and counter counts out of range"));
        }
        if h.column_size < column_size(h.n_points, h.n_counter_slots) {
            return Err(FormatError::Inconsistent("column size too small for the points"));
        }
        if h.n_columns > h.capacity_columns {
            return Err(FormatError::Inconsistent("more columns than capacity"));
        }
        let cols_len = (h.n_columns as u64).checked_mul(h.column_size);
        if !cols_len.is_some_and(|l| region_ok(h.columns_offset, l)) {
            return Err(FormatError::Truncated);
        }
        Ok(h)
    }

    /// Byte range of column `i` in the file.
    pub fn column_range(&self, i: u32) -> core::ops::Range<usize> {
        let start = (self.columns_offset + i as u64 * self.column_size) as usize;
        start..start + self.column_size as usize
    }
}

impl ColumnHeader {
    /// Parse a column header from the start of a column's bytes.
    pub fn parse(b: &[u8]) -> Result<ColumnHeader, FormatError> {
        if b.len() < size_of::<ColumnHeader>() {
            return Err(FormatError::Truncated);
        }
        Ok(read_fields!(
            b,
            ColumnHeader {
                self_addr: u64,
                owner_tp: u64,
                owner_key: u32,
                tid: u32,
                index: u32,
                state: u32,
                pid: u32,
                first_point: u32,
                registered_monotonic_ns: u64,
                start_routine: u64,
                name: bytes16,
                seq_ptr: u64,
                cpu_off: u64,
                seq: u32,
                seq_never: u32,
                busy: u32,
                depth: u32,
                clock_source: u32,
                _pad0: u32,
                timer_skipped: u64,
                unmatched_exits: u64,
                shadow_overflow: u64,
                abandoned_frames: u64,
                resyncs: u64,
            }
        ))
    }

    /// Counter (`slot`, `point`) of a column given the column's bytes.
    pub fn counter(col: &[u8], n_points: u32, slot: u32, point: u32) -> Option<u64> {
        let off = counter_offset(n_points, slot, point) as usize;
        col.get(off..off + 8).map(|_| u64_at(col, off))
    }
}

impl RtConfig {
    /// The config block as bytes, as the rewriter writes it into the output.
    pub fn to_bytes(&self) -> [u8; size_of::<RtConfig>()] {
        let mut out = [0u8; size_of::<RtConfig>()];
        macro_rules! put {
            ($f:ident, $v:expr) => {{
                let bytes = $v;
                let off = offset_of!(RtConfig, $f);
                out[off..off + bytes.len()].copy_from_slice(&bytes);
            }};
        }
        put!(magic, self.magic);
        put!(version, self.version.to_le_bytes());
        put!(n_points, self.n_points.to_le_bytes());
        put!(n_metrics, self.n_metrics.to_le_bytes());
        put!(n_counter_slots, self.n_counter_slots.to_le_bytes());
        put!(tid_offset, self.tid_offset.to_le_bytes());
        put!(ctl_rel, self.ctl_rel.to_le_bytes());
        put!(ctl_len, self.ctl_len.to_le_bytes());
        put!(meta_rel, self.meta_rel.to_le_bytes());
        put!(meta_len, self.meta_len.to_le_bytes());
        put!(gates_rel, self.gates_rel.to_le_bytes());
        put!(name_rel, self.name_rel.to_le_bytes());
        put!(name_len, self.name_len.to_le_bytes());
        put!(state_rel, self.state_rel.to_le_bytes());
        put!(traps_rel, self.traps_rel.to_le_bytes());
        put!(n_traps, self.n_traps.to_le_bytes());
        put!(trap_handler_rel, self.trap_handler_rel.to_le_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_offsets_are_what_trampolines_use() {
        assert_eq!(COL_SELF_OFFSET, 0);
        assert_eq!(COL_OWNER_TP_OFFSET, 8);
        assert_eq!(COL_OWNER_KEY_OFFSET, 16);
        assert_eq!(FRAME_SIZE, 32);
        assert_eq!(COUNTERS_OFFSET, 256 + 512 * 32);
        assert_eq!(column_size(0, 1), 5 * PAGE);
        assert_eq!(column_size(120, 4), 5 * PAGE);
        assert_eq!(column_size(121, 4), 6 * PAGE);
        assert_eq!(counter_offset(10, 0, 3), COUNTERS_OFFSET as u64 + 24);
        assert_eq!(counter_offset(10, SLOT_WALL_TICKS, 3), COUNTERS_OFFSET as u64 + 8 * 23);
    }

    #[test]
    fn header_rejects_garbage() {
        assert_eq!(FileHeader::parse(&[0u8; 10], 10), Err(FormatError::Truncated));
        assert_eq!(FileHeader::parse(&[0u8; 4096], 4096), Err(FormatError::BadMagic));
    }
}
