/* Settings from the environment (config.c). */
#ifndef RL_CONFIG_H
#define RL_CONFIG_H
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)
/* The shape of p ranks from REDUCELAB_TORUS ([p] if unset or of another size); 0 with a message
 * if malformed. */
int rl_torus_for(int p, uint32_t *dims, size_t *ndims, char *err, size_t errlen);
/* REDUCELAB_SEGMENT: bytes per message segment (0: whole messages). */
size_t rl_segment_bytes(void);
/* REDUCELAB_CHECK: the count check before each schedule. */
int rl_check_mode(void);
#pragma GCC visibility pop
#endif
