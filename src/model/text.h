/* text.h: the Qwen3-VL text decoder (QWEN3VL.md §6) on the CPU, in fp32,
 * over a flat batch of tokens from one or more sequences with a paged KV
 * cache.
 *
 * A step is a list of sequences, each bringing n_new tokens that follow the
 * n_past tokens already in its cache blocks (prefill: n_past = 0 and n_new =
 * the prompt or a chunk of it; decode: n_new = 1).  Positions are the 3-D
 * MRoPE positions (t, h, w) of QWEN3VL.md §6.5 (positions.h computes them).
 * Image rows: where a token is the image token, its embedding row is taken
 * from `image_embeds` (consumed in order), and after decoder layer i <
 * n_deepstack the DeepStack feature row deepstack[i] is added there (§6.2).
 *
 * KV cache: IRIS_KV_BLOCK tokens a block; the cache owns n_blocks blocks for
 * every layer; a sequence names its blocks in `block_table` (token j of the
 * sequence lives in block block_table[j / IRIS_KV_BLOCK], slot j %
 * IRIS_KV_BLOCK).  Who hands out blocks is the caller's business (the
 * engine's pool); this file only reads and writes the blocks it is given.
 *
 * Owns: iris_text holds non-owning views of the weights (the checkpoint's
 * mmap must outlive it).  Numerics: fp32 activations; BF16 weights widened
 * exactly; FP8 weights dequantized as transformers does, bf16(q * scale_inv)
 * (§2), then widened. */
#ifndef IRIS_TEXT_H
#define IRIS_TEXT_H

#include <stdint.h>

#include "iris.h"
#include "formats/config.h"
#include "formats/safetensors.h"

#define IRIS_KV_BLOCK 16

#include "backend/backend.h"

typedef struct iris_text_layer {
    iris_tensor input_layernorm, post_attention_layernorm, q_norm, k_norm;  /* [1, n] */
    iris_tensor q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; /* [out, in] */
} iris_text_layer;

typedef struct iris_text {
    iris_text_config cfg;
    int image_token_id, video_token_id;
    iris_tensor embed_tokens, norm, lm_head;  /* lm_head = embed_tokens when tied */
    iris_text_layer *layers;                  /* cfg.num_hidden_layers, malloc'd */
    const iris_tensor *(*dl_weights)[IRIS_DL_N]; /* [layers] each layer's weights in backend.h decode_layers'
                                                 order (into `layers`), malloc'd */
    int n_fp8;                                /* how many linears are FP8 */
    int n_int4;                               /* how many linears are 4-bit (I4) */
    int n_ignored;                            /* of a 4-bit checkpoint's, how many its quantization_config.ignore
                                                 keeps unquantized (loaded in their stored dtype) */
    int embed_host;                           /* the table stays a host view (iris_text_embed_host): each step's
                                                 rows are gathered on the host (iris_text_embed_rows) */
    int lm_head_fp8;                          /* lm_head quantized to block FP8 at load (iris_text_lm_head_fp8) */
    uint8_t *lm_head_q;                       /* its codes and multipliers in host memory, malloc'd until placed */
    float *lm_head_s;
    float inv_freq[512];                      /* rotary frequencies, head_dim/2 */
    int dim_of[512];                          /* frequency slot -> position component (t, h, w) */
    iris_backend *on;                         /* backend the weights were uploaded to; NULL: host views */
} iris_text;

/* Binds and checks the decoder tensors ("model.language_model.", "lm_head.")
 * against the config: a missing tensor or a wrong shape is an error naming the
 * tensor and both shapes.  The views point into the checkpoint's mmap (which
 * must outlive them), usable by the CPU backend as they are.  Free with
 * iris_text_free. */
int iris_text_load(const iris_st *st, const iris_config *cfg, iris_text *t, iris_err *err);
/* Copies every weight into backend `b`'s memory (FP8 stays FP8 with its
 * scales, 4-bit with its group scales and zero points); a no-op for the CPU
 * backend. */
int iris_text_upload(iris_text *t, iris_backend *b, iris_err *err);
/* After iris_text_upload on b: BF16 copies of the FP8 decoder linears (backend densify) for
 * prefill and large batches; memory as the plan's "dense weights" part.  No-op without densify. */
int iris_text_densify(iris_text *t, iris_backend *b, iris_err *err);
void iris_text_free(iris_text *t);

/* Placement for small cards (planner.h iris_embed_mode, iris_lm_head_mode), both before
 * iris_text_upload.  embed_host: the token-embedding table stays in host memory (the mmap); the
 * runner gathers each step's rows with iris_text_embed_rows and uploads them (H * 2 bytes a token
 * on a BF16 backend) into the batch's h, so the numbers are the device lookup's bit for bit.  A tied
 * lm_head then gets its own device copy.  lm_head_fp8: a BF16 (or F32) lm_head (tied: the
 * table) becomes block FP8 [128x128] as `iris quantize` writes it (iris_quantize_fp8_matrix), in
 * host memory the text owns until it is placed; the logits then take the backend's FP8 linear. */
int iris_text_embed_host(iris_text *t, iris_err *err);
int iris_text_lm_head_fp8(iris_text *t, iris_err *err);
/* Rows of tokens[0..n) of a host table into dst (host), in dtype `act` (the backend's): BF16 rows
 * copied as they are, else widened to F32 exactly. */
int iris_text_embed_rows(const iris_text *t, const int32_t *tokens, int n, iris_dtype act, void *dst, iris_err *err);

typedef struct iris_kv_cache {
    int n_layers, n_blocks;
    iris_kv_layer *layers;    /* [n_layers], each [n_blocks, IRIS_KV_BLOCK, n_kv_heads * head_dim] */
    iris_backend *b;
} iris_kv_cache;

/* KV blocks in backend b's memory, in its activation dtype. */
int iris_kv_cache_init(iris_kv_cache *kv, const iris_text_config *cfg, int n_blocks, iris_backend *b, iris_err *err);
/* The same in `dt`: b->act, or IRIS_DT_F8_E4M3 (--kv-cache-dtype fp8: e4m3 codes of the values
 * themselves, scale 1, saturating at +-448 as vLLM's uncalibrated fp8 cache). */
int iris_kv_cache_init_dtype(iris_kv_cache *kv, const iris_text_config *cfg, int n_blocks, iris_dtype dt,
                             iris_backend *b, iris_err *err);
void iris_kv_cache_free(iris_kv_cache *kv);

typedef struct iris_text_seq {
    int n_past;                   /* tokens of this sequence already in its blocks */
    int n_new;                    /* tokens this step */
    const int32_t *tokens;        /* [n_new] */
    const int32_t *pos;           /* [3][pos_stride]: t, h, w positions of the new tokens */
    int pos_stride;               /* distance between the t, h and w rows (>= n_new) */
    const int32_t *block_table;   /* covers n_past + n_new tokens */
    const float *image_embeds;    /* rows for this step's image tokens, in order; NULL if none */
    const float *deepstack[IRIS_MAX_DEEPSTACK]; /* same rows, per DeepStack tap */
    int n_deepstack;              /* 0 on decode steps (DeepStack is prefill-only) */
    /* Or the same rows as bf16 bits (iris_vision_encode_bf16; image_embeds NULL): a BF16 backend
     * uploads them as they are. */
    const uint16_t *image_embeds16;
    const uint16_t *deepstack16[IRIS_MAX_DEEPSTACK];
    int logits_from;              /* logits for new rows [logits_from, n_new); n_new: none */
} iris_text_seq;

/* Called with the residual stream entering layer il (il = num_hidden_layers:
 * the last layer's output, before the final norm), rows of all sequences in
 * order, as fp32 host memory.  For `iris logits --hidden-states` and
 * first-diverging-layer reports. */
typedef void (*iris_text_trace_fn)(void *ud, int il, const float *h, int n_rows, int hidden);

/* A step prepared in backend memory (engine/runner.c lays it out): R rows of all sequences in
 * order.  Every pointer is in the backend's memory except trace_h. */
typedef struct iris_text_batch {
    int n_rows, n_img, n_deepstack, n_logits;
    const int32_t *tokens;      /* [R] */
    const int32_t *pos;         /* [3][R]: t, h, w */
    const int32_t *img_rows;    /* [n_img]: the rows that take image embeddings, in order */
    const int32_t *logit_rows;  /* [n_logits] */
    const iris_attn_meta *meta; /* rows -> sequences, contexts, cache slots, block tables */
    const void *img;            /* [(1 + n_deepstack) * n_img, H]: embeddings, then each DeepStack tap */
    /* scratch, in b->act: h, x [R, H]; q, o [R, nq * hd]; k, v [R, nkv * hd]; g, u [R, FF].
     * q, k, v lie in that order in one allocation, as do g, u, each sized for the step's largest
     * R: q starts room for [R, (nq + 2 nkv) hd] and g for [R, 2 FF] (linear_n's, linear_swiglu's joint). */
    void *h, *x, *q, *k, *v, *o, *g, *u;
    void *logits;               /* [n_logits, V], in b->act */
    float *trace_h;             /* host [R, H] for trace (NULL without) */
    int h_embedded;             /* h already holds the rows' token embeddings (embed_host: the runner put them) */
} iris_text_batch;

/* The decoder over a prepared batch on backend b (the one the weights and the cache live on):
 * appends every row's K/V to its cache slot and writes the logits rows.  No allocation, no
 * host synchronisation unless tracing: a decode-only batch without trace can be captured as a
 * CUDA graph by the caller.  trace (NULL: none) sees the residual stream entering each layer. */
int iris_text_forward(const iris_text *t, iris_backend *b, iris_kv_cache *kv, const iris_text_batch *x,
                      iris_text_trace_fn trace, void *trace_ud, iris_err *err);

#endif
