//! Per-item work spread over the machine's cores, results in input order.
//!
//! The passes that do the same independent work for every function or every piece of code
//! (the CFI of generated code, decoding functions) run it here. The items are cut into
//! contiguous chunks, several per thread; each thread ([`std::thread::scope`]) takes the next
//! chunk not yet taken until none is left, so a thread whose items are cheap (import
//! trampolines after entry trampolines, small functions after large ones) takes more of
//! them instead of waiting for the other. Each thread keeps its own scratch state, and the
//! chunks' results are put back in item order, so the output depends neither on the number
//! of threads nor on scheduling: a rewrite is byte-identical on any machine. The scratch
//! state may only cache what an item's result would be without it.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Below this many items the work runs on the calling thread (spawning costs more).
const MIN_PER_THREAD: usize = 512;

/// Chunks per thread: enough for the threads to even out, few enough that taking one costs
/// nothing next to its items.
const CHUNKS_PER_THREAD: usize = 16;

/// Smallest chunk (a chunk's results are one allocation).
const MIN_CHUNK: usize = 32;

thread_local! {
    /// Threads the maps called on this thread use whatever the item count (0: by the
    /// machine). Tests set it to show that the output does not depend on it ([`with_threads`]).
    static FORCED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many threads to use for `n` items.
fn threads_for(n: usize) -> usize {
    match FORCED.with(|c| c.get()) {
        0 => {
            let cores = std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1).min(16);
            cores.min(n / MIN_PER_THREAD).max(1)
        }
        forced => forced.min(n).max(1),
    }
}

/// Run `f` with every [`map`] it calls on this thread using `threads` threads (down to one
/// per item), then go back to choosing by the machine.
#[cfg(test)]
pub(crate) fn with_threads<R>(threads: usize, f: impl FnOnce() -> R) -> R {
    let before = FORCED.with(|c| c.replace(threads));
    let out = f();
    FORCED.with(|c| c.set(before));
    out
}

/// `f(&mut scratch, item)` for every item, with one `scratch = init()` per thread; the
/// results in item order.
pub fn map<T, S, R, I, F>(items: &[T], init: I, f: F) -> Vec<R>
where
    T: Sync,
    R: Send,
    I: Fn() -> S + Sync,
    F: Fn(&mut S, &T) -> R + Sync,
{
    let threads = threads_for(items.len());
    if threads <= 1 {
        let mut s = init();
        return items.iter().map(|x| f(&mut s, x)).collect();
    }
    let chunk = items.len().div_ceil(threads * CHUNKS_PER_THREAD).max(MIN_CHUNK);
    let n_chunks = items.len().div_ceil(chunk);
    let next = AtomicUsize::new(0);
    let (init, f, next) = (&init, &f, &next);
    // Chunks taken in turn until none is left: (chunk number, its results).
    let work = move || {
        let mut s = init();
        let mut done: Vec<(usize, Vec<R>)> = Vec::new();
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            let start = k.saturating_mul(chunk);
            let Some(part) = items.get(start..items.len().min(start.saturating_add(chunk))) else { break };
            if part.is_empty() {
                break;
            }
            done.push((k, part.iter().map(|x| f(&mut s, x)).collect()));
        }
        done
    };
    let mut slots: Vec<Option<Vec<R>>> = (0..n_chunks).map(|_| None).collect();
    std::thread::scope(|scope| {
        // A thread the system refuses to start leaves its share to the others.
        let handles: Vec<_> =
            (1..threads).filter_map(|_| std::thread::Builder::new().spawn_scoped(scope, work).ok()).collect();
        let mut all = work();
        for h in handles {
            match h.join() {
                Ok(done) => all.extend(done),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        for (k, part) in all {
            slots[k] = Some(part);
        }
    });
    let mut out = Vec::with_capacity(items.len());
    for part in slots.into_iter().flatten() {
        out.extend(part);
    }
    out
}

/// `consume(item, produce(item))` for every item in item order on the calling thread, while
/// the other threads `produce` the results of the items after it (at most `ahead` items ahead
/// of the one consumed), in chunks taken in turn; the calling thread produces too whenever the
/// result it needs next is not there yet. For sequential work (`consume`) that needs per-item
/// work that does not depend on it (`produce`): the two overlap instead of alternating, and the
/// results, produced by whichever thread, are the same (`produce` must depend on its item
/// alone), consumed in the same order.
pub fn pipeline<T, R, P, C>(items: &[T], ahead: usize, produce: P, mut consume: C)
where
    T: Sync,
    R: Send,
    P: Fn(&T) -> R + Sync,
    C: FnMut(&T, R),
{
    let threads = threads_for(items.len());
    if threads <= 1 {
        for x in items {
            consume(x, produce(x));
        }
        return;
    }
    let chunk = (ahead / (threads * 4)).clamp(1, MIN_CHUNK * 2);
    let n_chunks = items.len().div_ceil(chunk);
    let ahead_chunks = ahead.div_ceil(chunk).max(threads);
    let part = |k: usize| &items[k * chunk..items.len().min((k + 1) * chunk)];
    let run = |k: usize| part(k).iter().map(&produce).collect::<Vec<R>>();
    struct State<R> {
        /// The next chunk no thread has taken.
        next: usize,
        /// Chunks consumed so far.
        consumed: usize,
        ready: Vec<Option<Vec<R>>>,
        /// A producing thread panicked: the calling thread produces what it misses.
        failed: bool,
    }
    let state = std::sync::Mutex::new(State {
        next: 0,
        consumed: 0,
        ready: (0..n_chunks).map(|_| None).collect(),
        failed: false,
    });
    let changed = std::sync::Condvar::new();
    let lock = || state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    /// Marks the state failed when its thread unwinds.
    struct Failed<'s, R>(&'s std::sync::Mutex<State<R>>, &'s std::sync::Condvar);
    impl<R> Drop for Failed<'_, R> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).failed = true;
                self.1.notify_all();
            }
        }
    }
    let (run, lock, changed) = (&run, &lock, &changed);
    // Take the next chunk no thread has taken, produce it unlocked and leave it ready; the
    // state locked again.
    let take_next = |mut s: std::sync::MutexGuard<'_, State<R>>| {
        let k = s.next;
        s.next += 1;
        drop(s);
        let out = run(k);
        let mut s = lock();
        s.ready[k] = Some(out);
        changed.notify_all();
        s
    };
    let take_next = &take_next;
    let helper = || {
        let _failed = Failed(&state, changed);
        let mut s = lock();
        loop {
            if s.next >= n_chunks {
                return;
            }
            if s.next >= s.consumed + ahead_chunks {
                s = changed.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            }
            s = take_next(s);
        }
    };
    std::thread::scope(|scope| {
        // A thread the system refuses to start leaves its share to the calling thread.
        let handles: Vec<_> =
            (1..threads).filter_map(|_| std::thread::Builder::new().spawn_scoped(scope, helper).ok()).collect();
        for c in 0..n_chunks {
            let out = {
                let mut s = lock();
                loop {
                    if let Some(out) = s.ready[c].take() {
                        s.consumed = c + 1;
                        changed.notify_all();
                        break out;
                    }
                    // Taken by no thread yet, or by one that failed: produce it here.
                    if s.failed || s.next <= c {
                        s.next = s.next.max(c + 1);
                        drop(s);
                        let out = run(c);
                        s = lock();
                        s.consumed = c + 1;
                        changed.notify_all();
                        break out;
                    }
                    // Being produced: take a later chunk meanwhile, or wait.
                    if s.next < n_chunks && s.next < c + ahead_chunks {
                        s = take_next(s);
                        continue;
                    }
                    s = changed.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            };
            for (x, r) in part(c).iter().zip(out) {
                consume(x, r);
            }
        }
        for h in handles {
            if let Err(panic) = h.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

/// Bytes a thread copies at least (below this the calling thread copies them all).
const MIN_COPY_PER_THREAD: usize = 1 << 21;

/// Copy `parts` (offset in `dst`, bytes) into `dst`, on every core when they are large: the
/// output file (10^8 bytes for a large program) is mostly the input and the pieces of code,
/// and the first write to each of its pages costs the kernel's zeroing of it too. The parts
/// are cut into runs of about equal bytes, each run copied by one thread into its own part of
/// `dst`. Parts out of `dst` panic, as indexing does; parts not in ascending order without
/// overlap are copied in order on the calling thread (a later part over an earlier one).
pub fn copy_parts(dst: &mut [u8], parts: &[(usize, &[u8])]) {
    let total: usize = parts.iter().map(|p| p.1.len()).sum();
    let ascending = parts.windows(2).all(|w| w[0].0 + w[0].1.len() <= w[1].0);
    let threads = match FORCED.with(|c| c.get()) {
        0 => std::thread::available_parallelism().map_or(1, |c| c.get()).min(16).min(total / MIN_COPY_PER_THREAD),
        forced => forced,
    };
    if !ascending || threads <= 1 || parts.len() < 2 {
        for &(at, bytes) in parts {
            dst[at..at + bytes.len()].copy_from_slice(bytes);
        }
        return;
    }
    // Runs of parts: the next run starts once this one has its share of the bytes.
    let share = total.div_ceil(threads);
    let mut runs: Vec<&[(usize, &[u8])]> = Vec::with_capacity(threads);
    let (mut first, mut bytes) = (0, 0);
    for (k, p) in parts.iter().enumerate() {
        bytes += p.1.len();
        if bytes >= share * (runs.len() + 1) || k + 1 == parts.len() {
            runs.push(&parts[first..=k]);
            first = k + 1;
        }
    }
    let (mut rest, mut rest_at) = (dst, 0usize);
    let mut mine = Vec::with_capacity(runs.len());
    for run in runs.into_iter().filter(|r| !r.is_empty()) {
        let (start, last) = (run[0].0, run[run.len() - 1]);
        let end = last.0 + last.1.len();
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(start - rest_at);
        let (part, tail) = tail.split_at_mut(end - start);
        (rest, rest_at) = (tail, end);
        mine.push((part, start, run));
    }
    // Runs taken in turn; a thread the system refuses to start leaves its runs to the others.
    let n = mine.len();
    let todo = std::sync::Mutex::new(mine);
    let work = || {
        while let Some((part, start, run)) = todo.lock().map_or(None, |mut v| v.pop()) {
            for &(at, bytes) in run {
                part[at - start..at - start + bytes.len()].copy_from_slice(bytes);
            }
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..n {
            let _ = std::thread::Builder::new().spawn_scoped(scope, work);
        }
        work();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_item_order_and_scratch_is_per_thread() {
        let items: Vec<u64> = (0..5000).collect();
        let out = map(
            &items,
            || 0u64,
            |seen, &x| {
                *seen += 1;
                (x * 3, *seen)
            },
        );
        assert_eq!(out.len(), 5000);
        assert!(out.iter().enumerate().all(|(i, &(v, _))| v == i as u64 * 3));
        // Each thread's scratch counts its own items only: as many first items as threads
        // that took a chunk (at least one, at most the threads started).
        let firsts = out.iter().filter(|&&(_, seen)| seen == 1).count();
        assert!((1..=threads_for(5000)).contains(&firsts), "{firsts} first items");
        // The counts add up to the items: no item is done twice or left out.
        assert_eq!(out.iter().map(|&(v, _)| v).sum::<u64>(), 3 * 4999 * 5000 / 2);
    }

    #[test]
    fn uneven_items_keep_their_order_on_four_threads() {
        let items: Vec<u64> = (0..3000).collect();
        // The first items cost the most: the threads take different numbers of chunks.
        let cost = |x: u64| if x < 500 { 2000 } else { 1 };
        let out = with_threads(4, || {
            map(
                &items,
                || (),
                |_, &x| {
                    let mut h = x;
                    for _ in 0..cost(x) {
                        h = h.wrapping_mul(6364136223846793005).wrapping_add(1);
                    }
                    (x, h)
                },
            )
        });
        let alone: Vec<(u64, u64)> = items
            .iter()
            .map(|&x| {
                let mut h = x;
                for _ in 0..cost(x) {
                    h = h.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                (x, h)
            })
            .collect();
        assert_eq!(out, alone);
    }

    #[test]
    fn a_pipeline_consumes_in_item_order_on_one_thread_and_on_four() {
        let items: Vec<u64> = (0..3000).collect();
        // Uneven costs: the threads produce out of turn.
        let produce = |&x: &u64| {
            let mut h = x;
            for _ in 0..if x % 700 < 100 { 3000 } else { 1 } {
                h = h.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            (x, h)
        };
        let me = std::thread::current().id();
        let consumed = |threads| {
            let mut seen = Vec::new();
            with_threads(threads, || {
                pipeline(&items, 100, produce, |&x, r| {
                    assert_eq!(std::thread::current().id(), me, "consumed on another thread");
                    seen.push((x, r))
                })
            });
            seen
        };
        let alone: Vec<(u64, (u64, u64))> = items.iter().map(|x| (*x, produce(x))).collect();
        assert_eq!(consumed(1), alone);
        assert_eq!(consumed(4), alone);
    }

    #[test]
    fn few_items_run_on_the_calling_thread() {
        let me = std::thread::current().id();
        let out = map(&[1, 2, 3], || (), |_, &x| (x, std::thread::current().id() == me));
        assert_eq!(out, vec![(1, true), (2, true), (3, true)]);
    }

    /// Parts copied by one thread, by four and on their own in order give the same bytes;
    /// parts out of order or overlapping are copied in order (the later one wins).
    #[test]
    fn copied_parts_are_the_bytes_copied_in_order() {
        let data: Vec<u8> = (0..(6usize << 20)).map(|i| (i * 7 + i / 4093) as u8).collect();
        let mut parts: Vec<(usize, &[u8])> = Vec::new();
        let mut at = 0;
        for (k, chunk) in data.chunks(300_001).enumerate() {
            parts.push((at, chunk));
            at += chunk.len() + k % 3; // gaps of 0, 1, 2 bytes stay zero
        }
        let len = at + 5;
        let serial = {
            let mut d = vec![0u8; len];
            for &(o, b) in &parts {
                d[o..o + b.len()].copy_from_slice(b);
            }
            d
        };
        for threads in [1, 2, 4] {
            let mut d = vec![0u8; len];
            with_threads(threads, || copy_parts(&mut d, &parts));
            assert!(d == serial, "{threads} threads");
        }
        let overlapping: Vec<(usize, &[u8])> = vec![(10, &data[..100]), (50, &data[1000..1100]), (0, &data[5..8])];
        let mut d = vec![0u8; 200];
        with_threads(4, || copy_parts(&mut d, &overlapping));
        let mut want = vec![0u8; 200];
        for &(o, b) in &overlapping {
            want[o..o + b.len()].copy_from_slice(b);
        }
        assert_eq!(d, want);
    }
}
