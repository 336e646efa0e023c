/* cuda_fused.cu: the optional fused ops of backend.h — the residual add with
 * the next RMSNorm, and the attention prologue (q/k per-head RMSNorm, rotary,
 * K/V cache write) — each one kernel instead of two and five.  They exist for
 * decode, where a step is a few hundred small kernels and their launch and
 * drain time, not bytes, sets the speed.  Same roundings as the plain ops
 * (tests/test_ops_attn.c compares them with the CPU backend's plain sequence).
 *
 * add_rms_norm — one warp per row, 8 rows a block: x += d is written back
 * (rounded to bf16, as the residual add of the plain op), the sum of squares
 * taken over the rounded values, then y = bf16(w · bf16(x · inv)).
 * Memory-bound: x and d read once, x re-read from L1.
 *
 * qk_norm_rope_kv — one warp per (row, head) over the n_q + n_kv heads of a
 * row: the head's RMSNorm (rounded as Qwen3's q_norm/k_norm), staged in
 * shared memory so a lane can pair d with d + hd/2, the rotary (fp32 angles,
 * accurate sincosf, one rounding), written in place; k heads also go to
 * their cache slot with the matching v head.  Memory-bound.  The angles, the
 * norm weights and the slot come from the step's metadata and the weights, so
 * they are read (and the sines taken) before pdl_wait: after it only the
 * head's values are (H100, 2B-FP8 batch 1: 4.7 -> 2.5 us of a layer's
 * critical path).  add_rms_norm's decode kernel reads its weights early too.
 * From QK_ROWS rows on (prefill chunks) and for heads of 128, a warp takes G
 * heads of one row instead (k_qk_rows): the angles are taken once for G heads,
 * a head's rotary pairs lie in one lane (no shared memory), its loads issued
 * together; the same arithmetic, so the same bits (tests/test_ops_attn.c).
 * H200, 2B, 1,024 rows under ncu: one warp a head 29.5 us, 555 instructions a
 * head, issue-bound; with k_qk_rows (and add_rms' loads ahead, below) a 1,024-
 * token prefill 6.62-6.67 -> 6.37-6.43 ms. */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.cuh"

#define FW 8
#define QK_ROWS 128 /* rows from which k_qk_rows takes a step's q/k prologue */

template <int VEC>
__global__ void k_add_rms(bf16 *x, int64_t ldx, const bf16 *d, int64_t ldd, bf16 *y, int64_t ldy, int64_t rows, int64_t n,
                          const void *w, int wdt, float eps) {
    int64_t r = (int64_t)blockIdx.x * FW + threadIdx.x / 32;
    if (r >= rows) return;
    int lane = threadIdx.x & 31;
    bf16 *xr = x + r * ldx;
    const bf16 *dr = d ? d + r * ldd : NULL;
    bf16 *yr = y + r * ldy;
    float ss = 0;
    int64_t step = VEC ? 256 : 32;
    if (VEC) {
        /* UV steps' loads issued before their adds and stores (a warp a row leaves few warps an SM:
         * 1,024 rows fill 128 blocks); the sum still in order */
        constexpr int UV = 4;
        for (int64_t i0 = (int64_t)lane * 8; i0 < n; i0 += UV * step) {
            uint4 xu[UV], du[UV];
#pragma unroll
            for (int u = 0; u < UV; u++)
                if (i0 + u * step < n) {
                    xu[u] = *(const uint4 *)(xr + i0 + u * step);
                    if (dr) du[u] = *(const uint4 *)(dr + i0 + u * step);
                }
#pragma unroll
            for (int u = 0; u < UV; u++) {
                if (i0 + u * step >= n) break;
                bf16 *e = (bf16 *)&xu[u];
                if (dr) {
                    const bf16 *de = (const bf16 *)&du[u];
#pragma unroll
                    for (int k = 0; k < 8; k++) e[k] = f2bf(bf2f(e[k]) + bf2f(de[k]));
                    *(uint4 *)(xr + i0 + u * step) = xu[u];
                }
#pragma unroll
                for (int k = 0; k < 8; k++) ss += bf2f(e[k]) * bf2f(e[k]);
            }
        }
    } else {
        for (int64_t i = lane; i < n; i += step) {
            float v = bf2f(xr[i]);
            if (dr) {
                v = round_bf16(v + bf2f(dr[i]));
                xr[i] = f2bf(v);
            }
            ss += v * v;
        }
    }
    float inv = rsqrtf(warp_sum(ss) / (float)n + eps);
    for (int64_t i = (int64_t)lane * (VEC ? 8 : 1); i < n; i += step) {
        if (VEC) {
            uint4 u = *(const uint4 *)(xr + i);
            bf16 *e = (bf16 *)&u;
#pragma unroll
            for (int k = 0; k < 8; k++) e[k] = f2bf(load_vec(w, wdt, i + k) * round_bf16(bf2f(e[k]) * inv));
            *(uint4 *)(yr + i) = u;
        } else {
            yr[i] = f2bf(load_vec(w, wdt, i) * round_bf16(bf2f(xr[i]) * inv));
        }
    }
}

/* Few rows (decode): a block of 256 threads per row. */
template <int VEC>
__global__ void __launch_bounds__(256) k_add_rms_block(bf16 *x, int64_t ldx, const bf16 *d, int64_t ldd, bf16 *y,
                                                       int64_t ldy, int64_t n, const void *w, int wdt, float eps) {
    __shared__ float red[8];
    constexpr int E = VEC ? 8 : 1, PRE = 2; /* elements a thread takes per pass step; steps whose weights it reads early */
    pdl_launch_next();
    int64_t r = blockIdx.x;
    bf16 *xr = x + r * ldx;
    const bf16 *dr = d ? d + r * ldd : NULL;
    bf16 *yr = y + r * ldy;
    int64_t step = VEC ? 2048 : 256, i0 = (int64_t)threadIdx.x * (VEC ? 8 : 1);
    /* the norm weights of the first PRE steps do not depend on the kernel before: read before pdl_wait */
    float wv[PRE][E];
#pragma unroll
    for (int it = 0; it < PRE; it++)
#pragma unroll
        for (int k = 0; k < E; k++) wv[it][k] = i0 + it * step < n ? load_vec(w, wdt, i0 + it * step + k) : 0.0f;
    pdl_wait();
    if (VEC && n <= PRE * step) {
        /* the whole row in registers: every load in flight at once, then the same sums and roundings */
        uint4 xv[PRE], dv[PRE];
        float v[PRE][E];
#pragma unroll
        for (int it = 0; it < PRE; it++)
            if (i0 + it * step < n) {
                xv[it] = *(const uint4 *)(xr + i0 + it * step);
                if (dr) dv[it] = *(const uint4 *)(dr + i0 + it * step);
            }
        float ss = 0;
#pragma unroll
        for (int it = 0; it < PRE; it++) {
            if (i0 + it * step >= n) break;
            bf16 *e = (bf16 *)&xv[it];
            const bf16 *de = (const bf16 *)&dv[it];
#pragma unroll
            for (int k = 0; k < E; k++) {
                float f = bf2f(e[k]);
                if (dr) f = round_bf16(f + bf2f(de[k])), e[k] = f2bf(f);
                v[it][k] = f;
                ss += f * f;
            }
            if (dr) *(uint4 *)(xr + i0 + it * step) = xv[it];
        }
        float inv = rsqrtf(block_sum(ss, red, 8) / (float)n + eps);
#pragma unroll
        for (int it = 0; it < PRE; it++) {
            if (i0 + it * step >= n) break;
            uint4 o;
            bf16 *oe = (bf16 *)&o;
#pragma unroll
            for (int k = 0; k < E; k++) oe[k] = f2bf(wv[it][k] * round_bf16(v[it][k] * inv));
            *(uint4 *)(yr + i0 + it * step) = o;
        }
        return;
    }
    float ss = 0;
    for (int64_t i = i0; i < n; i += step) {
#pragma unroll
        for (int k = 0; k < (VEC ? 8 : 1); k++) {
            float v = bf2f(xr[i + k]);
            if (dr) {
                v = round_bf16(v + bf2f(dr[i + k]));
                xr[i + k] = f2bf(v);
            }
            ss += v * v;
        }
    }
    float inv = rsqrtf(block_sum(ss, red, 8) / (float)n + eps);
#pragma unroll
    for (int it = 0; it < PRE; it++) {
        int64_t i = i0 + it * step;
        if (i >= n) break;
#pragma unroll
        for (int k = 0; k < E; k++) yr[i + k] = f2bf(wv[it][k] * round_bf16(bf2f(xr[i + k]) * inv));
    }
    for (int64_t i = i0 + PRE * step; i < n; i += step)
#pragma unroll
        for (int k = 0; k < E; k++) yr[i + k] = f2bf(load_vec(w, wdt, i + k) * round_bf16(bf2f(xr[i + k]) * inv));
}

static int cu_add_rms_norm(iris_backend *b, iris_tensor *x, const iris_tensor *d, const iris_tensor *w, float eps,
                           iris_tensor *y) {
    if (x->dtype != IRIS_DT_BF16 || y->dtype != IRIS_DT_BF16 || (d && d->dtype != IRIS_DT_BF16))
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda add_rms_norm: activations must be BF16");
    if (y->rows != x->rows || y->cols != x->cols || w->rows * w->cols != x->cols ||
        (d && (d->rows != x->rows || d->cols != x->cols)))
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda add_rms_norm: x [%lld,%lld], weight of %lld, y [%lld,%lld] do not match",
                              (long long)x->rows, (long long)x->cols, (long long)(w->rows * w->cols), (long long)y->rows,
                              (long long)y->cols);
    if (x->rows <= 0) return 0;
    int64_t ldx = tld(x), ldy = tld(y), ldd = d ? tld(d) : 0;
    int vec = x->cols % 8 == 0 && ldx % 8 == 0 && ldy % 8 == 0 && is_aligned16(x->data) && is_aligned16(y->data) &&
              (!d || (ldd % 8 == 0 && is_aligned16(d->data)));
    unsigned blocks = (unsigned)((x->rows + FW - 1) / FW);
    const bf16 *dp = d ? (const bf16 *)d->data : NULL;
    if (x->rows <= 128 && x->cols >= 1024) {
        launch(cuda_of(b), vec ? k_add_rms_block<1> : k_add_rms_block<0>, dim3((unsigned)x->rows), dim3(256), 0,
               (bf16 *)x->data, ldx, dp, ldd, (bf16 *)y->data, ldy, (int64_t)x->cols, w->data, (int)w->dtype, eps);
    } else if (vec)
        k_add_rms<1><<<blocks, FW * 32, 0, cuda_of(b)->stream>>>((bf16 *)x->data, ldx, dp, ldd, (bf16 *)y->data, ldy,
                                                                  x->rows, x->cols, w->data, w->dtype, eps);
    else
        k_add_rms<0><<<blocks, FW * 32, 0, cuda_of(b)->stream>>>((bf16 *)x->data, ldx, dp, ldd, (bf16 *)y->data, ldy,
                                                                  x->rows, x->cols, w->data, w->dtype, eps);
    return iris_cuda_check(b, "add_rms_norm");
}

__global__ void __launch_bounds__(FW * 32) k_qk_norm_rope_kv(const qk_args a) {
    __shared__ float buf[FW][2 * QK_MAX_HALF];
    __shared__ float s_inv[QK_MAX_HALF];
    __shared__ int s_dim[QK_MAX_HALF];
    pdl_launch_next();
    for (int j = threadIdx.x; j < a.hd / 2; j += blockDim.x) s_inv[j] = a.inv_freq[j], s_dim[j] = a.dim_of[j];
    __syncthreads();
    int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    int heads = a.nq + a.nkv;
    int wi = blockIdx.x * FW + warp;   /* rows · heads < 2^31 (checked at launch) */
    bool live = wi < a.rows * heads;
    int64_t r = live ? wi / heads : 0;
    int h = wi - (int)r * heads, is_k = h >= a.nq, hh = is_k ? h - a.nq : h, hd = a.hd, half = hd / 2;
    /* What does not depend on the kernel before (the norm weights; the angles and the slot, from the
     * step's metadata, uploaded before its first kernel) is read before pdl_wait: after it, only the
     * head's values. */
    float wv[2 * QK_MAX_HALF / 32], sn[QK_MAX_HALF / 32], cs[QK_MAX_HALF / 32];
    int64_t sl = -1;
    if (live) {
        qk_weights<QK_MAX_HALF>(wv, is_k ? a.kw : a.qw, is_k ? a.kwdt : a.qwdt, hd, lane);
        qk_angles<QK_MAX_HALF>(sn, cs, a.pos, a.pos_stride, a.hd, r, s_inv, s_dim, lane);
        if (is_k) sl = a.slot[r];
    }
    pdl_wait();
    if (!live) return;
    bf16 *x = is_k ? a.k + r * a.ldk + (int64_t)hh * hd : a.q + r * a.ldq + (int64_t)hh * hd;
    bool to_cache = is_k && sl >= 0 && sl < a.n_slots;
    int64_t at = sl * (int64_t)a.nkv * hd + (int64_t)hh * hd;
    qk_head<QK_MAX_HALF>(x, wv, sn, cs, buf[warp], a.eps, hd, lane, [&](int j, bf16 o0, bf16 o1) {
        x[j] = o0;
        x[j + half] = o1;
        if (to_cache) kv_put(a.kc, a.kv8, at + j, o0), kv_put(a.kc, a.kv8, at + j + half, o1);
    });
    if (to_cache) {
        const bf16 *vr = a.v + r * a.ldv + (int64_t)hh * hd;
        for (int e = lane; e < hd; e += 32) kv_put(a.vc, a.kv8, at + e, vr[e]);
    }
}

/* Prefill rows, heads of 128 (QK_HD): warp w takes heads [G·i, G·i + G) of row w / (heads / G), G
 * dividing both head counts (q heads first).  Lane holds elements e = lane + 32 i of a head, so
 * rotary pair j = lane + 32 i (i < 2) pairs registers i and i + 2; the sum of squares in qk_head's
 * order, its qk_inv, qk_normed and qk_rotate. */
#define QK_HD 128
template <int G>
__global__ void __launch_bounds__(FW * 32) k_qk_rows(const qk_args a) {
    __shared__ float s_inv[QK_HD / 2];
    __shared__ int s_dim[QK_HD / 2];
    pdl_launch_next();
    for (int j = threadIdx.x; j < QK_HD / 2; j += blockDim.x) s_inv[j] = a.inv_freq[j], s_dim[j] = a.dim_of[j];
    __syncthreads();
    const int lane = threadIdx.x & 31, groups = (a.nq + a.nkv) / G;
    const int wi = blockIdx.x * FW + threadIdx.x / 32;
    const bool live = wi < a.rows * groups;
    const int64_t r = live ? wi / groups : 0;
    const int h0 = (wi - (int)r * groups) * G, is_k = h0 >= a.nq, hh0 = is_k ? h0 - a.nq : h0;
    float wv[4], sn[2], cs[2];
    int64_t sl = -1;
    if (live) {
        qk_weights<QK_HD / 2>(wv, is_k ? a.kw : a.qw, is_k ? a.kwdt : a.qwdt, QK_HD, lane);
        qk_angles<QK_HD / 2>(sn, cs, a.pos, a.pos_stride, QK_HD, r, s_inv, s_dim, lane);
        if (is_k) sl = a.slot[r];
    }
    pdl_wait();
    if (!live) return;
    bf16 *x = is_k ? a.k + r * a.ldk + (int64_t)hh0 * QK_HD : a.q + r * a.ldq + (int64_t)hh0 * QK_HD;
    float v[G][4];
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int i = 0; i < 4; i++) v[g][i] = bf2f(x[g * QK_HD + lane + 32 * i]);
    const bool to_cache = is_k && sl >= 0 && sl < a.n_slots;
    const int64_t at = sl * (int64_t)a.nkv * QK_HD + (int64_t)hh0 * QK_HD;
#pragma unroll
    for (int g = 0; g < G; g++) {
        float ss = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) ss += v[g][i] * v[g][i];
        float inv = qk_inv(ss, QK_HD, a.eps);
#pragma unroll
        for (int i = 0; i < 4; i++) v[g][i] = qk_normed(v[g][i], inv, wv[i]);
        bf16 *xg = x + g * QK_HD;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int j = lane + 32 * i;
            bf16 o0, o1;
            qk_rotate(v[g][i], v[g][i + 2], cs[i], sn[i], o0, o1);
            xg[j] = o0;
            xg[j + QK_HD / 2] = o1;
            const int64_t c = at + g * QK_HD + j;
            if (to_cache) kv_put(a.kc, a.kv8, c, o0), kv_put(a.kc, a.kv8, c + QK_HD / 2, o1);
        }
    }
    if (to_cache) {
        const bf16 *vr = a.v + r * a.ldv + (int64_t)hh0 * QK_HD;
#pragma unroll
        for (int g = 0; g < G; g++)
#pragma unroll
            for (int i = 0; i < 4; i++) kv_put(a.vc, a.kv8, at + g * QK_HD + lane + 32 * i, vr[g * QK_HD + lane + 32 * i]);
    }
}

int iris_cuda_qk_args(iris_backend *b, iris_tensor *q, iris_tensor *k, const iris_tensor *v, const iris_tensor *qw,
                      const iris_tensor *kw, float eps, int n_q_heads, const int32_t *pos, int pos_stride,
                      const int *dim_of, const float *inv_freq, const iris_kv_layer *kv, const iris_attn_meta *meta,
                      qk_args *a) {
    int hd = kv->head_dim, nkv = kv->n_kv_heads, half = hd / 2;
    if (q->dtype != IRIS_DT_BF16 || k->dtype != IRIS_DT_BF16 || v->dtype != IRIS_DT_BF16 ||
        (kv->dtype != IRIS_DT_BF16 && kv->dtype != IRIS_DT_F8_E4M3))
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED,
                              "cuda qk_norm_rope_kv: q, k and v must be BF16, the cache BF16 or F8_E4M3");
    if (hd <= 0 || hd % 2 || half > QK_MAX_HALF)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda qk_norm_rope_kv: head_dim %d (even, at most %d)", hd,
                              2 * QK_MAX_HALF);
    if (q->rows != meta->n_rows || k->rows != meta->n_rows || v->rows != meta->n_rows ||
        q->cols < (int64_t)n_q_heads * hd || k->cols < (int64_t)nkv * hd || v->cols < (int64_t)nkv * hd ||
        qw->rows * qw->cols != hd || kw->rows * kw->cols != hd)
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda qk_norm_rope_kv: q [%lld,%lld], k [%lld,%lld] for %d rows of %d+%d heads of %d",
                              (long long)q->rows, (long long)q->cols, (long long)k->rows, (long long)k->cols,
                              meta->n_rows, n_q_heads, nkv, hd);
    if ((int64_t)meta->n_rows * (n_q_heads + nkv) + FW >= (1ll << 31))
        return iris_cuda_fail(b, IRIS_ELIMIT, "cuda qk_norm_rope_kv: %d rows of %d heads", meta->n_rows, n_q_heads + nkv);
    memset(a, 0, sizeof *a);
    a->q = (bf16 *)q->data, a->k = (bf16 *)k->data, a->v = (const bf16 *)v->data;
    a->ldq = tld(q), a->ldk = tld(k), a->ldv = tld(v);
    a->qw = qw->data, a->kw = kw->data, a->qwdt = qw->dtype, a->kwdt = kw->dtype;
    a->eps = eps;
    a->rows = meta->n_rows, a->nq = n_q_heads, a->nkv = nkv, a->hd = hd;
    a->pos = pos, a->pos_stride = pos_stride;
    a->kc = kv->k, a->vc = kv->v, a->kv8 = kv->dtype == IRIS_DT_F8_E4M3, a->n_slots = (int64_t)kv->n_blocks * IRIS_KV_BLOCK;
    a->slot = meta->slot;
    for (int j = 0; j < half; j++) {
        if (dim_of[j] < 0 || dim_of[j] > 255)
            return iris_cuda_fail(b, IRIS_EINVAL, "cuda qk_norm_rope_kv: dim_of[%d] = %d", j, dim_of[j]);
        a->dim_of[j] = (uint8_t)dim_of[j];
        a->inv_freq[j] = inv_freq[j];
    }
    return 0;
}

static int cu_qk_norm_rope_kv(iris_backend *b, iris_tensor *q, iris_tensor *k, const iris_tensor *v,
                              const iris_tensor *qw, const iris_tensor *kw, float eps, int n_q_heads, const int32_t *pos,
                              int pos_stride, const int *dim_of, const float *inv_freq, iris_kv_layer *kv,
                              const iris_attn_meta *meta) {
    qk_args a;
    int rc = iris_cuda_qk_args(b, q, k, v, qw, kw, eps, n_q_heads, pos, pos_stride, dim_of, inv_freq, kv, meta, &a);
    if (rc || meta->n_rows <= 0) return rc;
    int heads = n_q_heads + kv->n_kv_heads;
    int g = 8;
    while (g > 1 && (n_q_heads % g || kv->n_kv_heads % g)) g /= 2;
    if (meta->n_rows >= QK_ROWS && a.hd == 128) {
        int64_t warps = (int64_t)meta->n_rows * (heads / g);
        dim3 grid((unsigned)((warps + FW - 1) / FW)), block(FW * 32);
        void (*k)(const qk_args) = g == 8 ? k_qk_rows<8> : g == 4 ? k_qk_rows<4> : g == 2 ? k_qk_rows<2> : k_qk_rows<1>;
        launch(cuda_of(b), k, grid, block, 0, a);
    } else {
        int64_t warps = (int64_t)meta->n_rows * heads;
        launch(cuda_of(b), k_qk_norm_rope_kv, dim3((unsigned)((warps + FW - 1) / FW)), dim3(FW * 32), 0, a);
    }
    return iris_cuda_check(b, "qk_norm_rope_kv");
}

/* Not called under IRIS_CUDA_FUSED=0 (cuda_mem.cu): the plain ops run instead, for measuring them,
 * and as a way around them should one misbehave on a card they were not tested on. */
void iris_cuda_fused_init(iris_backend *b) {
    b->add_rms_norm = cu_add_rms_norm;
    b->qk_norm_rope_kv = cu_qk_norm_rope_kv;
    b->qk_norm_rope_attn = iris_cuda_qk_norm_rope_attn;
}
