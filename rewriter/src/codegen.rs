//! Code generation: the entry stub, the slow-path stub and one trampoline per point.
//!
//! Everything is built as iced-x86 `Instruction`s and encoded by BlockEncoder at its final
//! address, so RIP-relative operands (gates, config) and branches back into the program are
//! exact, and displaced instructions are relocated by the same encoder. Labels inside a
//! block are instruction IPs from a private range in the kernel half of the address space,
//! which no program instruction can have.
//!
//! # Entry-point trampoline (calls metric)
//! ```text
//!        cmp   byte [rip+gate], 0         ; one load, one branch (D10)
//!        jne   .on                        ; off: fall straight through, no taken branch
//! .displaced
//!        <window instructions, relocated>
//!        jmp   <end of window>            ; (none if they end in ret/jmp)
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

use crate::error::{Error, Result};
use crate::plan::Point;
use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, FlowControl, Instruction, InstructionBlock, MemoryOperand, Register,
};
use stint_layout::{COL_OWNER_KEY_OFFSET, COL_OWNER_TP_OFFSET};

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
        Block { ins: Vec::new(), next_label: LABEL_BASE, pending: None }
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

    fn encode(self, rip: u64) -> Result<Vec<u8>> {
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

/// Addresses a trampoline needs.
#[derive(Clone, Copy, Debug)]
pub struct TrampolineEnv {
    /// Gate byte of (`calls`, this point).
    pub gate: u64,
    /// Offset of this point's call counter in a column (`gs:`-relative).
    pub counter: u32,
    /// fs-relative offset of libc's tid word, 0 to leave it out of the key.
    pub tid_offset: u32,
    pub slow_stub: u64,
}

/// Encode the trampoline of `point` at address `at`.
pub fn trampoline(point: &Point, env: TrampolineEnv, at: u64) -> Result<Vec<u8>> {
    let mut b = Block::new();
    let (on, count, displaced, slow) = (b.label(), b.label(), b.label(), b.label());
    b.op(Instruction::with2(Code::Cmp_rm8_imm8, rip(env.gate), 0))?; // gate on?
    b.add(Instruction::with_branch(Code::Jne_rel32_64, on).map_err(internal)?); // off: fall through
    b.bind(displaced);
    displaced_code(&mut b, point)?; // the program's own instructions, then back
    b.bind(on);
    b.op(Instruction::with1(Code::Push_r64, Register::RAX))?; // scratch
    b.op(Instruction::with2(Code::Mov_r64_rm64, Register::RAX, seg_abs(Register::FS, 0)))?; // thread pointer
    b.op(Instruction::with2(Code::Cmp_r64_rm64, Register::RAX, seg_abs(Register::GS, COL_OWNER_TP_OFFSET)))?; // our column?
    b.add(Instruction::with_branch(Code::Jne_rel32_64, slow).map_err(internal)?);
    if env.tid_offset != 0 {
        b.op(Instruction::with2(Code::Mov_r32_rm32, Register::EAX, seg_abs(Register::FS, env.tid_offset)))?; // libc tid
        b.op(Instruction::with2(Code::Cmp_r32_rm32, Register::EAX, seg_abs(Register::GS, COL_OWNER_KEY_OFFSET)))?;
        b.add(Instruction::with_branch(Code::Jne_rel32_64, slow).map_err(internal)?);
    }
    b.bind(count);
    b.op(Instruction::with1(Code::Inc_rm64, seg_abs(Register::GS, env.counter)))?; // calls += 1
    b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
    displaced_code(&mut b, point)?; // a second copy: no taken branch back to the first
    b.bind(slow);
    b.op(Instruction::with2(Code::Mov_r32_imm32, Register::EAX, point.id))?; // which point
    b.add(Instruction::with_branch(Code::Call_rel32_64, env.slow_stub).map_err(internal)?);
    b.op(Instruction::with2(Code::Test_rm32_r32, Register::EAX, Register::EAX))?; // count it?
    b.add(Instruction::with_branch(Code::Jne_rel32_64, count).map_err(internal)?);
    b.op(Instruction::with1(Code::Pop_r64, Register::RAX))?;
    b.add(Instruction::with_branch(Code::Jmp_rel32_64, displaced).map_err(internal)?);
    b.encode(at)
}

fn internal(e: iced_x86::IcedError) -> Error {
    Error::Internal(format!("instruction: {e}"))
}

/// The window's instructions, then the jump back (unless they end control flow).
fn displaced_code(b: &mut Block, point: &Point) -> Result<()> {
    let n = point.displaced.len();
    for (k, ins) in point.displaced.iter().enumerate() {
        let last = k + 1 == n;
        if last && point.emulate_call {
            emulate_call(b, ins)?;
            return Ok(());
        }
        b.add(*ins);
    }
    let ends = point.displaced.last().is_some_and(|i| {
        matches!(i.flow_control(), FlowControl::Return | FlowControl::UnconditionalBranch | FlowControl::IndirectBranch)
    });
    if !ends {
        let back = point.address + point.window_len;
        b.add(Instruction::with_branch(Code::Jmp_rel32_64, back).map_err(internal)?);
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
    match call.code() {
        Code::Call_rel32_64 | Code::Call_rel16 => {
            b.add(Instruction::with_branch(Code::Jmp_rel32_64, call.near_branch_target()).map_err(internal)?)
        }
        Code::Call_rm64 => {
            let mut j = *call;
            j.set_code(Code::Jmp_rm64);
            b.add(j);
        }
        c => return Err(Error::Internal(format!("cannot emulate call {c:?} at 0x{:x}", call.ip()))),
    }
    Ok(())
}

/// The common slow path of all trampolines: save what the psABI lets a callee clobber,
/// including x87/SSE state, align the stack and call `stint_rt_slow(config, point)`.
/// In: eax = point id (the trampoline saved rax). Out: eax = 1 to count, 0 to skip.
pub fn slow_stub(at: u64, config: u64, rt_slow: u64) -> Result<Vec<u8>> {
    let mut b = Block::new();
    // rax was saved by the trampoline and carries the point id.
    let saved = &crate::abi::CALLER_SAVED[1..];
    for &r in saved {
        b.op(Instruction::with1(Code::Push_r64, r))?;
    }
    b.op(Instruction::with1(Code::Push_r64, Register::RBP))?;
    b.op(Instruction::with2(Code::Mov_r64_rm64, Register::RBP, Register::RSP))?; // frame
    b.op(Instruction::with2(Code::And_rm64_imm8, Register::RSP, -16i32))?; // psABI alignment
    b.op(Instruction::with2(Code::Sub_rm64_imm32, Register::RSP, 512))?; // fxsave area
    b.op(Instruction::with1(Code::Fxsave64_m512byte, mem(Register::RSP, 0)))?; // x87 + SSE state
    b.op(Instruction::with2(Code::Lea_r64_m, Register::RDI, rip(config)))?; // arg 1: config
    b.op(Instruction::with2(Code::Mov_r32_rm32, Register::ESI, Register::EAX))?; // arg 2: point
    b.add(Instruction::with_branch(Code::Call_rel32_64, rt_slow).map_err(internal)?);
    b.op(Instruction::with1(Code::Fxrstor64_m512byte, mem(Register::RSP, 0)))?;
    b.op(Instruction::with2(Code::Mov_r64_rm64, Register::RSP, Register::RBP))?;
    b.op(Instruction::with1(Code::Pop_r64, Register::RBP))?;
    for r in saved.iter().rev() {
        b.op(Instruction::with1(Code::Pop_r64, *r))?;
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Tactic;
    use iced_x86::{Decoder, DecoderOptions, Formatter, IntelFormatter};

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

    #[test]
    fn trampoline_reads_fs_and_gs_absolute_and_jumps_back() {
        // push rbp; mov rbp, rsp; sub rsp, 0x10  at 0x401000
        let code = [0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10];
        let displaced: Vec<_> = Decoder::with_ip(64, &code, 0x401000, DecoderOptions::NONE).into_iter().collect();
        let p = Point {
            id: 3,
            function: 0,
            address: 0x401000,
            window_len: 8,
            displaced,
            emulate_call: false,
            tactic: Tactic::Window,
            bits: 1,
        };
        let env = TrampolineEnv { gate: 0x500000, counter: 152, tid_offset: 0x2d0, slow_stub: 0x600000 };
        let out = trampoline(&p, env, 0x700000).unwrap();
        let text = disasm(&out, 0x700000).join("\n");
        assert!(text.contains("cmp byte ptr [500000h],0"), "{text}");
        assert!(text.contains("mov rax,fs:[0]"), "{text}");
        assert!(text.contains("cmp rax,gs:[8]"), "{text}");
        assert!(text.contains("mov eax,fs:[2D0h]"), "{text}");
        assert!(text.contains("inc qword ptr gs:[98h]"), "{text}");
        assert!(text.contains("jmp 0000000000401008h"), "{text}");
        assert!(text.contains("call 0000000000600000h"), "{text}");
    }

    #[test]
    fn emulated_call_pushes_original_return_address() {
        // push rbx; call 0x402000  at 0x401000 (call ends at 0x401006)
        let code = [0x53, 0xe8, 0xfa, 0x0f, 0x00, 0x00];
        let displaced: Vec<_> = Decoder::with_ip(64, &code, 0x401000, DecoderOptions::NONE).into_iter().collect();
        let p = Point {
            id: 0,
            function: 0,
            address: 0x401000,
            window_len: 6,
            displaced,
            emulate_call: true,
            tactic: Tactic::Window,
            bits: 1,
        };
        let env = TrampolineEnv { gate: 0x500000, counter: 128, tid_offset: 0, slow_stub: 0x600000 };
        let text = disasm(&trampoline(&p, env, 0x700000).unwrap(), 0x700000).join("\n");
        assert!(text.contains("lea rax,[401006h]"), "{text}");
        assert!(text.contains("jmp 0000000000402000h"), "{text}");
        assert!(!text.contains("call 0000000000402000h"), "{text}");
    }
}
