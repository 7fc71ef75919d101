// cet: built with -fcf-protection=full, so every function starts with endbr64 and indirect
// calls land on it. Calls the same functions directly and through function pointers; the
// pointers come from `pick`, which the compiler cannot see through (noipa), so the calls
// stay indirect at -O2.
//
// add1: 5 direct + 10 indirect; dbl: 10 indirect + 2 direct; neg: 10 indirect;
// apply: 3 direct calls, each calling its argument 4 times (add1, dbl, neg once each
// as the argument): add1 +4, dbl +4, neg +4.
//
//# cflags: -fcf-protection=full
//# variants: pie-O2 nopie-O2
//# expect: threads 1
//# expect: main calls pick 30
//# expect: main calls add1 19
//# expect: main calls dbl 16
//# expect: main calls neg 14
//# expect: main calls apply 3
//# expect: main calls main 1
#include <stdio.h>

typedef long (*op_fn)(long);

__attribute__((noipa)) long add1(long x) {
    return x + 1;
}

__attribute__((noipa)) long dbl(long x) {
    return x * 2;
}

__attribute__((noipa)) long neg(long x) {
    return -x;
}

static op_fn ops[3] = {add1, dbl, neg};

__attribute__((noipa)) op_fn pick(int i) {
    return ops[i % 3];
}

__attribute__((noipa)) long apply(op_fn fn, long x, int times) {
    for (int i = 0; i < times; i++)
        x = fn(x);
    return x;
}

int main(void) {
    long x = 1;
    for (int i = 0; i < 5; i++)
        x = add1(x);
    for (int i = 0; i < 30; i++) {
        op_fn fn = pick(i);
        x = fn(x) % 1000003;
    }
    x = dbl(x) + dbl(3);
    x = apply(add1, x, 4) + apply(dbl, 1, 4) + apply(neg, 5, 4);
    printf("cet: %ld\n", x);
    return 0;
}
