/* grammar.h: constrained decoding: JSON Schema -> a byte-level grammar -> per-step token masks.
 *
 * Three objects:
 *   iris_vocab    the tokenizer's tokens as byte strings in a trie (prefix sharing), built once
 *                 per tokenizer (special added tokens are left out: a grammar never allows them;
 *                 the end token is the sampler's business once the grammar is complete).
 *   iris_grammar  a compiled, immutable grammar: rules of alternatives of sequences of byte
 *                 sets and rule references (no left recursion).  iris_grammar_from_schema
 *                 compiles a JSON Schema (grammar_schema.c lists the keywords it honours and
 *                 refuses the rest by name).
 *   iris_grammar_matcher  one request's position in the grammar: a set of parse stacks (hash-
 *                 consed persistent lists, so equal stacks are one id) advanced byte by byte.
 *                 The mask walks the vocabulary trie once, advancing the stack set along each
 *                 trie edge and pruning a whole subtree when the set empties; inside a string
 *                 it copies the vocabulary's precomputed row of all-text tokens (by code
 *                 points left) and runs only the ~5,000 tokens that leave or escape the text;
 *                 masks of states seen before come from a small cache.
 *
 * Whitespace the grammar admits: one optional space after ':' and ',' and nothing else, so a
 * schema whose strings, arrays and integers are bounded always finishes.
 *
 * Does not: sample (model/sampler.c applies the mask), know about special tokens other than
 * leaving them out, run on the GPU.
 */
#ifndef IRIS_GRAMMAR_H
#define IRIS_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "iris.h"
#include "formats/tokenizer.h"

typedef struct iris_vocab iris_vocab;
typedef struct iris_grammar iris_grammar;
typedef struct iris_grammar_matcher iris_grammar_matcher;

/* The tokens of `tok` (ids 0..n_vocab-1) as byte strings in a trie, and classed by string text
 * (~627 KB of rows for Qwen's vocabulary; grammar_vocab.c). */
int iris_vocab_build(const iris_tok *tok, int n_vocab, iris_vocab **out, iris_err *err);
void iris_vocab_free(iris_vocab *v);
int iris_vocab_n(const iris_vocab *v);
/* Trie nodes (for benchmarks and tests). */
int iris_vocab_n_nodes(const iris_vocab *v);

/* Compile a JSON Schema given as JSON text.  IRIS_EINVAL with a message naming the keyword or
 * the $ref for a schema iris cannot honour or that is not valid. */
int iris_grammar_from_schema(const char *schema_json, iris_grammar **out, iris_err *err);
/* Tool calls in Qwen3's format (grammar_tools.c): tools_json is an OpenAI tools array
 * ([{"type": "function", "function": {"name", "parameters"}}], parameters compiled as above).
 * required (or `only`, one tool's name): the output is calls only; else any text, and a call
 * once "<tool_call>" appears.  parallel: one or more calls, else one.  IRIS_EINVAL naming the
 * tool for a bad entry or schema, or `only` naming no tool. */
int iris_grammar_from_tools(const char *tools_json, const char *only, int required, int parallel,
                            iris_grammar **out, iris_err *err);
void iris_grammar_free(iris_grammar *g);
int iris_grammar_n_rules(const iris_grammar *g);

/* A matcher at the start of g over vocabulary v (both must outlive it; neither is owned). */
int iris_grammar_matcher_init(iris_grammar_matcher **out, const iris_grammar *g, const iris_vocab *v,
                              iris_err *err);
void iris_grammar_matcher_free(iris_grammar_matcher *m);
/* Bit t of mask (uint32 words, iris_vocab_n(v) bits) set when token t's bytes continue a valid
 * output (possibly completing it).  End tokens are not set: see _complete. */
int iris_grammar_matcher_mask(iris_grammar_matcher *m, uint32_t *mask, iris_err *err);
/* Advance by bytes; IRIS_EINVAL (nothing changed) when they cannot continue the output. */
int iris_grammar_matcher_accept_bytes(iris_grammar_matcher *m, const char *s, size_t n, iris_err *err);
/* 1 when the bytes could be accepted now (nothing changes). */
int iris_grammar_matcher_allows(iris_grammar_matcher *m, const char *s, size_t n);
int iris_grammar_matcher_accept_token(iris_grammar_matcher *m, int token, iris_err *err);
/* 1 when the output so far is a complete value (an end token may follow). */
int iris_grammar_matcher_complete(const iris_grammar_matcher *m);
/* Masks served from the cache so far (for benchmarks). */
uint64_t iris_grammar_matcher_cache_hits(const iris_grammar_matcher *m);
/* 1 when some byte can still follow. */
int iris_grammar_matcher_can_continue(const iris_grammar_matcher *m);

#endif
