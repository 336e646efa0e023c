/* test_video_pool.c: a clip's preparation beside other users of the worker pool (base/pool.h).
 *
 * iris_video_prepare resizes the sampled frames on its own threads (video_decode.c), so another
 * caller of the process-wide pool (the CPU backend's ops, another request's preprocessing in
 * `iris serve`) never waits behind a round of resizes.  Shown without timing: this thread holds
 * the pool in one job while a prepare runs on another thread, and every sampled frame gets its
 * final bytes before the job ends; the job ends before the prepare returns (its content keys need
 * the pool), and the prepare's output is byte for byte the output of a prepare run alone. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/pool.h"
#include "formats/video.h"
#include "test.h"

#define CLIP "tests/fixtures/video/e_long.mkv"
#define HOLD_S 20.0 /* how long the job waits for the frames at most (a failure, not a timing) */

typedef struct held {
    iris_video_opts o;
    iris_video_prep alone, out; /* out: written by the prepare's threads while the job polls it */
    iris_err err;
    pthread_t th;
    int started, rc, done;       /* done: the prepare returned (atomic) */
    int frames_in, done_in_job;  /* what the job saw before it let the pool go */
} held;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *prepare_main(void *arg) {
    held *h = arg;
    h->rc = iris_video_prepare(CLIP, NULL, 0, NULL, &h->o, &h->out, &h->err);
    __atomic_store_n(&h->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* The pool job.  Its first range runs on this thread: it starts the prepare (so the pool is held
 * from before the prepare's first frame) and holds the pool until the sampled frames all have the
 * bytes of the prepare run alone (or the prepare returned, or HOLD_S went by). */
static void hold_pool(void *ctx, int64_t i0, int64_t i1) {
    held *h = ctx;
    if (i0 != 0) return;
    h->started = pthread_create(&h->th, NULL, prepare_main, h) == 0;
    size_t bytes = (size_t)h->alone.n_sampled * h->alone.width * h->alone.height * 3;
    for (double t0 = now_s(); h->started && now_s() - t0 < HOLD_S; usleep(500)) {
        if (__atomic_load_n(&h->done, __ATOMIC_ACQUIRE)) break;
        const uint8_t *rgb = __atomic_load_n(&h->out.rgb, __ATOMIC_ACQUIRE);
        if (rgb && !memcmp(rgb, h->alone.rgb, bytes)) {
            h->frames_in = 1;
            break;
        }
    }
    h->done_in_job = __atomic_load_n(&h->done, __ATOMIC_ACQUIRE);
}

IRIS_TEST(video_prepare_beside_pool) {
    if (!iris_video_supported()) IRIS_TEST_SKIP("built without video support (VIDEO=0)");
    if (iris_pool_threads() < 2) IRIS_TEST_SKIP("a pool of one thread runs each job on its caller: nothing to hold");
    held *h = calloc(1, sizeof *h);
    REQUIRE(h);
    iris_video_opts_default(&h->o);
    h->o.fps = 1000; /* every frame sampled: 120 frames, rounds of resizes for any thread count here */
    int rc = iris_video_prepare(CLIP, NULL, 0, NULL, &h->o, &h->alone, &h->err);
    CHECKF(rc == 0, "%s", h->err.msg);
    if (rc) {
        free(h);
        return;
    }
    CHECK_EQ_INT(h->alone.n_sampled, 120);
    iris_pool_for(iris_pool_threads(), hold_pool, h);
    if (h->started) pthread_join(h->th, NULL);
    CHECK(h->started);
    CHECKF(h->frames_in, "the sampled frames were not all resized while another caller held the pool");
    CHECKF(!h->done_in_job, "the prepare returned while another caller held the pool (its keys need the pool)");
    CHECKF(h->rc == 0, "%s", h->err.msg);
    if (h->rc == 0) {
        const iris_video_prep *a = &h->alone, *b = &h->out;
        int same = a->n_frames == b->n_frames && a->width == b->width && a->height == b->height &&
                   a->grid_t == b->grid_t;
        CHECK(same);
        CHECK(same && !memcmp(a->rgb, b->rgb, (size_t)a->n_frames * a->width * a->height * 3));
        CHECK(same && a->keys && b->keys && !memcmp(a->keys, b->keys, 32 * (size_t)a->grid_t));
    }
    iris_video_prep_free(&h->alone);
    iris_video_prep_free(&h->out);
    free(h);
}
