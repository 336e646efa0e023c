/* text.c: the Qwen3-VL text decoder over the backend ops (text.h; QWEN3VL.md §6);
 * also Qwen3ForCausalLM's, the same layers under "model." (config.h text_prefix).
 *
 * Straight-line forward, top to bottom; every buffer with its shape.  The
 * quirks reproduced: q/k RMSNorm per head before the rotary (§6.2); the
 * interleaved MRoPE frequency slots (j % 3 == 1 → h, == 2 → w, below
 * 3·mrope_section[k]) with NeoX rotate_half pairing d ↔ d + head_dim/2 (§6.4,
 * §8.4-5); GQA with q head j reading kv head j / (nq / nkv); DeepStack rows
 * added after layers 0..n-1 on image rows, prefill only (§6.2, §8.10); the
 * lm_head tied to the embeddings, or stored when the config unties it (§8.13).  The numerics are the backend's (backend.h).
 *
 * The forward reads a batch already laid out in backend memory (one flat
 * batch of rows, attention metadata, scratch: engine/runner.c prepares it);
 * it allocates nothing and never waits on the device unless tracing.  With
 * the table in host memory (embed_host) the batch brings the rows in h and
 * the lookup is skipped; an FP8 lm_head (lm_head_fp8) is quantized at load,
 * before the upload, and the logits take the backend's FP8 linear.  A 4-bit
 * checkpoint's ignore list is checked against what each linear stores. */
#include "text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "tools/quantize.h"

/* ---- loading ------------------------------------------------------------------------------ */

static void shape_str(char *buf, size_t n, const int64_t *shape, int nd) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < nd && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
}

static iris_tensor view_of(const iris_st_tensor *s) {
    iris_tensor t = {.data = (void *)s->data, .dtype = s->dtype};
    t.rows = s->n_dims == 2 ? s->shape[0] : 1;
    t.cols = s->n_dims == 2 ? s->shape[1] : s->shape[0];
    return t;
}

static int bind(const iris_st *st, const char *name, int nd, int64_t d0, int64_t d1, iris_tensor *out, iris_err *err) {
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
    if (t->dtype != IRIS_DT_BF16 && t->dtype != IRIS_DT_F32 && t->dtype != IRIS_DT_F16 &&
        !(nd == 2 && t->dtype == IRIS_DT_F8_E4M3))
        return iris_err_set(err, IRIS_EUNSUPPORTED, "text tensor \"%s\" has dtype %s; expected BF16, F16, F32%s", name,
                            iris_dtype_name(t->dtype), nd == 2 ? " or F8_E4M3" : "");
    *out = view_of(t);
    return IRIS_OK;
}

/* `<prefix>.<suffix>` as a 2-D tensor of the given shape and one of the dtypes in `dts`
 * ("I32", "BF16 or F16 or F32": its names in the message), or an error naming it. */
static const iris_st_tensor *bind_part(const iris_st *st, const char *prefix, const char *suffix, unsigned dt_mask,
                                       const char *dts, int64_t d0, int64_t d1, iris_err *err) {
    char name[300];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    const iris_st_tensor *t = iris_st_find(st, name);
    if (!t) {
        iris_err_set(err, IRIS_ENOTFOUND, "tensor \"%s.weight_packed\" is 4-bit but \"%s\" is missing", prefix, name);
        return NULL;
    }
    if (!(dt_mask >> t->dtype & 1) || t->n_dims != 2 || t->shape[0] != d0 || t->shape[1] != d1) {
        char g[128];
        shape_str(g, sizeof g, t->shape, t->n_dims);
        iris_err_set(err, IRIS_EFORMAT, "tensor \"%s\" is %s [%s]; config.json implies %s [%lld, %lld]", name,
                     iris_dtype_name(t->dtype), g, dts, (long long)d0, (long long)d1);
        return NULL;
    }
    return t;
}

/* A compressed-tensors pack-quantized linear (backend.h, I4): weight_packed I32 [out, in / 8],
 * weight_scale [out, in / group], weight_zero_point I32 [ceil(out / 8), in / group] when asymmetric,
 * weight_shape [out, in]; every shape checked against config.json before anything is read. */
static int bind_int4(const iris_st *st, const char *prefix, int64_t out, int64_t in, const iris_quant_config *q,
                     iris_tensor *l, iris_err *err) {
    char name[300];
    if (!q->int4)
        return iris_err_set(err, IRIS_EFORMAT,
                            "tensor \"%s.weight_packed\" is 4-bit but config.json has no compressed-tensors "
                            "quantization_config saying how (group size, zero points)",
                            prefix);
    int gs = q->group_size;
    if (in % gs)
        return iris_err_set(err, IRIS_EUNSUPPORTED, "linear \"%s\": %lld input columns are not a multiple of "
                            "group_size %d", prefix, (long long)in, gs);
    snprintf(name, sizeof name, "%s.weight_g_idx", prefix);
    if (iris_st_find(st, name))
        return iris_err_set(err, IRIS_EUNSUPPORTED, "tensor \"%s\": activation-ordered groups (GPTQ act-order) are "
                            "not supported", name);
    const unsigned scale_dts = 1u << IRIS_DT_BF16 | 1u << IRIS_DT_F16 | 1u << IRIS_DT_F32;
    const iris_st_tensor *pk = bind_part(st, prefix, "weight_packed", 1u << IRIS_DT_I32, "I32", out, in / 8, err);
    const iris_st_tensor *sc =
        pk ? bind_part(st, prefix, "weight_scale", scale_dts, "BF16, F16 or F32", out, in / gs, err) : NULL;
    if (!sc) return err ? err->code : IRIS_EFORMAT;
    snprintf(name, sizeof name, "%s.weight_shape", prefix);
    const iris_st_tensor *ws = iris_st_find(st, name);
    if (ws) {
        int64_t d[2] = {-1, -1};
        if (ws->n_dims == 1 && ws->shape[0] == 2 && ws->dtype == IRIS_DT_I64) memcpy(d, ws->data, sizeof d);
        if (ws->n_dims == 1 && ws->shape[0] == 2 && ws->dtype == IRIS_DT_I32)
            d[0] = ((const int32_t *)ws->data)[0], d[1] = ((const int32_t *)ws->data)[1];
        if (d[0] != out || d[1] != in)
            return iris_err_set(err, IRIS_EFORMAT, "tensor \"%s\" says [%lld, %lld]; config.json implies [%lld, %lld]",
                                name, (long long)d[0], (long long)d[1], (long long)out, (long long)in);
    }
    const iris_st_tensor *zp = NULL;
    snprintf(name, sizeof name, "%s.weight_zero_point", prefix);
    if (!q->symmetric || iris_st_find(st, name)) {
        zp = bind_part(st, prefix, "weight_zero_point", 1u << IRIS_DT_I32, "I32", (out + 7) / 8, in / gs, err);
        if (!zp) return err ? err->code : IRIS_EFORMAT;
    }
    *l = (iris_tensor){.data = (void *)pk->data, .dtype = IRIS_DT_I4, .rows = out, .cols = in,
                       .qscale = sc->data, .qscale_dtype = sc->dtype, .qzero = zp ? zp->data : NULL, .group = gs};
    return IRIS_OK;
}

static int bind_linear(const iris_st *st, const char *prefix, int64_t out, int64_t in, const iris_quant_config *q,
                       iris_tensor *l, iris_err *err) {
    const int *block = q->weight_block_size;
    char name[300];
    snprintf(name, sizeof name, "%s.weight", prefix);
    if (!iris_st_find(st, name)) {
        snprintf(name, sizeof name, "%s.weight_packed", prefix);
        if (iris_st_find(st, name)) return bind_int4(st, prefix, out, in, q, l, err);
        snprintf(name, sizeof name, "%s.weight", prefix);
    }
    int rc = bind(st, name, 2, out, in, l, err);
    if (rc || l->dtype != IRIS_DT_F8_E4M3) return rc;
    snprintf(name, sizeof name, "%s.weight_scale_inv", prefix);
    const iris_st_tensor *s = iris_st_find(st, name);
    if (!s) return iris_err_set(err, IRIS_EFORMAT, "tensor \"%s.weight\" is F8_E4M3 but \"%s\" is missing", prefix, name);
    int bo = block[0] > 0 ? block[0] : 128, bi = block[1] > 0 ? block[1] : 128;
    int64_t so = (out + bo - 1) / bo, si = (in + bi - 1) / bi;
    if (s->dtype != IRIS_DT_F32 || s->n_dims != 2 || s->shape[0] != so || s->shape[1] != si) {
        char g[128];
        shape_str(g, sizeof g, s->shape, s->n_dims);
        return iris_err_set(err, IRIS_EFORMAT, "tensor \"%s\" is %s [%s]; expected F32 [%lld, %lld] for %dx%d blocks",
                            name, iris_dtype_name(s->dtype), g, (long long)so, (long long)si, bo, bi);
    }
    l->scale = s->data;
    l->block[0] = bo;
    l->block[1] = bi;
    return IRIS_OK;
}

/* A 4-bit checkpoint's ignore list (config.h): a linear it names must be stored unquantized (it
 * loads in its stored dtype; *n counts them); one it does not name may be either (a recipe's
 * targets can leave it out). */
static int check_ignored(const iris_quant_config *q, const char *name, int il, int k, const iris_tensor *w, int *n,
                         iris_err *err) {
    if (!q->int4 || !iris_quant_ignores(q, il, k)) return IRIS_OK;
    if (w->dtype == IRIS_DT_I4)
        return iris_err_set(err, IRIS_EFORMAT,
                            "tensor \"%s.weight_packed\": quantization_config.ignore names \"%s\", but it is stored "
                            "4-bit; the checkpoint and its config disagree",
                            name, name);
    (*n)++;
    return IRIS_OK;
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

int iris_text_load(const iris_st *st, const iris_config *cfg, iris_text *t, iris_err *err) {
    memset(t, 0, sizeof *t);
    const iris_text_config *c = &cfg->text_config;
    t->cfg = *c;
    t->image_token_id = cfg->image_token_id;
    t->video_token_id = cfg->video_token_id;
    int64_t H = c->hidden_size, FF = c->intermediate_size, hd = c->head_dim, V = c->vocab_size;
    int64_t nq = c->num_attention_heads, nkv = c->num_key_value_heads;
    if (hd / 2 > 512 || hd % 2) return iris_err_set(err, IRIS_EUNSUPPORTED, "head_dim %lld: must be even and at most 1024", (long long)hd);
    for (int j = 0; j < hd / 2; j++) {
        t->inv_freq[j] = (float)(1.0 / pow(c->rope_theta, (double)(2 * j) / (double)hd));
        t->dim_of[j] = mrope_dim(c, j);
    }
    const iris_quant_config *blk = &cfg->quantization_config;
    const char *P = cfg->text_prefix[0] ? cfg->text_prefix : "model.language_model.";
    char name[300];
    int rc;
    snprintf(name, sizeof name, "%sembed_tokens.weight", P);
    if ((rc = bind(st, name, 2, V, H, &t->embed_tokens, err))) return rc;
    snprintf(name, sizeof name, "%snorm.weight", P);
    if ((rc = bind(st, name, 1, H, 0, &t->norm, err))) return rc;
    /* transformers ties by the top-level tie_word_embeddings, even over a stored lm_head.weight
     * (the planner skips such a copy); untied (the 8B), lm_head.weight must be stored. */
    if (cfg->tie_word_embeddings) {
        t->lm_head = t->embed_tokens;
    } else if (iris_st_find(st, "lm_head.weight") || iris_st_find(st, "lm_head.weight_packed")) {
        if ((rc = bind_linear(st, "lm_head", V, H, blk, &t->lm_head, err))) return rc;
        if (blk->int4 && blk->lm_head_ignored && t->lm_head.dtype == IRIS_DT_I4)
            return iris_err_set(err, IRIS_EFORMAT, "tensor \"lm_head.weight_packed\": quantization_config.ignore "
                                "names \"lm_head\", but it is stored 4-bit; the checkpoint and its config disagree");
    } else {
        return iris_err_set(err, IRIS_ENOTFOUND,
                            "tensor \"lm_head.weight\" is missing and config.json does not tie it to the embeddings "
                            "(tie_word_embeddings is false)");
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
#define LIN(field, key, o, i, k)                                               \
    snprintf(name, sizeof name, "%s" key, pre);                               \
    if ((rc = bind_linear(st, name, o, i, blk, &L->field, err))) goto fail;   \
    if ((rc = check_ignored(blk, name, il, k, &L->field, &t->n_ignored, err))) goto fail; \
    t->n_fp8 += L->field.dtype == IRIS_DT_F8_E4M3;                              \
    t->n_int4 += L->field.dtype == IRIS_DT_I4;
        VEC(input_layernorm, "input_layernorm.weight", H);
        VEC(post_attention_layernorm, "post_attention_layernorm.weight", H);
        VEC(q_norm, "self_attn.q_norm.weight", hd);
        VEC(k_norm, "self_attn.k_norm.weight", hd);
        LIN(q_proj, "self_attn.q_proj", nq * hd, H, 0);
        LIN(k_proj, "self_attn.k_proj", nkv * hd, H, 1);
        LIN(v_proj, "self_attn.v_proj", nkv * hd, H, 2);
        LIN(o_proj, "self_attn.o_proj", H, nq * hd, 3);
        LIN(gate_proj, "mlp.gate_proj", FF, H, 4);
        LIN(up_proj, "mlp.up_proj", FF, H, 5);
        LIN(down_proj, "mlp.down_proj", H, FF, 6);
#undef VEC
#undef LIN
    }
    /* the table decode_layers takes (backend.h), once: the tensors' addresses do not move */
    t->dl_weights = malloc(sizeof *t->dl_weights * (size_t)c->num_hidden_layers);
    if (!t->dl_weights) {
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
        goto fail;
    }
    for (int il = 0; il < c->num_hidden_layers; il++) {
        iris_text_layer *Ly = &t->layers[il];
        const iris_tensor *w[IRIS_DL_N] = {
            [IRIS_DL_INPUT_NORM] = &Ly->input_layernorm, [IRIS_DL_POST_NORM] = &Ly->post_attention_layernorm,
            [IRIS_DL_Q_NORM] = &Ly->q_norm, [IRIS_DL_K_NORM] = &Ly->k_norm, [IRIS_DL_Q] = &Ly->q_proj,
            [IRIS_DL_K] = &Ly->k_proj, [IRIS_DL_V] = &Ly->v_proj, [IRIS_DL_O] = &Ly->o_proj,
            [IRIS_DL_GATE] = &Ly->gate_proj, [IRIS_DL_UP] = &Ly->up_proj, [IRIS_DL_DOWN] = &Ly->down_proj};
        memcpy(t->dl_weights[il], w, sizeof w);
    }
    return IRIS_OK;
fail:
    iris_text_free(t);
    return rc;
}

/* One weight into backend memory (with its FP8 scales). */

int iris_text_upload(iris_text *t, iris_backend *b, iris_err *err) {
    if (b->host_weights) return IRIS_OK; /* the backend reads the mmap'd views in place */
    /* Tied and on the device: the logits read the table; a host table leaves the lm_head its own copy. */
    int tied = t->lm_head.data == t->embed_tokens.data && !t->embed_host;
    int rc = t->embed_host ? 0 : iris_backend_place(b, &t->embed_tokens, err);
    if (!rc) rc = iris_backend_place(b, &t->norm, err);
    if (!rc) rc = tied ? (t->lm_head = t->embed_tokens, 0) : iris_backend_place(b, &t->lm_head, err);
    if (!rc && t->lm_head_q) {
        free(t->lm_head_q), free(t->lm_head_s); /* the device holds the copy now */
        t->lm_head_q = NULL, t->lm_head_s = NULL;
    }
    for (int il = 0; !rc && il < t->cfg.num_hidden_layers; il++) {
        iris_text_layer *L = &t->layers[il];
        iris_tensor *all[] = {&L->input_layernorm, &L->post_attention_layernorm, &L->q_norm, &L->k_norm,
                              &L->o_proj, &L->down_proj};
        for (size_t i = 0; !rc && i < sizeof all / sizeof all[0]; i++) rc = iris_backend_place(b, all[i], err);
        iris_tensor *qkv[] = {&L->q_proj, &L->k_proj, &L->v_proj}, *gu[] = {&L->gate_proj, &L->up_proj};
        if (!rc) rc = iris_backend_place_group(b, qkv, 3, err);
        if (!rc) rc = iris_backend_place_group(b, gu, 2, err);
    }
    if (!rc) t->on = b;
    return rc;
}

int iris_text_densify(iris_text *t, iris_backend *b, iris_err *err) {
    if (!b->densify || t->on != b) return IRIS_OK;
    for (int il = 0; il < t->cfg.num_hidden_layers; il++) {
        iris_text_layer *L = &t->layers[il];
        iris_tensor *all[] = {&L->q_proj, &L->k_proj, &L->v_proj, &L->o_proj, &L->gate_proj, &L->up_proj, &L->down_proj};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if (all[i]->dtype == IRIS_DT_F8_E4M3 && b->densify(b, all[i]))
                return iris_err_set(err, IRIS_ENOMEM, "layer %d: %s", il, b->err.msg);
    }
    return IRIS_OK;
}

int iris_text_embed_host(iris_text *t, iris_err *err) {
    if (t->on) return iris_err_set(err, IRIS_EINVAL, "the embeddings must stay on the host before the weights are placed");
    if (t->embed_tokens.dtype != IRIS_DT_BF16 && t->embed_tokens.dtype != IRIS_DT_F32)
        return iris_err_set(err, IRIS_EUNSUPPORTED, "embeddings in host memory: the table is %s (BF16 or F32 are read)",
                            iris_dtype_name(t->embed_tokens.dtype));
    t->embed_host = 1;
    return IRIS_OK;
}

int iris_text_lm_head_fp8(iris_text *t, iris_err *err) {
    iris_tensor *w = &t->lm_head;
    if (t->on) return iris_err_set(err, IRIS_EINVAL, "--lm-head-dtype fp8: the weights are already placed");
    if (w->dtype == IRIS_DT_F8_E4M3) return IRIS_OK;  /* stored so already */
    if (w->dtype != IRIS_DT_BF16 && w->dtype != IRIS_DT_F32)
        return iris_err_set(err, IRIS_EUNSUPPORTED, "--lm-head-dtype fp8: the lm_head is stored as %s; a BF16 or F32 "
                            "one is quantized (give --lm-head-dtype stored)", iris_dtype_name(w->dtype));
    int64_t rows = w->rows, cols = w->cols, B = IRIS_FP8_BLOCK;
    size_t n_s = (size_t)((rows + B - 1) / B * ((cols + B - 1) / B));
    t->lm_head_q = malloc((size_t)(rows * cols));
    t->lm_head_s = malloc(n_s * sizeof(float));
    if (!t->lm_head_q || !t->lm_head_s) {
        free(t->lm_head_q), free(t->lm_head_s);
        t->lm_head_q = NULL, t->lm_head_s = NULL;
        return iris_err_set(err, IRIS_ENOMEM, "--lm-head-dtype fp8: out of host memory for %lld x %lld codes",
                            (long long)rows, (long long)cols);
    }
    int rc = iris_quantize_fp8_matrix("lm_head.weight", w->data, w->dtype, rows, cols, t->lm_head_q, t->lm_head_s, err);
    if (rc) return rc;
    *w = (iris_tensor){.data = t->lm_head_q, .dtype = IRIS_DT_F8_E4M3, .rows = rows, .cols = cols,
                       .scale = t->lm_head_s, .block = {(int)B, (int)B}};
    t->lm_head_fp8 = 1;
    return IRIS_OK;
}

int iris_text_embed_rows(const iris_text *t, const int32_t *tokens, int n, iris_dtype act, void *dst, iris_err *err) {
    const iris_tensor *e = &t->embed_tokens;
    const int64_t H = e->cols, V = e->rows;
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= V)
            return iris_err_set(err, IRIS_EINVAL, "token id %d is outside the vocabulary (%lld)", tokens[i], (long long)V);
        const char *src = (const char *)e->data + (size_t)tokens[i] * (size_t)iris_tensor_ld(e) * iris_dtype_size(e->dtype);
        if (act == e->dtype) {
            memcpy((char *)dst + (size_t)i * (size_t)H * iris_dtype_size(act), src, (size_t)H * iris_dtype_size(act));
        } else if (act == IRIS_DT_F32 && e->dtype == IRIS_DT_BF16) {
            float *d = (float *)dst + (size_t)i * (size_t)H;
            const uint16_t *s16 = (const uint16_t *)src;
            for (int64_t c = 0; c < H; c++) {
                uint32_t u = (uint32_t)s16[c] << 16;
                memcpy(&d[c], &u, sizeof u);
            }
        } else {
            return iris_err_set(err, IRIS_EUNSUPPORTED, "embeddings in host memory: %s rows for %s activations",
                                iris_dtype_name(e->dtype), iris_dtype_name(act));
        }
    }
    return IRIS_OK;
}

void iris_text_free(iris_text *t) {
    if (!t) return;
    free(t->lm_head_q), free(t->lm_head_s);
    t->lm_head_q = NULL, t->lm_head_s = NULL;
    free(t->layers);
    t->layers = NULL;
    free(t->dl_weights);
    t->dl_weights = NULL;
}

int iris_kv_cache_init(iris_kv_cache *kv, const iris_text_config *c, int n_blocks, iris_backend *b, iris_err *err) {
    return iris_kv_cache_init_dtype(kv, c, n_blocks, b->act, b, err);
}

int iris_kv_cache_init_dtype(iris_kv_cache *kv, const iris_text_config *c, int n_blocks, iris_dtype dt,
                             iris_backend *b, iris_err *err) {
    memset(kv, 0, sizeof *kv);
    if (n_blocks <= 0) return iris_err_set(err, IRIS_EINVAL, "KV cache: %d blocks; need at least 1", n_blocks);
    if (dt != b->act && dt != IRIS_DT_F8_E4M3)
        return iris_err_set(err, IRIS_EUNSUPPORTED, "KV cache: dtype %s (the backend's %s or F8_E4M3)",
                            iris_dtype_name(dt), iris_dtype_name(b->act));
    kv->b = b;
    kv->n_layers = c->num_hidden_layers;
    kv->n_blocks = n_blocks;
    kv->layers = calloc((size_t)kv->n_layers, sizeof *kv->layers);
    if (!kv->layers) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    size_t bytes = (size_t)n_blocks * IRIS_KV_BLOCK * (size_t)(c->num_key_value_heads * c->head_dim) * iris_dtype_size(dt);
    for (int il = 0; il < kv->n_layers; il++) {
        iris_kv_layer *L = &kv->layers[il];
        L->dtype = dt;
        L->n_blocks = n_blocks;
        L->n_kv_heads = c->num_key_value_heads;
        L->head_dim = c->head_dim;
        L->k = b->alloc(b, bytes);
        L->v = b->alloc(b, bytes);
        if (!L->k || !L->v) {
            iris_kv_cache_free(kv);
            return iris_err_set(err, IRIS_ENOMEM, "KV cache: out of memory for %d blocks x %d layers (%zu MiB)", n_blocks,
                                c->num_hidden_layers, 2 * bytes * (size_t)c->num_hidden_layers >> 20);
        }
    }
    return IRIS_OK;
}

void iris_kv_cache_free(iris_kv_cache *kv) {
    if (!kv || !kv->layers) return;
    for (int il = 0; il < kv->n_layers; il++) {
        if (kv->layers[il].k) kv->b->free(kv->b, kv->layers[il].k);
        if (kv->layers[il].v) kv->b->free(kv->b, kv->layers[il].v);
    }
    free(kv->layers);
    kv->layers = NULL;
}


/* ---- the forward pass ------------------------------------------------------------------------- */

static iris_tensor act(const void *data, iris_dtype dt, int64_t rows, int64_t cols) {
    return (iris_tensor){.data = (void *)data, .dtype = dt, .rows = rows, .cols = cols};
}

#define OP(call)                                                               \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_) return iris_err_set(err, rc_, "%s backend: %s", b->name, b->err.msg); \
    } while (0)

static int trace_out(iris_backend *b, const iris_text_batch *x, int il, int H, iris_text_trace_fn trace, void *ud) {
    int rc = iris_backend_get_f32(b, x->trace_h, x->h, (size_t)x->n_rows * H);
    if (!rc) trace(ud, il, x->trace_h, x->n_rows, H);
    return rc;
}

int iris_text_forward(const iris_text *t, iris_backend *b, iris_kv_cache *kv, const iris_text_batch *x,
                      iris_text_trace_fn trace, void *trace_ud, iris_err *err) {
    const iris_text_config *c = &t->cfg;
    const int H = c->hidden_size, FF = c->intermediate_size, hd = c->head_dim;
    const int nq = c->num_attention_heads, nkv = c->num_key_value_heads, L = c->num_hidden_layers;
    const int V = c->vocab_size, R = x->n_rows, n_img = x->n_img, n_ds = x->n_deepstack;
    const size_t es = iris_dtype_size(b->act);
    const iris_dtype A = b->act;
    if (trace && !x->trace_h) return iris_err_set(err, IRIS_EINVAL, "text step: a trace without its host buffer");

    iris_tensor h = act(x->h, A, R, H), xs = act(x->x, A, R, H);                      /* [R, H] */
    iris_tensor q = act(x->q, A, R, (int64_t)nq * hd), o = act(x->o, A, R, (int64_t)nq * hd); /* [R, nq·hd] */
    iris_tensor k = act(x->k, A, R, (int64_t)nkv * hd), v = act(x->v, A, R, (int64_t)nkv * hd); /* [R, nkv·hd] */
    iris_tensor g = act(x->g, A, R, FF), u = act(x->u, A, R, FF);                     /* [R, FF] */
    iris_tensor qkv = act(x->q, A, R, (int64_t)(nq + 2 * nkv) * hd), gu = act(x->g, A, R, 2 * (int64_t)FF);
    iris_tensor img = act(x->img, A, n_img, H);                                       /* [n_img, H] */

    /* Embeddings; image-token rows take the vision tower's rows. */
    if (t->embed_host && !x->h_embedded)
        return iris_err_set(err, IRIS_EINVAL, "text step: the embeddings are in host memory and the batch brings no rows");
    if (!x->h_embedded) OP(b->embed(b, &t->embed_tokens, x->tokens, R, &h));
    if (n_img) OP(b->set_rows(b, &h, x->img_rows, &img));

    /* A decode-only step may take every layer in one backend call (decode_layers; it declines the
     * steps it does not take, and the ops below run them). */
    int stacked = 0;
    if (b->decode_layers && t->dl_weights && !trace && n_img == 0 && R == x->meta->n_seqs) {
        iris_decode_stack ds = {.n_layers = L, .w = (const iris_tensor *const(*)[IRIS_DL_N])t->dl_weights,
                                .kv = kv->layers, .h = &h, .q = &q, .k = &k, .v = &v, .o = &o, .g = &g,
                                .eps = c->rms_norm_eps, .n_q_heads = nq, .pos = x->pos, .pos_stride = R,
                                .dim_of = t->dim_of, .inv_freq = t->inv_freq, .meta = x->meta};
        int rc = b->decode_layers(b, &ds);
        if (rc < 0) OP(rc);
        stacked = rc == 0;
    }

    /* The residual adds go with the next RMSNorm (iris_backend_add_rms_norm: one kernel on CUDA):
     * `pending` says xs holds the MLP's output, not yet added to h. */
    int pending = 0;
    for (int il = 0; !stacked && il < L; il++) {
        const iris_text_layer *Ly = &t->layers[il];
        if (trace) {
            if (pending) OP(b->add(b, &h, &xs));
            pending = 0;
            OP(trace_out(b, x, il, H, trace, trace_ud));
        }
        /* Attention block: h += xs (the last MLP), xs = norm(h); q/k norms, rotary and the cache
         * write in one. */
        OP(iris_backend_add_rms_norm(b, &h, pending ? &xs : NULL, &Ly->input_layernorm, c->rms_norm_eps, &xs));
        /* q, k, v (and g) as allocated; linear_n (linear_swiglu) may leave them column views of qkv (gu) */
        q = act(x->q, A, R, (int64_t)nq * hd), k = act(x->k, A, R, (int64_t)nkv * hd), v = act(x->v, A, R, (int64_t)nkv * hd);
        g = act(x->g, A, R, FF);
        const iris_tensor *ws[3] = {&Ly->q_proj, &Ly->k_proj, &Ly->v_proj};
        iris_tensor *ys[3] = {&q, &k, &v};
        OP(iris_backend_linear_n(b, &xs, 3, ws, ys, &qkv));                            /* q, k, v */
        OP(iris_backend_qk_norm_rope_attn(b, &q, &k, &v, &Ly->q_norm, &Ly->k_norm, c->rms_norm_eps, nq, x->pos, R,
                                          t->dim_of, t->inv_freq, &kv->layers[il], x->meta, &o));
        OP(b->linear(b, &o, &Ly->o_proj, NULL, &xs));                                  /* [R, H] */
        /* MLP block: h += xs (attention), xs = norm(h). */
        OP(iris_backend_add_rms_norm(b, &h, &xs, &Ly->post_attention_layernorm, c->rms_norm_eps, &xs));
        OP(iris_backend_linear_swiglu(b, &xs, &Ly->gate_proj, &Ly->up_proj, &g, &u, &gu)); /* g = silu(gate)·up */
        OP(b->linear(b, &g, &Ly->down_proj, NULL, &xs));                               /* [R, H] */
        pending = 1;
        /* DeepStack: the vision tower's tap il joins the image rows (prefill only). */
        if (n_img && il < n_ds) {
            OP(b->add(b, &h, &xs));
            pending = 0;
            iris_tensor tap = act((const char *)x->img + (size_t)(1 + il) * n_img * H * es, A, n_img, H);
            OP(b->add_rows(b, &h, x->img_rows, &tap));
        }
    }
    if (pending) OP(b->add(b, &h, &xs));
    if (trace) OP(trace_out(b, x, L, H, trace, trace_ud));

    /* Final norm and the logits of the wanted rows: [n_logits, H] -> [n_logits, V]. */
    if (x->n_logits > 0) {
        iris_tensor xl = act(x->x, A, x->n_logits, H), lg = act(x->logits, A, x->n_logits, V);
        OP(b->get_rows(b, &h, x->logit_rows, x->n_logits, &xl));
        OP(b->rms_norm(b, &xl, &t->norm, c->rms_norm_eps, &xl));
        OP(b->linear(b, &xl, &t->lm_head, NULL, &lg));
    }
    return IRIS_OK;
}
