/* cuda_internal.cuh: what the CUDA backend's .cu files share — the backend
 * context (stream, cuBLASLt handle, arena, scratch), bf16/fp8 helpers and
 * the launch/error checks.
 *
 * Invariants: every op runs on ctx->stream, in order; every buffer an op
 * uses comes from the arena taken at open (scratch included), so the step
 * loop never calls cudaMalloc and a decode step can be captured in a graph.
 * Activations are BF16; every op accumulates in fp32 and rounds once per
 * tensor boundary (QWEN3VL.md §5, §6). */
#ifndef IRIS_CUDA_INTERNAL_CUH
#define IRIS_CUDA_INTERNAL_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The persistent decode kernel's tagged 64-bit words (cuda_decode.cu, carved at open, zeroed, and
 * zero again after their use): its stream-K partial sums (256 CTAs x 128 words), then the step's
 * q, k and v rows as its q/k/v GEMV writes them for the attention. */
#define DS_SKPART_BYTES (256u * 128u * 8u)
#define DS_QKV_BYTES (256u << 10)
#define DS_PART_BYTES (DS_SKPART_BYTES + DS_QKV_BYTES)

extern "C" {
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_testing.h"
#include "err.h"
}

#ifndef IRIS_KV_BLOCK
#define IRIS_KV_BLOCK 16
#endif

struct cuda_span {          /* one piece of the arena, kept sorted by offset */
    size_t off, bytes;
    int used;
};

/* Decode linears: rows up to these take the GEMV kernels, more go to cuBLASLt.  H100, 4B-FP8
 * gate_proj (bench_cuda linear_switch): the FMA kernel is about even with cuBLASLt after
 * dequantization at 12 rows (68 vs 65 us), the tensor-core kernel still ahead at 32 rows in
 * 8-token launches (55 vs 67 us; it takes 16 tokens a launch now).  Weights with a BF16 copy
 * (densify) take cuBLASLt past GEMV_ROWS (cuda_linear.cu gemv_ok).  iris_cuda_set_gemv_rows sets both. */
#define GEMV_ROWS 16
/* BF16 weights (the lm_head of every checkpoint, every linear of a BF16 one): k_gemv_n up to 4 rows,
 * cuBLASLt past that (at 8 tokens a launch the FMA kernel is compute-bound: the 2B lm_head took
 * 359 us at 8 rows against 199 at 1).  H100, iris bench, 1,024-token context, 2 rounds, 4 against
 * 16: 2B-FP8 8 / 16 sequences 3,713-3,721 / 5,125-5,182 -> 3,958-3,997 / 6,170-6,254 tok/s, 4B-FP8
 * 1,812-1,817 / 2,596-2,604 -> 1,872-1,874 / 2,872-2,875, 2B-BF16 2,279-2,294 / 2,468-2,474 ->
 * 2,840-2,844 / 5,062-5,068; 1-4 rows the same; cuBLASLt at 1 row slower (2B-BF16 498 -> 401). */
#define GEMV_BF16_ROWS 4
#define GEMV_MMA_ROWS 32

struct cuda_ctx {
    int device;
    cudaStream_t stream;    /* the highest priority; a fork's the lowest */
    cuda_ctx *parent;       /* a fork (iris_backend_cuda_fork): the backend whose arena it shares */
    cublasLtHandle_t lt;
    cudaDeviceProp prop;

    char *arena;            /* the one cudaMalloc */
    size_t arena_bytes, used_bytes, peak_bytes;
    cuda_span *spans;
    int n_spans, cap_spans;

    void *lt_ws;            /* cuBLASLt workspace (from the arena) */
    size_t lt_ws_bytes;
    __nv_bfloat16 *dq;      /* dequantized weight rows for the large-batch FP8 path */
    size_t dq_elems;
    float *attn_part;       /* split-context partial results of decode attention */
    size_t attn_part_elems;
    int *attn_count;        /* its splits done per (row, kv head), zero between launches */
    size_t attn_count_n;

    /* The choices below are set at open from the defaults and the developers' switches (cuda_mem.cu
     * read_switches, docs/env.md); tests and benchmarks change some of them (cuda_testing.h). */
    int w8_max_rows;
    int gemv_mma;           /* FP8 and 4-bit decode linears on the tensor cores (cuda_gemv_mma.cu, cuda_gemv_i4.cu);
                               IRIS_CUDA_GEMV_MMA=0: off */
    int mma_max_rows;       /* linear: rows up to this take that kernel where it applies (else w8_max_rows) */
    int bf16_max_rows;      /* linear: BF16 weights take k_gemv_n up to this many rows (else cuBLASLt) */
    int gemv_smem;          /* its weight tiles through shared memory where they fit one wave (tests: off) */
    int pdl;                /* decode kernels launched as programmatic dependents (sm_90+; IRIS_CUDA_PDL=0: off) */
    int qk_attn;            /* decode attention does qk_norm_rope_kv itself (tests: off) */
    int ds_compiled;        /* the kernels hold the persistent decode kernel (compiled for sm_90 or newer) */
    int decode_stack;       /* decode_layers, the persistent decode kernel (cuda_decode.cu): -1 where measured faster
                               (the default), 1 every step it takes, 0 off (IRIS_CUDA_DECODE_STACK=1 / 0) */
    unsigned *ds_bar;       /* its grid barrier's counter (carved at open, zeroed before each launch) */
    int ds_runs;            /* its launches (graph captures included), for the tests */
    int ds_split;           /* its GEMV phases shared out stream-K: -1 where uneven, else a mask (bit = phase) */
    int ds_split_last;      /* the mask its last launch used, for the tests */
    void *ds_part;          /* its stream-K pieces' tagged partial sums (DS_PART_BYTES, zero between launches) */
    const char *ds_trace;   /* IRIS_CUDA_DS_TRACE: the file its phase stamps go to (a measuring aid), or NULL */
    unsigned long long *ds_trace_buf; /* their device buffer (cudaMalloc'd when first used), ds_trace_n stamps */
    size_t ds_trace_n;
    int fp8_mma_noted;      /* said once that cuBLASLt had no block-scaled FP8 algorithm */
    int fp8_mma;            /* FP8 linears of larger batches on FP8 tensor cores (W8A8), iris_cuda_set_fp8_mma */
    int attn_impl;          /* flash kernel: 0 mma.sync (cuda_attn_mma.cu), 1 WMMA (cuda_attn_flash.cu), 2-5 (cuda_testing.h) */
    int wgmma;              /* the vision encoder's head-64 attention on wgmma (cuda_attn_wgmma.cu): sm_90a code, a 9.0 device */
    int i4_ref;             /* 4-bit decode linears through the per-row reference GEMV (tests, benchmarks) */
    int i4_runs;            /* launches of the 4-bit tensor-core GEMV (cuda_gemv_i4.cu), for the tests */
    int i4_kw;              /* its warps a CTA forced (benchmarks; 1-8), or 0: its rule */
    int i4_rows;            /* the rows it takes (in launches of 16; benchmarks), or 0: I4_GEMV_ROWS */
    uint16_t *pinned;       /* page-locked host staging for get_f32 (host memory, grown as needed) */
    size_t pinned_bytes;
    cudaEvent_t ev0, ev1;   /* iris_cuda_mark / iris_cuda_elapsed_ms */
    cudaEvent_t put_ev[2];  /* put_f32: each staging half's last copy */
};

static inline cuda_ctx *cuda_of(iris_backend *b) { return (cuda_ctx *)b->ctx; }

/* Fill b->err; returns code.  Defined in cuda_mem.cu. */
int iris_cuda_fail(iris_backend *b, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* After a launch: IRIS_EDEVICE naming `what` if the launch failed. */
int iris_cuda_check(iris_backend *b, const char *what);
/* The last error, as a status (for cuda* API calls). */
int iris_cuda_status(iris_backend *b, cudaError_t e, const char *what);

/* Op entry points (one file per family). */
int iris_cuda_linear(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias, iris_tensor *y);
int iris_cuda_linear_epi(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias, int epi,
                         iris_tensor *y);
int iris_cuda_densify(iris_backend *b, iris_tensor *w);
int iris_cuda_rms_norm(iris_backend *b, const iris_tensor *x, const iris_tensor *w, float eps, iris_tensor *y);
int iris_cuda_layer_norm(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias,
                         float eps, iris_tensor *y);
int iris_cuda_add(iris_backend *b, iris_tensor *y, const iris_tensor *x);
int iris_cuda_silu_mul(iris_backend *b, iris_tensor *g, const iris_tensor *u);
int iris_cuda_gelu_tanh(iris_backend *b, iris_tensor *x);
int iris_cuda_gelu_erf(iris_backend *b, iris_tensor *x);
int iris_cuda_rope(iris_backend *b, iris_tensor *x, int n_heads, int head_dim, const int32_t *pos, int pos_stride,
                   const int *dim_of, const float *inv_freq);
int iris_cuda_kv_write(iris_backend *b, iris_kv_layer *kv, const iris_tensor *k, const iris_tensor *v,
                       const iris_attn_meta *meta);
int iris_cuda_attn_paged(iris_backend *b, const iris_tensor *q, const iris_kv_layer *kv, const iris_attn_meta *meta,
                         int n_q_heads, iris_tensor *o);
int iris_cuda_qk_norm_rope_attn(iris_backend *b, iris_tensor *q, iris_tensor *k, const iris_tensor *v,
                                const iris_tensor *qw, const iris_tensor *kw, float eps, int n_q_heads,
                                const int32_t *pos, int pos_stride, const int *dim_of, const float *inv_freq,
                                iris_kv_layer *kv, const iris_attn_meta *meta, iris_tensor *o);
int iris_cuda_attn_segments(iris_backend *b, const iris_tensor *qkv, int n_heads, int head_dim, const int *cu_seqlens,
                            int n_seg, iris_tensor *o);
int iris_cuda_embed(iris_backend *b, const iris_tensor *table, const int32_t *ids, int n, iris_tensor *y);
int iris_cuda_set_rows(iris_backend *b, iris_tensor *y, const int32_t *idx, const iris_tensor *x);
int iris_cuda_add_rows(iris_backend *b, iris_tensor *y, const int32_t *idx, const iris_tensor *x);
int iris_cuda_get_rows(iris_backend *b, const iris_tensor *x, const int32_t *idx, int n, iris_tensor *y);
int iris_cuda_interp4(iris_backend *b, const iris_tensor *table, const int32_t *idx, const float *w, int n,
                      iris_tensor *y);

int iris_cuda_get_topk(iris_backend *b, const iris_tensor *x, int k, const iris_topk_mask *mask, int32_t *ids,
                       float *vals); /* cuda_sample.cu */
int iris_cuda_download_staged(iris_backend *b, const void *src, size_t bytes, const void **host); /* cuda_mem.cu */
int iris_cuda_decode_layers(iris_backend *b, const iris_decode_stack *d);                         /* cuda_decode_launch.cu */

/* Sets the optional fused ops of backend.h (cuda_fused.cu). */
void iris_cuda_fused_init(iris_backend *b);
void iris_cuda_linear_fused_init(iris_backend *b); /* linear_n, linear_swiglu (cuda_linear.cu) */

/* Up to three weights of one dtype and one input width over the same x (one linear, or the q, k,
 * v projections; or gate and up): the decode GEMVs' arguments (cuda_linear.cu, cuda_gemv_mma.cu). */
struct gemv_set {
    const void *W[3];
    const float *scale[3];
    const void *bias[3]; /* NULL or [out] of dtype bdt */
    __nv_bfloat16 *y[3];
    int64_t ldw[3], sc_cols[3], ldy[3], out[3];
    int b0[3], b1[3], bdt[3], m;
};
/* An FP8 set on the tensor cores (cuda_gemv_mma.cu; every weight gemv8_mma_fits): n <= 16 tokens
 * (swiglu: p.W[0] gate, p.W[1] up, into p.y[0]). */
void gemv8_mma_launch(const cuda_ctx *cx, const gemv_set &p, const __nv_bfloat16 *x, int64_t ldx, int n, int64_t in,
                      int swiglu);

/* 4-bit (I4) weights (cuda_gemv_i4.cu).  iris_cuda_gemv_i4: x (n <= I4_GEMV_ROWS tokens, 16 a launch) through
 * m <= 3 weights of one group and scale dtype on the tensor cores (m = 1 with an optional bias; swiglu:
 * ws[0] gate, ws[1] up into ys[0]); 0, an error, or 1 when it does not take them (nothing launched).
 * iris_cuda_gemv_i4_ref: the per-row reference kernel, n <= 8 (else 1).  iris_cuda_dequant_i4: rows
 * [r0, r0 + nr) of w as BF16 into dst [nr, w->cols]. */
/* Up to 64 tokens through the GEMV, in launches of 16: at 8B's shapes on an H100 (bench_cuda int4)
 * 64 tokens take 35-169 us a linear this way against 49-307 us dequantized + cuBLASLt. */
#define I4_GEMV_ROWS 64
int iris_cuda_gemv_i4(iris_backend *b, const iris_tensor *x, int m, const iris_tensor *const *ws, const iris_tensor *bias,
                      iris_tensor *const *ys, int swiglu);
int iris_cuda_gemv_i4_ref(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const void *bias, int bdt,
                          iris_tensor *y);
void iris_cuda_dequant_i4(const cuda_ctx *cx, const iris_tensor *w, int64_t r0, int64_t nr, __nv_bfloat16 *dst);

/* Flash attention (cuda_attn_flash.cu), used by attn_segments and by the
 * prefill side of attn_paged. */
int iris_cuda_flash_segments(iris_backend *b, const iris_tensor *qkv, int n_heads, int head_dim, const int *cu_seqlens,
                             int n_seg, iris_tensor *o);
int iris_cuda_flash_paged(iris_backend *b, const iris_tensor *q, const iris_kv_layer *kv, const iris_attn_meta *meta,
                          int n_q_heads, iris_tensor *o);

/* ---- device helpers ---------------------------------------------------------------------- */

typedef __nv_bfloat16 bf16;

static __device__ __forceinline__ float bf2f(bf16 v) { return __bfloat162float(v); }
static __device__ __forceinline__ bf16 f2bf(float v) { return __float2bfloat16_rn(v); }
static __device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

/* e4m3fn → fp32 (QWEN3VL.md §2): no infinities, S.1111.111 is NaN. */
static __device__ __forceinline__ float fp8_e4m3_to_f32(uint8_t q) {
    uint32_t s = (uint32_t)(q >> 7) << 31, e = (q >> 3) & 15, m = q & 7;
    if (e == 15 && m == 7) return __int_as_float(0x7fc00000);
    if (e == 0) {
        float f = (float)m * (1.0f / 512.0f); /* 2^-6 * m/8 */
        return s ? -f : f;
    }
    return __uint_as_float(s | ((e + 120) << 23) | (m << 20));
}

static __device__ __forceinline__ float f16_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }

/* ---- KV cache elements: BF16, or E4M3 codes of the values (--kv-cache-dtype fp8, scale 1) ---- */

typedef uint8_t kv8; /* an e4m3 code in the cache */

/* fp32 → e4m3, round to nearest even, saturating at +-448 (iris_fp8_e4m3_encode on the host). */
static __device__ __forceinline__ kv8 f2kv8(float v) {
    return (kv8)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}
static __device__ __forceinline__ void kv_store(bf16 *p, bf16 v) { *p = v; }
static __device__ __forceinline__ void kv_store(kv8 *p, bf16 v) { *p = f2kv8(bf2f(v)); }
/* Element e of a cache that holds E4M3 codes (is8) or BF16 set to v. */
static __device__ __forceinline__ void kv_put(void *c, int is8, int64_t e, bf16 v) {
    if (is8) kv_store((kv8 *)c + e, v);
    else kv_store((bf16 *)c + e, v);
}

/* 2N E4M3 cache codes (N pairs, already in registers) as fp32 (exact). */
template <int N> static __device__ __forceinline__ void kv8_widen(const __nv_fp8x2_storage_t *q, float *f) {
#pragma unroll
    for (int k = 0; k < N; k++) {
        __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(q[k], __NV_E4M3);
        f[2 * k] = __half2float(__ushort_as_half(h.x));
        f[2 * k + 1] = __half2float(__ushort_as_half(h.y));
    }
}
/* 8 consecutive cache elements as 8 BF16 in 16 bytes (exact: e4m3 ⊂ bf16). */
static __device__ __forceinline__ uint4 kv_load8_bf16(const bf16 *p) { return *(const uint4 *)p; }
static __device__ __forceinline__ uint4 kv_load8_bf16(const kv8 *p) {
    uint2 v = *(const uint2 *)p;
    float f[8];
    kv8_widen<4>((const __nv_fp8x2_storage_t *)&v, f);
    uint4 r;
    bf16 *e = (bf16 *)&r;
#pragma unroll
    for (int k = 0; k < 8; k++) e[k] = f2bf(f[k]);
    return r;
}

/* Element i of a small weight vector (norm weights, biases) of any float dtype, as fp32. */
static __device__ __forceinline__ float load_vec(const void *p, int dt, int64_t i) {
    if (dt == IRIS_DT_BF16) return bf2f(((const bf16 *)p)[i]);
    if (dt == IRIS_DT_F16) return f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* c[0..3] += A · B for one m16n8k16 tile, bf16 operands, fp32 accumulation (sm_80+): a[0..3] and
 * b0, b1 are the lane's fragments in mma.sync's layout (lane g = lane/4, t = lane%4 holds A rows
 * g and g+8, columns 2t, 2t+1 and 2t+8, 2t+9; B rows 2t, 2t+1 and 2t+8, 2t+9 of column g). */
static __device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 16 bytes global → shared without registers (cp.async, L2 only; sm_80+), and the wait for all of
 * a thread's copies (cuda_gemv_mma.cu, cuda_decode.cu). */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
static __device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}
/* The same into shared address dst reading src_bytes of src (0: writes zeros), as the attention
 * kernels stage their tiles; commit closes a group, wait<N> leaves the newest N in flight. */
static __device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    cp_async16((uint32_t)__cvta_generic_to_shared(dst), src, src_bytes);
}
static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* ---- FP8 weights on the tensor cores (cuda_gemv_mma.cu, cuda_decode.cu) ---- */

/* 16 e4m3 codes → 8 bf16 pairs bf16(q · s), element 2k in the low half of word k. */
static __device__ __forceinline__ void dq16(uint4 q, float s, uint32_t *w) {
    const __nv_fp8x2_storage_t *p = (const __nv_fp8x2_storage_t *)&q;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(p[k], __NV_E4M3);
        float2 v = __half22float2(*(__half2 *)&h);
        __nv_bfloat162 b = __floats2bfloat162_rn(v.x * s, v.y * s);
        w[k] = *(uint32_t *)&b;
    }
}

/* The mmas of one super-step: rows (g, g+8) dequantized once, times the x words of NT groups of 8
 * tokens (X[nt]). */
template <int NT>
static __device__ __forceinline__ void step_mma(float (*c)[4], uint4 wa, uint4 wb, float s, const uint32_t (*X)[8]) {
    uint32_t A[8], B[8];
    dq16(wa, s, A);
    dq16(wb, s, B);
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t a[4] = {A[2 * j], B[2 * j], A[2 * j + 1], B[2 * j + 1]};
            mma16816(c[nt], a, X[nt][2 * j], X[nt][2 * j + 1]);
        }
}

/* Split contexts (cuda_attn.cu, cuda_decode.cu): thread 0 counts its CTA's split in, after a
 * __syncthreads (or named barrier) that follows the CTA's writes of its partials; true for the CTA
 * that finishes the n splits, which re-arms the counter to 0 for the next use.  One acquire-release
 * add: it releases the CTA's partials (ordered before it by the barrier) and acquires the other
 * splits'; a barrier after it passes them on to the CTA's threads.  (Every thread's __threadfence,
 * a sequentially consistent fence, before and after a plain add cost the decode kernel's attention
 * ~0.7 us a layer on an H100.) */
static __device__ __forceinline__ bool split_count_last(int *cnt, int n) {
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(cnt) : "memory");
    if (old != n - 1) return false;
    *cnt = 0;
    return true;
}

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over a block of `nw` warps (every thread gets it); `red` holds nw floats. */
static __device__ __forceinline__ float block_sum(float v, float *red, int nw) {
    v = warp_sum(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    float t = 0;
    for (int i = 0; i < nw; i++) t += red[i];
    return t;
}

/* ---- per-head RMSNorm and rotary of q and k ------------------------------------------------
 * qk_norm_rope_kv's arguments (cuda_fused.cu), also taken by decode attention when it does that op
 * itself (cuda_attn.cu, iris_cuda_qk_norm_rope_attn).  A warp takes one head of hd values: lane
 * holds elements e = lane + 32 i and rotary pairs j = lane + 32 i (j < hd / 2).  What does not
 * depend on the kernel before is read first (qk_weights, qk_angles: the norm weights, the angles
 * of the row's positions from the step's metadata), then qk_head gives the head's rotated values,
 * rounded as rms_norm then rope round them: put(j, x_j, x_{j + hd/2}) for each pair.  HM bounds
 * hd / 2 (a multiple of 32). */
#define QK_MAX_HALF 128

struct qk_args {
    bf16 *q, *k;
    const bf16 *v;
    int64_t ldq, ldk, ldv;
    const void *qw, *kw;
    int qwdt, kwdt;
    float eps;
    int rows, nq, nkv, hd;
    const int32_t *pos;
    int pos_stride;
    void *kc, *vc;      /* bf16, or kv8 when kv8 */
    int kv8;
    int64_t n_slots;
    const int32_t *slot;
    float inv_freq[QK_MAX_HALF];
    uint8_t dim_of[QK_MAX_HALF];
};

/* Validates qk_norm_rope_kv's arguments (backend.h) and fills a (cuda_fused.cu); 0 or an error in b. */
int iris_cuda_qk_args(iris_backend *b, iris_tensor *q, iris_tensor *k, const iris_tensor *v, const iris_tensor *qw,
                      const iris_tensor *kw, float eps, int n_q_heads, const int32_t *pos, int pos_stride,
                      const int *dim_of, const float *inv_freq, const iris_kv_layer *kv, const iris_attn_meta *meta,
                      qk_args *a);

template <int HM> static __device__ __forceinline__ void qk_weights(float *wv, const void *w, int wdt, int hd, int lane) {
#pragma unroll
    for (int i = 0; i < 2 * HM / 32; i++)
        if (lane + 32 * i < hd) wv[i] = load_vec(w, wdt, lane + 32 * i);
}
/* s_inv, s_dim: the tables in shared memory (parameter arrays indexed by a lane-varying j serialize);
 * pos: 3 rows of pos_stride (t, h, w), r the row. */
template <int HM>
static __device__ __forceinline__ void qk_angles(float *sn, float *cs, const int32_t *pos, int pos_stride, int hd,
                                                 int64_t r, const float *s_inv, const int *s_dim, int lane) {
#pragma unroll
    for (int i = 0; i < HM / 32; i++) {
        int j = lane + 32 * i;
        if (j < hd / 2) sincosf((float)pos[(int64_t)s_dim[j] * pos_stride + r] * s_inv[j], &sn[i], &cs[i]);
    }
}
/* A head's arithmetic, lane by lane: the RMSNorm's 1/rms from the lanes' sums of squares, a value
 * normed and weighted (rounded as rms_norm rounds), a rotary pair rotated (one rounding). */
static __device__ __forceinline__ float qk_inv(float ss, int hd, float eps) { return rsqrtf(warp_sum(ss) / (float)hd + eps); }
static __device__ __forceinline__ float qk_normed(float v, float inv, float w) { return round_bf16(w * round_bf16(v * inv)); }
static __device__ __forceinline__ void qk_rotate(float x0, float x1, float c, float s, bf16 &o0, bf16 &o1) {
    o0 = f2bf(x0 * c - x1 * s), o1 = f2bf(x1 * c + x0 * s);
}
/* s: the warp's hd floats of shared memory (free again when it returns). */
template <int HM, typename Put>
static __device__ __forceinline__ void qk_head(const bf16 *x, const float *wv, const float *sn, const float *cs,
                                               float *s, float eps, int hd, int lane, Put put) {
    float ss = 0;
    for (int e = lane; e < hd; e += 32) {
        float v = bf2f(x[e]);
        s[e] = v;
        ss += v * v;
    }
    float inv = qk_inv(ss, hd, eps);
#pragma unroll
    for (int i = 0; i < 2 * HM / 32; i++)
        if (lane + 32 * i < hd) s[lane + 32 * i] = qk_normed(s[lane + 32 * i], inv, wv[i]);
    __syncwarp();
    const int half = hd / 2;
#pragma unroll
    for (int i = 0; i < HM / 32; i++) {
        int j = lane + 32 * i;
        if (j >= half) break;
        bf16 o0, o1;
        qk_rotate(s[j], s[j + half], cs[i], sn[i], o0, o1);
        put(j, o0, o1);
    }
    __syncwarp();
}

/* ---- programmatic dependent launch (sm_90 and newer) ---------------------------------------
 * A decode step is a chain of ~9 small kernels a layer, and without help each one starts only
 * after the previous one has drained: the launch, the ramp-up of its loads and the tail of the
 * previous kernel are all exposed.  The decode kernels are launched with `launch` below as
 * programmatic dependents: a kernel may start as soon as every block of the one before it has
 * started (each calls pdl_launch_next() first thing), does what does not depend on it (the
 * tensor-core GEMV loads its first weights), then pdl_wait()s, which returns once the previous kernel
 * has completed and its writes are visible.  Every block of such a kernel calls pdl_wait() before
 * it reads or writes anything another kernel touches (and before it exits), so completion stays
 * transitive along the chain.  On older cards, or with ctx->pdl off, the attribute is not set and
 * both calls are no-ops (griddepcontrol.wait returns at once in a kernel launched the plain way).
 * Measured on an H100 (bench/pdl_probe.cu): a dependent starts ~20 us before a 20 us kernel ends,
 * in a stream and in a captured graph alike; iris bench, IRIS_CUDA_PDL=0 -> 1 in one run: 2B-FP8
 * decode batch 1 487 -> 516 tok/s, 4B-FP8 259 -> 274 (batch 8/32: 2B 3,246/7,625 -> 3,171/7,381,
 * 4B 1,723/3,130 -> 1,790/3,227).  Without the GEMV's early loads (an L2 prefetch instead, on the
 * per-row kernel) it had measured no gain (the variants measured and dropped: docs/performance.md). */
static __device__ __forceinline__ void pdl_launch_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
static __device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* kern<<<grid, block, smem, cx->stream>>>(args...), as a programmatic dependent when cx->pdl. */
template <typename... KArgs, typename... Args>
static inline cudaError_t launch(const cuda_ctx *cx, void (*kern)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                 Args... args) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = cx->stream;
    cfg.attrs = at, cfg.numAttrs = cx->pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kern, args...);
}

static inline int64_t tld(const iris_tensor *t) { return t->ld ? t->ld : t->cols; }
static inline int is_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Whether the tensor-core GEMV takes an FP8 weight of `in` columns, `ldw` bytes a row, b0 x b1 scale
 * blocks: whole 64-column super-steps of 16-byte loads, and no super-step or 16-row tile straddling
 * a scale block. */
static inline int gemv8_mma_fits(int64_t in, int64_t ldw, int b0, int b1, const void *w) {
    return in % 64 == 0 && b1 % 64 == 0 && b0 % 16 == 0 && ldw % 16 == 0 && is_aligned16(w);
}

#endif
