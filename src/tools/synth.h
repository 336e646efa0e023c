/* synth.h: real-shape Qwen3-VL checkpoints with random weights, for speed and
 * memory benchmarks (`iris synth`).
 *
 * Shapes: the tensor names and shapes of QWEN3VL.md §3 from a config built
 * like §1.1 for the preset ("2B", "4B", "8B", or "tiny": every LM dimension a
 * multiple of 128 so it is also a valid FP8 model, small enough for tests).
 * Values: BF16 ~ N(0, 0.02), norm weights ~ N(1, 0.02), biases ~ N(0, 0.02)
 * (normal quantiles from a 65536-entry table indexed by 16 random bits:
 * fast, and exactly reproducible from --seed whatever the thread count).
 * FP8 is generated directly in Qwen's format: e4m3 codes of N(0, 1) * 448/4.5
 * and per-block scale_inv = 0.02 * 4.5/448 * U(0.75, 1.25), so dequantized
 * weights are ~ N(0, 0.02).  Writes model.safetensors, config.json,
 * generation_config.json, preprocessor_config.json,
 * video_preprocessor_config.json and, when given, the tokenizer files.
 */
#ifndef IRIS_SYNTH_H
#define IRIS_SYNTH_H

#include <stdint.h>

#include "iris.h"
#include "formats/safetensors.h"

typedef struct iris_synth_opts {
    const char *like;       /* "2B", "4B", "8B", "tiny" */
    int fp8;                /* 0: BF16 */
    int int4;               /* 1: the decoder linears as compressed-tensors W4A16, symmetric groups of 128
                               (uniform random codes, bf16 scales 0.02/4.61 * U(0.75, 1.25)); over fp8 */
    uint64_t seed;
    const char *tokenizer;  /* a tokenizer.json to copy (tokenizer_config.json and chat_template.* beside it too); NULL: none */
    int vocab_size;         /* 0: the preset's (151936) */
    int n_threads;          /* 0: the machine's cores */
} iris_synth_opts;

typedef void (*iris_synth_tensor_fn)(void *ctx, const char *name, iris_dtype dtype, int n_dims,
                                     const int64_t *shape);

/* The tensors `iris_synth_write` would write, in declaration order, without
 * writing anything. */
int iris_synth_list(const iris_synth_opts *o, iris_synth_tensor_fn fn, void *ctx, iris_err *err);
/* config.json text for the preset (caller frees). */
int iris_synth_config_json(const iris_synth_opts *o, char **out, iris_err *err);
/* Write the checkpoint into `dir` (created if missing). */
int iris_synth_write(const char *dir, const iris_synth_opts *o, iris_err *err);

/* The table of the published Qwen3-VL checkpoints (Qwen/Qwen3-VL-{2B,4B,8B}-{Instruct,Thinking}[-FP8]):
 * 1 when `repo` (Org/Name[@revision], case-insensitive) is one, with o->like and o->fp8 set (the
 * rest zeroed); else 0.  iris_synth_known_name(i): the i-th repo id, NULL past the end. */
int iris_synth_known_repo(const char *repo, iris_synth_opts *o);
const char *iris_synth_known_name(int i);
/* A header-only copy of the preset in `dir` (which exists): config.json and a model.safetensors
 * whose header is complete and whose data is a hole of its size (a sparse file: no disk used),
 * enough for the memory planner (iris_plan_model_load). */
int iris_synth_write_headers(const char *dir, const iris_synth_opts *o, iris_err *err);

#endif
