/* prompt.h: the one prompt builder.  A multimodal prompt, ready for the
 * model: chat template → tokens with each <|image_pad|> expanded to its
 * image's token count → pixel_values and grids (each image decoded once,
 * resized and patchified with the preprocessor settings given) → 3-D MRoPE
 * positions; or a plain text prompt tokenized as is.
 *
 * Every caller builds here: the server (images as the bytes behind each
 * image_url), the CLI (files), iris_engine_submit (messages_json with
 * image_paths, or prompt_text), benchmarks (files).  The engine's settings
 * come from iris_engine_prompt_ctx (engine.h): its tokenizer, its config and
 * the preprocessor config its memory plan admits (max_pixels may be lower
 * than the model's).
 *
 * Owns: every array in iris_prompt (iris_prompt_free).  Images are given in
 * the order their parts appear in the messages. */
#ifndef IRIS_PROMPT_H
#define IRIS_PROMPT_H

#include <jansson.h>
#include <stdint.h>

#include "iris.h"
#include "formats/config.h"
#include "formats/image.h"
#include "formats/tokenizer.h"
#include "formats/video.h"

typedef struct iris_prompt {
    char *text;              /* the rendered chat template (pads not expanded; a video's timestamps and
                                per-temporal-patch pads written in); NULL for a plain text prompt */
    iris_tok_ids ids;        /* token ids, pads expanded */
    int n_images;            /* vision items, in prompt order: each image, and each temporal patch of
                                each video (grid (1, gh, gw), two real frames: get_rope_index's split) */
    int n_videos;            /* videos among them (their temporal patches count in n_images) */
    int *grid_thw;           /* 3 per item */
    float *pixel_values;     /* [n_rows, patch_dim] */
    unsigned char (*image_keys)[32]; /* per image: iris_image_prep_key (the prefix cache's content key);
                                        NULL: the engine hashes the pixel rows instead */
    int64_t n_rows;
    int32_t *pos;            /* [3, ids.n]: t, h, w rows */
    int rope_delta;
} iris_prompt;

/* Decoded pixels allowed per image, as a multiple of the resize bound (max_pixels): what is
 * decoded is bounded by what the model will use, not by Pillow's 179 Mpx. */
#define IRIS_PROMPT_DECODE_RATIO 32
/* The wall-clock budget for decoding one video when the settings give none. */
#define IRIS_PROMPT_VIDEO_SECONDS 120.0

/* What building needs from the model, and the image budget.  Every bound is checked from the
 * image's header, before anything is decoded or allocated. */
typedef struct iris_prompt_ctx {
    const iris_tok *tok;
    const iris_config *cfg;
    const iris_preprocessor_config *pc;  /* NULL: Qwen3-VL's defaults (image.h) */
    int64_t max_image_pixels;   /* images are resized to at most this many pixels; lowers pc's max_pixels
                                   (0: pc's) */
    int64_t max_decode_pixels;  /* larger images are refused before decoding (0: IRIS_PROMPT_DECODE_RATIO
                                   times the resize bound, at most image.h's IRIS_IMAGE_MAX_PIXELS_DEFAULT) */
    int64_t max_total_pixels;   /* all the images given as bytes or decoded, added up from their headers
                                   (0: no limit) */
    const json_t *tools;        /* tool definitions the chat template lists (chat.h); NULL: none */
    int chat_style;             /* the model's chat template (chat.h iris_chat_style) */
    int no_thinking;            /* a request's enable_thinking=False (plain Qwen3's template) */
    int text_only;              /* no vision tower: image and video parts are refused (IRIS_EUNSUPPORTED) */
    const iris_video_opts *video; /* video settings (NULL: iris_video_opts_default, Qwen3-VL's
                                     video_preprocessor_config.json with qwen-vl-utils' per-frame cap);
                                     a resized frame never exceeds the image resize bound */
    int64_t max_video_pixels;   /* > 0: lowers the video budget (size.longest_edge, over all frames) */
} iris_prompt_ctx;

/* The resize bound and the per-image decode bound that ctx gives (see iris_prompt_ctx). */
void iris_prompt_image_bounds(const iris_prompt_ctx *ctx, int64_t *resize_pixels, int64_t *decode_pixels);

/* One image: exactly one of path, data (n bytes of an encoded image) and image (decoded RGB,
 * not freed here).  label names it in messages ("image 2"; NULL: the path, or "image N"). */
typedef struct iris_prompt_image {
    const char *path;
    const void *data;
    size_t n;
    const iris_image *image;
    const char *label;
} iris_prompt_image;

/* messages: an OpenAI-style JSON array (chat.h) whose image parts are images[0..n_images).  On
 * an image's failure (decoding, resizing) *bad_image (when not NULL) is its index, else -1. */
int iris_prompt_build(const iris_prompt_ctx *ctx, const json_t *messages, const iris_prompt_image *images,
                      int n_images, iris_prompt *out, int *bad_image, iris_err *err);
/* One video: exactly one of path, data (n bytes of a container) and frames already decoded
 * (rgb: n_frames RGB frames of width x height, HWC, one buffer, not freed here, with their
 * source frame rate src_fps; needs no libav).  fps / max_frames > 0 replace the settings'
 * (mm_processor_kwargs, --fps, --max-frames).  label names it in messages (NULL: the path, or
 * "video N"). */
typedef struct iris_prompt_video {
    const char *path;
    const void *data;
    size_t n;
    const char *label;
    double fps;
    int max_frames;
    const uint8_t *rgb;
    int64_t n_frames;
    int width, height;
    double src_fps;
} iris_prompt_video;

/* The same with videos: messages' video parts are videos[0..n_videos), in order.  Each video
 * is decoded, sampled and resized (video.h), and its <|video_pad|> becomes, per temporal patch,
 * "<{t:.1f} seconds><|vision_start|>" + pads + "<|vision_end|>" inside the template's own
 * <|vision_start|>...<|vision_end|> (Qwen3VLProcessor's rendering, kept as transformers keeps
 * it).  On a failure *bad_part is the image's index, or n_images + the video's index. */
int iris_prompt_build_media(const iris_prompt_ctx *ctx, const json_t *messages, const iris_prompt_image *images,
                            int n_images, const iris_prompt_video *videos, int n_videos, iris_prompt *out,
                            int *bad_part, iris_err *err);
/* The video settings ctx gives (its own or the defaults, the budget lowered by
 * max_video_pixels, frames bounded by the image resize bound), with one video's overrides. */
void iris_prompt_video_opts(const iris_prompt_ctx *ctx, const iris_prompt_video *v, iris_video_opts *o);
/* A plain text prompt, tokenized as is (no chat template, no images; positions 0..n-1). */
int iris_prompt_build_text(const iris_prompt_ctx *ctx, const char *text, iris_prompt *out, iris_err *err);
void iris_prompt_free(iris_prompt *p);

/* The messages of one turn: an optional system message, then one user
 * message with n_images image parts followed by the text (the CLI's
 * prompt).  Returns a new reference (json_decref), NULL when out of memory. */
json_t *iris_prompt_one_turn(const char *system, int n_images, const char *text);
/* The same with n_videos video parts after the images. */
json_t *iris_prompt_one_turn_av(const char *system, int n_images, int n_videos, const char *text);

#endif
