/* cmd_preprocess.c: `iris preprocess IMAGE... -o FILE.npy`: images ->
 * Qwen3-VL pixel_values, as transformers' Qwen2VLImageProcessor makes them.
 *
 * Writes float32 [N, 1536] (all images concatenated in order) as .npy and
 * prints {"grid_thw": [[t, h, w], ...]} on stdout.  The rows are streamed to
 * the file image by image, a block at a time, so a 12 MP photo never needs
 * its ~290 MB float32 array in memory. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "opts.h"
#include "err.h"
#include "formats/image.h"
#include "npy.h"

int iris_cmd_preprocess(int argc, char **argv) {
    iris_image_decode_opts dopts;
    iris_image_prep_opts popts;
    iris_image_decode_opts_default(&dopts);
    iris_image_prep_opts_default(&popts);
    const char *out = NULL;
    long long minp = popts.min_pixels, maxp = popts.max_pixels, maxi = dopts.max_pixels;
    int no_exif = 0;
    iris_opt own[] = {
        {"--out", 'o', IRIS_OPT_STR, &out, "FILE.npy", "where to write pixel_values (required)", 0, 0, NULL, NULL, 0},
        {"--min-pixels", 0, IRIS_OPT_INT, &minp, "N", "smart_resize lower bound on h*w (default 65536)", 1, 9.2e18, NULL,
         NULL, 0},
        {"--max-pixels", 0, IRIS_OPT_INT, &maxp, "N", "smart_resize upper bound on h*w (default 16777216)", 1, 9.2e18,
         NULL, NULL, 0},
        {"--no-exif-rotate", 0, IRIS_OPT_FLAG, &no_exif, NULL,
         "ignore the EXIF orientation (transformers' torchvision path does\nnot apply it; by default photos are "
         "turned upright)", 0, 0, NULL, NULL, 0},
        {"--max-image-pixels", 0, IRIS_OPT_INT, &maxi, "N", "refuse larger images before decoding (default 178956970)",
         1, 9.2e18, NULL, NULL, 0},
        IRIS_OPT_TABLE_END,
    };
    iris_cli_spec sp = {
        .cmd = "preprocess",
        .usage = "IMAGE... -o FILE.npy [options]",
        .about = "Decode the images (JPEG, PNG, WebP) and write Qwen3-VL pixel_values as float32\n"
                 "[N, 1536] to FILE.npy; print {\"grid_thw\": [[t, h, w], ...]} on stdout.",
        .max_pos = argc,
        .tables = {own},
    };
    const char **paths = calloc((size_t)argc + 1, sizeof *paths);
    int n = 0;
    if (!paths) return 1;
    int st = iris_cli_parse(&sp, argc, argv, paths, &n);
    if (st < 0 && (n == 0 || !out))
        st = iris_cli_usage_error("preprocess", "%s", n == 0 ? "give IMAGE..." : "give --out FILE.npy");
    if (st >= 0) {
        free(paths);
        return st;
    }
    popts.min_pixels = minp, popts.max_pixels = maxp, dopts.max_pixels = maxi;
    if (no_exif) dopts.exif_rotate = 0;
    iris_err err = {0};
    int rc = 0;
    iris_image_prep *preps = calloc((size_t)n, sizeof *preps);
    FILE *f = NULL;
    float *block = NULL;
    if (!preps) {
        rc = iris_err_set(&err, IRIS_ENOMEM, "out of memory");
        goto done;
    }
    int64_t total = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        iris_image img;
        rc = iris_image_decode_file(paths[i], &dopts, &img, &err);
        if (rc) break;
        rc = iris_image_prepare(&img, &popts, &preps[i], &err);
        iris_image_free(&img);
        if (rc) iris_err_prefix(&err, "%s", paths[i]);
        else total += iris_image_prep_rows(&preps[i]);
    }
    if (rc) goto done;
    const int d = iris_image_row_dim(&popts);
    const int64_t block_rows = 1024;
    block = malloc((size_t)block_rows * d * sizeof(float));
    f = fopen(out, "wb");
    if (!block || !f) {
        rc = iris_err_set(&err, f ? IRIS_ENOMEM : IRIS_EIO, "%s: cannot create: %s", out, strerror(errno));
        goto done;
    }
    int64_t shape[2] = {total, d};
    rc = iris_npy_write_header_f32(f, shape, 2, &err);
    for (int i = 0; i < n && rc == 0; i++) {
        int64_t rows = iris_image_prep_rows(&preps[i]);
        for (int64_t r = 0; r < rows && rc == 0; r += block_rows) {
            int64_t r1 = r + block_rows < rows ? r + block_rows : rows;
            iris_image_patch_rows(&preps[i], &popts, r, r1, block);
            if (fwrite(block, sizeof(float) * (size_t)d, (size_t)(r1 - r), f) != (size_t)(r1 - r))
                rc = iris_err_set(&err, IRIS_EIO, "%s: write failed: %s", out, strerror(errno));
        }
    }
    if (fclose(f) != 0 && rc == 0) rc = iris_err_set(&err, IRIS_EIO, "%s: write failed: %s", out, strerror(errno));
    f = NULL;
    if (rc == 0) {
        printf("{\"grid_thw\": [");
        for (int i = 0; i < n; i++)
            printf("%s[%d, %d, %d]", i ? ", " : "", preps[i].grid_t, preps[i].grid_h, preps[i].grid_w);
        printf("]}\n");
    }
done:
    if (f) fclose(f);
    free(block);
    if (preps)
        for (int i = 0; i < n; i++) iris_image_prep_free(&preps[i]);
    free(preps);
    free(paths);
    return rc ? iris_cli_fail(&err) : 0;
}
