/* Per-communicator state (comm.c). */
#ifndef RL_COMM_H
#define RL_COMM_H
#include <mpi.h>

#pragma GCC visibility push(hidden)
/* The duplicate is made with MPI_Comm_idup at the first ReduceLab call on the communicator
 * (that call is a collective on it, so every rank starts the duplicate at the same point of
 * the communicator's collective order) and completed without blocking: a nonblocking
 * operation keeps it in its state machine (rl_progress_exec binds the operation to the duplicate
 * once the idup has completed), and a blocking call waits for it while progressing the
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
extern int rl_comm_keyval;
int rl_comm_ready_locked(comm_state *st);
void rl_comm_wait_ready(comm_state *st);
int rl_get_comm_state(MPI_Comm comm, comm_state **out);
void rl_comm_state_release(comm_state *cs);
#pragma GCC visibility pop
#endif
