/* inspect.h: what `iris inspect` reports about a checkpoint, as JSON.
 *
 * The report is built from the headers only (no tensor data is read): the
 * config summary (config.json, generation_config.json,
 * preprocessor_config.json), every tensor (name, dtype, shape, bytes, file),
 * totals by dtype and by part, the FP8 linears (QWEN3VL.md §2's rule) and
 * whether lm_head is stored, tied or missing.  The text form is printed from
 * the same JSON, so both outputs always agree. */
#ifndef IRIS_INSPECT_H
#define IRIS_INSPECT_H

#include <jansson.h>
#include <stdio.h>

#include "iris.h"

/* The part a tensor belongs to: "vision" (model.visual.*), "embeddings"
 * (embed_tokens, lm_head) or "language model" (the rest). */
const char *iris_inspect_part(const char *tensor_name);

/* Report on `path`: a model directory (config.json required), a .safetensors
 * file or a model.safetensors.index.json (tensors only).  *out is freed by the
 * caller with json_decref. */
int iris_inspect(const char *path, json_t **out, iris_err *err);

/* The human-readable form; `with_tensors` = 0 leaves out the per-tensor table. */
void iris_inspect_print(FILE *f, const json_t *report, int with_tensors);

#endif
