// selfcopy: code that the program copies at run time, as JIT engines do with their built-in
// code (V8's embedded builtins in node). `blob_add` is hand-written assembly without CFI, so
// it has no FDE; the program copies its bytes into fresh executable memory and calls the
// copy. A patched entry would carry a `jmp rel32` into the copy that lands nowhere, so the
// rewriter must leave code without unwind information alone (and still count `twice`,
// ordinary compiled code that calls the copy).
//
//# args: 9
//# exit: 0
//# expect: threads 1
//# expect: main calls twice 9
//# expect: main calls main 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

// long blob_add(long x): x + 40, then + 2, in more than 5 bytes of plain instructions.
__asm__(".text\n"
        ".globl blob_add\n"
        ".type blob_add, @function\n"
        "blob_add:\n"
        "  lea 40(%rdi), %rax\n"
        "  add $2, %rax\n"
        "  ret\n"
        ".size blob_add, .-blob_add\n"
        ".globl blob_end\n"
        "blob_end:\n");
long blob_add(long x);
extern char blob_end[];

typedef long (*fn)(long);

__attribute__((noipa)) long twice(fn f, long x) {
    return f(f(x));
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    size_t len = (size_t)(blob_end - (char *)blob_add);
    void *mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return 1;
    memcpy(mem, (void *)blob_add, len);
    if (mprotect(mem, 4096, PROT_READ | PROT_EXEC) != 0)
        return 1;
    long acc = 0;
    for (int i = 0; i < n; i++)
        acc += twice((fn)mem, i);
    printf("selfcopy: %d calls of the copy, acc %ld\n", 2 * n, acc);
    return 0;
}
