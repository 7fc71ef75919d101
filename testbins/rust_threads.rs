//! rust_threads: std threads as a Rust program makes them (tests/it/gotwrap.rs). Rust's std
//! calls the thread library through the GOT (`call [rip+slot]`, no PLT): `pthread_create`,
//! `pthread_setname_np` (inside the new thread, from `thread::Builder::name`) and
//! `pthread_join`. Its `Mutex` and `Condvar` are futexes, not pthread objects: a contended
//! lock runs std's `Mutex::lock_contended`, a function of the program.
//!
//! main locks the queue's mutex, spawns WORKERS threads named `worker-<i>`, waits until
//! each has announced it is about to lock the queue, and holds the lock HOLD_MS more, so
//! every worker blocks in `lock_contended` for about that long. Then it queues JOBS jobs
//! and a stop mark per worker, unlocks, wakes the workers (a `Condvar`) and joins them.
//! Each job calls `job_step` STEPS times under the lock (so the lock stays contended). Every
//! job runs exactly once, so the total is fixed; which worker runs which job is not, and
//! only the total is printed.
//!
//! Counted functions (`#[no_mangle]`, never inlined):
//!     spawn_workers    1 call on main
//!     worker_loop      1 call on each worker
//!     job_step         JOBS * STEPS calls over all workers
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

const WORKERS: usize = 3;
const JOBS: u64 = 300;
const STEPS: u64 = 10;
const HOLD_MS: u64 = 200;

pub struct Queue {
    jobs: Mutex<VecDeque<Option<u64>>>,
    ready: Condvar,
}

/// Workers about to lock the queue for the first time.
static ARRIVED: AtomicUsize = AtomicUsize::new(0);

#[no_mangle]
#[inline(never)]
pub fn job_step(acc: u64, x: u64) -> u64 {
    std::hint::black_box(acc.wrapping_mul(31).wrapping_add(x))
}

#[no_mangle]
#[inline(never)]
pub fn worker_loop(q: &Queue) -> u64 {
    let mut sum = 0u64;
    ARRIVED.fetch_add(1, Ordering::SeqCst);
    let mut jobs = q.jobs.lock().unwrap();
    loop {
        let job = loop {
            match jobs.pop_front() {
                Some(j) => break j,
                None => jobs = q.ready.wait(jobs).unwrap(),
            }
        };
        let Some(j) = job else { return sum };
        // Held while it works: the other workers find the lock taken.
        let mut acc = j;
        for s in 0..STEPS {
            acc = job_step(acc, s);
        }
        drop(jobs);
        sum = sum.wrapping_add(acc % 1000);
        jobs = q.jobs.lock().unwrap();
    }
}

#[no_mangle]
#[inline(never)]
pub fn spawn_workers(q: &Arc<Queue>) -> Vec<thread::JoinHandle<u64>> {
    (0..WORKERS)
        .map(|i| {
            let q = Arc::clone(q);
            thread::Builder::new().name(format!("worker-{i}")).spawn(move || worker_loop(&q)).expect("spawn")
        })
        .collect()
}

fn main() {
    let q = Arc::new(Queue { jobs: Mutex::new(VecDeque::new()), ready: Condvar::new() });
    let mut jobs = q.jobs.lock().unwrap();
    let handles = spawn_workers(&q);
    while ARRIVED.load(Ordering::SeqCst) < WORKERS {
        thread::yield_now();
    }
    thread::sleep(Duration::from_millis(HOLD_MS));
    jobs.extend((0..JOBS).map(Some));
    jobs.extend((0..WORKERS).map(|_| None));
    drop(jobs);
    q.ready.notify_all();
    let total: u64 = handles.into_iter().map(|h| h.join().expect("join")).sum();
    println!("workers {WORKERS} jobs {JOBS} total {total}");
}
