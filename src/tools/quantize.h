/* quantize.h: Qwen's block-FP8 format (QWEN3VL.md §2), or 4-bit W4A16
 * (iris_quantize_opts below), from a BF16 checkpoint.
 *
 * The 7 linears of every decoder layer (q/k/v/o_proj, gate/up/down_proj)
 * become F8_E4M3 `weight` + F32 `weight_scale_inv` [ceil(out/128),
 * ceil(in/128)]; everything else is copied byte for byte; config.json gains
 * `quantization_config`; the other files of the directory are copied.
 * Numerics are transformers' Fp8Quantize (integrations/finegrained_fp8.py),
 * all in fp32: amax = max|W| over the block; scale = (1 / amax) * 448 (torch's
 * rounding of `448.0 / amax`; 1 for an all-zero block); q = e4m3fn(clamp(W *
 * scale, -448, 448)) rounded to nearest even; weight_scale_inv = 1 / scale.
 * Dequantization is q * scale_inv.
 * Partial blocks (a dimension not a multiple of 128) use the rows/columns
 * that exist.
 */
#ifndef IRIS_QUANTIZE_H
#define IRIS_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "iris.h"

#define IRIS_FP8_BLOCK 128
#define IRIS_FP8_MAX 448.0f


/* One BF16 or F32 matrix [rows, cols] (row-major, contiguous) to the same block FP8 as the files
 * this tool writes: q [rows, cols] e4m3 codes and scale_inv [ceil(rows/128), ceil(cols/128)], the
 * dequantization multiplier (Qwen's weight_scale_inv).  Bands of 128 rows run on the thread pool;
 * the bytes equal what `iris quantize` writes for the same matrix.  The loader uses it for
 * --lm-head-dtype fp8.  Fails on a non-finite element (naming `name`, row and column). */
int iris_quantize_fp8_matrix(const char *name, const void *src, iris_dtype dt, int64_t rows, int64_t cols, uint8_t *q,
                             float *scale_inv, iris_err *err);

/* 1 when `name` is one of the decoder linears' weights that become FP8. */
int iris_quantize_is_target(const char *name);

/* IN_DIR (BF16 checkpoint) -> OUT_DIR (created if missing; must not be
 * IN_DIR).  Progress on stderr. */
int iris_quantize_dir(const char *in_dir, const char *out_dir, iris_err *err);

/* What to write: Qwen's block FP8 (all zero, the default), or compressed-tensors' pack-quantized
 * W4A16 (int4.h): the same 7 linears become weight_packed I32 [out, in / 8], weight_scale BF16
 * [out, in / group_size], weight_shape I64 [2] and, asymmetric, weight_zero_point I32
 * [ceil(out / 8), in / group_size]; config.json gains compressed-tensors' quantization_config
 * (lm_head and the vision tower ignored). */
typedef struct iris_quantize_opts {
    int int4;
    int group_size;             /* int4: a multiple of 8 dividing every linear's in_features (128 usual) */
    int asymmetric;             /* int4: zero points per group */
} iris_quantize_opts;

/* compressed-tensors' quantization_config for W4A16 groups, as llm-compressor writes it (a new
 * jansson object the caller owns; NULL when out of memory). */
typedef struct json_t json_t;
json_t *iris_quantize_int4_config(int group, int symmetric);

/* iris_quantize_dir with options (NULL: FP8). */
int iris_quantize_dir_opts(const char *in_dir, const char *out_dir, const iris_quantize_opts *opts, iris_err *err);

#endif
