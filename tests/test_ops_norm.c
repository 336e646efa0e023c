/* test_ops_norm.c: the CUDA norms, elementwise ops and rotary embedding checked
 * against the CPU backend (the numeric reference) on random inputs of odd sizes, with the
 * helpers of ops_util.h; part of build/iris-test-gpu (not of `make test`: CI has no GPU), run by
 * scripts/gpu-check.  Without a CUDA device every test is skipped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "ops_util.h"
#include "test.h"

#ifdef IRIS_CUDA
#include "backend/cuda/cuda_backend.h"

/* ---- norms and elementwise ---------------------------------------------------------------- */

static void check_norm(int64_t rows, int64_t cols, int64_t ld, int layer) {
    float *x = ops_rnd_vec(rows * ld, -2, 2), *w = ops_rnd_vec(cols, 0.5f, 1.5f), *bias = ops_rnd_vec(cols, -0.3f, 0.3f);
    float *ref = malloc(sizeof(float) * (size_t)(rows * cols));
    iris_tensor cx = ops_view(x, IRIS_DT_F32, rows, cols, ld), cw = ops_view(w, IRIS_DT_F32, 1, cols, 0),
                cb = ops_view(bias, IRIS_DT_F32, 1, cols, 0), cy = ops_view(ref, IRIS_DT_F32, rows, cols, 0);
    int rc = layer ? ops_cpu->layer_norm(ops_cpu, &cx, &cw, &cb, 1e-6f, &cy) : ops_cpu->rms_norm(ops_cpu, &cx, &cw, 1e-6f, &cy);
    REQUIRE(rc == 0);
    void *dx = ops_dev_bf16(x, rows * ld), *dw = ops_dev_bf16(w, cols), *db = ops_dev_bf16(bias, cols), *dy = ops_dev_poison(rows * cols);
    iris_tensor gx = ops_view(dx, IRIS_DT_BF16, rows, cols, ld), gw = ops_view(dw, IRIS_DT_BF16, 1, cols, 0),
                gb = ops_view(db, IRIS_DT_BF16, 1, cols, 0), gy = ops_view(dy, IRIS_DT_BF16, rows, cols, 0);
    rc = layer ? ops_cuda->layer_norm(ops_cuda, &gx, &gw, &gb, 1e-6f, &gy) : ops_cuda->rms_norm(ops_cuda, &gx, &gw, 1e-6f, &gy);
    CHECKF(rc == 0, "%s", ops_cuda->err.msg);
    float *got = ops_dev_read_bf16(dy, rows * cols);
    char what[96];
    snprintf(what, sizeof what, "%s [%lld,%lld] ld %lld", layer ? "layer_norm" : "rms_norm", (long long)rows,
             (long long)cols, (long long)ld);
    ops_compare(what, got, cols, ref, cols, rows, cols, layer ? 4e-3f : 8e-3f, 1e-3f);
    ops_cuda->free(ops_cuda, dx), ops_cuda->free(ops_cuda, dw), ops_cuda->free(ops_cuda, db), ops_cuda->free(ops_cuda, dy);
    free(x), free(w), free(bias), free(ref), free(got);
}

IRIS_TEST(gpu_ops_norm) {
    OPS_BACKENDS();
    check_norm(37, 136, 136, 0);
    check_norm(37, 131, 131, 0);
    check_norm(5 * 16, 128, 128, 0); /* q_norm: one row per head */
    check_norm(3, 2048, 2048 + 64, 0);
    check_norm(29, 1024, 1024, 1);
    check_norm(7, 131, 140, 1);
    check_norm(4, 4096, 4096, 1);
    check_norm(300, 1024, 1024, 1);        /* the vision encoder's rows: kept in registers */
    check_norm(257, 2048, 2048 + 64, 1);
}

enum { EW_ADD, EW_SILU_MUL, EW_GELU_TANH, EW_GELU_ERF };

static void check_elementwise(int op, int64_t rows, int64_t cols, int64_t ld) {
    float *y = ops_rnd_vec(rows * ld, -4, 4), *x = ops_rnd_vec(rows * ld, -4, 4);
    float *ref = malloc(sizeof(float) * (size_t)(rows * ld));
    memcpy(ref, y, sizeof(float) * (size_t)(rows * ld));
    iris_tensor cy = ops_view(ref, IRIS_DT_F32, rows, cols, ld), cx = ops_view(x, IRIS_DT_F32, rows, cols, ld);
    void *dy = ops_dev_bf16(y, rows * ld), *dx = ops_dev_bf16(x, rows * ld);
    iris_tensor gy = ops_view(dy, IRIS_DT_BF16, rows, cols, ld), gx = ops_view(dx, IRIS_DT_BF16, rows, cols, ld);
    const char *name = op == EW_ADD ? "add" : op == EW_SILU_MUL ? "silu_mul" : op == EW_GELU_TANH ? "gelu_tanh" : "gelu_erf";
    int rc1, rc2;
    switch (op) {
    case EW_ADD: rc1 = ops_cpu->add(ops_cpu, &cy, &cx), rc2 = ops_cuda->add(ops_cuda, &gy, &gx); break;
    case EW_SILU_MUL: rc1 = ops_cpu->silu_mul(ops_cpu, &cy, &cx), rc2 = ops_cuda->silu_mul(ops_cuda, &gy, &gx); break;
    case EW_GELU_TANH: rc1 = ops_cpu->gelu_tanh(ops_cpu, &cy), rc2 = ops_cuda->gelu_tanh(ops_cuda, &gy); break;
    default: rc1 = ops_cpu->gelu_erf(ops_cpu, &cy), rc2 = ops_cuda->gelu_erf(ops_cuda, &gy); break;
    }
    REQUIRE(rc1 == 0);
    CHECKF(rc2 == 0, "%s", ops_cuda->err.msg);
    float *got = ops_dev_read_bf16(dy, rows * ld);
    char what[96];
    snprintf(what, sizeof what, "%s [%lld,%lld] ld %lld", name, (long long)rows, (long long)cols, (long long)ld);
    /* silu_mul rounds silu(g) to bf16 first (as eager PyTorch): two roundings. */
    ops_compare(what, got, ld, ref, ld, rows, cols, op == EW_SILU_MUL ? 8e-3f : 4e-3f, 1e-4f);
    /* The padding between rows is untouched. */
    int pad_ok = 1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = cols; c < ld; c++) pad_ok &= got[r * ld + c] == y[r * ld + c];
    CHECKF(pad_ok, "%s wrote past the row's columns", name);
    ops_cuda->free(ops_cuda, dy), ops_cuda->free(ops_cuda, dx);
    free(y), free(x), free(ref), free(got);
}

IRIS_TEST(gpu_ops_elementwise) {
    OPS_BACKENDS();
    for (int op = 0; op < 4; op++) {
        check_elementwise(op, 19, 264, 264);
        check_elementwise(op, 7, 131, 131);
        check_elementwise(op, 5, 64, 80);
    }
}

/* ---- rope --------------------------------------------------------------------------------- */

static void check_rope(int64_t rows, int n_heads, int hd, int64_t ld, int n_pos_rows, int max_pos) {
    int half = hd / 2;
    float *x = ops_rnd_vec(rows * ld, -2, 2), *ref = malloc(sizeof(float) * (size_t)(rows * ld));
    memcpy(ref, x, sizeof(float) * (size_t)(rows * ld));
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)(3 * rows));
    for (int64_t i = 0; i < n_pos_rows * rows; i++) pos[i] = (int32_t)(ops_rnd_u32() % (uint32_t)max_pos);
    int dim_of[256];
    float inv[256];
    for (int j = 0; j < half; j++) {
        dim_of[j] = n_pos_rows == 3 ? (j % 3 == 1 && j < 60 ? 1 : j % 3 == 2 && j < 60 ? 2 : 0) : (j < half / 2 ? 0 : 1);
        inv[j] = 1.0f / powf(n_pos_rows == 3 ? 5e6f : 1e4f, (float)(2 * j) / (float)hd);
    }
    iris_tensor cx = ops_view(ref, IRIS_DT_F32, rows, (int64_t)n_heads * hd, ld);
    REQUIRE(ops_cpu->rope(ops_cpu, &cx, n_heads, hd, pos, (int)rows, dim_of, inv) == 0);
    void *dx = ops_dev_bf16(x, rows * ld), *dp = ops_dev_copy(pos, sizeof(int32_t) * (size_t)(n_pos_rows * rows));
    iris_tensor gx = ops_view(dx, IRIS_DT_BF16, rows, (int64_t)n_heads * hd, ld);
    int rc = ops_cuda->rope(ops_cuda, &gx, n_heads, hd, dp, (int)rows, dim_of, inv);
    CHECKF(rc == 0, "%s", ops_cuda->err.msg);
    float *got = ops_dev_read_bf16(dx, rows * ld);
    char what[96];
    snprintf(what, sizeof what, "rope [%lld, %d x %d] %d-D pos < %d", (long long)rows, n_heads, hd, n_pos_rows, max_pos);
    ops_compare(what, got, ld, ref, ld, rows, ld, 4e-3f, 1e-3f);
    ops_cuda->free(ops_cuda, dx), ops_cuda->free(ops_cuda, dp);
    free(x), free(ref), free(pos), free(got);
}

IRIS_TEST(gpu_ops_rope) {
    OPS_BACKENDS();
    check_rope(23, 5, 128, 5 * 128, 3, 40000);   /* text MRoPE */
    check_rope(41, 16, 64, 3 * 16 * 64, 2, 64);  /* vision: q inside the qkv row */
    check_rope(3, 2, 128, 2 * 128 + 8, 3, 262144);
    check_rope(530000, 1, 8, 8, 2, 64);          /* more row groups than blocks: the grid strides */
    check_rope(7, 3, 6, 3 * 6 + 1, 2, 64);       /* odd half, odd row width: the general kernel */
}

#endif
