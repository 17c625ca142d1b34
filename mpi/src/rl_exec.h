/* The execution of one rank's program (exec.c). */
#ifndef RL_EXEC_H
#define RL_EXEC_H
#include "rl_capi.h"
#include "rl_kernels.h"
#include "rl_comm.h"
#include "rl_progress.h"
#include "rl_shm.h"

#pragma GCC visibility push(hidden)
typedef struct rl_exec {
    rl_active node; /* nonblocking: on the active list (progress.c), with its request */
    const RlProgram *prog;
    MPI_Comm comm;
    int tag, tag_base; /* see rl_next_tag */
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
    int done;
    comm_state *cs; /* nonblocking: comm stays MPI_COMM_NULL until cs's duplicate exists */
    /* not a schedule: the shared-memory allreduce (shm.c) as a nonblocking operation (prog NULL) */
    rl_shm_op *shm;
} rl_exec;
/* Bytes spanned by n consecutive elements (the last one up to its true upper bound). */
size_t rl_span(const rl_exec *ex, size_t n);
/* Scratch bytes a step needs; most transfers in one step; room for n requests. */
size_t rl_step_scratch(const rl_exec *ex, const RlStep *st);
size_t rl_max_step_transfers(const RlProgram *p);
int rl_reserve_reqs(rl_exec *ex, size_t n);
/* The run's tag from the communicator's sequence number (after count and tsize are set). */
void rl_next_tag(rl_exec *ex, comm_state *cs);
/* Runs every step, blocking (progressing the active operations meanwhile); an MPI error code. */
int rl_run_blocking(rl_exec *ex);
/* Scratch for blocking calls, kept between calls. */
extern char *rl_shared_scratch;
extern size_t rl_shared_scratch_bytes;
void rl_exec_free(rl_exec *ex);
/* The count check of an execution (REDUCELAB_CHECK), or NULL if none can be built. */
rl_exec *rl_make_check(const rl_exec *main, const char *algorithm, const uint32_t *dims, size_t ndims, uint32_t rank);
/* A private working vector for a type with holes (on failure `ex` is freed and the error handler
 * called). */
int rl_alloc_work(rl_exec *ex, size_t bytes, MPI_Comm comm);
/* An allreduce's buffers for the next run. */
int rl_load_allreduce(rl_exec *ex, const void *sendbuf, void *recvbuf);
/* Puts a nonblocking execution on the active list (counted as a user of its communicator's
 * state), posts what it can and wakes the progress thread; completing it completes its request
 * (node.greq) and frees it, or (none: persistent) leaves it done with its result. */
int rl_exec_activate(rl_exec *ex);
#pragma GCC visibility pop
#endif
