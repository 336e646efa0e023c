/* cpu_norm_avx2.c: the CPU backend's norms (cpu_backend.c: ln_rows, rms_rows) four rows at a time
 * with AVX2, bit for bit the scalar loops.
 *
 * The scalar loops sum a row in double, one add after another: latency-bound (a 192-float vision
 * row is 192 dependent adds, twice for LayerNorm).  Here four rows run at once, one row a lane of
 * a double vector (columns transposed four at a time), each lane doing that row's adds in the
 * same order, so each sum is the scalar loop's.  The outputs are the scalar expressions lane for
 * lane, eight columns a vector: the same operations (separate multiplies and adds, no FMA: C11
 * contracts nothing) in the same order.
 *
 * Compiled for the baseline ISA with per-function target attributes; the backend calls these only
 * where iris_cpu_has_avx2() (and IRIS_CPU_AVX2 is not 0). */
#include <immintrin.h>
#include <math.h>

#include "cpu_internal.h"

/* Column i of four rows (i < d) as a double vector, row k in lane k. */
#define COL4(x, i) _mm256_set_pd((x)[3][i], (x)[2][i], (x)[1][i], (x)[0][i])

/* mean[k] = Σ x[k][i] / d and, when var is not NULL, var[k] = Σ (x[k][i] - mean[k])², or
 * (squares, for RMSNorm) mean[k] = Σ x[k][i]²: every sum in double in column order. */
__attribute__((target("avx2"))) static void sums4(const float *const x[4], int64_t d, int squares, double *mean,
                                                  double *var) {
    __m256d m = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 4 <= d; i += 4) {
        __m128 c0 = _mm_loadu_ps(x[0] + i), c1 = _mm_loadu_ps(x[1] + i), c2 = _mm_loadu_ps(x[2] + i),
               c3 = _mm_loadu_ps(x[3] + i);
        _MM_TRANSPOSE4_PS(c0, c1, c2, c3);
        __m256d t[4] = {_mm256_cvtps_pd(c0), _mm256_cvtps_pd(c1), _mm256_cvtps_pd(c2), _mm256_cvtps_pd(c3)};
        for (int k = 0; k < 4; k++) m = _mm256_add_pd(m, squares ? _mm256_mul_pd(t[k], t[k]) : t[k]);
    }
    for (; i < d; i++) {
        __m256d t = COL4(x, i);
        m = _mm256_add_pd(m, squares ? _mm256_mul_pd(t, t) : t);
    }
    if (squares) {
        _mm256_storeu_pd(mean, m);
        return;
    }
    m = _mm256_div_pd(m, _mm256_set1_pd((double)d));
    _mm256_storeu_pd(mean, m);
    __m256d v = _mm256_setzero_pd();
    for (i = 0; i + 4 <= d; i += 4) {
        __m128 c0 = _mm_loadu_ps(x[0] + i), c1 = _mm_loadu_ps(x[1] + i), c2 = _mm_loadu_ps(x[2] + i),
               c3 = _mm_loadu_ps(x[3] + i);
        _MM_TRANSPOSE4_PS(c0, c1, c2, c3);
        __m256d t[4] = {_mm256_cvtps_pd(c0), _mm256_cvtps_pd(c1), _mm256_cvtps_pd(c2), _mm256_cvtps_pd(c3)};
        for (int k = 0; k < 4; k++) {
            __m256d e = _mm256_sub_pd(t[k], m);
            v = _mm256_add_pd(v, _mm256_mul_pd(e, e));
        }
    }
    for (; i < d; i++) {
        __m256d e = _mm256_sub_pd(COL4(x, i), m);
        v = _mm256_add_pd(v, _mm256_mul_pd(e, e));
    }
    _mm256_storeu_pd(var, v);
}

void iris_cpu_ln_rows4_avx2(const float *const x[4], float *const y[4], int64_t d, float eps, const float *w,
                            const float *b) {
    double mean[4], var[4];
    sums4(x, d, 0, mean, var);
    for (int k = 0; k < 4; k++) {
        float inv = (float)(1.0 / sqrt(var[k] / d + eps));
        iris_cpu_ln_out_avx2(x[k], y[k], d, mean[k], inv, w, b);
    }
}

/* y[i] = ((float)(x[i] - mean) * inv) * w[i] + b[i] (y may be x). */
__attribute__((target("avx2"))) void iris_cpu_ln_out_avx2(const float *x, float *y, int64_t d, double mean, float inv,
                                                          const float *w, const float *b) {
    const __m256d mv = _mm256_set1_pd(mean);
    const __m256 iv = _mm256_set1_ps(inv);
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
        __m256 xv = _mm256_loadu_ps(x + i);
        __m128 lo = _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(xv)), mv));
        __m128 hi = _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(xv, 1)), mv));
        __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_set_m128(hi, lo), iv), _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(y + i, _mm256_add_ps(t, _mm256_loadu_ps(b + i)));
    }
    for (; i < d; i++) y[i] = ((float)(x[i] - mean) * inv) * w[i] + b[i];
}

void iris_cpu_rms_rows4_avx2(const float *const x[4], float *const y[4], int64_t d, float eps, const float *w) {
    double ss[4];
    sums4(x, d, 1, ss, NULL);
    for (int k = 0; k < 4; k++) {
        float inv = (float)(1.0 / sqrt(ss[k] / d + eps));
        iris_cpu_rms_out_avx2(x[k], y[k], d, inv, w);
    }
}

/* y[i] = w[i] * (x[i] * inv) (y may be x). */
__attribute__((target("avx2"))) void iris_cpu_rms_out_avx2(const float *x, float *y, int64_t d, float inv,
                                                           const float *w) {
    const __m256 iv = _mm256_set1_ps(inv);
    int64_t i = 0;
    for (; i + 8 <= d; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(_mm256_loadu_ps(x + i), iv)));
    for (; i < d; i++) y[i] = w[i] * (x[i] * inv);
}
