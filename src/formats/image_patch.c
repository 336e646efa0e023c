/* image_patch.c: normalize + patchify a prepared image into pixel_values rows.
 *
 * QWEN3VL.md §4.4-4.5.  Row n (merge-window order) and column j:
 *   n = ((bh*(gw/m) + bw)*m + mh)*m + mw,  patch (r, c) = (m*bh + mh, m*bw + mw)
 *   j = ((ch*T + t)*P + py)*P + px,        value = norm_ch(img[P*r+py][P*c+px][ch])
 * for every t < T (the frame repeated along time).  Normalization is
 * torchvision-backend HF's fused form: mean' = mean/(1/255), std' = std/(1/255)
 * (computed in double, used as float32), value = ((float)x - mean') / std' in
 * float32; with mean = std = 0.5 that is (x - 127.5) / 127.5 exactly.  It is
 * a function of the byte, so a 256-entry table per channel holds it.
 * Rows can be produced in any range, so the engine never needs the whole
 * float32 array of a big image.  A video's temporal patch passes its own
 * frame per temporal slot (iris_image_patch_frames); an image, one frame in
 * every slot. */
#include <string.h>

#include "image.h"

int64_t iris_image_prep_rows(const iris_image_prep *p) {
    return (int64_t)p->grid_t * p->grid_h * p->grid_w;
}

int iris_image_row_dim(const iris_image_prep_opts *o) {
    return 3 * o->temporal_patch_size * o->patch_size * o->patch_size;
}

static void norm_tables(const iris_image_prep_opts *o, float lut[3][256]) {
    const double rescale = 1.0 / 255.0;
    for (int c = 0; c < 3; c++) {
        float m = (float)(o->image_mean[c] * (1.0 / rescale));
        float s = (float)(o->image_std[c] * (1.0 / rescale));
        for (int v = 0; v < 256; v++) lut[c][v] = ((float)v - m) / s;
    }
}

void iris_image_patch_frames(const uint8_t *const *frames, int width, int grid_h, int grid_w,
                             const iris_image_prep_opts *o, int64_t r0, int64_t r1, float *out) {
    float lut[3][256];
    norm_tables(o, lut);
    const int P = o->patch_size, m = o->merge_size, T = o->temporal_patch_size;
    const int gw = grid_w, gh = grid_h;
    const int64_t per_frame = (int64_t)gh * gw;
    const size_t W = (size_t)width;
    const size_t plane = (size_t)P * P; /* floats per (channel, t) block */
    const int D = 3 * T * P * P;
    int same = 1; /* an image: one frame in every temporal slot, converted once */
    for (int t = 1; t < T; t++) same &= frames[t] == frames[0];
    for (int64_t n = r0; n < r1; n++) {
        float *dst = out + (size_t)(n - r0) * D;
        int64_t k = n % per_frame; /* rows repeat per grid_t slice: the slices see the same frames */
        int mw = (int)(k % m), mh = (int)(k / m % m);
        int64_t win = k / ((int64_t)m * m);
        int bw = (int)(win % (gw / m)), bh = (int)(win / (gw / m));
        int r = bh * m + mh, c = bw * m + mw;
        for (int ch = 0; ch < 3; ch++) {
            float *blk = dst + (size_t)ch * T * plane;
            const float *l = lut[ch];
            for (int t = 0; t < (same ? 1 : T); t++)
                for (int py = 0; py < P; py++) {
                    const uint8_t *s = frames[t] + ((size_t)(P * r + py) * W + (size_t)P * c) * 3 + ch;
                    float *d = blk + (size_t)t * plane + (size_t)py * P;
                    for (int px = 0; px < P; px++) d[px] = l[s[3 * px]];
                }
            if (same)
                for (int t = 1; t < T; t++) memcpy(blk + (size_t)t * plane, blk, plane * sizeof(float));
        }
    }
}

void iris_image_patch_rows(const iris_image_prep *p, const iris_image_prep_opts *o, int64_t r0, int64_t r1,
                           float *out) {
    const uint8_t *frames[64];
    int T = o->temporal_patch_size < 64 ? o->temporal_patch_size : 64;
    for (int t = 0; t < T; t++) frames[t] = p->resized.rgb;
    iris_image_patch_frames(frames, p->resized.width, p->grid_h, p->grid_w, o, r0, r1, out);
}
