/* Nonblocking and persistent allreduces: RL_Iallreduce (a generalized request) and
 * RL_Allreduce_init / RL_Start / RL_Persistent_*. */
#define _GNU_SOURCE
#include "reducelab_mpi.h"
#include "rl_requests.h"
#include "rl_exec.h"
#include "rl_comm.h"
#include "rl_progress.h"
#include "rl_prepare.h"
#include "rl_shm.h"
#include "rl_shm_path.h"
#include "rl_auto_rules.h"
#include "rl_stats.h"
#include "rl_threads.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int rl_iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                  const char *algorithm, int strict, MPI_Request *request) {
    rl_exec *ex;
    int rc;
    if (request && rl_negative_count(comm, count)) return MPI_ERR_COUNT;
    if (!request || count < 0 || recvbuf == MPI_IN_PLACE || (sendbuf == recvbuf && count > 0))
        return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, request);
    if (__builtin_expect(__atomic_load_n(&rl_nrules, __ATOMIC_ACQUIRE) < 0, 0)) rl_load_rules();
    int named = algorithm ? strcmp(algorithm, "shm") == 0 : rl_env_shm;
    if ((named || rl_auto_route(algorithm, comm, count, type, 1) == RL_ROUTE_SHM) &&
        (ex = rl_shm_exec(sendbuf, recvbuf, count, type, op, comm, named))) {
        if (!(ex->greq_err = calloc(1, sizeof *ex->greq_err)) ||
            (rc = PMPI_Grequest_start(greq_query, greq_free, greq_cancel, ex->greq_err, &ex->node.greq)) !=
                MPI_SUCCESS) {
            rc = ex->greq_err ? rc : MPI_ERR_NO_MEM;
            free(ex->greq_err);
            rl_exec_free(ex);
            PMPI_Comm_call_errhandler(comm, rc);
            return rc;
        }
        rl_shm_op_start(ex->shm); /* (its turn among the calls on comm: now, in MPI's order) */
        __atomic_fetch_add(&rl_n_scheduled, 1, __ATOMIC_RELAXED);
        snprintf(rl_last_algorithm, sizeof rl_last_algorithm, "shm");
        *request = ex->node.greq;
        rl_exec_activate(ex);
        return MPI_SUCCESS;
    }
    if (rl_auto_to_library(algorithm, comm, count, type)) {
        rl_note_auto_library();
        return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, request);
    }
    if (rl_rules_failed(comm)) return MPI_ERR_ARG;
    int st = rl_prepare(RL_COLL_ALLREDUCE, algorithm, comm, (size_t)count, type, op, strict, 1, &ex, &rc);
    if (st == PREP_FALLBACK) return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, request);
    if (st == PREP_ERROR) return rc;
    if (count > 0 && (!recvbuf || !sendbuf)) {
        rl_exec_free(ex);
        return rl_buffer_error(comm);
    }
    rc = rl_load_allreduce(ex, sendbuf, recvbuf);
    if (rc == MPI_SUCCESS && !(ex->greq_err = calloc(1, sizeof *ex->greq_err))) rc = MPI_ERR_NO_MEM;
    if (rc == MPI_SUCCESS) rc = PMPI_Grequest_start(greq_query, greq_free, greq_cancel, ex->greq_err, &ex->node.greq);
    if (rc != MPI_SUCCESS) {
        free(ex->greq_err);
        rl_exec_free(ex);
        PMPI_Comm_call_errhandler(comm, rc);
        return rc;
    }
    *request = ex->node.greq;
    rl_exec_activate(ex);
    return MPI_SUCCESS;
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
    rl_lock();
    int d = ex->done;
    rl_unlock();
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
        return rl_buffer_error(comm);
    if (rl_rules_failed(comm)) return MPI_ERR_ARG;
    int st = PREP_FALLBACK;
    int named = algorithm ? strcmp(algorithm, "shm") == 0 : rl_env_shm;
    if ((named || rl_auto_route(algorithm, comm, count, type, 1) == RL_ROUTE_SHM) &&
        (ex = rl_shm_exec(sendbuf, recvbuf, count, type, op, comm, named))) {
        st = PREP_OK; /* (each start takes its turn and is counted) */
    } else if (rl_auto_to_library(algorithm, comm, count, type)) { /* each start: the library (counted there if strict) */
        if (!strict) rl_note_auto_library();
    }
    else st = rl_prepare(RL_COLL_ALLREDUCE, algorithm, comm, (size_t)count, type, op, strict, 1, &ex, &rc);
    if (st == PREP_ERROR) return rc;
    if (st == PREP_FALLBACK && !strict) return MPI_SUCCESS;
    if (st == PREP_OK && !ex->shm) {
        rl_n_scheduled--; /* counted per start */
        ex->keep_scratch = 1;
    }
    /* PREP_FALLBACK (algorithm "mpi", a pair without our kernel, ...): each start runs
     * PMPI_Allreduce, which also reports an invalid op/datatype pair. */
    struct RL_Persistent_s *r = calloc(1, sizeof *r);
    if (!r) {
        rl_exec_free(ex);
        return MPI_ERR_NO_MEM;
    }
    *r = (struct RL_Persistent_s){ex, sendbuf, recvbuf, count, type, op, comm, 0};
    *request = r;
    return MPI_SUCCESS;
}

int RL_Start(RL_Persistent r) {
    if (!r) return MPI_ERR_REQUEST;
    if (!r->ex) { /* fallback: blocking, complete at return */
        rl_n_fallback++;
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
        ex->node.greq = MPI_REQUEST_NULL;
        rl_shm_op_start(ex->shm);
        r->started = 1;
        rl_n_scheduled++;
        return rl_exec_activate(ex);
    }
    comm_state *cs = NULL;
    int rc = rl_get_comm_state(r->comm, &cs);
    if (rc != MPI_SUCCESS) return rc;
    /* not on the active list: no other thread looks at ex until rl_exec_activate() */
    rl_next_tag(ex, cs);
    ex->step = 0;
    ex->posted = 0;
    ex->done = 0;
    ex->node.greq = MPI_REQUEST_NULL;
    if ((rc = rl_load_allreduce(ex, r->sendbuf, r->recvbuf)) != MPI_SUCCESS) {
        PMPI_Comm_call_errhandler(r->comm, rc);
        return rc;
    }
    r->started = 1;
    rl_n_scheduled++;
    return rl_exec_activate(ex);
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
    rl_exec_free((*r)->ex);
    free(*r);
    *r = NULL;
    return MPI_SUCCESS;
}

int RL_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                  const char *algorithm, MPI_Request *request) {
    return rl_iallreduce(sendbuf, recvbuf, count, type, op, comm, algorithm, 1, request);
}
