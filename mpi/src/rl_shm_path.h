/* The shared-memory allreduce on the runtime's paths (shm_path.c). */
#ifndef RL_SHM_PATH_H
#define RL_SHM_PATH_H
#include "rl_exec.h"

#pragma GCC visibility push(hidden)
/* A blocking allreduce through the shared-memory allreduce (`named`: asked for by name, which
 * then says why it declines), or RL_SHM_DECLINED: the call takes the usual path. */
int rl_try_shm(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
               int named);
/* An execution that runs the shared-memory allreduce as a nonblocking operation (not started),
 * or NULL: the call takes the usual path. */
rl_exec *rl_shm_exec(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                     int named);
#pragma GCC visibility pop
#endif
