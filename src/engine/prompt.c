/* prompt.c: the one prompt builder: chat template + tokens + images +
 * positions, or plain text (see prompt.h).
 *
 * The image budget: before any image is decoded, the headers of the images
 * given as bytes are read and their pixels added up against
 * max_total_pixels; each decoder then refuses an image over the decode
 * bound before allocating it; every image is resized to at most the resize
 * bound.  What runs these builds at once (the server's decode slots) is
 * the caller's business.
 *
 * Images are decoded one at a time and resized at once (smart_resize, then
 * bicubic), so only the resized uint8 images are held until every one is
 * known; then the pixel rows of all of them go into one array.  A failure
 * names the image (its label, or its path) and reports its index, which the
 * server turns into the OpenAI param of its image_url.
 *
 * Videos (iris_prompt_build_media): each is decoded, sampled and resized
 * (formats/video.h) with the model's video settings, and becomes one item
 * per temporal patch, grid (1, gh, gw), in prompt order among the images:
 * the split transformers' get_rope_index and vision tower make, so the
 * positions, the vision encoder and the prefix cache (one content key per
 * temporal patch) treat it as they treat an image.  Its <|video_pad|> is
 * written out per temporal patch with its timestamp, as Qwen3VLProcessor
 * does.  A prompt without videos takes the images-only path unchanged.
 *
 * Pixel rows are recycled: iris_prompt_free keeps the array (up to
 * PIXELS_KEEP of them, PIXELS_KEEP_BYTES in all, process-wide: prompts are
 * built and freed on several threads) and the next build whose rows fit
 * takes it, its pages already mapped.  A fresh array of that size is mapped
 * and page-faulted afresh each time (~860 faults a demo image, 3.4 MB), so
 * one of 2 MiB or more is 2 MiB-aligned and advised transparent huge pages:
 * 2 faults a demo image where the kernel grants them (a batch of demo
 * captions holds ~45 arrays at its peak: their first touch 19 ms, not 570). */
#include "prompt.h"

#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "err.h"
#include "formats/chat.h"
#include "log.h"
#include "model/positions.h"
#include "sbuf.h"

json_t *iris_prompt_one_turn(const char *system, int n_images, const char *text) {
    return iris_prompt_one_turn_av(system, n_images, 0, text);
}

json_t *iris_prompt_one_turn_av(const char *system, int n_images, int n_videos, const char *text) {
    json_t *msgs = json_array(), *content = json_array();
    if (!msgs || !content) goto oom;
    if (system && json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system)))
        goto oom;
    for (int i = 0; i < n_images; i++)
        if (json_array_append_new(content, json_pack("{s:s}", "type", "image"))) goto oom;
    for (int i = 0; i < n_videos; i++)
        if (json_array_append_new(content, json_pack("{s:s}", "type", "video"))) goto oom;
    if (json_array_append_new(content, json_pack("{s:s, s:s}", "type", "text", "text", text ? text : "")))
        goto oom;
    if (json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", content))) goto oom;
    json_decref(content);
    return msgs;
oom:
    json_decref(content);
    json_decref(msgs);
    return NULL;
}

/* ---- pixel rows, recycled ---------------------------------------------------------------------- */

#define PIXELS_KEEP 16
#define PIXELS_KEEP_BYTES ((size_t)128 << 20)
#define PIXELS_HUGE ((size_t)2 << 20)

static pthread_mutex_t pixels_mu = PTHREAD_MUTEX_INITIALIZER;
static float *pixels_kept[PIXELS_KEEP]; /* oldest first */
static int n_pixels_kept;
static size_t pixels_kept_bytes;

/* Sizes rounded up to a power of two, so images of nearly the same size share arrays (the pages
 * past what an image writes are never touched: address space, not memory). */
static size_t pixels_class(size_t bytes) {
    size_t c = 4096;
    while (c < bytes) c *= 2;
    return c;
}

/* A fresh array of cap bytes (a power of two): from PIXELS_HUGE up, whole huge pages. */
static float *pixels_fresh(size_t cap) {
    if (cap < PIXELS_HUGE) return malloc(cap);
    float *p = aligned_alloc(PIXELS_HUGE, cap);
    if (p) madvise(p, cap, MADV_HUGEPAGE);
    return p;
}

/* An array of at least bytes: the smallest kept one that fits and is not over twice that (the newest
 * of those: its pages the likeliest in cache), else malloc'd. */
static float *pixels_alloc(size_t bytes) {
    size_t cap = pixels_class(bytes);
    pthread_mutex_lock(&pixels_mu);
    int best = -1;
    for (int i = n_pixels_kept - 1; i >= 0; i--) {
        size_t ci = malloc_usable_size(pixels_kept[i]);
        if (ci >= cap && ci / 2 <= cap && (best < 0 || ci < malloc_usable_size(pixels_kept[best]))) best = i;
    }
    float *p = NULL;
    if (best >= 0) {
        p = pixels_kept[best];
        pixels_kept_bytes -= malloc_usable_size(p);
        memmove(&pixels_kept[best], &pixels_kept[best + 1], sizeof(float *) * (size_t)(--n_pixels_kept - best));
    }
    pthread_mutex_unlock(&pixels_mu);
    return p ? p : pixels_fresh(cap);
}

static void pixels_free(float *p) {
    if (!p) return;
    size_t cap = malloc_usable_size(p);
    if (cap < 4096 || cap > PIXELS_KEEP_BYTES) {
        free(p);
        return;
    }
    pthread_mutex_lock(&pixels_mu);
    while (n_pixels_kept == PIXELS_KEEP || pixels_kept_bytes + cap > PIXELS_KEEP_BYTES) {
        pixels_kept_bytes -= malloc_usable_size(pixels_kept[0]);
        free(pixels_kept[0]);
        memmove(&pixels_kept[0], &pixels_kept[1], sizeof(float *) * (size_t)--n_pixels_kept);
    }
    pixels_kept[n_pixels_kept++] = p;
    pixels_kept_bytes += cap;
    pthread_mutex_unlock(&pixels_mu);
}

void iris_prompt_free(iris_prompt *p) {
    if (!p) return;
    free(p->text);
    iris_tok_ids_free(&p->ids);
    free(p->grid_thw);
    pixels_free(p->pixel_values);
    free(p->image_keys);
    free(p->pos);
    memset(p, 0, sizeof *p);
}

void iris_prompt_image_bounds(const iris_prompt_ctx *ctx, int64_t *resize_pixels, int64_t *decode_pixels) {
    int64_t resize = ctx->pc ? ctx->pc->max_pixels : IRIS_IMAGE_MAX_RESIZE_PIXELS_DEFAULT;
    if (ctx->max_image_pixels > 0 && ctx->max_image_pixels < resize) resize = ctx->max_image_pixels;
    int64_t decode = ctx->max_decode_pixels;
    if (decode <= 0) {
        decode = IRIS_IMAGE_MAX_PIXELS_DEFAULT;
        if (resize > 0 && resize <= IRIS_IMAGE_MAX_PIXELS_DEFAULT / IRIS_PROMPT_DECODE_RATIO)
            decode = resize * IRIS_PROMPT_DECODE_RATIO;
    }
    if (resize_pixels) *resize_pixels = resize;
    if (decode_pixels) *decode_pixels = decode;
}

/* The preprocessor settings, checked against the vision tower they feed. */
static int prep_opts(const iris_prompt_ctx *ctx, iris_image_prep_opts *po, iris_err *err) {
    iris_image_prep_opts_default(po);
    const iris_preprocessor_config *pc = ctx->pc;
    if (pc) {
        po->min_pixels = pc->min_pixels;
        po->max_pixels = pc->max_pixels;
        po->patch_size = pc->patch_size;
        po->merge_size = pc->merge_size;
        po->temporal_patch_size = pc->temporal_patch_size;
        memcpy(po->image_mean, pc->image_mean, sizeof po->image_mean);
        memcpy(po->image_std, pc->image_std, sizeof po->image_std);
    }
    iris_prompt_image_bounds(ctx, &po->max_pixels, NULL);
    if (po->min_pixels > po->max_pixels) po->min_pixels = po->max_pixels;
    const iris_vision_config *vc = &ctx->cfg->vision_config;
    if (po->patch_size != vc->patch_size || po->merge_size != vc->spatial_merge_size ||
        po->temporal_patch_size != vc->temporal_patch_size)
        return iris_err_set(err, IRIS_EINVAL,
                            "preprocessor_config.json (patch %d, merge %d, temporal %d) does not match the vision "
                            "config (patch %d, merge %d, temporal %d)", po->patch_size, po->merge_size,
                            po->temporal_patch_size, vc->patch_size, vc->spatial_merge_size, vc->temporal_patch_size);
    return IRIS_OK;
}

/* Image i decoded (unless given decoded), resized, and its content key. */
static int prepare_one(const iris_prompt_image *im, int i, const iris_image_decode_opts *dopts,
                       const iris_image_prep_opts *popts, iris_image_prep *out, unsigned char key[32], iris_err *err) {
    char fallback[32];
    snprintf(fallback, sizeof fallback, "image %d", i + 1);
    const char *label = im->label ? im->label : im->path ? im->path : fallback;
    if ((im->path != NULL) + (im->data != NULL) + (im->image != NULL) != 1)
        return iris_err_set(err, IRIS_EINVAL, "%s: give exactly one of a path, bytes and a decoded image", label);
    iris_image img = {0};
    const iris_image *src = im->image;
    int rc = IRIS_OK;
    if (im->path) rc = iris_image_decode_file(im->path, dopts, &img, err);
    else if (im->data) rc = iris_image_decode_mem(im->data, im->n, label, dopts, &img, err);
    if (rc) return rc;
    if (!src) src = &img;
    rc = iris_image_prepare(src, popts, out, err);
    if (!rc)
        iris_log(IRIS_LOG_DEBUG, "prompt", "%s: %dx%d pixels, resized to %dx%d patches", label, src->width,
                 src->height, out->grid_w, out->grid_h);
    iris_image_free(&img);
    if (rc) return iris_err_prefix(err, "%s", label), rc;
    if (iris_image_prep_key(out, popts, key))
        return iris_err_set(err, IRIS_ENOMEM, "%s: SHA-256 failed (libcrypto)", label);
    return IRIS_OK;
}

/* The pixels of the images given as bytes or decoded, added up from their headers against
 * max_total_pixels (files are the caller's own and are not counted). */
static int check_total(const iris_prompt_ctx *ctx, const iris_prompt_image *images, int n_images, int *bad_image,
                       iris_err *err) {
    if (ctx->max_total_pixels <= 0) return IRIS_OK;
    int64_t total = 0, one = 0;
    iris_prompt_image_bounds(ctx, NULL, &one);
    for (int i = 0; i < n_images; i++) {
        const iris_prompt_image *im = &images[i];
        char fallback[32];
        snprintf(fallback, sizeof fallback, "image %d", i + 1);
        const char *label = im->label ? im->label : fallback;
        int w = 0, h = 0;
        if (im->image) {
            w = im->image->width, h = im->image->height;
        } else if (im->data && !im->path) {
            int rc = iris_image_probe_mem(im->data, im->n, label, NULL, &w, &h, err);
            if (rc) {
                if (bad_image) *bad_image = i;
                return rc;
            }
        }
        if ((int64_t)w * h > one) continue; /* its decoder refuses it, naming the per-image bound */
        total += (int64_t)w * h;
        if (total > ctx->max_total_pixels) {
            if (bad_image) *bad_image = i;
            return iris_err_set(err, IRIS_ELIMIT, "%s: the images of this request add up to %lld pixels or more, "
                                "over the limit of %lld for one request (--max-request-pixels)", label,
                                (long long)total, (long long)ctx->max_total_pixels);
        }
    }
    return IRIS_OK;
}

/* The images' grids, keys and pixel rows into out; their token counts into counts. */
static int add_images(const iris_prompt_ctx *ctx, const iris_prompt_image *images, int n_images, iris_prompt *out,
                      int32_t *counts, int *bad_image, iris_err *err) {
    iris_image_decode_opts dopts;
    iris_image_prep_opts popts;
    iris_image_decode_opts_default(&dopts);
    iris_prompt_image_bounds(ctx, NULL, &dopts.max_pixels);
    int rc = prep_opts(ctx, &popts, err);
    if (!rc) rc = check_total(ctx, images, n_images, bad_image, err);
    if (rc) return rc;
    int mm = popts.merge_size * popts.merge_size;
    iris_image_prep *preps = calloc((size_t)n_images, sizeof *preps);
    out->grid_thw = calloc((size_t)n_images * 3, sizeof *out->grid_thw);
    out->image_keys = malloc(32 * (size_t)n_images);
    if (!preps || !out->grid_thw || !out->image_keys) {
        free(preps);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    int64_t rows = 0;
    for (int i = 0; i < n_images && !rc; i++) {
        rc = prepare_one(&images[i], i, &dopts, &popts, &preps[i], out->image_keys[i], err);
        if (rc) {
            if (bad_image) *bad_image = i;
            break;
        }
        out->grid_thw[3 * i] = preps[i].grid_t;
        out->grid_thw[3 * i + 1] = preps[i].grid_h;
        out->grid_thw[3 * i + 2] = preps[i].grid_w;
        counts[i] = preps[i].grid_t * preps[i].grid_h * preps[i].grid_w / mm;
        rows += iris_image_prep_rows(&preps[i]);
    }
    int dim = iris_image_row_dim(&popts);
    if (!rc && !(out->pixel_values = pixels_alloc((size_t)rows * (size_t)dim * sizeof(float))))
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory for %lld x %d pixel values", (long long)rows, dim);
    for (int64_t i = 0, r0 = 0; !rc && i < n_images; i++) {
        int64_t k = iris_image_prep_rows(&preps[i]);
        iris_image_patch_rows(&preps[i], &popts, 0, k, out->pixel_values + r0 * dim);
        r0 += k;
    }
    for (int i = 0; i < n_images; i++) iris_image_prep_free(&preps[i]);
    free(preps);
    if (rc) return rc;
    out->n_rows = rows;
    out->n_images = n_images;
    return IRIS_OK;
}

/* ---- videos (Qwen3VLProcessor's rendering; see prompt.h) ------------------------------------ */

void iris_prompt_video_opts(const iris_prompt_ctx *ctx, const iris_prompt_video *v, iris_video_opts *o) {
    if (ctx->video) *o = *ctx->video;
    else iris_video_opts_default(o);
    if (ctx->max_video_pixels > 0 && ctx->max_video_pixels < o->max_pixels) o->max_pixels = ctx->max_video_pixels;
    if (o->min_pixels > o->max_pixels) o->min_pixels = o->max_pixels;
    iris_prompt_image_bounds(ctx, &o->max_frame_resize_pixels, NULL);
    if (o->max_decode_seconds <= 0) o->max_decode_seconds = IRIS_PROMPT_VIDEO_SECONDS;
    if (v && v->fps > 0) o->fps = v->fps;
    if (v && v->max_frames > 0) o->max_frames = v->max_frames;
    if (o->min_frames > o->max_frames) o->min_frames = o->max_frames;
}

/* One vision item in prompt order: an image (k < 0) or temporal patch k of a video. */
typedef struct media_item {
    int src, k;
} media_item;

static int check_video_opts(const iris_prompt_ctx *ctx, const iris_video_opts *o, iris_err *err) {
    const iris_vision_config *vc = &ctx->cfg->vision_config;
    if (o->patch_size != vc->patch_size || o->merge_size != vc->spatial_merge_size ||
        o->temporal_patch_size != vc->temporal_patch_size)
        return iris_err_set(err, IRIS_EINVAL, "video_preprocessor_config.json (patch %d, merge %d, temporal %d) does "
                            "not match the vision config (patch %d, merge %d, temporal %d)", o->patch_size,
                            o->merge_size, o->temporal_patch_size, vc->patch_size, vc->spatial_merge_size,
                            vc->temporal_patch_size);
    return IRIS_OK;
}

/* Each video decoded, sampled and resized; n_videos of them into vp/vo. */
static int prepare_videos(const iris_prompt_ctx *ctx, const iris_prompt_video *videos, int n_videos,
                          iris_video_prep *vp, iris_video_opts *vo, int n_images, int *bad_part, iris_err *err) {
    for (int v = 0; v < n_videos; v++) {
        const iris_prompt_video *x = &videos[v];
        char fallback[32];
        snprintf(fallback, sizeof fallback, "video %d", v + 1);
        const char *label = x->label ? x->label : x->path ? x->path : fallback;
        iris_prompt_video_opts(ctx, x, &vo[v]);
        int rc = check_video_opts(ctx, &vo[v], err);
        if (!rc && (x->path != NULL) + (x->data != NULL) + (x->rgb != NULL) != 1)
            rc = iris_err_set(err, IRIS_EINVAL, "%s: give exactly one of a path, bytes and decoded frames", label);
        if (!rc && x->rgb)
            rc = iris_video_prepare_frames(x->rgb, x->n_frames, x->width, x->height, x->src_fps, &vo[v], &vp[v], err);
        else if (!rc)
            rc = iris_video_prepare(x->path, x->data, x->n, label, &vo[v], &vp[v], err);
        if (rc) {
            if (bad_part) *bad_part = n_images + v;
            return rc;
        }
        iris_log(IRIS_LOG_DEBUG, "prompt", "%s: %lld frames at %.3f fps, %d sampled, %dx%d -> %dx%d, %d temporal "
                 "patches", label, (long long)vp[v].info.n_frames, vp[v].info.fps, vp[v].n_sampled,
                 vp[v].info.width, vp[v].info.height, vp[v].width, vp[v].height, vp[v].grid_t);
    }
    return IRIS_OK;
}

/* The rendered text with each video's pad written out per temporal patch, and the items in the
 * order of their pads. */
static int expand_text(const char *text, const iris_video_prep *vp, const iris_video_opts *vo, int n_images,
                       int n_videos, media_item *items, int n_items, char **out, iris_err *err) {
    static const char IPAD[] = "<|image_pad|>", VPAD[] = "<|video_pad|>";
    iris_sbuf b = {0};
    int ni = 0, nv = 0, it = 0;
    const char *p = text;
    for (;;) {
        const char *a = strstr(p, IPAD), *v = strstr(p, VPAD);
        if (!a && !v) break;
        if (a && (!v || a < v)) {
            iris_sbuf_put(&b, p, (size_t)(a - p) + sizeof IPAD - 1);
            p = a + sizeof IPAD - 1;
            if (ni >= n_images || it >= n_items) break;
            items[it++] = (media_item){ni++, -1};
            continue;
        }
        iris_sbuf_put(&b, p, (size_t)(v - p));
        p = v + sizeof VPAD - 1;
        if (nv >= n_videos) break;
        for (int k = 0; k < vp[nv].grid_t && it < n_items; k++) {
            char ts[64];
            int m = snprintf(ts, sizeof ts, "<%.1f seconds><|vision_start|>", iris_video_timestamp(&vp[nv], &vo[nv], k));
            iris_sbuf_put(&b, ts, (size_t)m);
            iris_sbuf_put(&b, VPAD, sizeof VPAD - 1);
            iris_sbuf_put(&b, "<|vision_end|>", 14);
            items[it++] = (media_item){nv, k};
        }
        nv++;
    }
    iris_sbuf_put(&b, p, strlen(p));
    if (b.oom) {
        free(b.p);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    if (ni != n_images || nv != n_videos || it != n_items) {
        free(b.p);
        return iris_err_set(err, IRIS_EINVAL, "the prompt's image and video pads (%d, %d) do not match the %d "
                            "image(s) and %d video(s) given", ni, nv, n_images, n_videos);
    }
    *out = b.p;
    return IRIS_OK;
}

/* Images and videos into out in prompt order: grids, keys, pixel rows, the expanded text, and
 * each item's token count into *counts (malloc'd). */
static int add_media(const iris_prompt_ctx *ctx, const iris_prompt_image *images, int n_images,
                     const iris_prompt_video *videos, int n_videos, iris_prompt *out, int32_t **counts,
                     int *bad_part, iris_err *err) {
    iris_prompt im = {0};
    int32_t *icounts = calloc((size_t)n_images + 1, sizeof *icounts);
    iris_video_prep *vp = calloc((size_t)n_videos, sizeof *vp);
    iris_video_opts *vo = calloc((size_t)n_videos, sizeof *vo);
    media_item *items = NULL;
    char *text = NULL;
    int rc = !icounts || !vp || !vo ? iris_err_set(err, IRIS_ENOMEM, "out of memory") : IRIS_OK;
    if (!rc && n_images > 0) rc = add_images(ctx, images, n_images, &im, icounts, bad_part, err);
    if (!rc) rc = prepare_videos(ctx, videos, n_videos, vp, vo, n_images, bad_part, err);
    int n_items = n_images;
    for (int v = 0; !rc && v < n_videos; v++) n_items += vp[v].grid_t;
    if (!rc && !(items = calloc((size_t)n_items, sizeof *items))) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
    if (!rc) rc = expand_text(out->text, vp, vo, n_images, n_videos, items, n_items, &text, err);
    int64_t rows = 0, *img_row0 = NULL;
    if (!rc) {
        out->grid_thw = calloc((size_t)n_items * 3, sizeof *out->grid_thw);
        out->image_keys = malloc(32 * (size_t)n_items);
        *counts = malloc(sizeof **counts * (size_t)n_items);
        img_row0 = calloc((size_t)n_images + 1, sizeof *img_row0);
        if (!out->grid_thw || !out->image_keys || !*counts || !img_row0)
            rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    for (int i = 0; !rc && i < n_images; i++)
        img_row0[i + 1] = img_row0[i] + (int64_t)im.grid_thw[3 * i] * im.grid_thw[3 * i + 1] * im.grid_thw[3 * i + 2];
    int mm = ctx->cfg->vision_config.spatial_merge_size * ctx->cfg->vision_config.spatial_merge_size;
    for (int t = 0; !rc && t < n_items; t++) {
        const media_item *x = &items[t];
        int *g = out->grid_thw + 3 * t;
        if (x->k < 0) {
            memcpy(g, im.grid_thw + 3 * x->src, 3 * sizeof *g);
            memcpy(out->image_keys[t], im.image_keys[x->src], 32);
            (*counts)[t] = icounts[x->src];
        } else {
            g[0] = 1, g[1] = vp[x->src].grid_h, g[2] = vp[x->src].grid_w;
            (*counts)[t] = g[1] * g[2] / mm;
            if (iris_video_patch_key(&vp[x->src], &vo[x->src], x->k, out->image_keys[t]))
                rc = iris_err_set(err, IRIS_ENOMEM, "SHA-256 failed (libcrypto)");
        }
        rows += (int64_t)g[1] * g[2];
    }
    int dim = 3 * ctx->cfg->vision_config.temporal_patch_size * ctx->cfg->vision_config.patch_size *
              ctx->cfg->vision_config.patch_size;
    if (!rc && !(out->pixel_values = pixels_alloc((size_t)rows * (size_t)dim * sizeof(float))))
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory for %lld x %d pixel values", (long long)rows, dim);
    for (int64_t t = 0, r0 = 0; !rc && t < n_items; t++) {
        const media_item *x = &items[t];
        const int *g = out->grid_thw + 3 * t;
        int64_t k = (int64_t)g[1] * g[2];
        float *dst = out->pixel_values + r0 * dim;
        if (x->k < 0) memcpy(dst, im.pixel_values + img_row0[x->src] * dim, (size_t)k * dim * sizeof(float));
        else iris_video_patch_rows(&vp[x->src], &vo[x->src], x->k, 0, k, dst);
        r0 += k;
    }
    if (!rc) {
        free(out->text);
        out->text = text;
        text = NULL;
        out->n_rows = rows;
        out->n_images = n_items;
        out->n_videos = n_videos;
    }
    for (int v = 0; v < n_videos && vp; v++) iris_video_prep_free(&vp[v]);
    free(vp);
    free(vo);
    free(items);
    free(text);
    free(img_row0);
    free(icounts);
    iris_prompt_free(&im);
    return rc;
}

int iris_prompt_build(const iris_prompt_ctx *ctx, const json_t *messages, const iris_prompt_image *images,
                      int n_images, iris_prompt *out, int *bad_image, iris_err *err) {
    return iris_prompt_build_media(ctx, messages, images, n_images, NULL, 0, out, bad_image, err);
}

int iris_prompt_build_media(const iris_prompt_ctx *ctx, const json_t *messages, const iris_prompt_image *images,
                            int n_images, const iris_prompt_video *videos, int n_videos, iris_prompt *out,
                            int *bad_part, iris_err *err) {
    memset(out, 0, sizeof *out);
    if (bad_part) *bad_part = -1;
    iris_chat_opts opts = {.add_generation_prompt = 1, .style = ctx->chat_style, .no_thinking = ctx->no_thinking};
    iris_chat_info info = {0};
    size_t len = 0;
    int32_t *counts = NULL;
    json_t *flat = NULL;
    if (iris_chat_string_content(ctx->chat_style)) {
        /* text parts joined as vLLM does for templates that read only string content */
        if (!(flat = iris_chat_flatten_text(messages, &info.n_images)))
            return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    int n_media = info.n_images;
    int rc = iris_chat_render(flat ? flat : messages, ctx->tools, &opts, &out->text, &len, &info, err);
    json_decref(flat);
    if (rc) return rc;
    info.n_images += n_media;
    if (ctx->text_only && (n_images > 0 || info.n_images > 0 || info.n_videos > 0)) {
        rc = iris_err_set(err, IRIS_EUNSUPPORTED, "%d image(s) and %d video(s) given, but this model runs text only "
                          "(%s): send text only%s", n_images > info.n_images ? n_images : info.n_images, info.n_videos,
                          ctx->cfg->has_vision ? "--text-only" : "it has no vision tower",
                          ctx->cfg->has_vision ? ", or start iris without --text-only" : "");
        if (err) snprintf(err->param, sizeof err->param, "messages");
        goto fail;
    }
    if (n_images < 0 || (n_images > 0 && !images) || info.n_images != n_images) {
        rc = iris_err_set(err, IRIS_EINVAL, "the messages hold %d image part(s) but %d image(s) were given",
                          info.n_images, n_images);
        goto fail;
    }
    if (n_videos < 0 || (n_videos > 0 && !videos) || info.n_videos != n_videos) {
        rc = iris_err_set(err, IRIS_EINVAL, "the messages hold %d video part(s) but %d video(s) were given",
                          info.n_videos, n_videos);
        goto fail;
    }
    if (n_videos > 0) {
        rc = add_media(ctx, images, n_images, videos, n_videos, out, &counts, bad_part, err);
        if (rc) goto fail;
        len = strlen(out->text);
    } else if (n_images > 0) {
        if (!(counts = malloc(sizeof *counts * (size_t)n_images))) {
            rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
            goto fail;
        }
        rc = add_images(ctx, images, n_images, out, counts, bad_part, err);
        if (rc) goto fail;
    }
    rc = iris_chat_tokenize(ctx->tok, out->text, len, counts, (size_t)out->n_images, &out->ids, err);
    if (rc) goto fail;
    out->pos = malloc(sizeof(int32_t) * 3 * (out->ids.n ? out->ids.n : 1));
    if (!out->pos) {
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
        goto fail;
    }
    /* A text model has no merge size; with no image any positive one gives 0..n-1. */
    int merge = ctx->cfg->has_vision ? ctx->cfg->vision_config.spatial_merge_size : 1;
    rc = iris_pos_rope_index_av(out->ids.ids, (int)out->ids.n, ctx->cfg->image_token_id, ctx->cfg->video_token_id,
                                out->grid_thw, out->n_images, merge, out->pos, &out->rope_delta, err);
    if (rc) goto fail;
    free(counts);
    return IRIS_OK;
fail:
    free(counts);
    iris_prompt_free(out);
    return rc;
}

int iris_prompt_build_text(const iris_prompt_ctx *ctx, const char *text, iris_prompt *out, iris_err *err) {
    memset(out, 0, sizeof *out);
    int rc = iris_tok_encode(ctx->tok, text, strlen(text), &out->ids, err);
    if (rc) return rc;
    size_t n = out->ids.n;
    for (size_t i = 0; i < n; i++)
        if (out->ids.ids[i] == ctx->cfg->image_token_id || out->ids.ids[i] == ctx->cfg->video_token_id) {
            iris_prompt_free(out);
            return iris_err_set(err, IRIS_EINVAL, "prompt_text holds the image or video token; send images and "
                                "videos with messages_json");
        }
    out->pos = malloc(sizeof *out->pos * 3 * (n ? n : 1));
    if (!out->pos) {
        iris_prompt_free(out);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) out->pos[i] = out->pos[n + i] = out->pos[2 * n + i] = (int32_t)i;
    return IRIS_OK;
}
