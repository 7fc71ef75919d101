// report_opts: main starts two threads named "worker-1" and "worker-2" (pthread_setname_np);
// each calls `heavy` twice (a long spin) and `light` 1000 times (almost nothing), so the
// order of a worker's functions by calls (light, heavy, worker) is the reverse of their
// order by CPU or wall time (worker, which includes both, then heavy, then light). Main
// calls a function with a very long name once, then joins the workers. tests/report_opts.rs
// checks the options of `stint report` on one run of it. Prints one line, exits 0.
//
//# cflags: -pthread
//# variants: pie-O2
//# expect: threads 3
//# expect: threads from worker 2
//# expect: thread worker calls heavy 2
//# expect: thread worker calls light 1000
//# expect: main calls a_function_with_a_really_long_name_as_cxx_templates_produce_them_quite_often 1
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>

__attribute__((noipa)) long heavy(long n) {
    volatile long x = 0;
    for (long i = 0; i < n; i++) x += i;
    return x;
}

__attribute__((noipa)) long light(long x) { return x + 1; }

__attribute__((noipa)) void *worker(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "worker-%ld", (long)arg);
    pthread_setname_np(pthread_self(), name);
    long s = 0;
    for (int i = 0; i < 2; i++) s += heavy(20000000);
    for (int i = 0; i < 1000; i++) s = light(s);
    return (void *)s;
}

__attribute__((noipa)) long a_function_with_a_really_long_name_as_cxx_templates_produce_them_quite_often(long x) {
    return x * 2;
}

int main(void) {
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    long sum = a_function_with_a_really_long_name_as_cxx_templates_produce_them_quite_often(21);
    for (int i = 0; i < 2; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (long)r;
    }
    printf("report_opts %ld\n", sum);
    return 0;
}
