/* chat.h: the chat templates of Qwen3-VL (Instruct, Thinking) and Qwen3, rendered in C.
 *
 * Input is what the server and the CLI hold: a JSON array of OpenAI-style
 * messages ({"role": ..., "content": string | [parts]}; parts of type text,
 * image / image_url, video; assistant "tool_calls", "tool" results) and the
 * tool definitions.  Output is the prompt text exactly as
 * transformers' apply_chat_template(tokenize=False) renders it with the
 * template of Qwen3-VL-2B/4B-Instruct (see chat.c), one
 * "<|vision_start|><|image_pad|><|vision_end|>" per image.  Expanding each
 * pad to the image's token count is iris_chat_tokenize's job.
 */
#ifndef IRIS_CHAT_H
#define IRIS_CHAT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "iris.h"
#include "formats/tokenizer.h"

/* Which template: the checkpoint's own, recognised by iris_chat_style_load. */
typedef enum iris_chat_style {
    IRIS_CHAT_QWEN3VL = 0,       /* Qwen3-VL-*-Instruct (chat.c); also when a checkpoint has no template */
    IRIS_CHAT_QWEN3VL_THINKING,  /* Qwen3-VL-*-Thinking: the prompt opens <think> (chat_qwen3.c) */
    IRIS_CHAT_QWEN3,             /* plain Qwen3 with its enable_thinking switch (chat_qwen3.c) */
    IRIS_CHAT_QWEN3_THINKING,    /* Qwen3-*-Thinking-2507: text only, the prompt opens <think> */
} iris_chat_style;

typedef struct iris_chat_opts {
    int add_generation_prompt; /* end with "<|im_start|>assistant\n" (Thinking: + "<think>\n") */
    int add_vision_id;         /* "Picture N: " / "Video N: " before each */
    int style;                 /* iris_chat_style */
    int no_thinking;           /* IRIS_CHAT_QWEN3: enable_thinking=False (an empty think block is given) */
} iris_chat_opts;

/* What the rendered prompt refers to, in order of appearance. */
typedef struct iris_chat_info {
    int n_images, n_videos;
} iris_chat_info;

/* Render `messages` (a JSON array) and `tools` (NULL, JSON null or an array
 * of tool objects, each rendered as transformers' `tool | tojson`, e.g.
 * {"type": "function", "function": {"name", "description", "parameters"}};
 * an empty array is no tools).  Malformed messages are IRIS_EINVAL naming
 * the message and part, a null "content" included (the template fails on
 * it; leave the key out for none).  The caller frees *out with free();
 * `info` may be NULL. */
int iris_chat_render(const json_t *messages, const json_t *tools, const iris_chat_opts *opts, char **out,
                     size_t *out_len, iris_chat_info *info, iris_err *err);

/* The Thinking and plain Qwen3 templates (chat_qwen3.c); iris_chat_render calls it for those
 * styles.  Same contract as iris_chat_render. */
int iris_chat_render_qwen3(const json_t *messages, const json_t *tools, const iris_chat_opts *opts, char **out,
                           size_t *out_len, iris_chat_info *info, iris_err *err);
/* The style of a template's text (NULL: Instruct); of a checkpoint directory: chat_template.jinja,
 * else chat_template.json, else tokenizer_config.json's "chat_template" (Instruct when none).
 * For a vision model (`vision`), a template that cannot render an image is not taken: Instruct. */
int iris_chat_style_of(const char *template_text, int vision);
int iris_chat_style_load(const char *dir, int vision);
const char *iris_chat_style_name(int style);
/* 1 when the reply opens with reasoning that ends at "</think>" (vLLM's qwen3 reasoning parser
 * applies): the Thinking styles, and plain Qwen3 unless no_thinking. */
int iris_chat_reasoning(const iris_chat_opts *opts);
/* Plain Qwen3's templates render only string content (a list of parts as '').  As vLLM does for
 * such templates (its "string" content format), callers join a message's text parts with "\n"
 * first: iris_chat_flatten_text returns that copy (caller decrefs; NULL when out of memory) and
 * counts the image and video parts it dropped in *n_media. */
int iris_chat_string_content(int style);
json_t *iris_chat_flatten_text(const json_t *messages, int *n_media);

/* Tokenize a rendered prompt, expanding its k-th pad (<|image_pad|> or
 * <|video_pad|>, in the order they appear) into image_tokens[k] copies of
 * itself (n_images must equal the number of pads).  Appends to *out.  A
 * video's prompt holds one <|video_pad|> per temporal patch (the prompt
 * builder writes them, with their timestamps). */
int iris_chat_tokenize(const iris_tok *tok, const char *prompt, size_t len, const int32_t *image_tokens,
                       size_t n_images, iris_tok_ids *out, iris_err *err);

#endif
