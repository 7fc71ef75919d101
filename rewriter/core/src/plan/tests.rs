//! Tests of the planner: hand-written assembly (with CFI, so every function has an FDE)
//! whose exits have known shapes, C built with gcc, and invariants on system binaries.

use super::*;
use crate::analysis::analyze;
use crate::testdir::TempDir;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn temp_dir(tag: &str) -> TempDir {
    TempDir::new("stint-plan", tag)
}

/// Build `files` (name, text) with gcc and `flags` into `dir/out`.
fn gcc(dir: &Path, out: &str, files: &[(&str, &str)], flags: &[&str]) -> PathBuf {
    let mut cmd = Command::new("gcc");
    cmd.args(flags);
    for (name, text) in files {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write source");
        cmd.arg(p);
    }
    let bin = dir.join(out);
    let st = cmd.arg("-o").arg(&bin).status().expect("run gcc");
    assert!(st.success(), "gcc {flags:?} {out} failed");
    bin
}

/// Everything the assertions need about one planned program.
struct Planned {
    data: Vec<u8>,
    an: Analysis,
    plan: Plan,
}

impl Planned {
    fn new(bin: &Path, traps: bool) -> Self {
        let data = std::fs::read(bin).expect("read binary");
        let (an, plan) = {
            let elf = InputElf::parse(&data).expect("parse");
            let an = analyze(&elf).expect("analyze");
            let plan = plan(&elf, &an, &Spec::default_spec(), PlanOptions { shadow_stack: false, traps });
            check_plan(&elf, &an, &plan, traps);
            (an, plan)
        };
        Planned { data, an, plan }
    }

    fn function(&self, name: &str) -> (usize, &Function) {
        self.an
            .functions
            .iter()
            .enumerate()
            .find(|(_, f)| f.name == name)
            .unwrap_or_else(|| panic!("no function {name}"))
    }

    fn point(&self, name: &str) -> &Point {
        let (i, _) = self.function(name);
        self.plan.points.iter().find(|p| p.function == i).unwrap_or_else(|| panic!("{name} has no entry point"))
    }

    fn timed(&self, name: &str) -> bool {
        self.point(name).bits & stint_layout::TIMER_BITS != 0
    }

    /// Exits of `name`: (site offset from the function, kind, tactic or skip reason,
    /// patch offset, patch length, number of displaced instructions).
    fn exits(&self, name: &str) -> Vec<String> {
        let (i, f) = self.function(name);
        let mut rows: Vec<(u64, String)> = Vec::new();
        let off = |a: u64| a as i64 - f.address as i64;
        for x in self.plan.exits.iter().filter(|x| x.function == i) {
            rows.push((
                x.site,
                format!(
                    "{:+} {:?} {} at {:+} len {} ins {}",
                    off(x.site),
                    x.kind,
                    x.tactic.name(),
                    off(x.address),
                    x.window_len,
                    x.displaced.len()
                ),
            ));
        }
        for x in self.plan.skipped_exits.iter().filter(|x| x.function == i) {
            let fits = x.fits.map_or(String::new(), |t| format!(" (fits {})", t.name()));
            rows.push((x.site, format!("{:+} {:?} skipped: {}{fits}", off(x.site), x.kind, reason(&x.reason, f))));
        }
        rows.sort();
        rows.into_iter().map(|r| r.1).collect()
    }

    fn elf(&self) -> InputElf<'_> {
        InputElf::parse(&self.data).expect("parse")
    }
}

/// A skip reason with addresses as offsets from `f`, so expectations do not depend on layout.
fn reason(r: &SkipReason, f: &Function) -> String {
    let off = |a: &u64| format!("{:+}", *a as i64 - f.address as i64);
    match r {
        SkipReason::BranchTarget(a) => format!("branch target {}", off(a)),
        SkipReason::Overlap(a) => format!("overlap {}", off(a)),
        SkipReason::Undecodable(a) => format!("undecodable {}", off(a)),
        SkipReason::Unrelocatable(a, why) => format!("unrelocatable {}: {why}", off(a)),
        SkipReason::IntoOtherColdPart(a) => format!("into other cold part {}", off(a)),
        SkipReason::IntoFunctionInterior(a) => format!("into function interior {}", off(a)),
        other => other.to_string(),
    }
}

/// Invariants of every plan: patches never overlap; a window covers whole displaced
/// instructions ending with the exit; a point keeps its timer bits iff none of its exits is
/// skipped; traps only when asked for.
fn check_plan(elf: &InputElf, an: &Analysis, plan: &Plan, traps: bool) {
    let mut ranges: Vec<(u64, u64, String)> = Vec::new();
    let mut slots_of_entries: Vec<(u64, String)> = Vec::new();
    for x in &plan.import_sites {
        ranges.push((x.address(), x.address() + x.window_len(), format!("import call {:x}", x.address())));
        assert!(x.window_len() >= JMP_LEN && plan.points[x.point as usize].import.is_some());
    }
    for x in &plan.wrap_sites {
        ranges.push((x.address(), x.address() + x.window_len(), format!("wrap call {:x}", x.address())));
        let w = plan.points[x.point as usize].wrap.as_ref().expect("a wrap site leads to a wrapper point");
        assert_eq!(plan.wrap_slots.get(&x.insn.ip_rel_memory_address()), Some(&x.point), "{}", w.name);
    }
    // A wrapper point of an import with no PLT stub patches nothing itself.
    for p in plan.points.iter().filter(|p| p.import.is_none() && !(p.wrap.is_some() && p.window_len == 0)) {
        ranges.push((p.address, p.address + p.window_len, format!("entry {:x}", p.address)));
        assert!(traps || p.tactic != Tactic::Trap, "entry trap without --traps at 0x{:x}", p.address);
        match p.tactic {
            Tactic::Trap => assert_eq!((p.window_len, p.displaced.len()), (1, 1)),
            // A `jmp rel8` entry: 2–4 bytes ending in a transfer, its slot within reach.
            Tactic::Rel8Slot => {
                let s = *plan.entry_slots.get(&p.address).expect("a jmp8+slot entry has a slot");
                let reach = s as i64 - (p.address + JMP8_LEN) as i64;
                assert!((-128..=127).contains(&reach), "slot 0x{s:x} out of reach of entry 0x{:x}", p.address);
                assert!((JMP8_LEN..JMP_LEN).contains(&p.window_len));
                assert!(p.displaced.last().is_some_and(ends_flow) && !p.emulate_call);
                slots_of_entries.push((s, format!("slot {s:x} of entry {:x}", p.address)));
            }
            _ => assert!(p.window_len >= JMP_LEN),
        }
    }
    assert_eq!(
        plan.entry_slots.len(),
        plan.points.iter().filter(|p| p.tactic == Tactic::Rel8Slot && p.import.is_none()).count()
    );
    let timed: BTreeSet<u32> =
        plan.points.iter().filter(|p| p.bits & stint_layout::TIMER_BITS != 0).map(|p| p.id).collect();
    let points: BTreeMap<u32, &Point> = plan.points.iter().map(|p| (p.id, p)).collect();
    let mut slots: Vec<(u64, String)> = slots_of_entries;
    for x in &plan.exits {
        if x.tactic == Tactic::EntryExit {
            // Nothing patched: the exit is one of the entry trampoline's instructions, the
            // first exit there, and the plan says so.
            let p = points[&x.point];
            assert!(p.displaced.iter().any(|d| d.ip() == x.site), "entry+exit 0x{:x} not displaced", x.site);
            assert_eq!((x.window_len, x.displaced.len(), x.address), (0, 1, x.site));
            assert!(plan.entry_exits.contains_key(&x.point));
            continue;
        }
        if x.tactic == Tactic::Retarget {
            // Only rel32 jumps to the exit, which stays where it is.
            assert!(!x.retargets.is_empty() && x.window_len == 0);
            assert_eq!((x.displaced[0].ip(), x.displaced.last().map(|d| d.ip())), (x.address, Some(x.site)));
            for &(j, len) in &x.retargets {
                let jump = decode_at(elf, j, len)[0];
                assert_eq!((jump.near_branch_target(), jump.len() as u64), (x.address, len));
                ranges.push((j, j + len, format!("retargeted jump {j:x}")));
            }
            continue;
        }
        // window+jumps: each jump into the run leads to a displaced instruction, a rel8 one
        // through a slot in its reach; the jumps are patches of their own. jcc+exit: the one
        // jump is the exit, displaced as a `jmp` to its target.
        let jcc = x.tactic == Tactic::JccTail;
        assert_eq!(
            matches!(x.tactic, Tactic::WindowJumps | Tactic::JccTail | Tactic::TableJumps),
            !x.redirects.is_empty(),
            "redirects of 0x{:x}",
            x.site
        );
        if jcc {
            let j = decode_at(elf, x.site, 15)[0];
            let d = x.displaced[0];
            assert!(j.is_jcc_short_or_near() && x.window_len == 0 && x.displaced.len() == 1 && x.slot.is_none());
            assert_eq!(
                (d.code(), d.near_branch_target(), d.ip(), d.len()),
                (Code::Jmp_rel32_64, j.near_branch_target(), j.ip(), j.len())
            );
            assert_eq!(x.redirects.len(), 1);
            assert_eq!((x.redirects[0].jump, x.redirects[0].to, x.redirects[0].len), (x.site, x.site, j.len() as u64));
        }
        for r in &x.redirects {
            if let Some(add) = r.table {
                // table+jumps: a 4-byte entry of a jump table that leads to a displaced instruction.
                let word = elf.bytes_at(r.jump, 4).expect("table entry");
                let word = i32::from_le_bytes(word.try_into().expect("4 bytes")) as i64 as u64;
                assert_eq!((word.wrapping_add(add), r.len), (r.to, 4), "table entry 0x{:x}", r.jump);
                assert_eq!(x.tactic, Tactic::TableJumps);
                assert!(x.displaced.iter().any(|d| d.ip() == r.to) && r.slot.is_none() && r.window.is_empty());
                assert!(!an.functions.iter().any(|f| f.contains(r.jump)), "table entry 0x{:x} in code", r.jump);
                ranges.push((r.jump, r.jump + 4, format!("table entry {:x}", r.jump)));
                continue;
            }
            if r.is_fall_through() {
                // The entry trampoline's jump back, at the end of its window: the run's start.
                let p = points[&x.point];
                assert_eq!((r.jump, r.to), (p.address + p.window_len, x.address), "fall-through of {:x}", x.site);
                assert!(
                    x.window_len == 0 && x.tactic == Tactic::WindowJumps && r.slot.is_none() && r.window.is_empty()
                );
                assert!(!p.emulate_call && p.displaced.last().is_some_and(|d| !ends_flow(d) && !is_call(d)));
                continue;
            }
            let jump = decode_at(elf, r.jump, r.len)[0];
            let to = if jcc { jump.ip() } else { jump.near_branch_target() };
            assert_eq!((to, jump.len() as u64), (r.to, r.len));
            assert!(x.displaced.iter().any(|d| d.ip() == r.to), "jump {:x} into {:x} not displaced", r.jump, r.to);
            if r.in_entry {
                // One of the function's entry window instructions: its copy there is redirected.
                let p = points[&x.point];
                assert!(p.displaced.iter().any(|d| d.ip() == r.jump), "jump {:x} not in the entry window", r.jump);
                assert!(r.slot.is_none() && r.window.is_empty());
                continue;
            }
            assert_eq!(r.slot.is_some() || !r.window.is_empty(), r.len == JMP8_LEN);
            if let Some(s) = r.slot {
                let reach = s as i64 - (r.jump + JMP8_LEN) as i64;
                assert!((-128..=127).contains(&reach), "slot 0x{s:x} out of reach of jump 0x{:x}", r.jump);
                // Jumps to one target may share a slot.
                if !slots.iter().any(|(o, _)| *o == s) {
                    slots.push((s, format!("slot {s:x} of jump {:x}", r.jump)));
                }
            }
            if !r.window.is_empty() {
                // A jump window: straight-line instructions ending with the jump, 5 bytes or more;
                // a jcc before the jump leads out of the window (or to its first byte).
                let (a, l) = r.patch();
                assert!(l >= JMP_LEN && r.slot.is_none() && r.window.last().map(|j| j.ip()) == Some(r.jump));
                for w in r.window.windows(2) {
                    assert_eq!(w[0].next_ip(), w[1].ip());
                    assert!(
                        w[0].flow_control() == FlowControl::Next
                            || w[0].is_jcc_short_or_near() && !(a + 1..a + l).contains(&w[0].near_branch_target()),
                        "jump window {a:x}: {:?}",
                        w[0].code()
                    );
                }
                for d in &r.window[1..] {
                    assert!(!an.branch_targets.contains(&d.ip()), "branch target 0x{:x} inside jump window", d.ip());
                }
                ranges.push((a, a + l, format!("jump window {a:x}")));
                continue;
            }
            ranges.push((r.jump, r.jump + r.len, format!("redirected jump {:x}", r.jump)));
        }
        if x.window_len > 0 {
            ranges.push((x.address, x.address + x.window_len, format!("exit {:x}", x.site)));
        }
        if let Some(s) = x.slot {
            assert!(matches!(x.tactic, Tactic::Rel8Slot | Tactic::WindowJumps));
            let reach = s as i64 - (x.address + JMP8_LEN) as i64;
            assert!((-128..=127).contains(&reach), "slot 0x{s:x} out of reach of 0x{:x}", x.address);
            slots.push((s, format!("slot {s:x} of exit {:x}", x.site)));
        }
        assert!(timed.contains(&x.point), "exit 0x{:x} of an untimed point", x.site);
        assert!(traps || x.tactic != Tactic::Trap, "exit trap without --traps at 0x{:x}", x.site);
        let last = x.displaced.last().expect("displaced");
        assert_eq!(last.ip(), x.site);
        assert_eq!(x.displaced[0].ip(), x.address);
        for w in x.displaced.windows(2) {
            assert_eq!(w[0].next_ip(), w[1].ip(), "displaced instructions of 0x{:x} not contiguous", x.site);
        }
        // Branch targets inside the window only when every jump to them is redirected.
        let first = if x.window_len == 0 { 0 } else { 1 };
        for d in &x.displaced[first..] {
            let redirected = x.redirects.iter().any(|r| r.to == d.ip());
            assert!(
                !an.branch_targets.contains(&d.ip()) || redirected,
                "branch target 0x{:x} inside exit window",
                d.ip()
            );
        }
        let covered = last.next_ip() - x.address;
        match x.tactic {
            Tactic::Window => assert!(x.window_len == covered && covered >= JMP_LEN),
            Tactic::WindowPadding => assert!(x.window_len == JMP_LEN && covered < JMP_LEN),
            Tactic::Trap => assert!(x.window_len == 1 && x.address == x.site && x.displaced.len() == 1),
            Tactic::Rel8Slot => assert!(x.window_len == covered.max(JMP8_LEN) && covered < JMP_LEN && x.slot.is_some()),
            Tactic::WindowJumps => match x.window_len {
                0 => assert!(x.slot.is_none()),
                n if n < JMP_LEN => assert!(n == covered.max(JMP8_LEN) && x.slot.is_some()),
                n => assert!(n == covered.max(JMP_LEN) && x.slot.is_none()),
            },
            Tactic::JccTail => assert!(x.window_len == 0 && x.address == x.site),
            Tactic::TableJumps => assert!(x.window_len == 0 && x.slot.is_none()),
            Tactic::EntryExit | Tactic::Retarget => unreachable!(),
        }
        // The bytes match the displaced instructions.
        let ins = decode_at(elf, x.address, covered);
        assert_eq!(ins.len(), x.displaced.len());
        assert!(!an.functions[x.function].is_cold_part());
    }
    // Entry windows with branch targets inside: every target's jumps (as many as analysis
    // counted) lead to a displaced instruction, a rel8 one through a slot or its own window;
    // every other instruction of the window is no target.
    for p in &plan.points {
        let redirects = plan.entry_jumps.get(&p.id);
        assert_eq!(p.tactic == Tactic::WindowJumps, redirects.is_some(), "entry 0x{:x}: {:?}", p.address, p.tactic);
        let Some(redirects) = redirects else { continue };
        for d in &p.displaced[1..] {
            let n = redirects.iter().filter(|r| r.to == d.ip()).count();
            match an.branch_targets.contains(&d.ip()) {
                true => assert_eq!(Some(&(n as u32)), an.jump_only.get(&d.ip()), "jumps to 0x{:x}", d.ip()),
                false => assert_eq!(n, 0),
            }
        }
        for r in redirects {
            let jump = decode_at(elf, r.jump, r.len)[0];
            assert_eq!((jump.near_branch_target(), jump.len() as u64), (r.to, r.len));
            assert!(!r.in_entry && (r.slot.is_some() || !r.window.is_empty()) == (r.len == JMP8_LEN));
            if let Some(s) = r.slot {
                let reach = s as i64 - (r.jump + JMP8_LEN) as i64;
                assert!((-128..=127).contains(&reach), "slot 0x{s:x} out of reach of jump 0x{:x}", r.jump);
                if !slots.iter().any(|(o, _)| *o == s) {
                    slots.push((s, format!("slot {s:x} of entry jump {:x}", r.jump)));
                }
            }
            let (a, l) = r.patch();
            assert!(r.window.is_empty() || l >= JMP_LEN && r.window.last().map(|j| j.ip()) == Some(r.jump));
            ranges.push((a, a + l, format!("entry jump {:x}", r.jump)));
        }
    }
    // A slot window: 10 bytes or more of straight-line instructions, none but the first a
    // branch target, the bytes as decoded.
    for w in &plan.slot_windows {
        let (a, l) = w.patch();
        assert!(l >= 2 * JMP_LEN, "slot window {a:x} of {l} bytes");
        for (k, d) in w.displaced.iter().enumerate() {
            assert_eq!(d.flow_control(), FlowControl::Next, "slot window {a:x}: {:?}", d.code());
            assert!(k == 0 || !an.branch_targets.contains(&d.ip()), "branch target 0x{:x} in slot window", d.ip());
        }
        assert_eq!(decode_at(elf, a, l).len(), w.displaced.len());
        ranges.push((a, a + l, format!("slot window {a:x}")));
    }
    for x in &plan.skipped_exits {
        assert!(!timed.contains(&x.point), "skipped exit 0x{:x} of a timed point", x.site);
    }
    for u in &plan.untimed {
        assert!(!timed.contains(&u.point));
    }
    ranges.sort();
    for w in ranges.windows(2) {
        assert!(w[0].1 <= w[1].0, "{} overlaps {}", w[0].2, w[1].2);
    }
    // A slot lies in dead bytes: the tail of a window after its jmp rel32, or no patch at all;
    // never in another slot.
    slots.sort();
    for w in slots.windows(2) {
        assert!(w[0].0 + JMP_LEN <= w[1].0, "{} overlaps {}", w[0].1, w[1].1);
    }
    for (s, what) in &slots {
        let i = ranges.partition_point(|r| r.0 <= *s);
        let tail = i > 0 && *s >= ranges[i - 1].0 + JMP_LEN && s + JMP_LEN <= ranges[i - 1].1;
        let free = (i == 0 || ranges[i - 1].1 <= *s) && ranges.get(i).is_none_or(|r| s + JMP_LEN <= r.0);
        assert!(tail || free, "{what} overlaps a patch's live bytes");
    }
}

const MAIN_C: &str = r#"
int pops(int), tiny(void), one(void), inner_pad(int), midret(int), sib(int), say(void), sw(long),
    hot(int, int), ov(int), ctc(int), vt(void *), selfrec(int), packed(int);
int main(int argc, char **argv) {
    (void)argv;
    return pops(argc) + tiny() + one() + inner_pad(argc) + midret(argc) + sw(argc) + hot(argc, 2) + ov(argc)
        + ctc(argc) + selfrec(argc) + packed(argc);
}
"#;

/// Every function has CFI, so it has an FDE like compiled code. `.p2align 4` after a
/// function leaves nop padding; functions without it are packed.
const EXITS_S: &str = r#"
    .intel_syntax noprefix
    .text
    .macro FUNC name
    .globl \name
    .type \name, @function
\name:
    .cfi_startproc
    .endm
    .macro END name
    .cfi_endproc
    .size \name, .-\name
    .endm

    .p2align 4
FUNC ext
    lea eax, [rdi + 1]
    ret
END ext

# ret after pops: the window starts at the return address of the call.
    .p2align 4
FUNC pops
    push rbp
    push rbx
    sub rsp, 8
    call ext
.Lpops_mid:
    add rsp, 8
    pop rbx
    pop rbp
    ret
END pops

# A jump into the middle of another function is no tail call.
    .p2align 4
FUNC midjump
    mov eax, 0x10
    jmp .Lpops_mid
END midjump

# 3 bytes: the entry window runs over the padding and displaces the ret.
    .p2align 4
FUNC tiny
    xor eax, eax
    ret
END tiny

# mov eax, 1 is the 5-byte entry window; the ret takes the padding after the function.
    .p2align 4
FUNC one
    mov eax, 1
    ret
END one

    .p2align 4
FUNC inner_pad
    push rbx
    mov ebx, edi
    call ext
    test eax, eax
    je .Lip_ret
    cmp eax, 7
    je .Lip_more
    lea eax, [rbx + 1]
    pop rbx
    ret                 # window: lea, pop, ret
.Lip_ret:
    pop rbx
    ret                 # the pop is a target: the ret takes the alignment nops after it
    .p2align 4
.Lip_more:
    mov eax, 3
    pop rbx
    ret                 # window: mov, pop, ret
END inner_pad

# A ret that is a jump target, followed by more code: no window, no padding.
    .p2align 4
FUNC midret
    push rbx
    mov ebx, edi
    call ext
    test eax, eax
    je .Lmr_ret
    jmp .Lmr_more
.Lmr_ret:
    ret
.Lmr_more:
    mov eax, ebx
    add eax, 2
    pop rbx
    jmp ext             # direct tail call, 5 bytes: its own window
END midret

# A sibling call: mov edi, imm is the entry window, the jmp its own window.
    .p2align 4
FUNC sib
    mov edi, 5
    jmp ext
END sib

# A tail call through the GOT (-fno-plt).
    .p2align 4
FUNC say
    lea rdi, [rip + msg]
    jmp QWORD PTR [rip + puts@GOTPCREL]
END say

# A switch: the table jump is no exit; each case returns.
    .p2align 4
FUNC sw
    cmp rdi, 3
    ja .Lsw_def
    lea rax, [rip + .Lsw_tab]
    movsxd rdx, DWORD PTR [rax + rdi*4]
    add rdx, rax
    jmp rdx
.Lsw_0:
    mov eax, 10
    ret
.Lsw_1:
    mov eax, 11
    ret
.Lsw_2:
    mov eax, 12
    ret
.Lsw_3:
    mov eax, 13
    ret
.Lsw_def:
    mov eax, 99
    ret
END sw
    .section .rodata
    .p2align 2
.Lsw_tab:
    .long .Lsw_0 - .Lsw_tab
    .long .Lsw_1 - .Lsw_tab
    .long .Lsw_2 - .Lsw_tab
    .long .Lsw_3 - .Lsw_tab
msg:
    .string "hi"
    .text

# hot and its cold part: the cold part's ret is an exit of hot, its jump back is not.
    .p2align 4
FUNC hot
    test edi, edi
    jne hot.cold
.Lhot_back:
    mov eax, 1
    ret
END hot
    .section .text.unlikely
FUNC hot.cold
    cmp esi, 5
    je .Lhot_back
    mov eax, 7
    ret
END hot.cold
    .text

# The ret's window would reach back into the entry window, and nothing follows the function.
    .p2align 4
FUNC ov
    xor eax, eax
    cmp edi, 0x1234
    setbe al
    ret
END ov
FUNC ctc
    mov eax, 0x10
    test edi, edi
    je ext              # conditional tail call
    ret
END ctc
# A rel8 conditional tail call (to the local label of vt, in reach): a slot within reach.
    .p2align 4
FUNC ctc8
    mov eax, 0x10
    test edi, edi
    je .Lvt
    ret
END ctc8
    .p2align 4
FUNC vt
.Lvt:
    mov esi, 1
    mov rax, [rdi + 8]
    jmp rax             # virtual tail call
END vt

# A tail call to itself re-enters the entry point: an exit.
    .p2align 4
FUNC selfrec
    mov eax, 0x10
    test edi, edi
    je .Lsr_done
    sub edi, 1
    jmp selfrec
.Lsr_done:
    ret
END selfrec
    .nops 6

# A loop right before the ret: the window would take in the back edge; the padding does not.
    .p2align 4
FUNC loopy
    mov eax, 0x10
    xor edx, edx
.Lloopy:
    add edx, eax
    sub edi, 1
    jne .Lloopy
    ret
END loopy
    .nops 8
# The same without padding: the window with the back edge is the only one.
FUNC loopy2
    mov eax, 0x10
    xor edx, edx
.Lloopy2:
    add edx, eax
    sub edi, 1
    jne .Lloopy2
    ret
END loopy2
FUNC after_loopy
    mov eax, 0x10
    ret
END after_loopy
    .p2align 4

# -O0 style epilogues: `leave; ret` after a call, no padding between functions.
    .p2align 4
FUNC packed
    push rbp
    mov rbp, rsp
    sub rsp, 16
    mov [rbp - 4], edi
    call ext
    leave
    ret
END packed
FUNC after_packed
    push rbp
    mov rbp, rsp
    mov eax, 1
    pop rbp
    ret
END after_packed

# A ret whose address is taken as well as jumped to: no list of jumps to redirect, no padding
# (the next function follows): a trap with --traps, else untimed.
    .p2align 4
FUNC addr_ret
    lea rax, [rip + .Lar_ret]
    test edi, edi
    je .Lar_ret
    add eax, edi
.Lar_ret:
    ret
END addr_ret
FUNC after_addr_ret
    mov eax, edi
    add eax, 1
    ret
END after_addr_ret
    .section .note.GNU-stack,"",@progbits
"#;

/// The program and its directory (removed when the guard is dropped).
fn exits_program() -> (TempDir, PathBuf) {
    let dir = temp_dir("exits");
    let bin = gcc(&dir, "exits", &[("main.c", MAIN_C), ("exits.s", EXITS_S)], &["-O1"]);
    (dir, bin)
}

#[test]
fn exit_tactics_without_traps() {
    let p = Planned::new(&exits_program().1, false);
    let all = TIMER_AND_CALLS;

    // push rbp; push rbx; sub rsp, 8; call ext; add rsp, 8; pop rbx; pop rbp; ret
    assert_eq!(p.exits("pops"), ["+17 Ret window at +11 len 7 ins 4"]);
    assert!(p.timed("pops"));

    let (_, pops) = p.function("pops");
    let (_, mj) = p.function("midjump");
    let back = pops.address as i64 - mj.address as i64;
    assert_eq!(p.exits("midjump"), [format!("+5 TailJump skipped: into function interior {back:+}")]);
    assert!(!p.timed("midjump"));

    // The entry window displaces the ret: the entry trampoline runs the exit too.
    assert_eq!(p.point("tiny").tactic, Tactic::WindowPadding);
    assert_eq!(p.exits("tiny"), ["+2 Ret entry+exit at +2 len 0 ins 1"]);
    assert_eq!(p.point("tiny").bits, all);
    let tiny = p.point("tiny");
    assert_eq!(p.plan.entry_exits.get(&tiny.id), Some(&(p.function("tiny").1.address + 2)));

    // mov eax, 1; ret: the entry window (5 bytes) is stretched to the ret.
    assert_eq!(p.point("one").tactic, Tactic::Window);
    assert_eq!(p.point("one").window_len, 6);
    assert_eq!(p.exits("one"), ["+5 Ret entry+exit at +5 len 0 ins 1"]);
    assert_eq!(p.point("one").bits, all);

    assert_eq!(
        p.exits("inner_pad"),
        [
            "+21 Ret window at +17 len 5 ins 3",
            "+23 Ret window+padding at +23 len 5 ins 1",
            "+38 Ret window at +32 len 7 ins 3",
        ]
    );
    assert!(p.timed("inner_pad"));

    // The lone ret after `jmp .Lmr_more` is reached only by `je rel8`: the je leads to a slot,
    // the slot to the exit trampoline; nothing is patched at the ret.
    assert_eq!(
        p.exits("midret"),
        ["+14 Ret window+jumps at +14 len 0 ins 1", "+21 TailJump window at +21 len 5 ins 1"]
    );
    assert!(p.timed("midret"));
    let (i, f) = p.function("midret");
    let x = p.plan.exits.iter().find(|x| x.function == i && x.tactic == Tactic::WindowJumps).expect("midret");
    assert_eq!(x.redirects.len(), 1);
    assert_eq!((x.redirects[0].jump - f.address, x.redirects[0].len, x.redirects[0].to), (10, 2, f.address + 14));

    // A ret whose address is taken: no tactic fits it.
    assert_eq!(p.exits("addr_ret"), ["+13 Ret skipped: branch target +13"]);
    assert!(!p.timed("addr_ret"));
    let u = p.plan.untimed.iter().find(|u| u.function == p.function("addr_ret").0).expect("addr_ret untimed");
    assert_eq!(u.reason, SkipReason::BranchTarget(u.site));

    // The entry window stretches over the tail jump too.
    assert_eq!(p.exits("sib"), ["+5 TailJump entry+exit at +5 len 0 ins 1"]);
    assert_eq!(p.point("sib").window_len, 10);
    assert_eq!(p.exits("say"), ["+7 TailJump window at +7 len 6 ins 1"]);

    // Five rets, no exit at the table jump.
    let sw = p.exits("sw");
    assert_eq!(sw.len(), 5, "{sw:?}");
    assert!(sw.iter().all(|r| r.contains("Ret window at") && r.ends_with("len 6 ins 2")), "{sw:?}");
    let (i, f) = p.function("sw");
    let jmp = decode_at(&p.elf(), f.address, f.size)
        .into_iter()
        .find(|x| x.flow_control() == FlowControl::IndirectBranch)
        .expect("table jump");
    assert_eq!(p.an.indirect_jumps.get(&jmp.ip()), Some(&IndirectJump::Table));
    assert!(!p.plan.exits.iter().any(|x| x.function == i && x.site == jmp.ip()));
    assert!(p.timed("sw"));

    // The cold part's ret belongs to hot; its jump back into hot is no exit.
    let (_, cold) = p.function("hot.cold");
    let (_, hot) = p.function("hot");
    assert_eq!(cold.kind, FunctionKind::ColdPart { parent: Some(hot.address) });
    let cold_off = cold.address as i64 - hot.address as i64;
    // cmp esi, 5; je .Lhot_back; mov eax, 7; ret
    let want_cold = format!("{:+} Ret window at {:+} len 6 ins 2", cold_off + 14, cold_off + 9);
    let mut want = vec!["+13 Ret window at +8 len 6 ins 2".to_string(), want_cold];
    want.sort_by_key(|r| r.split(' ').next().and_then(|o| o.parse::<i64>().ok()));
    assert_eq!(p.exits("hot"), want);
    assert!(p.timed("hot"));
    assert!(!p.plan.points.iter().any(|pt| pt.function == p.function("hot.cold").0));

    // xor (2) + cmp (6) is the entry window, stretched over setbe + ret (the next function
    // follows, no room for a window of the ret's own).
    assert_eq!(p.exits("ov"), ["+11 Ret entry+exit at +11 len 0 ins 1"]);
    assert_eq!(p.point("ov").window_len, 12);
    // The je's rel32 leads to an exit trampoline that ends in `jmp ext`; the ret keeps the
    // window it fits.
    assert_eq!(p.exits("ctc"), ["+7 TailJump jcc+exit at +7 len 0 ins 1", "+13 Ret window+padding at +13 len 5 ins 1"]);
    assert!(p.timed("ctc"));
    // The je (rel8, +7) leads to a slot that holds `jmp rel32` to the exit trampoline.
    assert_eq!(p.exits("ctc8"), ["+7 TailJump jcc+exit at +7 len 0 ins 1", "+9 Ret window+padding at +9 len 5 ins 1"]);
    let (i, _) = p.function("ctc8");
    let x = p.plan.exits.iter().find(|x| x.function == i && x.tactic == Tactic::JccTail).expect("ctc8's jcc");
    assert!(x.redirects[0].len == JMP8_LEN && (x.redirects[0].slot.is_some() || !x.redirects[0].window.is_empty()));
    assert!(p.timed("ctc8"));
    assert_eq!(p.exits("vt"), ["+9 TailJump window at +5 len 6 ins 2"]);
    // jmp selfrec (rel8) after sub edi, 1; the ret is a jump target with padding after it.
    assert_eq!(
        p.exits("selfrec"),
        ["+12 TailJump window at +9 len 5 ins 2", "+14 Ret window+padding at +14 len 5 ins 1"]
    );
    assert!(p.timed("selfrec"));
    // mov eax, 16 (5); xor edx, edx (2); add edx, eax (2); sub edi, 1 (3); jne (2); ret
    assert_eq!(p.exits("loopy"), ["+14 Ret window+padding at +14 len 5 ins 1"]);
    assert_eq!(p.exits("loopy2"), ["+14 Ret window at +9 len 6 ins 3"]);
    // `call ext; leave; ret`: the leave is the return address, 2 bytes: jmp rel8 to a slot in
    // dead bytes within reach (check_plan: not in any patch's live bytes). after_packed: push
    // rbp; mov rbp, rsp; mov eax, 1; pop rbp; ret, 11 bytes, stretched to the ret.
    assert_eq!(p.exits("packed"), ["+17 Ret jmp8+slot at +16 len 2 ins 2"]);
    assert_eq!(p.exits("after_packed"), ["+10 Ret entry+exit at +10 len 0 ins 1"]);
    let after = p.point("after_packed");
    assert_eq!(after.window_len, 11);
    let x = p.plan.exits.iter().find(|x| x.function == p.function("packed").0).expect("packed exit");
    let slot = x.slot.expect("slot");
    assert!(slot.abs_diff(x.address + JMP8_LEN) <= 127);
    assert!(p.timed("packed") && p.timed("after_packed"));
}

const TIMER_AND_CALLS: u8 = stint_layout::TIMER_BITS | stint_layout::metric_bit(stint_layout::METRIC_CALLS);

#[test]
fn exit_tactics_with_traps() {
    let p = Planned::new(&exits_program().1, true);
    assert_eq!(p.exits("addr_ret"), ["+13 Ret trap at +13 len 1 ins 1"]);
    assert!(p.timed("addr_ret"));
    assert_eq!(
        p.exits("midret"),
        ["+14 Ret window+jumps at +14 len 0 ins 1", "+21 TailJump window at +21 len 5 ins 1"]
    );
    // Traps only where nothing else fits.
    assert_eq!(p.exits("ov"), ["+11 Ret entry+exit at +11 len 0 ins 1"]);
    assert_eq!(p.exits("packed"), ["+17 Ret jmp8+slot at +16 len 2 ins 2"]);
    assert_eq!(p.exits("after_packed"), ["+10 Ret entry+exit at +10 len 0 ins 1"]);
    // Windows where they fit, as without traps.
    assert_eq!(p.exits("pops"), ["+17 Ret window at +11 len 7 ins 4"]);
    assert_eq!(p.exits("one"), ["+5 Ret entry+exit at +5 len 0 ins 1"]);
    // A conditional tail call is no trap (only its taken path leaves): jcc+exit.
    assert_eq!(p.exits("tiny"), ["+2 Ret entry+exit at +2 len 0 ins 1"]);
    assert_eq!(p.exits("ctc")[0], "+7 TailJump jcc+exit at +7 len 0 ins 1");
    assert!(p.timed("ctc"));
}

/// A function too short for any window, no padding and no slot in `jmp rel8` reach (the
/// functions around start with a call, and are longer than the reach): a trap at its entry
/// with --traps.
const TRAP_ENTRY_S: &str = r#"
    .intel_syntax noprefix
    .text
    .globl big
    .type big, @function
big:
    .cfi_startproc
    call next
    .rept 50
    add eax, 1
    .endr
    ret
    .cfi_endproc
    .size big, .-big
    .globl shorty
    .type shorty, @function
shorty:
    .cfi_startproc
    xor eax, eax
    ret
    .cfi_endproc
    .size shorty, .-shorty
    .globl next
    .type next, @function
next:
    .cfi_startproc
    mov eax, 2
    add eax, edi
    ret
    .cfi_endproc
    .size next, .-next
    .globl big2
    .type big2, @function
big2:
    .cfi_startproc
    call next
    .rept 50
    add eax, 1
    .endr
    ret
    .cfi_endproc
    .size big2, .-big2
    .section .note.GNU-stack,"",@progbits
"#;

/// Functions too small for an entry window, with a slot in reach: the tail of `host`'s entry
/// window (5 x mov eax, imm32; add; ret, stretched to its ret). `lone` (a ret with no dead
/// byte after it) stays too small.
const REL8_ENTRY_S: &str = r#"
    .intel_syntax noprefix
    .text
    .macro FUNC name
    .globl \name
    .type \name, @function
\name:
    .cfi_startproc
    .endm
    .macro END name
    .cfi_endproc
    .size \name, .-\name
    .endm
    .p2align 4
FUNC t_xor
    xor eax, eax
    ret
END t_xor
FUNC t_mov
.Lt_mov:
    mov eax, edi
    ret
END t_mov
FUNC t_jmp
    jmp .Lt_mov
END t_jmp
FUNC t_ret1
    ret
END t_ret1
    .nops 2
FUNC lone
    ret
END lone
FUNC host
    mov eax, 0x11
    mov eax, 0x12
    mov eax, 0x13
    mov eax, 0x14
    mov eax, 0x15
    add eax, edi
    ret
END host
    .section .note.GNU-stack,"",@progbits
"#;

#[test]
fn entry_rel8_slots() {
    let dir = temp_dir("rel8-entry");
    let main = "int t_xor(void), t_mov(int), t_jmp(int), t_ret1(void), lone(void), host(int);
        int main(int c, char **v) { (void)v; return t_xor() + t_mov(c) + t_jmp(c) + t_ret1() + lone() + host(c); }";
    let bin = gcc(&dir, "t", &[("main.c", main), ("t.s", REL8_ENTRY_S)], &["-O1"]);
    let p = Planned::new(&bin, false);
    let host = p.point("host");
    assert_eq!((host.tactic, host.window_len), (Tactic::Window, 28));
    let tail = host.address + JMP_LEN..host.address + host.window_len;
    let mut in_tail = 0;
    // (function, window): whole instructions up to the transfer; t_ret1's ret takes a byte of
    // its padding.
    for (name, window) in [("t_xor", 3), ("t_mov", 3), ("t_jmp", 2), ("t_ret1", 2)] {
        let pt = p.point(name);
        assert_eq!((pt.tactic, pt.window_len, pt.emulate_call), (Tactic::Rel8Slot, window, false), "{name}");
        let slot = p.plan.entry_slots[&pt.address];
        // Within reach, in dead bytes (check_plan): the padding before t_xor or host's tail.
        let reach = slot as i64 - (pt.address + JMP8_LEN) as i64;
        assert!((-128..=127).contains(&reach), "{name}: slot 0x{slot:x}");
        in_tail += usize::from(tail.contains(&slot));
        // The transfer is the entry trampoline's last instruction: an entry+exit exit.
        let last = pt.displaced.last().expect("displaced").ip() as i64 - p.function(name).1.address as i64;
        assert_eq!(
            p.exits(name),
            [format!(
                "{last:+} {} entry+exit at {last:+} len 0 ins 1",
                if name == "t_jmp" { "TailJump" } else { "Ret" }
            )]
        );
        assert!(p.timed(name), "{name}");
    }
    assert!(in_tail >= 1, "host's tail holds no slot");
    // Four slots, none shared.
    let mut slots: Vec<u64> = p.plan.entry_slots.values().copied().collect();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), 4);
    let (i, _) = p.function("lone");
    assert_eq!(p.plan.skipped.iter().find(|s| s.function == i).map(|s| &s.reason), Some(&SkipReason::TooSmall));
    // Points stay numbered in function order.
    assert!(p.plan.points.windows(2).all(|w| w[0].function < w[1].function
        || w[0].wrap.is_some()
        || w[1].wrap.is_some()
        || w[0].import.is_some()
        || w[1].import.is_some()));
    assert!(p.plan.points.iter().enumerate().all(|(i, pt)| pt.id == i as u32));
}

#[test]
fn entry_trap() {
    let dir = temp_dir("trap-entry");
    let main = "int shorty(void), next(int); int main(int c, char **v) { (void)v; return shorty() + next(c); }";
    let bin = gcc(&dir, "t", &[("main.c", main), ("t.s", TRAP_ENTRY_S)], &["-O1"]);
    let p = Planned::new(&bin, false);
    let (i, _) = p.function("shorty");
    let sk = p.plan.skipped.iter().find(|s| s.function == i).expect("shorty skipped");
    assert_eq!(sk.reason, SkipReason::TooSmall);
    let p = Planned::new(&bin, true);
    let pt = p.point("shorty");
    assert_eq!((pt.tactic, pt.window_len, pt.displaced.len(), pt.emulate_call), (Tactic::Trap, 1, 1, false));
    // Its ret is displaced by nothing but lies in no window either: the entry trap covers only
    // the xor; the ret gets a trap too.
    assert_eq!(p.exits("shorty"), ["+2 Ret trap at +2 len 1 ins 1"]);
    assert!(p.timed("shorty"));
    // next: mov eax, 2 is the entry window, stretched over add and ret.
    assert_eq!(p.exits("next"), ["+7 Ret entry+exit at +7 len 0 ins 1"]);
}

/// C at -O2: sibling calls, `-fno-plt` tail calls to libc, switches, cold parts. The plan's
/// invariants hold, every exit is classified, and tail calls are found.
const C_SRC: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }
__attribute__((noinline)) int sibling(int x) { return leaf(x + 7); }
__attribute__((noinline)) void shout(const char *s) { puts(s); }
__attribute__((noinline)) int dispatch(int op, int a, int b) {
    switch (op) {
    case 0: return a + b; case 1: return a - b; case 2: return a * b; case 3: return b ? a / b : 0;
    case 4: return a & b; case 5: return a | b; case 6: return a ^ b; case 7: return leaf(a);
    default: return 42;
    }
}
__attribute__((noinline)) long work(long *v, int n) {
    long s = 0;
    for (int i = 0; i < n; i++) {
        if (__builtin_expect(v[i] < 0, 0)) { fprintf(stderr, "negative %ld\n", v[i]); abort(); }
        s += v[i] * 3 + (s >> 2);
    }
    return s;
}
int main(int argc, char **argv) {
    long v[3] = {argc, 2, 3};
    shout(argv[0]);
    return (sibling(argc) + dispatch(argc, 3, 4) + (int)work(v, 3)) & 1;
}
"#;

#[test]
fn c_program_o2() {
    let dir = temp_dir("c-o2");
    for (tag, flags) in [("pie", &["-O2", "-fno-plt"][..]), ("nopie", &["-O2", "-fno-pie", "-no-pie"][..])] {
        let bin = gcc(&dir, tag, &[("t.c", C_SRC)], flags);
        for traps in [false, true] {
            let p = Planned::new(&bin, traps);
            // sibling: `add edi, 7; jmp leaf` — the entry window displaces the tail call.
            let s = p.exits("sibling");
            assert_eq!(s.len(), 1, "{tag}: {s:?}");
            assert!(s[0].contains("TailJump"), "{tag}: {s:?}");
            // shout: a tail call to puts (through the GOT with -fno-plt, the PLT without).
            let s = p.exits("shout");
            assert_eq!(s.len(), 1, "{tag}: {s:?}");
            assert!(s[0].contains("TailJump"), "{tag}: {s:?}");
            // dispatch's table jump is not an exit; it returns (or tail-calls leaf).
            let (i, f) = p.function("dispatch");
            assert!(!f.unresolved_indirect_jump);
            let sites: Vec<u64> = p
                .plan
                .exits
                .iter()
                .filter(|x| x.function == i)
                .map(|x| x.site)
                .chain(p.plan.skipped_exits.iter().filter(|x| x.function == i).map(|x| x.site))
                .collect();
            assert!(!sites.is_empty());
            for s in sites {
                let x = decode_at(&p.elf(), s, 15)[0];
                assert!(
                    x.mnemonic() == Mnemonic::Ret || x.near_branch_target() == p.function("leaf").1.address,
                    "{tag}: dispatch exit 0x{s:x} is {x}"
                );
            }
            // work's exits include none in its cold part (it only aborts), and one ret.
            assert!(p.exits("work").iter().any(|r| r.contains("Ret")), "{tag}: {:?}", p.exits("work"));
        }
    }
}

/// The invariants on real programs, with and without traps.
#[test]
fn system_binaries() {
    for bin in ["/usr/bin/ls", "/usr/bin/pigz", "/usr/bin/sqlite3"] {
        if !Path::new(bin).exists() {
            continue;
        }
        for traps in [false, true] {
            let p = Planned::new(Path::new(bin), traps);
            assert!(!p.plan.exits.is_empty(), "{bin}: no exits");
            if traps {
                // Only what no trap can fix stays skipped.
                for x in &p.plan.skipped_exits {
                    assert!(
                        matches!(
                            x.reason,
                            SkipReason::ExitInEntryWindow
                                | SkipReason::ConditionalTailCall
                                | SkipReason::UnresolvedIndirectJump
                                | SkipReason::IntoOtherColdPart(_)
                                | SkipReason::IntoFunctionInterior(_)
                                | SkipReason::NotTimed
                        ),
                        "{bin}: exit 0x{:x} skipped with traps: {}",
                        x.site,
                        x.reason
                    );
                }
            }
        }
    }
}

/// Calls through the GOT slots of wrapped imports (D4, `plan_got_wraps`): each is a wrap site
/// or lies in a window (and is redirected by codegen), except a slot read into a register.
const GOT_WRAPS_S: &str = r#"
    .intel_syntax noprefix
    .text
    .globl main
    .type main, @function
main:
    .cfi_startproc
    push rbx
    .cfi_def_cfa_offset 16
    lea rdi, [rip + mtx]
    call [rip + pthread_mutex_lock@GOTPCREL]
.Lcall_site:
    lea rdi, [rip + mtx]
    mov rbx, [rip + pthread_cond_signal@GOTPCREL]
.Lmov_site:
    call rbx
    lea rdi, [rip + mtx]
    call locked_tail
    xor eax, eax
    pop rbx
    .cfi_def_cfa_offset 8
    ret
    .cfi_endproc
    .size main, .-main

# The entry window displaces the call (the last instruction of the window, emulated).
    .globl first_call
    .type first_call, @function
first_call:
    .cfi_startproc
    call [rip + pthread_mutex_trylock@GOTPCREL]
    .cfi_endproc
    .size first_call, .-first_call

# A timed function's tail jump: its exit window displaces it.
    .globl locked_tail
    .type locked_tail, @function
locked_tail:
    .cfi_startproc
    nop
    nop
    nop
    nop
    nop
    nop
    jmp [rip + pthread_mutex_unlock@GOTPCREL]
    .cfi_endproc
    .size locked_tail, .-locked_tail

    .data
mtx: .zero 40
    .section .note.GNU-stack,"",@progbits
"#;

/// The exit tactics that reach beyond the exit's own bytes: a lone `ret` reached only by a
/// `je rel32` (retarget), and a `leave; ret` at a return address with no dead bytes in
/// rel8 reach but an entry window that can grow (jmp8+slot in the stretched window's tail).
const REACH_S: &str = r#"
    .intel_syntax noprefix
    .text
    .macro FUNC name
    .globl \name
    .type \name, @function
\name:
    .cfi_startproc
    .endm
    .macro END name
    .cfi_endproc
    .size \name, .-\name
    .endm

    .p2align 4
FUNC ext
    lea eax, [rdi + 1]
    ret
END ext

    .p2align 4
FUNC rt
    push rbx
    mov ebx, edi
    call ext
    mov eax, ebx
    pop rbx
    test eax, eax
    {disp32} je .Lrt_ret
    add eax, 1000
    ret
.Lrt_ret:
    ret
END rt
# The same, but the jump to the lone ret is rel8: no retarget, but window+jumps (a slot).
FUNC rt8
    mov eax, edi
    add eax, 2
    test eax, eax
    je .Lrt8_ret
    add eax, 1000
    ret
.Lrt8_ret:
    ret
END rt8
FUNC filler
    mov eax, edi
    .rept 40
    add eax, 1
    .endr
    ret
END filler
FUNC packed
    push rbp
    mov rbp, rsp
    sub rsp, 16
    mov [rbp - 4], edi
    call ext
    leave
    ret
END packed
FUNC filler2
    mov eax, edi
    .rept 40
    add eax, 1
    .endr
    ret
END filler2
    .section .note.GNU-stack,"",@progbits
"#;

#[test]
fn got_calls_of_wrapped_imports() {
    let dir = temp_dir("gotwraps");
    let bin = gcc(&dir, "gotwraps", &[("w.s", GOT_WRAPS_S)], &["-pthread", "-fPIE", "-pie"]);
    let p = Planned::new(&bin, false);
    let elf = p.elf();
    let slot_of = |name: &str| {
        *p.an.got_imports.iter().find(|(_, n)| *n == name).unwrap_or_else(|| panic!("no GOT slot of {name}")).0
    };
    let wrap_point = |name: &str| {
        p.plan
            .points
            .iter()
            .find(|pt| pt.wrap.as_ref().is_some_and(|w| w.name == name))
            .unwrap_or_else(|| panic!("no wrapper of {name}"))
    };
    // No PLT: each wrapper point patches nothing and shows its GOT slot.
    for name in ["pthread_mutex_lock", "pthread_mutex_trylock", "pthread_mutex_unlock"] {
        let w = wrap_point(name);
        assert_eq!((w.window_len, w.address), (0, slot_of(name)), "{name}");
        assert_eq!(p.plan.wrap_slots.get(&slot_of(name)), Some(&w.id), "{name}");
    }
    // main's call is patched in place; first_call's and locked_tail's are displaced.
    let (main_i, main_f) = p.function("main");
    // `_start` calls `__libc_start_main` through the GOT too (D22: its thunk records main's
    // return); every other wrap site is main's.
    let name_of = |x: &WrapSiteCall| p.plan.points[x.point as usize].wrap.as_ref().unwrap().name.clone();
    let others: Vec<String> = p.plan.wrap_sites.iter().filter(|x| x.function != main_i).map(name_of).collect();
    assert_eq!(others, ["__libc_start_main"]);
    let sites: Vec<(u64, bool, &str)> = p
        .plan
        .wrap_sites
        .iter()
        .filter(|x| x.function == main_i)
        .map(|x| {
            (
                x.address() - main_f.address,
                x.is_call(),
                p.plan.points[x.point as usize].wrap.as_ref().unwrap().name.as_str(),
            )
        })
        .collect();
    assert_eq!(sites, [(8, true, "pthread_mutex_lock")]);
    assert!(p.point("first_call").emulate_call, "first_call's window ends in the emulated call");
    let tail = p.plan.exits.iter().find(|x| x.function == p.function("locked_tail").0).expect("locked_tail's exit");
    assert_eq!(tail.displaced.last().map(|d| d.ip_rel_memory_address()), Some(slot_of("pthread_mutex_unlock")));
    // The slot loaded into rbx is a pointer no wrapper sees.
    let mov_site = main_f.address + 8 + 6 + 7;
    assert_eq!(
        p.plan.uncovered_wraps,
        [UncoveredWrap {
            name: "pthread_cond_signal".into(),
            site: mov_site,
            function: main_i,
            why: Uncovered::Pointer
        }]
    );
    assert_eq!(decode_at(&elf, mov_site, 7)[0].mnemonic(), Mnemonic::Mov);
    // No import point for a wrapped import: their calls are skipped as wrapped.
    assert!(p.plan.points.iter().all(|pt| pt.import.as_ref().is_none_or(|i| !i.name.starts_with("pthread_"))));
    assert!(p
        .plan
        .skipped_import_sites
        .iter()
        .any(|s| s.name == "pthread_mutex_lock" && s.reason == SkipReason::Wrapped));
}

#[test]
fn exit_tactics_reaching_out() {
    let dir = temp_dir("reach");
    let main = "int rt(int), rt8(int), filler(int), packed(int), filler2(int);
        int main(int c, char **v) { (void)v; return rt(c) + rt8(c) + filler(c) + packed(c) + filler2(c); }";
    let p = Planned::new(&gcc(&dir, "reach", &[("main.c", main), ("reach.s", REACH_S)], &["-O1"]), false);
    // push rbx; mov ebx, edi; call ext (8) | mov eax, ebx; pop rbx; test; je rel32 (at +13);
    // add eax, 1000; ret | ret
    assert_eq!(p.exits("rt"), ["+24 Ret window at +19 len 6 ins 2", "+25 Ret retarget at +25 len 0 ins 1"]);
    let x = p.plan.exits.iter().find(|x| x.tactic == Tactic::Retarget).expect("retarget");
    let (_, rt) = p.function("rt");
    assert_eq!(x.retargets, vec![(rt.address + 13, 6)]);
    assert!(p.timed("rt"));
    // rel8: the je leads to a slot within its reach (window+jumps, nothing patched at the ret).
    assert_eq!(p.exits("rt8"), ["+14 Ret window at +9 len 6 ins 2", "+15 Ret window+jumps at +15 len 0 ins 1"]);
    assert!(p.timed("rt8"));
    // packed's own entry window (push, mov, sub: 8 bytes) grows over the store to 11: its
    // tail holds the slot of the leave; ret.
    assert_eq!(p.exits("packed"), ["+17 Ret jmp8+slot at +16 len 2 ins 2"]);
    let entry = p.point("packed");
    assert_eq!((entry.window_len, entry.displaced.len()), (11, 4));
    let x = p.plan.exits.iter().find(|x| x.function == p.function("packed").0).expect("packed exit");
    assert_eq!(x.slot, Some(entry.address + JMP_LEN));
    assert!(p.timed("packed"));
}

/// Safe traps (issue 12): the signal functions a program calls get wrapper points only in a
/// plan with trap sites, and their calls stay imports (the wrapper measures nothing).
#[test]
fn signal_wrappers_only_with_trap_sites() {
    let dir = temp_dir("signal-wraps");
    let main = "#include <signal.h>\n\
                int shorty(void), next(int);\n\
                int main(int c, char **v) { sigset_t s; (void)v; sigfillset(&s); sigprocmask(SIG_BLOCK, &s, 0);\n\
                signal(SIGTRAP, SIG_IGN); return shorty() + next(c); }";
    let bin = gcc(&dir, "t", &[("main.c", main), ("t.s", TRAP_ENTRY_S)], &["-O1"]);
    let signal_wraps = |p: &Planned| -> Vec<String> {
        let mut v: Vec<String> = p
            .plan
            .points
            .iter()
            .filter_map(|pt| pt.wrap.as_ref().filter(|w| is_signal_wrap(w)))
            .map(|w| w.name.clone())
            .collect();
        v.sort();
        v
    };
    let p = Planned::new(&bin, false);
    assert_eq!(trap_sites(&p.plan), 0);
    assert_eq!(signal_wraps(&p), Vec::<String>::new(), "no trap site, no signal wrapper");
    let p = Planned::new(&bin, true);
    assert_eq!(trap_sites(&p.plan), 2, "shorty's entry and exit");
    assert_eq!(signal_wraps(&p), ["signal", "sigprocmask"]);
    for pt in p.plan.points.iter().filter(|pt| pt.wrap.as_ref().is_some_and(is_signal_wrap)) {
        assert_eq!(pt.bits, stint_layout::GATE_HOOK, "a signal wrapper measures nothing");
    }
    // Their calls stay imports, never skipped as "wrapped".
    assert!(!p.plan.skipped_import_sites.iter().any(|s| s.reason == SkipReason::Wrapped));
    assert!(p.plan.points.iter().any(|pt| pt.import.as_ref().is_some_and(|i| i.name == "sigprocmask")));
}

/// [`Tactic::WindowJumps`]: rets that are branch targets and are also fallen into.
const WJ_S: &str = r#"
    .intel_syntax noprefix
    .text
    .macro FUNC name
    .globl \name
    .type \name, @function
\name:
    .cfi_startproc
    .endm
    .macro END name
    .cfi_endproc
    .size \name, .-\name
    .endm

    .p2align 4
FUNC ext
    lea eax, [rdi + 1]
    ret
END ext
FUNC filler
    mov eax, edi
    .rept 40
    add eax, 1
    .endr
    ret
END filler
# `je rel32` to the ret, which add (5 bytes) falls into: a window over add; ret, the je led
# to the trampoline's copy of the ret.
FUNC jw32
    push rbx
    mov ebx, edi
    call ext
    pop rbx
    test eax, eax
    {disp32} je .Ljw32_ret
    add eax, 1000
.Ljw32_ret:
    ret
END jw32
# `je rel8` to the ret, add (3 bytes) falls into it: `jmp rel8` over add; ret to a slot, the
# je to another slot that leads to the copy of the ret.
FUNC jw8
    push rbx
    mov ebx, edi
    call ext
    pop rbx
    test eax, eax
    je .Ljw8_ret
    add eax, 5
.Ljw8_ret:
    ret
END jw8
# Dead bytes for the slots of jw8.
FUNC pad_holder
    mov eax, edi
    ret
END pad_holder
    .nops 16
# The ret is also jumped to from another function: it stays unpatched.
FUNC jw_out
    push rbx
    mov ebx, edi
    call ext
    pop rbx
    test eax, eax
    je .Ljw_out_ret
    add eax, 5
.Ljw_out_ret:
    ret
END jw_out
FUNC jw_other
    test edi, edi
    je .Ljw_out_ret
    mov eax, edi
    .rept 40
    add eax, 1
    .endr
    ret
END jw_other
# `je rel8` to the ret with no dead byte in its reach (the fillers around start with a call,
# their entry windows cannot grow): `cmp eax, 1000; je` becomes a window of its own.
FUNC jw_far
    push rbx
    mov ebx, edi
    call ext
    pop rbx
    cmp eax, 1000
    je .Ljw_far_ret
    add eax, 1000
.Ljw_far_ret:
    ret
END jw_far
FUNC far_filler
    call ext
    .rept 40
    add eax, 1
    .endr
    ret
END far_filler
    .section .note.GNU-stack,"",@progbits
"#;

#[test]
fn exit_tactics_window_jumps() {
    let dir = temp_dir("wj");
    let main = "int jw32(int), jw8(int), jw_out(int), jw_other(int), filler(int), jw_far(int);
        int main(int c, char **v) { (void)v; return jw32(c) + jw8(c) + jw_out(c) + jw_other(c) + filler(c); }";
    let p = Planned::new(&gcc(&dir, "wj", &[("main.c", main), ("wj.s", WJ_S)], &["-O1"]), false);
    let redirects = |name: &str| {
        let (i, f) = p.function(name);
        let x = p.plan.exits.iter().find(|x| x.function == i).expect("exit");
        let off = |a: u64| a as i64 - f.address as i64;
        (
            x.slot.map(off),
            x.redirects.iter().map(|r| (off(r.jump), r.len, off(r.to), r.slot.map(off))).collect::<Vec<_>>(),
        )
    };
    // push rbx; mov ebx, edi; call ext (8) | pop rbx; test (3) | je rel32 (+11, 6) | add eax,
    // 1000 (+17, 5) | ret (+22): a window over add; ret, the je led to the copy of the ret.
    assert_eq!(p.exits("jw32"), ["+22 Ret window+jumps at +17 len 6 ins 2"]);
    assert_eq!(redirects("jw32"), (None, vec![(11, 6, 22, None)]));
    assert!(p.timed("jw32"));
    // ... | je rel8 (+11, 2) | add eax, 5 (+13, 3) | ret (+16), pad_holder (3 bytes) and 16
    // bytes of nops after it (+20..+36): jmp rel8 at +13 to a slot there, the je to another
    // slot, each taken from the end of the nops that are left.
    assert_eq!(p.exits("jw8"), ["+16 Ret window+jumps at +13 len 4 ins 2"]);
    assert_eq!(redirects("jw8"), (Some(31), vec![(11, 2, 16, Some(26))]));
    assert!(p.timed("jw8"));
    // ... | cmp eax, 1000 (+9, 5) | je rel8 (+14, 2) | add eax, 1000 (+16, 5) | ret (+21): a
    // window over add; ret; no slot in the je's reach, so cmp; je (7 bytes) is a window of its
    // own, its piece runs them with the je as a rel32 to the copy of the ret.
    assert_eq!(p.exits("jw_far"), ["+21 Ret window+jumps at +16 len 6 ins 2"]);
    assert_eq!(redirects("jw_far"), (None, vec![(14, 2, 21, None)]));
    let (i, f) = p.function("jw_far");
    let x = p.plan.exits.iter().find(|x| x.function == i).expect("jw_far exit");
    assert_eq!(x.redirects[0].patch(), (f.address + 9, 7));
    assert_eq!(x.redirects[0].window.len(), 2);
    assert!(p.timed("jw_far"));
    // jw_other jumps to jw_out's ret too: no redirect list is complete.
    assert_eq!(p.exits("jw_out"), ["+16 Ret skipped: branch target +16"]);
    assert!(!p.timed("jw_out"));
}

/// [`Tactic::WindowJumps`] over a loop's back edge: rets that a loop falls into and jumps
/// from outside it reach, with no run before them that leaves the back edge out.
const LB_S: &str = r#"
    .intel_syntax noprefix
    .text
    .macro FUNC name
    .globl \name
    .type \name, @function
\name:
    .cfi_startproc
    .endm
    .macro END name
    .cfi_endproc
    .size \name, .-\name
    .endm

    .p2align 4
FUNC lb_pad
    mov eax, edi
    ret
END lb_pad
    .nops 24
# xor; mov; test (the entry window) | je rel8 (+6) | .Ltop: add (+8, 2) | sub (+10, 3) | jne
# rel8 .Ltop (+13) | ret (+15): every run ending at the ret takes in the jne.
FUNC lb_loop
    xor eax, eax
    mov ecx, edi
    test ecx, ecx
    je .Llb_loop_ret
.Llb_loop_top:
    add eax, ecx
    sub ecx, 1
    jne .Llb_loop_top
.Llb_loop_ret:
    ret
END lb_loop
# The loop's top is the instruction before the jne: a 5-byte window would start at the
# jne's target (its copy would jump into the patch), so `jne; ret` becomes `jmp rel8` to a
# slot, the loop running `sub` in place and the jne in the trampoline.
FUNC lb_short
    xor eax, eax
    mov ecx, edi
    test ecx, ecx
    je .Llb_short_ret
.Llb_short_top:
    sub ecx, 1
    jne .Llb_short_top
.Llb_short_ret:
    ret
END lb_short
# Without the je the ret is no branch target: a plain window over the back edge, as before.
FUNC lb_plain
    xor eax, eax
    mov ecx, edi
    test ecx, ecx
.Llb_plain_top:
    add eax, ecx
    sub ecx, 1
    jne .Llb_plain_top
    ret
END lb_plain
# rg's drop glue: mov; test; jne .Lmore is the entry window, the ret right after it is also
# reached by a je: nothing patched at the ret, the entry trampoline's fall-through and the
# je (through a slot) lead to the exit trampoline.
FUNC lb_fall
    mov eax, edi
    test al, 1
    jne .Llb_fall_more
.Llb_fall_ret:
    ret
.Llb_fall_more:
    shr eax, 1
    test al, 1
    je .Llb_fall_ret
    add eax, 1000
    ret
END lb_fall
FUNC lb_filler
    call lb_pad
    .rept 40
    add eax, 1
    .endr
    ret
END lb_filler
    .section .note.GNU-stack,"",@progbits
"#;

#[test]
fn exit_tactics_loop_back_edge_and_entry_fall_through() {
    let dir = temp_dir("lb");
    let main = "int lb_loop(int), lb_short(int), lb_plain(int), lb_fall(int), lb_filler(int);
        int main(int c, char **v) { (void)v; return lb_loop(c) + lb_short(c) + lb_plain(c) + lb_fall(c) + lb_filler(c); }";
    let p = Planned::new(&gcc(&dir, "lb", &[("main.c", main), ("lb.s", LB_S)], &["-O1"]), false);
    let redirects = |name: &str| {
        let (i, f) = p.function(name);
        let x = p.plan.exits.iter().find(|x| x.function == i).expect("exit");
        let off = |a: u64| a as i64 - f.address as i64;
        (
            x.slot.map(|s| s < f.address),
            x.redirects.iter().map(|r| (off(r.jump), r.len, off(r.to), r.slot.is_some())).collect::<Vec<_>>(),
        )
    };
    // A window over sub; jne; ret (6 bytes); the je to a slot in lb_pad's nops that leads to
    // the trampoline's copy of the ret.
    assert_eq!(p.exits("lb_loop"), ["+15 Ret window+jumps at +10 len 6 ins 3"]);
    assert_eq!(redirects("lb_loop"), (None, vec![(6, 2, 15, true)]));
    assert!(p.timed("lb_loop"));
    // jne; ret (3 bytes) as `jmp rel8` to a slot before the function, the je to another.
    assert_eq!(p.exits("lb_short"), ["+13 Ret window+jumps at +11 len 3 ins 2"]);
    assert_eq!(redirects("lb_short"), (Some(true), vec![(6, 2, 13, true)]));
    assert!(p.timed("lb_short"));
    assert_eq!(p.exits("lb_plain"), ["+13 Ret window at +8 len 6 ins 3"]);
    // lb_fall: mov; test; jne (6, the entry window) | ret (+6) | shr; test (+7) | je rel8 (+11)
    // | add (+13) | ret (+18): the first ret with nothing patched, the je to a slot, the entry
    // window's end (len 0) to the copy of the ret.
    assert_eq!(p.exits("lb_fall"), ["+6 Ret window+jumps at +6 len 0 ins 1", "+18 Ret window at +13 len 6 ins 2"]);
    assert_eq!(redirects("lb_fall"), (None, vec![(11, 2, 6, true), (6, 0, 6, false)]));
    assert!(p.timed("lb_fall"));
    let (i, _) = p.function("lb_fall");
    let x = p.plan.exits.iter().find(|x| x.function == i).expect("lb_fall exit");
    assert!(x.redirects[1].is_fall_through() && !x.redirects[0].is_fall_through());
    // The relocated jne of each run goes back to the loop's top in the program.
    for (name, top) in [("lb_loop", 8), ("lb_short", 8)] {
        let (i, f) = p.function(name);
        let x = p.plan.exits.iter().find(|x| x.function == i).expect("exit");
        let jne = x.displaced.iter().find(|d| d.is_jcc_short_or_near()).expect("jne in the run");
        assert_eq!(jne.near_branch_target(), f.address + top, "{name}");
    }
}

/// `table+jumps`: rg's errno-to-kind switch, `mov al, n; ret` cases packed after a relative
/// jump table's dispatch, fillers around them with no dead byte.
const TJ_S: &str = ".intel_syntax noprefix
.macro FILLER name
.globl \\name
.type \\name, @function
\\name:
.cfi_startproc
    call ext_fn
.rept 44
    add eax, 1
.endr
    ret
.cfi_endproc
.size \\name, .-\\name
.endm
.macro TABLE_FN name, guard
.globl \\name
.type \\name, @function
\\name:
.cfi_startproc
    add edi, -1
    \\guard
    mov al, 0x22
    lea rcx, [rip + .L\\name\\()_table]
    movsxd rdx, dword ptr [rcx + rdi * 4]
    add rdx, rcx
    jmp rdx
.L\\name\\()_1:
    mov al, 1
    ret
.L\\name\\()_default:
    mov al, 0x28
    ret
.L\\name\\()_2:
    mov al, 2
    ret
.L\\name\\()_3:
    mov al, 3
    ret
.cfi_endproc
.size \\name, .-\\name
.section .rodata
.p2align 2
.L\\name\\()_table:
    .long .L\\name\\()_1 - .L\\name\\()_table
    .long .L\\name\\()_default - .L\\name\\()_table
    .long .L\\name\\()_2 - .L\\name\\()_table
    .long .L\\name\\()_default - .L\\name\\()_table
    .long .L\\name\\()_3 - .L\\name\\()_table
.text
FILLER \\name\\()_filler
.endm
.text
.globl ext_fn
.type ext_fn, @function
ext_fn:
    ret
.size ext_fn, .-ext_fn
FILLER tj_filler0
TABLE_FN tj, \"cmp edi, 4; ja.d32 .Ltj_default\"
TABLE_FN tj_nobound, \"and edi, 3\"
";

#[test]
fn exit_tactics_table_jumps() {
    let dir = temp_dir("tj");
    let main = "int tj(int), tj_nobound(int);
        int main(int c, char **v) { (void)v; return tj(c) + tj_nobound(c); }";
    let p = Planned::new(&gcc(&dir, "tj", &[("main.c", main), ("tj.s", TJ_S)], &["-O1"]), false);
    // add edi, -1 (3); cmp edi, 4 (+3, 3) = the entry window | ja rel32 (+6, 6) | mov al (+12)
    // | lea (+14, 7) | movsxd (+21, 4) | add (+25) | jmp rdx (+28) | the cases (+30, +33, +36,
    // +39), 3 bytes each. The first takes the one slot the planner finds in reach;
    // for the others nothing is patched at them, the table entries lead to their
    // copies, the ja (rel32) to the default case's.
    assert_eq!(
        p.exits("tj"),
        [
            "+32 Ret jmp8+slot at +30 len 3 ins 2",
            "+35 Ret table+jumps at +33 len 0 ins 2",
            "+38 Ret table+jumps at +36 len 0 ins 2",
            "+41 Ret table+jumps at +39 len 0 ins 2",
        ]
    );
    assert!(p.timed("tj"));
    let (i, f) = p.function("tj");
    let exits: Vec<&Exit> = p.plan.exits.iter().filter(|x| x.function == i).collect();
    let entries = |x: &Exit| {
        x.redirects.iter().filter_map(|r| r.table.map(|add| (r.jump - add, r.to - f.address))).collect::<Vec<_>>()
    };
    // The table: entries 0..=4 (cmp edi, 4; ja), two of them to the default case.
    assert_eq!(entries(exits[0]), []);
    assert_eq!(entries(exits[1]), [(4, 33), (12, 33)]);
    assert_eq!(entries(exits[2]), [(8, 36)]);
    assert_eq!(entries(exits[3]), [(16, 39)]);
    let jumps: Vec<(u64, u64, u64)> = exits[1]
        .redirects
        .iter()
        .filter(|r| r.table.is_none())
        .map(|r| (r.jump - f.address, r.len, r.to - f.address))
        .collect();
    assert_eq!(jumps, [(6, 6, 33)]);
    // Without a `cmp; ja` guard before the table load the entries the program reads are not
    // known: no entry is rewritten, and the cases stay unpatched.
    assert!(!p.timed("tj_nobound"));
    let (i, _) = p.function("tj_nobound");
    assert!(p.plan.exits.iter().all(|x| x.function != i));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `import_refs` (one decoding shared by the GOT-wrap and import passes) keeps exactly what
/// those passes use from a full decoding of every function: the RIP-relative instructions on
/// a named GOT slot and the calls with an import callee, in order, and `None` for the same
/// functions; besides them only direct jumps to PLT stubs.
#[test]
fn import_refs_keep_what_the_import_passes_use() {
    let dir = temp_dir("import-refs");
    let mut bins = vec![
        gcc(&dir, "noplt", &[("t.c", C_SRC)], &["-O2", "-fno-plt"]),
        gcc(&dir, "plt", &[("t.c", C_SRC)], &["-O2"]),
    ];
    bins.extend(["/usr/bin/pigz", "/usr/bin/sqlite3"].iter().map(PathBuf::from).filter(|b| b.exists()));
    for bin in &bins {
        let data = std::fs::read(bin).expect("read binary");
        let elf = InputElf::parse(&data).expect("parse");
        let an = analyze(&elf).expect("analyze");
        let by_stub = Stubs::new(&an);
        let used = |x: &Instruction| {
            (x.is_ip_rel_memory_operand() && an.got_imports.contains_key(&x.ip_rel_memory_address()))
                || (is_call(x) && import_callee(&an, &by_stub, x).is_some())
        };
        let refs = import_refs(&elf, &an);
        assert_eq!(refs.len(), an.functions.len(), "{}", bin.display());
        let mut n_used = 0;
        for (f, kept) in an.functions.iter().zip(&refs) {
            let all = decode_at(&elf, f.address, f.size);
            let whole = all.last().map_or(f.address, |x| x.next_ip()) == f.end();
            assert_eq!(kept.is_some(), whole, "{}: {}", bin.display(), f.name);
            let Some(kept) = kept else { continue };
            let want: Vec<Instruction> = all.into_iter().filter(|x| used(x)).collect();
            let got: Vec<Instruction> = kept.iter().copied().filter(|x| used(x)).collect();
            assert_eq!(got, want, "{}: {}", bin.display(), f.name);
            n_used += want.len();
            for x in kept.iter().filter(|x| !used(x)) {
                assert!(
                    matches!(x.code(), Code::Jmp_rel32_64 | Code::Jmp_rel8_64)
                        && by_stub.by_address.contains_key(&x.near_branch_target()),
                    "{}: {}: kept {x}",
                    bin.display(),
                    f.name
                );
            }
        }
        assert!(n_used > 0, "{}: no import references", bin.display());
    }
}

/// Hub `ret`s and slots where no dead byte is in reach: a jump window over a compare-and-branch
/// chain, a jump of the entry window into a lone `ret`, an entry window stretched over a call.
const HUB_S: &str = r#"
    .intel_syntax noprefix
    .text
    .macro FUNC name
    .globl \name
    .type \name, @function
\name:
    .cfi_startproc
    .endm
    .macro END name
    .cfi_endproc
    .size \name, .-\name
    .endm
    .macro FILLER name
FUNC \name
    call ext
    .rept 40
    add eax, 1
    .endr
    ret
END \name
    .endm

    .p2align 4
FUNC ext
    lea eax, [rdi + 1]
    ret
END ext
    FILLER filler1
# `cmp; je .Ltwo; jb .Lret`: the jb (rel8) into the run add; ret has no slot in reach, and
# the instruction before it is the je: its jump window is cmp; je; jb.
FUNC chain
    push rbx
    mov ebx, edi
    call ext
    pop rbx
    cmp eax, 2
    je .Lchain_two
    jb .Lchain_ret
    add eax, 1000
.Lchain_ret:
    ret
.Lchain_two:
    mov eax, 7
    ret
END chain
    FILLER filler2
# The entry window (test; je; push) jumps to a lone ret only jumps reach: the entry
# trampoline's copy of the je leads to the exit trampoline.
FUNC entry_jump
    test edi, edi
    je .Lej_ret
    push rbx
    mov ebx, edi
    call ext
    add eax, ebx
    pop rbx
    add eax, 1000
    ret
.Lej_ret:
    ret
END entry_jump
    FILLER filler3
# pop rbx; ret at a jump target, no dead byte in reach: the entry window (push; mov; xor, 5
# bytes) grows over the call to 10, and its tail is the slot.
FUNC stretch_call
    push rbx
    mov ebx, edi
    xor eax, eax
    call ext
    test ebx, ebx
    je .Lsc_out
    add eax, ebx
.Lsc_out:
    pop rbx
    ret
END stretch_call
    FILLER filler4
# pop rbx; ret at a jump target, no dead byte in reach and no entry window that can grow: the
# run mov; imul; lea; add (11 bytes) moves to a piece, its tail is the slot.
FUNC evict
    push rbx
    mov ebx, edi
    call ext
    mov ecx, ebx
    imul ecx, ecx, 3
    lea edx, [rcx + rbx*2 + 100]
    add eax, edx
    test ebx, ebx
    je .Lev_out
    add eax, ebx
.Lev_out:
    pop rbx
    ret
END evict
    FILLER filler5
    .section .note.GNU-stack,"",@progbits
"#;

#[test]
fn exit_tactics_hub_chains_entry_jumps_call_stretch_slot_windows() {
    let dir = temp_dir("hub");
    let main =
        "int chain(int), entry_jump(int), stretch_call(int), evict(int), filler1(int), filler2(int), filler3(int),
        filler4(int), filler5(int);
        int main(int c, char **v) { (void)v; return chain(c) + entry_jump(c) + stretch_call(c) + evict(c) + filler1(c)
            + filler2(c) + filler3(c) + filler4(c) + filler5(c); }";
    let p = Planned::new(&gcc(&dir, "hub", &[("main.c", main), ("hub.s", HUB_S)], &["-O1"]), false);
    let exit_of = |name: &str, site: i64| {
        let (i, f) = p.function(name);
        let x =
            p.plan.exits.iter().find(|x| x.function == i && x.site as i64 - f.address as i64 == site).expect("exit");
        (f.address, x.clone())
    };
    // push rbx; mov ebx, edi; call ext (8) | pop rbx (+8) | cmp eax, 2 (+9, 3) | je rel8 (+12) |
    // jb rel8 (+14) | add eax, 1000 (+16, 5) | ret (+21) | mov eax, 7 (+22, 5) | ret (+27).
    assert_eq!(p.exits("chain"), ["+21 Ret window+jumps at +16 len 6 ins 2", "+27 Ret window at +22 len 6 ins 2"]);
    let (a, x) = exit_of("chain", 21);
    assert_eq!(x.redirects.len(), 1);
    let r = &x.redirects[0];
    assert_eq!((r.jump - a, r.len, r.to - a, r.slot, r.in_entry), (14, 2, 21, None, false));
    // The window: cmp; je; jb, the je kept with its own target.
    assert_eq!(r.patch(), (a + 9, 7));
    assert_eq!(r.window.iter().map(|w| w.ip() - a).collect::<Vec<_>>(), [9, 12, 14]);
    assert_eq!(r.window[1].near_branch_target(), a + 22);
    assert!(p.timed("chain"));
    // test edi, edi; je rel8 (+2); push rbx (+4) = the entry window | mov; call; add; pop (+5..+15)
    // | add eax, 1000 (+15, 5) | ret (+20) | ret (+21): nothing patched at the lone ret.
    assert_eq!(p.point("entry_jump").window_len, 5);
    assert_eq!(p.exits("entry_jump"), ["+20 Ret window at +15 len 6 ins 2", "+21 Ret window+jumps at +21 len 0 ins 1"]);
    let (a, x) = exit_of("entry_jump", 21);
    let r = &x.redirects[0];
    assert_eq!((r.jump - a, r.len, r.to - a, r.slot, r.in_entry), (2, 2, 21, None, true));
    assert!(r.window.is_empty());
    assert!(p.timed("entry_jump"));
    // push; mov; xor (5) | call ext (+5) | test (+10); je (+12); add (+14) | pop rbx (+16) | ret:
    // `jmp rel8` at pop to the slot in the entry window, stretched over the call.
    let e = p.point("stretch_call");
    assert_eq!((e.window_len, e.emulate_call, e.displaced.len()), (10, true, 4));
    assert_eq!(p.exits("stretch_call"), ["+17 Ret jmp8+slot at +16 len 2 ins 2"]);
    let (a, x) = exit_of("stretch_call", 17);
    assert_eq!(x.slot, Some(a + 5));
    assert!(p.timed("stretch_call"));
    // push; mov; call ext (8) | mov ecx, ebx (+8, 2); imul (+10, 3); lea (+13, 4); add (+17, 2)
    // | test (+19); je (+21); add (+23) | pop rbx (+25) | ret (+26): the run +8..+19 is a slot
    // window, the slot at +13, the only one.
    assert_eq!(p.exits("evict"), ["+26 Ret jmp8+slot at +25 len 2 ins 2"]);
    let (a, x) = exit_of("evict", 26);
    assert_eq!(x.slot, Some(a + 13));
    let windows: Vec<(u64, u64, usize)> = p
        .plan
        .slot_windows
        .iter()
        .map(|w| (w.patch().0, w.patch().1, w.displaced.len()))
        .filter(|w| w.0 >= a && w.0 < a + 27)
        .collect();
    assert_eq!(windows, [(a + 8, 11, 4)]);
    assert!(p.timed("evict"));
    // No other exit here needed one.
    assert_eq!(p.plan.slot_windows.len(), 1);
}

// ---- Slots from the end of dead bytes (issue 12, exitcov6). ----

/// gawk's `sub_450d30` and `sub_450d70`: `sl_prev`'s last `ret` (and the `mov` before it) are
/// jump targets with 2 bytes of padding: `jmp rel8` to a slot, whose only room in reach is
/// the 9 bytes of padding after `sl_next`'s `ret`, itself a jump target that needs 4 of them
/// for its window. Fillers without padding keep every other dead byte out of reach.
const SL_S: &str = r#"
    .intel_syntax noprefix
    .text
    .macro FUNC name
    .globl \name
    .type \name, @function
\name:
    .cfi_startproc
    .endm
    .macro END name
    .cfi_endproc
    .size \name, .-\name
    .endm
FUNC sl_fill1
    .rept 50
    add eax, 1
    .endr
    ret
END sl_fill1
FUNC sl_prev
    cmp edi, 0
    mov eax, 3
    jne .Lsp_ret
    cmp edi, 5
    je .Lsp_one
    lea eax, [rdi + rdi]
    add eax, 1
    ret
    .nops 4
.Lsp_one:
    mov eax, 1
.Lsp_ret:
    ret
END sl_prev
    .nops 2
FUNC sl_next
    cmp edi, 0
    mov eax, 3
    jne .Lsn_ret
    cmp edi, 7
    je .Lsn_ret
    lea eax, [rdi + 1]
    cmove eax, edi
.Lsn_ret:
    ret
END sl_next
    .nops 9
FUNC sl_fill2
    .rept 50
    add eax, 1
    .endr
    ret
END sl_fill2
    .section .note.GNU-stack,"",@progbits
"#;

#[test]
fn slots_from_the_end_of_dead_bytes() {
    let dir = temp_dir("sl");
    let main = "int sl_prev(int), sl_next(int), sl_fill1(int), sl_fill2(int);
        int main(int c, char **v) { (void)v; return sl_prev(c) + sl_next(c) + sl_fill1(c) + sl_fill2(c); }";
    let p = Planned::new(&gcc(&dir, "sl", &[("main.c", main), ("sl.s", SL_S)], &["-O1"]), false);
    // cmp; mov; jne (+8); cmp; je (+13); lea (+15); add (+18); ret (+21); nops (+22); mov
    // (+26); ret (+31); 2 bytes of padding.
    assert_eq!(p.exits("sl_prev"), ["+21 Ret window at +15 len 7 ins 3", "+31 Ret jmp8+slot at +31 len 2 ins 1"]);
    // cmp; mov; jne (+8); cmp; je (+13); lea (+15); cmove (+18); ret (+21), 9 bytes of padding:
    // the ret and 4 of them are its window, the slot is the last 5.
    assert_eq!(p.exits("sl_next"), ["+21 Ret window+padding at +21 len 5 ins 1"]);
    let (i, _) = p.function("sl_prev");
    let (_, next) = p.function("sl_next");
    let slot = p.plan.exits.iter().find(|x| x.function == i && x.slot.is_some()).and_then(|x| x.slot);
    assert_eq!(slot, Some(next.end() + 4));
    assert!(p.timed("sl_prev") && p.timed("sl_next"));
}

// ---- Aligned cold parts (issue 12, exitcov6): rule (f) of the analysis. ----

/// python3.11's `_PyType_CalculateMetaclass`: its unnamed part (an FDE, no symbol) is 16-byte
/// aligned and 64 bytes or more, as hand-written functions are, but has no `ret`, only
/// `ac_parent` enters it (at its start and in its middle), and it only jumps back into
/// `ac_parent`: a cold part, so `ac_parent`'s exits are its own and it is timed. `ac_ret`'s
/// part has the same shape and a `ret` of its own: a function (a hand-written one may be so).
const AC_S: &str = r#"
    .intel_syntax noprefix
    .text
    .macro FUNC name
    .globl \name
    .type \name, @function
\name:
    .cfi_startproc
    .endm
    .macro END name
    .cfi_endproc
    .size \name, .-\name
    .endm
    .macro ALIGNED_COLD name, leave
FUNC \name
    mov eax, edi
    test edi, edi
    je .L\name\()_cold
    cmp edi, 5
    je .L\name\()_mid
.L\name\()_back:
    add eax, 1000
    ret
END \name
    .section .text.unlikely
    .p2align 4
    .cfi_startproc
.L\name\()_cold:
    mov eax, 7
.L\name\()_mid:
    .rept 20
    add eax, 1
    .endr
    \leave
    .cfi_endproc
    .text
    .endm
ALIGNED_COLD ac_parent, "jmp .Lac_parent_back"
ALIGNED_COLD ac_ret, "ret"
    .section .note.GNU-stack,"",@progbits
"#;

#[test]
fn aligned_cold_part() {
    let dir = temp_dir("ac");
    let main = "int ac_parent(int), ac_ret(int);
        int main(int c, char **v) { (void)v; return ac_parent(c) + ac_ret(c); }";
    let p = Planned::new(&gcc(&dir, "ac", &[("main.c", main), ("ac.s", AC_S)], &["-O1"]), false);
    // The two parts, in .text.unlikely in the order of the functions: the only unnamed
    // ranges (FDEs without a symbol).
    let parts: Vec<&Function> = p.an.functions.iter().filter(|g| g.name.starts_with("sub_")).collect();
    assert_eq!(parts.len(), 2, "{:?}", parts.iter().map(|g| &g.name).collect::<Vec<_>>());
    let (pa, ra) = (parts[0], parts[1]);
    assert_eq!((pa.address & 15, ra.address & 15), (0, 0));
    assert!(pa.size >= 64 && ra.size >= 64);
    assert_eq!(pa.kind, FunctionKind::ColdPart { parent: Some(p.function("ac_parent").1.address) });
    assert_eq!(p.exits("ac_parent"), ["+24 Ret window at +19 len 6 ins 2"]);
    assert!(p.timed("ac_parent"));
    assert_eq!(ra.kind, FunctionKind::Function);
    assert!(!p.timed("ac_ret"));
}

// ---- Entry coverage (issue 12): indirect jumps the backward slice alone cannot resolve. ----

/// Jump tables whose base register the backward slice loses (several writes, loops), a
/// callback tail-called after the epilogue, and a jump whose base really is one of two tables.
/// Each table is `movsxd rax, [base + rax*4]; add rax, base; jmp rax` (a PIC switch); each
/// loop runs its table block once per count, so the program also runs.
const IJ_S: &str = r#"
    .intel_syntax noprefix
    .text
    .macro FUNC name
    .globl \name
    .type \name, @function
\name:
    .cfi_startproc
    .endm
    .macro END name
    .cfi_endproc
    .size \name, .-\name
    .endm

    .p2align 4
FUNC ext
    lea eax, [rdi + 1]
    ret
END ext
# The base is set once in the prologue, after r14 held the argument across a call: the lea
# dominates the table jump (only straight-line code and a returning call before it).
FUNC ij_dom
    push r14
    push rbx
    push rax
    mov ebx, edi
    mov r14, rdi
    mov rdi, r14
    call ext
    lea r14, [rip + .Ltab_dom]
    jmp .Ldom_head
.Ldom_a:
    sub ebx, 1
    jmp .Ldom_head
.Ldom_head:
    mov eax, ebx
    and eax, 1
    test ebx, ebx
    je .Ldom_done
    movsxd rax, dword ptr [r14 + rax*4]
    add rax, r14
    jmp rax
.Ldom_b:
    sub ebx, 1
    jmp .Ldom_head
.Ldom_done:
    mov eax, 7
    pop rcx
    pop rbx
    pop r14
    ret
END ij_dom
# A branch comes before the lea, so it does not dominate; forward propagation finds that
# every path into the table block brings the lea's value (the other path leaves).
FUNC ij_flow
    push r13
    push rbx
    push rax
    mov ebx, edi
    mov r13, rdi
    test edi, edi
    js .Lflow_neg
    lea r13, [rip + .Ltab_flow]
    jmp .Lflow_head
.Lflow_neg:
    mov rdi, r13
    call ext
    mov eax, -1
    jmp .Lflow_out
.Lflow_a:
    sub ebx, 1
    jmp .Lflow_head
.Lflow_head:
    mov eax, ebx
    and eax, 1
    test ebx, ebx
    je .Lflow_done
    movsxd rax, dword ptr [r13 + rax*4]
    add rax, r13
    jmp rax
.Lflow_b:
    sub ebx, 1
    jmp .Lflow_head
.Lflow_done:
    mov eax, 9
.Lflow_out:
    pop rcx
    pop rbx
    pop r13
    ret
END ij_flow
# ij_flow's shape with the address of its table block in a data word, aligned or not (`pad`
# bytes before it): code may enter there with any r13, so the jump stays unresolved.
    .macro FLOW_WORD name, pad
FUNC \name
    push r13
    push rbx
    push rax
    mov ebx, edi
    mov r13, rdi
    test edi, edi
    js .L\name\()_neg
    lea r13, [rip + .L\name\()_tab]
    jmp .L\name\()_head
.L\name\()_neg:
    mov eax, -1
    jmp .L\name\()_out
.L\name\()_a:
    sub ebx, 1
    jmp .L\name\()_head
.L\name\()_head:
    mov eax, ebx
    and eax, 1
    test ebx, ebx
    je .L\name\()_done
    movsxd rax, dword ptr [r13 + rax*4]
    add rax, r13
    jmp rax
.L\name\()_b:
    sub ebx, 1
    jmp .L\name\()_head
.L\name\()_done:
    mov eax, 9
.L\name\()_out:
    pop rcx
    pop rbx
    pop r13
    ret
END \name
    .section .rodata
    .p2align 2
.L\name\()_tab:
    .long .L\name\()_a - .L\name\()_tab
    .long .L\name\()_b - .L\name\()_tab
    .data
    .p2align 3
    .fill \pad, 1, 0
    .quad .L\name\()_head
    .text
    .endm
FLOW_WORD ij_word_al, 0
FLOW_WORD ij_word_un, 3
# Two tables reach the same jump: no single base; the jump stays unresolved.
FUNC ij_two
    push r12
    push rbx
    push rax
    mov ebx, edi
    lea r12, [rip + .Ltab_two]
    test edi, edi
    jns .Ltwo_head
    lea r12, [rip + .Ltab_two2]
    neg ebx
    jmp .Ltwo_head
.Ltwo_a:
    sub ebx, 1
    jmp .Ltwo_head
.Ltwo_head:
    mov eax, ebx
    and eax, 1
    test ebx, ebx
    je .Ltwo_done
    movsxd rax, dword ptr [r12 + rax*4]
    add rax, r12
    jmp rax
.Ltwo_b:
    sub ebx, 1
    jmp .Ltwo_head
.Ltwo_done:
    mov eax, 5
    pop rcx
    pop rbx
    pop r12
    ret
END ij_two
# A callback (the second argument) called in a loop, then tail-called after the epilogue:
# every write of rbx is an argument or a pointer.
FUNC ij_ptr
    push rbx
    push rbp
    push rax
    mov rbx, rsi
    mov rbp, rdi
    jmp .Lptr_check
.Lptr_loop:
    mov rdi, rbp
    call rbx
    sub rbp, 1
.Lptr_check:
    test rbp, rbp
    jg .Lptr_loop
    mov rdi, rbp
    mov rax, rbx
    pop rcx
    pop rbp
    pop rbx
    jmp rax
END ij_ptr
# A callback loaded by the parent and tail-called from its cold part after the epilogue's
# pop (python3.11's shape), and the same without the pop right before the jump.
    .macro COLD_TAIL name, before
FUNC \name
    push rbx
    .cfi_def_cfa_offset 16
    .cfi_offset rbx, -16
    mov rbx, rsi
    mov rax, [rdi + 8]
    test rax, rax
    jne .L\name\()_cold
    mov eax, ebx
    pop rbx
    .cfi_def_cfa_offset 8
    ret
END \name
FUNC \name\()_filler
    call ext
    .rept 20
    add eax, 1
    .endr
    ret
END \name\()_filler
    .section .text.unlikely
    .cfi_startproc
    .cfi_def_cfa_offset 16
    .cfi_offset rbx, -16
.L\name\()_cold:
    \before
    .cfi_def_cfa_offset 8
    jmp rax
    .cfi_endproc
    .text
    .endm
COLD_TAIL ij_cold_tail, "mov rsi, rbx; pop rbx"
COLD_TAIL ij_cold_nopop, "pop rbx; mov esi, 1"
FUNC fp_a
    lea eax, [rdi + 2]
    ret
END fp_a
FUNC fp_b
    lea eax, [rdi + 3]
    ret
END fp_b
# perl's `return PL_check[type](o)`: an entry of an array of function pointers in .data
# (other functions' starts), tail-called after the epilogue.
FUNC ij_fptab
    push rbx
    mov ebx, edi
    and ebx, 1
    lea rax, [rip + ij_fptrs]
    mov rax, [rax + rbx*8]
    mov edi, ebx
    pop rbx
    jmp rax
END ij_fptab
# perl's `jmp [PL_ppaddr + 8 * i]`: the same through a memory operand.
FUNC ij_fpmem
    and edi, 1
    lea rdx, [rip + ij_fptrs]
    jmp qword ptr [rdx + rdi*8]
END ij_fpmem
# The first word leads into the middle of a function: no function pointer, unresolved.
FUNC ij_fpmid
    and edi, 1
    lea rdx, [rip + ij_fpmid_words]
    jmp qword ptr [rdx + rdi*8]
END ij_fpmid
    .data
    .p2align 3
ij_fptrs:
    .quad fp_a
    .quad fp_b
    .quad 0
ij_fpmid_words:
    .quad fp_a + 1
    .quad fp_b

    .section .rodata
    .p2align 2
.Ltab_dom:
    .long .Ldom_a - .Ltab_dom
    .long .Ldom_b - .Ltab_dom
.Ltab_flow:
    .long .Lflow_a - .Ltab_flow
    .long .Lflow_b - .Ltab_flow
.Ltab_two:
    .long .Ltwo_a - .Ltab_two
    .long .Ltwo_b - .Ltab_two
.Ltab_two2:
    .long .Ltwo_b - .Ltab_two2
    .long .Ltwo_a - .Ltab_two2
    .section .note.GNU-stack,"",@progbits
"#;

fn indirect_jumps_program(tag: &str, flags: &[&str]) -> Planned {
    let dir = temp_dir(tag);
    let main = "int ij_dom(int), ij_flow(int), ij_two(int), ext(int);
        int ij_ptr(long, int (*)(int)), ij_cold_tail(void *, int), ij_cold_nopop(void *, int);
        int ij_fptab(int), ij_fpmem(int), ij_fpmid(int), ij_word_al(int), ij_word_un(int);
        int main(int c, char **v) { return ij_dom(c) + ij_flow(c) + ij_two(c) + ij_ptr(c, ext)
            + ij_cold_tail(v, c) + ij_cold_nopop(v, c) + ij_fptab(c) + ij_fpmem(c) + ij_fpmid(c)
            + ij_word_al(c) + ij_word_un(c); }";
    Planned::new(&gcc(&dir, "ij", &[("main.c", main), ("ij.s", IJ_S)], flags), false)
}

/// The kinds of the indirect jumps of `name`, in address order.
fn jump_kinds(p: &Planned, name: &str) -> Vec<IndirectJump> {
    let (_, f) = p.function(name);
    p.an.indirect_jumps.range(f.address..f.end()).map(|(_, k)| *k).collect()
}

#[test]
fn entry_indirect_jumps_pie() {
    let p = indirect_jumps_program("ij-pie", &["-O1", "-fPIE", "-pie"]);
    for name in ["ij_dom", "ij_flow"] {
        assert_eq!(jump_kinds(&p, name), [IndirectJump::Table], "{name}");
        assert!(!p.function(name).1.unresolved_indirect_jump, "{name}");
        assert_eq!(p.point(name).tactic, Tactic::Window, "{name}");
    }
    // Both table targets of each are branch targets.
    for (name, cases) in [("ij_dom", [".Ldom_a", ".Ldom_b"]), ("ij_flow", [".Lflow_a", ".Lflow_b"])] {
        let (_, f) = p.function(name);
        let inside = p.an.branch_targets.range(f.address + 1..f.end()).count();
        assert!(inside >= cases.len(), "{name}: {inside} targets");
    }
    assert_eq!(jump_kinds(&p, "ij_ptr"), [IndirectJump::TailCall]);
    assert!(!p.function("ij_ptr").1.unresolved_indirect_jump);
    assert_eq!(p.point("ij_ptr").tactic, Tactic::Window);
    // Two possible bases: refused.
    assert_eq!(jump_kinds(&p, "ij_two"), [IndirectJump::Unresolved]);
    check_data_words(&p);
    let (i, _) = p.function("ij_two");
    let skipped = p.plan.skipped.iter().find(|s| s.function == i).expect("ij_two is skipped");
    assert_eq!(skipped.reason, SkipReason::UnresolvedIndirectJump);
    check_cold_tails(&p);
    check_pointer_tables(&p);
}

/// A jump through a table of function pointers in `.data` is a tail call: the function's
/// entry is patched and its tail jump is an exit (timed); a table whose first word leads into
/// the middle of a function stays unresolved.
fn check_pointer_tables(p: &Planned) {
    for name in ["ij_fptab", "ij_fpmem"] {
        assert_eq!(jump_kinds(p, name), [IndirectJump::TailCall], "{name}");
        assert!(!p.function(name).1.unresolved_indirect_jump, "{name}");
        assert!(p.timed(name), "{name}");
        let exits = p.exits(name);
        assert!(
            exits.len() == 1 && exits[0].contains("TailJump") && !exits[0].contains("skipped"),
            "{name}: {exits:?}"
        );
    }
    assert_eq!(jump_kinds(p, "ij_fpmid"), [IndirectJump::Unresolved]);
    assert!(p.function("ij_fpmid").1.unresolved_indirect_jump);
}

/// A data word holding the address of the table block (a relocation's value in a PIE, a
/// word of the file in a fixed-address program, at an aligned place or not) is a way in with
/// any base: no conclusion, the jump stays unresolved and the entry unpatched.
fn check_data_words(p: &Planned) {
    for name in ["ij_word_al", "ij_word_un"] {
        assert_eq!(jump_kinds(p, name), [IndirectJump::Unresolved], "{name}");
        let (i, _) = p.function(name);
        let skipped = p.plan.skipped.iter().find(|s| s.function == i);
        assert_eq!(skipped.map(|s| &s.reason), Some(&SkipReason::UnresolvedIndirectJump), "{name}");
    }
}

/// In a fixed-address program, data words pointing into a function have no relocations: the
/// forward propagation counts every word of the file that reads as an address in the
/// function as a way in, and resolves ij_flow as in a PIE (gawk's `sub_46f080`).
#[test]
fn entry_indirect_jumps_non_pie() {
    let p = indirect_jumps_program("ij-nopie", &["-O1", "-fno-pie", "-no-pie"]);
    assert_eq!(jump_kinds(&p, "ij_dom"), [IndirectJump::Table]);
    assert_eq!(jump_kinds(&p, "ij_flow"), [IndirectJump::Table]);
    assert!(!p.function("ij_flow").1.unresolved_indirect_jump);
    assert_eq!(p.point("ij_flow").tactic, Tactic::Window);
    check_data_words(&p);
    assert_eq!(jump_kinds(&p, "ij_ptr"), [IndirectJump::TailCall]);
    assert_eq!(jump_kinds(&p, "ij_two"), [IndirectJump::Unresolved]);
    check_cold_tails(&p);
    check_pointer_tables(&p);
}

/// `ij_cold_tail`'s cold part ends `mov rsi, rbx; pop rbx; jmp rax`, `rax` loaded by the
/// parent: a tail call right after the epilogue's pop, an exit of the parent, which is timed.
/// `ij_cold_nopop` ends `pop rbx; mov esi, 1; jmp rax`: unresolved, untimed.
fn check_cold_tails(p: &Planned) {
    let cold_jump = |name: &str| {
        let (_, f) = p.function(name);
        let cold =
            p.an.functions
                .iter()
                .find(|g| g.kind == FunctionKind::ColdPart { parent: Some(f.address) })
                .unwrap_or_else(|| panic!("{name}'s cold part"));
        p.an.indirect_jumps.range(cold.address..cold.end()).map(|(&a, &k)| (a - cold.address, k)).collect::<Vec<_>>()
    };
    assert_eq!(cold_jump("ij_cold_tail"), [(4, IndirectJump::TailCall)]);
    assert!(p.timed("ij_cold_tail"));
    let (i, _) = p.function("ij_cold_tail");
    let kinds: Vec<ExitKind> = p.plan.exits.iter().filter(|x| x.function == i).map(|x| x.kind).collect();
    assert_eq!(kinds, [ExitKind::Ret, ExitKind::TailJump]);
    assert_eq!(cold_jump("ij_cold_nopop"), [(6, IndirectJump::Unresolved)]);
    assert!(!p.timed("ij_cold_nopop"));
}

// ---- Entry windows with branch targets inside, and tiny functions before nops (issue 12,
// entry99). ----

/// One function per shape: `ew_jmp8` (`xor eax, eax; jmp .Lcheck; T:`), `ew_loop` (`push rbx;
/// mov rbx, rdi; T:`, a loop back to after the prologue by `jg rel8`), `ew_cmp` (`xor eax,
/// eax; T: cmp …`), `ew_far` (as `ew_loop`, its back edge a `jg rel32`); refused: `ew_taken`
/// (its target's address is taken: not only jumps reach it) and `ew_retin` (the target inside
/// the window is its `ret`, which the entry tail cannot run); `tn_ret`, a lone `ret` before
/// 7 bytes of nops and a `ud2` that no function owns (so no padding of its own).
const EW_S: &str = r#"
    .intel_syntax noprefix
    .text
    .macro FUNC name
    .globl \name
    .type \name, @function
\name:
    .cfi_startproc
    .endm
    .macro END name
    .cfi_endproc
    .size \name, .-\name
    .endm

    .p2align 4
FUNC ew_leaf
    mov eax, edi
    add eax, 1
    ret
END ew_leaf

    .p2align 4
FUNC ew_jmp8
    xor eax, eax
    jmp .Lj8_check
.Lj8_loop:
    add eax, edi
    sub edi, 1
.Lj8_check:
    test edi, edi
    jg .Lj8_loop
    ret
END ew_jmp8

    .p2align 4
FUNC ew_loop
    push rbx
    .cfi_def_cfa_offset 16
    .cfi_offset rbx, -16
    mov rbx, rdi
.Lloop_top:
    mov rdi, rbx
    call ew_leaf
    sub rbx, 1
    jg .Lloop_top
    pop rbx
    .cfi_def_cfa_offset 8
    ret
END ew_loop

    .p2align 4
FUNC ew_cmp
    xor eax, eax
.Lcmp_top:
    cmp rax, rdi
    jge .Lcmp_done
    add rax, 1
    jmp .Lcmp_top
.Lcmp_done:
    ret
END ew_cmp

    .p2align 4
FUNC ew_far
    push rbx
    .cfi_def_cfa_offset 16
    .cfi_offset rbx, -16
    mov rbx, rdi
.Lfar_top:
    mov rdi, rbx
    call ew_leaf
    .skip 130, 0x90
    sub rbx, 1
    jg .Lfar_top
    pop rbx
    .cfi_def_cfa_offset 8
    ret
END ew_far

    .p2align 4
FUNC ew_taken
    push rbx
    .cfi_def_cfa_offset 16
    .cfi_offset rbx, -16
    mov rbx, rdi
.Ltk_top:
    sub rbx, 1
    jg .Ltk_top
    lea rax, [rip + .Ltk_top]
    xor eax, eax
    pop rbx
    .cfi_def_cfa_offset 8
    ret
END ew_taken

    .p2align 4
FUNC ew_retin
    test esi, esi
    jne .Lri_body
.Lri_ret:
    ret
.Lri_body:
    mov eax, edi
    test edi, edi
    je .Lri_ret
    add eax, esi
    ret
END ew_retin

    .p2align 4
FUNC tn_ret
    ret
END tn_ret
    .p2align 3
    ud2
    .p2align 4
    .section .note.GNU-stack,"",@progbits
"#;

fn entry_windows_program(tag: &str, flags: &[&str]) -> Planned {
    let dir = temp_dir(tag);
    let main = "int ew_jmp8(int), ew_loop(long), ew_cmp(long), ew_far(long), ew_taken(long), ew_retin(int, int);
        void tn_ret(void);
        int main(int c, char **v) { (void)v; tn_ret();
            return ew_jmp8(c) + ew_loop(c) + ew_cmp(c) + ew_far(c) + ew_taken(c) + ew_retin(c, c); }";
    Planned::new(&gcc(&dir, "ew", &[("main.c", main), ("ew.s", EW_S)], flags), false)
}

/// The entry of `name`: its tactic, window length and, per jump led to its entry tail,
/// (jump offset, length, target offset, slot or window).
fn entry_jumps(p: &Planned, name: &str) -> (Tactic, u64, Vec<String>) {
    let (_, f) = p.function(name);
    let point = p.point(name);
    let off = |a: u64| a as i64 - f.address as i64;
    let jumps = p.plan.entry_jumps.get(&point.id).into_iter().flatten().map(|r| {
        let how = match (r.slot, r.window.is_empty()) {
            (Some(_), _) => "slot",
            (None, false) => "window",
            (None, true) => "rel32",
        };
        format!("{:+} len {} to {:+} {how}", off(r.jump), r.len, off(r.to))
    });
    (point.tactic, point.window_len, jumps.collect())
}

fn check_entry_windows(p: &Planned) {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    // xor eax, eax (2); jmp rel8 (2); T: add eax, edi (2) — the back edge jg rel8 at +13.
    assert_eq!(entry_jumps(p, "ew_jmp8"), (Tactic::WindowJumps, 6, s(&["+11 len 2 to +4 slot"])));
    // push rbx (1); mov rbx, rdi (3); T: mov rdi, rbx (3) — jg rel8 at +16.
    assert_eq!(entry_jumps(p, "ew_loop"), (Tactic::WindowJumps, 7, s(&["+16 len 2 to +4 slot"])));
    // xor eax, eax (2); T: cmp rax, rdi (3) — jmp rel8 at +11.
    assert_eq!(entry_jumps(p, "ew_cmp"), (Tactic::WindowJumps, 5, s(&["+11 len 2 to +2 slot"])));
    // The back edge over 130 bytes: jg rel32 at +146, its displacement changed.
    assert_eq!(entry_jumps(p, "ew_far"), (Tactic::WindowJumps, 7, s(&["+146 len 6 to +4 rel32"])));
    let skipped = |name: &str| {
        let (i, f) = p.function(name);
        let s = p.plan.skipped.iter().find(|s| s.function == i).unwrap_or_else(|| panic!("{name} is patched"));
        reason(&s.reason, f)
    };
    assert_eq!(skipped("ew_taken"), "branch target +4");
    assert_eq!(skipped("ew_retin"), "branch target +4");
    // A lone ret: the window takes 4 of the 7 nop bytes after it.
    let t = p.point("tn_ret");
    assert_eq!((t.tactic, t.window_len, t.displaced.len()), (Tactic::WindowPadding, JMP_LEN, 1));
    assert_eq!(p.function("tn_ret").1.padding, 0, "the gap up to the next function is not all padding");
    // The exits of these are patched, so they are timed. (ew_cmp's `ret` is the target of its
    // jge rel8 and follows its jmp: whether an exit tactic finds it a slot depends on the
    // layout, and it is not this test's subject.)
    for name in ["ew_jmp8", "ew_loop", "ew_far", "tn_ret"] {
        assert!(p.timed(name), "{name}: {:?}", p.exits(name));
    }
}

#[test]
fn entry_windows_with_targets_pie() {
    check_entry_windows(&entry_windows_program("ew-pie", &["-O1", "-fPIE", "-pie"]));
}

#[test]
fn entry_windows_with_targets_non_pie() {
    check_entry_windows(&entry_windows_program("ew-nopie", &["-O1", "-fno-pie", "-no-pie"]));
}

// ---- Exit coverage of the 16 corpus programs (issue 12): slot windows before a later exit. ----

/// cppcheck's `std::function` managers: the first `ret` has 3 bytes from a jump target, and
/// no dead byte in reach; the only run to move out for a slot (`lea; mov`, 10 bytes) lies
/// before the second `ret`, whose own window then needs the padding after it.
const MGR_S: &str = r#"
    .intel_syntax noprefix
    .text
    .macro FUNC name
    .globl \name
    .type \name, @function
\name:
    .cfi_startproc
    .endm
    .macro END name
    .cfi_endproc
    .size \name, .-\name
    .endm
    .macro FILLER name
FUNC \name
    call ext
    .rept 40
    add eax, 1
    .endr
    ret
END \name
    .endm
    .macro MANAGER name
FUNC \name
    test edx, edx
    je 2f
    cmp edx, 1
    jne 1f
    mov [rdi], rsi
1:
    xor eax, eax
    ret
2:
    lea rax, [rip + ext]
    mov [rdi], rax
    xor eax, eax
    ret
    .endm

    .p2align 4
FUNC ext
    lea eax, [rdi + 1]
    ret
END ext
    FILLER mgr_filler1
# xor; ret; nop3: 6 bytes for the second exit's window with the run moved out.
    MANAGER mgr
    nop dword ptr [rax]
END mgr
    FILLER mgr_filler2
# No padding: the second exit's window needs the run, which therefore stays.
    MANAGER mgr_tight
END mgr_tight
    FILLER mgr_filler3
# python3.11's callbacks: the tail jump's window would take in the je, the only way into the
# cold part's xor; ret; with the padding after it, the je stays and is retargeted.
    .p2align 4
FUNC cb
    mov rdi, [rdi + 8]
    mov rax, rsi
    mov rsi, rdx
    test rdi, rdi
    je .Lcb_cold
    jmp rax
END cb
    .nops 8
FUNC after_cb
    lea eax, [rdi + 2]
    ret
END after_cb
# The cold part as a stripped program has it: an FDE, no symbol; code right before and after it.
    .section .text.unlikely
    FILLER cb_filler0
.Lcb_cold:
    .cfi_startproc
    xor eax, eax
    ret
    .cfi_endproc
    FILLER cb_filler
    .text
    .section .note.GNU-stack,"",@progbits
"#;

/// [`MGR_S`] built with a `main` that calls every function, planned; and its directory.
fn mgr_program(tag: &str) -> (TempDir, Planned) {
    let dir = temp_dir(tag);
    let main = "int mgr(void **, void *, int), mgr_tight(void **, void *, int), mgr_filler1(int), mgr_filler2(int),
        mgr_filler3(int), cb(void **, int (*)(int), int), after_cb(int);
        int main(int c, char **v) { void *p = 0; return mgr(&p, v, c) + mgr_tight(&p, v, c) + mgr_filler1(c)
            + mgr_filler2(c) + mgr_filler3(c) + cb(&p, after_cb, c); }";
    let p = Planned::new(&gcc(&dir, "mgr", &[("main.c", main), ("mgr.s", MGR_S)], &["-O1"]), false);
    (dir, p)
}

#[test]
fn exit_slot_window_before_a_later_exit_with_room() {
    let (_dir, p) = mgr_program("mgr");
    // test edx, edx; je rel8 (+2); cmp edx, 1 (+4) = the entry window | jne rel8 (+7) | mov
    // [rdi], rsi (+9) | xor eax, eax (+12, a jump target) | ret (+14) | lea rax, [rip+ext] (+15,
    // 7, a jump target) | mov [rdi], rax (+22) | xor eax, eax (+25) | ret (+27) | nop3 (+28).
    for name in ["mgr", "mgr_tight"] {
        assert_eq!(p.point(name).window_len, 7, "{name}");
    }
    // The run lea; mov moves out; its tail (+20) is the first exit's slot; the second exit's
    // window is xor; ret and 2 bytes of the padding.
    assert_eq!(p.exits("mgr"), ["+14 Ret jmp8+slot at +12 len 3 ins 2", "+27 Ret window+padding at +25 len 5 ins 2"]);
    let (i, f) = p.function("mgr");
    let a = f.address;
    let first = p.plan.exits.iter().find(|x| x.function == i && x.site == a + 14).expect("exit");
    assert_eq!(first.slot, Some(a + 20));
    let windows: Vec<(u64, u64, usize)> = p
        .plan
        .slot_windows
        .iter()
        .map(|w| (w.patch().0, w.patch().1, w.displaced.len()))
        .filter(|w| w.0 >= a && w.0 < a + 31)
        .collect();
    assert_eq!(windows, [(a + 15, 10, 2)]);
    assert!(p.timed("mgr"));
    // Without the padding, moving the run out would leave the second exit 3 bytes: no slot,
    // so the first exit stays unpatched and the function untimed, as before.
    assert_eq!(
        p.exits("mgr_tight"),
        [
            "+14 Ret skipped: branch target +12",
            "+27 Ret skipped: another exit of the function cannot be patched (fits window)"
        ]
    );
    assert!(!p.timed("mgr_tight"));
    assert_eq!(p.plan.slot_windows.len(), 1);
}

#[test]
fn exit_tail_jump_leaves_a_jcc_into_the_cold_part_to_its_exit() {
    let (_dir, p) = mgr_program("mgr-cb");
    // mov rdi, [rdi+8] (4); mov rax, rsi (+4, 3) = the entry window | mov rsi, rdx (+7) | test
    // (+10) | je rel32 (+13, 6) | jmp rax (+19, 2) | 8 bytes of padding. The cold part: xor eax,
    // eax; ret, entered only by the je.
    assert_eq!(p.point("cb").window_len, 7);
    let (i, f) = p.function("cb");
    let cold =
        p.an.functions
            .iter()
            .find(|g| g.kind == FunctionKind::ColdPart { parent: Some(f.address) })
            .expect("cb's cold part");
    let c = cold.address as i64 - f.address as i64;
    let mut want = vec![
        "+19 TailJump window+padding at +19 len 5 ins 1".to_string(),
        format!("{:+} Ret retarget at {c:+} len 0 ins 2", c + 2),
    ];
    want.sort_by_key(|r| r.split(' ').next().and_then(|o| o.parse::<i64>().ok()));
    assert_eq!(p.exits("cb"), want);
    let x = p.plan.exits.iter().find(|x| x.function == i && x.tactic == Tactic::Retarget).expect("retarget");
    assert_eq!(x.retargets, [(f.address + 13, 6)]);
    assert!(p.timed("cb"));
}

/// The plan of a real program (sqlite3, on a machine that has it; else the hub program) is the
/// same with 1 and with 4 threads, with and without traps. The exit sites and dead bytes are
/// found on the other cores ahead of the tactics (`par::pipeline`); the tactics take slots,
/// stretch entry windows and move runs out in point order, each exit's choice changing what the
/// next one finds, so a scan that depended on the tactics before it would show here.
#[test]
fn one_thread_and_four_give_the_same_plan() {
    let dir = temp_dir("threads");
    let bin = match std::fs::metadata("/usr/bin/sqlite3") {
        Ok(_) => PathBuf::from("/usr/bin/sqlite3"),
        Err(_) if std::env::var_os("CI").is_none() => {
            let main = "int chain(int), entry_jump(int), stretch_call(int), evict(int), filler1(int),
                filler2(int), filler3(int), filler4(int), filler5(int);
                int main(int c, char **v) { (void)v; return chain(c) + entry_jump(c) + stretch_call(c)
                    + evict(c) + filler1(c) + filler2(c) + filler3(c) + filler4(c) + filler5(c); }";
            gcc(&dir, "hub", &[("main.c", main), ("hub.s", HUB_S)], &["-O1"])
        }
        Err(e) => panic!("/usr/bin/sqlite3: {e} (CI installs sqlite3)"),
    };
    let data = std::fs::read(&bin).expect("read binary");
    let elf = InputElf::parse(&data).expect("parse");
    let an = analyze(&elf).expect("analyze");
    let spec = Spec::default_spec();
    for traps in [false, true] {
        let opts = PlanOptions { shadow_stack: false, traps };
        let run = |threads| crate::par::with_threads(threads, || plan(&elf, &an, &spec, opts));
        let (one, four) = (run(1), run(4));
        // The exits share what the tactics hand out: slots, stretched entry windows.
        let slotted = one.exits.iter().filter(|x| x.slot.is_some()).count();
        assert!(slotted > 0, "traps {traps}: no exit took a slot");
        assert_eq!(one.exits.len(), four.exits.len(), "traps {traps}: exits");
        assert!(format!("{one:?}") == format!("{four:?}"), "traps {traps}: plans differ");
    }
}
