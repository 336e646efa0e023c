/* test_backend_cpu_norms.c: LayerNorm and RMSNorm four rows at a time (cpu_norm_avx2.c) hold the
 * scalar loops' bits: against the reference backend (IRIS_CPU_AVX2=0) on row counts that leave
 * every remainder of four, widths with and without a tail of the transposes and the output
 * vectors, strided rows, and in place. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "test.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float unif(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) & 0xffffff) / 16777216.0f * 4.0f - 1.0f;
}

/* y = norm(x) on b, into y (or in place, y == NULL, into a copy of x): 0 or the op's error. */
static int norm_on(iris_backend *b, int layer, const float *x, int64_t n, int64_t d, int64_t ld, const float *w,
                   const float *bias, float *out) {
    memcpy(out, x, sizeof(float) * (size_t)(n * ld));
    iris_tensor xv = {.data = (void *)x, .dtype = IRIS_DT_F32, .rows = n, .cols = d, .ld = ld};
    iris_tensor ov = {.data = out, .dtype = IRIS_DT_F32, .rows = n, .cols = d, .ld = ld};
    iris_tensor wv = {.data = (void *)w, .dtype = IRIS_DT_F32, .rows = 1, .cols = d};
    iris_tensor bv = {.data = (void *)bias, .dtype = IRIS_DT_F32, .rows = 1, .cols = d};
    const iris_tensor *src = n % 2 ? &ov : &xv; /* odd row counts in place */
    return layer ? b->layer_norm(b, src, &wv, &bv, 1e-6f, &ov) : b->rms_norm(b, src, &wv, 1e-6f, &ov);
}

IRIS_TEST(backend_cpu_norms_rows4_bits) {
    if (!iris_cpu_has_avx2()) IRIS_TEST_SKIP("no AVX2 on this CPU");
    iris_backend *b = NULL, *s = NULL;
    iris_err err = {0};
    REQUIRE(iris_backend_cpu_open(&b, &err) == 0 && iris_backend_cpu_open(&s, &err) == 0);
    ((iris_cpu_ctx *)s->ctx)->avx2 = 0;
    if (!((iris_cpu_ctx *)b->ctx)->avx2) IRIS_TEST_SKIP("IRIS_CPU_AVX2=0");
    const int64_t shapes[][2] = {{560, 192}, {9, 768}, {16, 256}, {1, 64}, {7, 61}, {6, 3}, {11, 1003}};
    for (int k = 0; k < 7; k++) {
        int64_t n = shapes[k][0], d = shapes[k][1], ld = d + 5;
        float *x = malloc(sizeof(float) * (size_t)(n * ld)), *w = malloc(sizeof(float) * (size_t)d);
        float *bias = malloc(sizeof(float) * (size_t)d), *y1 = malloc(sizeof(float) * (size_t)(n * ld));
        float *y2 = malloc(sizeof(float) * (size_t)(n * ld));
        REQUIRE(x && w && bias && y1 && y2);
        for (int64_t i = 0; i < n * ld; i++) x[i] = unif() * (float)(1 + i % 5) + (i % 3 ? 0.0f : 10.0f);
        for (int64_t i = 0; i < d; i++) w[i] = unif(), bias[i] = unif();
        for (int layer = 0; layer < 2; layer++) {
            CHECK(norm_on(b, layer, x, n, d, ld, w, bias, y1) == 0);
            CHECK(norm_on(s, layer, x, n, d, ld, w, bias, y2) == 0);
            CHECKF(!memcmp(y1, y2, sizeof(float) * (size_t)(n * ld)), "%s [%lld x %lld]: not the scalar loops' bits",
                   layer ? "layer_norm" : "rms_norm", (long long)n, (long long)d);
            CHECK(memcmp(y1, x, sizeof(float) * (size_t)d)); /* written */
        }
        free(x), free(w), free(bias), free(y1), free(y2);
    }
    b->destroy(b), s->destroy(s);
}
