//! Unit tests of the options of the per-function table and its CSV form (`--sort`, `--top`,
//! `--thread`, `--width`, `off` / `open` / `-` cells, [`crate::csv`]) on synthetic profiles
//! with timers: a meta with `calls`, `cpu_time` and `wall_time`, times written into the
//! counter slots the meta names, a 1 MHz TSC (a tick is a microsecond).

use crate::csv::{field, functions_csv, record};
use crate::profile::{parse_with, Observer, Profile};
use crate::report::*;
use crate::synthetic::{patch_column, patch_header, write_synthetic};
use stint_layout::meta::{Meta, MetricMeta, PointMeta, META_SCHEMA, POINT_ENTRY, POINT_WRAP};
use stint_layout::{counter_offset, gate_offset, metric_bit, FileHeader, Metric, Pod, TIMER_BITS};

/// A function of the synthetic program: name, address, timed.
type Func = (&'static str, &'static str, bool);

fn timed_meta(funcs: &[Func], with_timers: bool) -> String {
    let mut metrics = vec![MetricMeta::of(Metric::Calls.def())];
    if with_timers {
        metrics.push(MetricMeta::of(Metric::CpuTime.def()));
        metrics.push(MetricMeta::of(Metric::WallTime.def()));
    }
    let meta = Meta {
        schema: META_SCHEMA.into(),
        program: "app".into(),
        input: None,
        build_id: None,
        debuglink: None,
        metrics,
        points: funcs
            .iter()
            .enumerate()
            .map(|(i, &(f, a, timed))| PointMeta {
                id: i as u32,
                kind: if f.starts_with("pthread_") { POINT_WRAP } else { POINT_ENTRY }.into(),
                function: f.into(),
                address: a.into(),
                bits: metric_bit(0) | if timed && with_timers { TIMER_BITS } else { 0 },
                size: 0,
                tail_jumps_to: Vec::new(),
                entry_exit: false,
            })
            .collect(),
        unwrapped: Vec::new(),
    };
    serde_json::to_string(&meta).unwrap()
}

/// Set the (cpu, wall) ticks of `point` in column `col`.
fn put_times(b: &mut [u8], col: u32, n_points: u32, point: u32, cpu: u64, wall: u64) {
    let h = FileHeader::parse(b, b.len() as u64).unwrap();
    let range = h.column_range(col);
    for (metric, v) in [(Metric::CpuTime, cpu), (Metric::WallTime, wall)] {
        let off = range.start + counter_offset(n_points, metric.def().slot.unwrap(), point) as usize;
        v.write_to(b, off).unwrap();
    }
}

const FUNCS: [Func; 6] = [
    ("main", "0x1000", true),
    ("hot", "0x1100", true),
    ("cheap", "0x1200", true),
    ("sleepy", "0x1300", true),
    ("untimed", "0x1400", false),
    ("pthread_mutex_lock", "0x1500", false),
];

/// Thread 7 (main, unnamed) and thread 8 named `worker-1` started at `hot`: by cpu main
/// (900), hot (800), cheap (10), sleepy (5), then the untimed ones by calls; by wall sleepy
/// (5000) first; by calls cheap (1000) first.
fn file() -> Vec<u8> {
    let n = FUNCS.len() as u32;
    let mut b = write_synthetic(
        &timed_meta(&FUNCS, true),
        &[(7, vec![(0, 1), (1, 2), (2, 1000), (3, 3), (4, 50), (5, 4)]), (8, vec![(1, 5), (2, 7)])],
    );
    patch_header(&mut b, |h| h.tsc_hz = 1_000_000);
    for (point, cpu, wall) in [(0, 900, 1000), (1, 800, 850), (2, 10, 10), (3, 5, 5000)] {
        put_times(&mut b, 0, n, point, cpu, wall);
    }
    put_times(&mut b, 1, n, 1, 70, 70);
    put_times(&mut b, 1, n, 2, 7, 7);
    for col in 0..2 {
        patch_column(&mut b, col, |c| c.thread_mask = u32::MAX);
    }
    patch_column(&mut b, 1, |c| {
        c.name[..8].copy_from_slice(b"worker-1");
        c.start_routine = 0x1100;
    });
    b
}

fn profile_of(b: &[u8]) -> Profile {
    parse_with(b, &Observer::ENDED).unwrap()
}

fn names(p: &Profile, tid: u32, sort: SortBy) -> Vec<String> {
    let t = p.threads.iter().find(|t| t.tid == tid).unwrap();
    functions_sorted(p, t, sort).into_iter().map(|f| f.name).collect()
}

#[test]
fn sort_by_cpu_puts_unmeasured_functions_last_by_calls() {
    let p = profile_of(&file());
    assert_eq!(names(&p, 7, SortBy::Cpu), ["main", "hot", "cheap", "sleepy", "untimed", "pthread_mutex_lock"]);
}

#[test]
fn sort_by_wall() {
    let p = profile_of(&file());
    assert_eq!(names(&p, 7, SortBy::Wall), ["sleepy", "main", "hot", "cheap", "untimed", "pthread_mutex_lock"]);
}

#[test]
fn sort_by_calls() {
    let p = profile_of(&file());
    assert_eq!(names(&p, 7, SortBy::Calls), ["cheap", "untimed", "pthread_mutex_lock", "sleepy", "hot", "main"]);
}

#[test]
fn ties_go_to_more_calls_then_name() {
    let funcs: [Func; 3] = [("b", "0x10", true), ("a", "0x20", true), ("c", "0x30", true)];
    let mut b = write_synthetic(&timed_meta(&funcs, true), &[(7, vec![(0, 5), (1, 5), (2, 9)])]);
    patch_header(&mut b, |h| h.tsc_hz = 1_000_000_000);
    for point in 0..3 {
        put_times(&mut b, 0, 3, point, 100, 100);
    }
    let p = profile_of(&b);
    assert_eq!(names(&p, 7, SortBy::Cpu), ["c", "a", "b"]);
    assert_eq!(names(&p, 7, SortBy::Wall), ["c", "a", "b"]);
}

#[test]
fn default_table_is_sorted_by_cpu() {
    let p = profile_of(&file());
    let explicit = to_table_with(&p, &TableOptions { sort: Some(SortBy::Cpu), ..Default::default() });
    assert_eq!(to_table(&p), explicit);
    let rows: Vec<&str> = explicit.lines().skip(4).take(6).map(|l| l.split_whitespace().last().unwrap()).collect();
    assert_eq!(rows, ["main", "hot", "cheap", "sleepy", "untimed", "pthread_mutex_lock"], "{explicit}");
}

#[test]
fn top_keeps_the_most_expensive_and_counts_the_rest() {
    let p = profile_of(&file());
    let t = to_table_with(&p, &TableOptions { top: Some(2), ..Default::default() });
    // thread 7: main and hot shown; cheap, sleepy, untimed, the lock: 4 functions, 1057 calls
    assert!(t.contains("\n   1057  … 4 more functions (--top 0 for all)\n"), "{t}");
    assert!(t.contains("   main\n") && t.contains("   hot\n") && !t.contains("sleepy"), "{t}");
    let one = to_table_with(&p, &TableOptions { top: Some(1), thread: Some("8".into()), ..Default::default() });
    assert!(one.contains("\n      7  … 1 more function (--top 0 for all)\n"), "{one}");
}

#[test]
fn top_zero_shows_everything() {
    let p = profile_of(&file());
    assert_eq!(to_table_with(&p, &TableOptions { top: Some(0), ..Default::default() }), to_table(&p));
}

#[test]
fn unmeasured_cells_say_why() {
    let p = profile_of(&file());
    let t = to_table(&p);
    let line = |name: &str| t.lines().find(|l| l.split_whitespace().last() == Some(name)).unwrap().to_owned();
    assert_eq!(line("untimed").split_whitespace().collect::<Vec<_>>(), ["50", "-", "-", "-", "0x1400", "untimed"]);
    assert_eq!(
        line("main").split_whitespace().collect::<Vec<_>>(),
        ["1", "0.900", "1.000", "900.000", "0x1000", "main"]
    );
    assert!(t.contains("\n-: calls only ("), "{t}");
    assert!(!t.split_whitespace().any(|cell| cell == "0.000"), "{t}");
}

#[test]
fn timed_function_without_time_is_off_or_open_by_its_gate() {
    let mut b = file();
    // `cheap` recorded nothing on thread 8.
    put_times(&mut b, 1, FUNCS.len() as u32, 2, 0, 0);
    let p = profile_of(&b);
    let only8 = TableOptions { thread: Some("8".into()), ..Default::default() };
    let t = to_table_with(&p, &only8);
    assert!(t.contains("      7         open         open        open  0x1200   cheap"), "{t}");
    assert!(t.contains("\nopen: timed, but none of its calls returned before its thread ended"), "{t}");
    // Gate of `cheap` off now: its timers were off.
    let h = FileHeader::parse(&b, b.len() as u64).unwrap();
    b[(h.ctl_offset + gate_offset(2)) as usize] &= !TIMER_BITS;
    let t = to_table_with(&profile_of(&b), &only8);
    assert!(t.contains("      7          off          off         off  0x1200   cheap"), "{t}");
    assert!(t.contains("\noff: its timers are off"), "{t}");
}

#[test]
fn profile_without_timers_shows_off_only_when_sorted_by_time() {
    let b = write_synthetic(&timed_meta(&FUNCS, false), &[(7, vec![(0, 1), (2, 10)])]);
    let p = profile_of(&b);
    let narrow = to_table(&p);
    assert!(narrow.contains("\n  calls  address  function\n     10  0x1200   cheap\n"), "{narrow}");
    let t = to_table_with(&p, &TableOptions { sort: Some(SortBy::Cpu), ..Default::default() });
    assert!(t.contains("\n     10          off          off         off  0x1200   cheap"), "{t}");
    assert!(t.contains("\noff: the profile measured no times (its spec times no function)\n"), "{t}");
    assert!(!t.contains("times: inclusive"), "{t}");
}

#[test]
fn thread_by_tid_name_glob_and_start_routine() {
    let p = profile_of(&file());
    let tids = |pat: &str| select_threads(&p, Some(pat)).iter().map(|t| t.tid).collect::<Vec<_>>();
    assert_eq!(tids("8"), [8]);
    assert_eq!(tids("7"), [7]);
    assert_eq!(tids("9"), Vec::<u32>::new());
    assert_eq!(tids("worker-*"), [8]);
    assert_eq!(tids("h?t"), [8], "start routine hot");
    assert_eq!(tids("*"), [8], "a glob matches names and start routines, and thread 7 has neither");
    let t = to_table_with(&p, &TableOptions { thread: Some("worker-*".into()), ..Default::default() });
    assert!(!t.contains("thread 7 ") && t.contains("thread 8  name: worker-1"), "{t}");
    assert!(t.contains("\ntotal: 1 of 2 threads, 12 calls\n"), "{t}");
}

#[test]
fn shorten_middle_keeps_both_ends() {
    assert_eq!(shorten_middle("abcdefghij", 5), "ab…ij");
    assert_eq!(shorten_middle("abcdefghij", 6), "abc…ij");
    assert_eq!(shorten_middle("abcdefghij", 10), "abcdefghij");
    assert_eq!(shorten_middle("äöüßxyz", 4), "äö…z");
}

#[test]
fn width_shortens_long_names_to_fit() {
    let long = "std::map<std::string, std::vector<int>>::operator[](std::string const&)";
    let funcs: [Func; 1] = [(long, "0x10", false)];
    let p = profile_of(&write_synthetic(&timed_meta(&funcs, false), &[(7, vec![(0, 3)])]));
    let t = to_table_with(&p, &TableOptions { width: Some(40), ..Default::default() });
    let row = t.lines().find(|l| l.contains("  0x10  ")).unwrap();
    assert!(t.lines().filter(|l| l.starts_with("  ")).all(|l| l.chars().count() <= 40), "{t}");
    // 40 − "  calls  " − "address  " leaves 22 characters: 11 from the start, 10 from the end.
    assert_eq!(row, "      3  0x10     std::map<st…ng const&)");
    // Never below MIN_SHORT_NAME characters.
    let t = to_table_with(&p, &TableOptions { width: Some(5), ..Default::default() });
    assert!(t.contains("\n      3  0x10     std::m…nst&)\n"), "{t}");
    assert!(to_table(&p).contains(long));
}

#[test]
fn csv_fields_are_quoted_as_rfc_4180_says() {
    assert_eq!(field("plain"), "plain");
    assert_eq!(field("a,b"), "\"a,b\"");
    assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
    assert_eq!(field("two\nlines"), "\"two\nlines\"");
    assert_eq!(record(&["1", "x,y", ""]), "1,\"x,y\",\n");
}

#[test]
fn csv_of_functions() {
    let funcs: [Func; 2] = [("operator()(int, int)", "0x10", true), ("f", "0x20", false)];
    let mut b = write_synthetic(&timed_meta(&funcs, true), &[(7, vec![(0, 2), (1, 3)])]);
    patch_header(&mut b, |h| h.tsc_hz = 2_000_000_000);
    put_times(&mut b, 0, 2, 0, 3000, 5000);
    patch_column(&mut b, 0, |c| {
        c.thread_mask = u32::MAX;
        c.name[..5].copy_from_slice(b"a,\"b\"");
    });
    let p = profile_of(&b);
    assert_eq!(
        functions_csv(&p, &TableOptions::default()),
        "tid,thread,function,address,calls,cpu_ns,wall_ns\n\
         7,\"a,\"\"b\"\"\",\"operator()(int, int)\",0x10,2,1500,2500\n\
         7,\"a,\"\"b\"\"\",f,0x20,3,,\n"
    );
    let top = functions_csv(&p, &TableOptions { top: Some(1), sort: Some(SortBy::Calls), ..Default::default() });
    assert_eq!(top.lines().nth(1), Some("7,\"a,\"\"b\"\"\",f,0x20,3,,"));
    assert_eq!(top.lines().count(), 2);
}

#[test]
fn csv_says_off_without_timers() {
    let p = profile_of(&write_synthetic(&timed_meta(&FUNCS, false), &[(7, vec![(1, 4)])]));
    assert_eq!(functions_csv(&p, &TableOptions::default()).lines().nth(1), Some("7,,hot,0x1100,4,off,off"));
}
