/* `auto`'s rules (auto_rules.c). */
#ifndef RL_AUTO_RULES_H
#define RL_AUTO_RULES_H
#include <mpi.h>

#pragma GCC visibility push(hidden)
extern int rl_nrules;  /* -1: not loaded yet */
extern int rl_env_shm; /* REDUCELAB_ALLREDUCE=shm */
void rl_load_rules(void);
int rl_auto_route(const char *algorithm, MPI_Comm comm, int count, MPI_Datatype type, int blocking);
int rl_auto_to_library(const char *algorithm, MPI_Comm comm, int count, MPI_Datatype type);
int rl_rules_failed(MPI_Comm comm);
void rl_note_auto_library(void);
#pragma GCC visibility pop
#endif
