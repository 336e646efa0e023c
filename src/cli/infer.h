/* infer.h: what `iris run|caption|ask|describe|logits` share: opening a
 * model directory (configs, tokenizer, checkpoint, vision tower) and turning
 * the command line's images and text into a prompt and image embeddings.
 *
 * Owns: everything in infer_model (infer_close).  Generation goes through
 * the engine (include/iris.h), as the server's requests do. */
#ifndef IRIS_CLI_INFER_H
#define IRIS_CLI_INFER_H

#include "iris.h"
#include "formats/config.h"
#include "engine/prompt.h"
#include "model/sampler.h"
#include "formats/safetensors.h"
#include "formats/tokenizer.h"
#include "model/vision.h"

typedef struct infer_model {
    char dir[4096];
    iris_config cfg;
    iris_generation_config gc;
    iris_preprocessor_config pc;
    iris_tok *tok;
    iris_st *st;
    iris_vision vis;
} infer_model;

/* MODEL: a directory or a repo id in the HF cache. */
int infer_open(const char *model, infer_model *m, iris_err *err);
void infer_close(infer_model *m);

/* One user turn (images first, then the text; optional system message):
 * the prompt, checked against the context (prompt + max_new tokens), and the
 * vision tower's output for its images (vo zeroed when there are none). */
int infer_prepare(infer_model *m, const char *system, const char *const *images, int n_images, const char *text,
                  int max_new, iris_prompt *p, iris_vision_out *vo, iris_err *err);

/* Generate the answer to one user turn through the engine (engine.c; it
 * loads the model again from m->dir, the weights being mmap'd and shared):
 * the text streams to stdout, a summary line (tokens, time to first token,
 * tok/s) goes to stderr. */
int infer_generate(infer_model *m, const char *system, const char *const *images, int n_images, const char *text,
                   const iris_sampling_params *sp, const char *const *stop, int n_stop, const char *device,
                   const iris_engine_opts *gpu, iris_err *err);

#endif
