/* ReduceLab MPI runtime: executes the schedules of crates/sched over MPI point-to-point.
 *
 * Algorithms (the `algorithm` argument, or REDUCELAB_ALLREDUCE for the interposition library):
 *   any name of the algorithm registry that runs allreduce (crates/sched/src/registry.rs; listed
 *   by RL_Algorithm_name below and by `reducelab model --list`): the variants (ring, swing-bandwidth,
 *   ...), the families swing / recursive-doubling (latency- or bandwidth-optimal variant chosen
 *   by vector size), aliases (rabenseifner) and auto (ReduceLab's choice by vector size, see
 *   docs/mpi.md), plus
 *   mpi                          the MPI library's own collective (PMPI_*).
 * NULL means REDUCELAB_ALLREDUCE, or auto if that is unset. The virtual torus is
 * REDUCELAB_TORUS (e.g. "4x2"; used when its product is the communicator size, 1D otherwise).
 *
 * Semantics are MPI's: predefined ops (own vectorised kernels) and user ops (MPI_Reduce_local),
 * MPI_IN_PLACE, any count and any communicator size. Non-commutative ops run on a schedule the
 * checker proved rank-ordered (recursive-doubling-latency on 1D) whatever algorithm was asked.
 * Errors are reported through the communicator's error handler, as MPI does.
 */
#ifndef REDUCELAB_MPI_H
#define REDUCELAB_MPI_H

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

int RL_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                 MPI_Comm comm, const char *algorithm);
int RL_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype,
                            MPI_Op op, MPI_Comm comm, const char *algorithm);
int RL_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm, const char *algorithm);

/* Nonblocking allreduce: returns an MPI request (a generalized request) completed by the
 * progress made in RL_Progress, MPI_Wait/Test* of the interposition library, or RL_Wait. */
int RL_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm, const char *algorithm, MPI_Request *request);

/* Persistent allreduce: plan once (schedule, datatype, kernel, scratch), start many times. */
typedef struct RL_Persistent_s *RL_Persistent;
int RL_Allreduce_init(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                      MPI_Comm comm, const char *algorithm, RL_Persistent *request);
int RL_Start(RL_Persistent request);
/* Completes a started persistent operation (progressing it); a no-op if not started. */
int RL_Persistent_wait(RL_Persistent request);
/* 1 in *flag if the started operation has completed (progresses it once). */
int RL_Persistent_test(RL_Persistent request, int *flag);
int RL_Persistent_free(RL_Persistent *request);

/* Progress every active nonblocking/persistent ReduceLab operation of this process once. */
int RL_Progress(void);
/* Wait for an MPI request while progressing ReduceLab operations (use this, not MPI_Wait,
 * when the interposition library is not loaded). */
int RL_Wait(MPI_Request *request, MPI_Status *status);

/* The algorithm registry's names that run allreduce (every name but the all-to-all algorithms):
 * their number, and name i (NULL when i is out of range). */
int RL_Algorithm_count(void);
const char *RL_Algorithm_name(int i);

/* Counters of this process: collectives executed by a ReduceLab schedule, and calls handed to
 * the MPI library (PMPI) instead (algorithm "mpi", unsupported datatype/communicator, ...). */
void RL_Counters(long long *scheduled, long long *fallback);
/* Name of the schedule the last ReduceLab collective of this process ran ("" if none). */
const char *RL_Last_algorithm(void);
/* `auto`'s crossover (docs/mpi.md): 1 if an allreduce of `count` elements of `type` on `comm`
 * with algorithm `auto` (REDUCELAB_ALLREDUCE unset or auto) goes to the MPI library, and the
 * smallest vector in bytes from which `auto` runs schedules on `ranks` ranks (-1: at every size),
 * from REDUCELAB_RULES or the shipped defaults. */
int RL_Auto_uses_library(MPI_Comm comm, int count, MPI_Datatype type);
long long RL_Auto_crossover(int ranks);
/* `auto`'s choice for a blocking allreduce (REDUCELAB_ALLREDUCE unset, auto or shm):
 * RL_ROUTE_LIBRARY, RL_ROUTE_SHM (the shared-memory allreduce, if the communicator is on one
 * node) or RL_ROUTE_SCHEDULE; and the shared-memory range [returned, *max_bytes) on `ranks`
 * ranks (-1: none; *max_bytes LLONG_MAX: no upper bound). */
enum { RL_ROUTE_SCHEDULE = 0, RL_ROUTE_LIBRARY = 1, RL_ROUTE_SHM = 2 };
int RL_Auto_route(MPI_Comm comm, int count, MPI_Datatype type);
long long RL_Auto_shm_range(int ranks, long long *max_bytes);
/* Shared-memory segments this process has mapped (one per communicator that used the
 * shared-memory allreduce; unmapped when the communicator is freed). */
int RL_Shm_segments(void);
/* Bytes of those segments (each: a header and 2p slots as large as the largest vector reduced on
 * the communicator so far, rounded up to 4 KiB, at most REDUCELAB_SHM_BYTES in all). */
long long RL_Shm_bytes(void);

#ifdef __cplusplus
}
#endif
#endif
