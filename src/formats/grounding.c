/* grounding.c: boxes and points out of a Qwen3-VL grounding answer, and
 * their conversion to pixels.
 *
 * Parsing: every '{' of the text starts a candidate; its matching '}' is
 * found with strings and escapes respected, and the span is given to
 * jansson.  An object with "bbox_2d" (four numbers) or "point_2d" (two)
 * is taken, with its "label" when that is a string, and the scan goes on
 * after it; any other object (or broken JSON) is stepped into, so an
 * answer wrapped as {"objects": [{...}, ...]}, a list, ```json fences or
 * prose around the JSON all give the same boxes.  A truncated last object
 * (max_tokens reached) is dropped, the ones before it kept.
 *
 * Coordinates.  Qwen3-VL answers on a 0-1000 scale relative to the image
 * it was shown, in x1, y1, x2, y2 order (Qwen2.5-VL answered in absolute
 * pixels of the resized image; that difference is what users of other
 * engines trip on).  The image the model sees is the original resized by
 * smart_resize (formats/image_resize.c): scaled as a whole, each side
 * rounded to a multiple of 32, never cropped or padded, so a point at
 * 1/1000ths of the resized image's width is at the same fraction of the
 * original's (up to the rounding, under half a patch).  Pixels of the
 * original are therefore x * width / 1000 and y * height / 1000 with the
 * original's width and height, which is what Qwen's own cookbook does
 * (QwenLM/Qwen3-VL cookbooks/2d_grounding.ipynb, plot_bounding_boxes:
 * abs_x1 = int(bbox_2d[0] / 1000 * width) with width, height = the
 * original image's size); no resized size enters.  We keep fractions
 * (no int truncation) until the caller rounds. */
#include "formats/grounding.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

/* The index of the '}' that closes the '{' at s[0], or -1. */
static long match_brace(const char *s) {
    int depth = 0, in_str = 0;
    for (long i = 0; s[i]; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\' && s[i + 1]) i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{') {
            depth++;
        } else if (c == '}' && --depth == 0) {
            return i;
        }
    }
    return -1;
}

/* k finite numbers of a JSON array into v; 0, or -1 when it is not that. */
static int numbers(const json_t *a, int k, double *v) {
    if (!json_is_array(a) || (int)json_array_size(a) != k) return -1;
    for (int i = 0; i < k; i++) {
        const json_t *x = json_array_get(a, (size_t)i);
        if (!json_is_number(x)) return -1;
        v[i] = json_number_value(x);
        if (!isfinite(v[i])) return -1;
    }
    return 0;
}

/* The box or point of one JSON object: 1 when it is one, else 0. */
static int box_of(const json_t *o, iris_ground_box *b) {
    double v[4];
    memset(b, 0, sizeof *b);
    if (!numbers(json_object_get(o, "bbox_2d"), 4, v)) {
        b->x1 = v[0], b->y1 = v[1], b->x2 = v[2], b->y2 = v[3];
    } else if (!numbers(json_object_get(o, "point_2d"), 2, v)) {
        b->is_point = 1;
        b->x1 = b->x2 = v[0], b->y1 = b->y2 = v[1];
    } else {
        return 0;
    }
    const char *label = json_string_value(json_object_get(o, "label"));
    if (label) { /* cut to fit at a character's start, so the label stays valid UTF-8 */
        size_t n = strlen(label);
        if (n > sizeof b->label - 1) n = sizeof b->label - 1;
        while (n > 0 && ((unsigned char)label[n] & 0xC0) == 0x80) n--;
        memcpy(b->label, label, n);
        b->label[n] = 0;
    }
    return 1;
}

int iris_ground_parse(const char *text, iris_ground_box *out, int max) {
    int n = 0;
    if (!text) return 0;
    for (const char *p = strchr(text, '{'); p; p = strchr(p, '{')) {
        long end = match_brace(p);
        if (end < 0) break; /* unclosed: a truncated answer */
        json_t *o = json_loadb(p, (size_t)end + 1, JSON_DECODE_ANY, NULL);
        iris_ground_box b;
        int is_box = o && json_is_object(o) && box_of(o, &b);
        json_decref(o);
        if (is_box) {
            if (n < max) out[n] = b;
            n++;
            p += end + 1;
        } else {
            p++; /* step inside: {"objects": [...]} holds the boxes */
        }
    }
    return n;
}

static double clampd(double v, double hi) {
    return v < 0 ? 0 : v > hi ? hi : v;
}

void iris_ground_to_pixels(iris_ground_box *b, int n, int width, int height) {
    for (int i = 0; i < n; i++) {
        double x1 = clampd(b[i].x1 * width / 1000.0, width), x2 = clampd(b[i].x2 * width / 1000.0, width);
        double y1 = clampd(b[i].y1 * height / 1000.0, height), y2 = clampd(b[i].y2 * height / 1000.0, height);
        b[i].x1 = fmin(x1, x2), b[i].x2 = fmax(x1, x2);
        b[i].y1 = fmin(y1, y2), b[i].y2 = fmax(y1, y2);
    }
}
