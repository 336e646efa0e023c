/* runner.c: one engine step (runner.h): the flat batch, its buffers, CUDA graphs and the logits
 * rows' form.
 *
 * Buffers, all taken at open from the limits (T rows, S sequences, B blocks a table, L logits
 * rows), none in the step:
 *   host: meta ints [10T + S·B + L] (packed per step as below), fp32 logits [L, V], top-k
 *         candidates [L, 64] ids and values, need/whole flags [L], trace rows [T, H] (trace only),
 *         masks [L + L·W] (W = ceil(V / 32); pinned where the backend has it), and with the
 *         embedding table in host memory (text.h embed_host) the step's rows [T, H] in the
 *         backend's dtype (pinned where it can), uploaded into h before the forward;
 *   device, one allocation: meta ints as the host's; logits [L, V]; masks as the host's (within
 *         the plan's sampling part, which counts fp32 logits and more); then the activations region
 *         shared with the vision encoder's scratch: image rows [(1 + taps)·T, H], h, x [T, H],
 *         q, o [T, nq·hd], k, v [T, nkv·hd], g, u [T, FF], all in the backend's dtype.
 * The step's metadata is packed (tokens [R], positions [3][R], row -> sequence [R], visible
 * context [R], cache slot [R], block tables [n_seqs, width], image rows, logits rows, and for a
 * step with prompt rows its attention tiles [R] and lone rows [R], backend.h) and uploaded in one
 * copy; its layout depends only on (R, n_seqs, width, image rows), which a decode graph's key
 * fixes, so a replayed graph finds its inputs where it recorded them.
 *
 * Graphs: a step whose rows are all decode rows (one new token a sequence, no image rows, no
 * trace) on a backend with graph hooks is recorded once and replayed: the ~13 kernels of each
 * layer then cost one launch.  Its sequences are padded up to the plan's next decode batch size
 * (iris_plan_graph_buckets) with placeholder rows — token 0 at position 0, one visible key in
 * block 0, no cache slot (the cache writes skip it), logits computed and never read — so a batch
 * that shrinks one sequence at a time replays a few graphs instead of recording one a size: H200,
 * 2B-FP8, 192 images at 64 clients, the decode steps of 63 down to 2 sequences took 7-14 ms
 * each against 5 ms for 64 (a recording: ~370 launches, cuBLASLt's choices, instantiation).
 * The table width is rounded up to IRIS_ATTN_PLAN_BLOCKS blocks (columns past a sequence's
 * blocks are never read: the kernels take each row's context from the metadata), and a graph is
 * kept per (sequences, logits rows, width, cache), GRAPH_SLOTS of them, least recently used out.
 *
 * Constrained rows (a grammar's token mask, runner.h iris_runner_sampling.mask): the mask of
 * step t's row depends on the token drawn at step t - 1, which the forward of step t already
 * needs, so nothing of it can run before that token; what can overlap is the forward itself.
 * A step therefore launches the forward (asynchronous on a GPU: a graph replay returns in
 * microseconds), then has the host compute the masks, rows in parallel on the thread pool,
 * into a pinned buffer ([L] slots, then one region of ceil(V / 32) words a constrained row,
 * ~19 KB), uploads the slots and the regions used in one asynchronous copy behind the forward
 * on the stream, and asks get_topk for the candidates with the mask (backend.h iris_topk_mask):
 * constrained and free rows share the one selection, and only k candidates a row come back.
 * The device holds the same layout at a fixed address taken at open (the graphs do not cover
 * the selection, but nothing moves).  A step's time is then max(forward, masks) + upload
 * (19 KB a row) + selection, where a whole-row path costs forward + a 600 KB fp32 row download
 * + a host scan of 151,936 logits + the mask, one after the other.  A step with no constrained row passes no mask: its
 * selection is the one free rows always had.  On the CPU backend the forward is synchronous,
 * so the masks follow it; the same op selects.  A row whose mask fails goes unmasked and the
 * caller's sampler reports the failure; a whole row (logprobs, ties past the candidates) comes
 * back unmasked and the host sampler applies the mask it already has. */
#include "engine/runner.h"
#include "engine/planner.h"
#include "clock.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "err.h"
#include "log.h"
#include "pool.h"

#define GRAPH_SLOTS 16

typedef struct graph_slot {
    int n_seqs, n_logits, max_blocks;
    uint64_t kv;                /* hash of the cache's layer buffers: the graph writes into them */
    void *graph;
    uint64_t used;
} graph_slot;

/* The activations region's pieces for T rows. */
typedef struct act_layout {
    size_t img, h, x, q, k, v, o, g, u, total;
} act_layout;

struct iris_runner {
    const iris_text *t;
    iris_backend *b;
    iris_kv_cache *kv;
    iris_runner_limits lim;     /* max_context as a block-table width, rounded for graphs */
    int max_blocks;
    /* host */
    int32_t *hm;
    float *logits;
    int32_t *top_ids;
    float *top_vals;
    int *whole;
    float *trace_h;
    void *h_emb;                /* embed_host: [T, H] token-embedding rows in act dtype, pinned where the backend has it */
    int emb_pinned;
    int *run0, *run_n;          /* [S]: a sequence's first image row and its count */
    uint32_t *h_mask;           /* [L] slots (int32), then [L, W] mask words: pinned where the backend has it */
    int mask_pinned;
    int *mrow;                  /* [L] the step's constrained rows */
    int words;                  /* W, words a mask */
    int n_masked;               /* the last step's rows whose candidates came under a mask */
    /* device */
    void *dev;
    int32_t *d_meta;
    uint32_t *d_mask;           /* as h_mask */
    void *d_lg, *d_act;
    act_layout al;              /* the pieces of d_act, for max_rows rows */
    size_t act_bytes;
    graph_slot slot[GRAPH_SLOTS];
    uint64_t tick;
    int graphs_broken;          /* a capture failed: plain steps from then on */
    /* decode steps padded to graph batch sizes (file comment) */
    int bucket[IRIS_PLAN_MAX_GRAPHS], n_buckets;
    iris_text_seq *padded;      /* [S]: a padded step's sequences */
    iris_text_seq pad;          /* the placeholder sequence */
    int32_t pad_tok, pad_pos[3], pad_bt[1];
};

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

static size_t meta_ints(const iris_runner_limits *l, int max_blocks) {
    return (size_t)l->max_rows * 10 + (size_t)l->max_seqs * max_blocks + (size_t)l->max_logits;
}

/* q, k, v and g, u in that order: text.h's joint products run over them as one region each. */
static act_layout act_layout_of(const iris_text_config *c, size_t es, size_t T, size_t n_ds) {
    act_layout a;
    size_t o = 0;
    a.img = o, o += align256(T * (1 + n_ds) * c->hidden_size * es);
    a.h = o, o += align256(T * c->hidden_size * es);
    a.x = o, o += align256(T * c->hidden_size * es);
    a.q = o, o += align256(T * c->num_attention_heads * c->head_dim * es);
    a.k = o, o += align256(T * c->num_key_value_heads * c->head_dim * es);
    a.v = o, o += align256(T * c->num_key_value_heads * c->head_dim * es);
    a.o = o, o += align256(T * c->num_attention_heads * c->head_dim * es);
    a.g = o, o += align256(T * c->intermediate_size * es);
    a.u = o, o += align256(T * c->intermediate_size * es);
    a.total = o;
    return a;
}

void iris_runner_close(iris_runner *r) {
    if (!r) return;
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (r->slot[i].graph) r->b->graph_free(r->slot[i].graph);
    if (r->dev) r->b->free(r->b, r->dev);
    free(r->hm), free(r->logits), free(r->top_ids), free(r->top_vals), free(r->whole), free(r->trace_h);
    free(r->run0), free(r->mrow), free(r->padded);
    if (r->emb_pinned) r->b->host_free(r->h_emb);
    else free(r->h_emb);
    if (r->mask_pinned) r->b->host_free(r->h_mask);
    else free(r->h_mask);
    free(r);
}

int iris_runner_open(const iris_text *t, iris_backend *b, iris_kv_cache *kv, const iris_runner_limits *lim,
                     iris_runner **out, iris_err *err) {
    *out = NULL;
    if (lim->max_rows < 1 || lim->max_seqs < 1 || lim->max_context < 1 || lim->max_logits < 0)
        return iris_err_set(err, IRIS_EINVAL, "runner: %d rows, %d sequences, %d tokens, %d logits rows a step",
                            lim->max_rows, lim->max_seqs, lim->max_context, lim->max_logits);
    iris_runner *r = calloc(1, sizeof *r);
    if (!r) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    const iris_text_config *c = &t->cfg;
    r->t = t, r->b = b, r->kv = kv, r->lim = *lim;
    if (!r->lim.max_logits) r->lim.max_logits = lim->max_seqs;
    int blocks = (lim->max_context + IRIS_KV_BLOCK - 1) / IRIS_KV_BLOCK;
    r->max_blocks = (blocks + IRIS_ATTN_PLAN_BLOCKS - 1) / IRIS_ATTN_PLAN_BLOCKS * IRIS_ATTN_PLAN_BLOCKS;
    size_t L = (size_t)r->lim.max_logits, V = (size_t)c->vocab_size, S = (size_t)lim->max_seqs;
    size_t ints = meta_ints(&r->lim, r->max_blocks), es = iris_dtype_size(b->act);
    r->hm = malloc(ints * sizeof(int32_t));
    r->logits = malloc(L * V * sizeof(float));
    r->top_ids = malloc(L * IRIS_RUNNER_TOP_MAX * sizeof(int32_t));
    r->top_vals = malloc(L * IRIS_RUNNER_TOP_MAX * sizeof(float));
    r->whole = malloc(L * sizeof(int));
    r->run0 = malloc(2 * S * sizeof(int));
    r->mrow = malloc(L * sizeof(int));
    r->padded = malloc(S * sizeof *r->padded);
    r->n_buckets = iris_plan_graph_buckets(lim->max_seqs, r->bucket);
    r->pad = (iris_text_seq){.n_new = 1, .tokens = &r->pad_tok, .pos = r->pad_pos, .pos_stride = 1,
                             .block_table = r->pad_bt};
    r->words = (c->vocab_size + 31) / 32;
    size_t mask_b = lim->masks ? (L + L * (size_t)r->words) * sizeof(uint32_t) : 0;
    r->h_mask = mask_b && b->host_alloc ? b->host_alloc(b, mask_b) : NULL;
    r->mask_pinned = r->h_mask != NULL;
    if (mask_b && !r->h_mask) r->h_mask = malloc(mask_b);
    r->trace_h = lim->trace ? malloc((size_t)lim->max_rows * c->hidden_size * sizeof(float)) : NULL;
    size_t emb_b = t->embed_host ? (size_t)lim->max_rows * c->hidden_size * es : 0;
    r->h_emb = emb_b && b->host_alloc ? b->host_alloc(b, emb_b) : NULL;
    r->emb_pinned = r->h_emb != NULL;
    if (emb_b && !r->h_emb) r->h_emb = malloc(emb_b);
    if (!r->hm || !r->logits || !r->top_ids || !r->top_vals || !r->whole || !r->run0 || !r->mrow || !r->padded ||
        (mask_b && !r->h_mask) || (lim->trace && !r->trace_h) || (emb_b && !r->h_emb)) {
        iris_runner_close(r);
        return iris_err_set(err, IRIS_ENOMEM, "runner: out of host memory for %zu logits rows", L);
    }
    r->run_n = r->run0 + S;
    r->al = act_layout_of(c, es, (size_t)lim->max_rows, (size_t)lim->n_deepstack);
    r->act_bytes = r->al.total > lim->scratch_bytes ? r->al.total : align256(lim->scratch_bytes);
    size_t meta_b = align256(ints * sizeof(int32_t)), lg_b = align256(L * V * es) + align256(mask_b);
    r->dev = b->alloc(b, meta_b + lg_b + r->act_bytes);
    if (!r->dev) {
        iris_runner_close(r);
        return iris_err_set(err, IRIS_ENOMEM, "runner: %s backend: out of memory for the step buffers (%.1f MiB: %d "
                            "rows, %zu logits rows)", b->name, (meta_b + lg_b + r->act_bytes) / 1048576.0,
                            lim->max_rows, L);
    }
    r->d_meta = r->dev;
    r->d_lg = (char *)r->dev + meta_b;
    r->d_mask = mask_b ? (uint32_t *)((char *)r->d_lg + align256(L * V * es)) : NULL;
    r->d_act = (char *)r->dev + meta_b + lg_b;
    iris_log(IRIS_LOG_DEBUG, "runner", "opened on %s: %d rows, %d sequences, %zu logits rows a step; step buffers "
             "%.1f MiB (activations %.1f MiB, shared with %.1f MiB of vision scratch)", b->name, lim->max_rows,
             lim->max_seqs, L, (meta_b + lg_b + r->act_bytes) / 1048576.0, r->act_bytes / 1048576.0,
             lim->scratch_bytes / 1048576.0);
    *out = r;
    return IRIS_OK;
}

int iris_runner_n_graphs(const iris_runner *r) {
    int n = 0;
    for (int i = 0; r && i < GRAPH_SLOTS; i++) n += r->slot[i].graph != NULL;
    return n;
}

void *iris_runner_scratch(iris_runner *r, size_t *bytes) {
    *bytes = r && r->lim.scratch_bytes ? r->act_bytes : 0;
    return *bytes ? r->d_act : NULL;
}

/* ---- the step -------------------------------------------------------------------------------- */

static uint64_t kv_hash(const iris_kv_cache *kv) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < kv->n_layers; i++) {
        h = (h ^ (uint64_t)(uintptr_t)kv->layers[i].k) * 1099511628211ull;
        h = (h ^ (uint64_t)(uintptr_t)kv->layers[i].v) * 1099511628211ull;
    }
    return h;
}

static int is_image(const iris_text *t, const iris_text_seq *sq, int32_t tok) {
    return (sq->image_embeds || sq->image_embeds16) && (tok == t->image_token_id || tok == t->video_token_id);
}

/* The step's shape, checked against the cache and the limits. */
typedef struct step_shape {
    int R, n_logits, n_img, n_ds, max_blocks, raw;
    int n_tiles, n_lone; /* pack_meta: the attention tiles and lone rows (backend.h; n_lone -1: not
                            listed, a decode-only step) */
} step_shape;

static int shape_of(iris_runner *r, const iris_text_seq *seqs, int n_seqs, step_shape *sh, iris_err *err) {
    const iris_text *t = r->t;
    memset(sh, 0, sizeof *sh);
    sh->max_blocks = 1;
    if (n_seqs > r->lim.max_seqs)
        return iris_err_set(err, IRIS_ELIMIT, "text step: %d sequences; the runner takes %d", n_seqs, r->lim.max_seqs);
    for (int s = 0; s < n_seqs; s++) {
        const iris_text_seq *sq = &seqs[s];
        if (sq->n_new <= 0 || sq->n_past < 0 || sq->logits_from < 0 || sq->logits_from > sq->n_new)
            return iris_err_set(err, IRIS_EINVAL, "text step: sequence %d has n_past %d, n_new %d, logits_from %d", s,
                                sq->n_past, sq->n_new, sq->logits_from);
        int nb = (sq->n_past + sq->n_new + IRIS_KV_BLOCK - 1) / IRIS_KV_BLOCK;
        if (nb > r->max_blocks)
            return iris_err_set(err, IRIS_ELIMIT, "text step: sequence %d reaches %d tokens; the runner takes %d", s,
                                sq->n_past + sq->n_new, r->lim.max_context);
        for (int k = 0; k < nb; k++)
            if (sq->block_table[k] < 0 || sq->block_table[k] >= r->kv->n_blocks)
                return iris_err_set(err, IRIS_EINVAL, "text step: sequence %d names KV block %d of %d", s,
                                    sq->block_table[k], r->kv->n_blocks);
        for (int i = 0; i < sq->n_new; i++) {
            int tok = sq->tokens[i];
            if (tok < 0 || tok >= t->cfg.vocab_size)
                return iris_err_set(err, IRIS_EINVAL, "token id %d is outside the vocabulary (%d)", tok,
                                    t->cfg.vocab_size);
            sh->n_img += is_image(t, sq, tok);
        }
        sh->max_blocks = nb > sh->max_blocks ? nb : sh->max_blocks;
        sh->R += sq->n_new;
        sh->n_logits += sq->n_new - sq->logits_from;
        sh->n_ds = sq->n_deepstack > sh->n_ds ? sq->n_deepstack : sh->n_ds;
    }
    for (int s = 0; s < n_seqs; s++) {
        int img = 0;
        for (int i = 0; i < seqs[s].n_new && !img; i++) img = is_image(t, &seqs[s], seqs[s].tokens[i]);
        if (img && seqs[s].n_deepstack != sh->n_ds)
            return iris_err_set(err, IRIS_EINVAL, "text step: sequence %d brings %d DeepStack taps, another %d", s,
                                seqs[s].n_deepstack, sh->n_ds);
        for (int d = 0; img && d < sh->n_ds; d++)
            if (seqs[s].image_embeds ? !seqs[s].deepstack[d] : !seqs[s].deepstack16[d])
                return iris_err_set(err, IRIS_EINVAL, "text step: sequence %d lacks DeepStack tap %d", s, d);
    }
    if (sh->n_ds > r->lim.n_deepstack && sh->n_img)
        return iris_err_set(err, IRIS_ELIMIT, "text step: %d DeepStack taps; the runner takes %d", sh->n_ds,
                            r->lim.n_deepstack);
    if (sh->R > r->lim.max_rows || sh->n_logits > r->lim.max_logits)
        return iris_err_set(err, IRIS_ELIMIT, "text step: %d rows and %d logits rows; the runner takes %d and %d",
                            sh->R, sh->n_logits, r->lim.max_rows, r->lim.max_logits);
    /* BF16 image rows for a BF16 backend go up as they are; fp32 rows are converted on the way. */
    sh->raw = sh->n_img && r->b->act == IRIS_DT_BF16;
    for (int s = 0; s < n_seqs && sh->raw; s++) {
        const iris_text_seq *sq = &seqs[s];
        if (sq->image_embeds) sh->raw = 0;
        for (int d = 0; d < sh->n_ds && sh->raw && sq->image_embeds16; d++)
            sh->raw = d < sq->n_deepstack && sq->deepstack16[d];
    }
    return IRIS_OK;
}

/* The packed host metadata (layout: file comment) and each sequence's image rows' place; the
 * sequences from n_real on are a padded step's placeholders (no cache slot). */
static size_t pack_meta(iris_runner *r, const iris_text_seq *seqs, int n_real, int n_seqs, step_shape *sh) {
    const int R = sh->R, W = sh->max_blocks;
    int32_t *h_tok = r->hm, *h_pos = h_tok + R, *h_seq = h_pos + 3 * (size_t)R, *h_ctx = h_seq + R;
    int32_t *h_slot = h_ctx + R, *h_bt = h_slot + R, *h_img = h_bt + (size_t)n_seqs * W, *h_lrow = h_img + sh->n_img;
    int row = 0, ii = 0, li = 0;
    for (int s = 0; s < n_seqs; s++) {
        const iris_text_seq *sq = &seqs[s];
        int nb = (sq->n_past + sq->n_new + IRIS_KV_BLOCK - 1) / IRIS_KV_BLOCK;
        for (int k = 0; k < W; k++) h_bt[(size_t)s * W + k] = k < nb ? sq->block_table[k] : 0;
        r->run0[s] = ii, r->run_n[s] = 0;
        for (int i = 0; i < sq->n_new; i++, row++) {
            int j = sq->n_past + i;
            h_tok[row] = sq->tokens[i];
            for (int d = 0; d < 3; d++) h_pos[(size_t)d * R + row] = sq->pos[(size_t)d * sq->pos_stride + i];
            h_seq[row] = s;
            h_ctx[row] = j + 1;
            h_slot[row] = s >= n_real ? -1 : sq->block_table[j / IRIS_KV_BLOCK] * IRIS_KV_BLOCK + j % IRIS_KV_BLOCK;
            if (i >= sq->logits_from) h_lrow[li++] = row;
            if (is_image(r->t, sq, sq->tokens[i])) h_img[ii++] = row, r->run_n[s]++;
        }
    }
    /* a prefill step's attention tiles, then its lone rows (both R at most) */
    int32_t *h_tiles = h_lrow + sh->n_logits;
    sh->n_tiles = 0;
    sh->n_lone = n_seqs == R ? -1 : iris_attn_tiles(h_seq, R, h_tiles, &sh->n_tiles, h_tiles + R);
    return (size_t)R * 7 + (size_t)n_seqs * W + (size_t)sh->n_img + (size_t)sh->n_logits + (sh->n_lone >= 0 ? 2 * (size_t)R : 0);
}

/* Each sequence's image rows (consecutive in its tokens and in the device buffer) and taps, as
 * they are (raw bf16) or converted from fp32 / widened from bf16. */
static int put_images(iris_runner *r, const iris_text_seq *seqs, int n_seqs, const step_shape *sh, void *d_img) {
    iris_backend *b = r->b;
    const int H = r->t->cfg.hidden_size, n_img = sh->n_img;
    const size_t es = iris_dtype_size(b->act);
    for (int s = 0; s < n_seqs; s++) {
        const iris_text_seq *sq = &seqs[s];
        int n = r->run_n[s];
        if (!n) continue;
        for (int d = -1; d < sh->n_ds; d++) {
            char *dst = (char *)d_img + ((size_t)(1 + d) * n_img + r->run0[s]) * H * es;
            size_t elems = (size_t)n * H;
            int rc;
            if (sh->raw) {
                rc = b->upload(b, dst, d < 0 ? sq->image_embeds16 : sq->deepstack16[d], elems * es);
            } else if (sq->image_embeds) {
                rc = iris_backend_put_f32(b, dst, d < 0 ? sq->image_embeds : sq->deepstack[d], elems);
            } else {
                /* bf16 rows on a backend of another dtype: widened through the fp32 logits buffer,
                 * which is free until the step's end, in pieces that fit it */
                const uint16_t *src = d < 0 ? sq->image_embeds16 : sq->deepstack16[d];
                size_t cap = (size_t)r->lim.max_logits * r->t->cfg.vocab_size;
                rc = 0;
                for (size_t o = 0; o < elems && !rc; o += cap) {
                    size_t m = elems - o < cap ? elems - o : cap;
                    for (size_t e = 0; e < m; e++) {
                        uint32_t u = (uint32_t)src[o + e] << 16;
                        memcpy(&r->logits[e], &u, sizeof u);
                    }
                    rc = iris_backend_put_f32(b, dst + o * es, r->logits, m);
                }
            }
            if (rc) return rc;
        }
    }
    return 0;
}

/* ---- constrained rows' masks ------------------------------------------------------------------ */

typedef struct mask_job {
    iris_runner *r;
    const iris_runner_sampling *smp;
} mask_job;

/* The masks of constrained rows mrow[i0..i1) into h_mask's words, region i each (pool worker). */
static void mask_rows(void *ctx, int64_t i0, int64_t i1) {
    const mask_job *j = ctx;
    iris_runner *r = j->r;
    int32_t *slot = (int32_t *)r->h_mask;
    uint32_t *words = r->h_mask + r->lim.max_logits;
    for (int64_t i = i0; i < i1; i++) {
        int row = r->mrow[i];
        iris_err e = {0};
        int rc = j->smp->mask(j->smp->ud, row, words + (size_t)i * r->words, &e);
        slot[row] = rc == 1 ? (int32_t)i : -1;
    }
}

/* This step's masks on the host, on the thread pool while the device runs the forward: slots
 * [n_logits] (the row's region of words, -1 unmasked) and the regions.  Returns the regions
 * listed (what to upload: slots and that many regions), *n_ok the rows masked. */
static int masks_of(iris_runner *r, const iris_runner_sampling *smp, int n_logits, int *n_ok) {
    int32_t *slot = (int32_t *)r->h_mask;
    int n = 0;
    *n_ok = 0;
    for (int i = 0; i < n_logits; i++) {
        slot[i] = -1;
        if (smp->masked[i]) r->mrow[n++] = i;
    }
    if (!n) return 0;
    mask_job j = {r, smp};
    if (n > 1) iris_pool_for(n, mask_rows, &j);
    else mask_rows(&j, 0, 1);
    for (int i = 0; i < n_logits; i++) *n_ok += slot[i] >= 0;
    return n;
}

/* The wanted rows' candidates, or whole rows, once the logits are on the device; the first
 * n_regions of h_mask's masks (0: none) go up first and limit their rows' candidates. */
static int logits_out(iris_runner *r, int n_logits, const iris_runner_sampling *smp, int k, int n_regions) {
    iris_backend *b = r->b;
    const int V = r->t->cfg.vocab_size, L = r->lim.max_logits;
    const size_t es = iris_dtype_size(b->act);
    if (k == 0) {
        for (int i = 0; i < n_logits; i++) r->whole[i] = 1;
        return iris_backend_get_f32(b, r->logits, r->d_lg, (size_t)n_logits * V);
    }
    iris_tensor lg = {.data = r->d_lg, .dtype = b->act, .rows = n_logits, .cols = V};
    r->n_masked = 0;
    const int32_t *slot = (const int32_t *)r->h_mask;
    iris_topk_mask mask = {.slot = (const int32_t *)r->d_mask, .bits = r->d_mask + L, .words = r->words};
    int rc = 0;
    if (n_regions)
        rc = b->upload(b, r->d_mask, r->h_mask, ((size_t)L + (size_t)n_regions * r->words) * sizeof(uint32_t));
    if (!rc) rc = b->get_topk(b, &lg, k, n_regions ? &mask : NULL, r->top_ids, r->top_vals);
    for (int i = 0; !rc && i < n_logits; i++) {
        int need = smp->need[i];
        /* whole: asked for, or the tie at the need-th value runs to the k-th (more may follow), or
         * (penalties) fewer than need untouched tokens above the last candidate; a masked row
         * whose list ends in -inf holds every allowed token it could draw (complete) */
        const float *v = r->top_vals + (size_t)i * k;
        const int32_t *id = r->top_ids + (size_t)i * k;
        int complete = n_regions && slot[i] >= 0 && !(v[k - 1] > -INFINITY);
        int short_list = need <= 0 || need > k || (!complete && !(v[need - 1] > v[k - 1]));
        if (!short_list && !complete && smp->penalized && smp->penalized[i]) {
            int untouched = 0;
            for (int j = 0; j < k; j++) untouched += v[j] > v[k - 1] && !smp->penalizes(smp->ud, i, id[j]);
            short_list = untouched < need;
        }
        r->whole[i] = short_list;
        r->n_masked += n_regions && slot[i] >= 0 && !short_list;
        if (short_list)
            rc = iris_backend_get_f32(b, r->logits + (size_t)i * V, (const char *)r->d_lg + (size_t)i * V * es, (size_t)V);
    }
    return rc;
}

/* Candidates a row asks for: the most any row needs plus the tie margin; every candidate there
 * may be when a row has penalties (they push some down); 0: whole rows. */
static int top_k_of(const iris_runner *r, const iris_runner_sampling *smp, int n_logits) {
    if (!smp || !r->b->get_topk) return 0;
    int max_need = 0, any_pen = 0;
    for (int i = 0; i < n_logits; i++) {
        int need = smp->need[i] > IRIS_RUNNER_TOP_MAX - IRIS_RUNNER_TIE_MARGIN ? 0 : smp->need[i];
        if (need > max_need) max_need = need;
        any_pen |= need > 0 && smp->penalized && smp->penalized[i];
    }
    if (max_need == 0) return 0;
    return any_pen ? IRIS_RUNNER_TOP_MAX : max_need + IRIS_RUNNER_TIE_MARGIN;
}

/* This decode step's graph slot: the recorded one, or the least recently used for a new one. */
static graph_slot *graph_slot_of(iris_runner *r, int n_seqs, int n_logits, int max_blocks) {
    graph_slot *lru = &r->slot[0], *slot = NULL;
    uint64_t kvh = kv_hash(r->kv);
    for (int i = 0; i < GRAPH_SLOTS && !slot; i++) {
        graph_slot *e = &r->slot[i];
        if (e->graph && e->n_seqs == n_seqs && e->n_logits == n_logits && e->max_blocks == max_blocks && e->kv == kvh)
            slot = e;
        else if (e->used < lru->used)
            lru = e;
    }
    if (!slot) {
        if (lru->graph) r->b->graph_free(lru->graph);
        memset(lru, 0, sizeof *lru);
        lru->n_seqs = n_seqs, lru->n_logits = n_logits, lru->max_blocks = max_blocks, lru->kv = kvh;
        slot = lru;
    }
    slot->used = ++r->tick;
    return slot;
}

/* The forward, through this step's graph when it is decode-only (recorded at its first use). */
static int forward_graph(iris_runner *r, const iris_text_batch *x, int n_seqs, int max_blocks, iris_err *err) {
    iris_backend *b = r->b;
    graph_slot *slot = graph_slot_of(r, n_seqs, x->n_logits, max_blocks);
    if (!slot->graph) {
        if (b->graph_begin(b)) return iris_err_set(err, IRIS_EDEVICE, "%s backend: %s", b->name, b->err.msg);
        int rc = iris_text_forward(r->t, b, r->kv, x, NULL, NULL, err);
        void *g = NULL;
        int rc_end = b->graph_end(b, &g);
        if (rc || rc_end) {
            /* an op failed while recording: plain steps from now on */
            if (g) b->graph_free(g);
            r->graphs_broken = 1;
            memset(slot, 0, sizeof *slot);
            return rc ? rc : iris_err_set(err, IRIS_EDEVICE, "%s backend: %s", b->name, b->err.msg);
        }
        slot->graph = g;
    }
    return b->graph_replay(b, slot->graph) ? iris_err_set(err, IRIS_EDEVICE, "%s backend: %s", b->name, b->err.msg) : 0;
}

static int step(iris_runner *r, const iris_text_seq *seqs, int n_seqs, const iris_runner_sampling *smp,
                iris_text_trace_fn trace, void *ud, iris_runner_out *out, iris_err *err) {
    iris_backend *b = r->b;
    const double t_start = iris_now_s();
    memset(out, 0, sizeof *out);
    step_shape sh;
    int rc = shape_of(r, seqs, n_seqs, &sh, err);
    if (rc || sh.R == 0) return rc;
    int use_graph = b->graph_begin && !r->lim.no_graphs && !trace && sh.n_img == 0 && sh.R == n_seqs && !r->graphs_broken;
    const int n_logits = sh.n_logits, n_real = n_seqs; /* the callers' rows; a padded step computes more */
    if (use_graph) {
        sh.max_blocks = (sh.max_blocks + IRIS_ATTN_PLAN_BLOCKS - 1) / IRIS_ATTN_PLAN_BLOCKS * IRIS_ATTN_PLAN_BLOCKS;
        int want = iris_plan_graph_pick(r->bucket, r->n_buckets, n_seqs);
        if (want > n_seqs && want <= r->lim.max_rows && want - n_seqs + sh.n_logits <= r->lim.max_logits) {
            memcpy(r->padded, seqs, sizeof *seqs * (size_t)n_seqs);
            for (int i = n_seqs; i < want; i++) r->padded[i] = r->pad;
            sh.R += want - n_seqs, sh.n_logits += want - n_seqs;
            seqs = r->padded, n_seqs = want;
        }
    }
    size_t ints = pack_meta(r, seqs, n_real, n_seqs, &sh);

    const act_layout al = r->al;
    char *A = r->d_act;
    const int R = sh.R;
    int32_t *d_tok = r->d_meta, *d_pos = d_tok + R, *d_seq = d_pos + 3 * (size_t)R, *d_ctx = d_seq + R;
    int32_t *d_slot = d_ctx + R, *d_bt = d_slot + R, *d_img = d_bt + (size_t)n_seqs * sh.max_blocks;
    iris_attn_meta meta = {.n_rows = R, .row_seq = d_seq, .row_ctx = d_ctx, .block_tables = d_bt,
                           .max_blocks = sh.max_blocks, .slot = d_slot, .n_seqs = n_seqs,
                           .tiles = sh.n_lone >= 0 ? d_img + sh.n_img + sh.n_logits : NULL, .n_tiles = sh.n_tiles,
                           .lone_rows = sh.n_lone >= 0 ? d_img + sh.n_img + sh.n_logits + R : NULL,
                           .n_lone = sh.n_lone >= 0 ? sh.n_lone : 0};
    iris_text_batch x = {.n_rows = R, .n_img = sh.n_img, .n_deepstack = sh.n_ds, .n_logits = sh.n_logits,
                         .tokens = d_tok, .pos = d_pos, .img_rows = d_img, .logit_rows = d_img + sh.n_img,
                         .meta = &meta, .img = A + al.img, .h = A + al.h, .x = A + al.x, .q = A + al.q,
                         .k = A + al.k, .v = A + al.v, .o = A + al.o, .g = A + al.g, .u = A + al.u,
                         .logits = r->d_lg, .trace_h = trace ? r->trace_h : NULL};
    if (b->upload(b, r->d_meta, r->hm, ints * sizeof(int32_t)) || put_images(r, seqs, n_seqs, &sh, A + al.img))
        return iris_err_set(err, IRIS_EDEVICE, "%s backend: %s", b->name, b->err.msg);
    /* Embeddings in host memory: the rows go up into h before the forward (or its graph), which
     * then skips the lookup; the previous step's copy from h_emb is done (it ended in a sync). */
    if (r->t->embed_host) {
        if ((rc = iris_text_embed_rows(r->t, r->hm, R, b->act, r->h_emb, err))) return rc;
        if (b->upload(b, x.h, r->h_emb, (size_t)R * r->t->cfg.hidden_size * iris_dtype_size(b->act)))
            return iris_err_set(err, IRIS_EDEVICE, "%s backend: %s", b->name, b->err.msg);
        x.h_embedded = 1;
    }
    rc = use_graph ? forward_graph(r, &x, n_seqs, sh.max_blocks, err)
                   : iris_text_forward(r->t, b, r->kv, &x, trace, ud, err);
    if (rc) return rc;
    const double launch_s = iris_now_s() - t_start;
    int k = trace ? 0 : top_k_of(r, smp, n_logits), n_regions = 0, n_masked = 0;
    double mask_s = 0;
    if (!trace && smp && smp->masked && smp->mask && n_logits > 0) {
        if (!r->h_mask) return iris_err_set(err, IRIS_EINVAL, "runner: constrained rows, but opened without masks");
        double a = iris_now_s();
        n_regions = masks_of(r, smp, n_logits, &n_masked);
        mask_s = n_regions ? iris_now_s() - a : 0;
    }
    if (n_logits > 0 && logits_out(r, n_logits, smp, k, k > 0 && n_masked ? n_regions : 0))
        return iris_err_set(err, IRIS_EDEVICE, "%s backend: %s", b->name, b->err.msg);
    if (b->sync(b)) return iris_err_set(err, IRIS_EDEVICE, "%s backend: %s", b->name, b->err.msg);
    *out = (iris_runner_out){.k = k, .whole = r->whole, .ids = r->top_ids, .vals = r->top_vals,
                             .logits = r->logits, .n_rows = n_logits, .n_masked = k > 0 ? r->n_masked : 0,
                             .mask_s = mask_s, .launch_s = launch_s};
    return IRIS_OK;
}

int iris_runner_step(iris_runner *r, const iris_text_seq *seqs, int n_seqs, const iris_runner_sampling *smp,
                     iris_runner_out *out, iris_err *err) {
    return step(r, seqs, n_seqs, smp, NULL, NULL, out, err);
}

int iris_runner_step_trace(iris_runner *r, const iris_text_seq *seqs, int n_seqs, iris_text_trace_fn trace,
                           void *ud, iris_runner_out *out, iris_err *err) {
    if (trace && !r->trace_h) return iris_err_set(err, IRIS_EINVAL, "runner: opened without a trace buffer");
    return step(r, seqs, n_seqs, NULL, trace, ud, out, err);
}

int iris_runner_forward(const iris_text *t, iris_backend *b, iris_kv_cache *kv, const iris_text_seq *seqs, int n_seqs,
                        float *logits, iris_text_trace_fn trace, void *ud, iris_err *err) {
    iris_runner_limits lim = {.max_seqs = n_seqs > 0 ? n_seqs : 1, .trace = trace != NULL};
    for (int s = 0; s < n_seqs; s++) {
        lim.n_deepstack = seqs[s].n_deepstack > lim.n_deepstack ? seqs[s].n_deepstack : lim.n_deepstack;
        lim.max_rows += seqs[s].n_new > 0 ? seqs[s].n_new : 0;
        lim.max_logits += seqs[s].n_new > seqs[s].logits_from ? seqs[s].n_new - seqs[s].logits_from : 0;
        int ctx = seqs[s].n_past + seqs[s].n_new;
        lim.max_context = ctx > lim.max_context ? ctx : lim.max_context;
    }
    if (lim.max_rows < 1) lim.max_rows = 1;
    if (lim.max_context < 1) lim.max_context = 1;
    if (lim.max_logits < 1) lim.max_logits = 1;
    iris_runner *r = NULL;
    int rc = iris_runner_open(t, b, kv, &lim, &r, err);
    iris_runner_out o;
    if (!rc) rc = step(r, seqs, n_seqs, NULL, trace, ud, &o, err);
    if (!rc) memcpy(logits, o.logits, sizeof(float) * (size_t)o.n_rows * t->cfg.vocab_size);
    iris_runner_close(r);
    return rc;
}
