/* Thread levels and the runtime's mutex (threads.c). */
#ifndef RL_THREADS_H
#define RL_THREADS_H
#include <pthread.h>

#pragma GCC visibility push(hidden)
/* 1 when the application is at MPI_THREAD_MULTIPLE (and REDUCELAB_THREADS is not "serialized") */
int rl_thread_multiple(void);
/* rl_mu guards the active operations whenever the library is at MPI_THREAD_MULTIPLE (rl_locking) */
extern pthread_mutex_t rl_mu;
extern pthread_cond_t rl_cv;
extern int rl_locking;
extern __thread int rl_mu_held; /* this thread holds rl_mu */
/* 1 when the MPI library is at MPI_THREAD_MULTIPLE: rl_lock and rl_unlock take rl_mu. */
int rl_use_lock(void);
void rl_lock(void);
void rl_unlock(void);
/* The application's level, recorded by the interposition library's MPI_Init/MPI_Init_thread. */
void rl_set_app_thread_level(int level);
#pragma GCC visibility pop
#endif
