/* The blocking collectives (blocking.c). */
#ifndef RL_BLOCKING_H
#define RL_BLOCKING_H

#pragma GCC visibility push(hidden)
void rl_forget_comm(const void *st);
#pragma GCC visibility pop
#endif
