/* vision.c: the Qwen3-VL vision encoder (see vision.h for the pipeline).
 *
 * Layout: x is [N, hidden] row-major, N patches in merge-window order (the
 * order of pixel_values).  The HF quirks reproduced, with their sources in
 * QWEN3VL.md: align_corners position interpolation with transformers 5.17's
 * taps (§5.2), rotary ids (row, col) in merge-window order with rotate_half
 * pairing d <-> d + head_dim/2 (§5.3), attention per image (§5.4), tanh-GELU
 * in the blocks but erf-GELU in the mergers, LayerNorm before the shuffle in
 * the main merger and after it in the DeepStack mergers (§8.8-9).
 * Numerics: fp32 throughout, as transformers' fp32 reference run; norms
 * accumulate in double. */
#include "vision.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

#define LN_EPS 1e-6f

/* ---- weights ---------------------------------------------------------------------------- */

static int bind(const iris_st *st, const char *name, int n_dims, const int64_t *shape,
                const iris_st_tensor **out, iris_err *err) {
    const iris_st_tensor *t = iris_st_find(st, name);
    if (!t) return iris_err_set(err, IRIS_ENOTFOUND, "vision tensor \"%s\" is missing from the checkpoint", name);
    if (t->dtype != IRIS_DT_BF16 && t->dtype != IRIS_DT_F32 && t->dtype != IRIS_DT_F16)
        return iris_err_set(err, IRIS_EUNSUPPORTED, "vision tensor \"%s\" has dtype %s; expected BF16, F16 or F32",
                            name, iris_dtype_name(t->dtype));
    int ok = t->n_dims == n_dims;
    for (int i = 0; ok && i < n_dims; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        char want[128] = "", got[128] = "";
        for (int i = 0; i < n_dims; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)shape[i]);
        for (int i = 0; i < t->n_dims; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        return iris_err_set(err, IRIS_EFORMAT, "vision tensor \"%s\" has shape [%s]; config.json implies [%s]", name,
                            got, want);
    }
    *out = t;
    return IRIS_OK;
}

static int bind_vec(const iris_st *st, const char *prefix, const char *suffix, int64_t n,
                    const iris_st_tensor **out, iris_err *err) {
    char name[256];
    snprintf(name, sizeof name, "%s%s", prefix, suffix);
    return bind(st, name, 1, &n, out, err);
}

static int bind_linear(const iris_st *st, const char *prefix, int64_t out_dim, int64_t in_dim,
                       iris_vision_linear *l, iris_err *err) {
    char name[256];
    int64_t shape[2] = {out_dim, in_dim};
    snprintf(name, sizeof name, "%s.weight", prefix);
    int rc = bind(st, name, 2, shape, &l->weight, err);
    if (rc) return rc;
    return bind_vec(st, prefix, ".bias", out_dim, &l->bias, err);
}

static int bind_norm(const iris_st *st, const char *prefix, int64_t dim, iris_vision_norm *n, iris_err *err) {
    int rc = bind_vec(st, prefix, ".weight", dim, &n->weight, err);
    return rc ? rc : bind_vec(st, prefix, ".bias", dim, &n->bias, err);
}

static int bind_merger(const iris_st *st, const char *prefix, const iris_vision_config *c, int postshuffle,
                       iris_vision_merger *m, iris_err *err) {
    char p[256];
    int64_t wide = (int64_t)c->hidden_size * c->spatial_merge_size * c->spatial_merge_size;
    snprintf(p, sizeof p, "%s.norm", prefix);
    int rc = bind_norm(st, p, postshuffle ? wide : c->hidden_size, &m->norm, err);
    if (rc) return rc;
    snprintf(p, sizeof p, "%s.linear_fc1", prefix);
    if ((rc = bind_linear(st, p, wide, wide, &m->fc1, err))) return rc;
    snprintf(p, sizeof p, "%s.linear_fc2", prefix);
    return bind_linear(st, p, c->out_hidden_size, wide, &m->fc2, err);
}

int iris_vision_load(const iris_st *st, const iris_vision_config *cfg, iris_vision *v, iris_err *err) {
    memset(v, 0, sizeof *v);
    v->cfg = *cfg;
    const iris_vision_config *c = cfg;
    if (c->depth <= 0 || c->hidden_size <= 0 || c->num_heads <= 0 || c->hidden_size % c->num_heads ||
        (c->hidden_size / c->num_heads) % 4 || c->patch_size <= 0 || c->temporal_patch_size <= 0 ||
        c->spatial_merge_size <= 0 || c->in_channels <= 0 || c->intermediate_size <= 0 || c->out_hidden_size <= 0 ||
        c->n_deepstack < 0 || c->n_deepstack > IRIS_MAX_DEEPSTACK)
        return iris_err_set(err, IRIS_EINVAL,
                            "vision_config: unsupported sizes (depth %d, hidden_size %d, num_heads %d: the head size "
                            "must be a multiple of 4)", c->depth, c->hidden_size, c->num_heads);
    int side = (int)lround(sqrt((double)c->num_position_embeddings));
    if (side <= 0 || side * side != c->num_position_embeddings)
        return iris_err_set(err, IRIS_EINVAL, "vision_config.num_position_embeddings %d is not a square",
                            c->num_position_embeddings);
    for (int i = 0; i < c->n_deepstack; i++)
        if (c->deepstack_visual_indexes[i] < 0 || c->deepstack_visual_indexes[i] >= c->depth)
            return iris_err_set(err, IRIS_EINVAL, "vision_config.deepstack_visual_indexes[%d] = %d is outside [0, %d)",
                                i, c->deepstack_visual_indexes[i], c->depth);
    v->grid_side = side;
    v->patch_dim = c->in_channels * c->temporal_patch_size * c->patch_size * c->patch_size;
    int64_t pshape[5] = {c->hidden_size, c->in_channels, c->temporal_patch_size, c->patch_size, c->patch_size};
    int rc = bind(st, "model.visual.patch_embed.proj.weight", 5, pshape, &v->patch_w, err);
    if (!rc) rc = bind_vec(st, "model.visual.patch_embed.proj", ".bias", c->hidden_size, &v->patch_b, err);
    int64_t eshape[2] = {c->num_position_embeddings, c->hidden_size};
    if (!rc) rc = bind(st, "model.visual.pos_embed.weight", 2, eshape, &v->pos_embed, err);
    if (rc) return rc;
    v->blocks = calloc((size_t)c->depth, sizeof *v->blocks);
    if (!v->blocks) return iris_err_set(err, IRIS_ENOMEM, "vision: out of memory");
    for (int i = 0; i < c->depth && !rc; i++) {
        char p[128], q[160];
        iris_vision_block *b = &v->blocks[i];
        snprintf(p, sizeof p, "model.visual.blocks.%d", i);
        snprintf(q, sizeof q, "%s.norm1", p);
        rc = bind_norm(st, q, c->hidden_size, &b->norm1, err);
        snprintf(q, sizeof q, "%s.norm2", p);
        if (!rc) rc = bind_norm(st, q, c->hidden_size, &b->norm2, err);
        snprintf(q, sizeof q, "%s.attn.qkv", p);
        if (!rc) rc = bind_linear(st, q, 3 * (int64_t)c->hidden_size, c->hidden_size, &b->qkv, err);
        snprintf(q, sizeof q, "%s.attn.proj", p);
        if (!rc) rc = bind_linear(st, q, c->hidden_size, c->hidden_size, &b->proj, err);
        snprintf(q, sizeof q, "%s.mlp.linear_fc1", p);
        if (!rc) rc = bind_linear(st, q, c->intermediate_size, c->hidden_size, &b->fc1, err);
        snprintf(q, sizeof q, "%s.mlp.linear_fc2", p);
        if (!rc) rc = bind_linear(st, q, c->hidden_size, c->intermediate_size, &b->fc2, err);
    }
    if (!rc) rc = bind_merger(st, "model.visual.merger", c, 0, &v->merger, err);
    for (int k = 0; k < c->n_deepstack && !rc; k++) {
        char p[128];
        snprintf(p, sizeof p, "model.visual.deepstack_merger_list.%d", k);
        rc = bind_merger(st, p, c, 1, &v->deepstack[k], err);
    }
    if (rc) iris_vision_free(v);
    return rc;
}

void iris_vision_free(iris_vision *v) {
    if (!v) return;
    free(v->blocks);
    v->blocks = NULL;
}

void iris_vision_out_free(iris_vision_out *o) {
    if (!o) return;
    free(o->embeds);
    free(o->deepstack);
    memset(o, 0, sizeof *o);
}

/* ---- fp32 kernels ----------------------------------------------------------------------- */

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

/* Elements [off, off + n) of a tensor as fp32. */
static void to_f32(const iris_st_tensor *t, size_t off, size_t n, float *dst) {
    if (t->dtype == IRIS_DT_F32) {
        memcpy(dst, (const float *)t->data + off, n * 4);
    } else if (t->dtype == IRIS_DT_BF16) {
        const uint16_t *s = (const uint16_t *)t->data + off;
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)s[i] << 16;
            memcpy(&dst[i], &u, 4);
        }
    } else {
        const uint16_t *s = (const uint16_t *)t->data + off;
        for (size_t i = 0; i < n; i++) dst[i] = half_to_f32(s[i]);
    }
}

/* y[n, out] = x[n, in] . W^T + b; W converted to fp32 once per call. */
static int linear(const float *x, int64_t n, const iris_vision_linear *l, float *y, iris_err *err) {
    int64_t out = l->weight->shape[0], in = l->weight->shape[1];
    float *w = malloc((size_t)(out * in) * sizeof(float));
    float *b = malloc((size_t)out * sizeof(float));
    if (!w || !b) {
        free(w);
        free(b);
        return iris_err_set(err, IRIS_ENOMEM, "vision: out of memory for a %lld x %lld weight", (long long)out,
                            (long long)in);
    }
    to_f32(l->weight, 0, (size_t)(out * in), w);
    to_f32(l->bias, 0, (size_t)out, b);
    for (int64_t i = 0; i < n; i++) memcpy(y + i * out, b, (size_t)out * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)out, (int)in, 1.0f, x, (int)in, w, (int)in,
                1.0f, y, (int)out);
    free(w);
    free(b);
    return IRIS_OK;
}

static int layernorm(const float *x, int64_t n, int dim, const iris_vision_norm *nm, float *y, iris_err *err) {
    float *w = malloc((size_t)dim * 2 * sizeof(float));
    if (!w) return iris_err_set(err, IRIS_ENOMEM, "vision: out of memory");
    to_f32(nm->weight, 0, (size_t)dim, w);
    to_f32(nm->bias, 0, (size_t)dim, w + dim);
    for (int64_t i = 0; i < n; i++) {
        const float *r = x + i * dim;
        double mean = 0, var = 0;
        for (int j = 0; j < dim; j++) mean += r[j];
        mean /= dim;
        for (int j = 0; j < dim; j++) var += (r[j] - mean) * (r[j] - mean);
        float inv = (float)(1.0 / sqrt(var / dim + LN_EPS));
        for (int j = 0; j < dim; j++) y[i * dim + j] = ((float)(r[j] - mean) * inv) * w[j] + w[dim + j];
    }
    free(w);
    return IRIS_OK;
}

static void gelu_tanh(float *x, size_t n) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (size_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + tanhf(k * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
}

static void gelu_erf(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

/* ---- position embedding and rotary ------------------------------------------------------ */

/* Patch n of an image (merge-window order) → its (row, col) in the patch grid. */
static void window_rc(int64_t n, int gw, int m, int *r, int *c) {
    int64_t win = n / (m * m), in = n % (m * m);
    int wpr = gw / m;
    *r = (int)(win / wpr) * m + (int)(in / m);
    *c = (int)(win % wpr) * m + (int)(in % m);
}

/* transformers 5.17 bilinear taps, align_corners=True: src = i * (S-1) / max(size-1, 1)
 * in fp32, taps floor and floor+1 clamped to the table, weights 1 - |src - tap| >= 0 from the
 * unclamped tap (so a tap past the edge weighs 0). */
static void taps(int i, int size, int side, int idx[2], float w[2]) {
    float src = (float)i * (float)(side - 1) / (float)(size - 1 > 1 ? size - 1 : 1);
    int f = (int)floorf(src);
    for (int k = 0; k < 2; k++) {
        int t = f + k;
        float d = 1.0f - fabsf(src - (float)t);   /* weight of the unclamped tap: 0 past the edge */
        idx[k] = t < 0 ? 0 : t > side - 1 ? side - 1 : t;
        w[k] = d > 0 ? d : 0;
    }
}

static void add_pos_embed(const iris_vision *v, float *x, int64_t row0, int t, int gh, int gw, float *tmp) {
    int H = v->cfg.hidden_size, S = v->grid_side, m = v->cfg.spatial_merge_size;
    int64_t n_img = (int64_t)gh * gw;
    for (int64_t n = 0; n < n_img; n++) {
        int r, c, ri[2], ci[2];
        float rw[2], cw[2];
        window_rc(n, gw, m, &r, &c);
        taps(r, gh, S, ri, rw);
        taps(c, gw, S, ci, cw);
        float *acc = tmp + H;
        memset(acc, 0, (size_t)H * sizeof(float));
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                float wt = rw[a] * cw[b];
                to_f32(v->pos_embed, (size_t)(ri[a] * S + ci[b]) * H, (size_t)H, tmp);
                for (int j = 0; j < H; j++) acc[j] += tmp[j] * wt;
            }
        for (int f = 0; f < t; f++) {
            float *row = x + (row0 + f * n_img + n) * H;
            for (int j = 0; j < H; j++) row[j] += acc[j];
        }
    }
}

/* cos/sin [N, head_dim] for every patch: angles [r*inv (hd/4), c*inv (hd/4)] twice. */
static void rotary_tables(const iris_vision *v, const int *grid, int n_images, float *cosv, float *sinv) {
    int hd = v->cfg.hidden_size / v->cfg.num_heads, half = hd / 2, nf = half / 2;
    double theta = v->cfg.rope_theta > 0 ? v->cfg.rope_theta : 10000.0;
    float inv[512];
    for (int j = 0; j < nf; j++) inv[j] = (float)(1.0 / pow(theta, (double)(2 * j) / half));
    int64_t row = 0;
    for (int im = 0; im < n_images; im++) {
        int t = grid[3 * im], gh = grid[3 * im + 1], gw = grid[3 * im + 2];
        for (int f = 0; f < t; f++)
            for (int64_t n = 0; n < (int64_t)gh * gw; n++, row++) {
                int r, c;
                window_rc(n, gw, v->cfg.spatial_merge_size, &r, &c);
                float *cs = cosv + row * hd, *sn = sinv + row * hd;
                for (int j = 0; j < nf; j++) {
                    float ar = (float)r * inv[j], ac = (float)c * inv[j];
                    cs[j] = cs[half + j] = cosf(ar);
                    sn[j] = sn[half + j] = sinf(ar);
                    cs[nf + j] = cs[half + nf + j] = cosf(ac);
                    sn[nf + j] = sn[half + nf + j] = sinf(ac);
                }
            }
    }
}

/* rotate_half pairing d <-> d + hd/2, in place on one head vector. */
static void rope_apply(float *q, const float *cs, const float *sn, int hd) {
    int h2 = hd / 2;
    for (int d = 0; d < h2; d++) {
        float a = q[d], b = q[d + h2];
        q[d] = a * cs[d] - b * sn[d];
        q[d + h2] = b * cs[d + h2] + a * sn[d + h2];
    }
}

/* Non-causal attention within each image: qkv [N, 3H] (rows q | k | v, heads
 * contiguous inside each third) → out [N, H].  Queries in chunks so the score
 * buffer stays chunk x n_img. */
static int attention(const iris_vision *v, const float *qkv, int64_t N, const int *grid, int n_images, float *out,
                     iris_err *err) {
    int H = v->cfg.hidden_size, nh = v->cfg.num_heads, hd = H / nh;
    const int CH = 256;
    int64_t maxn = 0;
    for (int im = 0; im < n_images; im++) {
        int64_t n = (int64_t)grid[3 * im] * grid[3 * im + 1] * grid[3 * im + 2];
        maxn = n > maxn ? n : maxn;
    }
    float *s = malloc((size_t)(CH * maxn) * sizeof(float));
    if (!s) return iris_err_set(err, IRIS_ENOMEM, "vision: out of memory for attention scores");
    float scale = 1.0f / sqrtf((float)hd);
    int64_t r0 = 0;
    for (int im = 0; im < n_images; im++) {
        int64_t n = (int64_t)grid[3 * im] * grid[3 * im + 1] * grid[3 * im + 2];
        for (int h = 0; h < nh; h++) {
            const float *q = qkv + r0 * 3 * H + h * hd, *k = q + H, *vv = q + 2 * H;
            for (int64_t c0 = 0; c0 < n; c0 += CH) {
                int m = (int)(n - c0 < CH ? n - c0 : CH);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, (int)n, hd, scale, q + c0 * 3 * H, 3 * H, k,
                            3 * H, 0.0f, s, (int)n);
                for (int i = 0; i < m; i++) {
                    float *row = s + (int64_t)i * n, mx = -INFINITY;
                    double sum = 0;
                    for (int64_t j = 0; j < n; j++) mx = row[j] > mx ? row[j] : mx;
                    for (int64_t j = 0; j < n; j++) sum += (row[j] = expf(row[j] - mx));
                    float inv = (float)(1.0 / sum);
                    for (int64_t j = 0; j < n; j++) row[j] *= inv;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, (int)n, 1.0f, s, (int)n, vv, 3 * H,
                            0.0f, out + (r0 + c0) * H + h * hd, H);
            }
        }
        r0 += n;
    }
    free(s);
    return IRIS_OK;
}

/* ---- mergers ---------------------------------------------------------------------------- */

/* x [N, H] → out [N/m², out_hidden].  The main merger normalizes each patch
 * before the shuffle; a DeepStack merger normalizes the shuffled row. */
static int merge(const iris_vision *v, const iris_vision_merger *mg, int postshuffle, const float *x, int64_t N,
                 float *out, iris_err *err) {
    int H = v->cfg.hidden_size, mm = v->cfg.spatial_merge_size * v->cfg.spatial_merge_size;
    int64_t wide = (int64_t)H * mm, T = N / mm;
    float *a = malloc((size_t)(N * H) * sizeof(float)), *b = malloc((size_t)(T * wide) * sizeof(float));
    int rc = (!a || !b) ? iris_err_set(err, IRIS_ENOMEM, "vision: out of memory in the merger") : 0;
    /* [N, H] and [N/4, 4H] are the same bytes: the shuffle is a view. */
    if (!rc) rc = postshuffle ? layernorm(x, T, (int)wide, &mg->norm, a, err) : layernorm(x, N, H, &mg->norm, a, err);
    if (!rc) rc = linear(a, T, &mg->fc1, b, err);
    if (!rc) gelu_erf(b, (size_t)(T * wide));
    if (!rc) rc = linear(b, T, &mg->fc2, out, err);
    free(a);
    free(b);
    return rc;
}

/* ---- the encoder ------------------------------------------------------------------------ */

int iris_vision_encode(const iris_vision *v, const float *pixel_values, int64_t n_rows, const int *grid_thw,
                       int n_images, iris_vision_out *out, float *trace, iris_err *err) {
    memset(out, 0, sizeof *out);
    const iris_vision_config *c = &v->cfg;
    int H = c->hidden_size, m = c->spatial_merge_size, hd = H / c->num_heads;
    int64_t N = 0;
    for (int im = 0; im < n_images; im++) {
        const int *g = grid_thw + 3 * im;
        if (g[0] <= 0 || g[1] <= 0 || g[2] <= 0 || g[1] % m || g[2] % m)
            return iris_err_set(err, IRIS_EINVAL, "vision: image %d has grid (%d, %d, %d); h and w must be positive "
                                "multiples of spatial_merge_size %d", im, g[0], g[1], g[2], m);
        N += (int64_t)g[0] * g[1] * g[2];
    }
    if (N != n_rows || N == 0)
        return iris_err_set(err, IRIS_EINVAL, "vision: pixel_values has %lld rows but the grids make %lld",
                            (long long)n_rows, (long long)N);
    int64_t T = N / (m * m);
    int wide = c->intermediate_size > 3 * H ? c->intermediate_size : 3 * H;
    float *x = malloc((size_t)(N * H) * sizeof(float));
    float *y = malloc((size_t)(N * H) * sizeof(float));
    float *big = malloc((size_t)(N * wide) * sizeof(float));
    float *cosv = malloc((size_t)(N * hd) * sizeof(float)), *sinv = malloc((size_t)(N * hd) * sizeof(float));
    float *tmp = malloc((size_t)(2 * H) * sizeof(float));
    out->n_tokens = (int)T;
    out->out_hidden = c->out_hidden_size;
    out->n_deepstack = c->n_deepstack;
    out->embeds = malloc((size_t)(T * c->out_hidden_size) * sizeof(float));
    out->deepstack = malloc((size_t)((c->n_deepstack ? c->n_deepstack : 1) * T * c->out_hidden_size) * sizeof(float));
    int rc = 0;
    if (!x || !y || !big || !cosv || !sinv || !tmp || !out->embeds || !out->deepstack)
        rc = iris_err_set(err, IRIS_ENOMEM, "vision: out of memory for %lld patches", (long long)N);

    /* 1. Conv3d (kernel = stride) as one matmul over the patch rows; 2. + position embedding. */
    if (!rc) {
        iris_vision_linear pe = {v->patch_w, v->patch_b};
        iris_st_tensor flat = *v->patch_w;
        flat.n_dims = 2;
        flat.shape[1] = v->patch_dim;
        pe.weight = &flat;
        rc = linear(pixel_values, N, &pe, x, err);
    }
    if (!rc) {
        int64_t row = 0;
        for (int im = 0; im < n_images; im++) {
            const int *g = grid_thw + 3 * im;
            add_pos_embed(v, x, row, g[0], g[1], g[2], tmp);
            row += (int64_t)g[0] * g[1] * g[2];
        }
        rotary_tables(v, grid_thw, n_images, cosv, sinv);
        if (trace) memcpy(trace, x, (size_t)(N * H) * sizeof(float));
    }

    /* 3. blocks */
    for (int il = 0; il < c->depth && !rc; il++) {
        const iris_vision_block *b = &v->blocks[il];
        rc = layernorm(x, N, H, &b->norm1, y, err);
        if (!rc) rc = linear(y, N, &b->qkv, big, err);
        if (rc) break;
        for (int64_t n = 0; n < N; n++)
            for (int h = 0; h < c->num_heads; h++) {
                rope_apply(big + n * 3 * H + h * hd, cosv + n * hd, sinv + n * hd, hd);
                rope_apply(big + n * 3 * H + H + h * hd, cosv + n * hd, sinv + n * hd, hd);
            }
        rc = attention(v, big, N, grid_thw, n_images, y, err);
        if (!rc) rc = linear(y, N, &b->proj, big, err);
        if (rc) break;
        for (int64_t i = 0; i < N * H; i++) x[i] += big[i];
        rc = layernorm(x, N, H, &b->norm2, y, err);
        if (!rc) rc = linear(y, N, &b->fc1, big, err);
        if (rc) break;
        gelu_tanh(big, (size_t)(N * c->intermediate_size));
        rc = linear(big, N, &b->fc2, y, err);
        if (rc) break;
        for (int64_t i = 0; i < N * H; i++) x[i] += y[i];
        if (trace) memcpy(trace + (int64_t)(il + 1) * N * H, x, (size_t)(N * H) * sizeof(float));
        for (int k = 0; k < c->n_deepstack && !rc; k++)
            if (c->deepstack_visual_indexes[k] == il)
                rc = merge(v, &v->deepstack[k], 1, x, N, out->deepstack + (int64_t)k * T * c->out_hidden_size, err);
    }

    /* 4. main merger */
    if (!rc) rc = merge(v, &v->merger, 0, x, N, out->embeds, err);
    free(x);
    free(y);
    free(big);
    free(cosv);
    free(sinv);
    free(tmp);
    if (rc) iris_vision_out_free(out);
    return rc;
}
