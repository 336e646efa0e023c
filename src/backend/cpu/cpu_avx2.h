/* cpu_avx2.h: AVX2 helpers the CPU backend's kernels share (included by its *_avx2 code only; each
 * function carries its own target attribute, so including files build for the baseline ISA).
 *
 * iris_cpu_exp8: e^x in eight lanes — the classic range reduction (n = round(x log2 e),
 * r = x - n ln 2 in two parts), Cephes' degree-6 polynomial and 2^n put into the exponent bits;
 * within 2 ulp of libm's expf over the clamped range [-87.3, 88.3] (x below gives 2^-126 times
 * e^r, above e^88.3: the callers' arguments stay in range or want ~0 / a large finite number). */
#ifndef IRIS_CPU_AVX2_H
#define IRIS_CPU_AVX2_H

#include <immintrin.h>

__attribute__((target("avx2,fma"))) static inline __m256 iris_cpu_exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

#endif
