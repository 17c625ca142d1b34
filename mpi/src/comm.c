/* Per-communicator state: the private duplicate (made with MPI_Comm_idup at the first ReduceLab
 * call on the communicator), the sequence number for tags, the attribute that holds them and
 * its delete callback (MPI_Comm_free). */
#define _GNU_SOURCE
#include "rl_comm.h"
#include "rl_threads.h"
#include "rl_progress.h"

#include <pthread.h>
#include <stdlib.h>

static int comm_keyval = MPI_KEYVAL_INVALID;

/* What the layers above do when a user's communicator is freed (rl_comm_hook_*). */
static void (*bind_hook)(comm_state *st);
static void (*forget_hook)(const comm_state *st);

void rl_comm_hook_bind(void (*bind)(comm_state *st)) { __atomic_store_n(&bind_hook, bind, __ATOMIC_RELEASE); }
void rl_comm_hook_forget(void (*forget)(const comm_state *st)) {
    __atomic_store_n(&forget_hook, forget, __ATOMIC_RELEASE);
}
static void bind_waiting(comm_state *st) {
    void (*bind)(comm_state *) = __atomic_load_n(&bind_hook, __ATOMIC_ACQUIRE);
    if (bind) bind(st);
}
static void forget_comm(const comm_state *st) {
    void (*forget)(const comm_state *) = __atomic_load_n(&forget_hook, __ATOMIC_ACQUIRE);
    if (forget) forget(st);
}

/* 1 once the duplicate exists (rl_mu held). */
int rl_comm_ready_locked(comm_state *st) {
    if (st->dup_req == MPI_REQUEST_NULL) return 1;
    int flag = 0;
    if (PMPI_Test(&st->dup_req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag) return 0;
    st->dup_req = MPI_REQUEST_NULL;
    /* errors of internal messages (a truncated receive: counts differ across ranks) come
     * back to us; we finish the schedule and report through the user's communicator */
    PMPI_Comm_set_errhandler(st->dup, MPI_ERRORS_RETURN);
    return 1;
}

/* Blocking callers: waits for the duplicate, progressing the active nonblocking operations
 * meanwhile (their peers may need them before they reach this collective). */
void rl_comm_wait_ready(comm_state *st) {
    for (;;) {
        rl_lock();
        int ready = rl_comm_ready_locked(st);
        if (!ready) rl_progress_locked();
        rl_unlock();
        if (ready) return;
    }
}


/* MPI_Comm_free of the user's communicator. Operations on it may still be active, which MPI
 * allows: then the last of them to complete frees the duplicate and the state (between two
 * steps no request holds the duplicate, so freeing it now would destroy it under them; Open MPI
 * 4.1's own MPI_Iallreduce crashes in this case). */
static int comm_state_delete(MPI_Comm comm, int keyval, void *attr, void *extra) {
    (void)comm, (void)keyval, (void)extra;
    comm_state *st = attr;
    if (st) {
#ifdef MPICH_VERSION
        /* MPICH holds the communicator until its MPI_Comm_idup completes, so it runs this
         * callback from inside the completion of that very request, often within our own
         * progress (rl_mu held by this thread): testing the request again here fails MPICH's
         * reference-count assertion. So the duplicate is neither waited for nor tested: active
         * operations bind themselves to it when it is ready (exec.c) and the last one
         * frees the state; without any (a persistent plan never started), the duplicate is left
         * to MPI_Finalize. (Open MPI 4.1's idup does not hold the communicator: below, the
         * duplicate must be complete before the communicator goes.) */
        int held = rl_mu_held;
        if (!held) rl_lock();
        int defer = st->users > 0 || st->dup_req != MPI_REQUEST_NULL;
        if (defer) {
            st->orphaned = 1;
            forget_comm(st);
        }
        if (!held) rl_unlock();
        if (defer) return MPI_SUCCESS;
#endif
        rl_comm_wait_ready(st);
        bind_waiting(st);
        forget_comm(st);
        rl_lock();
        int users = st->users;
        if (users) st->orphaned = 1;
        rl_unlock();
        if (!users) {
            PMPI_Comm_free(&st->dup);
            free(st);
        }
    }
    return MPI_SUCCESS;
}

static int comm_keyval_rc = MPI_SUCCESS;
static void make_comm_keyval(void) {
    comm_keyval_rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_state_delete, &comm_keyval, NULL);
}

/* The communicator's state; its duplicate may still be pending (rl_comm_ready_locked). (Two
 * threads may get the states of two communicators at once: the shared-memory path.) */
int rl_get_comm_state(MPI_Comm comm, comm_state **out) {
    int flag = 0, rc;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, make_comm_keyval);
    if (comm_keyval_rc != MPI_SUCCESS) return comm_keyval_rc;
    comm_state *st = NULL;
    rc = PMPI_Comm_get_attr(comm, comm_keyval, &st, &flag);
    if (rc != MPI_SUCCESS) return rc;
    if (!flag) {
        st = calloc(1, sizeof *st);
        if (!st) return MPI_ERR_NO_MEM;
        st->dup = MPI_COMM_NULL;
        rc = PMPI_Comm_idup(comm, &st->dup, &st->dup_req);
        if (rc != MPI_SUCCESS) {
            free(st);
            return rc;
        }
        int *ub = NULL, f = 0;
        PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &f);
        st->tag_ub = f && ub ? *ub : 32767;
        rc = PMPI_Comm_set_attr(comm, comm_keyval, st);
        if (rc != MPI_SUCCESS) {
            rl_comm_wait_ready(st);
            PMPI_Comm_free(&st->dup);
            free(st);
            return rc;
        }
    }
    *out = st;
    return MPI_SUCCESS;
}

int rl_comm_state_of(MPI_Comm comm, comm_state **out) {
    int flag = 0;
    return PMPI_Comm_get_attr(comm, comm_keyval, out, &flag) == MPI_SUCCESS && flag;
}

int rl_private_comm(MPI_Comm comm, MPI_Comm *dup) {
    comm_state *cs = NULL;
    int rc = rl_get_comm_state(comm, &cs);
    if (rc != MPI_SUCCESS) return rc;
    rl_comm_wait_ready(cs);
    *dup = cs->dup;
    return MPI_SUCCESS;
}

/* An active operation on cs completed (rl_mu held): the last one on a freed communicator frees
 * the state. */
void rl_comm_state_release(comm_state *cs) {
    if (cs && --cs->users == 0 && cs->orphaned) {
        PMPI_Comm_free(&cs->dup);
        free(cs);
    }
}
