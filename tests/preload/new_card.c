/* new_card.c: a shared library that test_device_pick.c loads into a CUDA build of `iris` with
 * LD_PRELOAD, to play a GPU newer than every target of the build (compute capability 13.0): one
 * device, its properties, and kernels that load (as the driver's JIT of the build's PTX makes
 * them).  Nothing else is played: the real runtime, without a GPU, fails what comes after.  Empty
 * in a build without CUDA.  Built by the Makefile as $(BUILD)/tests/preload/new_card.so; never
 * linked into anything. */
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
    strcpy(prop->name, "NVIDIA Future GPU (played)");
    prop->major = 13, prop->minor = 0;
    return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func) {
    (void)func;
    memset(attr, 0, sizeof *attr);
    return cudaSuccess;
}
#endif
