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
//! Thread-library imports get wrapper points (D4) after the exits: their PLT stubs
//! ([`plan_wraps`]) and their `call`/`jmp [rip+GOT]` sites ([`plan_got_wraps`]) lead to a
//! wrapper thunk.
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
    /// Exit: the exit instruction lies in the function's entry window (tiny functions, whose
    /// entry window is stretched to their `ret` when it can be): the entry trampoline runs the
    /// exit instrumentation before the displaced exit. The exit patches nothing itself.
    #[serde(rename = "entry+exit")]
    EntryExit,
    /// Exit: fewer than 5 bytes end at the exit (`leave; ret` at a jump target, a `ret` plus
    /// one byte of padding), but at least 2: they become `jmp rel8` to a 5-byte *slot* within
    /// reach that holds `jmp rel32` to the exit trampoline. Slots are dead bytes: the tail of
    /// an entry window after its `jmp rel32`, padding after a function, alignment `nop`s
    /// after an unconditional transfer (E9Patch's T1/T2 idea with dead space instead of
    /// punned instructions).
    #[serde(rename = "jmp8+slot")]
    Rel8Slot,
    /// Exit: a short run ending at the exit (a lone `ret`, `xor eax, eax; ret`) that starts
    /// right after an unconditional transfer, so that only jumps enter it, and only direct
    /// `jmp rel32` / `jcc rel32` instructions of the function reach: their displacements are
    /// changed to lead to the exit trampoline; the run itself stays as it is.
    #[serde(rename = "retarget")]
    Retarget,
    /// Exit: a run ending at the exit with branch targets inside it (`pop rbx; ret` where
    /// `ret` is a jump target, `xor eax, eax; pop rbx; ret` entered both by falling through
    /// and by jumps). Every target inside the run is reached only by direct jumps of the
    /// function or its cold parts, and each of those is redirected ([`Exit::redirects`]) to
    /// the trampoline's copy of its target: a `jmp rel32` / `jcc rel32` gets a new
    /// displacement, a `jmp rel8` / `jcc rel8` a new rel8 to a 5-byte slot within its reach
    /// that holds `jmp rel32` to the copy. The run itself gets a `jmp rel32` window (with the
    /// padding after the exit if need be), or a `jmp rel8` to a slot when it has 2–4 bytes,
    /// or nothing when only jumps enter it.
    #[serde(rename = "window+jumps")]
    WindowJumps,
    /// Exit: a conditional tail call (`jcc` to another function, clang's and GCC's `-Os`):
    /// the jump is led to an exit trampoline that runs the exit instrumentation and then
    /// jumps to the callee; the path that stays in the function is not touched (see
    /// [`jcc_tail`]). Nothing is patched at the exit itself.
    #[serde(rename = "jcc+exit")]
    JccTail,
    /// Exit: as [`Tactic::WindowJumps`] with nothing patched at the run (only jumps enter
    /// it), where the run is also a case of jump tables (`mov al, 3; ret` after a `ret`):
    /// every table entry that leads to the run is rewritten to lead to the trampoline's copy
    /// of its target ([`Redirect::table`]; see [`table_jumps`]). As a site of a placed
    /// program: one table entry, whose word gets the site's target.
    #[serde(rename = "table+jumps")]
    TableJumps,
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
            Tactic::EntryExit => "entry+exit",
            Tactic::Rel8Slot => "jmp8+slot",
            Tactic::Retarget => "retarget",
            Tactic::WindowJumps => "window+jumps",
            Tactic::JccTail => "jcc+exit",
            Tactic::TableJumps => "table+jumps",
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
    /// Import call site: an exception passing this call stops at the handler at this address
    /// (a `catch`, or an exception specification), and the caller's row cannot be restated
    /// in the trampoline's exception table for the reason given (an encoding of the type
    /// table it does not convert, a malformed table: [`crate::unwind::CatchRow`]).
    CatchHandler(u64, String),
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
            SkipReason::CatchHandler(a, why) => {
                write!(f, "call covered by the handler at 0x{a:x} (catch), not restated: {why}")
            }
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
    /// `window_len` are its PLT stub's `jmp [rip+slot]` (for an import with no PLT stub,
    /// called only through the GOT: the slot and 0), `function` is `usize::MAX`.
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

/// A call from the program into an import, patched (D19): the `call` becomes `call rel32` to
/// a trampoline (after `nop`s, ending where the call ended: the same return address), which
/// counts and jumps to the callee, or when timed makes the same call with the same stack
/// between the import point's entry and exit instrumentation
/// ([`crate::codegen::import_trampoline`]).
#[derive(Clone, Debug)]
pub struct ImportSite {
    /// Id of the import's [`Point`].
    pub point: u32,
    /// Index into `Analysis::functions` of the calling function (or cold part).
    pub function: usize,
    /// The `call rel32` (to a PLT stub) or `call [rip+slot]`, decoded at its address.
    pub call: Instruction,
    /// What the caller's LSDA does with an exception passing the call.
    pub eh: SiteEh,
}

/// What the caller's exception table (LSDA) does with an exception that passes an import call
/// site. While a timed call runs, the callee returns into the trampoline, so the unwinder
/// looks up the trampoline's FDE instead of the caller's: the unwind pass gives that FDE the
/// caller's personality routine and an exception table with the same answer
/// ([`crate::unwind`]). At the trampoline's call the registers and the stack pointer are the
/// caller's at its own call, so a landing pad entered from there runs as it would have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiteEh {
    /// The caller has no LSDA, or its row for the call has no landing pad: the exception
    /// passes on to the caller's caller, with or without the trampoline's frame.
    Pass,
    /// No row covers the call (a `noexcept` function, or a call the compiler knew could not
    /// throw): an exception reaching it terminates the program.
    Terminate,
    /// The row's landing pad at this address is a cleanup only (destructors; action 0).
    Cleanup(u64),
    /// The row's landing pad `pad` has handlers that catch (or an exception specification):
    /// the action chain starting at `action` (1 + its offset in the action table) of the
    /// caller's LSDA at `lsda` is restated with the type-table entries it uses
    /// ([`crate::unwind::CatchRow`]).
    Catch { pad: u64, lsda: u64, action: u64 },
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
    /// Address of the PLT stub (its `endbr64` if it has one): what callers call; for an
    /// import with no PLT stub, its GOT slot (the address reports show). In a static
    /// program: the function's own address.
    pub stub: u64,
    /// The GOT slot the stub jumps through; the wrapper calls the real function through it,
    /// so lazy binding keeps working. 0 in a static program: the point's displaced entry
    /// window (`PieceKind::WrapReal`) runs the real function.
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
    /// [`Tactic::Rel8Slot`]: the 5-byte slot the `jmp rel8` at `address` leads to, which
    /// gets `jmp rel32` to the trampoline.
    pub slot: Option<u64>,
    /// [`Tactic::Retarget`]: (address, length) of every jump whose rel32 now leads to the
    /// trampoline.
    pub retargets: Vec<(u64, u64)>,
    /// [`Tactic::WindowJumps`]: the jumps into the run, each led to the trampoline's copy of
    /// its target.
    pub redirects: Vec<Redirect>,
}

/// A direct jump of the program into the run of a [`Tactic::WindowJumps`] exit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redirect {
    /// Address and length of the jump (2: a rel8 jump, whose rel8 now leads to `slot`; else
    /// its last 4 bytes are a rel32 that now leads to the copy of `to`).
    pub jump: u64,
    pub len: u64,
    /// Its target: one of the exit's displaced instructions.
    pub to: u64,
    /// For a rel8 jump: the 5-byte slot within its reach that gets `jmp rel32` to the copy.
    pub slot: Option<u64>,
    /// For a rel8 jump with no slot in reach: the straight-line run ending with the jump (at
    /// least 5 bytes) becomes a window to a piece that runs the run relocated, the jump as a
    /// rel32 to the copy, then `jmp` back after the jump (`codegen::jump_window`).
    pub window: Vec<Instruction>,
    /// The jump is one of the function's entry window instructions (`test rdi, rdi; je
    /// .Lret`): nothing is patched in the program, the entry trampoline's copy of the jump
    /// leads to the copy (`codegen::Targets::entry_redirects`). With `len` 0 it is the entry
    /// trampoline's jump back to the window's end ([`Redirect::falls_through`]).
    pub in_entry: bool,
    /// Not a jump: a 4-byte sign-extended entry of a jump table at `jump` ([`Tactic::TableJumps`],
    /// `len` 4) whose targets are the entries plus this; it gets the copy's address minus it.
    pub table: Option<u64>,
}

impl Redirect {
    /// The entry trampoline's fall-through at the end of its window, `end`, which is the
    /// first instruction of an exit's run: the jump back the trampoline (and each entry tail)
    /// ends with leads to the exit trampoline's copy of `end` instead. `len` 0: no instruction
    /// of the program, nothing patched.
    pub fn falls_through(end: u64) -> Self {
        Redirect { jump: end, len: 0, to: end, slot: None, window: Vec::new(), in_entry: true, table: None }
    }

    /// Whether this is the entry window's fall-through ([`Redirect::falls_through`]).
    pub fn is_fall_through(&self) -> bool {
        self.in_entry && self.len == 0
    }

    /// The bytes of the program this redirect patches: its window, else the jump (for a jump
    /// in the entry window, bytes the entry point patches already).
    pub fn patch(&self) -> (u64, u64) {
        match (self.window.first(), self.window.last()) {
            (Some(a), Some(b)) => (a.ip(), b.next_ip() - a.ip()),
            _ => (self.jump, self.len),
        }
    }
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
    /// Calls and jumps through the GOT slot of a wrapped import (`-fno-plt`, Rust), patched
    /// to lead to its wrapper ([`plan_got_wraps`]), in address order.
    pub wrap_sites: Vec<WrapSiteCall>,
    /// GOT slot of a wrapped import → its wrapper point: a displaced `call`/`jmp [rip+slot]`
    /// in a trampoline is redirected to the wrapper too.
    pub wrap_slots: BTreeMap<u64, u32>,
    /// Uses of a wrappable thread-library import that no wrapper sees (D4), in address order.
    pub uncovered_wraps: Vec<UncoveredWrap>,
    /// Points whose entry trampoline runs the exit instrumentation ([`Tactic::EntryExit`]):
    /// point id → the site of the exit instruction in its window.
    pub entry_exits: BTreeMap<u32, u64>,
    /// Runs moved out of the program to make slots ([`SlotWindow`]).
    pub slot_windows: Vec<SlotWindow>,
    /// Points whose entry window holds branch targets ([`Tactic::WindowJumps`] entries,
    /// `xor eax, eax; T: cmp …` or a loop back to just after the prologue): point id → every
    /// jump of the program to one of them, each led to the entry tail of its target
    /// (`codegen::entry_tail`: the window's instructions from the target on, relocated, and a
    /// jump back after the window), past the counting and timing code, so that it is no call.
    pub entry_jumps: BTreeMap<u32, Vec<Redirect>>,
    /// [`Tactic::Rel8Slot`] entries ([`plan_entry_slots`]): entry address → the 5-byte slot
    /// within `jmp rel8` reach of it that gets `jmp rel32` to the entry trampoline.
    pub entry_slots: BTreeMap<u64, u64>,
}

/// A run of at least 10 bytes of straight-line instructions that exit planning moves out of
/// the program to make a slot where no dead byte is in `jmp rel8` reach (E9Patch's
/// neighbour eviction): its first 5 bytes become `jmp rel32` to a piece that runs the run
/// relocated and jumps back after it (`codegen::slot_window`); the bytes after the `jmp` are
/// dead, and a slot. No byte after its first is a branch target (return addresses and
/// landing pads included), so nothing but its start is ever reached.
#[derive(Clone, Debug)]
pub struct SlotWindow {
    pub displaced: Vec<Instruction>,
}

impl SlotWindow {
    /// Address and length of the patch.
    pub fn patch(&self) -> (u64, u64) {
        let start = self.displaced.first().map_or(0, Instruction::ip);
        (start, self.displaced.last().map_or(start, Instruction::next_ip) - start)
    }
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
    let first = plan_pass(elf, analysis, spec, opts, false);
    if needs_static_signal_pass(elf, &first) {
        return plan_pass(elf, analysis, spec, opts, true);
    }
    first
}

/// One planning pass; `static_signals`: a static program's signal functions get wrapper
/// entries ([`needs_static_signal_pass`]).
fn plan_pass(elf: &InputElf, analysis: &Analysis, spec: &Spec, opts: PlanOptions, static_signals: bool) -> Plan {
    let mut plan = Plan::default();
    // Functions too small for an entry window (index, metric bits): [`plan_entry_slots`].
    let mut tiny: Vec<(usize, u8)> = Vec::new();
    // Compilers emit an FDE for every function on x86-64; in a program that has them, code
    // without one is hand-written or generated.
    let has_unwind = analysis.functions.iter().any(|f| f.has_unwind);
    let static_wraps = static_wrapped_functions(elf);
    let start_of = |f: &Function| if f.has_endbr { f.address + 4 } else { f.address };
    // Each function's selection and entry window on every core (they depend on the function
    // alone); `None`: not a point, for the reason the loop below finds.
    let entries = crate::par::map(
        &analysis.functions,
        || (),
        |_, f| {
            let bits = spec.bits_for(&f.name);
            if f.is_cold_part() || bits == 0 || (has_unwind && !f.has_unwind && !static_libc_without_cfi(elf, &f.name))
            {
                return None;
            }
            let start = start_of(f);
            let planned = entry_window(elf, analysis, f, start, opts, true).or_else(|reason| {
                // A trap needs only the first instruction and changes only its first byte, so it
                // also serves functions whose other instructions may be branch targets. (A
                // function too small for a window first tries a slot: [`plan_entry_slots`].)
                if opts.traps && reason != SkipReason::TooSmall {
                    entry_trap(elf, f, start).map_err(|_| reason)
                } else {
                    Err(reason)
                }
            });
            Some((bits, planned))
        },
    );
    for ((i, f), entry) in analysis.functions.iter().enumerate().zip(entries) {
        if f.is_cold_part() {
            continue; // never a call: counted under its parent's entry
        }
        let start = start_of(f);
        if let Some(&func) = static_wraps.get(&f.address) {
            if plan_static_wrap(elf, analysis, spec, &mut plan, (i, f), start, func, (opts, static_signals)) {
                continue;
            }
        }
        let Some((bits, planned)) = entry else {
            let reason = if spec.bits_for(&f.name) == 0 { SkipReason::NotSelected } else { SkipReason::NoUnwindInfo };
            plan.skipped.push(Skipped { function: i, address: start, reason });
            continue;
        };
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
            Err(reason) => {
                if reason == SkipReason::TooSmall {
                    tiny.push((i, bits));
                }
                plan.skipped.push(Skipped { function: i, address: start, reason })
            }
        }
    }
    plan_exits(elf, analysis, &mut plan, opts, &tiny);
    let signals = static_signals || trap_sites(&plan) > 0;
    plan_wraps(elf, analysis, spec, &mut plan, signals);
    // Each function decoded once, on every core, for both passes below.
    let refs = import_refs(elf, analysis);
    plan_got_wraps(analysis, spec, &mut plan, signals, &refs);
    plan_imports(elf, analysis, spec, &mut plan, opts, &refs);
    plan
}

/// A wrapper point for every PLT stub of a thread-library function the spec selects (D4), and of
/// every process function (`exit`, `wait*`: D22, always).
/// The stub's `jmp [rip+slot]` (6 bytes, 7 with a `bnd` prefix, after `endbr64` in
/// `.plt.sec`) becomes `jmp wrapper_thunk` + nops; the code after it (`push n; jmp .plt`,
/// reached through the GOT until lazy binding resolves the slot) is untouched.
fn plan_wraps(elf: &InputElf, an: &Analysis, spec: &Spec, plan: &mut Plan, signals: bool) {
    for stub in &an.plt_stubs {
        let Some(func) = stint_layout::wrap_id(&stub.name) else { continue };
        let bits = wrap_bits(spec, &stub.name, signals);
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

/// A `call [rip+slot]` or `jmp [rip+slot]` through the GOT slot of a wrapped import, patched
/// in place to a direct transfer to the wrapper's thunk (D4):
/// ```text
/// before   ff 15 <slot>      call [rip+slot]         ; 6 bytes (7 with a prefix)
/// after    90 e8 <thunk>     nop; call thunk         ; the return address is unchanged
/// before   ff 25 <slot>      jmp  [rip+slot]         ; a tail call
/// after    e9 <thunk> cc     jmp  thunk; int3
/// ```
/// The nops come first so that the return address the call pushes is the original one: the
/// caller's CFI, its LSDA call-site row, backtraces and the wrapper's "first used in" see the
/// program's own call.
#[derive(Clone, Debug)]
pub struct WrapSiteCall {
    /// Id of the wrapper [`Point`].
    pub point: u32,
    /// Index into `Analysis::functions` of the calling function (or cold part).
    pub function: usize,
    /// The original instruction, decoded at its address.
    pub insn: Instruction,
}

impl WrapSiteCall {
    pub fn address(&self) -> u64 {
        self.insn.ip()
    }
    /// Bytes the patch covers: the instruction.
    pub fn window_len(&self) -> u64 {
        self.insn.len() as u64
    }
    /// A call (else a tail jump).
    pub fn is_call(&self) -> bool {
        self.insn.flow_control() == FlowControl::IndirectCall
    }
}

/// A use of a wrappable thread-library import that its wrapper does not see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UncoveredWrap {
    /// The imported symbol.
    pub name: String,
    /// The instruction that uses its GOT slot.
    pub site: u64,
    /// The calling function (index into `Analysis::functions`; `usize::MAX` for
    /// [`Uncovered::NoUseFound`]).
    pub function: usize,
    pub why: Uncovered,
}

/// Why a use of a wrapped import's GOT slot is not redirected to the wrapper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Uncovered {
    /// The slot is loaded into a register or memory (`mov r15, [rip+slot]` … `call r15`):
    /// the call goes through a pointer the rewriter does not follow.
    Pointer,
    /// A byte of the instruction after its first is a branch target.
    BranchTarget(u64),
    /// The instruction overlaps a patch without lying inside it.
    Overlap(u64),
    /// The import has a GOT slot but no instruction of the decoded code uses it (it is called
    /// through a pointer stored elsewhere, or from code that could not be decoded); `site` is
    /// the slot.
    NoUseFound,
}

/// Why, without the import's name or the site: "GOT slot read into a pointer".
impl std::fmt::Display for UncoveredWrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.why {
            Uncovered::Pointer => f.write_str("GOT slot read into a pointer"),
            Uncovered::BranchTarget(t) => write!(f, "branch target 0x{t:x} inside the call"),
            Uncovered::Overlap(a) => write!(f, "overlaps the patch at 0x{a:x}"),
            Uncovered::NoUseFound => write!(f, "no call through its GOT slot 0x{:x} found", self.site),
        }
    }
}

/// Wrappers for thread-library imports called through the GOT (D4): `-fno-plt` C and Rust's
/// std call `[rip+slot]` and never pass the PLT stub [`plan_wraps`] redirects.
///
/// Every `call`/`jmp [rip+slot]` through the GOT slot of an import the spec wraps gets a
/// [`WrapSiteCall`] (the call site itself is patched; the slot is not touched) leading to the
/// same thunk as the import's PLT stub, if it has one, so PLT and GOT callers are counted
/// once per call by one point; an import with no PLT stub gets a wrapper point of its own
/// (`address` = `stub` = the GOT slot, `window_len` 0: it patches nothing itself). A site
/// inside an entry or exit window is not patched: it moves into the trampoline, where
/// codegen redirects it to the thunk as well (`Plan::wrap_slots`).
///
/// Why the call sites rather than the GOT slot: a slot redirected at start would change the
/// value `&pthread_mutex_lock` has in the program (no longer equal to the libraries' or
/// `dlsym`'s), needs RELRO unprotected, and a lazily bound `.got.plt` slot is overwritten by
/// the dynamic linker's resolver on the first call. What call-site patching misses is a slot
/// loaded into a register (`mov r15, [rip+slot]`, hoisted out of a loop) and called
/// through it: those are listed in `Plan::uncovered_wraps` and reported.
fn plan_got_wraps(an: &Analysis, spec: &Spec, plan: &mut Plan, signals: bool, refs: &ImportRefs) {
    // Wrapped slots: slot -> (WRAP_* id, symbol, bits).
    let mut slots: BTreeMap<u64, (u32, &str, u8)> = BTreeMap::new();
    for (&slot, name) in &an.got_imports {
        let Some(func) = stint_layout::wrap_id(name) else { continue };
        let bits = wrap_bits(spec, name, signals);
        if bits != 0 {
            slots.insert(slot, (func, name.as_str(), bits));
        }
    }
    if slots.is_empty() {
        return;
    }
    // What each patch displaces (a trap patches one byte but moves its whole instruction).
    let moved =
        |at: u64, len: u64, displaced: &[Instruction]| len.max(displaced.last().map_or(0, |d| d.next_ip() - at));
    let mut patches = Patches::inserted(
        (plan.points.iter().filter(|p| p.window_len > 0))
            .map(|p| (p.address, moved(p.address, p.window_len, &p.displaced)))
            .chain(plan.exits.iter().map(|x| (x.address, moved(x.address, x.window_len, &x.displaced)))),
    );
    let mut used = std::collections::BTreeSet::new();
    // The wrapper point of an import: its PLT stub's, or a new one on its first use.
    let point_of = |plan: &mut Plan, slot: u64, (func, name, bits): (u32, &str, u8)| -> u32 {
        if let Some(p) = plan.points.iter().find(|p| p.wrap.as_ref().is_some_and(|w| w.name == name)) {
            return p.id;
        }
        let id = plan.points.len() as u32;
        plan.points.push(Point {
            id,
            function: usize::MAX,
            address: slot,
            window_len: 0,
            displaced: Vec::new(),
            emulate_call: false,
            tactic: Tactic::Window,
            bits,
            wrap: Some(Wrap { func, name: name.to_string(), stub: slot, got_slot: slot }),
            import: None,
        });
        id
    };
    // The RIP-relative instructions of each function, in order (those of a named GOT slot:
    // the others are no slot of `slots`).
    for (fi, ins) in refs.iter().enumerate() {
        let Some(ins) = ins else { continue };
        for x in ins.iter().filter(|x| x.is_ip_rel_memory_operand()) {
            let slot = x.ip_rel_memory_address();
            let Some(&w) = slots.get(&slot) else { continue };
            used.insert(slot);
            let uncovered = |why| UncoveredWrap { name: w.1.to_string(), site: x.ip(), function: fi, why };
            if !matches!(x.code(), Code::Call_rm64 | Code::Jmp_rm64) || (x.len() as u64) < JMP_LEN + 1 {
                plan.uncovered_wraps.push(uncovered(Uncovered::Pointer));
                continue;
            }
            let (ip, len) = (x.ip(), x.len() as u64);
            if let Some((&at, &end)) = patches.0.range(..ip + len).next_back().filter(|(_, &end)| end > ip) {
                if at <= ip && ip + len <= end {
                    // Displaced into a trampoline, which calls the thunk (wrap_slots).
                    let id = point_of(plan, slot, w);
                    plan.wrap_slots.insert(slot, id);
                } else {
                    plan.uncovered_wraps.push(uncovered(Uncovered::Overlap(at)));
                }
                continue;
            }
            if let Some(t) = an.branch_targets.range(ip + 1..ip + len).next() {
                plan.uncovered_wraps.push(uncovered(Uncovered::BranchTarget(*t)));
                continue;
            }
            let id = point_of(plan, slot, w);
            plan.wrap_slots.insert(slot, id);
            patches.insert(ip, len);
            plan.wrap_sites.push(WrapSiteCall { point: id, function: fi, insn: *x });
        }
    }
    // A slot no instruction uses, of an import with no PLT stub that the wrapper covers.
    for (&slot, &(_, name, _)) in slots.iter().filter(|(s, _)| !used.contains(*s)) {
        if !an.plt_stubs.iter().any(|s| s.got_slot == slot || s.name == name) {
            let why = Uncovered::NoUseFound;
            plan.uncovered_wraps.push(UncoveredWrap { name: name.to_string(), site: slot, function: usize::MAX, why });
        }
    }
    // The GOT slot of a PLT stub's wrapper (JUMP_SLOT) leads to the same thunk.
    for p in &plan.points {
        if let Some(w) = p.wrap.as_ref().filter(|_| p.window_len > 0) {
            plan.wrap_slots.insert(w.got_slot, p.id);
        }
    }
    plan.wrap_sites.sort_by_key(WrapSiteCall::address);
    plan.uncovered_wraps.sort_by_key(|u| u.site);
}

/// The entry points whose plain window may be stretched to make a slot (see
/// `Room::stretch`), by address: their index in `plan.points` as it stands.
fn stretchable_windows(plan: &Plan) -> BTreeMap<u64, usize> {
    (plan.points.iter().enumerate())
        .filter(|(_, p)| p.import.is_none() && p.wrap.is_none() && p.tactic == Tactic::Window)
        .map(|(i, p)| (p.address, i))
        .collect()
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
fn plan_exits(elf: &InputElf, an: &Analysis, plan: &mut Plan, opts: PlanOptions, tiny: &[(usize, u8)]) {
    let mut parts: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, f) in an.functions.iter().enumerate() {
        if let FunctionKind::ColdPart { parent: Some(p) } = f.kind {
            parts.entry(p).or_default().push(i);
        }
    }
    let mut patches = Patches::inserted(plan.points.iter().map(|p| (p.address, p.window_len)));
    // As `Slots::add_tail` of every plain entry window, then `Slots::add` of every function's
    // padding, in turn.
    let tails = (plan.points.iter())
        .filter(|p| p.import.is_none() && p.wrap.is_none() && p.tactic == Tactic::Window)
        .map(|p| (p.address + JMP_LEN, (p.address + p.window_len, true)));
    let padding = an.functions.iter().map(|f| (f.end(), (f.end() + f.padding, false)));
    let mut slots = Slots(bulk_map(tails.chain(padding).filter(|&(at, (end, _))| end >= at + JMP_LEN).collect()));
    plan_entry_slots(elf, an, plan, tiny, (&mut patches, &mut slots), opts);
    plan_entry_jumps(elf, an, plan, &parts, (&mut patches, &mut slots), opts);
    // Entry points whose window may be stretched to make a slot (see `Room::stretch`).
    let by_address = stretchable_windows(plan);
    // The points with exits to find (only a point's own timer bits change below).
    let timed: Vec<usize> = (0..plan.points.len())
        .filter(|&pi| {
            let p = &plan.points[pi];
            p.bits & stint_layout::TIMER_BITS != 0 && p.wrap.is_none() && p.import.is_none()
        })
        .collect();
    // A point's function and its cold parts.
    let family_of = |function: usize| -> Vec<usize> {
        let mut family = vec![function];
        family.extend(parts.get(&an.functions[function].address).into_iter().flatten().copied());
        family
    };
    // Decoding and the scans that depend on the function alone (its exit sites, its dead
    // bytes) are independent of the patches: the other cores do them up to
    // `EXIT_DECODE_CHUNK` points ahead while this one runs the tactics in point order.
    let timed: Vec<(usize, usize, u64)> =
        timed.into_iter().map(|pi| (pi, plan.points[pi].function, plan.points[pi].address)).collect();
    crate::par::pipeline(
        &timed,
        EXIT_DECODE_CHUNK,
        |&(_, function, address)| FamilyScan::new(elf, an, function, address, &family_of),
        |&(pi, _, _), scan| {
            plan_point_exits(elf, an, plan, opts, pi, &family_of, scan, (&by_address, &mut patches, &mut slots))
        },
    );
}

/// What [`plan_point_exits`] needs of a point's function and cold parts that does not depend
/// on the patches and slots planned so far: found on every core, ahead of the exit tactics,
/// which run in point order.
struct FamilyScan {
    /// Each part decoded, in [`ExitCtx::family`] order.
    ins: Vec<Vec<Instruction>>,
    /// Alignment `nop`s after unconditional transfers inside the parts: slots, in order.
    dead: Vec<(u64, u64)>,
    /// The exit sites of each part ([`ExitCtx::classify`]), in order; `Err` for a part that
    /// does not decode to its end, with the address where decoding stopped.
    sites: Vec<Result<Vec<ExitSite>, u64>>,
}

/// An exit site of a decoded part: its index, kind, and whether it can be patched at all.
type ExitSite = (usize, ExitKind, Result<(), SkipReason>);

impl FamilyScan {
    /// The scan of the point at `address` (after `endbr64`) of function `function`. Its entry
    /// window may still be stretched by the exits planned before it, so the scan does not
    /// read it: [`ExitCtx::classify`] depends on the function and its entry alone (tests
    /// check that it gives the same with the window: `plan_point_exits`).
    fn new(
        elf: &InputElf,
        an: &Analysis,
        function: usize,
        address: u64,
        family_of: &(dyn Fn(usize) -> Vec<usize> + Sync),
    ) -> FamilyScan {
        let family = family_of(function);
        let f = &an.functions[function];
        let ctx = ExitCtx {
            an,
            family: &family,
            entry: f.address,
            start: address,
            window: 0,
            entry_displaced: &[],
            falls: None,
        };
        let mut scan = FamilyScan { ins: Vec::with_capacity(family.len()), dead: Vec::new(), sites: Vec::new() };
        for &part in &family {
            let fp = &an.functions[part];
            let ins = decode_at(elf, fp.address, fp.size);
            for (k, x) in ins.iter().enumerate() {
                if ends_flow(x) && k + 1 < ins.len() {
                    let n = dead_after(an, &ins, k, fp);
                    scan.dead.push((x.next_ip(), (x.next_ip() + n).min(fp.end())));
                }
            }
            let decoded = ins.last().map_or(fp.address, |x| x.next_ip());
            scan.sites.push(if decoded != fp.end() {
                Err(decoded)
            } else {
                Ok(ins
                    .iter()
                    .enumerate()
                    .filter_map(|(k, x)| ctx.classify(x).map(|(kind, ok)| (k, kind, ok)))
                    .collect())
            });
            scan.ins.push(ins);
        }
        scan
    }
}

/// Entries of the functions with fewer than 5 bytes up to their first transfer (`tiny`, from
/// [`plan_pass`]: a `jmp rel8` to another function, `xor edx, edx; jmp f`, `mov eax, edi;
/// ret`, a lone `ret` with a dead byte after it): their whole instructions up to the transfer
/// ([`short_entry`], 2–4 bytes) become `jmp rel8` to a 5-byte slot within reach
/// ([`Room::slot`]: a free one, an entry window grown, a run moved out) that gets `jmp rel32`
/// to the entry trampoline ([`Plan::entry_slots`]); the trampoline runs them, the transfer
/// last, so a `ret` among them is an [`Tactic::EntryExit`] exit. With traps, a function with
/// no slot gets a trap as before. The points are added in function order and every point is
/// numbered again (nothing refers to ids yet). Shared state: the patches and slots ([`Room`]),
/// and the other points' entry windows a slot may grow ([`Room::stretch`]).
fn plan_entry_slots(
    elf: &InputElf,
    an: &Analysis,
    plan: &mut Plan,
    tiny: &[(usize, u8)],
    (patches, slots): (&mut Patches, &mut Slots),
    opts: PlanOptions,
) {
    if tiny.is_empty() {
        return;
    }
    let by_address = stretchable_windows(plan);
    let mut added: Vec<Point> = Vec::new();
    for &(fi, bits) in tiny {
        let f = &an.functions[fi];
        let start = if f.has_endbr { f.address + 4 } else { f.address };
        let mut planned = None;
        if let Some((len, displaced)) =
            short_entry(elf, an, f, start).filter(|(l, _)| patches.overlap(start, *l).is_none())
        {
            let n = plan.slot_windows.len();
            patches.insert(start, len);
            let mut room = Room::new(elf, plan, &by_address, patches, slots, opts.shadow_stack);
            match room.slot(an, &[], start + JMP8_LEN) {
                Some(slot) => planned = Some((len, displaced, Tactic::Rel8Slot, Some(slot))),
                None => {
                    room.undo_windows(n);
                    patches.remove(start);
                }
            }
        }
        if planned.is_none() && opts.traps {
            if let Ok((len, displaced, _, tactic)) = entry_trap(elf, f, start) {
                patches.insert(start, len);
                planned = Some((len, displaced, tactic, None));
            }
        }
        let Some((window_len, displaced, tactic, slot)) = planned else { continue };
        if let Some(s) = slot {
            plan.entry_slots.insert(start, s);
        }
        let point = Point {
            id: 0,
            function: fi,
            address: start,
            window_len,
            displaced,
            emulate_call: false,
            tactic,
            bits,
            wrap: None,
            import: None,
        };
        added.push(point);
    }
    if added.is_empty() {
        return;
    }
    let done: HashSet<usize> = added.iter().map(|p| p.function).collect();
    plan.skipped.retain(|s| !done.contains(&s.function));
    plan.points.append(&mut added);
    plan.points.sort_by_key(|p| p.function);
    for (i, p) in plan.points.iter_mut().enumerate() {
        p.id = i as u32;
    }
}

/// The window of a [`Tactic::Rel8Slot`] entry at `start` of `f` ([`plan_entry_slots`]): whole
/// instructions up to and including the first transfer (`ret`, `jmp`), fewer than 5 bytes, no
/// call, none but the first a branch target, all relocatable, no branch into the window past
/// its start; at least 2 bytes, or a 1-byte `ret` that ends the function followed by a dead
/// byte (padding, an alignment `nop` or `int3`, or a zero between sections).
fn short_entry(elf: &InputElf, an: &Analysis, f: &Function, start: u64) -> Option<(u64, Vec<Instruction>)> {
    let end = f.end();
    let mut out: Vec<Instruction> = Vec::new();
    for x in decode_at(elf, start, end.checked_sub(start)?.min(JMP_LEN - 1)) {
        if (x.ip() != start && an.branch_targets.contains(&x.ip())) || is_call(&x) || check_relocatable(&x).is_err() {
            return None;
        }
        out.push(x);
        if ends_flow(&x) {
            break;
        }
    }
    let last = *out.last().filter(|x| ends_flow(x))?;
    let into = |x: &Instruction| {
        matches!(x.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64)
            && (start + 1..last.next_ip()).contains(&x.near_branch_target())
    };
    if out.iter().any(into) {
        return None;
    }
    let len = last.next_ip() - start;
    if len >= JMP8_LEN {
        return Some((len, out));
    }
    // A zero byte between sections: no section, no function, no target holds it.
    let gap = || {
        elf.exec_section_at(end).is_none()
            && elf.bytes_at(f.address, end + 1 - f.address).is_some_and(|b| b.last() == Some(&0))
            && an.function_at(end).is_none()
            && !an.branch_targets.contains(&end)
    };
    let dead = last.next_ip() == end && (f.padding >= 1 || dead_nops(elf, an, end, 1) || gap());
    dead.then_some((JMP8_LEN, out))
}

/// Lead every jump to a branch target inside a [`Tactic::WindowJumps`] entry window to the
/// entry tail of its target ([`Plan::entry_jumps`]). As for an exit's run
/// ([`Tactic::WindowJumps`] exits): every target must be reached only by direct jumps of the
/// function or its cold parts, all of them found (as many as analysis counted), none patched;
/// a `jmp rel32` / `jcc rel32` gets a new displacement, a rel8 one a slot within its reach
/// ([`Room::slot`]) or its own window ([`jump_window`]). An entry that cannot have all of its
/// jumps is given up (or, with traps, becomes a trap on its first instruction); the points
/// after it are numbered again (nothing refers to their ids yet).
fn plan_entry_jumps(
    elf: &InputElf,
    an: &Analysis,
    plan: &mut Plan,
    parts: &HashMap<u64, Vec<usize>>,
    (patches, slots): (&mut Patches, &mut Slots),
    opts: PlanOptions,
) {
    let todo: Vec<usize> = (0..plan.points.len())
        .filter(|&pi| {
            let p = &plan.points[pi];
            p.tactic == Tactic::WindowJumps && p.wrap.is_none() && p.import.is_none()
        })
        .collect();
    if todo.is_empty() {
        return;
    }
    let by_address = stretchable_windows(plan);
    let mut found: BTreeMap<u64, Vec<Redirect>> = BTreeMap::new();
    let mut failed: BTreeMap<usize, SkipReason> = BTreeMap::new();
    for pi in todo {
        let p = plan.points[pi].clone();
        let f = &an.functions[p.function];
        let mut family = vec![p.function];
        family.extend(parts.get(&f.address).into_iter().flatten().copied());
        let decoded: Vec<(&Function, Vec<Instruction>)> = family
            .iter()
            .map(|&i| (&an.functions[i], decode_at(elf, an.functions[i].address, an.functions[i].size)))
            .collect();
        let targets: Vec<u64> = p
            .displaced
            .iter()
            .map(Instruction::ip)
            .filter(|&t| t != p.address && an.branch_targets.contains(&t))
            .collect();
        let mut room = Room::new(elf, plan, &by_address, patches, slots, opts.shadow_stack);
        let whole = decoded.iter().all(|(fp, ins)| ins.last().map_or(fp.address, Instruction::next_ip) == fp.end());
        match whole.then(|| entry_redirects(an, &p, &decoded, &targets, &mut room)).flatten() {
            Some(r) => {
                found.insert(p.address, r);
            }
            None => {
                failed.insert(pi, SkipReason::BranchTarget(targets.first().copied().unwrap_or(p.address)));
            }
        }
    }
    // The entries given up: their windows are not patched.
    let mut points = Vec::with_capacity(plan.points.len());
    for (pi, mut p) in std::mem::take(&mut plan.points).into_iter().enumerate() {
        match failed.remove(&pi) {
            None => points.push(p),
            Some(reason) => {
                patches.remove(p.address);
                let trap = if opts.traps { entry_trap(elf, &an.functions[p.function], p.address).ok() } else { None };
                match trap {
                    Some((window_len, displaced, emulate_call, tactic)) => {
                        patches.insert(p.address, window_len);
                        p = Point { window_len, displaced, emulate_call, tactic, ..p };
                        points.push(p);
                    }
                    None => plan.skipped.push(Skipped { function: p.function, address: p.address, reason }),
                }
            }
        }
    }
    for (i, p) in points.iter_mut().enumerate() {
        p.id = i as u32;
        if let Some(r) = found.remove(&p.address) {
            plan.entry_jumps.insert(p.id, r);
        }
    }
    plan.points = points;
}

/// The redirects of point `p`'s jumps to `targets` (see [`plan_entry_jumps`]); `None`, with
/// nothing of them patched, when one cannot be.
fn entry_redirects(
    an: &Analysis,
    p: &Point,
    family: &[(&Function, Vec<Instruction>)],
    targets: &[u64],
    room: &mut Room,
) -> Option<Vec<Redirect>> {
    let end = p.address + p.window_len;
    let mut jumps: Vec<(Instruction, u64)> = Vec::new();
    for &t in targets {
        let n = *an.jump_only.get(&t)? as usize;
        let before = jumps.len();
        for (_, part) in family {
            for j in part.iter().filter(|j| is_jump_to(j, t)) {
                let short = j.len() as u64 == JMP8_LEN;
                if !(short || is_rel32_branch(j))
                    || (p.address..end).contains(&j.ip())
                    || room.patches.overlap(j.ip(), j.len() as u64).is_some()
                {
                    return None;
                }
                jumps.push((*j, t));
            }
        }
        if jumps.len() - before != n {
            return None;
        }
    }
    let n_windows = room.windows.len();
    let redirected: Vec<u64> = jumps.iter().map(|(j, _)| j.ip()).collect();
    let mut redirects: Vec<Redirect> = Vec::with_capacity(jumps.len());
    let mut ok = true;
    // Every jump's bytes first: a slot or window of another must not take them.
    for (j, _) in &jumps {
        room.patches.insert(j.ip(), j.len() as u64);
    }
    for &(j, to) in &jumps {
        let len = j.len() as u64;
        let mut r = Redirect { jump: j.ip(), len, to, slot: None, window: Vec::new(), in_entry: false, table: None };
        if len == JMP8_LEN {
            let reach = |s: u64| (-128..=127).contains(&(s as i64 - j.next_ip() as i64));
            r.slot = redirects.iter().filter(|o| o.to == to).filter_map(|o| o.slot).find(|&s| reach(s));
            if r.slot.is_none() {
                r.slot = room.slot(an, family, j.next_ip());
            }
            if r.slot.is_none() {
                let Some((fp_j, part)) = family.iter().find(|(f, _)| f.contains(j.ip())) else {
                    ok = false;
                    break;
                };
                room.patches.remove(j.ip());
                r.window = jump_window(an, part, fp_j, j.ip(), room.patches, &redirected).unwrap_or_default();
                let (a, l) = r.patch();
                room.patches.insert(a, l);
            }
            ok = r.slot.is_some() || !r.window.is_empty();
        }
        redirects.push(r);
        if !ok {
            break;
        }
    }
    if !ok {
        for r in &redirects {
            room.patches.remove(r.patch().0);
        }
        for (j, _) in &jumps[redirects.len()..] {
            room.patches.remove(j.ip());
        }
        room.undo_windows(n_windows);
        return None;
    }
    Some(redirects)
}

/// How many points' functions [`plan_exits`] decodes ahead of its tactics at most.
const EXIT_DECODE_CHUNK: usize = 4096;

/// [`plan_exits`] for point `pi`, its family decoded and scanned (`scan`).
#[allow(clippy::too_many_arguments)]
fn plan_point_exits(
    elf: &InputElf,
    an: &Analysis,
    plan: &mut Plan,
    opts: PlanOptions,
    pi: usize,
    family_of: &(dyn Fn(usize) -> Vec<usize> + Sync),
    scan: FamilyScan,
    (by_address, patches, slots): (&BTreeMap<u64, usize>, &mut Patches, &mut Slots),
) {
    {
        // A copy: finding a slot may stretch another point's entry window.
        let p = plan.points[pi].clone();
        let f = &an.functions[p.function];
        let family = family_of(p.function);
        let ctx = ExitCtx {
            an,
            family: &family,
            entry: f.address,
            start: p.address,
            window: p.window_len,
            entry_displaced: &p.displaced,
            falls: entry_falls(&p),
        };
        let mut exits: Vec<Exit> = Vec::new();
        let n_windows = plan.slot_windows.len();
        let mut skipped: Vec<SkippedExit> = Vec::new();
        let mut untimed: Option<(u64, SkipReason)> = None;
        let FamilyScan { ins: family_ins, dead, sites } = scan;
        // Alignment nops after unconditional transfers inside the parts: slots.
        for (at, end) in dead {
            slots.add(at, end, false);
        }
        let decoded_parts: Vec<(&Function, Vec<Instruction>)> =
            family.iter().map(|&part| &an.functions[part]).zip(family_ins).collect();
        for ((fp, ins), sites) in decoded_parts.iter().zip(sites) {
            let fp = *fp;
            let sites = match sites {
                Ok(sites) => {
                    // Found before this point's entry window was final: the same with it.
                    if cfg!(test) {
                        let again =
                            ins.iter().enumerate().filter_map(|(k, x)| ctx.classify(x).map(|(d, ok)| (k, d, ok)));
                        assert_eq!(again.collect::<Vec<_>>(), sites, "exit sites of {}", fp.name);
                    }
                    sites
                }
                Err(decoded) => {
                    untimed.get_or_insert((decoded, SkipReason::Undecodable(decoded)));
                    continue;
                }
            };
            for (k, kind, found) in sites {
                let x = &ins[k];
                let res = found.and_then(|()| {
                    let mut room = Room::new(elf, plan, by_address, patches, slots, opts.shadow_stack);
                    exit_patch(&ctx, ins, k, fp, &decoded_parts, &mut room, opts)
                });
                match res {
                    Ok((tactic, address, window_len, displaced, slot, retargets, redirects)) => {
                        for &(j, len) in &retargets {
                            patches.insert(j, len);
                        }
                        for r in redirects.iter().filter(|r| !r.in_entry) {
                            let (at, len) = r.patch();
                            patches.insert(at, len);
                        }
                        if window_len > 0 {
                            patches.insert(address, window_len);
                        }
                        if tactic == Tactic::Window {
                            slots.add_tail(address, window_len);
                        }
                        exits.push(Exit {
                            point: p.id,
                            function: p.function,
                            site: x.ip(),
                            kind,
                            address,
                            window_len,
                            displaced,
                            tactic,
                            slot,
                            retargets,
                            redirects,
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
            None => {
                for x in exits.iter().filter(|x| x.tactic == Tactic::EntryExit) {
                    plan.entry_exits.entry(x.point).or_insert(x.site);
                }
                plan.exits.append(&mut exits)
            }
            Some((site, reason)) => {
                // Patching the exits that fit would measure nothing: leave them alone, and
                // give back their slot windows. (A slot stays taken: nothing is written there.)
                for w in plan.slot_windows.drain(n_windows..) {
                    let (at, len) = w.patch();
                    patches.remove(at);
                    slots.remove_tail(at, len);
                }
                for x in exits {
                    if x.window_len > 0 {
                        patches.remove(x.address);
                    }
                    for &(j, _) in &x.retargets {
                        patches.remove(j);
                    }
                    for r in x.redirects.iter().filter(|r| !r.in_entry) {
                        patches.remove(r.patch().0);
                    }
                    if x.tactic == Tactic::Window {
                        slots.remove_tail(x.address, x.window_len);
                    }
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
/// - the caller's LSDA sends exceptions passing the call to a handler that catches (a row
///   with an action) whose action chain and type table the trampoline's exception table
///   cannot restate ([`crate::unwind::CatchRow`]: while a timed import runs, the return
///   address lies in the trampoline, whose table answers for the caller, [`SiteEh`]).
///   Callers without an LSDA (C, or C++ with nothing to clean up), rows without a landing
///   pad, cleanup-only rows, rows that catch and calls no row covers are patched;
/// - the caller has no FDE in a program that has them (the trampoline's CFI is the
///   caller's at the call), the program is marked for CET shadow stacks, or the call
///   overlaps another patch.
fn plan_imports(elf: &InputElf, an: &Analysis, spec: &Spec, plan: &mut Plan, opts: PlanOptions, refs: &ImportRefs) {
    let by_stub = Stubs::new(an);
    // A GOT call of a signal function's wrapper (kept an import point for its calls
    // elsewhere) already calls the thunk: both patches are `call rel32`s at the same bytes.
    let mut patches = Patches::inserted(
        (plan.points.iter().map(|p| (p.address, p.window_len)))
            .chain(plan.exits.iter().map(|x| (x.address, x.window_len)))
            .chain(plan.wrap_sites.iter().map(|x| (x.address(), x.window_len()))),
    );
    let has_unwind = an.functions.iter().any(|f| f.has_unwind);
    // The imports with a wrapper point, looked up per call site (a scan of every point per
    // site made this pass quadratic: 30 % of rewriting gdb, issue 14).
    // A process function's wrapper (D22) measures nothing: its calls stay an import.
    let wrapped: HashSet<String> = plan
        .points
        .iter()
        .filter_map(|p| p.wrap.as_ref())
        .filter(|w| stint_layout::ProcessFn::from_u32(w.func).is_none() && !is_signal_wrap(w))
        .map(|w| w.name.clone())
        .collect();
    // Point ids by symbol, created on the first selected call.
    let mut ids: HashMap<String, u32> = HashMap::new();
    // What each import's calls get, by symbol: demangled once (not per call site).
    struct Callee {
        name: String,
        /// Why its calls stay as they are, whoever calls.
        reason: Option<SkipReason>,
        bits: u8,
    }
    let mut callees: HashMap<&str, Callee> = HashMap::new();
    // The calls of each function, in order (those into an import: the others have no callee).
    for (fi, ins) in refs.iter().enumerate() {
        let Some(ins) = ins else { continue };
        let f = &an.functions[fi];
        for x in ins.iter().filter(|x| is_call(x)) {
            let Some((address, symbol)) = import_callee(an, &by_stub, x) else { continue };
            let callee = callees.entry(symbol).or_insert_with(|| {
                let name = crate::analysis::demangle(symbol);
                let reason = if wrapped.contains(symbol) {
                    Some(SkipReason::Wrapped)
                } else if crate::analysis::is_noreturn_import(symbol) {
                    Some(SkipReason::NoReturn)
                } else if RETURN_ADDRESS_IMPORTS.contains(&symbol) {
                    Some(SkipReason::ReturnAddressSensitive)
                } else {
                    None
                };
                let bits = if reason.is_some() { 0 } else { spec.bits_for(&name) };
                Callee { name, reason, bits }
            });
            let (name, bits) = (&callee.name, callee.bits);
            let skip = |reason| SkippedImportSite { function: fi, site: x.ip(), name: name.clone(), address, reason };
            if let Some(reason) = &callee.reason {
                plan.skipped_import_sites.push(skip(reason.clone()));
                continue;
            }
            if bits == 0 {
                continue; // not selected: not listed, like functions the spec leaves out
            }
            let eh = site_eh(elf, an, f.address, x);
            let reason = if opts.shadow_stack {
                Some(SkipReason::ShadowStack)
            } else if has_unwind && !f.has_unwind {
                Some(SkipReason::NoUnwindInfo)
            } else if let Err(r) = &eh {
                Some(r.clone())
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
            let eh = eh.unwrap_or(SiteEh::Pass);
            plan.import_sites.push(ImportSite { point: id, function: fi, call: *x, eh });
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
            let called = x.tactic != Tactic::EntryExit
                && REGISTER_ARGS_IMPORTS.contains(&symbol)
                && matches!(j.code(), Code::Jmp_rel32_64 | Code::Jmp_rel8_64 | Code::Jmp_rm64);
            plan.tail_imports.push(TailImport { point: x.point, site: x.site, name, called });
        }
    }
}

/// The PLT stubs by address (symbol) and by GOT slot (the first stub's address), looked up
/// per call site instead of scanning the stubs.
struct Stubs<'a> {
    by_address: HashMap<u64, &'a str>,
    by_slot: HashMap<u64, u64>,
}

impl<'a> Stubs<'a> {
    fn new(an: &'a Analysis) -> Self {
        let mut by_slot = HashMap::new();
        for s in &an.plt_stubs {
            by_slot.entry(s.got_slot).or_insert(s.address);
        }
        Stubs { by_address: an.plt_stubs.iter().map(|s| (s.address, s.name.as_str())).collect(), by_slot }
    }
}

/// The import a `call` or `jmp` instruction transfers to: (its address for reports, symbol).
fn import_callee<'a>(an: &'a Analysis, by_stub: &Stubs<'a>, x: &Instruction) -> Option<(u64, &'a str)> {
    match x.code() {
        Code::Call_rel32_64 | Code::Jmp_rel32_64 | Code::Jmp_rel8_64 => {
            let t = x.near_branch_target();
            by_stub.by_address.get(&t).map(|&name| (t, name))
        }
        Code::Call_rm64 | Code::Jmp_rm64 if x.is_ip_rel_memory_operand() => {
            let slot = x.ip_rel_memory_address();
            let name = an.got_imports.get(&slot)?;
            // Prefer the PLT stub's address when the import also has one.
            let addr = by_stub.by_slot.get(&slot).copied().unwrap_or(slot);
            Some((addr, name.as_str()))
        }
        _ => None,
    }
}

/// What the caller's LSDA does with an exception passing the call `x` of the function at
/// `func` ([`SiteEh`]), or why the call cannot be patched (a handler whose row cannot be
/// restated: see [`plan_imports`]). The personality routine looks up the return address
/// minus one.
fn site_eh(elf: &InputElf, an: &Analysis, func: u64, x: &Instruction) -> std::result::Result<SiteEh, SkipReason> {
    let Some(sites) = an.lsda_sites.get(&func) else { return Ok(SiteEh::Pass) };
    match crate::analysis::LsdaCallSite::covering(sites, x.next_ip() - 1) {
        None => Ok(SiteEh::Terminate),
        Some(&crate::analysis::LsdaCallSite { pad: None, .. }) => Ok(SiteEh::Pass),
        Some(&crate::analysis::LsdaCallSite { pad: Some(pad), action: 0, .. }) => Ok(SiteEh::Cleanup(pad)),
        Some(&crate::analysis::LsdaCallSite { pad: Some(pad), action, .. }) => {
            let Some((&lsda, data)) = an.lsdas.get(&func).and_then(|l| Some((l, crate::unwind::lsda_bytes(elf, *l)?)))
            else {
                return Err(SkipReason::CatchHandler(pad, "the LSDA is not in the file".into()));
            };
            let pie = elf.kind.is_position_independent();
            match crate::unwind::CatchRow::read(data, lsda, action, pie) {
                Ok(_) => Ok(SiteEh::Catch { pad, lsda, action }),
                Err(why) => Err(SkipReason::CatchHandler(pad, why)),
            }
        }
    }
}

/// `j` is a direct `jmp` or `jcc` to `t`.
fn is_jump_to(j: &Instruction, t: u64) -> bool {
    matches!(j.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64)
        && j.near_branch_target() == t
        && matches!(j.flow_control(), FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch)
}

/// Byte ranges patched so far, by start.
#[derive(Default)]
struct Patches(BTreeMap<u64, u64>);

impl Patches {
    /// The patches `(at, len)` inserted in turn ([`Patches::insert`]: a later one at the same
    /// address replaces the earlier), built at once.
    fn inserted(patches: impl IntoIterator<Item = (u64, u64)>) -> Patches {
        Patches(bulk_map(patches.into_iter().map(|(at, len)| (at, at + len)).collect()))
    }

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

/// The map that inserting `entries` in turn makes (a later value for a key replaces the
/// earlier), built from one sorted run instead of an insertion each.
fn bulk_map<V>(mut entries: Vec<(u64, V)>) -> BTreeMap<u64, V> {
    entries.sort_by_key(|&(k, _)| k); // stable: the last of equal keys is the one inserted last
    let mut out: Vec<(u64, V)> = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        match out.last_mut() {
            Some(last) if last.0 == k => last.1 = v,
            _ => out.push((k, v)),
        }
    }
    out.into_iter().collect()
}

/// The end of point `p`'s entry window when its trampolines (the entry trampoline, and the
/// entry tails of `window+jumps` entries) end by jumping there, and that jump may lead to an
/// exit trampoline instead ([`Redirect::falls_through`]): a plain patched window of the
/// function's own, whose last instruction falls through (no call to emulate, no transfer).
fn entry_falls(p: &Point) -> Option<u64> {
    let last = p.displaced.last()?;
    let plain = matches!(p.tactic, Tactic::Window | Tactic::WindowJumps);
    let falls = matches!(last.flow_control(), FlowControl::Next | FlowControl::ConditionalBranch);
    (plain && falls && p.wrap.is_none() && p.import.is_none() && !p.emulate_call && p.window_len > 0)
        .then(|| p.address + p.window_len)
        .filter(|&end| end == last.next_ip())
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
    /// The instructions the entry trampoline runs (an exit among them is a
    /// [`Tactic::EntryExit`]).
    entry_displaced: &'a [Instruction],
    /// The end of the entry window when the entry trampoline falls through to it (its last
    /// instruction neither a transfer nor a call) and may go elsewhere instead: the
    /// [`Redirect`] of a run there ([`Redirect::falls_through`]).
    falls: Option<u64>,
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
            // A conditional tail call: [`jcc_tail`] (in [`exit_patch`]) or nothing.
            FlowControl::ConditionalBranch => {
                let t = target?;
                self.leaves(t).then(|| (ExitKind::TailJump, self.callee(t)))
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

/// A patch: tactic, first byte, length, displaced instructions, slot ([`Exit::slot`]),
/// retargeted jumps ([`Exit::retargets`]), redirected jumps ([`Exit::redirects`]).
type ExitPatch = (Tactic, u64, u64, Vec<Instruction>, Option<u64>, Vec<(u64, u64)>, Vec<Redirect>);

/// Choose the tactic for the exit `ins[k]` of part `fp` (see `plan_exits`).
fn exit_patch(
    ctx: &ExitCtx,
    ins: &[Instruction],
    k: usize,
    fp: &Function,
    family: &[(&Function, Vec<Instruction>)],
    room: &mut Room,
    opts: PlanOptions,
) -> Result<ExitPatch, SkipReason> {
    let x = ins[k];
    if x.flow_control() == FlowControl::ConditionalBranch {
        // Only its taken path leaves: no window, no trap (both would run the exit
        // instrumentation on the path that stays).
        return jcc_tail(ctx, family, &x, room).ok_or(SkipReason::ConditionalTailCall);
    }
    let patches = &*room.patches;
    if x.ip() >= ctx.start && x.ip() - ctx.start < ctx.window {
        // Displaced by the entry window: its trampoline runs the exit instrumentation. (A
        // trap entry displaces one instruction; the exit may be another in the window.)
        if ctx.entry_displaced.iter().any(|d| d.ip() == x.ip()) {
            return Ok((Tactic::EntryExit, x.ip(), 0, vec![x], None, Vec::new(), Vec::new()));
        }
        return Err(SkipReason::ExitInEntryWindow);
    }
    let window = exit_window(ctx.an, ins, k, 0, patches, JMP_LEN);
    let padding = dead_after(ctx.an, ins, k, fp);
    let padded = if padding > 0 { exit_window(ctx.an, ins, k, padding, patches, JMP_LEN).ok() } else { None };
    let padded = padded
        .map(|(i, _)| (Tactic::WindowPadding, ins[i].ip(), JMP_LEN, ins[i..=k].to_vec(), None, Vec::new(), Vec::new()));
    let reason = match window {
        // A window that takes in a loop's back edge (`dec ecx; jne .Lloop; ret`) runs every
        // iteration through the trampoline: correct, but slow. Padding avoids that.
        Ok((i, _)) if loops_back(&ins[i..k], fp) && padded.as_ref().is_some_and(|p| !loops_back(&p.3, fp)) => {
            return Ok(padded.expect("checked"));
        }
        // A window that takes in a jcc into another part of the function would hide it from
        // the exits planned there after this one: `test rdi, rdi; je .Lcold; jmp rax`, where
        // .Lcold is `xor eax, eax; ret` in the cold part, which only that je reaches (its
        // rel32 is to be retargeted, [`Tactic::Retarget`]). Padding keeps the jcc in place.
        Ok((i, _)) if padded.is_some() && ins[i..k].iter().any(|x| jcc_into_other_part(ctx, fp, x)) => {
            return Ok(padded.expect("checked"));
        }
        Ok((i, len)) => {
            return Ok((Tactic::Window, ins[i].ip(), len, ins[i..=k].to_vec(), None, Vec::new(), Vec::new()))
        }
        Err(r) => r,
    };
    if let Some(p) = padded {
        return Ok(p);
    }
    // `jmp rel8` to a slot: the shortest run of at least 2 bytes (with padding if need be).
    let short = exit_window(ctx.an, ins, k, 0, patches, JMP8_LEN).or_else(|e| {
        if padding > 0 {
            exit_window(ctx.an, ins, k, padding, patches, JMP8_LEN)
        } else {
            Err(e)
        }
    });
    if let Ok((i, len)) = short {
        let at = ins[i].ip();
        if !loops_back(&ins[i..k], fp) {
            let from = at + JMP8_LEN;
            // The run's own bytes first: a slot window must not take them.
            let n = room.windows.len();
            room.patches.insert(at, len.max(JMP8_LEN));
            let slot = room.slot(ctx.an, family, from);
            room.patches.remove(at);
            if slot.is_none() {
                room.undo_windows(n);
            }
            if let Some(slot) = slot {
                return Ok((
                    Tactic::Rel8Slot,
                    at,
                    len.max(JMP8_LEN),
                    ins[i..=k].to_vec(),
                    Some(slot),
                    Vec::new(),
                    Vec::new(),
                ));
            }
        }
    }
    if let Some((i, jumps)) = retarget(ctx, family, ins, k, fp, room.patches) {
        return Ok((Tactic::Retarget, ins[i].ip(), 0, ins[i..=k].to_vec(), None, jumps, Vec::new()));
    }
    if let Some(p) = window_jumps(ctx, family, ins, k, fp, padding, room) {
        return Ok(p);
    }
    if let Some(p) = table_jumps(ctx, family, ins, k, fp, room) {
        return Ok(p);
    }
    let patches = &*room.patches;
    if opts.traps {
        check_relocatable(&x)?;
        if patches.overlap(x.ip(), 1).is_none() {
            return Ok((Tactic::Trap, x.ip(), 1, vec![x], None, Vec::new(), Vec::new()));
        }
    }
    Err(reason)
}

/// `jmp rel8`.
pub const JMP8_LEN: u64 = 2;

/// [`Tactic::JccTail`] for the conditional tail call `x` (a `jcc` of the function to another
/// function's start): its taken path alone leaves, so the jump itself is led to an exit
/// trampoline whose exit instruction is an unconditional `jmp` to the jump's target (the
/// trampoline runs the exit instrumentation, then the tail call; flags are dead at a tail
/// call, psABI). The path that stays is not touched. As a [`Redirect`] of the exit's one
/// displaced instruction (that `jmp`, at the jump's address): a `jcc rel32` gets a new
/// displacement, a `jcc rel8` a slot within its reach ([`Room::slot`]) or its own window
/// ([`jump_window`]), a `jcc` of the entry window is redirected in the entry trampoline's
/// copy. Shared state: the patches and slots every exit tactic takes from ([`Room`]).
fn jcc_tail(
    ctx: &ExitCtx,
    family: &[(&Function, Vec<Instruction>)],
    x: &Instruction,
    room: &mut Room,
) -> Option<ExitPatch> {
    // `jcc` only: `loop` and `jrcxz` have no rel32 form for a jump window.
    if !x.is_jcc_short_or_near() {
        return None;
    }
    let t = x.near_branch_target();
    // A function of the program (not a PLT stub: an import's tail jump is D17's business).
    ctx.an.function_at(t).filter(|g| !g.is_cold_part())?;
    let len = x.len() as u64;
    let in_entry = x.ip() >= ctx.start && x.ip() - ctx.start < ctx.window;
    if in_entry && !ctx.entry_displaced.iter().any(|d| d.ip() == x.ip()) {
        return None;
    }
    if !in_entry && (!(len == JMP8_LEN || is_rel32_branch(x)) || room.patches.overlap(x.ip(), len).is_some()) {
        return None;
    }
    let mut jmp = Instruction::with_branch(Code::Jmp_rel32_64, t).ok()?;
    jmp.set_ip(x.ip());
    jmp.set_len(x.len());
    jmp.set_next_ip(x.next_ip());
    let mut r = Redirect { jump: x.ip(), len, to: x.ip(), slot: None, window: Vec::new(), in_entry, table: None };
    if len == JMP8_LEN && !in_entry {
        let n = room.windows.len();
        room.patches.insert(x.ip(), len);
        r.slot = room.slot(ctx.an, family, x.next_ip());
        room.patches.remove(x.ip());
        if r.slot.is_none() {
            room.undo_windows(n);
            let (fp, part) = family.iter().find(|(f, _)| f.contains(x.ip()))?;
            r.window = jump_window(ctx.an, part, fp, x.ip(), room.patches, &[])?;
        }
    }
    Some((Tactic::JccTail, x.ip(), 0, vec![jmp], None, Vec::new(), vec![r]))
}

/// `x` is a `jcc` of part `fp` to a target in another part of the function (its cold part,
/// or the parent) that only direct jumps reach.
fn jcc_into_other_part(ctx: &ExitCtx, fp: &Function, x: &Instruction) -> bool {
    x.is_jcc_short_or_near() && {
        let t = x.near_branch_target();
        !fp.contains(t) && ctx.in_family(t) && ctx.an.jump_only.contains_key(&t)
    }
}

/// The run and the jumps to retarget for the exit `ins[k]` of part `fp` ([`Tactic::Retarget`]):
/// the run `ins[i..=k]` of straight-line instructions ending at the exit starts at a branch
/// target that cannot be fallen into (the instruction before it ends control flow, or it
/// starts a cold part) and that analysis
/// found nothing but direct jumps reaching, and every one of those is a `jmp rel32` / `jcc
/// rel32` of the function or its cold parts that no patch covers.
fn retarget(
    ctx: &ExitCtx,
    family: &[(&Function, Vec<Instruction>)],
    ins: &[Instruction],
    k: usize,
    fp: &Function,
    patches: &Patches,
) -> Option<(usize, Vec<(u64, u64)>)> {
    let mut i = k;
    check_relocatable(&ins[k]).ok()?;
    while !ctx.an.branch_targets.contains(&ins[i].ip()) {
        let prev = ins.get(i.checked_sub(1)?)?;
        if prev.next_ip() != ins[i].ip() || ends_flow(prev) || is_call(prev) || check_relocatable(prev).is_err() {
            return None;
        }
        i -= 1;
    }
    let x = &ins[i];
    // Nothing falls into the run: it starts a cold part, or follows a transfer.
    let entered_by_jumps_only = match i.checked_sub(1).map(|j| &ins[j]) {
        None => fp.is_cold_part(),
        Some(prev) => prev.next_ip() == x.ip() && ends_flow(prev),
    };
    if !entered_by_jumps_only || loops_back(&ins[i..k], fp) {
        return None;
    }
    let n = *ctx.an.jump_only.get(&x.ip())? as usize;
    let mut jumps = Vec::new();
    for (_, part) in family {
        for j in part.iter().filter(|j| {
            matches!(j.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64)
                && j.near_branch_target() == x.ip()
                && matches!(j.flow_control(), FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch)
        }) {
            if !is_rel32_branch(j) || patches.overlap(j.ip(), j.len() as u64).is_some() {
                return None;
            }
            jumps.push((j.ip(), j.len() as u64));
        }
    }
    (jumps.len() == n && n > 0).then_some((i, jumps))
}

/// [`Tactic::WindowJumps`] for the exit `ins[k]` of part `fp` (`padding` dead bytes after
/// it). The run `ins[i..=k]` is straight-line and relocatable (no call, no transfer before
/// the exit); the candidates, in order: the shortest run that reaches 5 bytes with the
/// padding (a `jmp rel32` window), the shortest that reaches 2 (a `jmp rel8` to a slot), and,
/// when only jumps enter the longest run, that run with nothing patched at it. Every branch
/// target inside the run (and its first instruction when nothing is patched there) must be
/// reached only by direct jumps of the function or its cold parts, all of them found, none
/// inside the run or another patch; the rel8 ones each take a slot within their reach. No
/// branch in the run may lead back into it or before it (a loop through the trampoline).
fn window_jumps(
    ctx: &ExitCtx,
    family: &[(&Function, Vec<Instruction>)],
    ins: &[Instruction],
    k: usize,
    fp: &Function,
    padding: u64,
    room: &mut Room,
) -> Option<ExitPatch> {
    check_relocatable(&ins[k]).ok()?;
    // A run never reaches back into the entry window (its bytes are the entry's patch).
    let entry_end = ctx.start + ctx.window;
    let extends = |i: usize| -> bool {
        let Some(prev) = i.checked_sub(1).map(|j| &ins[j]) else { return false };
        prev.next_ip() == ins[i].ip()
            && !ends_flow(prev)
            && !is_call(prev)
            && check_relocatable(prev).is_ok()
            && (ctx.window == 0 || ins[i].ip() != entry_end)
    };
    let len = |i: usize| ins[k].next_ip() - ins[i].ip();
    let shortest = |need: u64| {
        let mut i = k;
        while len(i) + padding < need && extends(i) {
            i -= 1;
        }
        (len(i) + padding >= need).then_some(i)
    };
    let mut longest = k;
    while extends(longest) {
        longest -= 1;
    }
    // Only jumps enter the longest run: it follows a transfer, or starts a cold part; or
    // besides them the entry trampoline falls into it (rg's `test byte [rdi], 1; jne .Lmore`
    // entry window, then a `ret` that a later `je` reaches too), which can lead there instead.
    let jumps_only = match longest.checked_sub(1).map(|j| &ins[j]) {
        None => fp.is_cold_part(),
        Some(prev) => prev.next_ip() == ins[longest].ip() && ends_flow(prev),
    } || (ctx.falls == Some(ins[longest].ip()) && ctx.an.branch_targets.contains(&ins[longest].ip()));
    let candidates = [
        shortest(JMP_LEN).map(|i| (i, len(i).max(JMP_LEN))),
        shortest(JMP8_LEN).filter(|&i| len(i) + padding < JMP_LEN).map(|i| (i, len(i).max(JMP8_LEN))),
        jumps_only.then_some((longest, 0)),
    ];
    // A run that takes in a loop's back edge (`cmp; jne .Lloop; ret`, the `ret` also reached
    // by jumps out of the loop) only when nothing else fits: every iteration then passes
    // through the trampoline (a `jmp` there and the relocated `jcc` back), as a plain window
    // over a back edge does.
    let candidates: Vec<(usize, u64)> = candidates.into_iter().flatten().collect();
    [false, true].into_iter().find_map(|loops| {
        candidates.iter().find_map(|&(i, window_len)| {
            if loops && !loops_back(&ins[i..k], fp) {
                return None; // tried already
            }
            run_jumps(ctx, family, ins, i, k, fp, (window_len, false, loops), room)
        })
    })
}

/// [`Tactic::TableJumps`] for the exit `ins[k]` of part `fp`: the longest straight-line
/// relocatable run ending at it, when only jumps enter it (it follows a transfer, or starts
/// a cold part), with nothing patched at it, where [`run_jumps`] also counts the entries of
/// the function's jump tables as ways in: each target inside the run must be reached by
/// nothing but direct jumps (redirected as for [`Tactic::WindowJumps`]) and entries of
/// tables that only jumps of the function or its cold parts read, all of them found
/// ([`table_entries`]); the entries the program can read are rewritten to lead to the
/// trampoline's copy of their target. Shared state: the patches and slots ([`Room`]) as
/// [`window_jumps`]; the table entries are data no other patch touches.
fn table_jumps(
    ctx: &ExitCtx,
    family: &[(&Function, Vec<Instruction>)],
    ins: &[Instruction],
    k: usize,
    fp: &Function,
    room: &mut Room,
) -> Option<ExitPatch> {
    check_relocatable(&ins[k]).ok()?;
    let mut i = k;
    while let Some(prev) = i.checked_sub(1).map(|j| &ins[j]) {
        if prev.next_ip() != ins[i].ip() || ends_flow(prev) || is_call(prev) || check_relocatable(prev).is_err() {
            break;
        }
        i -= 1;
    }
    let jumps_only = match i.checked_sub(1).map(|j| &ins[j]) {
        None => fp.is_cold_part(),
        Some(prev) => prev.next_ip() == ins[i].ip() && ends_flow(prev),
    };
    if !jumps_only {
        return None;
    }
    run_jumps(ctx, family, ins, i, k, fp, (0, true, false), room)
}

/// The entries of the jump tables of `family` (the jumps [`Analysis::jump_tables`] knows)
/// that lead to `t`: how many analysis read, and (address, the table's `add`) of those the
/// program can read, by the bound the jump's guard puts on the index ([`table_bound`]).
/// `None` if a table with an entry to `t` is not a 4-byte sign-extended one, its bound is
/// not known, or an entry's word cannot be read.
fn table_entries(
    elf: &InputElf,
    an: &Analysis,
    family: &[(&Function, Vec<Instruction>)],
    t: u64,
) -> Option<(u32, Vec<(u64, u64)>)> {
    let mut read = 0u32;
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (_, part) in family {
        for (k, x) in part.iter().enumerate() {
            if x.flow_control() != FlowControl::IndirectBranch {
                continue;
            }
            let Some(tab) = an.jump_tables.get(&x.ip()) else { continue };
            let mut bound = None;
            for e in 0..tab.entries {
                let at = tab.base + e * u64::from(tab.size);
                let word = elf.bytes_at(at, u64::from(tab.size))?;
                let raw = match (tab.size, tab.signed) {
                    (4, true) => i32::from_le_bytes(word.try_into().ok()?) as i64 as u64,
                    (4, false) => u64::from(u32::from_le_bytes(word.try_into().ok()?)),
                    _ => u64::from_le_bytes(word.try_into().ok()?),
                };
                if raw.wrapping_add(tab.add) != t {
                    continue;
                }
                read += 1;
                if !(tab.size == 4 && tab.signed) {
                    return None;
                }
                let b = *bound.get_or_insert_with(|| table_bound(an, part, k, tab.entries));
                if e < b? {
                    out.push((at, tab.add));
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Some((read, out))
}

/// How many entries of its table the jump `part[k]` can read: the index of the table load
/// before it (`movsxd r, dword [b + i*4]`, or `mov r32, [b + i*4]`) is checked by `cmp i,
/// imm` and `ja` (`imm + 1`) or `jae` (`imm`) just before, the run from the check to the jump
/// is straight-line with no branch target after the check, and nothing between the check
/// and the load writes the index. `None` otherwise, or above `read` (what analysis read).
fn table_bound(an: &Analysis, part: &[Instruction], k: usize, read: u64) -> Option<u64> {
    use iced_x86::{InstructionInfoFactory, OpAccess};
    const LOOK_BACK: usize = 12;
    let mut info = InstructionInfoFactory::new();
    let mut j = k;
    let mut index = None;
    for _ in 0..LOOK_BACK {
        let prev = part.get(j.checked_sub(1)?)?;
        if prev.next_ip() != part[j].ip() || an.branch_targets.contains(&part[j].ip()) {
            return None;
        }
        j -= 1;
        let x = &part[j];
        match index {
            None => {
                if x.flow_control() != FlowControl::Next {
                    return None;
                }
                let load = (0..x.op_count()).any(|o| x.op_kind(o) == OpKind::Memory)
                    && x.memory_index() != Register::None
                    && x.memory_index_scale() == 4
                    && x.memory_size().size() == 4
                    && matches!(x.mnemonic(), Mnemonic::Movsxd | Mnemonic::Mov);
                if load {
                    index = Some(x.memory_index().full_register());
                }
            }
            Some(r) if x.is_jcc_short_or_near() => {
                let cmp = part.get(j.checked_sub(1)?)?;
                let bound = match x.condition_code() {
                    iced_x86::ConditionCode::a => 1,
                    iced_x86::ConditionCode::ae => 0,
                    _ => return None,
                };
                let ok = cmp.mnemonic() == Mnemonic::Cmp
                    && cmp.next_ip() == x.ip()
                    && cmp.op0_kind() == OpKind::Register
                    && cmp.op0_register().full_register() == r
                    && matches!(
                        cmp.op1_kind(),
                        OpKind::Immediate8to32
                            | OpKind::Immediate8to64
                            | OpKind::Immediate32
                            | OpKind::Immediate32to64
                            | OpKind::Immediate8
                    );
                if !ok {
                    return None;
                }
                let imm = cmp.immediate(1) & (u64::MAX >> (64 - 8 * cmp.op0_register().size() as u32));
                let n = imm.checked_add(bound)?;
                return (n <= read).then_some(n);
            }
            Some(r) => {
                let writes = info.info(x).used_registers().iter().any(|u| {
                    u.register().full_register() == r
                        && matches!(
                            u.access(),
                            OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
                        )
                });
                if writes || x.flow_control() != FlowControl::Next {
                    return None;
                }
            }
        }
    }
    None
}

/// One candidate of [`window_jumps`]: the run `ins[i..=k]` patched with `window_len` bytes;
/// with `tables`, entries of jump tables may lead into the run too ([`table_jumps`]); with
/// `loops`, a branch of the run may lead back before it (a loop's back edge: the relocated
/// branch re-enters the program, which comes back to the run's first byte), never into it.
#[allow(clippy::too_many_arguments)]
fn run_jumps(
    ctx: &ExitCtx,
    family: &[(&Function, Vec<Instruction>)],
    ins: &[Instruction],
    i: usize,
    k: usize,
    fp: &Function,
    (window_len, tables, loops): (u64, bool, bool),
    room: &mut Room,
) -> Option<ExitPatch> {
    let at = ins[i].ip();
    if at >= ctx.start && at - ctx.start < ctx.window || (!loops && loops_back(&ins[i..k], fp)) {
        return None;
    }
    let end = at + window_len.max(ins[k].next_ip() - at);
    // Branches of the run into the patched bytes would run `int3`s.
    let into_run = |x: &Instruction| {
        matches!(x.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64)
            && (at..end).contains(&x.near_branch_target())
    };
    if ins[i..k].iter().any(into_run) || (window_len > 0 && room.patches.overlap(at, window_len).is_some()) {
        return None;
    }
    let first = if window_len == 0 { i } else { i + 1 };
    let targets: Vec<u64> =
        ins[first..=k].iter().map(Instruction::ip).filter(|t| ctx.an.branch_targets.contains(t)).collect();
    if targets.is_empty() {
        return None; // another tactic's case
    }
    // Every jump to each target, counted against what analysis found.
    let mut jumps: Vec<(Instruction, u64, bool)> = Vec::new();
    let mut entries: Vec<Redirect> = Vec::new();
    for &t in &targets {
        let n = match ctx.an.jump_only.get(&t) {
            Some(&n) => n as usize,
            None if tables => {
                let (n, in_tables) = ctx.an.table_only.get(&t)?;
                let (read, words) = table_entries(room.elf, ctx.an, family, t)?;
                if read != in_tables {
                    return None;
                }
                let entry = |(at, add)| Redirect {
                    jump: at,
                    len: 4,
                    to: t,
                    slot: None,
                    window: Vec::new(),
                    in_entry: false,
                    table: Some(add),
                };
                entries.extend(words.into_iter().map(entry));
                n as usize
            }
            None => return None,
        };
        let before = jumps.len();
        for (_, part) in family {
            for j in part.iter().filter(|j| is_jump_to(j, t)) {
                let short = j.len() as u64 == JMP8_LEN;
                // A jump the entry trampoline runs: its copy there is redirected instead.
                let in_entry = room.patches.overlap(j.ip(), j.len() as u64) == Some(ctx.start)
                    && ctx.entry_displaced.iter().any(|d| d.ip() == j.ip());
                if !(short || is_rel32_branch(j))
                    || (at..end).contains(&j.ip())
                    || (room.patches.overlap(j.ip(), j.len() as u64).is_some() && !in_entry)
                {
                    return None;
                }
                jumps.push((*j, t, in_entry));
            }
        }
        if jumps.len() - before != n {
            return None;
        }
    }
    // The run's own patch first: slots must not fall into it.
    let n_windows = room.windows.len();
    if window_len > 0 {
        room.patches.insert(at, window_len);
    }
    let mut slot = None;
    let mut ok = true;
    if window_len > 0 && window_len < JMP_LEN {
        slot = room.slot(ctx.an, family, at + JMP8_LEN);
        ok = slot.is_some();
    }
    let mut redirects: Vec<Redirect> = Vec::with_capacity(jumps.len());
    for &(j, to, in_entry) in &jumps {
        if !ok {
            break;
        }
        let len = j.len() as u64;
        let mut r = Redirect { jump: j.ip(), len, to, slot: None, window: Vec::new(), in_entry, table: None };
        if len == JMP8_LEN && !in_entry {
            // A slot this exit took for an earlier jump to the same target, within reach.
            let reach = |s: u64| (-128..=127).contains(&(s as i64 - j.next_ip() as i64));
            r.slot = redirects.iter().filter(|o| o.to == to).filter_map(|o| o.slot).find(|&s| reach(s));
            if r.slot.is_none() {
                r.slot = room.slot(ctx.an, family, j.next_ip());
            }
            if r.slot.is_none() {
                let (fp_j, part) = family.iter().find(|(f, _)| f.contains(j.ip()))?;
                let redirected: Vec<u64> = jumps.iter().map(|(o, _, _)| o.ip()).collect();
                r.window = jump_window(ctx.an, part, fp_j, j.ip(), room.patches, &redirected).unwrap_or_default();
                if let Some((a, l)) = (!r.window.is_empty()).then(|| r.patch()) {
                    room.patches.insert(a, l);
                }
            }
            ok = r.slot.is_some() || !r.window.is_empty();
        }
        redirects.push(r);
    }
    for r in redirects.iter().filter(|r| !r.window.is_empty()) {
        room.patches.remove(r.patch().0);
    }
    if window_len > 0 {
        room.patches.remove(at);
    }
    // (A slot taken for a candidate that then fails stays taken: nothing is written there.
    // Its slot windows are given back.)
    if !ok {
        room.undo_windows(n_windows);
    }
    let tactic = if entries.is_empty() { Tactic::WindowJumps } else { Tactic::TableJumps };
    redirects.append(&mut entries);
    // Nothing patched at a run the entry trampoline falls into: its jump there leads to the
    // copy of the run's first instruction too. (A run that only jumps enter follows a
    // transfer: no fall-through.)
    if window_len == 0 && ctx.falls == Some(at) && i > 0 && !ends_flow(&ins[i - 1]) {
        redirects.push(Redirect::falls_through(at));
    }
    ok.then(|| (tactic, at, window_len, ins[i..=k].to_vec(), slot, Vec::new(), redirects))
}

/// The window of a rel8 jump at `jump` in `part` ([`Redirect::window`]): the shortest run of
/// straight-line instructions ending with the jump that covers 5 bytes; no instruction but the
/// first is a branch target, none before the jump is a call or a transfer, all can be
/// relocated, and no byte is patched yet. A `jcc` before the jump (a compare-and-branch
/// chain: `je .La; ja .Lhub`) stays in the run when it leads out of it and is not one of
/// `redirected` (the jumps the same exit leads elsewhere, whose bytes the window would hide):
/// the piece runs it relocated to its own target.
fn jump_window(
    an: &Analysis,
    part: &[Instruction],
    fp: &Function,
    jump: u64,
    patches: &Patches,
    redirected: &[u64],
) -> Option<Vec<Instruction>> {
    let k = part.iter().position(|x| x.ip() == jump)?;
    let mut i = k;
    loop {
        let len = part[k].next_ip() - part[i].ip();
        if len >= JMP_LEN {
            break;
        }
        if an.branch_targets.contains(&part[i].ip()) {
            return None;
        }
        let prev = i.checked_sub(1).map(|j| &part[j])?;
        // `jcc` only: `loop`, `jrcxz` have no rel32 form.
        let jcc = prev.is_jcc_short_or_near();
        if prev.next_ip() != part[i].ip()
            || !(prev.flow_control() == FlowControl::Next || jcc)
            || check_relocatable(prev).is_err()
            || redirected.contains(&prev.ip())
        {
            return None;
        }
        i -= 1;
    }
    let (at, len) = (part[i].ip(), part[k].next_ip() - part[i].ip());
    if patches.overlap(at, len).is_some() || at < fp.address {
        return None;
    }
    // A jcc of the run into the window's bytes would run its `int3`s (its first byte, the
    // patch's `jmp`, is fine: a loop through the piece).
    let end = part[k].next_ip();
    if part[i..k]
        .iter()
        .any(|x| x.flow_control() == FlowControl::ConditionalBranch && (at + 1..end).contains(&x.near_branch_target()))
    {
        return None;
    }
    Some(part[i..=k].to_vec())
}

/// A `jmp` or `jcc` whose last 4 bytes are its displacement.
fn is_rel32_branch(j: &Instruction) -> bool {
    matches!(
        j.code(),
        Code::Jmp_rel32_64
            | Code::Jo_rel32_64
            | Code::Jno_rel32_64
            | Code::Jb_rel32_64
            | Code::Jae_rel32_64
            | Code::Je_rel32_64
            | Code::Jne_rel32_64
            | Code::Jbe_rel32_64
            | Code::Ja_rel32_64
            | Code::Js_rel32_64
            | Code::Jns_rel32_64
            | Code::Jp_rel32_64
            | Code::Jnp_rel32_64
            | Code::Jl_rel32_64
            | Code::Jge_rel32_64
            | Code::Jle_rel32_64
            | Code::Jg_rel32_64
    )
}

/// What the exit tactics may use besides the exit's own bytes: the patches so far, the free
/// slots, and entry windows that may grow.
struct Room<'r, 'a> {
    elf: &'r InputElf<'a>,
    points: &'r mut Vec<Point>,
    /// Entry points with a plain window, by address.
    by_address: &'r BTreeMap<u64, usize>,
    patches: &'r mut Patches,
    slots: &'r mut Slots,
    /// CET shadow stacks: a window may not take in a call (it would be emulated).
    shadow_stack: bool,
    /// Runs moved out to make slots ([`Room::evict`]).
    windows: &'r mut Vec<SlotWindow>,
}

impl<'r, 'a> Room<'r, 'a> {
    /// The room of `plan`'s points and slot windows, around `patches` and `slots`.
    fn new(
        elf: &'r InputElf<'a>,
        plan: &'r mut Plan,
        by_address: &'r BTreeMap<u64, usize>,
        patches: &'r mut Patches,
        slots: &'r mut Slots,
        shadow_stack: bool,
    ) -> Self {
        Room {
            elf,
            points: &mut plan.points,
            by_address,
            patches,
            slots,
            shadow_stack,
            windows: &mut plan.slot_windows,
        }
    }

    /// Make a slot within `jmp rel8` reach of `from` by stretching a nearby entry window over
    /// the straight-line instructions after it until 5 dead bytes follow its `jmp rel32`
    /// (an entry window is run by its trampoline whatever its length; prologues such as
    /// `push rbp; mov rbp, rsp; sub rsp, n; mov [rbp-8], rdi` have room). The instructions
    /// taken in must not be branch targets or branches, must be relocatable, lie in the
    /// function and in no other patch. A direct `call` of one of the program's functions may
    /// be the last one (`push rbx; mov rbx, rdi; call f`: the trampoline emulates it as an
    /// entry window ending with a call does, and the return address stays the program's,
    /// after the window). The slot is taken at once.
    fn stretch(&mut self, an: &Analysis, from: u64) -> Option<u64> {
        let (lo, hi) = (from.saturating_sub(128), from + 127);
        // A slot at address + 5 must be in reach.
        let near: Vec<usize> =
            self.by_address.range(lo.saturating_sub(JMP_LEN)..=hi.saturating_sub(JMP_LEN)).map(|(_, &i)| i).collect();
        for pi in near {
            let p = &self.points[pi];
            if p.emulate_call || p.displaced.last().is_none_or(ends_flow) || p.window_len >= 2 * JMP_LEN {
                continue;
            }
            let f = &an.functions[p.function];
            let (start, old_end) = (p.address, p.address + p.window_len);
            let mut end = old_end;
            let mut more = Vec::new();
            let mut call = false;
            while end - start < 2 * JMP_LEN && !call {
                let Some(x) = decode_at(self.elf, end, 15).first().copied() else { break };
                // A call of one of the program's functions: an import's call site and a GOT
                // call get points of their own later (`plan_imports`, `plan_got_wraps`).
                call = !self.shadow_stack && x.code() == Code::Call_rel32_64 && {
                    let t = x.near_branch_target();
                    an.function_at(t).is_some_and(|g| g.address == t && !g.is_cold_part())
                        && !an.plt_stubs.iter().any(|s| s.address == t)
                };
                if x.is_invalid()
                    || x.next_ip() > f.end()
                    || !(x.flow_control() == FlowControl::Next || call)
                    || an.branch_targets.contains(&x.ip())
                    || check_relocatable(&x).is_err()
                {
                    call = false;
                    break;
                }
                end = x.next_ip();
                more.push(x);
            }
            if end - start < 2 * JMP_LEN || self.patches.overlap(old_end, end - old_end).is_some() {
                continue;
            }
            let p = &mut self.points[pi];
            p.displaced.extend(more);
            p.emulate_call = call;
            p.window_len = end - start;
            self.patches.remove(start);
            self.patches.insert(start, end - start);
            self.slots.add_tail(start, end - start);
            if let Some(s) = self.slots.take(from, self.patches) {
                return Some(s);
            }
        }
        None
    }
}

impl Room<'_, '_> {
    /// A slot for a `jmp rel8` ending at `from`: a free one, an entry window grown
    /// ([`Room::stretch`]), else a [`SlotWindow`] over a run of the function's own
    /// instructions in reach.
    fn slot(&mut self, an: &Analysis, family: &[(&Function, Vec<Instruction>)], from: u64) -> Option<u64> {
        self.slots.take(from, self.patches).or_else(|| self.stretch(an, from)).or_else(|| self.evict(an, family, from))
    }

    /// Make a slot within reach of `from` by moving out a run of the function (or its cold
    /// parts): straight-line instructions (no branch, call or `ret`), relocatable, no byte
    /// patched, none but the first a branch target, 10 bytes or more, whose bytes 5–9 are in
    /// reach. The run must not be where a later exit's window may grow: a call or a branch
    /// target lies between it and the next transfer, or 16 bytes do, or the bytes from the
    /// run's end to the end of that transfer, with the dead bytes after it, make 5 (a window
    /// of the exit there, with the padding if need be, fits without the run: the
    /// `lea rax, [rip+x]; mov [rdi], rax; xor eax, eax; ret; nop3` of a `std::function`
    /// manager).
    fn evict(&mut self, an: &Analysis, family: &[(&Function, Vec<Instruction>)], from: u64) -> Option<u64> {
        let (lo, hi) = (from.saturating_sub(128), from + 127);
        let straight = |x: &Instruction| x.flow_control() == FlowControl::Next && check_relocatable(x).is_ok();
        for (fp, part) in family {
            let first = part.partition_point(|x| x.ip() + JMP_LEN < lo);
            for i in first..part.len() {
                let at = part[i].ip();
                if at + JMP_LEN > hi {
                    break;
                }
                let mut k = i;
                let mut end = at;
                while k < part.len() && part[k].ip() == end && straight(&part[k]) && end - at < 2 * JMP_LEN {
                    if k > i && an.branch_targets.contains(&part[k].ip()) {
                        break;
                    }
                    end = part[k].next_ip();
                    k += 1;
                }
                if end - at < 2 * JMP_LEN || self.patches.overlap(at, end - at).is_some() {
                    continue;
                }
                // After the run, before the next transfer: a call or a branch target, or 16
                // bytes, or room for the transfer's own window.
                let mut gap = 0;
                let safe = part[k..].iter().enumerate().find_map(|(n, x)| {
                    if is_call(x) || an.branch_targets.contains(&x.ip()) || gap >= 16 {
                        return Some(true);
                    }
                    if ends_flow(x) {
                        return Some(gap + x.len() as u64 + dead_after(an, part, k + n, fp) >= JMP_LEN);
                    }
                    gap += x.len() as u64;
                    None
                });
                if safe != Some(true) {
                    continue;
                }
                self.patches.insert(at, end - at);
                self.slots.add_tail(at, end - at);
                self.windows.push(SlotWindow { displaced: part[i..k].to_vec() });
                if let Some(s) = self.slots.take(from, self.patches) {
                    return Some(s);
                }
            }
        }
        None
    }

    /// Give back the slot windows made since there were `n` (a tactic that then failed, or a
    /// function left untimed).
    fn undo_windows(&mut self, n: usize) {
        for w in self.windows.drain(n..) {
            let (at, len) = w.patch();
            self.patches.remove(at);
            self.slots.remove_tail(at, len);
        }
    }
}

/// Dead bytes where a slot ([`Tactic::Rel8Slot`]) may go: start → (end, whether the bytes
/// lie inside a patch, i.e. the tail of a window after its `jmp rel32`).
#[derive(Default)]
struct Slots(BTreeMap<u64, (u64, bool)>);

impl Slots {
    fn add(&mut self, at: u64, end: u64, in_patch: bool) {
        if end >= at + JMP_LEN {
            self.0.insert(at, (end, in_patch));
        }
    }

    /// The tail of a window after its `jmp rel32`.
    fn add_tail(&mut self, at: u64, len: u64) {
        self.add(at + JMP_LEN, at + len, true);
    }

    /// Forget the slots in the tail of a window that is not patched after all.
    fn remove_tail(&mut self, at: u64, len: u64) {
        let inside: Vec<u64> = self.0.range(at..at + len).map(|(&a, _)| a).collect();
        for a in inside {
            self.0.remove(&a);
        }
    }

    /// Take a 5-byte slot a `jmp rel8` ending at `from` reaches; a slot outside any patch is
    /// added to `patches`. Dead bytes outside a patch are taken from their end: the first of
    /// them may be what an exit right before them needs for its window (`ret` and 4 bytes of
    /// padding, `window+padding`), the exit being planned later (gawk's `sub_450d70`, whose
    /// padding the `jmp rel8` of the function before it took).
    fn take(&mut self, from: u64, patches: &mut Patches) -> Option<u64> {
        let (lo, hi) = (from.saturating_sub(128), from + 127);
        let near: Vec<(u64, u64, bool)> =
            self.0.range(lo.saturating_sub(256)..=hi).map(|(&a, &(e, p))| (a, e, p)).collect();
        for (a, e, in_patch) in near {
            let (first, last) = (a.max(lo), (e - JMP_LEN).min(hi));
            let found = if in_patch {
                (first <= last).then_some(first)
            } else {
                (first.max(last.saturating_sub(64))..=last).rev().find(|&s| patches.overlap(s, JMP_LEN).is_none())
            };
            if let Some(s) = found {
                self.0.remove(&a);
                self.add(a, s, in_patch);
                self.add(s + JMP_LEN, e, in_patch);
                if !in_patch {
                    patches.insert(s, JMP_LEN);
                }
                return Some(s);
            }
        }
        None
    }
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
/// with `padding` bytes after `ins[k]`, covers `need` bytes: no instruction but the first
/// is a branch target, none before the exit is a call or ends control flow, all can be
/// relocated, and no byte of the patch is already patched. Returns `i` and the run's length.
fn exit_window(
    an: &Analysis,
    ins: &[Instruction],
    k: usize,
    padding: u64,
    patches: &Patches,
    need: u64,
) -> Result<(usize, u64), SkipReason> {
    check_relocatable(&ins[k])?;
    let mut i = k;
    let mut len = ins[k].len() as u64;
    loop {
        let at = ins[i].ip();
        if len + padding >= need {
            let patch = len.max(need);
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

/// Per function (by index), the instructions that may refer to an import, in order: those
/// with a RIP-relative operand on a named GOT slot and the direct calls and jumps to a PLT
/// stub; `None` for a function whose instructions do not decode to its end.
type ImportRefs = Vec<Option<Vec<Instruction>>>;

/// [`ImportRefs`] of every function: each decoded once, on every core, for both
/// [`plan_got_wraps`] and [`plan_imports`] (which decoded everything once each before).
fn import_refs(elf: &InputElf, an: &Analysis) -> ImportRefs {
    let stubs: HashSet<u64> = an.plt_stubs.iter().map(|s| s.address).collect();
    decoded_where(elf, an, &|x: &Instruction| {
        if x.is_ip_rel_memory_operand() {
            an.got_imports.contains_key(&x.ip_rel_memory_address())
        } else {
            matches!(x.op0_kind(), OpKind::NearBranch64) && stubs.contains(&x.near_branch_target())
        }
    })
}

/// Every function decoded, on every core ([`crate::par`]), keeping the instructions `keep`
/// selects, in order; `None` for a function whose instructions do not decode to its end.
fn decoded_where(
    elf: &InputElf,
    an: &Analysis,
    keep: &(dyn Fn(&Instruction) -> bool + Sync),
) -> Vec<Option<Vec<Instruction>>> {
    crate::par::map(
        &an.functions,
        || (),
        |_, f| {
            let mut kept = Vec::new();
            let end = crate::analysis::decode_each(elf, f.address, f.size, |x| {
                if keep(x) {
                    kept.push(*x);
                }
            });
            (end == f.end()).then_some(kept)
        },
    )
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

/// The entry window of `f` at `start`: the shortest run of whole instructions covering 5
/// bytes (see [`Tactic`]). With `inner` (not for a static program's wrapped function, whose
/// window is also its real function), the run may hold branch targets that nothing but direct
/// jumps reach ([`Analysis::jump_only`]): the window is then a [`Tactic::WindowJumps`] entry,
/// and [`plan_entry_jumps`] leads those jumps past the counting code or gives the entry up.
fn entry_window(
    elf: &InputElf,
    an: &Analysis,
    f: &Function,
    start: u64,
    opts: PlanOptions,
    inner: bool,
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
    // The first branch target inside the window.
    let mut target: Option<u64> = None;
    while len < JMP_LEN {
        if !dec.can_decode() {
            return Err(SkipReason::TooSmall);
        }
        let ins = dec.decode();
        if ins.is_invalid() {
            return Err(SkipReason::Undecodable(ins.ip()));
        }
        if ins.ip() != start && an.branch_targets.contains(&ins.ip()) {
            if !(inner && an.jump_only.contains_key(&ins.ip())) {
                return Err(SkipReason::BranchTarget(ins.ip()));
            }
            target.get_or_insert(ins.ip());
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
            return inner_targets(f, start, len, displaced, true, target);
        }
        if flow_ends && len < JMP_LEN && start + len >= end && target.is_none() {
            // The function ends here, short of 5 bytes: the window may run on over the
            // padding after it, which nothing executes or jumps to.
            if f.padding >= JMP_LEN - len || dead_nops(elf, an, end, JMP_LEN - len) {
                return Ok((JMP_LEN, displaced, false, Tactic::WindowPadding));
            }
            return Err(SkipReason::TooSmall);
        }
    }
    if target.is_some() {
        return inner_targets(f, start, len, displaced, false, target);
    }
    if !displaced.last().is_some_and(ends_flow) {
        if let Some(more) = stretch_to_exit(elf, an, f, start + len) {
            len += more.iter().map(|x| x.len() as u64).sum::<u64>();
            displaced.extend(more);
        }
    }
    Ok((len, displaced, false, Tactic::Window))
}

/// An entry window of `len` bytes at `start` whose first branch target after `start` is
/// `target` (none: a plain [`Tactic::Window`]). With one, the window is a
/// [`Tactic::WindowJumps`] entry when the instructions from the target on can form its entry
/// tail (`codegen::entry_tail`): no exit among them (the tail runs no exit instrumentation),
/// only jumps that stay in the function, and no branch of the window leads into the window
/// past its start (its copy would land in the patched bytes).
fn inner_targets(
    f: &Function,
    start: u64,
    len: u64,
    displaced: Vec<Instruction>,
    emulate_call: bool,
    target: Option<u64>,
) -> Result<Window, SkipReason> {
    let Some(t) = target else { return Ok((len, displaced, emulate_call, Tactic::Window)) };
    let inside = |a: u64| a > start && a < start + len;
    for x in &displaced {
        let branch = matches!(x.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64);
        if branch && inside(x.near_branch_target()) {
            return Err(SkipReason::BranchTarget(t));
        }
        if x.ip() < t {
            continue;
        }
        let ok = match x.flow_control() {
            FlowControl::Next => true,
            FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch => {
                branch && f.contains(x.near_branch_target()) && x.near_branch_target() != f.address
            }
            FlowControl::Call | FlowControl::IndirectCall => {
                emulate_call && x.ip() == displaced[displaced.len() - 1].ip()
            }
            _ => false,
        };
        if !ok {
            return Err(SkipReason::BranchTarget(t));
        }
    }
    Ok((len, displaced, emulate_call, Tactic::WindowJumps))
}

/// Whether the `need` bytes at `at` (right after a function that ends in a `ret` or `jmp`)
/// are alignment `nop`s or `int3`s that nothing reaches: whole such instructions cover them and
/// no branch target (direct target, reference, symbol, function start) lies among them. A
/// function's [`Function::padding`] counts only a gap that is padding up to the next function;
/// this takes the padding before code that has no FDE (`_dl_relocate_static_pie`'s `ret`
/// before `deregister_tm_clones`), or before a stray target further on.
fn dead_nops(elf: &InputElf, an: &Analysis, at: u64, need: u64) -> bool {
    if an.branch_targets.range(at..at + need).next().is_some() {
        return false;
    }
    let mut covered = 0;
    for x in decode_at(elf, at, 15) {
        if covered >= need {
            break;
        }
        if x.is_invalid() || !matches!(x.mnemonic(), Mnemonic::Nop | Mnemonic::Int3) {
            return false;
        }
        covered += x.len() as u64;
    }
    covered >= need
}

/// Longest entry window a tiny function's body is stretched to (see [`stretch_to_exit`]).
pub const STRETCH_MAX: u64 = 32;

/// The instructions from `from` (the end of a complete entry window) up to and including the
/// function's exit when they are straight-line code ending in a `ret` or a direct tail jump
/// to another function's start, within [`STRETCH_MAX`] bytes of the window's start: the entry
/// window then takes them in, and the entry trampoline runs the exit instrumentation
/// ([`Tactic::EntryExit`]) instead of the exit needing a patch of its own, which a tiny
/// function often has no room for.
fn stretch_to_exit(elf: &InputElf, an: &Analysis, f: &Function, from: u64) -> Option<Vec<Instruction>> {
    let start = if f.has_endbr { f.address + 4 } else { f.address };
    let limit = (start + STRETCH_MAX).min(f.end());
    if from >= limit {
        return None;
    }
    let mut out = Vec::new();
    for x in decode_at(elf, from, limit - from) {
        if x.is_invalid() || an.branch_targets.contains(&x.ip()) || check_relocatable(&x).is_err() {
            return None;
        }
        match x.flow_control() {
            FlowControl::Next => out.push(x),
            FlowControl::Return if x.mnemonic() == Mnemonic::Ret => {
                out.push(x);
                return Some(out);
            }
            FlowControl::UnconditionalBranch
                if matches!(x.op0_kind(), OpKind::NearBranch32 | OpKind::NearBranch64)
                    && !f.contains(x.near_branch_target())
                    && an.function_at(x.near_branch_target()).is_some_and(|g| {
                        !g.is_cold_part()
                            && (x.near_branch_target() == g.address
                                || (g.has_endbr && x.near_branch_target() == g.address + 4))
                    }) =>
            {
                out.push(x);
                return Some(out);
            }
            _ => return None,
        }
    }
    None
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

/// Hand-written assembly of musl (`src/*/x86_64/*.s`, `crt1`): never instrumented, whose
/// code has a PC range or a stack shape others depend on (the cancellation window
/// `__cp_begin..__cp_end`, the signal return, a child thread's first instructions, TLS set-up).
const MUSL_ASM: &[&str] = &[
    "_start",
    "_start_c",
    "__clone",
    "__syscall_cp_asm",
    "__cp_begin",
    "__cp_end",
    "__cp_cancel",
    "__restore_rt",
    "__restore",
    "__set_thread_area",
    "__unmapself",
    "__tls_get_addr",
    "setjmp",
    "_setjmp",
    "__setjmp",
    "sigsetjmp",
    "__sigsetjmp",
    "longjmp",
    "_longjmp",
    "__longjmp",
    "__sigsetjmp_tail",
    "dlsym",
    "__dlsym",
];

// ---- Safe traps (issue 12): the signal wrappers of programs with trap sites. ----
//
// A trap site needs SIGTRAP unblocked and stint's SIGTRAP handler installed; the runtime's
// signal wrappers (`rt-lib/src/signals.rs`) keep both while showing the program what it asked
// for. They cost nothing where there is no trap: they are planned only in a plan with trap
// sites (dynamic programs: their PLT stubs and GOT call sites, planned after the exits, when
// the trap sites are known; static programs: their functions' entries, planned before the
// exits, hence a second pass once the first found trap sites).

/// Trap sites of a plan: entries and exits whose tactic is [`Tactic::Trap`].
pub fn trap_sites(plan: &Plan) -> usize {
    let entries = plan.points.iter().filter(|p| p.wrap.is_none() && p.import.is_none() && p.tactic == Tactic::Trap);
    entries.count() + plan.exits.iter().filter(|x| x.tactic == Tactic::Trap).count()
}

/// A wrapper point of a signal function (`stint_layout::SignalFn`).
pub fn is_signal_wrap(w: &Wrap) -> bool {
    stint_layout::SignalFn::from_u32(w.func).is_some()
}

/// The gate bits of the wrapper of import `name`: a signal function's is the hook bit alone
/// (it measures nothing) when `signals` (the plan has trap sites), else none; the others'
/// come from the spec.
fn wrap_bits(spec: &Spec, name: &str, signals: bool) -> u8 {
    match stint_layout::SignalFn::from_name(name) {
        Some(_) if signals => stint_layout::GATE_HOOK,
        Some(_) => 0,
        None => spec.wrap_bits_for(name),
    }
}

/// The name a static program's function `func` (`WRAP_*`) is wrapped under: thread-library
/// and process functions always, signal functions in the signal pass.
fn static_wrap_name(func: u32, signals: bool) -> Option<&'static str> {
    let signal = stint_layout::SignalFn::from_u32(func).filter(|_| signals).map(|f| f.name());
    let process = stint_layout::ProcessFn::from_u32(func).map(|p| p.name());
    stint_layout::WrappedFn::from_u32(func).map(|w| w.name()).or(process).or(signal)
}

/// A static program whose first plan has trap sites and that has signal functions is planned
/// again with those functions as wrapper entries (they may then lose their own trap sites).
fn needs_static_signal_pass(elf: &InputElf, first: &Plan) -> bool {
    elf.kind.is_static()
        && trap_sites(first) > 0
        && static_wrapped_functions(elf).values().any(|&f| stint_layout::SignalFn::from_u32(f).is_some())
}

/// A static musl program's libc part is compiled without CFI (Debian's musl has no
/// `.eh_frame` for its C code), so "no FDE" does not mean hand-written there: its C
/// functions are instrumented like the program's own, its assembly ([`MUSL_ASM`]) is not.
fn static_libc_without_cfi(elf: &InputElf, name: &str) -> bool {
    elf.kind.is_static() && elf.libc == crate::input::Libc::Musl && !MUSL_ASM.contains(&name)
}

/// The thread-library functions of a static program (D4: ordinary functions there), by
/// address: every `.symtab` function symbol whose name, or the name without its leading
/// underscores, is a wrapped function's (`pthread_mutex_lock` and glibc's
/// `___pthread_mutex_lock`, musl's `__pthread_mutex_lock` alias one another). Empty for a
/// dynamic program (its wrappers are at the PLT); in a stripped one, `__libc_start_main` only,
/// found from the entry point.
fn static_wrapped_functions(elf: &InputElf) -> HashMap<u64, u32> {
    use object::read::elf::{ElfFile64, Sym as _};
    let mut out = HashMap::new();
    if !elf.kind.is_static() {
        return out;
    }
    let Ok(file) = ElfFile64::<object::Endianness>::parse(elf.data) else { return out };
    let (en, table) = (file.endian(), file.elf_symbol_table());
    for sym in table.iter() {
        if sym.st_type() != object::elf::STT_FUNC || sym.st_shndx(en) == object::elf::SHN_UNDEF {
            continue;
        }
        let Ok(name) = table.symbol_name(en, sym).map(String::from_utf8_lossy) else { continue };
        let exact = stint_layout::wrap_id(&name);
        if let Some(id) = exact.or_else(|| stint_layout::wrap_id(name.trim_start_matches('_'))) {
            let slot = out.entry(sym.st_value(en)).or_insert(id);
            // The public name wins over an internal one at the same address; of aliases of a
            // signal function (signal, bsd_signal, ssignal), the first in `SignalFn`.
            let alias = stint_layout::SignalFn::from_u32(*slot).is_some() && *slot < id;
            if exact.is_some() && !alias {
                *slot = id;
            }
        }
    }
    // A stripped program: `__libc_start_main` is found from `_start` (D22, `main`'s return).
    let start_main = stint_layout::ProcessFn::StartMain as u32;
    if !out.values().any(|&id| id == start_main) {
        if let Some(at) = crate::analysis::start_main_from_entry(elf) {
            out.entry(at).or_insert(start_main);
        }
    }
    out
}

/// Plan function `f` of a static program, the thread-library function `func`, as a wrapper
/// point (D4): its entry window jumps to the wrapper thunk, and the window's instructions,
/// relocated and followed by a jump back (`PieceKind::WrapReal`), are the "real function"
/// the runtime calls. False if the spec does not wrap it or no window fits (then it gets an
/// ordinary entry point, or is skipped as usual).
#[allow(clippy::too_many_arguments)]
fn plan_static_wrap(
    elf: &InputElf,
    an: &Analysis,
    spec: &Spec,
    plan: &mut Plan,
    (i, f): (usize, &Function),
    start: u64,
    func: u32,
    (opts, signals): (PlanOptions, bool),
) -> bool {
    let Some(name) = static_wrap_name(func, signals) else { return false };
    let bits = wrap_bits(spec, name, signals);
    if bits == 0 {
        return false;
    }
    let Ok((window_len, displaced, emulate_call, tactic)) = entry_window(elf, an, f, start, opts, false) else {
        return false;
    };
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
        wrap: Some(Wrap { func, name: name.to_string(), stub: f.address, got_slot: 0 }),
        import: None,
    });
    true
}
