/* Settings from the environment (config.c). */
#ifndef RL_CONFIG_H
#define RL_CONFIG_H
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)
int rl_torus_for(int p, uint32_t *dims, size_t *ndims, char *err, size_t errlen);
size_t rl_segment_bytes(void);
int rl_check_mode(void);
#pragma GCC visibility pop
#endif
