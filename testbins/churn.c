// churn: 2,000 short-lived threads. The first 1,000 run `worker` one at a time (created
// and joined in sequence, so glibc hands each new thread the stack and thread pointer of
// the one before); the next 1,000 run `batch_worker` in batches of 8 running at once.
// Every thread calls `f` exactly 10 times. A profile must show 2,000 separate threads
// with f = 10 each: a new thread on a recycled stack must get its own column.
//
//# cflags: -pthread
//# expect: threads 2001
//# expect: threads from worker 1000
//# expect: threads from batch_worker 1000
//# expect: thread worker calls f 10
//# expect: thread worker calls worker 1
//# expect: thread batch_worker calls f 10
//# expect: thread batch_worker calls batch_worker 1
//# expect: main calls f 0
//# expect: main calls main 1
#include <pthread.h>
#include <stdio.h>

#define SEQUENTIAL 1000
#define BATCHES 125
#define BATCH 8

__attribute__((noipa)) long f(long x) {
    return x * 2 + 1;
}

static long run_f(long seed) {
    long s = 0;
    for (int i = 0; i < 10; i++)
        s += f(seed + i);
    return s;
}

__attribute__((noipa)) void *worker(void *arg) {
    long *slot = arg;
    *slot = run_f(*slot);
    return NULL;
}

__attribute__((noipa)) void *batch_worker(void *arg) {
    long *slot = arg;
    *slot = run_f(*slot);
    return NULL;
}

int main(void) {
    long total = 0;
    for (int i = 0; i < SEQUENTIAL; i++) {
        pthread_t t;
        long slot = i;
        if (pthread_create(&t, NULL, worker, &slot) != 0) {
            fprintf(stderr, "churn: pthread_create failed\n");
            return 2;
        }
        pthread_join(t, NULL);
        total += slot;
    }
    for (int b = 0; b < BATCHES; b++) {
        pthread_t t[BATCH];
        long slots[BATCH];
        for (int k = 0; k < BATCH; k++) {
            slots[k] = b * BATCH + k;
            if (pthread_create(&t[k], NULL, batch_worker, &slots[k]) != 0) {
                fprintf(stderr, "churn: pthread_create failed\n");
                return 2;
            }
        }
        for (int k = 0; k < BATCH; k++) {
            pthread_join(t[k], NULL);
            total += slots[k];
        }
    }
    printf("churn: %d threads, total %ld\n", SEQUENTIAL + BATCHES * BATCH, total);
    return 0;
}
