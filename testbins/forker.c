// forker: the child of a fork calls g 5 times, the parent g 7 times (after the child has
// exited, so the output order is fixed). The parent's profile must show 7: the child
// shares the parent's mappings after fork and must count into a profile of its own.
//
//# exit: 7
//# expect: profiles 2
//# expect: threads 1
//# expect: main calls g 7
//# expect: main calls main 1
//# expect: child threads 1
//# expect: child main calls g 5
//# expect: child main calls main 0
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noipa)) long g(long x) {
    return x * 5 + 3;
}

int main(void) {
    printf("forker: start\n");
    fflush(stdout); /* or the child would print the buffered line again */
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 2;
    }
    if (pid == 0) {
        long s = 0;
        for (int i = 0; i < 5; i++)
            s += g(i);
        printf("child: %ld\n", s);
        fflush(stdout);
        _exit(0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "forker: child failed\n");
        return 2;
    }
    long s = 0;
    for (int i = 0; i < 7; i++)
        s += g(i);
    printf("parent: %ld\n", s);
    fprintf(stderr, "forker: parent exits with 7\n");
    return 7;
}
