/* test_prompt.c: the whole prompt path (chat template, tiny tokenizer, image
 * preprocessing, pad expansion, positions) against the inputs transformers
 * built for the tiny fixtures (tests/fixtures/tiny/inputs, manifest.json),
 * its errors and image budget, and its recycled pixel-row arrays. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/config.h"
#include "formats/image.h"
#include "engine/prompt.h"
#include "formats/tokenizer.h"
#include "test.h"
#include "tiny_fixture.h"

/* tiny-gqa's config, preprocessor config and tokenizer: NULL, or the one that failed to load (why
 * in err). */
static const char *gqa_load(iris_config *cfg, iris_preprocessor_config *pc, iris_tok **tok, iris_err *err) {
    const char *dir = TINY_DIR "/tiny-gqa/model";
    if (iris_config_load(dir, cfg, err)) return "config";
    if (iris_preprocessor_config_load(dir, pc, err)) return "preprocessor config";
    if (iris_tok_load(dir, tok, err)) return "tokenizer";
    return NULL;
}
#define TINY_LOAD(cfg, pc, tok, err)                                                           \
    do {                                                                                       \
        const char *failed_ = gqa_load(cfg, pc, tok, err);                                    \
        CHECKF(!failed_, "tiny-gqa's %s: %s", failed_, (err)->msg);                            \
        REQUIRE(!failed_);                                                                     \
    } while (0)


IRIS_TEST(prompt_matches_transformers) {
    iris_err err = {0};
    iris_config cfg;
    iris_preprocessor_config pc;
    iris_tok *tok = NULL;
    TINY_LOAD(&cfg, &pc, &tok, &err);
    CHECK_EQ_INT(pc.min_pixels, 1024);
    json_error_t je;
    json_t *man = json_load_file(TINY_DIR "/manifest.json", 0, &je);
    REQUIRE(man);
    const char *sname;
    json_t *scen;
    json_object_foreach(json_object_get(man, "scenarios"), sname, scen) {
        json_t *imgs = json_object_get(scen, "images");
        const char *paths[8];
        char buf[8][256];
        int n = (int)json_array_size(imgs);
        REQUIRE(n <= 8);
        for (int i = 0; i < n; i++) {
            snprintf(buf[i], sizeof buf[i], "%s/images/%s", TINY_DIR, json_string_value(json_array_get(imgs, i)));
            paths[i] = buf[i];
        }
        iris_prompt_image ims[8] = {{0}};
        for (int i = 0; i < n; i++) ims[i].path = paths[i];
        iris_prompt_ctx ctx = {.tok = tok, .cfg = &cfg, .pc = &pc};
        iris_prompt p;
        int rc = iris_prompt_build(&ctx, json_object_get(scen, "messages"), ims, n, &p, NULL, &err);
        CHECKF(rc == 0, "%s: %s", sname, err.msg);
        if (rc) continue;
        CHECK_STR(p.text, json_string_value(json_object_get(scen, "text")));
        char rel[256];
        tiny_arr ids, grid, pos, pv;
        snprintf(rel, sizeof rel, "inputs/%s/input_ids.npy", sname);
        REQUIRE(tiny_load(rel, &ids) == 0);
        CHECK_EQ_INT(p.ids.n, ids.n);
        int same = p.ids.n == (size_t)ids.n;
        for (int64_t i = 0; same && i < ids.n; i++) same = p.ids.ids[i] == ids.i64[i];
        CHECKF(same, "%s: token ids differ from transformers'", sname);
        snprintf(rel, sizeof rel, "inputs/%s/position_ids.npy", sname);
        REQUIRE(tiny_load(rel, &pos) == 0);
        same = pos.n == 3 * (int64_t)p.ids.n;
        for (int64_t i = 0; same && i < pos.n; i++) same = p.pos[i] == pos.i64[i];
        CHECKF(same, "%s: positions differ", sname);
        snprintf(rel, sizeof rel, "inputs/%s/image_grid_thw.npy", sname);
        REQUIRE(tiny_load(rel, &grid) == 0);
        CHECK_EQ_INT(grid.n, 3 * p.n_images);
        for (int64_t i = 0; i < grid.n && i < 3 * p.n_images; i++) CHECK_EQ_INT(p.grid_thw[i], grid.i64[i]);
        if (n > 0) {
            snprintf(rel, sizeof rel, "inputs/%s/pixel_values.npy", sname);
            REQUIRE(tiny_load(rel, &pv) == 0);
            CHECK_EQ_INT(pv.shape[0], p.n_rows);
            if (pv.shape[0] == p.n_rows) {
                float d = 0;
                for (int64_t i = 0; i < pv.n; i++) d = fmaxf(d, fabsf(p.pixel_values[i] - pv.f32[i]));
                printf("  %s: %zu tokens, pixel_values max-abs %.3g\n", sname, p.ids.n, d);
                CHECKF(d == 0, "%s: pixel_values differ by %g", sname, d);
            }
            tiny_free(&pv);
        }
        tiny_free(&ids);
        tiny_free(&pos);
        tiny_free(&grid);
        iris_prompt_free(&p);
    }
    json_decref(man);
    iris_tok_free(tok);
}

IRIS_TEST(prompt_errors) {
    iris_err err = {0};
    iris_config cfg;
    iris_preprocessor_config pc;
    iris_tok *tok = NULL;
    TINY_LOAD(&cfg, &pc, &tok, &err);
    json_t *m = iris_prompt_one_turn(NULL, 1, "hi");
    iris_prompt_image bad[1] = {{.path = TINY_DIR "/tiny-gqa/model/config.json"}};   /* not an image */
    iris_prompt_ctx ctx = {.tok = tok, .cfg = &cfg, .pc = &pc};
    iris_prompt p;
    int which = 7;
    CHECK(iris_prompt_build(&ctx, m, bad, 1, &p, &which, &err) != 0);
    CHECK_CONTAINS(err.msg, "config.json");
    CHECK_EQ_INT(which, 0);
    CHECK(iris_prompt_build(&ctx, m, bad, 0, &p, &which, &err) == IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "1 image part");
    CHECK_EQ_INT(which, -1);
    json_decref(m);
    /* bytes that are not an image: named by their label, and which one failed */
    m = iris_prompt_one_turn(NULL, 2, "hi");
    iris_prompt_image two[2] = {{.path = TINY_DIR "/images/a.png"}, {.data = "Hello", .n = 5, .label = "image 2"}};
    CHECK(iris_prompt_build(&ctx, m, two, 2, &p, &which, &err) != 0);
    CHECK_CONTAINS(err.msg, "image 2");
    CHECK_EQ_INT(which, 1);
    two[1] = (iris_prompt_image){.path = "x.png", .data = "Hello", .n = 5};
    CHECK_EQ_INT(iris_prompt_build(&ctx, m, two, 2, &p, &which, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "exactly one");
    json_decref(m);
    iris_tok_free(tok);
}

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = len > 0 ? malloc((size_t)len) : NULL;
    *n = b ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

static int same_prompt(const iris_prompt *a, const iris_prompt *b) {
    int same = a->ids.n == b->ids.n && a->n_images == b->n_images && a->n_rows == b->n_rows &&
               a->rope_delta == b->rope_delta && !strcmp(a->text, b->text);
    same = same && !memcmp(a->ids.ids, b->ids.ids, sizeof *a->ids.ids * a->ids.n);
    same = same && !memcmp(a->pos, b->pos, sizeof *a->pos * 3 * a->ids.n);
    same = same && !memcmp(a->grid_thw, b->grid_thw, sizeof *a->grid_thw * 3 * (size_t)a->n_images);
    same = same && !memcmp(a->image_keys, b->image_keys, 32 * (size_t)a->n_images);
    /* 5 * 16 * 16 * 3 * 2: a's tiny patch rows */
    int dim = 3 * 2 * 16 * 16;
    same = same && !memcmp(a->pixel_values, b->pixel_values, sizeof(float) * (size_t)a->n_rows * dim);
    return same;
}

/* The one builder gives the same prompt whether the images come as files (the CLI), as bytes
 * (the server's image_url data) or already decoded. */
IRIS_TEST(prompt_files_bytes_decoded_agree) {
    iris_err err = {0};
    iris_config cfg;
    iris_preprocessor_config pc;
    iris_tok *tok = NULL;
    TINY_LOAD(&cfg, &pc, &tok, &err);
    REQUIRE(pc.patch_size == 16 && pc.temporal_patch_size == 2);
    iris_prompt_ctx ctx = {.tok = tok, .cfg = &cfg, .pc = &pc};
    const char *paths[2] = {TINY_DIR "/images/a.png", TINY_DIR "/images/b.png"};
    char *bytes[2];
    size_t n[2];
    iris_image dec[2];
    iris_prompt_image files[2] = {{0}}, mem[2] = {{0}}, decoded[2] = {{0}};
    for (int i = 0; i < 2; i++) {
        REQUIRE((bytes[i] = read_all(paths[i], &n[i])) != NULL);
        REQUIRE(iris_image_decode_file(paths[i], NULL, &dec[i], &err) == 0);
        files[i].path = paths[i];
        mem[i] = (iris_prompt_image){.data = bytes[i], .n = n[i], .label = i ? "image 2" : "image 1"};
        decoded[i].image = &dec[i];
    }
    json_t *m = iris_prompt_one_turn("Be brief.", 2, "Compare them.");
    iris_prompt a, b, c;
    REQUIRE(iris_prompt_build(&ctx, m, files, 2, &a, NULL, &err) == 0);
    REQUIRE(iris_prompt_build(&ctx, m, mem, 2, &b, NULL, &err) == 0);
    REQUIRE(iris_prompt_build(&ctx, m, decoded, 2, &c, NULL, &err) == 0);
    CHECK_EQ_INT(a.n_images, 2);
    CHECK(a.n_rows > 0 && a.image_keys != NULL);
    CHECKF(same_prompt(&a, &b), "files and bytes give different prompts (%zu / %zu tokens)", a.ids.n, b.ids.n);
    CHECKF(same_prompt(&a, &c), "files and decoded images give different prompts");
    /* a smaller max_pixels (what a memory plan admits) gives smaller grids, the same way for all */
    iris_preprocessor_config small = pc;
    small.max_pixels = small.min_pixels;
    ctx.pc = &small;
    iris_prompt d, f;
    REQUIRE(iris_prompt_build(&ctx, m, files, 2, &d, NULL, &err) == 0);
    REQUIRE(iris_prompt_build(&ctx, m, mem, 2, &f, NULL, &err) == 0);
    CHECK(d.n_rows < a.n_rows);
    CHECK(same_prompt(&d, &f));
    /* a decode bound refuses the image before decoding */
    ctx.max_decode_pixels = 4;
    int which = -1;
    iris_prompt g;
    CHECK(iris_prompt_build(&ctx, m, mem, 2, &g, &which, &err) != 0);
    CHECK_EQ_INT(which, 0);
    for (iris_prompt *p = &a; p; p = p == &a ? &b : p == &b ? &c : p == &c ? &d : p == &d ? &f : NULL)
        iris_prompt_free(p);
    for (int i = 0; i < 2; i++) free(bytes[i]), iris_image_free(&dec[i]);
    json_decref(m);
    iris_tok_free(tok);
}

/* The image budget in the builder's ctx: the resize bound lowers the preprocessor's, the decode
 * bound follows it (32x), and a request's images are added up from their headers. */
IRIS_TEST(prompt_image_budget) {
    iris_err err = {0};
    iris_config cfg;
    iris_preprocessor_config pc;
    iris_tok *tok = NULL;
    TINY_LOAD(&cfg, &pc, &tok, &err);
    iris_preprocessor_config big = pc;
    big.max_pixels = 16777216;
    iris_prompt_ctx ctx = {.tok = tok, .cfg = &cfg, .pc = &big};
    int64_t resize = 0, decode = 0;
    iris_prompt_image_bounds(&ctx, &resize, &decode);
    CHECK_EQ_INT(resize, 16777216);
    CHECK_EQ_INT(decode, 178956970); /* a context without a cap: Pillow's bound */
    ctx.max_image_pixels = 1048576;
    iris_prompt_image_bounds(&ctx, &resize, &decode);
    CHECK_EQ_INT(resize, 1048576);
    CHECK_EQ_INT(decode, 1048576LL * IRIS_PROMPT_DECODE_RATIO);
    ctx.max_decode_pixels = 5000;
    iris_prompt_image_bounds(&ctx, &resize, &decode);
    CHECK_EQ_INT(decode, 5000);

    size_t n = 0;
    char *png = read_all(TINY_DIR "/images/a.png", &n);
    REQUIRE(png);
    int w = 0, h = 0;
    REQUIRE(iris_image_probe_mem(png, n, "a.png", NULL, &w, &h, &err) == 0);
    json_t *m = iris_prompt_one_turn(NULL, 2, "hi");
    iris_prompt_image two[2] = {{.data = png, .n = n, .label = "image 1"}, {.data = png, .n = n, .label = "image 2"}};
    iris_prompt p;
    int which = -7;
    ctx = (iris_prompt_ctx){.tok = tok, .cfg = &cfg, .pc = &pc, .max_total_pixels = (int64_t)w * h * 2};
    CHECK_EQ_INT(iris_prompt_build(&ctx, m, two, 2, &p, &which, &err), 0);
    iris_prompt_free(&p);
    ctx.max_total_pixels = (int64_t)w * h * 2 - 1; /* one pixel short: the second image is refused */
    CHECK_EQ_INT(iris_prompt_build(&ctx, m, two, 2, &p, &which, &err), IRIS_ELIMIT);
    CHECK_EQ_INT(which, 1);
    CHECK_CONTAINS(err.msg, "image 2");
    ctx.max_total_pixels = 0;
    ctx.max_decode_pixels = (int64_t)w * h - 1; /* refused from the header, before decoding */
    CHECK_EQ_INT(iris_prompt_build(&ctx, m, two, 2, &p, &which, &err), IRIS_ELIMIT);
    CHECK_EQ_INT(which, 0);
    CHECK_CONTAINS(err.msg, "over the limit");
    json_decref(m);
    free(png);
    iris_tok_free(tok);
}

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

/* The builder's pixel rows come from arrays recycled between prompts (engine/prompt.c): an array
 * a freed prompt gave back is the next one's, and the rows written into it are the bytes a fresh
 * preprocessing gives (image.h: prepare + patch rows), whatever the image before it left there; an
 * image with more rows than the last one (the same size class) too, and the first image again. */
IRIS_TEST(image_pixel_rows_recycled) {
    iris_err err = {0};
    iris_config cfg;
    iris_preprocessor_config pc;
    iris_tok *tok = NULL;
    TINY_LOAD(&cfg, &pc, &tok, &err);
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

/* A fresh pixel array of 2 MiB or more starts on a 2 MiB boundary (whole transparent huge pages,
 * engine/prompt.c), fresh or recycled, and its rows are still a fresh preprocessing's. */
IRIS_TEST(image_pixel_rows_huge_aligned) {
    iris_err err = {0};
    iris_config cfg;
    iris_preprocessor_config pc;
    iris_tok *tok = NULL;
    TINY_LOAD(&cfg, &pc, &tok, &err);
    pc.max_pixels = 16777216;  /* 352x320 as it is: 22x20 patches, 2.7 MB of rows */
    json_t *msgs = iris_prompt_one_turn(NULL, 1, "Describe.");
    REQUIRE(msgs);
    iris_prompt_ctx ctx = {.tok = tok, .cfg = &cfg, .pc = &pc};
    iris_image im = noise(352, 320, 5);
    REQUIRE(im.rgb);
    for (int k = 0; k < 2; k++) {
        iris_prompt_image pim = {.image = &im};
        iris_prompt p;
        int rc = iris_prompt_build(&ctx, msgs, &pim, 1, &p, NULL, &err);
        CHECKF(rc == 0, "%s", err.msg);
        if (rc) break;
        size_t bytes = sizeof(float) * (size_t)p.n_rows * 1536;
        CHECKF(bytes >= ((size_t)2 << 20), "only %zu bytes of rows: the test needs a larger image", bytes);
        CHECKF((uintptr_t)p.pixel_values % ((uintptr_t)2 << 20) == 0, "round %d: rows at %p", k,
               (void *)p.pixel_values);
        size_t n = 0;
        float *want = fresh_rows(&im, &pc, &n);
        REQUIRE(want);
        CHECK(n * sizeof(float) == bytes && !memcmp(p.pixel_values, want, bytes));
        free(want);
        iris_prompt_free(&p);
    }
    iris_image_free(&im);
    json_decref(msgs);
    iris_tok_free(tok);
}
