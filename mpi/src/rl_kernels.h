/* The runtime's reduction kernels for predefined (op, datatype) pairs (kernels.c). */
#ifndef RL_KERNELS_H
#define RL_KERNELS_H
#include <mpi.h>
#include <stddef.h>

/* out[i] = a[i] op b[i] for n elements (out may be b; all our ops are commutative). */
typedef void (*rl_kernel)(const void *a, const void *b, void *out, size_t n);
/* Our kernel for a predefined (op, datatype), or NULL if none (user op, or a combination MPI
 * does not define, or a type we do not cover). */
rl_kernel rl_kernel_for(MPI_Op op, MPI_Datatype type);
#endif
