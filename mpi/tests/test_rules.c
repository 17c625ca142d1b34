/* `auto`'s crossover to the MPI library (REDUCELAB_RULES, docs/mpi.md) through the RL_* API.
 *
 *   test_rules ALGORITHM COUNT...
 *
 * For each COUNT (ints, MPI_SUM): RL_Auto_uses_library's decision, then RL_Allreduce,
 * RL_Iallreduce + RL_Wait and RL_Allreduce_init + RL_Start + RL_Persistent_wait (twice) with
 * ALGORITHM ("-" = NULL: REDUCELAB_ALLREDUCE, default auto), each
 * checked element by element against the closed-form sum, and which counter moved (the call
 * ran a schedule, or went to the library). Rank 0 prints per count
 *   "count C bytes B decision D blocking S/F nonblocking S/F persistent S/F route R shm H ishm I"
 * (S/F: scheduled/fallback counter increments) "route R shm H" (RL_Auto_route; H = 1 when the
 * blocking call ran the shared-memory allreduce, I = 1 when the nonblocking one did), then "crossover p=P: X" (RL_Auto_crossover) and
 * "test_rules p=P: N checks, F failures". */
#include "reducelab_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, p;
    long long checks = 0, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    const char *alg = argc > 1 && strcmp(argv[1], "-") != 0 ? argv[1] : NULL;
    for (int a = 2; a < argc; a++) {
        int n = atoi(argv[a]);
        int *in = malloc((size_t)(n ? n : 1) * sizeof *in), *out = malloc((size_t)(n ? n : 1) * sizeof *out);
        int d = RL_Auto_uses_library(MPI_COMM_WORLD, n, MPI_INT), route = RL_Auto_route(MPI_COMM_WORLD, n, MPI_INT);
        int ran_shm = 0, ran_ishm = 0;
        long long s[4], f[4], snb = 0, fnb = 0; /* (before the nonblocking call, after the name's reset) */
        RL_Counters(&s[0], &f[0]);
        RL_Persistent plan = NULL;
        int prc = RL_Allreduce_init(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, alg, &plan);
        for (int kind = 0; kind < 4; kind++) { /* 2, 3: two starts of the persistent plan */
            for (int i = 0; i < n; i++) in[i] = (rank + 1) * (i % 101) + kind;
            memset(out, 0xff, (size_t)n * sizeof *out);
            int rc;
            if (kind == 0) {
                RL_Allreduce(NULL, NULL, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD, "ring"); /* resets the last name */
                RL_Counters(&s[0], &f[0]);
                rc = RL_Allreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, alg);
                ran_shm = strcmp(RL_Last_algorithm(), "shm") == 0;
            } else if (kind >= 2) {
                rc = prc;
                if (rc == MPI_SUCCESS) rc = RL_Start(plan);
                if (rc == MPI_SUCCESS) rc = RL_Persistent_wait(plan);
            } else {
                MPI_Request q;
                RL_Allreduce(NULL, NULL, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD, "ring"); /* resets the last name */
                RL_Counters(&snb, &fnb);
                rc = RL_Iallreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, alg, &q);
                ran_ishm = strcmp(RL_Last_algorithm(), "shm") == 0;
                if (rc == MPI_SUCCESS) rc = RL_Wait(&q, MPI_STATUS_IGNORE);
            }
            int bad = rc != MPI_SUCCESS;
            for (int i = 0; i < n && !bad; i++) bad = out[i] != (i % 101) * p * (p + 1) / 2 + kind * p;
            checks++;
            if (bad) {
                failures++;
                fprintf(stderr, "[rank %d] FAIL: %s n=%d rc=%d\n", rank, kind ? "RL_Iallreduce" : "RL_Allreduce", n, rc);
            }
            if (kind < 3) RL_Counters(&s[kind + 1], &f[kind + 1]);
        }
        if (plan) RL_Persistent_free(&plan);
        if (rank == 0)
            printf("count %d bytes %zu decision %d blocking %lld/%lld nonblocking %lld/%lld persistent %lld/%lld "
                   "route %d shm %d ishm %d\n",
                   n, n * sizeof(int), d, s[1] - s[0], f[1] - f[0], s[2] - snb, f[2] - fnb, s[3] - s[2], f[3] - f[2],
                   route, ran_shm, ran_ishm);
        free(in), free(out);
    }
    long long tot[2] = {checks, failures}, all[2];
    MPI_Reduce(tot, all, 2, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("crossover p=%d: %lld\n", p, RL_Auto_crossover(p));
        printf("test_rules p=%d: %lld checks, %lld failures\n", p, all[0], all[1]);
    }
    MPI_Finalize();
    return failures != 0;
}
