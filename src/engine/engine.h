/* engine.h: the engine's internal surface (the public one is the engine
 * section of include/iris.h).
 *
 * The server and the CLI build prompts on their own threads (chat template,
 * tokenization, image decoding and preprocessing) with the one prompt
 * builder (prompt.h) and the settings iris_engine_prompt_ctx gives, then hand
 * the finished iris_prompt to iris_engine_submit (params.prompt).
 * Everything returned here is owned by the engine, immutable after
 * iris_engine_open, and valid until iris_engine_close; the tokenizer is safe
 * to use from any thread. */
#ifndef IRIS_ENGINE_ENGINE_H
#define IRIS_ENGINE_ENGINE_H

#include "iris.h"
#include "engine/prompt.h"
#include "model/weights.h"

/* The loaded model: its configs, tokenizer and checkpoint (its decoder and vision tower are the
 * engine thread's to run). */
const iris_model *iris_engine_model(const iris_engine *e);
/* What iris_prompt_build needs to build a prompt this engine admits: the model's tokenizer and
 * config, and its preprocessor config with the image size the memory plan admits. */
void iris_engine_prompt_ctx(const iris_engine *e, iris_prompt_ctx *out);

#endif
