/* openai.h: OpenAI's request and response JSON for the server.
 *
 * The request parser is a pure function: bytes of a POST body in, either a
 * validated iris_oai_request or an iris_oai_err (HTTP status, OpenAI error
 * type, the offending parameter, a message naming the value) out.  It does
 * no I/O and knows nothing of the model: image URLs are collected, not
 * fetched; the model name is kept, not checked (http.c does both).  This is
 * the surface the fuzz target tests/fuzz/fuzz_openai_request.c exercises.
 *
 * The builders produce the response bodies and SSE chunk payloads in the
 * shapes OpenAI's clients parse (chat.completion, chat.completion.chunk,
 * text_completion) and the error body {"error": {message, type, param,
 * code}}.
 */
#ifndef IRIS_SERVER_OPENAI_H
#define IRIS_SERVER_OPENAI_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "iris.h"

#define IRIS_OAI_MAX_STOP 16
#define IRIS_OAI_MAX_IMAGES 64
#define IRIS_OAI_MAX_VIDEOS 8
#define IRIS_OAI_MAX_TOP_LOGPROBS 20

/* An error for the client: status 400/401/404/413/503..., OpenAI's type
 * ("invalid_request_error", "authentication_error", "not_found_error",
 * "server_error", ...), the parameter ("" when none) and a code ("" when
 * none). */
typedef struct iris_oai_err {
    int status;
    char type[40];
    char param[96];
    char code[40];
    char message[1024];
} iris_oai_err;

typedef enum iris_oai_kind { IRIS_OAI_CHAT = 0, IRIS_OAI_COMPLETION = 1 } iris_oai_kind;

/* A validated request; everything owned is released by
 * iris_oai_request_free.  Its sampling parameters are not here: the parser
 * writes them straight into the caller's iris_sampling (below). */
typedef struct iris_oai_request {
    iris_oai_kind kind;
    char *model;             /* NULL when absent */
    json_t *messages;        /* chat: the messages array (a reference) */
    char *prompt;            /* completions: the prompt text */
    int n_images;
    char *image_urls[IRIS_OAI_MAX_IMAGES]; /* in order of appearance */
    int n_videos;
    char *video_urls[IRIS_OAI_MAX_VIDEOS]; /* video_url parts, in order of appearance */
    double video_fps;        /* mm_processor_kwargs.fps (0: the model's) */
    int video_max_frames;    /* mm_processor_kwargs.max_frames (0: the model's) */
    int stream, include_usage;
    json_t *body;            /* the parsed body (a reference): the stop strings point into it */
    char *json_schema;       /* response_format's schema as JSON text ({"type":"object"} for json_object),
                              * NULL for text; the sampling's json_schema points here */
    json_t *tools;           /* chat: the tools array as given (a reference; the prompt lists them), or NULL */
    int tool_mode;           /* IRIS_OAI_TOOLS_*: whether calls are constrained and parsed (tool_calls.h) */
    char *tools_json;        /* the tools as JSON text when calls are constrained (the sampling's tools_json) */
    char *tool_name;         /* tool_choice's function name, else NULL (the sampling's tool_name) */
} iris_oai_request;

/* OFF: no tools, or tool_choice "none" (the prompt still lists the tools; the answer is text).
 * AUTO: text or calls.  REQUIRED: calls only ("required" or a named function). */
enum { IRIS_OAI_TOOLS_OFF = 0, IRIS_OAI_TOOLS_AUTO = 1, IRIS_OAI_TOOLS_REQUIRED = 2 };

/* Parse and validate a body of `len` bytes (need not be NUL-terminated).
 * Returns 0 and fills *out (free with iris_oai_request_free, also after a
 * failure), or a negative code with *e filled (status 400).  The sampling
 * fields the body gives are written over what *sampling holds (the model's
 * generation_config.json defaults, iris_request_params_default); what it
 * leaves out keeps its default, as vLLM does.  OpenAI's temperature turns
 * sampling on (> 0) or off (0); top_k -1 is off (0); a negative seed is
 * folded into [0, INT64_MAX] (the engine reads < 0 as "from the clock");
 * the stop strings and json_schema stay valid while *out lives. */
int iris_oai_parse(const char *body, size_t len, iris_oai_kind kind, iris_sampling *sampling, iris_oai_request *out,
                   iris_oai_err *e);
void iris_oai_request_free(iris_oai_request *r);

/* Fill *e; returns `status` negated (so `return iris_oai_fail(...)` works). */
int iris_oai_fail(iris_oai_err *e, int status, const char *type, const char *param, const char *code,
                  const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* {"error": {...}} as a malloc'd string (caller frees). */
char *iris_oai_error_body(const iris_oai_err *e);

/* One token's log-probabilities, for the logprobs fields. */
typedef struct iris_oai_logprob {
    const char *token;
    size_t token_len;
    float logprob;
    int n_top;
    const char *top_tokens[IRIS_OAI_MAX_TOP_LOGPROBS];
    size_t top_lens[IRIS_OAI_MAX_TOP_LOGPROBS];
    float top_logprobs[IRIS_OAI_MAX_TOP_LOGPROBS];
} iris_oai_logprob;

/* Chat: a logprobs.content entry (token, logprob, bytes, top_logprobs).
 * Completions: appended to a logprobs object {tokens, token_logprobs,
 * top_logprobs, text_offset}. New references. */
json_t *iris_oai_chat_logprob(const iris_oai_logprob *lp);
void iris_oai_completion_logprob_add(json_t *logprobs, const iris_oai_logprob *lp, size_t text_offset);
json_t *iris_oai_completion_logprobs_new(void);

/* The whole non-streamed answer.  `logprobs` may be NULL (JSON null); it is
 * stolen.  Returns a new reference. */
json_t *iris_oai_response(iris_oai_kind kind, const char *id, int64_t created, const char *model, const char *text,
                          size_t text_len, const char *finish, json_t *logprobs, int prompt_tokens,
                          int completion_tokens);

/* One SSE chunk's JSON.  `role` (first chat chunk only), `text` (NULL: no
 * content), `finish` (NULL: null), `logprobs` (NULL: null; stolen).
 * `usage_null` adds "usage": null (stream_options.include_usage). */
json_t *iris_oai_chunk(iris_oai_kind kind, const char *id, int64_t created, const char *model, const char *role,
                       const char *text, size_t text_len, const char *finish, json_t *logprobs, int usage_null);
/* The final usage-only chunk (choices: []). */
json_t *iris_oai_usage_chunk(iris_oai_kind kind, const char *id, int64_t created, const char *model,
                             int prompt_tokens, int completion_tokens);

/* "data: <json>\n\n" as a malloc'd string; decrefs j. */
char *iris_oai_sse(json_t *j, size_t *len);

#endif
