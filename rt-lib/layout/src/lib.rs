//! The one definition of everything the rewriter, the runtime (rt-lib) and the `stint`
//! commands share in memory or on disk (DESIGN D9): the profile file, the per-thread
//! column, the read-only configuration block the rewriter emits into the output, and the
//! offsets the trampolines hard-code.
//!
//! The runtime writes these structures; the rewriter emits `RtConfig` and reserves
//! `RT_STATE_SIZE` bytes for the runtime's state; `stint report` and friends read the file.
//! Nobody restates a layout: they all compile this crate.
//!
//! # Modules
//! - [`pod`]: every struct here is declared with `pod_struct!` (`#[repr(C)]`, no padding,
//!   checked at compile time), so it is read and written with `Pod::read_from`,
//!   `Pod::as_bytes` and `Pod::write_to`: a struct's field list is written once.
//! - `kinds`: the `u32` enums stored in the file and passed to the runtime ([`ObjectKind`],
//!   [`ThreadState`], [`ExitKind`], [`WrappedFn`], [`TimerOp`], [`ClockSource`], …), each
//!   with `from_u32` and `name`; the older `OBJ_*`, `STATE_*`, … constants derive from them.
//! - `metric`: [`METRICS`], the one list of metrics (id, name, kind, site, counter slot,
//!   unit); the `METRIC_*` and `SLOT_*` constants, `TIMER_BITS`, `WRAP_BITS` and
//!   [`METRIC_NAMES`] derive from it.
//! - [`FileLayout`] (here): the one computation of a profile file's offsets and length.
//! - [`glob`]: the one glob matcher (specs, control files, thread rules).
//! - [`control_file`]: the no_std control-file parser.
//! - `meta` (cargo feature `serde`, host builds only): the serde types of the meta JSON,
//!   written by the rewriter and read by `stint-profile`.
//!
//! The runtime image is built from this crate with bare `rustc` (`rewriter/core/build.rs`):
//! no dependencies, no features.
//!
//! # The profile file
//! ```text
//! offset                     contents
//! 0                          FileHeader (one page)
//! control_offset             Control (one page): the thread focus, the requests ring and
//!                            what the control file did; written by `stint ctl`, read by
//!                            the runtime at safe points (D10)
//! ctl_offset                 control region: one gate byte per point, one bit per metric
//!                            (bit m = metric m on); mapped a second time at a fixed address
//!                            inside the rewritten program so a trampoline tests every metric
//!                            of a point with one RIP-relative load and one branch (D10)
//! meta_offset                self-description: UTF-8 JSON written by the rewriter
//!                            (program, metrics, points with names and addresses)
//! columns_offset + i*column_size
//!                            column i: ColumnHeader, the thread's measurement shadow stack
//!                            (SHADOW_CAP frames), held locks, waits, transition ring,
//!                            counters[slot][point], then the snapshot baseline (BASELINE)
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

pub mod control_file;
pub mod glob;
mod kinds;
#[cfg(feature = "serde")]
pub mod meta;
mod metric;
pub mod pod;

pub use kinds::{
    ClockSource, ColumnState, ControlFileStatus, ExitKind, ObjectKind, ProcessEnd, ProcessFn, RequestOp, SignalFn,
    ThreadState, TimerOp, WrappedFn,
};
pub use metric::{
    kind_bits, metric_id, site_bits, Metric, MetricDef, MetricKind, MetricSite, ACTIVE_MASK, METRICS, METRIC_NAMES,
    N_COUNTER_SLOTS, SAMPLE_EVERY, SAMPLE_FACTOR, SAMPLE_HASH, SAMPLE_LEARN, SAMPLE_NEVER, SAMPLE_ON, SAMPLE_PAUSED,
    SAMPLE_SWITCHES, SAMPLE_UNIT, SLOT_ACTIVE, SLOT_CALLS, SLOT_CPU_TICKS, SLOT_LEARN_CPU, SLOT_LEARN_WALL,
    SLOT_SAMPLED_SQ_CPU, SLOT_SAMPLED_SQ_WALL, SLOT_SAMPLED_TIMED, SLOT_WALL_TICKS,
};

use core::mem::{offset_of, size_of};
use pod::pod_struct;
pub use pod::Pod;

/// Page size assumed for every mapping and alignment in the file.
pub const PAGE: u64 = 4096;

/// `FileHeader::magic` once the runtime has finished writing the header.
pub const FILE_MAGIC: [u8; 8] = *b"STINTPRF";
/// Layout version of the profile file. Bump on any incompatible change.
pub const FILE_VERSION: u32 = 10;

/// `FileHeader::flags`: `fs:[tid_offset]` held the kernel tid in the main thread at start,
/// so the hot-path key includes the libc thread id (otherwise it is the thread pointer only).
pub const FLAG_TID_KEY_VERIFIED: u32 = 1 << 0;
/// `FileHeader::flags`: this profile belongs to a process created by `fork` of a
/// rewritten program (`ppid` names the parent).
pub const FLAG_FORK_CHILD: u32 = 1 << 1;
/// `FileHeader::flags`: `load_bias` holds the program's load bias (files of earlier writers
/// leave it zero and this flag clear).
pub const FLAG_LOAD_BIAS: u32 = 1 << 4;
/// `FileHeader::flags`: the program's timer routines have the sampling paths (rewritten with
/// `--sampling` or `sampling: true`), so `stint ctl … sampling off|on` has something to switch.
pub const FLAG_SAMPLING: u32 = 1 << 5;

pod_struct! {
    /// Header at offset 0 of the profile file. All fields little-endian integers.
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
        /// The sync-object table (seeds/000 Figure 4): `obj_buckets` × [`ObjBucket`], then
        /// `obj_cap` × [`SyncObject`], at this file offset.
        pub objects_offset: u64,
        pub obj_buckets: u32,
        pub obj_cap: u32,
        /// Objects handed out so far (entries `0..min(n_objects, obj_cap)`; an entry is
        /// complete once its `kind` is non-zero).
        pub n_objects: u32,
        /// Calling-context-tree nodes a column holds (`CctNode`s, a power of two; D16).
        pub cct_cap: u32,
        /// Objects not recorded because the table was full.
        pub objects_lost: u64,
        /// TSC at start (the zero of every `*_tsc` field).
        pub start_tsc: u64,
        /// The [`Control`] page, at this file offset.
        pub control_offset: u64,
        // ---- The process this image ran in (D22); version 5. ----
        /// The process's start time in clock ticks since boot (`/proc/self/stat` field 22;
        /// 0 if unknown): the same for every image of one process across `exec`, different
        /// for a recycled pid. An image uses it to recognise the profile of the image it
        /// replaced.
        pub proc_start_ticks: u64,
        /// [`ProcessEnd`]: how this image ended, as far as it was recorded.
        pub end_how: u32,
        /// Number of arguments of the image (`argc`); `argv` holds the first ones.
        pub argc: u32,
        /// CLOCK_REALTIME when `end_how` was recorded, ns since the epoch (0: not ended).
        pub end_realtime_ns: u64,
        /// The arguments, each NUL-terminated, zero-padded; cut at a NUL boundary when they
        /// do not fit ([`FLAG_ARGV_TRUNCATED`]).
        pub argv: TextField,
        /// Path of the profile of the image this one replaced by `exec` in the same process
        /// (empty if none), as that image created it.
        pub exec_from: TextField,
        /// Path of the profile of the process this one was forked from, when the runtime
        /// knows it (a fork child of a rewritten program); empty otherwise.
        pub parent_profile: TextField,
        /// Run-time address minus input-ELF address of the program (0 unless PIE), valid with
        /// `FLAG_LOAD_BIAS`: a reader maps sync-object addresses back to data symbols.
        pub load_bias: u64,
        /// With `end_how` [`ProcessEnd::Exit`]: the exit status as the parent sees it (the
        /// low 8 bits of the value given to `exit`); with [`ProcessEnd::Signal`]: the
        /// signal number. 0 otherwise (and in files of writers before it: the header page is
        /// zero-filled).
        pub end_status: u32,
        pub _pad_end: u32,
        // ---- Overhead compensation (D21); version 6. ----
        /// What the instrumentation costs, calibrated at start by running the program's own
        /// timer routines ([`Calibration`]); all zero when not calibrated.
        pub calib: Calibration,
        // ---- Calibration runs (D21); version 8. ----
        /// Calibrations run in this image: at start, and once more as the program ends
        /// (`main` returns, `exit`); `calib` holds, per kind of event, the least of their
        /// figures. The first [`CALIB_RUNS_CAP`] are in `calib_runs`.
        pub calib_count: u32,
        pub _pad_calib: u32,
        /// TSC (the header's clock, `start_tsc` its zero) at which each run began.
        pub calib_tsc: [u64; CALIB_RUNS_CAP],
        /// Each run's own figures (medians of its batches).
        pub calib_runs: [Calibration; CALIB_RUNS_CAP],
    }
}

/// Calibration runs a profile keeps (`FileHeader::calib_runs`).
pub const CALIB_RUNS_CAP: usize = 4;

pod_struct! {
    /// The cost of one instrumented event in TSC ticks × [`CALIB_SCALE`] (an event costs tens of
    /// ticks; whole ticks would be off by up to 4 % per event), measured at start on the main thread
    /// with the program's own timer routines and a copy of its trampolines' instructions
    /// (the least of several batches). Readers subtract it per nested event (D21).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Calibration {
        /// A timed entry and exit of a function that keeps a call-path node (a node hit),
        /// whole: what the caller's inclusive time absorbs per timed call.
        pub pair_ticks: u64,
        /// The part of [`Self::pair_ticks`] between the two clock reads: what the function's
        /// own inclusive time absorbs per call.
        pub inner_ticks: u64,
        /// The same two for a thread without call paths.
        pub pair_flat_ticks: u64,
        pub inner_flat_ticks: u64,
        /// A counted, untimed entry (calls on, timers off).
        pub count_ticks: u64,
        /// Batches measured (0: not calibrated).
        pub batches: u32,
        /// Entry/exit pairs per batch.
        pub per_batch: u32,
        /// [`Self::pair_ticks`] and [`Self::inner_ticks`] of a tiny function whose entry
        /// trampoline also runs its exit (tactic `entry+exit`), with call paths. 0 in files
        /// of runtimes before the emitted calibration routine.
        pub pair_ee_ticks: u64,
        pub inner_ee_ticks: u64,
        /// The same two for a call timed at its call site into an import (D19).
        pub pair_import_ticks: u64,
        pub inner_import_ticks: u64,
        /// An entry and exit of a sampled point that reads no clock (`FRAME_UNTIMED`), with
        /// call paths, whole: what the caller absorbs per untimed call. 0 in files of
        /// runtimes before sampling.
        pub pair_untimed_ticks: u64,
        /// The same for the `entry+exit` tactic.
        pub pair_untimed_ee_ticks: u64,
        /// [`Self::inner_ticks`] of a sampled point's timed call (drawn among untimed ones),
        /// and the same for the `entry+exit` tactic.
        pub inner_sampled_ticks: u64,
        pub inner_sampled_ee_ticks: u64,
        /// One thread-library wrapper event on the fast path (half of an uncontended mutex
        /// lock + unlock through `stint_rt_wrap_lock`, the real calls' own cost taken out):
        /// what a node and its callers absorb per event counted at [`cct_wraps_offset`].
        /// 0: not calibrated.
        pub wrap_event_ticks: u64,
        /// One thread-library wrapper event off the fast path (slowwrap): half of a mutex lock
        /// that found the lock word taken (the timed wait: two TSC reads, the state
        /// transitions, the object and its wait entry) + an unlock through `stint_rt_wrap`'s
        /// full path, the real calls' own cost taken out; what a node and its callers absorb
        /// per event counted at [`cct_slow_offset`]. 0: not calibrated.
        pub wrap_slow_ticks: u64,
    }
}

/// [`Calibration`] costs are in ticks × this.
pub const CALIB_SCALE: u64 = 1024;

/// A NUL-padded byte string field of the header (1 KiB; an array of arrays so that it keeps
/// `Default`).
pub type TextField = [[u8; 32]; 32];

/// The bytes of a [`TextField`] up to its first NUL.
pub fn text_field(f: &TextField) -> &[u8] {
    let b = f.as_bytes();
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    b.get(..end).unwrap_or(&[])
}

/// Store `s` in a [`TextField`], NUL-padded; false (and the field left empty) if it does not
/// fit with its terminating NUL.
pub fn set_text_field(f: &mut TextField, s: &[u8]) -> bool {
    let fits = s.len() < size_of::<TextField>();
    let mut src = s.iter().filter(|_| fits);
    for b in f.iter_mut().flat_map(|row| row.iter_mut()) {
        *b = src.next().copied().unwrap_or(0);
    }
    fits
}

/// `FileHeader::flags`: the arguments did not fit in `argv` and were cut.
pub const FLAG_ARGV_TRUNCATED: u32 = 1 << 2;
/// `FileHeader::flags`: a path (`exec_from`, `parent_profile`) did not fit and was left empty.
pub const FLAG_PATH_TRUNCATED: u32 = 1 << 3;

/// Size reserved for the header at the start of the file.
pub const HEADER_RESERVED: u64 = PAGE;
const _: () = assert!(size_of::<FileHeader>() as u64 <= HEADER_RESERVED);
/// Where the runtime puts the [`Control`] page and the gate bytes.
pub const CONTROL_OFFSET: u64 = HEADER_RESERVED;
pub const GATES_OFFSET: u64 = CONTROL_OFFSET + PAGE;

/// [`ColumnState`] values (`ColumnHeader::state`).
pub const COLUMN_EMPTY: u32 = ColumnState::Empty as u32;
pub const COLUMN_LIVE: u32 = ColumnState::Live as u32;

pod_struct! {
    /// Start of every column: who owns it, and a record of the thread that outlives it.
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
        /// the thread's perf task-clock page, the low half of its rseq area's `rseq_cs` field
        /// (which the kernel clears at every switch: `rseq_cs` below), `seq_never` when there
        /// is neither (every timer event then re-synchronises with the syscall), or `seq`
        /// itself when the process measures no CPU time (`CFG_NO_CPU_CLOCK`: never a switch).
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
        // ---- the thread record (issue 4: thread-library wrappers) ----
        /// Kernel tid of the thread that created this one with `pthread_create` (0: unknown).
        pub creator_tid: u32,
        /// `EXIT_*`: how the thread ended, as far as the runtime saw.
        pub exit_kind: u32,
        /// Value the start routine returned or passed to `pthread_exit`.
        pub exit_value: u64,
        /// CLOCK_MONOTONIC when the thread ended (0: running, or ended unseen).
        pub end_monotonic_ns: u64,
        /// `STATE_*` the thread is in now.
        pub thread_state: u32,
        /// The `SyncObject` index the thread is blocked on (`u32::MAX`: none).
        pub state_object: u32,
        /// TSC when `state` was entered.
        pub state_since: u64,
        /// TSC ticks spent in each state, closed intervals only (the reader adds the open one).
        pub state_ticks: [u64; N_STATES as usize],
        /// TSC of the thread's last wrapper event (where a reader ends the open interval of a
        /// thread that ended unseen, e.g. the main thread returning from `main`).
        pub last_tsc: u64,
        /// Transitions written to the ring (`ring[i % RING_CAP]` is transition i).
        pub ring_head: u64,
        /// Wrapper events whose bookkeeping was skipped: a signal handler interrupted the
        /// runtime on this thread (D7), or the wait table was full.
        pub wrap_skipped: u64,
        /// Open `lock_hold` intervals on `held` (at most `HELD_CAP` kept).
        pub n_held: u32,
        /// 1 while a wrapped call of a static program runs on this thread: its libc's
        /// wrapped functions call one another (musl's `pthread_cond_wait` locks the mutex
        /// with `pthread_mutex_lock`), and only the outermost call is the program's.
        pub in_wrap: u32,
        // ---- the virtual timer's bound on TSC extrapolation ----
        /// TSC at the last re-synchronisation of the CPU clock.
        pub sync_tsc: u64,
        /// Ticks after which a timer event re-synchronises even though the thread was not
        /// descheduled: time the hypervisor steals from a virtual CPU advances the TSC but not
        /// the thread's CPU clock, and the guest kernel sees no scheduling (D11).
        pub sync_ticks: u64,
        // ---- run-time control (D10) ----
        /// `metric_bit`s this thread measures: the trampolines AND it with a point's gate once
        /// the gate says on (`stint ctl --thread`, control-file `threads:`). Written by `stint
        /// ctl` or the runtime, read by the thread.
        pub thread_mask: u32,
        /// The key exits compare (`owner_key` as the runtime last set it). `stint ctl` changes
        /// `owner_key` to `exit_key ^ KEY_POKE` to send the thread's next entry or wrapper
        /// into the runtime (a safe point); exits keep working meanwhile.
        pub exit_key: u32,
        /// Requests of the control page's ring this thread has handled (`Control::req_head`).
        pub req_seen: u64,
        /// `seq` of the snapshot request whose baseline the column holds (0: none).
        pub snap_seq: u64,
        /// TSC when the thread took it.
        pub snap_tsc: u64,
        // ---- the calling-context tree (D16) ----
        /// Mask of the tree's hash index (`2 × nodes − 1`); 0: this thread keeps no call paths.
        pub cct_mask: u32,
        /// Nodes in use (`nodes[0..cct_nodes]`, parents before children).
        pub cct_nodes: u32,
        /// Entries not attributed to a node: the tree was full, the shadow stack was deeper
        /// than `SHADOW_CAP`, or the parent frame had no node.
        pub cct_lost: u64,
        /// Nodes whose file blocks are allocated (the runtime allocates the nodes a page at a
        /// time, so a full file system stops the tree instead of raising SIGBUS).
        pub cct_ready: u32,
        /// Nodes whose wrapper-event entries ([`cct_wraps_offset`]) have their file blocks: the
        /// runtime allocates a page of them at the first wrapper event that needs it (wrapcomp).
        pub cct_wraps_ready: u32,
        // ---- the CPU clock read from the perf page (issue 14) ----
        /// `CLOCK_THREAD_CPUTIME_ID − the perf page's task clock`, ns: the thread's CPU time
        /// before its task-clock event was opened. Where the page offers `cap_user_time`, a
        /// re-synchronisation reads the page instead of making the system call (D11).
        pub perf_base_ns: u64,
        // ---- on or off a CPU (issue 12) ----
        /// `/proc/thread-self/schedstat` when the thread ended: time on a CPU and time
        /// waiting on a run queue, ns, valid with `sched_read` = 1 (a live thread's are read
        /// by the reader).
        pub sched_cpu_ns: u64,
        pub sched_runq_ns: u64,
        pub sched_read: u32,
        pub _pad_sched: u32,
        // ---- file blocks given a region at a time (issue 14) ----
        /// Shadow-stack frames whose file blocks are allocated: the entry routine takes the
        /// slow path at this depth, and the runtime allocates the next page of frames (or,
        /// on a full file system, keeps no deeper frames: `LAZY_SHADOW_FULL`). 0 in files of
        /// runtimes before it: all `SHADOW_CAP` frames were allocated at registration.
        pub shadow_ready: u32,
        /// `LAZY_*` bits: the column regions the runtime allocated on their first write.
        pub lazy_ready: u32,
        // ---- the wrappers' fast path (issue 14) ----
        /// The wait-table entry the mutex fast path found last: the object's address (a
        /// multiple of 4) ORed with the entry's probe step from its home slot (0..=3); 0:
        /// none. A runtime-private cache (readers ignore it; 0 in older files): an entry once
        /// found stays that address's, as entries are never moved and objects never removed.
        pub lock_cache: u64,
        // ---- the wrappers' slow path (issue 12) ----
        /// Nodes whose slow wrapper-event entries ([`cct_slow_offset`]) have their file blocks
        /// (slowwrap), as `cct_wraps_ready`.
        pub cct_slow_ready: u32,
        pub _pad_slow: u32,
        // ---- the CPU clock from the rseq area (issue 14) ----
        /// With `CLOCK_SOURCE_RSEQ`: the address of the empty rseq critical-section
        /// descriptor a re-synchronisation writes to the thread's `rseq_cs` field (`seq_ptr`
        /// points at its low half; `seq` holds the descriptor's low 32 bits). 0 otherwise.
        pub rseq_cs: u64,
        // ---- the calls-only entry path (issue 14) ----
        /// `owner_tp ^` the process's fork cookie (the word at [`cookie_addr`], in a page the
        /// kernel zeroes in a fork child), or 0: what a calls-only entry trampoline compares
        /// `fs:[0] ^ cookie` with before it counts, in place of the thread check. The runtime
        /// arms it while the thread's mask lets it count calls, and leaves it 0 otherwise (no
        /// cookie, a mask without `calls`); `stint ctl` writes 0 to send the thread's next
        /// calls-only entry to the runtime, which arms it again. A fork child's zero cookie
        /// matches no column of its parent; a cookie is odd, so 0 matches no thread.
        pub owner_tpx: u64,
        // ---- the signalling calls' fast path (issue 14) ----
        /// The condition variable or semaphore whose first use this thread last found
        /// recorded in the shared object table (`pthread_cond_signal`, `_broadcast`,
        /// `sem_post` with `lock_wait`): its address (a multiple of 4) ORed with 1 for a
        /// condition variable, 2 for a semaphore; 0: none. Runtime-private like `lock_cache`
        /// (objects are never removed: a recorded first use stays recorded).
        pub signal_cache: u64,
    }
}

/// The page before the control region holds the fork cookie (the rewriter reserves it, the
/// runtime maps it private and anonymous with `MADV_WIPEONFORK` and writes an odd word).
pub const fn cookie_addr(control_region: u64) -> u64 {
    control_region - PAGE
}

/// The word after the cookie: 1 once the runtime found that this process measures nothing
/// (no profile, a setuid program, …): the calls-only entries then skip the runtime when their
/// thread check fails. 0 in a fork child (the page is wiped), whose first entry decides again.
pub const fn idle_addr(control_region: u64) -> u64 {
    cookie_addr(control_region) + IDLE_OFFSET
}

/// Where the idle word lies after the cookie (the calls-only trampolines read it there).
pub const IDLE_OFFSET: u64 = 8;

/// `ColumnHeader::lazy_ready`: the held and wait tables have their file blocks.
pub const LAZY_LOCK_TABLES: u32 = 1;
/// The state-transition ring has its file blocks.
pub const LAZY_RING: u32 = 2;
/// The snapshot baseline has its file blocks.
pub const LAZY_BASELINE: u32 = 4;
/// The next page of shadow-stack frames could not be allocated: `shadow_ready` is the stack's
/// capacity for the rest of the thread.
pub const LAZY_SHADOW_FULL: u32 = 8;

/// Bytes reserved for the column header; the shadow stack starts here.
pub const COLUMN_HEADER_RESERVED: u64 = 512;

pod_struct! {
    /// One open function activation on a thread's measurement shadow stack (D3). Control flow
    /// never depends on it.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Frame {
        /// Stack pointer at the function's entry (pointing at its return address).
        pub sp: u64,
        pub point: u32,
        /// `metric_bit`s of the timers this frame measures (the gate at entry), or
        /// [`FRAME_UNTIMED`]: an entry of a sampled point that read no clock.
        pub bits: u32,
        /// TSC at entry.
        pub wall_start: u64,
        /// Thread CPU time at entry, in TSC ticks (`rdtsc − cpu_off`).
        pub cpu_start: u64,
        /// The frame's calling-context node + 1 (0: none, [`CCT_LOST`]: not in the tree).
        pub node: u32,
        pub _pad: u32,
        /// Pads a frame to a cache line (the routines index frames with a shift).
        pub _reserved: [u64; 3],
    }
}

pod_struct! {
    /// One node of a thread's calling-context tree (D16): a point reached through one chain
    /// of callers. Written only by the thread; `parent` and `point` before `cct_nodes` counts it.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct CctNode {
        /// Parent node + 1 (0: a root, entered with no framed caller).
        pub parent: u32,
        /// Point id of the function entered.
        pub point: u32,
        /// Entries through this path.
        pub calls: u64,
        /// Inclusive CPU ticks (only while `cpu_time` was on for the frame).
        pub cpu_ticks: u64,
        /// Inclusive wall ticks (only while `wall_time` was on for the frame).
        pub wall_ticks: u64,
    }
}

/// `Frame::node` of a frame whose node could not be made (tree full, or its parent lost).
pub const CCT_LOST: u32 = u32::MAX;
/// Nodes a column's calling-context tree holds at most (the layout's capacity; the runtime
/// may use fewer, see `STINT_CALLTREE_NODES`).
pub const CCT_CAP: u32 = 16384;
/// Bytes of one node; a power of two (the routines index nodes with a shift).
pub const CCT_NODE_SIZE: u32 = size_of::<CctNode>() as u32;
const _: () = assert!(CCT_NODE_SIZE.is_power_of_two() && CCT_CAP.is_power_of_two());
pub const CCT_NODE_PARENT_OFFSET: u32 = offset_of!(CctNode, parent) as u32;
pub const CCT_NODE_POINT_OFFSET: u32 = offset_of!(CctNode, point) as u32;
pub const CCT_NODE_CALLS_OFFSET: u32 = offset_of!(CctNode, calls) as u32;
pub const CCT_NODE_CPU_OFFSET: u32 = offset_of!(CctNode, cpu_ticks) as u32;
pub const CCT_NODE_WALL_OFFSET: u32 = offset_of!(CctNode, wall_ticks) as u32;
/// Environment variable: nodes per thread (a power of two ≤ [`CCT_CAP`]; 0 turns call paths
/// off). For tests of the overflow and for users who want less memory.
pub const ENV_CALLTREE_NODES: &str = "STINT_CALLTREE_NODES";
/// Slot of the tree's hash index for (`parent` + 1, `point`): the routines compute the same.
pub const fn cct_hash(parent: u32, point: u32) -> u32 {
    parent.wrapping_mul(CCT_HASH_MUL).wrapping_add(point)
}
pub const CCT_HASH_MUL: u32 = 0x9e37_79b1;

/// Frames a column's shadow stack keeps.
pub const SHADOW_CAP: u32 = 512;
pub const FRAME_SIZE: u32 = size_of::<Frame>() as u32;
/// `Frame::bits` of an entry of a sampled point that is not timed (no clock read at its
/// entry, none at its exit).
pub const FRAME_UNTIMED: u32 = 1 << 31;
/// `Frame::bits` flag of a timed entry of a sampled point: its exit adds the squares of its
/// spans (`SLOT_SAMPLED_SQ_*`).
pub const FRAME_SAMPLED: u32 = 1 << 30;
/// Offset of the shadow stack in a column.
pub const SHADOW_OFFSET: u32 = COLUMN_HEADER_RESERVED as u32;

/// [`ClockSource`] values (aliases for code written before the enum).
pub const CLOCK_SOURCE_NONE: u32 = ClockSource::None as u32;
pub const CLOCK_SOURCE_PERF_TSC: u32 = ClockSource::PerfTsc as u32;
pub const CLOCK_SOURCE_SYSCALL: u32 = ClockSource::Syscall as u32;
pub const CLOCK_SOURCE_RSEQ: u32 = ClockSource::Rseq as u32;
pub const CLOCK_SOURCE_WALL_ONLY: u32 = ClockSource::WallOnly as u32;

/// Name of a clock source for reports (`None` for "no timer event yet" and unknown values).
pub fn clock_source_name(s: u32) -> Option<&'static str> {
    ClockSource::from_u32(s).filter(|&c| c != ClockSource::None).map(ClockSource::name)
}
const _: () = assert!(size_of::<ColumnHeader>() as u64 <= COLUMN_HEADER_RESERVED);

/// Offsets the trampolines hard-code (`gs:[...]`).
pub const COL_SELF_OFFSET: u32 = offset_of!(ColumnHeader, self_addr) as u32;
pub const COL_OWNER_TP_OFFSET: u32 = offset_of!(ColumnHeader, owner_tp) as u32;
pub const COL_OWNER_KEY_OFFSET: u32 = offset_of!(ColumnHeader, owner_key) as u32;
pub const COL_OWNER_TPX_OFFSET: u32 = offset_of!(ColumnHeader, owner_tpx) as u32;
pub const COL_SEQ_PTR_OFFSET: u32 = offset_of!(ColumnHeader, seq_ptr) as u32;
pub const COL_CPU_OFF_OFFSET: u32 = offset_of!(ColumnHeader, cpu_off) as u32;
pub const COL_SEQ_OFFSET: u32 = offset_of!(ColumnHeader, seq) as u32;
pub const COL_SYNC_TSC_OFFSET: u32 = offset_of!(ColumnHeader, sync_tsc) as u32;
pub const COL_SYNC_TICKS_OFFSET: u32 = offset_of!(ColumnHeader, sync_ticks) as u32;
pub const COL_THREAD_MASK_OFFSET: u32 = offset_of!(ColumnHeader, thread_mask) as u32;
pub const COL_EXIT_KEY_OFFSET: u32 = offset_of!(ColumnHeader, exit_key) as u32;
pub const COL_UNMATCHED_EXITS_OFFSET: u32 = offset_of!(ColumnHeader, unmatched_exits) as u32;
/// `owner_key ^ KEY_POKE` never matches the thread (see `ColumnHeader::exit_key`).
pub const KEY_POKE: u32 = 0x8000_0000;
pub const COL_BUSY_OFFSET: u32 = offset_of!(ColumnHeader, busy) as u32;
pub const COL_DEPTH_OFFSET: u32 = offset_of!(ColumnHeader, depth) as u32;
pub const COL_TIMER_SKIPPED_OFFSET: u32 = offset_of!(ColumnHeader, timer_skipped) as u32;
pub const FRAME_SP_OFFSET: u32 = offset_of!(Frame, sp) as u32;
pub const FRAME_POINT_OFFSET: u32 = offset_of!(Frame, point) as u32;
pub const FRAME_BITS_OFFSET: u32 = offset_of!(Frame, bits) as u32;
pub const FRAME_WALL_OFFSET: u32 = offset_of!(Frame, wall_start) as u32;
pub const FRAME_CPU_OFFSET: u32 = offset_of!(Frame, cpu_start) as u32;
pub const FRAME_NODE_OFFSET: u32 = offset_of!(Frame, node) as u32;
pub const COL_CCT_MASK_OFFSET: u32 = offset_of!(ColumnHeader, cct_mask) as u32;
pub const COL_SHADOW_READY_OFFSET: u32 = offset_of!(ColumnHeader, shadow_ready) as u32;
/// Open `lock_hold` intervals: `HELD_CAP` × [`Held`] after the shadow stack.
pub const HELD_OFFSET: u32 = SHADOW_OFFSET + SHADOW_CAP * FRAME_SIZE;
pub const HELD_CAP: u32 = 16;
/// The thread's waits per object: `WAIT_CAP` × [`WaitEntry`], open addressing on the
/// object index.
pub const WAITS_OFFSET: u32 = HELD_OFFSET + HELD_CAP * size_of::<Held>() as u32;
pub const WAIT_CAP: u32 = 256;
/// The ring of state transitions (`state_trace` metric): `RING_CAP` × [`Transition`].
pub const RING_OFFSET: u32 = WAITS_OFFSET + WAIT_CAP * size_of::<WaitEntry>() as u32;
pub const RING_CAP: u32 = 256;
/// Counters start after the ring.
pub const COUNTERS_OFFSET: u32 = RING_OFFSET + RING_CAP * size_of::<Transition>() as u32;

/// Offset of entry `i` of the wait table from the start of a column.
pub const fn wait_offset(i: u32) -> u64 {
    WAITS_OFFSET as u64 + i as u64 * size_of::<WaitEntry>() as u64
}

/// Offset of entry `i` (`0..RING_CAP`) of the transition ring from the start of a column.
pub const fn ring_offset(i: u32) -> u64 {
    RING_OFFSET as u64 + i as u64 * size_of::<Transition>() as u64
}

pod_struct! {
    /// A lock the thread holds, for `lock_hold`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Held {
        /// `SyncObject` index.
        pub object: u32,
        pub _pad: u32,
        /// TSC when acquired (or when a condition wait gave it back).
        pub since: u64,
    }
}

pod_struct! {
    /// A thread's record of one sync object: written only by the thread.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct WaitEntry {
        /// `SyncObject` index + 1 (0: free slot). Written last, with release.
        pub object: u32,
        /// `OBJ_*`.
        pub kind: u32,
        /// Acquisitions (lock, wait, join, post… calls that returned success).
        pub count: u64,
        /// Acquisitions that found the object busy (see README "lock_wait").
        pub contended: u64,
        /// TSC ticks blocked in the call.
        pub wait_ticks: u64,
        /// TSC ticks the lock was held (`lock_hold`).
        pub hold_ticks: u64,
        /// The longest single call's ticks blocked, and where it was called from: the
        /// return address of that call in the input ELF's address space (0: none yet; a free
        /// mutex's lock, which is not timed, leaves its caller with 0 ticks until a call
        /// that waits replaces it). The function containing it is the one that waited
        /// (issue 11: waits by caller, not only by the object's first user).
        pub longest_ticks: u64,
        pub longest_pc: u64,
    }
}

pod_struct! {
    /// One entry of the state-transition ring.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Transition {
        /// TSC of the transition.
        pub tsc: u64,
        /// `STATE_*` entered.
        pub state: u32,
        /// `SyncObject` index (`u32::MAX`: none).
        pub object: u32,
    }
}

pod_struct! {
    /// A bucket of the sync-object table: a thread-conscious lock and the head of a chain.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct ObjBucket {
        /// 0 or the holder's tid (`TcLock`).
        pub lock: u32,
        /// Index + 1 of the newest object in the chain (0: empty).
        pub head: u32,
    }
}

pod_struct! {
    /// A synchronisation object the program used (D14, ThreadMon).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct SyncObject {
        /// Run-time address (for `OBJ_THREAD`: the `pthread_t`, i.e. the thread pointer).
        pub address: u64,
        /// Return address of the call that first used it, in the input ELF's address space.
        pub first_pc: u64,
        /// `OBJ_*`; 0 until the entry is complete (written last, release).
        pub kind: u32,
        /// tid of the thread that first used it.
        pub first_tid: u32,
        /// Index + 1 of the next object in the bucket chain (0: end).
        pub next: u32,
        pub _pad: u32,
    }
}

/// A power of two (the hash is masked).
pub const OBJ_BUCKETS: u32 = 4096;
pub const OBJ_CAP: u32 = 32768;
/// Bytes of the sync-object table in the file.
pub const fn objects_len(buckets: u32, cap: u32) -> u64 {
    align_up(object_entry_offset(buckets, cap), PAGE)
}

/// Offset of entry `i` of the sync-object table from the table's start: `buckets` ×
/// [`ObjBucket`], then the entries.
pub const fn object_entry_offset(buckets: u32, i: u32) -> u64 {
    buckets as u64 * size_of::<ObjBucket>() as u64 + i as u64 * size_of::<SyncObject>() as u64
}

/// [`ObjectKind`] values (`SyncObject::kind`), aliases for code written before the enum.
pub const OBJ_MUTEX: u32 = ObjectKind::Mutex as u32;
pub const OBJ_CONDVAR: u32 = ObjectKind::Condvar as u32;
pub const OBJ_RWLOCK: u32 = ObjectKind::Rwlock as u32;
pub const OBJ_SEMAPHORE: u32 = ObjectKind::Semaphore as u32;
pub const OBJ_BARRIER: u32 = ObjectKind::Barrier as u32;
pub const OBJ_THREAD: u32 = ObjectKind::Thread as u32;

/// Name of an object kind (`None`: not a kind this version knows).
pub fn object_kind_name(k: u32) -> Option<&'static str> {
    ObjectKind::from_u32(k).map(ObjectKind::name)
}

/// [`ThreadState`] values (`ColumnHeader::thread_state`, index of `state_ticks`), aliases.
pub const STATE_RUN: u32 = ThreadState::Run as u32;
pub const STATE_BLOCKED_MUTEX: u32 = ThreadState::BlockedMutex as u32;
pub const STATE_BLOCKED_CONDVAR: u32 = ThreadState::BlockedCondvar as u32;
pub const STATE_BLOCKED_RWLOCK: u32 = ThreadState::BlockedRwlock as u32;
pub const STATE_BLOCKED_SEMAPHORE: u32 = ThreadState::BlockedSemaphore as u32;
pub const STATE_BLOCKED_JOIN: u32 = ThreadState::BlockedJoin as u32;
pub const STATE_BLOCKED_BARRIER: u32 = ThreadState::BlockedBarrier as u32;
pub const STATE_EXITED: u32 = ThreadState::Exited as u32;
pub const N_STATES: u32 = ThreadState::ALL.len() as u32;

/// Name of a thread state (`None`: not a state this version knows).
pub fn state_name(s: u32) -> Option<&'static str> {
    ThreadState::from_u32(s).map(ThreadState::name)
}

/// [`ExitKind`] values (`ColumnHeader::exit_kind`), aliases.
pub const EXIT_UNKNOWN: u32 = ExitKind::Unknown as u32;
pub const EXIT_RETURNED: u32 = ExitKind::Returned as u32;
pub const EXIT_PTHREAD_EXIT: u32 = ExitKind::PthreadExit as u32;
pub const EXIT_CANCELED: u32 = ExitKind::Canceled as u32;

/// Name of an exit kind (`unknown` for values this version does not know).
pub fn exit_kind_name(k: u32) -> &'static str {
    ExitKind::from_u32(k).unwrap_or(ExitKind::Unknown).name()
}

/// [`WrappedFn`] values (`WrapSite::func`), aliases.
pub const WRAP_PTHREAD_CREATE: u32 = WrappedFn::PthreadCreate as u32;
pub const WRAP_PTHREAD_EXIT: u32 = WrappedFn::PthreadExit as u32;
pub const WRAP_PTHREAD_JOIN: u32 = WrappedFn::PthreadJoin as u32;
pub const WRAP_MUTEX_LOCK: u32 = WrappedFn::MutexLock as u32;
pub const WRAP_MUTEX_TIMEDLOCK: u32 = WrappedFn::MutexTimedlock as u32;
pub const WRAP_MUTEX_TRYLOCK: u32 = WrappedFn::MutexTrylock as u32;
pub const WRAP_MUTEX_UNLOCK: u32 = WrappedFn::MutexUnlock as u32;
pub const WRAP_COND_WAIT: u32 = WrappedFn::CondWait as u32;
pub const WRAP_COND_TIMEDWAIT: u32 = WrappedFn::CondTimedwait as u32;
pub const WRAP_COND_SIGNAL: u32 = WrappedFn::CondSignal as u32;
pub const WRAP_COND_BROADCAST: u32 = WrappedFn::CondBroadcast as u32;
pub const WRAP_RWLOCK_RDLOCK: u32 = WrappedFn::RwlockRdlock as u32;
pub const WRAP_RWLOCK_WRLOCK: u32 = WrappedFn::RwlockWrlock as u32;
pub const WRAP_RWLOCK_TIMEDRDLOCK: u32 = WrappedFn::RwlockTimedrdlock as u32;
pub const WRAP_RWLOCK_TIMEDWRLOCK: u32 = WrappedFn::RwlockTimedwrlock as u32;
pub const WRAP_RWLOCK_UNLOCK: u32 = WrappedFn::RwlockUnlock as u32;
pub const WRAP_SEM_WAIT: u32 = WrappedFn::SemWait as u32;
pub const WRAP_SEM_TIMEDWAIT: u32 = WrappedFn::SemTimedwait as u32;
pub const WRAP_SEM_POST: u32 = WrappedFn::SemPost as u32;
pub const WRAP_BARRIER_WAIT: u32 = WrappedFn::BarrierWait as u32;
pub const WRAP_SETNAME_NP: u32 = WrappedFn::SetnameNp as u32;
pub const WRAP_TIMEDJOIN_NP: u32 = WrappedFn::TimedjoinNp as u32;
pub const WRAP_RWLOCK_TRYRDLOCK: u32 = WrappedFn::RwlockTryrdlock as u32;
pub const WRAP_RWLOCK_TRYWRLOCK: u32 = WrappedFn::RwlockTrywrlock as u32;
pub const WRAP_SEM_TRYWAIT: u32 = WrappedFn::SemTrywait as u32;
pub const WRAP_COND_CLOCKWAIT: u32 = WrappedFn::CondClockwait as u32;

/// Every wrapped function as `(name, WRAP_* id)`, derived from [`WrappedFn`].
pub const WRAPPED: &[(&str, u32)] = &{
    let mut out = [("", 0u32); WrappedFn::ALL.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = (WrappedFn::ALL[i].name(), WrappedFn::ALL[i] as u32);
        i += 1;
    }
    out
};

/// The `WRAP_*` id of a thread-library, process or signal function name (`None`: not wrapped).
pub fn wrap_id(name: &str) -> Option<u32> {
    WrappedFn::from_name(name)
        .map(|w| w as u32)
        .or_else(|| ProcessFn::from_name(name).map(|w| w as u32))
        .or_else(|| SignalFn::from_name(name).map(|w| w as u32))
}

pod_struct! {
    /// Read-only descriptor of one wrapped function, emitted by the rewriter; the wrapper thunk
    /// passes its address to `stint_rt_wrap`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct WrapSite {
        /// The program's `RtConfig`, relative to this descriptor.
        pub config_rel: i64,
        /// Where the real function is, relative to this descriptor: a GOT slot to load
        /// (`indirect` = 1, dynamic programs) or code that runs it (a relocated prologue that
        /// jumps back into the original, static programs).
        pub real_rel: i64,
        pub indirect: u32,
        /// `WRAP_*`.
        pub func: u32,
        /// The point whose gate and `calls` counter the wrapper uses.
        pub point: u32,
        /// The GOT slot's value before lazy binding resolves it (the PLT's resolver entry),
        /// relative to this descriptor; 0 if none. A call made while the slot still holds it
        /// runs the dynamic linker's resolver first, which is not a wait on the object.
        pub lazy_rel: i32,
    }
}

pod_struct! {
    /// The control page (D10): written by `stint ctl` (the file's owner), read by the runtime,
    /// which validates everything it reads here before using it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Control {
        /// `metric_bit`s a thread measures when it registers, unless a thread rule names it.
        pub new_thread_mask: u32,
        /// Valid entries of `thread_rules` (readers clamp to `THREAD_RULES_CAP`).
        pub n_thread_rules: u32,
        /// Threads the control file's `threads:` named; a registering thread that matches one
        /// gets `new_thread_mask | rule.mask` (names are matched again when a thread is named).
        pub thread_rules: [ThreadRule; THREAD_RULES_CAP],
        /// Requests posted so far: request `i` is `requests[i % REQ_CAP]`. The poster writes
        /// the entry (its `seq` last), then raises `req_head` (release).
        pub req_head: u64,
        pub requests: [Request; REQ_CAP],
        /// `seq` of the newest snapshot request (0: none); a registering thread's baseline is
        /// zero as of it.
        pub last_snapshot: u64,
        /// `CONTROL_FILE_*`: what the runtime did with `STINT_CONTROL` at start.
        pub control_file: u32,
        /// Non-zero: `stint ctl … sampling off` — every call of every point is timed (a point
        /// the runtime samples is paused, [`SAMPLE_PAUSED`]); 0: points may be sampled, as the
        /// program was rewritten. Read by a thread at a [`REQ_SAMPLING`] request and when it
        /// decides a point's sampling; only ever compared with 0. Was padding in version 7.
        pub sampling_off: u32,
        /// The control file's path, or why it was rejected (UTF-8, NUL-padded).
        pub control_message: [u8; 256],
        /// Changes `stint ctl` made, and CLOCK_REALTIME of the last one.
        pub changes: u64,
        pub last_change_realtime_ns: u64,
    }
}

impl Default for Control {
    fn default() -> Self {
        Control::zeroed()
    }
}

impl Control {
    /// Parse the control page from its bytes (at least `size_of::<Control>()`).
    pub fn parse(b: &[u8]) -> Result<Control, FormatError> {
        Control::read_from(b, 0).ok_or(FormatError::Truncated)
    }

    /// The newest request `seq` of kind `op` still on the ring.
    pub fn newest(&self, op: u32) -> Option<Request> {
        let head = self.req_head;
        (head.saturating_sub(REQ_CAP as u64)..head)
            .rev()
            .map(|i| self.requests[(i % REQ_CAP as u64) as usize])
            .find(|r| r.op == op)
    }
}

pub const THREAD_RULES_CAP: usize = 8;
pub const REQ_CAP: usize = 16;
const _: () = assert!(size_of::<Control>() as u64 <= PAGE);

pod_struct! {
    /// A thread the control file names: by tid (non-zero) or by a glob on its name.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct ThreadRule {
        /// `metric_bit`s the thread measures when it matches.
        pub mask: u32,
        /// Kernel tid, or 0 to match by `name`.
        pub tid: u32,
        /// Glob (`*`, `?`) on the thread name, NUL-padded.
        pub name: [u8; 24],
    }
}

pod_struct! {
    /// A request on the control page's ring.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Request {
        /// The request's number + 1 (ring index `seq - 1`), written last: an entry whose seq
        /// does not match its place is torn or stale and ignored.
        pub seq: u64,
        /// `REQ_*`.
        pub op: u32,
        pub _pad: u32,
        /// CLOCK_REALTIME when posted.
        pub realtime_ns: u64,
    }
}

/// [`RequestOp::Snapshot`] (alias).
pub const REQ_SNAPSHOT: u32 = RequestOp::Snapshot as u32;
/// [`RequestOp::Sampling`] (alias).
pub const REQ_SAMPLING: u32 = RequestOp::Sampling as u32;

/// [`ControlFileStatus`] values (`Control::control_file`), aliases.
pub const CONTROL_FILE_NONE: u32 = ControlFileStatus::None as u32;
pub const CONTROL_FILE_APPLIED: u32 = ControlFileStatus::Applied as u32;
pub const CONTROL_FILE_REJECTED: u32 = ControlFileStatus::Rejected as u32;
pub const CONTROL_FILE_IGNORED: u32 = ControlFileStatus::Ignored as u32;

/// Environment variable naming the control file.
pub const ENV_CONTROL: &str = "STINT_CONTROL";

/// `RtConfig::info_rel` byte of a point: the `metric_bit`s it can measure, and this flag
/// for a thread-library wrapper (its name is the import's).
pub const POINT_INFO_WRAP: u8 = 0x80;

/// Offset of `tid` in glibc's `struct pthread` on x86-64 (glibc 2.26 and later); the
/// runtime verifies it against gettid() in the main thread before trusting it.
pub const GLIBC_TID_OFFSET: u32 = 0x2d0;
/// fs-relative offset of musl's `struct pthread::tid` on x86-64 (`self, dtv, prev, next,
/// sysinfo, canary`, then `tid`): musl has no spare TCB words, the tid follows the canary.
pub const MUSL_TID_OFFSET: u32 = 0x30;

/// What a profile file's layout depends on: the program's points and metrics (from the
/// `RtConfig` the rewriter emitted) and the size of the sync-object table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileShape {
    pub n_points: u32,
    pub n_metrics: u32,
    pub n_counter_slots: u32,
    /// Length of the control region (`RtConfig::ctl_len`, which is `ctl_len(n_points)`).
    pub ctl_len: u64,
    /// Length of the meta JSON.
    pub meta_len: u64,
    pub obj_buckets: u32,
    pub obj_cap: u32,
}

/// Where everything lies in a profile file: the one computation of the file's offsets, used
/// by the runtime when it creates the file and by the synthetic profiles of the tests.
///
/// ```text
/// 0                  FileHeader                 HEADER_RESERVED bytes
/// control_offset     Control                    one page      (CONTROL_OFFSET)
/// ctl_offset         gate bytes                 ctl_len       (GATES_OFFSET)
/// meta_offset        meta JSON                  meta_len
/// objects_offset     sync-object table          objects_len(obj_buckets, obj_cap), page aligned
/// columns_offset     capacity_columns × column  column_size each
/// ```
///
/// For the runtime's `create_profile` the swap is mechanical: `FileLayout::new(FileShape {
/// n_points, n_metrics, n_counter_slots, ctl_len: config.ctl_len, meta_len: config.meta_len,
/// obj_buckets: OBJ_BUCKETS, obj_cap: OBJ_CAP })`, size the file to
/// `file_len(INITIAL_COLUMNS)` and let [`FileLayout::apply`] fill the header's layout fields;
/// growing the file is `file_len(new_capacity)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileLayout {
    pub shape: FileShape,
    pub control_offset: u64,
    pub ctl_offset: u64,
    pub meta_offset: u64,
    pub objects_offset: u64,
    pub columns_offset: u64,
    pub column_size: u64,
}

impl FileLayout {
    pub const fn new(shape: FileShape) -> FileLayout {
        let ctl_offset = GATES_OFFSET;
        let meta_offset = ctl_offset + shape.ctl_len;
        let objects_offset = align_up(meta_offset + shape.meta_len, PAGE);
        FileLayout {
            shape,
            control_offset: CONTROL_OFFSET,
            ctl_offset,
            meta_offset,
            objects_offset,
            columns_offset: objects_offset + objects_len(shape.obj_buckets, shape.obj_cap),
            column_size: column_size(shape.n_points, shape.n_counter_slots),
        }
    }

    /// Length of the file with room for `capacity_columns` columns.
    pub const fn file_len(&self, capacity_columns: u32) -> u64 {
        self.columns_offset + capacity_columns as u64 * self.column_size
    }

    /// Set every field of `h` the layout determines (counts, offsets, lengths, the object
    /// table, `capacity_columns` and `file_len`); identity, clocks and counters stay as they are.
    pub fn apply(&self, h: &mut FileHeader, capacity_columns: u32) {
        let s = &self.shape;
        h.n_points = s.n_points;
        h.n_metrics = s.n_metrics;
        h.n_counter_slots = s.n_counter_slots;
        h.control_offset = self.control_offset;
        h.ctl_offset = self.ctl_offset;
        h.ctl_len = s.ctl_len;
        h.meta_offset = self.meta_offset;
        h.meta_len = s.meta_len;
        h.objects_offset = self.objects_offset;
        h.obj_buckets = s.obj_buckets;
        h.obj_cap = s.obj_cap;
        h.columns_offset = self.columns_offset;
        h.column_size = self.column_size;
        h.capacity_columns = capacity_columns;
        h.file_len = self.file_len(capacity_columns);
        h.cct_cap = CCT_CAP;
    }

    /// Whether header `h` lays its file out as this layout does (a check for tests that read
    /// what the runtime wrote: `FileLayout::new(h.shape()).agrees_with(&h)`).
    pub fn agrees_with(&self, h: &FileHeader) -> bool {
        let mut expected = *h;
        self.apply(&mut expected, h.capacity_columns);
        expected == *h
    }
}

impl FileHeader {
    /// What this header's layout was computed from.
    pub fn shape(&self) -> FileShape {
        FileShape {
            n_points: self.n_points,
            n_metrics: self.n_metrics,
            n_counter_slots: self.n_counter_slots,
            ctl_len: self.ctl_len,
            meta_len: self.meta_len,
            obj_buckets: self.obj_buckets,
            obj_cap: self.obj_cap,
        }
    }
}

/// Column size for `n_points` points and `n_counter_slots` 8-byte counters per point,
/// rounded to whole pages so columns never share a cache line or page (D7).
pub const fn column_size(n_points: u32, n_counter_slots: u32) -> u64 {
    align_up(cct_slow_offset(n_points, n_counter_slots) + CCT_CAP as u64 * 8, PAGE)
}
/// Where a column's per-node slow wrapper events start (D21, slowwrap): `CCT_CAP` × u64 after
/// [`cct_wraps_offset`]'s array, entry `k` the wrapper events off the fast path (a contended
/// or first lock, a condition wait (two events: the mutex given back and the wait), rwlocks,
/// semaphores, barriers, join, create, a try-call, an unlock through the full path) that ran
/// while node `k`'s frame was the innermost one; each costs
/// [`Calibration::wrap_slow_ticks`]. A page of entries gets its blocks at the first event it
/// counts (`cct_slow_ready`).
pub const fn cct_slow_offset(n_points: u32, n_counter_slots: u32) -> u64 {
    cct_wraps_offset(n_points, n_counter_slots) + CCT_CAP as u64 * 8
}
/// Where a column's per-node wrapper events start (D21, wrapcomp): `CCT_CAP` × u64, entry
/// `k` the thread-library wrapper events (a mutex lock or unlock on the wrappers' fast path)
/// that ran while node `k`'s frame was the innermost one, so a reader can subtract their
/// calibrated cost ([`Calibration::wrap_event_ticks`]) from the node and its callers. A
/// separate array, not a node field: the timer routines' nodes stay 32 bytes and untouched.
/// A page of entries gets its blocks at the first event it counts (`cct_wraps_ready`).
pub const fn cct_wraps_offset(n_points: u32, n_counter_slots: u32) -> u64 {
    cct_nodes_offset(n_points, n_counter_slots) + CCT_CAP as u64 * CCT_NODE_SIZE as u64
}
/// Where a column's calling-context tree starts (page aligned, after the baseline): its hash
/// index, `CCT_INDEX_CAP` × u32 (node + 1, 0: free), then `CCT_CAP` × [`CctNode`]. Zero
/// pages until the thread enters its first call paths.
pub const fn cct_index_offset(n_points: u32, n_counter_slots: u32) -> u64 {
    align_up(baseline_offset(n_points, n_counter_slots) + baseline_len(n_points, n_counter_slots), PAGE)
}
/// Slots of the tree's hash index: twice the nodes, so a probe finds its node at the first
/// slot most of the time.
pub const CCT_INDEX_CAP: u32 = 2 * CCT_CAP;
/// Where a column's tree nodes start.
pub const fn cct_nodes_offset(n_points: u32, n_counter_slots: u32) -> u64 {
    cct_index_offset(n_points, n_counter_slots) + CCT_INDEX_CAP as u64 * 4
}
/// Where a column's snapshot baseline starts: after the counters. The baseline is what the
/// thread's counters, waits and state times were when it took the snapshot (open frames and
/// the open state counted up to that moment); readers subtract it, nobody zeroes a counter
/// under a running thread. Layout: `WAIT_CAP` × [`WaitEntry`], `N_STATES` × u64 state
/// ticks, then `counters[slot][point]` as in the column. Zero pages until a snapshot.
pub const fn baseline_offset(n_points: u32, n_counter_slots: u32) -> u64 {
    COUNTERS_OFFSET as u64 + n_points as u64 * n_counter_slots as u64 * 8
}

pub const fn baseline_len(n_points: u32, n_counter_slots: u32) -> u64 {
    BASELINE_COUNTERS + n_points as u64 * n_counter_slots as u64 * 8
}

/// Offsets inside the baseline.
pub const BASELINE_WAITS: u64 = 0;
pub const BASELINE_STATES: u64 = WAIT_CAP as u64 * size_of::<WaitEntry>() as u64;
pub const BASELINE_COUNTERS: u64 = BASELINE_STATES + N_STATES as u64 * 8;

/// Offset of the baseline's copy of counter (`slot`, `point`) from the start of a column.
pub const fn baseline_counter_offset(n_points: u32, n_counter_slots: u32, slot: u32, point: u32) -> u64 {
    baseline_offset(n_points, n_counter_slots) + BASELINE_COUNTERS + (slot as u64 * n_points as u64 + point as u64) * 8
}

/// Offset of the baseline's copy of wait-table entry `i` from the start of a column.
pub const fn baseline_wait_offset(n_points: u32, n_counter_slots: u32, i: u32) -> u64 {
    baseline_offset(n_points, n_counter_slots) + BASELINE_WAITS + i as u64 * size_of::<WaitEntry>() as u64
}

/// Offset of the baseline's copy of `state_ticks[state]` from the start of a column.
pub const fn baseline_state_offset(n_points: u32, n_counter_slots: u32, state: u32) -> u64 {
    baseline_offset(n_points, n_counter_slots) + BASELINE_STATES + state as u64 * 8
}

/// Offset of the counter for (`slot`, `point`) from the start of a column.
pub const fn counter_offset(n_points: u32, slot: u32, point: u32) -> u64 {
    COUNTERS_OFFSET as u64 + (slot as u64 * n_points as u64 + point as u64) * 8
}

/// Length of the control region: one byte per point and the calibration's gate
/// ([`calib_point`]), whole pages.
pub const fn ctl_len(n_points: u32) -> u64 {
    align_up(n_points as u64 + 1, PAGE)
}

/// The point id of the calibration routine's trampolines (D21): one past the program's
/// points. Its gate byte (`gate_offset` of it, the byte after the program's gates, inside
/// `ctl_len`) is the runtime's alone, so it can calibrate at any time on any thread without
/// touching a program gate; its counters and call-path node live in a scratch column.
pub const fn calib_point(n_points: u32) -> u32 {
    n_points
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

/// Metric ids (the bit number in a gate byte): aliases of [`Metric`] for code written
/// before it. The spec names metrics; [`METRICS`] lists the ones the code generator knows.
pub const METRIC_CALLS: u32 = Metric::Calls as u32;
pub const METRIC_CPU_TIME: u32 = Metric::CpuTime as u32;
pub const METRIC_WALL_TIME: u32 = Metric::WallTime as u32;
pub const METRIC_LOCK_WAIT: u32 = Metric::LockWait as u32;
pub const METRIC_LOCK_HOLD: u32 = Metric::LockHold as u32;
pub const METRIC_STATE_TRACE: u32 = Metric::StateTrace as u32;
/// Number of metrics (bits used in a gate byte) for this layout version.
pub const N_METRICS: u32 = METRICS.len() as u32;
/// Gate bits a wrapper point can have: calls, and the metrics the wrappers measure.
pub const WRAP_BITS: u8 = metric_bit(METRIC_CALLS) | site_bits(MetricSite::SyncCalls);
/// A gate bit that is no metric: run the wrapper even with every metric off. The rewriter
/// gives it to `pthread_create` and `pthread_setname_np`, which name threads for the thread
/// focus (`threads:` in a control file); nothing is counted for it.
pub const GATE_HOOK: u8 = 1 << 6;
const _: () = assert!(GATE_HOOK & ((1 << N_METRICS) - 1) == 0);
/// Gate bits of the timer metrics: a frame is pushed when any of them is on.
pub const TIMER_BITS: u8 = kind_bits(MetricKind::Timer);

pod_struct! {
    /// Read-only block the rewriter emits into the new code segment and passes to every
    /// runtime entry. Addresses are stored relative to the block's own address, so it needs
    /// no relocation in a PIE.
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
        /// `CFG_*` flags.
        pub flags: u32,
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
        /// This block's own address in the input ELF's address space: the run-time address
        /// minus this is the load bias.
        pub link_addr: u64,
        /// Per point: one byte of `metric_bit`s it can measure | `POINT_INFO_WRAP`, relative.
        pub info_rel: i64,
        /// Point names, NUL-terminated, in point order (for control-file globs), relative.
        pub names_rel: i64,
        pub names_len: u64,
        /// The calibration routine the rewriter emits from the same trampoline code as the
        /// program's points (D21), relative; 0: none. Its entries are at the
        /// `CALIB_*_OFFSET`s below; the runtime runs them at start.
        pub calib_rel: i64,
    }
}

/// Entries of the calibration routine (`RtConfig::calib_rel`), each called with the number of
/// calls in `rdi`; every one returns with rax, rdi and the flags clobbered. Each calls its
/// callee `rdi` times from a loop; the gate of point 0 says what is measured.
/// A callee entered through an entry trampoline and left through an exit trampoline (the
/// program's tactic `window`).
pub const CALIB_SPLIT_OFFSET: u64 = 0;
/// The same loop around a plain function that only returns: the baseline.
pub const CALIB_PLAIN_OFFSET: u64 = 32;
/// A call site of an import, through an import trampoline (D19), into a plain function.
pub const CALIB_IMPORT_OFFSET: u64 = 64;
/// A callee whose entry trampoline also runs its exit (tactic `entry+exit`, tiny functions).
pub const CALIB_ENTRY_EXIT_OFFSET: u64 = 96;

pub const CONFIG_MAGIC: [u8; 8] = *b"STINTCFG";
/// `RtConfig::flags`: the spec turned call paths off (`call_paths: false`, D16).
pub const CFG_NO_CALL_PATHS: u32 = 1 << 0;
/// `RtConfig::flags`: no point can measure a timer (no [`TIMER_BITS`] in any point's info
/// byte), so threads open no perf task-clock page: an open perf event costs its thread
/// kernel time at every context switch (issue 14: +57 % on the mutex workload with nothing
/// measured at all).
pub const CFG_NO_TIMERS: u32 = 1 << 1;
/// `RtConfig::flags`: the spec turned sampling off (`sampling: false`): every call of a
/// timed point is timed, however short and frequent (`SAMPLE_ON` is never set).
pub const CFG_NO_SAMPLING: u32 = 1 << 2;
/// `RtConfig::flags`: no point can measure CPU time (no `cpu_time` bit in any point's info
/// byte) and the spec turned sampling off (its decision reads the CPU clock to tell calls
/// that were off a CPU). With timers (wall time), threads get no switch detector (no rseq
/// area armed, no perf page) and their timer events never re-synchronise a CPU clock
/// (`ClockSource::WallOnly`; issue 14: one `CLOCK_THREAD_CPUTIME_ID` system call per context
/// switch a timer event follows).
pub const CFG_NO_CPU_CLOCK: u32 = 1 << 3;
pub const CONFIG_VERSION: u32 = 6;

pod_struct! {
    /// A site patched with `int3` (the trap tactic): the runtime's SIGTRAP handler resumes
    /// the thread at the site's trampoline. Both addresses are relative to the `RtConfig` block.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct TrapEntry {
        /// Address of the `int3` byte.
        pub site_rel: i64,
        /// Where the thread continues (the trampoline of the site).
        pub resume_rel: i64,
    }
}

/// Bytes the rewriter reserves (zero-filled, writable) for the runtime's own state. The
/// runtime's state struct starts with the dummy column header that every thread's GS base
/// points at before it registers.
pub const RT_STATE_SIZE: u64 = 2 * PAGE;

/// Marker at the start of the code segment the rewriter adds; finding it in an input means
/// the input was already rewritten.
pub const SEGMENT_MAGIC: [u8; 16] = *b"STINT-SEGMENT-v1";

/// Environment variable naming the profile path (`%p` becomes the pid).
pub const ENV_PROFILE: &str = "STINT_PROFILE";
/// Environment variable naming a file that receives the runtime's diagnostics (appended)
/// instead of stderr (D22); ignored, like every `STINT_*`, in an AT_SECURE process.
pub const ENV_LOG: &str = "STINT_LOG";
/// Environment variable naming the directory of profiles when `STINT_PROFILE` is not set
/// (DESIGN D15); without it, `$XDG_RUNTIME_DIR/stint`, else `/tmp/stint-<uid>`.
pub const ENV_DIR: &str = "STINT_DIR";
/// A test hook (D21): `start` doubles every figure of the start-up calibration, `every` those
/// of every calibration run, as a busy sibling thread of the host core does to a run; the
/// integration tests spoil a calibration deterministically with it. Ignored, like every
/// `STINT_*`, in an AT_SECURE process.
pub const ENV_TEST_SPOIL_CALIBRATION: &str = "STINT_TEST_SPOIL_CALIBRATION";

/// The directory of profiles when `STINT_PROFILE` is not set (DESIGN D15), chosen by one rule
/// for the runtime (which creates files there) and the commands (which look there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileDir<'a> {
    /// `$STINT_DIR`, when set and not empty.
    Named(&'a [u8]),
    /// `$XDG_RUNTIME_DIR` followed by [`XDG_PROFILE_SUBDIR`], when it is an absolute path.
    XdgRuntime(&'a [u8]),
    /// [`TMP_PROFILE_DIR_PREFIX`] followed by the effective uid in decimal.
    Tmp,
}

/// What [`ProfileDir::XdgRuntime`] appends to `$XDG_RUNTIME_DIR`.
pub const XDG_PROFILE_SUBDIR: &str = "/stint";
/// What [`ProfileDir::Tmp`] puts before the uid.
pub const TMP_PROFILE_DIR_PREFIX: &str = "/tmp/stint-";

impl<'a> ProfileDir<'a> {
    /// The directory from the values of `STINT_DIR` and `XDG_RUNTIME_DIR`.
    pub fn choose(stint_dir: Option<&'a [u8]>, xdg_runtime_dir: Option<&'a [u8]>) -> ProfileDir<'a> {
        match (stint_dir, xdg_runtime_dir) {
            (Some(d), _) if !d.is_empty() => ProfileDir::Named(d),
            (_, Some(x)) if x.first() == Some(&b'/') => ProfileDir::XdgRuntime(x),
            _ => ProfileDir::Tmp,
        }
    }
}

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

impl FileHeader {
    /// Parse and validate the header of a profile file (or a prefix of it at least
    /// `HEADER_RESERVED` bytes long). Checks that every region lies inside `total_len`.
    pub fn parse(b: &[u8], total_len: u64) -> Result<FileHeader, FormatError> {
        let h = FileHeader::read_from(b, 0).ok_or(FormatError::Truncated)?;
        if h.magic != FILE_MAGIC {
            return Err(FormatError::BadMagic);
        }
        if h.version != FILE_VERSION {
            return Err(FormatError::Version(h.version));
        }
        // column_size() below must not overflow, whatever the header says.
        let counters = (h.n_points as u64).checked_mul(h.n_counter_slots as u64).and_then(|n| n.checked_mul(8));
        if counters.and_then(|c| c.checked_add(COUNTERS_OFFSET as u64 + PAGE)).is_none() {
            return Err(FormatError::Inconsistent("points times counter slots overflows the column size"));
        }
        // The runtime grows the file before it raises file_len, so a shorter file was cut.
        if h.file_len > total_len {
            return Err(FormatError::Truncated);
        }
        let region_ok = |off: u64, len: u64| off.checked_add(len).is_some_and(|end| end <= total_len);
        if !region_ok(h.ctl_offset, h.ctl_len)
            || !region_ok(h.meta_offset, h.meta_len)
            || !region_ok(h.control_offset, size_of::<Control>() as u64)
        {
            return Err(FormatError::Truncated);
        }
        if counters.is_none_or(|c| c > u32::MAX as u64) {
            return Err(FormatError::Inconsistent("point and counter counts out of range"));
        }
        if h.column_size < column_size(h.n_points, h.n_counter_slots) {
            return Err(FormatError::Inconsistent("column size too small for the points"));
        }
        if h.n_columns > h.capacity_columns {
            return Err(FormatError::Inconsistent("more columns than capacity"));
        }
        if !region_ok(h.objects_offset, objects_len(h.obj_buckets, h.obj_cap)) {
            return Err(FormatError::Truncated);
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

    /// File offset of entry `i` of the sync-object table (after the buckets).
    pub fn object_offset(&self, i: u32) -> u64 {
        self.objects_offset + object_entry_offset(self.obj_buckets, i)
    }
}

impl ColumnHeader {
    /// Parse a column header from the start of a column's bytes.
    pub fn parse(b: &[u8]) -> Result<ColumnHeader, FormatError> {
        ColumnHeader::read_from(b, 0).ok_or(FormatError::Truncated)
    }

    /// Shadow-stack frame `i` (`0..min(depth, SHADOW_CAP)`, the outermost first) of a column
    /// given the column's bytes.
    pub fn frame(col: &[u8], i: u32) -> Option<Frame> {
        if i >= SHADOW_CAP {
            return None;
        }
        Frame::read_from(col, (SHADOW_OFFSET + i * FRAME_SIZE) as usize)
    }

    /// Counter (`slot`, `point`) of a column given the column's bytes.
    pub fn counter(col: &[u8], n_points: u32, slot: u32, point: u32) -> Option<u64> {
        u64::read_from(col, usize::try_from(counter_offset(n_points, slot, point)).ok()?)
    }
}

impl WaitEntry {
    /// Parse entry `i` of a column's wait table given the column's bytes.
    pub fn parse(col: &[u8], i: u32) -> Option<WaitEntry> {
        WaitEntry::read_from(col, wait_offset(i) as usize)
    }
}

impl Transition {
    /// Parse ring entry `i` (`0..RING_CAP`) of a column given the column's bytes.
    pub fn parse(col: &[u8], i: u32) -> Option<Transition> {
        Transition::read_from(col, ring_offset(i) as usize)
    }
}

impl SyncObject {
    /// Parse object `i` of the table given the whole file and its header.
    pub fn parse(file: &[u8], h: &FileHeader, i: u32) -> Option<SyncObject> {
        if i >= h.obj_cap {
            return None;
        }
        SyncObject::read_from(file, usize::try_from(h.object_offset(i)).ok()?)
    }
}

impl WrapSite {
    /// The descriptor as bytes, as the rewriter writes it into the output.
    pub fn to_bytes(&self) -> [u8; size_of::<WrapSite>()] {
        let mut out = [0u8; size_of::<WrapSite>()];
        out.copy_from_slice(self.as_bytes());
        out
    }
}

impl RtConfig {
    /// The config block as bytes, as the rewriter writes it into the output.
    pub fn to_bytes(&self) -> [u8; size_of::<RtConfig>()] {
        let mut out = [0u8; size_of::<RtConfig>()];
        out.copy_from_slice(self.as_bytes());
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
        assert_eq!(FRAME_SIZE, 64);
        assert_eq!(HELD_OFFSET, 512 + 512 * 64);
        assert_eq!(WAITS_OFFSET, HELD_OFFSET + 16 * 16);
        assert_eq!(RING_OFFSET, WAITS_OFFSET + 256 * 56);
        assert_eq!(COUNTERS_OFFSET, RING_OFFSET + 256 * 16);
        // The hash index, the nodes and the nodes' wrapper events (wrapcomp).
        let tree = CCT_INDEX_CAP as u64 * 4 + CCT_CAP as u64 * 32 + CCT_CAP as u64 * 8 * 2;
        assert_eq!(column_size(0, 1), align_up(COUNTERS_OFFSET as u64 + BASELINE_COUNTERS, PAGE) + tree);
        assert_eq!(column_size(10, 4), align_up(baseline_offset(10, 4) + BASELINE_COUNTERS + 10 * 4 * 8, PAGE) + tree);
        assert_eq!(cct_nodes_offset(10, 4) % PAGE, 0);
        assert_eq!(cct_wraps_offset(10, 4), cct_nodes_offset(10, 4) + CCT_CAP as u64 * 32);
        assert_eq!(cct_slow_offset(10, 4), cct_wraps_offset(10, 4) + CCT_CAP as u64 * 8);
        assert_eq!(size_of::<CctNode>(), 32);
        assert_eq!(cct_hash(0, 7), 7);
        assert_eq!(size_of::<WrapSite>(), 32);
        assert_eq!(size_of::<SyncObject>(), 32);
        assert_eq!(counter_offset(10, 0, 3), COUNTERS_OFFSET as u64 + 24);
        assert_eq!(counter_offset(10, SLOT_WALL_TICKS, 3), COUNTERS_OFFSET as u64 + 8 * 23);
    }

    /// The layout is what the runtime computed by hand before (runtime.rs `create_profile`).
    #[test]
    fn file_layout_is_the_runtime_layout() {
        let shape = FileShape {
            n_points: 5000,
            n_metrics: N_METRICS,
            n_counter_slots: N_COUNTER_SLOTS,
            ctl_len: ctl_len(5000),
            meta_len: 12345,
            obj_buckets: OBJ_BUCKETS,
            obj_cap: OBJ_CAP,
        };
        let l = FileLayout::new(shape);
        assert_eq!((l.control_offset, l.ctl_offset), (PAGE, 2 * PAGE));
        assert_eq!(l.meta_offset, 2 * PAGE + 2 * PAGE);
        assert_eq!(l.objects_offset, align_up(4 * PAGE + 12345, PAGE));
        assert_eq!(l.columns_offset, l.objects_offset + objects_len(OBJ_BUCKETS, OBJ_CAP));
        assert_eq!(l.column_size, column_size(5000, N_COUNTER_SLOTS));
        assert_eq!(l.file_len(16), l.columns_offset + 16 * l.column_size);
        let mut h = FileHeader { pid: 7, ..FileHeader::default() };
        l.apply(&mut h, 16);
        assert_eq!((h.pid, h.file_len, h.capacity_columns), (7, l.file_len(16), 16));
        assert_eq!(h.shape(), shape);
        assert!(FileLayout::new(h.shape()).agrees_with(&h));
        h.meta_offset += 1;
        assert!(!FileLayout::new(h.shape()).agrees_with(&h));
    }

    #[test]
    fn header_rejects_garbage() {
        assert_eq!(FileHeader::parse(&[0u8; 10], 10), Err(FormatError::Truncated));
        assert_eq!(FileHeader::parse(&[0u8; 4096], 4096), Err(FormatError::BadMagic));
    }
}
