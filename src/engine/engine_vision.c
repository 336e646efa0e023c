/* engine_vision.c: the engine thread's vision encoding of one step.
 *
 * The images a step's prompt chunks reach for the first time are encoded together: several
 * requests' images in one encoder pass (its GEMMs over all their patches, attention within each
 * image), as many at once as the scratch holds, in the step's order.  Each output goes to its
 * request (iris_seq_image.embeds/deepstack, ready); the engine frees it once every token of the
 * image has its K/V in the cache.  Runs on the engine thread only. */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "err.h"

/* Patches of one CPU encoder pass at most (fp32 buffers: ~31 KB a patch for the 2B's encoder),
 * unless one image alone has more: one demo image (544-576 patches) a pass.  The CPU backend keeps
 * a pass's buffers for the next (its block cache); passes of up to 2,400 and 8,192 patches still
 * measured slower on the 2-core dev VM (200 demo captions in one process: 9.7 and 10.9 s against
 * 10.2 and 11.5 s, and 11.1 s). */
#define CPU_ENCODE_PATCHES 1024

/* Does image i of r's chunk [n_computed, n_computed + n_new) need encoding now? */
static int needs_encoding(const iris_request *r, int i) {
    const iris_seq *q = &r->seq;
    const iris_seq_image *im = &q->images[i];
    int lo = q->n_computed, hi = q->n_computed + q->n_new;
    return !im->ready && im->start < hi && im->start + im->n_tokens > lo;
}

typedef struct enc_item {
    iris_request *r;
    int i;                      /* the image's index in r's prompt */
} enc_item;

/* The encoder's outputs of items [0, n) into their requests. */
static int take_outputs(iris_engine *e, const enc_item *it, iris_vision_out *outs, int n, iris_err *err) {
    int rc = IRIS_OK;
    for (int k = 0; k < n; k++) {
        iris_request *r = it[k].r;
        iris_seq_image *im = &r->seq.images[it[k].i];
        r->vout[it[k].i] = outs[k];
        if (!rc && outs[k].n_tokens != im->n_tokens)
            rc = iris_err_set(err, IRIS_EINVAL, "image %d: the encoder gave %d rows for %d tokens", it[k].i + 1,
                              outs[k].n_tokens, im->n_tokens);
        if (rc) continue;
        im->embeds = outs[k].embeds;
        im->deepstack = outs[k].deepstack;
        im->ready = 1;
        e->images_encoded++;
        /* every image encoded once: its bf16 pixel rows go back (a re-encode, after a preemption,
         * converts the fp32 rows) */
        if (++r->n_encoded >= r->seq.n_images) iris_req_release_px16(e, r);
    }
    return rc;
}

/* Encode the images this step's chunks reach that have no embeddings, several images of several
 * requests in one encoder pass (its GEMMs over all their patches, attention within each image):
 * as many at once as fit the scratch (on a GPU the runner's activations, which the plan sizes for
 * at least the largest image; on the CPU CPU_ENCODE_PATCHES), in the step's order. */
int iris_engine_encode_images(iris_engine *e, const iris_sched_batch *b, iris_err *err) {
    int n = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        iris_request *r = b->seqs[s]->ud;
        for (int i = 0; i < r->seq.n_images; i++) n += needs_encoding(r, i);
    }
    if (!n) return IRIS_OK;
    enc_item *it = malloc(sizeof *it * (size_t)n);
    const float **px = malloc(sizeof *px * (size_t)n);
    const uint16_t **px16 = malloc(sizeof *px16 * (size_t)n);
    int *grid = malloc(sizeof *grid * 3 * (size_t)n);
    int64_t *patches = malloc(sizeof *patches * (size_t)n);
    iris_vision_out *outs = calloc((size_t)n, sizeof *outs);
    int rc = it && px && px16 && grid && patches && outs ? IRIS_OK : iris_err_set(err, IRIS_ENOMEM, "out of memory");
    const iris_vision *v = &e->model->vision;
    for (int s = 0, k = 0; !rc && s < b->n_seqs; s++) {
        iris_request *r = b->seqs[s]->ud;
        int64_t row0 = 0;
        for (int i = 0; i < r->seq.n_images; i++) {
            const int *g = r->prompt.grid_thw + 3 * i;
            int64_t rows = (int64_t)g[0] * g[1] * g[2];
            if (needs_encoding(r, i)) {
                it[k] = (enc_item){r, i};
                px[k] = r->prompt.pixel_values + row0 * v->patch_dim;
                px16[k] = r->px16 ? r->px16 + row0 * v->patch_dim : NULL;
                memcpy(grid + 3 * k, g, 3 * sizeof *grid);
                patches[k++] = rows;
            }
            row0 += rows;
        }
    }
    size_t sb = 0;
    void *scratch = e->on_gpu ? iris_runner_scratch(e->runner, &sb) : NULL;
    for (int k0 = 0; !rc && k0 < n;) {
        int k1 = k0 + 1;
        int64_t sum = patches[k0];
        while (k1 < n && (e->on_gpu ? iris_vision_scratch_bytes(v, e->be->act, sum + patches[k1]) <= sb
                                    : sum + patches[k1] <= CPU_ENCODE_PATCHES))
            sum += patches[k1++];
        rc = iris_vision_encode_each(v, e->be, scratch, sb, e->on_gpu, px + k0, px16 + k0, grid + 3 * k0, k1 - k0,
                                     outs + k0, err);
        if (!rc) rc = take_outputs(e, it + k0, outs + k0, k1 - k0, err);
        k0 = k1;
    }
    free(it), free(px), free(px16), free(grid), free(patches), free(outs);
    return rc;
}
