/* text.c: the Qwen3-VL text decoder over the backend ops (text.h; QWEN3VL.md §6).
 *
 * Straight-line forward, top to bottom; every buffer with its shape.  The
 * quirks reproduced: q/k RMSNorm per head before the rotary (§6.2); the
 * interleaved MRoPE frequency slots (j % 3 == 1 → h, == 2 → w, below
 * 3·mrope_section[k]) with NeoX rotate_half pairing d ↔ d + head_dim/2 (§6.4,
 * §8.4-5); GQA with q head j reading kv head j / (nq / nkv); DeepStack rows
 * added after layers 0..n-1 on image rows, prefill only (§6.2, §8.10); tied
 * lm_head (§8.13).  The numerics are the backend's (backend.h).
 *
 * Per step, the host lays the sequences out as one flat batch of rows and
 * builds the attention metadata (row → sequence, visible context, cache slot,
 * block tables); everything the ops read is uploaded once per step. */
#include "text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

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

static int bind_linear(const iris_st *st, const char *prefix, int64_t out, int64_t in, const int block[2],
                       iris_tensor *l, iris_err *err) {
    char name[300];
    snprintf(name, sizeof name, "%s.weight", prefix);
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
        t->lm_head = t->embed_tokens;
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
    t->n_fp8 += L->field.dtype == IRIS_DT_F8_E4M3;
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
    int tied = t->lm_head.data == t->embed_tokens.data;
    int rc = iris_backend_place(b, &t->embed_tokens, err);
    if (!rc) rc = iris_backend_place(b, &t->norm, err);
    if (!rc) rc = tied ? (t->lm_head = t->embed_tokens, 0) : iris_backend_place(b, &t->lm_head, err);
    for (int il = 0; !rc && il < t->cfg.num_hidden_layers; il++) {
        iris_text_layer *L = &t->layers[il];
        iris_tensor *all[] = {&L->input_layernorm, &L->post_attention_layernorm, &L->q_norm, &L->k_norm, &L->q_proj,
                              &L->k_proj, &L->v_proj, &L->o_proj, &L->gate_proj, &L->up_proj, &L->down_proj};
        for (size_t i = 0; !rc && i < sizeof all / sizeof all[0]; i++) rc = iris_backend_place(b, all[i], err);
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

static void graphs_free(struct iris_text_graphs *g);

void iris_text_free(iris_text *t) {
    if (!t) return;
    graphs_free(t->graphs);
    t->graphs = NULL;
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


/* ---- the forward pass --------------------------------------------------------------------------- */

#define NBUF 24

typedef struct {
    iris_backend *b;
    void *bufs[NBUF];
    int n;
} step_mem;

static void *step_alloc(step_mem *m, size_t bytes) {
    if (m->n == NBUF) return NULL;
    void *p = m->b->alloc(m->b, bytes ? bytes : 1);
    if (p) m->bufs[m->n++] = p;
    return p;
}

static void step_free(step_mem *m) {
    for (int i = 0; i < m->n; i++) m->b->free(m->b, m->bufs[i]);
    m->n = 0;
}

static iris_tensor act(void *data, iris_dtype dt, int64_t rows, int64_t cols) {
    return (iris_tensor){.data = data, .dtype = dt, .rows = rows, .cols = cols};
}

/* ---- decode steps as graphs ------------------------------------------------------------------
 * A step whose rows are all decode rows (one new token per sequence, no image rows, no trace) on a
 * backend with graph hooks is recorded once and replayed: the ~13 kernels of each layer then cost
 * one launch.  What the recorded kernels take by value must be the same at every replay: the row
 * count (= sequences), the logits rows, the block-table width and the attention split count
 * derived from it, and every buffer address.  So: one set of step buffers kept for all graphs
 * (sized for the most rows and the widest tables seen; growing it drops the graphs), the table
 * width rounded up to GRAPH_BLOCKS blocks (the columns past a sequence's blocks are never read:
 * the kernels take each row's context from device metadata), and a graph per (sequences, logits
 * rows, width, cache).  The step's metadata is uploaded into the kept buffer before each replay.
 * IRIS_CUDA_GRAPHS=0 turns it off. */
#define GRAPH_SLOTS 16
#define GRAPH_BLOCKS IRIS_ATTN_PLAN_BLOCKS

typedef struct graph_slot {
    int n_seqs, n_logits, max_blocks;
    uint64_t kv;               /* hash of the cache's layer buffers: the graph writes into them */
    void *graph;
    uint64_t used;
} graph_slot;

struct iris_text_graphs {
    iris_backend *b;
    int rows_cap, blocks_cap;
    void *buf;                 /* one allocation: meta, h, x, q, k, v, o, g, u, logits */
    graph_slot slot[GRAPH_SLOTS];
    uint64_t tick;
    int broken;                /* a capture failed: plain steps from then on */
};

static void graphs_drop(struct iris_text_graphs *g) {
    for (int i = 0; i < GRAPH_SLOTS; i++) {
        if (g->slot[i].graph) g->b->graph_free(g->slot[i].graph);
        memset(&g->slot[i], 0, sizeof g->slot[i]);
    }
    if (g->buf) g->b->free(g->b, g->buf);
    g->buf = NULL;
    g->rows_cap = g->blocks_cap = 0;
}

static void graphs_free(struct iris_text_graphs *g) {
    if (!g) return;
    graphs_drop(g);
    free(g);
}

static int graphs_enabled(void) {
    const char *e = getenv("IRIS_CUDA_GRAPHS");
    return !(e && !strcmp(e, "0"));
}

/* Byte offsets of the kept buffers for rows_cap rows and blocks_cap-wide tables. */
typedef struct graph_layout {
    size_t meta, h, x, q, k, v, o, g, u, lg, total;
} graph_layout;

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

static uint64_t kv_hash(const iris_kv_cache *kv) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < kv->n_layers; i++) {
        h = (h ^ (uint64_t)(uintptr_t)kv->layers[i].k) * 1099511628211ull;
        h = (h ^ (uint64_t)(uintptr_t)kv->layers[i].v) * 1099511628211ull;
    }
    return h;
}

static graph_layout graph_layout_of(const iris_text_config *c, size_t es, int rows, int blocks) {
    graph_layout L;
    size_t R = (size_t)rows, o = 0;
    size_t ints = R * 7 + R * (size_t)blocks + R;   /* + logits rows */
    L.meta = o, o += align256(ints * 4);
    L.h = o, o += align256(R * c->hidden_size * es);
    L.x = o, o += align256(R * c->hidden_size * es);
    L.q = o, o += align256(R * c->num_attention_heads * c->head_dim * es);
    L.k = o, o += align256(R * c->num_key_value_heads * c->head_dim * es);
    L.v = o, o += align256(R * c->num_key_value_heads * c->head_dim * es);
    L.o = o, o += align256(R * c->num_attention_heads * c->head_dim * es);
    L.g = o, o += align256(R * c->intermediate_size * es);
    L.u = o, o += align256(R * c->intermediate_size * es);
    L.lg = o, o += align256(R * c->vocab_size * es);
    L.total = o;
    return L;
}

#define OP(call)                                                               \
    do {                                                                       \
        if ((rc = (call))) {                                                   \
            iris_err_set(err, rc, "%s backend: %s", b->name, b->err.msg);      \
            goto done;                                                         \
        }                                                                      \
    } while (0)

/* n bf16 bit patterns as fp32 (exact). */
static void widen_bf16(float *dst, const uint16_t *src, int n) {
    for (int i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, sizeof u);
    }
}

/* The requested rows' candidates (top) or whole rows (logits), once the logits are on the device. */
static int logits_out(iris_backend *b, const void *d_lg, int n_logits, int V, float *logits, iris_text_top *top) {
    size_t es = iris_dtype_size(b->act);
    if (!top || !b->get_topk) {
        if (top)
            for (int i = 0; i < n_logits; i++) top->whole[i] = 1;
        return iris_backend_get_f32(b, logits, d_lg, (size_t)n_logits * V);
    }
    int any_top = 0, k = top->k;
    for (int i = 0; i < n_logits; i++) any_top |= top->need[i] > 0;
    if (any_top) {
        iris_tensor lg = act((void *)d_lg, b->act, n_logits, V);
        int rc = b->get_topk(b, &lg, k, top->ids, top->vals);
        if (rc) return rc;
    }
    for (int i = 0; i < n_logits; i++) {
        int need = top->need[i];
        /* whole: asked for, or the tie at the need-th value runs to the k-th (more may follow), or
         * (penalties) fewer than need untouched tokens above the last candidate */
        const float *v = top->vals + (size_t)i * k;
        const int32_t *id = top->ids + (size_t)i * k;
        int short_list = need <= 0 || need > k || !(v[need - 1] > v[k - 1]);
        if (!short_list && top->penalizes) {
            int untouched = 0;
            for (int j = 0; j < k; j++) untouched += v[j] > v[k - 1] && !top->penalizes(top->pen_ud, i, id[j]);
            short_list = untouched < need;
        }
        top->whole[i] = short_list;
        if (top->whole[i]) {
            int rc = iris_backend_get_f32(b, logits + (size_t)i * V, (const char *)d_lg + (size_t)i * V * es, (size_t)V);
            if (rc) return rc;
        }
    }
    return 0;
}

static int forward(const iris_text *t, iris_backend *b, iris_kv_cache *kv, const iris_text_seq *seqs, int n_seqs,
                   float *logits, iris_text_top *top, iris_text_trace_fn trace, void *trace_ud, iris_err *err) {
    const iris_text_config *c = &t->cfg;
    const int H = c->hidden_size, FF = c->intermediate_size, hd = c->head_dim;
    const int nq = c->num_attention_heads, nkv = c->num_key_value_heads, L = c->num_hidden_layers;
    const int V = c->vocab_size;
    const size_t es = iris_dtype_size(b->act);

    /* Validate the step; size the flat batch. */
    int R = 0, n_logits = 0, n_img = 0, max_blocks = 1;
    for (int s = 0; s < n_seqs; s++) {
        const iris_text_seq *sq = &seqs[s];
        if (sq->n_new <= 0 || sq->n_past < 0 || sq->logits_from < 0 || sq->logits_from > sq->n_new)
            return iris_err_set(err, IRIS_EINVAL, "text step: sequence %d has n_past %d, n_new %d, logits_from %d", s,
                                sq->n_past, sq->n_new, sq->logits_from);
        int nb = (sq->n_past + sq->n_new + IRIS_KV_BLOCK - 1) / IRIS_KV_BLOCK;
        for (int k = 0; k < nb; k++)
            if (sq->block_table[k] < 0 || sq->block_table[k] >= kv->n_blocks)
                return iris_err_set(err, IRIS_EINVAL, "text step: sequence %d names KV block %d of %d", s,
                                    sq->block_table[k], kv->n_blocks);
        for (int i = 0; i < sq->n_new; i++) {
            int tok = sq->tokens[i];
            if (tok < 0 || tok >= V)
                return iris_err_set(err, IRIS_EINVAL, "token id %d is outside the vocabulary (%d)", tok, V);
            n_img += (sq->image_embeds || sq->image_embeds16) && (tok == t->image_token_id || tok == t->video_token_id);
        }
        max_blocks = nb > max_blocks ? nb : max_blocks;
        R += sq->n_new;
        n_logits += sq->n_new - sq->logits_from;
    }
    if (R == 0) return IRIS_OK;
    /* Decode-only steps replay a recorded graph (see above). */
    int use_graph = b->graph_begin && !trace && n_img == 0 && R == n_seqs && graphs_enabled() &&
                    !(t->graphs && t->graphs->broken);
    if (use_graph) max_blocks = (max_blocks + GRAPH_BLOCKS - 1) / GRAPH_BLOCKS * GRAPH_BLOCKS;

    /* Host metadata: tokens, positions [3][R], per-row sequence, context and cache slot,
     * block tables, image row indexes, logits rows; image rows (embeds + taps) as fp32. */
    int n_ds = 0;
    for (int s = 0; s < n_seqs; s++) n_ds = seqs[s].n_deepstack > n_ds ? seqs[s].n_deepstack : n_ds;
    /* BF16 image rows for a BF16 backend go up as they are, one copy per sequence and tap (raw);
     * otherwise every row is gathered as fp32 (bf16 rows widened) and converted on the way. */
    int raw = n_img && b->act == IRIS_DT_BF16;
    for (int s = 0; s < n_seqs && raw; s++) {
        const iris_text_seq *sq = &seqs[s];
        if (sq->image_embeds) raw = 0;
        for (int d = 0; d < n_ds && raw && sq->image_embeds16; d++) raw = d < sq->n_deepstack && sq->deepstack16[d];
    }
    size_t ints = (size_t)R * 7 + (size_t)n_seqs * max_blocks + (size_t)n_img + (size_t)n_logits;
    int32_t *hm = malloc(ints * sizeof(int32_t));
    float *himg = n_img && !raw ? calloc((size_t)n_img * H * (1 + (size_t)n_ds), sizeof(float)) : NULL;
    /* raw: each sequence's first row in d_img and its count of image rows */
    int *run0 = raw ? calloc(2 * (size_t)n_seqs, sizeof(int)) : NULL, *run_n = run0 ? run0 + n_seqs : NULL;
    if (!hm || (n_img && !raw && !himg) || (raw && !run0)) {
        free(hm), free(himg), free(run0);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory for a %d-token step", R);
    }
    int32_t *h_tok = hm, *h_pos = h_tok + R, *h_seq = h_pos + 3 * (size_t)R, *h_ctx = h_seq + R, *h_slot = h_ctx + R;
    int32_t *h_bt = h_slot + R, *h_img = h_bt + (size_t)n_seqs * max_blocks, *h_lrow = h_img + n_img;
    int r = 0, ii = 0, li = 0;
    for (int s = 0; s < n_seqs; s++) {
        const iris_text_seq *sq = &seqs[s];
        int nb = (sq->n_past + sq->n_new + IRIS_KV_BLOCK - 1) / IRIS_KV_BLOCK, si = 0;
        for (int k = 0; k < max_blocks; k++) h_bt[(size_t)s * max_blocks + k] = k < nb ? sq->block_table[k] : 0;
        for (int i = 0; i < sq->n_new; i++, r++) {
            int j = sq->n_past + i;
            h_tok[r] = sq->tokens[i];
            for (int d = 0; d < 3; d++) h_pos[(size_t)d * R + r] = sq->pos[(size_t)d * sq->pos_stride + i];
            h_seq[r] = s;
            h_ctx[r] = j + 1;
            h_slot[r] = sq->block_table[j / IRIS_KV_BLOCK] * IRIS_KV_BLOCK + j % IRIS_KV_BLOCK;
            if (i >= sq->logits_from) h_lrow[li++] = r;
            if ((sq->image_embeds || sq->image_embeds16) &&
                (sq->tokens[i] == t->image_token_id || sq->tokens[i] == t->video_token_id)) {
                if (raw && si == 0) run0[s] = ii;
                if (raw) run_n[s]++;
                if (!raw && sq->image_embeds) {
                    memcpy(himg + (size_t)ii * H, sq->image_embeds + (size_t)si * H, sizeof(float) * H);
                    for (int d = 0; d < n_ds; d++)
                        if (d < sq->n_deepstack && sq->deepstack[d])
                            memcpy(himg + ((size_t)(1 + d) * n_img + ii) * H, sq->deepstack[d] + (size_t)si * H,
                                   sizeof(float) * H);
                } else if (!raw) {
                    widen_bf16(himg + (size_t)ii * H, sq->image_embeds16 + (size_t)si * H, H);
                    for (int d = 0; d < n_ds; d++)
                        if (d < sq->n_deepstack && sq->deepstack16[d])
                            widen_bf16(himg + ((size_t)(1 + d) * n_img + ii) * H, sq->deepstack16[d] + (size_t)si * H, H);
                }
                h_img[ii++] = r;
                si++;
            }
        }
    }

    step_mem m = {.b = b};
    int rc = IRIS_OK, capturing = 0;
    int32_t *d_meta = NULL;
    void *d_img = NULL, *d_h = NULL, *d_x = NULL, *d_q = NULL, *d_k = NULL, *d_v = NULL, *d_o = NULL, *d_g = NULL,
         *d_u = NULL, *d_lg = NULL;
    graph_slot *slot = NULL;
    struct iris_text_graphs *G = NULL;
    if (use_graph) {
        /* The kept buffers (the decoder's one mutable cache: t is const for everything else). */
        G = t->graphs;
        if (!G && (G = calloc(1, sizeof *G))) ((iris_text *)t)->graphs = G;
        if (G && (G->b != b || !G->buf || n_seqs > G->rows_cap || max_blocks > G->blocks_cap)) {
            int rows = n_seqs > G->rows_cap || G->b != b ? n_seqs : G->rows_cap;
            int blocks = max_blocks + 4 * GRAPH_BLOCKS > G->blocks_cap || G->b != b ? max_blocks + 4 * GRAPH_BLOCKS
                                                                                     : G->blocks_cap;
            if (G->b) graphs_drop(G);
            G->b = b;
            graph_layout gl = graph_layout_of(c, es, rows, blocks);
            if ((G->buf = b->alloc(b, gl.total))) G->rows_cap = rows, G->blocks_cap = blocks;
        }
        use_graph = G && G->buf;
    }
    if (use_graph) {
        graph_layout gl = graph_layout_of(c, es, G->rows_cap, G->blocks_cap);
        char *base = G->buf;
        d_meta = (int32_t *)(base + gl.meta), d_h = base + gl.h, d_x = base + gl.x, d_q = base + gl.q;
        d_k = base + gl.k, d_v = base + gl.v, d_o = base + gl.o, d_g = base + gl.g, d_u = base + gl.u;
        d_lg = base + gl.lg;
        /* this step's graph, or the least recently used slot for a new one */
        graph_slot *lru = &G->slot[0];
        uint64_t kvh = kv_hash(kv);
        for (int i = 0; i < GRAPH_SLOTS && !slot; i++) {
            graph_slot *e = &G->slot[i];
            if (e->graph && e->n_seqs == n_seqs && e->n_logits == n_logits && e->max_blocks == max_blocks && e->kv == kvh)
                slot = e;
            else if (e->used < lru->used)
                lru = e;
        }
        if (!slot) {
            if (lru->graph) b->graph_free(lru->graph);
            memset(lru, 0, sizeof *lru);
            lru->n_seqs = n_seqs, lru->n_logits = n_logits, lru->max_blocks = max_blocks, lru->kv = kvh;
            slot = lru;
        }
        slot->used = ++G->tick;
    } else {
        d_meta = step_alloc(&m, ints * sizeof(int32_t));
        d_img = n_img ? step_alloc(&m, (size_t)n_img * H * (1 + n_ds) * es) : NULL;
        d_h = step_alloc(&m, (size_t)R * H * es), d_x = step_alloc(&m, (size_t)R * H * es);
        d_q = step_alloc(&m, (size_t)R * nq * hd * es), d_k = step_alloc(&m, (size_t)R * nkv * hd * es);
        d_v = step_alloc(&m, (size_t)R * nkv * hd * es), d_o = step_alloc(&m, (size_t)R * nq * hd * es);
        d_g = step_alloc(&m, (size_t)R * FF * es), d_u = step_alloc(&m, (size_t)R * FF * es);
        d_lg = step_alloc(&m, (size_t)(n_logits ? n_logits : 1) * V * es);
    }
    float *h_trace = trace ? malloc(sizeof(float) * (size_t)R * H) : NULL;
    if (!d_meta || (n_img && !d_img) || !d_h || !d_x || !d_q || !d_k || !d_v || !d_o || !d_g || !d_u || !d_lg ||
        (trace && !h_trace)) {
        rc = iris_err_set(err, IRIS_ENOMEM, "%s backend: out of memory for a %d-token step", b->name, R);
        goto done;
    }
    OP(b->upload(b, d_meta, hm, ints * sizeof(int32_t)));
    if (n_img && !raw) OP(iris_backend_put_f32(b, d_img, himg, (size_t)n_img * H * (1 + n_ds)));
    for (int s = 0; raw && s < n_seqs; s++) {
        /* a sequence's image rows are consecutive in d_img (and in its own rows, from 0) */
        const iris_text_seq *sq = &seqs[s];
        if (!run_n[s]) continue;
        size_t bytes = (size_t)run_n[s] * H * es;
        OP(b->upload(b, (char *)d_img + (size_t)run0[s] * H * es, sq->image_embeds16, bytes));
        for (int d = 0; d < n_ds; d++)
            OP(b->upload(b, (char *)d_img + ((size_t)(1 + d) * n_img + run0[s]) * H * es, sq->deepstack16[d], bytes));
    }
    int32_t *d_tok = d_meta, *d_pos = d_tok + R, *d_seq = d_pos + 3 * (size_t)R, *d_ctx = d_seq + R;
    int32_t *d_slot = d_ctx + R, *d_bt = d_slot + R, *d_imgrow = d_bt + (size_t)n_seqs * max_blocks;
    int32_t *d_lrow = d_imgrow + n_img;
    iris_attn_meta meta = {.n_rows = R, .row_seq = d_seq, .row_ctx = d_ctx, .block_tables = d_bt,
                           .max_blocks = max_blocks, .slot = d_slot, .n_seqs = n_seqs};

    iris_dtype A = b->act;
    iris_tensor h = act(d_h, A, R, H), x = act(d_x, A, R, H);                     /* [R, H] */
    iris_tensor q = act(d_q, A, R, (int64_t)nq * hd), o = act(d_o, A, R, (int64_t)nq * hd); /* [R, nq·hd] */
    iris_tensor k = act(d_k, A, R, (int64_t)nkv * hd), v = act(d_v, A, R, (int64_t)nkv * hd); /* [R, nkv·hd] */
    iris_tensor g = act(d_g, A, R, FF), u = act(d_u, A, R, FF);                   /* [R, FF] */
    iris_tensor img = act(d_img, A, n_img, H);                                    /* [n_img, H] */

    if (use_graph && slot->graph) {
        OP(b->graph_replay(b, slot->graph));
        goto logits_out;
    }
    if (use_graph) {
        OP(b->graph_begin(b));
        capturing = 1;
    }

    /* Embeddings; image-token rows take the vision tower's rows. */
    OP(b->embed(b, &t->embed_tokens, d_tok, R, &h));
    if (n_img) OP(b->set_rows(b, &h, d_imgrow, &img));

    /* A decode-only step may take every layer in one backend call (decode_layers; it declines the
     * steps it does not take, and the ops below run them). */
    int stacked = 0;
    if (b->decode_layers && t->dl_weights && !trace && n_img == 0 && R == n_seqs) {
        iris_decode_stack ds = {.n_layers = L, .w = (const iris_tensor *const(*)[IRIS_DL_N])t->dl_weights, .kv = kv->layers,
                                .h = &h, .q = &q, .k = &k, .v = &v, .o = &o, .g = &g, .eps = c->rms_norm_eps,
                                .n_q_heads = nq, .pos = d_pos, .pos_stride = R, .dim_of = t->dim_of,
                                .inv_freq = t->inv_freq, .meta = &meta};
        rc = b->decode_layers(b, &ds);
        if (rc < 0) OP(rc);
        stacked = rc == 0;
        rc = IRIS_OK;
    }

    /* The residual adds go with the next RMSNorm (iris_backend_add_rms_norm: one kernel on CUDA):
     * `pending` says x holds the MLP's output, not yet added to h. */
    int pending = 0;
    for (int il = 0; !stacked && il < L; il++) {
        const iris_text_layer *Ly = &t->layers[il];
        if (trace) {
            if (pending) OP(b->add(b, &h, &x));
            pending = 0;
            OP(iris_backend_get_f32(b, h_trace, d_h, (size_t)R * H));
            trace(trace_ud, il, h_trace, R, H);
        }
        /* Attention block: h += x (the last MLP), x = norm(h); q/k norms, rotary and the cache write in one. */
        OP(iris_backend_add_rms_norm(b, &h, pending ? &x : NULL, &Ly->input_layernorm, c->rms_norm_eps, &x));
        {
            const iris_tensor *ws[3] = {&Ly->q_proj, &Ly->k_proj, &Ly->v_proj};
            iris_tensor *ys[3] = {&q, &k, &v};
            OP(iris_backend_linear_n(b, &x, 3, ws, ys));
        }
        OP(iris_backend_qk_norm_rope_attn(b, &q, &k, &v, &Ly->q_norm, &Ly->k_norm, c->rms_norm_eps, nq, d_pos, R,
                                          t->dim_of, t->inv_freq, &kv->layers[il], &meta, &o));
        OP(b->linear(b, &o, &Ly->o_proj, NULL, &x));
        /* MLP block: h += x (attention), x = norm(h). */
        OP(iris_backend_add_rms_norm(b, &h, &x, &Ly->post_attention_layernorm, c->rms_norm_eps, &x));
        OP(iris_backend_linear_swiglu(b, &x, &Ly->gate_proj, &Ly->up_proj, &g, &u));
        OP(b->linear(b, &g, &Ly->down_proj, NULL, &x));
        pending = 1;
        /* DeepStack: the vision tower's tap il joins the image rows (prefill only). */
        if (n_img && il < n_ds) {
            OP(b->add(b, &h, &x));
            pending = 0;
            iris_tensor ds = act((char *)d_img + (size_t)(1 + il) * n_img * H * es, A, n_img, H);
            OP(b->add_rows(b, &h, d_imgrow, &ds));
        }
    }
    if (pending) OP(b->add(b, &h, &x));
    if (trace) {
        OP(iris_backend_get_f32(b, h_trace, d_h, (size_t)R * H));
        trace(trace_ud, L, h_trace, R, H);
    }

    /* Final norm and the logits of the requested rows. */
    if (n_logits > 0) {
        iris_tensor xl = act(d_x, A, n_logits, H), lg = act(d_lg, A, n_logits, V);
        OP(b->get_rows(b, &h, d_lrow, n_logits, &xl));
        OP(b->rms_norm(b, &xl, &t->norm, c->rms_norm_eps, &xl));
        OP(b->linear(b, &xl, &t->lm_head, NULL, &lg));
    }
    if (capturing) {
        capturing = 0;
        OP(b->graph_end(b, &slot->graph));
        OP(b->graph_replay(b, slot->graph));
    }
logits_out:
    if (n_logits > 0) OP(logits_out(b, d_lg, n_logits, V, logits, top));
    OP(b->sync(b));

done:
    if (capturing) {
        /* an op failed while recording: end the capture, and plain steps from now on */
        void *gph = NULL;
        if (b->graph_end(b, &gph) == 0 && gph) b->graph_free(gph);
        G->broken = 1;
        memset(slot, 0, sizeof *slot);
    }
    step_free(&m);
    free(hm), free(himg), free(run0), free(h_trace);
    return rc;
}

int iris_text_forward(const iris_text *t, iris_backend *b, iris_kv_cache *kv, const iris_text_seq *seqs, int n_seqs,
                      float *logits, iris_text_trace_fn trace, void *trace_ud, iris_err *err) {
    return forward(t, b, kv, seqs, n_seqs, logits, NULL, trace, trace_ud, err);
}

int iris_text_forward_top(const iris_text *t, iris_backend *b, iris_kv_cache *kv, const iris_text_seq *seqs,
                          int n_seqs, float *logits, iris_text_top *top, iris_err *err) {
    if (top && (top->k < 1 || top->k > IRIS_TEXT_TOP_MAX))
        return iris_err_set(err, IRIS_EINVAL, "text step: %d candidates a row (1..%d)", top->k, IRIS_TEXT_TOP_MAX);
    return forward(t, b, kv, seqs, n_seqs, logits, top, NULL, NULL, err);
}
