/* cuda_mma.cuh: what the tensor-core decode GEMVs share (cuda_gemv_mma.cu with FP8 weights,
 * cuda_gemv_i4.cu with 4-bit ones).  Both give a CTA 16 output rows (one m16 tile) of one matrix of
 * a set (gemv_set, gemv4_set: the q/k/v matrices one after another, or gate and up together) and
 * split its columns over KW warps (gemv_mma_begin: a lane's x rows, zeroed accumulators); each
 * warp ends with a partial tile of every matrix, c[nt][0..3] in mma.sync's accumulator layout
 * (lane g = lane/4, t = lane%4: row g, tokens 8 nt + 2t, + 1; row g + 8, the same tokens).
 * gemv_mma_tile finds the CTA's matrix and tile; gemv_mma_finish
 * sums the KW partial tiles through shared memory in warp order and stores each output once: bias
 * added before the one rounding to bf16, or SwiGLU (silu(bf16(gate)) ⊙ bf16(up), the roundings
 * of linear, linear, silu_mul).  gemv_mma_slots: the occupancy their launch rules read, cached per
 * kernel; ldg_stream: a weight's 16 bytes read past L1 (each is read once; x stays in L1).
 * Included by those two files only. */
#ifndef IRIS_CUDA_MMA_CUH
#define IRIS_CUDA_MMA_CUH

#include "cuda_internal.cuh"

/* 16 bytes of a weight, read once: not kept in L1, where x stays for the CTAs after. */
static __device__ __forceinline__ uint4 ldg_stream(const uint4 *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

/* The CTA's matrix i of set p (SWIGLU: 0, gate and up share the tile) and its 16-row tile there. */
template <int SWIGLU, typename P> static __device__ __forceinline__ int64_t gemv_mma_tile(const P &p, int &i) {
    int64_t tile = blockIdx.x;
    i = 0;
    if (!SWIGLU)
        while (i < p.m - 1 && tile >= (p.out[i] + 15) / 16) tile -= (p.out[i++] + 15) / 16;
    return tile;
}

/* A lane's x rows (token g + 8 nt, the last token's again past n) and zeroed accumulators. */
template <int NT>
static __device__ __forceinline__ void gemv_mma_begin(const bf16 *x, int64_t ldx, int n, int g, const bf16 **xr,
                                                      float (*c0)[4], float (*c1)[4]) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        xr[nt] = x + (int64_t)min(g + 8 * nt, n - 1) * ldx;
#pragma unroll
        for (int k = 0; k < 4; k++) c0[nt][k] = c1[nt][k] = 0;
    }
}

/* The warps' partial tiles c0 (and c1, up, for SWIGLU) into red ([KW][1 + SWIGLU][NT * 128] floats,
 * [row][token] with 8 NT tokens a row), then rows r0.. of matrix i (out rows, n tokens) into p.y[i]. */
template <int SWIGLU, int NT, typename P>
static __device__ __forceinline__ void gemv_mma_finish(const P &p, int i, float *red, float (*c0)[4], float (*c1)[4],
                                                       int64_t r0, int64_t out, int n) {
    const int KW = blockDim.x / 32, NM = 1 + SWIGLU, TW = NT * 128;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float *rw = red + (int64_t)warp * NM * TW;
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const float *c = m ? c1[nt] : c0[nt];
            const int tk = 8 * nt + 2 * t;
            rw[m * TW + g * 8 * NT + tk] = c[0];
            rw[m * TW + g * 8 * NT + tk + 1] = c[1];
            rw[m * TW + (g + 8) * 8 * NT + tk] = c[2];
            rw[m * TW + (g + 8) * 8 * NT + tk + 1] = c[3];
        }
    __syncthreads();
    for (int e = threadIdx.x; e < TW; e += blockDim.x) {
        const int row = e & 15, tok = e >> 4; /* consecutive threads, consecutive rows of one token */
        const int64_t r = r0 + row;
        if (tok >= n || r >= out) continue;
        float v0 = 0, v1 = 0;
        for (int w = 0; w < KW; w++) {
            v0 += red[(int64_t)w * NM * TW + row * 8 * NT + tok];
            if (SWIGLU) v1 += red[(int64_t)w * NM * TW + TW + row * 8 * NT + tok];
        }
        bf16 *y = p.y[i] + (int64_t)tok * p.ldy[i] + r;
        if (SWIGLU) {
            const float gg = round_bf16(v0), uu = round_bf16(v1);
            *y = f2bf(round_bf16(gg / (1.0f + expf(-gg))) * uu);
        } else {
            *y = f2bf(v0 + (p.bias[i] ? load_vec(p.bias[i], p.bdt[i], r) : 0.0f));
        }
    }
}

/* CTAs of kw warps with `smem` bytes of dynamic shared memory that an SM holds at once for kern (the
 * occupancy calculator's; 0 if the query fails), remembered per (kernel, kw, smem) for the last 16
 * asked (one engine thread owns the GPU: no lock). */
template <typename K> static int gemv_mma_slots(K kern, int kw, size_t smem) {
    static struct { const void *fn; int kw; size_t smem; int blocks; } seen[16];
    static int next;
    for (int i = 0; i < 16; i++)
        if (seen[i].fn == (const void *)kern && seen[i].kw == kw && seen[i].smem == smem) return seen[i].blocks;
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kern, kw * 32, smem) != cudaSuccess) {
        cudaGetLastError();
        blocks = 0;
    }
    seen[next].fn = (const void *)kern, seen[next].kw = kw, seen[next].smem = smem, seen[next].blocks = blocks;
    next = (next + 1) % 16;
    return blocks;
}

#endif
