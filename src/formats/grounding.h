/* grounding.h: Qwen3-VL's grounding answers: boxes and points read out of
 * the model's text, converted to pixels of the image, and drawn.
 *
 * The model answers a grounding prompt with JSON objects such as
 *     {"bbox_2d": [x1, y1, x2, y2], "label": "red car"}
 *     {"point_2d": [x, y], "label": "cup"}
 * on a 0-1000 scale relative to the image (grounding.c says why that maps
 * onto the original image), alone or in a list, often inside ```json
 * fences.  The parser is lenient about that wrapping and strict about the
 * numbers: a box needs four finite numbers, a point two.
 *
 * Drawing (image_draw.c): rectangles and labels in a built-in 5x7 font onto
 * an iris_image, and PNG output with libspng. */
#ifndef IRIS_GROUNDING_H
#define IRIS_GROUNDING_H

#include "formats/image.h"
#include "iris.h"

#define IRIS_GROUND_LABEL_MAX 128

typedef struct iris_ground_box {
    int is_point;                      /* point_2d: x1, y1 hold the point (x2 = x1, y2 = y1) */
    double x1, y1, x2, y2;             /* as answered (0-1000), or in pixels after _to_pixels */
    char label[IRIS_GROUND_LABEL_MAX]; /* "" when the answer gave none */
} iris_ground_box;

/* Every bbox_2d / point_2d object in `text`, in order of appearance, into
 * out[0..max); returns how many were found (may exceed max: only max are
 * written).  Objects may sit in a JSON list, one after another, inside
 * ```json fences or among prose; anything that is not such an object is
 * skipped. */
int iris_ground_parse(const char *text, iris_ground_box *out, int max);

/* 0-1000 to pixels of a width x height image (x * width / 1000), clamped
 * to the image, corners ordered so that x1 <= x2 and y1 <= y2. */
void iris_ground_to_pixels(iris_ground_box *b, int n, int width, int height);

/* Rectangles (points: a small cross) of `thickness` px in colour rgb[3],
 * each with its label above it (below when there is no room) in the 5x7
 * font, drawn onto img in place. */
void iris_image_draw_boxes(iris_image *img, const iris_ground_box *b, int n, const uint8_t rgb[3], int thickness);

/* img as an 8-bit RGB PNG at path. */
int iris_image_write_png(const iris_image *img, const char *path, iris_err *err);

#endif
