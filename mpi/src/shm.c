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
    int usable; /* 0: not on one node, or no segment: the call goes elsewhere (why) */
    char why[240];
    MPI_Comm node; /* the runtime's private duplicate of the communicator (engine.c owns it) */
    int p, rank;
    size_t slot;    /* bytes per rank per set */
    size_t bytes;   /* mapping */
    char *base;
    _Atomic uint64_t *arrived;   /* header line 0: the barrier counter, */
    _Atomic uint32_t *gen;       /* the barrier's generation (a futex word) */
    _Atomic uint32_t *sleepers;  /* and how many ranks sleep on it */
    uint64_t epoch; /* barriers this rank has passed on this communicator */
    uint64_t chunks; /* chunks processed on this communicator: the set is chunks & 1 */
    unsigned spin, yields; /* a waiting rank spins, then yields, then sleeps on a futex */
    size_t small;   /* dense vectors up to this many bytes: one barrier, every rank reduces all */
    char *pack;     /* types with holes: MPI_Pack buffer */
    int pack_bytes;
} shm_state;

static int shm_keyval = MPI_KEYVAL_INVALID;
static pthread_once_t keyval_once = PTHREAD_ONCE_INIT;
static atomic_int nsegments;
static atomic_uint name_seq;

int RL_Shm_segments(void) { return atomic_load(&nsegments); }

static void shm_state_free(shm_state *s) {
    if (!s) return;
    if (s->base) {
        munmap(s->base, s->bytes);
        atomic_fetch_sub(&nsegments, 1);
    }
    free(s->pack);
    free(s);
}

static int shm_delete(MPI_Comm comm, int keyval, void *attr, void *extra) {
    (void)comm, (void)keyval, (void)extra;
    shm_state_free(attr);
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

/* Completes a nonblocking collective of the set-up, progressing the active nonblocking
 * operations meanwhile (a peer may need them before it reaches this call). */
static int wait_progressing(MPI_Request *req) {
    for (;;) {
        int flag = 0, rc = PMPI_Test(req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || flag) return rc;
        rl_progress_others();
    }
}

/* The collective set-up (every rank of comm calls it at the same collective call). Only
 * nonblocking collectives on the private duplicate, completed while progressing the active
 * nonblocking operations: a blocking MPI_Comm_split_type here deadlocked a rank that entered
 * its first shared-memory allreduce while a peer waited for an MPI_Iallreduce it had started
 * before (the runtime's MPI_Comm_idup has the same reason). Whether the ranks share memory is
 * asked of the memory itself: rank 0 makes the segment and writes a random nonce in it; the
 * others open it by name and must find the nonce (on another node the name does not exist, or
 * is another job's segment without the nonce); an allreduce of the outcomes makes every rank
 * decide alike. */
static void setup(MPI_Comm comm, shm_state *s) {
    int p = 0, rank = 0;
    PMPI_Comm_size(comm, &p);
    PMPI_Comm_rank(comm, &rank);
    s->p = p;
    s->rank = rank;
    if (rl_private_comm(comm, &s->node) != MPI_SUCCESS) {
        s->node = MPI_COMM_NULL;
        snprintf(s->why, sizeof s->why, "shm: no private duplicate of the communicator");
        return;
    }
    char bad[200] = "";
    size_t budget = env_size("REDUCELAB_SHM_BYTES", RL_SHM_DEFAULT_BYTES, (size_t)1 << 40, bad, sizeof bad);
    size_t slot = budget / (2 * (size_t)p) / 4096 * 4096;
    if (slot < 4096) slot = 4096;
    s->slot = slot;
    s->bytes = HEADER_BYTES(p) + 2 * (size_t)p * slot;
    s->bytes = (s->bytes + 4095) / 4096 * 4096;
    /* spinning before yielding: only when every rank can have a core */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    s->spin = (unsigned)env_size("REDUCELAB_SHM_SPIN", cores > 0 && p <= cores ? 2000 : 0, 1u << 30, bad, sizeof bad);
    s->yields = (unsigned)env_size("REDUCELAB_SHM_YIELDS", RL_SHM_DEFAULT_YIELDS, 1u << 30, bad, sizeof bad);
    s->small = env_size("REDUCELAB_SHM_SMALL", RL_SHM_DEFAULT_SMALL, (size_t)1 << 40, bad, sizeof bad);
    if (bad[0]) { /* (every rank sees the same environment: all decline) */
        snprintf(s->why, sizeof s->why, "%s", bad);
        return;
    }
    if (s->small > slot) s->small = slot;

    struct {
        char name[56];
        uint64_t nonce;
    } id;
    memset(&id, 0, sizeof id);
    int ok = 1, fd = -1;
    char err[160] = "";
    if (rank == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id.nonce = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^ (uintptr_t)s;
        id.nonce |= 1;
        snprintf(id.name, sizeof id.name, "/reducelab-%ld-%u", (long)getpid(), atomic_fetch_add(&name_seq, 1));
        fd = shm_open(id.name, O_CREAT | O_EXCL | O_RDWR, 0600);
        int e = 0;
        if (fd < 0) e = errno;
        else if (ftruncate(fd, (off_t)s->bytes) != 0) e = errno;
        else e = posix_fallocate(fd, 0, (off_t)s->bytes); /* tmpfs full: an error now, not SIGBUS later */
        if (e) {
            snprintf(err, sizeof err, "shm: cannot create a %zu-byte segment in /dev/shm (%s)", s->bytes, strerror(e));
            if (fd >= 0) close(fd), shm_unlink(id.name);
            fd = -1;
            ok = 0;
        }
    }
    MPI_Request req;
    /* (a failed creation broadcasts nonce 0: nobody opens anything) */
    if (!ok) memset(&id, 0, sizeof id);
    if (PMPI_Ibcast(&id, sizeof id, MPI_BYTE, 0, s->node, &req) != MPI_SUCCESS || wait_progressing(&req) != MPI_SUCCESS) {
        snprintf(s->why, sizeof s->why, "shm: the set-up's broadcast failed");
        if (fd >= 0) close(fd), shm_unlink(id.name);
        return;
    }
    if (!id.nonce) ok = 0;
    if (ok && rank != 0 && (fd = shm_open(id.name, O_RDWR, 0600)) < 0) {
        snprintf(err, sizeof err, "shm: rank %d cannot open rank 0's segment (%s): not on rank 0's node", rank,
                 strerror(errno));
        ok = 0;
    }
    if (ok) {
        void *m = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            snprintf(err, sizeof err, "shm: cannot map the segment (%s)", strerror(errno));
            ok = 0;
        } else {
            s->base = m;
            atomic_fetch_add(&nsegments, 1);
            uint64_t *nonce = (uint64_t *)(s->base + LINE); /* header line 1 */
            if (rank == 0) atomic_store((_Atomic uint64_t *)nonce, id.nonce);
            /* (rank 0 stores it before the allreduce below, the others read it after) */
        }
    }
    if (fd >= 0) close(fd);
    int all = 0;
    if (PMPI_Iallreduce(&ok, &all, 1, MPI_INT, MPI_MIN, s->node, &req) != MPI_SUCCESS || wait_progressing(&req) != MPI_SUCCESS)
        all = 0;
    if (all && rank != 0 && atomic_load((_Atomic uint64_t *)(s->base + LINE)) != id.nonce) {
        snprintf(err, sizeof err, "shm: rank %d opened a segment of that name without rank 0's nonce: not on "
                 "rank 0's node", rank);
        ok = 0;
    }
    /* a second round: every rank learns whether all found the nonce (every rank has opened, so
     * rank 0 may unlink the name) */
    int all2 = 0;
    if (all) {
        if (PMPI_Iallreduce(&ok, &all2, 1, MPI_INT, MPI_MIN, s->node, &req) != MPI_SUCCESS ||
            wait_progressing(&req) != MPI_SUCCESS)
            all2 = 0;
    }
    if (rank == 0 && id.nonce) shm_unlink(id.name);
    if (!all || !all2) {
        snprintf(s->why, sizeof s->why, "%s", err[0] ? err : "shm: another rank could not map rank 0's segment (not "
                                                             "all ranks on one node, or /dev/shm)");
        if (s->base) {
            munmap(s->base, s->bytes);
            atomic_fetch_sub(&nsegments, 1);
            s->base = NULL;
        }
        return;
    }
    s->arrived = (_Atomic uint64_t *)s->base;
    s->gen = (_Atomic uint32_t *)(s->base + 8);
    s->sleepers = (_Atomic uint32_t *)(s->base + 12);
    s->usable = 1;
}

static shm_state *get_state(MPI_Comm comm) {
    pthread_once(&keyval_once, make_keyval);
    if (shm_keyval == MPI_KEYVAL_INVALID) return NULL;
    shm_state *s = NULL;
    int flag = 0;
    if (PMPI_Comm_get_attr(comm, shm_keyval, &s, &flag) != MPI_SUCCESS) return NULL;
    if (flag) return s;
    if (!(s = calloc(1, sizeof *s))) return NULL;
    setup(comm, s);
    if (PMPI_Comm_set_attr(comm, shm_keyval, s) != MPI_SUCCESS) {
        shm_state_free(s);
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

/* The last rank to arrive bumps the generation word and wakes the sleepers, if any. */
static void barrier(shm_state *s) {
    uint64_t target = ++s->epoch * (uint64_t)s->p;
    uint32_t gen = atomic_load_explicit(s->gen, memory_order_acquire);
    /* (seq_cst where a store is followed by a load of another word: the last rank's gen bump
     * and a sleeper's count must not both miss each other; a miss would cost one 50 µs sleep) */
    if (atomic_fetch_add_explicit(s->arrived, 1, memory_order_seq_cst) + 1 == target) {
        atomic_fetch_add_explicit(s->gen, 1, memory_order_seq_cst);
        if (atomic_load_explicit(s->sleepers, memory_order_seq_cst)) futex(s->gen, FUTEX_WAKE, INT32_MAX, NULL);
        return;
    }
    unsigned spins = 0, yields = 0;
    while (atomic_load_explicit(s->arrived, memory_order_acquire) < target) {
        if (spins < s->spin) {
            spins++;
            cpu_relax();
            continue;
        }
        if (yields < s->yields) {
            sched_yield();
        } else { /* sleep until the last rank's wake (or 50 µs, to progress the others) */
            const struct timespec ts = {0, 50000};
            atomic_fetch_add_explicit(s->sleepers, 1, memory_order_seq_cst);
            if (atomic_load_explicit(s->arrived, memory_order_seq_cst) < target)
                futex(s->gen, FUTEX_WAIT, gen, &ts); /* returns at once if gen moved on */
            atomic_fetch_sub_explicit(s->sleepers, 1, memory_order_acq_rel);
        }
        rl_progress_others();
        if (++yields % PROBE_EVERY == 0) {
            int flag;
            PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, s->node, &flag, MPI_STATUS_IGNORE);
        }
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

int rl_shm_allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                     rl_kernel kernel, char *why, size_t whylen) {
    MPI_Aint lb, extent, tlb, textent;
    int tsize = 0;
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
    if (!s->usable) {
        snprintf(why, whylen, "%s", s->why);
        return RL_SHM_DECLINED;
    }
    if ((size_t)extent > s->slot) {
        snprintf(why, whylen, "shm: an element of %ld bytes is larger than a %zu-byte slot (REDUCELAB_SHM_BYTES)",
                 (long)extent, s->slot);
        return RL_SHM_DECLINED;
    }
    const int p = s->p, rank = s->rank;
    const int dense = (MPI_Aint)tsize == extent && tlb == 0 && textent == extent;
    const MPI_Aint true_ub = tlb + textent;
    const char *src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    char *dst = recvbuf;
    const size_t per = s->slot / (size_t)extent; /* elements per chunk */
    char *data = s->base + HEADER_BYTES(p);
    /* the headers alternate like the sets: a rank's next call must not overwrite what a slower
     * rank is still checking */
    char *headers = s->base + (size_t)LINE * (size_t)(2 + (int)(s->chunks & 1) * p);
    int64_t *mine = (int64_t *)(headers + (size_t)LINE * (size_t)rank);
    mine[0] = count;
    mine[1] = tsize;
    int rc = MPI_SUCCESS;
    size_t n = (size_t)count;
    const int small = dense && n * (size_t)extent <= s->small;
    for (size_t off = 0, c = 0; off < n; off += per, c++) {
        size_t m = n - off < per ? n - off : per;
        /* sets alternate across calls too: the previous call's last set may still be read */
        char *set = data + (s->chunks++ & 1) * (size_t)p * s->slot;
        memcpy(set + (size_t)rank * s->slot, src + off * (size_t)extent, span(m, extent, true_ub));
        barrier(s);
        if (c == 0) {
            int agree = 1;
            for (int r = 0; r < p; r++) {
                const int64_t *h = (const int64_t *)(headers + (size_t)LINE * (size_t)r);
                agree &= h[0] == count && h[1] == tsize;
            }
            if (!agree) { /* every rank sees the same headers: all stop here, together (the
                           * barrier keeps a fast rank's next call off the headers) */
                barrier(s);
                rc = MPI_ERR_TRUNCATE;
                break;
            }
        }
        if (small) { /* one chunk: every rank folds all p inputs into its own buffer (no second
                      * barrier; set reuse two chunks later is safe as for the others) */
            const size_t b = m * (size_t)extent;
            const char *last = set + (size_t)(p - 1) * s->slot;
            if (kernel && p > 1) {
                kernel(set + (size_t)(p - 2) * s->slot, last, dst, m);
                for (int r = p - 3; r >= 0; r--) kernel(set + (size_t)r * s->slot, dst, dst, m);
            } else {
                memcpy(dst, last, b);
                for (int r = p - 2; r >= 0 && rc == MPI_SUCCESS; r--)
                    rc = PMPI_Reduce_local(set + (size_t)r * s->slot, dst, (int)m, type, op);
            }
            break;
        }
        size_t lo = m * (size_t)rank / (size_t)p, hi = m * (size_t)(rank + 1) / (size_t)p;
        if (hi > lo) {
            size_t o = lo * (size_t)extent;
            char *acc = set + (size_t)(p - 1) * s->slot + o;
            for (int r = p - 2; r >= 0 && rc == MPI_SUCCESS; r--) {
                const char *x = set + (size_t)r * s->slot + o;
                if (kernel) kernel(x, acc, acc, hi - lo);
                else rc = PMPI_Reduce_local(x, acc, (int)(hi - lo), type, op);
            }
        }
        barrier(s); /* (also after a failed user op: the peers must not wait) */
        const char *res = set + (size_t)(p - 1) * s->slot;
        if (rc == MPI_SUCCESS && m) {
            if (dense) memcpy(dst + off * (size_t)extent, res, m * (size_t)extent);
            else rc = copy_out_typed(s, dst + off * (size_t)extent, res, (int)m, type);
        }
        if (off + m >= n) break;
    }
    if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
    return rc;
}
