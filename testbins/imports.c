// imports: calls into shared libraries are points of their own (DESIGN D19), and a tail
// jump into one (D17). tests/it/imports.rs checks the profile; behaviour.rs the output.
//
// Two worker threads each call strlen (through the PLT; a real call even at -O2, since the
// string changes every iteration) exactly ARGV[2] times, and qsort once with a comparison
// function of the program (a callback from the library into instrumented code). main calls
// usleep(300000) itself, then nap(), which at -O2 is nothing but `jmp usleep@plt`, and
// lookup(), at -O2 `jmp getenv@plt` (an import stint cannot call in place of the jump).
//
//# args: 2 1000
//# cflags: -pthread
//# variants: pie-O0 pie-O2 nopie-O2
//# expect: threads 3
//# expect: threads from worker 2
//# expect: main calls nap 1
//# expect: main calls lookup 1
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int n_calls;
static volatile unsigned long sink;

// The whole body is a tail call into an import at -O2.
__attribute__((noinline)) void nap(void) {
    usleep(300000);
}

// A tail jump into an import whose arguments stint does not know.
__attribute__((noinline)) char *lookup(const char *name) {
    sink = sink + 1; // the entry window: the jump is not in it
    return getenv(name);
}

__attribute__((noinline)) int by_value(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static void *worker(void *arg) {
    char buf[32];
    memset(buf, 0, sizeof buf);
    long id = (long)arg;
    unsigned long total = 0;
    for (int i = 0; i < n_calls; i++) {
        buf[i % 20] = (char)('a' + (i + id) % 26);
        total += strlen(buf);
    }
    sink = total;
    // qsort 110 times (how often it calls back depends on the libc's algorithm).
    int v[10];
    unsigned long sum = 0;
    for (int k = 0; k < 110; k++) {
        for (int j = 0; j < 10; j++)
            v[j] = j;
        qsort(v, 10, sizeof v[0], by_value);
        sum += (unsigned long)v[9];
    }
    return (void *)(sum + total);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2;
    n_calls = argc > 2 ? atoi(argv[2]) : 1000;
    pthread_t t[8];
    if (n > 8)
        n = 8;
    for (long i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    unsigned long r = 0;
    for (int i = 0; i < n; i++) {
        void *x;
        pthread_join(t[i], &x);
        r += (unsigned long)x;
    }
    usleep(300000);
    nap();
    printf("workers %d calls %d result %lu %s\n", n, n_calls, r, lookup("STINT_IMPORTS_NEVER_SET") ? "set" : "unset");
    return 0;
}
