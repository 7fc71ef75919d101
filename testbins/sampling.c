// sampling: short, frequent calls that the runtime samples (one call in 64 timed after the
// first 512 on a thread), for tests/it/sampling.rs: counts and call paths stay exact through
// recursion and through frames left by longjmp, and a sampled function's estimated time
// agrees with what the uninstrumented program measures.
//
// - `rec(3)`, 20,000 times: rec → rec → rec → rec, four nodes of 20,000 calls each.
// - `hop` → `leaf`, 20,000 times; every 100th `leaf` longjmps out through both frames.
// - `drive` calls `work` (about 50–100 ns of arithmetic) 200,000 times; with TIMES_FILE the
//   program writes `drive TID CPU_NS WALL_NS` (timing.h), measured around `drive`.
//
//# args: 200000
//# variants: pie-O2
//# expect: threads 1
//# expect: main calls rec 80000
//# expect: main calls hop 20000
//# expect: main calls leaf 20000
//# expect: main calls work 200000
//# expect: main calls drive 1
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include "timing.h"

static jmp_buf jb;

// Not a loop at -O2: the barrier keeps the recursive call a call.
__attribute__((noinline)) long rec(long n) {
    if (n <= 0)
        return 1;
    long r = rec(n - 1);
    __asm__ volatile("" : "+r"(r));
    return r + n;
}

__attribute__((noinline)) void leaf(long i) {
    if (i % 100 == 99)
        longjmp(jb, 1);
    __asm__ volatile("");
}

__attribute__((noinline)) long hop(long i) {
    leaf(i);
    __asm__ volatile("");
    return i;
}

__attribute__((noinline)) long work(long i) {
    long s = i;
    for (int k = 0; k < 40; k++) {
        s = s * 31 + k;
        __asm__ volatile("" : "+r"(s));
    }
    return s;
}

__attribute__((noinline)) long drive(long n) {
    long acc = 0;
    for (long i = 0; i < n; i++)
        acc += work(i);
    return acc;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000L;
    long acc = 0;
    for (int i = 0; i < 20000; i++)
        acc += rec(3);
    volatile int jumps = 0;
    for (long i = 0; i < 20000; i++) {
        if (setjmp(jb) == 0)
            acc += hop(i);
        else
            jumps++;
    }
    struct span s = span_start();
    acc += drive(n);
    times_span("drive", thread_id(), span_since(s));
    times_write();
    printf("sampling: %d jumps, acc %ld\n", jumps, acc);
    return 0;
}
