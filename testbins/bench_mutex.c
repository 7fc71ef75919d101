// bench_mutex: the mutex workload of issue 14. Two producers and two consumers (4 threads)
// pass N items (argv[1], default 1,000,000) through a bounded queue of 64 slots guarded by
// one pthread mutex and two condition variables; every item is made by `make_item` and
// used by `use_item`. tests/bench/perf.py measures what calls, lock metrics and the default
// spec cost here; the behaviour tests run it with a small N.
//
//# args: 10000
//# variants: pie-O2 nopie-O0
//# cflags: -pthread
//# expect: threads 5
//# expect: threads from producer 2
//# expect: threads from consumer 2
//# expect: thread producer calls make_item 5000
//# expect: thread consumer calls use_item 5000
//# expect: main calls main 1
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define SLOTS 64

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER, not_empty = PTHREAD_COND_INITIALIZER;
static long queue[SLOTS], head, tail, per_thread;

__attribute__((noipa)) long make_item(long i) {
    return i * 7 + 3;
}

__attribute__((noipa)) long use_item(long v) {
    return v % 1000;
}

static void *producer(void *arg) {
    long base = (long)arg;
    for (long i = 0; i < per_thread; i++) {
        long v = make_item(base + i);
        pthread_mutex_lock(&m);
        while (tail - head == SLOTS)
            pthread_cond_wait(&not_full, &m);
        queue[tail++ % SLOTS] = v;
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&m);
    }
    return NULL;
}

static void *consumer(void *arg) {
    long sum = 0;
    (void)arg;
    for (long i = 0; i < per_thread; i++) {
        pthread_mutex_lock(&m);
        while (tail == head)
            pthread_cond_wait(&not_empty, &m);
        long v = queue[head++ % SLOTS];
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&m);
        sum += use_item(v);
    }
    return (void *)sum;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000L;
    per_thread = n / 2;
    pthread_t t[4];
    pthread_create(&t[0], NULL, producer, (void *)0L);
    pthread_create(&t[1], NULL, producer, (void *)per_thread);
    pthread_create(&t[2], NULL, consumer, NULL);
    pthread_create(&t[3], NULL, consumer, NULL);
    long total = 0;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        total += (long)r;
    }
    printf("bench_mutex: %ld items, checksum %ld\n", 2 * per_thread, total);
    return 0;
}
