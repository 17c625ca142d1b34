/* REDUCELAB_ALLREDUCE=<protocol>: blocking allreduces through running software switches
 * (innet.c). */
#ifndef RL_INNET_H
#define RL_INNET_H
#include <mpi.h>

/* MPI_Allreduce through the switches of protocol `name` (as given: the session checks it against
 * the scenario's protocol). MPI_SUM on 32-bit integers and MPI_FLOAT; other pairs go to the MPI
 * library. Errors go to the communicator's error handler with the reason on stderr. */
int rl_innet_allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                       const char *name);
#endif
