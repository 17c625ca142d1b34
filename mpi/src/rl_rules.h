/* The shipped crossovers of `auto` (engine.c, auto_to_library; docs/mpi.md): {ranks, bytes}:
 * on a communicator of at least `ranks` ranks (the largest such rule), allreduces of fewer than
 * `bytes` bytes go to the MPI library. Measured with `reducelab tune mpi` (see docs/mpi.md for
 * the run); REDUCELAB_RULES=FILE replaces them, REDUCELAB_RULES=none disables them. */
#ifndef RL_RULES_H
#define RL_RULES_H
#define RL_DEFAULT_RULES {4, 4096}, {8, 4096}
#endif
