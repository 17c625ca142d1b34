/* Test of the interposition library: an ordinary MPI program, run with
 *   LD_PRELOAD=build/libreducelab_pmpi.so REDUCELAB_ALLREDUCE=<alg> mpirun ... build/test_pmpi
 * Its MPI_Allreduce, MPI_Iallreduce (+ MPI_Wait/Waitall/Test), MPI_Reduce_scatter_block and
 * MPI_Allgather must give the MPI library's own results (PMPI_* here, bitwise: integer data),
 * and the library's counters (found with dlsym, so the program does not link it) must show the
 * calls ran ReduceLab schedules. Persistent allreduce (MPI-4 MPI_Allreduce_init, or Open MPI's
 * MPIX_Allreduce_init) is started repeatedly and completed with MPI_Wait, MPI_Waitall (mixed
 * with point-to-point requests), MPI_Test, MPI_Waitany and MPI_Testsome. Without the library
 * (EXPECT_INTERCEPT=0) the same program checks the MPI library's own behaviour.
 * Exits non-zero on any failure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#if defined(OPEN_MPI) && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, p, failures;
#define CHECK(cond, ...)                                                                                           \
    do {                                                                                                           \
        if (!(cond)) {                                                                                             \
            failures++;                                                                                            \
            fprintf(stderr, "[rank %d] FAIL: ", rank);                                                             \
            fprintf(stderr, __VA_ARGS__);                                                                          \
            fprintf(stderr, "\n");                                                                                 \
        }                                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    /* every call must run a schedule: no crossover to the MPI library for `auto` unless the
     * environment sets REDUCELAB_RULES (docs/mpi.md; the rules are read at the first call) */
    setenv("REDUCELAB_RULES", "none", 0);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    void (*counters)(long long *, long long *) = (void (*)(long long *, long long *))dlsym(RTLD_DEFAULT, "RL_Counters");
    const char *expect = getenv("EXPECT_INTERCEPT"); /* "0": the library must not be loaded/used */
    int want = !(expect && strcmp(expect, "0") == 0);
    long long s0 = 0, f0 = 0, s1 = 0, f1 = 0;
    if (counters) counters(&s0, &f0);
    const int counts[] = {0, 1, 3, 1000, 100003};
    int calls = 0;
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
        int n = counts[c];
        int64_t *in = malloc((n + 1) * 8), *out = malloc((n + 1) * 8), *ref = malloc((n + 1) * 8);
        for (int i = 0; i < n; i++) in[i] = (int64_t)((uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1));
        PMPI_Allreduce(in, ref, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(in, out, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        calls++;
        CHECK(!memcmp(out, ref, n * 8), "MPI_Allreduce n=%d", n);
        memcpy(out, in, n * 8);
        MPI_Allreduce(MPI_IN_PLACE, out, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        calls++;
        CHECK(!memcmp(out, ref, n * 8), "MPI_Allreduce in place n=%d", n);
        MPI_Request r[2];
        int64_t *out2 = malloc((n + 1) * 8);
        MPI_Iallreduce(in, out, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD, &r[0]);
        MPI_Iallreduce(in, out2, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD, &r[1]);
        calls += 2;
        if (c % 2) {
            MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        } else {
            int flag = 0;
            while (!flag) MPI_Test(&r[1], &flag, MPI_STATUS_IGNORE);
            MPI_Wait(&r[0], MPI_STATUS_IGNORE);
        }
        CHECK(!memcmp(out, ref, n * 8) && !memcmp(out2, ref, n * 8), "MPI_Iallreduce n=%d", n);
        free(out2);
        /* reduce-scatter-block and allgather: n elements per rank */
        int64_t *big = malloc(((size_t)n * p + 1) * 8), *bref = malloc(((size_t)n * p + 1) * 8),
                *bout = malloc(((size_t)n * p + 1) * 8);
        for (size_t i = 0; i < (size_t)n * p; i++) big[i] = (int64_t)(i * 31 + (size_t)rank * 7);
        PMPI_Reduce_scatter_block(big, bref, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        MPI_Reduce_scatter_block(big, bout, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        calls++;
        CHECK(!memcmp(bout, bref, n * 8), "MPI_Reduce_scatter_block n=%d", n);
        PMPI_Allgather(in, n, MPI_INT64_T, bref, n, MPI_INT64_T, MPI_COMM_WORLD);
        MPI_Allgather(in, n, MPI_INT64_T, bout, n, MPI_INT64_T, MPI_COMM_WORLD);
        calls++;
        CHECK(!memcmp(bout, bref, (size_t)n * p * 8), "MPI_Allgather n=%d", n);
        free(big), free(bref), free(bout), free(in), free(out), free(ref);
    }
#if defined(MPI_VERSION) && MPI_VERSION >= 4
#define PINIT MPI_Allreduce_init
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#define PINIT MPIX_Allreduce_init
#endif
#ifdef PINIT
    {
        const int n = 1003;
        int64_t *in = malloc(n * 8), *out = malloc(n * 8), *ref = malloc(n * 8);
        int64_t token_out = rank, token_in = -1;
        MPI_Request req[3];
        CHECK(PINIT(in, out, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req[0]) == MPI_SUCCESS,
              "persistent init");
        for (int it = 0; it < 6; it++) {
            for (int i = 0; i < n; i++) in[i] = (int64_t)(i * (it + 3) + rank * 11);
            PMPI_Allreduce(in, ref, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
            memset(out, 0, n * 8);
            MPI_Start(&req[0]);
            calls++;
            if (it == 0 || it == 1) {
                MPI_Wait(&req[0], MPI_STATUS_IGNORE);
            } else if (it == 2) { /* mixed with point-to-point requests (to self) */
                MPI_Irecv(&token_in, 1, MPI_INT64_T, rank, 99, MPI_COMM_WORLD, &req[1]);
                MPI_Isend(&token_out, 1, MPI_INT64_T, rank, 99, MPI_COMM_WORLD, &req[2]);
                MPI_Waitall(3, req, MPI_STATUSES_IGNORE);
                CHECK(token_in == rank && req[1] == MPI_REQUEST_NULL && req[2] == MPI_REQUEST_NULL, "waitall p2p");
            } else if (it == 3) {
                int flag = 0;
                while (!flag) MPI_Test(&req[0], &flag, MPI_STATUS_IGNORE);
            } else if (it == 4) {
                int idx = -1;
                MPI_Waitany(1, req, &idx, MPI_STATUS_IGNORE);
                CHECK(idx == 0, "waitany index %d", idx);
                MPI_Waitany(1, req, &idx, MPI_STATUS_IGNORE); /* now inactive */
                CHECK(idx == MPI_UNDEFINED, "waitany on an inactive persistent request gave %d", idx);
            } else {
                int outcount = 0, idx[1];
                while (outcount == 0) MPI_Testsome(1, req, &outcount, idx, MPI_STATUSES_IGNORE);
                CHECK(outcount == 1 && idx[0] == 0, "testsome");
            }
            CHECK(req[0] != MPI_REQUEST_NULL, "persistent request freed by completion (start %d)", it);
            CHECK(!memcmp(out, ref, n * 8), "persistent allreduce start %d", it);
        }
        MPI_Request_free(&req[0]);
        CHECK(req[0] == MPI_REQUEST_NULL, "request_free");
        free(in), free(out), free(ref);
    }
#endif
    /* errors still reported as MPI does */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int x = 1, y;
    CHECK(MPI_Allreduce(&x, &y, -1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS, "negative count accepted");
    CHECK(MPI_Allreduce(&x, &y, 1, MPI_FLOAT, MPI_BXOR, MPI_COMM_WORLD) != MPI_SUCCESS, "BXOR on float accepted");
    if (counters) counters(&s1, &f1);
    if (want) {
        CHECK(counters != NULL, "RL_Counters not found: interposition library not loaded");
        /* every call above ran a schedule, unless the algorithm is 'mpi' */
        const char *alg = getenv("REDUCELAB_ALLREDUCE");
        long long expect_sched = alg && !strcmp(alg, "mpi") ? 0 : calls;
        CHECK(s1 - s0 >= expect_sched, "only %lld of %d calls ran ReduceLab schedules", s1 - s0, calls);
    } else {
        CHECK(counters == NULL, "interposition library loaded unexpectedly");
    }
    int all;
    PMPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("test_pmpi p=%d alg=%s: %d intercepted-call checks, %lld scheduled, %d failures\n", p,
               getenv("REDUCELAB_ALLREDUCE") ? getenv("REDUCELAB_ALLREDUCE") : "(unset)", calls, s1 - s0, all);
    MPI_Finalize();
    return all ? 1 : 0;
}
