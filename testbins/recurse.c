// recurse: recursion, mutual recursion and sibling tail calls, with the time of the
// outermost calls measured by the program itself. A function's inclusive time must be
// counted once per outermost activation, not once per level (tests/timers.rs).
//
// - rec(n) recurses n levels with real calls (the work after the recursive call keeps gcc
//   from turning it into a loop); main calls rec(39) 10 times: 400 calls, depth 40.
// - is_even(n) and is_odd(n) call each other with real calls, down to is_odd(0); main calls
//   is_even(29) 10 times: is_even at n = 29, 27, ..., 1 and is_odd at n = 28, ..., 0, so
//   150 calls each, depth 30.
// - ping(n) and pong(n) end in `return pong(n - 1)` and `return ping(n - 1)`: sibling calls
//   (jmp) at -O2, real calls at -O0. main calls ping(29) 10 times: 150 calls each.
// - tail_a(x) ends in `return tail_b(x + 1)`, tail_b in `return tail_c(x + 1)`: jmp at -O2.
//   They spin 1, 2 and 3 units and measure their own spin. main calls tail_a 20 times.
// Every level of rec, is_even, is_odd, ping and pong spins a quarter unit (a unit is about
// 0.2 ms).
//
// With TIMES_FILE set (see timing.h), it writes, per call made by main and measured by main:
//     rec TID CPU_NS WALL_NS         around rec(39)
//     is_even TID CPU_NS WALL_NS     around is_even(29)
//     ping TID CPU_NS WALL_NS        around ping(29)
//     tail TID CPU_NS WALL_NS        around tail_a(x)
// and once, the wall time of the spins of the tail functions and of ping's and pong's
// levels, measured inside them (sums over all calls):
//     tail_a TID 0 WALL_NS, tail_b TID 0 WALL_NS, tail_c TID 0 WALL_NS
//     ping_levels TID 0 WALL_NS, pong_levels TID 0 WALL_NS
//
//# variants: pie-O2 nopie-O0
//# expect: threads 1
//# expect: main calls main 1
//# expect: main calls rec 400
//# expect: main calls is_even 150
//# expect: main calls is_odd 150
//# expect: main calls ping 150
//# expect: main calls pong 150
//# expect: main calls tail_a 20
//# expect: main calls tail_b 20
//# expect: main calls tail_c 20
#include "timing.h"

#define UNIT 130000L /* spin rounds, about 0.2 ms */
#define LEVEL (UNIT / 4)

static volatile unsigned long sink;
static long span_wall[3]; /* tail_a, tail_b, tail_c */
static long level_wall[2]; /* ping, pong: the wall time of their spins, summed */

__attribute__((noipa)) unsigned long rec(int n) {
    unsigned long s = spin(n, LEVEL);
    if (n > 0)
        s += rec(n - 1);
    sink = s; /* after the call: no tail call, no accumulator loop */
    return s ^ n;
}

__attribute__((noipa)) int is_odd(int n);

__attribute__((noipa)) int is_even(int n) {
    sink = spin(n, LEVEL);
    if (n == 0)
        return 1;
    int r = is_odd(n - 1);
    sink = r;
    return r;
}

__attribute__((noipa)) int is_odd(int n) {
    sink = spin(n, LEVEL);
    if (n == 0)
        return 0;
    int r = is_even(n - 1);
    sink = r;
    return r;
}

__attribute__((noipa)) int pong(int n);

/* Spin one level and add its wall time to level_wall[i]: on a loaded machine a thread
   switch lands in one sibling's spins and not the other's, so the two do not take equal
   wall time although they spin equally. */
TIMING_INLINE unsigned long level_spin(int i, int n) {
    long w0 = wall_now();
    unsigned long x = spin(n, LEVEL);
    level_wall[i] += wall_now() - w0;
    return x;
}

__attribute__((noipa)) int ping(int n) {
    sink = level_spin(0, n);
    if (n == 0)
        return 0;
    return pong(n - 1);
}

__attribute__((noipa)) int pong(int n) {
    sink = level_spin(1, n);
    if (n == 0)
        return 1;
    return ping(n - 1);
}

/* Spin `units` units and add the wall time taken to span_wall[i] (only the vDSO clock:
   no system call, where a thread switch would add time outside the measured span). */
TIMING_INLINE unsigned long timed_spin(int i, unsigned long x, int units) {
    long w0 = wall_now();
    x = spin(x, units * UNIT);
    span_wall[i] += wall_now() - w0;
    return x;
}

__attribute__((noipa)) unsigned long tail_c(unsigned long x) {
    return timed_spin(2, x, 3) + 1;
}

__attribute__((noipa)) unsigned long tail_b(unsigned long x) {
    x = timed_spin(1, x, 2);
    return tail_c(x + 1);
}

__attribute__((noipa)) unsigned long tail_a(unsigned long x) {
    x = timed_spin(0, x, 1);
    return tail_b(x + 1);
}

int main(void) {
    long tid = thread_id();
    unsigned long check = 0;
    for (int i = 0; i < 10; i++) {
        struct span s = span_start();
        check += rec(39);
        times_span("rec", tid, span_since(s));
    }
    int evens = 0;
    for (int i = 0; i < 10; i++) {
        struct span s = span_start();
        evens += is_even(29);
        times_span("is_even", tid, span_since(s));
    }
    int pings = 0;
    for (int i = 0; i < 10; i++) {
        struct span s = span_start();
        pings += ping(29);
        times_span("ping", tid, span_since(s));
    }
    for (int i = 0; i < 20; i++) {
        struct span s = span_start();
        check += tail_a(i);
        times_span("tail", tid, span_since(s));
    }
    const char *names[3] = {"tail_a", "tail_b", "tail_c"};
    for (int i = 0; i < 3; i++)
        times_add(names[i], tid, 0, span_wall[i]);
    times_add("ping_levels", tid, 0, level_wall[0]);
    times_add("pong_levels", tid, 0, level_wall[1]);
    times_write();
    printf("recurse: rec %lx, is_even(29) %d/10, ping(29) %d/10\n", check, evens, pings);
    return 0;
}
