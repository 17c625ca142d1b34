/* `auto`'s rules: the crossover to the MPI library and the shared-memory range per communicator
 * size (REDUCELAB_RULES, or the shipped defaults of rl_rules.h), RL_Auto_*. */
#define _GNU_SOURCE
#include "reducelab_mpi.h"
#include "rl_auto_rules.h"
#include "rl_rules.h"
#include "rl_stats.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* `auto`'s crossover to the MPI library                                                       */

/* Below a measured size the MPI library's own allreduce is faster than any schedule here (its
 * small-message path costs less per call than ours), so `auto` hands those calls to it. Rules:
 * per communicator size, the smallest vector (bytes) from which `auto` runs ReduceLab
 * schedules; a communicator uses the rule of the largest rule size <= its size (none: always
 * schedules). REDUCELAB_RULES=FILE reads them from a file written by `reducelab tune mpi`
 * (lines "RANKS MIN_BYTES", # comments), REDUCELAB_RULES=none disables the crossover, unset
 * uses the shipped defaults below (measured with `reducelab tune mpi`, docs/mpi.md). Every rank
 * must see the same rules (the decision is local and must agree, as for the algorithm).
 * REDUCELAB_RULES and REDUCELAB_ALLREDUCE are read once, at the first decision; after that a
 * decision is a few loads and compares (RL_Auto_uses_library, measured by bench_mpi --decision). */
typedef struct {
    int ranks;
    long long min_bytes;
    /* blocking allreduces of shm_min <= bytes < shm_max use the shared-memory allreduce when
     * the communicator is on one node (shm_max 0: never; LLONG_MAX: no upper bound) */
    long long shm_min, shm_max;
} rl_rule;
static const rl_rule default_rules[] = {RL_DEFAULT_RULES};
static rl_rule rules[64];
int rl_nrules = -1;  /* -1: not loaded yet */
static int env_auto = 0; /* REDUCELAB_ALLREDUCE is unset, auto or shm (shm's other calls run auto) */
int rl_env_shm = 0;  /* REDUCELAB_ALLREDUCE=shm */
static char rules_error[400];

static void load_rules_once(void);
void rl_load_rules(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_rules_once); /* the shared-memory path decides at MPI_THREAD_MULTIPLE too */
}

/* "inf" or a number of bytes */
static int parse_bytes(const char *t, long long *out) {
    if (strcmp(t, "inf") == 0) {
        *out = LLONG_MAX;
        return 1;
    }
    char *end = NULL;
    *out = strtoll(t, &end, 10);
    return end != t && *end == 0 && *out >= 0;
}

static void load_rules_once(void) {
    const char *a = getenv("REDUCELAB_ALLREDUCE");
    rl_env_shm = a && strcmp(a, "shm") == 0;
    env_auto = !a || !*a || strcmp(a, "auto") == 0 || rl_env_shm;
    const char *f = getenv("REDUCELAB_RULES");
    int n = 0;
    if (!f || !*f) {
        for (size_t i = 0; i < sizeof default_rules / sizeof *default_rules && n < 64; i++) rules[n++] = default_rules[i];
    } else if (strcmp(f, "none") != 0) {
        FILE *in = fopen(f, "r");
        if (!in) {
            snprintf(rules_error, sizeof rules_error, "REDUCELAB_RULES='%s': cannot open the file", f);
        } else {
            char line[512];
            for (int ln = 1; fgets(line, sizeof line, in); ln++) {
                char *h = strchr(line, '#');
                if (h) *h = 0;
                char *t = line;
                while (*t == ' ' || *t == '\t') t++;
                if (*t == 0 || *t == '\n' || *t == '\r') continue;
                long long r = 0, b = 0, smin = 0, smax = 0;
                char s1[32] = "", s2[32] = "", extra[2];
                int nf = sscanf(t, "%lld %lld %31s %31s %1s", &r, &b, s1, s2, extra);
                if ((nf != 2 && nf != 4) || r < 1 || r > (1 << 24) || b < 0 ||
                    (nf == 4 && (!parse_bytes(s1, &smin) || smin == LLONG_MAX || !parse_bytes(s2, &smax) ||
                                 smax <= smin))) {
                    snprintf(rules_error, sizeof rules_error,
                             "REDUCELAB_RULES='%s' line %d: want 'RANKS MIN_BYTES' or 'RANKS MIN_BYTES SHM_MIN_BYTES "
                             "SHM_MAX_BYTES' (RANKS >= 1, MIN_BYTES >= 0, SHM_MIN_BYTES < SHM_MAX_BYTES, which may "
                             "be inf)",
                             f, ln);
                    break;
                }
                if (n == 64) {
                    snprintf(rules_error, sizeof rules_error, "REDUCELAB_RULES='%s': more than 64 rules", f);
                    break;
                }
                rules[n++] = (rl_rule){(int)r, b, smin, smax};
            }
            fclose(in);
        }
    }
    /* sorted by ranks, a later line for the same size replaces an earlier one */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && rules[j - 1].ranks > rules[j].ranks; j--) {
            rl_rule t = rules[j];
            rules[j] = rules[j - 1];
            rules[j - 1] = t;
        }
    __atomic_store_n(&rl_nrules, rules_error[0] ? 0 : n, __ATOMIC_RELEASE);
}

/* `auto`'s choice for an allreduce: RL_ROUTE_LIBRARY (below the crossover), RL_ROUTE_SHM (in
 * the rule's shared-memory range; `blocking` calls only) or RL_ROUTE_SCHEDULE (also: another
 * algorithm was asked for, or the arguments are for the library to judge). */
int rl_auto_route(const char *algorithm, MPI_Comm comm, int count, MPI_Datatype type, int blocking) {
    if (__builtin_expect(__atomic_load_n(&rl_nrules, __ATOMIC_ACQUIRE) < 0, 0)) rl_load_rules();
    if (rl_nrules == 0 || count < 0 || comm == MPI_COMM_NULL || type == MPI_DATATYPE_NULL) return RL_ROUTE_SCHEDULE;
    if (algorithm ? strcmp(algorithm, "auto") != 0 && strcmp(algorithm, "shm") != 0 : !env_auto)
        return RL_ROUTE_SCHEDULE;
    int p = 0, ts = 0;
    if (PMPI_Comm_size(comm, &p) != MPI_SUCCESS || PMPI_Type_size(type, &ts) != MPI_SUCCESS) return RL_ROUTE_SCHEDULE;
    const rl_rule *r = NULL;
    for (int i = 0; i < rl_nrules && rules[i].ranks <= p; i++) r = &rules[i];
    if (!r) return RL_ROUTE_SCHEDULE;
    long long bytes = (long long)count * ts;
    if (blocking && bytes >= r->shm_min && bytes < r->shm_max) return RL_ROUTE_SHM;
    return bytes < r->min_bytes ? RL_ROUTE_LIBRARY : RL_ROUTE_SCHEDULE;
}

int rl_auto_to_library(const char *algorithm, MPI_Comm comm, int count, MPI_Datatype type) {
    return rl_auto_route(algorithm, comm, count, type, 0) == RL_ROUTE_LIBRARY;
}

int RL_Auto_uses_library(MPI_Comm comm, int count, MPI_Datatype type) {
    return rl_auto_to_library(NULL, comm, count, type);
}

int RL_Auto_route(MPI_Comm comm, int count, MPI_Datatype type) { return rl_auto_route(NULL, comm, count, type, 1); }

long long RL_Auto_shm_range(int ranks, long long *max_bytes) {
    rl_load_rules();
    const rl_rule *r = NULL;
    for (int i = 0; i < rl_nrules && rules[i].ranks <= ranks; i++) r = &rules[i];
    if (!r || r->shm_max <= r->shm_min) return -1;
    if (max_bytes) *max_bytes = r->shm_max;
    return r->shm_min;
}

/* The rules in force ("default", "none" or the file) and the crossover for `ranks` (-1: none). */
long long RL_Auto_crossover(int ranks) {
    rl_load_rules();
    const rl_rule *r = NULL;
    for (int i = 0; i < rl_nrules && rules[i].ranks <= ranks; i++) r = &rules[i];
    return r ? r->min_bytes : -1;
}

/* A bad rules file is an MPI_ERR_ARG with the message (once per process), as a bad
 * REDUCELAB_TORUS is; 0 if the rules are fine. */
int rl_rules_failed(MPI_Comm comm) {
    if (__builtin_expect(__atomic_load_n(&rl_nrules, __ATOMIC_ACQUIRE) < 0, 0)) rl_load_rules();
    if (!rules_error[0]) return 0;
    static int told;
    if (!told++) fprintf(stderr, "reducelab: %s\n", rules_error);
    PMPI_Comm_call_errhandler(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, MPI_ERR_ARG);
    return 1;
}

void rl_note_auto_library(void) {
    rl_note_fallback("auto: below the measured crossover the MPI library's allreduce is faster (REDUCELAB_RULES; "
                     "docs/mpi.md)");
}
