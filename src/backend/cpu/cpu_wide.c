/* cpu_wide.c: the CPU backend's widened weights — BF16 and F16 weights (and
 * biases) kept as fp32 after their first product of many rows, so sgemm reads
 * them as they are instead of each call widening them afresh (cpu_linear.c).
 *
 * Keyed by the view (data pointer, dtype, shape, row stride) and checked on
 * every use against CRC-32Cs of the weight's bytes, one per block of
 * IRIS_CPU_WIDE_BLOCK rows, taken when they were widened: a view over memory
 * that was freed and reused, or written in place, with the same pointer and
 * shape is widened again, never read stale.  A weight is kept from its second
 * use on (the first only notes it): one used once, as in a one-image run,
 * costs no copy, no page faults and no CRC.  The linear checks a weight's
 * blocks inside its sgemm job (each worker the blocks of its share, while the
 * product runs) and redoes the product after widening again when one differs
 * (iris_cpu_wide_check, iris_cpu_wide_refresh); a bias is checked whole
 * before use (iris_cpu_wide_get).  Entries are kept until the backend is
 * destroyed (a pointer handed out stays valid), IRIS_CPU_WIDE_BYTES in all at
 * most: a model over that has its first weights kept and the others widened
 * each call as before.  The fp32 values are the exact widening
 * (iris_cpu_widen_row's bits), so products are unchanged.  Entries are made
 * and widened again by the thread driving the backend only (backend.h: one at
 * a time); pool workers only read them. */
#include <nmmintrin.h>
#include <stdlib.h>

#include "cpu_internal.h"
#include "pool.h"

/* CRC-32C of the bytes of rows [r0, r1) of a view (cols 2-byte elements each) in four chains (8-byte
 * words round-robin: the crc32 instruction's latency hidden), each row's tail bytes into chain 0. */
__attribute__((target("sse4.2"))) static void rows_crc(const iris_tensor *w, int64_t r0, int64_t r1, uint32_t crc[4]) {
    uint64_t c[4] = {~0u, ~0u, ~0u, ~0u};
    size_t row_bytes = (size_t)w->cols * 2, ld_bytes = (size_t)iris_tensor_ld(w) * 2;
    int64_t rows = r1 - r0;
    if (ld_bytes == row_bytes) row_bytes *= (size_t)rows, rows = 1; /* contiguous: one run */
    for (int64_t r = 0; r < rows; r++) {
        const unsigned char *p = (const unsigned char *)w->data + (size_t)(r0 + r) * ld_bytes;
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

static int64_t block_end(const iris_tensor *w, int64_t b) {
    int64_t r1 = (b + 1) * IRIS_CPU_WIDE_BLOCK;
    return r1 < w->rows ? r1 : w->rows;
}

int iris_cpu_wide_check(const iris_cpu_wide *e, const iris_tensor *w, int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; b++) {
        uint32_t crc[4];
        rows_crc(w, b * IRIS_CPU_WIDE_BLOCK, block_end(w, b), crc);
        if (memcmp(crc, e->crc[b], sizeof crc)) return 0;
    }
    return 1;
}

typedef struct {
    const iris_tensor *w;
    iris_cpu_wide *e;
    int simd;
    int64_t b_off; /* the pool's items are blocks from this one */
} widen_ctx;

/* Blocks [b_off + i0, b_off + i1): widened into the entry, their CRCs taken. */
static void widen_blocks(void *p, int64_t i0, int64_t i1) {
    widen_ctx *c = p;
    const iris_tensor *w = c->w;
    int64_t b0 = c->b_off + i0, b1 = c->b_off + i1;
    for (int64_t r = b0 * IRIS_CPU_WIDE_BLOCK, r1 = block_end(w, b1 - 1); r < r1; r++) {
        if (c->simd && w->dtype == IRIS_DT_BF16)
            iris_cpu_widen_bf16_avx2((const uint16_t *)w->data + r * iris_tensor_ld(w), c->e->f + r * w->cols, w->cols);
        else
            iris_cpu_widen_row(w, r, c->e->f + r * w->cols);
    }
    for (int64_t b = b0; b < b1; b++) rows_crc(w, b * IRIS_CPU_WIDE_BLOCK, block_end(w, b), c->e->crc[b]);
}

void iris_cpu_wide_refresh(iris_cpu_ctx *c, iris_cpu_wide *e, const iris_tensor *w, int64_t b0, int64_t b1) {
    widen_ctx x = {w, e, c->avx2, b0};
    if ((block_end(w, b1 - 1) - b0 * IRIS_CPU_WIDE_BLOCK) * w->cols >= 16384) iris_pool_for(b1 - b0, widen_blocks, &x);
    else widen_blocks(&x, 0, b1 - b0);
    c->n_rewidened++;
}

static int same_view(const iris_cpu_wide *e, const iris_tensor *w) {
    return e->data == w->data && e->dtype == w->dtype && e->rows == w->rows && e->cols == w->cols &&
           e->ld == iris_tensor_ld(w);
}

iris_cpu_wide *iris_cpu_wide_find(iris_cpu_ctx *c, const iris_tensor *w) {
    if ((w->dtype != IRIS_DT_BF16 && w->dtype != IRIS_DT_F16) || w->rows <= 0 || w->cols <= 0) return NULL;
    int i = 0;
    while (i < c->n_wide && !same_view(&c->wide[i], w)) i++;
    iris_cpu_wide *e = &c->wide[i];
    if (i < c->n_wide && e->f) return e;
    if (i == c->n_wide) { /* first seen: only noted (a weight used once, as in a one-image run, costs nothing) */
        if (c->n_wide == IRIS_CPU_WIDE_SLOTS) return NULL;
        *e = (iris_cpu_wide){.data = w->data, .dtype = w->dtype, .rows = w->rows, .cols = w->cols,
                             .ld = iris_tensor_ld(w)};
        c->n_wide++;
        return NULL;
    }
    size_t bytes = sizeof(float) * (size_t)w->rows * (size_t)w->cols; /* seen before: kept from now on */
    if (c->wide_bytes + bytes > IRIS_CPU_WIDE_BYTES) return NULL;
    int64_t n_blk = (w->rows + IRIS_CPU_WIDE_BLOCK - 1) / IRIS_CPU_WIDE_BLOCK;
    float *f = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    uint32_t(*crc)[4] = malloc(sizeof *crc * (size_t)n_blk);
    if (!f || !crc) {
        free(f), free(crc);
        return NULL;
    }
    e->n_blk = n_blk, e->crc = crc, e->f = f;
    iris_cpu_wide_refresh(c, e, w, 0, n_blk);
    c->n_rewidened--; /* a first widening */
    c->wide_bytes += bytes;
    return e;
}

const float *iris_cpu_wide_get(iris_cpu_ctx *c, const iris_tensor *w) {
    iris_cpu_wide *e = iris_cpu_wide_find(c, w);
    if (e && !iris_cpu_wide_check(e, w, 0, e->n_blk)) iris_cpu_wide_refresh(c, e, w, 0, e->n_blk);
    return e ? e->f : NULL;
}

void iris_cpu_wide_free(iris_cpu_ctx *c) {
    for (int i = 0; i < c->n_wide; i++) free(c->wide[i].f), free(c->wide[i].crc);
    c->n_wide = 0;
    c->wide_bytes = 0;
}
