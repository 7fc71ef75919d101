//! The rewrite report (`stint inspect`, `stint rewrite --report`) and the self-description
//! embedded in the output for the profile file (D9: reports need neither binary nor spec).
//!
//! Every function entry appears as a point with its tactic, or `"skipped"` with the reason,
//! and so does every exit site of a function a timer selects (D3) and every call into an
//! import (kind `import`, with its caller; D19); the summary gives coverage of all three,
//! which are numbers the project tracks.

use crate::analysis::{FunctionKind, FunctionSource};
use crate::emit::Layout;
use crate::input::InputElf;
use crate::plan::{ExitKind, Tactic};
use crate::Planned;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use stint_layout::meta::{DebugLink, Meta, PointMeta, POINT_ENTRY, POINT_IMPORT, POINT_WRAP};

#[derive(Serialize)]
pub struct RewriteReport {
    pub schema: &'static str,
    pub program: String,
    pub kind: crate::input::ElfKind,
    pub interp: Option<String>,
    pub functions: Vec<FunctionRow>,
    pub points: Vec<PointRow>,
    pub summary: Summary,
    /// Uses of thread-library imports no wrapper sees, one line each ([`unwrapped_notes`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unwrapped: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<Layout>,
}

#[derive(Serialize)]
pub struct FunctionRow {
    pub name: String,
    pub address: String,
    pub size: u64,
    pub source: FunctionSource,
    /// "function" or "cold_part".
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    pub endbr: bool,
}

#[derive(Serialize, Default)]
pub struct PointRow {
    /// "entry", "exit", "wrap" or "import" (a call site into an imported function).
    pub kind: &'static str,
    pub function: String,
    /// The function's address in the input (as `nm` shows it).
    pub address: String,
    /// The patched instruction: where the entry window starts (after `endbr64`); the exit
    /// instruction (`ret`, `jmp`) of an exit.
    pub site: String,
    /// A tactic name, or "skipped".
    pub tactic: &'static str,
    /// Bytes the patch covers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    /// For a patched exit: the first patched byte (the window ends with the exit instruction).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How an exit leaves: "ret" or "tail_jump".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitKind>,
    /// For an exit skipped only because another exit of its function is: the tactic that fits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fits: Option<&'static str>,
    /// For a call into an import (kind "import"): the calling function.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// What a report of this function must say about its times (D17): "time ends at tail
    /// jump to usleep".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Serialize, Default)]
pub struct Summary {
    pub functions: usize,
    pub cold_parts: usize,
    pub by_source: BTreeMap<String, usize>,
    /// Entries of selected functions.
    pub entries: usize,
    pub patched: usize,
    pub skipped: usize,
    /// Thread-library imports whose PLT stub or GOT call sites lead to a wrapper (not counted
    /// in `entries`).
    pub wrapped: usize,
    /// `call`/`jmp [rip+slot]` sites of wrapped imports patched to call the wrapper (D4).
    #[serde(skip_serializing_if = "is_zero")]
    pub wrap_sites: usize,
    /// Uses of wrapped imports' GOT slots no wrapper sees (`unwrapped` says which).
    #[serde(skip_serializing_if = "is_zero")]
    pub wrap_uses_uncovered: usize,
    /// patched / entries, in percent.
    pub entry_coverage_pct: f64,
    pub by_tactic: BTreeMap<String, usize>,
    pub skipped_by_reason: BTreeMap<String, usize>,
    pub not_selected: usize,
    /// Entries patched without a trap / entries, in percent.
    pub entries_without_traps_pct: f64,
    /// Exit sites of the functions a timer selects (and whose entry is patched).
    pub exits: usize,
    pub exits_patched: usize,
    pub exits_skipped: usize,
    /// exits_patched / exits, in percent.
    pub exit_coverage_pct: f64,
    /// Exits a tactic other than a trap reaches (patched, or fitting but left alone because
    /// another exit of the function does not fit) / exits, in percent.
    pub exits_without_traps_pct: f64,
    pub exits_by_tactic: BTreeMap<String, usize>,
    pub exits_skipped_by_reason: BTreeMap<String, usize>,
    /// Runs of a function's straight-line code moved to a piece of their own, so that an
    /// exit's `jmp rel8` finds a 5-byte slot in the dead tail they leave (slot windows).
    #[serde(skip_serializing_if = "is_zero")]
    pub slot_windows: usize,
    /// Patched entries a timer selects.
    pub timer_functions: usize,
    /// Of those, the ones that keep their timers: every exit is patched.
    pub timed_functions: usize,
    /// Why the others are not timed (the first reason per function).
    pub untimed_by_reason: BTreeMap<String, usize>,
    /// Imported functions measured at their call sites (D19), and their call sites.
    pub imports: usize,
    pub import_sites: usize,
    pub import_sites_patched: usize,
    pub import_sites_skipped: usize,
    pub import_sites_skipped_by_reason: BTreeMap<String, usize>,
    /// Patched tail jumps of timed functions into imports (D17), and of those the ones whose
    /// trampoline calls the import and keeps the frame open (the others end at the jump).
    pub tail_jumps_into_imports: usize,
    pub tail_jumps_kept_open: usize,
    /// Entries and exits patched with a trap (`--traps`; issue 12): no other tactic fits them.
    #[serde(skip_serializing_if = "is_zero")]
    pub trap_sites: usize,
    /// The signal functions wrapped because the program has trap sites (none without), by
    /// name; they are among `wrapped`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub signal_wrappers: Vec<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What the report of a profile and `stint inspect` warn about (one line each): thread-library
/// imports a wrapper exists for whose calls it does not see, grouped by import, and Rust
/// std's futex-based locks, which no thread-library wrapper can see.
pub fn unwrapped_notes(p: &Planned) -> Vec<String> {
    let mut by_name: BTreeMap<&str, Vec<&crate::plan::UncoveredWrap>> = BTreeMap::new();
    for u in &p.plan.uncovered_wraps {
        by_name.entry(&u.name).or_default().push(u);
    }
    let mut notes: Vec<String> = by_name
        .into_iter()
        .map(|(name, us)| {
            let first = us[0];
            let first = match p.analysis.functions.get(first.function) {
                Some(f) => format!("at 0x{:x} in {}: {first}", first.site, f.name),
                None => first.to_string(),
            };
            let what = match us.len() {
                1 => String::new(),
                n => format!(" and {} more", n - 1),
            };
            let risk = if stint_layout::SignalFn::from_name(name).is_some() {
                "they may block SIGTRAP or replace stint's SIGTRAP handler, which trap sites need"
            } else {
                "its waits and thread records may be missing"
            };
            format!("{name}: calls no wrapper sees, so {risk} ({first}{what})")
        })
        .collect();
    if p.analysis.functions.iter().any(|f| RUST_FUTEX_LOCKS.iter().any(|k| f.name.contains(k))) {
        notes.push(
            "Rust std Mutex/Condvar/RwLock wait on futexes, not in the thread library: their waits are not recorded"
                .into(),
        );
    }
    notes
}

/// Parts of the names of Rust std's futex-based lock slow paths (demangled).
const RUST_FUTEX_LOCKS: [&str; 3] = [
    "sync::mutex::futex::Mutex>::lock_contended",
    "sync::condvar::futex::Condvar>::wait",
    "sync::rwlock::futex::RwLock>",
];

pub fn hex(a: u64) -> String {
    format!("0x{a:x}")
}

impl RewriteReport {
    pub fn new(p: &Planned, program: &str, layout: Option<Layout>) -> Self {
        let fs = &p.analysis.functions;
        // The rows (a few strings each, 10^5 of them in a large program) are made on every
        // core, in item order; the counts stay on this thread.
        let functions = crate::par::map(
            fs,
            || (),
            |_, f| FunctionRow {
                name: f.name.clone(),
                address: hex(f.address),
                size: f.size,
                source: f.source,
                kind: if f.is_cold_part() { "cold_part" } else { "function" },
                parent: match f.kind {
                    FunctionKind::ColdPart { parent: Some(a) } => Some(hex(a)),
                    _ => None,
                },
                endbr: f.has_endbr,
            },
        );
        let mut s = Summary { functions: fs.len(), ..Default::default() };
        for f in fs {
            *s.by_source.entry(format!("{:?}", f.source).to_lowercase()).or_default() += 1;
            s.cold_parts += f.is_cold_part() as usize;
        }
        // (site, row): sorted by the numeric site address at the end.
        for pt in p.plan.points.iter().filter(|pt| pt.import.is_none()) {
            if let Some(w) = &pt.wrap {
                s.wrapped += 1;
                if crate::plan::is_signal_wrap(w) {
                    s.signal_wrappers.push(w.name.clone());
                }
            } else {
                *s.by_tactic.entry(pt.tactic.name().into()).or_default() += 1;
            }
        }
        s.imports = p.plan.points.iter().filter(|pt| pt.import.is_some()).count();
        let pl = &p.plan;
        let rows = pl.points.len()
            + pl.skipped.len()
            + pl.exits.len()
            + pl.skipped_exits.len()
            + pl.import_sites.len()
            + pl.skipped_import_sites.len()
            + pl.wrap_sites.len()
            + pl.uncovered_wraps.len();
        let mut points: Vec<(u64, PointRow)> = Vec::with_capacity(rows);
        // Imports: their call sites are listed below.
        points.extend(
            crate::par::map(
                &p.plan.points,
                || (),
                |_, pt| {
                    pt.import.is_none().then(|| {
                        (
                            pt.address,
                            PointRow {
                                kind: if pt.wrap.is_some() { "wrap" } else { "entry" },
                                function: pt.name(&p.analysis).to_string(),
                                address: hex(pt.function_address(&p.analysis)),
                                site: hex(pt.address),
                                // A wrapper of an import with no PLT stub patches only its GOT call
                                // sites; a static program's wrapper patches its entry window.
                                tactic: match &pt.wrap {
                                    Some(_) if pt.window_len == 0 => "got",
                                    Some(w) if w.got_slot != 0 => "plt",
                                    _ => pt.tactic.name(),
                                },
                                window: Some(pt.window_len).filter(|&w| w > 0 || pt.wrap.is_none()),
                                patch: None,
                                reason: None,
                                exit: None,
                                fits: None,
                                caller: None,
                                note: None,
                            },
                        )
                    })
                },
            )
            .into_iter()
            .flatten(),
        );
        let mut entry_skipped = 0;
        for sk in &p.plan.skipped {
            let f = &fs[sk.function];
            if sk.reason == crate::plan::SkipReason::NotSelected {
                s.not_selected += 1;
                continue;
            }
            *s.skipped_by_reason.entry(reason_class(&sk.reason, sk.address)).or_default() += 1;
            entry_skipped += 1;
            points.push((
                sk.address,
                PointRow {
                    kind: "entry",
                    function: f.name.clone(),
                    address: hex(f.address),
                    site: hex(sk.address),
                    tactic: "skipped",
                    reason: Some(sk.reason.to_string()),
                    ..Default::default()
                },
            ));
        }
        let mut exits_no_trap = 0;
        // The first tail import at each site (a lookup per exit: node has 112,502 exits and
        // 3,927 tail imports).
        let mut tail_at: HashMap<u64, &crate::plan::TailImport> = HashMap::new();
        for t in &p.plan.tail_imports {
            tail_at.entry(t.site).or_insert(t);
        }
        for x in &p.plan.exits {
            *s.exits_by_tactic.entry(x.tactic.name().into()).or_default() += 1;
            exits_no_trap += (x.tactic != Tactic::Trap) as usize;
        }
        points.extend(crate::par::map(
            &p.plan.exits,
            || (),
            |_, x| {
                let f = &fs[x.function];
                (
                    x.site,
                    PointRow {
                        kind: "exit",
                        function: f.name.clone(),
                        address: hex(f.address),
                        site: hex(x.site),
                        tactic: x.tactic.name(),
                        window: Some(x.window_len),
                        patch: Some(hex(x.address)),
                        exit: Some(x.kind),
                        note: tail_at.get(&x.site).map(|t| match t.called {
                            true => format!("frame kept open across tail jump to {}", t.name),
                            false => format!("time ends at tail jump to {}", t.name),
                        }),
                        ..Default::default()
                    },
                )
            },
        ));
        for x in &p.plan.skipped_exits {
            let f = &fs[x.function];
            *s.exits_skipped_by_reason.entry(reason_class(&x.reason, x.site)).or_default() += 1;
            exits_no_trap += x.fits.is_some_and(|t| t != Tactic::Trap) as usize;
            points.push((
                x.site,
                PointRow {
                    kind: "exit",
                    function: f.name.clone(),
                    address: hex(f.address),
                    site: hex(x.site),
                    tactic: "skipped",
                    reason: Some(x.reason.to_string()),
                    exit: Some(x.kind),
                    fits: x.fits.map(Tactic::name),
                    ..Default::default()
                },
            ));
        }
        points.extend(crate::par::map(
            &p.plan.import_sites,
            || (),
            |_, x| {
                let pt = &p.plan.points[x.point as usize];
                (
                    x.address(),
                    PointRow {
                        kind: "import",
                        function: pt.name(&p.analysis).to_string(),
                        address: hex(pt.function_address(&p.analysis)),
                        site: hex(x.address()),
                        tactic: Tactic::Window.name(),
                        window: Some(x.window_len()),
                        caller: Some(fs[x.function].name.clone()),
                        ..Default::default()
                    },
                )
            },
        ));
        for x in &p.plan.skipped_import_sites {
            *s.import_sites_skipped_by_reason.entry(reason_class(&x.reason, x.site)).or_default() += 1;
            points.push((
                x.site,
                PointRow {
                    kind: "import",
                    function: x.name.clone(),
                    address: hex(x.address),
                    site: hex(x.site),
                    tactic: "skipped",
                    reason: Some(x.reason.to_string()),
                    caller: Some(fs[x.function].name.clone()),
                    ..Default::default()
                },
            ));
        }
        for x in &p.plan.wrap_sites {
            let pt = &p.plan.points[x.point as usize];
            points.push((
                x.address(),
                PointRow {
                    kind: "wrap",
                    function: pt.name(&p.analysis).to_string(),
                    address: hex(pt.function_address(&p.analysis)),
                    site: hex(x.address()),
                    tactic: if x.is_call() { "got-call" } else { "got-jmp" },
                    window: Some(x.window_len()),
                    caller: Some(fs[x.function].name.clone()),
                    ..Default::default()
                },
            ));
        }
        for u in &p.plan.uncovered_wraps {
            points.push((
                u.site,
                PointRow {
                    kind: "wrap",
                    function: u.name.clone(),
                    address: hex(u.site),
                    site: hex(u.site),
                    tactic: "skipped",
                    reason: Some(u.to_string()),
                    caller: fs.get(u.function).map(|f| f.name.clone()),
                    ..Default::default()
                },
            ));
        }
        s.wrap_sites = p.plan.wrap_sites.len();
        s.wrap_uses_uncovered = p.plan.uncovered_wraps.len();
        s.import_sites_patched = p.plan.import_sites.len();
        s.import_sites_skipped = p.plan.skipped_import_sites.len();
        s.import_sites = s.import_sites_patched + s.import_sites_skipped;
        s.tail_jumps_into_imports = p.plan.tail_imports.len();
        s.tail_jumps_kept_open = p.plan.tail_imports.iter().filter(|t| t.called).count();
        s.trap_sites = crate::plan::trap_sites(&p.plan);
        s.slot_windows = p.plan.slot_windows.len();
        s.signal_wrappers.sort();
        for u in &p.plan.untimed {
            *s.untimed_by_reason.entry(reason_class(&u.reason, u.site)).or_default() += 1;
        }
        points.sort_by_key(|(site, row)| (*site, row.kind == "exit"));
        let points: Vec<PointRow> = points.into_iter().map(|(_, row)| row).collect();
        let pct = |n: usize, of: usize| if of == 0 { 100.0 } else { 100.0 * n as f64 / of as f64 };
        s.patched = p.plan.points.len() - s.wrapped - s.imports;
        s.skipped = entry_skipped;
        s.entries = s.patched + s.skipped;
        s.entry_coverage_pct = pct(s.patched, s.entries);
        let entry_traps = p
            .plan
            .points
            .iter()
            .filter(|pt| pt.wrap.is_none() && pt.import.is_none() && pt.tactic == Tactic::Trap)
            .count();
        s.entries_without_traps_pct = pct(s.patched - entry_traps, s.entries);
        s.exits_patched = p.plan.exits.len();
        s.exits_skipped = p.plan.skipped_exits.len();
        s.exits = s.exits_patched + s.exits_skipped;
        s.exit_coverage_pct = pct(s.exits_patched, s.exits);
        s.exits_without_traps_pct = pct(exits_no_trap, s.exits);
        s.timed_functions =
            p.plan.points.iter().filter(|pt| pt.import.is_none() && pt.bits & stint_layout::TIMER_BITS != 0).count();
        s.timer_functions = s.timed_functions + p.plan.untimed.len();
        RewriteReport {
            schema: "stint-inspect/1",
            program: program.to_string(),
            kind: p.elf.kind,
            interp: p.elf.interp.clone(),
            functions,
            points,
            summary: s,
            unwrapped: unwrapped_notes(p),
            layout,
        }
    }

    /// Human-readable summary for the terminal.
    pub fn to_text(&self, list_skipped: bool) -> String {
        let s = &self.summary;
        let mut out = String::new();
        let by_source: Vec<String> = s.by_source.iter().map(|(k, v)| format!("{v} from {k}")).collect();
        out += &format!(
            "{}: {} executable, {} functions ({}), {} cold parts\n",
            self.program,
            self.kind,
            s.functions,
            by_source.join(", "),
            s.cold_parts
        );
        let tactics: Vec<String> = s.by_tactic.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out += &format!(
            "entries: {} patched of {} ({:.2}%): {}\n",
            s.patched,
            s.entries,
            s.entry_coverage_pct,
            if tactics.is_empty() { "-".into() } else { tactics.join(", ") }
        );
        if s.skipped > 0 {
            let reasons: Vec<String> = s.skipped_by_reason.iter().map(|(k, v)| format!("{k} {v}")).collect();
            out += &format!("skipped: {} ({})\n", s.skipped, reasons.join(", "));
        }
        if s.not_selected > 0 {
            out += &format!("not selected by the spec: {}\n", s.not_selected);
        }
        if s.timer_functions > 0 {
            let tactics: Vec<String> = s.exits_by_tactic.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let reasons: Vec<String> = s.exits_skipped_by_reason.iter().map(|(k, v)| format!("{k} {v}")).collect();
            out += &format!(
                "exits: {} patched of {} ({:.2}%): {}{}; timed functions: {} of {}\n",
                s.exits_patched,
                s.exits,
                s.exit_coverage_pct,
                if tactics.is_empty() { "-".into() } else { tactics.join(", ") },
                if reasons.is_empty() { String::new() } else { format!("; skipped: {}", reasons.join(", ")) },
                s.timed_functions,
                s.timer_functions
            );
            if s.slot_windows > 0 {
                out += &format!(
                    "slot windows: {} (runs of straight-line code moved out so that an exit finds a 5-byte slot)\n",
                    s.slot_windows
                );
            }
        }
        if s.import_sites > 0 {
            let reasons: Vec<String> =
                s.import_sites_skipped_by_reason.iter().map(|(k, v)| format!("{k} {v}")).collect();
            out += &format!(
                "imports: {} functions at {} of {} call sites{}",
                s.imports,
                s.import_sites_patched,
                s.import_sites,
                if reasons.is_empty() { String::new() } else { format!("; skipped: {}", reasons.join(", ")) },
            );
            if s.tail_jumps_into_imports > 0 {
                out += &format!(
                    "; tail jumps into imports: {} kept open, {} end the frame",
                    s.tail_jumps_kept_open,
                    s.tail_jumps_into_imports - s.tail_jumps_kept_open
                );
            }
            out.push('\n');
        }
        if s.wrap_sites > 0 {
            out += &format!("wrappers: {} thread-library imports, {} GOT call sites\n", s.wrapped, s.wrap_sites);
        }
        if s.trap_sites > 0 {
            out += &format!(
                "traps: {} sites need a trap; signal functions wrapped to keep SIGTRAP safe: {}\n",
                s.trap_sites,
                if s.signal_wrappers.is_empty() { "none imported".into() } else { s.signal_wrappers.join(", ") }
            );
        }
        for w in &self.unwrapped {
            out += &format!("warning: {w}\n");
        }
        if list_skipped {
            for p in self.points.iter().filter(|p| p.tactic == "skipped") {
                out += &format!(
                    "  skipped {} {} {} at {}: {}\n",
                    p.kind,
                    p.function,
                    p.address,
                    p.site,
                    p.reason.as_deref().unwrap_or("")
                );
            }
        }
        out
    }
}

/// The reason without addresses, for counting; `site` is the skipped site.
fn reason_class(r: &crate::plan::SkipReason, site: u64) -> String {
    use crate::plan::SkipReason::*;
    match r {
        NotSelected => "not selected",
        TooSmall => "too small",
        BranchTarget(a) if *a == site => "exit is a branch target",
        BranchTarget(_) => "branch target in window",
        UnresolvedIndirectJump => "unresolved indirect jump",
        NoUnwindInfo => "no unwind information",
        Undecodable(_) => "undecodable",
        Unrelocatable(..) => "unrelocatable instruction",
        ConditionalTailCall => "conditional tail call",
        ExitTooSmall => "too small",
        ExitInEntryWindow => "exit inside the entry window",
        Overlap(_) => "overlaps another patch",
        IntoOtherColdPart(_) => "jump into another function's cold part",
        IntoFunctionInterior(_) => "jump into the middle of a function",
        NotTimed => "another exit is skipped",
        CatchHandler(..) => "covered by a catch handler",
        Wrapped => "wrapped",
        NoReturn => "never returns",
        ReturnAddressSensitive => "reads its return address",
        ShadowStack => "shadow stack",
    }
    .into()
}

/// The self-description stored in the output and copied into every profile file: a
/// `stint_layout::meta::Meta` (the type the profile reader deserialises), every metric of
/// `stint_layout::METRICS`.
pub fn meta_json(p: &Planned, program: &str, input: Option<&str>) -> String {
    let (mut meta, tails_of) = (meta_without_points(p, program, input), tails_of(p));
    let point_meta = |pt: &crate::plan::Point| point_meta(p, &tails_of, pt);
    // The points, nearly all of the text, are written on every core, a chunk of points at a
    // time, into the place of the empty list in the rest (compact JSON: a list is its
    // elements joined by commas, wherever it stands).
    let head = serde_json::to_string(&meta).expect("the meta is plain data and always serialises");
    let (Some(at), 1) = (head.find(EMPTY_POINTS), head.matches(EMPTY_POINTS).count()) else {
        meta.points = p.plan.points.iter().map(point_meta).collect();
        return serde_json::to_string(&meta).expect("the meta is plain data and always serialises");
    };
    let chunks: Vec<&[crate::plan::Point]> = p.plan.points.chunks(META_CHUNK).collect();
    let parts = crate::par::map(
        &chunks,
        || (),
        |_, chunk| {
            let mut out = Vec::with_capacity(chunk.len() * 128);
            for (k, pt) in chunk.iter().enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut out, &point_meta(pt)).expect("a point's meta always serialises");
            }
            out
        },
    );
    let len = head.len() + parts.iter().map(|x| x.len() + 1).sum::<usize>();
    let mut json = String::with_capacity(len);
    json.push_str(&head[..at + EMPTY_POINTS.len() - 1]);
    for (k, part) in parts.iter().enumerate() {
        if k > 0 {
            json.push(',');
        }
        json.push_str(std::str::from_utf8(part).expect("serde_json writes UTF-8"));
    }
    json.push_str(&head[at + EMPTY_POINTS.len() - 1..]);
    json
}

/// The meta of a rewrite with its list of points left empty.
fn meta_without_points(p: &Planned, program: &str, input: Option<&str>) -> Meta {
    let mut meta = Meta::new(program, Vec::new());
    meta.input = input.map(String::from);
    meta.unwrapped = unwrapped_notes(p);
    (meta.build_id, meta.debuglink) = debug_ids(p.elf.data);
    meta
}

/// The tail imports that end each point's time, by point (one pass over the list).
fn tails_of(p: &Planned) -> HashMap<u32, Vec<String>> {
    let mut tails_of: HashMap<u32, Vec<String>> = HashMap::new();
    for t in p.plan.tail_imports.iter().filter(|t| !t.called) {
        tails_of.entry(t.point).or_default().push(t.name.clone());
    }
    tails_of
}

/// What the meta says of point `pt`.
fn point_meta(p: &Planned, tails_of: &HashMap<u32, Vec<String>>, pt: &crate::plan::Point) -> PointMeta {
    let (kind, size) = match (&pt.wrap, &pt.import) {
        (Some(_), _) => (POINT_WRAP, 0),
        (None, Some(_)) => (POINT_IMPORT, 0),
        (None, None) => (POINT_ENTRY, p.analysis.functions[pt.function].size),
    };
    let mut tails: Vec<String> = tails_of.get(&pt.id).cloned().unwrap_or_default();
    tails.sort();
    tails.dedup();
    PointMeta {
        id: pt.id,
        kind: kind.into(),
        function: pt.name(&p.analysis).into(),
        address: hex(pt.function_address(&p.analysis)),
        bits: pt.bits,
        size,
        tail_jumps_to: tails,
        entry_exit: p.plan.entry_exits.contains_key(&pt.id),
    }
}

/// The meta's point list while it is empty, as serde_json writes it.
const EMPTY_POINTS: &str = "\"points\":[]";

/// Points per chunk of the meta written on one core.
pub(crate) const META_CHUNK: usize = 16;

/// [`meta_json`] serialised in one piece (what the chunks must add up to).
#[cfg(test)]
pub(crate) fn meta_whole(p: &Planned, program: &str, input: Option<&str>) -> String {
    let (mut meta, tails_of) = (meta_without_points(p, program, input), tails_of(p));
    meta.points = p.plan.points.iter().map(|pt| point_meta(p, &tails_of, pt)).collect();
    serde_json::to_string(&meta).expect("the meta is plain data and always serialises")
}

/// The input's GNU build-id (hex) and `.gnu_debuglink`, each if present and well-formed: a
/// reader finds the separate debug info with them (issue 11). A malformed note or section is
/// not an error here, the names are only a convenience for later.
fn debug_ids(data: &[u8]) -> (Option<String>, Option<DebugLink>) {
    use object::Object as _;
    let Ok(file) = object::read::elf::ElfFile64::<object::Endianness>::parse(data) else {
        return (None, None);
    };
    let build_id = file
        .build_id()
        .ok()
        .flatten()
        .filter(|id| !id.is_empty())
        .map(|id| id.iter().map(|b| format!("{b:02x}")).collect());
    let debuglink = file.gnu_debuglink().ok().flatten().and_then(|(name, crc)| {
        let file = std::str::from_utf8(name).ok().filter(|n| !n.is_empty() && !n.contains('/'))?;
        Some(DebugLink { file: file.into(), crc })
    });
    (build_id, debuglink)
}

/// Whether the program is marked for CET shadow stacks (GNU_PROPERTY_X86_FEATURE_1_SHSTK).
pub fn has_shadow_stack(elf: &InputElf) -> bool {
    const NT_GNU_PROPERTY_TYPE_0: u32 = 5;
    const X86_FEATURE_1_AND: u32 = 0xc000_0002;
    const SHSTK: u32 = 1 << 1;
    let Some(seg) = elf.segments.iter().find(|s| s.p_type == object::elf::PT_GNU_PROPERTY) else {
        return false;
    };
    let Some(b) = seg.offset.checked_add(seg.filesz).and_then(|end| elf.data.get(seg.offset as usize..end as usize))
    else {
        return false;
    };
    let u32_at = |o: usize| b.get(o..o + 4).map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]));
    let mut o = 0;
    while let (Some(namesz), Some(descsz), Some(ty)) = (u32_at(o), u32_at(o + 4), u32_at(o + 8)) {
        let desc = o + 12 + (namesz as usize).div_ceil(8) * 8;
        if ty == NT_GNU_PROPERTY_TYPE_0 {
            let mut q = desc;
            while q + 8 <= desc + descsz as usize {
                let (Some(pt), Some(sz)) = (u32_at(q), u32_at(q + 4)) else {
                    break;
                };
                if pt == X86_FEATURE_1_AND && sz >= 4 {
                    return u32_at(q + 8).is_some_and(|v| v & SHSTK != 0);
                }
                q += 8 + (sz as usize).div_ceil(8) * 8;
            }
        }
        o = desc + (descsz as usize).div_ceil(8) * 8;
    }
    false
}
