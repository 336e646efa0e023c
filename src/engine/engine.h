/* engine.h: the engine's internal surface (the public one is the engine
 * section of include/iris.h).
 *
 * The server and the CLI build prompts on their own threads (chat template,
 * tokenization, image decoding and preprocessing) with the engine's loaded
 * tokenizer and configs, then hand the finished iris_prompt to
 * iris_engine_submit (params.prompt).  Everything returned here is owned by
 * the engine, immutable after iris_engine_open, and valid until
 * iris_engine_close; the tokenizer is safe to use from any thread. */
#ifndef IRIS_ENGINE_ENGINE_H
#define IRIS_ENGINE_ENGINE_H

#include "iris.h"
#include "formats/config.h"
#include "formats/tokenizer.h"

const iris_tok *iris_engine_tokenizer(const iris_engine *e);
const iris_config *iris_engine_config(const iris_engine *e);
const iris_generation_config *iris_engine_generation_config(const iris_engine *e);
const iris_preprocessor_config *iris_engine_preprocessor_config(const iris_engine *e);

#endif
