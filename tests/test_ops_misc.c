/* test_ops_misc.c: the CUDA row ops (put/get, embedding, set/add/get rows, interp4) and
 * get_topk checked
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
#include "backend/cuda/cuda_testing.h"

/* ---- rows, embedding, interp4 ---------------------------------------------------------------- */

/* put_f32 and get_f32 of more values than the conversion does on one thread (the thread pool's
 * split of a 1024x1024 image's pixel rows): every value rounded to bf16 as the host rounds it, each
 * in its place, and back exactly.  2.5 M values (three pieces through the staging buffer's halves,
 * a ragged end) and a 1 MP image's pixel rows and a few (seven pieces: each half refilled). */
static void check_put_get(int64_t n) {
    float *x = ops_rnd_vec(n, -300, 300), *back = malloc(sizeof(float) * (size_t)n);
    void *d = ops_dev_poison(n);
    CHECKF(iris_backend_put_f32(ops_cuda, d, x, (size_t)n) == 0, "%s", ops_cuda->err.msg);
    float *got = ops_dev_read_bf16(d, n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += got[i] != ops_bf16_val(ops_bf16_bits(x[i]));
    CHECKF(bad == 0, "put_f32: %lld of %lld values are not the input rounded to bf16", (long long)bad, (long long)n);
    CHECKF(iris_backend_get_f32(ops_cuda, back, d, (size_t)n) == 0, "%s", ops_cuda->err.msg);
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += back[i] != got[i];
    CHECKF(bad == 0, "get_f32: %lld of %lld values differ from the device's", (long long)bad, (long long)n);
    ops_cuda->free(ops_cuda, d);
    free(x), free(back), free(got);
}

IRIS_TEST(gpu_ops_put_get) {
    OPS_BACKENDS();
    check_put_get((5 << 19) + 37);
    check_put_get(4096 * 1536 + 5);
}

IRIS_TEST(gpu_ops_rows) {
    OPS_BACKENDS();
    int64_t tr = 97, cols = 72, n = 41;
    float *table = ops_rnd_vec(tr * cols, -1, 1), *x = ops_rnd_vec(n * cols, -1, 1);
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)n), *perm = malloc(sizeof(int32_t) * (size_t)tr);
    for (int64_t i = 0; i < tr; i++) perm[i] = (int32_t)i;
    for (int64_t i = tr - 1; i > 0; i--) {
        int64_t j = ops_rnd_u32() % (uint64_t)(i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int64_t i = 0; i < n; i++) idx[i] = perm[i]; /* distinct rows, so scatters do not collide */
    void *dt = ops_dev_bf16(table, tr * cols), *dx = ops_dev_bf16(x, n * cols), *di = ops_dev_copy(idx, sizeof(int32_t) * (size_t)n);
    float *ref = malloc(sizeof(float) * (size_t)(tr * cols));

    /* get_rows and embed */
    iris_tensor ct = ops_view(table, IRIS_DT_F32, tr, cols, 0), cy = ops_view(ref, IRIS_DT_F32, n, cols, 0);
    void *dy = ops_dev_poison(n * cols);
    iris_tensor gt = ops_view(dt, IRIS_DT_BF16, tr, cols, 0), gy = ops_view(dy, IRIS_DT_BF16, n, cols, 0);
    REQUIRE(ops_cpu->get_rows(ops_cpu, &ct, idx, (int)n, &cy) == 0);
    CHECKF(ops_cuda->get_rows(ops_cuda, &gt, di, (int)n, &gy) == 0, "%s", ops_cuda->err.msg);
    float *got = ops_dev_read_bf16(dy, n * cols);
    ops_compare("get_rows", got, cols, ref, cols, n, cols, 0, 0);
    free(got);
    REQUIRE(ops_cpu->embed(ops_cpu, &ct, idx, (int)n, &cy) == 0);
    CHECKF(ops_cuda->embed(ops_cuda, &gt, di, (int)n, &gy) == 0, "%s", ops_cuda->err.msg);
    got = ops_dev_read_bf16(dy, n * cols);
    ops_compare("embed", got, cols, ref, cols, n, cols, 0, 0);
    free(got);

    /* set_rows, add_rows into a copy of the table */
    for (int add = 0; add < 2; add++) {
        memcpy(ref, table, sizeof(float) * (size_t)(tr * cols));
        void *dtab = ops_dev_bf16(table, tr * cols);
        iris_tensor cT = ops_view(ref, IRIS_DT_F32, tr, cols, 0), cX = ops_view(x, IRIS_DT_F32, n, cols, 0);
        iris_tensor gT = ops_view(dtab, IRIS_DT_BF16, tr, cols, 0), gX = ops_view(dx, IRIS_DT_BF16, n, cols, 0);
        REQUIRE((add ? ops_cpu->add_rows(ops_cpu, &cT, idx, &cX) : ops_cpu->set_rows(ops_cpu, &cT, idx, &cX)) == 0);
        int rc = add ? ops_cuda->add_rows(ops_cuda, &gT, di, &gX) : ops_cuda->set_rows(ops_cuda, &gT, di, &gX);
        CHECKF(rc == 0, "%s", ops_cuda->err.msg);
        got = ops_dev_read_bf16(dtab, tr * cols);
        ops_compare(add ? "add_rows" : "set_rows", got, cols, ref, cols, tr, cols, add ? 4e-3f : 0, 0);
        free(got);
        ops_cuda->free(ops_cuda, dtab);
    }

    /* interp4 */
    int32_t *i4 = malloc(sizeof(int32_t) * (size_t)(4 * n));
    float *w4 = malloc(sizeof(float) * (size_t)(4 * n));
    for (int64_t i = 0; i < 4 * n; i++) i4[i] = (int32_t)(ops_rnd_u32() % (uint32_t)tr), w4[i] = ops_rnd_uniform(0, 1);
    void *di4 = ops_dev_copy(i4, sizeof(int32_t) * (size_t)(4 * n)), *dw4 = ops_dev_copy(w4, sizeof(float) * (size_t)(4 * n));
    REQUIRE(ops_cpu->interp4(ops_cpu, &ct, i4, w4, (int)n, &cy) == 0);
    ops_cuda->free(ops_cuda, dy);
    dy = ops_dev_poison(n * cols);
    gy = ops_view(dy, IRIS_DT_BF16, n, cols, 0);
    CHECKF(ops_cuda->interp4(ops_cuda, &gt, di4, dw4, (int)n, &gy) == 0, "%s", ops_cuda->err.msg);
    got = ops_dev_read_bf16(dy, n * cols);
    ops_compare("interp4", got, cols, ref, cols, n, cols, 4e-3f, 1e-4f);
    free(got);
    ops_cuda->free(ops_cuda, dt), ops_cuda->free(ops_cuda, dx), ops_cuda->free(ops_cuda, di), ops_cuda->free(ops_cuda, dy);
    ops_cuda->free(ops_cuda, di4), ops_cuda->free(ops_cuda, dw4);
    free(table), free(x), free(idx), free(perm), free(ref), free(i4), free(w4);
}


/* get_topk against a host selection over the same bf16 row: ids and values exactly, ties broken by
 * the lowest column, NaN as -inf; rows of Qwen's vocabulary and odd sizes, k from 1 to 64, rows
 * with many ties, -inf and NaN, and a batch larger than one group of the scratch. */
static void check_topk(int64_t rows, int64_t cols, int k, int ties, int64_t stride) {
    int64_t n = rows * cols;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        float v = ties ? ops_round_bf(8.0f + (float)(ops_rnd_u32() % 64) / 16.0f) : ops_round_bf(ops_rnd_uniform(-20.0f, 20.0f));
        uint32_t z = ops_rnd_u32() % 97;
        if (z == 0) v = -INFINITY;
        if (z == 1) v = NAN;
        x[i] = v;
    }
    void *d = ops_dev_bf16(x, n);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(rows * k));
    float *vals = malloc(sizeof(float) * (size_t)(rows * k));
    iris_tensor t = {.data = d, .dtype = IRIS_DT_BF16, .rows = rows, .cols = cols};
    REQUIRE(d && ids && vals);
    int rc = ops_cuda->get_topk(ops_cuda, &t, k, NULL, ids, vals);
    CHECKF(rc == 0, "get_topk %lldx%lld k %d: %s", (long long)rows, (long long)cols, k, ops_cuda->err.msg);
    int bad = 0;
    uint8_t *taken = calloc((size_t)cols, 1);
    for (int64_t r = 0; r < rows && !rc && !bad; r++) {
        if (r % stride && r < rows - 3) continue;   /* checked rows: every stride-th and the last 3 */
        const float *xr = x + r * cols;
        memset(taken, 0, (size_t)cols);
        for (int j = 0; j < k && !bad; j++) {
            int64_t best = -1;
            float bv = 0;
            for (int64_t c = 0; c < cols; c++) {
                if (taken[c]) continue;
                float v = isnan(xr[c]) ? -INFINITY : xr[c];
                if (best < 0 || v > bv) best = c, bv = v;
            }
            taken[best] = 1;
            int32_t gi = ids[r * k + j];
            float gv = vals[r * k + j];
            if (gi != best || !(gv == bv)) {
                CHECKF(0, "get_topk %lldx%lld k %d ties %d: row %lld #%d is %d (%g), want %lld (%g)", (long long)rows,
                       (long long)cols, k, ties, (long long)r, j, gi, gv, (long long)best, bv);
                bad = 1;
            }
        }
    }
    ops_cuda->free(ops_cuda, d);
    free(taken), free(x), free(ids), free(vals);
}

/* The staging buffer the candidates come back through is taken at open (4 MiB) and stays where it
 * is while a run's batches grow from 1 to 64 rows (freeing page-locked memory waits for the whole
 * device: a regrowth a batch size stalled the engine thread's launches). */
IRIS_TEST(gpu_ops_topk_staging_kept) {
    OPS_NEED_GPU();
    iris_err err = {0};
    iris_backend *gpu = NULL;
    REQUIRE(iris_backend_cuda_open(0, (size_t)256 << 20, &gpu, &err) == 0);
    size_t bytes = 0;
    const void *p0 = iris_cuda_staging(gpu, &bytes);
    CHECKF(p0 && bytes >= ((size_t)4 << 20), "staging buffer at open: %p, %zu bytes", p0, bytes);
    const int64_t cols = 151936, rows = 64;
    void *d = gpu->alloc(gpu, (size_t)(rows * cols) * 2);
    REQUIRE(d);
    void *zero = calloc((size_t)(rows * cols), 2);
    REQUIRE(zero && gpu->upload(gpu, d, zero, (size_t)(rows * cols) * 2) == 0);
    free(zero);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(rows * 64));
    float *vals = malloc(sizeof(float) * (size_t)(rows * 64));
    REQUIRE(ids && vals);
    for (int64_t n = 1; n <= rows; n++) {
        iris_tensor t = {.data = d, .dtype = IRIS_DT_BF16, .rows = n, .cols = cols};
        CHECKF(gpu->get_topk(gpu, &t, 64, NULL, ids, vals) == 0, "%s", gpu->err.msg);
        size_t now = 0;
        const void *p = iris_cuda_staging(gpu, &now);
        CHECKF(p == p0 && now == bytes, "%lld rows of 64 candidates: the staging buffer moved (%p, %zu bytes -> %p, %zu)",
               (long long)n, p0, bytes, p, now);
        if (p != p0) break;
    }
    free(ids), free(vals);
    gpu->free(gpu, d);
    gpu->destroy(gpu);
}

IRIS_TEST(gpu_ops_topk) {
    OPS_BACKENDS();
    check_topk(1, 151936, 1, 0, 1);
    check_topk(3, 151936, 28, 1, 1);
    check_topk(2, 151936, 64, 0, 1);
    check_topk(5, 4097, 9, 1, 1);
    check_topk(7, 77, 64, 1, 1);
    check_topk(4, 640, 12, 0, 1);
    check_topk(2, 1, 1, 0, 1);
    check_topk(64, 151936, 28, 1, 7);
    check_topk(450, 151936, 64, 1, 37);   /* more rows than one group of the scratch (~400 here) */
    iris_tensor t = {.data = NULL, .dtype = IRIS_DT_BF16, .rows = 1, .cols = 10};
    int32_t id[65];
    float v[65];
    CHECK(ops_cuda->get_topk(ops_cuda, &t, 65, NULL, id, v) == IRIS_EINVAL);
    CHECK(ops_cuda->get_topk(ops_cuda, &t, 11, NULL, id, v) == IRIS_EINVAL);
}

#endif
