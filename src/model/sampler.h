/* sampler.h: choosing the next token from one row of logits, and stop strings.
 *
 * Owns: a request's sampling parameters (iris.h iris_sampling), its PRNG and the token statistics the
 * penalties need (prompt and generated tokens), and scratch sized to the
 * vocabulary.  One iris_sampler per request; nothing is shared, so the same
 * seed gives the same tokens whatever else runs in the batch.
 *
 * Order of operations (HF transformers' logits processors, then warpers):
 *   1. repetition_penalty over every token of prompt + generated text (HF
 *      RepetitionPenaltyLogitsProcessor: logit > 0 -> logit / p, else logit * p)
 *   2. frequency_penalty * count and presence_penalty * (count > 0), over the
 *      generated tokens only (OpenAI / vLLM semantics; subtracted)
 *   -- greedy (temperature < 1e-5 or do_sample == 0) stops here: argmax, lowest
 *      id on ties (torch.argmax) --
 *   3. temperature (logits / T)
 *   4. top_k (keep logits >= the k-th largest; ties at the boundary are kept)
 *   5. top_p (keep a token while the probability mass ranked above it, after
 *      top-k, is < top_p; at least one token)
 *   6. min_p (keep p >= min_p * p_max)
 *   7. draw from the softmax of what is left with the request's PRNG
 *      (xoshiro256** seeded through splitmix64).
 * With a grammar (iris_sampler_set_grammar), every token the grammar refuses is -inf after
 * step 2 (model/grammar.h computes the mask, once a step: iris_sampler_mask); the end tokens are
 * allowed only once the output is complete, and then end it whatever ignore_eos says.  Masking
 * commutes with the penalties (a -inf stays -inf), so the mask may be applied before them, on
 * the device, where the row's candidates are chosen (iris_sampler_sample_top).
 * A grammar may wait for a token (iris_sampler_grammar_after: a Thinking model's "</think>", as
 * vLLM starts the grammar once its reasoning parser sees the reasoning end): until that token is
 * sampled the sampler is free in every respect (no mask, no end stop; iris_sampler_constrained
 * 0), and from the token after it the grammar constrains as above, from its start.
 * Log-probabilities reported to callers are of the raw logits (before any of
 * the above), as vLLM's default `raw_logprobs`.
 *
 * The stop-string matcher works on the detokenized text as it streams: it
 * holds back any tail that could still become a stop string, stops when one is
 * completed and trims it (and everything after it).
 */
#ifndef IRIS_SAMPLER_H
#define IRIS_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "iris.h"
#include "formats/config.h"
#include "model/grammar.h"

#define IRIS_SAMPLER_MAX_STOP_IDS 16
#define IRIS_SAMPLER_MAX_LOGPROBS 20
#define IRIS_SAMPLER_MAX_TOP 256     /* most candidates iris_sampler_sample_top takes */

typedef enum iris_finish {
    IRIS_FINISH_NONE = 0,   /* keep going */
    IRIS_FINISH_STOP,       /* a stop token or stop string */
    IRIS_FINISH_LENGTH,     /* max_tokens reached */
} iris_finish;

/* The request's parameters are iris.h's iris_sampling (the one struct from the request to here);
 * the model adds its end tokens (generation_config.json eos_token_id). */
typedef struct iris_stop_ids {
    int n;
    int ids[IRIS_SAMPLER_MAX_STOP_IDS];
} iris_stop_ids;

typedef struct iris_sample_out {
    int token;
    float logprob;                              /* of `token`, raw logits */
    int n_top;                                  /* = params.top_logprobs */
    int top_ids[IRIS_SAMPLER_MAX_LOGPROBS];     /* most likely first */
    float top_logprobs[IRIS_SAMPLER_MAX_LOGPROBS];
} iris_sample_out;

typedef struct iris_sampler iris_sampler;

/* The one source of defaults: generation_config.json (QWEN3VL.md §1.3); `gc` NULL gives the
 * Qwen3-VL file's values.  min_p, presence and frequency penalties 0, no seed (-1), no
 * max_tokens, no stop strings, no logprobs. */
void iris_sampling_default(iris_sampling *p, const iris_generation_config *gc);
/* Check ranges; the message names the parameter and the allowed range. */
int iris_sampling_check(const iris_sampling *p, iris_err *err);
/* The model's end tokens: generation_config.json's eos_token_id (gc NULL: Qwen3-VL's 151645, 151643). */
void iris_stop_ids_default(iris_stop_ids *s, const iris_generation_config *gc);

/* A sampler for one request over a vocabulary of n_vocab: p (checked; its stop strings are the
 * stop matcher's, below, and not kept), stopping at the end tokens `stop` (NULL: none) unless
 * p->ignore_eos.  Freed with iris_sampler_free (NULL ok). */
int iris_sampler_init(iris_sampler **out, const iris_sampling *p, const iris_stop_ids *stop, int n_vocab,
                      iris_err *err);
void iris_sampler_free(iris_sampler *s);

/* Constrain the output to grammar g (taken over, freed with the sampler or on failure) over
 * vocabulary v (n_vocab tokens; it must outlive the sampler); `end` are the tokens that end
 * the output once the grammar is complete. */
int iris_sampler_set_grammar(iris_sampler *s, iris_grammar *g, const iris_vocab *v, const iris_stop_ids *end,
                             iris_err *err);
/* Arm the grammar only once `token` has been sampled (the grammar starts at the next token; the
 * token itself is not the grammar's).  After iris_sampler_set_grammar, before the first token;
 * IRIS_EINVAL otherwise or for a token outside the vocabulary. */
int iris_sampler_grammar_after(iris_sampler *s, int token, iris_err *err);
/* 1 when s's grammar constrains this step (set and armed): the runner masks the row. */
int iris_sampler_constrained(const iris_sampler *s);
/* This step's allowed tokens into words [(n_vocab + 31) / 32] (bit t % 32 of word t / 32 set:
 * token t allowed, the end tokens included once the output is complete); returns 1, or 0 for
 * an unconstrained sampler or a grammar not yet armed (nothing written), or a negative error
 * (the grammar cannot go on).  Computed once a step and kept (the sampling calls below reuse
 * it, the error too) until iris_sampler_accept.  Distinct samplers may be asked from distinct threads at once (the
 * runner computes a step's masks on the thread pool while the device runs the forward). */
int iris_sampler_mask(iris_sampler *s, uint32_t *words, iris_err *err);
/* Record prompt tokens (repetition penalty only). */
int iris_sampler_add_prompt(iris_sampler *s, const int *ids, int n, iris_err *err);
/* Pick the next token from `logits` [n_vocab] (not modified); does not record
 * it: call iris_sampler_accept.  `out` may be NULL.  Returns the token id
 * (>= 0) or a negative error (all logits NaN or -inf). */
int iris_sampler_sample(iris_sampler *s, const float *logits, iris_sample_out *out, iris_err *err);
/* Record a generated token; returns IRIS_FINISH_STOP for a stop id,
 * IRIS_FINISH_LENGTH when max_tokens tokens have been generated, else NONE. */
iris_finish iris_sampler_accept(iris_sampler *s, int token);
int iris_sampler_n_generated(const iris_sampler *s);

/* ---- sampling from a row's most likely tokens (the GPU path) ----
 * A backend that can return the k largest logits of a row (backend.h get_topk) saves
 * downloading and scanning the whole vocabulary.  For a request without logprobs whose
 * penalties can only lower logits (repetition >= 1, presence and frequency >= 0), greedy
 * needs the top 1 and top-k sampling the top top_k (ties at the k-th value included): on
 * those the steps of this file give exactly the token the whole row would.
 * iris_sampler_top_need says how many a request needs (0: it needs the whole row).  With
 * penalties, the candidates are enough when `need` of them that no penalty touches
 * (iris_sampler_penalizes) lie above the last candidate's logit.  A constrained sampler takes
 * the candidates of its row with iris_sampler_mask's mask applied (backend.h get_topk's mask):
 * only allowed tokens, the list ending in -inf where fewer than n are allowed. */
int iris_sampler_top_need(const iris_sampler *s);
int iris_sampler_has_penalties(const iris_sampler *s);
/* 1 when a penalty applies to token now (in the prompt or generated text, as configured). */
int iris_sampler_penalizes(const iris_sampler *s, int token);
/* Pick the next token from the n most likely tokens of the row: ids and vals (the logits,
 * NaN as -inf) in value-descending order, lowest id first among equal values, with
 * iris_sampler_top_need(s) <= n <= IRIS_SAMPLER_MAX_TOP (give a few more than needed: ties).
 * The same token as iris_sampler_sample over the whole row and the same PRNG draw, or
 * IRIS_ELIMIT when the n given are not enough (the k-th value is tied up to the n-th, or
 * penalties pushed too many of them down: the caller samples from the whole row instead).
 * IRIS_EINVAL when a constrained sampler is given a finite candidate its mask refuses.
 * out->logprob and the top logprobs are not filled (requests that want them need the whole row). */
int iris_sampler_sample_top(iris_sampler *s, const int32_t *ids, const float *vals, int n, iris_sample_out *out,
                            iris_err *err);

/* The distribution step 7 draws from, written to probs [n_vocab] (zeros for
 * removed tokens; sums to 1).  Greedy gives a one-hot.  For tests and for
 * callers that sample elsewhere (the GPU). */
int iris_sampler_probs(iris_sampler *s, const float *logits, float *probs, iris_err *err);

const char *iris_finish_name(iris_finish f);    /* "stop", "length", NULL for NONE */

/* ---- stop strings ---- */
typedef struct iris_stop_matcher iris_stop_matcher;

/* Stop strings are copied; empty strings are rejected.  n == 0 is fine (the
 * matcher then passes text straight through).  Freed with iris_stop_free. */
int iris_stop_init(iris_stop_matcher **out, const char *const *stops, int n, iris_err *err);
void iris_stop_free(iris_stop_matcher *m);
/* Feed the next piece of detokenized text.  On return *emit / *n_emit is the
 * text that may be shown now (valid until the next call), and the result is
 * 1 when a stop string was completed (the text before it is in *emit, the
 * stop string and anything after it dropped; feed no more), else 0. */
int iris_stop_feed(iris_stop_matcher *m, const char *text, size_t len, const char **emit, size_t *n_emit,
                   iris_err *err);
/* The generation ended another way (stop token, length): release the text
 * held back. */
void iris_stop_flush(iris_stop_matcher *m, const char **emit, size_t *n_emit);
/* Index of the stop string that matched, or -1. */
int iris_stop_which(const iris_stop_matcher *m);

#endif
