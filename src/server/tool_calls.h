/* tool_calls.h: OpenAI tool calls on the server: the request's tools, tool_choice and
 * parallel_tool_calls checked into a request and its sampling (iris_oai_parse_tools), and the
 * model's <tool_call> blocks parsed out of its text as it streams (iris_tool_parser) into
 * message.tool_calls or delta.tool_calls.
 *
 * The parser is fed the generated text in pieces of any size (a tag or a name may be split
 * anywhere) and gives, per piece, the content to send and the tool-call deltas, in OpenAI's
 * streaming shape: the first delta of a call carries index, id, type and the function's name
 * with empty arguments, the next ones argument fragments.  Text before the first call is
 * content, its trailing whitespace dropped (the chat template writes one "\n" between content
 * and a call); "<tool_call>" and what could still become it is held back, so the markup never
 * reaches content.  Fed everything at once it gives the same calls, which is how the
 * non-streamed answer is made: one parser for both.
 *
 * A Thinking model's reply is split first (iris_reply_feed): its reasoning is never parsed.
 *
 * Does not: check the arguments against the tool's parameters (the grammar made them so, see
 * model/grammar_tools.c) or render tools into the prompt (formats/chat.c,
 * chat_qwen3.c).
 */
#ifndef IRIS_SERVER_TOOL_CALLS_H
#define IRIS_SERVER_TOOL_CALLS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "server/openai.h"
#include "server/reasoning.h"

/* tools, tool_choice and parallel_tool_calls of body o into r (tools, tool_mode, tools_json,
 * tool_name) and s (tools_json, tools_required, tool_name, single_tool_call).  A 400 naming the
 * field for a bad tools entry (type, name, duplicate name, parameters not an object), an
 * unknown tool_choice or tool name, tool_choice without tools, tools on /v1/completions, and
 * tools with response_format.  Returns 0 or a negative code with *e filled. */
int iris_oai_parse_tools(json_t *o, iris_oai_request *r, iris_sampling *s, iris_oai_err *e);

typedef struct iris_tool_parser iris_tool_parser;

/* What one piece gave: content bytes (content_len 0: none) and tool-call deltas (NULL: none; a
 * new reference the caller owns). */
typedef struct iris_tool_delta {
    const char *content; /* valid until the next feed */
    size_t content_len;
    json_t *calls;
} iris_tool_delta;

/* A parser whose call ids ("call_" and 24 letters and digits) derive from seed.  NULL when out
 * of memory.  Free with iris_tool_parser_free (NULL is fine). */
iris_tool_parser *iris_tool_parser_new(uint64_t seed);
void iris_tool_parser_free(iris_tool_parser *p);
/* Feed n bytes; `final` flushes what was held back (the end of the output).  Returns 0, or
 * IRIS_ENOMEM. */
int iris_tool_parser_feed(iris_tool_parser *p, const char *s, size_t n, int final, iris_tool_delta *d);
int iris_tool_parser_n_calls(const iris_tool_parser *p);
/* message.tool_calls: [{id, type, function: {name, arguments}}] (a new reference). */
json_t *iris_tool_parser_calls(const iris_tool_parser *p);

/* A chat reply as it goes out, piece by piece (final: the last): a Thinking model's reasoning is
 * split off first (rs, reasoning.h; rs->on 0: none), then the rest's <tool_call> blocks are parsed
 * (tools; NULL: none), so reasoning never reaches the tool parser and a call made after
 * "</think>" is a tool call.  Fed the whole text at once (final), it gives the same parts. */
typedef struct iris_reply_piece {
    iris_reasoning_piece r;  /* r.reasoning: the reasoning (owned, NULL when none) */
    const char *content;     /* valid until the next feed; NULL when none */
    size_t content_len;
    json_t *calls;           /* tool-call deltas (owned by the caller), NULL when none */
} iris_reply_piece;
/* 0, or IRIS_ENOMEM.  Free with iris_reply_piece_free. */
int iris_reply_feed(iris_reasoning *rs, iris_tool_parser *tools, const char *s, size_t n, int final,
                    iris_reply_piece *out);
void iris_reply_piece_free(iris_reply_piece *p);

/* Add delta.tool_calls to a chat chunk (iris_oai_chunk's), stealing calls. */
void iris_oai_chunk_set_tool_calls(json_t *chunk, json_t *calls);
/* Make a chat.completion's message carry tool_calls (stolen) with content null when
 * content_len is 0. */
void iris_oai_response_set_tool_calls(json_t *resp, json_t *calls, size_t content_len);

#endif
