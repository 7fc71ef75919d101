// A threaded program for the static-executable tests (tests/it/statics.rs), built three
// ways: glibc `-static`, glibc `-static-pie` and `musl-gcc -static`. It lives in its own
// directory: the behaviour module builds every testbins/*.c as a dynamic program.
// Workers 0..2 call `tick` 100, 200 and 300 times, each under the mutex `counter_lock`;
// main calls `tick` 7 times; `waiter` blocks on `held`, which main keeps until 60 ms after
// it saw the waiter blocked (a contended lock wait); a forked child calls `child_work` 5 times and exits 3. The output
// is deterministic.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static volatile long total;

__attribute__((noinline)) void tick(long k) {
    pthread_mutex_lock(&counter_lock);
    total += k;
    pthread_mutex_unlock(&counter_lock);
}

__attribute__((noinline)) long child_work(long x) { return x * 3 + 1; }

static void *worker(void *arg) {
    long n = 100 * ((long)arg + 1);
    for (long i = 0; i < n; i++)
        tick(1);
    return NULL;
}

static volatile long waiter_tid; /* set by the waiter just before it locks held */

static void *waiter(void *arg) {
    (void)arg;
    __atomic_store_n(&waiter_tid, syscall(SYS_gettid), __ATOMIC_RELEASE);
    pthread_mutex_lock(&held); // main holds it until 60 ms after the waiter blocked on it
    pthread_mutex_unlock(&held);
    return NULL;
}

/* Whether thread `tid` of this process sleeps (state S in /proc: blocked on held's futex). */
static int sleeping(long tid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *end = strrchr(buf, ')'); /* "tid (comm) S ...": comm may hold spaces */
    return end && end[1] == ' ' && end[2] == 'S';
}

int main(void) {
    pthread_t t[3], w;
    for (long i = 0; i < 3; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0)
            return 10;
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    pthread_mutex_lock(&held);
    if (pthread_create(&w, NULL, waiter, NULL) != 0)
        return 11;
    /* On a loaded machine the waiter may start only after a fixed sleep: wait until it
       is blocked on held (at most 10 s), then keep held 60 ms more. */
    struct timespec poll = {0, 1000 * 1000};
    for (int i = 0; i < 10000; i++) {
        long tid = __atomic_load_n(&waiter_tid, __ATOMIC_ACQUIRE);
        if (tid != 0 && sleeping(tid))
            break;
        nanosleep(&poll, NULL);
    }
    struct timespec ts = {0, 60 * 1000 * 1000};
    nanosleep(&ts, NULL);
    pthread_mutex_unlock(&held);
    pthread_join(w, NULL);
    for (int i = 0; i < 7; i++)
        tick(0);
    printf("total %ld\n", total);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        long s = 0;
        for (int i = 0; i < 5; i++)
            s += child_work(i);
        printf("child %ld\n", s);
        exit(3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("child exited %d\n", WEXITSTATUS(status));
    fprintf(stderr, "done\n");
    return 0;
}
