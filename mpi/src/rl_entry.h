/* Entry points used by the interposition library: the collectives (blocking.c, requests.c;
 * `strict` = 0: an algorithm that cannot run a call falls back to the MPI library instead of
 * failing), progress.c's requests and progress thread, threads.c's thread level, stats.c's notices. */
#ifndef RL_ENTRY_H
#define RL_ENTRY_H
#include "reducelab_mpi.h"
int rl_allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                 const char *algorithm, int strict);
int rl_reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                            MPI_Comm comm, const char *algorithm, int strict);
int rl_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm, const char *algorithm, int strict);
int rl_iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                  const char *algorithm, int strict, MPI_Request *request);
int rl_active_count(void);
int rl_allreduce_init(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                      const char *algorithm, int strict, RL_Persistent *request);
int rl_persistent_running(RL_Persistent r);
/* progress.c: requests of active nonblocking operations, the progress thread */
int rl_is_active_request(MPI_Request r);
int rl_detach_request(MPI_Request r);
/* threads.c */
void rl_set_app_thread_level(int level);
/* progress.c */
int rl_progress_thread_start(void);
void rl_progress_thread_stop(void);
int rl_progress_thread_running(void);
/* stats.c */
void rl_notice(const char *msg);
#endif
