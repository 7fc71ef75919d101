//! Code generation pass: every piece of code the rewriter adds (the entry stub, the stubs
//! into rt-lib, the shared timer routines, one trampoline per point, exit and call into an
//! import, the wrapper thunks), each encoded once at the address the layout pass
//! ([`crate::place`]) gave it.
//! [`piece`] encodes one piece (the layout pass sizes each by encoding it at its final
//! address and keeps the bytes); [`collect`] hands those to the unwind pass as [`Piece`]s,
//! [`generate`] encodes them all again (the same bytes; tests compare the two).
//!
//! Everything is encoded at its final address, with the bytes iced-x86's BlockEncoder gives
//! (by [`encode`]'s table of instruction shapes, which follows BlockEncoder's layout step for
//! step, or by BlockEncoder itself), so RIP-relative operands (gates, config) and branches
//! back into the program are exact, and displaced instructions are relocated the same way. The timer routines are written with
//! iced's `CodeAssembler`. The trampolines, thunks and stubs are lists of `Instruction`s
//! (the small `Block` builder below): they embed the program's decoded instructions and
//! address absolute targets RIP-relative, which `CodeAssembler` expresses only through
//! labels. Labels inside a block are instruction IPs from a private range in the kernel
//! half of the address space, which no program instruction can have.
//!
//! # Entry-point trampoline (calls metric)
//! ```text
//!        cmp   byte [rip+gate], 0         ; one load, one branch (D10)
//!        jne   .on                        ; off: fall straight through, no taken branch
//! .displaced
//!        <window instructions, relocated>
//!        jmp   <end of window>            ; (none if they end in ret/jmp)
//!        int3 × 0–15                      ; never reached: .on starts 16-aligned (ON_ALIGN)
//! .on    push  rax                        ; at a function entry nothing lives below rsp
//!        mov   rax, fs:[0]                ; thread pointer (psABI)
//!        cmp   rax, gs:[owner_tp]         ; GS → this thread's column?  (D8)
//!        jne   .slow
//!        mov   eax, fs:[tid_offset]       ; glibc's tid word: a recycled stack has a new tid
//!        cmp   eax, gs:[owner_key]
//!        jne   .slow
//! .count inc   qword gs:[counter]         ; the thread's own column: no atomics (D7)
//!        pop   rax
//!        <window instructions again>      ; saves a taken branch on the counting path
//!        jmp   <end of window>
//! .slow  mov   eax, <point id>
//!        call  slow_stub                  ; registers the thread, moves GS to its column
//!        test  eax, eax
//!        jnz   .count
//!        pop   rax
//!        jmp   .displaced
//! ```
//! Arithmetic flags are clobbered: at a function entry they are dead by the psABI. DF is
//! never touched.

mod encode;
mod template;

pub use template::Templates;

use crate::error::{Error, Result};
use crate::plan::{Exit, Plan, Point, Tactic};
use crate::rtimage;
use crate::unwind::{Initial, Piece};
use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, FlowControl, Instruction, InstructionBlock, MemoryOperand, Register,
};
use std::collections::BTreeMap;
use stint_layout::{
    cct_index_offset, cct_nodes_offset, counter_offset, gate_offset, metric_bit, TimerOp, CCT_CAP, CCT_HASH_MUL,
    CCT_NODE_CALLS_OFFSET, CCT_NODE_CPU_OFFSET, CCT_NODE_PARENT_OFFSET, CCT_NODE_POINT_OFFSET, CCT_NODE_SIZE,
    CCT_NODE_WALL_OFFSET, COL_BUSY_OFFSET, COL_CCT_MASK_OFFSET, COL_CPU_OFF_OFFSET, COL_DEPTH_OFFSET,
    COL_EXIT_KEY_OFFSET, COL_OWNER_KEY_OFFSET, COL_OWNER_TPX_OFFSET, COL_OWNER_TP_OFFSET, COL_SEQ_OFFSET,
    COL_SEQ_PTR_OFFSET, COL_SHADOW_READY_OFFSET, COL_SYNC_TICKS_OFFSET, COL_SYNC_TSC_OFFSET, COL_THREAD_MASK_OFFSET,
    COL_TIMER_SKIPPED_OFFSET, COL_UNMATCHED_EXITS_OFFSET, FRAME_BITS_OFFSET, FRAME_CPU_OFFSET, FRAME_NODE_OFFSET,
    FRAME_POINT_OFFSET, FRAME_SAMPLED, FRAME_SIZE, FRAME_SP_OFFSET, FRAME_UNTIMED, FRAME_WALL_OFFSET, METRIC_CALLS,
    METRIC_CPU_TIME, METRIC_LOCK_HOLD, METRIC_LOCK_WAIT, METRIC_WALL_TIME, N_COUNTER_SLOTS, SAMPLE_EVERY, SAMPLE_HASH,
    SAMPLE_LEARN, SAMPLE_PAUSED, SAMPLE_UNIT, SHADOW_CAP, SHADOW_OFFSET, SLOT_ACTIVE, SLOT_CALLS, SLOT_CPU_TICKS,
    SLOT_SAMPLED_SQ_CPU, SLOT_SAMPLED_SQ_WALL, SLOT_SAMPLED_TIMED, SLOT_WALL_TICKS, TIMER_BITS,
};

/// Label IPs live here; no user-space instruction can have such an address.
const LABEL_BASE: u64 = 0xffff_f000_0000_0000;

/// Builds one block of instructions with labels.
struct Block {
    ins: Vec<Instruction>,
    next_label: u64,
    pending: Option<u64>,
}

impl Block {
    fn new() -> Self {
        Block { ins: Vec::with_capacity(48), next_label: LABEL_BASE, pending: None }
    }

    fn label(&mut self) -> u64 {
        self.next_label += 1;
        self.next_label
    }

    /// The next instruction added gets label `l`.
    fn bind(&mut self, l: u64) {
        assert!(self.pending.is_none(), "two labels on one instruction");
        self.pending = Some(l);
    }

    fn add(&mut self, mut i: Instruction) {
        let ip = match self.pending.take() {
            Some(l) => l,
            None => self.label(),
        };
        i.set_ip(ip);
        self.ins.push(i);
    }

    fn op(&mut self, r: std::result::Result<Instruction, iced_x86::IcedError>) -> Result<()> {
        self.add(r.map_err(|e| Error::Internal(format!("instruction: {e}")))?);
        Ok(())
    }

    /// The block's bytes at `rip`: [`encode::encode`], which gives what iced's `BlockEncoder`
    /// gives, or `BlockEncoder` itself where that does not follow it. Under `cfg(test)` both
    /// run, and must agree.
    fn encode(self, rip: u64) -> Result<Vec<u8>> {
        let fast = encode::encode(&self.ins, rip);
        #[cfg(test)]
        if let Some(fast) = &fast {
            let iced = self.iced(rip).ok();
            assert_eq!(Some(fast), iced.as_ref(), "codegen::encode and BlockEncoder at 0x{rip:x}: {:?}", self.ins);
        }
        match fast {
            Some(code) => Ok(code),
            None => self.iced(rip),
        }
    }

    /// The block's bytes at `rip` from iced's `BlockEncoder`.
    fn iced(&self, rip: u64) -> Result<Vec<u8>> {
        let block = InstructionBlock::new(&self.ins, rip);
        let r = BlockEncoder::encode(64, block, BlockEncoderOptions::NONE)
            .map_err(|e| Error::Internal(format!("encoding at 0x{rip:x}: {e}")))?;
        Ok(r.code_buffer)
    }
}

/// `seg:[disp32]` with no base register (absolute within the segment).
fn seg_abs(seg: Register, disp: u32) -> MemoryOperand {
    MemoryOperand::new(Register::None, Register::None, 1, disp as i64, 4, false, seg)
}

fn rip(target: u64) -> MemoryOperand {
    MemoryOperand::with_base_displ(Register::RIP, target as i64)
}

fn mem(base: Register, disp: i64) -> MemoryOperand {
    MemoryOperand::with_base_displ(base, disp)
}

/// What a piece of generated code is. The layout pass ([`crate::place`]) gives every piece
/// an address; [`piece`] encodes it there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PieceKind {
    /// The new `e_entry` ([`entry_stub`]).
    EntryStub,
    /// [`slow_stub`].
    SlowStub,
    /// [`timer_stub`].
    TimerStub,
    /// [`timer_routine`] with `TIMER_OP_ENTER`.
    TimerEnter,
    /// [`timer_routine`] with `TIMER_OP_EXIT`.
    TimerExit,
    /// The SIGTRAP handler ([`trap_stub`]).
    TrapStub,
    /// The entry trampoline of `plan.points[i]` ([`trampoline`]).
    Trampoline(usize),
    /// The wrapper thunk of `plan.points[i]` ([`wrap_thunk`]), its `WrapSite` at `site`;
    /// `real` is its [`PieceKind::WrapReal`] in a static program, 0 for a PLT wrapper.
    WrapThunk { point: usize, site: u64, real: u64 },
    /// The real function of a static program's wrapped function `plan.points[i]`: the entry
    /// window's instructions, relocated, and a jump back ([`wrap_real`]).
    WrapReal(usize),
    /// The trampoline of `plan.exits[i]` ([`exit_trampoline`]).
    ExitTrampoline(usize),
    /// The trampoline of `plan.import_sites[i]` ([`import_trampoline`]).
    ImportTrampoline(usize),
    /// The calibration routine ([`calibration`]), for its own point (`calib_point`).
    Calibration,
    /// The window of `plan.exits[exit].redirects[redirect]` ([`jump_window`]); `copy` is the
    /// exit trampoline's copy of the jump's target.
    JumpWindow { exit: usize, redirect: usize, copy: u64 },
    /// `plan.slot_windows[i]` ([`slot_window`]).
    SlotWindow(usize),
    /// The entry tail of `plan.points[point]` from its displaced instruction at `to`
    /// ([`entry_tail`]).
    EntryTail { point: usize, to: u64 },
    /// The window of `plan.entry_jumps[point id][redirect]` ([`jump_window`]); `copy` is the
    /// entry tail of the jump's target.
    EntryJumpWindow { point: usize, redirect: usize, copy: u64 },
}

/// A piece of generated code and the place the layout pass gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PieceAt {
    pub kind: PieceKind,
    pub at: u64,
    /// Its size in bytes, from the layout pass's sizing run.
    pub len: usize,
}

/// Every address outside itself that generated code refers to. The layout pass fills it in
/// block by block; a piece only refers to blocks placed before it (or to the program and the
/// writable memory), so sizing a piece at its final address gives its final size.
#[derive(Clone, Debug, Default)]
pub struct Targets {
    /// The program's own entry point (where the entry stub continues).
    pub program_entry: u64,
    /// `RtConfig`, the first argument of every rt-lib entry.
    pub config: u64,
    /// The runtime image; its entry points are at `rtimage::STINT_RT_*` from here.
    pub image: u64,
    /// The control region (gates first).
    pub control: u64,
    pub n_points: u32,
    /// fs-relative offset of libc's tid word (0: none).
    pub tid_offset: u32,
    pub slow_stub: u64,
    pub timer_stub: u64,
    pub timer_enter: u64,
    pub timer_exit: u64,
    /// GOT slot of a wrapped import → its wrapper thunk (`Plan::wrap_slots`): a displaced
    /// `call`/`jmp [rip+slot]` is redirected there ([`redirect_wrapped`]).
    pub wrap_thunks: BTreeMap<u64, u64>,
    /// A jump of an entry window into the run of a `window+jumps` exit
    /// ([`crate::plan::Redirect::in_entry`]) → the exit trampoline's copy of its target, where
    /// the entry trampoline's copy of the jump leads (those exit trampolines are placed first).
    pub entry_redirects: BTreeMap<u64, u64>,
    /// The spec lets the runtime sample short calls: the timer routines carry the sampling
    /// paths (without them a timed call costs what it did before sampling existed).
    pub sampling: bool,
}

impl Targets {
    fn trampoline_env(&self, point: u32) -> TrampolineEnv {
        TrampolineEnv {
            gate: self.control + gate_offset(point),
            cookie: stint_layout::cookie_addr(self.control),
            counter: counter_offset(self.n_points, SLOT_CALLS, point) as u32,
            tid_offset: self.tid_offset,
            slow_stub: self.slow_stub,
            timer_enter: self.timer_enter,
            timer_exit: self.timer_exit,
        }
    }

    fn timer_env(&self) -> TimerEnv {
        TimerEnv {
            ctl: self.control,
            active: counter_offset(self.n_points, SLOT_ACTIVE, 0) as u32,
            cpu: counter_offset(self.n_points, SLOT_CPU_TICKS, 0) as u32,
            wall: counter_offset(self.n_points, SLOT_WALL_TICKS, 0) as u32,
            sq_cpu: counter_offset(self.n_points, SLOT_SAMPLED_SQ_CPU, 0) as u32,
            sq_wall: counter_offset(self.n_points, SLOT_SAMPLED_SQ_WALL, 0) as u32,
            sampled: counter_offset(self.n_points, SLOT_SAMPLED_TIMED, 0) as u32,
            cct_index: cct_index_offset(self.n_points, N_COUNTER_SLOTS) as u32,
            cct_nodes: cct_nodes_offset(self.n_points, N_COUNTER_SLOTS) as u32,
            timer_stub: self.timer_stub,
            sampling: self.sampling,
        }
    }
}

/// Encode one piece at `at`: the layout pass calls this to size pieces, [`generate`] to
/// produce them.
pub fn piece(plan: &Plan, kind: PieceKind, at: u64, t: &Targets) -> Result<Vec<u8>> {
    let rt = |entry: u64| t.image + entry;
    let point = |i: usize| plan.points.get(i).ok_or_else(|| Error::Internal(format!("codegen: no point {i}")));
    match kind {
        PieceKind::EntryStub => entry_stub(at, t.config, rt(rtimage::STINT_RT_INIT), t.program_entry),
        PieceKind::SlowStub => slow_stub(at, t.config, rt(rtimage::STINT_RT_SLOW)),
        PieceKind::TimerStub => timer_stub(at, t.config, rt(rtimage::STINT_RT_TIMER)),
        PieceKind::TimerEnter => timer_routine(at, TimerOp::Enter, t.timer_env()),
        PieceKind::TimerExit => timer_routine(at, TimerOp::Exit, t.timer_env()),
        PieceKind::TrapStub => trap_stub(at, t.config, rt(rtimage::STINT_RT_TRAP)),
        PieceKind::Trampoline(i) => {
            let p = point(i)?;
            let exit = plan.entry_exits.get(&p.id).copied();
            let wrapped = redirect_wrapped(&p.displaced, &t.wrap_thunks)?;
            let displaced = redirect_entry_jumps(wrapped.as_deref().unwrap_or(&p.displaced), &t.entry_redirects);
            match displaced.or(wrapped) {
                Some(displaced) => trampoline(&Point { displaced, ..p.clone() }, t.trampoline_env(p.id), at, exit),
                None => trampoline(p, t.trampoline_env(p.id), at, exit),
            }
        }
        PieceKind::WrapThunk { point: i, site, real } => {
            let p = point(i)?;
            let w = p.wrap.as_ref().ok_or_else(|| Error::Internal(format!("codegen: point {} is no wrapper", p.id)))?;
            if w.func == stint_layout::ProcessFn::StartMain as u32 {
                return start_main_thunk(at, site, rt(rtimage::STINT_RT_MAIN));
            }
            let real = if real != 0 { Real::Code(real) } else { Real::Got(w.got_slot) };
            if w.func == stint_layout::ProcessFn::Syscall as u32 {
                return syscall_thunk(at, site, rt(rtimage::STINT_RT_MAIN), real);
            }
            if crate::plan::is_signal_wrap(w) {
                signal_thunk(at, site, rt(rtimage::STINT_RT_WRAP))
            } else {
                let fast = thunk_fast(w.func, real, t, p.id, rt(rtimage::STINT_RT_WRAP_LOCK));
                wrap_thunk(at, t.control + gate_offset(p.id), p.bits, site, rt(rtimage::STINT_RT_WRAP), real, fast)
            }
        }
        PieceKind::WrapReal(i) => wrap_real(point(i)?, at),
        PieceKind::ExitTrampoline(i) => {
            let x = plan.exits.get(i).ok_or_else(|| Error::Internal(format!("codegen: no exit {i}")))?;
            let redirected =
                redirect_wrapped(&x.displaced, &t.wrap_thunks)?.map(|displaced| Exit { displaced, ..x.clone() });
            let x = redirected.as_ref().unwrap_or(x);
            // Only a tail jump can be one (the list is long in large programs: 3,927 in node).
            let tail = x.kind == crate::plan::ExitKind::TailJump;
            match plan.tail_imports.iter().find(|ti| tail && ti.site == x.site && ti.called) {
                Some(_) => tail_call_trampoline(x, t.trampoline_env(x.point), at),
                None => exit_trampoline(x, t.trampoline_env(x.point), at),
            }
        }
        PieceKind::JumpWindow { exit, redirect, copy } => jump_window(redirect_window(plan, exit, redirect)?, copy, at),
        PieceKind::SlotWindow(i) => slot_window(slot_window_of(plan, i)?, at),
        PieceKind::EntryTail { point: i, to } => {
            let p = point(i)?;
            let wrapped = redirect_wrapped(&p.displaced, &t.wrap_thunks)?;
            let displaced = wrapped.unwrap_or_else(|| p.displaced.clone());
            let displaced = redirect_entry_jumps(&displaced, &t.entry_redirects).unwrap_or(displaced);
            entry_tail(&displaced, p.emulate_call, to, at)
        }
        PieceKind::EntryJumpWindow { point, redirect, copy } => {
            jump_window(entry_jump_window(plan, point, redirect)?, copy, at)
        }
        PieceKind::ImportTrampoline(i) => {
            let x = plan.import_sites.get(i).ok_or_else(|| Error::Internal(format!("codegen: no import site {i}")))?;
            let p = point(x.point as usize)?;
            import_trampoline(&x.call, p, t.trampoline_env(p.id), at)
        }
        PieceKind::Calibration => {
            let point = stint_layout::calib_point(t.n_points);
            calibration(at, point, t.trampoline_env(point), TIMER_BITS | CALLS_BIT)
        }
    }
}

/// The code generation pass: every piece at the address the layout gave it, with the state
/// its unwind information starts from. Nothing is patched afterwards: a piece whose size
/// differs from the sizing run's is a bug, reported as such.
pub fn generate(plan: &Plan, pieces: &[PieceAt], t: &Targets) -> Result<Vec<Piece>> {
    let code = pieces.iter().map(|p| piece(plan, p.kind, p.at, t)).collect::<Result<Vec<_>>>()?;
    collect(plan, pieces, code, vec![None; pieces.len()])
}

/// The pieces of the layout pass's sizing run, which encoded each at its final address with
/// every target it refers to already placed ([`crate::place::Placement::code`]): the bytes
/// [`generate`] would encode again. Checks the sizes all the same.
pub fn collect(plan: &Plan, pieces: &[PieceAt], code: Vec<Vec<u8>>, shapes: Vec<Option<u64>>) -> Result<Vec<Piece>> {
    if code.len() != pieces.len() || shapes.len() != pieces.len() {
        return Err(Error::Internal(format!("codegen: {} pieces laid out, {} encoded", pieces.len(), code.len())));
    }
    pieces
        .iter()
        .zip(code)
        .zip(shapes)
        .map(|((p, code), shape)| {
            if code.len() != p.len {
                return Err(Error::Internal(format!(
                    "codegen: {:?} at 0x{:x} is {} bytes, laid out as {}",
                    p.kind,
                    p.at,
                    code.len(),
                    p.len
                )));
            }
            Ok(Piece { start: p.at, code, initial: initial_state(plan, p.kind)?, shape })
        })
        .collect()
}

/// The state a piece's unwind information starts from.
fn initial_state(plan: &Plan, kind: PieceKind) -> Result<Initial> {
    Ok(match kind {
        PieceKind::EntryStub => Initial::Entry,
        PieceKind::Trampoline(i) | PieceKind::WrapReal(i) => Initial::At(plan.points[i].address),
        PieceKind::ExitTrampoline(i) => Initial::At(plan.exits[i].address),
        PieceKind::SlotWindow(i) => Initial::At(slot_window_of(plan, i)?.patch().0),
        PieceKind::EntryTail { to, .. } => Initial::At(to),
        PieceKind::EntryJumpWindow { point, redirect, .. } => {
            Initial::At(entry_jump_window(plan, point, redirect)?.first().map_or(0, |x| x.ip()))
        }
        PieceKind::JumpWindow { exit, redirect, .. } => {
            Initial::At(redirect_window(plan, exit, redirect)?.first().map_or(0, |x| x.ip()))
        }
        // The caller's frame after its call (the trampoline is entered by it): while a
        // timed import runs, the return address lies in the trampoline and the unwinder
        // reads the caller's CFI from there.
        PieceKind::ImportTrampoline(i) => Initial::Called(plan.import_sites[i].address()),
        _ => Initial::Call,
    })
}

/// Addresses a trampoline needs.
#[derive(Clone, Copy, Debug)]
pub struct TrampolineEnv {
    /// Gate byte of this point (one bit per metric).
    pub gate: u64,
    /// The fork cookie's word (`stint_layout::cookie_addr`), for the calls-only entry path.
    pub cookie: u64,
    /// Offset of this point's call counter in a column (`gs:`-relative).
    pub counter: u32,
    /// fs-relative offset of libc's tid word, 0 to leave it out of the key.
    pub tid_offset: u32,
    pub slow_stub: u64,
    /// The shared timer routines (`timer_routine`).
    pub timer_enter: u64,
    pub timer_exit: u64,
}

const CALLS_BIT: u8 = metric_bit(METRIC_CALLS);

/// What this thread measures at the point: the gate ANDed with the thread's mask (`stint ctl
/// --thread`) into eax (al keeps it for the timer tests after), then `calls += 1` when the
/// point counts calls and the gate says so. Entry and import trampolines share it.
fn gated_count(b: &mut Block, bits: u8, env: TrampolineEnv) -> Result<()> {
    b.op(Instruction::with2(Code::Movzx_r32_rm8, Register::EAX, rip(env.gate)))?;
    b.op(Instruction::with2(Code::And_r32_rm32, Register::EAX, seg_abs(Register::GS, COL_THREAD_MASK_OFFSET)))?;
    if bits & CALLS_BIT != 0 {
        let skip = b.label();
        b.op(Instruction::with2(Code::Test_rm8_imm8, Register::AL, CALLS_BIT as u32))?;
        b.add(Instruction::with_branch(Code::Je_rel32_64, skip).map_err(internal)?);
        b.op(Instruction::with1(Code::Inc_rm64, seg_abs(Register::GS, env.counter)))?; // calls += 1
        b.bind(skip);
    }
    Ok(())
}

/// Encode the entry trampoline of `point` at address `at` (see the module doc; with timer
/// bits, `.count` also calls the shared `timer_enter` routine when a timer gate is on).
///
/// With `exit` (the site of an exit instruction in the window, [`crate::plan::Tactic::EntryExit`]),
/// both copies of the displaced instructions stop before it and jump to one copy of the exit
/// trampoline's code at the end of the piece:
/// ```text
/// .exit  test  byte [rip+gate], TIMER_BITS / jne .xon / <exit instruction>
/// .xon   push rax / <thread check, exit key> → .xskip
///        mov eax, <point id> / call timer_exit
/// .xskip pop rax / <exit instruction>
/// ```
pub fn trampoline(point: &Point, env: TrampolineEnv, at: u64, exit: Option<u64>) -> Result<Vec<u8>> {
    if calls_only(point, exit) {
        return calls_trampoline(point, env, at);
    }
    let mut b = Block::new();
    let (on, count, displaced, slow) = (b.label(), b.label(), b.label(), b.label());
    let exit_at = match exit {
        None => None,
        Some(site) => Some(point.displaced.iter().position(|d| d.ip() == site).ok_or_else(|| {
            Error::Internal(format!("exit 0x{site:x} is not in the entry window at 0x{:x}", point.address))
        })?),
    };
    let exit_label = b.label();
    let program_code = |b: &mut Block| -> Result<()> {
        match exit_at {
            None => displaced_code(b, &point.displaced, point.emulate_call),
            Some(r) => {
                for ins in &point.displaced[..r] {
                    b.add(*ins);
                }
                b.add(Instruction::with_branch(Code::Jmp_rel32_64, exit_label).map_err(internal)?);
                Ok(())
            }
        }
    };
    // Only the bits this point can measure: a stray bit set on the page changes nothing.
    let off_path = |b: &mut Block, on: u64, displaced: u64| -> Result<()> {
        b.op(Instruction::with2(Code::Test_rm8_imm8, rip(env.gate), point.bits as u32))?; // any gate on?
        b.add(Instruction::with_branch(Code::Jne_rel32_64, on).map_err(internal)?); // off: fall through
        b.bind(displaced);
        program_code(b) // the program's own instructions, then back
    };
    // With the exit tactic the off path jumps to the end of the piece: its size is not known
    // here, and the alignment is left out (a few functions).
    let pad = if exit_at.is_none() { on_padding(at, &off_path)? } else { 0 };
    off_path(&mut b, on, displaced)?;
    int3_padding(&mut b, pad)?;
    b.bind(on);
    b.op(Instruction::with1(Code::Push_r64, Register::RAX))?; // scratch
    thread_check(&mut b, env.tid_offset, COL_OWNER_KEY_OFFSET, slow)?;
    b.bind(count);
    gated_count(&mut b, point.bits, env)?;
    let timers = point.bits & TIMER_BITS != 0;
    if timers {
        let done = b.label();
        b.op(Instruction::with2(Code::Test_rm8_imm8, Register::AL, TIMER_BITS as u32))?;
        b.add(Instruction::with_branch(Code::Je_rel32_64, done).map_err(internal)?);
        b.op(Instruction::with2(Code::Mov_r32_imm32, Register::EAX, point.id))?;
        b.add(Instruction::with_branch(Code::Call_rel32_64, env.timer_enter).map_err(internal)?);
        b.bind(done);
    }
    b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
    program_code(&mut b)?; // a second copy: no taken branch back
    b.bind(slow);
    b.op(Instruction::with2(Code::Mov_r32_imm32, Register::EAX, point.id))?; // which point
    b.add(Instruction::with_branch(Code::Call_rel32_64, env.slow_stub).map_err(internal)?);
    b.op(Instruction::with2(Code::Test_rm32_r32, Register::EAX, Register::EAX))?; // count it?
    b.add(Instruction::with_branch(Code::Jne_rel32_64, count).map_err(internal)?);
    b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
    b.add(Instruction::with_branch(Code::Jmp_rel32_64, displaced).map_err(internal)?);
    if let Some(r) = exit_at {
        let last = point.displaced[r];
        let skip = b.label();
        b.bind(exit_label);
        exit_head(&mut b, &[], &last, &env, skip)?;
        b.op(Instruction::with2(Code::Mov_r32_imm32, Register::EAX, point.id))?;
        b.add(Instruction::with_branch(Code::Call_rel32_64, env.timer_exit).map_err(internal)?);
        b.bind(skip);
        b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
        b.add(last);
    }
    b.encode(at)
}

/// Whether the entry trampoline of `point` (with the entry+exit tactic's `exit`) is
/// [`calls_trampoline`]'s, which the layout pass starts on a [`CALLS_ALIGN`] boundary.
pub fn calls_only(point: &Point, exit: Option<u64>) -> bool {
    point.bits == CALLS_BIT && exit.is_none()
}

/// Where a calls-only trampoline starts: its path up to a window of 11 bytes and the jump
/// back fits in one 64-byte block, and on the AMD EPYC guest it costs one cycle there and
/// two at 16, 32 or 48 bytes past it (issue 14, `docs/PERFORMANCE.md`).
pub const CALLS_ALIGN: u64 = 64;

/// The entry trampoline of a point that can only count calls: one straight path for on and
/// off, so that both cost one cycle (issue 14: a taken branch to a counting path costs a
/// second one, and so does the libc tid word's test):
/// ```text
///        push  rax
///        mov   rax, fs:[0]
///        xor   rax, [rip+cookie]            ; 0 in a fork child (MADV_WIPEONFORK)
///        cmp   rax, gs:[owner_tpx]          ; armed: this thread's column, its mask counts calls
///        jne   .slow
///        movzx eax, byte [rip+gate]
///        and   eax, CALLS
///        add   gs:[counter], rax            ; + 1 while the gate says calls, + 0 while off
///        pop   rax
/// .prog  <displaced instructions>, jmp back
/// .slow  cmp byte [rip+idle], 0 / jne .skip     ; this process measures nothing
///        mov eax, <point id> / call slow_stub   ; registers, forks, re-arms owner_tpx
///        test eax, eax / jne .count
/// .skip  pop rax / jmp .prog
/// .count <gate & mask: calls += 1>
///        pop rax / jmp .prog
/// ```
/// `owner_tpx` is `owner_tp ^ cookie`, armed by the runtime only while the thread's mask has
/// `calls` and written 0 by `stint ctl` to bring the thread to a safe point, so the count is
/// exact without the tid test: a new thread has another `fs:[0]`, a fork child a zero cookie.
fn calls_trampoline(point: &Point, env: TrampolineEnv, at: u64) -> Result<Vec<u8>> {
    let mut b = Block::new();
    let (slow, count, prog, skip) = (b.label(), b.label(), b.label(), b.label());
    b.op(Instruction::with1(Code::Push_r64, Register::RAX))?;
    b.op(Instruction::with2(Code::Mov_r64_rm64, Register::RAX, seg_abs(Register::FS, 0)))?;
    b.op(Instruction::with2(Code::Xor_r64_rm64, Register::RAX, rip(env.cookie)))?;
    b.op(Instruction::with2(Code::Cmp_r64_rm64, Register::RAX, seg_abs(Register::GS, COL_OWNER_TPX_OFFSET)))?;
    b.add(Instruction::with_branch(Code::Jne_rel32_64, slow).map_err(internal)?);
    b.op(Instruction::with2(Code::Movzx_r32_rm8, Register::EAX, rip(env.gate)))?;
    b.op(Instruction::with2(Code::And_rm32_imm8, Register::EAX, CALLS_BIT as u32))?;
    const _: () = assert!(CALLS_BIT == 1, "the count adds the calls bit itself");
    b.op(Instruction::with2(Code::Add_rm64_r64, seg_abs(Register::GS, env.counter), Register::RAX))?;
    b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
    b.bind(prog);
    displaced_code(&mut b, &point.displaced, point.emulate_call)?;
    b.bind(slow);
    // A process that measures nothing never asks the runtime again (the idle word).
    b.op(Instruction::with2(Code::Cmp_rm8_imm8, rip(env.cookie + stint_layout::IDLE_OFFSET), 0))?;
    b.add(Instruction::with_branch(Code::Jne_rel32_64, skip).map_err(internal)?);
    b.op(Instruction::with2(Code::Mov_r32_imm32, Register::EAX, point.id))?;
    b.add(Instruction::with_branch(Code::Call_rel32_64, env.slow_stub).map_err(internal)?);
    b.op(Instruction::with2(Code::Test_rm32_r32, Register::EAX, Register::EAX))?;
    b.add(Instruction::with_branch(Code::Jne_rel32_64, count).map_err(internal)?);
    b.bind(skip);
    b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
    b.add(Instruction::with_branch(Code::Jmp_rel32_64, prog).map_err(internal)?);
    b.bind(count);
    gated_count(&mut b, point.bits, env)?;
    b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
    b.add(Instruction::with_branch(Code::Jmp_rel32_64, prog).map_err(internal)?);
    b.encode(at)
}

/// Where the measuring path of a trampoline starts: the target of the gate test's taken
/// branch. At some places modulo 64 bytes that branch costs a call on the AMD EPYC guest
/// +0.82 ns instead of +0.55 (issue 14: 9 of 16 start offsets of one trampoline were slow,
/// 1 of 16 with the target 16-aligned; `docs/PERFORMANCE.md`).
const ON_ALIGN: u64 = 16;

/// How many `int3` bytes after the off path (which never falls through: it ends in the jump
/// back or an exit instruction) put the measuring path at an [`ON_ALIGN`] boundary, for a
/// piece at `at`. `off_path` emits the off path with its branch to the label given; its
/// encoding is measured with the padding in place, as the branch's size can depend on it.
fn on_padding(at: u64, off_path: &dyn Fn(&mut Block, u64, u64) -> Result<()>) -> Result<usize> {
    let mut pad = 0u64;
    for _ in 0..3 {
        let mut b = Block::new();
        let (on, displaced) = (b.label(), b.label());
        off_path(&mut b, on, displaced)?;
        int3_padding(&mut b, pad as usize)?;
        b.bind(on);
        b.op(Ok(Instruction::with(Code::Int3)))?;
        let start = at + b.encode(at)?.len() as u64 - 1;
        let more = (ON_ALIGN - start % ON_ALIGN) % ON_ALIGN;
        if more == 0 {
            break;
        }
        pad = (pad + more) % ON_ALIGN;
    }
    Ok(pad as usize)
}

/// `n` bytes of `int3` that no path reaches.
fn int3_padding(b: &mut Block, n: usize) -> Result<()> {
    for _ in 0..n {
        b.op(Ok(Instruction::with(Code::Int3)))?;
    }
    Ok(())
}

/// `fs:[0]` and the libc tid word against the column GS points at; jumps to `miss` when the
/// column is not this thread's. Clobbers eax and flags.
fn thread_check(b: &mut Block, tid_offset: u32, key: u32, miss: u64) -> Result<()> {
    b.op(Instruction::with2(Code::Mov_r64_rm64, Register::RAX, seg_abs(Register::FS, 0)))?; // thread pointer
    b.op(Instruction::with2(Code::Cmp_r64_rm64, Register::RAX, seg_abs(Register::GS, COL_OWNER_TP_OFFSET)))?;
    b.add(Instruction::with_branch(Code::Jne_rel32_64, miss).map_err(internal)?);
    if tid_offset != 0 {
        b.op(Instruction::with2(Code::Mov_r32_rm32, Register::EAX, seg_abs(Register::FS, tid_offset)))?; // libc tid
        b.op(Instruction::with2(Code::Cmp_r32_rm32, Register::EAX, seg_abs(Register::GS, key)))?;
        b.add(Instruction::with_branch(Code::Jne_rel32_64, miss).map_err(internal)?);
    }
    Ok(())
}

/// The head every exit trampoline shares: the displaced instructions before the exit one;
/// with the function's timers off, the exit instruction itself (the frame was never opened);
/// else `push rax` and the thread check, which jumps to `skip` (with rax pushed) for a
/// thread that is not the column's owner.
fn exit_head(b: &mut Block, before: &[Instruction], last: &Instruction, env: &TrampolineEnv, skip: u64) -> Result<()> {
    let on = b.label();
    for ins in before {
        b.add(*ins);
    }
    b.op(Instruction::with2(Code::Test_rm8_imm8, rip(env.gate), TIMER_BITS as u32))?;
    b.add(Instruction::with_branch(Code::Jne_rel32_64, on).map_err(internal)?);
    b.add(*last);
    b.bind(on);
    b.op(Instruction::with1(Code::Push_r64, Register::RAX))?;
    // `exit_key`, not `owner_key`: a thread `stint ctl` sent to a safe point still closes
    // its frames (the timer routine takes it to rt-lib).
    thread_check(b, env.tid_offset, COL_EXIT_KEY_OFFSET, skip)
}

/// Encode the trampoline of an exit site at `at`:
/// ```text
///        <window instructions before the exit, relocated>   ; rsp is back at its entry value
///        test  byte [rip+gate], TIMER_BITS
///        jne   .on
/// .exit  <the exit instruction, relocated>                  ; ret / tail jump
/// .on    push  rax
///        <thread check> → .skip                             ; unregistered: no frame to close
///        mov   eax, <point id>
///        call  timer_exit
/// .skip  pop   rax
///        <the exit instruction again>
/// ```
/// Flags are dead at a return and at a tail call (psABI), so they are clobbered.
pub fn exit_trampoline(exit: &Exit, env: TrampolineEnv, at: u64) -> Result<Vec<u8>> {
    let (last, before) = exit
        .displaced
        .split_last()
        .ok_or_else(|| Error::Internal(format!("exit 0x{:x} has no instructions", exit.site)))?;
    let mut b = Block::new();
    let skip = b.label();
    exit_head(&mut b, before, last, &env, skip)?;
    b.op(Instruction::with2(Code::Mov_r32_imm32, Register::EAX, exit.point))?;
    b.add(Instruction::with_branch(Code::Call_rel32_64, env.timer_exit).map_err(internal)?);
    b.bind(skip);
    b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
    b.add(*last);
    b.encode(at)
}

/// Where the trampoline of exit `i`, placed at `at`, has its copy of the displaced
/// instruction at `to` (for the exit instruction itself: the gate test before it). Both exit
/// trampolines ([`exit_trampoline`], [`tail_call_trampoline`]) open with the displaced
/// instructions before the exit, relocated, so the copy lies after the encoding of those
/// before `to`: a jump of the program into the run ([`crate::plan::Redirect`]) runs the rest
/// of the run and the exit instrumentation.
pub fn exit_copy_at(plan: &Plan, i: usize, to: u64, at: u64, t: &Targets) -> Result<u64> {
    let x = plan.exits.get(i).ok_or_else(|| Error::Internal(format!("codegen: no exit {i}")))?;
    let displaced = redirect_wrapped(&x.displaced, &t.wrap_thunks)?.unwrap_or_else(|| x.displaced.clone());
    let n = displaced
        .iter()
        .position(|d| d.ip() == to)
        .ok_or_else(|| Error::Internal(format!("exit 0x{:x}: 0x{to:x} is not displaced", x.site)))?;
    if n == 0 {
        return Ok(at);
    }
    let mut b = Block::new();
    for d in &displaced[..n] {
        b.add(*d);
    }
    Ok(at + b.encode(at)?.len() as u64)
}

/// The window of a redirected rel8 jump ([`crate::plan::Redirect::window`]).
fn redirect_window(plan: &Plan, exit: usize, redirect: usize) -> Result<&[Instruction]> {
    plan.exits
        .get(exit)
        .and_then(|x| x.redirects.get(redirect))
        .map(|r| r.window.as_slice())
        .filter(|w| !w.is_empty())
        .ok_or_else(|| Error::Internal(format!("codegen: exit {exit} has no jump window {redirect}")))
}

/// The window of a redirected rel8 jump into an entry window ([`Plan::entry_jumps`]).
fn entry_jump_window(plan: &Plan, point: usize, redirect: usize) -> Result<&[Instruction]> {
    plan.points
        .get(point)
        .and_then(|p| plan.entry_jumps.get(&p.id))
        .and_then(|r| r.get(redirect))
        .map(|r| r.window.as_slice())
        .filter(|w| !w.is_empty())
        .ok_or_else(|| Error::Internal(format!("codegen: point {point} has no entry jump window {redirect}")))
}

/// Encode the entry tail of an entry window whose instructions are `displaced` from the one
/// at `to` (a branch target inside the window, [`Plan::entry_jumps`]) at `at`:
/// ```text
///        <the window's instructions from `to` on, relocated>   ; the last call emulated
///        jmp   <end of window>                                  ; (none after ret/jmp)
/// ```
/// The program's jumps to `to` lead here: a jump back to just after the prologue runs the
/// rest of the window and goes on in the function, past the entry trampoline's counting and
/// timing code (it is no call).
pub fn entry_tail(displaced: &[Instruction], emulate_call: bool, to: u64, at: u64) -> Result<Vec<u8>> {
    let k = displaced
        .iter()
        .position(|d| d.ip() == to)
        .ok_or_else(|| Error::Internal(format!("entry tail: 0x{to:x} is not displaced")))?;
    let mut b = Block::new();
    displaced_code(&mut b, &displaced[k..], emulate_call)?;
    b.encode(at)
}

fn slot_window_of(plan: &Plan, i: usize) -> Result<&crate::plan::SlotWindow> {
    plan.slot_windows.get(i).ok_or_else(|| Error::Internal(format!("codegen: no slot window {i}")))
}

/// Encode the piece of a run moved out to make a slot ([`crate::plan::SlotWindow`]) at `at`:
/// ```text
///        <the run, relocated>
///        jmp   <after the run>
/// ```
pub fn slot_window(w: &crate::plan::SlotWindow, at: u64) -> Result<Vec<u8>> {
    let mut b = Block::new();
    displaced_code(&mut b, &w.displaced, false)?;
    b.encode(at)
}

/// Encode the window of a rel8 jump into the run of a `window+jumps` exit at `at`:
/// ```text
///        <the instructions before the jump, relocated>
///        jcc   <copy>                  ; the jump as a rel32, to the exit trampoline's copy
///        jmp   <after the jump>        ;   of its target (a `jmp`: only the jump)
/// ```
pub fn jump_window(window: &[Instruction], copy: u64, at: u64) -> Result<Vec<u8>> {
    let (jump, before) =
        window.split_last().ok_or_else(|| Error::Internal(format!("jump window at 0x{at:x} is empty")))?;
    let mut b = Block::new();
    for x in before {
        b.add(*x);
    }
    let mut j = *jump;
    j.set_near_branch64(copy);
    b.add(j);
    if jump.flow_control() == FlowControl::ConditionalBranch {
        b.add(Instruction::with_branch(Code::Jmp_rel32_64, jump.next_ip()).map_err(internal)?);
    }
    b.encode(at)
}

/// Encode the trampoline of a call into an import (D19) at `at`; `call` is the program's
/// call instruction, `point` the import's point. The call site becomes a `call rel32` to
/// here that ends where the program's call ended (after `nop`s for a 6-byte `call
/// [rip+slot]`, [`crate::place::WrapCall`]), so the trampoline is entered the way the callee
/// would be: rsp = S-8, where S is the stack pointer at the call, and [S-8] holds the
/// program's own return address (D1).
/// ```text
///        test  byte [rip+gate], <bits>
///        jne   .on
/// .off   jmp   <callee>                   ; same operand as the call: the callee returns
///                                         ; straight to the program
///        int3 × 0–15                      ; never reached: .on starts 16-aligned (ON_ALIGN)
/// .on    push  rax                        ; nothing lives below rsp at a function entry
///        <thread check> → .slow
/// .count movzx eax, byte [rip+gate]
///        and   eax, gs:[thread_mask]
///        test  al, CALLS / inc qword gs:[counter]
///        test  al, TIMER_BITS             ; (these up to .plain only with timer bits:
///        je    .plain                     ; without, the count falls through to .plain)
///        mov   eax, <point id>
///        call  timer_enter                ; the frame at S-8, the callee's entry rsp
///        pop   rax
///        lea   rsp, [rsp+8]               ; S: the program's stack at its call
///        call  <callee>                   ; same operand, same rsp: the callee's stack is the
///                                         ; program's, its return address is the next line
///        lea   rsp, [rsp-8]               ; S-8 again (flags untouched)
///        push  rax                        ; return values: rax, rdx (kept by the routine),
///        <thread check, exit key> → .done ; xmm0/1 and st0/1 (untouched)
///        mov   eax, <point id>
///        call  timer_exit
/// .done  lea   rax, [rip+<return address>]
///        mov   [rsp+8], rax               ; the program's return address at S-8 again
///        pop   rax
///        ret                              ; to the program
/// .plain pop   rax
///        jmp   <callee>
/// .slow  mov eax, <point id> / call slow_stub / test eax, eax / jne .count
///        pop   rax
///        jmp   .off
/// ```
/// Every path pairs the program's `call` with one `ret` (the callee's, or the timed path's
/// own), and every `call` inside with its `ret`: the return-stack buffer stays balanced, so
/// no `ret` of the callee or of the program after it mispredicts. (An earlier design jumped
/// to the trampoline and pushed the return address itself: each import call then cost a
/// mispredicted return, issue 14.) Flags are dead at a call and at a function entry (psABI);
/// `al` (the vector-register count of a variadic call) and every argument register reach the
/// callee unchanged. The unwind information of the piece starts from the caller's state at
/// the call with the return address pushed ([`crate::unwind::Initial::Called`]): the piece
/// unwinds as a part of the caller.
pub fn import_trampoline(call: &Instruction, point: &Point, env: TrampolineEnv, at: u64) -> Result<Vec<u8>> {
    let mut b = Block::new();
    let (on, count, off, slow, plain, done) = (b.label(), b.label(), b.label(), b.label(), b.label(), b.label());
    let off_path = |b: &mut Block, on: u64, off: u64| -> Result<()> {
        b.op(Instruction::with2(Code::Test_rm8_imm8, rip(env.gate), point.bits as u32))?;
        b.add(Instruction::with_branch(Code::Jne_rel32_64, on).map_err(internal)?);
        b.bind(off);
        jump_to_callee(b, call)
    };
    let pad = on_padding(at, &off_path)?;
    off_path(&mut b, on, off)?;
    int3_padding(&mut b, pad)?;
    b.bind(on);
    b.op(Instruction::with1(Code::Push_r64, Register::RAX))?;
    thread_check(&mut b, env.tid_offset, COL_OWNER_KEY_OFFSET, slow)?;
    b.bind(count);
    gated_count(&mut b, point.bits, env)?;
    if point.bits & TIMER_BITS != 0 {
        b.op(Instruction::with2(Code::Test_rm8_imm8, Register::AL, TIMER_BITS as u32))?;
        b.add(Instruction::with_branch(Code::Je_rel32_64, plain).map_err(internal)?);
        b.op(Instruction::with2(Code::Mov_r32_imm32, Register::EAX, point.id))?;
        b.add(Instruction::with_branch(Code::Call_rel32_64, env.timer_enter).map_err(internal)?);
        b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
        b.op(Instruction::with2(Code::Lea_r64_m, Register::RSP, mem(Register::RSP, 8)))?;
        b.add(*call); // the program's call, relocated
        b.op(Instruction::with2(Code::Lea_r64_m, Register::RSP, mem(Register::RSP, -8)))?;
        b.op(Instruction::with1(Code::Push_r64, Register::RAX))?;
        thread_check(&mut b, env.tid_offset, COL_EXIT_KEY_OFFSET, done)?;
        b.op(Instruction::with2(Code::Mov_r32_imm32, Register::EAX, point.id))?;
        b.add(Instruction::with_branch(Code::Call_rel32_64, env.timer_exit).map_err(internal)?);
        b.bind(done);
        b.op(Instruction::with2(Code::Lea_r64_m, Register::RAX, rip(call.next_ip())))?;
        b.op(Instruction::with2(Code::Mov_rm64_r64, mem(Register::RSP, 8), Register::RAX))?;
        b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
        b.op(Ok(Instruction::with(Code::Retnq)))?;
        b.bind(plain);
    } // without timers the count falls through to the plain call: no taken jump
    b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
    jump_to_callee(&mut b, call)?;
    b.bind(slow);
    b.op(Instruction::with2(Code::Mov_r32_imm32, Register::EAX, point.id))?;
    b.add(Instruction::with_branch(Code::Call_rel32_64, env.slow_stub).map_err(internal)?);
    b.op(Instruction::with2(Code::Test_rm32_r32, Register::EAX, Register::EAX))?;
    b.add(Instruction::with_branch(Code::Jne_rel32_64, count).map_err(internal)?);
    b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
    b.add(Instruction::with_branch(Code::Jmp_rel32_64, off).map_err(internal)?);
    b.encode(at)
}

/// Encode the trampoline of a tail jump into an import that takes no stack arguments (D17,
/// [`crate::plan::TailImport`]) at `at`:
/// ```text
///        <window instructions before the jump, relocated>   ; rsp = S, [S] = the return address
///        test  byte [rip+gate], TIMER_BITS
///        jne   .on
/// .jump  <the jump, relocated>                              ; timers off: as before
/// .on    push  rax
///        <thread check, exit key> → .skip                   ; unregistered: no frame to keep
///        pop   rax
///        lea   rsp, [rsp-8]                                 ; the callee enters at S-16 ≡ S (mod 16)
///        call  <the jump's target>                          ; same operand
///        lea   rsp, [rsp+8]                                 ; S again (flags untouched)
///        push  rax                                          ; return values: rax, rdx (kept by
///        mov   eax, <point id>                              ; the routine), xmm0/1, st0/1
///        call  timer_exit                                   ; the frame at S ends now
///        pop   rax
///        ret                                                ; to the function's caller
/// .skip  pop   rax
///        <the jump again>
/// ```
pub fn tail_call_trampoline(exit: &Exit, env: TrampolineEnv, at: u64) -> Result<Vec<u8>> {
    let (last, before) = exit
        .displaced
        .split_last()
        .ok_or_else(|| Error::Internal(format!("exit 0x{:x} has no instructions", exit.site)))?;
    let mut call = *last;
    match last.code() {
        Code::Jmp_rel32_64 | Code::Jmp_rel8_64 => {
            call = Instruction::with_branch(Code::Call_rel32_64, last.near_branch_target()).map_err(internal)?
        }
        Code::Jmp_rm64 => call.set_code(Code::Call_rm64),
        c => return Err(Error::Internal(format!("tail call {c:?} at 0x{:x} cannot become a call", exit.site))),
    }
    let mut b = Block::new();
    let skip = b.label();
    exit_head(&mut b, before, last, &env, skip)?;
    b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
    b.op(Instruction::with2(Code::Lea_r64_m, Register::RSP, mem(Register::RSP, -8)))?;
    b.add(call);
    b.op(Instruction::with2(Code::Lea_r64_m, Register::RSP, mem(Register::RSP, 8)))?;
    b.op(Instruction::with1(Code::Push_r64, Register::RAX))?;
    b.op(Instruction::with2(Code::Mov_r32_imm32, Register::EAX, exit.point))?;
    b.add(Instruction::with_branch(Code::Call_rel32_64, env.timer_exit).map_err(internal)?);
    b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
    b.op(Ok(Instruction::with(Code::Retnq)))?;
    b.bind(skip);
    b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
    b.add(*last);
    b.encode(at)
}

fn internal(e: iced_x86::IcedError) -> Error {
    Error::Internal(format!("instruction: {e}"))
}

/// The window's instructions, then the jump back to the instruction after them (unless they
/// end control flow).
fn displaced_code(b: &mut Block, displaced: &[Instruction], emulate_last_call: bool) -> Result<()> {
    let n = displaced.len();
    for (k, ins) in displaced.iter().enumerate() {
        let last = k + 1 == n;
        if last && emulate_last_call {
            emulate_call(b, ins)?;
            return Ok(());
        }
        b.add(*ins);
    }
    let Some(last) = displaced.last() else {
        return Err(Error::Internal("empty window".into()));
    };
    let ends = matches!(
        last.flow_control(),
        FlowControl::Return | FlowControl::UnconditionalBranch | FlowControl::IndirectBranch
    );
    if !ends {
        b.add(Instruction::with_branch(Code::Jmp_rel32_64, last.next_ip()).map_err(internal)?);
    }
    Ok(())
}

/// A call moved out of the program must still push the program's own return address (D1):
/// ```text
///   lea  rsp, [rsp-8]          ; the return-address slot (flags untouched)
///   push rax
///   lea  rax, [rip+<return address in the program>]
///   mov  [rsp+8], rax
///   pop  rax
///   jmp  <callee>               ; same operand as the call
/// ```
fn emulate_call(b: &mut Block, call: &Instruction) -> Result<()> {
    b.op(Instruction::with2(Code::Lea_r64_m, Register::RSP, mem(Register::RSP, -8)))?;
    b.op(Instruction::with1(Code::Push_r64, Register::RAX))?;
    b.op(Instruction::with2(Code::Lea_r64_m, Register::RAX, rip(call.next_ip())))?;
    b.op(Instruction::with2(Code::Mov_rm64_r64, mem(Register::RSP, 8), Register::RAX))?;
    b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
    jump_to_callee(b, call)
}

/// The jump that takes `call`'s place where the return address is already pushed: `jmp`
/// with the call's operand (a `call rel32` to a PLT stub, or `call [rip+slot]`).
fn jump_to_callee(b: &mut Block, call: &Instruction) -> Result<()> {
    match call.code() {
        Code::Call_rel32_64 | Code::Call_rel16 => {
            b.add(Instruction::with_branch(Code::Jmp_rel32_64, call.near_branch_target()).map_err(internal)?)
        }
        Code::Call_rm64 => {
            let mut j = *call;
            j.set_code(Code::Jmp_rm64);
            b.add(j);
        }
        c => return Err(Error::Internal(format!("call {c:?} at 0x{:x} cannot become a jump", call.ip()))),
    }
    Ok(())
}

/// Save the registers in `saved` and the x87/SSE state, align the stack, set the first
/// argument to the config block, and call `target`; restore and return. The stub is how
/// machine code enters rt-lib (D6): everything a Rust function may clobber is preserved.
fn rt_stub(at: u64, config: u64, target: u64, saved: &[Register], shuffle: &[(Register, Register)]) -> Result<Vec<u8>> {
    let mut b = Block::new();
    for &r in saved {
        b.op(Instruction::with1(Code::Push_r64, r))?;
    }
    b.op(Instruction::with1(Code::Push_r64, Register::RBP))?;
    b.op(Instruction::with2(Code::Mov_r64_rm64, Register::RBP, Register::RSP))?; // frame
    b.op(Instruction::with2(Code::And_rm64_imm8, Register::RSP, -16i32))?; // psABI alignment
    b.op(Instruction::with2(Code::Sub_rm64_imm32, Register::RSP, 512))?; // fxsave area
    b.op(Instruction::with1(Code::Fxsave64_m512byte, mem(Register::RSP, 0)))?; // x87 + SSE state
    for &(dst, src) in shuffle {
        b.op(Instruction::with2(Code::Mov_r64_rm64, dst, src))?;
    }
    b.op(Instruction::with2(Code::Lea_r64_m, Register::RDI, rip(config)))?; // arg 1: config
    b.add(Instruction::with_branch(Code::Call_rel32_64, target).map_err(internal)?);
    b.op(Instruction::with1(Code::Fxrstor64_m512byte, mem(Register::RSP, 0)))?;
    b.op(Instruction::with2(Code::Mov_r64_rm64, Register::RSP, Register::RBP))?;
    b.op(Instruction::with1(Code::Pop_r64, Register::RBP))?;
    for r in saved.iter().rev() {
        b.op(Instruction::with1(Code::Pop_r64, *r))?;
    }
    b.op(Ok(Instruction::with(Code::Retnq)))?;
    b.encode(at)
}

/// The registration slow path of all entry trampolines: `stint_rt_slow(config, point)`.
/// In: eax = point id (the trampoline saved rax). Out: eax = 1 to count, 0 to skip.
pub fn slow_stub(at: u64, config: u64, rt_slow: u64) -> Result<Vec<u8>> {
    rt_stub(at, config, rt_slow, &crate::abi::CALLER_SAVED[1..], &[(Register::RSI, Register::RAX)])
}

/// The slow path of the timer routines: `stint_rt_timer(config, op, point, sp, tsc)`.
/// In: rax = op, rcx = point, rdx = entry stack pointer, rsi = TSC; the routine saved rcx,
/// rdx, rsi and rdi itself, and the trampoline saved rax.
pub fn timer_stub(at: u64, config: u64, rt_timer: u64) -> Result<Vec<u8>> {
    use Register::*;
    // Order matters: each source is read before it is overwritten.
    let shuffle = [(R8, RSI), (RSI, RAX), (RAX, RDX), (RDX, RCX), (RCX, RAX)];
    rt_stub(at, config, rt_timer, &[R8, R9, R10, R11], &shuffle)
}

/// The SIGTRAP handler of the trap tactic: `stint_rt_trap(config, siginfo, ucontext)` (the
/// kernel calls it with rdi = signal, rsi = siginfo, rdx = ucontext, on a normal call frame).
pub fn trap_stub(at: u64, config: u64, rt_trap: u64) -> Result<Vec<u8>> {
    let mut b = Block::new();
    b.op(Instruction::with2(Code::Lea_r64_m, Register::RDI, rip(config)))?;
    b.add(Instruction::with_branch(Code::Jmp_rel32_64, rt_trap).map_err(internal)?);
    b.encode(at)
}

/// The wrapper thunk of a thread-library import (D4); its PLT stub jumps here.
/// ```text
///        test  byte [rip+gate], <bits>    ; every metric of the wrapper off:
///        je    .off
/// .rt    mov   r8, [rsp]                  ; arg 5: the caller's return address ("first used in")
///        lea   r9, [rip+site]             ; arg 6: the WrapSite descriptor
///        jmp   stint_rt_wrap              ; a Rust function with the import's own arguments
/// .off   jmp   [rip+got_slot]             ; what the PLT stub did
///                                         ; (static: jmp <the WrapReal piece>)
/// ```
/// The wrapped functions take at most four arguments (rdi, rsi, rdx, rcx), so r8 and r9
/// are free; the thunk makes no frame, so the Rust function returns straight to the caller.
/// Every path leaves the program's `call` to one `ret`: the real function's (the thunk only
/// jumps), or the Rust function's, which calls the real function with a `call` of its own
/// (`stint_rt_wrap_lock` too): the return-stack buffer stays balanced.
///
/// With [`ThunkFast`] (a synchronisation function of a dynamic program), the thunk first
/// does what needs no runtime, the way an entry trampoline counts (rax and the flags are
/// dead at a function entry; none of these functions is variadic):
/// ```text
///        <thread check: GS is this thread's column> → .rt      ; unregistered, poked (ctl)
///        movzx eax, byte [rip+gate]
///        and   eax, gs:[thread_mask]
///        test  al, ~calls                 ; lock_wait, lock_hold, state_trace, …
///        jne   .more
///        test  al, calls
///        je    .off
///        inc   qword gs:[counter]         ; calls only: exact count, no runtime call
///        jmp   .off
/// .more  test  al, ~(calls|lock_wait|lock_hold)   ; (with a lock entry; else .more = .rt)
///        jne   .rt
///        mov   r8, [rsp] / lea r9, [rip+site]
///        jmp   stint_rt_wrap_lock         ; the mutex and signal fast path (`rt-lib/src/wrap.rs`)
/// ```
pub fn wrap_thunk(
    at: u64,
    gate: u64,
    bits: u8,
    site: u64,
    rt_wrap: u64,
    real: Real,
    fast: Option<ThunkFast>,
) -> Result<Vec<u8>> {
    let mut b = Block::new();
    let (off, to_rt) = (b.label(), b.label());
    b.op(Instruction::with2(Code::Test_rm8_imm8, rip(gate), bits as u32))?;
    b.add(Instruction::with_branch(Code::Je_rel32_64, off).map_err(internal)?);
    let to_rust = |b: &mut Block, entry: u64| -> Result<()> {
        b.op(Instruction::with2(Code::Mov_r64_rm64, Register::R8, mem(Register::RSP, 0)))?;
        b.op(Instruction::with2(Code::Lea_r64_m, Register::R9, rip(site)))?;
        b.add(Instruction::with_branch(Code::Jmp_rel32_64, entry).map_err(internal)?);
        Ok(())
    };
    if let Some(f) = fast {
        let more = b.label();
        thread_check(&mut b, f.tid_offset, COL_OWNER_KEY_OFFSET, to_rt)?;
        b.op(Instruction::with2(Code::Movzx_r32_rm8, Register::EAX, rip(gate)))?;
        b.op(Instruction::with2(Code::And_r32_rm32, Register::EAX, seg_abs(Register::GS, COL_THREAD_MASK_OFFSET)))?;
        b.op(Instruction::with2(Code::Test_rm8_imm8, Register::AL, (!CALLS_BIT) as u32))?;
        let busy = if f.lock_entry != 0 { more } else { to_rt };
        b.add(Instruction::with_branch(Code::Jne_rel32_64, busy).map_err(internal)?);
        b.op(Instruction::with2(Code::Test_rm8_imm8, Register::AL, CALLS_BIT as u32))?;
        b.add(Instruction::with_branch(Code::Je_rel32_64, off).map_err(internal)?);
        b.op(Instruction::with1(Code::Inc_rm64, seg_abs(Register::GS, f.counter)))?; // calls += 1
        b.add(Instruction::with_branch(Code::Jmp_rel32_64, off).map_err(internal)?);
        if f.lock_entry != 0 {
            b.bind(more);
            let lock_bits = CALLS_BIT | metric_bit(METRIC_LOCK_WAIT) | metric_bit(METRIC_LOCK_HOLD);
            b.op(Instruction::with2(Code::Test_rm8_imm8, Register::AL, (!lock_bits) as u32))?;
            b.add(Instruction::with_branch(Code::Jne_rel32_64, to_rt).map_err(internal)?);
            to_rust(&mut b, f.lock_entry)?;
        }
    }
    b.bind(to_rt);
    to_rust(&mut b, rt_wrap)?;
    b.bind(off);
    match real {
        Real::Got(slot) => b.op(Instruction::with1(Code::Jmp_rm64, rip(slot)))?,
        Real::Code(code) => b.add(Instruction::with_branch(Code::Jmp_rel32_64, code).map_err(internal)?),
    }
    b.encode(at)
}

/// The fast paths of wrapped function `func`'s thunk: the synchronisation functions of a
/// dynamic program, whose wrappers do nothing but count when only `calls` is on (the
/// thread functions record threads whatever the gates say, and a static program's wrapped
/// functions call one another, of which the runtime counts only the outermost call).
fn thunk_fast(func: u32, real: Real, t: &Targets, point: u32, lock_entry: u64) -> Option<ThunkFast> {
    use stint_layout::WrappedFn as W;
    if matches!(real, Real::Code(_)) {
        return None;
    }
    let lock_entry = match W::from_u32(func)? {
        W::PthreadCreate | W::PthreadExit | W::PthreadJoin | W::TimedjoinNp | W::SetnameNp => return None,
        W::MutexLock | W::MutexTimedlock | W::MutexUnlock => lock_entry,
        W::CondSignal | W::CondBroadcast | W::SemPost => lock_entry,
        _ => 0,
    };
    Some(ThunkFast {
        tid_offset: t.tid_offset,
        counter: counter_offset(t.n_points, SLOT_CALLS, point) as u32,
        lock_entry,
    })
}

/// What a wrapper thunk does without the runtime ([`wrap_thunk`]).
#[derive(Clone, Copy, Debug)]
pub struct ThunkFast {
    /// fs-relative offset of libc's tid word (0: left out of the thread check).
    pub tid_offset: u32,
    /// Offset of the point's call counter in a column (`gs:`-relative).
    pub counter: u32,
    /// `stint_rt_wrap_lock` for a mutex lock or unlock, a condition signal or broadcast, a
    /// `sem_post` (0: none): the thunk goes there when the thread measures nothing but calls
    /// and lock metrics at the point.
    pub lock_entry: u64,
}

/// The thunk of a signal function's wrapper (safe traps, issue 12): [`wrap_thunk`] without the
/// gate test. The wrapper keeps SIGTRAP usable for the trap sites whether or not anything is
/// measured (the gates are zero pages when nothing is), so it always runs.
/// ```text
///        mov   r8, [rsp]                  ; arg 5: the caller's return address
///        lea   r9, [rip+site]             ; arg 6: the WrapSite descriptor
///        jmp   stint_rt_wrap
/// ```
pub fn signal_thunk(at: u64, site: u64, rt_wrap: u64) -> Result<Vec<u8>> {
    let mut b = Block::new();
    b.op(Instruction::with2(Code::Mov_r64_rm64, Register::R8, mem(Register::RSP, 0)))?;
    b.op(Instruction::with2(Code::Lea_r64_m, Register::R9, rip(site)))?;
    b.add(Instruction::with_branch(Code::Jmp_rel32_64, rt_wrap).map_err(internal)?);
    b.encode(at)
}

/// The thunk of `__libc_start_main` (D22), which `_start` calls (its PLT stub, GOT call or,
/// in a static program, its entry leads here), and the main thunk that records `main`'s
/// return value as the image's exit status, the common end no wrapper of `exit` sees:
/// ```text
///        push  rdi, rsi, rdx, rcx, r8, r9  ; every register argument (main, argc, argv,
///        sub   rsp, 8                      ;   init, fini, rtld_fini), the ABI's alignment
///        mov   rdx, rdi                    ; stint_rt_main(site, 0, main): keeps main,
///        lea   rdi, [rip+site]             ;   returns the real __libc_start_main
///        mov   esi, 0
///        call  stint_rt_main
///        add   rsp, 8
///        pop   r9, r8, rcx, rdx, rsi, rdi
///        lea   rdi, [rip+.main]            ; main := the main thunk
///        jmp   rax                         ; the stack argument (stack_end) is untouched
/// .main  endbr64                           ; libc calls main(argc, argv, envp)
///        push  rdi, rsi, rdx
///        lea   rdi, [rip+site]             ; stint_rt_main(site, 1, _): the program's main
///        mov   esi, 1
///        call  stint_rt_main
///        pop   rdx, rsi, rdi
///        sub   rsp, 8
///        call  rax                         ; main(argc, argv, envp)
///        lea   rdi, [rip+site]             ; stint_rt_main(site, 2, status): records
///        mov   esi, 2                      ;   status & 0xff, returns status
///        mov   edx, eax
///        call  stint_rt_main
///        add   rsp, 8
///        ret                               ; to libc, which calls exit(status)
/// ```
/// It runs whatever the gates say (it measures nothing) and costs three runtime calls per
/// process. Every instruction has a fixed size, so the first part is encoded once to learn
/// where `.main` is.
pub fn start_main_thunk(at: u64, site: u64, rt_main: u64) -> Result<Vec<u8>> {
    use Register::*;
    let push = |b: &mut Block, r| b.op(Instruction::with1(Code::Push_r64, r));
    let pop = |b: &mut Block, r| b.op(Instruction::with1(Code::Pop_r64, r));
    let call_rt = |b: &mut Block, op: u32| -> Result<()> {
        b.op(Instruction::with2(Code::Lea_r64_m, RDI, rip(site)))?;
        b.op(Instruction::with2(Code::Mov_r32_imm32, ESI, op))?;
        b.add(Instruction::with_branch(Code::Call_rel32_64, rt_main).map_err(internal)?);
        Ok(())
    };
    let start = |main: u64| -> Result<Vec<u8>> {
        let mut b = Block::new();
        for r in [RDI, RSI, RDX, RCX, R8, R9] {
            push(&mut b, r)?;
        }
        b.op(Instruction::with2(Code::Sub_rm64_imm8, RSP, 8))?;
        b.op(Instruction::with2(Code::Mov_r64_rm64, RDX, RDI))?;
        call_rt(&mut b, 0)?;
        b.op(Instruction::with2(Code::Add_rm64_imm8, RSP, 8))?;
        for r in [R9, R8, RCX, RDX, RSI, RDI] {
            pop(&mut b, r)?;
        }
        b.op(Instruction::with2(Code::Lea_r64_m, RDI, rip(main)))?;
        b.op(Instruction::with1(Code::Jmp_rm64, RAX))?;
        b.encode(at)
    };
    let len = start(at)?.len() as u64;
    let mut code = start(at + len)?;
    if code.len() as u64 != len {
        return Err(Error::Internal(format!("codegen: start_main_thunk at 0x{at:x} changed size")));
    }
    let mut b = Block::new();
    b.op(Ok(Instruction::with(Code::Endbr64)))?;
    for r in [RDI, RSI, RDX] {
        push(&mut b, r)?;
    }
    call_rt(&mut b, 1)?;
    for r in [RDX, RSI, RDI] {
        pop(&mut b, r)?;
    }
    b.op(Instruction::with2(Code::Sub_rm64_imm8, RSP, 8))?;
    b.op(Instruction::with1(Code::Call_rm64, RAX))?;
    b.op(Instruction::with2(Code::Mov_r32_rm32, EDX, EAX))?;
    call_rt(&mut b, 2)?;
    b.op(Instruction::with2(Code::Add_rm64_imm8, RSP, 8))?;
    b.op(Ok(Instruction::with(Code::Retnq)))?;
    code.extend(b.encode(at + len)?);
    Ok(code)
}

/// `SYS_exit_group` on x86-64.
const SYS_EXIT_GROUP: i32 = 231;

/// The thunk of `syscall(2)` (D22): `syscall(SYS_exit_group, n)` ends the process without
/// `exit`, so its status is recorded here; every other call costs one compare and a jump.
/// ```text
///        cmp   rdi, SYS_exit_group
///        je    .exit
/// .real  jmp   [rip+got_slot]              ; (static: jmp <the WrapReal piece>)
/// .exit  push  rdi, rsi, rdx, rcx, r8, r9, rax  ; the call's registers (al: a variadic
///        mov   rdx, rsi                    ;   call's vector count); 7 pushes align
///        lea   rdi, [rip+site]             ; stint_rt_main(site, 2, status): records
///        mov   esi, 2                      ;   status & 0xff
///        call  stint_rt_main
///        pop   rax, r9, r8, rcx, rdx, rsi, rdi
///        jmp   .real
/// ```
pub fn syscall_thunk(at: u64, site: u64, rt_main: u64, real: Real) -> Result<Vec<u8>> {
    use Register::*;
    let mut b = Block::new();
    let (real_l, exit_l) = (b.label(), b.label());
    b.op(Instruction::with2(Code::Cmp_rm64_imm32, RDI, SYS_EXIT_GROUP))?;
    b.add(Instruction::with_branch(Code::Je_rel32_64, exit_l).map_err(internal)?);
    b.bind(real_l);
    match real {
        Real::Got(slot) => b.op(Instruction::with1(Code::Jmp_rm64, rip(slot)))?,
        Real::Code(code) => b.add(Instruction::with_branch(Code::Jmp_rel32_64, code).map_err(internal)?),
    }
    b.bind(exit_l);
    b.op(Instruction::with1(Code::Push_r64, RDI))?;
    for r in [RSI, RDX, RCX, R8, R9, RAX] {
        b.op(Instruction::with1(Code::Push_r64, r))?;
    }
    b.op(Instruction::with2(Code::Mov_r64_rm64, RDX, RSI))?;
    b.op(Instruction::with2(Code::Lea_r64_m, RDI, rip(site)))?;
    b.op(Instruction::with2(Code::Mov_r32_imm32, ESI, 2))?;
    b.add(Instruction::with_branch(Code::Call_rel32_64, rt_main).map_err(internal)?);
    for r in [RAX, R9, R8, RCX, RDX, RSI, RDI] {
        b.op(Instruction::with1(Code::Pop_r64, r))?;
    }
    b.add(Instruction::with_branch(Code::Jmp_rel32_64, real_l).map_err(internal)?);
    b.encode(at)
}

/// How a wrapper thunk reaches the real function.
#[derive(Clone, Copy, Debug)]
pub enum Real {
    /// Through the import's GOT slot (what its PLT stub did).
    Got(u64),
    /// A static program's [`wrap_real`] piece.
    Code(u64),
}

/// The real function of a wrapped function in a static program (D4: an ordinary function
/// there, whose entry window now jumps to the wrapper thunk):
/// ```text
///        <entry window instructions, relocated>
///        jmp   <end of window>                 ; the rest of the function, unchanged
/// ```
/// The thunk jumps here when the wrapper's gates are off; `stint_rt_wrap` calls it.
pub fn wrap_real(point: &Point, at: u64) -> Result<Vec<u8>> {
    let mut b = Block::new();
    displaced_code(&mut b, &point.displaced, point.emulate_call)?;
    b.encode(at)
}

/// The displaced instructions of an entry window with every jump in `redirects` (jump →
/// new target, [`Targets::entry_redirects`]) leading to its new target, and the fall-through
/// at the window's end, when `redirects` has it ([`crate::plan::Redirect::falls_through`]),
/// made an explicit `jmp` there (at the window's end, 0 bytes long: no program instruction);
/// `None` if there is none.
fn redirect_entry_jumps(displaced: &[Instruction], redirects: &BTreeMap<u64, u64>) -> Option<Vec<Instruction>> {
    let end = displaced.last().map(Instruction::next_ip)?;
    let falls = redirects.get(&end).copied().filter(|_| {
        displaced.last().is_some_and(|x| matches!(x.flow_control(), FlowControl::Next | FlowControl::ConditionalBranch))
    });
    if !displaced.iter().any(|x| redirects.contains_key(&x.ip())) && falls.is_none() {
        return None;
    }
    let mut out = displaced.to_vec();
    for x in &mut out {
        if let Some(&to) = redirects.get(&x.ip()) {
            x.set_near_branch64(to);
        }
    }
    if let Some(to) = falls {
        let mut j = Instruction::with_branch(Code::Jmp_rel32_64, to).ok()?;
        j.set_ip(end);
        j.set_len(0);
        j.set_next_ip(end);
        out.push(j);
    }
    Some(out)
}

/// The displaced instructions with every `call`/`jmp [rip+slot]` through the GOT slot of a
/// wrapped import turned into a direct `call`/`jmp` to its wrapper thunk (at the same
/// address and length, so an emulated call pushes the same return address); `None` if
/// there is none. A PLT call needs nothing: the stub it calls leads to the thunk.
pub fn redirect_wrapped(displaced: &[Instruction], thunks: &BTreeMap<u64, u64>) -> Result<Option<Vec<Instruction>>> {
    let thunk_of = |x: &Instruction| {
        let code = match x.code() {
            Code::Call_rm64 => Code::Call_rel32_64,
            Code::Jmp_rm64 => Code::Jmp_rel32_64,
            _ => return None,
        };
        x.is_ip_rel_memory_operand().then(|| thunks.get(&x.ip_rel_memory_address()).map(|&t| (code, t))).flatten()
    };
    if !displaced.iter().any(|x| thunk_of(x).is_some()) {
        return Ok(None);
    }
    let mut out = displaced.to_vec();
    for x in out.iter_mut() {
        if let Some((code, thunk)) = thunk_of(x) {
            let mut d = Instruction::with_branch(code, thunk).map_err(internal)?;
            d.set_ip(x.ip());
            d.set_len(x.len());
            d.set_next_ip(x.next_ip());
            *x = d;
        }
    }
    Ok(Some(out))
}

/// Addresses and offsets the shared timer routines need.
#[derive(Clone, Copy, Debug)]
pub struct TimerEnv {
    /// The control region (gate of point p at `ctl + p`).
    pub ctl: u64,
    /// Column offsets of counter slot 0 for the active count, CPU and wall timers.
    pub active: u32,
    pub cpu: u32,
    pub wall: u32,
    /// Column offsets of counter slot 0 for the squared CPU and wall spans of a sampled
    /// point's timed calls.
    pub sq_cpu: u32,
    pub sq_wall: u32,
    /// Column offset of counter slot 0 for the timed calls of a sampled point.
    pub sampled: u32,
    /// Emit the sampling paths ([`Targets::sampling`]).
    pub sampling: bool,
    /// Column offsets of the calling-context tree's hash index and nodes (D16).
    pub cct_index: u32,
    pub cct_nodes: u32,
    pub timer_stub: u64,
}

/// Stack pointer at the function entry / exit, seen from inside a timer routine: the
/// trampoline pushed rax and called (16 bytes), the routine pushed rcx, rdx, rsi, rdi.
const SP_FROM_ROUTINE: i64 = 16 + 32;

/// The shared timer routines (D3, D11), one copy per program. In: eax = point id, the
/// calling trampoline has pushed rax and checked that GS is this thread's column.
///
/// `enter` pushes a frame (sp, point, gate bits, TSC, CPU ticks = TSC − cpu_off) and raises
/// the point's active count. `exit` pops the top frame if it is this point's at this stack
/// pointer; when the active count drops to 0 (the outermost activation: recursion is not
/// counted twice) it adds the elapsed wall and CPU ticks. With the sampling paths, an exit
/// whose wall and CPU spans differ (the thread was off a CPU inside the call) goes to
/// rt-lib too (`timer::close` weighs that time). Everything else goes to rt-lib
/// (`stint_rt_timer`): the thread was scheduled since the last synchronisation (the perf
/// page's sequence word changed), the shadow stack is full or empty, an entry finds frames
/// at or below its stack pointer (left by exception or longjmp), an exit does not match the
/// top frame. `busy` is set for the duration: an event from a signal handler that
/// interrupted the routine is skipped and counted, never mixed into the frame being written.
pub fn timer_routine(at: u64, op: TimerOp, env: TimerEnv) -> Result<Vec<u8>> {
    timer_routine_asm(at, op, env).map_err(|e| Error::Internal(format!("timer routine at 0x{at:x}: {e}")))
}

/// [`timer_routine`] written with iced-x86's `CodeAssembler` (STYLE 6: its bytes depend on
/// the addresses and offsets it is given, so BlockEncoder picks the encodings).
fn timer_routine_asm(at: u64, op: TimerOp, env: TimerEnv) -> std::result::Result<Vec<u8>, iced_x86::IcedError> {
    use iced_x86::code_asm::*;
    let mut a = CodeAssembler::new(64)?;
    let (mut reent, mut out, mut slow, mut done) =
        (a.create_label(), a.create_label(), a.create_label(), a.create_label());
    // `gs:[disp]`: the thread's column, absolute within GS.
    let gs32 = |disp: u32| dword_ptr(u64::from(disp)).gs();
    let gs64 = |disp: u32| qword_ptr(u64::from(disp)).gs();
    // A field of the shadow-stack frame at byte `index` of the shadow stack.
    let frame32 = |index: AsmRegister64, field: u32| dword_ptr(index + (SHADOW_OFFSET + field)).gs();
    let frame64 = |index: AsmRegister64, field: u32| qword_ptr(index + (SHADOW_OFFSET + field)).gs();
    // The counter of point rcx in the slot whose point-0 counter is at `slot0`.
    let counter = |slot0: u32| qword_ptr(rcx * 8 + slot0).gs();
    for r in [rcx, rdx, rsi, rdi] {
        a.push(r)?;
    }
    a.cmp(gs32(COL_BUSY_OFFSET), 0)?; // interrupted a routine?
    a.jne(reent)?;
    a.mov(gs32(COL_BUSY_OFFSET), 1)?;
    a.mov(ecx, eax)?; // rcx = point
    a.lea(rdi, ptr(rsp + SP_FROM_ROUTINE))?; // rdi = S

    // The point's sampling state (the bits of its active count above the open frames): a
    // sampled point times one entry in SAMPLE_EVERY, the others push a frame with no clock.
    let (mut timed, mut untimed, mut slow_tsc) = (a.create_label(), a.create_label(), a.create_label());
    let mut off_cpu = a.create_label();
    let learn = (SAMPLE_LEARN * SAMPLE_UNIT) as i32;
    if op == TimerOp::Enter && env.sampling {
        let (mut sampled, mut decide) = (a.create_label(), a.create_label());
        a.mov(rsi, counter(env.active))?;
        a.test(rsi, rsi)?;
        a.js(sampled)?;
        a.cmp(rsi, learn)?; // decided (or sampling off): every entry timed, none counted
        a.jae(timed)?;
        a.add(rsi, SAMPLE_UNIT as i32)?;
        a.mov(counter(env.active), rsi)?;
        a.cmp(rsi, learn)?;
        a.jae(decide)?; // the SAMPLE_LEARN-th entry: rt-lib decides
        a.jmp(timed)?;
        a.set_label(&mut sampled)?;
        a.add(rsi, SAMPLE_UNIT as i32)?;
        a.mov(counter(env.active), rsi)?;
        a.mov(rdx, rsi)?; // the entry's number, hashed (SAMPLE_HASH)
        a.shr(rdx, SAMPLE_UNIT.trailing_zeros())?;
        a.imul_3(edx, edx, SAMPLE_HASH as i32)?;
        a.cmp(edx, ((1u64 << 32) / SAMPLE_EVERY) as u32)?;
        a.jae(untimed)?;
        a.jmp(timed)?;
        a.set_label(&mut decide)?;
        a.jmp(slow_tsc)?;
    } else if op == TimerOp::Exit {
        // The top frame first: an untimed one is popped with no clock read.
        let mut framed = a.create_label();
        a.mov(edx, gs32(COL_DEPTH_OFFSET))?;
        a.test(edx, edx)?;
        a.jne(framed)?;
        // An empty shadow stack: the function was entered while this thread's timers were
        // off. Count it here rather than in rt-lib (threads outside a focus exit often).
        a.inc(gs64(COL_UNMATCHED_EXITS_OFFSET))?;
        a.jmp(out)?;
        a.set_label(&mut framed)?;
        a.lea(esi, ptr(rdx - 1))?; // top index
        a.cmp(esi, SHADOW_CAP)?; // beyond the kept frames
        a.jae(slow_tsc)?;
        a.shl(esi, FRAME_SIZE.trailing_zeros())?;
        a.cmp(frame64(rsi, FRAME_SP_OFFSET), rdi)?; // our frame?
        a.jne(slow_tsc)?;
        a.cmp(frame32(rsi, FRAME_POINT_OFFSET), ecx)?;
        a.jne(slow_tsc)?;
        if env.sampling {
            a.test(byte_ptr(rsi + (SHADOW_OFFSET + FRAME_BITS_OFFSET + 3)).gs(), (FRAME_UNTIMED >> 24) as i32)?;
            a.je(timed)?;
            a.dec(gs32(COL_DEPTH_OFFSET))?;
            // The open frames (low 16 bits, at least this frame's: no borrow), as a whole
            // word: the next entry's 64-bit load of it is forwarded from this store, which
            // a 16-bit store cannot be (the load would wait for the store to retire).
            a.dec(counter(env.active))?;
            a.jmp(out)?;
        }
    }
    a.set_label(&mut timed)?;
    a.rdtsc()?;
    a.shl(rdx, 32)?;
    a.or(rax, rdx)?; // rax = TSC
    a.mov(rdx, gs64(COL_SEQ_PTR_OFFSET))?;
    a.mov(edx, dword_ptr(rdx))?;
    a.cmp(edx, gs32(COL_SEQ_OFFSET))?; // scheduled since?
    a.jne(slow)?;
    a.mov(rdx, rax)?;
    a.sub(rdx, gs64(COL_SYNC_TSC_OFFSET))?;
    a.cmp(rdx, gs64(COL_SYNC_TICKS_OFFSET))?; // extrapolated too long?
    a.ja(slow)?;
    a.mov(edx, gs32(COL_OWNER_KEY_OFFSET))?;
    a.cmp(edx, gs32(COL_EXIT_KEY_OFFSET))?; // sent to a safe point?
    a.jne(slow)?;
    if op == TimerOp::Enter {
        a.mov(edx, gs32(COL_DEPTH_OFFSET))?;
        let mut push = a.create_label();
        // Frames with file blocks (≤ SHADOW_CAP; at the limit rt-lib allocates the next page).
        a.cmp(edx, gs32(COL_SHADOW_READY_OFFSET))?;
        a.jae(slow)?;
        // The file's word is not trusted (a profile written by someone else): never past the
        // stack itself, whatever `shadow_ready` says. A fused compare with no memory operand.
        a.cmp(edx, SHADOW_CAP)?;
        a.jae(slow)?;
        a.shl(edx, FRAME_SIZE.trailing_zeros())?; // rdx = depth * FRAME_SIZE
        a.test(edx, edx)?;
        a.je(push)?;
        // A frame at or below our stack pointer was left without its exit: rt-lib closes it.
        a.cmp(qword_ptr(rdx + (SHADOW_OFFSET - FRAME_SIZE + FRAME_SP_OFFSET)).gs(), rdi)?;
        a.jbe(slow)?;
        a.set_label(&mut push)?;
        let mut miss = a.create_label();
        a.mov(frame64(rdx, FRAME_SP_OFFSET), rdi)?;
        a.mov(frame32(rdx, FRAME_POINT_OFFSET), ecx)?;
        if env.sampling {
            a.mov(rdi, rsi)?; // the sampling state: a sampled point's timed frame is FRAME_SAMPLED
            a.sar(rdi, 63)?;
            a.and(edi, FRAME_SAMPLED as i32)?;
        }
        a.add_instruction(Instruction::with2(Code::Lea_r64_m, Register::RSI, rip(env.ctl))?)?; // the control region
        a.movzx(esi, byte_ptr(rsi + rcx))?; // the point's gate
        a.and(esi, TIMER_BITS as i32)?;
        a.and(esi, gs32(COL_THREAD_MASK_OFFSET))?; // the thread's focus
        if env.sampling {
            a.or(esi, edi)?;
        }
        a.mov(frame32(rdx, FRAME_BITS_OFFSET), esi)?;
        a.mov(frame64(rdx, FRAME_WALL_OFFSET), rax)?;
        a.sub(rax, gs64(COL_CPU_OFF_OFFSET))?;
        a.mov(frame64(rdx, FRAME_CPU_OFFSET), rax)?;
        push_node_and_publish(&mut a, env, &mut miss, out)?;
        // Nothing is published yet: rt-lib does the whole entry (TSC and S as they were).
        a.set_label(&mut miss)?;
        a.mov(rax, frame64(rdx, FRAME_WALL_OFFSET))?;
        a.mov(rdi, frame64(rdx, FRAME_SP_OFFSET))?;
        a.jmp(slow)?;
    } else {
        // rsi = the top frame, ours (checked above).
        // rdx = wall span, rax = CPU span (a re-synchronisation inside the frame can put the
        // CPU clock a little behind its extrapolation: never a negative span), each 0 when
        // the frame does not measure it.
        let (mut cpu_ok, mut wall_on, mut cpu_on, mut flat) =
            (a.create_label(), a.create_label(), a.create_label(), a.create_label());
        a.mov(rdx, rax)?;
        a.sub(rdx, frame64(rsi, FRAME_WALL_OFFSET))?;
        a.sub(rax, gs64(COL_CPU_OFF_OFFSET))?;
        a.sub(rax, frame64(rsi, FRAME_CPU_OFFSET))?;
        a.jns(cpu_ok)?;
        a.xor(eax, eax)?;
        a.set_label(&mut cpu_ok)?;
        if env.sampling {
            // Spans that differ: the thread was off a CPU inside the call (a switch seen by
            // an inner event's re-synchronisation). rt-lib closes such a frame: a learning
            // call counts it for the sampling decision, a sampled point's timed call adds it
            // once to its estimate rather than scaled (`timer::close`).
            a.cmp(rdx, rax)?;
            a.jne(off_cpu)?;
        }
        a.dec(gs32(COL_DEPTH_OFFSET))?;
        a.test(byte_ptr(rsi + (SHADOW_OFFSET + FRAME_BITS_OFFSET)).gs(), u32::from(metric_bit(METRIC_WALL_TIME)))?;
        a.jne(wall_on)?;
        a.xor(edx, edx)?;
        a.set_label(&mut wall_on)?;
        a.test(byte_ptr(rsi + (SHADOW_OFFSET + FRAME_BITS_OFFSET)).gs(), u32::from(metric_bit(METRIC_CPU_TIME)))?;
        a.jne(cpu_on)?;
        a.xor(eax, eax)?;
        a.set_label(&mut cpu_on)?;
        // A sampled point's timed call adds its squared spans (the estimate's variance); a
        // span is capped at 2^32 − 1 ticks before squaring, a sum saturates.
        if env.sampling {
            let (mut nosq, mut sq_cpu_ok) = (a.create_label(), a.create_label());
            a.test(byte_ptr(rsi + (SHADOW_OFFSET + FRAME_BITS_OFFSET + 3)).gs(), (FRAME_SAMPLED >> 24) as i32)?;
            a.je(nosq)?;
            a.inc(counter(env.sampled))?;
            for (span, slot0, ok) in [(rax, env.sq_cpu, &mut sq_cpu_ok), (rdx, env.sq_wall, &mut nosq)] {
                a.mov(edi, u32::MAX)?;
                a.cmp(span, rdi)?;
                a.cmovb(rdi, span)?;
                a.imul_2(rdi, rdi)?;
                a.add(counter(slot0), rdi)?;
                a.jnc(*ok)?;
                a.mov(counter(slot0), -1)?;
                a.set_label(ok)?; // the second one is `nosq`
            }
        }
        // The frame's node (D16) adds its time at every activation (a recursive call is a
        // node of its own); 0 and CCT_LOST have none.
        a.mov(edi, frame32(rsi, FRAME_NODE_OFFSET))?;
        a.dec(edi)?;
        a.cmp(edi, CCT_CAP)?;
        a.jae(flat)?;
        a.shl(edi, CCT_NODE_SIZE.trailing_zeros())?;
        a.add(qword_ptr(rdi + (env.cct_nodes + CCT_NODE_WALL_OFFSET)).gs(), rdx)?;
        a.add(qword_ptr(rdi + (env.cct_nodes + CCT_NODE_CPU_OFFSET)).gs(), rax)?;
        a.set_label(&mut flat)?;
        // The open frames, decremented as a whole 64-bit word (the next entry's load of it is
        // forwarded from this store, as a 16-bit store could not be). Without the sampling
        // paths nothing sits above them; with them, the open frames alone are tested.
        a.dec(counter(env.active))?;
        if env.sampling {
            a.test(word_ptr(rcx * 8 + env.active).gs(), 0xffff)?;
        }
        a.jne(out)?; // not the outermost
        a.add(counter(env.wall), rdx)?;
        a.add(counter(env.cpu), rax)?;
    }
    a.set_label(&mut out)?;
    a.mov(gs32(COL_BUSY_OFFSET), 0)?;
    a.set_label(&mut done)?;
    for r in [rdi, rsi, rdx, rcx] {
        a.pop(r)?;
    }
    a.ret()?;
    a.set_label(&mut reent)?;
    a.inc(gs64(COL_TIMER_SKIPPED_OFFSET))?;
    a.jmp(done)?;
    a.set_label(&mut slow)?;
    // rax = TSC, rcx = point, rdi = S → rax = op, rcx = point, rdx = S, rsi = TSC.
    a.mov(rsi, rax)?;
    a.mov(rdx, rdi)?;
    a.mov(eax, op as u32)?;
    a.call(env.timer_stub)?;
    a.jmp(out)?;
    a.set_label(&mut slow_tsc)?;
    a.rdtsc()?;
    a.shl(rdx, 32)?;
    a.or(rax, rdx)?;
    a.jmp(slow)?;
    if op == TimerOp::Exit && env.sampling {
        // An exit whose spans differ (rdx = wall span, rsi = the frame): rax = TSC again.
        a.set_label(&mut off_cpu)?;
        a.add(rdx, frame64(rsi, FRAME_WALL_OFFSET))?;
        a.mov(rax, rdx)?;
        a.jmp(slow)?;
    }
    if op == TimerOp::Enter && env.sampling {
        // An untimed entry of a sampled point: the frame (marked FRAME_UNTIMED), its
        // call-path node and the active count, as a timed entry but with no clock; rt-lib
        // does the same for anything more than a push (`TimerOp::EnterUntimed`).
        let (mut push, mut miss, mut slow_u) = (a.create_label(), a.create_label(), a.create_label());
        a.set_label(&mut untimed)?;
        // Paused by `stint ctl … sampling off` (rsi = the sampling state): every entry timed.
        a.bt(rsi, SAMPLE_PAUSED.trailing_zeros() as i32)?;
        a.jb(timed)?;
        a.mov(edx, gs32(COL_OWNER_KEY_OFFSET))?;
        a.cmp(edx, gs32(COL_EXIT_KEY_OFFSET))?; // sent to a safe point?
        a.jne(slow_u)?;
        a.mov(edx, gs32(COL_DEPTH_OFFSET))?;
        a.cmp(edx, gs32(COL_SHADOW_READY_OFFSET))?;
        a.jae(slow_u)?;
        a.cmp(edx, SHADOW_CAP)?;
        a.jae(slow_u)?;
        a.shl(edx, FRAME_SIZE.trailing_zeros())?;
        a.test(edx, edx)?;
        a.je(push)?;
        a.cmp(qword_ptr(rdx + (SHADOW_OFFSET - FRAME_SIZE + FRAME_SP_OFFSET)).gs(), rdi)?;
        a.jbe(slow_u)?;
        a.set_label(&mut push)?;
        a.mov(frame64(rdx, FRAME_SP_OFFSET), rdi)?;
        a.mov(frame32(rdx, FRAME_POINT_OFFSET), ecx)?;
        a.mov(frame32(rdx, FRAME_BITS_OFFSET), FRAME_UNTIMED)?;
        push_node_and_publish(&mut a, env, &mut miss, out)?;
        a.set_label(&mut miss)?;
        a.mov(rdi, frame64(rdx, FRAME_SP_OFFSET))?;
        a.set_label(&mut slow_u)?;
        a.rdtsc()?;
        a.shl(rdx, 32)?;
        a.or(rax, rdx)?;
        a.mov(rsi, rax)?;
        a.mov(rdx, rdi)?;
        a.mov(eax, TimerOp::EnterUntimed as u32)?;
        a.call(env.timer_stub)?;
        a.jmp(out)?;
    }
    a.assemble(at)
}

/// The end of an entry that pushed its frame at rdx (rcx = point): the frame's
/// calling-context node ([`cct_probe`]; a miss jumps to `miss`), the point's open frames
/// counted, the frame published (depth + 1), then out.
fn push_node_and_publish(
    a: &mut iced_x86::code_asm::CodeAssembler,
    env: TimerEnv,
    miss: &mut iced_x86::code_asm::CodeLabel,
    out: iced_x86::code_asm::CodeLabel,
) -> std::result::Result<(), iced_x86::IcedError> {
    use iced_x86::code_asm::*;
    cct_probe(a, env, miss)?;
    a.mov(dword_ptr(rdx + (SHADOW_OFFSET + FRAME_NODE_OFFSET)).gs(), eax)?;
    a.inc(qword_ptr(rcx * 8 + env.active).gs())?;
    a.inc(dword_ptr(u64::from(COL_DEPTH_OFFSET)).gs())?; // publish
    a.jmp(out)
}

/// The calling-context node of an entry (D16), in a timer routine: rcx = point, rdx = the
/// new frame's byte index on the shadow stack → eax = node + 1 (0: this thread keeps no call
/// paths), its calls counted; a miss jumps to `miss` (rt-lib probes on). Clobbers rsi, rdi.
fn cct_probe(
    a: &mut iced_x86::code_asm::CodeAssembler,
    env: TimerEnv,
    miss: &mut iced_x86::code_asm::CodeLabel,
) -> std::result::Result<(), iced_x86::IcedError> {
    use iced_x86::code_asm::*;
    // The calling-context node (D16): one probe of the thread's hash index for (parent
    // node, point); a hit counts the call, anything else (a free slot, another key, no
    // parent node) goes to rt-lib, which probes on, makes the node or counts it lost.
    let (mut root, mut nocct) = (a.create_label(), a.create_label());
    let gs32 = |disp: u32| dword_ptr(u64::from(disp)).gs();
    let node32 = |index: AsmRegister64, field: u32| dword_ptr(index + (env.cct_nodes - CCT_NODE_SIZE + field)).gs();
    a.mov(esi, gs32(COL_CCT_MASK_OFFSET))?;
    a.xor(eax, eax)?; // node + 1: 0 when this thread keeps no call paths
    a.test(esi, esi)?;
    a.je(nocct)?;
    a.test(edx, edx)?;
    a.je(root)?;
    a.mov(eax, dword_ptr(rdx + (SHADOW_OFFSET - FRAME_SIZE + FRAME_NODE_OFFSET)).gs())?; // parent + 1
    a.set_label(&mut root)?;
    a.imul_3(edi, eax, CCT_HASH_MUL as i32)?; // cct_hash
    a.add(edi, ecx)?;
    a.and(esi, edi)?;
    a.mov(esi, dword_ptr(rsi * 4 + env.cct_index).gs())?; // node + 1, 0: free
    a.test(esi, esi)?;
    a.je(*miss)?;
    a.mov(edi, esi)?;
    a.shl(edi, CCT_NODE_SIZE.trailing_zeros())?;
    a.cmp(node32(rdi, CCT_NODE_PARENT_OFFSET), eax)?;
    a.jne(*miss)?;
    a.cmp(node32(rdi, CCT_NODE_POINT_OFFSET), ecx)?;
    a.jne(*miss)?;
    a.inc(qword_ptr(rdi + (env.cct_nodes - CCT_NODE_SIZE + CCT_NODE_CALLS_OFFSET)).gs())?;
    a.mov(eax, esi)?;
    a.set_label(&mut nocct)?;
    Ok(())
}

/// Fixed places inside the calibration piece after its four loops (`CALIB_*_OFFSET`):
/// the plain function, the split callee, the entry+exit callee; the trampolines follow.
const CALIB_PLAIN_FN: u64 = 128;
const CALIB_SPLIT_FN: u64 = 144;
const CALIB_EE_FN: u64 = 160;
const CALIB_TRAMPOLINES: u64 = 192;

/// One instruction decoded from `bytes` as if it stood at `ip` in the program.
fn decoded(bytes: &[u8], ip: u64) -> Result<Instruction> {
    let i = iced_x86::Decoder::with_ip(64, bytes, ip, iced_x86::DecoderOptions::NONE).decode();
    if i.is_invalid() || i.len() != bytes.len() {
        return Err(Error::Internal(format!("calibration: cannot decode {bytes:02x?}")));
    }
    Ok(i)
}

/// Encode the calibration routine (D21) at `at`: a program in miniature whose points are made
/// by the very functions that make the program's ([`trampoline`], [`exit_trampoline`],
/// [`import_trampoline`]), for point `id` with `env` (its gate, counter and the shared timer
/// routines), so that what the runtime measures is what a timed call costs here. The
/// program's routine is for `stint_layout::calib_point`: a gate byte of its own, past the
/// program's, so the runtime can calibrate again while the program runs.
/// ```text
/// +0   split:  call f / dec rdi / jne split / ret          ; CALIB_SPLIT_OFFSET
/// +32  plain:  call p / dec rdi / jne plain / ret          ; the baseline
/// +64  import: call T_import (the patched `call p`) / dec rdi / jne import / ret
/// +96  ee:     call g / dec rdi / jne ee / ret
/// +128 p:      ret
/// +144 f:      jmp T_entry (window: a 5-byte nop) / jmp T_exit (the patched `ret`)
/// +160 g:      jmp T_ee (window: a 5-byte nop and the `ret`, entry+exit tactic)
/// +192 T_entry, T_exit, T_ee, T_import, each 16-aligned, as the layout pass packs pieces
/// ```
/// `bits` are the point's metric bits (what the runtime may set in the gate).
pub fn calibration(at: u64, id: u32, env: TrampolineEnv, bits: u8) -> Result<Vec<u8>> {
    let nop5 = [0x0f, 0x1f, 0x44, 0x00, 0x00];
    let (f, g, p) = (at + CALIB_SPLIT_FN, at + CALIB_EE_FN, at + CALIB_PLAIN_FN);
    let point = |address: u64, displaced: Vec<Instruction>, tactic: Tactic| Point {
        id,
        function: usize::MAX,
        address,
        window_len: 5,
        displaced,
        emulate_call: false,
        tactic,
        bits,
        wrap: None,
        import: None,
    };
    let split = point(f, vec![decoded(&nop5, f)?], Tactic::Window);
    let ee = point(g, vec![decoded(&nop5, g)?, decoded(&[0xc3], g + 5)?], Tactic::Window);
    let import_at = at + stint_layout::CALIB_IMPORT_OFFSET;
    let call = decoded(&call_rel32(import_at, p), import_at)?;
    let exit = Exit {
        point: id,
        function: usize::MAX,
        site: f + 5,
        kind: crate::plan::ExitKind::Ret,
        address: f + 5,
        window_len: 5,
        displaced: vec![decoded(&[0xc3], f + 5)?],
        tactic: Tactic::Window,
        slot: None,
        retargets: Vec::new(),
        redirects: Vec::new(),
    };
    let mut out = vec![0xcc; CALIB_TRAMPOLINES as usize];
    let next = |code: Vec<u8>, out: &mut Vec<u8>| -> u64 {
        let here = at + out.len() as u64;
        out.extend_from_slice(&code);
        while !out.len().is_multiple_of(16) {
            out.push(0xcc);
        }
        here
    };
    let t_entry = next(trampoline(&split, env, at + out.len() as u64, None)?, &mut out);
    let t_exit = next(exit_trampoline(&exit, env, at + out.len() as u64)?, &mut out);
    let t_ee = next(trampoline(&ee, env, at + out.len() as u64, Some(g + 5))?, &mut out);
    let t_import =
        next(import_trampoline(&call, &point(p, Vec::new(), Tactic::Window), env, at + out.len() as u64)?, &mut out);
    // The fixed places, each encoded where it stands.
    let mut put = |off: u64, code: Vec<u8>, room: u64| -> Result<()> {
        if code.len() as u64 > room {
            return Err(Error::Internal(format!("calibration: {} bytes at +{off} (room {room})", code.len())));
        }
        out[off as usize..off as usize + code.len()].copy_from_slice(&code);
        Ok(())
    };
    let jmp = |from: u64, to: u64| -> Result<Vec<u8>> {
        let mut b = Block::new();
        b.add(Instruction::with_branch(Code::Jmp_rel32_64, to).map_err(internal)?);
        b.encode(from)
    };
    for (off, callee) in [
        (stint_layout::CALIB_SPLIT_OFFSET, f),
        (stint_layout::CALIB_PLAIN_OFFSET, p),
        (stint_layout::CALIB_ENTRY_EXIT_OFFSET, g),
    ] {
        put(off, calib_loop(at + off, Some(callee))?, 32)?;
    }
    put(stint_layout::CALIB_IMPORT_OFFSET, call_rel32(import_at, t_import).to_vec(), 5)?;
    put(stint_layout::CALIB_IMPORT_OFFSET + 5, calib_loop_tail(import_at + 5, import_at)?, 27)?;
    put(CALIB_PLAIN_FN, vec![0xc3], 16)?;
    put(CALIB_SPLIT_FN, jmp(f, t_entry)?, 5)?;
    put(CALIB_SPLIT_FN + 5, jmp(f + 5, t_exit)?, 11)?;
    put(CALIB_EE_FN, jmp(g, t_ee)?, 5)?;
    Ok(out)
}

/// `call rel32` from `at` to `to`, as bytes.
fn call_rel32(at: u64, to: u64) -> [u8; 5] {
    let rel = (to as i64 - (at as i64 + 5)) as i32;
    let r = rel.to_le_bytes();
    [0xe8, r[0], r[1], r[2], r[3]]
}

/// `top: call callee / dec rdi / jne top / ret` at `at`.
fn calib_loop(at: u64, callee: Option<u64>) -> Result<Vec<u8>> {
    let mut b = Block::new();
    if let Some(c) = callee {
        b.add(Instruction::with_branch(Code::Call_rel32_64, c).map_err(internal)?);
    }
    let mut code = b.encode(at)?;
    code.extend(calib_loop_tail(at + code.len() as u64, at)?);
    Ok(code)
}

/// `dec rdi / jne top / ret` at `at`.
fn calib_loop_tail(at: u64, top: u64) -> Result<Vec<u8>> {
    let mut b = Block::new();
    b.op(Instruction::with1(Code::Dec_rm64, Register::RDI))?;
    b.add(Instruction::with_branch(Code::Jne_rel32_64, top).map_err(internal)?);
    b.op(Ok(Instruction::with(Code::Retnq)))?;
    b.encode(at)
}

/// The new `e_entry`: initialise the runtime, then continue at the program's entry with
/// the registers the kernel and ld.so set (rsp → argc, rdx → ld.so's fini function).
pub fn entry_stub(at: u64, config: u64, rt_init: u64, original_entry: u64) -> Result<Vec<u8>> {
    let mut b = Block::new();
    b.op(Ok(Instruction::with(Code::Endbr64)))?;
    b.op(Instruction::with1(Code::Push_r64, Register::RDX))?; // ld.so's fini pointer
    b.op(Instruction::with1(Code::Push_r64, Register::RBP))?;
    b.op(Instruction::with2(Code::Mov_r64_rm64, Register::RBP, Register::RSP))?;
    b.op(Instruction::with2(Code::And_rm64_imm8, Register::RSP, -16i32))?;
    b.op(Instruction::with2(Code::Lea_r64_m, Register::RDI, rip(config)))?; // arg 1: config
    b.op(Instruction::with2(Code::Lea_r64_m, Register::RSI, mem(Register::RBP, 16)))?; // arg 2: initial sp
    b.add(Instruction::with_branch(Code::Call_rel32_64, rt_init).map_err(internal)?);
    b.op(Instruction::with2(Code::Mov_r64_rm64, Register::RSP, Register::RBP))?;
    b.op(Instruction::with1(Code::Pop_r64, Register::RBP))?;
    b.op(Instruction::with1(Code::Pop_r64, Register::RDX))?;
    b.add(Instruction::with_branch(Code::Jmp_rel32_64, original_entry).map_err(internal)?);
    b.encode(at)
}

/// A piece encoded at a provisional address, with what changes when it moves: the layout
/// pass encodes the many per-point pieces on every core at once ([`crate::par`]) before it
/// knows their addresses, then [`Movable::moved`] gives each one's bytes at its final address.
///
/// Moving code changes only the 32-bit displacements that reach outside it (RIP-relative
/// operands, branches and calls to the program, the stubs and the runtime); branches inside it
/// keep their encodings. `moved` gives `None` (encode the piece there instead) where the
/// encoder's choices could differ at the other address: a branch out of the piece that is
/// short at one address or would be at the other, a displacement out of reach, or anything
/// the decoder does not read back as plain instructions (the encoder's far-branch data). So
/// a moved piece is byte for byte what [`piece`] encodes at its final address.
pub struct Movable {
    pub kind: PieceKind,
    /// The provisional address.
    pub at: u64,
    pub code: Vec<u8>,
    /// The displacements that reach outside the piece; `None`: the piece must not move.
    fields: Option<Vec<Field>>,
    /// The id of its CFI shape, found in the same decoding (the same at any address; `None`
    /// where it would not be, or the piece must not move): [`crate::unwind::ShapeIds`].
    pub shape: Option<u64>,
}

/// A rel32 / disp32 field of a [`Movable`] piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Field {
    /// Offset of the field in the piece.
    at: u32,
    /// Offset of the end of its instruction (the displacement counts from there).
    end: u32,
    target: u64,
    /// A jump or conditional branch: short (rel8) when its target is near.
    may_shorten: bool,
}

impl Movable {
    /// Encode `kind` at `at` and find its displacements and its shape's id in `ids`
    /// (`scratch`: a buffer for the shape, reused).
    pub fn new(
        plan: &Plan,
        kind: PieceKind,
        at: u64,
        t: &Targets,
        ids: &crate::unwind::ShapeIds,
        scratch: &mut Vec<u8>,
    ) -> Result<Movable> {
        let code = piece(plan, kind, at, t)?;
        scratch.clear();
        scratch.extend_from_slice(&code);
        let (fields, same_anywhere) = match movable_fields(&code, at, scratch) {
            Some((fields, same)) => (Some(fields), same),
            None => (None, false),
        };
        let shape = if same_anywhere { ids.id(scratch) } else { None };
        Ok(Movable { kind, at, code, fields, shape })
    }

    /// The piece's bytes at `to`, or `None` if it must be encoded there (see [`Movable`]).
    pub fn moved(self, to: u64) -> Option<Vec<u8>> {
        // The measuring path's alignment padding ([`ON_ALIGN`]) depends on the address modulo
        // the alignment: a move by anything else is encoded again.
        if !to.wrapping_sub(self.at).is_multiple_of(ON_ALIGN) {
            return None;
        }
        let fields = self.fields?;
        let mut code = self.code;
        for f in fields.iter().filter(|_| to != self.at) {
            let disp = f.target.wrapping_sub(to.wrapping_add(u64::from(f.end))) as i64;
            if f.may_shorten && (-256..256).contains(&disp) {
                return None;
            }
            let disp = i32::try_from(disp).ok()?;
            code[f.at as usize..f.at as usize + 4].copy_from_slice(&disp.to_le_bytes());
        }
        Some(code)
    }
}

/// The displacements of `code` (encoded at `at`) that reach outside it; `None` if it has
/// one that could change size or form when the code moves (see [`Movable`]). In the same
/// decoding, its CFI shape into `shape` (which holds `code`: [`crate::unwind::shape_step`]),
/// and whether that is the same at any address.
fn movable_fields(code: &[u8], at: u64, shape: &mut Vec<u8>) -> Option<(Vec<Field>, bool)> {
    let code_end = at.wrapping_add(code.len() as u64);
    let inside = |a: u64| a >= at && a < at + code.len() as u64;
    let mut d = iced_x86::Decoder::with_ip(64, code, at, iced_x86::DecoderOptions::NONE);
    let mut ins = Instruction::default();
    let mut fields = Vec::new();
    let mut same_anywhere = true;
    while d.can_decode() {
        d.decode_out(&mut ins);
        if ins.code() == Code::INVALID {
            return None;
        }
        let start = (ins.ip() - at) as u32;
        let end = start + ins.len() as u32;
        let offsets = d.get_constant_offsets(&ins);
        same_anywhere &= crate::unwind::shape_step(shape, &ins, &offsets, at, code_end);
        let branch = ins.op_count() > 0
            && matches!(ins.op0_kind(), iced_x86::OpKind::NearBranch64 | iced_x86::OpKind::NearBranch32);
        if branch {
            let target = ins.near_branch_target();
            if !inside(target) {
                if offsets.immediate_size() != 4 {
                    return None; // a short branch out: at another address it may be near
                }
                let may_shorten = ins.flow_control() != FlowControl::Call;
                fields.push(Field { at: start + offsets.immediate_offset() as u32, end, target, may_shorten });
            }
        } else if ins.is_ip_rel_memory_operand() {
            let target = ins.ip_rel_memory_address();
            if inside(target) || offsets.displacement_size() != 4 {
                return None; // data of the encoder's own (a far branch's target)
            }
            fields.push(Field { at: start + offsets.displacement_offset() as u32, end, target, may_shorten: false });
        }
    }
    Some((fields, same_anywhere))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Tactic;
    use iced_x86::{Decoder, DecoderOptions, Formatter, IntelFormatter, Mnemonic};

    fn disasm(code: &[u8], at: u64) -> Vec<String> {
        let mut f = IntelFormatter::new();
        Decoder::with_ip(64, code, at, DecoderOptions::NONE)
            .into_iter()
            .map(|i| {
                let mut s = String::new();
                f.format(&i, &mut s);
                s
            })
            .collect()
    }

    /// The targets every trampoline test encodes against.
    /// Point `id` with a `window` entry at 0x401000 of `window_len` bytes.
    fn window_point(id: u32, window_len: u64, displaced: Vec<Instruction>, emulate_call: bool, bits: u8) -> Point {
        Point {
            id,
            function: 0,
            address: 0x401000,
            window_len,
            displaced,
            emulate_call,
            tactic: Tactic::Window,
            bits,
            wrap: None,
            import: None,
        }
    }

    fn test_env() -> TrampolineEnv {
        TrampolineEnv {
            gate: 0x500000,
            cookie: 0x4ff000,
            counter: 152,
            tid_offset: 0x2d0,
            slow_stub: 0x600000,
            timer_enter: 0x610000,
            timer_exit: 0x620000,
        }
    }

    /// A `call [rip+slot]` import site at 0x401000 (6 bytes: the slot at 0x404000) and its
    /// import point with `bits`.
    fn got_call_site(bits: u8) -> (Instruction, Point) {
        let call = decoded(&[0xff, 0x15, 0xfa, 0x2f, 0x00, 0x00], 0x401000).unwrap();
        assert_eq!(call.ip_rel_memory_address(), 0x404000);
        let p = Point {
            id: 3,
            function: usize::MAX,
            address: 0x404000,
            window_len: 0,
            displaced: Vec::new(),
            emulate_call: false,
            tactic: Tactic::Window,
            bits,
            wrap: None,
            import: None,
        };
        (call, p)
    }

    /// Calls only: the off path and the counting path both end in a jump through the GOT (the
    /// callee returns to the program, whose `call` pushed the return address); nothing
    /// pushes a return address or returns.
    #[test]
    fn import_trampoline_without_timers_jumps_to_the_callee() {
        let (call, p) = got_call_site(CALLS_BIT);
        let at = 0x700000;
        let text = disasm(&import_trampoline(&call, &p, test_env(), at).unwrap(), at).join("\n");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[2], "jmp qword ptr [404000h]", "{text}");
        assert!(text.contains("inc qword ptr gs:[98h]\npop rax\njmp qword ptr [404000h]"), "{text}");
        assert!(!text.contains("ret") && !text.contains("lea rax") && !text.contains("rsp"), "{text}");
        assert_eq!(text.matches("push rax").count(), 1, "{text}");
    }

    /// Timed: the pushed return address is stepped over for the callee's call (the same rsp
    /// as the program's call), put back afterwards, and the trampoline returns with `ret`.
    #[test]
    fn import_trampoline_with_timers_calls_the_callee_and_returns() {
        let (call, p) = got_call_site(CALLS_BIT | TIMER_BITS);
        let at = 0x700000;
        let text = disasm(&import_trampoline(&call, &p, test_env(), at).unwrap(), at).join("\n");
        let timed =
            "call 0000000000610000h\npop rax\nlea rsp,[rsp+8]\ncall qword ptr [404000h]\nlea rsp,[rsp-8]\npush rax";
        assert!(text.contains(timed), "{text}");
        assert!(text.contains("call 0000000000620000h\nlea rax,[401006h]\nmov [rsp+8],rax\npop rax\nret"), "{text}");
        assert_eq!(text.matches("ret").count(), 1, "{text}");
        assert_eq!(text.matches("jmp qword ptr [404000h]").count(), 2, "off and calls-only paths: {text}");
    }

    #[test]
    fn trampoline_reads_fs_and_gs_absolute_and_jumps_back() {
        // push rbp; mov rbp, rsp; sub rsp, 0x10  at 0x401000
        let code = [0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10];
        let displaced: Vec<_> = Decoder::with_ip(64, &code, 0x401000, DecoderOptions::NONE).into_iter().collect();
        let p = window_point(3, 8, displaced, false, 5);
        let env = test_env();
        let out = trampoline(&p, env, 0x700000, None).unwrap();
        let text = disasm(&out, 0x700000).join("\n");
        assert!(text.contains("test byte ptr [500000h],5"), "{text}");
        assert!(text.contains("mov rax,fs:[0]"), "{text}");
        assert!(text.contains("cmp rax,gs:[8]"), "{text}");
        assert!(text.contains("mov eax,fs:[2D0h]"), "{text}");
        assert!(text.contains("inc qword ptr gs:[98h]"), "{text}");
        assert!(text.contains("jmp 0000000000401008h"), "{text}");
        assert!(text.contains("call 0000000000600000h"), "{text}");
    }

    /// A point that can only count calls: on and off run one straight path (fork cookie,
    /// armed owner word, the gate's calls bit added to the counter); no libc tid word, no
    /// thread mask and no branch taken until the jump back. The runtime's way (the slow stub,
    /// then the masked count) is the one branch away.
    #[test]
    fn calls_only_point_counts_on_one_straight_path() {
        let code = [0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10]; // push rbp; mov rbp,rsp; sub rsp,16
        let displaced: Vec<_> = Decoder::with_ip(64, &code, 0x401000, DecoderOptions::NONE).into_iter().collect();
        let p = window_point(3, 8, displaced, false, CALLS_BIT);
        let at = 0x700000;
        let text = disasm(&trampoline(&p, test_env(), at, None).unwrap(), at).join("\n");
        let path =
            format!("push rax\nmov rax,fs:[0]\nxor rax,[4FF000h]\ncmp rax,gs:[{:X}h]\njne ", COL_OWNER_TPX_OFFSET);
        assert!(text.starts_with(&path), "{text}");
        let count = "movzx eax,byte ptr [500000h]\nand eax,1\nadd gs:[98h],rax\npop rax\npush rbp\nmov rbp,rsp\nsub rsp,10h\njmp 0000000000401008h";
        assert!(text.contains(count), "{text}");
        assert!(!text.contains("2D0h"), "no tid word: {text}");
        // The runtime's way: the slow stub, then the count with the thread's mask.
        assert!(text.contains("cmp byte ptr [4FF008h],0\njne "), "the idle word first: {text}");
        assert!(text.contains("mov eax,3\ncall 0000000000600000h\ntest eax,eax\njne "), "{text}");
        assert!(text.contains("and eax,gs:[130h]"), "{text}");
        assert_eq!(text.matches("jmp 0000000000401008h").count(), 1, "one copy of the window: {text}");
    }

    /// An entry window whose fall-through is redirected ([`crate::plan::Redirect::falls_through`]):
    /// both copies of the window (off and measuring paths) and the entry tail end with a jump
    /// to the exit trampoline's copy, never back to the window's end; the jne keeps its target.
    #[test]
    fn entry_fall_through_leads_to_the_exit_copy() {
        // mov eax, edi; test al, 1; jne +0x10 (to 0x401016) at 0x401000; the ret at 0x401006.
        let code = [0x89, 0xf8, 0xa8, 0x01, 0x75, 0x10];
        let displaced: Vec<_> = Decoder::with_ip(64, &code, 0x401000, DecoderOptions::NONE).into_iter().collect();
        let redirects = BTreeMap::from([(0x401006, 0x750000)]);
        let out = redirect_entry_jumps(&displaced, &redirects).expect("the fall-through is redirected");
        assert_eq!(out.len(), 4);
        assert_eq!((out[3].code(), out[3].near_branch_target(), out[3].ip()), (Code::Jmp_rel32_64, 0x750000, 0x401006));
        // A jump of the window is no fall-through key: without the end in the map, nothing.
        assert!(redirect_entry_jumps(&displaced, &BTreeMap::from([(0x401007, 0x750000)])).is_none());
        let p = window_point(3, 6, out.clone(), false, 5);
        let text = disasm(&trampoline(&p, test_env(), 0x700000, None).unwrap(), 0x700000).join("\n");
        assert_eq!(text.matches("jmp 0000000000750000h").count(), 2, "{text}");
        assert_eq!(text.matches("jne 0000000000401016h").count(), 2, "{text}");
        assert!(!text.contains("401006h"), "{text}");
        let tail = disasm(&entry_tail(&out, false, 0x401002, 0x710000).unwrap(), 0x710000).join("\n");
        assert_eq!(tail, "test al,1\njne 0000000000401016h\njmp 0000000000750000h");
    }

    /// The gate test's taken branch lands on a 16-byte boundary wherever the piece starts,
    /// and the bytes skipped to get there are `int3`s after the off path's jump back.
    #[test]
    fn measuring_path_starts_16_aligned_after_unreached_padding() {
        let code = [0x48, 0x8d, 0x47, 0x01, 0xc3]; // lea rax, [rdi+1]; ret
        let displaced: Vec<_> = Decoder::with_ip(64, &code, 0x401000, DecoderOptions::NONE).into_iter().collect();
        let p = window_point(2, 5, displaced, false, 5);
        let env = test_env();
        let mut pads = std::collections::BTreeSet::new();
        for at in 0x700000..0x700000 + 16 {
            let out = trampoline(&p, env, at, None).unwrap();
            let ins: Vec<_> = Decoder::with_ip(64, &out, at, DecoderOptions::NONE).into_iter().collect();
            assert_eq!(ins[1].mnemonic(), Mnemonic::Jne, "at 0x{at:x}");
            let on = ins[1].near_branch_target();
            assert_eq!(on % ON_ALIGN, 0, "at 0x{at:x}");
            // test, jne, lea, ret: the off path; then int3 up to the target, then push rax.
            let off_end = ins[3].next_ip();
            assert_eq!(ins[3].mnemonic(), Mnemonic::Ret, "at 0x{at:x}");
            let pad = &out[(off_end - at) as usize..(on - at) as usize];
            assert!(pad.iter().all(|&b| b == 0xcc), "at 0x{at:x}: {pad:x?}");
            assert_eq!(out[(on - at) as usize], 0x50, "at 0x{at:x}: push rax");
            pads.insert(pad.len());
        }
        assert_eq!(pads.len(), 16, "every padding from 0 to 15 bytes: {pads:?}");
    }

    /// The calibration routine: each loop calls its callee `rdi` times; the split callee enters
    /// a real entry trampoline (which jumps back behind its window) and leaves through a real
    /// exit trampoline, both calling the shared timer routines for point 0; the import loop's
    /// call site enters an import trampoline that comes back to the loop.
    #[test]
    fn calibration_routine_runs_real_trampolines() {
        let env = test_env();
        let at = 0x700000u64;
        let code = calibration(at, 0, env, TIMER_BITS | CALLS_BIT).unwrap();
        let first = |off: u64| {
            let d = &code[off as usize..];
            Decoder::with_ip(64, d, at + off, DecoderOptions::NONE).decode()
        };
        let loop_at = |off: u64| disasm(&code[off as usize..off as usize + 16], at + off).join("; ");
        for (off, callee) in [
            (stint_layout::CALIB_SPLIT_OFFSET, CALIB_SPLIT_FN),
            (stint_layout::CALIB_PLAIN_OFFSET, CALIB_PLAIN_FN),
            (stint_layout::CALIB_ENTRY_EXIT_OFFSET, CALIB_EE_FN),
        ] {
            let text = loop_at(off);
            let want = format!("call {:016X}h; dec rdi; jne short {:016X}h; ret", at + callee, at + off);
            assert!(text.starts_with(&want), "+{off}: {text}");
        }
        assert_eq!(code[CALIB_PLAIN_FN as usize], 0xc3, "the plain function returns");
        // The split callee: jmp to the entry trampoline, whose displaced nop jumps back to
        // callee+5, which jumps to the exit trampoline.
        let t_entry = first(CALIB_SPLIT_FN).near_branch_target();
        let t_exit = first(CALIB_SPLIT_FN + 5).near_branch_target();
        let entry = disasm(&code[(t_entry - at) as usize..(t_exit - at) as usize], t_entry).join("\n");
        assert!(entry.starts_with("test byte ptr [500000h],"), "{entry}");
        assert!(entry.contains("inc qword ptr gs:[98h]"), "{entry}");
        assert!(entry.contains("mov eax,0\ncall 0000000000610000h"), "{entry}");
        assert!(entry.contains(&format!("jmp {:016X}h", at + CALIB_SPLIT_FN + 5)), "{entry}");
        let exit = disasm(&code[(t_exit - at) as usize..], t_exit).join("\n");
        assert!(exit.contains("call 0000000000620000h\npop rax\nret"), "{exit}");
        // The entry+exit callee's one trampoline calls both routines and returns itself.
        let t_ee = first(CALIB_EE_FN).near_branch_target();
        let ee = disasm(&code[(t_ee - at) as usize..], t_ee).join("\n");
        assert!(ee.contains("call 0000000000610000h") && ee.contains("call 0000000000620000h"), "{ee}");
        // The import call site calls its trampoline, which tail-jumps to the plain function
        // when off, and timed calls it and returns behind the call site with its own `ret`.
        let import = stint_layout::CALIB_IMPORT_OFFSET;
        assert_eq!(first(import).code(), Code::Call_rel32_64);
        let t_import = first(import).near_branch_target();
        let text = disasm(&code[(t_import - at) as usize..], t_import).join("\n");
        let plain = at + CALIB_PLAIN_FN;
        let head: Vec<&str> = text.lines().take(3).collect();
        assert!(head[0].starts_with("test byte ptr [500000h]") && head[1].starts_with("jne "), "{text}");
        assert_eq!(head[2], format!("jmp {plain:016X}h"), "{text}");
        assert!(text.contains(&format!("lea rsp,[rsp+8]\ncall {plain:016X}h\nlea rsp,[rsp-8]")), "{text}");
        let back = format!("lea rax,[{:X}h]\nmov [rsp+8],rax\npop rax\nret", at + import + 5);
        assert!(text.contains(&back), "{text}");
        assert!(loop_at(import + 5).starts_with(&format!("dec rdi; jne short {:016X}h; ret", at + import)));
    }

    /// The thunk of a dynamic program's mutex lock: gate off → the GOT; a registered
    /// thread with calls only → counted and the GOT, no runtime; lock metrics → the lock
    /// entry; anything else (state_trace) → the full wrapper. A static program's thunk has
    /// no fast path.
    #[test]
    fn wrap_thunk_counts_in_machine_code_and_takes_the_lock_entry() {
        let fast = ThunkFast { tid_offset: 0x2d0, counter: 0x98, lock_entry: 0x820000 };
        let code = wrap_thunk(0x700000, 0x500000, 0x1f, 0x900000, 0x810000, Real::Got(0x404018), Some(fast)).unwrap();
        let ins: Vec<String> = disasm(&code, 0x700000);
        let text = ins.join("\n");
        let pos = |s: &str| ins.iter().position(|i| i.contains(s)).unwrap_or_else(|| panic!("no {s} in\n{text}"));
        let (check, count, lock, full, got) = (
            pos("cmp rax,gs:[8]"),
            pos("inc qword ptr gs:[98h]"),
            pos("jmp 0000000000820000h"),
            pos("jmp 0000000000810000h"),
            pos("jmp qword ptr [404018h]"),
        );
        assert!(check < count && count < lock && lock < full && full < got, "{text}");
        assert!(text.contains("and eax,gs:["), "the thread mask: {text}");
        assert!(text.contains("test al,0FEh"), "any bit but calls leaves the counting path: {text}");
        assert!(text.contains("test al,0E6h"), "only calls and lock metrics take the lock entry: {text}");
        assert_eq!(ins.iter().filter(|i| i.contains("lea r9,[900000h]")).count(), 2, "{text}");
        let plain = wrap_thunk(0x700000, 0x500000, 0x1f, 0x900000, 0x810000, Real::Code(0x401000), None).unwrap();
        let text = disasm(&plain, 0x700000).join("\n");
        assert!(!text.contains("gs:"), "{text}");
        assert!(text.contains("jmp 0000000000401000h"), "{text}");
    }

    /// Which thunks take the lock entry: mutex lock, timedlock and unlock, and the calls
    /// that neither wait nor hold (signal, broadcast, post); a waiting call (condition wait,
    /// trylock) keeps the full wrapper, the thread functions have no fast path at all, and a
    /// static program's thunks none either.
    #[test]
    fn thunk_fast_sends_mutex_and_signalling_calls_to_the_lock_entry() {
        use stint_layout::WrappedFn as W;
        let t = Targets { n_points: 4, tid_offset: 0x2d0, ..Targets::default() };
        let entry = |f: W, real: Real| thunk_fast(f as u32, real, &t, 1, 0x820000).map(|f| f.lock_entry);
        let got = Real::Got(0x404018);
        for f in [W::MutexLock, W::MutexTimedlock, W::MutexUnlock, W::CondSignal, W::CondBroadcast, W::SemPost] {
            assert_eq!(entry(f, got), Some(0x820000), "{f:?}");
        }
        for f in [W::CondWait, W::MutexTrylock, W::SemWait, W::RwlockRdlock, W::BarrierWait] {
            assert_eq!(entry(f, got), Some(0), "{f:?}: counted in the thunk, else the full wrapper");
        }
        for f in [W::PthreadCreate, W::PthreadJoin, W::SetnameNp] {
            assert_eq!(entry(f, got), None, "{f:?}");
        }
        assert_eq!(entry(W::MutexLock, Real::Code(0x401000)), None, "static");
    }

    #[test]
    fn emulated_call_pushes_original_return_address() {
        // push rbx; call 0x402000  at 0x401000 (call ends at 0x401006)
        let code = [0x53, 0xe8, 0xfa, 0x0f, 0x00, 0x00];
        let displaced: Vec<_> = Decoder::with_ip(64, &code, 0x401000, DecoderOptions::NONE).into_iter().collect();
        let p = window_point(0, 6, displaced, true, 1);
        let env = TrampolineEnv {
            gate: 0x500000,
            cookie: 0x4ff000,
            counter: 128,
            tid_offset: 0,
            slow_stub: 0x600000,
            timer_enter: 0x610000,
            timer_exit: 0x620000,
        };
        let text = disasm(&trampoline(&p, env, 0x700000, None).unwrap(), 0x700000).join("\n");
        assert!(text.contains("lea rax,[401006h]"), "{text}");
        assert!(text.contains("jmp 0000000000402000h"), "{text}");
        assert!(!text.contains("call 0000000000402000h"), "{text}");
    }

    #[test]
    fn displaced_got_calls_of_wrapped_imports_call_the_thunk() {
        // lea rdi, [rip+0x100]; call [rip+0x2000] (slot 0x40300d); at 0x401000
        let code = [0x48, 0x8d, 0x3d, 0x00, 0x01, 0x00, 0x00, 0xff, 0x15, 0x00, 0x20, 0x00, 0x00];
        let displaced: Vec<_> = Decoder::with_ip(64, &code, 0x401000, DecoderOptions::NONE).into_iter().collect();
        let slot = displaced[1].ip_rel_memory_address();
        assert_eq!(slot, 0x40300d);
        assert_eq!(redirect_wrapped(&displaced, &BTreeMap::from([(0x999, 0x700000)])).unwrap(), None);
        let out = redirect_wrapped(&displaced, &BTreeMap::from([(slot, 0x700000)])).unwrap().expect("redirected");
        assert_eq!(out[0], displaced[0]);
        assert_eq!((out[1].code(), out[1].near_branch_target()), (Code::Call_rel32_64, 0x700000));
        // Same place: an emulated call pushes the original return address.
        assert_eq!((out[1].ip(), out[1].next_ip()), (0x401007, 0x40100d));
        let p = window_point(0, 13, out, true, 1);
        let env = TrampolineEnv {
            gate: 0x600000,
            cookie: 0x5ff000,
            counter: 0,
            tid_offset: 0,
            slow_stub: 0x500000,
            timer_enter: 0,
            timer_exit: 0,
        };
        let text = disasm(&trampoline(&p, env, 0x700100, None).unwrap(), 0x700100).join("\n");
        assert!(text.contains("lea rax,[40100Dh]") && text.contains("jmp 0000000000700000h"), "{text}");
        assert!(!text.contains("40300Dh"), "the GOT slot is still called: {text}");
    }

    /// A point whose window displaces a RIP-relative load and a call (both reach outside).
    fn movable_plan() -> Plan {
        // mov rax, [rip+0x2000]; call 0x402000  at 0x401000
        let code = [0x48, 0x8b, 0x05, 0x00, 0x20, 0x00, 0x00, 0xe8, 0xf4, 0x0f, 0x00, 0x00];
        let displaced: Vec<_> = Decoder::with_ip(64, &code, 0x401000, DecoderOptions::NONE).into_iter().collect();
        let p = window_point(0, 12, displaced, true, 0x7);
        Plan { points: vec![p], ..Plan::default() }
    }

    fn movable_targets() -> Targets {
        Targets {
            control: 0x60_0000,
            n_points: 1,
            tid_offset: 0x2d0,
            slow_stub: 0x70_0000,
            timer_enter: 0x70_0100,
            timer_exit: 0x70_0200,
            ..Targets::default()
        }
    }

    #[test]
    fn a_moved_piece_is_the_piece_encoded_at_its_new_address() {
        let (plan, t) = (movable_plan(), movable_targets());
        let m = || {
            Movable::new(&plan, PieceKind::Trampoline(0), 0x80_0000, &t, &Default::default(), &mut Vec::new()).unwrap()
        };
        for to in [0x80_0000, 0x80_0010, 0x80_1230, 0x9f_fff0] {
            let moved = m().moved(to).expect("movable");
            assert_eq!(moved, piece(&plan, PieceKind::Trampoline(0), to, &t).unwrap(), "at 0x{to:x}");
        }
        // The gate, the program's load, the return address, the callee, the stubs: all moved.
        assert!(m().fields.unwrap().len() >= 6);
    }

    /// The CFI shape found while finding the fields is the one unwind finds in the moved
    /// bytes, wherever they move; one shape, one id (the piece at two provisional addresses).
    #[test]
    fn a_moved_piece_keeps_the_shape_found_ahead() {
        let (plan, t) = (movable_plan(), movable_targets());
        let ids = crate::unwind::ShapeIds::default();
        let mut scratch = Vec::new();
        let a = Movable::new(&plan, PieceKind::Trampoline(0), 0x80_0000, &t, &ids, &mut scratch).unwrap();
        let ahead = scratch.clone();
        let b = Movable::new(&plan, PieceKind::Trampoline(0), 0x90_0010, &t, &ids, &mut scratch).unwrap();
        assert!(a.shape.is_some());
        assert_eq!(a.shape, b.shape);
        assert_eq!(scratch, ahead);
        let mut other = ahead.clone();
        other[0] ^= 1;
        assert_ne!(ids.id(&other), a.shape);
        for to in [0x80_0000, 0x80_1230, 0x9f_fff0] {
            let m = Movable::new(&plan, PieceKind::Trampoline(0), 0x80_0000, &t, &ids, &mut scratch).unwrap();
            let moved = m.moved(to).expect("movable");
            let (mut ins, mut shape) = (Vec::new(), Vec::new());
            crate::unwind::decode_shape(to, &moved, &mut ins, &mut shape);
            assert_eq!(shape, ahead, "at 0x{to:x}");
        }
    }

    #[test]
    fn a_piece_whose_jump_would_become_short_is_not_moved() {
        let (plan, t) = (movable_plan(), movable_targets());
        let m = || {
            Movable::new(&plan, PieceKind::Trampoline(0), 0x80_0000, &t, &Default::default(), &mut Vec::new()).unwrap()
        };
        // Right after the program's callee: the emulated call's `jmp 0x402000` would be rel8.
        assert_eq!(m().moved(0x40_2010), None);
        // Too far for a rel32 to the program.
        assert_eq!(m().moved(0x1_0000_0000), None);
    }

    /// `BlockEncoder`'s bytes for `ins` at `at`: what [`encode::encode`] must give.
    fn iced(ins: &[Instruction], at: u64) -> Vec<u8> {
        BlockEncoder::encode(64, InstructionBlock::new(ins, at), BlockEncoderOptions::NONE).unwrap().code_buffer
    }

    /// Program instructions decoded at `ip`.
    fn program(code: &[u8], ip: u64) -> Vec<Instruction> {
        Decoder::with_ip(64, code, ip, DecoderOptions::NONE).into_iter().collect()
    }

    /// The addresses every kind is encoded at: all 16 offsets modulo the measuring path's
    /// alignment, and places right before and after the targets the pieces branch to (the
    /// program at 0x401000.., the stubs at 0x600000..), where a branch out of the piece
    /// takes its short form and the layout of the piece changes with it.
    fn addresses() -> Vec<u64> {
        let mut v: Vec<u64> = (0x70_0000..0x70_0010).collect();
        for t in [0x40_1000u64, 0x40_1008, 0x40_2000, 0x60_0000, 0x61_0000, 0x62_0000] {
            for d in [0x90u64, 0x70, 0x40, 0x20, 0x8, 0x1] {
                v.push(t + d);
                v.push(t.saturating_sub(d));
            }
        }
        v
    }

    /// The fast encoder against BlockEncoder on blocks of its own: short and near forms of
    /// branches inside the block (a jump over 127 and over 128 bytes), branches out of it that
    /// are short at one address and near at the next, RIP-relative operands, calls.
    #[test]
    fn the_block_encoder_gives_blockencoders_bytes() {
        for n in [120usize, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130] {
            for at in [0x70_0000u64, 0x40_1000 - 200, 0x40_1000 - 130, 0x40_1000 - 2, 0x40_1000 + 60] {
                let mut b = Block::new();
                let (over, back) = (b.label(), b.label());
                b.bind(back);
                b.op(Instruction::with2(Code::Test_rm8_imm8, rip(0x40_2000), 1)).unwrap();
                b.add(Instruction::with_branch(Code::Jne_rel32_64, over).unwrap());
                b.add(Instruction::with_branch(Code::Je_rel32_64, 0x40_1000).unwrap());
                for _ in 0..n {
                    b.op(Ok(Instruction::with(Code::Int3))).unwrap();
                }
                b.add(Instruction::with_branch(Code::Jmp_rel32_64, 0x40_1000).unwrap());
                b.bind(over);
                b.add(Instruction::with_branch(Code::Call_rel32_64, 0x40_1000).unwrap());
                b.add(Instruction::with_branch(Code::Jmp_rel32_64, back).unwrap());
                let ins = b.ins.clone();
                assert_eq!(encode::encode(&ins, at), Some(iced(&ins, at)), "{n} int3 at 0x{at:x}");
            }
        }
        // What the fast encoder leaves to BlockEncoder: `loop`, and a branch out of reach.
        let lp = program(&[0xe2, 0xfe], 0x40_1000);
        let mut b = Block::new();
        b.add(lp[0]);
        assert_eq!(encode::encode(&b.ins, 0x70_0000), None);
        let mut b = Block::new();
        b.add(Instruction::with_branch(Code::Jmp_rel32_64, 0x40_1000).unwrap());
        assert_eq!(encode::encode(&b.ins, 0x1_0000_0000), None);
    }

    /// Every kind of per-point piece, with displaced instructions of every form a window
    /// holds (a rel8 `jcc` that becomes rel32, a RIP-relative load, a call emulated, an exit
    /// in the window), encoded at every address of [`addresses`]: [`Block::encode`] runs both
    /// encoders under `cfg(test)` and panics if they differ, and the bytes are checked here
    /// once more against `BlockEncoder` on the piece's instruction list.
    #[test]
    fn every_piece_kind_encodes_as_blockencoder_does_at_every_address() {
        let env = test_env();
        // endbr64; push rbp; mov rbp,rsp; je +0x10 (rel8, to the program); mov rax,[rip+0x1000]
        let window =
            [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x74, 0x10, 0x48, 0x8b, 0x05, 0x00, 0x10, 0x00, 0x00];
        let displaced = program(&window, 0x40_1000);
        let point = |displaced: Vec<Instruction>, emulate_call: bool, bits: u8| Point {
            id: 7,
            function: 0,
            address: 0x40_1000,
            window_len: 17,
            displaced,
            emulate_call,
            tactic: Tactic::Window,
            bits,
            wrap: None,
            import: None,
        };
        // push rbx; call 0x402000 (emulated)
        let calls = program(&[0x53, 0xe8, 0xfa, 0x0f, 0x00, 0x00], 0x40_1000);
        // lea rax,[rdi+1]; ret (an exit in the entry window)
        let ee = program(&[0x48, 0x8d, 0x47, 0x01, 0xc3], 0x40_1000);
        let exit = |displaced: Vec<Instruction>, kind| Exit {
            point: 7,
            function: 0,
            site: displaced.last().unwrap().ip(),
            kind,
            address: displaced[0].ip(),
            window_len: 5,
            displaced,
            tactic: Tactic::Window,
            slot: None,
            retargets: Vec::new(),
            redirects: Vec::new(),
        };
        // pop rbx; pop rbp; ret / add rsp,8; jmp 0x402000 (a tail jump)
        let ret = exit(program(&[0x5b, 0x5d, 0xc3], 0x40_1008), crate::plan::ExitKind::Ret);
        let tail = exit(
            program(&[0x48, 0x83, 0xc4, 0x08, 0xe9, 0xf3, 0x0f, 0x00, 0x00], 0x40_1008),
            crate::plan::ExitKind::TailJump,
        );
        let (got_call, got_point) = got_call_site(CALLS_BIT | TIMER_BITS);
        let plt_call = decoded(&call_rel32(0x40_1000, 0x40_2000), 0x40_1000).unwrap();
        let slot = crate::plan::SlotWindow { displaced: displaced.clone() };
        let mut n = 0;
        let left = encode::LEFT_TO_ICED.with(|c| c.get());
        for at in addresses() {
            for bits in [CALLS_BIT, CALLS_BIT | TIMER_BITS] {
                let mut pieces = vec![
                    trampoline(&point(displaced.clone(), false, bits), env, at, None).unwrap(),
                    trampoline(&point(calls.clone(), true, bits), env, at, None).unwrap(),
                    trampoline(&point(ee.clone(), false, bits), env, at, Some(0x40_1004)).unwrap(),
                    import_trampoline(&plt_call, &point(Vec::new(), false, bits), env, at).unwrap(),
                ];
                pieces.push(wrap_real(&point(displaced.clone(), false, bits), at).unwrap());
                pieces.push(exit_trampoline(&ret, env, at).unwrap());
                pieces.push(tail_call_trampoline(&tail, env, at).unwrap());
                pieces.push(import_trampoline(&got_call, &got_point, env, at).unwrap());
                pieces.push(slot_window(&slot, at).unwrap());
                pieces.push(jump_window(&displaced[..4], 0x70_1000, at).unwrap());
                let fast = ThunkFast { tid_offset: 0x2d0, counter: 0x98, lock_entry: 0x62_0000 };
                pieces.push(
                    wrap_thunk(at, 0x50_0000, bits, 0x60_0000, 0x61_0000, Real::Got(0x40_4018), Some(fast)).unwrap(),
                );
                pieces.push(syscall_thunk(at, 0x60_0000, 0x61_0000, Real::Code(0x40_1000)).unwrap());
                pieces.push(start_main_thunk(at, 0x60_0000, 0x61_0000).unwrap());
                pieces.push(slow_stub(at, 0x60_0000, 0x61_0000).unwrap());
                pieces.push(entry_stub(at, 0x60_0000, 0x61_0000, 0x40_1000).unwrap());
                n += pieces.len();
            }
        }
        assert_eq!(n, addresses().len() * 2 * 15);
        assert_eq!(encode::LEFT_TO_ICED.with(|c| c.get()), left, "every block took the fast path");
        // And the same pieces rebuilt as instruction lists, compared directly.
        for at in addresses() {
            let mut b = Block::new();
            displaced_code(&mut b, &displaced, false).unwrap();
            let ins = b.ins.clone();
            assert_eq!(encode::encode(&ins, at), Some(iced(&ins, at)), "at 0x{at:x}");
        }
    }

    /// The rel8 `jcc` of a window becomes a rel32 one in the piece, and short again where the
    /// piece lies within reach of its target (the fast encoder follows BlockEncoder both ways).
    #[test]
    fn a_displaced_short_branch_changes_form_with_the_distance() {
        let displaced = program(&[0x74, 0x10], 0x40_1000); // je 0x401012
        let mut b = Block::new();
        displaced_code(&mut b, &displaced, false).unwrap();
        let far = b.ins.clone();
        let code = encode::encode(&far, 0x70_0000).unwrap();
        assert_eq!(&code[..2], &[0x0f, 0x84], "rel32 far away: {code:02x?}");
        let near = encode::encode(&far, 0x40_1020).unwrap();
        assert_eq!(near[0], 0x74, "rel8 within reach: {near:02x?}");
        assert_eq!(near, iced(&far, 0x40_1020));
    }
}
