/* Nonblocking and persistent allreduces (requests.c): the entry points shared by the RL_* API
 * (strict = 1) and the interposition library (strict = 0, as in rl_blocking.h). */
#ifndef RL_REQUESTS_H
#define RL_REQUESTS_H
#include "reducelab_mpi.h"

#pragma GCC visibility push(hidden)
int rl_iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                  const char *algorithm, int strict, MPI_Request *request);
/* strict = 0: a call no schedule covers returns MPI_SUCCESS with *request NULL (the caller then
 * uses the MPI library's persistent allreduce). */
int rl_allreduce_init(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                      const char *algorithm, int strict, RL_Persistent *request);
/* 0 inactive (never started, or completed), 1 running. */
int rl_persistent_running(RL_Persistent r);
#pragma GCC visibility pop
#endif
