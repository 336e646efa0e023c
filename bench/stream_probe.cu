/* stream_probe.cu: how fast can one CTA an SM stream FP8 weight tiles into a ring of shared-memory
 * slots, the way cuda_decode.cu's producer warps do, and what limits it?  The consumers only wait
 * for each slot and free it, so the figure is the stream's own ceiling.  A ~1.4 GB matrix of K = 2048
 * columns (28 layers of 2B-FP8) goes round the SMs in 16-row tiles of 512-column chunks, fetched as
 *   rows    16 bulk copies of 512 bytes (a row each) + 4-byte scales by cp.async (as cuda_decode.cu)
 *   rows-ns the same without the scales
 *   contig  one 8 KB bulk copy a chunk (the bytes of a chunk stored together: a tiled layout)
 *   tma2d   two 2-D tensor copies of 16 rows x 256 columns (cuTensorMapEncodeTiled)
 * with 1, 2 or 4 producer warps; beside them a plain kernel of 16-byte loads over the same bytes.
 *   nvcc -O3 -arch=sm_90 -o stream_probe bench/stream_probe.cu && ./stream_probe
 * Measured (H100 80GB HBM3, 2026-11-25; ring of 8 or 20 slots, about the same): rows 1,384 GB/s with
 * one producer warp, 2,499 with two, 3,033-3,077 with four; contig 3,089-3,116 with any; tma2d
 * 3,044-3,121; the plain loads 3,038-3,108.  So four producers of row copies reach the memory's
 * practical rate, and a tiled layout or tensor copies would not stream faster. */
#include <cstdio>
#include <cstdint>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#define K 2048
#define CW 512
#define PAD 64
#define CONS 8
#define RING_MAX 32

static __device__ __forceinline__ unsigned su32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void mwait(uint64_t *b, unsigned par) {
    asm volatile("{\n .reg .pred p;\n W_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W_%=;\n}\n" ::"r"(su32(b)), "r"(par) : "memory");
}
static __device__ __forceinline__ void marrive(uint64_t *b) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(su32(b)) : "memory");
}
static __device__ __forceinline__ void marrive_tx(uint64_t *b, unsigned tx) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(su32(b)), "r"(tx) : "memory");
}

struct probe_args {
    const uint8_t *w;
    const float *sc;
    long tiles;
    int mode, prod, ring, slot_bytes;
};

__global__ void __launch_bounds__((CONS + 4) * 32, 1) k_stream(const probe_args a, const __grid_constant__ CUtensorMap tm) {
    extern __shared__ __align__(1024) uint8_t smem[];
    uint64_t *full = (uint64_t *)smem, *empty = full + RING_MAX;
    uint8_t *ring = smem + 1024;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int nsc = CW / 128, scales = a.mode == 0;
    if (threadIdx.x < a.ring) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(su32(&full[threadIdx.x])), "r"(1 + (scales ? nsc : 0)) : "memory");
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(su32(&empty[threadIdx.x])), "r"(CONS) : "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const int nch = K / CW;
    if (warp >= CONS) {
        const int p = warp - CONS;
        if (p >= a.prod) return;
        unsigned n = 0;
        for (long tile = blockIdx.x; tile < a.tiles; tile += gridDim.x)
            for (int c = 0; c < nch; c++, n++) {
                if (n % a.prod != (unsigned)p) continue;
                int slot = n % a.ring;
                if (n >= (unsigned)a.ring) mwait(&empty[slot], ((n / a.ring) - 1) & 1);
                uint8_t *dst = ring + (size_t)slot * a.slot_bytes;
                if (lane == 0) marrive_tx(&full[slot], 16u * CW);
                __syncwarp();
                if (a.mode <= 1) {
                    const uint8_t *W = a.w + tile * 16 * K + c * CW;
                    if (lane < 16)
                        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                                         su32(dst + lane * (CW + PAD))),
                                     "l"(W + (long)lane * K), "r"(CW), "r"(su32(&full[slot]))
                                     : "memory");
                    else if (scales && lane < 16 + nsc)
                        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%2];" ::"r"(
                                         su32(dst + 16 * (CW + PAD) + (lane - 16) * 4)),
                                     "l"(a.sc + (tile / 8) * (K / 128) + c * nsc + (lane - 16)), "r"(su32(&full[slot]))
                                     : "memory");
                } else if (a.mode == 2) {
                    const uint8_t *W = a.w + (tile * nch + c) * (16 * CW);
                    if (lane == 0)
                        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                                         su32(dst)),
                                     "l"(W), "r"(16 * CW), "r"(su32(&full[slot]))
                                     : "memory");
                } else {
                    if (lane < 2) {
                        int x = c * CW + lane * 256, y = (int)(tile * 16);
                        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
                                         su32(dst + lane * 16 * 256)),
                                     "l"(&tm), "r"(x), "r"(y), "r"(su32(&full[slot]))
                                     : "memory");
                    }
                }
            }
        return;
    }
    unsigned n = 0;
    unsigned sink = 0;
    for (long tile = blockIdx.x; tile < a.tiles; tile += gridDim.x)
        for (int c = 0; c < nch; c++, n++) {
            int slot = n % a.ring;
            mwait(&full[slot], (n / a.ring) & 1);
            sink += ring[(size_t)slot * a.slot_bytes + lane * 16 + warp];
            __syncwarp();
            if (lane == 0) marrive(&empty[slot]);
        }
    if (sink == 0x7fffffff) printf("%u\n", sink);
}

__global__ void k_loads(const uint4 *w, long n, unsigned *out) {
    unsigned s = 0;
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x, st = (long)gridDim.x * blockDim.x;
    for (; i + 3 * st < n; i += 4 * st) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = __ldcs(w + i + u * st);
#pragma unroll
        for (int u = 0; u < 4; u++) s ^= v[u].x ^ v[u].w;
    }
    if (s == 0x12345678) *out = s;
}

int main() {
    const long rows = 688128, bytes = rows * K, tiles = rows / 16;
    uint8_t *w;
    float *sc;
    unsigned *out;
    if (cudaMalloc(&w, bytes) || cudaMalloc(&sc, (rows / 128) * (K / 128) * 4 + 64) || cudaMalloc(&out, 4)) return 1;
    cudaMemset(w, 1, bytes);
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    const int grid = prop.multiProcessorCount;
    PFN_cuTensorMapEncodeTiled_v12000 enc = nullptr;
    cudaDriverEntryPointQueryResult q;
    cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&enc, 12000, cudaEnableDefault, &q);
    CUtensorMap tm;
    cuuint64_t dims[2] = {K, (cuuint64_t)rows}, strides[1] = {K};
    cuuint32_t box[2] = {256, 16}, es[2] = {1, 1};
    if (!enc || enc(&tm, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, w, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                    CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)) {
        printf("tensor map: failed\n");
        return 1;
    }
    const int slot_bytes = (16 * (CW + PAD) + 16 + 127) / 128 * 128; /* tensor copies land 128-byte aligned */
    const size_t smax = prop.sharedMemPerBlockOptin;
    cudaFuncSetAttribute(k_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smax);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    const char *names[] = {"rows", "rows-ns", "contig", "tma2d"};
    printf("%s, %d SMs, %.2f GB buffer\n", prop.name, grid, bytes / 1e9);
    for (int ringn : {8, 20}) {
        for (int mode = 0; mode < 4; mode++)
            for (int prod : {1, 2, 4}) {
                probe_args a = {w, sc, tiles, mode, prod, ringn, slot_bytes};
                size_t sm = 1024 + (size_t)ringn * slot_bytes;
                if (sm > smax) continue;
                float best = 1e9;
                for (int rep = 0; rep < 4; rep++) {
                    cudaEventRecord(e0);
                    k_stream<<<grid, (CONS + 4) * 32, sm>>>(a, tm);
                    cudaEventRecord(e1);
                    cudaEventSynchronize(e1);
                    float ms;
                    cudaEventElapsedTime(&ms, e0, e1);
                    if (rep && ms < best) best = ms;
                }
                cudaError_t err = cudaGetLastError();
                printf("ring %2d  %-8s producers %d: %7.3f ms  %6.0f GB/s%s%s\n", ringn, names[mode], prod, best,
                       bytes / best / 1e6, err ? "  error: " : "", err ? cudaGetErrorString(err) : "");
            }
    }
    for (int bpsm : {1, 2, 4, 8}) {
        float best = 1e9;
        for (int rep = 0; rep < 4; rep++) {
            cudaEventRecord(e0);
            k_loads<<<grid * bpsm, 512>>>((const uint4 *)w, bytes / 16, out);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            if (rep && ms < best) best = ms;
        }
        printf("plain loads, %d CTAs of 512 an SM: %7.3f ms  %6.0f GB/s\n", bpsm, best, bytes / best / 1e6);
    }
    return 0;
}
