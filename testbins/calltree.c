// calltree: a single-threaded call tree with known call counts.
//
// main -> a (x3) -> b (x4 each) -> leaf (x5 each); naive recursive fib(15); a variadic
// function; functions taking and returning doubles and a struct by value; a tail call.
// Writes to stdout and stderr and exits with status 3.
//
// fib(15), computed naively, enters fib C(15) times where C(0) = C(1) = 1 and
// C(n) = 1 + C(n-1) + C(n-2), i.e. C(n) = 2*F(n+1) - 1 = 2*987 - 1 = 1973.
//
//# exit: 3
//# expect: threads 1
//# expect: main calls main 1
//# expect: main calls a 3
//# expect: main calls b 12
//# expect: main calls leaf 60
//# expect: main calls fib 1973
//# expect: main calls sum_ints 4
//# expect: main calls scale 6
//# expect: main calls add3 7
//# expect: main calls tail_caller 5
//# expect: main calls tail_target 5
#include <stdarg.h>
#include <stdio.h>

struct vec3 {
    double x, y, z;
};

__attribute__((noipa)) long leaf(long x) {
    return x * 3 + 1;
}

__attribute__((noipa)) long b(long x) {
    long s = 0;
    for (int i = 0; i < 5; i++)
        s += leaf(x + i);
    return s;
}

__attribute__((noipa)) long a(long x) {
    long s = 0;
    for (int i = 0; i < 4; i++)
        s += b(x * 10 + i);
    return s;
}

__attribute__((noipa)) long fib(int n) {
    if (n < 2)
        return n;
    /* volatile keeps both recursive calls real calls at -O2 (gcc otherwise turns the
       second one into a loop with an accumulator, changing the call count). */
    volatile long sum = fib(n - 1);
    sum += fib(n - 2);
    return sum;
}

__attribute__((noipa)) long sum_ints(int n, ...) {
    va_list ap;
    long s = 0;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        s += va_arg(ap, int);
    va_end(ap);
    return s;
}

__attribute__((noipa)) double scale(double x, double k) {
    return x * k + 0.5;
}

__attribute__((noipa)) struct vec3 add3(struct vec3 p, struct vec3 q) {
    struct vec3 r = {p.x + q.x, p.y + q.y, p.z + q.z};
    return r;
}

__attribute__((noipa)) long tail_target(long x) {
    return x * x - 1;
}

/* At -O2 this is `jmp tail_target`: tail_target is entered without a call. */
__attribute__((noipa)) long tail_caller(long x) {
    return tail_target(x + 1);
}

int main(void) {
    long tree = 0;
    for (int i = 0; i < 3; i++)
        tree += a(i);
    printf("tree %ld\n", tree);

    printf("fib(15) = %ld\n", fib(15));

    long v = sum_ints(1, 7) + sum_ints(2, 1, 2) + sum_ints(3, 10, 20, 30) + sum_ints(0);
    printf("variadic %ld\n", v);

    double d = 1.0;
    for (int i = 0; i < 6; i++)
        d = scale(d, 1.5);
    printf("scale %.6f\n", d);

    struct vec3 acc = {0, 0, 0};
    for (int i = 0; i < 7; i++) {
        struct vec3 step = {i, 0.5 * i, -1.0 * i};
        acc = add3(acc, step);
    }
    printf("vec3 %.2f %.2f %.2f\n", acc.x, acc.y, acc.z);

    long t = 0;
    for (int i = 0; i < 5; i++)
        t += tail_caller(i);
    printf("tail %ld\n", t);

    fflush(stdout);
    fprintf(stderr, "calltree: done, exiting with status 3\n");
    return 3;
}
