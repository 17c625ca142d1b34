/* The shared-memory allreduce (mpi/src/shm.c, docs/mpi.md) through the RL_* API.
 *
 *   mpirun -np P build/test_shm CASE      (CASE: chunks, holes, threads, comms, mismatch, progress, libprogress,
 *                                          nonblocking [ALGORITHM], sizes, nbfallback)
 *
 * Run with a small REDUCELAB_SHM_BYTES (e.g. 8192: 4 KiB slots) so vectors span many chunks.
 *   chunks   (op, type) samples × counts around the chunk size (1, p−1, p+1, a chunk ± 1, several
 *            chunks and an odd remainder), alternately in place, bitwise against MPI_Allreduce,
 *            nothing written past the end, every call counted as a ReduceLab call named "shm";
 *            then RL_Iallreduce named shm completes exactly (as the shared-memory allreduce too)
 *   holes    a resized vector type (two uint32 at 0 and 8 of a 16-byte extent) with a commutative
 *            and a non-commutative user op (affine maps), results against a rank-order fold of
 *            the gathered inputs, gap bytes hold their sentinel, in place too
 *   threads  MPI_THREAD_MULTIPLE: two threads on two communicators, 150 allreduces each (named
 *            shm, or argv[2], e.g. auto under rules that route every size to shm)
 *   comms    60 communicators (duplicates and halves) made, used and freed: RL_Shm_segments()
 *            counts them and returns to its starting value
 *   mismatch rank 0 passes 16383 ints, the others 16385 (also 5 vs 7, and 1000 vs 1100, on either
 *            side of the one-barrier path's limit): MPI_ERR_TRUNCATE on every rank, then a
 *            consistent call is exact
 *   progress even ranks enter a shared-memory allreduce on B while their RL_Iallreduce on A is
 *            active; odd ranks wait for A first: the even ranks must progress A while they wait
 *            in B (a SIGALRM turns a hang into a failure)
 *   libprogress rank 0 sends rank 1 a 4 MiB message (above every shared-memory eager limit, so
 *            the MPI library completes it only when the receiver's library progresses) and waits
 *            for the send to complete (MPI_Test loop) before its shared-memory allreduce; rank 1
 *            posts the receive and enters the allreduce at once: only the barrier's MPI_Iprobe
 *            progresses rank 1's library, so without it rank 0 never arrives (SIGALRM)
 *   nonblocking (argv[2]: the algorithm, default shm; e.g. auto under rules that route every size
 *            to shm) 3 rounds on fresh communicators: two RL_Iallreduce (1 int; 5 chunks + 3, in
 *            place), a blocking RL_Allreduce, a persistent plan's start and a third RL_Iallreduce
 *            all in flight on one communicator, completed in reverse order; two fresh
 *            communicators started in opposite orders by even and odd ranks (their segments are
 *            made from progress); a communicator freed before its RL_Iallreduce is waited for;
 *            results exact, every call counted as ReduceLab's and the nonblocking ones named
 *            shm; RL_Shm_segments back to its start after the frees
 *   sizes    a fresh communicator's segment grows with the vectors (k sets: REDUCELAB_SHM_SETS):
 *            header + kp 4 KiB slots after 1 int, kp 64 KiB slots after 16 Ki ints, at most
 *            REDUCELAB_SHM_BYTES (default 4 MiB) of slots after 4 Mi ints, not smaller after 1 int
 *            again; results exact; RL_Shm_bytes back to its start after the free
 *   nbfallback the segment cannot be made (this program's shm_open fails while the case runs):
 *            the first RL_Iallreduce named shm on a fresh communicator runs the MPI library's
 *            allreduce on the private duplicate, then a blocking and a nonblocking call take
 *            auto's path; all exact, no segment mapped
 * Rank 0 prints "test_shm CASE p=P: N checks, F failures". */
#define _GNU_SOURCE
#include "reducelab_mpi.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>

static int rank, P;
static long long checks, failures;
static pthread_mutex_t fmu = PTHREAD_MUTEX_INITIALIZER;

#define FAIL(...)                                                                                                  \
    do {                                                                                                           \
        pthread_mutex_lock(&fmu);                                                                                  \
        if (failures++ < 30) {                                                                                     \
            fprintf(stderr, "[rank %d] FAIL: ", rank);                                                            \
            fprintf(stderr, __VA_ARGS__);                                                                          \
            fprintf(stderr, "\n");                                                                                 \
        }                                                                                                          \
        pthread_mutex_unlock(&fmu);                                                                                \
    } while (0)
#define CHECK() (pthread_mutex_lock(&fmu), checks++, pthread_mutex_unlock(&fmu))

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* ---- chunks ---- */
typedef struct {
    const char *name;
    MPI_Datatype type;
    MPI_Op op;
    size_t extent;
    int kind; /* 0 random bytes, 1 exact double, 2 exact float, 3 double_int pairs, 4 bool */
} sample;

static void fill(const sample *s, char *buf, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        uint64_t r = mix(seed * 7919u + (uint64_t)rank * 104729u + i);
        char *e = buf + i * s->extent;
        if (s->kind == 0) memcpy(e, &r, s->extent);
        else if (s->kind == 1) { double d = (double)(r % 1000); memcpy(e, &d, 8); }
        else if (s->kind == 2) { float f = (r & 1) ? 2.0f : 0.5f; memcpy(e, &f, 4); }
        else if (s->kind == 3) { struct { double v; int i; } x; memset(&x, 0, sizeof x); x.v = (double)(r % 7); x.i = (int)(r >> 40) % 1000; memcpy(e, &x, sizeof x); }
        else { unsigned char b = r & 1; memcpy(e, &b, 1); }
    }
}

static int same(const sample *s, const char *a, const char *b) {
    if (s->kind == 3) return memcmp(a, b, 8) == 0 && memcmp(a + 8, b + 8, 4) == 0; /* padding is not data */
    return memcmp(a, b, s->extent) == 0;
}

static void case_chunks(void) {
    MPI_Comm comm = MPI_COMM_WORLD;
    sample ss[] = {
        {"int sum", MPI_INT, MPI_SUM, 4, 0},           {"double sum", MPI_DOUBLE, MPI_SUM, 8, 1},
        {"int8 max", MPI_INT8_T, MPI_MAX, 1, 0},       {"uint64 bxor", MPI_UINT64_T, MPI_BXOR, 8, 0},
        {"float prod", MPI_FLOAT, MPI_PROD, 4, 2},     {"short land", MPI_SHORT, MPI_LAND, 2, 0},
        {"double_int maxloc", MPI_DOUBLE_INT, MPI_MAXLOC, 16, 3}, {"bool lor", MPI_C_BOOL, MPI_LOR, 1, 4},
        {"char min", MPI_CHAR, MPI_MIN, 1, 0},
    };
    long long s0, f0, s1, f1;
    RL_Counters(&s0, &f0);
    long long calls = 0;
    for (size_t t = 0; t < sizeof ss / sizeof *ss; t++) {
        const sample *s = &ss[t];
        size_t chunk = 4096 / s->extent; /* REDUCELAB_SHM_BYTES=8192: 4 KiB slots */
        size_t counts[] = {1, (size_t)P - 1 ? (size_t)P - 1 : 2, (size_t)P + 1, chunk - 1, chunk, chunk + 1,
                           3 * chunk + 7, 7 * chunk + (size_t)P};
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
            size_t n = counts[c];
            int inplace = (int)((t + c) & 1);
            char *in = calloc(n, s->extent), *ref = calloc(n, s->extent), *out = malloc((n + 3) * s->extent);
            fill(s, in, n, 100 * t + c);
            MPI_Allreduce(in, ref, (int)n, s->type, s->op, comm);
            memset(out, 0xAB, (n + 3) * s->extent);
            if (inplace) memcpy(out, in, n * s->extent);
            int rc = RL_Allreduce(inplace ? MPI_IN_PLACE : in, out, (int)n, s->type, s->op, comm, "shm");
            calls++;
            CHECK();
            if (rc != MPI_SUCCESS) FAIL("%s n=%zu inplace=%d: rc %d", s->name, n, inplace, rc);
            else if (strcmp(RL_Last_algorithm(), "shm") != 0) FAIL("%s n=%zu: ran %s", s->name, n, RL_Last_algorithm());
            for (size_t i = 0; i < n && rc == MPI_SUCCESS; i++)
                if (!same(s, out + i * s->extent, ref + i * s->extent)) {
                    FAIL("%s n=%zu inplace=%d p=%d: element %zu differs", s->name, n, inplace, P, i);
                    break;
                }
            for (size_t i = n * s->extent; i < (n + 3) * s->extent; i++)
                if ((unsigned char)out[i] != 0xAB) {
                    FAIL("%s n=%zu: wrote past the end", s->name, n);
                    break;
                }
            free(in), free(ref), free(out);
        }
    }
    RL_Counters(&s1, &f1);
    CHECK();
    if (s1 - s0 != calls || f1 != f0) FAIL("counters moved %lld/%lld, want %lld/0", s1 - s0, f1 - f0, calls);
    /* nonblocking with the name: the shared-memory allreduce too, exact */
    int n = 3000, *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (int i = 0; i < n; i++) x[i] = i + rank;
    MPI_Request q;
    int rc = RL_Iallreduce(x, y, n, MPI_INT, MPI_SUM, comm, "shm", &q);
    if (rc == MPI_SUCCESS) rc = RL_Wait(&q, MPI_STATUS_IGNORE);
    CHECK();
    int bad = rc != MPI_SUCCESS;
    for (int i = 0; i < n && !bad; i++) bad = y[i] != P * i + P * (P - 1) / 2;
    if (bad || strcmp(RL_Last_algorithm(), "shm") != 0) FAIL("RL_Iallreduce named shm: rc %d, ran %s", rc, RL_Last_algorithm());
    free(x), free(y);
}

/* ---- holes: element = uint32 a at 0, uint32 b at 8, extent 16 (gaps 4..7 and 12..15) ---- */
#define SENT 0x5Au
static void user_sum(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    for (int i = 0; i < *len; i++)
        for (int k = 0; k < 3; k += 2) ((uint32_t *)inout)[4 * i + k] += ((uint32_t *)in)[4 * i + k];
}
/* (a, b) is x -> a·x + b; in ⊕ inout = inout ∘ in (apply the lower ranks' map first) */
static void user_affine(void *in_, void *inout_, int *len, MPI_Datatype *t) {
    (void)t;
    uint32_t *in = in_, *io = inout_;
    for (int i = 0; i < *len; i++) {
        uint32_t a1 = in[4 * i], b1 = in[4 * i + 2], a2 = io[4 * i], b2 = io[4 * i + 2];
        io[4 * i] = a2 * a1;
        io[4 * i + 2] = a2 * b1 + b2;
    }
}

static void case_holes(void) {
    MPI_Comm comm = MPI_COMM_WORLD;
    MPI_Datatype vec, el;
    MPI_Type_vector(2, 1, 2, MPI_UINT32_T, &vec);
    MPI_Type_create_resized(vec, 0, 16, &el);
    MPI_Type_commit(&el);
    MPI_Op ops[2];
    MPI_Op_create(user_sum, 1, &ops[0]);
    MPI_Op_create(user_affine, 0, &ops[1]);
    size_t counts[] = {1, (size_t)P + 1, 255, 256, 257, 1000 + (size_t)P};
    for (int o = 0; o < 2; o++)
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
            for (int inplace = 0; inplace < 2; inplace++) {
                size_t n = counts[c];
                uint32_t *in = malloc(n * 16), *out = malloc(n * 16), *all = malloc(n * 8 * (size_t)P);
                memset(in, SENT, n * 16);
                memset(out, SENT, n * 16);
                for (size_t i = 0; i < n; i++) {
                    uint64_t r = mix(1000 * (uint64_t)c + 10 * (uint64_t)o + i + 77777u * (uint64_t)rank);
                    in[4 * i] = (uint32_t)r | 1u;
                    in[4 * i + 2] = (uint32_t)(r >> 32);
                }
                uint32_t *packed = malloc(n * 8);
                for (size_t i = 0; i < n; i++) packed[2 * i] = in[4 * i], packed[2 * i + 1] = in[4 * i + 2];
                MPI_Allgather(packed, (int)(2 * n), MPI_UINT32_T, all, (int)(2 * n), MPI_UINT32_T, comm);
                if (inplace)
                    for (size_t i = 0; i < n; i++) out[4 * i] = in[4 * i], out[4 * i + 2] = in[4 * i + 2];
                int rc = RL_Allreduce(inplace ? MPI_IN_PLACE : in, out, (int)n, el, ops[o], comm, "shm");
                CHECK();
                if (rc != MPI_SUCCESS || strcmp(RL_Last_algorithm(), "shm") != 0) {
                    FAIL("holes op %d n=%zu inplace=%d: rc %d, ran %s", o, n, inplace, rc, RL_Last_algorithm());
                    goto next;
                }
                for (size_t i = 0; i < n; i++) {
                    /* rank-order fold: x0 ⊕ x1 ⊕ … ⊕ x_{p-1} */
                    uint32_t a = all[2 * i], b = all[2 * i + 1];
                    for (int r = 1; r < P; r++) {
                        uint32_t a2 = all[(size_t)r * 2 * n + 2 * i], b2 = all[(size_t)r * 2 * n + 2 * i + 1];
                        if (o == 0) a += a2, b += b2;
                        else b = a2 * b + b2, a = a2 * a;
                    }
                    if (out[4 * i] != a || out[4 * i + 2] != b) {
                        FAIL("holes op %d n=%zu inplace=%d p=%d: element %zu differs", o, n, inplace, P, i);
                        break;
                    }
                }
                for (size_t i = 0; i < n; i++) {
                    const unsigned char *e = (const unsigned char *)(out + 4 * i);
                    int gap_ok = 1;
                    for (int k = 4; k < 8; k++) gap_ok &= e[k] == SENT;
                    for (int k = 12; k < 16; k++) gap_ok &= e[k] == SENT;
                    if (!gap_ok) {
                        FAIL("holes op %d n=%zu inplace=%d: gap of element %zu written", o, n, inplace, i);
                        break;
                    }
                }
            next:
                free(in), free(out), free(all), free(packed);
            }
    MPI_Op_free(&ops[0]);
    MPI_Op_free(&ops[1]);
    MPI_Type_free(&el);
    MPI_Type_free(&vec);
}

/* ---- threads ---- */
static const char *thread_alg = "shm"; /* argv[2]: e.g. auto, under rules that route to shm */
typedef struct {
    int id;
    MPI_Comm comm;
} targ;

static void *worker(void *arg) {
    targ *t = arg;
    int *in = malloc(5000 * sizeof *in), *out = malloc(5000 * sizeof *out);
    for (int it = 0; it < 150; it++) {
        int n = 1 + (it * 997 + t->id * 31) % 5000;
        for (int i = 0; i < n; i++) in[i] = i * (t->id + 1) + rank + it;
        int rc = RL_Allreduce(in, out, n, MPI_INT, MPI_SUM, t->comm, thread_alg);
        int bad = rc != MPI_SUCCESS;
        for (int i = 0; i < n && !bad; i++) bad = out[i] != P * (i * (t->id + 1) + it) + P * (P - 1) / 2;
        CHECK();
        if (bad) FAIL("thread %d iteration %d n=%d rc=%d", t->id, it, n, rc);
    }
    free(in), free(out);
    return NULL;
}

static void case_threads(void) {
    long long s0, f0, s1, f1;
    RL_Counters(&s0, &f0);
    targ a[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        a[i].id = i;
        MPI_Comm_dup(MPI_COMM_WORLD, &a[i].comm);
    }
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, worker, &a[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    RL_Counters(&s1, &f1);
    CHECK();
    if (s1 - s0 != 300 || f1 != f0) FAIL("counters moved %lld/%lld, want 300/0", s1 - s0, f1 - f0);
    CHECK();
    if (RL_Shm_segments() != 2) FAIL("%d segments with two communicators", RL_Shm_segments());
    for (int i = 0; i < 2; i++) MPI_Comm_free(&a[i].comm);
    CHECK();
    if (RL_Shm_segments() != 0) FAIL("%d segments after freeing both communicators", RL_Shm_segments());
}

/* ---- comms ---- */
static void case_comms(void) {
    int base = RL_Shm_segments();
    for (int k = 0; k < 60; k++) {
        MPI_Comm c;
        if (k % 2) MPI_Comm_split(MPI_COMM_WORLD, rank % 2, P - rank, &c); /* halves, ranks reversed */
        else MPI_Comm_dup(MPI_COMM_WORLD, &c);
        int cp, cr;
        MPI_Comm_size(c, &cp);
        MPI_Comm_rank(c, &cr);
        int n = 1 + k * 37, *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        for (int i = 0; i < n; i++) x[i] = (cr + 1) * (i + k);
        int rc = RL_Allreduce(x, y, n, MPI_INT, MPI_SUM, c, "shm");
        int bad = rc != MPI_SUCCESS;
        for (int i = 0; i < n && !bad; i++) bad = y[i] != (i + k) * cp * (cp + 1) / 2;
        CHECK();
        if (bad) FAIL("communicator %d (size %d) n=%d rc=%d", k, cp, n, rc);
        CHECK();
        if (RL_Shm_segments() != base + 1) FAIL("communicator %d: %d segments, want %d", k, RL_Shm_segments(), base + 1);
        MPI_Comm_free(&c);
        free(x), free(y);
    }
    CHECK();
    if (RL_Shm_segments() != base) FAIL("%d segments after freeing 60 communicators, want %d", RL_Shm_segments(), base);
}

/* ---- mismatch ---- */
static void case_mismatch(void) {
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    int n = rank == 0 ? 16383 : 16385, *x = calloc(16385, sizeof *x), *y = calloc(16385, sizeof *y);
    for (int round = 0; round < 5; round++) {
        /* rounds 3, 4: both counts on the one-barrier path (small), then one on each path */
        int nr = round < 3 ? n : round == 3 ? (rank == 0 ? 5 : 7) : (rank == 0 ? 1000 : 1100);
        int rc = RL_Allreduce(x, y, nr, MPI_INT, MPI_SUM, c, "shm"), cls = -1;
        if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
        CHECK();
        if (cls != MPI_ERR_TRUNCATE) FAIL("mismatched counts round %d: rc %d class %d, want MPI_ERR_TRUNCATE", round, rc, cls);
    }
    for (int i = 0; i < 16385; i++) x[i] = i ^ rank;
    int rc = RL_Allreduce(x, y, 16385, MPI_INT, MPI_SUM, c, "shm");
    int bad = rc != MPI_SUCCESS;
    for (int i = 0; i < 16385 && !bad; i++) {
        int want = 0;
        for (int r = 0; r < P; r++) want += i ^ r;
        bad = y[i] != want;
    }
    CHECK();
    if (bad) FAIL("consistent call after the mismatch: rc %d", rc);
    MPI_Comm_free(&c);
    free(x), free(y);
}

/* ---- progress ---- */
static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "test_shm progress: timed out (a rank waiting in the shared-memory barrier did not "
                            "progress the active nonblocking allreduce)\n";
    (void)!write(2, m, sizeof m - 1);
    _exit(3);
}

static void case_progress(void) {
    signal(SIGALRM, on_alarm);
    alarm(30);
    MPI_Comm a, b;
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_dup(MPI_COMM_WORLD, &b);
    int n = 200000, *x = malloc(n * sizeof *x), *ya = malloc(n * sizeof *ya), *yb = malloc(n * sizeof *yb);
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < n; i++) x[i] = i % 1000 + rank + round;
        MPI_Request q;
        int rc = RL_Iallreduce(x, ya, n, MPI_INT, MPI_SUM, a, "ring", &q), rb = MPI_SUCCESS;
        if (rank % 2 == 0) {
            rb = RL_Allreduce(x, yb, n, MPI_INT, MPI_SUM, b, "shm");
            if (rc == MPI_SUCCESS) rc = RL_Wait(&q, MPI_STATUS_IGNORE);
        } else {
            if (rc == MPI_SUCCESS) rc = RL_Wait(&q, MPI_STATUS_IGNORE);
            rb = RL_Allreduce(x, yb, n, MPI_INT, MPI_SUM, b, "shm");
        }
        int bad = rc != MPI_SUCCESS || rb != MPI_SUCCESS;
        for (int i = 0; i < n && !bad; i++) {
            int want = P * (i % 1000 + round) + P * (P - 1) / 2;
            bad = ya[i] != want || yb[i] != want;
        }
        CHECK();
        if (bad) FAIL("progress round %d: rc %d/%d", round, rc, rb);
    }
    alarm(0);
    MPI_Comm_free(&a);
    MPI_Comm_free(&b);
    free(x), free(ya), free(yb);
}

/* ---- nonblocking ---- */
static const char *nb_alg = "shm";
static int *nb_buf(int n, int round, int salt) {
    int *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
    for (int i = 0; i < n; i++) x[i] = 3 * i + salt + round + rank;
    return x;
}
static void nb_check(const char *what, const int *y, int n, int round, int salt, int rc) {
    int bad = rc != MPI_SUCCESS;
    for (int i = 0; i < n && !bad; i++) bad = y[i] != P * (3 * i + salt + round) + P * (P - 1) / 2;
    CHECK();
    if (bad) FAIL("nonblocking %s round %d (n=%d): rc %d%s", what, round, n, rc, rc == MPI_SUCCESS ? ", wrong data" : "");
}
static void nb_named(const char *what) {
    CHECK();
    if (strcmp(RL_Last_algorithm(), "shm") != 0) FAIL("nonblocking %s: ran %s, not shm", what, RL_Last_algorithm());
}

static void case_nonblocking(void) {
    const int chunk = 4096 / (int)sizeof(int); /* REDUCELAB_SHM_BYTES=8192: 4 KiB slots */
    long long s0, f0, s1, f1, calls = 0;
    int seg0 = RL_Shm_segments();
    RL_Counters(&s0, &f0);
    for (int round = 0; round < 3; round++) {
        MPI_Comm a, c, d, e;
        MPI_Comm_dup(MPI_COMM_WORLD, &a);
        /* several operations in flight on one communicator, a blocking one among them */
        int n1 = 1, n2 = 5 * chunk + 3, n3 = chunk + 1, n4 = 3 * chunk + 7, n5 = 2 * P + 1;
        int *x1 = nb_buf(n1, round, 1), *y1 = malloc(sizeof *y1), *y2 = nb_buf(n2, round, 2),
            *x3 = nb_buf(n3, round, 3), *y3 = malloc((size_t)n3 * sizeof *y3), *x4 = nb_buf(n4, round, 4),
            *y4 = malloc((size_t)n4 * sizeof *y4), *x5 = nb_buf(n5, round, 5), *y5 = malloc((size_t)n5 * sizeof *y5);
        RL_Persistent plan;
        int rp = RL_Allreduce_init(x4, y4, n4, MPI_INT, MPI_SUM, a, nb_alg, &plan);
        MPI_Request q1, q2, q5;
        int r1 = RL_Iallreduce(x1, y1, n1, MPI_INT, MPI_SUM, a, nb_alg, &q1);
        nb_named("first");
        int r2 = RL_Iallreduce(MPI_IN_PLACE, y2, n2, MPI_INT, MPI_SUM, a, nb_alg, &q2);
        int r3 = RL_Allreduce(x3, y3, n3, MPI_INT, MPI_SUM, a, nb_alg);
        if (rp == MPI_SUCCESS) rp = RL_Start(plan);
        int r5 = RL_Iallreduce(x5, y5, n5, MPI_INT, MPI_SUM, a, nb_alg, &q5);
        calls += 5;
        if (r5 == MPI_SUCCESS) r5 = RL_Wait(&q5, MPI_STATUS_IGNORE);
        if (rp == MPI_SUCCESS) rp = RL_Persistent_wait(plan);
        if (r2 == MPI_SUCCESS) r2 = RL_Wait(&q2, MPI_STATUS_IGNORE);
        if (r1 == MPI_SUCCESS) r1 = RL_Wait(&q1, MPI_STATUS_IGNORE);
        nb_check("first", y1, n1, round, 1, r1);
        nb_check("in place", y2, n2, round, 2, r2);
        nb_check("blocking among them", y3, n3, round, 3, r3);
        nb_check("persistent", y4, n4, round, 4, rp);
        nb_check("last", y5, n5, round, 5, r5);
        /* the plan again, with new data */
        for (int i = 0; i < n4; i++) x4[i] += 1;
        if (rp == MPI_SUCCESS) rp = RL_Start(plan);
        if (rp == MPI_SUCCESS) rp = RL_Persistent_wait(plan);
        calls++;
        nb_check("persistent restart", y4, n4, round + 1, 4, rp);
        RL_Persistent_free(&plan);
        /* fresh communicators started in opposite orders: the segments are made from progress */
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        MPI_Comm_dup(MPI_COMM_WORLD, &d);
        MPI_Request qc, qd;
        int rc_ = MPI_SUCCESS, rd = MPI_SUCCESS;
        int *xc = nb_buf(n2, round, 6), *yc = malloc((size_t)n2 * sizeof *yc), *xd = nb_buf(n3, round, 7),
            *yd = malloc((size_t)n3 * sizeof *yd);
        if (rank % 2 == 0) {
            rc_ = RL_Iallreduce(xc, yc, n2, MPI_INT, MPI_SUM, c, nb_alg, &qc);
            rd = RL_Iallreduce(xd, yd, n3, MPI_INT, MPI_SUM, d, nb_alg, &qd);
        } else {
            rd = RL_Iallreduce(xd, yd, n3, MPI_INT, MPI_SUM, d, nb_alg, &qd);
            rc_ = RL_Iallreduce(xc, yc, n2, MPI_INT, MPI_SUM, c, nb_alg, &qc);
        }
        calls += 2;
        if (rc_ == MPI_SUCCESS) rc_ = RL_Wait(&qc, MPI_STATUS_IGNORE);
        if (rd == MPI_SUCCESS) rd = RL_Wait(&qd, MPI_STATUS_IGNORE);
        nb_check("cross-order c", yc, n2, round, 6, rc_);
        nb_check("cross-order d", yd, n3, round, 7, rd);
        /* a communicator freed while its operation runs */
        MPI_Comm_dup(MPI_COMM_WORLD, &e);
        MPI_Request qe;
        int re = RL_Iallreduce(xc, yc, n2, MPI_INT, MPI_SUM, e, nb_alg, &qe);
        calls++;
        MPI_Comm_free(&e);
        if (re == MPI_SUCCESS) re = RL_Wait(&qe, MPI_STATUS_IGNORE);
        nb_check("freed communicator", yc, n2, round, 6, re);
        MPI_Comm_free(&a);
        MPI_Comm_free(&c);
        MPI_Comm_free(&d);
        free(x1), free(y1), free(y2), free(x3), free(y3), free(x4), free(y4), free(x5), free(y5);
        free(xc), free(yc), free(xd), free(yd);
    }
    RL_Counters(&s1, &f1);
    CHECK();
    if (s1 - s0 != calls || f1 != f0) FAIL("counters moved %lld/%lld, want %lld/0", s1 - s0, f1 - f0, calls);
    CHECK();
    if (RL_Shm_segments() != seg0) FAIL("%d segments mapped after the frees, want %d", RL_Shm_segments(), seg0);
}

/* ---- sizes ---- */
static void case_sizes(void) {
    long long b0 = RL_Shm_bytes();
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    const char *e = getenv("REDUCELAB_SHM_BYTES");
    const char *k = getenv("REDUCELAB_SHM_SETS");
    long long sets = k && *k ? atoll(k) : 4; /* (shm.c's default) */
    long long budget = e && *e ? atoll(e) : 4LL << 20, header = 64LL * (2 + sets + P * ((16 + 8 * sets + 63) / 64));
    long long slot_max = budget / (sets * P) / 4096 * 4096;
    if (slot_max < 4096) slot_max = 4096;
    int counts[] = {1, 16384, 1000, 1 << 20, 1};
    long long want[] = {4096, 65536, 65536, slot_max, slot_max};
    int *x = malloc((1 << 20) * sizeof *x), *y = malloc((1 << 20) * sizeof *y);
    for (int k = 0; k < 5; k++) {
        int n = counts[k];
        for (int i = 0; i < n; i++) x[i] = i % 977 + rank + k;
        int rc = RL_Allreduce(x, y, n, MPI_INT, MPI_SUM, c, "shm"), bad = rc != MPI_SUCCESS;
        for (int i = 0; i < n && !bad; i++) bad = y[i] != P * (i % 977 + k) + P * (P - 1) / 2;
        long long slots = want[k] < slot_max ? want[k] : slot_max;
        long long expect = (header + sets * P * slots + 4095) / 4096 * 4096, got = RL_Shm_bytes() - b0;
        CHECK();
        if (bad || got != expect) FAIL("sizes: after %d ints: rc %d, bad %d, %lld bytes mapped, want %lld", n, rc, bad, got, expect);
    }
    MPI_Comm_free(&c);
    CHECK();
    if (RL_Shm_bytes() != b0) FAIL("sizes: %lld bytes mapped after the free, want %lld", RL_Shm_bytes(), b0);
    free(x), free(y);
}

/* ---- nbfallback: shm_open fails (this definition takes precedence over libc's for the
 * runtime's calls) ---- */
static int fail_shm_open;
int shm_open(const char *name, int oflag, mode_t mode) {
    if (fail_shm_open) {
        errno = EACCES;
        return -1;
    }
    int (*real)(const char *, int, mode_t) = (int (*)(const char *, int, mode_t))dlsym(RTLD_NEXT, "shm_open");
    return real ? real(name, oflag, mode) : -1;
}

static void case_nbfallback(void) {
    int seg0 = RL_Shm_segments();
    fail_shm_open = 1;
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    const int n = 3000;
    int *x = nb_buf(n, 0, 1), *y = malloc(n * sizeof *y);
    MPI_Request q;
    int rc = RL_Iallreduce(x, y, n, MPI_INT, MPI_SUM, c, "shm", &q); /* the set-up fails in its progress */
    if (rc == MPI_SUCCESS) rc = RL_Wait(&q, MPI_STATUS_IGNORE);
    nb_check("fallback: first (library on the duplicate)", y, n, 0, 1, rc);
    rc = RL_Allreduce(x, y, n, MPI_INT, MPI_SUM, c, "shm"); /* declined: auto's path */
    nb_check("fallback: blocking", y, n, 0, 1, rc);
    CHECK();
    if (strcmp(RL_Last_algorithm(), "shm") == 0) FAIL("fallback: the blocking call ran shm without a segment");
    rc = RL_Iallreduce(x, y, n, MPI_INT, MPI_SUM, c, "shm", &q); /* declined at the call: auto's path */
    if (rc == MPI_SUCCESS) rc = RL_Wait(&q, MPI_STATUS_IGNORE);
    nb_check("fallback: nonblocking again", y, n, 0, 1, rc);
    CHECK();
    if (RL_Shm_segments() != seg0) FAIL("fallback: %d segments mapped, want %d", RL_Shm_segments(), seg0);
    MPI_Comm_free(&c);
    fail_shm_open = 0;
    free(x), free(y);
}

/* ---- libprogress ---- */
static void on_alarm_lib(int sig) {
    (void)sig;
    static const char m[] = "test_shm libprogress: timed out (a rank waiting in the shared-memory barrier did not "
                            "progress the MPI library, so its peer's send never completed)\n";
    (void)!write(2, m, sizeof m - 1);
    _exit(3);
}

static void case_libprogress(void) {
    signal(SIGALRM, on_alarm_lib);
    alarm(30);
    const int n = 1 << 20; /* 4 MiB of ints */
    int *msg = malloc((size_t)n * sizeof *msg), x[64], y[64];
    for (int round = 0; round < 3; round++) {
        int bad = 0;
        MPI_Request q = MPI_REQUEST_NULL;
        if (rank == 0) {
            for (int i = 0; i < n; i++) msg[i] = i ^ round;
            MPI_Isend(msg, n, MPI_INT, 1, 7, MPI_COMM_WORLD, &q);
            for (int done = 0; !done;) MPI_Test(&q, &done, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            memset(msg, 0, (size_t)n * sizeof *msg);
            MPI_Irecv(msg, n, MPI_INT, 0, 7, MPI_COMM_WORLD, &q);
        }
        for (int i = 0; i < 64; i++) x[i] = i + rank + round;
        int rc = RL_Allreduce(x, y, 64, MPI_INT, MPI_SUM, MPI_COMM_WORLD, "shm");
        for (int i = 0; i < 64; i++) bad |= y[i] != P * (i + round) + P * (P - 1) / 2;
        if (rank == 1) {
            MPI_Wait(&q, MPI_STATUS_IGNORE);
            for (int i = 0; i < n; i++) bad |= msg[i] != (i ^ round);
        }
        CHECK();
        if (rc != MPI_SUCCESS || bad || strcmp(RL_Last_algorithm(), "shm") != 0)
            FAIL("libprogress round %d: rc %d, bad %d, algorithm %s", round, rc, bad, RL_Last_algorithm());
    }
    alarm(0);
    free(msg);
}

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "";
    int provided = 0;
    MPI_Init_thread(&argc, &argv, strcmp(c, "threads") == 0 ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (!strcmp(c, "chunks")) case_chunks();
    else if (!strcmp(c, "holes")) case_holes();
    else if (!strcmp(c, "threads")) {
        if (provided < MPI_THREAD_MULTIPLE) {
            if (rank == 0) printf("test_shm threads p=%d: skipped (provided %d)\n", P, provided);
            MPI_Finalize();
            return 0;
        }
        if (argc > 2) thread_alg = argv[2];
        case_threads();
    } else if (!strcmp(c, "comms")) case_comms();
    else if (!strcmp(c, "mismatch")) case_mismatch();
    else if (!strcmp(c, "progress")) case_progress();
    else if (!strcmp(c, "libprogress") && P >= 2) case_libprogress();
    else if (!strcmp(c, "sizes")) case_sizes();
    else if (!strcmp(c, "nbfallback")) case_nbfallback();
    else if (!strcmp(c, "nonblocking")) {
        if (argc > 2) nb_alg = argv[2];
        case_nonblocking();
    }
    else {
        if (rank == 0)
            fprintf(stderr, "test_shm: unknown case '%s' (chunks, holes, threads, comms, mismatch, progress, "
                            "libprogress at p >= 2, nonblocking, sizes, nbfallback)\n", c);
        MPI_Finalize();
        return 2;
    }
    long long tot[2] = {checks, failures}, all[2];
    MPI_Reduce(tot, all, 2, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("test_shm %s p=%d: %lld checks, %lld failures\n", c, P, all[0], all[1]);
    MPI_Finalize();
    return failures != 0;
}
