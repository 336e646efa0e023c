/* pool.h: a persistent pthread pool for data-parallel loops.
 *
 * iris_pool_for(n, fn, ctx) runs fn(ctx, i0, i1) over [0, n) split into one
 * contiguous range per worker and returns when all are done.  One pool per
 * process (created on first use with iris_pool_set_threads' count, default the
 * machine's online cores); calls from several threads are serialized, so a
 * long job holds up every other caller (work of milliseconds a piece, such as
 * a video's frame resizes, belongs on a work queue's own threads, workq.h,
 * sized by iris_pool_threads(), which never waits for a job in progress).  Not for
 * nested use (a worker must not call iris_pool_for).  iris_pool_worker() is the
 * calling thread's index: k in [1, threads) on pool worker k, 0 on any other
 * thread (a caller runs the first range itself), so per-worker scratch can be
 * indexed by it. */
#ifndef IRIS_POOL_H
#define IRIS_POOL_H

#include <stdint.h>

#define IRIS_POOL_MAX_THREADS 256

typedef void (*iris_pool_fn)(void *ctx, int64_t i0, int64_t i1);

void iris_pool_set_threads(int n);   /* before first use; n <= 0: the machine's cores */
int iris_pool_threads(void);
void iris_pool_for(int64_t n, iris_pool_fn fn, void *ctx);
int iris_pool_worker(void);

#endif
