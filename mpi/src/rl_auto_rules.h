/* `auto`'s rules (auto_rules.c). */
#ifndef RL_AUTO_RULES_H
#define RL_AUTO_RULES_H
#include <mpi.h>

#pragma GCC visibility push(hidden)
extern int rl_nrules;  /* -1: not loaded yet */
extern int rl_env_shm; /* REDUCELAB_ALLREDUCE=shm */
/* Reads REDUCELAB_ALLREDUCE and REDUCELAB_RULES (once). */
void rl_load_rules(void);
/* `auto`'s choice for an allreduce: RL_ROUTE_LIBRARY, RL_ROUTE_SHM (`blocking` calls only) or
 * RL_ROUTE_SCHEDULE (also when another algorithm was asked for). */
int rl_auto_route(const char *algorithm, MPI_Comm comm, int count, MPI_Datatype type, int blocking);
int rl_auto_to_library(const char *algorithm, MPI_Comm comm, int count, MPI_Datatype type);
/* A bad rules file: MPI_ERR_ARG through the communicator's error handler, and 1. */
int rl_rules_failed(MPI_Comm comm);
/* A call below the crossover handed to the MPI library: counted, and said once. */
void rl_note_auto_library(void);
#pragma GCC visibility pop
#endif
