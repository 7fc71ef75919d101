// entrycov: function entries the planner could not patch before issue 12's entry work, whose
// shapes are written in assembly so they do not depend on the compiler (the same assembly as
// the planner test `entry_indirect_jumps_pie`); tests/it/entrycov.rs checks which entries
// `stint inspect` patches and that the rewritten program counts every call exactly and
// behaves as the original.
//
// - ij_dom: a PIC jump table whose base register held the argument across a call before the
//   prologue's `lea` set it; the loop back to the table block hides the lea from the slice.
// - ij_flow: the same with a branch before the lea (forward propagation over the function,
//   PIE only).
// - ij_ptr: a callback called in a loop, then tail-called through rax after the epilogue.
// - ij_two: two tables reach one jump: stays unresolved, its entry unpatched.
// ext is called by ij_dom once per call and by ij_flow for a negative argument; cb by
// ij_ptr n times and once more by its tail call.
//
// Entry windows with a branch target inside (the same assembly as the planner test
// `entry_windows_with_targets_pie`): every jump to the target is led to the entry tail, past
// the counting code, so a loop back to just after the prologue is no call:
// - ew_jmp8: `xor eax, eax; jmp .Lcheck; T: add eax, edi`, the back edge `jg rel8` (a slot);
// - ew_loop: `push rbx; mov rbx, rdi; T: mov rdi, rbx; call ew_leaf`, back by `jg rel8`;
// - ew_cmp: `xor eax, eax; T: cmp rax, rdi`, back by `jmp rel8`;
// - ew_far: as ew_loop over 130 bytes of nops, back by `jg rel32` (its displacement changed);
// - ew_taken: the target's address is taken, so not only jumps reach it: stays unpatched.
// ew_loop and ew_far call ew_leaf once per iteration. tn_ret is a lone `ret` before 7 bytes of
// nops and a `ud2` no function owns: its window runs over 4 of the nops.
//
//# variants: pie-O2
//# expect: threads 1
//# expect: main calls ij_dom 100
//# expect: main calls ij_flow 100
//# expect: main calls ij_ptr 100
//# expect: main calls ew_jmp8 100
//# expect: main calls ew_loop 100
//# expect: main calls ew_cmp 100
//# expect: main calls ew_far 100
//# expect: main calls tn_ret 100
#include <stdio.h>

int ij_dom(int x);
int ij_flow(int x);
int ij_two(int x);
int ij_ptr(long n, int (*cb)(int));
int ext(int x);
int ew_jmp8(int n);
int ew_loop(long n);
long ew_cmp(long n);
int ew_far(long n);
int ew_taken(long n);
void tn_ret(void);

static long hits;

__attribute__((noinline)) int cb(int x) {
    hits++;
    return x & 3;
}

__asm__(".intel_syntax noprefix\n"
        "    .text\n"
        "    .p2align 4\n"
        ".globl ext\n"
        ".type ext, @function\n"
        "ext:\n"
        ".cfi_startproc\n"
        "    mov eax, edi\n"
        "    add eax, 1\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size ext, .-ext\n"
        ".globl ij_dom\n"
        ".type ij_dom, @function\n"
        "ij_dom:\n"
        ".cfi_startproc\n"
        "    push r14\n"
        "    push rbx\n"
        "    push rax\n"
        "    mov ebx, edi\n"
        "    mov r14, rdi\n"
        "    mov rdi, r14\n"
        "    call ext\n"
        "    lea r14, [rip + .Ltab_dom]\n"
        "    jmp .Ldom_head\n"
        ".Ldom_a:\n"
        "    sub ebx, 1\n"
        "    jmp .Ldom_head\n"
        ".Ldom_head:\n"
        "    mov eax, ebx\n"
        "    and eax, 1\n"
        "    test ebx, ebx\n"
        "    je .Ldom_done\n"
        "    movsxd rax, dword ptr [r14 + rax*4]\n"
        "    add rax, r14\n"
        "    jmp rax\n"
        ".Ldom_b:\n"
        "    sub ebx, 1\n"
        "    jmp .Ldom_head\n"
        ".Ldom_done:\n"
        "    mov eax, 7\n"
        "    pop rcx\n"
        "    pop rbx\n"
        "    pop r14\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size ij_dom, .-ij_dom\n"
        ".globl ij_flow\n"
        ".type ij_flow, @function\n"
        "ij_flow:\n"
        ".cfi_startproc\n"
        "    push r13\n"
        "    push rbx\n"
        "    push rax\n"
        "    mov ebx, edi\n"
        "    mov r13, rdi\n"
        "    test edi, edi\n"
        "    js .Lflow_neg\n"
        "    lea r13, [rip + .Ltab_flow]\n"
        "    jmp .Lflow_head\n"
        ".Lflow_neg:\n"
        "    mov rdi, r13\n"
        "    call ext\n"
        "    mov eax, -1\n"
        "    jmp .Lflow_out\n"
        ".Lflow_a:\n"
        "    sub ebx, 1\n"
        "    jmp .Lflow_head\n"
        ".Lflow_head:\n"
        "    mov eax, ebx\n"
        "    and eax, 1\n"
        "    test ebx, ebx\n"
        "    je .Lflow_done\n"
        "    movsxd rax, dword ptr [r13 + rax*4]\n"
        "    add rax, r13\n"
        "    jmp rax\n"
        ".Lflow_b:\n"
        "    sub ebx, 1\n"
        "    jmp .Lflow_head\n"
        ".Lflow_done:\n"
        "    mov eax, 9\n"
        ".Lflow_out:\n"
        "    pop rcx\n"
        "    pop rbx\n"
        "    pop r13\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size ij_flow, .-ij_flow\n"
        ".globl ij_two\n"
        ".type ij_two, @function\n"
        "ij_two:\n"
        ".cfi_startproc\n"
        "    push r12\n"
        "    push rbx\n"
        "    push rax\n"
        "    mov ebx, edi\n"
        "    lea r12, [rip + .Ltab_two]\n"
        "    test edi, edi\n"
        "    jns .Ltwo_head\n"
        "    lea r12, [rip + .Ltab_two2]\n"
        "    neg ebx\n"
        "    jmp .Ltwo_head\n"
        ".Ltwo_a:\n"
        "    sub ebx, 1\n"
        "    jmp .Ltwo_head\n"
        ".Ltwo_head:\n"
        "    mov eax, ebx\n"
        "    and eax, 1\n"
        "    test ebx, ebx\n"
        "    je .Ltwo_done\n"
        "    movsxd rax, dword ptr [r12 + rax*4]\n"
        "    add rax, r12\n"
        "    jmp rax\n"
        ".Ltwo_b:\n"
        "    sub ebx, 1\n"
        "    jmp .Ltwo_head\n"
        ".Ltwo_done:\n"
        "    mov eax, 5\n"
        "    pop rcx\n"
        "    pop rbx\n"
        "    pop r12\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size ij_two, .-ij_two\n"
        ".globl ij_ptr\n"
        ".type ij_ptr, @function\n"
        "ij_ptr:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        "    push rbp\n"
        "    push rax\n"
        "    mov rbx, rsi\n"
        "    mov rbp, rdi\n"
        "    jmp .Lptr_check\n"
        ".Lptr_loop:\n"
        "    mov rdi, rbp\n"
        "    call rbx\n"
        "    sub rbp, 1\n"
        ".Lptr_check:\n"
        "    test rbp, rbp\n"
        "    jg .Lptr_loop\n"
        "    mov rdi, rbp\n"
        "    mov rax, rbx\n"
        "    pop rcx\n"
        "    pop rbp\n"
        "    pop rbx\n"
        "    jmp rax\n"
        ".cfi_endproc\n"
        ".size ij_ptr, .-ij_ptr\n"
        "    .section .rodata\n"
        "    .p2align 2\n"
        ".Ltab_dom:\n"
        "    .long .Ldom_a - .Ltab_dom\n"
        "    .long .Ldom_b - .Ltab_dom\n"
        ".Ltab_flow:\n"
        "    .long .Lflow_a - .Ltab_flow\n"
        "    .long .Lflow_b - .Ltab_flow\n"
        ".Ltab_two:\n"
        "    .long .Ltwo_a - .Ltab_two\n"
        "    .long .Ltwo_b - .Ltab_two\n"
        ".Ltab_two2:\n"
        "    .long .Ltwo_b - .Ltab_two2\n"
        "    .long .Ltwo_a - .Ltab_two2\n"
        ".text\n"
        ".att_syntax prefix\n");

__asm__(".intel_syntax noprefix\n"
        "    .text\n"
        "    .p2align 4\n"
        ".globl ew_leaf\n"
        ".type ew_leaf, @function\n"
        "ew_leaf:\n"
        ".cfi_startproc\n"
        "    mov eax, edi\n"
        "    add eax, 1\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size ew_leaf, .-ew_leaf\n"
        "    .p2align 4\n"
        ".globl ew_jmp8\n"
        ".type ew_jmp8, @function\n"
        "ew_jmp8:\n"
        ".cfi_startproc\n"
        "    xor eax, eax\n"
        "    jmp .Lj8_check\n"
        ".Lj8_loop:\n"
        "    add eax, edi\n"
        "    sub edi, 1\n"
        ".Lj8_check:\n"
        "    test edi, edi\n"
        "    jg .Lj8_loop\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size ew_jmp8, .-ew_jmp8\n"
        "    .p2align 4\n"
        ".globl ew_loop\n"
        ".type ew_loop, @function\n"
        "ew_loop:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        "    .cfi_def_cfa_offset 16\n"
        "    .cfi_offset rbx, -16\n"
        "    mov rbx, rdi\n"
        ".Lloop_top:\n"
        "    mov rdi, rbx\n"
        "    call ew_leaf\n"
        "    sub rbx, 1\n"
        "    jg .Lloop_top\n"
        "    pop rbx\n"
        "    .cfi_def_cfa_offset 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size ew_loop, .-ew_loop\n"
        "    .p2align 4\n"
        ".globl ew_cmp\n"
        ".type ew_cmp, @function\n"
        "ew_cmp:\n"
        ".cfi_startproc\n"
        "    xor eax, eax\n"
        ".Lcmp_top:\n"
        "    cmp rax, rdi\n"
        "    jge .Lcmp_done\n"
        "    add rax, 1\n"
        "    jmp .Lcmp_top\n"
        ".Lcmp_done:\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size ew_cmp, .-ew_cmp\n"
        "    .p2align 4\n"
        ".globl ew_far\n"
        ".type ew_far, @function\n"
        "ew_far:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        "    .cfi_def_cfa_offset 16\n"
        "    .cfi_offset rbx, -16\n"
        "    mov rbx, rdi\n"
        ".Lfar_top:\n"
        "    mov rdi, rbx\n"
        "    call ew_leaf\n"
        "    .skip 130, 0x90\n"
        "    sub rbx, 1\n"
        "    jg .Lfar_top\n"
        "    pop rbx\n"
        "    .cfi_def_cfa_offset 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size ew_far, .-ew_far\n"
        "    .p2align 4\n"
        ".globl ew_taken\n"
        ".type ew_taken, @function\n"
        "ew_taken:\n"
        ".cfi_startproc\n"
        "    push rbx\n"
        "    .cfi_def_cfa_offset 16\n"
        "    .cfi_offset rbx, -16\n"
        "    mov rbx, rdi\n"
        ".Ltk_top:\n"
        "    sub rbx, 1\n"
        "    jg .Ltk_top\n"
        "    lea rax, [rip + .Ltk_top]\n"
        "    xor eax, eax\n"
        "    pop rbx\n"
        "    .cfi_def_cfa_offset 8\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size ew_taken, .-ew_taken\n"
        "    .p2align 4\n"
        ".globl tn_ret\n"
        ".type tn_ret, @function\n"
        "tn_ret:\n"
        ".cfi_startproc\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size tn_ret, .-tn_ret\n"
        "    .p2align 3\n"
        "    ud2\n"
        "    .p2align 4\n"
        ".att_syntax prefix\n");

int main(void) {
    long acc = 0;
    for (int i = 0; i < 100; i++)
        acc += ij_dom(i) + ij_flow(i - 50) + ij_two(i - 50) + ij_ptr(i, cb);
    printf("%ld %ld\n", acc, hits);
    long ew = 0;
    for (int i = 0; i < 100; i++) {
        tn_ret();
        ew += ew_jmp8(i % 7) + ew_loop(i % 5 + 1) + ew_cmp(i % 9) + ew_far(i % 3 + 1) + ew_taken(i % 4 + 1);
    }
    printf("%ld\n", ew);
    return 0;
}
