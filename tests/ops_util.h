/* ops_util.h: what the GPU test files (test_ops*.c) share: bf16 bit patterns, rounded to nearest
 * even as the backends' put_f32 rounds, a seeded xorshift for their random inputs, and the check
 * that a GPU is there. */
#ifndef IRIS_OPS_UTIL_H
#define IRIS_OPS_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h" /* iris_cuda_device_count */

/* A GPU test's first line: without a CUDA device (CI builds the GPU tests but has no GPU;
 * scripts/gpu-check runs them on one) it says which test did not run, and returns. */
#define OPS_NEED_GPU(what)                                                                                  \
    do {                                                                                                   \
        if (iris_cuda_device_count() == 0) {                                                               \
            fprintf(stderr, "  (no CUDA device: %s not run)\n", what);                                     \
            return;                                                                                        \
        }                                                                                                  \
    } while (0)

static inline uint16_t ops_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
static inline float ops_bf16_val(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* The next value of the xorshift64 state *s (its top bits). */
static inline uint32_t ops_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 11);
}
static inline float ops_uniform(uint64_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)(ops_rand(s) & 0xffffff) / 16777216.0f;
}

#endif
