/* backend.h: the op table the model code calls, and non-owning tensor views.
 *
 * The model code (model/text.c, model/vision.c) is straight-line C over these
 * ops; the CPU backend (backend/cpu/) is the numeric reference, the CUDA
 * backend (backend/cuda/, .cu files behind a C header) the fast path, and
 * tests/test_ops_*.c check every CUDA op against the CPU one.
 *
 * Tensors are views: a pointer the backend understands (host memory for the
 * CPU, device memory for CUDA), a dtype and a row-major 2-D shape [rows,
 * cols] (contiguous rows; `ld` elements between rows, >= cols).  Weights may
 * be F32, BF16, F16, block-scaled FP8 (F8_E4M3 with an fp32 scale per
 * block[0] x block[1] block, the multiplier of Qwen's `weight_scale_inv`) or
 * group-scaled 4-bit (I4: compressed-tensors pack-quantized W4A16, below).
 * Activations are in the backend's `act` dtype: F32 on the CPU, BF16 on CUDA
 * (fp32 accumulation inside every op).
 *
 * Memory: every buffer comes from `alloc` (the CPU backend mallocs; CUDA
 * carves from the one device allocation the planner sized at start, so the
 * step loop never calls cudaMalloc).  Ops are asynchronous on CUDA (one
 * stream, in order); `sync` waits.  An op returns 0 or a negative IRIS_E*
 * code with the message in the backend's err (a CUDA error mid-step means the
 * device is lost: the engine fails the requests in flight and stops). */
#ifndef IRIS_BACKEND_H
#define IRIS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "iris.h"
#include "dtype.h"

typedef struct iris_tensor {
    void *data;
    iris_dtype dtype;
    int64_t rows, cols, ld;     /* ld: elements between row starts; 0 means cols */
    const float *scale;         /* FP8 only: [ceil(rows/block[0]), ceil(cols/block[1])], row-major */
    int block[2];
    void *dense;                /* FP8 only, optional (densify): the weight dequantized to BF16 [rows, cols],
                                   which products of many rows read instead of dequantizing each time */
    /* I4 only (data: uint32 words [rows, cols / 8], ld 0; element c of a row is nibble c % 8, from the
     * low bits, of word c / 8, stored as q + 8 for q in [-8, 7]; cols a multiple of `group`, group of 8):
     * w = bf16((q - zero) · scale), the scale and zero of the row's group c / group. */
    const void *qscale;         /* [rows, cols / group] in qscale_dtype (BF16, F16 or F32) */
    const uint32_t *qzero;      /* [ceil(rows / 8), cols / group], zero points packed 8 a word along the
                                   rows (row r: nibble r % 8 of word [r / 8][g], as q); NULL: symmetric */
    iris_dtype qscale_dtype;
    int group;                  /* columns a scale covers */
} iris_tensor;

/* Per-step sequence metadata for the paged-attention ops (device memory on CUDA). */
typedef struct iris_attn_meta {
    int n_rows;                 /* query rows in the step, all sequences flattened */
    const int32_t *row_seq;     /* [n_rows] sequence index of each row */
    const int32_t *row_ctx;     /* [n_rows] tokens visible to the row (causal: its own index + 1 + n_past) */
    const int32_t *block_tables;/* [n_seqs, max_blocks] */
    int max_blocks;             /* split plans see it rounded up to IRIS_ATTN_PLAN_BLOCKS (below) */
    const int32_t *slot;        /* [n_rows] cache slot of the row's new K/V: block * IRIS_KV_BLOCK + offset */
    int n_seqs;                 /* sequences in the step, if known (0: not known); host value, a hint
                                   that lets CUDA skip work for rows the step's shape already settles */
    /* The step's attention tiles (below), or NULL: not given (a hint, like n_seqs; the CPU backend
     * does not read them) */
    const int32_t *tiles;       /* [n_tiles] each tile's first row, ascending */
    int n_tiles;
    const int32_t *lone_rows;   /* [n_lone] the rows in no tile, ascending */
    int n_lone;
} iris_attn_meta;

/* Attention tiles: each sequence's rows of a step (consecutive rows), from its first, in pieces of
 * IRIS_ATTN_TILE rows; a piece of IRIS_ATTN_TILE_MIN rows or more is a tile — a prefill chunk's
 * rows, which a backend may attend to as one block (CUDA's flash kernels); the rows of a shorter
 * piece are lone, attended to one by one (decode rows, a chunk's short tail). */
#define IRIS_ATTN_TILE 64
#define IRIS_ATTN_TILE_MIN 8

/* A step's tiles' first rows into tiles [n_rows] (their count in *n_tiles) and its lone rows into
 * lone [n_rows]: their count. */
static inline int iris_attn_tiles(const int32_t *row_seq, int n_rows, int32_t *tiles, int *n_tiles, int32_t *lone) {
    int nt = 0, nl = 0;
    for (int s0 = 0, s1; s0 < n_rows; s0 = s1) {
        for (s1 = s0 + 1; s1 < n_rows && row_seq[s1] == row_seq[s0]; s1++) {}
        for (int r0 = s0; r0 < s1; r0 += IRIS_ATTN_TILE) {
            int r1 = r0 + IRIS_ATTN_TILE < s1 ? r0 + IRIS_ATTN_TILE : s1;
            if (r1 - r0 >= IRIS_ATTN_TILE_MIN) tiles[nt++] = r0;
            else
                for (int r = r0; r < r1; r++) lone[nl++] = r;
        }
    }
    *n_tiles = nt;
    return nl;
}

/* Decode attention plans how it splits long contexts on max_blocks rounded up to a multiple of
 * this, so a step replayed from a CUDA graph captured on a table widened to such a multiple sums in
 * the same order as the same step run op by op (bit for bit equal logits).  Graph table widths are
 * multiples of it (model/text.c). */
#define IRIS_ATTN_PLAN_BLOCKS 8

/* One layer's paged cache: [n_blocks, IRIS_KV_BLOCK, n_kv_heads * head_dim] in `dtype`. */
typedef struct iris_kv_layer {
    void *k, *v;
    iris_dtype dtype;
    int n_blocks, n_kv_heads, head_dim;
} iris_kv_layer;

/* The weights of one decoder layer for decode_layers (below), in this order. */
enum {
    IRIS_DL_INPUT_NORM, IRIS_DL_POST_NORM, IRIS_DL_Q_NORM, IRIS_DL_K_NORM,
    IRIS_DL_Q, IRIS_DL_K, IRIS_DL_V, IRIS_DL_O, IRIS_DL_GATE, IRIS_DL_UP, IRIS_DL_DOWN,
    IRIS_DL_N
};

/* decode_layers' arguments: a decode-only step (meta->n_seqs == meta->n_rows, one new row a
 * sequence) through layers 0..n_layers-1 of the text decoder. */
typedef struct iris_decode_stack {
    int n_layers;
    const iris_tensor *const (*w)[IRIS_DL_N];  /* [n_layers]: each layer's weights */
    iris_kv_layer *kv;                          /* [n_layers] */
    iris_tensor *h;                             /* [n, hidden] the residual stream: the embeddings in, the
                                                   last layer's output (its MLP added) out */
    iris_tensor *q, *k, *v, *o, *g;             /* scratch: [n, nq·hd], [n, nkv·hd] x 2, [n, nq·hd], [n, ff] */
    float eps;                                  /* rms_norm_eps */
    int n_q_heads;
    const int32_t *pos;                         /* as rope: 3 rows of pos_stride */
    int pos_stride;
    const int *dim_of;                          /* host memory, head_dim / 2 each */
    const float *inv_freq;
    const iris_attn_meta *meta;
} iris_decode_stack;

/* The allowed columns of get_topk's rows (backend memory, read by the op where the step runs):
 * row i of x is limited to bitmask bits + slot[i] * words when slot[i] >= 0 (column c allowed
 * when bit c % 32 of word c / 32 is set; bits past the row's columns are ignored), and is not
 * limited when slot[i] < 0, so constrained and free rows share one call. */
typedef struct iris_topk_mask {
    const int32_t *slot;        /* [x->rows] */
    const uint32_t *bits;       /* [masks, words] */
    int64_t words;              /* words a mask, >= ceil(x->cols / 32) */
} iris_topk_mask;

typedef struct iris_backend iris_backend;
struct iris_backend {
    const char *name;           /* for messages and logs only: model code asks the capabilities below */
    iris_dtype act;             /* activation dtype */
    int host_weights;           /* 1: the ops read weights where they lie in host memory (the mmap'd
                                   checkpoint's views), so nothing is uploaded (the CPU backend); 0: weights
                                   go to backend memory first (iris_backend_place) */
    void *ctx;
    iris_err err;

    /* memory */
    void *(*alloc)(iris_backend *b, size_t bytes);            /* NULL when the budget is exhausted */
    void (*free)(iris_backend *b, void *p);
    int (*upload)(iris_backend *b, void *dst, const void *src, size_t bytes);
    int (*download)(iris_backend *b, void *dst, const void *src, size_t bytes);
    int (*sync)(iris_backend *b);

    /* y[n, out] = x[n, in] · Wᵀ (+ bias[out]); W is F32/BF16/F16, FP8 block-scaled, dequantized as
     * bf16(q · scale) (QWEN3VL.md §2), or I4, bf16((q - zero) · scale).  y may not alias x. */
    int (*linear)(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias, iris_tensor *y);
    /* Optional: linear with an op on its result in the same pass (IRIS_EPI_GELU_TANH: y =
     * gelu_tanh(x · Wᵀ + bias); IRIS_EPI_ADD: y += x · Wᵀ + bias), one rounding where linear and the
     * op give two.  Returns IRIS_EUNSUPPORTED, having done nothing and set no error, where it cannot
     * (iris_backend_linear_epi then runs linear and the op). */
    int (*linear_epi)(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias, int epi,
                      iris_tensor *y);
    /* y[i] = table[ids[i]] for n ids (ids in backend memory). */
    int (*embed)(iris_backend *b, const iris_tensor *table, const int32_t *ids, int n, iris_tensor *y);
    /* y = w ⊙ x / sqrt(mean(x²) + eps) per row of x; y may alias x. */
    int (*rms_norm)(iris_backend *b, const iris_tensor *x, const iris_tensor *w, float eps, iris_tensor *y);
    /* y = (x - mean) / sqrt(var + eps) ⊙ w + bias per row; y may alias x. */
    int (*layer_norm)(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias, float eps,
                      iris_tensor *y);
    /* y += x (same shapes). */
    int (*add)(iris_backend *b, iris_tensor *y, const iris_tensor *x);
    /* g = silu(g) ⊙ u. */
    int (*silu_mul)(iris_backend *b, iris_tensor *g, const iris_tensor *u);
    /* x = gelu(x), tanh approximation (ViT MLP) or exact erf (mergers). */
    int (*gelu_tanh)(iris_backend *b, iris_tensor *x);
    int (*gelu_erf)(iris_backend *b, iris_tensor *x);
    /* Rotary in place on x [n, n_heads * head_dim], NeoX pairing d ↔ d + head_dim/2:
     * angle[row][j] = pos[dim_of[j]][row] * inv_freq[j] for j < head_dim/2, pos being
     * 3 rows of n int32 (t, h, w; text MRoPE) or 2 rows (row, col; vision).  dim_of and
     * inv_freq live in host memory (small, copied by the backend as needed). */
    int (*rope)(iris_backend *b, iris_tensor *x, int n_heads, int head_dim, const int32_t *pos, int pos_stride,
                const int *dim_of, const float *inv_freq);
    /* Writes the rows of k and v [n, n_kv * head_dim] into the layer's cache at meta->slot. */
    int (*kv_write)(iris_backend *b, iris_kv_layer *kv, const iris_tensor *k, const iris_tensor *v,
                    const iris_attn_meta *meta);
    /* Causal attention of q [n, nq * hd] over the paged cache (GQA: q head h reads kv head
     * h / (nq / n_kv)), scale 1/sqrt(hd), fp32 softmax; o [n, nq * hd]. */
    int (*attn_paged)(iris_backend *b, const iris_tensor *q, const iris_kv_layer *kv, const iris_attn_meta *meta,
                      int n_q_heads, iris_tensor *o);
    /* Bidirectional attention within segments (vision: one segment per image), qkv
     * [n, 3 * n_heads * hd] as q | k | v; cu_seqlens [n_seg + 1] (host memory); o [n, n_heads * hd]. */
    int (*attn_segments)(iris_backend *b, const iris_tensor *qkv, int n_heads, int head_dim, const int *cu_seqlens,
                         int n_seg, iris_tensor *o);
    /* y[idx[i]] = x[i] (scatter rows) or y[idx[i]] += x[i] (add_rows); idx in backend memory. */
    int (*set_rows)(iris_backend *b, iris_tensor *y, const int32_t *idx, const iris_tensor *x);
    int (*add_rows)(iris_backend *b, iris_tensor *y, const int32_t *idx, const iris_tensor *x);
    /* y[i] = x[idx[i]] (gather rows). */
    int (*get_rows)(iris_backend *b, const iris_tensor *x, const int32_t *idx, int n, iris_tensor *y);
    /* y[i] = Σ_k w[i][k] · table[idx[i][k]] over 4 taps (the vision position-embedding
     * interpolation), idx and w [n, 4] in backend memory; y may be added into x by the caller. */
    int (*interp4)(iris_backend *b, const iris_tensor *table, const int32_t *idx, const float *w, int n, iris_tensor *y);

    void (*destroy)(iris_backend *b);

    /* Optional fused ops (NULL where a backend has none; iris_backend_add_rms_norm and
     * iris_backend_qk_norm_rope_kv below fall back to the plain ops, with the same numbers). */
    /* x += d (d may be NULL), then y = rms_norm(x) · w: a residual add and the next norm in one pass
     * (y may be d: each element of d is read before the same element of y is written). */
    int (*add_rms_norm)(iris_backend *b, iris_tensor *x, const iris_tensor *d, const iris_tensor *w, float eps,
                        iris_tensor *y);
    /* Per-head RMSNorm of q [n, nq·hd] and k [n, nkv·hd] (weights qw, kw [hd]), rotary on both (as
     * rope), then k and v into the cache at meta->slot (as kv_write); nkv and hd from kv. */
    int (*qk_norm_rope_kv)(iris_backend *b, iris_tensor *q, iris_tensor *k, const iris_tensor *v, const iris_tensor *qw,
                           const iris_tensor *kw, float eps, int n_q_heads, const int32_t *pos, int pos_stride,
                           const int *dim_of, const float *inv_freq, iris_kv_layer *kv, const iris_attn_meta *meta);
    /* qk_norm_rope_kv, then attn_paged of q into o: one kernel for a step of decode rows only (one
     * row a sequence, meta->n_seqs == meta->n_rows), where it may leave q and k as they were (the
     * cache gets the rotated k and v all the same); other steps take the two ops.  Same numbers. */
    int (*qk_norm_rope_attn)(iris_backend *b, iris_tensor *q, iris_tensor *k, const iris_tensor *v,
                             const iris_tensor *qw, const iris_tensor *kw, float eps, int n_q_heads, const int32_t *pos,
                             int pos_stride, const int *dim_of, const float *inv_freq, iris_kv_layer *kv,
                             const iris_attn_meta *meta, iris_tensor *o);
    /* ys[i] = x · ws[i]ᵀ for i < m (m <= 3; no bias): the q, k, v projections in one pass over x.
     * joint: NULL, or BF16 room for [x rows, Σ ws[i] rows] (contiguous): the backend may compute
     * the products as one into it and leave each ys[i] a column view of it (data and ld set). */
    int (*linear_n)(iris_backend *b, const iris_tensor *x, int m, const iris_tensor *const *ws, iris_tensor *const *ys,
                    const iris_tensor *joint);
    /* g = silu(x · wgᵀ) ⊙ (x · wuᵀ), rounded as linear, linear, silu_mul; u is scratch of g's shape.
     * joint: NULL, or BF16 room for [x rows, 2 · wg rows]: the backend may leave g a column view of it. */
    int (*linear_swiglu)(iris_backend *b, const iris_tensor *x, const iris_tensor *wg, const iris_tensor *wu,
                         iris_tensor *g, iris_tensor *u, const iris_tensor *joint);

    /* Optional: every decoder layer of a decode-only step in one go, what model/text.c does op by op
     * (add_rms_norm, linear_n q/k/v, qk_norm_rope_attn, o_proj, add_rms_norm, linear_swiglu,
     * down_proj, the residual add), with those ops' roundings (the sums of the products may run in
     * another order, as between any two GEMV schedules).  Returns 0 when done, 1 when it declines
     * the step (shapes, dtypes or row counts it does not take: the caller runs the ops; nothing was
     * written), or a negative error. */
    int (*decode_layers)(iris_backend *b, const iris_decode_stack *d);

    /* Optional: n activations at src (device) as fp32 into dst (host); iris_backend_get_f32 uses it. */
    int (*get_f32)(iris_backend *b, float *dst, const void *src, size_t n);
    /* Optional: the k largest values of each row of x (activations, backend memory) with their
     * columns, into host memory ids and vals [x->rows, k]: value-descending, the lowest column first
     * among equal values, NaN counted as -inf; 1 <= k <= 64 and k <= x->cols.  Sampling on the GPU:
     * the host sampler then reads k candidates a row (model/sampler.h iris_sampler_sample_top), not
     * the vocabulary.  mask (NULL: none) limits rows to allowed columns (constrained decoding, see
     * iris_topk_mask): a masked-out column is never returned, whatever its value; a row that allows
     * fewer than k columns ends its list with id -1, value -inf.  Unmasked rows: as without mask. */
    int (*get_topk)(iris_backend *b, const iris_tensor *x, int k, const iris_topk_mask *mask, int32_t *ids,
                    float *vals);
    /* Optional: n fp32 host values at src into dst (device) as activations; iris_backend_put_f32 uses it. */
    int (*put_f32)(iris_backend *b, void *dst, const float *src, size_t n);
    /* Optional: keep a BF16 copy of FP8 weight w (bf16(q · scale), as every FP8 product rounds it)
     * in backend memory, w->dense; products of more rows than a decode step then read it (no
     * per-call dequantization).  Decode steps keep reading the FP8 codes. */
    int (*densify)(iris_backend *b, iris_tensor *w);
    /* Optional: host memory that download and upload copy at full bus speed (page-locked on CUDA),
     * for rows that cross to the host and back each request (the image embeddings); NULL when there
     * is none.  Free with host_free, which takes only such pointers (or NULL) and stays valid after destroy
     * (the memory is process-wide, kept for reuse).  Uploads from it run asynchronously: leave it
     * unchanged until the step that read it is done. */
    void *(*host_alloc)(iris_backend *b, size_t bytes);
    void (*host_free)(void *p);
    /* Optional: download into host_alloc memory, ordered on the backend's stream, returning before
     * the copy is done: the rows are there after the next sync (the vision encoder's DeepStack taps
     * go down while it runs on).  NULL: use download. */
    int (*download_async)(iris_backend *b, void *dst, const void *src, size_t bytes);

    /* Optional: record the ops issued between graph_begin and graph_end (not run), replay them later
     * with the same pointers and scalars (the device data they read may change).  NULL on the CPU. */
    int (*graph_begin)(iris_backend *b);
    int (*graph_end)(iris_backend *b, void **graph);
    int (*graph_replay)(iris_backend *b, void *graph);
    void (*graph_free)(void *graph);
};

/* The CPU backend (threads from base/pool.h). */
int iris_backend_cpu_open(iris_backend **out, iris_err *err);

#ifdef IRIS_CUDA
/* The CUDA backend on `device`, with a device arena of `arena_bytes` taken once. */
int iris_backend_cuda_open(int device, size_t arena_bytes, iris_backend **out, iris_err *err);
#endif

/* fp32 host values to and from the backend's activation dtype (BF16: round to nearest even). */
int iris_backend_put_f32(iris_backend *b, void *dst, const float *src, size_t n);
/* n host values fp32 -> bf16 bits, rounded to nearest even (NaN stays NaN: what put_f32 uploads),
 * and back (exact), on the thread pool's workers when pool (not from one of them): the 25 MB of a
 * 1024x1024 image's pixel values took ~6 ms on one core.  Arrays of IRIS_CONV_POOL_MIN values and
 * more are worth the pool's wake-up; a logits row is not. */
#define IRIS_CONV_POOL_MIN ((size_t)1 << 20)
void iris_backend_f32_to_bf16(uint16_t *dst, const float *src, size_t n, int pool);
void iris_backend_bf16_to_f32(float *dst, const uint16_t *src, size_t n, int pool);
int iris_backend_get_f32(iris_backend *b, float *dst, const void *src, size_t n);
/* Copies weight w (and its FP8 scales; an I4 weight's scales and zero points) into b's memory and
 * points w there. */
int iris_backend_place(iris_backend *b, iris_tensor *w, iris_err *err);
/* The same for the n weights of a group (q/k/v, gate/up): their data, then their scales, each in
 * order, so a fresh arena puts them end to end (linear_n's and linear_swiglu's one product). */
int iris_backend_place_group(iris_backend *b, iris_tensor *const *ws, int n, iris_err *err);

/* The fused ops above, or their plain sequence where b has none (backend/fused.c). */
int iris_backend_add_rms_norm(iris_backend *b, iris_tensor *x, const iris_tensor *d, const iris_tensor *w, float eps,
                              iris_tensor *y);
int iris_backend_qk_norm_rope_kv(iris_backend *b, iris_tensor *q, iris_tensor *k, const iris_tensor *v,
                                 const iris_tensor *qw, const iris_tensor *kw, float eps, int n_q_heads,
                                 const int32_t *pos, int pos_stride, const int *dim_of, const float *inv_freq,
                                 iris_kv_layer *kv, const iris_attn_meta *meta);
int iris_backend_qk_norm_rope_attn(iris_backend *b, iris_tensor *q, iris_tensor *k, const iris_tensor *v,
                                   const iris_tensor *qw, const iris_tensor *kw, float eps, int n_q_heads,
                                   const int32_t *pos, int pos_stride, const int *dim_of, const float *inv_freq,
                                   iris_kv_layer *kv, const iris_attn_meta *meta, iris_tensor *o);
int iris_backend_linear_n(iris_backend *b, const iris_tensor *x, int m, const iris_tensor *const *ws,
                          iris_tensor *const *ys, const iris_tensor *joint);
int iris_backend_linear_swiglu(iris_backend *b, const iris_tensor *x, const iris_tensor *wg, const iris_tensor *wu,
                               iris_tensor *g, iris_tensor *u, const iris_tensor *joint);
/* linear_epi's ops (epi IRIS_EPI_*); without it, the product goes into tmp (ADD; [x rows, W rows] in
 * the activation dtype) or y (GELU_TANH) first. */
enum { IRIS_EPI_GELU_TANH = 1, IRIS_EPI_ADD = 2 };
int iris_backend_linear_epi(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias,
                            int epi, iris_tensor *y, iris_tensor *tmp);

static inline int64_t iris_tensor_ld(const iris_tensor *t) { return t->ld ? t->ld : t->cols; }

#endif
