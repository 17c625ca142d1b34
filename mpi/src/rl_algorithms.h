/* Algorithm names and programs (algorithms.c). */
#ifndef RL_ALGORITHMS_H
#define RL_ALGORITHMS_H
#include "rl_capi.h"

#pragma GCC visibility push(hidden)
/* Rank `rank`'s program of variant `alg` for collective `coll` on the shape (built once, then
 * cached); nonzero with a message if it cannot be built. */
int rl_get_program(const char *alg, int coll, const uint32_t *dims, size_t ndims, uint32_t rank,
                   const RlProgram **out, char *err, size_t errlen);
/* The variant the checker proves rank-ordered on 1D (non-commutative operators), or NULL. */
const char *rl_rank_ordered_variant(void);
/* The switch protocol the name (`algorithm`, or REDUCELAB_ALLREDUCE if NULL or empty) asks for,
 * or NULL: a name outside the registry when REDUCELAB_INNET_SCENARIO is set (innet.c). */
const char *rl_switch_protocol(const char *algorithm);
/* A user-facing name (NULL: REDUCELAB_ALLREDUCE, else auto) resolved to the variant that runs,
 * or "mpi"; 0 with a message if it cannot be. */
int rl_resolve(const char *name, int coll, const uint32_t *dims, size_t ndims, size_t bytes, int substitute,
               const char **out, char *err, size_t errlen);
#pragma GCC visibility pop
#endif
