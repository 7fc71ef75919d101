// proctree_end: how processes end (issue 18, D22). The root calls root_fn once, then forks
// children that each call their marked function once and end in one way each; it reaps
// each with a different wait function and prints how it ended:
//   a: exit(3) from a second thread        reaped by a raw wait4 system call (not wrapped:
//                                          the child's own record is what the profile has)
//   b: return 5 from main                  reaped by waitpid
//   c: _exit(7)                            reaped by wait4
//   d: killed by SIGKILL                   reaped by waitid
//   e: killed by SIGSEGV (no core file)    reaped by wait
//   f: execs argv[1] with "exec-image"     reaped by waitpid (only when argv[1] is given:
//      (a program of another name)         the test passes the rewritten proctree)
// Then the root returns 4 from main.
//
//# cflags: -pthread
//# variants: pie-O0
//# exit: 4
//# expect: profiles 6
//# expect: main calls root_fn 1
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MARKED(name)                                                                               \
    __attribute__((noipa)) long name(long x) { return x * 3 + 1; }
MARKED(root_fn)
MARKED(a_fn)
MARKED(b_fn)
MARKED(c_fn)
MARKED(d_fn)
MARKED(e_fn)
MARKED(f_fn)

static void say(const char *who, int status) {
    char line[128];
    int n;
    if (WIFEXITED(status))
        n = snprintf(line, sizeof line, "%s: exit %d\n", who, WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        n = snprintf(line, sizeof line, "%s: signal %d\n", who, WTERMSIG(status));
    else
        n = snprintf(line, sizeof line, "%s: other %d\n", who, status);
    if (write(1, line, (size_t)n) != n)
        _exit(2);
}

static void *exits_from_a_thread(void *arg) {
    (void)arg;
    exit(3);
}

int main(int argc, char **argv) {
    root_fn(0);

    pid_t pid = fork();
    if (pid == 0) {
        a_fn(0);
        pthread_t t;
        if (pthread_create(&t, NULL, exits_from_a_thread, NULL) == 0)
            pthread_join(t, NULL);
        _exit(2);
    }
    int status = 0;
    if (syscall(SYS_wait4, pid, &status, 0, NULL) != pid)
        return 2;
    say("a", status);

    pid = fork();
    if (pid == 0) {
        b_fn(0);
        return 5;
    }
    if (waitpid(pid, &status, 0) != pid)
        return 2;
    say("b", status);

    pid = fork();
    if (pid == 0) {
        c_fn(0);
        _exit(7);
    }
    if (wait4(pid, &status, 0, NULL) != pid)
        return 2;
    say("c", status);

    pid = fork();
    if (pid == 0) {
        d_fn(0);
        kill(getpid(), SIGKILL);
        _exit(2);
    }
    siginfo_t info;
    memset(&info, 0, sizeof info);
    if (waitid(P_PID, (id_t)pid, &info, WEXITED) != 0 || info.si_code != CLD_KILLED)
        return 2;
    say("d", info.si_status); // a signal number reads as a status that WIFSIGNALED

    pid = fork();
    if (pid == 0) {
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        e_fn(0);
        kill(getpid(), SIGSEGV);
        _exit(2);
    }
    if (wait(&status) != pid)
        return 2;
    say("e", status);

    if (argc > 1) {
        pid = fork();
        if (pid == 0) {
            f_fn(0);
            execl(argv[1], argv[1], "exec-image", (char *)NULL);
            _exit(6);
        }
        if (waitpid(pid, &status, 0) != pid)
            return 2;
        say("f", status);
    }
    return 4;
}
