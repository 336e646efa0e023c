/* cuda_attn_wgmma.cu: flash attention on Hopper's warpgroup tensor cores (wgmma, sm_90a) — the
 * vision encoder's attention (bidirectional within each image's segment of rows) for head size 64
 * (Qwen3-VL-2B's and 4B's vision heads), and the paged prefill's 64-row tiles for head size 128
 * (the decoders' heads) over a BF16 cache.  The default for those where the build has sm_90a code
 * and the device is 9.0 (cuda_ctx.wgmma); cuda_attn_mma.cu's mma.sync kernel otherwise, and as its
 * check (iris_cuda_set_attn_impl 5).  The segments' kernel is described first; the paged one
 * (below) differs where it says.
 *
 * Thread mapping: a CTA of WGS warpgroups owns 64·WGS consecutive query rows of one head (grid:
 * row tiles of all segments × heads; a tile never holds two segments); warpgroup w owns 64 of them.
 * Q [64·WGS, 64] is staged once; per tile of BK keys the CTA stages K and V [BK, 64] two deep
 * (cp.async: the next tile lands while this one is multiplied).  Shared tiles are rows of 128
 * bytes in the 128-byte swizzle (16-byte piece c of row r at piece c ^ (r % 8)), the layout the
 * wgmma descriptors name: Q and K K-major, V N-major (its rows are keys, read transposed).
 * Per tile each warpgroup computes S = Q·Kᵀ (64 x BK, fp32 in registers: wgmma's accumulator
 * layout, lane (g, t) of warp w holding rows 16w + g and 16w + g + 8, columns 8i + 2t, + 1), the
 * running max and sum as cuda_attn_mma.cu does (max on the raw scores, one FFMA an exponent, P
 * rounded to bf16; the exponent on the special-function unit alone, ex2 below), P packed straight into wgmma's A-register layout, and O += P·V (64 x 64 fp32
 * in registers).  The same arithmetic as the mma kernel a product; the tensor cores' order of
 * summation and BK differ, so the bits may too.  Compute-bound: 4·N²·64 flops a head for a segment
 * of N rows. */
#include "cuda_attn.cuh"

#define WG_HD 64

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_ON 1
#else
#define WG_ON 0
#endif

/* Device code only where sm_90a code is compiled (the kernel is empty elsewhere and never launched). */
#if WG_ON
/* A shared-memory matrix descriptor: 128-byte swizzle, sbo bytes between 8-row groups, lbo between
 * 64-column blocks (N-major only). */
static __device__ __forceinline__ uint64_t wg_desc(const void *p, uint32_t lbo, uint32_t sbo) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3FFFF) >> 4) | (uint64_t)((lbo & 0x3FFFF) >> 4) << 16 |
           (uint64_t)((sbo & 0x3FFFF) >> 4) << 32 | 1ull << 62;
}

/* Byte offset of 16-byte piece c of row r in a 128-byte-swizzled tile (1,024-byte aligned). */
static __device__ __forceinline__ uint32_t sw128(int r, int c) { return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4)); }

static __device__ __forceinline__ void wg_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ void wg_wait0() {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
/* cp.async's writes made visible to the tensor cores' (async proxy) reads */
static __device__ __forceinline__ void fence_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* The accumulators pinned: no read of them moves across a wgmma wait, no write across an issue. */
template <int N> static __device__ __forceinline__ void wg_pin(float *d) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* A registers kept until the wgmma that reads them has completed. */
template <int N> static __device__ __forceinline__ void wg_pin_u(uint32_t *r) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(r[i])::"memory");
}

/* D (m64nN, fp32) (+)= A·B, A [64, 16] and B [16, N] K-major from shared memory; acc 0 overwrites. */
template <int N> __device__ __forceinline__ void wg_ss(float *d, uint64_t da, uint64_t db, int acc);
/* D (m64nN) += A·B, A [64, 16] bf16 in registers, B [16, N] N-major (transposed) in shared memory. */
template <int N> __device__ __forceinline__ void wg_rs_t(float *d, const uint32_t *a, uint64_t db);

template <> __device__ __forceinline__ void wg_ss<64>(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wg_ss<128>(float *d, uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wg_rs_t<128>(float *d, const uint32_t *a, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
template <> __device__ __forceinline__ void wg_rs_t<64>(float *d, const uint32_t *a, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}


/* The tile staged last but one has landed and is visible to the tensor cores, in every thread:
 * the group just staged stays in flight. */
static __device__ __forceinline__ void tile_landed() {
    cp_async_commit();
    cp_async_wait<1>();
    fence_async_shared();
    __syncthreads();
}

/* 2^x on the special-function unit alone, flushing a subnormal result to 0 (a probability under
 * 2^-126 of the row's largest, which no sum here can hold): exp2f's subnormal handling is three
 * more instructions an exponent.  H100, 8 segments of 4,096 rows: 1.73-1.75 -> 1.59-1.61 ms. */
static __device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* A warpgroup's rows' running max and sum (m, l: rows g and g + 8 of each warp) updated with a tile's
 * scores s (wgmma's accumulator layout, NS columns; masked ones -inf): P = 2^(s·scale − max) into p
 * in bf16, packed in wgmma's A-register layout (p[2i]: row g, keys 8i + 2t, + 1; p[2i + 1]: row
 * g + 8), and O's NO columns rescaled by the change of max. */
template <int NS, int NO>
static __device__ __forceinline__ void softmax_tile(float *s, float scale_log2, float (&m)[2], float (&l)[2],
                                                    uint32_t *p, float *o) {
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int i = 0; i < NS / 8; i++) {
        mx0 = fmaxf(mx0, fmaxf(s[4 * i], s[4 * i + 1]));
        mx1 = fmaxf(mx1, fmaxf(s[4 * i + 2], s[4 * i + 3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    float mn0 = fmaxf(m[0], mx0 * scale_log2), mn1 = fmaxf(m[1], mx1 * scale_log2);
    float c0 = mn0 == -INFINITY ? 1.0f : ex2(m[0] - mn0), c1 = mn1 == -INFINITY ? 1.0f : ex2(m[1] - mn1);
    float nm0 = mn0 == -INFINITY ? 0.0f : -mn0, nm1 = mn1 == -INFINITY ? 0.0f : -mn1;
    float sum0 = 0, sum1 = 0;
#pragma unroll
    for (int i = 0; i < NS / 8; i++) {
        float e0 = ex2(fmaf(s[4 * i], scale_log2, nm0)), e1 = ex2(fmaf(s[4 * i + 1], scale_log2, nm0));
        float e2 = ex2(fmaf(s[4 * i + 2], scale_log2, nm1)), e3 = ex2(fmaf(s[4 * i + 3], scale_log2, nm1));
        sum0 += e0 + e1;
        sum1 += e2 + e3;
        p[2 * i] = pack2(e0, e1);
        p[2 * i + 1] = pack2(e2, e3);
    }
    l[0] = l[0] * c0 + sum0, l[1] = l[1] * c1 + sum1;
    m[0] = mn0, m[1] = mn1;
#pragma unroll
    for (int i = 0; i < NO / 8; i++) o[4 * i] *= c0, o[4 * i + 1] *= c0, o[4 * i + 2] *= c1, o[4 * i + 3] *= c1;
}

/* O (NO columns) += P·V over NK keys: NK / 16 k steps (V's rows 2,048 bytes a step in the swizzled
 * tile at descriptor dv); P's A registers for keys [16kc, 16kc + 16): (g, 2t), (g + 8, 2t),
 * (g, 2t + 8), (g + 8, 2t + 8).  Waits for the products. */
template <int NK, int NO>
static __device__ __forceinline__ void pv_tile(float *o, uint32_t *p, uint64_t dv) {
    wg_fence();
#pragma unroll
    for (int kc = 0; kc < NK / 16; kc++) {
        uint32_t pa[4] = {p[4 * kc], p[4 * kc + 1], p[4 * kc + 2], p[4 * kc + 3]};
        wg_rs_t<NO>(o, pa, dv + (uint64_t)(kc * 2048 >> 4));
    }
    wg_commit();
    wg_wait0();
    wg_pin<NO / 2>(o);
    wg_pin_u<NK / 4>(p);
}

/* Rows row0 and row0 + 8 of O (NO columns), divided by their sums, to o's head column col0 (rows
 * from rend on are not written). */
template <int NO>
static __device__ __forceinline__ void store_rows(const iris_flash_args &a, const float *o, const float (&l)[2], int row0,
                                                  int rend, int64_t col0) {
    float l0 = l[0], l1 = l[1];
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float i0 = l0 > 0 ? 1.0f / l0 : 0.0f, i1 = l1 > 0 ? 1.0f / l1 : 0.0f;
    const int row1 = row0 + 8, t = threadIdx.x & 3;
    bf16 *d0 = a.o + (int64_t)row0 * a.ldo + col0, *d1 = a.o + (int64_t)row1 * a.ldo + col0;
#pragma unroll
    for (int i = 0; i < NO / 8; i++) {
        int c = 8 * i + 2 * t;
        if (row0 < rend) *(__nv_bfloat162 *)(d0 + c) = __floats2bfloat162_rn(o[4 * i] * i0, o[4 * i + 1] * i0);
        if (row1 < rend) *(__nv_bfloat162 *)(d1 + c) = __floats2bfloat162_rn(o[4 * i + 2] * i1, o[4 * i + 3] * i1);
    }
}

/* Rows [0, N) of a head's 64 columns (rows of ld elements at src) into the swizzled tile at shared
 * address dst, rows from `have` on zeros.  Thread i copies 16-byte piece i % 8 of rows i / 8,
 * i / 8 + NT / 8, ...: with NT a multiple of 64 a thread's rows share their row % 8, so its pieces
 * lie at one swizzled offset plus whole 8-row groups, an address add a copy.  H200, 8 segments of
 * 4,096 rows: the per-piece index arithmetic was ~40% of the kernel's issued instructions (ncu). */
template <int NT, int N>
static __device__ __forceinline__ void stage_rows(uint32_t dst, const bf16 *src, int64_t ld, int have) {
    static_assert(NT % 64 == 0 && N % (NT / 8) == 0, "a thread's rows share row % 8");
    constexpr int RS = NT / 8;
    const int r = threadIdx.x >> 3, c = threadIdx.x & 7;
    const uint32_t d = dst + sw128(r, c);
    const bf16 *p = src + (int64_t)r * ld + c * 8;
    const int64_t step = (int64_t)RS * ld;
    if (have >= N) {
#pragma unroll
        for (int k = 0; k < N / RS; k++) cp_async16(d + (uint32_t)(k * RS * 128), p + k * step, 16);
    } else {
#pragma unroll
        for (int k = 0; k < N / RS; k++) {
            bool in = r + k * RS < have;
            cp_async16(d + (uint32_t)(k * RS * 128), in ? p + k * step : src, in ? 16 : 0);
        }
    }
}
#endif

template <int BK, int WGS> struct wg_smem {
    static constexpr int MQ = 64 * WGS;
    static constexpr size_t q = (size_t)MQ * 128, kv = (size_t)BK * 128;
    static constexpr size_t bytes = q + 4 * kv + 1024; /* + the 1,024-byte alignment of the swizzle */
};

template <int BK, int WGS>
__global__ void __launch_bounds__(WGS * 128, WGS == 1 ? 3 : 1) k_attn_wgmma(iris_flash_args a) {
#if WG_ON
    typedef wg_smem<BK, WGS> L;
    constexpr int NT = WGS * 128, MQ = L::MQ;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *sm = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    const uint32_t s_q = (uint32_t)__cvta_generic_to_shared(sm);
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x & 31, g = lane >> 2,
              t = lane & 3;
    const int h = blockIdx.y;
    int sg = 0;
    while (sg + 1 < a.n_seg && (int)blockIdx.x >= a.seg_tile[sg + 1]) sg++;
    const int kbase = a.seg_row[sg], n_keys = a.seg_row[sg + 1] - kbase;
    const int r0 = kbase + ((int)blockIdx.x - a.seg_tile[sg]) * MQ, rend = min(r0 + MQ, a.seg_row[sg + 1]);
    const bf16 *kh = a.k + (int64_t)kbase * a.ldk + (int64_t)h * WG_HD, *vh = a.v + (int64_t)kbase * a.ldk + (int64_t)h * WG_HD;

    stage_rows<NT, MQ>(s_q, a.q + (int64_t)r0 * a.ldq + (int64_t)h * WG_HD, a.ldq, rend - r0);
    auto stage_kv = [&](int j0, int st) {
        uint32_t ks = s_q + (uint32_t)(L::q + (size_t)st * 2 * L::kv), vs = ks + (uint32_t)L::kv;
        int have = min(BK, n_keys - j0);
        stage_rows<NT, BK>(ks, kh + (int64_t)j0 * a.ldk, a.ldk, have);
        stage_rows<NT, BK>(vs, vh + (int64_t)j0 * a.ldk, a.ldk, have);
    };
    stage_kv(0, 0);
    cp_async_commit();

    float o[32], s[BK / 2];
#pragma unroll
    for (int i = 0; i < 32; i++) o[i] = 0;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
    const uint64_t dq = wg_desc(sm + (size_t)wg * 64 * 128, 16, 1024);
    const int n_tiles = (n_keys + BK - 1) / BK;
    for (int it = 0; it < n_tiles; it++) {
        const int j0 = it * BK, st = it & 1;
        if (it + 1 < n_tiles) stage_kv(j0 + BK, st ^ 1);
        tile_landed();
        const unsigned char *ks = sm + L::q + (size_t)st * 2 * L::kv, *vs = ks + L::kv;
        const uint64_t dk = wg_desc(ks, 16, 1024), dv = wg_desc(vs, (uint32_t)L::kv, 1024);

        /* S = Q·Kᵀ: four k steps of 16 head dims (32 bytes along the swizzled rows) */
        wg_fence();
#pragma unroll
        for (int kc = 0; kc < WG_HD / 16; kc++) wg_ss<BK>(s, dq + 2 * kc, dk + 2 * kc, kc > 0);
        wg_commit();
        wg_wait0();
        wg_pin<BK / 2>(s);

        if (j0 + BK > n_keys) { /* keys past the segment: -inf */
#pragma unroll
            for (int i = 0; i < BK / 8; i++) {
                int j = j0 + 8 * i + 2 * t;
                if (j >= n_keys) s[4 * i] = s[4 * i + 2] = -INFINITY;
                if (j + 1 >= n_keys) s[4 * i + 1] = s[4 * i + 3] = -INFINITY;
            }
        }
        uint32_t p[BK / 4];
        softmax_tile<BK, 64>(s, a.scale_log2, m, l, p, o);
        pv_tile<BK, 64>(o, p, dv);
        __syncthreads(); /* this stage is refilled at the next tile */
    }
    store_rows<64>(a, o, l, r0 + wg * 64 + warp * 16 + g, rend, (int64_t)h * WG_HD);
#endif
}

template <int BK, int WGS> static int launch_wg(iris_backend *b, const iris_flash_args &in, int n_heads) {
    constexpr int MQ = 64 * WGS;
    constexpr size_t smem = wg_smem<BK, WGS>::bytes;
    static int attr_set; /* one engine thread owns the GPU (DESIGN.md) */
    if (!attr_set) {
        if (cudaFuncSetAttribute(k_attn_wgmma<BK, WGS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
            cudaSuccess)
            return iris_cuda_check(b, "attention (wgmma): shared memory limit");
        attr_set = 1;
    }
    iris_flash_args a = in;
    if (a.n_seg <= 0) a.n_seg = 1, a.seg_row[0] = 0, a.seg_row[1] = a.n_rows;
    a.seg_tile[0] = 0;
    for (int i = 0; i < a.n_seg; i++) a.seg_tile[i + 1] = a.seg_tile[i] + (a.seg_row[i + 1] - a.seg_row[i] + MQ - 1) / MQ;
    if (a.seg_tile[a.n_seg] == 0) return 0;
    dim3 grid((unsigned)a.seg_tile[a.n_seg], (unsigned)n_heads);
    k_attn_wgmma<BK, WGS><<<grid, WGS * 128, smem, cuda_of(b)->stream>>>(a);
    return iris_cuda_check(b, "attention (wgmma)");
}

/* ---- paged prefill, head size 128 ------------------------------------------------------------ */

#define WP_HD 128
#define WP_BK 64

/* A [rows, 128] tile: two [rows, 64] halves (columns 0-63, 64-127), each 128-byte swizzled. */
struct wp_smem {
    static constexpr size_t q = 64 * 256, kv = (size_t)WP_BK * 256;
    static constexpr size_t bytes = q + 4 * kv + 1024;
};

/* A paged prefill's 64-row tile of one sequence (listed, or flash_tile_ok) for one query head, causal over the
 * cache: row r sees the keys j < row_ctx[r].  One warpgroup a CTA, two an SM; K and V tiles of 64
 * keys two deep, staged row by row through the block table; heaviest tiles first (grid y counted
 * from the last tile).  The same arithmetic as the segments' kernel above. */
__global__ void __launch_bounds__(128, 2) k_attn_wgmma_paged(iris_flash_args a) {
#if WG_ON
    typedef wp_smem L;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *sm = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    const uint32_t s_q = (uint32_t)__cvta_generic_to_shared(sm);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.x, kvh = h / a.g, tile = (int)gridDim.y - 1 - (int)blockIdx.y;
    int r0, rend;
    if (a.tiles) {
        r0 = a.tiles[tile], rend = flash_tile_end(a.row_seq, a.n_rows, r0);
    } else {
        r0 = tile * 64, rend = min(r0 + 64, a.n_rows);
        if (!flash_tile_ok(a.row_seq, a.n_rows, r0, 64)) return;
    }
    const int seq = a.row_seq[r0], n_keys = a.row_ctx[rend - 1];
    const int row0 = r0 + warp * 16 + g, row1 = row0 + 8;
    const int lim0 = row0 < rend ? a.row_ctx[row0] : 0, lim1 = row1 < rend ? a.row_ctx[row1] : 0;

    /* thread i stages 16-byte piece i % 16 of rows i / 16, i / 16 + 8, ... */
    const int pc = threadIdx.x & 15, half = pc >> 3, c8 = pc & 7;
    for (int r = threadIdx.x >> 4; r < 64; r += 8) {
        bool in = r0 + r < rend;
        cp_async16(s_q + (uint32_t)(half * 64 * 128) + sw128(r, c8), a.q + (int64_t)(in ? r0 + r : r0) * a.ldq + (int64_t)h * WP_HD + pc * 8,
             in ? 16 : 0);
    }
    /* Keys j0 + r + 16u and j0 + r + 16u + 8 (r = i / 16) share a cache block (a block holds a
     * multiple of 16 keys and j0 is a multiple of 64): a thread looks up WP_BK / 16 blocks a tile,
     * and its pieces lie at one swizzled offset plus whole 8-row groups. */
    static_assert(IRIS_KV_BLOCK % 16 == 0 && WP_BK % 16 == 0, "two of a thread's keys a cache block");
    const int rk = threadIdx.x >> 4;
    const uint32_t soff = (uint32_t)(half * WP_BK * 128) + sw128(rk, c8);
    const int32_t *btab = a.block_tables + (int64_t)seq * a.max_blocks;
    const bf16 *kb = a.k + (int64_t)kvh * WP_HD + pc * 8, *vb = a.v + (int64_t)kvh * WP_HD + pc * 8;
    auto stage_kv = [&](int j0, int st) {
        const uint32_t ks = s_q + (uint32_t)(L::q + (size_t)st * 2 * L::kv) + soff, vs = ks + (uint32_t)L::kv;
        const bool full = j0 + WP_BK <= n_keys;
#pragma unroll
        for (int u = 0; u < WP_BK / 16; u++) {
            const int j = j0 + 16 * u + rk;
            const bool in0 = full || j < n_keys, in1 = full || j + 8 < n_keys;
            const int jl = in0 ? j : 0;
            const int64_t row = (int64_t)btab[jl / IRIS_KV_BLOCK] * IRIS_KV_BLOCK + jl % IRIS_KV_BLOCK;
            const int64_t o0 = row * a.ldk, o1 = in1 ? o0 + 8 * a.ldk : o0;
            const uint32_t d0 = (uint32_t)(16 * u * 128), d1 = d0 + 8 * 128;
            cp_async16(ks + d0, kb + o0, in0 ? 16 : 0);
            cp_async16(vs + d0, vb + o0, in0 ? 16 : 0);
            cp_async16(ks + d1, kb + o1, in1 ? 16 : 0);
            cp_async16(vs + d1, vb + o1, in1 ? 16 : 0);
        }
    };
    stage_kv(0, 0);
    cp_async_commit();

    float o[64], s[WP_BK / 2];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
    const int n_tiles = (n_keys + WP_BK - 1) / WP_BK;
    for (int it = 0; it < n_tiles; it++) {
        const int j0 = it * WP_BK, st = it & 1;
        if (it + 1 < n_tiles) stage_kv(j0 + WP_BK, st ^ 1);
        tile_landed();
        const unsigned char *ks = sm + L::q + (size_t)st * 2 * L::kv, *vs = ks + L::kv;
        /* S = Q·Kᵀ: 8 k steps of 16 head dims, 4 in each half */
        wg_fence();
#pragma unroll
        for (int kc = 0; kc < WP_HD / 16; kc++)
            wg_ss<WP_BK>(s, wg_desc(sm + (kc / 4) * 64 * 128 + (kc % 4) * 32, 16, 1024),
                         wg_desc(ks + (kc / 4) * WP_BK * 128 + (kc % 4) * 32, 16, 1024), kc > 0);
        wg_commit();
        wg_wait0();
        wg_pin<WP_BK / 2>(s);

        if (!(j0 + WP_BK <= lim0 && j0 + WP_BK <= lim1)) { /* the diagonal, the tile's end: -inf */
#pragma unroll
            for (int i = 0; i < WP_BK / 8; i++) {
                int j = j0 + 8 * i + 2 * t;
                if (j >= lim0) s[4 * i] = -INFINITY;
                if (j + 1 >= lim0) s[4 * i + 1] = -INFINITY;
                if (j >= lim1) s[4 * i + 2] = -INFINITY;
                if (j + 1 >= lim1) s[4 * i + 3] = -INFINITY;
            }
        }
        uint32_t p[WP_BK / 4];
        softmax_tile<WP_BK, WP_HD>(s, a.scale_log2, m, l, p, o);
        /* V's two 64-column halves are the product's two N blocks (lbo apart) */
        pv_tile<WP_BK, WP_HD>(o, p, wg_desc(vs, (uint32_t)(WP_BK * 128), 1024));
        __syncthreads(); /* this stage is refilled at the next tile */
    }
    store_rows<WP_HD>(a, o, l, row0, rend, (int64_t)h * WP_HD);
#endif
}

/* Paged prefill tiles of head size 128 and a BF16 cache (cuda_attn_flash.cu's paged arguments). */
int iris_cuda_attn_wgmma_paged(iris_backend *b, const iris_flash_args *a, int n_heads) {
    static int attr_set; /* one engine thread owns the GPU (DESIGN.md) */
    if (!attr_set) {
        if (cudaFuncSetAttribute(k_attn_wgmma_paged, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)wp_smem::bytes) !=
            cudaSuccess)
            return iris_cuda_check(b, "attention (wgmma, paged): shared memory limit");
        attr_set = 1;
    }
    int tiles = a->tiles ? a->n_tiles : (a->n_rows + 63) / 64;
    if (tiles == 0) return 0;
    k_attn_wgmma_paged<<<dim3((unsigned)n_heads, (unsigned)tiles), 128, wp_smem::bytes, cuda_of(b)->stream>>>(*a);
    return iris_cuda_check(b, "attention (wgmma, paged)");
}

/* Segments of head size 64 (q, k, v rows given at row 0 of a.seg_row, or one segment of a.n_rows).
 * Tiles of 128 keys, one warpgroup a CTA (three an SM).  H100, 8 segments of 4,096 rows, 16 heads,
 * before ex2 above: 1.74-1.75 ms (314-317 TFLOP/s) against mma.sync's 2.25; two warpgroups a CTA
 * 1.93-2.02, 64-key tiles 1.93, the next tile's scores overlapped with this tile's softmax 1.85-1.93. */
int iris_cuda_attn_wgmma(iris_backend *b, const iris_flash_args *a, int n_heads) { return launch_wg<128, 1>(b, *a, n_heads); }
