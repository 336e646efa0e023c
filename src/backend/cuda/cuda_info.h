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

/* 1 when this build has kernels for `device` (its CUDA_ARCHS cover the card); else 0, and
 * why[0..n) says what the card is, what the build covers and how to rebuild. */
int iris_cuda_kernels_for(int device, char *why, size_t n);

/* 1 when an NVIDIA driver is installed but no device can be used through it (older than this
 * build's CUDA runtime, or failing), with why[0..n) saying so and what to do; 0 when there is no
 * driver, no GPU, or a usable one. */
int iris_cuda_driver_why(char *why, size_t n);

#ifdef __cplusplus
}
#endif
#endif
