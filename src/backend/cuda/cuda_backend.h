/* cuda_backend.h: the CUDA backend's C surface beyond backend.h, for the engine and the commands.
 *
 * iris_backend_cuda_open (declared in backend.h) takes one device allocation
 * of arena_bytes at open; every later `alloc`, the cuBLASLt workspace and the
 * ops' scratch are carved from it, so nothing calls cudaMalloc afterwards.
 * The developers' switches (IRIS_CUDA_*, docs/env.md) are read once, at open.
 * What only tests and benchmarks call is in cuda_testing.h.
 * Included by C code only under #ifdef IRIS_CUDA. */
#ifndef IRIS_CUDA_BACKEND_H
#define IRIS_CUDA_BACKEND_H

#include <stddef.h>

#include "backend/backend.h"

/* Number of CUDA devices usable now (0 when there is no GPU or no driver). */
int iris_cuda_device_count(void);

typedef struct iris_cuda_mem {
    size_t arena_bytes;     /* the one allocation */
    size_t used_bytes;      /* carved now (scratch included) */
    size_t peak_bytes;      /* the most carved at once */
    size_t device_used;     /* whole device: total - free (cudaMemGetInfo), all processes */
    size_t device_total;
} iris_cuda_mem;

/* Bytes the backend carves at open besides the cuBLASLt workspace: FP8
 * dequantization rows and split-KV attention partials.  The engine adds them
 * to the memory plan's allocation (and takes them from its budget). */
size_t iris_cuda_scratch_bytes(void);

/* A second handle on b's device for another host thread (the engine's vision worker): b's weights,
 * choices and ops, with its own stream (the lowest priority; b's has the highest, so where both
 * have kernels waiting b's step goes first; the same priority measured the same: H200, 2B-FP8, 256
 * images, 42.84 and 43.62 images/s against 43.17 and 42.50), cuBLASLt handle and workspace (32 MiB carved from b's
 * arena now: the plan's "worker.workspace").  It allocates nothing later (its alloc fails: its
 * buffers come from b beforehand); destroy it before b. */
int iris_backend_cuda_fork(iris_backend *b, iris_backend **out, iris_err *err);

/* Arena and device memory figures of a CUDA backend. */
int iris_cuda_mem_info(iris_backend *b, iris_cuda_mem *m);

#endif
