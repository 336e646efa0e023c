/* cpu_dot_avx2.c: the decode kernel of the CPU linear — one weight row,
 * dequantized 8 columns at a time in AVX2 registers and dotted with up to
 * DOT_MAX_ROWS activation rows, so the row is never written out as fp32.
 *
 * Memory-bound by design: a decode step reads every weight byte once; this
 * kernel's job is to keep up with the memory bus on few cores (the scalar
 * path widened each row into a buffer and read it back).  Numbers are the
 * scalar path's: BF16 widened exactly; FP8 decoded by bit arithmetic that is
 * exact for all 256 codes (e4m3fn magnitude bits shifted into an fp32
 * exponent/mantissa, times 2^120 re-biasing, exact for subnormals too;
 * S.1111.111 forced to NaN), multiplied by the block's scale and rounded to
 * bf16 nearest-even, as transformers dequantizes (QWEN3VL.md §2).
 *
 * Compiled for the baseline ISA with per-function target attributes; the
 * caller checks iris_cpu_has_avx2() once.  Not for the prefill path (that is
 * sgemm on widened tiles, cpu_linear.c), which takes only the BF16 widening
 * here (iris_cpu_widen_bf16_avx2: exact, the scalar loop's bits). */
#include <immintrin.h>

#include "cpu_internal.h"

int iris_cpu_has_avx512(void) {
    static int has = -1;
    if (has < 0) {
        __builtin_cpu_init();
        has = __builtin_cpu_supports("avx512f");
    }
    return has;
}

int iris_cpu_has_avx2(void) {
    static int has = -1;
    if (has < 0) {
        __builtin_cpu_init();
        has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return has;
}

__attribute__((target("avx2,fma"))) static inline __m256 bf16x8(const uint16_t *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

/* 8 e4m3fn codes → bf16(value · scale) as fp32. */
__attribute__((target("avx2,fma"))) static inline __m256 fp8x8(const uint8_t *p, __m256 scale) {
    __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    __m256i mag = _mm256_and_si256(b, _mm256_set1_epi32(0x7f));
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
    __m256 v = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(mag, 20)), _mm256_set1_ps(0x1p120f));
    __m256 nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f)));
    v = _mm256_or_ps(v, nan); /* all-ones bits: a NaN */
    v = _mm256_or_ps(v, _mm256_castsi256_ps(sign));
    __m256i u = _mm256_castps_si256(_mm256_mul_ps(v, scale));
    /* round to bf16, nearest even; a NaN stays a NaN (its top bits survive) */
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
    __m256i isnan = _mm256_castps_si256(_mm256_cmp_ps(_mm256_castsi256_ps(u), _mm256_castsi256_ps(u), _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, u, isnan);
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

__attribute__((target("avx2,fma"))) static inline float hsum(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* y[i·ldy] = x[i] · w_r for i < n: the row in 8-column groups (FP8: span by span of
 * one scale block each, block[1] being a multiple of 8, so no division per group),
 * alternating two accumulators per x row to hide the FMA latency, a scalar tail
 * after them.  The summation order depends on the columns only, never on n, so a
 * row's result is the same whatever batch it is decoded in. */
#define DOT_PAIR(CONV)                                                                         \
    for (; k + 16 <= k1; k += 16) {                                                            \
        __m256 w0 = CONV(k), w1 = CONV(k + 8);                                                 \
        for (int i = 0; i < n; i++) {                                                          \
            a0[i] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i * ldx + k), a0[i]);              \
            a1[i] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i * ldx + k + 8), a1[i]);          \
        }                                                                                      \
    }                                                                                          \
    if (k < k1) {                                                                              \
        __m256 w0 = CONV(k);                                                                   \
        for (int i = 0; i < n; i++) a0[i] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i * ldx + k), a0[i]); \
        k += 8;                                                                                \
    }

__attribute__((target("avx2,fma"))) int iris_cpu_dot_row_avx2(const iris_tensor *w, int64_t r, const float *x, int n,
                                                               int64_t ldx, float *y, int64_t ldy) {
    int64_t in = w->cols, in8 = in & ~(int64_t)7, k = 0;
    __m256 a0[8], a1[8];
    float tail[8];
    if (n > 8) return -1;
    for (int i = 0; i < n; i++) a0[i] = a1[i] = _mm256_setzero_ps();
    if (w->dtype == IRIS_DT_BF16) {
        const uint16_t *p = (const uint16_t *)w->data + r * iris_tensor_ld(w);
        int64_t k1 = in8;
#define BF16_AT(c) bf16x8(p + (c))
        DOT_PAIR(BF16_AT)
#undef BF16_AT
        for (int64_t c = in8; c < in; c++) tail[c - in8] = iris_bf16_to_f32(p[c]);
    } else if (w->dtype == IRIS_DT_F8_E4M3 && w->block[1] % 8 == 0) {
        const uint8_t *p = (const uint8_t *)w->data + r * iris_tensor_ld(w);
        int64_t bi = w->block[1], n_cb = (in + bi - 1) / bi;
        const float *sc = w->scale + (r / w->block[0]) * n_cb;
        for (int64_t cb = 0; cb < n_cb && k < in8; cb++) {
            int64_t k1 = (cb + 1) * bi < in8 ? (cb + 1) * bi : in8;
            __m256 s = _mm256_set1_ps(sc[cb]);
#define FP8_AT(c) fp8x8(p + (c), s)
            DOT_PAIR(FP8_AT)
#undef FP8_AT
        }
        for (int64_t c = in8; c < in; c++) tail[c - in8] = iris_f32_round_bf16(iris_fp8_e4m3_table[p[c]] * sc[c / bi]);
    } else {
        return -1;
    }
    for (int i = 0; i < n; i++) {
        float s = hsum(_mm256_add_ps(a0[i], a1[i]));
        for (int64_t c = in8; c < in; c++) s += x[i * ldx + c] * tail[c - in8];
        y[i * ldy] = s;
    }
    return 0;
}

__attribute__((target("avx2"))) void iris_cpu_widen_bf16_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(h, 16));
    }
    for (; i < n; i++) dst[i] = iris_bf16_to_f32(src[i]);
}
