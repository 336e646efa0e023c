/* int4.c: round-to-nearest 4-bit groups and compressed-tensors' packing (int4.h). */
#include "tools/int4.h"

#include <math.h>
#include <string.h>

static uint16_t bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static float bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int clamp4(float v) { return v < -8.0f ? -8 : v > 7.0f ? 7 : (int)v; }

void iris_int4_quantize_group(const float *w, int n, int symmetric, uint16_t *scale, int8_t *zero, int8_t *q) {
    float lo = 0.0f, hi = 0.0f;
    for (int i = 0; i < n; i++) {
        lo = w[i] < lo ? w[i] : lo;
        hi = w[i] > hi ? w[i] : hi;
    }
    float s = symmetric ? (-lo > hi ? -lo : hi) / 7.5f : (hi - lo) / 15.0f;
    uint16_t sb = bf16_bits(s > 0.0f ? s : 0.0078125f);
    s = bf16_value(sb);
    int z = symmetric ? 0 : clamp4(nearbyintf(-8.0f - lo / s));
    for (int i = 0; i < n; i++) q[i] = (int8_t)clamp4(nearbyintf(w[i] / s + (float)z));
    *scale = sb;
    *zero = (int8_t)z;
}

void iris_int4_pack(const int8_t *q, int64_t n, uint32_t *words) {
    for (int64_t k = 0; k < n / 8; k++) {
        uint32_t v = 0;
        for (int j = 0; j < 8; j++) v |= (uint32_t)((q[k * 8 + j] + 8) & 15) << (4 * j);
        words[k] = v;
    }
}

void iris_int4_pack_zero(const int8_t *z, int64_t rows, int64_t n_groups, uint32_t *words) {
    memset(words, 0, sizeof *words * (size_t)(((rows + 7) / 8) * n_groups));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < n_groups; g++)
            words[(r / 8) * n_groups + g] |= (uint32_t)((z[r * n_groups + g] + 8) & 15) << (4 * (r % 8));
}
