/* Active nonblocking operations and their progress (progress.c). */
#ifndef RL_PROGRESS_H
#define RL_PROGRESS_H
#include <mpi.h>

#pragma GCC visibility push(hidden)
/* An operation on the active list (the first member of its owner's state, exec.c's rl_exec). */
typedef struct rl_active rl_active;
typedef struct {
    /* Advances it without blocking (rl_mu held): 1 when it has completed, with its MPI error
     * code in *err. */
    int (*advance)(rl_active *op, int *err);
    /* Once it has left the list (rl_mu held): finishes it and returns its final error code;
     * frees it if it has a request (which progress.c then completes). */
    int (*complete)(rl_active *op, int err);
} rl_active_ops;
struct rl_active {
    const rl_active_ops *ops;
    rl_active *next;
    MPI_Request greq; /* its generalized request (completed when it completes), or MPI_REQUEST_NULL */
    int detached;     /* MPI_Request_free'd while active: the request is freed when it completes */
};
/* Puts op on the list (rl_mu held), advances what it can and wakes the progress thread; the
 * first error of that sweep. */
int rl_activate_locked(rl_active *op);
/* The list (rl_mu held). */
rl_active *rl_active_list(void);
/* An operation moved (a step completed; rl_mu held): the progress thread does not idle. */
void rl_progress_moved(void);
/* One sweep over the active operations (rl_mu held). */
void rl_progress_locked(void);
/* Progress the active operations if any (and no progress thread does it). */
void rl_progress_others(void);
/* PMPI_Waitall / PMPI_Waitsome, progressing the active operations meanwhile if any (and no
 * progress thread does it). */
int rl_wait_all_progressing(int n, MPI_Request *reqs, MPI_Status *stats);
int rl_wait_some_progressing(int n, MPI_Request *reqs, int *outcount, int *idx, MPI_Status *stats);

/* For the interposition library: active operations and their requests, the progress thread. */
int rl_active_count(void);
int rl_is_active_request(MPI_Request r);
int rl_detach_request(MPI_Request r);
int rl_progress_thread_start(void);
void rl_progress_thread_stop(void);
int rl_progress_thread_running(void);
#pragma GCC visibility pop
#endif
