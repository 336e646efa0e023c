/* cuda_info.cu: what the device has, for commands that plan without opening
 * a backend (`iris ls`, `iris plan` on this machine).  Host-only; no kernels. */
#include <cuda_runtime.h>

#include "cuda_info.h"

int iris_cuda_device_memory(int device, size_t *free_bytes, size_t *total_bytes) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n) {
        cudaGetLastError();
        return -1;
    }
    if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return 0;
}
