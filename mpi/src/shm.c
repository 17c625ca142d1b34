/* Shared-memory allreduce for communicators whose ranks all share a node (docs/mpi.md,
 * "Shared-memory allreduce").
 *
 * One segment per communicator, created by the first shared-memory allreduce on it (a
 * collective of nonblocking steps on the runtime's private duplicate of the communicator: rank
 * 0 makes a POSIX shm object and broadcasts its name, every rank maps it and checks rank 0's
 * nonce in it, an allreduce of the outcomes decides for all; the name is unlinked at once, so
 * nothing is left in /dev/shm whatever happens next; see setup() for why not
 * MPI_Comm_split_type).
 * It is cached as an attribute of the user's communicator and unmapped by the attribute's
 * delete callback (MPI_Comm_free, or MPI_Finalize for MPI_COMM_SELF/WORLD), a local operation:
 * MPI_Win_free would be a collective inside MPI_Comm_free, which ranks may call on different
 * communicators in different orders.
 *
 * Segment: a header (line 0: the wake word and its sleepers; line 1: rank 0's nonce; one line
 * per set with its counters; per rank a line with its flags and its call headers, one per set)
 * and a ring of k sets (REDUCELAB_SHM_SETS, default 4) of p slots of `slot` bytes. A vector is
 * processed in chunks of slot/extent elements; chunks are numbered on across calls, chunk c
 * uses set c mod k. There is no barrier: every wait is for flags of the chunk in question.
 *   1. copy in: a rank copies its part of chunk c into its slot of the set once every rank has
 *      copied out chunk c − k (the set's previous use: the ranks' out flags), then raises its
 *      in flag to c+1;
 *   2. reduce: once every rank's in flag has reached c+1, any rank claims one of the chunk's p
 *      slices (a CAS on the set's claim counter) and reduces elements [j·m/p, (j+1)·m/p) over
 *      the p slots into slot p−1: acc = x_{p−1}; acc = x_r ⊕ acc for r = p−2 … 0 (MPI's rank
 *      order, so user ops that do not commute are exact too, and the result does not depend
 *      on which rank reduced; the runtime's kernels for predefined ops, MPI_Reduce_local for
 *      user ops), then counts it done on the set's done counter;
 *   3. copy out: once all p slices are done, a rank copies the result out of slot p−1 (types
 *      with holes: by the type map, MPI_Pack/MPI_Unpack, so gap bytes of the receive buffer
 *      are never written) and raises its out flag to c+1.
 * A rank does whatever it can (its next copy-in first, as the peers wait for it; then
 * copy-outs and claimable slices) before it waits, so a rank that is not running delays only the chunks that need its own copies, and
 * the ranks that run do the reductions; with k sets a rank runs up to k chunks ahead. Dense
 * vectors of at most REDUCELAB_SHM_SMALL bytes (4 KiB) are one chunk with no claims: once all
 * in flags are there, every rank folds all p slots into its own receive buffer, in the same
 * order. Measured against the two-barrier design this replaces in docs/mpi.md.
 *
 * Waiting: a rank that finds nothing to do spins `spin` times (REDUCELAB_SHM_SPIN; 0 when there
 * are more ranks than cores: a spinning rank would hold the core the others need), then yields
 * its core (sched_yield) between checks, 100 times (REDUCELAB_SHM_YIELDS), then sleeps on a
 * futex (the wake word, which a rank bumps and wakes when its flag completes a stage of a chunk
 * for all ranks, or its slice completes a chunk's reductions; at most 50 µs per sleep).
 * Between checks it progresses the runtime's active nonblocking operations and, every 16
 * checks, the MPI library (an MPI_Iprobe on the private duplicate), as the library's own
 * collectives do. REDUCELAB_SHM_TEST_DELAY=N (tests) pauses before 1 in N steps at random.
 *
 * Counts: every rank writes (count, type size) into its header line of the call's first set
 * before its first copy-in, and checks all others' once every rank has copied in the call's
 * first chunk (no rank copies in more before that); all see the same values, so all agree and
 * return MPI_ERR_TRUNCATE together on a mismatch (never MPI_SUCCESS with wrong data), marking
 * the first chunk copied out, so the next call starts at the same chunk on every rank.
 *
 * Threads: all state is per communicator (MPI forbids two threads in collectives on one
 * communicator at once), the keyval is made once (pthread_once) and the segment count is
 * atomic, so two threads on two communicators may run it at MPI_THREAD_MULTIPLE. */
#define _GNU_SOURCE
#include "rl_shm.h"
#include "rl_kernels.h"
#include "rl_comm.h"
#include "rl_progress.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <linux/futex.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define LINE 64
/* line 0: the wake word and its sleepers; line 1: rank 0's nonce; one line per set (its claim
 * and done counters); per rank, RANK_LINES(k) lines: its in/out flags and its k call headers
 * (one line up to k = 6: a peer reads a rank's in flag and header with one miss) */
#define RANK_LINES(k) (((size_t)16 + 8 * (size_t)(k) + LINE - 1) / LINE)
#define HEADER_BYTES(p, k) ((size_t)LINE * (2 + (size_t)(k) + (size_t)(p) * RANK_LINES(k)))
#define RL_SHM_DEFAULT_BYTES ((size_t)4 << 20) /* data area per communicator (both sets) */
#define PROBE_EVERY 16
#define RL_SHM_DEFAULT_SMALL 4096
#define RL_SHM_DEFAULT_YIELDS 100
#define RL_SHM_DEFAULT_SETS 4
#define RL_SHM_MAX_SETS 64

typedef struct {
    /* the attribute and every live operation hold a reference (the communicator may be freed
     * while a nonblocking one is still running, which MPI allows) */
    atomic_int refs;
    /* set-up: 0 not made yet, 1 in progress (a sequence of nonblocking collectives on `node`),
     * 2 done (usable or not) */
    int ready, usable;
    char why[240];
    MPI_Comm node; /* the runtime's private duplicate of the communicator (comm.c owns it) */
    int p, rank;
    size_t slot;     /* bytes per rank per set of the current segment */
    size_t slot_max; /* REDUCELAB_SHM_BYTES / (sets·p), rounded down to 4 KiB (at least 4 KiB) */
    unsigned sets;   /* sets of slots in the ring (REDUCELAB_SHM_SETS) */
    size_t bytes;    /* mapping */
    char *base;
    _Atomic uint32_t *gen;       /* header line 0: the wake word (a futex word), */
    _Atomic uint32_t *sleepers;  /* and how many ranks sleep on it */
    uint64_t chunks; /* chunks numbered on this segment so far: chunk c uses set c % sets */
    uint64_t in_min, out_min; /* the ranks' smallest in and out flags when last read (they only
                               * grow, so a cached value that suffices saves reading p lines) */
    unsigned delay;  /* REDUCELAB_SHM_TEST_DELAY: a random pause before 1 in `delay` steps (tests) */
    uint64_t rng;
    unsigned spin, yields; /* a waiting rank spins, then yields, then sleeps on a futex */
    size_t small;   /* dense vectors up to this many bytes: one chunk, every rank reduces all */
    char *pack;     /* types with holes: MPI_Pack buffer */
    int pack_bytes;
    /* calls on the communicator run in call order (MPI's order of collectives on it): each
     * takes a ticket when called (or started) and runs when `serving` reaches it */
    _Atomic uint64_t next_ticket, serving;
    /* the set-up in progress */
    int phase;
    size_t want_slot;
    MPI_Request req;
    struct {
        char name[56];
        uint64_t nonce;
    } id;
    int ok, all, all2, fd;
    char err[160];
} shm_state;

struct rl_shm_op {
    shm_state *s;
    const void *sendbuf; /* as given (MPI_IN_PLACE too) */
    void *recvbuf;
    const char *src;
    char *dst;
    int count;
    MPI_Datatype type;
    MPI_Op op;
    rl_kernel kernel;
    MPI_Aint extent, true_ub;
    int tsize, dense, small;
    size_t n, per, want_slot;
    /* the call's chunks are base … base+nch−1 of the segment's numbering; next_in, next_out:
     * this rank's next copy-in and copy-out (indices into the call), red: the first chunk not
     * known to be fully claimed for reduction */
    uint64_t base, nch, next_in, next_out, red;
    int checked;
    int state, rc, moved;
    unsigned waits; /* nonblocking: progress calls in a row that found nothing to do */
    uint64_t ticket;
    uint32_t gen; /* the wake word when this rank last looked for work (futex sleeps) */
    MPI_Request lib; /* the set-up found no shared segment: the MPI library's allreduce */
};

enum { OP_TURN, OP_SETUP, OP_RUN, OP_LIB, OP_DONE };
enum { STEP_DONE, STEP_BARRIER, STEP_OTHER }; /* what a step that did not finish waits for
                                                * (STEP_BARRIER: the peers' flags) */

static int shm_keyval = MPI_KEYVAL_INVALID;
static pthread_once_t keyval_once = PTHREAD_ONCE_INIT;
static atomic_int nsegments;
static atomic_llong nbytes;
static atomic_uint name_seq;

int RL_Shm_segments(void) { return atomic_load(&nsegments); }
long long RL_Shm_bytes(void) { return atomic_load(&nbytes); }

static void unmap(shm_state *s) {
    if (s->base) {
        munmap(s->base, s->bytes);
        atomic_fetch_sub(&nsegments, 1);
        atomic_fetch_sub(&nbytes, (long long)s->bytes);
        s->base = NULL;
    }
}

static void shm_state_release(shm_state *s) {
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
    unmap(s);
    free(s->pack);
    free(s);
}

static int shm_delete(MPI_Comm comm, int keyval, void *attr, void *extra) {
    (void)comm, (void)keyval, (void)extra;
    shm_state_release(attr);
    return MPI_SUCCESS;
}

static void make_keyval(void) { PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, shm_delete, &shm_keyval, NULL); }

/* A non-negative integer setting (at most `max`); a bad value leaves `why` set (the caller
 * declines with it) and says so on stderr, once per process and setting. */
static size_t env_size(const char *name, size_t dflt, size_t max, char *why, size_t whylen) {
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    char *end = NULL;
    errno = 0;
    long long x = strtoll(e, &end, 10);
    if (end == e || *end || x < 0 || errno || (unsigned long long)x > max) {
        snprintf(why, whylen, "%s='%s' is not a whole number from 0 to %zu", name, e, max);
        static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        static char told[4][32];
        pthread_mutex_lock(&mu);
        int i = 0;
        while (i < 4 && told[i][0] && strcmp(told[i], name) != 0) i++;
        if (i < 4 && !told[i][0]) {
            snprintf(told[i], sizeof told[i], "%s", name);
            fprintf(stderr, "reducelab: %s: the shared-memory allreduce is not used\n", why);
        }
        pthread_mutex_unlock(&mu);
        return dflt;
    }
    return (size_t)x;
}

/* The local part of a communicator's state (no communication): sizes and settings. */
static void state_init(MPI_Comm comm, shm_state *s) {
    int p = 0, rank = 0;
    PMPI_Comm_size(comm, &p);
    PMPI_Comm_rank(comm, &rank);
    s->p = p;
    s->rank = rank;
    s->node = MPI_COMM_NULL;
    s->fd = -1;
    atomic_store(&s->refs, 1);
    char bad[200] = "";
    size_t budget = env_size("REDUCELAB_SHM_BYTES", RL_SHM_DEFAULT_BYTES, (size_t)1 << 40, bad, sizeof bad);
    s->sets = (unsigned)env_size("REDUCELAB_SHM_SETS", RL_SHM_DEFAULT_SETS, RL_SHM_MAX_SETS, bad, sizeof bad);
    if (s->sets < 2 && !bad[0])
        snprintf(bad, sizeof bad, "REDUCELAB_SHM_SETS='%s' is not a whole number from 2 to %d",
                 getenv("REDUCELAB_SHM_SETS"), RL_SHM_MAX_SETS);
    if (s->sets < 2) s->sets = 2;
    s->delay = (unsigned)env_size("REDUCELAB_SHM_TEST_DELAY", 0, 1u << 30, bad, sizeof bad);
    s->rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)getpid() << 16) ^ (uint64_t)rank;
    size_t slot = budget / ((size_t)s->sets * (size_t)p) / 4096 * 4096;
    if (slot < 4096) slot = 4096;
    s->slot_max = slot;
    /* spinning before yielding: only when every rank can have a core */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    s->spin = (unsigned)env_size("REDUCELAB_SHM_SPIN", cores > 0 && p <= cores ? 2000 : 0, 1u << 30, bad, sizeof bad);
    s->yields = (unsigned)env_size("REDUCELAB_SHM_YIELDS", RL_SHM_DEFAULT_YIELDS, 1u << 30, bad, sizeof bad);
    s->small = env_size("REDUCELAB_SHM_SMALL", RL_SHM_DEFAULT_SMALL, (size_t)1 << 40, bad, sizeof bad);
    if (s->small > slot) s->small = slot;
    if (bad[0]) { /* (every rank sees the same environment: all decline) */
        snprintf(s->why, sizeof s->why, "%s", bad);
        s->ready = 2;
    }
}

/* The collective set-up of a segment with `want_slot`-byte slots, as a state machine over
 * nonblocking collectives on the private duplicate: every rank of the communicator runs it at
 * the same point of its calls (their order), and no step blocks, so a nonblocking allreduce can
 * run it from its progress and a blocking one waits for it while progressing the active
 * nonblocking operations (a blocking MPI_Comm_split_type here deadlocked a rank that entered
 * its first shared-memory allreduce while a peer waited for an MPI_Iallreduce it had started
 * before; the runtime's MPI_Comm_idup has the same reason). Whether the ranks share memory is
 * asked of the memory itself: rank 0 makes the segment and writes a random nonce in it; the
 * others open it by name and must find the nonce (on another node the name does not exist, or
 * is another job's segment without the nonce); allreduces of the outcomes make every rank
 * decide alike. Returns 1 when done (s->usable says how), 0 while a collective is pending.
 * A later call that needs larger slots runs it again (this rank's mapping of the old segment
 * is unmapped first: it has copied out every chunk, so it needs nothing more from it; a slower
 * rank still copying out keeps its own mapping until it arrives here). */
static int setup_step(shm_state *s) {
    for (;;) {
        if (s->phase > 0 && s->req != MPI_REQUEST_NULL) {
            int flag = 0;
            if (PMPI_Test(&s->req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
                s->req = MPI_REQUEST_NULL;
                flag = 1;
                s->all = s->all2 = 0;
                snprintf(s->err, sizeof s->err, "shm: a collective of the set-up failed");
                if (s->phase < 3) s->phase = 3; /* (decide: unusable) */
            }
            if (!flag) return 0;
            s->req = MPI_REQUEST_NULL;
        }
        switch (s->phase) {
        case 0: { /* rank 0 makes the segment; everybody learns its name */
            unmap(s);
            s->slot = s->want_slot;
            s->bytes = (HEADER_BYTES(s->p, s->sets) + (size_t)s->sets * (size_t)s->p * s->slot + 4095) / 4096 * 4096;
            memset(&s->id, 0, sizeof s->id);
            s->ok = 1;
            s->fd = -1;
            s->err[0] = 0;
            if (s->rank == 0) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                s->id.nonce = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
                              (uintptr_t)s;
                s->id.nonce |= 1;
                snprintf(s->id.name, sizeof s->id.name, "/reducelab-%ld-%u", (long)getpid(),
                         atomic_fetch_add(&name_seq, 1));
                int fd = shm_open(s->id.name, O_CREAT | O_EXCL | O_RDWR, 0600), e = 0;
                if (fd < 0) e = errno;
                else if (ftruncate(fd, (off_t)s->bytes) != 0) e = errno;
                else e = posix_fallocate(fd, 0, (off_t)s->bytes); /* tmpfs full: an error now, not SIGBUS later */
                if (e) {
                    snprintf(s->err, sizeof s->err, "shm: cannot create a %zu-byte segment in /dev/shm (%s)", s->bytes,
                             strerror(e));
                    if (fd >= 0) close(fd), shm_unlink(s->id.name);
                    fd = -1;
                    memset(&s->id, 0, sizeof s->id); /* (broadcasts nonce 0: nobody opens anything) */
                }
                s->fd = fd;
            }
            if (PMPI_Ibcast(&s->id, sizeof s->id, MPI_BYTE, 0, s->node, &s->req) != MPI_SUCCESS) {
                s->req = MPI_REQUEST_NULL;
                snprintf(s->err, sizeof s->err, "shm: the set-up's broadcast failed");
                s->all = s->all2 = 0;
                s->phase = 3;
                continue;
            }
            s->phase = 1;
            break;
        }
        case 1: { /* map it; rank 0 writes the nonce; an allreduce of the outcomes */
            if (!s->id.nonce) s->ok = 0;
            if (s->ok && s->rank != 0 && (s->fd = shm_open(s->id.name, O_RDWR, 0600)) < 0) {
                snprintf(s->err, sizeof s->err, "shm: rank %d cannot open rank 0's segment (%s): not on rank 0's node",
                         s->rank, strerror(errno));
                s->ok = 0;
            }
            if (s->ok) {
                void *m = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
                if (m == MAP_FAILED) {
                    snprintf(s->err, sizeof s->err, "shm: cannot map the segment (%s)", strerror(errno));
                    s->ok = 0;
                } else {
                    s->base = m;
                    atomic_fetch_add(&nsegments, 1);
                    atomic_fetch_add(&nbytes, (long long)s->bytes);
                    /* (rank 0 stores it before the allreduce below, the others read it after) */
                    if (s->rank == 0) atomic_store((_Atomic uint64_t *)(s->base + LINE), s->id.nonce);
                }
            }
            if (s->fd >= 0) close(s->fd);
            s->fd = -1;
            s->all = 0;
            if (PMPI_Iallreduce(&s->ok, &s->all, 1, MPI_INT, MPI_MIN, s->node, &s->req) != MPI_SUCCESS) {
                s->req = MPI_REQUEST_NULL;
                s->all = s->all2 = 0;
                s->phase = 3;
                continue;
            }
            s->phase = 2;
            break;
        }
        case 2: /* every rank checks the nonce; a second round: all found it (every rank has
                 * opened the name, so rank 0 may unlink it) */
            s->all2 = 0;
            if (!s->all) {
                s->phase = 3;
                continue;
            }
            if (s->rank != 0 && atomic_load((_Atomic uint64_t *)(s->base + LINE)) != s->id.nonce) {
                snprintf(s->err, sizeof s->err,
                         "shm: rank %d opened a segment of that name without rank 0's nonce: not on rank 0's node",
                         s->rank);
                s->ok = 0;
            }
            if (PMPI_Iallreduce(&s->ok, &s->all2, 1, MPI_INT, MPI_MIN, s->node, &s->req) != MPI_SUCCESS) {
                s->req = MPI_REQUEST_NULL;
                s->all2 = 0;
            }
            s->phase = 3;
            break;
        case 3: /* decided */
            if (s->rank == 0 && s->id.nonce) shm_unlink(s->id.name);
            s->phase = 0;
            s->ready = 2;
            s->chunks = s->in_min = s->out_min = 0;
            if (!s->all || !s->all2) {
                snprintf(s->why, sizeof s->why, "%s",
                         s->err[0] ? s->err
                                   : "shm: another rank could not map rank 0's segment (not all ranks on one node, "
                                     "or /dev/shm)");
                unmap(s);
                s->usable = 0;
                return 1;
            }
            s->gen = (_Atomic uint32_t *)(s->base + 8);
            s->sleepers = (_Atomic uint32_t *)(s->base + 12);
            s->usable = 1;
            return 1;
        }
    }
}

/* The communicator's state, made (without communication) if it has none. */
static shm_state *get_state(MPI_Comm comm) {
    pthread_once(&keyval_once, make_keyval);
    if (shm_keyval == MPI_KEYVAL_INVALID) return NULL;
    shm_state *s = NULL;
    int flag = 0;
    if (PMPI_Comm_get_attr(comm, shm_keyval, &s, &flag) != MPI_SUCCESS) return NULL;
    if (flag) return s;
    if (!(s = calloc(1, sizeof *s))) return NULL;
    s->req = MPI_REQUEST_NULL;
    state_init(comm, s);
    if (PMPI_Comm_set_attr(comm, shm_keyval, s) != MPI_SUCCESS) {
        free(s);
        return NULL;
    }
    return s;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *timeout) {
    return syscall(SYS_futex, (uint32_t *)addr, op, val, timeout, NULL, 0);
}

/* The header's lines: set k's counters ([0] claim: slices of its reductions claimed, [1] done:
 * slices reduced; both count on over the set's uses); rank q's flags ([0] in: chunks it has
 * copied in, i.e. c+1 after chunk c; [1] out: chunks it has copied out) followed by its call
 * headers (count, type size; the one for set k for calls whose first chunk is in set k). */
static inline _Atomic uint64_t *set_line(const shm_state *s, unsigned k) {
    return (_Atomic uint64_t *)(s->base + (size_t)LINE * (2 + (size_t)k));
}
static inline _Atomic uint64_t *rank_line(const shm_state *s, int q) {
    return (_Atomic uint64_t *)(s->base + (size_t)LINE * (2 + (size_t)s->sets + (size_t)q * RANK_LINES(s->sets)));
}
static inline int32_t *hdr_line(const shm_state *s, unsigned k, int q) {
    return (int32_t *)((char *)rank_line(s, q) + 16 + 8 * (size_t)k);
}
static inline char *set_data(const shm_state *s, unsigned k) {
    return s->base + HEADER_BYTES(s->p, s->sets) + (size_t)k * (size_t)s->p * s->slot;
}
/* the smallest of the ranks' in (which 0) or out (which 1) flags */
static uint64_t flag_min(const shm_state *s, int which) {
    uint64_t m = UINT64_MAX;
    for (int q = 0; q < s->p; q++) {
        uint64_t v = atomic_load_explicit(&rank_line(s, q)[which], memory_order_seq_cst);
        if (v < m) m = v;
    }
    return m;
}
/* Wakes the sleepers, if any (seq_cst: a publisher's flag store and a sleeper's count must not
 * both miss each other; a miss would cost one 50 µs sleep). */
static void wake(shm_state *s) {
    if (atomic_load_explicit(s->sleepers, memory_order_seq_cst)) {
        atomic_fetch_add_explicit(s->gen, 1, memory_order_seq_cst);
        futex(s->gen, FUTEX_WAKE, INT32_MAX, NULL);
    }
}
/* Publishes this rank's in or out flag; wakes the sleepers, if any, when it completes that
 * stage of the chunk for all ranks (only then can a waiter go on: every wait is for a whole
 * stage). The ranks' flags are read only when someone sleeps: a sleeper counts itself before
 * its last look, so either it sees this store or this rank sees it counted; of two ranks that
 * publish the stage's last flags at once, the later one's look sees both. */
static void publish(shm_state *s, int which, uint64_t v) {
    atomic_store_explicit(&rank_line(s, s->rank)[which], v, memory_order_seq_cst);
    if (atomic_load_explicit(s->sleepers, memory_order_seq_cst) && flag_min(s, which) >= v) wake(s);
}
/* REDUCELAB_SHM_TEST_DELAY=N (tests): before 1 in N steps, a yield or a sleep of 50–200 µs, so
 * the ranks' steps interleave in many orders. */
static void test_delay(shm_state *s) {
    if (!s->delay) return;
    s->rng ^= s->rng << 13, s->rng ^= s->rng >> 7, s->rng ^= s->rng << 17;
    if (s->rng % s->delay) return;
    unsigned us = (unsigned)(s->rng >> 40) % 200;
    if (us < 50) sched_yield();
    else {
        struct timespec ts = {0, (long)us * 1000L};
        nanosleep(&ts, NULL);
    }
}

static size_t span(size_t n, MPI_Aint extent, MPI_Aint true_ub) {
    return n ? (n - 1) * (size_t)extent + (size_t)true_ub : 0;
}

/* n elements from the segment into the user's buffer by the type map. */
static int copy_out_typed(shm_state *s, char *dst, const char *src, int n, MPI_Datatype type) {
    int need = 0, pos = 0, upos = 0, rc = PMPI_Pack_size(n, type, MPI_COMM_SELF, &need);
    if (rc != MPI_SUCCESS) return rc;
    if (need > s->pack_bytes) {
        free(s->pack);
        s->pack = malloc((size_t)need);
        s->pack_bytes = s->pack ? need : 0;
        if (!s->pack) return MPI_ERR_NO_MEM;
    }
    rc = PMPI_Pack(src, n, type, s->pack, need, &pos, MPI_COMM_SELF);
    if (rc == MPI_SUCCESS) rc = PMPI_Unpack(s->pack, pos, &upos, dst, n, type, MPI_COMM_SELF);
    return rc;
}

/* An operation on `comm` (datatype checks, no communication); RL_SHM_DECLINED with the reason
 * when this communicator, datatype or setting cannot use the shared-memory path (every rank
 * declines alike). */
static int op_init(rl_shm_op *o, const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                   MPI_Comm comm, rl_kernel kernel, char *why, size_t whylen) {
    MPI_Aint lb, extent, tlb, textent;
    int tsize = 0;
    memset(o, 0, sizeof *o);
    o->lib = MPI_REQUEST_NULL;
    if (PMPI_Type_get_extent(type, &lb, &extent) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent(type, &tlb, &textent) != MPI_SUCCESS || PMPI_Type_size(type, &tsize) != MPI_SUCCESS) {
        snprintf(why, whylen, "shm: datatype not queryable");
        return RL_SHM_DECLINED;
    }
    if (lb != 0 || tlb < 0 || tlb + textent > extent || extent <= 0 || tsize <= 0) {
        snprintf(why, whylen, "shm: datatype with a lower bound, data below 0 or zero size");
        return RL_SHM_DECLINED;
    }
    shm_state *s = get_state(comm);
    if (!s) {
        snprintf(why, whylen, "shm: cannot keep per-communicator state (attribute)");
        return RL_SHM_DECLINED;
    }
    if (s->ready == 2 && !s->usable) {
        snprintf(why, whylen, "%s", s->why);
        return RL_SHM_DECLINED;
    }
    if ((size_t)extent > s->slot_max) {
        snprintf(why, whylen, "shm: an element of %ld bytes is larger than a %zu-byte slot (REDUCELAB_SHM_BYTES)",
                 (long)extent, s->slot_max);
        return RL_SHM_DECLINED;
    }
    o->s = s;
    o->sendbuf = sendbuf;
    o->recvbuf = recvbuf;
    o->src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    o->dst = recvbuf;
    o->count = count;
    o->type = type;
    o->op = op;
    o->kernel = kernel;
    o->extent = extent;
    o->true_ub = tlb + textent;
    o->tsize = tsize;
    o->dense = (MPI_Aint)tsize == extent && tlb == 0 && textent == extent;
    o->n = (size_t)count;
    o->small = o->dense && o->n * (size_t)extent <= s->small;
    /* slots as large as the vector (4 KiB pages), at most slot_max: a communicator that only
     * reduces small vectors holds a small segment */
    size_t need = (span(o->n, extent, o->true_ub) + 4095) / 4096 * 4096;
    o->want_slot = need < 4096 ? 4096 : need > s->slot_max ? s->slot_max : need;
    o->state = OP_DONE;
    return MPI_SUCCESS;
}

/* Takes the operation's turn on its communicator (at the call, or at each persistent start). */
static void op_start(rl_shm_op *o) {
    o->ticket = atomic_fetch_add(&o->s->next_ticket, 1);
    o->state = OP_TURN;
    o->rc = MPI_SUCCESS;
}

static void op_finish(rl_shm_op *o) {
    o->state = OP_DONE;
    atomic_fetch_add_explicit(&o->s->serving, 1, memory_order_release);
}

/* elements in chunk i of the call */
static size_t chunk_m(const rl_shm_op *o, uint64_t i) {
    size_t off = (size_t)i * o->per;
    return o->n - off < o->per ? o->n - off : o->per;
}
/* Chunk c's set may be written: every rank has copied out chunk c − sets. */
static int set_free(shm_state *s, uint64_t c) {
    if (c < s->sets) return 1;
    if (s->out_min < c - s->sets + 1) s->out_min = flag_min(s, 1);
    return s->out_min >= c - s->sets + 1;
}
/* Every rank has copied in chunk c. */
static int inputs_in(shm_state *s, uint64_t c) {
    if (s->in_min < c + 1) s->in_min = flag_min(s, 0);
    return s->in_min >= c + 1;
}
/* All p slices of chunk c are reduced. */
static int chunk_reduced(const shm_state *s, uint64_t c) {
    const uint64_t want = (c / s->sets + 1) * (uint64_t)s->p;
    return atomic_load_explicit(&set_line(s, (unsigned)(c % s->sets))[1], memory_order_acquire) >= want;
}
/* Chunk c had no claimed reductions (the one-chunk path, or a count mismatch): rank 0 counts
 * its p slices claimed and done before it marks the chunk copied out, so the set's next use
 * (which waits for that mark) finds the counters where they would be. */
static void skip_reductions(shm_state *s, uint64_t c) {
    if (s->rank != 0) return;
    _Atomic uint64_t *sl = set_line(s, (unsigned)(c % s->sets));
    atomic_fetch_add_explicit(&sl[0], (uint64_t)s->p, memory_order_acq_rel);
    atomic_fetch_add_explicit(&sl[1], (uint64_t)s->p, memory_order_acq_rel);
}
/* Whether a step of the operation could run now (a waiting rank's last look before it sleeps). */
static int can_progress(shm_state *s, rl_shm_op *o) {
    if (!o->checked) return inputs_in(s, o->base) || (o->next_in == 0 && set_free(s, o->base));
    if (o->next_out < o->next_in && (o->small || chunk_reduced(s, o->base + o->next_out))) return 1;
    if (!o->small && o->red < o->nch && inputs_in(s, o->base + o->red)) return 1;
    return o->next_in < o->nch && set_free(s, o->base + o->next_in);
}

/* Advances the operation as far as it can without waiting: STEP_DONE, or what it waits for.
 * `node`: the private duplicate (MPI_COMM_NULL while it is pending). `blocking`: a call that
 * can still decline after the set-up (it then takes the usual path); a nonblocking one runs the
 * MPI library's allreduce on the duplicate instead. */
static int op_step(rl_shm_op *o, MPI_Comm node, int blocking) {
    shm_state *s = o->s;
    const int p = s->p;
    for (;;) {
        switch (o->state) {
        case OP_DONE:
            return STEP_DONE;
        case OP_TURN:
            if (atomic_load_explicit(&s->serving, memory_order_acquire) != o->ticket) return STEP_OTHER;
            o->state = OP_SETUP;
            o->moved = 1;
            continue;
        case OP_SETUP:
            if (s->ready != 2 || (s->usable && s->slot < o->want_slot)) {
                if (s->node == MPI_COMM_NULL) {
                    if (node == MPI_COMM_NULL) return STEP_OTHER;
                    s->node = node;
                }
                if (s->ready != 1) {
                    /* grow by at least doubling: a sweep of sizes remaps a few times only */
                    size_t w = o->want_slot, twice = 2 * s->slot;
                    s->want_slot = s->usable && twice > w ? (twice < s->slot_max ? twice : s->slot_max) : w;
                    s->ready = 1;
                    s->phase = 0;
                }
                if (!setup_step(s)) return STEP_OTHER;
                o->moved = 1;
            }
            if (!s->usable) {
                if (blocking) { /* the caller takes the usual path */
                    o->rc = RL_SHM_DECLINED;
                    op_finish(o);
                    return STEP_DONE;
                }
                if (PMPI_Iallreduce(o->sendbuf, o->recvbuf, o->count, o->type, o->op, s->node, &o->lib) != MPI_SUCCESS)
                    o->lib = MPI_REQUEST_NULL, o->rc = MPI_ERR_INTERN;
                o->state = OP_LIB;
                continue;
            }
            o->per = s->slot / (size_t)o->extent; /* elements per chunk */
            o->nch = (o->n + o->per - 1) / o->per;
            o->base = s->chunks; /* (every rank numbers the same chunks: the calls agree) */
            o->next_in = o->next_out = o->red = 0;
            o->checked = 0;
            o->state = OP_RUN;
            continue;
        case OP_RUN: {
            /* Whatever this rank can do now, in this order: copy in its next chunk if that
             * chunk's set is free (first: the peers wait for it), check the call headers, copy
             * out reduced chunks, reduce any unclaimed slice of a chunk every rank has copied
             * in; again until nothing is left. */
            const unsigned K = s->sets;
            const uint64_t G = (uint64_t)p;
            o->gen = atomic_load_explicit(s->gen, memory_order_seq_cst);
            int did;
            do {
                did = 0;
                /* copy in the next chunk (first: the peers wait for it) */
                if (o->next_in < o->nch && (o->next_in == 0 || o->checked) && set_free(s, o->base + o->next_in)) {
                    const uint64_t c = o->base + o->next_in;
                    const unsigned k = (unsigned)(c % K);
                    if (o->next_in == 0) { /* the call header, in the set of its first chunk */
                        int32_t *mine = hdr_line(s, k, s->rank);
                        mine[0] = o->count;
                        mine[1] = o->tsize;
                    }
                    test_delay(s);
                    const size_t off = (size_t)o->next_in * o->per * (size_t)o->extent;
                    memcpy(set_data(s, k) + (size_t)s->rank * s->slot, o->src + off,
                           span(chunk_m(o, o->next_in), o->extent, o->true_ub));
                    o->next_in++;
                    publish(s, 0, c + 1);
                    did = 1;
                }
                if (!o->checked && inputs_in(s, o->base)) {
                    /* every rank has written its header and copied in chunk 0: all see the
                     * same headers, so all agree (and on a mismatch all stop here, with only
                     * chunk 0 copied in by anyone: they mark it copied out and the next call
                     * starts at the next chunk on every rank) */
                    int agree = 1;
                    for (int r = 0; r < p; r++) {
                        const int32_t *h = hdr_line(s, (unsigned)(o->base % K), r);
                        agree &= h[0] == o->count && h[1] == o->tsize;
                    }
                    if (!agree) {
                        skip_reductions(s, o->base);
                        s->chunks = o->base + 1;
                        publish(s, 1, o->base + 1);
                        o->rc = MPI_ERR_TRUNCATE;
                        op_finish(o);
                        return STEP_DONE;
                    }
                    o->checked = 1;
                    did = 1;
                }
                /* copy out */
                while (o->checked && o->next_out < o->next_in) {
                    const uint64_t c = o->base + o->next_out;
                    const char *set = set_data(s, (unsigned)(c % K));
                    const size_t m = chunk_m(o, o->next_out);
                    if (o->small) { /* one chunk: fold all p inputs into the receive buffer */
                        test_delay(s);
                        const char *last = set + (size_t)(p - 1) * s->slot;
                        if (o->kernel && p > 1) {
                            o->kernel(set + (size_t)(p - 2) * s->slot, last, o->dst, m);
                            for (int r = p - 3; r >= 0; r--) o->kernel(set + (size_t)r * s->slot, o->dst, o->dst, m);
                        } else {
                            memcpy(o->dst, last, m * (size_t)o->extent);
                            for (int r = p - 2; r >= 0 && o->rc == MPI_SUCCESS; r--)
                                o->rc = PMPI_Reduce_local(set + (size_t)r * s->slot, o->dst, (int)m, o->type, o->op);
                        }
                        skip_reductions(s, c);
                    } else {
                        if (!chunk_reduced(s, c)) break;
                        test_delay(s);
                        const char *res = set + (size_t)(p - 1) * s->slot;
                        char *d = o->dst + (size_t)o->next_out * o->per * (size_t)o->extent;
                        if (o->rc == MPI_SUCCESS) {
                            if (o->dense) memcpy(d, res, m * (size_t)o->extent);
                            else o->rc = copy_out_typed(s, d, res, (int)m, o->type);
                        }
                    }
                    o->next_out++;
                    publish(s, 1, c + 1);
                    did = 1;
                }
                /* reduce: claim slices (any rank may reduce any slice, so a rank that is not
                 * running delays only its own copies) */
                while (!o->small && o->checked && o->red < o->nch && inputs_in(s, o->base + o->red)) {
                    const uint64_t c = o->base + o->red, lo = c / K * G, hi = lo + G;
                    _Atomic uint64_t *sl = set_line(s, (unsigned)(c % K));
                    uint64_t v = atomic_load_explicit(&sl[0], memory_order_relaxed);
                    int got = 0;
                    while (v < hi)
                        if (atomic_compare_exchange_weak_explicit(&sl[0], &v, v + 1, memory_order_acq_rel,
                                                                  memory_order_relaxed)) {
                            got = 1;
                            break;
                        }
                    if (!got) { /* all claimed (v >= lo always: the set's previous use is done) */
                        o->red++;
                        continue;
                    }
                    test_delay(s);
                    const uint64_t j = v - lo;
                    const size_t m = chunk_m(o, o->red), a = (size_t)(m * j / G), b = (size_t)(m * (j + 1) / G);
                    if (b > a) {
                        const char *set = set_data(s, (unsigned)(c % K));
                        const size_t off = a * (size_t)o->extent;
                        char *acc = (char *)set + (size_t)(p - 1) * s->slot + off;
                        int rc = MPI_SUCCESS;
                        for (int r = p - 2; r >= 0 && rc == MPI_SUCCESS; r--) {
                            const char *x = set + (size_t)r * s->slot + off;
                            if (o->kernel) o->kernel(x, acc, acc, b - a);
                            else rc = PMPI_Reduce_local(x, acc, (int)(b - a), o->type, o->op);
                        }
                        if (rc != MPI_SUCCESS && o->rc == MPI_SUCCESS) o->rc = rc;
                    }
                    /* (also after a failed user op: the peers must not wait) */
                    if (atomic_fetch_add_explicit(&sl[1], 1, memory_order_acq_rel) + 1 == hi) wake(s);
                    did = 1;
                }
                if (did) o->moved = 1;
            } while (did);
            if (o->next_out == o->nch) {
                s->chunks = o->base + o->nch;
                op_finish(o);
                return STEP_DONE;
            }
            return STEP_BARRIER;
        }
        case OP_LIB: {
            int flag = 1;
            if (o->lib != MPI_REQUEST_NULL) {
                MPI_Status st;
                int rc = PMPI_Test(&o->lib, &flag, &st);
                if (rc != MPI_SUCCESS) o->rc = rc, flag = 1;
                if (!flag) return STEP_OTHER;
            }
            op_finish(o);
            return STEP_DONE;
        }
        }
    }
}

int rl_shm_allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                     rl_kernel kernel, char *why, size_t whylen) {
    rl_shm_op o;
    int rc = op_init(&o, sendbuf, recvbuf, count, type, op, comm, kernel, why, whylen);
    if (rc != MPI_SUCCESS) return rc;
    shm_state *s = o.s;
    MPI_Comm node = s->node;
    if (node == MPI_COMM_NULL && rl_private_comm(comm, &node) != MPI_SUCCESS) {
        snprintf(why, whylen, "shm: no private duplicate of the communicator");
        return RL_SHM_DECLINED; /* (the usual path reports the error) */
    }
    op_start(&o);
    /* A waiting rank spins (when every rank has a core), then yields, then sleeps on the
     * wake word's futex; meanwhile it progresses the active nonblocking operations (the ones
     * ahead of this call on this communicator, and peers' needs on others) and, every 16
     * checks, the MPI library (MPI_Iprobe on the private duplicate), as the library's own
     * collectives do. */
    unsigned spins = 0, yields = 0;
    for (;;) {
        int st = op_step(&o, node, 1);
        if (st == STEP_DONE) break;
        if (o.moved) spins = yields = 0, o.moved = 0;
        if (st == STEP_BARRIER && spins < s->spin) {
            spins++;
            cpu_relax();
            continue;
        }
        if (st != STEP_BARRIER || yields < s->yields) {
            sched_yield();
        } else { /* sleep until the last rank's wake (or 50 µs, to progress the others) */
            const struct timespec ts = {0, 50000};
            atomic_fetch_add_explicit(s->sleepers, 1, memory_order_seq_cst);
            if (!can_progress(s, &o)) futex(s->gen, FUTEX_WAIT, o.gen, &ts); /* returns at once if gen moved on */
            atomic_fetch_sub_explicit(s->sleepers, 1, memory_order_acq_rel);
        }
        rl_progress_others();
        if (++yields % PROBE_EVERY == 0 && s->node != MPI_COMM_NULL) {
            int flag;
            PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, s->node, &flag, MPI_STATUS_IGNORE);
        }
    }
    if (o.rc == RL_SHM_DECLINED) {
        snprintf(why, whylen, "%s", s->why);
        return RL_SHM_DECLINED;
    }
    if (o.rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, o.rc);
    return o.rc;
}

/* ---- nonblocking and persistent (progress.c progresses them like the schedules) ---- */

int rl_shm_op_create(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                     rl_kernel kernel, rl_shm_op **out, char *why, size_t whylen) {
    rl_shm_op *o = malloc(sizeof *o);
    if (!o) {
        snprintf(why, whylen, "shm: out of memory");
        return RL_SHM_DECLINED;
    }
    int rc = op_init(o, sendbuf, recvbuf, count, type, op, comm, kernel, why, whylen);
    if (rc != MPI_SUCCESS) {
        free(o);
        return rc;
    }
    atomic_fetch_add(&o->s->refs, 1);
    *out = o;
    return MPI_SUCCESS;
}

void rl_shm_op_start(rl_shm_op *o) { op_start(o); }

int rl_shm_op_progress(rl_shm_op *o, MPI_Comm node, int *err) {
    int st = op_step(o, node, 0);
    if (st == STEP_DONE) {
        *err = o->rc;
        return 1;
    }
    /* Waiting for the peers' flags while the ranks outnumber the cores (no spinning): the caller polls
     * (MPI_Wait, MPI_Test loops), so give the core to the ranks this one waits for, as Open
     * MPI's progress yields when oversubscribed (mpi_yield_when_idle): yield, and after
     * REDUCELAB_SHM_YIELDS calls in a row, sleep on the wake word's futex (at most 50 µs per call),
     * as the blocking path waits. Without it, MPI_Iallreduce + MPI_Wait of 16 MiB on 4 ranks, 2
     * cores, took twice the library's time. */
    shm_state *s = o->s;
    if (o->moved) o->moved = 0, o->waits = 0;
    if (st == STEP_BARRIER && s->spin == 0) {
        if (++o->waits <= s->yields) {
            sched_yield();
        } else {
            const struct timespec ts = {0, 50000};
            atomic_fetch_add_explicit(s->sleepers, 1, memory_order_seq_cst);
            if (!can_progress(s, o)) futex(s->gen, FUTEX_WAIT, o->gen, &ts);
            atomic_fetch_sub_explicit(s->sleepers, 1, memory_order_acq_rel);
        }
    }
    return 0;
}

void rl_shm_op_free(rl_shm_op *o) {
    if (!o) return;
    shm_state_release(o->s);
    free(o);
}
