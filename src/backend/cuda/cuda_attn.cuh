/* cuda_attn.cuh: what the two paged-attention kernels agree on — which
 * query rows the flash kernel takes (64-row tiles holding at least
 * FLASH_MIN_ROWS rows, all of one sequence: prefill chunks) and which the
 * decode kernel takes (every other row: decode steps, tiles that straddle
 * sequences).  Both kernels evaluate the same predicate, so every row is
 * computed exactly once, without a host round trip.  Where the host lists the
 * step's attention tiles (iris_attn_meta.tiles: each sequence's rows in 64-row
 * pieces from its first row, so a tile never straddles two sequences) the
 * flash kernels take those and the decode kernel the lone rows listed. */
#ifndef IRIS_CUDA_ATTN_CUH
#define IRIS_CUDA_ATTN_CUH

#include "cuda_internal.cuh"

#define FLASH_TILE IRIS_ATTN_TILE /* backend.h: a whole tile */
#define FLASH_MIN_ROWS IRIS_ATTN_TILE_MIN
#define IRIS_FLASH_MAX_SEGS 32   /* segments one launch takes (more: several launches) */

/* Two floats as a bf16x2 word (lo in the low half), and ldmatrix: the mma attention kernels' pieces. */
static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* Four 8x8 bf16 matrices from shared memory (lane l gives the address of row l % 8 of matrix l / 8):
 * r[m] is lane (g, t)'s element pair (row g, columns 2t, 2t+1) of matrix m, or with TRANS the pair
 * (rows 2t, 2t+1, column g) — the B fragment of K (rows = keys) and of V (rows = keys) respectively. */
template <int TRANS>
static __device__ __forceinline__ void ldsm_x4(uint32_t *r, const bf16 *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

/* Called by every warp of a block (each evaluates it independently). */
static __device__ __forceinline__ bool flash_tile_ok(const int32_t *row_seq, int n_rows, int r0, int tile) {
    int r1 = min(n_rows, r0 + tile);
    if (r1 - r0 < FLASH_MIN_ROWS) return false;
    int s0 = row_seq[r0], lane = threadIdx.x & 31;
    bool same = true;
    for (int r = r0 + lane; r < r1; r += 32) same = same && row_seq[r] == s0;
    return __all_sync(0xffffffffu, same);
}

/* The end of a listed tile starting at row r0: its sequence's last row + 1 within 64 rows (rows of a
 * sequence are consecutive).  Called by every warp of a block. */
static __device__ __forceinline__ int flash_tile_end(const int32_t *row_seq, int n_rows, int r0) {
    int s0 = row_seq[r0], lane = threadIdx.x & 31, r1 = min(n_rows, r0 + FLASH_TILE);
    for (int base = r0; base < r1; base += 32) {
        unsigned diff = __ballot_sync(0xffffffffu, base + lane < r1 && row_seq[base + lane] != s0);
        if (diff) return base + __ffs(diff) - 1;
    }
    return r1;
}

/* What both flash kernels take (cuda_attn_flash.cu fills it). */
struct iris_flash_args {
    const bf16 *q, *k, *v; /* k, v: kv8 codes (cast) when kv8 */
    int64_t ldq, ldk;   /* ldk: between key rows (segments: the qkv row; paged: n_kv * HD) */
    int kv8;            /* paged: the cache holds E4M3 codes (the mma kernel only) */
    bf16 *o;
    int64_t ldo;
    int n_rows, n_keys; /* segments: n_keys = n_rows; paged: from row_ctx */
    int g;              /* query heads per kv head */
    float scale_log2;   /* 1/sqrt(HD) · log2(e) */
    const int32_t *row_seq, *row_ctx, *block_tables;
    int max_blocks;
    const int32_t *tiles; /* paged: the listed tiles' first rows (iris_attn_meta.tiles), or NULL: rows
                             [64t, 64t + 64) that flash_tile_ok takes */
    int n_tiles;
    /* Segments in one launch (the mma kernel; the vision encoder's images): n_seg > 0: segment s is
     * rows [seg_row[s], seg_row[s + 1]) of q, k, v and o (given at row 0), its keys its own rows;
     * the launch fills seg_tile (its first CTA row tile) */
    int n_seg;
    int seg_row[IRIS_FLASH_MAX_SEGS + 1], seg_tile[IRIS_FLASH_MAX_SEGS + 1];
    /* Paged launches of the mma kernel: row tiles heaviest (last) first (1 but for
     * iris_cuda_set_attn_impl 2, the layout it replaced); two query heads a CTA where the GQA group
     * is even (impls 3 and 4: not the default until measured, bench/bench_attn.c); three_stages
     * (impl 4, BF16 cache, two heads a CTA): three K/V stages in flight instead of two */
    int heavy_first, pair_heads, three_stages;
};

/* Key j's row in K and V: its cache slot through the sequence's block table (paged), or j itself
 * (segments: k and v already point at the segment). */
template <int PAGED>
static __device__ __forceinline__ int64_t flash_key_row(const iris_flash_args &a, int seq, int j) {
    if (!PAGED) return j;
    return (int64_t)a.block_tables[(int64_t)seq * a.max_blocks + j / IRIS_KV_BLOCK] * IRIS_KV_BLOCK + j % IRIS_KV_BLOCK;
}

/* The register-resident kernel (cuda_attn_mma.cu); head_dim 16, 32, 64 or 128, and 72 for segments
 * (paged 0). */
int iris_cuda_flash_mma(iris_backend *b, const iris_flash_args *a, int head_dim, int n_heads, int paged);
/* Segments of head size 64 on wgmma (cuda_attn_wgmma.cu; where cuda_ctx.wgmma). */
int iris_cuda_attn_wgmma(iris_backend *b, const iris_flash_args *a, int n_heads);
/* Paged prefill tiles of head size 128 with a BF16 cache on wgmma (likewise). */
int iris_cuda_attn_wgmma_paged(iris_backend *b, const iris_flash_args *a, int n_heads);

static inline int flash_head_dim_ok(int hd) { return hd == 16 || hd == 32 || hd == 64 || hd == 128; }

#endif
