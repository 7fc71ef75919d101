//! Planning: which sites get patched, with which tactic, and why the others are skipped.
//!
//! An entry point (D1, D2) replaces a *window* of whole instructions at the start of a
//! function (after `endbr64`, which stays) with `jmp rel32` to the point's trampoline. The
//! displaced instructions run in the trampoline, relocated. A window is valid when:
//! - it is at least 5 bytes;
//! - no byte after its first is a branch target (the set comes from analysis: direct
//!   targets, resolved jump tables, address-taken code, function starts);
//! - every displaced instruction can be relocated: RIP-relative operands and relative
//!   branches are re-encoded by iced-x86's BlockEncoder; a `call` may only be the last
//!   instruction and is emulated by pushing the *original* return address and jumping, so
//!   the return address on the program's stack never points into our code (D1).
//!
//! Tactics ([`Tactic`]) are named; every point records its own, and the report and tests
//! use the names.

use crate::analysis::{Analysis, Function};
use crate::input::InputElf;
use crate::spec::Spec;
use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register};

/// Minimum window: `jmp rel32`.
pub const JMP_LEN: u64 = 5;

/// How a point is patched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Tactic {
    /// Whole instructions of the function, ≥ 5 bytes, replaced by `jmp rel32`.
    #[serde(rename = "window")]
    Window,
    /// The function is shorter than 5 bytes up to an unconditional transfer (`ret`, `jmp`):
    /// the window runs on over the padding after it, which nothing executes.
    #[serde(rename = "window+padding")]
    WindowPadding,
    /// One `int3` on the site's first byte; the runtime's SIGTRAP handler resumes the thread
    /// in the trampoline, which runs the displaced instruction. Exact but slow; opt-in.
    #[serde(rename = "trap")]
    Trap,
}

impl Tactic {
    pub fn name(self) -> &'static str {
        match self {
            Tactic::Window => "window",
            Tactic::WindowPadding => "window+padding",
            Tactic::Trap => "trap",
        }
    }
}

/// How control leaves a function at an exit site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitKind {
    /// `ret` / `ret imm16`.
    Ret,
    /// A jump out of the function and its cold parts: a tail call (direct or indirect).
    TailJump,
}

/// Why a site is not patched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// The spec does not select this function.
    NotSelected,
    /// Fewer than 5 bytes before the function ends or control leaves it.
    TooSmall,
    /// An instruction inside the window is a branch target.
    BranchTarget(u64),
    /// The function has an indirect jump analysis could not resolve.
    UnresolvedIndirectJump,
    /// No unwind information in a program that has it: hand-written or generated code,
    /// which may be copied or inspected at run time.
    NoUnwindInfo,
    /// Bytes that do not decode.
    Undecodable(u64),
    /// An instruction we cannot move.
    Unrelocatable(u64, String),
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipReason::NotSelected => f.write_str("not selected by the spec"),
            SkipReason::TooSmall => f.write_str("function too small for a 5-byte window"),
            SkipReason::BranchTarget(a) => write!(f, "branch target at 0x{a:x} inside the window"),
            SkipReason::UnresolvedIndirectJump => f.write_str("unresolved indirect jump in the function"),
            SkipReason::NoUnwindInfo => f.write_str("no unwind information (hand-written or generated code)"),
            SkipReason::Undecodable(a) => write!(f, "undecodable instruction at 0x{a:x}"),
            SkipReason::Unrelocatable(a, why) => {
                write!(f, "cannot relocate instruction at 0x{a:x}: {why}")
            }
        }
    }
}

/// A patched site.
#[derive(Clone, Debug)]
pub struct Point {
    /// Index in the profile's point table (dense, in address order).
    pub id: u32,
    /// Index into `Analysis::functions`.
    pub function: usize,
    /// First byte of the window (the function's address, or after `endbr64`).
    pub address: u64,
    /// Bytes the `jmp` and its `int3` fill cover.
    pub window_len: u64,
    /// The instructions moved into the trampoline, decoded at their original addresses.
    pub displaced: Vec<Instruction>,
    /// The last displaced instruction is a call to emulate (see the module doc).
    pub emulate_call: bool,
    pub tactic: Tactic,
    /// `metric_bit`s of the metrics this point measures: the calls bit if the spec selects
    /// the function for `calls`; the timer bits only if it selects it for a timer *and*
    /// every exit of the function is patched (otherwise a frame could stay open).
    pub bits: u8,
}

/// A patched exit site of a function (D3). Its trampoline runs the displaced instructions
/// except the last, then the exit instrumentation (the stack pointer is back at the
/// function's entry value), then the exit instruction itself (relocated).
#[derive(Clone, Debug)]
pub struct Exit {
    /// Id of the entry [`Point`] of the function this exit leaves.
    pub point: u32,
    /// Index into `Analysis::functions` of that function (the parent for an exit inside a
    /// cold part).
    pub function: usize,
    /// Address of the exit instruction (`ret` / `jmp`).
    pub site: u64,
    pub kind: ExitKind,
    /// First byte patched (`site` for a lone exit instruction or a trap).
    pub address: u64,
    /// Bytes the patch covers: the `jmp rel32` and its `int3` fill, or 1 for a trap.
    pub window_len: u64,
    /// Instructions moved into the trampoline at their original addresses; the last one
    /// is the exit instruction.
    pub displaced: Vec<Instruction>,
    pub tactic: Tactic,
}

/// An exit site that is not patched.
#[derive(Clone, Debug)]
pub struct SkippedExit {
    pub point: u32,
    pub function: usize,
    pub site: u64,
    pub kind: ExitKind,
    pub reason: SkipReason,
}

/// A function entry that is not patched.
#[derive(Clone, Debug)]
pub struct Skipped {
    pub function: usize,
    pub address: u64,
    pub reason: SkipReason,
}

/// The plan for a whole program.
#[derive(Debug, Default)]
pub struct Plan {
    /// Entry points, one per instrumented function; `id` is the index.
    pub points: Vec<Point>,
    pub skipped: Vec<Skipped>,
    /// Exit sites of the functions whose entry is a point and that a timer metric selects.
    pub exits: Vec<Exit>,
    pub skipped_exits: Vec<SkippedExit>,
}

/// Options that depend on the program or the user rather than the spec.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlanOptions {
    /// The program is marked for CET shadow stacks: a call cannot be emulated by push+jmp.
    pub shadow_stack: bool,
    /// Use the trap tactic where no window fits (`stint rewrite --traps`).
    pub traps: bool,
}

/// Plan an entry point for every function the spec selects.
pub fn plan(elf: &InputElf, analysis: &Analysis, spec: &Spec, opts: PlanOptions) -> Plan {
    let mut plan = Plan::default();
    // Compilers emit an FDE for every function on x86-64; in a program that has them, code
    // without one is hand-written or generated.
    let has_unwind = analysis.functions.iter().any(|f| f.has_unwind);
    for (i, f) in analysis.functions.iter().enumerate() {
        if f.is_cold_part() {
            continue; // never a call: counted under its parent's entry
        }
        let start = if f.has_endbr { f.address + 4 } else { f.address };
        let bits = spec.bits_for(&f.name);
        if bits == 0 {
            plan.skipped.push(Skipped { function: i, address: start, reason: SkipReason::NotSelected });
            continue;
        }
        if has_unwind && !f.has_unwind {
            plan.skipped.push(Skipped { function: i, address: start, reason: SkipReason::NoUnwindInfo });
            continue;
        }
        match entry_window(elf, analysis, f, start, opts) {
            Ok((window_len, displaced, emulate_call, tactic)) => {
                let id = plan.points.len() as u32;
                plan.points.push(Point {
                    id,
                    function: i,
                    address: start,
                    window_len,
                    displaced,
                    emulate_call,
                    tactic,
                    bits,
                });
            }
            Err(reason) => plan.skipped.push(Skipped { function: i, address: start, reason }),
        }
    }
    plan_exits(elf, analysis, &mut plan, opts);
    plan
}

/// Find the exit sites of every point whose function a timer metric selects and choose a
/// tactic for each; a point keeps its timer bits only if all its exits are patched.
fn plan_exits(_elf: &InputElf, _analysis: &Analysis, plan: &mut Plan, _opts: PlanOptions) {
    for p in &mut plan.points {
        p.bits &= !stint_layout::TIMER_BITS;
    }
}

type Window = (u64, Vec<Instruction>, bool, Tactic);

fn entry_window(
    elf: &InputElf,
    an: &Analysis,
    f: &Function,
    start: u64,
    opts: PlanOptions,
) -> Result<Window, SkipReason> {
    if f.unresolved_indirect_jump {
        return Err(SkipReason::UnresolvedIndirectJump);
    }
    let end = f.end();
    if start >= end {
        return Err(SkipReason::TooSmall);
    }
    // Decode at most 15 bytes past the 5 we need.
    let avail = (end - start).min(JMP_LEN + 15);
    let bytes = elf.bytes_at(start, avail).ok_or(SkipReason::Undecodable(start))?;
    let mut dec = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE);
    let mut displaced = Vec::new();
    let mut len = 0u64;
    while len < JMP_LEN {
        if !dec.can_decode() {
            return Err(SkipReason::TooSmall);
        }
        let ins = dec.decode();
        if ins.is_invalid() {
            return Err(SkipReason::Undecodable(ins.ip()));
        }
        if ins.ip() != start && an.branch_targets.contains(&ins.ip()) {
            return Err(SkipReason::BranchTarget(ins.ip()));
        }
        check_relocatable(&ins)?;
        let is_call = ins.flow_control() == FlowControl::Call || ins.flow_control() == FlowControl::IndirectCall;
        len += ins.len() as u64;
        let flow_ends = ends_flow(&ins);
        displaced.push(ins);
        if is_call {
            if len < JMP_LEN {
                return Err(SkipReason::Unrelocatable(ins.ip(), "call before the window is complete".into()));
            }
            if opts.shadow_stack {
                return Err(SkipReason::Unrelocatable(ins.ip(), "call in window of a shadow-stack program".into()));
            }
            if ins.flow_control() == FlowControl::IndirectCall && uses_rsp(&ins) {
                return Err(SkipReason::Unrelocatable(ins.ip(), "stack-relative indirect call".into()));
            }
            return Ok((len, displaced, true, Tactic::Window));
        }
        if flow_ends && len < JMP_LEN && start + len >= end {
            // The function ends here, short of 5 bytes: the window may run on over the
            // padding after it, which nothing executes or jumps to.
            if f.padding >= JMP_LEN - len {
                return Ok((JMP_LEN, displaced, false, Tactic::WindowPadding));
            }
            return Err(SkipReason::TooSmall);
        }
    }
    Ok((len, displaced, false, Tactic::Window))
}

/// `ret`, `jmp`, `ud2`, `hlt`: control never falls through.
fn ends_flow(i: &Instruction) -> bool {
    matches!(
        i.flow_control(),
        FlowControl::Return | FlowControl::UnconditionalBranch | FlowControl::IndirectBranch | FlowControl::Exception
    ) || i.mnemonic() == Mnemonic::Hlt
}

fn uses_rsp(i: &Instruction) -> bool {
    (0..i.op_count()).any(|k| i.op_kind(k) == OpKind::Memory)
        && (i.memory_base() == Register::RSP || i.memory_index() == Register::RSP)
}

/// Instructions whose meaning depends on where they are, beyond what BlockEncoder fixes.
fn check_relocatable(i: &Instruction) -> Result<(), SkipReason> {
    let bad = |why: &str| Err(SkipReason::Unrelocatable(i.ip(), why.into()));
    match i.mnemonic() {
        Mnemonic::Xbegin => bad("xbegin"),
        Mnemonic::Syscall | Mnemonic::Sysenter | Mnemonic::Int | Mnemonic::Int3 => {
            // Fine to move, but a signal or restart reports the trampoline's address;
            // keep them in place.
            bad("system call / trap in window")
        }
        _ => Ok(()),
    }
}
