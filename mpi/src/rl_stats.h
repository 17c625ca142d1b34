/* Counters and REDUCELAB_VERBOSE messages (stats.c). */
#ifndef RL_STATS_H
#define RL_STATS_H

#pragma GCC visibility push(hidden)
extern long long rl_n_scheduled, rl_n_fallback; /* RL_Counters */
extern char rl_last_algorithm[64];              /* RL_Last_algorithm */
/* REDUCELAB_VERBOSE is on (read once; then the counters are printed at exit). */
int rl_is_verbose(void);
/* With REDUCELAB_VERBOSE, "reducelab: <prefix> (said once per reason): <why>", once per reason. */
void rl_note_once(const char *prefix, const char *why);
/* A call handed to the MPI library: counted, and said once per reason. */
void rl_note_fallback(const char *why);
/* A call handed to the MPI library because the application is at MPI_THREAD_MULTIPLE. */
void rl_note_thread_fallback(void);
/* A line on stderr with REDUCELAB_VERBOSE (the interposition library's notices). */
void rl_notice(const char *msg);
#pragma GCC visibility pop
#endif
