// matmul: the threaded matrix multiply of Paradyn's threaded instrumentation paper
// (seeds/000, Table 3). T threads compute C = A x B for N x N matrices of doubles; thread k
// computes rows [k*N/T, (k+1)*N/T) of C, calling `innerp` once per element: (N/T)*N calls
// per thread. Prints a checksum of C.
//
// Usage: matmul T N   (N must be a multiple of T)
//
//# cflags: -pthread
//# args: 4 120
//# expect: threads 5
//# expect: threads from worker 4
//# expect: thread worker calls worker 1
//# expect: thread worker calls innerp 3600
//# expect: main calls innerp 0
//# expect: main calls fill 2
//# expect: main calls main 1
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int n, nthreads;
static double *A, *B, *C;

struct task {
    int first_row, rows;
};

/* Inner product of row i of A and column j of B. */
__attribute__((noipa)) double innerp(int i, int j) {
    double s = 0;
    for (int k = 0; k < n; k++)
        s += A[i * n + k] * B[k * n + j];
    return s;
}

__attribute__((noipa)) void *worker(void *arg) {
    struct task *t = arg;
    for (int i = t->first_row; i < t->first_row + t->rows; i++)
        for (int j = 0; j < n; j++)
            C[i * n + j] = innerp(i, j);
    return NULL;
}

/* Deterministic contents: small integers, so every product and sum is exact. */
__attribute__((noipa)) void fill(double *m, int seed) {
    for (int i = 0; i < n * n; i++)
        m[i] = (double)((i * 7 + seed * 13) % 17) - 8.0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: matmul T N\n");
        return 2;
    }
    nthreads = atoi(argv[1]);
    n = atoi(argv[2]);
    if (nthreads < 1 || n < 1 || n % nthreads != 0) {
        fprintf(stderr, "matmul: N must be a positive multiple of T\n");
        return 2;
    }
    A = malloc(sizeof(double) * n * n);
    B = malloc(sizeof(double) * n * n);
    C = malloc(sizeof(double) * n * n);
    pthread_t *tids = malloc(sizeof(pthread_t) * nthreads);
    struct task *tasks = malloc(sizeof(struct task) * nthreads);
    if (!A || !B || !C || !tids || !tasks)
        return 2;
    fill(A, 1);
    fill(B, 2);

    int rows = n / nthreads;
    for (int k = 0; k < nthreads; k++) {
        tasks[k].first_row = k * rows;
        tasks[k].rows = rows;
        if (pthread_create(&tids[k], NULL, worker, &tasks[k]) != 0) {
            fprintf(stderr, "matmul: pthread_create failed\n");
            return 2;
        }
    }
    for (int k = 0; k < nthreads; k++)
        pthread_join(tids[k], NULL);

    double sum = 0, trace = 0;
    for (int i = 0; i < n * n; i++)
        sum += C[i];
    for (int i = 0; i < n; i++)
        trace += C[i * n + i];
    printf("matmul %d threads %dx%d: sum %.1f trace %.1f\n", nthreads, n, n, sum, trace);
    free(A);
    free(B);
    free(C);
    free(tids);
    free(tasks);
    return 0;
}
