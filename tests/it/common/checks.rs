//! One `#[test]` per (program, variant, check) over one run of each (program, variant).
//!
//! Running a test program (build, rewrite, three runs, the report) takes seconds, and a
//! program's checks are many independent facts about the same run. So the run happens once
//! per test process, in whichever of its check tests comes first ([`cached_run`]), and each
//! check is its own `#[test]` that reads the cached outcome: a failure names the program,
//! the variant and the check, and one failing check hides none of the others.
//!
//! A program's checks live in one function over the run; it marks where each check begins
//! ([`Findings::section`]) and records failures instead of panicking. Every check test runs
//! that function (microseconds) and fails only on the failures of its own section
//! ([`Findings::verdict`]). The list of sections the tests name and the sections the
//! function enters must agree, so a check can neither be left out of the tests nor named
//! in them without existing.
//!
//! If the run itself failed (a build, the rewrite, a missing profile), every check of it
//! fails with the run's error.

use std::collections::HashMap;
use std::hash::Hash;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock, TryLockError};

/// The runs of one module, by key: each slot is empty until its run is made, and locked
/// while it is being made.
pub type RunCache<K, T> = OnceLock<Mutex<HashMap<K, Slot<T>>>>;

/// The outcome of one run, once made: the value, or the panic message of the run.
pub type Slot<T> = Arc<Mutex<Option<Result<Arc<T>, String>>>>;

fn slot<K: Eq + Hash + Clone, T>(cache: &'static RunCache<K, T>, key: &K) -> Slot<T> {
    let mut map = cache.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    map.entry(key.clone()).or_default().clone()
}

/// Make a run, keeping a panic as its message.
fn make<T>(run: impl FnOnce() -> T) -> Result<Arc<T>, String> {
    catch_unwind(AssertUnwindSafe(run)).map(Arc::new).map_err(panic_text)
}

/// The outcome of `run` for `key`, made once per process (by the first caller; the others
/// wait for it). A run that panics is kept as its panic message, and every caller fails
/// with it, naming `what`.
pub fn cached_run<K, T>(cache: &'static RunCache<K, T>, key: K, what: &str, run: impl FnOnce() -> T) -> Arc<T>
where
    K: Eq + Hash + Clone,
{
    cached_run_helping(cache, key, what, run, &[], |_| unreachable!("nothing to help with"))
}

/// [`cached_run`], but while another thread makes the run of `key`, make the runs of
/// `others` not yet started (with `run_other`) instead of waiting. The harness runs a
/// program's check tests one after another (they sort together), so without this the
/// test threads would mostly wait for the same run.
pub fn cached_run_helping<K, T>(
    cache: &'static RunCache<K, T>,
    key: K,
    what: &str,
    run: impl FnOnce() -> T,
    others: &[K],
    run_other: impl Fn(&K) -> T,
) -> Arc<T>
where
    K: Eq + Hash + Clone,
{
    let mine = slot(cache, &key);
    let outcome = loop {
        match mine.try_lock() {
            Ok(mut g) => break g.get_or_insert_with(|| make(run)).clone(),
            Err(TryLockError::Poisoned(e)) => break e.into_inner().get_or_insert_with(|| make(run)).clone(),
            Err(TryLockError::WouldBlock) => {}
        }
        let helped = others.iter().filter(|k| **k != key).any(|k| {
            let other = slot(cache, k);
            let Ok(mut g) = other.try_lock() else { return false };
            if g.is_some() {
                return false;
            }
            *g = Some(make(|| run_other(k)));
            true
        });
        if !helped {
            let mut g = mine.lock().unwrap_or_else(|e| e.into_inner());
            break g.get_or_insert_with(|| make(run)).clone();
        }
    };
    match outcome {
        Ok(t) => t,
        Err(e) => panic!("{what}: the run failed, so this check cannot be made:\n{e}"),
    }
}

/// The message of a panic payload.
fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    match (p.downcast_ref::<String>(), p.downcast_ref::<&str>()) {
        (Some(s), _) => s.clone(),
        (None, Some(s)) => s.to_string(),
        (None, None) => "(a panic without a message)".into(),
    }
}

/// The failures of a program's checks, each under the section (check) it was found in.
#[derive(Debug, Default)]
pub struct Findings {
    /// The section failures are recorded under now.
    current: String,
    /// Sections entered, in order.
    seen: Vec<String>,
    /// (section, message), without repeats.
    bad: Vec<(String, String)>,
}

impl Findings {
    /// Findings that start in section `first`.
    pub fn new(first: &str) -> Findings {
        let mut f = Findings::default();
        f.section(first);
        f
    }

    /// From here on, failures belong to the check `name`.
    pub fn section(&mut self, name: &str) {
        self.current = name.to_string();
        if !self.seen.iter().any(|s| s == name) {
            self.seen.push(name.to_string());
        }
    }

    /// Record a failure of the current check.
    pub fn fail(&mut self, msg: String) {
        let entry = (self.current.clone(), msg);
        if !self.bad.contains(&entry) {
            self.bad.push(entry);
        }
    }

    /// Whether nothing failed, in any section.
    pub fn all_passed(&self) -> bool {
        self.bad.is_empty()
    }

    /// Fail the test of check `section` if that check failed; `listed` are the checks the
    /// tests name for this program, `ctx` names the run, `detail` is shown under a failure
    /// (the report, the side file). Fails too if the checks the function entered and the
    /// listed ones differ, or if the check was never reached because an earlier one
    /// stopped the function (a thread missing from the report).
    pub fn verdict(&self, ctx: &str, section: &str, listed: &[&str], detail: impl FnOnce() -> String) {
        let unlisted: Vec<&String> = self.seen.iter().filter(|s| !listed.contains(&s.as_str())).collect();
        assert!(unlisted.is_empty(), "{ctx}: checks {unlisted:?} have no #[test]; add them to the test list");
        if !self.seen.iter().any(|s| s == section) {
            let all: Vec<String> = self.bad.iter().map(|(s, m)| format!("[{s}] {m}")).collect();
            assert!(
                !all.is_empty(),
                "{ctx}: the check function has no check {section:?} (it has {:?}); fix the test list",
                self.seen
            );
            panic!(
                "{ctx}: check {section} was not reached; the checks stopped after these failures:\n  - {}\n{}",
                all.join("\n  - "),
                detail()
            );
        }
        let mine: Vec<&str> = self.bad.iter().filter(|(s, _)| s == section).map(|(_, m)| m.as_str()).collect();
        if mine.is_empty() {
            return;
        }
        const SHOWN: usize = 80;
        let mut list = mine[..mine.len().min(SHOWN)].join("\n  - ");
        if mine.len() > SHOWN {
            list += &format!("\n  ... and {} more", mine.len() - SHOWN);
        }
        panic!("{ctx}: {section}: {} check(s) failed:\n  - {list}\n{}", mine.len(), detail());
    }
}

/// Needs no program: the verdicts and the cache do what the module doc says.
mod tests {
    use super::*;

    /// The panic message of `f`, or None if it returns.
    fn panics(f: impl FnOnce()) -> Option<String> {
        catch_unwind(AssertUnwindSafe(f)).err().map(panic_text)
    }

    fn findings() -> Findings {
        let mut f = Findings::new("a");
        f.section("b");
        f.fail("b is wrong".into());
        f.fail("b is wrong".into());
        f.section("c");
        f
    }

    #[test]
    fn a_failure_fails_only_its_check() {
        let f = findings();
        let listed = ["a", "b", "c"];
        assert_eq!(panics(|| f.verdict("prog", "a", &listed, String::new)), None);
        assert_eq!(panics(|| f.verdict("prog", "c", &listed, String::new)), None);
        let msg = panics(|| f.verdict("prog", "b", &listed, || "DETAIL".into())).expect("check b fails");
        assert!(msg.contains("prog: b: 1 check(s) failed") && msg.contains("b is wrong"), "{msg}");
        assert!(msg.contains("DETAIL"), "{msg}");
    }

    #[test]
    fn the_test_list_and_the_checks_agree() {
        let f = findings();
        let msg = panics(|| f.verdict("prog", "a", &["a", "b"], String::new)).expect("c is not listed");
        assert!(msg.contains("\"c\"") && msg.contains("no #[test]"), "{msg}");
        let mut ok = Findings::new("a");
        ok.section("b");
        let msg = panics(|| ok.verdict("prog", "d", &["a", "b", "d"], String::new)).expect("d does not exist");
        assert!(msg.contains("has no check \"d\""), "{msg}");
    }

    #[test]
    fn a_check_not_reached_fails_with_the_failures_that_stopped_it() {
        let mut f = Findings::new("a");
        f.fail("thread x is missing".into());
        let msg = panics(|| f.verdict("prog", "b", &["a", "b"], String::new)).expect("b was not reached");
        assert!(msg.contains("b was not reached") && msg.contains("[a] thread x is missing"), "{msg}");
    }

    #[test]
    fn a_failed_run_fails_every_check_with_its_error() {
        static CACHE: RunCache<u32, u32> = OnceLock::new();
        let runs = Mutex::new(0);
        for _ in 0..2 {
            let msg = panics(|| {
                cached_run(&CACHE, 1, "prog v", || {
                    *runs.lock().unwrap() += 1;
                    panic!("gcc failed")
                });
            })
            .expect("the run failed");
            assert!(msg.contains("prog v: the run failed") && msg.contains("gcc failed"), "{msg}");
        }
        assert_eq!(*runs.lock().unwrap(), 1, "a failed run is not made again");
        assert_eq!(*cached_run(&CACHE, 2, "prog w", || 7), 7);
    }
}

/// The messages `problems` (check, message) recorded for `check`.
pub fn problems_of<'a>(problems: &'a [(&'static str, String)], check: &str) -> Vec<&'a str> {
    problems.iter().filter(|(c, _)| *c == check).map(|(_, m)| m.as_str()).collect()
}
