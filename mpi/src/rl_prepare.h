/* Preparing a collective (prepare.c). */
#ifndef RL_PREPARE_H
#define RL_PREPARE_H
#include "rl_exec.h"

#pragma GCC visibility push(hidden)
enum { PREP_OK = 0, PREP_FALLBACK = 1, PREP_ERROR = 2 };
int rl_is_predefined_op(MPI_Op op);
int rl_prepare(int coll, const char *algorithm, MPI_Comm comm, size_t count, MPI_Datatype type, MPI_Op op,
               int strict, int own_scratch, rl_exec **out, int *rc);
int rl_buffer_error(MPI_Comm comm);
int rl_negative_count(MPI_Comm comm, int count);
#pragma GCC visibility pop
#endif
