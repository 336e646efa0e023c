/* test_device_pick.c: what `iris run` and `iris ls` do when the GPU cannot serve this build: an
 * NVIDIA driver older than the build's CUDA runtime (played by tests/preload/old_driver.so), or a
 * GPU the build has no kernels for (tests/preload/no_kernels.so: an RTX 5060).  --device auto
 * warns why and what to do, and answers on the CPU; --device cuda stops with the same reason.  (A
 * build without CUDA: auto runs on the CPU, cuda says the build has no CUDA.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

static char *run(const char *cmd, int *status) {
    FILE *f = popen(cmd, "r");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, k;
    char *out = malloc(cap);
    while (out && (k = fread(out + n, 1, cap - 1 - n, f)) > 0) n += k;
    if (out) out[n] = 0;
    *status = pclose(f);
    return out;
}

static const char *bin_path(void) { return getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris"; }

/* The preload library `name` beside the binary's build, and whether the binary has CUDA. */
static int preload_of(const char *name, char *so, size_t n, int *cuda) {
    const char *bin = bin_path(), *slash = strrchr(bin, '/');
    snprintf(so, n, "%.*s/tests/preload/%s", (int)(slash ? slash - bin : 1), slash ? bin : ".", name);
    char cmd[1024];
    int st = 0;
    snprintf(cmd, sizeof cmd, "%s version 2>&1", bin);
    char *ver = run(cmd, &st);
    *cuda = ver && strstr(ver, "cuda: yes") != NULL;
    free(ver);
    return access(so, R_OK);
}

IRIS_TEST(device_pick_old_driver) {
    const char *bin = bin_path();
    const char *model = "tests/fixtures/tiny/tiny-gqa/model";
    char so[512], cmd[2048];
    int st = 0, cuda = 0;
    REQUIRE(preload_of("old_driver.so", so, sizeof so, &cuda) == 0);

    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s %s run %s Hello --temperature 0 --max-tokens 4 2>&1", so, bin, model);
    char *out = run(cmd, &st);
    REQUIRE(out);
    CHECKF(st == 0, "auto: exit %d: %s", st, out);
    CHECKF(strstr(out, "4 generated"), "auto: no answer on the CPU: %s", out);
    if (cuda)
        CHECKF(strstr(out, "the GPU is not used: the NVIDIA driver supports CUDA 12.4 and this iris was built with "
                           "CUDA 13.") && strstr(out, "update the driver") && strstr(out, "running on the CPU"),
               "auto: %s", out);
    free(out);

    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s %s run %s Hello --temperature 0 --max-tokens 4 --device cuda 2>&1", so,
             bin, model);
    out = run(cmd, &st);
    REQUIRE(out);
    CHECKF(st != 0, "cuda: exit 0: %s", out);
    if (cuda)
        CHECKF(strstr(out, "device cuda: the NVIDIA driver supports CUDA 12.4") && strstr(out, "--device cpu"),
               "cuda: %s", out);
    else
        CHECKF(strstr(out, "built without CUDA"), "cuda (no CUDA build): %s", out);
    free(out);

    /* iris ls plans for this machine's GPU: it says why there is none to plan for */
    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s HF_HUB_CACHE=/nonexistent-iris-cache %s ls 2>&1", so, bin);
    out = run(cmd, &st);
    REQUIRE(out);
    if (cuda) CHECKF(strstr(out, "iris ls: warning: the NVIDIA driver supports CUDA 12.4"), "ls: %s", out);
    else CHECKF(!strstr(out, "warning"), "ls (no CUDA build): %s", out);
    free(out);
}

IRIS_TEST(device_pick_no_kernels_for_the_gpu) {
    const char *bin = bin_path();
    const char *model = "tests/fixtures/tiny/tiny-gqa/model";
    char so[512], cmd[2048];
    int st = 0, cuda = 0;
    REQUIRE(preload_of("no_kernels.so", so, sizeof so, &cuda) == 0);
    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s %s run %s Hello --temperature 0 --max-tokens 4 2>&1", so, bin, model);
    char *out = run(cmd, &st);
    REQUIRE(out);
    CHECKF(st == 0 && strstr(out, "4 generated"), "auto: exit %d: %s", st, out);
    if (cuda)
        CHECKF(strstr(out, "the GPU is not used: this iris was built with CUDA_ARCHS=") &&
                   strstr(out, "no kernels for NVIDIA GeForce RTX 5060 (played) (compute capability 12.0") &&
                   strstr(out, "rebuild with `make CUDA_ARCHS=120f`") && strstr(out, "running on the CPU"),
               "auto: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s %s run %s Hello --temperature 0 --max-tokens 4 --device cuda 2>&1", so,
             bin, model);
    out = run(cmd, &st);
    REQUIRE(out);
    CHECKF(st != 0, "cuda: exit 0: %s", out);
    if (cuda)
        CHECKF(strstr(out, "device cuda: this iris was built with CUDA_ARCHS=") &&
                   strstr(out, "make CUDA_ARCHS=120f") && strstr(out, "--device cpu"),
               "cuda: %s", out);
    free(out);
}
