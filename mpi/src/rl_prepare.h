/* Preparing a collective (prepare.c). */
#ifndef RL_PREPARE_H
#define RL_PREPARE_H
#include "rl_exec.h"

#pragma GCC visibility push(hidden)
enum { PREP_OK = 0, PREP_FALLBACK = 1, PREP_ERROR = 2 };
int rl_is_predefined_op(MPI_Op op);
/* Sets up `*out` for collective `coll` whose working vector has `count` elements: PREP_OK,
 * PREP_FALLBACK (the MPI library should do it) or PREP_ERROR with an MPI error code in *rc
 * (already through the communicator's error handler). `strict`: the RL_* API (a bad name is an
 * error); `own_scratch`: nonblocking or persistent. */
int rl_prepare(int coll, const char *algorithm, MPI_Comm comm, size_t count, MPI_Datatype type, MPI_Op op,
               int strict, int own_scratch, rl_exec **out, int *rc);
/* MPI_ERR_BUFFER through the communicator's error handler. */
int rl_buffer_error(MPI_Comm comm);
/* A negative count on a valid communicator: MPI_ERR_COUNT through its error handler, and 1. */
int rl_negative_count(MPI_Comm comm, int count);
#pragma GCC visibility pop
#endif
