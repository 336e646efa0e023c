/* test_video_ref.c: videos against transformers 5.17 (tests/fixtures/video/ref,
 * from tools/ref_video.py ref on the GPU machine, given the same frames the
 * lossless clips hold):
 *  - Qwen3VLVideoProcessor: sampled indices, video_grid_thw and the float32
 *    bytes of pixel_values_videos (SHA-256: exact, as the image path) for six
 *    clips under seven settings (sizes, the per-frame cap, fps, min/max frames);
 *  - Qwen3VLProcessor + the tiny models (CPU, fp32): token ids with the
 *    timestamps, positions, pixel values, logits at every position within 1e-3
 *    and 12 greedy tokens, for a video, an image + a video and a rotated clip;
 *  - the prefix cache: a repeated video reuses its encoded frames. */
#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/prompt.h"
#include "formats/video.h"
#include "test.h"
#include "tiny_fixture.h"

#define VFIX "tests/fixtures/video/"
#define VREF "../video/ref/" /* relative to TINY_DIR, for tiny_load */
#define TOL 1e-3f

static json_t *vref(void) {
    static json_t *root;
    if (!root) root = json_load_file(VFIX "ref/video_ref.json", 0, NULL);
    return root;
}

/* The settings of tools/ref_video.py's SETTINGS[name] over the defaults. */
static void opts_of(json_t *st, iris_video_opts *o) {
    iris_video_opts_default(o);
    json_t *size = json_object_get(st, "size");
    if (size) {
        o->min_pixels = json_integer_value(json_object_get(size, "shortest_edge"));
        o->max_pixels = json_integer_value(json_object_get(size, "longest_edge"));
    } else {
        o->min_pixels = IRIS_VIDEO_CLASS_MIN_PIXELS, o->max_pixels = IRIS_VIDEO_CLASS_MAX_PIXELS;
    }
    o->cap_pixels_per_frame = json_is_true(json_object_get(st, "cap_pixels_per_frame"));
    if (json_object_get(st, "fps")) o->fps = json_number_value(json_object_get(st, "fps"));
    if (json_object_get(st, "max_frames")) o->max_frames = (int)json_integer_value(json_object_get(st, "max_frames"));
    if (json_object_get(st, "min_frames")) o->min_frames = (int)json_integer_value(json_object_get(st, "min_frames"));
}

/* pixel_values of every temporal patch, in order (malloc'd), and their count of floats. */
static float *all_rows(const iris_video_prep *p, const iris_video_opts *o, int64_t *n) {
    int64_t per = (int64_t)p->grid_h * p->grid_w, D = 3 * o->temporal_patch_size * o->patch_size * o->patch_size;
    float *v = malloc(sizeof(float) * (size_t)(per * D * p->grid_t));
    for (int k = 0; v && k < p->grid_t; k++) iris_video_patch_rows(p, o, k, 0, per, v + (size_t)k * per * D);
    *n = per * D * p->grid_t;
    return v;
}

IRIS_TEST(video_preprocess_matches_transformers) {
    if (!iris_video_supported()) IRIS_TEST_SKIP("built without video support (VIDEO=0)");
    json_t *r = vref();
    REQUIRE(r);
    json_t *settings = json_object_get(r, "settings");
    const char *key;
    json_t *c;
    int n_ok = 0, n_cases = 0;
    json_object_foreach(json_object_get(r, "cases"), key, c) {
        n_cases++;
        CHECKF(!json_object_get(c, "error"), "%s: transformers failed on it; see video_ref.json", key);
        if (json_object_get(c, "error")) continue;
        iris_video_opts o;
        opts_of(json_object_get(settings, json_string_value(json_object_get(c, "settings"))), &o);
        char path[256];
        snprintf(path, sizeof path, VFIX "%s", json_string_value(json_object_get(c, "clip")));
        iris_video_prep p;
        iris_err err = {0};
        int rc = iris_video_prepare(path, NULL, 0, NULL, &o, &p, &err);
        CHECKF(rc == 0, "%s: %s", key, err.msg);
        if (rc) continue;
        json_t *idx = json_object_get(c, "indices"), *g = json_object_get(c, "grid_thw");
        int same = (int)json_array_size(idx) == p.n_sampled;
        for (int i = 0; same && i < p.n_sampled; i++) same = json_integer_value(json_array_get(idx, (size_t)i)) == p.indices[i];
        CHECKF(same, "%s: %d sampled indices differ from transformers' %zu", key, p.n_sampled, json_array_size(idx));
        json_t *g0 = json_array_get(g, 0);
        int gs = json_integer_value(json_array_get(g0, 0)) == p.grid_t &&
                 json_integer_value(json_array_get(g0, 1)) == p.grid_h && json_integer_value(json_array_get(g0, 2)) == p.grid_w;
        CHECKF(gs, "%s: grid (%d, %d, %d), transformers' (%lld, %lld, %lld)", key, p.grid_t, p.grid_h, p.grid_w,
               json_integer_value(json_array_get(g0, 0)), json_integer_value(json_array_get(g0, 1)),
               json_integer_value(json_array_get(g0, 2)));
        int64_t nf = 0;
        float *v = all_rows(&p, &o, &nf);
        unsigned char md[32];
        unsigned int len = 0;
        char hex[65];
        EVP_Digest(v, (size_t)nf * sizeof(float), md, &len, EVP_sha256(), NULL);
        for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", md[i]);
        int exact = !strcmp(hex, json_string_value(json_object_get(c, "pixel_values_sha256")));
        CHECKF(exact, "%s: pixel_values differ from transformers' (%lld floats; grid %dx%dx%d)", key, (long long)nf,
               p.grid_t, p.grid_h, p.grid_w);
        n_ok += same && gs && exact;
        free(v);
        iris_video_prep_free(&p);
    }
    printf("  %d of %d (clip, settings) cases: indices, grid and pixel_values bytes equal\n", n_ok, n_cases);
    CHECK(n_cases >= 30);
}

typedef struct {
    int n;
    int32_t tok[64];
    int cached;
} gen_out;

static void greedy(iris_engine *e, iris_prompt *p, int max_tokens, gen_out *g, iris_err *err) {
    iris_request_params rp;
    iris_request_params_default(e, &rp);
    rp.prompt = p;
    rp.sampling.do_sample = 0, rp.sampling.temperature = 0;
    rp.sampling.max_tokens = max_tokens;
    rp.sampling.ignore_eos = 1;
    iris_request *r = NULL;
    memset(g, 0, sizeof *g);
    if (iris_engine_submit(e, &rp, &r, err)) {
        iris_prompt_free(p);
        iris_test_fail(__FILE__, __LINE__, "submit: %s", err->msg);
        return;
    }
    iris_prompt_free(p);
    iris_event ev;
    while (iris_request_next(r, &ev, 60000) == IRIS_OK) {
        if (ev.kind == IRIS_EVENT_DONE) {
            g->cached = ev.usage.cached_tokens;
            break;
        }
        if (g->n < 64) g->tok[g->n++] = ev.token;
    }
    iris_request_free(r);
}

static iris_engine *tiny_engine(const char *model) {
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/%s/model", TINY_DIR, model);
    o.model = dir;
    o.kv_blocks = 128;
    o.max_num_seqs = 2;
    iris_engine *e = NULL;
    iris_err err = {0};
    if (iris_engine_open(&o, &e, &err)) iris_test_fail(__FILE__, __LINE__, "engine open: %s", err.msg);
    return e;
}

/* The case's media as the prompt builder takes them (paths under the fixtures). */
static int media_of(json_t *msgs, iris_prompt_image *ims, char ipath[4][256], iris_prompt_video *vids,
                    char vpath[4][256], int *nv) {
    int ni = 0;
    *nv = 0;
    json_t *content = json_object_get(json_array_get(msgs, 0), "content");
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        const char *t = json_string_value(json_object_get(part, "type"));
        if (!strcmp(t, "image") && ni < 4) {
            snprintf(ipath[ni], 256, "%s/images/%s", TINY_DIR, json_string_value(json_object_get(part, "image")));
            ims[ni] = (iris_prompt_image){.path = ipath[ni]};
            ni++;
        } else if (!strcmp(t, "video") && *nv < 4) {
            snprintf(vpath[*nv], 256, VFIX "%s", json_string_value(json_object_get(part, "video")));
            vids[*nv] = (iris_prompt_video){.path = vpath[*nv]};
            ++*nv;
        }
    }
    return ni;
}

static float max_abs(const float *a, const float *b, int64_t n) {
    float d = 0;
    for (int64_t i = 0; i < n; i++) {
        float x = fabsf(a[i] - b[i]);
        if (!(x <= d)) d = isnan(x) ? INFINITY : x;
    }
    return d;
}

/* One tiny model and one case: ids, positions, pixels, logits, greedy tokens. */
static void check_case(iris_engine *e, const char *model, const char *cname, json_t *inp, json_t *res,
                       const iris_video_opts *vo) {
    iris_prompt_image ims[4];
    iris_prompt_video vids[4];
    char ip[4][256], vp[4][256];
    int nv = 0, ni = media_of(json_object_get(inp, "messages"), ims, ip, vids, vp, &nv);
    iris_prompt_ctx ctx;
    iris_engine_prompt_ctx(e, &ctx);
    ctx.video = vo;
    iris_prompt p;
    iris_err err = {0};
    int rc = iris_prompt_build_media(&ctx, json_object_get(inp, "messages"), ims, ni, vids, nv, &p, NULL, &err);
    CHECKF(rc == 0, "%s/%s: %s", model, cname, err.msg);
    if (rc) return;
    char rel[256];
    tiny_arr ids = {0}, pos = {0}, lg = {0};
    snprintf(rel, sizeof rel, VREF "model.%s.input_ids.npy", cname);
    REQUIRE(tiny_load(rel, &ids) == 0);
    int same = ids.n == (int64_t)p.ids.n;
    for (int64_t i = 0; same && i < ids.n; i++) same = p.ids.ids[i] == ids.i64[i];
    CHECKF(same, "%s: %zu token ids differ from transformers' %lld (text: %s)", cname, p.ids.n, (long long)ids.n,
           p.text);
    snprintf(rel, sizeof rel, VREF "%s.%s.position_ids.npy", model, cname);
    if (same && tiny_load(rel, &pos) == 0) {
        int sp = pos.n == 3 * ids.n;
        for (int64_t i = 0; sp && i < pos.n; i++) sp = p.pos[i] == pos.i64[i];
        CHECKF(sp, "%s/%s: positions differ from transformers'", model, cname);
    }
    /* the pixel values: images' rows then videos' (this case list puts images first), each kind's
       float32 bytes against transformers' pixel_values / pixel_values_videos (SHA-256) */
    int64_t img_rows = 0, D = 3 * 2 * 16 * 16;
    for (int i = 0; i < p.n_images; i++)
        if (i < ni) img_rows += (int64_t)p.grid_thw[3 * i] * p.grid_thw[3 * i + 1] * p.grid_thw[3 * i + 2];
    json_t *sums = json_object_get(vref(), "model_pixels_sha256");
    const char *kind[2] = {"pixel_values", "pixel_values_videos"};
    for (int k = 0; k < 2; k++) {
        snprintf(rel, sizeof rel, "model.%s.%s", cname, kind[k]);
        const char *want = json_string_value(json_object_get(sums, rel));
        if (!want) continue;
        const float *from = p.pixel_values + (k ? img_rows * D : 0);
        int64_t nfl = (k ? p.n_rows - img_rows : img_rows) * D;
        unsigned char md[32];
        unsigned int len = 0;
        char hex[65];
        EVP_Digest(from, (size_t)nfl * sizeof(float), md, &len, EVP_sha256(), NULL);
        for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", md[i]);
        CHECKF(!strcmp(hex, want), "%s: %s differ from transformers' (%lld floats)", cname, kind[k], (long long)nfl);
    }
    int V = iris_engine_text(e)->cfg.vocab_size, n = (int)p.ids.n;
    float *logits = malloc(sizeof(float) * (size_t)n * V);
    snprintf(rel, sizeof rel, VREF "%s.%s.logits.npy", model, cname);
    if (same && tiny_load(rel, &lg) == 0 && logits) {
        rc = iris_engine_prompt_logits(e, &p, n, NULL, NULL, logits, &err);
        CHECKF(rc == 0, "%s/%s logits: %s", model, cname, err.msg);
        float d = rc ? INFINITY : max_abs(logits, lg.f32, (int64_t)n * V);
        printf("  %s / %s: %d tokens (%d vision items), logits max-abs %.3g\n", model, cname, n, p.n_images, d);
        CHECKF(d <= TOL, "%s/%s: logits max-abs %g > %g", model, cname, d, TOL);
    }
    free(logits);
    gen_out g;
    greedy(e, &p, 12, &g, &err);
    json_t *want = json_object_get(res, "greedy");
    int gs = (int)json_array_size(want) == g.n;
    for (int i = 0; gs && i < g.n; i++) gs = json_integer_value(json_array_get(want, (size_t)i)) == g.tok[i];
    CHECKF(gs, "%s/%s: greedy tokens differ from transformers' (min margin %g)", model, cname,
           json_number_value(json_object_get(res, "greedy_min_margin")));
    tiny_free(&ids), tiny_free(&pos), tiny_free(&lg);
}

IRIS_TEST(video_model_matches_transformers) {
    if (!iris_video_supported()) IRIS_TEST_SKIP("built without video support (VIDEO=0)");
    json_t *r = vref();
    REQUIRE(r);
    iris_video_opts vo;
    opts_of(json_object_get(json_object_get(r, "settings"), json_string_value(json_object_get(r, "model_settings"))),
            &vo);
    json_t *inputs = json_object_get(r, "model_inputs"), *models = json_object_get(r, "models");
    const char *model;
    json_t *mres;
    int n = 0;
    json_object_foreach(models, model, mres) {
        if (!strncmp(model, "inputs_error", 12)) continue;
        iris_engine *e = tiny_engine(model);
        if (!e) continue;
        const char *cname;
        json_t *res;
        json_object_foreach(mres, cname, res) {
            CHECKF(!json_object_get(res, "error"), "%s/%s: transformers failed; see video_ref.json", model, cname);
            if (json_object_get(res, "error")) continue;
            check_case(e, model, cname, json_object_get(inputs, cname), res, &vo);
            n++;
        }
        iris_engine_close(e);
    }
    CHECK(n >= 6);
}

/* A repeated video: its prompt's blocks come from the prefix cache, the encoder skipped. */
IRIS_TEST(video_prefix_cache) {
    if (!iris_video_supported()) IRIS_TEST_SKIP("built without video support (VIDEO=0)");
    iris_engine *e = tiny_engine("tiny-gqa");
    REQUIRE(e);
    json_t *msgs = iris_prompt_one_turn_av(NULL, 0, 1, "What happens in this video?");
    iris_prompt_video v = {.path = VFIX "b_portrait.mkv"};
    iris_prompt_ctx ctx;
    iris_engine_prompt_ctx(e, &ctx);
    gen_out g1, g2;
    iris_prompt p;
    iris_err err = {0};
    REQUIRE(iris_prompt_build_media(&ctx, msgs, NULL, 0, &v, 1, &p, NULL, &err) == 0);
    int n = (int)p.ids.n;
    greedy(e, &p, 6, &g1, &err);
    REQUIRE(iris_prompt_build_media(&ctx, msgs, NULL, 0, &v, 1, &p, NULL, &err) == 0);
    greedy(e, &p, 6, &g2, &err);
    CHECKF(g2.cached >= n / 16 * 16 - 16 && g2.cached > 0, "the repeat reused %d of %d prompt tokens", g2.cached, n);
    CHECK(g1.n == g2.n && !memcmp(g1.tok, g2.tok, sizeof(int32_t) * (size_t)g1.n));
    json_decref(msgs);
    iris_engine_close(e);
}

/* A video over the context is refused with the frame count that would fit, and that count fits. */
IRIS_TEST(video_context_hint) {
    if (!iris_video_supported()) IRIS_TEST_SKIP("built without video support (VIDEO=0)");
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = TINY_DIR "/tiny-gqa/model";
    o.kv_blocks = 64;
    o.max_model_len = 256;
    iris_engine *e = NULL;
    iris_err err = {0};
    REQUIRE(iris_engine_open(&o, &e, &err) == 0);
    json_t *msgs = iris_prompt_one_turn_av(NULL, 0, 1, "What happens?");
    iris_prompt_video v = {.path = VFIX "e_long.mkv"}; /* 48 frames of 48x32, upscaled: 24 x 16 tokens */
    iris_prompt_ctx ctx;
    iris_engine_prompt_ctx(e, &ctx);
    iris_prompt p;
    REQUIRE(iris_prompt_build_media(&ctx, msgs, NULL, 0, &v, 1, &p, NULL, &err) == 0);
    CHECK(p.ids.n > 256);
    gen_out g;
    iris_request_params rp;
    iris_request_params_default(e, &rp);
    rp.prompt = &p;
    rp.sampling.max_tokens = 4;
    iris_request *r = NULL;
    CHECK(iris_engine_submit(e, &rp, &r, &err) != 0);
    iris_prompt_free(&p);
    CHECK_CONTAINS(err.msg, "frames would fit");
    const char *at = strstr(err.msg, "about ");
    at = at ? strstr(at + 6, "about ") : NULL;
    int frames = at ? atoi(at + 6) : 0;
    CHECKF(frames >= 2, "%s", err.msg);
    v.max_frames = frames;
    REQUIRE(iris_prompt_build_media(&ctx, msgs, NULL, 0, &v, 1, &p, NULL, &err) == 0);
    printf("  %zu tokens with %d frames\n", p.ids.n, frames);
    greedy(e, &p, 4, &g, &err);
    CHECKF(g.n == 4, "with %d frames: %s", frames, err.msg);
    json_decref(msgs);
    iris_engine_close(e);
}
