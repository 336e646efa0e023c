/* image_resize.c: smart_resize and PyTorch's uint8 antialiased bicubic resize.
 *
 * The resize reproduces aten/src/ATen/native/cpu/UpSampleKernel.cpp as used
 * by torchvision's resize(uint8 CPU tensor, BICUBIC, antialias=True)
 * (QWEN3VL.md §4.3), bit for bit:
 *  - per axis, scale = in/out (double); support = 2*max(scale,1); for output
 *    i: center = scale*(i+0.5), xmin = max((int64)(center-support+0.5), 0),
 *    xsize = min((int64)(center+support+0.5), in) - xmin; weights
 *    K((j+xmin-center+0.5)/max(scale,1)) with Keys a = -0.5, normalized in
 *    double (_compute_indices_min_size_weights_aa);
 *  - int16 weights at the largest precision p < 22 with
 *    (int)(0.5 + wmax*2^(p+1)) < 2^15, w16 = round-half-away(w*2^p)
 *    (_compute_index_ranges_int16_weights);
 *  - out = clamp((2^(p-1) + sum src*w16) >> p, 0, 255);
 *  - the width pass first into a uint8 buffer, then the height pass; a pass
 *    whose size does not change is skipped (separable_upsample_generic_Nd).
 * Tables are computed once per axis; the loops are integer-only. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "err.h"
#include "image_internal.h"

int iris_image_smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels,
                            int *out_height, int *out_width, iris_err *err) {
    if (height <= 0 || width <= 0 || factor <= 0)
        return iris_err_set(err, IRIS_EINVAL, "smart_resize: bad size %dx%d (factor %d)", width, height, factor);
    int mx = height > width ? height : width, mn = height > width ? width : height;
    /* Python: max(h, w) / min(h, w) > 200 (true division) */
    if ((double)mx / (double)mn > IRIS_IMAGE_MAX_ASPECT)
        return iris_err_set(err, IRIS_EINVAL,
                            "image is %dx%d: aspect ratio %.1f is over the limit of %d (crop or pad it)", width,
                            height, (double)mx / mn, IRIS_IMAGE_MAX_ASPECT);
    /* Python round() is round-half-to-even: nearbyint in the default mode. */
    int64_t hb = (int64_t)nearbyint((double)height / factor) * factor;
    int64_t wb = (int64_t)nearbyint((double)width / factor) * factor;
    if (hb * wb > max_pixels) {
        double beta = sqrt((double)height * width / (double)max_pixels);
        hb = (int64_t)floor(height / beta / factor) * factor;
        wb = (int64_t)floor(width / beta / factor) * factor;
        if (hb < factor) hb = factor;
        if (wb < factor) wb = factor;
    } else if (hb * wb < min_pixels) {
        double beta = sqrt((double)min_pixels / ((double)height * width));
        hb = (int64_t)ceil(height * beta / factor) * factor;
        wb = (int64_t)ceil(width * beta / factor) * factor;
    }
    if (hb <= 0 || wb <= 0 || hb > (1 << 20) || wb > (1 << 20))
        return iris_err_set(err, IRIS_EINVAL, "smart_resize: %dx%d gives an unusable %lldx%lld", width, height,
                            (long long)wb, (long long)hb);
    *out_height = (int)hb;
    *out_width = (int)wb;
    return 0;
}

/* HelperInterpCubic::aa_filter (Pillow's bicubic, a = -0.5), same operation order. */
static double aa_cubic(double x) {
    const double a = -0.5;
    if (x < 0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    return 0.0;
}

typedef struct axis_tab {
    int n_out, ksize;   /* ksize: taps stored per output (max_interp_size) */
    int *xmin, *xsize;
    int16_t *w;         /* n_out * ksize */
    int precision;
} axis_tab;

static void axis_free(axis_tab *a) {
    free(a->xmin);
    free(a->xsize);
    free(a->w);
}

static int axis_make(int in, int out, axis_tab *a) {
    memset(a, 0, sizeof *a);
    double scale = (double)in / (double)out;
    double support = scale >= 1.0 ? (4 * 0.5) * scale : 4 * 0.5;
    int ksize = (int)ceil(support) * 2 + 1;
    double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    a->n_out = out;
    a->ksize = ksize;
    a->xmin = malloc(sizeof(int) * (size_t)out);
    a->xsize = malloc(sizeof(int) * (size_t)out);
    a->w = calloc((size_t)out * (size_t)ksize, sizeof(int16_t));
    double *wf = malloc(sizeof(double) * (size_t)out * (size_t)ksize);
    if (!a->xmin || !a->xsize || !a->w || !wf) {
        free(wf);
        axis_free(a);
        return IRIS_ENOMEM;
    }
    double wt_max = 0.0;
    for (int i = 0; i < out; i++) {
        double center = scale * (i + 0.5);
        double *w = wf + (size_t)i * ksize;
        int64_t xmin = (int64_t)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int64_t xmax = (int64_t)(center + support + 0.5);
        if (xmax > in) xmax = in;
        int64_t xsize = xmax - xmin;
        if (xsize < 0) xsize = 0;
        if (xsize > ksize) xsize = ksize;
        double total = 0.0;
        int64_t j = 0;
        for (; j < xsize; j++) {
            double v = aa_cubic(((double)(j + xmin) - center + 0.5) * invscale);
            w[j] = v;
            total += v;
        }
        if (total != 0.0)
            for (j = 0; j < xsize; j++) {
                w[j] /= total;
                if (w[j] > wt_max) wt_max = w[j];
            }
        for (; j < ksize; j++) w[j] = 0.0;
        a->xmin[i] = (int)xmin;
        a->xsize[i] = (int)xsize;
    }
    int p;
    for (p = 0; p < 22; ++p) {
        int next = (int)(0.5 + wt_max * (1 << (p + 1)));
        if (next >= (1 << 15)) break;
    }
    a->precision = p;
    for (size_t k = 0; k < (size_t)out * ksize; k++) {
        double v = wf[k] * (1 << p);
        a->w[k] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
    }
    free(wf);
    return 0;
}

static inline uint8_t clamp_shift(int32_t s, int p) {
    s >>= p; /* arithmetic shift: gcc/clang on every target we build for */
    return (uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s);
}

/* Width pass: rows [0, h) of src (w_in wide) into dst (a->n_out wide). */
static void pass_horizontal(const uint8_t *src, int w_in, int h, const axis_tab *a, uint8_t *dst) {
    const int p = a->precision, wout = a->n_out;
    const int32_t bias = p > 0 ? 1 << (p - 1) : 0;
    (void)w_in;
    for (int y = 0; y < h; y++) {
        const uint8_t *row = src + (size_t)y * w_in * 3;
        uint8_t *d = dst + (size_t)y * wout * 3;
        for (int x = 0; x < wout; x++) {
            const uint8_t *s = row + (size_t)a->xmin[x] * 3;
            const int16_t *w = a->w + (size_t)x * a->ksize;
            int32_t r = bias, g = bias, b = bias;
            for (int k = 0, n = a->xsize[x]; k < n; k++) {
                int32_t wk = w[k];
                r += s[3 * k] * wk;
                g += s[3 * k + 1] * wk;
                b += s[3 * k + 2] * wk;
            }
            d[3 * x] = clamp_shift(r, p);
            d[3 * x + 1] = clamp_shift(g, p);
            d[3 * x + 2] = clamp_shift(b, p);
        }
    }
}

/* One output row of the height pass over n bytes: rows[k] are the input rows
 * of the taps.  The SSE2 path interleaves two input rows as int16 pairs and
 * uses madd (a*w0 + b*w1 in int32), Pillow-SIMD's scheme: the same exact
 * integer sums as the scalar loop, so the same bytes. */
static void vertical_row(const uint8_t *const *rows, const int16_t *w, int taps, size_t n, int p, uint8_t *d) {
    const int32_t bias = p > 0 ? 1 << (p - 1) : 0;
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128(), vb = _mm_set1_epi32(bias);
    const __m128i shift = _mm_cvtsi32_si128(p);
    for (; i + 16 <= n; i += 16) {
        __m128i s0 = vb, s1 = vb, s2 = vb, s3 = vb;
        for (int k = 0; k < taps; k += 2) {
            __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(rows[k] + i));
            __m128i b = k + 1 < taps ? _mm_loadu_si128((const __m128i *)(const void *)(rows[k + 1] + i)) : zero;
            uint32_t w1 = k + 1 < taps ? (uint16_t)w[k + 1] : 0;
            __m128i ww = _mm_set1_epi32((int)((uint32_t)(uint16_t)w[k] | w1 << 16));
            __m128i lo = _mm_unpacklo_epi8(a, b), hi = _mm_unpackhi_epi8(a, b);
            s0 = _mm_add_epi32(s0, _mm_madd_epi16(_mm_unpacklo_epi8(lo, zero), ww));
            s1 = _mm_add_epi32(s1, _mm_madd_epi16(_mm_unpackhi_epi8(lo, zero), ww));
            s2 = _mm_add_epi32(s2, _mm_madd_epi16(_mm_unpacklo_epi8(hi, zero), ww));
            s3 = _mm_add_epi32(s3, _mm_madd_epi16(_mm_unpackhi_epi8(hi, zero), ww));
        }
        s0 = _mm_sra_epi32(s0, shift);
        s1 = _mm_sra_epi32(s1, shift);
        s2 = _mm_sra_epi32(s2, shift);
        s3 = _mm_sra_epi32(s3, shift);
        /* saturating packs clamp to [0, 255] exactly as clamp_shift does */
        __m128i out = _mm_packus_epi16(_mm_packs_epi32(s0, s1), _mm_packs_epi32(s2, s3));
        _mm_storeu_si128((__m128i *)(void *)(d + i), out);
    }
#endif
    for (; i < n; i++) {
        int32_t acc = bias;
        for (int k = 0; k < taps; k++) acc += rows[k][i] * (int32_t)w[k];
        d[i] = clamp_shift(acc, p);
    }
}

/* Height pass: each output row is a weighted sum of whole input rows, so the
 * inner loop runs along a row (contiguous). */
static void pass_vertical(const uint8_t *src, int w, const axis_tab *a, uint8_t *dst) {
    const size_t n = (size_t)w * 3;
    const uint8_t *rows[64];
    for (int y = 0; y < a->n_out; y++) {
        const int16_t *wy = a->w + (size_t)y * a->ksize;
        int taps = a->xsize[y];
        const uint8_t *const *rp = rows;
        const uint8_t **heap = NULL;
        if (taps > 64) {
            heap = malloc(sizeof(*heap) * (size_t)taps);
            if (!heap) taps = 0; /* cannot happen for images under the pixel cap; leaves zeros */
            rp = heap;
        }
        const uint8_t **wr = heap ? heap : rows;
        for (int k = 0; k < taps; k++) wr[k] = src + (size_t)(a->xmin[y] + k) * n;
        vertical_row(rp, wy, taps, n, a->precision, dst + (size_t)y * n);
        free(heap);
    }
}

int iris_image_resize_bicubic(const iris_image *src, int out_width, int out_height, iris_image *dst,
                              iris_err *err) {
    memset(dst, 0, sizeof *dst);
    int W = src->width, H = src->height;
    if (W <= 0 || H <= 0 || out_width <= 0 || out_height <= 0)
        return iris_err_set(err, IRIS_EINVAL, "resize: bad size %dx%d -> %dx%d", W, H, out_width, out_height);
    size_t out_bytes = (size_t)out_width * out_height * 3;
    uint8_t *out = malloc(out_bytes);
    if (!out) return iris_err_set(err, IRIS_ENOMEM, "resize: out of memory for %dx%d", out_width, out_height);
    int need_h = out_width != W, need_v = out_height != H;
    if (!need_h && !need_v) {
        memcpy(out, src->rgb, out_bytes);
    } else {
        axis_tab ax = {0}, ay = {0};
        uint8_t *mid = NULL;
        int rc = 0;
        if (need_h) rc |= axis_make(W, out_width, &ax);
        if (need_v) rc |= axis_make(H, out_height, &ay);
        if (need_h && need_v) rc |= (mid = malloc((size_t)out_width * H * 3)) ? 0 : IRIS_ENOMEM;
        if (rc == 0) {
            if (need_h && need_v) {
                pass_horizontal(src->rgb, W, H, &ax, mid);
                pass_vertical(mid, out_width, &ay, out);
            } else if (need_h) {
                pass_horizontal(src->rgb, W, H, &ax, out);
            } else {
                pass_vertical(src->rgb, W, &ay, out);
            }
        }
        if (need_h) axis_free(&ax);
        if (need_v) axis_free(&ay);
        free(mid);
        if (rc) {
            free(out);
            return iris_err_set(err, IRIS_ENOMEM, "resize: out of memory (%dx%d -> %dx%d)", W, H, out_width,
                                out_height);
        }
    }
    dst->width = out_width;
    dst->height = out_height;
    dst->rgb = out;
    return 0;
}

int iris_image_prepare(const iris_image *src, const iris_image_prep_opts *o, iris_image_prep *out, iris_err *err) {
    iris_image_prep_opts def;
    if (!o) {
        iris_image_prep_opts_default(&def);
        o = &def;
    }
    memset(out, 0, sizeof *out);
    if (o->patch_size <= 0 || o->merge_size <= 0 || o->temporal_patch_size <= 0)
        return iris_err_set(err, IRIS_EINVAL, "preprocess: bad patch_size %d / merge_size %d / temporal_patch_size %d",
                            o->patch_size, o->merge_size, o->temporal_patch_size);
    if (o->min_pixels > o->max_pixels)
        return iris_err_set(err, IRIS_EINVAL, "preprocess: min_pixels %lld is larger than max_pixels %lld",
                            (long long)o->min_pixels, (long long)o->max_pixels);
    int factor = o->patch_size * o->merge_size, rh, rw;
    int rc = iris_image_smart_resize(src->height, src->width, factor, o->min_pixels, o->max_pixels, &rh, &rw, err);
    if (rc) return rc;
    rc = iris_image_resize_bicubic(src, rw, rh, &out->resized, err);
    if (rc) return rc;
    out->grid_t = 1;
    out->grid_h = rh / o->patch_size;
    out->grid_w = rw / o->patch_size;
    return 0;
}

void iris_image_prep_free(iris_image_prep *p) {
    if (!p) return;
    iris_image_free(&p->resized);
    p->grid_t = p->grid_h = p->grid_w = 0;
}
