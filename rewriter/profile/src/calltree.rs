//! Calling-context trees (DESIGN D16): the model every report view and exporter shares.
//!
//! A thread's tree is a vector of [`CallNode`]s in which a node's parent always comes
//! before it (`parent < index`), so one forward pass can aggregate and one backward pass can
//! sum children. Inclusive figures are what the runtime measured per node; self figures are
//! inclusive minus the children's inclusive (never below zero).
//!
//! A profile written by a runtime without call paths (or with the `call_paths` metric off)
//! has an empty tree; [`paths`] then falls back to one single-frame path per function, so an
//! exporter or view written against paths works on every profile.

use serde::{Deserialize, Serialize};

use crate::profile::ThreadProfile;

/// One node of a thread's calling-context tree: a point reached through one chain of callers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallNode {
    /// Index of the parent node in the thread's tree; `None` for a root (a frame entered with
    /// no instrumented caller on the shadow stack).
    pub parent: Option<u32>,
    /// Point id (an index into `Profile::points`) of the function this node enters.
    pub point: u32,
    /// Exact calls through this path.
    pub calls: u64,
    /// Inclusive CPU time, TSC ticks (0 when CPU time was off).
    pub cpu_ticks: u64,
    /// Inclusive wall time, TSC ticks (0 when wall time was off).
    pub wall_ticks: u64,
    /// Thread-library wrapper events (fast-path mutex locks and unlocks) that ran while this
    /// node's frame was the innermost one: its own, not its callees' (wrapcomp, D21).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wrap_events: u64,
    /// Wrapper events off the fast path (contended or first locks, condition waits — two
    /// each —, rwlocks, semaphores, join, create, …) that ran while this node's frame was the
    /// innermost one (slowwrap, D21).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slow_wrap_events: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One call path with its figures, root first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathSample {
    /// Point ids from the root to the leaf.
    pub stack: Vec<u32>,
    /// Calls of the leaf through this path.
    pub calls: u64,
    /// Inclusive CPU ticks of the leaf through this path.
    pub cpu_ticks: u64,
    /// Inclusive wall ticks of the leaf through this path.
    pub wall_ticks: u64,
    /// CPU ticks spent in the leaf itself (inclusive minus its children's inclusive).
    pub self_cpu_ticks: u64,
    /// Wall ticks spent in the leaf itself.
    pub self_wall_ticks: u64,
}

/// Self figures per node: (self CPU ticks, self wall ticks), index-aligned with `tree`.
pub fn self_ticks(tree: &[CallNode]) -> Vec<(u64, u64)> {
    let mut child = vec![(0u64, 0u64); tree.len()];
    for n in tree {
        if let Some(p) = n.parent.map(|p| p as usize).filter(|&p| p < tree.len()) {
            child[p].0 = child[p].0.saturating_add(n.cpu_ticks);
            child[p].1 = child[p].1.saturating_add(n.wall_ticks);
        }
    }
    tree.iter().zip(child).map(|(n, (c, w))| (n.cpu_ticks.saturating_sub(c), n.wall_ticks.saturating_sub(w))).collect()
}

/// The point ids from the root to `node`, root first. A parent index that does not come
/// before its child (a corrupt tree) ends the chain instead of looping.
pub fn stack_of(tree: &[CallNode], node: usize) -> Vec<u32> {
    let mut stack = Vec::new();
    let mut at = Some(node);
    while let Some(i) = at.filter(|&i| i < tree.len()) {
        stack.push(tree[i].point);
        at = tree[i].parent.map(|p| p as usize).filter(|&p| p < i);
    }
    stack.reverse();
    stack
}

/// The thread's call paths: one per node of its tree (plus a single-frame path with the calls
/// of a function that no node holds), or, when the thread has no tree, one single-frame path
/// per function from the flat counts and times (self = inclusive there, since nothing is
/// known about callees).
pub fn paths(t: &ThreadProfile) -> Vec<PathSample> {
    if !t.calltree.is_empty() {
        let selfs = self_ticks(&t.calltree);
        let mut out: Vec<PathSample> = t
            .calltree
            .iter()
            .enumerate()
            .map(|(i, n)| PathSample {
                stack: stack_of(&t.calltree, i),
                calls: n.calls,
                cpu_ticks: n.cpu_ticks,
                wall_ticks: n.wall_ticks,
                self_cpu_ticks: selfs[i].0,
                self_wall_ticks: selfs[i].1,
            })
            .collect();
        // Calls no node holds (functions counted but not timed, thread-library wrappers,
        // nodes lost to a full tree): single-frame paths, so every view sums to the flat calls.
        let mut in_tree: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
        for n in &t.calltree {
            *in_tree.entry(n.point).or_default() += n.calls;
        }
        for &(p, calls) in &t.counts {
            let rest = calls.saturating_sub(in_tree.get(&p).copied().unwrap_or(0));
            if rest > 0 {
                out.push(PathSample { stack: vec![p], calls: rest, ..Default::default() });
            }
        }
        return out;
    }
    let mut out: Vec<PathSample> =
        t.counts.iter().map(|&(p, calls)| PathSample { stack: vec![p], calls, ..Default::default() }).collect();
    for &(p, cpu, wall) in &t.times {
        let i = match out.iter().position(|s| s.stack[0] == p) {
            Some(i) => i,
            None => {
                out.push(PathSample { stack: vec![p], ..Default::default() });
                out.len() - 1
            }
        };
        let s = &mut out[i];
        (s.cpu_ticks, s.wall_ticks, s.self_cpu_ticks, s.self_wall_ticks) = (cpu, wall, cpu, wall);
    }
    out
}

/// Subtract the instrumentation's cost from a thread's tree and flat times (D21): node `i`
/// loses `calls × inner` (its own events, inside its span) plus, per call of each of its
/// descendants, that descendant's `pair` (each nested timed call, whole); `cost(point)` is
/// (inner, pair) of a point's events; a point's flat time (`times`: point, CPU,
/// wall, outermost activations only) loses what its outermost nodes lost. Costs are in ticks
/// × [`stint_layout::CALIB_SCALE`]. A time that would go below zero is clamped at 0, and a
/// node's time below its children's compensated sum is raised to it (never above what it
/// measured); returns how many times were clamped.
pub fn compensate(tree: &mut [CallNode], times: &mut [(u32, u64, u64)], cost: impl Fn(u32) -> (u64, u64)) -> u64 {
    let mut clamped = 0u64;
    // Subtract `by` ticks; whether the time had less than that (clamped at 0).
    let sub = |v: &mut u64, by: u64| -> bool {
        if *v == 0 || by == 0 {
            return false;
        }
        let short = by > *v;
        *v = v.saturating_sub(by);
        short
    };
    let n = tree.len();
    let parent = |tree: &[CallNode], i: usize| tree[i].parent.map(|p| p as usize).filter(|&p| p < i);
    // What the calls of each node's descendants cost it: children come after their parents.
    let mut nested = vec![0u64; n];
    for i in (0..n).rev() {
        if let Some(p) = parent(tree, i) {
            let own = tree[i].calls.saturating_mul(cost(tree[i].point).1);
            nested[p] = nested[p].saturating_add(nested[i]).saturating_add(own);
        }
    }
    let measured: Vec<(u64, u64)> = tree.iter().map(|c| (c.cpu_ticks, c.wall_ticks)).collect();
    for i in 0..n {
        let over = tree[i].calls.saturating_mul(cost(tree[i].point).0).saturating_add(nested[i]);
        let over = over / stint_layout::CALIB_SCALE;
        clamped += u64::from(sub(&mut tree[i].cpu_ticks, over)) + u64::from(sub(&mut tree[i].wall_ticks, over));
    }
    // A calibrated cost a little above what the program's calls really cost must not leave a
    // caller with less time than its callees (qsort shorter than its callback): a node keeps
    // at least its children's compensated sum, never more than it measured.
    let mut below = vec![(0u64, 0u64); n];
    for i in (0..n).rev() {
        let (cpu_floor, wall_floor) = below[i];
        let (cpu, wall) = measured[i];
        for (v, floor, m) in [(&mut tree[i].cpu_ticks, cpu_floor, cpu), (&mut tree[i].wall_ticks, wall_floor, wall)] {
            let floor = floor.min(m);
            if *v < floor {
                *v = floor;
                clamped += 1;
            }
        }
        if let Some(p) = parent(tree, i) {
            below[p].0 = below[p].0.saturating_add(tree[i].cpu_ticks);
            below[p].1 = below[p].1.saturating_add(tree[i].wall_ticks);
        }
    }
    // A point's flat time loses what its outermost nodes lost.
    let lost: Vec<(u64, u64)> =
        (0..n).map(|i| (measured[i].0 - tree[i].cpu_ticks, measured[i].1 - tree[i].wall_ticks)).collect();
    let by_point = outermost_loss_by_point(tree, &lost);
    for (point, cpu, wall) in times.iter_mut() {
        let (by_cpu, by_wall) = by_point.get(point).copied().unwrap_or((0, 0));
        clamped += u64::from(sub(cpu, by_cpu)) + u64::from(sub(wall, by_wall));
    }
    clamped
}

/// Subtract the calibrated cost of the thread-library wrapper events (wrapcomp, slowwrap,
/// D21): each node loses `cost` (ticks × [`stint_layout::CALIB_SCALE`] per event) for every
/// fast-path wrapper event and `slow_cost` for every slow-path one that ran inside its
/// activations, its own ([`CallNode::wrap_events`], [`CallNode::slow_wrap_events`]) and its
/// descendants'; a point's flat time (`times`, outermost activations) loses what its
/// outermost nodes lost. CPU and wall alike (the wrapper's instructions take both). A time
/// that would go below zero is clamped at 0; returns how many were. A step of its own, run
/// before [`compensate`] (which then works on what is left).
pub fn subtract_wrappers(tree: &mut [CallNode], times: &mut [(u32, u64, u64)], cost: u64, slow_cost: u64) -> u64 {
    let n = tree.len();
    let own = |c: &CallNode| c.wrap_events as u128 * cost as u128 + c.slow_wrap_events as u128 * slow_cost as u128;
    if tree.iter().all(|c| own(c) == 0) {
        return 0;
    }
    let parent = |tree: &[CallNode], i: usize| tree[i].parent.map(|p| p as usize).filter(|&p| p < i);
    // The events' cost inside each node's activations: children come after their parents.
    let mut inside: Vec<u128> = tree.iter().map(own).collect();
    for i in (0..n).rev() {
        if let Some(p) = parent(tree, i) {
            inside[p] = inside[p].saturating_add(inside[i]);
        }
    }
    let mut clamped = 0u64;
    let mut lost = vec![(0u64, 0u64); n];
    for i in 0..n {
        let by = (inside[i] / stint_layout::CALIB_SCALE as u128).min(u64::MAX as u128) as u64;
        let node = &mut tree[i];
        let (lost_cpu, lost_wall) = &mut lost[i];
        for (v, l) in [(&mut node.cpu_ticks, lost_cpu), (&mut node.wall_ticks, lost_wall)] {
            if *v == 0 || by == 0 {
                continue;
            }
            clamped += u64::from(by > *v);
            *l = by.min(*v);
            *v -= *l;
        }
    }
    let by_point = outermost_loss_by_point(tree, &lost);
    for (point, cpu, wall) in times.iter_mut() {
        let (by_cpu, by_wall) = by_point.get(point).copied().unwrap_or((0, 0));
        clamped += u64::from(by_cpu > *cpu && *cpu != 0) + u64::from(by_wall > *wall && *wall != 0);
        *cpu = cpu.saturating_sub(by_cpu);
        *wall = wall.saturating_sub(by_wall);
    }
    clamped
}

/// What each point's flat time (outermost activations only) loses: the sum of `lost[i]`
/// (CPU, wall) over its outermost nodes. A recursive activation is inside an outer one of
/// the same function, whose flat time already holds it.
fn outermost_loss_by_point(tree: &[CallNode], lost: &[(u64, u64)]) -> std::collections::BTreeMap<u32, (u64, u64)> {
    let parent = |i: usize| tree[i].parent.map(|p| p as usize).filter(|&p| p < i);
    let mut by_point: std::collections::BTreeMap<u32, (u64, u64)> = std::collections::BTreeMap::new();
    for (i, &(cpu, wall)) in lost.iter().enumerate() {
        let mut at = parent(i);
        let mut outermost = true;
        while let Some(a) = at {
            if tree[a].point == tree[i].point {
                outermost = false;
                break;
            }
            at = parent(a);
        }
        if outermost {
            let e = by_point.entry(tree[i].point).or_default();
            e.0 = e.0.saturating_add(cpu);
            e.1 = e.1.saturating_add(wall);
        }
    }
    by_point
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(parent: Option<u32>, point: u32, calls: u64, cpu: u64, wall: u64) -> CallNode {
        CallNode { parent, point, calls, cpu_ticks: cpu, wall_ticks: wall, ..CallNode::default() }
    }

    #[test]
    fn self_is_inclusive_minus_children() {
        // main(0) → a(1) → b(2); main → c(3) → b(2)
        let tree = vec![
            node(None, 0, 1, 100, 200),
            node(Some(0), 1, 1, 40, 50),
            node(Some(1), 2, 3, 30, 30),
            node(Some(0), 3, 1, 50, 60),
            node(Some(3), 2, 5, 45, 70), // wall above the parent's: clamps to 0
        ];
        assert_eq!(self_ticks(&tree), vec![(10, 90), (10, 20), (30, 30), (5, 0), (45, 70)]);
        assert_eq!(stack_of(&tree, 4), vec![0, 3, 2]);
    }

    #[test]
    fn compensation_takes_each_nested_call_whole_and_the_own_share() {
        const S: u64 = stint_layout::CALIB_SCALE;
        // main(0) → loop(1) → tiny(2) × 1000; main → rec(3) → rec(3) (recursion).
        let mut tree = vec![
            node(None, 0, 1, 100_000, 200_000),
            node(Some(0), 1, 1, 90_000, 90_000),
            node(Some(1), 2, 1000, 30_000, 30_000),
            node(Some(0), 3, 1, 500, 500),
            node(Some(3), 3, 1, 200, 0),
        ];
        let mut times = vec![(0, 100_000, 200_000), (1, 90_000, 90_000), (2, 30_000, 30_000), (3, 500, 500)];
        // inner 10 ticks, pair 50 ticks per event.
        let clamped = compensate(&mut tree, &mut times, |_| (10 * S, 50 * S));
        // main: own 10 + 1003 nested calls (loop, 1000 tiny, 2 rec) × 50.
        assert_eq!(tree[0].cpu_ticks, 100_000 - 10 - 1003 * 50);
        // loop: own 10 + 1000 × 50; tiny: 1000 × 10.
        assert_eq!((tree[1].cpu_ticks, tree[2].cpu_ticks), (90_000 - 10 - 50_000, 30_000 - 10_000));
        // rec: 10 + 50 for the inner rec; the inner one has 0 wall: stays 0, not clamped.
        assert_eq!((tree[3].cpu_ticks, tree[4].cpu_ticks, tree[4].wall_ticks), (500 - 60, 190, 0));
        // Flat: the outermost rec node only; main's and loop's as their nodes.
        assert_eq!(times, vec![(0, 49_840, 149_840), (1, 39_990, 39_990), (2, 20_000, 20_000), (3, 440, 440)]);
        assert_eq!(clamped, 0);
        // A cost above the time: 0, counted (cpu and wall of the one node).
        let mut tree = vec![node(None, 0, 10, 50, 60)];
        assert_eq!(compensate(&mut tree, &mut [], |_| (10 * S, 0)), 2);
        assert_eq!((tree[0].cpu_ticks, tree[0].wall_ticks), (0, 0));
    }

    #[test]
    fn a_caller_keeps_at_least_its_callees_compensated_time() {
        const S: u64 = stint_layout::CALIB_SCALE;
        // qsort(1) → by_value(2) × 100, the calibrated pair (5 ticks) above what the calls
        // cost here: qsort would drop to 500, below its callback's 800.
        let mut tree = vec![node(None, 1, 10, 1000, 1000), node(Some(0), 2, 100, 900, 900)];
        let mut times = vec![(1, 1000, 1000), (2, 900, 900)];
        let clamped = compensate(&mut tree, &mut times, |p| if p == 1 { (0, 0) } else { (S, 5 * S) });
        assert_eq!((tree[0].cpu_ticks, tree[0].wall_ticks, tree[1].cpu_ticks), (800, 800, 800));
        assert_eq!(times, vec![(1, 800, 800), (2, 800, 800)]);
        assert_eq!(clamped, 2, "qsort's cpu and wall raised to the callback's");
        // Never above what the caller measured (a raw parent below its child stays as it was).
        let mut tree = vec![node(None, 1, 1, 100, 100), node(Some(0), 2, 1, 150, 150)];
        compensate(&mut tree, &mut [], |_| (S, S));
        assert_eq!((tree[0].cpu_ticks, tree[1].cpu_ticks), (100, 149));
    }

    #[test]
    fn a_parent_after_its_child_ends_the_chain() {
        let tree = vec![node(Some(1), 0, 1, 0, 0), node(Some(0), 1, 1, 0, 0)];
        assert_eq!(stack_of(&tree, 1), vec![0, 1]);
        assert_eq!(stack_of(&tree, 0), vec![0]);
    }

    #[test]
    fn wrapper_events_cost_their_node_and_every_caller() {
        const S: u64 = stint_layout::CALIB_SCALE;
        // main(0) → work(1) (100 events) → leaf(2) (10 events); main → rec(3) → rec(3) (5 events).
        let mut tree = vec![
            node(None, 0, 1, 10_000, 20_000),
            node(Some(0), 1, 2, 5_000, 6_000),
            node(Some(1), 2, 4, 100, 15),
            node(Some(0), 3, 1, 900, 900),
            node(Some(3), 3, 1, 400, 400),
        ];
        tree[1].wrap_events = 100;
        tree[2].wrap_events = 10;
        tree[4].wrap_events = 5;
        let mut times = vec![(0, 10_000, 20_000), (1, 5_000, 6_000), (2, 100, 15), (3, 900, 900)];
        // 2 ticks per event.
        let clamped = subtract_wrappers(&mut tree, &mut times, 2 * S, 0);
        let cpu: Vec<u64> = tree.iter().map(|c| c.cpu_ticks).collect();
        // main: 115 events; work: 110; leaf: 10; rec: 5 each.
        assert_eq!(cpu, vec![10_000 - 230, 5_000 - 220, 100 - 20, 900 - 10, 400 - 10]);
        // leaf's wall (15) is below its 20: 0, counted once.
        assert_eq!(tree[2].wall_ticks, 0);
        assert_eq!(clamped, 1);
        // Flat: rec's outermost node only; leaf's wall lost only its 15.
        assert_eq!(times, vec![(0, 9_770, 19_770), (1, 4_780, 5_780), (2, 80, 0), (3, 890, 890)]);
        // No events, or no cost: nothing changes.
        let before = tree.clone();
        assert_eq!(subtract_wrappers(&mut tree, &mut times, 0, 0), 0);
        assert_eq!(tree, before);
    }

    #[test]
    fn slow_wrapper_events_cost_their_own_figure_beside_the_fast_ones() {
        const S: u64 = stint_layout::CALIB_SCALE;
        // main(0) → wait(1): 10 fast events, 4 slow ones (two condition waits); main's own: 1 slow.
        let mut tree = vec![node(None, 0, 1, 10_000, 50_000), node(Some(0), 1, 3, 2_000, 40_000)];
        tree[1].wrap_events = 10;
        tree[1].slow_wrap_events = 4;
        tree[0].slow_wrap_events = 1;
        let mut times = vec![(0, 10_000, 50_000), (1, 2_000, 40_000)];
        // 2 ticks per fast event, 30.5 per slow one (the scale keeps the half).
        let clamped = subtract_wrappers(&mut tree, &mut times, 2 * S, 30 * S + S / 2);
        // wait: 10 × 2 + 4 × 30.5 = 142; main: that + 30.5 = 172 (the half tick floored once).
        assert_eq!((tree[1].cpu_ticks, tree[1].wall_ticks), (2_000 - 142, 40_000 - 142));
        assert_eq!((tree[0].cpu_ticks, tree[0].wall_ticks), (10_000 - 172, 50_000 - 172));
        assert_eq!(times, vec![(0, 10_000 - 172, 50_000 - 172), (1, 2_000 - 142, 40_000 - 142)]);
        assert_eq!(clamped, 0);
        // Slow events alone, with no fast-path figure: still subtracted.
        let mut tree = vec![node(None, 0, 1, 100, 100)];
        tree[0].slow_wrap_events = 2;
        assert_eq!(subtract_wrappers(&mut tree, &mut [], 0, 10 * S), 0);
        assert_eq!(tree[0].cpu_ticks, 80);
    }
}
