/* test_build.c: the build targets this machine's GPUs.  scripts/cuda-archs maps what nvidia-smi
 * lists to CUDA_ARCHS (a fake nvidia-smi here), and the Makefile compiles the CUDA code (and the
 * probes, beside sm_90) for them when CUDA_ARCHS is not given (make -n: nothing is built).  Builds
 * outlive their GPUs: machine code for each target and PTX for the newest, as a plain target, that
 * a newer card compiles at start (cuda_archs.c says which cards run which).  None of it needs a
 * GPU or nvcc. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/cuda/cuda_info.h"
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
    /* and PTX for the newest of them, plain (no arch- or family-specific PTX: a newer card JITs it) */
    CHECKF(strstr(out, "arch=compute_120,code=compute_120") && strstr(out, "IRIS_CUDA_PTX='\"120\"'") &&
               !strstr(out, "code=compute_86") && !strstr(out, "code=compute_120f"),
           "make -n (PTX): %s", out);
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
    CHECKF(strstr(out, "arch=compute_89,code=sm_89") && !strstr(out, "sm_120f") &&
               strstr(out, "arch=compute_89,code=compute_89"),
           "make -n CUDA_ARCHS=89: %s", out);
    free(out);
    /* a release build's list: SASS for each, PTX once, for the newest (by number, not by spelling) */
    snprintf(line, sizeof line, mk, dir, "CUDA_ARCHS='80 86 89 90a 120f'", dir);
    snprintf(cmd, sizeof cmd, "PATH=%s:$PATH %s 2>&1", dir, line);
    out = run(cmd);
    REQUIRE(out);
    int ptx_targets = 0;
    for (const char *p = out; (p = strstr(p, ",code=compute_")); p++) ptx_targets++;
    CHECKF(strstr(out, "arch=compute_80,code=sm_80") && strstr(out, "arch=compute_90a,code=sm_90a") &&
               strstr(out, "arch=compute_120,code=compute_120") && ptx_targets == 1,
           "make -n (release list): %d PTX targets: %s", ptx_targets, out);
    free(out);
    /* CI's build (no GPU: 90a): sm_90a and compute_90, which cuda_decode.cu's setmaxnreg stays out of
     * (it is behind __CUDA_ARCH_FAMILY_SPECIFIC__) */
    fake_smi(dir, NULL);
    snprintf(line, sizeof line, mk, dir, "", dir);
    snprintf(cmd, sizeof cmd, "PATH=%s:$PATH %s 2>&1", dir, line);
    out = run(cmd);
    REQUIRE(out);
    CHECKF(strstr(out, "arch=compute_90a,code=sm_90a") && strstr(out, "arch=compute_90,code=compute_90"),
           "make -n (no GPU): %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* `make` builds the CLI and the library, not the probes (bench/NAME.cu); `make probes` does, and
 * `make test` builds them too, so that CI compiles them. */
IRIS_TEST(build_probes_by_their_own_target) {
    char dir[] = "/tmp/iris-probes-XXXXXX", cmd[1024];
    REQUIRE(mkdtemp(dir));
    const char *mk = "unset MAKEFLAGS MFLAGS; make -n --no-print-directory CUDA=1 NVCC=/bin/true CUDA_ARCHS=90a "
                     "BUILD=%s/b %s 2>&1";
    snprintf(cmd, sizeof cmd, mk, dir, "all");
    char *out = run(cmd);
    REQUIRE(out);
    CHECKF(out[0] && strstr(out, "cuda_attn.cu") && !strstr(out, "bench/sync_probe"), "make -n all: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, mk, dir, "probes");
    out = run(cmd);
    REQUIRE(out);
    CHECKF(strstr(out, "bench/sync_probe.cu") && strstr(out, "bench/pdl_probe.cu"), "make -n probes: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "unset MAKEFLAGS MFLAGS; make -n --no-print-directory CUDA=0 BUILD=%s/b probes 2>&1", dir);
    out = run(cmd);
    REQUIRE(out);
    CHECKF(strstr(out, "no CUDA in this build") && !strstr(out, "nvcc"), "make -n CUDA=0 probes: %s", out);
    free(out);
    FILE *f = fopen("Makefile", "r");
    REQUIRE(f);
    char l[512];
    int test_builds_probes = 0;
    while (fgets(l, sizeof l, f))
        if (strstr(l, "$(MAKE)") && strstr(l, " all ") && strstr(l, "iris-test") && strstr(l, "probes")) test_builds_probes = 1;
    fclose(f);
    CHECKF(test_builds_probes, "make test does not build the probes");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* Which cards a build runs, from its CUDA_ARCHS: machine code for the same major version and an
 * equal or newer minor one (sm_XYa: that one card only), PTX for any card at least as new. */
IRIS_TEST(build_archs_say_which_cards_run) {
    static const struct {
        const char *archs;
        int major, minor, sass;
    } cases[] = {
        {"90a", 9, 0, 1},
        {"90a", 10, 0, 0},                /* a B200 under CI's build: only the PTX */
        {"90a", 8, 9, 0},
        {"80 86 89 90a 120f", 8, 6, 1},
        {"80", 8, 9, 1},                  /* sm_80 runs on 8.6 and 8.9 */
        {"86", 8, 0, 0},                  /* not backwards */
        {"90a", 9, 1, 0},                 /* arch-specific: 9.0 only */
        {"90", 9, 1, 1},
        {"120f", 12, 1, 1},               /* the family: 12.0 and 12.1 */
        {"120f", 13, 0, 0},               /* a card newer than the list */
        {"100f 120f", 11, 0, 0},
        {"", 9, 0, 0},
        {"bogus 90a", 9, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECKF(iris_cuda_archs_have_sass(cases[i].archs, cases[i].major, cases[i].minor) == cases[i].sass,
               "CUDA_ARCHS \"%s\" on %d.%d: want %s", cases[i].archs, cases[i].major, cases[i].minor,
               cases[i].sass ? "machine code" : "none");
    /* sm_90a's own instructions (wgmma): only where the list names 90a, only on 9.0 */
    CHECK(iris_cuda_archs_have_arch_sass("80 86 89 90a 120f", 9, 0) && iris_cuda_archs_have_arch_sass("90a", 9, 0));
    CHECK(!iris_cuda_archs_have_arch_sass("90", 9, 0) && !iris_cuda_archs_have_arch_sass("90a", 9, 1) &&
          !iris_cuda_archs_have_arch_sass("120f", 12, 0) && !iris_cuda_archs_have_arch_sass(NULL, 9, 0));
    CHECK(iris_cuda_ptx_runs("120", 13, 0) && iris_cuda_ptx_runs("120", 12, 0) && iris_cuda_ptx_runs("90", 10, 0));
    CHECK(!iris_cuda_ptx_runs("120", 10, 0) && !iris_cuda_ptx_runs("90", 8, 9) && !iris_cuda_ptx_runs("", 9, 0) &&
          !iris_cuda_ptx_runs(NULL, 9, 0));
    /* the capability the kernels are compiled for: the device's, or the older PTX's they were JIT-compiled from */
    CHECK(iris_cuda_kernels_major("90a", "90", 9, 0) == 9);
    CHECK(iris_cuda_kernels_major("90a", "90", 10, 0) == 9);
    CHECK(iris_cuda_kernels_major("86", "86", 9, 0) == 8);   /* sm_90 features compiled out: off */
    CHECK(iris_cuda_kernels_major("80 86 89 90a 120f", "120", 13, 0) == 12);
    CHECK(iris_cuda_kernels_major("80 86 89 90a 120f", "120", 8, 9) == 8);
}

/* The PTX entries of the fatbinary nvcc embeds in object file `path`: how many there are, and
 * whether one is for compute_`sm` and plain (neither arch- nor family-specific).  The layout, as
 * nvcc 12-13 writes it: a 16-byte header (magic 0xBA55ED50, version, header size, payload size),
 * then entries of { u16 kind (1 PTX, 2 machine code), u16 version, u32 header size, u64 payload
 * size, ..., u32 sm at 28, u64 flags at 40 (0x100000 arch-specific "a", 0x200000 family "f") }. */
static int fatbin_ptx(const char *path, unsigned sm, int *plain) {
    *plain = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    static unsigned char buf[16 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    int count = 0;
    for (size_t i = 0; i + 16 <= n; i += 4) {
        uint32_t magic;
        memcpy(&magic, buf + i, 4);
        if (magic != 0xBA55ED50u) continue;
        uint16_t hs;
        uint64_t size;
        memcpy(&hs, buf + i + 6, 2);
        memcpy(&size, buf + i + 8, 8);
        for (size_t p = i + hs; p + 48 <= n && p < i + hs + size;) {
            uint16_t kind;
            uint32_t ehs, esm;
            uint64_t payload, flags;
            memcpy(&kind, buf + p, 2);
            memcpy(&ehs, buf + p + 4, 4);
            memcpy(&payload, buf + p + 8, 8);
            memcpy(&esm, buf + p + 28, 4);
            memcpy(&flags, buf + p + 40, 8);
            if (ehs < 48) break;
            if (kind == 1) {
                count++;
                if (esm == sm && !(flags & 0x300000)) *plain = 1;
            }
            p += ehs + payload;
        }
    }
    return count;
}

/* A CUDA build's objects carry the PTX the Makefile asks for: checked on every object of this
 * checkout's build when it has CUDA (its stamp, build/cuda_archs, names the PTX target). */
IRIS_TEST(build_objects_embed_ptx) {
    FILE *f = fopen("build/cuda_archs", "r");
    char archs[256] = {0}, ptx[64] = {0};
    int have = f && fgets(archs, sizeof archs, f) && fgets(ptx, sizeof ptx, f) && !strncmp(ptx, "ptx ", 4);
    if (f) fclose(f);
    char *objs = have ? run("for f in src/backend/cuda/*.cu; do o=build/${f%.cu}.o; [ -f $o ] && echo $o; done") : NULL;
    if (!objs || !objs[0]) {
        free(objs);
        IRIS_TEST_SKIP("no CUDA build in build/ (the Makefile's flags are checked by build_cuda_archs_follow_the_gpus)");
    }
    unsigned sm = (unsigned)atoi(ptx + 4); /* 0: built with CUDA_PTX= (none) */
    int n_obj = 0;
    for (char *o = strtok(objs, "\n"); o; o = strtok(NULL, "\n"), n_obj++) {
        int plain = 0, count = fatbin_ptx(o, sm, &plain);
        CHECKF(sm ? count == 1 && plain : count == 0, "%s (CUDA_ARCHS %.*s): %d PTX entries, %s plain compute_%u", o,
               (int)strcspn(archs, "\n"), archs, count, plain ? "one" : "none", sm);
    }
    if (sm) printf("  %d CUDA objects, each with plain compute_%u PTX\n", n_obj, sm);
    else printf("  %d CUDA objects, none with PTX (built with CUDA_PTX=)\n", n_obj);
    CHECK(n_obj >= 10);
    free(objs);
}

/* A CUDA build links the CUDA libraries into libiris-cuda.so, loaded when a GPU is used
 * (src/backend/cuda/cuda_loader.c), not into the executables that may run without one (make -n:
 * nothing is built).  The benchmarks and iris-test-gpu, which call the backend's test knobs, link
 * its objects in. */
IRIS_TEST(build_cuda_backend_is_loaded_not_linked) {
    char dir[] = "/tmp/iris-cudaso-XXXXXX", cmd[1024];
    REQUIRE(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "unset MAKEFLAGS MFLAGS; make -n --no-print-directory CUDA=1 NVCC=/bin/true CUDA_ARCHS=90a "
             "BUILD=%s/b all %s/b/iris-test-gpu 2>&1", dir, dir);
    char *out = run(cmd);
    REQUIRE(out && out[0]);
    int iris_link = 0, so_link = 0, gpu_link = 0;
    for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
        if (strstr(l, "-o ") && strstr(l, "/b/iris ")) {
            iris_link = 1;
            CHECKF(!strstr(l, "-lcudart") && !strstr(l, "-lcublas") && strstr(l, "-rdynamic"), "iris: %s", l);
        }
        if (strstr(l, "-shared") && strstr(l, "libiris-cuda.so")) {
            so_link = 1;
            CHECKF(strstr(l, "-lcublasLt") && strstr(l, "-lcudart") && strstr(l, "cuda_attn.o"), "the library: %s", l);
        }
        if (strstr(l, "-o ") && strstr(l, "/b/iris-test-gpu ")) {
            gpu_link = 1;
            CHECKF(strstr(l, "-lcudart") && strstr(l, "cuda_attn.o"), "iris-test-gpu: %s", l);
        }
    }
    CHECKF(iris_link && so_link && gpu_link, "links seen: iris %d, libiris-cuda.so %d, iris-test-gpu %d", iris_link,
           so_link, gpu_link);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* The binary under test (a CPU or a CUDA build): `iris --help` and `iris plan` load no CUDA library. */
IRIS_TEST(build_light_start) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    char cmd[1024];
    const char *runs[] = {"--help", "plan tests/fixtures/tiny/tiny-gqa/model",
                          "run tests/fixtures/tiny/tiny-gqa/model --device cpu --max-tokens 2 hi"};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        snprintf(cmd, sizeof cmd, "LD_DEBUG=files %s %s 2>&1 >/dev/null | grep -c -E 'file=lib(cudart|cublas)' || true",
                 bin, runs[i]);
        char *out = run(cmd);
        REQUIRE(out);
        CHECKF(atoi(out) == 0, "iris %s loaded %s CUDA libraries", runs[i], out);
        free(out);
    }
    snprintf(cmd, sizeof cmd, "ldd %s | grep -c -E 'lib(cudart|cublas)' || true", bin);
    char *out = run(cmd);
    CHECKF(out && atoi(out) == 0, "%s links %s CUDA libraries", bin, out ? out : "?");
    free(out);
}

/* make install PREFIX=DIR: the binary, the demo model where the binary finds it, the help pages;
 * the installed iris captions with the demo model from any directory. */
IRIS_TEST(build_install) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    char dir[] = "/tmp/iris-install-XXXXXX", cmd[2048], build[512];
    REQUIRE(mkdtemp(dir));
    const char *slash = strrchr(bin, '/');
    snprintf(build, sizeof build, "%.*s", slash ? (int)(slash - bin) : 1, slash ? bin : ".");
    char *ver = run(strcat(strcpy(cmd, bin), " version"));
    int cuda = ver && strstr(ver, "cuda: yes");
    free(ver);
    snprintf(cmd, sizeof cmd, "unset MAKEFLAGS MFLAGS; make --no-print-directory -q BUILD=%s CUDA=%d all; echo $?", build,
             cuda);
    char *q = run(cmd);
    int up_to_date = q && atoi(q) == 0;
    free(q);
    if (!up_to_date) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(system(cmd) == 0);
        IRIS_TEST_SKIP("%s is not up to date with the sources (make install would rebuild it)", bin);
    }
    snprintf(cmd, sizeof cmd, "unset MAKEFLAGS MFLAGS; make --no-print-directory BUILD=%s CUDA=%d install PREFIX=%s/p "
             ">/dev/null 2>&1 && echo ok", build, cuda, dir);
    char *out = run(cmd);
    CHECKF(out && strstr(out, "ok"), "make install failed: %s", cmd);
    free(out);
    const char *files[] = {"bin/iris", "share/iris/models/demo/config.json", "share/iris/models/demo/model.safetensors",
                           "share/man/man1/iris.1", "share/doc/iris/caption.txt", "share/doc/iris/serve.txt"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char p[700];
        snprintf(p, sizeof p, "%s/p/%s", dir, files[i]);
        CHECKF(access(p, R_OK) == 0, "%s not installed", p);
    }
    char cwd[1024];
    REQUIRE(getcwd(cwd, sizeof cwd));
    snprintf(cmd, sizeof cmd, "cd / && env -u IRIS_DEMO_MODEL %s/p/bin/iris caption %s/examples/images/scene1.png "
             "--max-tokens 12 --temperature 0 2>&1", dir, cwd);
    out = run(cmd);
    CHECKF(out && strstr(out, "demo model") && strstr(out, "square"), "the installed iris: %s", out ? out : "(failed)");
    free(out);
    snprintf(cmd, sizeof cmd, "grep -c 'usage: iris caption' %s/p/share/man/man1/iris.1", dir);
    out = run(cmd);
    CHECK(out && atoi(out) == 1);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}
