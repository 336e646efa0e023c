/* test_video_codecs.c: the containers and codecs beyond the lossless clips, and the
 * video budget of the memory plan.
 *
 * Codecs: WebM/VP9, MOV/H.264 and an animated GIF (tests/fixtures/video/make_codecs.sh,
 * Debian's ffmpeg CLI) of one pattern this file regenerates: every frame must come back
 * at its size and count, at 4 fps, and close to the generated pixels (the codecs are
 * lossy: VP9 and H.264 in 4:4:4, the GIF through a 256-colour palette), from a path and
 * from memory; and the whole clip must prepare (sample, resize, patch grid).
 *
 * The plan: the largest video admitted is --max-video-pixels (Qwen3-VL's 25,165,824
 * pixels over the frames, 12,288 tokens) unless the context needs it lower; the engine
 * resizes every video within it (iris_prompt_video_opts), `iris plan` prints it and
 * reports it in JSON.  (A prompt still over the context is refused with the frames that
 * would fit: test_video_ref.c video_context_hint.) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/planner.h"
#include "engine/prompt.h"
#include "formats/video.h"
#include "test.h"

#define VFIX "tests/fixtures/video/"
#define PW 48
#define PH 32
#define PT 8

static void pattern_px(int x, int y, int t, uint8_t px[3]) {
    int inside = x >= 4 * t && x < 4 * t + 8 && y >= 12 && y < 20;
    px[0] = (uint8_t)(16 + 4 * x + 4 * t);
    px[1] = (uint8_t)(16 + 6 * y + 2 * t);
    px[2] = (uint8_t)(inside ? 224 : 64);
}

/* Mean and largest absolute difference of frame t from the pattern. */
static void frame_error(const uint8_t *rgb, int t, double *mean, int *max) {
    long long sum = 0;
    *max = 0;
    for (int y = 0; y < PH; y++)
        for (int x = 0; x < PW; x++) {
            uint8_t want[3];
            pattern_px(x, y, t, want);
            for (int c = 0; c < 3; c++) {
                int d = abs((int)rgb[((size_t)y * PW + x) * 3 + c] - want[c]);
                sum += d;
                if (d > *max) *max = d;
            }
        }
    *mean = (double)sum / (PW * PH * 3);
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(len > 0 ? (size_t)len : 1);
    *n = b ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

IRIS_TEST(video_codecs) {
    if (!iris_video_supported()) IRIS_TEST_SKIP("built without video support (VIDEO=0)");
    /* mean / largest error allowed: measured 0.4-0.8 / 3-7 for VP9 and H.264, 2.5-2.8 / 12-18 for the GIF */
    static const struct {
        const char *file, *codec;
        double mean;
        int max;
    } clips[] = {{"g_vp9.webm", "vp9", 1.2, 12}, {"h_h264.mov", "h264", 1.2, 12}, {"i_anim.gif", "gif", 3.5, 24}};
    for (size_t c = 0; c < sizeof clips / sizeof clips[0]; c++) {
        char path[256];
        snprintf(path, sizeof path, VFIX "%s", clips[c].file);
        size_t nb = 0;
        uint8_t *bytes = slurp(path, &nb);
        CHECKF(bytes && nb > 100 && nb < 16384, "%s: %zu bytes", path, nb);
        if (!bytes) continue;
        CHECKF(iris_video_sniff(bytes, nb), "%s: not sniffed as a video", path);
        iris_video_opts o;
        iris_video_opts_default(&o);
        int64_t idx[PT];
        for (int i = 0; i < PT; i++) idx[i] = i;
        for (int from_mem = 0; from_mem < 2; from_mem++) {
            uint8_t *rgb = NULL;
            iris_video_info info;
            iris_err err = {0};
            int rc = from_mem ? iris_video_decode_frames(NULL, bytes, nb, clips[c].file, &o, idx, PT, &rgb, &info, &err)
                              : iris_video_decode_frames(path, NULL, 0, NULL, &o, idx, PT, &rgb, &info, &err);
            CHECKF(rc == 0, "%s (%s): %s", path, from_mem ? "memory" : "path", err.msg);
            if (rc) continue;
            CHECKF(info.width == PW && info.height == PH && info.n_frames == PT, "%s: %dx%d, %lld frames", path,
                   info.width, info.height, (long long)info.n_frames);
            CHECKF(info.fps > 3.999 && info.fps < 4.001, "%s: fps %g, want 4", path, info.fps);
            CHECKF(!strcmp(info.codec, clips[c].codec), "%s: codec %s, want %s", path, info.codec, clips[c].codec);
            for (int t = 0; t < PT; t++) {
                double mean;
                int max;
                frame_error(rgb + (size_t)t * PW * PH * 3, t, &mean, &max);
                CHECKF(mean <= clips[c].mean && max <= clips[c].max, "%s frame %d: error mean %.2f max %d (allowed "
                       "%.1f, %d)", path, t, mean, max, clips[c].mean, clips[c].max);
            }
            /* the square moves 4 pixels a frame: frames decoded out of order would miss by far more */
            double m0;
            int x0;
            frame_error(rgb + (size_t)1 * PW * PH * 3, 0, &m0, &x0);
            CHECKF(x0 > 100, "%s: frame 1 looks like frame 0 (max diff %d)", path, x0);
            free(rgb);
        }
        /* the whole clip prepared: 2 s at 2 fps -> 4 frames (min_frames), 2 temporal patches of 64x32 */
        iris_video_prep p;
        iris_err err = {0};
        int rc = iris_video_prepare(NULL, bytes, nb, clips[c].file, &o, &p, &err);
        CHECKF(rc == 0, "%s prepare: %s", path, err.msg);
        if (!rc) {
            CHECKF(p.n_sampled == 4 && p.grid_t == 2 && p.width == 64 && p.height == 32, "%s: %d sampled, grid_t %d, "
                   "%dx%d", path, p.n_sampled, p.grid_t, p.width, p.height);
            CHECKF(p.indices[0] == 0 && p.indices[3] == 7, "%s: indices %lld..%lld", path, (long long)p.indices[0],
                   (long long)p.indices[3]);
            iris_video_prep_free(&p);
        }
        free(bytes);
    }
}

/* Tiny's vision config (patch 16, merge 2, temporal 2): the video budget and what it admits. */
IRIS_TEST(video_plan_budget) {
    iris_vision_config v = {0};
    v.patch_size = 16, v.spatial_merge_size = 2, v.temporal_patch_size = 2;
    /* 25,165,824 / (32^2 * 2) */
    CHECK_EQ_INT(iris_plan_video_tokens(&v, IRIS_PLAN_DEFAULT_MAX_VIDEO_PIXELS), 12288);
    /* a 256K context admits the whole default; 4,096 leaves 3,072 tokens to the video */
    CHECK_EQ_INT(iris_plan_video_pixels(&v, 0, 262144), IRIS_PLAN_DEFAULT_MAX_VIDEO_PIXELS);
    CHECK_EQ_INT(iris_plan_video_pixels(&v, 0, 4096), 3072LL * 2048);
    CHECK_EQ_INT(iris_plan_video_tokens(&v, iris_plan_video_pixels(&v, 0, 4096)), 3072);
    CHECK_EQ_INT(iris_plan_video_pixels(&v, 1000000, 4096), 1000000);
    CHECK_EQ_INT(iris_plan_video_pixels(&v, 0, 256), 192LL * 2048); /* a short context keeps a quarter */
    CHECK_EQ_INT(iris_plan_video_pixels(&v, 0, 2), IRIS_PLAN_MIN_VIDEO_PIXELS);

    /* a video over the budget is resized down to it: 600 frames of 1280x720 at 30 fps, 20 s ->
       40 frames; the default budget gives each frame 629,145 pixels (720x832 = 599,040 after the
       32-multiples), the admitted 6,291,456 at most 157,286 (288x512 = 147,456) */
    iris_video_opts o;
    iris_video_opts_default(&o);
    int h = 0, w = 0;
    iris_err err = {0};
    REQUIRE(iris_video_smart_resize(40, 720, 1280, &o, &h, &w, &err) == 0);
    CHECKF((long long)h * w * 40 <= IRIS_PLAN_DEFAULT_MAX_VIDEO_PIXELS && (long long)h * w > 500000, "default: %dx%d", w, h);
    iris_prompt_ctx ctx = {0};
    iris_video_opts admitted = o;
    admitted.max_pixels = iris_plan_video_pixels(&v, o.max_pixels, 4096);
    ctx.video = &admitted;
    iris_video_opts eff;
    iris_prompt_video_opts(&ctx, NULL, &eff);
    REQUIRE(iris_video_smart_resize(40, 720, 1280, &eff, &h, &w, &err) == 0);
    long long tokens = (long long)h * w / 1024 * 20;
    CHECKF(tokens <= 3072 && tokens > 2000, "admitted: %dx%d, %lld tokens", w, h, tokens);
    /* --max-video-pixels lower than the admitted budget wins */
    ctx.max_video_pixels = 1000000;
    iris_prompt_video_opts(&ctx, NULL, &eff);
    CHECK_EQ_INT(eff.max_pixels, 1000000);
}

/* The engine resizes videos within what its context admits: tiny's 4,096 tokens leave 3,072. */
IRIS_TEST(video_engine_budget) {
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = "tests/fixtures/tiny/tiny-gqa/model";
    o.kv_blocks = 16;
    o.max_num_seqs = 1;
    iris_engine *e = NULL;
    iris_err err = {0};
    REQUIRE(iris_engine_open(&o, &e, &err) == 0);
    iris_prompt_ctx ctx;
    iris_engine_prompt_ctx(e, &ctx);
    REQUIRE(ctx.video);
    CHECK_EQ_INT(ctx.video->max_pixels, 3072LL * 2048);
    iris_engine_close(e);
    o.max_model_len = 256;
    REQUIRE(iris_engine_open(&o, &e, &err) == 0);
    iris_engine_prompt_ctx(e, &ctx);
    CHECK_EQ_INT(ctx.video->max_pixels, 192LL * 2048);
    iris_engine_close(e);
}

/* `iris plan` says what video it admits, in the table and in JSON; --help gives the sampling. */
IRIS_TEST(video_plan_cli) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    char cmd[1024], buf[16384];
    snprintf(cmd, sizeof cmd, "%s plan tests/fixtures/tiny/tiny-gqa/model --vram 8GiB 2>&1", bin);
    FILE *p = popen(cmd, "r");
    REQUIRE(p);
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    CHECK_EQ_INT(pclose(p), 0);
    /* tiny's 4,096-token context: 3,072 tokens of video */
    CHECK_CONTAINS(buf, "largest video: 6,291,456 pixels over its frames = 3,072 tokens (--max-video-pixels "
                        "25,165,824 lowered to leave 1,024 tokens of the context)");
    snprintf(cmd, sizeof cmd, "%s plan tests/fixtures/tiny/tiny-gqa/model --vram 8GiB --max-video-pixels 2000000 --plan-json 2>&1", bin);
    p = popen(cmd, "r");
    REQUIRE(p);
    n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    CHECK_EQ_INT(pclose(p), 0);
    json_t *j = json_loads(buf, 0, NULL);
    CHECKF(j != NULL, "not JSON: %.300s", buf);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "max_video_pixels")), 2000000);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "video_pixels")), 2000000);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "video_tokens")), 976);
    json_decref(j);
    snprintf(cmd, sizeof cmd, "%s plan tests/fixtures/tiny/tiny-gqa/model --max-video-pixels 100 2>&1", bin);
    p = popen(cmd, "r");
    REQUIRE(p);
    n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    CHECKF(pclose(p) != 0, "--max-video-pixels 100 accepted: %s", buf);
    CHECK_CONTAINS(buf, "--max-video-pixels");
    /* the sampling defaults, one line in the help of every command that takes videos */
    static const char *cmds[] = {"ask", "caption", "run", "serve"};
    for (int i = 0; i < 4; i++) {
        snprintf(cmd, sizeof cmd, "%s %s --help 2>&1", bin, cmds[i]);
        p = popen(cmd, "r");
        REQUIRE(p);
        n = fread(buf, 1, sizeof buf - 1, p);
        buf[n] = 0;
        CHECK_EQ_INT(pclose(p), 0);
        CHECK_CONTAINS(buf, IRIS_VIDEO_HELP_LINE);
    }
}
