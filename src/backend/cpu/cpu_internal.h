/* cpu_internal.h: shared helpers of the CPU backend (weight widening, its memory). */
#ifndef IRIS_CPU_INTERNAL_H
#define IRIS_CPU_INTERNAL_H

#include <pthread.h>
#include <string.h>

#include "backend/backend.h"
#include "err.h"
#include "pool.h"

static inline float iris_bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to bf16, nearest even (NaN kept). */
static inline float iris_f32_round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x;
    u = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

float iris_f16_to_f32(uint16_t h);
/* e4m3fn decode table (QWEN3VL.md §2): no infinities, S.1111.111 is NaN. */
extern float iris_fp8_e4m3_table[256];
void iris_fp8_table_init(void);

/* Row r of a weight view as fp32 into dst[cols] (FP8: bf16(q · scale) as transformers; I4:
 * bf16((q - zero) · scale) as compressed-tensors). */
void iris_cpu_widen_row(const iris_tensor *w, int64_t r, float *dst);

/* The AVX2 decode kernel (cpu_dot_avx2.c): y[i·ldy] = x[i] · row r of w for n <= 8 rows
 * of x; BF16 and FP8 (block[1] % 8 == 0) weights, same numbers as the scalar widening.
 * Returns -1, writing nothing, for anything else.  Call only when iris_cpu_has_avx2(). */
int iris_cpu_has_avx2(void);
int iris_cpu_has_avx512(void);
/* The AVX2 activations (cpu_act_avx2.c), in place over n floats: GELU (tanh form), g = silu(g) · u. */
void iris_cpu_gelu_tanh_avx2(float *v, int64_t n);
void iris_cpu_silu_mul_avx2(float *g, const float *u, int64_t n);
/* The norms four rows at a time (cpu_norm_avx2.c), the scalar loops' bits: LayerNorm y = (x - mean) /
 * sqrt(var + eps) · w + b and RMSNorm y = w · x / sqrt(mean(x²) + eps) of rows x[k] into y[k] (y[k]
 * may be x[k]) of d floats, w and b fp32; and the output pass of one row, given its mean and inv. */
void iris_cpu_ln_rows4_avx2(const float *const x[4], float *const y[4], int64_t d, float eps, const float *w,
                            const float *b);
void iris_cpu_ln_out_avx2(const float *x, float *y, int64_t d, double mean, float inv, const float *w, const float *b);
void iris_cpu_rms_rows4_avx2(const float *const x[4], float *const y[4], int64_t d, float eps, const float *w);
void iris_cpu_rms_out_avx2(const float *x, float *y, int64_t d, float inv, const float *w);
int iris_cpu_dot_row_avx2(const iris_tensor *w, int64_t r, const float *x, int n, int64_t ldx, float *y, int64_t ldy);
/* n BF16 values widened to fp32 (exact), eight at a time. */
void iris_cpu_widen_bf16_avx2(const uint16_t *src, float *dst, int64_t n);

int iris_cpu_fail(iris_backend *b, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* backend.h get_topk over fp32 rows (cpu_sample.c). */
int iris_cpu_get_topk(iris_backend *b, const iris_tensor *x, int k, const iris_topk_mask *mask, int32_t *ids,
                      float *vals);

/* The CPU backend's context (b->ctx): its choices, made once at open, and its memory.  IRIS_CPU_AVX2=0,
 * the one developers' switch of this backend (docs/env.md), is read there and nowhere else. */
#define IRIS_CPU_CACHE_SLOTS 32
typedef struct iris_cpu_ctx {
    int avx2;                   /* decode-sized BF16 products through the AVX2 kernel (where the CPU has it) */
    int avx512;                 /* vision attention sixteen rows a vector (AVX-512F, with avx2; same bits) */
    /* Freed blocks of at least IRIS_CPU_CACHE_MIN_BYTES kept for the next alloc of their size class
     * (oldest first out), IRIS_CPU_CACHE_BYTES in all at most; freed at destroy. */
    pthread_mutex_t mu;
    void *cached[IRIS_CPU_CACHE_SLOTS];
    int n_cached;
    size_t cached_bytes;
    int64_t n_live;             /* blocks from the system not yet given back, cached ones included */
    /* per pool worker (iris_pool_worker()) scratch of the ops, grown on demand; freed at destroy */
    float *scratch[IRIS_POOL_MAX_THREADS];
    size_t scratch_n[IRIS_POOL_MAX_THREADS];
} iris_cpu_ctx;

#define IRIS_CPU_CACHE_MIN_BYTES ((size_t)64 << 10)
#define IRIS_CPU_CACHE_BYTES ((size_t)256 << 20)

/* A block of at least bytes (64-byte aligned) from the cache or the system, NULL when out of memory;
 * give it back with iris_cpu_buf_free (NULL is fine).  b->alloc and b->free are these. */
void *iris_cpu_buf(iris_cpu_ctx *c, size_t bytes);
void iris_cpu_buf_free(iris_cpu_ctx *c, void *p);
/* The calling pool worker's scratch of at least n floats (its own: no other thread touches it while
 * an op of this backend runs, one thread driving a backend at a time), NULL when out of memory.  The
 * backend owns it. */
float *iris_cpu_scratch(iris_cpu_ctx *c, size_t n);
/* Every pool worker's scratch grown to n floats now, on the calling thread, before a pool call whose
 * workers take it: 0, or IRIS_ENOMEM. */
int iris_cpu_scratch_reserve(iris_cpu_ctx *c, size_t n);

#endif
