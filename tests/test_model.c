/* test_model.c: parity of the model code with transformers 5.17 on the tiny
 * fixtures of tools/make_tiny_models.py (3 checkpoints x 4 conversations).
 *
 * Every comparison reports max-abs and relative error (STYLE.md) and, on
 * failure, the first diverging stage: the vision residual stream block by
 * block, then the decoder's hidden states layer by layer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/config.h"
#include "formats/safetensors.h"
#include "model/vision.h"
#include "test.h"
#include "tiny_fixture.h"

#define TOL 1e-3f

static const char *models[] = {"tiny-gqa", "tiny-mqa", "tiny-fp8"};
static const char *scenarios[] = {"text", "image", "two_images", "multi_turn"};

/* max |a - b| over n values, and the max |b| for a relative figure. */
static float max_abs_diff(const float *a, const float *b, int64_t n, float *ref_max, int64_t *at) {
    float d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        float e = fabsf(a[i] - b[i]);
        if (!(e <= d)) {   /* NaN counts as a failure */
            d = isnan(e) ? INFINITY : e;
            if (at) *at = i;
        }
        r = fabsf(b[i]) > r ? fabsf(b[i]) : r;
    }
    if (ref_max) *ref_max = r;
    return d;
}

/* Compares one tensor; prints a one-line report. Returns 1 when within TOL. */
static int check_close(const char *what, const float *got, const float *ref, int64_t n) {
    float rmax;
    int64_t at = 0;
    float d = max_abs_diff(got, ref, n, &rmax, &at);
    int ok = d <= TOL;
    printf("    %-40s max-abs %.3g (rel %.3g)%s", what, d, rmax > 0 ? d / rmax : 0, ok ? "" : "  <-- FAIL");
    if (!ok) printf(" at flat index %lld: %g vs %g", (long long)at, got[at], ref[at]);
    printf("\n");
    return ok;
}

static int load_grid(const char *scen, int *grid, int *n_images) {
    char p[256];
    tiny_arr g;
    snprintf(p, sizeof p, "inputs/%s/image_grid_thw.npy", scen);
    if (tiny_load(p, &g)) return -1;
    *n_images = (int)(g.n / 3);
    for (int64_t i = 0; i < g.n && i < 24; i++) grid[i] = (int)g.i64[i];
    tiny_free(&g);
    return 0;
}

IRIS_TEST(model_vision_parity) {
    for (int mi = 0; mi < 3; mi++) {
        char dir[256];
        snprintf(dir, sizeof dir, "%s/%s/model", TINY_DIR, models[mi]);
        iris_config cfg;
        iris_err err = {0};
        REQUIRE(iris_config_load(dir, &cfg, &err) == 0);
        iris_st *st = NULL;
        REQUIRE(iris_st_open(dir, &st, &err) == 0);
        iris_vision vis;
        CHECKF(iris_vision_load(st, &cfg.vision_config, &vis, &err) == 0, "%s: %s", models[mi], err.msg);
        if (err.code) {
            iris_st_close(st);
            continue;
        }
        for (int si = 1; si < 4; si++) {
            char p[256];
            int grid[24], n_img;
            tiny_arr pv, emb, ds, blocks;
            REQUIRE(load_grid(scenarios[si], grid, &n_img) == 0);
            snprintf(p, sizeof p, "inputs/%s/pixel_values.npy", scenarios[si]);
            REQUIRE(tiny_load(p, &pv) == 0 && pv.f32);
            snprintf(p, sizeof p, "%s/%s/image_embeds.npy", models[mi], scenarios[si]);
            REQUIRE(tiny_load(p, &emb) == 0);
            snprintf(p, sizeof p, "%s/%s/deepstack.npy", models[mi], scenarios[si]);
            REQUIRE(tiny_load(p, &ds) == 0);
            snprintf(p, sizeof p, "%s/%s/vision_blocks.npy", models[mi], scenarios[si]);
            REQUIRE(tiny_load(p, &blocks) == 0);
            int64_t N = pv.shape[0];
            int depth = cfg.vision_config.depth, H = cfg.vision_config.hidden_size;
            REQUIRE(blocks.n == (int64_t)(depth + 1) * N * H);
            float *trace = malloc(sizeof(float) * (size_t)blocks.n);
            iris_vision_out out;
            printf("  %s / %s: %lld patches, %d image(s)\n", models[mi], scenarios[si], (long long)N, n_img);
            int rc = iris_vision_encode(&vis, pv.f32, N, grid, n_img, &out, trace, &err);
            CHECKF(rc == 0, "%s/%s: %s", models[mi], scenarios[si], err.msg);
            if (rc == 0) {
                /* the first diverging stage, block by block */
                for (int b = 0; b <= depth; b++) {
                    char what[64];
                    snprintf(what, sizeof what, b ? "vision block %d output" : "patch + position embedding", b - 1);
                    if (!check_close(what, trace + (int64_t)b * N * H, blocks.f32 + (int64_t)b * N * H, N * H)) {
                        iris_test_fail(__FILE__, __LINE__, "%s/%s: vision diverges at %s", models[mi], scenarios[si],
                                       what);
                        break;
                    }
                }
                CHECK_EQ_INT(out.n_tokens * out.out_hidden, emb.n);
                CHECK_EQ_INT((int64_t)out.n_deepstack * out.n_tokens * out.out_hidden, ds.n);
                if (out.n_tokens * out.out_hidden == emb.n)
                    CHECKF(check_close("image embeds", out.embeds, emb.f32, emb.n), "%s/%s: image embeds",
                           models[mi], scenarios[si]);
                if ((int64_t)out.n_deepstack * out.n_tokens * out.out_hidden == ds.n)
                    CHECKF(check_close("deepstack features", out.deepstack, ds.f32, ds.n), "%s/%s: deepstack",
                           models[mi], scenarios[si]);
                iris_vision_out_free(&out);
            }
            free(trace);
            tiny_free(&pv);
            tiny_free(&emb);
            tiny_free(&ds);
            tiny_free(&blocks);
        }
        iris_vision_free(&vis);
        iris_st_close(st);
    }
}

IRIS_TEST(model_vision_bad_checkpoint) {
    /* a config that does not match the tensors: a clear error naming the tensor */
    char dir[256];
    snprintf(dir, sizeof dir, "%s/tiny-gqa/model", TINY_DIR);
    iris_config cfg;
    iris_err err = {0};
    REQUIRE(iris_config_load(dir, &cfg, &err) == 0);
    iris_st *st = NULL;
    REQUIRE(iris_st_open(dir, &st, &err) == 0);
    iris_vision vis;
    iris_vision_config c = cfg.vision_config;
    c.intermediate_size += 1;
    CHECK(iris_vision_load(st, &c, &vis, &err) == IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "model.visual.blocks.0.mlp.linear_fc1.weight");
    c = cfg.vision_config;
    c.depth += 1;
    CHECK(iris_vision_load(st, &c, &vis, &err) == IRIS_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "model.visual.blocks.3.norm1.weight");
    iris_st_close(st);
}
