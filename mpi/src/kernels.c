/* Reduction kernels for MPI's predefined operations on the predefined types they are valid
 * for (MPI-3.1 §5.9.2). Plain loops over restrict pointers that gcc -O3 vectorises; with
 * target_clones the AVX2 version is picked at load time where the CPU has it.
 * Integer sums and products wrap modulo 2^bits (computed in unsigned arithmetic, as MPI
 * libraries do, without C's signed-overflow undefined behaviour). */
#include "rl_kernels.h"
#include <stdbool.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define RL_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RL_CLONES
#endif

/* out[i] = a[i] op b[i]; `out` may be `b` (no restrict: gcc adds a run-time overlap check and
 * vectorises the non-overlapping case). */
#define KERNEL(name, T, expr)                                                       \
    RL_CLONES static void name(const void *a_, const void *b_, void *out_, size_t n) { \
        const T *x = (const T *)a_, *y = (const T *)b_;                             \
        T *o = (T *)out_;                                                           \
        for (size_t i = 0; i < n; i++) {                                            \
            T a = x[i], b = y[i];                                                   \
            o[i] = (expr);                                                          \
        }                                                                           \
    }

/* Integer kinds: sum/prod in the unsigned type U of the same width. */
#define INT_KERNELS(sfx, T, U)                                                      \
    KERNEL(sum_##sfx, T, (T)((U)a + (U)b))                                          \
    KERNEL(prod_##sfx, T, (T)((U)a * (U)b))                                         \
    KERNEL(max_##sfx, T, a > b ? a : b)                                             \
    KERNEL(min_##sfx, T, a < b ? a : b)                                             \
    KERNEL(land_##sfx, T, (T)((a != 0) & (b != 0)))                                 \
    KERNEL(lor_##sfx, T, (T)((a != 0) | (b != 0)))                                  \
    KERNEL(lxor_##sfx, T, (T)((a != 0) ^ (b != 0)))                                 \
    KERNEL(band_##sfx, T, (T)(a & b))                                               \
    KERNEL(bor_##sfx, T, (T)(a | b))                                                \
    KERNEL(bxor_##sfx, T, (T)(a ^ b))

INT_KERNELS(i8, int8_t, uint8_t)
INT_KERNELS(u8, uint8_t, uint8_t)
INT_KERNELS(i16, int16_t, uint16_t)
INT_KERNELS(u16, uint16_t, uint16_t)
INT_KERNELS(i32, int32_t, uint32_t)
INT_KERNELS(u32, uint32_t, uint32_t)
INT_KERNELS(i64, int64_t, uint64_t)
INT_KERNELS(u64, uint64_t, uint64_t)

#define FLOAT_KERNELS(sfx, T)                                                       \
    KERNEL(sum_##sfx, T, a + b)                                                     \
    KERNEL(prod_##sfx, T, a * b)                                                    \
    KERNEL(max_##sfx, T, a > b ? a : b)                                             \
    KERNEL(min_##sfx, T, a < b ? a : b)

FLOAT_KERNELS(f32, float)
FLOAT_KERNELS(f64, double)
FLOAT_KERNELS(f80, long double)

/* Complex SUM and PROD with C's own complex arithmetic (as Open MPI's op component does);
 * both are commutative bitwise (ac−bd, ad+bc are symmetric in the operands). */
#define COMPLEX_KERNELS(sfx, T)                                                     \
    KERNEL(sum_##sfx, T, a + b)                                                     \
    KERNEL(prod_##sfx, T, a * b)

COMPLEX_KERNELS(c32, float _Complex)
COMPLEX_KERNELS(c64, double _Complex)
COMPLEX_KERNELS(c80, long double _Complex)

KERNEL(land_bool, bool, a && b)
KERNEL(lor_bool, bool, a || b)
KERNEL(lxor_bool, bool, a != b)

/* MAXLOC / MINLOC on (value, index) pairs: the better value, the smaller index on a tie. */
#define LOC_KERNELS(sfx, V, I)                                                      \
    typedef struct { V v; I i; } pair_##sfx;                                        \
    static void maxloc_##sfx(const void *a_, const void *b_, void *out_, size_t n) { \
        const pair_##sfx *a = a_, *b = b_;                                          \
        pair_##sfx *o = out_;                                                       \
        for (size_t k = 0; k < n; k++) {                                            \
            pair_##sfx r = b[k];                                                    \
            if (a[k].v > r.v) r = a[k];                                             \
            else if (a[k].v == r.v && a[k].i < r.i) r.i = a[k].i;                   \
            o[k] = r;                                                               \
        }                                                                           \
    }                                                                               \
    static void minloc_##sfx(const void *a_, const void *b_, void *out_, size_t n) { \
        const pair_##sfx *a = a_, *b = b_;                                          \
        pair_##sfx *o = out_;                                                       \
        for (size_t k = 0; k < n; k++) {                                            \
            pair_##sfx r = b[k];                                                    \
            if (a[k].v < r.v) r = a[k];                                             \
            else if (a[k].v == r.v && a[k].i < r.i) r.i = a[k].i;                   \
            o[k] = r;                                                               \
        }                                                                           \
    }

LOC_KERNELS(float_int, float, int)
LOC_KERNELS(double_int, double, int)
LOC_KERNELS(long_int, long, int)
LOC_KERNELS(2int, int, int)
LOC_KERNELS(short_int, short, int)
LOC_KERNELS(long_double_int, long double, int)

enum kind { K_NONE, K_C32, K_C64, K_C80, K_I8, K_U8, K_I16, K_U16, K_I32, K_U32, K_I64, K_U64, K_F32, K_F64, K_F80, K_BOOL, K_BYTE,
            K_FLOAT_INT, K_DOUBLE_INT, K_LONG_INT, K_2INT, K_SHORT_INT, K_LONG_DOUBLE_INT };

static int is(MPI_Datatype t, MPI_Datatype u) { return u != MPI_DATATYPE_NULL && t == u; }

/* Integer kind of a C or Fortran integer type, by signedness and size. */
static enum kind int_kind(int sgn, int size) {
    switch (size) {
    case 1: return sgn ? K_I8 : K_U8;
    case 2: return sgn ? K_I16 : K_U16;
    case 4: return sgn ? K_I32 : K_U32;
    case 8: return sgn ? K_I64 : K_U64;
    default: return K_NONE;
    }
}

static enum kind kind_of(MPI_Datatype t, int *no_logical) {
    int size = 0;
    *no_logical = 0;
    if (t == MPI_DATATYPE_NULL) return K_NONE;
    const MPI_Datatype sint[] = {MPI_SIGNED_CHAR, MPI_SHORT, MPI_INT, MPI_LONG, MPI_LONG_LONG_INT, MPI_LONG_LONG,
                                 MPI_INT8_T, MPI_INT16_T, MPI_INT32_T, MPI_INT64_T};
    /* Fortran and multi-language integers: MPI defines no logical ops on them. */
    const MPI_Datatype fint[] = {MPI_AINT, MPI_OFFSET, MPI_COUNT, MPI_INTEGER, MPI_INTEGER1, MPI_INTEGER2,
                                 MPI_INTEGER4, MPI_INTEGER8};
    const MPI_Datatype uint[] = {MPI_UNSIGNED_CHAR, MPI_UNSIGNED_SHORT, MPI_UNSIGNED, MPI_UNSIGNED_LONG,
                                 MPI_UNSIGNED_LONG_LONG, MPI_UINT8_T, MPI_UINT16_T, MPI_UINT32_T, MPI_UINT64_T};
    for (size_t i = 0; i < sizeof sint / sizeof sint[0]; i++)
        if (is(t, sint[i])) { PMPI_Type_size(t, &size); return int_kind(1, size); }
    for (size_t i = 0; i < sizeof fint / sizeof fint[0]; i++)
        if (is(t, fint[i])) { *no_logical = 1; PMPI_Type_size(t, &size); return int_kind(1, size); }
    for (size_t i = 0; i < sizeof uint / sizeof uint[0]; i++)
        if (is(t, uint[i])) { PMPI_Type_size(t, &size); return int_kind(0, size); }
    if (is(t, MPI_FLOAT) || is(t, MPI_REAL) || is(t, MPI_REAL4)) return K_F32;
    if (is(t, MPI_DOUBLE) || is(t, MPI_DOUBLE_PRECISION) || is(t, MPI_REAL8)) return K_F64;
    if (is(t, MPI_LONG_DOUBLE)) {
        PMPI_Type_size(t, &size);
        return size == (int)sizeof(long double) ? K_F80 : K_NONE;
    }
    if (is(t, MPI_C_BOOL) || is(t, MPI_CXX_BOOL)) return K_BOOL;
    /* MPI_CHAR: Open MPI (and MPICH) accept the integer ops on it, and OSU's benchmarks use it;
     * it is plain `char`, signed on the ABIs where char is signed. */
    if (is(t, MPI_CHAR)) return int_kind((char)-1 < 0, 1);
    /* complex: C, C++ and Fortran names of the same layouts (two floats, two doubles, ...) */
    if (is(t, MPI_C_FLOAT_COMPLEX) || is(t, MPI_C_COMPLEX) || is(t, MPI_CXX_FLOAT_COMPLEX) || is(t, MPI_COMPLEX) ||
        is(t, MPI_COMPLEX8))
        return K_C32;
    if (is(t, MPI_C_DOUBLE_COMPLEX) || is(t, MPI_CXX_DOUBLE_COMPLEX) || is(t, MPI_DOUBLE_COMPLEX) ||
        is(t, MPI_COMPLEX16))
        return K_C64;
    if (is(t, MPI_C_LONG_DOUBLE_COMPLEX) || is(t, MPI_CXX_LONG_DOUBLE_COMPLEX)) {
        PMPI_Type_size(t, &size);
        return size == (int)sizeof(long double _Complex) ? K_C80 : K_NONE;
    }
    if (is(t, MPI_BYTE)) return K_BYTE;
    if (is(t, MPI_FLOAT_INT)) return K_FLOAT_INT;
    if (is(t, MPI_DOUBLE_INT)) return K_DOUBLE_INT;
    if (is(t, MPI_LONG_INT)) return K_LONG_INT;
    if (is(t, MPI_2INT)) return K_2INT;
    if (is(t, MPI_SHORT_INT)) return K_SHORT_INT;
    if (is(t, MPI_LONG_DOUBLE_INT)) return K_LONG_DOUBLE_INT;
    return K_NONE;
}

#define INT_OPS(sfx)                                                                 \
    if (op == MPI_SUM) return sum_##sfx;                                             \
    if (op == MPI_PROD) return prod_##sfx;                                           \
    if (op == MPI_MAX) return max_##sfx;                                             \
    if (op == MPI_MIN) return min_##sfx;                                             \
    if (op == MPI_LAND) return land_##sfx;                                           \
    if (op == MPI_LOR) return lor_##sfx;                                             \
    if (op == MPI_LXOR) return lxor_##sfx;                                           \
    if (op == MPI_BAND) return band_##sfx;                                           \
    if (op == MPI_BOR) return bor_##sfx;                                             \
    if (op == MPI_BXOR) return bxor_##sfx;                                           \
    return NULL;
#define FLOAT_OPS(sfx)                                                               \
    if (op == MPI_SUM) return sum_##sfx;                                             \
    if (op == MPI_PROD) return prod_##sfx;                                           \
    if (op == MPI_MAX) return max_##sfx;                                             \
    if (op == MPI_MIN) return min_##sfx;                                             \
    return NULL;
#define LOC_OPS(sfx, V)                                                              \
    if (extent != (MPI_Aint)sizeof(pair_##sfx)) return NULL;                         \
    if (op == MPI_MAXLOC) return maxloc_##sfx;                                       \
    if (op == MPI_MINLOC) return minloc_##sfx;                                       \
    return NULL;

rl_kernel rl_kernel_for(MPI_Op op, MPI_Datatype type) {
    MPI_Aint lb = 0, extent = 0;
    if (op == MPI_OP_NULL) return NULL;
    int no_logical;
    enum kind k = kind_of(type, &no_logical);
    if (k == K_NONE) return NULL;
    if (no_logical && (op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR)) return NULL;
    PMPI_Type_get_extent(type, &lb, &extent);
    switch (k) {
    case K_I8: INT_OPS(i8)
    case K_U8: INT_OPS(u8)
    case K_I16: INT_OPS(i16)
    case K_U16: INT_OPS(u16)
    case K_I32: INT_OPS(i32)
    case K_U32: INT_OPS(u32)
    case K_I64: INT_OPS(i64)
    case K_U64: INT_OPS(u64)
    case K_F32: FLOAT_OPS(f32)
    case K_F64: FLOAT_OPS(f64)
    case K_F80: FLOAT_OPS(f80)
    case K_C32:
        if (op == MPI_SUM) return sum_c32;
        return op == MPI_PROD ? prod_c32 : NULL;
    case K_C64:
        if (op == MPI_SUM) return sum_c64;
        return op == MPI_PROD ? prod_c64 : NULL;
    case K_C80:
        if (op == MPI_SUM) return sum_c80;
        return op == MPI_PROD ? prod_c80 : NULL;
    case K_BOOL:
        if (op == MPI_LAND) return land_bool;
        if (op == MPI_LOR) return lor_bool;
        if (op == MPI_LXOR) return lxor_bool;
        return NULL;
    case K_BYTE:
        if (op == MPI_BAND) return band_u8;
        if (op == MPI_BOR) return bor_u8;
        if (op == MPI_BXOR) return bxor_u8;
        return NULL;
    case K_FLOAT_INT: LOC_OPS(float_int, float)
    case K_DOUBLE_INT: LOC_OPS(double_int, double)
    case K_LONG_INT: LOC_OPS(long_int, long)
    case K_2INT: LOC_OPS(2int, int)
    case K_SHORT_INT: LOC_OPS(short_int, short)
    case K_LONG_DOUBLE_INT: LOC_OPS(long_double_int, long double)
    default: return NULL;
    }
}
