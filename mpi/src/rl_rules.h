/* The shipped crossovers of `auto` (auto_rules.c, rl_auto_to_library; docs/mpi.md): {ranks, bytes}:
 * on a communicator of at least `ranks` ranks (the largest such rule), allreduces of fewer than
 * `bytes` bytes go to the MPI library. Measured on the 2-core development VM with
 * `reducelab tune mpi --reps 11` (Open MPI 4.1.4, load average 8-11): three runs gave 16, 0.5
 * and 8 KiB at 4 ranks and 4, 8 and 4 KiB at 8 ranks (mpi/rules/vm-run{3,4,5}.txt), two earlier
 * runs refitted 16 and 4 KiB, and 8 and 8 KiB; these are the medians of the five. Rules for
 * another machine: `reducelab tune mpi` and REDUCELAB_RULES=FILE; REDUCELAB_RULES=none disables
 * the crossover.
 * The shared-memory range ({ranks, bytes, shm_min, shm_max}: allreduces of shm_min <=
 * bytes < shm_max run the shared-memory allreduce when the ranks share a node; 0, 0: never):
 * every size at 4 and 8 ranks, from two `reducelab tune mpi` runs (mpi/rules/vm-shm-run{1,2}.txt,
 * load average 7-10 and 3-4: shm the fastest of library, schedules and shm at all 18 sizes,
 * 8 B-1 MiB, on both; its lowest library/shm ratio 1.17 and 1.89) and `reducelab bench mpi` up
 * to 64 MiB (docs/mpi.md). LLONG_MAX: no upper bound. The same two runs put the library
 * crossover (which now decides only where shm cannot run: communicators across nodes, datatypes
 * it declines, nonblocking calls at MPI_THREAD_MULTIPLE) at 4 and 4 KiB on 4 ranks, 8 and 4 KiB
 * on 8: within the spread of the five runs above, so it stays.
 * 2 and 3 ranks: the shared-memory allreduce at every size too, from three runs at load average
 * 8-14 (docs/mpi.md; docs/results/bench-mpi/shm-r23-2026-11-24, mpi/rules/vm-shm-r23-run1.txt):
 * the fastest of library, schedules and shm at every size on 3 ranks in both runs there, and on
 * 2 ranks in two of three (the tune run had it slower than the schedules at 16-32 KiB and
 * 128 KiB-1 MiB, at load 14); crossover 0: schedules at every size where shm cannot run, as
 * before 2 and 3 ranks had a rule. */
#ifndef RL_RULES_H
#define RL_RULES_H
#define RL_DEFAULT_RULES {2, 0, 0, LLONG_MAX}, {4, 8192, 0, LLONG_MAX}, {8, 8192, 0, LLONG_MAX}
#endif
