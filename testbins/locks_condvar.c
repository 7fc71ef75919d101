// locks_condvar: a producer and a consumer pass exactly 20000 items through a bounded
// queue of 8 guarded by one mutex and two condition variables (tests/locks.rs: condvar
// waits, objects and the function that first used them).
//
// The first call on each object is fixed by the program:
//   - q_lock: queue_setup() (main) locks and unlocks it before any thread exists;
//   - not_full: queue_setup() signals it (with nobody waiting) before any thread exists;
//   - not_empty: the consumer's first consume_item() waits on it: main creates the consumer
//     first and creates the producer only after taking q_lock once more, which it can do
//     only when the consumer has released q_lock inside that pthread_cond_wait.
// No first call is a tail call, so the return address lies in the function named above.
//
// Each thread counts its own calls: every pthread_mutex_lock, and every pthread_cond_wait
// (each returns 0: no timeouts, no cancellation). With TIMES_FILE set (see timing.h):
//     tid ROLE TID                 gettid() of main, producer and consumer
//     obj NAME 0xADDR              run-time addresses of q_lock, not_full, not_empty
//     locks ROLE N                 pthread_mutex_lock calls of main, producer, consumer
//     cwaits ROLE OBJ N NS         pthread_cond_wait calls of the producer on not_full and of
//                                  the consumer on not_empty, and their summed wall time
// stdout (the item count and a checksum) does not depend on timing.
//
//# cflags: -pthread
//# variants: pie-O2 nopie-O0
//# expect: threads 3
//# expect: threads from producer 1
//# expect: threads from consumer 1
//# expect: thread producer calls produce_item 20000
//# expect: thread consumer calls consume_item 20000
//# expect: main calls queue_setup 1
//# expect: main calls main 1
#define _GNU_SOURCE
#include "timing.h"
#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#define ITEMS 20000
#define CAP 8

#define SIDE(...)                                                                         \
    do {                                                                                  \
        char line_[256];                                                                  \
        times_line(line_, snprintf(line_, sizeof line_, __VA_ARGS__));                    \
    } while (0)

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
static long queue[CAP];
static int head, count;
static int consumer_waiting;

/* Per-thread tallies (each written by its own thread only). */
static __thread long my_locks, my_cwaits, my_cwait_ns;

__attribute__((noinline)) void queue_setup(void) {
    pthread_mutex_lock(&q_lock);
    my_locks++;
    pthread_cond_signal(&not_full);
    head = count = 0;
    pthread_mutex_unlock(&q_lock);
    __asm__ volatile("" ::: "memory"); /* the unlock is not a tail call */
}

__attribute__((noinline)) void produce_item(long v) {
    pthread_mutex_lock(&q_lock);
    my_locks++;
    while (count == CAP) {
        long t0 = wall_now_raw();
        pthread_cond_wait(&not_full, &q_lock);
        my_cwait_ns += wall_now_raw() - t0;
        my_cwaits++;
    }
    queue[(head + count) % CAP] = v;
    count++;
    pthread_cond_signal(&not_empty);
    pthread_mutex_unlock(&q_lock);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) long consume_item(void) {
    pthread_mutex_lock(&q_lock);
    my_locks++;
    while (count == 0) {
        __atomic_store_n(&consumer_waiting, 1, __ATOMIC_RELEASE);
        long t0 = wall_now_raw();
        pthread_cond_wait(&not_empty, &q_lock);
        my_cwait_ns += wall_now_raw() - t0;
        my_cwaits++;
    }
    long v = queue[head];
    head = (head + 1) % CAP;
    count--;
    pthread_cond_signal(&not_full);
    pthread_mutex_unlock(&q_lock);
    return v;
}

__attribute__((noinline)) void *producer(void *arg) {
    (void)arg;
    for (long i = 0; i < ITEMS; i++)
        produce_item(i * 7 + 1);
    SIDE("tid producer %ld\n", thread_id());
    SIDE("locks producer %ld\n", my_locks);
    SIDE("cwaits producer not_full %ld %ld\n", my_cwaits, my_cwait_ns);
    return NULL;
}

__attribute__((noinline)) void *consumer(void *arg) {
    unsigned long sum = 0;
    for (long i = 0; i < ITEMS; i++)
        sum = sum * 31 + (unsigned long)consume_item();
    *(unsigned long *)arg = sum;
    SIDE("tid consumer %ld\n", thread_id());
    SIDE("locks consumer %ld\n", my_locks);
    SIDE("cwaits consumer not_empty %ld %ld\n", my_cwaits, my_cwait_ns);
    return NULL;
}

int main(void) {
    SIDE("tid main %ld\n", thread_id());
    SIDE("obj q_lock 0x%lx\n", (unsigned long)(uintptr_t)&q_lock);
    SIDE("obj not_full 0x%lx\n", (unsigned long)(uintptr_t)&not_full);
    SIDE("obj not_empty 0x%lx\n", (unsigned long)(uintptr_t)&not_empty);
    queue_setup();
    unsigned long sum = 0;
    pthread_t p, c;
    if (pthread_create(&c, NULL, consumer, &sum)) {
        fprintf(stderr, "pthread_create failed\n");
        return 1;
    }
    while (!__atomic_load_n(&consumer_waiting, __ATOMIC_ACQUIRE))
        sched_yield();
    /* The consumer set the flag holding q_lock and releases it only inside
       pthread_cond_wait: once main has the lock, the consumer is waiting on not_empty. */
    pthread_mutex_lock(&q_lock);
    my_locks++;
    pthread_mutex_unlock(&q_lock);
    if (pthread_create(&p, NULL, producer, NULL)) {
        fprintf(stderr, "pthread_create failed\n");
        return 1;
    }
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    SIDE("locks main %ld\n", my_locks);
    printf("%d items, checksum %lu\n", ITEMS, sum);
    times_write();
    return 0;
}
