// unwind_cancel: unwinding through everything stint adds (DESIGN D5). tests/unwind.rs builds
// it with g++ (the harness builds only `*.c`), rewrites it, and compares the runs.
//
// Modes (argv[1]; without one: throw, cancel and sample, in that order):
//   throw   C++ exceptions thrown through up to 40 instrumented frames, each holding an
//           object with a destructor: three exception types, caught at different depths,
//           some caught and rethrown on the way, some thrown through a virtual call and a
//           function pointer. Prints how many were caught of each kind and whether every
//           destructor ran.
//   cancel  pthread_cancel of threads blocked, a few instrumented frames down, in
//           pthread_cond_wait, sem_wait and pthread_join (with stint's wrappers, the forced
//           unwinding crosses the wrapper's frame in rt-lib); every frame's destructor must run
//           and every join must return PTHREAD_CANCELED.
//   sample  SIGALRM every 100 us while main calls small functions; the handler unwinds the
//           interrupted thread with _Unwind_Backtrace (libgcc, through PT_GNU_EH_FRAME) and
//           counts the samples whose interrupted pc lies in code after the program's data
//           (the code stint adds: trampolines, timer routines, stubs, rt-lib) and how many of
//           those unwound to sample_loop, the caller of the interrupted function.
//   gdb     main -> level1 -> level2 -> leaf once; leaf locks and unlocks a mutex (a wrapped
//           import). tests/unwind.rs puts gdb breakpoints there.
//
// stdout is deterministic. With UNWIND_SAMPLES set, `sample` writes
//     samples N added M reached K
// to that file (N signals, M in added code, K of those unwound to sample_loop).
#include <atomic>
#include <link.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdexcept>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <sys/time.h>
#include <time.h>
#include <unwind.h>

static volatile long sink;
static volatile int never;

// ---------------------------------------------------------------------------------------
// throw
// ---------------------------------------------------------------------------------------

struct Boom {
    int depth;
};

static long constructed, destroyed;

struct Guard {
    int depth;
    __attribute__((noinline)) explicit Guard(int d) : depth(d) {
        constructed++;
    }
    __attribute__((noinline)) ~Guard() {
        destroyed++;
        sink += depth;
    }
};

extern "C" __attribute__((noinline)) long dive(int depth, int throw_at, int kind);

struct Step {
    virtual long next(int depth, int throw_at, int kind) = 0;
    virtual ~Step() {}
};

struct ViaVirtual : Step {
    __attribute__((noinline)) long next(int depth, int throw_at, int kind) override {
        Guard g(depth);
        long r = dive(depth + 1, throw_at, kind);
        sink = r;
        return r + 1;
    }
};

static ViaVirtual via_virtual;
static Step *volatile step = &via_virtual;

extern "C" __attribute__((noinline)) long via_pointer(int depth, int throw_at, int kind) {
    Guard g(depth);
    long r = dive(depth + 1, throw_at, kind);
    sink = r;
    return r + 1;
}

static long (*volatile pointer)(int, int, int) = via_pointer;
static long rethrown;

extern "C" __attribute__((noinline)) long relay(int depth, int throw_at, int kind) {
    Guard g(depth);
    try {
        long r = dive(depth + 1, throw_at, kind);
        sink = r;
        return r + 1;
    } catch (int) {
        rethrown++;
        throw;
    }
}

extern "C" __attribute__((noinline)) long dive(int depth, int throw_at, int kind) {
    Guard g(depth);
    if (depth == throw_at) {
        switch (kind) {
        case 0:
            throw std::runtime_error("deep " + std::to_string(depth));
        case 1:
            throw depth;
        default:
            throw Boom{depth};
        }
    }
    long r;
    switch (depth % 4) {
    case 0:
        r = step->next(depth, throw_at, kind);
        break;
    case 1:
        r = pointer(depth, throw_at, kind);
        break;
    case 2:
        r = relay(depth, throw_at, kind);
        break;
    default:
        r = dive(depth + 1, throw_at, kind);
        break;
    }
    sink = r;
    return r + 1;
}

extern "C" __attribute__((noinline)) int throw_once(int i) {
    int throw_at = 3 + i % 38, kind = i % 3;
    try {
        try {
            dive(0, throw_at, kind);
        } catch (const Boom &b) {
            return b.depth == throw_at ? 2 : -1;
        }
    } catch (const std::runtime_error &e) {
        return e.what() == "deep " + std::to_string(throw_at) ? 0 : -1;
    } catch (int d) {
        return d == throw_at ? 1 : -1;
    }
    return -1;
}

static int run_throw() {
    long kinds[3] = {0, 0, 0};
    for (int i = 0; i < 300; i++) {
        int k = throw_once(i);
        if (k < 0) {
            printf("throw: iteration %d caught the wrong exception\n", i);
            return 1;
        }
        kinds[k]++;
    }
    printf("throw: caught %ld runtime_error, %ld int, %ld Boom; %ld rethrown; destructors %s\n", kinds[0],
           kinds[1], kinds[2], rethrown, constructed == destroyed ? "all ran" : "MISSING");
    return constructed == destroyed ? 0 : 1;
}

// ---------------------------------------------------------------------------------------
// cancel
// ---------------------------------------------------------------------------------------

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static sem_t sem;
static std::atomic<int> ready;
static std::atomic<long> unwound;
static pthread_t forever;

struct Frame {
    __attribute__((noinline)) ~Frame() {
        unwound++;
    }
};

struct Unlock {
    __attribute__((noinline)) ~Unlock() {
        pthread_mutex_unlock(&m); // pthread_cond_wait took m back before unwinding
        unwound++;
    }
};

extern "C" __attribute__((noinline)) void block_cond() {
    pthread_mutex_lock(&m);
    Unlock u;
    ready++;
    while (!never)
        pthread_cond_wait(&cv, &m);
}

extern "C" __attribute__((noinline)) void block_sem() {
    Frame f;
    ready++;
    while (!never)
        sem_wait(&sem);
}

extern "C" __attribute__((noinline)) void block_join() {
    Frame f;
    ready++;
    pthread_join(forever, NULL);
}

extern "C" __attribute__((noinline)) void nest(int depth, void (*block)()) {
    Frame f;
    if (depth == 0)
        block();
    else
        nest(depth - 1, block);
    sink++;
}

extern "C" __attribute__((noinline)) void *blocker(void *arg) {
    nest(4, (void (*)())arg);
    return NULL;
}

extern "C" __attribute__((noinline)) void *sleeper(void *) {
    Frame f;
    while (!never)
        pause();
    return NULL;
}

static void wait_ready(int n) {
    while (ready.load() < n)
        sched_yield();
}

/* Start a thread that blocks in `block`, cancel it once it is blocked, join it. */
static int cancel_one(const char *what, void (*block)(), int want_frames) {
    ready = 0;
    unwound = 0;
    pthread_t t;
    pthread_create(&t, NULL, blocker, (void *)block);
    wait_ready(1);
    if (block == block_cond) { // m is free again only once t waits inside pthread_cond_wait
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
    } else {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL); // likely blocked by now; if not, it is cancelled on the way in
    }
    pthread_cancel(t);
    void *ret = NULL;
    pthread_join(t, &ret);
    long n = unwound.load();
    printf("cancel %s: %s, %ld destructors\n", what, ret == PTHREAD_CANCELED ? "canceled" : "NOT canceled", n);
    return ret == PTHREAD_CANCELED && n == want_frames ? 0 : 1;
}

static int run_cancel() {
    sem_init(&sem, 0, 0);
    int bad = 0;
    bad |= cancel_one("cond_wait", block_cond, 6); // 5 nest frames + Unlock
    bad |= cancel_one("sem_wait", block_sem, 6);
    pthread_create(&forever, NULL, sleeper, NULL);
    bad |= cancel_one("join", block_join, 6);
    unwound = 0;
    pthread_cancel(forever);
    void *ret = NULL;
    pthread_join(forever, &ret);
    printf("cancel pause: %s, %ld destructors\n", ret == PTHREAD_CANCELED ? "canceled" : "NOT canceled",
           unwound.load());
    return bad || ret != PTHREAD_CANCELED || unwound.load() != 1;
}

// ---------------------------------------------------------------------------------------
// sample
// ---------------------------------------------------------------------------------------

static uintptr_t added_lo, added_hi;
static volatile long samples, added, reached;
static uintptr_t prev_ip; // the IP of the frame before, in on_frame

/* The main program's executable PT_LOAD above its writable one: code a rewriter added. */
static int find_added(struct dl_phdr_info *info, size_t, void *) {
    uintptr_t data = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *p = &info->dlpi_phdr[i];
        if (p->p_type == PT_LOAD && (p->p_flags & PF_W))
            data = p->p_vaddr;
    }
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *p = &info->dlpi_phdr[i];
        if (p->p_type == PT_LOAD && (p->p_flags & PF_X) && data && p->p_vaddr > data) {
            added_lo = info->dlpi_addr + p->p_vaddr;
            added_hi = added_lo + p->p_memsz;
        }
    }
    return 1; // the first object is the program
}

extern "C" __attribute__((noinline)) void sample_loop();
static int run_sample();

static _Unwind_Reason_Code on_frame(struct _Unwind_Context *ctx, void *arg) {
    int *depth = (int *)arg;
    uintptr_t ip = _Unwind_GetIP(ctx);
    void *f = _Unwind_FindEnclosingFunction((void *)ip);
    // A sample in the trampoline of sample_loop's call into clock_gettime (an import point)
    // is in sample_loop's frame, which the trampoline's FDE describes: the frame after that
    // added code is sample_loop's caller, run_sample.
    int in_added = prev_ip >= added_lo && prev_ip < added_hi;
    prev_ip = ip;
    if (f == (void *)sample_loop || (f == (void *)run_sample && in_added)) {
        reached++;
        return _URC_END_OF_STACK;
    }
    return ++*depth > 64 ? _URC_END_OF_STACK : _URC_NO_REASON;
}

static void on_alarm(int, siginfo_t *, void *uc) {
    samples++;
    uintptr_t pc = ((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
    if (pc >= added_lo && pc < added_hi) {
        added++;
        int depth = 0;
        prev_ip = 0;
        _Unwind_Backtrace(on_frame, &depth);
    }
}

extern "C" __attribute__((noinline)) long tick(long x) {
    return x * 3 + 1;
}

extern "C" __attribute__((noinline)) long tock(long x) {
    return tick(x) ^ (x >> 3);
}

extern "C" __attribute__((noinline)) void sample_loop() {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long x = 1;
    do {
        for (int i = 0; i < 1000; i++)
            x = tock(x) + tick(i);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (samples < 3000 && (t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 2000000000L);
    sink = x;
}

static int run_sample() {
    dl_iterate_phdr(find_added, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_alarm;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 100}, {0, 100}};
    setitimer(ITIMER_REAL, &it, NULL);
    sample_loop();
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    const char *path = getenv("UNWIND_SAMPLES");
    if (path) {
        FILE *f = fopen(path, "w");
        if (!f) {
            perror(path);
            return 1;
        }
        fprintf(f, "samples %ld added %ld reached %ld\n", samples, added, reached);
        fclose(f);
    }
    printf("sample: done\n");
    return 0;
}

// ---------------------------------------------------------------------------------------
// gdb
// ---------------------------------------------------------------------------------------

extern "C" __attribute__((noinline)) void leaf() {
    pthread_mutex_lock(&m);
    sink++;
    pthread_mutex_unlock(&m);
}

extern "C" __attribute__((noinline)) void level2() {
    leaf();
    sink++;
}

extern "C" __attribute__((noinline)) void level1() {
    level2();
    sink++;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "all";
    int bad = 0;
    if (!strcmp(mode, "gdb")) {
        level1();
        printf("gdb: done\n");
        return 0;
    }
    if (!strcmp(mode, "all") || !strcmp(mode, "throw"))
        bad |= run_throw();
    if (!strcmp(mode, "all") || !strcmp(mode, "cancel"))
        bad |= run_cancel();
    if (!strcmp(mode, "all") || !strcmp(mode, "sample"))
        bad |= run_sample();
    fflush(stdout);
    return bad;
}
