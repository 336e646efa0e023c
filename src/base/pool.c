/* pool.c: the persistent pthread pool (pool.h).  Workers sleep on a
 * condition variable between jobs; the caller runs the first range itself. */
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t g_call = PTHREAD_MUTEX_INITIALIZER;  /* serializes iris_pool_for */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_go = PTHREAD_COND_INITIALIZER, g_done = PTHREAD_COND_INITIALIZER;
static int g_threads = 0, g_started = 0;
static unsigned long g_gen = 0;
static int g_pending = 0;
static struct {
    iris_pool_fn fn;
    void *ctx;
    int64_t n;
    int parts;
} g_job;

void iris_pool_set_threads(int n) {
    pthread_mutex_lock(&g_call);
    if (!g_started) g_threads = n;
    pthread_mutex_unlock(&g_call);
}

static void range(int64_t n, int parts, int k, int64_t *i0, int64_t *i1) {
    *i0 = n * k / parts;
    *i1 = n * (k + 1) / parts;
}

static void *worker(void *arg) {
    int k = (int)(intptr_t)arg;
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&g_mu);
        while (g_gen == seen) pthread_cond_wait(&g_go, &g_mu);
        seen = g_gen;
        iris_pool_fn fn = g_job.fn;
        void *ctx = g_job.ctx;
        int64_t n = g_job.n;
        int parts = g_job.parts;
        pthread_mutex_unlock(&g_mu);
        int64_t i0, i1;
        range(n, parts, k, &i0, &i1);
        if (k < parts && i1 > i0) fn(ctx, i0, i1);
        pthread_mutex_lock(&g_mu);
        if (--g_pending == 0) pthread_cond_signal(&g_done);
        pthread_mutex_unlock(&g_mu);
    }
    return NULL;
}

static void start(void) {
    if (g_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        g_threads = c > 0 ? (int)c : 1;
    }
    if (g_threads > 256) g_threads = 256;
    int ok = 1;
    for (int k = 1; k < g_threads; k++) {
        pthread_t th;
        if (pthread_create(&th, NULL, worker, (void *)(intptr_t)k) != 0) {
            g_threads = k; /* run with what we have */
            ok = 0;
            break;
        }
        pthread_detach(th);
    }
    (void)ok;
    g_started = 1;
}

int iris_pool_threads(void) {
    pthread_mutex_lock(&g_call);
    if (!g_started) start();
    int n = g_threads;
    pthread_mutex_unlock(&g_call);
    return n;
}

void iris_pool_for(int64_t n, iris_pool_fn fn, void *ctx) {
    if (n <= 0) return;
    pthread_mutex_lock(&g_call);
    if (!g_started) start();
    int parts = g_threads < n ? g_threads : (int)n;
    if (parts <= 1) {
        pthread_mutex_unlock(&g_call);
        fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&g_mu);
    g_job.fn = fn;
    g_job.ctx = ctx;
    g_job.n = n;
    g_job.parts = parts;
    g_pending = g_threads - 1;
    g_gen++;
    pthread_cond_broadcast(&g_go);
    pthread_mutex_unlock(&g_mu);
    int64_t i0, i1;
    range(n, parts, 0, &i0, &i1);
    if (i1 > i0) fn(ctx, i0, i1);
    pthread_mutex_lock(&g_mu);
    while (g_pending > 0) pthread_cond_wait(&g_done, &g_mu);
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_unlock(&g_call);
}
