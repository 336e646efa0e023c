/* cuda_info.cu: what the device has, for commands that plan without opening
 * a backend (`iris ls`, `iris plan` on this machine), and whether this build
 * has kernels for it (one empty probe kernel). */
#include <cuda_runtime.h>
#include <stdio.h>

#include "cuda_info.h"

extern "C" {
#include "log.h"
}

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

#ifndef IRIS_CUDA_ARCHS
#define IRIS_CUDA_ARCHS "?"
#endif
#ifndef IRIS_CUDA_PTX
#define IRIS_CUDA_PTX ""
#endif

const char *iris_cuda_archs(void) { return IRIS_CUDA_ARCHS; }
const char *iris_cuda_ptx(void) { return IRIS_CUDA_PTX; }

int iris_cuda_runtime_version(void) {
    int v = 0;
    if (cudaRuntimeGetVersion(&v) != cudaSuccess) cudaGetLastError(), v = 0;
    return v;
}

/* Built like every other kernel (the same -gencode list: machine code for CUDA_ARCHS, PTX for the
 * newest): when the device can run neither for it, it can run none of the others either. */
static __global__ void k_probe(void) {}

/* The target scripts/cuda-archs picks for a card of this capability (9.0 -> 90a, 12.x -> 120f). */
static void arch_of(const cudaDeviceProp *p, char *arch, size_t n) {
    if (p->major == 9) snprintf(arch, n, "90a");
    else if (p->major == 10 || p->major == 12) snprintf(arch, n, "%d0f", p->major);
    else snprintf(arch, n, "%d%d", p->major, p->minor);
}

/* A device this build has no machine code for runs the PTX, compiled by the driver when each
 * module's kernels are first loaded (seconds to minutes, once: the driver keeps them in its
 * compute cache for later starts).  Said once a process. */
static void tell_jit(int device) {
    static int told;
    cudaDeviceProp p;
    if (told || cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    if (iris_cuda_archs_have_sass(IRIS_CUDA_ARCHS, p.major, p.minor)) return;
    told = 1;
    char arch[16];
    arch_of(&p, arch, sizeof arch);
    iris_log(IRIS_LOG_INFO, "cuda",
             "%s (compute capability %d.%d) has no machine code in this build (CUDA_ARCHS=\"%s\"): its kernels are "
             "JIT-compiled from the compute_%s PTX at first start (about a minute on an H200), then cached by "
             "the driver; `make CUDA_ARCHS=%s` builds them for it",
             p.name, p.major, p.minor, IRIS_CUDA_ARCHS, IRIS_CUDA_PTX, arch);
}

/* Whether this build has kernels for `device` (the probe's attributes; the card's properties only
 * to say why not). */
static int kernels_for(int device, char *why, size_t n) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, (const void *)k_probe);
    if (e == cudaSuccess) {
        tell_jit(device);
        return 1;
    }
    cudaGetLastError();
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        cudaGetLastError();
        snprintf(why, n, "CUDA device %d cannot be used: %s", device, cudaGetErrorString(e));
        return 0;
    }
    char arch[16];
    arch_of(&p, arch, sizeof arch);
    if (p.major < 8)
        snprintf(why, n, "%s (compute capability %d.%d) is older than iris supports (8.0 and newer)", p.name, p.major,
                 p.minor);
    else
        snprintf(why, n, "this iris was built with CUDA_ARCHS=\"%s\", which has no kernels for %s (compute "
                         "capability %d.%d; %s); rebuild with `make CUDA_ARCHS=%s` (the default on a machine "
                         "with this GPU)", IRIS_CUDA_ARCHS, p.name, p.major, p.minor, cudaGetErrorString(e), arch);
    return 0;
}

/* No device counted (e, the count's error): a driver that cannot serve this build says why;
 * no driver, or a driver with no GPU, says nothing. */
static void driver_why(cudaError_t e, char *why, size_t n) {
    int drv = 0, rt = iris_cuda_runtime_version();
    if (cudaDriverGetVersion(&drv) != cudaSuccess || drv == 0) {
        cudaGetLastError();
        return; /* no NVIDIA driver: a machine without a GPU */
    }
    if (rt > 0 && drv < rt)
        snprintf(why, n, "the NVIDIA driver supports CUDA %d.%d and this iris was built with CUDA %d.%d: update the "
                         "driver (under WSL2, the Windows one)", drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    else if (e != cudaSuccess && e != cudaErrorNoDevice)
        snprintf(why, n, "the NVIDIA driver (CUDA %d.%d) cannot be used: %s", drv / 1000, drv % 1000 / 10,
                 cudaGetErrorString(e));
}

int iris_cuda_usable(int device, char *why, size_t n) {
    why[0] = 0;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    cudaGetLastError();
    if (e != cudaSuccess || count == 0) {
        driver_why(e, why, n);
        return 0;
    }
    if (device < 0 || device >= count) {
        snprintf(why, n, "CUDA device %d does not exist (%d device%s)", device, count, count == 1 ? "" : "s");
        return 0;
    }
    return kernels_for(device, why, n);
}
