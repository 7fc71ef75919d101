// proctree: one run makes a whole process tree (issue 18). Roles by argv[1]:
//   (none)   the root: calls root_fn 3 times, then
//            1. forks a child that calls fork_fn 11 times;
//            2. forks a child that calls pre_exec_fn 5 times and execs "self exec-image",
//               whose image calls exec_fn 13 times;
//            3. posix_spawns "self spawned" (spawn_fn 17 times);
//            4. vfork + execs "self vforked" (vfork_fn 19 times);
//            5. forks from a non-main thread: the child calls thread_fork_fn 23 times;
//            6. double-forks a setsid daemon that calls daemon_fn 29 times and then writes a
//               byte into a pipe the root waits on;
//            7. finally execs itself in place as "self reexec" (reexec_fn 31 times).
// Output goes through write(2) only after each child is waited for, so its order is fixed.
//
//# cflags: -pthread
//# variants: pie-O0 nopie-O2
//# exit: 5
//# expect: profiles 10
//# expect: main calls root_fn 3
//# expect: main calls fork_fn 0
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static const char *self;

#define MARKED(name)                                                                               \
    __attribute__((noipa)) long name(long x) { return x * 3 + 1; }
MARKED(root_fn)
MARKED(fork_fn)
MARKED(pre_exec_fn)
MARKED(exec_fn)
MARKED(spawn_fn)
MARKED(vfork_fn)
MARKED(thread_fork_fn)
MARKED(daemon_fn)
MARKED(reexec_fn)

static long repeat(long (*f)(long), int n) {
    long s = 0;
    for (int i = 0; i < n; i++)
        s += f(i);
    return s;
}

static void say(const char *role, long v) {
    char line[128];
    int n = snprintf(line, sizeof line, "%s: %ld\n", role, v);
    if (write(1, line, (size_t)n) != n)
        _exit(3);
}

static void wait_ok(pid_t pid, const char *what) {
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "proctree: %s failed\n", what);
        exit(2);
    }
}

static void *thread_forks(void *arg) {
    (void)arg;
    pid_t pid = fork();
    if (pid == 0) {
        say("thread-fork", repeat(thread_fork_fn, 23));
        _exit(0);
    }
    wait_ok(pid, "fork from a thread");
    return NULL;
}

int main(int argc, char **argv) {
    self = argv[0];
    const char *role = argc > 1 ? argv[1] : "";
    if (!strcmp(role, "exec-image")) {
        say("exec-image", repeat(exec_fn, 13));
        return 0;
    }
    if (!strcmp(role, "spawned")) {
        say("spawned", repeat(spawn_fn, 17));
        return 0;
    }
    if (!strcmp(role, "vforked")) {
        say("vforked", repeat(vfork_fn, 19));
        return 0;
    }
    if (!strcmp(role, "reexec")) {
        say("reexec", repeat(reexec_fn, 31));
        fprintf(stderr, "proctree: done\n");
        return 5;
    }
    say("root", repeat(root_fn, 3));

    pid_t pid = fork();
    if (pid == 0) {
        say("fork", repeat(fork_fn, 11));
        _exit(0);
    }
    wait_ok(pid, "fork");

    pid = fork();
    if (pid == 0) {
        say("pre-exec", repeat(pre_exec_fn, 5));
        execl("/proc/self/exe", self, "exec-image", (char *)NULL);
        _exit(4);
    }
    wait_ok(pid, "fork and exec");

    char *spawn_argv[] = {(char *)self, "spawned", NULL};
    if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, spawn_argv, environ) != 0)
        pid = -1;
    wait_ok(pid, "posix_spawn");

    pid = vfork();
    if (pid == 0) {
        execl("/proc/self/exe", self, "vforked", (char *)NULL);
        _exit(4);
    }
    wait_ok(pid, "vfork and exec");

    pthread_t t;
    if (pthread_create(&t, NULL, thread_forks, NULL) != 0 || pthread_join(t, NULL) != 0) {
        fprintf(stderr, "proctree: thread failed\n");
        return 2;
    }

    int done[2];
    if (pipe(done) != 0)
        return 2;
    pid = fork();
    if (pid == 0) {
        if (setsid() < 0)
            _exit(4);
        pid_t d = fork();
        if (d == 0) {
            close(done[0]);
            long v = repeat(daemon_fn, 29);
            say("daemon", v);
            if (write(done[1], "x", 1) != 1)
                _exit(4);
            _exit(0);
        }
        _exit(d < 0 ? 4 : 0);
    }
    wait_ok(pid, "daemon's first fork");
    close(done[1]);
    char c;
    if (read(done[0], &c, 1) != 1) {
        fprintf(stderr, "proctree: daemon failed\n");
        return 2;
    }

    execl("/proc/self/exe", self, "reexec", (char *)NULL);
    perror("execl");
    return 2;
}
