/* infer.h: what `iris logits` needs to run the decoder itself: the model
 * (the one loader, model/weights.h) from a directory or a repo id, and one
 * user turn as a prompt (the one builder, engine/prompt.h) with its images'
 * embeddings.  `iris run|caption|ask|describe` go through the engine
 * (cmd_run.c). */
#ifndef IRIS_CLI_INFER_H
#define IRIS_CLI_INFER_H

#include "iris.h"
#include "engine/prompt.h"
#include "model/vision.h"
#include "model/weights.h"

/* MODEL: a directory or a repo id in the HF cache (downloaded when missing).  Host views; close
 * with iris_model_close. */
int infer_open(const char *model, iris_model **out, iris_err *err);

/* One user turn (images first, then the text; optional system message): the prompt, and the
 * vision tower's output for its images on the CPU (vo zeroed when there are none). */
int infer_prepare(const iris_model *m, const char *system, const char *const *images, int n_images,
                  const char *text, iris_prompt *p, iris_vision_out *vo, iris_err *err);

#endif
