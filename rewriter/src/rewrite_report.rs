//! The rewrite report (`stint inspect`, `stint rewrite --report`) and the self-description
//! embedded in the output for the profile file (D9: reports need neither binary nor spec).
//!
//! Every function entry appears as a point with its tactic, or `"skipped"` with the reason;
//! the summary gives coverage, which is a number the project tracks.

use crate::analysis::{FunctionKind, FunctionSource};
use crate::emit::Layout;
use crate::input::InputElf;
use crate::Planned;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Serialize)]
pub struct RewriteReport {
    pub schema: &'static str,
    pub program: String,
    pub kind: crate::input::ElfKind,
    pub interp: Option<String>,
    pub functions: Vec<FunctionRow>,
    pub points: Vec<PointRow>,
    pub summary: Summary,
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

#[derive(Serialize)]
pub struct PointRow {
    pub kind: &'static str,
    pub function: String,
    /// The function's address in the input (as `nm` shows it).
    pub address: String,
    /// Where the window starts (after `endbr64`).
    pub site: String,
    /// A tactic name, or "skipped".
    pub tactic: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
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
    /// patched / entries, in percent.
    pub entry_coverage_pct: f64,
    pub by_tactic: BTreeMap<String, usize>,
    pub skipped_by_reason: BTreeMap<String, usize>,
    pub not_selected: usize,
}

pub fn hex(a: u64) -> String {
    format!("0x{a:x}")
}

impl RewriteReport {
    pub fn new(p: &Planned, program: &str, layout: Option<Layout>) -> Self {
        let fs = &p.analysis.functions;
        let functions = fs
            .iter()
            .map(|f| FunctionRow {
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
            })
            .collect();
        let mut s = Summary { functions: fs.len(), ..Default::default() };
        for f in fs {
            *s.by_source.entry(format!("{:?}", f.source).to_lowercase()).or_default() += 1;
            s.cold_parts += f.is_cold_part() as usize;
        }
        // (site, row): sorted by the numeric site address at the end.
        let mut points: Vec<(u64, PointRow)> = Vec::new();
        for pt in &p.plan.points {
            let f = &fs[pt.function];
            *s.by_tactic.entry(pt.tactic.name().into()).or_default() += 1;
            points.push((
                pt.address,
                PointRow {
                    kind: "entry",
                    function: f.name.clone(),
                    address: hex(f.address),
                    site: hex(pt.address),
                    tactic: pt.tactic.name(),
                    window: Some(pt.window_len),
                    reason: None,
                },
            ));
        }
        for sk in &p.plan.skipped {
            let f = &fs[sk.function];
            if sk.reason == crate::plan::SkipReason::NotSelected {
                s.not_selected += 1;
                continue;
            }
            *s.skipped_by_reason.entry(reason_class(&sk.reason)).or_default() += 1;
            points.push((
                sk.address,
                PointRow {
                    kind: "entry",
                    function: f.name.clone(),
                    address: hex(f.address),
                    site: hex(sk.address),
                    tactic: "skipped",
                    window: None,
                    reason: Some(sk.reason.to_string()),
                },
            ));
        }
        points.sort_by_key(|(site, _)| *site);
        let points: Vec<PointRow> = points.into_iter().map(|(_, row)| row).collect();
        s.patched = p.plan.points.len();
        s.skipped = points.len() - s.patched;
        s.entries = points.len();
        s.entry_coverage_pct = if s.entries == 0 { 100.0 } else { 100.0 * s.patched as f64 / s.entries as f64 };
        RewriteReport {
            schema: "stint-inspect/1",
            program: program.to_string(),
            kind: p.elf.kind,
            interp: p.elf.interp.clone(),
            functions,
            points,
            summary: s,
            layout,
        }
    }

    /// Human-readable summary for the terminal.
    pub fn to_text(&self, list_skipped: bool) -> String {
        let s = &self.summary;
        let mut out = String::new();
        let by_source: Vec<String> = s.by_source.iter().map(|(k, v)| format!("{v} from {k}")).collect();
        out += &format!(
            "{}: {:?} executable, {} functions ({}), {} cold parts\n",
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
        if list_skipped {
            for p in self.points.iter().filter(|p| p.tactic == "skipped") {
                out += &format!(
                    "  skipped {} {} at {}: {}\n",
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

/// The reason without addresses, for counting.
fn reason_class(r: &crate::plan::SkipReason) -> String {
    use crate::plan::SkipReason::*;
    match r {
        NotSelected => "not selected",
        TooSmall => "too small",
        BranchTarget(_) => "branch target in window",
        UnresolvedIndirectJump => "unresolved indirect jump",
        NoUnwindInfo => "no unwind information",
        Undecodable(_) => "undecodable",
        Unrelocatable(..) => "unrelocatable instruction",
    }
    .into()
}

/// The self-description stored in the output and copied into every profile file.
pub fn meta_json(p: &Planned, program: &str) -> String {
    let points: Vec<_> = p
        .plan
        .points
        .iter()
        .map(|pt| {
            let f = &p.analysis.functions[pt.function];
            serde_json::json!({
                "id": pt.id, "kind": "entry", "function": f.name, "address": hex(f.address), "bits": pt.bits,
            })
        })
        .collect();
    use stint_layout::{METRIC_CALLS, METRIC_CPU_TIME, METRIC_WALL_TIME, SLOT_CALLS, SLOT_CPU_TICKS, SLOT_WALL_TICKS};
    serde_json::json!({
        "schema": "stint-meta/1",
        "program": program,
        "metrics": [
            {"name": "calls", "kind": "counter", "slot": SLOT_CALLS, "bit": METRIC_CALLS},
            {"name": "cpu_time", "kind": "timer", "slot": SLOT_CPU_TICKS, "bit": METRIC_CPU_TIME, "unit": "tsc"},
            {"name": "wall_time", "kind": "timer", "slot": SLOT_WALL_TICKS, "bit": METRIC_WALL_TIME, "unit": "tsc"},
        ],
        "points": points,
    })
    .to_string()
}

/// Whether the program is marked for CET shadow stacks (GNU_PROPERTY_X86_FEATURE_1_SHSTK).
pub fn has_shadow_stack(elf: &InputElf) -> bool {
    const NT_GNU_PROPERTY_TYPE_0: u32 = 5;
    const X86_FEATURE_1_AND: u32 = 0xc000_0002;
    const SHSTK: u32 = 1 << 1;
    let Some(seg) = elf.segments.iter().find(|s| s.p_type == object::elf::PT_GNU_PROPERTY) else {
        return false;
    };
    let Some(b) = elf.data.get(seg.offset as usize..(seg.offset + seg.filesz) as usize) else {
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
