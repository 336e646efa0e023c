/* srv_prompt.c: a chat request's prompt built from images held in memory
 * (the bytes behind each image_url), on the connection's thread.
 *
 * The same steps as model/prompt.c's iris_prompt_build, which reads image
 * files: decode → smart_resize → patchify with the model's
 * preprocessor_config.json, chat template, tokens with each image pad
 * expanded, MRoPE positions.  Images are decoded one by one so a failure
 * names the image's place in the request (its OpenAI param).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "err.h"
#include "formats/chat.h"
#include "formats/image.h"
#include "model/positions.h"
#include "engine/prompt.h"
#include "server/server_internal.h"

static void prep_opts(const iris_preprocessor_config *pc, iris_image_prep_opts *popts) {
    iris_image_prep_opts_default(popts);
    if (!pc) return;
    popts->min_pixels = pc->min_pixels;
    popts->max_pixels = pc->max_pixels;
    popts->patch_size = pc->patch_size;
    popts->merge_size = pc->merge_size;
    popts->temporal_patch_size = pc->temporal_patch_size;
    memcpy(popts->image_mean, pc->image_mean, sizeof popts->image_mean);
    memcpy(popts->image_std, pc->image_std, sizeof popts->image_std);
}

int srv_prompt_build(iris_engine *eng, const json_t *messages, srv_image *images, int n_images,
                     int64_t max_image_pixels, iris_prompt *out, int *bad_image, iris_err *err) {
    const iris_config *cfg = iris_engine_config(eng);
    const iris_preprocessor_config *pc = iris_engine_preprocessor_config(eng);
    const iris_tok *tok = iris_engine_tokenizer(eng);
    memset(out, 0, sizeof *out);
    *bad_image = -1;
    iris_chat_opts copts = {.add_generation_prompt = 1};
    iris_chat_info info = {0};
    size_t len = 0;
    int32_t *counts = NULL;
    iris_image_prep *preps = NULL;
    int rc = iris_chat_render(messages, NULL, &copts, &out->text, &len, &info, err);
    if (rc) return rc;
    if (info.n_images != n_images) {
        rc = iris_err_set(err, IRIS_EINVAL, "the messages hold %d image(s) but %d image_url part(s) were read",
                          info.n_images, n_images);
        goto done;
    }
    if (n_images > 0) {
        iris_image_decode_opts dopts;
        iris_image_prep_opts popts;
        iris_image_decode_opts_default(&dopts);
        if (max_image_pixels > 0) dopts.max_pixels = max_image_pixels;
        prep_opts(pc, &popts);
        const iris_vision_config *vc = &cfg->vision_config;
        int mm = vc->spatial_merge_size * vc->spatial_merge_size;
        preps = calloc((size_t)n_images, sizeof *preps);
        counts = calloc((size_t)n_images, sizeof *counts);
        out->grid_thw = calloc((size_t)n_images * 3, sizeof *out->grid_thw);
        out->image_keys = malloc(32 * (size_t)n_images);
        if (!preps || !counts || !out->grid_thw || !out->image_keys) {
            rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
            goto done;
        }
        int64_t rows = 0;
        for (int i = 0; i < n_images; i++) {
            iris_image img = {0};
            rc = iris_image_decode_mem(images[i].data, images[i].n, images[i].label, &dopts, &img, err);
            if (!rc) rc = iris_image_prepare(&img, &popts, &preps[i], err);
            if (!rc && iris_image_prep_key(&preps[i], &popts, out->image_keys[i]))
                rc = iris_err_set(err, IRIS_ENOMEM, "%s: SHA-256 failed (libcrypto)", images[i].label);
            iris_image_free(&img);
            if (rc) {
                *bad_image = i;
                goto done;
            }
            out->grid_thw[3 * i] = preps[i].grid_t;
            out->grid_thw[3 * i + 1] = preps[i].grid_h;
            out->grid_thw[3 * i + 2] = preps[i].grid_w;
            counts[i] = preps[i].grid_t * preps[i].grid_h * preps[i].grid_w / mm;
            rows += iris_image_prep_rows(&preps[i]);
        }
        int dim = iris_image_row_dim(&popts);
        out->pixel_values = calloc((size_t)rows * (size_t)dim, sizeof(float));
        if (!out->pixel_values) {
            rc = iris_err_set(err, IRIS_ELIMIT, "the images need %lld pixel rows: out of memory", (long long)rows);
            goto done;
        }
        int64_t r0 = 0;
        for (int i = 0; i < n_images; i++) {
            int64_t k = iris_image_prep_rows(&preps[i]);
            iris_image_patch_rows(&preps[i], &popts, 0, k, out->pixel_values + r0 * dim);
            r0 += k;
        }
        out->n_rows = rows;
        out->n_images = n_images;
    }
    rc = iris_chat_tokenize(tok, out->text, len, counts, (size_t)n_images, &out->ids, err);
    if (rc) goto done;
    out->pos = malloc(sizeof(int32_t) * 3 * (out->ids.n ? out->ids.n : 1));
    if (!out->pos) {
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
        goto done;
    }
    rc = iris_pos_rope_index(out->ids.ids, (int)out->ids.n, cfg->image_token_id, out->grid_thw, n_images,
                             cfg->vision_config.spatial_merge_size, out->pos, &out->rope_delta, err);
done:
    for (int i = 0; preps && i < n_images; i++) iris_image_prep_free(&preps[i]);
    free(preps);
    free(counts);
    if (rc) iris_prompt_free(out);
    return rc;
}
