/* The blocking collectives (rl_allreduce, rl_reduce_scatter_block, rl_allgather; RL_Allreduce &
 * co.), with the last blocking allreduce's execution cached for the next. */
#define _GNU_SOURCE
#include "reducelab_mpi.h"
#include "rl_blocking.h"
#include "rl_exec.h"
#include "rl_algorithms.h"
#include "rl_comm.h"
#include "rl_prepare.h"
#include "rl_shm.h"
#include "rl_shm_path.h"
#include "rl_auto_rules.h"
#include "rl_innet.h"
#include "rl_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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


/* A communicator's state is going away: drop the cached execution that uses it (comm.c calls
 * it through rl_comm_hook_forget). */
static void forget_comm(const comm_state *st) {
    if (last_call.ex && last_call.cs == st) {
        rl_exec_free(last_call.ex);
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
    if (!rl_comm_state_of(comm, &cs) || cs != last_call.cs) return NULL;
    rl_exec *ex = last_call.ex;
    if (ex->scratch_bytes > rl_shared_scratch_bytes) {
        free(rl_shared_scratch);
        rl_shared_scratch = malloc(ex->scratch_bytes);
        rl_shared_scratch_bytes = rl_shared_scratch ? ex->scratch_bytes : 0;
        if (!rl_shared_scratch) return NULL;
    }
    ex->scratch = rl_shared_scratch;
    rl_next_tag(ex, cs);
    rl_n_scheduled++;
    if (rl_last_algorithm[0] != ex->prog->algorithm[0] || strcmp(rl_last_algorithm, ex->prog->algorithm) != 0)
        snprintf(rl_last_algorithm, sizeof rl_last_algorithm, "%s", ex->prog->algorithm); /* (after a shm call) */
    return ex;
}

/* Keeps `ex` as the last call's execution if it may be reused (then returns 1; the previous
 * one is freed); 0 leaves `ex` to the caller. */
static int remember_exec(rl_exec *ex, MPI_Comm comm, int count, MPI_Datatype type, MPI_Op op, const char *algorithm,
                         int strict) {
    comm_state *cs = NULL;
    if (!ex->kernel || !ex->dense || (algorithm && strlen(algorithm) >= sizeof last_call.algorithm) ||
        !rl_comm_state_of(comm, &cs))
        return 0;
    char env[4][64];
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(env_names[i]);
        if (v && strlen(v) >= sizeof env[i]) return 0;
        snprintf(env[i], sizeof env[i], "%s", v ? v : "");
    }
    rl_comm_hook_forget(forget_comm);
    if (last_call.ex) rl_exec_free(last_call.ex);
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

int rl_allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                 const char *algorithm, int strict) {
    rl_exec *ex;
    int rc;
    if (rl_negative_count(comm, count)) return MPI_ERR_COUNT;
    if (count < 0 || recvbuf == MPI_IN_PLACE || (sendbuf == recvbuf && count > 0))
        return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm); /* MPI reports these */
    const char *innet_name = rl_switch_protocol(algorithm);
    if (innet_name) return rl_innet_allreduce(sendbuf, recvbuf, count, type, op, comm, innet_name);
    if (__builtin_expect(__atomic_load_n(&rl_nrules, __ATOMIC_ACQUIRE) < 0, 0)) rl_load_rules();
    int named = algorithm ? strcmp(algorithm, "shm") == 0 : rl_env_shm;
    int route = named ? RL_ROUTE_SHM : rl_auto_route(algorithm, comm, count, type, 1);
    if (route == RL_ROUTE_SHM) {
        if ((rc = rl_try_shm(sendbuf, recvbuf, count, type, op, comm, named)) != RL_SHM_DECLINED) return rc;
        algorithm = "auto";
        route = rl_auto_route(algorithm, comm, count, type, 0);
    }
    if (route == RL_ROUTE_LIBRARY) {
        rl_note_auto_library();
        return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
    }
    if (rl_rules_failed(comm)) return MPI_ERR_ARG;
    ex = cached_exec(comm, count, type, op, algorithm, strict);
    if (!ex) {
        int st = rl_prepare(RL_COLL_ALLREDUCE, algorithm, comm, (size_t)count, type, op, strict, 0, &ex, &rc);
        if (st == PREP_FALLBACK) return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
        if (st == PREP_ERROR) return rc;
        remember_exec(ex, comm, count, type, op, algorithm, strict);
    }
    if (count > 0 && (!recvbuf || !sendbuf)) {
        if (ex != last_call.ex) rl_exec_free(ex);
        return rl_buffer_error(comm);
    }
    if ((rc = rl_load_allreduce(ex, sendbuf, recvbuf)) == MPI_SUCCESS) rc = rl_run_blocking(ex);
    if (ex != last_call.ex) rl_exec_free(ex);
    if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
    return rc;
}

int rl_reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                            MPI_Comm comm, const char *algorithm, int strict) {
    rl_exec *ex;
    int rc, p = 1;
    if (comm != MPI_COMM_NULL) PMPI_Comm_size(comm, &p);
    if (rl_negative_count(comm, recvcount)) return MPI_ERR_COUNT;
    if (recvcount < 0 || recvbuf == MPI_IN_PLACE || (sendbuf == recvbuf && recvcount > 0) || comm == MPI_COMM_NULL)
        return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm);
    int st = rl_prepare(RL_COLL_REDUCE_SCATTER, algorithm, comm, (size_t)recvcount * (size_t)p, type, op, strict, 0,
                        &ex, &rc);
    if (st == PREP_FALLBACK) return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm);
    if (st == PREP_ERROR) return rc;
    if (recvcount > 0 && (!recvbuf || !sendbuf)) {
        rl_exec_free(ex);
        return rl_buffer_error(comm);
    }
    const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    size_t bytes = rl_span(ex, ex->count);
    int rank;
    PMPI_Comm_rank(comm, &rank);
    if ((rc = rl_alloc_work(ex, bytes, comm)) != MPI_SUCCESS) return rc;
    ex->src = in; /* read from the input until written (see rl_exec) */
    memset(ex->fresh, 1, ex->prog->blocks);
    ex->final_lo = (size_t)rank * (size_t)recvcount;
    ex->final_hi = ex->final_lo + (size_t)recvcount;
    ex->out = recvbuf;
    ex->out_from = (size_t)rank * (size_t)recvcount * (size_t)ex->extent;
    ex->out_n = (size_t)recvcount; /* typed_copy: the gaps of a type with holes stay untouched */
    rc = rl_run_blocking(ex);
    rl_exec_free(ex);
    if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
    return rc;
}

int rl_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm, const char *algorithm, int strict) {
    rl_exec *ex;
    int rc, p = 1, rank = 0;
    int same = sendbuf == MPI_IN_PLACE || (sendtype == recvtype && sendcount == recvcount);
    if (rl_negative_count(comm, recvcount) || (sendbuf != MPI_IN_PLACE && rl_negative_count(comm, sendcount)))
        return MPI_ERR_COUNT;
    if (comm == MPI_COMM_NULL || recvcount < 0 || recvbuf == MPI_IN_PLACE || !same)
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    PMPI_Comm_size(comm, &p);
    PMPI_Comm_rank(comm, &rank);
    int st = rl_prepare(RL_COLL_ALLGATHER, algorithm, comm, (size_t)recvcount * (size_t)p, recvtype, MPI_OP_NULL,
                        strict, 0, &ex, &rc);
    if (st == PREP_FALLBACK)
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    if (st == PREP_ERROR) return rc;
    if (recvcount > 0 && (!recvbuf || !sendbuf)) {
        rl_exec_free(ex);
        return rl_buffer_error(comm);
    }
    size_t mine = (size_t)rank * (size_t)recvcount * (size_t)ex->extent;
    if (ex->dense) {
        ex->buf = recvbuf;
        if (sendbuf != MPI_IN_PLACE && recvcount) memcpy((char *)recvbuf + mine, sendbuf, rl_span(ex, (size_t)recvcount));
    } else { /* holes: gather into a private vector, copy into recvbuf by the type map */
        size_t bytes = rl_span(ex, ex->count);
        if ((rc = rl_alloc_work(ex, bytes, comm)) != MPI_SUCCESS) return rc;
        if (recvcount)
            memcpy(ex->buf + mine, sendbuf == MPI_IN_PLACE ? (const char *)recvbuf + mine : (const char *)sendbuf,
                   rl_span(ex, (size_t)recvcount));
        ex->out = recvbuf;
        ex->out_from = 0;
        ex->out_n = ex->count;
    }
    rc = rl_run_blocking(ex);
    rl_exec_free(ex);
    if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
    return rc;
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
