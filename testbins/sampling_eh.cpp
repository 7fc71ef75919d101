// sampling_eh: C++ exceptions thrown through frames of sampled functions, for
// tests/it/sampling.rs. `mid` and `leaf` are short and called 100,000 times each, so the
// runtime samples both after their first 512 calls (one call in 64 timed, the others push a
// frame with no clock). Every 100th `leaf` throws; the exception leaves `leaf` and `mid`
// (timed or untimed frames, whichever the draw made them) without their exits, and `drive`
// catches it. Neither `leaf` nor `mid` has a landing pad (nothing to destroy), so the
// unwinder runs no code in them: each throw leaves 2 frames, which the measurement shadow
// stack closes as abandoned at the next entry above them, as it does for longjmp.
//
// Prints the sum of the values returned and the number of exceptions caught.
//
//# args: 100000
//# variants: pie-O2 pie-O0
//# expect: threads 1
//# expect: main calls mid 100000
//# expect: main calls leaf 100000
//# expect: main calls drive 1
#include <cstdio>
#include <cstdlib>

struct Boom {
    long at;
};

static volatile long sink;

__attribute__((noinline)) long leaf(long i) {
    if (i % 100 == 99)
        throw Boom{i};
    sink = sink + 1;
    return i * 3 + 1;
}

__attribute__((noinline)) long mid(long i) {
    long r = leaf(i);
    sink = sink + r;
    return r + 1;
}

__attribute__((noinline)) void drive(long n, long *sum, long *caught) {
    for (long i = 0; i < n; i++) {
        try {
            *sum += mid(i);
        } catch (const Boom &b) {
            *caught += 1;
            *sum -= b.at;
        }
    }
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    long sum = 0, caught = 0;
    drive(n, &sum, &caught);
    printf("sum %ld caught %ld\n", sum, caught);
    return 0;
}
