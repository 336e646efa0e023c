/* test_device_pick.c: what `iris run` and `iris ls` do when the GPU cannot serve this build: an
 * NVIDIA driver older than the build's CUDA runtime (played by tests/preload/old_driver.so), or a
 * GPU the build has no kernels for (tests/preload/no_kernels.so: an RTX 5060).  --device auto
 * warns why and what to do, and answers on the CPU; --device cuda stops with the same reason.  (A
 * build without CUDA: auto runs on the CPU, cuda says the build has no CUDA.)  A GPU newer than the
 * build's targets (tests/preload/new_card.so) runs its PTX, and the log says so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

static const char *bin_path(void) { return getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris"; }

/* path: `name` in the binary's build folder */
static void beside_bin(const char *name, char *path, size_t n) {
    const char *bin = bin_path(), *slash = strrchr(bin, '/');
    snprintf(path, n, "%.*s/%s", (int)(slash ? slash - bin : 1), slash ? bin : ".", name);
}

/* The preload library `name` beside the binary's build (0 when it is there), and whether the
 * binary has CUDA. */
static int preload_of(const char *name, char *so, size_t n, int *cuda) {
    char cmd[1024], rel[256];
    snprintf(rel, sizeof rel, "tests/preload/%s", name);
    beside_bin(rel, so, n);
    int st = 0;
    snprintf(cmd, sizeof cmd, "%s version 2>&1", bin_path());
    char *ver = iris_test_popen(cmd, &st);
    *cuda = ver && strstr(ver, "cuda: yes") != NULL;
    free(ver);
    return access(so, R_OK);
}

/* `iris run` on a tiny model under the preload library so_name: with --device auto it answers on
 * the CPU and (a CUDA build) says every one of auto_says; with --device cuda it fails, saying every
 * one of cuda_says (a build without CUDA: that it has none). */
static void check_pick(const char *so_name, const char *const *auto_says, const char *const *cuda_says) {
    const char *bin = bin_path(), *model = "tests/fixtures/tiny/tiny-gqa/model";
    char so[512], cmd[2048];
    int st = 0, cuda = 0;
    REQUIRE(preload_of(so_name, so, sizeof so, &cuda) == 0);
    for (int dev = 0; dev < 2; dev++) {
        snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s %s run %s Hello -v --temperature 0 --max-tokens 4%s 2>&1", so, bin,
                 model, dev ? " --device cuda" : "");
        char *out = iris_test_popen(cmd, &st);
        REQUIRE(out);
        if (!dev) CHECKF(st == 0 && strstr(out, "4 generated"), "%s, auto: exit %d, no answer on the CPU: %s", so_name, st, out);
        else CHECKF(st != 0, "%s, cuda: exit 0: %s", so_name, out);
        const char *const *says = dev ? cuda_says : auto_says;
        for (int i = 0; cuda && says[i]; i++) CHECKF(strstr(out, says[i]), "%s, %s: no \"%s\" in: %s", so_name, dev ? "cuda" : "auto", says[i], out);
        if (dev && !cuda) CHECKF(strstr(out, "built without CUDA"), "%s, cuda (no CUDA build): %s", so_name, out);
        free(out);
    }
}

IRIS_TEST(device_pick_old_driver) {
    static const char *const auto_says[] = {
        "the GPU is not used: the NVIDIA driver supports CUDA 12.4 and this iris was built with CUDA ",
        "update the driver", "running on the CPU", NULL};
    static const char *const cuda_says[] = {"device cuda: the NVIDIA driver supports CUDA 12.4", "--device cpu", NULL};
    check_pick("old_driver.so", auto_says, cuda_says);

    /* iris ls plans for this machine's GPU: it says why there is none to plan for */
    char so[512], cmd[2048];
    int st = 0, cuda = 0;
    REQUIRE(preload_of("old_driver.so", so, sizeof so, &cuda) == 0);
    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s HF_HUB_CACHE=/nonexistent-iris-cache %s ls 2>&1", so, bin_path());
    char *out = iris_test_popen(cmd, &st);
    REQUIRE(out);
    if (cuda) CHECKF(strstr(out, "iris ls: warning: the NVIDIA driver supports CUDA 12.4"), "ls: %s", out);
    else CHECKF(!strstr(out, "warning"), "ls (no CUDA build): %s", out);
    free(out);
}

IRIS_TEST(device_pick_no_kernels_for_the_gpu) {
    static const char *const auto_says[] = {
        "the GPU is not used: this iris was built with CUDA_ARCHS=",
        "no kernels for NVIDIA GeForce RTX 5060 (played) (compute capability 12.0",
        "rebuild with `make CUDA_ARCHS=120f`", "running on the CPU", NULL};
    static const char *const cuda_says[] = {"device cuda: this iris was built with CUDA_ARCHS=", "make CUDA_ARCHS=120f",
                                            "--device cpu", NULL};
    check_pick("no_kernels.so", auto_says, cuda_says);
}

/* A card newer than every target of the build runs the PTX the build embeds for the newest one,
 * compiled by the driver at first start: the log says so (info level), once, naming the card and
 * the PTX target, and how to build machine code for it.  (`iris ls`: it looks at the GPU and
 * goes on without one when the rest fails, as it does here.) */
IRIS_TEST(device_pick_newer_card_runs_the_ptx) {
    char so[512], cmd[2048];
    int st = 0, cuda = 0;
    REQUIRE(preload_of("new_card.so", so, sizeof so, &cuda) == 0);
    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s HF_HUB_CACHE=/nonexistent-iris-cache %s ls 2>&1", so, bin_path());
    char *out = iris_test_popen(cmd, &st);
    REQUIRE(out);
    const char *say = "NVIDIA Future GPU (played) (compute capability 13.0) has no machine code in this build";
    if (cuda) {
        CHECKF(strstr(out, say) && strstr(out, "JIT-compiled from the compute_") && strstr(out, "make CUDA_ARCHS=130"),
               "ls: %s", out);
        const char *first = strstr(out, say);
        CHECKF(first && !strstr(first + 1, say), "said more than once: %s", out);
        CHECKF(!strstr(out, "warning"), "ls: %s", out);
    } else {
        CHECKF(!strstr(out, "JIT"), "ls (no CUDA build): %s", out);
    }
    free(out);
}

/* `iris version` says what GPUs the binary can serve: its CUDA_ARCHS (as the build recorded them
 * beside it) and the CUDA runtime the driver must support. */
IRIS_TEST(version_names_the_cuda_build) {
    const char *bin = bin_path();
    char cmd[1024], path[512];
    int st = 0;
    snprintf(cmd, sizeof cmd, "%s version 2>&1", bin);
    char *out = iris_test_popen(cmd, &st);
    REQUIRE(out && st == 0);
    CHECKF(!strncmp(out, "iris ", 5), "%s", out);
    if (strstr(out, "cuda: yes")) {
        beside_bin("cuda_archs", path, sizeof path);
        FILE *f = fopen(path, "r");
        char archs[256] = {0}, want[300];
        REQUIRE(f && fgets(archs, sizeof archs, f));
        fclose(f);
        archs[strcspn(archs, "\n")] = 0;
        snprintf(want, sizeof want, "CUDA_ARCHS=\"%s\")", archs);
        CHECKF(strstr(out, want) && strstr(out, "; CUDA "), "version: %s (want %s)", out, want);
    } else {
        CHECKF(strstr(out, "(cuda: no)"), "version: %s", out);
    }
    free(out);
}
