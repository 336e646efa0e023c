/* cuda_gemv_mma.cu: the decode linears (up to 16 tokens a launch) with block-scaled FP8 weights
 * on the tensor cores — W8A16 through mma.sync m16n8k16 (bf16 operands, fp32 accumulation).
 *
 * Why: the one-warp-a-row kernel of cuda_linear.cu spends a lane's time on a serial chain of
 * 16 fp32 FMAs per 16 weights and on re-reading and widening x for every row; at decode sizes a
 * launch is one round trip to memory plus that chain, so the chain is exposed.  Here a warp
 * turns 32 weights into bf16 and hands them to one tensor-core instruction per 256
 * multiply-adds; x is read once per 64 columns a warp.
 *
 * Thread mapping: a CTA owns 16 output rows (one m16 tile; rows past `out` are clamped on load
 * and not stored) and KW warps (16, 8 or 4: launch_kw) split its columns (split-K): warp w takes
 * the 64-column super-steps w, w + KW, ..., GM_UNR of them with all their loads in flight before
 * the first is used (the first round issued before pdl_wait: cuda_internal.cuh).  In a super-step lane (g = lane/4, t = lane%4) loads 16 weight bytes of row g and of
 * row g + 8 at columns [64 s + 16 t, +16) and the same 16 columns of token g's x.  The mma's k
 * index is permuted so that these registers are the fragments as they are: for the j-th of four
 * mmas, k = 2t, 2t+1 → columns 16 t + 4 j + {0, 1} and k = 2t + 8, 2t + 9 → 16 t + 4 j + {2, 3}
 * (a dot product does not care about the order of its terms; A and B use the same permutation).
 * Tokens are the mma's n: one or two tiles of 8 (up to 16 tokens a launch); rows of x past n are
 * a copy of the last one, never stored.  The KW partial tiles are summed through shared memory in
 * warp order, then bias / SwiGLU and one rounding to bf16.
 *
 * Numerics: each weight is dequantized exactly as transformers does, bf16(q · scale_inv)
 * (QWEN3VL.md §2), products and sums in fp32 (the tensor core's accumulation; the order of the
 * sum differs from the FMA kernel's, as it does between any two GEMV schedules).
 * Memory-bound: the weight bytes are read once; time floor bytes(W) / bandwidth. */
#include "cuda_internal.cuh"

#define GM_UNR 4    /* super-steps a warp has in flight */
#define GM_MAXW 16  /* warps a CTA: 512 threads at <= 128 registers fill an SM's register file */

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

/* SWIGLU: p.W[0] gate, p.W[1] up, y = silu(bf16(gate)) ⊙ bf16(up) into p.y[0] (cuda_linear.cu's
 * k_gemv_swiglu roundings); else the CTAs walk p's matrices in order. */
template <int SWIGLU, int NT>
__global__ void __launch_bounds__(GM_MAXW * 32) k_gemv8_mma(const gemv_set p, const bf16 *__restrict__ x, int64_t ldx,
                                                            int n, int64_t in) {
    extern __shared__ float red[]; /* [KW][1 + SWIGLU][NT * 128] */
    const int KW = blockDim.x / 32, NM = 1 + SWIGLU, TW = NT * 128; /* TW: one matrix's tile, [row][token] */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int64_t tile = blockIdx.x;
    int i = 0;
    if (!SWIGLU)
        while (i < p.m - 1 && tile >= (p.out[i] + 15) / 16) tile -= (p.out[i++] + 15) / 16;
    const int j = SWIGLU ? 1 : i; /* the second matrix (up) */
    const int64_t r0 = tile * 16, out = p.out[i], ldw = p.ldw[i], ldw1 = p.ldw[j];
    const int64_t ra = min(r0 + g, out - 1), rb = min(r0 + g + 8, out - 1);
    const uint8_t *W0 = (const uint8_t *)p.W[i], *W1 = (const uint8_t *)p.W[j];
    const float *sc0 = p.scale[i] + (r0 / p.b0[i]) * p.sc_cols[i];
    const float *sc1 = p.scale[j] + (r0 / p.b0[j]) * p.sc_cols[j];
    const int b1 = p.b1[i];
    const bf16 *xr[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) xr[nt] = x + (int64_t)min(g + 8 * nt, n - 1) * ldx;
    const int64_t steps = in / 64;

    float c0[NT][4], c1[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int k = 0; k < 4; k++) c0[nt][k] = c1[nt][k] = 0;
    /* A round's weight loads; the first is issued before pdl_wait (the weights do not depend on the
     * kernel before this one, so their fetch overlaps its tail: cuda_internal.cuh). */
    uint4 wa[GM_UNR], wb[GM_UNR], ua[GM_UNR], ub[GM_UNR];
    auto load_round = [&](int64_t s0) {
#pragma unroll
        for (int u = 0; u < GM_UNR; u++) {
            int64_t st = s0 + (int64_t)u * KW, c = st * 64 + t * 16;
            if (st < steps) {
                wa[u] = __ldg((const uint4 *)(W0 + ra * ldw + c));
                wb[u] = __ldg((const uint4 *)(W0 + rb * ldw + c));
                if (SWIGLU) {
                    ua[u] = __ldg((const uint4 *)(W1 + ra * ldw1 + c));
                    ub[u] = __ldg((const uint4 *)(W1 + rb * ldw1 + c));
                }
            }
        }
    };
    pdl_launch_next();
    load_round(warp);
    pdl_wait();
    for (int64_t s0 = warp; s0 < steps; s0 += (int64_t)KW * GM_UNR) {
        if (s0 != warp) load_round(s0);
#pragma unroll
        for (int u = 0; u < GM_UNR; u++) {
            int64_t st = s0 + (int64_t)u * KW, c = st * 64 + t * 16;
            if (st >= steps) break;
            uint32_t X[NT][8];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                uint4 x0 = *(const uint4 *)(xr[nt] + c), x1 = *(const uint4 *)(xr[nt] + c + 8);
                X[nt][0] = x0.x, X[nt][1] = x0.y, X[nt][2] = x0.z, X[nt][3] = x0.w;
                X[nt][4] = x1.x, X[nt][5] = x1.y, X[nt][6] = x1.z, X[nt][7] = x1.w;
            }
            step_mma<NT>(c0, wa[u], wb[u], sc0[st * 64 / b1], X);
            if (SWIGLU) step_mma<NT>(c1, ua[u], ub[u], sc1[st * 64 / p.b1[j]], X);
        }
    }

    /* c[nt][0], c[nt][1]: row g, tokens 8 nt + 2t, + 1; c[nt][2], c[nt][3]: row g + 8.  Stored as
     * [row][token] (8 NT tokens a row). */
    float *rw = red + (int64_t)warp * NM * TW;
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const float *c = m ? c1[nt] : c0[nt];
            int tk = 8 * nt + 2 * t;
            rw[m * TW + g * 8 * NT + tk] = c[0];
            rw[m * TW + g * 8 * NT + tk + 1] = c[1];
            rw[m * TW + (g + 8) * 8 * NT + tk] = c[2];
            rw[m * TW + (g + 8) * 8 * NT + tk + 1] = c[3];
        }
    __syncthreads();
    for (int e = threadIdx.x; e < TW; e += blockDim.x) {
        int row = e & 15, tok = e >> 4; /* consecutive threads, consecutive rows of one token */
        int64_t r = r0 + row;
        if (tok >= n || r >= out) continue;
        float s0v = 0, s1v = 0;
        for (int w = 0; w < KW; w++) {
            s0v += red[(int64_t)w * NM * TW + row * 8 * NT + tok];
            if (SWIGLU) s1v += red[(int64_t)w * NM * TW + TW + row * 8 * NT + tok];
        }
        bf16 *y = p.y[i] + (int64_t)tok * p.ldy[i] + r;
        if (SWIGLU) {
            float gg = round_bf16(s0v), uu = round_bf16(s1v);
            *y = f2bf(round_bf16(gg / (1.0f + expf(-gg))) * uu);
        } else {
            *y = f2bf(s0v + (p.bias[i] ? load_vec(p.bias[i], p.bdt[i], r) : 0.0f));
        }
    }
}

template <int SWIGLU, int NT>
static size_t red_bytes(int kw) { return (size_t)kw * (1 + SWIGLU) * NT * 128 * sizeof(float); }

/* The split: 16 warps a CTA when the columns fill them (>= 64 super-steps) and the tiles fit one
 * wave of such CTAs (one an SM: registers bound it); else 8 (4 for narrow rows).  Measured on an
 * H100 (bench_cuda, fused decode, IRIS_CUDA_GEMV_KW forcing each split): 4B-FP8 batch 1 with 4, 5,
 * 8, 10, 16 warps everywhere: 227, 242, 246, 217, 225 tok/s (16 loses on its 160-tile o_proj and
 * down_proj: two waves); 2B-FP8: 419, 430, 446, 416, 440, where 16 wins on down_proj (96
 * super-steps, 128 tiles: 6.6 vs 7.5 us). */
template <int SWIGLU, int NT>
static void launch_kw(const cuda_ctx *cx, const gemv_set &p, const bf16 *x, int64_t ldx, int n, int64_t in) {
    int64_t steps = in / 64, tiles = 0;
    for (int i = 0; i < (SWIGLU ? 1 : p.m); i++) tiles += (p.out[i] + 15) / 16;
    int kw = steps >= 64 && tiles <= cx->prop.multiProcessorCount ? 16 : steps >= 8 ? 8 : 4;
    if (cx->gemv_kw) kw = cx->gemv_kw;
    launch(cx, k_gemv8_mma<SWIGLU, NT>, dim3((unsigned)tiles), dim3(kw * 32), red_bytes<SWIGLU, NT>(kw), p, x, ldx, n, in);
}

/* n <= 16 tokens of x (ld ldx, 16-byte aligned rows) through the set (each weight gemv8_mma_fits): one or two
 * n-tiles of 8 tokens. */
void gemv8_mma_launch(const cuda_ctx *cx, const gemv_set &p, const bf16 *x, int64_t ldx, int n, int64_t in,
                      int swiglu) {
    if (swiglu) {
        if (n <= 8) launch_kw<1, 1>(cx, p, x, ldx, n, in);
        else launch_kw<1, 2>(cx, p, x, ldx, n, in);
    } else {
        if (n <= 8) launch_kw<0, 1>(cx, p, x, ldx, n, in);
        else launch_kw<0, 2>(cx, p, x, ldx, n, in);
    }
}
