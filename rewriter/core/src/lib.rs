//! stint-rewrite: the rewriting pipeline of stint, a static binary rewriter that measures
//! every thread.
//!
//! The rewrite core takes bytes and a spec and returns bytes and a report; it does no file
//! I/O (DESIGN.md, "Data flows one way"). The passes, in order, each once, each handing a
//! typed value to the next ([`rewrite`] is this list):
//!
//! 1. [`input`]    validate the ELF and give a bounds-checked view of it → [`InputElf`]
//! 2. [`analysis`] functions (symbols, `.eh_frame`), cold parts, branch targets → [`Analysis`]
//! 3. [`plan`]     instrumentation points and the tactic chosen for each → [`Plan`]
//! 4. [`place`]    layout: an address for every block of the new memory (data, runtime image,
//!    each stub, routine, trampoline and thunk, `.eh_frame`) → [`place::Placement`]
//! 5. [`codegen`]  every piece of code at its final address, nothing patched later →
//!    [`unwind::Piece`]s
//! 6. [`unwind`]   the combined `.eh_frame` and a new `.eh_frame_hdr` → [`unwind::EhOut`]
//! 7. [`emit`]     writing: the input copied, sites patched, the new segment appended,
//!    program and section headers → the output bytes and an [`emit::Layout`]
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
mod par;
pub mod place;
pub mod plan;
pub mod rewrite_report;
pub mod rtimage;
pub mod spec;
pub mod unwind;

#[cfg(test)]
mod fuzz_regressions;
#[cfg(test)]
mod testdir;

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
    /// Path of the input as the user named it, recorded in the meta so that a reader can find
    /// the input's `.gnu_debuglink` file next to it (`None`: not recorded).
    pub input: Option<&'a str>,
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

/// A pass of the pipeline, as [`rewrite_observed`] announces it (for progress output and
/// per-pass timings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Input,
    Analysis,
    Plan,
    Place,
    Codegen,
    Unwind,
    Emit,
    /// Everything is done.
    Done,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Input => "input",
            Phase::Analysis => "analysis",
            Phase::Plan => "plan",
            Phase::Place => "place",
            Phase::Codegen => "codegen",
            Phase::Unwind => "unwind",
            Phase::Emit => "emit",
            Phase::Done => "done",
        }
    }
}

/// Passes 1–3.
pub fn plan_program<'a>(data: &'a [u8], spec: &Spec, traps: bool) -> Result<Planned<'a>> {
    plan_observed(data, spec, traps, &mut |_| {})
}

/// [`plan_program`], calling `on_phase` as each pass starts.
fn plan_observed<'a>(data: &'a [u8], spec: &Spec, traps: bool, on_phase: &mut dyn FnMut(Phase)) -> Result<Planned<'a>> {
    on_phase(Phase::Input);
    let elf = InputElf::parse(data)?;
    on_phase(Phase::Analysis);
    let analysis = analysis::analyze(&elf)?;
    on_phase(Phase::Plan);
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
    rewrite_observed(data, opts, &mut |_| {})
}

/// Passes 4–7 of a planned program: the output bytes and their layout.
fn generate(p: &Planned, opts: &Options, on_phase: &mut dyn FnMut(Phase)) -> Result<(Vec<u8>, emit::Layout)> {
    on_phase(Phase::Place);
    let contents = place::SegmentData::new(p, opts.program, opts.input, opts.spec);
    let mut placed = place::place(&p.elf, &p.plan, &contents)?;
    on_phase(Phase::Codegen);
    let (code, shapes) = (std::mem::take(&mut placed.code), std::mem::take(&mut placed.shapes));
    let code = codegen::collect(&p.plan, &placed.pieces, code, shapes)?;
    on_phase(Phase::Unwind);
    let called = p.plan.import_sites.iter().map(|s| (s.address(), s.eh)).collect();
    let eh = unwind::build(&p.elf, &code, placed.runtime_eh_frame(), placed.eh_frame, &called)?;
    on_phase(Phase::Emit);
    let (out, layout) = emit::emit(&p.elf, &contents, &placed, &code, eh.as_ref())?;
    if cfg!(debug_assertions) {
        emit::validate_output(&out, &p.plan, &layout)?;
    }
    // Freeing every piece's bytes and the layout (10^5 allocations in a large program) is
    // left to another thread: nothing after this reads them.
    drop_elsewhere((code, placed, eh));
    Ok((out, layout))
}

/// Free `v` on a thread of its own, so that the calling thread goes on at once.
pub(crate) fn drop_elsewhere<T: Send + 'static>(v: T) {
    // If no thread can be started, the closure (and `v` with it) is dropped here.
    let _ = std::thread::Builder::new().name("stint-free".into()).spawn(move || drop(v));
}

/// [`rewrite`], calling `on_phase` as each pass starts and [`Phase::Done`] at the end.
pub fn rewrite_observed(
    data: &[u8],
    opts: &Options,
    on_phase: &mut dyn FnMut(Phase),
) -> Result<(Vec<u8>, RewriteReport)> {
    rewrite_then(data, opts, on_phase, |out| out)
}

/// [`rewrite_observed`], handing the output to `then` (the caller writes it) as soon as it is
/// complete: the rewrite report is built on another core meanwhile. `then`'s value is
/// returned with the report.
pub fn rewrite_then<T>(
    data: &[u8],
    opts: &Options,
    on_phase: &mut dyn FnMut(Phase),
    then: impl FnOnce(Vec<u8>) -> T,
) -> Result<(T, RewriteReport)> {
    let p = plan_observed(data, opts.spec, opts.traps, on_phase)?;
    let (out, layout) = generate(&p, opts, on_phase)?;
    // Built after the output (the report's memory would add to the passes' peak), while
    // `then` runs; on this thread if no other can be started.
    let planned = &p;
    let report = move |layout| RewriteReport::new(planned, opts.program, Some(layout));
    let (done, report) = std::thread::scope(|s| {
        let builder = std::thread::Builder::new().name("stint-report".into());
        match builder.spawn_scoped(s, {
            let layout = layout.clone();
            move || report(layout)
        }) {
            Ok(h) => {
                let done = then(out);
                (done, h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            }
            Err(_) => (then(out), report(layout)),
        }
    });
    // The analysis and the plan (10^6 allocations in a large program) are freed elsewhere too.
    let Planned { analysis, plan, .. } = p;
    drop_elsewhere((analysis, plan));
    on_phase(Phase::Done);
    Ok((done, report))
}
