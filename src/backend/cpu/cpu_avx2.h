/* cpu_avx2.h: AVX2 (and AVX-512) helpers the CPU backend's kernels share (included by its vector
 * code only; each function carries its own target attribute, so including files build for the
 * baseline ISA).
 *
 * iris_cpu_exp8 / iris_cpu_exp16: e^x in eight / sixteen lanes, one definition of the steps
 * (CPU_EXP_STEPS) at both widths, so the two give the same bits lane for lane: the classic range
 * reduction (n = round(x log2 e), r = x - n ln 2 in two parts), Cephes' degree-6 polynomial and 2^n
 * put into the exponent bits; within 2 ulp of libm's expf over the clamped range [-87.3, 88.3] (x
 * below gives 2^-126 times e^r, above e^88.3: the callers' arguments stay in range or want ~0 / a
 * large finite number). */
#ifndef IRIS_CPU_AVX2_H
#define IRIS_CPU_AVX2_H

#include <immintrin.h>

/* The steps of e^x at one vector width: V the type, P its intrinsics' prefix, RND the rounding
 * intrinsic, S the integer type and CAST its cast to V. */
#define CPU_EXP_STEPS(V, P, RND, S, CAST, x)                                                                \
    do {                                                                                                    \
        x = P##_min_ps(P##_max_ps(x, P##_set1_ps(-87.3f)), P##_set1_ps(88.3f));                             \
        const V n_ = RND(P##_mul_ps(x, P##_set1_ps(1.44269504088896341f)),                                  \
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);                                    \
        V r_ = P##_fnmadd_ps(n_, P##_set1_ps(0.693359375f), x);                                             \
        r_ = P##_fnmadd_ps(n_, P##_set1_ps(-2.12194440e-4f), r_);                                           \
        V p_ = P##_set1_ps(1.9875691500e-4f);                                                               \
        p_ = P##_fmadd_ps(p_, r_, P##_set1_ps(1.3981999507e-3f));                                           \
        p_ = P##_fmadd_ps(p_, r_, P##_set1_ps(8.3334519073e-3f));                                           \
        p_ = P##_fmadd_ps(p_, r_, P##_set1_ps(4.1665795894e-2f));                                           \
        p_ = P##_fmadd_ps(p_, r_, P##_set1_ps(1.6666665459e-1f));                                           \
        p_ = P##_fmadd_ps(p_, r_, P##_set1_ps(5.0000001201e-1f));                                           \
        p_ = P##_fmadd_ps(p_, P##_mul_ps(r_, r_), P##_add_ps(r_, P##_set1_ps(1.0f)));                       \
        const S e_ = P##_slli_epi32(P##_add_epi32(P##_cvtps_epi32(n_), P##_set1_epi32(127)), 23);           \
        x = P##_mul_ps(p_, CAST(e_));                                                                       \
    } while (0)

__attribute__((target("avx2,fma"))) static inline __m256 iris_cpu_exp8(__m256 x) {
    CPU_EXP_STEPS(__m256, _mm256, _mm256_round_ps, __m256i, _mm256_castsi256_ps, x);
    return x;
}

__attribute__((target("avx512f"))) static inline __m512 iris_cpu_exp16(__m512 x) {
    CPU_EXP_STEPS(__m512, _mm512, _mm512_roundscale_ps, __m512i, _mm512_castsi512_ps, x);
    return x;
}

#endif
