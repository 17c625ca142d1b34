/* Active nonblocking operations (progress.c). */
#ifndef RL_PROGRESS_H
#define RL_PROGRESS_H
#include <mpi.h>
#include "rl_comm.h"

#pragma GCC visibility push(hidden)
struct rl_exec;
extern unsigned long rl_progress_events;
int rl_wait_all_progressing(int n, MPI_Request *reqs, MPI_Status *stats);
int rl_wait_some_progressing(int n, MPI_Request *reqs, int *outcount, int *idx, MPI_Status *stats);
void rl_unbind_comm_state(comm_state *st);
void rl_progress_locked(void);
int rl_activate(struct rl_exec *ex);
#pragma GCC visibility pop
#endif
