/* bench_cuda.c: speed of the CUDA backend's ops and of a Qwen3-VL-shaped
 * decoder and vision encoder built from them, on random weights held in the
 * arena (no checkpoint needed: the model code's own `iris bench` replaces the
 * model part once text.c runs on the op table).
 *
 *   build/cuda/bench/bench_cuda [2B|4B] [fp8|bf16] [ctx=512]
 *   build/cuda/bench/bench_cuda int4        (the 4-bit GEMV alone, 8B's shapes, and a decode
 *                                           step's 4-bit GEMVs in one graph)
 *
 * Prints JSON lines: the device-to-device copy bandwidth (the ceiling of
 * every memory-bound op), the W8A16/W16A16 kernels' achieved bandwidth on the
 * model's shapes, linear throughput by batch rows on both large-batch paths
 * (to place the gemv/cuBLASLt switch), decode tok/s per batch size (one CUDA
 * graph per step), prefill tok/s, the vision encoder for a 1024x1024 image,
 * and GPU memory.  Figures are reported, never asserted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_testing.h"

static iris_backend *B;
static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

static void die(const char *what) {
    fprintf(stderr, "bench_cuda: %s: %s\n", what, B ? B->err.msg : "");
    exit(1);
}
#define OK(x) \
    do { \
        if ((x) != 0) die(#x); \
    } while (0)

/* Device buffer of random values shaped like the dtype (bf16 in ±scale, fp8
 * without NaN codes, f32 in scale·[0.5, 1.5)).  Large buffers repeat one
 * 64 MiB random block per dtype (generating gigabytes on the host would
 * take longer than the whole benchmark); timings do not depend on values. */
#define POOL_BYTES ((size_t)64 << 20)
static unsigned char *g_pool[3];

static unsigned char *dev_random_pool_init(void) {
    g_pool[0] = malloc(POOL_BYTES);
    g_pool[1] = malloc(POOL_BYTES);
    for (size_t i = 0; i < POOL_BYTES; i++) {
        uint8_t q = (uint8_t)rnd();
        g_pool[0][i] = (q & 0x7f) == 0x7f ? q ^ 1 : q;
    }
    for (size_t i = 0; i < POOL_BYTES; i += 2) {
        float f = 0.05f * ((float)(rnd() & 0xffff) / 32768.0f - 1.0f);
        uint32_t u;
        memcpy(&u, &f, 4);
        uint16_t v = (uint16_t)(u >> 16);
        memcpy(g_pool[1] + i, &v, 2);
    }
    return NULL;
}

static void *dev_random(size_t n, iris_dtype dt, float scale) {
    int k = dt == IRIS_DT_F8_E4M3 ? 0 : dt == IRIS_DT_F32 ? 2 : 1;
    size_t es = k == 0 ? 1 : k == 2 ? 4 : 2, bytes = n * es;
    void *d = B->alloc(B, bytes ? bytes : 1);
    if (!d) die("arena exhausted");
    if (!g_pool[0]) { /* the two shared blocks, made once */
        free(dev_random_pool_init());
    }
    unsigned char *h = k == 1 && g_pool[1] && scale == 0.05f ? g_pool[1] : k == 0 && g_pool[0] ? g_pool[0] : NULL;
    int fresh = !h;
    if (fresh) {
        size_t len = bytes < POOL_BYTES ? bytes : POOL_BYTES;
        h = malloc(len ? len : 1);
        for (size_t i = 0; i < len; i += es) {
            if (es == 1) {
                uint8_t q = (uint8_t)rnd();
                h[i] = (q & 0x7f) == 0x7f ? q ^ 1 : q;
            } else if (es == 2) {
                float f = scale * ((float)(rnd() & 0xffff) / 32768.0f - 1.0f);
                uint32_t u;
                memcpy(&u, &f, 4);
                uint16_t v = (uint16_t)(u >> 16);
                memcpy(h + i, &v, 2);
            } else {
                float f = scale * (0.5f + (float)(rnd() & 0xffff) / 65536.0f);
                memcpy(h + i, &f, 4);
            }
        }
    }
    size_t plen = bytes < POOL_BYTES ? bytes : POOL_BYTES;
    for (size_t off = 0; off < bytes; off += plen) {
        size_t len = bytes - off < plen ? bytes - off : plen;
        OK(B->upload(B, (char *)d + off, h, len));
    }
    OK(B->sync(B));
    if (fresh) free(h);
    return d;
}

static iris_tensor tview(void *d, iris_dtype dt, int64_t rows, int64_t cols) {
    iris_tensor t;
    memset(&t, 0, sizeof t);
    t.data = d, t.dtype = dt, t.rows = rows, t.cols = cols;
    return t;
}

static iris_tensor weight(int64_t out, int64_t in, int fp8) {
    iris_tensor w = tview(dev_random((size_t)(out * in), fp8 ? IRIS_DT_F8_E4M3 : IRIS_DT_BF16, 0.05f),
                          fp8 ? IRIS_DT_F8_E4M3 : IRIS_DT_BF16, out, in);
    if (fp8) {
        w.scale = dev_random((size_t)(((out + 127) / 128) * ((in + 127) / 128)), IRIS_DT_F32, 0.02f / 448.0f);
        w.block[0] = w.block[1] = 128;
    }
    return w;
}

static size_t wbytes(const iris_tensor *w) { return (size_t)(w->rows * w->cols) * (w->dtype == IRIS_DT_F8_E4M3 ? 1 : 2); }

/* Median of `reps` timings (ms) of fn; each timing covers `inner` back-to-back
 * calls (divided out), so a small kernel's launch latency is not counted. */
typedef void (*work_fn)(void *);
static double time_ms_n(work_fn fn, void *arg, int reps, int inner) {
    double t[64];
    if (reps > 64) reps = 64;
    fn(arg);
    OK(B->sync(B));
    for (int i = 0; i < reps; i++) {
        OK(B->sync(B));
        OK(iris_cuda_mark(B));
        for (int k = 0; k < inner; k++) fn(arg);
        t[i] = iris_cuda_elapsed_ms(B) / inner;
    }
    for (int i = 1; i < reps; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
        }
    return t[reps / 2];
}
static double time_ms(work_fn fn, void *arg, int reps) { return time_ms_n(fn, arg, reps, 1); }

/* ---- the decoder -------------------------------------------------------------------------- */

typedef struct {
    int H, L, nq, nkv, hd, I, V;
    int fp8;
} shape;

typedef struct {
    iris_tensor q, k, v, o, gate, up, down, in_norm, post_norm, q_norm, k_norm;
    iris_kv_layer kv;
} layer;

typedef struct {
    shape s;
    iris_tensor embed, norm;
    layer *layers;
    size_t weight_bytes;
    int n_blocks;
} model;

typedef struct {
    model *m;
    int n, n_logits;            /* rows this step; logits rows (the last n_logits rows) */
    int32_t *ids, *pos;         /* device */
    iris_attn_meta meta;        /* device arrays */
    void *x, *t, *qb, *kb, *vb, *ob, *g, *u, *logits;
    int dim_of[64];
    float inv[64];
} step;

static void build_model(model *m, shape s, int n_blocks) {
    memset(m, 0, sizeof *m);
    m->s = s;
    m->embed = tview(dev_random((size_t)s.V * s.H, IRIS_DT_BF16, 0.05f), IRIS_DT_BF16, s.V, s.H);
    m->norm = tview(dev_random((size_t)s.H, IRIS_DT_BF16, 1.0f), IRIS_DT_BF16, 1, s.H);
    m->layers = calloc((size_t)s.L, sizeof *m->layers);
    m->n_blocks = n_blocks;
    m->weight_bytes = wbytes(&m->embed);
    for (int il = 0; il < s.L; il++) {
        layer *l = &m->layers[il];
        l->q = weight((int64_t)s.nq * s.hd, s.H, s.fp8);
        l->k = weight((int64_t)s.nkv * s.hd, s.H, s.fp8);
        l->v = weight((int64_t)s.nkv * s.hd, s.H, s.fp8);
        l->o = weight(s.H, (int64_t)s.nq * s.hd, s.fp8);
        l->gate = weight(s.I, s.H, s.fp8);
        l->up = weight(s.I, s.H, s.fp8);
        l->down = weight(s.H, s.I, s.fp8);
        m->weight_bytes += wbytes(&l->q) + wbytes(&l->k) + wbytes(&l->v) + wbytes(&l->o) + wbytes(&l->gate) +
                           wbytes(&l->up) + wbytes(&l->down);
        l->in_norm = tview(dev_random((size_t)s.H, IRIS_DT_BF16, 1.0f), IRIS_DT_BF16, 1, s.H);
        l->post_norm = tview(dev_random((size_t)s.H, IRIS_DT_BF16, 1.0f), IRIS_DT_BF16, 1, s.H);
        l->q_norm = tview(dev_random((size_t)s.hd, IRIS_DT_BF16, 1.0f), IRIS_DT_BF16, 1, s.hd);
        l->k_norm = tview(dev_random((size_t)s.hd, IRIS_DT_BF16, 1.0f), IRIS_DT_BF16, 1, s.hd);
        size_t kv_elems = (size_t)n_blocks * 16 * s.nkv * s.hd;
        l->kv = (iris_kv_layer){dev_random(kv_elems, IRIS_DT_BF16, 0.05f), dev_random(kv_elems, IRIS_DT_BF16, 0.05f),
                                IRIS_DT_BF16, n_blocks, s.nkv, s.hd};
    }
}

static void *dev_ints(const int32_t *h, size_t n) {
    void *d = B->alloc(B, n * 4);
    if (!d) die("arena exhausted");
    OK(B->upload(B, d, h, n * 4));
    return d;
}

/* A step of n_seqs sequences with `rows_per_seq` new rows each after ctx cached tokens. */
static void build_step(step *st, model *m, int n_seqs, int rows_per_seq, int ctx, int n_logits) {
    shape s = m->s;
    memset(st, 0, sizeof *st);
    st->m = m;
    int n = n_seqs * rows_per_seq, max_blocks = (ctx + rows_per_seq + 15) / 16;
    st->n = n, st->n_logits = n_logits;
    if (n_seqs * max_blocks > m->n_blocks) die("KV cache too small for the step");
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n), *pos = malloc(sizeof(int32_t) * 3 * (size_t)n);
    int32_t *rs = malloc(sizeof(int32_t) * (size_t)n), *rc = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *slot = malloc(sizeof(int32_t) * (size_t)n), *bt = malloc(sizeof(int32_t) * (size_t)(n_seqs * max_blocks));
    for (int i = 0; i < n_seqs * max_blocks; i++) bt[i] = i;
    for (int q = 0, r = 0; q < n_seqs; q++)
        for (int j = 0; j < rows_per_seq; j++, r++) {
            int p = ctx + j;
            ids[r] = (int32_t)(rnd() % (uint32_t)s.V);
            pos[r] = pos[n + r] = pos[2 * n + r] = p;
            rs[r] = q, rc[r] = p + 1, slot[r] = bt[q * max_blocks + p / 16] * 16 + p % 16;
        }
    st->ids = dev_ints(ids, (size_t)n);
    st->pos = dev_ints(pos, 3 * (size_t)n);
    st->meta = (iris_attn_meta){.n_rows = n, .row_seq = dev_ints(rs, (size_t)n), .row_ctx = dev_ints(rc, (size_t)n),
                                .block_tables = dev_ints(bt, (size_t)(n_seqs * max_blocks)), .max_blocks = max_blocks,
                                .slot = dev_ints(slot, (size_t)n), .n_seqs = n_seqs};
    free(ids), free(pos), free(rs), free(rc), free(slot), free(bt);
    size_t e = 2;
    st->x = B->alloc(B, (size_t)n * s.H * e);
    st->t = B->alloc(B, (size_t)n * s.H * e);
    st->qb = B->alloc(B, (size_t)n * s.nq * s.hd * e);
    st->kb = B->alloc(B, (size_t)n * s.nkv * s.hd * e);
    st->vb = B->alloc(B, (size_t)n * s.nkv * s.hd * e);
    st->ob = B->alloc(B, (size_t)n * s.nq * s.hd * e);
    st->g = B->alloc(B, (size_t)n * s.I * e);
    st->u = B->alloc(B, (size_t)n * s.I * e);
    st->logits = B->alloc(B, (size_t)n_logits * s.V * e);
    if (!st->logits) die("arena exhausted (step buffers)");
    for (int j = 0; j < s.hd / 2; j++) {
        st->dim_of[j] = j % 3 == 1 && j < 60 ? 1 : j % 3 == 2 && j < 60 ? 2 : 0;
        st->inv[j] = 1.0f / powf(5e6f, (float)(2 * j) / (float)s.hd);
    }
}

static void free_step(step *st) {
    void *p[] = {st->ids, st->pos, (void *)st->meta.row_seq, (void *)st->meta.row_ctx, (void *)st->meta.block_tables,
                 (void *)st->meta.slot, st->x, st->t, st->qb, st->kb, st->vb, st->ob, st->g, st->u, st->logits};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) B->free(B, p[i]);
}

/* The Qwen3 decoder layer of QWEN3VL.md §6.2, then the final norm and the tied lm_head. */
static void run_step(void *arg) {
    step *st = arg;
    model *m = st->m;
    shape s = m->s;
    int n = st->n;
    iris_tensor x = tview(st->x, IRIS_DT_BF16, n, s.H), t = tview(st->t, IRIS_DT_BF16, n, s.H);
    iris_tensor q = tview(st->qb, IRIS_DT_BF16, n, (int64_t)s.nq * s.hd), k = tview(st->kb, IRIS_DT_BF16, n, (int64_t)s.nkv * s.hd);
    iris_tensor v = tview(st->vb, IRIS_DT_BF16, n, (int64_t)s.nkv * s.hd), o = tview(st->ob, IRIS_DT_BF16, n, (int64_t)s.nq * s.hd);
    iris_tensor qh = tview(st->qb, IRIS_DT_BF16, (int64_t)n * s.nq, s.hd), kh = tview(st->kb, IRIS_DT_BF16, (int64_t)n * s.nkv, s.hd);
    iris_tensor g = tview(st->g, IRIS_DT_BF16, n, s.I), u = tview(st->u, IRIS_DT_BF16, n, s.I);
    OK(B->embed(B, &m->embed, st->ids, n, &x));
    for (int il = 0; il < s.L; il++) {
        layer *l = &m->layers[il];
        OK(B->rms_norm(B, &x, &l->in_norm, 1e-6f, &t));
        OK(B->linear(B, &t, &l->q, NULL, &q));
        OK(B->linear(B, &t, &l->k, NULL, &k));
        OK(B->linear(B, &t, &l->v, NULL, &v));
        OK(B->rms_norm(B, &qh, &l->q_norm, 1e-6f, &qh));
        OK(B->rms_norm(B, &kh, &l->k_norm, 1e-6f, &kh));
        OK(B->rope(B, &q, s.nq, s.hd, st->pos, n, st->dim_of, st->inv));
        OK(B->rope(B, &k, s.nkv, s.hd, st->pos, n, st->dim_of, st->inv));
        OK(B->kv_write(B, &l->kv, &k, &v, &st->meta));
        OK(B->attn_paged(B, &q, &l->kv, &st->meta, s.nq, &o));
        OK(B->linear(B, &o, &l->o, NULL, &t));
        OK(B->add(B, &x, &t));
        OK(B->rms_norm(B, &x, &l->post_norm, 1e-6f, &t));
        OK(B->linear(B, &t, &l->gate, NULL, &g));
        OK(B->linear(B, &t, &l->up, NULL, &u));
        OK(B->silu_mul(B, &g, &u));
        OK(B->linear(B, &g, &l->down, NULL, &t));
        OK(B->add(B, &x, &t));
    }
    iris_tensor xl = tview((char *)st->x + (size_t)(n - st->n_logits) * s.H * 2, IRIS_DT_BF16, st->n_logits, s.H);
    iris_tensor tl = tview(st->t, IRIS_DT_BF16, st->n_logits, s.H), lg = tview(st->logits, IRIS_DT_BF16, st->n_logits, s.V);
    OK(B->rms_norm(B, &xl, &m->norm, 1e-6f, &tl));
    OK(B->linear(B, &tl, &m->embed, NULL, &lg));
}

/* The same step with the fused ops (add_rms_norm, qk_norm_rope_kv): 10 kernels a layer instead of 18. */
static void run_step_fused(void *arg) {
    step *st = arg;
    model *m = st->m;
    shape s = m->s;
    int n = st->n;
    iris_tensor x = tview(st->x, IRIS_DT_BF16, n, s.H), t = tview(st->t, IRIS_DT_BF16, n, s.H);
    iris_tensor q = tview(st->qb, IRIS_DT_BF16, n, (int64_t)s.nq * s.hd), k = tview(st->kb, IRIS_DT_BF16, n, (int64_t)s.nkv * s.hd);
    iris_tensor v = tview(st->vb, IRIS_DT_BF16, n, (int64_t)s.nkv * s.hd), o = tview(st->ob, IRIS_DT_BF16, n, (int64_t)s.nq * s.hd);
    iris_tensor g = tview(st->g, IRIS_DT_BF16, n, s.I), u = tview(st->u, IRIS_DT_BF16, n, s.I);
    OK(B->embed(B, &m->embed, st->ids, n, &x));
    OK(iris_backend_add_rms_norm(B, &x, NULL, &m->layers[0].in_norm, 1e-6f, &t));
    for (int il = 0; il < s.L; il++) {
        layer *l = &m->layers[il];
        OK(B->linear(B, &t, &l->q, NULL, &q));
        OK(B->linear(B, &t, &l->k, NULL, &k));
        OK(B->linear(B, &t, &l->v, NULL, &v));
        OK(iris_backend_qk_norm_rope_kv(B, &q, &k, &v, &l->q_norm, &l->k_norm, 1e-6f, s.nq, st->pos, n, st->dim_of,
                                        st->inv, &l->kv, &st->meta));
        OK(B->attn_paged(B, &q, &l->kv, &st->meta, s.nq, &o));
        OK(B->linear(B, &o, &l->o, NULL, &t));
        OK(iris_backend_add_rms_norm(B, &x, &t, &l->post_norm, 1e-6f, &t));
        OK(B->linear(B, &t, &l->gate, NULL, &g));
        OK(B->linear(B, &t, &l->up, NULL, &u));
        OK(B->silu_mul(B, &g, &u));
        OK(B->linear(B, &g, &l->down, NULL, &t));
        OK(iris_backend_add_rms_norm(B, &x, &t, il + 1 < s.L ? &m->layers[il + 1].in_norm : &m->norm, 1e-6f, &t));
    }
    iris_tensor tl = tview((char *)st->t + (size_t)(n - st->n_logits) * s.H * 2, IRIS_DT_BF16, st->n_logits, s.H);
    iris_tensor lg = tview(st->logits, IRIS_DT_BF16, st->n_logits, s.V);
    OK(B->linear(B, &tl, &m->embed, NULL, &lg));
}

static iris_cuda_graph *g_graph;
static void run_graph(void *arg) {
    (void)arg;
    OK(iris_cuda_graph_replay(B, g_graph));
}

/* In-graph cost of one call of fn (ms): `inner` calls captured in one graph, replayed. */
static double time_in_graph(work_fn fn, void *arg, int inner) {
    iris_cuda_graph *saved = g_graph;
    OK(iris_cuda_graph_begin(B));
    for (int k = 0; k < inner; k++) fn(arg);
    OK(iris_cuda_graph_end(B, &g_graph));
    double ms = time_ms(run_graph, NULL, 15) / inner;
    iris_cuda_graph_free(g_graph);
    g_graph = saved;
    return ms;
}

/* One op of the decode step, for the per-op breakdown. */
typedef struct {
    step *st;
    int op;
} op_args;

static void run_op(void *p) {
    op_args *a = p;
    step *st = a->st;
    model *m = st->m;
    shape s = m->s;
    layer *l = &m->layers[0];
    int n = st->n;
    iris_tensor x = tview(st->x, IRIS_DT_BF16, n, s.H), t = tview(st->t, IRIS_DT_BF16, n, s.H);
    iris_tensor q = tview(st->qb, IRIS_DT_BF16, n, (int64_t)s.nq * s.hd), k = tview(st->kb, IRIS_DT_BF16, n, (int64_t)s.nkv * s.hd);
    iris_tensor v = tview(st->vb, IRIS_DT_BF16, n, (int64_t)s.nkv * s.hd), o = tview(st->ob, IRIS_DT_BF16, n, (int64_t)s.nq * s.hd);
    iris_tensor qh = tview(st->qb, IRIS_DT_BF16, (int64_t)n * s.nq, s.hd);
    iris_tensor g = tview(st->g, IRIS_DT_BF16, n, s.I), u = tview(st->u, IRIS_DT_BF16, n, s.I);
    switch (a->op) {
    case 0: OK(B->rms_norm(B, &x, &l->in_norm, 1e-6f, &t)); break;
    case 1: OK(B->linear(B, &t, &l->q, NULL, &q)); break;
    case 2: OK(B->linear(B, &t, &l->k, NULL, &k)); break;
    case 3: OK(B->rms_norm(B, &qh, &l->q_norm, 1e-6f, &qh)); break;
    case 4: OK(B->rope(B, &q, s.nq, s.hd, st->pos, n, st->dim_of, st->inv)); break;
    case 5: OK(B->kv_write(B, &l->kv, &k, &v, &st->meta)); break;
    case 6: OK(B->attn_paged(B, &q, &l->kv, &st->meta, s.nq, &o)); break;
    case 7: OK(B->linear(B, &o, &l->o, NULL, &t)); break;
    case 8: OK(B->add(B, &x, &t)); break;
    case 9: OK(B->linear(B, &t, &l->gate, NULL, &g)); break;
    case 10: OK(B->silu_mul(B, &g, &u)); break;
    case 11: OK(B->linear(B, &g, &l->down, NULL, &t)); break;
    default: {
        iris_tensor lg = tview(st->logits, IRIS_DT_BF16, n, s.V);
        OK(B->linear(B, &t, &m->embed, NULL, &lg));
    }
    }
}

static void decode_breakdown(step *st) {
    static const char *names[] = {"rms_norm", "q_proj", "k_proj", "q_norm", "rope_q", "kv_write", "attn",
                                  "o_proj", "add", "gate_proj", "silu_mul", "down_proj", "lm_head"};
    printf("{\"bench\":\"decode_ops_us\",\"batch\":%d", st->n);
    for (int op = 0; op < 13; op++) {
        op_args a = {st, op};
        printf(",\"%s\":%.2f", names[op], time_in_graph(run_op, &a, op == 12 ? 4 : 20) * 1e3);
    }
    printf("}\n");
}

/* ---- micro benchmarks ---------------------------------------------------------------------- */

typedef struct {
    iris_tensor x, w, y;
} lin_args;
static void run_linear(void *a) {
    lin_args *l = a;
    OK(B->linear(B, &l->x, &l->w, NULL, &l->y));
}

static void bench_linear_shapes(int fp8, shape s) {
    int64_t shapes[][2] = {{(int64_t)s.nq * s.hd, s.H}, {(int64_t)s.nkv * s.hd, s.H}, {s.I, s.H}, {s.H, s.I}, {s.V, s.H}};
    const char *names[] = {"q_proj", "k_proj", "gate_proj", "down_proj", "lm_head(bf16)"};
    void *xb = dev_random((size_t)64 * 16384, IRIS_DT_BF16, 1.0f), *yb = B->alloc(B, (size_t)64 * 160000 * 2);
    for (int i = 0; i < 5; i++) {
        int is_fp8 = fp8 && i < 4;
        lin_args a = {tview(xb, IRIS_DT_BF16, 1, shapes[i][1]), weight(shapes[i][0], shapes[i][1], is_fp8),
                      tview(yb, IRIS_DT_BF16, 1, shapes[i][0])};
        for (int n = 1; n <= 16; n *= 4) {
            a.x.rows = a.y.rows = n;
            double ms = time_ms_n(run_linear, &a, 15, 20);
            printf("{\"bench\":\"gemv\",\"op\":\"%s\",\"dtype\":\"%s\",\"rows\":%d,\"out\":%lld,\"in\":%lld,\"us\":%.2f,"
                   "\"weight_GBps\":%.0f}\n",
                   names[i], is_fp8 ? "fp8" : "bf16", n, (long long)shapes[i][0], (long long)shapes[i][1], ms * 1e3,
                   wbytes(&a.w) / (ms * 1e-3) / 1e9);
        }
        B->free(B, a.w.data);
        B->free(B, (void *)a.w.scale);
    }
    /* The switch point: gemv vs cuBLASLt (dequantized) by rows, on gate_proj. */
    lin_args a = {tview(xb, IRIS_DT_BF16, 1, s.H), weight(s.I, s.H, fp8), tview(yb, IRIS_DT_BF16, 1, s.I)};
    int rows[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
    for (int i = 0; i < 10; i++) {
        a.x.rows = a.y.rows = rows[i];
        iris_cuda_set_gemv_rows(B, 1 << 20);
        double g = time_ms_n(run_linear, &a, 11, 10);
        iris_cuda_set_gemv_rows(B, 0);
        double c = time_ms_n(run_linear, &a, 11, 10);
        printf("{\"bench\":\"linear_switch\",\"dtype\":\"%s\",\"rows\":%d,\"out\":%d,\"in\":%d,\"gemv_us\":%.2f,"
               "\"cublaslt_us\":%.2f}\n",
               fp8 ? "fp8" : "bf16", rows[i], s.I, s.H, g * 1e3, c * 1e3);
    }
    iris_cuda_set_gemv_rows(B, -1);
    /* Large batches: TFLOP/s of the cuBLASLt path. */
    int big[] = {128, 512, 1024, 4096};
    B->free(B, yb);
    yb = B->alloc(B, (size_t)4096 * s.I * 2);
    void *xb2 = dev_random((size_t)4096 * s.I, IRIS_DT_BF16, 1.0f);
    for (int i = 0; i < 4; i++) {
        a.x = tview(xb2, IRIS_DT_BF16, big[i], s.H);
        a.y = tview(yb, IRIS_DT_BF16, big[i], s.I);
        double ms = time_ms(run_linear, &a, 11);
        printf("{\"bench\":\"linear_large\",\"dtype\":\"%s\",\"rows\":%d,\"out\":%d,\"in\":%d,\"us\":%.1f,\"TFLOPs\":%.1f}\n",
               fp8 ? "fp8" : "bf16", big[i], s.I, s.H, ms * 1e3, 2.0 * big[i] * s.I * s.H / (ms * 1e-3) / 1e12);
    }
    B->free(B, a.w.data), B->free(B, (void *)a.w.scale), B->free(B, xb), B->free(B, yb), B->free(B, xb2);
}

/* ---- the 4-bit GEMV (bench_cuda int4) ----------------------------------------------------------
 * Qwen3-VL-8B's decode linears as W4A16 (group 128 symmetric, as `iris synth --dtype int4` writes
 * them; also zero points, and group 32): the tensor-core GEMV (cuda_gemv_i4.cu) and the per-row
 * reference kernel it replaced (iris_cuda_set_i4_ref; past 8 rows it dequantizes for cuBLASLt), by
 * rows, with the bytes read (words, scales, zero points) over the time.  Two timings of each: "us"
 * reads one copy of the weights over and over (what fits the 50 MB L2 of an H100 stays there), and
 * "cold_us" cycles through copies of at least 256 MB in all, as a decode step's layers do.
 * gemv_int4_warps lines: every warps split forced (iris_cuda_set_i4_warps), against the rule's. */
#define I4_COPIES 32
typedef struct {
    iris_tensor x, w[I4_COPIES][3], y[3], u;
    int m, swiglu, copies, k, cold;
} i4_args;
static void run_i4(void *p) {
    i4_args *a = p;
    iris_tensor *w = a->w[a->cold ? a->k : 0];
    if (a->cold) a->k = (a->k + 1) % a->copies;
    const iris_tensor *ws[3] = {&w[0], &w[1], &w[2]};
    iris_tensor *ys[3] = {&a->y[0], &a->y[1], &a->y[2]};
    if (a->swiglu) OK(iris_backend_linear_swiglu(B, &a->x, &w[0], &w[1], &a->y[0], &a->u, NULL));
    else if (a->m > 1) OK(iris_backend_linear_n(B, &a->x, a->m, ws, ys, NULL));
    else OK(B->linear(B, &a->x, &w[0], NULL, &a->y[0]));
}

static iris_tensor weight_i4(int64_t out, int64_t in, int group, int asym) {
    iris_tensor w = tview(dev_random((size_t)(out * in / 4), IRIS_DT_BF16, 0.05f), IRIS_DT_I4, out, in);
    w.qscale = dev_random((size_t)(out * (in / group)), IRIS_DT_BF16, 0.05f);
    w.qscale_dtype = IRIS_DT_BF16, w.group = group;
    if (asym) w.qzero = dev_random((size_t)((out + 7) / 8 * (in / group) * 2), IRIS_DT_BF16, 0.05f);
    return w;
}
static size_t wbytes_i4(const iris_tensor *w) {
    int64_t ng = w->cols / w->group;
    return (size_t)(w->rows * w->cols / 2 + w->rows * ng * 2 + (w->qzero ? (w->rows + 7) / 8 * ng * 4 : 0));
}

/* The median time (ms) of a's product, one copy of the weights (hot) or cycling through them (cold). */
static double time_i4(i4_args *a, int cold, int reps) {
    a->cold = cold, a->k = 0;
    double t = time_ms_n(run_i4, a, reps, 20);
    a->cold = 0;
    return t;
}

static void bench_int4(void) {
    struct { const char *op; int m, swiglu; int64_t in, out[3]; int group, asym; } cases[] = {
        {"qkv", 3, 0, 4096, {4096, 1024, 1024}, 128, 0},  {"o_proj", 1, 0, 4096, {4096}, 128, 0},
        {"gate_up", 2, 1, 4096, {12288, 12288}, 128, 0},  {"down_proj", 1, 0, 12288, {4096}, 128, 0},
        {"lm_head", 1, 0, 4096, {151936}, 128, 0},        {"gate_up", 2, 1, 4096, {12288, 12288}, 128, 1},
        {"down_proj", 1, 0, 12288, {4096}, 128, 1},       {"gate_up", 2, 1, 4096, {12288, 12288}, 32, 1},
        {"down_proj", 1, 0, 12288, {4096}, 32, 0},
    };
    void *xb = dev_random((size_t)64 * 12288, IRIS_DT_BF16, 1.0f);
    void *yb[3] = {B->alloc(B, (size_t)64 * 151936 * 2), B->alloc(B, (size_t)64 * 12288 * 2), B->alloc(B, (size_t)64 * 1024 * 2)};
    void *ub = B->alloc(B, (size_t)64 * 12288 * 2);
    if (!yb[0] || !yb[1] || !yb[2] || !ub) die("arena exhausted");
    static i4_args a;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memset(&a, 0, sizeof a);
        a.m = cases[c].m, a.swiglu = cases[c].swiglu;
        size_t bytes = 0;
        for (int i = 0; i < a.m; i++) {
            a.w[0][i] = weight_i4(cases[c].out[i], cases[c].in, cases[c].group, cases[c].asym);
            a.y[i] = tview(yb[i], IRIS_DT_BF16, 1, cases[c].out[a.swiglu ? 0 : i]);
            bytes += wbytes_i4(&a.w[0][i]);
        }
        a.copies = (int)((((size_t)256 << 20) + bytes - 1) / bytes);
        if (a.copies > I4_COPIES) a.copies = I4_COPIES;
        for (int k = 1; k < a.copies; k++)
            for (int i = 0; i < a.m; i++) a.w[k][i] = weight_i4(cases[c].out[i], cases[c].in, cases[c].group, cases[c].asym);
        a.u = tview(ub, IRIS_DT_BF16, 1, cases[c].out[0]);
        a.x = tview(xb, IRIS_DT_BF16, 1, cases[c].in);
        int rows[] = {1, 2, 4, 8, 16};
        for (int r = 0; r < 5; r++) {
            a.x.rows = a.u.rows = rows[r];
            for (int i = 0; i < 3; i++) a.y[i].rows = rows[r];
            iris_cuda_set_i4_ref(B, 1);
            double old = time_i4(&a, 0, 15);
            iris_cuda_set_i4_ref(B, 0);
            double hot = time_i4(&a, 0, 15), cold = time_i4(&a, 1, 15);
            printf("{\"bench\":\"gemv_int4\",\"op\":\"%s\",\"group\":%d,\"asym\":%d,\"rows\":%d,\"in\":%lld,\"out\":%lld,"
                   "\"MB\":%.1f,\"us\":%.2f,\"GBps\":%.0f,\"cold_us\":%.2f,\"cold_GBps\":%.0f,\"copies\":%d,"
                   "\"old_us\":%.2f,\"old_GBps\":%.0f}\n",
                   cases[c].op, cases[c].group, cases[c].asym, rows[r], (long long)cases[c].in,
                   (long long)(cases[c].out[0] + (a.m == 3 ? cases[c].out[1] + cases[c].out[2] : 0)), bytes / 1e6,
                   hot * 1e3, bytes / (hot * 1e-3) / 1e9, cold * 1e3, bytes / (cold * 1e-3) / 1e9, a.copies,
                   old * 1e3, bytes / (old * 1e-3) / 1e9);
            fflush(stdout);
            /* every split forced */
            for (int kw = 1; kw <= 8; kw *= 2) {
                iris_cuda_set_i4_warps(B, kw);
                double th = time_i4(&a, 0, 9), tc = time_i4(&a, 1, 9);
                printf("{\"bench\":\"gemv_int4_warps\",\"op\":\"%s\",\"group\":%d,\"asym\":%d,\"rows\":%d,\"warps\":%d,"
                       "\"us\":%.2f,\"GBps\":%.0f,\"cold_us\":%.2f,\"cold_GBps\":%.0f,\"rule_cold_us\":%.2f}\n",
                       cases[c].op, cases[c].group, cases[c].asym, rows[r], kw, th * 1e3, bytes / (th * 1e-3) / 1e9,
                       tc * 1e3, bytes / (tc * 1e-3) / 1e9, cold * 1e3);
            }
            iris_cuda_set_i4_warps(B, 0);
            fflush(stdout);
        }
        /* more rows: the GEMV in launches of 16 tokens against dequantization + cuBLASLt */
        int more[] = {24, 32, 48, 64};
        for (int r = 0; r < 4 && c < 4; r++) {
            a.x.rows = a.u.rows = more[r];
            for (int i = 0; i < 3; i++) a.y[i].rows = more[r];
            iris_cuda_set_i4_rows(B, 64);
            double g = time_ms_n(run_i4, &a, 11, 10);
            iris_cuda_set_i4_rows(B, 0);
            double d = time_ms_n(run_i4, &a, 11, 10);
            printf("{\"bench\":\"int4_switch\",\"op\":\"%s\",\"rows\":%d,\"gemv_us\":%.2f,\"dequant_cublaslt_us\":%.2f}\n",
                   cases[c].op, more[r], g * 1e3, d * 1e3);
        }
        for (int k = 0; k < a.copies; k++)
            for (int i = 0; i < a.m; i++) {
                B->free(B, a.w[k][i].data), B->free(B, (void *)a.w[k][i].qscale);
                if (a.w[k][i].qzero) B->free(B, (void *)a.w[k][i].qzero);
            }
    }
    B->free(B, xb), B->free(B, ub);
    for (int i = 0; i < 3; i++) B->free(B, yb[i]);
}

/* A decode step's 4-bit GEMVs alone: 8B's 36 layers of q/k/v (one launch), o_proj, gate/up with
 * SiLU·mul and down_proj, each layer its own weights (3.6 GB: none stays in L2), in one CUDA graph
 * replayed as the engine replays a step (with PDL between the launches), for the rule (warps 0) and
 * each split forced: what the step's GEMVs cost together, the other ops left out. */
#define I4_LAYERS 36
typedef struct {
    iris_tensor w[I4_LAYERS][7], x, q[3], y, g, u; /* q, k, v, o_proj, gate, up, down_proj */
} i4_chain;

/* One step's GEMVs in order; the activations pass from one to the next (their values do not matter). */
static void i4_chain_issue(i4_chain *c) {
    for (int l = 0; l < I4_LAYERS; l++) {
        iris_tensor *w = c->w[l];
        const iris_tensor *ws[3] = {&w[0], &w[1], &w[2]};
        iris_tensor *ys[3] = {&c->q[0], &c->q[1], &c->q[2]};
        OK(iris_backend_linear_n(B, &c->x, 3, ws, ys, NULL));
        OK(B->linear(B, &c->q[0], &w[3], NULL, &c->y));
        OK(iris_backend_linear_swiglu(B, &c->y, &w[4], &w[5], &c->g, &c->u, NULL));
        OK(B->linear(B, &c->g, &w[6], NULL, &c->x));
    }
}

static void bench_int4_chain(void) {
    static i4_chain c;
    memset(&c, 0, sizeof c);
    size_t bytes = 0;
    const int64_t outs[7] = {4096, 1024, 1024, 4096, 12288, 12288, 4096};
    for (int l = 0; l < I4_LAYERS; l++)
        for (int i = 0; i < 7; i++) {
            c.w[l][i] = weight_i4(outs[i], i == 6 ? 12288 : 4096, 128, 0);
            bytes += wbytes_i4(&c.w[l][i]);
        }
    void *xb = dev_random((size_t)8 * 4096, IRIS_DT_BF16, 1.0f);
    void *qb[3] = {B->alloc(B, (size_t)8 * 4096 * 2), B->alloc(B, (size_t)8 * 1024 * 2), B->alloc(B, (size_t)8 * 1024 * 2)};
    void *yb = B->alloc(B, (size_t)8 * 4096 * 2), *gb = B->alloc(B, (size_t)8 * 12288 * 2), *ub = B->alloc(B, (size_t)8 * 12288 * 2);
    if (!qb[0] || !qb[1] || !qb[2] || !yb || !gb || !ub) die("arena exhausted");
    int rows[] = {1, 8};
    for (int r = 0; r < 2; r++) {
        const int n = rows[r];
        c.x = tview(xb, IRIS_DT_BF16, n, 4096), c.y = tview(yb, IRIS_DT_BF16, n, 4096);
        c.g = tview(gb, IRIS_DT_BF16, n, 12288), c.u = tview(ub, IRIS_DT_BF16, n, 12288);
        for (int i = 0; i < 3; i++) c.q[i] = tview(qb[i], IRIS_DT_BF16, n, outs[i]);
        for (int kw = 0; kw <= 8; kw = kw ? 2 * kw : 1) {
            iris_cuda_set_i4_warps(B, kw); /* read as the graph is captured */
            OK(iris_cuda_graph_begin(B));
            i4_chain_issue(&c);
            OK(iris_cuda_graph_end(B, &g_graph));
            double ms = time_ms(run_graph, NULL, 11);
            iris_cuda_graph_free(g_graph);
            g_graph = NULL;
            printf("{\"bench\":\"int4_step_gemvs\",\"layers\":%d,\"rows\":%d,\"warps\":%d,\"ms\":%.3f,\"GB\":%.2f,"
                   "\"GBps\":%.0f}\n",
                   I4_LAYERS, n, kw, ms, bytes / 1e9, bytes / (ms * 1e-3) / 1e9);
            fflush(stdout);
        }
    }
    iris_cuda_set_i4_warps(B, 0);
    for (int l = 0; l < I4_LAYERS; l++)
        for (int i = 0; i < 7; i++) B->free(B, c.w[l][i].data), B->free(B, (void *)c.w[l][i].qscale);
    B->free(B, xb), B->free(B, yb), B->free(B, gb), B->free(B, ub);
    for (int i = 0; i < 3; i++) B->free(B, qb[i]);
}

typedef struct {
    iris_tensor qkv, o;
    int cu[2];
    int nh, hd;
} seg_args;
static void run_segments(void *p) {
    seg_args *a = p;
    OK(B->attn_segments(B, &a->qkv, a->nh, a->hd, a->cu, 1, &a->o));
}

/* The ViT of QWEN3VL.md §5 on one 1024x1024 image: 4096 patches, 24 blocks. */
typedef struct {
    int N;
    iris_tensor x, y, qkv, ff, pr;
    iris_tensor ln_w, ln_b, qkv_w, qkv_b, proj_w, proj_b, fc1_w, fc1_b, fc2_w, fc2_b;
    int32_t *pos;
    int dim_of[32];
    float inv[32];
    int cu[2];
} vit;

static void run_vit(void *p) {
    vit *v = p;
    iris_tensor q = v->qkv, k = v->qkv;
    q.cols = 1024, q.ld = 3072;
    k.data = (char *)v->qkv.data + 1024 * 2, k.cols = 1024, k.ld = 3072;
    for (int il = 0; il < 24; il++) {
        OK(B->layer_norm(B, &v->x, &v->ln_w, &v->ln_b, 1e-6f, &v->y));
        OK(B->linear(B, &v->y, &v->qkv_w, &v->qkv_b, &v->qkv));
        OK(B->rope(B, &q, 16, 64, v->pos, v->N, v->dim_of, v->inv));
        OK(B->rope(B, &k, 16, 64, v->pos, v->N, v->dim_of, v->inv));
        OK(B->attn_segments(B, &v->qkv, 16, 64, v->cu, 1, &v->y));
        OK(B->linear(B, &v->y, &v->proj_w, &v->proj_b, &v->pr));
        OK(B->add(B, &v->x, &v->pr));
        OK(B->layer_norm(B, &v->x, &v->ln_w, &v->ln_b, 1e-6f, &v->y));
        OK(B->linear(B, &v->y, &v->fc1_w, &v->fc1_b, &v->ff));
        OK(B->gelu_tanh(B, &v->ff));
        OK(B->linear(B, &v->ff, &v->fc2_w, &v->fc2_b, &v->pr));
        OK(B->add(B, &v->x, &v->pr));
    }
}

static void bench_vision(void) {
    vit v;
    memset(&v, 0, sizeof v);
    int N = v.N = 4096;
    v.x = tview(dev_random((size_t)N * 1024, IRIS_DT_BF16, 1.0f), IRIS_DT_BF16, N, 1024);
    v.y = tview(B->alloc(B, (size_t)N * 1024 * 2), IRIS_DT_BF16, N, 1024);
    v.pr = tview(B->alloc(B, (size_t)N * 1024 * 2), IRIS_DT_BF16, N, 1024);
    v.qkv = tview(B->alloc(B, (size_t)N * 3072 * 2), IRIS_DT_BF16, N, 3072);
    v.ff = tview(B->alloc(B, (size_t)N * 4096 * 2), IRIS_DT_BF16, N, 4096);
    v.ln_w = tview(dev_random(1024, IRIS_DT_BF16, 1.0f), IRIS_DT_BF16, 1, 1024);
    v.ln_b = tview(dev_random(1024, IRIS_DT_BF16, 0.1f), IRIS_DT_BF16, 1, 1024);
    v.qkv_w = weight(3072, 1024, 0), v.qkv_b = tview(dev_random(3072, IRIS_DT_BF16, 0.1f), IRIS_DT_BF16, 1, 3072);
    v.proj_w = weight(1024, 1024, 0), v.proj_b = tview(dev_random(1024, IRIS_DT_BF16, 0.1f), IRIS_DT_BF16, 1, 1024);
    v.fc1_w = weight(4096, 1024, 0), v.fc1_b = tview(dev_random(4096, IRIS_DT_BF16, 0.1f), IRIS_DT_BF16, 1, 4096);
    v.fc2_w = weight(1024, 4096, 0), v.fc2_b = tview(dev_random(1024, IRIS_DT_BF16, 0.1f), IRIS_DT_BF16, 1, 1024);
    int32_t *pos = malloc(sizeof(int32_t) * 2 * (size_t)N);
    for (int i = 0; i < N; i++) pos[i] = i / 64, pos[N + i] = i % 64;
    v.pos = dev_ints(pos, 2 * (size_t)N);
    free(pos);
    for (int j = 0; j < 32; j++) v.dim_of[j] = j < 16 ? 0 : 1, v.inv[j] = 1.0f / powf(1e4f, (float)(2 * (j % 16)) / 32.0f);
    v.cu[0] = 0, v.cu[1] = N;
    for (int impl = 0; impl < 2; impl++) {
        iris_cuda_set_attn_impl(B, impl);
        double ms = time_ms(run_vit, &v, 7);
        seg_args sa = {v.qkv, v.y, {0, N}, 16, 64};
        double ams = time_ms_n(run_segments, &sa, 11, 5);
        double flops = 4.0 * N * (double)N * 64 * 16;
        printf("{\"bench\":\"vision_1024x1024\",\"flash\":\"%s\",\"patches\":%d,\"blocks_ms\":%.2f,"
               "\"attn_ms_per_block\":%.3f,\"attn_TFLOPs\":%.1f}\n",
               impl ? "wmma" : "mma", N, ms, ams, flops / (ams * 1e-3) / 1e12);
    }
    iris_cuda_set_attn_impl(B, 0);
}

/* ---- decode attention alone ---------------------------------------------------------------- */

typedef struct {
    step *st;
    layer *l;
} attn_args;
static void run_attn(void *p) {
    attn_args *a = p;
    shape s = a->st->m->s;
    iris_tensor q = tview(a->st->qb, IRIS_DT_BF16, a->st->n, (int64_t)s.nq * s.hd);
    iris_tensor o = tview(a->st->ob, IRIS_DT_BF16, a->st->n, (int64_t)s.nq * s.hd);
    OK(B->attn_paged(B, &q, &a->l->kv, &a->st->meta, s.nq, &o));
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *like = argc > 1 ? argv[1] : "2B";
    int fp8 = !(argc > 2 && strcmp(argv[2], "bf16") == 0);
    int ctx = argc > 3 ? atoi(argv[3]) : 512;
    shape s = strcmp(like, "4B") == 0 ? (shape){2560, 36, 32, 8, 128, 9728, 151936, fp8}
                                      : (shape){2048, 28, 16, 8, 128, 6144, 151936, fp8};
    if (iris_cuda_device_count() == 0) {
        fprintf(stderr, "bench_cuda: no CUDA device\n");
        return 1;
    }
    iris_err err = {0};
    size_t arena = (size_t)20 << 30;
    double t0 = now();
    if (iris_backend_cuda_open(0, arena, &B, &err)) {
        fprintf(stderr, "bench_cuda: %s\n", err.msg);
        return 1;
    }
    printf("{\"bench\":\"open\",\"arena_GiB\":%.1f,\"ms\":%.1f}\n", arena / 1073741824.0, (now() - t0) * 1e3);
    if (strcmp(like, "int4") == 0) { /* the 4-bit GEMV alone, then a decode step's GEMVs */
        bench_int4();
        bench_int4_chain();
        B->destroy(B);
        return 0;
    }

    bench_linear_shapes(fp8, s);
    bench_vision();

    int max_batch = 64, gen = 64;
    int n_blocks = max_batch * ((ctx + gen + 15) / 16) + 64;
    if (n_blocks < 4096 / 16 * 2 + 8) n_blocks = 4096 / 16 * 2 + 8;
    model m;
    build_model(&m, s, n_blocks);
    iris_cuda_mem mi;
    OK(iris_cuda_mem_info(B, &mi));
    printf("{\"bench\":\"model\",\"like\":\"%s\",\"dtype\":\"%s\",\"weight_GB\":%.3f,\"kv_blocks\":%d,\"arena_used_GB\":%.2f}\n",
           like, fp8 ? "fp8" : "bf16", m.weight_bytes / 1e9, n_blocks, mi.used_bytes / 1e9);

    /* Prefill: one sequence of 1024 (and 256) new tokens, logits of the last row. */
    int plens[] = {256, 1024, 4096};
    for (int i = 0; i < 3; i++) {
        step st;
        build_step(&st, &m, 1, plens[i], 0, 1);
        double ms = time_ms(run_step, &st, 5);
        printf("{\"bench\":\"prefill\",\"tokens\":%d,\"ms\":%.2f,\"tok_per_s\":%.0f}\n", plens[i], ms, plens[i] / (ms * 1e-3));
        free_step(&st);
    }
    /* Decode: batch B, one row per sequence after ctx cached tokens; a graph per step. */
    int batches[] = {1, 8, 32, 64};
    for (int i = 0; i < 4; i++) {
        step st;
        build_step(&st, &m, batches[i], 1, ctx, batches[i]);
        double eager = time_ms(run_step, &st, 9);
        OK(iris_cuda_graph_begin(B));
        run_step(&st);
        OK(iris_cuda_graph_end(B, &g_graph));
        double ms = time_ms(run_graph, NULL, 31);
        iris_cuda_graph_free(g_graph);
        OK(iris_cuda_graph_begin(B));
        run_step_fused(&st);
        OK(iris_cuda_graph_end(B, &g_graph));
        double fused = time_ms(run_graph, NULL, 31);
        attn_args aa = {&st, &m.layers[0]};
        double attn = time_ms_n(run_attn, &aa, 11, 10);
        if (batches[i] == 1 || batches[i] == 64) decode_breakdown(&st);
        printf("{\"bench\":\"decode\",\"batch\":%d,\"ctx\":%d,\"step_ms\":%.3f,\"eager_step_ms\":%.3f,\"tok_per_s\":%.0f,"
               "\"fused_step_ms\":%.3f,\"fused_tok_per_s\":%.0f,\"weight_GBps\":%.0f,\"attn_us_per_layer\":%.1f}\n",
               batches[i], ctx, ms, eager, batches[i] / (ms * 1e-3), fused, batches[i] / (fused * 1e-3),
               m.weight_bytes / (fused * 1e-3) / 1e9, attn * 1e3);
        iris_cuda_graph_free(g_graph);
        g_graph = NULL;
        free_step(&st);
    }
    /* Long-context decode attention (split over the context). */
    int ctxs[] = {4096, 16384};
    for (int i = 0; i < 2; i++) {
        if ((ctxs[i] + 16) / 16 + 1 > n_blocks) break;
        step st;
        build_step(&st, &m, 1, 1, ctxs[i], 1);
        attn_args aa = {&st, &m.layers[0]};
        double attn = time_ms_n(run_attn, &aa, 11, 10);
        double bytes = 2.0 * ctxs[i] * s.nkv * s.hd * 2;
        printf("{\"bench\":\"decode_attn\",\"ctx\":%d,\"us\":%.1f,\"kv_GBps\":%.0f}\n", ctxs[i], attn * 1e3,
               bytes / (attn * 1e-3) / 1e9);
        free_step(&st);
    }
    OK(iris_cuda_mem_info(B, &mi));
    printf("{\"bench\":\"memory\",\"arena_peak_GB\":%.2f,\"device_used_GB\":%.2f,\"device_total_GB\":%.2f}\n",
           mi.peak_bytes / 1e9, mi.device_used / 1e9, mi.device_total / 1e9);
    B->destroy(B);
    return 0;
}
