/* video.c: Qwen3VLVideoProcessor's arithmetic (see video.h): settings, frame
 * sampling, the video smart_resize, timestamps, patch rows and content keys,
 * and the preparation of frames already decoded.  The container and codec
 * work is in video_decode.c.
 *
 * The per-frame work runs in parallel: the sampled frames' resizes on a work
 * queue of the preparation's own (base/workq.h, a frame an item, as many
 * threads as the worker pool has), so the pool is not held while a clip's
 * frames are resized; each temporal patch's content key (computed once at
 * preparation and kept) and a temporal patch's pixel_values rows (ranges of
 * rows) on the worker pool (base/pool.h).  Each piece is computed exactly as
 * one thread computes it, so the bytes do not depend on the thread count.  Not
 * for use from inside a pool job.
 *
 * Numerics follow the Python they reproduce: int() truncates, round() and
 * numpy's round() are half-to-even (nearbyint in the default rounding mode),
 * true division of ints is one correctly rounded double division (every
 * product here is far below 2^53). */
#include "video_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "pool.h"
#include "sha256.h"
#include "workq.h"

void iris_video_opts_default(iris_video_opts *o) {
    memset(o, 0, sizeof *o);
    o->fps = 2.0;
    o->min_frames = 4;
    o->max_frames = 768;
    o->min_pixels = IRIS_VIDEO_MIN_PIXELS_DEFAULT;
    o->max_pixels = IRIS_VIDEO_MAX_PIXELS_DEFAULT;
    o->cap_pixels_per_frame = 1;
    o->patch_size = 16;
    o->merge_size = 2;
    o->temporal_patch_size = 2;
    for (int c = 0; c < 3; c++) o->image_mean[c] = o->image_std[c] = 0.5f;
    o->max_frame_pixels = IRIS_VIDEO_MAX_FRAME_PIXELS_DEFAULT;
    o->max_total_frames = IRIS_VIDEO_MAX_TOTAL_FRAMES_DEFAULT;
}

static int get_num(json_t *root, const char *key, double *out, const char *label, iris_err *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return iris_err_set(err, IRIS_EFORMAT, "%s: \"%s\" must be a number", label, key);
    *out = json_number_value(v);
    return 0;
}

static int get_int(json_t *root, const char *key, int *out, const char *label, iris_err *err) {
    double d = *out;
    int rc = get_num(root, key, &d, label, err);
    if (rc) return rc;
    if (d != floor(d) || d < 0 || d > 1e6)
        return iris_err_set(err, IRIS_EFORMAT, "%s: \"%s\" must be a whole number in [0, 1000000]", label, key);
    *out = (int)d;
    return 0;
}

static int get_vec3(json_t *root, const char *key, float out[3], const char *label, iris_err *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_number(v)) {
        for (int c = 0; c < 3; c++) out[c] = (float)json_number_value(v);
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) != 3)
        return iris_err_set(err, IRIS_EFORMAT, "%s: \"%s\" must be 3 numbers", label, key);
    for (int c = 0; c < 3; c++) {
        json_t *x = json_array_get(v, (size_t)c);
        if (!json_is_number(x)) return iris_err_set(err, IRIS_EFORMAT, "%s: \"%s\" must be 3 numbers", label, key);
        out[c] = (float)json_number_value(x);
    }
    return 0;
}

int iris_video_opts_parse(const char *json_text, const char *label, iris_video_opts *o, iris_err *err) {
    json_error_t je;
    json_t *root = json_loads(json_text, 0, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return iris_err_set(err, IRIS_EFORMAT, "%s: not a JSON object (%s, line %d)", label, je.text, je.line);
    }
    int rc = 0;
    json_t *size = json_object_get(root, "size");
    if (size && json_is_object(size)) {
        double mn = (double)o->min_pixels, mx = (double)o->max_pixels;
        rc = get_num(size, "shortest_edge", &mn, label, err);
        if (!rc) rc = get_num(size, "longest_edge", &mx, label, err);
        if (!rc && (mn < 1 || mx < mn || mx > 1e12))
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: size %g..%g pixels is not a range", label, mn, mx);
        o->min_pixels = (int64_t)mn, o->max_pixels = (int64_t)mx;
    }
    json_t *cap = json_object_get(root, "cap_pixels_per_frame");
    if (!rc && cap && json_is_boolean(cap)) o->cap_pixels_per_frame = json_is_true(cap);
    if (!rc) rc = get_num(root, "fps", &o->fps, label, err);
    if (!rc) rc = get_int(root, "min_frames", &o->min_frames, label, err);
    if (!rc) rc = get_int(root, "max_frames", &o->max_frames, label, err);
    if (!rc) rc = get_int(root, "patch_size", &o->patch_size, label, err);
    if (!rc) rc = get_int(root, "merge_size", &o->merge_size, label, err);
    if (!rc) rc = get_int(root, "temporal_patch_size", &o->temporal_patch_size, label, err);
    if (!rc) rc = get_vec3(root, "image_mean", o->image_mean, label, err);
    if (!rc) rc = get_vec3(root, "image_std", o->image_std, label, err);
    if (!rc && (!(o->fps > 0) || o->max_frames < 1 || o->min_frames > o->max_frames || o->patch_size < 1 ||
                o->merge_size < 1 || o->temporal_patch_size < 1 || o->temporal_patch_size > 64))
        rc = iris_err_set(err, IRIS_EFORMAT, "%s: fps %g, frames %d..%d, patch %d, merge %d, temporal %d are not "
                          "usable", label, o->fps, o->min_frames, o->max_frames, o->patch_size, o->merge_size,
                          o->temporal_patch_size);
    json_decref(root);
    return rc;
}

int iris_video_opts_load(const char *dir, iris_video_opts *o, iris_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/video_preprocessor_config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char *buf = malloc(1 << 16);
    size_t n = buf ? fread(buf, 1, (1 << 16) - 1, f) : 0;
    fclose(f);
    if (!buf) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    buf[n] = 0;
    int rc = iris_video_opts_parse(buf, path, o, err);
    free(buf);
    return rc;
}

int iris_video_sample(int64_t total, double src_fps, const iris_video_opts *o, int64_t *idx, iris_err *err) {
    if (total <= 0) return iris_err_set(err, IRIS_EFORMAT, "the video has no frames");
    if (!(src_fps > 0)) src_fps = 24.0; /* transformers' fallback when the metadata has none */
    if (!(o->fps > 0) || o->max_frames < 1)
        return iris_err_set(err, IRIS_EINVAL, "video sampling: fps %g and max_frames %d must be positive", o->fps,
                            o->max_frames);
    double want = (double)total / src_fps * o->fps;
    int64_t n = want >= 9.0e18 ? INT64_MAX : (int64_t)want; /* int(): toward zero */
    if (n < o->min_frames) n = o->min_frames;
    if (n > o->max_frames) n = o->max_frames;
    if (n > total) n = total;
    if (n < 1) n = 1;
    /* numpy.linspace(0, total-1, n): i * step, the last set to stop exactly; then .round() */
    double step = n > 1 ? (double)(total - 1) / (double)(n - 1) : 0.0;
    for (int64_t i = 0; i < n; i++) idx[i] = (int64_t)nearbyint((double)i * step);
    if (n > 1) idx[n - 1] = total - 1;
    return (int)n;
}

int iris_video_smart_resize(int n_frames, int height, int width, const iris_video_opts *o, int *out_height,
                            int *out_width, iris_err *err) {
    const int factor = o->patch_size * o->merge_size, tf = o->temporal_patch_size;
    if (n_frames < tf)
        return iris_err_set(err, IRIS_EINVAL, "the video gives %d frame(s); Qwen3-VL needs at least %d (send a "
                            "single picture as an image)", n_frames, tf);
    if (height <= 0 || width <= 0) return iris_err_set(err, IRIS_EINVAL, "bad video size %dx%d", width, height);
    int64_t max_pixels = o->max_pixels;
    if (o->cap_pixels_per_frame) {
        int64_t frame_cap = (int64_t)IRIS_VIDEO_FRAME_CAP_PATCHES * factor * factor;
        int64_t share = o->max_pixels / n_frames;
        int64_t per = frame_cap < share ? frame_cap : share;
        int64_t floor_px = (int64_t)((double)o->min_pixels * 1.05);
        if (per < floor_px) per = floor_px;
        max_pixels = per * n_frames;
    }
    double h = height, w = width;
    if (height < factor || width < factor) {
        double scale = fmax((double)factor / height, (double)factor / width);
        h = floor(height * scale), w = floor(width * scale);
    }
    double mx = fmax(h, w), mn = fmin(h, w);
    if (mn < 1 || mx / mn > IRIS_IMAGE_MAX_ASPECT)
        return iris_err_set(err, IRIS_EINVAL, "video frames of %dx%d: aspect ratio over the limit of %d", width,
                            height, IRIS_IMAGE_MAX_ASPECT);
    double hb = nearbyint(h / factor) * factor, wb = nearbyint(w / factor) * factor;
    double tb = nearbyint((double)n_frames / tf) * tf;
    double vol = (double)n_frames * h * w;
    if (tb * hb * wb > (double)max_pixels) {
        double beta = sqrt(vol / (double)max_pixels);
        hb = fmax(factor, floor(h / beta / factor) * factor);
        wb = fmax(factor, floor(w / beta / factor) * factor);
    } else if (tb * hb * wb < (double)o->min_pixels) {
        double beta = sqrt((double)o->min_pixels / vol);
        hb = ceil(h * beta / factor) * factor;
        wb = ceil(w * beta / factor) * factor;
    }
    if (hb < factor || wb < factor || hb > 65536 || wb > 65536)
        return iris_err_set(err, IRIS_EINVAL, "video smart_resize: %dx%d gives an unusable %.0fx%.0f", width, height,
                            wb, hb);
    *out_height = (int)hb;
    *out_width = (int)wb;
    return 0;
}

double iris_video_timestamp(const iris_video_prep *p, const iris_video_opts *o, int k) {
    int T = o->temporal_patch_size;
    int64_t a = p->indices[(k * T < p->n_sampled) ? k * T : p->n_sampled - 1];
    int64_t b = p->indices[(k * T + T - 1 < p->n_sampled) ? k * T + T - 1 : p->n_sampled - 1];
    double fps = p->info.fps > 0 ? p->info.fps : 24.0;
    return ((double)a / fps + (double)b / fps) / 2.0;
}

static void image_opts(const iris_video_opts *o, iris_image_prep_opts *io) {
    iris_image_prep_opts_default(io);
    io->patch_size = o->patch_size;
    io->merge_size = o->merge_size;
    io->temporal_patch_size = o->temporal_patch_size;
    memcpy(io->image_mean, o->image_mean, sizeof io->image_mean);
    memcpy(io->image_std, o->image_std, sizeof io->image_std);
}

static const uint8_t *frame_at(const iris_video_prep *p, int f) {
    return p->rgb + (size_t)f * p->width * p->height * 3;
}

typedef struct rows_job {
    const uint8_t *frames[64];
    const iris_video_prep *p;
    iris_image_prep_opts io;
    int64_t r0;
    size_t dim;
    float *out;
} rows_job;

static void rows_range(void *ctx, int64_t i0, int64_t i1) {
    const rows_job *j = ctx;
    iris_image_patch_frames(j->frames, j->p->width, j->p->grid_h, j->p->grid_w, &j->io, j->r0 + i0, j->r0 + i1,
                            j->out + (size_t)i0 * j->dim);
}

void iris_video_patch_rows(const iris_video_prep *p, const iris_video_opts *o, int k, int64_t r0, int64_t r1,
                           float *out) {
    rows_job j = {.p = p, .r0 = r0, .out = out};
    image_opts(o, &j.io);
    j.dim = (size_t)iris_image_row_dim(&j.io);
    for (int t = 0; t < o->temporal_patch_size && t < 64; t++) j.frames[t] = frame_at(p, k * o->temporal_patch_size + t);
    if (r1 - r0 < 64) rows_range(&j, 0, r1 - r0); /* not worth waking the workers */
    else iris_pool_for(r1 - r0, rows_range, &j);
}

/* What a content key hashes before the frames: the settings and the size. */
typedef struct key_head {
    char tag[16];
    int32_t patch, merge, temporal, grid[2], w, h;
    float mean[3], std[3];
} key_head;

static void key_head_of(const iris_video_prep *p, const iris_video_opts *o, key_head *head) {
    memset(head, 0, sizeof *head);
    memcpy(head->tag, "iris-video-u8-1", 15);
    head->patch = o->patch_size, head->merge = o->merge_size, head->temporal = o->temporal_patch_size;
    head->grid[0] = p->grid_h, head->grid[1] = p->grid_w;
    head->w = p->width, head->h = p->height;
    memcpy(head->mean, o->image_mean, sizeof head->mean);
    memcpy(head->std, o->image_std, sizeof head->std);
}

static int patch_key_compute(const iris_video_prep *p, const iris_video_opts *o, int k, unsigned char out[32]) {
    key_head head;
    key_head_of(p, o, &head);
    size_t frame = (size_t)p->width * p->height * 3;
    /* the pair's frames are adjacent in p->rgb */
    return iris_sha256_pieces(&head, sizeof head, frame_at(p, k * o->temporal_patch_size),
                              frame * (size_t)o->temporal_patch_size, out);
}

typedef struct keys_job {
    const iris_video_prep *p;
    const iris_video_opts *o;
    unsigned char (*keys)[32];
    int failed;
} keys_job;

static void keys_range(void *ctx, int64_t k0, int64_t k1) {
    keys_job *j = ctx;
    for (int64_t k = k0; k < k1; k++)
        if (patch_key_compute(j->p, j->o, (int)k, j->keys[k])) __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
}

/* Every temporal patch's key, on the pool, kept in p with the head they were made with. */
int iris_video_keys(iris_video_prep *p, const iris_video_opts *o, iris_err *err) {
    free(p->keys);
    p->keys = malloc(32 * (size_t)(p->grid_t > 0 ? p->grid_t : 1));
    p->keys_head = malloc(sizeof(key_head));
    if (!p->keys || !p->keys_head) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    key_head_of(p, o, p->keys_head);
    keys_job j = {p, o, p->keys, 0};
    iris_pool_for(p->grid_t, keys_range, &j);
    if (!j.failed) return 0;
    free(p->keys);
    p->keys = NULL;
    return iris_err_set(err, IRIS_ENOMEM, "SHA-256 failed (libcrypto)");
}

int iris_video_patch_key(const iris_video_prep *p, const iris_video_opts *o, int k, unsigned char out[32]) {
    key_head head;
    key_head_of(p, o, &head);
    if (p->keys && p->keys_head && memcmp(&head, p->keys_head, sizeof head) == 0) {
        memcpy(out, p->keys[k], 32);
        return 0;
    }
    return patch_key_compute(p, o, k, out);
}

void iris_video_prep_free(iris_video_prep *p) {
    if (!p) return;
    free(p->keys);
    free(p->keys_head);
    free(p->indices);
    free(p->rgb);
    memset(p, 0, sizeof *p);
}

/* The sampled count, the resize and the output buffers, from the displayed size. */
int iris_video_plan(const iris_video_info *info, const iris_video_opts *o, iris_video_prep *out, iris_err *err) {
    memset(out, 0, sizeof *out);
    out->info = *info;
    int64_t cap = o->max_frames < 1 ? 1 : o->max_frames;
    if (cap > info->n_frames) cap = info->n_frames;
    if (cap < 1) return iris_err_set(err, IRIS_EFORMAT, "the video has no frames");
    if (!(out->indices = malloc(sizeof *out->indices * (size_t)(cap + 1))))
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    int n = iris_video_sample(info->n_frames, info->fps, o, out->indices, err);
    if (n < 0) return n;
    out->n_sampled = n;
    int rc = iris_video_smart_resize(n, info->height, info->width, o, &out->height, &out->width, err);
    if (rc) return rc;
    if (o->max_frame_resize_pixels > 0 && (int64_t)out->height * out->width > o->max_frame_resize_pixels) {
        iris_video_opts lo = *o;
        lo.cap_pixels_per_frame = 0;
        lo.max_pixels = o->max_frame_resize_pixels * n;
        if (lo.min_pixels > lo.max_pixels) lo.min_pixels = lo.max_pixels;
        if ((rc = iris_video_smart_resize(n, info->height, info->width, &lo, &out->height, &out->width, err)))
            return rc;
    }
    int T = o->temporal_patch_size;
    out->n_frames = (n + T - 1) / T * T;
    out->grid_t = out->n_frames / T;
    out->grid_h = out->height / o->patch_size;
    out->grid_w = out->width / o->patch_size;
    size_t bytes = (size_t)out->n_frames * out->width * out->height * 3;
    if (!(out->rgb = malloc(bytes)))
        return iris_err_set(err, IRIS_ENOMEM, "out of memory for %d frames of %dx%d", out->n_frames, out->width,
                            out->height);
    return 0;
}

/* Frame j of the sample (displayed, width x height RGB) resized into its slot. */
int iris_video_put_frame(iris_video_prep *p, int j, const uint8_t *rgb, int width, int height, iris_err *err) {
    iris_image src = {.width = width, .height = height, .rgb = (uint8_t *)rgb}, dst = {0};
    size_t frame = (size_t)p->width * p->height * 3;
    if (width == p->width && height == p->height) {
        memcpy(p->rgb + (size_t)j * frame, rgb, frame);
    } else {
        int rc = iris_image_resize_bicubic(&src, p->width, p->height, &dst, err);
        if (rc) return rc;
        memcpy(p->rgb + (size_t)j * frame, dst.rgb, frame);
        iris_image_free(&dst);
    }
    return 0;
}

/* The last sampled frame repeated up to n_frames (patchify's padding), then the keys. */
int iris_video_finish(iris_video_prep *p, const iris_video_opts *o, iris_err *err) {
    size_t frame = (size_t)p->width * p->height * 3;
    for (int j = p->n_sampled; j < p->n_frames; j++)
        memcpy(p->rgb + (size_t)j * frame, p->rgb + (size_t)(p->n_sampled - 1) * frame, frame);
    return iris_video_keys(p, o, err);
}

typedef struct given {
    iris_video_prep *p;
    const uint8_t *rgb; /* the source's frames, displayed size p->info */
} given;

/* A work-queue item: sampled frame id, read in place from the frames given. */
static int put_given_item(void *ctx, int64_t id, const void *unused, iris_err *err) {
    const given *g = ctx;
    const iris_video_info *in = &g->p->info;
    size_t frame = (size_t)in->width * in->height * 3;
    return iris_video_put_frame(g->p, (int)id, g->rgb + (size_t)g->p->indices[id] * frame, in->width, in->height, err);
}

/* The sampled frames resized on a work queue of their own (base/workq.h: a frame an item, as many
 * threads as the pool has, the pool left free), each frame as one thread resizes it. */
static int put_given(iris_video_prep *p, const uint8_t *rgb, iris_err *err) {
    given g = {p, rgb};
    int threads = iris_pool_threads();
    if (threads > p->n_sampled) threads = p->n_sampled;
    iris_workq *q = NULL;
    int rc = iris_workq_init(&q, threads > 1 ? threads : 0, 2 * threads, 0, put_given_item, &g, err);
    for (int j = 0; !rc && j < p->n_sampled; j++) rc = iris_workq_push(q, j, NULL, err);
    if (!rc) rc = iris_workq_close(q, err);
    iris_workq_free(q);
    return rc;
}

int iris_video_prepare_frames(const uint8_t *rgb, int64_t n_frames, int width, int height, double fps,
                              const iris_video_opts *o, iris_video_prep *out, iris_err *err) {
    memset(out, 0, sizeof *out);
    if (!rgb || n_frames <= 0 || width <= 0 || height <= 0)
        return iris_err_set(err, IRIS_EINVAL, "decoded video: %lld frames of %dx%d", (long long)n_frames, width, height);
    if ((int64_t)width * height > o->max_frame_pixels)
        return iris_err_set(err, IRIS_ELIMIT, "decoded video: frames of %dx%d are over the limit of %lld pixels", width,
                            height, (long long)o->max_frame_pixels);
    iris_video_info info = {.width = width, .height = height, .fps = fps, .n_frames = n_frames};
    snprintf(info.codec, sizeof info.codec, "rgb24");
    int rc = iris_video_plan(&info, o, out, err);
    if (!rc) rc = put_given(out, rgb, err);
    if (!rc) rc = iris_video_finish(out, o, err);
    if (rc) iris_video_prep_free(out);
    return rc;
}

int iris_video_sniff(const void *data, size_t n) {
    const uint8_t *p = data;
    if (n >= 12 && memcmp(p + 4, "ftyp", 4) == 0) {
        /* ISO-BMFF: a video brand, not an image one (AVIF/HEIC) */
        return memcmp(p + 8, "avif", 4) && memcmp(p + 8, "heic", 4) && memcmp(p + 8, "mif1", 4) &&
               memcmp(p + 8, "heix", 4);
    }
    if (n >= 4 && memcmp(p, "\x1a\x45\xdf\xa3", 4) == 0) return 1;                    /* Matroska / WebM */
    if (n >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "AVI ", 4) == 0) return 1;
    if (n >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0)) return 1;
    if (n >= 4 && memcmp(p, "OggS", 4) == 0) return 1;
    if (n >= 4 && memcmp(p, "\x00\x00\x01\xba", 4) == 0) return 1;                    /* MPEG-PS */
    if (n >= 189 && p[0] == 0x47 && p[188] == 0x47) return 1;                         /* MPEG-TS */
    if (n >= 8 && (memcmp(p + 4, "moov", 4) == 0 || memcmp(p + 4, "mdat", 4) == 0)) return 1;
    return 0;
}
