/* pool.c: the persistent pthread pool (pool.h).  The caller runs the first range itself.  Between
 * jobs a worker spins on the job counter for up to SPIN_S before it sleeps on a condition variable,
 * and the caller spins as long for the workers to finish before it sleeps: the CPU backend's ops
 * come tens of microseconds apart (a decode step, a demo encoder pass), and a futex sleep and wake
 * around each cost about as much as the op (200 demo captions in one process: 6-7% faster with
 * 50 us of spinning, no faster with 200 us). */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "clock.h"

#define SPIN_S 50e-6

static pthread_mutex_t g_call = PTHREAD_MUTEX_INITIALIZER;  /* serializes iris_pool_for */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;   /* the job; sleeping and waking */
static pthread_cond_t g_go = PTHREAD_COND_INITIALIZER, g_done = PTHREAD_COND_INITIALIZER;
static int g_threads = 0;
static atomic_int g_started; /* set (release) once g_threads is final: read without g_call after */
static atomic_ulong g_gen;     /* the job's number: a new job is published (under g_mu) by its increment */
static atomic_int g_pending;   /* workers not yet done with the job */
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

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int gen_is(unsigned long seen) { return atomic_load_explicit(&g_gen, memory_order_acquire) == seen; }
static int pending(unsigned long unused) {
    (void)unused;
    return atomic_load_explicit(&g_pending, memory_order_acquire) > 0;
}

/* Spin up to SPIN_S while busy(arg) (the job still number seen: gen_is; workers pending: pending):
 * 1 when that ended, 0 when the time did. */
static int spin_while(int (*busy)(unsigned long), unsigned long arg) {
    double t0 = 0;
    for (unsigned i = 1; busy(arg); i++) {
        if (i % 64 == 0) {
            double t = iris_now_s();
            if (!t0) t0 = t;
            else if (t - t0 > SPIN_S) return 0;
        }
        relax();
    }
    return 1;
}

static _Thread_local int t_worker; /* 0 outside the pool's workers */

int iris_pool_worker(void) { return t_worker; }

static void *worker(void *arg) {
    int k = (int)(intptr_t)arg;
    t_worker = k;
    unsigned long seen = 0;
    for (;;) {
        spin_while(gen_is, seen);
        pthread_mutex_lock(&g_mu);
        while (atomic_load(&g_gen) == seen) pthread_cond_wait(&g_go, &g_mu);
        seen = atomic_load(&g_gen);
        iris_pool_fn fn = g_job.fn;
        void *ctx = g_job.ctx;
        int64_t n = g_job.n;
        int parts = g_job.parts;
        pthread_mutex_unlock(&g_mu);
        int64_t i0, i1;
        range(n, parts, k, &i0, &i1);
        if (k < parts && i1 > i0) fn(ctx, i0, i1);
        if (atomic_fetch_sub_explicit(&g_pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&g_mu);
            pthread_cond_signal(&g_done);
            pthread_mutex_unlock(&g_mu);
        }
    }
    return NULL;
}

static void start(void) {
    if (g_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        g_threads = c > 0 ? (int)c : 1;
    }
    if (g_threads > IRIS_POOL_MAX_THREADS) g_threads = IRIS_POOL_MAX_THREADS;
    for (int k = 1; k < g_threads; k++) {
        pthread_t th;
        if (pthread_create(&th, NULL, worker, (void *)(intptr_t)k) != 0) {
            g_threads = k; /* run with what we have */
            break;
        }
        pthread_detach(th);
    }
    atomic_store_explicit(&g_started, 1, memory_order_release);
}

/* Never waits for a job in progress (a caller sizing its own work beside the pool's). */
int iris_pool_threads(void) {
    if (atomic_load_explicit(&g_started, memory_order_acquire)) return g_threads;
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
    atomic_store(&g_pending, g_threads - 1);
    atomic_fetch_add_explicit(&g_gen, 1, memory_order_release);
    pthread_cond_broadcast(&g_go);
    pthread_mutex_unlock(&g_mu);
    int64_t i0, i1;
    range(n, parts, 0, &i0, &i1);
    if (i1 > i0) fn(ctx, i0, i1);
    if (!spin_while(pending, 0)) {
        pthread_mutex_lock(&g_mu);
        while (atomic_load(&g_pending) > 0) pthread_cond_wait(&g_done, &g_mu);
        pthread_mutex_unlock(&g_mu);
    }
    pthread_mutex_unlock(&g_call);
}
