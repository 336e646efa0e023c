/* workq.h: a bounded work queue with threads of its own.
 *
 * A producer hands numbered items to a few threads that work on them while it
 * goes on (a video's decoder hands its sampled frames to resize threads; frames
 * given decoded are handed over by number).  An item may carry item_bytes,
 * copied into a free slot of a ring of n_slots: iris_workq_push waits for one,
 * so the queue holds at most n_slots * item_bytes and the producer runs at most
 * n_slots items ahead of the work.  Threads take the oldest item first, but
 * items finish in any order: fn writes only what its id owns, so the result
 * does not depend on the order or the thread count.
 *
 * Failure: the first item whose fn fails is kept (its code and message); the
 * items not yet started are then skipped (never passed to fn), and push and
 * close return that failure.
 *
 * Not the worker pool (pool.h): the pool runs one caller's job at a time, so
 * work of milliseconds an item held there would hold up every other caller
 * (the CPU backend's ops, other requests' preprocessing).  A queue's threads
 * are its own and it never touches the pool, so it runs beside a pool job of
 * another thread, or from inside one.  With no threads (n_threads 0, or none
 * could be started) push runs fn on the caller. */
#ifndef IRIS_WORKQ_H
#define IRIS_WORKQ_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Item id with its bytes (NULL when item_bytes is 0); 0, or a negative code with err filled. */
typedef int (*iris_workq_fn)(void *ctx, int64_t id, const void *bytes, iris_err *err);

typedef struct iris_workq iris_workq;

/* A queue of n_threads threads (>= 0) and n_slots slots (>= 1) of item_bytes each, started;
 * *out is freed with iris_workq_free. */
int iris_workq_init(iris_workq **out, int n_threads, int n_slots, size_t item_bytes, iris_workq_fn fn, void *ctx,
                    iris_err *err);
/* Item id, with item_bytes copied from bytes (ignored when item_bytes is 0), into a free slot
 * (waiting for one).  0, or the queue's first failure. */
int iris_workq_push(iris_workq *q, int64_t id, const void *bytes, iris_err *err);
/* Every item pushed done (or skipped after a failure), the threads gone: 0, or the first failure.
 * Nothing may be pushed after. */
int iris_workq_close(iris_workq *q, iris_err *err);
/* The threads running (0 when push runs fn on the caller). */
int iris_workq_threads(const iris_workq *q);
/* Closes q if still open, skipping the items not yet started; accepts NULL. */
void iris_workq_free(iris_workq *q);

#endif
