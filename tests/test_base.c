/* test_base.c: errors, logging and the worker pool. */
#include "test.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "pool.h"

IRIS_TEST(err_set_and_prefix) {
    iris_err err = {0};
    CHECK_EQ_INT(iris_err_set(&err, IRIS_EFORMAT, "tensor \"%s\": bad", "x"), IRIS_EFORMAT);
    CHECK_STR(err.msg, "tensor \"x\": bad");
    iris_err_prefix(&err, "file %s", "a.safetensors");
    CHECK_STR(err.msg, "file a.safetensors: tensor \"x\": bad");
    CHECK_EQ_INT(err.code, IRIS_EFORMAT);
    CHECK_EQ_INT(iris_err_set(NULL, IRIS_EIO, "dropped"), IRIS_EIO);
}

typedef struct threads_asked {
    pthread_t th;
    int started, answer, answered; /* answered: atomic */
} threads_asked;

static void *ask_threads(void *arg) {
    threads_asked *a = arg;
    a->answer = iris_pool_threads();
    __atomic_store_n(&a->answered, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Range 0 of the job (this thread) asks another thread for iris_pool_threads() and holds the pool
 * until it has the answer (20 s at most: a failure, not a timing). */
static void hold_until_answered(void *ctx, int64_t i0, int64_t i1) {
    threads_asked *a = ctx;
    if (i0 != 0) return;
    a->started = pthread_create(&a->th, NULL, ask_threads, a) == 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (t = t0; a->started && !__atomic_load_n(&a->answered, __ATOMIC_ACQUIRE) && t.tv_sec - t0.tv_sec < 20;
         clock_gettime(CLOCK_MONOTONIC, &t))
        usleep(200);
}

/* A caller sizing its own threads by the pool (video_decode.c's resizes) is not held up by
 * another caller's job. */
IRIS_TEST(pool_threads_beside_a_job) {
    int n = iris_pool_threads();
    CHECK(n >= 1 && n <= IRIS_POOL_MAX_THREADS);
    if (n < 2) IRIS_TEST_SKIP("a pool of one thread runs each job on its caller: nothing to hold");
    threads_asked a = {0};
    iris_pool_for(n, hold_until_answered, &a);
    int answered_in_job = __atomic_load_n(&a.answered, __ATOMIC_ACQUIRE);
    if (a.started) pthread_join(a.th, NULL);
    CHECK(a.started);
    CHECKF(answered_in_job, "iris_pool_threads() waited for another caller's job");
    CHECK_EQ_INT(a.answer, n);
}
