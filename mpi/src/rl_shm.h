/* The shared-memory allreduce (shm.c; docs/mpi.md, "Shared-memory allreduce"). */
#ifndef RL_SHM_H
#define RL_SHM_H
#include "rl_internal.h"
#define RL_SHM_DECLINED (-1)
/* A blocking allreduce through the communicator's shared segment (made at the first call, a
 * collective). `kernel`: the runtime's kernel for a predefined op, or NULL for a user op
 * (MPI_Reduce_local, rank order). Returns an MPI error code (after calling the communicator's
 * error handler), or RL_SHM_DECLINED with the reason in `why` when this communicator or
 * datatype cannot use it (every rank declines alike); count > 0, buffers valid. */
int rl_shm_allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                     rl_kernel kernel, char *why, size_t whylen);
/* engine.c: progress the active nonblocking ReduceLab operations if any (and no progress
 * thread does it) */
void rl_progress_others(void);
/* engine.c: the communicator's private duplicate (made with MPI_Comm_idup at the first
 * ReduceLab call on it; waited for while progressing the active operations) */
int rl_private_comm(MPI_Comm comm, MPI_Comm *dup);
#endif
