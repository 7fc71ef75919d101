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
//! Exits (D3) of the functions a timer selects are planned after all entries: see
//! [`plan_exits`]. A function keeps its timer bits only if every exit is patched; otherwise
//! none of its exits is patched and the plan says why (`Plan::untimed`).
//!
//! Calls into shared libraries (D19) are planned last ([`plan_imports`]): one point per
//! imported function, and one patched site per call into it (the call instruction alone).
//! Tail jumps of timed functions into imports are either turned into calls by their exit
//! trampoline or marked (D17, [`TailImport`]).
//!
//! With `PlanOptions::traps`, an entry or exit where no window fits gets a trap (`int3` on
//! its first byte).
//!
//! Tactics ([`Tactic`]) are named; every point records its own, and the report and tests
//! use the names.

use crate::analysis::{decode_at, Analysis, Function, FunctionKind, IndirectJump};
use crate::input::InputElf;
use crate::spec::Spec;
use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Minimum window: `jmp rel32`.
pub const JMP_LEN: u64 = 5;

/// How a point is patched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Tactic {
    /// Whole instructions of the function, ≥ 5 bytes, replaced by `jmp rel32`.
    #[serde(rename = "window")]
    Window,
    /// The function is shorter than 5 bytes up to an unconditional transfer (`ret`, `jmp`), or
    /// an exit has fewer than 5 movable bytes before it: the window runs on over the padding
    /// after the transfer (after the function, or alignment `nop`s inside it up to the next
    /// branch target), which nothing executes.
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
    /// Exit: a conditional jump (`jcc`, `loop`, `jrcxz`) out of the function (clang's
    /// conditional tail calls); only its taken path would need the exit instrumentation.
    ConditionalTailCall,
    /// Exit: fewer than 5 bytes of movable instructions end at the exit (the function or
    /// its part starts, or a call, jump or `ret` comes first).
    ExitTooSmall,
    /// Exit: the entry window displaces the exit instruction.
    ExitInEntryWindow,
    /// Exit: the window would overlap the patch starting at this address.
    Overlap(u64),
    /// Exit: a jump into a cold part of another function.
    IntoOtherColdPart(u64),
    /// Exit: a jump into the middle of the function at this address.
    IntoFunctionInterior(u64),
    /// Exit: this exit fits, but another exit of the function does not, so the function
    /// is not timed and none of its exits is patched.
    NotTimed,
    /// Import call site: an exception passing this call stops at a landing pad of the
    /// caller (C++ `try` or a cleanup), which the trampoline's frame would hide.
    LandingPad(u64),
    /// Import call site: the caller has an LSDA whose call-site table does not cover the
    /// call, so an exception passing it terminates the program (`noexcept`); the
    /// trampoline's frame would let it through.
    NotInCallSiteTable,
    /// Import call site: the import is a thread-library function with a wrapper point (D4).
    Wrapped,
    /// Import call site: the import never returns (`exit`, `abort`, `__cxa_throw`, …).
    NoReturn,
    /// Import call site: the import finds its caller by its return address (`dlsym`,
    /// `dlopen`, …): the return address must stay in the program.
    ReturnAddressSensitive,
    /// Import call site in a program marked for CET shadow stacks (the trampoline's `call`
    /// is fine, but its disabled path emulates the call).
    ShadowStack,
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
            SkipReason::ConditionalTailCall => f.write_str("conditional tail call"),
            SkipReason::ExitTooSmall => f.write_str("fewer than 5 movable bytes end at the exit"),
            SkipReason::ExitInEntryWindow => f.write_str("exit inside the entry window"),
            SkipReason::Overlap(a) => write!(f, "window overlaps the patch at 0x{a:x}"),
            SkipReason::IntoOtherColdPart(a) => write!(f, "jump into 0x{a:x}, a cold part of another function"),
            SkipReason::IntoFunctionInterior(a) => write!(f, "jump into the middle of the function at 0x{a:x}"),
            SkipReason::NotTimed => f.write_str("another exit of the function cannot be patched"),
            SkipReason::LandingPad(a) => write!(f, "call covered by the landing pad at 0x{a:x} (try/cleanup)"),
            SkipReason::NotInCallSiteTable => f.write_str("call outside the LSDA's call-site table (noexcept)"),
            SkipReason::Wrapped => f.write_str("thread-library function with a wrapper"),
            SkipReason::NoReturn => f.write_str("import never returns"),
            SkipReason::ReturnAddressSensitive => f.write_str("import reads its return address"),
            SkipReason::ShadowStack => f.write_str("call site in a shadow-stack program"),
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
    /// every exit of the function is patched (otherwise a frame could stay open). For a
    /// wrapper: `calls` and the `sync_calls` metrics.
    pub bits: u8,
    /// The point is the wrapper of an imported thread-library function (D4): `address` and
    /// `window_len` are its PLT stub's `jmp [rip+slot]`, `function` is `usize::MAX`.
    pub wrap: Option<Wrap>,
    /// The point is an imported function timed at its call sites (D19, [`ImportSite`]s):
    /// `function` is `usize::MAX`, `address` the import's address, `window_len` 0 (the
    /// point patches nothing itself).
    pub import: Option<Import>,
}

/// An imported function whose calls from the program are a point of their own (D19).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Import {
    /// The symbol as the dynamic relocation names it (`_Znwm`).
    pub symbol: String,
    /// Demangled (`operator new`): what reports show and spec globs match.
    pub name: String,
    /// Its PLT stub (the `endbr64` if it has one), or for an import only called through the
    /// GOT (`-fno-plt`), its GOT slot: the address reports show.
    pub address: u64,
}

/// A call from the program into an import, patched (D19): the `call` becomes `jmp rel32` to
/// a trampoline that makes the same call with the same stack, between the import point's
/// entry and exit instrumentation ([`crate::codegen::import_trampoline`]).
#[derive(Clone, Debug)]
pub struct ImportSite {
    /// Id of the import's [`Point`].
    pub point: u32,
    /// Index into `Analysis::functions` of the calling function (or cold part).
    pub function: usize,
    /// The `call rel32` (to a PLT stub) or `call [rip+slot]`, decoded at its address.
    pub call: Instruction,
}

impl ImportSite {
    pub fn address(&self) -> u64 {
        self.call.ip()
    }
    /// Bytes the patch covers: the call instruction.
    pub fn window_len(&self) -> u64 {
        self.call.len() as u64
    }
}

/// A call into an import that is not patched.
#[derive(Clone, Debug)]
pub struct SkippedImportSite {
    /// The calling function.
    pub function: usize,
    pub site: u64,
    /// The import's demangled name and its address (as [`Import::address`]).
    pub name: String,
    pub address: u64,
    pub reason: SkipReason,
}

/// A tail jump (`jmp f@plt`, `jmp [rip+slot]`) from a timed function into an import (D17).
///
/// A function's time runs until control returns to its caller, but after a tail jump the
/// import returns there directly, and the callee's stack must not change (D19): its return
/// address is the caller's, and stack arguments would lie right above it. Two cases:
///
/// - `call`: the import is known to take no stack arguments (every argument in registers
///   by its documented prototype: [`REGISTER_ARGS_IMPORTS`], non-variadic, at most six
///   integer and eight vector arguments, no structs or `long double` by value). The exit
///   trampoline then calls it instead of jumping, 8 bytes lower to keep the psABI's entry
///   alignment (`lea rsp, [rsp-8]; call f; lea rsp, [rsp+8]`), closes the function's frame
///   when it returns and returns to the caller itself. The callee sees the same arguments; the
///   words above its return address are not its to read. Unwinding from inside the import
///   passes through the trampoline with the function's CFI at the jump (CFA 16 bytes
///   above the return address into the trampoline), so exceptions and `pthread_cancel`'s
///   forced unwinding reach the caller exactly as before (no landing pad can cover a tail
///   jump: the function's frame is already gone there). The import itself is not counted
///   as a call there: its time is the function's.
/// - otherwise (not on the list: its stack arguments, if any, would be 16 bytes off), the
///   jump stays a jump, the function's frame ends at it, and the report says "time ends at
///   tail jump to f" for the function instead of a silently shorter time.
#[derive(Clone, Debug)]
pub struct TailImport {
    /// Entry point of the function that jumps.
    pub point: u32,
    pub site: u64,
    /// The import's demangled name.
    pub name: String,
    /// The exit trampoline calls the import and keeps the frame open (see above).
    pub called: bool,
}

/// Imports whose documented prototypes pass every argument in registers (see
/// [`TailImport`]): blocking system-call wrappers, where a tail call hides the most time,
/// and common libc and zlib functions.
pub const REGISTER_ARGS_IMPORTS: &[&str] = &[
    "usleep",
    "sleep",
    "nanosleep",
    "clock_nanosleep",
    "pause",
    "poll",
    "ppoll",
    "select",
    "pselect",
    "epoll_wait",
    "epoll_pwait",
    "read",
    "write",
    "pread",
    "pread64",
    "pwrite",
    "pwrite64",
    "readv",
    "writev",
    "recv",
    "send",
    "recvfrom",
    "sendto",
    "recvmsg",
    "sendmsg",
    "accept",
    "accept4",
    "connect",
    "waitpid",
    "wait",
    "waitid",
    "fsync",
    "fdatasync",
    "sched_yield",
    "system",
    "sigwait",
    "sigsuspend",
    "sigtimedwait",
    "sigwaitinfo",
    "msync",
    "flock",
    "lockf",
    "close",
    "fread",
    "fwrite",
    "fgets",
    "fputs",
    "puts",
    "fflush",
    "fclose",
    "getline",
    "getdelim",
    "free",
    "malloc",
    "calloc",
    "realloc",
    "memcpy",
    "memmove",
    "memset",
    "memcmp",
    "strlen",
    "strcmp",
    "strncmp",
    "strcpy",
    "qsort",
    "deflate",
    "inflate",
    "deflateEnd",
    "inflateEnd",
    "compress",
    "compress2",
    "uncompress",
    "crc32",
];

/// A thread-library import whose PLT stub is redirected to a wrapper in the runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wrap {
    /// `stint_layout::WRAP_*`.
    pub func: u32,
    /// The imported symbol.
    pub name: String,
    /// Address of the PLT stub (its `endbr64` if it has one): what callers call.
    pub stub: u64,
    /// The GOT slot the stub jumps through; the wrapper calls the real function through it,
    /// so lazy binding keeps working.
    pub got_slot: u64,
}

impl Point {
    /// The function name a report shows for this point.
    pub fn name<'a>(&'a self, an: &'a Analysis) -> &'a str {
        match (&self.wrap, &self.import) {
            (Some(w), _) => &w.name,
            (None, Some(i)) => &i.name,
            (None, None) => &an.functions[self.function].name,
        }
    }

    /// The address a report shows for this point (the function's, the PLT stub's, or an
    /// import's).
    pub fn function_address(&self, an: &Analysis) -> u64 {
        match (&self.wrap, &self.import) {
            (Some(w), _) => w.stub,
            (None, Some(i)) => i.address,
            (None, None) => an.functions[self.function].address,
        }
    }
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
    /// The tactic that fits this site when it is skipped only because another exit of the
    /// function does not fit ([`SkipReason::NotTimed`]).
    pub fits: Option<Tactic>,
}

/// A point a timer metric selects that is not timed: why its timer bits were dropped (the
/// first reason found; its exits are in `Plan::skipped_exits`).
#[derive(Clone, Debug)]
pub struct Untimed {
    pub point: u32,
    pub function: usize,
    /// The site the reason is about.
    pub site: u64,
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
    /// Points a timer selects whose timer bits were dropped, with the reason.
    pub untimed: Vec<Untimed>,
    /// Patched calls into imports (D19), in address order.
    pub import_sites: Vec<ImportSite>,
    pub skipped_import_sites: Vec<SkippedImportSite>,
    /// Patched tail jumps of timed functions into imports (D17), in exit order.
    pub tail_imports: Vec<TailImport>,
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
        let planned = entry_window(elf, analysis, f, start, opts).or_else(|reason| {
            // A trap needs only the first instruction and changes only its first byte, so it
            // also serves functions whose other instructions may be branch targets.
            if opts.traps {
                entry_trap(elf, f, start).map_err(|_| reason)
            } else {
                Err(reason)
            }
        });
        match planned {
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
                    wrap: None,
                    import: None,
                });
            }
            Err(reason) => plan.skipped.push(Skipped { function: i, address: start, reason }),
        }
    }
    plan_exits(elf, analysis, &mut plan, opts);
    plan_wraps(elf, analysis, spec, &mut plan);
    plan_imports(elf, analysis, spec, &mut plan, opts);
    plan
}

/// A wrapper point for every PLT stub of a thread-library function the spec selects (D4).
/// The stub's `jmp [rip+slot]` (6 bytes, 7 with a `bnd` prefix, after `endbr64` in
/// `.plt.sec`) becomes `jmp wrapper_thunk` + nops; the code after it (`push n; jmp .plt`,
/// reached through the GOT until lazy binding resolves the slot) is untouched.
fn plan_wraps(elf: &InputElf, an: &Analysis, spec: &Spec, plan: &mut Plan) {
    for stub in &an.plt_stubs {
        let Some(func) = stint_layout::wrap_id(&stub.name) else { continue };
        let bits = spec.wrap_bits_for(&stub.name);
        if bits == 0 || plan.points.iter().any(|p| p.wrap.as_ref().is_some_and(|w| w.stub == stub.address)) {
            continue;
        }
        let code = decode_at(elf, stub.address, 16);
        let Some(jmp) = code.iter().find(|i| i.mnemonic() != Mnemonic::Endbr64) else { continue };
        if jmp.flow_control() != FlowControl::IndirectBranch
            || !jmp.is_ip_rel_memory_operand()
            || jmp.ip_rel_memory_address() != stub.got_slot
            || (jmp.len() as u64) < JMP_LEN
        {
            continue;
        }
        let id = plan.points.len() as u32;
        plan.points.push(Point {
            id,
            function: usize::MAX,
            address: jmp.ip(),
            window_len: jmp.len() as u64,
            displaced: Vec::new(),
            emulate_call: false,
            tactic: Tactic::Window,
            bits,
            wrap: Some(Wrap { func, name: stub.name.clone(), stub: stub.address, got_slot: stub.got_slot }),
            import: None,
        });
    }
}

/// Find the exit sites of every point whose function a timer metric selects and choose a
/// tactic for each; a point keeps its timer bits only if all its exits are patched.
///
/// The exit sites of a function are found by a linear sweep over it and over its cold parts
/// (an exit inside `f.cold` leaves `f`):
/// - `ret` / `ret imm16`, with any prefix (`rep ret`, `bnd ret`);
/// - a direct `jmp` out of the function and its cold parts, or to the function's own entry
///   (a tail call to itself re-enters the entry point);
/// - an indirect `jmp` that analysis found to be a tail call (through the GOT, a vtable, a
///   function pointer), or a jump to constants outside the function;
/// - sites that cannot be patched and leave the function without timing it: conditional
///   jumps out of the function, indirect jumps analysis could not resolve, far returns.
///
/// A resolved jump-table `jmp` stays inside the function and is no exit. Tactics, in order
/// ([`exit_patch`]): a window ending with the exit; the exit as the last instruction plus the
/// padding after it; a trap (with `opts.traps`). No two patches overlap: the entry windows are
/// placed first, each exit is checked against all patches placed so far.
fn plan_exits(elf: &InputElf, an: &Analysis, plan: &mut Plan, opts: PlanOptions) {
    let mut parts: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, f) in an.functions.iter().enumerate() {
        if let FunctionKind::ColdPart { parent: Some(p) } = f.kind {
            parts.entry(p).or_default().push(i);
        }
    }
    let mut patches = Patches::default();
    for p in &plan.points {
        patches.insert(p.address, p.window_len);
    }
    for pi in 0..plan.points.len() {
        let p = &plan.points[pi];
        if p.bits & stint_layout::TIMER_BITS == 0 || p.wrap.is_some() {
            continue;
        }
        let f = &an.functions[p.function];
        let mut family = vec![p.function];
        family.extend(parts.get(&f.address).into_iter().flatten().copied());
        let ctx = ExitCtx { an, family: &family, entry: f.address, start: p.address, window: p.window_len };
        let mut exits: Vec<Exit> = Vec::new();
        let mut skipped: Vec<SkippedExit> = Vec::new();
        let mut untimed: Option<(u64, SkipReason)> = None;
        for &part in &family {
            let fp = &an.functions[part];
            let ins = decode_at(elf, fp.address, fp.size);
            let decoded = ins.last().map_or(fp.address, |x| x.next_ip());
            if decoded != fp.end() {
                untimed.get_or_insert((decoded, SkipReason::Undecodable(decoded)));
                continue;
            }
            for (k, x) in ins.iter().enumerate() {
                let (kind, found) = match ctx.classify(x) {
                    None => continue,
                    Some(c) => c,
                };
                let res = found.and_then(|()| exit_patch(&ctx, &ins, k, fp, &patches, opts));
                match res {
                    Ok((tactic, address, window_len, displaced)) => {
                        patches.insert(address, window_len);
                        exits.push(Exit {
                            point: p.id,
                            function: p.function,
                            site: x.ip(),
                            kind,
                            address,
                            window_len,
                            displaced,
                            tactic,
                        });
                    }
                    Err(reason) => {
                        untimed.get_or_insert((x.ip(), reason.clone()));
                        skipped.push(SkippedExit {
                            point: p.id,
                            function: p.function,
                            site: x.ip(),
                            kind,
                            reason,
                            fits: None,
                        });
                    }
                }
            }
        }
        match untimed {
            None => plan.exits.append(&mut exits),
            Some((site, reason)) => {
                // Patching the exits that fit would measure nothing: leave them alone.
                for x in exits {
                    patches.remove(x.address);
                    skipped.push(SkippedExit {
                        point: x.point,
                        function: x.function,
                        site: x.site,
                        kind: x.kind,
                        reason: SkipReason::NotTimed,
                        fits: Some(x.tactic),
                    });
                }
                plan.untimed.push(Untimed { point: p.id, function: p.function, site, reason });
                plan.points[pi].bits &= !stint_layout::TIMER_BITS;
            }
        }
        skipped.sort_by_key(|x| x.site);
        plan.skipped_exits.append(&mut skipped);
    }
}

/// Imports whose calls stay as they are, and why: [`SkipReason::ReturnAddressSensitive`]
/// (`dlsym(RTLD_NEXT)` and `dlopen` find the calling object by the return address; the
/// others return twice, the second time into a trampoline frame that is gone).
const RETURN_ADDRESS_IMPORTS: [&str; 14] = [
    "dlopen",
    "dlmopen",
    "dlsym",
    "dlvsym",
    "fork",
    "vfork",
    "clone",
    "setjmp",
    "_setjmp",
    "sigsetjmp",
    "__sigsetjmp",
    "getcontext",
    "swapcontext",
    "__tls_get_addr",
];

/// One point per imported function the spec selects, and a patched call site for each call
/// into it (D19). Call sites are every `call rel32` to a PLT stub and every `call
/// [rip+slot]` through a GOT slot whose relocation names a symbol (`-fno-plt`, Rust), in
/// every function and cold part (found by a linear sweep, like exits). The patch is the
/// call instruction alone (5 or 6 bytes); nothing but its first byte can be a branch target.
///
/// A site is left alone, with the reason, when:
/// - the import has a thread-library wrapper point (D4: the wrapper already measures it;
///   without one, as in `-fno-plt` programs, its calls are an import like any other),
///   never returns, reads its return address or returns twice;
/// - the caller's LSDA sends exceptions passing the call to a landing pad, or has no
///   call-site row for it (`noexcept`: terminate): while the import runs, the return
///   address lies in the trampoline, whose FDE has no LSDA, so the personality routine would
///   not see the caller's handlers. Calls covered by a row without a landing pad are fine;
///   so are callers without an LSDA (C, or C++ with nothing to clean up);
/// - the caller has no FDE in a program that has them (the trampoline's CFI is the
///   caller's at the call), the program is marked for CET shadow stacks, or the call
///   overlaps another patch.
fn plan_imports(elf: &InputElf, an: &Analysis, spec: &Spec, plan: &mut Plan, opts: PlanOptions) {
    let mut by_stub: HashMap<u64, (u64, &str)> = HashMap::new();
    for s in &an.plt_stubs {
        by_stub.insert(s.address, (s.address, s.name.as_str()));
    }
    let mut patches = Patches::default();
    for p in &plan.points {
        patches.insert(p.address, p.window_len);
    }
    for x in &plan.exits {
        patches.insert(x.address, x.window_len);
    }
    let has_unwind = an.functions.iter().any(|f| f.has_unwind);
    // The imports with a wrapper point, looked up per call site (a scan of every point per
    // site made this pass quadratic: 30 % of rewriting gdb, issue 14).
    let wrapped: HashSet<String> = plan.points.iter().filter_map(|p| Some(p.wrap.as_ref()?.name.clone())).collect();
    // Point ids by symbol, created on the first selected call.
    let mut ids: HashMap<String, u32> = HashMap::new();
    for (fi, f) in an.functions.iter().enumerate() {
        let ins = decode_at(elf, f.address, f.size);
        if ins.last().map_or(f.address, |x| x.next_ip()) != f.end() {
            continue;
        }
        for x in ins.iter().filter(|x| is_call(x)) {
            let Some((address, symbol)) = import_callee(an, &by_stub, x) else { continue };
            let name = crate::analysis::demangle(symbol);
            let skip = |reason| SkippedImportSite { function: fi, site: x.ip(), name: name.clone(), address, reason };
            let reason = if wrapped.contains(symbol) {
                Some(SkipReason::Wrapped)
            } else if crate::analysis::is_noreturn_import(symbol) {
                Some(SkipReason::NoReturn)
            } else if RETURN_ADDRESS_IMPORTS.contains(&symbol) {
                Some(SkipReason::ReturnAddressSensitive)
            } else {
                None
            };
            if let Some(reason) = reason {
                plan.skipped_import_sites.push(skip(reason));
                continue;
            }
            let bits = spec.bits_for(&name);
            if bits == 0 {
                continue; // not selected: not listed, like functions the spec leaves out
            }
            let reason = if opts.shadow_stack {
                Some(SkipReason::ShadowStack)
            } else if has_unwind && !f.has_unwind {
                Some(SkipReason::NoUnwindInfo)
            } else if let Some(r) = lsda_reason(an, f.address, x) {
                Some(r)
            } else if let Some(t) = an.branch_targets.range(x.ip() + 1..x.next_ip()).next() {
                Some(SkipReason::BranchTarget(*t))
            } else {
                patches.overlap(x.ip(), x.len() as u64).map(SkipReason::Overlap)
            };
            if let Some(reason) = reason {
                plan.skipped_import_sites.push(skip(reason));
                continue;
            }
            let id = *ids.entry(symbol.to_string()).or_insert_with(|| {
                let id = plan.points.len() as u32;
                plan.points.push(Point {
                    id,
                    function: usize::MAX,
                    address,
                    window_len: 0,
                    displaced: Vec::new(),
                    emulate_call: false,
                    tactic: Tactic::Window,
                    bits,
                    wrap: None,
                    import: Some(Import { symbol: symbol.to_string(), name: name.clone(), address }),
                });
                id
            });
            patches.insert(x.ip(), x.len() as u64);
            plan.import_sites.push(ImportSite { point: id, function: fi, call: *x });
        }
    }
    plan.import_sites.sort_by_key(ImportSite::address);
    plan.skipped_import_sites.sort_by_key(|s| s.site);
    // Tail jumps of timed functions into imports (D17).
    for x in &plan.exits {
        if x.kind != ExitKind::TailJump || plan.points[x.point as usize].bits & stint_layout::TIMER_BITS == 0 {
            continue;
        }
        let Some(j) = x.displaced.last() else { continue };
        if let Some((_, symbol)) = import_callee(an, &by_stub, j) {
            let name = crate::analysis::demangle(symbol);
            let called = REGISTER_ARGS_IMPORTS.contains(&symbol)
                && matches!(j.code(), Code::Jmp_rel32_64 | Code::Jmp_rel8_64 | Code::Jmp_rm64);
            plan.tail_imports.push(TailImport { point: x.point, site: x.site, name, called });
        }
    }
}

/// The import a `call` or `jmp` instruction transfers to: (its address for reports, symbol).
fn import_callee<'a>(
    an: &'a Analysis,
    by_stub: &HashMap<u64, (u64, &'a str)>,
    x: &Instruction,
) -> Option<(u64, &'a str)> {
    match x.code() {
        Code::Call_rel32_64 | Code::Jmp_rel32_64 | Code::Jmp_rel8_64 => by_stub.get(&x.near_branch_target()).copied(),
        Code::Call_rm64 | Code::Jmp_rm64 if x.is_ip_rel_memory_operand() => {
            let slot = x.ip_rel_memory_address();
            let name = an.got_imports.get(&slot)?;
            // Prefer the PLT stub's address when the import also has one.
            let addr = an.plt_stubs.iter().find(|s| s.got_slot == slot).map_or(slot, |s| s.address);
            Some((addr, name.as_str()))
        }
        _ => None,
    }
}

/// Why the caller's LSDA forbids moving the call `x` of the function at `func` (see
/// [`plan_imports`]); None if it allows it or the function has none. The personality routine
/// looks up the return address minus one.
fn lsda_reason(an: &Analysis, func: u64, x: &Instruction) -> Option<SkipReason> {
    let sites = an.lsda_sites.get(&func)?;
    let pc = x.next_ip() - 1;
    match sites.iter().find(|s| s.start <= pc && pc < s.end) {
        None => Some(SkipReason::NotInCallSiteTable),
        Some(s) => s.pad.map(SkipReason::LandingPad),
    }
}

/// Byte ranges patched so far, by start.
#[derive(Default)]
struct Patches(BTreeMap<u64, u64>);

impl Patches {
    fn insert(&mut self, at: u64, len: u64) {
        self.0.insert(at, at + len);
    }
    fn remove(&mut self, at: u64) {
        self.0.remove(&at);
    }
    /// The start of a patch that overlaps `[at, at + len)`.
    fn overlap(&self, at: u64, len: u64) -> Option<u64> {
        let end = at + len;
        self.0.range(..end).next_back().filter(|(_, &e)| e > at).map(|(&s, _)| s)
    }
}

/// What `plan_exits` knows about the function whose exits it looks for.
struct ExitCtx<'a> {
    an: &'a Analysis,
    /// The function and its cold parts (indices into `an.functions`).
    family: &'a [usize],
    /// The function's address, and where its entry window starts (after `endbr64`).
    entry: u64,
    start: u64,
    /// Length of the entry patch.
    window: u64,
}

impl ExitCtx<'_> {
    fn in_family(&self, t: u64) -> bool {
        self.family.iter().any(|&i| self.an.functions[i].contains(t))
    }

    /// Control reaching `t` has left the function: outside it and its cold parts, or a
    /// jump back to its entry (which runs the entry point again).
    fn leaves(&self, t: u64) -> bool {
        !self.in_family(t) || t == self.entry || t == self.start
    }

    /// For a jump to `t` that leaves: a tail call goes to a function's entry (or a PLT
    /// stub). A cold part of another function is no callee, and a jump into the middle of a
    /// function is no call: most likely it enters a cold part analysis did not link to us,
    /// whose `ret`s we would not see.
    fn callee(&self, t: u64) -> Result<(), SkipReason> {
        match self.an.function_at(t) {
            Some(_) if self.in_family(t) => Ok(()), // our own entry
            Some(g) if g.is_cold_part() => Err(SkipReason::IntoOtherColdPart(g.address)),
            Some(g) if t != g.address && !(g.has_endbr && t == g.address + 4) => {
                Err(SkipReason::IntoFunctionInterior(g.address))
            }
            _ => Ok(()),
        }
    }

    /// Whether `x` is an exit site: its kind, and whether it can be patched at all.
    fn classify(&self, x: &Instruction) -> Option<(ExitKind, Result<(), SkipReason>)> {
        let target = match x.op0_kind() {
            OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => Some(x.near_branch_target()),
            _ => None,
        };
        match x.flow_control() {
            FlowControl::Return if x.mnemonic() == Mnemonic::Ret => Some((ExitKind::Ret, Ok(()))),
            FlowControl::Return => {
                Some((ExitKind::Ret, Err(SkipReason::Unrelocatable(x.ip(), format!("{:?}", x.mnemonic())))))
            }
            FlowControl::UnconditionalBranch => {
                let t = target?;
                self.leaves(t).then(|| (ExitKind::TailJump, self.callee(t)))
            }
            FlowControl::ConditionalBranch => {
                let t = target?;
                let why = self.callee(t).err().unwrap_or(SkipReason::ConditionalTailCall);
                self.leaves(t).then_some((ExitKind::TailJump, Err(why)))
            }
            FlowControl::IndirectBranch => match self.an.indirect_jumps.get(&x.ip()) {
                Some(IndirectJump::Table) => None,
                Some(&IndirectJump::Constant(a, b)) => {
                    let out = std::iter::once(a).chain(b).find(|&t| self.leaves(t))?;
                    Some((ExitKind::TailJump, self.callee(out)))
                }
                Some(IndirectJump::TailCall) => Some((ExitKind::TailJump, Ok(()))),
                Some(IndirectJump::Unresolved) | None => {
                    Some((ExitKind::TailJump, Err(SkipReason::UnresolvedIndirectJump)))
                }
            },
            _ => None,
        }
    }
}

/// A patch: tactic, first byte, length, displaced instructions.
type ExitPatch = (Tactic, u64, u64, Vec<Instruction>);

/// Choose the tactic for the exit `ins[k]` of part `fp` (see `plan_exits`).
fn exit_patch(
    ctx: &ExitCtx,
    ins: &[Instruction],
    k: usize,
    fp: &Function,
    patches: &Patches,
    opts: PlanOptions,
) -> Result<ExitPatch, SkipReason> {
    let x = ins[k];
    if x.ip() >= ctx.start && x.ip() - ctx.start < ctx.window {
        return Err(SkipReason::ExitInEntryWindow);
    }
    let window = exit_window(ctx.an, ins, k, 0, patches);
    let padding = dead_after(ctx.an, ins, k, fp);
    let padded = if padding > 0 { exit_window(ctx.an, ins, k, padding, patches).ok() } else { None };
    let padded = padded.map(|(i, _)| (Tactic::WindowPadding, ins[i].ip(), JMP_LEN, ins[i..=k].to_vec()));
    let reason = match window {
        // A window that takes in a loop's back edge (`dec ecx; jne .Lloop; ret`) runs every
        // iteration through the trampoline: correct, but slow. Padding avoids that.
        Ok((i, _)) if loops_back(&ins[i..k], fp) && padded.as_ref().is_some_and(|p| !loops_back(&p.3, fp)) => {
            return Ok(padded.expect("checked"));
        }
        Ok((i, len)) => return Ok((Tactic::Window, ins[i].ip(), len, ins[i..=k].to_vec())),
        Err(r) => r,
    };
    if let Some(p) = padded {
        return Ok(p);
    }
    if opts.traps {
        check_relocatable(&x)?;
        if patches.overlap(x.ip(), 1).is_none() {
            return Ok((Tactic::Trap, x.ip(), 1, vec![x]));
        }
    }
    Err(reason)
}

/// Bytes after the exit `ins[k]` (which never falls through) that nothing executes: the
/// alignment `nop`s (or `int3`s) up to the next branch target or other instruction, and if they
/// run to the end of the part, the padding after it.
fn dead_after(an: &Analysis, ins: &[Instruction], k: usize, fp: &Function) -> u64 {
    let mut n = 0;
    for x in &ins[k + 1..] {
        if !matches!(x.mnemonic(), Mnemonic::Nop | Mnemonic::Int3)
            || an.branch_targets.range(x.ip()..x.next_ip()).next().is_some()
        {
            return n;
        }
        n += x.len() as u64;
    }
    n + fp.padding
}

/// The shortest run `ins[i..=k]` of whole instructions ending with the exit `ins[k]` that,
/// with `padding` bytes after `ins[k]`, covers `JMP_LEN` bytes: no instruction but the first
/// is a branch target, none before the exit is a call or ends control flow, all can be
/// relocated, and no byte of the patch is already patched. Returns `i` and the run's length.
fn exit_window(
    an: &Analysis,
    ins: &[Instruction],
    k: usize,
    padding: u64,
    patches: &Patches,
) -> Result<(usize, u64), SkipReason> {
    check_relocatable(&ins[k])?;
    let mut i = k;
    let mut len = ins[k].len() as u64;
    loop {
        let at = ins[i].ip();
        if len + padding >= JMP_LEN {
            let patch = len.max(JMP_LEN);
            return match patches.overlap(at, patch) {
                Some(o) => Err(SkipReason::Overlap(o)),
                None => Ok((i, len)),
            };
        }
        // Growing the run makes `ins[i]` an inner instruction.
        if an.branch_targets.contains(&at) {
            return Err(SkipReason::BranchTarget(at));
        }
        let Some(prev) = i.checked_sub(1).map(|j| &ins[j]) else {
            return Err(SkipReason::ExitTooSmall);
        };
        if prev.next_ip() != at || ends_flow(prev) || is_call(prev) {
            return Err(SkipReason::ExitTooSmall);
        }
        check_relocatable(prev)?;
        i -= 1;
        len += prev.len() as u64;
    }
}

/// Some branch in `run` goes back to its first instruction or before it in part `fp`: a
/// loop through the run.
fn loops_back(run: &[Instruction], fp: &Function) -> bool {
    let Some(start) = run.first().map(Instruction::ip) else { return false };
    run.iter().any(|x| {
        matches!(x.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64)
            && (fp.address..=start).contains(&x.near_branch_target())
    })
}

fn is_call(i: &Instruction) -> bool {
    matches!(i.flow_control(), FlowControl::Call | FlowControl::IndirectCall)
}

/// The trap tactic for an entry: `int3` on the first instruction at `start`.
fn entry_trap(elf: &InputElf, f: &Function, start: u64) -> Result<Window, SkipReason> {
    let end = f.end();
    if start >= end {
        return Err(SkipReason::TooSmall);
    }
    let first = decode_at(elf, start, (end - start).min(15)).first().copied().ok_or(SkipReason::Undecodable(start))?;
    check_relocatable(&first)?;
    if is_call(&first) {
        return Err(SkipReason::Unrelocatable(start, "call under a trap".into()));
    }
    Ok((1, vec![first], false, Tactic::Trap))
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

#[cfg(test)]
mod tests;
