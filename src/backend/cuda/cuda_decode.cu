/* cuda_decode.cu: the persistent decode kernel, k_decode_stack: every decoder layer of a
 * decode-only step of 1..4 sequences in one launch, for FP8 checkpoints on sm_90 and newer
 * (backend.h decode_layers; cuda_decode_launch.cu decides which steps it takes and launches it).
 *
 * Why: op by op, a batch-1 layer is ~9 kernels whose every boundary drains the GPU (each GEMV
 * fills the SMs' registers, so the next kernel's early weight loads wait for its end; the
 * latency-bound steps leave the memory idle): 2B-FP8 batch 1 629 tok/s op by op, 771-782 here (H100).
 * Thread mapping: one CTA an SM (all resident: grid barriers), DS_WARPS consumer warps and
 * DS_PRODUCERS producer warps.  The producers stream every weight tile of the step, in one fixed
 * order, into a ring of shared-memory slots (bulk copies completing on mbarriers; chunk n is
 * producer n % DS_PRODUCERS's) as fast as slots free up, through barriers and attention alike; the
 * consumers take the slots in the same order.  setmaxnreg hands the producers' registers to the
 * consumers (56 and 224 a thread; 2B 781-789 -> 790-804 tok/s on an H200).
 * Per layer, five phases, a grid barrier (a counter zeroed before the launch; release add, acquire
 * spin) after each but the first:
 *   1. x = rms_norm(h) · input_layernorm (each CTA for itself, into shared memory); the q/k/v GEMV,
 *      its 16-row tiles round the CTAs, its values out as tagged 64-bit words (value and tag in one
 *      word: a reader sees both or neither) that the attention takes as they come, so no barrier
 *      before it (2B 803-806 -> 805-809 tok/s); the writers zero them after the next barrier;
 *   2. attention: items (row, kv head, context split) round the CTAs: the GQA group's q/k norms and
 *      rotary (the split with the newest key also writes k and v to the cache), an online softmax
 *      over 64 keys a round, and the last split of a (row, kv head) to finish merges the partials;
 *   3. o_proj, added into h;  4. x = rms_norm(h) · post_attention_layernorm, gate and up (a tile
 *      holds both), silu(gate) · up into g;  5. down_proj, added into h.
 * A GEMV phase whose whole tiles share out unevenly over the CTAs goes stream-K (ds_pieces).  A
 * chunk is 16 rows x cw columns (512, or 256 / 128 for narrow models) with its block scales; warp w
 * takes the tile's 64-column super-steps w, w + 8, ... on the tensor cores as cuda_gemv_mma.cu does
 * (bf16(q · scale), mma.sync m16n8k16, fp32), the warps' sums added in warp order.
 * Bound: by latency at batch 1, not by bytes or arithmetic: a 2B layer takes ~35 us against ~16.5 us
 * of weight bytes at full bandwidth; the GEMV phases run at the consumers' pace (~700 cycles a
 * chunk, its slot already full), and the barriers and the attention are the latencies of a memory
 * the stream keeps busy (docs/performance.md, "CUDA backend", has the measurements).
 * Coherence: activations written in the kernel are read back with ld.global.cg (L2, not the SM's
 * own L1) after the barrier or tag that publishes them.
 * Numerics: the ops' roundings (rms_norm, qk_norm_rope_kv, attn_paged, the residual adds,
 * silu_mul); the products' sums run in another order than the per-op GEMVs' (another split of the
 * columns), as between any two GEMV schedules. */
#include "cuda_decode.cuh"

/* arch- or family-specific targets (sm_90a, sm_120a, sm_120f, ...): the registers moved from the
 * producers to the consumers (k_decode_stack; plain sm_90 / sm_120 have no setmaxnreg) */
#if defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 900
#define DS_SETMAXNREG 1
#else
#define DS_SETMAXNREG 0
#endif

/* The device code is sm_90's (bulk copies, mbarrier waits): older targets compile the kernel empty
 * (never launched there: the host declines before sm_90). */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define DS_DEVICE 1

/* ---- mbarriers, bulk copies, barriers ---- */

static __device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void mbar_init(uint64_t *b, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
static __device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity) {
    asm volatile("{\n .reg .pred p;\n W_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W_%=;\n}\n" ::"r"(
                     smem_u32(b)),
                 "r"(parity)
                 : "memory");
}
static __device__ __forceinline__ void mbar_arrive(uint64_t *b) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_u32(b)) : "memory");
}
static __device__ __forceinline__ void mbar_arrive_tx(uint64_t *b, unsigned tx) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(smem_u32(b)),
                 "r"(tx)
                 : "memory");
}
/* bytes (a multiple of 16, both ends 16-byte aligned) global → shared, completing on bar; pol: an L2
 * cache policy (the weight stream's: evict first, producer) */
static __device__ __forceinline__ void bulk_g2s(void *dst, const void *src, unsigned bytes, uint64_t *bar, uint64_t pol) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(pol)
                 : "memory");
#endif
}
/* 4 bytes global → shared, arriving on bar once there (an arrival bar's count includes) */
static __device__ __forceinline__ void cp4_arrive(void *dst, const void *src, uint64_t *bar) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%2];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(smem_u32(bar))
                 : "memory");
}
/* A stream-K partial sum as one 64-bit word, the value's bits and a tag: a reader on another SM
 * sees both or neither (ds_pieces). */
#define DS_TAG 0xa5a5a5a500000000ull
static __device__ __forceinline__ void st_tagged(unsigned long long *p, float v) {
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(DS_TAG | __float_as_uint(v)) : "memory");
}
static __device__ __forceinline__ void st_tagged_clear(unsigned long long *p) {
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(0ull) : "memory");
}
static __device__ __forceinline__ unsigned long long ld_tagged(const unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
/* the consumer warps only (the producer runs on its own) */
static __device__ __forceinline__ void cons_sync() { asm volatile("bar.sync 1, %0;" ::"n"(DS_WARPS * 32) : "memory"); }

/* Every CTA's consumers reach the barrier; what each wrote before is visible to all after it. */
static __device__ __forceinline__ void grid_sync(unsigned *bar, unsigned &target) {
    cons_sync();
    target += gridDim.x;
    if (threadIdx.x == 0) { /* release: the CTA's writes (ordered before by the bar.sync) go first */
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bar) : "memory");
        unsigned v;
        do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(bar) : "memory");
        while (v < target);
    }
    cons_sync();
}

/* ---- the weight tiles: the same order for the producer and the consumers ---- */

static __device__ __forceinline__ int ph_tiles(const ds_args &a, int ph) { return a.tiles[ph]; }
static __device__ __forceinline__ int ph_k(const ds_args &a, int ph) { return ds_k(ph, a.H, a.FF, a.nq); }
/* The tagged word of row r of [q; k; v] for the step's row tok. */
static __device__ __forceinline__ unsigned long long *qkv_at(const ds_args &a, int tok, int r) {
    return a.qkvt + ((int64_t)tok * ph_tiles(a, 0) * 16 + r);
}
/* Matrix m (0, or 1 = up in phase 2) of tile `tile` of phase ph: its weight, scales, first row. */
static __device__ __forceinline__ int ph_mat(const ds_args &a, int ph, int tile, int m, int *r0) {
    int r = tile * 16;
    *r0 = r;
    if (ph == 0) {
        int nq = a.nq * DS_HD, nk = a.nkv * DS_HD;
        if (r < nq) return W_Q;
        *r0 = r - nq >= nk ? r - nq - nk : r - nq;
        return r - nq >= nk ? W_V : W_K;
    }
    return ph == 1 ? W_O : ph == 3 ? W_D : m ? W_U : W_G;
}

/* Which chunks of phase ph's tiles this CTA takes.  By default whole tiles, b, b + grid, ...; where
 * that shares out unevenly (4B's o_proj and down_proj: 160 tiles of 8 and 19 chunks over 132 CTAs,
 * so some CTAs take two tiles and the phase waits for them), stream-K: the phase's chunks in
 * tile-major order are cut into runs of a.run[ph] (the even share, rounded up), CTA b's from
 * b · run.  A tile cut between runs is finished by the CTA of its first piece, at the end of that
 * CTA's run: the later pieces, each at the start of its CTA's run, are done by then and left their
 * sums in a.gpart, each value in one 64-bit word with a tag (no fence, no counter: the finisher's
 * load sees both or neither); the finisher adds them in piece order and clears the tags
 * (gemv_phase).  The producer and the consumers walk the same pieces. */
/* phase ph's run (0: whole tiles) in the kernel for stream-K mask SKM (-1: any, from a.run) */
template <int SKM>
static __device__ __forceinline__ int ph_run(const ds_args &a, int ph) {
    return SKM < 0 || ((SKM >> ph) & 1) ? a.run[ph] : 0;
}
struct ds_pieces {
    int run, nch, tiles, lo, hi, tile;
    __device__ ds_pieces(const ds_args &a, int ph, int run_) {
        run = run_, nch = ph_k(a, ph) / a.cw, tiles = ph_tiles(a, ph);
        lo = blockIdx.x * run, hi = min(lo + run, tiles * nch);
        tile = run ? lo / nch : blockIdx.x;
    }
    __device__ bool more() const { return run ? tile * nch < hi : tile < tiles; }
    __device__ int c0() const { return run ? max(lo - tile * nch, 0) : 0; }
    __device__ int c1() const { return run ? min(hi - tile * nch, nch) : nch; }
    __device__ void next() { tile += run ? 1 : gridDim.x; }
};

template <int SKM>
static __device__ void producer(const ds_args &a, ds_head &S, uint8_t *ring, int lane, int p) {
    const int cw = a.cw, nsc = cw / 128;
    unsigned n = 0;
    /* the stream's lines leave L2 first: each is read once, and what the latency chain passes
     * between CTAs (h, the attention's partials, the barrier) stays */
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    for (int il = 0; il < a.n_layers; il++)
        for (int ph = 0; ph < 4; ph++) {
            const int K = ph_k(a, ph), mats = ph == 2 ? 2 : 1, scols = (K + 127) / 128;
            for (ds_pieces pc(a, ph, ph_run<SKM>(a, ph)); pc.more(); pc.next())
                for (int c = pc.c0(), tile = pc.tile; c < pc.c1(); c++)
                    for (int m = 0; m < mats; m++, n++) {
                        if (n % DS_PRODUCERS != (unsigned)p) continue;
                        int slot = n % a.ring, r0;
                        if (n >= (unsigned)a.ring) mbar_wait(&S.empty[slot], ((n / a.ring) - 1) & 1);
                        int wi = ph_mat(a, ph, tile, m, &r0);
                        const uint8_t *W = a.L[il].w[wi] + (int64_t)r0 * K + (int64_t)c * cw;
                        const float *sc = a.L[il].s[wi] + (int64_t)(r0 / 128) * scols + c * nsc;
                        uint8_t *dst = ring + (size_t)slot * a.slot_bytes;
                        if (lane == 0) mbar_arrive_tx(&S.full[slot], 16u * cw);
                        __syncwarp();
                        if (lane < 16)
                            bulk_g2s(dst + lane * (cw + DS_PAD), W + (int64_t)lane * K, (unsigned)cw, &S.full[slot], pol);
                        else if (lane < 16 + nsc)
                            cp4_arrive(dst + 16 * (cw + DS_PAD) + (lane - 16) * 4, sc + (lane - 16), &S.full[slot]);
                    }
        }
}

/* ---- the consumers' phases ---- */

/* The norm weight's 8-value pieces a consumer thread normalizes (i = 8·tid + 2048·k, H <= 4096),
 * fetched before the barrier that precedes the norm (they depend on nothing). */
struct ds_normw {
    uint4 w[2];
};
static __device__ __forceinline__ ds_normw norm_weights(const ds_args &a, const void *w) {
    ds_normw r;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        int i = threadIdx.x * 8 + k * DS_WARPS * 256;
        if (i < a.H) r.w[k] = __ldg((const uint4 *)((const bf16 *)w + i));
    }
    return r;
}

/* x_s[t] = rms_norm(h[t]) · w for the step's rows (rms_norm's roundings), h read once. */
static __device__ void prep_norm(const ds_args &a, const ds_normw &w, bf16 *x_s, ds_head &S) {
    const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31;
    uint4 hv[DS_MAX_ROWS][2];
#pragma unroll
    for (int t = 0; t < DS_MAX_ROWS; t++)
#pragma unroll
        for (int k = 0; k < 2; k++) {
            int i = tid * 8 + k * DS_WARPS * 256;
            if (t < a.R && i < a.H) hv[t][k] = __ldcg((const uint4 *)(a.h + (int64_t)t * a.H + i));
        }
#pragma unroll
    for (int t = 0; t < DS_MAX_ROWS; t++) {
        if (t >= a.R) break;
        float ss = 0;
#pragma unroll
        for (int k = 0; k < 2; k++) {
            int i = tid * 8 + k * DS_WARPS * 256;
            const bf16 *e = (const bf16 *)&hv[t][k];
            if (i < a.H)
#pragma unroll
                for (int j = 0; j < 8; j++) ss += bf2f(e[j]) * bf2f(e[j]);
        }
        ss = warp_sum(ss);
        if (lane == 0) S.ss[warp][t] = ss;
    }
    cons_sync();
#pragma unroll
    for (int t = 0; t < DS_MAX_ROWS; t++) {
        if (t >= a.R) break;
        float tot = 0;
        for (int i = 0; i < DS_WARPS; i++) tot += S.ss[i][t];
        float inv = rsqrtf(tot / (float)a.H + a.eps);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            int i = tid * 8 + k * DS_WARPS * 256;
            if (i >= a.H) continue;
            const bf16 *e = (const bf16 *)&hv[t][k], *we = (const bf16 *)&w.w[k];
            uint4 o;
            bf16 *oe = (bf16 *)&o;
#pragma unroll
            for (int j = 0; j < 8; j++) oe[j] = f2bf(bf2f(we[j]) * round_bf16(bf2f(e[j]) * inv));
            *(uint4 *)(x_s + t * a.xld + i) = o;
        }
    }
    cons_sync();
}

/* x_s[t] = src[t] (K values a row, written by other CTAs in this kernel). */
static __device__ void prep_copy(const ds_args &a, const bf16 *src, int K, bf16 *x_s) {
    for (int t = 0; t < a.R; t++)
        for (int i = threadIdx.x * 8; i < K; i += DS_WARPS * 256)
            *(uint4 *)(x_s + t * a.xld + i) = __ldcg((const uint4 *)(src + (int64_t)t * K + i));
    cons_sync();
}

/* Where the consumers are in the ring: the next chunk's slot and the parity of its fill. */
struct ds_cursor {
    int slot;
    unsigned parity;
};

/* The tiles of phase PH (0 q/k/v, 1 o_proj, 2 gate/up, 3 down_proj) this CTA owns.  A chunk holds
 * ss = cw / 64 super-steps of its tile; of chunk ch, warp w takes super-step w % ss when ch ≡ w / ss
 * (mod DS_WARPS / ss), so each super-step of the tile is one warp's.  Chunk q of a tile belongs to
 * matrix q % mats (gate, up alternate).  The loop keeps its indices by increments: at decode sizes a
 * division per chunk was as much work as the products (Nsight Compute: 241 instructions a
 * super-step, 96 of them the dequantization). */
template <int PH, int SKM>
static __device__ void gemv_phase(const ds_args &a, ds_head &S, const uint8_t *ring, const bf16 *x_s, ds_cursor &cur) {
    constexpr int mats = PH == 2 ? 2 : 1;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int cw = a.cw, ss = cw / 64, per = DS_WARPS / ss;
    const int my_j = warp % ss, my_grp = warp / ss, rs = cw + DS_PAD;
    const int wcol = my_j * 64 + t * 16, sc_i = my_j / 2;
    const uint8_t *w_off = ring + g * rs + wcol;                       /* + the slot's offset */
    const bf16 *xb = x_s + min(g, a.R - 1) * a.xld + wcol;             /* + the chunk's columns */
    const unsigned slot_bytes = a.slot_bytes;
    for (ds_pieces pc(a, PH, ph_run<SKM>(a, PH)); pc.more(); pc.next()) {
        const int tile = pc.tile, c0 = pc.c0(), c1 = pc.c1();
        float c[2][1][4] = {};
        int chm = 0;
        /* o_proj, down_proj: the residual values the epilogue adds to, loaded now, not after the
         * products (what wrote them last, a phase or more ago, is behind a grid barrier) */
        bf16 h_old = f2bf(0.0f);
        if ((PH == 1 || PH == 3) && (int)(threadIdx.x >> 4) < a.R)
            h_old = __ldcg(a.h + (int64_t)(threadIdx.x >> 4) * a.H + tile * 16 + (threadIdx.x & 15));
        for (int ch = c0; ch < c1; ch++) {
            const bf16 *xp = xb + ch * cw;
#pragma unroll
            for (int m = 0; m < mats; m++) {
                /* the super-step's values into registers (every warp loads, only the owner multiplies:
                 * the loads stay unconditional, a conditional set spilled), then the slot is free
                 * for the producers before the products */
                mbar_wait(&S.full[cur.slot], cur.parity);
                const unsigned so = (unsigned)cur.slot * slot_bytes;
                const float sc = ((const float *)(ring + so + 16 * rs))[sc_i];
                const uint4 wa = *(const uint4 *)(w_off + so), wb = *(const uint4 *)(w_off + so + 8 * rs);
                const uint4 x0 = *(const uint4 *)xp, x1 = *(const uint4 *)(xp + 8);
                __syncwarp();
                if (lane == 0) mbar_arrive(&S.empty[cur.slot]);
                if (++cur.slot == a.ring) cur.slot = 0, cur.parity ^= 1;
                if (chm == my_grp) {
                    const uint32_t X[1][8] = {{x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w}};
                    step_mma<1>(c[m], wa, wb, sc, X);
                }
            }
            if (++chm == per) chm = 0;
        }
        /* c[m][0][0], [1]: row g, tokens 2t, 2t + 1; [2], [3]: row g + 8 */
#pragma unroll
        for (int m = 0; m < 2; m++) {
            if (m >= mats) break;
            float *rw = &S.u.red[warp][m][0][0];
            rw[g * 8 + 2 * t] = c[m][0][0];
            rw[g * 8 + 2 * t + 1] = c[m][0][1];
            rw[(g + 8) * 8 + 2 * t] = c[m][0][2];
            rw[(g + 8) * 8 + 2 * t + 1] = c[m][0][3];
        }
        cons_sync();
        int e = threadIdx.x, row = e & 15, tok = e >> 4;
        if (tok < a.R) {
            float s0 = 0, s1 = 0;
            for (int w = 0; w < DS_WARPS; w++) {
                s0 += S.u.red[w][0][row][tok];
                if (mats == 2) s1 += S.u.red[w][1][row][tok];
            }
            unsigned long long *gp = a.gpart + (tok * 16 + row) * mats;
            if (c0 > 0) { /* a stream-K piece that starts inside the tile: its sums for the tile's finisher */
                gp += (int64_t)blockIdx.x * DS_GP;
                st_tagged(gp, s0);
                if (mats == 2) st_tagged(gp + 1, s1);
            } else {
                if (c1 < pc.nch) /* the tile's first piece (the end of this CTA's run) finishes it */
                    for (int o = blockIdx.x + 1; o * pc.run < (tile + 1) * pc.nch; o++) { /* in piece order */
                        unsigned long long *w = gp + (int64_t)o * DS_GP, v0, v1 = DS_TAG;
                        do {
                            v0 = ld_tagged(w);
                            if (mats == 2) v1 = ld_tagged(w + 1);
                        } while ((v0 & DS_TAG) != DS_TAG || (v1 & DS_TAG) != DS_TAG);
                        st_tagged_clear(w);
                        if (mats == 2) st_tagged_clear(w + 1);
                        s0 += __uint_as_float((unsigned)v0);
                        if (mats == 2) s1 += __uint_as_float((unsigned)v1);
                    }
                const int r = tile * 16 + row; /* (q/k/v: the row of [q; k; v]) */
                if (PH == 0) { /* tagged, for the attention to take each value when its word has come */
                    st_tagged(qkv_at(a, tok, r), round_bf16(s0));
                } else if (PH == 2) { /* linear, linear, silu_mul */
                    float gg = round_bf16(s0), uu = round_bf16(s1);
                    a.gb[(int64_t)tok * a.FF + r] = f2bf(round_bf16(gg / (1.0f + expf(-gg))) * uu);
                } else { /* the linear's bf16 output added into the residual stream */
                    a.h[(int64_t)tok * a.H + r] = f2bf(bf2f(h_old) + round_bf16(s0));
                }
            }
        }
        cons_sync();
    }
}

/* The keys [*jb, *je) of context split `split` of a row of ctx keys (a.splits even pieces of at
 * least 16 keys); returns how many splits hold keys (the last holds the newest key).  The attention
 * and the block-table copy at the kernel's start both place their items by it. */
static __device__ __forceinline__ int ds_split_keys(const ds_args &a, int ctx, int split, int *jb, int *je) {
    const int chunk = max(16, (ctx + a.splits - 1) / a.splits);
    *jb = split * chunk, *je = min(ctx, *jb + chunk);
    return (ctx + chunk - 1) / chunk;
}

/* A head's 128 values from the q/k/v GEMV's tagged words (lane: 4 of them) into dst as bf16, each
 * word loaded again until its tag is there. */
static __device__ __forceinline__ void qkv_take(const unsigned long long *src, bf16 *dst, int lane) {
    unsigned long long w[4];
    bool miss;
    do {
#pragma unroll
        for (int j = 0; j < 4; j += 2)
            asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];" : "=l"(w[j]), "=l"(w[j + 1]) : "l"(src + lane * 4 + j) : "memory");
        miss = false;
#pragma unroll
        for (int j = 0; j < 4; j++) miss |= (w[j] & DS_TAG) != DS_TAG;
    } while (__any_sync(0xffffffffu, miss));
#pragma unroll
    for (int j = 0; j < 4; j++) dst[lane * 4 + j] = __float2bfloat16_rn(__uint_as_float((unsigned)w[j]));
}

/* After the grid barrier behind the attention: the CTA zeroes the tagged q/k/v words its tiles
 * wrote (the same threads write them in the next layer, after more barriers). */
template <int SKM>
static __device__ void qkv_clear(const ds_args &a) {
    for (ds_pieces pc(a, 0, ph_run<SKM>(a, 0)); pc.more(); pc.next()) {
        if (pc.c0() > 0) continue; /* a piece whose tile another CTA finished */
        const int e = threadIdx.x, row = e & 15, tok = e >> 4;
        if (tok < a.R) st_tagged_clear(qkv_at(a, tok, pc.tile * 16 + row));
    }
}

/* The attention item's prologue (warps < G + own; the caller's condition): warp i < G the query head
 * kvh·G + i (normalized, rotated, times the softmax scale, into A.q's quarters); warp G, for the
 * split that holds the newest key (own), the k head and v (into A.k / A.v and the cache slot). */
static __device__ __forceinline__ void attn_prologue(const ds_args &a, const ds_layer &L, ds_head &S, int row, int kvh,
                                                     int kvw, int G, bool isk, int warp, int lane, const float *wv) {
    ds_attn_smem &A = S.u.at;
    const float sn[2] = {S.sn[row][lane], S.sn[row][lane + 32]}, cs[2] = {S.cs[row][lane], S.cs[row][lane + 32]};
    /* the head's values from the q/k/v GEMV's tagged words (no grid barrier before the
     * attention: a word not yet come is loaded again), as bf16 into A.in (and v into A.v) */
    const unsigned long long *src = qkv_at(a, row, isk ? (a.nq + kvh) * DS_HD : (kvh * G + warp) * DS_HD);
    qkv_take(src, A.in[warp], lane);
    if (isk) qkv_take(src + a.nkv * DS_HD, A.v, lane);
    __syncwarp();
    if (!isk) {
        qk_head<64>(A.in[warp], wv, sn, cs, A.x[warp], a.eps, DS_HD, lane, [&](int j, bf16 o0, bf16 o1) {
            const int j1 = j + DS_HD / 2;
            A.q[warp][j / 32][j % 32] = bf2f(o0) * a.scale;
            A.q[warp][j1 / 32][j1 % 32] = bf2f(o1) * a.scale;
        });
    } else {
        qk_head<64>(A.in[warp], wv, sn, cs, A.x[warp], a.eps, DS_HD, lane, [&](int j, bf16 o0, bf16 o1) {
            A.k[j] = o0;
            A.k[j + DS_HD / 2] = o1;
        });
        int64_t sl = S.slot[row];
        if (sl >= 0 && sl < a.n_slots && lane < 16) {
            *(uint4 *)(L.kc + sl * kvw + kvh * DS_HD + lane * 8) = *(const uint4 *)&A.k[lane * 8];
            *(uint4 *)(L.vc + sl * kvw + kvh * DS_HD + lane * 8) = *(const uint4 *)&A.v[lane * 8];
        }
    }
}

/* The 8 warps' online-softmax states, in A, merged: the output of the item's query
 * heads when the row's context has one split (active), else this split's partial (max, sum,
 * unnormalized output) for attn_merge; returns where the (row, kv head)'s partials are. */
static __device__ __forceinline__ void attn_partials(const ds_args &a, const ds_attn_smem &A, int row, int kvh, int split,
                                                     int active, int G, const float *ph) {
    for (int e = threadIdx.x; e < G * DS_HD; e += DS_WARPS * 32) {
        int i = e / DS_HD, d = e % DS_HD;
        float M = -INFINITY;
        for (int w = 0; w < DS_WARPS; w++) M = fmaxf(M, A.m[w][i]);
        float Ls = 0, As = 0;
        if (M != -INFINITY)
            for (int w = 0; w < DS_WARPS; w++) {
                float wt = __expf(A.m[w][i] - M);
                Ls += A.l[w][i] * wt;
                As += A.acc[w][i][d] * wt;
            }
        if (active > 1) {
            float *p = (float *)ph + ((int64_t)i * a.splits + split) * (DS_HD + 2);
            p[2 + d] = As;
            if (d == 0) p[0] = M, p[1] = Ls;
        } else {
            a.o[(int64_t)row * a.nq * DS_HD + (int64_t)(kvh * G + i) * DS_HD + d] = f2bf(Ls > 0 ? As / Ls : 0.0f);
        }
    }
}

/* The last split of (row, kv head) to finish merges the splits' partials at ph into the output, in
 * split order (the caller's condition: active > 1). */
static __device__ __forceinline__ void attn_merge(const ds_args &a, ds_attn_smem &A, int row, int kvh, int active,
                                                  int G, int lane, const float *ph) {
    cons_sync();
    if (threadIdx.x == 0) A.last = split_count_last(a.count + (int64_t)row * a.nkv + kvh, active);
    cons_sync();
    if (A.last) {
        /* in one round trip: a thread's two outputs (head i, dimensions d and d + 1: the group's
         * heads over 64 threads each, a warp's of one head) load every split's values while
         * the warp's lanes load the head's splits' max and sum (lane s split s, and s + 32),
         * which shuffles then hand round */
        constexpr int NS = DS_MAX_SPLITS / 4;
        const int i = threadIdx.x / (DS_HD / 2), d = threadIdx.x % (DS_HD / 2) * 2;
        if (i < G) {
            const float *p = ph + (int64_t)i * a.splits * (DS_HD + 2);
            float2 v[NS];
            float mx[2], sm[2];
#pragma unroll
            for (int s = 0; s < NS; s++)
                v[s] = s < active ? __ldcg((const float2 *)(p + (int64_t)s * (DS_HD + 2) + 2 + d)) : make_float2(0, 0);
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int s = lane + 32 * u;
                mx[u] = s < active ? __ldcg(p + (int64_t)s * (DS_HD + 2)) : -INFINITY;
                sm[u] = s < active ? __ldcg(p + (int64_t)s * (DS_HD + 2) + 1) : 0.0f;
            }
            const float M = warp_max(fmaxf(mx[0], mx[1]));
            float w[2];
#pragma unroll
            for (int u = 0; u < 2; u++) w[u] = M == -INFINITY || mx[u] == -INFINITY ? 0.0f : __expf(mx[u] - M);
            const float Ls = warp_sum(sm[0] * w[0] + sm[1] * w[1]);
            float A0 = 0, A1 = 0;
            for (int s0 = 0; s0 < active; s0 += NS) {
                if (s0 > 0) /* past NS splits: another round trip */
#pragma unroll
                    for (int s = 0; s < NS; s++)
                        v[s] = s0 + s < active ? __ldcg((const float2 *)(p + (int64_t)(s0 + s) * (DS_HD + 2) + 2 + d))
                                               : make_float2(0, 0);
#pragma unroll
                for (int s = 0; s < NS; s++) {
                    const int sp = s0 + s;
                    const float ws = __shfl_sync(0xffffffffu, sp < 32 ? w[0] : w[1], sp % 32);
                    if (sp < active) A0 += v[s].x * ws, A1 += v[s].y * ws;
                }
            }
            bf16 *out = a.o + (int64_t)row * a.nq * DS_HD + (int64_t)(kvh * G + i) * DS_HD + d;
            out[0] = f2bf(Ls > 0 ? A0 / Ls : 0.0f);
            out[1] = f2bf(Ls > 0 ? A1 / Ls : 0.0f);
        }
    }
}

/* Phase 2: the attention items this CTA owns (the numbers of cuda_attn.cu's k_attn_decode, 64 keys
 * a round over 8 warps).  Entered straight from the q/k/v GEMV: each item's prologue takes its
 * heads' q/k/v as their tagged words come (qkv_take); its first keys and values are requested
 * before that. */
static __device__ void attn_phase(const ds_args &a, const ds_layer &L, ds_head &S) {
    ds_attn_smem &A = S.u.at;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int kvw = a.nkv * DS_HD, G = a.g, items = a.R * a.nkv * a.splits;
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
        const int row = item / (a.nkv * a.splits), kvh = item / a.splits % a.nkv, split = item % a.splits;
        const int ctx = S.ctx[row];
        int jb, je;
        const int active = ds_split_keys(a, ctx, split, &jb, &je);
        if (split >= active) continue;
        const bool own = split == active - 1; /* holds the newest key, ctx - 1 */
        /* its block-table entries: S.bt's copy (from entry S.bt0) for the CTA's first item */
        const bool cached = item == (int)blockIdx.x && S.nbt > 0;
        const int32_t *bt = cached ? S.bt : a.block_tables + (int64_t)S.seq[row] * a.max_blocks;
        const int bt0 = cached ? S.bt0 : 0;
        const int64_t col = (int64_t)kvh * DS_HD;
        /* The walk, in rounds of 64 keys a CTA: warp w takes keys base + 8w .. 8w + 7.  For q·k a lane
         * holds one key's quarter of the dimensions (key kk = lane / 4, dimensions 32·pt ..), loaded into
         * registers, and multiplies it by every query head's quarter (2 shuffles add the quarters: no
         * 16-lane sums); for p·v a lane holds 4 dimensions of every query head (lane·4 ..) and takes the
         * warp's 8 value rows from its own 2 KB of A.acc (cp.async; the walk leaves A.acc untouched until
         * its end).  The first round's keys and values are requested before the prologue, which
         * waits for the q/k/v GEMV's words. */
        const int kk = lane >> 2, pt = lane & 3;
        const int nr = (je - jb + 63) / 64;
        bf16 *const vs = (bf16 *)&A.acc[warp][0][0];
        auto slot_of = [&](int j) { return (int64_t)bt[j / IRIS_KV_BLOCK - bt0] * IRIS_KV_BLOCK + j % IRIS_KV_BLOCK; };
        auto newest = [&](int j) { return own && j == ctx - 1; }; /* this step's key: A.k / A.v after the prologue */
        uint4 kr[4];
        auto k_load = [&](int r) {
            const int j = min(jb + r * 64 + warp * 8 + kk, je - 1);
            if (newest(j)) return;
            const bf16 *src = L.kc + slot_of(j) * kvw + col + pt * 32;
#pragma unroll
            for (int c = 0; c < 4; c++) kr[c] = *(const uint4 *)(src + c * 8);
        };
        auto v_issue = [&](int r) { /* the warp's 8 value rows, 16 bytes a copy, 4 copies a lane */
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const int k = lane / 16 + 2 * t, j = jb + r * 64 + warp * 8 + k;
                if (j >= je || newest(j)) continue;
                cp_async16(vs + k * DS_HD + (lane % 16) * 8, L.vc + slot_of(j) * kvw + col + (lane % 16) * 8);
            }
        };
        const bool walks = jb + warp * 8 < je; /* the warp has keys in the first round (and so in none later if not) */
        if (walks) k_load(0), v_issue(0);
        const bool isk = warp == G;
        float wv[4];
        if (warp < G + own) qk_weights<64>(wv, isk ? L.kn : L.qn, a.qk_dt, DS_HD, lane);
        if (warp < G + own) attn_prologue(a, L, S, row, kvh, kvw, G, isk, warp, lane, wv);
        cons_sync();
        float acc[DS_GMAX][4], m[DS_GMAX], l[DS_GMAX];
#pragma unroll
        for (int i = 0; i < DS_GMAX; i++) {
            m[i] = -INFINITY, l[i] = 0;
#pragma unroll
            for (int d = 0; d < 4; d++) acc[i][d] = 0;
        }
        for (int r = 0; r < nr && walks; r++) {
            const int kb = jb + r * 64 + warp * 8; /* the warp's first key this round */
            if (kb >= je) break;
            const int j = kb + kk;
            const bool valid = j < je;
            if (newest(j))
#pragma unroll
                for (int c = 0; c < 4; c++) kr[c] = *(const uint4 *)(A.k + pt * 32 + c * 8);
            /* q·k: each 8 dimensions of the lane's quarter converted once, then every head's products
             * (two sums a head, for shorter chains) */
            float s0[DS_GMAX] = {0, 0, 0, 0}, s1[DS_GMAX] = {0, 0, 0, 0};
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const unsigned w[4] = {kr[c].x, kr[c].y, kr[c].z, kr[c].w};
                float kf[8];
#pragma unroll
                for (int e = 0; e < 4; e++) kf[e * 2] = __uint_as_float(w[e] << 16), kf[e * 2 + 1] = __uint_as_float(w[e] & 0xffff0000u);
#pragma unroll
                for (int i = 0; i < DS_GMAX; i++) {
                    if (i >= G) break;
                    const float4 qa = *(const float4 *)&A.q[i][pt][c * 8], qb = *(const float4 *)&A.q[i][pt][c * 8 + 4];
                    s0[i] = fmaf(qa.x, kf[0], s0[i]), s0[i] = fmaf(qa.y, kf[1], s0[i]);
                    s0[i] = fmaf(qa.z, kf[2], s0[i]), s0[i] = fmaf(qa.w, kf[3], s0[i]);
                    s1[i] = fmaf(qb.x, kf[4], s1[i]), s1[i] = fmaf(qb.y, kf[5], s1[i]);
                    s1[i] = fmaf(qb.z, kf[6], s1[i]), s1[i] = fmaf(qb.w, kf[7], s1[i]);
                }
            }
            float p[DS_GMAX] = {0, 0, 0, 0};
#pragma unroll
            for (int i = 0; i < DS_GMAX; i++) {
                if (i >= G) break;
                float s = s0[i] + s1[i];
                s += __shfl_xor_sync(0xffffffffu, s, 1);
                s += __shfl_xor_sync(0xffffffffu, s, 2);
                s = valid ? s : -INFINITY;
                float mr = s;
#pragma unroll
                for (int off = 4; off < 32; off <<= 1) mr = fmaxf(mr, __shfl_xor_sync(0xffffffffu, mr, off));
                const float mn = fmaxf(m[i], mr), corr = __expf(m[i] - mn); /* mr finite: key kb is valid */
                p[i] = __expf(s - mn);
                l[i] = l[i] * corr + p[i]; /* this lane's keys' share; the lanes' added at the end */
#pragma unroll
                for (int d = 0; d < 4; d++) acc[i][d] *= corr;
                m[i] = mn;
            }
            if (r + 1 < nr && kb + 64 < je) k_load(r + 1); /* the next round's keys while this one's run */
            cp_async_wait_all();
            __syncwarp(); /* every lane's value copies landed */
#pragma unroll
            for (int k = 0; k < 8; k++) {
                if (kb + k >= je) break;
                const bf16 *vrow = newest(kb + k) ? A.v : vs + k * DS_HD;
                const uint2 vw = *(const uint2 *)(vrow + lane * 4);
                const float vf[4] = {__uint_as_float(vw.x << 16), __uint_as_float(vw.x & 0xffff0000u), __uint_as_float(vw.y << 16),
                                     __uint_as_float(vw.y & 0xffff0000u)};
#pragma unroll
                for (int i = 0; i < DS_GMAX; i++) {
                    if (i >= G) break;
                    const float pk = __shfl_sync(0xffffffffu, p[i], k * 4);
#pragma unroll
                    for (int d = 0; d < 4; d++) acc[i][d] = fmaf(pk, vf[d], acc[i][d]);
                }
            }
            __syncwarp(); /* the value rows read before the next round's copies */
            if (r + 1 < nr && kb + 64 < je) v_issue(r + 1);
        }
        /* the warp's state into shared memory (its values' 2 KB of A.acc, read by now) */
#pragma unroll
        for (int i = 0; i < DS_GMAX; i++) {
#pragma unroll
            for (int off = 4; off < 32; off <<= 1) l[i] += __shfl_xor_sync(0xffffffffu, l[i], off);
            if (i < G) {
                if (lane == 0) A.m[warp][i] = m[i], A.l[warp][i] = l[i];
                *(float4 *)&A.acc[warp][i][lane * 4] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            }
        }
        cons_sync();
        const float *ph = a.part + ((int64_t)row * a.nq + kvh * G) * a.splits * (DS_HD + 2); /* head i, split s */
        attn_partials(a, A, row, kvh, split, active, G, ph);
        if (active > 1) attn_merge(a, A, row, kvh, active, G, lane, ph);
        cons_sync();
    }
}

#endif /* sm_90 */

/* SKM: the GEMV phases that go stream-K, fixed for the common cases so that the others' loops are
 * the plain ones (0: none; DS_SK_OP: o_proj and down_proj, 4B on 132 SMs), -1 any (a.run) */
template <int SKM>
__global__ void __launch_bounds__(DS_THREADS, 1) k_decode_stack(const __grid_constant__ ds_args a) {
#ifdef DS_DEVICE
    extern __shared__ __align__(1024) uint8_t smem[];
    ds_head &S = *(ds_head *)smem;
    bf16 *x_s = (bf16 *)(smem + a.x_off);
    uint8_t *ring = smem + a.ring_off;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    if (threadIdx.x < a.ring) {
        mbar_init(&S.full[threadIdx.x], 1 + a.cw / 128);
        mbar_init(&S.empty[threadIdx.x], DS_WARPS);
    }
    for (int j = threadIdx.x; j < DS_HD / 2; j += DS_THREADS) S.inv[j] = a.inv_freq[j], S.dim[j] = a.dim_of[j];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* the barriers, as the copy engine sees them */
    __syncthreads();
    if (warp >= DS_WARPS) {
#if DS_SETMAXNREG
        asm volatile("setmaxnreg.dec.sync.aligned.u32 56;" ::: "memory");
#endif
        producer<SKM>(a, S, ring, lane, warp - DS_WARPS);
        return;
    }
#if DS_SETMAXNREG /* the producers' registers to the consumers: 128 x 56 + 256 x 224 <= 65,536 */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;" ::: "memory");
#endif
    /* the step's metadata and this CTA's attention item's block-table entries, once (qk_angles' angles) */
    if (threadIdx.x < a.R)
        S.ctx[threadIdx.x] = a.row_ctx[threadIdx.x], S.seq[threadIdx.x] = a.row_seq[threadIdx.x],
        S.slot[threadIdx.x] = a.slot[threadIdx.x];
    if (warp < a.R) { /* warp r row r's, as qk_angles makes them for the ops */
        float sn[2], cs[2];
        qk_angles<64>(sn, cs, a.pos, a.pos_stride, DS_HD, warp, S.inv, S.dim, lane);
        for (int i = 0; i < 2; i++) S.sn[warp][lane + 32 * i] = sn[i], S.cs[warp][lane + 32 * i] = cs[i];
    }
    cons_sync();
    {
        const int item = blockIdx.x, row = item / (a.nkv * a.splits), split = item % a.splits;
        int nbt = 0, b0 = 0;
        if (item < a.R * a.nkv * a.splits) {
            int jb, je;
            ds_split_keys(a, S.ctx[row], split, &jb, &je);
            if (jb < je) b0 = jb / IRIS_KV_BLOCK, nbt = (je - 1) / IRIS_KV_BLOCK - b0 + 1;
            if (nbt > DS_BT) nbt = 0;
            for (int k = threadIdx.x; k < nbt; k += DS_WARPS * 32)
                S.bt[k] = a.block_tables[(int64_t)S.seq[row] * a.max_blocks + b0 + k];
        }
        if (threadIdx.x == 0) S.bt0 = b0, S.nbt = nbt;
    }
    cons_sync();
    unsigned target = 0;
    ds_cursor cur = {0, 0};
    unsigned long long *tr = a.trace ? a.trace + (size_t)blockIdx.x * a.n_layers * DS_EVENTS : NULL;
    auto stamp = [&]() { /* the next of the CTA's DS_EVENTS a layer (thread 0 keeps the place) */
        if (tr && threadIdx.x == 0) {
            unsigned long long t;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
            *tr++ = t;
        }
    };
    ds_normw nw = norm_weights(a, a.L[0].ln1);
    for (int il = 0; il < a.n_layers; il++) {
        const ds_layer &L = a.L[il];
        prep_norm(a, nw, x_s, S);
        stamp();
        gemv_phase<0, SKM>(a, S, ring, x_s, cur);
        stamp();
        attn_phase(a, L, S); /* (no grid barrier before it: its q/k/v come as tagged words) */
        stamp();
        grid_sync(a.bar, target);
        qkv_clear<SKM>(a);
        stamp();
        prep_copy(a, a.o, a.nq * DS_HD, x_s);
        stamp();
        gemv_phase<1, SKM>(a, S, ring, x_s, cur);
        stamp();
        nw = norm_weights(a, L.ln2);
        grid_sync(a.bar, target);
        stamp();
        prep_norm(a, nw, x_s, S);
        stamp();
        gemv_phase<2, SKM>(a, S, ring, x_s, cur);
        stamp();
        grid_sync(a.bar, target);
        stamp();
        prep_copy(a, a.gb, a.FF, x_s);
        stamp();
        gemv_phase<3, SKM>(a, S, ring, x_s, cur);
        stamp();
        if (il + 1 < a.n_layers) {
            nw = norm_weights(a, a.L[il + 1].ln1);
            grid_sync(a.bar, target);
        }
        stamp();
    }
#endif
}
ds_kernel_fn iris_cuda_ds_kernel(int sk) {
    return sk == 0 ? k_decode_stack<0> : sk == DS_SK_OP ? k_decode_stack<DS_SK_OP> : k_decode_stack<-1>;
}
