/* bench_video.c: time to first token for a video question, iris's side of bench/video_ttft.py.
 *
 *   make build/bench/bench_video && build/bench/bench_video MODEL [WxH] [SECONDS] [SRC_FPS] [DEVICE]
 *   build/bench/bench_video --preprocess [WxH] [SECONDS] [SRC_FPS] [THREADS]
 *
 * Defaults: 1280x720, 30 s, 30 fps, cuda.  The clip is made in memory (a moving gradient and a
 * moving square: every frame differs) and given to the prompt builder as decoded frames, so no
 * libav is needed and decoding is counted by neither side (transformers gets the same frames).
 * Sampling and sizes are the model's video settings (2 frames a second, qwen-vl-utils' per-frame
 * cap).  Prints one JSON object: the grid, prompt tokens, preprocessing (sampling + resize +
 * patchify, on this thread), and the engine's time to first token (vision encoder over every
 * temporal patch, prefill, sampling), median of 5 after a warm-up, prefix cache off.
 * --preprocess: no model and no engine; the prompt builder's video work alone, as it does it
 * (Qwen3-VL's video settings, iris_video_opts_default): sampling and resize
 * (iris_video_prepare_frames), each temporal patch's content key and its pixel_values rows, on
 * the worker pool of THREADS threads (default: the machine's cores), median of 5 after a warm-up,
 * and a SHA-256 of all the rows and keys (equal between runs with different THREADS).
 * Figures are reported, never asserted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "engine/prompt.h"
#include "formats/video.h"
#include "pool.h"
#include "sha256.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct frames_job {
    uint8_t *rgb;
    int w, h;
} frames_job;

/* Frame f: R a horizontal gradient shifted by f, G vertical, B a diagonal, a bright square moving. */
static void make_frames_range(void *ctx, int64_t f0, int64_t f1) {
    const frames_job *j = ctx;
    uint8_t *rgb = j->rgb;
    int w = j->w, h = j->h;
    for (int64_t f = f0; f < f1; f++) {
        uint8_t *fr = rgb + (size_t)f * w * h * 3;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                uint8_t *p = fr + ((size_t)y * w + x) * 3;
                p[0] = (uint8_t)(x * 255 / (w - 1) + 3 * f);
                p[1] = (uint8_t)(y * 255 / (h - 1) + 5 * f);
                p[2] = (uint8_t)((x + 2 * y + 7 * f) / 4);
            }
        int sz = h / 6, y0 = (int)((f * 4) % (h - sz)), x0 = (int)((f * 7) % (w - sz));
        for (int y = y0; y < y0 + sz; y++) memset(fr + ((size_t)y * w + x0) * 3, 250, (size_t)sz * 3);
    }
}

static void make_frames(uint8_t *rgb, int64_t n, int w, int h) {
    frames_job j = {rgb, w, h};
    iris_pool_for(n, make_frames_range, &j);
}

/* The prompt builder's video work (engine/prompt.c's add_media) without a model: one JSON line. */
static int bench_preprocess(const uint8_t *rgb, int64_t n, int w, int h, double src_fps) {
    iris_video_opts o;
    iris_video_opts_default(&o);
    double pre[6], keys[6], rows[6];
    unsigned char digest[32] = {0};
    iris_video_prep p = {0};
    iris_err err = {0};
    for (int i = 0; i < 6; i++) {
        double a = now_s();
        if (iris_video_prepare_frames(rgb, n, w, h, src_fps, &o, &p, &err))
            return fprintf(stderr, "bench_video: %s\n", err.msg), 1;
        double b = now_s();
        unsigned char (*k)[32] = malloc(32 * (size_t)p.grid_t);
        for (int t = 0; k && t < p.grid_t; t++) iris_video_patch_key(&p, &o, t, k[t]);
        double c = now_s();
        int64_t per = (int64_t)p.grid_h * p.grid_w, dim = 3LL * o.temporal_patch_size * o.patch_size * o.patch_size;
        size_t n_px = (size_t)(per * p.grid_t * dim);
        float *px = malloc(n_px * sizeof(float));
        if (!k || !px) return fprintf(stderr, "bench_video: out of memory\n"), 1;
        for (int t = 0; t < p.grid_t; t++) iris_video_patch_rows(&p, &o, t, 0, per, px + (size_t)(t * per * dim));
        double d = now_s();
        pre[i] = (b - a) * 1e3, keys[i] = (c - b) * 1e3, rows[i] = (d - c) * 1e3;
        if (i == 0) iris_sha256_pieces(px, n_px * sizeof(float), k, 32 * (size_t)p.grid_t, digest);
        if (i < 5) iris_video_prep_free(&p);
        free(k), free(px);
    }
    qsort(pre + 1, 5, sizeof *pre, cmp_double);
    qsort(keys + 1, 5, sizeof *keys, cmp_double);
    qsort(rows + 1, 5, sizeof *rows, cmp_double);
    char hex[65];
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", digest[i]);
    printf("{\"clip\":{\"width\":%d,\"height\":%d,\"frames\":%lld,\"src_fps\":%g},\"threads\":%d,"
           "\"sampled\":%d,\"resized\":[%d,%d],\"temporal_patches\":%d,\"resize_ms\":%.1f,\"keys_ms\":%.1f,"
           "\"patchify_ms\":%.1f,\"preprocess_ms\":%.1f,\"sha256_rows_keys\":\"%s\"}\n",
           w, h, (long long)n, src_fps, iris_pool_threads(), p.n_sampled, p.width, p.height, p.grid_t, pre[3],
           keys[3], rows[3], pre[3] + keys[3] + rows[3], hex);
    iris_video_prep_free(&p);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_video MODEL [WxH] [SECONDS] [SRC_FPS] [DEVICE]\n"
                        "       bench_video --preprocess [WxH] [SECONDS] [SRC_FPS] [THREADS]\n");
        return 2;
    }
    int pre_only = strcmp(argv[1], "--preprocess") == 0;
    if (pre_only && argc > 5) iris_pool_set_threads(atoi(argv[5]));
    int w = 1280, h = 720;
    double seconds = argc > 3 ? atof(argv[3]) : 30, src_fps = argc > 4 ? atof(argv[4]) : 30;
    if (argc > 2 && sscanf(argv[2], "%dx%d", &w, &h) != 2) return fprintf(stderr, "bad WxH %s\n", argv[2]), 2;
    int64_t n = (int64_t)(seconds * src_fps);
    uint8_t *rgb = malloc((size_t)n * w * h * 3);
    if (!rgb || n < 2) return fprintf(stderr, "cannot make %lld frames of %dx%d\n", (long long)n, w, h), 1;
    double t0 = now_s();
    make_frames(rgb, n, w, h);
    fprintf(stderr, "bench_video: %lld frames of %dx%d made in %.1f s\n", (long long)n, w, h, now_s() - t0);
    if (pre_only) {
        int rc = bench_preprocess(rgb, n, w, h, src_fps);
        free(rgb);
        return rc;
    }
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = argv[1];
    o.device = argc > 5 ? argv[5] : "cuda";
    o.max_num_seqs = 1;
    o.prefix_caching = 0;
    iris_engine *e = NULL;
    iris_err err = {0};
    if (iris_engine_open(&o, &e, &err)) return fprintf(stderr, "bench_video: %s\n", err.msg), 1;
    json_t *msgs = iris_prompt_one_turn_av(NULL, 0, 1, "Describe what happens in this video, in a few words.");
    iris_prompt_video v = {.rgb = rgb, .n_frames = n, .width = w, .height = h, .src_fps = src_fps};
    double pre[6], ttft[6], vis[6];
    int rc = 0, n_tok = 0, items = 0, g[3] = {0, 0, 0};
    for (int i = 0; i < 6 && !rc; i++) { /* the first warms up */
        iris_prompt p;
        iris_prompt_ctx ctx;
        iris_engine_prompt_ctx(e, &ctx);
        double a = now_s();
        rc = iris_prompt_build_media(&ctx, msgs, NULL, 0, &v, 1, &p, NULL, &err);
        pre[i] = (now_s() - a) * 1e3;
        if (rc) break;
        n_tok = (int)p.ids.n, items = p.n_images;
        memcpy(g, p.grid_thw, sizeof g);
        iris_request_params rp;
        iris_request_params_default(e, &rp);
        rp.prompt = &p;
        rp.sampling.max_tokens = 1;
        rp.sampling.do_sample = 0;
        iris_engine_stats s0, s1;
        iris_engine_get_stats(e, &s0);
        iris_request *r = NULL;
        rc = iris_engine_submit(e, &rp, &r, &err);
        iris_prompt_free(&p);
        iris_event ev;
        while (!rc && iris_request_next(r, &ev, -1) == IRIS_OK && ev.kind != IRIS_EVENT_DONE) {}
        if (!rc && ev.finish_reason == IRIS_FINISH_REASON_ERROR) err = ev.err, rc = IRIS_EINVAL;
        iris_engine_get_stats(e, &s1);
        ttft[i] = rc ? 0 : ev.usage.ttft_s * 1e3, vis[i] = (s1.vision_s - s0.vision_s) * 1e3;
        iris_request_free(r);
    }
    if (rc) fprintf(stderr, "bench_video: %s\n", err.msg);
    else {
        qsort(pre + 1, 5, sizeof *pre, cmp_double);
        qsort(ttft + 1, 5, sizeof *ttft, cmp_double);
        qsort(vis + 1, 5, sizeof *vis, cmp_double);
        printf("{\"clip\":{\"width\":%d,\"height\":%d,\"seconds\":%g,\"src_fps\":%g,\"frames\":%lld},"
               "\"temporal_patches\":%d,\"grid_hw\":[%d,%d],\"prompt_tokens\":%d,\"preprocess_ms\":%.2f,"
               "\"vision_ms\":%.2f,\"ttft_ms\":%.2f,\"ttft_ms_min\":%.2f,\"ttft_with_preprocess_ms\":%.2f,"
               "\"note\":\"decoded frames in memory (no decoding on either side); ttft: engine submit to first "
               "token (vision encoder on every temporal patch, prefill, sampling), median of 5, prefix cache off\"}\n",
               w, h, seconds, src_fps, (long long)n, items, g[1], g[2], n_tok, pre[3], vis[3], ttft[3], ttft[1],
               pre[3] + ttft[3]);
    }
    json_decref(msgs);
    iris_engine_close(e);
    free(rgb);
    return rc ? 1 : 0;
}
