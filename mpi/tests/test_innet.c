/* REDUCELAB_ALLREDUCE=canary: MPI_Allreduce (under LD_PRELOAD) through a running software switch
 * gives the exact sums: MPI_INT / MPI_UNSIGNED bitwise (wrapping), MPI_FLOAT within the stated
 * bound of the fixed-point path, n·2^(e + ceil(log2 n) − 31) + |exact|·2^−24 where |x| < 2^e for
 * every input (docs/switch.md), in place and not, for counts around the packet size; and an
 * MPI_DOUBLE sum (not a switch type) still right through the MPI library. Each rank generates
 * every rank's inputs, so it checks its result against the exact sum by itself.
 * Prints "test_innet p=P: N checks, F failures" on rank 0; exit status 1 on any failure. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static float fval(int call, int r, int i) {
    uint64_t m = mix((uint64_t)call << 48 ^ (uint64_t)r << 32 ^ (uint64_t)i);
    if (m % 41 == 0) return 0.0f;
    return (float)((double)(m >> 11 & 0xFFFFF) / 1024.0 * ldexp(1.0, (int)(m >> 40 & 15) - 8) * ((m & 1) ? -1.0 : 1.0));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int p, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const int counts[] = {1, 7, 255, 256, 257, 3000, 65536};
    long checks = 0, failures = 0;
    int call = 0;
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
        int n = counts[c];
        int32_t *is = malloc(n * sizeof *is), *ir = malloc(n * sizeof *ir);
        float *fs = malloc(n * sizeof *fs), *fr = malloc(n * sizeof *fr);
        double *ds = malloc(n * sizeof *ds), *dr = malloc(n * sizeof *dr);
        for (int inplace = 0; inplace < 2; inplace++, call++) {
            for (int i = 0; i < n; i++) is[i] = (int32_t)mix((uint64_t)call << 40 ^ (uint64_t)rank << 32 ^ (uint64_t)i);
            if (inplace) {
                memcpy(ir, is, n * sizeof *is);
                MPI_Allreduce(MPI_IN_PLACE, ir, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            } else {
                MPI_Allreduce(is, ir, n, c % 2 ? MPI_UNSIGNED : MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            }
            for (int i = 0; i < n; i++) {
                uint32_t want = 0;
                for (int r = 0; r < p; r++) want += (uint32_t)mix((uint64_t)call << 40 ^ (uint64_t)r << 32 ^ (uint64_t)i);
                checks++;
                if ((uint32_t)ir[i] != want && failures++ < 5)
                    fprintf(stderr, "rank %d: int count %d in place %d element %d: %u, want %u\n", rank, n, inplace, i,
                            (uint32_t)ir[i], want);
            }
            for (int i = 0; i < n; i++) fs[i] = fval(call, rank, i);
            if (inplace) {
                memcpy(fr, fs, n * sizeof *fs);
                MPI_Allreduce(MPI_IN_PLACE, fr, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            } else {
                MPI_Allreduce(fs, fr, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            }
            int e = -1000, k = 0;
            while ((1 << k) < p) k++;
            for (int r = 0; r < p; r++)
                for (int i = 0; i < n; i++) {
                    int ex;
                    float x = fval(call, r, i);
                    if (x != 0.0f) {
                        frexp(x, &ex);
                        if (ex > e) e = ex;
                    }
                }
            for (int i = 0; i < n; i++) {
                double exact = 0;
                for (int r = 0; r < p; r++) exact += fval(call, r, i);
                double tol = e == -1000 ? 0 : p * ldexp(1.0, e + k - 31) + fabs(exact) * ldexp(1.0, -24);
                checks++;
                if (!(fabs((double)fr[i] - exact) <= tol) && failures++ < 5)
                    fprintf(stderr, "rank %d: float count %d in place %d element %d: %.9g, exact %.9g, tolerance %.3g\n",
                            rank, n, inplace, i, fr[i], exact, tol);
            }
        }
        for (int i = 0; i < n; i++) ds[i] = rank + i * 0.5;
        MPI_Allreduce(ds, dr, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < n; i++) {
            checks++;
            if (dr[i] != p * (p - 1) / 2.0 + p * i * 0.5 && failures++ < 5)
                fprintf(stderr, "rank %d: double count %d element %d: %g\n", rank, n, i, dr[i]);
        }
        free(is), free(ir), free(fs), free(fr), free(ds), free(dr);
    }
    long total = 0;
    MPI_Reduce(&failures, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("test_innet p=%d: %ld checks, %ld failures\n", p, checks, total);
    MPI_Finalize();
    return failures ? 1 : 0;
}
