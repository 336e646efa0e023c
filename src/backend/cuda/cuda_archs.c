/* cuda_archs.c: what a build's CUDA_ARCHS list can run, by compute capability: plain C (no CUDA
 * headers), built in every build so that tests check it without a GPU.
 *
 * The Makefile compiles machine code (SASS) for each target of CUDA_ARCHS ("80 86 89 90a 120f")
 * and PTX for the newest one, as a plain target (compute_120).  The driver runs SASS built for
 * sm_XY on a device X.Z with Z >= Y, sm_XYf (family) likewise, and sm_XYa (arch-specific) on X.Y
 * only; PTX for compute_P it compiles at run time (JIT) for any device of capability P or newer.
 * Kernels so compiled keep the PTX's __CUDA_ARCH__, so the backend gates what needs sm_90 on
 * iris_cuda_kernels_major, not on the device's own capability (cuda_mem.cu set_choices). */
#include <stdlib.h>

#include "backend/cuda/cuda_info.h"

/* The next target of a CUDA_ARCHS list at *s: its number (90 for "90a"), its suffix letter (0 if
 * none) in *suffix, *s moved past it; -1 at the end of the list. */
static int next_target(const char **s, char *suffix) {
    while (**s == ' ' || **s == '\t' || **s == ',') (*s)++;
    if (!**s) return -1;
    char *end;
    long n = strtol(*s, &end, 10);
    if (end == *s) { /* not a number: skip the word */
        while (**s && **s != ' ' && **s != '\t' && **s != ',') (*s)++;
        return 0;
    }
    *suffix = *end >= 'a' && *end <= 'z' ? *end : 0;
    while (*end && *end != ' ' && *end != '\t' && *end != ',') end++;
    *s = end;
    return n > 0 && n < 10000 ? (int)n : 0;
}

int iris_cuda_archs_have_sass(const char *archs, int major, int minor) {
    const char *s = archs ? archs : "";
    char suffix = 0;
    for (int n; (n = next_target(&s, &suffix)) >= 0;) {
        if (n == 0 || n / 10 != major) continue;
        if (suffix == 'a' ? n % 10 == minor : n % 10 <= minor) return 1;
    }
    return 0;
}

int iris_cuda_archs_have_arch_sass(const char *archs, int major, int minor) {
    const char *s = archs ? archs : "";
    char suffix = 0;
    for (int n; (n = next_target(&s, &suffix)) >= 0;)
        if (suffix == 'a' && n == major * 10 + minor) return 1;
    return 0;
}

int iris_cuda_ptx_runs(const char *ptx, int major, int minor) {
    int p = ptx ? atoi(ptx) : 0;
    return p > 0 && major * 10 + minor >= p;
}

int iris_cuda_kernels_major(const char *archs, const char *ptx, int major, int minor) {
    if (iris_cuda_archs_have_sass(archs, major, minor)) return major;
    int p = ptx ? atoi(ptx) : 0;
    return p > 0 && p / 10 < major ? p / 10 : major;
}
