/* cpu_backend.c: the CPU backend — the numeric reference (backend.h).
 *
 * Activations are fp32; weights are widened to fp32 exactly (BF16, F16) or
 * dequantized as transformers does (FP8: bf16(q · scale); I4: bf16((q - zero)
 * · scale) per group, as compressed-tensors).  Memory (b->alloc and the
 * ops' own buffers) comes from a bounded cache of freed blocks by size class,
 * and each pool worker has its own scratch (cpu_internal.h), both released at
 * destroy; ops run on the calling thread, fanning out over base/pool.h.
 * The matrix products live in cpu_linear.c, attention in cpu_attn.c. */
#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "cpu_internal.h"
#include "pool.h"

float iris_fp8_e4m3_table[256];

void iris_fp8_table_init(void) {
    static int done;
    if (done) return;
    for (int b = 0; b < 256; b++) {
        int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
        float v = e == 0 ? ldexpf((float)m / 8.0f, -6) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
        if (e == 15 && m == 7) v = NAN;
        iris_fp8_e4m3_table[b] = s ? -v : v;
    }
    done = 1;
}

float iris_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 0) {
        float f = ldexpf((float)m, -24);
        return s ? -f : f;
    }
    u = e == 31 ? s | 0x7f800000u | (m << 13) : s | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Scale g of row r of an I4 weight as fp32. */
static float i4_scale(const iris_tensor *w, int64_t r, int64_t g) {
    int64_t i = r * (w->cols / w->group) + g;
    switch (w->qscale_dtype) {
    case IRIS_DT_BF16: return iris_bf16_to_f32(((const uint16_t *)w->qscale)[i]);
    case IRIS_DT_F16: return iris_f16_to_f32(((const uint16_t *)w->qscale)[i]);
    default: return ((const float *)w->qscale)[i];
    }
}

/* Row r of an I4 weight: per group, bf16((q - zero) · scale) as compressed-tensors' dequantize in the
 * scale's dtype ((q - zero) is exact there; the product is rounded once).  F16 scales round to bf16
 * all the same, as the BF16 activations of the GPU path would. */
static void i4_widen_row(const iris_tensor *w, int64_t r, float *dst) {
    const uint32_t *q = (const uint32_t *)w->data + r * (w->cols / 8);
    int64_t n_g = w->cols / w->group;
    for (int64_t g = 0; g < n_g; g++) {
        float s = i4_scale(w, r, g);
        int z = w->qzero ? (int)((w->qzero[(r / 8) * n_g + g] >> (4 * (r % 8))) & 15) - 8 : 0;
        for (int64_t c = g * w->group; c < (g + 1) * w->group; c++) {
            int v = (int)((q[c / 8] >> (4 * (c % 8))) & 15) - 8;
            dst[c] = iris_f32_round_bf16((float)(v - z) * s);
        }
    }
}

void iris_cpu_widen_row(const iris_tensor *w, int64_t r, float *dst) {
    int64_t n = w->cols, ld = iris_tensor_ld(w);
    switch (w->dtype) {
    case IRIS_DT_I4: i4_widen_row(w, r, dst); break;
    case IRIS_DT_BF16: {
        const uint16_t *s = (const uint16_t *)w->data + r * ld;
        for (int64_t i = 0; i < n; i++) dst[i] = iris_bf16_to_f32(s[i]);
        break;
    }
    case IRIS_DT_F16: {
        const uint16_t *s = (const uint16_t *)w->data + r * ld;
        for (int64_t i = 0; i < n; i++) dst[i] = iris_f16_to_f32(s[i]);
        break;
    }
    case IRIS_DT_F8_E4M3: {
        /* one scale per block of bi columns: the product and the bf16 rounding per element */
        const uint8_t *s = (const uint8_t *)w->data + r * ld;
        int64_t sc_cols = (w->cols + w->block[1] - 1) / w->block[1];
        const float *sc = w->scale + (r / w->block[0]) * sc_cols;
        int64_t bi = w->block[1];
        for (int64_t c0 = 0, blk = 0; c0 < n; c0 += bi, blk++) {
            float f = sc[blk];
            int64_t c1 = c0 + bi < n ? c0 + bi : n;
            for (int64_t i = c0; i < c1; i++) {
                float x = iris_fp8_e4m3_table[s[i]] * f;
                uint32_t u;
                memcpy(&u, &x, 4);
                u = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u; /* bf16 RNE; the table has no NaN products here */
                memcpy(&dst[i], &u, 4);
            }
        }
        break;
    }
    default: memcpy(dst, (const float *)w->data + r * ld, (size_t)n * sizeof(float)); break;
    }
}

int iris_cpu_fail(iris_backend *b, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err.msg, sizeof b->err.msg, fmt, ap);
    va_end(ap);
    b->err.code = code;
    return code;
}

/* ---- memory ---------------------------------------------------------------------------- */

/* Blocks carry their capacity in a 64-byte header.  Capacities are size classes (eight a power of two,
 * so a block is at most 12.5% over what was asked): the vision encoder's buffers, a little different
 * in size from one image to the next, come back from the cache instead of being mapped and
 * page-faulted afresh each pass, and so do the matrix products' weight tiles.  Blocks of HUGE_BYTES
 * and more ask for transparent huge pages (where the kernel gives them on request): the KV cache's
 * layers are touched a block at a time as requests come, 4 KiB pages made that ~36K page faults on
 * the engine thread over 200 demo captions in one process. */
#define BLK_HDR 64
#define HUGE_BYTES ((size_t)4 << 20)

static size_t size_class(size_t bytes) {
    if (bytes < 1024) return (bytes + 63) & ~(size_t)63;
    int lg = 63 - __builtin_clzll(bytes);
    size_t step = (size_t)1 << (lg - 3);
    return (bytes + step - 1) & ~(step - 1);
}

static size_t blk_cap(const void *p) { return *(const size_t *)((const char *)p - BLK_HDR); }

static void blk_release(iris_cpu_ctx *c, void *p) {
    free((char *)p - BLK_HDR);
    c->n_live--;
}

void *iris_cpu_buf(iris_cpu_ctx *c, size_t bytes) {
    size_t cap = size_class(bytes ? bytes : 1);
    pthread_mutex_lock(&c->mu);
    int best = -1;
    for (int i = 0; cap >= IRIS_CPU_CACHE_MIN_BYTES && i < c->n_cached; i++) {
        size_t ci = blk_cap(c->cached[i]);
        if (ci >= cap && ci / 2 <= cap && (best < 0 || ci < blk_cap(c->cached[best]))) best = i;
    }
    void *p = NULL;
    if (best >= 0) {
        p = c->cached[best];
        c->cached_bytes -= blk_cap(p);
        memmove(&c->cached[best], &c->cached[best + 1], sizeof(void *) * (size_t)(--c->n_cached - best));
    } else {
        char *raw = aligned_alloc(BLK_HDR, BLK_HDR + cap);
        if (raw && cap >= HUGE_BYTES) { /* the whole 2 MiB pages inside the block */
            uintptr_t a = ((uintptr_t)raw + (2 << 20) - 1) & ~(uintptr_t)((2 << 20) - 1);
            uintptr_t e = ((uintptr_t)raw + BLK_HDR + cap) & ~(uintptr_t)((2 << 20) - 1);
            if (e > a) madvise((void *)a, e - a, MADV_HUGEPAGE);
        }
        if (raw) {
            *(size_t *)raw = cap;
            p = raw + BLK_HDR;
            c->n_live++;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return p;
}

void iris_cpu_buf_free(iris_cpu_ctx *c, void *p) {
    if (!p) return;
    size_t cap = blk_cap(p);
    pthread_mutex_lock(&c->mu);
    if (cap < IRIS_CPU_CACHE_MIN_BYTES || cap > IRIS_CPU_CACHE_BYTES) {
        blk_release(c, p);
    } else {
        while (c->n_cached == IRIS_CPU_CACHE_SLOTS || c->cached_bytes + cap > IRIS_CPU_CACHE_BYTES) {
            c->cached_bytes -= blk_cap(c->cached[0]);
            blk_release(c, c->cached[0]);
            memmove(&c->cached[0], &c->cached[1], sizeof(void *) * (size_t)--c->n_cached);
        }
        c->cached[c->n_cached++] = p;
        c->cached_bytes += cap;
    }
    pthread_mutex_unlock(&c->mu);
}

static float *scratch_of(iris_cpu_ctx *c, int k, size_t n) {
    if (c->scratch_n[k] < n) {
        free(c->scratch[k]);
        c->scratch[k] = malloc(sizeof(float) * n);
        c->scratch_n[k] = c->scratch[k] ? n : 0;
    }
    return c->scratch[k];
}

float *iris_cpu_scratch(iris_cpu_ctx *c, size_t n) { return scratch_of(c, iris_pool_worker(), n); }

int iris_cpu_scratch_reserve(iris_cpu_ctx *c, size_t n) {
    for (int k = 0, threads = iris_pool_threads(); k < threads; k++)
        if (!scratch_of(c, k, n)) return IRIS_ENOMEM;
    return 0;
}

static void *cpu_alloc(iris_backend *b, size_t bytes) { return iris_cpu_buf(b->ctx, bytes); }
static void cpu_free(iris_backend *b, void *p) { iris_cpu_buf_free(b->ctx, p); }
static int cpu_copy(iris_backend *b, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    return 0;
}
static int cpu_sync(iris_backend *b) { return 0; }

/* ---- row-wise ops ---------------------------------------------------------------------------- */

#define ROW(t, r) ((float *)(t)->data + (r) * iris_tensor_ld(t))
#define CROW(t, r) ((const float *)(t)->data + (r) * iris_tensor_ld(t))

static void vec_f32(const iris_tensor *t, float *dst) { iris_cpu_widen_row(t, 0, dst); }

static int cpu_avx2(const iris_backend *b) { return b->ctx && ((const iris_cpu_ctx *)b->ctx)->avx2; }

/* Row-wise ops (the norms, elementwise ops): split across the pool when there is enough work to pay
 * for waking it (the vision encoder's 560 x 768 GELU on the demo model), inline otherwise (a decode
 * step's rows: 16 x 256 for the demo model's norms).  Every row is computed as it would be alone:
 * the same numbers at any thread count. */
#define EW_MIN_ELEMS 16384

/* fn over [0, rows) of ctx: on the pool when the op touches at least EW_MIN_ELEMS floats. */
static void ew_rows(int64_t rows, int64_t elems, iris_pool_fn fn, void *ctx) {
    if (elems >= EW_MIN_ELEMS) iris_pool_for(rows, fn, ctx);
    else fn(ctx, 0, rows);
}

typedef struct {
    const iris_tensor *x, *w, *bias;
    iris_tensor *y;
    float eps;
    const float *wf, *bf;
    int avx2; /* four rows at a time (cpu_norm_avx2.c: the same bits) */
} norm_ctx;

static void rms_rows(void *p, int64_t r0, int64_t r1) {
    norm_ctx *c = p;
    int64_t d = c->x->cols;
    for (int64_t r = r0; r < r1; r++) {
        if (c->avx2 && r + 4 <= r1) {
            const float *x4[4] = {CROW(c->x, r), CROW(c->x, r + 1), CROW(c->x, r + 2), CROW(c->x, r + 3)};
            float *y4[4] = {ROW(c->y, r), ROW(c->y, r + 1), ROW(c->y, r + 2), ROW(c->y, r + 3)};
            iris_cpu_rms_rows4_avx2(x4, y4, d, c->eps, c->wf);
            r += 3;
            continue;
        }
        const float *x = CROW(c->x, r);
        float *y = ROW(c->y, r);
        double ss = 0;
        for (int64_t i = 0; i < d; i++) ss += (double)x[i] * x[i];
        float inv = (float)(1.0 / sqrt(ss / d + c->eps));
        if (c->avx2) iris_cpu_rms_out_avx2(x, y, d, inv, c->wf);
        else
            for (int64_t i = 0; i < d; i++) y[i] = c->wf[i] * (x[i] * inv);
    }
}

static void ln_rows(void *p, int64_t r0, int64_t r1) {
    norm_ctx *c = p;
    int64_t d = c->x->cols;
    for (int64_t r = r0; r < r1; r++) {
        if (c->avx2 && r + 4 <= r1) {
            const float *x4[4] = {CROW(c->x, r), CROW(c->x, r + 1), CROW(c->x, r + 2), CROW(c->x, r + 3)};
            float *y4[4] = {ROW(c->y, r), ROW(c->y, r + 1), ROW(c->y, r + 2), ROW(c->y, r + 3)};
            iris_cpu_ln_rows4_avx2(x4, y4, d, c->eps, c->wf, c->bf);
            r += 3;
            continue;
        }
        const float *x = CROW(c->x, r);
        float *y = ROW(c->y, r);
        double mean = 0, var = 0;
        for (int64_t i = 0; i < d; i++) mean += x[i];
        mean /= d;
        for (int64_t i = 0; i < d; i++) var += (x[i] - mean) * (x[i] - mean);
        float inv = (float)(1.0 / sqrt(var / d + c->eps));
        if (c->avx2) iris_cpu_ln_out_avx2(x, y, d, mean, inv, c->wf, c->bf);
        else
            for (int64_t i = 0; i < d; i++) y[i] = ((float)(x[i] - mean) * inv) * c->wf[i] + c->bf[i];
    }
}

static int norm_common(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias, float eps,
                       iris_tensor *y, int layer) {
    int64_t d = x->cols;
    float *wf = malloc(sizeof(float) * (size_t)d * 2);
    if (!wf) return iris_cpu_fail(b, IRIS_ENOMEM, "out of memory");
    vec_f32(w, wf);
    if (bias) vec_f32(bias, wf + d);
    norm_ctx c = {.x = x, .w = w, .bias = bias, .y = y, .eps = eps, .wf = wf, .bf = wf + d, .avx2 = cpu_avx2(b)};
    ew_rows(x->rows, x->rows * d, layer ? ln_rows : rms_rows, &c);
    free(wf);
    return 0;
}

static int cpu_rms_norm(iris_backend *b, const iris_tensor *x, const iris_tensor *w, float eps, iris_tensor *y) {
    return norm_common(b, x, w, NULL, eps, y, 0);
}

static int cpu_layer_norm(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias,
                          float eps, iris_tensor *y) {
    return norm_common(b, x, w, bias, eps, y, 1);
}


typedef struct {
    iris_tensor *y;
    const iris_tensor *x;
    int avx2; /* GELU and SiLU through cpu_act_avx2.c */
} ew_ctx;

static void add_rows(void *p, int64_t r0, int64_t r1) {
    ew_ctx *c = p;
    for (int64_t r = r0; r < r1; r++) {
        float *yr = ROW(c->y, r);
        const float *xr = CROW(c->x, r);
        for (int64_t i = 0; i < c->y->cols; i++) yr[i] += xr[i];
    }
}

static void silu_mul_rows(void *p, int64_t r0, int64_t r1) {
    ew_ctx *c = p;
    for (int64_t r = r0; r < r1; r++) {
        float *gr = ROW(c->y, r);
        const float *ur = CROW(c->x, r);
        if (c->avx2) {
            iris_cpu_silu_mul_avx2(gr, ur, c->y->cols);
            continue;
        }
        for (int64_t i = 0; i < c->y->cols; i++) gr[i] = gr[i] / (1.0f + expf(-gr[i])) * ur[i];
    }
}

static void gelu_tanh_rows(void *p, int64_t r0, int64_t r1) {
    ew_ctx *c = p;
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t r = r0; r < r1; r++) {
        float *v = ROW(c->y, r);
        if (c->avx2) {
            iris_cpu_gelu_tanh_avx2(v, c->y->cols);
            continue;
        }
        for (int64_t i = 0; i < c->y->cols; i++) v[i] = 0.5f * v[i] * (1.0f + tanhf(k * (v[i] + 0.044715f * v[i] * v[i] * v[i])));
    }
}

static void gelu_erf_rows(void *p, int64_t r0, int64_t r1) {
    ew_ctx *c = p;
    for (int64_t r = r0; r < r1; r++) {
        float *v = ROW(c->y, r);
        for (int64_t i = 0; i < c->y->cols; i++) v[i] = 0.5f * v[i] * (1.0f + erff(v[i] * 0.70710678118654752f));
    }
}

static int cpu_add(iris_backend *b, iris_tensor *y, const iris_tensor *x) {
    ew_ctx c = {y, x, 0};
    ew_rows(y->rows, y->rows * y->cols, add_rows, &c);
    return 0;
}

static int cpu_silu_mul(iris_backend *b, iris_tensor *g, const iris_tensor *u) {
    ew_ctx c = {g, u, cpu_avx2(b)};
    ew_rows(g->rows, g->rows * g->cols, silu_mul_rows, &c);
    return 0;
}

static int cpu_gelu_tanh(iris_backend *b, iris_tensor *x) {
    ew_ctx c = {x, NULL, cpu_avx2(b)};
    ew_rows(x->rows, x->rows * x->cols, gelu_tanh_rows, &c);
    return 0;
}

static int cpu_gelu_erf(iris_backend *b, iris_tensor *x) {
    ew_ctx c = {x, NULL, 0};
    ew_rows(x->rows, x->rows * x->cols, gelu_erf_rows, &c);
    return 0;
}

typedef struct {
    iris_tensor *x;
    int n_heads, hd, pos_stride;
    const int32_t *pos;
    const int *dim_of;
    const float *inv_freq;
} rope_ctx;

static void rope_rows(void *p, int64_t r0, int64_t r1) {
    rope_ctx *c = p;
    int half = c->hd / 2;
    float cs[512], sn[512];
    for (int64_t r = r0; r < r1; r++) {
        for (int j = 0; j < half; j++) {
            float a = (float)c->pos[(int64_t)c->dim_of[j] * c->pos_stride + r] * c->inv_freq[j];
            cs[j] = cosf(a);
            sn[j] = sinf(a);
        }
        float *row = ROW(c->x, r);
        for (int h = 0; h < c->n_heads; h++) {
            float *q = row + h * c->hd;
            for (int j = 0; j < half; j++) {
                float a = q[j], d = q[j + half];
                q[j] = a * cs[j] - d * sn[j];
                q[j + half] = d * cs[j] + a * sn[j];
            }
        }
    }
}

static int cpu_rope(iris_backend *b, iris_tensor *x, int n_heads, int hd, const int32_t *pos, int pos_stride,
                    const int *dim_of, const float *inv_freq) {
    if (hd / 2 > 512) return iris_cpu_fail(b, IRIS_EUNSUPPORTED, "rope: head_dim %d over 1024", hd);
    rope_ctx c = {x, n_heads, hd, pos_stride, pos, dim_of, inv_freq};
    ew_rows(x->rows, x->rows * n_heads * hd, rope_rows, &c);
    return 0;
}

static int cpu_embed(iris_backend *b, const iris_tensor *table, const int32_t *ids, int n, iris_tensor *y) {
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= table->rows)
            return iris_cpu_fail(b, IRIS_EINVAL, "token id %d is outside the vocabulary (%lld)", ids[i],
                                 (long long)table->rows);
        iris_cpu_widen_row(table, ids[i], ROW(y, i));
    }
    return 0;
}

static int cpu_set_rows(iris_backend *b, iris_tensor *y, const int32_t *idx, const iris_tensor *x) {
    for (int64_t i = 0; i < x->rows; i++) memcpy(ROW(y, idx[i]), CROW(x, i), sizeof(float) * (size_t)x->cols);
    return 0;
}

static int cpu_add_rows(iris_backend *b, iris_tensor *y, const int32_t *idx, const iris_tensor *x) {
    for (int64_t i = 0; i < x->rows; i++) {
        float *yr = ROW(y, idx[i]);
        const float *xr = CROW(x, i);
        for (int64_t e = 0; e < x->cols; e++) yr[e] += xr[e];
    }
    return 0;
}

static int cpu_get_rows(iris_backend *b, const iris_tensor *x, const int32_t *idx, int n, iris_tensor *y) {
    for (int i = 0; i < n; i++) memcpy(ROW(y, i), CROW(x, idx[i]), sizeof(float) * (size_t)x->cols);
    return 0;
}

static int cpu_interp4(iris_backend *b, const iris_tensor *table, const int32_t *idx, const float *w, int n,
                       iris_tensor *y) {
    int64_t d = table->cols;
    float *tmp = malloc(sizeof(float) * (size_t)d);
    if (!tmp) return iris_cpu_fail(b, IRIS_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        float *yr = ROW(y, i);
        for (int64_t e = 0; e < d; e++) yr[e] = 0;
        for (int k = 0; k < 4; k++) {
            iris_cpu_widen_row(table, idx[i * 4 + k], tmp);
            for (int64_t e = 0; e < d; e++) yr[e] += tmp[e] * w[i * 4 + k];
        }
    }
    free(tmp);
    return 0;
}

int iris_cpu_linear(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias, iris_tensor *y);
int iris_cpu_kv_write(iris_backend *b, iris_kv_layer *kv, const iris_tensor *k, const iris_tensor *v,
                      const iris_attn_meta *meta);
int iris_cpu_attn_paged(iris_backend *b, const iris_tensor *q, const iris_kv_layer *kv, const iris_attn_meta *meta,
                        int n_q_heads, iris_tensor *o);
int iris_cpu_attn_segments(iris_backend *b, const iris_tensor *qkv, int n_heads, int head_dim, const int *cu_seqlens,
                           int n_seg, iris_tensor *o);

static void cpu_destroy(iris_backend *b) {
    if (!b) return;
    iris_cpu_ctx *c = b->ctx;
    for (int i = 0; i < c->n_cached; i++) blk_release(c, c->cached[i]);
    for (int k = 0; k < IRIS_POOL_MAX_THREADS; k++) free(c->scratch[k]);
    pthread_mutex_destroy(&c->mu);
    free(c);
    free(b);
}

int iris_backend_cpu_open(iris_backend **out, iris_err *err) {
    iris_backend *b = calloc(1, sizeof *b);
    iris_cpu_ctx *c = calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    iris_fp8_table_init();
    openblas_set_num_threads(1); /* sgemm is split across the pool (cpu_linear.c) */
    pthread_mutex_init(&c->mu, NULL);
    /* (FP8 rows stay on the table path even with AVX2: it measured faster, cpu_linear.c) */
    const char *avx2 = getenv("IRIS_CPU_AVX2");
    c->avx2 = iris_cpu_has_avx2() && !(avx2 && !strcmp(avx2, "0"));
    c->avx512 = c->avx2 && iris_cpu_has_avx512();
    b->ctx = c;
    b->name = "cpu";
    b->act = IRIS_DT_F32;
    b->host_weights = 1;
    b->alloc = cpu_alloc;
    b->free = cpu_free;
    b->upload = cpu_copy;
    b->download = cpu_copy;
    b->sync = cpu_sync;
    b->linear = iris_cpu_linear;
    b->embed = cpu_embed;
    b->rms_norm = cpu_rms_norm;
    b->layer_norm = cpu_layer_norm;
    b->add = cpu_add;
    b->silu_mul = cpu_silu_mul;
    b->gelu_tanh = cpu_gelu_tanh;
    b->gelu_erf = cpu_gelu_erf;
    b->rope = cpu_rope;
    b->kv_write = iris_cpu_kv_write;
    b->attn_paged = iris_cpu_attn_paged;
    b->attn_segments = iris_cpu_attn_segments;
    b->set_rows = cpu_set_rows;
    b->add_rows = cpu_add_rows;
    b->get_rows = cpu_get_rows;
    b->interp4 = cpu_interp4;
    b->get_topk = iris_cpu_get_topk;
    b->destroy = cpu_destroy;
    *out = b;
    return 0;
}
