// clocks: the machine's floor for tests/bench/perf.py: ns per rdtsc and per
// clock_gettime(CLOCK_THREAD_CPUTIME_ID) (a system call: the vDSO does not serve CPU-time
// clocks), each the best of 5 batches of N reads (argv[1], default 1,000,000); and whether
// the thread's perf task-clock page offers `cap_user_time` (the runtime then re-synchronises
// its CPU clock from the page instead of the system call). Prints `rdtsc_ns X`,
// `cputime_ns Y` and `cap_user_time Z` (-1: perf refused).
// (Not in testbins/: what it prints differs run to run, so it is no behaviour test.)
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

static double ns_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cap_user_time(void) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
    if (fd < 0)
        return -1;
    struct perf_event_mmap_page *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return -1;
    int cap = p->cap_user_time;
    munmap(p, 4096);
    return cap;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000L;
    double best_tsc = 1e30, best_cpu = 1e30;
    unsigned long long sink = 0;
    for (int b = 0; b < 5; b++) {
        double t0 = ns_now();
        for (long i = 0; i < n; i++)
            sink += __rdtsc();
        double t1 = ns_now();
        for (long i = 0; i < n / 10; i++) {
            struct timespec ts;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
            sink += (unsigned long long)ts.tv_nsec;
        }
        double t2 = ns_now();
        if ((t1 - t0) / n < best_tsc)
            best_tsc = (t1 - t0) / n;
        if ((t2 - t1) / (n / 10) < best_cpu)
            best_cpu = (t2 - t1) / (n / 10);
    }
    printf("rdtsc_ns %.2f\ncputime_ns %.1f\ncap_user_time %d\n(%llu)\n", best_tsc, best_cpu, cap_user_time(),
           sink & 1);
    return 0;
}
