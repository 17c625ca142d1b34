/* Counts that differ across ranks (MPI says erroneous; MPI libraries may hang, return wrong
 * data or, as Open MPI 4.1's truncated rendezvous receives do, write past a buffer). Run with
 * LD_PRELOAD=libreducelab_pmpi.so and REDUCELAB_CHECK=1: every rank must get MPI_ERR_TRUNCATE
 * (error handler MPI_ERRORS_RETURN), never MPI_SUCCESS, and the next correct call must work.
 * The last rank passes `big` elements, the others `small` (argv; default 16385 and 16383).
 * Calls: MPI_Allreduce (int sum), MPI_Iallreduce + MPI_Wait, MPI_Reduce_scatter_block, then a
 * consistent MPI_Allreduce checked exactly. Prints "test_counts: N checks, F failures" on rank 0. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, p, checks, failures;
#define CHECK(cond, ...)                                                                                           \
    do {                                                                                                           \
        checks++;                                                                                                  \
        if (!(cond)) {                                                                                             \
            failures++;                                                                                            \
            fprintf(stderr, "[rank %d] FAIL: ", rank);                                                             \
            fprintf(stderr, __VA_ARGS__);                                                                          \
            fprintf(stderr, "\n");                                                                                 \
        }                                                                                                          \
    } while (0)

static int cls(int rc) {
    int c = rc;
    MPI_Error_class(rc, &c);
    return c;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int small = argc > 1 ? atoi(argv[1]) : 16383, big = argc > 2 ? atoi(argv[2]) : 16385;
    int n = rank == p - 1 ? big : small, cap = (big > small ? big : small) * p + 16;
    int *in = malloc(cap * sizeof *in), *out = malloc(cap * sizeof *out);
    for (int i = 0; i < cap; i++) in[i] = i + rank;

    int rc = MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(cls(rc) == MPI_ERR_TRUNCATE, "MPI_Allreduce %d vs %d: error class %d, want MPI_ERR_TRUNCATE", small, big, cls(rc));

    MPI_Request q;
    rc = MPI_Iallreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q);
    CHECK(rc == MPI_SUCCESS, "MPI_Iallreduce start: rc %d", rc);
    MPI_Status st;
    rc = MPI_Wait(&q, &st);
    CHECK(cls(rc) == MPI_ERR_TRUNCATE || (rc == MPI_ERR_IN_STATUS && cls(st.MPI_ERROR) == MPI_ERR_TRUNCATE),
          "MPI_Iallreduce %d vs %d: MPI_Wait error class %d, want MPI_ERR_TRUNCATE", small, big, cls(rc));

    int rn = rank == p - 1 ? 6 : 5;
    rc = MPI_Reduce_scatter_block(in, out, rn, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(cls(rc) == MPI_ERR_TRUNCATE, "MPI_Reduce_scatter_block 5 vs 6: error class %d", cls(rc));

    /* a consistent call afterwards works */
    for (int m = small; m <= big; m += big - small > 0 ? big - small : 1) {
        memset(out, 0, cap * sizeof *out);
        rc = MPI_Allreduce(in, out, m, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        int bad = 0;
        for (int i = 0; i < m; i++) bad += out[i] != p * i + p * (p - 1) / 2;
        CHECK(rc == MPI_SUCCESS && bad == 0, "consistent MPI_Allreduce of %d after the errors: rc %d, %d wrong", m, rc, bad);
        if (big == small) break;
    }
    int tot[2] = {checks, failures}, all[2];
    PMPI_Reduce(tot, all, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("test_counts p=%d: %d checks, %d failures\n", p, all[0], all[1]);
    MPI_Finalize();
    return failures != 0;
}
