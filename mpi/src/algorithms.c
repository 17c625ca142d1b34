/* Algorithm names and programs: the registry of crates/capi (RL_Algorithm_count/_name), a
 * user-facing name resolved to the variant that runs, and the cache of built programs. */
#define _GNU_SOURCE
#include "reducelab_mpi.h"
#include "rl_algorithms.h"
#include "rl_capi.h"
#include "rl_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Program cache: (algorithm, collective, shape, rank) -> program                               */

typedef struct prog_entry {
    char algorithm[64];
    int collective;
    uint32_t dims[8];
    size_t ndims;
    uint32_t rank;
    const RlProgram *prog;
    struct prog_entry *next;
} prog_entry;
static prog_entry *prog_cache;

int rl_get_program(const char *alg, int coll, const uint32_t *dims, size_t ndims, uint32_t rank,
                   const RlProgram **out, char *err, size_t errlen) {
    for (prog_entry *e = prog_cache; e; e = e->next)
        if (e->collective == coll && e->rank == rank && e->ndims == ndims && strcmp(e->algorithm, alg) == 0 &&
            memcmp(e->dims, dims, ndims * sizeof *dims) == 0) {
            *out = e->prog;
            return 0;
        }
    const RlProgram *p = NULL;
    int rc = rl_program_build(alg, coll, dims, ndims, rank, &p, err, errlen);
    if (rc != 0) return rc;
    prog_entry *e = calloc(1, sizeof *e);
    if (!e) {
        rl_program_free(p);
        snprintf(err, errlen, "out of memory");
        return 3;
    }
    snprintf(e->algorithm, sizeof e->algorithm, "%s", alg);
    e->collective = coll;
    memcpy(e->dims, dims, ndims * sizeof *dims);
    e->ndims = ndims;
    e->rank = rank;
    e->prog = p;
    e->next = prog_cache;
    prog_cache = e;
    *out = p;
    return 0;
}

/* The algorithm registry (crates/sched/src/registry.rs through crates/capi) is the only list
 * of names: RL_Algorithm_count/RL_Algorithm_name expose it, rl_algorithm_resolve turns any of its
 * names (variant, family, alias, the `auto` policy) into the variant that runs. "mpi" is not an
 * algorithm but this runtime's "hand the call to the MPI library". */
/* Whether a registry entry runs allreduce (its `collectives` list names it). */
static int runs_allreduce(const RlAlgorithmInfo *info) {
    for (const char *c = info->collectives; c && *c;) {
        size_t n = strcspn(c, ",");
        if (n == 9 && strncmp(c, "allreduce", 9) == 0) return 1;
        c += n + (c[n] == ',');
    }
    return 0;
}

/* The registry entries this runtime's calls accept (those that run allreduce: the all-to-all
 * algorithms do not), in registry order. */
static const char *names_of(int i) {
    RlAlgorithmInfo info;
    int k = 0;
    for (size_t j = 0; rl_algorithm_info(j, &info) == 0; j++)
        if (runs_allreduce(&info) && k++ == i) return info.name;
    return NULL;
}

int RL_Algorithm_count(void) {
    int n = 0;
    while (names_of(n)) n++;
    return n;
}

const char *RL_Algorithm_name(int i) { return i < 0 ? NULL : names_of(i); }

/* The variant the checker proves rank-ordered on 1D (non-commutative operators), or NULL. */
const char *rl_rank_ordered_variant(void) {
    RlAlgorithmInfo info;
    for (size_t i = 0; rl_algorithm_info(i, &info) == 0; i++)
        if (info.rank_ordered_1d) return info.name;
    return NULL;
}

static int in_registry(const char *name) {
    RlAlgorithmInfo info;
    for (size_t i = 0; rl_algorithm_info(i, &info) == 0; i++)
        if (strcmp(info.name, name) == 0) return 1;
    return 0;
}

/* "unknown ReduceLab algorithm 'x' (known: <every registry name>, mpi, shm; ...)". */
static void unknown_algorithm(const char *name, char *err, size_t errlen) {
    size_t n = (size_t)snprintf(err, errlen, "unknown ReduceLab algorithm '%s' (known: ", name);
    RlAlgorithmInfo info;
    for (size_t i = 0; n < errlen && rl_algorithm_info(i, &info) == 0; i++)
        n += (size_t)snprintf(err + n, errlen - n, "%s, ", info.name);
    if (n < errlen)
        snprintf(err + n, errlen - n, "mpi, shm; any other name is the protocol of running software switches, "
                                      "but REDUCELAB_INNET_SCENARIO is not set)");
}

/* Names of this runtime's own paths (mpi, shm) and of the registry: not switch protocols. */
static int runtime_name(const char *name) {
    return strcmp(name, "mpi") == 0 || strcmp(name, "shm") == 0 || in_registry(name);
}

/* REDUCELAB_INNET_SCENARIO is set (read once, at the first call: a benign race, same value). */
static int innet_scenario(void) {
    static int read = 0, set = 0;
    if (__builtin_expect(!read, 0)) {
        const char *s = getenv("REDUCELAB_INNET_SCENARIO");
        set = s && *s;
        read = 1;
    }
    return set;
}

/* The in-network path (innet.c): with REDUCELAB_INNET_SCENARIO set, any name outside the
 * registry (and other than mpi and shm) is taken for the protocol of the running switches and
 * passed on as given: libreducelab_innet.so checks it against the scenario's protocol (this
 * runtime keeps no list of protocols). Without the scenario such a name is unknown (rl_resolve
 * says so). `algorithm`, or REDUCELAB_ALLREDUCE if NULL or empty (read once: every
 * MPI_Allreduce asks). */
const char *rl_switch_protocol(const char *algorithm) {
    if (!innet_scenario()) return NULL;
    if (algorithm && *algorithm) return runtime_name(algorithm) ? NULL : algorithm;
    static int read = 0;
    static const char *env = NULL;
    if (__builtin_expect(!read, 0)) {
        const char *a = getenv("REDUCELAB_ALLREDUCE");
        env = a && *a && !runtime_name(a) ? strdup(a) : NULL; /* (kept: a later setenv may free a) */
        read = 1;
    }
    return env;
}

/* Resolves a user-facing name to a variant (or "mpi"). 0 and a message if unknown. Families
 * are resolved by the α-β model with α = 2 µs per message and β = 1/(4 GB/s) (shared memory on
 * one node; the exact values matter little, see docs/mpi.md). `substitute`: the interposition
 * library's reduce-scatter / allgather substitutes (registry field `substitute`). */
int rl_resolve(const char *name, int coll, const uint32_t *dims, size_t ndims, size_t bytes, int substitute,
               const char **out, char *err, size_t errlen) {
    if (!name || !*name) name = getenv("REDUCELAB_ALLREDUCE");
    if (!name || !*name) name = "auto";
    if (strcmp(name, "shm") == 0) { /* the shared-memory path is an allreduce (an allreduce it declined
                                      * has said why: rl_try_shm, rl_shm_exec) */
        if (coll != RL_COLL_ALLREDUCE)
            rl_note_once("shm not used", "reduce-scatter and allgather calls run auto's path (the shared-memory "
                                         "path is an allreduce)");
        name = "auto";
    }
    if (rl_switch_protocol(name)) { /* through the software switch: blocking allreduces only */
        rl_note_once("switch algorithm not used", "nonblocking, persistent, reduce-scatter and allgather calls run auto's path "
                                     "(the switch path is blocking allreduce only)");
        name = "auto";
    }
    if (strcmp(name, "mpi") == 0) {
        *out = "mpi";
        return 1;
    }
    int rc = rl_algorithm_resolve(name, coll, dims, ndims, (uint64_t)bytes, 2e-6, 1.0 / 4e9, substitute, out, err,
                                  errlen);
    if (rc != 0 && !in_registry(name)) unknown_algorithm(name, err, errlen);
    return rc == 0;
}
