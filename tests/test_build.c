/* test_build.c: the build targets this machine's GPUs.  scripts/cuda-archs maps what nvidia-smi
 * lists to CUDA_ARCHS (a fake nvidia-smi here), and the Makefile compiles the CUDA code (and the
 * probes, beside sm_90) for them when CUDA_ARCHS is not given (make -n: nothing is built). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

/* stdout of cmd, "" when it failed */
static char *run(const char *cmd) {
    int st;
    char *out = iris_test_popen(cmd, &st);
    if (out && st != 0) out[0] = 0;
    return out;
}

/* A fake nvidia-smi in dir that prints caps (one "X.Y" a line), or fails when caps is NULL. */
static void fake_smi(const char *dir, const char *caps) {
    char path[512];
    snprintf(path, sizeof path, "%s/nvidia-smi", dir);
    FILE *f = fopen(path, "w");
    if (!f) return;
    if (caps) fprintf(f, "#!/bin/sh\nprintf '%s'\n", caps);
    else fprintf(f, "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver' >&2\nexit 9\n");
    fclose(f);
    chmod(path, 0755);
}

IRIS_TEST(build_cuda_archs_follow_the_gpus) {
    char dir[] = "/tmp/iris-archs-XXXXXX", cmd[1024];
    REQUIRE(mkdtemp(dir));
    static const struct {
        const char *caps, *want;
    } cases[] = {
        {NULL, "90a\n"},                       /* no GPU, no driver: CI's build */
        {"9.0\\n", "90a\n"},                   /* H100 / H200 */
        {"12.0\\n12.0\\n", "120f\n"},          /* two RTX 5060s: one target */
        {"8.6\\n8.9\\n12.0\\n", "86 89 120f\n"},
        {"10.0\\n", "100f\n"},
        {"7.5\\n", "90a\n"},                   /* too old: not a target (a warning on stderr) */
        {"7.5\\n8.9\\n", "89\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fake_smi(dir, cases[i].caps);
        snprintf(cmd, sizeof cmd, "PATH=%s:/usr/bin:/bin scripts/cuda-archs 2>/dev/null", dir);
        char *out = run(cmd);
        REQUIRE(out);
        CHECKF(!strcmp(out, cases[i].want), "caps %s: \"%s\", want \"%s\"", cases[i].caps ? cases[i].caps : "(none)",
               out, cases[i].want);
        free(out);
    }
    /* The warning names the old card. */
    fake_smi(dir, "7.5\\n");
    snprintf(cmd, sizeof cmd, "PATH=%s:/usr/bin:/bin scripts/cuda-archs 2>&1 >/dev/null", dir);
    char *err = run(cmd);
    REQUIRE(err);
    CHECKF(strstr(err, "7.5") && strstr(err, "too old"), "stderr: %s", err);
    free(err);

    /* The Makefile's default follows them; CUDA_ARCHS given wins.  (CUDA=1 and a stand-in nvcc:
     * make -n runs no compiler.) */
    const char *mk = "unset CUDA_ARCHS MAKEFLAGS MFLAGS; "  /* (`make test` exports them) */
                     "make -n --no-print-directory CUDA=1 NVCC=/bin/true BUILD=%s/b %s %s/b/src/backend/cuda/cuda_info.o";
    fake_smi(dir, "8.6\\n12.0\\n");
    char line[1024];
    snprintf(line, sizeof line, mk, dir, "", dir);
    snprintf(cmd, sizeof cmd, "PATH=%s:$PATH %s 2>&1", dir, line);
    char *out = run(cmd);
    REQUIRE(out);
    CHECKF(strstr(out, "arch=compute_86,code=sm_86") && strstr(out, "arch=compute_120f,code=sm_120f") &&
               strstr(out, "IRIS_CUDA_ARCHS='\"86 120f\"'"),
           "make -n: %s", out);
    free(out);
    /* the probes: sm_90 (H100 measurements) and the newer targets beside it */
    snprintf(line, sizeof line,
             "unset CUDA_ARCHS MAKEFLAGS MFLAGS; make -n --no-print-directory CUDA=1 NVCC=/bin/true BUILD=%s/b "
             "%s/b/bench/sync_probe",
             dir, dir);
    snprintf(cmd, sizeof cmd, "PATH=%s:$PATH %s 2>&1", dir, line);
    out = run(cmd);
    REQUIRE(out);
    CHECKF(strstr(out, "arch=compute_90,code=sm_90 ") && strstr(out, "arch=compute_120f,code=sm_120f") &&
               !strstr(out, "sm_86"),
           "make -n (probe): %s", out);
    free(out);
    snprintf(line, sizeof line, mk, dir, "CUDA_ARCHS=89", dir);
    snprintf(cmd, sizeof cmd, "PATH=%s:$PATH %s 2>&1", dir, line);
    out = run(cmd);
    REQUIRE(out);
    CHECKF(strstr(out, "arch=compute_89,code=sm_89") && !strstr(out, "sm_120f"), "make -n CUDA_ARCHS=89: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}
