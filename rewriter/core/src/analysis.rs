//! Analysis: which functions the program has, where they start and end, and every address
//! that control flow can reach other than by falling through (the branch-target set, D2).
//!
//! # Functions
//!
//! Functions come from `.symtab` (`STT_FUNC`/`STT_GNU_IFUNC`, defined, size > 0), `.dynsym`
//! (same, size taken from the FDE when the symbol has none) and `.eh_frame` FDEs (initial
//! location + length). Distribution binaries are stripped, so FDEs are the main source. All of
//! them must start in an executable section and outside `.plt`, `.plt.got`, `.plt.sec` and
//! `.plt.bnd` (FDEs there describe PLT stubs). Aliases at one address give one function: the
//! name comes from `.symtab` before `.dynsym`, and among symbols of one table a GLOBAL name
//! wins over a WEAK one, which wins over a LOCAL one. A size-0 `.symtab` symbol never makes a
//! function but still names the FDE at its address. The size is the chosen symbol's, else the
//! largest size of any symbol at that address, else the FDE length. An FDE without a symbol
//! gives `sub_<hex>`. Names are demangled: Rust first (`rustc-demangle`, alternate form without
//! the hash), then C++ (`cpp_demangle`, without parameters), else the raw name.
//!
//! # Cold parts
//!
//! GCC moves unlikely blocks of `f` into `f.cold` in `.text.unlikely`, with its own FDE. It is
//! entered only by jumps (or by the unwinder, as a landing pad) and must never be an entry
//! point. The rules, in order:
//!
//! 1. A function named by a symbol: cold iff its raw name contains `.cold`. Its parent is the
//!    function named by the prefix before `.cold` (if several have that name, the one that
//!    jumps into the part), else the function that jumps into it.
//! 2. A function known only from `.eh_frame`:
//!    - the target of a direct `call` is a function;
//!    - (b) if the CFI row at its first byte (CIE initial instructions + FDE instructions up to
//!      the first row, evaluated with gimli) has a CFA other than `rsp+8`, or saves a
//!      callee-saved register (rbx, rbp, r12–r15), it starts in the middle of a frame: cold;
//!    - if its address is taken (RIP-relative `lea`/memory operand, an immediate in ET_EXEC,
//!      a dynamic relocation, a code pointer in data in ET_EXEC — except words that belong to
//!      a resolved jump table — the ELF entry, DT_INIT/DT_FINI, a `.dynsym` symbol): function;
//!    - (a) and (d) below do not apply to a range that is 16-byte aligned and 64 bytes or
//!      longer: GCC places cold parts without alignment, while hand-written assembly (OpenSSL)
//!      is aligned, dispatches with `jcc` and jumps between its functions;
//!    - (a) if it contains a direct `jmp`/`jcc` into the interior (not the entry) of another
//!      function F, it is cold — unless F looks like *its* cold part: F is not itself known to
//!      be a function (called, address-taken, named) and F never jumps to this function's
//!      entry. (A parent jumps into its cold part too, but the cold part jumps back into the
//!      parent's middle, never to its entry, while the parent jumps to the cold part's entry.)
//!    - (c) if it is the target of jumps (direct or through a jump table) from exactly one
//!      other function, has no `ret`, and its straight-line path from the entry (stepping over
//!      calls that return) ends in `ud2`/`hlt` or a call to a function that never returns
//!      (a known libc/libstdc++/libgcc import such as `abort`, `__stack_chk_fail`,
//!      `__cxa_throw`, `_Unwind_Resume`, or a local function found not to return): cold;
//!    - (d) if it is entered only by conditional jumps, all from one other function, and
//!      `.comment` names no LLVM-based compiler (clang, rustc): GCC never emits a conditional
//!      tail call, so a `jcc` to an FDE start is a jump to a cold part — typically a frameless
//!      one such as `xor eax, eax; ret` for a switch's out-of-range case;
//!    - (e) if exactly one other function enters it, and that function jumps (or its LSDA
//!      lands) into its interior, not only to its entry: a function is entered at its entry,
//!      only a cold part (a `.cold` split whose symbol is gone) is entered in the middle by
//!      its parent's jumps; also with clang;
//!    - (f) as (e), even 16-byte aligned and 64 bytes or longer, when it has no `ret` and no
//!      indirect jump, the one function that enters it is known to be a function (called,
//!      address-taken, named), and every jump out of it is a direct one back into that
//!      function's interior: code only F enters and that only leads back into F runs in F's
//!      frame whatever its alignment (hand-written functions return or tail-call; python3.11's
//!      `_PyType_CalculateMetaclass`, whose unnamed 90-byte part happens to be aligned);
//!    - otherwise a function. In particular a function that is only tail-called (`jmp f`
//!      with CFA = rsp+8 at its start) stays a function.
//!
//!    The parent is the non-cold function that jumps to the part's entry (most jumps wins,
//!    then the lowest address), else one that jumps into its interior or owns a landing pad
//!    in it, else the function the part jumps back into.
//!
//! # Branch targets
//!
//! Every function entry (cold parts included), every direct `jmp`/`jcc`/`call`/`loop`/
//! `jrcxz`/`xbegin` target, every return address (the instruction after a `call` inside its
//! function: a `ret` goes there, and a displaced call pushes it), every landing pad from the
//! LSDAs in `.gcc_except_table`, every RIP-relative reference into an executable section, the
//! ELF entry, DT_INIT/DT_FINI, the starts of `.init`/`.fini`, every code address stored by a
//! dynamic relocation (`R_X86_64_RELATIVE`/`IRELATIVE` addends, `R_X86_64_64`/`GLOB_DAT`/
//! `JUMP_SLOT` symbol + addend), and in ET_EXEC every immediate or absolute displacement and
//! every 8-byte aligned word of allocated non-executable data that points into code.
//!
//! # Indirect jumps and jump tables
//!
//! For each indirect `jmp`, a backward slice inside its function finds what the jump register
//! (or the memory operand's base) holds. The slice walks back through the block (at most 48
//! instructions; crossing a `jcc` is fine), follows 64-bit register copies, `add`, `cmov`,
//! `cdqe`/`movsxd` and `lea r, [i*4]`/`shl r, 2`, and at the top of a block that only jumps
//! enter (the instruction before it is a `jmp`, `ret`, `ud2`, `hlt` or a call that never
//! returns, alignment nops skipped) continues into every jump to that block (at most 8,
//! they must agree). A call clobbers the caller-saved registers. A register the slice cannot
//! follow is still a constant if every write to it in the function is the same RIP-relative
//! `lea` (not counting `pop`s that restore it right before an exit): GCC hoists a table's
//! `lea` out of loops. Failing that (issue 12's entry work, `code.rs`):
//! - the last write is a RIP-relative `lea` that every path from the entry passes: only
//!   straight-line code and returning calls before it, and no landing pads (`mov r14, rdi;
//!   call f; lea r14, [rip+T]`);
//! - every write is a pointer load or an argument's value: a tail call (a callback called
//!   after the epilogue);
//! - in a position-independent program only (where every data word pointing into code has a
//!   relocation), forward propagation of the register over the function and its cold parts:
//!   every path brings the same `lea`'s value. Addresses entered from other code (jumps,
//!   calls, other tables, relocations, refs) start unknown, landing pads get what the calls
//!   hold, the function's other indirect jumps lead to their resolved targets (an unresolved
//!   one reached: no result). Another function's table is read up to the next table base,
//!   which a table not yet resolved cannot give: rounds assume the bases of the previous
//!   round (at first every data `lea` of the functions concerned) until they agree.
//!
//! - `sext(dword [B + I*4]) + C` (or `[B + I]` with I a scaled index, as at -O0), B and C
//!   constants: GCC's and clang's PIC tables (`lea rA, [rip+T]; movsxd rB, [rA+rI*4];
//!   add rB, rA; jmp rB`), and label-difference tables of computed gotos (C is a label).
//! - `qword [I*8 + T]`, `qword [B + I*8]` (in `jmp [mem]` or loaded into the register), and
//!   4-byte zero- or sign-extended entries plus an immediate: absolute tables. In PIE the
//!   entries are read from their `R_X86_64_RELATIVE` relocations.
//!
//! Entries are read until one points outside the owning function, the functions it is
//! connected to by direct jumps, landing pads or `.cold` names (its cold parts, its parent),
//! and every function that may be a cold part (named `….cold`, or unnamed and never called: a
//! table may point into a cold part we have not linked to its parent yet) — or until the table
//! runs into another table's start or the end of its section. This reads past the end of some
//! tables (extra targets are safe); stopping early would miss targets. All targets are added,
//! and the words of the tables do not count as address-taken code.
//!
//! Not tables (nothing to add) — heuristics:
//! - `jmp qword [rip+X]`, `jmp qword [reg+disp]`: a tail call through the GOT or a pointer;
//! - `jmp reg` where reg was loaded from memory without an index scaled by 4 or 8 (`mov rax,
//!   [rax+8]; jmp rax`: a virtual tail call), holds an argument register's value on entry
//!   (reached straight-line from the function's first instruction: a function-pointer
//!   argument), or is `rax` straight after a call (a returned function pointer);
//! - `jmp reg` whose value the slice cannot find (no table load), right after a `pop` of a
//!   callee-saved register: a tail call after the epilogue, typically in a cold part whose
//!   parent loaded the pointer (python3.11's `pop rbx; pop rbp; pop r12; jmp rax`);
//! - `jmp reg` with a known constant, or one of two constants (`cmov`): direct jumps in
//!   disguise; the constants are added.
//!
//! Any other indirect jump makes the function `unresolved_indirect_jump`, and all its
//! instruction starts become targets. `Analysis::indirect_jumps` records what each indirect
//! jump was found to be (table, constant, tail call, unresolved): the planner's exits are the
//! tail calls. A function whose bytes stop decoding, or whose LSDA
//! cannot be parsed, is unresolved as well.
//!
//! # Padding
//!
//! After each function, up to the next function or the end of its section: counted (at most
//! 64) only if every byte is `int3`, a (multi-byte) `nop` or zero and no byte is a target.

mod code;
mod cold;
mod dynrel;
mod symbols;
#[cfg(test)]
mod tests;
pub(crate) mod unwind;

pub(crate) use cold::is_noreturn_import;
pub(crate) use symbols::demangle;
pub use unwind::LsdaCallSite;

use crate::error::{Error, Result};
use crate::input::InputElf;
use iced_x86::{Decoder, DecoderOptions, Instruction};
use std::collections::{BTreeMap, HashMap};

/// Where a function was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FunctionSource {
    Symtab,
    Dynsym,
    EhFrame,
}

/// A function, or a split-off part of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum FunctionKind {
    /// Entered by calls (or tail calls): its entry is an instrumentation point.
    Function,
    /// A cold part (`f.cold`) entered only by jumps from its parent; never a point.
    ColdPart { parent: Option<u64> },
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Function {
    /// Demangled name, or `sub_<hex address>` for functions known only from `.eh_frame`.
    pub name: String,
    pub address: u64,
    pub size: u64,
    pub source: FunctionSource,
    pub kind: FunctionKind,
    /// Starts with `endbr64`.
    pub has_endbr: bool,
    /// Bytes of padding (nop / int3 / zero) after `address + size` that belong to no function
    /// and are no branch target, so a patch window may extend over them.
    pub padding: u64,
    /// Contains an indirect jump whose targets could not be resolved: all of its
    /// instruction starts are in the branch-target set.
    pub unresolved_indirect_jump: bool,
    /// An `.eh_frame` FDE starts at `address`. Compiled code always has one on x86-64;
    /// code without one is hand-written or generated (V8's embedded builtins, which V8 copies
    /// at run time), and the planner leaves it alone.
    pub has_unwind: bool,
}

impl Function {
    pub fn end(&self) -> u64 {
        self.address + self.size
    }
    pub fn is_cold_part(&self) -> bool {
        matches!(self.kind, FunctionKind::ColdPart { .. })
    }
    /// Whether `addr` lies in `[address, end)`.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.address && addr - self.address < self.size
    }
}

/// A PLT stub and the imported function it jumps to.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PltStub {
    /// Address of the stub (its `endbr64` when it has one).
    pub address: u64,
    /// The GOT slot the stub jumps through.
    pub got_slot: u64,
    /// The imported symbol (from the slot's dynamic relocation).
    pub name: String,
}

/// What an indirect `jmp` was found to be (see "Indirect jumps and jump tables").
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IndirectJump {
    /// Through a resolved jump table: its targets are branch targets; it stays inside the
    /// function (and its cold parts).
    Table,
    /// A direct jump in disguise: a register holding one of these constants.
    Constant(u64, Option<u64>),
    /// A tail call through a pointer (GOT slot, vtable, function-pointer argument).
    TailCall,
    /// Not resolved: the function is `unresolved_indirect_jump`.
    Unresolved,
}

impl IndirectJump {
    /// Order of certainty, for a jump seen from two nested functions: higher is less sure.
    pub(crate) fn rank(self) -> u8 {
        match self {
            IndirectJump::Table => 0,
            IndirectJump::Constant(..) => 1,
            IndirectJump::TailCall => 2,
            IndirectJump::Unresolved => 3,
        }
    }
}

/// The table of a resolved table jump (see "Indirect jumps and jump tables"): entry `i` is
/// the `size`-byte word at `base + i * size`, sign- or zero-extended, plus `add`; analysis
/// read `entries` of them (all reaching the function or the parts it may jump into, maybe
/// more than the program reads: the program's bound on the index is not known here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JumpTable {
    pub base: u64,
    pub size: u32,
    pub signed: bool,
    pub add: u64,
    pub entries: u64,
}

/// [`Analysis::table_only`]: target → (direct jumps, table entries), sorted by target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableOnly(Vec<(u64, u32, u32)>);

impl TableOnly {
    /// The direct jumps and table entries (as [`JumpTable`]s read them) reaching `t`.
    pub fn get(&self, t: &u64) -> Option<(u32, u32)> {
        self.0.binary_search_by_key(t, |&(a, _, _)| a).ok().map(|i| (self.0[i].1, self.0[i].2))
    }
}

/// [`Analysis::table_only`] from every pushed target (`sorted`, with duplicates), the targets
/// of direct jumps and those of table entries (one per jump or entry).
fn table_only_targets(sorted: &[u64], mut jumps: Vec<u64>, mut entries: Vec<u64>) -> TableOnly {
    jumps.sort_unstable();
    entries.sort_unstable();
    let count = |v: &[u64], t: u64| v.partition_point(|&x| x <= t) - v.partition_point(|&x| x < t);
    let mut out = Vec::new();
    for t in entries.chunk_by(|a, b| a == b).map(|g| g[0]) {
        let all = sorted.partition_point(|&x| x <= t) - sorted.partition_point(|&x| x < t);
        let (j, e) = (count(&jumps, t), count(&entries, t));
        if j + e == all {
            out.push((t, j as u32, e as u32));
        }
    }
    TableOnly(out)
}

/// What analysis found.
#[derive(Debug, Default)]
pub struct Analysis {
    /// Sorted by address, one entry per address.
    pub functions: Vec<Function>,
    /// Every address that may be reached by a jump or call (direct targets, resolved jump
    /// tables, address-taken code, function entries).
    pub branch_targets: Targets,
    /// PLT stubs (`.plt`, `.plt.sec`, `.plt.got`, `.plt.bnd`) by address.
    pub plt_stubs: Vec<PltStub>,
    /// Every indirect `jmp` in a decoded function, by address, and what it was found to be.
    /// A function whose bytes stop decoding has its jumps after that point missing.
    pub indirect_jumps: BTreeMap<u64, IndirectJump>,
    /// GOT slots with a dynamic relocation naming a symbol (`JUMP_SLOT`, `GLOB_DAT`): the raw
    /// symbol name per slot. `call [rip+slot]` (`-fno-plt`, Rust) calls that import.
    pub got_imports: BTreeMap<u64, String>,
    /// The LSDA call-site table of each function (or cold part) whose FDE has an LSDA, by the
    /// function's address. A call in such a function that no row covers terminates the
    /// program when an exception passes it (`noexcept`).
    pub lsda_sites: HashMap<u64, Vec<unwind::LsdaCallSite>>,
    /// The address of the LSDA of each function in `lsda_sites` (its action and type tables
    /// are read where an import trampoline restates a row: `crate::unwind`).
    pub lsdas: HashMap<u64, u64>,
    /// Branch targets that nothing but direct `jmp` / `jcc` instructions reach (no call, return
    /// address, table, reference, symbol or function start), with the number of those jumps
    /// as decoding found them (a jump decoded twice, in nested ranges, counts twice).
    pub jump_only: JumpOnly,
    /// Every resolved table jump's table, by the jump's address (a jump decoded in two
    /// functions with two different tables has none).
    pub jump_tables: BTreeMap<u64, JumpTable>,
    /// Branch targets that nothing but direct `jmp` / `jcc` instructions and entries of
    /// [`Analysis::jump_tables`] reach, with at least one such entry: the numbers of each.
    pub table_only: TableOnly,
}

/// [`Analysis::branch_targets`]: addresses, sorted and distinct, looked up by binary search
/// (built once from a sorted `Vec`; a set of a node-sized program's millions of targets
/// cost more to build than to search).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Targets(Vec<u64>);

impl Targets {
    /// From addresses sorted and distinct.
    fn from_sorted(sorted: Vec<u64>) -> Targets {
        debug_assert!(sorted.windows(2).all(|w| w[0] < w[1]));
        Targets(sorted)
    }

    pub fn contains(&self, a: &u64) -> bool {
        self.0.binary_search(a).is_ok()
    }

    /// The targets in `r`, in order.
    pub fn range(&self, r: impl std::ops::RangeBounds<u64>) -> std::slice::Iter<'_, u64> {
        use std::ops::Bound;
        let lo = match r.start_bound() {
            Bound::Included(&a) => self.0.partition_point(|&t| t < a),
            Bound::Excluded(&a) => self.0.partition_point(|&t| t <= a),
            Bound::Unbounded => 0,
        };
        let hi = match r.end_bound() {
            Bound::Included(&b) => self.0.partition_point(|&t| t <= b),
            Bound::Excluded(&b) => self.0.partition_point(|&t| t < b),
            Bound::Unbounded => self.0.len(),
        };
        self.0[lo..hi.max(lo)].iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, u64> {
        self.0.iter()
    }

    /// Every target of `self` is one of `other`'s.
    pub fn is_subset(&self, other: &Targets) -> bool {
        self.0.iter().all(|t| other.contains(t))
    }
}

/// [`Analysis::jump_only`]: target → number of jumps, sorted by target, looked up by binary
/// search (built in order in one pass, where a hash map's inserts were a third of the
/// branch-target step on node).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JumpOnly(Vec<(u64, u32)>);

impl JumpOnly {
    pub fn get(&self, t: &u64) -> Option<&u32> {
        self.0.binary_search_by_key(t, |&(a, _)| a).ok().map(|i| &self.0[i].1)
    }

    pub fn contains_key(&self, t: &u64) -> bool {
        self.get(t).is_some()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// [`Analysis::jump_only`] from every pushed target (`sorted`, with duplicates) and the
/// targets of direct jumps (one per jump).
fn jump_only_targets(sorted: &[u64], mut jumps: Vec<u64>) -> JumpOnly {
    sort_addresses(&mut jumps);
    let mut out = Vec::new();
    let mut j = 0;
    for group in sorted.chunk_by(|a, b| a == b) {
        let t = group[0];
        while j < jumps.len() && jumps[j] < t {
            j += 1;
        }
        let n = jumps[j..].iter().take_while(|&&x| x == t).count();
        if n == group.len() {
            out.push((t, n as u32));
        }
    }
    JumpOnly(out)
}

impl Analysis {
    /// The function or cold part whose range contains `addr` (the innermost if they nest).
    pub fn function_at(&self, addr: u64) -> Option<&Function> {
        let i = self.functions.partition_point(|f| f.address <= addr);
        self.functions[..i].iter().rev().take(64).find(|f| f.contains(addr))
    }
}

/// Decode up to `max_len` bytes at `addr`, stopping before the first invalid or cut-short
/// instruction (or where the file-backed bytes of the segment end).
pub fn decode_at(elf: &InputElf, addr: u64, max_len: u64) -> Vec<Instruction> {
    let mut out = Vec::new();
    decode_each(elf, addr, max_len, |x| out.push(*x));
    out
}

/// [`decode_at`] without collecting: `f` sees each instruction in turn; the address where
/// decoding stopped (after the last instruction decoded, `addr` if none).
pub(crate) fn decode_each(elf: &InputElf, addr: u64, max_len: u64, mut f: impl FnMut(&Instruction)) -> u64 {
    let mut len = max_len;
    let bytes = loop {
        if len == 0 {
            return addr;
        }
        if let Some(b) = elf.bytes_at(addr, len) {
            break b;
        }
        // Shorten to what the segment holds.
        match elf.loads().find(|s| addr >= s.vaddr && addr - s.vaddr < s.filesz) {
            Some(s) if s.vaddr.saturating_add(s.filesz) - addr < len => len = s.vaddr.saturating_add(s.filesz) - addr,
            _ => return addr,
        }
    };
    let mut end = addr;
    let mut dec = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    while dec.can_decode() {
        dec.decode_out(&mut ins);
        if ins.is_invalid() {
            break;
        }
        end = ins.next_ip();
        f(&ins);
    }
    end
}

/// The C library's start function (`__libc_start_main`) of a program without symbols,
/// found from its entry point (D22: its thunk records `main`'s return value): the target of
/// the first direct `call`/`jmp` that follows a load of `main` into `rdi` (`mov rdi, imm`
/// or `lea rdi, [rip+X]`). glibc's `_start` does that itself; musl's calls `_start_c`
/// first, which does it, so one direct call before any load of `rdi` is followed.
pub fn start_main_from_entry(elf: &InputElf) -> Option<u64> {
    use iced_x86::{Code, FlowControl, OpKind, Register};
    let mut at = elf.entry;
    for _hop in 0..2 {
        let mut next = None;
        let mut main_in_rdi = false;
        for x in decode_at(elf, at, 96) {
            let loads_rdi = x.op_count() == 2
                && x.op0_kind() == OpKind::Register
                && matches!(x.op0_register(), Register::RDI | Register::EDI);
            if loads_rdi {
                main_in_rdi = match x.code() {
                    Code::Mov_rm64_imm32 | Code::Mov_r64_imm64 | Code::Mov_r32_imm32 => true,
                    Code::Lea_r64_m => x.is_ip_rel_memory_operand(),
                    _ => false,
                };
                continue;
            }
            match x.flow_control() {
                FlowControl::Call | FlowControl::UnconditionalBranch if x.op0_kind() == OpKind::NearBranch64 => {
                    if main_in_rdi {
                        return Some(x.near_branch_target());
                    }
                    if x.flow_control() != FlowControl::Call {
                        return None;
                    }
                    next = Some(x.near_branch_target());
                    break;
                }
                FlowControl::Next => {}
                _ => return None,
            }
        }
        at = next?;
    }
    None
}

/// Executable ranges of the program, by section.
pub(crate) struct CodeMap {
    /// `(start, end, is_plt)` of executable sections, sorted by start.
    exec: Vec<(u64, u64, bool)>,
    lo: u64,
    hi: u64,
}

const PLT_SECTIONS: [&str; 4] = [".plt", ".plt.got", ".plt.sec", ".plt.bnd"];

impl CodeMap {
    fn new(elf: &InputElf) -> Self {
        let mut exec: Vec<(u64, u64, bool)> = elf
            .sections
            .iter()
            .filter(|s| s.is_exec() && s.size > 0)
            .map(|s| (s.addr, s.addr.saturating_add(s.size), PLT_SECTIONS.contains(&s.name.as_str())))
            .collect();
        exec.sort_unstable();
        let lo = exec.iter().map(|r| r.0).min().unwrap_or(u64::MAX);
        let hi = exec.iter().map(|r| r.1).max().unwrap_or(0);
        CodeMap { exec, lo, hi }
    }

    fn section(&self, a: u64) -> Option<(u64, u64, bool)> {
        if a < self.lo || a >= self.hi {
            return None;
        }
        let i = self.exec.partition_point(|r| r.0 <= a);
        self.exec[..i].iter().rev().take(4).find(|r| a < r.1).copied()
    }

    /// In an executable section (PLT included).
    pub(crate) fn is_exec(&self, a: u64) -> bool {
        self.section(a).is_some()
    }

    /// In an executable section other than a PLT: where functions live.
    pub(crate) fn is_code(&self, a: u64) -> bool {
        self.section(a).is_some_and(|r| !r.2)
    }

    /// End of the executable section containing `a`.
    pub(crate) fn section_end(&self, a: u64) -> Option<u64> {
        self.section(a).map(|r| r.1)
    }
}

/// A function while it is being analysed.
#[derive(Clone, Debug)]
pub(crate) struct Cand {
    pub address: u64,
    pub size: u64,
    pub source: FunctionSource,
    /// The symbol name before demangling.
    pub raw_name: Option<String>,
    /// Index into the FDE list.
    pub fde: Option<usize>,
}

impl Cand {
    fn end(&self) -> u64 {
        self.address + self.size
    }
}

/// Where an address falls among the functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loc {
    Entry(usize),
    Interior(usize),
    Outside,
}

/// Sorted function ranges with lookups.
pub(crate) struct FuncIndex {
    starts: Vec<u64>,
    ends: Vec<u64>,
    /// Largest end among functions `0..=i`.
    max_end: Vec<u64>,
}

impl FuncIndex {
    fn new(cands: &[Cand]) -> Self {
        let starts: Vec<u64> = cands.iter().map(|c| c.address).collect();
        let ends: Vec<u64> = cands.iter().map(|c| c.end()).collect();
        let mut max_end = Vec::with_capacity(ends.len());
        let mut m = 0;
        for &e in &ends {
            m = m.max(e);
            max_end.push(m);
        }
        FuncIndex { starts, ends, max_end }
    }

    pub(crate) fn entry(&self, a: u64) -> Option<usize> {
        self.starts.binary_search(&a).ok()
    }

    /// The innermost function whose range contains `a`.
    pub(crate) fn containing(&self, a: u64) -> Option<usize> {
        let i = self.starts.partition_point(|&s| s <= a);
        let mut j = i;
        let mut steps = 0;
        while j > 0 && steps < 64 {
            j -= 1;
            steps += 1;
            if self.max_end[j] <= a {
                return None;
            }
            if a < self.ends[j] {
                return Some(j);
            }
        }
        None
    }

    pub(crate) fn locate(&self, a: u64) -> Loc {
        if let Some(i) = self.entry(a) {
            return Loc::Entry(i);
        }
        match self.containing(a) {
            Some(i) => Loc::Interior(i),
            None => Loc::Outside,
        }
    }
}

/// Analyse a validated executable.
pub fn analyze(elf: &InputElf) -> Result<Analysis> {
    let codemap = CodeMap::new(elf);
    let file = object::read::elf::ElfFile64::<object::Endianness>::parse(elf.data)
        .map_err(|e| Error::Malformed(format!("symbol tables: {e}")))?;

    // 1. Candidates from symbols and FDEs.
    let syms = symbols::collect(&file, &codemap)?;
    let fdes = unwind::read_fdes(elf)?;
    let cands = symbols::merge(&syms, &fdes, &codemap);
    let index = FuncIndex::new(&cands);

    // 2. Code pointers in data and relocations, PLT stubs.
    let dynrefs = dynrel::collect(elf, &file, &codemap)?;
    let plt_stubs = dynrel::plt_stubs(elf, &dynrefs.got_names);
    let plt_by_addr: HashMap<u64, &str> = plt_stubs.iter().map(|s| (s.address, s.name.as_str())).collect();

    // 3. Decode every function once; direct targets, references, edges.
    let exec_kind = !elf.kind.is_position_independent();
    let mut code = code::decode_all(elf, &codemap, &cands, exec_kind);

    // 4. Landing pads (the unwinder jumps there).
    let mut lsda_sites = HashMap::new();
    let mut lsdas = HashMap::new();
    for (i, c) in cands.iter().enumerate() {
        let Some(lsda) = c.fde.and_then(|k| fdes.get(k)).and_then(|f| f.lsda) else {
            continue;
        };
        match unwind::call_sites(elf, lsda, c.address) {
            Some(sites) => {
                for p in sites.iter().filter_map(|s| s.pad) {
                    code.targets.push(p);
                    code.edges.push(code::Edge { src: i, target: p, kind: code::EdgeKind::Pad });
                }
                lsda_sites.insert(c.address, sites);
                lsdas.insert(c.address, lsda);
            }
            None => code.unresolved[i] = true,
        }
    }

    // 5. Functions that never return; jump tables.
    let noreturn = cold::noreturn_functions(&code, &cands, &index, &plt_by_addr, &dynrefs.got_names);
    let noreturn_call = |x: &Instruction| cold::call_noreturn(x, &index, &noreturn, &plt_by_addr, &dynrefs.got_names);
    let name_parent = cold::name_parents(&cands, &code, &index);
    let (tables, indirect_jumps) = code::resolve_indirect_jumps(
        elf,
        &codemap,
        &mut code,
        &cands,
        &index,
        &dynrefs.reloc_value,
        &name_parent,
        &noreturn_call,
    );

    // 6. Address-taken code.
    let mut taken: Vec<u64> = code.refs.clone();
    let tables = Extents::new(tables);
    for &(loc, value) in &dynrefs.refs {
        code.targets.push(value);
        if !tables.contains(loc) {
            taken.push(value);
        }
    }
    taken.extend(dynrefs.init_fini.iter().copied());
    taken.push(elf.entry);
    for s in &syms {
        if s.source == FunctionSource::Dynsym {
            taken.push(s.address);
        }
    }
    for name in [".init", ".fini"] {
        if let Some(s) = elf.section(name) {
            if s.is_exec() {
                taken.push(s.addr);
            }
        }
    }
    taken.sort_unstable();
    taken.dedup();
    code.targets.extend(taken.iter().copied());
    for s in &syms {
        code.targets.push(s.address);
    }

    // 7. Cold parts.
    let kinds = cold::classify(&cold::Inputs {
        cands: &cands,
        fdes: &fdes,
        index: &index,
        code: &code,
        taken: &taken,
        name_parent: &name_parent,
        noreturn: &noreturn,
        plt: &plt_by_addr,
        got_names: &dynrefs.got_names,
        llvm: built_by_llvm(elf),
        elf,
        codemap: &codemap,
    });

    // 8. Unresolved functions: every instruction start is a target.
    let mut ins = Vec::new();
    // A cold part's start is reached by its parent's jumps only (that is what makes it one).
    let mut cold_starts = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        if code.unresolved.get(i).copied().unwrap_or(false) {
            code::decode_function(elf, &codemap, c, &mut ins);
            code.targets.extend(ins.iter().map(|x| x.ip()));
        }
        match kinds[i] {
            FunctionKind::ColdPart { .. } => cold_starts.push(c.address),
            FunctionKind::Function => code.targets.push(c.address),
        }
    }
    let mut targets = std::mem::take(&mut code.targets);
    sort_addresses(&mut targets);
    let table_only = table_only_targets(&targets, code.jump_targets.clone(), std::mem::take(&mut code.table_targets));
    let jump_only = jump_only_targets(&targets, std::mem::take(&mut code.jump_targets));
    let mut jump_tables: BTreeMap<u64, JumpTable> = BTreeMap::new();
    let mut twice: Vec<u64> = Vec::new();
    for (ip, t) in std::mem::take(&mut code.tables) {
        if *jump_tables.entry(ip).or_insert(t) != t {
            twice.push(ip);
        }
    }
    for ip in twice {
        jump_tables.remove(&ip);
    }
    targets.extend(cold_starts);
    // Two sorted runs: the stable sort merges them in one pass.
    targets.sort();
    targets.dedup();
    let branch_targets = Targets::from_sorted(targets);

    // 9. Functions.
    // Names (demangling) and padding on every core.
    let functions = crate::par::map(
        &cands.iter().enumerate().collect::<Vec<_>>(),
        || (),
        |_, &(i, c)| {
            let name = match &c.raw_name {
                Some(raw) => symbols::demangle(raw),
                None => format!("sub_{:x}", c.address),
            };
            let has_endbr = elf.bytes_at(c.address, 4) == Some(&[0xf3, 0x0f, 0x1e, 0xfa][..]);
            Function {
                name,
                address: c.address,
                size: c.size,
                source: c.source,
                kind: kinds[i],
                has_endbr,
                padding: padding_after(elf, &codemap, &cands, i, &branch_targets),
                unresolved_indirect_jump: code.unresolved[i],
                has_unwind: c.fde.is_some(),
            }
        },
    );
    let got_imports = dynrefs.got_names.iter().map(|(&slot, name)| (slot, name.clone())).collect();
    Ok(Analysis {
        functions,
        branch_targets,
        plt_stubs,
        indirect_jumps,
        got_imports,
        lsda_sites,
        lsdas,
        jump_only,
        jump_tables,
        table_only,
    })
}

/// Sort addresses (a large program has 10^6 branch targets, the sort was a tenth of its
/// analysis): a least-significant-digit radix sort on their offsets from the least, 11 bits a
/// pass, as many passes as their span needs (three for 8 GiB of code). Sorted `u64`s are
/// sorted `u64`s: the order is `sort_unstable`'s, which short or widely spread inputs use.
fn sort_addresses(v: &mut Vec<u64>) {
    const BITS: u32 = 11;
    const MASK: u64 = (1 << BITS) - 1;
    let (Some(&min), Some(&max)) = (v.iter().min(), v.iter().max()) else { return };
    let passes = (u64::BITS - (max - min).leading_zeros()).div_ceil(BITS);
    if v.len() < 1 << 12 || passes > 4 {
        v.sort_unstable();
        return;
    }
    let mut src = std::mem::take(v);
    let mut dst = vec![0u64; src.len()];
    for pass in 0..passes {
        let digit = |x: u64| (((x - min) >> (pass * BITS)) & MASK) as usize;
        let mut next = [0usize; 1 << BITS];
        for &x in &src {
            next[digit(x)] += 1;
        }
        let mut sum = 0;
        for n in next.iter_mut() {
            (*n, sum) = (sum, sum + *n);
        }
        for &x in &src {
            let d = digit(x);
            dst[next[d]] = x;
            next[d] += 1;
        }
        std::mem::swap(&mut src, &mut dst);
    }
    *v = src;
}

/// Address ranges `[start, end)` (the jump tables read), merged and sorted for a binary
/// search: a program has thousands of tables and a relocation for every pointer in data.
struct Extents(Vec<(u64, u64)>);

impl Extents {
    fn new(mut ranges: Vec<(u64, u64)>) -> Self {
        ranges.retain(|r| r.0 < r.1);
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        Extents(merged)
    }

    fn contains(&self, a: u64) -> bool {
        let i = self.0.partition_point(|r| r.0 <= a);
        i > 0 && a < self.0[i - 1].1
    }
}

/// `.comment` names clang, rustc or another LLVM-based compiler.
fn built_by_llvm(elf: &InputElf) -> bool {
    let Some(c) = elf.section(".comment") else { return false };
    let text = String::from_utf8_lossy(elf.section_data(c)).to_ascii_lowercase();
    ["clang", "llvm", "rustc"].iter().any(|k| text.contains(k))
}

const MAX_PADDING: u64 = 64;

/// Padding after function `i`: see the module documentation.
fn padding_after(elf: &InputElf, codemap: &CodeMap, cands: &[Cand], i: usize, targets: &Targets) -> u64 {
    let Some(c) = cands.get(i) else { return 0 };
    let end = c.end();
    let Some(sec_end) = codemap.section_end(c.address) else { return 0 };
    if end >= sec_end {
        return 0;
    }
    let next = cands.partition_point(|f| f.address < end);
    let gap_end = cands.get(next).map_or(sec_end, |f| f.address.min(sec_end));
    if gap_end <= end {
        return 0;
    }
    if targets.range(end..gap_end).next().is_some() {
        return 0;
    }
    let Some(bytes) = elf.bytes_at(end, gap_end - end) else { return 0 };
    if is_padding(bytes, end) {
        (gap_end - end).min(MAX_PADDING)
    } else {
        0
    }
}

/// Whether `bytes` are all `int3`, zero, or nop instructions that end inside `bytes`.
fn is_padding(bytes: &[u8], ip: u64) -> bool {
    let mut pos = 0usize;
    let mut dec = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    while let Some(&b) = bytes.get(pos) {
        if b == 0xcc || b == 0x00 {
            pos += 1;
            continue;
        }
        if dec.set_position(pos).is_err() {
            return false;
        }
        dec.set_ip(ip.wrapping_add(pos as u64));
        dec.decode_out(&mut ins);
        if ins.is_invalid() || ins.mnemonic() != iced_x86::Mnemonic::Nop {
            return false;
        }
        pos += ins.len();
    }
    true
}
