//! Decoding every function once, what its instructions reach, and indirect jumps.

use super::{Cand, CodeMap, FuncIndex};
use super::{IndirectJump, JumpTable};
use crate::input::InputElf;
use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register,
};
use std::collections::{BTreeMap, HashMap};

/// How control gets from one function to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EdgeKind {
    /// A direct `jmp` (or a `jmp reg` with a known constant).
    Jump,
    /// A direct conditional jump (`jcc`, `loop`, `jrcxz`, `xbegin`).
    CondJump,
    /// An entry of a jump table.
    Table,
    /// A landing pad of the source's LSDA.
    Pad,
}

/// A jump from function `src` to `target` outside `src`'s range.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Edge {
    pub src: usize,
    pub target: u64,
    pub kind: EdgeKind,
}

impl Edge {
    pub(crate) fn direct(&self) -> bool {
        matches!(self.kind, EdgeKind::Jump | EdgeKind::CondJump)
    }
}

/// What the instructions of all functions reach (the instructions themselves are not kept:
/// the few passes that need them again decode the function again).
#[derive(Default)]
pub(crate) struct Code {
    /// The function contains a `ret`.
    pub has_ret: Vec<bool>,
    /// The function contains an indirect jump.
    pub has_indirect: Vec<bool>,
    /// The function's last decoded instruction.
    pub last: Vec<Option<Instruction>>,
    /// Decoding stopped before the end of the function.
    pub failed: Vec<bool>,
    /// Unresolved indirect jump, undecodable bytes or unparsable LSDA.
    pub unresolved: Vec<bool>,
    /// Branch targets found so far (unsorted, with duplicates).
    pub targets: Vec<u64>,
    /// The target of every direct `jmp` / `jcc` (unsorted, one per jump): a target pushed to
    /// `targets` only by these is reached by nothing else.
    pub jump_targets: Vec<u64>,
    /// Direct call targets, sorted and deduplicated.
    pub calls: Vec<u64>,
    /// Jumps leaving their function.
    pub edges: Vec<Edge>,
    /// Code addresses referenced by instructions (RIP-relative operands; in ET_EXEC also
    /// immediates and absolute displacements).
    pub refs: Vec<u64>,
    /// `(function, address)` of every indirect jump, in function order.
    pub indirect: Vec<(usize, u64)>,
    /// Every resolved table jump: its address and table (a jump decoded in two functions
    /// twice).
    pub tables: Vec<(u64, JumpTable)>,
    /// The target of every table entry read (unsorted, one per entry and jump): a target
    /// pushed to `targets` only by these and direct jumps is reached by nothing else.
    pub table_targets: Vec<u64>,
}

fn near_target(x: &Instruction) -> Option<u64> {
    match x.op0_kind() {
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => Some(x.near_branch_target()),
        _ => None,
    }
}

/// End of the bytes of `c` that lie in its section.
fn decode_end(codemap: &CodeMap, c: &Cand) -> u64 {
    codemap.section_end(c.address).map_or(c.address, |e| e.min(c.end()))
}

/// Decode function `c` (linear sweep over its range, within its section) into `out`; false if
/// decoding stopped before its end (an invalid instruction, bytes not in the file, the range
/// running past its section).
pub(crate) fn decode_function(elf: &InputElf, codemap: &CodeMap, c: &Cand, out: &mut Vec<Instruction>) -> bool {
    out.clear();
    let stop = decode_end(codemap, c);
    if stop <= c.address {
        return false;
    }
    let Some(bytes) = elf.bytes_at(c.address, stop - c.address) else { return false };
    let mut dec = Decoder::with_ip(64, bytes, c.address, DecoderOptions::NONE);
    let mut x = Instruction::default();
    while dec.can_decode() {
        dec.decode_out(&mut x);
        if x.is_invalid() {
            return false;
        }
        out.push(x);
    }
    stop == c.end()
}

/// Decode every candidate's range and collect direct targets, calls, edges and references.
/// The functions are decoded on every core ([`crate::par`]), each into a [`Decoded`], and
/// merged in function order, so the result is the same as one sweep's.
pub(crate) fn decode_all(elf: &InputElf, codemap: &CodeMap, cands: &[Cand], exec_kind: bool) -> Code {
    // Bytes to decode: every function once, bounded for inputs whose ranges overlap wildly.
    let mut budget = (elf.data.len() as u64).saturating_mul(2).saturating_add(1 << 20);
    let work: Vec<(usize, bool)> = cands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let len = decode_end(codemap, c) - c.address;
            if len > budget {
                (i, false) // not decoded: unresolved
            } else {
                budget -= len;
                (i, true)
            }
        })
        .collect();
    let parts =
        crate::par::map(&work, Vec::new, |buf, &(i, go)| decode_one(elf, codemap, &cands[i], i, go, exec_kind, buf));
    // Each list reserved at its final length: no reallocation copies 10^6 targets again.
    let total = |f: fn(&Decoded) -> usize| parts.iter().map(f).sum::<usize>();
    let mut code = Code::default();
    let n = parts.len();
    code.failed.reserve_exact(n);
    code.unresolved.reserve_exact(n);
    code.last.reserve_exact(n);
    code.has_ret.reserve_exact(n);
    code.has_indirect.reserve_exact(n);
    let n_refs = total(|d| d.refs.len());
    code.targets.reserve_exact(total(|d| d.targets.len()) + n_refs);
    code.jump_targets.reserve_exact(total(|d| d.jump_targets.len()));
    code.edges.reserve_exact(total(|d| d.edges.len()));
    code.indirect.reserve_exact(total(|d| d.indirect.len()));
    code.refs.reserve_exact(n_refs);
    let mut calls = Vec::with_capacity(total(|d| d.calls.len()));
    for d in parts {
        code.failed.push(!d.ok);
        code.unresolved.push(!d.ok);
        code.last.push(d.last);
        code.targets.extend(d.targets);
        calls.extend(d.calls);
        code.jump_targets.extend(d.jump_targets);
        code.edges.extend(d.edges);
        code.indirect.extend(d.indirect);
        code.refs.extend(d.refs);
        code.has_ret.push(d.has_ret);
        code.has_indirect.push(d.has_indirect);
    }
    code.targets.extend(code.refs.iter().copied());
    calls.sort_unstable();
    calls.dedup();
    code.calls = calls;
    code
}

/// What decoding one function found (the fields of [`Code`], for that function).
#[derive(Default)]
struct Decoded {
    ok: bool,
    last: Option<Instruction>,
    targets: Vec<u64>,
    calls: Vec<u64>,
    jump_targets: Vec<u64>,
    edges: Vec<Edge>,
    indirect: Vec<(usize, u64)>,
    refs: Vec<u64>,
    has_ret: bool,
    has_indirect: bool,
}

/// Decode function `i` (`c`) if `go`, into `buf`, and collect what [`decode_all`] keeps.
fn decode_one(
    elf: &InputElf,
    codemap: &CodeMap,
    c: &Cand,
    i: usize,
    go: bool,
    exec_kind: bool,
    buf: &mut Vec<Instruction>,
) -> Decoded {
    let end = c.end();
    let ok = if go {
        decode_function(elf, codemap, c, buf)
    } else {
        buf.clear();
        false
    };
    let mut d = Decoded { ok, last: buf.last().copied(), ..Decoded::default() };
    for x in buf.iter() {
        match x.flow_control() {
            FlowControl::Call | FlowControl::IndirectCall => {
                if let Some(t) = near_target(x) {
                    d.targets.push(t);
                    d.calls.push(t);
                }
                // The return address (unless the call ends the function: a noreturn call).
                if x.next_ip() < end {
                    d.targets.push(x.next_ip());
                }
            }
            fc
            @ (FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch | FlowControl::XbeginXabortXend) => {
                if let Some(t) = near_target(x) {
                    d.targets.push(t);
                    if fc != FlowControl::XbeginXabortXend {
                        d.jump_targets.push(t);
                    }
                    if t < c.address || t >= end {
                        let kind =
                            if fc == FlowControl::UnconditionalBranch { EdgeKind::Jump } else { EdgeKind::CondJump };
                        d.edges.push(Edge { src: i, target: t, kind });
                    }
                }
            }
            FlowControl::IndirectBranch => {
                d.has_indirect = true;
                d.indirect.push((i, x.ip()));
            }
            FlowControl::Return => d.has_ret = true,
            _ => {}
        }
        if x.is_ip_rel_memory_operand() {
            let m = x.ip_rel_memory_address();
            if codemap.is_exec(m) {
                d.refs.push(m);
            }
        } else if exec_kind {
            for op in 0..x.op_count() {
                let v = match x.op_kind(op) {
                    OpKind::Immediate32 | OpKind::Immediate32to64 | OpKind::Immediate64 => x.immediate(op),
                    OpKind::Memory if x.memory_base() == Register::None => x.memory_displacement64(),
                    _ => continue,
                };
                if codemap.is_exec(v) {
                    d.refs.push(v);
                }
            }
        }
    }
    d
}

/// What a register holds, as far as the backward slice can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Val {
    Const(u64),
    /// Loaded from `[table + index*scale]`, `size` bytes.
    Load {
        table: u64,
        scale: u32,
        size: u32,
        signed: bool,
    },
    /// A `Load` plus a constant: a PIC table entry plus its base.
    Rel {
        table: u64,
        scale: u32,
        size: u32,
        signed: bool,
        add: u64,
    },
    /// Loaded from memory without an index scaled by 4 or 8: a pointer.
    Pointer,
    /// An argument register's value on entry (straight-line from the entry): a pointer.
    Argument,
    /// One of two constants (`cmov`).
    Choice(u64, u64),
    /// An unknown index times 4 or 8 (`lea r, [i*4]`, `shl r, 3`): unoptimised code's way to
    /// index a table with `[base + r]`.
    Scaled(u32),
    Unknown,
}

/// The control flow into and out of a function that [`Slicer::flow_const`] cannot see in its
/// instructions.
#[derive(Default)]
struct Flow {
    /// The instructions of the function and of its cold parts, in address order (the
    /// function's first instruction first is not required: `entry` says where it is).
    ins: Vec<Instruction>,
    /// The function's first instruction (where control arrives from its callers).
    entry: u64,
    /// `[start, end)` of the function and each cold part: falling through stays inside one.
    ranges: Vec<(u64, u64)>,
    /// Addresses inside those ranges where control may arrive with any register value.
    entered: Vec<u64>,
    /// Landing pads inside those ranges: the unwinder arrives there from a call of the
    /// function (or a cold part) with the callee-saved registers it had at the call.
    pads: Vec<u64>,
    /// The targets of the function's indirect jumps that were resolved (tables, constants;
    /// none for a tail call), by the jump's address.
    succ: HashMap<u64, Vec<u64>>,
    /// The jumps being resolved.
    open: Vec<u64>,
}

enum Def {
    At(usize),
    /// Reached the function's first instruction without a write: the value on entry.
    Entry,
    /// Reached the start of a basic block that only jumps enter (the instruction before it
    /// does not fall through): its index.
    BlockStart(usize),
    /// Reached the slice limit without a write.
    Boundary,
    /// A call in between clobbers the (caller-saved) register.
    Clobbered,
}

use crate::abi::{ARGUMENTS, CALLER_SAVED};

/// How far back the slice looks for a definition.
const SLICE_LIMIT: usize = 48;

/// Backward slicing inside one function.
struct Slicer<'a> {
    ins: &'a [Instruction],
    /// Whether a call never returns (the next instruction starts a block only jumps enter).
    noreturn_call: &'a dyn Fn(&Instruction) -> bool,
    info: InstructionInfoFactory,
    /// Direct jumps inside the function by target (built when first needed).
    preds: Option<HashMap<u64, Vec<usize>>>,
    /// Results of `function_const` by register.
    consts: HashMap<Register, Option<u64>>,
    /// Results of `function_pointer` by register (`None` while one is being worked out).
    pointers: HashMap<Register, Option<bool>>,
    /// The function has landing pads: a call may continue anywhere a pad is.
    has_pads: bool,
    /// What [`Slicer::flow_const`] needs; `None`: it is not tried.
    flow: Option<Flow>,
    /// Instructions the slice may still look at.
    budget: u32,
}

/// Most instructions one indirect jump's slice looks at.
const SLICE_BUDGET: u32 = 4000;

/// Most jumps into a block the slice follows.
const MAX_PREDS: usize = 8;

impl<'a> Slicer<'a> {
    fn new(
        ins: &'a [Instruction],
        info: InstructionInfoFactory,
        noreturn_call: &'a dyn Fn(&Instruction) -> bool,
    ) -> Self {
        Slicer {
            ins,
            noreturn_call,
            info,
            preds: None,
            consts: HashMap::new(),
            pointers: HashMap::new(),
            has_pads: false,
            flow: None,
            budget: SLICE_BUDGET,
        }
    }
}

impl Slicer<'_> {
    fn writes(&mut self, k: usize, reg: Register) -> bool {
        let Some(x) = self.ins.get(k) else { return false };
        self.writes_ins(x, reg)
    }

    fn writes_ins(&mut self, x: &Instruction, reg: Register) -> bool {
        self.info.info(x).used_registers().iter().any(|u| {
            u.register().full_register() == reg
                && matches!(
                    u.access(),
                    OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
                )
        })
    }

    fn find_def(&mut self, reg: Register, before: usize) -> Def {
        let mut k = before;
        let mut steps = 0;
        while k > 0 && steps < SLICE_LIMIT {
            if self.budget == 0 {
                return Def::Boundary;
            }
            self.budget -= 1;
            k -= 1;
            steps += 1;
            let Some(x) = self.ins.get(k) else { return Def::Boundary };
            match x.flow_control() {
                FlowControl::UnconditionalBranch
                | FlowControl::IndirectBranch
                | FlowControl::Return
                | FlowControl::Exception => return Def::BlockStart(k + 1),
                FlowControl::Call | FlowControl::IndirectCall if (self.noreturn_call)(x) => {
                    return Def::BlockStart(k + 1)
                }
                FlowControl::Call | FlowControl::IndirectCall if CALLER_SAVED.contains(&reg) => return Def::Clobbered,
                _ if x.mnemonic() == Mnemonic::Hlt => return Def::BlockStart(k + 1),
                _ => {}
            }
            if self.writes(k, reg) {
                return Def::At(k);
            }
        }
        if k == 0 {
            Def::Entry
        } else {
            Def::Boundary
        }
    }

    fn reads(&mut self, k: usize, reg: Register) -> bool {
        let Some(x) = self.ins.get(k) else { return false };
        self.info.info(x).used_registers().iter().any(|u| {
            u.register().full_register() == reg
                && matches!(
                    u.access(),
                    OpAccess::Read | OpAccess::CondRead | OpAccess::ReadWrite | OpAccess::ReadCondWrite
                )
        })
    }

    /// `pop reg` at `k` restores the caller's value on the way out: an exit (`ret`, a tail
    /// jump) follows in the same block before anything reads `reg`.
    fn is_epilogue_pop(&mut self, k: usize, reg: Register) -> bool {
        if self.ins.get(k).is_none_or(|x| x.mnemonic() != Mnemonic::Pop) {
            return false;
        }
        for j in k + 1..(k + 12).min(self.ins.len()) {
            if self.reads(j, reg) {
                return false;
            }
            match self.ins[j].flow_control() {
                FlowControl::Next => {}
                FlowControl::Return | FlowControl::IndirectBranch | FlowControl::UnconditionalBranch => return true,
                _ => return false,
            }
        }
        false
    }

    /// If every write to `reg` in the function is the same `lea reg, [rip+T]` (not counting
    /// epilogue `pop`s): T.
    fn function_const(&mut self, reg: Register) -> Option<u64> {
        if let Some(v) = self.consts.get(&reg) {
            return *v;
        }
        let v = self.scan_function_const(reg);
        self.consts.insert(reg, v);
        v
    }

    fn scan_function_const(&mut self, reg: Register) -> Option<u64> {
        let mut value = None;
        for k in 0..self.ins.len() {
            if !self.writes(k, reg) || self.is_epilogue_pop(k, reg) {
                continue;
            }
            let x = self.ins.get(k)?;
            if x.mnemonic() != Mnemonic::Lea || !x.is_ip_rel_memory_operand() || x.op0_register() != reg {
                return None;
            }
            let t = x.ip_rel_memory_address();
            if value.is_some_and(|v| v != t) {
                return None;
            }
            value = Some(t);
        }
        value
    }

    /// What `reg` holds at index `before` when the slice found no single definition, from
    /// every write to it in the function: [`Slicer::function_const`], else
    /// [`Slicer::dominating_const`], else [`Slicer::function_pointer`].
    fn function_wide(&mut self, reg: Register, before: usize) -> Val {
        if let Some(t) = self.function_const(reg) {
            return Val::Const(t);
        }
        if let Some(t) = self.dominating_const(reg, before) {
            return Val::Const(t);
        }
        if self.function_pointer(reg) {
            return Val::Pointer;
        }
        if let Some(t) = self.flow_const(reg, before) {
            return Val::Const(t);
        }
        Val::Unknown
    }

    /// `T` when forward constant propagation of `reg` over the function's control flow
    /// finds that every path reaching index `before` last wrote it with `lea reg,
    /// [rip+T]`. The paths: falling through, direct jumps, returning calls, the known
    /// targets of the function's other indirect jumps ([`Flow::succ`]); every address that
    /// code or data outside the function may reach ([`Flow::entered`]: jumps and calls from
    /// other functions and its cold parts, landing pads, address-taken code) and the
    /// function's entry start with an unknown value. Any other indirect jump reached, or a
    /// jump into the middle of an instruction, and nothing is concluded. (The jumps being
    /// resolved, [`Flow::open`], lead nowhere here: their targets receive the value they
    /// jump with, which cannot change a conclusion of `T` at `before`.)
    fn flow_const(&mut self, reg: Register, before: usize) -> Option<u64> {
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum S {
            Bottom,
            Const(u64),
            Top,
        }
        fn meet(a: S, b: S) -> S {
            match (a, b) {
                (S::Bottom, x) | (x, S::Bottom) => x,
                (S::Const(p), S::Const(q)) if p == q => S::Const(p),
                _ => S::Top,
            }
        }
        let flow = self.flow.take()?;
        let query = self.ins.get(before)?.ip();
        let result = (|| {
            let ins = &flow.ins[..];
            let range = |t: u64| flow.ranges.iter().position(|&(a, b)| t >= a && t < b);
            let at = |t: u64| -> Result<Option<usize>, ()> {
                if range(t).is_none() {
                    return Ok(None); // leaves the function
                }
                ins.binary_search_by_key(&t, |x| x.ip()).map(Some).map_err(|_| ())
            };
            let mut state = vec![S::Bottom; ins.len()];
            let first = at(flow.entry).ok()??;
            let mut work = vec![first];
            state[first] = S::Top;
            for &t in &flow.entered {
                let k = at(t).ok()??;
                state[k] = S::Top;
                work.push(k);
            }
            let caller_saved = CALLER_SAVED.contains(&reg);
            let mut pads = Vec::new();
            for &t in &flow.pads {
                pads.push(at(t).ok()??);
            }
            // What the register holds at some call (what a landing pad receives).
            let mut at_calls = if caller_saved { S::Top } else { S::Bottom };
            while let Some(k) = work.pop() {
                let x = ins[k];
                if matches!(x.flow_control(), FlowControl::Call | FlowControl::IndirectCall) && !pads.is_empty() {
                    let m = meet(at_calls, state[k]);
                    if m != at_calls || caller_saved {
                        at_calls = m;
                        for &p in &pads {
                            let q = meet(state[p], at_calls);
                            if q != state[p] {
                                state[p] = q;
                                work.push(p);
                            }
                        }
                    }
                }
                let out = if self.writes_ins(&x, reg) {
                    if x.mnemonic() == Mnemonic::Lea && x.is_ip_rel_memory_operand() && x.op0_register() == reg {
                        S::Const(x.ip_rel_memory_address())
                    } else {
                        S::Top
                    }
                } else {
                    state[k]
                };
                let mut next: Vec<u64> = Vec::new();
                let mut falls = false;
                match x.flow_control() {
                    FlowControl::Return | FlowControl::Exception => {}
                    FlowControl::Call | FlowControl::IndirectCall => falls = !(self.noreturn_call)(&x),
                    FlowControl::UnconditionalBranch => next.push(near_target(&x)?),
                    FlowControl::ConditionalBranch | FlowControl::XbeginXabortXend => {
                        falls = true;
                        next.push(near_target(&x)?);
                    }
                    FlowControl::IndirectBranch => {
                        if !flow.open.contains(&x.ip()) {
                            next.extend(flow.succ.get(&x.ip())?.iter().copied());
                        }
                    }
                    _ => falls = x.mnemonic() != Mnemonic::Hlt,
                }
                let out_call =
                    if caller_saved && matches!(x.flow_control(), FlowControl::Call | FlowControl::IndirectCall) {
                        S::Top
                    } else {
                        out
                    };
                let mut succ: Vec<usize> = Vec::new();
                if falls && ins.get(k + 1).is_some_and(|y| y.ip() == x.next_ip() && range(y.ip()) == range(x.ip())) {
                    succ.push(k + 1);
                }
                for t in next {
                    if let Some(j) = at(t).ok()? {
                        succ.push(j);
                    }
                }
                for j in succ {
                    let m = meet(state[j], out_call);
                    if m != state[j] {
                        state[j] = m;
                        work.push(j);
                    }
                }
            }
            match state.get(at(query).ok()??) {
                Some(S::Const(t)) => Some(*t),
                _ => None,
            }
        })();
        self.flow = Some(flow);
        result
    }

    /// `T` when the last write to `reg` before `before` in every path is one `lea reg,
    /// [rip+T]` at index `L` that every path from the function's entry to `before` passes:
    /// the other writes (not counting epilogue `pop`s) all come before `L`, and every
    /// instruction before `L` falls through or is a call that returns to the next one (no
    /// jump, no `ret`, no landing pad a call could unwind to), so nothing reaches past `L`
    /// without running it. (A table base set in the prologue, the register holding an
    /// argument until then: `mov r14, rdi; …; lea r14, [rip+table]`.)
    fn dominating_const(&mut self, reg: Register, before: usize) -> Option<u64> {
        if self.has_pads {
            return None;
        }
        let mut last = None;
        for k in 0..self.ins.len() {
            if self.writes(k, reg) && !self.is_epilogue_pop(k, reg) {
                last = Some(k);
            }
        }
        let l = last?;
        if l >= before {
            return None;
        }
        let x = self.ins[l];
        if x.mnemonic() != Mnemonic::Lea || !x.is_ip_rel_memory_operand() || x.op0_register() != reg {
            return None;
        }
        let straight = self.ins[..l].iter().all(|y| match y.flow_control() {
            FlowControl::Next => y.mnemonic() != Mnemonic::Hlt,
            FlowControl::Call | FlowControl::IndirectCall => !(self.noreturn_call)(y),
            _ => false,
        });
        straight.then(|| x.ip_rel_memory_address())
    }

    /// Every write to `reg` in the function (not counting epilogue `pop`s) gives it a
    /// pointer (a load) or an argument's value on entry (`mov rbx, rsi`): whatever path
    /// leads to a jump through it, it holds a code pointer of the caller's, not a table
    /// entry (a callback tail-called after the epilogue).
    fn function_pointer(&mut self, reg: Register) -> bool {
        if let Some(v) = self.pointers.get(&reg) {
            return v.unwrap_or(false);
        }
        self.pointers.insert(reg, None); // a cycle through `reg` proves nothing
        let mut any = false;
        let mut all = true;
        for k in 0..self.ins.len() {
            if !self.writes(k, reg) || self.is_epilogue_pop(k, reg) {
                continue;
            }
            any = true;
            // From depth 0: the answer is cached for every depth (a cycle through `reg`
            // ends at its placeholder, and the slice budget bounds the rest).
            if !matches!(self.eval_def(k, reg, 0), Val::Pointer | Val::Argument) {
                all = false;
                break;
            }
        }
        let v = any && all;
        self.pointers.insert(reg, Some(v));
        v
    }

    fn value(&mut self, reg: Register, before: usize, depth: u32) -> Val {
        if depth > 6 || reg == Register::None {
            return Val::Unknown;
        }
        let reg = reg.full_register();
        if reg == Register::RIP || reg == Register::RSP {
            return Val::Unknown;
        }
        match self.find_def(reg, before) {
            Def::At(d) => self.eval_def(d, reg, depth),
            Def::Entry if ARGUMENTS.contains(&reg) => Val::Argument,
            Def::BlockStart(k) => match self.value_from_preds(reg, k, depth) {
                Val::Unknown => self.function_wide(reg, before),
                v => v,
            },
            Def::Entry | Def::Boundary => self.function_wide(reg, before),
            // A call's return value: a function pointer (tables are never returned).
            Def::Clobbered if reg == Register::RAX => Val::Pointer,
            Def::Clobbered => Val::Unknown,
        }
    }

    /// The value of `reg` at the start of the block at index `k`, if every direct jump to it
    /// inside the function brings the same kind of value.
    fn value_from_preds(&mut self, reg: Register, k: usize, depth: u32) -> Val {
        // Jumps go past the alignment nops at the top of the block.
        let Some(start) =
            self.ins.get(k..).and_then(|r| r.iter().find(|x| x.mnemonic() != Mnemonic::Nop)).map(|x| x.ip())
        else {
            return Val::Unknown;
        };
        if self.preds.is_none() {
            let mut m: HashMap<u64, Vec<usize>> = HashMap::new();
            for (j, x) in self.ins.iter().enumerate() {
                if matches!(x.flow_control(), FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch) {
                    if let Some(t) = near_target(x) {
                        m.entry(t).or_default().push(j);
                    }
                }
            }
            self.preds = Some(m);
        }
        let preds: Vec<usize> = self.preds.as_ref().and_then(|m| m.get(&start)).cloned().unwrap_or_default();
        if preds.is_empty() || preds.len() > MAX_PREDS {
            return Val::Unknown;
        }
        let mut merged: Option<Val> = None;
        for j in preds {
            let v = match self.value(reg, j, depth + 1) {
                Val::Argument => Val::Pointer,
                v => v,
            };
            if v == Val::Unknown || merged.is_some_and(|m| m != v) {
                return Val::Unknown;
            }
            merged = Some(v);
        }
        merged.unwrap_or(Val::Unknown)
    }

    fn eval_def(&mut self, d: usize, reg: Register, depth: u32) -> Val {
        let Some(&x) = self.ins.get(d) else { return Val::Unknown };
        if x.mnemonic() == Mnemonic::Cdqe && reg == Register::RAX {
            return Self::sign_extended(self.value(Register::RAX, d, depth + 1));
        }
        if x.op_count() < 2 || x.op0_kind() != OpKind::Register || x.op0_register().full_register() != reg {
            return Val::Unknown;
        }
        let dst64 = x.op0_register().size() == 8;
        match x.mnemonic() {
            Mnemonic::Lea => {
                if x.is_ip_rel_memory_operand() {
                    Val::Const(x.ip_rel_memory_address())
                } else if x.memory_base() == Register::None && x.memory_index() == Register::None {
                    Val::Const(x.memory_displacement64())
                } else if x.memory_base() == Register::None
                    && x.memory_displacement64() == 0
                    && matches!(x.memory_index_scale(), 4 | 8)
                {
                    Val::Scaled(x.memory_index_scale())
                } else {
                    Val::Unknown
                }
            }
            Mnemonic::Mov => match x.op1_kind() {
                OpKind::Register if dst64 && x.op1_register().size() == 8 => self.value(x.op1_register(), d, depth + 1),
                OpKind::Immediate32 | OpKind::Immediate32to64 | OpKind::Immediate64 => Val::Const(x.immediate(1)),
                OpKind::Memory => self.load(&x, d, false, depth),
                _ => Val::Unknown,
            },
            Mnemonic::Movsxd if x.op1_kind() == OpKind::Memory && dst64 => self.load(&x, d, true, depth),
            Mnemonic::Movsxd if x.op1_kind() == OpKind::Register && dst64 => {
                Self::sign_extended(self.value(x.op1_register(), d, depth + 1))
            }
            Mnemonic::Shl if dst64 && matches!(x.op1_kind(), OpKind::Immediate8) => match x.immediate(1) {
                2 => Val::Scaled(4),
                3 => Val::Scaled(8),
                _ => Val::Unknown,
            },
            Mnemonic::Cmove
            | Mnemonic::Cmovne
            | Mnemonic::Cmova
            | Mnemonic::Cmovae
            | Mnemonic::Cmovb
            | Mnemonic::Cmovbe
            | Mnemonic::Cmovg
            | Mnemonic::Cmovge
            | Mnemonic::Cmovl
            | Mnemonic::Cmovle
            | Mnemonic::Cmovs
            | Mnemonic::Cmovns
            | Mnemonic::Cmovo
            | Mnemonic::Cmovno
            | Mnemonic::Cmovp
            | Mnemonic::Cmovnp
                if dst64 =>
            {
                let moved = match x.op1_kind() {
                    OpKind::Memory => self.load(&x, d, false, depth),
                    OpKind::Register if x.op1_register().size() == 8 => self.value(x.op1_register(), d, depth + 1),
                    _ => Val::Unknown,
                };
                let kept = self.value(reg, d, depth + 1);
                match (kept, moved) {
                    (Val::Pointer | Val::Argument, Val::Pointer | Val::Argument) => Val::Pointer,
                    (Val::Const(a), Val::Const(b)) if a == b => Val::Const(a),
                    (Val::Const(a), Val::Const(b)) => Val::Choice(a, b),
                    _ => Val::Unknown,
                }
            }
            Mnemonic::Add if dst64 => match x.op1_kind() {
                OpKind::Register if x.op1_register().size() == 8 => {
                    let a = self.value(reg, d, depth + 1);
                    let b = self.value(x.op1_register(), d, depth + 1);
                    match (a, b) {
                        (Val::Load { table, scale, size, signed }, Val::Const(add))
                        | (Val::Const(add), Val::Load { table, scale, size, signed }) => {
                            Val::Rel { table, scale, size, signed, add }
                        }
                        (Val::Const(p), Val::Const(q)) => Val::Const(p.wrapping_add(q)),
                        _ => Val::Unknown,
                    }
                }
                OpKind::Immediate8to64 | OpKind::Immediate32to64 => match self.value(reg, d, depth + 1) {
                    Val::Const(p) => Val::Const(p.wrapping_add(x.immediate(1))),
                    Val::Load { table, scale, size, signed } => {
                        Val::Rel { table, scale, size, signed, add: x.immediate(1) }
                    }
                    _ => Val::Unknown,
                },
                _ => Val::Unknown,
            },
            _ => Val::Unknown,
        }
    }

    /// A 4-byte table load, sign-extended afterwards (`cdqe`, `movsxd r64, r32`).
    fn sign_extended(v: Val) -> Val {
        match v {
            Val::Load { table, scale, size: 4, .. } => Val::Load { table, scale, size: 4, signed: true },
            _ => Val::Unknown,
        }
    }

    /// The value of a load from memory operand of `x` (at index `d`).
    fn load(&mut self, x: &Instruction, d: usize, signed: bool, depth: u32) -> Val {
        if x.is_ip_rel_memory_operand()
            || x.memory_index() == Register::None
            || matches!(x.memory_segment(), Register::FS | Register::GS)
        {
            return Val::Pointer;
        }
        let scale = x.memory_index_scale();
        let size = x.memory_size().size() as u32;
        if scale == 1 && x.memory_base() != Register::None {
            // `[base + index]` with one of them a table address, the other a scaled index.
            let b = self.value(x.memory_base(), d, depth + 1);
            let i = self.value(x.memory_index(), d, depth + 1);
            return match (b, i) {
                (Val::Const(c), Val::Scaled(s)) | (Val::Scaled(s), Val::Const(c)) => {
                    Val::Load { table: c.wrapping_add(x.memory_displacement64()), scale: s, size, signed }
                }
                _ => Val::Pointer,
            };
        }
        if scale != 4 && scale != 8 {
            return Val::Pointer;
        }
        let base = match x.memory_base() {
            Register::None => 0,
            b => match self.value(b, d, depth + 1) {
                Val::Const(c) => c,
                // The slice met a definition on one path only (a loop-carried or reused
                // register): what every path brings, if the flow is known.
                _ => match self.flow_const(b, d) {
                    Some(c) => c,
                    None => return Val::Unknown,
                },
            },
        };
        Val::Load { table: base.wrapping_add(x.memory_displacement64()), scale, size, signed }
    }
}

/// What an indirect jump is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Jump {
    /// Through a table of `size`-byte entries at `base`; target = ext(entry) + `add`.
    Table {
        base: u64,
        size: u32,
        signed: bool,
        add: u64,
    },
    /// A jump to known constant addresses.
    Direct(u64, Option<u64>),
    /// A tail call through a pointer (GOT, vtable, function pointer).
    TailCall,
    Unresolved,
}

fn classify_jump(sl: &mut Slicer, k: usize) -> Jump {
    let Some(&x) = sl.ins.get(k) else { return Jump::Unresolved };
    match x.op0_kind() {
        OpKind::Register => match sl.value(x.op0_register(), k, 0) {
            Val::Rel { table, scale, size, signed, add } if scale == size && (size == 4 || size == 8) => {
                Jump::Table { base: table, size, signed, add }
            }
            Val::Load { table, scale, size, signed } if scale == size && (size == 4 || size == 8) => {
                Jump::Table { base: table, size, signed, add: 0 }
            }
            Val::Pointer | Val::Argument => Jump::TailCall,
            Val::Const(c) => Jump::Direct(c, None),
            Val::Choice(a, b) => Jump::Direct(a, Some(b)),
            // Right after the epilogue's `pop` of a callee-saved register, with a value that
            // comes from no table: a tail call whose pointer the parent of a cold part loaded.
            Val::Unknown if after_pop(sl.ins, k, x.op0_register()) => Jump::TailCall,
            _ => Jump::Unresolved,
        },
        OpKind::Memory => {
            if x.is_ip_rel_memory_operand() || x.memory_index() == Register::None {
                return Jump::TailCall;
            }
            if x.memory_index_scale() != 8 || x.memory_size().size() != 8 {
                return Jump::Unresolved;
            }
            let base = match x.memory_base() {
                Register::None => 0,
                b => match sl.value(b, k, 1) {
                    Val::Const(c) => c,
                    _ => return Jump::Unresolved,
                },
            };
            Jump::Table { base: base.wrapping_add(x.memory_displacement64()), size: 8, signed: false, add: 0 }
        }
        _ => Jump::Unresolved,
    }
}

/// The instruction before `ins[k]` (falling into it) is a `pop` of a callee-saved register
/// other than `reg`: the frame is being torn down.
fn after_pop(ins: &[Instruction], k: usize, reg: Register) -> bool {
    const CALLEE_SAVED: [Register; 6] =
        [Register::RBX, Register::RBP, Register::R12, Register::R13, Register::R14, Register::R15];
    let Some(prev) = k.checked_sub(1).and_then(|j| ins.get(j)) else { return false };
    prev.mnemonic() == Mnemonic::Pop
        && prev.next_ip() == ins[k].ip()
        && prev.op0_kind() == OpKind::Register
        && CALLEE_SAVED.contains(&prev.op0_register())
        && prev.op0_register() != reg.full_register()
}

/// Most entries read from one table.
const MAX_TABLE_ENTRIES: u64 = 1 << 16;

/// What a table of a function may reach: the function index, functions connected by jumps,
/// which may be cold parts, parents by name (see [`table_scope`]).
type Scope<'a> = (&'a FuncIndex, &'a [Vec<usize>], &'a [bool], &'a [Option<usize>]);

/// (function, address, kind) of one indirect jump.
type JumpSpec = (usize, u64, Jump);

/// Every place in the file bytes of the loaded segments where 4 or 8 bytes, at any offset,
/// read as an address in an executable section: `(where, value)`, in address order. In a
/// fixed-address program a code pointer in data has no relocation, so this is the superset
/// of them that [`Slicer::flow_const`] counts as ways into a function (pointers and
/// immediates hold whole addresses; random bytes that happen to read as one only make it
/// more careful).
pub(crate) fn code_words(elf: &InputElf, codemap: &CodeMap) -> Vec<(u64, u64)> {
    let high = codemap.hi > u64::from(u32::MAX);
    let width = if high { 8 } else { 4 };
    // (segment address, its bytes, first offset, end offset): chunks of 1 MiB, scanned on
    // every core (node's 99 MB otherwise take a good part of its analysis).
    const CHUNK: usize = 1 << 20;
    let mut chunks: Vec<(u64, &[u8], usize, usize)> = Vec::new();
    for seg in elf.loads() {
        let Some(bytes) = usize::try_from(seg.offset)
            .ok()
            .and_then(|o| elf.data.get(o..o.saturating_add(seg.filesz as usize).min(elf.data.len())))
        else {
            continue;
        };
        let places = bytes.len().saturating_sub(width - 1);
        chunks.extend((0..places).step_by(CHUNK).map(|a| (seg.vaddr, bytes, a, (a + CHUNK).min(places))));
    }
    let found = crate::par::map(
        &chunks,
        || (),
        |_, &(vaddr, bytes, a, b)| {
            let mut out = Vec::new();
            for i in a..b {
                let v = match bytes.get(i..i + width) {
                    Some(w) if high => u64::from_le_bytes(w.try_into().unwrap_or([0; 8])),
                    Some(w) => u64::from(u32::from_le_bytes(w.try_into().unwrap_or([0; 4]))),
                    None => continue,
                };
                if codemap.is_exec(v) {
                    out.push((vaddr + i as u64, v));
                }
            }
            out
        },
    );
    found.concat()
}

/// The ways into code that [`flow_round`] looks up for each function, sorted by target, so
/// that a function's are found by its ranges (a scan of every edge, reference and word per
/// function made the fixed-address node's analysis 2.7 s longer).
struct Ways {
    /// (target, source function) of the jumps that leave their function.
    edges: Vec<(u64, usize)>,
    refs: Vec<u64>,
    calls: Vec<u64>,
    /// The relocations' values.
    relocs: Vec<u64>,
    /// (value, place) of [`code_words`].
    words: Vec<(u64, u64)>,
}

impl Ways {
    fn new(code: &Code, reloc_value: &HashMap<u64, u64>, words: Vec<(u64, u64)>) -> Ways {
        let sorted = |mut v: Vec<u64>| {
            v.sort_unstable();
            v
        };
        let mut edges: Vec<(u64, usize)> = code.edges.iter().map(|e| (e.target, e.src)).collect();
        edges.sort_unstable();
        let mut words: Vec<(u64, u64)> = words.into_iter().map(|(at, t)| (t, at)).collect();
        words.sort_unstable();
        Ways {
            edges,
            refs: sorted(code.refs.clone()),
            calls: sorted(code.calls.clone()),
            relocs: sorted(reloc_value.values().copied().collect()),
            words,
        }
    }
}

/// The items of `v` (sorted by `key`) whose key lies in one of `ranges` ([start, end)).
fn in_ranges<'a, T>(
    v: &'a [T],
    key: impl Fn(&T) -> u64 + Copy + 'a,
    ranges: &'a [(u64, u64)],
) -> impl Iterator<Item = &'a T> + 'a {
    ranges.iter().flat_map(move |&(a, b)| {
        let lo = v.partition_point(|x| key(x) < a);
        let hi = v.partition_point(|x| key(x) < b);
        v[lo..hi.max(lo)].iter()
    })
}

/// Second try for the jumps the slice left unresolved: [`Slicer::flow_const`] over the
/// function and its cold parts, with every table's targets known (they may enter the
/// function from elsewhere). In a position-independent program the data words that point
/// into a function are the relocations' values; in a fixed-address one, every word of the
/// file that reads as a code address ([`code_words`]) outside the tables already read.
#[allow(clippy::too_many_arguments)]
fn retry_with_flow(
    elf: &InputElf,
    codemap: &CodeMap,
    code: &Code,
    cands: &[Cand],
    scope: Scope,
    reloc_value: &HashMap<u64, u64>,
    noreturn_call: &dyn Fn(&Instruction) -> bool,
    (specs, pads): (&mut [JumpSpec], &[usize]),
    mut info: InstructionInfoFactory,
) {
    if !specs.iter().any(|s| s.2 == Jump::Unresolved) {
        return;
    }
    let words = if elf.kind.is_position_independent() { Vec::new() } else { code_words(elf, codemap) };
    let ways = Ways::new(code, reloc_value, words);
    // Where the tables of these functions may start: every `lea r, [rip+T]` into data. A
    // table of another function is read up to the next known base, and before a jump here
    // is resolved its table's base is not known, so the other table would run on into it.
    // Each round reads the other tables up to the bases the previous round found; the
    // result counts once a round finds the bases it assumed (the ones
    // `resolve_indirect_jumps` then reads up to).
    let mut assumed: Vec<u64> = Vec::new();
    let mut ins: Vec<Instruction> = Vec::new();
    let mut last_fi = usize::MAX;
    for s in specs.iter().filter(|s| s.2 == Jump::Unresolved) {
        if s.0 == last_fi {
            continue;
        }
        last_fi = s.0;
        let Some(c) = cands.get(s.0) else { continue };
        decode_function(elf, codemap, c, &mut ins);
        for x in &ins {
            if x.mnemonic() == Mnemonic::Lea && x.is_ip_rel_memory_operand() {
                let t = x.ip_rel_memory_address();
                if !codemap.is_exec(t) {
                    assumed.push(t);
                }
            }
        }
    }
    assumed.sort_unstable();
    assumed.dedup();
    for _round in 0..4 {
        let (found, back) = flow_round(
            elf,
            codemap,
            code,
            cands,
            scope,
            (reloc_value, &ways),
            noreturn_call,
            (specs, pads, &assumed),
            info,
        );
        info = back;
        let mut bases: Vec<u64> =
            found.iter().filter_map(|s| if let Jump::Table { base, .. } = s.1 { Some(base) } else { None }).collect();
        bases.sort_unstable();
        bases.dedup();
        if bases == assumed {
            for (i, j) in found {
                specs[i].2 = j;
            }
            return;
        }
        assumed = bases;
    }
}

/// One round of [`retry_with_flow`]: the new kinds of the unresolved jumps it resolves (by
/// index into `specs`), with the tables of other functions read up to the known bases and
/// `assumed`.
#[allow(clippy::too_many_arguments)]
fn flow_round(
    elf: &InputElf,
    codemap: &CodeMap,
    code: &Code,
    cands: &[Cand],
    (index, adj, maybe_cold, name_parent): Scope,
    (reloc_value, ways): (&HashMap<u64, u64>, &Ways),
    noreturn_call: &dyn Fn(&Instruction) -> bool,
    (specs, pads, assumed): (&[JumpSpec], &[usize], &[u64]),
    mut info: InstructionInfoFactory,
) -> (Vec<(usize, Jump)>, InstructionInfoFactory) {
    let mut found = Vec::new();
    // Every resolved jump's targets, and every way into code the decoded instructions show.
    let mut succ: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut from: Vec<(usize, u64)> = Vec::new(); // (source function, target) of table entries
    let mut read: Vec<(u64, u64)> = Vec::new(); // [start, end) of the tables read
    let mut bases: Vec<u64> =
        specs.iter().filter_map(|s| if let Jump::Table { base, .. } = s.2 { Some(base) } else { None }).collect();
    bases.extend_from_slice(assumed);
    bases.sort_unstable();
    bases.dedup();
    for &(fi, ip, j) in specs.iter() {
        let t = match j {
            Jump::Unresolved => continue,
            Jump::TailCall => Vec::new(),
            Jump::Direct(a, b) => std::iter::once(a).chain(b).collect(),
            Jump::Table { base, size, signed, add } => {
                let inside = table_scope(fi, adj, cands, index, maybe_cold);
                let next = bases.partition_point(|&b| b <= base);
                let limit = bases.get(next).copied().unwrap_or(u64::MAX);
                let t = table_targets(elf, reloc_value, (base, size, signed, add, limit), &inside);
                read.push((base, base.saturating_add(t.len() as u64 * u64::from(size))));
                t
            }
        };
        from.extend(t.iter().map(|&x| (fi, x)));
        succ.insert(ip, t);
    }
    let mut ins: Vec<Instruction> = Vec::new();
    let mut part: Vec<Instruction> = Vec::new();
    let mut k = 0;
    while k < specs.len() {
        let fi = specs[k].0;
        let group = specs[k..].iter().take_while(|s| s.0 == fi).count();
        let here = k..k + group;
        k += group;
        if !specs[here.clone()].iter().any(|s| s.2 == Jump::Unresolved) {
            continue;
        }
        let Some(c) = cands.get(fi) else { continue };
        // The function and the cold parts it jumps into (or that carry its name).
        let mut members: Vec<usize> = vec![fi];
        for &m in adj.get(fi).map_or(&[][..], |a| &a[..]) {
            if m != fi && (maybe_cold.get(m) == Some(&true) || name_parent.get(m) == Some(&Some(fi))) {
                members.push(m);
            }
        }
        let mut flow = Flow { entry: c.address, ..Flow::default() };
        let mut ok = true;
        for &m in &members {
            let Some(mc) = cands.get(m) else { continue };
            if !decode_function(elf, codemap, mc, &mut part) {
                ok = false;
                break;
            }
            flow.ins.extend_from_slice(&part);
            flow.ranges.push((mc.address, mc.end()));
        }
        flow.ins.sort_by_key(|x| x.ip());
        if !ok || flow.ins.windows(2).any(|w| w[0].next_ip() > w[1].ip()) {
            continue; // overlapping members: no single instruction stream
        }
        let within = |t: u64| flow.ranges.iter().any(|&(a, b)| t >= a && t < b);
        let member = |src: usize| members.contains(&src);
        let starts = |t: u64| flow.ins.binary_search_by_key(&t, |x| x.ip()).is_ok();
        let ranges = &flow.ranges[..];
        let mut entered: Vec<u64> = in_ranges(&ways.edges, |e| e.0, ranges)
            .filter(|e| !member(e.1))
            .map(|e| e.0)
            // Another function's table read past its end (into a table of ours, whose base is
            // not known yet) gives addresses that are not instructions; a real entry is one.
            .chain(from.iter().filter(|&&(src, t)| within(t) && !member(src) && starts(t)).map(|&(_, t)| t))
            .chain(in_ranges(&ways.refs, |&t| t, ranges).copied())
            .chain(in_ranges(&ways.calls, |&t| t, ranges).copied().filter(|&t| t != c.address))
            .chain(in_ranges(&ways.relocs, |&t| t, ranges).copied())
            // A word at a 4-byte aligned place counts even if it points into the middle of an
            // instruction (then nothing is concluded, as for a relocation's value); one at
            // another place only if it points to an instruction (bytes that happen to read as
            // an address there are more likely than a pointer stored there).
            .chain(
                in_ranges(&ways.words, |w| w.0, ranges)
                    .filter(|&&(t, at)| !read.iter().any(|&(a, b)| at >= a && at < b) && (at % 4 == 0 || starts(t)))
                    .map(|&(t, _)| t),
            )
            .collect();
        entered.sort_unstable();
        entered.dedup();
        flow.entered = entered;
        let mut pad_list: Vec<u64> =
            code.edges.iter().filter(|e| e.kind == EdgeKind::Pad && member(e.src)).map(|e| e.target).collect();
        pad_list.sort_unstable();
        pad_list.dedup();
        // A pad outside the members: its code may come back with anything (it is `entered`).
        flow.pads = pad_list.into_iter().filter(|&t| within(t)).collect();
        for s in &specs[here.clone()] {
            if s.2 == Jump::Unresolved {
                flow.open.push(s.1);
            }
        }
        flow.succ = succ.clone();
        decode_function(elf, codemap, c, &mut ins);
        let mut sl = Slicer::new(&ins, info, noreturn_call);
        sl.has_pads = pads.binary_search(&fi).is_ok();
        sl.flow = Some(flow);
        for i in here {
            if specs[i].2 != Jump::Unresolved {
                continue;
            }
            if let Ok(k) = ins.binary_search_by_key(&specs[i].1, |x| x.ip()) {
                sl.budget = SLICE_BUDGET;
                match classify_jump(&mut sl, k) {
                    Jump::Unresolved => {}
                    j => found.push((i, j)),
                }
            }
        }
        info = sl.info;
    }
    (found, info)
}

/// Where a table of function `fi` may lead: into `fi`, the functions it is connected with
/// (`adj`, two steps) and functions that may be cold parts.
fn table_scope<'a>(
    fi: usize,
    adj: &'a [Vec<usize>],
    cands: &'a [Cand],
    index: &'a FuncIndex,
    maybe_cold: &'a [bool],
) -> impl Fn(u64) -> bool + 'a {
    let mut allowed: Vec<usize> = vec![fi];
    if let Some(a) = adj.get(fi) {
        for &m in a {
            allowed.push(m);
            allowed.extend(adj[m].iter().copied());
        }
    }
    allowed.sort_unstable();
    allowed.dedup();
    move |t: u64| {
        allowed.iter().any(|&m| cands.get(m).is_some_and(|c| t >= c.address && t < c.end()))
            || index.containing(t).is_some_and(|m| maybe_cold[m])
    }
}

/// Every target of the table `(base, size, signed, add)` up to the first entry that leads
/// outside `inside`, the next table's base `limit` or the end of its section: the targets
/// [`resolve_indirect_jumps`] records for it.
fn table_targets(
    elf: &InputElf,
    reloc_value: &HashMap<u64, u64>,
    (base, size, signed, add, limit): (u64, u32, bool, u64, u64),
    inside: &dyn Fn(u64) -> bool,
) -> Vec<u64> {
    let mut out = Vec::new();
    let Some(sec) =
        elf.sections.iter().find(|s| s.is_alloc() && s.has_bits() && base >= s.addr && base - s.addr < s.size)
    else {
        return out;
    };
    let data = elf.section_data(sec);
    let end = sec.addr.saturating_add(sec.size).min(limit);
    for count in 0..MAX_TABLE_ENTRIES {
        let Some(loc) = base.checked_add(count * u64::from(size)) else { break };
        if loc.saturating_add(u64::from(size)) > end {
            break;
        }
        let off = (loc - sec.addr) as usize;
        let Some(b) = data.get(off..off + size as usize) else { break };
        let raw = if size == 8 {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            reloc_value.get(&loc).copied().unwrap_or(u64::from_le_bytes(a))
        } else {
            let mut a = [0u8; 4];
            a.copy_from_slice(b);
            let v = u32::from_le_bytes(a);
            if signed {
                v as i32 as i64 as u64
            } else {
                u64::from(v)
            }
        };
        let t = raw.wrapping_add(add);
        if !inside(t) {
            break;
        }
        out.push(t);
    }
    out
}

/// Resolve every indirect jump: add table targets (and edges), mark the functions with jumps
/// we cannot resolve. Returns the extents `[start, end)` of the tables read, and what each
/// indirect jump (by address) was found to be.
#[allow(clippy::too_many_arguments)]
pub(crate) fn resolve_indirect_jumps(
    elf: &InputElf,
    codemap: &CodeMap,
    code: &mut Code,
    cands: &[Cand],
    index: &FuncIndex,
    reloc_value: &HashMap<u64, u64>,
    name_parent: &[Option<usize>],
    noreturn_call: &dyn Fn(&Instruction) -> bool,
) -> (Vec<(u64, u64)>, BTreeMap<u64, IndirectJump>) {
    let n = cands.len();
    // Functions connected by direct jumps, landing pads or `.cold` names: a table may point
    // into any of them (cold parts, possibly unrecognised ones).
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
    for e in &code.edges {
        if let Some(j) = index.containing(e.target) {
            if j != e.src && e.src < n {
                adj[e.src].push(j);
                adj[j].push(e.src);
            }
        }
    }
    for (j, p) in name_parent.iter().enumerate() {
        if let Some(p) = *p {
            if p < n && p != j {
                adj[j].push(p);
                adj[p].push(j);
            }
        }
    }
    for a in &mut adj {
        a.sort_unstable();
        a.dedup();
    }

    // Functions that may be cold parts: named `….cold`, or unnamed and never called.
    let maybe_cold: Vec<bool> = cands
        .iter()
        .map(|c| match &c.raw_name {
            Some(r) => r.contains(".cold"),
            None => code.calls.binary_search(&c.address).is_err(),
        })
        .collect();

    // Functions with landing pads (a call in them may continue at a pad).
    let mut pads: Vec<usize> = code.edges.iter().filter(|e| e.kind == EdgeKind::Pad).map(|e| e.src).collect();
    pads.sort_unstable();
    pads.dedup();

    // One slicer per function (its caches serve all of the function's indirect jumps);
    // `code.indirect` is in function order.
    let mut specs: Vec<(usize, u64, Jump)> = Vec::new();
    let mut info = InstructionInfoFactory::new();
    let mut ins: Vec<Instruction> = Vec::new();
    let mut rest = &code.indirect[..];
    while let Some(&(fi, _)) = rest.first() {
        let group = rest.iter().take_while(|j| j.0 == fi).count();
        let (jumps, tail) = rest.split_at(group);
        rest = tail;
        let Some(c) = cands.get(fi) else { continue };
        decode_function(elf, codemap, c, &mut ins);
        let mut sl = Slicer::new(&ins, info, noreturn_call);
        sl.has_pads = pads.binary_search(&fi).is_ok();
        for &(_, ip) in jumps {
            let j = match ins.binary_search_by_key(&ip, |x| x.ip()) {
                Ok(k) => {
                    sl.budget = SLICE_BUDGET;
                    classify_jump(&mut sl, k)
                }
                Err(_) => Jump::Unresolved,
            };
            specs.push((fi, ip, j));
        }
        info = sl.info;
    }
    retry_with_flow(
        elf,
        codemap,
        code,
        cands,
        (index, &adj, &maybe_cold, name_parent),
        reloc_value,
        noreturn_call,
        (&mut specs, &pads),
        info,
    );

    let mut bases: Vec<u64> = specs
        .iter()
        .filter_map(|(_, _, j)| if let Jump::Table { base, .. } = j { Some(*base) } else { None })
        .collect();
    bases.sort_unstable();
    bases.dedup();

    let mut extents = Vec::new();
    let mut kinds: BTreeMap<u64, IndirectJump> = BTreeMap::new();
    // A jump decoded in two (nested) functions keeps the less certain of its kinds.
    let mut note = |ip: u64, k: IndirectJump| {
        let e = kinds.entry(ip).or_insert(k);
        if k.rank() > e.rank() {
            *e = k;
        }
    };
    for (fi, ip, j) in specs {
        match j {
            Jump::TailCall => note(ip, IndirectJump::TailCall),
            Jump::Direct(a, b) => {
                note(ip, IndirectJump::Constant(a, b));
                for t in std::iter::once(a).chain(b) {
                    code.targets.push(t);
                    if cands.get(fi).is_some_and(|c| t < c.address || t >= c.end()) {
                        code.edges.push(Edge { src: fi, target: t, kind: EdgeKind::Jump });
                    }
                }
            }
            Jump::Unresolved => {
                note(ip, IndirectJump::Unresolved);
                code.unresolved[fi] = true
            }
            Jump::Table { base, size, signed, add } => {
                let inside = table_scope(fi, &adj, cands, index, &maybe_cold);
                let next = bases.partition_point(|&b| b <= base);
                let limit = bases.get(next).copied().unwrap_or(u64::MAX);
                let own = cands.get(fi).map_or(0..0, |c| c.address..c.end());
                let targets = table_targets(elf, reloc_value, (base, size, signed, add, limit), &inside);
                for &t in &targets {
                    code.targets.push(t);
                    if !own.contains(&t) {
                        code.edges.push(Edge { src: fi, target: t, kind: EdgeKind::Table });
                    }
                }
                code.table_targets.extend_from_slice(&targets);
                let count = targets.len() as u64;
                // No entry leads into the function: a table of 8-byte pointers whose entries
                // are other functions' starts is one of function pointers, and the jump a
                // tail call through it (perl's `return PL_check[type](aTHX_ o)` after the
                // epilogue, `jmp [PL_ppaddr + 8 * i]`: 9 functions of /usr/bin/perl).
                let callee =
                    |t: u64| index.containing(t).is_some_and(|j| cands[j].address == t && !maybe_cold[j]) && !inside(t);
                let pointers = count == 0
                    && size == 8
                    && add == 0
                    && !table_targets(elf, reloc_value, (base, size, signed, add, base + 8), &callee).is_empty();
                if pointers {
                    note(ip, IndirectJump::TailCall);
                } else if count == 0 {
                    note(ip, IndirectJump::Unresolved);
                    code.unresolved[fi] = true;
                } else {
                    note(ip, IndirectJump::Table);
                    extents.push((base, base.saturating_add(count * u64::from(size))));
                    code.tables.push((ip, JumpTable { base, size, signed, add, entries: count }));
                }
            }
        }
    }
    (extents, kinds)
}
