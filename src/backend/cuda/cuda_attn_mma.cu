/* cuda_attn_mma.cu: flash attention with the scores, probabilities and the
 * output in registers (mma.sync m16n8k16, bf16 operands, fp32 accumulation;
 * sm_80 and newer) — the default flash kernel but where cuda_attn_wgmma.cu's
 * runs (a 9.0 device); cuda_attn_flash.cu's WMMA kernel is the simpler one it
 * is checked and timed against.
 *
 * Thread mapping: a CTA of MW warps owns 16·MW/HG consecutive query rows of HG
 * query heads (the vision encoder's segments: MW = 8, HG = 1, 128 rows; prefill
 * over the paged cache: its 64-row tiles, MW = 4 · HG, HG = 1; HG = 2 where the
 * GQA group is even with iris_cuda_set_attn_impl 3 or 4 — two query heads of one
 * kv head share each staged K/V tile, half the tile loads — until measured to be
 * the better default); each warp 16 rows of one head,
 * held as mma A fragments for the whole run.  Per tile of 64 keys the CTA stages K and V [64, HD] in
 * shared memory, two stages deep (cp.async: the next tile lands while this
 * one is multiplied); each warp computes S = Q·Kᵀ (16 x 64, fp32 in registers:
 * lane (g = lane/4, t = lane%4) holds rows g and g+8, columns 2t, 2t+1 of
 * every 8-column tile; K's B fragments by ldmatrix), updates the running max
 * and sum (max reduced over the 4 lanes of a row; the sum stays per lane
 * until the end), turns S into P in bf16 directly in the A-fragment layout
 * (no shared-memory round trip) and accumulates O += P·V in registers (V's B
 * fragments by ldmatrix.trans from the row-major tile).  Compute-bound for
 * long segments.
 * The vision encoder's images go in one launch (n_seg segments, each in
 * whole 128-row tiles; a CTA finds its segment among the tile starts), so
 * small images fill the GPU together rather than a launch each.
 * Paged CTAs are launched heaviest first (grid x the head group, y the row tile
 * counted from the last): under a causal mask a tile's keys grow with its rows,
 * so the long tiles no longer finish last in a half-empty final wave.
 * Row selection for the paged case is cuda_attn.cuh's (flash_tile_ok, or the host's
 * tiles: flash_tile_end).  An E4M3
 * cache (kv8) is widened to bf16 (exactly) as the tiles are staged.
 * A head size that is not a multiple of 16 (72: Qwen3-VL-8B's vision heads;
 * segments only) is computed at HP = HD rounded up to 16: the staged K and V
 * columns [HD, HP) and Q's are zeros, so scores are exact, and the output's
 * padded columns are not written; the scale stays 1/sqrt(HD). */
#include "cuda_attn.cuh"

#define MK 64

/* The head size the mma tiles compute at: HD rounded up to 16 (HD itself for 16, 32, 64, 128). */
static __host__ __device__ constexpr int flash_hp(int hd) { return (hd + 15) / 16 * 16; }

/* Shared memory of one CTA: ST stages of K and V tiles, [MK][HP + 8] each (8 columns of padding
 * put the 8 rows an ldmatrix reads in distinct banks). */
template <int HD, int ST>
static constexpr size_t flash_smem_bytes() { return (size_t)ST * 2 * MK * (flash_hp(HD) + 8) * sizeof(bf16); }

/* Keys [j0, j0 + MK) of the kv head into stage (ks, vs); rows past n_keys are zeros (their scores
 * are masked, and zero V rows keep 0 · V finite).  BF16: cp.async, completing in the background
 * (the caller commits and waits); an E4M3 cache: loaded, widened and stored here. */
template <int HD, int PAGED, int NT, typename KT>
static __device__ __forceinline__ void stage_tile(const iris_flash_args &a, int seq, int kvh, int j0, int n_keys,
                                                  int kbase, bf16 *ks, bf16 *vs) {
    constexpr int LK = flash_hp(HD) + 8, PR = HD / 8; /* 16-byte pieces a row (of bf16) */
    auto piece = [&](int j, int c, bool in, int64_t row) {
        const KT *kp = (const KT *)(const void *)a.k + row * a.ldk + (int64_t)kvh * HD + c;
        const KT *vp = (const KT *)(const void *)a.v + row * a.ldk + (int64_t)kvh * HD + c;
        if (sizeof(KT) == 2) {
            cp_async16(ks + j * LK + c, kp, in ? 16 : 0);
            cp_async16(vs + j * LK + c, vp, in ? 16 : 0);
        } else {
            uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
            if (in) kv = kv_load8_bf16(kp), vv = kv_load8_bf16(vp);
            *(uint4 *)(ks + j * LK + c) = kv;
            *(uint4 *)(vs + j * LK + c) = vv;
        }
    };
    if constexpr (NT % PR == 0 && MK % (NT / PR) == 0) {
        /* a thread keeps its column: piece threadIdx % PR of rows jr, jr + RS, ...  Paged with RS = 8:
         * rows jr + 16u and + 8 share a cache block (a block holds a multiple of 16 keys, j0 is a
         * multiple of MK), so every other row is the one before plus 8, no block-table lookup. */
        constexpr int RS = NT / PR;
        constexpr bool PAIR = PAGED && RS == 8 && IRIS_KV_BLOCK % 16 == 0;
        const int c = (threadIdx.x % PR) * 8, jr = threadIdx.x / PR;
        const bool full = j0 + MK <= n_keys;
        int64_t row = 0;
#pragma unroll
        for (int u = 0; u < MK / RS; u++) {
            const int j = jr + u * RS;
            const bool in = full || j0 + j < n_keys;
            if (PAIR && (u & 1)) row = in ? row + 8 : 0;
            else row = in ? flash_key_row<PAGED>(a, seq, kbase + j0 + j) : 0;
            piece(j, c, in, row);
        }
    } else {
        for (int i = threadIdx.x; i < MK * PR; i += NT) {
            int j = i / PR, c = (i % PR) * 8;
            bool in = j0 + j < n_keys;
            piece(j, c, in, in ? flash_key_row<PAGED>(a, seq, kbase + j0 + j) : 0);
        }
    }
}

/* MW warps a CTA, 16 query rows each, over HG query heads (the paged case: MW = 4 · HG, the
 * 64-row tiles of flash_tile_ok; warp w takes head w / 4 of the group, rows 16 · (w % 4)).
 * SEGS: several segments in the launch (a.n_seg); an instance of its own, so the one-segment
 * kernel keeps its registers. */
template <int HD, int PAGED, typename KT, int MW, int SEGS, int HG, int ST>
/* HD <= 64: at most 128 registers, so 16 warps fit an SM (131 would leave one 8-warp CTA per SM). */
__global__ void __launch_bounds__(MW * 32, HD <= 64 ? 16 / MW : 1) k_flash_mma(iris_flash_args a) {
    constexpr int HP = flash_hp(HD), LK = HP + 8, MQ = 16 * MW / HG, NT = MW * 32;
    static_assert(HD % 8 == 0, "the head is staged in 16-byte pieces; HP - HD is 0 or 8");
    static_assert(HG == 1 || (PAGED && MW == 4 * HG), "head groups: the paged 64-row tiles only");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sm = (bf16 *)smem_raw;
    __shared__ int kmax_s;
    int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int r0 = blockIdx.x * MQ, h = blockIdx.y, kvh = h / a.g;
    int rend = min(r0 + MQ, a.n_rows);
    int seq = 0, seg_keys = a.n_keys;
    int kbase = 0;       /* segments in one launch: this tile's segment starts at key row kbase */
    int rw = HG == 1 ? warp : warp % (MW / HG); /* the warp's 16 rows within the CTA's */
    if (PAGED) {
        int tile = blockIdx.x, grp = blockIdx.y;
        if (a.heavy_first) tile = (int)gridDim.y - 1 - (int)blockIdx.y, grp = blockIdx.x;
        h = grp * HG + (HG == 1 ? 0 : warp / (MW / HG)), kvh = h / a.g;
        if (a.tiles) {
            r0 = a.tiles[tile], rend = flash_tile_end(a.row_seq, a.n_rows, r0);
        } else {
            r0 = tile * MQ, rend = min(r0 + MQ, a.n_rows);
            if (!flash_tile_ok(a.row_seq, a.n_rows, r0, MQ)) return;
        }
        seq = a.row_seq[r0];
    } else if (SEGS) {
        int sg = 0;
        while (sg + 1 < a.n_seg && (int)blockIdx.x >= a.seg_tile[sg + 1]) sg++;
        r0 = a.seg_row[sg] + ((int)blockIdx.x - a.seg_tile[sg]) * MQ;
        rend = min(r0 + MQ, a.seg_row[sg + 1]);
        seg_keys = a.seg_row[sg + 1] - a.seg_row[sg];
        kbase = a.seg_row[sg];
    }
    int row0 = r0 + rw * 16 + g, row1 = row0 + 8;
    int lim0 = row0 < rend ? (PAGED ? a.row_ctx[row0] : seg_keys) : 0;
    int lim1 = row1 < rend ? (PAGED ? a.row_ctx[row1] : seg_keys) : 0;
    int warp_lim = max(lim0, lim1);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) warp_lim = max(warp_lim, __shfl_xor_sync(0xffffffffu, warp_lim, o));
    if (threadIdx.x == 0) kmax_s = 0;
    __syncthreads();
    if (lane == 0) atomicMax(&kmax_s, warp_lim);
    if (HP != HD) /* the padded columns of every stage's K and V (cp.async never writes them) */
        for (int i = threadIdx.x; i < 2 * ST * MK; i += NT) *(uint4 *)(sm + i * LK + HD) = make_uint4(0, 0, 0, 0);

    /* Q as A fragments: qa[kc] covers columns [16 kc, 16 kc + 16); zeros past HD. */
    uint32_t qa[HP / 16][4];
    {
        const bf16 *q0 = a.q + (int64_t)row0 * a.ldq + (int64_t)h * HD, *q1 = a.q + (int64_t)row1 * a.ldq + (int64_t)h * HD;
#pragma unroll
        for (int kc = 0; kc < HP / 16; kc++) {
            int c = kc * 16 + 2 * t;
            bool hi = kc * 16 + 8 < HD; /* columns c + 8, c + 9 within the head (HP - HD is 0 or 8) */
            qa[kc][0] = row0 < rend ? *(const uint32_t *)(q0 + c) : 0;
            qa[kc][1] = row1 < rend ? *(const uint32_t *)(q1 + c) : 0;
            qa[kc][2] = hi && row0 < rend ? *(const uint32_t *)(q0 + c + 8) : 0;
            qa[kc][3] = hi && row1 < rend ? *(const uint32_t *)(q1 + c + 8) : 0;
        }
    }
    float o[HP / 8][4];
#pragma unroll
    for (int nd = 0; nd < HP / 8; nd++) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0, l1 = 0;
    __syncthreads();
    int n_keys = kmax_s;

    /* ST stages (2, or 3 for iris_cuda_set_attn_impl 4): tiles i + 1 .. i + ST - 1 are in flight
     * while tile i is multiplied. */
    if (n_keys > 0) stage_tile<HD, PAGED, NT, KT>(a, seq, kvh, 0, n_keys, kbase, sm, sm + MK * LK);
    cp_async_commit();
    for (int i = 1; i < ST - 1; i++) {
        bf16 *nk = sm + (size_t)i * 2 * MK * LK;
        if (i * MK < n_keys) stage_tile<HD, PAGED, NT, KT>(a, seq, kvh, i * MK, n_keys, kbase, nk, nk + MK * LK);
        cp_async_commit();
    }
    for (int j0 = 0, st = 0; j0 < n_keys; j0 += MK, st = ST == 2 ? st ^ 1 : st + 1 == ST ? 0 : st + 1) {
        bf16 *Ks = sm + (size_t)st * 2 * MK * LK, *Vs = Ks + MK * LK;
        if (j0 + (ST - 1) * MK < n_keys) { /* into the stage tile i - 1 was multiplied from */
            bf16 *nk = sm + (size_t)(ST == 2 ? st ^ 1 : st == 0 ? ST - 1 : st - 1) * 2 * MK * LK;
            stage_tile<HD, PAGED, NT, KT>(a, seq, kvh, j0 + (ST - 1) * MK, n_keys, kbase, nk, nk + MK * LK);
        }
        cp_async_commit();
        cp_async_wait<ST - 1>(); /* all but the newest ST - 1 groups: this tile has landed */
        __syncthreads();
        if (j0 < warp_lim) {
            float s[MK / 8][4];
#pragma unroll
            for (int nt = 0; nt < MK / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0;
#pragma unroll
            for (int kc = 0; kc < HP / 16; kc++)
#pragma unroll
                for (int nt = 0; nt < MK / 8; nt += 2) {
                    /* matrices: keys (nt | nt + 1) x dims (16 kc | 16 kc + 8) */
                    uint32_t kb[4];
                    ldsm_x4<0>(kb, Ks + ((nt + (lane >> 4)) * 8 + (lane & 7)) * LK + kc * 16 + ((lane >> 3) & 1) * 8);
                    mma16816(s[nt], qa[kc], kb[0], kb[1]);
                    mma16816(s[nt + 1], qa[kc], kb[2], kb[3]);
                }
            /* Tiles whose keys both rows see (the vision encoder's; prefill's below the diagonal)
             * skip the mask.  The max is taken on the raw scores (a positive scale keeps their
             * order) and each exponent is one FFMA, s · scale − max; masked scores are −inf, so
             * their exponentials are 0. */
            if (!(j0 + MK <= lim0 && j0 + MK <= lim1)) {
#pragma unroll
                for (int nt = 0; nt < MK / 8; nt++) {
                    int j = j0 + nt * 8 + 2 * t;
                    if (j >= lim0) s[nt][0] = -INFINITY;
                    if (j + 1 >= lim0) s[nt][1] = -INFINITY;
                    if (j >= lim1) s[nt][2] = -INFINITY;
                    if (j + 1 >= lim1) s[nt][3] = -INFINITY;
                }
            }
            float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < MK / 8; nt++) {
                mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
                mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            float mn0 = fmaxf(m0, mx0 * a.scale_log2), mn1 = fmaxf(m1, mx1 * a.scale_log2);
            float c0 = mn0 == -INFINITY ? 1.0f : exp2f(m0 - mn0), c1 = mn1 == -INFINITY ? 1.0f : exp2f(m1 - mn1);
            float nm0 = mn0 == -INFINITY ? 0.0f : -mn0, nm1 = mn1 == -INFINITY ? 0.0f : -mn1;
            float sum0 = 0, sum1 = 0;
#pragma unroll
            for (int nt = 0; nt < MK / 8; nt++) {
                s[nt][0] = exp2f(fmaf(s[nt][0], a.scale_log2, nm0));
                s[nt][1] = exp2f(fmaf(s[nt][1], a.scale_log2, nm0));
                s[nt][2] = exp2f(fmaf(s[nt][2], a.scale_log2, nm1));
                s[nt][3] = exp2f(fmaf(s[nt][3], a.scale_log2, nm1));
                sum0 += s[nt][0] + s[nt][1];
                sum1 += s[nt][2] + s[nt][3];
            }
            l0 = l0 * c0 + sum0, l1 = l1 * c1 + sum1;
            m0 = mn0, m1 = mn1;
#pragma unroll
            for (int nd = 0; nd < HP / 8; nd++) o[nd][0] *= c0, o[nd][1] *= c0, o[nd][2] *= c1, o[nd][3] *= c1;
#pragma unroll
            for (int kc = 0; kc < MK / 16; kc++) {
                uint32_t pa[4] = {pack_bf16(s[2 * kc][0], s[2 * kc][1]), pack_bf16(s[2 * kc][2], s[2 * kc][3]),
                                  pack_bf16(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                                  pack_bf16(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
                for (int nd = 0; nd < HP / 8; nd += 2) {
                    /* matrices: keys (16 kc | 16 kc + 8) x dims (nd | nd + 1), transposed on the way */
                    uint32_t vb[4];
                    ldsm_x4<1>(vb, Vs + (kc * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LK + (nd + (lane >> 4)) * 8);
                    mma16816(o[nd], pa, vb[0], vb[1]);
                    mma16816(o[nd + 1], pa, vb[2], vb[3]);
                }
            }
        }
        __syncthreads(); /* this stage is refilled at the next tile */
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float i0 = l0 > 0 ? 1.0f / l0 : 0.0f, i1 = l1 > 0 ? 1.0f / l1 : 0.0f;
    bf16 *d0 = a.o + (int64_t)row0 * a.ldo + (int64_t)h * HD, *d1 = a.o + (int64_t)row1 * a.ldo + (int64_t)h * HD;
#pragma unroll
    for (int nd = 0; nd < HD / 8; nd++) { /* the padded columns' o[nd] are not written */
        int c = nd * 8 + 2 * t;
        if (row0 < rend) *(__nv_bfloat162 *)(d0 + c) = __floats2bfloat162_rn(o[nd][0] * i0, o[nd][1] * i0);
        if (row1 < rend) *(__nv_bfloat162 *)(d1 + c) = __floats2bfloat162_rn(o[nd][2] * i1, o[nd][3] * i1);
    }
}

/* tiles: CTA row tiles (grid x, or y heaviest first for a paged launch with a.heavy_first) */
template <int HD, int PAGED, typename KT, int MW, int SEGS = 0, int HG = 1, int ST = 2>
static int launch_mw(iris_backend *b, const iris_flash_args &a, int n_heads, int tiles) {
    constexpr size_t smem = flash_smem_bytes<HD, ST>();
    static int attr_set; /* one engine thread owns the GPU (DESIGN.md) */
    if (!attr_set) {
        if (cudaFuncSetAttribute(k_flash_mma<HD, PAGED, KT, MW, SEGS, HG, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem) != cudaSuccess)
            return iris_cuda_check(b, "attention (flash, mma): shared memory limit");
        attr_set = 1;
    }
    dim3 grid((unsigned)tiles, (unsigned)(n_heads / HG));
    if (PAGED && a.heavy_first) grid = dim3((unsigned)(n_heads / HG), (unsigned)tiles);
    k_flash_mma<HD, PAGED, KT, MW, SEGS, HG, ST><<<grid, MW * 32, smem, cuda_of(b)->stream>>>(a);
    return iris_cuda_check(b, "attention (flash, mma)");
}

/* Paged (prefill over the cache): 64-row tiles, as flash_tile_ok decides with the decode kernel;
 * two query heads a CTA where the GQA group is even (a.pair_heads).  Segments (the vision
 * encoder): 128 query rows a CTA, so each staged K/V tile serves twice the rows (half the L2
 * traffic of 64). */
template <int HD, int PAGED>
static int launch(iris_backend *b, const iris_flash_args &a, int n_heads) {
    if constexpr (PAGED) {
        int tiles = a.tiles ? a.n_tiles : (a.n_rows + FLASH_TILE - 1) / FLASH_TILE;
        bool pair = a.pair_heads && a.g % 2 == 0;
        if (a.kv8)
            return pair ? launch_mw<HD, 1, kv8, 2 * FLASH_TILE / 16, 0, 2>(b, a, n_heads, tiles)
                        : launch_mw<HD, 1, kv8, FLASH_TILE / 16>(b, a, n_heads, tiles);
        if (pair && a.three_stages) return launch_mw<HD, 1, bf16, 2 * FLASH_TILE / 16, 0, 2, 3>(b, a, n_heads, tiles);
        return pair ? launch_mw<HD, 1, bf16, 2 * FLASH_TILE / 16, 0, 2>(b, a, n_heads, tiles)
                    : launch_mw<HD, 1, bf16, FLASH_TILE / 16>(b, a, n_heads, tiles);
    }
    if (a.n_seg <= 0) return launch_mw<HD, 0, bf16, 8>(b, a, n_heads, (a.n_rows + 127) / 128);
    /* several segments, each in whole tiles of 128 rows (a tile never holds two of them) */
    iris_flash_args s = a;
    s.seg_tile[0] = 0;
    for (int i = 0; i < s.n_seg; i++) s.seg_tile[i + 1] = s.seg_tile[i] + (s.seg_row[i + 1] - s.seg_row[i] + 127) / 128;
    return launch_mw<HD, 0, bf16, 8, 1>(b, s, n_heads, s.seg_tile[s.n_seg]);
}

int iris_cuda_flash_mma(iris_backend *b, const iris_flash_args *a, int head_dim, int n_heads, int paged) {
    const cuda_ctx *c = cuda_of(b);
    if (c->wgmma && c->attn_impl == 0) {
        if (!paged && head_dim == 64) return iris_cuda_attn_wgmma(b, a, n_heads);
        if (paged && head_dim == 128 && !a->kv8) return iris_cuda_attn_wgmma_paged(b, a, n_heads);
    }
#define CASE(HD)                                                                                                       \
    case HD: return paged ? launch<HD, 1>(b, *a, n_heads) : launch<HD, 0>(b, *a, n_heads)
    switch (head_dim) {
        CASE(16);
        CASE(32);
        CASE(64);
        CASE(128);
    case 72: /* Qwen3-VL-8B's vision heads: segments only, no paged instance */
        if (!paged) return launch<72, 0>(b, *a, n_heads);
        /* fall through */
    default: return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda attention: head_dim %d for the flash kernel", head_dim);
    }
#undef CASE
}
