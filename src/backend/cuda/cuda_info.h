/* cuda_info.h: the device's memory, for commands that plan without opening a
 * backend (`iris ls`), and whether this build can run on it.  C header; only in
 * CUDA builds (IRIS_CUDA), except the two pure functions of cuda_archs.c. */
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

/* The PTX target the build embeds beside CUDA_ARCHS' machine code: the newest of them, plain
 * ("120" for "86 120f"; the Makefile's CUDA_PTX). */
const char *iris_cuda_ptx(void);

/* Whether a build for `archs` (a CUDA_ARCHS list, "80 86 89 90a 120f") has machine code that a
 * device of compute capability major.minor runs (sm_XY and sm_XYf: X.Z for Z >= Y; sm_XYa: X.Y
 * only); and whether PTX for compute_`ptx` ("120") can be compiled for it at run time (capability
 * ptx or newer).  Pure functions of their arguments (cuda_archs.c): no GPU needed. */
int iris_cuda_archs_have_sass(const char *archs, int major, int minor);
int iris_cuda_ptx_runs(const char *ptx, int major, int minor);
/* Whether `archs` has machine code built for major.minor's own features (sm_XYa: sm_90a's wgmma). */
int iris_cuda_archs_have_arch_sass(const char *archs, int major, int minor);
/* The major compute capability the kernels run as on such a device: its own where `archs` has
 * machine code for it, else the PTX's (compute_`ptx`), which may be older (a build for "86" on an
 * H100 runs compute_86 code: what needs sm_90, compiled out of it, must stay off). */
int iris_cuda_kernels_major(const char *archs, const char *ptx, int major, int minor);

/* 1 when `device` can run this build: a driver at least as new as its CUDA runtime, the device
 * there, and kernels for it in the build's CUDA_ARCHS (machine code, or the PTX compiled at run time
 * for a newer card: said once in the log, at info level).  0 otherwise, with why[0..n) saying what
 * stands in the way and what to do (a driver too old, a build without kernels for the card), or
 * empty when there is simply no GPU or no driver. */
int iris_cuda_usable(int device, char *why, size_t n);

#ifdef __cplusplus
}
#endif
#endif
