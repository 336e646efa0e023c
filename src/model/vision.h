/* vision.h: the Qwen3-VL vision encoder (QWEN3VL.md §5), over backend ops.
 *
 * pixel_values [N, C*T*P*P] (merge-window order, several images concatenated)
 * → Conv3d patch embedding as one matmul over the C*T*P*P-long rows
 * → + learned position embedding, bilinear with align_corners from the
 *   configured sqrt(num_position_embeddings)^2 grid (transformers 5.17 taps)
 * → `depth` pre-norm blocks (LayerNorm eps 1e-6, 2-D rotary in merge-window
 *   order, attention restricted to each image, tanh-GELU MLP)
 * → main merger (LayerNorm per patch, then the 2x2 shuffle, fc1, erf-GELU, fc2)
 *   and, after each block in deepstack_visual_indexes, a DeepStack merger
 *   (shuffle, then LayerNorm over the 4*hidden row, fc1, erf-GELU, fc2).
 * Output: image embeddings [N/m², out_hidden_size] in merged-window order
 * (row-major over each image's merged grid, images in order) and one tensor
 * of the same shape per DeepStack tap.
 *
 * Owns: iris_vision holds non-owning views of the weights (the mmap of the
 * checkpoint must outlive it) and nothing else.  Every size comes from the
 * vision config; every tensor's presence, dtype and shape is checked at load.
 * Weights may be BF16, F16 or F32.  The arithmetic is the backend's
 * (backend.h): fp32 on the CPU, the numeric reference; bf16 with fp32
 * accumulation on CUDA, whose rows can go to the decoder as bf16
 * (iris_vision_encode_bf16). */
#ifndef IRIS_VISION_H
#define IRIS_VISION_H

#include <stdint.h>

#include "iris.h"
#include "formats/config.h"
#include "formats/safetensors.h"
#include "backend/backend.h"

typedef struct iris_vision_linear {
    iris_tensor weight; /* [out, in] */
    iris_tensor bias;   /* [1, out] */
} iris_vision_linear;

typedef struct iris_vision_norm {
    iris_tensor weight, bias;
} iris_vision_norm;

typedef struct iris_vision_block {
    iris_vision_norm norm1, norm2;
    iris_vision_linear qkv, proj, fc1, fc2;
} iris_vision_block;

typedef struct iris_vision_merger {
    iris_vision_norm norm;
    iris_vision_linear fc1, fc2;
} iris_vision_merger;

typedef struct iris_vision {
    iris_vision_config cfg;
    iris_tensor patch_w;              /* the Conv3d kernel viewed as [hidden, patch_dim] */
    iris_tensor patch_b, pos_embed;
    iris_vision_block *blocks;        /* cfg.depth, malloc'd */
    iris_vision_merger merger;
    iris_vision_merger deepstack[IRIS_MAX_DEEPSTACK];
    int patch_dim;                    /* in_channels * temporal_patch_size * patch_size^2 */
    int grid_side;                    /* sqrt(num_position_embeddings) */
    iris_backend *on;                 /* where the weights live (NULL: host views into the mmap) */
} iris_vision;

typedef struct iris_vision_out {
    int n_tokens;        /* N / merge^2 */
    int out_hidden;
    float *embeds;       /* [n_tokens, out_hidden] */
    int n_deepstack;
    float *deepstack;    /* [n_deepstack, n_tokens, out_hidden] */
    /* iris_vision_encode_bf16 instead: the same rows as the backend's bf16 bits (embeds and
     * deepstack NULL), for a GPU decoder that takes them as they are. */
    uint16_t *embeds16, *deepstack16;
    void (*host_free)(void *p);  /* non-NULL: embeds16/deepstack16 came from the backend's host_alloc */
} iris_vision_out;

/* Binds and checks the vision tensors of checkpoint `st` (prefix
 * "model.visual.") for config `cfg`.  Free with iris_vision_free. */
int iris_vision_load(const iris_st *st, const iris_vision_config *cfg, iris_vision *v, iris_err *err);
void iris_vision_free(iris_vision *v);

/* Encodes n_images images: pixel_values holds sum(t*h*w) rows of patch_dim
 * floats; grid_thw 3 ints per image.  out's arrays are malloc'd (free with
 * iris_vision_out_free).  When `trace` is non-NULL it receives the residual
 * stream before block 0 and after every block: (depth + 1) * N * hidden
 * floats, for layer-by-layer comparisons. */
int iris_vision_encode(const iris_vision *v, const float *pixel_values, int64_t n_rows, const int *grid_thw,
                       int n_images, iris_vision_out *out, float *trace, iris_err *err);
void iris_vision_out_free(iris_vision_out *o);

/* The same on backend b (the weights uploaded there first with
 * iris_vision_upload unless b is the CPU backend); out stays fp32 host memory. */
int iris_vision_encode_on(const iris_vision *v, iris_backend *b, const float *pixel_values, int64_t n_rows,
                          const int *grid_thw, int n_images, iris_vision_out *out, float *trace, iris_err *err);
/* iris_vision_encode_on on a backend with BF16 activations, out's rows left as BF16 (embeds16,
 * deepstack16): no fp32 conversion on the way to a BF16 decoder (the engine on CUDA).  The
 * device buffers come from `scratch` (scratch_bytes of b's memory, at least
 * iris_vision_scratch_bytes for these patches: the engine lends its runner's activations), or
 * from b->alloc when scratch is NULL. */
int iris_vision_encode_bf16(const iris_vision *v, iris_backend *b, void *scratch, size_t scratch_bytes,
                            const float *pixel_values, int64_t n_rows, const int *grid_thw, int n_images,
                            iris_vision_out *out, iris_err *err);
/* Several images, of several prompts, in one encoder pass (the engine's step): image k's pixel
 * rows at pixels[k] (grid grid_thw[3k..3k+2]), its output rows into outs[k] alone (each freed
 * with iris_vision_out_free).  The attention stays within each image (block-diagonal over the
 * images' frames, no padding), so each image's rows are what encoding it alone gives, up to the
 * backend's GEMMs over more rows.  b NULL: the CPU (fp32 rows, as iris_vision_encode); bf16 1: as
 * iris_vision_encode_bf16 on b, in scratch when given (iris_vision_scratch_bytes of all the
 * patches).  pixels16 (NULL, or NULL entries: none): image k's rows already rounded to bf16
 * (iris_backend_f32_to_bf16) in b's host_alloc memory, uploaded as they are on a BF16 backend
 * (asynchronously: nothing to convert on the caller's thread) instead of converted from pixels[k].
 * On failure every outs[k] is empty. */
int iris_vision_encode_each(const iris_vision *v, iris_backend *b, void *scratch, size_t scratch_bytes, int bf16,
                            const float *const *pixels, const uint16_t *const *pixels16, const int *grid_thw,
                            int n_images, iris_vision_out *outs, iris_err *err);
/* Device bytes an encode of up to max_patches patches needs in activations of dtype act. */
size_t iris_vision_scratch_bytes(const iris_vision *v, iris_dtype act, int64_t max_patches);
/* Copies the weights into backend b's memory; a no-op for the CPU backend. */
int iris_vision_upload(iris_vision *v, iris_backend *b, iris_err *err);

#endif
