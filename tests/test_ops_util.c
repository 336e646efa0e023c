/* test_ops_util.c: the state and helpers the GPU op tests (test_ops_*.c) share, declared in
 * ops_util.h: the CUDA and CPU backends (opened once, by the first test that asks), one seeded
 * random stream (so a test's inputs depend on the tests run before it, as one sequence), device
 * copies of host values, and the comparison every op test reports with.
 *
 * Inputs are drawn as bf16 values, so both backends see the same numbers (CPU as fp32, CUDA as
 * bf16); outputs are poisoned (NaN) before each op, so an unwritten element fails.  Tolerances,
 * per op, in units of the output's own scale: |cuda - cpu| <= rtol·|cpu| + atol·max|cpu|.  The
 * CUDA backend rounds its output to bf16 (relative 2^-9), RMSNorm twice as transformers does,
 * attention's P once (flash kernels): rtol 4e-3..1e-2 covers those and fp32 summation-order
 * noise; anything systematic (an index, a mask, a scale) is off by the size of the values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "ops_util.h"
#include "test.h"

#ifdef IRIS_CUDA
#include "backend/cuda/cuda_backend.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull; /* the one random stream of the op tests */
static uint64_t rng_saved;
uint32_t ops_rnd_u32(void) { return ops_rand(&rng); }
void ops_rnd_push(uint64_t seed) { rng_saved = rng, rng = seed ? seed : 1; }
void ops_rnd_pop(void) { rng = rng_saved; }
float ops_rnd_uniform(float lo, float hi) { return ops_uniform(&rng, lo, hi); }

float ops_round_bf(float f) { return ops_bf16_val(ops_bf16_bits(f)); }

float *ops_rnd_vec(int64_t n, float lo, float hi) {
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = ops_round_bf(ops_rnd_uniform(lo, hi));
    return v;
}

iris_backend *ops_cuda, *ops_cpu;

int ops_backends(void) {
    if (ops_cuda && ops_cpu) return 1;
    iris_err err = {0};
    if (!ops_cuda && iris_backend_cuda_open(0, (size_t)1 << 30, &ops_cuda, &err)) {
        fprintf(stderr, "  cuda open: %s\n", err.msg);
        ops_cuda = NULL;
        return 0;
    }
    if (!ops_cpu && iris_backend_cpu_open(&ops_cpu, &err)) {
        fprintf(stderr, "  cpu open: %s\n", err.msg);
        ops_cpu = NULL;
        return 0;
    }
    return 1;
}

void *ops_dev_bf16(const float *h, int64_t n) {
    uint16_t *t = malloc(2 * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) t[i] = ops_bf16_bits(h[i]);
    void *d = ops_cuda->alloc(ops_cuda, 2 * (size_t)(n ? n : 1));
    if (d) ops_cuda->upload(ops_cuda, d, t, 2 * (size_t)n);
    free(t);
    return d;
}
void *ops_dev_copy(const void *h, size_t bytes) {
    void *d = ops_cuda->alloc(ops_cuda, bytes ? bytes : 1);
    if (d && bytes) ops_cuda->upload(ops_cuda, d, h, bytes);
    return d;
}
void *ops_dev_poison(int64_t n) {
    uint16_t *t = malloc(2 * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) t[i] = 0x7fc0;
    void *d = ops_dev_copy(t, 2 * (size_t)n);
    free(t);
    return d;
}
float *ops_dev_read_bf16(const void *d, int64_t n) {
    uint16_t *t = malloc(2 * (size_t)(n ? n : 1));
    float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
    int rc = ops_cuda->sync(ops_cuda);
    if (!rc) rc = ops_cuda->download(ops_cuda, t, d, 2 * (size_t)n);
    if (rc) fprintf(stderr, "  cuda: %s\n", ops_cuda->err.msg);
    for (int64_t i = 0; i < n; i++) f[i] = rc ? NAN : ops_bf16_val(t[i]);
    free(t);
    return f;
}

iris_tensor ops_view(void *data, iris_dtype dt, int64_t rows, int64_t cols, int64_t ld) {
    iris_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.rows = rows;
    t.cols = cols;
    t.ld = ld;
    return t;
}

int ops_compare(const char *what, const float *got, int64_t ldg, const float *ref, int64_t ldr, int64_t rows,
                int64_t cols, float rtol, float atol) {
    double maxref = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) maxref = fmax(maxref, fabs(ref[r * ldr + c]));
    double worst = 0, max_abs = 0;
    int64_t wr = -1, wc = -1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double g = got[r * ldg + c], f = ref[r * ldr + c], d = fabs(g - f);
            double lim = rtol * fabs(f) + atol * maxref;
            double ratio = isnan(d) ? INFINITY : d / (lim > 0 ? lim : 1e-30);
            if (!isnan(d) && d > max_abs) max_abs = d;
            if (ratio > worst) worst = ratio, wr = r, wc = c;
        }
    printf("    %-44s max|d| %.3g (max|ref| %.3g) worst %.2f of tolerance\n", what, max_abs, maxref, worst);
    if (worst > 1.0) {
        iris_test_fail(__FILE__, __LINE__, "%s: [%lld,%lld] cuda %g cpu %g (rtol %g atol %g·%g)", what, (long long)wr,
                       (long long)wc, got[wr * ldg + wc], ref[wr * ldr + wc], rtol, atol, maxref);
        return 0;
    }
    return 1;
}

int ops_same_bits(const void *a, const void *b, int64_t n, const char *what) {
    float *x = ops_dev_read_bf16(a, n), *y = ops_dev_read_bf16(b, n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += memcmp(&x[i], &y[i], sizeof(float)) != 0;
    CHECKF(bad == 0, "%s: %lld of %lld values differ from the plain ops", what, (long long)bad, (long long)n);
    free(x), free(y);
    return bad == 0;
}

#else
IRIS_TEST(gpu_ops_not_built) { IRIS_TEST_SKIP("built without CUDA"); }
#endif
