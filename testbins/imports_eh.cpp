// imports_eh: exceptions and pthread_cancel through calls into shared libraries that stint
// patches (DESIGN D19; tests/it/imports.rs builds it with g++).
//
// - grab() calls operator new (an import) with no LSDA of its own: its call site is patched,
//   and the std::bad_alloc that operator new throws for an impossible size unwinds through
//   the trampoline's frame to main's catch.
// - guarded() calls operator new inside a try block whose handler catches std::bad_alloc: the
//   site is patched and its trampoline's exception table restates the caller's row (its
//   action chain and the type-table entry of std::bad_alloc), so the handler catches there.
// - mismatched() calls operator new[] under a catch of std::length_error, which a bad_alloc
//   does not match: the exception must go on to main's catch.
// - rethrown() calls operator new under a catch of std::bad_alloc that counts and rethrows
//   (`throw;`): main's catch gets the same exception.
// - anything() calls operator new[] under a catch (...) (a null type-table entry).
// - cleaned() calls operator new with a Tally alive: the call's landing pad is a cleanup
//   (~Tally, then on), so the site is patched and its trampoline's exception table leads the
//   unwinder to that pad; main's catch counts the Tallys the unwinding destroyed.
// - must() is noexcept: no call-site row covers its call into operator new, so the site is
//   patched with an empty exception table; with the argument "terminate", main calls it with
//   an impossible size inside a catch(...), and the program must terminate (SIGABRT, the
//   libstdc++ message), not reach the catch.
// - sleeper() runs a Guard and calls doze() in a loop; doze() calls usleep (patched). main
//   cancels it: the forced unwinding starts in usleep, crosses the trampoline and runs
//   ~Guard, which prints a line.
//
//# cflags: -pthread
//# variants: pie-O2 pie-O0 nopie-O2
//# expect: threads 2
//# expect: threads from sleeper 1
//# expect: thread sleeper calls _ZN5GuardD2Ev 1
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <new>
#include <pthread.h>
#include <stdexcept>
#include <unistd.h>

static std::atomic<int> dozing{0};
static volatile unsigned long sink;

struct Guard {
    ~Guard();
};

static int tallied;

struct Tally {
    ~Tally();
};

__attribute__((noinline)) Tally::~Tally() { tallied++; }

__attribute__((noinline)) Guard::~Guard() {
    std::printf("sleeper unwound\n");
    std::fflush(stdout);
}

// No destructor, no try: no LSDA, so the call into operator new is patched.
__attribute__((noinline)) void *grab(std::size_t n) {
    sink = sink + 1; // the entry window: the call is not in it
    void *p = ::operator new(n);
    sink = sink + 1;
    return p;
}

// The call into operator new is covered by a handler that catches std::bad_alloc: patched.
__attribute__((noinline)) int guarded(std::size_t n) {
    sink = sink + 1; // the entry window: the call is not in it
    try {
        void *p = ::operator new(n);
        sink = sink + 1;
        ::operator delete(p);
        return 0;
    } catch (const std::bad_alloc &) {
        return 1;
    }
}

// A handler of another type: a bad_alloc from operator new[] passes it to the caller's catch.
__attribute__((noinline)) int mismatched(std::size_t n) {
    sink = sink + 1;
    try {
        void *p = ::operator new[](n);
        sink = sink + 1;
        ::operator delete[](p);
        return 0;
    } catch (const std::length_error &) {
        return 2;
    }
}

static int rethrows;

// A handler that rethrows what it caught.
__attribute__((noinline)) int rethrown(std::size_t n) {
    sink = sink + 1;
    try {
        void *p = ::operator new(n);
        sink = sink + 1;
        ::operator delete(p);
        return 0;
    } catch (const std::bad_alloc &) {
        rethrows++;
        throw;
    }
}

// catch (...): the type table's entry is null.
__attribute__((noinline)) int anything(std::size_t n) {
    sink = sink + 1;
    try {
        void *p = ::operator new[](n);
        sink = sink + 1;
        ::operator delete[](p);
        return 0;
    } catch (...) {
        return 4;
    }
}

// The call into operator new is covered by a cleanup-only row (~Tally): patched.
__attribute__((noinline)) void *cleaned(std::size_t n) {
    Tally t;
    sink = sink + 1; // the entry window: the call is not in it
    void *p = ::operator new(n);
    sink = sink + 1;
    return p;
}

// noexcept: no row covers the call into operator new (terminate): patched.
__attribute__((noinline)) void *must(std::size_t n) noexcept {
    sink = sink + 1;
    void *p = ::operator new(n);
    sink = sink + 1;
    return p;
}

__attribute__((noinline)) void doze() {
    usleep(2000);
    sink = sink + 1;
}

static void *sleeper(void *) {
    Guard g;
    dozing.store(1);
    for (;;)
        doze();
    return nullptr;
}

int main(int argc, char **argv) {
    const std::size_t huge = SIZE_MAX / 2;
    if (argc > 1 && argv[1][0] == 't') { // "terminate"
        ::operator delete(must(64));
        std::printf("must: 64 bytes\n");
        std::fflush(stdout);
        // Called through a pointer the compiler cannot see is noexcept, so this call has a
        // row that leads to the catch: only must's own table can stop the exception.
        void *(*volatile call)(std::size_t) = must;
        try {
            ::operator delete(call(huge));
        } catch (...) {
            std::printf("must: the exception left a noexcept function\n");
            return 3;
        }
        return 4;
    }
    int caught = 0;
    for (int i = 0; i < 3; i++) {
        try {
            void *p = grab(i == 1 ? huge : 64);
            ::operator delete(p);
        } catch (const std::bad_alloc &) {
            caught++;
        }
    }
    std::printf("grab: caught %d\n", caught);
    std::printf("guarded: %d %d\n", guarded(64), guarded(huge));
    caught = 0;
    int got = 0;
    for (int i = 0; i < 3; i++) {
        try {
            got += mismatched(i == 1 ? huge : 64);
        } catch (const std::bad_alloc &) {
            caught++;
        }
    }
    std::printf("mismatched: returned %d, caught %d\n", got, caught);
    caught = got = 0;
    for (int i = 0; i < 3; i++) {
        try {
            got += rethrown(i == 2 ? huge : 64);
        } catch (const std::bad_alloc &) {
            caught++;
        }
    }
    std::printf("rethrown: returned %d, caught %d, rethrown %d\n", got, caught, rethrows);
    std::printf("anything: %d %d\n", anything(64), anything(huge));
    caught = 0;
    for (int i = 0; i < 3; i++) {
        try {
            ::operator delete(cleaned(i == 2 ? huge : 64));
        } catch (const std::bad_alloc &) {
            caught++;
        }
    }
    std::printf("cleaned: caught %d, tallied %d\n", caught, tallied);
    pthread_t t;
    pthread_create(&t, nullptr, sleeper, nullptr);
    while (!dozing.load())
        usleep(1000);
    usleep(20000);
    pthread_cancel(t);
    void *r;
    pthread_join(t, &r);
    std::printf("sleeper %s\n", r == PTHREAD_CANCELED ? "cancelled" : "returned");
    return 0;
}
