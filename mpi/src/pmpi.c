/* PMPI interposition (LD_PRELOAD=libreducelab_pmpi.so): MPI_Allreduce, MPI_Iallreduce,
 * MPI_Reduce_scatter_block and MPI_Allgather of unmodified applications run ReduceLab
 * schedules; the algorithm is REDUCELAB_ALLREDUCE (default auto; "mpi" = the MPI library's
 * own) and the virtual torus REDUCELAB_TORUS. Anything not handled goes to PMPI_*.
 *
 * Nonblocking allreduces progress inside MPI_Wait*, MPI_Test* (interposed here: while a
 * ReduceLab operation is active, a blocking wait becomes a loop of progress + PMPI_Test*) and
 * inside any ReduceLab collective.
 *
 * Fortran: Open MPI's Fortran bindings call PMPI_Allreduce directly, so the Fortran entry
 * points (mpi_allreduce_ and friends, and ompi_allreduce_f used by the mpi_f08 module) are
 * replaced too. MPI-4 entry points (MPI_Allreduce_c, MPI_Allreduce_init) are compiled in only
 * if the MPI headers declare them (RL_HAVE_MPI4, set by the Makefile's compile check). */
#include "reducelab_mpi.h"
#include "rl_entry.h"

#include <stdio.h>
#include <stdlib.h>

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
    if (count >= 0 && count <= 0x7fffffff) return rl_allreduce(sendbuf, recvbuf, (int)count, datatype, op, comm, NULL, 0);
    return PMPI_Allreduce_c(sendbuf, recvbuf, count, datatype, op, comm);
}
#endif

/* ---- progress inside the MPI library's completion calls ---- */

int MPI_Wait(MPI_Request *request, MPI_Status *status) {
    if (!rl_active_count()) return PMPI_Wait(request, status);
    return RL_Wait(request, status);
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
    RL_Progress();
    return PMPI_Test(request, flag, status);
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
    if (!rl_active_count()) return PMPI_Waitall(count, requests, statuses);
    int flag = 0, rc;
    for (;;) {
        RL_Progress();
        if ((rc = PMPI_Testall(count, requests, &flag, statuses)) != MPI_SUCCESS || flag) return rc;
    }
}

int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[]) {
    RL_Progress();
    return PMPI_Testall(count, requests, flag, statuses);
}

int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status) {
    if (!rl_active_count()) return PMPI_Waitany(count, requests, index, status);
    int flag = 0, rc;
    for (;;) {
        RL_Progress();
        if ((rc = PMPI_Testany(count, requests, index, &flag, status)) != MPI_SUCCESS || flag) return rc;
    }
}

int MPI_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status) {
    RL_Progress();
    return PMPI_Testany(count, requests, index, flag, status);
}

int MPI_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]) {
    if (!rl_active_count()) return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
    int rc;
    for (;;) {
        RL_Progress();
        if ((rc = PMPI_Testsome(incount, requests, outcount, indices, statuses)) != MPI_SUCCESS || *outcount != 0)
            return rc;
    }
}

int MPI_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]) {
    RL_Progress();
    return PMPI_Testsome(incount, requests, outcount, indices, statuses);
}

int MPI_Finalize(void) {
    while (rl_active_count()) RL_Progress();
    return PMPI_Finalize();
}

/* ---- Fortran bindings ---- */

/* Open MPI's Fortran MPI_IN_PLACE is the address of one of these common-block symbols
 * (weak: absent in other MPI libraries, then only the C MPI_IN_PLACE is recognised). */
extern int mpi_fortran_in_place __attribute__((weak));
extern int mpi_fortran_in_place_ __attribute__((weak));
extern int mpi_fortran_in_place__ __attribute__((weak));
extern int MPI_FORTRAN_IN_PLACE __attribute__((weak));
extern int mpi_fortran_bottom __attribute__((weak));
extern int mpi_fortran_bottom_ __attribute__((weak));
extern int mpi_fortran_bottom__ __attribute__((weak));
extern int MPI_FORTRAN_BOTTOM __attribute__((weak));

static int f_in_place(const void *p) {
    return p && (p == (void *)&mpi_fortran_in_place || p == (void *)&mpi_fortran_in_place_ ||
                 p == (void *)&mpi_fortran_in_place__ || p == (void *)&MPI_FORTRAN_IN_PLACE);
}
static int f_bottom(const void *p) {
    return p && (p == (void *)&mpi_fortran_bottom || p == (void *)&mpi_fortran_bottom_ ||
                 p == (void *)&mpi_fortran_bottom__ || p == (void *)&MPI_FORTRAN_BOTTOM);
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
