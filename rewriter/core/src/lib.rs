//! stint-rewrite: the rewriting pipeline of stint, a static binary rewriter that measures
//! every thread.
//!
//! The rewrite core takes bytes and a spec and returns bytes and a report; it does no file
//! I/O (DESIGN.md, "Data flows one way"). The passes, in order:
//!
//! 1. [`input`]    validate the ELF and give a bounds-checked view of it
//! 2. [`analysis`] functions (symbols, `.eh_frame`), cold parts, branch targets
//! 3. [`plan`]     instrumentation points and the tactic chosen for each
//! 4. [`codegen`]  trampolines, the entry stub and the slow-path stub
//! 5. [`emit`]     the runtime image, new segments, patched windows: the output ELF
//!
//! The readers of profile files (the `stint-profile` crate) share the file layout with the
//! runtime through the `stint-layout` crate.
#![deny(unsafe_code)]

pub mod abi;
pub mod analysis;
pub mod codegen;
pub mod emit;
pub mod error;
pub mod input;
pub mod plan;
pub mod rewrite_report;
pub mod rtimage;
pub mod spec;
pub mod unwind;

pub use error::{Error, ErrorKind, Result};
pub use rewrite_report::RewriteReport;

use analysis::Analysis;
use input::InputElf;
use plan::{Plan, PlanOptions};
use spec::Spec;

/// What `rewrite` and `inspect` need besides the bytes.
pub struct Options<'a> {
    /// Program name: used in the default profile path and in reports.
    pub program: &'a str,
    pub spec: &'a Spec,
    /// Use the trap tactic (`int3` + SIGTRAP handler) where no jump window fits.
    pub traps: bool,
}

/// Analysis and plan of a program, before any code is generated.
pub struct Planned<'a> {
    pub elf: InputElf<'a>,
    pub analysis: Analysis,
    pub plan: Plan,
}

/// Passes 1–3.
pub fn plan_program<'a>(data: &'a [u8], spec: &Spec, traps: bool) -> Result<Planned<'a>> {
    let elf = InputElf::parse(data)?;
    let analysis = analysis::analyze(&elf)?;
    let opts = PlanOptions { shadow_stack: rewrite_report::has_shadow_stack(&elf), traps };
    let plan = plan::plan(&elf, &analysis, spec, opts);
    Ok(Planned { elf, analysis, plan })
}

/// What would be instrumented, and how (`stint inspect`).
pub fn inspect(data: &[u8], opts: &Options) -> Result<RewriteReport> {
    let p = plan_program(data, opts.spec, opts.traps)?;
    Ok(RewriteReport::new(&p, opts.program, None))
}

/// Rewrite a program: the whole pipeline (`stint rewrite`).
pub fn rewrite(data: &[u8], opts: &Options) -> Result<(Vec<u8>, RewriteReport)> {
    let p = plan_program(data, opts.spec, opts.traps)?;
    let meta = rewrite_report::meta_json(&p, opts.program);
    let on = opts.spec.on_at_start_bits();
    let gates: Vec<u8> = p.plan.points.iter().map(|pt| pt.bits & (on | stint_layout::GATE_HOOK)).collect();
    let tid_offset = if p.elf.is_glibc() { stint_layout::GLIBC_TID_OFFSET } else { 0 };
    // What each point can measure and its name, for the control file (STINT_CONTROL).
    let info: Vec<u8> = p
        .plan
        .points
        .iter()
        .map(|pt| pt.bits | if pt.wrap.is_some() { stint_layout::POINT_INFO_WRAP } else { 0 })
        .collect();
    let mut names = Vec::new();
    for pt in &p.plan.points {
        names.extend(pt.name(&p.analysis).bytes().filter(|&b| b != 0));
        names.push(0);
    }
    let inp = emit::EmitInput { meta_json: &meta, program: opts.program, gates, info, names, tid_offset };
    let (out, layout) = emit::emit(&p.elf, &p.plan, &inp)?;
    if cfg!(debug_assertions) {
        emit::validate_output(&out, &p.plan, &layout)?;
    }
    Ok((out, RewriteReport::new(&p, opts.program, Some(layout))))
}
