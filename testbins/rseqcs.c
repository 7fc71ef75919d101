// rseqcs: a program with rseq critical sections of its own (tests/it/rseqclk.rs, issue 14),
// as librseq and tcmalloc have: per-CPU counters incremented in a section on glibc's rseq
// area, which the runtime's CPU clock also arms (rt-lib clock.rs). Two threads call `bump`
// (timed), which makes argv[1] increments (default 200,000), sleeping 0 ns every 1,000 (a
// switch) so that sections get interrupted and the runtime re-arms between them. The total
// must be exact: a section the kernel did not abort when it should have loses updates. It
// prints the total, and exits 3 if glibc registered no rseq area.
//
// With TIMES_FILE set it writes `bump TID CPU_NS WALL_NS` per call (timing.h).
//
//# args: 200000
//# cflags: -pthread
//# variants: pie-O2
//# expect: threads 3
//# expect: main calls main 1
//# expect: threads from worker 2
//# expect: thread worker calls bump 1
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/rseq.h>
#include "timing.h"

#define MAX_CPUS 4096

static long counts[MAX_CPUS];
static long n;

/* One increment of this CPU's counter in a critical section; 0, or -1 if it was aborted
   (preempted, migrated or signalled inside: nothing was stored). The descriptor and the
   abort handler (preceded by x86's RSEQ_SIG, as the kernel wants) are in their own
   sections, as librseq lays them out. */
static inline __attribute__((always_inline)) int inc_this_cpu(struct rseq *rs) {
    __asm__ goto(".pushsection __rseq_cs, \"aw\"\n\t"
                 ".balign 32\n\t"
                 "3: .long 0x0, 0x0\n\t"
                 ".quad 1f, (2f - 1f), 4f\n\t"
                 ".popsection\n\t"
                 "leaq 3b(%%rip), %%rax\n\t"
                 "movq %%rax, 8(%[rs])\n\t"
                 "1:\n\t"
                 "movl 4(%[rs]), %%eax\n\t"
                 "andl $4095, %%eax\n\t"
                 "movq (%[c], %%rax, 8), %%rdx\n\t"
                 "addq $1, %%rdx\n\t"
                 "movq %%rdx, (%[c], %%rax, 8)\n\t"
                 "2:\n\t"
                 ".pushsection __rseq_failure, \"ax\"\n\t"
                 ".byte 0x0f, 0xb9, 0x3d\n\t"
                 ".long 0x53053053\n\t"
                 "4:\n\t"
                 "jmp %l[aborted]\n\t"
                 ".popsection\n\t"
                 :
                 : [rs] "r"(rs), [c] "r"(counts)
                 : "memory", "cc", "rax", "rdx"
                 : aborted);
    return 0;
aborted:
    return -1;
}

__attribute__((noinline)) long bump(long k) {
    struct rseq *rs = (struct rseq *)((char *)__builtin_thread_pointer() + __rseq_offset);
    long aborts = 0;
    for (long i = 0; i < k; i++) {
        while (inc_this_cpu(rs) != 0)
            aborts++;
        if (i % 1000 == 999) {
            struct timespec ts = {0, 0};
            nanosleep(&ts, NULL);
        }
    }
    return aborts;
}

static void *worker(void *arg) {
    (void)arg;
    struct span s = span_start();
    bump(n);
    times_span("bump", thread_id(), span_since(s));
    return NULL;
}

int main(int argc, char **argv) {
    n = argc > 1 ? atol(argv[1]) : 200000;
    if (__rseq_size == 0) {
        fprintf(stderr, "rseqcs: glibc registered no rseq area\n");
        return 3;
    }
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    long total = 0;
    for (int i = 0; i < MAX_CPUS; i++)
        total += counts[i];
    times_write();
    printf("total %ld of %ld\n", total, 2 * n);
    return 0;
}
