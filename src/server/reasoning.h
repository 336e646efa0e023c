/* reasoning.h: the reasoning of Thinking models split from the answer, as vLLM's qwen3
 * reasoning parser returns it (vllm/reasoning/qwen3_reasoning_parser.py).
 *
 * The rule, on the whole text: a "<think>" in the output is dropped with what precedes it (the
 * Thinking templates put it in the prompt, plain Qwen3 has the model write it; streamed, what
 * precedes it in its own delta); the text before
 * the first "</think>" is the reasoning, the text after it the content (null when empty); with no
 * "</think>" (a reply cut short) everything is reasoning and the content is null.  Streaming
 * gives the same split piece by piece: deltas before "</think>" are delta.reasoning_content, the
 * rest delta.content; a tail that could be the start of "</think>" waits for the next delta.
 * Applied when the model's chat template thinks (formats/chat.h iris_chat_reasoning): the
 * Thinking templates, plain Qwen3 unless the request says
 * "chat_template_kwargs": {"enable_thinking": false}.  vLLM's implicit end at a "<tool_call>"
 * followed by "<function=" (Qwen3.5's tool format) does not arise with Qwen3's JSON tool calls.
 *
 * Owns: the few bytes held back between deltas.  Plain structs, no allocation but the
 * caller-freed JSON it edits. */
#ifndef IRIS_SERVER_REASONING_H
#define IRIS_SERVER_REASONING_H

#include <jansson.h>
#include <stddef.h>

#include "iris.h"

typedef struct iris_reasoning {
    int on;             /* split at all (0: everything is content) */
    int in_content;     /* "</think>" seen */
    char held[16];      /* a tail that may begin "</think>" or "<think>" */
    size_t n_held;
} iris_reasoning;

/* One piece of streamed text: its reasoning and its content (malloc'd, NULL when empty; free
 * with iris_reasoning_piece_free). */
typedef struct iris_reasoning_piece {
    char *reasoning, *content;
    size_t reasoning_len, content_len;
} iris_reasoning_piece;

void iris_reasoning_init(iris_reasoning *r, int on);
/* Whether the request turns thinking off: body's chat_template_kwargs.enable_thinking == false. */
int iris_reasoning_disabled_by(const json_t *body);

/* The whole text: *reasoning (NULL when none) and *content (NULL when empty) as ranges of text. */
void iris_reasoning_split(const char *text, size_t n, const char **reasoning, size_t *reasoning_len,
                          const char **content, size_t *content_len);

/* A streamed delta of n bytes (final: the last one, held bytes are let go).  A piece may hold
 * both parts (the delta that holds "</think>"), or neither (all held back).  0, or IRIS_ENOMEM. */
int iris_reasoning_feed(iris_reasoning *r, const char *text, size_t n, int final, iris_reasoning_piece *out);
void iris_reasoning_piece_free(iris_reasoning_piece *p);

/* Move a chat response's or chunk's text into the split: choices[0].message (or .delta) gets
 * "reasoning_content" and its "content" replaced (null when empty; a chunk leaves an absent part
 * out).  Returns o. */
json_t *iris_reasoning_apply(json_t *o, int chunk, const char *reasoning, size_t reasoning_len, const char *content,
                             size_t content_len);

#endif
