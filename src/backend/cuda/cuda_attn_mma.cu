/* cuda_attn_mma.cu: flash attention with the scores, probabilities and the
 * output in registers (mma.sync m16n8k16, bf16 operands, fp32 accumulation;
 * sm_80 and newer) — the default flash kernel; cuda_attn_flash.cu's WMMA
 * kernel is the simpler one it is checked and timed against.
 *
 * Thread mapping: a CTA of 4 warps owns 64 consecutive query rows of one
 * query head; each warp 16 rows, held as mma A fragments for the whole run.
 * Per tile of 64 keys the CTA stages K [64, HD] and Vᵀ [HD, 64] in shared
 * memory; each warp computes S = Q·Kᵀ (16 x 64, fp32 in registers: lane
 * (g = lane/4, t = lane%4) holds rows g and g+8, columns 2t, 2t+1 of every
 * 8-column tile), updates the running max and sum (max reduced over the 4
 * lanes of a row; the sum stays per lane until the end), turns S into P in
 * bf16 directly in the A-fragment layout (no shared-memory round trip) and
 * accumulates O += P·V in registers.  Compute-bound for long segments.
 * Row selection for the paged case is cuda_attn.cuh's flash_tile_ok.  An E4M3
 * cache (kv8) is widened to bf16 (exactly) as the tiles are staged. */
#include "cuda_attn.cuh"

#define MW 4
#define MQ (16 * MW)
#define MK 64

static __device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

template <int HD, int PAGED, typename KT>
__global__ void __launch_bounds__(MW * 32) k_flash_mma(iris_flash_args a) {
    constexpr int LK = HD + 8, LV = MK + 8;
    __shared__ __align__(16) bf16 Ks[MK * LK];
    __shared__ __align__(16) bf16 Vt[HD * LV];
    __shared__ int kmax_s;
    int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int r0 = blockIdx.x * MQ, h = blockIdx.y, kvh = h / a.g;
    int rend = min(r0 + MQ, a.n_rows);
    int seq = 0;
    if (PAGED) {
        if (!flash_tile_ok(a.row_seq, a.n_rows, r0, MQ)) return;
        seq = a.row_seq[r0];
    }
    int row0 = r0 + warp * 16 + g, row1 = row0 + 8;
    int lim0 = row0 < rend ? (PAGED ? a.row_ctx[row0] : a.n_keys) : 0;
    int lim1 = row1 < rend ? (PAGED ? a.row_ctx[row1] : a.n_keys) : 0;
    int warp_lim = max(lim0, lim1);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) warp_lim = max(warp_lim, __shfl_xor_sync(0xffffffffu, warp_lim, o));
    if (threadIdx.x == 0) kmax_s = 0;
    __syncthreads();
    if (lane == 0) atomicMax(&kmax_s, warp_lim);

    /* Q as A fragments: qa[kc] covers columns [16 kc, 16 kc + 16). */
    uint32_t qa[HD / 16][4];
    {
        const bf16 *q0 = a.q + (int64_t)row0 * a.ldq + (int64_t)h * HD, *q1 = a.q + (int64_t)row1 * a.ldq + (int64_t)h * HD;
#pragma unroll
        for (int kc = 0; kc < HD / 16; kc++) {
            int c = kc * 16 + 2 * t;
            qa[kc][0] = row0 < rend ? *(const uint32_t *)(q0 + c) : 0;
            qa[kc][1] = row1 < rend ? *(const uint32_t *)(q1 + c) : 0;
            qa[kc][2] = row0 < rend ? *(const uint32_t *)(q0 + c + 8) : 0;
            qa[kc][3] = row1 < rend ? *(const uint32_t *)(q1 + c + 8) : 0;
        }
    }
    float o[HD / 8][4];
#pragma unroll
    for (int nd = 0; nd < HD / 8; nd++) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0, l1 = 0;
    __syncthreads();
    int n_keys = kmax_s;

    for (int j0 = 0; j0 < n_keys; j0 += MK) {
        __syncthreads(); /* the previous tile is no longer read */
        for (int i = threadIdx.x; i < MK * HD / 8; i += MW * 32) {
            int j = i / (HD / 8), c = (i % (HD / 8)) * 8;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
            if (j0 + j < n_keys) {
                int64_t row;
                if (PAGED) {
                    int jj = j0 + j;
                    row = (int64_t)a.block_tables[(int64_t)seq * a.max_blocks + jj / IRIS_KV_BLOCK] * IRIS_KV_BLOCK +
                          jj % IRIS_KV_BLOCK;
                } else {
                    row = j0 + j;
                }
                kv = kv_load8_bf16((const KT *)(const void *)a.k + row * a.ldk + (int64_t)kvh * HD + c);
                vv = kv_load8_bf16((const KT *)(const void *)a.v + row * a.ldk + (int64_t)kvh * HD + c);
            }
            *(uint4 *)(Ks + j * LK + c) = kv;
            const bf16 *ve = (const bf16 *)&vv;
#pragma unroll
            for (int e = 0; e < 8; e++) Vt[(c + e) * LV + j] = ve[e];
        }
        __syncthreads();
        if (j0 >= warp_lim) continue;

        float s[MK / 8][4];
#pragma unroll
        for (int nt = 0; nt < MK / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0;
#pragma unroll
        for (int kc = 0; kc < HD / 16; kc++)
#pragma unroll
            for (int nt = 0; nt < MK / 8; nt++) {
                const bf16 *kp = Ks + (nt * 8 + g) * LK + kc * 16 + 2 * t;
                mma16816(s[nt], qa[kc], *(const uint32_t *)kp, *(const uint32_t *)(kp + 8));
            }
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < MK / 8; nt++) {
            int j = j0 + nt * 8 + 2 * t;
            s[nt][0] = j < lim0 ? s[nt][0] * a.scale_log2 : -INFINITY;
            s[nt][1] = j + 1 < lim0 ? s[nt][1] * a.scale_log2 : -INFINITY;
            s[nt][2] = j < lim1 ? s[nt][2] * a.scale_log2 : -INFINITY;
            s[nt][3] = j + 1 < lim1 ? s[nt][3] * a.scale_log2 : -INFINITY;
            mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
            mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        float c0 = mn0 == -INFINITY ? 1.0f : exp2f(m0 - mn0), c1 = mn1 == -INFINITY ? 1.0f : exp2f(m1 - mn1);
        float sum0 = 0, sum1 = 0;
#pragma unroll
        for (int nt = 0; nt < MK / 8; nt++) {
            s[nt][0] = mn0 == -INFINITY ? 0.0f : exp2f(s[nt][0] - mn0);
            s[nt][1] = mn0 == -INFINITY ? 0.0f : exp2f(s[nt][1] - mn0);
            s[nt][2] = mn1 == -INFINITY ? 0.0f : exp2f(s[nt][2] - mn1);
            s[nt][3] = mn1 == -INFINITY ? 0.0f : exp2f(s[nt][3] - mn1);
            sum0 += s[nt][0] + s[nt][1];
            sum1 += s[nt][2] + s[nt][3];
        }
        l0 = l0 * c0 + sum0, l1 = l1 * c1 + sum1;
        m0 = mn0, m1 = mn1;
#pragma unroll
        for (int nd = 0; nd < HD / 8; nd++) o[nd][0] *= c0, o[nd][1] *= c0, o[nd][2] *= c1, o[nd][3] *= c1;
#pragma unroll
        for (int kc = 0; kc < MK / 16; kc++) {
            uint32_t pa[4] = {pack_bf16(s[2 * kc][0], s[2 * kc][1]), pack_bf16(s[2 * kc][2], s[2 * kc][3]),
                              pack_bf16(s[2 * kc + 1][0], s[2 * kc + 1][1]), pack_bf16(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
            for (int nd = 0; nd < HD / 8; nd++) {
                const bf16 *vp = Vt + (nd * 8 + g) * LV + kc * 16 + 2 * t;
                mma16816(o[nd], pa, *(const uint32_t *)vp, *(const uint32_t *)(vp + 8));
            }
        }
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float i0 = l0 > 0 ? 1.0f / l0 : 0.0f, i1 = l1 > 0 ? 1.0f / l1 : 0.0f;
    bf16 *d0 = a.o + (int64_t)row0 * a.ldo + (int64_t)h * HD, *d1 = a.o + (int64_t)row1 * a.ldo + (int64_t)h * HD;
#pragma unroll
    for (int nd = 0; nd < HD / 8; nd++) {
        int c = nd * 8 + 2 * t;
        if (row0 < rend) *(__nv_bfloat162 *)(d0 + c) = __floats2bfloat162_rn(o[nd][0] * i0, o[nd][1] * i0);
        if (row1 < rend) *(__nv_bfloat162 *)(d1 + c) = __floats2bfloat162_rn(o[nd][2] * i1, o[nd][3] * i1);
    }
}

template <int HD, int PAGED>
static int launch(iris_backend *b, const iris_flash_args &a, int n_heads) {
    dim3 grid((unsigned)((a.n_rows + MQ - 1) / MQ), (unsigned)n_heads);
    if (PAGED && a.kv8) k_flash_mma<HD, PAGED, kv8><<<grid, MW * 32, 0, cuda_of(b)->stream>>>(a);
    else k_flash_mma<HD, PAGED, bf16><<<grid, MW * 32, 0, cuda_of(b)->stream>>>(a);
    return iris_cuda_check(b, "attention (flash, mma)");
}

int iris_cuda_flash_mma(iris_backend *b, const iris_flash_args *a, int head_dim, int n_heads, int paged) {
#define CASE(HD)                                                                                                       \
    case HD: return paged ? launch<HD, 1>(b, *a, n_heads) : launch<HD, 0>(b, *a, n_heads)
    switch (head_dim) {
        CASE(16);
        CASE(32);
        CASE(64);
        CASE(128);
    default: return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda attention: head_dim %d for the flash kernel", head_dim);
    }
#undef CASE
}
