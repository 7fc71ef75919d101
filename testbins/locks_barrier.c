// locks_barrier: four threads meet at a barrier 100 times (tests/locks.rs: barrier waits,
// exact counts, BLOCKED_BARRIER).
//
// Each of 4 threads running `racer` calls pthread_barrier_wait exactly 100 times; racer 0
// sleeps 1 ms before each of its calls, so the other three block about 1 ms per round.
// Each barrier wait returns PTHREAD_BARRIER_SERIAL_THREAD in exactly one thread per round;
// main prints the total (100).
//
// With TIMES_FILE set (see timing.h):
//     tid ROLE TID                 gettid() of main and racer0..racer3
//     obj b 0xADDR                 run-time address of the barrier
//     bwait racerK b N NS          racer K's barrier waits and their summed wall time
//
//# cflags: -pthread
//# variants: pie-O2 nopie-O0
//# expect: threads 5
//# expect: threads from racer 4
//# expect: thread racer calls racer 1
//# expect: main calls main 1
#define _GNU_SOURCE
#include "timing.h"
#include <pthread.h>
#include <stdint.h>

#define RACERS 4
#define ROUNDS 100

#define SIDE(...)                                                                         \
    do {                                                                                  \
        char line_[256];                                                                  \
        times_line(line_, snprintf(line_, sizeof line_, __VA_ARGS__));                    \
    } while (0)

static pthread_barrier_t b;
static int serial;

__attribute__((noinline)) void *racer(void *arg) {
    long k = (long)arg;
    SIDE("tid racer%ld %ld\n", k, thread_id());
    long waits = 0, wait_ns = 0;
    for (int r = 0; r < ROUNDS; r++) {
        if (k == 0) {
            struct timespec ts = {0, 1000000L};
            while (nanosleep(&ts, &ts) != 0) {
            }
        }
        long t0 = wall_now_raw();
        int rc = pthread_barrier_wait(&b);
        wait_ns += wall_now_raw() - t0;
        waits++;
        if (rc == PTHREAD_BARRIER_SERIAL_THREAD)
            __atomic_fetch_add(&serial, 1, __ATOMIC_RELAXED);
        else if (rc != 0) {
            fprintf(stderr, "pthread_barrier_wait: %d\n", rc);
            exit(3);
        }
    }
    SIDE("bwait racer%ld b %ld %ld\n", k, waits, wait_ns);
    return NULL;
}

int main(void) {
    SIDE("tid main %ld\n", thread_id());
    SIDE("obj b 0x%lx\n", (unsigned long)(uintptr_t)&b);
    pthread_barrier_init(&b, NULL, RACERS);
    pthread_t t[RACERS];
    for (long k = 0; k < RACERS; k++) {
        if (pthread_create(&t[k], NULL, racer, (void *)k)) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    for (int k = 0; k < RACERS; k++)
        pthread_join(t[k], NULL);
    pthread_barrier_destroy(&b);
    printf("%d rounds, %d serial returns\n", ROUNDS, serial);
    times_write();
    return 0;
}
