/* The MPI-4 entry points of the interposition library: MPI_Allreduce_c (MPI_Count counts) and
 * the persistent MPI_Allreduce_init, in an ordinary MPI-4 program run with
 *   LD_PRELOAD=build-mpich/libreducelab_pmpi.so mpiexec -n P build-mpich/test_mpi4
 * Built only against an MPI-4 library (the Makefile's HAVE_MPI4: MPICH 4.0 on Debian 12).
 * Every result equals the MPI library's own (PMPI_Allreduce_c / PMPI_Allreduce, bitwise:
 * integer data, and doubles that are small integers so every summation order is exact), over
 * five (type, op) pairs, counts 0 to 65539, with and without MPI_IN_PLACE; each persistent
 * request is started four times with new data and completed by MPI_Wait, an MPI_Test loop,
 * MPI_Waitall and MPI_Startall + MPI_Waitall on two requests at once. The library's counters
 * (found with dlsym) must show that every call ran a ReduceLab schedule; a negative MPI_Count
 * is MPI_ERR_COUNT. EXPECT_INTERCEPT=0 runs the same checks (but that one) against the library alone.
 * Prints one summary line on rank 0; exits non-zero on any failure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(MPI_VERSION) || MPI_VERSION < 4
#error "test_mpi4 needs an MPI-4 library (MPI_Allreduce_c, MPI_Allreduce_init)"
#endif

static int rank, p, failures, checks;
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

typedef struct {
    const char *name;
    MPI_Datatype type;
    MPI_Op op;
    size_t size;
} pair;

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Element i of this rank's input for `seed`: full-range integers; doubles and floats are
 * small integers (exact sums in any order); shorts for PROD are ±1 and 2 (no rounding). */
static void fill(const pair *t, void *buf, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        uint64_t h = mix(seed * 1000003ull + (uint64_t)rank * 7919ull + i);
        if (t->type == MPI_DOUBLE) ((double *)buf)[i] = (double)((int64_t)(h % 201) - 100);
        else if (t->type == MPI_FLOAT) ((float *)buf)[i] = (float)((int64_t)(h % 2001) - 1000);
        else if (t->type == MPI_SHORT) ((short *)buf)[i] = (short)((const short[]){1, -1, 2, 1})[h % 4];
        else memcpy((char *)buf + i * t->size, &h, t->size);
    }
}

int main(int argc, char **argv) {
    setenv("REDUCELAB_RULES", "none", 0); /* every call a schedule (docs/mpi.md, crossover) */
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    void (*counters)(long long *, long long *) = (void (*)(long long *, long long *))dlsym(RTLD_DEFAULT, "RL_Counters");
    const char *expect = getenv("EXPECT_INTERCEPT");
    int want = !(expect && strcmp(expect, "0") == 0);
    long long s0 = 0, f0 = 0, s1 = 0, f1 = 0;
    if (want && !counters) {
        /* Every rank sees the same (LD_PRELOAD is per job): finalize and exit with an error rather
         * than MPI_Abort, whose kill can drop the ranks' stderr before the launcher forwards it. */
        fprintf(stderr, "[rank %d] FAIL: interposition library not loaded (LD_PRELOAD)\n", rank);
        MPI_Finalize();
        return 2;
    }
    if (counters) counters(&s0, &f0);
    int calls = 0;

    const pair pairs[] = {{"int sum", MPI_INT, MPI_SUM, 4},
                          {"double sum", MPI_DOUBLE, MPI_SUM, 8},
                          {"int64 bxor", MPI_INT64_T, MPI_BXOR, 8},
                          {"float max", MPI_FLOAT, MPI_MAX, 4},
                          {"short prod", MPI_SHORT, MPI_PROD, 2}};
    const int npairs = (int)(sizeof pairs / sizeof *pairs);
    const MPI_Count counts[] = {0, 1, 7, (MPI_Count)p + 1, 1000, 65539};
    const int ncounts = (int)(sizeof counts / sizeof *counts);

    /* MPI_Allreduce_c: MPI_Count counts, alternately in place */
    for (int t = 0; t < npairs; t++)
        for (int c = 0; c < ncounts; c++) {
            const pair *pr = &pairs[t];
            MPI_Count n = counts[c];
            size_t bytes = (size_t)n * pr->size + pr->size;
            char *in = malloc(bytes), *out = malloc(bytes), *ref = malloc(bytes);
            fill(pr, in, (size_t)n, 10u * (unsigned)t + (unsigned)c);
            int rc0 = PMPI_Allreduce_c(in, ref, n, pr->type, pr->op, MPI_COMM_WORLD);
            int inplace = (t + c) & 1;
            memset(out, 0x5a, bytes);
            if (inplace) memcpy(out, in, (size_t)n * pr->size);
            int rc = MPI_Allreduce_c(inplace ? MPI_IN_PLACE : in, out, n, pr->type, pr->op, MPI_COMM_WORLD);
            calls++;
            CHECK(rc0 == MPI_SUCCESS && rc == MPI_SUCCESS && !memcmp(out, ref, (size_t)n * pr->size),
                  "MPI_Allreduce_c %s count=%lld in_place=%d (rc %d)", pr->name, (long long)n, inplace, rc);
            CHECK((unsigned char)out[(size_t)n * pr->size] == 0x5a, "MPI_Allreduce_c %s count=%lld wrote past the end",
                  pr->name, (long long)n);
            free(in), free(out), free(ref);
        }

    /* MPI_Allreduce_init: four starts with new data; the last pair is started with MPI_Startall
     * together with a second request on the same buffers' type */
    for (int t = 0; t < npairs; t++) {
        const pair *pr = &pairs[t];
        const int n = t % 2 ? 70001 : 1003;
        size_t bytes = (size_t)n * pr->size;
        char *in = malloc(bytes), *out = malloc(bytes), *ref = malloc(bytes);
        char *in2 = malloc(bytes), *out2 = malloc(bytes), *ref2 = malloc(bytes);
        MPI_Request req[2];
        int rc = MPI_Allreduce_init(in, out, n, pr->type, pr->op, MPI_COMM_WORLD, MPI_INFO_NULL, &req[0]);
        int rc2 = MPI_Allreduce_init(MPI_IN_PLACE, out2, n, pr->type, pr->op, MPI_COMM_WORLD, MPI_INFO_NULL, &req[1]);
        CHECK(rc == MPI_SUCCESS && rc2 == MPI_SUCCESS, "MPI_Allreduce_init %s (rc %d, %d)", pr->name, rc, rc2);
        if (rc != MPI_SUCCESS || rc2 != MPI_SUCCESS) continue;
        for (int it = 0; it < 4; it++) {
            fill(pr, in, (size_t)n, 100u + 10u * (unsigned)t + (unsigned)it);
            fill(pr, in2, (size_t)n, 200u + 10u * (unsigned)t + (unsigned)it);
            PMPI_Allreduce(in, ref, n, pr->type, pr->op, MPI_COMM_WORLD);
            PMPI_Allreduce(in2, ref2, n, pr->type, pr->op, MPI_COMM_WORLD);
            memset(out, 0, bytes);
            memcpy(out2, in2, bytes);
            if (it < 3) {
                MPI_Start(&req[0]);
                calls++;
                if (it == 0) {
                    MPI_Wait(&req[0], MPI_STATUS_IGNORE);
                } else if (it == 1) {
                    int flag = 0;
                    while (!flag) MPI_Test(&req[0], &flag, MPI_STATUS_IGNORE);
                } else {
                    MPI_Waitall(1, req, MPI_STATUSES_IGNORE);
                }
            } else {
                MPI_Startall(2, req);
                calls += 2;
                MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
                CHECK(!memcmp(out2, ref2, bytes), "persistent in place %s start %d", pr->name, it);
            }
            CHECK(req[0] != MPI_REQUEST_NULL, "persistent request %s freed by completion (start %d)", pr->name, it);
            CHECK(!memcmp(out, ref, bytes), "persistent %s start %d", pr->name, it);
        }
        MPI_Request_free(&req[0]);
        MPI_Request_free(&req[1]);
        CHECK(req[0] == MPI_REQUEST_NULL && req[1] == MPI_REQUEST_NULL, "MPI_Request_free %s", pr->name);
        free(in), free(out), free(ref), free(in2), free(out2), free(ref2);
    }

    if (want) { /* (MPICH 4.0.2 alone does not check a negative count: it overruns the stack) */
        int x[2] = {1, 2}, y[2], cls = -1;
        MPI_Error_class(MPI_Allreduce_c(x, y, (MPI_Count)-3, MPI_INT, MPI_SUM, MPI_COMM_WORLD), &cls);
        CHECK(cls == MPI_ERR_COUNT, "MPI_Allreduce_c with count -3: error class %d, expected MPI_ERR_COUNT", cls);
    }

    if (counters) counters(&s1, &f1);
    long long scheduled = s1 - s0;
    if (want) {
        CHECK(scheduled >= calls, "only %lld of %d calls ran ReduceLab schedules", scheduled, calls);
    } else {
        CHECK(counters == NULL, "ReduceLab loaded although EXPECT_INTERCEPT=0");
    }
    int tot[2] = {checks, failures}, all[2];
    PMPI_Allreduce(tot, all, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("test_mpi4 p=%d: %d checks, %lld scheduled of %d calls, %d failures\n", p, all[0], scheduled, calls,
               all[1]);
    MPI_Finalize();
    return all[1] ? 1 : 0;
}
