/* test.h: the one test harness.  A test is a function registered by name:
 *
 *     IRIS_TEST(safetensors_truncated) { ... CHECK(x == 3); ... }
 *
 * `build/iris-test` runs every test (or those whose names contain one of its
 * arguments) and ends with the line "N passed, N failed, N skipped"; it exits
 * 1 when a test failed.  CHECK records a failure with file:line and the
 * expression and goes on; REQUIRE returns from the test.  A test that cannot
 * run here (no GPU, built without CUDA) says so with IRIS_TEST_SKIP("why"):
 * it prints "skip NAME: why" and counts as skipped, never as passed (a
 * failure recorded before it still fails the test).  Fixture paths are
 * relative to the repository root (the runner chdirs there). */
#ifndef IRIS_TEST_H
#define IRIS_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef void (*iris_test_fn)(void);
void iris_test_register(const char *name, iris_test_fn fn);
void iris_test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Marks the current test skipped, with why (printf-style); IRIS_TEST_SKIP also returns from it. */
void iris_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Path of a cached asset (e.g. the real Qwen tokenizer), or NULL when absent. */
const char *iris_test_asset(const char *name);
/* A shell command's standard output, whole (malloc'd, NUL-terminated; NULL when it cannot start),
 * and its exit code in *status (-1: it did not exit normally or could not start). */
char *iris_test_popen(const char *cmd, int *status);

#define IRIS_TEST(name)                                                        \
    static void test_##name(void);                                             \
    __attribute__((constructor)) static void register_##name(void) {          \
        iris_test_register(#name, test_##name);                                \
    }                                                                          \
    static void test_##name(void)

#define IRIS_TEST_SKIP(...)                                                    \
    do {                                                                       \
        iris_test_skip(__VA_ARGS__);                                           \
        return;                                                                \
    } while (0)
#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) iris_test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);   \
    } while (0)
#define CHECKF(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond)) iris_test_fail(__FILE__, __LINE__, __VA_ARGS__);          \
    } while (0)
#define REQUIRE(cond)                                                          \
    do {                                                                       \
        if (!(cond)) {                                                         \
            iris_test_fail(__FILE__, __LINE__, "REQUIRE(%s)", #cond);          \
            return;                                                            \
        }                                                                      \
    } while (0)
#define CHECK_EQ_INT(a, b)                                                     \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_) iris_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_); \
    } while (0)
#define CHECK_STR(a, b)                                                        \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        if (!a_ || !b_ || strcmp(a_, b_))                                      \
            iris_test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
    } while (0)
#define CHECK_CONTAINS(hay, needle)                                            \
    do {                                                                       \
        const char *h_ = (hay), *n_ = (needle);                                \
        if (!h_ || !strstr(h_, n_))                                            \
            iris_test_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_); \
    } while (0)

#endif
