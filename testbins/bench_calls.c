// bench_calls: N calls (argv[1], default 100,000,000) of a tiny function, for measuring
// what a counted call costs (tests/bench.sh). The behaviour tests run it with a small N.
//
//# args: 100000
//# expect: threads 1
//# expect: main calls step 100000
//# expect: main calls main 1
#include <stdio.h>
#include <stdlib.h>

__attribute__((noipa)) long step(long x) {
    return x + 1;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000000L;
    long acc = 0;
    for (long i = 0; i < n; i++)
        acc += step(i);
    printf("bench_calls: %ld calls, acc %ld\n", n, acc);
    return 0;
}
