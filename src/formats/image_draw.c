/* image_draw.c: boxes and labels drawn onto an RGB image, and the image
 * written as PNG (libspng), for `iris detect --annotate`.
 *
 * Labels use a built-in 5x7 font of upper-case letters, digits and common
 * punctuation (lower case is drawn upper case; other characters as '?'),
 * scaled by a whole factor that grows with the image (one font pixel per
 * 256 px of the shorter side, at least 1), in white on a bar of the box's
 * colour.  Everything is clipped to the image; nothing allocates but the
 * PNG encoder. */
#include <errno.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "formats/grounding.h"

/* One glyph: 7 rows of 5 bits, the leftmost column in bit 4. */
static const char FONT_CHARS[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.,:_/()#?'\"!";
static const uint8_t FONT[][7] = {
    {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}, {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}, /* A B */
    {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}, {0x1E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1E}, /* C D */
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}, {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}, /* E F */
    {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}, {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}, /* G H */
    {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}, {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}, /* I J */
    {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}, {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}, /* K L */
    {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}, {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}, /* M N */
    {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}, {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}, /* O P */
    {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}, {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}, /* Q R */
    {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}, {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}, /* S T */
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}, {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}, /* U V */
    {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}, {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}, /* W X */
    {0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04}, {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}, /* Y Z */
    {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}, {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}, /* 0 1 */
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}, {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}, /* 2 3 */
    {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}, {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}, /* 4 5 */
    {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}, {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}, /* 6 7 */
    {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}, {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}, /* 8 9 */
    {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}, {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}, /* - . */
    {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}, {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}, /* , : */
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}, {0x01, 0x02, 0x02, 0x04, 0x08, 0x08, 0x10}, /* _ / */
    {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}, {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}, /* ( ) */
    {0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A}, {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04}, /* # ? */
    {0x04, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00}, {0x0A, 0x0A, 0x00, 0x00, 0x00, 0x00, 0x00}, /* ' " */
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04},                                             /* ! */
};

/* Box colours, one per box in turn: distinct on light and dark scenes. */
static const uint8_t PALETTE[][3] = {{230, 25, 75}, {60, 180, 75}, {0, 130, 200}, {245, 130, 48},
                                     {145, 30, 180}, {0, 128, 128}};

static void fill(iris_image *img, int x0, int y0, int x1, int y1, const uint8_t c[3]) {
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > img->width) x1 = img->width;
    if (y1 > img->height) y1 = img->height;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) memcpy(img->rgb + ((size_t)y * img->width + x) * 3, c, 3);
}

static const uint8_t *glyph(char ch) {
    if (ch >= 'a' && ch <= 'z') ch = (char)(ch - 'a' + 'A');
    if (ch == ' ') return NULL;
    const char *p = ch ? strchr(FONT_CHARS, ch) : NULL;
    return FONT[p ? p - FONT_CHARS : (long)(strchr(FONT_CHARS, '?') - FONT_CHARS)];
}

/* Text at (x, y), its top left, each font pixel s x s. */
static void text(iris_image *img, int x, int y, const char *s, int sc, const uint8_t c[3]) {
    for (; *s; s++, x += 6 * sc) {
        const uint8_t *g = glyph(*s);
        for (int r = 0; g && r < 7; r++)
            for (int col = 0; col < 5; col++)
                if (g[r] & (0x10 >> col)) fill(img, x + col * sc, y + r * sc, x + (col + 1) * sc, y + (r + 1) * sc, c);
    }
}

/* A coordinate rounded to whole pixels, kept within a pixel of the image (any double is safe). */
static int px_of(double v, int size) {
    return v != v || v < -1 ? -1 : v > size + 1 ? size + 1 : (int)(v + 0.5);
}

void iris_image_draw_boxes(iris_image *img, const iris_ground_box *b, int n, const uint8_t rgb[3], int thickness) {
    static const uint8_t white[3] = {255, 255, 255};
    int short_side = img->width < img->height ? img->width : img->height;
    int sc = short_side / 256 > 1 ? short_side / 256 : 1, t = thickness > 0 ? thickness : 1;
    for (int i = 0; i < n; i++) {
        const uint8_t *c = rgb ? rgb : PALETTE[i % (int)(sizeof PALETTE / sizeof *PALETTE)];
        int x1 = px_of(b[i].x1, img->width), y1 = px_of(b[i].y1, img->height);
        int x2 = px_of(b[i].x2, img->width), y2 = px_of(b[i].y2, img->height);
        if (b[i].is_point) { /* a cross */
            int r = 3 * sc + t;
            fill(img, x1 - r, y1 - t / 2 - 1, x1 + r + 1, y1 + (t + 1) / 2, c);
            fill(img, x1 - t / 2 - 1, y1 - r, x1 + (t + 1) / 2, y1 + r + 1, c);
            x2 = x1 + r, y1 -= r;
        } else {
            fill(img, x1, y1, x2 + 1, y1 + t, c);     /* top */
            fill(img, x1, y2 + 1 - t, x2 + 1, y2 + 1, c); /* bottom */
            fill(img, x1, y1, x1 + t, y2 + 1, c);     /* left */
            fill(img, x2 + 1 - t, y1, x2 + 1, y2 + 1, c); /* right */
        }
        if (!b[i].label[0]) continue;
        int w = (int)strlen(b[i].label) * 6 * sc + sc, h = 9 * sc;
        int ty = y1 - h >= 0 ? y1 - h : y2 + 1 < img->height - h ? y2 + 1 : y1; /* above, else below, else inside */
        fill(img, x1, ty, x1 + w, ty + h, c);
        text(img, x1 + sc, ty + sc, b[i].label, sc, white);
    }
}

int iris_image_write_png(const iris_image *img, const char *path, iris_err *err) {
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    if (!ctx) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    struct spng_ihdr ih = {.width = (uint32_t)img->width, .height = (uint32_t)img->height, .bit_depth = 8,
                           .color_type = SPNG_COLOR_TYPE_TRUECOLOR};
    size_t len = (size_t)img->width * img->height * 3, n = 0;
    int e = spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
    if (!e) e = spng_set_ihdr(ctx, &ih);
    if (!e) e = spng_encode_image(ctx, img->rgb, len, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    void *png = e ? NULL : spng_get_png_buffer(ctx, &n, &e);
    spng_ctx_free(ctx);
    if (!png) return iris_err_set(err, IRIS_EFORMAT, "%s: cannot encode the PNG: %s", path, spng_strerror(e));
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(png, 1, n, f) == n;
    int saved = errno;
    if (f && fclose(f)) ok = 0;
    free(png);
    if (!ok) return iris_err_set(err, IRIS_EIO, "%s: cannot write: %s", path, strerror(saved ? saved : EIO));
    return 0;
}
