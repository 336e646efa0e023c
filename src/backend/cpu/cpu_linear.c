/* cpu_linear.c: y = x · Wᵀ (+ bias) on the CPU.
 *
 * Few rows (decode): each pool worker takes its share of W's rows and dots
 * each with every x row — W is read once, memory-bound.  With AVX2 the row is
 * dequantized in registers (cpu_dot_avx2.c; IRIS_CPU_AVX2=0 at open turns it
 * off: the scalar reference path, same numbers) for BF16: 2x the scalar path
 * on the 2-core dev VM.  FP8 rows use per-block tables of their 256 values:
 * measured faster than the AVX2 bit decode (5.2 vs 3.2 GB/s of weights), so
 * FP8 takes the AVX2 kernel only in its own test, which keeps it exact.
 * Many rows (prefill, vision): W as fp32 (F32 with dense rows as it is, else
 * widened here in tiles of LIN_CHUNK rows, in parallel), each tile multiplied
 * with OpenBLAS sgemm, x's rows split across the pool, one single-threaded
 * sgemm a worker (the backend sets OpenBLAS to one thread: its own threads
 * spin in sched_yield between calls, which on the 2-core dev VM cost the
 * pool's other ops their second core — demo captions in one process 1.3x
 * faster with the pool's split).  Widening each BF16 weight once and keeping
 * it (checked by a CRC of its bytes each use) measured no faster here: the
 * CRC and sgemm packing from the colder fp32 copy cost what widening did. */
#include <cblas.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "pool.h"

#define LIN_CHUNK 1024
#define DOT_MAX_ROWS 8

typedef struct {
    const iris_tensor *x, *w;
    iris_tensor *y;
    int64_t r0;
    const float *tile; /* W's rows [r0, r0 + m) as fp32 */
    int simd;
    int64_t m;       /* the tile's rows */
    const float *bf; /* the bias as fp32, or NULL */
    iris_cpu_ctx *cc;
} lin_ctx;

/* FP8 rows: the 256 possible values of one 128x128 block, bf16(e4m3(code) · scale),
 * are tabulated once per block row, so widening is a table lookup. */
static void fp8_tables(const iris_tensor *w, int64_t rb, float *tab) {
    int64_t n_cb = (w->cols + w->block[1] - 1) / w->block[1];
    for (int64_t cb = 0; cb < n_cb; cb++) {
        float f = w->scale[rb * n_cb + cb];
        for (int k = 0; k < 256; k++) tab[cb * 256 + k] = iris_f32_round_bf16(iris_fp8_e4m3_table[k] * f);
    }
}

static void lin_dot(void *p, int64_t r0, int64_t r1) {
    lin_ctx *c = p;
    const iris_tensor *w = c->w;
    int64_t in = w->cols, n = c->x->rows, ldx = iris_tensor_ld(c->x), ldy = iris_tensor_ld(c->y);
    int fp8 = w->dtype == IRIS_DT_F8_E4M3;
    int64_t n_cb = fp8 ? (in + w->block[1] - 1) / w->block[1] : 0, cur_rb = -1;
    float *row = iris_cpu_scratch(c->cc, (size_t)in + (size_t)n_cb * 256);
    if (!row) return;
    float *tab = row + in;
    for (int64_t r = r0; r < r1; r++) {
        if (c->simd && !fp8 && iris_cpu_dot_row_avx2(w, r, c->x->data, (int)n, ldx, (float *)c->y->data + r, ldy) == 0) continue;
        if (fp8) {
            if (r / w->block[0] != cur_rb) fp8_tables(w, cur_rb = r / w->block[0], tab);
            const uint8_t *q = (const uint8_t *)w->data + r * iris_tensor_ld(w);
            int64_t bi = w->block[1];
            for (int64_t c0 = 0, cb = 0; c0 < in; c0 += bi, cb++) {
                const float *t = tab + cb * 256;
                int64_t c1 = c0 + bi < in ? c0 + bi : in;
                for (int64_t i = c0; i < c1; i++) row[i] = t[q[i]];
            }
        } else {
            iris_cpu_widen_row(w, r, row);
        }
        for (int64_t i = 0; i < n; i++) {
            const float *xi = (const float *)c->x->data + i * ldx;
            float acc[8] = {0};
            int64_t k = 0;
            for (; k + 8 <= in; k += 8)
                for (int u = 0; u < 8; u++) acc[u] += xi[k + u] * row[k + u];
            float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            for (; k < in; k++) s += xi[k] * row[k];
            ((float *)c->y->data)[i * ldy + r] = s;
        }
    }
}

static void lin_widen(void *p, int64_t r0, int64_t r1) {
    lin_ctx *c = p;
    const iris_tensor *w = c->w;
    for (int64_t r = r0; r < r1; r++) {
        if (c->simd && w->dtype == IRIS_DT_BF16)
            iris_cpu_widen_bf16_avx2((const uint16_t *)w->data + (c->r0 + r) * iris_tensor_ld(w), (float *)c->tile + r * w->cols, w->cols);
        else
            iris_cpu_widen_row(w, c->r0 + r, (float *)c->tile + r * w->cols);
    }
}

/* y[r] += b[r] over m: one rounding each, as the scalar loop (vectorized: y and b never overlap). */
static void add_bias(float *restrict y, const float *restrict b, int64_t m) {
    int64_t r = 0;
    for (; r + 4 <= m; r += 4) {
        __m128 v = _mm_add_ps(_mm_loadu_ps(y + r), _mm_loadu_ps(b + r));
        _mm_storeu_ps(y + r, v);
    }
    for (; r < m; r++) y[r] += b[r];
}

/* x's rows [i0, i1) times the tile's m rows of W into y's columns [r0, r0 + m). */
static void lin_gemm(void *p, int64_t i0, int64_t i1) {
    lin_ctx *c = p;
    int64_t in = c->w->cols, ldx = iris_tensor_ld(c->x), ldy = iris_tensor_ld(c->y);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(i1 - i0), (int)c->m, (int)in, 1.0f,
                (const float *)c->x->data + i0 * ldx, (int)ldx, c->tile, (int)in, 0.0f,
                (float *)c->y->data + i0 * ldy + c->r0, (int)ldy);
    if (c->bf)
        for (int64_t i = i0; i < i1; i++) add_bias((float *)c->y->data + i * ldy + c->r0, c->bf + c->r0, c->m);
}

int iris_cpu_linear(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias, iris_tensor *y) {
    int64_t out = w->rows, in = w->cols, n = x->rows;
    if (x->cols != in || y->cols != out || y->rows != n)
        return iris_cpu_fail(b, IRIS_EINVAL, "linear: x [%lld, %lld] · W[%lld, %lld]ᵀ into y [%lld, %lld]",
                             (long long)n, (long long)x->cols, (long long)out, (long long)in, (long long)y->rows,
                             (long long)y->cols);
    iris_cpu_ctx *cc = b->ctx;
    const float *bf = bias && bias->dtype == IRIS_DT_F32 ? bias->data : NULL;
    float *own_bf = NULL; /* the bias widened here (not F32) */
    if (bias && !bf) {
        if (!(own_bf = iris_cpu_buf(cc, sizeof(float) * (size_t)out))) return iris_cpu_fail(b, IRIS_ENOMEM, "out of memory");
        iris_cpu_widen_row(bias, 0, own_bf);
        bf = own_bf;
    }
    lin_ctx c = {.x = x, .w = w, .y = y, .cc = cc, .simd = cc->avx2};
    if (n <= DOT_MAX_ROWS) {
        int64_t n_cb = w->dtype == IRIS_DT_F8_E4M3 ? (in + w->block[1] - 1) / w->block[1] : 0;
        if (iris_cpu_scratch_reserve(cc, (size_t)in + (size_t)n_cb * 256)) {
            iris_cpu_buf_free(cc, own_bf);
            return iris_cpu_fail(b, IRIS_ENOMEM, "linear: out of memory for a row of %lld", (long long)in);
        }
        iris_pool_for(out, lin_dot, &c);
        int64_t ldy = iris_tensor_ld(y);
        for (int64_t i = 0; bf && i < n; i++) add_bias((float *)y->data + i * ldy, bf, out);
    } else {
        /* W's fp32 rows: the weight itself (F32, dense rows), else tiles widened here */
        const float *wf = w->dtype == IRIS_DT_F32 && iris_tensor_ld(w) == in ? w->data : NULL;
        int64_t rows = out < LIN_CHUNK ? out : LIN_CHUNK;
        float *tile = wf ? NULL : iris_cpu_buf(cc, (size_t)(rows * in) * sizeof(float));
        c.bf = bf;
        if (!wf && !tile) {
            iris_cpu_buf_free(cc, own_bf);
            return iris_cpu_fail(b, IRIS_ENOMEM, "linear: out of memory for a %lld x %lld tile", (long long)rows,
                                 (long long)in);
        }
        for (int64_t r0 = 0; r0 < out; r0 += rows) {
            int64_t m = out - r0 < rows ? out - r0 : rows;
            c.r0 = r0, c.m = m;
            if (wf) {
                c.tile = wf + r0 * in;
            } else {
                c.tile = tile;
                iris_pool_for(m, lin_widen, &c);
            }
            iris_pool_for(n, lin_gemm, &c); /* and the bias, where there is one */
        }
        iris_cpu_buf_free(cc, tile);
    }
    iris_cpu_buf_free(cc, own_bf);
    return 0;
}
