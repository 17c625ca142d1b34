/* REDUCELAB_ALLREDUCE=canary, switchml, atp: blocking allreduces through running software switches
 * (innet.c). */
#ifndef RL_INNET_H
#define RL_INNET_H
#include <mpi.h>

/* The switch algorithm `algorithm` (or REDUCELAB_ALLREDUCE when it is NULL or empty) names
 * ("canary", "switchml", "atp" or "dsa", static strings), or NULL. */
const char *rl_innet_named(const char *algorithm);

/* MPI_Allreduce through the switch (MPI_SUM on 32-bit integers and MPI_FLOAT; other pairs go to
 * the MPI library). Errors go to the communicator's error handler with the reason on stderr. */
int rl_innet_allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                       const char *algorithm);
#endif
