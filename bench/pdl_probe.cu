/* pdl_probe.cu: does programmatic dependent launch overlap two kernels on this GPU, in a plain
 * stream and inside a captured CUDA graph?  Kernel A spins ~20 us then writes a flag; kernel B,
 * launched as A's programmatic dependent, records the global timer when it starts (before
 * griddepcontrol.wait) and after the wait, and whether A's flag was visible after the wait.
 * Prints B's start relative to A's end: negative means B started while A ran.
 *   nvcc -arch=sm_90 -o pdl_probe bench/pdl_probe.cu && ./pdl_probe */
#include <cstdio>
#include <cuda_runtime.h>

__device__ unsigned long long gt() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}

__global__ void k_a(unsigned long long *ts, int *flag) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    unsigned long long t0 = gt();
    while (gt() - t0 < 20000) {}
    if (threadIdx.x == 0 && blockIdx.x == 0) { *flag = 1; ts[0] = gt(); }
}

__global__ void k_b(unsigned long long *ts, int *flag, int *seen) {
    unsigned long long t = gt();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (threadIdx.x == 0 && blockIdx.x == 0) { ts[1] = t; ts[2] = gt(); *seen = *(volatile int *)flag; }
}

static void launch_b(cudaStream_t s, unsigned long long *ts, int *flag, int *seen, int pdl) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(4), cfg.blockDim = dim3(128), cfg.stream = s, cfg.attrs = at, cfg.numAttrs = pdl;
    cudaLaunchKernelEx(&cfg, k_b, ts, flag, seen);
}

int main() {
    unsigned long long *ts, h[3];
    int *flag, *seen, hs;
    cudaMalloc(&ts, 3 * sizeof *ts), cudaMalloc(&flag, 4), cudaMalloc(&seen, 4);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    for (int graph = 0; graph < 2; graph++)
        for (int pdl = 0; pdl < 2; pdl++) {
            cudaGraphExec_t ex = NULL;
            for (int rep = 0; rep < 3; rep++) {
                cudaMemsetAsync(flag, 0, 4, s);
                if (graph) {
                    if (!ex) {
                        cudaGraph_t g;
                        cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
                        k_a<<<132, 128, 0, s>>>(ts, flag);
                        launch_b(s, ts, flag, seen, pdl);
                        cudaStreamEndCapture(s, &g);
                        cudaGraphInstantiate(&ex, g, 0);
                    }
                    cudaGraphLaunch(ex, s);
                } else {
                    k_a<<<132, 128, 0, s>>>(ts, flag);
                    launch_b(s, ts, flag, seen, pdl);
                }
                cudaStreamSynchronize(s);
            }
            cudaMemcpy(h, ts, sizeof h, cudaMemcpyDeviceToHost);
            cudaMemcpy(&hs, seen, 4, cudaMemcpyDeviceToHost);
            printf("%s pdl=%d: B started %+.1f us from A's end, passed the wait %+.1f us from it, saw A's write: %d (%s)\n",
                   graph ? "graph " : "stream", pdl, ((double)h[1] - (double)h[0]) / 1e3, ((double)h[2] - (double)h[0]) / 1e3,
                   hs, cudaGetErrorString(cudaGetLastError()));
        }
    return 0;
}
