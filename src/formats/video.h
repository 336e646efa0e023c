/* video.h: videos in: decoding (FFmpeg's libav*) and Qwen3-VL preprocessing.
 *
 * Reproduces transformers 5.17's Qwen3VLVideoProcessor on the decoded frames:
 *  - sampling (sample_frames): n = int(total / src_fps * fps), clamped to
 *    [min_frames, max_frames] and to total; indices linspace(0, total-1, n)
 *    rounded half to even (numpy);
 *  - one size for the whole clip (the video smart_resize on the volume: factor
 *    patch*merge = 32, temporal factor 2, min/max pixels summed over the frames;
 *    with cap_pixels_per_frame, qwen-vl-utils' cap: max_pixels = n * max(min(768
 *    * 32^2, longest_edge // n), int(1.05 * shortest_edge)));
 *  - each frame resized by the image path's resize (image_resize.c: PyTorch's
 *    uint8 antialiased bicubic), the last frame repeated to an even count;
 *  - patchify (image_patch.c) with real temporal pairs: temporal patch k is
 *    frames 2k and 2k+1, grid (T/2, gh, gw).
 * The model sees each temporal patch as its own vision item of grid (1, gh, gw)
 * (get_rope_index splits video_grid_thw the same way), preceded in the prompt by
 * "<{t:.1f} seconds>" with t the mean time of its two frames (iris_video_timestamp).
 *
 * Decoding (video_decode.c, built when pkg-config finds libavformat, libavcodec,
 * libswscale and libavutil; otherwise every decode call fails with "built without
 * video support"): a path or bytes in memory (a custom AVIOContext), the first
 * video stream, its rotation (display matrix) applied, only the sampled frames
 * converted to RGB and resized at once, so memory is the resized clip.  Bounds:
 * the frame size from the header (max_frame_pixels, default 4096x2304: 8K is
 * refused), the frame count (max_total_frames), and a wall-clock budget
 * (max_decode_seconds); a long gap between sampled frames is crossed by a seek
 * to the keyframe before the next one.
 *
 * The content keys and the pixel_values rows run on the worker pool
 * (base/pool.h); the resizes run on the preparation's own work queue
 * (base/workq.h), beside the decoding for a clip (video_decode.c), never
 * holding the pool.  The same bytes for any thread count.
 *
 * Memory: iris_video_prep owns its resized frames (iris_video_prep_free). */
#ifndef IRIS_VIDEO_H
#define IRIS_VIDEO_H

#include <stddef.h>
#include <stdint.h>

#include "iris.h"
#include "image.h"

/* transformers 5.17's Qwen3VLVideoProcessor class defaults (size.shortest_edge,
 * size.longest_edge: areas summed over the sampled frames). */
#define IRIS_VIDEO_CLASS_MIN_PIXELS 131072LL
#define IRIS_VIDEO_CLASS_MAX_PIXELS 786432LL
/* Qwen3-VL-2B/4B/8B's video_preprocessor_config.json (QWEN3VL.md §1.4): what iris
 * uses when a model has no such file. */
#define IRIS_VIDEO_MIN_PIXELS_DEFAULT 4096LL
#define IRIS_VIDEO_MAX_PIXELS_DEFAULT 25165824LL
#define IRIS_VIDEO_FRAME_CAP_PATCHES 768 /* qwen-vl-utils VIDEO_FRAME_MAX_PIXELS / factor^2 */
#define IRIS_VIDEO_MAX_FRAME_PIXELS_DEFAULT (4096LL * 2304)
#define IRIS_VIDEO_MAX_TOTAL_FRAMES_DEFAULT 1000000LL

/* The sampling defaults in one line, for --help (ask, caption, run, serve). */
#define IRIS_VIDEO_HELP_LINE                                                                        \
    "Video: 2 frames a second (4 to 768), each at most 786,432 pixels (Qwen's reference per-frame cap)."

typedef struct iris_video_opts {
    double fps;                       /* frames sampled a second: 2 */
    int min_frames, max_frames;       /* 4, 768 */
    int64_t min_pixels, max_pixels;   /* size.shortest_edge / longest_edge (over all frames) */
    int cap_pixels_per_frame;         /* 1: qwen-vl-utils' per-frame cap (see the top) */
    int patch_size, merge_size, temporal_patch_size; /* 16, 2, 2 */
    float image_mean[3], image_std[3];               /* 0.5, 0.5 */
    int64_t max_frame_pixels;         /* refused from the header: 4096 * 2304 */
    int64_t max_total_frames;         /* refused from the header or the count: 1,000,000 */
    double max_decode_seconds;        /* 0: no budget */
    int seek_gap;                     /* seek when the next sampled frame is more than this many
                                         frames ahead (0: 64) */
    int64_t max_frame_resize_pixels;  /* > 0: a resized frame holds at most this many pixels (the
                                         engine's per-image bound; smart_resize again with
                                         max_pixels = this * frames when the settings give more) */
} iris_video_opts;

/* What the container says, after rotation. */
typedef struct iris_video_info {
    int width, height;        /* displayed (rotation applied) */
    int rotation;             /* 0, 90, 180, 270: degrees counterclockwise applied */
    double fps;               /* average frame rate */
    int64_t n_frames;         /* total frames (nb_frames, else counted by demuxing) */
    char codec[32];
} iris_video_info;

/* A sampled, resized clip. */
typedef struct iris_video_prep {
    iris_video_info info;
    int n_sampled;            /* frames sampled from the source */
    int64_t *indices;         /* n_sampled source indices, ascending */
    int n_frames;             /* n_sampled padded to a multiple of temporal_patch_size */
    int width, height;        /* resized */
    int grid_t, grid_h, grid_w;
    uint8_t *rgb;             /* n_frames * height * width * 3, HWC per frame, owned */
    unsigned char (*keys)[32];/* grid_t content keys made at preparation (iris_video_patch_key), owned */
    void *keys_head;          /* the settings they hash (owned) */
} iris_video_prep;

void iris_video_opts_default(iris_video_opts *o);
/* video_preprocessor_config.json's keys over o (size, fps, min_frames, max_frames,
 * cap_pixels_per_frame, patch_size, merge_size, temporal_patch_size, image_mean,
 * image_std); a missing key keeps o's value.  IRIS_EFORMAT on a wrong type. */
int iris_video_opts_parse(const char *json_text, const char *label, iris_video_opts *o, iris_err *err);
/* dir/video_preprocessor_config.json over o; a missing file changes nothing and succeeds. */
int iris_video_opts_load(const char *dir, iris_video_opts *o, iris_err *err);

/* sample_frames: how many frames and which.  idx receives up to max_frames indices
 * (caller's buffer of at least max_frames, or of total when smaller); returns n. */
int iris_video_sample(int64_t total, double src_fps, const iris_video_opts *o, int64_t *idx, iris_err *err);

/* The video smart_resize (with the per-frame cap when o says so) for n_frames sampled
 * frames of height x width. */
int iris_video_smart_resize(int n_frames, int height, int width, const iris_video_opts *o, int *out_height,
                            int *out_width, iris_err *err);

/* The time of temporal patch k, as Qwen3VLProcessor._calculate_timestamps: the mean of
 * index/fps of its first and last frame (indices padded by repeating the last). */
double iris_video_timestamp(const iris_video_prep *p, const iris_video_opts *o, int k);

/* Rows of pixel_values for temporal patch k: grid_h*grid_w rows of
 * 3*temporal_patch_size*patch_size^2 floats, rows [r0, r1) into out. */
void iris_video_patch_rows(const iris_video_prep *p, const iris_video_opts *o, int k, int64_t r0, int64_t r1,
                           float *out);
/* The content key of temporal patch k: SHA-256 of the settings, the grid and its
 * frames' resized bytes (made at preparation on the worker pool and kept; computed
 * here for other settings). 0, or -1 (libcrypto). */
int iris_video_patch_key(const iris_video_prep *p, const iris_video_opts *o, int k, unsigned char out[32]);

/* 1 when this build decodes videos (libav found at build time). */
int iris_video_supported(void);
/* Whether the bytes look like a video container (magic numbers: ISO-BMFF, Matroska/WebM,
 * AVI, GIF, MPEG-TS/PS, Ogg); used to route a media part, never to refuse one. */
int iris_video_sniff(const void *data, size_t n);

/* Open, sample, decode and resize: exactly one of path and (data, n).  label names the
 * source in messages.  On success out is filled (iris_video_prep_free). */
int iris_video_prepare(const char *path, const void *data, size_t n, const char *label, const iris_video_opts *o,
                       iris_video_prep *out, iris_err *err);
/* From frames already decoded (n_frames RGB frames of width x height, HWC, one
 * buffer) with their source fps: sampling, resize, padding as above. */
int iris_video_prepare_frames(const uint8_t *rgb, int64_t n_frames, int width, int height, double fps,
                              const iris_video_opts *o, iris_video_prep *out, iris_err *err);
void iris_video_prep_free(iris_video_prep *p);

/* Only the header: the displayed size, rotation, fps and frame count. */
int iris_video_probe(const char *path, const void *data, size_t n, const char *label, const iris_video_opts *o,
                     iris_video_info *info, iris_err *err);
/* The displayed RGB frames at the given ascending indices, unresized (tests, tools):
 * *rgb is malloc'd, n_idx * height * width * 3 bytes (caller frees). */
int iris_video_decode_frames(const char *path, const void *data, size_t n, const char *label,
                             const iris_video_opts *o, const int64_t *idx, int n_idx, uint8_t **rgb,
                             iris_video_info *info, iris_err *err);

#endif
