/* fuzz_image.c: libFuzzer target for the image decoders (JPEG, PNG, WebP by
 * magic bytes), EXIF parsing and, for what decodes, the resize + patchify.
 * The pixel cap is small so the fuzzer explores parsers, not allocations. */
#include <stdint.h>
#include <stdlib.h>

#include "formats/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    iris_image_decode_opts o;
    iris_image_decode_opts_default(&o);
    o.max_pixels = 1 << 22;
    o.exif_rotate = size > 0 && (data[size - 1] & 1);
    iris_image img;
    iris_err err;
    int w, h;
    iris_image_format f;
    iris_image_probe_mem(data, size, "fuzz", &f, &w, &h, &err);
    (void)iris_image_exif_orientation(data, size);
    if (iris_image_decode_mem(data, size, "fuzz", &o, &img, &err) != 0) return 0;
    iris_image_prep_opts po;
    iris_image_prep_opts_default(&po);
    po.min_pixels = 1024;
    po.max_pixels = 1 << 16;
    iris_image_prep p;
    if (iris_image_prepare(&img, &po, &p, &err) == 0) {
        int64_t n = iris_image_prep_rows(&p);
        float *rows = malloc(sizeof(float) * (size_t)iris_image_row_dim(&po) * 2);
        if (rows && n > 0) iris_image_patch_rows(&p, &po, n - 1, n, rows);
        free(rows);
        iris_image_prep_free(&p);
    }
    iris_image_free(&img);
    return 0;
}
