/* chat.h: the Qwen3-VL-Instruct chat template, rendered in C.
 *
 * Input is what the server and the CLI hold: a JSON array of OpenAI-style
 * messages ({"role": ..., "content": string | [parts]}; parts of type text,
 * image / image_url, video).  Output is the prompt text exactly as
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

typedef struct iris_chat_opts {
    int add_generation_prompt; /* end with "<|im_start|>assistant\n" */
    int add_vision_id;         /* "Picture N: " / "Video N: " before each */
} iris_chat_opts;

/* What the rendered prompt refers to, in order of appearance. */
typedef struct iris_chat_info {
    int n_images, n_videos;
} iris_chat_info;

/* Render `messages` (a JSON array).  `tools` may be NULL, JSON null or an
 * empty array; tool definitions are not supported yet (IRIS_EUNSUPPORTED).
 * Malformed messages are IRIS_EINVAL naming the message and part.  The
 * caller frees *out with free(); `info` may be NULL. */
int iris_chat_render(const json_t *messages, const json_t *tools, const iris_chat_opts *opts, char **out,
                     size_t *out_len, iris_chat_info *info, iris_err *err);

/* Tokenize a rendered prompt, expanding its k-th pad (<|image_pad|> or
 * <|video_pad|>, in the order they appear) into image_tokens[k] copies of
 * itself (n_images must equal the number of pads).  Appends to *out.  A
 * video's prompt holds one <|video_pad|> per temporal patch (the prompt
 * builder writes them, with their timestamps). */
int iris_chat_tokenize(const iris_tok *tok, const char *prompt, size_t len, const int32_t *image_tokens,
                       size_t n_images, iris_tok_ids *out, iris_err *err);

#endif
