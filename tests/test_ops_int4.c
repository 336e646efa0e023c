/* test_ops_int4.c: the CUDA 4-bit (I4, W4A16) linears checked against the CPU backend: the
 * tensor-core GEMV of cuda_gemv_i4.cu (1-16 tokens; a linear with or without bias, the q/k/v
 * launch, gate/up with SiLU·mul), the per-row reference GEMV, and the dequantized cuBLASLt path,
 * for groups of 32, 64 and 128, symmetric and zero-point weights, BF16, F16 and F32 scales and odd
 * shapes (rows not a multiple of 16, columns not a multiple of 128).  Random inputs within the
 * tolerance of the other linears; one-hot inputs, whose products are the dequantized weights
 * themselves, bit for bit (the dequantization's arithmetic, nibble order and the mma's permuted k
 * index), also under every split of the columns over deep rows (gpu_ops_linear_int4_splits).
 * Part of build/iris-test-gpu; without a CUDA device every test is skipped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "ops_util.h"
#include "test.h"

#ifdef IRIS_CUDA
#include "backend/cuda/cuda_testing.h"

/* A random I4 weight in host memory (h) and its placed copy (d). */
typedef struct i4_weight {
    iris_tensor h, d;
} i4_weight;

static uint16_t f16_bits(float f) { /* |f| in the normal range of f16, rounded toward zero */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000u, e = (u >> 23) & 255u, m = (u >> 13) & 1023u;
    return (uint16_t)(s | ((e - 112) << 10) | m);
}

static void i4_make(i4_weight *w, int64_t out, int64_t in, int group, int asym, iris_dtype sdt) {
    int64_t ng = in / group, zr = (out + 7) / 8, es = sdt == IRIS_DT_F32 ? 4 : 2;
    uint32_t *q = malloc(sizeof(uint32_t) * (size_t)(out * in / 8));
    uint32_t *z = asym ? malloc(sizeof(uint32_t) * (size_t)(zr * ng)) : NULL;
    unsigned char *sc = malloc((size_t)(es * out * ng));
    for (int64_t i = 0; i < out * in / 8; i++) q[i] = ops_rnd_u32();
    for (int64_t i = 0; asym && i < zr * ng; i++) z[i] = ops_rnd_u32();
    for (int64_t i = 0; i < out * ng; i++) {
        /* magnitudes 0.002-0.02, either sign (the products' -0 and rounding both ways) */
        float f = ops_rnd_uniform(0.002f, 0.02f) * (ops_rnd_u32() & 1 ? -1.0f : 1.0f);
        if (sdt == IRIS_DT_BF16) {
            uint16_t v = ops_bf16_bits(f);
            memcpy(sc + 2 * i, &v, 2);
        } else if (sdt == IRIS_DT_F16) {
            uint16_t v = f16_bits(f);
            memcpy(sc + 2 * i, &v, 2);
        } else {
            memcpy(sc + 4 * i, &f, 4);
        }
    }
    memset(w, 0, sizeof *w);
    w->h = (iris_tensor){.data = q, .dtype = IRIS_DT_I4, .rows = out, .cols = in, .qscale = sc, .qzero = z,
                         .qscale_dtype = sdt, .group = group};
    w->d = w->h;
    iris_err err = {0};
    CHECKF(iris_backend_place(ops_cuda, &w->d, &err) == 0, "%s", err.msg);
}

static void i4_free(i4_weight *w) {
    ops_cuda->free(ops_cuda, w->d.data);
    ops_cuda->free(ops_cuda, (void *)w->d.qscale);
    ops_cuda->free(ops_cuda, (void *)w->d.qzero);
    free(w->h.data), free((void *)w->h.qscale), free((void *)w->h.qzero);
}

/* x [n, in] on the host (fp32, bf16 values): random in [-1, 1], or one-hot (token t: 1 at column
 * (t · 37 + 5) mod in, the last column for the last token). */
static float *i4_x(int64_t n, int64_t in, int onehot) {
    if (!onehot) { /* values the GPU's bf16 x holds exactly, so both sides multiply the same numbers */
        float *x = ops_rnd_vec(n * in, -1, 1);
        for (int64_t i = 0; i < n * in; i++) x[i] = ops_round_bf(x[i]);
        return x;
    }
    float *x = calloc((size_t)(n * in), sizeof(float));
    for (int64_t t = 0; t < n; t++) x[t * in + (t == n - 1 ? in - 1 : (t * 37 + 5) % in)] = 1.0f;
    return x;
}

static const char *sdt_name(iris_dtype d) { return d == IRIS_DT_BF16 ? "bf16" : d == IRIS_DT_F16 ? "f16" : "f32"; }

/* One linear y = x · Wᵀ (+ bias) on the GPU (the tensor-core GEMV, or with ref the per-row one)
 * against the CPU: within the other linears' tolerance, or bit for bit for one-hot x.  expect_mma:
 * the tensor-core GEMV must have run (1), must not have (0), or either (-1). */
static void check_i4(int64_t n, int64_t in, int64_t out, int group, int asym, iris_dtype sdt, int bias, int onehot,
                     int ref, int expect_mma) {
    i4_weight w;
    i4_make(&w, out, in, group, asym, sdt);
    float *x = i4_x(n, in, onehot), *bv = bias ? ops_rnd_vec(out, -0.5f, 0.5f) : NULL;
    float *cy = malloc(sizeof(float) * (size_t)(n * out));
    iris_tensor cx = ops_view(x, IRIS_DT_F32, n, in, 0), cb = ops_view(bv, IRIS_DT_F32, 1, out, 0),
                cyv = ops_view(cy, IRIS_DT_F32, n, out, 0);
    REQUIRE(ops_cpu->linear(ops_cpu, &cx, &w.h, bias ? &cb : NULL, &cyv) == 0);
    void *dx = ops_dev_bf16(x, n * in), *dy = ops_dev_poison(n * out), *db = bias ? ops_dev_bf16(bv, out) : NULL;
    iris_tensor gx = ops_view(dx, IRIS_DT_BF16, n, in, 0), gy = ops_view(dy, IRIS_DT_BF16, n, out, 0),
                gb = ops_view(db, IRIS_DT_BF16, 1, out, 0);
    iris_cuda_set_i4_ref(ops_cuda, ref);
    int runs = iris_cuda_i4_gemv_runs(ops_cuda);
    int rc = ops_cuda->linear(ops_cuda, &gx, &w.d, bias ? &gb : NULL, &gy);
    iris_cuda_set_i4_ref(ops_cuda, 0);
    CHECKF(rc == 0, "cuda linear (4-bit): %s", ops_cuda->err.msg);
    int ran = iris_cuda_i4_gemv_runs(ops_cuda) - runs;
    char what[160];
    snprintf(what, sizeof what, "%s n=%lld [%lld,%lld] g%d%s %s%s%s", ref ? "ref" : ran ? "mma" : "dequant", (long long)n,
             (long long)out, (long long)in, group, asym ? " asym" : "", sdt_name(sdt), bias ? " +bias" : "",
             onehot ? " one-hot" : "");
    CHECKF(expect_mma < 0 || ran == expect_mma, "%s: the tensor-core GEMV ran %d times, expected %d", what, ran, expect_mma);
    float *got = ops_dev_read_bf16(dy, n * out);
    if (onehot) ops_compare(what, got, out, cy, out, n, out, 0, 0);
    else ops_compare(what, got, out, cy, out, n, out, 4e-3f, 2e-3f);
    i4_free(&w);
    ops_cuda->free(ops_cuda, dx), ops_cuda->free(ops_cuda, dy), ops_cuda->free(ops_cuda, db);
    free(x), free(bv), free(cy), free(got);
}

IRIS_TEST(gpu_ops_linear_int4) {
    OPS_BACKENDS();
    /* every group, symmetry and scale dtype, 1-16 tokens, on odd shapes: 416 columns (3 whole
     * super-steps of 128 and one of 32), 77 and 200 rows (partial 16-row tiles, zero points padded) */
    const int groups[3] = {32, 64, 128};
    const iris_dtype sdts[3] = {IRIS_DT_BF16, IRIS_DT_F16, IRIS_DT_F32};
    for (int gi = 0; gi < 3; gi++)
        for (int asym = 0; asym < 2; asym++)
            for (int si = 0; si < 3; si++) {
                int64_t in = groups[gi] == 32 ? 416 : groups[gi] == 64 ? 448 : 640;
                check_i4(1 + (gi * 6 + asym * 3 + si) % 16, in, 77, groups[gi], asym, sdts[si], 0, 0, 0, 1);
                check_i4(16, in, 200, groups[gi], asym, sdts[si], 0, 1, 0, 1);
            }
    for (int n = 1; n <= 16; n++) check_i4(n, 4096, 96 + n, 128, n & 1, IRIS_DT_BF16, n % 3 == 0, 0, 0, 1);
    /* one-hot rows: the dequantized weights bit for bit, every token count and path */
    for (int n = 1; n <= 16; n++) check_i4(n, 288, 40, 32, n & 1, n % 3 == 0 ? IRIS_DT_F16 : IRIS_DT_BF16, 0, 1, 0, 1);
    check_i4(5, 256, 33, 64, 1, IRIS_DT_F32, 0, 1, 0, 1);
    check_i4(12, 1024, 48, 128, 0, IRIS_DT_BF16, 0, 1, 0, 1);
    check_i4(17, 416, 70, 32, 1, IRIS_DT_BF16, 0, 1, 0, 2); /* launches of 16 tokens */
    check_i4(64, 640, 33, 128, 0, IRIS_DT_F16, 0, 1, 0, 4);
    check_i4(65, 416, 70, 32, 1, IRIS_DT_BF16, 0, 1, 0, 0); /* dequantized tiles, bit for bit */
    iris_cuda_set_i4_rows(ops_cuda, 16);
    check_i4(40, 640, 33, 128, 0, IRIS_DT_F16, 0, 1, 0, 0);
    check_i4(24, 448, 65, 64, 1, IRIS_DT_F32, 0, 1, 0, 0);
    iris_cuda_set_i4_rows(ops_cuda, 0);
    /* the reference GEMV (and its fallback past 8 tokens), and shapes the tensor-core one leaves to it */
    check_i4(1, 256, 77, 32, 0, IRIS_DT_BF16, 0, 0, 1, 0);
    check_i4(3, 512, 130, 64, 1, IRIS_DT_BF16, 1, 0, 1, 0);
    check_i4(8, 4096, 96, 128, 1, IRIS_DT_F16, 0, 1, 1, 0);
    check_i4(12, 384, 50, 128, 0, IRIS_DT_BF16, 0, 0, 1, 0);
    check_i4(4, 96, 40, 16, 1, IRIS_DT_BF16, 1, 0, 0, 0);  /* group 16: per-row GEMV */
    check_i4(2, 64, 24, 8, 0, IRIS_DT_F32, 0, 1, 0, 0);
    check_i4(20, 96, 40, 16, 1, IRIS_DT_BF16, 0, 1, 0, 0); /* group 16, 20 rows: the per-word dequantization */
    /* every split of the columns (warps a CTA, normally the launch's rule) */
    for (int kw = 1; kw <= 8; kw *= 2) {
        iris_cuda_set_i4_warps(ops_cuda, kw);
        check_i4(kw + 2, 1440, 50, 32, 1, IRIS_DT_BF16, 1, 0, 0, 1);
        check_i4(9, 1184, 30, 32, kw & 1, IRIS_DT_F16, 0, 1, 0, 1);
    }
    iris_cuda_set_i4_warps(ops_cuda, 0);
    /* up to I4_GEMV_ROWS tokens through the GEMV: launches of 16 tokens */
    check_i4(40, 448, 70, 64, 1, IRIS_DT_BF16, 1, 0, 0, 3);
    check_i4(33, 416, 33, 32, 0, IRIS_DT_F16, 0, 1, 0, 3);
    check_i4(64, 2048, 300, 32, 1, IRIS_DT_BF16, 0, 0, 0, 4);
    /* larger batches (fewer where iris_cuda_set_i4_rows says): dequantized tiles through cuBLASLt */
    check_i4(9, 384, 200, 128, 0, IRIS_DT_BF16, 1, 0, 1, 0);
    check_i4(70, 2048, 300, 32, 1, IRIS_DT_BF16, 0, 0, 0, 0);
    iris_cuda_set_i4_rows(ops_cuda, 16);
    check_i4(33, 640, 130, 128, 1, IRIS_DT_F32, 1, 0, 0, 0);
    iris_cuda_set_i4_rows(ops_cuda, 0);
}

/* The fused decode launches on I4 weights: q/k/v in one (linear_n, three widths) and gate/up with
 * SiLU·mul (linear_swiglu) against the CPU's linears and silu_mul; one-hot x for linear_n bit for bit. */
static void check_i4_fused(int64_t n, int64_t in, const int64_t *outs, int group, int asym, iris_dtype sdt, int onehot) {
    i4_weight w[3], wu;
    float *x = i4_x(n, in, onehot), *cy[3], *cu = malloc(sizeof(float) * (size_t)(n * outs[0]));
    iris_tensor cx = ops_view(x, IRIS_DT_F32, n, in, 0), gy[3], cyv[3];
    void *dx = ops_dev_bf16(x, n * in);
    iris_tensor gx = ops_view(dx, IRIS_DT_BF16, n, in, 0);
    const iris_tensor *ws[3];
    iris_tensor *ys[3];
    for (int i = 0; i < 3; i++) {
        i4_make(&w[i], outs[i], in, group, asym, sdt);
        cy[i] = malloc(sizeof(float) * (size_t)(n * outs[i]));
        cyv[i] = ops_view(cy[i], IRIS_DT_F32, n, outs[i], 0);
        REQUIRE(ops_cpu->linear(ops_cpu, &cx, &w[i].h, NULL, &cyv[i]) == 0);
        gy[i] = ops_view(ops_dev_poison(n * outs[i]), IRIS_DT_BF16, n, outs[i], 0);
        ws[i] = &w[i].d, ys[i] = &gy[i];
    }
    REQUIRE(ops_cuda->linear_n && ops_cuda->linear_swiglu);
    char what[160];
    int runs = iris_cuda_i4_gemv_runs(ops_cuda);
    CHECKF(iris_backend_linear_n(ops_cuda, &gx, 3, ws, ys, NULL) == 0, "%s", ops_cuda->err.msg);
    CHECKF(iris_cuda_i4_gemv_runs(ops_cuda) == runs + (n + 15) / 16, "linear_n: a launch of the 4-bit GEMV a 16 tokens");
    for (int i = 0; i < 3; i++) {
        float *got = ops_dev_read_bf16(gy[i].data, n * outs[i]);
        snprintf(what, sizeof what, "linear_n n=%lld w%d [%lld,%lld] g%d%s %s%s", (long long)n, i, (long long)outs[i],
                 (long long)in, group, asym ? " asym" : "", sdt_name(sdt), onehot ? " one-hot" : "");
        ops_compare(what, got, outs[i], cy[i], outs[i], n, outs[i], onehot ? 0 : 4e-3f, onehot ? 0 : 2e-3f);
        free(got);
    }
    /* gate = weight 0, up = a fresh weight of its shape; the CPU's silu_mul rounds as the GPU's */
    i4_make(&wu, outs[0], in, group, asym, sdt);
    iris_tensor cuv = ops_view(cu, IRIS_DT_F32, n, outs[0], 0);
    REQUIRE(ops_cpu->linear(ops_cpu, &cx, &wu.h, NULL, &cuv) == 0);
    for (int64_t i = 0; i < n * outs[0]; i++) { /* the GPU's roundings: bf16 gate and up, bf16 silu(gate) */
        float g = ops_round_bf(cy[0][i]), u = ops_round_bf(cu[i]);
        cy[0][i] = ops_round_bf(g / (1.0f + expf(-g))) * u;
    }
    iris_tensor u = ops_view(ops_dev_poison(n * outs[0]), IRIS_DT_BF16, n, outs[0], 0);
    runs = iris_cuda_i4_gemv_runs(ops_cuda);
    CHECKF(iris_backend_linear_swiglu(ops_cuda, &gx, &w[0].d, &wu.d, &gy[0], &u, NULL) == 0, "%s", ops_cuda->err.msg);
    CHECKF(iris_cuda_i4_gemv_runs(ops_cuda) == runs + (n + 15) / 16, "linear_swiglu: a launch of the 4-bit GEMV a 16 tokens");
    float *got = ops_dev_read_bf16(gy[0].data, n * outs[0]);
    snprintf(what, sizeof what, "linear_swiglu n=%lld [%lld,%lld] g%d%s %s%s", (long long)n, (long long)outs[0],
             (long long)in, group, asym ? " asym" : "", sdt_name(sdt), onehot ? " one-hot" : "");
    /* one-hot: gate and up exact, so the silu·mul of the same bf16 values (expf may differ by an ulp) */
    ops_compare(what, got, outs[0], cy[0], outs[0], n, outs[0], onehot ? 1e-2f : 2e-2f, onehot ? 0 : 4e-3f);
    free(got);
    for (int i = 0; i < 3; i++) i4_free(&w[i]), ops_cuda->free(ops_cuda, gy[i].data), free(cy[i]);
    i4_free(&wu);
    ops_cuda->free(ops_cuda, u.data), ops_cuda->free(ops_cuda, dx);
    free(x), free(cu);
}

IRIS_TEST(gpu_ops_linear_int4_fused) {
    OPS_BACKENDS();
    const int64_t qkv[3] = {160, 40, 40}, odd[3] = {77, 21, 21}, wide[3] = {512, 128, 128};
    check_i4_fused(1, 4096, qkv, 128, 0, IRIS_DT_BF16, 0);
    check_i4_fused(4, 4096, wide, 128, 1, IRIS_DT_BF16, 0);
    check_i4_fused(8, 416, odd, 32, 1, IRIS_DT_F16, 0);
    check_i4_fused(13, 448, qkv, 64, 0, IRIS_DT_F32, 0);
    check_i4_fused(16, 1024, odd, 128, 1, IRIS_DT_BF16, 0);
    check_i4_fused(3, 288, odd, 32, 1, IRIS_DT_BF16, 1);
    check_i4_fused(11, 640, qkv, 128, 0, IRIS_DT_F16, 1);
    check_i4_fused(40, 1024, odd, 64, 1, IRIS_DT_BF16, 0); /* launches of 16 tokens */
    check_i4_fused(64, 448, qkv, 32, 0, IRIS_DT_BF16, 1);
}

/* Every split of the columns (warps a CTA: the rule, 1, 2, 4, 8) over columns deep enough that each
 * warp refills its slots several times (32 and 96 super-steps): one-hot x bit for bit, random x
 * within tolerance, a linear (+bias), q/k/v and gate/up, 1-16 tokens. */
IRIS_TEST(gpu_ops_linear_int4_splits) {
    OPS_BACKENDS();
    const int64_t qkv[3] = {160, 40, 40}, wide[3] = {300, 44, 44};
    const int kws[5] = {0, 1, 2, 4, 8};
    for (int ki = 0; ki < 5; ki++) {
        iris_cuda_set_i4_warps(ops_cuda, kws[ki]);
        for (int n = 1; n <= 16; n *= 2) {
            check_i4(n, 4096, 77, 128, n & 1, IRIS_DT_BF16, n == 2, 0, 0, 1);
            check_i4(n, 12288, 40, 128, 0, n == 4 ? IRIS_DT_F16 : IRIS_DT_BF16, 0, 1, 0, 1);
            check_i4(n < 16 ? n + 1 : 15, 12288, 33, 32, 1, IRIS_DT_F32, 1, 0, 0, 1);
        }
        check_i4_fused(1, 4096, qkv, 128, 0, IRIS_DT_BF16, 1);
        check_i4_fused(8, 12288, wide, 64, 1, IRIS_DT_BF16, 0);
        check_i4_fused(16, 4096, wide, 128, 0, IRIS_DT_F16, 0);
    }
    iris_cuda_set_i4_warps(ops_cuda, 0);
}

#endif
