// ctl_loop: a long-running program driven by commands on stdin, for run-time control
// (tests/control.rs: stint ctl enable/disable/snapshot, control files, top).
//
// Two workers, named "worker-a" and "worker-b" by pthread_setname_np in main right after
// pthread_create, wait on a condition variable for a job. Commands, one per line:
//     work N   each worker calls tick() exactly N times; main prints "done N" when both
//              finished (so between commands every thread is idle, blocked in a wait)
//     run      the workers call tick() until "stop"; main prints "running"
//     stop     main stops them, waits, prints "stopped"
//     quit     (or end of input) main joins the workers, prints "bye", exits 0
// main calls heartbeat() once per command. stdout does not depend on timing.
//
//# cflags: -pthread
//# variants: pie-O2 nopie-O0
//# expect: threads 3
//# expect: threads from worker 2
//# expect: thread worker calls worker 1
//# expect: thread worker calls tick 0
//# expect: main calls heartbeat 0
//# expect: main calls main 1
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static unsigned long generation, job_n, finished;
static int job_run, quitting;
static volatile int stop_flag;
static volatile unsigned long sink;

__attribute__((noinline)) void tick(unsigned long i) {
    sink += i;
}

__attribute__((noinline)) void heartbeat(void) {
    sink++;
}

static void *worker(void *arg) {
    (void)arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&m);
    for (;;) {
        while (generation == seen && !quitting)
            pthread_cond_wait(&job_cv, &m);
        if (quitting)
            break;
        seen = generation;
        unsigned long n = job_n;
        int run = job_run;
        pthread_mutex_unlock(&m);
        if (run) {
            for (unsigned long i = 0; !stop_flag; i++)
                tick(i);
        } else {
            for (unsigned long i = 0; i < n; i++)
                tick(i);
        }
        pthread_mutex_lock(&m);
        finished++;
        pthread_cond_broadcast(&done_cv);
    }
    pthread_mutex_unlock(&m);
    return NULL;
}

static void post(unsigned long n, int run) {
    pthread_mutex_lock(&m);
    job_n = n;
    job_run = run;
    finished = 0;
    generation++;
    pthread_cond_broadcast(&job_cv);
    pthread_mutex_unlock(&m);
}

static void wait_done(void) {
    pthread_mutex_lock(&m);
    while (finished < 2)
        pthread_cond_wait(&done_cv, &m);
    pthread_mutex_unlock(&m);
}

int main(void) {
    pthread_t t[2];
    const char *names[2] = {"worker-a", "worker-b"};
    for (int i = 0; i < 2; i++) {
        if (pthread_create(&t[i], NULL, worker, NULL) != 0)
            return 1;
        pthread_setname_np(t[i], names[i]);
    }
    char line[128];
    int running = 0;
    while (fgets(line, sizeof line, stdin)) {
        heartbeat();
        unsigned long n;
        if (sscanf(line, "work %lu", &n) == 1 && !running) {
            post(n, 0);
            wait_done();
            printf("done %lu\n", n);
        } else if (strncmp(line, "run", 3) == 0 && !running) {
            stop_flag = 0;
            post(0, 1);
            running = 1;
            printf("running\n");
        } else if (strncmp(line, "stop", 4) == 0 && running) {
            stop_flag = 1;
            wait_done();
            running = 0;
            printf("stopped\n");
        } else if (strncmp(line, "quit", 4) == 0) {
            break;
        }
        fflush(stdout);
    }
    if (running) {
        stop_flag = 1;
        wait_done();
    }
    pthread_mutex_lock(&m);
    quitting = 1;
    pthread_cond_broadcast(&job_cv);
    pthread_mutex_unlock(&m);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("bye\n");
    return 0;
}
