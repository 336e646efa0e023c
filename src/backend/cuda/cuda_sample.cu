/* cuda_sample.cu: the k most likely tokens of each logits row (backend.h get_topk), so that
 * sampling downloads k (id, value) pairs a row instead of the whole vocabulary and the host
 * sampler (model/sampler.c, iris_sampler_sample_top) never scans 151,936 logits.
 *
 * Keys: a row element is one 64-bit key, the value's bits made order-preserving as an
 * unsigned integer (NaN counted as -inf) above the bitwise complement of its column, so the
 * largest key is the largest value with the lowest id, and all keys of a row are distinct.
 * Two kernels:
 *   k_topk_chunk  grid (chunks, rows), 256 threads; a chunk of up to 256 * EPT elements sits in
 *                 registers (EPT a thread); k rounds, each a block-wide max over the keys below
 *                 the last one taken, give the chunk's k largest, in order, to the scratch.
 *   k_topk_merge  grid rows; the same rounds over the chunks' k keys each (in shared memory).
 * A round is EPT compares a thread and one block reduction; k is at most TOPK_MAX (the
 * engine asks for top_k plus a few for ties, 1 for greedy).
 * Masks (constrained decoding, backend.h iris_topk_mask): a masked row's disallowed columns get
 * key 0, the empty slot, so they are never taken; a warp's 32 consecutive columns read one mask
 * word (a broadcast load).  The chunk kernel is templated on whether the call has a mask at
 * all, so a call without one (every row free) reads no mask and has no mask test in its loop; a
 * key-0 result (fewer allowed columns than k, masked rows only) comes out as id -1, value -inf.
 * The chunks' keys use the decode-attention partials' scratch (ops run in order on the one
 * stream, and nothing else uses it between ops); rows that do not fit it at once go in groups.
 * Exact: a selection, no arithmetic on the values; checked against a host sort in the GPU tests.
 * Each logit is read from memory once; the k rounds run over registers and shared memory. */
#include "cuda_internal.cuh"

#define TOPK_MAX 64
#define TOPK_THREADS 256
#define TOPK_EPT 16
#define TOPK_CHUNK (TOPK_THREADS * TOPK_EPT)

typedef unsigned long long u64;

static __device__ __forceinline__ u64 topk_key(float v, int64_t col) {
    if (v != v) v = -INFINITY;
    uint32_t u = __float_as_uint(v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((u64)u << 32) | (uint32_t)~(uint32_t)col;
}

static __device__ __forceinline__ float key_value(u64 k) {
    uint32_t u = (uint32_t)(k >> 32);
    u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
    return __uint_as_float(u);
}

static __device__ __forceinline__ u64 warp_max_u64(u64 v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        u64 w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* The largest `mine` over the block (every thread gets it); red holds TOPK_THREADS / 32 keys. */
static __device__ __forceinline__ u64 block_max_u64(u64 mine, u64 *red) {
    mine = warp_max_u64(mine);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = mine;
    __syncthreads();
    u64 best = 0;
#pragma unroll
    for (int i = 0; i < TOPK_THREADS / 32; i++) best = red[i] > best ? red[i] : best;
    __syncthreads();    /* red is reused by the next round */
    return best;
}

/* Key 0 is below every element (an empty slot); -inf elements still have keys above it.
 * MASKED: slot [rows] (of this group) and bits [masks, words] as iris_topk_mask. */
template <bool MASKED>
__global__ void __launch_bounds__(TOPK_THREADS) k_topk_chunk(const bf16 *x, int64_t ldx, int64_t cols, int k,
                                                             const int32_t *slot, const uint32_t *bits,
                                                             int64_t words, u64 *part) {
    __shared__ u64 red[TOPK_THREADS / 32];
    const int64_t row = blockIdx.y, c0 = (int64_t)blockIdx.x * TOPK_CHUNK;
    const bf16 *xr = x + row * ldx;
    u64 key[TOPK_EPT];
    const uint32_t *mr = NULL;
    if (MASKED && slot[row] >= 0) mr = bits + (int64_t)slot[row] * words;
#pragma unroll
    for (int e = 0; e < TOPK_EPT; e++) {
        int64_t c = c0 + (int64_t)e * TOPK_THREADS + threadIdx.x;
        key[e] = c < cols ? topk_key(bf2f(xr[c]), c) : 0ull;
        if (MASKED && mr && c < cols && !((mr[c >> 5] >> (c & 31)) & 1u)) key[e] = 0ull;
    }
    u64 *out = part + (row * gridDim.x + blockIdx.x) * (int64_t)k;
    u64 prev = ~0ull;
    for (int r = 0; r < k; r++) {
        u64 mine = 0;
#pragma unroll
        for (int e = 0; e < TOPK_EPT; e++) mine = key[e] < prev && key[e] > mine ? key[e] : mine;
        prev = block_max_u64(mine, red);
        if (threadIdx.x == 0) out[r] = prev;
    }
}

__global__ void __launch_bounds__(TOPK_THREADS) k_topk_merge(const u64 *part, int n_part, int k, int32_t *ids,
                                                             float *vals) {
    extern __shared__ u64 sk[];
    __shared__ u64 red[TOPK_THREADS / 32];
    const int64_t row = blockIdx.x;
    const int n = n_part * k;
    for (int i = threadIdx.x; i < n; i += TOPK_THREADS) sk[i] = part[row * n + i];
    __syncthreads();
    u64 prev = ~0ull;
    for (int r = 0; r < k; r++) {
        u64 mine = 0;
        for (int i = threadIdx.x; i < n; i += TOPK_THREADS) mine = sk[i] < prev && sk[i] > mine ? sk[i] : mine;
        prev = block_max_u64(mine, red);
        if (threadIdx.x == 0) {
            ids[row * k + r] = prev ? (int32_t)~(uint32_t)prev : -1;
            vals[row * k + r] = prev ? key_value(prev) : -INFINITY;
        }
    }
}

/* backend.h get_topk: the k largest of each row of x (device activations), allowed by mask
 * (NULL: all), into host ids/vals [n, k]. */
int iris_cuda_get_topk(iris_backend *b, const iris_tensor *x, int k, const iris_topk_mask *mask, int32_t *ids,
                       float *vals) {
    cuda_ctx *c = cuda_of(b);
    const int64_t n = x->rows, cols = x->cols;
    if (x->dtype != IRIS_DT_BF16)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda get_topk: %s rows (BF16 activations only)",
                              iris_dtype_name(x->dtype));
    if (k < 1 || k > TOPK_MAX || k > cols || cols > 0x7fffffff)
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda get_topk: k %d of rows of %lld (1 <= k <= %d and <= the columns)", k,
                              (long long)cols, TOPK_MAX);
    if (mask && (!mask->slot || !mask->bits || mask->words < (cols + 31) / 32))
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda get_topk: a mask of %lld words for rows of %lld columns",
                              (long long)mask->words, (long long)cols);
    if (n <= 0) return 0;
    const int n_part = (int)((cols + TOPK_CHUNK - 1) / TOPK_CHUNK);
    const size_t merge_smem = (size_t)n_part * k * sizeof(u64);
    if (merge_smem > 48u * 1024)
        return iris_cuda_fail(b, IRIS_ELIMIT, "cuda get_topk: rows of %lld columns with k %d exceed the merge's 48 KiB",
                              (long long)cols, k);
    /* Scratch: per group of rows, the chunks' keys, then the group's ids and values. */
    const size_t per_row = merge_smem + (size_t)k * (sizeof(int32_t) + sizeof(float));
    const size_t scratch = c->attn_part_elems * sizeof(float);
    int64_t group = (int64_t)(scratch / (per_row + 16));
    if (group < 1) return iris_cuda_fail(b, IRIS_ELIMIT, "cuda get_topk: %zu bytes of scratch for a row", per_row);
    for (int64_t r0 = 0; r0 < n; r0 += group) {
        int64_t g = n - r0 < group ? n - r0 : group;
        u64 *part = (u64 *)c->attn_part;
        int32_t *d_ids = (int32_t *)(part + (size_t)g * n_part * k);
        float *d_vals = (float *)(d_ids + (size_t)g * k);
        const bf16 *xg = (const bf16 *)x->data + r0 * tld(x);
        dim3 grid((unsigned)n_part, (unsigned)g);
        if (mask)
            k_topk_chunk<true><<<grid, TOPK_THREADS, 0, c->stream>>>(xg, tld(x), cols, k, mask->slot + r0, mask->bits,
                                                                     mask->words, part);
        else
            k_topk_chunk<false><<<grid, TOPK_THREADS, 0, c->stream>>>(xg, tld(x), cols, k, NULL, NULL, 0, part);
        int rc = iris_cuda_check(b, "get_topk chunks");
        if (rc) return rc;
        k_topk_merge<<<(unsigned)g, TOPK_THREADS, merge_smem, c->stream>>>(part, n_part, k, d_ids, d_vals);
        if ((rc = iris_cuda_check(b, "get_topk merge"))) return rc;
        /* ids and values are adjacent: one copy (a step's wait for its candidates is on the path) */
        const void *h;
        const size_t nb = (size_t)g * k * sizeof(int32_t);
        if ((rc = iris_cuda_download_staged(b, d_ids, 2 * nb, &h))) return rc;
        memcpy(ids + r0 * k, h, nb);
        memcpy(vals + r0 * k, (const char *)h + nb, nb);
    }
    return 0;
}
