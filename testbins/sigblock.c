// sigblock: a program that blocks SIGTRAP and handles it itself, for the safe traps of issue 12
// (tests/it/traps.rs rewrites it with --traps; behaviour.rs runs it without).
//
// trapped_a and trapped_b are written in assembly so that no tactic but a trap fits them:
// their second instruction is a loop's branch target whose address is also taken (no entry
// window, not even one whose jumps are led past the counting code), and their `ret` is the
// target of a `jge rel8` whose address is also taken (two unreached `lea`s before it), with
// the next function right after it (no exit window, no slot, no jump to redirect).
// With --traps both get a trap at the entry and one at the exit.
//
// What the program does, printing what it sees at each step:
// 1. A SIGUSR1 handler whose sa_mask is full (SIGTRAP blocked while it runs) calls trapped_b.
// 2. Its own SIGTRAP handler (SA_SIGINFO): raise(SIGTRAP), an int3 of its own, then
//    trapped_a's trap sites, which the handler must not see; then reads the action back.
// 3. signal(SIGTRAP, SIG_IGN): raise(SIGTRAP) is ignored; trapped_a; back to SIG_DFL.
// 4. main blocks every signal with sigfillset + sigprocmask and calls trapped_a; two
//    workers, one after the other, inherit that mask, block everything again with
//    pthread_sigmask, unblock SIGTRAP, block everything again, calling trapped_a 100 times
//    in each state.
// The old masks and actions it prints must read as in the original.
//
//# cflags: -pthread
//# variants: pie-O2
//# exit: 3
//# expect: threads 3
//# expect: threads from worker 2
//# expect: main calls on_usr1 1
//# expect: main calls on_trap 2
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

int trapped_a(int n);
int trapped_b(int n);

__asm__(".intel_syntax noprefix\n"
        ".text\n"
        ".p2align 4\n"
        ".globl trapped_a\n"
        ".type trapped_a, @function\n"
        "trapped_a:\n"
        ".cfi_startproc\n"
        "    xor eax, eax\n"
        "1:  add eax, 1\n"
        "    cmp eax, edi\n"
        "    jge 3f\n"
        "    jmp 1b\n"
        "    lea rdx, [rip + 3f]\n"
        "    lea rdx, [rip + 1b]\n"
        "3:  ret\n"
        ".cfi_endproc\n"
        ".size trapped_a, .-trapped_a\n"
        ".globl trapped_b\n"
        ".type trapped_b, @function\n"
        "trapped_b:\n"
        ".cfi_startproc\n"
        "    xor eax, eax\n"
        "2:  add eax, 2\n"
        "    cmp eax, edi\n"
        "    jge 4f\n"
        "    jmp 2b\n"
        "    lea rdx, [rip + 4f]\n"
        "    lea rdx, [rip + 2b]\n"
        "4:  ret\n"
        ".cfi_endproc\n"
        ".size trapped_b, .-trapped_b\n"
        ".globl trapped_end\n"
        ".type trapped_end, @function\n"
        "trapped_end:\n"
        ".cfi_startproc\n"
        "    xor eax, eax\n"
        "    ret\n"
        ".cfi_endproc\n"
        ".size trapped_end, .-trapped_end\n"
        ".att_syntax\n");

static volatile sig_atomic_t usr1_runs, trap_runs, last_code;

static void on_usr1(int sig) {
    (void)sig;
    trapped_b(50);
    usr1_runs++;
}

static void on_trap(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    last_code = si->si_code;
    trap_runs++;
}

/// The signals 1-64 in `s`, as a list of ranges.
static void show(const char *what, const sigset_t *s) {
    printf("%s:", what);
    for (int i = 1; i <= 64; i++) {
        if (sigismember(s, i) != 1)
            continue;
        int j = i;
        while (j < 64 && sigismember(s, j + 1) == 1)
            j++;
        printf(j == i ? " %d" : " %d-%d", i, j);
        i = j;
    }
    printf("\n");
}

static void *worker(void *arg) {
    long id = (long)arg;
    sigset_t cur, all, old, one;
    int s = 0;
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    show(id == 1 ? "worker 1 inherited" : "worker 2 inherited", &cur);
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    printf("worker %ld: SIGTRAP was blocked %d\n", id, sigismember(&old, SIGTRAP));
    for (int i = 0; i < 100; i++)
        s += trapped_a(10);
    sigemptyset(&one);
    sigaddset(&one, SIGTRAP);
    pthread_sigmask(SIG_UNBLOCK, &one, &old);
    printf("worker %ld: SIGTRAP was blocked %d before SIG_UNBLOCK\n", id, sigismember(&old, SIGTRAP));
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    printf("worker %ld: SIGTRAP blocked %d, SIGINT blocked %d\n", id, sigismember(&cur, SIGTRAP),
           sigismember(&cur, SIGINT));
    for (int i = 0; i < 100; i++)
        s += trapped_a(10);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    printf("worker %ld: SIGTRAP was blocked %d before SIG_SETMASK\n", id, sigismember(&old, SIGTRAP));
    for (int i = 0; i < 100; i++)
        s += trapped_a(10);
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    show(id == 1 ? "worker 1 mask" : "worker 2 mask", &cur);
    printf("worker %ld sum %d\n", id, s);
    return NULL;
}

int main(void) {
    // 1. A handler that runs with every signal blocked.
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigfillset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &old);
    raise(SIGUSR1);
    memset(&old, 0, sizeof old);
    sigaction(SIGUSR1, NULL, &old);
    printf("usr1 runs %d; its mask blocks SIGTRAP %d, SIGINT %d\n", (int)usr1_runs, sigismember(&old.sa_mask, SIGTRAP),
           sigismember(&old.sa_mask, SIGINT));

    // 2. The program's own SIGTRAP handler.
    struct sigaction ta, prev;
    memset(&ta, 0, sizeof ta);
    memset(&prev, 0, sizeof prev);
    ta.sa_sigaction = on_trap;
    ta.sa_flags = SA_SIGINFO;
    sigemptyset(&ta.sa_mask);
    sigaddset(&ta.sa_mask, SIGUSR2);
    sigaction(SIGTRAP, &ta, &prev);
    printf("SIGTRAP before: default %d, flags %#x\n", prev.sa_handler == SIG_DFL, (unsigned)prev.sa_flags);
    raise(SIGTRAP);
    printf("after raise: handler runs %d, si_code %d\n", (int)trap_runs, (int)last_code);
    __asm__ volatile("int3");
    printf("after int3: handler runs %d, si_code %d\n", (int)trap_runs, (int)last_code);
    int s = trapped_a(1000);
    printf("trapped_a %d; handler runs %d\n", s, (int)trap_runs);
    memset(&prev, 0, sizeof prev);
    sigaction(SIGTRAP, NULL, &prev);
    printf("SIGTRAP now: ours %d, flags %#x, mask SIGUSR2 %d SIGTRAP %d\n", prev.sa_sigaction == on_trap,
           (unsigned)prev.sa_flags, sigismember(&prev.sa_mask, SIGUSR2), sigismember(&prev.sa_mask, SIGTRAP));

    // 3. Ignored.
    void (*h)(int) = signal(SIGTRAP, SIG_IGN);
    printf("signal gave back our handler %d\n", h == (void (*)(int))on_trap);
    raise(SIGTRAP);
    s += trapped_a(10);
    printf("ignored: handler runs %d\n", (int)trap_runs);
    h = signal(SIGTRAP, SIG_DFL);
    printf("signal gave back SIG_IGN %d\n", h == SIG_IGN);

    // 4. Everything blocked; the workers inherit it.
    sigset_t all, cur, oldm;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &oldm);
    show("main old", &oldm);
    sigprocmask(SIG_SETMASK, NULL, &cur);
    show("main now", &cur);
    s += trapped_a(1000);
    for (long i = 1; i <= 2; i++) {
        pthread_t t;
        pthread_create(&t, NULL, worker, (void *)i);
        pthread_join(t, NULL);
    }
    printf("main sum %d\n", s);
    return 3;
}
