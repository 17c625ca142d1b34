/* Progress of nonblocking allreduces whatever MPI call the application makes next.
 * A plain MPI program (it does not link ReduceLab): run under
 * LD_PRELOAD=libreducelab_pmpi.so, or alone against the MPI library (EXPECT_INTERCEPT=0), which
 * must pass the same checks (except `cancel`: the library aborts on cancelling a collective).
 *
 *   test_progress MODE SEED [ALARM_SECONDS]
 *
 * MODE:
 *   getstatus  MPI_Iallreduce (and a persistent allreduce) completed by polling
 *              MPI_Request_get_status only; the result is read as soon as the flag is set.
 *   crossorder MPI_Iallreduce on two fresh communicators, started in opposite orders on
 *              neighbouring ranks, then completed in a random order (in the last of four
 *              rounds after MPI_Comm_free of both communicators, which MPI allows; only
 *              under ReduceLab: Open MPI 4.1.4's own MPI_Iallreduce crashes there).
 *   blocked    even ranks start MPI_Iallreduce (small and large) on fresh communicators, compute
 *              (no MPI call) and block in MPI_Recv from rank+1; odd ranks wait for the
 *              allreduces, then send that message: only a progress thread lets it complete.
 *   mixed      runtime requests (two MPI_Iallreduce, a started and an inactive persistent
 *              allreduce) among library requests (MPI_Irecv/MPI_Isend, MPI_Ibarrier, a started
 *              and an inactive persistent receive) and MPI_REQUEST_NULL, shuffled, completed by
 *              MPI_Waitany / Waitsome / Testsome / Testany / Testall / Waitall / Test (chosen by
 *              the seed, with and without MPI_STATUS(ES)_IGNORE): every index is returned exactly
 *              once, for a request that was active; receive statuses give source, tag and
 *              count; allreduce statuses 0 elements, not cancelled; handles end as MPI's rules say.
 *   cancel     MPI_Cancel on a runtime request (no effect: completes normally, not cancelled) and
 *              MPI_Request_free on an active one (completes in the background).
 * Every allreduce result is checked element by element against the closed-form sum. SEED drives
 * the random sleeps, orders and completion calls (the same structure on every rank, sleeps per
 * rank). ALARM_SECONDS (default 60): a hang prints "TIMEOUT" and exits 3, so a regression fails.
 * Prints "test_progress MODE p=P seed=S: C checks, F failures" on rank 0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(OPEN_MPI) && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif
#if defined(MPI_VERSION) && MPI_VERSION >= 4
#define PINIT MPI_Allreduce_init
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#define PINIT MPIX_Allreduce_init
#endif

static int rank, p;
static long long checks, failures;
static unsigned long long rng;
static const char *mode;
static int under_reducelab; /* the interposition library is loaded */

#define CHECK(cond, ...)                                                                                              \
    do {                                                                                                              \
        checks++;                                                                                                     \
        if (!(cond)) {                                                                                                \
            failures++;                                                                                               \
            if (failures < 20) {                                                                                      \
                fprintf(stderr, "[rank %d] FAIL %s: ", rank, mode);                                                   \
                fprintf(stderr, __VA_ARGS__);                                                                         \
                fprintf(stderr, "\n");                                                                                \
            }                                                                                                         \
        }                                                                                                             \
    } while (0)

static unsigned next_rand(void) { /* splitmix64 */
    uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return (unsigned)((z ^ (z >> 31)) >> 32);
}
static unsigned rank_rng_state;
static unsigned rank_rand(void) { return rand_r(&rank_rng_state); }
static void rand_sleep(int max_us) {
    if (max_us > 0) usleep((useconds_t)(rank_rand() % (unsigned)max_us));
}
static void compute(int max_us) { /* busy, no MPI call */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long us = max_us > 0 ? (long)(rank_rand() % (unsigned)max_us) : 0;
    volatile double x = 1;
    do {
        for (int i = 0; i < 1000; i++) x = x * 1.0000001 + 1e-9;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "TIMEOUT: test_progress did not complete\n";
    if (write(2, m, sizeof m - 1) < 0) _exit(3);
    _exit(3);
}

/* input of rank r, element i, call `tag`; the sum over ranks has a closed form */
static int input(int r, int i, int tag) { return (r + 1) * (i % 97) + tag * (r + 3) + i / 97; }
static long long expected(int i, int tag) {
    return (long long)(i % 97) * p * (p + 1) / 2 + (long long)tag * (p * (p - 1) / 2 + 3 * p) + (long long)p * (i / 97);
}
static void fill(int *in, int n, int tag) {
    for (int i = 0; i < n; i++) in[i] = input(rank, i, tag);
}
static void check_sum(const int *out, int n, int tag, const char *what) {
    int bad = -1;
    for (int i = 0; i < n && bad < 0; i++)
        if (out[i] != (int)expected(i, tag)) bad = i;
    CHECK(bad < 0, "%s (n=%d tag=%d): element %d is %d, want %lld", what, n, tag, bad, bad >= 0 ? out[bad] : 0,
          bad >= 0 ? expected(bad, tag) : 0);
}
/* a collective's status: MPI's empty status as far as portable (0 elements, not cancelled) */
static void check_coll_status(MPI_Status *st, const char *what) {
    int n = -1, c = -1;
    MPI_Get_count(st, MPI_BYTE, &n);
    MPI_Test_cancelled(st, &c);
    CHECK(n == 0 && c == 0, "%s: status count %d cancelled %d (want 0, 0)", what, n, c);
}

static void mode_getstatus(void) {
    const int counts[] = {1, 1000, 300000}; /* the last one is 1.2 MB: rendezvous messages */
    for (int k = 0; k < 3; k++) {
        int n = counts[k], tag = 10 + k;
        int *in = malloc((size_t)n * sizeof *in), *out = malloc((size_t)n * sizeof *out);
        MPI_Comm c;
        MPI_Comm_dup(MPI_COMM_WORLD, &c); /* fresh: ReduceLab's own duplicate is still to be made */
        fill(in, n, tag);
        memset(out, 0, (size_t)n * sizeof *out);
        MPI_Request q;
        MPI_Iallreduce(in, out, n, MPI_INT, MPI_SUM, c, &q);
        rand_sleep(2000);
        int flag = 0;
        MPI_Status st;
        while (!flag) MPI_Request_get_status(q, &flag, &st);
        check_sum(out, n, tag, "MPI_Iallreduce polled with MPI_Request_get_status");
        check_coll_status(&st, "MPI_Request_get_status");
        CHECK(q != MPI_REQUEST_NULL, "MPI_Request_get_status freed the request");
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        CHECK(q == MPI_REQUEST_NULL, "MPI_Wait left the request");
#ifdef PINIT
        MPI_Request pq;
        MPI_Status pst;
        PINIT(in, out, n, MPI_INT, MPI_SUM, c, MPI_INFO_NULL, &pq);
        for (int it = 0; it < 3; it++) {
            fill(in, n, tag + 1 + it);
            memset(out, 0, (size_t)n * sizeof *out);
            MPI_Start(&pq);
            rand_sleep(1000);
            flag = 0;
            while (!flag) MPI_Request_get_status(pq, &flag, &pst);
            check_sum(out, n, tag + 1 + it, "persistent allreduce polled with MPI_Request_get_status");
            MPI_Wait(&pq, MPI_STATUS_IGNORE);
            CHECK(pq != MPI_REQUEST_NULL, "persistent request freed by MPI_Wait");
        }
        MPI_Request_free(&pq);
#endif
        MPI_Comm_free(&c);
        free(in), free(out);
    }
}

static void mode_crossorder(void) {
    for (int round = 0; round < 4; round++) {
        int n[2] = {1 + (int)(next_rand() % 200), 1 + (int)(next_rand() % 70000)};
        MPI_Comm c[2];
        MPI_Comm_dup(MPI_COMM_WORLD, &c[0]);
        MPI_Comm_dup(MPI_COMM_WORLD, &c[1]);
        int *in[2], *out[2];
        MPI_Request q[2];
        int first = (rank + round) % 2; /* neighbouring ranks start them in opposite orders */
        for (int j = 0; j < 2; j++) {
            int k = j ? 1 - first : first, tag = 20 + 2 * round + k;
            in[k] = malloc((size_t)n[k] * sizeof(int));
            out[k] = calloc((size_t)n[k], sizeof(int));
            fill(in[k], n[k], tag);
            MPI_Iallreduce(in[k], out[k], n[k], MPI_INT, MPI_SUM, c[k], &q[k]);
            rand_sleep(1000);
        }
        /* MPI allows freeing a communicator with operations pending on it (Open MPI 4.1.4's own
         * MPI_Iallreduce then crashes, so this round runs only under ReduceLab) */
        int free_early = round == 3 && under_reducelab;
        if (free_early) {
            MPI_Comm_free(&c[0]);
            MPI_Comm_free(&c[1]);
        }
        if (next_rand() % 2) {
            MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        } else {
            int k = (int)(rank_rand() % 2);
            MPI_Wait(&q[k], MPI_STATUS_IGNORE);
            MPI_Wait(&q[1 - k], MPI_STATUS_IGNORE);
        }
        for (int k = 0; k < 2; k++) {
            check_sum(out[k], n[k], 20 + 2 * round + k, "cross-order MPI_Iallreduce");
            free(in[k]), free(out[k]);
            if (!free_early) MPI_Comm_free(&c[k]);
        }
    }
}

static void mode_blocked(void) {
    for (int round = 0; round < 3; round++) {
        const int n[2] = {1 + (int)(next_rand() % 100), 100000 + (int)(next_rand() % 100000)};
        MPI_Comm c[2];
        int *in[2], *out[2];
        MPI_Request q[2];
        for (int k = 0; k < 2; k++) {
            MPI_Comm_dup(MPI_COMM_WORLD, &c[k]);
            in[k] = malloc((size_t)n[k] * sizeof(int));
            out[k] = calloc((size_t)n[k], sizeof(int));
            fill(in[k], n[k], 40 + 2 * round + k);
            MPI_Iallreduce(in[k], out[k], n[k], MPI_INT, MPI_SUM, c[k], &q[k]);
        }
        int token = -1;
        if (rank % 2 == 0 && rank + 1 < p) {
            compute(20000); /* no MPI call at all */
            MPI_Recv(&token, 1, MPI_INT, rank + 1, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            CHECK(token == 1000 * round + rank + 1, "token %d", token);
            /* the peer only sends after its allreduces completed, which needed ours */
            MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        } else {
            rand_sleep(5000);
            MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
            if (rank % 2 == 1) {
                token = 1000 * round + rank;
                MPI_Send(&token, 1, MPI_INT, rank - 1, 77, MPI_COMM_WORLD);
            }
        }
        for (int k = 0; k < 2; k++) {
            check_sum(out[k], n[k], 40 + 2 * round + k, "MPI_Iallreduce with a rank blocked in MPI_Recv");
            free(in[k]), free(out[k]);
            MPI_Comm_free(&c[k]);
        }
    }
}

/* ---- mixed ---- */
enum { K_RT, K_RECV, K_SEND, K_IBARRIER, K_NULL, K_PRECV_ON, K_PRECV_OFF, K_PRT_ON, K_PRT_OFF, K_END };
typedef struct {
    int kind;
    int active;   /* a completion is expected from it */
    int reported; /* returned by a completion call */
    int tag, n;
    int *in, *out;
} slot;

static void check_completed(slot *s, MPI_Status *st, const char *how) {
    char what[120];
    snprintf(what, sizeof what, "%s: kind %d", how, s->kind);
    CHECK(s->active && !s->reported, "%s: completion of a request that was not pending (active %d reported %d)", what,
          s->active, s->reported);
    s->reported = 1;
    if (st == MPI_STATUS_IGNORE) return;
    if (s->kind == K_RECV || s->kind == K_PRECV_ON) {
        int cnt = -1;
        MPI_Get_count(st, MPI_INT, &cnt);
        int left = (rank + p - 1) % p;
        CHECK(st->MPI_SOURCE == left && st->MPI_TAG == s->tag && cnt == s->n,
              "%s: receive status source %d tag %d count %d (want %d %d %d)", what, st->MPI_SOURCE, st->MPI_TAG, cnt,
              left, s->tag, s->n);
    } else if (s->kind == K_RT || s->kind == K_PRT_ON) {
        check_coll_status(st, what);
    } else if (s->kind == K_IBARRIER) {
#ifdef OPEN_MPI /* (MPICH 4.0.2 leaves an MPI_Ibarrier status's count as it found it) */
        check_coll_status(st, what);
#endif
    }
}

static void mode_mixed(int round) {
    const int nslots = 12;
    int kinds[12] = {K_RT, K_RT, K_RECV, K_RECV, K_SEND, K_IBARRIER, K_NULL, K_NULL, K_PRECV_ON, K_PRECV_OFF,
                     K_PRT_ON, K_PRT_OFF};
#ifndef PINIT
    kinds[10] = kinds[11] = K_NULL;
#endif
    for (int i = nslots - 1; i > 0; i--) { /* the same shuffle on every rank */
        int j = (int)(next_rand() % (unsigned)(i + 1)), t = kinds[i];
        kinds[i] = kinds[j], kinds[j] = t;
    }
    int method = (int)(next_rand() % 7), ignore = (int)(next_rand() % 2);
    slot s[12];
    MPI_Request rq[12];
    MPI_Comm comms[12];
    int ncomm = 0;
    int left = (rank + p - 1) % p, right = (rank + 1) % p;
    int *sendbuf = malloc(64 * sizeof(int));
    for (int i = 0; i < 64; i++) sendbuf[i] = rank * 1000 + i;
    for (int i = 0; i < nslots; i++) {
        slot *x = &s[i];
        memset(x, 0, sizeof *x);
        x->kind = kinds[i];
        x->tag = 100 + i;
        rq[i] = MPI_REQUEST_NULL;
        switch (x->kind) {
        case K_RT:
        case K_PRT_ON:
        case K_PRT_OFF:
            x->n = 1 + (int)(next_rand() % 5000);
            x->in = malloc((size_t)x->n * sizeof(int));
            x->out = calloc((size_t)x->n, sizeof(int));
            fill(x->in, x->n, 60 + i);
            MPI_Comm_dup(MPI_COMM_WORLD, &comms[ncomm]);
            if (x->kind == K_RT) {
                MPI_Iallreduce(x->in, x->out, x->n, MPI_INT, MPI_SUM, comms[ncomm], &rq[i]);
                x->active = 1;
            }
#ifdef PINIT
            else {
                PINIT(x->in, x->out, x->n, MPI_INT, MPI_SUM, comms[ncomm], MPI_INFO_NULL, &rq[i]);
                if (x->kind == K_PRT_ON) {
                    MPI_Start(&rq[i]);
                    x->active = 1;
                }
            }
#endif
            ncomm++;
            break;
        case K_RECV:
        case K_PRECV_ON:
        case K_PRECV_OFF:
            x->n = 1 + i;
            x->out = calloc(64, sizeof(int));
            if (x->kind == K_RECV) {
                MPI_Irecv(x->out, 64, MPI_INT, left, x->tag, MPI_COMM_WORLD, &rq[i]);
            } else {
                MPI_Recv_init(x->out, 64, MPI_INT, left, x->tag, MPI_COMM_WORLD, &rq[i]);
                if (x->kind == K_PRECV_ON) MPI_Start(&rq[i]);
            }
            x->active = x->kind != K_PRECV_OFF;
            break;
        case K_SEND: /* sends every receive's message to the right neighbour */
            x->active = 1;
            break;
        case K_IBARRIER:
            MPI_Ibarrier(MPI_COMM_WORLD, &rq[i]);
            x->active = 1;
            break;
        default:
            break;
        }
        rand_sleep(300);
    }
    /* the sends: one Isend per receiving slot to the right neighbour (same layout); the first is
     * slot K_SEND's request, the others are completed at the end */
    MPI_Request extra[12];
    int nextra = 0;
    for (int i = 0; i < nslots; i++)
        if (s[i].kind == K_RECV || s[i].kind == K_PRECV_ON) {
            int sendslot = -1;
            for (int j = 0; j < nslots; j++)
                if (s[j].kind == K_SEND) sendslot = j;
            MPI_Request *r = (rq[sendslot] == MPI_REQUEST_NULL) ? &rq[sendslot] : &extra[nextra++];
            MPI_Isend(sendbuf, s[i].n, MPI_INT, right, s[i].tag, MPI_COMM_WORLD, r);
        }
    MPI_Status sts[12];
    MPI_Status *stp = ignore ? MPI_STATUSES_IGNORE : sts;
    const char *names[] = {"MPI_Waitany", "MPI_Waitsome", "MPI_Testsome", "MPI_Testany", "MPI_Testall", "MPI_Waitall",
                           "MPI_Test"};
    const char *how = names[method];
    int pending = 0;
    for (int i = 0; i < nslots; i++) pending += s[i].active;
    int guard = 0;
    if (method == 0 || method == 3) { /* Waitany / Testany until MPI_UNDEFINED */
        for (;;) {
            int idx = -2, flag = 1;
            MPI_Status st;
            MPI_Status *one = ignore ? MPI_STATUS_IGNORE : &st;
            if (method == 0) MPI_Waitany(nslots, rq, &idx, one);
            else MPI_Testany(nslots, rq, &idx, &flag, one);
            if (!flag) {
                CHECK(idx == MPI_UNDEFINED, "%s: flag 0 with index %d", how, idx);
                rand_sleep(200);
                continue;
            }
            if (idx == MPI_UNDEFINED) break;
            CHECK(idx >= 0 && idx < nslots, "%s index %d", how, idx);
            if (idx < 0 || idx >= nslots || ++guard > nslots) break;
            check_completed(&s[idx], one, how);
        }
    } else if (method == 1 || method == 2) { /* Waitsome / Testsome until MPI_UNDEFINED */
        for (;;) {
            int out = -2, idx[12];
            if (method == 1) MPI_Waitsome(nslots, rq, &out, idx, stp);
            else MPI_Testsome(nslots, rq, &out, idx, stp);
            if (out == MPI_UNDEFINED) break;
            CHECK(out >= 0 && out <= nslots, "%s outcount %d", how, out);
            if (out < 0 || out > nslots) break;
            if (method == 1) CHECK(out > 0, "MPI_Waitsome returned 0 completions");
            for (int k = 0; k < out; k++) {
                CHECK(idx[k] >= 0 && idx[k] < nslots, "%s index %d", how, idx[k]);
                if (idx[k] >= 0 && idx[k] < nslots) check_completed(&s[idx[k]], ignore ? MPI_STATUS_IGNORE : &sts[k], how);
            }
            if (out == 0) rand_sleep(200);
            if (++guard > 100000) break;
        }
    } else if (method == 4 || method == 5) { /* Testall / Waitall */
        int flag = 0;
        if (method == 5) MPI_Waitall(nslots, rq, stp), flag = 1;
        while (!flag) {
            MPI_Testall(nslots, rq, &flag, stp);
            if (!flag) rand_sleep(200);
        }
        for (int i = 0; i < nslots; i++)
            if (s[i].active) check_completed(&s[i], ignore ? MPI_STATUS_IGNORE : &sts[i], how);
    } else { /* MPI_Test on each in a random order until all done */
        int left_ = pending;
        while (left_ > 0) {
            int i = (int)(rank_rand() % (unsigned)nslots), flag = 0;
            MPI_Status st;
            if (s[i].reported || !s[i].active) continue;
            MPI_Test(&rq[i], &flag, ignore ? MPI_STATUS_IGNORE : &st);
            if (flag) {
                check_completed(&s[i], ignore ? MPI_STATUS_IGNORE : &st, how);
                left_--;
            }
        }
    }
    MPI_Waitall(nextra, extra, MPI_STATUSES_IGNORE);
    for (int i = 0; i < nslots; i++) {
        slot *x = &s[i];
        char what[100];
        snprintf(what, sizeof what, "%s (round %d, slot %d kind %d)", how, round, i, x->kind);
        CHECK(x->reported == x->active, "%s: reported %d, active %d", what, x->reported, x->active);
        int persistent = x->kind == K_PRECV_ON || x->kind == K_PRECV_OFF || x->kind == K_PRT_ON || x->kind == K_PRT_OFF;
        CHECK(persistent ? rq[i] != MPI_REQUEST_NULL : rq[i] == MPI_REQUEST_NULL, "%s: handle after completion", what);
        if (x->kind == K_RT || x->kind == K_PRT_ON) check_sum(x->out, x->n, 60 + i, what);
        if (x->kind == K_RECV || x->kind == K_PRECV_ON) {
            int bad = 0;
            for (int k = 0; k < x->n; k++) bad |= x->out[k] != left * 1000 + k;
            CHECK(!bad, "%s: received data", what);
        }
        if (persistent) MPI_Request_free(&rq[i]);
        free(x->in), free(x->out);
    }
    for (int k = 0; k < ncomm; k++) MPI_Comm_free(&comms[k]);
    free(sendbuf);
}

static void mode_cancel(void) {
    const int n = 5000;
    int *in = malloc(n * sizeof *in), *out = calloc(n, sizeof *out);
    MPI_Request q;
    MPI_Status st;
    fill(in, n, 90);
    MPI_Iallreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q);
    CHECK(MPI_Cancel(&q) == MPI_SUCCESS, "MPI_Cancel");
    rand_sleep(1000);
    MPI_Wait(&q, &st);
    int c = -1;
    MPI_Test_cancelled(&st, &c);
    CHECK(c == 0, "cancelled a ReduceLab allreduce");
    check_sum(out, n, 90, "MPI_Iallreduce after MPI_Cancel");
    /* freed while active: completes in the background */
    memset(out, 0, n * sizeof *out);
    fill(in, n, 91);
    MPI_Iallreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q);
    CHECK(MPI_Request_free(&q) == MPI_SUCCESS && q == MPI_REQUEST_NULL, "MPI_Request_free");
    int *in2 = malloc(n * sizeof *in2), *out2 = calloc(n, sizeof *out2);
    fill(in2, n, 92);
    MPI_Iallreduce(in2, out2, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    check_sum(out2, n, 92, "MPI_Iallreduce after a freed one");
    for (;;) { /* any completion call progresses the freed one */
        int flag = 0, done = 1;
        MPI_Request nul = MPI_REQUEST_NULL;
        MPI_Test(&nul, &flag, MPI_STATUS_IGNORE);
        for (int i = 0; i < n && done; i++) done = out[i] == (int)expected(i, 91);
        if (done) break;
    }
    check_sum(out, n, 91, "MPI_Iallreduce freed while active");
    free(in), free(out), free(in2), free(out2);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_progress getstatus|crossorder|blocked|mixed|cancel SEED [ALARM_SECONDS]\n");
        return 2;
    }
    mode = argv[1];
    unsigned long long seed = strtoull(argv[2], NULL, 10);
    signal(SIGALRM, on_alarm);
    alarm(argc > 3 ? (unsigned)atoi(argv[3]) : 60);
    int provided = 0;
    /* every call must run a schedule: no crossover to the MPI library for `auto` unless the
     * environment sets REDUCELAB_RULES (docs/mpi.md; the rules are read at the first call) */
    setenv("REDUCELAB_RULES", "none", 0);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    rng = seed * 0x2545F4914F6CDD1DULL + 1;
    rank_rng_state = (unsigned)(seed * 7919u + (unsigned)rank * 104729u + 1u);
    CHECK(provided == MPI_THREAD_SINGLE, "MPI_Init_thread provided %d to an application that asked for SINGLE",
          provided);
    int q = -1;
    MPI_Query_thread(&q);
    CHECK(q == provided, "MPI_Query_thread %d, MPI_Init_thread gave %d", q, provided);
    void (*counters)(long long *, long long *) = (void (*)(long long *, long long *))dlsym(RTLD_DEFAULT, "RL_Counters");
    long long s0 = 0, f0 = 0, s1 = 0, f1 = 0;
    if (counters) counters(&s0, &f0);
    under_reducelab = counters != NULL;
    if (strcmp(mode, "getstatus") == 0) mode_getstatus();
    else if (strcmp(mode, "crossorder") == 0) mode_crossorder();
    else if (strcmp(mode, "blocked") == 0) mode_blocked();
    else if (strcmp(mode, "mixed") == 0)
        for (int r = 0; r < 6; r++) mode_mixed(r);
    else if (strcmp(mode, "cancel") == 0) mode_cancel();
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *expect = getenv("EXPECT_INTERCEPT");
    if (!expect || strcmp(expect, "0") != 0) { /* every allreduce ran a ReduceLab schedule */
        if (counters) counters(&s1, &f1);
        CHECK(counters && s1 > s0 && f1 == f0, "interposition: %lld scheduled, %lld fell through", s1 - s0, f1 - f0);
    } else {
        CHECK(!counters, "interposition library loaded although EXPECT_INTERCEPT=0");
    }
    long long tot[2] = {checks, failures}, all[2];
    MPI_Reduce(tot, all, 2, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("test_progress %s p=%d seed=%llu: %lld checks, %lld failures\n", mode, p, seed, all[0], all[1]);
    MPI_Finalize();
    return failures != 0;
}
