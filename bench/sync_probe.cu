/* sync_probe.cu: what a hand-off between SMs costs while the memory is streaming, the question
 * cuda_decode.cu's header leaves open (its barriers take ~0.9 us with the weight stream idle and
 * 2-3 us, up to ~6, with it running).  128 CTAs in clusters of 8; warp 0's lane 0 of some CTAs
 * synchronizes K times, the other 7 warps of every CTA (with "stream") read a 2 GB buffer with
 * 16-byte loads as fast as they can.  Hand-offs:
 *   grid     a barrier of all 128 CTAs (release add to a global counter, acquire spin), as the kernel's
 *   global   a ping-pong of CTAs 0 and 1 through a flag in global memory (release store, acquire spin)
 *   dsmem    the same ping-pong through the other CTA's shared memory (cluster ranks 0 and 1:
 *            st.release.cluster to the peer's shared memory, acquire spin on the own)
 * Prints microseconds a hand-off (a barrier, or one way of the ping-pong) without and with the
 * stream, and the stream's GB/s.
 *   nvcc -O3 -arch=sm_90 -o sync_probe bench/sync_probe.cu && ./sync_probe
 * Measured (H100 80GB HBM3, 2026-11-26; 31 stream warps a CTA, 3.09-3.12 TB/s): grid barrier 0.96 us
 * idle, 1.99 streaming; global hand-off one way 0.54 / 0.87 us; dsmem one way 0.47 / 0.73 us (with 7
 * stream warps, 1.8 TB/s: 1.08, 0.62, 0.49).  So a saturated memory doubles a grid barrier, and a
 * release/acquire hand-off through a cluster peer's shared memory is only ~15% quicker than one
 * through L2, and slowed by the stream too. */
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

#define CTAS 128
#define CLUSTER 8
#define THREADS 1024
#define ITERS 2000

struct probe_args {
    const uint4 *buf;
    long n16;            /* 16-byte words in buf */
    unsigned *bar;       /* the grid barrier's counter */
    unsigned *flag;      /* [0]: CTA 1's flag, [32]: CTA 0's (separate lines) */
    unsigned *stop;      /* set when the measuring is done: the stream warps end */
    unsigned long long *out; /* [0] elapsed ns of ITERS hand-offs, [1] stream bytes, [2] stream ns, [3] sink */
    int mode, stream;
};

static __device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
static __device__ __forceinline__ unsigned ld_acq_gpu(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ void st_rel_gpu(unsigned *p, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__global__ void __launch_bounds__(THREADS) k_sync(const probe_args a) {
    __shared__ unsigned s_flag;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) s_flag = 0;
    asm volatile("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (warp > 0) {
        if (!a.stream) return;
        /* 8 independent 16-byte loads a lane in flight, over the whole buffer, till told to stop */
        const long stride = (long)gridDim.x * (THREADS - 32);
        long i = (long)blockIdx.x * (THREADS - 32) + (threadIdx.x - 32);
        uint4 acc = make_uint4(0, 0, 0, 0);
        unsigned long long bytes = 0, t0 = gtime();
        for (int round = 0;; round++) {
            uint4 v[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                long j = i + u * stride;
                j -= j >= a.n16 ? a.n16 : 0;
                asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
                             : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                             : "l"(a.buf + j));
            }
#pragma unroll
            for (int u = 0; u < 8; u++) acc.x ^= v[u].x, acc.y ^= v[u].y, acc.z ^= v[u].z, acc.w ^= v[u].w;
            bytes += 8 * 16;
            i += 8 * stride;
            i -= i >= a.n16 ? a.n16 : 0;
            if ((round & 15) == 0 && *(volatile unsigned *)a.stop) break;
        }
        unsigned long long t1 = gtime();
        atomicAdd(&a.out[1], bytes);
        if (blockIdx.x == 0 && threadIdx.x == 32) a.out[2] = t1 - t0;
        if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u) atomicAdd(&a.out[3], 1ull);
        return;
    }
    if (lane != 0) return;
    /* let the stream reach its rate first */
    unsigned long long w0 = gtime();
    while (a.stream && gtime() - w0 < 20000) {
    }
    unsigned long long t0 = gtime();
    if (a.mode == 0) { /* grid barrier */
        unsigned target = 0;
        for (int it = 0; it < ITERS; it++) {
            target += gridDim.x;
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(a.bar) : "memory");
            while (ld_acq_gpu(a.bar) < target) {
            }
        }
    } else if (a.mode == 1 && blockIdx.x < 2) { /* global ping-pong */
        unsigned *mine = a.flag + (blockIdx.x ? 0 : 32), *peer = a.flag + (blockIdx.x ? 32 : 0);
        for (unsigned it = 1; it <= ITERS; it++) {
            if (blockIdx.x == 0) {
                st_rel_gpu(peer, it);
                while (ld_acq_gpu(mine) != it) {
                }
            } else {
                while (ld_acq_gpu(mine) != it) {
                }
                st_rel_gpu(peer, it);
            }
        }
    } else if (a.mode == 2 && blockIdx.x < 2) { /* DSMEM ping-pong, cluster ranks 0 and 1 */
        unsigned rank, local = (unsigned)__cvta_generic_to_shared(&s_flag), remote;
        asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank ^ 1));
        for (unsigned it = 1; it <= ITERS; it++) {
            unsigned v;
            if (rank == 0) {
                asm volatile("st.release.cluster.shared::cluster.u32 [%0], %1;" ::"r"(remote), "r"(it) : "memory");
                do asm volatile("ld.acquire.cluster.shared::cta.u32 %0, [%1];" : "=r"(v) : "r"(local) : "memory");
                while (v != it);
            } else {
                do asm volatile("ld.acquire.cluster.shared::cta.u32 %0, [%1];" : "=r"(v) : "r"(local) : "memory");
                while (v != it);
                asm volatile("st.release.cluster.shared::cluster.u32 [%0], %1;" ::"r"(remote), "r"(it) : "memory");
            }
        }
    }
    unsigned long long t1 = gtime();
    if (blockIdx.x == 0) {
        a.out[0] = t1 - t0;
        *(volatile unsigned *)a.stop = 1;
    }
    /* (the ping-pong's last remote store is the one its peer waits for: no CTA's shared memory is
     * written after it exits) */
}

int main() {
    const long n16 = (2l << 30) / 16;
    uint4 *buf;
    unsigned *ctl;
    unsigned long long *out;
    if (cudaMalloc(&buf, n16 * 16) || cudaMalloc(&ctl, 4096) || cudaMalloc(&out, 64)) {
        printf("sync_probe: cudaMalloc failed\n");
        return 1;
    }
    cudaMemset(buf, 1, n16 * 16);
    static const char *names[] = {"grid barrier (128 CTAs)", "global ping-pong, one way", "dsmem ping-pong, one way"};
    for (int mode = 0; mode < 3; mode++)
        for (int stream = 0; stream < 2; stream++) {
            cudaMemset(ctl, 0, 4096);
            cudaMemset(out, 0, 64);
            probe_args a = {buf, n16, ctl, ctl + 64, ctl + 256, out, mode, stream};
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(CTAS);
            cfg.blockDim = dim3(THREADS);
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeClusterDimension;
            at[0].val.clusterDim.x = CLUSTER, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
            cfg.attrs = at, cfg.numAttrs = 1;
            cudaError_t e = cudaLaunchKernelEx(&cfg, k_sync, a);
            if (e == cudaSuccess) e = cudaDeviceSynchronize();
            if (e != cudaSuccess) {
                printf("sync_probe: %s\n", cudaGetErrorString(e));
                return 1;
            }
            unsigned long long h[4];
            cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
            double per = (double)h[0] / ITERS / 1000.0 / (mode == 0 ? 1 : 2);
            printf("%-28s %-10s %7.3f us", names[mode], stream ? "streaming" : "idle", per);
            if (stream) printf("   stream %.0f GB/s", h[2] ? (double)h[1] / (double)h[2] : 0.0);
            printf("\n");
        }
    return 0;
}
