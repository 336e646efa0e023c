/* cmd_preprocess.c: `iris preprocess IMAGE... --out FILE.npy`: images ->
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
#include "err.h"
#include "formats/image.h"
#include "npy.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: iris preprocess IMAGE... --out FILE.npy [options]\n\n"
            "Decode the images (JPEG, PNG, WebP) and write Qwen3-VL pixel_values as float32\n"
            "[N, 1536] to FILE.npy; print {\"grid_thw\": [[t, h, w], ...]} on stdout.\n\n"
            "  --out FILE.npy          where to write pixel_values (required)\n"
            "  --min-pixels N          smart_resize lower bound on h*w (default 65536)\n"
            "  --max-pixels N          smart_resize upper bound on h*w (default 16777216)\n"
            "  --no-exif-rotate        ignore the EXIF orientation (transformers' torchvision path\n"
            "                          does not apply it; by default photos are turned upright)\n"
            "  --max-image-pixels N    refuse larger images before decoding (default 178956970)\n");
}

static int parse_i64(const char *flag, const char *s, int64_t *v) {
    char *end;
    errno = 0;
    long long x = strtoll(s ? s : "", &end, 10);
    if (!s || errno || *end || x <= 0) {
        fprintf(stderr, "iris preprocess: %s needs a positive integer, got \"%s\"\n", flag, s ? s : "");
        return -1;
    }
    *v = x;
    return 0;
}

int iris_cmd_preprocess(int argc, char **argv) {
    iris_image_decode_opts dopts;
    iris_image_prep_opts popts;
    iris_image_decode_opts_default(&dopts);
    iris_image_prep_opts_default(&popts);
    const char *out = NULL;
    const char **paths = calloc((size_t)argc, sizeof *paths);
    int n = 0;
    if (!paths) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int bad = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            free(paths);
            return 0;
        } else if (!strcmp(a, "--out") || !strcmp(a, "-o")) {
            out = i + 1 < argc ? argv[++i] : NULL;
            bad = !out;
        } else if (!strcmp(a, "--min-pixels")) {
            bad = parse_i64(a, i + 1 < argc ? argv[++i] : NULL, &popts.min_pixels);
        } else if (!strcmp(a, "--max-pixels")) {
            bad = parse_i64(a, i + 1 < argc ? argv[++i] : NULL, &popts.max_pixels);
        } else if (!strcmp(a, "--max-image-pixels")) {
            bad = parse_i64(a, i + 1 < argc ? argv[++i] : NULL, &dopts.max_pixels);
        } else if (!strcmp(a, "--no-exif-rotate")) {
            dopts.exif_rotate = 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "iris preprocess: unknown option %s\n", a);
            bad = 1;
        } else {
            paths[n++] = a;
        }
        if (bad) {
            usage(stderr);
            free(paths);
            return 2;
        }
    }
    if (n == 0 || !out) {
        fprintf(stderr, "iris preprocess: %s\n", n == 0 ? "no IMAGE given" : "--out FILE.npy is required");
        usage(stderr);
        free(paths);
        return 2;
    }
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
