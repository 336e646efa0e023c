/* image.h: images in: decoding (JPEG, PNG, WebP) and Qwen3-VL preprocessing.
 *
 * Reproduces what transformers 5.17's default image path computes
 * (QWEN3VL.md §4): torchvision.io.decode_image(mode=RGB) → smart_resize →
 * PyTorch's uint8 antialiased bicubic (int16 weights) → (x - mean')/std' in
 * fp32 → patchify into [N, C*T*P*P] rows in merge-window order with the
 * frame duplicated along the temporal axis.
 *
 * Files: image.c (format sniffing, limits, EXIF, the decode entry points),
 * image_decode.c (the three codecs), image_resize.c (smart_resize and the
 * resize), image_patch.c (normalize + patchify, whole or by rows).
 *
 * Memory: a decoded or resized image is one malloc'd HWC RGB buffer owned by
 * the iris_image (iris_image_free).  The float32 pixel_values of a big image
 * are large (a 12 MP photo gives ~290 MB), so the engine should keep the
 * resized uint8 image and fill rows on the fly with iris_image_patch_rows;
 * iris_image_preprocess materializes them for tools and tests. */
#ifndef IRIS_IMAGE_H
#define IRIS_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "iris.h"

/* Pillow's DecompressionBombError threshold (2 * MAX_IMAGE_PIXELS). */
#define IRIS_IMAGE_MAX_PIXELS_DEFAULT 178956970LL
/* QWEN3VL.md §1.4: size.shortest_edge / size.longest_edge are areas. */
#define IRIS_IMAGE_MIN_PIXELS_DEFAULT 65536LL
#define IRIS_IMAGE_MAX_RESIZE_PIXELS_DEFAULT 16777216LL
#define IRIS_IMAGE_MAX_ASPECT 200

typedef enum iris_image_format {
    IRIS_IMAGE_UNKNOWN = 0,
    IRIS_IMAGE_JPEG,
    IRIS_IMAGE_PNG,
    IRIS_IMAGE_WEBP,
} iris_image_format;

/* An 8-bit RGB image, rows top to bottom, pixels interleaved (HWC). */
typedef struct iris_image {
    int width, height;
    uint8_t *rgb; /* width * height * 3 bytes, owned */
} iris_image;

typedef struct iris_image_decode_opts {
    int64_t max_pixels; /* refused from the header before decoding; default 178,956,970 */
    int exif_rotate;    /* apply the EXIF Orientation tag (JPEG APP1, PNG eXIf); default 1 */
} iris_image_decode_opts;

typedef struct iris_image_prep_opts {
    int64_t min_pixels, max_pixels; /* smart_resize areas: 65,536 / 16,777,216 */
    int patch_size;                 /* 16 */
    int merge_size;                 /* 2 */
    int temporal_patch_size;        /* 2: the frame is repeated this many times */
    float image_mean[3], image_std[3]; /* 0.5, 0.5: x -> (x - 127.5) / 127.5 */
} iris_image_prep_opts;

/* One preprocessed image: the resized uint8 image and its patch grid. */
typedef struct iris_image_prep {
    iris_image resized;  /* grid_h*patch x grid_w*patch, owned */
    int grid_t, grid_h, grid_w; /* in patches; grid_t = 1 for an image */
} iris_image_prep;

/* The content key of a prepared image: SHA-256 (sha256.h, in pieces on several cores) of the
 * preprocessing settings, the grid, the resized size and its uint8 RGB bytes: everything the pixel
 * rows are made of (iris_image_patch_rows), in an eighth of their bytes.  0, or -1 (libcrypto). */
int iris_image_prep_key(const iris_image_prep *p, const iris_image_prep_opts *o, unsigned char out[32]);

void iris_image_decode_opts_default(iris_image_decode_opts *o);
void iris_image_prep_opts_default(iris_image_prep_opts *o);

/* From the first bytes (magic numbers; the file name is never consulted). */
iris_image_format iris_image_sniff(const void *data, size_t n);
/* Decode to RGB.  `label` names the source in messages (a path, "data: URL
 * #2", ...).  Alpha is dropped without compositing, 16-bit samples keep
 * their high byte, CMYK/YCCK JPEGs are converted as torchvision does.  On
 * success out->rgb is malloc'd; free with iris_image_free. */
int iris_image_decode_mem(const void *data, size_t n, const char *label, const iris_image_decode_opts *o,
                          iris_image *out, iris_err *err);
int iris_image_decode_file(const char *path, const iris_image_decode_opts *o, iris_image *out, iris_err *err);
void iris_image_free(iris_image *img);

/* Only the header: width and height as stored (before EXIF rotation). */
int iris_image_probe_mem(const void *data, size_t n, const char *label, iris_image_format *fmt, int *width,
                         int *height, iris_err *err);

/* The EXIF Orientation (1..8) in a TIFF-structured Exif block ("II*\0" or
 * "MM\0*" first; a leading "Exif\0\0" is skipped), or 0 when absent or
 * malformed.  Bounds-checked against n. */
int iris_image_exif_orientation(const uint8_t *exif, size_t n);
/* Returns a new image with orientation o applied (o = 1 or 0: a copy). */
int iris_image_orient(const iris_image *src, int o, iris_image *dst, iris_err *err);

/* QWEN3VL.md §4.2: round-half-to-even onto multiples of factor, then scaled
 * into [min_pixels, max_pixels].  Fails when max(h,w)/min(h,w) > 200. */
int iris_image_smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels,
                            int *out_height, int *out_width, iris_err *err);

/* PyTorch's uint8 antialiased bicubic (a = -0.5) with int16 weights: the
 * width pass first into a uint8 buffer, then the height pass; a pass whose
 * size is unchanged is skipped.  dst->rgb is malloc'd. */
int iris_image_resize_bicubic(const iris_image *src, int out_width, int out_height, iris_image *dst,
                              iris_err *err);

/* smart_resize + resize: the resized uint8 image and the grid. */
int iris_image_prepare(const iris_image *src, const iris_image_prep_opts *o, iris_image_prep *out, iris_err *err);
void iris_image_prep_free(iris_image_prep *p);

/* Rows of pixel_values for one prepared image: N = grid_t*grid_h*grid_w rows
 * of D = 3 * temporal_patch_size * patch_size^2 floats. */
int64_t iris_image_prep_rows(const iris_image_prep *p);
int iris_image_row_dim(const iris_image_prep_opts *o);
/* Fills rows [r0, r1) into out ((r1 - r0) * D floats). */
void iris_image_patch_rows(const iris_image_prep *p, const iris_image_prep_opts *o, int64_t r0, int64_t r1,
                           float *out);

/* The same rows from T = temporal_patch_size frames of width x (grid_h * patch) pixels,
 * frames[t] in temporal slot t (at most 64 slots): a video's temporal patch. */
void iris_image_patch_frames(const uint8_t *const *frames, int width, int grid_h, int grid_w,
                             const iris_image_prep_opts *o, int64_t r0, int64_t r1, float *out);

/* Several images as one request: decode each file, prepare, and return the
 * concatenated pixel_values (malloc'd, caller frees), grid_thw (3 ints per
 * image, malloc'd, caller frees) and, when keys is not NULL, each image's
 * iris_image_prep_key (malloc'd, n_images of them, caller frees). */
int iris_image_preprocess_files(const char *const *paths, int n_images, const iris_image_decode_opts *dopts,
                                const iris_image_prep_opts *popts, float **pixel_values, int64_t *n_rows,
                                int **grid_thw, unsigned char (**keys)[32], iris_err *err);

#endif
