/* prompt.h: a multimodal prompt, ready for the model: chat template →
 * tokens with each <|image_pad|> expanded to its image's token count →
 * pixel_values and grids → 3-D MRoPE positions.
 *
 * Owns: every array in iris_prompt (iris_prompt_free).  Images are given as
 * file paths, in the order their parts appear in the messages.  Image limits
 * and preprocessing come from the model's preprocessor_config.json. */
#ifndef IRIS_PROMPT_H
#define IRIS_PROMPT_H

#include <jansson.h>
#include <stdint.h>

#include "iris.h"
#include "formats/config.h"
#include "formats/tokenizer.h"

typedef struct iris_prompt {
    char *text;              /* the rendered chat template (pads not expanded) */
    iris_tok_ids ids;        /* token ids, pads expanded */
    int n_images;
    int *grid_thw;           /* 3 per image */
    float *pixel_values;     /* [n_rows, patch_dim] */
    unsigned char (*image_keys)[32]; /* per image: iris_image_prep_key (the prefix cache's content key);
                                        NULL: the engine hashes the pixel rows instead */
    int64_t n_rows;
    int32_t *pos;            /* [3, ids.n]: t, h, w rows */
    int rope_delta;
} iris_prompt;

/* messages: an OpenAI-style JSON array (chat.h). */
int iris_prompt_build(const iris_tok *tok, const iris_config *cfg, const iris_preprocessor_config *pc,
                      const json_t *messages, const char *const *image_paths, int n_images, iris_prompt *out,
                      iris_err *err);
void iris_prompt_free(iris_prompt *p);

/* The messages of one turn: an optional system message, then one user
 * message with n_images image parts followed by the text (the CLI's
 * prompt).  Returns a new reference (json_decref), NULL when out of memory. */
json_t *iris_prompt_one_turn(const char *system, int n_images, const char *text);

#endif
