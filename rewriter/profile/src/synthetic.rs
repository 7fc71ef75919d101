//! Synthetic profile files for the tests of everything that reads profiles: a file laid out
//! as the runtime lays it out ([`write_synthetic`]), and small edits of one record in place
//! ([`patch_header`], [`patch_column`], [`put_object`], [`put_wait`], [`put_transition`],
//! [`put_calltree`]).
//!
//! Nothing here restates the layout: offsets come from `stint_layout::FileLayout` (the same
//! computation the runtime uses), records are written with the layout crate's `Pod` methods,
//! and the meta is a `stint_layout::meta::Meta`, the type the rewriter writes and the reader
//! reads.

use std::mem::size_of;

use stint_layout::meta::{Meta, MetricMeta, PointMeta, META_SCHEMA, POINT_ENTRY};
use stint_layout::{
    cct_nodes_offset, counter_offset, ctl_len, gate_offset, ring_offset, wait_offset, CctNode, ColumnHeader,
    FileHeader, FileLayout, FileShape, Metric, Pod, SyncObject, Transition, WaitEntry, CCT_CAP, COLUMN_LIVE,
    FILE_MAGIC, FILE_VERSION, FLAG_TID_KEY_VERIFIED, GLIBC_TID_OFFSET, N_COUNTER_SLOTS, N_METRICS, RING_CAP,
    SLOT_CALLS, WAIT_CAP,
};

/// Columns a synthetic file has room for at least (the runtime starts with 16 and doubles).
const SYNTHETIC_INITIAL_COLUMNS: u32 = 16;
/// pid of a synthetic file without threads.
const SYNTHETIC_PID: u32 = 4242;
/// Start times of synthetic files (fixed, so snapshots are stable).
pub(crate) const SYNTHETIC_REALTIME_NS: u64 = 1_700_000_000_000_000_000;
pub const SYNTHETIC_MONOTONIC_NS: u64 = 1_000_000_000;
/// Pretend address of the file's mapping in the writer (for `ColumnHeader::self_addr`).
const SYNTHETIC_MAP_BASE: u64 = 0x7f00_0000_0000;
/// The sync-object table of a synthetic file (smaller than the runtime's).
const SYNTHETIC_OBJ_BUCKETS: u32 = 16;
const SYNTHETIC_OBJ_CAP: u32 = 64;
/// TSC at start of a synthetic file.
pub const SYNTHETIC_START_TSC: u64 = 1_000_000;

/// Meta JSON in the rewriter's format with one entry point per `(function, address)`, in
/// order: point `i` is `functions[i]`.
pub fn synthetic_meta(program: &str, functions: &[(&str, &str)]) -> String {
    let points: Vec<_> = functions.iter().map(|&(f, a)| (POINT_ENTRY, f, a, 0)).collect();
    synthetic_meta_points(program, &points)
}

/// Meta JSON with one point per `(kind, function, address, size)`, in order; a size of 0 is
/// left out (as older rewriters do). The only metric is `calls`, without its bit (as older
/// rewriters wrote it).
pub fn synthetic_meta_points(program: &str, points: &[(&str, &str, &str, u64)]) -> String {
    let calls = Metric::Calls.def();
    let meta = Meta {
        schema: META_SCHEMA.into(),
        program: program.into(),
        input: Some(format!("/usr/bin/{program}")),
        build_id: None,
        debuglink: None,
        metrics: vec![MetricMeta { bit: None, ..MetricMeta::of(calls) }],
        points: points
            .iter()
            .enumerate()
            .map(|(i, &(kind, function, address, size))| PointMeta {
                id: i as u32,
                kind: kind.into(),
                function: function.into(),
                address: address.into(),
                bits: 0,
                size,
                tail_jumps_to: Vec::new(),
                entry_exit: false,
            })
            .collect(),
        unwrapped: Vec::new(),
    };
    serde_json::to_string(&meta).expect("the meta is plain data and always serialises")
}

/// A complete profile file laid out as the runtime lays it out: the header, the control
/// region at `HEADER_RESERVED` with every gate on, the meta, an empty sync-object table of
/// 64 entries at the next page, then columns with room for at least 16 (TSC at start:
/// `SYNTHETIC_START_TSC`, no TSC calibration, every thread in state RUN with no state
/// record). Column `i` belongs to `threads[i]`: `(tid, [(point, calls)])`. The
/// first thread is the main thread (its tid is the pid); a thread's first point is the first
/// point in its list. `n_points` is the length of the meta's `points` array (0 when the meta
/// is not a meta, so broken metas can be written too), and counts go to the counter slot the
/// meta gives the `calls` metric.
///
/// # Panics
/// If a thread counts calls at a point the meta does not have, or the meta's `calls` slot is
/// outside the column (a bug in the test).
pub fn write_synthetic(meta_json: &str, threads: &[(u32, Vec<(u32, u64)>)]) -> Vec<u8> {
    let meta: Option<Meta> = serde_json::from_str(meta_json).ok();
    let n_points = meta.as_ref().map_or(0, |m| m.points.len() as u32);
    let calls_slot = meta
        .as_ref()
        .and_then(|m| m.metrics.iter().find(|x| x.name == Metric::Calls.name())?.slot)
        .unwrap_or(SLOT_CALLS);

    let layout = FileLayout::new(FileShape {
        n_points,
        n_metrics: N_METRICS,
        n_counter_slots: N_COUNTER_SLOTS,
        ctl_len: ctl_len(n_points),
        meta_len: meta_json.len() as u64,
        obj_buckets: SYNTHETIC_OBJ_BUCKETS,
        obj_cap: SYNTHETIC_OBJ_CAP,
    });
    let n_columns = threads.len() as u32;
    let mut capacity = SYNTHETIC_INITIAL_COLUMNS;
    while capacity < n_columns {
        capacity *= 2;
    }
    let pid = threads.first().map_or(SYNTHETIC_PID, |t| t.0);

    let mut out = vec![0u8; layout.file_len(capacity) as usize];
    let mut h = FileHeader {
        magic: FILE_MAGIC,
        version: FILE_VERSION,
        header_size: size_of::<FileHeader>() as u32,
        pid,
        ppid: 1,
        flags: FLAG_TID_KEY_VERIFIED,
        n_columns,
        start_realtime_ns: SYNTHETIC_REALTIME_NS,
        start_monotonic_ns: SYNTHETIC_MONOTONIC_NS,
        tid_offset: GLIBC_TID_OFFSET,
        start_tsc: SYNTHETIC_START_TSC,
        ..FileHeader::default()
    };
    layout.apply(&mut h, capacity);
    h.write_to(&mut out, 0).expect("the header fits in the file");
    for point in 0..n_points {
        out[(layout.ctl_offset + gate_offset(point)) as usize] = ((1u32 << N_METRICS) - 1) as u8;
    }
    let meta_at = layout.meta_offset as usize;
    out[meta_at..meta_at + meta_json.len()].copy_from_slice(meta_json.as_bytes());

    for (i, (tid, counts)) in threads.iter().enumerate() {
        let i = i as u32;
        let range = h.column_range(i);
        let col = &mut out[range.clone()];
        let c = ColumnHeader {
            self_addr: SYNTHETIC_MAP_BASE + range.start as u64,
            owner_tp: SYNTHETIC_MAP_BASE - (i as u64 + 1) * 0x10_0000,
            owner_key: *tid,
            tid: *tid,
            index: i,
            state: COLUMN_LIVE,
            pid,
            first_point: counts.first().map_or(u32::MAX, |&(p, _)| p),
            registered_monotonic_ns: SYNTHETIC_MONOTONIC_NS + (i as u64 + 1) * 1000,
            state_object: u32::MAX,
            ..ColumnHeader::default()
        };
        c.write_to(col, 0).expect("the column header fits in the column");
        for &(point, calls) in counts {
            assert!(point < n_points, "write_synthetic: thread {tid} names point {point} of {n_points}");
            assert!(calls_slot < N_COUNTER_SLOTS, "write_synthetic: calls slot {calls_slot} out of range");
            let off = counter_offset(n_points, calls_slot, point) as usize;
            let old = u64::read_from(col, off).expect("the counter lies in the column");
            (old + calls).write_to(col, off).expect("the counter lies in the column");
        }
    }
    out
}

/// Change the header of a valid profile file in place.
///
/// # Panics
/// If `file` does not start with a valid header.
pub fn patch_header(file: &mut [u8], f: impl FnOnce(&mut FileHeader)) {
    let mut h = FileHeader::parse(file, file.len() as u64).expect("patch_header: not a valid profile");
    f(&mut h);
    h.write_to(file, 0).expect("patch_header: the header fits");
}

/// Change the header of column `i` of a valid profile file in place.
///
/// # Panics
/// If `file` is not a valid profile or has no column `i`.
pub fn patch_column(file: &mut [u8], i: u32, f: impl FnOnce(&mut ColumnHeader)) {
    let h = FileHeader::parse(file, file.len() as u64).expect("patch_column: not a valid profile");
    assert!(i < h.capacity_columns, "patch_column: no column {i}");
    let col = &mut file[h.column_range(i)];
    let mut c = ColumnHeader::parse(col).expect("patch_column: column too small");
    f(&mut c);
    c.write_to(col, 0).expect("patch_column: the column header fits");
}

/// Write entry `i` of the sync-object table of a valid profile file and raise `n_objects`
/// to at least `i + 1`.
///
/// # Panics
/// If `file` is not a valid profile or `i` is outside its table.
pub fn put_object(file: &mut [u8], i: u32, o: &SyncObject) {
    let h = FileHeader::parse(file, file.len() as u64).expect("put_object: not a valid profile");
    assert!(i < h.obj_cap, "put_object: the table has {} entries, no {i}", h.obj_cap);
    o.write_to(file, h.object_offset(i) as usize).expect("put_object: the table lies in the file");
    patch_header(file, |h| h.n_objects = h.n_objects.max(i + 1));
}

/// Write entry `slot` of the wait table of column `col`.
///
/// # Panics
/// If `file` is not a valid profile, has no column `col` or `slot` is not below `WAIT_CAP`.
pub fn put_wait(file: &mut [u8], col: u32, slot: u32, w: &WaitEntry) {
    let h = FileHeader::parse(file, file.len() as u64).expect("put_wait: not a valid profile");
    assert!(col < h.capacity_columns && slot < WAIT_CAP, "put_wait: no column {col} or slot {slot}");
    w.write_to(&mut file[h.column_range(col)], wait_offset(slot) as usize).expect("put_wait: the entry fits");
}

/// Write transition number `n` into the ring of column `col` (at `n % RING_CAP`) and raise
/// the column's `ring_head` to at least `n + 1`.
///
/// # Panics
/// If `file` is not a valid profile or has no column `col`.
pub fn put_transition(file: &mut [u8], col: u32, n: u64, t: &Transition) {
    let h = FileHeader::parse(file, file.len() as u64).expect("put_transition: not a valid profile");
    assert!(col < h.capacity_columns, "put_transition: no column {col}");
    let i = (n % RING_CAP as u64) as u32;
    t.write_to(&mut file[h.column_range(col)], ring_offset(i) as usize).expect("put_transition: the entry fits");
    patch_column(file, col, |c| c.ring_head = c.ring_head.max(n + 1));
}

/// One node of a synthetic calling-context tree (`parent`: an index of an earlier node).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyntheticNode {
    pub parent: Option<u32>,
    pub point: u32,
    pub calls: u64,
    pub cpu: u64,
    pub wall: u64,
}

/// Write `nodes` as the calling-context tree of column `col` (as the runtime lays it out:
/// node `k` at `cct_nodes_offset + k × CctNode`, `cct_nodes` = their number) and set the
/// column's `cct_lost`. The hash index is left empty (readers do not use it).
///
/// # Panics
/// If `file` is not a valid profile, has no column `col`, or the nodes do not fit.
pub fn put_calltree(file: &mut [u8], col: u32, nodes: &[SyntheticNode], lost: u64) {
    let h = FileHeader::parse(file, file.len() as u64).expect("put_calltree: not a valid profile");
    assert!(
        col < h.capacity_columns && nodes.len() <= CCT_CAP as usize,
        "put_calltree: no column {col} or too many nodes"
    );
    let base = cct_nodes_offset(h.n_points, h.n_counter_slots) as usize;
    let column = &mut file[h.column_range(col)];
    for (k, n) in nodes.iter().enumerate() {
        let node = CctNode {
            parent: n.parent.map_or(0, |p| p + 1),
            point: n.point,
            calls: n.calls,
            cpu_ticks: n.cpu,
            wall_ticks: n.wall,
        };
        node.write_to(column, base + k * size_of::<CctNode>()).expect("put_calltree: the node fits");
    }
    patch_column(file, col, |c| {
        c.cct_nodes = nodes.len() as u32;
        c.cct_lost = lost;
        c.cct_mask = 2 * CCT_CAP - 1;
    });
}

/// A thread of [`write_synthetic_with_trees`]: `(tid, [(point, calls)], tree, calltree_lost)`.
pub type SyntheticThread = (u32, Vec<(u32, u64)>, Vec<SyntheticNode>, u64);

/// [`write_synthetic`] for threads `(tid, counts, tree, lost)`, each with its tree.
pub fn write_synthetic_with_trees(meta_json: &str, threads: &[SyntheticThread]) -> Vec<u8> {
    let flat: Vec<(u32, Vec<(u32, u64)>)> = threads.iter().map(|t| (t.0, t.1.clone())).collect();
    let mut out = write_synthetic(meta_json, &flat);
    for (i, t) in threads.iter().enumerate() {
        put_calltree(&mut out, i as u32, &t.2, t.3);
    }
    out
}
