// A threaded program for the static-executable tests (tests/it/statics.rs), built three
// ways: glibc `-static`, glibc `-static-pie` and `musl-gcc -static`. It lives in its own
// directory: the behaviour module builds every testbins/*.c as a dynamic program.
// Workers 0..2 call `tick` 100, 200 and 300 times, each under the mutex `counter_lock`;
// main calls `tick` 7 times; `waiter` blocks on `held` while main keeps it 60 ms (a
// contended lock wait); a forked child calls `child_work` 5 times and exits 3. The output
// is deterministic.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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

static void *waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&held); // main holds it for 60 ms
    pthread_mutex_unlock(&held);
    return NULL;
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
