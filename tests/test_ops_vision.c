/* test_ops_vision.c: the vision encoder on the CUDA backend as the engine runs it (part of
 * build/iris-test-gpu): several images in one pass with their rows left as bf16, the pixel rows
 * given as fp32 (converted on the way up) or already as bf16 in the backend's page-locked memory
 * (the engine converts them when a request is submitted): the same bits either way, image by
 * image, and the rows near transformers' (the DeepStack taps go down while the encoder runs on:
 * rows read before those copies end would be wrong).  A fork of the backend (the engine's vision
 * worker) encodes on another thread, beside work on the parent's stream, to the same bits. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_util.h"
#include "test.h"
#include "tiny_fixture.h"

#ifdef IRIS_CUDA
#include "backend/cuda/cuda_backend.h"

/* max |got - ref| over n bf16 values against fp32 ref, and max |ref| */
static void diff_bf16(const uint16_t *got, const float *ref, int64_t n, float *d, float *mx) {
    *d = 0, *mx = 0;
    for (int64_t i = 0; i < n; i++) {
        float e = fabsf(ops_bf16_val(got[i]) - ref[i]);
        if (!(e <= *d)) *d = isnan(e) ? INFINITY : e;
        if (fabsf(ref[i]) > *mx) *mx = fabsf(ref[i]);
    }
}

/* tiny-gqa's vision tower on b and transformers' two-image inputs: the grids, each image's pixel rows. */
typedef struct two_images {
    iris_config cfg;
    iris_st *st;
    iris_vision vis;
    tiny_arr g, pv;
    int grid[6];
    int64_t rows[2];
    const float *px[2];
} two_images;

static int two_images_load(iris_backend *b, two_images *t, iris_err *err) {
    memset(t, 0, sizeof *t);
    if (tiny_vision_load("tiny-gqa", &t->cfg, &t->st, &t->vis, err) || iris_vision_upload(&t->vis, b, err)) return -1;
    if (tiny_load("inputs/two_images/image_grid_thw.npy", &t->g) || t->g.n != 6 ||
        tiny_load("inputs/two_images/pixel_values.npy", &t->pv))
        return -1;
    for (int i = 0; i < 6; i++) t->grid[i] = (int)t->g.i64[i];
    for (int k = 0; k < 2; k++) t->rows[k] = (int64_t)t->grid[3 * k] * t->grid[3 * k + 1] * t->grid[3 * k + 2];
    t->px[0] = t->pv.f32, t->px[1] = t->pv.f32 + t->rows[0] * t->vis.patch_dim;
    return t->pv.n == (t->rows[0] + t->rows[1]) * t->vis.patch_dim ? 0 : -1;
}

static void two_images_free(two_images *t) {
    tiny_free(&t->g), tiny_free(&t->pv);
    iris_vision_free(&t->vis);
    iris_st_close(t->st);
}

IRIS_TEST(gpu_vision_pixels_bf16) {
    OPS_BACKENDS();
    iris_backend *b = ops_cuda;
    REQUIRE(b->host_alloc && b->host_free);
    iris_err err = {0};
    two_images t;
    REQUIRE(two_images_load(b, &t, &err) == 0);
    tiny_arr emb, ds, pv = t.pv;
    REQUIRE(tiny_load("tiny-gqa/two_images/image_embeds.npy", &emb) == 0);
    REQUIRE(tiny_load("tiny-gqa/two_images/deepstack.npy", &ds) == 0);
    const iris_vision vis = t.vis;
    const int *grid = t.grid, pd = vis.patch_dim, m = t.cfg.vision_config.spatial_merge_size;
    int64_t rows0 = t.rows[0], rows1 = t.rows[1];
    const float *const *px = t.px;
    /* the bf16 rows in page-locked memory, as the engine's submit makes them */
    uint16_t *h16 = b->host_alloc(b, sizeof(uint16_t) * (size_t)pv.n);
    REQUIRE(h16 != NULL);
    iris_backend_f32_to_bf16(h16, pv.f32, (size_t)pv.n, 0);
    const uint16_t *both[2] = {h16, h16 + rows0 * pd}, *first[2] = {h16, NULL};
    iris_vision_out a[2], c[2], f[2];
    size_t sb = iris_vision_scratch_bytes(&vis, b->act, rows0 + rows1);
    void *scratch = b->alloc(b, sb);
    REQUIRE(scratch != NULL);
    REQUIRE(iris_vision_encode_each(&vis, b, scratch, sb, 1, px, NULL, grid, 2, a, &err) == 0);
    REQUIRE(iris_vision_encode_each(&vis, b, scratch, sb, 1, px, both, grid, 2, c, &err) == 0);
    REQUIRE(iris_vision_encode_each(&vis, b, scratch, sb, 1, px, first, grid, 2, f, &err) == 0);
    int64_t H = emb.shape[1], T0 = rows0 / (m * m);
    for (int k = 0; k < 2; k++) {
        int64_t T = a[k].n_tokens, nds = a[k].n_deepstack;
        REQUIRE(a[k].embeds16 && c[k].embeds16 && f[k].embeds16 && a[k].out_hidden == H);
        CHECK_EQ_INT(c[k].n_tokens, T);
        size_t ne = (size_t)(T * H), nd = (size_t)(nds * T * H);
        CHECKF(memcmp(a[k].embeds16, c[k].embeds16, ne * 2) == 0, "image %d: rows from bf16 pixels differ", k);
        CHECKF(memcmp(a[k].deepstack16, c[k].deepstack16, nd * 2) == 0, "image %d: DeepStack from bf16 pixels", k);
        CHECKF(memcmp(a[k].embeds16, f[k].embeds16, ne * 2) == 0, "image %d: rows with one image's bf16 pixels", k);
        /* transformers' rows: the two images' embeds one after the other; one image's DeepStack
         * taps [n_ds][T] in order, the pair's taps [n_ds][T_all] */
        float d, mx, dd = 0, dmx = 0;
        diff_bf16(a[k].embeds16, emb.f32 + (k ? T0 : 0) * H, (int64_t)ne, &d, &mx);
        int64_t T_all = emb.n / H;
        for (int64_t tap = 0; tap < nds; tap++) {
            float e, x;
            diff_bf16(a[k].deepstack16 + tap * T * H, ds.f32 + (tap * T_all + (k ? T0 : 0)) * H, T * H, &e, &x);
            dd = e > dd ? e : dd, dmx = x > dmx ? x : dmx;
        }
        printf("  image %d (grid %d x %d x %d): against transformers max-abs %.3g of %.3g (DeepStack %.3g of %.3g)\n",
               k, grid[3 * k], grid[3 * k + 1], grid[3 * k + 2], d, mx, dd, dmx);
        CHECKF(d <= 0.05f * mx && dd <= 0.05f * dmx, "image %d: %g / %g from transformers", k, d, dd);
        iris_vision_out_free(&a[k]), iris_vision_out_free(&c[k]), iris_vision_out_free(&f[k]);
    }
    b->free(b, scratch);
    b->host_free(h16);
    tiny_free(&emb), tiny_free(&ds);
    two_images_free(&t);
}

/* One encode on another thread, as the engine's vision worker runs it. */
typedef struct fork_job {
    const iris_vision *v;
    iris_backend *b;
    void *scratch;
    size_t sb;
    const float *const *px;
    const int *grid;
    int n, rc;
    iris_vision_out *out;
    iris_err err;
} fork_job;

static void *fork_encode(void *arg) {
    fork_job *j = arg;
    j->rc = iris_vision_encode_each(j->v, j->b, j->scratch, j->sb, 1, j->px, NULL, j->grid, j->n, j->out, &j->err);
    return NULL;
}

IRIS_TEST(gpu_vision_fork) {
    OPS_BACKENDS();
    iris_backend *b = ops_cuda;
    iris_err err = {0};
    two_images t;
    REQUIRE(two_images_load(b, &t, &err) == 0);
    const iris_vision vis = t.vis;
    const int *grid = t.grid;
    const float *const *px = t.px;
    int64_t rows0 = t.rows[0], rows1 = t.rows[1];
    size_t sb = iris_vision_scratch_bytes(&vis, b->act, rows0 + rows1);
    void *s0 = b->alloc(b, sb), *s1 = b->alloc(b, sb);
    REQUIRE(s0 && s1);
    iris_backend *f = NULL;
    REQUIRE(iris_backend_cuda_fork(b, &f, &err) == 0);
    CHECK(f->alloc(f, 256) == NULL);   /* a fork carves nothing */
    CHECK_CONTAINS(f->err.msg, "does not allocate");
    iris_vision_out a[2], c[2][2];
    REQUIRE(iris_vision_encode_each(&vis, b, s0, sb, 1, px, NULL, grid, 2, a, &err) == 0);
    /* the fork on its thread while the parent encodes again on its own stream */
    fork_job j = {&vis, f, s1, sb, px, grid, 2, 0, c[0], {0}};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, fork_encode, &j) == 0);
    int rc = iris_vision_encode_each(&vis, b, s0, sb, 1, px, NULL, grid, 2, c[1], &err);
    pthread_join(th, NULL);
    CHECKF(j.rc == 0, "the fork: %s", j.err.msg);
    CHECK_EQ_INT(rc, 0);
    for (int k = 0; !rc && !j.rc && k < 2; k++) {
        size_t ne = (size_t)a[k].n_tokens * a[k].out_hidden, nd = ne * (size_t)a[k].n_deepstack;
        for (int w = 0; w < 2; w++) {
            CHECK_EQ_INT(c[w][k].n_tokens, a[k].n_tokens);
            CHECKF(memcmp(a[k].embeds16, c[w][k].embeds16, ne * 2) == 0, "image %d: rows differ (%s)", k,
                   w ? "the parent, beside the fork" : "the fork");
            CHECKF(memcmp(a[k].deepstack16, c[w][k].deepstack16, nd * 2) == 0, "image %d: DeepStack rows differ (%s)",
                   k, w ? "the parent, beside the fork" : "the fork");
        }
    }
    for (int k = 0; k < 2; k++) iris_vision_out_free(&a[k]), iris_vision_out_free(&c[0][k]), iris_vision_out_free(&c[1][k]);
    f->destroy(f);
    b->free(b, s0), b->free(b, s1);
    two_images_free(&t);
}

#endif
