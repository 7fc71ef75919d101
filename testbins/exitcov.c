// exitcov: one function per exit tactic of the planner (rewriter/core/src/plan.rs), written in
// assembly so their shapes do not depend on the compiler; tests/it/exitcov.rs checks the
// tactic each exit gets, and that the rewritten program counts and times every one of them.
//
// - tiny_ret: xor eax, eax; ret, then padding: the entry window runs over the padding and
//   displaces the ret ("entry+exit": the entry trampoline runs the exit instrumentation).
// - stretch_ret: mov eax, 7; add eax, edi; ret: the 5-byte entry window is stretched to the
//   ret ("entry+exit").
// - stretch_tail: mov esi, 3; jmp spin_c: the entry window is stretched over the tail jump.
// - short_epi: -O0 style `call spin_a; leave; ret`, the next function right after it: the
//   leave is a return address, so the exit has 2 bytes: `jmp rel8` to a slot ("jmp8+slot")
//   that the entry window of prologue_fn (the next function), stretched over its stores,
//   leaves. filler_a before it and filler_b after after_nops (40 x `add eax, 1`, no
//   padding) keep every other dead byte out of rel8 reach.
// - prologue_fn: push rbp; mov rbp, rsp; sub rsp, 32; stores; a branch: its entry window
//   cannot reach an exit, but may grow over the stores (11 bytes).
// - short_nops: `pop rbx; ret` at a jump target, the next function right after it: jmp rel8
//   to a slot in the alignment nops inside the function ("jmp8+slot").
// - after_nops: mov eax, edi; imul eax, eax; ret ("entry+exit").
// - retarget_fn: a lone ret after a ret, the next function right after it, reached only by a
//   `je rel32`: the je is retargeted to the exit trampoline ("retarget"); main calls it with
//   0 and 1, so both rets run 50 times.
// - jw32: `pop rbx; test; je rel32 .L; add eax, 1000; .L: ret`: the ret is a jump target that
//   add falls into: a window over add; ret, and the je led to the trampoline's copy of the ret
//   ("window+jumps"); called with 0 and 1, so both paths run 50 times.
// - jw8: the same with `je rel8` and `add eax, 5` (3 bytes): `jmp rel8` over add; ret to a
//   slot in the nops after jw_pad, the je to another slot there ("window+jumps").
// - jw_only: a lone ret after a ret reached only by a `je rel8`: nothing patched at the ret,
//   the je led to a slot that leads to the trampoline ("window+jumps"); jw_end right after it
//   leaves no padding.
// - jw_far: `cmp eax, 0; je rel8 .L; add eax, 1000; .L: ret` with no dead byte in the je's
//   reach (jw_pad's nops are used up, jw_far_filler's entry window is a call): a window over
//   add; ret, and `cmp; je` a window of its own whose piece runs the je as a rel32 to the
//   copy of the ret ("window+jumps").
// - jw_chain: `cmp eax, 1; je .Lone; jb .Lret; add eax, 1000; .Lret: ret` with no dead byte in
//   the jb's reach (the fillers around start with a call): the jb's window takes in cmp and
//   the je, whose piece runs the je to its own target ("window+jumps"); called with 0, 1, 2.
// - jw_entry: `test edi, edi; je .Lret; push rbx` is the entry window, .Lret a lone ret only
//   that je reaches: the entry trampoline's copy of the je leads to the exit trampoline
//   ("window+jumps", nothing patched at the ret).
// - st_call: `pop rbx; ret` at a jump target with no dead byte in reach: the entry window
//   (push; mov; xor) grows over the call after it to 10 bytes, its tail is the slot
//   ("jmp8+slot"); st_call_filler (44 x `add eax, 1`) keeps the padding after it out of reach.
// - ev_slot: `pop rbx; ret` at a jump target, no dead byte in reach, its entry window a call:
//   the run `mov ecx, ebx; imul; lea; add` (11 bytes) moves to a piece that runs it and jumps
//   back, and its dead tail is the slot ("jmp8+slot" with a slot window).
// - ev_exit: a `std::function` manager (`test edx, edx; je .Lcopy; cmp edx, 1; jne .Lret;
//   mov [rdi], rsi; .Lret: xor eax, eax; ret; .Lcopy: lea rax, [rip+x]; mov [rdi], rax; xor
//   eax, eax; ret; nop3`), no dead byte in reach: `lea; mov` (10 bytes) before the second ret
//   moves to a piece and leaves the slot of the first exit ("jmp8+slot"), since the second
//   keeps xor; ret and the 3 bytes of padding after it, 6 bytes, for its own window
//   ("window+padding"); ev_exit_filler keeps the padding after it out of reach. Called with
//   op 0, 1 and 2: the copy, the store and neither.
// - cold_cb: python3.11's callbacks, `mov rdi, [rdi+8]; mov rax, rsi; mov rsi, rdx; test rdi,
//   rdi; je .Lcold; jmp rax`, 8 bytes of padding, .Lcold (`xor eax, eax; ret`, an FDE and no
//   symbol in .text.unlikely between two fillers) reached only by the je: the tail jump's
//   window is the jmp and the padding ("window+padding"), so that the je stays and its rel32
//   leads to the cold ret's trampoline ("retarget"). Called 50 times each way; cb_target is
//   the tail-called function.
// - ctc32: `mov eax, edi; and eax, 1` (the entry window); `test eax, eax; jne spin_e` (a
//   conditional tail call, rel32); `mov eax, 3; ret`: the jne's rel32 leads to an exit
//   trampoline that closes the frame and jumps to spin_e ("jcc+exit"); called with 0 and 1.
// - ctc8: the same with a `jne rel8` to ctc_target right after it (8 bytes of nops between):
//   the jne leads to a slot in those nops that leads to the trampoline ("jcc+exit").
//   ctc_target (`mov eax, edi; jmp spin_e`) is stretched to its tail jump ("entry+exit").
// - tiny_xor (xor eax, eax; ret), tiny_mov (mov eax, edi; ret), tiny_jmp (jmp rel8 to tiny_mov)
//   and tiny_ret1 (ret, then 2 bytes of nops), packed: no entry window fits, so each entry is
//   `jmp rel8` to a slot in the tail of slot_host's entry window (5 x mov eax, imm32; ret,
//   stretched to its ret), whose trampoline runs the function ("jmp8+slot" entries, each exit
//   "entry+exit").
// - tab_case: rg's errno-to-kind switch: `add edi, -1; cmp edi, 6; ja .Ldefault`, a
//   relative jump table (`lea rcx, [rip+T]; movsxd rdx, [rcx+rdi*4]; add rdx, rcx; jmp rdx`,
//   7 entries in .rodata, two of them to the default case) and packed cases `mov al, n; ret`
//   between two fillers, with no dead byte in reach for all of them: the table entries that
//   lead to a case are rewritten to lead to its trampoline ("table+jumps"; the ja, rel8, to
//   the default case through a slot). Called with 0..7 (0 and 7 take the ja).
// - pop_tail: `push rbx; mov rbx, rsi; mov rax, [rdi+8]; test rax, rax; jne .Lcold; mov eax,
//   ebx; pop rbx; ret`, .Lcold (an FDE and no symbol in .text.unlikely) `mov rsi, rbx; pop
//   rbx; jmp rax`: the callback's pointer comes from the parent, so only the `pop` before the
//   jump says it is a tail call (as in python3.11's cold parts); its window is the exit
//   ("window"). Called 50 times each way (cb_target, or the NULL pointer).
// - loop_ret: `test ecx, ecx; je .Lret; .Ltop: add eax, ecx; sub ecx, 1; jne .Ltop; .Lret:
//   ret`, a filler right after it: the loop falls into the ret that the je reaches, and every
//   run ending at the ret takes in the back edge. Last resort: a window over `sub; jne; ret`
//   (each iteration passes through the trampoline, the jne relocated back to .Ltop) and the
//   je led to a slot in the nops before it ("window+jumps"). Called with 0..49 twice.
// - fall_ret: rg's drop glue, `mov eax, edi; test al, 1; jne .Lmore` (the entry window),
//   `.Lret: ret` right after it, and a later `je .Lret`: nothing is patched at the ret, the
//   entry trampoline's jump back at its window's end and the je (through a slot in the nops
//   before it) lead to the exit trampoline ("window+jumps"); the other exit, `add eax, 1000;
//   ret`, is a window. Called with 0..99: 50 fall through, 25 take the je, 25 the add.
// - fp_tail: perl's `return PL_check[type](o)`: `lea rax, [rip+fp_table]; mov rax, [rax+rbx*8];
//   mov edi, ebx; pop rbx; jmp rax`, fp_table an array of function pointers (fpt_a, fpt_b) in
//   .data: a tail call through it, not an unresolved jump table, so the entry is patched and
//   the jump is an exit ("window"). Called with 0..99, 50 times each way.
// - flow_tab: gawk's PIC switch whose base register holds the argument until a branch, then
//   the table's `lea`: `mov r13, rdi; test edi, edi; js .Lneg; lea r13, [rip+.Ltab]`, a loop
//   through `movsxd rax, [r13+rax*4]; add rax, r13; jmp rax`. Forward propagation over the
//   function finds the lea's value on every path to the jump (in the fixed-address variant
//   with every word of the file that reads as an address in it counted as a way in), so the
//   table is resolved and the entry patched ("window"). Called with -1..8, 10 times each.
// - ac_fn: python3.11's `_PyType_CalculateMetaclass`, whose unnamed part (an FDE, no symbol,
//   in .text.unlikely) is 16-byte aligned and 64 bytes or more as hand-written functions are:
//   `test edi, edi; je .Lcold; cmp edi, 5; je .Lmid; .Lback: add eax, 1000; ret`, the part
//   `mov eax, 7; .Lmid: 20 x add eax, 1; jmp .Lback`. No `ret` in it, only ac_fn enters it and
//   it only jumps back into ac_fn: a cold part (rule (f) of the analysis), so the ret is ac_fn's
//   one exit ("window") and ac_fn is timed. Called with 0..9 ten times: 10 calls through the
//   part's start, 10 through its middle.
// spin_a, spin_b, spin_c, spin_d and spin_e spin a fixed loop, so the functions that call them take time.
//
//# variants: pie-O2 nopie-O0
//# expect: threads 1
//# expect: main calls tiny_ret 1000
//# expect: main calls stretch_ret 1000
//# expect: main calls stretch_tail 100
//# expect: main calls short_epi 100
//# expect: main calls prologue_fn 100
//# expect: main calls short_nops 100
//# expect: main calls after_nops 100
//# expect: main calls filler_a 100
//# expect: main calls filler_b 100
//# expect: main calls retarget_fn 100
//# expect: main calls spin_a 200
//# expect: main calls spin_b 100
//# expect: main calls spin_c 100
//# expect: main calls jw32 100
//# expect: main calls jw8 100
//# expect: main calls jw_only 100
//# expect: main calls jw_far 100
//# expect: main calls jw_chain 100
//# expect: main calls jw_entry 100
//# expect: main calls st_call 100
//# expect: main calls ev_slot 100
//# expect: main calls spin_d 750
//# expect: main calls ev_exit 100
//# expect: main calls cold_cb 100
//# expect: main calls cb_target 100
//# expect: main calls ctc32 100
//# expect: main calls ctc8 100
//# expect: main calls ctc_target 50
//# expect: main calls spin_e 100
//# expect: main calls tiny_xor 100
//# expect: main calls tiny_mov 200
//# expect: main calls tiny_jmp 100
//# expect: main calls tiny_ret1 100
//# expect: main calls slot_host 100
//# expect: main calls tab_case 100
//# expect: main calls pop_tail 100
//# expect: main calls loop_ret 100
//# expect: main calls fall_ret 100
//# expect: main calls fp_tail 100
//# expect: main calls fpt_a 50
//# expect: main calls fpt_b 50
//# expect: main calls flow_tab 100
//# expect: main calls ac_fn 100
#include <stdio.h>

int tiny_ret(void);
int stretch_ret(int x);
int stretch_tail(int x);
int short_epi(int x);
int prologue_fn(int a, int b);
int short_nops(int x);
int after_nops(int x);
int filler_a(int x);
int retarget_fn(int x);
int filler_b(int x);
int jw32(int x);
int jw8(int x);
int jw_only(int x);
int jw_far(int x);
int jw_chain(int x);
int jw_entry(int x);
int st_call(int x);
int ev_slot(int x);
int ev_exit(void **dst, void *src, int op);
int ev_tag;
struct cb_obj {
    long pad;
    void *p;
};
int cold_cb(struct cb_obj *o, int (*f)(void *, int), int x);
int ctc32(int x);
int ctc8(int x);
int tiny_xor(void);
int tiny_mov(int x);
int tiny_jmp(int x);
void tiny_ret1(void);
int slot_host(int x);
unsigned char tab_case(int x);
int pop_tail(struct cb_obj *o, int x);
int loop_ret(int n);
int fall_ret(int x);
int fp_tail(int x);
int flow_tab(int x);
int ac_fn(int x);

static int spin(int x, int n) {
    volatile int s = 0;
    for (int i = 0; i < n; i++)
        s += i ^ x;
    return s;
}

__attribute__((noinline)) int spin_a(int x) {
    return spin(x, 20000);
}

__attribute__((noinline)) int spin_b(int x) {
    return spin(x, 30000);
}

__attribute__((noinline)) int spin_c(int x, int y) {
    return spin(x + y, 40000);
}

__attribute__((noinline)) int spin_d(int x) {
    return spin(x, 10000);
}

__attribute__((noinline)) int spin_e(int x) {
    return spin(x, 25000);
}

__attribute__((noinline)) int cb_target(void *p, int x) {
    return x + (p != 0);
}

__asm__(".intel_syntax noprefix\n"
        ".text\n"
        ".p2align 4\n"
        ".globl tiny_ret\n"
        ".type tiny_ret, @function\n"
        "tiny_ret:\n"
        ".cfi_startproc\n"
        "    xor eax, eax\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size tiny_ret, .-tiny_ret\n"
        ".p2align 4\n"
        ".globl stretch_ret\n"
        ".type stretch_ret, @function\n"
        "stretch_ret:\n"
        ".cfi_startproc\n"
        "    mov eax, 7\n"
        "    add eax, edi\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size stretch_ret, .-stretch_ret\n"
        ".p2align 4\n"
        ".globl stretch_tail\n"
        ".type stretch_tail, @function\n"
        "stretch_tail:\n"
        ".cfi_startproc\n"
        "    mov esi, 3\n"
        "    jmp spin_c\n"
        ".cfi_endproc\n"
        ".size stretch_tail, .-stretch_tail\n"
        ".p2align 4\n"
        ".globl retarget_fn\n"
        ".type retarget_fn, @function\n"
        "retarget_fn:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbx, -16\n"
        "    mov ebx, edi\n"
        "    call spin_a\n"
        "    mov eax, ebx\n"
        "    pop rbx\n"
        ".cfi_def_cfa_offset 8\n"
        "    test eax, eax\n"
        "    {disp32} je .Lrt_ret\n"
        "    add eax, 1000\n"
        "    ret\n"
        ".Lrt_ret:\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size retarget_fn, .-retarget_fn\n"
        ".globl filler_a\n"
        ".type filler_a, @function\n"
        "filler_a:\n"
        ".cfi_startproc\n"
        "    mov eax, edi\n"
        ".rept 40\n"
        "    add eax, 1\n"
        ".endr\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size filler_a, .-filler_a\n"
        ".globl short_epi\n"
        ".type short_epi, @function\n"
        "short_epi:\n"
        ".cfi_startproc\n"
        "    push rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbp, -16\n"
        "    mov rbp, rsp\n"
        ".cfi_def_cfa_register rbp\n"
        "    sub rsp, 16\n"
        "    mov [rbp - 4], edi\n"
        "    call spin_a\n"
        "    leave\n"
        ".cfi_def_cfa rsp, 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size short_epi, .-short_epi\n"
        ".globl prologue_fn\n"
        ".type prologue_fn, @function\n"
        "prologue_fn:\n"
        ".cfi_startproc\n"
        "    push rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbp, -16\n"
        "    mov rbp, rsp\n"
        ".cfi_def_cfa_register rbp\n"
        "    sub rsp, 32\n"
        "    mov [rbp - 20], edi\n"
        "    mov [rbp - 24], esi\n"
        "    cmp dword ptr [rbp - 20], 0\n"
        "    je .Lpf_zero\n"
        "    mov eax, [rbp - 20]\n"
        "    add eax, [rbp - 24]\n"
        "    leave\n"
        ".cfi_remember_state\n"
        ".cfi_def_cfa rsp, 8\n"
        "    ret\n"
        ".cfi_restore_state\n"
        ".Lpf_zero:\n"
        "    mov eax, -1\n"
        "    leave\n"
        ".cfi_def_cfa rsp, 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size prologue_fn, .-prologue_fn\n"
        ".globl short_nops\n"
        ".type short_nops, @function\n"
        "short_nops:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbx, -16\n"
        "    mov ebx, edi\n"
        "    call spin_b\n"
        "    test ebx, ebx\n"
        "    jne .Lsn_one\n"
        "    jmp .Lsn_out\n"
        "    .nops 7\n"
        ".Lsn_one:\n"
        "    add eax, 1\n"
        ".Lsn_out:\n"
        "    pop rbx\n"
        ".cfi_def_cfa_offset 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size short_nops, .-short_nops\n"
        ".globl after_nops\n"
        ".type after_nops, @function\n"
        "after_nops:\n"
        ".cfi_startproc\n"
        "    mov eax, edi\n"
        "    imul eax, eax\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size after_nops, .-after_nops\n"
        ".globl filler_b\n"
        ".type filler_b, @function\n"
        "filler_b:\n"
        ".cfi_startproc\n"
        "    mov eax, edi\n"
        ".rept 40\n"
        "    add eax, 1\n"
        ".endr\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size filler_b, .-filler_b\n"
        ".globl jw32\n"
        ".type jw32, @function\n"
        "jw32:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbx, -16\n"
        "    mov ebx, edi\n"
        "    call spin_d\n"
        "    mov eax, ebx\n"
        "    pop rbx\n"
        ".cfi_def_cfa_offset 8\n"
        "    test eax, eax\n"
        "    {disp32} je .Ljw32_ret\n"
        "    add eax, 1000\n"
        ".Ljw32_ret:\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size jw32, .-jw32\n"
        ".globl jw8\n"
        ".type jw8, @function\n"
        "jw8:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbx, -16\n"
        "    mov ebx, edi\n"
        "    call spin_d\n"
        "    mov eax, ebx\n"
        "    pop rbx\n"
        ".cfi_def_cfa_offset 8\n"
        "    test eax, eax\n"
        "    je .Ljw8_ret\n"
        "    add eax, 5\n"
        ".Ljw8_ret:\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size jw8, .-jw8\n"
        ".globl jw_pad\n"
        ".type jw_pad, @function\n"
        "jw_pad:\n"
        ".cfi_startproc\n"
        "    mov eax, edi\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size jw_pad, .-jw_pad\n"
        "    .nops 17\n"
        ".globl jw_only\n"
        ".type jw_only, @function\n"
        "jw_only:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbx, -16\n"
        "    mov ebx, edi\n"
        "    call spin_d\n"
        "    mov eax, ebx\n"
        "    pop rbx\n"
        ".cfi_def_cfa_offset 8\n"
        "    test eax, eax\n"
        "    je .Ljo_ret\n"
        "    add eax, 1000\n"
        "    ret\n"
        ".Ljo_ret:\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size jw_only, .-jw_only\n"
        ".globl jw_end\n"
        ".type jw_end, @function\n"
        "jw_end:\n"
        ".cfi_startproc\n"
        "    mov eax, edi\n"
        "    add eax, 1\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size jw_end, .-jw_end\n"
        ".globl jw_far\n"
        ".type jw_far, @function\n"
        "jw_far:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbx, -16\n"
        "    mov ebx, edi\n"
        "    call spin_d\n"
        "    mov eax, ebx\n"
        "    pop rbx\n"
        ".cfi_def_cfa_offset 8\n"
        "    cmp eax, 0\n"
        "    je .Ljf_ret\n"
        "    add eax, 1000\n"
        ".Ljf_ret:\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size jw_far, .-jw_far\n"
        ".globl jw_far_filler\n"
        ".type jw_far_filler, @function\n"
        "jw_far_filler:\n"
        ".cfi_startproc\n"
        "    call spin_d\n"
        ".rept 40\n"
        "    add eax, 1\n"
        ".endr\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size jw_far_filler, .-jw_far_filler\n"
        ".globl jw_chain\n"
        ".type jw_chain, @function\n"
        "jw_chain:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbx, -16\n"
        "    mov ebx, edi\n"
        "    call spin_d\n"
        "    mov eax, ebx\n"
        "    pop rbx\n"
        ".cfi_def_cfa_offset 8\n"
        "    cmp eax, 1\n"
        "    je .Ljc_one\n"
        "    jb .Ljc_ret\n"
        "    add eax, 1000\n"
        ".Ljc_ret:\n"
        "    ret\n"
        ".Ljc_one:\n"
        "    mov eax, 7\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size jw_chain, .-jw_chain\n"
        ".globl jw_chain_filler\n"
        ".type jw_chain_filler, @function\n"
        "jw_chain_filler:\n"
        ".cfi_startproc\n"
        "    call spin_d\n"
        ".rept 40\n"
        "    add eax, 1\n"
        ".endr\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size jw_chain_filler, .-jw_chain_filler\n"
        ".globl jw_entry\n"
        ".type jw_entry, @function\n"
        "jw_entry:\n"
        ".cfi_startproc\n"
        "    test edi, edi\n"
        "    je .Lje_ret\n"
        "    push rbx\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbx, -16\n"
        "    mov ebx, edi\n"
        "    call spin_d\n"
        "    add eax, ebx\n"
        "    pop rbx\n"
        ".cfi_def_cfa_offset 8\n"
        "    add eax, 1000\n"
        "    ret\n"
        ".Lje_ret:\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size jw_entry, .-jw_entry\n"
        ".globl jw_entry_filler\n"
        ".type jw_entry_filler, @function\n"
        "jw_entry_filler:\n"
        ".cfi_startproc\n"
        "    call spin_d\n"
        ".rept 40\n"
        "    add eax, 1\n"
        ".endr\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size jw_entry_filler, .-jw_entry_filler\n"
        ".globl st_call\n"
        ".type st_call, @function\n"
        "st_call:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbx, -16\n"
        "    mov ebx, edi\n"
        "    xor eax, eax\n"
        "    call spin_d\n"
        "    test ebx, ebx\n"
        "    je .Lsc_out\n"
        "    add eax, ebx\n"
        ".Lsc_out:\n"
        "    pop rbx\n"
        ".cfi_def_cfa_offset 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size st_call, .-st_call\n"
        ".globl st_call_filler\n"
        ".type st_call_filler, @function\n"
        "st_call_filler:\n"
        ".cfi_startproc\n"
        "    call spin_d\n"
        ".rept 44\n"
        "    add eax, 1\n"
        ".endr\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size st_call_filler, .-st_call_filler\n"
        ".globl ev_slot\n"
        ".type ev_slot, @function\n"
        "ev_slot:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbx, -16\n"
        "    mov ebx, edi\n"
        "    call spin_d\n"
        "    mov ecx, ebx\n"
        "    imul ecx, ecx, 3\n"
        "    lea edx, [rcx + rbx*2 + 100]\n"
        "    add eax, edx\n"
        "    test ebx, ebx\n"
        "    je .Lev_out\n"
        "    add eax, ebx\n"
        ".Lev_out:\n"
        "    pop rbx\n"
        ".cfi_def_cfa_offset 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size ev_slot, .-ev_slot\n"
        // call spin_d, then 132 bytes of straight-line code: no slot, no window to stretch.
        ".macro SPIN_FILLER name\n"
        ".globl \\name\n"
        ".type \\name, @function\n"
        "\\name:\n"
        ".cfi_startproc\n"
        "    call spin_d\n"
        ".rept 44\n"
        "    add eax, 1\n"
        ".endr\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size \\name, .-\\name\n"
        ".endm\n"
        "SPIN_FILLER ev_slot_filler\n"
        ".globl ev_exit\n"
        ".type ev_exit, @function\n"
        "ev_exit:\n"
        ".cfi_startproc\n"
        "    test edx, edx\n"
        "    je .Lee_copy\n"
        "    cmp edx, 1\n"
        "    jne .Lee_ret\n"
        "    mov [rdi], rsi\n"
        ".Lee_ret:\n"
        "    xor eax, eax\n"
        "    ret\n"
        ".Lee_copy:\n"
        "    lea rax, [rip + ev_tag]\n"
        "    mov [rdi], rax\n"
        "    xor eax, eax\n"
        "    ret\n"
        "    nop dword ptr [rax]\n"
        ".cfi_endproc\n"
        ".size ev_exit, .-ev_exit\n"
        "SPIN_FILLER ev_exit_filler\n"
        ".globl cold_cb\n"
        ".type cold_cb, @function\n"
        "cold_cb:\n"
        ".cfi_startproc\n"
        "    mov rdi, [rdi + 8]\n"
        "    mov rax, rsi\n"
        "    mov rsi, rdx\n"
        "    test rdi, rdi\n"
        "    je .Lcc_cold\n"
        "    jmp rax\n"
        ".cfi_endproc\n"
        ".size cold_cb, .-cold_cb\n"
        "    .nops 8\n"
        "SPIN_FILLER cold_cb_filler\n"
        ".section .text.unlikely\n"
        "SPIN_FILLER cold_cb_filler0\n"
        ".Lcc_cold:\n"
        ".cfi_startproc\n"
        "    xor eax, eax\n"
        "    ret\n"
        ".cfi_endproc\n"
        "SPIN_FILLER cold_cb_filler1\n"
        ".text\n"
        ".p2align 4\n"
        ".globl ctc32\n"
        ".type ctc32, @function\n"
        "ctc32:\n"
        ".cfi_startproc\n"
        "    mov eax, edi\n"
        "    and eax, 1\n"
        "    test eax, eax\n"
        "    jne spin_e\n"
        "    mov eax, 3\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size ctc32, .-ctc32\n"
        "SPIN_FILLER ctc32_filler\n"
        ".globl ctc8\n"
        ".type ctc8, @function\n"
        "ctc8:\n"
        ".cfi_startproc\n"
        "    mov eax, edi\n"
        "    and eax, 1\n"
        "    test eax, eax\n"
        "    jne .Lctc_target\n"
        "    mov eax, 3\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size ctc8, .-ctc8\n"
        "    .nops 8\n"
        ".globl ctc_target\n"
        ".type ctc_target, @function\n"
        "ctc_target:\n"
        ".Lctc_target:\n"
        ".cfi_startproc\n"
        "    mov eax, edi\n"
        "    jmp spin_e\n"
        ".cfi_endproc\n"
        ".size ctc_target, .-ctc_target\n"
        "SPIN_FILLER ctc8_filler\n"
        ".p2align 4\n"
        ".globl tiny_xor\n"
        ".type tiny_xor, @function\n"
        "tiny_xor:\n"
        ".cfi_startproc\n"
        "    xor eax, eax\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size tiny_xor, .-tiny_xor\n"
        ".globl tiny_mov\n"
        ".type tiny_mov, @function\n"
        "tiny_mov:\n"
        ".cfi_startproc\n"
        ".Ltiny_mov:\n"
        "    mov eax, edi\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size tiny_mov, .-tiny_mov\n"
        ".globl tiny_jmp\n"
        ".type tiny_jmp, @function\n"
        "tiny_jmp:\n"
        ".cfi_startproc\n"
        "    jmp .Ltiny_mov\n"
        ".cfi_endproc\n"
        ".size tiny_jmp, .-tiny_jmp\n"
        ".globl tiny_ret1\n"
        ".type tiny_ret1, @function\n"
        "tiny_ret1:\n"
        ".cfi_startproc\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size tiny_ret1, .-tiny_ret1\n"
        "    .nops 2\n"
        ".globl slot_host\n"
        ".type slot_host, @function\n"
        "slot_host:\n"
        ".cfi_startproc\n"
        "    mov eax, 0x11\n"
        "    mov eax, 0x12\n"
        "    mov eax, 0x13\n"
        "    mov eax, 0x14\n"
        "    mov eax, 0x15\n"
        "    add eax, edi\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size slot_host, .-slot_host\n"
        "SPIN_FILLER tiny_filler\n"
        ".globl tab_case\n"
        ".type tab_case, @function\n"
        "tab_case:\n"
        ".cfi_startproc\n"
        "    add edi, -1\n"
        "    cmp edi, 6\n"
        "    ja .Ltc_default\n"
        "    mov al, 0x22\n"
        "    lea rcx, [rip + .Ltc_table]\n"
        "    movsxd rdx, dword ptr [rcx + rdi * 4]\n"
        "    add rdx, rcx\n"
        "    jmp rdx\n"
        ".Ltc_1:\n"
        "    mov al, 1\n"
        "    ret\n"
        ".Ltc_default:\n"
        "    mov al, 0x28\n"
        "    ret\n"
        ".Ltc_2:\n"
        "    mov al, 2\n"
        "    ret\n"
        ".Ltc_3:\n"
        "    mov al, 3\n"
        "    ret\n"
        ".Ltc_4:\n"
        "    mov al, 4\n"
        "    ret\n"
        ".Ltc_5:\n"
        "    mov al, 5\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size tab_case, .-tab_case\n"
        "    .nops 6\n"
        "SPIN_FILLER tab_filler\n"
        ".section .rodata\n"
        ".p2align 2\n"
        ".Ltc_table:\n"
        "    .long .Ltc_1 - .Ltc_table\n"
        "    .long .Ltc_2 - .Ltc_table\n"
        "    .long .Ltc_default - .Ltc_table\n"
        "    .long .Ltc_3 - .Ltc_table\n"
        "    .long .Ltc_4 - .Ltc_table\n"
        "    .long .Ltc_default - .Ltc_table\n"
        "    .long .Ltc_5 - .Ltc_table\n"
        ".text\n"
        ".globl pop_tail\n"
        ".type pop_tail, @function\n"
        "pop_tail:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbx, -16\n"
        "    mov rbx, rsi\n"
        "    mov rax, [rdi + 8]\n"
        "    test rax, rax\n"
        "    jne .Lpt_cold\n"
        "    mov eax, ebx\n"
        "    pop rbx\n"
        ".cfi_def_cfa_offset 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size pop_tail, .-pop_tail\n"
        "SPIN_FILLER pop_tail_filler\n"
        ".section .text.unlikely\n"
        "SPIN_FILLER pop_tail_filler0\n"
        ".Lpt_cold:\n"
        ".cfi_startproc\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbx, -16\n"
        "    mov rsi, rbx\n"
        "    pop rbx\n"
        ".cfi_def_cfa_offset 8\n"
        "    jmp rax\n"
        ".cfi_endproc\n"
        "SPIN_FILLER pop_tail_filler1\n"
        ".text\n"
        "    .nops 8\n"
        ".globl loop_ret\n"
        ".type loop_ret, @function\n"
        "loop_ret:\n"
        ".cfi_startproc\n"
        "    xor eax, eax\n"
        "    mov ecx, edi\n"
        "    test ecx, ecx\n"
        "    je .Llr_ret\n"
        ".Llr_top:\n"
        "    add eax, ecx\n"
        "    sub ecx, 1\n"
        "    jne .Llr_top\n"
        ".Llr_ret:\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size loop_ret, .-loop_ret\n"
        "SPIN_FILLER loop_ret_filler\n"
        "    .nops 8\n"
        ".globl fall_ret\n"
        ".type fall_ret, @function\n"
        "fall_ret:\n"
        ".cfi_startproc\n"
        "    mov eax, edi\n"
        "    test al, 1\n"
        "    jne .Lfr_more\n"
        ".Lfr_ret:\n"
        "    ret\n"
        ".Lfr_more:\n"
        "    shr eax, 1\n"
        "    test al, 1\n"
        "    je .Lfr_ret\n"
        "    add eax, 1000\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size fall_ret, .-fall_ret\n"
        "SPIN_FILLER fall_ret_filler\n"
        ".globl fpt_a\n"
        ".type fpt_a, @function\n"
        "fpt_a:\n"
        ".cfi_startproc\n"
        "    mov eax, edi\n"
        "    add eax, 7\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size fpt_a, .-fpt_a\n"
        ".globl fpt_b\n"
        ".type fpt_b, @function\n"
        "fpt_b:\n"
        ".cfi_startproc\n"
        "    mov eax, edi\n"
        "    add eax, 9\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size fpt_b, .-fpt_b\n"
        ".globl fp_tail\n"
        ".type fp_tail, @function\n"
        "fp_tail:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbx, -16\n"
        "    mov ebx, edi\n"
        "    and ebx, 1\n"
        "    lea rax, [rip + fp_table]\n"
        "    mov rax, [rax + rbx * 8]\n"
        "    mov edi, ebx\n"
        "    pop rbx\n"
        ".cfi_def_cfa_offset 8\n"
        "    jmp rax\n"
        ".cfi_endproc\n"
        ".size fp_tail, .-fp_tail\n"
        "SPIN_FILLER fp_tail_filler\n"
        ".globl flow_tab\n"
        ".type flow_tab, @function\n"
        "flow_tab:\n"
        ".cfi_startproc\n"
        "    push r13\n"
        ".cfi_def_cfa_offset 16\n"
        "    push rbx\n"
        ".cfi_def_cfa_offset 24\n"
        "    push rax\n"
        ".cfi_def_cfa_offset 32\n"
        ".cfi_offset rbx, -24\n"
        ".cfi_offset r13, -16\n"
        "    mov ebx, edi\n"
        "    xor ecx, ecx\n"
        "    mov r13, rdi\n"
        "    test edi, edi\n"
        "    js .Lft_neg\n"
        "    lea r13, [rip + .Lft_tab]\n"
        "    jmp .Lft_head\n"
        ".Lft_neg:\n"
        "    mov eax, -1\n"
        "    jmp .Lft_out\n"
        ".Lft_a:\n"
        "    add ecx, 3\n"
        "    sub ebx, 1\n"
        "    jmp .Lft_head\n"
        ".Lft_b:\n"
        "    add ecx, 5\n"
        "    sub ebx, 1\n"
        ".Lft_head:\n"
        "    mov eax, ebx\n"
        "    and eax, 1\n"
        "    test ebx, ebx\n"
        "    je .Lft_done\n"
        "    movsxd rax, dword ptr [r13 + rax * 4]\n"
        "    add rax, r13\n"
        "    jmp rax\n"
        ".Lft_done:\n"
        "    mov eax, ecx\n"
        ".Lft_out:\n"
        "    pop rcx\n"
        ".cfi_def_cfa_offset 24\n"
        "    pop rbx\n"
        ".cfi_def_cfa_offset 16\n"
        "    pop r13\n"
        ".cfi_def_cfa_offset 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size flow_tab, .-flow_tab\n"
        "SPIN_FILLER flow_tab_filler\n"
        ".globl ac_fn\n"
        ".type ac_fn, @function\n"
        "ac_fn:\n"
        ".cfi_startproc\n"
        "    mov eax, edi\n"
        "    test edi, edi\n"
        "    je .Lac_cold\n"
        "    cmp edi, 5\n"
        "    je .Lac_mid\n"
        ".Lac_back:\n"
        "    add eax, 1000\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size ac_fn, .-ac_fn\n"
        "SPIN_FILLER ac_fn_filler\n"
        ".section .text.unlikely\n"
        ".p2align 4\n"
        ".cfi_startproc\n"
        ".Lac_cold:\n"
        "    mov eax, 7\n"
        ".Lac_mid:\n"
        ".rept 20\n"
        "    add eax, 1\n"
        ".endr\n"
        "    jmp .Lac_back\n"
        ".cfi_endproc\n"
        ".section .rodata\n"
        ".p2align 2\n"
        ".Lft_tab:\n"
        "    .long .Lft_a - .Lft_tab\n"
        "    .long .Lft_b - .Lft_tab\n"
        ".text\n"
        ".data\n"
        ".p2align 3\n"
        "fp_table:\n"
        "    .quad fpt_a\n"
        "    .quad fpt_b\n"
        ".text\n"
        ".att_syntax prefix\n");

int main(void) {
    long acc = 0;
    for (int i = 0; i < 1000; i++)
        acc += tiny_ret() + stretch_ret(i);
    for (int i = 0; i < 100; i++)
        acc += stretch_tail(i) + short_epi(i) + prologue_fn(i, 2) + short_nops(i & 1) + after_nops(i) + filler_a(i)
               + filler_b(i) + retarget_fn(i & 1) + jw32(i & 1) + jw8(i & 1) + jw_only(i & 1)
               + jw_far(i & 1) + jw_chain(i % 3) + jw_entry(i & 1) + st_call(i & 1)
               + ev_slot(i & 1);
    for (int i = 0; i < 100; i++) {
        void *slot = 0;
        acc += ev_exit(&slot, &acc, i % 3);
        acc += slot == &ev_tag ? 7 : slot == (void *)&acc ? 3 : 1;
    }
    struct cb_obj o0 = {0, 0}, o1 = {0, &acc};
    for (int i = 0; i < 100; i++)
        acc += cold_cb(i & 1 ? &o1 : &o0, cb_target, i);
    for (int i = 0; i < 100; i++)
        acc += ctc32(i) + ctc8(i);
    for (int i = 0; i < 100; i++) {
        tiny_ret1();
        acc += tiny_xor() + tiny_mov(i) + tiny_jmp(i) + slot_host(i);
    }
    for (int i = 0; i < 100; i++)
        acc += tab_case(i % 8) * (i + 1);
    struct cb_obj p0 = {0, 0}, p1 = {0, (void *)cb_target};
    for (int i = 0; i < 100; i++)
        acc += pop_tail(i & 1 ? &p1 : &p0, i);
    for (int i = 0; i < 100; i++)
        acc += loop_ret(i % 50) + fall_ret(i) + fp_tail(i) + flow_tab(i % 10 - 1) + ac_fn(i % 10);
    printf("%ld\n", acc);
    return 0;
}
