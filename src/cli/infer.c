/* infer.c: the model and one user turn's prompt for `iris logits` (see infer.h). */
#include "infer.h"

#include <string.h>

#include "err.h"
#include "hub/hub.h"

#define MAX_IMAGES 64

int infer_open(const char *model, iris_model **out, iris_err *err) {
    *out = NULL;
    char dir[4096];
    int rc = iris_model_ensure(model, dir, sizeof dir, 1, err);
    if (rc) return iris_err_prefix(err, "model %s", model), rc;
    return iris_model_open(dir, NULL, out, err);
}

int infer_prepare(const iris_model *m, const char *system, const char *const *images, int n_images,
                  const char *text, iris_prompt *p, iris_vision_out *vo, iris_err *err) {
    memset(vo, 0, sizeof *vo);
    memset(p, 0, sizeof *p);
    if (n_images < 0 || n_images > MAX_IMAGES)
        return iris_err_set(err, IRIS_EINVAL, "%d images: at most %d", n_images, MAX_IMAGES);
    iris_prompt_image ims[MAX_IMAGES];
    memset(ims, 0, sizeof ims);
    for (int i = 0; i < n_images; i++) ims[i].path = images[i];
    json_t *msgs = iris_prompt_one_turn(system, n_images, text);
    if (!msgs) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    iris_prompt_ctx ctx = {.tok = m->tok, .cfg = &m->cfg, .pc = &m->pc};
    int rc = iris_prompt_build(&ctx, msgs, ims, n_images, p, NULL, err);
    json_decref(msgs);
    if (!rc && p->n_images > 0) {
        rc = iris_vision_encode(&m->vision, p->pixel_values, p->n_rows, p->grid_thw, p->n_images, vo, NULL, err);
        if (rc) iris_prompt_free(p);
    }
    return rc;
}
