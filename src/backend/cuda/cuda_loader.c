/* cuda_loader.c: the CUDA backend, loaded when a GPU is used.
 *
 * In a CUDA build the backend's kernels and everything that links the CUDA
 * libraries (cudart, cuBLASLt: ~0.3 s and ~170 MB of start-up when linked at
 * load time, even for `iris --help`) are a shared object,
 * libiris-cuda.so, beside the executable (the Makefile).  The executables
 * carry these stand-ins for the backend's C entry points (backend.h
 * iris_backend_cuda_open, cuda_backend.h, cuda_info.h); the first call of one
 * dlopens the library and calls the real function, found with dlsym in the
 * library itself.  Where the library was linked in whole (iris-test-gpu,
 * the benchmarks: they call cuda_testing.h), the real definitions win: the
 * stand-ins are weak.
 *
 * Which library: $IRIS_CUDA_LIB, else libiris-cuda.so in the executable's
 * folder, else ../lib/iris/libiris-cuda.so from it (make install).  The
 * library resolves what it needs of iris (the log, errors) in the
 * executable, which exports its symbols (-rdynamic).
 *
 * A cheap first question: iris_cuda_usable and iris_cuda_device_count load
 * nothing when the machine has no NVIDIA device node (/dev/nvidiactl, or
 * /dev/dxg under WSL2) and no CUDA runtime is already in the process (as a
 * test's LD_PRELOAD stand-in is): a CPU run on such a machine starts
 * without the CUDA libraries.  When the library cannot be loaded, the
 * backend is not usable and the reason (dlerror) is what iris_cuda_usable
 * says. */
#ifdef IRIS_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_info.h"
#include "err.h"

#define WEAK __attribute__((weak))

static void *g_lib;
static char g_why[600];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void *try_open(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) snprintf(g_why, sizeof g_why, "the CUDA backend could not be loaded: %s", dlerror());
    return h;
}

static void load(void) {
    const char *env = getenv("IRIS_CUDA_LIB");
    if (env && *env) {
        g_lib = try_open(env);
        return;
    }
    char exe[PATH_MAX], path[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        g_lib = try_open("libiris-cuda.so");
        return;
    }
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    static const char *const rel[] = {"/libiris-cuda.so", "/../lib/iris/libiris-cuda.so"};
    for (size_t i = 0; i < sizeof rel / sizeof *rel && !g_lib; i++) {
        snprintf(path, sizeof path, "%s%s", exe, rel[i]);
        if (access(path, R_OK) == 0) g_lib = try_open(path);
    }
    if (!g_lib && !g_why[0])
        snprintf(g_why, sizeof g_why, "the CUDA backend (libiris-cuda.so) is not beside %s nor in %s/../lib/iris "
                                      "(set IRIS_CUDA_LIB to it)", exe, exe);
}

/* The real function `name` of the library, or NULL (g_why says why). */
static void *real(const char *name) {
    pthread_once(&g_once, load);
    void *f = g_lib ? dlsym(g_lib, name) : NULL;
    if (g_lib && !f) snprintf(g_why, sizeof g_why, "the CUDA backend lacks %s (a library from another build?)", name);
    return f;
}

/* No NVIDIA device node and no CUDA runtime in the process: no GPU to ask about. */
static int surely_no_gpu(void) {
    return access("/dev/nvidiactl", F_OK) != 0 && access("/dev/nvidia0", F_OK) != 0 && access("/dev/dxg", F_OK) != 0 &&
           !dlsym(RTLD_DEFAULT, "cudaGetDeviceCount");
}

WEAK int iris_backend_cuda_open(int device, size_t arena_bytes, iris_backend **out, iris_err *err) {
    int (*f)(int, size_t, iris_backend **, iris_err *) = (int (*)(int, size_t, iris_backend **, iris_err *))real(
        "iris_backend_cuda_open");
    if (!f) return iris_err_set(err, IRIS_EDEVICE, "device cuda: %s", g_why);
    return f(device, arena_bytes, out, err);
}

WEAK int iris_backend_cuda_fork(iris_backend *b, iris_backend **out, iris_err *err) {
    int (*f)(iris_backend *, iris_backend **, iris_err *) =
        (int (*)(iris_backend *, iris_backend **, iris_err *))real("iris_backend_cuda_fork");
    if (!f) return iris_err_set(err, IRIS_EDEVICE, "device cuda: %s", g_why);
    return f(b, out, err);
}
WEAK int iris_cuda_device_count(void) {
    if (surely_no_gpu()) return 0;
    int (*f)(void) = (int (*)(void))real("iris_cuda_device_count");
    return f ? f() : 0;
}

WEAK size_t iris_cuda_scratch_bytes(void) {
    size_t (*f)(void) = (size_t (*)(void))real("iris_cuda_scratch_bytes");
    return f ? f() : 0;
}

WEAK int iris_cuda_mem_info(iris_backend *b, iris_cuda_mem *m) {
    int (*f)(iris_backend *, iris_cuda_mem *) = (int (*)(iris_backend *, iris_cuda_mem *))real("iris_cuda_mem_info");
    return f ? f(b, m) : -1;
}

WEAK int iris_cuda_small_stack(void) {
    int (*f)(void) = (int (*)(void))real("iris_cuda_small_stack");
    return f ? f() : -1;
}

WEAK int iris_cuda_device_memory(int device, size_t *free_bytes, size_t *total_bytes) {
    int (*f)(int, size_t *, size_t *) = (int (*)(int, size_t *, size_t *))real("iris_cuda_device_memory");
    return f ? f(device, free_bytes, total_bytes) : -1;
}

WEAK const char *iris_cuda_archs(void) {
    const char *(*f)(void) = (const char *(*)(void))real("iris_cuda_archs");
    return f ? f() : "?";
}

WEAK int iris_cuda_runtime_version(void) {
    int (*f)(void) = (int (*)(void))real("iris_cuda_runtime_version");
    return f ? f() : 0;
}

WEAK const char *iris_cuda_ptx(void) {
    const char *(*f)(void) = (const char *(*)(void))real("iris_cuda_ptx");
    return f ? f() : "";
}

WEAK int iris_cuda_usable(int device, char *why, size_t n) {
    if (n) why[0] = 0;
    if (surely_no_gpu()) return 0;
    int (*f)(int, char *, size_t) = (int (*)(int, char *, size_t))real("iris_cuda_usable");
    if (!f) {
        snprintf(why, n, "%s", g_why);
        return 0;
    }
    return f(device, why, n);
}
#endif
