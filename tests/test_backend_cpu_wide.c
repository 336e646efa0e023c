/* test_backend_cpu_wide.c: the CPU backend's widened weights (cpu_wide.c).  A BF16 weight and
 * bias are noted on first use, widened and kept on the second; every product of many rows (the sgemm path) and of few (the
 * dot path, its bias) is bit for bit the product with the same values given as an F32 weight;
 * a weight or bias written in place, under the same pointer and shape, is widened again (the CRC
 * of its bytes no longer matches), never read stale, only the tile that changed for a weight of
 * several; the same memory seen as another shape is its own entry; and a weight over the cache's
 * bound is widened per call as before. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "test.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float unif(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* n BF16 values (truncated from uniform floats) into h, their exact fp32 values into f. */
static void fill_bf16(uint16_t *h, float *f, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = unif();
        uint32_t u;
        memcpy(&u, &x, 4);
        h[i] = (uint16_t)(u >> 16);
        u = (uint32_t)h[i] << 16;
        memcpy(&f[i], &u, 4);
    }
}

/* y = x · Wᵀ + bias with W and bias as BF16 views (the cache's) and as F32 (the reference: the bias
 * as it is, W with a row stride so that it is copied into tiles, not cached; few rows, whose dot
 * path reads BF16 rows itself, keep the BF16 W): 1 when every bit agrees. */
static int same_product(iris_backend *b, const float *x, int n, const iris_tensor *w, const iris_tensor *bias,
                        const float *wf, const float *bf) {
    int64_t out = w->rows, in = w->cols;
    float *wf_ld = malloc(sizeof(float) * (size_t)(out * (in + 1))), *y = malloc(sizeof(float) * (size_t)(n * out));
    float *want = malloc(sizeof(float) * (size_t)(n * out));
    if (!wf_ld || !y || !want) return 0;
    for (int64_t r = 0; r < out; r++) memcpy(wf_ld + r * (in + 1), wf + r * in, sizeof(float) * (size_t)in);
    iris_tensor xv = {.data = (void *)x, .dtype = IRIS_DT_F32, .rows = n, .cols = in};
    iris_tensor yv = {.data = y, .dtype = IRIS_DT_F32, .rows = n, .cols = out};
    iris_tensor wv = {.data = want, .dtype = IRIS_DT_F32, .rows = n, .cols = out};
    iris_tensor wref = {.data = wf_ld, .dtype = IRIS_DT_F32, .rows = out, .cols = in, .ld = in + 1};
    iris_tensor bref = {.data = (void *)bf, .dtype = IRIS_DT_F32, .rows = 1, .cols = out};
    int ok = b->linear(b, &xv, w, bias, &yv) == 0 && b->linear(b, &xv, n > 8 ? &wref : w, bias ? &bref : NULL, &wv) == 0 &&
             !memcmp(y, want, sizeof(float) * (size_t)(n * out));
    free(wf_ld), free(y), free(want);
    return ok;
}

IRIS_TEST(backend_cpu_wide_cache) {
    iris_backend *b = NULL;
    iris_err err = {0};
    REQUIRE(iris_backend_cpu_open(&b, &err) == 0);
    iris_cpu_ctx *c = b->ctx;
    enum { OUT = 300, IN = 70, N = 21 };
    uint16_t *wh = malloc(sizeof(uint16_t) * OUT * IN), bh[OUT];
    float *wf = malloc(sizeof(float) * OUT * IN), bf[OUT], x[N * IN];
    REQUIRE(wh && wf);
    fill_bf16(wh, wf, (size_t)OUT * IN);
    fill_bf16(bh, bf, OUT);
    for (int i = 0; i < N * IN; i++) x[i] = unif();
    iris_tensor w = {.data = wh, .dtype = IRIS_DT_BF16, .rows = OUT, .cols = IN};
    iris_tensor bias = {.data = bh, .dtype = IRIS_DT_BF16, .rows = 1, .cols = OUT};

    CHECK(same_product(b, x, N, &w, &bias, wf, bf));
    CHECK_EQ_INT(c->n_wide, 2); /* the weight and its bias, noted */
    CHECK_EQ_INT(c->wide_bytes, 0);
    CHECK(same_product(b, x, N, &w, &bias, wf, bf));
    CHECK_EQ_INT(c->wide_bytes, sizeof(float) * (OUT * IN + OUT)); /* kept */
    CHECK(same_product(b, x, 3, &w, &bias, wf, bf)); /* the dot path takes the kept bias */
    CHECK_EQ_INT(c->n_wide, 2);
    CHECK_EQ_INT(c->n_rewidened, 0);

    /* another weight and bias in the same memory: widened again, the new values used */
    fill_bf16(wh, wf, (size_t)OUT * IN);
    CHECK(same_product(b, x, N, &w, &bias, wf, bf));
    CHECK_EQ_INT(c->n_rewidened, 1);
    fill_bf16(bh, bf, OUT);
    CHECK(same_product(b, x, 3, &w, &bias, wf, bf));
    CHECK(same_product(b, x, N, &w, &bias, wf, bf));
    CHECK_EQ_INT(c->n_rewidened, 2);
    wh[OUT * IN - 1] ^= 1; /* one bit of the last value */
    uint32_t u = (uint32_t)wh[OUT * IN - 1] << 16;
    memcpy(&wf[OUT * IN - 1], &u, 4);
    CHECK(same_product(b, x, N, &w, &bias, wf, bf));
    CHECK_EQ_INT(c->n_rewidened, 3);
    CHECK_EQ_INT(c->n_wide, 2);

    /* the same memory as a weight of fewer rows: its own entry */
    iris_tensor half = w;
    half.rows = OUT / 2;
    CHECK(same_product(b, x, N, &half, NULL, wf, NULL));
    CHECK_EQ_INT(c->n_wide, 3);
    CHECK(same_product(b, x, N, &w, &bias, wf, bf));

    /* several tiles (1024 rows each), few x rows for many blocks: a change in the middle tile only is
     * found and widened again, the other tiles' rows kept */
    enum { TALL = 2100 };
    uint16_t *th = malloc(sizeof(uint16_t) * TALL * IN);
    float *tf = malloc(sizeof(float) * TALL * IN);
    REQUIRE(th && tf);
    fill_bf16(th, tf, (size_t)TALL * IN);
    iris_tensor tall = {.data = th, .dtype = IRIS_DT_BF16, .rows = TALL, .cols = IN};
    CHECK(same_product(b, x, 9, &tall, NULL, tf, NULL));
    CHECK(same_product(b, x, 9, &tall, NULL, tf, NULL));
    int64_t re = c->n_rewidened;
    fill_bf16(th + 1500 * IN, tf + 1500 * IN, IN); /* row 1500: the second tile */
    CHECK(same_product(b, x, 9, &tall, NULL, tf, NULL));
    CHECK_EQ_INT(c->n_rewidened, re + 1);
    CHECK(same_product(b, x, 9, &tall, NULL, tf, NULL));
    CHECK_EQ_INT(c->n_rewidened, re + 1);
    free(th), free(tf);
    CHECK_EQ_INT(c->n_wide, 4);

    /* over the bound: not kept, the product as before */
    int64_t big_out = (int64_t)(IRIS_CPU_WIDE_BYTES / sizeof(float) / IN) + 1;
    uint16_t *bigh = malloc(sizeof(uint16_t) * (size_t)(big_out * IN));
    float *bigf = malloc(sizeof(float) * (size_t)(big_out * IN));
    REQUIRE(bigh && bigf);
    fill_bf16(bigh, bigf, (size_t)(big_out * IN));
    iris_tensor big = {.data = bigh, .dtype = IRIS_DT_BF16, .rows = big_out, .cols = IN};
    size_t kept = c->wide_bytes;
    CHECK(same_product(b, x, 9, &big, NULL, bigf, NULL));
    CHECK(same_product(b, x, 9, &big, NULL, bigf, NULL));
    CHECK_EQ_INT(c->n_wide, 5); /* noted, never kept */
    CHECK_EQ_INT(c->wide_bytes, kept);
    free(bigh), free(bigf);

    free(wh), free(wf);
    b->destroy(b); /* frees the kept weights */
}
