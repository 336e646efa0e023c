/* cpu_wide.c: the CPU backend's widened weights — BF16 and F16 weights (and
 * biases) kept as fp32 after their first product of many rows, so sgemm reads
 * them as they are instead of each call widening them afresh (cpu_linear.c).
 *
 * Keyed by the view (data pointer, dtype, shape, row stride) and checked on
 * every use against a CRC-32C of the weight's bytes, taken when it was
 * widened: a view over memory that was freed and reused, or written in place,
 * with the same pointer and shape is widened again, never read stale (the
 * CRC reads 2 bytes a value where widening reads 2 and writes 4, and the
 * product then reads the fp32 rows from the cache instead of a fresh tile).
 * Entries are kept until the backend is destroyed (a pointer handed out stays
 * valid), IRIS_CPU_WIDE_BYTES in all at most: a model over that has its first weights kept and the others
 * widened each call as before.  The fp32 values are the exact widening
 * (iris_cpu_widen_row's bits), so products are unchanged.  Called by the
 * thread driving the backend only (backend.h: one at a time). */
#include <nmmintrin.h>
#include <stdlib.h>

#include "cpu_internal.h"
#include "pool.h"

/* CRC-32C of the bytes of rows [0, rows) of a view (cols elements each, es bytes an element) in four
 * chains (8-byte words round-robin: the crc32 instruction's latency hidden), each row's tail bytes
 * into chain 0. */
__attribute__((target("sse4.2"))) static void view_crc(const iris_tensor *w, size_t es, uint32_t crc[4]) {
    uint64_t c[4] = {~0u, ~0u, ~0u, ~0u};
    size_t row_bytes = (size_t)w->cols * es, ld_bytes = (size_t)iris_tensor_ld(w) * es;
    int64_t rows = w->rows;
    if (ld_bytes == row_bytes) row_bytes *= (size_t)rows, rows = 1; /* contiguous: one run */
    for (int64_t r = 0; r < rows; r++) {
        const unsigned char *p = (const unsigned char *)w->data + (size_t)r * ld_bytes;
        size_t i = 0;
        for (; i + 32 <= row_bytes; i += 32) {
            uint64_t u[4];
            memcpy(u, p + i, 32);
            for (int k = 0; k < 4; k++) c[k] = _mm_crc32_u64(c[k], u[k]);
        }
        for (; i < row_bytes; i++) c[0] = _mm_crc32_u8((uint32_t)c[0], p[i]);
    }
    for (int k = 0; k < 4; k++) crc[k] = (uint32_t)c[k];
}

typedef struct {
    const iris_tensor *w;
    float *dst;
    int simd;
} widen_ctx;

static void widen_rows(void *p, int64_t r0, int64_t r1) {
    widen_ctx *c = p;
    const iris_tensor *w = c->w;
    for (int64_t r = r0; r < r1; r++) {
        if (c->simd && w->dtype == IRIS_DT_BF16)
            iris_cpu_widen_bf16_avx2((const uint16_t *)w->data + r * iris_tensor_ld(w), c->dst + r * w->cols, w->cols);
        else
            iris_cpu_widen_row(w, r, c->dst + r * w->cols);
    }
}

static void widen_into(iris_cpu_ctx *c, const iris_tensor *w, float *dst) {
    widen_ctx x = {w, dst, c->avx2};
    if (w->rows * w->cols >= 16384) iris_pool_for(w->rows, widen_rows, &x);
    else widen_rows(&x, 0, w->rows);
}

static int same_view(const iris_cpu_wide *e, const iris_tensor *w) {
    return e->data == w->data && e->dtype == w->dtype && e->rows == w->rows && e->cols == w->cols &&
           e->ld == iris_tensor_ld(w);
}

const float *iris_cpu_wide_get(iris_cpu_ctx *c, const iris_tensor *w) {
    if ((w->dtype != IRIS_DT_BF16 && w->dtype != IRIS_DT_F16) || w->rows <= 0 || w->cols <= 0) return NULL;
    size_t bytes = sizeof(float) * (size_t)w->rows * (size_t)w->cols;
    int i = 0;
    while (i < c->n_wide && !same_view(&c->wide[i], w)) i++;
    uint32_t crc[4];
    if (i == c->n_wide && (c->n_wide == IRIS_CPU_WIDE_SLOTS || c->wide_bytes + bytes > IRIS_CPU_WIDE_BYTES)) return NULL;
    view_crc(w, 2, crc);
    iris_cpu_wide *e = &c->wide[i];
    if (i < c->n_wide) {
        if (memcmp(crc, e->crc, sizeof crc)) { /* written since: widened again */
            widen_into(c, w, e->f);
            memcpy(e->crc, crc, sizeof crc);
            c->n_rewidened++;
        }
        return e->f;
    }
    float *f = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!f) return NULL;
    widen_into(c, w, f);
    *e = (iris_cpu_wide){.data = w->data, .dtype = w->dtype, .rows = w->rows, .cols = w->cols,
                         .ld = iris_tensor_ld(w), .f = f};
    memcpy(e->crc, crc, sizeof crc);
    c->n_wide++;
    c->wide_bytes += bytes;
    return f;
}

void iris_cpu_wide_free(iris_cpu_ctx *c) {
    for (int i = 0; i < c->n_wide; i++) free(c->wide[i].f);
    c->n_wide = 0;
    c->wide_bytes = 0;
}
