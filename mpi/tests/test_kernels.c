/* The kernels added for pairs that used to fall through to the MPI library: MPI_CHAR (the ten
 * integer ops; OSU's default type), the complex types (C, C++ and Fortran names; SUM and PROD)
 * and MPI_CXX_BOOL (logical ops). RL_Allreduce must equal the library's MPI_Allreduce bitwise
 * (complex data exact in any order, compared by value: small Gaussian integers and halves) for five algorithms
 * and counts 1, p+1, 37, 1000, in place and not, and must have run a schedule (the fallback
 * counter does not move). Then MPI_BYTE with MPI_SUM (accepted by Open MPI, rejected by MPICH
 * and the MPI standard, no kernel here) is called three times: it must fall through three times
 * with the library's result or error class (the
 * REDUCELAB_VERBOSE notice is checked by the Python test: one line per process).
 * Prints "test_kernels p=P: C checks, F failures" on rank 0. */
#include "reducelab_mpi.h"

#include <complex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, P;
static long long checks, failures;
#define FAIL(...)                                                                                                  \
    do {                                                                                                           \
        failures++;                                                                                                \
        if (failures < 30) {                                                                                       \
            fprintf(stderr, "[rank %d] FAIL: ", rank);                                                             \
            fprintf(stderr, __VA_ARGS__);                                                                          \
            fprintf(stderr, "\n");                                                                                 \
        }                                                                                                          \
    } while (0)

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

enum { K_CHAR, K_CF, K_CD, K_CLD, K_BOOL };
typedef struct {
    const char *name;
    MPI_Datatype type;
    int kind;
    size_t size;
} tinfo;

static void fill(const tinfo *t, int prod, char *buf, size_t n, uint64_t seed) {
    static const double pr[][2] = {{1, 0}, {0, 1}, {-1, 0}, {1, 1}, {2, 0}, {0.5, 0}, {1, -1}, {0, -1}};
    memset(buf, 0, n * t->size);
    for (size_t i = 0; i < n; i++) {
        uint64_t h = mix(seed * 1000003u + (uint64_t)rank * 7919u + i);
        char *e = buf + i * t->size;
        double re = prod ? pr[h % 8][0] : (double)((int)(h % 101) - 50);
        double im = prod ? pr[h % 8][1] : (double)((int)((h >> 8) % 101) - 50);
        switch (t->kind) {
        case K_CHAR: *e = (char)h; break;
        case K_BOOL: *(bool *)e = (h >> 3) & 1; break;
        case K_CF: *(float _Complex *)e = (float)re + (float)im * I; break;
        case K_CD: *(double _Complex *)e = re + im * I; break;
        case K_CLD: *(long double _Complex *)e = (long double)re + (long double)im * I; break;
        }
    }
}

/* Integers and bools bitwise. Complex numbers by value: the data make every order of
 * combination exact, but the sign of a zero part depends on the order (e.g. the imaginary part
 * of (-1+0i)(-1+0i) is -0), and MPI lets predefined ops combine in any order. */
static int same(const tinfo *t, const char *a, const char *b) {
    switch (t->kind) {
    case K_CF: return *(const float _Complex *)a == *(const float _Complex *)b;
    case K_CD: return *(const double _Complex *)a == *(const double _Complex *)b;
    case K_CLD: return *(const long double _Complex *)a == *(const long double _Complex *)b;
    default: return !memcmp(a, b, t->size);
    }
}

int main(int argc, char **argv) {
    /* every call must run a schedule: no crossover to the MPI library for `auto` unless the
     * environment sets REDUCELAB_RULES (docs/mpi.md; the rules are read at the first call) */
    setenv("REDUCELAB_RULES", "none", 0);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    tinfo ts[] = {{"MPI_CHAR", MPI_CHAR, K_CHAR, 1},
                  {"MPI_CXX_BOOL", MPI_CXX_BOOL, K_BOOL, sizeof(bool)},
                  {"MPI_C_FLOAT_COMPLEX", MPI_C_FLOAT_COMPLEX, K_CF, sizeof(float _Complex)},
                  {"MPI_C_COMPLEX", MPI_C_COMPLEX, K_CF, sizeof(float _Complex)},
                  {"MPI_CXX_FLOAT_COMPLEX", MPI_CXX_FLOAT_COMPLEX, K_CF, sizeof(float _Complex)},
                  {"MPI_COMPLEX", MPI_COMPLEX, K_CF, sizeof(float _Complex)},
                  {"MPI_C_DOUBLE_COMPLEX", MPI_C_DOUBLE_COMPLEX, K_CD, sizeof(double _Complex)},
                  {"MPI_CXX_DOUBLE_COMPLEX", MPI_CXX_DOUBLE_COMPLEX, K_CD, sizeof(double _Complex)},
                  {"MPI_DOUBLE_COMPLEX", MPI_DOUBLE_COMPLEX, K_CD, sizeof(double _Complex)},
                  {"MPI_C_LONG_DOUBLE_COMPLEX", MPI_C_LONG_DOUBLE_COMPLEX, K_CLD, sizeof(long double _Complex)}};
    struct { MPI_Op op; const char *name; } ops[] = {{MPI_SUM, "SUM"}, {MPI_PROD, "PROD"}, {MPI_MAX, "MAX"},
                                                    {MPI_MIN, "MIN"}, {MPI_LAND, "LAND"}, {MPI_LOR, "LOR"},
                                                    {MPI_LXOR, "LXOR"}, {MPI_BAND, "BAND"}, {MPI_BOR, "BOR"},
                                                    {MPI_BXOR, "BXOR"}};
    const char *algs[] = {"ring", "recursive-doubling-latency", "rabenseifner", "swing-bandwidth", "auto"};
    const size_t counts[] = {1, (size_t)P + 1, 37, 1000};
    long long pairs = 0;
    for (size_t t = 0; t < sizeof ts / sizeof *ts; t++) {
        if (ts[t].type == MPI_DATATYPE_NULL) continue; /* e.g. no Fortran in this MPI */
        for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
            int valid = ts[t].kind == K_CHAR ? 1
                        : ts[t].kind == K_BOOL ? (ops[o].op == MPI_LAND || ops[o].op == MPI_LOR || ops[o].op == MPI_LXOR)
                                               : (ops[o].op == MPI_SUM || ops[o].op == MPI_PROD);
            if (!valid) continue;
            pairs++;
            for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
                size_t n = counts[c], bytes = n * ts[t].size;
                char *in = malloc(bytes), *ref = calloc(1, bytes), *out = malloc(bytes + 8);
                fill(&ts[t], ops[o].op == MPI_PROD, in, n, t * 100 + o * 10 + c);
                if (MPI_Allreduce(in, ref, (int)n, ts[t].type, ops[o].op, MPI_COMM_WORLD) != MPI_SUCCESS) {
                    FAIL("the MPI library rejects %s %s", ts[t].name, ops[o].name);
                    free(in), free(ref), free(out);
                    continue;
                }
                for (size_t a = 0; a < sizeof algs / sizeof *algs; a++) {
                    int inplace = (int)((a + c) & 1);
                    long long s0, f0, s1, f1;
                    memset(out, 0x5A, bytes + 8);
                    if (inplace) memcpy(out, in, bytes);
                    RL_Counters(&s0, &f0);
                    int rc = RL_Allreduce(inplace ? MPI_IN_PLACE : in, out, (int)n, ts[t].type, ops[o].op,
                                          MPI_COMM_WORLD, algs[a]);
                    RL_Counters(&s1, &f1);
                    checks++;
                    if (rc != MPI_SUCCESS) FAIL("%s %s %s n=%zu: rc %d", algs[a], ts[t].name, ops[o].name, n, rc);
                    if (f1 != f0 || s1 != s0 + 1)
                        FAIL("%s %s %s n=%zu: fell through to the MPI library", algs[a], ts[t].name, ops[o].name, n);
                    for (size_t i = 0; i < n; i++)
                        if (!same(&ts[t], out + i * ts[t].size, ref + i * ts[t].size)) {
                            FAIL("%s %s %s n=%zu inplace=%d: element %zu differs from the library's", algs[a],
                                 ts[t].name, ops[o].name, n, inplace, i);
                            break;
                        }
                    for (size_t i = bytes; i < bytes + 8; i++)
                        if ((unsigned char)out[i] != 0x5A) {
                            FAIL("%s %s n=%zu: wrote past the end", algs[a], ts[t].name, n);
                            break;
                        }
                }
                free(in), free(ref), free(out);
            }
        }
    }
    /* MPI_BYTE with MPI_SUM: no kernel (not an MPI pair), three fall-throughs */
    {
        unsigned char x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8], r[8];
        long long s0, f0, s1, f1;
        int want = MPI_Allreduce(x, r, 8, MPI_BYTE, MPI_SUM, MPI_COMM_WORLD);
        RL_Counters(&s0, &f0);
        for (int k = 0; k < 3; k++) {
            int rc = RL_Allreduce(x, y, 8, MPI_BYTE, MPI_SUM, MPI_COMM_WORLD, "ring");
            int cls = -1, want_cls = -2;
            MPI_Error_class(rc, &cls);
            MPI_Error_class(want, &want_cls);
            checks++;
            /* the library's error class (MPICH rejects the pair; its codes differ call by call) */
            if (cls != want_cls || (rc == MPI_SUCCESS && memcmp(y, r, 8)))
                FAIL("MPI_BYTE MPI_SUM fall-through: rc %d (class %d, the library's %d)", rc, cls, want_cls);
        }
        RL_Counters(&s1, &f1);
        checks++;
        if (f1 - f0 != 3 || s1 != s0) FAIL("MPI_BYTE MPI_SUM: %lld fall-throughs, %lld scheduled", f1 - f0, s1 - s0);
    }
    long long tot[2] = {checks, failures}, all[2];
    MPI_Reduce(tot, all, 2, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("test_kernels p=%d: %lld pairs, %lld checks, %lld failures\n", P, pairs, all[0], all[1]);
    MPI_Finalize();
    return failures != 0;
}
