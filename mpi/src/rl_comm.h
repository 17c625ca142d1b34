/* Per-communicator state (comm.c). */
#ifndef RL_COMM_H
#define RL_COMM_H
#include <mpi.h>

#pragma GCC visibility push(hidden)
/* The duplicate is made with MPI_Comm_idup at the first ReduceLab call on the communicator
 * (that call is a collective on it, so every rank starts the duplicate at the same point of
 * the communicator's collective order) and completed without blocking: a nonblocking
 * operation keeps it in its state machine (exec.c binds the operation to the duplicate once
 * the idup has completed), and a blocking call waits for it while progressing the
 * active nonblocking operations. A blocking PMPI_Comm_dup inside the first MPI_Iallreduce
 * deadlocked two fresh communicators started in opposite orders on two ranks. */
typedef struct {
    MPI_Comm dup;
    MPI_Request dup_req; /* the pending MPI_Comm_idup (under rl_mu), MPI_REQUEST_NULL once done */
    int users;    /* active operations on it (under rl_mu) */
    int orphaned; /* the user's communicator was freed: the last user frees this state */
    unsigned seq;
    int tag_ub;
} comm_state;
/* The communicator's state, made at the first call on it (its duplicate may still be pending:
 * rl_comm_ready_locked). A collective on comm the first time. (Two threads may get the states of
 * two communicators at once: the shared-memory path.) */
int rl_get_comm_state(MPI_Comm comm, comm_state **out);
/* The communicator's state if it has one (a local lookup): 1 and *out, or 0. */
int rl_comm_state_of(MPI_Comm comm, comm_state **out);
/* 1 once the duplicate exists (rl_mu held). */
int rl_comm_ready_locked(comm_state *st);
/* Blocking callers: waits for the duplicate, progressing the active operations meanwhile. */
void rl_comm_wait_ready(comm_state *st);
/* The communicator's private duplicate, waited for (made at the first ReduceLab call on it). */
int rl_private_comm(MPI_Comm comm, MPI_Comm *dup);
/* An active operation on cs completed (rl_mu held): the last one on a freed communicator frees
 * the state. */
void rl_comm_state_release(comm_state *cs);
/* When the user's communicator is freed, the layers above let go of its state: `bind` binds
 * the active operations still waiting for its duplicate (which exists by then; not called
 * when MPICH defers the release to the last operation), `forget` drops what they cached for
 * it. Each layer sets its hook when it first holds on to a state (unset: nothing to do). */
void rl_comm_hook_bind(void (*bind)(comm_state *st));
void rl_comm_hook_forget(void (*forget)(const comm_state *st));
#pragma GCC visibility pop
#endif
