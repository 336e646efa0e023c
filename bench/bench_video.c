/* bench_video.c: time to first token for a video question, iris's side of bench/video_ttft.py.
 *
 *   make build/bench/bench_video && build/bench/bench_video MODEL [WxH] [SECONDS] [SRC_FPS] [DEVICE]
 *
 * Defaults: 1280x720, 30 s, 30 fps, cuda.  The clip is made in memory (a moving gradient and a
 * moving square: every frame differs) and given to the prompt builder as decoded frames, so no
 * libav is needed and decoding is counted by neither side (transformers gets the same frames).
 * Sampling and sizes are the model's video settings (2 frames a second, qwen-vl-utils' per-frame
 * cap).  Prints one JSON object: the grid, prompt tokens, preprocessing (sampling + resize +
 * patchify, on this thread), and the engine's time to first token (vision encoder over every
 * temporal patch, prefill, sampling), median of 5 after a warm-up, prefix cache off.
 * Figures are reported, never asserted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "engine/prompt.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Frame f: R a horizontal gradient shifted by f, G vertical, B a diagonal, a bright square moving. */
static void make_frames(uint8_t *rgb, int64_t n, int w, int h) {
    for (int64_t f = 0; f < n; f++) {
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

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_video MODEL [WxH] [SECONDS] [SRC_FPS] [DEVICE]\n");
        return 2;
    }
    int w = 1280, h = 720;
    double seconds = argc > 3 ? atof(argv[3]) : 30, src_fps = argc > 4 ? atof(argv[4]) : 30;
    if (argc > 2 && sscanf(argv[2], "%dx%d", &w, &h) != 2) return fprintf(stderr, "bad WxH %s\n", argv[2]), 2;
    int64_t n = (int64_t)(seconds * src_fps);
    uint8_t *rgb = malloc((size_t)n * w * h * 3);
    if (!rgb || n < 2) return fprintf(stderr, "cannot make %lld frames of %dx%d\n", (long long)n, w, h), 1;
    double t0 = now_s();
    make_frames(rgb, n, w, h);
    fprintf(stderr, "bench_video: %lld frames of %dx%d made in %.1f s\n", (long long)n, w, h, now_s() - t0);
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
