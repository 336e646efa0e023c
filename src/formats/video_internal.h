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
/* The last sampled frame repeated up to n_frames. */
void iris_video_pad(iris_video_prep *p);

#endif
