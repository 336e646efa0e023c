/* cuda_rope.cu: rotary position embedding in place (text MRoPE and the
 * vision 2-D rotary), and the paged KV-cache write.
 *
 * rope — 8 rows a block, a thread per 8 adjacent pairs j .. j+7 <
 * head_dim/2 (2 where the rows are not 16-byte aligned), rotating x[j] and
 * x[j + head_dim/2] (NeoX pairing, QWEN3VL.md §5.3, §6.4); the tables, the row's positions and its angles' cosines and
 * sines (one sincosf a frequency, shared by the row's heads) in shared memory.
 * Memory-bound (each element read and written once).
 * The per-frequency tables (which position row feeds frequency j, and
 * inv_freq[j]) travel by value in the kernel's parameters: no copy, so the
 * op can sit in a captured graph.  Numerics: angle = fp32(pos) ·
 * inv_freq in fp32, accurate sincosf (angles reach 10^5 rad), rotation in
 * fp32, one bf16 rounding.
 *
 * kv_write — one thread per 8 elements (16-byte copies when aligned) of the
 * n new rows of k and v into their cache slots; memory-bound. */
#include "cuda_internal.cuh"

#define ROPE_MAX_HALF 128

#define ROPE_MAX_DIMS 4

struct rope_tables {
    float inv_freq[ROPE_MAX_HALF];
    uint8_t dim_of[ROPE_MAX_HALF];
    int n_dims;     /* position rows the tables name (max dim_of + 1) */
};

/* ROPE_RB rows a block (grid-stride over row groups): the rows' positions and the frequency tables
 * are staged in shared memory (the parameter tables indexed by a lane-varying j would serialize),
 * each row's angles' cosines and sines computed once for all its heads, and each thread rotates VEC
 * adjacent pairs (VEC 8: 16-byte loads and stores) with 32-bit index arithmetic.  H200, the 2B's
 * vision q and k for two 1 MP images beside the decoder's steps (64 clients, CUPTI): a block a row
 * with a sincosf a head and pair and bf16x2 loads 96 us a call; a block a row 60-70 us; 8 rows a
 * block 45 us. */
#define ROPE_RB 8
template <int VEC>
__global__ void __launch_bounds__(256) k_rope(bf16 *x, int64_t ldx, int64_t rows, int n_heads, int half,
                                              const int32_t *pos, int pos_stride, const rope_tables t) {
    __shared__ float s_inv[ROPE_MAX_HALF];
    __shared__ int s_dim[ROPE_MAX_HALF];
    __shared__ float s_pos[ROPE_RB][ROPE_MAX_DIMS];
    __shared__ float s_cos[ROPE_RB][ROPE_MAX_HALF], s_sin[ROPE_RB][ROPE_MAX_HALF];
    for (int j = threadIdx.x; j < half; j += blockDim.x) s_inv[j] = t.inv_freq[j], s_dim[j] = t.dim_of[j];
    const int per_head = half / VEC, units = n_heads * per_head;
    for (int64_t r0 = (int64_t)blockIdx.x * ROPE_RB; r0 < rows; r0 += (int64_t)gridDim.x * ROPE_RB) {
        const int nr = rows - r0 < ROPE_RB ? (int)(rows - r0) : ROPE_RB;
        __syncthreads();   /* the tables are in; the previous rows' angles are no longer read */
        for (int i = threadIdx.x; i < nr * t.n_dims; i += blockDim.x) {
            int rr = i / t.n_dims, d = i - rr * t.n_dims;
            s_pos[rr][d] = (float)pos[(int64_t)d * pos_stride + r0 + rr];
        }
        __syncthreads();
        for (int i = threadIdx.x; i < nr * half; i += blockDim.x) {
            int rr = i / half, j = i - rr * half;
            sincosf(s_pos[rr][s_dim[j]] * s_inv[j], &s_sin[rr][j], &s_cos[rr][j]);
        }
        __syncthreads();
        for (int i = threadIdx.x; i < nr * units; i += blockDim.x) {
            const int rr = i / units, u = i - rr * units, h = u / per_head, j = VEC * (u - h * per_head);
            const float *cs = s_cos[rr], *sn = s_sin[rr];
            bf16 *xh = x + (r0 + rr) * ldx + h * 2 * half + j;
            if (VEC == 8) {
                uint4 va = *(const uint4 *)xh, vb = *(const uint4 *)(xh + half);
                __nv_bfloat162 *a2 = (__nv_bfloat162 *)&va, *b2 = (__nv_bfloat162 *)&vb;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    float2 a = __bfloat1622float2(a2[k]), b = __bfloat1622float2(b2[k]);
                    float c0 = cs[j + 2 * k], s0 = sn[j + 2 * k], c1 = cs[j + 2 * k + 1], s1 = sn[j + 2 * k + 1];
                    a2[k] = __floats2bfloat162_rn(a.x * c0 - b.x * s0, a.y * c1 - b.y * s1);
                    b2[k] = __floats2bfloat162_rn(b.x * c0 + a.x * s0, b.y * c1 + a.y * s1);
                }
                *(uint4 *)xh = va, *(uint4 *)(xh + half) = vb;
            } else {
                __nv_bfloat162 *p0 = (__nv_bfloat162 *)xh, *p1 = (__nv_bfloat162 *)(xh + half);
                float2 a = __bfloat1622float2(*p0), b = __bfloat1622float2(*p1);
                float c0 = cs[j], s0 = sn[j], c1 = cs[j + 1], s1 = sn[j + 1];
                *p0 = __floats2bfloat162_rn(a.x * c0 - b.x * s0, a.y * c1 - b.y * s1);
                *p1 = __floats2bfloat162_rn(b.x * c0 + a.x * s0, b.y * c1 + a.y * s1);
            }
        }
    }
}

/* The general form (odd half, or rows not 4-byte aligned): one thread per (row, head, pair). */
__global__ void k_rope_any(bf16 *x, int64_t ldx, int64_t rows, int n_heads, int half, const int32_t *pos,
                           int pos_stride, const rope_tables t) {
    int64_t total = rows * n_heads * half;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int j = (int)(i % half);
        int64_t rh = i / half;
        int h = (int)(rh % n_heads);
        int64_t r = rh / n_heads;
        float a = (float)pos[(int64_t)t.dim_of[j] * pos_stride + r] * t.inv_freq[j];
        float sn, cs;
        sincosf(a, &sn, &cs);
        bf16 *p = x + r * ldx + (int64_t)h * 2 * half;
        float x0 = bf2f(p[j]), x1 = bf2f(p[j + half]);
        p[j] = f2bf(x0 * cs - x1 * sn);
        p[j + half] = f2bf(x1 * cs + x0 * sn);
    }
}

static unsigned grid_for(int64_t total, int threads) {
    int64_t blocks = (total + threads - 1) / threads;
    return (unsigned)(blocks > 65536 ? 65536 : blocks < 1 ? 1 : blocks);
}

int iris_cuda_rope(iris_backend *b, iris_tensor *x, int n_heads, int head_dim, const int32_t *pos, int pos_stride,
                   const int *dim_of, const float *inv_freq) {
    if (x->dtype != IRIS_DT_BF16) return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda rope: activations must be BF16");
    int half = head_dim / 2;
    if (head_dim <= 0 || head_dim % 2 || half > ROPE_MAX_HALF)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda rope: head_dim %d (must be even and at most %d)", head_dim,
                              2 * ROPE_MAX_HALF);
    if ((int64_t)n_heads * head_dim > x->cols)
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda rope: %d heads of %d exceed the row of %lld", n_heads, head_dim,
                              (long long)x->cols);
    if (x->rows <= 0) return 0;
    rope_tables t;
    memset(&t, 0, sizeof t);
    for (int j = 0; j < half; j++) {
        if (dim_of[j] < 0 || dim_of[j] > 255)
            return iris_cuda_fail(b, IRIS_EINVAL, "cuda rope: dim_of[%d] = %d", j, dim_of[j]);
        t.dim_of[j] = (uint8_t)dim_of[j];
        t.inv_freq[j] = inv_freq[j];
        if (dim_of[j] + 1 > t.n_dims) t.n_dims = dim_of[j] + 1;
    }
    cudaStream_t st = cuda_of(b)->stream;
    if (half % 2 == 0 && tld(x) % 2 == 0 && ((uintptr_t)x->data & 3) == 0 && t.n_dims <= ROPE_MAX_DIMS &&
        (int64_t)n_heads * half < (1ll << 26)) {
        int64_t groups = (x->rows + ROPE_RB - 1) / ROPE_RB, blocks = groups < 65536 ? groups : 65536;
        int vec = half % 8 == 0 && tld(x) % 8 == 0 && ((uintptr_t)x->data & 15) == 0 ? 8 : 2;
        if (vec == 8)
            k_rope<8><<<(unsigned)blocks, 256, 0, st>>>((bf16 *)x->data, tld(x), x->rows, n_heads, half, pos, pos_stride, t);
        else
            k_rope<2><<<(unsigned)blocks, 256, 0, st>>>((bf16 *)x->data, tld(x), x->rows, n_heads, half, pos, pos_stride, t);
    } else {
        int64_t total = x->rows * n_heads * half;
        k_rope_any<<<grid_for(total, 256), 256, 0, st>>>((bf16 *)x->data, tld(x), x->rows, n_heads, half, pos,
                                                          pos_stride, t);
    }
    return iris_cuda_check(b, "rope");
}

/* Rows whose slot is outside the cache are skipped (the caller's block
 * tables are checked on the host; a device-side error could not be reported
 * without a sync). */
/* VEC 8: 16-byte loads of k, v (and 16-byte stores into a BF16 cache). */
template <int VEC, typename KT>
__global__ void k_kv_write(KT *kc, KT *vc, int64_t n_slots, int64_t width, const bf16 *k, int64_t ldk, const bf16 *v,
                           int64_t ldv, int64_t rows, const int32_t *slot) {
    int64_t units = width / VEC, total = rows * units;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / units, c = (i % units) * VEC;
        int64_t s = slot[r];
        if (s < 0 || s >= n_slots) continue;
        if (VEC == 8 && sizeof(KT) == 2) {
            *(uint4 *)(kc + s * width + c) = *(const uint4 *)(k + r * ldk + c);
            *(uint4 *)(vc + s * width + c) = *(const uint4 *)(v + r * ldv + c);
        } else if (VEC == 8) {
            uint4 kk = *(const uint4 *)(k + r * ldk + c), vv = *(const uint4 *)(v + r * ldv + c);
            const bf16 *ke = (const bf16 *)&kk, *ve = (const bf16 *)&vv;
#pragma unroll
            for (int e = 0; e < 8; e++) kv_store(kc + s * width + c + e, ke[e]), kv_store(vc + s * width + c + e, ve[e]);
        } else {
            kv_store(kc + s * width + c, k[r * ldk + c]);
            kv_store(vc + s * width + c, v[r * ldv + c]);
        }
    }
}

template <typename KT>
static void kv_write_launch(iris_kv_layer *kv, int vec, int64_t n_slots, int64_t width, const iris_tensor *k,
                            const iris_tensor *v, const int32_t *slot, cudaStream_t s) {
    int64_t total = k->rows * (vec ? width / 8 : width);
    if (vec)
        k_kv_write<8, KT><<<grid_for(total, 256), 256, 0, s>>>((KT *)kv->k, (KT *)kv->v, n_slots, width,
                                                                (const bf16 *)k->data, tld(k), (const bf16 *)v->data,
                                                                tld(v), k->rows, slot);
    else
        k_kv_write<1, KT><<<grid_for(total, 256), 256, 0, s>>>((KT *)kv->k, (KT *)kv->v, n_slots, width,
                                                                (const bf16 *)k->data, tld(k), (const bf16 *)v->data,
                                                                tld(v), k->rows, slot);
}

int iris_cuda_kv_write(iris_backend *b, iris_kv_layer *kv, const iris_tensor *k, const iris_tensor *v,
                       const iris_attn_meta *meta) {
    int64_t width = (int64_t)kv->n_kv_heads * kv->head_dim;
    if ((kv->dtype != IRIS_DT_BF16 && kv->dtype != IRIS_DT_F8_E4M3) || k->dtype != IRIS_DT_BF16 ||
        v->dtype != IRIS_DT_BF16)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda kv_write: k, v must be BF16, the cache BF16 or F8_E4M3");
    if (k->cols != width || v->cols != width || k->rows != v->rows || k->rows != meta->n_rows)
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda kv_write: k [%lld,%lld], v [%lld,%lld] for %d rows of %lld",
                              (long long)k->rows, (long long)k->cols, (long long)v->rows, (long long)v->cols,
                              meta->n_rows, (long long)width);
    if (k->rows <= 0) return 0;
    int64_t ldk = tld(k), ldv = tld(v), n_slots = (int64_t)kv->n_blocks * IRIS_KV_BLOCK;
    int vec = width % 8 == 0 && ldk % 8 == 0 && ldv % 8 == 0 && is_aligned16(k->data) && is_aligned16(v->data) &&
              is_aligned16(kv->k) && is_aligned16(kv->v);
    if (kv->dtype == IRIS_DT_F8_E4M3) kv_write_launch<kv8>(kv, vec, n_slots, width, k, v, meta->slot, cuda_of(b)->stream);
    else kv_write_launch<bf16>(kv, vec, n_slots, width, k, v, meta->slot, cuda_of(b)->stream);
    return iris_cuda_check(b, "kv_write");
}
