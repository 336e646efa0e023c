/* test_main.c: the runner of build/iris-test (see test.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "test.h"

#include <stdarg.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MAX_TESTS 2048

static struct {
    const char *name;
    iris_test_fn fn;
} g_tests[MAX_TESTS];
static int g_n_tests;
static int g_cur_failed;
static char g_cur_skip[256]; /* why the current test was skipped; empty: it ran */
static const char *g_cur_name;

void iris_test_register(const char *name, iris_test_fn fn) {
    if (g_n_tests < MAX_TESTS) {
        g_tests[g_n_tests].name = name;
        g_tests[g_n_tests].fn = fn;
        g_n_tests++;
    }
}

void iris_test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "  FAIL %s (%s:%d): ", g_cur_name, file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    g_cur_failed++;
}

void iris_test_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_cur_skip, sizeof g_cur_skip, fmt, ap);
    va_end(ap);
    if (!g_cur_skip[0]) snprintf(g_cur_skip, sizeof g_cur_skip, "(no reason given)");
}

const char *iris_test_asset(const char *name) {
    static char path[4096];
    const char *dir = getenv("IRIS_ASSETS");
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : ".cache/assets", name);
    return access(path, R_OK) == 0 ? path : NULL;
}

char *iris_test_popen(const char *cmd, int *status) {
    FILE *f = popen(cmd, "r");
    *status = -1;
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, k;
    char *out = malloc(cap);
    while (out && (k = fread(out + n, 1, cap - 1 - n, f)) > 0) {
        n += k;
        if (n + 1 == cap) {
            char *grown = realloc(out, cap *= 2);
            if (!grown) free(out);
            out = grown;
        }
    }
    if (out) out[n] = 0;
    int st = pclose(f);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

static int cmp_test(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(int argc, char **argv) {
    /* Run from the repository root so fixture paths resolve. */
    const char *root = getenv("IRIS_ROOT");
    if (root && chdir(root) != 0) {
        fprintf(stderr, "cannot chdir to %s\n", root);
        return 2;
    }
    qsort(g_tests, (size_t)g_n_tests, sizeof g_tests[0], cmp_test);
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < g_n_tests; i++) {
        int selected = argc < 2;
        for (int a = 1; a < argc; a++)
            if (strstr(g_tests[i].name, argv[a])) selected = 1;
        if (!selected) continue;
        g_cur_name = g_tests[i].name;
        g_cur_failed = 0;
        g_cur_skip[0] = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        g_tests[i].fn();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        if (g_cur_failed) {
            failed++;
            printf("FAIL %s (%.0f ms)\n", g_tests[i].name, ms);
        } else if (g_cur_skip[0]) {
            skipped++;
            printf("skip %s: %s\n", g_tests[i].name, g_cur_skip);
        } else {
            passed++;
            printf("ok   %s (%.0f ms)\n", g_tests[i].name, ms);
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
