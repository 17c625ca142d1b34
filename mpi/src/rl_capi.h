/* The C ABI of crates/capi (Rust, linked in as a static library): one rank's program of a
 * schedule, and the algorithm registry. */
#ifndef RL_CAPI_H
#define RL_CAPI_H
#include <stddef.h>
#include <stdint.h>

typedef struct { uint32_t peer, op, first_range, nranges, nblocks, direct; } RlTransfer;
typedef struct { uint32_t first, nsends, nrecvs; } RlStep;
typedef struct {
    uint32_t ranks, rank, blocks, nsteps, noncommutative_safe;
    const RlStep *steps;
    const RlTransfer *transfers;
    const uint32_t *ranges;
    const uint32_t *block_owner;
    const char *algorithm;
} RlProgram;
enum { RL_SEND = 0, RL_RECV_COPY = 1, RL_RECV_REDUCE_INCOMING_FIRST = 2, RL_RECV_REDUCE_LOCAL_FIRST = 3 };
enum { RL_COLL_ALLREDUCE = 0, RL_COLL_REDUCE_SCATTER = 1, RL_COLL_ALLGATHER = 2 };
int32_t rl_program_build(const char *algorithm, int32_t collective, const uint32_t *dims, size_t ndims,
                         uint32_t rank, const RlProgram **out, char *err, size_t errlen);
void rl_program_free(const RlProgram *p);
typedef struct {
    const char *name, *family, *kind, *size_class, *resolves_to, *substitute, *summary;
    uint32_t max_ranks, direct_plan, model_row, rank_ordered_1d, halves, min_dims;
    const char *collectives;
} RlAlgorithmInfo;
size_t rl_algorithm_count(void);
int32_t rl_algorithm_info(size_t i, RlAlgorithmInfo *out);
int32_t rl_algorithm_resolve(const char *name, int32_t collective, const uint32_t *dims, size_t ndims, uint64_t bytes,
                             double alpha_s, double beta_s_per_byte, int32_t substitute, const char **out, char *err,
                             size_t errlen);
int32_t rl_crossover_bytes(const char *family, const uint32_t *dims, size_t ndims, double alpha_s,
                           double beta_s_per_byte, uint64_t *out, char *err, size_t errlen);
#endif
