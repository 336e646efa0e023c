/* test_video_pool.c: a clip's preparation beside other users of the worker pool (base/pool.h).
 *
 * iris_video_prepare (a file) and iris_video_prepare_frames (frames given decoded) resize the
 * sampled frames on a work queue of their own (base/workq.h), so another caller of the
 * process-wide pool (the CPU backend's ops, another request's preprocessing in `iris serve`)
 * never waits behind a round of resizes.  Shown without timing: this thread holds the pool in one
 * job while a prepare runs on another thread, and every sampled frame gets its final bytes before
 * the job ends; the job ends before the prepare returns (its content keys need the pool), and the
 * prepare's output is byte for byte the output of a prepare run alone.  The frames resized in
 * parallel are the bytes of one resize at a time (iris_image_resize_bicubic, frame by frame). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/pool.h"
#include "formats/image.h"
#include "formats/video.h"
#include "test.h"

#define CLIP "tests/fixtures/video/e_long.mkv"
#define HOLD_S 20.0 /* how long the job waits for the frames at most (a failure, not a timing) */

typedef struct held {
    iris_video_opts o;
    const uint8_t *frames;      /* frames given decoded (iris_video_prepare_frames), else CLIP */
    int64_t n_given;
    int w, h, n_sampled;        /* the frames sampled, as they must be */
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

static int prepare(held *h, iris_video_prep *out) {
    if (h->frames) return iris_video_prepare_frames(h->frames, h->n_given, h->w, h->h, 30.0, &h->o, out, &h->err);
    return iris_video_prepare(CLIP, NULL, 0, NULL, &h->o, out, &h->err);
}

static void *prepare_main(void *arg) {
    held *h = arg;
    h->rc = prepare(h, &h->out);
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

/* Frame f of a made clip: gradients shifted by f and a square moving with it (every frame differs). */
static uint8_t *make_frames(int64_t n, int w, int h) {
    uint8_t *rgb = malloc((size_t)n * w * h * 3);
    for (int64_t f = 0; rgb && f < n; f++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                uint8_t *p = rgb + (((size_t)f * h + y) * w + x) * 3;
                int in_square = x >= (f * 3) % (w - 20) && x < (f * 3) % (w - 20) + 20 && y >= (f * 2) % (h - 20) &&
                                y < (f * 2) % (h - 20) + 20;
                p[0] = in_square ? 250 : (uint8_t)(x * 255 / (w - 1) + 3 * f);
                p[1] = (uint8_t)(y * 255 / (h - 1) + 5 * f);
                p[2] = (uint8_t)((x + 2 * y + 7 * f) / 4);
            }
    return rgb;
}

/* Holds the pool in one job while h's prepare runs on another thread (see the top). */
static void check_beside_pool(held *h) {
    int rc = prepare(h, &h->alone);
    CHECKF(rc == 0, "%s", h->err.msg);
    if (rc) return;
    CHECK_EQ_INT(h->alone.n_sampled, h->n_sampled);
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
}

IRIS_TEST(video_prepare_beside_pool) {
    if (!iris_video_supported()) IRIS_TEST_SKIP("built without video support (VIDEO=0)");
    if (iris_pool_threads() < 2) IRIS_TEST_SKIP("a pool of one thread runs each job on its caller: nothing to hold");
    held *h = calloc(1, sizeof *h);
    REQUIRE(h);
    iris_video_opts_default(&h->o);
    h->o.fps = 1000; /* every frame sampled: 120 frames, rounds of resizes for any thread count here */
    h->n_sampled = 120;
    check_beside_pool(h);
    free(h);
}

IRIS_TEST(video_frames_beside_pool) {
    if (iris_pool_threads() < 2) IRIS_TEST_SKIP("a pool of one thread runs each job on its caller: nothing to hold");
    held *h = calloc(1, sizeof *h);
    REQUIRE(h);
    iris_video_opts_default(&h->o);
    h->o.fps = 1000; /* every frame given is sampled */
    h->n_given = h->n_sampled = 120, h->w = 250, h->h = 150;
    uint8_t *frames = make_frames(h->n_given, h->w, h->h);
    REQUIRE(frames);
    h->frames = frames;
    check_beside_pool(h);
    free(frames);
    free(h);
}

/* iris_video_prepare_frames' frames, resized in parallel, against each sampled frame resized
 * alone on this thread (and the last repeated to an even count), for every frame sampled (an odd
 * count: padded) and for the default sampling (2 a second: indices that skip). */
IRIS_TEST(video_frames_parallel_equal_serial) {
    const int64_t n = 121;
    const int w = 250, hgt = 150;
    uint8_t *frames = make_frames(n, w, hgt);
    REQUIRE(frames);
    const double fps_sampled[2] = {1000, 2};
    for (int c = 0; c < 2; c++) {
        iris_video_opts o;
        iris_video_opts_default(&o);
        o.fps = fps_sampled[c];
        iris_video_prep p;
        iris_err err = {0};
        int rc = iris_video_prepare_frames(frames, n, w, hgt, 30.0, &o, &p, &err);
        CHECKF(rc == 0, "%s", err.msg);
        if (rc) continue;
        CHECK_EQ_INT(p.n_sampled, c == 0 ? 121 : 8);
        CHECK_EQ_INT(p.n_frames, c == 0 ? 122 : 8);
        CHECK(p.width != w && p.height != hgt); /* a real resize */
        size_t frame = (size_t)p.width * p.height * 3;
        int same = 1;
        for (int j = 0; j < p.n_frames && same; j++) {
            int64_t src = p.indices[j < p.n_sampled ? j : p.n_sampled - 1];
            iris_image in = {.width = w, .height = hgt, .rgb = frames + (size_t)src * w * hgt * 3}, out = {0};
            same = iris_image_resize_bicubic(&in, p.width, p.height, &out, &err) == 0 &&
                   !memcmp(out.rgb, p.rgb + (size_t)j * frame, frame);
            if (!same) fprintf(stderr, "frame %d (source %lld) differs\n", j, (long long)src);
            iris_image_free(&out);
        }
        CHECK(same);
        iris_video_prep_free(&p);
    }
    free(frames);
}
