/* video_internal.h: what video.c and video_decode.c share.  Not part of the
 * module's interface (see video.h). */
#ifndef IRIS_VIDEO_INTERNAL_H
#define IRIS_VIDEO_INTERNAL_H

#include "video.h"

/* Sampling, the resize and the frame buffer for a clip of this (displayed) size:
 * out->indices, n_sampled, n_frames, width, height, grid and rgb.  On failure the
 * caller frees out (iris_video_prep_free). */
int iris_video_plan(const iris_video_info *info, const iris_video_opts *o, iris_video_prep *out, iris_err *err);
/* Sampled frame j (displayed RGB of width x height) resized into its slot. */
int iris_video_put_frame(iris_video_prep *p, int j, const uint8_t *rgb, int width, int height, iris_err *err);
/* After the last frame: the last sampled frame repeated up to n_frames, then every temporal
 * patch's content key (iris_video_keys). */
int iris_video_finish(iris_video_prep *p, const iris_video_opts *o, iris_err *err);
/* Every temporal patch's content key, on the pool, kept in p->keys (with the settings' head
 * they hash, so iris_video_patch_key gives them only for the same settings). */
int iris_video_keys(iris_video_prep *p, const iris_video_opts *o, iris_err *err);

#endif
