/* cuda_attn.cu: paged attention for decode rows (GQA, split over long
 * contexts) and the dispatch of both attention ops.
 *
 * attn_paged launches two kernels on the same rows: a flash kernel (cuda_attn_mma.cu,
 * cuda_attn_wgmma.cu, or cuda_attn_flash.cu's WMMA one) takes the 64-row tiles of one
 * sequence (prefill), k_attn_decode every other row (cuda_attn.cuh says which).  With
 * the host's attention tiles and lone rows (iris_attn_meta) each kernel is launched
 * over its own list; without them over every tile and row, each skipping the other's.
 *
 * k_attn_decode — thread mapping: a CTA of 4 warps per (row, kv head, context
 * split); it computes all the query heads that share the kv head (the GQA
 * group), so each K/V row is read once for them.  Within a warp, HD/8 lanes
 * hold one key row (16-byte loads, 8 dims a lane) and the warp walks 32/(HD/8)
 * keys at a time; each (warp, key lane-group) keeps its own online-softmax
 * state (max, sum, 8 dims of the output per head) in registers, updated once
 * for the DU keys a warp step has loaded (one rescale a chunk, not a key: H200,
 * batch 64 at a 1,024-token context, 2B-FP8 14,572 -> 15,103 tok/s); the states
 * are merged through shared memory at the end.  Memory-bound: every visible
 * K and V row of the kv head is read once per row, DU warp steps' loads in
 * flight at once (a walk one key row at a time is a chain of round trips).
 * Contexts are split into chunks of whole cache blocks (at least ATTN_MIN_KEYS
 * keys) until the rows give 2 or 4 CTAs an SM (iris_cuda_attn_ctas_per_sm); their partial (max,
 * sum, output) go to the scratch carved at open, and the last CTA of a (row,
 * kv head) to finish merges them (flash-decoding without a second kernel: a
 * counter per (row, kv head), also carved at open, says which is last).
 * Without the lists, the host's sequence count (iris_attn_meta.n_seqs) settles two
 * shapes: a step of one sequence launches decode CTAs only for the rows the flash
 * kernel leaves (a prefill's tail of < FLASH_MIN_ROWS rows), not a CTA per row that
 * would return at once; and always, a decode-only step (one row a sequence) launches no
 * flash kernel, and its CTAs load their first keys before waiting on the
 * kernel before them (only the row's newest key is this step's).
 * For decode-only steps of up to QK_ATTN_MAX_ROWS rows the kernel also does qk_norm_rope_kv (QK
 * below): one kernel and one wait less on the step's critical path (2B-FP8 batch 1, traced:
 * ~12.9 + 2.5 -> ~14.4 us a layer).  At batch 1 only about one of its CTAs an SM fits beside the
 * q/k/v GEMV's (registers), hence 2 CTAs an SM for a single row (attn_paged has the figures).
 * Numerics: scores and softmax in fp32 (scale 1/sqrt(HD) folded into q), the
 * output rounded once to bf16.  The cache is BF16 or E4M3 (kv8, half the bytes
 * read); both kernels are templates over the element type.
 * Steps of 8 decode rows or more with GQA groups of 4 (4B, 8B) over a BF16 cache of 128-dim
 * heads take k_attn_decode_tc instead: the same CTAs, splits and merges, the products on the
 * tensor cores (iris_cuda_attn_tc has the rule and its measurements). */
#include "cuda_attn.cuh"

#define DW 4 /* warps per decode CTA */
#define ATTN_MAX_SPLITS 64 /* context splits of a row at most (the merge's shared memory) */
#define ATTN_MIN_KEYS 32   /* keys a context split takes at least (measured in attn_paged) */
#define QK_ATTN_MAX_HD 128 /* head sizes the decode kernel also does qk_norm_rope_kv for (static shared memory) */
/* Rows (sequences) of a decode step up to which it does: H100, iris bench at a 1,024-token context,
 * the two kernels vs this one alternating (3 runs 2B, 2 runs 4B): 2B-FP8 batch 1 601 -> 612 tok/s,
 * batch 8 3,613 -> 3,646, batch 64 13,135 -> 13,037; 4B-FP8 batch 1 301 -> 303, batch 8 1,800 ->
 * 1,781, batch 64 5,969 -> 5,868 (every CTA of a split row normalizes its query heads again). */
#define QK_ATTN_MAX_ROWS 4

struct decode_args {
    const bf16 *q;
    int64_t ldq;
    const void *kc, *vc; /* bf16 or kv8 */
    int64_t kvw; /* n_kv * HD */
    bf16 *o;
    int64_t ldo;
    const int32_t *row_seq, *row_ctx, *block_tables;
    int max_blocks, n_rows, nq, g, chunk, n_splits;
    int row0;    /* the first row the launch covers (the rows before are all the flash kernel's) */
    const int32_t *rows; /* or the rows it covers (iris_attn_meta.lone_rows: none is the flash kernel's) */
    int n_launch;        /* rows the launch covers; partials and counters are indexed by the launch's row */
    int decode_only; /* one row a sequence: a row's only key written this step is its newest */
    int flash;   /* the flash kernel runs too: skip its rows */
    float scale;
    float *part; /* [n_rows, nq, n_splits, HD + 2] when n_splits > 1 */
    int *count;  /* [n_rows, n_kv] when n_splits > 1: the splits done, back to 0 after the merge */
};

/* One lane's EPL cache elements of one key row, loaded now and widened to fp32 later (so that a
 * warp's loads of several keys are all in flight before the first is used).  EPL is 8 (BF16: 16
 * bytes), or 16 for an E4M3 cache with groups of at most 4 (16 bytes again, so as many bytes in
 * flight as for BF16), else 8 (E4M3: 8 bytes). */
template <typename KT, int EPL> struct kv_raw;
template <> struct kv_raw<bf16, 8> {
    uint4 v;
    __device__ __forceinline__ void load(const bf16 *p) { v = *(const uint4 *)p; }
    __device__ __forceinline__ void get(float *f) const {
        const bf16 *e = (const bf16 *)&v;
#pragma unroll
        for (int k = 0; k < 8; k++) f[k] = bf2f(e[k]);
    }
};
template <> struct kv_raw<kv8, 16> {
    uint4 v;
    __device__ __forceinline__ void load(const kv8 *p) { v = *(const uint4 *)p; }
    __device__ __forceinline__ void get(float *f) const { kv8_widen<8>((const __nv_fp8x2_storage_t *)&v, f); }
};
template <> struct kv_raw<kv8, 8> {
    uint2 v;
    __device__ __forceinline__ void load(const kv8 *p) { v = *(const uint2 *)p; }
    __device__ __forceinline__ void get(float *f) const { kv8_widen<4>((const __nv_fp8x2_storage_t *)&v, f); }
};

#define DU 4 /* warp steps whose key loads are in flight together */

/* QK: the kernel also does qk_norm_rope_kv for its rows (iris_cuda_qk_norm_rope_attn; decode-only
 * steps): each CTA normalizes and rotates its GQA group's query heads itself (warp i head i, into
 * shared memory, rounded to bf16 as that op writes them), and the CTA whose split holds the row's
 * newest key does the k head and v: their cache codes go to the cache slot and to shared memory,
 * where the key walk takes them instead of reloading the slot.  One kernel and one wait less on
 * the step's critical path; the same values in the same order. */
template <int QK> struct qk_of { qk_args a; };
template <> struct qk_of<0> {};

/* QK: the CTA's GQA group's query heads normalized and rotated into qs_q (warp i head i), and for
 * the split of the newest key (own) the k head and v, their cache codes into qs_k / qs_v and the
 * cache slot; the values qk_norm_rope_kv writes, in its order. */
template <int HD, int GMAX, int HM, typename KT>
static __device__ __forceinline__ void attn_qk_heads(const decode_args &a, const qk_args &q, int row, int kvh, bool own,
                                                     int warp, int lane, const float *wq, const float *wk,
                                                     const float *sn, const float *cs, float (*qs_x)[HD],
                                                     float (*qs_q)[HD], KT *qs_k, KT *qs_v) {
    for (int hi = warp; hi < a.g + own; hi += DW) {
        if (hi < a.g) { /* query head kvh·g + hi */
            qk_head<HM>(a.q + (int64_t)row * a.ldq + (int64_t)(kvh * a.g + hi) * HD, wq, sn, cs, qs_x[warp], q.eps,
                        HD, lane, [&](int j, bf16 o0, bf16 o1) {
                            qs_q[hi][j] = bf2f(o0);
                            qs_q[hi][j + HD / 2] = bf2f(o1);
                        });
            continue;
        }
        /* the k head and v: their cache codes here and in the slot */
        int64_t sl = q.slot[row], at = sl * a.kvw + (int64_t)kvh * HD;
        bool to_cache = sl >= 0 && sl < q.n_slots;
        qk_head<HM>(q.k + (int64_t)row * q.ldk + (int64_t)kvh * HD, wk, sn, cs, qs_x[warp], q.eps, HD, lane,
                    [&](int j, bf16 o0, bf16 o1) {
                        kv_store(&qs_k[j], o0);
                        kv_store(&qs_k[j + HD / 2], o1);
                    });
        const bf16 *vr = q.v + (int64_t)row * q.ldv + (int64_t)kvh * HD;
        for (int e = lane; e < HD; e += 32) kv_store(&qs_v[e], vr[e]);
        __syncwarp();
        for (int e = lane; to_cache && e < HD; e += 32)
            ((KT *)a.kc)[at + e] = qs_k[e], ((KT *)a.vc)[at + e] = qs_v[e];
    }
    __syncthreads();
}

/* NS online-softmax states (m, l, acc) in shared memory merged: the output of the (row, kv head)'s
 * query heads when the context is not split, else this split's partial (max, sum, unnormalized
 * output) for attn_merge_splits. */
template <int HD, int GMAX, int NS>
static __device__ __forceinline__ void attn_merge_states(const decode_args &a, int row, int kvh, int split,
                                                         const float (*st_m)[GMAX], const float (*st_l)[GMAX],
                                                         const float (*st_acc)[GMAX][HD]) {
    __syncthreads();
    for (int e = threadIdx.x; e < a.g * HD; e += DW * 32) {
        int i = e / HD, d = e % HD;
        float M = -INFINITY;
        for (int s = 0; s < NS; s++) M = fmaxf(M, st_m[s][i]);
        float L = 0, A = 0;
        if (M != -INFINITY)
            for (int s = 0; s < NS; s++) {
                float w = __expf(st_m[s][i] - M);
                L += st_l[s][i] * w;
                A += st_acc[s][i][d] * w;
            }
        int h = kvh * a.g + i;
        if (a.n_splits > 1) {
            float *p = a.part + (((int64_t)blockIdx.x * a.nq + h) * a.n_splits + split) * (HD + 2);
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

/* The DW·TPW walkers' states from their registers into shared memory (st_*), then merged
 * (attn_merge_states). */
template <int HD, int GMAX, int EPL, int DW_TPW>
static __device__ __forceinline__ void attn_merge_walkers(const decode_args &a, int row, int kvh, int split, int sid,
                                                          int dl, const float (&m)[GMAX], const float (&l)[GMAX],
                                                          const float (&acc)[GMAX][EPL], float (*st_m)[GMAX],
                                                          float (*st_l)[GMAX], float (*st_acc)[GMAX][HD]) {
#pragma unroll
    for (int i = 0; i < GMAX; i++) {
        if (dl == 0) {
            st_m[sid][i] = m[i];
            st_l[sid][i] = l[i];
        }
#pragma unroll
        for (int k = 0; k < EPL; k++) st_acc[sid][i][dl * EPL + k] = acc[i][k];
    }
    attn_merge_states<HD, GMAX, DW_TPW>(a, row, kvh, split, st_m, st_l, st_acc);
}

/* Split contexts (flash-decoding): the last of the (row, kv head)'s CTAs to finish merges the
 * splits' partials, in split order (the same sums whichever CTA is last), and re-arms the
 * counter for the next launch.  The merge is a few round trips to L2, not one a split: every
 * split's (max, sum) is loaded at once into shared memory and turned into its weight there,
 * then each output sums its splits with the loads of 32 splits in flight.  sw, sl, sL: shared memory. */
template <int HD, int GMAX>
static __device__ __forceinline__ void attn_merge_splits(const decode_args &a, int row, int kvh, int warp, int lane,
                                                         int &last, float (*sw)[GMAX], float (*sl)[GMAX], float *sL) {
    __syncthreads();
    if (threadIdx.x == 0) last = split_count_last(a.count + (int64_t)blockIdx.x * gridDim.y + kvh, a.n_splits);
    __syncthreads();
    if (!last) return;
    const float *ph = a.part + ((int64_t)blockIdx.x * a.nq + kvh * a.g) * a.n_splits * (HD + 2); /* head i, split s */
    for (int e = threadIdx.x; e < a.n_splits * a.g; e += DW * 32) {
        int s = e / a.g, i = e % a.g;
        const float *p = ph + ((int64_t)i * a.n_splits + s) * (HD + 2);
        sw[s][i] = __ldcg(p);
        sl[s][i] = __ldcg(p + 1);
    }
    __syncthreads();
    for (int i = warp; i < a.g; i += DW) { /* a warp a head, a lane a split (and the split 32 on) */
        float M = -INFINITY, L = 0;
        for (int s = lane; s < a.n_splits; s += 32) M = fmaxf(M, sw[s][i]);
        M = warp_max(M);
        for (int s = lane; s < a.n_splits; s += 32) {
            float w = M == -INFINITY ? 0.0f : __expf(sw[s][i] - M);
            L += sl[s][i] * w;
            sw[s][i] = w;
        }
        L = warp_sum(L);
        if (lane == 0) sL[i] = L;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < a.g * HD; e += DW * 32) {
        int i = e / HD, d = e % HD;
        const float *p = ph + (int64_t)i * a.n_splits * (HD + 2) + 2 + d;
        float A = 0;
        for (int s0 = 0; s0 < a.n_splits; s0 += 32) { /* 32 splits' loads in flight, then their sum in order */
            float v[32];
#pragma unroll
            for (int s = 0; s < 32; s++) v[s] = s0 + s < a.n_splits ? __ldcg(p + (int64_t)(s0 + s) * (HD + 2)) : 0.0f;
#pragma unroll
            for (int s = 0; s < 32; s++)
                if (s0 + s < a.n_splits) A += v[s] * sw[s0 + s][i];
        }
        a.o[(int64_t)row * a.ldo + (int64_t)(kvh * a.g + i) * HD + d] = f2bf(sL[i] > 0 ? A / sL[i] : 0.0f);
    }
}

template <int HD, int GMAX, typename KT, int EPL, int QK>
__global__ void __launch_bounds__(DW * 32) k_attn_decode(decode_args a, const qk_of<QK> qa) {
    constexpr int LPT = HD / EPL, TPW = 32 / LPT, STEP = DW * TPW; /* lanes per key, keys per warp step */
    constexpr int HM = HD / 2 < 32 ? 32 : HD / 2;
    int row = a.rows ? a.rows[blockIdx.x] : a.row0 + blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
    pdl_launch_next();
    int warp = threadIdx.x / 32, lane = threadIdx.x & 31, sub = lane / LPT, dl = lane % LPT;
    const int64_t col = (int64_t)kvh * HD + dl * EPL;
    int seq = 0, ctx = 0, j_begin = 0, j_end = 0, first = 0;
    const int32_t *bt = NULL;
    auto meta = [&]() {
        seq = a.row_seq[row], ctx = a.row_ctx[row];
        j_begin = split * a.chunk, j_end = min(ctx, j_begin + a.chunk), first = j_begin + warp * TPW;
        bt = a.block_tables + (int64_t)seq * a.max_blocks;
    };
    /* The warp takes keys base, base + STEP, ... (TPW at a time, lane group `sub` one of them); DU
     * such steps' loads are issued before the first is used (a key past the split's end loads the
     * split's last key instead and is not used). */
    kv_raw<KT, EPL> kr[DU], vr[DU];
    auto load_key = [&](int u, int j) { /* key j's K and V (this lane's elements) into slot u */
        int64_t slot = (int64_t)bt[j / IRIS_KV_BLOCK] * IRIS_KV_BLOCK + j % IRIS_KV_BLOCK;
        kr[u].load((const KT *)a.kc + slot * a.kvw + col);
        vr[u].load((const KT *)a.vc + slot * a.kvw + col);
    };
    auto key_of = [&](int base0, int u) { return min(base0 + u * STEP + sub, j_end - 1); };
    /* The step's metadata is uploaded before its first kernel, and in a decode-only step every key a
     * row sees but its own newest one (ctx - 1, which this step's qk_norm_rope_kv writes) was written
     * by earlier steps: both may be read before pdl_wait, so the first round of K/V loads overlaps
     * the kernels before this one (cuda_internal.cuh, programmatic dependent launch). */
    if (a.decode_only) {
        meta();
        if (first < j_end)
#pragma unroll
            for (int u = 0; u < DU; u++) load_key(u, key_of(first, u));
    }
    /* QK: the norm weights and the row's angles before pdl_wait too (qk_norm_rope_kv's early reads) */
    __shared__ float qs_inv[QK ? HM : 1], qs_x[QK ? DW : 1][QK ? HD : 1], qs_q[QK ? GMAX : 1][QK ? HD : 1];
    __shared__ int qs_dim[QK ? HM : 1];
    __shared__ __align__(16) KT qs_k[QK ? HD : 8], qs_v[QK ? HD : 8];
    float wq[QK ? 2 * HM / 32 : 1], wk[QK ? 2 * HM / 32 : 1], sn[QK ? HM / 32 : 1], cs[QK ? HM / 32 : 1];
    const bool own = QK && split == (ctx - 1) / a.chunk; /* the split of the newest key */
    if constexpr (QK) {
        for (int j = threadIdx.x; j < HD / 2; j += DW * 32) qs_inv[j] = qa.a.inv_freq[j], qs_dim[j] = qa.a.dim_of[j];
        __syncthreads();
        qk_weights<HM>(wq, qa.a.qw, qa.a.qwdt, HD, lane);
        if (own) qk_weights<HM>(wk, qa.a.kw, qa.a.kwdt, HD, lane);
        qk_angles<HM>(sn, cs, qa.a.pos, qa.a.pos_stride, HD, row, qs_inv, qs_dim, lane);
    }
    pdl_wait();
    if (a.flash && !a.rows && flash_tile_ok(a.row_seq, a.n_rows, row - row % FLASH_TILE, FLASH_TILE)) return;
    if (!a.decode_only) meta();

    if constexpr (QK) attn_qk_heads<HD, GMAX, HM>(a, qa.a, row, kvh, own, warp, lane, wq, wk, sn, cs, qs_x, qs_q, qs_k, qs_v);

    float qf[GMAX][EPL], acc[GMAX][EPL], m[GMAX], l[GMAX];
#pragma unroll
    for (int i = 0; i < GMAX; i++) {
        m[i] = -INFINITY;
        l[i] = 0;
#pragma unroll
        for (int k = 0; k < EPL; k++) acc[i][k] = qf[i][k] = 0;
        if (QK && i < a.g) {
#pragma unroll
            for (int k = 0; k < EPL; k++) qf[i][k] = qs_q[i][dl * EPL + k] * a.scale;
        } else if (i < a.g) {
#pragma unroll
            for (int h = 0; h < EPL / 8; h++) {
                uint4 v = *(const uint4 *)(a.q + (int64_t)row * a.ldq + (int64_t)(kvh * a.g + i) * HD + dl * EPL + h * 8);
                const bf16 *e = (const bf16 *)&v;
#pragma unroll
                for (int k = 0; k < 8; k++) qf[i][h * 8 + k] = bf2f(e[k]) * a.scale;
            }
        }
    }
    for (int base0 = first; base0 < j_end; base0 += DU * STEP) {
        /* (loaded before pdl_wait: only the newest key again) */
        bool early = a.decode_only && base0 == first;
#pragma unroll
        for (int u = 0; u < DU; u++) {
            int j = key_of(base0, u);
            if (QK && j == ctx - 1) { /* this step's key: from shared memory (QK) */
                kr[u].v = *(const decltype(kr[u].v) *)(qs_k + dl * EPL);
                vr[u].v = *(const decltype(vr[u].v) *)(qs_v + dl * EPL);
            } else if (!early || j == ctx - 1) {
                load_key(u, j);
            }
        }
        /* The DU keys' scores for every head, then a head's max, rescale and updates once for them
         * (the online softmax a chunk of keys at a time: one exponential and one rescale of the
         * accumulators a chunk, not a key).  A key past the split's end scores -inf. */
        float sc[DU][GMAX];
#pragma unroll
        for (int u = 0; u < DU; u++) {
            const bool valid = base0 + u * STEP + sub < j_end;
            float kf[EPL];
            if (valid) {
                kr[u].get(kf);
            } else {
#pragma unroll
                for (int k = 0; k < EPL; k++) kf[k] = 0;
            }
#pragma unroll
            for (int i = 0; i < GMAX; i++) {
                if (i >= a.g) break;
                float s = 0;
#pragma unroll
                for (int k = 0; k < EPL; k++) s = fmaf(qf[i][k], kf[k], s);
#pragma unroll
                for (int off = LPT / 2; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
                sc[u][i] = valid ? s : -INFINITY;
            }
        }
#pragma unroll
        for (int i = 0; i < GMAX; i++) {
            if (i >= a.g) break;
            float mx = sc[0][i];
#pragma unroll
            for (int u = 1; u < DU; u++) mx = fmaxf(mx, sc[u][i]);
            const float mn = fmaxf(m[i], mx);
            if (mn == -INFINITY) continue; /* no key yet for this lane group */
            const float corr = __expf(m[i] - mn); /* 0 from m = -inf, where l and acc are 0 */
            l[i] *= corr;
#pragma unroll
            for (int k = 0; k < EPL; k++) acc[i][k] *= corr;
            m[i] = mn;
        }
#pragma unroll
        for (int u = 0; u < DU; u++) {
            if (base0 + u * STEP + sub >= j_end) continue;
            float vf[EPL];
            vr[u].get(vf);
#pragma unroll
            for (int i = 0; i < GMAX; i++) {
                if (i >= a.g) break;
                const float p = __expf(sc[u][i] - m[i]);
                l[i] += p;
#pragma unroll
                for (int k = 0; k < EPL; k++) acc[i][k] = fmaf(p, vf[k], acc[i][k]);
            }
        }
    }

    /* Merge the DW·TPW states through shared memory. */
    __shared__ float st_m[DW * TPW][GMAX], st_l[DW * TPW][GMAX];
    __shared__ float st_acc[DW * TPW][GMAX][HD];
    __shared__ int last;
    attn_merge_walkers<HD, GMAX, EPL, DW * TPW>(a, row, kvh, split, warp * TPW + sub, dl, m, l, acc, st_m, st_l, st_acc);
    if (a.n_splits == 1) return;

    __shared__ float sw[ATTN_MAX_SPLITS][GMAX], sl[ATTN_MAX_SPLITS][GMAX], sL[GMAX];
    attn_merge_splits<HD, GMAX>(a, row, kvh, warp, lane, last, sw, sl, sL);
}

/* k_attn_decode_tc: the decode rows of many-row steps (BF16 cache, 128-dim heads) on the tensor
 * cores.  A CTA of DW warps per (row, kv head, context split) as k_attn_decode; a warp takes whole
 * 16-key cache blocks (w, w + DW, ...) and turns each into two mma.sync products: S = Q·Kᵀ (the
 * GQA group's query heads the rows of one m16 tile, the rest zero; K's fragments loaded straight
 * from the cache, 16 bytes a lane, with the dot product's terms permuted so that a lane's four
 * 16-byte pieces of its key are its B fragments, and Q's the same) and O += P·V (P from S's
 * accumulators as bf16, V staged in shared memory and read by ldmatrix.trans): a few instructions a
 * key where k_attn_decode's FMAs and shuffles grow with the group (iris_cuda_attn_tc says when).
 * Numerics: scores in fp32 (scale applied to them), P rounded to bf16 for its product (as the flash
 * kernels and transformers' eager attention do), fp32 sums, one rounding of the output. */
__global__ void __launch_bounds__(DW * 32) k_attn_decode_tc(decode_args a) {
    constexpr int HD = 128, GMAX = 4, VP = HD + 8; /* V rows padded: ldmatrix's 8 rows in distinct banks */
    static_assert(IRIS_KV_BLOCK % 16 == 0, "a warp's 16 keys lie in one cache block");
    int row = a.rows ? a.rows[blockIdx.x] : a.row0 + blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
    pdl_launch_next();
    int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    __shared__ __align__(16) bf16 vs[DW][2][16][VP];
    __shared__ float st_m[DW][GMAX], st_l[DW][GMAX];
    __shared__ float st_acc[DW][GMAX][HD];
    __shared__ int last;
    pdl_wait();
    if (a.flash && !a.rows && flash_tile_ok(a.row_seq, a.n_rows, row - row % FLASH_TILE, FLASH_TILE)) return;
    const int seq = a.row_seq[row], ctx = a.row_ctx[row];
    const int j_begin = split * a.chunk, j_end = min(ctx, j_begin + a.chunk);
    const int32_t *bt = a.block_tables + (int64_t)seq * a.max_blocks;
    const int64_t col = (int64_t)kvh * HD;
    /* Q: lane (g, t) holds head g's pieces 4u + t (u < 4: dims 8 (4u + t) .. + 8) unscaled */
    uint32_t qa[4][4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
        uint4 v = make_uint4(0, 0, 0, 0);
        if (g < a.g) v = *(const uint4 *)(a.q + (int64_t)row * a.ldq + (int64_t)(kvh * a.g + g) * HD + (4 * u + t) * 8);
        qa[u][0] = v.x, qa[u][1] = v.y, qa[u][2] = v.z, qa[u][3] = v.w;
    }
    float o[HD / 8][4], m = -INFINITY, l = 0;
#pragma unroll
    for (int n = 0; n < HD / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
    /* a block's loads: V (lane l stages key l / 2's half l % 2, 8 pieces) into stage st, and K's pieces
     * 4u + t of keys j0 + nt * 8 + g into kn; keys past the end repeat the last one.  The next
     * block's are in flight while this one is computed. */
    uint4 kn[2][4];
    auto issue = [&](int j0, int st) {
        const int64_t blk = (int64_t)bt[j0 / IRIS_KV_BLOCK] * IRIS_KV_BLOCK;
        int kk = lane >> 1, jv = min(j0 + kk, j_end - 1) - j0;
        const bf16 *src = (const bf16 *)a.vc + (blk + jv) * a.kvw + col + (lane & 1) * 64;
#pragma unroll
        for (int c = 0; c < 8; c++) cp_async16(&vs[warp][st][kk][(lane & 1) * 64 + c * 8], src + c * 8);
        cp_async_commit();
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            int jk = min(j0 + nt * 8 + g, j_end - 1) - j0;
            const uint4 *kp = (const uint4 *)((const bf16 *)a.kc + (blk + jk) * a.kvw + col);
#pragma unroll
            for (int u = 0; u < 4; u++) kn[nt][u] = kp[4 * u + t];
        }
    };
    int j0 = j_begin + warp * 16, st = 0;
    if (j0 < j_end) issue(j0, 0);
    for (; j0 < j_end; j0 += DW * 16, st ^= 1) {
        uint4 kr[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int u = 0; u < 4; u++) kr[nt][u] = kn[nt][u];
        const bool more = j0 + DW * 16 < j_end;
        if (more) issue(j0 + DW * 16, st ^ 1);
        /* S for keys j0 + nt * 8 + g */
        float sacc[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0;
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const uint32_t kw[4] = {kr[nt][u].x, kr[nt][u].y, kr[nt][u].z, kr[nt][u].w};
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint32_t af[4] = {qa[u][2 * h], 0u, qa[u][2 * h + 1], 0u};
                    mma16816(sacc[nt], af, kw[2 * h], kw[2 * h + 1]);
                }
            }
        }
        /* the online softmax of row g over these 16 keys (lanes t of a row hold 4 of them) */
        float sv[4] = {sacc[0][0], sacc[0][1], sacc[1][0], sacc[1][1]}, mx = -INFINITY;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int j = j0 + (e >> 1) * 8 + 2 * t + (e & 1);
            sv[e] = j < j_end ? sv[e] * a.scale : -INFINITY;
            mx = fmaxf(mx, sv[e]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(m, mx), corr = __expf(m - mn); /* the block has a valid key: mn finite */
        m = mn;
        l *= corr;
        float p[4];
#pragma unroll
        for (int e = 0; e < 4; e++) p[e] = __expf(sv[e] - mn), l += p[e];
#pragma unroll
        for (int n = 0; n < HD / 8; n++) o[n][0] *= corr, o[n][1] *= corr;
        const uint32_t pa[4] = {pack_bf16(p[0], p[1]), 0u, pack_bf16(p[2], p[3]), 0u};
        if (more) cp_async_wait<1>(); /* this block's V; the next one's may still be on its way */
        else cp_async_wait<0>();
        __syncwarp();
        /* O += P · V: ldmatrix.trans gives V's B fragments for dims n0 .. n0 + 15 */
        const int mi = lane >> 3, rr = lane & 7;
#pragma unroll
        for (int n0 = 0; n0 < HD; n0 += 16) {
            uint32_t vb[4];
            ldsm_x4<1>(vb, &vs[warp][st][(mi & 1) * 8 + rr][n0 + (mi >> 1) * 8]);
            mma16816(o[n0 / 8], pa, vb[0], vb[1]);
            mma16816(o[n0 / 8 + 1], pa, vb[2], vb[3]);
        }
        __syncwarp(); /* every lane's ldmatrix done before the block after next lands in this stage */
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (g < a.g) {
        if (t == 0) st_m[warp][g] = m, st_l[warp][g] = l;
#pragma unroll
        for (int n = 0; n < HD / 8; n++) st_acc[warp][g][n * 8 + 2 * t] = o[n][0], st_acc[warp][g][n * 8 + 2 * t + 1] = o[n][1];
    }
    attn_merge_states<HD, GMAX, DW>(a, row, kvh, split, st_m, st_l, st_acc);
    if (a.n_splits == 1) return;
    __shared__ float sw[ATTN_MAX_SPLITS][GMAX], sl[ATTN_MAX_SPLITS][GMAX], sL[GMAX];
    attn_merge_splits<HD, GMAX>(a, row, kvh, warp, lane, last, sw, sl, sL);
}

template <int HD, int GMAX, typename KT>
static void launch_decode(const cuda_ctx *cx, const decode_args &a, int n_kv, const qk_args *qk) {
    dim3 grid((unsigned)a.n_launch, (unsigned)n_kv, (unsigned)a.n_splits);
    constexpr int EPL = sizeof(KT) == 1 && GMAX <= 4 ? 16 : 8;
    if constexpr (HD <= QK_ATTN_MAX_HD) /* (the host takes the two ops past it) */
        if (qk) {
            launch(cx, k_attn_decode<HD, GMAX, KT, EPL, 1>, grid, dim3(DW * 32), 0, a, qk_of<1>{*qk});
            return;
        }
    launch(cx, k_attn_decode<HD, GMAX, KT, EPL, 0>, grid, dim3(DW * 32), 0, a, qk_of<0>{});
}

template <int HD, typename KT>
static void launch_decode_g(const cuda_ctx *cx, const decode_args &a, int n_kv, const qk_args *qk) {
    if (a.g == 1) launch_decode<HD, 1, KT>(cx, a, n_kv, qk);
    else if (a.g == 2) launch_decode<HD, 2, KT>(cx, a, n_kv, qk);
    else if (a.g <= 4) launch_decode<HD, 4, KT>(cx, a, n_kv, qk);
    else launch_decode<HD, 8, KT>(cx, a, n_kv, qk);
}

template <typename KT>
static void launch_decode_hd(const cuda_ctx *cx, const decode_args &a, int hd, int n_kv, const qk_args *qk) {
    if (hd == 16) launch_decode_g<16, KT>(cx, a, n_kv, qk);
    else if (hd == 32) launch_decode_g<32, KT>(cx, a, n_kv, qk);
    else if (hd == 64) launch_decode_g<64, KT>(cx, a, n_kv, qk);
    else if (hd == 128) launch_decode_g<128, KT>(cx, a, n_kv, qk);
    else launch_decode_g<256, KT>(cx, a, n_kv, qk);
}

/* The CTAs an SM decode attention's context splits aim at, for `rows` rows of GQA groups of `group`
 * (the measurements in attn_paged). */
extern "C" int iris_cuda_attn_ctas_per_sm(int rows, int group) {
    return rows == 1 || (group >= 4 ? rows <= 24 : rows >= 32) ? 2 : 4;
}

/* Decode rows take k_attn_decode_tc for GQA groups of 4 (4B, 8B; BF16 cache, 128-dim heads) from 8
 * rows.  H200, iris bench at a 1,024-token context, k_attn_decode vs this kernel, two runs: 4B-FP8
 * batch 64 6,662, 6,671 -> 9,528, 9,527 tok/s, batch 8 2,147, 2,164 -> 2,467, 2,439, 1 MP images/s
 * 29.44 -> 32.41; 2B-FP8's groups of 2 gain too little to switch (batch 64 16,833, 16,683 ->
 * 17,235, 17,103, batch 8 4,666, 4,604 -> 4,558, 4,534, images/s 52.34 -> 52.51): k_attn_decode's
 * work a key grows with the group, this kernel's does not. */
extern "C" int iris_cuda_attn_tc(int rows, int group, int hd, int kv_bf16) {
    return kv_bf16 && hd == 128 && group == 4 && rows >= 8;
}

/* The context splits of the tensor-core decode kernel for `ctas` (row, kv head) pairs on `sms` SMs,
 * before the context's length bounds them: its registers hold 2 CTAs an SM, so the fewest splits
 * that fill those slots once; where the rows alone fill them (one split), two if that fills the
 * last wave of slots better by a tenth (384 pairs on 132 SMs: 1.45 waves unsplit, 2.9 split).
 * H200, 4B-FP8, iris bench, k_attn_decode's rule (4 CTAs an SM past 24 rows) vs 2 CTAs an SM and
 * then this rule, two runs each, batch 32 / 48 / 64: 1,024-token context 6,160, 6,158 / 8,014,
 * 8,061 / 9,452, 9,501 -> 6,298, 6,330 / 8,060, 8,064 / 10,205, 10,196 tok/s; 256 tokens 7,403,
 * 7,388 / 10,197, 10,181 / 12,673, 12,660 -> 7,564, 7,570 / 10,177, 10,198 / 13,979, 13,906; 4,096
 * tokens 3,841, 3,860 / 4,503, 4,528 / 4,913, 4,932 -> 3,878, 3,897 / 4,531, 4,508 / 5,024, 5,017
 * (2 CTAs an SM without the second split at 48 rows: 4,185, 4,186).  A split more at 8 and 16 rows
 * lost 2-3% at 256 tokens and gained 3-7% at 4,096: not taken. */
extern "C" int iris_cuda_attn_tc_splits(int ctas, int sms) {
    const long slots = 2L * sms;
    if (ctas < slots) return (int)((slots + ctas - 1) / ctas);
    auto fill = [slots](long w) { return (double)w / (double)((w + slots - 1) / slots * slots); };
    return fill(2L * ctas) > fill(ctas) + 0.1 ? 2 : 1;
}

/* attn_paged; with qk (a decode-only step), the decode kernel also does qk_norm_rope_kv's work. */
static int attn_paged(iris_backend *b, const iris_tensor *q, const iris_kv_layer *kv, const iris_attn_meta *meta,
                      int n_q_heads, iris_tensor *o, const qk_args *qk) {
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
    a.count = c->attn_count;

    /* The rows this launch covers: with the flash kernel, only the rows it leaves — the lone rows
     * the host listed with its tiles, or a single sequence's tail; the rest return at once.  H100,
     * 2B-FP8, 64 images of 1 MP at a time: the launches over prefill steps' 8,192 rows took 109 ms
     * of 1.67 s (CUPTI); the rows of 64-row tiles straddling two sequences, taken by this kernel one
     * by one, 170 ms of 3.5 s.  With the host's tiles (each sequence's from its first row) against
     * neither list: 35.3-35.7 -> 37.3-37.4 images/s (4B-FP8 22.6-23.0 -> 23.9-24.3). */
    a.decode_only = meta->n_seqs == meta->n_rows;
    iris_attn_meta m = *meta; /* the lists, where both kernels take them (not the WMMA kernel) */
    const int lists = m.tiles && m.lone_rows && c->attn_impl != 1 && flash_head_dim_ok(hd) && !a.decode_only;
    if (!lists) m.tiles = m.lone_rows = NULL, m.n_tiles = m.n_lone = 0;
    a.flash = !a.decode_only && meta->n_rows >= FLASH_MIN_ROWS && flash_head_dim_ok(hd) && (!lists || m.n_tiles > 0);
    if (a.flash) {
        int rc = iris_cuda_flash_paged(b, q, kv, &m, n_q_heads, o);
        if (rc) return rc;
    }
    if (lists) {
        a.rows = m.lone_rows;
        a.n_launch = m.n_lone;
    } else {
        if (a.flash && meta->n_seqs == 1) { /* every whole tile is the flash kernel's, and a tail of FLASH_MIN_ROWS or more */
            int tail = meta->n_rows % FLASH_TILE;
            a.row0 = tail == 0 || tail >= FLASH_MIN_ROWS ? meta->n_rows : meta->n_rows - tail;
        }
        a.n_launch = meta->n_rows - a.row0;
    }
    if (a.n_launch <= 0) return iris_cuda_check(b, "attn_paged");

    /* Split long contexts when the rows alone do not fill the GPU: 2 CTAs an SM for a single row, for
     * up to 24 rows of GQA groups of 4 or more and for 32 rows or more of smaller groups, 4 otherwise
     * (iris_cuda_attn_ctas_per_sm; H100, 1,024 tokens: 4B-FP8 16 rows 2,896 -> 3,109 tok/s with 2,
     * 2B-FP8 32 rows 8,300 -> 8,740; docs/performance.md has the whole sweep); the tensor-core kernel
     * by its own rule (iris_cuda_attn_tc_splits).  The plan sees the
     * table width rounded up to IRIS_ATTN_PLAN_BLOCKS, so a graph captured on a wider table
     * (engine/runner.c) has the same split boundaries (its extra trailing splits are empty and add
     * exact zeros in the combine). */
    int plan_blocks = (meta->max_blocks + IRIS_ATTN_PLAN_BLOCKS - 1) / IRIS_ATTN_PLAN_BLOCKS * IRIS_ATTN_PLAN_BLOCKS;
    int max_ctx = plan_blocks * IRIS_KV_BLOCK;
    const int tc = !qk && iris_cuda_attn_tc(a.n_launch, a.g, hd, kv->dtype == IRIS_DT_BF16);
    const int want = iris_cuda_attn_ctas_per_sm(a.n_launch, a.g) * c->prop.multiProcessorCount;
    int splits = 1, ctas = a.n_launch * nkv;
    const int asked = tc ? iris_cuda_attn_tc_splits(ctas, c->prop.multiProcessorCount) : (want + ctas - 1) / ctas;
    if (asked > 1 && max_ctx > 64) {
        splits = asked;
        /* at least ATTN_MIN_KEYS keys a split (a warp's walk is a chain of dependent loads).  H100,
         * iris bench, 1,024-token context, batch 1: 16, 32, 64, 128, 256 keys gave 2B-FP8 523, 530,
         * 511, 468, 409 tok/s and 4B-FP8 275, 272, 273, 253, 224 (the count forced); with
         * the plan on rounded widths, 32 vs 64: 2B-FP8 526 vs 511 (GPU tests 15/15 with each). */
        int by_len = (max_ctx + ATTN_MIN_KEYS - 1) / ATTN_MIN_KEYS;
        if (splits > by_len) splits = by_len;
        while (splits > 1 && (size_t)a.n_launch * n_q_heads * splits * (hd + 2) > c->attn_part_elems) splits--;
        if (splits > ATTN_MAX_SPLITS) splits = ATTN_MAX_SPLITS;
        if ((size_t)ctas > c->attn_count_n) splits = 1;
    }
    int blocks_per = (plan_blocks + splits - 1) / splits;
    a.chunk = blocks_per * IRIS_KV_BLOCK;
    a.n_splits = (meta->max_blocks + blocks_per - 1) / blocks_per;
    if (a.n_splits < 1) a.n_splits = 1;
    if (tc) {
        dim3 grid((unsigned)a.n_launch, (unsigned)nkv, (unsigned)a.n_splits);
        launch(c, k_attn_decode_tc, grid, dim3(DW * 32), 0, a);
    } else if (kv->dtype == IRIS_DT_F8_E4M3) launch_decode_hd<kv8>(c, a, hd, nkv, qk);
    else launch_decode_hd<bf16>(c, a, hd, nkv, qk);
    return iris_cuda_check(b, qk ? "qk_norm_rope_attn" : "attn_paged");
}

int iris_cuda_attn_paged(iris_backend *b, const iris_tensor *q, const iris_kv_layer *kv, const iris_attn_meta *meta,
                         int n_q_heads, iris_tensor *o) {
    return attn_paged(b, q, kv, meta, n_q_heads, o, NULL);
}

/* backend.h's qk_norm_rope_attn: one kernel for a decode-only step (k_attn_decode<..., QK = 1>), else
 * the two ops.  iris_cuda_set_qk_attn(b, 0) (tests) or IRIS_CUDA_FUSED=0 keeps the two kernels. */
int iris_cuda_qk_norm_rope_attn(iris_backend *b, iris_tensor *q, iris_tensor *k, const iris_tensor *v,
                                const iris_tensor *qw, const iris_tensor *kw, float eps, int n_q_heads,
                                const int32_t *pos, int pos_stride, const int *dim_of, const float *inv_freq,
                                iris_kv_layer *kv, const iris_attn_meta *meta, iris_tensor *o) {
    if (!cuda_of(b)->qk_attn || meta->n_seqs != meta->n_rows || meta->n_rows <= 0 || meta->n_rows > QK_ATTN_MAX_ROWS ||
        kv->head_dim > QK_ATTN_MAX_HD) {
        int rc = b->qk_norm_rope_kv(b, q, k, v, qw, kw, eps, n_q_heads, pos, pos_stride, dim_of, inv_freq, kv, meta);
        return rc ? rc : iris_cuda_attn_paged(b, q, kv, meta, n_q_heads, o);
    }
    qk_args a;
    int rc = iris_cuda_qk_args(b, q, k, v, qw, kw, eps, n_q_heads, pos, pos_stride, dim_of, inv_freq, kv, meta, &a);
    return rc ? rc : attn_paged(b, q, kv, meta, n_q_heads, o, &a);
}

int iris_cuda_attn_segments(iris_backend *b, const iris_tensor *qkv, int n_heads, int head_dim, const int *cu_seqlens,
                            int n_seg, iris_tensor *o) {
    if (qkv->dtype != IRIS_DT_BF16 || o->dtype != IRIS_DT_BF16)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda attn_segments: qkv and o must be BF16");
    if (!flash_head_dim_ok(head_dim) && head_dim != 72)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda attn_segments: head_dim %d (16, 32, 64, 72 or 128)",
                              head_dim);
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
