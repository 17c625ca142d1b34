/* Tests of the ReduceLab MPI runtime against the MPI library's own collectives.
 *
 *   mpirun -np P --mca op ^avx build/test_mpi [--quick]
 *
 * (Debian's Open MPI 4.1.4 AVX op component gives wrong 8-bit sums: the reference must not use
 * it.) For every algorithm, every valid predefined (op, datatype) pair, counts {0, 1, p-1, p,
 * p+1, 2p+1, 37, 100} (and 4099 for a subset) with and without MPI_IN_PLACE, RL_Allreduce must equal
 * MPI_Allreduce bitwise: integer data is random over the full range; float data is chosen so
 * that every order of summation is exact (integers, powers of two), so bitwise equality is
 * required there too (integer MAX/MIN: equal to a local fold of the gathered inputs, since
 * MPICH 4.0.2 gets unsigned MAX/MIN wrong). Random floats are compared within a relative tolerance of
 * 4·p·eps·Σ|x| per element. Then: user-defined commutative and non-commutative ops, virtual
 * torus shapes, reduce-scatter / allgather, nonblocking, persistent, a sub-communicator, and
 * bad arguments (an MPI error code with MPI_ERRORS_RETURN, never a crash).
 * Prints one summary line per rank-0 run; exits non-zero on any failure. */
#include "reducelab_mpi.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, P;
static long long checks, failures, library_wrong;
static int quick;

#define FAIL(...)                                                                                                  \
    do {                                                                                                           \
        failures++;                                                                                                \
        if (failures < 30) {                                                                                       \
            char msg_[512];                                                                                        \
            snprintf(msg_, sizeof msg_, __VA_ARGS__);                                                              \
            fprintf(stderr, "[rank %d] FAIL: %s\n", rank, msg_);                                                  \
        }                                                                                                          \
    } while (0)

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static uint64_t rnd(uint64_t seed, int r, size_t i) { return mix(seed * 1000003ull + (uint64_t)r * 7919ull + i * 104729ull + 1); }

/* ---- datatypes and how to fill / compare them ---- */
enum fill { F_INT, F_LOGIC, F_FSUM, F_FPROD, F_FRAND, F_BOOL, F_PAIR };
typedef struct {
    const char *name;
    MPI_Datatype type;
    int kind; /* 0 int, 1 float, 2 long double, 3 bool, 4 byte, 5.. pairs */
    size_t extent, vsize, ioff; /* pairs: value size, index offset */
} tinfo;

typedef struct { float v; int i; } p_fi;
typedef struct { double v; int i; } p_di;
typedef struct { long v; int i; } p_li;
typedef struct { int v; int i; } p_ii;
typedef struct { short v; int i; } p_si;
typedef struct { long double v; int i; } p_ldi;

static void fill_value(const tinfo *t, enum fill f, char *e, uint64_t h, int r) {
    if (t->kind == 0 || t->kind == 4) { /* integers, byte */
        uint64_t v = f == F_LOGIC ? (h % 3 == 0 ? 0 : h % 5) : h;
        memcpy(e, &v, t->extent);
    } else if (t->kind == 1 || t->kind == 2) {
        double d;
        if (f == F_FSUM) d = (double)((int64_t)(h % 101) - 50);
        else if (f == F_FPROD) { const double c[] = {1, 2, -1, 0.5, -2, 1}; d = c[h % 6]; }
        else d = (double)(h >> 11) / 9007199254740992.0 * 2.0 - 0.7;
        if (t->extent == 4) { float x = (float)d; memcpy(e, &x, 4); }
        else if (t->kind == 1) memcpy(e, &d, 8);
        else { long double x = d; memset(e, 0, t->extent); memcpy(e, &x, 10); }
    } else if (t->kind == 3) {
        bool b = h & 1;
        memcpy(e, &b, 1);
    } else { /* pairs: small values for ties, index = some rank-dependent int */
        memset(e, 0, t->extent);
        int64_t v = (int64_t)(h % 7) - 3;
        int idx = (int)((h >> 8) % 5) + r;
        switch (t->kind) {
        case 5: ((p_fi *)e)->v = (float)v; ((p_fi *)e)->i = idx; break;
        case 6: ((p_di *)e)->v = (double)v; ((p_di *)e)->i = idx; break;
        case 7: ((p_li *)e)->v = (long)v; ((p_li *)e)->i = idx; break;
        case 8: ((p_ii *)e)->v = (int)v; ((p_ii *)e)->i = idx; break;
        case 9: ((p_si *)e)->v = (short)v; ((p_si *)e)->i = idx; break;
        case 10: ((p_ldi *)e)->v = (long double)v; ((p_ldi *)e)->i = idx; break;
        }
    }
}

static void fill(const tinfo *t, enum fill f, char *buf, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) fill_value(t, f, buf + i * t->extent, rnd(seed, rank, i), rank);
}

/* Significant bytes equal (pairs: value and index, long double: 10 bytes). */
static int same_elem(const tinfo *t, const char *a, const char *b) {
    if (t->kind >= 5) return memcmp(a, b, t->vsize) == 0 && memcmp(a + t->ioff, b + t->ioff, sizeof(int)) == 0;
    if (t->kind == 2) return memcmp(a, b, 10) == 0;
    return memcmp(a, b, t->extent) == 0;
}

static double as_double(const tinfo *t, const char *e) {
    if (t->extent == 4) { float x; memcpy(&x, e, 4); return x; }
    if (t->kind == 1) { double x; memcpy(&x, e, 8); return x; }
    long double x; memcpy(&x, e, sizeof x); return (double)x;
}

/* ---- the algorithms: every name of the registry ---- */
#define MAXALG 64
static const char *algorithms[MAXALG];
static size_t NALG;
static int applicable[MAXALG];

/* TEST_MPI_ALGORITHMS=a,b,...: only those names (e.g. shm, the shared-memory allreduce) */
static char only[512];
static void load_algorithms(void) {
    const char *e = getenv("TEST_MPI_ALGORITHMS");
    if (e && *e) {
        snprintf(only, sizeof only, "%s", e);
        for (char *t = strtok(only, ","); t && NALG < MAXALG; t = strtok(NULL, ",")) algorithms[NALG++] = t;
        return;
    }
    for (int i = 0; i < RL_Algorithm_count() && NALG < MAXALG; i++) algorithms[NALG++] = RL_Algorithm_name(i);
}

/* Which algorithms build on the current shape: MPI_ERR_ARG from a count-0 call means not
 * applicable (allowed only for hamiltonian-rings, which needs an r×c torus, and bucket, which
 * needs 2D); anything else is checked like any result. */
static void probe_algorithms(MPI_Comm comm) {
    for (size_t a = 0; a < NALG; a++) {
        int x = 0, y = 0;
        int rc = RL_Allreduce(&x, &y, 0, MPI_INT, MPI_SUM, comm, algorithms[a]);
        applicable[a] = rc == MPI_SUCCESS;
        if (rc != MPI_SUCCESS && strcmp(algorithms[a], "hamiltonian-rings") != 0 && strcmp(algorithms[a], "bucket") != 0)
            FAIL("algorithm %s not applicable on %d ranks (rc %d)", algorithms[a], P, rc);
    }
}

static const int GUARD = 3;

/* One comparison: RL_Allreduce with algorithm a vs the reference result `ref`. */
static void check_one(const tinfo *t, MPI_Op op, const char *opname, enum fill f, size_t n, int inplace, size_t a,
                      const char *input, const char *ref, MPI_Comm comm) {
    size_t bytes = (n + GUARD) * t->extent;
    char *recv = malloc(bytes + 1);
    memset(recv, 0xAB, bytes);
    if (inplace) memcpy(recv, input, n * t->extent);
    int rc = RL_Allreduce(inplace ? MPI_IN_PLACE : input, recv, (int)n, t->type, op, comm, algorithms[a]);
    checks++;
    if (rc != MPI_SUCCESS) {
        FAIL("%s %s %s n=%zu inplace=%d: rc %d", algorithms[a], t->name, opname, n, inplace, rc);
    } else {
        for (size_t i = 0; i < n; i++) {
            const char *x = recv + i * t->extent, *y = ref + i * t->extent;
            int ok;
            if (f == F_FRAND) {
                double dx = as_double(t, x), dy = as_double(t, y);
                double eps = t->extent == 4 ? FLT_EPSILON : DBL_EPSILON;
                ok = fabs(dx - dy) <= 4.0 * P * eps * (fabs(dy) + 2.0 * P); /* Σ|x| ≤ 2·P here */
            } else {
                ok = same_elem(t, x, y);
            }
            if (!ok) {
                FAIL("%s %s %s n=%zu inplace=%d p=%d: element %zu differs", algorithms[a], t->name, opname, n, inplace,
                     P, i);
                break;
            }
        }
        for (size_t i = n * t->extent; i < bytes; i++)
            if ((unsigned char)recv[i] != 0xAB) {
                FAIL("%s %s %s n=%zu: wrote past the end", algorithms[a], t->name, opname, n);
                break;
            }
    }
    free(recv);
}

static int64_t sext(uint64_t u, size_t bytes) {
    int sh = 64 - 8 * (int)bytes;
    return sh ? (int64_t)(u << sh) >> sh : (int64_t)u;
}

/* Integer MAX/MIN: the reference is a local fold of every rank's input (gathered), and the
 * library's answer is counted when it differs: MPICH 4.0.2 (Debian 12) compares unsigned types
 * as signed (pmodels/mpich#6083), so its result is no reference there. */
static void fold_max_min(const tinfo *t, int max, const char *input, char *ref, size_t n, MPI_Comm comm) {
    size_t row = n * t->extent;
    char *all = malloc(row * (size_t)P + 1);
    if (MPI_Allgather(input, (int)row, MPI_BYTE, all, (int)row, MPI_BYTE, comm) != MPI_SUCCESS) {
        FAIL("allgather for the MAX/MIN reference failed");
        free(all);
        return;
    }
    int wrong = 0;
    int unsig = t->type == MPI_UNSIGNED_CHAR || t->type == MPI_UNSIGNED_SHORT || t->type == MPI_UNSIGNED ||
                t->type == MPI_UNSIGNED_LONG_LONG;
    for (size_t i = 0; i < n; i++) {
        uint64_t best = 0;
        for (int r = 0; r < P; r++) {
            uint64_t u = 0;
            memcpy(&u, all + (size_t)r * row + i * t->extent, t->extent); /* little-endian: the low bytes */
            int better = unsig ? (max ? u > best : u < best)
                                  : (max ? sext(u, t->extent) > sext(best, t->extent)
                                         : sext(u, t->extent) < sext(best, t->extent));
            if (r == 0 || better) best = u;
        }
        if (memcmp(ref + i * t->extent, &best, t->extent) != 0) wrong = 1;
        memcpy(ref + i * t->extent, &best, t->extent);
    }
    library_wrong += wrong;
    free(all);
}

static void compare_all(const tinfo *t, MPI_Op op, const char *opname, enum fill f, const size_t *counts, int ncounts,
                        MPI_Comm comm, uint64_t seed) {
    for (int c = 0; c < ncounts; c++) {
        size_t n = counts[c];
        char *input = malloc((n + 1) * t->extent), *ref = calloc(n + 1, t->extent);
        memset(input, 0, (n + 1) * t->extent);
        fill(t, f, input, n, seed + c);
        if (MPI_Allreduce(input, ref, (int)n, t->type, op, comm) != MPI_SUCCESS) FAIL("reference failed");
        if (t->kind == 0 && (op == MPI_MAX || op == MPI_MIN)) fold_max_min(t, op == MPI_MAX, input, ref, n, comm);
        for (size_t a = 0; a < NALG; a++)
            if (applicable[a]) check_one(t, op, opname, f, n, (int)((a + c) & 1), a, input, ref, comm);
        free(input);
        free(ref);
    }
}

/* ---- user-defined ops ---- */
/* Commutative: wrapping sum of uint32. Non-commutative: composition of affine maps
 * x -> a·x + b (mod 2^32), element = (a, b); (f ∘ g) depends on the order. MPI's user function
 * computes inout = in op inout, with `in` the lower ranks' contribution. */
static void user_sum(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    for (int i = 0; i < *len; i++) ((uint32_t *)inout)[i] += ((uint32_t *)in)[i];
}
static void user_affine(void *in_, void *inout_, int *len, MPI_Datatype *t) {
    (void)t;
    uint32_t *in = in_, *io = inout_;
    for (int i = 0; i < *len; i++) { /* apply `in` first, then `inout`: (a2,b2)∘(a1,b1) */
        uint32_t a1 = in[2 * i], b1 = in[2 * i + 1], a2 = io[2 * i], b2 = io[2 * i + 1];
        io[2 * i] = a2 * a1;
        io[2 * i + 1] = a2 * b1 + b2;
    }
}

static void test_user_ops(MPI_Comm comm, const size_t *counts, int ncounts) {
    MPI_Op sum, affine;
    MPI_Datatype pair;
    MPI_Op_create(user_sum, 1, &sum);
    MPI_Op_create(user_affine, 0, &affine);
    MPI_Type_contiguous(2, MPI_UINT32_T, &pair);
    MPI_Type_commit(&pair);
    tinfo tu = {"user-u32", MPI_UINT32_T, 0, 4, 4, 0};
    tinfo ta = {"user-affine", pair, 0, 8, 8, 0};
    compare_all(&tu, sum, "user-sum", F_INT, counts, ncounts, comm, 77);
    /* non-commutative: the MPI library's result is in rank order; ours must be identical */
    compare_all(&ta, affine, "user-affine(noncommutative)", F_INT, counts, ncounts, comm, 78);
    MPI_Op_free(&sum);
    MPI_Op_free(&affine);
    MPI_Type_free(&pair);
}

/* ---- reduce-scatter, allgather ---- */
static void test_rs_ag(MPI_Comm comm, const size_t *counts, int ncounts) {
    const char *algs[] = {"ring", "recursive-doubling-bandwidth", "recursive-doubling-mirrored", "bucket",
                          "swing-bandwidth", "swing", "auto"};
    for (size_t a = 0; a < sizeof algs / sizeof *algs; a++) {
        for (int c = 0; c < ncounts; c++) {
            size_t n = counts[c];
            int32_t *in = malloc((n * P + 1) * 4), *ref = calloc(n + 1, 4), *out = calloc(n + 1, 4);
            int32_t *agref = calloc(n * P + 1, 4), *agout = calloc(n * P + 1, 4);
            for (size_t i = 0; i < n * P; i++) in[i] = (int32_t)rnd(5 + c, rank, i);
            MPI_Reduce_scatter_block(in, ref, (int)n, MPI_INT32_T, MPI_SUM, comm);
            int rc = RL_Reduce_scatter_block(in, out, (int)n, MPI_INT32_T, MPI_SUM, comm, algs[a]);
            if (rc == MPI_ERR_ARG && strcmp(algs[a], "bucket") == 0) goto next; /* not on this shape */
            checks++;
            if (rc != MPI_SUCCESS || memcmp(out, ref, n * 4)) FAIL("reduce-scatter %s n=%zu rc=%d", algs[a], n, rc);
            MPI_Allgather(in, (int)n, MPI_INT32_T, agref, (int)n, MPI_INT32_T, comm);
            rc = RL_Allgather(in, (int)n, MPI_INT32_T, agout, (int)n, MPI_INT32_T, comm, algs[a]);
            checks++;
            if (rc != MPI_SUCCESS || memcmp(agout, agref, n * P * 4)) FAIL("allgather %s n=%zu rc=%d", algs[a], n, rc);
            /* in place: own segment already in recvbuf */
            memset(agout, 0, n * P * 4);
            memcpy(agout + (size_t)rank * n, in, n * 4);
            rc = RL_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, agout, (int)n, MPI_INT32_T, comm, algs[a]);
            checks++;
            if (rc != MPI_SUCCESS || memcmp(agout, agref, n * P * 4)) FAIL("allgather in place %s n=%zu", algs[a], n);
        next:
            free(in), free(ref), free(out), free(agref), free(agout);
        }
    }
}

/* ---- nonblocking and persistent ---- */
static void test_nonblocking(MPI_Comm comm) {
    const size_t n = 1000 + 3;
    double *a = malloc(n * 8), *b = malloc(n * 8), *ra = malloc(n * 8), *rb = malloc(n * 8), *ref = malloc(n * 8);
    const char *algs[] = {"ring", "swing-bandwidth", "recursive-doubling-latency", "auto"};
    for (size_t k = 0; k < sizeof algs / sizeof *algs; k++) {
        for (size_t i = 0; i < n; i++) a[i] = (double)(rnd(11, rank, i) % 1000), b[i] = (double)(rnd(12, rank, i) % 1000);
        MPI_Request r[2];
        /* two operations in flight at once, completed in reverse order */
        int rc1 = RL_Iallreduce(a, ra, (int)n, MPI_DOUBLE, MPI_SUM, comm, algs[k], &r[0]);
        int rc2 = RL_Iallreduce(b, rb, (int)n, MPI_DOUBLE, MPI_MAX, comm, algs[k], &r[1]);
        RL_Wait(&r[1], MPI_STATUS_IGNORE);
        RL_Wait(&r[0], MPI_STATUS_IGNORE);
        checks += 2;
        MPI_Allreduce(a, ref, (int)n, MPI_DOUBLE, MPI_SUM, comm);
        if (rc1 || memcmp(ra, ref, n * 8)) FAIL("iallreduce sum %s", algs[k]);
        MPI_Allreduce(b, ref, (int)n, MPI_DOUBLE, MPI_MAX, comm);
        if (rc2 || memcmp(rb, ref, n * 8)) FAIL("iallreduce max %s", algs[k]);
    }
    /* persistent: plan once, start three times with new data, result checked each time */
    for (size_t k = 0; k < sizeof algs / sizeof *algs; k++) {
        RL_Persistent req;
        int rc = RL_Allreduce_init(a, ra, (int)n, MPI_DOUBLE, MPI_SUM, comm, algs[k], &req);
        if (rc) { FAIL("allreduce_init %s rc=%d", algs[k], rc); continue; }
        for (int it = 0; it < 3; it++) {
            for (size_t i = 0; i < n; i++) a[i] = (double)(rnd(20 + it, rank, i) % 1000);
            RL_Start(req);
            RL_Persistent_wait(req);
            MPI_Allreduce(a, ref, (int)n, MPI_DOUBLE, MPI_SUM, comm);
            checks++;
            if (memcmp(ra, ref, n * 8)) FAIL("persistent %s start %d", algs[k], it);
        }
        RL_Persistent_free(&req);
        if (req != NULL) FAIL("persistent free did not reset the handle");
    }
    free(a), free(b), free(ra), free(rb), free(ref);
}

/* ---- bad arguments: an error code, no crash ---- */
static void expect_error(int rc, const char *what) {
    checks++;
    if (rc == MPI_SUCCESS) FAIL("bad argument accepted: %s", what);
}
static void expect_code(int rc, int code, const char *what) {
    int cls = -1;
    checks++;
    MPI_Error_class(rc, &cls);
    if (cls != code) FAIL("%s: error class %d, expected %d", what, cls, code);
}

static void test_errors(void) {
    MPI_Comm comm = MPI_COMM_WORLD;
    int x[4] = {1, 2, 3, 4}, y[4];
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    expect_error(RL_Allreduce(x, y, -1, MPI_INT, MPI_SUM, comm, "ring"), "negative count");
    expect_error(RL_Allreduce(x, y, 4, MPI_DATATYPE_NULL, MPI_SUM, comm, "ring"), "null datatype");
    expect_error(RL_Allreduce(x, y, 4, MPI_INT, MPI_OP_NULL, comm, "ring"), "null op");
    expect_error(RL_Allreduce(x, y, 4, MPI_INT, MPI_SUM, MPI_COMM_NULL, "ring"), "null communicator");
    expect_code(RL_Allreduce(x, NULL, 4, MPI_INT, MPI_SUM, comm, "ring"), MPI_ERR_BUFFER, "null receive buffer");
    expect_code(RL_Allreduce(NULL, y, 4, MPI_INT, MPI_SUM, comm, "swing"), MPI_ERR_BUFFER, "null send buffer");
    expect_code(RL_Allreduce(x, y, 4, MPI_INT, MPI_SUM, comm, "no-such-algorithm"), MPI_ERR_ARG, "unknown algorithm");
    if (P == 3 || P == 5 || P == 7)
        expect_code(RL_Allreduce(x, y, 4, MPI_INT, MPI_SUM, comm, "hamiltonian-rings"), MPI_ERR_ARG,
                    "hamiltonian-rings on a 1D layout");
    expect_code(RL_Reduce_scatter_block(x, y, 1, MPI_INT, MPI_SUM, comm, "swing-latency"), MPI_ERR_ARG,
                "reduce-scatter by a latency-optimal algorithm");
    expect_error(RL_Allreduce(x, y, 4, MPI_FLOAT, MPI_BAND, comm, "ring"), "BAND on float");
    expect_error(RL_Allreduce(x, y, 4, MPI_INT, MPI_MAXLOC, comm, "ring"), "MAXLOC on int");
    expect_error(RL_Allreduce(x, x, 4, MPI_INT, MPI_SUM, comm, "ring"), "aliased buffers");
    setenv("REDUCELAB_TORUS", "4x", 1);
    expect_code(RL_Allreduce(x, y, 4, MPI_INT, MPI_SUM, comm, "ring"), MPI_ERR_ARG, "malformed REDUCELAB_TORUS");
    unsetenv("REDUCELAB_TORUS");
    RL_Persistent req;
    expect_error(RL_Allreduce_init(x, y, -2, MPI_INT, MPI_SUM, comm, "ring", &req), "persistent negative count");
    expect_error(RL_Allreduce_init(x, y, 4, MPI_INT, MPI_SUM, comm, "nope", &req), "persistent unknown algorithm");
    expect_error(RL_Start(NULL), "start of a null request");
    MPI_Request r;
    expect_error(RL_Iallreduce(x, y, 4, MPI_INT, MPI_OP_NULL, comm, "ring", &r), "nonblocking null op");
    /* still works afterwards */
    int rc = RL_Allreduce(x, y, 4, MPI_INT, MPI_SUM, comm, "ring");
    checks++;
    if (rc != MPI_SUCCESS || y[0] != P || y[3] != 4 * P) FAIL("allreduce after errors");
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    double t0 = MPI_Wtime();
    MPI_Comm comm = MPI_COMM_WORLD;
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN); /* failures are counted, not fatal */
    unsetenv("REDUCELAB_TORUS");
    load_algorithms();
    if (NALG < 13 && !only[0]) FAIL("the registry lists %zu algorithms, expected at least 13", NALG);
    probe_algorithms(comm);

    const size_t pm1 = P > 1 ? (size_t)P - 1 : 2;
    size_t counts[] = {0, 1, pm1, (size_t)P, (size_t)P + 1, 2 * (size_t)P + 1, 37, 100};
    const int nc = 8;
    size_t big[] = {4099 + (size_t)P};

    tinfo ints[] = {
        {"int8", MPI_INT8_T, 0, 1, 0, 0},          {"uchar", MPI_UNSIGNED_CHAR, 0, 1, 0, 0},
        {"short", MPI_SHORT, 0, 2, 0, 0},          {"ushort", MPI_UNSIGNED_SHORT, 0, 2, 0, 0},
        {"int", MPI_INT, 0, 4, 0, 0},              {"unsigned", MPI_UNSIGNED, 0, 4, 0, 0},
        {"long", MPI_LONG, 0, 8, 0, 0},            {"ull", MPI_UNSIGNED_LONG_LONG, 0, 8, 0, 0},
        {"schar", MPI_SIGNED_CHAR, 0, 1, 0, 0},    {"int64", MPI_INT64_T, 0, 8, 0, 0},
    };
    struct { MPI_Op op; const char *name; } iops[] = {
        {MPI_SUM, "sum"}, {MPI_PROD, "prod"}, {MPI_MAX, "max"}, {MPI_MIN, "min"}, {MPI_LAND, "land"},
        {MPI_LOR, "lor"}, {MPI_LXOR, "lxor"}, {MPI_BAND, "band"}, {MPI_BOR, "bor"}, {MPI_BXOR, "bxor"}};
    for (size_t t = 0; t < sizeof ints / sizeof *ints; t++)
        for (size_t o = 0; o < 10; o++) {
            enum fill f = (iops[o].op == MPI_LAND || iops[o].op == MPI_LOR || iops[o].op == MPI_LXOR) ? F_LOGIC : F_INT;
            compare_all(&ints[t], iops[o].op, iops[o].name, f, counts, nc, comm, 100 * t + o);
        }
    tinfo floats[] = {{"float", MPI_FLOAT, 1, 4, 0, 0}, {"double", MPI_DOUBLE, 1, 8, 0, 0},
                      {"long double", MPI_LONG_DOUBLE, 2, sizeof(long double), 0, 0}};
    for (size_t t = 0; t < 3; t++) {
        compare_all(&floats[t], MPI_SUM, "sum(exact)", F_FSUM, counts, nc, comm, 500 + t);
        compare_all(&floats[t], MPI_PROD, "prod(exact)", F_FPROD, counts, nc, comm, 510 + t);
        compare_all(&floats[t], MPI_MAX, "max", F_FRAND, counts, nc, comm, 520 + t);
        compare_all(&floats[t], MPI_MIN, "min", F_FRAND, counts, nc, comm, 530 + t);
        compare_all(&floats[t], MPI_SUM, "sum(random, tolerance)", F_FRAND, counts, nc, comm, 540 + t);
    }
    tinfo tb = {"bool", MPI_C_BOOL, 3, 1, 0, 0}, tbyte = {"byte", MPI_BYTE, 4, 1, 0, 0};
    compare_all(&tb, MPI_LAND, "land", F_BOOL, counts, nc, comm, 600);
    compare_all(&tb, MPI_LOR, "lor", F_BOOL, counts, nc, comm, 601);
    compare_all(&tb, MPI_LXOR, "lxor", F_BOOL, counts, nc, comm, 602);
    compare_all(&tbyte, MPI_BAND, "band", F_INT, counts, nc, comm, 603);
    compare_all(&tbyte, MPI_BOR, "bor", F_INT, counts, nc, comm, 604);
    compare_all(&tbyte, MPI_BXOR, "bxor", F_INT, counts, nc, comm, 605);
    tinfo pairs[] = {
        {"float_int", MPI_FLOAT_INT, 5, sizeof(p_fi), 4, offsetof(p_fi, i)},
        {"double_int", MPI_DOUBLE_INT, 6, sizeof(p_di), 8, offsetof(p_di, i)},
        {"long_int", MPI_LONG_INT, 7, sizeof(p_li), 8, offsetof(p_li, i)},
        {"2int", MPI_2INT, 8, sizeof(p_ii), 4, offsetof(p_ii, i)},
        {"short_int", MPI_SHORT_INT, 9, sizeof(p_si), 2, offsetof(p_si, i)},
        {"long_double_int", MPI_LONG_DOUBLE_INT, 10, sizeof(p_ldi), 10, offsetof(p_ldi, i)},
    };
    for (size_t t = 0; t < 6; t++) {
        compare_all(&pairs[t], MPI_MAXLOC, "maxloc", F_PAIR, counts, nc, comm, 700 + t);
        compare_all(&pairs[t], MPI_MINLOC, "minloc", F_PAIR, counts, nc, comm, 710 + t);
    }
    tinfo fort[] = {{"fortran-integer", MPI_INTEGER, 0, 4, 0, 0}, {"fortran-double", MPI_DOUBLE_PRECISION, 1, 8, 0, 0}};
    compare_all(&fort[0], MPI_SUM, "sum", F_INT, counts, nc, comm, 800);
    compare_all(&fort[1], MPI_SUM, "sum(exact)", F_FSUM, counts, nc, comm, 801);
    /* larger vectors (many elements per block, uneven splits) on a subset */
    compare_all(&ints[0], MPI_SUM, "sum", F_INT, big, 1, comm, 900);
    compare_all(&ints[4], MPI_SUM, "sum", F_INT, big, 1, comm, 901);
    compare_all(&floats[1], MPI_SUM, "sum(exact)", F_FSUM, big, 1, comm, 902);
    compare_all(&floats[0], MPI_MAX, "max", F_FRAND, big, 1, comm, 903);
    compare_all(&pairs[1], MPI_MINLOC, "minloc", F_PAIR, big, 1, comm, 904);
    size_t uc[] = {0, 1, (size_t)P + 1, 37, 1001};
    test_user_ops(comm, uc, 5);

    /* virtual tori whose product is P */
    const char *shapes[] = {"2x1", "2x2", "3x2", "2x3", "4x2", "2x2x2", "3x3"};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int prod = 1;
        for (const char *c = shapes[s]; *c; c++)
            if (*c >= '0' && *c <= '9') prod *= *c - '0';
        if (prod != P) continue;
        setenv("REDUCELAB_TORUS", shapes[s], 1);
        probe_algorithms(comm);
        size_t tc[] = {0, 1, (size_t)P + 1, 37, 1001};
        compare_all(&ints[4], MPI_SUM, "sum", F_INT, tc, 5, comm, 1000 + s);
        compare_all(&floats[1], MPI_MAX, "max", F_FRAND, tc, 5, comm, 1010 + s);
        compare_all(&ints[2], MPI_BXOR, "bxor", F_INT, tc, 5, comm, 1020 + s);
        size_t rc_counts[] = {0, 1, 5};
        test_rs_ag(comm, rc_counts, 3);
        test_user_ops(comm, tc, 3);
    }
    unsetenv("REDUCELAB_TORUS");
    probe_algorithms(comm);
    size_t rs_counts[] = {0, 1, 2, 7, 300};
    test_rs_ag(comm, rs_counts, 5);
    test_nonblocking(comm);

    /* a sub-communicator (even / odd ranks): other sizes in the same run, freed afterwards */
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &sub);
    int saveP = P;
    MPI_Comm_size(sub, &P);
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    probe_algorithms(sub);
    size_t sc[] = {1, 9, 101};
    compare_all(&ints[4], MPI_SUM, "sum(subcomm)", F_INT, sc, 3, sub, 1100);
    MPI_Comm_free(&sub);
    P = saveP;

    test_errors();

    long long tot[2] = {checks, failures}, all[2];
    MPI_Allreduce(tot, all, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    long long sched, fb;
    RL_Counters(&sched, &fb);
    if (rank == 0)
        printf("test_mpi p=%d: %lld checks on rank 0 (%lld over all ranks), %lld failures, %lld scheduled calls, "
               "%lld MAX/MIN references where the library's own result was wrong, %.1f s\n",
               P, checks, all[0], all[1], sched, library_wrong, MPI_Wtime() - t0);
    MPI_Finalize();
    return all[1] ? 1 : 0;
}
