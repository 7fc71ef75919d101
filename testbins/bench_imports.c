// bench_imports: an import-heavy loop for tests/bench/perf.py. N times (argv[1], default
// 10,000,000) `step` calls strlen and memchr through the PLT on a string that changes every
// iteration (so neither call can be folded away); the default spec makes both imports timed
// points of their own (D19), so this measures what a timed import call costs.
//
//# args: 1000
//# variants: pie-O2 nopie-O0
//# expect: threads 1
//# expect: main calls step 1000
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char buf[32] = "an import-heavy benchmark";

__attribute__((noipa)) long step(long i) {
    buf[i % 24] = (char)('a' + i % 26);
    long n = (long)strlen(buf);
    const char *p = memchr(buf, 'z', (size_t)n);
    return n + (p ? p - buf : -1);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000L, acc = 0;
    for (long i = 0; i < n; i++)
        acc += step(i);
    printf("bench_imports: %ld steps, checksum %ld\n", n, acc);
    return 0;
}
