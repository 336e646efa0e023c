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
 * the first is used (the first round issued before pdl_wait: cuda_internal.cuh), read past L1
 * (cuda_mma.cuh ldg_stream: x stays there; H100, iris bench at a 1,024-token context, batch 8:
 * 8B-FP8 1,378-1,382 -> 1,436-1,439 tok/s, 4B 1,962-1,973 -> 1,995-2,026, 2B 4,225-4,257 ->
 * 4,258-4,303; batch 1 and 64 the same).  In a super-step lane (g = lane/4, t = lane%4) loads 16 weight bytes of row g and of
 * row g + 8 at columns [64 s + 16 t, +16) and the same 16 columns of token g's x.  The mma's k
 * index is permuted so that these registers are the fragments as they are: for the j-th of four
 * mmas, k = 2t, 2t+1 → columns 16 t + 4 j + {0, 1} and k = 2t + 8, 2t + 9 → 16 t + 4 j + {2, 3}
 * (a dot product does not care about the order of its terms; A and B use the same permutation).
 * Tokens are the mma's n: one or two tiles of 8 (up to 16 tokens a launch); rows of x past n are
 * a copy of the last one, never stored.  The KW partial tiles are summed through shared memory in
 * warp order, then bias / SwiGLU and one rounding to bf16 (cuda_mma.cuh, shared with cuda_gemv_i4.cu).
 * Where that would take more than one wave of CTAs (2B's gate/up: 384 tiles, two CTAs an SM by
 * registers), a CTA instead copies its whole weight tile into shared memory before pdl_wait
 * (cp.async; no registers held, so three fit an SM) and reads the same 16-byte pieces from there:
 * one wave, every weight in flight early (launch_kw says when; the same products in the same order).
 *
 * Numerics: each weight is dequantized exactly as transformers does, bf16(q · scale_inv)
 * (QWEN3VL.md §2), products and sums in fp32 (the tensor core's accumulation; the order of the
 * sum differs from the FMA kernel's, as it does between any two GEMV schedules).
 * Memory-bound: the weight bytes are read once; time floor bytes(W) / bandwidth. */
#include "cuda_mma.cuh"

#define GM_UNR 4    /* super-steps a warp has in flight */
#define GM_MAXW 16  /* warps a CTA: 512 threads at <= 128 registers fill an SM's register file */
#define GM_PAD 64   /* bytes after each row of a shared-memory weight tile: rows g and g + 1 of a load
                       fall in different banks (a row is a multiple of 64 bytes) */


/* SWIGLU: p.W[0] gate, p.W[1] up, y = silu(bf16(gate)) ⊙ bf16(up) into p.y[0] (cuda_linear.cu's
 * k_gemv_swiglu roundings); else the CTAs walk p's matrices in order.
 * SMEM: the CTA's whole weight tile (its 16 rows of each matrix) is copied into shared memory before
 * pdl_wait (cp.async, no registers held), [NM][16][in + GM_PAD] bytes, instead of a round of register
 * loads: every CTA of a single wave has all its weights in flight while the kernel before it runs.
 * The products and their order are the register path's. */
template <int SWIGLU, int NT, int SMEM>
__global__ void __launch_bounds__(GM_MAXW * 32) k_gemv8_mma(const gemv_set p, const bf16 *__restrict__ x, int64_t ldx,
                                                            int n, int64_t in) {
    extern __shared__ float red[]; /* [KW][1 + SWIGLU][NT * 128]; SMEM: the weight tile, which red then reuses */
    const int KW = blockDim.x / 32, NM = 1 + SWIGLU;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int i;
    const int64_t tile = gemv_mma_tile<SWIGLU>(p, i);
    const int j = SWIGLU ? 1 : i; /* the second matrix (up) */
    const int64_t r0 = tile * 16, out = p.out[i], ldw = p.ldw[i], ldw1 = p.ldw[j];
    const int64_t ra = min(r0 + g, out - 1), rb = min(r0 + g + 8, out - 1);
    const uint8_t *W0 = (const uint8_t *)p.W[i], *W1 = (const uint8_t *)p.W[j];
    const float *sc0 = p.scale[i] + (r0 / p.b0[i]) * p.sc_cols[i];
    const float *sc1 = p.scale[j] + (r0 / p.b0[j]) * p.sc_cols[j];
    const int b1 = p.b1[i];
    const int64_t steps = in / 64;
    const bf16 *xr[NT];
    float c0[NT][4], c1[NT][4];
    gemv_mma_begin<NT>(x, ldx, n, g, xr, c0, c1);
    /* A round's weight loads; the first is issued before pdl_wait (the weights do not depend on the
     * kernel before this one, so their fetch overlaps its tail: cuda_internal.cuh). */
    uint4 wa[GM_UNR], wb[GM_UNR], ua[GM_UNR], ub[GM_UNR];
    auto load_round = [&](int64_t s0) {
#pragma unroll
        for (int u = 0; u < GM_UNR; u++) {
            int64_t st = s0 + (int64_t)u * KW, c = st * 64 + t * 16;
            if (st < steps) {
                wa[u] = ldg_stream((const uint4 *)(W0 + ra * ldw + c));
                wb[u] = ldg_stream((const uint4 *)(W0 + rb * ldw + c));
                if (SWIGLU) {
                    ua[u] = ldg_stream((const uint4 *)(W1 + ra * ldw1 + c));
                    ub[u] = ldg_stream((const uint4 *)(W1 + rb * ldw1 + c));
                }
            }
        }
    };
    pdl_launch_next();
    const int64_t lds = in + GM_PAD;
    const uint8_t *ws = (const uint8_t *)red;
    if (SMEM) {
        const int64_t units = in / 16; /* 16-byte pieces a row */
        for (int64_t q = threadIdx.x; q < NM * 16 * units; q += blockDim.x) {
            int64_t rr = q / units, c = (q - rr * units) * 16; /* rr: matrix * 16 + row of the tile */
            int64_t row = min(r0 + rr % 16, out - 1);
            const uint8_t *src = rr >= 16 ? W1 + row * ldw1 + c : W0 + row * ldw + c;
            cp_async16((uint8_t *)red + rr * lds + c, src);
        }
    } else {
        load_round(warp);
    }
    pdl_wait();
    if (SMEM) {
        cp_async_wait_all();
        __syncthreads();
    }
    /* the x words of super-step st (columns c) for the NT token groups */
    auto x_words = [&](int64_t c, uint32_t (*X)[8]) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            uint4 x0 = *(const uint4 *)(xr[nt] + c), x1 = *(const uint4 *)(xr[nt] + c + 8);
            X[nt][0] = x0.x, X[nt][1] = x0.y, X[nt][2] = x0.z, X[nt][3] = x0.w;
            X[nt][4] = x1.x, X[nt][5] = x1.y, X[nt][6] = x1.z, X[nt][7] = x1.w;
        }
    };
    if (SMEM) /* one super-step at a time from shared memory, in the register path's order */
        for (int64_t st = warp; st < steps; st += KW) {
            int64_t c = st * 64 + t * 16;
            uint32_t X[NT][8];
            x_words(c, X);
            step_mma<NT>(c0, *(const uint4 *)(ws + g * lds + c), *(const uint4 *)(ws + (g + 8) * lds + c),
                         sc0[st * 64 / b1], X);
            if (SWIGLU)
                step_mma<NT>(c1, *(const uint4 *)(ws + (16 + g) * lds + c), *(const uint4 *)(ws + (24 + g) * lds + c),
                             sc1[st * 64 / p.b1[j]], X);
        }
    for (int64_t s0 = warp; !SMEM && s0 < steps; s0 += (int64_t)KW * GM_UNR) {
        if (s0 != warp) load_round(s0);
#pragma unroll
        for (int u = 0; u < GM_UNR; u++) {
            int64_t st = s0 + (int64_t)u * KW, c = st * 64 + t * 16;
            if (st >= steps) break;
            uint32_t X[NT][8];
            x_words(c, X);
            step_mma<NT>(c0, wa[u], wb[u], sc0[st * 64 / b1], X);
            if (SWIGLU) step_mma<NT>(c1, ua[u], ub[u], sc1[st * 64 / p.b1[j]], X);
        }
    }

    if (SMEM) __syncthreads(); /* every warp is done with the weight tile that red overwrites */
    gemv_mma_finish<SWIGLU, NT>(p, i, red, c0, c1, r0, out, n);
}

template <int SWIGLU, int NT>
static size_t red_bytes(int kw) { return (size_t)kw * (1 + SWIGLU) * NT * 128 * sizeof(float); }

/* The split: 16 warps a CTA when the columns fill them (>= 64 super-steps) and the tiles fit one
 * wave of such CTAs (one an SM: registers bound it); else 8 (4 for narrow rows).  Measured on an
 * H100 (bench_cuda, fused decode, each split forced): 4B-FP8 batch 1 with 4, 5,
 * 8, 10, 16 warps everywhere: 227, 242, 246, 217, 225 tok/s (16 loses on its 160-tile o_proj and
 * down_proj: two waves); 2B-FP8: 419, 430, 446, 416, 440, where 16 wins on down_proj (96
 * super-steps, 128 tiles: 6.6 vs 7.5 us). */
template <int SWIGLU, int NT>
static void launch_kw(const cuda_ctx *cx, const gemv_set &p, const bf16 *x, int64_t ldx, int n, int64_t in) {
    int64_t steps = in / 64, tiles = 0;
    for (int i = 0; i < (SWIGLU ? 1 : p.m); i++) tiles += (p.out[i] + 15) / 16;
    int kw = steps >= 64 && tiles <= cx->prop.multiProcessorCount ? 16 : steps >= 8 ? 8 : 4;
    /* The weight tile in shared memory when the register path would take more than one wave and
     * this one does not, for up to 2 tokens.  H100, iris bench at a 1,024-token context, shared-memory
     * tiles (for up to 4 tokens) vs registers, two runs each: 2B-FP8 batch 1
     * 603, 605 vs 584, 567 tok/s (gate/up: 384 tiles, 2 CTAs an SM by registers, 3 by shared memory;
     * 11.7 -> ~8 us of a layer's critical path), batch 2 1,178, 1,179 vs 1,153, 1,154, batch 4 2,166,
     * 2,165 vs 2,185, 2,188; 4B-FP8 batch 1 299, 296 vs 284, 283 (its q/k/v, 384 tiles).  Launches
     * that were one wave already lose a little with it (a CTA waits for its whole tile before the
     * first product, where a warp of the register path starts on its own loads; docs/performance.md). */
    size_t tile_bytes = (size_t)(1 + SWIGLU) * 16 * (size_t)(in + GM_PAD), red = red_bytes<SWIGLU, NT>(kw);
    size_t smem = tile_bytes > red ? tile_bytes : red;
    if (cx->gemv_smem && n <= 2 && smem <= cx->prop.sharedMemPerBlockOptin &&
        gemv_mma_slots(k_gemv8_mma<SWIGLU, NT, 0>, kw, red) * cx->prop.multiProcessorCount < tiles) {
        static size_t allowed = 48 << 10; /* dynamic shared memory past 48 KB is asked for once */
        if (smem > allowed && cudaFuncSetAttribute(k_gemv8_mma<SWIGLU, NT, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   (int)smem) == cudaSuccess)
            allowed = smem;
        if (smem <= allowed && gemv_mma_slots(k_gemv8_mma<SWIGLU, NT, 1>, kw, smem) * cx->prop.multiProcessorCount >= tiles) {
            launch(cx, k_gemv8_mma<SWIGLU, NT, 1>, dim3((unsigned)tiles), dim3(kw * 32), smem, p, x, ldx, n, in);
            return;
        }
    }
    launch(cx, k_gemv8_mma<SWIGLU, NT, 0>, dim3((unsigned)tiles), dim3(kw * 32), red, p, x, ldx, n, in);
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
