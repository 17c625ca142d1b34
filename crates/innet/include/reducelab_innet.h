/* ReduceLab in-network allreduce through running software switches (docs/switch.md, "C ABI").
 *
 * Library: target/release/libreducelab_innet.so (cargo build --release -p reducelab-innet).
 * The switches are started beforehand from a scenario file whose traffic is an in-network
 * allreduce of a protocol that serves sessions (canary, reliable_tree: the registry says which)
 * or one training job of switchml, atp or dsa (the session chooses by it), e.g.
 *   reducelab switch switch --scenario scenarios/switch/star4_canary.toml --node 4
 *   reducelab switch switch --scenario scenarios/switch/star4_switchml.toml --node 4
 * Rank r of `ranks` is host r of that scenario's topology (canary), host r of its allreduce
 * (reliable_tree: `ranks` must be its hosts) or worker r of its job
 * (switchml, atp, dsa: `ranks` must be the job's workers; rank 0 also runs the parameter server
 * and, on RL_Innet_close, serves until it has heard nothing for 0.5 s). A pool
 * switch serves one session per start (it keeps the session's PSNs). Every rank opens, then all ranks
 * synchronise (e.g. MPI_Barrier) so no packet reaches a socket that is not bound yet, then they
 * make the same sequence of RL_Innet_allreduce calls. Errors: a return of NULL / nonzero and a
 * message in `err` (truncated to `errlen`, always NUL-terminated when errlen > 0). */
#ifndef REDUCELAB_INNET_H
#define REDUCELAB_INNET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types (the switch adds 32-bit elements: integers wrap, floats in IEEE single). */
#define RL_INNET_INT32 0
#define RL_INNET_FLOAT32 1

typedef struct RL_Innet RL_Innet;

/* `scenario_path`: the file the switches run. `endpoints`: "IP_BASE:PORT_BASE" as given to the
 * switches (--ip-base, --port-base), or "file:PATH", the endpoints file given to them
 * (--endpoints PATH), NULL for their defaults (127.0.100.1:47000).
 * `timeout_s`: limit of each allreduce (<= 0: 10 s). Fails with a message naming the cause
 * when no switch listens at this rank's first hop. */
RL_Innet *RL_Innet_open(const char *scenario_path, const char *endpoints, uint32_t ranks, uint32_t rank,
                        double timeout_s, char *err, size_t errlen);

/* recv[i] = sum over ranks of send[i], i < count; `send` and `recv` may be the same buffer.
 * Returns 0, or -1 with the reason in `err` (a timeout names what is missing). */
int RL_Innet_allreduce(RL_Innet *h, const void *send, void *recv, uint64_t count, int32_t element_type, char *err,
                       size_t errlen);

/* The protocol the switch runs, by its registry name (e.g. "canary", "switchml"); the
 * string lives as long as the handle ("" for NULL, static). */
const char *RL_Innet_protocol(const RL_Innet *h);

/* Elements per packet of the scenario (the switch's aggregation width). */
uint32_t RL_Innet_elements_per_packet(const RL_Innet *h);

void RL_Innet_close(RL_Innet *h);

#ifdef __cplusplus
}
#endif
#endif
