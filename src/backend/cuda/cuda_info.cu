/* cuda_info.cu: what the device has, for commands that plan without opening
 * a backend (`iris ls`, `iris plan` on this machine).  Host-only; no kernels. */
#include <cuda_runtime.h>

#include "cuda_info.h"

/* The memory plan's contract (planner.h, IRIS_CUDA_STACK_LIMIT = 256): a small per-thread stack
 * limit before the first kernel.  The context reserves SMs x threads x stack of local memory; with
 * the default 1 KiB that is ~200 MiB more on an H100 (tools/measure_cuda_overhead.cu).  The driver
 * still grows it for a kernel that needs more. */
int iris_cuda_small_stack(void) {
    cudaFree(0);   /* the context, if there is none yet */
    return cudaDeviceSetLimit(cudaLimitStackSize, 256) == cudaSuccess ? 0 : (cudaGetLastError(), -1);
}

int iris_cuda_device_memory(int device, size_t *free_bytes, size_t *total_bytes) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n) {
        cudaGetLastError();
        return -1;
    }
    if (cudaSetDevice(device) != cudaSuccess || iris_cuda_small_stack() != 0 ||
        cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return 0;
}
