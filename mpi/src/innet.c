/* REDUCELAB_ALLREDUCE=<protocol> (docs/switch.md, "The MPI runtime's canary"): each blocking
 * allreduce of the ranks goes through running software switches, via the C ABI of crates/innet
 * (RL_Innet_open / RL_Innet_allreduce), loaded with dlopen on first use so the MPI libraries do
 * not link the switch's Rust code unless it is asked for. Which calls come here is decided by
 * algorithms.c (rl_switch_protocol: a name outside the algorithm registry, when
 * REDUCELAB_INNET_SCENARIO is set); this file keeps no list of protocols: the name is passed on
 * as given and must be the protocol the scenario's session runs (RL_Innet_protocol).
 *
 *   REDUCELAB_INNET_SCENARIO  the scenario file the switches were started from (required)
 *   REDUCELAB_INNET_ADDR      their --ip-base:--port-base (default 127.0.100.1:47000)
 *   REDUCELAB_INNET_TIMEOUT_S limit of one allreduce (default 10)
 *   REDUCELAB_INNET_LIB       libreducelab_innet.so (default: ../../target/release/ from this
 *                             library's directory, then the loader's search path)
 *
 * The name must be the protocol of the scenario's traffic (an allreduce of a protocol that serves
 * sessions, e.g. canary or reliable_tree, or a training job of switchml, atp or dsa whose workers are
 * the communicator's ranks; the session refuses others with the reason); one code path, the C
 * ABI chooses by the scenario. Rank r of the communicator is rank r of the session (host r of the
 * scenario for canary, the allreduce's r-th host for reliable_tree, worker r of a job). The first call opens the host (binds
 * its socket, checks that a switch listens) on every rank and then agrees with an MPI_Allreduce
 * (MIN) that all ranks did, which is also the barrier that keeps packets from reaching unbound
 * sockets. One communicator (or congruent ones) per process; MPI calls serialised. */
#define _GNU_SOURCE
#include "rl_innet.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RL_INNET_INT32 0
#define RL_INNET_FLOAT32 1

typedef void *(*innet_open_fn)(const char *, const char *, uint32_t, uint32_t, double, char *, size_t);
typedef int (*innet_allreduce_fn)(void *, const void *, void *, uint64_t, int32_t, char *, size_t);
typedef const char *(*innet_protocol_fn)(const void *);
typedef void (*innet_close_fn)(void *);

static struct {
    int state; /* 0 not opened, 1 open, -1 failed (message in err) */
    void *handle;
    innet_allreduce_fn allreduce;
    innet_close_fn close;
    MPI_Comm comm; /* a dup of the communicator it was opened on */
    char err[1024];
} innet;

static void *load_library(char *err, size_t errlen) {
    const char *env = getenv("REDUCELAB_INNET_LIB");
    if (env && *env) {
        void *lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!lib) snprintf(err, errlen, "REDUCELAB_INNET_LIB=%s: %s", env, dlerror());
        return lib;
    }
    char near[PATH_MAX] = "";
    Dl_info info;
    if (dladdr((void *)&rl_innet_allreduce, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash)
            snprintf(near, sizeof near, "%.*s/../../target/release/libreducelab_innet.so", (int)(slash - info.dli_fname),
                     info.dli_fname);
    }
    void *lib = near[0] ? dlopen(near, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!lib) lib = dlopen("libreducelab_innet.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        snprintf(err, errlen,
                 "libreducelab_innet.so not found (tried %s and the loader's path; build it with `cargo build --release "
                 "-p reducelab-innet` or set REDUCELAB_INNET_LIB)",
                 near[0] ? near : "nothing near this library");
    return lib;
}

static void close_at_exit(void) {
    if (innet.handle && innet.close) innet.close(innet.handle);
    innet.handle = NULL;
}

/* 1 when this rank opened a session of protocol `name`, else 0 with the reason in innet.err. */
static int open_here(MPI_Comm comm, const char *name) {
    int size = 0, rank = 0;
    PMPI_Comm_size(comm, &size);
    PMPI_Comm_rank(comm, &rank);
    const char *scenario = getenv("REDUCELAB_INNET_SCENARIO");
    if (!scenario || !*scenario) {
        snprintf(innet.err, sizeof innet.err,
                 "REDUCELAB_INNET_SCENARIO is not set: give the scenario file the switches run (reducelab switch "
                 "switch --scenario FILE --node N)");
        return 0;
    }
    void *lib = load_library(innet.err, sizeof innet.err);
    if (!lib) return 0;
    innet_open_fn open = (innet_open_fn)dlsym(lib, "RL_Innet_open");
    innet.allreduce = (innet_allreduce_fn)dlsym(lib, "RL_Innet_allreduce");
    innet_protocol_fn protocol = (innet_protocol_fn)dlsym(lib, "RL_Innet_protocol");
    if (!open || !innet.allreduce || !protocol) {
        snprintf(innet.err, sizeof innet.err,
                 "libreducelab_innet.so has no RL_Innet_open/RL_Innet_allreduce/RL_Innet_protocol");
        return 0;
    }
    const char *t = getenv("REDUCELAB_INNET_TIMEOUT_S");
    double timeout = t && *t ? atof(t) : 10.0;
    if (!(timeout > 0)) {
        snprintf(innet.err, sizeof innet.err, "REDUCELAB_INNET_TIMEOUT_S=%s: want a positive number of seconds", t);
        return 0;
    }
    innet.handle = open(scenario, getenv("REDUCELAB_INNET_ADDR"), (uint32_t)size, (uint32_t)rank, timeout, innet.err,
                        sizeof innet.err);
    if (!innet.handle) return 0;
    const char *runs = protocol(innet.handle);
    if (strcmp(runs, name) != 0) {
        snprintf(innet.err, sizeof innet.err, "REDUCELAB_INNET_SCENARIO=%s runs %s, not %s: give the scenario the switch runs", scenario, runs, name);
        return 0;
    }
    /* Closed at exit: rank 0 of atp runs the job's parameter server, which then serves until it
     * has heard nothing for 0.5 s, so a rank still missing a result of the last call gets it. */
    innet.close = (innet_close_fn)dlsym(lib, "RL_Innet_close");
    if (innet.close) atexit(close_at_exit);
    return 1;
}

static int fail(MPI_Comm comm, const char *name, const char *msg) {
    int rank = 0;
    PMPI_Comm_rank(comm, &rank);
    fprintf(stderr, "reducelab: REDUCELAB_ALLREDUCE=%s (rank %d): %s\n", name, rank, msg);
    PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
    return MPI_ERR_OTHER;
}

int rl_innet_allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                       const char *name) {
    int32_t element;
    if (op == MPI_SUM && (type == MPI_INT || type == MPI_INT32_T || type == MPI_UNSIGNED || type == MPI_UINT32_T))
        element = RL_INNET_INT32;
    else if (op == MPI_SUM && type == MPI_FLOAT)
        element = RL_INNET_FLOAT32;
    else {
        if (getenv("REDUCELAB_VERBOSE"))
            fprintf(stderr, "reducelab: %s adds 32-bit integers and floats only (MPI_SUM on MPI_INT, MPI_INT32_T, "
                            "MPI_UNSIGNED, MPI_UINT32_T, MPI_FLOAT); this call goes to the MPI library\n", name);
        return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
    }
    if (comm == MPI_COMM_NULL) return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm); /* MPI reports it */
    if (innet.state == 0) {
        int mine = open_here(comm, name), all = 0;
        PMPI_Comm_dup(comm, &innet.comm);
        PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, innet.comm); /* also the barrier */
        innet.state = all ? 1 : -1;
        if (mine && !all) snprintf(innet.err, sizeof innet.err, "another rank could not open its host (see its message)");
    } else {
        int same = MPI_UNEQUAL;
        PMPI_Comm_compare(comm, innet.comm, &same);
        if (same != MPI_IDENT && same != MPI_CONGRUENT)
            return fail(comm, name, "opened on another communicator: the switch path runs on one communicator (or congruent "
                                    "ones) per process");
    }
    if (innet.state < 0) return fail(comm, name, innet.err);
    if (count == 0) return MPI_SUCCESS;
    const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    if (innet.allreduce(innet.handle, in, recvbuf, (uint64_t)count, element, innet.err, sizeof innet.err) != 0)
        return fail(comm, name, innet.err);
    return MPI_SUCCESS;
}
