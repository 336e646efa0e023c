/* test_ops_linear.c: the CUDA linears (GEMV kernels, tensor-core GEMV, shared-memory tiles,
 * cuBLASLt, the fused q/k/v and gate/up launches, W8A8, the BF16 copies of FP8 weights; the tiny
 * 4-bit model end to end, its ops in test_ops_int4.c) checked against the CPU backend (the numeric reference) on random inputs of odd sizes, with the
 * helpers of ops_util.h; part of build/iris-test-gpu (not of `make test`: CI has no GPU), run by
 * scripts/gpu-check.  Without a CUDA device every test is skipped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/weights.h"
#include "tiny_fixture.h"
#include "tools/quantize.h"
#include "ops_util.h"
#include "test.h"

#ifdef IRIS_CUDA
#include "backend/cuda/cuda_testing.h"

/* ---- linear ------------------------------------------------------------------------------- */

static void check_linear(int64_t n, int64_t in, int64_t out, iris_dtype wdt, int bias_dt, int gemv_rows) {
    float *x = ops_rnd_vec(n * in, -1, 1);
    float *wf = malloc(sizeof(float) * (size_t)(out * in));
    uint8_t *w8 = NULL;
    float *sc = NULL;
    int64_t sr = (out + 127) / 128, scn = (in + 127) / 128;
    if (wdt == IRIS_DT_F8_E4M3) {
        w8 = malloc((size_t)(out * in));
        for (int64_t i = 0; i < out * in; i++) {
            uint8_t q = (uint8_t)ops_rnd_u32();
            if ((q & 0x7f) == 0x7f) q ^= 1; /* no NaN codes */
            w8[i] = q;
        }
        sc = malloc(sizeof(float) * (size_t)(sr * scn));
        for (int64_t i = 0; i < sr * scn; i++) sc[i] = ops_rnd_uniform(0.5f, 2.0f) / 448.0f;
    } else {
        for (int64_t i = 0; i < out * in; i++) wf[i] = ops_round_bf(ops_rnd_uniform(-0.1f, 0.1f));
    }
    float *bias = bias_dt >= 0 ? ops_rnd_vec(out, -0.5f, 0.5f) : NULL;

    /* CPU reference. */
    iris_tensor cx = ops_view(x, IRIS_DT_F32, n, in, 0), cw, cb, cy;
    float *cyd = malloc(sizeof(float) * (size_t)(n * out));
    cw = wdt == IRIS_DT_F8_E4M3 ? ops_view(w8, IRIS_DT_F8_E4M3, out, in, 0) : ops_view(wf, IRIS_DT_F32, out, in, 0);
    if (sc) {
        cw.scale = sc;
        cw.block[0] = cw.block[1] = 128;
    }
    cb = ops_view(bias, IRIS_DT_F32, 1, out, 0);
    cy = ops_view(cyd, IRIS_DT_F32, n, out, 0);
    REQUIRE(ops_cpu->linear(ops_cpu, &cx, &cw, bias ? &cb : NULL, &cy) == 0);

    /* CUDA: weights in the requested dtype. */
    void *dw;
    if (wdt == IRIS_DT_F8_E4M3) dw = ops_dev_copy(w8, (size_t)(out * in));
    else if (wdt == IRIS_DT_BF16) dw = ops_dev_bf16(wf, out * in);
    else dw = ops_dev_copy(wf, sizeof(float) * (size_t)(out * in));
    iris_tensor gw = ops_view(dw, wdt, out, in, 0);
    if (sc) {
        gw.scale = ops_dev_copy(sc, sizeof(float) * (size_t)(sr * scn));
        gw.block[0] = gw.block[1] = 128;
    }
    void *db = NULL;
    if (bias) db = bias_dt == IRIS_DT_BF16 ? ops_dev_bf16(bias, out) : ops_dev_copy(bias, sizeof(float) * (size_t)out);
    iris_tensor gb = ops_view(db, bias_dt == IRIS_DT_BF16 ? IRIS_DT_BF16 : IRIS_DT_F32, 1, out, 0);
    void *dx = ops_dev_bf16(x, n * in), *dy = ops_dev_poison(n * out);
    iris_tensor gx = ops_view(dx, IRIS_DT_BF16, n, in, 0), gy = ops_view(dy, IRIS_DT_BF16, n, out, 0);
    iris_cuda_set_gemv_rows(ops_cuda, gemv_rows);
    int rc = ops_cuda->linear(ops_cuda, &gx, &gw, bias ? &gb : NULL, &gy);
    CHECKF(rc == 0, "cuda linear: %s", ops_cuda->err.msg);
    float *got = ops_dev_read_bf16(dy, n * out);
    char what[128];
    snprintf(what, sizeof what, "linear n=%lld %lldx%lld %s%s%s", (long long)n, (long long)out, (long long)in,
             iris_dtype_name(wdt), bias ? " +bias" : "", gemv_rows >= n ? " (gemv)" : "");
    /* cuBLASLt's bias epilogue on the dequantized FP8 path was seen one bf16 ulp off (|y| 8.8: 0.0625,
     * 1.06x the 4e-3 bound) with other random draws: two roundings there, not one. */
    float rtol = wdt == IRIS_DT_F8_E4M3 && bias && gemv_rows < n ? 8e-3f : 4e-3f;
    ops_compare(what, got, out, cyd, out, n, out, rtol, 2e-3f);
    iris_cuda_set_gemv_rows(ops_cuda, -1);
    ops_cuda->free(ops_cuda, dw);
    ops_cuda->free(ops_cuda, (void *)gw.scale);
    ops_cuda->free(ops_cuda, db);
    ops_cuda->free(ops_cuda, dx);
    ops_cuda->free(ops_cuda, dy);
    free(x), free(wf), free(w8), free(sc), free(bias), free(cyd), free(got);
}

IRIS_TEST(gpu_ops_linear) {
    OPS_BACKENDS();
    /* gemv (W16A16 / W8A16) shapes: in a multiple of 8 / 16. */
    check_linear(1, 264, 77, IRIS_DT_BF16, -1, 16);
    check_linear(3, 264, 77, IRIS_DT_BF16, IRIS_DT_BF16, 16);
    check_linear(13, 520, 131, IRIS_DT_BF16, IRIS_DT_F32, 16);
    check_linear(1, 384, 200, IRIS_DT_F8_E4M3, -1, 16);
    check_linear(5, 384, 200, IRIS_DT_F8_E4M3, IRIS_DT_BF16, 16);
    check_linear(16, 2048, 300, IRIS_DT_F8_E4M3, -1, 16);
    /* FP8 on the tensor cores: 16 warps a CTA, two rounds of super-steps; and a width that is not a
     * multiple of 64 (the FMA kernel instead) */
    check_linear(2, 6144, 48, IRIS_DT_F8_E4M3, IRIS_DT_F32, 16);
    check_linear(7, 9728, 37, IRIS_DT_F8_E4M3, -1, 16);
    check_linear(1, 272, 40, IRIS_DT_F8_E4M3, -1, 16);
    check_linear(27, 384, 200, IRIS_DT_F8_E4M3, IRIS_DT_BF16, 32); /* two launches: 16 tokens, then 11 */
    /* cuBLASLt and dequantize-then-cuBLASLt. */
    check_linear(37, 264, 77, IRIS_DT_BF16, IRIS_DT_BF16, 16);
    check_linear(50, 131, 45, IRIS_DT_BF16, -1, 16);
    check_linear(40, 384, 200, IRIS_DT_F8_E4M3, IRIS_DT_F32, 16);
    check_linear(3, 200, 130, IRIS_DT_F8_E4M3, -1, 16); /* in not a multiple of 16: dequantize path at n=3 */
    check_linear(6, 384, 200, IRIS_DT_F8_E4M3, -1, 0);   /* same shape as a gemv case, forced through cuBLASLt */
    check_linear(9, 96, 33, IRIS_DT_F32, IRIS_DT_BF16, 16);
    /* Many rows: the dequantization scratch is used in several row chunks. */
    check_linear(70, 4096, 2304, IRIS_DT_F8_E4M3, -1, 16);
}

/* ---- fused linears: one launch each, the plain ops' numbers bit for bit -------------------------- */

/* A random device weight [out, in] of dtype wdt (FP8: 128x128 block scales); free with free_weight. */
static iris_tensor dev_weight(int64_t out, int64_t in, iris_dtype wdt) {
    iris_tensor w;
    if (wdt == IRIS_DT_F8_E4M3) {
        uint8_t *w8 = malloc((size_t)(out * in));
        for (int64_t i = 0; i < out * in; i++) {
            uint8_t q = (uint8_t)ops_rnd_u32();
            w8[i] = (q & 0x7f) == 0x7f ? q ^ 1 : q;
        }
        int64_t ns = ((out + 127) / 128) * ((in + 127) / 128);
        float *sc = malloc(sizeof(float) * (size_t)ns);
        for (int64_t i = 0; i < ns; i++) sc[i] = ops_rnd_uniform(0.5f, 2.0f) / 448.0f;
        w = ops_view(ops_dev_copy(w8, (size_t)(out * in)), wdt, out, in, 0);
        w.scale = ops_dev_copy(sc, sizeof(float) * (size_t)ns);
        w.block[0] = w.block[1] = 128;
        free(w8), free(sc);
    } else {
        float *wf = ops_rnd_vec(out * in, -0.1f, 0.1f);
        w = ops_view(ops_dev_bf16(wf, out * in), wdt, out, in, 0);
        free(wf);
    }
    return w;
}
static void free_weight(iris_tensor *w) {
    ops_cuda->free(ops_cuda, w->data);
    if (w->scale) ops_cuda->free(ops_cuda, (void *)w->scale);
}

/* ---- linear with its epilogue (linear_epi): the CPU's linear and op in fp32 ---------------------- */

/* fused 1: the backend's one pass must take it (the vision encoder's shapes); 0: through
 * iris_backend_linear_epi, which runs linear and the op where cuBLASLt has no such epilogue */
static void check_linear_epi(int64_t n, int64_t in, int64_t out, int epi, int bias_dt, int fused) {
    float *x = ops_rnd_vec(n * in, -1, 1), *wf = ops_rnd_vec(out * in, -0.1f, 0.1f);
    float *bias = bias_dt >= 0 ? ops_rnd_vec(out, -0.5f, 0.5f) : NULL, *y0 = ops_rnd_vec(n * out, -2, 2);
    /* CPU: y = gelu_tanh(x·Wᵀ + b), or y = y0 + (x·Wᵀ + b) */
    float *ref = malloc(sizeof(float) * (size_t)(n * out)), *res = malloc(sizeof(float) * (size_t)(n * out));
    iris_tensor cx = ops_view(x, IRIS_DT_F32, n, in, 0), cw = ops_view(wf, IRIS_DT_F32, out, in, 0);
    iris_tensor cb = ops_view(bias, IRIS_DT_F32, 1, out, 0), cy = ops_view(ref, IRIS_DT_F32, n, out, 0);
    iris_tensor cr = ops_view(res, IRIS_DT_F32, n, out, 0);
    REQUIRE(ops_cpu->linear(ops_cpu, &cx, &cw, bias ? &cb : NULL, &cy) == 0);
    if (epi == IRIS_EPI_GELU_TANH) {
        REQUIRE(ops_cpu->gelu_tanh(ops_cpu, &cy) == 0);
    } else {
        memcpy(res, y0, sizeof(float) * (size_t)(n * out));
        REQUIRE(ops_cpu->add(ops_cpu, &cr, &cy) == 0);
        memcpy(ref, res, sizeof(float) * (size_t)(n * out));
    }
    void *dx = ops_dev_bf16(x, n * in), *dw = ops_dev_bf16(wf, out * in), *dy = ops_dev_bf16(y0, n * out);
    void *db = bias ? (bias_dt == IRIS_DT_BF16 ? ops_dev_bf16(bias, out) : ops_dev_copy(bias, sizeof(float) * (size_t)out))
                    : NULL;
    iris_tensor gx = ops_view(dx, IRIS_DT_BF16, n, in, 0), gw = ops_view(dw, IRIS_DT_BF16, out, in, 0);
    iris_tensor gb = ops_view(db, bias_dt == IRIS_DT_BF16 ? IRIS_DT_BF16 : IRIS_DT_F32, 1, out, 0);
    iris_tensor gy = ops_view(dy, IRIS_DT_BF16, n, out, 0);
    REQUIRE(ops_cuda->linear_epi);
    void *dt = fused ? NULL : ops_dev_poison(n * out);
    iris_tensor gt = ops_view(dt, IRIS_DT_BF16, n, out, 0);
    int rc = fused ? ops_cuda->linear_epi(ops_cuda, &gx, &gw, bias ? &gb : NULL, epi, &gy)
                   : iris_backend_linear_epi(ops_cuda, &gx, &gw, bias ? &gb : NULL, epi, &gy, &gt);
    CHECKF(rc == 0, "cuda linear_epi %d: %d %s", epi, rc, ops_cuda->err.msg);
    float *got = ops_dev_read_bf16(dy, n * out);
    char what[128];
    snprintf(what, sizeof what, "linear_epi %s n=%lld %lldx%lld%s", epi == IRIS_EPI_ADD ? "add" : "gelu_tanh",
             (long long)n, (long long)out, (long long)in, bias ? " +bias" : "");
    /* one rounding fused; linear then the op rounds twice (as check_linear's dequantizing path) */
    ops_compare(what, got, out, ref, out, n, out, fused ? 4e-3f : 8e-3f, 2e-3f);
    ops_cuda->free(ops_cuda, dx), ops_cuda->free(ops_cuda, dw), ops_cuda->free(ops_cuda, dy), ops_cuda->free(ops_cuda, db);
    ops_cuda->free(ops_cuda, dt);
    free(x), free(wf), free(bias), free(y0), free(ref), free(res), free(got);
}

IRIS_TEST(gpu_ops_linear_epi) {
    OPS_BACKENDS();
    ops_rnd_push(0x2545f4914f6cdd1dull);
    check_linear_epi(300, 256, 1024, IRIS_EPI_GELU_TANH, IRIS_DT_BF16, 1); /* the ViT MLP's fc1 */
    check_linear_epi(300, 1024, 256, IRIS_EPI_ADD, IRIS_DT_BF16, 1);       /* fc2 into the residual */
    check_linear_epi(64, 128, 200, IRIS_EPI_GELU_TANH, -1, 1);
    check_linear_epi(77, 192, 136, IRIS_EPI_ADD, IRIS_DT_F32, 0); /* no such epilogue on the H100 */
    check_linear_epi(77, 192, 136, IRIS_EPI_GELU_TANH, IRIS_DT_F32, 0);
    /* what it does not take it leaves to linear and the op: a decode row's GEMV, an FP8 weight */
    float *xf = ops_rnd_vec(128, -1, 1);
    void *dx = ops_dev_bf16(xf, 128), *dy = ops_dev_poison(64);
    uint16_t *zeros = calloc(64 * 128, sizeof(uint16_t));
    iris_tensor w8 = ops_view(ops_dev_copy(zeros, 64 * 128), IRIS_DT_F8_E4M3, 64, 128, 0);
    iris_tensor w16 = ops_view(ops_dev_copy(zeros, 64 * 128 * 2), IRIS_DT_BF16, 64, 128, 0);
    free(zeros);
    iris_tensor gx = ops_view(dx, IRIS_DT_BF16, 1, 128, 0), gy = ops_view(dy, IRIS_DT_BF16, 1, 64, 0);
    CHECK_EQ_INT(ops_cuda->linear_epi(ops_cuda, &gx, &w8, NULL, IRIS_EPI_ADD, &gy), IRIS_EUNSUPPORTED);
    CHECK_EQ_INT(ops_cuda->linear_epi(ops_cuda, &gx, &w16, NULL, IRIS_EPI_ADD, &gy), IRIS_EUNSUPPORTED);
    ops_cuda->free(ops_cuda, w8.data), ops_cuda->free(ops_cuda, w16.data);
    ops_cuda->free(ops_cuda, dx), ops_cuda->free(ops_cuda, dy);
    free(xf);
    ops_rnd_pop();
}

static void check_fused_linear(int64_t n, int64_t in, const int64_t *outs, iris_dtype wdt) {
    float *xf = ops_rnd_vec(n * in, -1, 1);
    void *dx = ops_dev_bf16(xf, n * in);
    iris_tensor x = ops_view(dx, IRIS_DT_BF16, n, in, 0), w[3], yf[3], yp[3];
    const iris_tensor *ws[3];
    iris_tensor *ys[3];
    char what[128];
    for (int i = 0; i < 3; i++) {
        w[i] = dev_weight(outs[i], in, wdt), ws[i] = &w[i];
        yf[i] = ops_view(ops_dev_poison(n * outs[i]), IRIS_DT_BF16, n, outs[i], 0), ys[i] = &yf[i];
        yp[i] = ops_view(ops_dev_poison(n * outs[i]), IRIS_DT_BF16, n, outs[i], 0);
    }
    REQUIRE(ops_cuda->linear_n && ops_cuda->linear_swiglu);
    /* q, k, v: one launch against three linears */
    CHECKF(iris_backend_linear_n(ops_cuda, &x, 3, ws, ys, NULL) == 0, "%s", ops_cuda->err.msg);
    for (int i = 0; i < 3; i++) CHECKF(ops_cuda->linear(ops_cuda, &x, &w[i], NULL, &yp[i]) == 0, "%s", ops_cuda->err.msg);
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "linear_n n=%lld %s weight %d [%lld,%lld]", (long long)n, iris_dtype_name(wdt), i,
                 (long long)outs[i], (long long)in);
        ops_same_bits(yf[i].data, yp[i].data, n * outs[i], what);
    }
    /* gate, up, silu·mul: weights 0 and 1 need the same shape; use weight 0 twice over different data */
    iris_tensor wu = dev_weight(outs[0], in, wdt);
    iris_tensor u = ops_view(ops_dev_poison(n * outs[0]), IRIS_DT_BF16, n, outs[0], 0);
    CHECKF(iris_backend_linear_swiglu(ops_cuda, &x, &w[0], &wu, &yf[0], &u, NULL) == 0, "%s", ops_cuda->err.msg);
    CHECK(ops_cuda->linear(ops_cuda, &x, &w[0], NULL, &yp[0]) == 0);
    CHECK(ops_cuda->linear(ops_cuda, &x, &wu, NULL, &u) == 0);
    CHECK(ops_cuda->silu_mul(ops_cuda, &yp[0], &u) == 0);
    snprintf(what, sizeof what, "linear_swiglu n=%lld %s [%lld,%lld]", (long long)n, iris_dtype_name(wdt),
             (long long)outs[0], (long long)in);
    ops_same_bits(yf[0].data, yp[0].data, n * outs[0], what);
    for (int i = 0; i < 3; i++) free_weight(&w[i]), ops_cuda->free(ops_cuda, yf[i].data), ops_cuda->free(ops_cuda, yp[i].data);
    free_weight(&wu);
    ops_cuda->free(ops_cuda, u.data), ops_cuda->free(ops_cuda, dx);
    free(xf);
}

/* ---- W8A8 (FP8 tensor cores, opt-in): its error against the CPU, beside the default path's ---- */

/* max |y - ref| / max |ref| of an n x out device bf16 result. */
static double rel_err(const void *dy, const float *ref, int64_t n) {
    float *got = ops_dev_read_bf16(dy, n);
    double m = 0, e = 0;
    for (int64_t i = 0; i < n; i++) {
        m = fmax(m, fabs(ref[i]));
        e = fmax(e, isnan(got[i]) ? INFINITY : fabs((double)got[i] - ref[i]));
    }
    free(got);
    return e / (m > 0 ? m : 1);
}

/* An FP8 product's inputs and its CPU reference: a random block-FP8 weight on the device (codes and
 * scales also on the host), x [n, in] in [-1, 1], an fp32 bias, ref = the CPU's x · wᵀ (+ bias). */
typedef struct fp8_case {
    int64_t n, in, out, ns;
    int bias;
    iris_tensor w, gx, gb;
    uint8_t *w8;
    float *sc, *x, *ref, *bv;
    void *dx, *db;
} fp8_case;

static void fp8_case_make(fp8_case *c, int64_t n, int64_t in, int64_t out, int bias) {
    memset(c, 0, sizeof *c);
    c->n = n, c->in = in, c->out = out, c->bias = bias;
    c->w = dev_weight(out, in, IRIS_DT_F8_E4M3);
    c->ns = ((out + 127) / 128) * ((in + 127) / 128);
    c->w8 = malloc((size_t)(out * in));
    c->sc = malloc(sizeof(float) * (size_t)c->ns), c->x = ops_rnd_vec(n * in, -1, 1);
    c->ref = malloc(sizeof(float) * (size_t)(n * out)), c->bv = ops_rnd_vec(out, -0.5f, 0.5f);
    REQUIRE(ops_cuda->download(ops_cuda, c->w8, c->w.data, (size_t)(out * in)) == 0);
    REQUIRE(ops_cuda->download(ops_cuda, c->sc, c->w.scale, sizeof(float) * (size_t)c->ns) == 0);
    iris_tensor cw = ops_view(c->w8, IRIS_DT_F8_E4M3, out, in, 0), cx = ops_view(c->x, IRIS_DT_F32, n, in, 0);
    iris_tensor cy = ops_view(c->ref, IRIS_DT_F32, n, out, 0), cb = ops_view(c->bv, IRIS_DT_F32, 1, out, 0);
    cw.scale = c->sc, cw.block[0] = cw.block[1] = 128;
    REQUIRE(ops_cpu->linear(ops_cpu, &cx, &cw, bias ? &cb : NULL, &cy) == 0);
    c->dx = ops_dev_bf16(c->x, n * in), c->db = ops_dev_copy(c->bv, sizeof(float) * (size_t)out);
    c->gx = ops_view(c->dx, IRIS_DT_BF16, n, in, 0), c->gb = ops_view(c->db, IRIS_DT_F32, 1, out, 0);
}

/* y [n, out] (device bf16) = x · wᵀ (+ bias) on the GPU. */
static void fp8_case_run(fp8_case *c, void *y) {
    iris_tensor gy = ops_view(y, IRIS_DT_BF16, c->n, c->out, 0);
    CHECKF(ops_cuda->linear(ops_cuda, &c->gx, &c->w, c->bias ? &c->gb : NULL, &gy) == 0, "%s", ops_cuda->err.msg);
}

static void fp8_case_free(fp8_case *c) {
    if (c->w.dense) ops_cuda->free(ops_cuda, c->w.dense);
    free_weight(&c->w);
    ops_cuda->free(ops_cuda, c->dx), ops_cuda->free(ops_cuda, c->db);
    free(c->w8), free(c->sc), free(c->x), free(c->ref), free(c->bv);
}

/* Values that differ bit for bit between two device bf16 results of n values. */
static int64_t n_differ(const void *a, const void *b, int64_t n) {
    float *x = ops_dev_read_bf16(a, n), *y = ops_dev_read_bf16(b, n);
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += memcmp(&x[i], &y[i], 4) != 0;
    free(x), free(y);
    return d;
}

static void check_w8a8(int64_t n, int64_t in, int64_t out, int bias) {
    fp8_case c;
    fp8_case_make(&c, n, in, out, bias);
    void *y16 = ops_dev_poison(n * out), *y8 = ops_dev_poison(n * out);
    fp8_case_run(&c, y16);
    iris_cuda_set_fp8_mma(ops_cuda, 1);
    fp8_case_run(&c, y8);
    iris_cuda_set_fp8_mma(ops_cuda, 0);
    double e16 = rel_err(y16, c.ref, n * out), e8 = rel_err(y8, c.ref, n * out);
    int64_t differ = n_differ(y16, y8, n * out);
    fprintf(stderr, "  W8A8 [%lld x %lld] . [%lld x %lld]^T%s: max error / max|y| %.2e (W8A16: %.2e), %lld of %lld "
            "values differ\n", (long long)n, (long long)in, (long long)out, (long long)in, bias ? " +bias" : "", e8, e16,
            (long long)differ, (long long)(n * out));
    CHECKF(e16 <= 8e-3, "W8A16 error %.3g", e16);
    /* e4m3 activations (3 mantissa bits, per-128 scales): a few percent of the output's range at most */
    CHECKF(e8 <= 4e-2, "W8A8 error %.3g", e8);
    CHECKF(differ > 0, "W8A8 asked for on sm_90 but the numbers are the W8A16 path's");
    ops_cuda->free(ops_cuda, y16), ops_cuda->free(ops_cuda, y8);
    fp8_case_free(&c);
}

/* ---- densify: an FP8 weight's BF16 copy, and products that read it ---- */

/* route: -1 any; 0 the copy leaves the product's path as it was (bit for bit); 1 the copy moves the
 * product to another path (cuBLASLt on the copy in place of the tensor-core GEMV: other sums) */
static void check_dense(int64_t n, int64_t in, int64_t out, int bias, int route) {
    fp8_case c;
    fp8_case_make(&c, n, in, out, bias);
    int64_t sc_cols = (in + 127) / 128;
    void *yq = ops_dev_poison(n * out), *yd = ops_dev_poison(n * out);
    fp8_case_run(&c, yq);
    REQUIRE(ops_cuda->densify);
    CHECKF(ops_cuda->densify(ops_cuda, &c.w) == 0, "%s", ops_cuda->err.msg);
    REQUIRE(c.w.dense);
    /* the copy is bf16(q · scale), element for element */
    float *dense = ops_dev_read_bf16(c.w.dense, out * in);
    int64_t bad = 0;
    for (int64_t r = 0; r < out; r++)
        for (int64_t k = 0; k < in; k++) {
            float want = ops_round_bf(iris_fp8_e4m3_decode(c.w8[r * in + k]) * c.sc[(r / 128) * sc_cols + k / 128]);
            bad += memcmp(&want, &dense[r * in + k], 4) != 0;
        }
    CHECKF(bad == 0, "densify [%lld x %lld]: %lld of %lld values are not bf16(q * scale)", (long long)out, (long long)in,
           (long long)bad, (long long)(out * in));
    fp8_case_run(&c, yd);
    double eq = rel_err(yq, c.ref, n * out), ed = rel_err(yd, c.ref, n * out);
    int64_t differ = n_differ(yq, yd, n * out);
    fprintf(stderr, "  dense [%lld x %lld] . [%lld x %lld]^T%s: max error / max|y| %.2e (dequantizing: %.2e), %lld of %lld "
            "values differ\n", (long long)n, (long long)in, (long long)out, (long long)in, bias ? " +bias" : "", ed, eq,
            (long long)differ, (long long)(n * out));
    CHECKF(eq <= 8e-3 && ed <= 8e-3, "error dequantizing %.3g, dense %.3g", eq, ed);
    if (route >= 0)
        CHECKF((differ > 0) == route, "%lld rows: %lld values differ with the BF16 copy, expected %s", (long long)n,
               (long long)differ, route ? "another path (cuBLASLt past 16 rows)" : "the same path (the GEMV up to 16 rows)");
    ops_cuda->free(ops_cuda, yq), ops_cuda->free(ops_cuda, yd);
    free(dense);
    fp8_case_free(&c);
}

IRIS_TEST(gpu_ops_linear_dense) {
    OPS_BACKENDS();
    check_dense(70, 2048, 2304, 0, -1);
    check_dense(300, 6144, 2048, 1, -1);   /* the dequantizing path takes this weight in two chunks */
    check_dense(1029, 2048, 6144, 0, -1);
    check_dense(45, 200, 136, 1, -1);      /* a width the 16-byte dequantization declines */
    /* decode sizes: up to 16 rows the tensor-core GEMV keeps reading the FP8 codes; 17-32 rows
     * (the GEMV's without a copy) go to cuBLASLt on the copy, measured faster (cuda_linear.cu) */
    check_dense(16, 2048, 2304, 0, 0);
    check_dense(24, 2048, 2304, 0, 1);
    check_dense(32, 2048, 6144, 1, 1);
}

/* BF16 weights (the lm_head): k_gemv_n up to GEMV_BF16_ROWS (4) rows, cuBLASLt past that, measured
 * faster there (cuda_internal.cuh).  By default 4 rows give the forced GEMV's bits and 8 rows other
 * sums; either within the CPU bound (check_linear above covers both paths' accuracy). */
IRIS_TEST(gpu_ops_linear_bf16_route) {
    OPS_BACKENDS();
    const int64_t in = 2048, out = 6144;
    iris_tensor w = dev_weight(out, in, IRIS_DT_BF16);
    float *x = ops_rnd_vec(8 * in, -1, 1);
    void *dx = ops_dev_bf16(x, 8 * in), *yd = ops_dev_poison(8 * out), *yg = ops_dev_poison(8 * out);
    for (int n = 4; n <= 8; n += 4) {
        iris_tensor gx = ops_view(dx, IRIS_DT_BF16, n, in, 0), gd = ops_view(yd, IRIS_DT_BF16, n, out, 0),
                    gg = ops_view(yg, IRIS_DT_BF16, n, out, 0);
        CHECKF(ops_cuda->linear(ops_cuda, &gx, &w, NULL, &gd) == 0, "%s", ops_cuda->err.msg);
        iris_cuda_set_gemv_rows(ops_cuda, 16);
        CHECKF(ops_cuda->linear(ops_cuda, &gx, &w, NULL, &gg) == 0, "%s", ops_cuda->err.msg);
        iris_cuda_set_gemv_rows(ops_cuda, -1);
        int64_t differ = n_differ(yd, yg, n * out);
        fprintf(stderr, "  bf16 linear, %d rows: %lld of %lld values differ from the GEMV's\n", n, (long long)differ,
                (long long)(n * out));
        CHECKF((differ > 0) == (n > 4), "%d rows: %lld values differ from the GEMV's, expected %s", n, (long long)differ,
               n > 4 ? "cuBLASLt's other sums" : "the GEMV itself");
    }
    ops_cuda->free(ops_cuda, dx), ops_cuda->free(ops_cuda, yd), ops_cuda->free(ops_cuda, yg);
    free_weight(&w);
    free(x);
}

IRIS_TEST(gpu_ops_fused_linear) {
    OPS_BACKENDS();
    /* the one-launch path (n up to the gemv rows: FP8 16 tokens a launch, so 24 takes two; BF16 8, so
     * 9 and 16 take two; 24 and 40 go to cuBLASLt for BF16, 40 for FP8), FP8 and BF16, q/k/v-like
     * shapes (the first is the largest) */
    const int64_t qkv[3] = {256, 128, 128}, odd[3] = {200, 72, 72};
    const int ns[] = {1, 3, 8, 9, 16, 24, 40};
    for (int k = 0; k < 7; k++) {
        check_fused_linear(ns[k], 384, qkv, IRIS_DT_F8_E4M3);
        check_fused_linear(ns[k], 264, odd, IRIS_DT_BF16);
    }
}

/* The tensor-core GEMV with its weight tiles in shared memory (the default for up to 2 tokens where
 * the register path would take more than one wave and this one does not) gives the register path's
 * bits: m = 1 a linear, 2 a SwiGLU pair, 3 a q/k/v set. */
static void check_gemv_smem(int m, int64_t n, int64_t in, const int64_t *outs) {
    float *xf = ops_rnd_vec(n * in, -1, 1);
    void *dx = ops_dev_bf16(xf, n * in);
    iris_tensor x = ops_view(dx, IRIS_DT_BF16, n, in, 0), w[3], y[2][3], u = {0};
    int nw = m == 2 ? 2 : m;
    for (int i = 0; i < nw; i++) w[i] = dev_weight(outs[m == 2 ? 0 : i], in, IRIS_DT_F8_E4M3);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < (m == 2 ? 1 : m); i++) y[s][i] = ops_view(ops_dev_poison(n * outs[i]), IRIS_DT_BF16, n, outs[i], 0);
    if (m == 2) u = ops_view(ops_dev_poison(n * outs[0]), IRIS_DT_BF16, n, outs[0], 0);
    for (int s = 0; s < 2; s++) {
        iris_cuda_set_gemv_smem(ops_cuda, s == 0);
        int rc;
        if (m == 1) rc = ops_cuda->linear(ops_cuda, &x, &w[0], NULL, &y[s][0]);
        else if (m == 2) rc = iris_backend_linear_swiglu(ops_cuda, &x, &w[0], &w[1], &y[s][0], &u, NULL);
        else {
            const iris_tensor *ws[3] = {&w[0], &w[1], &w[2]};
            iris_tensor *ys[3] = {&y[s][0], &y[s][1], &y[s][2]};
            rc = iris_backend_linear_n(ops_cuda, &x, 3, ws, ys, NULL);
        }
        CHECKF(rc == 0, "%s", ops_cuda->err.msg);
    }
    iris_cuda_set_gemv_smem(ops_cuda, 1);
    for (int i = 0; i < (m == 2 ? 1 : m); i++) {
        char what[128];
        snprintf(what, sizeof what, "gemv %s n=%lld [%lld,%lld]: shared-memory tiles", m == 1 ? "linear" : m == 2 ? "swiglu" : "qkv",
                 (long long)n, (long long)outs[i], (long long)in);
        ops_same_bits(y[0][i].data, y[1][i].data, n * outs[i], what);
    }
    for (int i = 0; i < nw; i++) free_weight(&w[i]);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < (m == 2 ? 1 : m); i++) ops_cuda->free(ops_cuda, y[s][i].data);
    if (u.data) ops_cuda->free(ops_cuda, u.data);
    ops_cuda->free(ops_cuda, dx);
    free(xf);
}

IRIS_TEST(gpu_ops_gemv_smem) {
    OPS_BACKENDS();
    /* Shapes of more tiles than a wave of the register path (2B's gate/up, whose tile pair needs more
     * than 48 KB of shared memory; 4B's q/k/v; a linear of 376 tiles, the last one past the weight's
     * rows) at 1 and 2 tokens; and four the rule leaves to registers (4 and 27 tokens; 2B's o_proj,
     * one wave; a row too long for a wave of shared-memory tiles). */
    const int64_t gu[1] = {6144}, qkv4b[3] = {4096, 1024, 1024}, ragged[1] = {6008}, o[1] = {2048}, big[1] = {4608};
    check_gemv_smem(2, 1, 2048, gu);
    check_gemv_smem(2, 4, 2048, gu);
    check_gemv_smem(3, 1, 2560, qkv4b);
    check_gemv_smem(3, 2, 2560, qkv4b);
    check_gemv_smem(1, 2, 384, ragged);
    check_gemv_smem(2, 27, 2048, gu);
    check_gemv_smem(1, 1, 2048, o);
    check_gemv_smem(1, 3, 9728, big);
}

IRIS_TEST(gpu_ops_linear_w8a8) {
    OPS_BACKENDS();
    if (!iris_cuda_set_fp8_mma(ops_cuda, 0)) IRIS_TEST_SKIP("W8A8 with block scales needs sm_90");
    check_w8a8(70, 2048, 2304, 0);
    check_w8a8(300, 6144, 2048, 1);
    check_w8a8(1029, 2048, 6144, 0);
}

/* ---- a weight group as one product (linear_n's and linear_swiglu's joint) ------------------- */

/* Weights ws[0..m-1] of dtype wdt moved end to end (what iris_backend_place_group does in a fresh
 * arena): one device buffer for the data, one for FP8 scales; dense 1 also gives them BF16 copies
 * end to end.  The old allocations are freed; free the group with free_group. */
static void make_group(iris_tensor *w, int m, int dense) {
    int64_t rows = 0, in = w[0].cols, es = w[0].dtype == IRIS_DT_F8_E4M3 ? 1 : 2, sc = (in + 127) / 128;
    for (int i = 0; i < m; i++) rows += w[i].rows;
    uint8_t *hd = malloc((size_t)(rows * in * es));
    float *hs = malloc(sizeof(float) * (size_t)(rows / 128 + m) * (size_t)sc);
    int64_t at = 0, sat = 0;
    for (int i = 0; i < m; i++) {
        REQUIRE(ops_cuda->download(ops_cuda, hd + at * in * es, w[i].data, (size_t)(w[i].rows * in * es)) == 0);
        if (w[i].scale)
            REQUIRE(ops_cuda->download(ops_cuda, hs + sat, w[i].scale, sizeof(float) * (size_t)(w[i].rows / 128 * sc)) == 0);
        at += w[i].rows, sat += w[i].rows / 128 * sc;
    }
    uint8_t *dd = ops_dev_copy(hd, (size_t)(rows * in * es));
    float *ds = w[0].scale ? ops_dev_copy(hs, sizeof(float) * (size_t)sat) : NULL;
    at = 0, sat = 0;
    for (int i = 0; i < m; i++) {
        free_weight(&w[i]);
        w[i].data = dd + at * in * es, w[i].scale = ds ? ds + sat : NULL;
        at += w[i].rows, sat += w[i].rows / 128 * sc;
    }
    if (dense) {
        uint16_t *dn = NULL;
        for (int i = 0; i < m; i++) REQUIRE(ops_cuda->densify(ops_cuda, &w[i]) == 0);
        float *hf = malloc(sizeof(float) * (size_t)(rows * in));
        at = 0;
        for (int i = 0; i < m; i++) {
            float *f = ops_dev_read_bf16(w[i].dense, w[i].rows * in);
            memcpy(hf + at * in, f, sizeof(float) * (size_t)(w[i].rows * in));
            free(f), ops_cuda->free(ops_cuda, w[i].dense), at += w[i].rows;
        }
        dn = ops_dev_bf16(hf, rows * in);
        for (int i = 0, r = 0; i < m; r += (int)w[i].rows, i++) w[i].dense = dn + (int64_t)r * in;
        free(hf);
    }
    free(hd), free(hs);
}
static void free_group(iris_tensor *w) {
    ops_cuda->free(ops_cuda, w[0].data);
    if (w[0].scale) ops_cuda->free(ops_cuda, (void *)w[0].scale);
    if (w[0].dense) ops_cuda->free(ops_cuda, w[0].dense);
}

/* q/k/v (three widths) and gate/up of n rows with a joint buffer: the outputs are left column views of
 * it, and hold what the products one weight at a time give (another GEMM shape: other tiles, so within
 * a bf16 rounding, not bit for bit). */
static void check_joint(int64_t n, int64_t in, const int64_t *outs, iris_dtype wdt, int dense, int w8a8) {
    float *xf = ops_rnd_vec(n * in, -1, 1);
    void *dx = ops_dev_bf16(xf, n * in);
    iris_tensor x = ops_view(dx, IRIS_DT_BF16, n, in, 0), w[3], y[3], yp[3], gw[2];
    int64_t tot = outs[0] + outs[1] + outs[2];
    char what[160];
    for (int i = 0; i < 3; i++) {
        w[i] = dev_weight(outs[i], in, wdt);
        y[i] = ops_view(ops_dev_poison(n * outs[i]), IRIS_DT_BF16, n, outs[i], 0);
        yp[i] = ops_view(ops_dev_poison(n * outs[i]), IRIS_DT_BF16, n, outs[i], 0);
    }
    for (int i = 0; i < 2; i++) gw[i] = dev_weight(outs[0], in, wdt);
    make_group(w, 3, dense), make_group(gw, 2, dense);
    iris_cuda_set_fp8_mma(ops_cuda, w8a8);
    void *dj = ops_dev_poison(n * (tot > 2 * outs[0] ? tot : 2 * outs[0]));
    iris_tensor joint = ops_view(dj, IRIS_DT_BF16, n, tot, 0), gj = ops_view(dj, IRIS_DT_BF16, n, 2 * outs[0], 0);
    const iris_tensor *ws[3] = {&w[0], &w[1], &w[2]};
    iris_tensor *ys[3] = {&y[0], &y[1], &y[2]};
    void *own[3] = {y[0].data, y[1].data, y[2].data};
    CHECKF(iris_backend_linear_n(ops_cuda, &x, 3, ws, ys, &joint) == 0, "%s", ops_cuda->err.msg);
    for (int i = 0; i < 3; i++) CHECK(ops_cuda->linear(ops_cuda, &x, &w[i], NULL, &yp[i]) == 0);
    int64_t at = 0;
    for (int i = 0; i < 3; at += outs[i], i++) {
        snprintf(what, sizeof what, "joint q/k/v n=%lld %s%s%s weight %d [%lld,%lld]", (long long)n, iris_dtype_name(wdt),
                 dense ? " dense" : "", w8a8 ? " W8A8" : "", i, (long long)outs[i], (long long)in);
        CHECKF(y[i].data == (uint16_t *)dj + at && y[i].ld == tot, "%s: not a view of the joint product", what);
        float *got = ops_dev_read_bf16(dj, n * tot), *ref = ops_dev_read_bf16(yp[i].data, n * outs[i]);
        ops_compare(what, got + at, tot, ref, outs[i], n, outs[i], 8e-3f, 2e-3f);
        if (w8a8) { /* and near the dequantizing path's product (e4m3 activations: a few percent of max|y|) */
            iris_cuda_set_fp8_mma(ops_cuda, 0);
            CHECK(ops_cuda->linear(ops_cuda, &x, &w[i], NULL, &yp[i]) == 0);
            iris_cuda_set_fp8_mma(ops_cuda, 1);
            float *r16 = ops_dev_read_bf16(yp[i].data, n * outs[i]);
            strncat(what, " vs W8A16", sizeof what - strlen(what) - 1);
            ops_compare(what, got + at, tot, r16, outs[i], n, outs[i], 0.0f, 4e-2f);
            free(r16);
        }
        free(got), free(ref);
    }
    /* gate/up: g left the gate columns' view, silu·mul done there */
    iris_tensor g = ops_view(own[0], IRIS_DT_BF16, n, outs[0], 0), u = ops_view(ops_dev_poison(n * outs[0]), IRIS_DT_BF16, n, outs[0], 0);
    iris_tensor u2 = ops_view(ops_dev_poison(n * outs[0]), IRIS_DT_BF16, n, outs[0], 0);
    CHECKF(iris_backend_linear_swiglu(ops_cuda, &x, &gw[0], &gw[1], &g, &u, &gj) == 0, "%s", ops_cuda->err.msg);
    CHECK(ops_cuda->linear(ops_cuda, &x, &gw[0], NULL, &yp[0]) == 0);
    CHECK(ops_cuda->linear(ops_cuda, &x, &gw[1], NULL, &u2) == 0);
    CHECK(ops_cuda->silu_mul(ops_cuda, &yp[0], &u2) == 0);
    snprintf(what, sizeof what, "joint gate/up n=%lld %s%s%s [%lld,%lld]", (long long)n, iris_dtype_name(wdt),
             dense ? " dense" : "", w8a8 ? " W8A8" : "", (long long)outs[0], (long long)in);
    CHECKF(g.data == dj && g.ld == 2 * outs[0], "%s: g not a view of the joint product", what);
    float *got = ops_dev_read_bf16(dj, n * 2 * outs[0]), *ref = ops_dev_read_bf16(yp[0].data, n * outs[0]);
    ops_compare(what, got, 2 * outs[0], ref, outs[0], n, outs[0], 1.6e-2f, 2e-3f);
    free(got), free(ref);
    iris_cuda_set_fp8_mma(ops_cuda, 0);
    free_group(w), free_group(gw);
    for (int i = 0; i < 3; i++) ops_cuda->free(ops_cuda, own[i]), ops_cuda->free(ops_cuda, yp[i].data);
    ops_cuda->free(ops_cuda, u.data), ops_cuda->free(ops_cuda, u2.data), ops_cuda->free(ops_cuda, dj), ops_cuda->free(ops_cuda, dx);
    free(xf);
}

IRIS_TEST(gpu_ops_linear_joint) {
    OPS_BACKENDS();
    const int64_t qkv[3] = {256, 128, 128};
    check_joint(37, 384, qkv, IRIS_DT_BF16, 0, 0);    /* a BF16 checkpoint's weights */
    check_joint(300, 384, qkv, IRIS_DT_F8_E4M3, 1, 0); /* FP8: the BF16 copies */
    check_joint(75, 256, qkv, IRIS_DT_F8_E4M3, 1, 0);
    check_joint(130, 512, qkv, IRIS_DT_F8_E4M3, 0, 0); /* FP8 without copies: dequantized row chunks */
    if (!iris_cuda_set_fp8_mma(ops_cuda, 0)) IRIS_TEST_SKIP("W8A8 with block scales needs sm_90");
    check_joint(300, 512, qkv, IRIS_DT_F8_E4M3, 0, 1); /* W8A8 on the stored FP8 weights; 2 and 1 tail rows */
    check_joint(302, 1024, qkv, IRIS_DT_F8_E4M3, 0, 1);
    check_joint(1029, 512, qkv, IRIS_DT_F8_E4M3, 0, 1);
}

/* 4-bit weights: test_ops_int4.c (the ops), and the tiny int4 model below. */

/* The tiny int4 model on the CUDA engine: placed whole, and the image conversation's greedy tokens
 * are transformers' (fp32, on the weights dequantized by hand) up to the first reference step whose
 * top-2 margin is within 0.08, twice the bf16-vs-fp32 logit difference of transformers' own runs of
 * the same conversation on tiny-gqa (0.04, manifest.json); tiny-int4-sym's smallest margin there is
 * 0.104, so all 24 are compared. */
IRIS_TEST(gpu_ops_linear_int4_model) {
    OPS_BACKENDS();
    iris_model *m = NULL;
    iris_err err = {0};
    REQUIRE(iris_model_open("tests/fixtures/tiny/tiny-int4-asym/model", NULL, &m, &err) == 0);
    CHECKF(iris_model_place(m, ops_cuda, 0, &err) == 0, "%s", err.msg);
    CHECK(m->on == ops_cuda);
    CHECK(m->text.layers[0].q_proj.qzero != NULL && m->text.layers[0].q_proj.dtype == IRIS_DT_I4);
    iris_model_close(m);

    tiny_arr greedy;
    REQUIRE(tiny_load("tiny-int4-sym/image/greedy.npy", &greedy) == 0 && greedy.i64 && greedy.n == 24);
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = "tests/fixtures/tiny/tiny-int4-sym/model";
    o.device = "cuda";
    o.max_num_seqs = 4;
    o.gpu_memory_limit = (uint64_t)2 << 30;
    iris_engine *e = NULL;
    REQUIRE(iris_engine_open(&o, &e, &err) == 0);
    tiny_greedy_run g;
    CHECKF(tiny_image_greedy(e, greedy.i64, 24, 300000, &g, &err) == 0, "%s", err.msg);
    printf("  tiny-int4-sym / image on CUDA: %d of %d greedy tokens as transformers\n", g.prefix, g.n);
    CHECKF(g.n == 24 && g.prefix == 24, "%d of %d greedy tokens as transformers before the first difference", g.prefix,
           g.n);
    iris_engine_close(e);
    tiny_free(&greedy);
}

#endif
