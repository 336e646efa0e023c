/* cuda_linear.cu: y[n, out] = x[n, in] · Wᵀ (+ bias) for BF16 activations and
 * BF16, F16, F32, block-scaled FP8 or group-scaled 4-bit (I4) weights.  I4 (W4A16) takes the
 * tensor-core GEMV of cuda_gemv_i4.cu for up to I4_GEMV_ROWS rows (also the q, k, v projections
 * in one launch and gate, up and SiLU·mul in one) and dequantized row chunks through cuBLASLt
 * otherwise, each weight bf16((q - zero) · scale) as on the CPU; the paths below are the other
 * dtypes'.
 *
 * Four paths, chosen per call:
 *  - small batches (n <= ctx->mma_max_rows; <= ctx->w8_max_rows for a weight with a BF16 copy) with
 *    FP8 weights in 128x128 blocks and rows of a multiple of 64: the tensor-core kernel of
 *    cuda_gemv_mma.cu (W8A16 through mma.sync).
 *  - other small batches (decode: n <= ctx->w8_max_rows for FP8, ctx->bf16_max_rows for BF16) with
 *    BF16 or FP8 weights whose rows allow 16-byte loads: k_gemv_n, W16A16 / W8A16 (also the q, k, v
 *    projections in one launch; k_gemv_swiglu: gate, up and SiLU·mul in one).  Memory-bound:
 *    the weight is read once (n·in activations are L1/L2-resident), so its
 *    time floor is bytes(W) / bandwidth.  Thread mapping: one warp per output
 *    row, lanes stride over the row 16 bytes at a time (8 bf16 or 16 fp8
 *    elements), four loads in flight per lane, fp32 accumulators for up to 8
 *    tokens, then a warp reduction.  FP8 is dequantized in registers exactly
 *    as transformers does, bf16(q · scale_inv) (QWEN3VL.md §2).
 *  - BF16 weights, larger batches: cuBLASLt, BF16 in/out, fp32 accumulation
 *    (CUBLAS_COMPUTE_32F), bias added in the epilogue before the one rounding.
 *  - FP8 (and F16/F32) weights, larger batches: the weight is dequantized to
 *    BF16 in row chunks into the scratch carved at open (ctx->dq), each chunk
 *    multiplied by cuBLASLt.  Compute-bound for prefill-sized n, where the
 *    chunk round trip is a few percent.  FP8 tensor cores with per-token-group
 *    activation quantization (W8A8, below) are opt-in: they change the numbers.
 *    F32/F16 weights are rounded to BF16 on the way (the CUDA backend computes
 *    in bf16, DESIGN.md "Numerics").
 * Past the small batches, q/k/v and gate/up whose weights lie end to end (placement and densify
 * put them so) are one product each into the caller's joint buffer (linear_n, linear_swiglu).
 * cuBLASLt descriptors and the chosen algorithm are cached per shape, so a
 * repeated shape costs no heuristic query. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_fp8.h>

#include "cuda_internal.cuh"

#define GEMV_WARPS 4

#ifndef GEMV_UNROLL
/* 16-byte loads in flight a lane.  H100, 2B/4B-FP8 decode: 4 gave 472/264 tok/s at batch 1, 8 gave
 * 468/253 and 12 455/225 (the dequantizing inner loop, not the loads in flight, is what limits). */
#define GEMV_UNROLL 4
#endif

/* 16 bytes of fp8 (16 values) → fp32, via the hardware fp8x2 → half2 conversion. */
static __device__ __forceinline__ void fp8x16_to_f32(uint4 q, float *f) {
    const __nv_fp8x2_storage_t *p = (const __nv_fp8x2_storage_t *)&q;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(p[k], __NV_E4M3);
        float2 v = __half22float2(*(__half2 *)&h);
        f[2 * k] = v.x;
        f[2 * k + 1] = v.y;
    }
}

/* One warp's share of one output row: acc[t] += x[t] · W[row] over its lanes' columns (not yet
 * reduced across the warp).  wr: the row's bytes; srow: its block scales (FP8). */
template <int FP8, int NT>
static __device__ __forceinline__ void gemv_row(const char *__restrict__ wr, const float *__restrict__ srow, int b1,
                                                const bf16 *__restrict__ x, int64_t ldx, int n, int64_t in, int lane,
                                                float *acc) {
    constexpr int EPL = FP8 ? 16 : 8; /* elements per 16-byte load */
    for (int64_t c0 = (int64_t)lane * EPL; c0 < in; c0 += 32 * EPL * GEMV_UNROLL) {
        uint4 wv[GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            int64_t c = c0 + (int64_t)u * 32 * EPL;
            if (c < in) wv[u] = __ldg((const uint4 *)(wr + c * (FP8 ? 1 : 2)));
        }
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            int64_t c = c0 + (int64_t)u * 32 * EPL;
            if (c >= in) break;
            float wf[EPL];
            if (FP8) {
                fp8x16_to_f32(wv[u], wf);
                float s = srow[c / b1];
#pragma unroll
                for (int k = 0; k < EPL; k += 2) {
                    float2 r = __bfloat1622float2(__floats2bfloat162_rn(wf[k] * s, wf[k + 1] * s));
                    wf[k] = r.x;
                    wf[k + 1] = r.y;
                }
            } else {
                const __nv_bfloat162 *p = (const __nv_bfloat162 *)&wv[u];
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    float2 r = __bfloat1622float2(p[k]);
                    wf[2 * k] = r.x;
                    wf[2 * k + 1] = r.y;
                }
            }
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const bf16 *xr = x + (int64_t)(t < n ? t : n - 1) * ldx + c;
#pragma unroll
                for (int h = 0; h < EPL / 8; h++) {
                    uint4 xv = *(const uint4 *)(xr + h * 8);
                    const __nv_bfloat162 *xp = (const __nv_bfloat162 *)&xv;
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        float2 xf = __bfloat1622float2(xp[k]);
                        acc[t] = fmaf(wf[h * 8 + 2 * k], xf.x, acc[t]);
                        acc[t] = fmaf(wf[h * 8 + 2 * k + 1], xf.y, acc[t]);
                    }
                }
            }
        }
    }
}

template <int FP8, int NT>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv_n(const gemv_set p, const bf16 *__restrict__ x, int64_t ldx, int n, int64_t in) {
    int lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * GEMV_WARPS + threadIdx.x / 32;
    int i = 0;
    pdl_launch_next();
    while (i < p.m && row >= p.out[i]) row -= p.out[i++];
    pdl_wait();
    if (i >= p.m) return;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0;
    gemv_row<FP8, NT>((const char *)p.W[i] + row * p.ldw[i] * (FP8 ? 1 : 2),
                      FP8 ? p.scale[i] + (row / p.b0[i]) * p.sc_cols[i] : NULL, p.b1[i], x, ldx, n, in, lane, acc);
    float bv = p.bias[i] ? load_vec(p.bias[i], p.bdt[i], row) : 0.0f;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float s = warp_sum(acc[t]);
        if (lane == 0 && t < n) p.y[i][(int64_t)t * p.ldy[i] + row] = f2bf(s + bv);
    }
}

/* g[t][row] = silu(bf16(x·Wg[row])) ⊙ bf16(x·Wu[row]): gate and up rows by the same warp, the
 * roundings of linear, linear and silu_mul (cuda_elementwise.cu's op_silu_mul). p.W[0] is Wg,
 * p.W[1] Wu, p.y[0] g. */
template <int FP8, int NT>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    k_gemv_swiglu(const gemv_set p, const bf16 *__restrict__ x, int64_t ldx, int n, int64_t in) {
    int lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * GEMV_WARPS + threadIdx.x / 32;
    pdl_launch_next();
    pdl_wait();
    if (row >= p.out[0]) return;
    float ag[NT], au[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) ag[t] = au[t] = 0;
    gemv_row<FP8, NT>((const char *)p.W[0] + row * p.ldw[0] * (FP8 ? 1 : 2),
                      FP8 ? p.scale[0] + (row / p.b0[0]) * p.sc_cols[0] : NULL, p.b1[0], x, ldx, n, in, lane, ag);
    gemv_row<FP8, NT>((const char *)p.W[1] + row * p.ldw[1] * (FP8 ? 1 : 2),
                      FP8 ? p.scale[1] + (row / p.b0[1]) * p.sc_cols[1] : NULL, p.b1[1], x, ldx, n, in, lane, au);
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float g = round_bf16(warp_sum(ag[t])), u = round_bf16(warp_sum(au[t]));
        if (lane == 0 && t < n) p.y[0][(int64_t)t * p.ldy[0] + row] = f2bf(round_bf16(g / (1.0f + expf(-g))) * u);
    }
}

/* Rows [r0, r0 + nr) of W as BF16 into dst [nr, in] (ld = in). One thread per element. */
__global__ void k_dequant(const void *W, int wdt, int64_t ldw, const float *scale, int64_t sc_cols, int b0, int b1,
                          int64_t r0, int64_t nr, int64_t in, bf16 *dst) {
    int64_t total = nr * in;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = r0 + i / in, c = i % in;
        float v;
        if (wdt == IRIS_DT_F8_E4M3)
            v = fp8_e4m3_to_f32(((const uint8_t *)W)[r * ldw + c]) * scale[(r / b0) * sc_cols + c / b1];
        else
            v = load_vec(W, wdt, r * ldw + c);
        dst[i] = f2bf(v);
    }
}

/* The same for FP8 rows that allow 16-byte access: one thread per 16 weights
 * (one load, two stores); memory-bound, n bytes in and 2n out. */
__global__ void k_dequant_fp8_vec(const uint8_t *W, int64_t ldw, const float *scale, int64_t sc_cols, int b0, int b1,
                                  int64_t r0, int64_t nr, int64_t in, bf16 *dst) {
    int64_t units = in / 16, total = nr * units;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = r0 + i / units, c = (i % units) * 16;
        float f[16];
        fp8x16_to_f32(__ldg((const uint4 *)(W + r * ldw + c)), f);
        float s = scale[(r / b0) * sc_cols + c / b1];
        uint4 o[2];
        __nv_bfloat162 *op = (__nv_bfloat162 *)o;
#pragma unroll
        for (int k = 0; k < 8; k++) op[k] = __floats2bfloat162_rn(f[2 * k] * s, f[2 * k + 1] * s);
        uint4 *d = (uint4 *)(dst + (r - r0) * in + c);
        d[0] = o[0];
        d[1] = o[1];
    }
}

/* ---- cuBLASLt ----------------------------------------------------------------------------- */

struct lt_plan {
    int64_t m, n, k, lda, ldb, ldc;
    int bias_dt; /* -1: no bias */
    int epi;     /* IRIS_EPI_* (backend.h): 0 none, GELU_TANH in the epilogue, ADD with beta 1 */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    int valid;
};

#define LT_CACHE 48
/* Per host thread (the engine's, its vision worker's: each with its own handle and stream), so no
 * lock; a plan (descriptors and algorithm) serves any handle on the device. */
static __thread lt_plan g_plans[LT_CACHE];
static __thread int g_next_plan;

static void plan_drop(lt_plan *p) {
    if (!p->valid) return;
    cublasLtMatmulDescDestroy(p->op);
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->c);
    p->valid = 0;
}

/* cuBLASLt's first choice for op over a, b and c (c also D) within our workspace: 0, or the query's
 * status (a positive number; -1 when it offered nothing). */
static int lt_best(cuda_ctx *cx, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                   cublasLtMatrixLayout_t c, cublasLtMatmulAlgo_t *algo) {
    cublasLtMatmulPreference_t pref;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return -1;
    uint64_t ws = cx->lt_ws_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cx->lt, op, a, b, c, c, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
    if (found == 0) return -1;
    *algo = res.algo;
    return 0;
}

static lt_plan *plan_get(cuda_ctx *cx, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                         int bias_dt, int epi) {
    for (int i = 0; i < LT_CACHE; i++) {
        lt_plan *p = &g_plans[i];
        if (p->valid && p->m == m && p->n == n && p->k == k && p->lda == lda && p->ldb == ldb && p->ldc == ldc &&
            p->bias_dt == bias_dt && p->epi == epi)
            return p;
    }
    lt_plan *p = &g_plans[g_next_plan];
    g_next_plan = (g_next_plan + 1) % LT_CACHE;
    plan_drop(p);
    memset(p, 0, sizeof *p);
    p->m = m, p->n = n, p->k = k, p->lda = lda, p->ldb = ldb, p->ldc = ldc, p->bias_dt = bias_dt, p->epi = epi;
    /* Row-major y[n, m] = x[n, k] · W[m, k]ᵀ is column-major yᵀ[m, n] = op(W)[m, k] · xᵀ[k, n]
     * with W read as a column-major [k, m] matrix, transposed. */
    cublasOperation_t tr = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return NULL;
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &tr, sizeof tr);
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt);
    /* cuBLASLt's GELU epilogue is the tanh form, on the fp32 sum before its one rounding */
    cublasLtEpilogue_t ep = epi == IRIS_EPI_GELU_TANH ? (bias_dt >= 0 ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU)
                            : bias_dt >= 0            ? CUBLASLT_EPILOGUE_BIAS
                                                      : CUBLASLT_EPILOGUE_DEFAULT;
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
    if (bias_dt >= 0) {
        cudaDataType_t bt = bias_dt == IRIS_DT_F32 ? CUDA_R_32F : CUDA_R_16BF;
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
    }
    cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, (uint64_t)k, (uint64_t)m, lda);
    cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, (uint64_t)k, (uint64_t)n, ldb);
    cublasLtMatrixLayoutCreate(&p->c, CUDA_R_16BF, (uint64_t)m, (uint64_t)n, ldc);
    p->valid = 1;
    if (lt_best(cx, p->op, p->a, p->b, p->c, &p->algo) != 0) {
        plan_drop(p);
        return NULL;
    }
    return p;
}

/* y[r][c] += bias[c], for shapes whose bias epilogue cuBLASLt declines. */
__global__ void k_add_bias(bf16 *y, int64_t ldy, int64_t rows, int64_t cols, const void *bias, int bdt) {
    int64_t total = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i % cols;
        y[r * ldy + c] = f2bf(bf2f(y[r * ldy + c]) + load_vec(bias, bdt, c));
    }
}

/* y = x · wᵀ (+ bias), with epilogue epi (IRIS_EPI_*; y += ... for ADD).  With an epilogue and
 * no algorithm for it: IRIS_EUNSUPPORTED, nothing done, no error set (the caller's ops do it). */
static int lt_matmul_epi(iris_backend *b, const bf16 *w, int64_t ldw, const bf16 *x, int64_t ldx, bf16 *y,
                         int64_t ldy, int64_t m, int64_t n, int64_t k, const void *bias, int bias_dt, int epi) {
    cuda_ctx *cx = cuda_of(b);
    lt_plan *p = plan_get(cx, m, n, k, ldw, ldx, ldy, bias ? bias_dt : -1, epi);
    if (!p && epi) return IRIS_EUNSUPPORTED;
    if (!p && bias) { /* no algorithm with the bias epilogue: multiply, then add the bias (one more rounding) */
        int rc = lt_matmul_epi(b, w, ldw, x, ldx, y, ldy, m, n, k, NULL, -1, 0);
        if (rc) return rc;
        int64_t blocks = (m * n + 255) / 256;
        k_add_bias<<<(unsigned)(blocks > 65536 ? 65536 : blocks), 256, 0, cx->stream>>>(y, ldy, n, m, bias, bias_dt);
        return iris_cuda_check(b, "linear (bias)");
    }
    if (!p)
        return iris_cuda_fail(b, IRIS_EDEVICE, "cuda linear: cuBLASLt has no algorithm for [%lld,%lld]·[%lld,%lld]ᵀ",
                              (long long)n, (long long)k, (long long)m, (long long)k);
    if (bias) cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    float one = 1.0f, beta = epi == IRIS_EPI_ADD ? 1.0f : 0.0f;
    cublasStatus_t st = cublasLtMatmul(cx->lt, p->op, &one, w, p->a, x, p->b, &beta, y, p->c, y, p->c, &p->algo,
                                       cx->lt_ws, cx->lt_ws_bytes, cx->stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        return iris_cuda_fail(b, IRIS_EDEVICE, "cuda linear: cublasLtMatmul failed (status %d) for [%lld,%lld]·[%lld,%lld]ᵀ",
                              (int)st, (long long)n, (long long)k, (long long)m, (long long)k);
    return 0;
}

static int lt_matmul(iris_backend *b, const bf16 *w, int64_t ldw, const bf16 *x, int64_t ldx, bf16 *y, int64_t ldy,
                     int64_t m, int64_t n, int64_t k, const void *bias, int bias_dt) {
    return lt_matmul_epi(b, w, ldw, x, ldx, y, ldy, m, n, k, bias, bias_dt, 0);
}

/* ---- W8A8: FP8 tensor cores with per-token-group activation scales (sm_90, opt-in) ----------
 * x is quantized per row and per 128 columns to e4m3 with scale amax / 448 (vLLM's and DeepSeek's
 * dynamic 1x128 activation quantization), and cuBLASLt multiplies the codes with the weight's
 * 128x128 block scales (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F for W, VEC128_32F for x).
 * Scale layouts (as torch's _scaled_mm hands them to cuBLASLt): W's [out/128, in/128] row-major,
 * as stored; x's [in/128, n], the token index contiguous (outer-dimension major).
 * It changes the numbers (x is rounded to 3 mantissa bits before the product), so it is used
 * only when asked for (iris_cuda_set_fp8_mma, IRIS_CUDA_FP8_MMA=1; its speed and error against
 * the dequantizing path: docs/performance.md, docs/env.md). */

/* Sixteen threads (8 values each) per (row, 128-column group).  Rows n_real..n-1 are padding
 * (zeros, scale 1): cuBLASLt's VEC128 scales want the row count a multiple of 4.  x's rows 16-byte
 * aligned (ldx a multiple of 8). */
__global__ void k_quant_act_128(const bf16 *x, int64_t ldx, int64_t n, int64_t n_real, int64_t in, uint8_t *xq,
                                float *xs) {
    int64_t groups = in / 128, u = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 16;
    int l = threadIdx.x & 15, live = u < n * groups;
    int64_t r = live ? u / groups : 0, g = live ? u % groups : 0;
    float v[8], amax = 0.0f;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (live && r < n_real) raw = *(const uint4 *)(x + r * ldx + g * 128 + l * 8);
    const bf16 *e = (const bf16 *)&raw;
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = bf2f(e[i]), amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
    for (int o = 8; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o)); /* within the 16 */
    if (!live) return;
    float sc = amax > 0.0f ? amax / 448.0f : 1.0f;
    uint32_t q[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 8; i++)
        q[i / 4] |= (uint32_t)__nv_cvt_float_to_fp8(v[i] / sc, __NV_SATFINITE, __NV_E4M3) << (8 * (i % 4));
    *(uint2 *)(xq + r * in + g * 128 + l * 8) = make_uint2(q[0], q[1]);
    if (l == 0) xs[g * n + r] = sc;
}

static void quant_act(cuda_ctx *cx, const bf16 *x, int64_t ldx, int64_t n, int64_t n_real, int64_t in, uint8_t *xq,
                      float *xs) {
    int64_t threads = n * (in / 128) * 16;
    k_quant_act_128<<<(unsigned)((threads + 255) / 256), 256, 0, cx->stream>>>(x, ldx, n, n_real, in, xq, xs);
}

struct lt_plan8 {
    int64_t m, n, k, lda, ldc;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    int valid, failed;
};
static __thread lt_plan8 g_plans8[LT_CACHE];
static __thread int g_next_plan8, g_plan8_status; /* the last heuristic query's result (lt_best), for the message */

static lt_plan8 *plan8_get(cuda_ctx *cx, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldc, const void *sa,
                           const void *sb) {
    for (int i = 0; i < LT_CACHE; i++) {
        lt_plan8 *p = &g_plans8[i];
        if ((p->valid || p->failed) && p->m == m && p->n == n && p->k == k && p->lda == lda && p->ldc == ldc)
            return p->valid ? p : NULL;
    }
    lt_plan8 *p = &g_plans8[g_next_plan8];
    g_next_plan8 = (g_next_plan8 + 1) % LT_CACHE;
    if (p->valid) {
        cublasLtMatmulDescDestroy(p->op);
        cublasLtMatrixLayoutDestroy(p->a);
        cublasLtMatrixLayoutDestroy(p->b);
        cublasLtMatrixLayoutDestroy(p->c);
    }
    memset(p, 0, sizeof *p);
    p->m = m, p->n = n, p->k = k, p->lda = lda, p->ldc = ldc;
    cublasOperation_t tr = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    int32_t blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    p->failed = 1;
    if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return NULL;
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &tr, sizeof tr);
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt);
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &blk, sizeof blk);
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof vec);
    /* the heuristic may look at the scale pointers: this call's (set again before each matmul) */
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
    cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, (uint64_t)k, (uint64_t)m, lda);
    cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, (uint64_t)k, (uint64_t)n, k);
    cublasLtMatrixLayoutCreate(&p->c, CUDA_R_16BF, (uint64_t)m, (uint64_t)n, ldc);
    g_plan8_status = lt_best(cx, p->op, p->a, p->b, p->c, &p->algo);
    if (g_plan8_status != 0) {
        cublasLtMatmulDescDestroy(p->op);
        cublasLtMatrixLayoutDestroy(p->a);
        cublasLtMatrixLayoutDestroy(p->b);
        cublasLtMatrixLayoutDestroy(p->c);
        return NULL;   /* remembered as failed: the dequantizing path from then on for this shape */
    }
    p->failed = 0, p->valid = 1;
    return p;
}

/* y (ld ldy) = the n quantized rows xq/xs (n a multiple of 4) times w.  1: done; 0: cuBLASLt has no
 * algorithm for the shape. */
static int w8a8_gemm(iris_backend *b, const iris_tensor *w, const uint8_t *xq, const float *xs, int64_t n, bf16 *y,
                     int64_t ldy) {
    cuda_ctx *cx = cuda_of(b);
    int64_t in = w->cols, out = w->rows;
    lt_plan8 *p = plan8_get(cx, out, n, in, tld(w), ldy, w->scale, xs);
    if (!p) {
        if (!cx->fp8_mma_noted)
            fprintf(stderr, "iris: cuBLASLt offers no block-scaled FP8 algorithm for [%lld,%lld]·[%lld,%lld]ᵀ "
                    "(status %d): dequantizing instead\n", (long long)n, (long long)in, (long long)out, (long long)in,
                    g_plan8_status);
        cx->fp8_mma_noted = 1;
        return 0;
    }
    const void *sa = w->scale, *sb = xs;
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
    float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasLtMatmul(cx->lt, p->op, &one, w->data, p->a, xq, p->b, &zero, y, p->c, y, p->c, &p->algo,
                                       cx->lt_ws, cx->lt_ws_bytes, cx->stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        return iris_cuda_fail(b, IRIS_EDEVICE, "cuda linear: FP8 cublasLtMatmul failed (status %d) for [%lld,%lld]·"
                              "[%lld,%lld]ᵀ", (int)st, (long long)n, (long long)in, (long long)out, (long long)in);
    return 1;
}

static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

/* linear's W8A8 path, y = x · wᵀ (+ bias) for an FP8 weight with 128x128 block scales: x's rows
 * quantized (as many at a time as the dequantization scratch holds), then multiplied; the last n % 4
 * rows go padded to 4 through the scratch's tail and are copied.  1: done; 0: not applicable (nothing
 * usable written: the caller dequantizes); < 0: an error. */
static int linear_w8a8(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const void *bias, int bdt,
                       iris_tensor *y) {
    cuda_ctx *cx = cuda_of(b);
    int64_t n = x->rows, in = x->cols, out = w->rows, ldy = tld(y);
    bf16 *yd = (bf16 *)y->data;
    /* scale rows of 2 or 3 gave wrong products past the first 128 rows (H200, gpu_ops_linear_joint);
     * the checkpoints' widths are multiples of 512 */
    if (!cx->fp8_mma || cx->prop.major != 9 || x->dtype != IRIS_DT_BF16 || tld(x) % 8 || !is_aligned16(x->data) ||
        w->dtype != IRIS_DT_F8_E4M3 || !w->scale || w->cols != in || w->block[0] != 128 || w->block[1] != 128 ||
        out % 16 || ldy % 8 || !is_aligned16(w->data) || tld(w) % 16 || in % 512 || !is_aligned16(w->scale))
        return 0;
    size_t scratch = cx->dq_elems * sizeof(bf16), per_row = (size_t)in + (size_t)in / 128 * sizeof(float);
    size_t tail = up256(4 * (size_t)in) + up256(4 * (size_t)in / 128 * sizeof(float)) + up256(4 * (size_t)out * 2);
    if (tail + 1024 > scratch) return 0;
    int64_t chunk = (int64_t)((scratch - tail - 512) / per_row) & ~(int64_t)3;
    if (chunk < 4) return 0;
    uint8_t *base = (uint8_t *)cx->dq, *tq = base + (scratch - tail);
    float *ts = (float *)(tq + up256(4 * (size_t)in));
    bf16 *ty = (bf16 *)((uint8_t *)ts + up256(4 * (size_t)in / 128 * sizeof(float)));
    const bf16 *xd = (const bf16 *)x->data;
    int64_t main_rows = n & ~(int64_t)3;
    for (int64_t r0 = 0; r0 < main_rows; r0 += chunk) {
        int64_t nr = main_rows - r0 < chunk ? main_rows - r0 : chunk;
        float *xs = (float *)(base + up256((size_t)nr * in));
        quant_act(cx, xd + r0 * tld(x), tld(x), nr, nr, in, base, xs);
        int rc = iris_cuda_check(b, "linear (quantize activations)");
        if (rc || (rc = w8a8_gemm(b, w, base, xs, nr, yd + r0 * ldy, ldy)) != 1) return rc;
    }
    if (n > main_rows) { /* the last 1-3 rows */
        int64_t nr = n - main_rows;
        quant_act(cx, xd + main_rows * tld(x), tld(x), 4, nr, in, tq, ts);
        int rc = iris_cuda_check(b, "linear (quantize activations)");
        if (rc || (rc = w8a8_gemm(b, w, tq, ts, 4, ty, out)) != 1) return rc;
        if (cudaMemcpy2DAsync(yd + main_rows * ldy, ldy * sizeof(bf16), ty, out * sizeof(bf16), out * sizeof(bf16), nr,
                              cudaMemcpyDeviceToDevice, cx->stream) != cudaSuccess)
            return iris_cuda_status(b, cudaGetLastError(), "linear (W8A8 tail rows)");
    }
    if (bias) {
        int64_t bl = (n * out + 255) / 256;
        k_add_bias<<<(unsigned)(bl > 65536 ? 65536 : bl), 256, 0, cx->stream>>>(yd, ldy, n, out, bias, bdt);
        int rc = iris_cuda_check(b, "linear (bias)");
        if (rc) return rc;
    }
    return 1;
}

/* Rows r0..r0+nr-1 of w as BF16 into dst [nr, in] (FP8: bf16(q · scale); else a conversion). */
static void dequant_rows(cuda_ctx *cx, const iris_tensor *w, int64_t sc_cols, int64_t r0, int64_t nr, bf16 *dst) {
    int64_t in = w->cols;
    int fp8 = w->dtype == IRIS_DT_F8_E4M3;
    int vec = fp8 && in % 16 == 0 && tld(w) % 16 == 0 && w->block[1] % 16 == 0 && is_aligned16(w->data);
    int64_t total = vec ? nr * in / 16 : nr * in, blocks = (total + 255) / 256;
    unsigned grid = (unsigned)(blocks > 65536 ? 65536 : blocks);
    if (vec)
        k_dequant_fp8_vec<<<grid, 256, 0, cx->stream>>>((const uint8_t *)w->data, tld(w), w->scale, sc_cols, w->block[0],
                                                        w->block[1], r0, nr, in, dst);
    else
        k_dequant<<<grid, 256, 0, cx->stream>>>(w->data, w->dtype, tld(w), w->scale, sc_cols, w->block[0], w->block[1],
                                                r0, nr, in, dst);
}

/* densify: w's BF16 copy carved from the arena, filled once (the numbers of the dequantizing path). */
int iris_cuda_densify(iris_backend *b, iris_tensor *w) {
    cuda_ctx *cx = cuda_of(b);
    if (w->dtype != IRIS_DT_F8_E4M3 || w->dense) return 0;
    if (!w->scale || w->block[0] <= 0 || w->block[1] <= 0)
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda densify: FP8 weight [%lld,%lld] without its block scales",
                              (long long)w->rows, (long long)w->cols);
    bf16 *d = (bf16 *)b->alloc(b, (size_t)(w->rows * w->cols) * sizeof(bf16));
    if (!d)
        return iris_cuda_fail(b, IRIS_ENOMEM, "cuda densify: no room for a BF16 copy of [%lld,%lld]", (long long)w->rows,
                              (long long)w->cols);
    dequant_rows(cx, w, (w->cols + w->block[1] - 1) / w->block[1], 0, w->rows, d);
    int rc = iris_cuda_check(b, "densify");
    if (!rc) w->dense = d;
    return rc;
}

/* ---- the op -------------------------------------------------------------------------------- */

/* An FP8 weight the tensor-core GEMV takes (cuda_gemv_mma.cu). */
static int mma_ok(const cuda_ctx *cx, const iris_tensor *w) {
    return cx->gemv_mma && w->dtype == IRIS_DT_F8_E4M3 && gemv8_mma_fits(w->cols, tld(w), w->block[0], w->block[1], w->data);
}

/* The decode path applies: few rows, BF16 activations of the right shapes, BF16 or FP8 weights
 * whose rows allow 16-byte loads (iris_cuda_linear checks the rest and reports what is wrong).
 * An FP8 weight with a BF16 copy (densify) takes the tensor-core GEMV only up to w8_max_rows: past
 * that cuBLASLt on the copy is faster (H100, iris bench, 1,024-token context, 2 rounds: 2B-FP8 24 and
 * 32 sequences 6,216-6,267 / 7,455-7,529 -> 6,627-6,635 / 8,343-8,382 tok/s, 4B-FP8 2,891-2,905 /
 * 3,542-3,548 -> 3,405-3,408 / 4,305-4,329; at 16 sequences even, at 8 the GEMV well ahead). */
static int gemv_ok(const cuda_ctx *cx, const iris_tensor *x, const iris_tensor *w, const iris_tensor *y) {
    int fp8 = w->dtype == IRIS_DT_F8_E4M3, epl = fp8 ? 16 : 8;
    int max_rows = !fp8 ? cx->bf16_max_rows : mma_ok(cx, w) && !w->dense ? cx->mma_max_rows : cx->w8_max_rows;
    return x->dtype == IRIS_DT_BF16 && y->dtype == IRIS_DT_BF16 && x->cols == w->cols && y->rows == x->rows &&
           y->cols == w->rows && x->rows > 0 && x->rows <= max_rows && (fp8 || w->dtype == IRIS_DT_BF16) &&
           w->cols % epl == 0 && tld(w) % epl == 0 && is_aligned16(w->data) && tld(x) % 8 == 0 &&
           is_aligned16(x->data) && (!fp8 || (w->scale && w->block[0] > 0 && w->block[1] % 16 == 0));
}

static void set_add(gemv_set *p, const iris_tensor *w, const void *bias, int bdt, iris_tensor *y) {
    int i = p->m++, fp8 = w->dtype == IRIS_DT_F8_E4M3;
    p->W[i] = w->data, p->scale[i] = w->scale, p->y[i] = (bf16 *)y->data;
    p->bias[i] = bias, p->bdt[i] = bdt;
    p->ldw[i] = tld(w), p->ldy[i] = tld(y), p->out[i] = w->rows;
    p->sc_cols[i] = fp8 ? (w->cols + w->block[1] - 1) / w->block[1] : 0;
    p->b0[i] = fp8 ? w->block[0] : 1, p->b1[i] = fp8 ? w->block[1] : 1;
}

/* The set's kernel over x's rows: FP8 with 64-column-aligned scale blocks, the tensor-core kernel
 * of cuda_gemv_mma.cu, 16 tokens a launch; else k_gemv_swiglu or k_gemv_n, 8 tokens a launch. */
static int launch_set(iris_backend *b, gemv_set p, const iris_tensor *x, int fp8, int swiglu) {
    cuda_ctx *cx = cuda_of(b);
    int64_t rows = 0;
    for (int i = 0; i < (swiglu ? 1 : p.m); i++) rows += p.out[i];
    unsigned blocks = (unsigned)((rows + GEMV_WARPS - 1) / GEMV_WARPS);
    gemv_set q = p;
    int mma = fp8 && cx->gemv_mma;
    for (int i = 0; i < p.m && mma; i++) mma = gemv8_mma_fits(x->cols, p.ldw[i], p.b0[i], p.b1[i], p.W[i]);
    int per = mma ? 16 : 8;
    for (int64_t t0 = 0; t0 < x->rows; t0 += per) {
        int n = (int)(x->rows - t0 < per ? x->rows - t0 : per);
        const bf16 *xp = (const bf16 *)x->data + t0 * tld(x);
        for (int i = 0; i < p.m; i++) q.y[i] = p.y[i] + t0 * p.ldy[i];
        if (mma) {
            gemv8_mma_launch(cx, q, xp, tld(x), n, x->cols, swiglu);
            continue;
        }
#define SET(F, T)                                                                                                      \
    do {                                                                                                               \
        launch(cx, swiglu ? k_gemv_swiglu<F, T> : k_gemv_n<F, T>, dim3(blocks), dim3(GEMV_WARPS * 32), 0, q, xp, tld(x), \
               n, (int64_t)x->cols);                                                                                   \
    } while (0)
#define SET_N(F)                                                                                                       \
    do {                                                                                                               \
        if (n == 1) SET(F, 1);                                                                                         \
        else if (n == 2) SET(F, 2);                                                                                    \
        else if (n <= 4) SET(F, 4);                                                                                    \
        else SET(F, 8);                                                                                                \
    } while (0)
        if (fp8) SET_N(1);
        else SET_N(0);
#undef SET_N
#undef SET
    }
    return iris_cuda_check(b, swiglu ? "linear_swiglu (gemv)" : "linear (gemv)");
}

/* ---- a weight group (q/k/v, gate/up) as one product --------------------------------------------
 * Placement (iris_backend_place_group) puts a group's weights and FP8 scales end to end, densify
 * its BF16 copies; the group is then one weight of Σ rows and its product, into the caller's joint
 * buffer (backend.h), one launch of fuller tiles (or fewer dequantized row chunks; under W8A8 one
 * quantization of x).  H200, the 2B decoder's prefill shapes at 2,144
 * rows: q, k and v 0.090 -> 0.062 ms, gate and up 0.180 -> 0.160 ms (BF16); FP8 block-scaled
 * 0.092 -> 0.049 and 0.128 -> 0.108 ms. */

/* ws[0..m-1] as one weight of Σ rows in *v (dense: their BF16 copies; else the stored weights,
 * BF16 or FP8 with their scales); 0 where they do not lie end to end. */
static int group_view(const iris_tensor *const *ws, int m, int dense, iris_tensor *v) {
    const iris_tensor *w0 = ws[0];
    int64_t rows = 0, sc_cols = w0->block[1] > 0 ? (w0->cols + w0->block[1] - 1) / w0->block[1] : 0;
    for (int i = 0; i < m; i++) {
        const iris_tensor *w = ws[i];
        if (w->cols != w0->cols || w->dtype != w0->dtype) return 0;
        if (dense) {
            if (!w->dense || (const bf16 *)w->dense != (const bf16 *)w0->dense + rows * w0->cols) return 0;
        } else if (w->dtype == IRIS_DT_BF16 || w->dtype == IRIS_DT_F8_E4M3) {
            size_t at = (size_t)(rows * tld(w0)) * iris_dtype_size(w->dtype);
            if (tld(w) != tld(w0) || (const char *)w->data != (const char *)w0->data + at) return 0;
            if (w->dtype == IRIS_DT_F8_E4M3 &&
                (!w->scale || w->block[0] != w0->block[0] || w->block[1] != w0->block[1] || w0->block[0] <= 0 ||
                 (i + 1 < m && w->rows % w0->block[0]) || w->scale != w0->scale + rows / w0->block[0] * sc_cols))
                return 0;
        } else {
            return 0;
        }
        rows += w->rows;
    }
    *v = *w0, v->rows = rows, v->dense = NULL;
    if (dense) v->data = w0->dense, v->dtype = IRIS_DT_BF16, v->ld = 0, v->scale = NULL;
    return 1;
}

/* The group's product into joint [x rows, Σ rows]: linear's path for the group as one weight (W8A8
 * where on, the BF16 copies when they too lie end to end, else dequantized row chunks).  1: done; 0:
 * not taken (nothing written); < 0: an error. */
static int group_product(iris_backend *b, const iris_tensor *x, int m, const iris_tensor *const *ws,
                         const iris_tensor *joint) {
    iris_tensor v, dv;
    if (!joint || joint->dtype != IRIS_DT_BF16 || tld(joint) != joint->cols || joint->rows != x->rows ||
        !group_view(ws, m, 0, &v) || v.rows != joint->cols)
        return 0;
    if (v.dtype == IRIS_DT_F8_E4M3 && group_view(ws, m, 1, &dv)) v.dense = dv.data;
    iris_tensor y = *joint;
    int rc = iris_cuda_linear(b, x, &v, NULL, &y);
    return rc ? rc : 1;
}

/* y: columns [at, at + y's cols) of the joint product (its data and ld; the shape is y's). */
static void joint_view(const iris_tensor *joint, int64_t at, iris_tensor *y) {
    y->data = (bf16 *)joint->data + at, y->ld = joint->cols;
}

/* linear_n: one launch for the q, k and v projections of a decode step; past the small batches the
 * group's one product into joint where the weights lie end to end; anything else (mixed dtypes, no
 * joint) through iris_cuda_linear one weight at a time. */
static int cu_linear_n(iris_backend *b, const iris_tensor *x, int m, const iris_tensor *const *ws,
                       iris_tensor *const *ys, const iris_tensor *joint) {
    cuda_ctx *cx = cuda_of(b);
    if (m >= 1 && ws[0]->dtype == IRIS_DT_I4) {
        int rc = iris_cuda_gemv_i4(b, x, m, ws, NULL, ys, 0);
        if (rc != 1) return rc;
    }
    int fused = m >= 1 && m <= 3;
    for (int i = 0; i < m && fused; i++)
        fused = gemv_ok(cx, x, ws[i], ys[i]) && ws[i]->dtype == ws[0]->dtype;
    if (!fused) {
        int rc = m >= 2 ? group_product(b, x, m, ws, joint) : 0;
        if (rc == 1) { /* the outputs: column views of the joint product */
            int64_t at = 0;
            for (int i = 0; i < m; i++) joint_view(joint, at, ys[i]), at += ws[i]->rows;
            return 0;
        }
        for (int i = 0; i < m && !rc; i++) rc = iris_cuda_linear(b, x, ws[i], NULL, ys[i]);
        return rc;
    }
    gemv_set p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < m; i++) set_add(&p, ws[i], NULL, -1, ys[i]);
    return launch_set(b, p, x, ws[0]->dtype == IRIS_DT_F8_E4M3, 0);
}

/* linear_swiglu: gate, up and silu·mul in one launch for a decode step; past the small batches the
 * pair's one product into joint and silu·mul in place; else the three ops. */
static int cu_linear_swiglu(iris_backend *b, const iris_tensor *x, const iris_tensor *wg, const iris_tensor *wu,
                            iris_tensor *g, iris_tensor *u, const iris_tensor *joint) {
    cuda_ctx *cx = cuda_of(b);
    if (wg->dtype == IRIS_DT_I4 && wu->dtype == IRIS_DT_I4) {
        const iris_tensor *ws[2] = {wg, wu};
        int rc = iris_cuda_gemv_i4(b, x, 2, ws, NULL, &g, 1);
        if (rc != 1) return rc;
    }
    if (!(gemv_ok(cx, x, wg, g) && gemv_ok(cx, x, wu, g) && wg->dtype == wu->dtype)) {
        const iris_tensor *ws[2] = {wg, wu};
        int rc = group_product(b, x, 2, ws, joint);
        if (rc == 1) { /* silu·mul in place over the gate columns; g is left their view */
            iris_tensor gv = *g, uv = *g;
            joint_view(joint, 0, &gv), joint_view(joint, wg->rows, &uv);
            rc = iris_cuda_silu_mul(b, &gv, &uv);
            if (!rc) *g = gv;
            return rc;
        }
        if (!rc) rc = iris_cuda_linear(b, x, wg, NULL, g);
        if (!rc) rc = iris_cuda_linear(b, x, wu, NULL, u);
        return rc ? rc : iris_cuda_silu_mul(b, g, u);
    }
    gemv_set p;
    memset(&p, 0, sizeof p);
    set_add(&p, wg, NULL, -1, g);
    set_add(&p, wu, NULL, -1, u); /* (its y is not written) */
    return launch_set(b, p, x, wg->dtype == IRIS_DT_F8_E4M3, 1);
}

/* Not called under IRIS_CUDA_FUSED=0, as the other fused ops (cuda_fused.cu). */
void iris_cuda_linear_fused_init(iris_backend *b) {
    b->linear_n = cu_linear_n;
    b->linear_swiglu = cu_linear_swiglu;
}

/* I4 weights: the tensor-core GEMV for decode-sized n (the per-row one where it does not take the
 * weight, or under iris_cuda_set_i4_ref), else dequantized row chunks through cuBLASLt (as FP8). */
static int linear_i4(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias,
                     iris_tensor *y) {
    cuda_ctx *cx = cuda_of(b);
    int64_t n = x->rows, in = w->cols, out = w->rows;
    const void *bp = bias ? bias->data : NULL;
    int bdt = bias ? bias->dtype : -1;
    int rc = iris_cuda_gemv_i4(b, x, 1, &w, bias, &y, 0);
    if (rc != 1) return rc;
    rc = iris_cuda_gemv_i4_ref(b, x, w, bp, bdt, y);
    if (rc != 1) return rc;
    int64_t chunk = (int64_t)cx->dq_elems / in;
    if (chunk < 1)
        return iris_cuda_fail(b, IRIS_ELIMIT, "cuda linear: rows of %lld do not fit the %zu-element dequantization scratch",
                              (long long)in, cx->dq_elems);
    for (int64_t r0 = 0; r0 < out; r0 += chunk) {
        int64_t nr = out - r0 < chunk ? out - r0 : chunk;
        iris_cuda_dequant_i4(cx, w, r0, nr, cx->dq);
        rc = iris_cuda_check(b, "linear (4-bit dequantize)");
        if (rc) return rc;
        const void *bc = bp ? (const char *)bp + r0 * (bdt == IRIS_DT_F32 ? 4 : 2) : NULL;
        rc = lt_matmul(b, cx->dq, in, (const bf16 *)x->data, tld(x), (bf16 *)y->data + r0, tld(y), nr, n, in, bc, bdt);
        if (rc) return rc;
    }
    return 0;
}

/* linear with its epilogue op in cuBLASLt's pass, for BF16 weights over more rows than the GEMVs
 * take (the vision encoder's MLP and residual updates); IRIS_EUNSUPPORTED, nothing done, else.
 * H100, 2B vision, one 1 MP image: gelu_tanh alone 0.55 ms, the two residual adds 0.35 ms. */
int iris_cuda_linear_epi(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias, int epi,
                         iris_tensor *y) {
    cuda_ctx *cx = cuda_of(b);
    if ((epi != IRIS_EPI_GELU_TANH && epi != IRIS_EPI_ADD) || x->dtype != IRIS_DT_BF16 || y->dtype != IRIS_DT_BF16 ||
        w->dtype != IRIS_DT_BF16 || x->cols != w->cols || y->rows != x->rows || y->cols != w->rows || x->rows <= 0 ||
        (bias && (bias->rows * bias->cols != w->rows || (bias->dtype != IRIS_DT_BF16 && bias->dtype != IRIS_DT_F32))) ||
        gemv_ok(cx, x, w, y))
        return IRIS_EUNSUPPORTED;
    return lt_matmul_epi(b, (const bf16 *)w->data, tld(w), (const bf16 *)x->data, tld(x), (bf16 *)y->data, tld(y),
                         w->rows, x->rows, w->cols, bias ? bias->data : NULL, bias ? bias->dtype : -1, epi);
}

int iris_cuda_linear(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias, iris_tensor *y) {
    cuda_ctx *cx = cuda_of(b);
    int64_t n = x->rows, in = w->cols, out = w->rows;
    if (x->dtype != IRIS_DT_BF16 || y->dtype != IRIS_DT_BF16)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda linear: activations must be BF16 (x %s, y %s)",
                              iris_dtype_name(x->dtype), iris_dtype_name(y->dtype));
    int fp8 = w->dtype == IRIS_DT_F8_E4M3;
    if (!fp8 && w->dtype != IRIS_DT_BF16 && w->dtype != IRIS_DT_F16 && w->dtype != IRIS_DT_F32 && w->dtype != IRIS_DT_I4)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda linear: weight dtype %s", iris_dtype_name(w->dtype));
    if (w->dtype == IRIS_DT_I4 && (!w->qscale || w->group <= 0 || w->group % 8 || in % w->group))
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda linear: 4-bit weight [%lld,%lld] without its group scales",
                              (long long)out, (long long)in);
    if (fp8 && (!w->scale || w->block[0] <= 0 || w->block[1] <= 0))
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda linear: FP8 weight [%lld,%lld] without its block scales",
                              (long long)out, (long long)in);
    if (x->cols != in || y->rows != n || y->cols != out)
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda linear: x [%lld,%lld] · W[%lld,%lld]ᵀ into y [%lld,%lld]", (long long)n,
                              (long long)x->cols, (long long)out, (long long)in, (long long)y->rows, (long long)y->cols);
    if (bias && bias->rows * bias->cols != out)
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda linear: bias of %lld for %lld outputs",
                              (long long)(bias->rows * bias->cols), (long long)out);
    if (bias && bias->dtype != IRIS_DT_BF16 && bias->dtype != IRIS_DT_F32)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda linear: bias dtype %s", iris_dtype_name(bias->dtype));
    if (n <= 0 || out <= 0) return 0;
    const void *bp = bias ? bias->data : NULL;
    int bdt = bias ? bias->dtype : -1;
    if (w->dtype == IRIS_DT_I4) return linear_i4(b, x, w, bias, y);

    if (gemv_ok(cx, x, w, y)) {
        gemv_set p;
        memset(&p, 0, sizeof p);
        set_add(&p, w, bp, bdt, y);
        return launch_set(b, p, x, fp8, 0);
    }

    if (w->dtype == IRIS_DT_BF16)
        return lt_matmul(b, (const bf16 *)w->data, tld(w), (const bf16 *)x->data, tld(x), (bf16 *)y->data, tld(y), out, n,
                         in, bp, bdt);

    if (fp8) {
        int rc = linear_w8a8(b, x, w, bp, bdt, y);
        if (rc) return rc < 0 ? rc : 0;
    }
    /* The weight's BF16 copy (densify): one product, nothing to dequantize. */
    if (fp8 && w->dense)
        return lt_matmul(b, (const bf16 *)w->dense, in, (const bf16 *)x->data, tld(x), (bf16 *)y->data, tld(y), out, n,
                         in, bp, bdt);
    /* Dequantize row chunks into the scratch, multiply each. */
    int64_t chunk = (int64_t)cx->dq_elems / in;
    if (fp8 && chunk > w->block[0]) chunk -= chunk % w->block[0];
    if (chunk < 1)
        return iris_cuda_fail(b, IRIS_ELIMIT, "cuda linear: rows of %lld do not fit the %zu-element dequantization scratch",
                              (long long)in, cx->dq_elems);
    int64_t sc_cols = fp8 ? (in + w->block[1] - 1) / w->block[1] : 0;
    for (int64_t r0 = 0; r0 < out; r0 += chunk) {
        int64_t nr = out - r0 < chunk ? out - r0 : chunk;
        dequant_rows(cx, w, sc_cols, r0, nr, cx->dq);
        int rc = iris_cuda_check(b, "linear (dequantize)");
        if (rc) return rc;
        const void *bc = bp ? (const char *)bp + r0 * (bdt == IRIS_DT_F32 ? 4 : 2) : NULL;
        rc = lt_matmul(b, cx->dq, in, (const bf16 *)x->data, tld(x), (bf16 *)y->data + r0, tld(y), nr, n, in, bc, bdt);
        if (rc) return rc;
    }
    return 0;
}
