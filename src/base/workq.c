/* workq.c: the bounded work queue (workq.h).
 *
 * One mutex guards the slots' states: free, ready (bytes copied in, the item's id and push
 * number kept) or taken by a thread.  The producer copies into a free slot outside the lock
 * (only the producer touches a free slot), then marks it ready; a thread takes the ready slot
 * pushed first, runs fn on the slot's bytes in place outside the lock, and frees the slot.
 * `ready` wakes the threads (an item pushed, or the close); `freed` wakes the producer waiting
 * for a slot.  There is one producer: push and close are called from one thread at a time. */
#include "workq.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { SLOT_FREE, SLOT_READY, SLOT_TAKEN };

struct iris_workq {
    iris_workq_fn fn;
    void *ctx;
    size_t item_bytes;
    int n_slots, n_threads;
    uint8_t *bytes;    /* n_slots * item_bytes */
    int *state;        /* per slot */
    int64_t *id, *seq; /* per slot: the item's id and its push number */
    int64_t n_pushed;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t ready, freed;
    int n_ready, closing, drop, closed, rc;
    iris_err err;      /* the first failure's */
};

static const void *slot_bytes(const iris_workq *q, int k) {
    return q->item_bytes ? q->bytes + (size_t)k * q->item_bytes : NULL;
}

static int oldest_ready(const iris_workq *q) {
    int best = -1;
    for (int k = 0; k < q->n_slots; k++)
        if (q->state[k] == SLOT_READY && (best < 0 || q->seq[k] < q->seq[best])) best = k;
    return best;
}

static int free_slot(const iris_workq *q) {
    for (int k = 0; k < q->n_slots; k++)
        if (q->state[k] == SLOT_FREE) return k;
    return -1;
}

/* Under q->mu: the first failure is the one kept. */
static void fail(iris_workq *q, int rc, const iris_err *e) {
    if (rc && !q->rc) q->rc = rc, q->err = *e;
}

static void *work_main(void *arg) {
    iris_workq *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->n_ready && !q->closing) pthread_cond_wait(&q->ready, &q->mu);
        if (!q->n_ready) break;
        int k = oldest_ready(q), skip = q->rc || q->drop;
        q->state[k] = SLOT_TAKEN, q->n_ready--;
        pthread_mutex_unlock(&q->mu);
        iris_err e = {0};
        int rc = skip ? 0 : q->fn(q->ctx, q->id[k], slot_bytes(q, k), &e);
        pthread_mutex_lock(&q->mu);
        fail(q, rc, &e);
        q->state[k] = SLOT_FREE;
        pthread_cond_signal(&q->freed);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

int iris_workq_init(iris_workq **out, int n_threads, int n_slots, size_t item_bytes, iris_workq_fn fn, void *ctx,
                    iris_err *err) {
    *out = NULL;
    if (n_threads < 0 || n_slots < 1 || !fn)
        return iris_err_set(err, IRIS_EINVAL, "work queue: %d threads and %d slots (need >= 0 and >= 1, and a function)",
                            n_threads, n_slots);
    iris_workq *q = calloc(1, sizeof *q);
    if (!q) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    q->fn = fn, q->ctx = ctx, q->item_bytes = item_bytes, q->n_slots = n_slots;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->ready, NULL);
    pthread_cond_init(&q->freed, NULL);
    q->bytes = item_bytes ? malloc(item_bytes * (size_t)n_slots) : NULL;
    q->state = calloc((size_t)n_slots, sizeof *q->state);
    q->id = calloc((size_t)n_slots, sizeof *q->id);
    q->seq = calloc((size_t)n_slots, sizeof *q->seq);
    q->th = calloc((size_t)(n_threads > 0 ? n_threads : 1), sizeof *q->th);
    if ((item_bytes && !q->bytes) || !q->state || !q->id || !q->seq || !q->th) {
        iris_workq_free(q);
        return iris_err_set(err, IRIS_ENOMEM, "work queue: out of memory for %d slots of %zu bytes", n_slots,
                            item_bytes);
    }
    /* run with the threads that start; with none, push runs fn itself */
    while (q->n_threads < n_threads && pthread_create(&q->th[q->n_threads], NULL, work_main, q) == 0) q->n_threads++;
    *out = q;
    return 0;
}

int iris_workq_threads(const iris_workq *q) { return q->n_threads; }

static int push_inline(iris_workq *q, int64_t id, const void *bytes, iris_err *err) {
    if (!q->rc) {
        iris_err e = {0};
        fail(q, q->fn(q->ctx, id, q->item_bytes ? bytes : NULL, &e), &e);
    }
    if (q->rc && err) *err = q->err;
    return q->rc;
}

int iris_workq_push(iris_workq *q, int64_t id, const void *bytes, iris_err *err) {
    if (q->closed) return iris_err_set(err, IRIS_EINVAL, "work queue: item %lld pushed after the close", (long long)id);
    if (!q->n_threads) return push_inline(q, id, bytes, err);
    int k = -1;
    pthread_mutex_lock(&q->mu);
    while (!q->rc && (k = free_slot(q)) < 0) pthread_cond_wait(&q->freed, &q->mu);
    int rc = q->rc;
    if (rc && err) *err = q->err;
    pthread_mutex_unlock(&q->mu);
    if (rc) return rc;
    if (q->item_bytes) memcpy(q->bytes + (size_t)k * q->item_bytes, bytes, q->item_bytes);
    pthread_mutex_lock(&q->mu);
    q->id[k] = id, q->seq[k] = q->n_pushed++;
    q->state[k] = SLOT_READY, q->n_ready++;
    pthread_cond_signal(&q->ready);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

/* The threads drain what is ready (skipping it when drop) and end. */
static int finish(iris_workq *q, int drop, iris_err *err) {
    if (q->n_threads) {
        pthread_mutex_lock(&q->mu);
        q->closing = 1, q->drop |= drop;
        pthread_cond_broadcast(&q->ready);
        pthread_mutex_unlock(&q->mu);
        for (int i = 0; i < q->n_threads; i++) pthread_join(q->th[i], NULL);
        q->n_threads = 0;
    }
    q->closed = 1;
    if (q->rc && err) *err = q->err;
    return q->rc;
}

int iris_workq_close(iris_workq *q, iris_err *err) { return finish(q, 0, err); }

void iris_workq_free(iris_workq *q) {
    if (!q) return;
    finish(q, 1, NULL);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->ready);
    pthread_cond_destroy(&q->freed);
    free(q->bytes);
    free(q->state);
    free(q->id);
    free(q->seq);
    free(q->th);
    free(q);
}
