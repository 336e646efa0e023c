/* ops_util.h: what the GPU test files (test_ops*.c) share: bf16 bit patterns, rounded to nearest
 * even as the backends' put_f32 rounds, a seeded xorshift for their random inputs, the check
 * that a GPU is there (a test without one is skipped), and the op tests' backends and helpers
 * (test_ops_util.c). */
#ifndef IRIS_OPS_UTIL_H
#define IRIS_OPS_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h" /* iris_cuda_device_count */
#include "test.h"                      /* IRIS_TEST_SKIP */

/* A GPU test's first line: without a CUDA device (CI builds the GPU tests but has no GPU;
 * scripts/gpu-check runs them on one) the test is skipped, and returns. */
#define OPS_NEED_GPU()                                                                                      \
    do {                                                                                                   \
        if (iris_cuda_device_count() == 0) IRIS_TEST_SKIP("no CUDA device");                               \
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

/* ---- the op tests' shared state (test_ops_util.c; IRIS_CUDA builds) ---- */

/* The CUDA backend under test and the CPU reference, opened by the first test that calls
 * ops_backends (1: both open; 0: an open failed, with a note); never closed. */
extern iris_backend *ops_cuda, *ops_cpu;
int ops_backends(void);
/* A GPU op test's first line: skipped without a device, failed when the backends do not open. */
#define OPS_BACKENDS()                                                                                      \
    do {                                                                                                   \
        OPS_NEED_GPU();                                                                                    \
        REQUIRE(ops_backends());                                                                           \
    } while (0)

/* The op tests' one random stream (its draws follow the order the tests run in).  Cases added later
 * draw between ops_rnd_push(seed) and ops_rnd_pop() from a stream of their own, so the tests after
 * them keep the draws they were tuned with (not nested). */
uint32_t ops_rnd_u32(void);
void ops_rnd_push(uint64_t seed);
void ops_rnd_pop(void);
float ops_rnd_uniform(float lo, float hi);
float ops_round_bf(float f);                          /* f rounded to a bf16 value */
float *ops_rnd_vec(int64_t n, float lo, float hi);    /* n random bf16-valued floats in [lo, hi); free() */
/* Device memory from ops_cuda (free with ops_cuda->free): a bf16 copy of bf16-valued host floats,
 * a byte copy, n bf16 NaNs (0x7fc0). */
void *ops_dev_bf16(const float *h, int64_t n);
void *ops_dev_copy(const void *h, size_t bytes);
void *ops_dev_poison(int64_t n);
/* n device bf16 values as floats, after a sync (NaN where the download failed); free() */
float *ops_dev_read_bf16(const void *d, int64_t n);
iris_tensor ops_view(void *data, iris_dtype dt, int64_t rows, int64_t cols, int64_t ld);
/* rows x cols of got against ref (with row strides) within rtol·|ref| + atol·max|ref|: prints the
 * worst element and fails the test (returning 0) past the tolerance. */
int ops_compare(const char *what, const float *got, int64_t ldg, const float *ref, int64_t ldr, int64_t rows,
                int64_t cols, float rtol, float atol);
/* Two device bf16 results of n values bit for bit the same (else the test fails, returning 0). */
int ops_same_bits(const void *a, const void *b, int64_t n, const char *what);

#endif
