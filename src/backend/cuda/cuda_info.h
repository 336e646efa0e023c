/* cuda_info.h: the device's memory, for commands that plan without opening a
 * backend (`iris ls`), and whether this build can run on it.  C header; only in
 * CUDA builds (IRIS_CUDA). */
#ifndef IRIS_CUDA_INFO_H
#define IRIS_CUDA_INFO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the small per-thread stack limit of the memory plan (planner.h) on the current device,
 * making the context first; 0 on success. */
int iris_cuda_small_stack(void);

/* Free and total memory of `device` now (cudaMemGetInfo); -1 when there is no
 * such device or no driver.  Creates the primary context on first use. */
int iris_cuda_device_memory(int device, size_t *free_bytes, size_t *total_bytes);

/* The CUDA_ARCHS this build was compiled for ("90a", "80 86 89 90a 120f"), and the CUDA runtime's
 * version (13000 for 13.0; 0 when it cannot say). */
const char *iris_cuda_archs(void);
int iris_cuda_runtime_version(void);

/* 1 when `device` can run this build: a driver at least as new as its CUDA runtime, the device
 * there, and kernels for it in the build's CUDA_ARCHS.  0 otherwise, with why[0..n) saying what
 * stands in the way and what to do (a driver too old, a build without kernels for the card), or
 * empty when there is simply no GPU or no driver. */
int iris_cuda_usable(int device, char *why, size_t n);

#ifdef __cplusplus
}
#endif
#endif
