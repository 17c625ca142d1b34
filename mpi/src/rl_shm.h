/* The shared-memory allreduce (shm.c; docs/mpi.md, "Shared-memory allreduce"). */
#ifndef RL_SHM_H
#define RL_SHM_H
#include <mpi.h>
#include <stddef.h>
#include "rl_kernels.h"
#define RL_SHM_DECLINED (-1)
/* A blocking allreduce through the communicator's shared segment (made at the first call, a
 * collective). `kernel`: the runtime's kernel for a predefined op, or NULL for a user op
 * (MPI_Reduce_local, rank order). Returns an MPI error code (after calling the communicator's
 * error handler), or RL_SHM_DECLINED with the reason in `why` when this communicator or
 * datatype cannot use it (every rank declines alike); count > 0, buffers valid. */
int rl_shm_allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                     rl_kernel kernel, char *why, size_t whylen);
/* The same as a nonblocking operation (MPI_Iallreduce, or a persistent plan started many times),
 * progressed by progress.c like the schedules: create (datatype checks, no communication;
 * RL_SHM_DECLINED with the reason, alike on every rank), start (takes the operation's turn among
 * the calls on its communicator: call it at the MPI call or start, in MPI's order), progress
 * (`node`: the private duplicate, MPI_COMM_NULL while it is pending; never blocks; 1 when
 * complete, with the MPI error code in *err), free. The first operation on a communicator makes
 * its segment from its progress (nonblocking collectives); if the ranks share no node it runs
 * the MPI library's MPI_Iallreduce on the duplicate instead. */
typedef struct rl_shm_op rl_shm_op;
int rl_shm_op_create(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                     rl_kernel kernel, rl_shm_op **out, char *why, size_t whylen);
void rl_shm_op_start(rl_shm_op *o);
int rl_shm_op_progress(rl_shm_op *o, MPI_Comm node, int *err);
void rl_shm_op_free(rl_shm_op *o);
#endif
