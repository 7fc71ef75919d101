//! One thread's column of the profile file (D7, D9): the only code in rt-lib that computes
//! an offset into a column.
//!
//! ```text
//! column (column_size(n_points, n_slots) bytes, page aligned, written by its thread only)
//! 0                 ColumnHeader                      Column::h
//! SHADOW_OFFSET     SHADOW_CAP × Frame                frame / set_frame
//! HELD_OFFSET       HELD_CAP × Held                   push_held / pop_held
//! WAITS_OFFSET      WAIT_CAP × WaitEntry              wait_entry
//! RING_OFFSET       RING_CAP × Transition             push_transition
//! COUNTERS_OFFSET   n_slots × n_points × u64          counter / counter_mut
//! baseline_offset   waits, N_STATES × u64, counters   save_baseline / add_to_baseline
//! cct_index_offset  CCT_INDEX_CAP × u32 (node + 1)    cct_child
//! cct_nodes_offset  CCT_CAP × CctNode                 cct_child / cct_add
//! cct_wraps_offset  CCT_CAP × u64 (wrapper events)    count_wrap_event
//! cct_slow_offset   CCT_CAP × u64 (slow-path events)  count_slow_event
//! ```
//! A [`Column`] is a handle over the column's base pointer: the header as an exclusive
//! reference, the rest reached through typed accessors that check every index against the
//! capacities of `stint_layout` (an index out of range reads as `None` and writes nothing),
//! so the only unsafe step is building the handle, whose contract says the pointer names a
//! whole column that nobody else accesses meanwhile. The trampolines address the same
//! places with `gs:` displacements the rewriter takes from the same constants.
//!
//! **File blocks as the thread uses them (issue 14).** Registration allocates the header, the
//! first page of the shadow stack and the counters; everything else gets its blocks on its
//! first write, here: the shadow stack a page at a time as the thread's depth reaches
//! `shadow_ready` (the entry routine's limit, so it sends that entry here), the held and
//! wait tables at the first lock event that writes them, the ring at the first transition,
//! the baseline at the first snapshot (`lazy_ready` says which). A region whose blocks
//! cannot be allocated (a full file system) is not written: its events are counted as lost
//! (`wrap_skipped`, `shadow_overflow`), never a SIGBUS in the program. A handle made without
//! [`Column::in_file`] (unit tests' memory columns) treats every region as allocated.
//!
//! Layering: uses only `stint_layout` and `core` (with `sys` at the bottom of rt-lib).
#![allow(unsafe_code)]

use crate::sys;
use core::mem::size_of;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use stint_layout::{
    baseline_len, baseline_offset, cct_hash, cct_index_offset, cct_nodes_offset, cct_slow_offset, cct_wraps_offset,
    counter_offset, CctNode, ColumnHeader, Frame, Held, Transition, WaitEntry, BASELINE_COUNTERS, BASELINE_STATES,
    BASELINE_WAITS, CCT_CAP, CCT_INDEX_CAP, CCT_NODE_SIZE, COUNTERS_OFFSET, FRAME_SIZE, HELD_CAP, HELD_OFFSET,
    LAZY_BASELINE, LAZY_LOCK_TABLES, LAZY_RING, LAZY_SHADOW_FULL, N_STATES, PAGE, RING_CAP, RING_OFFSET, SHADOW_CAP,
    SHADOW_OFFSET, WAITS_OFFSET, WAIT_CAP,
};

/// Shadow-stack frames in the column's first page (after the header): the frames a
/// registration allocates.
pub const SHADOW_FIRST_PAGE: u32 = ((PAGE - SHADOW_OFFSET as u64) / FRAME_SIZE as u64) as u32;

const _: () = assert!(size_of::<ColumnHeader>() as u32 <= SHADOW_OFFSET);
const _: () = assert!(FRAME_SIZE as usize == size_of::<Frame>());

/// The two numbers that size a column (from `RtConfig`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub n_points: u32,
    pub n_slots: u32,
}

/// The hash index a thread's calling-context tree starts with: 256 slots (1 KiB), twice
/// the nodes of one page of them (`timer::allocate_nodes` gives the nodes blocks a page at
/// a time and doubles the index when they outgrow it).
pub const CCT_INITIAL_MASK: u32 = 2 * (4096 / CCT_NODE_SIZE) - 1;

/// `ColumnHeader::lock_cache`'s low bits: the probe step of the cached entry. Objects whose
/// address is not a multiple of 4 are not cached.
const LOCK_CACHE_STEP_MASK: u64 = 3;
/// Probe steps `lock_cache` can hold.
pub const LOCK_CACHE_PROBES: u32 = LOCK_CACHE_STEP_MASK as u32 + 1;

/// The first wait-table slot of the object at address `home`.
fn wait_home(home: u64) -> u32 {
    ((home >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as u32 % WAIT_CAP
}

/// A thread's column, borrowed exclusively for `'a`.
pub struct Column<'a> {
    /// The header: owner key, virtual timer, shadow-stack depth, thread record.
    pub h: &'a mut ColumnHeader,
    /// The column's first byte; every region but the header is reached from it.
    base: *mut u8,
    geo: Geometry,
    /// The profile file's descriptor and the column's offset in it, for the blocks of the
    /// regions allocated on first write; `None`: nothing to allocate (a memory column).
    file: Option<(i32, u64)>,
}

/// The per-node wrapper-event arrays after a thread's call tree: the fast path's events
/// (wrapcomp) and the other paths' (slowwrap), each with its own calibrated cost.
#[derive(Clone, Copy)]
enum NodeEvents {
    Fast,
    Slow,
}

impl<'a> Column<'a> {
    /// # Safety
    /// `base` points at `column_size(geo.n_points, geo.n_slots)` mapped, writable bytes of a
    /// column that stay mapped for `'a`, and for `'a` nothing else reads or writes them
    /// through a reference or this way (in practice: the calling thread's own column, or a
    /// column whose thread has ended, under the registration lock). Other processes (`stint
    /// ctl`, readers) may access the file: they only read, or write the header words the
    /// runtime re-reads at its next event (`owner_key`, `thread_mask`).
    pub unsafe fn from_raw(base: *mut ColumnHeader, geo: Geometry) -> Column<'a> {
        // Safety: per the contract the header is ours alone for 'a.
        let h = unsafe { &mut *base };
        Column { h, base: base as *mut u8, geo, file: None }
    }

    /// The handle, with the profile file (`fd`, mapped at `map_base`) that holds the column:
    /// regions written for the first time get their blocks there.
    pub fn in_file(mut self, fd: i32, map_base: usize) -> Column<'a> {
        self.file = Some((fd, (self.base as usize).wrapping_sub(map_base) as u64));
        self
    }

    /// Whether region `bit` (`len` bytes at column offset `off`) has its file blocks,
    /// allocating them now if not. False (nothing allocated) on a full file system.
    fn ready(&mut self, bit: u32, off: u64, len: u64) -> bool {
        if self.h.lazy_ready & bit != 0 {
            return true;
        }
        if let Some((fd, col_off)) = self.file {
            if sys::allocate(fd, col_off + off, len).is_err() {
                return false;
            }
        }
        self.h.lazy_ready |= bit;
        true
    }

    /// Frames the shadow stack keeps: `SHADOW_CAP`, or where a full file system stopped its
    /// growth (`LAZY_SHADOW_FULL`).
    pub fn shadow_cap(&self) -> u32 {
        if self.h.lazy_ready & LAZY_SHADOW_FULL != 0 {
            self.h.shadow_ready.min(SHADOW_CAP)
        } else {
            SHADOW_CAP
        }
    }

    /// Give the shadow stack's frames up to the end of the page holding frame `depth` their
    /// file blocks and raise `shadow_ready` (the entry routine's limit) to them; at a full
    /// file system, [`Column::shadow_cap`] becomes `shadow_ready` for the rest of the thread.
    /// Nothing to do below `shadow_ready` or at `SHADOW_CAP`.
    pub fn grow_shadow(&mut self) {
        let (ready, depth) = (self.h.shadow_ready.min(SHADOW_CAP), self.h.depth);
        if depth < ready || depth >= SHADOW_CAP || self.h.lazy_ready & LAZY_SHADOW_FULL != 0 {
            return;
        }
        let start = SHADOW_OFFSET as u64 + ready as u64 * FRAME_SIZE as u64;
        let end = (SHADOW_OFFSET as u64 + (depth as u64 + 1) * FRAME_SIZE as u64).div_ceil(PAGE) * PAGE;
        let end = end.min(HELD_OFFSET as u64);
        if let Some((fd, col_off)) = self.file {
            if sys::allocate(fd, col_off + start, end - start).is_err() {
                self.h.shadow_ready = ready;
                self.h.lazy_ready |= LAZY_SHADOW_FULL;
                return;
            }
        }
        self.h.shadow_ready = ((end - SHADOW_OFFSET as u64) / FRAME_SIZE as u64) as u32;
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// `T` at byte `off` of the column. Callers pass offsets they checked against the region's
    /// capacity; the pointer is derived from `base`, never from `h`.
    fn at<T>(&self, off: usize) -> *mut T {
        self.base.wrapping_add(off) as *mut T
    }

    /// Offset of counter (`slot`, `point`), if both are in range.
    fn counter_off(&self, slot: u32, point: u32) -> Option<usize> {
        (slot < self.geo.n_slots && point < self.geo.n_points)
            .then(|| counter_offset(self.geo.n_points, slot, point) as usize)
    }

    /// The counter (`slot`, `point`) (tests; the runtime only adds to counters).
    #[cfg(test)]
    pub fn counter(&self, slot: u32, point: u32) -> Option<u64> {
        let off = self.counter_off(slot, point)?;
        // Safety: inside the counter rows (indices checked), aligned.
        Some(unsafe { *self.at::<u64>(off) })
    }

    /// The counter (`slot`, `point`) to update.
    pub fn counter_mut(&mut self, slot: u32, point: u32) -> Option<&mut u64> {
        let off = self.counter_off(slot, point)?;
        // Safety: inside the counter rows (indices checked); `&mut self` makes it exclusive.
        Some(unsafe { &mut *self.at::<u64>(off) })
    }

    /// Shadow-stack frame `i` (`i < SHADOW_CAP`).
    pub fn frame(&self, i: u32) -> Option<Frame> {
        if i >= SHADOW_CAP {
            return None;
        }
        // Safety: frame i lies in the shadow stack.
        Some(unsafe { *self.at::<Frame>((SHADOW_OFFSET + i * FRAME_SIZE) as usize) })
    }

    /// Write shadow-stack frame `i`; false if `i` is beyond the stack.
    pub fn set_frame(&mut self, i: u32, f: Frame) -> bool {
        if i >= SHADOW_CAP {
            return false;
        }
        // Safety: frame i lies in the shadow stack.
        unsafe { *self.at::<Frame>((SHADOW_OFFSET + i * FRAME_SIZE) as usize) = f };
        true
    }

    /// Node + 1 of the child of node `parent` (+ 1, 0: the root) for `point`, made if new
    /// (linear probing from the slot the routines probe). `None` when the tree is full, off
    /// for this thread (`cct_mask` 0), or the index is corrupt. Calls are not counted here.
    pub fn cct_child(&mut self, parent: u32, point: u32) -> Option<u32> {
        let mask = self.h.cct_mask;
        if mask == 0 || mask >= CCT_INDEX_CAP || !(mask + 1).is_power_of_two() {
            return None;
        }
        let cap = mask.div_ceil(2).min(CCT_CAP); // mask = 2 × nodes − 1
        let index = cct_index_offset(self.geo.n_points, self.geo.n_slots) as usize;
        let mut slot = cct_hash(parent, point) & mask;
        for _ in 0..=mask {
            let e = self.at::<u32>(index + slot as usize * 4);
            // Safety: slot ≤ mask < CCT_INDEX_CAP: inside the index.
            let n = unsafe { *e };
            if n == 0 {
                let new = self.h.cct_nodes;
                if new >= cap {
                    return None;
                }
                let node = CctNode { parent, point, calls: 0, cpu_ticks: 0, wall_ticks: 0 };
                // Safety: new < cap ≤ CCT_CAP: inside the nodes; then the index slot. Readers
                // see the node's key before `cct_nodes` counts it (release).
                unsafe {
                    *self.node_ptr(new) = node;
                    *e = new + 1;
                    AtomicU32::from_ptr(&raw mut self.h.cct_nodes).store(new + 1, Ordering::Release);
                }
                return Some(new + 1);
            }
            let i = n - 1;
            if i >= self.h.cct_nodes.min(CCT_CAP) {
                return None; // a corrupt index
            }
            // Safety: i < CCT_CAP.
            let k = unsafe { *self.node_ptr(i) };
            if k.parent == parent && k.point == point {
                return Some(n);
            }
            slot = (slot + 1) & mask;
        }
        None
    }

    /// Re-index the tree with the larger hash index `new_mask` (`2^k − 1` below
    /// `CCT_INDEX_CAP`, at least the current mask): the slots `0..=new_mask` are cleared and
    /// every node is put back where `cct_child` and the routines probe for it. The index
    /// starts at [`CCT_INITIAL_MASK`] and doubles as the tree grows (`timer::allocate_nodes`),
    /// so a thread's index costs file blocks in proportion to the paths it entered, not the
    /// 128 KiB of the whole index (issue 14). False (nothing changed) for a bad mask.
    pub fn cct_reindex(&mut self, new_mask: u32) -> bool {
        if new_mask < self.h.cct_mask || new_mask >= CCT_INDEX_CAP || !(new_mask + 1).is_power_of_two() {
            return false;
        }
        let index = cct_index_offset(self.geo.n_points, self.geo.n_slots) as usize;
        for slot in 0..=new_mask {
            // Safety: slot ≤ new_mask < CCT_INDEX_CAP: inside the index.
            unsafe { *self.at::<u32>(index + slot as usize * 4) = 0 };
        }
        let n = self.h.cct_nodes.min(CCT_CAP).min(new_mask.div_ceil(2));
        for i in 0..n {
            // Safety: i < CCT_CAP.
            let k = unsafe { *self.node_ptr(i) };
            let mut slot = cct_hash(k.parent, k.point) & new_mask;
            // At most half the slots are taken: a free one is always found.
            for _ in 0..=new_mask {
                let e = self.at::<u32>(index + slot as usize * 4);
                // Safety: as above.
                if unsafe { *e } == 0 {
                    // Safety: as above.
                    unsafe { *e = i + 1 };
                    break;
                }
                slot = (slot + 1) & new_mask;
            }
        }
        self.h.cct_mask = new_mask;
        true
    }

    fn node_ptr(&self, i: u32) -> *mut CctNode {
        let nodes = cct_nodes_offset(self.geo.n_points, self.geo.n_slots) as usize;
        self.at::<CctNode>(nodes + i as usize * size_of::<CctNode>())
    }

    /// Node `node` + 1 to update (`None` for 0, [`stint_layout::CCT_LOST`] or out of range).
    pub fn cct_node_mut(&mut self, node: u32) -> Option<&mut CctNode> {
        let i = node.wrapping_sub(1);
        if i >= self.h.cct_nodes.min(CCT_CAP) {
            return None;
        }
        // Safety: i < CCT_CAP: inside the nodes; `&mut self` makes it exclusive.
        Some(unsafe { &mut *self.node_ptr(i) })
    }

    /// A thread-library wrapper event ran (wrapcomp, D21): count it at the call-path node of
    /// the innermost kept frame, whose activation (and its callers') absorbed the wrapper's
    /// cost. Nothing when no frame is open, the frame is beyond the kept ones or has no node,
    /// or the entry's page of the array has no blocks and the file system gives none (a
    /// page gets them at its first event: a thread that takes no lock allocates nothing).
    ///
    /// Inlined into the wrappers' fast path (issue 14): the common case (the top frame has
    /// its blocks, its node's entry too) is two header words, the frame's node and the add;
    /// everything else goes to [`Column::count_wrap_event_slow`], which checks it all again.
    #[inline(always)]
    pub fn count_wrap_event(&mut self) {
        let depth = self.h.depth;
        if depth == 0 {
            return; // no frame open (no timer on: lock metrics alone)
        }
        let top = depth - 1;
        // Frames below `shadow_ready` have their blocks and were written (the entry routine
        // pushes only there).
        if top < self.h.shadow_ready.min(SHADOW_CAP) {
            let at = SHADOW_OFFSET as usize + top as usize * FRAME_SIZE as usize + core::mem::offset_of!(Frame, node);
            // Safety: a u32 of frame `top` < SHADOW_CAP, inside the shadow stack.
            let i = unsafe { read_volatile(self.at::<u32>(at)) }.wrapping_sub(1);
            if i < self.h.cct_wraps_ready.min(self.h.cct_nodes).min(CCT_CAP) {
                let off = cct_wraps_offset(self.geo.n_points, self.geo.n_slots) as usize + i as usize * 8;
                // Safety: i < CCT_CAP: an aligned u64 of the column's wrapper-event array, whose
                // first `cct_wraps_ready` entries have their blocks; `&mut self` makes it ours.
                unsafe {
                    let p = self.at::<u64>(off);
                    *p = (*p).wrapping_add(1);
                }
                return;
            }
        }
        self.count_wrap_event_slow();
    }

    /// [`Column::count_wrap_event`] in full: its page of the array gets blocks here.
    #[cold]
    #[inline(never)]
    fn count_wrap_event_slow(&mut self) {
        self.count_node_events(NodeEvents::Fast, 1);
    }

    /// `n` thread-library wrapper events off the fast path ran (slowwrap, D21): count them at
    /// the innermost kept frame's call-path node, in the array at [`cct_slow_offset`], as
    /// [`Column::count_wrap_event`] counts the fast path's (same conditions, blocks a page at a
    /// time as `cct_slow_ready` says).
    pub fn count_slow_event(&mut self, n: u64) {
        self.count_node_events(NodeEvents::Slow, n);
    }

    /// Add `n` to the innermost kept frame's call-path node in the per-node array `which`,
    /// giving the array's pages their blocks up to that node's (its `*_ready` count).
    fn count_node_events(&mut self, which: NodeEvents, n: u64) {
        let d = self.h.depth;
        if d == 0 || d > self.shadow_cap() {
            return;
        }
        // The frame's node only (a frame is a cache line; d - 1 < SHADOW_CAP).
        let at = SHADOW_OFFSET as usize + (d - 1) as usize * FRAME_SIZE as usize + core::mem::offset_of!(Frame, node);
        // Safety: a u32 of frame d - 1, inside the shadow stack (d ≤ shadow_cap ≤ SHADOW_CAP).
        let i = unsafe { read_volatile(self.at::<u32>(at)) }.wrapping_sub(1);
        if i >= self.h.cct_nodes.min(CCT_CAP) {
            return;
        }
        let (base, ready) = match which {
            NodeEvents::Fast => (cct_wraps_offset(self.geo.n_points, self.geo.n_slots), self.h.cct_wraps_ready),
            NodeEvents::Slow => (cct_slow_offset(self.geo.n_points, self.geo.n_slots), self.h.cct_slow_ready),
        };
        if i >= ready {
            // The pages from `ready` up to the one holding entry i.
            const PER_PAGE: u32 = (PAGE / 8) as u32;
            let end = (i / PER_PAGE + 1) * PER_PAGE;
            if let Some((fd, col_off)) = self.file {
                if sys::allocate(fd, col_off + base + ready as u64 * 8, (end - ready) as u64 * 8).is_err() {
                    return;
                }
            }
            match which {
                NodeEvents::Fast => self.h.cct_wraps_ready = end,
                NodeEvents::Slow => self.h.cct_slow_ready = end,
            }
        }
        // Safety: i < CCT_CAP: an aligned u64 of the column's array `which`, which has its
        // blocks; `&mut self` makes it exclusive.
        unsafe {
            let p = self.at::<u64>(base as usize + i as usize * 8);
            *p = (*p).wrapping_add(n);
        }
    }

    /// The wait-table entry of sync object `obj` (`kind`), claimed if new; `None` when the
    /// table is full (counted in `wrap_skipped`). Open addressing from the slot of `home`,
    /// the object's address: the wrappers' fast path ([`Column::find_wait`]) finds a mutex's
    /// entry from the mutex's address alone, without the shared object table.
    pub fn wait_entry(&mut self, obj: u32, kind: u32, home: u64) -> Option<&mut WaitEntry> {
        let start = wait_home(home);
        for k in 0..WAIT_CAP {
            let i = (start + k) % WAIT_CAP;
            let e = self.wait_at(i);
            // Safety: i < WAIT_CAP: inside the wait table.
            let object = unsafe { (*e).object };
            if object == obj.wrapping_add(1) {
                // Safety: as above; `&mut self` makes it exclusive.
                return Some(unsafe { &mut *e });
            }
            if object == 0 {
                if !self.lock_tables_ready() {
                    break;
                }
                // Safety: as above. Readers see the kind before the object (release).
                unsafe {
                    (*e).kind = kind;
                    AtomicU32::from_ptr(&raw mut (*e).object).store(obj.wrapping_add(1), Ordering::Release);
                    return Some(&mut *e);
                }
            }
        }
        self.h.wrap_skipped = self.h.wrap_skipped.wrapping_add(1);
        None
    }

    /// The wait-table entry of the object at `home` of `kind` that `is_it` (given the
    /// object's index) accepts, looking at the first `probes` slots of `home`'s probe
    /// sequence only; never claims one. `None` also when a free slot ends the sequence.
    /// An entry found within [`LOCK_CACHE_PROBES`] steps is remembered in `lock_cache`, where
    /// [`Column::cached_wait`] finds it again without `is_it`.
    #[inline(always)]
    pub fn find_wait(
        &mut self,
        home: u64,
        kind: u32,
        probes: u32,
        is_it: impl Fn(u32) -> bool,
    ) -> Option<(u32, &mut WaitEntry)> {
        let start = wait_home(home);
        for step in 0..probes.min(WAIT_CAP) {
            let e = self.wait_at((start + step) % WAIT_CAP);
            // Safety: inside the wait table; the entry is written only by this thread.
            let (object, k) = unsafe { ((*e).object, (*e).kind) };
            if object == 0 {
                return None;
            }
            if k == kind && is_it(object - 1) {
                if home & LOCK_CACHE_STEP_MASK == 0 && step <= LOCK_CACHE_STEP_MASK as u32 {
                    // One store: a signal handler on this thread reads the old word or this.
                    self.h.lock_cache = home | step as u64;
                }
                // Safety: as above; `&mut self` makes it exclusive.
                return Some((object - 1, unsafe { &mut *e }));
            }
        }
        None
    }

    /// The wait-table entry of the object at `home` of `kind` if it is the one
    /// [`Column::find_wait`] found last on this thread (`lock_cache`): one load of the
    /// header and the entry, no look at the shared object table. Sound because a wait entry
    /// keeps its slot and its object for the column's life, and an object its address.
    #[inline(always)]
    pub fn cached_wait(&mut self, home: u64, kind: u32) -> Option<(u32, &mut WaitEntry)> {
        // One load: a signal handler that moves the cache meanwhile does not tear it.
        let c = self.h.lock_cache;
        if c == 0 || c & !LOCK_CACHE_STEP_MASK != home {
            return None;
        }
        let e = self.wait_at((wait_home(home) + (c & LOCK_CACHE_STEP_MASK) as u32) % WAIT_CAP);
        // Safety: inside the wait table; the entry is written only by this thread.
        let (object, k) = unsafe { ((*e).object, (*e).kind) };
        if object == 0 || k != kind {
            return None;
        }
        // Safety: as above; `&mut self` makes it exclusive.
        Some((object - 1, unsafe { &mut *e }))
    }

    /// The held and wait tables' blocks ([`Column::ready`]).
    fn lock_tables_ready(&mut self) -> bool {
        let fresh = self.h.lazy_ready & LAZY_LOCK_TABLES == 0;
        if !self.ready(LAZY_LOCK_TABLES, HELD_OFFSET as u64, (RING_OFFSET - HELD_OFFSET) as u64) {
            return false;
        }
        // Holds counted while the table had no blocks were not kept: their slots must not
        // read as object 0 now that the table is kept.
        for i in 0..if fresh { self.h.n_held.min(HELD_CAP) } else { 0 } {
            // Safety: i < HELD_CAP: inside the held table, which now has its blocks.
            unsafe { *self.held(i) = Held { object: u32::MAX, _pad: 0, since: 0 } };
        }
        true
    }

    /// Holds the held table keeps: none while its blocks are not allocated (reading its
    /// unwritten zeros would find object 0).
    fn held_cap(&self) -> u32 {
        if self.h.lazy_ready & LAZY_LOCK_TABLES != 0 || self.file.is_none() {
            HELD_CAP
        } else {
            0
        }
    }

    fn wait_at(&self, i: u32) -> *mut WaitEntry {
        self.at::<WaitEntry>(WAITS_OFFSET as usize + i as usize * size_of::<WaitEntry>())
    }

    fn held(&self, i: u32) -> *mut Held {
        self.at::<Held>(HELD_OFFSET as usize + i as usize * size_of::<Held>())
    }

    /// Open a `lock_hold` interval of `obj` at `since` (the innermost; `n_held` counts also
    /// the holds beyond `HELD_CAP`, which are not kept).
    #[inline(always)]
    pub fn push_held(&mut self, obj: u32, since: u64) {
        let n = self.h.n_held;
        // The tables' blocks checked inline (the call, with the handle spilled, cost the
        // mutex fast path more than the check).
        if n < HELD_CAP && (self.h.lazy_ready & LAZY_LOCK_TABLES != 0 || self.lock_tables_ready()) {
            // Safety: n < HELD_CAP: inside the held table.
            unsafe { *self.held(n) = Held { object: obj, _pad: 0, since } };
        }
        self.h.n_held = n.saturating_add(1);
    }

    /// Close the innermost open hold of `obj`; its start time.
    #[inline(always)]
    pub fn pop_held(&mut self, obj: u32) -> Option<u64> {
        let kept = self.h.n_held.min(self.held_cap());
        for i in (0..kept).rev() {
            // Safety: i < HELD_CAP.
            let h = unsafe { *self.held(i) };
            if h.object == obj {
                for j in i..kept - 1 {
                    // Safety: j + 1 < kept ≤ HELD_CAP.
                    unsafe { *self.held(j) = *self.held(j + 1) };
                }
                self.h.n_held -= 1;
                return Some(h.since);
            }
        }
        if self.h.n_held > kept {
            self.h.n_held -= 1; // one of the holds that did not fit
        }
        None
    }

    /// Append `t` to the state-transition ring and publish it (`ring_head`, release).
    /// Not written (counted in `wrap_skipped`) when the ring gets no file blocks.
    pub fn push_transition(&mut self, t: Transition) {
        if !self.ready(LAZY_RING, RING_OFFSET as u64, (COUNTERS_OFFSET - RING_OFFSET) as u64) {
            self.h.wrap_skipped = self.h.wrap_skipped.wrapping_add(1);
            return;
        }
        let head = self.h.ring_head;
        let i = (head % RING_CAP as u64) as usize;
        // Safety: i < RING_CAP: inside the ring; ring_head is an aligned u64 of the header.
        unsafe {
            write_volatile(self.at::<Transition>(RING_OFFSET as usize + i * size_of::<Transition>()), t);
            AtomicU64::from_ptr(&raw mut self.h.ring_head).store(head.wrapping_add(1), Ordering::Release);
        }
    }

    /// Copy the waits, `state_ticks` and the counters into the baseline (the open frames are
    /// added with [`Column::add_to_baseline`]). False (nothing written) when the baseline
    /// gets no file blocks.
    pub fn save_baseline(&mut self, state_ticks: &[u64; N_STATES as usize]) -> bool {
        let b = baseline_offset(self.geo.n_points, self.geo.n_slots) as usize;
        let counters = self.geo.n_points as usize * self.geo.n_slots as usize * 8;
        if !self.ready(LAZY_BASELINE, b as u64, baseline_len(self.geo.n_points, self.geo.n_slots)) {
            return false;
        }
        // Safety: the wait table, the counter rows and the baseline (its waits, states and
        // counters, `baseline_len` bytes) all lie inside the column (`column_size`) and do not
        // overlap.
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.at::<u8>(WAITS_OFFSET as usize),
                self.at::<u8>(b + BASELINE_WAITS as usize),
                WAIT_CAP as usize * size_of::<WaitEntry>(),
            );
            let states = self.at::<u64>(b + BASELINE_STATES as usize);
            for (s, &t) in state_ticks.iter().enumerate() {
                write_volatile(states.add(s), t);
            }
            core::ptr::copy_nonoverlapping(
                self.at::<u8>(COUNTERS_OFFSET as usize),
                self.at::<u8>(b + BASELINE_COUNTERS as usize),
                counters,
            );
        }
        true
    }

    /// Add `v` to the baseline's copy of counter (`slot`, `point`).
    pub fn add_to_baseline(&mut self, slot: u32, point: u32, v: u64) {
        let ready = self.h.lazy_ready & LAZY_BASELINE != 0 || self.file.is_none();
        if !ready || slot >= self.geo.n_slots || point >= self.geo.n_points {
            return;
        }
        let b = baseline_offset(self.geo.n_points, self.geo.n_slots) as usize + BASELINE_COUNTERS as usize;
        let off = b + (slot as usize * self.geo.n_points as usize + point as usize) * 8;
        let p = self.at::<u64>(off);
        // Safety: inside the baseline's counters (indices checked).
        unsafe { write_volatile(p, read_volatile(p).wrapping_add(v)) };
    }

    /// The baseline's copy of counter (`slot`, `point`) (tests).
    #[cfg(test)]
    fn baseline_counter(&self, slot: u32, point: u32) -> u64 {
        let b = baseline_offset(self.geo.n_points, self.geo.n_slots) as usize + BASELINE_COUNTERS as usize;
        // Safety: test-only, in range by the callers.
        unsafe { *self.at::<u64>(b + (slot as usize * self.geo.n_points as usize + point as usize) * 8) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stint_layout::{column_size, COLUMN_HEADER_RESERVED, SLOT_CALLS, SLOT_WALL_TICKS};

    /// The u64 at byte `off` of the buffer.
    fn word(buf: &[u64], off: u64) -> u64 {
        assert_eq!(off % 8, 0);
        buf[off as usize / 8]
    }

    /// A zeroed, 8-aligned column of the given geometry.
    fn buffer(geo: Geometry) -> Vec<u64> {
        vec![0u64; column_size(geo.n_points, geo.n_slots) as usize / 8]
    }

    fn column(buf: &mut [u64], geo: Geometry) -> Column<'_> {
        // Safety: a whole column of this geometry, borrowed for the handle's life.
        unsafe { Column::from_raw(buf.as_mut_ptr() as *mut ColumnHeader, geo) }
    }

    const GEO: Geometry = Geometry { n_points: 5, n_slots: 4 };

    #[test]
    fn counters_land_where_the_layout_says() {
        let mut buf = buffer(GEO);
        let mut c = column(&mut buf, GEO);
        *c.counter_mut(SLOT_CALLS, 3).unwrap() += 7;
        *c.counter_mut(SLOT_WALL_TICKS, 4).unwrap() = 9;
        assert_eq!(c.counter(SLOT_CALLS, 3), Some(7));
        assert!(c.counter_mut(4, 0).is_none() && c.counter_mut(0, 5).is_none());
        assert_eq!(c.counter(0, 5), None);
        assert_eq!(word(&buf, counter_offset(GEO.n_points, SLOT_CALLS, 3)), 7);
        assert_eq!(word(&buf, counter_offset(GEO.n_points, SLOT_WALL_TICKS, 4)), 9);
    }

    #[test]
    fn frames_are_bounded_by_the_shadow_stack() {
        let mut buf = buffer(GEO);
        let mut c = column(&mut buf, GEO);
        let f = Frame { sp: 0x7ff0, point: 2, bits: 6, wall_start: 11, cpu_start: 12, node: 3, ..Frame::default() };
        assert!(c.set_frame(0, f));
        assert!(c.set_frame(SHADOW_CAP - 1, Frame { point: 4, ..f }));
        assert!(!c.set_frame(SHADOW_CAP, f));
        assert_eq!(c.frame(0), Some(f));
        assert_eq!(c.frame(SHADOW_CAP - 1).map(|f| f.point), Some(4));
        assert_eq!(c.frame(SHADOW_CAP), None);
        c.h.depth = 1;
        assert_eq!(c.counter(SLOT_CALLS, 0), Some(0), "frames do not spill into the counters");
    }

    #[test]
    fn held_stack_pops_the_innermost_and_counts_the_overflow() {
        let mut buf = buffer(GEO);
        let mut c = column(&mut buf, GEO);
        c.push_held(1, 10);
        c.push_held(2, 20);
        c.push_held(1, 30);
        assert_eq!(c.pop_held(1), Some(30));
        assert_eq!(c.pop_held(1), Some(10));
        assert_eq!(c.h.n_held, 1);
        assert_eq!(c.pop_held(7), None);
        assert_eq!(c.pop_held(2), Some(20));
        assert_eq!(c.h.n_held, 0);
        for i in 0..HELD_CAP + 2 {
            c.push_held(100 + i, i as u64);
        }
        assert_eq!(c.h.n_held, HELD_CAP + 2);
        assert_eq!(c.pop_held(999), None); // drops one of the two not kept
        assert_eq!(c.h.n_held, HELD_CAP + 1);
        assert_eq!(c.pop_held(100 + HELD_CAP - 1), Some(HELD_CAP as u64 - 1));
    }

    #[test]
    fn wait_table_claims_then_finds_then_fills() {
        let mut buf = buffer(GEO);
        let mut c = column(&mut buf, GEO);
        c.wait_entry(5, 1, 0x5000).unwrap().count += 1;
        c.wait_entry(5, 1, 0x5000).unwrap().count += 1;
        let e = *c.wait_entry(5, 1, 0x5000).unwrap();
        assert_eq!((e.object, e.kind, e.count), (6, 1, 2));
        for obj in 0..WAIT_CAP {
            let _ = c.wait_entry(1000 + obj, 2, 0x8000 + 8 * obj as u64);
        }
        assert_eq!(c.h.wrap_skipped, 1, "one object did not fit");
        assert!(c.wait_entry(5, 1, 0x5000).is_some());
    }

    #[test]
    fn find_wait_finds_entries_from_their_address_only() {
        let mut buf = buffer(GEO);
        let mut c = column(&mut buf, GEO);
        // Objects 7 and 9 at addresses that share a home slot, 8 elsewhere.
        let (a7, a8) = (0x7000u64, 0x8008u64);
        let a9 = (1..100_000u64).map(|i| a7 + 8 * i).find(|a| wait_home(*a) == wait_home(a7)).unwrap();
        let addr = |obj: u32| [a7, a8, a9][obj as usize - 7];
        c.wait_entry(7, 1, a7).unwrap().count = 70;
        c.wait_entry(9, 1, a9).unwrap().count = 90;
        c.wait_entry(8, 2, a8).unwrap().count = 80;
        for (a, kind, want) in [(a7, 1, Some((7, 70))), (a9, 1, Some((9, 90))), (a8, 2, Some((8, 80))), (a8, 1, None)] {
            let got = c.find_wait(a, kind, 4, |i| addr(i) == a).map(|(o, e)| (o, e.count));
            assert_eq!(got, want, "address {a:#x} kind {kind}");
        }
        // Not among the first probes: no answer (the caller takes the full path).
        assert!(c.find_wait(a9, 1, 1, |i| addr(i) == a9).is_none());
        let taken = [wait_home(a7), (wait_home(a7) + 1) % WAIT_CAP, wait_home(a8)];
        let free = (1..100_000u64).map(|i| 0x10_0000 + 8 * i).find(|a| !taken.contains(&wait_home(*a))).unwrap();
        assert!(c.find_wait(free, 1, 4, |_| true).is_none(), "a free slot ends the search");
    }

    #[test]
    fn the_entry_found_last_is_found_again_from_the_cache_alone() {
        let mut buf = buffer(GEO);
        let mut c = column(&mut buf, GEO);
        // Objects 7 and 9 share a home slot: 9 is one probe step further.
        let a7 = 0x7000u64;
        let a9 = (1..100_000u64).map(|i| a7 + 8 * i).find(|a| wait_home(*a) == wait_home(a7)).unwrap();
        c.wait_entry(7, 1, a7).unwrap().count = 70;
        c.wait_entry(9, 1, a9).unwrap().count = 90;
        assert!(c.cached_wait(a9, 1).is_none(), "nothing found yet");
        assert_eq!(c.find_wait(a9, 1, 4, |i| i == 9).map(|(o, e)| (o, e.count)), Some((9, 90)));
        assert_eq!(c.h.lock_cache, a9 | 1);
        assert_eq!(c.cached_wait(a9, 1).map(|(o, e)| (o, e.count)), Some((9, 90)));
        // Another address, or the same address as another kind, is not the cached entry.
        assert!(c.cached_wait(a7, 1).is_none());
        assert!(c.cached_wait(a9, 2).is_none());
        assert_eq!(c.find_wait(a7, 1, 4, |i| i == 7).map(|(o, _)| o), Some(7));
        assert_eq!(c.cached_wait(a7, 1).map(|(o, e)| (o, e.count)), Some((7, 70)));
        assert!(c.cached_wait(a9, 1).is_none(), "one entry is cached");
        // An address whose low bits would hold the step is not cached.
        let odd = 0x9002u64;
        c.wait_entry(11, 1, odd).unwrap().count = 110;
        assert_eq!(c.find_wait(odd, 1, 4, |i| i == 11).map(|(o, _)| o), Some(11));
        assert_eq!(c.h.lock_cache, a7, "left as it was");
    }

    #[test]
    fn ring_wraps_and_publishes_the_head() {
        let mut buf = buffer(GEO);
        let mut c = column(&mut buf, GEO);
        for i in 0..RING_CAP as u64 + 3 {
            c.push_transition(Transition { tsc: i, state: 1, object: 2 });
        }
        assert_eq!(c.h.ring_head, RING_CAP as u64 + 3);
        let tsc = |i: u64| word(&buf, RING_OFFSET as u64 + i * size_of::<Transition>() as u64);
        assert_eq!(tsc(2), RING_CAP as u64 + 2);
        assert_eq!(tsc(3), 3);
    }

    #[test]
    fn baseline_copies_counters_and_adds_open_time() {
        let mut buf = buffer(GEO);
        let mut c = column(&mut buf, GEO);
        *c.counter_mut(SLOT_WALL_TICKS, 2).unwrap() = 40;
        c.wait_entry(3, 1, 0x3000).unwrap().count = 4;
        let mut states = [0u64; N_STATES as usize];
        states[0] = 77;
        c.save_baseline(&states);
        c.add_to_baseline(SLOT_WALL_TICKS, 2, 2);
        c.add_to_baseline(SLOT_WALL_TICKS, 99, 2); // out of range: nothing
        assert_eq!(c.baseline_counter(SLOT_WALL_TICKS, 2), 42);
        assert_eq!(c.counter(SLOT_WALL_TICKS, 2), Some(40), "the live counter is untouched");
    }

    #[test]
    fn a_grown_index_finds_every_node_again() {
        let mut buf = buffer(GEO);
        let mut c = column(&mut buf, GEO);
        c.h.cct_mask = 7; // room for 4 nodes
        let keys = [(0, 1), (1, 2), (2, 3), (1, 3)];
        let ids: Vec<_> = keys.iter().map(|&(p, q)| c.cct_child(p, q)).collect();
        assert_eq!(ids, [Some(1), Some(2), Some(3), Some(4)]);
        assert_eq!(c.cct_child(4, 4), None, "full at mask 7");
        assert!(!c.cct_reindex(5), "not a power of two minus one");
        assert!(!c.cct_reindex(3), "smaller than the current index");
        assert!(c.cct_reindex(63));
        assert_eq!(c.h.cct_mask, 63);
        let again: Vec<_> = keys.iter().map(|&(p, q)| c.cct_child(p, q)).collect();
        assert_eq!(again, ids, "the same nodes, none made twice");
        assert_eq!(c.cct_child(4, 4), Some(5));
        assert_eq!(c.h.cct_nodes, 5);
    }

    /// A sparse file as large as a column of `GEO`, for the blocks the handle allocates; its
    /// descriptor and allocated bytes. Removed when dropped.
    struct SparseFile(std::fs::File, std::path::PathBuf);
    impl SparseFile {
        fn new(tag: &str) -> SparseFile {
            let path = std::env::temp_dir().join(format!("stint-rt-column-{tag}-{}", std::process::id()));
            let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
            f.set_len(column_size(GEO.n_points, GEO.n_slots)).unwrap();
            SparseFile(f, path)
        }
        fn fd(&self) -> i32 {
            std::os::fd::AsRawFd::as_raw_fd(&self.0)
        }
        fn allocated(&self) -> u64 {
            std::os::unix::fs::MetadataExt::blocks(&self.0.metadata().unwrap()) * 512
        }
    }
    impl Drop for SparseFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.1);
        }
    }

    /// A memory column whose first writes allocate in `file` (at offset 0).
    fn filed(buf: &mut [u64], fd: i32) -> Column<'_> {
        let base = buf.as_ptr() as usize;
        column(buf, GEO).in_file(fd, base)
    }

    #[test]
    fn the_shadow_stack_gets_blocks_a_page_at_a_time() {
        let file = SparseFile::new("shadow");
        let mut buf = buffer(GEO);
        let mut c = filed(&mut buf, file.fd());
        c.h.shadow_ready = SHADOW_FIRST_PAGE;
        c.h.depth = SHADOW_FIRST_PAGE - 1;
        c.grow_shadow();
        assert_eq!((c.h.shadow_ready, file.allocated()), (SHADOW_FIRST_PAGE, 0), "below the limit: nothing");
        c.h.depth = SHADOW_FIRST_PAGE;
        c.grow_shadow();
        assert_eq!(SHADOW_FIRST_PAGE, 56);
        assert_eq!(c.h.shadow_ready, 56 + 64, "the frames of the column's second page");
        assert_eq!(file.allocated(), PAGE);
        c.h.depth = SHADOW_CAP - 1;
        c.grow_shadow();
        assert_eq!(c.h.shadow_ready, SHADOW_CAP, "up to the end of the stack, not into the held table");
        assert_eq!(file.allocated(), HELD_OFFSET as u64 / PAGE * PAGE, "pages 1 to the one the held table starts in");
        assert_eq!(c.shadow_cap(), SHADOW_CAP);
        c.h.depth = SHADOW_CAP;
        c.grow_shadow();
        assert_eq!(c.h.shadow_ready, SHADOW_CAP);
    }

    #[test]
    fn a_full_file_system_caps_the_shadow_stack() {
        let mut buf = buffer(GEO);
        let mut c = filed(&mut buf, -1); // every allocation fails
        c.h.shadow_ready = SHADOW_FIRST_PAGE;
        c.h.depth = SHADOW_FIRST_PAGE;
        c.grow_shadow();
        assert_eq!((c.h.shadow_ready, c.shadow_cap()), (SHADOW_FIRST_PAGE, SHADOW_FIRST_PAGE));
        assert_ne!(c.h.lazy_ready & LAZY_SHADOW_FULL, 0);
        // Another file system later: the cap holds for the rest of the thread.
        c.file = None;
        c.grow_shadow();
        assert_eq!(c.shadow_cap(), SHADOW_FIRST_PAGE);
    }

    #[test]
    fn lock_tables_ring_and_baseline_get_blocks_at_their_first_write() {
        let file = SparseFile::new("lazy");
        let mut buf = buffer(GEO);
        let mut c = filed(&mut buf, file.fd());
        assert!(c.find_wait(0x3000, 1, 4, |_| true).is_none(), "looking allocates nothing");
        assert_eq!(c.pop_held(0), None);
        assert_eq!(file.allocated(), 0);
        c.push_held(2, 20);
        let tables = (RING_OFFSET as u64).div_ceil(PAGE) * PAGE - HELD_OFFSET as u64 / PAGE * PAGE;
        assert_eq!(file.allocated(), tables);
        assert_eq!(c.h.lazy_ready, LAZY_LOCK_TABLES);
        c.wait_entry(3, 1, 0x3000).unwrap().count = 4;
        assert_eq!(file.allocated(), tables, "once");
        assert_eq!(c.pop_held(2), Some(20));
        c.push_transition(Transition { tsc: 5, state: 1, object: 3 });
        assert_eq!(c.h.ring_head, 1);
        assert_eq!(c.h.lazy_ready, LAZY_LOCK_TABLES | LAZY_RING);
        let ring_end = (COUNTERS_OFFSET as u64).div_ceil(PAGE) * PAGE;
        assert_eq!(file.allocated(), ring_end - HELD_OFFSET as u64 / PAGE * PAGE);
        let before = file.allocated();
        assert!(c.save_baseline(&[0; N_STATES as usize]));
        let b = baseline_offset(GEO.n_points, GEO.n_slots);
        let len = baseline_len(GEO.n_points, GEO.n_slots);
        let new_pages = (b + len).div_ceil(PAGE) - (b / PAGE).max(ring_end / PAGE);
        assert_eq!(file.allocated() - before, new_pages * PAGE);
        assert_eq!(c.h.lazy_ready, LAZY_LOCK_TABLES | LAZY_RING | LAZY_BASELINE);
    }

    #[test]
    fn regions_without_blocks_are_not_written() {
        let mut buf = buffer(GEO);
        let mut c = filed(&mut buf, -1); // every allocation fails
        c.push_held(2, 20);
        assert_eq!(c.h.n_held, 1, "counted");
        assert_eq!(c.pop_held(2), None, "not kept");
        assert_eq!(c.h.n_held, 0);
        assert!(c.wait_entry(3, 1, 0x3000).is_none());
        assert_eq!(c.h.wrap_skipped, 1);
        c.push_transition(Transition { tsc: 5, state: 1, object: 3 });
        assert_eq!((c.h.ring_head, c.h.wrap_skipped), (0, 2));
        assert!(!c.save_baseline(&[0; N_STATES as usize]));
        c.add_to_baseline(SLOT_WALL_TICKS, 2, 2);
        assert_eq!(c.h.lazy_ready, 0);
        assert!(
            buf.iter().skip(COLUMN_HEADER_RESERVED as usize / 8).all(|&w| w == 0),
            "nothing written past the header"
        );
    }

    #[test]
    fn holds_counted_without_blocks_never_match_later() {
        let file = SparseFile::new("held");
        let mut buf = buffer(GEO);
        let mut c = filed(&mut buf, -1);
        c.push_held(0, 20); // object 0: what an unwritten slot would read as
        c.file = Some((file.fd(), 0));
        c.push_held(5, 30);
        assert_eq!(c.h.n_held, 2);
        assert_eq!(c.pop_held(0), None, "the hold that was not kept");
        assert_eq!(c.pop_held(5), Some(30));
    }
}
