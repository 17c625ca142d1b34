/* Active nonblocking operations: the list, RL_Progress and RL_Wait, blocking waits that progress
 * them, the requests the interposition library asks about, and the progress thread
 * (REDUCELAB_PROGRESS=thread). What an operation is and how it advances is its own business
 * (rl_active_ops: exec.c's executions). */
#define _GNU_SOURCE
#include "reducelab_mpi.h"
#include "rl_progress.h"
#include "rl_threads.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

/* Active nonblocking operations (under rl_mu); progress_events counts steps completed, so the
 * progress thread knows whether a sweep moved anything. */
static rl_active *active;
static unsigned long progress_events;
static int progress_thread_on;

void rl_progress_moved(void) { progress_events++; }

rl_active *rl_active_list(void) { return active; }

/* A blocking collective waits with PMPI_Waitall/Waitsome, unless nonblocking operations are
 * active and no progress thread runs: then with tests that progress them too (their peers may
 * need them before they join this collective). */
static int others_need_progress(void) {
    return !__atomic_load_n(&progress_thread_on, __ATOMIC_ACQUIRE) && __atomic_load_n(&active, __ATOMIC_ACQUIRE);
}
int rl_wait_all_progressing(int n, MPI_Request *reqs, MPI_Status *stats) {
    if (!others_need_progress()) return PMPI_Waitall(n, reqs, stats);
    for (;;) {
        int flag = 0, rc = PMPI_Testall(n, reqs, &flag, stats);
        if (rc != MPI_SUCCESS || flag) return rc;
        RL_Progress();
    }
}
int rl_wait_some_progressing(int n, MPI_Request *reqs, int *outcount, int *idx, MPI_Status *stats) {
    if (!others_need_progress()) return PMPI_Waitsome(n, reqs, outcount, idx, stats);
    for (;;) {
        int rc = PMPI_Testsome(n, reqs, outcount, idx, stats);
        if ((rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) || *outcount != 0) return rc;
        RL_Progress();
    }
}

void rl_progress_others(void) {
    if (others_need_progress()) RL_Progress();
}

int rl_active_count(void) {
    int n = 0;
    rl_lock();
    for (rl_active *e = active; e; e = e->next) n++;
    rl_unlock();
    return n;
}

/* The active operation whose generalized request is r (rl_mu held), or NULL. */
static rl_active *find_active(MPI_Request r) {
    if (r == MPI_REQUEST_NULL) return NULL;
    for (rl_active *e = active; e; e = e->next)
        if (e->greq == r) return e;
    return NULL;
}

int rl_is_active_request(MPI_Request r) {
    if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE)) return 0;
    rl_lock();
    int found = find_active(r) != NULL;
    rl_unlock();
    return found;
}

/* MPI_Request_free on an active ReduceLab operation: it goes on in the background (progressed
 * by every later ReduceLab or completion call, the progress thread, and MPI_Finalize, which
 * drains it) and its request is freed when it completes. 1 if r was ours. */
int rl_detach_request(MPI_Request r) {
    if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE)) return 0;
    rl_lock();
    rl_active *e = find_active(r);
    if (e) e->detached = 1;
    rl_unlock();
    return e != NULL;
}

/* One sweep over the active operations (rl_mu held). */
static int progress_sweep(void) {
    int first_err = MPI_SUCCESS;
    rl_active **pp = &active;
    while (*pp) {
        rl_active *op = *pp, *next = op->next;
        int err;
        if (op->ops->advance(op, &err)) {
            __atomic_store_n(pp, next, __ATOMIC_RELEASE);
            progress_events++;
            MPI_Request g = op->greq;
            int detached = op->detached;
            err = op->ops->complete(op, err); /* (frees op if it has a request) */
            if (err != MPI_SUCCESS && first_err == MPI_SUCCESS) first_err = err;
            if (g != MPI_REQUEST_NULL) {
                PMPI_Grequest_complete(g);
                if (detached) PMPI_Request_free(&g);
            }
        } else {
            pp = &op->next;
        }
    }
    return first_err;
}
void rl_progress_locked(void) { progress_sweep(); }

int RL_Progress(void) {
    if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE)) return MPI_SUCCESS;
    rl_lock();
    int rc = progress_sweep();
    rl_unlock();
    return rc;
}

/* Puts op on the active list (rl_mu held), advances what it can and wakes the progress thread. */
int rl_activate_locked(rl_active *op) {
    op->next = active;
    __atomic_store_n(&active, op, __ATOMIC_RELEASE);
    int rc = progress_sweep(); /* post the first step now */
    if (progress_thread_on) pthread_cond_signal(&rl_cv);
    return rc;
}

int RL_Wait(MPI_Request *request, MPI_Status *status) {
    int flag = 0, rc;
    for (;;) {
        RL_Progress();
        if ((rc = PMPI_Test(request, &flag, status)) != MPI_SUCCESS || flag) return rc;
    }
}

/* ---- the progress thread (REDUCELAB_PROGRESS=thread, started by the interposition library's
 * MPI_Init when the MPI library provides MPI_THREAD_MULTIPLE) ----
 * Sleeps on a condition variable while nothing is active; otherwise sweeps the active
 * operations under rl_mu, yielding the core between sweeps and, after RL_IDLE_SWEEPS sweeps
 * that moved nothing, sleeping RL_IDLE_NS between them (the cores are shared with the
 * application, and on an oversubscribed node with the other ranks). */
#define RL_IDLE_SWEEPS 32
#define RL_IDLE_NS 20000
static pthread_t progress_thread;
static int progress_stop;

static void *progress_main(void *arg) {
    (void)arg;
    unsigned idle = 0;
    pthread_mutex_lock(&rl_mu);
    rl_mu_held = 1;
    while (!progress_stop) {
        if (!active) {
            pthread_cond_wait(&rl_cv, &rl_mu);
            idle = 0;
            continue;
        }
        unsigned long before = progress_events;
        progress_sweep();
        idle = progress_events != before ? 0 : idle + 1;
        rl_mu_held = 0;
        pthread_mutex_unlock(&rl_mu);
        if (idle < RL_IDLE_SWEEPS) {
            sched_yield();
        } else {
            struct timespec ts = {0, RL_IDLE_NS};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&rl_mu);
        rl_mu_held = 1;
    }
    rl_mu_held = 0;
    pthread_mutex_unlock(&rl_mu);
    return NULL;
}

/* After MPI_Init_thread provided MPI_THREAD_MULTIPLE. 0 on success. */
int rl_progress_thread_start(void) {
    __atomic_store_n(&rl_locking, 1, __ATOMIC_RELEASE);
    progress_stop = 0;
    __atomic_store_n(&progress_thread_on, 1, __ATOMIC_RELEASE);
    int rc = pthread_create(&progress_thread, NULL, progress_main, NULL);
    if (rc != 0) __atomic_store_n(&progress_thread_on, 0, __ATOMIC_RELEASE);
    return rc;
}

/* Before MPI_Finalize (every operation completed). */
void rl_progress_thread_stop(void) {
    if (!__atomic_load_n(&progress_thread_on, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&rl_mu);
    progress_stop = 1;
    pthread_cond_broadcast(&rl_cv);
    pthread_mutex_unlock(&rl_mu);
    pthread_join(progress_thread, NULL);
    __atomic_store_n(&progress_thread_on, 0, __ATOMIC_RELEASE);
}

int rl_progress_thread_running(void) { return __atomic_load_n(&progress_thread_on, __ATOMIC_ACQUIRE); }
