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
#include "model/text.h"
#include "model/weights.h"

/* The loaded model: its configs, tokenizer and checkpoint (its decoder and vision tower are the
 * engine thread's to run). */
const iris_model *iris_engine_model(const iris_engine *e);
/* 1 when this model's replies open with reasoning that ends at "</think>" (its chat template
 * thinks: formats/chat.h iris_chat_reasoning), given the request's enable_thinking=False. */
int iris_engine_reasoning(const iris_engine *e, int no_thinking);
/* What iris_prompt_build needs to build a prompt this engine admits: the model's tokenizer and
 * config, and its preprocessor config with the image size the memory plan admits. */
void iris_engine_prompt_ctx(const iris_engine *e, iris_prompt_ctx *out);

/* For `iris bench` and `iris logits`, which time or trace the engine's own step: the decoder,
 * the backend, the runner (runner.h) and the checkpoint's bytes.  The runner may be driven from
 * the caller's thread only while the engine has no requests (none submitted, or all finished),
 * and the KV blocks it names are then the caller's to choose. */
const iris_text *iris_engine_text(const iris_engine *e);
iris_backend *iris_engine_backend(iris_engine *e);
struct iris_runner *iris_engine_runner(iris_engine *e);
size_t iris_engine_weight_bytes(const iris_engine *e);

/* iris logits: the logits of the prompt's last n_out positions ([n_out, vocab] into `logits`,
 * the caller's) and, with trace, the residual stream entering every layer, from one prefill of
 * p through the engine's vision encoder and decoder (its runner's code, sized for this prompt).
 * Only while the engine has no requests: it writes KV blocks 0, 1, ... */
struct iris_prompt;
int iris_engine_prompt_logits(iris_engine *e, const struct iris_prompt *p, int n_out, iris_text_trace_fn trace,
                              void *ud, float *logits, iris_err *err);

#endif
