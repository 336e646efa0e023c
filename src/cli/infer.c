/* infer.c: model opening and prompt preparation for the inference commands. */
#include "infer.h"

#include <string.h>

#include "err.h"
#include "model/resolve.h"

int infer_open(const char *model, infer_model *m, iris_err *err) {
    memset(m, 0, sizeof *m);
    int rc = iris_model_resolve(model, m->dir, sizeof m->dir, err);
    if (!rc) rc = iris_config_load(m->dir, &m->cfg, err);
    if (!rc) rc = iris_generation_config_load(m->dir, &m->gc, err);
    if (!rc) rc = iris_preprocessor_config_load(m->dir, &m->pc, err);
    if (!rc) {
        char path[4200];
        snprintf(path, sizeof path, "%s/tokenizer.json", m->dir);
        rc = iris_tok_load(path, &m->tok, err);
    }
    if (!rc) rc = iris_st_open(m->dir, &m->st, err);
    if (!rc) rc = iris_vision_load(m->st, &m->cfg.vision_config, &m->vis, err);
    if (rc) {
        iris_err_prefix(err, "model %s", model);
        infer_close(m);
    }
    return rc;
}

void infer_close(infer_model *m) {
    if (!m) return;
    iris_vision_free(&m->vis);
    iris_st_close(m->st);
    iris_tok_free(m->tok);
    memset(m, 0, sizeof *m);
}

int infer_prepare(infer_model *m, const char *system, const char *const *images, int n_images, const char *text,
                  int max_new, iris_prompt *p, iris_vision_out *vo, iris_err *err) {
    memset(vo, 0, sizeof *vo);
    json_t *msgs = iris_prompt_one_turn(system, n_images, text);
    if (!msgs) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    int rc = iris_prompt_build(m->tok, &m->cfg, &m->pc, msgs, images, n_images, p, err);
    json_decref(msgs);
    if (rc) return rc;
    int64_t ctx = m->cfg.text_config.max_position_embeddings;
    if ((int64_t)p->ids.n + (max_new > 0 ? max_new : 0) > ctx) {
        rc = iris_err_set(err, IRIS_ELIMIT,
                          "the prompt has %zu tokens%s%d to generate; the context of this model is %lld tokens "
                          "(text_config.max_position_embeddings): shorten the prompt, use fewer or smaller images, "
                          "or lower --max-tokens", p->ids.n, max_new > 0 ? " and " : "", max_new > 0 ? max_new : 0,
                          (long long)ctx);
        iris_prompt_free(p);
        return rc;
    }
    if (p->n_images > 0) {
        rc = iris_vision_encode(&m->vis, p->pixel_values, p->n_rows, p->grid_thw, p->n_images, vo, NULL, err);
        if (rc) iris_prompt_free(p);
    }
    return rc;
}

int infer_decode(infer_model *m, iris_err *err) {
    (void)m;
    return iris_err_set(err, IRIS_EUNSUPPORTED,
                        "the text decoder (src/model/text.c) is not in this build yet: the prompt and the vision "
                        "tower ran, nothing was generated");
}
