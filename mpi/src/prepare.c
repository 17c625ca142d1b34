/* Preparing a collective: its arguments checked, its algorithm resolved and its execution built
 * (or the call handed to the MPI library). */
#define _GNU_SOURCE
#include "rl_prepare.h"
#include "rl_exec.h"
#include "rl_capi.h"
#include "rl_kernels.h"
#include "rl_comm.h"
#include "rl_algorithms.h"
#include "rl_config.h"
#include "rl_stats.h"
#include "rl_threads.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *op_name(MPI_Op op) {
    const MPI_Op ops[] = {MPI_MAX, MPI_MIN, MPI_SUM, MPI_PROD, MPI_LAND, MPI_BAND, MPI_LOR,
                          MPI_BOR, MPI_LXOR, MPI_BXOR, MPI_MAXLOC, MPI_MINLOC, MPI_REPLACE, MPI_NO_OP};
    const char *names[] = {"MPI_MAX", "MPI_MIN", "MPI_SUM", "MPI_PROD", "MPI_LAND", "MPI_BAND", "MPI_LOR",
                           "MPI_BOR", "MPI_LXOR", "MPI_BXOR", "MPI_MAXLOC", "MPI_MINLOC", "MPI_REPLACE", "MPI_NO_OP"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (op == ops[i]) return names[i];
    return "a user op";
}

int rl_is_predefined_op(MPI_Op op) {
    const MPI_Op ops[] = {MPI_MAX, MPI_MIN, MPI_SUM, MPI_PROD, MPI_LAND, MPI_BAND, MPI_LOR, MPI_BOR,
                          MPI_LXOR, MPI_BXOR, MPI_MAXLOC, MPI_MINLOC, MPI_REPLACE, MPI_NO_OP};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (op == ops[i]) return 1;
    return 0;
}

/* Sets up `*out` for collective `coll` whose working vector has `count` elements (allreduce:
 * count; reduce-scatter / allgather: count per rank × p). Returns PREP_OK, PREP_FALLBACK (the
 * MPI library should do it: it also reports invalid arguments as it always does) or PREP_ERROR
 * with an MPI error code in *rc (already passed through the communicator's error handler).
 * `strict`: an algorithm that cannot run this collective on this shape is an error (RL_* API),
 * not a fallback (interposition). `own_scratch`: the execution gets its own scratch buffer. */
int rl_prepare(int coll, const char *algorithm, MPI_Comm comm, size_t count, MPI_Datatype type, MPI_Op op,
               int strict, int own_scratch, rl_exec **out, int *rc) {
    char err[512] = "";
    int p = 0, rank = 0, inter = 0, commute = 1;
    *out = NULL;
    *rc = MPI_SUCCESS;
    if (rl_thread_multiple()) {
        rl_note_thread_fallback();
        return PREP_FALLBACK;
    }
    if (comm == MPI_COMM_NULL || type == MPI_DATATYPE_NULL || (coll != RL_COLL_ALLGATHER && op == MPI_OP_NULL))
        return PREP_FALLBACK; /* the MPI library reports these */
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) {
        rl_note_fallback("inter-communicator");
        return PREP_FALLBACK;
    }
    PMPI_Comm_size(comm, &p);
    PMPI_Comm_rank(comm, &rank);
    MPI_Aint lb, extent, tlb, textent;
    if (PMPI_Type_get_extent(type, &lb, &extent) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent(type, &tlb, &textent) != MPI_SUCCESS)
        return PREP_FALLBACK;
    int tsize = 0;
    PMPI_Type_size(type, &tsize);
    if (lb != 0 || tlb < 0 || tlb + textent > extent || extent <= 0 || tsize <= 0) {
        /* (a negative lower bound or data below 0: the working-vector arithmetic assumes
         * bytes in [0, extent); rare enough to leave to the MPI library) */
        rl_note_fallback("datatype with a lower bound, holes before it or zero size");
        return PREP_FALLBACK;
    }
    rl_kernel kernel = NULL;
    if (coll != RL_COLL_ALLGATHER) {
        kernel = rl_kernel_for(op, type);
        if (!kernel && rl_is_predefined_op(op)) {
            char why[300], tname[MPI_MAX_OBJECT_NAME] = "";
            int len = 0;
            PMPI_Type_get_name(type, tname, &len);
            snprintf(why, sizeof why, "%s on %s: no ReduceLab kernel for this (op, datatype) pair",
                     op_name(op), len > 0 ? tname : "a derived datatype");
            rl_note_fallback(why);
            return PREP_FALLBACK; /* includes pairs MPI rejects: it reports them */
        }
        if (!kernel && PMPI_Op_commutative(op, &commute) != MPI_SUCCESS) return PREP_FALLBACK;
    }
    uint32_t dims[8];
    size_t ndims;
    const char *alg = NULL;
    int torus_ok = rl_torus_for(p, dims, &ndims, err, sizeof err);
    if (!torus_ok ||
        !rl_resolve(algorithm, coll, dims, ndims, count * (size_t)tsize, !strict && coll != RL_COLL_ALLREDUCE, &alg,
                    err, sizeof err)) {
        const char *env = algorithm && *algorithm ? NULL : getenv("REDUCELAB_ALLREDUCE");
        if (torus_ok && env && *env) /* a name from the environment: which setting, which rank (as innet.c says) */
            fprintf(stderr, "reducelab: REDUCELAB_ALLREDUCE=%s (rank %d): %s\n", env, rank, err);
        else
            fprintf(stderr, "reducelab: %s\n", err);
        PMPI_Comm_call_errhandler(comm, MPI_ERR_ARG);
        *rc = MPI_ERR_ARG;
        return PREP_ERROR;
    }
    if (strcmp(alg, "mpi") == 0) {
        rl_is_verbose();
        rl_n_fallback++;
        return PREP_FALLBACK;
    }
    if (!commute && coll == RL_COLL_REDUCE_SCATTER) {
        rl_note_fallback("non-commutative reduce-scatter (no rank-ordered schedule)");
        return PREP_FALLBACK;
    }
    const RlProgram *prog = NULL;
    if (rl_get_program(alg, coll, dims, ndims, (uint32_t)rank, &prog, err, sizeof err) != 0) {
        if (!strict) {
            char why[600];
            snprintf(why, sizeof why, "%s", err);
            rl_note_fallback(why);
            return PREP_FALLBACK;
        }
        fprintf(stderr, "reducelab: %s\n", err);
        PMPI_Comm_call_errhandler(comm, MPI_ERR_ARG);
        *rc = MPI_ERR_ARG;
        return PREP_ERROR;
    }
    if (!commute && !prog->noncommutative_safe) {
        /* The registry's rank-ordered variant on 1D (the checker proves it). */
        uint32_t line = (uint32_t)p;
        const char *ordered = rl_rank_ordered_variant();
        if (!ordered || rl_get_program(ordered, coll, &line, 1, (uint32_t)rank, &prog, err, sizeof err) != 0 ||
            !prog->noncommutative_safe) {
            rl_note_fallback("non-commutative op");
            return PREP_FALLBACK;
        }
    }
    if (coll != RL_COLL_ALLREDUCE) {
        /* Rank r's blocks must be exactly elements [r·n, (r+1)·n) (MPI's layout). */
        if (!prog->block_owner || count % (size_t)p) return PREP_FALLBACK;
        size_t n = count / (size_t)p;
        for (uint32_t b = 0; b < prog->blocks; b++) {
            uint32_t o = prog->block_owner[b];
            size_t lo = (size_t)((unsigned __int128)b * count / prog->blocks);
            size_t hi = (size_t)((unsigned __int128)(b + 1) * count / prog->blocks);
            if (lo < hi && (lo < o * n || hi > (o + 1) * n)) {
                rl_note_fallback("schedule's block owners do not match MPI's layout");
                return PREP_FALLBACK;
            }
        }
    }
    if (count > (size_t)0x7fffffff) {
        rl_note_fallback("more than 2^31-1 elements");
        return PREP_FALLBACK;
    }
    comm_state *cs = NULL;
    if ((*rc = rl_get_comm_state(comm, &cs)) != MPI_SUCCESS) {
        PMPI_Comm_call_errhandler(comm, *rc);
        return PREP_ERROR;
    }
    rl_exec *ex = calloc(1, sizeof *ex);
    if (!ex) goto nomem;
    ex->prog = prog;
    if (own_scratch) { /* nonblocking / persistent: bound to the duplicate by progress_exec */
        ex->cs = cs;
        ex->comm = MPI_COMM_NULL;
    } else {
        rl_comm_wait_ready(cs);
        ex->comm = cs->dup;
    }
    ex->count = count;
    ex->type = type;
    ex->extent = extent;
    ex->true_ub = tlb + textent;
    ex->tsize = tsize;
    ex->dense = (MPI_Aint)tsize == extent && tlb == 0 && textent == extent;
    rl_next_tag(ex, cs); /* after count and tsize */
    ex->op = op;
    ex->kernel = kernel;
    ex->commute = commute;
    ex->maxx = rl_max_step_transfers(prog);
    ex->offs = calloc(ex->maxx + 1, sizeof *ex->offs);
    ex->fresh = calloc(prog->blocks + 1, 1);
    if (!ex->offs || !ex->fresh || rl_reserve_reqs(ex, ex->maxx + 1) != MPI_SUCCESS) goto nomem;
    ex->seg = rl_segment_bytes() / (size_t)extent;
    if (ex->seg == 0) ex->seg = rl_segment_bytes() ? 1 : SIZE_MAX;
    ex->src = (const char *)1; /* size scratch for packing from the input (set for real by the caller) */
    ex->final_hi = count;
    size_t need = 0;
    for (uint32_t s = 0; s < prog->nsteps; s++) {
        size_t b = rl_step_scratch(ex, &prog->steps[s]);
        if (b > need) need = b;
    }
    if (own_scratch) {
        ex->own_scratch = 1;
        ex->scratch = malloc(need ? need : 1);
        if (!ex->scratch) goto nomem;
    } else {
        if (need > rl_shared_scratch_bytes) {
            free(rl_shared_scratch);
            rl_shared_scratch = malloc(need);
            rl_shared_scratch_bytes = rl_shared_scratch ? need : 0;
            if (!rl_shared_scratch) goto nomem;
        }
        ex->scratch = rl_shared_scratch;
    }
    ex->scratch_bytes = need;
    ex->src = NULL;
    if (rl_check_mode() && !(ex->check = rl_make_check(ex, algorithm, dims, ndims, (uint32_t)rank))) goto nomem;
    snprintf(rl_last_algorithm, sizeof rl_last_algorithm, "%s", prog->algorithm);
    rl_n_scheduled++;
    rl_is_verbose();
    *out = ex;
    return PREP_OK;
nomem:
    rl_exec_free(ex);
    *rc = MPI_ERR_NO_MEM;
    PMPI_Comm_call_errhandler(comm, *rc);
    return PREP_ERROR;
}

int rl_buffer_error(MPI_Comm comm) {
    PMPI_Comm_call_errhandler(comm, MPI_ERR_BUFFER);
    return MPI_ERR_BUFFER;
}

/* A negative count on a valid communicator: MPI_ERR_COUNT here, not from the library, because
 * MPICH 4.0.2 (Debian 12) does not check it and overruns the stack. */
int rl_negative_count(MPI_Comm comm, int count) {
    if (count >= 0 || comm == MPI_COMM_NULL) return 0;
    PMPI_Comm_call_errhandler(comm, MPI_ERR_COUNT);
    return 1;
}
