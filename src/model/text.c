/* text.c: the Qwen3-VL text decoder on the CPU (text.h; QWEN3VL.md §6).
 *
 * Straight-line forward, top to bottom; every buffer with its shape.  The
 * quirks reproduced: q/k RMSNorm per head before the rotary (§6.2); the
 * interleaved MRoPE frequency slots (j % 3 == 1 → h, == 2 → w, below
 * 3·mrope_section[k]) with NeoX rotate_half pairing d ↔ d + head_dim/2 (§6.4,
 * §8.4-5); GQA with q head j reading kv head j / (nq / nkv); DeepStack rows
 * added after layers 0..n-1 on image rows, prefill only (§6.2, §8.10); tied
 * lm_head (§8.13).  Numerics: fp32 activations, RMSNorm statistics in double;
 * FP8 weights dequantized as transformers does, bf16(q · scale_inv).
 *
 * Threads: matrix products and attention run on the pool (base/pool.h); the
 * large-batch products use OpenBLAS sgemm on fp32 tiles widened in parallel. */
#include "text.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "pool.h"

/* ---- loading ------------------------------------------------------------------------------ */

static int shape_str(char *buf, size_t n, const int64_t *shape, int nd) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < nd && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    return 0;
}

static int bind(const iris_st *st, const char *name, int nd, int64_t d0, int64_t d1, const iris_st_tensor **out,
                iris_err *err) {
    const iris_st_tensor *t = iris_st_find(st, name);
    if (!t) return iris_err_set(err, IRIS_ENOTFOUND, "text tensor \"%s\" is missing from the checkpoint", name);
    int64_t want[2] = {d0, d1};
    int ok = t->n_dims == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == want[i];
    if (!ok) {
        char g[128], w[128];
        shape_str(g, sizeof g, t->shape, t->n_dims);
        shape_str(w, sizeof w, want, nd);
        return iris_err_set(err, IRIS_EFORMAT, "text tensor \"%s\" has shape [%s]; config.json implies [%s]", name, g, w);
    }
    if (t->dtype != IRIS_DT_BF16 && t->dtype != IRIS_DT_F32 && t->dtype != IRIS_DT_F16 && t->dtype != IRIS_DT_F8_E4M3)
        return iris_err_set(err, IRIS_EUNSUPPORTED, "text tensor \"%s\" has dtype %s; expected BF16, F16, F32 or F8_E4M3",
                            name, iris_dtype_name(t->dtype));
    *out = t;
    return IRIS_OK;
}

static int bind_linear(const iris_st *st, const char *prefix, int64_t out, int64_t in, const int block[2],
                       iris_text_linear *l, iris_err *err) {
    char name[300];
    snprintf(name, sizeof name, "%s.weight", prefix);
    int rc = bind(st, name, 2, out, in, &l->weight, err);
    if (rc) return rc;
    l->scale_inv = NULL;
    if (l->weight->dtype == IRIS_DT_F8_E4M3) {
        snprintf(name, sizeof name, "%s.weight_scale_inv", prefix);
        const iris_st_tensor *s = iris_st_find(st, name);
        if (!s)
            return iris_err_set(err, IRIS_EFORMAT, "tensor \"%s.weight\" is F8_E4M3 but \"%s\" is missing", prefix, name);
        int bo = block[0] > 0 ? block[0] : 128, bi = block[1] > 0 ? block[1] : 128;
        int64_t so = (out + bo - 1) / bo, si = (in + bi - 1) / bi;
        if (s->dtype != IRIS_DT_F32 || s->n_dims != 2 || s->shape[0] != so || s->shape[1] != si) {
            char g[128];
            shape_str(g, sizeof g, s->shape, s->n_dims);
            return iris_err_set(err, IRIS_EFORMAT, "tensor \"%s\" is %s [%s]; expected F32 [%lld, %lld] for %dx%d blocks",
                                name, iris_dtype_name(s->dtype), g, (long long)so, (long long)si, bo, bi);
        }
        l->scale_inv = s;
        l->block[0] = bo;
        l->block[1] = bi;
    }
    return IRIS_OK;
}

int iris_text_load(const iris_st *st, const iris_config *cfg, iris_text *t, iris_err *err) {
    memset(t, 0, sizeof *t);
    const iris_text_config *c = &cfg->text_config;
    t->cfg = *c;
    t->image_token_id = cfg->image_token_id;
    t->video_token_id = cfg->video_token_id;
    int64_t H = c->hidden_size, FF = c->intermediate_size, hd = c->head_dim, V = c->vocab_size;
    int64_t nq = c->num_attention_heads, nkv = c->num_key_value_heads;
    const int *blk = cfg->quantization_config.weight_block_size;
    const char *P = "model.language_model.";
    char name[300];
    int rc;
    snprintf(name, sizeof name, "%sembed_tokens.weight", P);
    if ((rc = bind(st, name, 2, V, H, &t->embed_tokens, err))) return rc;
    snprintf(name, sizeof name, "%snorm.weight", P);
    if ((rc = bind(st, name, 1, H, 0, &t->norm, err))) return rc;
    if (iris_st_find(st, "lm_head.weight")) {
        if ((rc = bind_linear(st, "lm_head", V, H, blk, &t->lm_head, err))) return rc;
    } else if (cfg->tie_word_embeddings || c->tie_word_embeddings) {
        t->lm_head.weight = t->embed_tokens;
    } else {
        return iris_err_set(err, IRIS_ENOTFOUND,
                            "tensor \"lm_head.weight\" is missing and config.json does not tie it to the embeddings");
    }
    t->layers = calloc((size_t)c->num_hidden_layers, sizeof *t->layers);
    if (!t->layers) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    for (int il = 0; il < c->num_hidden_layers; il++) {
        iris_text_layer *L = &t->layers[il];
        char pre[200];
        snprintf(pre, sizeof pre, "%slayers.%d.", P, il);
#define VEC(field, key, n)                                                     \
    snprintf(name, sizeof name, "%s" key, pre);                               \
    if ((rc = bind(st, name, 1, n, 0, &L->field, err))) goto fail;
#define LIN(field, key, o, i)                                                  \
    snprintf(name, sizeof name, "%s" key, pre);                               \
    if ((rc = bind_linear(st, name, o, i, blk, &L->field, err))) goto fail;   \
    t->n_fp8 += L->field.scale_inv != NULL;
        VEC(input_layernorm, "input_layernorm.weight", H);
        VEC(post_attention_layernorm, "post_attention_layernorm.weight", H);
        VEC(q_norm, "self_attn.q_norm.weight", hd);
        VEC(k_norm, "self_attn.k_norm.weight", hd);
        LIN(q_proj, "self_attn.q_proj", nq * hd, H);
        LIN(k_proj, "self_attn.k_proj", nkv * hd, H);
        LIN(v_proj, "self_attn.v_proj", nkv * hd, H);
        LIN(o_proj, "self_attn.o_proj", H, nq * hd);
        LIN(gate_proj, "mlp.gate_proj", FF, H);
        LIN(up_proj, "mlp.up_proj", FF, H);
        LIN(down_proj, "mlp.down_proj", H, FF);
#undef VEC
#undef LIN
    }
    return IRIS_OK;
fail:
    iris_text_free(t);
    return rc;
}

void iris_text_free(iris_text *t) {
    if (!t) return;
    free(t->layers);
    t->layers = NULL;
}

int iris_kv_cache_init(iris_kv_cache *kv, const iris_text_config *c, int n_blocks, iris_err *err) {
    memset(kv, 0, sizeof *kv);
    if (n_blocks <= 0) return iris_err_set(err, IRIS_EINVAL, "KV cache: %d blocks; need at least 1", n_blocks);
    kv->n_layers = c->num_hidden_layers;
    kv->n_kv_heads = c->num_key_value_heads;
    kv->head_dim = c->head_dim;
    kv->n_blocks = n_blocks;
    size_t n = (size_t)kv->n_layers * (size_t)n_blocks * IRIS_KV_BLOCK * (size_t)(kv->n_kv_heads * kv->head_dim);
    kv->k = malloc(n * sizeof(float));
    kv->v = malloc(n * sizeof(float));
    if (!kv->k || !kv->v) {
        iris_kv_cache_free(kv);
        return iris_err_set(err, IRIS_ENOMEM, "KV cache: out of memory for %d blocks (%zu MiB)", n_blocks,
                            2 * n * sizeof(float) >> 20);
    }
    return IRIS_OK;
}

void iris_kv_cache_free(iris_kv_cache *kv) {
    if (!kv) return;
    free(kv->k);
    free(kv->v);
    kv->k = kv->v = NULL;
}

/* ---- weight widening ------------------------------------------------------------------------ */

static float bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float f32_round_bf16(float x) { /* round to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x;
    u = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static float half_to_f32(uint16_t h) {
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

/* e4m3fn: bias 7, no infinities, S.1111.111 is NaN (QWEN3VL.md §2). */
static float g_fp8[256];
static void fp8_table(void) {
    if (g_fp8[0x38] != 0) return; /* 0x38 = 1.0, set once */
    for (int b = 0; b < 256; b++) {
        int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
        float v = e == 0 ? ldexpf((float)m / 8.0f, -6) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
        if (e == 15 && m == 7) v = NAN;
        g_fp8[b] = s ? -v : v;
    }
}

/* Row r of a linear's weight as fp32 into dst[in]. */
static void widen_row(const iris_text_linear *l, int64_t r, int64_t in, float *dst) {
    const iris_st_tensor *w = l->weight;
    switch (w->dtype) {
    case IRIS_DT_BF16: {
        const uint16_t *s = (const uint16_t *)w->data + r * in;
        for (int64_t i = 0; i < in; i++) dst[i] = bf16_to_f32(s[i]);
        break;
    }
    case IRIS_DT_F32: memcpy(dst, (const float *)w->data + r * in, (size_t)in * 4); break;
    case IRIS_DT_F16: {
        const uint16_t *s = (const uint16_t *)w->data + r * in;
        for (int64_t i = 0; i < in; i++) dst[i] = half_to_f32(s[i]);
        break;
    }
    default: { /* F8_E4M3 */
        const uint8_t *s = (const uint8_t *)w->data + r * in;
        const float *sc = (const float *)l->scale_inv->data + (r / l->block[0]) * l->scale_inv->shape[1];
        int bi = l->block[1];
        for (int64_t i = 0; i < in; i++) dst[i] = f32_round_bf16(g_fp8[s[i]] * sc[i / bi]);
        break;
    }
    }
}

/* ---- matrix products: y[n, out] = x[n, in] · Wᵀ ---------------------------------------------- */

typedef struct {
    const iris_text_linear *l;
    const float *x;
    float *y;
    int64_t n, in, out, r0;
    float *tile; /* sgemm path: [rows, in] */
} lin_ctx;

/* Few rows (decode): each worker widens its weight rows one at a time and dots them with every x row. */
static void lin_dot(void *p, int64_t r0, int64_t r1) {
    lin_ctx *c = p;
    float *row = malloc((size_t)c->in * sizeof(float));
    if (!row) return;
    for (int64_t r = r0; r < r1; r++) {
        widen_row(c->l, r, c->in, row);
        for (int64_t i = 0; i < c->n; i++) {
            const float *xi = c->x + i * c->in;
            float acc[8] = {0};
            int64_t k = 0;
            for (; k + 8 <= c->in; k += 8)
                for (int u = 0; u < 8; u++) acc[u] += xi[k + u] * row[k + u];
            float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            for (; k < c->in; k++) s += xi[k] * row[k];
            c->y[i * c->out + r] = s;
        }
    }
    free(row);
}

static void lin_widen(void *p, int64_t r0, int64_t r1) {
    lin_ctx *c = p;
    for (int64_t r = r0; r < r1; r++) widen_row(c->l, c->r0 + r, c->in, c->tile + r * c->in);
}

#define LIN_CHUNK 1024
static int linear(const iris_text_linear *l, const float *x, int64_t n, float *y, iris_err *err) {
    int64_t out = l->weight->shape[0], in = l->weight->shape[1];
    lin_ctx c = {.l = l, .x = x, .y = y, .n = n, .in = in, .out = out};
    if (n <= 8) {
        iris_pool_for(out, lin_dot, &c);
        return IRIS_OK;
    }
    int64_t rows = out < LIN_CHUNK ? out : LIN_CHUNK;
    c.tile = malloc((size_t)(rows * in) * sizeof(float));
    if (!c.tile) return iris_err_set(err, IRIS_ENOMEM, "out of memory for a %lld x %lld weight tile", (long long)rows, (long long)in);
    for (int64_t r0 = 0; r0 < out; r0 += rows) {
        int64_t m = out - r0 < rows ? out - r0 : rows;
        c.r0 = r0;
        iris_pool_for(m, lin_widen, &c);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)m, (int)in, 1.0f, x, (int)in, c.tile, (int)in,
                    0.0f, y + r0, (int)out);
    }
    free(c.tile);
    return IRIS_OK;
}

/* ---- small ops ------------------------------------------------------------------------------ */

static void vec_f32(const iris_st_tensor *t, float *dst) {
    int64_t n = t->shape[0];
    for (int64_t i = 0; i < n; i++)
        dst[i] = t->dtype == IRIS_DT_F32 ? ((const float *)t->data)[i]
               : t->dtype == IRIS_DT_BF16 ? bf16_to_f32(((const uint16_t *)t->data)[i])
                                          : half_to_f32(((const uint16_t *)t->data)[i]);
}

/* y = w · x / sqrt(mean(x²) + eps), rows of length d. */
static void rms_norm(const float *x, int64_t rows, int d, const float *w, float eps, float *y) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * d;
        double ss = 0;
        for (int i = 0; i < d; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / d + eps));
        for (int i = 0; i < d; i++) y[r * d + i] = w[i] * (xr[i] * inv);
    }
}

/* Which position component (0 t, 1 h, 2 w) frequency slot j uses (§6.4). */
static int mrope_dim(const iris_text_config *c, int j) {
    const int *s = c->mrope_section;
    if (s[0] + s[1] + s[2] == 0) return 0;
    if (c->mrope_interleaved) {
        if (j % 3 == 1 && j < 3 * s[1]) return 1;
        if (j % 3 == 2 && j < 3 * s[2]) return 2;
        return 0;
    }
    return j < s[0] ? 0 : j < s[0] + s[1] ? 1 : 2; /* chunked (Qwen2-VL style) */
}

/* Rotates n_heads heads of x (head_dim hd) in place at 3-D position p. */
static void rope(float *x, int n_heads, int hd, const float *inv_freq, const int *dim_of, const int32_t p[3]) {
    int half = hd / 2;
    float cs[512], sn[512];
    for (int j = 0; j < half; j++) {
        float a = (float)p[dim_of[j]] * inv_freq[j];
        cs[j] = cosf(a);
        sn[j] = sinf(a);
    }
    for (int h = 0; h < n_heads; h++) {
        float *q = x + h * hd;
        for (int j = 0; j < half; j++) {
            float a = q[j], b = q[j + half];
            q[j] = a * cs[j] - b * sn[j];
            q[j + half] = b * cs[j] + a * sn[j];
        }
    }
}

/* ---- attention over the paged cache ----------------------------------------------------------- */

typedef struct {
    const iris_text *t;
    const iris_kv_cache *kv;
    const iris_text_seq *seqs;
    const int64_t *row0;      /* first row of each sequence in the flat batch */
    int n_seqs, il;
    const float *q;           /* [rows, nq·hd] */
    float *o;                 /* [rows, nq·hd] */
    int64_t total_ctx_max;
} attn_ctx;

static const float *kv_at(const iris_kv_cache *kv, const float *base, int il, const int32_t *bt, int j) {
    size_t row = (size_t)(kv->n_kv_heads * kv->head_dim);
    size_t blk = (size_t)bt[j / IRIS_KV_BLOCK];
    return base + (((size_t)il * kv->n_blocks + blk) * IRIS_KV_BLOCK + (size_t)(j % IRIS_KV_BLOCK)) * row;
}

/* Work item = (row, q head); rows of all sequences flattened. */
static void attn_run(void *p, int64_t w0, int64_t w1) {
    attn_ctx *c = p;
    const iris_text_config *cf = &c->t->cfg;
    int nq = cf->num_attention_heads, hd = cf->head_dim, grp = nq / cf->num_key_value_heads;
    float scale = 1.0f / sqrtf((float)hd);
    float *sc = malloc((size_t)c->total_ctx_max * sizeof(float));
    if (!sc) return;
    for (int64_t w = w0; w < w1; w++) {
        int64_t row = w / nq;
        int h = (int)(w % nq), s = 0;
        while (s + 1 < c->n_seqs && c->row0[s + 1] <= row) s++;
        const iris_text_seq *sq = &c->seqs[s];
        int i = (int)(row - c->row0[s]);
        int n_ctx = sq->n_past + i + 1; /* causal: itself and everything before */
        const float *q = c->q + row * (int64_t)nq * hd + h * hd;
        int kvh = h / grp;
        float mx = -INFINITY;
        for (int j = 0; j < n_ctx; j++) {
            const float *k = kv_at(c->kv, c->kv->k, c->il, sq->block_table, j) + kvh * hd;
            float d = 0;
            for (int e = 0; e < hd; e++) d += q[e] * k[e];
            sc[j] = d * scale;
            if (sc[j] > mx) mx = sc[j];
        }
        double sum = 0;
        for (int j = 0; j < n_ctx; j++) {
            sc[j] = expf(sc[j] - mx);
            sum += sc[j];
        }
        float inv = (float)(1.0 / sum);
        float *o = c->o + row * (int64_t)nq * hd + h * hd;
        memset(o, 0, (size_t)hd * sizeof(float));
        for (int j = 0; j < n_ctx; j++) {
            const float *v = kv_at(c->kv, c->kv->v, c->il, sq->block_table, j) + kvh * hd;
            float pj = sc[j] * inv;
            for (int e = 0; e < hd; e++) o[e] += pj * v[e];
        }
    }
    free(sc);
}

/* ---- the forward pass --------------------------------------------------------------------------- */

static void silu_mul(float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

int iris_text_forward(const iris_text *t, iris_kv_cache *kv, const iris_text_seq *seqs, int n_seqs, float *logits,
                      iris_text_trace_fn trace, void *trace_ud, iris_err *err) {
    const iris_text_config *c = &t->cfg;
    const int H = c->hidden_size, FF = c->intermediate_size, hd = c->head_dim;
    const int nq = c->num_attention_heads, nkv = c->num_key_value_heads, L = c->num_hidden_layers;
    const int V = c->vocab_size;
    fp8_table();

    /* Validate the step and lay the sequences out as one flat batch of rows. */
    int64_t *row0 = malloc((size_t)(n_seqs + 1) * sizeof(int64_t));
    if (!row0) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    int64_t R = 0, ctx_max = 1, n_logits = 0;
    for (int s = 0; s < n_seqs; s++) {
        const iris_text_seq *sq = &seqs[s];
        row0[s] = R;
        if (sq->n_new <= 0 || sq->n_past < 0 || sq->logits_from < 0 || sq->logits_from > sq->n_new) {
            free(row0);
            return iris_err_set(err, IRIS_EINVAL, "text step: sequence %d has n_past %d, n_new %d, logits_from %d", s,
                                sq->n_past, sq->n_new, sq->logits_from);
        }
        int n_tok = sq->n_past + sq->n_new;
        int n_blk = (n_tok + IRIS_KV_BLOCK - 1) / IRIS_KV_BLOCK;
        for (int b = 0; b < n_blk; b++)
            if (sq->block_table[b] < 0 || sq->block_table[b] >= kv->n_blocks) {
                free(row0);
                return iris_err_set(err, IRIS_EINVAL, "text step: sequence %d names KV block %d of %d", s,
                                    sq->block_table[b], kv->n_blocks);
            }
        for (int i = 0; i < sq->n_new; i++)
            if (sq->tokens[i] < 0 || sq->tokens[i] >= V) {
                free(row0);
                return iris_err_set(err, IRIS_EINVAL, "token id %d is outside the vocabulary (%d)", sq->tokens[i], V);
            }
        if (n_tok > ctx_max) ctx_max = n_tok;
        R += sq->n_new;
        n_logits += sq->n_new - sq->logits_from;
    }
    row0[n_seqs] = R;

    size_t qd = (size_t)nq * hd, kd = (size_t)nkv * hd;
    float *h = malloc((size_t)R * H * sizeof(float));      /* [R, H] residual stream */
    float *x = malloc((size_t)R * H * sizeof(float));      /* [R, H] normed */
    float *q = malloc((size_t)R * qd * sizeof(float));     /* [R, nq·hd] */
    float *k = malloc((size_t)R * kd * sizeof(float));     /* [R, nkv·hd] */
    float *v = malloc((size_t)R * kd * sizeof(float));     /* [R, nkv·hd] */
    float *o = malloc((size_t)R * qd * sizeof(float));     /* [R, nq·hd] attention out */
    float *g = malloc((size_t)R * FF * sizeof(float));     /* [R, FF] gate, then silu(gate)·up */
    float *u = malloc((size_t)R * FF * sizeof(float));     /* [R, FF] up */
    float *wv = malloc((size_t)(H > hd ? H : hd) * 2 * sizeof(float));
    int32_t *img_row = malloc((size_t)R * sizeof(int32_t)); /* row → index into its sequence's image rows, or -1 */
    float inv_freq[512];
    int dim_of[512];
    int rc = IRIS_OK;
    if (!h || !x || !q || !k || !v || !o || !g || !u || !wv || !img_row || hd / 2 > 512) {
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory for a %lld-token step", (long long)R);
        goto done;
    }
    for (int j = 0; j < hd / 2; j++) {
        inv_freq[j] = (float)(1.0 / pow(c->rope_theta, (double)(2 * j) / hd));
        dim_of[j] = mrope_dim(c, j);
    }

    /* Embeddings; image-token rows take the vision tower's rows in order. */
    for (int s = 0; s < n_seqs; s++) {
        const iris_text_seq *sq = &seqs[s];
        int n_img = 0;
        for (int i = 0; i < sq->n_new; i++) {
            int64_t r = row0[s] + i;
            int tok = sq->tokens[i];
            img_row[r] = -1;
            if ((tok == t->image_token_id || tok == t->video_token_id) && sq->image_embeds) {
                memcpy(h + r * H, sq->image_embeds + (size_t)n_img * H, (size_t)H * sizeof(float));
                img_row[r] = n_img++;
            } else {
                iris_text_linear e = {.weight = t->embed_tokens};
                widen_row(&e, tok, H, h + r * H);
            }
        }
    }

    for (int il = 0; il < L; il++) {
        const iris_text_layer *Ly = &t->layers[il];
        if (trace) trace(trace_ud, il, h, (int)R, H);

        /* Attention block. */
        vec_f32(Ly->input_layernorm, wv);
        rms_norm(h, R, H, wv, c->rms_norm_eps, x);                 /* x [R, H] */
        if ((rc = linear(&Ly->q_proj, x, R, q, err))) goto done;   /* q [R, nq, hd] */
        if ((rc = linear(&Ly->k_proj, x, R, k, err))) goto done;   /* k [R, nkv, hd] */
        if ((rc = linear(&Ly->v_proj, x, R, v, err))) goto done;   /* v [R, nkv, hd] */
        vec_f32(Ly->q_norm, wv);
        vec_f32(Ly->k_norm, wv + hd);
        rms_norm(q, R * nq, hd, wv, c->rms_norm_eps, q);           /* per-head q_norm */
        rms_norm(k, R * nkv, hd, wv + hd, c->rms_norm_eps, k);     /* per-head k_norm */
        for (int s = 0; s < n_seqs; s++) {
            const iris_text_seq *sq = &seqs[s];
            for (int i = 0; i < sq->n_new; i++) {
                int64_t r = row0[s] + i;
                int32_t p[3] = {sq->pos[i], sq->pos[sq->pos_stride + i], sq->pos[2 * sq->pos_stride + i]};
                rope(q + r * qd, nq, hd, inv_freq, dim_of, p);
                rope(k + r * kd, nkv, hd, inv_freq, dim_of, p);
                /* Append this token's K and V to the sequence's cache blocks. */
                int j = sq->n_past + i;
                memcpy((float *)kv_at(kv, kv->k, il, sq->block_table, j), k + r * kd, kd * sizeof(float));
                memcpy((float *)kv_at(kv, kv->v, il, sq->block_table, j), v + r * kd, kd * sizeof(float));
            }
        }
        attn_ctx ac = {.t = t, .kv = kv, .seqs = seqs, .row0 = row0, .n_seqs = n_seqs, .il = il, .q = q, .o = o,
                       .total_ctx_max = ctx_max};
        iris_pool_for(R * nq, attn_run, &ac);                       /* o [R, nq·hd] */
        if ((rc = linear(&Ly->o_proj, o, R, x, err))) goto done;    /* x [R, H] */
        for (size_t i = 0; i < (size_t)R * H; i++) h[i] += x[i];

        /* MLP block. */
        vec_f32(Ly->post_attention_layernorm, wv);
        rms_norm(h, R, H, wv, c->rms_norm_eps, x);
        if ((rc = linear(&Ly->gate_proj, x, R, g, err))) goto done; /* g [R, FF] */
        if ((rc = linear(&Ly->up_proj, x, R, u, err))) goto done;   /* u [R, FF] */
        silu_mul(g, u, (size_t)R * FF);
        if ((rc = linear(&Ly->down_proj, g, R, x, err))) goto done; /* x [R, H] */
        for (size_t i = 0; i < (size_t)R * H; i++) h[i] += x[i];

        /* DeepStack: the vision tower's tap il joins the image rows (prefill only). */
        for (int s = 0; s < n_seqs; s++) {
            const iris_text_seq *sq = &seqs[s];
            if (il >= sq->n_deepstack || !sq->deepstack[il]) continue;
            for (int i = 0; i < sq->n_new; i++) {
                int64_t r = row0[s] + i;
                if (img_row[r] < 0) continue;
                const float *d = sq->deepstack[il] + (size_t)img_row[r] * H;
                for (int e = 0; e < H; e++) h[r * H + e] += d[e];
            }
        }
    }
    if (trace) trace(trace_ud, L, h, (int)R, H);

    /* Final norm and the logits of the requested rows. */
    if (n_logits > 0) {
        vec_f32(t->norm, wv);
        int64_t n = 0;
        for (int s = 0; s < n_seqs; s++)
            for (int i = seqs[s].logits_from; i < seqs[s].n_new; i++, n++)
                rms_norm(h + (row0[s] + i) * H, 1, H, wv, c->rms_norm_eps, x + n * H);
        rc = linear(&t->lm_head, x, n, logits, err);
    }
    (void)V;

done:
    free(h), free(x), free(q), free(k), free(v), free(o), free(g), free(u), free(wv), free(img_row), free(row0);
    return rc;
}
