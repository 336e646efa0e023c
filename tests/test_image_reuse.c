/* test_image_reuse.c: the prompt builder's pixel rows come from arrays recycled between prompts
 * (engine/prompt.c): an array a freed prompt gave back is the next one's, and the rows written
 * into it are the bytes a fresh preprocessing gives (image.h: prepare + patch rows), whatever the
 * image before it left there; an image with more rows than the last one (the same size class)
 * too, and the first image again after them. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/prompt.h"
#include "formats/config.h"
#include "formats/image.h"
#include "formats/tokenizer.h"
#include "test.h"
#include "tiny_fixture.h"

/* A w x h image of noise from seed (owned: iris_image_free). */
static iris_image noise(int w, int h, uint32_t seed) {
    iris_image im = {.width = w, .height = h, .rgb = malloc((size_t)w * h * 3)};
    for (size_t i = 0; im.rgb && i < (size_t)w * h * 3; i++) {
        seed = seed * 1664525u + 1013904223u;
        im.rgb[i] = (uint8_t)(seed >> 24);
    }
    return im;
}

/* The rows of im as the image path alone makes them, into a new array of *n floats. */
static float *fresh_rows(const iris_image *im, const iris_preprocessor_config *pc, size_t *n) {
    iris_image_prep_opts po;
    iris_image_prep_opts_default(&po);
    po.min_pixels = pc->min_pixels, po.max_pixels = pc->max_pixels;
    po.patch_size = pc->patch_size, po.merge_size = pc->merge_size, po.temporal_patch_size = pc->temporal_patch_size;
    memcpy(po.image_mean, pc->image_mean, sizeof po.image_mean);
    memcpy(po.image_std, pc->image_std, sizeof po.image_std);
    iris_image_prep prep;
    iris_err err = {0};
    if (iris_image_prepare(im, &po, &prep, &err)) return NULL;
    int64_t rows = iris_image_prep_rows(&prep);
    *n = (size_t)rows * (size_t)iris_image_row_dim(&po);
    float *out = malloc(sizeof(float) * *n);
    if (out) iris_image_patch_rows(&prep, &po, 0, rows, out);
    iris_image_prep_free(&prep);
    return out;
}

IRIS_TEST(image_pixel_rows_recycled) {
    const char *dir = TINY_DIR "/tiny-gqa/model";
    iris_err err = {0};
    iris_config cfg;
    iris_preprocessor_config pc;
    iris_tok *tok = NULL;
    REQUIRE(iris_config_load(dir, &cfg, &err) == 0);
    REQUIRE(iris_preprocessor_config_load(dir, &pc, &err) == 0);
    REQUIRE(iris_tok_load(TINY_DIR "/tiny-gqa/model/tokenizer.json", &tok, &err) == 0);
    json_t *msgs = iris_prompt_one_turn(NULL, 1, "Describe.");
    REQUIRE(msgs);
    iris_prompt_ctx ctx = {.tok = tok, .cfg = &cfg, .pc = &pc};
    /* 8x6 patches, 6x8 others, then 10x6: 48, 48 and 60 rows, one power-of-two class of arrays */
    iris_image ims[4] = {noise(128, 96, 1), noise(96, 128, 2), noise(160, 96, 3)};
    ims[3] = ims[0];
    const int want_rows[4] = {48, 48, 60, 48};
    float *prev = NULL;
    for (int k = 0; k < 4; k++) {
        REQUIRE(ims[k].rgb);
        iris_prompt_image pim = {.image = &ims[k]};
        iris_prompt p;
        int rc = iris_prompt_build(&ctx, msgs, &pim, 1, &p, NULL, &err);
        CHECKF(rc == 0, "image %d: %s", k, err.msg);
        if (rc) continue;
        CHECK_EQ_INT(p.n_rows, want_rows[k]);
        if (prev) CHECKF(p.pixel_values == prev, "image %d: a new array, not the one the last prompt gave back", k);
        size_t n = 0;
        float *want = fresh_rows(&ims[k], &pc, &n);
        REQUIRE(want);
        CHECK_EQ_INT((int64_t)n, p.n_rows * 3 * 2 * 16 * 16);
        CHECKF(n == (size_t)p.n_rows * 1536 && !memcmp(p.pixel_values, want, sizeof(float) * n),
               "image %d: the recycled array's rows differ from a fresh preprocessing's", k);
        free(want);
        prev = p.pixel_values;
        iris_prompt_free(&p);
    }
    for (int k = 0; k < 3; k++) iris_image_free(&ims[k]);
    json_decref(msgs);
    iris_tok_free(tok);
}
