/* PMPI interposition (LD_PRELOAD=libreducelab_pmpi.so): MPI_Allreduce, MPI_Iallreduce,
 * MPI_Reduce_scatter_block and MPI_Allgather of unmodified applications run ReduceLab
 * schedules; the algorithm is REDUCELAB_ALLREDUCE (default auto; "mpi" = the MPI library's
 * own) and the virtual torus REDUCELAB_TORUS. Anything not handled goes to PMPI_*.
 *
 * Nonblocking allreduces progress inside the whole request-completion family (MPI_Wait*,
 * MPI_Test*, MPI_Request_get_status; interposed here: while a ReduceLab operation is active
 * and no progress thread runs, a blocking wait becomes a loop of progress + PMPI_Test*),
 * inside any ReduceLab collective (blocking ones included), and, with REDUCELAB_PROGRESS=thread,
 * in a progress thread started by MPI_Init/MPI_Init_thread (below).
 *
 * Fortran: Open MPI's Fortran bindings call PMPI_Allreduce directly, so the Fortran entry
 * points (mpi_allreduce_ and friends, and ompi_allreduce_f used by the mpi_f08 module) are
 * replaced too. MPI-4 entry points (MPI_Allreduce_c, MPI_Allreduce_init) are compiled in only
 * if the MPI headers declare them (RL_HAVE_MPI4, set by the Makefile's compile check). */
#include "reducelab_mpi.h"
#include "rl_blocking.h"
#include "rl_requests.h"
#include "rl_progress.h"
#include "rl_threads.h"
#include "rl_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(OPEN_MPI) && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
    return rl_allreduce(sendbuf, recvbuf, count, datatype, op, comm, NULL, 0);
}

int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op,
                             MPI_Comm comm) {
    return rl_reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm, NULL, 0);
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
    return rl_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, NULL, 0);
}

int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                   MPI_Request *request) {
    return rl_iallreduce(sendbuf, recvbuf, count, datatype, op, comm, NULL, 0, request);
}

#ifdef RL_HAVE_MPI4
int MPI_Allreduce_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op,
                    MPI_Comm comm) {
    /* a negative count becomes -1: MPI_ERR_COUNT from rl_allreduce (MPICH 4.0.2 does not check it) */
    if (count <= 0x7fffffff) return rl_allreduce(sendbuf, recvbuf, count < 0 ? -1 : (int)count, datatype, op, comm, NULL, 0);
    return PMPI_Allreduce_c(sendbuf, recvbuf, count, datatype, op, comm);
}
#endif

/* ---- persistent allreduce (MPI-4 MPI_Allreduce_init, or Open MPI's MPIX_Allreduce_init) ----
 * The application gets a real MPI_Request (a generalized request that is never completed
 * while the operation lives) standing for a ReduceLab persistent plan; MPI_Start/Startall,
 * the Wait/Test family and MPI_Request_free recognise it. Completion leaves it inactive, as
 * for any persistent request. */
#if defined(RL_HAVE_MPI4)
#define RL_PINIT MPI_Allreduce_init
#define RL_PMPI_PINIT PMPI_Allreduce_init
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#define RL_PINIT MPIX_Allreduce_init
#define RL_PMPI_PINIT PMPIX_Allreduce_init
#endif

typedef struct pers {
    MPI_Request handle;
    RL_Persistent plan;
    int reported; /* completion of the current start already returned by a Wait/Test */
    struct pers *next;
} pers;
static pers *persistent;

static pers *find_pers(MPI_Request r) {
    if (r == MPI_REQUEST_NULL) return NULL;
    for (pers *p = persistent; p; p = p->next)
        if (p->handle == r) return p;
    return NULL;
}
static int any_pers(int n, const MPI_Request *rs) {
    if (!persistent) return 0;
    for (int i = 0; i < n; i++)
        if (find_pers(rs[i])) return 1;
    return 0;
}
static void empty_status(MPI_Status *st) {
    if (st == MPI_STATUS_IGNORE) return;
    st->MPI_SOURCE = MPI_ANY_SOURCE;
    st->MPI_TAG = MPI_ANY_TAG;
    st->MPI_ERROR = MPI_SUCCESS;
    PMPI_Status_set_elements(st, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(st, 0);
}
/* Completed and not yet reported: report it now (1). A caller that gets 0 counts the request
 * as active by `!p->reported`, not by rl_persistent_running: the progress thread may finish it
 * between the two reads, and a request finished but not yet reported is still active (else
 * MPI_Waitsome and MPI_Waitany returned "no active request" with one pending). */
static int take_completion(pers *p) {
    if (p->reported || rl_persistent_running(p->plan)) return 0;
    p->reported = 1;
    return 1;
}

static int pers_query(void *extra, MPI_Status *status) {
    (void)extra;
    empty_status(status);
    return MPI_SUCCESS;
}
static int pers_free(void *extra) {
    (void)extra;
    return MPI_SUCCESS;
}
static int pers_cancel(void *extra, int complete) {
    (void)extra, (void)complete;
    return MPI_SUCCESS;
}

#ifdef RL_PINIT
int RL_PINIT(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
             MPI_Info info, MPI_Request *request) {
    RL_Persistent plan = NULL;
    if (!request) return RL_PMPI_PINIT(sendbuf, recvbuf, count, datatype, op, comm, info, request);
    int rc = rl_allreduce_init(sendbuf, recvbuf, count, datatype, op, comm, NULL, 0, &plan);
    if (rc != MPI_SUCCESS) return rc;
    if (!plan) return RL_PMPI_PINIT(sendbuf, recvbuf, count, datatype, op, comm, info, request);
    pers *p = calloc(1, sizeof *p);
    if (!p) {
        RL_Persistent_free(&plan);
        return MPI_ERR_NO_MEM;
    }
    rc = PMPI_Grequest_start(pers_query, pers_free, pers_cancel, NULL, &p->handle);
    if (rc != MPI_SUCCESS) {
        RL_Persistent_free(&plan);
        free(p);
        return rc;
    }
    p->plan = plan;
    p->reported = 1; /* inactive until started */
    p->next = persistent;
    persistent = p;
    *request = p->handle;
    return MPI_SUCCESS;
}
#endif

int MPI_Start(MPI_Request *request) {
    pers *p = request ? find_pers(*request) : NULL;
    if (!p) return PMPI_Start(request);
    p->reported = 0;
    return RL_Start(p->plan);
}

int MPI_Startall(int count, MPI_Request requests[]) {
    if (count < 0 || !requests || !any_pers(count, requests)) return PMPI_Startall(count, requests);
    int rc = MPI_SUCCESS;
    for (int i = 0; i < count && rc == MPI_SUCCESS; i++) rc = MPI_Start(&requests[i]);
    return rc;
}

/* On an active ReduceLab nonblocking allreduce: the handle becomes MPI_REQUEST_NULL and the
 * operation completes in the background (rl_detach_request); on a persistent plan: completes a
 * running start, then frees the plan. */
int MPI_Request_free(MPI_Request *request) {
    pers *p = request ? find_pers(*request) : NULL;
    if (!p) {
        if (request && rl_detach_request(*request)) {
            *request = MPI_REQUEST_NULL;
            return MPI_SUCCESS;
        }
        return PMPI_Request_free(request);
    }
    for (pers **pp = &persistent; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    RL_Persistent_free(&p->plan); /* completes a running operation first */
    PMPI_Grequest_complete(p->handle);
    int rc = PMPI_Request_free(request);
    free(p);
    return rc;
}

/* MPI_Cancel on a ReduceLab request (nonblocking or persistent allreduce) has no effect: the
 * operation completes normally and MPI_Test_cancelled reports false. (MPI calls cancelling a
 * collective erroneous; Open MPI 4.1 aborts.) */
int MPI_Cancel(MPI_Request *request) {
    RL_Progress();
    if (request && (find_pers(*request) || rl_is_active_request(*request))) return MPI_SUCCESS;
    return PMPI_Cancel(request);
}

/* ---- progress inside the MPI library's completion calls ----
 * While no ReduceLab operation is active and no ReduceLab persistent request is involved,
 * each call goes straight to PMPI; so does every blocking wait on requests other than our
 * persistent ones while the progress thread runs (it completes our generalized requests).
 * Otherwise blocking waits become loops of RL_Progress and the nonblocking PMPI_Test* on the
 * other requests (ours replaced by MPI_REQUEST_NULL). */

/* A blocking wait must progress ReduceLab operations itself. */
static int must_progress(void) { return !rl_progress_thread_running() && rl_active_count(); }

/* Does not deactivate anything (MPI semantics); progresses first, so polling completes. */
int MPI_Request_get_status(MPI_Request request, int *flag, MPI_Status *status) {
    pers *p = find_pers(request);
    RL_Progress();
    if (!p) return PMPI_Request_get_status(request, flag, status);
    *flag = !rl_persistent_running(p->plan);
    if (*flag) empty_status(status);
    return MPI_SUCCESS;
}

/* Copy of `rs` with our persistent requests replaced by MPI_REQUEST_NULL (NULL if out of memory). */
static MPI_Request *others(int n, const MPI_Request *rs) {
    MPI_Request *t = malloc((size_t)(n > 0 ? n : 1) * sizeof *t);
    if (t)
        for (int i = 0; i < n; i++) t[i] = find_pers(rs[i]) ? MPI_REQUEST_NULL : rs[i];
    return t;
}
static void put_back(int n, MPI_Request *rs, const MPI_Request *t) {
    for (int i = 0; i < n; i++)
        if (!find_pers(rs[i])) rs[i] = t[i];
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
    pers *p = request ? find_pers(*request) : NULL;
    RL_Progress();
    if (!p) return PMPI_Test(request, flag, status);
    *flag = !rl_persistent_running(p->plan);
    if (*flag) {
        p->reported = 1;
        empty_status(status);
    }
    return MPI_SUCCESS;
}

int MPI_Wait(MPI_Request *request, MPI_Status *status) {
    pers *p = request ? find_pers(*request) : NULL;
    if (p) {
        int rc = RL_Persistent_wait(p->plan);
        p->reported = 1;
        empty_status(status);
        return rc;
    }
    if (!must_progress()) return PMPI_Wait(request, status);
    return RL_Wait(request, status);
}

int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[]) {
    RL_Progress();
    if (count <= 0 || !requests || !any_pers(count, requests)) return PMPI_Testall(count, requests, flag, statuses);
    for (int i = 0; i < count; i++) {
        pers *p = find_pers(requests[i]);
        if (p && rl_persistent_running(p->plan)) {
            *flag = 0; /* all or nothing: the others stay untouched */
            return MPI_SUCCESS;
        }
    }
    MPI_Request *t = others(count, requests);
    if (!t) return MPI_ERR_NO_MEM;
    int rc = PMPI_Testall(count, t, flag, statuses);
    if (rc == MPI_SUCCESS && *flag) {
        put_back(count, requests, t);
        for (int i = 0; i < count; i++) {
            pers *p = find_pers(requests[i]);
            if (p) {
                p->reported = 1;
                if (statuses != MPI_STATUSES_IGNORE) empty_status(&statuses[i]);
            }
        }
    }
    free(t);
    return rc;
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
    if (!must_progress() && (count <= 0 || !requests || !any_pers(count, requests)))
        return PMPI_Waitall(count, requests, statuses);
    int flag = 0, rc;
    for (;;) {
        if ((rc = MPI_Testall(count, requests, &flag, statuses)) != MPI_SUCCESS || flag) return rc;
    }
}

int MPI_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status) {
    RL_Progress();
    if (count <= 0 || !requests || !any_pers(count, requests))
        return PMPI_Testany(count, requests, index, flag, status);
    int pending = 0;
    for (int i = 0; i < count; i++) {
        pers *p = find_pers(requests[i]);
        if (!p) continue;
        if (take_completion(p)) {
            *index = i;
            *flag = 1;
            empty_status(status);
            return MPI_SUCCESS;
        }
        pending |= !p->reported; /* started, completion not yet returned (see take_completion) */
    }
    MPI_Request *t = others(count, requests);
    if (!t) return MPI_ERR_NO_MEM;
    int rc = PMPI_Testany(count, t, index, flag, status);
    put_back(count, requests, t);
    free(t);
    if (rc == MPI_SUCCESS && *flag && *index == MPI_UNDEFINED && pending) *flag = 0; /* ours still to come */
    return rc;
}

int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status) {
    if (!must_progress() && (count <= 0 || !requests || !any_pers(count, requests)))
        return PMPI_Waitany(count, requests, index, status);
    int flag = 0, rc;
    for (;;) {
        if ((rc = MPI_Testany(count, requests, index, &flag, status)) != MPI_SUCCESS || flag) return rc;
    }
}

int MPI_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]) {
    RL_Progress();
    if (incount <= 0 || !requests || !any_pers(incount, requests))
        return PMPI_Testsome(incount, requests, outcount, indices, statuses);
    int ours = 0, pending = 0;
    MPI_Request *t = others(incount, requests);
    if (!t) return MPI_ERR_NO_MEM;
    int rc = PMPI_Testsome(incount, t, outcount, indices, statuses);
    put_back(incount, requests, t);
    free(t);
    if (rc != MPI_SUCCESS) return rc;
    int n = *outcount == MPI_UNDEFINED ? 0 : *outcount;
    for (int i = 0; i < incount; i++) {
        pers *p = find_pers(requests[i]);
        if (!p) continue;
        if (take_completion(p)) {
            if (statuses != MPI_STATUSES_IGNORE) empty_status(&statuses[n]);
            indices[n++] = i;
            ours++;
        }
        pending |= !p->reported; /* started, completion not yet returned (see take_completion) */
    }
    *outcount = (n == 0 && *outcount == MPI_UNDEFINED && !pending) ? MPI_UNDEFINED : n;
    return MPI_SUCCESS;
}

int MPI_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]) {
    if (!must_progress() && (incount <= 0 || !requests || !any_pers(incount, requests)))
        return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
    int rc;
    for (;;) {
        if ((rc = MPI_Testsome(incount, requests, outcount, indices, statuses)) != MPI_SUCCESS || *outcount != 0)
            return rc;
    }
}

int MPI_Finalize(void) {
    while (rl_active_count()) RL_Progress(); /* also requests freed while active */
    rl_progress_thread_stop();
    return PMPI_Finalize();
}

/* ---- initialisation: the thread level and the progress thread ----
 * REDUCELAB_PROGRESS=thread asks the MPI library for MPI_THREAD_MULTIPLE (whatever the
 * application asked) and, if provided, starts the progress thread. The application still gets
 * the level it asked for (capped by the library's; MPI_Init counts as MPI_THREAD_SINGLE), from
 * MPI_Init_thread and MPI_Query_thread, and ReduceLab's thread rule (threads.c, rl_thread_multiple)
 * looks at that level: an application at MPI_THREAD_MULTIPLE gets the MPI library's
 * collectives (then the thread would have nothing to do and is not started) unless
 * REDUCELAB_THREADS=serialized. Without the variable nothing changes. */
static int app_level = -1;

static int init(int *argc, char ***argv, int required, int *provided, int threaded) {
    const char *v = getenv("REDUCELAB_PROGRESS");
    int want = v && strcmp(v, "thread") == 0;
    int bad = v && *v && !want && strcmp(v, "none") != 0;
    if (!want) {
        int rc = threaded ? PMPI_Init_thread(argc, argv, required, provided) : PMPI_Init(argc, argv);
        if (rc == MPI_SUCCESS && bad) {
            fprintf(stderr, "reducelab: REDUCELAB_PROGRESS='%s' is not 'thread' or 'none'\n", v);
            PMPI_Comm_call_errhandler(MPI_COMM_WORLD, MPI_ERR_ARG);
            return MPI_ERR_ARG;
        }
        return rc;
    }
    int lib = MPI_THREAD_SINGLE;
    int rc = PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &lib);
    if (rc != MPI_SUCCESS) return rc;
    int app = threaded ? required : MPI_THREAD_SINGLE;
    if (app > lib) app = lib;
    app_level = app;
    rl_set_app_thread_level(app);
    if (provided) *provided = app;
    const char *t = getenv("REDUCELAB_THREADS");
    char msg[300];
    if (lib != MPI_THREAD_MULTIPLE) {
        snprintf(msg, sizeof msg, "REDUCELAB_PROGRESS=thread: the MPI library provides thread level %d, not "
                 "MPI_THREAD_MULTIPLE (%d): no progress thread", lib, MPI_THREAD_MULTIPLE);
        rl_notice(msg);
    } else if (app == MPI_THREAD_MULTIPLE && !(t && strcmp(t, "serialized") == 0)) {
        rl_notice("REDUCELAB_PROGRESS=thread: the application asked for MPI_THREAD_MULTIPLE, so its collectives "
                  "go to the MPI library (REDUCELAB_THREADS=serialized if calls never overlap): no progress thread");
    } else if (rl_progress_thread_start() != 0) {
        rl_notice("REDUCELAB_PROGRESS=thread: pthread_create failed: no progress thread");
    } else {
        rl_notice("progress thread started (REDUCELAB_PROGRESS=thread)");
    }
    return MPI_SUCCESS;
}

int MPI_Init(int *argc, char ***argv) { return init(argc, argv, MPI_THREAD_SINGLE, NULL, 0); }

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    return init(argc, argv, required, provided, 1);
}

int MPI_Query_thread(int *provided) {
    if (app_level < 0 || !provided) return PMPI_Query_thread(provided);
    *provided = app_level;
    return MPI_SUCCESS;
}

/* ---- Fortran bindings ---- */

/* Open MPI's Fortran MPI_IN_PLACE is the address of one of these common-block symbols
 * (weak: absent in other MPI libraries). */
extern int mpi_fortran_in_place __attribute__((weak));
extern int mpi_fortran_in_place_ __attribute__((weak));
extern int mpi_fortran_in_place__ __attribute__((weak));
extern int MPI_FORTRAN_IN_PLACE __attribute__((weak));
extern int mpi_fortran_bottom __attribute__((weak));
extern int mpi_fortran_bottom_ __attribute__((weak));
extern int mpi_fortran_bottom__ __attribute__((weak));
extern int MPI_FORTRAN_BOTTOM __attribute__((weak));

/* MPICH's: pointers to its Fortran common blocks, set when the Fortran library initialises. */
extern void *MPIR_F_MPI_IN_PLACE __attribute__((weak));
extern void *MPIR_F_MPI_BOTTOM __attribute__((weak));

static int f_in_place(const void *p) {
    return p && (p == (void *)&mpi_fortran_in_place || p == (void *)&mpi_fortran_in_place_ ||
                 p == (void *)&mpi_fortran_in_place__ || p == (void *)&MPI_FORTRAN_IN_PLACE ||
                 (&MPIR_F_MPI_IN_PLACE && p == MPIR_F_MPI_IN_PLACE));
}
static int f_bottom(const void *p) {
    return p && (p == (void *)&mpi_fortran_bottom || p == (void *)&mpi_fortran_bottom_ ||
                 p == (void *)&mpi_fortran_bottom__ || p == (void *)&MPI_FORTRAN_BOTTOM ||
                 (&MPIR_F_MPI_BOTTOM && p == MPIR_F_MPI_BOTTOM));
}

static void f_allreduce(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *datatype, MPI_Fint *op,
                        MPI_Fint *comm, MPI_Fint *ierr) {
    MPI_Comm c = PMPI_Comm_f2c(*comm);
    MPI_Datatype t = PMPI_Type_f2c(*datatype);
    MPI_Op o = PMPI_Op_f2c(*op);
    if (f_in_place(sendbuf)) sendbuf = MPI_IN_PLACE;
    if (f_bottom(sendbuf)) sendbuf = MPI_BOTTOM;
    if (f_bottom(recvbuf)) recvbuf = MPI_BOTTOM;
    int rc = rl_allreduce(sendbuf, recvbuf, (int)*count, t, o, c, NULL, 0);
    if (ierr) *ierr = (MPI_Fint)rc;
}

void mpi_allreduce(void *s, void *r, MPI_Fint *n, MPI_Fint *t, MPI_Fint *o, MPI_Fint *c, MPI_Fint *e) {
    f_allreduce(s, r, n, t, o, c, e);
}
void mpi_allreduce_(void *s, void *r, MPI_Fint *n, MPI_Fint *t, MPI_Fint *o, MPI_Fint *c, MPI_Fint *e) {
    f_allreduce(s, r, n, t, o, c, e);
}
void mpi_allreduce__(void *s, void *r, MPI_Fint *n, MPI_Fint *t, MPI_Fint *o, MPI_Fint *c, MPI_Fint *e) {
    f_allreduce(s, r, n, t, o, c, e);
}
void MPI_ALLREDUCE(void *s, void *r, MPI_Fint *n, MPI_Fint *t, MPI_Fint *o, MPI_Fint *c, MPI_Fint *e) {
    f_allreduce(s, r, n, t, o, c, e);
}
/* Open MPI's implementation behind the mpi_f08 module's MPI_Allreduce. */
void ompi_allreduce_f(void *s, void *r, MPI_Fint *n, MPI_Fint *t, MPI_Fint *o, MPI_Fint *c, MPI_Fint *e) {
    f_allreduce(s, r, n, t, o, c, e);
}
