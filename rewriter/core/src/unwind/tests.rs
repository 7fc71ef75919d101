//! Tests of the unwind pass: CFI computed for generated code read back with gimli, the
//! input's and rt-lib's entries converted for their new place, and the `.eh_frame_hdr` table.

use super::*;
use crate::codegen::{self, TimerEnv, TrampolineEnv};
use gimli::{CieOrFde, EhFrame};
use iced_x86::{BlockEncoder, BlockEncoderOptions, InstructionBlock, MemoryOperand};
use std::path::Path;

/// Encode `ins` at `at`; a branch target `t` of the form `at + k` must be the IP given to
/// the instruction there (instructions get IPs `at`, `at + 1`, … before encoding).
fn asm(at: u64, ins: &[Instruction]) -> Vec<u8> {
    let ins: Vec<Instruction> = ins
        .iter()
        .enumerate()
        .map(|(k, i)| {
            let mut i = *i;
            i.set_ip(at + k as u64);
            i
        })
        .collect();
    BlockEncoder::encode(64, InstructionBlock::new(&ins, at), BlockEncoderOptions::NONE).unwrap().code_buffer
}

fn i1(c: Code, r: Register) -> Instruction {
    Instruction::with1(c, r).unwrap()
}
fn i2(c: Code, a: Register, b: Register) -> Instruction {
    Instruction::with2(c, a, b).unwrap()
}
fn i2i(c: Code, a: Register, imm: i32) -> Instruction {
    Instruction::with2(c, a, imm).unwrap()
}
fn br(c: Code, target: u64) -> Instruction {
    Instruction::with_branch(c, target).unwrap()
}
fn ret() -> Instruction {
    Instruction::with(Code::Retnq)
}

/// The states before each instruction, strictly (disagreements are errors).
fn states(at: u64, code: &[u8], initial: State) -> Result<Vec<(Instruction, Option<State>)>> {
    let ins: Vec<Instruction> = Decoder::with_ip(64, code, at, DecoderOptions::NONE).into_iter().collect();
    let s = trace(at, &ins, initial, true, &mut InstructionInfoFactory::new())?;
    Ok(ins.into_iter().zip(s).collect())
}

fn state(cfa: Cfa, regs: &[(u16, i64)]) -> State {
    let mut s = State::call();
    for &(r, n) in regs {
        s.regs.insert(r, Rule::Offset(n));
    }
    (s.sp, s.fp) = match cfa {
        Cfa::Reg(RSP, k) => (Some(k), None),
        Cfa::Reg(RBP, k) => (None, Some(k)),
        _ => (None, None),
    };
    s.cfa = cfa;
    s
}

/// The CFI at every `ret` is the one at a function's entry.
fn assert_returns_clean(st: &[(Instruction, Option<State>)]) {
    for (i, s) in st {
        if i.flow_control() == FlowControl::Return {
            let s = s.as_ref().expect("ret is reached");
            assert_eq!(s.cfa, Cfa::Reg(RSP, 8), "CFA at ret 0x{:x}: {s:?}", i.ip());
            assert_eq!(s.regs.get(RA), Some(Rule::Offset(-8)), "return address at ret 0x{:x}", i.ip());
        }
    }
}

const AT: u64 = 0x7000_0000;

#[test]
fn stub_frame_moves_cfa_to_rbp_and_back() {
    use Register::*;
    let code = asm(
        AT,
        &[
            i1(Code::Push_r64, RCX),
            i1(Code::Push_r64, RBP),
            i2(Code::Mov_r64_rm64, RBP, RSP),
            i2i(Code::And_rm64_imm8, RSP, -16),
            i2i(Code::Sub_rm64_imm32, RSP, 512),
            br(Code::Call_rel32_64, AT + 0x1000),
            i2(Code::Mov_r64_rm64, RSP, RBP),
            i1(Code::Pop_r64, RBP),
            i1(Code::Pop_r64, RCX),
            ret(),
        ],
    );
    let st = states(AT, &code, State::call()).unwrap();
    let at = |k: usize| st[k].1.clone().unwrap();
    assert_eq!(at(1).cfa, Cfa::Reg(7, 16));
    assert_eq!(at(1).regs.get(2), Some(Rule::Offset(-16)), "rcx saved by the push");
    assert_eq!(at(3).cfa, Cfa::Reg(7, 24), "mov rbp, rsp keeps the CFA on rsp");
    assert_eq!(at(4).cfa, Cfa::Reg(6, 24), "and rsp, -16 moves the CFA to rbp");
    assert_eq!(at(5).cfa, Cfa::Reg(6, 24), "sub rsp after the alignment changes nothing");
    assert_eq!(at(6).cfa, Cfa::Reg(6, 24), "call keeps the state");
    assert_eq!(at(7).cfa, Cfa::Reg(7, 24), "mov rsp, rbp: back to rsp");
    assert_eq!(at(7).regs.get(6), Some(Rule::Offset(-24)));
    assert_eq!(at(8).regs.get(6), Option::None, "pop rbp restores rbp");
    assert_eq!(at(9).regs, State::call().regs, "every push popped");
    assert_returns_clean(&st);
}

#[test]
fn exit_window_from_the_programs_state() {
    use Register::*;
    // pop rbx; pop rbp; test; jne .on; ret; .on: push rax; call; pop rax; ret
    let on = AT + 5;
    let code = asm(
        AT,
        &[
            i1(Code::Pop_r64, RBX),
            i1(Code::Pop_r64, RBP),
            i2(Code::Test_rm32_r32, EAX, EAX),
            br(Code::Jne_rel32_64, on),
            ret(),
            i1(Code::Push_r64, RAX),
            br(Code::Call_rel32_64, AT + 0x1000),
            i1(Code::Pop_r64, RAX),
            ret(),
        ],
    );
    let initial = state(Cfa::Reg(7, 24), &[(3, -24), (6, -16)]);
    let st = states(AT, &code, initial).unwrap();
    assert_eq!(st[2].1.as_ref().unwrap().regs, State::call().regs, "both pops restore");
    assert_eq!(st[6].1.as_ref().unwrap().regs.get(0), Some(Rule::Offset(-16)), "rax saved");
    assert_returns_clean(&st);
}

#[test]
fn leave_and_pop_rbp_with_a_frame_pointer_cfa() {
    use Register::*;
    let initial = || state(Cfa::Reg(6, 16), &[(6, -16)]);
    let code = asm(AT, &[Instruction::with(Code::Leaveq), ret()]);
    let st = states(AT, &code, initial()).unwrap();
    assert_eq!(st[1].1.as_ref().unwrap().regs, State::call().regs);
    assert_returns_clean(&st);
    // -O0 without locals: rsp = rbp at the pop, as the compiler's own CFI assumes.
    let code = asm(AT, &[i1(Code::Push_r64, RAX), i1(Code::Pop_r64, RAX), i1(Code::Pop_r64, RBP), ret()]);
    let st = states(AT, &code, initial()).unwrap();
    assert_eq!(st[1].1.as_ref().unwrap().cfa, Cfa::Reg(6, 16), "a push does not move an rbp-based CFA");
    assert_returns_clean(&st);
    // Stack realignment (CFA = r10): pushes and a write of rsp leave it alone.
    let r10 = state(Cfa::Reg(10, 0), &[]);
    let lea = Instruction::with2(Code::Lea_r64_m, RSP, MemoryOperand::with_base_displ(R10, -8)).unwrap();
    let code = asm(AT, &[lea, i1(Code::Push_r64, RAX), i1(Code::Pop_r64, RAX), ret()]);
    for (i, s) in states(AT, &code, r10).unwrap() {
        assert_eq!(s.unwrap().cfa, Cfa::Reg(10, 0), "at 0x{:x}", i.ip());
    }
}

#[test]
fn two_states_at_one_instruction_are_an_error() {
    use Register::*;
    // test; je .l; push rax; .l: ret — .l is reached with and without the push
    let code =
        asm(AT, &[i2(Code::Test_rm32_r32, EAX, EAX), br(Code::Je_rel32_64, AT + 3), i1(Code::Push_r64, RAX), ret()]);
    let e = states(AT, &code, State::call()).unwrap_err();
    assert!(e.to_string().contains("reached in two states"), "{e}");
}

#[test]
fn lost_stack_pointer_stops_unwinding() {
    use Register::*;
    let code = asm(AT, &[i2(Code::Mov_r64_rm64, RSP, RAX), ret()]);
    let st = states(AT, &code, State::call()).unwrap();
    assert_eq!(st[1].1.as_ref().unwrap().cfa, Cfa::Unknown);
    let prog = cfi_program(AT, &code, State::call(), &mut InstructionInfoFactory::new()).unwrap();
    assert_eq!(prog.last().map(|x| &x.1), Some(&Cfi::Undefined(gimli::Register(RA))), "{prog:?}");
}

/// Our CIE and one FDE for `code` at `start`, written as the `.eh_frame` at `eh_at`, and that
/// FDE read back.
fn one_fde(eh_at: u64, start: u64, len: u32, program: Vec<(u32, Cfi)>) -> Vec<u8> {
    let mut table = FrameTable::default();
    let cie = table.add_cie(generated_cie());
    let mut fde = FrameDescriptionEntry::new(Address::Constant(start.wrapping_sub(eh_at)), len);
    for (offset, i) in program {
        fde.add_instruction(offset, i);
    }
    table.add_fde(cie, fde);
    write_eh_frame(&table, eh_at).unwrap()
}

/// Rules the data alignment factor cannot express are written as expressions, and every
/// rule reads back as what it says.
#[test]
fn rules_read_back_through_gimli() {
    assert_eq!(offset_rule(3, -24), Cfi::Offset(gimli::Register(3), -24));
    assert_eq!(val_offset_rule(3, 16), Cfi::ValOffset(gimli::Register(3), 16));
    let program = vec![
        (0, offset_rule(3, -12)),
        (0, val_offset_rule(12, 4)),
        (0, offset_rule(13, 8)),
        (5, Cfi::CfaOffset(624)),
        (105, Cfi::Restore(gimli::Register(3))),
        (1105, Cfi::Undefined(gimli::Register(RA))),
    ];
    let eh_at = AT + 0x10000;
    let eh = one_fde(eh_at, AT, 2000, program);
    let frame = EhFrameIn::new(eh_at, &eh, "test");
    let fdes: Vec<_> = frame.fdes().map(Result::unwrap).collect();
    assert_eq!((fdes.len(), fdes[0].initial_address(), fdes[0].len()), (1, AT, 2000));
    let mut ctx = UnwindContext::new();
    let row = fdes[0].unwind_info_for_address(&frame.section, &frame.bases, &mut ctx, AT).unwrap();
    let rule = |r: u16| row.register(gimli::Register(r));
    let bytes = |rule: RegisterRule<usize>| match rule {
        RegisterRule::Expression(e) | RegisterRule::ValExpression(e) => frame.expression(&e).unwrap().to_vec(),
        other => panic!("{other:?}"),
    };
    assert_eq!(bytes(rule(3)), [0x9c, 0x11, 0x74, 0x22], "CFA - 12");
    assert!(matches!(rule(12), RegisterRule::ValExpression(_)));
    assert_eq!(bytes(rule(12)), [0x9c, 0x11, 0x04, 0x22], "CFA + 4");
    assert_eq!(rule(13), RegisterRule::Offset(8));
    assert_eq!(rule(RA), RegisterRule::Offset(-8));
    let at = |a: u64, ctx: &mut UnwindContext<usize>| {
        let row = fdes[0].unwind_info_for_address(&frame.section, &frame.bases, ctx, a).unwrap();
        (row.cfa().clone(), row.register(gimli::Register(3)), row.register(gimli::Register(RA)))
    };
    let (cfa, _, _) = at(AT + 5, &mut ctx);
    assert_eq!(cfa, CfaRule::RegisterAndOffset { register: gimli::Register(RSP), offset: 624 });
    assert_eq!(at(AT + 105, &mut ctx).1, RegisterRule::Undefined, "restored to the CIE's (no) rule");
    assert_eq!(at(AT + 1105, &mut ctx).2, RegisterRule::Undefined);
}

// ---------------------------------------------------------------------------------------
// Real programs
// ---------------------------------------------------------------------------------------

fn system_binary(path: &str) -> Option<Vec<u8>> {
    match std::fs::read(Path::new(path)) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("{path}: {e}; skipped");
            None
        }
    }
}

/// The generated code of a whole program (stubs, timer routines, every trampoline) as it
/// would be placed from `at` on, with the initial states `emit` gives it, and where a piece
/// may jump back into the program in the program's own frame (the end of an entry window,
/// the target of a tail call; not a callee entered by an emulated call).
fn pieces_of(data: &[u8], at: u64) -> Vec<(Piece, Vec<u64>)> {
    let spec = crate::spec::Spec::default_spec();
    let p = crate::plan_program(data, &spec, true).unwrap();
    let (config, rt) = (at - 0x10_0000, at - 0x8_0000);
    let mut pieces = Vec::new();
    let mut next = at;
    let mut put_back = |initial: Initial, back: Vec<u64>, code: &dyn Fn(u64) -> crate::Result<Vec<u8>>| {
        let start = next;
        let code = code(start).unwrap_or_else(|e| panic!("piece {} at {initial:?}: {e}", pieces.len()));
        next = (start + code.len() as u64).next_multiple_of(16);
        pieces.push((Piece { start, code, initial }, back));
        start
    };
    let mut put = |initial: Initial, code: &dyn Fn(u64) -> crate::Result<Vec<u8>>| put_back(initial, vec![], code);
    put(Initial::Entry, &|a| codegen::entry_stub(a, config, rt, p.elf.entry));
    let slow_stub = put(Initial::Call, &|a| codegen::slow_stub(a, config, rt + 0x100));
    let timer_stub = put(Initial::Call, &|a| codegen::timer_stub(a, config, rt + 0x200));
    let tenv = TimerEnv {
        ctl: config - 0x10000,
        active: 0x1000,
        cpu: 0x2000,
        wall: 0x3000,
        cct_index: 0x4000,
        cct_nodes: 0x8000,
        timer_stub,
    };
    let timer_enter = put(Initial::Call, &|a| codegen::timer_routine(a, stint_layout::TimerOp::Enter, tenv));
    let timer_exit = put(Initial::Call, &|a| codegen::timer_routine(a, stint_layout::TimerOp::Exit, tenv));
    put(Initial::Call, &|a| codegen::trap_stub(a, config, rt + 0x300));
    let env =
        TrampolineEnv { gate: config - 0x10000, counter: 0x800, tid_offset: 0x2d0, slow_stub, timer_enter, timer_exit };
    for x in &p.plan.import_sites {
        let pt = &p.plan.points[x.point as usize];
        put_back(Initial::Called(x.address()), vec![], &|a| codegen::import_trampoline(&x.call, pt, env, a));
    }
    // Wrappers get thunks, not trampolines (place.rs).
    for pt in p.plan.points.iter().filter(|pt| pt.import.is_none() && pt.wrap.is_none()) {
        let back =
            if pt.emulate_call { vec![] } else { pt.displaced.last().map(|i| i.next_ip()).into_iter().collect() };
        put_back(Initial::At(pt.address), back, &|a| codegen::trampoline(pt, env, a, None));
    }
    for x in &p.plan.exits {
        let back = x.displaced.last().filter(|i| i.flow_control() == FlowControl::UnconditionalBranch);
        put_back(Initial::At(x.address), back.map(|i| i.near_branch_target()).into_iter().collect(), &|a| {
            codegen::exit_trampoline(x, env, a)
        });
    }
    pieces
}

/// Instructions with the state before each, for failure messages.
fn listing(st: &[(Instruction, Option<State>)]) -> String {
    use iced_x86::{Formatter, IntelFormatter};
    let mut f = IntelFormatter::new();
    let mut out = String::new();
    for (i, s) in st {
        let mut t = String::new();
        f.format(i, &mut t);
        out += &format!("  {:x}  {t:40} {:?}\n", i.ip(), s.as_ref().map(|s| (&s.cfa, &s.regs, s.sp, s.fp)));
    }
    out
}

/// Every piece of generated code of real programs: one state per instruction on all paths,
/// a computable CFA everywhere, the entry state at every `ret`, and at a jump back into the
/// program the program's own CFA there (when both are rsp-based).
#[test]
fn generated_code_of_real_programs_is_balanced() {
    for path in ["/usr/bin/ls", "/usr/bin/apt"] {
        let Some(data) = system_binary(path) else { continue };
        let elf = InputElf::parse(&data).unwrap();
        let (in_addr, in_data) =
            input_eh_frame(&elf, elf.segments.iter().find(|s| s.p_type == elf::PT_GNU_EH_FRAME).unwrap()).unwrap();
        let input = EhFrameIn::of_program(&elf, in_addr, in_data);
        let index = input.fdes().map(Result::unwrap).map(|f| (f.initial_address(), f.end_address(), f.offset()));
        let mut index: Vec<_> = index.collect();
        index.sort_unstable();
        let mut rows = InputRows::new(&input, &index);
        let pieces = pieces_of(&data, 0x4000_0000);
        let (mut jumps_checked, mut at_states, mut rets_checked) = (0, 0, 0);
        for (p, back) in &pieces {
            let initial = match p.initial {
                Initial::Call => State::call(),
                Initial::Entry => State::entry(),
                Initial::At(a) => {
                    at_states += 1;
                    rows.state_at(a).unwrap_or_else(State::call)
                }
                Initial::Called(a) => {
                    at_states += 1;
                    rows.state_at(a).unwrap_or_else(State::call).pushed(8)
                }
            };
            let st = states(p.start, &p.code, initial.clone()).unwrap_or_else(|e| panic!("{path}: {e}"));
            for (i, s) in &st {
                let Some(s) = s else { continue };
                assert_ne!(s.cfa, Cfa::Unknown, "{path}: piece 0x{:x}: CFA lost at 0x{:x}", p.start, i.ip());
                let target = i.near_branch_target();
                if i.flow_control() == FlowControl::UnconditionalBranch && back.contains(&target) {
                    let mut after = s.clone();
                    after.step(i, &mut InstructionInfoFactory::new());
                    if let (Some(want), Cfa::Reg(RSP, k)) = (rows.state_at(target), &after.cfa) {
                        if let Cfa::Reg(RSP, w) = want.cfa {
                            assert_eq!(*k, w, "{path}: CFA at the jump back to 0x{target:x}:\n{}", listing(&st));
                            jumps_checked += 1;
                        }
                    }
                }
            }
            match p.initial {
                Initial::Entry => {}
                // An import call site's trampoline returns to the program as its caller
                // would have been returned to by the callee: in the state it was entered in.
                Initial::Called(_) => {
                    for (i, s) in st.iter().filter(|(i, _)| i.flow_control() == FlowControl::Return) {
                        let s = s.as_ref().expect("ret is reached");
                        assert!(s.is_row(&initial.row()), "{path}: state at ret 0x{:x}:\n{}", i.ip(), listing(&st));
                        rets_checked += 1;
                    }
                }
                _ => assert_returns_clean(&st),
            }
        }
        eprintln!(
            "{path}: {} pieces, {at_states} in the program's state, {jumps_checked} jumps back checked, \
             {rets_checked} import trampolines' returns checked",
            pieces.len()
        );
        assert!(jumps_checked >= 5, "{path}: too few jumps back checked ({jumps_checked})");
        assert!(rets_checked >= 5, "{path}: too few import trampolines' returns checked ({rets_checked})");
    }
}

/// A parsed output: every entry of the new `.eh_frame` parses, and the header's table lists
/// every FDE once, sorted, each found again by address.
fn check_output(eh: &EhOut, what: &str) -> Vec<(u64, u64, Option<Pointer>)> {
    let mut frame = EhFrame::new(&eh.eh_frame[..], LittleEndian);
    frame.set_address_size(8);
    let bases = BaseAddresses::default().set_eh_frame(eh.eh_frame_at).set_eh_frame_hdr(eh.hdr_at);
    let mut fdes = Vec::new();
    let mut entries = frame.entries(&bases);
    while let Some(e) = entries.next().unwrap_or_else(|e| panic!("{what}: {e}")) {
        if let CieOrFde::Fde(p) = e {
            let off = p.offset();
            let f = p.parse(|s, b, o| s.cie_from_offset(b, o)).unwrap_or_else(|e| panic!("{what}: FDE 0x{off:x}: {e}"));
            let mut ctx = UnwindContext::new();
            let mut rows = f.rows(&frame, &bases, &mut ctx).unwrap();
            while rows.next_row().unwrap_or_else(|e| panic!("{what}: FDE 0x{off:x}: {e}")).is_some() {}
            if f.initial_address() != 0 {
                fdes.push((f.initial_address(), f.len(), f.lsda()));
            }
        }
    }
    let hdr = EhFrameHdr::new(&eh.eh_frame_hdr[..], LittleEndian).parse(&bases, 8).unwrap();
    assert_eq!(hdr.eh_frame_ptr(), Pointer::Direct(eh.eh_frame_at), "{what}: eh_frame_ptr");
    let table = hdr.table().expect("a search table");
    let mut iter = table.iter(&bases);
    let mut prev = 0;
    let mut n = 0;
    while let Some((pc, _)) = iter.next().unwrap() {
        let Pointer::Direct(pc) = pc else { panic!("{what}: indirect table entry") };
        assert!(pc >= prev, "{what}: table not sorted at 0x{pc:x}");
        prev = pc;
        n += 1;
    }
    assert_eq!(n, fdes.len(), "{what}: table entries vs FDEs");
    for &(a, len, _) in &fdes {
        let probe = a + len.saturating_sub(1) / 2;
        let f = table.fde_for_address(&frame, &bases, probe, |s, b, o| s.cie_from_offset(b, o));
        let f = f.unwrap_or_else(|e| panic!("{what}: no FDE found for 0x{probe:x}: {e}"));
        assert!(f.contains(probe), "{what}: 0x{probe:x} found in 0x{:x}+{}", f.initial_address(), f.len());
    }
    fdes
}

/// The FDEs of the input's own `.eh_frame`.
fn input_fdes(elf: &InputElf) -> Vec<(u64, u64, Option<Pointer>, Option<Pointer>)> {
    let sec = elf.section(".eh_frame").unwrap();
    let mut frame = EhFrame::new(elf.section_data(sec), LittleEndian);
    frame.set_address_size(8);
    let bases = BaseAddresses::default().set_eh_frame(sec.addr);
    let mut out = Vec::new();
    let mut entries = frame.entries(&bases);
    while let Some(e) = entries.next().unwrap() {
        if let CieOrFde::Fde(p) = e {
            let f = p.parse(|s, b, o| s.cie_from_offset(b, o)).unwrap();
            if f.initial_address() != 0 {
                out.push((f.initial_address(), f.len(), f.lsda(), f.cie().personality()));
            }
        }
    }
    out
}

/// Build for real programs (C and C++: LSDAs and personality pointers), parse the result
/// with gimli: the copy describes exactly the input's FDEs (same ranges, LSDAs and
/// personality routines from the new address), then rt-lib's, then one per piece, each with
/// the state its CFI was computed from at its first byte.
#[test]
fn round_trip_through_gimli() {
    for path in ["/usr/bin/ls", "/usr/bin/apt"] {
        let Some(data) = system_binary(path) else { continue };
        let elf = InputElf::parse(&data).unwrap();
        let end = elf.loads().map(|s| s.vaddr + s.memsz).max().unwrap();
        let at = (end + 0x10_0000).next_multiple_of(8);
        let pieces: Vec<Piece> = pieces_of(&data, at + 0x40_0000).into_iter().map(|p| p.0).collect();
        let (off, len) = (crate::rtimage::EH_FRAME_OFFSET as usize, crate::rtimage::EH_FRAME_LEN as usize);
        let rt = (at + 0x20_0000, &crate::rtimage::IMAGE[off..off + len]);
        let eh = build(&elf, &pieces, rt, at).unwrap().expect("has PT_GNU_EH_FRAME");
        assert_eq!(eh.hdr_at % 4, 0);
        let got = check_output(&eh, path);
        let want = input_fdes(&elf);
        assert!(
            got.len() > want.len() + pieces.len(),
            "{path}: {} FDEs for {} + {}",
            got.len(),
            want.len(),
            pieces.len()
        );
        for (g, w) in got.iter().zip(&want) {
            assert_eq!((g.0, g.1, g.2), (w.0, w.1, w.2), "{path}: moved FDE differs");
        }
        let with_lsda = want.iter().filter(|w| w.2.is_some()).count();
        eprintln!("{path}: {} FDEs copied ({with_lsda} with LSDA), {} FDEs in all", want.len(), got.len());
        // Personality routines, through the copy's CIEs.
        let mut frame = EhFrame::new(&eh.eh_frame[..], LittleEndian);
        frame.set_address_size(8);
        let bases = BaseAddresses::default().set_eh_frame(eh.eh_frame_at);
        let mut entries = frame.entries(&bases);
        let mut k = 0;
        while let Some(e) = entries.next().unwrap() {
            if let CieOrFde::Fde(p) = e {
                let f = p.parse(|s, b, o| s.cie_from_offset(b, o)).unwrap();
                if f.initial_address() != 0 && k < want.len() {
                    assert_eq!(f.cie().personality(), want[k].3, "{path}: personality of FDE {k}");
                    k += 1;
                }
            }
        }
        // rt-lib's FDEs lie in the image, the pieces' start at their first byte.
        let image_at = rt.0 - crate::rtimage::EH_FRAME_OFFSET;
        assert!(got.iter().any(|g| (image_at..rt.0).contains(&g.0)), "{path}: no rt-lib FDE");
        for p in pieces.iter().filter(|p| !p.code.is_empty()) {
            assert!(got.iter().any(|g| g.0 == p.start && g.1 == p.code.len() as u64), "{path}: piece 0x{:x}", p.start);
        }
    }
}

/// gimli evaluates the rows of a generated FDE to the states the tracker computed.
#[test]
fn generated_rows_evaluate_to_the_tracked_states() {
    use Register::*;
    let code = asm(
        AT,
        &[
            i1(Code::Push_r64, RBX),
            i1(Code::Push_r64, RBP),
            i2(Code::Mov_r64_rm64, RBP, RSP),
            i2i(Code::And_rm64_imm8, RSP, -16),
            br(Code::Call_rel32_64, AT + 0x1000),
            i2(Code::Mov_r64_rm64, RSP, RBP),
            i1(Code::Pop_r64, RBP),
            i1(Code::Pop_r64, RBX),
            ret(),
        ],
    );
    let prog = cfi_program(AT, &code, State::call(), &mut InstructionInfoFactory::new()).unwrap();
    let eh_at = AT + 0x10000;
    let eh = one_fde(eh_at, AT, code.len() as u32, prog);
    let frame = EhFrameIn::new(eh_at, &eh, "test");
    let fde = frame.fdes().next().unwrap().unwrap();
    let (frame, bases) = (&frame.section, &frame.bases);
    let st = states(AT, &code, State::call()).unwrap();
    let mut ctx = UnwindContext::new();
    for (i, s) in &st {
        let s = s.as_ref().unwrap();
        let row = fde.unwind_info_for_address(frame, bases, &mut ctx, i.ip()).unwrap();
        let cfa = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => Cfa::Reg(register.0, *offset),
            CfaRule::Expression(_) => panic!("expression"),
        };
        assert_eq!(cfa, s.cfa, "CFA at 0x{:x}", i.ip());
        let regs: Vec<(u16, Rule)> = row
            .registers()
            .filter_map(|(r, rule)| match rule {
                RegisterRule::Offset(n) => Some((r.0, Rule::Offset(*n))),
                _ => Option::None,
            })
            .collect();
        let regs = Regs::of(&regs);
        assert_eq!(regs, s.regs, "registers at 0x{:x}", i.ip());
    }
}

// ---------------------------------------------------------------------------------------
// Converting entries: null pointers, DW_CFA_set_loc, absolute pointers
// ---------------------------------------------------------------------------------------

/// A hand-assembled `.eh_frame` at `base` (as a toolchain could emit it): a "zPLR" CIE with
/// a null personality pointer, then one FDE per `(code address, LSDA address or 0)`, each
/// with `DW_CFA_set_loc code+0x10; DW_CFA_def_cfa_offset 16`. `enc` encodes every pointer.
fn eh_fixture(base: u64, enc: u8, fdes: &[(u64, u64)]) -> Vec<u8> {
    let mut eh = Vec::new();
    let ptr = |eh: &mut Vec<u8>, target: u64| {
        let v = if target == 0 {
            0
        } else if enc & 0x70 == 0x10 {
            target.wrapping_sub(base + eh.len() as u64)
        } else {
            target
        };
        eh.extend_from_slice(&(v as u32).to_le_bytes());
    };
    let finish = |eh: &mut Vec<u8>, start: usize| {
        while !(eh.len() - start).is_multiple_of(4) {
            eh.push(0); // DW_CFA_nop
        }
        let len = (eh.len() - start - 4) as u32;
        eh[start..start + 4].copy_from_slice(&len.to_le_bytes());
    };
    eh.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 1]); // length, CIE id, version
    eh.extend_from_slice(b"zPLR\0");
    eh.extend_from_slice(&[1, 0x78, 16, 7, enc]); // alignment -8, return column, aug length
    ptr(&mut eh, 0); // personality: none
    eh.extend_from_slice(&[enc, enc, 0x0c, 7, 8, 0x90, 1]); // L, R; def_cfa rsp+8; ra at cfa-8
    finish(&mut eh, 0);
    for &(code, lsda) in fdes {
        let start = eh.len();
        eh.extend_from_slice(&[0; 4]);
        eh.extend_from_slice(&((eh.len()) as u32).to_le_bytes()); // CIE pointer
        ptr(&mut eh, code);
        eh.extend_from_slice(&[0x20, 0, 0, 0, 4]); // range, aug length
        ptr(&mut eh, lsda);
        eh.push(0x01); // DW_CFA_set_loc
        ptr(&mut eh, code + 0x10);
        eh.extend_from_slice(&[0x0e, 16]); // DW_CFA_def_cfa_offset 16
        finish(&mut eh, start);
    }
    eh.extend_from_slice(&[0; 4]);
    eh
}

/// The entries of `data` (at `base`) converted into a new `.eh_frame` at `at` and read back.
fn convert_fixture(base: u64, data: &[u8], at: u64, pie: bool) -> Result<Vec<u8>> {
    let old = EhFrameIn::new(base, data, "fixture");
    let mut table = FrameTable::default();
    Converter::new(&old, at, pie).convert(old.fdes(), &mut table)?;
    write_eh_frame(&table, at)
}

/// Null personality and LSDA pointers stay "none", a non-null LSDA and the code range move to
/// the new place, `DW_CFA_set_loc` becomes an advance.
#[test]
fn null_pointers_and_set_loc_survive_the_conversion() {
    let (base, at) = (0x5000, 0x9_0000);
    let data = eh_fixture(base, 0x1b, &[(0x1000, 0), (0x2000, 0x3000)]);
    let eh = convert_fixture(base, &data, at, true).unwrap();
    let new = EhFrameIn::new(at, &eh, "converted");
    let fdes: Vec<_> = new.fdes().map(Result::unwrap).collect();
    let got: Vec<_> = fdes.iter().map(|f| (f.initial_address(), f.len(), f.lsda(), f.cie().personality())).collect();
    assert_eq!(got, [(0x1000, 0x20, None, None), (0x2000, 0x20, Some(Pointer::Direct(0x3000)), None)]);
    let mut ctx = UnwindContext::new();
    for f in &fdes {
        for (pc, cfa) in [(0, 8), (0xf, 8), (0x10, 16), (0x1f, 16)] {
            let a = f.initial_address() + pc;
            let row = f.unwind_info_for_address(&new.section, &new.bases, &mut ctx, a).unwrap();
            assert_eq!(
                *row.cfa(),
                CfaRule::RegisterAndOffset { register: gimli::Register(RSP), offset: cfa },
                "0x{a:x}"
            );
        }
    }
}

/// Absolute pointers keep their value in a non-PIE and are refused in a PIE.
#[test]
fn absolute_pointers_only_outside_pies() {
    let (base, at) = (0x5000, 0x9_0000);
    let data = eh_fixture(base, 0x03, &[(0x1000, 0x3000)]);
    let eh = convert_fixture(base, &data, at, false).unwrap();
    let new = EhFrameIn::new(at, &eh, "converted");
    let f = &new.fdes().next().unwrap().unwrap();
    assert_eq!((f.initial_address(), f.lsda()), (0x1000, Some(Pointer::Direct(0x3000))));
    let e = convert_fixture(base, &data, at, true).unwrap_err();
    assert!(e.to_string().contains("absolute pointer (encoding 0x03) in a position-independent program"), "{e}");
}
