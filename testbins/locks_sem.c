// locks_sem: a pipeline of three stages passing 500 tokens through semaphores
// (tests/locks.rs: semaphore waits, exact counts, BLOCKED_SEMAPHORE).
//
// Semaphores s[0], s[1], s[2] start at 0. Stage k (a thread running `stage`) calls
// sem_wait(&s[k]) exactly 500 times; stages 0 and 1 call sem_post(&s[k + 1]) after each
// wait. main sleeps 30 ms after creating the stages (so stage 0 blocks at its first
// wait), then calls sem_post(&s[0]) 500 times from `feed`. Every sem_wait returns 0 (no
// signals arrive). Posts are not waits: main never waits on a semaphore.
//
// With TIMES_FILE set (see timing.h):
//     tid ROLE TID                 gettid() of main and stage0..stage2
//     obj sK 0xADDR                run-time address of s[K]
//     semwait stageK sK N NS       stage K's sem_wait calls and their summed wall time
// stdout (a checksum of the tokens) does not depend on timing.
//
//# cflags: -pthread
//# variants: pie-O2 nopie-O0
//# expect: threads 4
//# expect: threads from stage 3
//# expect: thread stage calls stage 1
//# expect: main calls feed 1
//# expect: main calls main 1
#define _GNU_SOURCE
#include "timing.h"
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>

#define STAGES 3
#define TOKENS 500

#define SIDE(...)                                                                         \
    do {                                                                                  \
        char line_[256];                                                                  \
        times_line(line_, snprintf(line_, sizeof line_, __VA_ARGS__));                    \
    } while (0)

static sem_t s[STAGES];
static long slot[STAGES][TOKENS];
static unsigned long checksum[STAGES];

__attribute__((noinline)) void *stage(void *arg) {
    long k = (long)arg;
    SIDE("tid stage%ld %ld\n", k, thread_id());
    long waits = 0, wait_ns = 0;
    for (long i = 0; i < TOKENS; i++) {
        long t0 = wall_now_raw();
        if (sem_wait(&s[k]) != 0) {
            perror("sem_wait");
            exit(3);
        }
        wait_ns += wall_now_raw() - t0;
        waits++;
        long v = slot[k][i] * 3 + k;
        checksum[k] = checksum[k] * 31 + (unsigned long)v;
        if (k + 1 < STAGES) {
            slot[k + 1][i] = v;
            sem_post(&s[k + 1]);
        }
    }
    SIDE("semwait stage%ld s%ld %ld %ld\n", k, k, waits, wait_ns);
    return NULL;
}

__attribute__((noinline)) void feed(void) {
    for (long i = 0; i < TOKENS; i++) {
        slot[0][i] = i;
        sem_post(&s[0]);
    }
    __asm__ volatile("" ::: "memory");
}

int main(void) {
    SIDE("tid main %ld\n", thread_id());
    for (int k = 0; k < STAGES; k++) {
        sem_init(&s[k], 0, 0);
        SIDE("obj s%d 0x%lx\n", k, (unsigned long)(uintptr_t)&s[k]);
    }
    pthread_t t[STAGES];
    for (long k = 0; k < STAGES; k++) {
        if (pthread_create(&t[k], NULL, stage, (void *)k)) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    struct timespec ts = {0, 30 * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
    feed();
    for (int k = 0; k < STAGES; k++)
        pthread_join(t[k], NULL);
    for (int k = 0; k < STAGES; k++)
        printf("stage %d: %d tokens, checksum %lu\n", k, TOKENS, checksum[k]);
    times_write();
    return 0;
}
