/* Counters of this process (RL_Counters, RL_Last_algorithm) and REDUCELAB_VERBOSE: fallbacks
 * explained once per reason, the counters printed at exit. */
#define _GNU_SOURCE
#include "reducelab_mpi.h"
#include "rl_stats.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long long rl_n_scheduled, rl_n_fallback;
char rl_last_algorithm[64];
static int verbose = -1;

void RL_Counters(long long *scheduled, long long *fallback) {
    if (scheduled) *scheduled = rl_n_scheduled;
    if (fallback) *fallback = rl_n_fallback;
}
const char *RL_Last_algorithm(void) { return rl_last_algorithm; }

static void print_counters(void) {
    fprintf(stderr, "reducelab: %lld collectives ran ReduceLab schedules, %lld went to the MPI library\n",
            rl_n_scheduled, rl_n_fallback);
}

/* REDUCELAB_VERBOSE=1: fallbacks are explained as they happen and the counters printed at exit. */
int rl_is_verbose(void) {
    if (verbose < 0) {
        const char *v = getenv("REDUCELAB_VERBOSE");
        verbose = v && *v && strcmp(v, "0") != 0;
        if (verbose) atexit(print_counters);
    }
    return verbose;
}

/* With REDUCELAB_VERBOSE, one line per process for each distinct reason (the first 32), so a
 * loop does not flood stderr. Locked: the shared-memory path may call it from two threads. */
void rl_note_once(const char *prefix, const char *why) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char seen[32][200];
    static int nseen;
    if (!rl_is_verbose()) return;
    pthread_mutex_lock(&mu);
    int known = nseen == 32;
    for (int i = 0; i < nseen && !known; i++) known = strncmp(seen[i], why, sizeof seen[i] - 1) == 0;
    if (!known) {
        snprintf(seen[nseen++], sizeof seen[0], "%s", why);
        fprintf(stderr, "reducelab: %s (said once per reason): %s\n", prefix, why);
    }
    pthread_mutex_unlock(&mu);
}

/* A call handed to the MPI library. */
void rl_note_fallback(const char *why) {
    rl_n_fallback++;
    rl_note_once("falling back to the MPI library", why);
}

void rl_note_thread_fallback(void) {
    static int told;
    __atomic_fetch_add(&rl_n_fallback, 1, __ATOMIC_RELAXED);
    if (!__atomic_exchange_n(&told, 1, __ATOMIC_ACQ_REL) && rl_is_verbose())
        fprintf(stderr, "reducelab: falling back to the MPI library (said once per reason): MPI_THREAD_MULTIPLE "
                        "(ReduceLab's per-process state is not locked; every call goes to the MPI library; "
                        "REDUCELAB_THREADS=serialized if calls never overlap)\n");
}

void rl_notice(const char *msg) {
    if (rl_is_verbose()) fprintf(stderr, "reducelab: %s\n", msg);
}
