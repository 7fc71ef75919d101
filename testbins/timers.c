// timers: functions whose CPU and wall time the program measures itself, for checking a
// profile's per-thread timers against independent clocks (tests/timers.rs).
//
// Three workers (k = 1, 2, 3) each call burn(20 * k) three times: burn(ms) spins until its
// thread's CPU clock has advanced by ms, so the threads burn about 60, 120 and 180 ms of
// CPU. Each worker reads its thread's CPU clock and CLOCK_MONOTONIC around each call. After
// joining them, main calls nap() once, which sleeps 100 ms in nanosleep.
//
// With TIMES_FILE set (see timing.h), it writes
//     burn TID CPU_NS WALL_NS     one line per call of burn, measured by the caller
//     nap TID CPU_NS WALL_NS      the call of nap, measured by main
//     main TID CPU_NS WALL_NS     main's body, from its first statement to just before
//                                 writing the file
// stdout does not depend on timing.
//
//# cflags: -pthread
//# variants: pie-O2 nopie-O0
//# expect: threads 4
//# expect: threads from worker 3
//# expect: thread worker calls worker 1
//# expect: thread worker calls burn 3
//# expect: main calls burn 0
//# expect: main calls nap 1
//# expect: main calls main 1
#include "timing.h"
#include <pthread.h>

#define WORKERS 3
#define BURNS 3
#define NAP_MS 100

static volatile unsigned long sink;

/* Spin until this thread has used `ms` more milliseconds of CPU. */
__attribute__((noipa)) unsigned long burn(long ms) {
    long end = cpu_now() + ms * 1000000L;
    unsigned long x = ms;
    do
        x = spin(x, 20000);
    while (cpu_now() < end);
    return x;
}

__attribute__((noipa)) void nap(void) {
    struct timespec ts = {0, NAP_MS * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

__attribute__((noipa)) void *worker(void *arg) {
    long k = (long)arg;
    long tid = thread_id();
    for (int i = 0; i < BURNS; i++) {
        struct span s = span_start();
        sink = burn(20 * k);
        times_span("burn", tid, span_since(s));
    }
    return NULL;
}

int main(void) {
    struct span whole = span_start();
    long tid = thread_id();
    pthread_t t[WORKERS];
    for (long k = 1; k <= WORKERS; k++) {
        if (pthread_create(&t[k - 1], NULL, worker, (void *)k) != 0) {
            fprintf(stderr, "timers: pthread_create failed\n");
            return 2;
        }
    }
    for (int k = 0; k < WORKERS; k++)
        pthread_join(t[k], NULL);

    struct span s = span_start();
    nap();
    times_span("nap", tid, span_since(s));

    times_span("main", tid, span_since(whole));
    times_write();
    printf("timers: %d workers burned %d, %d and %d ms of CPU %d times each; main napped %d ms\n", WORKERS, 20, 40,
           60, BURNS, NAP_MS);
    fprintf(stderr, "timers: done\n");
    return 0;
}
