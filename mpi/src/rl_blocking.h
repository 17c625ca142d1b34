/* The blocking collectives (blocking.c): the entry points shared by the RL_* API (strict = 1: a
 * bad algorithm name is an error) and the interposition library (strict = 0: an algorithm that
 * cannot run a call falls back to the MPI library instead of failing). */
#ifndef RL_BLOCKING_H
#define RL_BLOCKING_H
#include <mpi.h>

#pragma GCC visibility push(hidden)
int rl_allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                 const char *algorithm, int strict);
int rl_reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                            MPI_Comm comm, const char *algorithm, int strict);
int rl_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm, const char *algorithm, int strict);
#pragma GCC visibility pop
#endif
