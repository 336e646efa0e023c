/* prompt.c: chat template + tokens + images + positions (see prompt.h). */
#include "prompt.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "formats/chat.h"
#include "formats/image.h"
#include "model/positions.h"

json_t *iris_prompt_one_turn(const char *system, int n_images, const char *text) {
    json_t *msgs = json_array(), *content = json_array();
    if (!msgs || !content) goto oom;
    if (system && json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system)))
        goto oom;
    for (int i = 0; i < n_images; i++)
        if (json_array_append_new(content, json_pack("{s:s}", "type", "image"))) goto oom;
    if (json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", text ? text : "")))
        goto oom;
    if (json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", content))) goto oom;
    json_decref(content);
    return msgs;
oom:
    json_decref(content);
    json_decref(msgs);
    return NULL;
}

void iris_prompt_free(iris_prompt *p) {
    if (!p) return;
    free(p->text);
    iris_tok_ids_free(&p->ids);
    free(p->grid_thw);
    free(p->pixel_values);
    free(p->image_keys);
    free(p->pos);
    memset(p, 0, sizeof *p);
}

int iris_prompt_build(const iris_tok *tok, const iris_config *cfg, const iris_preprocessor_config *pc,
                      const json_t *messages, const char *const *image_paths, int n_images, iris_prompt *out,
                      iris_err *err) {
    memset(out, 0, sizeof *out);
    iris_chat_opts opts = {.add_generation_prompt = 1};
    iris_chat_info info = {0};
    size_t len = 0;
    int rc = iris_chat_render(messages, NULL, &opts, &out->text, &len, &info, err);
    if (rc) return rc;
    if (info.n_images != n_images) {
        rc = iris_err_set(err, IRIS_EINVAL, "the messages hold %d image part(s) but %d image file(s) were given",
                          info.n_images, n_images);
        goto fail;
    }
    int32_t *counts = NULL;
    if (n_images > 0) {
        iris_image_decode_opts dopts;
        iris_image_prep_opts popts;
        iris_image_decode_opts_default(&dopts);
        iris_image_prep_opts_default(&popts);
        if (pc) {
            popts.min_pixels = pc->min_pixels;
            popts.max_pixels = pc->max_pixels;
            popts.patch_size = pc->patch_size;
            popts.merge_size = pc->merge_size;
            popts.temporal_patch_size = pc->temporal_patch_size;
            memcpy(popts.image_mean, pc->image_mean, sizeof popts.image_mean);
            memcpy(popts.image_std, pc->image_std, sizeof popts.image_std);
        }
        const iris_vision_config *vc = &cfg->vision_config;
        if (popts.patch_size != vc->patch_size || popts.merge_size != vc->spatial_merge_size ||
            popts.temporal_patch_size != vc->temporal_patch_size) {
            rc = iris_err_set(err, IRIS_EINVAL,
                              "preprocessor_config.json (patch %d, merge %d, temporal %d) does not match the vision "
                              "config (patch %d, merge %d, temporal %d)", popts.patch_size, popts.merge_size,
                              popts.temporal_patch_size, vc->patch_size, vc->spatial_merge_size,
                              vc->temporal_patch_size);
            goto fail;
        }
        rc = iris_image_preprocess_files(image_paths, n_images, &dopts, &popts, &out->pixel_values, &out->n_rows,
                                         &out->grid_thw, &out->image_keys, err);
        if (rc) goto fail;
        out->n_images = n_images;
        counts = malloc(sizeof(int32_t) * (size_t)n_images);
        if (!counts) {
            rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
            goto fail;
        }
        int mm = vc->spatial_merge_size * vc->spatial_merge_size;
        for (int i = 0; i < n_images; i++)
            counts[i] = out->grid_thw[3 * i] * out->grid_thw[3 * i + 1] * out->grid_thw[3 * i + 2] / mm;
    }
    rc = iris_chat_tokenize(tok, out->text, len, counts, (size_t)n_images, &out->ids, err);
    free(counts);
    if (rc) goto fail;
    out->pos = malloc(sizeof(int32_t) * 3 * (out->ids.n ? out->ids.n : 1));
    if (!out->pos) {
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
        goto fail;
    }
    rc = iris_pos_rope_index(out->ids.ids, (int)out->ids.n, cfg->image_token_id, out->grid_thw, n_images,
                             cfg->vision_config.spatial_merge_size, out->pos, &out->rope_delta, err);
    if (rc) goto fail;
    return IRIS_OK;
fail:
    iris_prompt_free(out);
    return rc;
}
