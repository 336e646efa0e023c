/* cuda_attn_flash.cu: flash-style attention on the tensor cores (WMMA, bf16
 * operands, fp32 accumulation) — the vision encoder's bidirectional
 * attention within each image, and the prefill side of paged attention
 * (causal, keys read block by block from the paged cache).  No N² buffer: a
 * CTA streams the keys in tiles of BK and keeps a running max and sum per
 * query row (online softmax).
 *
 * Thread mapping: a CTA of 4 warps owns 64 consecutive query rows of one
 * query head (grid: row tiles × heads); each warp owns 16 rows.  Per key
 * tile the CTA stages K and V [BK, HD] in shared memory (16-byte loads,
 * zero-filled past the end), each warp computes S = Q·Kᵀ [16, BK] with WMMA,
 * the softmax update in fp32 (two lanes per row), P in bf16 (as flash
 * attention does), and O += P·V with WMMA on its fp32 O tile kept in shared
 * memory (rescaled by the running-max correction before each update).
 * Compute-bound for long segments (4096 patches: 2·N²·HD flops a head).
 *
 * The default is cuda_attn_mma.cu's kernel; this one stays as its check
 * and baseline (iris_cuda_set_attn_impl).
 *
 * Paged prefill: a 64-row tile is handled here only when it holds at least
 * FLASH_MIN_ROWS rows of one sequence (flash_tile_ok, shared with the decode
 * kernel of cuda_attn.cu, which takes every other row), so a tile never
 * mixes sequences.  Row r sees the keys j < row_ctx[r]. */
#include <mma.h>

#include "cuda_attn.cuh"

using namespace nvcuda;

#define FW 4            /* warps per CTA */
#define FQ (16 * FW)    /* query rows per CTA */

typedef iris_flash_args flash_args;

template <int HD, int BK>
struct flash_smem {
    static constexpr int LQ = HD + 8, LS = BK + 4, LP = BK + 8, LO = HD + 4;
    static constexpr size_t q = (size_t)FQ * LQ * 2, k = (size_t)BK * LQ * 2, s = (size_t)FW * 16 * LS * 4,
                            p = (size_t)FW * 16 * LP * 2, o = (size_t)FW * 16 * LO * 4;
    static constexpr size_t bytes = q + 2 * k + s + p + o + 64;
};

template <int HD, int BK, int PAGED>
__global__ void __launch_bounds__(FW * 32) k_flash(flash_args a) {
    typedef flash_smem<HD, BK> L;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *Ks = (bf16 *)(smem + L::q), *Vs = (bf16 *)(smem + L::q + L::k);
    int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    float *Ss = (float *)(smem + L::q + 2 * L::k) + warp * 16 * L::LS;
    bf16 *Ps = (bf16 *)(smem + L::q + 2 * L::k + L::s) + warp * 16 * L::LP;
    float *Os = (float *)(smem + L::q + 2 * L::k + L::s + L::p) + warp * 16 * L::LO;
    int *kmax_s = (int *)(smem + L::q + 2 * L::k + L::s + L::p + L::o);

    int r0 = blockIdx.x * FQ, h = blockIdx.y, kvh = h / a.g;
    int rend = min(r0 + FQ, a.n_rows);
    int seq = 0;
    if (PAGED) {
        if (!flash_tile_ok(a.row_seq, a.n_rows, r0, FQ)) return;
        seq = a.row_seq[r0];
    }

    /* Q tile → shared memory (rows past the end are zero). */
    for (int i = threadIdx.x; i < FQ * HD / 8; i += FW * 32) {
        int r = i / (HD / 8), c = (i % (HD / 8)) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r0 + r < rend) v = *(const uint4 *)(a.q + (int64_t)(r0 + r) * a.ldq + (int64_t)h * HD + c);
        *(uint4 *)(Qs + r * L::LQ + c) = v;
    }
    for (int i = lane; i < 16 * L::LO; i += 32) Os[i] = 0;
    /* Each lane pair owns one row of the warp: its key limit, running max and sum. */
    int my_row = r0 + warp * 16 + lane / 2, half = lane & 1;
    int my_lim = 0;
    if (my_row < rend) my_lim = PAGED ? a.row_ctx[my_row] : a.n_keys;
    int warp_lim = my_lim;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) warp_lim = max(warp_lim, __shfl_xor_sync(0xffffffffu, warp_lim, o));
    if (threadIdx.x == 0) *kmax_s = 0;
    __syncthreads();
    if (lane == 0) atomicMax(kmax_s, warp_lim);
    __syncthreads();
    int n_keys = *kmax_s;
    float m = -INFINITY, l = 0;

    for (int j0 = 0; j0 < n_keys; j0 += BK) {
        __syncthreads(); /* the previous tile's K/V are no longer read */
        for (int i = threadIdx.x; i < BK * HD / 8; i += FW * 32) {
            int j = i / (HD / 8), c = (i % (HD / 8)) * 8;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
            if (j0 + j < n_keys) {
                int64_t row = flash_key_row<PAGED>(a, seq, j0 + j);
                kv = *(const uint4 *)(a.k + row * a.ldk + (int64_t)kvh * HD + c);
                vv = *(const uint4 *)(a.v + row * a.ldk + (int64_t)kvh * HD + c);
            }
            *(uint4 *)(Ks + j * L::LQ + c) = kv;
            *(uint4 *)(Vs + j * L::LQ + c) = vv;
        }
        __syncthreads();
        if (j0 >= warp_lim) continue; /* every row of this warp is past its keys */

        /* S = Q · Kᵀ for the warp's 16 rows. */
#pragma unroll
        for (int nb = 0; nb < BK / 16; nb++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
#pragma unroll
            for (int d0 = 0; d0 < HD; d0 += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, Qs + warp * 16 * L::LQ + d0, L::LQ);
                wmma::load_matrix_sync(fb, Ks + nb * 16 * L::LQ + d0, L::LQ);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(Ss + nb * 16, acc, L::LS, wmma::mem_row_major);
        }
        __syncwarp();

        /* Online softmax: lane pair (2i, 2i+1) owns row i, each half of the columns. */
        float *srow = Ss + (lane / 2) * L::LS + half * (BK / 2);
        float tmax = -INFINITY;
        for (int c = 0; c < BK / 2; c++) {
            int j = j0 + half * (BK / 2) + c;
            float s = j < my_lim ? srow[c] * a.scale_log2 : -INFINITY;
            srow[c] = s;
            tmax = fmaxf(tmax, s);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        float m_new = fmaxf(m, tmax);
        float corr = m_new == -INFINITY ? 1.0f : exp2f(m - m_new);
        float sum = 0;
        bf16 *prow = Ps + (lane / 2) * L::LP + half * (BK / 2);
        for (int c = 0; c < BK / 2; c++) {
            float p = m_new == -INFINITY ? 0.0f : exp2f(srow[c] - m_new);
            sum += p;
            prow[c] = f2bf(p);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = l * corr + sum;
        m = m_new;
        float *orow = Os + (lane / 2) * L::LO + half * (HD / 2);
        for (int c = 0; c < HD / 2; c++) orow[c] *= corr;
        __syncwarp();

        /* O += P · V. */
#pragma unroll
        for (int db = 0; db < HD / 16; db++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, Os + db * 16, L::LO, wmma::mem_row_major);
#pragma unroll
            for (int kb = 0; kb < BK / 16; kb++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, Ps + kb * 16, L::LP);
                wmma::load_matrix_sync(fb, Vs + kb * 16 * L::LQ + db * 16, L::LQ);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(Os + db * 16, acc, L::LO, wmma::mem_row_major);
        }
        __syncwarp();
    }

    if (my_row < rend) {
        float inv = l > 0 ? 1.0f / l : 0.0f;
        const float *orow = Os + (lane / 2) * L::LO + half * (HD / 2);
        bf16 *dst = a.o + (int64_t)my_row * a.ldo + (int64_t)h * HD + half * (HD / 2);
        for (int c = 0; c < HD / 2; c++) dst[c] = f2bf(orow[c] * inv);
    }
}

template <int HD, int BK, int PAGED>
static int launch(iris_backend *b, const flash_args &a, int n_heads) {
    typedef flash_smem<HD, BK> L;
    static int attr_set;
    if (!attr_set) {
        cudaError_t e = cudaFuncSetAttribute(k_flash<HD, BK, PAGED>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)L::bytes);
        if (e != cudaSuccess) return iris_cuda_status(b, e, "attention: shared memory for the flash kernel");
        attr_set = 1;
    }
    dim3 grid((unsigned)((a.n_rows + FQ - 1) / FQ), (unsigned)n_heads);
    k_flash<HD, BK, PAGED><<<grid, FW * 32, L::bytes, cuda_of(b)->stream>>>(a);
    return iris_cuda_check(b, "attention (flash)");
}

/* The register-resident kernel unless the WMMA one was asked for (iris_cuda_set_attn_impl 1). */
static int run(iris_backend *b, const flash_args &a, int hd, int n_heads, int paged) {
    if (cuda_of(b)->attn_impl != 1 || a.kv8) return iris_cuda_flash_mma(b, &a, hd, n_heads, paged);
    switch (hd) {
    case 16: return paged ? launch<16, 64, 1>(b, a, n_heads) : launch<16, 64, 0>(b, a, n_heads);
    case 32: return paged ? launch<32, 64, 1>(b, a, n_heads) : launch<32, 64, 0>(b, a, n_heads);
    case 64: return paged ? launch<64, 64, 1>(b, a, n_heads) : launch<64, 64, 0>(b, a, n_heads);
    case 128: return paged ? launch<128, 32, 1>(b, a, n_heads) : launch<128, 32, 0>(b, a, n_heads);
    default: return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda attention: head_dim %d for the flash kernel", hd);
    }
}

/* The mma kernel: the segments up to IRIS_FLASH_MAX_SEGS a launch (empty ones left out). */
static int segments_mma(iris_backend *b, const iris_tensor *qkv, int n_heads, int head_dim, const int *cu_seqlens,
                        int n_seg, iris_tensor *o) {
    int64_t ld = tld(qkv), w = (int64_t)n_heads * head_dim;
    flash_args a;
    memset(&a, 0, sizeof a);
    const bf16 *base = (const bf16 *)qkv->data;
    a.q = base, a.k = base + w, a.v = base + 2 * w;
    a.ldq = a.ldk = ld;
    a.o = (bf16 *)o->data;
    a.ldo = tld(o);
    a.g = 1;
    a.scale_log2 = 1.4426950408889634f / sqrtf((float)head_dim);
    for (int s = 0; s < n_seg;) {
        a.n_seg = 0;
        for (; s < n_seg && a.n_seg < IRIS_FLASH_MAX_SEGS; s++) {
            if (cu_seqlens[s + 1] <= cu_seqlens[s]) continue;
            a.seg_row[a.n_seg] = cu_seqlens[s];
            a.seg_row[++a.n_seg] = cu_seqlens[s + 1];
        }
        if (!a.n_seg) continue;
        flash_args one = a;   /* one segment: the plain launch, at the segment's rows */
        if (a.n_seg == 1) {
            int64_t r = a.seg_row[0];
            one.q = a.q + r * ld, one.k = a.k + r * ld, one.v = a.v + r * ld, one.o = a.o + r * a.ldo;
            one.n_rows = one.n_keys = a.seg_row[1] - a.seg_row[0];
            one.n_seg = 0;
        }
        int rc = iris_cuda_flash_mma(b, &one, head_dim, n_heads, 0);
        if (rc) return rc;
    }
    return 0;
}

int iris_cuda_flash_segments(iris_backend *b, const iris_tensor *qkv, int n_heads, int head_dim, const int *cu_seqlens,
                             int n_seg, iris_tensor *o) {
    /* head_dim 72 (Qwen3-VL-8B's vision) has only the mma kernel's instance */
    if (cuda_of(b)->attn_impl != 1 || head_dim == 72) return segments_mma(b, qkv, n_heads, head_dim, cu_seqlens, n_seg, o);
    int64_t ld = tld(qkv), w = (int64_t)n_heads * head_dim;
    for (int s = 0; s < n_seg; s++) {
        int a0 = cu_seqlens[s], len = cu_seqlens[s + 1] - a0;
        if (len <= 0) continue;
        flash_args a;
        memset(&a, 0, sizeof a);
        const bf16 *base = (const bf16 *)qkv->data + (int64_t)a0 * ld;
        a.q = base;
        a.k = base + w;
        a.v = base + 2 * w;
        a.ldq = a.ldk = ld;
        a.o = (bf16 *)o->data + (int64_t)a0 * tld(o);
        a.ldo = tld(o);
        a.n_rows = a.n_keys = len;
        a.g = 1;
        a.scale_log2 = 1.4426950408889634f / sqrtf((float)head_dim);
        int rc = run(b, a, head_dim, n_heads, 0);
        if (rc) return rc;
    }
    return 0;
}

int iris_cuda_flash_paged(iris_backend *b, const iris_tensor *q, const iris_kv_layer *kv, const iris_attn_meta *meta,
                          int n_q_heads, iris_tensor *o) {
    flash_args a;
    memset(&a, 0, sizeof a);
    a.q = (const bf16 *)q->data;
    a.ldq = tld(q);
    a.k = (const bf16 *)kv->k;
    a.v = (const bf16 *)kv->v;
    a.ldk = (int64_t)kv->n_kv_heads * kv->head_dim;
    a.kv8 = kv->dtype == IRIS_DT_F8_E4M3;
    a.o = (bf16 *)o->data;
    a.ldo = tld(o);
    a.n_rows = meta->n_rows;
    a.g = n_q_heads / kv->n_kv_heads;
    a.scale_log2 = 1.4426950408889634f / sqrtf((float)kv->head_dim);
    a.row_seq = meta->row_seq;
    a.row_ctx = meta->row_ctx;
    a.block_tables = meta->block_tables;
    a.max_blocks = meta->max_blocks;
    a.tiles = meta->tiles, a.n_tiles = meta->n_tiles; /* (attn_paged drops them for the WMMA kernel) */
    int impl = cuda_of(b)->attn_impl; /* 2: the earlier layout; 3: two heads a CTA; 4: and 3 stages */
    a.heavy_first = impl != 2;
    a.pair_heads = impl == 3 || impl == 4;
    a.three_stages = impl == 4;
    return run(b, a, kv->head_dim, n_q_heads, 1);
}
