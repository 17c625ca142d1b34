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
 * Segment: a header (line 0: the barrier counter and its futex words; line 1: rank 0's nonce;
 * then two sets of one line per rank with the call's count and type size, alternating like the
 * slots) and two sets of p slots of `slot` bytes. A vector is processed
 * in chunks of slot/extent elements, alternating sets (double buffering), so any vector needs
 * only the bounded segment. Per chunk:
 *   1. each rank copies its chunk of the input into its slot of the set;      barrier
 *   2. rank r reduces elements [r·m/p, (r+1)·m/p) of the chunk over the p slots, into slot
 *      p−1: acc = x_{p−1}; acc = x_r ⊕ acc for r = p−2 … 0 (MPI's rank order, so user ops that
 *      do not commute are exact too; with the runtime's kernels for predefined ops and
 *      MPI_Reduce_local for user ops);                                          barrier
 *   3. each rank copies the chunk's result out of slot p−1 (types with holes: by the type map,
 *      MPI_Pack/MPI_Unpack, so gap bytes of the receive buffer are never written).
 * Dense vectors of at most REDUCELAB_SHM_SMALL bytes (4 KiB) take one barrier: after step 1
 * every rank folds all p slots into its own receive buffer, in the same order.
 * Chunk c+2 reuses chunk c's set only after the barrier that ends chunk c+1's reductions,
 * which every rank reaches after its copy-out of chunk c: two barriers per chunk (the chunk
 * count runs on across calls, so a call's first chunk never reuses the previous call's last set).
 *
 * The barrier is a monotone 64-bit counter (C11 atomics: fetch_add, loads with acquire): the n-th barrier of the communicator is passed when the counter reaches n·p. A
 * waiting rank spins `spin` times (REDUCELAB_SHM_SPIN; 0 when there are more ranks than cores:
 * a spinning rank would hold the core the others need), then yields its core (sched_yield)
 * between checks, 100 times (REDUCELAB_SHM_YIELDS), then sleeps on a futex (the barrier's
 * generation word, which the last rank to arrive bumps and wakes; at most 50 µs per sleep).
 * Measured with 4 and 8 ranks on 2 cores at load 10 (docs/mpi.md): yielding forever had the
 * worst cases (library/shm 0.94–1.00 at 1–16 MiB), sleeping at once cost the small sizes.
 * Between checks it progresses the runtime's active nonblocking operations and, every 16
 * checks, the MPI library (an MPI_Iprobe on the private duplicate), as the library's own
 * collectives do.
 *
 * Counts: every rank publishes (count, type size) before the first barrier and checks all
 * others' after it; all see the same values, so all agree and return MPI_ERR_TRUNCATE together
 * on a mismatch (never MPI_SUCCESS with wrong data).
 *
 * Threads: all state is per communicator (MPI forbids two threads in collectives on one
 * communicator at once), the keyval is made once (pthread_once) and the segment count is
 * atomic, so two threads on two communicators may run it at MPI_THREAD_MULTIPLE. */
#define _GNU_SOURCE
#include "rl_internal.h"
#include "rl_entry.h"
#include "rl_shm.h"

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
#define HEADER_BYTES(p) ((size_t)LINE * (size_t)(2 + 2 * (p)))
#define RL_SHM_DEFAULT_BYTES ((size_t)4 << 20) /* data area per communicator (both sets) */
#define PROBE_EVERY 16
#define RL_SHM_DEFAULT_SMALL 4096
#define RL_SHM_DEFAULT_YIELDS 100

typedef struct {
    /* the attribute and every live operation hold a reference (the communicator may be freed
     * while a nonblocking one is still running, which MPI allows) */
    atomic_int refs;
    /* set-up: 0 not made yet, 1 in progress (a sequence of nonblocking collectives on `node`),
     * 2 done (usable or not) */
    int ready, usable;
    char why[240];
    MPI_Comm node; /* the runtime's private duplicate of the communicator (engine.c owns it) */
    int p, rank;
    size_t slot;     /* bytes per rank per set of the current segment */
    size_t slot_max; /* REDUCELAB_SHM_BYTES / 2p, rounded down to 4 KiB (at least 4 KiB) */
    size_t bytes;    /* mapping */
    char *base;
    _Atomic uint64_t *arrived;   /* header line 0: the barrier counter, */
    _Atomic uint32_t *gen;       /* the barrier's generation (a futex word) */
    _Atomic uint32_t *sleepers;  /* and how many ranks sleep on it */
    uint64_t epoch; /* barriers this rank has passed on this segment */
    uint64_t chunks; /* chunks processed on this segment: the set is chunks & 1 */
    unsigned spin, yields; /* a waiting rank spins, then yields, then sleeps on a futex */
    size_t small;   /* dense vectors up to this many bytes: one barrier, every rank reduces all */
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
    size_t n, per, off, m, want_slot;
    char *set, *headers;
    int state, rc, moved;
    unsigned waits; /* nonblocking: progress calls in a row that found the barrier not passed */
    uint64_t ticket, target;
    uint32_t gen; /* the barrier's generation when this rank arrived (futex sleeps) */
    MPI_Request lib; /* the set-up found no shared segment: the MPI library's allreduce */
};

enum { OP_TURN, OP_SETUP, OP_CHUNK, OP_WAIT1, OP_WAIT2, OP_WAITERR, OP_LIB, OP_DONE };
enum { STEP_DONE, STEP_BARRIER, STEP_OTHER }; /* what a step that did not finish waits for */

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
    size_t slot = budget / (2 * (size_t)p) / 4096 * 4096;
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
 * A later call that needs larger slots runs it again (the old segment is unmapped first: the
 * previous call's barriers are all passed, so no rank reads it any more). */
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
            s->bytes = (HEADER_BYTES(s->p) + 2 * (size_t)s->p * s->slot + 4095) / 4096 * 4096;
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
            s->epoch = s->chunks = 0;
            if (!s->all || !s->all2) {
                snprintf(s->why, sizeof s->why, "%s",
                         s->err[0] ? s->err
                                   : "shm: another rank could not map rank 0's segment (not all ranks on one node, "
                                     "or /dev/shm)");
                unmap(s);
                s->usable = 0;
                return 1;
            }
            s->arrived = (_Atomic uint64_t *)s->base;
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

/* Arrival at the communicator's next barrier; the last rank to arrive bumps the generation
 * word and wakes the sleepers, if any. */
static void arrive(shm_state *s, rl_shm_op *o) {
    o->target = ++s->epoch * (uint64_t)s->p;
    o->gen = atomic_load_explicit(s->gen, memory_order_acquire);
    /* (seq_cst where a store is followed by a load of another word: the last rank's gen bump
     * and a sleeper's count must not both miss each other; a miss would cost one 50 µs sleep) */
    if (atomic_fetch_add_explicit(s->arrived, 1, memory_order_seq_cst) + 1 == o->target) {
        atomic_fetch_add_explicit(s->gen, 1, memory_order_seq_cst);
        if (atomic_load_explicit(s->sleepers, memory_order_seq_cst)) futex(s->gen, FUTEX_WAKE, INT32_MAX, NULL);
    }
}
static int passed(const shm_state *s, const rl_shm_op *o) {
    return atomic_load_explicit(s->arrived, memory_order_acquire) >= o->target;
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
    o->off = 0;
}

static void op_finish(rl_shm_op *o) {
    o->state = OP_DONE;
    atomic_fetch_add_explicit(&o->s->serving, 1, memory_order_release);
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
            /* the headers alternate like the sets: a rank's next call must not overwrite what a
             * slower rank is still checking */
            o->headers = s->base + (size_t)LINE * (size_t)(2 + (int)(s->chunks & 1) * p);
            {
                int64_t *mine = (int64_t *)(o->headers + (size_t)LINE * (size_t)s->rank);
                mine[0] = o->count;
                mine[1] = o->tsize;
            }
            o->per = s->slot / (size_t)o->extent; /* elements per chunk */
            o->off = 0;
            o->state = OP_CHUNK;
            continue;
        case OP_CHUNK: {
            o->m = o->n - o->off < o->per ? o->n - o->off : o->per;
            /* sets alternate across calls too: the previous call's last set may still be read */
            o->set = s->base + HEADER_BYTES(p) + (s->chunks++ & 1) * (size_t)p * s->slot;
            memcpy(o->set + (size_t)s->rank * s->slot, o->src + o->off * (size_t)o->extent,
                   span(o->m, o->extent, o->true_ub));
            arrive(s, o);
            o->state = OP_WAIT1;
            continue;
        }
        case OP_WAIT1: {
            if (!passed(s, o)) return STEP_BARRIER;
            o->moved = 1;
            if (o->off == 0) {
                int agree = 1;
                for (int r = 0; r < p; r++) {
                    const int64_t *h = (const int64_t *)(o->headers + (size_t)LINE * (size_t)r);
                    agree &= h[0] == o->count && h[1] == o->tsize;
                }
                if (!agree) { /* every rank sees the same headers: all stop here, together (the
                               * barrier keeps a fast rank's next call off the headers) */
                    arrive(s, o);
                    o->state = OP_WAITERR;
                    continue;
                }
            }
            const size_t m = o->m;
            if (o->small) { /* one chunk: every rank folds all p inputs into its own buffer (no
                             * second barrier; set reuse two chunks later is safe as for the others) */
                const char *last = o->set + (size_t)(p - 1) * s->slot;
                if (o->kernel && p > 1) {
                    o->kernel(o->set + (size_t)(p - 2) * s->slot, last, o->dst, m);
                    for (int r = p - 3; r >= 0; r--) o->kernel(o->set + (size_t)r * s->slot, o->dst, o->dst, m);
                } else {
                    memcpy(o->dst, last, m * (size_t)o->extent);
                    for (int r = p - 2; r >= 0 && o->rc == MPI_SUCCESS; r--)
                        o->rc = PMPI_Reduce_local(o->set + (size_t)r * s->slot, o->dst, (int)m, o->type, o->op);
                }
                op_finish(o);
                return STEP_DONE;
            }
            size_t lo = m * (size_t)s->rank / (size_t)p, hi = m * (size_t)(s->rank + 1) / (size_t)p;
            if (hi > lo) {
                size_t off = lo * (size_t)o->extent;
                char *acc = o->set + (size_t)(p - 1) * s->slot + off;
                for (int r = p - 2; r >= 0 && o->rc == MPI_SUCCESS; r--) {
                    const char *x = o->set + (size_t)r * s->slot + off;
                    if (o->kernel) o->kernel(x, acc, acc, hi - lo);
                    else o->rc = PMPI_Reduce_local(x, acc, (int)(hi - lo), o->type, o->op);
                }
            }
            arrive(s, o); /* (also after a failed user op: the peers must not wait) */
            o->state = OP_WAIT2;
            continue;
        }
        case OP_WAIT2: {
            if (!passed(s, o)) return STEP_BARRIER;
            o->moved = 1;
            const char *res = o->set + (size_t)(p - 1) * s->slot;
            char *d = o->dst + o->off * (size_t)o->extent;
            if (o->rc == MPI_SUCCESS && o->m) {
                if (o->dense) memcpy(d, res, o->m * (size_t)o->extent);
                else o->rc = copy_out_typed(s, d, res, (int)o->m, o->type);
            }
            o->off += o->m;
            if (o->off >= o->n) {
                op_finish(o);
                return STEP_DONE;
            }
            o->state = OP_CHUNK;
            continue;
        }
        case OP_WAITERR:
            if (!passed(s, o)) return STEP_BARRIER;
            o->rc = MPI_ERR_TRUNCATE;
            op_finish(o);
            return STEP_DONE;
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
     * barrier's futex; meanwhile it progresses the active nonblocking operations (the ones
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
            if (!passed(s, &o)) futex(s->gen, FUTEX_WAIT, o.gen, &ts); /* returns at once if gen moved on */
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

/* ---- nonblocking and persistent (engine.c progresses them like its schedules) ---- */

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
    /* Waiting at the barrier while the ranks outnumber the cores (no spinning): the caller polls
     * (MPI_Wait, MPI_Test loops), so give the core to the ranks this one waits for, as Open
     * MPI's progress yields when oversubscribed (mpi_yield_when_idle): yield, and after
     * REDUCELAB_SHM_YIELDS calls in a row, sleep on the barrier's futex (at most 50 µs per call),
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
            if (!passed(s, o)) futex(s->gen, FUTEX_WAIT, o->gen, &ts);
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
