/* test_image.c: image decoding and Qwen3-VL preprocessing against transformers.
 *
 * The references (tests/fixtures/images/refs.json) come from
 * tools/ref_images.py run with transformers 5.17 / torchvision 0.26 on the
 * GPU machine: torchvision.io.decode_image(mode=RGB) + Qwen2VLImageProcessor.
 * For each image we compare the decoded RGB (sha256), the resized image
 * (sha256 of tvF.resize), the grid, and pixel_values (sha256 of the float32
 * bytes; where the decoders differ, the sampled rows and sums within
 * 1/127.5 on at most 0.1% of values). */
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/image.h"
#include "test.h"

#define FIX "tests/fixtures/images/"

static json_t *refs(void) {
    static json_t *root;
    if (!root) {
        json_error_t je;
        root = json_load_file(FIX "refs.json", 0, &je);
        if (!root) fprintf(stderr, "refs.json: %s (line %d)\n", je.text, je.line);
    }
    return root;
}

static void sha256_hex(const void *data, size_t n, char hex[65]) {
    unsigned char md[32];
    unsigned int len = 0;
    EVP_Digest(data, n, md, &len, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", md[i]);
}

static int read_whole(const char *path, uint8_t **data, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc((size_t)sz + 1);
    *n = fread(*data, 1, (size_t)sz, f);
    fclose(f);
    return *n == (size_t)sz ? 0 : -1;
}

/* Base64 (standard alphabet, padded) -> bytes; returns the length or -1. */
static int b64_decode(const char *s, uint8_t *out, int cap) {
    int len = (int)strlen(s);
    if (len % 4 || len / 4 * 3 > cap) return -1;
    int n = EVP_DecodeBlock(out, (const unsigned char *)s, len);
    if (n < 0) return -1;
    if (len && s[len - 1] == '=') n--;
    if (len > 1 && s[len - 2] == '=') n--;
    return n;
}

typedef struct cmp_result {
    int exact;
    int64_t n_rows_checked, n_diff;
    double max_diff;
} cmp_result;

/* pixel_values (n x d) against a reference summary: sha, or sums + sampled rows. */
static void check_pixels(const char *what, const float *pv, int64_t n, int d, json_t *ref, cmp_result *res) {
    memset(res, 0, sizeof *res);
    json_t *shape = json_object_get(ref, "shape");
    CHECKF(json_integer_value(json_array_get(shape, 0)) == n && json_integer_value(json_array_get(shape, 1)) == d,
           "%s: shape %" PRId64 "x%d, reference %" PRId64 "x%" PRId64, what, n, d,
           (int64_t)json_integer_value(json_array_get(shape, 0)), (int64_t)json_integer_value(json_array_get(shape, 1)));
    char hex[65];
    sha256_hex(pv, (size_t)n * d * sizeof(float), hex);
    if (strcmp(hex, json_string_value(json_object_get(ref, "sha256"))) == 0) {
        res->exact = 1;
        return;
    }
    /* Not bit-identical: allowed only within 1/127.5 on <= 0.1% of values. */
    const double lsb = 1.0 / 127.5 + 1e-6;
    json_t *idx = json_object_get(ref, "row_idx"), *rows = json_object_get(ref, "rows_b64");
    uint8_t codes[8192];
    for (size_t i = 0; i < json_array_size(idx); i++) {
        int64_t r = json_integer_value(json_array_get(idx, i));
        int len = b64_decode(json_string_value(json_array_get(rows, i)), codes, (int)sizeof codes);
        CHECKF(len == d && r >= 0 && r < n, "%s: bad reference row %" PRId64, what, r);
        if (len != d || r < 0 || r >= n) continue;
        for (int j = 0; j < d; j++) {
            float want = ((float)codes[j] - 127.5f) / 127.5f;
            double diff = fabs((double)pv[r * d + j] - want);
            if (diff > 1e-7) res->n_diff++;
            if (diff > res->max_diff) res->max_diff = diff;
        }
        res->n_rows_checked++;
    }
    double sum = 0;
    for (int64_t i = 0; i < n * d; i++) sum += pv[i];
    double ref_sum = json_real_value(json_object_get(ref, "sum"));
    int64_t n_sampled = res->n_rows_checked * d;
    CHECKF(res->max_diff <= lsb, "%s: sampled max |diff| %.6g > 1/127.5", what, res->max_diff);
    CHECKF(res->n_diff <= n_sampled / 1000, "%s: %" PRId64 " of %" PRId64 " sampled values differ (> 0.1%%)", what,
           res->n_diff, n_sampled);
    CHECKF(fabs(sum - ref_sum) <= 0.001 * (double)n * d * lsb + 1e-3,
           "%s: sum %.6f vs reference %.6f: more than 0.1%% of values off by 1/127.5", what, sum, ref_sum);
}

static json_t *find_image(const char *name) {
    json_t *imgs = json_object_get(refs(), "images");
    for (size_t i = 0; i < json_array_size(imgs); i++) {
        json_t *e = json_array_get(imgs, i);
        if (strcmp(json_string_value(json_object_get(e, "name")), name) == 0) return e;
    }
    return NULL;
}

IRIS_TEST(image_parity_fixtures) {
    REQUIRE(refs());
    json_t *imgs = json_object_get(refs(), "images");
    REQUIRE(json_array_size(imgs) >= 30);
    iris_image_decode_opts dopts;
    iris_image_decode_opts_default(&dopts);
    dopts.exif_rotate = 0; /* torchvision's decode_image does not apply it by default */
    iris_image_prep_opts popts;
    iris_image_prep_opts_default(&popts);
    int n_exact = 0, n_decoder_diff = 0, n_total = 0;
    for (size_t i = 0; i < json_array_size(imgs); i++) {
        json_t *e = json_array_get(imgs, i);
        const char *name = json_string_value(json_object_get(e, "name"));
        char path[512];
        snprintf(path, sizeof path, FIX "%s", json_string_value(json_object_get(e, "file")));
        iris_image img;
        iris_err err = {0};
        int rc = iris_image_decode_file(path, &dopts, &img, &err);
        CHECKF(rc == 0, "%s: %s", name, err.msg);
        if (rc) continue;
        json_t *dec = json_object_get(e, "decoded");
        CHECK_EQ_INT(img.width, json_integer_value(json_object_get(dec, "w")));
        CHECK_EQ_INT(img.height, json_integer_value(json_object_get(dec, "h")));
        char hex[65];
        sha256_hex(img.rgb, (size_t)img.width * img.height * 3, hex);
        int decode_same = strcmp(hex, json_string_value(json_object_get(dec, "sha256"))) == 0;
        int is_jpeg = strstr(name, ".jpg") != NULL;
        /* Only JPEG decoders may legitimately differ (libjpeg-turbo versions); PNG/WebP must match. */
        CHECKF(decode_same || is_jpeg, "%s: decoded RGB differs from torchvision", name);
        if (!decode_same) {
            n_decoder_diff++;
            fprintf(stderr, "  note: %s: decoded RGB differs from torchvision's (JPEG decoder)\n", name);
        }
        iris_image_prep prep;
        rc = iris_image_prepare(&img, &popts, &prep, &err);
        json_t *ref_err = json_object_get(e, "error");
        if (ref_err) {
            CHECKF(rc != 0, "%s: reference refused it (%s) but we accepted it", name, json_string_value(ref_err));
            CHECK_CONTAINS(err.msg, "aspect ratio");
            iris_image_free(&img);
            continue;
        }
        CHECKF(rc == 0, "%s: %s", name, err.msg);
        iris_image_free(&img);
        if (rc) continue;
        n_total++;
        json_t *grid = json_object_get(e, "grid_thw");
        CHECK_EQ_INT(prep.grid_t, json_integer_value(json_array_get(grid, 0)));
        CHECK_EQ_INT(prep.grid_h, json_integer_value(json_array_get(grid, 1)));
        CHECK_EQ_INT(prep.grid_w, json_integer_value(json_array_get(grid, 2)));
        sha256_hex(prep.resized.rgb, (size_t)prep.resized.width * prep.resized.height * 3, hex);
        int resized_same = strcmp(hex, json_string_value(json_object_get(e, "resized_sha256"))) == 0;
        CHECKF(resized_same || !decode_same, "%s: same decode, but the resized image differs from tvF.resize", name);
        int64_t n = iris_image_prep_rows(&prep);
        int d = iris_image_row_dim(&popts);
        float *pv = malloc((size_t)n * d * sizeof(float));
        REQUIRE(pv);
        iris_image_patch_rows(&prep, &popts, 0, n, pv);
        cmp_result res;
        check_pixels(name, pv, n, d, e, &res);
        CHECKF(res.exact || !decode_same, "%s: same decode, pixel_values not bit-identical", name);
        if (res.exact) n_exact++;
        else
            fprintf(stderr, "  note: %s: within tolerance: %" PRId64 " sampled values differ, max %.4g\n", name,
                    res.n_diff, res.max_diff);
        free(pv);
        iris_image_prep_free(&prep);
    }
    fprintf(stderr, "  image parity: %d/%d bit-identical, %d JPEG decodes differ from torchvision\n", n_exact,
            n_total, n_decoder_diff);
}

IRIS_TEST(image_exif_orientation) {
    REQUIRE(refs());
    json_t *imgs = json_object_get(refs(), "images");
    int n = 0;
    for (size_t i = 0; i < json_array_size(imgs); i++) {
        json_t *e = json_array_get(imgs, i);
        json_t *ex = json_object_get(e, "decoded_exif");
        if (!ex) continue;
        n++;
        const char *name = json_string_value(json_object_get(e, "name"));
        char path[512];
        snprintf(path, sizeof path, FIX "%s", json_string_value(json_object_get(e, "file")));
        iris_image_decode_opts o;
        iris_image_decode_opts_default(&o);
        for (int rot = 0; rot < 2; rot++) {
            o.exif_rotate = rot;
            json_t *want = rot ? ex : json_object_get(e, "decoded");
            iris_image img;
            iris_err err = {0};
            int rc = iris_image_decode_file(path, &o, &img, &err);
            CHECKF(rc == 0, "%s: %s", name, err.msg);
            if (rc) continue;
            char hex[65];
            sha256_hex(img.rgb, (size_t)img.width * img.height * 3, hex);
            CHECK_EQ_INT(img.width, json_integer_value(json_object_get(want, "w")));
            CHECK_EQ_INT(img.height, json_integer_value(json_object_get(want, "h")));
            CHECKF(strcmp(hex, json_string_value(json_object_get(want, "sha256"))) == 0,
                   "%s (exif_rotate=%d): pixels differ from torchvision (apply_exif_orientation=%s)", name, rot,
                   rot ? "True" : "False");
            iris_image_free(&img);
        }
    }
    CHECK(n >= 9);
    /* A malformed block never reads out of bounds and reports no orientation. */
    const uint8_t good[] = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0, 0, 0};
    CHECK_EQ_INT(iris_image_exif_orientation(good, sizeof good), 6);
    for (size_t cut = 0; cut < sizeof good - 4; cut++) CHECK_EQ_INT(iris_image_exif_orientation(good, cut), 0);
    uint8_t bad[sizeof good];
    memcpy(bad, good, sizeof good);
    bad[7] = 200; /* IFD offset past the end */
    CHECK_EQ_INT(iris_image_exif_orientation(bad, sizeof bad), 0);
}

IRIS_TEST(image_multi_and_custom_pixels) {
    REQUIRE(refs());
    json_t *multi = json_object_get(refs(), "multi");
    REQUIRE(json_array_size(multi) >= 1);
    iris_image_decode_opts dopts;
    iris_image_decode_opts_default(&dopts);
    dopts.exif_rotate = 0;
    for (size_t i = 0; i < json_array_size(multi); i++) {
        json_t *m = json_array_get(multi, i);
        json_t *names = json_object_get(m, "names");
        int k = (int)json_array_size(names);
        char paths[8][512];
        const char *pp[8];
        REQUIRE(k <= 8);
        for (int j = 0; j < k; j++) {
            json_t *e = find_image(json_string_value(json_array_get(names, j)));
            REQUIRE(e);
            snprintf(paths[j], sizeof paths[j], FIX "%s", json_string_value(json_object_get(e, "file")));
            pp[j] = paths[j];
        }
        float *pv;
        int64_t n;
        int *grid;
        iris_err err = {0};
        int rc = iris_image_preprocess_files(pp, k, &dopts, NULL, &pv, &n, &grid, NULL, &err);
        CHECKF(rc == 0, "multi %zu: %s", i, err.msg);
        if (rc) continue;
        json_t *g = json_object_get(m, "grid_thw");
        for (int j = 0; j < k; j++)
            for (int a = 0; a < 3; a++)
                CHECK_EQ_INT(grid[3 * j + a], json_integer_value(json_array_get(json_array_get(g, j), a)));
        cmp_result res;
        check_pixels("multi", pv, n, 1536, m, &res);
        free(pv);
        free(grid);
    }
    json_t *custom = json_object_get(refs(), "custom");
    REQUIRE(json_array_size(custom) >= 1);
    for (size_t i = 0; i < json_array_size(custom); i++) {
        json_t *c = json_array_get(custom, i);
        json_t *e = find_image(json_string_value(json_object_get(c, "name")));
        REQUIRE(e);
        char path[512];
        snprintf(path, sizeof path, FIX "%s", json_string_value(json_object_get(e, "file")));
        iris_image_prep_opts po;
        iris_image_prep_opts_default(&po);
        po.min_pixels = json_integer_value(json_object_get(c, "min_pixels"));
        po.max_pixels = json_integer_value(json_object_get(c, "max_pixels"));
        const char *pp[1] = {path};
        float *pv;
        int64_t n;
        int *grid;
        iris_err err = {0};
        int rc = iris_image_preprocess_files(pp, 1, &dopts, &po, &pv, &n, &grid, NULL, &err);
        CHECKF(rc == 0, "custom %s: %s", path, err.msg);
        if (rc) continue;
        json_t *g = json_object_get(c, "grid_thw");
        for (int a = 0; a < 3; a++) CHECK_EQ_INT(grid[a], json_integer_value(json_array_get(g, a)));
        cmp_result res;
        check_pixels(path, pv, n, 1536, c, &res);
        free(pv);
        free(grid);
    }
}

IRIS_TEST(image_smart_resize) {
    /* QWEN3VL.md §4.2 [run] */
    static const int cases[][4] = {
        {144, 800, 128, 800},   {80, 1000, 96, 928},     {1080, 1920, 1088, 1920}, {333, 517, 320, 512},
        {480, 640, 480, 640},   {224, 224, 256, 256},    {100, 100, 256, 256},     {500, 375, 512, 384},
        {4000, 6000, 3328, 4992}, {1, 1, 256, 256},      {10, 2000, 32, 3648},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int h, w;
        iris_err err = {0};
        int rc = iris_image_smart_resize(cases[i][0], cases[i][1], 32, 65536, 16777216, &h, &w, &err);
        CHECKF(rc == 0 && h == cases[i][2] && w == cases[i][3], "smart_resize(%d,%d) = (%d,%d), want (%d,%d): %s",
               cases[i][0], cases[i][1], h, w, cases[i][2], cases[i][3], err.msg);
    }
    int h, w;
    iris_err err = {0};
    CHECK(iris_image_smart_resize(10, 2001, 32, 65536, 16777216, &h, &w, &err) != 0);
    CHECK_CONTAINS(err.msg, "aspect ratio");
    CHECK(iris_image_smart_resize(2001, 10, 32, 65536, 16777216, &h, &w, &err) != 0);
}

static uint32_t crc32_png(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return c ^ 0xFFFFFFFFu;
}

/* A PNG of signature + IHDR only, with a correct CRC. */
static size_t png_header(uint8_t *b, uint32_t w, uint32_t h) {
    memcpy(b, "\x89PNG\r\n\x1a\n", 8);
    const uint8_t ihdr[17] = {'I', 'H', 'D', 'R', w >> 24, w >> 16, w >> 8, w, h >> 24, h >> 16, h >> 8, h, 8, 2, 0, 0, 0};
    b[8] = 0, b[9] = 0, b[10] = 0, b[11] = 13;
    memcpy(b + 12, ihdr, 17);
    uint32_t crc = crc32_png(ihdr, 17);
    b[29] = crc >> 24, b[30] = crc >> 16, b[31] = crc >> 8, b[32] = crc;
    return 33;
}

static int decode_err(const void *data, size_t n, iris_err *err) {
    iris_image img;
    memset(err, 0, sizeof *err);
    int rc = iris_image_decode_mem(data, n, "test.img", NULL, &img, err);
    if (rc == 0) iris_image_free(&img);
    return rc;
}

IRIS_TEST(image_errors) {
    iris_err err;
    /* not an image, empty */
    CHECK_EQ_INT(decode_err("hello, world", 12, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "test.img");
    CHECK_CONTAINS(err.msg, "not an image");
    CHECK_EQ_INT(decode_err("", 0, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "empty");
    /* 50,000 x 50,000 PNG: refused from the header (nothing else is in the file) */
    uint8_t hdr[64];
    size_t n = png_header(hdr, 50000, 50000);
    CHECK_EQ_INT(decode_err(hdr, n, &err), IRIS_ELIMIT);
    CHECK_CONTAINS(err.msg, "50000x50000");
    /* zero width is invalid */
    n = png_header(hdr, 0, 10);
    CHECK(decode_err(hdr, n, &err) < 0);
    CHECK_CONTAINS(err.msg, "test.img");
    /* a PNG header with no image data */
    n = png_header(hdr, 10, 10);
    CHECK_EQ_INT(decode_err(hdr, n, &err), IRIS_EFORMAT);

    uint8_t *data;
    size_t len;
    /* truncated JPEG / PNG / WebP: every cut gives an error or (JPEG headers complete) never crashes */
    const char *files[] = {FIX "images/jpg_baseline_640x480.jpg", FIX "images/jpg_progressive_800x600.jpg",
                           FIX "images/png_rgb_224x224.png", FIX "images/png_adam7_rgb_121x91.png",
                           FIX "images/webp_lossy_400x300.webp", FIX "images/webp_lossless_256x320.webp"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        REQUIRE(read_whole(files[f], &data, &len) == 0);
        size_t cuts[] = {len / 2, len - 20, 20, 4}; /* PNG: a missing IEND alone is accepted, as by libpng */
        for (size_t c = 0; c < 4; c++) {
            int rc = decode_err(data, cuts[c], &err);
            CHECKF(rc < 0, "%s cut at %zu: accepted", files[f], cuts[c]);
            CHECK_CONTAINS(err.msg, "test.img");
        }
        free(data);
    }
    REQUIRE(read_whole(FIX "images/jpg_baseline_640x480.jpg", &data, &len) == 0);
    CHECK_EQ_INT(decode_err(data, len / 2, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "truncated");
    /* SOF dimensions patched to 65000 x 65000: refused before decoding */
    for (size_t i = 2; i + 9 < len; i++)
        if (data[i] == 0xFF && (data[i + 1] == 0xC0 || data[i + 1] == 0xC2)) {
            data[i + 5] = 0xFD, data[i + 6] = 0xE8, data[i + 7] = 0xFD, data[i + 8] = 0xE8;
            break;
        }
    CHECK_EQ_INT(decode_err(data, len, &err), IRIS_ELIMIT);
    CHECK_CONTAINS(err.msg, "65000x65000");
    /* a smaller, configurable cap */
    free(data);
    REQUIRE(read_whole(FIX "images/png_rgb_224x224.png", &data, &len) == 0);
    iris_image_decode_opts o;
    iris_image_decode_opts_default(&o);
    o.max_pixels = 224 * 224 - 1;
    iris_image img;
    CHECK_EQ_INT(iris_image_decode_mem(data, len, "small.png", &o, &img, &err), IRIS_ELIMIT);
    o.max_pixels = 224 * 224;
    CHECK_EQ_INT(iris_image_decode_mem(data, len, "small.png", &o, &img, &err), 0);
    iris_image_free(&img);
    free(data);
    /* missing file */
    CHECK_EQ_INT(iris_image_decode_file("tests/fixtures/images/nope.jpg", NULL, &img, &err), IRIS_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "nope.jpg");
    /* format from magic bytes, not the name */
    REQUIRE(read_whole(FIX "images/webp_lossy_400x300.webp", &data, &len) == 0);
    CHECK_EQ_INT(iris_image_sniff(data, len), IRIS_IMAGE_WEBP);
    int w, h;
    iris_image_format fmt;
    CHECK_EQ_INT(iris_image_probe_mem(data, len, "x.jpg", &fmt, &w, &h, &err), 0);
    CHECK(fmt == IRIS_IMAGE_WEBP && w == 400 && h == 300);
    free(data);
}

IRIS_TEST(image_patch_rows_ranges) {
    /* Rows filled in pieces equal the rows filled at once. */
    iris_image img = {64, 96, malloc(64 * 96 * 3)};
    REQUIRE(img.rgb);
    for (int i = 0; i < 64 * 96 * 3; i++) img.rgb[i] = (uint8_t)(i * 7 + (i / 191));
    iris_image_prep_opts o;
    iris_image_prep_opts_default(&o);
    o.min_pixels = 1024;
    iris_image_prep p;
    iris_err err = {0};
    REQUIRE(iris_image_prepare(&img, &o, &p, &err) == 0);
    CHECK_EQ_INT(p.grid_h, 6);
    CHECK_EQ_INT(p.grid_w, 4);
    int64_t n = iris_image_prep_rows(&p);
    int d = iris_image_row_dim(&o);
    float *a = malloc((size_t)n * d * 4), *b = malloc((size_t)n * d * 4);
    iris_image_patch_rows(&p, &o, 0, n, a);
    iris_image_patch_rows(&p, &o, 0, 5, b);
    iris_image_patch_rows(&p, &o, 5, 17, b + 5 * d);
    iris_image_patch_rows(&p, &o, 17, n, b + 17 * d);
    CHECK(memcmp(a, b, (size_t)n * d * 4) == 0);
    /* row 2 is patch (1,0) of the first merge window; t = 1 repeats t = 0 */
    CHECK(a[2 * d + 0] == ((float)img.rgb[(16 * 64) * 3] - 127.5f) / 127.5f);
    CHECK(memcmp(a + 256, a, 256 * 4) == 0);
    free(a);
    free(b);
    iris_image_prep_free(&p);
    iris_image_free(&img);
}

IRIS_TEST(image_prep_key) {
    /* The prefix cache's content key of a prepared image: equal for equal pixels and settings,
     * different when one byte of the resized image, the normalisation or the resize bounds change;
     * large images (several 1 MiB pieces, hashed on several threads) too. */
    iris_image_prep_opts o;
    iris_image_prep_opts_default(&o);
    iris_err err = {0};
    const int sizes[2][2] = {{64, 96}, {1024, 768}};
    for (int s = 0; s < 2; s++) {
        int w = sizes[s][0], h = sizes[s][1];
        iris_image img = {w, h, malloc((size_t)w * h * 3)};
        REQUIRE(img.rgb);
        for (int i = 0; i < w * h * 3; i++) img.rgb[i] = (uint8_t)(i * 7 + (i / 191));
        iris_image_prep p, q;
        REQUIRE(iris_image_prepare(&img, &o, &p, &err) == 0);
        REQUIRE(iris_image_prepare(&img, &o, &q, &err) == 0);
        unsigned char k1[32], k2[32], k3[32], k4[32], k5[32];
        REQUIRE(iris_image_prep_key(&p, &o, k1) == 0);
        REQUIRE(iris_image_prep_key(&q, &o, k2) == 0);
        CHECK(memcmp(k1, k2, 32) == 0);
        size_t last = (size_t)q.resized.width * q.resized.height * 3 - 1;
        q.resized.rgb[last] ^= 1; /* the last byte: the last piece of a large image */
        REQUIRE(iris_image_prep_key(&q, &o, k3) == 0);
        CHECK(memcmp(k1, k3, 32) != 0);
        q.resized.rgb[last] ^= 1;
        iris_image_prep_opts o2 = o;
        o2.image_mean[1] = 0.25f;
        REQUIRE(iris_image_prep_key(&q, &o2, k4) == 0);
        CHECK(memcmp(k1, k4, 32) != 0);
        o2 = o;
        o2.max_pixels = o.max_pixels / 2;
        REQUIRE(iris_image_prep_key(&q, &o2, k5) == 0);
        CHECK(memcmp(k1, k5, 32) != 0);
        iris_image_prep_free(&p);
        iris_image_prep_free(&q);
        iris_image_free(&img);
    }
}
