/* ReduceLab MPI runtime: executes one rank's program of a schedule (crates/sched, through the
 * C ABI of crates/capi) over nonblocking MPI point-to-point.
 *
 * Execution of a step (the IR's contract, docs/schedules.md): post every receive (into scratch,
 * or straight into the user buffer for a copy of one contiguous range no other transfer of the
 * step touches), post every send (from the user buffer, or packed into scratch when the blocks
 * are not contiguous), wait for all of them, then apply the receives in the order listed.
 * Messages of zero elements are skipped on both sides (both sides compute the same sizes).
 *
 * All internal communication uses PMPI_* on a duplicate of the user's communicator (cached as
 * an attribute) with a per-call tag from a per-communicator sequence number, so it never
 * matches the application's messages and concurrent nonblocking operations do not mix. */
#define _GNU_SOURCE
#include "reducelab_mpi.h"
#include "rl_rules.h"
#include "rl_internal.h"
#include "rl_entry.h"
#include "rl_shm.h"
#include "rl_innet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <limits.h>

/* ------------------------------------------------------------------------------------------ */
/* Settings and counters                                                                        */

static long long n_scheduled, n_fallback;
static char last_algorithm[64];
static int verbose = -1;

void RL_Counters(long long *scheduled, long long *fallback) {
    if (scheduled) *scheduled = n_scheduled;
    if (fallback) *fallback = n_fallback;
}
const char *RL_Last_algorithm(void) { return last_algorithm; }

static void print_counters(void) {
    fprintf(stderr, "reducelab: %lld collectives ran ReduceLab schedules, %lld went to the MPI library\n", n_scheduled,
            n_fallback);
}

/* REDUCELAB_VERBOSE=1: fallbacks are explained as they happen and the counters printed at exit. */
static int is_verbose(void) {
    if (verbose < 0) {
        const char *v = getenv("REDUCELAB_VERBOSE");
        verbose = v && *v && strcmp(v, "0") != 0;
        if (verbose) atexit(print_counters);
    }
    return verbose;
}

/* With REDUCELAB_VERBOSE, one line per process for each distinct reason (the first 32), so a
 * loop does not flood stderr. Locked: the shared-memory path may call it from two threads. */
static void note_once(const char *prefix, const char *why) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char seen[32][200];
    static int nseen;
    if (!is_verbose()) return;
    pthread_mutex_lock(&mu);
    int known = nseen == 32;
    for (int i = 0; i < nseen && !known; i++) known = strncmp(seen[i], why, sizeof seen[i] - 1) == 0;
    if (!known) {
        snprintf(seen[nseen++], sizeof seen[0], "%s", why);
        fprintf(stderr, "reducelab: %s (said once per reason): %s\n", prefix, why);
    }
    pthread_mutex_unlock(&mu);
}

/* A call handed to the MPI library. */
static void note_fallback(const char *why) {
    n_fallback++;
    note_once("falling back to the MPI library", why);
}

/* Thread levels. The application's level is what it asked for in MPI_Init_thread, capped by
 * what the library gave (recorded by the interposition library's MPI_Init/MPI_Init_thread,
 * rl_set_app_thread_level); without that record (the RL_* library alone), the library's level
 * (PMPI_Query_thread). The two differ only when REDUCELAB_PROGRESS=thread raised the library
 * to MPI_THREAD_MULTIPLE for the progress thread.
 *
 * Rule: when the APPLICATION is at MPI_THREAD_MULTIPLE, every call goes to the MPI library
 * (counted atomically; REDUCELAB_VERBOSE says so once): the program cache, the last call's
 * execution and the blocking scratch are per process and unlocked, and locks around blocking
 * collectives could deadlock (two ranks' threads taking them in opposite orders), unless
 * REDUCELAB_THREADS=serialized says the application never has two threads in these calls at
 * once (mpi4py asks for MPI_THREAD_MULTIPLE by default, for example). The level cannot change
 * after MPI_Init_thread, so it is asked once.
 *
 * Whenever the LIBRARY is at MPI_THREAD_MULTIPLE (the progress thread, or an application at
 * that level), the list of active nonblocking operations and everything they touch while they
 * progress (their executions, the communicator's pending duplicate) are under one mutex
 * (rl_mu; `locking`), which no thread holds while blocked in MPI. */
static int app_level = -1;
void rl_set_app_thread_level(int level) { __atomic_store_n(&app_level, level, __ATOMIC_RELEASE); }

static int thread_multiple(void) {
    static int level = -1;
    int l = __atomic_load_n(&level, __ATOMIC_ACQUIRE);
    if (l < 0) {
        int provided = __atomic_load_n(&app_level, __ATOMIC_ACQUIRE);
        const char *t = getenv("REDUCELAB_THREADS"); /* "serialized": the application promises it */
        if (provided < 0) PMPI_Query_thread(&provided);
        l = provided == MPI_THREAD_MULTIPLE && !(t && strcmp(t, "serialized") == 0);
        __atomic_store_n(&level, l, __ATOMIC_RELEASE);
    }
    return l;
}

static pthread_mutex_t rl_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rl_cv = PTHREAD_COND_INITIALIZER; /* an operation became active (progress thread) */
static int locking = -1;
static int use_lock(void) {
    int l = __atomic_load_n(&locking, __ATOMIC_ACQUIRE);
    if (l < 0) {
        int provided = MPI_THREAD_SINGLE, init = 0;
        PMPI_Initialized(&init);
        if (!init) return 0; /* before MPI_Init: one thread by MPI's rules; decide later */
        PMPI_Query_thread(&provided);
        l = provided == MPI_THREAD_MULTIPLE;
        __atomic_store_n(&locking, l, __ATOMIC_RELEASE);
    }
    return l;
}
/* This thread holds rl_mu (an MPI callback run from inside our own progress must not lock it). */
static __thread int mu_held;
static void lock(void) {
    if (use_lock()) {
        pthread_mutex_lock(&rl_mu);
        mu_held = 1;
    }
}
static void unlock(void) {
    if (use_lock()) {
        mu_held = 0;
        pthread_mutex_unlock(&rl_mu);
    }
}
static void note_thread_fallback(void) {
    static int told;
    __atomic_fetch_add(&n_fallback, 1, __ATOMIC_RELAXED);
    if (!__atomic_exchange_n(&told, 1, __ATOMIC_ACQ_REL) && is_verbose())
        fprintf(stderr, "reducelab: falling back to the MPI library (said once per reason): MPI_THREAD_MULTIPLE "
                        "(ReduceLab's per-process state is not locked; every call goes to the MPI library; "
                        "REDUCELAB_THREADS=serialized if calls never overlap)\n");
}

static const char *op_name(MPI_Op op) {
    const MPI_Op ops[] = {MPI_MAX, MPI_MIN, MPI_SUM, MPI_PROD, MPI_LAND, MPI_BAND, MPI_LOR,
                          MPI_BOR, MPI_LXOR, MPI_BXOR, MPI_MAXLOC, MPI_MINLOC, MPI_REPLACE, MPI_NO_OP};
    const char *names[] = {"MPI_MAX", "MPI_MIN", "MPI_SUM", "MPI_PROD", "MPI_LAND", "MPI_BAND", "MPI_LOR",
                           "MPI_BOR", "MPI_LXOR", "MPI_BXOR", "MPI_MAXLOC", "MPI_MINLOC", "MPI_REPLACE", "MPI_NO_OP"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (op == ops[i]) return names[i];
    return "a user op";
}

/* ------------------------------------------------------------------------------------------ */
/* Program cache: (algorithm, collective, shape, rank) -> program                               */

typedef struct prog_entry {
    char algorithm[64];
    int collective;
    uint32_t dims[8];
    size_t ndims;
    uint32_t rank;
    const RlProgram *prog;
    struct prog_entry *next;
} prog_entry;
static prog_entry *prog_cache;

static int get_program(const char *alg, int coll, const uint32_t *dims, size_t ndims, uint32_t rank,
                       const RlProgram **out, char *err, size_t errlen) {
    for (prog_entry *e = prog_cache; e; e = e->next)
        if (e->collective == coll && e->rank == rank && e->ndims == ndims && strcmp(e->algorithm, alg) == 0 &&
            memcmp(e->dims, dims, ndims * sizeof *dims) == 0) {
            *out = e->prog;
            return 0;
        }
    const RlProgram *p = NULL;
    int rc = rl_program_build(alg, coll, dims, ndims, rank, &p, err, errlen);
    if (rc != 0) return rc;
    prog_entry *e = calloc(1, sizeof *e);
    if (!e) {
        rl_program_free(p);
        snprintf(err, errlen, "out of memory");
        return 3;
    }
    snprintf(e->algorithm, sizeof e->algorithm, "%s", alg);
    e->collective = coll;
    memcpy(e->dims, dims, ndims * sizeof *dims);
    e->ndims = ndims;
    e->rank = rank;
    e->prog = p;
    e->next = prog_cache;
    prog_cache = e;
    *out = p;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Per-communicator state: a private duplicate and a sequence number for tags                  */

/* The duplicate is made with MPI_Comm_idup at the first ReduceLab call on the communicator
 * (that call is a collective on it, so every rank starts the duplicate at the same point of
 * the communicator's collective order) and completed without blocking: a nonblocking
 * operation keeps it in its state machine (progress_exec binds the operation to the duplicate
 * once the idup has completed), and a blocking call waits for it while progressing the
 * active nonblocking operations. A blocking PMPI_Comm_dup inside the first MPI_Iallreduce
 * deadlocked two fresh communicators started in opposite orders on two ranks. */
typedef struct {
    MPI_Comm dup;
    MPI_Request dup_req; /* the pending MPI_Comm_idup (under rl_mu), MPI_REQUEST_NULL once done */
    int users;    /* active operations on it (under rl_mu) */
    int orphaned; /* the user's communicator was freed: the last user frees this state */
    unsigned seq;
    int tag_ub;
} comm_state;
static int comm_keyval = MPI_KEYVAL_INVALID;

static void forget_comm(const void *st);
static void progress_locked(void);

/* 1 once the duplicate exists (rl_mu held). */
static int comm_ready_locked(comm_state *st) {
    if (st->dup_req == MPI_REQUEST_NULL) return 1;
    int flag = 0;
    if (PMPI_Test(&st->dup_req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag) return 0;
    st->dup_req = MPI_REQUEST_NULL;
    /* errors of internal messages (a truncated receive: counts differ across ranks) come
     * back to us; we finish the schedule and report through the user's communicator */
    PMPI_Comm_set_errhandler(st->dup, MPI_ERRORS_RETURN);
    return 1;
}

/* Blocking callers: waits for the duplicate, progressing the active nonblocking operations
 * meanwhile (their peers may need them before they reach this collective). */
static void comm_wait_ready(comm_state *st) {
    for (;;) {
        lock();
        int ready = comm_ready_locked(st);
        if (!ready) progress_locked();
        unlock();
        if (ready) return;
    }
}

static void unbind_comm_state(comm_state *st);

/* MPI_Comm_free of the user's communicator. Operations on it may still be active, which MPI
 * allows: then the last of them to complete frees the duplicate and the state (between two
 * steps no request holds the duplicate, so freeing it now would destroy it under them; Open MPI
 * 4.1's own MPI_Iallreduce crashes in this case). */
static int comm_state_delete(MPI_Comm comm, int keyval, void *attr, void *extra) {
    (void)comm, (void)keyval, (void)extra;
    comm_state *st = attr;
    if (st) {
#ifdef MPICH_VERSION
        /* MPICH holds the communicator until its MPI_Comm_idup completes, so it runs this
         * callback from inside the completion of that very request, often within our own
         * progress (rl_mu held by this thread): testing the request again here fails MPICH's
         * reference-count assertion. So the duplicate is neither waited for nor tested: active
         * operations bind themselves to it when it is ready (progress_exec) and the last one
         * frees the state; without any (a persistent plan never started), the duplicate is left
         * to MPI_Finalize. (Open MPI 4.1's idup does not hold the communicator: below, the
         * duplicate must be complete before the communicator goes.) */
        int held = mu_held;
        if (!held) lock();
        int defer = st->users > 0 || st->dup_req != MPI_REQUEST_NULL;
        if (defer) {
            st->orphaned = 1;
            forget_comm(st);
        }
        if (!held) unlock();
        if (defer) return MPI_SUCCESS;
#endif
        comm_wait_ready(st);
        unbind_comm_state(st);
        forget_comm(st);
        lock();
        int users = st->users;
        if (users) st->orphaned = 1;
        unlock();
        if (!users) {
            PMPI_Comm_free(&st->dup);
            free(st);
        }
    }
    return MPI_SUCCESS;
}

static int comm_keyval_rc = MPI_SUCCESS;
static void make_comm_keyval(void) {
    comm_keyval_rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_state_delete, &comm_keyval, NULL);
}

/* The communicator's state; its duplicate may still be pending (comm_ready_locked). (Two
 * threads may get the states of two communicators at once: the shared-memory path.) */
static int get_comm_state(MPI_Comm comm, comm_state **out) {
    int flag = 0, rc;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, make_comm_keyval);
    if (comm_keyval_rc != MPI_SUCCESS) return comm_keyval_rc;
    comm_state *st = NULL;
    rc = PMPI_Comm_get_attr(comm, comm_keyval, &st, &flag);
    if (rc != MPI_SUCCESS) return rc;
    if (!flag) {
        st = calloc(1, sizeof *st);
        if (!st) return MPI_ERR_NO_MEM;
        st->dup = MPI_COMM_NULL;
        rc = PMPI_Comm_idup(comm, &st->dup, &st->dup_req);
        if (rc != MPI_SUCCESS) {
            free(st);
            return rc;
        }
        int *ub = NULL, f = 0;
        PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &f);
        st->tag_ub = f && ub ? *ub : 32767;
        rc = PMPI_Comm_set_attr(comm, comm_keyval, st);
        if (rc != MPI_SUCCESS) {
            comm_wait_ready(st);
            PMPI_Comm_free(&st->dup);
            free(st);
            return rc;
        }
    }
    *out = st;
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* Algorithm names and the virtual torus                                                        */

/* Tags: the per-communicator sequence number (concurrent operations never mix) and, where the
 * MPI library allows tags up to 2^31-1, a hash of (count, type size) in bits 16-30, so that
 * ranks called with different counts never match each other's messages. Without it a
 * mismatch returns wrong data, or worse: Open MPI 4.1 writes a truncated rendezvous receive
 * past the end of the buffer. The hash is count + 7919·size mod 32749 (+1), so counts that
 * differ by less than 32749 never collide. Such a call waits forever, as the MPI library's
 * own collectives may; REDUCELAB_CHECK=1 turns it into MPI_ERR_TRUNCATE on every rank (see
 * check_load). The count check uses the bare sequence number (hash field 0). */

/* Shape from REDUCELAB_TORUS ("4x2", "8"): 1 and the shape if its product is p, 1 and [p] if
 * unset or another size, 0 (with a message) if malformed. */
static int torus_for(int p, uint32_t *dims, size_t *ndims, char *err, size_t errlen) {
    const char *t = getenv("REDUCELAB_TORUS");
    dims[0] = (uint32_t)p;
    *ndims = 1;
    if (!t || !*t) return 1;
    uint32_t d[8];
    size_t n = 0;
    const char *s = t;
    unsigned long long prod = 1;
    while (*s) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || v == 0 || v > 1u << 20 || n == 8) {
            snprintf(err, errlen, "REDUCELAB_TORUS='%s' is not a shape like 4x2 (1 to 8 positive sizes)", t);
            return 0;
        }
        d[n++] = (uint32_t)v;
        prod *= v;
        s = end;
        if (*s == 'x' || *s == 'X') {
            s++;
            if (!*s) {
                snprintf(err, errlen, "REDUCELAB_TORUS='%s' ends with 'x'", t);
                return 0;
            }
        } else if (*s) {
            snprintf(err, errlen, "REDUCELAB_TORUS='%s' is not a shape like 4x2", t);
            return 0;
        }
    }
    if (prod == (unsigned long long)p) {
        memcpy(dims, d, n * sizeof *d);
        *ndims = n;
    }
    return 1;
}

/* The algorithm registry (crates/sched/src/registry.rs through crates/capi) is the only list
 * of names: RL_Algorithm_count/RL_Algorithm_name expose it, rl_algorithm_resolve turns any of its
 * names (variant, family, alias, the `auto` policy) into the variant that runs. "mpi" is not an
 * algorithm but this runtime's "hand the call to the MPI library". */
int RL_Algorithm_count(void) { return (int)rl_algorithm_count(); }

const char *RL_Algorithm_name(int i) {
    RlAlgorithmInfo info;
    if (i < 0 || rl_algorithm_info((size_t)i, &info) != 0) return NULL;
    return info.name;
}

/* The variant the checker proves rank-ordered on 1D (non-commutative operators), or NULL. */
static const char *rank_ordered_variant(void) {
    RlAlgorithmInfo info;
    for (size_t i = 0; rl_algorithm_info(i, &info) == 0; i++)
        if (info.rank_ordered_1d) return info.name;
    return NULL;
}

static int in_registry(const char *name) {
    RlAlgorithmInfo info;
    for (size_t i = 0; rl_algorithm_info(i, &info) == 0; i++)
        if (strcmp(info.name, name) == 0) return 1;
    return 0;
}

/* "unknown ReduceLab algorithm 'x' (known: <every registry name>, mpi)". */
static void unknown_algorithm(const char *name, char *err, size_t errlen) {
    size_t n = (size_t)snprintf(err, errlen, "unknown ReduceLab algorithm '%s' (known: ", name);
    RlAlgorithmInfo info;
    for (size_t i = 0; n < errlen && rl_algorithm_info(i, &info) == 0; i++)
        n += (size_t)snprintf(err + n, errlen - n, "%s, ", info.name);
    if (n < errlen) snprintf(err + n, errlen - n, "mpi, shm)");
}

/* Resolves a user-facing name to a variant (or "mpi"). 0 and a message if unknown. Families
 * are resolved by the α-β model with α = 2 µs per message and β = 1/(4 GB/s) (shared memory on
 * one node; the exact values matter little, see docs/mpi.md). `substitute`: the interposition
 * library's reduce-scatter / allgather substitutes (registry field `substitute`). */
static int resolve(const char *name, int coll, const uint32_t *dims, size_t ndims, size_t bytes, int substitute,
                   const char **out, char *err, size_t errlen) {
    if (!name || !*name) name = getenv("REDUCELAB_ALLREDUCE");
    if (!name || !*name) name = "auto";
    if (strcmp(name, "shm") == 0) { /* the shared-memory path is an allreduce (an allreduce it declined
                                      * has said why: try_shm, shm_exec) */
        if (coll != RL_COLL_ALLREDUCE)
            note_once("shm not used", "reduce-scatter and allgather calls run auto's path (the shared-memory "
                                      "path is an allreduce)");
        name = "auto";
    }
    if (rl_innet_named(name)) { /* through the software switch: blocking allreduces only */
        note_once("switch algorithm not used", "nonblocking, persistent, reduce-scatter and allgather calls run auto's path "
                                     "(the switch path is blocking allreduce only)");
        name = "auto";
    }
    if (strcmp(name, "mpi") == 0) {
        *out = "mpi";
        return 1;
    }
    int rc = rl_algorithm_resolve(name, coll, dims, ndims, (uint64_t)bytes, 2e-6, 1.0 / 4e9, substitute, out, err,
                                  errlen);
    if (rc != 0 && !in_registry(name)) unknown_algorithm(name, err, errlen);
    return rc == 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Execution                                                                                    */

typedef struct rl_exec {
    const RlProgram *prog;
    MPI_Comm comm;
    int tag, tag_base; /* see next_tag */
    char *buf; /* working vector */
    /* Input not yet copied into buf (NULL: in place). fresh[b] = 1 while block b's current
     * value is still the input's: sends read it from there and the first reduction writes
     * `in ⊕ input` into buf, which saves copying the input (a full pass over the vector). */
    const char *src;
    unsigned char *fresh;
    size_t final_lo, final_hi; /* elements that must hold the result in buf at the end */
    size_t count;
    MPI_Datatype type;
    MPI_Aint extent, true_ub;
    int tsize;
    /* 1: the type map covers [0, extent) exactly (every predefined type but some pair types):
     * byte copies of whole extents are exact. 0: the type has holes, which MPI says must not
     * be written: the collective runs on a private working vector (`work`) and only the bytes
     * the type covers are copied into the user's buffer at the end (typed_copy). */
    int dense;
    MPI_Op op;
    rl_kernel kernel;
    int commute;
    char *scratch;
    size_t scratch_bytes;
    int own_scratch;
    int keep_scratch; /* persistent: the scratch outlives each run */
    uint32_t step;
    int posted;
    MPI_Request *reqs;
    MPI_Status *stats;
    size_t *req_n;      /* per receive request: elements expected */
    uint32_t *req_xfer; /* per request: index of its receive in the step, UINT32_MAX for sends */
    int *idx;           /* MPI_Waitsome indices */
    size_t reqcap;
    size_t seg;         /* elements per message segment (SIZE_MAX: no segmentation) */
    size_t *offs;
    int nreqs;
    size_t maxx; /* most transfers in one step */
    /* after the last step: copy `out_n` elements from buf+out_from to out (reduce-scatter,
     * and any collective on a type with holes) */
    char *out;
    size_t out_from, out_n;
    char *work; /* malloc'd working vector to free at the end, if any */
    /* Counts differ across ranks (a receive got another size than this rank's count implies):
     * MPI_ERR_TRUNCATE, sticky. The rank still runs every step (so that no peer waits
     * forever) but applies nothing and sends empty messages, which its peers detect in turn. */
    int err;
    /* Schedules whose messages do not all carry the whole vector (sizes alone may not reveal a
     * count mismatch): a latency-schedule allreduce of the counts runs first (count_check). */
    struct rl_exec *check;
    unsigned char chk_in[40], chk_out[40];
    int check_done; /* nonblocking: the check of the current run has completed */
    int result;     /* nonblocking: the completed run's error code */
    int *greq_err;  /* the generalized request's extra state: `result` for its query function */
    /* nonblocking */
    MPI_Request greq;
    int done;
    int detached; /* MPI_Request_free'd while active: free the request when complete */
    comm_state *cs; /* nonblocking: comm stays MPI_COMM_NULL until cs's duplicate exists */
    struct rl_exec *next_active;
    /* not a schedule: the shared-memory allreduce (shm.c) as a nonblocking operation (prog NULL) */
    rl_shm_op *shm;
} rl_exec;

/* Active nonblocking operations (under rl_mu); progress_events counts steps completed, so the
 * progress thread knows whether a sweep moved anything. */
static rl_exec *active;
static unsigned long progress_events;
static int progress_thread_on;

/* A blocking collective waits with PMPI_Waitall/Waitsome, unless nonblocking operations are
 * active and no progress thread runs: then with tests that progress them too (their peers may
 * need them before they join this collective). */
static int others_need_progress(void) {
    return !__atomic_load_n(&progress_thread_on, __ATOMIC_ACQUIRE) && __atomic_load_n(&active, __ATOMIC_ACQUIRE);
}
static int wait_all_progressing(int n, MPI_Request *reqs, MPI_Status *stats) {
    if (!others_need_progress()) return PMPI_Waitall(n, reqs, stats);
    for (;;) {
        int flag = 0, rc = PMPI_Testall(n, reqs, &flag, stats);
        if (rc != MPI_SUCCESS || flag) return rc;
        RL_Progress();
    }
}
static int wait_some_progressing(int n, MPI_Request *reqs, int *outcount, int *idx, MPI_Status *stats) {
    if (!others_need_progress()) return PMPI_Waitsome(n, reqs, outcount, idx, stats);
    for (;;) {
        int rc = PMPI_Testsome(n, reqs, outcount, idx, stats);
        if ((rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) || *outcount != 0) return rc;
        RL_Progress();
    }
}

static size_t elem_lo(const rl_exec *ex, uint32_t block) {
    return (size_t)((unsigned __int128)block * ex->count / ex->prog->blocks);
}
static const uint32_t *ranges_of(const rl_exec *ex, const RlTransfer *t) { return ex->prog->ranges + 2 * t->first_range; }
static size_t xfer_elems(const rl_exec *ex, const RlTransfer *t) {
    const uint32_t *r = ranges_of(ex, t);
    size_t n = 0;
    for (uint32_t i = 0; i < t->nranges; i++) n += elem_lo(ex, r[2 * i + 1]) - elem_lo(ex, r[2 * i]);
    return n;
}
/* Bytes spanned by n consecutive elements (the last one up to its true upper bound). */
static size_t span(const rl_exec *ex, size_t n) { return n ? (n - 1) * (size_t)ex->extent + (size_t)ex->true_ub : 0; }

/* Blocks [b, e) split into runs of equal freshness: the end of the run starting at b. */
static uint32_t run_end(const rl_exec *ex, uint32_t b, uint32_t e) {
    if (!ex->src) return e;
    uint32_t k = b + 1;
    while (k < e && ex->fresh[k] == ex->fresh[b]) k++;
    return k;
}
static const char *base_of(const rl_exec *ex, uint32_t b) { return ex->src && ex->fresh[b] ? ex->src : ex->buf; }
static void mark_written(rl_exec *ex, uint32_t b, uint32_t e) {
    if (ex->src) memset(ex->fresh + b, 0, e - b);
}

/* Scratch bytes step s needs. */
static size_t step_scratch(const rl_exec *ex, const RlStep *st) {
    size_t b = 0;
    for (uint32_t k = 0; k < st->nsends + st->nrecvs; k++) {
        const RlTransfer *t = &ex->prog->transfers[st->first + k];
        int needs = t->op == RL_SEND ? (t->nranges > 1 || ex->src) : !t->direct;
        if (needs) b += xfer_elems(ex, t) * (size_t)ex->extent;
    }
    return b;
}

static size_t max_step_transfers(const RlProgram *p) {
    size_t m = 0;
    for (uint32_t s = 0; s < p->nsteps; s++)
        if (p->steps[s].nsends + p->steps[s].nrecvs > m) m = p->steps[s].nsends + p->steps[s].nrecvs;
    return m;
}

/* Segments of a transfer of n elements (both sides compute the same split). */
static size_t nsegs(const rl_exec *ex, size_t n) { return n ? (n - 1) / ex->seg + 1 : 0; }

static int reserve_reqs(rl_exec *ex, size_t n) {
    if (n <= ex->reqcap) return MPI_SUCCESS;
    MPI_Request *r = realloc(ex->reqs, n * sizeof *r);
    if (r) ex->reqs = r;
    MPI_Status *sts = realloc(ex->stats, n * sizeof *sts);
    if (sts) ex->stats = sts;
    size_t *rn = realloc(ex->req_n, n * sizeof *rn);
    if (rn) ex->req_n = rn;
    uint32_t *k = realloc(ex->req_xfer, n * sizeof *k);
    if (k) ex->req_xfer = k;
    int *i = realloc(ex->idx, n * sizeof *i);
    if (i) ex->idx = i;
    if (!r || !k || !i || !sts || !rn) return MPI_ERR_NO_MEM;
    ex->reqcap = n;
    return MPI_SUCCESS;
}

static int ranges_overlap(const rl_exec *ex, const RlTransfer *x, const RlTransfer *y) {
    const uint32_t *a = ranges_of(ex, x), *b = ranges_of(ex, y);
    for (uint32_t i = 0; i < x->nranges; i++)
        for (uint32_t j = 0; j < y->nranges; j++)
            if (a[2 * i] < b[2 * j + 1] && b[2 * j] < a[2 * i + 1]) return 1;
    return 0;
}

/* Receive segments may be applied as they arrive (instead of all at the end, in order) when
 * the op is commutative and no two transfers of the step touch the same block. */
static int step_allows_eager(const rl_exec *ex, const RlStep *st) {
    if (!ex->commute) return 0;
    const RlTransfer *t = &ex->prog->transfers[st->first];
    for (uint32_t k = st->nsends; k < st->nsends + st->nrecvs; k++)
        for (uint32_t j = 0; j < st->nsends + st->nrecvs; j++)
            if (j != k && ranges_overlap(ex, &t[k], &t[j])) return 0;
    return 1;
}

static int post_step(rl_exec *ex) {
    const RlStep *st = &ex->prog->steps[ex->step];
    size_t off = 0, need = 0;
    int rc;
    ex->nreqs = 0;
    for (uint32_t k = 0; k < st->nsends + st->nrecvs; k++)
        need += nsegs(ex, xfer_elems(ex, &ex->prog->transfers[st->first + k]));
    if ((rc = reserve_reqs(ex, need + 1)) != MPI_SUCCESS) return rc;
    /* receives first, so that a peer's eager send finds them posted */
    for (uint32_t k = st->nsends; k < st->nsends + st->nrecvs; k++) {
        const RlTransfer *t = &ex->prog->transfers[st->first + k];
        size_t n = xfer_elems(ex, t);
        ex->offs[k] = off;
        if (n == 0) continue;
        char *dst = t->direct ? ex->buf + elem_lo(ex, ranges_of(ex, t)[0]) * ex->extent : ex->scratch + off;
        if (!t->direct) off += n * (size_t)ex->extent;
        for (size_t j = 0, ns = nsegs(ex, n); j < ns; j++) {
            size_t m = j + 1 < ns ? ex->seg : n - j * ex->seg;
            ex->req_xfer[ex->nreqs] = k;
            ex->req_n[ex->nreqs] = m;
            rc = PMPI_Irecv(dst + j * ex->seg * (size_t)ex->extent, (int)m, ex->type, (int)t->peer, ex->tag, ex->comm,
                            &ex->reqs[ex->nreqs++]);
            if (rc != MPI_SUCCESS) return rc;
        }
    }
    for (uint32_t k = 0; k < st->nsends; k++) {
        const RlTransfer *t = &ex->prog->transfers[st->first + k];
        size_t n = xfer_elems(ex, t);
        if (n == 0) continue;
        const uint32_t *r = ranges_of(ex, t);
        const char *src;
        if (t->nranges == 1 && run_end(ex, r[0], r[1]) == r[1]) {
            src = base_of(ex, r[0]) + elem_lo(ex, r[0]) * ex->extent;
        } else {
            src = ex->scratch + off;
            size_t o = off;
            for (uint32_t i = 0; i < t->nranges; i++)
                for (uint32_t b = r[2 * i], e; b < r[2 * i + 1]; b = e) {
                    e = run_end(ex, b, r[2 * i + 1]);
                    size_t lo = elem_lo(ex, b), m = elem_lo(ex, e) - lo;
                    memcpy(ex->scratch + o, base_of(ex, b) + lo * ex->extent, span(ex, m));
                    o += m * (size_t)ex->extent;
                }
            off += n * (size_t)ex->extent;
        }
        for (size_t j = 0, ns = nsegs(ex, n); j < ns; j++) {
            size_t m = j + 1 < ns ? ex->seg : n - j * ex->seg;
            ex->req_xfer[ex->nreqs] = UINT32_MAX;
            rc = PMPI_Isend((void *)(src + j * ex->seg * (size_t)ex->extent), ex->err ? 0 : (int)m, ex->type, (int)t->peer, ex->tag,
                            ex->comm, &ex->reqs[ex->nreqs++]);
            if (rc != MPI_SUCCESS) return rc;
        }
    }
    return MPI_SUCCESS;
}

/* local = in ⊕ local, where local's current value is at `cur` (buf, or the input). */
static int reduce_into(rl_exec *ex, const char *in, const char *cur, char *local, size_t m) {
    if (ex->kernel) {
        ex->kernel(in, cur, local, m);
        return MPI_SUCCESS;
    }
    if (cur != local) memcpy(local, cur, span(ex, m));
    return PMPI_Reduce_local((void *)in, local, (int)m, ex->type, ex->op);
}

/* Applies the elements [plo, phi) (positions in the message) of receive k of the current step. */
static int apply_recv(rl_exec *ex, uint32_t k, size_t plo, size_t phi) {
    const RlStep *st = &ex->prog->steps[ex->step];
    const RlTransfer *t = &ex->prog->transfers[st->first + k];
    if (t->direct) return MPI_SUCCESS;
    const uint32_t *r = ranges_of(ex, t);
    size_t pos = 0;
    for (uint32_t i = 0; i < t->nranges && pos < phi; i++)
        for (uint32_t b = r[2 * i], e; b < r[2 * i + 1] && pos < phi; b = e) {
            e = run_end(ex, b, r[2 * i + 1]);
            size_t lo = elem_lo(ex, b), m = elem_lo(ex, e) - lo;
            size_t s0 = pos > plo ? pos : plo, s1 = pos + m < phi ? pos + m : phi;
            if (s0 < s1) {
                size_t first = lo + (s0 - pos), cnt = s1 - s0;
                char *local = ex->buf + first * ex->extent, *in = ex->scratch + ex->offs[k] + s0 * (size_t)ex->extent;
                const char *cur = base_of(ex, b) + first * ex->extent;
                int rc = MPI_SUCCESS;
                if (t->op == RL_RECV_COPY) {
                    memcpy(local, in, span(ex, cnt));
                } else if (t->op == RL_RECV_REDUCE_INCOMING_FIRST || ex->commute) {
                    rc = reduce_into(ex, in, cur, local, cnt); /* local = in ⊕ local */
                } else {
                    rc = PMPI_Reduce_local((void *)cur, in, (int)cnt, ex->type, ex->op); /* in = local ⊕ in */
                    memcpy(local, in, span(ex, cnt));
                }
                if (rc != MPI_SUCCESS) return rc;
            }
            pos += m;
        }
    return MPI_SUCCESS;
}

/* After receive k is applied completely: its blocks now live in buf. */
static void mark_recv_written(rl_exec *ex, uint32_t k) {
    const RlTransfer *t = &ex->prog->transfers[ex->prog->steps[ex->step].first + k];
    const uint32_t *r = ranges_of(ex, t);
    for (uint32_t i = 0; i < t->nranges; i++) mark_written(ex, r[2 * i], r[2 * i + 1]);
}

/* Applies every receive of the step in order (after all its transfers completed); a later
 * receive of the same block sees the earlier one's result. */
static int finish_step(rl_exec *ex) {
    const RlStep *st = &ex->prog->steps[ex->step];
    for (uint32_t k = st->nsends; k < st->nsends + st->nrecvs; k++) {
        int rc = apply_recv(ex, k, 0, xfer_elems(ex, &ex->prog->transfers[st->first + k]));
        if (rc != MPI_SUCCESS) return rc;
        mark_recv_written(ex, k);
    }
    return MPI_SUCCESS;
}

/* Receive request q completed with status st (rc: what the wait returned). Sets ex->err when
 * it was truncated or shorter than this rank's count implies: counts differ across ranks.
 * Returns another MPI error, if any. */
static int verify_recv(rl_exec *ex, int q, MPI_Status *st, int rc) {
    if (ex->req_xfer[q] == UINT32_MAX) return rc == MPI_ERR_IN_STATUS ? st->MPI_ERROR : MPI_SUCCESS;
    if (rc == MPI_ERR_IN_STATUS && st->MPI_ERROR != MPI_SUCCESS) {
        int cls = st->MPI_ERROR;
        PMPI_Error_class(st->MPI_ERROR, &cls);
        if (cls != MPI_ERR_TRUNCATE) return st->MPI_ERROR;
        ex->err = MPI_ERR_TRUNCATE;
        return MPI_SUCCESS;
    }
    int got = -1;
    if (PMPI_Get_count(st, ex->type, &got) != MPI_SUCCESS || got < 0 || (size_t)got != ex->req_n[q])
        ex->err = MPI_ERR_TRUNCATE;
    return MPI_SUCCESS;
}

/* After a Waitall/Testall over every request of the step that returned rc. */
static int verify_all(rl_exec *ex, int rc) {
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) return rc;
    int first = MPI_SUCCESS;
    for (int q = 0; q < ex->nreqs; q++) {
        if (rc == MPI_ERR_IN_STATUS && ex->stats[q].MPI_ERROR == MPI_ERR_PENDING) {
            int e = PMPI_Wait(&ex->reqs[q], &ex->stats[q]); /* not completed yet: finish it */
            if (e != MPI_SUCCESS && ex->stats[q].MPI_ERROR == MPI_ERR_PENDING) ex->stats[q].MPI_ERROR = e;
        }
        int e = verify_recv(ex, q, &ex->stats[q], rc);
        if (e != MPI_SUCCESS && first == MPI_SUCCESS) first = e;
    }
    return first;
}

/* Waits for the step's transfers, applying receive segments as they arrive when allowed. */
static int wait_and_finish_step(rl_exec *ex) {
    const RlStep *st = &ex->prog->steps[ex->step];
    if (ex->nreqs == 0) return finish_step(ex);
    if (ex->seg == SIZE_MAX || !step_allows_eager(ex, st)) {
        int rc = verify_all(ex, wait_all_progressing(ex->nreqs, ex->reqs, ex->stats));
        return rc != MPI_SUCCESS || ex->err ? rc : finish_step(ex);
    }
    /* segment index of request q within its transfer: requests of one transfer are consecutive */
    for (;;) {
        int outcount = 0;
        int rc = wait_some_progressing(ex->nreqs, ex->reqs, &outcount, ex->idx, ex->stats);
        if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) return rc;
        if (outcount == MPI_UNDEFINED) break;
        for (int i = 0; i < outcount; i++) {
            int q = ex->idx[i];
            uint32_t k = ex->req_xfer[q];
            int e = verify_recv(ex, q, &ex->stats[i], rc);
            if (e != MPI_SUCCESS) return e;
            if (k == UINT32_MAX || ex->err) continue;
            int q0 = q;
            while (q0 > 0 && ex->req_xfer[q0 - 1] == k) q0--;
            size_t n = xfer_elems(ex, &ex->prog->transfers[st->first + k]);
            size_t lo = (size_t)(q - q0) * ex->seg, hi = lo + ex->seg < n ? lo + ex->seg : n;
            if ((rc = apply_recv(ex, k, lo, hi)) != MPI_SUCCESS) return rc;
        }
    }
    /* segments of one run were applied separately: mark only now (no receive overlaps another) */
    const RlStep *st2 = &ex->prog->steps[ex->step];
    for (uint32_t k = st2->nsends; k < st2->nsends + st2->nrecvs; k++) mark_recv_written(ex, k);
    return MPI_SUCCESS;
}

/* Copies n elements of the execution's type from src to dst. Dense types: one memmove. Types
 * with holes: packed and unpacked by the type map (in pieces of about 1 MiB), so only the
 * bytes the type covers are written. */
static int typed_copy(char *dst, const char *src, size_t n, const rl_exec *ex) {
    if (!n) return MPI_SUCCESS;
    if (ex->dense) {
        memmove(dst, src, span(ex, n));
        return MPI_SUCCESS;
    }
    size_t per = ((size_t)1 << 20) / (size_t)ex->tsize;
    if (per == 0) per = 1;
    if (per > n) per = n;
    int psize = 0, rc = PMPI_Pack_size((int)per, ex->type, MPI_COMM_SELF, &psize);
    if (rc != MPI_SUCCESS) return rc;
    char *tmp = malloc(psize > 0 ? (size_t)psize : 1);
    if (!tmp) return MPI_ERR_NO_MEM;
    for (size_t i = 0; i < n && rc == MPI_SUCCESS; i += per) {
        int m = (int)(n - i < per ? n - i : per), pos = 0, upos = 0;
        rc = PMPI_Pack(src + i * (size_t)ex->extent, m, ex->type, tmp, psize, &pos, MPI_COMM_SELF);
        if (rc == MPI_SUCCESS)
            rc = PMPI_Unpack(tmp, pos, &upos, dst + i * (size_t)ex->extent, m, ex->type, MPI_COMM_SELF);
    }
    free(tmp);
    return rc;
}

static int exec_epilogue(rl_exec *ex) {
    int rc = MPI_SUCCESS;
    if (ex->src) /* blocks never written: the result is the input (e.g. p = 1) */
        for (uint32_t b = 0; b < ex->prog->blocks; b++) {
            size_t lo = elem_lo(ex, b), hi = elem_lo(ex, b + 1);
            if (lo < ex->final_lo) lo = ex->final_lo;
            if (hi > ex->final_hi) hi = ex->final_hi;
            if (ex->fresh[b] && lo < hi) memcpy(ex->buf + lo * ex->extent, ex->src + lo * ex->extent, span(ex, hi - lo));
        }
    if (ex->out && ex->out_n) rc = typed_copy(ex->out, ex->buf + ex->out_from, ex->out_n, ex);
    free(ex->work);
    ex->work = NULL;
    if (ex->own_scratch && !ex->keep_scratch) {
        free(ex->scratch);
        ex->scratch = NULL;
    }
    return rc;
}

static void next_tag(rl_exec *ex, comm_state *cs) {
    unsigned seq = cs->seq++;
    if (cs->tag_ub >= 0x7fffffff) {
        uint64_t h = ((uint64_t)ex->count + 7919u * (uint64_t)ex->tsize) % 32749u + 1u;
        ex->tag_base = (int)(seq & 0xffffu);
        ex->tag = ex->tag_base | (int)(h << 16);
    } else {
        ex->tag = ex->tag_base = (int)(seq % ((unsigned)cs->tag_ub + 1u));
    }
}

/* ---- count check (REDUCELAB_CHECK=1) ----
 * Before the schedule, a latency-schedule allreduce (MAX) of (count, -count, type size,
 * -type size), 33 bytes on every rank (the same size whatever the counts, so nothing is ever
 * truncated), on the bare sequence-number tag: every rank learns whether all agree and, if
 * not, skips the schedule and returns MPI_ERR_TRUNCATE (what Open MPI reports for a count
 * mismatch it detects). It costs one small allreduce per call, so it is off by default. */
#define CHK_BYTES 33
static MPI_Datatype chk_type = MPI_DATATYPE_NULL;

static void chk_kernel(const void *a, const void *b, void *out, size_t n) {
    for (size_t k = 0; k < n; k++) {
        int64_t x[4], y[4];
        memcpy(x, (const char *)a + k * CHK_BYTES, sizeof x);
        memcpy(y, (const char *)b + k * CHK_BYTES, sizeof y);
        for (int i = 0; i < 4; i++)
            if (x[i] > y[i]) y[i] = x[i];
        memcpy((char *)out + k * CHK_BYTES, y, sizeof y);
        ((char *)out)[k * CHK_BYTES + 32] = 0;
    }
}

static void check_load(rl_exec *ex) {
    rl_exec *c = ex->check;
    int64_t v[4] = {(int64_t)ex->count, -(int64_t)ex->count, ex->tsize, -(int64_t)ex->tsize};
    memcpy(ex->chk_in, v, sizeof v);
    ex->chk_in[32] = 0;
    c->buf = (char *)ex->chk_out;
    c->src = (const char *)ex->chk_in;
    memset(c->fresh, 1, c->prog->blocks);
    c->tag = ex->tag_base;
    c->err = 0;
    c->step = 0;
    c->posted = 0;
    ex->check_done = 0;
}

/* After the check ran: 1 if every rank has this rank's count and type size. */
static int check_agrees(const rl_exec *ex) {
    int64_t v[4];
    memcpy(v, ex->chk_out, sizeof v);
    return !ex->check->err && v[0] == (int64_t)ex->count && v[1] == -(int64_t)ex->count && v[2] == ex->tsize &&
           v[3] == -(int64_t)ex->tsize;
}

static int run_blocking(rl_exec *ex) {
    int rc = MPI_SUCCESS, skip = 0;
    ex->err = 0;
    if (ex->check) {
        check_load(ex);
        rc = run_blocking(ex->check);
        if (rc == MPI_SUCCESS && !check_agrees(ex)) ex->err = MPI_ERR_TRUNCATE, skip = 1; /* every rank knows */
    }
    /* a mismatch found by message sizes (ex->err) does not stop the steps: see rl_exec.err */
    for (ex->step = 0; !skip && ex->step < ex->prog->nsteps && rc == MPI_SUCCESS; ex->step++) {
        rc = post_step(ex);
        if (rc == MPI_SUCCESS) rc = wait_and_finish_step(ex);
    }
    int erc = exec_epilogue(ex);
    return rc != MPI_SUCCESS ? rc : erc != MPI_SUCCESS ? erc : ex->err;
}

/* Advances a nonblocking execution as far as it can without blocking; 1 when complete. */
static int progress_exec(rl_exec *ex, int *err) {
    *err = MPI_SUCCESS;
    if (ex->comm == MPI_COMM_NULL && ex->cs) { /* the communicator's duplicate is still pending */
        if (!comm_ready_locked(ex->cs)) return 0;
        ex->comm = ex->cs->dup;
        if (ex->check) ex->check->comm = ex->comm;
        progress_events++;
    }
    if (ex->shm) return rl_shm_op_progress(ex->shm, ex->comm, err);
    if (ex->check && !ex->check_done) {
        int e;
        if (!progress_exec(ex->check, &e)) return 0;
        ex->check_done = 1;
        if (e == MPI_SUCCESS && !check_agrees(ex)) e = MPI_ERR_TRUNCATE;
        if (e != MPI_SUCCESS) {
            ex->err = e;
            *err = e;
            return 1;
        }
    }
    while (ex->step < ex->prog->nsteps) {
        if (!ex->posted) {
            if ((*err = post_step(ex)) != MPI_SUCCESS) return 1;
            ex->posted = 1;
        }
        int flag = 1;
        if (ex->nreqs) {
            int rc = PMPI_Testall(ex->nreqs, ex->reqs, &flag, ex->stats);
            if (rc == MPI_SUCCESS && !flag) return 0;
            if ((*err = verify_all(ex, rc)) != MPI_SUCCESS) return 1;
        }
        ex->posted = 0;
        progress_events++;
        if (!ex->err && (*err = finish_step(ex)) != MPI_SUCCESS) return 1;
        ex->step++;
    }
    *err = ex->err;
    return 1;
}

/* Scratch for blocking calls, kept between calls (large allocations are mmap'ed and page
 * faulting them on every call costs as much as a reduction). */
static char *shared_scratch;
static size_t shared_scratch_bytes;

static void exec_free(rl_exec *ex) {
    if (!ex) return;
    free(ex->work);
    if (ex->own_scratch) free(ex->scratch);
    exec_free(ex->check);
    free(ex->reqs);
    free(ex->stats);
    free(ex->req_n);
    free(ex->req_xfer);
    free(ex->idx);
    free(ex->offs);
    free(ex->fresh);
    rl_shm_op_free(ex->shm);
    free(ex);
}

/* ------------------------------------------------------------------------------------------ */
/* Preparing a collective                                                                       */

/* Message segment size: REDUCELAB_SEGMENT bytes (0 = whole messages, the default: splitting
 * into 128 KiB or 512 KiB pieces applied as they arrive measured no faster on one node). */
#define RL_DEFAULT_SEGMENT 0
static size_t segment_bytes(void) {
    const char *e = getenv("REDUCELAB_SEGMENT");
    if (!e || !*e) return RL_DEFAULT_SEGMENT;
    char *end = NULL;
    long long x = strtoll(e, &end, 10);
    return (*end || x < 0) ? RL_DEFAULT_SEGMENT : (size_t)x;
}

static int is_predefined_op(MPI_Op op) {
    const MPI_Op ops[] = {MPI_MAX, MPI_MIN, MPI_SUM, MPI_PROD, MPI_LAND, MPI_BAND, MPI_LOR, MPI_BOR,
                          MPI_LXOR, MPI_BXOR, MPI_MAXLOC, MPI_MINLOC, MPI_REPLACE, MPI_NO_OP};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (op == ops[i]) return 1;
    return 0;
}

enum { PREP_OK = 0, PREP_FALLBACK = 1, PREP_ERROR = 2 };

static int check_mode(void) {
    const char *e = getenv("REDUCELAB_CHECK");
    return e && *e && strcmp(e, "0") != 0;
}

/* The count check of an execution (see check_load), on recursive doubling's (or Swing's, for
 * the Swing names) latency schedule; NULL if none can be built. */
static rl_exec *make_check(const rl_exec *main, const char *algorithm, const uint32_t *dims, size_t ndims,
                           uint32_t rank) {
    if (chk_type == MPI_DATATYPE_NULL) {
        if (PMPI_Type_contiguous(CHK_BYTES, MPI_BYTE, &chk_type) != MPI_SUCCESS) return NULL;
        PMPI_Type_commit(&chk_type);
    }
    const char *name = algorithm && *algorithm ? algorithm : getenv("REDUCELAB_ALLREDUCE");
    const char *lat = name && strncmp(name, "swing", 5) == 0 ? "swing-latency" : "recursive-doubling-latency";
    char err[512];
    const RlProgram *prog = NULL;
    uint32_t line = main->prog->ranks;
    if (get_program(lat, RL_COLL_ALLREDUCE, dims, ndims, rank, &prog, err, sizeof err) != 0 &&
        get_program("recursive-doubling-latency", RL_COLL_ALLREDUCE, &line, 1, rank, &prog, err, sizeof err) != 0)
        return NULL;
    rl_exec *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->prog = prog;
    c->comm = main->comm;
    c->count = 1;
    c->type = chk_type;
    c->extent = c->true_ub = CHK_BYTES;
    c->tsize = CHK_BYTES;
    c->dense = 1;
    c->op = MPI_MAX;
    c->kernel = chk_kernel;
    c->commute = 1;
    c->maxx = max_step_transfers(prog);
    c->offs = calloc(c->maxx + 1, sizeof *c->offs);
    c->fresh = calloc(prog->blocks + 1, 1);
    c->seg = SIZE_MAX;
    c->final_hi = 1;
    c->own_scratch = c->keep_scratch = 1;
    c->src = (const char *)1; /* size the scratch as prepare does */
    size_t need = 0;
    for (uint32_t s = 0; s < prog->nsteps; s++) {
        size_t b = step_scratch(c, &prog->steps[s]);
        if (b > need) need = b;
    }
    c->src = NULL;
    c->scratch = malloc(need ? need : 1);
    if (!c->offs || !c->fresh || !c->scratch || reserve_reqs(c, c->maxx + 1) != MPI_SUCCESS) {
        exec_free(c);
        return NULL;
    }
    return c;
}

/* Sets up `*out` for collective `coll` whose working vector has `count` elements (allreduce:
 * count; reduce-scatter / allgather: count per rank × p). Returns PREP_OK, PREP_FALLBACK (the
 * MPI library should do it: it also reports invalid arguments as it always does) or PREP_ERROR
 * with an MPI error code in *rc (already passed through the communicator's error handler).
 * `strict`: an algorithm that cannot run this collective on this shape is an error (RL_* API),
 * not a fallback (interposition). `own_scratch`: the execution gets its own scratch buffer. */
static int prepare(int coll, const char *algorithm, MPI_Comm comm, size_t count, MPI_Datatype type, MPI_Op op,
                   int strict, int own_scratch, rl_exec **out, int *rc) {
    char err[512] = "";
    int p = 0, rank = 0, inter = 0, commute = 1;
    *out = NULL;
    *rc = MPI_SUCCESS;
    if (thread_multiple()) {
        note_thread_fallback();
        return PREP_FALLBACK;
    }
    if (comm == MPI_COMM_NULL || type == MPI_DATATYPE_NULL || (coll != RL_COLL_ALLGATHER && op == MPI_OP_NULL))
        return PREP_FALLBACK; /* the MPI library reports these */
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) {
        note_fallback("inter-communicator");
        return PREP_FALLBACK;
    }
    PMPI_Comm_size(comm, &p);
    PMPI_Comm_rank(comm, &rank);
    MPI_Aint lb, extent, tlb, textent;
    if (PMPI_Type_get_extent(type, &lb, &extent) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent(type, &tlb, &textent) != MPI_SUCCESS)
        return PREP_FALLBACK;
    int tsize = 0;
    PMPI_Type_size(type, &tsize);
    if (lb != 0 || tlb < 0 || tlb + textent > extent || extent <= 0 || tsize <= 0) {
        /* (a negative lower bound or data below 0: the working-vector arithmetic assumes
         * bytes in [0, extent); rare enough to leave to the MPI library) */
        note_fallback("datatype with a lower bound, holes before it or zero size");
        return PREP_FALLBACK;
    }
    rl_kernel kernel = NULL;
    if (coll != RL_COLL_ALLGATHER) {
        kernel = rl_kernel_for(op, type);
        if (!kernel && is_predefined_op(op)) {
            char why[300], tname[MPI_MAX_OBJECT_NAME] = "";
            int len = 0;
            PMPI_Type_get_name(type, tname, &len);
            snprintf(why, sizeof why, "%s on %s: no ReduceLab kernel for this (op, datatype) pair",
                     op_name(op), len > 0 ? tname : "a derived datatype");
            note_fallback(why);
            return PREP_FALLBACK; /* includes pairs MPI rejects: it reports them */
        }
        if (!kernel && PMPI_Op_commutative(op, &commute) != MPI_SUCCESS) return PREP_FALLBACK;
    }
    uint32_t dims[8];
    size_t ndims;
    const char *alg = NULL;
    if (!torus_for(p, dims, &ndims, err, sizeof err) ||
        !resolve(algorithm, coll, dims, ndims, count * (size_t)tsize, !strict && coll != RL_COLL_ALLREDUCE, &alg, err,
                 sizeof err)) {
        fprintf(stderr, "reducelab: %s\n", err);
        PMPI_Comm_call_errhandler(comm, MPI_ERR_ARG);
        *rc = MPI_ERR_ARG;
        return PREP_ERROR;
    }
    if (strcmp(alg, "mpi") == 0) {
        is_verbose();
        n_fallback++;
        return PREP_FALLBACK;
    }
    if (!commute && coll == RL_COLL_REDUCE_SCATTER) {
        note_fallback("non-commutative reduce-scatter (no rank-ordered schedule)");
        return PREP_FALLBACK;
    }
    const RlProgram *prog = NULL;
    if (get_program(alg, coll, dims, ndims, (uint32_t)rank, &prog, err, sizeof err) != 0) {
        if (!strict) {
            char why[600];
            snprintf(why, sizeof why, "%s", err);
            note_fallback(why);
            return PREP_FALLBACK;
        }
        fprintf(stderr, "reducelab: %s\n", err);
        PMPI_Comm_call_errhandler(comm, MPI_ERR_ARG);
        *rc = MPI_ERR_ARG;
        return PREP_ERROR;
    }
    if (!commute && !prog->noncommutative_safe) {
        /* The registry's rank-ordered variant on 1D (the checker proves it). */
        uint32_t line = (uint32_t)p;
        const char *ordered = rank_ordered_variant();
        if (!ordered || get_program(ordered, coll, &line, 1, (uint32_t)rank, &prog, err, sizeof err) != 0 ||
            !prog->noncommutative_safe) {
            note_fallback("non-commutative op");
            return PREP_FALLBACK;
        }
    }
    if (coll != RL_COLL_ALLREDUCE) {
        /* Rank r's blocks must be exactly elements [r·n, (r+1)·n) (MPI's layout). */
        if (!prog->block_owner || count % (size_t)p) return PREP_FALLBACK;
        size_t n = count / (size_t)p;
        for (uint32_t b = 0; b < prog->blocks; b++) {
            uint32_t o = prog->block_owner[b];
            size_t lo = (size_t)((unsigned __int128)b * count / prog->blocks);
            size_t hi = (size_t)((unsigned __int128)(b + 1) * count / prog->blocks);
            if (lo < hi && (lo < o * n || hi > (o + 1) * n)) {
                note_fallback("schedule's block owners do not match MPI's layout");
                return PREP_FALLBACK;
            }
        }
    }
    if (count > (size_t)0x7fffffff) {
        note_fallback("more than 2^31-1 elements");
        return PREP_FALLBACK;
    }
    comm_state *cs = NULL;
    if ((*rc = get_comm_state(comm, &cs)) != MPI_SUCCESS) {
        PMPI_Comm_call_errhandler(comm, *rc);
        return PREP_ERROR;
    }
    rl_exec *ex = calloc(1, sizeof *ex);
    if (!ex) goto nomem;
    ex->prog = prog;
    if (own_scratch) { /* nonblocking / persistent: bound to the duplicate by progress_exec */
        ex->cs = cs;
        ex->comm = MPI_COMM_NULL;
    } else {
        comm_wait_ready(cs);
        ex->comm = cs->dup;
    }
    ex->count = count;
    ex->type = type;
    ex->extent = extent;
    ex->true_ub = tlb + textent;
    ex->tsize = tsize;
    ex->dense = (MPI_Aint)tsize == extent && tlb == 0 && textent == extent;
    next_tag(ex, cs); /* after count and tsize */
    ex->op = op;
    ex->kernel = kernel;
    ex->commute = commute;
    ex->maxx = max_step_transfers(prog);
    ex->offs = calloc(ex->maxx + 1, sizeof *ex->offs);
    ex->fresh = calloc(prog->blocks + 1, 1);
    if (!ex->offs || !ex->fresh || reserve_reqs(ex, ex->maxx + 1) != MPI_SUCCESS) goto nomem;
    ex->seg = segment_bytes() / (size_t)extent;
    if (ex->seg == 0) ex->seg = segment_bytes() ? 1 : SIZE_MAX;
    ex->src = (const char *)1; /* size scratch for packing from the input (set for real by the caller) */
    ex->final_hi = count;
    size_t need = 0;
    for (uint32_t s = 0; s < prog->nsteps; s++) {
        size_t b = step_scratch(ex, &prog->steps[s]);
        if (b > need) need = b;
    }
    if (own_scratch) {
        ex->own_scratch = 1;
        ex->scratch = malloc(need ? need : 1);
        if (!ex->scratch) goto nomem;
    } else {
        if (need > shared_scratch_bytes) {
            free(shared_scratch);
            shared_scratch = malloc(need);
            shared_scratch_bytes = shared_scratch ? need : 0;
            if (!shared_scratch) goto nomem;
        }
        ex->scratch = shared_scratch;
    }
    ex->scratch_bytes = need;
    ex->src = NULL;
    if (check_mode() && !(ex->check = make_check(ex, algorithm, dims, ndims, (uint32_t)rank))) goto nomem;
    snprintf(last_algorithm, sizeof last_algorithm, "%s", prog->algorithm);
    n_scheduled++;
    is_verbose();
    *out = ex;
    return PREP_OK;
nomem:
    exec_free(ex);
    *rc = MPI_ERR_NO_MEM;
    PMPI_Comm_call_errhandler(comm, *rc);
    return PREP_ERROR;
}

static int buffer_error(MPI_Comm comm) {
    PMPI_Comm_call_errhandler(comm, MPI_ERR_BUFFER);
    return MPI_ERR_BUFFER;
}

/* A negative count on a valid communicator: MPI_ERR_COUNT here, not from the library, because
 * MPICH 4.0.2 (Debian 12) does not check it and overruns the stack. */
static int negative_count(MPI_Comm comm, int count) {
    if (count >= 0 || comm == MPI_COMM_NULL) return 0;
    PMPI_Comm_call_errhandler(comm, MPI_ERR_COUNT);
    return 1;
}

/* A private working vector of `bytes` for a type with holes (ex->work, also ex->buf). On
 * failure `ex` is freed and the communicator's error handler called. */
static int alloc_work(rl_exec *ex, size_t bytes, MPI_Comm comm) {
    ex->work = malloc(bytes ? bytes : 1);
    if (!ex->work) {
        exec_free(ex);
        PMPI_Comm_call_errhandler(comm, MPI_ERR_NO_MEM);
        return MPI_ERR_NO_MEM;
    }
    ex->buf = ex->work;
    return MPI_SUCCESS;
}

/* Sets up an allreduce's buffers: the result is built in recvbuf, reading blocks from the input
 * until first written (see rl_exec). A type with holes works on a private vector instead,
 * copied into recvbuf by the type map at the end (gaps in recvbuf are never written). */
static int load_allreduce(rl_exec *ex, const void *sendbuf, void *recvbuf) {
    ex->err = 0;
    if (ex->check) check_load(ex);
    ex->out = NULL;
    ex->out_n = 0;
    if (ex->dense) {
        ex->buf = recvbuf;
        ex->src = sendbuf == MPI_IN_PLACE ? NULL : sendbuf;
        if (ex->src) memset(ex->fresh, 1, ex->prog->blocks);
        return MPI_SUCCESS;
    }
    size_t bytes = span(ex, ex->count);
    free(ex->work);
    ex->work = malloc(bytes ? bytes : 1);
    if (!ex->work) return MPI_ERR_NO_MEM;
    ex->buf = ex->work;
    ex->src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    memset(ex->fresh, 1, ex->prog->blocks);
    ex->out = recvbuf;
    ex->out_from = 0;
    ex->out_n = ex->count;
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ */
/* `auto`'s crossover to the MPI library                                                       */

/* Below a measured size the MPI library's own allreduce is faster than any schedule here (its
 * small-message path costs less per call than ours), so `auto` hands those calls to it. Rules:
 * per communicator size, the smallest vector (bytes) from which `auto` runs ReduceLab
 * schedules; a communicator uses the rule of the largest rule size <= its size (none: always
 * schedules). REDUCELAB_RULES=FILE reads them from a file written by `reducelab tune mpi`
 * (lines "RANKS MIN_BYTES", # comments), REDUCELAB_RULES=none disables the crossover, unset
 * uses the shipped defaults below (measured with `reducelab tune mpi`, docs/mpi.md). Every rank
 * must see the same rules (the decision is local and must agree, as for the algorithm).
 * REDUCELAB_RULES and REDUCELAB_ALLREDUCE are read once, at the first decision; after that a
 * decision is a few loads and compares (RL_Auto_uses_library, measured by bench_mpi --decision). */
typedef struct {
    int ranks;
    long long min_bytes;
    /* blocking allreduces of shm_min <= bytes < shm_max use the shared-memory allreduce when
     * the communicator is on one node (shm_max 0: never; LLONG_MAX: no upper bound) */
    long long shm_min, shm_max;
} rl_rule;
static const rl_rule default_rules[] = {RL_DEFAULT_RULES};
static rl_rule rules[64];
static int nrules = -1;  /* -1: not loaded yet */
static int env_auto = 0; /* REDUCELAB_ALLREDUCE is unset, auto or shm (shm's other calls run auto) */
static int env_shm = 0;  /* REDUCELAB_ALLREDUCE=shm */
static char rules_error[400];

static void load_rules_once(void);
static void load_rules(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_rules_once); /* the shared-memory path decides at MPI_THREAD_MULTIPLE too */
}

/* "inf" or a number of bytes */
static int parse_bytes(const char *t, long long *out) {
    if (strcmp(t, "inf") == 0) {
        *out = LLONG_MAX;
        return 1;
    }
    char *end = NULL;
    *out = strtoll(t, &end, 10);
    return end != t && *end == 0 && *out >= 0;
}

static void load_rules_once(void) {
    const char *a = getenv("REDUCELAB_ALLREDUCE");
    env_shm = a && strcmp(a, "shm") == 0;
    env_auto = !a || !*a || strcmp(a, "auto") == 0 || env_shm;
    const char *f = getenv("REDUCELAB_RULES");
    int n = 0;
    if (!f || !*f) {
        for (size_t i = 0; i < sizeof default_rules / sizeof *default_rules && n < 64; i++) rules[n++] = default_rules[i];
    } else if (strcmp(f, "none") != 0) {
        FILE *in = fopen(f, "r");
        if (!in) {
            snprintf(rules_error, sizeof rules_error, "REDUCELAB_RULES='%s': cannot open the file", f);
        } else {
            char line[512];
            for (int ln = 1; fgets(line, sizeof line, in); ln++) {
                char *h = strchr(line, '#');
                if (h) *h = 0;
                char *t = line;
                while (*t == ' ' || *t == '\t') t++;
                if (*t == 0 || *t == '\n' || *t == '\r') continue;
                long long r = 0, b = 0, smin = 0, smax = 0;
                char s1[32] = "", s2[32] = "", extra[2];
                int nf = sscanf(t, "%lld %lld %31s %31s %1s", &r, &b, s1, s2, extra);
                if ((nf != 2 && nf != 4) || r < 1 || r > (1 << 24) || b < 0 ||
                    (nf == 4 && (!parse_bytes(s1, &smin) || smin == LLONG_MAX || !parse_bytes(s2, &smax) ||
                                 smax <= smin))) {
                    snprintf(rules_error, sizeof rules_error,
                             "REDUCELAB_RULES='%s' line %d: want 'RANKS MIN_BYTES' or 'RANKS MIN_BYTES SHM_MIN_BYTES "
                             "SHM_MAX_BYTES' (RANKS >= 1, MIN_BYTES >= 0, SHM_MIN_BYTES < SHM_MAX_BYTES, which may "
                             "be inf)",
                             f, ln);
                    break;
                }
                if (n == 64) {
                    snprintf(rules_error, sizeof rules_error, "REDUCELAB_RULES='%s': more than 64 rules", f);
                    break;
                }
                rules[n++] = (rl_rule){(int)r, b, smin, smax};
            }
            fclose(in);
        }
    }
    /* sorted by ranks, a later line for the same size replaces an earlier one */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && rules[j - 1].ranks > rules[j].ranks; j--) {
            rl_rule t = rules[j];
            rules[j] = rules[j - 1];
            rules[j - 1] = t;
        }
    __atomic_store_n(&nrules, rules_error[0] ? 0 : n, __ATOMIC_RELEASE);
}

/* `auto`'s choice for an allreduce: RL_ROUTE_LIBRARY (below the crossover), RL_ROUTE_SHM (in
 * the rule's shared-memory range; `blocking` calls only) or RL_ROUTE_SCHEDULE (also: another
 * algorithm was asked for, or the arguments are for the library to judge). */
static int auto_route(const char *algorithm, MPI_Comm comm, int count, MPI_Datatype type, int blocking) {
    if (__builtin_expect(__atomic_load_n(&nrules, __ATOMIC_ACQUIRE) < 0, 0)) load_rules();
    if (nrules == 0 || count < 0 || comm == MPI_COMM_NULL || type == MPI_DATATYPE_NULL) return RL_ROUTE_SCHEDULE;
    if (algorithm ? strcmp(algorithm, "auto") != 0 && strcmp(algorithm, "shm") != 0 : !env_auto)
        return RL_ROUTE_SCHEDULE;
    int p = 0, ts = 0;
    if (PMPI_Comm_size(comm, &p) != MPI_SUCCESS || PMPI_Type_size(type, &ts) != MPI_SUCCESS) return RL_ROUTE_SCHEDULE;
    const rl_rule *r = NULL;
    for (int i = 0; i < nrules && rules[i].ranks <= p; i++) r = &rules[i];
    if (!r) return RL_ROUTE_SCHEDULE;
    long long bytes = (long long)count * ts;
    if (blocking && bytes >= r->shm_min && bytes < r->shm_max) return RL_ROUTE_SHM;
    return bytes < r->min_bytes ? RL_ROUTE_LIBRARY : RL_ROUTE_SCHEDULE;
}

static int auto_to_library(const char *algorithm, MPI_Comm comm, int count, MPI_Datatype type) {
    return auto_route(algorithm, comm, count, type, 0) == RL_ROUTE_LIBRARY;
}

int RL_Auto_uses_library(MPI_Comm comm, int count, MPI_Datatype type) {
    return auto_to_library(NULL, comm, count, type);
}

int RL_Auto_route(MPI_Comm comm, int count, MPI_Datatype type) { return auto_route(NULL, comm, count, type, 1); }

long long RL_Auto_shm_range(int ranks, long long *max_bytes) {
    load_rules();
    const rl_rule *r = NULL;
    for (int i = 0; i < nrules && rules[i].ranks <= ranks; i++) r = &rules[i];
    if (!r || r->shm_max <= r->shm_min) return -1;
    if (max_bytes) *max_bytes = r->shm_max;
    return r->shm_min;
}

/* The rules in force ("default", "none" or the file) and the crossover for `ranks` (-1: none). */
long long RL_Auto_crossover(int ranks) {
    load_rules();
    const rl_rule *r = NULL;
    for (int i = 0; i < nrules && rules[i].ranks <= ranks; i++) r = &rules[i];
    return r ? r->min_bytes : -1;
}

/* A bad rules file is an MPI_ERR_ARG with the message (once per process), as a bad
 * REDUCELAB_TORUS is; 0 if the rules are fine. */
static int rules_failed(MPI_Comm comm) {
    if (__builtin_expect(__atomic_load_n(&nrules, __ATOMIC_ACQUIRE) < 0, 0)) load_rules();
    if (!rules_error[0]) return 0;
    static int told;
    if (!told++) fprintf(stderr, "reducelab: %s\n", rules_error);
    PMPI_Comm_call_errhandler(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, MPI_ERR_ARG);
    return 1;
}

static void note_auto_library(void) {
    note_fallback("auto: below the measured crossover the MPI library's allreduce is faster (REDUCELAB_RULES; "
                  "docs/mpi.md)");
}

/* ------------------------------------------------------------------------------------------ */
/* Entry points shared by the RL_* API and the interposition library                           */

/* The last blocking allreduce's prepared execution, reused when the next call has the same
 * communicator, count, predefined datatype and op, algorithm and environment (the common case
 * of an application's inner loop): saves the per-call setup, which on small vectors costs as
 * much as the communication. Only predefined types and ops: their handles cannot be freed and
 * reused for something else. */
static struct {
    rl_exec *ex;
    MPI_Comm comm;
    comm_state *cs;
    int count, strict;
    MPI_Datatype type;
    MPI_Op op;
    char algorithm[64], env[4][64];
} last_call;


/* A communicator's state is going away: drop the cached execution that uses it. */
static void forget_comm(const void *st) {
    if (last_call.ex && last_call.cs == st) {
        exec_free(last_call.ex);
        last_call.ex = NULL;
    }
}

static const char *const env_names[4] = {"REDUCELAB_ALLREDUCE", "REDUCELAB_TORUS", "REDUCELAB_SEGMENT",
                                        "REDUCELAB_CHECK"};

static int env_same(void) {
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(env_names[i]);
        if (strncmp(v ? v : "", last_call.env[i], sizeof last_call.env[i]) != 0) return 0;
    }
    return 1;
}

static rl_exec *cached_exec(MPI_Comm comm, int count, MPI_Datatype type, MPI_Op op, const char *algorithm, int strict) {
    if (!last_call.ex || last_call.comm != comm || last_call.count != count || last_call.type != type ||
        last_call.op != op || last_call.strict != strict || strcmp(algorithm ? algorithm : "", last_call.algorithm) != 0 ||
        !env_same())
        return NULL;
    comm_state *cs = NULL;
    int flag = 0;
    if (PMPI_Comm_get_attr(comm, comm_keyval, &cs, &flag) != MPI_SUCCESS || !flag || cs != last_call.cs) return NULL;
    rl_exec *ex = last_call.ex;
    if (ex->scratch_bytes > shared_scratch_bytes) {
        free(shared_scratch);
        shared_scratch = malloc(ex->scratch_bytes);
        shared_scratch_bytes = shared_scratch ? ex->scratch_bytes : 0;
        if (!shared_scratch) return NULL;
    }
    ex->scratch = shared_scratch;
    next_tag(ex, cs);
    n_scheduled++;
    if (last_algorithm[0] != ex->prog->algorithm[0] || strcmp(last_algorithm, ex->prog->algorithm) != 0)
        snprintf(last_algorithm, sizeof last_algorithm, "%s", ex->prog->algorithm); /* (after a shm call) */
    return ex;
}

/* Keeps `ex` as the last call's execution if it may be reused (then returns 1; the previous
 * one is freed); 0 leaves `ex` to the caller. */
static int remember_exec(rl_exec *ex, MPI_Comm comm, int count, MPI_Datatype type, MPI_Op op, const char *algorithm,
                         int strict) {
    int flag = 0;
    comm_state *cs = NULL;
    if (!ex->kernel || !ex->dense || (algorithm && strlen(algorithm) >= sizeof last_call.algorithm) ||
        PMPI_Comm_get_attr(comm, comm_keyval, &cs, &flag) != MPI_SUCCESS || !flag)
        return 0;
    char env[4][64];
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(env_names[i]);
        if (v && strlen(v) >= sizeof env[i]) return 0;
        snprintf(env[i], sizeof env[i], "%s", v ? v : "");
    }
    if (last_call.ex) exec_free(last_call.ex);
    memcpy(last_call.env, env, sizeof env);
    snprintf(last_call.algorithm, sizeof last_call.algorithm, "%s", algorithm ? algorithm : "");
    last_call.ex = ex;
    last_call.comm = comm;
    last_call.cs = cs;
    last_call.count = count;
    last_call.type = type;
    last_call.op = op;
    last_call.strict = strict;
    return 1;
}

/* The shared-memory allreduce (shm.c) for a blocking allreduce, asked for by name (`named`) or
 * chosen by `auto`'s rules, at every thread level (its state is per communicator).
 * RL_SHM_DECLINED: this call takes the usual path (a named `shm` says why with
 * REDUCELAB_VERBOSE; every rank declines alike: the reasons depend only on the communicator,
 * the datatype, the op and the environment, which must agree across ranks). */
static int try_shm(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   int named) {
    char why[300] = "";
    int inter = 0;
    if (count == 0 || comm == MPI_COMM_NULL || type == MPI_DATATYPE_NULL || op == MPI_OP_NULL)
        return RL_SHM_DECLINED; /* the usual path: count 0, or the library reports the error */
    rl_kernel kernel = rl_kernel_for(op, type);
    if (!kernel && is_predefined_op(op)) return RL_SHM_DECLINED; /* the usual path says why */
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) {
        snprintf(why, sizeof why, "shm: inter-communicator");
    } else if (!recvbuf || !sendbuf) {
        return buffer_error(comm);
    } else {
        int rc = rl_shm_allreduce(sendbuf, recvbuf, count, type, op, comm, kernel, why, sizeof why);
        if (rc != RL_SHM_DECLINED) {
            __atomic_fetch_add(&n_scheduled, 1, __ATOMIC_RELAXED);
            if (!use_lock()) snprintf(last_algorithm, sizeof last_algorithm, "shm");
            is_verbose();
            return rc;
        }
    }
    if (named) note_once("shm not used, running auto's path", why);
    return RL_SHM_DECLINED;
}

void rl_progress_others(void) {
    if (others_need_progress()) RL_Progress();
}

int rl_private_comm(MPI_Comm comm, MPI_Comm *dup) {
    comm_state *cs = NULL;
    int rc = get_comm_state(comm, &cs);
    if (rc != MPI_SUCCESS) return rc;
    comm_wait_ready(cs);
    *dup = cs->dup;
    return MPI_SUCCESS;
}

/* The shared-memory allreduce as a nonblocking operation (MPI_Iallreduce, a persistent plan),
 * asked for by name or chosen by `auto`'s rules, or NULL: the call takes the usual path (a named
 * `shm` says why; every rank declines alike). Not at MPI_THREAD_MULTIPLE (nonblocking calls go
 * to the library there, see prepare). Not started: rl_shm_op_start at the call or each start. */
static rl_exec *shm_exec(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                         int named) {
    char why[300] = "";
    int inter = 0;
    if (thread_multiple() || count <= 0 || comm == MPI_COMM_NULL || type == MPI_DATATYPE_NULL || op == MPI_OP_NULL ||
        !sendbuf || !recvbuf)
        return NULL; /* the usual path (the library, or an error) */
    rl_kernel kernel = rl_kernel_for(op, type);
    if (!kernel && is_predefined_op(op)) return NULL; /* the usual path says why */
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) {
        snprintf(why, sizeof why, "shm: inter-communicator");
    } else {
        comm_state *cs = NULL; /* (starts the private duplicate now, at the collective call) */
        rl_shm_op *o = NULL;
        if (get_comm_state(comm, &cs) != MPI_SUCCESS) {
            snprintf(why, sizeof why, "shm: no private duplicate of the communicator");
        } else if (rl_shm_op_create(sendbuf, recvbuf, count, type, op, comm, kernel, &o, why, sizeof why) ==
                   MPI_SUCCESS) {
            rl_exec *ex = calloc(1, sizeof *ex);
            if (ex) {
                ex->shm = o;
                ex->cs = cs;
                ex->comm = MPI_COMM_NULL; /* bound to the duplicate when it exists (progress_exec) */
                ex->greq = MPI_REQUEST_NULL;
                return ex;
            }
            rl_shm_op_free(o);
            snprintf(why, sizeof why, "shm: out of memory");
        }
    }
    if (named) note_once("shm not used, running auto's path", why);
    return NULL;
}

int rl_allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                 const char *algorithm, int strict) {
    rl_exec *ex;
    int rc;
    if (negative_count(comm, count)) return MPI_ERR_COUNT;
    if (count < 0 || recvbuf == MPI_IN_PLACE || (sendbuf == recvbuf && count > 0))
        return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm); /* MPI reports these */
    const char *innet_name = rl_innet_named(algorithm);
    if (innet_name) return rl_innet_allreduce(sendbuf, recvbuf, count, type, op, comm, innet_name);
    if (__builtin_expect(__atomic_load_n(&nrules, __ATOMIC_ACQUIRE) < 0, 0)) load_rules();
    int named = algorithm ? strcmp(algorithm, "shm") == 0 : env_shm;
    int route = named ? RL_ROUTE_SHM : auto_route(algorithm, comm, count, type, 1);
    if (route == RL_ROUTE_SHM) {
        if ((rc = try_shm(sendbuf, recvbuf, count, type, op, comm, named)) != RL_SHM_DECLINED) return rc;
        algorithm = "auto";
        route = auto_route(algorithm, comm, count, type, 0);
    }
    if (route == RL_ROUTE_LIBRARY) {
        note_auto_library();
        return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
    }
    if (rules_failed(comm)) return MPI_ERR_ARG;
    ex = cached_exec(comm, count, type, op, algorithm, strict);
    if (!ex) {
        int st = prepare(RL_COLL_ALLREDUCE, algorithm, comm, (size_t)count, type, op, strict, 0, &ex, &rc);
        if (st == PREP_FALLBACK) return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
        if (st == PREP_ERROR) return rc;
        remember_exec(ex, comm, count, type, op, algorithm, strict);
    }
    if (count > 0 && (!recvbuf || !sendbuf)) {
        if (ex != last_call.ex) exec_free(ex);
        return buffer_error(comm);
    }
    if ((rc = load_allreduce(ex, sendbuf, recvbuf)) == MPI_SUCCESS) rc = run_blocking(ex);
    if (ex != last_call.ex) exec_free(ex);
    if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
    return rc;
}

int rl_reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                            MPI_Comm comm, const char *algorithm, int strict) {
    rl_exec *ex;
    int rc, p = 1;
    if (comm != MPI_COMM_NULL) PMPI_Comm_size(comm, &p);
    if (negative_count(comm, recvcount)) return MPI_ERR_COUNT;
    if (recvcount < 0 || recvbuf == MPI_IN_PLACE || (sendbuf == recvbuf && recvcount > 0) || comm == MPI_COMM_NULL)
        return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm);
    int st = prepare(RL_COLL_REDUCE_SCATTER, algorithm, comm, (size_t)recvcount * (size_t)p, type, op, strict, 0, &ex,
                     &rc);
    if (st == PREP_FALLBACK) return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm);
    if (st == PREP_ERROR) return rc;
    if (recvcount > 0 && (!recvbuf || !sendbuf)) {
        exec_free(ex);
        return buffer_error(comm);
    }
    const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    size_t bytes = span(ex, ex->count);
    int rank;
    PMPI_Comm_rank(comm, &rank);
    if ((rc = alloc_work(ex, bytes, comm)) != MPI_SUCCESS) return rc;
    ex->src = in; /* read from the input until written (see rl_exec) */
    memset(ex->fresh, 1, ex->prog->blocks);
    ex->final_lo = (size_t)rank * (size_t)recvcount;
    ex->final_hi = ex->final_lo + (size_t)recvcount;
    ex->out = recvbuf;
    ex->out_from = (size_t)rank * (size_t)recvcount * (size_t)ex->extent;
    ex->out_n = (size_t)recvcount; /* typed_copy: the gaps of a type with holes stay untouched */
    rc = run_blocking(ex);
    exec_free(ex);
    if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
    return rc;
}

int rl_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm, const char *algorithm, int strict) {
    rl_exec *ex;
    int rc, p = 1, rank = 0;
    int same = sendbuf == MPI_IN_PLACE || (sendtype == recvtype && sendcount == recvcount);
    if (negative_count(comm, recvcount) || (sendbuf != MPI_IN_PLACE && negative_count(comm, sendcount)))
        return MPI_ERR_COUNT;
    if (comm == MPI_COMM_NULL || recvcount < 0 || recvbuf == MPI_IN_PLACE || !same)
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    PMPI_Comm_size(comm, &p);
    PMPI_Comm_rank(comm, &rank);
    int st = prepare(RL_COLL_ALLGATHER, algorithm, comm, (size_t)recvcount * (size_t)p, recvtype, MPI_OP_NULL,
                     strict, 0, &ex, &rc);
    if (st == PREP_FALLBACK)
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    if (st == PREP_ERROR) return rc;
    if (recvcount > 0 && (!recvbuf || !sendbuf)) {
        exec_free(ex);
        return buffer_error(comm);
    }
    size_t mine = (size_t)rank * (size_t)recvcount * (size_t)ex->extent;
    if (ex->dense) {
        ex->buf = recvbuf;
        if (sendbuf != MPI_IN_PLACE && recvcount) memcpy((char *)recvbuf + mine, sendbuf, span(ex, (size_t)recvcount));
    } else { /* holes: gather into a private vector, copy into recvbuf by the type map */
        size_t bytes = span(ex, ex->count);
        if ((rc = alloc_work(ex, bytes, comm)) != MPI_SUCCESS) return rc;
        if (recvcount)
            memcpy(ex->buf + mine, sendbuf == MPI_IN_PLACE ? (const char *)recvbuf + mine : (const char *)sendbuf,
                   span(ex, (size_t)recvcount));
        ex->out = recvbuf;
        ex->out_from = 0;
        ex->out_n = ex->count;
    }
    rc = run_blocking(ex);
    exec_free(ex);
    if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
    return rc;
}

/* ---- nonblocking ---- */

/* extra: a malloc'd int, the operation's error code once complete (MPI_Wait returns it).
 * The status is MPI's empty status (source MPI_ANY_SOURCE, tag MPI_ANY_TAG, 0 elements, not
 * cancelled), with the error code. */
static int greq_query(void *extra, MPI_Status *status) {
    int e = extra ? *(int *)extra : MPI_SUCCESS;
    status->MPI_ERROR = e;
    PMPI_Status_set_elements(status, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_ANY_SOURCE;
    status->MPI_TAG = MPI_ANY_TAG;
    return e;
}
static int greq_free(void *extra) {
    free(extra);
    return MPI_SUCCESS;
}
static int greq_cancel(void *extra, int complete) {
    (void)extra, (void)complete;
    return MPI_SUCCESS; /* cannot be cancelled: it completes normally */
}

int rl_active_count(void) {
    int n = 0;
    lock();
    for (rl_exec *e = active; e; e = e->next_active) n++;
    unlock();
    return n;
}

/* The active operation whose generalized request is r (rl_mu held), or NULL. */
static rl_exec *find_active(MPI_Request r) {
    if (r == MPI_REQUEST_NULL) return NULL;
    for (rl_exec *e = active; e; e = e->next_active)
        if (e->greq == r) return e;
    return NULL;
}

int rl_is_active_request(MPI_Request r) {
    if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE)) return 0;
    lock();
    int found = find_active(r) != NULL;
    unlock();
    return found;
}

/* MPI_Request_free on an active ReduceLab operation: it goes on in the background (progressed
 * by every later ReduceLab or completion call, the progress thread, and MPI_Finalize, which
 * drains it) and its request is freed when it completes. 1 if r was ours. */
int rl_detach_request(MPI_Request r) {
    if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE)) return 0;
    lock();
    rl_exec *e = find_active(r);
    if (e) e->detached = 1;
    unlock();
    return e != NULL;
}

/* st's communicator is being freed: active operations not yet bound to its duplicate (ready by
 * now) are bound. */
static void unbind_comm_state(comm_state *st) {
    lock();
    for (rl_exec *e = active; e; e = e->next_active)
        if (e->cs == st && e->comm == MPI_COMM_NULL) {
            e->comm = st->dup;
            if (e->check) e->check->comm = e->comm;
        }
    unlock();
}

/* An active operation on cs completed (rl_mu held): the last one on a freed communicator frees
 * the state. */
static void comm_state_release(comm_state *cs) {
    if (cs && --cs->users == 0 && cs->orphaned) {
        PMPI_Comm_free(&cs->dup);
        free(cs);
    }
}

/* One sweep over the active operations (rl_mu held). */
static int progress_sweep(void) {
    int first_err = MPI_SUCCESS;
    rl_exec **pp = &active;
    while (*pp) {
        rl_exec *ex = *pp, *next = ex->next_active;
        int err;
        if (progress_exec(ex, &err)) {
            __atomic_store_n(pp, next, __ATOMIC_RELEASE);
            progress_events++;
            int erc = exec_epilogue(ex);
            if (err == MPI_SUCCESS) err = erc;
            ex->result = err;
            if (ex->greq_err) *ex->greq_err = err;
            ex->done = 1;
            comm_state *cs = ex->cs;
            if (cs && cs->orphaned) ex->cs = NULL; /* a persistent plan must not keep it */
            comm_state_release(cs);
            if (err != MPI_SUCCESS && first_err == MPI_SUCCESS) first_err = err;
            if (ex->greq != MPI_REQUEST_NULL) {
                MPI_Request g = ex->greq;
                int detached = ex->detached;
                exec_free(ex);
                PMPI_Grequest_complete(g);
                if (detached) PMPI_Request_free(&g);
            }
        } else {
            pp = &ex->next_active;
        }
    }
    return first_err;
}
static void progress_locked(void) { progress_sweep(); }

int RL_Progress(void) {
    if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE)) return MPI_SUCCESS;
    lock();
    int rc = progress_sweep();
    unlock();
    return rc;
}

/* Puts ex on the active list, posts what it can and wakes the progress thread. */
static int activate(rl_exec *ex) {
    lock();
    if (ex->cs) ex->cs->users++;
    ex->next_active = active;
    __atomic_store_n(&active, ex, __ATOMIC_RELEASE);
    int rc = progress_sweep(); /* post the first step now */
    if (progress_thread_on) pthread_cond_signal(&rl_cv);
    unlock();
    return rc;
}

int rl_iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                  const char *algorithm, int strict, MPI_Request *request) {
    rl_exec *ex;
    int rc;
    if (request && negative_count(comm, count)) return MPI_ERR_COUNT;
    if (!request || count < 0 || recvbuf == MPI_IN_PLACE || (sendbuf == recvbuf && count > 0))
        return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, request);
    if (__builtin_expect(__atomic_load_n(&nrules, __ATOMIC_ACQUIRE) < 0, 0)) load_rules();
    int named = algorithm ? strcmp(algorithm, "shm") == 0 : env_shm;
    if ((named || auto_route(algorithm, comm, count, type, 1) == RL_ROUTE_SHM) &&
        (ex = shm_exec(sendbuf, recvbuf, count, type, op, comm, named))) {
        if (!(ex->greq_err = calloc(1, sizeof *ex->greq_err)) ||
            (rc = PMPI_Grequest_start(greq_query, greq_free, greq_cancel, ex->greq_err, &ex->greq)) != MPI_SUCCESS) {
            rc = ex->greq_err ? rc : MPI_ERR_NO_MEM;
            free(ex->greq_err);
            exec_free(ex);
            PMPI_Comm_call_errhandler(comm, rc);
            return rc;
        }
        rl_shm_op_start(ex->shm); /* (its turn among the calls on comm: now, in MPI's order) */
        __atomic_fetch_add(&n_scheduled, 1, __ATOMIC_RELAXED);
        snprintf(last_algorithm, sizeof last_algorithm, "shm");
        *request = ex->greq;
        activate(ex);
        return MPI_SUCCESS;
    }
    if (auto_to_library(algorithm, comm, count, type)) {
        note_auto_library();
        return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, request);
    }
    if (rules_failed(comm)) return MPI_ERR_ARG;
    int st = prepare(RL_COLL_ALLREDUCE, algorithm, comm, (size_t)count, type, op, strict, 1, &ex, &rc);
    if (st == PREP_FALLBACK) return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, request);
    if (st == PREP_ERROR) return rc;
    if (count > 0 && (!recvbuf || !sendbuf)) {
        exec_free(ex);
        return buffer_error(comm);
    }
    rc = load_allreduce(ex, sendbuf, recvbuf);
    if (rc == MPI_SUCCESS && !(ex->greq_err = calloc(1, sizeof *ex->greq_err))) rc = MPI_ERR_NO_MEM;
    if (rc == MPI_SUCCESS) rc = PMPI_Grequest_start(greq_query, greq_free, greq_cancel, ex->greq_err, &ex->greq);
    if (rc != MPI_SUCCESS) {
        free(ex->greq_err);
        exec_free(ex);
        PMPI_Comm_call_errhandler(comm, rc);
        return rc;
    }
    *request = ex->greq;
    activate(ex);
    return MPI_SUCCESS;
}

int RL_Wait(MPI_Request *request, MPI_Status *status) {
    int flag = 0, rc;
    for (;;) {
        RL_Progress();
        if ((rc = PMPI_Test(request, &flag, status)) != MPI_SUCCESS || flag) return rc;
    }
}

/* ---- the progress thread (REDUCELAB_PROGRESS=thread, started by the interposition library's
 * MPI_Init when the MPI library provides MPI_THREAD_MULTIPLE) ----
 * Sleeps on a condition variable while nothing is active; otherwise sweeps the active
 * operations under rl_mu, yielding the core between sweeps and, after RL_IDLE_SWEEPS sweeps
 * that moved nothing, sleeping RL_IDLE_NS between them (the cores are shared with the
 * application, and on an oversubscribed node with the other ranks). */
#define RL_IDLE_SWEEPS 32
#define RL_IDLE_NS 20000
static pthread_t progress_thread;
static int progress_stop;

static void *progress_main(void *arg) {
    (void)arg;
    unsigned idle = 0;
    pthread_mutex_lock(&rl_mu);
    mu_held = 1;
    while (!progress_stop) {
        if (!active) {
            pthread_cond_wait(&rl_cv, &rl_mu);
            idle = 0;
            continue;
        }
        unsigned long before = progress_events;
        progress_sweep();
        idle = progress_events != before ? 0 : idle + 1;
        mu_held = 0;
        pthread_mutex_unlock(&rl_mu);
        if (idle < RL_IDLE_SWEEPS) {
            sched_yield();
        } else {
            struct timespec ts = {0, RL_IDLE_NS};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&rl_mu);
        mu_held = 1;
    }
    mu_held = 0;
    pthread_mutex_unlock(&rl_mu);
    return NULL;
}

/* After MPI_Init_thread provided MPI_THREAD_MULTIPLE. 0 on success. */
int rl_progress_thread_start(void) {
    __atomic_store_n(&locking, 1, __ATOMIC_RELEASE);
    progress_stop = 0;
    __atomic_store_n(&progress_thread_on, 1, __ATOMIC_RELEASE);
    int rc = pthread_create(&progress_thread, NULL, progress_main, NULL);
    if (rc != 0) __atomic_store_n(&progress_thread_on, 0, __ATOMIC_RELEASE);
    return rc;
}

/* Before MPI_Finalize (every operation completed). */
void rl_progress_thread_stop(void) {
    if (!__atomic_load_n(&progress_thread_on, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&rl_mu);
    progress_stop = 1;
    pthread_cond_broadcast(&rl_cv);
    pthread_mutex_unlock(&rl_mu);
    pthread_join(progress_thread, NULL);
    __atomic_store_n(&progress_thread_on, 0, __ATOMIC_RELEASE);
}

int rl_progress_thread_running(void) { return __atomic_load_n(&progress_thread_on, __ATOMIC_ACQUIRE); }

void rl_notice(const char *msg) {
    if (is_verbose()) fprintf(stderr, "reducelab: %s\n", msg);
}

/* ---- persistent ---- */

struct RL_Persistent_s {
    rl_exec *ex; /* NULL: the MPI library runs each start (see RL_Allreduce_init) */
    const void *sendbuf;
    void *recvbuf;
    int count;
    MPI_Datatype type;
    MPI_Op op;
    MPI_Comm comm;
    int started;
};

/* ex->done, which the progress thread may write. */
static int exec_done(rl_exec *ex) {
    lock();
    int d = ex->done;
    unlock();
    return d;
}

int RL_Allreduce_init(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                      const char *algorithm, RL_Persistent *request) {
    return rl_allreduce_init(sendbuf, recvbuf, count, type, op, comm, algorithm, 1, request);
}

/* strict = 0 (interposition): a call no schedule covers returns MPI_SUCCESS with *request NULL
 * (the caller then uses the MPI library's persistent allreduce). */
int rl_allreduce_init(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                      const char *algorithm, int strict, RL_Persistent *request) {
    rl_exec *ex = NULL;
    int rc;
    if (!request) return MPI_ERR_ARG;
    *request = NULL;
    if (comm == MPI_COMM_NULL) {
        PMPI_Comm_call_errhandler(MPI_COMM_WORLD, MPI_ERR_COMM);
        return MPI_ERR_COMM;
    }
    if (count < 0) {
        PMPI_Comm_call_errhandler(comm, MPI_ERR_COUNT);
        return MPI_ERR_COUNT;
    }
    if (type == MPI_DATATYPE_NULL) {
        PMPI_Comm_call_errhandler(comm, MPI_ERR_TYPE);
        return MPI_ERR_TYPE;
    }
    if (op == MPI_OP_NULL) {
        PMPI_Comm_call_errhandler(comm, MPI_ERR_OP);
        return MPI_ERR_OP;
    }
    if (recvbuf == MPI_IN_PLACE || (sendbuf == recvbuf && count > 0) || (count > 0 && (!recvbuf || !sendbuf)))
        return buffer_error(comm);
    if (rules_failed(comm)) return MPI_ERR_ARG;
    int st = PREP_FALLBACK;
    int named = algorithm ? strcmp(algorithm, "shm") == 0 : env_shm;
    if ((named || auto_route(algorithm, comm, count, type, 1) == RL_ROUTE_SHM) &&
        (ex = shm_exec(sendbuf, recvbuf, count, type, op, comm, named))) {
        st = PREP_OK; /* (each start takes its turn and is counted) */
    } else if (auto_to_library(algorithm, comm, count, type)) { /* each start: the library (counted there if strict) */
        if (!strict) note_auto_library();
    }
    else st = prepare(RL_COLL_ALLREDUCE, algorithm, comm, (size_t)count, type, op, strict, 1, &ex, &rc);
    if (st == PREP_ERROR) return rc;
    if (st == PREP_FALLBACK && !strict) return MPI_SUCCESS;
    if (st == PREP_OK && !ex->shm) {
        n_scheduled--; /* counted per start */
        ex->keep_scratch = 1;
    }
    /* PREP_FALLBACK (algorithm "mpi", a pair without our kernel, ...): each start runs
     * PMPI_Allreduce, which also reports an invalid op/datatype pair. */
    struct RL_Persistent_s *r = calloc(1, sizeof *r);
    if (!r) {
        exec_free(ex);
        return MPI_ERR_NO_MEM;
    }
    *r = (struct RL_Persistent_s){ex, sendbuf, recvbuf, count, type, op, comm, 0};
    *request = r;
    return MPI_SUCCESS;
}

int RL_Start(RL_Persistent r) {
    if (!r) return MPI_ERR_REQUEST;
    if (!r->ex) { /* fallback: blocking, complete at return */
        n_fallback++;
        r->started = 0;
        return PMPI_Allreduce(r->sendbuf, r->recvbuf, r->count, r->type, r->op, r->comm);
    }
    rl_exec *ex = r->ex;
    if (r->started && !exec_done(ex)) {
        PMPI_Comm_call_errhandler(r->comm, MPI_ERR_REQUEST);
        return MPI_ERR_REQUEST; /* still active */
    }
    if (ex->shm) { /* the shared-memory allreduce: takes its turn on the communicator now */
        ex->done = 0;
        ex->greq = MPI_REQUEST_NULL;
        rl_shm_op_start(ex->shm);
        r->started = 1;
        n_scheduled++;
        return activate(ex);
    }
    comm_state *cs = NULL;
    int rc = get_comm_state(r->comm, &cs);
    if (rc != MPI_SUCCESS) return rc;
    /* not on the active list: no other thread looks at ex until activate() */
    next_tag(ex, cs);
    ex->step = 0;
    ex->posted = 0;
    ex->done = 0;
    ex->greq = MPI_REQUEST_NULL;
    if ((rc = load_allreduce(ex, r->sendbuf, r->recvbuf)) != MPI_SUCCESS) {
        PMPI_Comm_call_errhandler(r->comm, rc);
        return rc;
    }
    r->started = 1;
    n_scheduled++;
    return activate(ex);
}

int RL_Persistent_test(RL_Persistent r, int *flag) {
    if (!r || !flag) return MPI_ERR_ARG;
    int rc = MPI_SUCCESS;
    if (r->started && !exec_done(r->ex)) rc = RL_Progress();
    *flag = !r->started || exec_done(r->ex);
    return r->started && *flag ? r->ex->result : rc;
}

int RL_Persistent_wait(RL_Persistent r) {
    if (!r) return MPI_ERR_REQUEST;
    while (r->started && !exec_done(r->ex)) RL_Progress();
    return r->started ? r->ex->result : MPI_SUCCESS;
}

/* 0 inactive (never started, or completed), 1 running. */
int rl_persistent_running(RL_Persistent r) { return r && r->ex && r->started && !exec_done(r->ex); }

int RL_Persistent_free(RL_Persistent *r) {
    if (!r || !*r) return MPI_ERR_REQUEST;
    if ((*r)->started && !exec_done((*r)->ex)) RL_Persistent_wait(*r);
    exec_free((*r)->ex);
    free(*r);
    *r = NULL;
    return MPI_SUCCESS;
}

/* ---- RL_* API (strict: a bad algorithm name is an error) ---- */

int RL_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                 const char *algorithm) {
    return rl_allreduce(sendbuf, recvbuf, count, type, op, comm, algorithm, 1);
}
int RL_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                            MPI_Comm comm, const char *algorithm) {
    return rl_reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm, algorithm, 1);
}
int RL_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm, const char *algorithm) {
    return rl_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, algorithm, 1);
}
int RL_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                  const char *algorithm, MPI_Request *request) {
    return rl_iallreduce(sendbuf, recvbuf, count, type, op, comm, algorithm, 1, request);
}
