/* vision.c: the Qwen3-VL vision encoder (see vision.h for the pipeline).
 *
 * Layout: x is [N, hidden] row-major, N patches in merge-window order (the
 * order of pixel_values).  The HF quirks reproduced, with their sources in
 * QWEN3VL.md: align_corners position interpolation with transformers 5.17's
 * taps (§5.2), rotary ids (row, col) in merge-window order with rotate_half
 * pairing d <-> d + head_dim/2 (§5.3), attention per image (§5.4), tanh-GELU
 * in the blocks but erf-GELU in the mergers, LayerNorm before the shuffle in
 * the main merger and after it in the DeepStack mergers (§8.8-9).
 * Numerics are the backend's: on the CPU fp32 throughout, as transformers'
 * fp32 reference run (its norms accumulate in double); on CUDA bf16 with
 * fp32 accumulation.  On the CPU the patch embedding reads the prepared pixel
 * rows where they lie (pixels_in_place); elsewhere they are copied in. */
#include "vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "err.h"
#include "log.h"

#define LN_EPS 1e-6f

/* ---- weights ---------------------------------------------------------------------------- */

static iris_tensor view_of(const iris_st_tensor *t) {
    iris_tensor v = {.data = (void *)t->data, .dtype = t->dtype, .rows = t->n_dims >= 2 ? t->shape[0] : 1};
    v.cols = (int64_t)(t->n_elems / (uint64_t)v.rows);
    return v;
}

static int bind(const iris_st *st, const char *name, int n_dims, const int64_t *shape, iris_tensor *out,
                iris_err *err) {
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
    *out = view_of(t);
    return IRIS_OK;
}

static int bind_vec(const iris_st *st, const char *prefix, const char *suffix, int64_t n, iris_tensor *out,
                    iris_err *err) {
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
    void (*hf)(void *) = o->host_free ? o->host_free : free;
    if (o->embeds16) hf(o->embeds16);
    if (o->deepstack16) hf(o->deepstack16);
    memset(o, 0, sizeof *o);
}

/* ---- position embedding and rotary ------------------------------------------------------ */

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

/* ---- weights to a backend ------------------------------------------------------------------ */


int iris_vision_upload(iris_vision *v, iris_backend *b, iris_err *err) {
    if (b->host_weights) return IRIS_OK;
    int rc = iris_backend_place(b, &v->patch_w, err);
    if (!rc) rc = iris_backend_place(b, &v->patch_b, err);
    if (!rc) rc = iris_backend_place(b, &v->pos_embed, err);
    for (int i = 0; i < v->cfg.depth && !rc; i++) {
        iris_vision_block *k = &v->blocks[i];
        iris_tensor *all[] = {&k->norm1.weight, &k->norm1.bias, &k->norm2.weight, &k->norm2.bias, &k->qkv.weight,
                              &k->qkv.bias, &k->proj.weight, &k->proj.bias, &k->fc1.weight, &k->fc1.bias,
                              &k->fc2.weight, &k->fc2.bias};
        for (size_t j = 0; j < sizeof all / sizeof all[0] && !rc; j++) rc = iris_backend_place(b, all[j], err);
    }
    for (int k = -1; k < v->cfg.n_deepstack && !rc; k++) {
        iris_vision_merger *mg = k < 0 ? &v->merger : &v->deepstack[k];
        iris_tensor *all[] = {&mg->norm.weight, &mg->norm.bias, &mg->fc1.weight, &mg->fc1.bias, &mg->fc2.weight,
                              &mg->fc2.bias};
        for (size_t j = 0; j < sizeof all / sizeof all[0] && !rc; j++) rc = iris_backend_place(b, all[j], err);
    }
    if (!rc) v->on = b;
    return rc;
}

/* ---- the encoder ------------------------------------------------------------------------ */

static iris_tensor act(void *data, iris_dtype dt, int64_t rows, int64_t cols) {
    return (iris_tensor){.data = data, .dtype = dt, .rows = rows, .cols = cols};
}


#define OP(call)                                                               \
    do {                                                                       \
        if ((rc = (call))) {                                                   \
            iris_err_set(err, rc, "vision on %s: %s", b->name, b->err.msg);    \
            goto done;                                                         \
        }                                                                      \
    } while (0)

/* [N, H] rows → [N/m², out]: the main merger normalizes each patch before the
 * shuffle, a DeepStack merger the shuffled row; the shuffle itself is a view
 * ([N, H] and [N/4, 4H] are the same bytes in merge-window order). */
static int merge(iris_backend *b, const iris_vision_merger *mg, int postshuffle, const iris_tensor *x, void *d_a,
                 void *d_b, iris_tensor *out, iris_err *err) {
    int64_t N = x->rows, H = x->cols, T = out->rows, wide = N * H / T;
    iris_tensor a = postshuffle ? act(d_a, b->act, T, wide) : act(d_a, b->act, N, H);
    iris_tensor xw = act(x->data, b->act, T, wide), aw = act(d_a, b->act, T, wide), bw = act(d_b, b->act, T, wide);
    int rc = 0;
    OP(b->layer_norm(b, postshuffle ? &xw : x, &mg->norm.weight, &mg->norm.bias, LN_EPS, &a));
    OP(b->linear(b, &aw, &mg->fc1.weight, &mg->fc1.bias, &bw));
    OP(b->gelu_erf(b, &bw));
    OP(b->linear(b, &bw, &mg->fc2.weight, &mg->fc2.bias, out));
done:
    return rc;
}

typedef struct scratch {
    char *p;
    size_t left;
} scratch;

/* What an encode writes: one out for every image (each < n_out), or n_out 1: all in one. */
static int encode_on(const iris_vision *v, iris_backend *b, scratch *sc, const float *const *pixels,
                     const uint16_t *const *px16, const int *grid_thw, int n_images, iris_vision_out *outs,
                     int n_out, float *trace, int bf16, iris_err *err);

/* Image k's rows in a pixel_values of every image's rows in order: pointers into it (caller frees). */
static const float **split_pixels(const iris_vision *v, const float *pixel_values, int64_t n_rows,
                                  const int *grid_thw, int n_images, iris_err *err) {
    const float **px = malloc(sizeof *px * (size_t)(n_images > 0 ? n_images : 1));
    if (!px) {
        iris_err_set(err, IRIS_ENOMEM, "vision: out of memory");
        return NULL;
    }
    int64_t row = 0;
    for (int k = 0; k < n_images; k++) {
        const int *g = grid_thw + 3 * k;
        px[k] = row < n_rows ? pixel_values + row * v->patch_dim : NULL;
        row += (int64_t)g[0] * g[1] * g[2];
    }
    if (row != n_rows) {
        free(px);
        iris_err_set(err, IRIS_EINVAL, "vision: pixel_values has %lld rows but the grids make %lld",
                     (long long)n_rows, (long long)row);
        return NULL;
    }
    return px;
}

static int encode_rows(const iris_vision *v, iris_backend *b, scratch *sc, const float *pixel_values, int64_t n_rows,
                       const int *grid_thw, int n_images, iris_vision_out *out, float *trace, int bf16,
                       iris_err *err) {
    memset(out, 0, sizeof *out);
    const float **px = split_pixels(v, pixel_values, n_rows, grid_thw, n_images, err);
    if (!px) return err->code;
    int rc = encode_on(v, b, sc, px, NULL, grid_thw, n_images, out, 1, trace, bf16, err);
    free(px);
    return rc;
}

int iris_vision_encode_on(const iris_vision *v, iris_backend *b, const float *pixel_values, int64_t n_rows,
                          const int *grid_thw, int n_images, iris_vision_out *out, float *trace, iris_err *err) {
    return encode_rows(v, b, NULL, pixel_values, n_rows, grid_thw, n_images, out, trace, 0, err);
}

int iris_vision_encode_bf16(const iris_vision *v, iris_backend *b, void *scratch_mem, size_t scratch_bytes,
                            const float *pixel_values, int64_t n_rows, const int *grid_thw, int n_images,
                            iris_vision_out *out, iris_err *err) {
    if (b->act != IRIS_DT_BF16)
        return iris_err_set(err, IRIS_EINVAL, "vision: bf16 rows asked of a %s backend", b->name);
    scratch sc = {scratch_mem, scratch_bytes};
    return encode_rows(v, b, scratch_mem ? &sc : NULL, pixel_values, n_rows, grid_thw, n_images, out, NULL, 1, err);
}

int iris_vision_encode_each(const iris_vision *v, iris_backend *b, void *scratch_mem, size_t scratch_bytes, int bf16,
                            const float *const *pixels, const uint16_t *const *pixels16, const int *grid_thw,
                            int n_images, iris_vision_out *outs, iris_err *err) {
    for (int k = 0; k < n_images; k++) memset(&outs[k], 0, sizeof outs[k]);
    if (n_images < 1) return iris_err_set(err, IRIS_EINVAL, "vision: no images to encode");
    if (bf16 && (!b || b->act != IRIS_DT_BF16))
        return iris_err_set(err, IRIS_EINVAL, "vision: bf16 rows asked of a %s backend", b ? b->name : "cpu");
    iris_backend *own = NULL;
    if (!b) {
        int rc = iris_backend_cpu_open(&own, err);
        if (rc) return rc;
        b = own;
    }
    scratch sc = {scratch_mem, scratch_bytes};
    int rc = encode_on(v, b, scratch_mem ? &sc : NULL, pixels, pixels16, grid_thw, n_images, outs, n_images, NULL, bf16,
                       err);
    if (own) own->destroy(own);
    return rc;
}

/* The device buffers of an encode of N patches into T tokens: x, y [N, H]; big [N, wide]; pixels
 * [N, patch_dim]; tables [N, 6] int32 + [N, 4] fp32; out [T, out_hidden]; each 256-aligned. */
static size_t piece(size_t n) { return (n + 255) & ~(size_t)255; }

static void buffer_sizes(const iris_vision *v, size_t es, int64_t N, size_t sz[6]) {
    const iris_vision_config *c = &v->cfg;
    int64_t H = c->hidden_size, m = c->spatial_merge_size, T = N / (m * m);
    int64_t wide = c->intermediate_size > 3 * H ? c->intermediate_size : 3 * H;
    if (wide < H * m * m) wide = H * m * m;
    sz[0] = sz[1] = (size_t)N * H * es;
    sz[2] = (size_t)N * wide * es;
    sz[3] = (size_t)N * v->patch_dim * es;
    sz[4] = sizeof(int32_t) * (size_t)N * 6 + sizeof(float) * (size_t)N * 4;
    sz[5] = (size_t)T * c->out_hidden_size * es;
}

size_t iris_vision_scratch_bytes(const iris_vision *v, iris_dtype act, int64_t max_patches) {
    size_t sz[6], total = 0;
    buffer_sizes(v, iris_dtype_size(act), max_patches, sz);
    for (int i = 0; i < 6; i++) total += piece(sz[i]);
    return total;
}

/* A buffer from the scratch (carved, freed with it) or from the backend. */
static void *buffer(iris_backend *b, scratch *sc, size_t bytes) {
    if (!sc) return b->alloc(b, bytes);
    if (piece(bytes) > sc->left) return NULL;
    void *p = sc->p;
    sc->p += piece(bytes), sc->left -= piece(bytes);
    return p;
}

/* The output rows d [n] (activations) into the host at element off: fp32, or (bf16) the bits as they
 * are; into page-locked rows (pinned) without waiting where the backend can (the encode ends in a
 * sync, and d is rewritten only by ops ordered after the copy). */
static int rows_out(iris_backend *b, int bf16, int pinned, float *f, uint16_t *h, size_t off, const void *d, size_t n) {
    if (!bf16) return iris_backend_get_f32(b, f + off, d, n);
    if (pinned && b->download_async) return b->download_async(b, h + off, d, n * sizeof(uint16_t));
    return b->download(b, h + off, d, n * sizeof(uint16_t));
}

/* Host rows of an out of T tokens: fp32, or (bf16) page-locked where the backend has it (the
 * rows go to the host here and back to the device at prefill), else plain memory. */
static int out_alloc(iris_backend *b, int bf16, int64_t T, int64_t OH, int n_ds, iris_vision_out *o) {
    size_t n_ds_rows = (size_t)((n_ds ? n_ds : 1) * T * OH);
    o->n_tokens = (int)T;
    o->out_hidden = (int)OH;
    o->n_deepstack = n_ds;
    if (!bf16) {
        o->embeds = malloc(sizeof(float) * (size_t)(T * OH));
        o->deepstack = malloc(sizeof(float) * n_ds_rows);
        return o->embeds && o->deepstack ? 0 : -1;
    }
    if (b->host_alloc && b->host_free) {
        o->embeds16 = b->host_alloc(b, sizeof(uint16_t) * (size_t)(T * OH));
        o->deepstack16 = b->host_alloc(b, sizeof(uint16_t) * n_ds_rows);
        if (o->embeds16 && o->deepstack16) {
            o->host_free = b->host_free;
            return 0;
        }
        b->host_free(o->embeds16), b->host_free(o->deepstack16);
        o->embeds16 = o->deepstack16 = NULL;
    }
    o->embeds16 = malloc(sizeof(uint16_t) * (size_t)(T * OH));
    o->deepstack16 = malloc(sizeof(uint16_t) * n_ds_rows);
    return o->embeds16 && o->deepstack16 ? 0 : -1;
}

/* The merged rows d [T, OH] into the outs: DeepStack tap t (t < 0: the main merger's rows);
 * out k holds the tokens from tok0[k]. */
static int outs_put(iris_backend *b, int bf16, iris_vision_out *outs, int n_out, const int64_t *tok0, int t,
                    const void *d, int64_t OH, size_t es) {
    for (int k = 0; k < n_out; k++) {
        iris_vision_out *o = &outs[k];
        size_t off = t < 0 ? 0 : (size_t)t * o->n_tokens * OH, n = (size_t)o->n_tokens * OH;
        const char *src = (const char *)d + (size_t)tok0[k] * OH * es;
        int pinned = o->host_free != NULL;
        int rc = t < 0 ? rows_out(b, bf16, pinned, o->embeds, o->embeds16, off, src, n)
                       : rows_out(b, bf16, pinned, o->deepstack, o->deepstack16, off, src, n);
        if (rc) return rc;
    }
    return 0;
}

/* The pixel rows as the patch embedding's input where they lie, or NULL (copy them): on a backend
 * whose ops read host memory (host_weights) with fp32 activations (the CPU) the copy would hold the
 * same floats, so the rows are read in place when the images' rows follow each other in memory (one
 * image always; the encoder only reads them). */
static const float *pixels_in_place(const iris_vision *v, const iris_backend *b, const float *const *pixels,
                                    const int *grid_thw, int n_images) {
    if (!b->host_weights || b->act != IRIS_DT_F32) return NULL;
    const float *at = pixels[0];
    for (int im = 0; im < n_images; im++) {
        const int *g = grid_thw + 3 * im;
        if (pixels[im] != at) return NULL;
        at += (size_t)g[0] * g[1] * g[2] * v->patch_dim;
    }
    return pixels[0];
}

/* The images' pixel rows, one after another, into d (activations): bf16 rows as they are (px16[im]
 * on a BF16 backend), else converted from fp32. */
static int put_pixels(const iris_vision *v, iris_backend *b, void *d, const float *const *pixels,
                      const uint16_t *const *px16, const int *grid_thw, int n_images) {
    size_t es = iris_dtype_size(b->act);
    for (int im = 0, row = 0; im < n_images; im++) {
        const int *g = grid_thw + 3 * im;
        int rows = g[0] * g[1] * g[2], rc;
        char *dst = (char *)d + (size_t)row * v->patch_dim * es;
        size_t n = (size_t)rows * v->patch_dim;
        if ((rc = px16 && px16[im] && b->act == IRIS_DT_BF16 ? b->upload(b, dst, px16[im], n * sizeof(uint16_t))
                                                              : iris_backend_put_f32(b, dst, pixels[im], n)))
            return rc;
        row += rows;
    }
    return 0;
}

static int encode_on(const iris_vision *v, iris_backend *b, scratch *sc, const float *const *pixels,
                     const uint16_t *const *px16, const int *grid_thw, int n_images, iris_vision_out *outs,
                     int n_out, float *trace, int bf16, iris_err *err) {
    double t_in = iris_now_s();
    for (int k = 0; k < n_out; k++) memset(&outs[k], 0, sizeof outs[k]);
    const iris_vision_config *c = &v->cfg;
    int H = c->hidden_size, m = c->spatial_merge_size, nh = c->num_heads, hd = H / nh, S = v->grid_side;
    int64_t N = 0;
    for (int im = 0; im < n_images; im++) {
        const int *g = grid_thw + 3 * im;
        if (g[0] <= 0 || g[1] <= 0 || g[2] <= 0 || g[1] % m || g[2] % m)
            return iris_err_set(err, IRIS_EINVAL, "vision: image %d has grid (%d, %d, %d); h and w must be positive "
                                "multiples of spatial_merge_size %d", im, g[0], g[1], g[2], m);
        N += (int64_t)g[0] * g[1] * g[2];
    }
    if (N == 0 || (n_out != 1 && n_out != n_images))
        return iris_err_set(err, IRIS_EINVAL, "vision: %d images (%lld patches) into %d outputs", n_images,
                            (long long)N, n_out);
    int64_t T = N / (m * m), OH = c->out_hidden_size;
    int64_t wide = c->intermediate_size > 3 * H ? c->intermediate_size : 3 * H;
    if (wide < (int64_t)H * m * m) wide = (int64_t)H * m * m;
    size_t es = iris_dtype_size(b->act);
    int half = hd / 2, nf = half / 2;

    /* Host tables: position-embedding taps [N, 4] and weights, rotary positions [2][N]
     * (row, col in merge-window order), segments per image frame. */
    int32_t *h_idx = malloc(sizeof(int32_t) * (size_t)N * 6);
    float *h_w = malloc(sizeof(float) * (size_t)N * 4);
    int *cu = malloc(sizeof(int) * (size_t)(N + 1));
    float inv[512];
    int dim_of[512];
    int n_seg = 0, rc = 0, out_ok = 1;
    /* out k's first token among the T (one out: all of them) */
    int64_t tok0_one = 0, *tok0 = n_out == 1 ? &tok0_one : malloc(sizeof(int64_t) * (size_t)n_out);
    for (int k = 0, t0 = 0; tok0 && k < n_out; k++) {
        const int *g = grid_thw + 3 * k;
        int64_t Tk = n_out == 1 ? T : (int64_t)g[0] * g[1] * g[2] / (m * m);
        tok0[k] = t0, t0 += (int)Tk;
        out_ok &= out_alloc(b, bf16, Tk, OH, c->n_deepstack, &outs[k]) == 0;
    }
    size_t sz[6];
    buffer_sizes(v, es, N, sz);
    const float *pv_host = pixels_in_place(v, b, pixels, grid_thw, n_images);
    void *d_x = buffer(b, sc, sz[0]), *d_y = buffer(b, sc, sz[1]), *d_big = buffer(b, sc, sz[2]);
    void *d_pv = pv_host ? NULL : buffer(b, sc, sz[3]), *d_tab = buffer(b, sc, sz[4]), *d_out = buffer(b, sc, sz[5]);
    if (!h_idx || !h_w || !cu || !tok0 || !out_ok || !d_x || !d_y || !d_big || (!pv_host && !d_pv) || !d_tab ||
        !d_out || half > 512) {
        rc = iris_err_set(err, IRIS_ENOMEM, "vision: out of memory for %lld patches", (long long)N);
        goto done;
    }
    {
        int32_t *pidx = h_idx, *prc = h_idx + (size_t)N * 4;
        int64_t row = 0;
        cu[0] = 0;
        for (int im = 0; im < n_images; im++) {
            int t = grid_thw[3 * im], gh = grid_thw[3 * im + 1], gw = grid_thw[3 * im + 2];
            /* each grid row's and column's taps once */
            int *ti = malloc(sizeof(int) * 2 * (size_t)(gh + gw));
            float *tw = malloc(sizeof(float) * 2 * (size_t)(gh + gw));
            if (!ti || !tw) {
                free(ti), free(tw);
                rc = iris_err_set(err, IRIS_ENOMEM, "vision: out of memory for %lld patches", (long long)N);
                goto done;
            }
            for (int i = 0; i < gh; i++) taps(i, gh, S, ti + 2 * i, tw + 2 * i);
            for (int i = 0; i < gw; i++) taps(i, gw, S, ti + 2 * (gh + i), tw + 2 * (gh + i));
            /* rows in merge-window order: windows of m x m patches row by row, each window's
             * patches row by row (4,096 rows: 55-113 us with 64-bit divisions and the taps per row,
             * 9-15 us so; the dev VM) */
            for (int f = 0; f < t; f++) {
                for (int wr = 0; wr < gh / m; wr++)
                    for (int wc = 0; wc < gw / m; wc++)
                        for (int i = 0; i < m; i++)
                            for (int j = 0; j < m; j++, row++) {
                                int r = wr * m + i, cc = wc * m + j;
                                const int *ri = ti + 2 * r, *ci = ti + 2 * (gh + cc);
                                const float *rw = tw + 2 * r, *cw = tw + 2 * (gh + cc);
                                for (int a = 0; a < 2; a++)
                                    for (int k = 0; k < 2; k++) {
                                        pidx[row * 4 + a * 2 + k] = ri[a] * S + ci[k];
                                        h_w[row * 4 + a * 2 + k] = rw[a] * cw[k];
                                    }
                                prc[row] = r;
                                prc[N + row] = cc;
                            }
                cu[++n_seg] = (int)row;
            }
            free(ti), free(tw);
        }
    }
    /* 2-D rotary: slot j < half/2 rotates by the row, the next half/2 by the column (§5.3). */
    {
        double theta = c->rope_theta > 0 ? c->rope_theta : 10000.0;
        for (int j = 0; j < half; j++) {
            inv[j] = (float)(1.0 / pow(theta, (double)(2 * (j % nf)) / half));
            dim_of[j] = j < nf ? 0 : 1;
        }
    }
    int32_t *d_idx = d_tab, *d_rc = d_idx + (size_t)N * 4;
    float *d_w = (float *)(d_idx + (size_t)N * 6);
    OP(b->upload(b, d_tab, h_idx, sizeof(int32_t) * (size_t)N * 6));
    OP(b->upload(b, d_w, h_w, sizeof(float) * (size_t)N * 4));
    double t0 = iris_now_s();
    if (!pv_host) OP(put_pixels(v, b, d_pv, pixels, px16, grid_thw, n_images));
    double t1 = iris_now_s();

    iris_dtype A = b->act;
    iris_tensor x = act(d_x, A, N, H), y = act(d_y, A, N, H);
    iris_tensor pv = act(pv_host ? (void *)pv_host : d_pv, A, N, v->patch_dim);
    iris_tensor qkv = act(d_big, A, N, 3 * (int64_t)H), ff = act(d_big, A, N, c->intermediate_size);
    /* q and k heads side by side in each qkv row: the same rotation for both, one rope over 2 nh heads */
    iris_tensor qk = {.data = d_big, .dtype = A, .rows = N, .cols = 2 * (int64_t)H, .ld = 3 * (int64_t)H};

    /* 1. Conv3d (kernel = stride) as one matmul over the patch rows; 2. + interpolated position embedding. */
    OP(b->linear(b, &pv, &v->patch_w, &v->patch_b, &x));
    OP(b->interp4(b, &v->pos_embed, d_idx, d_w, (int)N, &y));
    OP(b->add(b, &x, &y));
    if (trace) OP(iris_backend_get_f32(b, trace, d_x, (size_t)N * H));

    /* 3. pre-norm blocks */
    for (int il = 0; il < c->depth; il++) {
        const iris_vision_block *bl = &v->blocks[il];
        OP(b->layer_norm(b, &x, &bl->norm1.weight, &bl->norm1.bias, LN_EPS, &y));
        OP(b->linear(b, &y, &bl->qkv.weight, &bl->qkv.bias, &qkv));          /* [N, 3H]: q | k | v */
        OP(b->rope(b, &qk, 2 * nh, hd, d_rc, (int)N, dim_of, inv));           /* q's and k's heads, one pass */
        OP(b->attn_segments(b, &qkv, nh, hd, cu, n_seg, &y));                 /* [N, H], per image */
        iris_tensor pr = act(d_big, A, N, H);
        OP(iris_backend_linear_epi(b, &y, &bl->proj.weight, &bl->proj.bias, IRIS_EPI_ADD, &x, &pr));
        OP(b->layer_norm(b, &x, &bl->norm2.weight, &bl->norm2.bias, LN_EPS, &y));
        OP(iris_backend_linear_epi(b, &y, &bl->fc1.weight, &bl->fc1.bias, IRIS_EPI_GELU_TANH, &ff, NULL));
        OP(iris_backend_linear_epi(b, &ff, &bl->fc2.weight, &bl->fc2.bias, IRIS_EPI_ADD, &x, &y));
        if (trace) OP(iris_backend_get_f32(b, trace + (int64_t)(il + 1) * N * H, d_x, (size_t)N * H));
        for (int t = 0; t < c->n_deepstack; t++)
            if (c->deepstack_visual_indexes[t] == il) {
                iris_tensor o = act(d_out, A, T, OH);
                if ((rc = merge(b, &v->deepstack[t], 1, &x, d_y, d_big, &o, err))) goto done;
                OP(outs_put(b, bf16, outs, n_out, tok0, t, d_out, OH, es));
            }
    }

    /* 4. main merger */
    {
        iris_tensor o = act(d_out, A, T, OH);
        if ((rc = merge(b, &v->merger, 0, &x, d_y, d_big, &o, err))) goto done;
        OP(outs_put(b, bf16, outs, n_out, tok0, -1, d_out, OH, es));
        OP(b->sync(b));
        double t2 = iris_now_s();
        iris_log(IRIS_LOG_DEBUG, "vision", "%lld patches on %s: tables %.2f ms, pixel upload %.2f ms, encoder and rows "
                 "out %.2f ms", (long long)N, b->name, (t0 - t_in) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3);
    }
done:
    free(h_idx), free(h_w), free(cu);
    if (tok0 != &tok0_one) free(tok0);
    void *dev[] = {d_x, d_y, d_big, d_pv, d_tab, d_out};
    for (size_t i = 0; !sc && i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) b->free(b, dev[i]);
    if (rc) b->sync(b); /* no copy still in flight into the rows freed here */
    for (int k = 0; rc && k < n_out; k++) iris_vision_out_free(&outs[k]);
    return rc;
}

int iris_vision_encode(const iris_vision *v, const float *pixel_values, int64_t n_rows, const int *grid_thw,
                       int n_images, iris_vision_out *out, float *trace, iris_err *err) {
    iris_backend *b = NULL;
    int rc = iris_backend_cpu_open(&b, err);
    if (rc) return rc;
    rc = iris_vision_encode_on(v, b, pixel_values, n_rows, grid_thw, n_images, out, trace, err);
    b->destroy(b);
    return rc;
}
