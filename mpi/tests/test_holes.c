/* Derived datatypes with holes: the bytes a datatype does not cover must never be written
 * (MPI: only the type map's bytes of a receive buffer change; send buffers never change).
 *
 * Built twice from this file:
 *   build/test_holes_rl   links libreducelab_mpi and calls RL_* for each algorithm of a list;
 *   build/test_holes      an ordinary MPI program: run it with LD_PRELOAD=libreducelab_pmpi.so
 *                         (the algorithm is REDUCELAB_ALLREDUCE); the library's counters are
 *                         found with dlsym and must show that the user-op calls ran schedules.
 *
 * Types (ints at some offsets of each element, the rest gaps): a vector, a resized int, a
 * resized vector, an indexed type resized with a trailing gap, and a contiguous control.
 * Every gap byte of every buffer holds a sentinel before the call and must hold it after;
 * covered ints must be the exact result (wrapping int sums, computed here independently of
 * the library). Entry points: MPI_Allreduce (user commutative sum, user non-commutative
 * "first" op, predefined MPI_SUM; also in place), MPI_Reduce_scatter_block (also in place),
 * MPI_Allgather (also in place), MPI_Iallreduce + wait, persistent allreduce (3 starts with
 * new data). Counts 1, 3, p+1, 100, 1000.
 * Prints "test_holes: C checks, S scheduled of E expected, F failures" on rank 0; exits
 * non-zero on any failure. */
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
#ifdef RL_API
#include "reducelab_mpi.h"
#endif

static int rank, P;
static long long checks, failures, expect_sched;
static const char *alg = "";

#define FAIL(...)                                                                                                  \
    do {                                                                                                           \
        failures++;                                                                                                \
        if (failures < 40) {                                                                                       \
            fprintf(stderr, "[rank %d] FAIL (%s): ", rank, alg);                                                   \
            fprintf(stderr, __VA_ARGS__);                                                                          \
            fprintf(stderr, "\n");                                                                                 \
        }                                                                                                          \
    } while (0)

/* ---- layouts ---- */
typedef struct {
    const char *name;
    MPI_Datatype type;
    int nints;
    int off[8]; /* byte offsets of the ints in one element */
    int extent;
} layout;
static const layout *cur; /* the layout the user ops see (set before each call) */

#define SENT 0x5A

static unsigned char *alloc_buf(size_t n, const layout *l) {
    size_t bytes = n * (size_t)l->extent + 16;
    unsigned char *b = malloc(bytes);
    memset(b, SENT, bytes);
    return b;
}
static int32_t *at(unsigned char *b, const layout *l, size_t i, int j) { return (int32_t *)(b + i * l->extent + l->off[j]); }
static int32_t value(int r, size_t i, int j, int it) { return (int32_t)((uint32_t)(r + 1) * 1000003u + (uint32_t)i * 37u + (uint32_t)j * 5u + (uint32_t)it * 101u); }
static int32_t sum_value(size_t i, int j, int it) {
    uint32_t s = 0;
    for (int r = 0; r < P; r++) s += (uint32_t)value(r, i, j, it);
    return (int32_t)s;
}
/* Element i of rank r's data written into the covered ints of element k of b. */
static void put(unsigned char *b, const layout *l, size_t k, int r, size_t i, int it) {
    for (int j = 0; j < l->nints; j++) *at(b, l, k, j) = value(r, i, j, it);
}
static int covered(const layout *l, size_t byte) {
    size_t o = byte % (size_t)l->extent;
    for (int j = 0; j < l->nints; j++)
        if (o >= (size_t)l->off[j] && o < (size_t)l->off[j] + 4) return 1;
    return 0;
}
/* Every gap byte of elements [0, n) and the 16 bytes after them still hold the sentinel. */
static void check_gaps(const unsigned char *b, const layout *l, size_t n, const char *what) {
    checks++;
    for (size_t k = 0; k < n * (size_t)l->extent + 16; k++)
        if ((k >= n * (size_t)l->extent || !covered(l, k)) && b[k] != SENT) {
            FAIL("%s %s n=%zu: gap byte %zu overwritten (0x%02x)", what, l->name, n, k, b[k]);
            return;
        }
}
/* Element k of b holds `want(i, j)` for i = first + k. kind 0: sum over ranks; 1: rank 0's value. */
static void check_data(unsigned char *b, const layout *l, size_t n, size_t first, int kind, int it, const char *what) {
    checks++;
    for (size_t k = 0; k < n; k++)
        for (int j = 0; j < l->nints; j++) {
            int32_t want = kind == 0 ? sum_value(first + k, j, it) : value(0, first + k, j, it);
            if (*at(b, l, k, j) != want) {
                FAIL("%s %s n=%zu: element %zu int %d is %d, want %d", what, l->name, n, k, j, *at(b, l, k, j), want);
                return;
            }
        }
}
static void check_unchanged(const unsigned char *b, const unsigned char *copy, size_t bytes, const layout *l, size_t n,
                            const char *what) {
    checks++;
    if (memcmp(b, copy, bytes)) FAIL("%s %s n=%zu: the send buffer changed", what, l->name, n);
}

/* ---- user ops: they read the layout of `cur` (the datatype of the call) ---- */
static void op_sum(void *in_, void *io_, int *len, MPI_Datatype *t) {
    (void)t;
    unsigned char *in = in_, *io = io_;
    for (int k = 0; k < *len; k++)
        for (int j = 0; j < cur->nints; j++)
            *at(io, cur, (size_t)k, j) = (int32_t)((uint32_t)*at(io, cur, (size_t)k, j) + (uint32_t)*at(in, cur, (size_t)k, j));
}
/* in ⊕ inout = in: associative, not commutative; the result is rank 0's data. */
static void op_first(void *in_, void *io_, int *len, MPI_Datatype *t) {
    (void)t;
    unsigned char *in = in_, *io = io_;
    for (int k = 0; k < *len; k++)
        for (int j = 0; j < cur->nints; j++) *at(io, cur, (size_t)k, j) = *at(in, cur, (size_t)k, j);
}
static MPI_Op SUM_OP, FIRST_OP;

/* ---- the calls: RL_* with `alg`, or the MPI names (interposed under LD_PRELOAD) ---- */
#ifdef RL_API
#define ALLREDUCE(s, r, n, t, o) RL_Allreduce(s, r, n, t, o, MPI_COMM_WORLD, alg)
/* reduce-scatter/allgather: the latency variants have no schedule (the RL_* API says so) */
static const char *rs_alg(void) {
    if (strcmp(alg, "recursive-doubling-latency") == 0) return "recursive-doubling-bandwidth";
    if (strcmp(alg, "swing-latency") == 0) return "swing-bandwidth";
    return alg;
}
#define RSB(s, r, n, t, o) RL_Reduce_scatter_block(s, r, n, t, o, MPI_COMM_WORLD, rs_alg())
#define ALLGATHER(s, r, n, t) RL_Allgather(s, n, t, r, n, t, MPI_COMM_WORLD, rs_alg())
#define IALLREDUCE(s, r, n, t, o, q) RL_Iallreduce(s, r, n, t, o, MPI_COMM_WORLD, alg, q)
#define WAIT(q) RL_Wait(q, MPI_STATUS_IGNORE)
#else
#define ALLREDUCE(s, r, n, t, o) MPI_Allreduce(s, r, n, t, o, MPI_COMM_WORLD)
#define RSB(s, r, n, t, o) MPI_Reduce_scatter_block(s, r, n, t, o, MPI_COMM_WORLD)
#define ALLGATHER(s, r, n, t) MPI_Allgather(s, n, t, r, n, t, MPI_COMM_WORLD)
#define IALLREDUCE(s, r, n, t, o, q) MPI_Iallreduce(s, r, n, t, o, MPI_COMM_WORLD, q)
#define WAIT(q) MPI_Wait(q, MPI_STATUS_IGNORE)
#if defined(MPI_VERSION) && MPI_VERSION >= 4
#define PINIT MPI_Allreduce_init
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#define PINIT MPIX_Allreduce_init
#endif
#endif

static void rc_ok(int rc, const char *what, const layout *l, size_t n) {
    checks++;
    if (rc != MPI_SUCCESS) FAIL("%s %s n=%zu: rc %d", what, l->name, n, rc);
}

static void test_allreduce(const layout *l, size_t n) {
    struct { MPI_Op op; const char *name; int kind, sched; } ops[] = {
        {SUM_OP, "user sum", 0, 1}, {FIRST_OP, "user first (non-commutative)", 1, 1}};
    for (size_t o = 0; o < 2; o++)
        for (int inplace = 0; inplace < 2; inplace++) {
            char what[96];
            snprintf(what, sizeof what, "MPI_Allreduce %s%s", ops[o].name, inplace ? " in place" : "");
            unsigned char *in = alloc_buf(n, l), *out = alloc_buf(n, l), *copy;
            for (size_t k = 0; k < n; k++) put(inplace ? out : in, l, k, rank, k, 0);
            copy = alloc_buf(n, l);
            memcpy(copy, in, n * l->extent + 16);
            cur = l;
            rc_ok(ALLREDUCE(inplace ? MPI_IN_PLACE : in, out, (int)n, l->type, ops[o].op), what, l, n);
            expect_sched += ops[o].sched;
            check_data(out, l, n, 0, ops[o].kind, 0, what);
            check_gaps(out, l, n, what);
            if (!inplace) check_unchanged(in, copy, n * l->extent + 16, l, n, what);
            free(in), free(out), free(copy);
        }
}

/* A predefined op on a derived type: the MPI library decides (Open MPI 4.1 rejects it with
 * MPI_ERR_OP); we must return what it returns and leave the receive buffer's gaps alone. */
static void test_predefined_op(const layout *l, size_t n) {
    unsigned char *in = alloc_buf(n, l), *out = alloc_buf(n, l), *ref = alloc_buf(n, l);
    for (size_t k = 0; k < n; k++) put(in, l, k, rank, k, 0);
    int want = PMPI_Allreduce(in, ref, (int)n, l->type, MPI_SUM, MPI_COMM_WORLD);
    int rc = ALLREDUCE(in, out, (int)n, l->type, MPI_SUM);
    int c1 = 0, c2 = 0;
    MPI_Error_class(want, &c1);
    MPI_Error_class(rc, &c2);
    checks++;
    if (c1 != c2) FAIL("MPI_Allreduce MPI_SUM %s n=%zu: error class %d, the MPI library's %d", l->name, n, c2, c1);
    if (want == MPI_SUCCESS) check_data(out, l, n, 0, 0, 0, "MPI_Allreduce MPI_SUM");
    check_gaps(out, l, n, "MPI_Allreduce MPI_SUM");
    free(in), free(out), free(ref);
}

static void test_reduce_scatter(const layout *l, size_t n) {
    for (int inplace = 0; inplace < 2; inplace++) {
        const char *what = inplace ? "MPI_Reduce_scatter_block in place" : "MPI_Reduce_scatter_block";
        size_t all = n * (size_t)P;
        unsigned char *in = alloc_buf(all, l), *out = alloc_buf(inplace ? all : n, l), *copy = alloc_buf(all, l);
        for (size_t k = 0; k < all; k++) put(inplace ? out : in, l, k, rank, k, 0);
        memcpy(copy, in, all * l->extent + 16);
        cur = l;
        rc_ok(RSB(inplace ? MPI_IN_PLACE : in, out, (int)n, l->type, SUM_OP), what, l, n);
        expect_sched++;
        check_data(out, l, n, (size_t)rank * n, 0, 0, what);
        check_gaps(out, l, inplace ? all : n, what);
        if (!inplace) check_unchanged(in, copy, all * l->extent + 16, l, n, what);
        free(in), free(out), free(copy);
    }
}

static void test_allgather(const layout *l, size_t n) {
    for (int inplace = 0; inplace < 2; inplace++) {
        const char *what = inplace ? "MPI_Allgather in place" : "MPI_Allgather";
        size_t all = n * (size_t)P;
        unsigned char *in = alloc_buf(n, l), *out = alloc_buf(all, l), *copy = alloc_buf(n, l);
        for (size_t k = 0; k < n; k++) put(inplace ? out + (size_t)rank * n * l->extent : in, l, k, rank, k, 0);
        memcpy(copy, in, n * l->extent + 16);
        rc_ok(ALLGATHER(inplace ? MPI_IN_PLACE : in, out, (int)n, l->type), what, l, n);
        expect_sched++;
        checks++;
        for (size_t k = 0; k < all; k++) {
            int r = (int)(k / n);
            for (int j = 0; j < l->nints; j++)
                if (*at(out, l, k, j) != value(r, k % n, j, 0)) {
                    FAIL("%s %s n=%zu: element %zu int %d wrong", what, l->name, n, k, j);
                    k = all;
                    break;
                }
        }
        check_gaps(out, l, all, what);
        if (!inplace) check_unchanged(in, copy, n * l->extent + 16, l, n, what);
        free(in), free(out), free(copy);
    }
}

static void test_iallreduce(const layout *l, size_t n) {
    for (int inplace = 0; inplace < 2; inplace++) {
        const char *what = inplace ? "MPI_Iallreduce in place" : "MPI_Iallreduce";
        unsigned char *in = alloc_buf(n, l), *out = alloc_buf(n, l);
        for (size_t k = 0; k < n; k++) put(inplace ? out : in, l, k, rank, k, 0);
        MPI_Request q = MPI_REQUEST_NULL;
        cur = l;
        rc_ok(IALLREDUCE(inplace ? MPI_IN_PLACE : in, out, (int)n, l->type, SUM_OP, &q), what, l, n);
        rc_ok(WAIT(&q), what, l, n);
        expect_sched++;
        check_data(out, l, n, 0, 0, 0, what);
        check_gaps(out, l, n, what);
        free(in), free(out);
    }
}

static void test_persistent(const layout *l, size_t n) {
    const char *what = "persistent allreduce";
    unsigned char *in = alloc_buf(n, l), *out = alloc_buf(n, l);
    cur = l;
#if defined(RL_API)
    RL_Persistent req = NULL;
    rc_ok(RL_Allreduce_init(in, out, (int)n, l->type, SUM_OP, MPI_COMM_WORLD, alg, &req), what, l, n);
#elif defined(PINIT)
    MPI_Request req = MPI_REQUEST_NULL;
    rc_ok(PINIT(in, out, (int)n, l->type, SUM_OP, MPI_COMM_WORLD, MPI_INFO_NULL, &req), what, l, n);
#else
    (void)what;
    free(in), free(out);
    return;
#endif
    for (int it = 0; it < 3; it++) {
        for (size_t k = 0; k < n; k++)
            for (int j = 0; j < l->nints; j++) *at(in, l, k, j) = value(rank, k, j, it);
#ifdef RL_API
        rc_ok(RL_Start(req), what, l, n);
        rc_ok(RL_Persistent_wait(req), what, l, n);
#else
        rc_ok(MPI_Start(&req), what, l, n);
        rc_ok(MPI_Wait(&req, MPI_STATUS_IGNORE), what, l, n);
#endif
        expect_sched++;
        check_data(out, l, n, 0, 0, it, what);
        check_gaps(out, l, n, what);
    }
#ifdef RL_API
    RL_Persistent_free(&req);
#else
    MPI_Request_free(&req);
#endif
    free(in), free(out);
}

int main(int argc, char **argv) {
    /* every call must run a schedule: no crossover to the MPI library for `auto` unless the
     * environment sets REDUCELAB_RULES (docs/mpi.md; the rules are read at the first call) */
    setenv("REDUCELAB_RULES", "none", 0);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Op_create(op_sum, 1, &SUM_OP);
    MPI_Op_create(op_first, 0, &FIRST_OP);

    layout ls[5];
    MPI_Datatype v, v2, ix;
    /* vector: 2 blocks of 2 ints, stride 4 ints: ints at 0,4,16,20; gap 8..16; extent 24 */
    MPI_Type_vector(2, 2, 4, MPI_INT, &v);
    MPI_Type_commit(&v);
    ls[0] = (layout){"vector(2,2,4)", v, 4, {0, 4, 16, 20}, 24};
    /* a resized int: int at 0, extent 12 */
    MPI_Type_create_resized(MPI_INT, 0, 12, &ls[1].type);
    MPI_Type_commit(&ls[1].type);
    ls[1] = (layout){"resized(int,12)", ls[1].type, 1, {0}, 12};
    /* a resized vector: ints at 0, 8 (vector(2,1,2)), extent 16 */
    MPI_Type_vector(2, 1, 2, MPI_INT, &v2);
    MPI_Type_create_resized(v2, 0, 16, &ls[2].type);
    MPI_Type_commit(&ls[2].type);
    ls[2] = (layout){"resized(vector(2,1,2),16)", ls[2].type, 2, {0, 8}, 16};
    /* indexed: blocks {2 ints at 0, 1 int at 3, 1 int at 5}, resized to extent 28 */
    int bl[3] = {2, 1, 1}, dp[3] = {0, 3, 5};
    MPI_Type_indexed(3, bl, dp, MPI_INT, &ix);
    MPI_Type_create_resized(ix, 0, 28, &ls[3].type);
    MPI_Type_commit(&ls[3].type);
    ls[3] = (layout){"resized(indexed,28)", ls[3].type, 4, {0, 4, 12, 20}, 28};
    /* control: 3 contiguous ints (no gaps: the fast path) */
    MPI_Type_contiguous(3, MPI_INT, &ls[4].type);
    MPI_Type_commit(&ls[4].type);
    ls[4] = (layout){"contiguous(3)", ls[4].type, 3, {0, 4, 8}, 12};

    void (*counters)(long long *, long long *) = (void (*)(long long *, long long *))dlsym(RTLD_DEFAULT, "RL_Counters");
#ifdef RL_API
    const char *algs[] = {"auto", "ring", "recursive-doubling-latency", "rabenseifner", "swing-bandwidth", "swing-latency"};
#else
    const char *algs[] = {getenv("REDUCELAB_ALLREDUCE") ? getenv("REDUCELAB_ALLREDUCE") : "auto"};
#endif
    long long s0 = 0, f0 = 0, s1 = 0, f1 = 0;
    if (counters) counters(&s0, &f0);
    const size_t counts[] = {1, 3, (size_t)P + 1, 100, 1000};
    for (size_t a = 0; a < sizeof algs / sizeof *algs; a++) {
        alg = algs[a];
        for (size_t t = 0; t < 5; t++)
            for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
                test_allreduce(&ls[t], counts[c]);
                test_predefined_op(&ls[t], counts[c]);
                test_reduce_scatter(&ls[t], counts[c]);
                test_allgather(&ls[t], counts[c]);
                test_iallreduce(&ls[t], counts[c]);
                test_persistent(&ls[t], counts[c]);
            }
    }
    if (counters) counters(&s1, &f1);
    long long sched = s1 - s0;
    const char *want = getenv("EXPECT_INTERCEPT");
    if (!counters && !(want && strcmp(want, "0") == 0)) {
        fprintf(stderr, "[rank %d] FAIL: interposition library not loaded (RL_Counters not found)\n", rank);
        failures++;
    } else if (counters && sched < expect_sched) {
        FAIL("only %lld of %lld calls ran ReduceLab schedules", sched, expect_sched);
    }
    long long tot[2] = {checks, failures}, all[2];
    MPI_Reduce(tot, all, 2, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("test_holes p=%d: %lld checks, %lld scheduled of %lld expected, %lld failures\n", P, all[0], sched,
               expect_sched, all[1]);
    MPI_Finalize();
    return all[1] != 0 && rank == 0 ? 1 : (failures != 0);
}
