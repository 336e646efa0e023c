/* cpu_act_avx2.c: the CPU backend's activations eight floats at a time with AVX2 — GELU (tanh
 * form, the vision encoder's MLP) and SiLU(gate) · up (the decoder's MLP).
 *
 * Both are written through the logistic function: 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)), and
 * silu(g) = g / (1 + e^(-g)); the same functions as the scalar path (libm's tanhf and expf), one
 * exp each (iris_cpu_exp8, cpu_avx2.h: within 2 ulp of libm's; test backend_cpu_elementwise checks
 * the ops against double precision).  On the demo model GELU was 15% of a caption's CPU time through
 * tanhf; this path makes it ~1%.
 *
 * Compiled for the baseline ISA with per-function target attributes; the backend calls these
 * only where iris_cpu_has_avx2() (and IRIS_CPU_AVX2 is not 0). Tails past a multiple of 8 go
 * through the same vector code on a padded copy, so every element gets the same arithmetic. */
#include <string.h>

#include "cpu_avx2.h"
#include "cpu_internal.h"

/* x / (1 + e^(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3) */
__attribute__((target("avx2,fma"))) static inline __m256 gelu8(__m256 x) {
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
    const __m256 e = iris_cpu_exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

__attribute__((target("avx2,fma"))) void iris_cpu_gelu_tanh_avx2(float *v, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(v + i, gelu8(_mm256_loadu_ps(v + i)));
    if (i < n) {
        float t[8] = {0};
        memcpy(t, v + i, sizeof(float) * (size_t)(n - i));
        _mm256_storeu_ps(t, gelu8(_mm256_loadu_ps(t)));
        memcpy(v + i, t, sizeof(float) * (size_t)(n - i));
    }
}

/* g / (1 + e^(-g)) · u */
__attribute__((target("avx2,fma"))) static inline __m256 silu_mul8(__m256 g, __m256 u) {
    const __m256 e = iris_cpu_exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

__attribute__((target("avx2,fma"))) void iris_cpu_silu_mul_avx2(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(g + i, silu_mul8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        float tg[8] = {0}, tu[8] = {0};
        memcpy(tg, g + i, sizeof(float) * (size_t)(n - i));
        memcpy(tu, u + i, sizeof(float) * (size_t)(n - i));
        _mm256_storeu_ps(tg, silu_mul8(_mm256_loadu_ps(tg), _mm256_loadu_ps(tu)));
        memcpy(g + i, tg, sizeof(float) * (size_t)(n - i));
    }
}
