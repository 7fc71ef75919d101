//! Calibration (D21): what one instrumented event costs, measured with the routine the
//! rewriter emitted for the calibration's own point and gate byte (`calib_point`), on a
//! scratch column: at start-up, and once more as the program ends ([`calibrate_again`]),
//! because one start-up run can be spoiled by a busy host. The profile keeps each run and,
//! per kind of event, the least of them (`profile_file::record_calibration`).
//!
//! Layering: uses `sys`, `state`, `threads` (the calling thread's open frames) and
//! `profile_file`; used by `wrap` (the end of `main`, `exit`) and `start`.
#![allow(unsafe_code)]

use crate::profile_file::record_calibration;
use crate::state::Rt;
use crate::sys;
use crate::threads;
use stint_layout::{
    calib_point, cct_hash, cct_index_offset, cct_nodes_offset, column_size, counter_offset, gate_offset, metric_bit,
    Calibration, CctNode, ColumnHeader, Frame, Pod, CALIB_ENTRY_EXIT_OFFSET, CALIB_IMPORT_OFFSET, CALIB_PLAIN_OFFSET,
    CALIB_SCALE, CALIB_SPLIT_OFFSET, CCT_NODE_SIZE, CFG_NO_SAMPLING, METRIC_CALLS, N_COUNTER_SLOTS, SAMPLE_EVERY,
    SAMPLE_HASH, SAMPLE_LEARN, SAMPLE_NEVER, SAMPLE_ON, SAMPLE_UNIT, SHADOW_CAP, SHADOW_OFFSET, SLOT_ACTIVE,
    SLOT_WALL_TICKS, TIMER_BITS,
};

/// Entry/exit pairs per calibration batch, and batches per kind of event (after one warm-up
/// batch): 8,000 calls of each of three kinds (with call paths, without, counted only), about
/// half a millisecond at start.
const CALIB_PER_BATCH: u32 = 1000;
const CALIB_BATCHES: usize = 7;
/// Calls per batch of a sampled point (about 60 of them timed): the part of its timed calls
/// inside their span is measured from those.
const CALIB_SAMPLED_PER_BATCH: u32 = 4000;

/// Measure what one instrumented event costs (D21) with the calibration routine the rewriter
/// emitted (`RtConfig::calib_rel`, `stint_layout::CALIB_*_OFFSET`): a callee entered and left
/// through trampolines made by the same code generator as the program's, which call the
/// program's own timer routines, for the calibration's own point ([`calib_point`], one past
/// the program's) with its gate set to every metric (or to calls only) for the duration, on
/// a scratch column. No program gate, counter or column is touched, so this can run at any
/// time on any thread (one run at a time: the gate byte is shared). Each kind of event is the least of
/// [`CALIB_BATCHES`] batches: the whole pair from TSC reads around the batch minus the same
/// loop around a plain function, the part inside the function's own span from what the
/// routines added to the node (or the flat counter).
/// All zero when the program has no timed point, no routine, or the scratch column cannot be
/// mapped.
///
/// # Safety
/// No other calibration runs in this process (at start-up: single-threaded; later: the one
/// [`calibrate_again`]); the control region is mapped (the rewriter's zero pages or the
/// profile's). GS is set to `gs_after` on return (the column, or the dummy, it pointed at);
/// an instrumented signal handler that runs meanwhile records into the scratch column.
pub unsafe fn calibrate(rt: &Rt, gs_after: usize) -> Calibration {
    let cfg = &rt.cfg;
    let none = Calibration::default();
    let point = calib_point(cfg.n_points);
    if cfg.n_points == 0
        || cfg.ctl_len <= gate_offset(point)
        || cfg.calib_rel == 0
        || !cfg.point_info().iter().any(|&b| b & TIMER_BITS != 0)
    {
        return none;
    }
    let geo = cfg.geometry();
    let len = column_size(geo.n_points, N_COUNTER_SLOTS) as usize;
    let prot = sys::PROT_READ | sys::PROT_WRITE;
    // Safety: not MAP_FIXED: new memory only.
    let Ok(base) = (unsafe { sys::mmap(0, len, prot, sys::MAP_PRIVATE | sys::MAP_ANONYMOUS, -1, 0) }) else {
        return none;
    };
    // The word the trampolines compare with the column's key.
    // Safety: `tid_offset` is 0 or inside glibc's thread control block (rewriter contract).
    let key = unsafe { sys::fs_u32(cfg.tid_offset) };
    // The column the routines see: this thread owns it, its CPU clock never needs a
    // re-synchronisation (its sequence word is its own `seq`), one call-path node for
    // (root, point) so that an entry is a one-probe hit.
    let mut h = ColumnHeader {
        self_addr: base as u64,
        owner_tp: sys::thread_pointer(),
        owner_key: key,
        exit_key: key,
        seq_ptr: (base + core::mem::offset_of!(ColumnHeader, seq)) as u64,
        sync_tsc: sys::rdtsc(),
        sync_ticks: u64::MAX >> 1,
        thread_mask: u32::MAX,
        shadow_ready: SHADOW_CAP, // a private mapping: no file blocks to allocate
        ..ColumnHeader::default()
    };
    let mask = rt.st.cct_mask();
    let index = cct_index_offset(geo.n_points, N_COUNTER_SLOTS) as usize;
    let nodes = cct_nodes_offset(geo.n_points, N_COUNTER_SLOTS) as usize;
    let wall = counter_offset(geo.n_points, SLOT_WALL_TICKS, point) as usize;
    // The scratch column is written by the routines through GS between these accesses:
    // every access here is a volatile one through the raw address, never a live reference.
    let put = |off: usize, bytes: &[u8]| {
        for (i, &b) in bytes.iter().enumerate() {
            // Safety: `off + i < len` (offsets inside one column), our private mapping.
            unsafe { core::ptr::write_volatile((base + off + i) as *mut u8, b) };
        }
    };
    // Safety: as for `put`; an aligned u64 (node and counter fields are 8-aligned).
    let get = |off: usize| unsafe { core::ptr::read_volatile((base + off) as *const u64) };
    // The calls are nested in a caller's frame, as almost every call is: node 1 (the
    // callee, under node 0) is the one the entries hit, and the caller's frame is on the
    // shadow stack above the loop's stack pointer.
    put(nodes, CctNode { parent: 0, point, ..CctNode::default() }.as_bytes());
    put(nodes + CCT_NODE_SIZE as usize, CctNode { parent: 1, point, ..CctNode::default() }.as_bytes());
    put(index + 4 * (cct_hash(0, point) & mask) as usize, &1u32.to_le_bytes());
    put(index + 4 * (cct_hash(1, point) & mask) as usize, &2u32.to_le_bytes());
    put(SHADOW_OFFSET as usize, Frame { sp: u64::MAX, point, node: 1, ..Frame::default() }.as_bytes());
    // Safety: gate_offset(point) < ctl_len (checked above): the calibration's own gate byte
    // in the writable control region.
    let gate = unsafe { cfg.control_region().add(gate_offset(point) as usize) };
    // Safety: as above.
    let saved = unsafe { core::ptr::read_volatile(gate) };
    let active = counter_offset(geo.n_points, SLOT_ACTIVE, point) as usize;
    // `state`: the point's sampling state for each batch (`SLOT_ACTIVE` above the open
    // frames): SAMPLE_NEVER times every call (and never reaches the sampling decision).
    let run_sampled = |h: &ColumnHeader, bits: u8, entry: u64, spent: usize, state: u64, calls: u32| -> (u64, u64) {
        put(0, h.as_bytes());
        let mut pair = [0u64; CALIB_BATCHES];
        let mut inner = [0u64; CALIB_BATCHES];
        // One batch more than kept: the first warms the caches and the branch predictors.
        for k in 0..=CALIB_BATCHES {
            put(active, &state.to_le_bytes());
            let before = get(spent);
            // Safety: one run at a time; the scratch column is set up above, the gate is writable.
            let ticks = unsafe { calib_batch(rt, base, gate, bits, entry, calls) };
            let after = get(spent);
            if let (Some(p), Some(i)) =
                (k.checked_sub(1).and_then(|k| pair.get_mut(k)), k.checked_sub(1).and_then(|k| inner.get_mut(k)))
            {
                *p = ticks.saturating_mul(CALIB_SCALE) / calls as u64;
                *i = after.wrapping_sub(before).saturating_mul(CALIB_SCALE) / calls as u64;
            }
        }
        (median(&mut pair), median(&mut inner))
    };
    let run = |h: &ColumnHeader, bits: u8, entry: u64, spent: usize| {
        run_sampled(h, bits, entry, spent, SAMPLE_NEVER, CALIB_PER_BATCH)
    };
    // A sampled point from its SAMPLE_LEARN-th entry on: of a batch's calls, those at a
    // SAMPLE_HASH draw are timed, the others are not.
    let sampled = SAMPLE_ON | (SAMPLE_LEARN * SAMPLE_UNIT);
    let mut timed_in_batch = 0u64;
    let mut n = SAMPLE_LEARN as u32;
    while n < SAMPLE_LEARN as u32 + CALIB_SAMPLED_PER_BATCH {
        n = n.wrapping_add(1);
        if (n.wrapping_mul(SAMPLE_HASH) as u64) < (1u64 << 32) / SAMPLE_EVERY {
            timed_in_batch += 1;
        }
    }
    let all = TIMER_BITS | metric_bit(METRIC_CALLS);
    let node_wall = nodes + CCT_NODE_SIZE as usize + core::mem::offset_of!(CctNode, wall_ticks);
    let paths = ColumnHeader { cct_mask: mask, depth: 1, ..h };
    let with_paths = |entry: u64| if mask != 0 { run(&paths, all, entry, node_wall) } else { (0, 0) };
    let (pair, inner) = with_paths(CALIB_SPLIT_OFFSET);
    let (pair_ee, inner_ee) = with_paths(CALIB_ENTRY_EXIT_OFFSET);
    let (pair_import, inner_import) = with_paths(CALIB_IMPORT_OFFSET);
    let per = CALIB_SAMPLED_PER_BATCH as u64;
    // (an untimed call whole, the part of a timed call inside its span): a sampled point's
    // timed call, drawn among untimed ones, finds colder predictors than a stream of timed
    // calls does (its exit's branch on the frame's mark is inside its span).
    let untimed = |entry: u64, pair: u64| {
        // Only where the spec lets the runtime sample (the batches cost about 1 ms at start).
        if mask == 0 || cfg.flags & CFG_NO_SAMPLING != 0 || timed_in_batch == 0 || timed_in_batch >= per {
            return (0, 0);
        }
        let (mixed, inner) = run_sampled(&paths, all, entry, node_wall, sampled, CALIB_SAMPLED_PER_BATCH);
        let untimed = mixed.saturating_mul(per).saturating_sub(timed_in_batch * pair).checked_div(per - timed_in_batch);
        (untimed.unwrap_or(0), inner.saturating_mul(per).checked_div(timed_in_batch).unwrap_or(0))
    };
    let (pair_untimed, inner_sampled) = untimed(CALIB_SPLIT_OFFSET, pair);
    let (pair_untimed_ee, inner_sampled_ee) = untimed(CALIB_ENTRY_EXIT_OFFSET, pair_ee);
    h.cct_mask = 0;
    h.depth = 1;
    let (pair_flat, inner_flat) = run(&h, all, CALIB_SPLIT_OFFSET, wall);
    let (count, _) = run(&h, metric_bit(METRIC_CALLS), CALIB_SPLIT_OFFSET, wall);
    // Safety: as above; back to what the rewriter emitted.
    unsafe { core::ptr::write_volatile(gate, saved) };
    // Safety: the dummy lives in RtState for the whole run; nothing refers to the scratch
    // column any more and GS no longer points at it.
    unsafe {
        let _ = sys::set_gs_base(gs_after);
        let _ = sys::munmap(base, len);
    }
    let (pair, inner) = if mask != 0 { (pair, inner) } else { (pair_flat, inner_flat) };
    Calibration {
        pair_ticks: pair,
        inner_ticks: inner.min(pair),
        pair_flat_ticks: pair_flat,
        inner_flat_ticks: inner_flat.min(pair_flat),
        count_ticks: count,
        batches: CALIB_BATCHES as u32,
        per_batch: CALIB_PER_BATCH,
        pair_ee_ticks: pair_ee,
        inner_ee_ticks: inner_ee.min(pair_ee),
        pair_import_ticks: pair_import,
        inner_import_ticks: inner_import.min(pair_import),
        pair_untimed_ticks: pair_untimed,
        pair_untimed_ee_ticks: pair_untimed_ee,
        inner_sampled_ticks: inner_sampled.min(pair),
        inner_sampled_ee_ticks: inner_sampled_ee.min(pair_ee),
        // The wrappers' events: measured by `wrap::calibrate_lock` and `calibrate_slow`, at
        // start-up only (start.rs).
        wrap_event_ticks: 0,
        wrap_slow_ticks: 0,
    }
}

/// [`ENV_TEST_SPOIL_CALIBRATION`] values: the start-up run's figures doubled, or every run's,
/// or none (`again`: only the later run forced, whatever the run's length). Any of them runs
/// the later calibration also in a process shorter than [`MIN_RUN_FOR_AGAIN_MS`].
pub const SPOIL_START: u32 = 1;
pub const SPOIL_EVERY: u32 = 2;
pub const SPOIL_NONE_AGAIN: u32 = 3;

/// A process that ran less than this (milliseconds, from its start-up calibration) does not
/// calibrate again at its end: the later run's ≈ 1 ms would be more than 1 % of it.
pub const MIN_RUN_FOR_AGAIN_MS: u64 = 100;

/// `c` as the test hook wants it: every figure doubled for a spoiled run (`first`: the
/// start-up run).
pub fn spoiled(rt: &Rt, c: Calibration, first: bool) -> Calibration {
    let spoil = rt.st.calib_spoil();
    if !(spoil == SPOIL_EVERY || (spoil == SPOIL_START && first)) {
        return c;
    }
    let d = |v: u64| v.saturating_mul(2);
    Calibration {
        pair_ticks: d(c.pair_ticks),
        inner_ticks: d(c.inner_ticks),
        pair_flat_ticks: d(c.pair_flat_ticks),
        inner_flat_ticks: d(c.inner_flat_ticks),
        count_ticks: d(c.count_ticks),
        pair_ee_ticks: d(c.pair_ee_ticks),
        inner_ee_ticks: d(c.inner_ee_ticks),
        pair_import_ticks: d(c.pair_import_ticks),
        inner_import_ticks: d(c.inner_import_ticks),
        pair_untimed_ticks: d(c.pair_untimed_ticks),
        pair_untimed_ee_ticks: d(c.pair_untimed_ee_ticks),
        inner_sampled_ticks: d(c.inner_sampled_ticks),
        inner_sampled_ee_ticks: d(c.inner_sampled_ee_ticks),
        ..c
    }
}

/// Calibrate once more as the program ends (D21): one start-up run is spoiled when the
/// host is busy for that half millisecond (in about one run in 5–6 under load, every batch
/// ran at half speed), and the report would subtract twice the real cost. Called when `main`
/// returns and from `exit`/`_exit` (whichever comes first; once per process image): the
/// program's work is done there, so the 0.5 ms it takes delays only its end, and is taken
/// out of the frames this thread still has open (`main`'s, when it calls `exit`). Keeps, per
/// kind of event, the least of the runs. Nothing when this process measures into no profile
/// of its own, nothing was calibrated at start, or it ran less than [`MIN_RUN_FOR_AGAIN_MS`].
pub fn calibrate_again(rt: &Rt) {
    let st = rt.st;
    if !st.active() || st.pid() != sys::getpid() {
        return;
    }
    let Some(hdr) = rt.file_header() else { return };
    // Safety: this process's mapped header (an aligned u32).
    if unsafe { core::ptr::read_volatile(&raw const (*hdr).calib_count) } == 0 {
        return;
    }
    // A short run keeps its start-up figures (the report's leaf cap still guards them): the
    // run costs ≈ 1 ms of wall time (measured on matmul's start-up row), which a process
    // of less than MIN_RUN_FOR_AGAIN_MS would feel (a test suite runs thousands of them).
    let t0 = sys::rdtsc();
    // Safety: as above (an aligned u64 of the header).
    let started = unsafe { core::ptr::read_volatile(&raw const (*hdr).calib_tsc[0]) };
    let short = t0.wrapping_sub(started) < st.tsc_hz() / 1000 * MIN_RUN_FOR_AGAIN_MS;
    if short && st.calib_spoil() == 0 {
        return;
    }
    let gs = sys::gs_base();
    if gs == 0 || !st.claim_calib_again() {
        return;
    }
    // Safety: the only run of this process from now on (claimed above; the start-up run is
    // over); the control region is the profile's; GS goes back to this thread's column.
    let run = spoiled(rt, unsafe { calibrate(rt, gs as usize) }, false);
    let spent = sys::rdtsc().wrapping_sub(t0);
    if let Some(mut col) = threads::registered_column(rt) {
        // The run's time belongs to no function of the program: out of the open frames.
        let depth = col.h.depth.min(col.shadow_cap());
        for i in 0..depth {
            if let Some(mut f) = col.frame(i) {
                f.wall_start = f.wall_start.wrapping_add(spent);
                f.cpu_start = f.cpu_start.wrapping_add(spent);
                col.set_frame(i, f);
            }
        }
    }
    // Safety: as above; the one writer of the calibration fields.
    unsafe { record_calibration(hdr, run, t0) };
}

/// The middle value: what a call typically costs. The least would be the cost in the best
/// case (caches and predictors warm, nothing else on the core), which the program's calls
/// do not all get: it leaves 2–3 % of a timed call in the caller.
fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// One batch: [`CALIB_PER_BATCH`] calls through the calibration routine's entry at `entry`
/// (`CALIB_*_OFFSET`), for the calibration's point with its gate set to `bits`. Returns the TSC ticks of the
/// batch minus those of the same loop around a plain function (`CALIB_PLAIN_OFFSET`).
///
/// # Safety
/// As for [`calibrate`]; `col` is a mapped scratch column owned by this thread (its header
/// set up as `calibrate` does), `gate` the calibration's writable gate byte, and
/// `RtConfig::calib_rel` the rewriter's routine. GS points at `col` on return.
unsafe fn calib_batch(rt: &Rt, col: usize, gate: *mut u8, bits: u8, entry: u64, calls: u32) -> u64 {
    let routine = rt.cfg.at::<u8>(rt.cfg.calib_rel) as u64;
    // Safety: `col` is a column this thread owns for the batch.
    if unsafe { sys::set_gs_base(col) }.is_err() {
        return 0;
    }
    // Safety: the caller's contract (the calibration's writable gate byte).
    unsafe { core::ptr::write_volatile(gate, bits) };
    let time = |at: u64| {
        let t0 = sys::rdtsc();
        // Safety: the routine (rewriter-generated, `RtConfig::calib_rel`) clobbers rax, rdi
        // and the flags only (the trampolines' and timer routines' contract); it touches the
        // scratch column (GS), the gate byte and the stack below the red zone, which is
        // stepped over first.
        unsafe {
            core::arch::asm!(
                "lea rsp, [rsp - 128]",
                "call {f}",
                "lea rsp, [rsp + 128]",
                f = in(reg) at,
                inout("rdi") calls as u64 => _,
                out("rax") _,
            );
        }
        sys::rdtsc().wrapping_sub(t0)
    };
    let instrumented = time(routine + entry);
    instrumented.saturating_sub(time(routine + CALIB_PLAIN_OFFSET))
}
