// fork_calls: a child made by glibc's fork() and one made by the raw system call, each calling
// a function of its own and the parent's function too. Rewritten with a spec of calls only
// (the calls-only entry path, issue 14), every image must count into its own profile: the
// raw child still has its parent's libc tid word, so only the fork cookie (a page the kernel
// zeroes in a fork child) tells it from its parent. Output only after each child is reaped.
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noipa)) long parent_fn(long x) {
    return x * 3 + 1;
}

__attribute__((noipa)) long child_fn(long x) {
    return x * 5 + 2;
}

__attribute__((noipa)) long raw_child_fn(long x) {
    return x * 7 + 3;
}

static long loop(long (*f)(long), int n) {
    long s = 0;
    for (int i = 0; i < n; i++)
        s += f(i);
    return s;
}

static void child(const char *who, long (*own)(long), int n_own, int n_parent) {
    long s = loop(own, n_own) + loop(parent_fn, n_parent);
    char line[64];
    int len = snprintf(line, sizeof line, "%s %ld\n", who, s);
    if (write(1, line, (size_t)len) != len)
        _exit(3);
    _exit(0);
}

static int reap(pid_t pid) {
    int status = 0;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(void) {
    printf("parent %ld\n", loop(parent_fn, 100));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0)
        child("fork child", child_fn, 200, 7);
    if (pid < 0 || !reap(pid))
        return 2;
    pid = (pid_t)syscall(SYS_fork);
    if (pid == 0)
        child("raw fork child", raw_child_fn, 300, 9);
    if (pid < 0 || !reap(pid))
        return 2;
    printf("parent %ld\n", loop(parent_fn, 50));
    return 0;
}
