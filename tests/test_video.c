/* test_video.c: video decoding, sampling and bad input.
 *
 * The clips (tests/fixtures/video/, tools/ref_video.py make) are lossless
 * (FFV1 in Matroska; H.264 RGB at qp 0 in MP4 with a rotate tag), so every
 * displayed frame iris decodes must have the SHA-256 that clips.json records
 * for the frame the script generated.  Sampling is checked against numpy's
 * arithmetic worked by hand; bad files must fail with a message that says
 * what is wrong, within a bounded time. */
#include <jansson.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "formats/video.h"
#include "test.h"

#define VFIX "tests/fixtures/video/"

static void hex_of(const void *data, size_t n, char hex[65]) {
    unsigned char md[32];
    unsigned int len = 0;
    EVP_Digest(data, n, md, &len, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", md[i]);
}

static json_t *clips(void) {
    static json_t *root;
    if (!root) root = json_load_file(VFIX "clips.json", 0, NULL);
    return root ? json_object_get(root, "clips") : NULL;
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(len > 0 ? (size_t)len : 1);
    *n = b ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

#define NEED_VIDEO()                                                                     \
    do {                                                                                 \
        if (!iris_video_supported()) IRIS_TEST_SKIP("built without video support (VIDEO=0)"); \
    } while (0)

/* Every frame of every clip, and a sample of them from memory, equal the generated frames. */
IRIS_TEST(video_decode_lossless) {
    NEED_VIDEO();
    json_t *cl = clips();
    REQUIRE(cl);
    const char *name;
    json_t *c;
    json_object_foreach(cl, name, c) {
        char path[512];
        snprintf(path, sizeof path, VFIX "%s", name);
        int64_t n = json_integer_value(json_object_get(c, "n_frames"));
        int w = (int)json_integer_value(json_object_get(c, "width")), h = (int)json_integer_value(json_object_get(c, "height"));
        json_t *fps = json_object_get(c, "fps"), *hashes = json_object_get(c, "frame_sha256");
        double want_fps = (double)json_integer_value(json_array_get(fps, 0)) / json_integer_value(json_array_get(fps, 1));
        iris_video_opts o;
        iris_video_opts_default(&o);
        int64_t *idx = malloc(sizeof *idx * (size_t)n);
        for (int64_t i = 0; i < n; i++) idx[i] = i;
        uint8_t *rgb = NULL;
        iris_video_info info;
        iris_err err = {0};
        int rc = iris_video_decode_frames(path, NULL, 0, NULL, &o, idx, (int)n, &rgb, &info, &err);
        CHECKF(rc == 0, "%s: %s", name, err.msg);
        if (rc == 0) {
            CHECKF(info.width == w && info.height == h, "%s: %dx%d, want %dx%d", name, info.width, info.height, w, h);
            CHECKF(info.n_frames == n, "%s: %lld frames, want %lld", name, (long long)info.n_frames, (long long)n);
            CHECKF(fabs(info.fps - want_fps) < 1e-9, "%s: fps %.9f, want %.9f", name, info.fps, want_fps);
            CHECKF(info.rotation == (int)json_integer_value(json_object_get(c, "rotate")), "%s: rotation %d", name,
                   info.rotation);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                char hex[65];
                hex_of(rgb + (size_t)i * w * h * 3, (size_t)w * h * 3, hex);
                if (strcmp(hex, json_string_value(json_array_get(hashes, (size_t)i)))) {
                    if (!bad) iris_test_fail(__FILE__, __LINE__, "%s: frame %lld differs from the generated one", name,
                                             (long long)i);
                    bad++;
                }
            }
            CHECKF(bad == 0, "%s: %d of %lld frames differ", name, bad, (long long)n);
        }
        free(rgb);
        /* the same clip from memory: a few frames, far apart (seeks where the index allows) */
        size_t nb = 0;
        uint8_t *bytes = slurp(path, &nb);
        REQUIRE(bytes);
        int64_t pick[3] = {0, n / 2, n - 1};
        o.seek_gap = 2;
        rc = iris_video_decode_frames(NULL, bytes, nb, name, &o, pick, 3, &rgb, &info, &err);
        CHECKF(rc == 0, "%s from memory: %s", name, err.msg);
        for (int j = 0; rc == 0 && j < 3; j++) {
            char hex[65];
            hex_of(rgb + (size_t)j * w * h * 3, (size_t)w * h * 3, hex);
            CHECKF(!strcmp(hex, json_string_value(json_array_get(hashes, (size_t)pick[j]))),
                   "%s from memory: frame %lld differs", name, (long long)pick[j]);
        }
        free(rgb);
        free(bytes);
        free(idx);
    }
}

/* numpy.linspace(0, total-1, n).round(): half to even, the last index exact. */
IRIS_TEST(video_sampling) {
    iris_video_opts o;
    iris_video_opts_default(&o);
    int64_t idx[800];
    iris_err err = {0};
    CHECK_EQ_INT(iris_video_sample(45, 30000.0 / 1001.0, &o, idx, &err), 4); /* int(3.003) -> min_frames 4 */
    CHECK(idx[0] == 0 && idx[1] == 15 && idx[2] == 29 && idx[3] == 44);
    CHECK_EQ_INT(iris_video_sample(25, 10, &o, idx, &err), 5);
    CHECK(idx[0] == 0 && idx[1] == 6 && idx[2] == 12 && idx[3] == 18 && idx[4] == 24);
    o.min_frames = 5, o.fps = 0.1;
    CHECK_EQ_INT(iris_video_sample(6, 1, &o, idx, &err), 5); /* int(0.6) -> 5: 0, 1.25, 2.5, 3.75, 5 */
    CHECK(idx[0] == 0 && idx[1] == 1 && idx[2] == 2 && idx[3] == 4 && idx[4] == 5);
    o.min_frames = 4, o.fps = 2;
    CHECK_EQ_INT(iris_video_sample(3, 30, &o, idx, &err), 3); /* never more than the clip has */
    CHECK_EQ_INT(iris_video_sample(30000, 30, &o, idx, &err), 768); /* 2000 wanted, max_frames */
    CHECK_EQ_INT(idx[767], 29999);
    o.fps = 1, o.max_frames = 6;
    CHECK_EQ_INT(iris_video_sample(150, 5, &o, idx, &err), 6);
    CHECK(iris_video_sample(0, 5, &o, idx, &err) < 0);
}

/* The video smart_resize (with and without qwen-vl-utils' per-frame cap), worked in Python. */
IRIS_TEST(video_smart_resize) {
    iris_video_opts o;
    iris_video_opts_default(&o);
    iris_err err = {0};
    int h = 0, w = 0;
    /* 60 frames of 720p, 4096..25165824: capped at min(786432, 419430) a frame -> beta 1.4823 */
    REQUIRE(iris_video_smart_resize(60, 720, 1280, &o, &h, &w, &err) == 0);
    CHECK(h == 480 && w == 832);
    o.cap_pixels_per_frame = 0; /* the whole 25 M: 60 * 736 * 1280 = 56.5 M -> beta 1.4823 as well */
    REQUIRE(iris_video_smart_resize(60, 720, 1280, &o, &h, &w, &err) == 0);
    CHECK(h == 480 && w == 832);
    /* 4 frames: uncapped keeps the size (rounded), capped stays under 768 * 32^2 a frame */
    REQUIRE(iris_video_smart_resize(4, 720, 1280, &o, &h, &w, &err) == 0);
    CHECK(h == 704 && w == 1280); /* 22.5 rounds to even */
    o.cap_pixels_per_frame = 1;
    REQUIRE(iris_video_smart_resize(4, 720, 1280, &o, &h, &w, &err) == 0);
    CHECK(h == 640 && w == 1152);
    /* under the factor: scaled up first (int(h * scale)) */
    REQUIRE(iris_video_smart_resize(4, 24, 48, &o, &h, &w, &err) == 0);
    CHECK(h == 32 && w == 64);
    CHECK(iris_video_smart_resize(1, 64, 64, &o, &h, &w, &err) == IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "at least 2");
}

static int expect_fail(const char *label, const void *data, size_t n, const char *path, const char *needle) {
    iris_video_opts o;
    iris_video_opts_default(&o);
    o.max_decode_seconds = 20;
    iris_video_prep p;
    iris_err err = {0};
    int rc = iris_video_prepare(path, data, n, label, &o, &p, &err);
    if (rc == 0) {
        iris_video_prep_free(&p);
        iris_test_fail(__FILE__, __LINE__, "%s: decoded, but should have failed", label);
        return 0;
    }
    if (!strstr(err.msg, needle))
        iris_test_fail(__FILE__, __LINE__, "%s: \"%s\" does not say \"%s\"", label, err.msg, needle);
    return rc;
}

/* Corrupt, truncated, empty, audio-only and non-video input, and frames over the size limit. */
IRIS_TEST(video_bad_input) {
    NEED_VIDEO();
    size_t n = 0;
    uint8_t *clip = slurp(VFIX "a_ntsc.mkv", &n);
    REQUIRE(clip && n > 4096);
    expect_fail("empty", clip, 0, NULL, "empty");
    expect_fail("text", "hello, this is not a video at all\n", 34, NULL, "not a video");
    /* truncated: the header says nothing of the count (Matroska), so the packets left are what is
       counted; the last one is cut: either a shorter clip or a clear error, never a crash */
    {
        iris_video_opts o;
        iris_video_opts_default(&o);
        iris_video_prep p;
        iris_err err = {0};
        int rc = iris_video_prepare(NULL, clip, n / 3, "truncated", &o, &p, &err);
        if (rc == 0) {
            CHECK(p.info.n_frames < 45);
            iris_video_prep_free(&p);
        } else {
            CHECK(err.msg[0] != 0);
        }
    }
    size_t m = 0;
    uint8_t *mp4 = slurp(VFIX "d_rot90.mp4", &m);
    REQUIRE(mp4 && m > 4096);
    /* the MP4's moov names 30 frames; half the data is gone */
    expect_fail("truncated mp4", mp4, m / 2, NULL, "");
    /* corrupt: the middle overwritten */
    uint8_t *bad = malloc(n);
    memcpy(bad, clip, n);
    for (size_t i = 0; i < 64 && i < n; i++) bad[i] ^= 0x5a; /* the EBML header */
    expect_fail("corrupt header", bad, n, NULL, "");
    memcpy(bad, clip, n);
    srand(7);
    for (size_t i = n / 4; i < n; i += 37) bad[i] = (uint8_t)rand();
    {
        iris_video_opts o;
        iris_video_opts_default(&o);
        iris_video_prep p;
        iris_err err = {0};
        if (iris_video_prepare(NULL, bad, n, "scrambled", &o, &p, &err) == 0) iris_video_prep_free(&p);
    }
    free(bad);
    /* audio only: a WAV of silence */
    uint8_t wav[44 + 800] = {0};
    memcpy(wav, "RIFF", 4);
    uint32_t v = 36 + 800;
    memcpy(wav + 4, &v, 4);
    memcpy(wav + 8, "WAVEfmt ", 8);
    v = 16;
    memcpy(wav + 16, &v, 4);
    uint16_t s16 = 1;
    memcpy(wav + 20, &s16, 2);
    memcpy(wav + 22, &s16, 2);
    v = 8000;
    memcpy(wav + 24, &v, 4);
    v = 16000;
    memcpy(wav + 28, &v, 4);
    s16 = 2;
    memcpy(wav + 32, &s16, 2);
    s16 = 16;
    memcpy(wav + 34, &s16, 2);
    memcpy(wav + 36, "data", 4);
    v = 800;
    memcpy(wav + 40, &v, 4);
    expect_fail("audio.wav", wav, sizeof wav, NULL, "no video stream");
    /* a header that claims 8K frames: refused before any frame is decoded */
    const char *y4m = "YUV4MPEG2 W7680 H4320 F30:1 Ip A1:1 C420jpeg\nFRAME\n";
    expect_fail("8k.y4m", y4m, strlen(y4m), NULL, "over the limit");
    expect_fail("missing file", NULL, 0, "/nonexistent/clip.mp4", "not a video");
    free(clip);
    free(mp4);
}

/* 30,000 frames (raw YUV4MPEG, 16x16): 768 sampled, in bounded time and memory. */
IRIS_TEST(video_long_clip) {
    NEED_VIDEO();
    char path[] = "/tmp/iris-video-long-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    FILE *f = fdopen(fd, "wb");
    fputs("YUV4MPEG2 W16 H16 F30:1 Ip A1:1 C420jpeg\n", f);
    uint8_t frame[16 * 16 * 3 / 2];
    for (int i = 0; i < 30000; i++) {
        memset(frame, i % 251, 256);
        memset(frame + 256, 128, 128);
        fputs("FRAME\n", f);
        fwrite(frame, 1, sizeof frame, f);
    }
    fclose(f);
    iris_video_opts o;
    iris_video_opts_default(&o);
    o.max_decode_seconds = 60;
    iris_video_prep p;
    iris_err err = {0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = iris_video_prepare(path, NULL, 0, NULL, &o, &p, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    unlink(path);
    REQUIRE(rc == 0 || (fprintf(stderr, "%s\n", err.msg), 0));
    CHECK_EQ_INT(p.info.n_frames, 30000);
    CHECK_EQ_INT(p.n_sampled, 768);
    CHECK_EQ_INT(p.grid_t, 384);
    /* frame j holds luma (index % 251): the sampled indices, in order */
    int ok = 1;
    for (int j = 0; j < p.n_sampled && ok; j++) ok = p.indices[j] == (int64_t)llround(j * (29999.0 / 767));
    CHECK(ok);
    fprintf(stderr, "video_long_clip: 30000 frames -> %d sampled %dx%d in %.2f s\n", p.n_sampled, p.width, p.height,
            (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    iris_video_prep_free(&p);
}

/* Frames given decoded (no libav needed) prepare exactly as the file they came from. */
IRIS_TEST(video_decoded_frames_equal_file) {
    NEED_VIDEO();
    iris_video_opts o;
    iris_video_opts_default(&o);
    int64_t idx[60];
    for (int i = 0; i < 60; i++) idx[i] = i;
    uint8_t *rgb = NULL;
    iris_video_info info;
    iris_err err = {0};
    REQUIRE(iris_video_decode_frames(VFIX "b_portrait.mkv", NULL, 0, NULL, &o, idx, 60, &rgb, &info, &err) == 0);
    iris_video_prep a, b;
    REQUIRE(iris_video_prepare(VFIX "b_portrait.mkv", NULL, 0, NULL, &o, &a, &err) == 0);
    REQUIRE(iris_video_prepare_frames(rgb, 60, info.width, info.height, info.fps, &o, &b, &err) == 0);
    CHECK(a.n_frames == b.n_frames && a.width == b.width && a.height == b.height && a.grid_t == b.grid_t);
    CHECK(!memcmp(a.rgb, b.rgb, (size_t)a.n_frames * a.width * a.height * 3));
    CHECK(iris_video_prepare_frames(rgb, 0, info.width, info.height, 24, &o, &b, &err) == IRIS_EINVAL);
    iris_video_prep_free(&a);
    iris_video_prep_free(&b);
    free(rgb);
}

/* The content keys made at preparation (on the worker pool) are the ones computed afresh for the
 * same settings, one per temporal patch and all different here (every frame differs), and other
 * settings get their own key, not the kept one. */
IRIS_TEST(video_keys_kept) {
    NEED_VIDEO();
    iris_video_opts o;
    iris_video_opts_default(&o);
    iris_video_prep p;
    iris_err err = {0};
    REQUIRE(iris_video_prepare(VFIX "b_portrait.mkv", NULL, 0, NULL, &o, &p, &err) == 0);
    REQUIRE(p.keys != NULL && p.grid_t >= 2);
    unsigned char (*kept)[32] = p.keys;
    int same = 1, distinct = 1;
    for (int k = 0; k < p.grid_t; k++) {
        unsigned char a[32], b[32];
        CHECK(iris_video_patch_key(&p, &o, k, a) == 0);
        p.keys = NULL; /* computed here */
        CHECK(iris_video_patch_key(&p, &o, k, b) == 0);
        p.keys = kept;
        same &= !memcmp(a, b, 32) && !memcmp(a, kept[k], 32);
        for (int j = 0; j < k; j++) distinct &= memcmp(kept[j], kept[k], 32) != 0;
    }
    CHECK(same);
    CHECK(distinct);
    iris_video_opts other = o;
    other.image_mean[1] = 0.25f;
    unsigned char c[32];
    CHECK(iris_video_patch_key(&p, &other, 0, c) == 0);
    CHECK(memcmp(c, kept[0], 32) != 0);
    iris_video_prep_free(&p);
}
