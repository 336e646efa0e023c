/* image.c: decoding entry points: format sniffing, size limits, EXIF
 * orientation, and the multi-image preprocessing driver.
 *
 * The codecs live in image_decode.c, the resize in image_resize.c, the
 * patchify in image_patch.c.  Invariants: the format comes from the magic
 * bytes only; the pixel count is checked from the header before any pixel
 * buffer is allocated; every EXIF offset is checked against the block size.
 * Does not composite alpha (the reference drops it) and does not read
 * colour profiles (neither does torchvision). */
#include "image.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "sha256.h"
#include "image_internal.h"

void iris_image_decode_opts_default(iris_image_decode_opts *o) {
    o->max_pixels = IRIS_IMAGE_MAX_PIXELS_DEFAULT;
    o->exif_rotate = 1;
}

void iris_image_prep_opts_default(iris_image_prep_opts *o) {
    o->min_pixels = IRIS_IMAGE_MIN_PIXELS_DEFAULT;
    o->max_pixels = IRIS_IMAGE_MAX_RESIZE_PIXELS_DEFAULT;
    o->patch_size = 16;
    o->merge_size = 2;
    o->temporal_patch_size = 2;
    for (int c = 0; c < 3; c++) {
        o->image_mean[c] = 0.5f;
        o->image_std[c] = 0.5f;
    }
}

iris_image_format iris_image_sniff(const void *data, size_t n) {
    const uint8_t *p = data;
    if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) return IRIS_IMAGE_JPEG;
    if (n >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0) return IRIS_IMAGE_PNG;
    if (n >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0) return IRIS_IMAGE_WEBP;
    return IRIS_IMAGE_UNKNOWN;
}

/* A short description of what the bytes look like, for "not an image" errors. */
static const char *guess_other(const uint8_t *p, size_t n) {
    if (n >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0)) return "a GIF (not supported)";
    if (n >= 2 && p[0] == 'B' && p[1] == 'M') return "a BMP (not supported)";
    if (n >= 12 && memcmp(p + 4, "ftyp", 4) == 0) return "an ISO-BMFF file (AVIF/HEIC, not supported)";
    if (n >= 4 && (memcmp(p, "II*\0", 4) == 0 || memcmp(p, "MM\0*", 4) == 0)) return "a TIFF (not supported)";
    if (n >= 5 && memcmp(p, "%PDF-", 5) == 0) return "a PDF";
    if (n >= 1 && (p[0] == '<' || p[0] == '{')) return "text (HTML/XML/JSON?)";
    return "not JPEG, PNG or WebP";
}

int iris_image_check_size(const char *label, const char *what, int64_t w, int64_t h, int64_t max_pixels,
                          iris_err *err) {
    if (w <= 0 || h <= 0)
        return iris_err_set(err, IRIS_EFORMAT, "%s: %s image has zero size (%" PRId64 "x%" PRId64 ")", label,
                            what, w, h);
    if (w > INT32_MAX / 4 || h > INT32_MAX / 4 || w * h > max_pixels)
        return iris_err_set(err, IRIS_ELIMIT,
                            "%s: %s image is %" PRId64 "x%" PRId64 " = %" PRId64
                            " pixels, over the limit of %" PRId64 " (raise it with --max-image-pixels)",
                            label, what, w, h, w * h, max_pixels);
    return 0;
}

int iris_image_probe_mem(const void *data, size_t n, const char *label, iris_image_format *fmt, int *width,
                         int *height, iris_err *err) {
    iris_image_format f = iris_image_sniff(data, n);
    if (fmt) *fmt = f;
    switch (f) {
    case IRIS_IMAGE_JPEG: return iris_image_jpeg_probe(data, n, label, width, height, err);
    case IRIS_IMAGE_PNG: return iris_image_png_probe(data, n, label, width, height, err);
    case IRIS_IMAGE_WEBP: return iris_image_webp_probe(data, n, label, width, height, err);
    default:
        if (n == 0) return iris_err_set(err, IRIS_EFORMAT, "%s: empty file, not an image", label);
        return iris_err_set(err, IRIS_EFORMAT, "%s: not an image: %s", label, guess_other(data, n));
    }
}

int iris_image_decode_mem(const void *data, size_t n, const char *label, const iris_image_decode_opts *o,
                          iris_image *out, iris_err *err) {
    iris_image_decode_opts def;
    if (!o) {
        iris_image_decode_opts_default(&def);
        o = &def;
    }
    if (!label) label = "image";
    memset(out, 0, sizeof *out);
    int orientation = 0, rc;
    iris_image_format f = iris_image_sniff(data, n);
    switch (f) {
    case IRIS_IMAGE_JPEG: rc = iris_image_jpeg_decode(data, n, label, o, out, &orientation, err); break;
    case IRIS_IMAGE_PNG: rc = iris_image_png_decode(data, n, label, o, out, &orientation, err); break;
    case IRIS_IMAGE_WEBP: rc = iris_image_webp_decode(data, n, label, o, out, err); break;
    default:
        if (n == 0) return iris_err_set(err, IRIS_EFORMAT, "%s: empty file, not an image", label);
        return iris_err_set(err, IRIS_EFORMAT, "%s: not an image: %s", label, guess_other(data, n));
    }
    if (rc) return rc;
    if (o->exif_rotate && orientation > 1) {
        iris_image rot;
        rc = iris_image_orient(out, orientation, &rot, err);
        iris_image_free(out);
        if (rc) return iris_err_prefix(err, "%s", label);
        *out = rot;
    }
    return 0;
}

int iris_image_decode_file(const char *path, const iris_image_decode_opts *o, iris_image *out, iris_err *err) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return iris_err_set(err, errno == ENOENT ? IRIS_ENOTFOUND : IRIS_EIO, "%s: cannot open: %s", path,
                                strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return iris_err_set(err, IRIS_EIO, "%s: not a regular file", path);
    }
    /* A compressed image larger than 1 GiB is not something we serve. */
    if (st.st_size > (1LL << 30)) {
        fclose(f);
        return iris_err_set(err, IRIS_ELIMIT, "%s: file is %lld bytes, over the 1 GiB limit", path,
                            (long long)st.st_size);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) {
        free(buf);
        return iris_err_set(err, IRIS_EIO, "%s: short read (%zu of %zu bytes)", path, got, n);
    }
    int rc = iris_image_decode_mem(buf, n, path, o, out, err);
    free(buf);
    return rc;
}

void iris_image_free(iris_image *img) {
    if (!img) return;
    free(img->rgb);
    img->rgb = NULL;
    img->width = img->height = 0;
}

/* ---- EXIF orientation ---------------------------------------------------
 * TIFF structure (Exif 2.3 §4.5): byte order "II" / "MM", the number 42, the
 * offset of IFD0; IFD0 is a count and 12-byte entries (tag, type, count,
 * value).  Orientation is tag 0x0112, type SHORT, count 1, value 1..8. */

static unsigned rd16(const uint8_t *p, int le) { return le ? (unsigned)(p[0] | p[1] << 8) : (unsigned)(p[0] << 8 | p[1]); }
static uint32_t rd32(const uint8_t *p, int le) {
    return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
              : (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

int iris_image_exif_orientation(const uint8_t *exif, size_t n) {
    if (!exif) return 0;
    if (n >= 6 && memcmp(exif, "Exif\0\0", 6) == 0) {
        exif += 6;
        n -= 6;
    }
    if (n < 8) return 0;
    int le;
    if (exif[0] == 'I' && exif[1] == 'I') le = 1;
    else if (exif[0] == 'M' && exif[1] == 'M') le = 0;
    else return 0;
    if (rd16(exif + 2, le) != 42) return 0;
    uint32_t ifd = rd32(exif + 4, le);
    if (ifd > n || n - ifd < 2) return 0;
    unsigned count = rd16(exif + ifd, le);
    for (unsigned i = 0; i < count; i++) {
        size_t e = (size_t)ifd + 2 + (size_t)i * 12;
        if (e + 12 > n) return 0;
        if (rd16(exif + e, le) != 0x0112) continue;
        unsigned type = rd16(exif + e + 2, le);
        if (type != 3 || rd32(exif + e + 4, le) != 1) return 0;
        unsigned v = rd16(exif + e + 8, le);
        return v >= 1 && v <= 8 ? (int)v : 0;
    }
    return 0;
}

int iris_image_orient(const iris_image *src, int o, iris_image *dst, iris_err *err) {
    int W = src->width, H = src->height;
    int swap = o >= 5 && o <= 8;
    int ow = swap ? H : W, oh = swap ? W : H;
    uint8_t *d = malloc((size_t)ow * oh * 3);
    if (!d) return iris_err_set(err, IRIS_ENOMEM, "out of memory rotating a %dx%d image", W, H);
    const uint8_t *s = src->rgb;
    for (int y = 0; y < oh; y++) {
        for (int x = 0; x < ow; x++) {
            int sx, sy;
            switch (o) {
            case 2: sx = W - 1 - x; sy = y; break;         /* mirror horizontally */
            case 3: sx = W - 1 - x; sy = H - 1 - y; break; /* rotate 180 */
            case 4: sx = x; sy = H - 1 - y; break;         /* mirror vertically */
            case 5: sx = y; sy = x; break;                 /* transpose */
            case 6: sx = y; sy = H - 1 - x; break;         /* rotate 90 clockwise */
            case 7: sx = W - 1 - y; sy = H - 1 - x; break; /* transverse */
            case 8: sx = W - 1 - y; sy = x; break;         /* rotate 90 counter-clockwise */
            default: sx = x; sy = y; break;
            }
            memcpy(d + ((size_t)y * ow + x) * 3, s + ((size_t)sy * W + sx) * 3, 3);
        }
    }
    dst->width = ow;
    dst->height = oh;
    dst->rgb = d;
    return 0;
}

/* ---- several images, one request ---------------------------------------- */

int iris_image_prep_key(const iris_image_prep *p, const iris_image_prep_opts *o, unsigned char out[32]) {
    struct {
        char tag[16];
        int64_t min_pixels, max_pixels;
        int32_t patch, merge, temporal, grid[3], w, h;
        float mean[3], std[3];
    } head;
    memset(&head, 0, sizeof head);
    memcpy(head.tag, "iris-image-u8-1", 15);
    head.min_pixels = o->min_pixels, head.max_pixels = o->max_pixels;
    head.patch = o->patch_size, head.merge = o->merge_size, head.temporal = o->temporal_patch_size;
    head.grid[0] = p->grid_t, head.grid[1] = p->grid_h, head.grid[2] = p->grid_w;
    head.w = p->resized.width, head.h = p->resized.height;
    memcpy(head.mean, o->image_mean, sizeof head.mean);
    memcpy(head.std, o->image_std, sizeof head.std);
    return iris_sha256_pieces(&head, sizeof head, p->resized.rgb, (size_t)p->resized.width * p->resized.height * 3, out);
}

int iris_image_preprocess_files(const char *const *paths, int n_images, const iris_image_decode_opts *dopts,
                                const iris_image_prep_opts *popts, float **pixel_values, int64_t *n_rows,
                                int **grid_thw, unsigned char (**keys)[32], iris_err *err) {
    if (keys) *keys = NULL;
    *pixel_values = NULL;
    *grid_thw = NULL;
    *n_rows = 0;
    if (n_images <= 0) return iris_err_set(err, IRIS_EINVAL, "no images to preprocess");
    iris_image_prep_opts pdef;
    if (!popts) {
        iris_image_prep_opts_default(&pdef);
        popts = &pdef;
    }
    iris_image_prep *preps = calloc((size_t)n_images, sizeof *preps);
    int *grid = malloc(sizeof(int) * 3 * (size_t)n_images);
    unsigned char(*kk)[32] = keys ? malloc(32 * (size_t)n_images) : NULL;
    if (!preps || !grid || (keys && !kk)) {
        free(preps);
        free(grid);
        free(kk);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    int rc = 0;
    int64_t total = 0;
    for (int i = 0; i < n_images && rc == 0; i++) {
        iris_image img;
        rc = iris_image_decode_file(paths[i], dopts, &img, err);
        if (rc) break;
        rc = iris_image_prepare(&img, popts, &preps[i], err);
        iris_image_free(&img);
        if (rc) {
            iris_err_prefix(err, "%s", paths[i]);
            break;
        }
        grid[3 * i] = preps[i].grid_t;
        grid[3 * i + 1] = preps[i].grid_h;
        grid[3 * i + 2] = preps[i].grid_w;
        total += iris_image_prep_rows(&preps[i]);
        if (kk && iris_image_prep_key(&preps[i], popts, kk[i]))
            rc = iris_err_set(err, IRIS_ENOMEM, "%s: SHA-256 failed (libcrypto)", paths[i]);
    }
    float *pv = NULL;
    if (rc == 0) {
        int64_t d = iris_image_row_dim(popts);
        pv = malloc((size_t)(total * d) * sizeof(float));
        if (!pv) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory for %" PRId64 " x %" PRId64 " pixel values",
                                   total, d);
        int64_t r = 0;
        for (int i = 0; rc == 0 && i < n_images; i++) {
            int64_t nr = iris_image_prep_rows(&preps[i]);
            iris_image_patch_rows(&preps[i], popts, 0, nr, pv + r * d);
            r += nr;
        }
    }
    for (int i = 0; i < n_images; i++) iris_image_prep_free(&preps[i]);
    free(preps);
    if (rc) {
        free(pv);
        free(grid);
        free(kk);
        return rc;
    }
    if (keys) *keys = kk;
    *pixel_values = pv;
    *grid_thw = grid;
    *n_rows = total;
    return 0;
}
