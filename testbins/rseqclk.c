// rseqclk: timed functions that block or take a signal (tests/it/rseqclk.rs, issue 14). The
// CPU clock must see that the thread was switched out while it waited, whichever detector
// the runtime chose (the rseq area or the perf page): each function's CPU time is about its
// own CLOCK_THREAD_CPUTIME_ID, far below its wall time.
//
// A worker thread runs, each once: `in_futex` (a futex wait that times out after 40 ms),
// `in_sleep` (nanosleep 40 ms), `in_pipe` (a blocking read of a pipe another thread writes
// 40 ms later) and `in_signal` (pause() until SIGUSR1 arrives 40 ms later; the handler
// spins). Each spins a fixed amount before and after its wait. Then the process forks; the
// child runs `in_child` (spin, nanosleep 40 ms, spin) and exits.
//
// With TIMES_FILE set it writes `FUNCTION TID CPU_NS WALL_NS` per call (timing.h), the
// child to TIMES_FILE.child, and `cap_user_time N`: whether a perf task-clock page of this
// machine offers cap_user_time (-1: perf refused), which decides the runtime's detector.
// stdout does not depend on timing.
//
//# cflags: -pthread
//# variants: pie-O2
//# expect: profiles 2
//# expect: threads 2
//# expect: main calls main 1
//# expect: child threads 1
//# expect: threads from worker 1
//# expect: thread worker calls in_futex 1
//# expect: thread worker calls in_sleep 1
//# expect: thread worker calls in_pipe 1
//# expect: thread worker calls in_signal 1
//# expect: child main calls in_child 1
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include "timing.h"

/* The kernel's numbers (linux/futex.h and linux/perf_event.h are not in musl's headers). */
#define WAIT_PRIVATE 128 /* FUTEX_WAIT | FUTEX_PRIVATE_FLAG */
#define PAGE_CAPS 40     /* perf_event_mmap_page: capabilities; bit 3 cap_user_time */

#define SPIN 3000000L
#define WAIT_NS 40000000L

static unsigned long sink;
static int pipe_fd[2];
static volatile sig_atomic_t got_signal;
static pthread_t worker_thread;
/* The step the worker is at (2: about to read the pipe, 3: about to pause). */
static volatile int step;

static void on_usr1(int sig) {
    (void)sig;
    sink += spin(sink, SPIN / 4);
    got_signal = 1;
}

static void sleep_ns(long ns) {
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

__attribute__((noinline)) void in_futex(void) {
    sink += spin(sink, SPIN);
    uint32_t word = 0;
    struct timespec ts = {0, WAIT_NS};
    syscall(SYS_futex, &word, WAIT_PRIVATE, 0, &ts, 0, 0);
    sink += spin(sink, SPIN);
}

__attribute__((noinline)) void in_sleep(void) {
    sink += spin(sink, SPIN);
    sleep_ns(WAIT_NS);
    sink += spin(sink, SPIN);
}

__attribute__((noinline)) void in_pipe(void) {
    sink += spin(sink, SPIN);
    char c;
    if (read(pipe_fd[0], &c, 1) != 1)
        exit(3);
    sink += spin(sink, SPIN);
}

__attribute__((noinline)) void in_signal(void) {
    sink += spin(sink, SPIN);
    while (!got_signal)
        pause();
    sink += spin(sink, SPIN);
}

__attribute__((noinline)) void in_child(void) {
    sink += spin(sink, SPIN);
    sleep_ns(WAIT_NS);
    sink += spin(sink, SPIN);
}

#define MEASURE(f)                                                                                 \
    do {                                                                                           \
        struct span s = span_start();                                                              \
        f();                                                                                       \
        times_span(#f, thread_id(), span_since(s));                                                \
    } while (0)

static void *worker(void *arg) {
    (void)arg;
    MEASURE(in_futex);
    MEASURE(in_sleep);
    __atomic_store_n(&step, 2, __ATOMIC_RELEASE);
    MEASURE(in_pipe);
    __atomic_store_n(&step, 3, __ATOMIC_RELEASE);
    MEASURE(in_signal);
    return NULL;
}

/* Whether this machine's perf task-clock page offers cap_user_time (-1: perf refused). */
static int cap_user_time(void) {
    /* perf_event_attr of 64 bytes: type SOFTWARE, size; config TASK_CLOCK; exclude_kernel,
       exclude_hv. */
    uint64_t attr[8] = {1 | 64ULL << 32, 1, 0, 0, 0, 1 << 5 | 1 << 6, 0, 0};
    long fd = syscall(SYS_perf_event_open, attr, 0, -1, -1, 0);
    if (fd < 0)
        return -1;
    unsigned char *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, (int)fd, 0);
    close((int)fd);
    if (p == MAP_FAILED)
        return -1;
    uint64_t caps;
    memcpy(&caps, p + PAGE_CAPS, sizeof caps);
    munmap(p, 4096);
    return (int)(caps >> 3 & 1);
}

int main(void) {
    signal(SIGUSR1, on_usr1);
    if (pipe(pipe_fd) != 0)
        return 2;
    pthread_create(&worker_thread, NULL, worker, NULL);
    /* The pipe's byte and the signal each come 40 ms after the worker says it is about to
       wait for them. */
    while (__atomic_load_n(&step, __ATOMIC_ACQUIRE) < 2)
        sleep_ns(WAIT_NS / 8);
    sleep_ns(WAIT_NS);
    if (write(pipe_fd[1], "x", 1) != 1)
        return 2;
    while (__atomic_load_n(&step, __ATOMIC_ACQUIRE) < 3)
        sleep_ns(WAIT_NS / 8);
    sleep_ns(WAIT_NS);
    while (!got_signal) {
        pthread_kill(worker_thread, SIGUSR1);
        sleep_ns(WAIT_NS / 4);
    }
    pthread_join(worker_thread, NULL);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        times_len = 0;
        MEASURE(in_child);
        const char *path = getenv("TIMES_FILE");
        if (path && *path) {
            char child[4096];
            snprintf(child, sizeof child, "%s.child", path);
            setenv("TIMES_FILE", child, 1);
            times_write();
        }
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    char line[64];
    times_line(line, snprintf(line, sizeof line, "cap_user_time %d\n", cap_user_time()));
    times_write();
    printf("done: child %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}
