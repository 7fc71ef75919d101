// big_lock: names from debug info (tests/it/names.rs, issue 11). Built with -g, then split
// into a stripped program and its .debug file; the report of the stripped program must name
// the functions and the lock objects as the unstripped build's does.
//
// main creates WORKERS threads (start routine `worker_main`, named "worker-<i>" by
// themselves) that wait for the flag `go`, then each calls `crunch` ROUNDS times under the global mutex `big_lock`
// (contended: every worker takes it in a tight loop, holding it while it crunches), and
// takes `table.lock`, a mutex inside a global struct at offset 32 (named `table+0x20`), once
// per round. main joins every worker, then reads `shared` under big_lock in `read_shared`
// (so big_lock has waits from two functions: its first user worker_main, and read_shared),
// and prints the total.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>

#define WORKERS 4
#define ROUNDS 2000

pthread_mutex_t big_lock = PTHREAD_MUTEX_INITIALIZER;

struct table {
    long pad[4];
    pthread_mutex_t lock;
    long total;
} table = {.lock = PTHREAD_MUTEX_INITIALIZER};

static long shared;
static int go;

__attribute__((noinline)) static long crunch(long x) {
    for (int i = 0; i < 2000; i++) {
        x = x * 6364136223846793005L + 1442695040888963407L;
    }
    return x;
}

__attribute__((noinline)) static void *worker_main(void *arg) {
    long id = (long)arg;
    char name[16];
    snprintf(name, sizeof name, "worker-%ld", id);
    pthread_setname_np(pthread_self(), name);
    while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE)) {
    }
    for (int r = 0; r < ROUNDS; r++) {
        pthread_mutex_lock(&big_lock);
        shared = crunch(shared + id);
        pthread_mutex_unlock(&big_lock);
        pthread_mutex_lock(&table.lock);
        table.total += 1;
        pthread_mutex_unlock(&table.lock);
    }
    return NULL;
}

__attribute__((noinline)) static long read_shared(void) {
    pthread_mutex_lock(&big_lock);
    long v = shared;
    pthread_mutex_unlock(&big_lock);
    return v;
}

int main(void) {
    pthread_t t[WORKERS];
    for (long i = 0; i < WORKERS; i++) {
        if (pthread_create(&t[i], NULL, worker_main, (void *)(i + 1)) != 0) {
            return 1;
        }
    }
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(t[i], NULL);
    }
    printf("total %ld\n", table.total + (read_shared() == 0));
    return 0;
}
