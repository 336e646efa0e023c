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
#include "model/text.h"

const iris_tok *iris_engine_tokenizer(const iris_engine *e);
const iris_config *iris_engine_config(const iris_engine *e);
const iris_generation_config *iris_engine_generation_config(const iris_engine *e);
const iris_preprocessor_config *iris_engine_preprocessor_config(const iris_engine *e);

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
