//! The slow path of the timer routines (D3, D11, D17): the general case of entering or
//! leaving a timed point, on the thread's measurement shadow stack.
//!
//! The rewriter's timer routine (`codegen::timer_routine`) handles the common case in
//! machine code and calls [`timer`] (through `stint_rt_timer`) when the shadow stack needs
//! more than a push or a matching pop: frames abandoned by an exception or `longjmp`, an
//! exit that matches no frame, a stack at `shadow_ready` (the next page of frames to allocate)
//! or beyond `SHADOW_CAP`, a CPU clock to re-synchronise,
//! or a safe point `stint ctl` asked for. It runs with the column's `busy` flag set, on the
//! thread's own column, so nothing here is shared with other threads.
//!
//! Layering: uses `sys`, `state`, `column`, `clock` and `control`; the entry point builds
//! the column from GS (the routine checked its owner).

use crate::clock;
use crate::column::Column;
use crate::control;
use crate::state::Rt;
use crate::sys;
use stint_layout::{
    cct_index_offset, cct_nodes_offset, metric_bit, Frame, TimerOp, ACTIVE_MASK, CALIB_SCALE, CCT_LOST, CCT_NODE_SIZE,
    CFG_NO_SAMPLING, FRAME_SAMPLED, FRAME_UNTIMED, METRIC_CPU_TIME, METRIC_WALL_TIME, SAMPLE_FACTOR, SAMPLE_LEARN,
    SAMPLE_NEVER, SAMPLE_ON, SAMPLE_PAUSED, SAMPLE_SWITCHES, SAMPLE_UNIT, SLOT_ACTIVE, SLOT_CPU_TICKS, SLOT_LEARN_CPU,
    SLOT_LEARN_WALL, SLOT_SAMPLED_SQ_CPU, SLOT_SAMPLED_SQ_WALL, SLOT_SAMPLED_TIMED, SLOT_WALL_TICKS, TIMER_BITS,
};

const TIMER_OP_ENTER: u32 = TimerOp::Enter as u32;
const TIMER_OP_EXIT: u32 = TimerOp::Exit as u32;
const TIMER_OP_ENTER_UNTIMED: u32 = TimerOp::EnterUntimed as u32;

/// Enter (`op` [`TIMER_OP_ENTER`]) or leave ([`TIMER_OP_EXIT`]) `point` with the function-entry
/// stack pointer `sp` at TSC `tsc`, on the calling thread's column `col`.
pub fn timer(rt: &Rt, col: &mut Column, op: u32, point: u32, sp: u64, tsc: u64) {
    let n = rt.cfg.n_points;
    if point >= n || !rt.st.active() {
        return;
    }
    // An entry of a sampled point the routine chose not to time: a frame with no clock.
    let mut untimed = op == TIMER_OP_ENTER_UNTIMED;
    let op = if untimed { TIMER_OP_ENTER } else { op };
    // A safe point (the routine sends a thread here when `stint ctl` changed its key).
    control::safe_point(rt, col);
    // `stint ctl … sampling off` handled just now: this entry is already timed.
    if untimed && col.counter_mut(SLOT_ACTIVE, point).is_some_and(|a| *a & SAMPLE_PAUSED != 0) {
        untimed = false;
    }
    // CPU time of this instant: `tsc` was read before the routine looked at the sequence
    // word, so after a re-synchronisation it belongs to the previous scheduling period and
    // would be off by the time the thread spent descheduled; read the TSC again.
    // The system call of a re-synchronisation is where the scheduler likes to preempt (reading
    // the thread's CPU clock updates its runtime, and a used-up slice is noticed there): an
    // exit then ends its frames after it, an entry began before it, so the time belongs to
    // the function either way, as it does for the program's own clock reads around the call.
    let mut cpu_tsc = tsc;
    let mut tsc = tsc;
    let mut resynced = false;
    if clock::read_seq(col.h) != col.h.seq || tsc.wrapping_sub(col.h.sync_tsc) > col.h.sync_ticks {
        clock::resync(col.h, rt.st.tsc_hz(), &rt.st.rseq);
        cpu_tsc = sys::rdtsc();
        resynced = true;
        if op == TIMER_OP_EXIT {
            tsc = cpu_tsc;
        }
    }
    let now = Now { wall: tsc, cpu: cpu_tsc.wrapping_sub(col.h.cpu_off) };
    // The entry routine sends an entry at `shadow_ready` here: the next page of frames gets
    // its file blocks (column.rs); `cap` is below `SHADOW_CAP` only on a full file system.
    if op == TIMER_OP_ENTER {
        col.grow_shadow();
    }
    let cap = col.shadow_cap();
    // Frames beyond the kept ones: an exit below the deepest kept frame belongs to one of
    // them; at or above it, they were all left by exception or longjmp.
    if col.h.depth > cap {
        let deepest = col.frame(cap.wrapping_sub(1)).map_or(0, |f| f.sp);
        if sp < deepest {
            if op == TIMER_OP_EXIT {
                col.h.depth -= 1;
            } else {
                col.h.depth += 1;
                col.h.shadow_overflow += 1;
                lose_entry(col);
            }
            return;
        }
        col.h.abandoned_frames += (col.h.depth - cap) as u64;
        col.h.depth = cap;
    }
    // Frames whose stack pointer lies below ours (for an entry: at or below) were left
    // without their exit: close them with the time up to now.
    while col.h.depth > 0 {
        let Some(top) = col.frame(col.h.depth - 1) else { break };
        let abandoned = if op == TIMER_OP_ENTER { top.sp <= sp } else { top.sp < sp };
        if !abandoned {
            break;
        }
        close(col, now);
        col.h.abandoned_frames += 1;
    }
    if op == TIMER_OP_EXIT {
        let matched = col.h.depth > 0 && col.frame(col.h.depth - 1).is_some_and(|f| f.sp == sp && f.point == point);
        if matched {
            close(col, now);
        } else {
            col.h.unmatched_exits += 1;
        }
        return;
    }
    if col.h.depth >= cap {
        col.h.depth += 1;
        col.h.shadow_overflow += 1;
        lose_entry(col);
        return;
    }
    let state = col.counter_mut(SLOT_ACTIVE, point).map_or(0, |a| *a);
    let sampled = state & SAMPLE_ON != 0;
    let bits = match (untimed, sampled) {
        (true, _) => FRAME_UNTIMED,
        (false, s) => {
            (rt.cfg.gate(point) & TIMER_BITS & col.h.thread_mask as u8) as u32 | if s { FRAME_SAMPLED } else { 0 }
        }
    };
    // A sampled point's timed call, or a learning one, starts after the re-synchronisation
    // (wall time as CPU time does): the system call and a preemption inside it are the
    // runtime's, and would otherwise be scaled to every untimed call or decide the point.
    let learning = (1..=SAMPLE_LEARN).contains(&(state / SAMPLE_UNIT));
    let wall_start = if resynced && (sampled || learning) { cpu_tsc } else { now.wall };
    let node = enter_node(rt, col, point);
    col.set_frame(col.h.depth, Frame { sp, point, bits, wall_start, cpu_start: now.cpu, node, ..Frame::default() });
    let decide = match col.counter_mut(SLOT_ACTIVE, point) {
        Some(active) => {
            *active += 1;
            *active & SAMPLE_ON == 0 && *active / SAMPLE_UNIT == SAMPLE_LEARN
        }
        None => false,
    };
    col.h.depth += 1;
    if decide {
        decide_sampling(rt, col, point);
    }
}

/// The [`SAMPLE_LEARN`]-th entry of `point` on this thread (the routine counted it and sent
/// it here): sample the point from now on if its calls so far took less than
/// [`SAMPLE_FACTOR`] timed calls' cost each (the calibrated `pair_ticks`), in CPU time and
/// in wall time, else time every call. The wall time leaves out what the learning calls
/// spent off a CPU when their own exit saw the thread switched out (a preemption: one
/// switch in a learning window of a few µs must not decide for the whole run), but a point
/// with more than [`SAMPLE_SWITCHES`] such calls stays timed (a function that blocks keeps
/// its long wall time). Never when the spec turned sampling off or nothing was calibrated;
/// paused ([`SAMPLE_PAUSED`]) while `stint ctl … sampling off` holds.
fn decide_sampling(rt: &Rt, col: &mut Column, point: u32) {
    let pair = rt.st.sample_pair();
    let gate = rt.cfg.gate(point);
    let mut get = |slot| col.counter_mut(slot, point).map(|c| *c);
    // Learning calls switched out inside, and their ticks off a CPU (`close`).
    let (switched, off) = (get(SLOT_LEARN_CPU).unwrap_or(0), get(SLOT_LEARN_WALL).unwrap_or(0));
    // The calls before this one ended (a recursive point adds its outermost calls only,
    // which makes its mean larger, never smaller).
    let budget = (SAMPLE_FACTOR as u128) * (pair as u128) * (SAMPLE_LEARN as u128 - 1);
    let under = |spent: Option<u64>| spent.is_some_and(|t| (t as u128) * (CALIB_SCALE as u128) < budget);
    let measures = |metric| gate & metric_bit(metric) != 0;
    let short = pair != 0
        && rt.cfg.flags & CFG_NO_SAMPLING == 0
        && gate & TIMER_BITS != 0
        && switched <= SAMPLE_SWITCHES
        && (!measures(METRIC_WALL_TIME) || under(get(SLOT_WALL_TICKS).map(|w| w.saturating_sub(off))))
        && (!measures(METRIC_CPU_TIME) || under(get(SLOT_CPU_TICKS)));
    // The learning calls' time: the exact part of the point's estimate (0 for a point
    // timed on every call, whose readers never look).
    for (from, to) in [(SLOT_CPU_TICKS, SLOT_LEARN_CPU), (SLOT_WALL_TICKS, SLOT_LEARN_WALL)] {
        let v = if short { col.counter_mut(from, point).map_or(0, |c| *c) } else { 0 };
        if let Some(c) = col.counter_mut(to, point) {
            *c = v;
        }
    }
    if let Some(active) = col.counter_mut(SLOT_ACTIVE, point) {
        let open = *active & ACTIVE_MASK;
        // Under `stint ctl … sampling off` a short point is sampled but paused: it times
        // every call until `sampling on`, then samples without learning again.
        let paused = if control::sampling_off(rt) { SAMPLE_PAUSED } else { 0 };
        *active = open | if short { SAMPLE_ON | paused | (SAMPLE_LEARN * SAMPLE_UNIT) } else { SAMPLE_NEVER };
    }
}

/// The calling-context node (+ 1) of an entry of `point` under the top frame, its calls
/// counted: 0 when this thread keeps no call paths, [`CCT_LOST`] (counted in `cct_lost`)
/// when the tree is full or the parent frame has no node. The routine's one-probe hit does
/// the same without coming here.
fn enter_node(rt: &Rt, col: &mut Column, point: u32) -> u32 {
    if col.h.cct_mask == 0 {
        return 0;
    }
    if col.h.cct_nodes >= col.h.cct_ready && !allocate_nodes(rt, col) {
        // The file system is full: this thread's tree stops here (counted), the rest goes on.
        col.h.cct_mask = 0;
        col.h.cct_lost += 1;
        return CCT_LOST;
    }
    let parent = match col.h.depth {
        0 => 0,
        d => col.frame(d - 1).map_or(CCT_LOST, |f| f.node),
    };
    let child = if parent == CCT_LOST { None } else { col.cct_child(parent, point) };
    match child.and_then(|n| col.cct_node_mut(n).map(|node| (n, node))) {
        Some((n, node)) => {
            node.calls += 1;
            n
        }
        None => {
            col.h.cct_lost += 1;
            CCT_LOST
        }
    }
}

/// Give the next page of this thread's tree nodes its file blocks (the nodes are written
/// through the shared mapping; on a full file system a write to a page without blocks would
/// raise SIGBUS in the program). False when the file system refuses.
fn allocate_nodes(rt: &Rt, col: &mut Column) -> bool {
    const PAGE_NODES: u32 = 4096 / CCT_NODE_SIZE;
    let geo = col.geometry();
    // The column's place in the file: its address in our mapping of it.
    let Some(col_off) = col.h.self_addr.checked_sub(rt.st.base() as u64) else { return false };
    let ready = col.h.cct_ready;
    let off = col_off + cct_nodes_offset(geo.n_points, geo.n_slots) + ready as u64 * CCT_NODE_SIZE as u64;
    if sys::allocate(rt.st.fd(), off, 4096).is_err() {
        return false;
    }
    // The hash index grows with the nodes (twice as many slots, D16): doubled, up to the
    // size this run allows (`STINT_CALLTREE_NODES`), its blocks allocated before it is written.
    let limit = rt.st.cct_mask();
    let mut mask = col.h.cct_mask;
    while mask.div_ceil(2) < ready + PAGE_NODES && mask < limit {
        mask = (2 * (mask + 1) - 1).min(limit);
    }
    if mask != col.h.cct_mask {
        let index = col_off + cct_index_offset(geo.n_points, geo.n_slots);
        if sys::allocate(rt.st.fd(), index, (mask as u64 + 1) * 4).is_err() || !col.cct_reindex(mask) {
            return false;
        }
    }
    col.h.cct_ready = ready + PAGE_NODES;
    true
}

/// An entry with no frame (beyond the shadow stack): not in the tree either.
fn lose_entry(col: &mut Column) {
    if col.h.cct_mask != 0 {
        col.h.cct_lost += 1;
    }
}

/// The wall and CPU clocks of this event, in TSC ticks.
#[derive(Clone, Copy)]
struct Now {
    wall: u64,
    cpu: u64,
}

/// Close the top frame (`depth > 0`): its node adds its time; lower the point's active
/// count, and the outermost activation adds its time to the point.
///
/// Closed here rather than by the exit routine, a frame may hold time off a CPU: the wall
/// span minus the CPU span (equal when the CPU clock was not re-synchronised inside the
/// call; this exit's re-synchronisation is where a switch out is seen). A sampled point's
/// timed call adds that time once to the unscaled part of its wall estimate
/// (`SLOT_LEARN_WALL`) and squares only the rest; a learning call counts it for the
/// sampling decision ([`decide_sampling`]).
fn close(col: &mut Column, now: Now) {
    col.h.depth -= 1;
    let Some(f) = col.frame(col.h.depth) else { return };
    let wall_on = f.bits & metric_bit(METRIC_WALL_TIME) as u32 != 0;
    let wall = if wall_on { now.wall.saturating_sub(f.wall_start) } else { 0 };
    let cpu = if f.bits & metric_bit(METRIC_CPU_TIME) as u32 != 0 { now.cpu.saturating_sub(f.cpu_start) } else { 0 };
    // An untimed frame has no clock (its bits measure nothing): no span, nothing off a CPU.
    let off = if wall_on { wall.saturating_sub(now.cpu.saturating_sub(f.cpu_start)) } else { 0 };
    if let Some(node) = col.cct_node_mut(f.node) {
        node.wall_ticks += wall;
        node.cpu_ticks += cpu;
    }
    let sampled = f.bits & FRAME_SAMPLED != 0;
    if sampled {
        if let Some(c) = col.counter_mut(SLOT_SAMPLED_TIMED, f.point) {
            *c += 1;
        }
        for (slot, span) in [(SLOT_SAMPLED_SQ_CPU, cpu), (SLOT_SAMPLED_SQ_WALL, wall - off)] {
            if let Some(c) = col.counter_mut(slot, f.point) {
                let span = span.min(u32::MAX as u64);
                *c = c.saturating_add(span * span);
            }
        }
    }
    let Some(active) = col.counter_mut(SLOT_ACTIVE, f.point) else {
        return; // a corrupted frame: drop it
    };
    // The open frames are the low bits; the sampling state above them stays as it is.
    if *active & ACTIVE_MASK != 0 {
        *active -= 1;
    }
    if *active & ACTIVE_MASK != 0 {
        return;
    }
    // Still learning: entries counted (by a routine with the sampling paths), neither
    // decided (`SAMPLE_ON` and `SAMPLE_NEVER` are above the count) nor at the decision.
    let learning = (1..SAMPLE_LEARN).contains(&(*active / SAMPLE_UNIT));
    if let Some(c) = col.counter_mut(SLOT_WALL_TICKS, f.point) {
        *c += wall;
    }
    if let Some(c) = col.counter_mut(SLOT_CPU_TICKS, f.point) {
        *c += cpu;
    }
    if off != 0 && (sampled || learning) {
        if learning {
            if let Some(c) = col.counter_mut(SLOT_LEARN_CPU, f.point) {
                *c += 1;
            }
        }
        if let Some(c) = col.counter_mut(SLOT_LEARN_WALL, f.point) {
            *c = c.saturating_add(off);
        }
    }
}
