/* test_vision_batch.c: several images of different sizes in one encoder pass
 * (iris_vision_encode_each, the engine's step), on the CPU and the tiny fixtures: the image of
 * the "image" conversation and the two of "two_images" (three grids) go through together, each
 * into its own output, and each image's rows are what encoding it alone gives (the attention
 * stays within each image; the GEMMs over more rows may round otherwise: reported, and held to
 * the parity tolerance) and within the parity tolerance of transformers' rows for it.  On the CPU
 * the encoder reads pixel rows that follow each other in memory in place, else copies them: both
 * give the same bits, at any alignment, and leave the rows as they were. */
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

static float max_diff(const float *a, const float *b, int64_t n) {
    float d = 0;
    for (int64_t i = 0; i < n; i++) {
        float e = fabsf(a[i] - b[i]);
        if (!(e <= d)) d = isnan(e) ? INFINITY : e;
    }
    return d;
}

typedef struct scen {
    tiny_arr pv, emb, ds;
    int grid[24], n_img;
} scen;

static int load_scen(const char *model, const char *name, scen *s) {
    char p[256];
    tiny_arr g;
    memset(s, 0, sizeof *s);
    snprintf(p, sizeof p, "inputs/%s/image_grid_thw.npy", name);
    if (tiny_load(p, &g)) return -1;
    s->n_img = (int)(g.n / 3);
    for (int64_t i = 0; i < g.n && i < 24; i++) s->grid[i] = (int)g.i64[i];
    tiny_free(&g);
    snprintf(p, sizeof p, "inputs/%s/pixel_values.npy", name);
    if (tiny_load(p, &s->pv)) return -1;
    snprintf(p, sizeof p, "%s/%s/image_embeds.npy", model, name);
    if (tiny_load(p, &s->emb)) return -1;
    snprintf(p, sizeof p, "%s/%s/deepstack.npy", model, name);
    return tiny_load(p, &s->ds);
}

static void free_scen(scen *s) {
    tiny_free(&s->pv), tiny_free(&s->emb), tiny_free(&s->ds);
}

IRIS_TEST(vision_encode_each_equals_alone) {
    static const char *models[] = {"tiny-gqa", "tiny-mqa", "tiny-fp8"};
    for (int mi = 0; mi < 3; mi++) {
        iris_config cfg;
        iris_err err = {0};
        iris_st *st = NULL;
        iris_vision vis;
        REQUIRE(tiny_vision_load(models[mi], &cfg, &st, &vis, &err) == 0);
        scen one, two;
        REQUIRE(load_scen(models[mi], "image", &one) == 0 && load_scen(models[mi], "two_images", &two) == 0);
        REQUIRE(one.n_img == 1 && two.n_img == 2);
        int pd = vis.patch_dim, m = cfg.vision_config.spatial_merge_size;
        /* the three images, their pixel rows, grids and transformers' rows */
        const float *px[3];
        int grid[9];
        const float *ref_emb[3], *ref_ds[3];
        int64_t ref_T[3], T_all[2] = {one.emb.n / one.emb.shape[1], two.emb.n / two.emb.shape[1]};
        memcpy(grid, one.grid, 3 * sizeof(int));
        memcpy(grid + 3, two.grid, 6 * sizeof(int));
        px[0] = one.pv.f32, ref_emb[0] = one.emb.f32, ref_ds[0] = one.ds.f32, ref_T[0] = T_all[0];
        int64_t rows1 = (int64_t)two.grid[0] * two.grid[1] * two.grid[2], t1 = rows1 / (m * m);
        px[1] = two.pv.f32, px[2] = two.pv.f32 + rows1 * pd;
        ref_emb[1] = two.emb.f32, ref_emb[2] = two.emb.f32 + t1 * one.emb.shape[1];
        ref_T[1] = t1, ref_T[2] = T_all[1] - t1;
        iris_vision_out outs[3];
        int rc = iris_vision_encode_each(&vis, NULL, NULL, 0, 0, px, NULL, grid, 3, outs, &err);
        CHECKF(rc == 0, "%s: %s", models[mi], err.msg);
        for (int k = 0; rc == 0 && k < 3; k++) {
            const int *g = grid + 3 * k;
            int64_t rows = (int64_t)g[0] * g[1] * g[2];
            iris_vision_out alone;
            REQUIRE(iris_vision_encode(&vis, px[k], rows, g, 1, &alone, NULL, &err) == 0);
            int64_t H = alone.out_hidden, T = alone.n_tokens, nds = alone.n_deepstack;
            CHECK_EQ_INT(outs[k].n_tokens, T);
            CHECK_EQ_INT(outs[k].n_tokens, ref_T[k]);
            CHECK_EQ_INT(outs[k].n_deepstack, nds);
            if (outs[k].n_tokens == T && T == ref_T[k]) {
                float de = max_diff(outs[k].embeds, alone.embeds, T * H);
                float dd = max_diff(outs[k].deepstack, alone.deepstack, nds * T * H);
                float he = max_diff(outs[k].embeds, ref_emb[k], T * H);
                printf("  %s image %d (grid %d x %d x %d): against alone max-abs %.3g (deepstack %.3g), against "
                       "transformers %.3g\n", models[mi], k, g[0], g[1], g[2], de, dd, he);
                CHECKF(de <= TOL && dd <= TOL, "%s image %d: %g / %g from encoding it alone", models[mi], k, de, dd);
                CHECKF(he <= TOL, "%s image %d: %g from transformers", models[mi], k, he);
                if (k == 0) /* one image: its DeepStack rows are transformers' as they are */
                    CHECKF(max_diff(outs[k].deepstack, ref_ds[0], nds * T * H) <= TOL, "%s: deepstack", models[mi]);
            }
            iris_vision_out_free(&alone);
            iris_vision_out_free(&outs[k]);
        }
        /* a bad grid fails the pass and leaves every output empty */
        int bad[9];
        memcpy(bad, grid, sizeof bad);
        bad[4] = m + 1;
        CHECK(iris_vision_encode_each(&vis, NULL, NULL, 0, 0, px, NULL, bad, 3, outs, &err) == IRIS_EINVAL);
        for (int k = 0; k < 3; k++) CHECK(outs[k].embeds == NULL && outs[k].deepstack == NULL);
        free_scen(&one), free_scen(&two);
        iris_vision_free(&vis);
        iris_st_close(st);
    }
}

static int same_out(const iris_vision_out *a, const iris_vision_out *b) {
    size_t n = (size_t)a->n_tokens * a->out_hidden;
    return a->n_tokens == b->n_tokens && a->n_deepstack == b->n_deepstack && a->embeds && b->embeds &&
           a->deepstack && b->deepstack && !memcmp(a->embeds, b->embeds, n * sizeof(float)) &&
           !memcmp(a->deepstack, b->deepstack, n * (size_t)a->n_deepstack * sizeof(float));
}

IRIS_TEST(vision_pixels_in_place_same_bits) {
    static const char *models[] = {"tiny-gqa", "tiny-fp8"};
    for (int mi = 0; mi < 2; mi++) {
        iris_config cfg;
        iris_err err = {0};
        iris_st *st = NULL;
        iris_vision vis;
        REQUIRE(tiny_vision_load(models[mi], &cfg, &st, &vis, &err) == 0);
        scen two;
        REQUIRE(load_scen(models[mi], "two_images", &two) == 0 && two.n_img == 2);
        int pd = vis.patch_dim;
        int64_t rows0 = (int64_t)two.grid[0] * two.grid[1] * two.grid[2], n = two.pv.n;
        REQUIRE(n == (rows0 + (int64_t)two.grid[3] * two.grid[4] * two.grid[5]) * pd);
        /* in place: both images' rows one after the other, as pixel_values holds them */
        const float *near[2] = {two.pv.f32, two.pv.f32 + rows0 * pd};
        /* copied: the same rows, the first 4 bytes off 16-byte alignment, a gap before the second */
        float *buf = malloc(sizeof(float) * (size_t)(n + 8)), *keep = malloc(sizeof(float) * (size_t)n);
        REQUIRE(buf && keep);
        memcpy(buf + 1, near[0], sizeof(float) * (size_t)(rows0 * pd));
        memcpy(buf + 5 + rows0 * pd, near[1], sizeof(float) * (size_t)(n - rows0 * pd));
        memcpy(keep, two.pv.f32, sizeof(float) * (size_t)n);
        const float *apart[2] = {buf + 1, buf + 5 + rows0 * pd};
        iris_vision_out a[2], c[2], one_a, one_c;
        CHECK(iris_vision_encode_each(&vis, NULL, NULL, 0, 0, near, NULL, two.grid, 2, a, &err) == 0);
        CHECK(iris_vision_encode_each(&vis, NULL, NULL, 0, 0, apart, NULL, two.grid, 2, c, &err) == 0);
        for (int k = 0; k < 2; k++) CHECKF(same_out(&a[k], &c[k]), "%s image %d: in place != copied", models[mi], k);
        /* one image, in place at 16-byte and at 4-byte alignment */
        CHECK(iris_vision_encode(&vis, near[0], rows0, two.grid, 1, &one_a, NULL, &err) == 0);
        CHECK(iris_vision_encode(&vis, apart[0], rows0, two.grid, 1, &one_c, NULL, &err) == 0);
        CHECKF(same_out(&one_a, &one_c), "%s: one image moved by 4 bytes", models[mi]);
        CHECK(!memcmp(keep, two.pv.f32, sizeof(float) * (size_t)n));
        CHECK(!memcmp(keep, buf + 1, sizeof(float) * (size_t)(rows0 * pd)));
        for (int k = 0; k < 2; k++) iris_vision_out_free(&a[k]), iris_vision_out_free(&c[k]);
        iris_vision_out_free(&one_a), iris_vision_out_free(&one_c);
        free(buf), free(keep);
        free_scen(&two);
        iris_vision_free(&vis);
        iris_st_close(st);
    }
}
