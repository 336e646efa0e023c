/* param_probe.cu: what a graph's kernel node costs to start by the size of its parameters and its
 * shared memory (the persistent decode kernel takes ~11 KB of __grid_constant__ parameters and
 * ~227 KB of shared memory a CTA).  Each replay of a captured graph [k_first (1 CTA) -> memset ->
 * k_big (one CTA an SM)] records the global timer at k_first's end and at k_big's first CTA's
 * start; the host synchronizes after each replay, as a decode step does.  Prints the median gap.
 *   nvcc -arch=sm_90 -o param_probe bench/param_probe.cu && ./param_probe */
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__device__ unsigned long long gt() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
template <int N> struct blob { unsigned char b[N]; };

__global__ void k_first(unsigned long long *ts) {
    if (threadIdx.x == 0) ts[0] = gt();
}
template <int N> __global__ void k_big(const __grid_constant__ blob<N> p, unsigned long long *ts, unsigned *bar) {
    extern __shared__ unsigned char sm[];
    unsigned long long t = gt();
    if (threadIdx.x == 0) atomicMin(&ts[1], t);
    sm[threadIdx.x] = p.b[threadIdx.x % N];
    if (threadIdx.x == 0 && sm[0] == 255) atomicAdd(bar, 1);
}

template <int N> static void run(int smem, int sms) {
    unsigned long long *ts;
    unsigned *bar;
    cudaMalloc(&ts, 16), cudaMalloc(&bar, 4);
    cudaFuncSetAttribute(k_big<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaStream_t s;
    cudaStreamCreate(&s);
    blob<N> p = {};
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    cudaMemsetAsync(ts + 1, 0xff, 8, s);
    k_first<<<1, 32, 0, s>>>(ts);
    cudaMemsetAsync(bar, 0, 4, s);
    k_big<N><<<sms, 384, smem, s>>>(p, ts, bar);
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&ge, g, 0);
    std::vector<double> gaps;
    for (int i = 0; i < 200; i++) {
        cudaGraphLaunch(ge, s);
        cudaStreamSynchronize(s);
        unsigned long long h[2];
        cudaMemcpy(h, ts, 16, cudaMemcpyDeviceToHost);
        if (i >= 20) gaps.push_back((double)(h[1] - h[0]) / 1000.0);
    }
    std::sort(gaps.begin(), gaps.end());
    printf("params %6d B, shared %6d B: k_first end -> k_big start median %.2f us (p10 %.2f, p90 %.2f)  %s\n", N, smem,
           gaps[gaps.size() / 2], gaps[gaps.size() / 10], gaps[gaps.size() * 9 / 10], cudaGetErrorString(cudaGetLastError()));
    cudaGraphExecDestroy(ge), cudaGraphDestroy(g), cudaStreamDestroy(s), cudaFree(ts), cudaFree(bar);
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    for (int rep = 0; rep < 2; rep++) {
        run<8>(1024, sms), run<8>(200 << 10, sms);
        run<4096>(1024, sms), run<4096>(200 << 10, sms);
        run<11264>(1024, sms), run<11264>(200 << 10, sms);
    }
    return 0;
}
