/* The shared-memory allreduce (shm.c) on the runtime's paths: a blocking allreduce through it, or
 * an execution that runs it as a nonblocking operation. */
#define _GNU_SOURCE
#include "rl_shm_path.h"
#include "rl_shm.h"
#include "rl_exec.h"
#include "rl_kernels.h"
#include "rl_comm.h"
#include "rl_prepare.h"
#include "rl_stats.h"
#include "rl_threads.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The shared-memory allreduce (shm.c) for a blocking allreduce, asked for by name (`named`) or
 * chosen by `auto`'s rules, at every thread level (its state is per communicator).
 * RL_SHM_DECLINED: this call takes the usual path (a named `shm` says why with
 * REDUCELAB_VERBOSE; every rank declines alike: the reasons depend only on the communicator,
 * the datatype, the op and the environment, which must agree across ranks). */
int rl_try_shm(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
               int named) {
    char why[300] = "";
    int inter = 0;
    if (count == 0 || comm == MPI_COMM_NULL || type == MPI_DATATYPE_NULL || op == MPI_OP_NULL)
        return RL_SHM_DECLINED; /* the usual path: count 0, or the library reports the error */
    rl_kernel kernel = rl_kernel_for(op, type);
    if (!kernel && rl_is_predefined_op(op)) return RL_SHM_DECLINED; /* the usual path says why */
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) {
        snprintf(why, sizeof why, "shm: inter-communicator");
    } else if (!recvbuf || !sendbuf) {
        return rl_buffer_error(comm);
    } else {
        int rc = rl_shm_allreduce(sendbuf, recvbuf, count, type, op, comm, kernel, why, sizeof why);
        if (rc != RL_SHM_DECLINED) {
            __atomic_fetch_add(&rl_n_scheduled, 1, __ATOMIC_RELAXED);
            if (!rl_use_lock()) snprintf(rl_last_algorithm, sizeof rl_last_algorithm, "shm");
            rl_is_verbose();
            return rc;
        }
    }
    if (named) rl_note_once("shm not used, running auto's path", why);
    return RL_SHM_DECLINED;
}

/* The shared-memory allreduce as a nonblocking operation (MPI_Iallreduce, a persistent plan),
 * asked for by name or chosen by `auto`'s rules, or NULL: the call takes the usual path (a named
 * `shm` says why; every rank declines alike). Not at MPI_THREAD_MULTIPLE (nonblocking calls go
 * to the library there, see rl_prepare). Not started: rl_shm_op_start at the call or each start. */
rl_exec *rl_shm_exec(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                     int named) {
    char why[300] = "";
    int inter = 0;
    if (rl_thread_multiple() || count <= 0 || comm == MPI_COMM_NULL || type == MPI_DATATYPE_NULL || op == MPI_OP_NULL ||
        !sendbuf || !recvbuf)
        return NULL; /* the usual path (the library, or an error) */
    rl_kernel kernel = rl_kernel_for(op, type);
    if (!kernel && rl_is_predefined_op(op)) return NULL; /* the usual path says why */
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) {
        snprintf(why, sizeof why, "shm: inter-communicator");
    } else {
        comm_state *cs = NULL; /* (starts the private duplicate now, at the collective call) */
        rl_shm_op *o = NULL;
        if (rl_get_comm_state(comm, &cs) != MPI_SUCCESS) {
            snprintf(why, sizeof why, "shm: no private duplicate of the communicator");
        } else if (rl_shm_op_create(sendbuf, recvbuf, count, type, op, comm, kernel, &o, why, sizeof why) ==
                   MPI_SUCCESS) {
            rl_exec *ex = calloc(1, sizeof *ex);
            if (ex) {
                ex->shm = o;
                ex->cs = cs;
                ex->comm = MPI_COMM_NULL; /* bound to the duplicate when it exists (progress_exec) */
                ex->node.greq = MPI_REQUEST_NULL;
                return ex;
            }
            rl_shm_op_free(o);
            snprintf(why, sizeof why, "shm: out of memory");
        }
    }
    if (named) rl_note_once("shm not used, running auto's path", why);
    return NULL;
}
