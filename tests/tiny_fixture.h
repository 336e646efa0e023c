/* tiny_fixture.h: reading the tiny Qwen3-VL fixtures of tools/make_tiny_models.py
 * (tests/fixtures/tiny/): .npy arrays of int64 or float32 and the manifest.
 * Test-only helpers; every allocation is malloc'd and freed by the caller. */
#ifndef IRIS_TINY_FIXTURE_H
#define IRIS_TINY_FIXTURE_H

#include <stdint.h>

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
/* Greedy agreement of logits `got` with `ref` ([rows, V] each): of the rows whose reference top-2
 * margin exceeds `margin` (*decided of them), how many have the same arg-max in got. */
int tiny_greedy_same(const float *got, const float *ref, int rows, int V, float margin, int *decided);

#endif
