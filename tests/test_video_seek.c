/* test_video_seek.c: seeking between sampled frames of a clip with B-frames.
 *
 * tests/fixtures/video/j_bframes.mp4 (make_codecs.sh): H.264 in MP4, 64x48, 30 fps, 60 frames,
 * keyframes at 0 and 30, two B-frames, so the stream's index holds decode timestamps two frames
 * before the presentation ones: the index puts a keyframe at frame 28 while the seek lands on
 * frame 0.  Sampled frames past such a point must come back, each the same bytes as when the
 * clip is decoded straight through, and within the decode budget (it used to seek to the same
 * frame forever); a budget spent is named in seconds. */
#include <stdlib.h>
#include <string.h>

#include "formats/video.h"
#include "test.h"

#define CLIP "tests/fixtures/video/j_bframes.mp4"

IRIS_TEST(video_seek_bframes) {
    if (!iris_video_supported()) IRIS_TEST_SKIP("built without video support (VIDEO=0)");
    iris_video_opts o;
    iris_video_opts_default(&o);
    o.max_decode_seconds = 20;
    iris_err err = {0};
    int64_t all[60];
    for (int i = 0; i < 60; i++) all[i] = i;
    uint8_t *every = NULL, *some = NULL;
    iris_video_info info;
    REQUIRE(iris_video_decode_frames(CLIP, NULL, 0, NULL, &o, all, 60, &every, &info, &err) == 0);
    CHECK_EQ_INT(info.width, 64);
    CHECK_EQ_INT(info.height, 48);
    CHECK_EQ_INT(info.n_frames, 60);
    size_t frame = (size_t)64 * 48 * 3;
    const int64_t picks[][3] = {{0, 29, 59}, {1, 28, 31}, {0, 29, 30}};
    for (int k = 0; k < 3; k++) {
        int rc = iris_video_decode_frames(CLIP, NULL, 0, NULL, &o, picks[k], 3, &some, NULL, &err);
        CHECKF(rc == 0, "frames %lld, %lld, %lld: %s", (long long)picks[k][0], (long long)picks[k][1],
               (long long)picks[k][2], err.msg);
        for (int j = 0; !rc && j < 3; j++)
            CHECKF(!memcmp(some + (size_t)j * frame, every + (size_t)picks[k][j] * frame, frame),
                   "frame %lld differs from the straight decode", (long long)picks[k][j]);
        free(some);
        some = NULL;
    }
    /* Sampling at 9 fps jumps from frame 24 to 28 (prepare: the same path, then resized). */
    o.fps = 9;
    iris_video_prep p;
    int rc = iris_video_prepare(CLIP, NULL, 0, NULL, &o, &p, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        int hit = 0;
        for (int j = 1; j < p.n_sampled; j++) hit |= p.indices[j] == 28 && p.indices[j - 1] == 24;
        CHECKF(hit && p.n_sampled == 18, "%d frames sampled, not 24 then 28", p.n_sampled);
        iris_video_prep_free(&p);
    }
    free(every);

    /* A budget spent is named in seconds, as given. */
    o.max_decode_seconds = 1e-6;
    CHECK_EQ_INT(iris_video_decode_frames(CLIP, NULL, 0, NULL, &o, all, 60, &every, NULL, &err), IRIS_ELIMIT);
    CHECK_CONTAINS(err.msg, "longer than the budget of 0 s");
}
