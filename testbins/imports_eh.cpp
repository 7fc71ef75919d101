// imports_eh: exceptions and pthread_cancel through calls into shared libraries that stint
// patches (DESIGN D19; tests/it/imports.rs builds it with g++).
//
// - grab() calls operator new (an import) with no LSDA of its own: its call site is patched,
//   and the std::bad_alloc that operator new throws for an impossible size unwinds through
//   the trampoline's frame to main's catch.
// - guarded() calls operator new inside a try block: that call site is covered by a landing
//   pad, so stint leaves it alone (inspect says why); the exception still reaches the catch.
// - sleeper() runs a Guard and calls doze() in a loop; doze() calls usleep (patched). main
//   cancels it: the forced unwinding starts in usleep, crosses the trampoline and runs
//   ~Guard, which prints a line.
//
//# cflags: -pthread
//# variants: pie-O2 pie-O0
//# expect: threads 2
//# expect: threads from sleeper 1
//# expect: thread sleeper calls _ZN5GuardD2Ev 1
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <new>
#include <pthread.h>
#include <unistd.h>

static std::atomic<int> dozing{0};
static volatile unsigned long sink;

struct Guard {
    ~Guard();
};

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

// The call into operator new is covered by the catch's landing pad: left alone.
__attribute__((noinline)) int guarded(std::size_t n) {
    try {
        void *p = ::operator new(n);
        sink = sink + 1;
        ::operator delete(p);
        return 0;
    } catch (const std::bad_alloc &) {
        return 1;
    }
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

int main() {
    const std::size_t huge = SIZE_MAX / 2;
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
