// trampolines: what each layout of an entry trampoline costs a calls-only point, for
// docs/PERFORMANCE.md ("calls ≤ 0.5 ns": issue 14). `trampolines VARIANT N` calls a
// 4-byte function (`lea rax, [rdi+1]; ret`, as testbins/bench_calls.c's `step`) N times
// through an entry `jmp` to a hand-written copy of one trampoline layout, GS at a fake
// column holding this thread's TCB pointer and tid (as the runtime's columns do), and prints
// how many calls the column counted. `trampolines list` prints the variants. Time it with
// the CPU time of the whole run against VARIANT `base` (no trampoline), interleaved.
//
// The trampolines lie in a section of their own 0x1c000 bytes after the entries, as a
// rewritten program's trampolines lie far from the functions; `near_off` is the current
// off path placed right after its entry (a rewriter cannot do that), to show what the
// distance costs.
// (Not in testbins/: it is no behaviour test.)
#include <asm/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

// The column: owner TCB pointer at 8, owner key (tid) at 0x10, thread mask at 0x130,
// owner_tpx at 0x1a8 (the runtime's offsets), the point's call counter at 0x1000.
static char column[0x2000] __attribute__((aligned(4096)));
unsigned char gate_off = 0, gate_on = 1; // bit 0: calls
// The fork cookie (codegen::calls_trampoline): an odd word the runtime keeps in a page the
// kernel zeroes in a fork child; the column holds owner_tp ^ cookie at 0x1a8 (owner_tpx).
unsigned long fork_cookie = 0x5a5a5a5a5a5a5a5bUL;

// The thread check of codegen::thread_check: TCB pointer, then libc's tid (fs:0x2d0).
#define TC "mov %fs:0, %rax\n cmp %gs:8, %rax\n jne 9f\n mov %fs:0x2d0, %eax\n cmp %gs:0x10, %eax\n jne 9f\n"
#define SLOW "9: ud2\n" // the slow path (never taken here)
#define PROGRAM "lea 1(%rdi), %rax\n ret\n" // the displaced instructions, ending in the return
#define ENTRY(f) ".p2align 6\n.globl " #f "\n" #f ": jmp t_" #f "\n.pushsection .tramp,\"ax\"\n.p2align 6\nt_" #f ": "
#define END ".popsection\n"
// Now (codegen::trampoline): the gate test falls through to the program when off; the
// counting path, 16-aligned, is the taken branch's target.
#define CUR(f, g) ENTRY(f) "testb $1, " #g "(%rip)\n jne 1f\n" PROGRAM ".p2align 4\n1: push %rax\n" TC \
    "movzbl " #g "(%rip), %eax\n and %gs:0x130, %eax\n test $1, %al\n je 2f\n incq %gs:0x1000\n2: pop %rax\n" PROGRAM SLOW END
// One fall-through for off and calls-only: only the other bits branch away; the count adds
// (gate & mask & 1), after the whole thread check.
#define FT(f, g) ENTRY(f) "testb $0xfe, " #g "(%rip)\n jne 9f\n push %rax\n" TC \
    "movzbl " #g "(%rip), %eax\n and %gs:0x130, %eax\n and $1, %eax\n add %rax, %gs:0x1000\n pop %rax\n" PROGRAM SLOW END
// The same without the thread mask (`stint ctl --thread` would be ignored).
#define FT_NOMASK(f, g) ENTRY(f) "testb $0xfe, " #g "(%rip)\n jne 9f\n push %rax\n" TC \
    "movzbl " #g "(%rip), %eax\n and $1, %eax\n add %rax, %gs:0x1000\n pop %rax\n" PROGRAM SLOW END
// ... and without the tid check either (a forked child would count into its parent's column).
#define FT_TP(f, g) ENTRY(f) "testb $0xfe, " #g "(%rip)\n jne 9f\n push %rax\n mov %fs:0, %rax\n cmp %gs:8, %rax\n jne 9f\n" \
    "movzbl " #g "(%rip), %eax\n and $1, %eax\n add %rax, %gs:0x1000\n pop %rax\n" PROGRAM SLOW END
// The taken branch and the increment alone (no thread check: not exact).
#define BARE(f, g) ENTRY(f) "testb $1, " #g "(%rip)\n jne 1f\n" PROGRAM ".p2align 4\n1: incq %gs:0x1000\n" PROGRAM END
// "The entry jmp is the gate": a counting trampoline with no gate test, reached only while
// the point counts; with and without the thread mask.
#define NOGATE(f) ENTRY(f) "push %rax\n" TC "incq %gs:0x1000\n pop %rax\n" PROGRAM SLOW END
// The gate as a `jmp` at the trampoline's start (a patchable slot in the trampolines' own
// region, not in the program's text): to the off path, or to a counting path without a gate
// test (no mask test, as `nogate`).
#define SLOT_OFF(f) ENTRY(f) "jmp 1f\n.p2align 4\n1: " PROGRAM ".p2align 4\n2: push %rax\n" TC "incq %gs:0x1000\n pop %rax\n" PROGRAM SLOW END
#define SLOT_COUNT(f) ENTRY(f) "jmp 2f\n.p2align 4\n1: " PROGRAM ".p2align 4\n2: push %rax\n" TC "incq %gs:0x1000\n pop %rax\n" PROGRAM SLOW END
// The same slot with the counting path as its fall-through: a 5-byte `nop` while counting, a
// `jmp` over the counting path to the off path while off.
#define SLOT_NOP(f) ENTRY(f) ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n push %rax\n" TC "incq %gs:0x1000\n pop %rax\n" PROGRAM \
    ".p2align 4\n1: " PROGRAM SLOW END
#define SLOT_JMP(f) ENTRY(f) "jmp 1f\n push %rax\n" TC "incq %gs:0x1000\n pop %rax\n" PROGRAM ".p2align 4\n1: " PROGRAM SLOW END
// The slot as a file would hold it before any patch: `jmp .gated` over the counting path to
// today's gated trampoline (off: falls through to the program; on: the taken `jne`).
#define SLOT_GATED(f, g) ENTRY(f) "jmp 1f\n push %rax\n" TC "incq %gs:0x1000\n pop %rax\n" PROGRAM ".p2align 4\n1: " \
    "testb $1, " #g "(%rip)\n jne 3f\n" PROGRAM ".p2align 4\n3: push %rax\n" TC \
    "movzbl " #g "(%rip), %eax\n and %gs:0x130, %eax\n test $1, %al\n je 4f\n incq %gs:0x1000\n4: pop %rax\n" PROGRAM SLOW END
// Today's calls-only path (codegen::calls_trampoline): one straight path for on and off, no
// tid word, no mask (the runtime arms owner_tpx only while the mask counts calls), 64-byte
// aligned: at 16, 32 or 48 bytes past a 64-byte boundary it costs a cycle more.
#define CALLS_PATH(f, g) ENTRY(f) "push %rax\n mov %fs:0, %rax\n xor fork_cookie(%rip), %rax\n cmp %gs:0x1a8, %rax\n jne 9f\n" \
    "movzbl " #g "(%rip), %eax\n and $1, %eax\n add %rax, %gs:0x1000\n pop %rax\n" PROGRAM SLOW END
#define NOGATE_MASK(f) ENTRY(f) "push %rax\n" TC "testb $1, %gs:0x130\n je 2f\n incq %gs:0x1000\n2: pop %rax\n" PROGRAM SLOW END

asm(".pushsection .tramp,\"ax\"\n.skip 0x1c000, 0xcc\n.popsection\n.text\n"
    ".p2align 6\n.globl base\nbase: " PROGRAM
    ".p2align 6\n.globl near_off\nnear_off: jmp 1f\n.p2align 6\n1: testb $1, gate_off(%rip)\n jne 9f\n" PROGRAM SLOW
    CUR(cur_off, gate_off) CUR(cur_on, gate_on) FT(ft_off, gate_off) FT(ft_on, gate_on)
    FT_NOMASK(ft_nomask_on, gate_on) FT_TP(ft_tp_on, gate_on) BARE(bare_on, gate_on)
    NOGATE(nogate) NOGATE_MASK(nogate_mask) SLOT_OFF(slot_off) SLOT_COUNT(slot_count) SLOT_NOP(slot_nop) SLOT_JMP(slot_jmp) SLOT_GATED(slot_gated_off, gate_off) SLOT_GATED(slot_gated_on, gate_on) CALLS_PATH(calls_path_off, gate_off) CALLS_PATH(calls_path_on, gate_on));

#define VARIANTS(X) X(base) X(near_off) X(cur_off) X(cur_on) X(ft_off) X(ft_on) X(ft_nomask_on) \
    X(ft_tp_on) X(bare_on) X(nogate) X(nogate_mask) X(slot_off) X(slot_count) X(slot_nop) X(slot_jmp) X(slot_gated_off) X(slot_gated_on) X(calls_path_off) X(calls_path_on)
// Each variant's calling loop is the same code at the same alignment: where the loop and
// the entry lie modulo 64 bytes changes a layout's cost by a cycle.
#define DECL(f) \
    long f(long); \
    __attribute__((noinline, aligned(64))) static long run_##f(long n) { \
        long acc = 0; \
        for (long i = 0; i < n; i++) \
            acc += f(i); \
        return acc; \
    }
VARIANTS(DECL)

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "list")) {
#define NAME(f) puts(#f);
        VARIANTS(NAME)
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: trampolines VARIANT N | trampolines list\n");
        return 2;
    }
    const char *v = argv[1];
    long n = atol(argv[2]), acc = 0, counted;
    unsigned long tp;
    unsigned tid;
    __asm__ volatile("mov %%fs:0, %0" : "=r"(tp));
    __asm__ volatile("mov %%fs:0x2d0, %0" : "=r"(tid));
    memcpy(column + 8, &tp, 8);
    memcpy(column + 0x10, &tid, 4);
    unsigned long tpx = tp ^ fork_cookie;
    memcpy(column + 0x1a8, &tpx, 8);
    memset(column + 0x130, 0xff, 4);
    if (syscall(SYS_arch_prctl, ARCH_SET_GS, column) != 0) {
        perror("trampolines: arch_prctl");
        return 2;
    }
    int found = 0;
#define LOOP(f) \
    if (!strcmp(v, #f)) { \
        found = 1; \
        acc = run_##f(n); \
    }
    VARIANTS(LOOP)
    if (!found) {
        fprintf(stderr, "trampolines: no variant %s\n", v);
        return 2;
    }
    memcpy(&counted, column + 0x1000, 8);
    printf("%s: %ld calls, acc %ld, counted %ld\n", v, n, acc, counted);
    return 0;
}
