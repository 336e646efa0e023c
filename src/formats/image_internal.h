/* image_internal.h: what image.c, image_decode.c and image_resize.c share.
 * Not part of the module's interface (see image.h). */
#ifndef IRIS_IMAGE_INTERNAL_H
#define IRIS_IMAGE_INTERNAL_H

#include "image.h"

/* Each decoder: check the header against o->max_pixels before allocating,
 * decode to RGB into out (malloc'd), and report the EXIF orientation it saw
 * (0 when none).  Messages name `label`. */
int iris_image_jpeg_decode(const uint8_t *data, size_t n, const char *label, const iris_image_decode_opts *o,
                           iris_image *out, int *orientation, iris_err *err);
int iris_image_png_decode(const uint8_t *data, size_t n, const char *label, const iris_image_decode_opts *o,
                          iris_image *out, int *orientation, iris_err *err);
int iris_image_webp_decode(const uint8_t *data, size_t n, const char *label, const iris_image_decode_opts *o,
                           iris_image *out, iris_err *err);

int iris_image_jpeg_probe(const uint8_t *data, size_t n, const char *label, int *w, int *h, iris_err *err);
int iris_image_png_probe(const uint8_t *data, size_t n, const char *label, int *w, int *h, iris_err *err);
int iris_image_webp_probe(const uint8_t *data, size_t n, const char *label, int *w, int *h, iris_err *err);

/* The header checks every decoder applies: zero size, pixel cap. */
int iris_image_check_size(const char *label, const char *what, int64_t w, int64_t h, int64_t max_pixels,
                          iris_err *err);

#endif
