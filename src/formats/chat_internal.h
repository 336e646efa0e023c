/* chat_internal.h: the pieces the chat templates share (chat.c renders Instruct, chat_qwen3.c the
 * Thinking and plain Qwen3 templates); the tool parts of all three are the same text.
 * Appends go to an iris_sbuf (its oom flag is checked once by the caller). */
#ifndef IRIS_CHAT_INTERNAL_H
#define IRIS_CHAT_INTERNAL_H

#include <jansson.h>
#include <stddef.h>

#include "iris.h"
#include "sbuf.h"

/* The tools' system turn after "<|im_start|>system\n" and the system text + "\n\n" (the caller
 * writes those): "# Tools ..." with each tool `tool | tojson` on its own line, through
 * "</tool_call><|im_end|>\n". */
void iris_chat_put_tools(iris_sbuf *b, const json_t *tools);

/* {%- if message.tool_calls %}: each call of message mi as <tool_call>\n{"name": .., "arguments":
 * ..}\n</tool_call> (string arguments verbatim, others through tojson), a newline before each but
 * the first, and before the first when `has_content` (the template's `content` is truthy). */
int iris_chat_put_tool_calls(iris_sbuf *b, const json_t *m, size_t mi, int has_content, iris_err *err);

#endif
