/* engine_vision.c: the engine's vision encoding: the step's images on the engine thread, and the
 * vision worker beside the steps.
 *
 * The images a step's prompt chunks reach for the first time are encoded together: several
 * requests' images in one encoder pass (its GEMMs over all their patches, attention within each
 * image), as many at once as the scratch holds, in the step's order.  Each output goes to its
 * request (iris_seq_image.embeds/deepstack, ready); the engine frees it once every token of the
 * image has its K/V in the cache.
 *
 * The vision worker (engine_internal.h, planner.h iris_worker_mode) encodes images, up to
 * IRIS_PLAN_WORKER_IMAGES a pass, on a thread of its own, on CUDA through a fork of the engine's
 * backend (its own stream, at the lowest priority, so the step's kernels go first) into its own
 * planned scratch.  The engine thread hands it jobs (a request's image: its pixel rows and grid,
 * which stay untouched while the job lives) and takes the outputs back; the worker touches
 * nothing else of the engine.  A request that finishes with a job out
 * waits for a running encode to end (forget) before its rows are freed. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "engine/planner.h"
#include "err.h"
#include "log.h"
#ifdef IRIS_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

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
    return !im->ready && !im->pending && im->start < hi && im->start + im->n_tokens > lo;
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

/* ---- the vision worker ------------------------------------------------------------------------ */

enum { VJ_FREE = 0, VJ_QUEUED, VJ_RUNNING, VJ_DONE };

typedef struct vw_job {
    int state;
    uint64_t ticket;            /* submission order: the worker takes the oldest queued job */
    iris_request *r;
    int i;                      /* the image's index in r's prompt */
    const float *px;
    const uint16_t *px16;
    int grid[3];
    iris_vision_out out;
    int rc;
    iris_err err;
    double secs;
} vw_job;

struct iris_vworker {
    const iris_vision *v;
    iris_backend *be;           /* CUDA: a fork of the engine's; the CPU: a backend of its own */
    int on_gpu;
    void *scratch;              /* from the engine's backend (CUDA), its size */
    size_t scratch_bytes;
    pthread_t th;
    int started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    uint64_t next_ticket;
    vw_job jobs[IRIS_VW_JOBS];
};

/* The oldest queued job, or NULL. */
static vw_job *oldest_queued(struct iris_vworker *w) {
    vw_job *j = NULL;
    for (int k = 0; k < IRIS_VW_JOBS; k++)
        if (w->jobs[k].state == VJ_QUEUED && (!j || w->jobs[k].ticket < j->ticket)) j = &w->jobs[k];
    return j;
}

/* A pass takes the oldest queued jobs, as many as the scratch holds (IRIS_PLAN_WORKER_IMAGES of the
 * largest images; one alone always). */
static void *worker_main(void *arg) {
    struct iris_vworker *w = arg;
    vw_job *pass[IRIS_PLAN_WORKER_IMAGES];
    const float *px[IRIS_PLAN_WORKER_IMAGES];
    const uint16_t *px16[IRIS_PLAN_WORKER_IMAGES];
    int grid[3 * IRIS_PLAN_WORKER_IMAGES];
    iris_vision_out outs[IRIS_PLAN_WORKER_IMAGES];
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int n = 0;
        int64_t patches = 0;
        for (vw_job *j; n < IRIS_PLAN_WORKER_IMAGES && (j = oldest_queued(w));) {
            int64_t p = (int64_t)j->grid[0] * j->grid[1] * j->grid[2];
            if (n && (!w->on_gpu || iris_vision_scratch_bytes(w->v, IRIS_DT_BF16, patches + p) > w->scratch_bytes))
                break;
            j->state = VJ_RUNNING;
            pass[n] = j, px[n] = j->px, px16[n] = j->px16, patches += p;
            memcpy(grid + 3 * n, j->grid, sizeof j->grid);
            n++;
        }
        if (!n) {
            if (w->stop) break;
            pthread_cond_wait(&w->cv_work, &w->mu);
            continue;
        }
        pthread_mutex_unlock(&w->mu);
        double t0 = iris_now_s();
        iris_err err = {0};
        int rc = iris_vision_encode_each(w->v, w->on_gpu ? w->be : NULL, w->scratch, w->scratch_bytes, w->on_gpu, px,
                                         px16, grid, n, outs, &err);
        pthread_mutex_lock(&w->mu);
        for (int k = 0; k < n; k++) {
            vw_job *j = pass[k];
            j->out = outs[k], j->rc = rc, j->err = err, j->secs = (iris_now_s() - t0) / n;
            j->state = VJ_DONE;
        }
        pthread_cond_broadcast(&w->cv_done);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int iris_engine_worker_open(iris_engine *e, iris_err *err) {
    struct iris_vworker *w = calloc(1, sizeof *w);
    if (!w) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    w->v = &e->model->vision;
    w->on_gpu = e->on_gpu;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv_work, NULL);
    pthread_cond_init(&w->cv_done, NULL);
    e->vw = w;
    int rc = IRIS_OK;
    if (e->on_gpu) {
#ifdef IRIS_CUDA
        const iris_config *c = &e->model->cfg;
        int m = c->vision_config.spatial_merge_size;
        w->scratch_bytes = iris_vision_scratch_bytes(w->v, e->be->act,
                                                     (int64_t)IRIS_PLAN_WORKER_IMAGES * e->max_image_tokens * m * m);
        w->scratch = e->be->alloc(e->be, w->scratch_bytes);
        if (!w->scratch)
            rc = iris_err_set(err, IRIS_ENOMEM, "the vision worker's %zu-byte scratch: %s", w->scratch_bytes,
                              e->be->err.msg);
        if (!rc) rc = iris_backend_cuda_fork(e->be, &w->be, err);
#else
        rc = iris_err_set(err, IRIS_EUNSUPPORTED, "the vision worker: a CUDA engine in a build without CUDA");
#endif
    }
    if (!rc && pthread_create(&w->th, NULL, worker_main, w) != 0)
        rc = iris_err_set(err, IRIS_ENOMEM, "could not start the vision worker's thread");
    w->started = rc == IRIS_OK;
    if (rc) iris_engine_worker_close(e);
    return rc;
}

void iris_engine_worker_close(iris_engine *e) {
    struct iris_vworker *w = e->vw;
    if (!w) return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        for (int k = 0; k < IRIS_VW_JOBS; k++)
            if (w->jobs[k].state == VJ_QUEUED) w->jobs[k].state = VJ_FREE;
        pthread_cond_broadcast(&w->cv_work);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
    }
    for (int k = 0; k < IRIS_VW_JOBS; k++)
        if (w->jobs[k].state == VJ_DONE) iris_vision_out_free(&w->jobs[k].out);
    if (w->be) w->be->destroy(w->be);
    if (w->scratch) e->be->free(e->be, w->scratch);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv_work);
    pthread_cond_destroy(&w->cv_done);
    free(w);
    e->vw = NULL;
}

int iris_engine_worker_busy(iris_engine *e) {
    struct iris_vworker *w = e->vw;
    if (!w) return 0;
    int busy = 0;
    pthread_mutex_lock(&w->mu);
    for (int k = 0; k < IRIS_VW_JOBS; k++) busy |= w->jobs[k].state != VJ_FREE;
    pthread_mutex_unlock(&w->mu);
    return busy;
}

void iris_engine_worker_collect(iris_engine *e, int wait) {
    struct iris_vworker *w = e->vw;
    if (!w) return;
    vw_job done[IRIS_VW_JOBS];
    int n = 0;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int in_flight = 0;
        for (int k = 0; k < IRIS_VW_JOBS; k++) {
            vw_job *j = &w->jobs[k];
            if (j->state == VJ_DONE) done[n++] = *j, j->state = VJ_FREE;
            in_flight |= j->state == VJ_QUEUED || j->state == VJ_RUNNING;
        }
        if (n || !wait || !in_flight) break;
        pthread_cond_wait(&w->cv_done, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    for (int k = 0; k < n; k++) {
        vw_job *j = &done[k];
        iris_request *r = j->r;
        r->seq.images[j->i].pending = 0;
        e->worker_s += j->secs;
        if (r->finished) { /* failed by an earlier output of this batch: its rows are gone already */
            iris_vision_out_free(&j->out);
            continue;
        }
        iris_err err = j->err;
        enc_item it = {r, j->i};
        int rc = j->rc ? j->rc : take_outputs(e, &it, &j->out, 1, &err);
        if (!rc) {
            e->images_ahead++;
            continue;
        }
        iris_log(IRIS_LOG_ERROR, "engine", "request %lld, image %d (vision worker): %s", (long long)r->seq.id,
                 j->i + 1, err.msg);
        iris_engine_fail(e, r, &err);
    }
}

/* Queue image i of r in a free slot; 0 when none is free. */
static int submit_one(struct iris_vworker *w, iris_request *r, int i, int64_t row0) {
    vw_job *j = NULL;
    for (int k = 0; k < IRIS_VW_JOBS && !j; k++)
        if (w->jobs[k].state == VJ_FREE) j = &w->jobs[k];
    if (!j) return 0;
    memset(j, 0, sizeof *j);
    j->r = r, j->i = i, j->ticket = w->next_ticket++;
    j->px = r->prompt.pixel_values + row0 * w->v->patch_dim;
    j->px16 = r->px16 ? r->px16 + row0 * w->v->patch_dim : NULL;
    memcpy(j->grid, r->prompt.grid_thw + 3 * i, sizeof j->grid);
    j->state = VJ_QUEUED;
    r->seq.images[i].pending = 1;
    return 1;
}

/* r's images from token `from` on that need an encode, into free slots; 0 once none is free. */
static int submit_seq(struct iris_vworker *w, iris_request *r, int from) {
    int64_t row0 = 0;
    for (int i = 0; i < r->seq.n_images; i++) {
        const iris_seq_image *im = &r->seq.images[i];
        const int *g = r->prompt.grid_thw + 3 * i;
        if (!im->ready && !im->pending && im->start + im->n_tokens > from && !submit_one(w, r, i, row0)) return 0;
        row0 += (int64_t)g[0] * g[1] * g[2];
    }
    return 1;
}

void iris_engine_worker_submit(iris_engine *e) {
    struct iris_vworker *w = e->vw;
    if (!w) return;
    iris_sched *s = &e->sched;
    int more = 1;
    pthread_mutex_lock(&w->mu);
    for (int k = 0; more && k < s->n_running; k++) {
        iris_seq *q = s->running[k];
        more = submit_seq(w, q->ud, q->n_computed + q->n_new);
    }
    for (int k = 0; more && k < s->n_waiting && k < IRIS_VW_JOBS; k++)
        more = submit_seq(w, s->waiting[k]->ud, iris_sched_cached_tokens(s, s->waiting[k]));
    pthread_cond_signal(&w->cv_work);
    pthread_mutex_unlock(&w->mu);
}

void iris_engine_worker_forget(iris_engine *e, iris_request *r) {
    struct iris_vworker *w = e->vw;
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    for (int k = 0; k < IRIS_VW_JOBS; k++) {
        vw_job *j = &w->jobs[k];
        if (j->r != r || j->state == VJ_FREE) continue;
        while (j->state == VJ_RUNNING) pthread_cond_wait(&w->cv_done, &w->mu);
        if (j->state == VJ_DONE) iris_vision_out_free(&j->out);
        r->seq.images[j->i].pending = 0;
        j->state = VJ_FREE;
    }
    pthread_mutex_unlock(&w->mu);
}
