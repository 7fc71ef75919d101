// callpaths: a known call graph for the calling-context tree (DESIGN D16), checked by
// tests/it/callpaths.rs.
//
// main: a() once (a calls b 3 times), c() once (c calls b 5 times), rec(12) twice (a chain
// of 13 levels), tail_caller() 4 times (at -O2 a `jmp tail_target`), then two threads:
// w1 calls a twice (b 6 times under a), w2 calls c three times (b 15 times under c).
// Every function does a little work so that it is timed (its exits patched).
//
//# cflags: -pthread
//# variants: pie-O2 nopie-O0
//# expect: threads 3
//# expect: main calls a 1
//# expect: main calls b 8
//# expect: main calls c 1
//# expect: main calls rec 26
//# expect: main calls tail_caller 4
//# expect: main calls tail_target 4
//# expect: threads from w1 1
//# expect: threads from w2 1
//# expect: thread w1 calls b 6
//# expect: thread w2 calls b 15
#include <pthread.h>
#include <stdio.h>

volatile long sink;

__attribute__((noipa)) long spin(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) {
        s += i ^ (s >> 3);
        sink = s;
    }
    return s;
}

__attribute__((noipa)) long b(long x) {
    return spin(2000 + x);
}

__attribute__((noipa)) long a(long x) {
    long s = 0;
    for (int i = 0; i < 3; i++)
        s += b(x + i);
    sink = s;
    return s;
}

__attribute__((noipa)) long c(long x) {
    long s = 0;
    for (int i = 0; i < 5; i++)
        s += b(x * 2 + i);
    sink = s;
    return s;
}

__attribute__((noipa)) long rec(int n) {
    if (n == 0)
        return spin(500);
    long r = rec(n - 1) + 1;
    sink = r;
    return r;
}

__attribute__((noipa)) long tail_target(long x) {
    return spin(1000 + x);
}

__attribute__((noipa)) long tail_caller(long x) {
    sink = x;
    long k = spin(300) & 7;
    return tail_target(x + k);
}

__attribute__((noipa)) void *w1(void *arg) {
    long s = 0;
    for (int i = 0; i < 2; i++)
        s += a((long)arg + i);
    sink = s;
    return NULL;
}

__attribute__((noipa)) void *w2(void *arg) {
    long s = 0;
    for (int i = 0; i < 3; i++)
        s += c((long)arg + i);
    sink = s;
    return NULL;
}

int main(void) {
    long s = a(1) + c(2);
    s += rec(12) + rec(12);
    for (int i = 0; i < 4; i++)
        s += tail_caller(i);
    pthread_t t1, t2;
    pthread_create(&t1, NULL, w1, (void *)1);
    pthread_join(t1, NULL);
    pthread_create(&t2, NULL, w2, (void *)2);
    pthread_join(t2, NULL);
    printf("callpaths %ld\n", s & 0xff);
    return 0;
}
