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
    write_eh_frame(&table, eh_at, 0).unwrap()
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
        pieces.push((Piece { start, code, initial, shape: None }, back));
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
        sq_cpu: 0x3400,
        sq_wall: 0x3800,
        sampled: 0x3c00,
        sampling: true,
        cct_index: 0x4000,
        cct_nodes: 0x8000,
        timer_stub,
    };
    let timer_enter = put(Initial::Call, &|a| codegen::timer_routine(a, stint_layout::TimerOp::Enter, tenv));
    let timer_exit = put(Initial::Call, &|a| codegen::timer_routine(a, stint_layout::TimerOp::Exit, tenv));
    put(Initial::Call, &|a| codegen::trap_stub(a, config, rt + 0x300));
    let env = TrampolineEnv {
        gate: config - 0x10000,
        cookie: config - 0x11000,
        counter: 0x800,
        tid_offset: 0x2d0,
        slow_stub,
        timer_enter,
        timer_exit,
    };
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
        let eh = build(&elf, &pieces, rt, at, &HashMap::new()).unwrap().expect("has PT_GNU_EH_FRAME");
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

/// The `.eh_frame_hdr` built from the initial locations unwind added ([`hdr_index`]) is the
/// one built from the written `.eh_frame` parsed back with gimli (every FDE's initial
/// location and offset), on real programs (C and C++).
#[test]
fn the_header_from_the_added_fdes_is_the_one_parsed_back() {
    let mut checked = 0;
    for path in ["/usr/bin/ls", "/usr/bin/apt"] {
        let Some(data) = system_binary(path) else { continue };
        let elf = InputElf::parse(&data).unwrap();
        let end = elf.loads().map(|s| s.vaddr + s.memsz).max().unwrap();
        let at = (end + 0x10_0000).next_multiple_of(8);
        let pieces: Vec<Piece> = pieces_of(&data, at + 0x40_0000).into_iter().map(|p| p.0).collect();
        let (off, len) = (crate::rtimage::EH_FRAME_OFFSET as usize, crate::rtimage::EH_FRAME_LEN as usize);
        let rt = (at + 0x20_0000, &crate::rtimage::IMAGE[off..off + len]);
        let eh = build(&elf, &pieces, rt, at, &HashMap::new()).unwrap().expect("has PT_GNU_EH_FRAME");
        let written = EhFrameIn::new(at, &eh.eh_frame, "new .eh_frame");
        let parsed: Vec<(u64, u64)> = written
            .fdes()
            .map(|f| f.map(|f| (f.initial_address(), at + f.offset() as u64)))
            .collect::<Result<_>>()
            .unwrap();
        assert!(parsed.len() > pieces.len(), "{path}: {} FDEs", parsed.len());
        assert_eq!(build_hdr(at, eh.hdr_at, parsed).unwrap(), eh.eh_frame_hdr, "{path}");
        checked += 1;
    }
    assert!(checked > 0 || std::env::var_os("CI").is_none(), "no program to check");
}

/// [`hdr_index`] refuses a section whose FDEs are not the ones added.
#[test]
fn the_header_index_counts_the_fdes() {
    let eh = one_fde(0x1000, 0x2000, 16, vec![]);
    assert_eq!(hdr_index(&eh, 0x1000, &[0x2000]).unwrap().len(), 1);
    assert!(hdr_index(&eh, 0x1000, &[]).is_err());
    assert!(hdr_index(&eh, 0x1000, &[0x2000, 0x3000]).is_err());
    assert!(hdr_index(&eh[..eh.len() - 8], 0x1000, &[0x2000]).is_err());
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
    let mut table = Frames::default();
    Converter::new(&old, at, pie).convert(old.fdes(), &mut table)?;
    write_eh_frame(&table.table, at, 0)
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

/// The exception tables of import trampolines: `noexcept` callers share one empty call-site
/// table; a cleanup's table leads the whole trampoline to the caller's pad through its own
/// pc-relative `LPStart`; other pieces get none, and without any the `.eh_frame` stays at `at`.
#[test]
fn import_trampolines_restate_the_callers_exception_table() {
    let piece = |start: u64, len: usize, initial: Initial| Piece { start, code: vec![0x90; len], initial, shape: None };
    let pieces = [
        piece(0x50_0000, 40, Initial::Called(0x1000)),
        piece(0x50_0040, 40, Initial::Called(0x1100)),
        piece(0x50_0080, 200, Initial::Called(0x1200)),
        piece(0x50_0180, 40, Initial::Called(0x1300)),
        piece(0x50_0200, 16, Initial::Call),
    ];
    let refs: Vec<&Piece> = pieces.iter().collect();
    let called = HashMap::from([
        (0x1000, SiteEh::Terminate),
        (0x1100, SiteEh::Terminate),
        (0x1200, SiteEh::Cleanup(0x1234)),
        (0x1300, SiteEh::Pass),
    ]);
    let at = 0x60_0004;
    let eh = CalledEh::lay_out(&refs, &called, at, &|_| None, true).unwrap();
    assert_eq!(eh.at.len(), 3, "{:?}", eh.at);
    let (t1, t2, c) = (eh.at[&0x50_0000], eh.at[&0x50_0040], eh.at[&0x50_0080]);
    assert_eq!(t1, t2, "one shared table for noexcept callers");
    let bytes = |a: u64| &eh.bytes[(a - at) as usize..];
    assert_eq!(&bytes(t1)[..4], &[0xff, 0xff, 0x01, 0x00], "LPStart and types omitted, no rows");
    let b = bytes(c);
    assert_eq!(b[0], 0x1b, "LPStart pcrel|sdata4");
    let lp_start = (c + 1).wrapping_add(i32::from_le_bytes(b[1..5].try_into().unwrap()) as i64 as u64);
    assert_eq!(&b[5..7], &[0xff, 0x01], "no type table, ULEB128 call sites");
    // One row: start 0, the piece's 200 bytes (ULEB128 c8 01), pad LPStart + 1, action 0.
    assert_eq!(&b[7..13], &[5, 0, 0xc8, 0x01, 1, 0]);
    assert_eq!(lp_start + 1, 0x1234, "the landing pad is the caller's");
    assert_eq!(eh.end % 8, 0);
    assert_eq!(eh.end, at + eh.bytes.len() as u64);
    let none = CalledEh::lay_out(&refs, &HashMap::new(), at, &|_| None, true).unwrap();
    assert!(none.bytes.is_empty() && none.at.is_empty());
    assert_eq!(none.end, at, "without tables the .eh_frame starts at `at`");
}

/// The CFI memo (one program per piece shape): entry trampolines of two points with other
/// gates, ids, counters and program addresses share one traced program, which is the one
/// traced for each; another stack adjustment in the window or another initial state is a
/// shape of its own, traced afresh.
#[test]
fn a_cfi_program_from_the_memo_is_the_traced_one() {
    let piece = |at: u64, prog: u64, id: u32, sub: u8| {
        // push rbp; mov rbp, rsp; sub rsp, <sub>; at `prog`
        let window = [0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, sub];
        let displaced: Vec<Instruction> =
            Decoder::with_ip(64, &window, prog, DecoderOptions::NONE).into_iter().collect();
        let p = crate::plan::Point {
            id,
            function: 0,
            address: prog,
            window_len: 8,
            displaced,
            emulate_call: false,
            tactic: crate::plan::Tactic::Window,
            bits: 0x7,
            wrap: None,
            import: None,
        };
        let env = TrampolineEnv {
            gate: 0x50_0000 + u64::from(id),
            cookie: 0x4f_f000,
            counter: 0x100 + 8 * id,
            tid_offset: 0x2d0,
            slow_stub: 0x60_0000,
            timer_enter: 0x61_0000,
            timer_exit: 0x62_0000,
        };
        codegen::trampoline(&p, env, at, None).unwrap()
    };
    let mut memo = CfiMemo::default();
    let info = &mut InstructionInfoFactory::new();
    let mut check = |at: u64, code: &[u8], initial: State, traced: usize| {
        let fresh = cfi_program(at, code, initial.clone(), info).unwrap();
        let got = memo.program(at, code, None, initial, info).unwrap().clone();
        assert_eq!(got, fresh, "at 0x{at:x}");
        assert_eq!(memo.kept, traced, "programs traced after the piece at 0x{at:x}");
        got
    };
    let (a, b) = (piece(0x70_0000, 0x40_1000, 3, 0x10), piece(0x70_1230, 0x40_5550, 9, 0x10));
    assert_ne!(a, b);
    let pa = check(0x70_0000, &a, State::call(), 1);
    let pb = check(0x70_1230, &b, State::call(), 1); // the same shape: from the memo
    assert_eq!(pa, pb);
    let c = piece(0x70_2000, 0x40_1000, 3, 0x20);
    let pc = check(0x70_2000, &c, State::call(), 2); // sub rsp, 0x20: another shape
    assert_ne!(pc, pa);
    check(0x70_0000, &a, State::call().pushed(8), 3); // another initial state: traced again
    assert_eq!(memo.programs.values().map(Vec::len).sum::<usize>(), 3);

    // By shape id (the layout pass's): a and b share one, traced once more (the id table is
    // apart from the shapes'); c has its own.
    let ids = ShapeIds::default();
    let id = |at: u64, code: &[u8]| {
        let (mut ins, mut shape) = (Vec::new(), Vec::new());
        decode_shape(at, code, &mut ins, &mut shape);
        ids.id(&shape).expect("an id")
    };
    let (ia, ib, ic) = (id(0x70_0000, &a), id(0x70_1230, &b), id(0x70_2000, &c));
    assert_eq!(ia, ib);
    assert_ne!(ia, ic);
    let info = &mut InstructionInfoFactory::new();
    for (at, code, i, want, traced) in
        [(0x70_0000, &a, ia, &pa, 4), (0x70_1230, &b, ib, &pb, 4), (0x70_2000, &c, ic, &pc, 5)]
    {
        let got = memo.program(at, code, Some(i), State::call(), info).unwrap().clone();
        assert_eq!(&got, want, "at 0x{at:x}");
        assert_eq!(memo.kept, traced, "programs traced after the piece at 0x{at:x}");
    }
}

// ---------------------------------------------------------------------------------------
// Restated rows with handlers that catch (CatchRow)
// ---------------------------------------------------------------------------------------

/// The caller's function, its LSDA and the `DW.ref` slots of its type table in the fixture.
const FUNC: u64 = 0x40_1000;
const LSDA: u64 = 0x40_2000;
const SLOT1: u64 = 0x40_5000;
const SLOT2: u64 = 0x40_5008;

/// A GCC-format LSDA at [`LSDA`] as g++ writes it for PIC code: LPStart omitted, type table
/// `indirect|pcrel|sdata4` with entries 1 → [`SLOT1`], 2 → [`SLOT2`], 3 → null (`catch (...)`),
/// one exception specification (type 1) at the base; rows (start, pad, first record):
/// 0x10 → A: catch 2 then 1; 0x20 → C: the specification; 0x30 → D: catch-all; 0x40 → E:
/// catch 2, then (a negative displacement) A's tail, catch 1. Returns the bytes and each
/// row's action (1 + the record's offset).
fn lsda_fixture(tt_enc: u8, entries: [u64; 3]) -> (Vec<u8>, [u64; 4]) {
    // Action records: A@0 [2, +1] B@2 [1, 0] C@4 [-1, 0] D@6 [3, 0] E@8 [2, -7 → B].
    let actions = [0x02, 0x01, 0x01, 0x00, 0x7f, 0x00, 0x03, 0x00, 0x02, 0x79];
    let rows = [(0x10u8, 0x40u8, 1u8), (0x20, 0x50, 5), (0x30, 0x60, 7), (0x40, 0x70, 9)];
    let mut cs = Vec::new();
    for (start, pad, action) in rows {
        cs.extend_from_slice(&[start, 5, pad, action]);
    }
    let size = fixed_size(tt_enc & 0x0f).unwrap();
    let head = 5; // lp enc, tt enc, tt offset (1 byte), cs enc, cs length (1 byte)
    let tt_base = head + cs.len() + actions.len() + 3 * size;
    let mut v = vec![0xff, tt_enc, (tt_base - 3) as u8, 0x01, cs.len() as u8];
    v.extend_from_slice(&cs);
    v.extend_from_slice(&actions);
    for i in (1..=3).rev() {
        let field = LSDA + v.len() as u64;
        let target = entries[i - 1];
        let raw = match (target, tt_enc & 0x70) {
            (0, _) => 0,
            (t, 0x10) => t.wrapping_sub(field),
            (t, _) => t,
        };
        v.extend_from_slice(&raw.to_le_bytes()[..size]);
    }
    v.extend_from_slice(&[0x01, 0x00]); // the specification: type 1
    (v, [1, 5, 7, 9])
}

/// One action record as a personality routine reads it: the filter and the types it names.
type Record = (i64, Vec<Option<u64>>);

/// What a personality routine reads of the table `data` at `base` for a throw at `pc` in a
/// region starting at `region`: the row's pad, then each record of its chain (filter, and
/// the address a type entry means before indirection, or the specification's types).
fn personality_view(data: &[u8], base: u64, region: u64, pc: u64) -> (u64, Vec<Record>) {
    let mut c = LsdaCursor { data, pos: 0, base };
    let lp_enc = c.u8().unwrap();
    let lp_start = match lp_enc {
        0xff => region,
        0x1b => {
            let f = c.at();
            f.wrapping_add(c.raw(lp_enc).unwrap())
        }
        e => panic!("LPStart encoding 0x{e:02x}"),
    };
    let tt_enc = c.u8().unwrap();
    let tt_base = (tt_enc != 0xff).then(|| {
        let o = c.leb(false).unwrap() as usize;
        c.pos + o
    });
    assert_eq!(c.u8().unwrap(), 0x01, "ULEB128 call sites");
    let cs_end = c.leb(false).unwrap() as usize + c.pos;
    let mut found = None;
    while c.pos < cs_end {
        let (start, len, pad, action) =
            (c.leb(false).unwrap(), c.leb(false).unwrap(), c.leb(false).unwrap(), c.leb(false).unwrap());
        if region + start <= pc && pc < region + start + len {
            found = Some((lp_start + pad, action));
        }
    }
    let (pad, action) = found.expect("a row covers pc");
    let mut chain = Vec::new();
    let mut pos = cs_end + action as usize - 1;
    let entry = |c: &mut LsdaCursor, i: u64| {
        let size = fixed_size(tt_enc & 0x0f).unwrap();
        c.pos = tt_base.unwrap() - i as usize * size;
        let field = c.at();
        let raw = c.raw(tt_enc).unwrap();
        (raw != 0).then(|| if tt_enc & 0x70 == 0x10 { field.wrapping_add(raw) } else { raw })
    };
    while action != 0 && chain.len() < MAX_ACTIONS {
        c.pos = pos;
        let filter = c.leb(true).unwrap() as i64;
        let next_at = c.pos;
        let next = c.leb(true).unwrap() as i64;
        let types = if filter > 0 {
            vec![entry(&mut c, filter as u64)]
        } else if filter < 0 {
            c.pos = tt_base.unwrap() + (-filter) as usize - 1;
            let mut list = Vec::new();
            loop {
                let i = c.leb(false).unwrap();
                if i == 0 {
                    break;
                }
                list.push(i);
            }
            list.into_iter().map(|i| entry(&mut c, i)).collect()
        } else {
            Vec::new()
        };
        chain.push((filter, types));
        if next == 0 {
            break;
        }
        pos = (next_at as i64 + next) as usize;
    }
    (pad, chain)
}

/// A row that catches a type (then another): the table's exact bytes (LPStart to the pad,
/// one row over the trampoline, the chain's two records, the two entries pc-relative from
/// their new place, still indirect), and a personality routine reads the caller's answer
/// from it: the same pad, filters and `DW.ref` slots.
#[test]
fn a_catch_row_is_restated_with_its_types() {
    let (data, actions) = lsda_fixture(0x9b, [SLOT1, SLOT2, 0]);
    let row = CatchRow::read(&data, LSDA, actions[0], true).unwrap();
    let t = 0x80_0010;
    let pad = FUNC + 0x40;
    let got = row.write(t, pad, 40).unwrap();
    let mut want = vec![0x1b];
    want.extend_from_slice(&((pad - 1).wrapping_sub(t + 1) as i32).to_le_bytes());
    // Types indirect|pcrel|sdata4, base 18 bytes on: call sites (ULEB128, 4 bytes: start 0,
    // length 40, pad LPStart + 1, action 1), records [2, +1] [1, 0], entries 2 and 1.
    want.extend_from_slice(&[0x9b, 18, 0x01, 4, 0, 40, 1, 1, 0x02, 0x01, 0x01, 0x00]);
    for (slot, field) in [(SLOT2, t + 17), (SLOT1, t + 21)] {
        want.extend_from_slice(&(slot.wrapping_sub(field) as i32).to_le_bytes());
    }
    assert_eq!(got, want);
    let caller = personality_view(&data, LSDA, FUNC, FUNC + 0x12);
    assert_eq!(caller, (pad, vec![(2, vec![Some(SLOT2)]), (1, vec![Some(SLOT1)])]));
    assert_eq!(personality_view(&got, t, 0x90_0000, 0x90_0000 + 39), caller);
    // E's chain joins A's tail through a negative displacement: the same answer.
    let e = CatchRow::read(&data, LSDA, actions[3], true).unwrap();
    assert_eq!(e, row);
}

/// `catch (...)`: the chain's entry is null, written as zeros whatever the caller's encoding
/// (here absolute, which a PIE could not restate otherwise).
#[test]
fn a_catch_all_row_needs_no_address() {
    let (data, actions) = lsda_fixture(0x03, [SLOT1, SLOT2, 0]);
    let row = CatchRow::read(&data, LSDA, actions[2], true).unwrap();
    let (t, pad) = (0x80_0000, FUNC + 0x60);
    let got = row.write(t, pad, 32).unwrap();
    let mut want = vec![0x1b];
    want.extend_from_slice(&((pad - 1).wrapping_sub(t + 1) as i32).to_le_bytes());
    // udata8, base 8 + 3 * 8 bytes on; record [3, 0]; entries 3, 2, 1 all zero.
    want.extend_from_slice(&[EH_PE_UDATA8, 32, 0x01, 4, 0, 32, 1, 1, 0x03, 0x00]);
    want.extend_from_slice(&[0; 24]);
    assert_eq!(got, want);
    assert_eq!(personality_view(&got, t, 0x90_0000, 0x90_0000), (pad, vec![(3, vec![None])]));
}

/// An exception specification (negative filter): its list is copied at the same offset from
/// the base, and the types it names are restated at their indices.
#[test]
fn an_exception_specification_is_restated() {
    let (data, actions) = lsda_fixture(0x9b, [SLOT1, SLOT2, 0]);
    let row = CatchRow::read(&data, LSDA, actions[1], true).unwrap();
    let (t, pad) = (0x80_0003, FUNC + 0x50);
    let got = row.write(t, pad, 32).unwrap();
    let mut want = vec![0x1b];
    want.extend_from_slice(&((pad - 1).wrapping_sub(t + 1) as i32).to_le_bytes());
    // base 8 + 4 bytes on; record [-1, 0]; entry 1; the list [1, 0].
    want.extend_from_slice(&[0x9b, 12, 0x01, 4, 0, 32, 1, 1, 0x7f, 0x00]);
    want.extend_from_slice(&(SLOT1.wrapping_sub(t + 15) as i32).to_le_bytes());
    want.extend_from_slice(&[0x01, 0x00]);
    assert_eq!(got, want);
    let caller = personality_view(&data, LSDA, FUNC, FUNC + 0x20);
    assert_eq!(caller, (pad, vec![(-1, vec![Some(SLOT1)])]));
    assert_eq!(personality_view(&got, t, 0x90_0000, 0x90_0000 + 4), caller);
}

/// Absolute entries keep their value outside PIEs (as udata8) and are refused in a PIE; a
/// data-relative or LEB128 type table is refused; the reasons name the encoding.
#[test]
fn type_tables_that_cannot_be_restated_are_refused() {
    let (data, actions) = lsda_fixture(0x03, [SLOT1, SLOT2, 0]);
    let row = CatchRow::read(&data, LSDA, actions[0], false).unwrap();
    let got = row.write(0x80_0000, FUNC + 0x40, 8).unwrap();
    let view = personality_view(&got, 0x80_0000, 0x90_0000, 0x90_0000);
    assert_eq!(view.1, vec![(2, vec![Some(SLOT2)]), (1, vec![Some(SLOT1)])]);
    let e = CatchRow::read(&data, LSDA, actions[0], true).unwrap_err();
    assert!(e.contains("0x03") && e.contains("absolute in a position-independent program"), "{e}");
    let (data, actions) = lsda_fixture(0x3b, [SLOT1, SLOT2, 0]);
    let e = CatchRow::read(&data, LSDA, actions[0], false).unwrap_err();
    assert!(e.contains("0x3b") && e.contains("application 0x30"), "{e}");
    let (mut data, actions) = lsda_fixture(0x9b, [SLOT1, SLOT2, 0]);
    data[1] = 0x91; // indirect|pcrel|uleb128
    let e = CatchRow::read(&data, LSDA, actions[0], true).unwrap_err();
    assert!(e.contains("0x91") && e.contains("variable-length"), "{e}");
    // A chain that loops.
    let (mut data, actions) = lsda_fixture(0x9b, [SLOT1, SLOT2, 0]);
    let b_next = 5 + 16 + 3;
    data[b_next] = 0x7d; // B's next: -3, back to A
    let e = CatchRow::read(&data, LSDA, actions[0], true).unwrap_err();
    assert!(e.contains("longer than 256"), "{e}");
}

/// Trampolines of one length with the same answer share a table: two calls under one catch
/// row, two under one cleanup; another length or another row gets its own.
#[test]
fn restated_tables_are_shared() {
    let (data, actions) = lsda_fixture(0x9b, [SLOT1, SLOT2, 0]);
    let piece = |start: u64, len: usize, site: u64| Piece {
        start,
        code: vec![0x90; len],
        initial: Initial::Called(site),
        shape: None,
    };
    let pieces = [
        piece(0x50_0000, 40, 0x1010),
        piece(0x50_0040, 40, 0x1012),
        piece(0x50_0080, 48, 0x1014),
        piece(0x50_0100, 40, 0x1030),
        piece(0x50_0140, 40, 0x1200),
        piece(0x50_0180, 40, 0x1210),
    ];
    let refs: Vec<&Piece> = pieces.iter().collect();
    let catch = |a: usize| SiteEh::Catch { pad: FUNC + 0x40, lsda: LSDA, action: actions[a] };
    let called = HashMap::from([
        (0x1010, catch(0)),
        (0x1012, catch(0)),
        (0x1014, catch(0)),
        (0x1030, catch(2)),
        (0x1200, SiteEh::Cleanup(0x1234)),
        (0x1210, SiteEh::Cleanup(0x1234)),
    ]);
    let at = 0x60_0000;
    let lsda = |a: u64| (a == LSDA).then_some(&data[..]);
    let eh = CalledEh::lay_out(&refs, &called, at, &lsda, true).unwrap();
    let t = |p: u64| eh.at[&p];
    assert_eq!(t(0x50_0000), t(0x50_0040), "one catch row, one length: one table");
    assert_ne!(t(0x50_0000), t(0x50_0080), "another length");
    assert_ne!(t(0x50_0000), t(0x50_0100), "another row");
    assert_eq!(t(0x50_0140), t(0x50_0180), "one cleanup pad: one table");
    let tables: std::collections::BTreeSet<u64> = eh.at.values().copied().collect();
    assert_eq!(tables.len(), 4);
    // Each table answers as the caller's row, from where it lies.
    let caller = personality_view(&data, LSDA, FUNC, FUNC + 0x12);
    let view = |p: u64, len: u64| personality_view(&eh.bytes[(t(p) - at) as usize..], t(p), p, p + len - 1);
    assert_eq!(view(0x50_0040, 40), caller);
    assert_eq!(view(0x50_0080, 48), caller);
    // A lost LSDA is an internal error, not a table without the row.
    let Err(e) = CalledEh::lay_out(&refs, &called, at, &|_| None, true) else { panic!("a lost LSDA is an error") };
    assert!(e.to_string().contains("is gone"), "{e}");
}

/// The input's state at every instruction boundary a real program's FDEs cover, looked up
/// twice in a row (the second lookup in an FDE evaluates its rows in full and keeps them) and
/// then at the next address, is the state a lookup with nothing kept gives.
#[test]
fn input_rows_kept_per_fde_give_the_states_of_a_fresh_lookup() {
    for path in ["/usr/bin/ls", "/usr/bin/apt"] {
        let Some(data) = system_binary(path) else { continue };
        let elf = InputElf::parse(&data).unwrap();
        let (in_addr, in_data) =
            input_eh_frame(&elf, elf.segments.iter().find(|s| s.p_type == elf::PT_GNU_EH_FRAME).unwrap()).unwrap();
        let input = EhFrameIn::of_program(&elf, in_addr, in_data);
        let index = input.fdes().map(Result::unwrap).map(|f| (f.initial_address(), f.end_address(), f.offset()));
        let mut index: Vec<_> = index.collect();
        index.sort_unstable();
        let mut kept = InputRows::new(&input, &index);
        let mut looked = 0;
        for &(start, end, _) in index.iter().take(400) {
            for addr in (start..end).step_by(3) {
                let fresh = InputRows::new(&input, &index).state_at(addr);
                assert_eq!(kept.state_at(addr), fresh, "{path}: 0x{addr:x}");
                looked += 1;
            }
        }
        assert!(looked > 500, "{path}: {looked} lookups");
    }
}
