/* Thread levels (the application's and the MPI library's) and the runtime's mutex. */
#define _GNU_SOURCE
#include "rl_threads.h"

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Thread levels. The application's level is what it asked for in MPI_Init_thread, capped by
 * what the library gave (recorded by the interposition library's MPI_Init/MPI_Init_thread,
 * rl_set_app_thread_level); without that record (the RL_* library alone), the library's level
 * (PMPI_Query_thread). The two differ only when REDUCELAB_PROGRESS=thread raised the library
 * to MPI_THREAD_MULTIPLE for the progress thread.
 *
 * Rule: when the APPLICATION is at MPI_THREAD_MULTIPLE, every call goes to the MPI library
 * (counted atomically; REDUCELAB_VERBOSE says so once): the program cache, the last call's
 * execution and the blocking scratch are per process and unlocked, and locks around blocking
 * collectives could deadlock (two ranks' threads taking them in opposite orders), unless
 * REDUCELAB_THREADS=serialized says the application never has two threads in these calls at
 * once (mpi4py asks for MPI_THREAD_MULTIPLE by default, for example). The level cannot change
 * after MPI_Init_thread, so it is asked once.
 *
 * Whenever the LIBRARY is at MPI_THREAD_MULTIPLE (the progress thread, or an application at
 * that level), the list of active nonblocking operations and everything they touch while they
 * progress (their executions, the communicator's pending duplicate) are under one mutex
 * (rl_mu; `rl_locking`), which no thread holds while blocked in MPI. */
static int app_level = -1;
void rl_set_app_thread_level(int level) { __atomic_store_n(&app_level, level, __ATOMIC_RELEASE); }

int rl_thread_multiple(void) {
    static int level = -1;
    int l = __atomic_load_n(&level, __ATOMIC_ACQUIRE);
    if (l < 0) {
        int provided = __atomic_load_n(&app_level, __ATOMIC_ACQUIRE);
        const char *t = getenv("REDUCELAB_THREADS"); /* "serialized": the application promises it */
        if (provided < 0) PMPI_Query_thread(&provided);
        l = provided == MPI_THREAD_MULTIPLE && !(t && strcmp(t, "serialized") == 0);
        __atomic_store_n(&level, l, __ATOMIC_RELEASE);
    }
    return l;
}

pthread_mutex_t rl_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t rl_cv = PTHREAD_COND_INITIALIZER; /* an operation became active (progress thread) */
int rl_locking = -1;
int rl_use_lock(void) {
    int l = __atomic_load_n(&rl_locking, __ATOMIC_ACQUIRE);
    if (l < 0) {
        int provided = MPI_THREAD_SINGLE, init = 0;
        PMPI_Initialized(&init);
        if (!init) return 0; /* before MPI_Init: one thread by MPI's rules; decide later */
        PMPI_Query_thread(&provided);
        l = provided == MPI_THREAD_MULTIPLE;
        __atomic_store_n(&rl_locking, l, __ATOMIC_RELEASE);
    }
    return l;
}
/* This thread holds rl_mu (an MPI callback run from inside our own progress must not rl_lock it). */
__thread int rl_mu_held;
void rl_lock(void) {
    if (rl_use_lock()) {
        pthread_mutex_lock(&rl_mu);
        rl_mu_held = 1;
    }
}
void rl_unlock(void) {
    if (rl_use_lock()) {
        rl_mu_held = 0;
        pthread_mutex_unlock(&rl_mu);
    }
}
