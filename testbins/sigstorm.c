// sigstorm: instrumentation inside signal handlers, under a 10 kHz signal storm, while
// threads come and go (tests/timers.rs).
//
// setitimer(ITIMER_REAL) sends SIGALRM every 100 us; the handler on_alarm() counts its runs
// and calls tick(); both are instrumented, so instrumentation runs inside handlers that
// may have interrupted a trampoline, a timer routine or a thread's registration. Meanwhile
// main creates and joins 200 short-lived threads, 4 at a time; each runs worker(), which
// calls work() 50 times (about 0.05 ms each). Then main stops the timer and lets a SIGALRM
// that may still be pending through before it reads the count.
//
// Usage: sigstorm [main|workers]  (who takes the signals; default main)
//   main     workers start with SIGALRM blocked, so every handler runs on the main thread,
//            which was registered long before the timer started: no event can be lost,
//            and tick's calls in the profile equal the handler runs exactly.
//   workers  main blocks SIGALRM and workers start with it unblocked (set before their
//            first instruction), so handlers run on workers at any point, their
//            registration included; events lost there are counted in skipped_reentrant.
//            A signal left pending while no worker runs reaches the next thread before
//            its start routine, so such a thread may have on_alarm as its first function.
//
// With TIMES_FILE set (see timing.h), it writes `handler N` (handler runs) and `tick N`
// (tick's own count of its calls; always N as well). stdout does not depend on timing.
//
//# cflags: -pthread
//# variants: pie-O2 nopie-O0
//# expect: threads 201
//# expect: threads from worker 200
//# expect: thread worker calls worker 1
//# expect: thread worker calls work 50
//# expect: main calls work 0
//# expect: main calls main 1
#define _GNU_SOURCE
#include "timing.h"
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#define THREADS 200
#define WAVE 4
#define WORKS 50
#define WORK_SPIN 33000L /* about 0.05 ms */

static long handler_runs, tick_runs;

__attribute__((noipa)) void tick(void) {
    __atomic_fetch_add(&tick_runs, 1, __ATOMIC_RELAXED);
}

static void on_alarm(int sig) {
    (void)sig;
    __atomic_fetch_add(&handler_runs, 1, __ATOMIC_RELAXED);
    tick();
}

__attribute__((noipa)) unsigned long work(unsigned long x) {
    return spin(x, WORK_SPIN);
}

__attribute__((noipa)) void *worker(void *arg) {
    unsigned long *slot = arg;
    unsigned long x = *slot;
    for (int i = 0; i < WORKS; i++)
        x = work(x);
    *slot = x;
    return NULL;
}

static void set_timer(long usec) {
    struct itimerval it = {{0, usec}, {0, usec}};
    if (setitimer(ITIMER_REAL, &it, NULL) != 0) {
        perror("sigstorm: setitimer");
        exit(2);
    }
}

static void mask_alarm(int how) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGALRM);
    pthread_sigmask(how, &s, NULL);
}

int main(int argc, char **argv) {
    int to_workers = 0;
    if (argc > 1 && strcmp(argv[1], "workers") == 0)
        to_workers = 1;
    else if (argc > 1 && strcmp(argv[1], "main") != 0) {
        fprintf(stderr, "usage: sigstorm [main|workers]\n");
        return 2;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);

    /* The signal mask each worker starts with. */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    sigset_t worker_mask;
    sigemptyset(&worker_mask);
    if (to_workers)
        mask_alarm(SIG_BLOCK);
    else
        sigaddset(&worker_mask, SIGALRM);
    if (pthread_attr_setsigmask_np(&attr, &worker_mask) != 0) {
        fprintf(stderr, "sigstorm: pthread_attr_setsigmask_np failed\n");
        return 2;
    }

    set_timer(100);
    unsigned long sum = 0;
    for (int w = 0; w < THREADS / WAVE; w++) {
        pthread_t t[WAVE];
        unsigned long slot[WAVE];
        for (int i = 0; i < WAVE; i++) {
            slot[i] = w * WAVE + i;
            if (pthread_create(&t[i], &attr, worker, &slot[i]) != 0) {
                fprintf(stderr, "sigstorm: pthread_create failed\n");
                return 2;
            }
        }
        for (int i = 0; i < WAVE; i++) {
            pthread_join(t[i], NULL);
            sum += slot[i];
        }
    }
    set_timer(0);
    if (to_workers)
        mask_alarm(SIG_UNBLOCK); /* a pending SIGALRM is handled here, on main */

    long handlers = __atomic_load_n(&handler_runs, __ATOMIC_RELAXED);
    long ticks = __atomic_load_n(&tick_runs, __ATOMIC_RELAXED);
    times_count("handler", handlers);
    times_count("tick", ticks);
    times_write();
    if (ticks != handlers) {
        fprintf(stderr, "sigstorm: %ld handler runs but %ld ticks\n", handlers, ticks);
        return 1;
    }
    printf("sigstorm: %d threads x %d calls of work, sum %lx\n", THREADS, WORKS, sum);
    return 0;
}
