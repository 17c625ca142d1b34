/* MPI_THREAD_MULTIPLE under LD_PRELOAD=libreducelab_pmpi.so: two threads per rank, each on
 * its own communicator, call MPI_Allreduce (200 times, vectors of 1..4000 ints) and
 * MPI_Iallreduce + MPI_Wait (50 times) at once. ReduceLab hands every call to the MPI library
 * at this level (docs/mpi.md): the results must be exact, nothing may crash, and the
 * library's counters (dlsym) must show 0 scheduled and every call fallen through.
 * Prints "test_threads p=P: C checks, F failures" on rank 0 ("skipped" if the MPI library
 * does not provide MPI_THREAD_MULTIPLE). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int rank, p;
static long long checks[2], failures[2];

typedef struct {
    int id;
    MPI_Comm comm;
} targ;

static void *worker(void *arg) {
    targ *t = arg;
    int *in = malloc(4000 * sizeof *in), *out = malloc(4000 * sizeof *out);
    for (int it = 0; it < 250; it++) {
        int n = 1 + (it * 997 + t->id * 31) % 4000;
        for (int i = 0; i < n; i++) in[i] = i * (t->id + 1) + rank + it;
        int rc;
        if (it < 200) {
            rc = MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, t->comm);
        } else {
            MPI_Request q;
            rc = MPI_Iallreduce(in, out, n, MPI_INT, MPI_SUM, t->comm, &q);
            if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
        }
        int bad = rc != MPI_SUCCESS;
        for (int i = 0; i < n && !bad; i++) bad = out[i] != p * (i * (t->id + 1) + it) + p * (p - 1) / 2;
        checks[t->id]++;
        if (bad) {
            failures[t->id]++;
            fprintf(stderr, "[rank %d thread %d] FAIL: iteration %d n=%d rc=%d\n", rank, t->id, it, n, rc);
        }
    }
    free(in), free(out);
    return NULL;
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0) printf("test_threads p=%d: skipped (provided %d)\n", p, provided);
        MPI_Finalize();
        return 0;
    }
    void (*counters)(long long *, long long *) = (void (*)(long long *, long long *))dlsym(RTLD_DEFAULT, "RL_Counters");
    long long s0 = 0, f0 = 0, s1 = 0, f1 = 0;
    if (counters) counters(&s0, &f0);
    targ a[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        a[i].id = i;
        MPI_Comm_dup(MPI_COMM_WORLD, &a[i].comm);
    }
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, worker, &a[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    long long c = checks[0] + checks[1], f = failures[0] + failures[1];
    if (counters) {
        counters(&s1, &f1);
        c++;
        if (s1 != s0 || f1 - f0 != 500) {
            f++;
            fprintf(stderr, "[rank %d] FAIL: %lld scheduled, %lld fell through (want 0 and 500)\n", rank, s1 - s0, f1 - f0);
        }
    } else {
        c++, f++;
        fprintf(stderr, "[rank %d] FAIL: interposition library not loaded\n", rank);
    }
    long long tot[2] = {c, f}, all[2];
    MPI_Reduce(tot, all, 2, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("test_threads p=%d: %lld checks, %lld failures\n", p, all[0], all[1]);
    for (int i = 0; i < 2; i++) MPI_Comm_free(&a[i].comm);
    MPI_Finalize();
    return f != 0;
}
