/* OSU-style allreduce benchmark of ReduceLab's algorithms and the MPI library's default.
 *
 *   mpirun -np P build/bench_mpi --sizes 8,1024,... --algorithms mpi,ring,... --reps R [--iters-bytes B]
 *
 * For every size, R rounds; in each round every algorithm runs once (interleaved, so that
 * machine noise hits all of them alike): `warm-up` untimed calls, then `iters` timed calls (iters
 * chosen so a round moves about B bytes, at least 1, at most 1000; warm-up a fifth of iters, at
 * least 1, so 200 before 1000 at small sizes as OSU's osu_allreduce skips 200 calls before its
 * 1000 timed ones; `--warmup N` sets it). The time of a call is the maximum over ranks of the
 * mean per-call time. Rank 0 prints CSV: algorithm,bytes,round,seconds.
 * The data is float sums (MPI_FLOAT, MPI_SUM). Every result is checked against the first
 * algorithm's (exact: integer-valued floats), so a fast wrong algorithm cannot win.
 * `NAME@BYTES` runs NAME with REDUCELAB_SEGMENT=BYTES (message segment size) for comparisons.
 * `--nonblocking 1` times RL_Iallreduce + RL_Wait instead (`mpi`: the library's MPI_Iallreduce).
 * `--decision N` instead times N calls of RL_Auto_uses_library (`auto`'s crossover decision, on
 * counts cycling through 1..4096 floats) and prints "decision_ns,<mean ns per decision>". */
#include <time.h>
#include "reducelab_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int split(char *s, char **out, int max) {
    int n = 0;
    for (char *t = strtok(s, ","); t && n < max; t = strtok(NULL, ",")) out[n++] = t;
    return n;
}

static void allreduce(const float *in, float *out, int n, const char *alg, int nonblocking) {
    if (!nonblocking) {
        RL_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, alg);
        return;
    }
    MPI_Request q;
    if (RL_Iallreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, alg, &q) == MPI_SUCCESS)
        RL_Wait(&q, MPI_STATUS_IGNORE);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    char sizes_s[4096] = "8,1024,65536,1048576", algs_s[4096] = "mpi,ring";
    int reps = 5;
    double round_bytes = 64.0 * 1024 * 1024;
    long decisions = 0;
    int warmup = -1; /* -1: a fifth of the timed calls */
    int nonblocking = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--decision")) decisions = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--sizes")) snprintf(sizes_s, sizeof sizes_s, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--algorithms")) snprintf(algs_s, sizeof algs_s, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--nonblocking")) nonblocking = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--round-bytes")) round_bytes = atof(argv[i + 1]);
        else {
            if (rank == 0) fprintf(stderr, "bench_mpi: unknown option %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (decisions > 0) {
        struct timespec t0, t1;
        long hits = 0;
        RL_Auto_uses_library(MPI_COMM_WORLD, 1, MPI_FLOAT); /* reads the rules */
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long k = 0; k < decisions; k++) hits += RL_Auto_uses_library(MPI_COMM_WORLD, 1 + (int)(k & 4095), MPI_FLOAT);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / (double)decisions;
        if (rank == 0) printf("decision_ns,%.2f,%ld\n", ns, hits);
        MPI_Finalize();
        return 0;
    }
    char *sizes[64], *algs[64], *segs[64];
    int ns = split(sizes_s, sizes, 64), na = split(algs_s, algs, 64);
    for (int a = 0; a < na; a++) {
        char *at = strchr(algs[a], '@');
        segs[a] = at ? at + 1 : NULL;
        if (at) *at = 0;
    }
    if (reps < 1 || ns == 0 || na == 0) {
        if (rank == 0) fprintf(stderr, "bench_mpi: need sizes, algorithms and reps >= 1\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0) printf("algorithm,bytes,round,seconds\n");
    int bad = 0;
    for (int s = 0; s < ns; s++) {
        size_t bytes = strtoull(sizes[s], NULL, 10);
        size_t n = bytes / sizeof(float);
        if (n == 0) n = 1;
        float *in = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float)), *first = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) in[i] = (float)((i * 7 + (size_t)rank * 13) % 64);
        int iters = (int)(round_bytes / (double)(n * sizeof(float)));
        if (iters < 1) iters = 1;
        if (iters > 1000) iters = 1000;
        int warm = warmup >= 0 ? warmup : (iters + 4) / 5;
        if (warm < 1) warm = 1; /* (the first call also gives the result compared below) */
        for (int r = 0; r < reps; r++) {
            for (int a = 0; a < na; a++) {
                if (segs[a]) setenv("REDUCELAB_SEGMENT", segs[a], 1);
                else unsetenv("REDUCELAB_SEGMENT");
                for (int w = 0; w < warm; w++) /* warm-up */
                    allreduce(in, out, (int)n, algs[a], nonblocking);
                if (r == 0) {
                    if (a == 0) memcpy(first, out, n * sizeof(float));
                    else if (memcmp(first, out, n * sizeof(float))) bad = 1;
                }
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                for (int it = 0; it < iters; it++) allreduce(in, out, (int)n, algs[a], nonblocking);
                double t = (MPI_Wtime() - t0) / iters, tmax;
                MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
                if (rank == 0) {
                    if (segs[a]) printf("%s@%s,%zu,%d,%.9g\n", algs[a], segs[a], n * sizeof(float), r, tmax);
                    else printf("%s,%zu,%d,%.9g\n", algs[a], n * sizeof(float), r, tmax);
                }
            }
            if (rank == 0) fflush(stdout);
        }
        free(in), free(out), free(first);
    }
    int anybad = 0; /* (set on rank 0 only: the others return 0) */
    MPI_Reduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0 && anybad) fprintf(stderr, "bench_mpi: results differ between algorithms\n");
    MPI_Finalize();
    return anybad ? 1 : 0;
}
