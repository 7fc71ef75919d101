// proctree_main: how an image ends when its parent is not a rewritten program (issue 18,
// D22): main's return value is the exit status the parent sees (status & 0xff).
//   proctree_main N      calls main_fn once, prints "main returns N" and returns N from main
//   proctree_main exit N     the same, but calls exit(N) (from a function main calls)
//   proctree_main _exit N    the same, but calls _exit(N) after flushing stdout
//   proctree_main exit_group N   the same, but calls syscall(SYS_exit_group, N)
//   proctree_main stack  main forks a child (main_fn, then _exit(7)); a thread whose stack
//                        is PTHREAD_STACK_MIN bytes (filled with a pattern first) reaps it
//                        with waitpid and prints "child: exit 7"; main prints how many bytes
//                        of that stack were ever used ("stack: N") and returns 0
//   proctree_main forkstack  a thread whose stack is PTHREAD_STACK_MIN bytes (filled with a
//                        pattern first) forks; the child calls main_fn 5 times, prints how many
//                        bytes of that stack (its copy) were ever used ("child stack: N") and
//                        _exits 9; the thread reaps it and prints "child: exit 9"
// Without arguments it returns 0.
//
//# cflags: -pthread
//# variants: pie-O0 pie-O2-stripped
//# exit: 0
//# expect: profiles 1
//# expect: main calls main_fn 1
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noipa)) long main_fn(long x) { return x * 3 + 1; }

#define PATTERN 0xa5

static void *reap_on_a_small_stack(void *arg) {
    pid_t pid = (pid_t)(long)arg;
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        return (void *)1;
    printf("child: exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return NULL;
}

static int small_stack(void) {
    // The child is forked by main (a fork child's own start-up runs on the forking thread's
    // stack); the thread with the small stack only reaps it.
    pid_t pid = fork();
    if (pid == 0) {
        main_fn(7);
        _exit(7);
    }
    size_t size = PTHREAD_STACK_MIN;
    unsigned char *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (stack == MAP_FAILED)
        return 2;
    memset(stack, PATTERN, size);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (pthread_attr_setstack(&attr, stack, size) != 0)
        return 3;
    pthread_t t;
    void *ret = NULL;
    fflush(stdout);
    if (pthread_create(&t, &attr, reap_on_a_small_stack, (void *)(long)pid) != 0 || pthread_join(t, &ret) != 0 || ret)
        return 4;
    size_t untouched = 0;
    while (untouched < size && stack[untouched] == PATTERN)
        untouched++;
    printf("stack: %zu\n", size - untouched);
    return 0;
}

static unsigned char *fork_stack;

static void *fork_on_a_small_stack(void *arg) {
    (void)arg;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        long x = 0;
        for (int i = 0; i < 5; i++)
            x += main_fn(i);
        size_t untouched = 0;
        while (untouched < PTHREAD_STACK_MIN && fork_stack[untouched] == PATTERN)
            untouched++;
        printf("child stack: %zu (%ld)\n", (size_t)PTHREAD_STACK_MIN - untouched, x);
        fflush(stdout);
        _exit(9);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return (void *)1;
    printf("child: exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return NULL;
}

static int fork_from_a_small_stack(void) {
    size_t size = PTHREAD_STACK_MIN;
    fork_stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fork_stack == MAP_FAILED)
        return 2;
    memset(fork_stack, PATTERN, size);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (pthread_attr_setstack(&attr, fork_stack, size) != 0)
        return 3;
    pthread_t t;
    void *ret = NULL;
    if (pthread_create(&t, &attr, fork_on_a_small_stack, NULL) != 0 || pthread_join(t, &ret) != 0 || ret)
        return 4;
    return 0;
}

__attribute__((noinline)) static void end_by(const char *how, int n) {
    printf("%s %d\n", how, n);
    fflush(stdout);
    if (strcmp(how, "exit") == 0)
        exit(n);
    if (strcmp(how, "exit_group") == 0)
        syscall(SYS_exit_group, n);
    _exit(n);
}

int main(int argc, char **argv) {
    main_fn(argc);
    if (argc > 1 && strcmp(argv[1], "stack") == 0)
        return small_stack();
    if (argc > 1 && strcmp(argv[1], "forkstack") == 0)
        return fork_from_a_small_stack();
    if (argc > 2)
        end_by(argv[1], atoi(argv[2]));
    int n = argc > 1 ? atoi(argv[1]) : 0;
    printf("main returns %d\n", n);
    return n;
}
