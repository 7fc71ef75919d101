//! Per-item work spread over the machine's cores, results in input order.
//!
//! The passes that do the same independent work for every function or every piece of code
//! (the CFI of generated code, decoding functions) run it here. The items are cut into one
//! contiguous chunk per thread ([`std::thread::scope`]), each thread keeps its own scratch
//! state, and the results are concatenated in item order, so the output does not depend on
//! the number of threads or on scheduling: a rewrite is byte-identical on any machine.

/// Below this many items the work runs on the calling thread (spawning costs more).
const MIN_PER_THREAD: usize = 512;

/// How many threads to use for `n` items.
fn threads_for(n: usize) -> usize {
    let cores = std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1).min(16);
    cores.min(n / MIN_PER_THREAD).max(1)
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
    let chunk = items.len().div_ceil(threads);
    let (init, f) = (&init, &f);
    std::thread::scope(|scope| {
        let run = move |part: &[T]| {
            let mut s = init();
            part.iter().map(|x| f(&mut s, x)).collect::<Vec<R>>()
        };
        // A thread the system refuses to start leaves its chunk to this thread.
        let handles: Vec<_> = items
            .chunks(chunk)
            .skip(1)
            .map(|part| (part, std::thread::Builder::new().spawn_scoped(scope, move || run(part)).ok()))
            .collect();
        let mut out = run(&items[..chunk.min(items.len())]);
        out.reserve(items.len() - out.len());
        for (part, h) in handles {
            match h.map(|h| h.join()) {
                Some(Ok(done)) => out.extend(done),
                Some(Err(panic)) => std::panic::resume_unwind(panic),
                None => out.extend(run(part)),
            }
        }
        out
    })
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
        // Each thread's scratch counts its own items only: the counts restart at chunk starts.
        let restarts = out.iter().filter(|&&(_, seen)| seen == 1).count();
        assert_eq!(restarts, threads_for(5000));
    }

    #[test]
    fn few_items_run_on_the_calling_thread() {
        let me = std::thread::current().id();
        let out = map(&[1, 2, 3], || (), |_, &x| (x, std::thread::current().id() == me));
        assert_eq!(out, vec![(1, true), (2, true), (3, true)]);
    }
}
