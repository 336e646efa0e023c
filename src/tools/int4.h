/* int4.h: 4-bit weights as compressed-tensors writes them ("pack-quantized", W4A16): round to
 * nearest per group of columns, and the packing into int32 words.
 *
 * Numerics (compressed-tensors' calculate_qparams and quantize, with the weight's fp32 values):
 * min' = min(min w, 0), max' = max(max w, 0) over the group;
 *   symmetric:  scale = bf16(max(-min', max') / 7.5), zero = 0;
 *   asymmetric: scale = bf16((max' - min') / 15), zero = clamp(round(-8 - min' / scale), -8, 7);
 * an all-zero group takes scale 2^-7 (bf16's eps); q = clamp(round(w / scale + zero), -8, 7),
 * rounding half to even.  Dequantization is bf16((q - zero) · scale) (backend.h, I4).
 * Packing (pack_to_int32, num_bits 4): value v is stored as v + 8; element i of a row lies in
 * bits 4·(i % 8) of word i / 8; zero points are packed the same way along the output rows
 * (packed_dim 0: word [r / 8][g] holds rows r..r+7 of group g). */
#ifndef IRIS_INT4_H
#define IRIS_INT4_H

#include <stdint.h>

/* One group of n fp32 weights: its bf16 scale (bits), zero point and codes q[n]. */
void iris_int4_quantize_group(const float *w, int n, int symmetric, uint16_t *scale, int8_t *zero, int8_t *q);
/* n codes (a multiple of 8) into n / 8 words. */
void iris_int4_pack(const int8_t *q, int64_t n, uint32_t *words);
/* Zero points z [rows, n_groups] into words [ceil(rows / 8), n_groups]. */
void iris_int4_pack_zero(const int8_t *z, int64_t rows, int64_t n_groups, uint32_t *words);

#endif
