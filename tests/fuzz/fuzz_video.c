/* fuzz_video.c: libFuzzer target for the container and codec path (libav
 * through the memory AVIOContext: probing, demuxing, frame counting, seeking,
 * decoding, rotation) and, for what decodes, the resize + patchify of one
 * temporal patch.  Frame size, frame count and decode time are bounded small
 * so the fuzzer explores parsers, not allocations.  Seeds: the fixture clips
 * cut to their first 4 KiB (tests/fuzz/corpus/fuzz_video). */
#include <stdint.h>
#include <stdlib.h>

#include "formats/video.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    iris_video_opts o;
    iris_video_opts_default(&o);
    o.max_frame_pixels = 1 << 18;
    o.max_total_frames = 4096;
    o.max_decode_seconds = 2;
    o.max_frames = 8;
    o.seek_gap = size > 0 && (data[size - 1] & 1) ? 1 : 0;
    o.min_pixels = 1024;
    o.max_pixels = 1 << 16;
    iris_err err;
    iris_video_info info;
    (void)iris_video_sniff(data, size);
    iris_video_probe(NULL, data, size, "fuzz", &o, &info, &err);
    iris_video_prep p;
    if (iris_video_prepare(NULL, data, size, "fuzz", &o, &p, &err) != 0) return 0;
    int64_t rows = (int64_t)p.grid_h * p.grid_w;
    float *out = malloc(sizeof(float) * 3 * (size_t)o.temporal_patch_size * o.patch_size * o.patch_size);
    if (out && rows > 0) iris_video_patch_rows(&p, &o, p.grid_t - 1, rows - 1, rows, out);
    free(out);
    unsigned char key[32];
    iris_video_patch_key(&p, &o, 0, key);
    (void)iris_video_timestamp(&p, &o, p.grid_t - 1);
    iris_video_prep_free(&p);
    return 0;
}
