/* positions.h: Qwen3-VL's 3-D MRoPE position ids (QWEN3VL.md §6.5, §6.6).
 *
 * transformers' get_rope_index: the prompt is split into runs of text tokens
 * and runs of image tokens (`<|vision_start|>`/`<|vision_end|>` are text).
 * Text token k of a run starting at `cur` gets (cur+k, cur+k, cur+k); the
 * image run of an image with grid (t, gh, gw) and merge size m has
 * (gh/m)*(gw/m) tokens, row-major over the merged grid, token (a, b) at
 * (cur, cur+a, cur+b), after which cur += max(gh/m, gw/m).  rope_delta =
 * max position + 1 - prompt length; a token decoded at cache index p has
 * position p + rope_delta in all three components.
 *
 * Video: get_rope_index splits video_grid_thw into its temporal patches
 * (repeat_interleave by t, t set to 1), each one a run between its timestamp
 * text and <|vision_end|>; the prompt builder gives each temporal patch as its
 * own item of grid (1, gh, gw), so a video run is handled as an image run of
 * <|video_pad|> tokens (the t component is `cur`: the timestamps carry time).
 *
 * Owns nothing; pure functions over caller buffers.  grid_t must be 1. */
#ifndef IRIS_POSITIONS_H
#define IRIS_POSITIONS_H

#include <stdint.h>

#include "iris.h"

/* pos receives 3 rows of n positions: pos[0*n + i] = t, pos[1*n + i] = h,
 * pos[2*n + i] = w.  grid_thw holds 3 ints per image, in prompt order.  The
 * number of image tokens in each run must equal that image's merged grid
 * (runs of adjacent images are split by grid size); a mismatch is an
 * IRIS_EINVAL naming the counts.  *rope_delta may be NULL. */
int iris_pos_rope_index(const int32_t *ids, int n, int image_token_id, const int *grid_thw, int n_images,
                        int spatial_merge_size, int32_t *pos, int *rope_delta, iris_err *err);

/* The same over image and video runs (video_token_id < 0: images only); a run is
 * tokens of one kind, its item's grid from grid_thw in prompt order. */
int iris_pos_rope_index_av(const int32_t *ids, int n, int image_token_id, int video_token_id, const int *grid_thw,
                           int n_images, int spatial_merge_size, int32_t *pos, int *rope_delta, iris_err *err);

/* The position of the token at cache index p during decoding (all three
 * components equal). */
static inline int32_t iris_pos_decode(int p, int rope_delta) { return (int32_t)(p + rope_delta); }

#endif
