/* lmhead_probe.cu: can a lossless 12-bit form of the BF16 lm_head (2B: 151,936 x 2,048, 622 MB)
 * be read by a batch-1 GEMV faster than the BF16 rows themselves?  The form: per weight its sign and
 * 7 mantissa bits (a byte) and a 4-bit exponent offset (a nibble) from a base exponent kept per 64
 * weights of a row (1 byte): 1.52 bytes a weight, 76% of BF16.  A group whose exponents span more
 * than 16 binades (or holds a zero or subnormal) cannot be written so ("escapes", to be kept as BF16
 * beside it); the probe counts them.  Weights: N(0, 0.02) as BF16 (like trained embeddings); x:
 * N(0, 1).  Prints each GEMV's time (median of 20), its bytes' rate, the decoded weights' mismatches
 * against the BF16 ones (must be 0 outside escaped groups) and the outputs' largest difference.
 * H100, 2026-11-26: BF16 206-208 us (3.0 TB/s; the product's k_gemv_n 199), the 12-bit form
 * 187-189 us (2.5 TB/s of its bytes, 91% of the time) with ~8 integer operations a weight, and the
 * same (186.8-188.0 us) with form 2's ~4 (below): so not the decode's arithmetic but the reads bind
 * (two arrays of 16- and 8-byte loads a lane; 32-weight pieces of two 16-byte loads a lane each were
 * slower, 341 us, two rows a warp at once 198).  Escapes: 13,156 of 4,861,952 groups (0.27%; form
 * 2's 8-step window of the upper exponent bits 23,748, 0.49%); no other weight differs.  Read
 * through bulk copies into shared memory instead (a CTA an SM, batches of 8 rows, 8 consumer warps):
 * BF16 213 us (2.92 TB/s), form 2 196 us (2.40 TB/s of its bytes, 92%).  So ~8-10% of the lm_head's
 * time either way, far from the bytes' 76%: not worth a weight format of its own yet.
 *   nvcc -arch=sm_90 -o lmhead_probe bench/lmhead_probe.cu && ./lmhead_probe */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define V 151936
#define K 2048
#define G 64 /* weights a base exponent */

__device__ float rnorm(uint64_t i, uint64_t seed) { /* Box-Muller on a hash */
    auto h = [](uint64_t z) {
        z += 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    };
    uint64_t a = h(i * 2 + seed), b = h(i * 2 + 1 + seed);
    float u1 = ((a >> 40) + 1) * (1.0f / 16777217.0f), u2 = (b >> 40) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}
__global__ void k_fill(__nv_bfloat16 *w, float *x) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (int64_t)V * K; i += (int64_t)gridDim.x * blockDim.x) {
        w[i] = __float2bfloat16(0.02f * rnorm(i, 1));
        if (i < K) x[i] = rnorm(i, 7);
    }
}
/* One thread a group; escaped groups counted (their offsets clamped).  Form 1: the byte is the sign
 * and the mantissa, the nibble the exponent's offset from the group's base (its largest - 15).  Form 2,
 * for a decode of a few operations a weight: the byte is the exponent's low bit and the mantissa (the
 * fp32's bits 16-23), the nibble the sign and a 3-bit offset of the exponent's upper 7 bits from the
 * group's base bh (their largest - 7): a byte permute looks the upper byte (sign clear) up in the
 * group's 8-entry table (bh + 0..7), the signs go in, and a permute a weight joins the two bytes. */
template <int FORM>
__global__ void k_pack(const __nv_bfloat16 *w, uint8_t *lo, uint8_t *nib, uint8_t *base, unsigned *esc) {
    int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (g >= (int64_t)V * K / G) return;
    const uint16_t *b = (const uint16_t *)w + g * G;
    auto field = [](uint16_t u) { return FORM == 1 ? (u >> 7) & 0xff : (u >> 8) & 0x7f; };
    const int win = FORM == 1 ? 15 : 7;
    int fmax = 0, fmin = 255;
    for (int i = 0; i < G; i++) fmax = max(fmax, (int)field(b[i])), fmin = min(fmin, (int)field(b[i]));
    const int bs = max(fmax - win, FORM == 1 ? 1 : 0);
    if (fmin < bs) atomicAdd(esc, 1u);
    base[g] = (uint8_t)bs;
    for (int i = 0; i < G; i++) {
        const int o = min(max((int)field(b[i]) - bs, 0), win);
        lo[g * G + i] = (uint8_t)(FORM == 1 ? ((b[i] >> 8) & 0x80) | (b[i] & 0x7f) : b[i] & 0xff);
        uint8_t *n = nib + (g * G + i) / 2, v = (uint8_t)(FORM == 1 ? o : (b[i] >> 15) << 3 | o);
        if (i % 2 == 0) *n = v;
        else *n |= (uint8_t)(v << 4);
    }
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float bf_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }

__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned c) {
    unsigned d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
/* x into shared memory, for every row */
__device__ __forceinline__ void stage_x(float *xs, const float *x) {
    for (int i = threadIdx.x; i < K; i += blockDim.x) xs[i] = x[i];
    __syncthreads();
}
/* the base byte of group grp of a row whose 32 bases lanes 0-7 hold 4 a word */
__device__ __forceinline__ unsigned group_base(unsigned bw, int grp) {
    return (__shfl_sync(0xffffffffu, bw, grp / 4) >> (8 * (grp % 4))) & 0xff;
}
/* Sums of 8 BF16 weights (a 16-byte load) and of 16 weights of each 12-bit form (16 bytes of the
 * low bytes, 8 of nibbles) times x. */
__device__ __forceinline__ float dot8_bf16(uint4 q, const float *xp, float acc) {
    const unsigned u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; j++) acc = fmaf(bf_lo(u[j]), xp[2 * j], fmaf(bf_hi(u[j]), xp[2 * j + 1], acc));
    return acc;
}
__device__ __forceinline__ float dot16_form1(uint4 sq, uint2 nq2, unsigned bs, const float *xp, float acc) {
    const unsigned sw[4] = {sq.x, sq.y, sq.z, sq.w}, nw2[2] = {nq2.x, nq2.y}, ebias = bs << 23;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const unsigned nq = nw2[q / 2] >> (16 * (q % 2));
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const unsigned by = (sw[q] >> (8 * j)) & 0xff, off = (nq >> (4 * j)) & 0xf;
            const unsigned bits = ((by & 0x80u) << 24) | (ebias + (off << 23)) | ((by & 0x7fu) << 16);
            acc = fmaf(__uint_as_float(bits), xp[q * 4 + j], acc);
        }
    }
    return acc;
}
/* form 2 (k_pack<2>): a byte permute looks the 4 upper bytes up in the group's table bh + 0..7, the
 * signs go in, and a permute a weight joins upper and lower bytes */
__device__ __forceinline__ float dot16_form2(uint4 sq, uint2 nq2, unsigned bh, const float *xp, float acc) {
    const unsigned tlo = bh * 0x01010101u + 0x03020100u, thi = tlo + 0x04040404u;
    const unsigned sw[4] = {sq.x, sq.y, sq.z, sq.w}, nw2[2] = {nq2.x, nq2.y};
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const unsigned nq = (nw2[q / 2] >> (16 * (q % 2))) & 0xffffu;
        unsigned h4 = prmt(tlo, thi, nq & 0x7777u);
        h4 |= ((nq & 0x8u) << 4) | ((nq & 0x80u) << 8) | ((nq & 0x800u) << 12) | ((nq & 0x8000u) << 16);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const unsigned bits = prmt(sw[q], h4, ((4 + j) << 12) | (j << 8)) & 0xffff0000u;
            acc = fmaf(__uint_as_float(bits), xp[q * 4 + j], acc);
        }
    }
    return acc;
}

/* Register loads, a warp a row (16 bytes a lane a load of BF16, or of a 12-bit form's low bytes
 * with 8 of its nibbles) */
template <int FORM>
__global__ void __launch_bounds__(256) k_gemv(const void *a0, const uint8_t *nib, const uint8_t *base, const float *x, float *y) {
    __shared__ float xs[K];
    stage_x(xs, x);
    const int lane = threadIdx.x & 31, nw = gridDim.x * (blockDim.x / 32);
    for (int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < V; row += nw) {
        float acc = 0;
        if (FORM == 0) {
            const uint4 *r = (const uint4 *)((const __nv_bfloat16 *)a0 + (int64_t)row * K);
            uint4 q[K / 256];
#pragma unroll
            for (int t = 0; t < K / 256; t++) q[t] = __ldcs(r + lane + 32 * t);
#pragma unroll
            for (int t = 0; t < K / 256; t++) acc = dot8_bf16(q[t], xs + (lane + 32 * t) * 8, acc);
        } else {
            const uint4 *s4 = (const uint4 *)((const uint8_t *)a0 + (int64_t)row * K);
            const uint2 *n2 = (const uint2 *)(nib + (int64_t)row * K / 2);
            const unsigned bw = __ldcs((const unsigned *)(base + (int64_t)row * (K / G)) + (lane & 7));
            uint4 sq[K / 512];
            uint2 nq[K / 512];
#pragma unroll
            for (int t = 0; t < K / 512; t++) sq[t] = __ldcs(s4 + lane + 32 * t), nq[t] = __ldcs(n2 + lane + 32 * t);
#pragma unroll
            for (int t = 0; t < K / 512; t++) {
                const int p = lane + 32 * t; /* 16-weight piece p, of group p / 4 */
                const unsigned bb = group_base(bw, p / 4);
                acc = FORM == 1 ? dot16_form1(sq[t], nq[t], bb, xs + p * 16, acc) : dot16_form2(sq[t], nq[t], bb, xs + p * 16, acc);
            }
        }
        acc = warp_sum(acc);
        if (lane == 0) y[row] = acc;
    }
}
/* decoded weights against the BF16 ones: mismatches */
__global__ void k_check(const __nv_bfloat16 *w, const uint8_t *sm, const uint8_t *nib, const uint8_t *base, unsigned *bad) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (int64_t)V * K; i += (int64_t)gridDim.x * blockDim.x) {
        unsigned by = sm[i], off = (nib[i / 2] >> (4 * (i % 2))) & 0xf, bs = base[i / G];
        unsigned short d = (unsigned short)(((by & 0x80u) << 8) | ((bs + off) << 7) | (by & 0x7fu));
        if (d != ((const unsigned short *)w)[i]) atomicAdd(bad, 1u);
    }
}

/* The same two forms' reads reshaped: a CTA an SM, one producer thread streaming batches of RB rows
 * (each array's rows contiguous: one bulk copy an array a batch) into a ring of NST stages in shared
 * memory, 8 consumer warps a row each of a batch, decoding from shared memory. */
#define RB 8
static __device__ __forceinline__ unsigned su32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void mb_init(uint64_t *b, unsigned n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(su32(b)), "r"(n) : "memory");
}
static __device__ __forceinline__ void mb_wait(uint64_t *b, unsigned par) {
    asm volatile("{\n .reg .pred p;\n W_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W_%=;\n}\n" ::"r"(su32(b)),
                 "r"(par)
                 : "memory");
}
static __device__ __forceinline__ void mb_arrive(uint64_t *b) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(su32(b)) : "memory");
}
static __device__ __forceinline__ void mb_expect(uint64_t *b, unsigned tx) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(su32(b)), "r"(tx) : "memory");
}
static __device__ __forceinline__ void bulk(void *dst, const void *src, unsigned n, uint64_t *b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(su32(dst)), "l"(src),
                 "r"(n), "r"(su32(b))
                 : "memory");
}
/* FORM 0: BF16 rows; 2: the 12-bit form 2 */
template <int FORM, int NST>
__global__ void __launch_bounds__(288, 1) k_gemv_bulk(const void *a0, const uint8_t *nib, const uint8_t *base, const float *x, float *y) {
    constexpr unsigned LOB = FORM == 0 ? RB * K * 2 : RB * K, NIB = FORM == 0 ? 0 : RB * K / 2, BAS = FORM == 0 ? 0 : RB * K / G;
    constexpr unsigned STB = LOB + NIB + BAS;
    extern __shared__ __align__(128) uint8_t sm_[];
    __shared__ float xs[K];
    __shared__ uint64_t full[NST], empty[NST];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    if (threadIdx.x == 0)
        for (int i = 0; i < NST; i++) mb_init(&full[i], 1), mb_init(&empty[i], 8);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    stage_x(xs, x);
    const int nb = V / RB;
    if (warp == 8) {
        if (lane == 0) {
            int n = 0;
            for (int b = blockIdx.x; b < nb; b += gridDim.x, n++) {
                const int st = n % NST;
                if (n >= NST) mb_wait(&empty[st], ((n / NST) - 1) & 1);
                uint8_t *d = sm_ + st * STB;
                mb_expect(&full[st], STB);
                bulk(d, (const uint8_t *)a0 + (int64_t)b * LOB, LOB, &full[st]);
                if (FORM != 0) bulk(d + LOB, nib + (int64_t)b * NIB, NIB, &full[st]), bulk(d + LOB + NIB, base + (int64_t)b * BAS, BAS, &full[st]);
            }
        }
        return;
    }
    int n = 0;
    for (int b = blockIdx.x; b < nb; b += gridDim.x, n++) {
        const int st = n % NST;
        mb_wait(&full[st], (n / NST) & 1);
        const uint8_t *d = sm_ + st * STB;
        float acc = 0;
        if (FORM == 0) {
            const uint4 *r = (const uint4 *)(d + warp * K * 2);
#pragma unroll
            for (int t = 0; t < K / 256; t++) acc = dot8_bf16(r[lane + 32 * t], xs + (lane + 32 * t) * 8, acc);
        } else {
            const uint4 *s4 = (const uint4 *)(d + warp * K);
            const uint2 *n2 = (const uint2 *)(d + LOB + warp * K / 2);
            const unsigned bw = ((const unsigned *)(d + LOB + NIB + warp * (K / G)))[lane & 7];
#pragma unroll
            for (int t = 0; t < K / 512; t++) {
                const int p = lane + 32 * t;
                acc = dot16_form2(s4[p], n2[p], group_base(bw, p / 4), xs + p * 16, acc);
            }
        }
        __syncwarp();
        if (lane == 0) mb_arrive(&empty[st]);
        acc = warp_sum(acc);
        if (lane == 0) y[b * RB + warp] = acc;
    }
}

__global__ void k_check2(const __nv_bfloat16 *w, const uint8_t *lo, const uint8_t *nib, const uint8_t *base, unsigned *bad) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (int64_t)V * K; i += (int64_t)gridDim.x * blockDim.x) {
        unsigned v = (nib[i / 2] >> (4 * (i % 2))) & 0xf, bh = base[i / G];
        unsigned short d = (unsigned short)(((v >> 3) << 15) | ((bh + (v & 7)) << 8) | lo[i]);
        if (d != ((const unsigned short *)w)[i]) atomicAdd(bad, 1u);
    }
}

template <typename F> static float time_med(F f) {
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    std::vector<float> ms;
    for (int r = 0; r < 25; r++) {
        cudaEventRecord(a);
        f();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float t;
        cudaEventElapsedTime(&t, a, b);
        if (r >= 5) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2] * 1000.0f;
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    __nv_bfloat16 *w;
    float *x, *y0, *y1;
    uint8_t *sm, *nib, *base;
    unsigned *cnt;
    cudaMalloc(&w, (size_t)V * K * 2), cudaMalloc(&x, K * 4), cudaMalloc(&y0, V * 4), cudaMalloc(&y1, V * 4);
    cudaMalloc(&sm, (size_t)V * K), cudaMalloc(&nib, (size_t)V * K / 2), cudaMalloc(&base, (size_t)V * K / G);
    cudaMalloc(&cnt, 8), cudaMemset(cnt, 0, 8);
    k_fill<<<sms * 8, 256>>>(w, x);
    k_pack<1><<<(unsigned)(((int64_t)V * K / G + 255) / 256), 256>>>(w, sm, nib, base, cnt);
    k_check<<<sms * 8, 256>>>(w, sm, nib, base, cnt + 1);
    unsigned h[2];
    cudaMemcpy(h, cnt, 8, cudaMemcpyDeviceToHost);
    uint8_t *lo2, *nib2, *base2;
    unsigned *cnt2, h2[2];
    float *y2;
    cudaMalloc(&lo2, (size_t)V * K), cudaMalloc(&nib2, (size_t)V * K / 2), cudaMalloc(&base2, (size_t)V * K / G);
    cudaMalloc(&cnt2, 8), cudaMemset(cnt2, 0, 8), cudaMalloc(&y2, V * 4);
    k_pack<2><<<(unsigned)(((int64_t)V * K / G + 255) / 256), 256>>>(w, lo2, nib2, base2, cnt2);
    k_check2<<<sms * 8, 256>>>(w, lo2, nib2, base2, cnt2 + 1);
    cudaMemcpy(h2, cnt2, 8, cudaMemcpyDeviceToHost);
    const double bb = (double)V * K * 2, bc = (double)V * K * 1.5 + (double)V * K / G;
    for (int blocks = sms * 4; blocks <= sms * 8; blocks *= 2) {
        float t0 = time_med([&] { k_gemv<0><<<blocks, 256>>>(w, nullptr, nullptr, x, y0); });
        float t1 = time_med([&] { k_gemv<1><<<blocks, 256>>>(sm, nib, base, x, y1); });
        float t2 = time_med([&] { k_gemv<2><<<blocks, 256>>>(lo2, nib2, base2, x, y2); });
        printf("%d CTAs: bf16 %.1f us (%.2f TB/s)   12-bit %.1f us (%.2f TB/s of its bytes, %.1f%% of bf16's time)   form 2 %.1f us (%.2f TB/s, %.1f%%)\n",
               blocks, t0, bb / t0 / 1e6, t1, bc / t1 / 1e6, 100.0 * t1 / t0, t2, bc / t2 / 1e6, 100.0 * t2 / t0);
    }
    std::vector<float> a(V), c(V);
    cudaMemcpy(a.data(), y0, V * 4, cudaMemcpyDeviceToHost), cudaMemcpy(c.data(), y1, V * 4, cudaMemcpyDeviceToHost);
    {
        float *y3, *y4;
        cudaMalloc(&y3, V * 4), cudaMalloc(&y4, V * 4);
        constexpr unsigned s0 = RB * K * 2, s2 = RB * K + RB * K / 2 + RB * K / G;
        cudaFuncSetAttribute(k_gemv_bulk<0, 6>, cudaFuncAttributeMaxDynamicSharedMemorySize, 6 * s0);
        cudaFuncSetAttribute(k_gemv_bulk<2, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, 8 * s2);
        float t5 = time_med([&] { k_gemv_bulk<0, 6><<<sms, 288, 6 * s0>>>(w, nullptr, nullptr, x, y3); });
        float t6 = time_med([&] { k_gemv_bulk<2, 8><<<sms, 288, 8 * s2>>>(lo2, nib2, base2, x, y4); });
        std::vector<float> a3(V), a4(V), a0(V);
        cudaMemcpy(a0.data(), y0, V * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(a3.data(), y3, V * 4, cudaMemcpyDeviceToHost), cudaMemcpy(a4.data(), y4, V * 4, cudaMemcpyDeviceToHost);
        double d3 = 0, d4 = 0;
        for (int i = 0; i < V; i++) d3 = std::max(d3, (double)fabsf(a0[i] - a3[i])), d4 = std::max(d4, (double)fabsf(a0[i] - a4[i]));
        printf("bulk copies into shared memory, a CTA an SM: bf16 %.1f us (%.2f TB/s, max |d| %.3g), form 2 %.1f us (%.2f TB/s of its bytes, %.1f%% of bf16's; max |d| %.3g)  %s\n",
               t5, bb / t5 / 1e6, d3, t6, bc / t6 / 1e6, 100.0 * t6 / t5, d4, cudaGetErrorString(cudaGetLastError()));
    }
    std::vector<float> c2(V);
    cudaMemcpy(c2.data(), y2, V * 4, cudaMemcpyDeviceToHost);
    double md = 0, md2 = 0, mx = 0;
    for (int i = 0; i < V; i++)
        md = std::max(md, (double)fabsf(a[i] - c[i])), md2 = std::max(md2, (double)fabsf(a[i] - c2[i])), mx = std::max(mx, (double)fabsf(a[i]));
    printf("form 2: groups escaping: %u; decoded weights differing from BF16: %u; outputs: max |d| %.3g\n", h2[0], h2[1], md2);
    printf("groups escaping the 16-binade window: %u of %lld; decoded weights differing from BF16: %u; outputs: max |d| %.3g of max %.3g; %s\n",
           h[0], (long long)V * K / G, h[1], md, mx, cudaGetErrorString(cudaGetLastError()));
    return 0;
}
