/* cpu_attn.c: attention on the CPU — causal over the paged KV cache (text)
 * and bidirectional within segments (vision).  fp32 scores and softmax; work
 * is split over (row, head) pairs on the pool; with AVX2 the text rows' dot
 * products and value sums take eight lanes with FMA.  The cache is F32, or F8_E4M3
 * (--kv-cache-dtype fp8: each value's e4m3 code, scale 1, saturating at
 * +-448, written by kv_write and widened exactly on read).  Vision
 * attention takes eight rows of a head at once where the CPU has AVX2
 * (seg_tile_avx2: FMA, a vector exp; each row's numbers its own, whatever
 * tile it falls in), sixteen where it also has AVX-512F (seg_tile_avx512:
 * the same instructions lane for lane, so the same bits, in half as many),
 * the scalar rows (seg_row) where it has neither.  Scores and tiles live in
 * per-pool-worker scratch (cpu_internal.h). */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_avx2.h"
#include "cpu_internal.h"
#include "dtype.h"
#include "pool.h"

#define KV_BLOCK 16 /* IRIS_KV_BLOCK; model/text.h */

/* Head kvh of cache row j (through the block table) as fp32: a pointer into an F32 cache, or
 * the widened FP8 codes in tmp[hd]. */
static const float *kv_head(const iris_kv_layer *kv, const void *base, const int32_t *bt, int j, int kvh, float *tmp) {
    size_t row = (size_t)(kv->n_kv_heads * kv->head_dim);
    size_t off = ((size_t)bt[j / KV_BLOCK] * KV_BLOCK + (size_t)(j % KV_BLOCK)) * row + (size_t)kvh * kv->head_dim;
    if (kv->dtype == IRIS_DT_F32) return (const float *)base + off;
    const uint8_t *q = (const uint8_t *)base + off;
    for (int e = 0; e < kv->head_dim; e++) tmp[e] = iris_fp8_e4m3_table[q[e]];
    return tmp;
}

int iris_cpu_kv_write(iris_backend *b, iris_kv_layer *kv, const iris_tensor *k, const iris_tensor *v,
                      const iris_attn_meta *meta) {
    size_t row = (size_t)(kv->n_kv_heads * kv->head_dim);
    if (kv->dtype != IRIS_DT_F32 && kv->dtype != IRIS_DT_F8_E4M3)
        return iris_cpu_fail(b, IRIS_EUNSUPPORTED, "kv_write: cache dtype %s (F32 or F8_E4M3)", iris_dtype_name(kv->dtype));
    for (int r = 0; r < meta->n_rows; r++) {
        int32_t s = meta->slot[r];
        if (s < 0 || s >= kv->n_blocks * KV_BLOCK) return iris_cpu_fail(b, IRIS_EINVAL, "kv_write: slot %d out of range", s);
        const float *kr = (const float *)k->data + r * iris_tensor_ld(k), *vr = (const float *)v->data + r * iris_tensor_ld(v);
        if (kv->dtype == IRIS_DT_F32) {
            memcpy((float *)kv->k + (size_t)s * row, kr, row * sizeof(float));
            memcpy((float *)kv->v + (size_t)s * row, vr, row * sizeof(float));
        } else {
            uint8_t *kq = (uint8_t *)kv->k + (size_t)s * row, *vq = (uint8_t *)kv->v + (size_t)s * row;
            for (size_t e = 0; e < row; e++) kq[e] = iris_fp8_e4m3_encode(kr[e]), vq[e] = iris_fp8_e4m3_encode(vr[e]);
        }
    }
    return 0;
}

typedef struct {
    const iris_tensor *q;
    const iris_kv_layer *kv;
    const iris_attn_meta *m;
    int nq, max_ctx, avx2;
    iris_tensor *o;
    iris_cpu_ctx *cc;
} paged_ctx;

/* q · k and o += p v over hd floats, eight lanes at a time with FMA (the text attention's own
 * order: every row the same kernel, whatever the batch around it). */
__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int e = 0;
    for (; e + 16 <= n; e += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + e), _mm256_loadu_ps(b + e), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + e + 8), _mm256_loadu_ps(b + e + 8), s1);
    }
    if (e + 8 <= n) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + e), _mm256_loadu_ps(b + e), s0), e += 8;
    s0 = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float d = _mm_cvtss_f32(h);
    for (; e < n; e++) d += a[e] * b[e];
    return d;
}

__attribute__((target("avx2,fma"))) static void axpy_avx2(float *o, float p, const float *v, int n) {
    const __m256 pv = _mm256_set1_ps(p);
    int e = 0;
    for (; e + 8 <= n; e += 8) _mm256_storeu_ps(o + e, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + e), _mm256_loadu_ps(o + e)));
    for (; e < n; e++) o[e] += p * v[e];
}

/* o[e] = the sum over the row's keys j in order of (sc[j] · inv) · v_j[e] from 0, one FMA a key
 * (axpy_avx2's chain for every element, its scalar tail's multiply and add), with the sums kept
 * in registers 64 columns a pass instead of loaded from o and stored back once a key.  F32 cache. */
__attribute__((target("avx2,fma"))) static void pv_paged_avx2(const iris_kv_layer *kv, const int32_t *bt, int kvh,
                                                              const float *sc, float inv, int n_ctx, float *o) {
    int hd = kv->head_dim, e0 = 0;
    for (; e0 + 64 <= hd; e0 += 64) {
        __m256 a[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_ps();
        for (int j = 0; j < n_ctx; j++) {
            const float *v = kv_head(kv, kv->v, bt, j, kvh, NULL) + e0;
            __m256 pj = _mm256_set1_ps(sc[j] * inv);
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) a[k] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + 8 * k), a[k]);
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) _mm256_storeu_ps(o + e0 + 8 * k, a[k]);
    }
    for (; e0 + 8 <= hd; e0 += 8) {
        __m256 a = _mm256_setzero_ps();
        for (int j = 0; j < n_ctx; j++)
            a = _mm256_fmadd_ps(_mm256_set1_ps(sc[j] * inv), _mm256_loadu_ps(kv_head(kv, kv->v, bt, j, kvh, NULL) + e0), a);
        _mm256_storeu_ps(o + e0, a);
    }
    for (; e0 < hd; e0++) {
        float a = 0;
        for (int j = 0; j < n_ctx; j++) a += sc[j] * inv * kv_head(kv, kv->v, bt, j, kvh, NULL)[e0];
        o[e0] = a;
    }
}

static void paged_run(void *p, int64_t w0, int64_t w1) {
    paged_ctx *c = p;
    int hd = c->kv->head_dim, grp = c->nq / c->kv->n_kv_heads;
    float scale = 1.0f / sqrtf((float)hd);
    float *sc = iris_cpu_scratch(c->cc, (size_t)c->max_ctx + (size_t)hd);
    if (!sc) return;
    float *tmp = sc + c->max_ctx;
    for (int64_t w = w0; w < w1; w++) {
        int r = (int)(w / c->nq), h = (int)(w % c->nq), kvh = h / grp;
        const int32_t *bt = c->m->block_tables + (int64_t)c->m->row_seq[r] * c->m->max_blocks;
        int n_ctx = c->m->row_ctx[r];
        const float *q = (const float *)c->q->data + r * iris_tensor_ld(c->q) + h * hd;
        float mx = -INFINITY;
        for (int j = 0; j < n_ctx; j++) {
            const float *k = kv_head(c->kv, c->kv->k, bt, j, kvh, tmp);
            float d = 0;
            if (c->avx2) d = dot_avx2(q, k, hd);
            else
                for (int e = 0; e < hd; e++) d += q[e] * k[e];
            sc[j] = d * scale;
            mx = sc[j] > mx ? sc[j] : mx;
        }
        double sum = 0;
        for (int j = 0; j < n_ctx; j++) sum += (sc[j] = expf(sc[j] - mx));
        float inv = (float)(1.0 / sum);
        float *o = (float *)c->o->data + r * iris_tensor_ld(c->o) + h * hd;
        if (c->avx2 && c->kv->dtype == IRIS_DT_F32) {
            pv_paged_avx2(c->kv, bt, kvh, sc, inv, n_ctx, o);
            continue;
        }
        for (int e = 0; e < hd; e++) o[e] = 0;
        for (int j = 0; j < n_ctx; j++) {
            const float *v = kv_head(c->kv, c->kv->v, bt, j, kvh, tmp);
            float pj = sc[j] * inv;
            if (c->avx2) axpy_avx2(o, pj, v, hd);
            else
                for (int e = 0; e < hd; e++) o[e] += pj * v[e];
        }
    }
}

int iris_cpu_attn_paged(iris_backend *b, const iris_tensor *q, const iris_kv_layer *kv, const iris_attn_meta *meta,
                        int n_q_heads, iris_tensor *o) {
    if (kv->dtype != IRIS_DT_F32 && kv->dtype != IRIS_DT_F8_E4M3)
        return iris_cpu_fail(b, IRIS_EUNSUPPORTED, "attn_paged: cache dtype %s (F32 or F8_E4M3)", iris_dtype_name(kv->dtype));
    int max_ctx = 1;
    for (int r = 0; r < meta->n_rows; r++) {
        if (meta->row_ctx[r] < 1 || meta->row_ctx[r] > meta->max_blocks * KV_BLOCK)
            return iris_cpu_fail(b, IRIS_EINVAL, "attn_paged: row %d sees %d tokens (max %d)", r, meta->row_ctx[r],
                                 meta->max_blocks * KV_BLOCK);
        max_ctx = meta->row_ctx[r] > max_ctx ? meta->row_ctx[r] : max_ctx;
    }
    iris_cpu_ctx *cc = b->ctx;
    paged_ctx c = {.q = q, .kv = kv, .m = meta, .nq = n_q_heads, .max_ctx = max_ctx, .avx2 = cc->avx2, .o = o, .cc = cc};
    if (iris_cpu_scratch_reserve(cc, (size_t)max_ctx + (size_t)kv->head_dim))
        return iris_cpu_fail(b, IRIS_ENOMEM, "attn_paged: out of memory for %d scores", max_ctx);
    iris_pool_for((int64_t)meta->n_rows * n_q_heads, paged_run, &c);
    return 0;
}

typedef struct {
    const iris_tensor *qkv;
    int nh, hd, n_seg, max_len, n_rows, avx2, avx512;
    const int *cu;
    iris_tensor *o;
    iris_cpu_ctx *cc;
} seg_ctx;

/* Vision attention's rows go in tiles of up to SEG_TILE rows of one head and one segment. */
#define SEG_TILE 8

/* Row i, head h over keys [a, e_): the scalar reference (sc: e_ - a floats). */
static void seg_row(const seg_ctx *c, int h, int64_t i, int a, int e_, float *sc) {
    int hd = c->hd, nh = c->nh;
    int64_t ld = iris_tensor_ld(c->qkv);
    const float *base = c->qkv->data;
    float scale = 1.0f / sqrtf((float)hd);
    const float *q = base + i * ld + h * hd;
    float mx = -INFINITY;
    for (int j = a; j < e_; j++) {
        const float *k = base + (int64_t)j * ld + (int64_t)nh * hd + h * hd;
        float d = 0;
        for (int e = 0; e < hd; e++) d += q[e] * k[e];
        sc[j - a] = d * scale;
        mx = sc[j - a] > mx ? sc[j - a] : mx;
    }
    double sum = 0;
    for (int j = 0; j < e_ - a; j++) sum += (sc[j] = expf(sc[j] - mx));
    float inv = (float)(1.0 / sum);
    float *o = (float *)c->o->data + i * iris_tensor_ld(c->o) + h * hd;
    for (int e = 0; e < hd; e++) o[e] = 0;
    for (int j = a; j < e_; j++) {
        const float *v = base + (int64_t)j * ld + 2 * (int64_t)nh * hd + h * hd;
        float pj = sc[j - a] * inv;
        for (int e = 0; e < hd; e++) o[e] += pj * v[e];
    }
}

/* o0[e], o1[e] = the sums over keys j in order of p[j * 8 + t] · v_j[e] and of p[j * 8 + t + 1] · v_j[e]
 * (v_j = v + j · ldv), one FMA a key; the sums stay in registers, 32 columns at a time, and each v
 * row is read once for both rows. */
__attribute__((target("avx2,fma"))) static void pv_avx2(const float *p, int t, int len, const float *v, int64_t ldv,
                                                        int hd, float *o0, float *o1) {
    int e = 0;
    for (; e + 32 <= hd; e += 32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        for (int j = 0; j < len; j++) {
            const float *vj = v + j * ldv + e;
            __m256 v0 = _mm256_loadu_ps(vj), v1 = _mm256_loadu_ps(vj + 8), v2 = _mm256_loadu_ps(vj + 16),
                   v3 = _mm256_loadu_ps(vj + 24), pa = _mm256_set1_ps(p[j * 8 + t]), pb = _mm256_set1_ps(p[j * 8 + t + 1]);
            a0 = _mm256_fmadd_ps(pa, v0, a0), a1 = _mm256_fmadd_ps(pa, v1, a1);
            a2 = _mm256_fmadd_ps(pa, v2, a2), a3 = _mm256_fmadd_ps(pa, v3, a3);
            b0 = _mm256_fmadd_ps(pb, v0, b0), b1 = _mm256_fmadd_ps(pb, v1, b1);
            b2 = _mm256_fmadd_ps(pb, v2, b2), b3 = _mm256_fmadd_ps(pb, v3, b3);
        }
        _mm256_storeu_ps(o0 + e, a0), _mm256_storeu_ps(o0 + e + 8, a1), _mm256_storeu_ps(o0 + e + 16, a2);
        _mm256_storeu_ps(o0 + e + 24, a3), _mm256_storeu_ps(o1 + e, b0), _mm256_storeu_ps(o1 + e + 8, b1);
        _mm256_storeu_ps(o1 + e + 16, b2), _mm256_storeu_ps(o1 + e + 24, b3);
    }
    for (; e + 8 <= hd; e += 8) {
        __m256 a0 = _mm256_setzero_ps(), b0 = a0;
        for (int j = 0; j < len; j++) {
            __m256 v0 = _mm256_loadu_ps(v + j * ldv + e);
            a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[j * 8 + t]), v0, a0);
            b0 = _mm256_fmadd_ps(_mm256_set1_ps(p[j * 8 + t + 1]), v0, b0);
        }
        _mm256_storeu_ps(o0 + e, a0), _mm256_storeu_ps(o1 + e, b0);
    }
    for (; e < hd; e++) {
        float s0 = 0, s1 = 0;
        for (int j = 0; j < len; j++) s0 += p[j * 8 + t] * v[j * ldv + e], s1 += p[j * 8 + t + 1] * v[j * ldv + e];
        o0[e] = s0, o1[e] = s1;
    }
}

/* The scratch floats of a worker: a tile's (seg_tile_avx2) or a row's scores (seg_row). */
static size_t seg_floats(const seg_ctx *c) {
    if (c->avx512) return (size_t)c->hd * 32 + (size_t)c->max_len * 16;
    return c->avx2 ? (size_t)c->hd * 16 + (size_t)c->max_len * 8 : (size_t)c->max_len;
}

/* pv_avx2 for four rows t..t+3 of a sixteen-row tile (p: [j][16]): each o[e] the same chain of FMAs
 * over the keys as pv_avx2's, sixteen columns a vector while they last, then eight, then pv_avx2's
 * scalar tail (multiply, add). */
__attribute__((target("avx512f,avx2,fma"))) static void pv_avx512(const float *p, int t, int len, const float *v,
                                                                 int64_t ldv, int hd, float *o) {
    int e = 0;
    for (; e + 64 <= hd; e += 64) {
        __m512 a[4][4];
        for (int r = 0; r < 4; r++)
            for (int q = 0; q < 4; q++) a[r][q] = _mm512_setzero_ps();
        for (int j = 0; j < len; j++) {
            const float *vj = v + j * ldv + e;
            __m512 v0 = _mm512_loadu_ps(vj), v1 = _mm512_loadu_ps(vj + 16), v2 = _mm512_loadu_ps(vj + 32),
                   v3 = _mm512_loadu_ps(vj + 48);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                __m512 pr = _mm512_set1_ps(p[j * 16 + t + r]);
                a[r][0] = _mm512_fmadd_ps(pr, v0, a[r][0]), a[r][1] = _mm512_fmadd_ps(pr, v1, a[r][1]);
                a[r][2] = _mm512_fmadd_ps(pr, v2, a[r][2]), a[r][3] = _mm512_fmadd_ps(pr, v3, a[r][3]);
            }
        }
        for (int r = 0; r < 4; r++)
            for (int q = 0; q < 4; q++) _mm512_storeu_ps(o + (size_t)r * hd + e + 16 * q, a[r][q]);
    }
    for (; e + 16 <= hd; e += 16) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int j = 0; j < len; j++) {
            __m512 vj = _mm512_loadu_ps(v + j * ldv + e);
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[j * 16 + t]), vj, a0);
            a1 = _mm512_fmadd_ps(_mm512_set1_ps(p[j * 16 + t + 1]), vj, a1);
            a2 = _mm512_fmadd_ps(_mm512_set1_ps(p[j * 16 + t + 2]), vj, a2);
            a3 = _mm512_fmadd_ps(_mm512_set1_ps(p[j * 16 + t + 3]), vj, a3);
        }
        _mm512_storeu_ps(o + e, a0), _mm512_storeu_ps(o + hd + e, a1);
        _mm512_storeu_ps(o + 2 * (size_t)hd + e, a2), _mm512_storeu_ps(o + 3 * (size_t)hd + e, a3);
    }
    for (; e + 8 <= hd; e += 8)
        for (int r = 0; r < 4; r++) {
            __m256 a0 = _mm256_setzero_ps();
            for (int j = 0; j < len; j++)
                a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[j * 16 + t + r]), _mm256_loadu_ps(v + j * ldv + e), a0);
            _mm256_storeu_ps(o + (size_t)r * hd + e, a0);
        }
    for (; e < hd; e++)
        for (int r = 0; r < 4; r++) {
            float s0 = 0;
            for (int j = 0; j < len; j++) s0 += p[j * 16 + t + r] * v[j * ldv + e];
            o[(size_t)r * hd + e] = s0;
        }
}

/* The tiles at eight rows (AVX2) and sixteen (AVX-512): one body, cpu_seg_tile.h, per width. */
__attribute__((target("avx2,fma"))) static inline void pv_tile8(const float *p, int nt, int len, const float *v,
                                                                int64_t ldv, int hd, float *acc) {
    for (int t = 0; t < nt; t += 2) pv_avx2(p, t, len, v, ldv, hd, acc + (size_t)t * hd, acc + (size_t)(t + 1) * hd);
}

__attribute__((target("avx512f,avx2,fma"))) static inline void pv_tile16(const float *p, int nt, int len,
                                                                         const float *v, int64_t ldv, int hd,
                                                                         float *acc) {
    for (int t = 0; t < nt; t += 4) pv_avx512(p, t, len, v, ldv, hd, acc + (size_t)t * hd);
}

#define SEG_TILE_FN seg_tile_avx2
#define SEG_TARGET "avx2,fma"
#define SEG_W 8
#define SEG_V __m256
#define SEG_VD __m256d
#define SEG_(op) _mm256_##op
#define SEG_EXP iris_cpu_exp8
#define SEG_SUM(lo, hi, x)                                                                                  \
    (lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(x))),                                    \
     hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))))
#define SEG_INV(lo, hi)                                                                                     \
    _mm256_set_m128(_mm256_cvtpd_ps(_mm256_div_pd(_mm256_set1_pd(1.0), hi)),                                \
                    _mm256_cvtpd_ps(_mm256_div_pd(_mm256_set1_pd(1.0), lo)))
#define SEG_PV pv_tile8
#include "cpu_seg_tile.h"

#define SEG_TILE_FN seg_tile_avx512
#define SEG_TARGET "avx512f,avx2,fma"
#define SEG_W 16
#define SEG_V __m512
#define SEG_VD __m512d
#define SEG_(op) _mm512_##op
#define SEG_EXP iris_cpu_exp16
#define SEG_SUM(lo, hi, x)                                                                                  \
    (lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(x))),                                    \
     hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))))
#define SEG_INV(lo, hi)                                                                                     \
    _mm512_castpd_ps(_mm512_insertf64x4(                                                                    \
        _mm512_castpd256_pd512(_mm256_castps_pd(_mm512_cvtpd_ps(_mm512_div_pd(_mm512_set1_pd(1.0), lo)))),  \
        _mm256_castps_pd(_mm512_cvtpd_ps(_mm512_div_pd(_mm512_set1_pd(1.0), hi))), 1))
#define SEG_PV pv_tile16
#include "cpu_seg_tile.h"

/* Work item w: head w / n_rows, row w % n_rows, so a thread's range is runs of rows of one head,
 * taken in tiles that stay within a segment. */
static void seg_run(void *p, int64_t w0, int64_t w1) {
    seg_ctx *c = p;
    float *buf = iris_cpu_scratch(c->cc, seg_floats(c));
    if (!buf) return;
    for (int64_t w = w0; w < w1;) {
        int h = (int)(w / c->n_rows), s = 0;
        int64_t i = w % c->n_rows;
        while (s + 1 < c->n_seg && c->cu[s + 1] <= i) s++;
        int a = c->cu[s], e_ = c->cu[s + 1];
        int64_t nt = w1 - w;
        if (nt > e_ - i) nt = e_ - i;
        if (!c->avx2) nt = 1;
        else if (nt > (c->avx512 ? 2 * SEG_TILE : SEG_TILE)) nt = c->avx512 ? 2 * SEG_TILE : SEG_TILE;
        if (c->avx512) seg_tile_avx512(c, h, i, (int)nt, a, e_, buf);
        else if (c->avx2) seg_tile_avx2(c, h, i, (int)nt, a, e_, buf);
        else seg_row(c, h, i, a, e_, buf);
        w += nt;
    }
}

int iris_cpu_attn_segments(iris_backend *b, const iris_tensor *qkv, int n_heads, int head_dim, const int *cu_seqlens,
                           int n_seg, iris_tensor *o) {
    int max_len = 1;
    for (int s = 0; s < n_seg; s++) {
        int len = cu_seqlens[s + 1] - cu_seqlens[s];
        if (len < 0) return iris_cpu_fail(b, IRIS_EINVAL, "attn_segments: segment %d has length %d", s, len);
        max_len = len > max_len ? len : max_len;
    }
    iris_cpu_ctx *cc = b->ctx;
    seg_ctx c = {.qkv = qkv, .nh = n_heads, .hd = head_dim, .n_seg = n_seg, .max_len = max_len,
                 .n_rows = cu_seqlens[n_seg], .avx2 = cc->avx2, .avx512 = cc->avx512, .cu = cu_seqlens, .o = o, .cc = cc};
    if (iris_cpu_scratch_reserve(cc, seg_floats(&c)))
        return iris_cpu_fail(b, IRIS_ENOMEM, "attn_segments: out of memory for segments of %d rows", max_len);
    iris_pool_for((int64_t)cu_seqlens[n_seg] * n_heads, seg_run, &c);
    return 0;
}
