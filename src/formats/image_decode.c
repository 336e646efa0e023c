/* image_decode.c: the three codecs behind iris_image_decode_mem: libjpeg-turbo,
 * libspng and libwebp, each producing 8-bit RGB as torchvision.io.decode_image
 * (mode=ImageReadMode.RGB) does in torchvision 0.26.
 *
 * What "as torchvision does" means, per format (verified against
 * tests/fixtures/images/refs.json):
 *  - JPEG: libjpeg defaults (islow IDCT, fancy upsampling) to JCS_RGB; CMYK
 *    and YCCK are decoded as CMYK and converted with Pillow's formula on
 *    Adobe-inverted data: R = k - (k*(255-c) rounded /255), clamped.  A file
 *    that ends early is an error (not a grey-padded image); corrupt-data
 *    warnings are not errors (libjpeg recovers, torchvision returns it).
 *  - PNG: colour from the file, alpha and tRNS ignored, palette looked up
 *    (indices past the palette give black, like libpng's zeroed palette),
 *    gray of 1/2/4 bits scaled by replication (x*255/(2^d-1)), 16-bit
 *    samples shifted right by 8 (torchvision returns uint16; its own
 *    to_dtype(uint8, scale=True) and Pillow both keep the high byte).
 *  - WebP: WebPDecodeRGB: alpha dropped.
 * Each decoder checks the header size against the pixel cap before
 * allocating the image. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <spng.h>
#include <webp/decode.h>

#include "err.h"
#include "image_internal.h"

/* ---- JPEG ---------------------------------------------------------------- */

typedef struct jpeg_errctx {
    struct jpeg_error_mgr pub; /* first: libjpeg sees only this */
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_errctx;

static void jpeg_error_exit_cb(j_common_ptr c) {
    jpeg_errctx *e = (jpeg_errctx *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

/* Warnings (corrupt data that libjpeg recovers from) stay quiet. */
static void jpeg_output_message_cb(j_common_ptr c) { (void)c; }

static void src_init(j_decompress_ptr c) { (void)c; }
static void src_term(j_decompress_ptr c) { (void)c; }

/* The whole file is in memory: running out means the file is truncated. */
static boolean src_fill(j_decompress_ptr c) {
    jpeg_errctx *e = (jpeg_errctx *)c->err;
    snprintf(e->msg, sizeof e->msg, "file is truncated (the data ends before the image does)");
    longjmp(e->jb, 1);
    return FALSE;
}

static void src_skip(j_decompress_ptr c, long n) {
    struct jpeg_source_mgr *s = c->src;
    if (n <= 0) return;
    if ((size_t)n > s->bytes_in_buffer) {
        jpeg_errctx *e = (jpeg_errctx *)c->err;
        snprintf(e->msg, sizeof e->msg, "file is truncated (a marker segment runs past the end)");
        longjmp(e->jb, 1);
    }
    s->next_input_byte += n;
    s->bytes_in_buffer -= (size_t)n;
}

typedef struct jpeg_job {
    struct jpeg_decompress_struct cinfo;
    jpeg_errctx jerr;
    struct jpeg_source_mgr src;
    uint8_t *pixels;
    uint8_t *cmyk_row;
} jpeg_job;

static void jpeg_job_begin(jpeg_job *j, const uint8_t *data, size_t n) {
    memset(j, 0, sizeof *j);
    j->cinfo.err = jpeg_std_error(&j->jerr.pub);
    j->jerr.pub.error_exit = jpeg_error_exit_cb;
    j->jerr.pub.output_message = jpeg_output_message_cb;
    j->src.init_source = src_init;
    j->src.fill_input_buffer = src_fill;
    j->src.skip_input_data = src_skip;
    j->src.resync_to_restart = jpeg_resync_to_restart;
    j->src.term_source = src_term;
    j->src.next_input_byte = data;
    j->src.bytes_in_buffer = n;
}

/* torchvision decode_jpeg.cpp / Pillow Convert.c: inverted (Adobe) CMYK to RGB. */
static inline uint8_t cmyk_channel(int k, int cmy) {
    int v = k * cmy + 128;
    v = ((v >> 8) + v) >> 8;
    int r = k - v;
    return (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
}

static int jpeg_run(jpeg_job *j, const uint8_t *data, size_t n, const char *label, const iris_image_decode_opts *o,
                    iris_image *out, int *orientation, int header_only, iris_err *err) {
    struct jpeg_decompress_struct *ci = &j->cinfo;
    jpeg_create_decompress(ci);
    ci->src = &j->src;
    (void)data;
    (void)n;
    jpeg_save_markers(ci, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(ci, TRUE);
    int rc = iris_image_check_size(label, "JPEG", ci->image_width, ci->image_height,
                                   o ? o->max_pixels : INT64_MAX, err);
    if (rc) return rc;
    out->width = (int)ci->image_width;
    out->height = (int)ci->image_height;
    if (header_only) return 0;
    if (orientation) {
        *orientation = 0;
        for (jpeg_saved_marker_ptr m = ci->marker_list; m; m = m->next)
            if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && memcmp(m->data, "Exif\0\0", 6) == 0) {
                *orientation = iris_image_exif_orientation(m->data, m->data_length);
                break;
            }
    }
    int cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
    ci->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(ci);
    if ((int)ci->output_width != out->width || (int)ci->output_height != out->height ||
        ci->output_components != (cmyk ? 4 : 3))
        return iris_err_set(err, IRIS_EFORMAT, "%s: JPEG decoder output %ux%ux%d, expected %dx%dx%d", label,
                            ci->output_width, ci->output_height, ci->output_components, out->width, out->height,
                            cmyk ? 4 : 3);
    size_t W = (size_t)out->width, stride = W * 3;
    j->pixels = malloc(stride * (size_t)out->height);
    if (cmyk) j->cmyk_row = malloc(W * 4);
    if (!j->pixels || (cmyk && !j->cmyk_row))
        return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory for a %dx%d image", label, out->width, out->height);
    while (ci->output_scanline < ci->output_height) {
        if (cmyk) {
            uint8_t *dst = j->pixels + (size_t)ci->output_scanline * stride;
            JSAMPROW row = j->cmyk_row;
            if (jpeg_read_scanlines(ci, &row, 1) != 1) continue;
            for (size_t x = 0; x < W; x++) {
                const uint8_t *p = j->cmyk_row + 4 * x;
                dst[3 * x + 0] = cmyk_channel(p[3], 255 - p[0]);
                dst[3 * x + 1] = cmyk_channel(p[3], 255 - p[1]);
                dst[3 * x + 2] = cmyk_channel(p[3], 255 - p[2]);
            }
        } else {
            JSAMPROW rows[16];
            unsigned left = ci->output_height - ci->output_scanline;
            unsigned k = left < 16 ? left : 16;
            for (unsigned i = 0; i < k; i++) rows[i] = j->pixels + (size_t)(ci->output_scanline + i) * stride;
            jpeg_read_scanlines(ci, rows, k);
        }
    }
    jpeg_finish_decompress(ci);
    out->rgb = j->pixels;
    j->pixels = NULL;
    return 0;
}

static int jpeg_do(const uint8_t *data, size_t n, const char *label, const iris_image_decode_opts *o,
                   iris_image *out, int *orientation, int header_only, iris_err *err) {
    jpeg_job *j = calloc(1, sizeof *j); /* on the heap: nothing below setjmp lives in registers */
    if (!j) return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", label);
    jpeg_job_begin(j, data, n);
    int rc;
    if (setjmp(j->jerr.jb)) {
        rc = iris_err_set(err, IRIS_EFORMAT, "%s: bad JPEG: %s", label, j->jerr.msg);
    } else {
        rc = jpeg_run(j, data, n, label, o, out, orientation, header_only, err);
    }
    jpeg_destroy_decompress(&j->cinfo);
    free(j->pixels);
    free(j->cmyk_row);
    free(j);
    if (rc) {
        out->rgb = NULL;
        out->width = out->height = 0;
    }
    return rc;
}

int iris_image_jpeg_decode(const uint8_t *data, size_t n, const char *label, const iris_image_decode_opts *o,
                           iris_image *out, int *orientation, iris_err *err) {
    return jpeg_do(data, n, label, o, out, orientation, 0, err);
}

int iris_image_jpeg_probe(const uint8_t *data, size_t n, const char *label, int *w, int *h, iris_err *err) {
    iris_image tmp = {0};
    int rc = jpeg_do(data, n, label, NULL, &tmp, NULL, 1, err);
    *w = tmp.width;
    *h = tmp.height;
    return rc;
}

/* ---- PNG ----------------------------------------------------------------- */

static spng_ctx *png_open(const uint8_t *data, size_t n, const char *label, struct spng_ihdr *ihdr, iris_err *err) {
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) {
        iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", label);
        return NULL;
    }
    /* Ancillary chunks (text, ICC, eXIf) are small in real files; cap them
     * so a crafted file cannot make us cache gigabytes. */
    spng_set_chunk_limits(ctx, 64u << 20, 64u << 20);
    int e = spng_set_png_buffer(ctx, data, n);
    if (!e) e = spng_get_ihdr(ctx, ihdr);
    if (e) {
        iris_err_set(err, IRIS_EFORMAT, "%s: bad PNG: %s", label, spng_strerror(e));
        spng_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

int iris_image_png_probe(const uint8_t *data, size_t n, const char *label, int *w, int *h, iris_err *err) {
    struct spng_ihdr ihdr;
    spng_ctx *ctx = png_open(data, n, label, &ihdr, err);
    if (!ctx) return err ? err->code : IRIS_EFORMAT;
    spng_ctx_free(ctx);
    *w = (int)ihdr.width;
    *h = (int)ihdr.height;
    return iris_image_check_size(label, "PNG", ihdr.width, ihdr.height, INT64_MAX, err);
}

/* Sample x of a packed row of `bd`-bit samples (1, 2, 4, 8 or 16 host-endian). */
static inline unsigned png_sample(const uint8_t *row, size_t x, int bd) {
    switch (bd) {
    case 8: return row[x];
    case 16: return ((const uint16_t *)(const void *)row)[x] >> 8;
    default: {
        size_t bit = x * (size_t)bd;
        unsigned v = (row[bit >> 3] >> (8 - bd - (bit & 7))) & ((1u << bd) - 1);
        return v;
    }
    }
}

int iris_image_png_decode(const uint8_t *data, size_t n, const char *label, const iris_image_decode_opts *o,
                          iris_image *out, int *orientation, iris_err *err) {
    struct spng_ihdr ihdr;
    spng_ctx *ctx = png_open(data, n, label, &ihdr, err);
    if (!ctx) return err ? err->code : IRIS_EFORMAT;
    int rc = iris_image_check_size(label, "PNG", ihdr.width, ihdr.height, o->max_pixels, err);
    uint8_t *raw = NULL, *rgb = NULL;
    if (rc) goto out;
    size_t W = ihdr.width, H = ihdr.height, raw_size;
    int e = spng_decoded_image_size(ctx, SPNG_FMT_PNG, &raw_size);
    if (e) {
        rc = iris_err_set(err, IRIS_EFORMAT, "%s: bad PNG: %s", label, spng_strerror(e));
        goto out;
    }
    /* zeroed: spng assembles interlaced sub-byte rows by OR-ing bits in */
    raw = calloc(1, raw_size);
    rgb = malloc(W * H * 3);
    if (!raw || !rgb) {
        rc = iris_err_set(err, IRIS_ENOMEM, "%s: out of memory for a %zux%zu image", label, W, H);
        goto out;
    }
    /* SPNG_FMT_PNG: the file's own layout (deinterlaced, 16-bit host-endian);
     * no flags: tRNS and gamma are not applied. */
    e = spng_decode_image(ctx, raw, raw_size, SPNG_FMT_PNG, 0);
    if (e) {
        rc = iris_err_set(err, IRIS_EFORMAT, "%s: bad PNG: %s", label, spng_strerror(e));
        goto out;
    }
    int bd = ihdr.bit_depth, ct = ihdr.color_type;
    int ch = ct == SPNG_COLOR_TYPE_GRAYSCALE || ct == SPNG_COLOR_TYPE_INDEXED ? 1
           : ct == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA                       ? 2
           : ct == SPNG_COLOR_TYPE_TRUECOLOR                             ? 3
                                                                         : 4;
    size_t stride = raw_size / H;
    if (stride * 8 < W * (size_t)ch * (size_t)bd) {
        rc = iris_err_set(err, IRIS_EFORMAT, "%s: bad PNG: unexpected row size %zu", label, stride);
        goto out;
    }
    struct spng_plte plte;
    memset(&plte, 0, sizeof plte);
    if (ct == SPNG_COLOR_TYPE_INDEXED && spng_get_plte(ctx, &plte) != 0) {
        rc = iris_err_set(err, IRIS_EFORMAT, "%s: bad PNG: indexed colour without a palette", label);
        goto out;
    }
    unsigned gray_scale = bd < 8 ? 255u / ((1u << bd) - 1) : 1;
    for (size_t y = 0; y < H; y++) {
        const uint8_t *row = raw + y * stride;
        uint8_t *d = rgb + y * W * 3;
        switch (ct) {
        case SPNG_COLOR_TYPE_GRAYSCALE:
            for (size_t x = 0; x < W; x++) d[3 * x] = d[3 * x + 1] = d[3 * x + 2] = (uint8_t)(png_sample(row, x, bd) * gray_scale);
            break;
        case SPNG_COLOR_TYPE_INDEXED:
            for (size_t x = 0; x < W; x++) {
                unsigned i = png_sample(row, x, bd);
                if (i < plte.n_entries) {
                    d[3 * x] = plte.entries[i].red;
                    d[3 * x + 1] = plte.entries[i].green;
                    d[3 * x + 2] = plte.entries[i].blue;
                } else {
                    d[3 * x] = d[3 * x + 1] = d[3 * x + 2] = 0;
                }
            }
            break;
        default:
            if (bd == 8 && ch == 3) {
                memcpy(d, row, W * 3);
            } else if (ch <= 2) { /* gray + alpha */
                for (size_t x = 0; x < W; x++) d[3 * x] = d[3 * x + 1] = d[3 * x + 2] = (uint8_t)png_sample(row, x * 2, bd);
            } else {
                for (size_t x = 0; x < W; x++)
                    for (int c = 0; c < 3; c++) d[3 * x + c] = (uint8_t)png_sample(row, x * (size_t)ch + c, bd);
            }
        }
    }
    if (orientation) {
        struct spng_exif exif;
        *orientation = spng_get_exif(ctx, &exif) == 0 ? iris_image_exif_orientation((const uint8_t *)exif.data, exif.length) : 0;
    }
    out->width = (int)W;
    out->height = (int)H;
    out->rgb = rgb;
    rgb = NULL;
out:
    free(raw);
    free(rgb);
    spng_ctx_free(ctx);
    return rc;
}

/* ---- WebP ---------------------------------------------------------------- */

static int webp_features(const uint8_t *data, size_t n, const char *label, WebPBitstreamFeatures *f, iris_err *err) {
    VP8StatusCode s = WebPGetFeatures(data, n, f);
    if (s == VP8_STATUS_NOT_ENOUGH_DATA)
        return iris_err_set(err, IRIS_EFORMAT, "%s: bad WebP: file is truncated", label);
    if (s != VP8_STATUS_OK) return iris_err_set(err, IRIS_EFORMAT, "%s: bad WebP (libwebp status %d)", label, (int)s);
    if (f->has_animation) return iris_err_set(err, IRIS_EUNSUPPORTED, "%s: animated WebP is not supported", label);
    return 0;
}

int iris_image_webp_probe(const uint8_t *data, size_t n, const char *label, int *w, int *h, iris_err *err) {
    WebPBitstreamFeatures f;
    int rc = webp_features(data, n, label, &f, err);
    if (rc) return rc;
    *w = f.width;
    *h = f.height;
    return iris_image_check_size(label, "WebP", f.width, f.height, INT64_MAX, err);
}

int iris_image_webp_decode(const uint8_t *data, size_t n, const char *label, const iris_image_decode_opts *o,
                           iris_image *out, iris_err *err) {
    WebPBitstreamFeatures f;
    int rc = webp_features(data, n, label, &f, err);
    if (rc) return rc;
    rc = iris_image_check_size(label, "WebP", f.width, f.height, o->max_pixels, err);
    if (rc) return rc;
    size_t size = (size_t)f.width * (size_t)f.height * 3;
    uint8_t *rgb = malloc(size);
    if (!rgb) return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory for a %dx%d image", label, f.width, f.height);
    if (!WebPDecodeRGBInto(data, n, rgb, size, f.width * 3)) {
        free(rgb);
        return iris_err_set(err, IRIS_EFORMAT, "%s: bad WebP: the image data is corrupt or truncated", label);
    }
    out->width = f.width;
    out->height = f.height;
    out->rgb = rgb;
    return 0;
}
