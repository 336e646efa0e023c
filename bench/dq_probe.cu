/* dq_probe.cu: what bounds cuda_decode.cu's consumer warps?  Each of 8 warps a CTA (one CTA an SM,
 * 4 more warps idle, as there) runs the GEMV super-step over a shared-memory slot again and again:
 * 2 x 16 FP8 codes a lane, their dequantization to bf16(q * s), 4 mma.sync m16n8k16.  Variants:
 *   cvt      as cuda_internal.cuh's dq16 (cvt e4m3x2 -> f16x2, f16 -> f32, multiply, cvt -> bf16x2)
 *   int      the e4m3 -> f16 step in integer operations (a byte permute, a shift, two logic ops)
 *   cvt-nomma / int-nomma   the dequantization alone;  mma-only   the products alone
 * Prints cycles a super-step a warp and the bytes a cycle an SM that makes; checks that `int` gives
 * dq16's bits for every e4m3 code but the NaNs over a spread of scales.
 *   nvcc -O3 -arch=sm_90 -Iinclude -Isrc -Isrc/base -o dq_probe bench/dq_probe.cu && ./dq_probe
 * Measured (H100 80GB HBM3, 2026-11-25): int matches dq16 on every code and scale tried; cycles a
 * super-step a warp: cvt 328.8 (24.9 bytes a cycle an SM), int 439.6, cvt-nomma 319.8, int-nomma
 * 412.7, mma-only 96.6.  The dequantization's arithmetic, not the conversion unit, bounds it, and the
 * integer form only adds instructions. */
#include <cstdio>

#include "backend/cuda/cuda_internal.cuh" /* dq16, mma16816: the kernel's own */

/* codes c0 (low) and c1 of a word's bytes 2i, 2i+1 -> f16x2 of c * 2^-8 (exact, NaN codes aside):
 * z = c << 7 in each 16-bit half puts the exponent and mantissa in place and the sign at bit 14;
 * z + (z & 0x4000) moves the sign to bit 15. */
static __device__ __forceinline__ uint32_t e4m3x2_f16x2_int(uint32_t word, int hi) {
    uint32_t y = __byte_perm(word, 0, hi ? 0x4342 : 0x4140); /* [0, c1, 0, c0] as bytes 3..0 */
    uint32_t z = y << 7;
    return z + (z & 0x40004000u);
}
static __device__ __forceinline__ void dq16_int(uint4 q, float s, uint32_t *w) {
    const uint32_t u[4] = {q.x, q.y, q.z, q.w};
    const float s8 = s * 256.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        uint32_t h = e4m3x2_f16x2_int(u[k / 2], k & 1);
        float2 v = __half22float2(*(__half2 *)&h);
        __nv_bfloat162 b = __floats2bfloat162_rn(v.x * s8, v.y * s8);
        w[k] = *(uint32_t *)&b;
    }
}

template <int V>
__global__ void __launch_bounds__(384, 1) k_probe(int iters, float *out, long long *cyc) {
    __shared__ __align__(16) uint8_t slot[16 * 576 + 64];
    __shared__ __align__(16) uint16_t xs[8 * 512 + 256];
    for (int i = threadIdx.x; i < (int)sizeof slot; i += blockDim.x) slot[i] = (uint8_t)(i * 37 + 11) & 0x77;
    for (int i = threadIdx.x; i < 8 * 512; i += blockDim.x) xs[i] = 0x3f80 + (i & 7);
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (warp >= 8) return;
    const uint8_t *wp = slot + g * 576 + warp * 64 + t * 16;
    const uint16_t *xp = xs + g * 512 + warp * 64 + t * 16;
    float c[4] = {0, 0, 0, 0};
    uint32_t acc = 0;
    long long t0 = clock64();
    for (int it = 0; it < iters; it++) {
        const int o = (it & 3) * 16; /* vary the address a little: the loads stay in the loop */
        uint4 wa = *(const uint4 *)(wp + o), wb = *(const uint4 *)(wp + o + 8 * 576);
        uint4 x0 = *(const uint4 *)(xp + o), x1 = *(const uint4 *)(xp + o + 8);
        float s = ((const float *)(slot + 16 * 576))[it & 3] * 1e-30f + 0.01f;
        uint32_t A[8], B[8];
        if (V == 0 || V == 2) dq16(wa, s, A), dq16(wb, s, B);
        if (V == 1 || V == 3) dq16_int(wa, s, A), dq16_int(wb, s, B);
        if (V == 4) {
            const uint32_t ua[4] = {wa.x, wa.y, wa.z, wa.w}, ub[4] = {wb.x, wb.y, wb.z, wb.w};
#pragma unroll
            for (int k = 0; k < 8; k++) A[k] = ua[k / 2] ^ k, B[k] = ub[k / 2] ^ k;
        }
        const uint32_t X[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        if (V == 2 || V == 3) {
#pragma unroll
            for (int k = 0; k < 8; k++) acc += A[k] ^ B[k] ^ X[k];
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t a[4] = {A[2 * j], B[2 * j], A[2 * j + 1], B[2 * j + 1]};
                mma16816(c, a, X[2 * j], X[2 * j + 1]);
            }
        }
    }
    long long t1 = clock64();
    out[blockIdx.x * 256 + threadIdx.x] = c[0] + c[1] + c[2] + c[3] + (float)acc;
    if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}

__global__ void k_check(int *bad) {
    const int code = threadIdx.x; /* 0..255 */
    if ((code & 0x7f) == 0x7f) return;
    for (int si = 0; si < 64; si++) {
        float s = ldexpf(1.0f + si * 0.0137f, si - 40);
        uint4 q = make_uint4(code * 0x01010101u, 0, 0, 0);
        uint32_t a[8], b[8];
        dq16(q, s, a);
        dq16_int(q, s, b);
        for (int k = 0; k < 8; k++)
            if (a[k] != b[k]) atomicAdd(bad, 1);
    }
}

template <int V>
static void run(const char *name, int grid, float *out, long long *cyc, long long *h) {
    const int iters = 20000;
    k_probe<V><<<grid, 384>>>(iters, out, cyc);
    k_probe<V><<<grid, 384>>>(iters, out, cyc);
    cudaMemcpy(h, cyc, sizeof(long long) * grid, cudaMemcpyDeviceToHost);
    double m = 0;
    for (int i = 0; i < grid; i++) m += h[i];
    m /= grid;
    printf("%-10s %7.1f cycles a super-step a warp; %.1f bytes a cycle an SM (8 warps, 1 KB a super-step each) [%s]\n",
           name, m / iters, 8.0 * 1024 * iters / m, cudaGetErrorString(cudaGetLastError()));
}

int main() {
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    int grid = p.multiProcessorCount;
    float *out;
    long long *cyc, h[1024];
    int *bad, hb = 0;
    cudaMalloc(&out, sizeof(float) * grid * 256);
    cudaMalloc(&cyc, sizeof(long long) * grid);
    cudaMalloc(&bad, 4);
    cudaMemset(bad, 0, 4);
    k_check<<<1, 256>>>(bad);
    cudaError_t e = cudaMemcpy(&hb, bad, 4, cudaMemcpyDeviceToHost);
    printf("[%s] %s: int dequantization vs dq16: %d words differ (254 codes x 64 scales x 8 words)\n", cudaGetErrorString(e), p.name, hb);
    run<0>("cvt", grid, out, cyc, h);
    run<1>("int", grid, out, cyc, h);
    run<2>("cvt-nomma", grid, out, cyc, h);
    run<3>("int-nomma", grid, out, cyc, h);
    run<4>("mma-only", grid, out, cyc, h);
    return 0;
}
