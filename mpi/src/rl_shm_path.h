/* The shared-memory allreduce on the runtime's paths (shm_path.c). */
#ifndef RL_SHM_PATH_H
#define RL_SHM_PATH_H
#include "rl_exec.h"

#pragma GCC visibility push(hidden)
int rl_try_shm(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
               int named);
rl_exec *rl_shm_exec(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                     int named);
#pragma GCC visibility pop
#endif
