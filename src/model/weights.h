/* weights.h: the one loader of a Qwen3-VL model, the immutable half of the
 * model/state split: config.json, generation_config.json,
 * preprocessor_config.json, the tokenizer, the mmap'd safetensors, and the
 * checked tensor views of the text decoder (text.h) and of the vision tower
 * (vision.h), optionally placed on a backend.  The engine opens its model
 * here; nothing else assembles a model from the loaders below it.
 *
 * Opening a model = the configs (config.h) + safetensors (safetensors.h) +
 * binding every tensor named in QWEN3VL.md §3 with its shape derived from the
 * config, then the tokenizer: a missing tensor or a wrong shape fails the
 * open with a message naming the directory, the tensor and both shapes.  FP8
 * linears are recognised by the rule of §2 (an F8_E4M3 weight with a sibling
 * weight_scale_inv); lm_head is tied to the embeddings when the checkpoint
 * has no lm_head.weight and the config ties it (§8.13).
 *
 * Owns: the iris_model (malloc'd), the configs, the tokenizer, the mmap
 * (iris_st), the layer arrays of the views.  Does not own the backend it
 * placed the weights on (for CUDA the copies live in that backend's arena
 * and go with it).  Immutable once placed; the tokenizer is safe to use from
 * any thread.  All mutable state (KV cache, sequences, scratch) belongs to
 * the caller (the engine). */
#ifndef IRIS_WEIGHTS_H
#define IRIS_WEIGHTS_H

#include <stdint.h>

#include "iris.h"
#include "backend/backend.h"
#include "formats/config.h"
#include "formats/safetensors.h"
#include "formats/tokenizer.h"
#include "model/text.h"
#include "model/vision.h"

/* Where the weights go on a backend (the memory plan's choices, planner.h). */
typedef struct iris_model_placement {
    int dense;              /* BF16 copies of the FP8 decoder linears too (text.h iris_text_densify) */
    int embed_host;         /* the token-embedding table stays in host memory (text.h iris_text_embed_host) */
    int lm_head_fp8;        /* the lm_head quantized to block FP8 at load (text.h iris_text_lm_head_fp8) */
} iris_model_placement;

typedef struct iris_model_opts {
    iris_backend *backend;  /* place the weights there at open (NULL: host views into the mmap; iris_model_place) */
    int dense;              /* with backend: BF16 copies of the FP8 decoder linears too (text.h iris_text_densify) */
    int text_only;          /* skip the vision tower (no model.visual.* tensors needed) */
} iris_model_opts;

typedef struct iris_model {
    char dir[4096];
    iris_config cfg;
    iris_generation_config gc;      /* sampling defaults and end tokens */
    iris_preprocessor_config pc;    /* image preprocessing as the model was trained */
    iris_tok *tok;
    iris_st *st;
    iris_text text;         /* decoder views (text.h) */
    iris_vision vision;     /* vision tower views (vision.h); unset when has_vision is 0 */
    int has_vision;         /* the tower is loaded: the config has one and text_only was not asked */
    int chat_style;         /* the checkpoint's chat template (formats/chat.h iris_chat_style) */
    int lm_head_tied;
    int n_fp8;              /* FP8 block-scaled linears in the decoder */
    int n_ignored;          /* decoder linears a 4-bit checkpoint's quantization_config.ignore keeps unquantized */
    iris_backend *on;       /* where the weights live; NULL: host (CPU) */
} iris_model;

/* Opens the model in directory `dir` (opts may be NULL).  On success *out is
 * the caller's, to close with iris_model_close; on failure *out is NULL and
 * err says what is wrong, prefixed with the directory. */
int iris_model_open(const char *dir, const iris_model_opts *opts, iris_model **out, iris_err *err);
/* Places the weights on backend b, once: the decoder, its BF16 copies when `dense`, then the
 * vision tower (the order the memory plan carves them in); the CPU backend reads the mmap'd
 * views where they are. */
int iris_model_place(iris_model *m, iris_backend *b, int dense, iris_err *err);
/* The same with the plan's placement: the embeddings left on the host and the lm_head quantized to
 * FP8 first when asked (pl NULL: as iris_model_place(m, b, 0)).  The CPU backend honours both too
 * (the runner's host rows, the FP8 linear), which is how the tests compare them with the default. */
int iris_model_place_with(iris_model *m, iris_backend *b, const iris_model_placement *pl, iris_err *err);
void iris_model_close(iris_model *m);

/* One line for start-up logs: architecture, sizes, weight format, head tying. */
void iris_model_describe(const iris_model *m, char *buf, size_t n);

#endif
