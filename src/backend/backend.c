/* backend.c: what the model code shares on top of any backend — moving fp32
 * host rows in and out of the backend's activation dtype, and placing weights
 * in its memory. */
#include "backend.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "pool.h"

static uint16_t f32_to_bf16(float x) { /* round to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

typedef struct conv_job {
    int widen;                  /* 1: bf16 -> fp32; 0: fp32 -> bf16 */
    const void *src;
    void *dst;
} conv_job;

static void conv_range(void *ctx, int64_t a, int64_t e) {
    const conv_job *j = ctx;
    if (j->widen) {
        const uint16_t *h = j->src;
        float *f = j->dst;
        for (int64_t i = a; i < e; i++) { /* bf16 is the top half of the float */
            uint32_t u = (uint32_t)h[i] << 16;
            memcpy(&f[i], &u, 4);
        }
    } else {
        const float *f = j->src;
        uint16_t *h = j->dst;
        for (int64_t i = a; i < e; i++) h[i] = f32_to_bf16(f[i]);
    }
}

static void convert(int widen, void *dst, const void *src, size_t n, int pool) {
    conv_job j = {widen, src, dst};
    if (pool) iris_pool_for((int64_t)n, conv_range, &j);
    else conv_range(&j, 0, (int64_t)n);
}

void iris_backend_f32_to_bf16(uint16_t *dst, const float *src, size_t n, int pool) { convert(0, dst, src, n, pool); }
void iris_backend_bf16_to_f32(float *dst, const uint16_t *src, size_t n, int pool) { convert(1, dst, src, n, pool); }

int iris_backend_put_f32(iris_backend *b, void *dst, const float *src, size_t n) {
    if (b->act == IRIS_DT_F32) return b->upload(b, dst, src, n * 4);
    if (b->put_f32) return b->put_f32(b, dst, src, n);
    uint16_t *tmp = malloc(n * 2 + 2);
    if (!tmp) return IRIS_ENOMEM;
    iris_backend_f32_to_bf16(tmp, src, n, n >= IRIS_CONV_POOL_MIN);
    int rc = b->upload(b, dst, tmp, n * 2);
    free(tmp);
    return rc;
}

int iris_backend_get_f32(iris_backend *b, float *dst, const void *src, size_t n) {
    if (b->act == IRIS_DT_F32) return b->download(b, dst, src, n * 4);
    if (b->get_f32) return b->get_f32(b, dst, src, n);
    uint16_t *tmp = malloc(n * 2 + 2);
    if (!tmp) return IRIS_ENOMEM;
    int rc = b->download(b, tmp, src, n * 2);
    if (!rc) iris_backend_bf16_to_f32(dst, tmp, n, n >= IRIS_CONV_POOL_MIN);
    free(tmp);
    return rc;
}

/* An I4 weight's words, scales and zero points into b's memory. */
static int place_i4(iris_backend *b, iris_tensor *w, iris_err *err) {
    int64_t ng = w->cols / w->group;
    size_t nq = (size_t)(w->rows * w->cols / 2), ns = (size_t)(w->rows * ng) * iris_dtype_size(w->qscale_dtype),
           nz = w->qzero ? (size_t)(((w->rows + 7) / 8) * ng) * 4 : 0;
    void *q = b->alloc(b, nq), *s = q ? b->alloc(b, ns) : NULL, *z = s && nz ? b->alloc(b, nz) : NULL;
    if (!q || !s || (nz && !z) || b->upload(b, q, w->data, nq) || b->upload(b, s, w->qscale, ns) ||
        (nz && b->upload(b, z, w->qzero, nz)))
        return iris_err_set(err, IRIS_ENOMEM, "%s: cannot place a %zu-byte 4-bit weight: %s", b->name, nq + ns + nz,
                            b->err.msg);
    w->data = q;
    w->qscale = s;
    w->qzero = z;
    return IRIS_OK;
}

static int place_data(iris_backend *b, iris_tensor *w, iris_err *err) {
    size_t n = (size_t)(w->rows * iris_tensor_ld(w)) * iris_dtype_size(w->dtype);
    void *d = b->alloc(b, n);
    if (!d || b->upload(b, d, w->data, n))
        return iris_err_set(err, IRIS_ENOMEM, "%s: cannot place a %zu-byte weight: %s", b->name, n, b->err.msg);
    w->data = d;
    return IRIS_OK;
}

static int place_scales(iris_backend *b, iris_tensor *w, iris_err *err) {
    if (w->dtype != IRIS_DT_F8_E4M3 || !w->scale) return IRIS_OK;
    size_t sn = (size_t)(((w->rows + w->block[0] - 1) / w->block[0]) * ((w->cols + w->block[1] - 1) / w->block[1])) *
                sizeof(float);
    float *s = b->alloc(b, sn);
    if (!s || b->upload(b, s, w->scale, sn))
        return iris_err_set(err, IRIS_ENOMEM, "%s: cannot place %zu bytes of FP8 scales", b->name, sn);
    w->scale = s;
    return IRIS_OK;
}

int iris_backend_place(iris_backend *b, iris_tensor *w, iris_err *err) {
    if (w->dtype == IRIS_DT_I4) return place_i4(b, w, err);
    int rc = place_data(b, w, err);
    return rc ? rc : place_scales(b, w, err);
}

int iris_backend_place_group(iris_backend *b, iris_tensor *const *ws, int n, iris_err *err) {
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) rc = ws[i]->dtype == IRIS_DT_I4 ? place_i4(b, ws[i], err) : place_data(b, ws[i], err);
    for (int i = 0; i < n && !rc; i++) rc = ws[i]->dtype == IRIS_DT_I4 ? 0 : place_scales(b, ws[i], err);
    return rc;
}
