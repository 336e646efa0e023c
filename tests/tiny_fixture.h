/* tiny_fixture.h: reading the tiny Qwen3-VL fixtures of tools/make_tiny_models.py
 * (tests/fixtures/tiny/): .npy arrays of int64 or float32 and the manifest, and the image
 * conversation's greedy run through an engine (build/iris-test and build/iris-test-gpu).
 * Test-only helpers; every allocation is malloc'd and freed by the caller. */
#ifndef IRIS_TINY_FIXTURE_H
#define IRIS_TINY_FIXTURE_H

#include <stdint.h>

#include "iris.h"
#include "formats/config.h"
#include "formats/safetensors.h"
#include "model/vision.h"

#define TINY_DIR "tests/fixtures/tiny"

typedef struct tiny_arr {
    int ndim;
    int64_t shape[8];
    int64_t n;          /* elements */
    int64_t *i64;       /* for '<i8' files */
    float *f32;         /* for '<f4' files */
} tiny_arr;

/* Reads TINY_DIR/<rel>; returns 0 or -1 (with a message on stderr). */
int tiny_load(const char *rel, tiny_arr *out);
void tiny_free(tiny_arr *a);
int tiny_exists(const char *rel);
/* The tiny model `model`'s (tiny-gqa, ...) config, open checkpoint and vision tower (host
 * weights; free with iris_vision_free and iris_st_close): 0, or an error in err. */
int tiny_vision_load(const char *model, iris_config *cfg, iris_st **st, iris_vision *vis, iris_err *err);
/* Greedy agreement of logits `got` with `ref` ([rows, V] each): of the rows whose reference top-2
 * margin exceeds `margin` (*decided of them), how many have the same arg-max in got. */
int tiny_greedy_same(const float *got, const float *ref, int rows, int V, float margin, int *decided);

/* A greedy run against reference tokens: tokens received (at most the reference's count), equal
 * one by one, and equal before the first difference. */
typedef struct tiny_greedy_run {
    int n, same, prefix;
} tiny_greedy_run;
/* The fixtures' image conversation (images/a.png, "What is in this image?") through the engine e,
 * greedy, n_ref tokens with the end of sequence ignored, each compared with ref[i] (the scenario's
 * greedy.npy); events wait up to timeout_ms each.  0, or the submit's error (in err). */
int tiny_image_greedy(iris_engine *e, const int64_t *ref, int n_ref, int timeout_ms, tiny_greedy_run *out,
                      iris_err *err);

#endif
