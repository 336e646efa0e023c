/* cuda_attn.cu: paged attention for decode rows (GQA, split over long
 * contexts) and the dispatch of both attention ops.
 *
 * attn_paged launches two kernels on the same rows: k_flash (cuda_attn_flash.cu)
 * takes the 64-row tiles of one sequence (prefill), k_attn_decode every other
 * row (cuda_attn.cuh says which); each kernel skips the other's rows.
 *
 * k_attn_decode — thread mapping: a CTA of 4 warps per (row, kv head, context
 * split); it computes all the query heads that share the kv head (the GQA
 * group), so each K/V row is read once for them.  Within a warp, HD/8 lanes
 * hold one key row (16-byte loads, 8 dims a lane) and the warp walks 32/(HD/8)
 * keys at a time; each (warp, key lane-group) keeps its own online-softmax
 * state (max, sum, 8 dims of the output per head) in registers; the states
 * are merged through shared memory at the end.  Memory-bound: every visible
 * K and V row of the kv head is read once per row.
 * Contexts are split into chunks of whole cache blocks (at least 64 keys) until
 * the rows give ~4 CTAs per SM,
 * one CTA each; their partial (max, sum, output) go to the scratch carved at
 * open and k_attn_combine merges them (flash-decoding).
 * Numerics: scores and softmax in fp32 (scale 1/sqrt(HD) folded into q), the
 * output rounded once to bf16.  The cache is BF16 or E4M3 (kv8, half the bytes
 * read); both kernels are templates over the element type. */
#include "cuda_attn.cuh"

#define DW 4 /* warps per decode CTA */

struct decode_args {
    const bf16 *q;
    int64_t ldq;
    const void *kc, *vc; /* bf16 or kv8 */
    int64_t kvw; /* n_kv * HD */
    bf16 *o;
    int64_t ldo;
    const int32_t *row_seq, *row_ctx, *block_tables;
    int max_blocks, n_rows, nq, g, chunk, n_splits;
    int flash;   /* the flash kernel runs too: skip its rows */
    float scale;
    float *part; /* [n_rows, nq, n_splits, HD + 2] when n_splits > 1 */
};

/* EPL cache elements per lane: 8 (BF16: 16 bytes), or 16 for an E4M3 cache with groups of at most 4
 * (16 bytes again, so as many bytes in flight as for BF16). */
template <int HD, int GMAX, typename KT, int EPL>
__global__ void __launch_bounds__(DW * 32) k_attn_decode(decode_args a) {
    constexpr int LPT = HD / EPL, TPW = 32 / LPT; /* lanes per key, keys per warp step */
    int row = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
    pdl_launch_next();
    pdl_wait();
    if (a.flash && flash_tile_ok(a.row_seq, a.n_rows, row - row % FLASH_TILE, FLASH_TILE)) return;
    int warp = threadIdx.x / 32, lane = threadIdx.x & 31, sub = lane / LPT, dl = lane % LPT;
    int seq = a.row_seq[row], ctx = a.row_ctx[row];
    int j_begin = split * a.chunk, j_end = min(ctx, j_begin + a.chunk);

    float qf[GMAX][EPL], acc[GMAX][EPL], m[GMAX], l[GMAX];
#pragma unroll
    for (int i = 0; i < GMAX; i++) {
        m[i] = -INFINITY;
        l[i] = 0;
#pragma unroll
        for (int k = 0; k < EPL; k++) acc[i][k] = qf[i][k] = 0;
        if (i < a.g) {
#pragma unroll
            for (int h = 0; h < EPL / 8; h++) {
                uint4 v = *(const uint4 *)(a.q + (int64_t)row * a.ldq + (int64_t)(kvh * a.g + i) * HD + dl * EPL + h * 8);
                const bf16 *e = (const bf16 *)&v;
#pragma unroll
                for (int k = 0; k < 8; k++) qf[i][h * 8 + k] = bf2f(e[k]) * a.scale;
            }
        }
    }
    const int32_t *bt = a.block_tables + (int64_t)seq * a.max_blocks;
    for (int base = j_begin + warp * TPW; base < j_end; base += DW * TPW) {
        int j = base + sub;
        bool valid = j < j_end;
        float kf[EPL], vf[EPL];
        if (valid) {
            int64_t slot = (int64_t)bt[j / IRIS_KV_BLOCK] * IRIS_KV_BLOCK + j % IRIS_KV_BLOCK;
#pragma unroll
            for (int h = 0; h < EPL / 8; h++) {
                kv_load8((const KT *)a.kc + slot * a.kvw + (int64_t)kvh * HD + dl * EPL + h * 8, kf + h * 8);
                kv_load8((const KT *)a.vc + slot * a.kvw + (int64_t)kvh * HD + dl * EPL + h * 8, vf + h * 8);
            }
        } else {
#pragma unroll
            for (int k = 0; k < EPL; k++) kf[k] = vf[k] = 0;
        }
#pragma unroll
        for (int i = 0; i < GMAX; i++) {
            if (i >= a.g) break;
            float s = 0;
#pragma unroll
            for (int k = 0; k < EPL; k++) s = fmaf(qf[i][k], kf[k], s);
#pragma unroll
            for (int off = LPT / 2; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            if (!valid) continue;
            float mn = fmaxf(m[i], s), corr = __expf(m[i] - mn), p = __expf(s - mn);
            l[i] = l[i] * corr + p;
#pragma unroll
            for (int k = 0; k < EPL; k++) acc[i][k] = acc[i][k] * corr + p * vf[k];
            m[i] = mn;
        }
    }

    /* Merge the DW·TPW states: each writes (m, l, acc) to shared memory. */
    __shared__ float st_m[DW * TPW][GMAX], st_l[DW * TPW][GMAX];
    __shared__ float st_acc[DW * TPW][GMAX][HD];
    int sid = warp * TPW + sub;
#pragma unroll
    for (int i = 0; i < GMAX; i++) {
        if (dl == 0) {
            st_m[sid][i] = m[i];
            st_l[sid][i] = l[i];
        }
#pragma unroll
        for (int k = 0; k < EPL; k++) st_acc[sid][i][dl * EPL + k] = acc[i][k];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < a.g * HD; e += DW * 32) {
        int i = e / HD, d = e % HD;
        float M = -INFINITY;
        for (int s = 0; s < DW * TPW; s++) M = fmaxf(M, st_m[s][i]);
        float L = 0, A = 0;
        if (M != -INFINITY)
            for (int s = 0; s < DW * TPW; s++) {
                float w = __expf(st_m[s][i] - M);
                L += st_l[s][i] * w;
                A += st_acc[s][i][d] * w;
            }
        int h = kvh * a.g + i;
        if (a.n_splits > 1) {
            float *p = a.part + (((int64_t)row * a.nq + h) * a.n_splits + split) * (HD + 2);
            p[2 + d] = A;
            if (d == 0) {
                p[0] = M;
                p[1] = L;
            }
        } else {
            a.o[(int64_t)row * a.ldo + (int64_t)h * HD + d] = f2bf(L > 0 ? A / L : 0.0f);
        }
    }
}

/* One CTA of HD threads per (row, query head): merges the splits' partials. */
template <int HD>
__global__ void k_attn_combine(decode_args a) {
    int row = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    pdl_launch_next();
    pdl_wait();
    if (a.flash && flash_tile_ok(a.row_seq, a.n_rows, row - row % FLASH_TILE, FLASH_TILE)) return;
    const float *p = a.part + ((int64_t)row * a.nq + h) * a.n_splits * (HD + 2);
    float M = -INFINITY;
    for (int s = 0; s < a.n_splits; s++) M = fmaxf(M, p[s * (HD + 2)]);
    float L = 0, A = 0;
    if (M != -INFINITY)
        for (int s = 0; s < a.n_splits; s++) {
            float w = __expf(p[s * (HD + 2)] - M);
            L += p[s * (HD + 2) + 1] * w;
            A += p[s * (HD + 2) + 2 + d] * w;
        }
    a.o[(int64_t)row * a.ldo + (int64_t)h * HD + d] = f2bf(L > 0 ? A / L : 0.0f);
}

template <int HD, int GMAX, typename KT>
static void launch_decode(const cuda_ctx *cx, const decode_args &a, int n_kv) {
    dim3 grid((unsigned)a.n_rows, (unsigned)n_kv, (unsigned)a.n_splits);
    constexpr int EPL = sizeof(KT) == 1 && GMAX <= 4 ? 16 : 8;
    launch(cx, k_attn_decode<HD, GMAX, KT, EPL>, grid, dim3(DW * 32), 0, a);
    if (a.n_splits > 1) launch(cx, k_attn_combine<HD>, dim3((unsigned)a.n_rows, (unsigned)a.nq), dim3(HD), 0, a);
}

template <int HD, typename KT>
static void launch_decode_g(const cuda_ctx *cx, const decode_args &a, int n_kv) {
    if (a.g == 1) launch_decode<HD, 1, KT>(cx, a, n_kv);
    else if (a.g == 2) launch_decode<HD, 2, KT>(cx, a, n_kv);
    else if (a.g <= 4) launch_decode<HD, 4, KT>(cx, a, n_kv);
    else launch_decode<HD, 8, KT>(cx, a, n_kv);
}

template <typename KT>
static void launch_decode_hd(const cuda_ctx *cx, const decode_args &a, int hd, int n_kv) {
    if (hd == 16) launch_decode_g<16, KT>(cx, a, n_kv);
    else if (hd == 32) launch_decode_g<32, KT>(cx, a, n_kv);
    else if (hd == 64) launch_decode_g<64, KT>(cx, a, n_kv);
    else if (hd == 128) launch_decode_g<128, KT>(cx, a, n_kv);
    else launch_decode_g<256, KT>(cx, a, n_kv);
}

int iris_cuda_attn_paged(iris_backend *b, const iris_tensor *q, const iris_kv_layer *kv, const iris_attn_meta *meta,
                         int n_q_heads, iris_tensor *o) {
    cuda_ctx *c = cuda_of(b);
    int hd = kv->head_dim, nkv = kv->n_kv_heads;
    if (q->dtype != IRIS_DT_BF16 || o->dtype != IRIS_DT_BF16 ||
        (kv->dtype != IRIS_DT_BF16 && kv->dtype != IRIS_DT_F8_E4M3))
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda attn_paged: q and o must be BF16, the cache BF16 or F8_E4M3");
    if (hd != 16 && hd != 32 && hd != 64 && hd != 128 && hd != 256)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda attn_paged: head_dim %d (16, 32, 64, 128 or 256)", hd);
    if (nkv <= 0 || n_q_heads % nkv || n_q_heads / nkv > 8)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda attn_paged: %d query heads over %d kv heads (groups of 1..8)",
                              n_q_heads, nkv);
    if (q->rows != meta->n_rows || o->rows != meta->n_rows || q->cols < (int64_t)n_q_heads * hd ||
        o->cols < (int64_t)n_q_heads * hd)
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda attn_paged: q [%lld,%lld], o [%lld,%lld] for %d rows of %d x %d",
                              (long long)q->rows, (long long)q->cols, (long long)o->rows, (long long)o->cols,
                              meta->n_rows, n_q_heads, hd);
    if (tld(q) % 8 || !is_aligned16(q->data))
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda attn_paged: q rows must be 16-byte aligned");
    if (meta->n_rows <= 0) return 0;

    decode_args a;
    memset(&a, 0, sizeof a);
    a.q = (const bf16 *)q->data;
    a.ldq = tld(q);
    a.kc = kv->k;
    a.vc = kv->v;
    a.kvw = (int64_t)nkv * hd;
    a.o = (bf16 *)o->data;
    a.ldo = tld(o);
    a.row_seq = meta->row_seq;
    a.row_ctx = meta->row_ctx;
    a.block_tables = meta->block_tables;
    a.max_blocks = meta->max_blocks;
    a.n_rows = meta->n_rows;
    a.nq = n_q_heads;
    a.g = n_q_heads / nkv;
    a.scale = 1.0f / sqrtf((float)hd);
    a.part = c->attn_part;

    /* Split long contexts when the rows alone do not fill the GPU: ~2 CTAs per SM.  The plan sees
     * the table width rounded up to IRIS_ATTN_PLAN_BLOCKS, so a graph captured on a wider table
     * (text.c) has the same split boundaries (its extra trailing splits are empty and add exact
     * zeros in the combine). */
    int plan_blocks = (meta->max_blocks + IRIS_ATTN_PLAN_BLOCKS - 1) / IRIS_ATTN_PLAN_BLOCKS * IRIS_ATTN_PLAN_BLOCKS;
    int max_ctx = plan_blocks * IRIS_KV_BLOCK, want = 4 * c->prop.multiProcessorCount;
    int splits = 1, ctas = meta->n_rows * nkv;
    if (ctas < want && max_ctx > 64) {
        splits = (want + ctas - 1) / ctas;
        /* at least attn_min_keys keys a split (a warp's walk is a chain of dependent loads).  H100,
         * iris bench, 1,024-token context, batch 1: 16, 32, 64, 128, 256 keys gave 2B-FP8 523, 530,
         * 511, 468, 409 tok/s and 4B-FP8 275, 272, 273, 253, 224 (IRIS_CUDA_ATTN_MIN_KEYS=N); with
         * the plan on rounded widths, 32 vs 64: 2B-FP8 526 vs 511 (GPU tests 15/15 with each). */
        int by_len = (max_ctx + c->attn_min_keys - 1) / c->attn_min_keys;
        if (splits > by_len) splits = by_len;
        while (splits > 1 && (size_t)meta->n_rows * n_q_heads * splits * (hd + 2) > c->attn_part_elems) splits--;
    }
    int blocks_per = (plan_blocks + splits - 1) / splits;
    a.chunk = blocks_per * IRIS_KV_BLOCK;
    a.n_splits = (meta->max_blocks + blocks_per - 1) / blocks_per;
    if (a.n_splits < 1) a.n_splits = 1;

    a.flash = meta->n_rows >= FLASH_MIN_ROWS && flash_head_dim_ok(hd);
    if (a.flash) {
        int rc = iris_cuda_flash_paged(b, q, kv, meta, n_q_heads, o);
        if (rc) return rc;
    }
    if (kv->dtype == IRIS_DT_F8_E4M3) launch_decode_hd<kv8>(c, a, hd, nkv);
    else launch_decode_hd<bf16>(c, a, hd, nkv);
    return iris_cuda_check(b, "attn_paged");
}

int iris_cuda_attn_segments(iris_backend *b, const iris_tensor *qkv, int n_heads, int head_dim, const int *cu_seqlens,
                            int n_seg, iris_tensor *o) {
    if (qkv->dtype != IRIS_DT_BF16 || o->dtype != IRIS_DT_BF16)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda attn_segments: qkv and o must be BF16");
    if (!flash_head_dim_ok(head_dim))
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda attn_segments: head_dim %d (16, 32, 64 or 128)", head_dim);
    int64_t w = (int64_t)n_heads * head_dim;
    if (qkv->cols < 3 * w || o->cols < w || o->rows != qkv->rows || tld(qkv) % 8 || !is_aligned16(qkv->data))
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda attn_segments: qkv [%lld,%lld], o [%lld,%lld] for %d heads of %d",
                              (long long)qkv->rows, (long long)qkv->cols, (long long)o->rows, (long long)o->cols, n_heads,
                              head_dim);
    if (n_seg < 0 || (n_seg > 0 && (cu_seqlens[0] < 0 || cu_seqlens[n_seg] > qkv->rows)))
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda attn_segments: segments end at %d past %lld rows",
                              n_seg > 0 ? cu_seqlens[n_seg] : 0, (long long)qkv->rows);
    for (int s = 0; s < n_seg; s++)
        if (cu_seqlens[s + 1] < cu_seqlens[s])
            return iris_cuda_fail(b, IRIS_EINVAL, "cuda attn_segments: cu_seqlens decreases at %d", s);
    return iris_cuda_flash_segments(b, qkv, n_heads, head_dim, cu_seqlens, n_seg, o);
}
