/* no_kernels.c: a shared library that test_device_pick.c loads into a CUDA build of `iris` with
 * LD_PRELOAD, to play a GPU the build has no kernels for (an RTX 5060, compute capability 12.0,
 * under a build for sm_90a): one device, its properties, and no image of any kernel for it
 * (cudaErrorNoKernelImageForDevice).  Empty in a build without CUDA.  Built by the Makefile as
 * $(BUILD)/tests/preload/no_kernels.so; never linked into anything. */
#ifdef IRIS_CUDA
#include <cuda_runtime_api.h>
#include <string.h>

cudaError_t cudaGetDeviceCount(int *count) {
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    strcpy(prop->name, "NVIDIA GeForce RTX 5060 (played)");
    prop->major = 12, prop->minor = 0;
    return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func) {
    (void)attr, (void)func;
    return cudaErrorNoKernelImageForDevice;
}
#endif
