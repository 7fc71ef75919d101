// locks_cancel: pthread_cancel of a thread blocked in pthread_cond_wait, with a cleanup
// handler (tests/locks.rs: cancellation through the condvar wrapper; exit "canceled").
// locks_cancelpp.cpp is the C++ twin, where a destructor runs during the unwinding.
//
// sleeper locks m, pushes the cleanup handler on_cancel, raises the atomic flag
// `waiting` and waits on c until a flag that is never set is set. main waits for
// `waiting`, takes and releases m (possible only once sleeper is inside
// pthread_cond_wait), cancels sleeper and joins it. The cancellation acts in
// pthread_cond_wait, which takes m back before the cleanup handler runs; on_cancel prints
// a line and unlocks m. main prints whether the join returned PTHREAD_CANCELED, and takes
// m once more (it would hang if the handler had not released it).
//
// With TIMES_FILE set (see timing.h):
//     tid ROLE TID                 gettid() of main and sleeper
//     handle sleeper 0xPTHREAD_T   the sleeper's pthread_t
//     obj NAME 0xADDR              run-time addresses of m and c
//
//# cflags: -pthread
//# variants: pie-O2 nopie-O0
//# expect: threads 2
//# expect: threads from sleeper 1
//# expect: thread sleeper calls on_cancel 1
//# expect: main calls main 1
#define _GNU_SOURCE
#include "timing.h"
#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#define SIDE(...)                                                                         \
    do {                                                                                  \
        char line_[256];                                                                  \
        times_line(line_, snprintf(line_, sizeof line_, __VA_ARGS__));                    \
    } while (0)

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int waiting;
static volatile int never;

__attribute__((noinline)) void on_cancel(void *arg) {
    printf("cleanup handler ran (%s)\n", (const char *)arg);
    pthread_mutex_unlock(&m);
}

__attribute__((noinline)) void *sleeper(void *arg) {
    (void)arg;
    SIDE("tid sleeper %ld\n", thread_id());
    pthread_mutex_lock(&m);
    pthread_cleanup_push(on_cancel, "sleeper");
    __atomic_store_n(&waiting, 1, __ATOMIC_RELEASE);
    while (!never)
        pthread_cond_wait(&c, &m);
    pthread_cleanup_pop(1);
    return (void *)7;
}

int main(void) {
    SIDE("tid main %ld\n", thread_id());
    SIDE("obj m 0x%lx\n", (unsigned long)(uintptr_t)&m);
    SIDE("obj c 0x%lx\n", (unsigned long)(uintptr_t)&c);
    pthread_t t;
    if (pthread_create(&t, NULL, sleeper, NULL)) {
        fprintf(stderr, "pthread_create failed\n");
        return 1;
    }
    SIDE("handle sleeper 0x%lx\n", (unsigned long)t);
    while (!__atomic_load_n(&waiting, __ATOMIC_ACQUIRE))
        sched_yield();
    pthread_mutex_lock(&m);
    pthread_mutex_unlock(&m);
    pthread_cancel(t);
    void *v = NULL;
    int rc = pthread_join(t, &v);
    printf("join %d: %s\n", rc, v == PTHREAD_CANCELED ? "canceled" : "not canceled");
    pthread_mutex_lock(&m);
    printf("mutex free again\n");
    pthread_mutex_unlock(&m);
    fprintf(stderr, "locks_cancel: done\n");
    times_write();
    return 0;
}
