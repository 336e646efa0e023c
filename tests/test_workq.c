/* test_workq.c: the bounded work queue with threads of its own (base/workq.h).
 *
 * Every item runs once with its own bytes, in any order, with the result of the queue run on
 * its caller; the first failure is the one reported and stops the items after it; the
 * producer is never more than n_slots items ahead of the work; a queue runs while another
 * thread holds the worker pool, and from inside a pool job.  Waits are bounded (WAIT_S: a
 * failure, not a timing). */
#include "test.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"
#include "workq.h"

#define WAIT_S 20.0
#define ITEM_BYTES 24

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The bytes item id carries. */
static void item_fill(int64_t id, uint8_t *b) {
    for (int i = 0; i < ITEM_BYTES; i++) b[i] = (uint8_t)(id * 31 + i * 7 + 1);
}

static uint32_t mix(uint32_t h, uint32_t x) { return (h ^ x) * 16777619u; }

typedef struct items {
    int64_t n;
    int *ran;            /* per id: how many times fn ran (atomic) */
    uint32_t *out;       /* per id: a hash of the id and its bytes */
    int fail_at[2];      /* ids whose fn fails (-1: none) */
    int hold_first;      /* item 0 waits until item 1 has finished */
    int gate;            /* fn waits while 0 (atomic; 1 when unused) */
    int in_fn, max_in_fn, finished; /* atomic */
    int bad_bytes;       /* an item saw bytes not its own (atomic) */
    int held_too_long;   /* a wait ran past WAIT_S (atomic) */
} items;

static int work(void *ctx, int64_t id, const void *bytes, iris_err *err) {
    items *t = ctx;
    int in = __atomic_add_fetch(&t->in_fn, 1, __ATOMIC_ACQ_REL);
    for (int m = __atomic_load_n(&t->max_in_fn, __ATOMIC_RELAXED);
         in > m && !__atomic_compare_exchange_n(&t->max_in_fn, &m, in, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);)
        ;
    for (double t0 = now_s(); !__atomic_load_n(&t->gate, __ATOMIC_ACQUIRE); usleep(200))
        if (now_s() - t0 > WAIT_S) {
            __atomic_store_n(&t->held_too_long, 1, __ATOMIC_RELAXED);
            break;
        }
    if (t->hold_first && id == 0)
        for (double t0 = now_s(); !__atomic_load_n(&t->ran[1], __ATOMIC_ACQUIRE); usleep(200))
            if (now_s() - t0 > WAIT_S) {
                __atomic_store_n(&t->held_too_long, 1, __ATOMIC_RELAXED);
                break;
            }
    uint8_t want[ITEM_BYTES];
    item_fill(id, want);
    if (bytes && memcmp(bytes, want, ITEM_BYTES)) __atomic_store_n(&t->bad_bytes, 1, __ATOMIC_RELAXED);
    uint32_t h = mix(2166136261u, (uint32_t)id);
    for (int i = 0; bytes && i < ITEM_BYTES; i++) h = mix(h, ((const uint8_t *)bytes)[i]);
    t->out[id] = h;
    __atomic_sub_fetch(&t->in_fn, 1, __ATOMIC_ACQ_REL);
    __atomic_add_fetch(&t->finished, 1, __ATOMIC_ACQ_REL);
    __atomic_add_fetch(&t->ran[id], 1, __ATOMIC_ACQ_REL);
    if (id == t->fail_at[0] || id == t->fail_at[1])
        return iris_err_set(err, IRIS_EFORMAT, "item %lld failed", (long long)id);
    return 0;
}

static items *items_new(int64_t n) {
    items *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->n = n;
    t->ran = calloc((size_t)n, sizeof *t->ran);
    t->out = calloc((size_t)n, sizeof *t->out);
    t->fail_at[0] = t->fail_at[1] = -1;
    t->gate = 1;
    if (!t->ran || !t->out) {
        free(t->ran), free(t->out), free(t);
        return NULL;
    }
    return t;
}

static void items_free(items *t) {
    if (!t) return;
    free(t->ran), free(t->out), free(t);
}

/* Items [0, n) through a queue of the given shape; the first failing push's code (or close's). */
static int run_queue(items *t, int threads, int slots, size_t item_bytes, int64_t *pushed, iris_err *err) {
    iris_workq *q = NULL;
    int rc = iris_workq_init(&q, threads, slots, item_bytes, work, t, err);
    int64_t k = 0;
    for (; !rc && k < t->n; k++) {
        uint8_t b[ITEM_BYTES];
        item_fill(k, b);
        if ((rc = iris_workq_push(q, k, b, err))) break;
    }
    if (pushed) *pushed = k;
    int rc2 = q ? iris_workq_close(q, rc ? NULL : err) : 0;
    iris_workq_free(q);
    return rc ? rc : rc2;
}

static int all_ran_once(const items *t) {
    for (int64_t i = 0; i < t->n; i++)
        if (t->ran[i] != 1) return 0;
    return 1;
}

/* Every item once, with its own bytes, whatever the order: item 0 finishes only after item 1,
 * and the result equals the queue run on its caller (no threads). */
IRIS_TEST(workq_all_items_any_order) {
    const int64_t n = 300;
    items *ref = items_new(n), *t = items_new(n);
    REQUIRE(ref && t);
    iris_err err = {0};
    CHECKF(run_queue(ref, 0, 1, ITEM_BYTES, NULL, &err) == 0, "%s", err.msg);
    CHECK(all_ran_once(ref));
    CHECK(!ref->bad_bytes);
    t->hold_first = 1;
    iris_workq *q = NULL;
    REQUIRE(iris_workq_init(&q, 3, 6, ITEM_BYTES, work, t, &err) == 0);
    CHECK_EQ_INT(iris_workq_threads(q), 3);
    iris_workq_free(q); /* a queue freed unused */
    CHECKF(run_queue(t, 3, 6, ITEM_BYTES, NULL, &err) == 0, "%s", err.msg);
    CHECK(all_ran_once(t));
    CHECK(!t->bad_bytes);
    CHECKF(!t->held_too_long, "item 1 did not finish while item 0 waited for it");
    CHECK(!memcmp(ref->out, t->out, sizeof *t->out * (size_t)n));
    /* items without bytes: the id alone */
    items *z = items_new(n);
    REQUIRE(z);
    CHECKF(run_queue(z, 2, 4, 0, NULL, &err) == 0, "%s", err.msg);
    CHECK(all_ran_once(z));
    CHECK(z->out[7] == mix(2166136261u, 7));
    items_free(ref), items_free(t), items_free(z);
    CHECK(iris_workq_init(&q, 2, 0, 8, work, NULL, &err) == IRIS_EINVAL && q == NULL);
}

/* The first failure is kept: its code and message from push or close, and the items after it
 * are not run.  On the caller or one thread the items run in push order, so the first is item
 * 10, not item 20; with four threads, item 10 is the only one that fails. */
IRIS_TEST(workq_first_failure) {
    const int threads[] = {0, 1, 4};
    for (int c = 0; c < 3; c++) {
        items *t = items_new(200);
        REQUIRE(t);
        t->fail_at[0] = 10, t->fail_at[1] = c < 2 ? 20 : -1; /* with 4, a later item could fail first */
        iris_err err = {0};
        int64_t pushed = 0;
        int rc = run_queue(t, threads[c], 2, ITEM_BYTES, &pushed, &err);
        CHECKF(rc == IRIS_EFORMAT, "%d threads: rc %d", threads[c], rc);
        CHECKF(!strcmp(err.msg, "item 10 failed"), "%d threads: \"%s\"", threads[c], err.msg);
        CHECK_EQ_INT(t->ran[10], 1);
        int before = 1;
        for (int i = 0; i < 10; i++) before &= t->ran[i] == 1;
        CHECK(before);
        if (c < 2) { /* one at a time: push reported it, at most the two slots' items after 10 were
                      * pushed, and they were skipped */
            CHECK_EQ_INT(t->ran[20], 0);
            CHECKF(pushed <= 13, "%d threads: %lld items pushed after a failure", threads[c], (long long)pushed);
            int after = 0;
            for (int i = 11; i < 200; i++) after += t->ran[i];
            CHECK_EQ_INT(after, 0);
        }
        items_free(t);
    }
}

typedef struct producer {
    items *t;
    iris_workq *q;
    int pushed;     /* atomic */
    int over_bound; /* pushed - finished was over the slots (atomic) */
    int slots, rc;
} producer;

static void *produce(void *arg) {
    producer *p = arg;
    for (int64_t k = 0; k < p->t->n && !p->rc; k++) {
        uint8_t b[ITEM_BYTES];
        item_fill(k, b);
        p->rc = iris_workq_push(p->q, k, b, NULL);
        int pushed = __atomic_add_fetch(&p->pushed, 1, __ATOMIC_ACQ_REL);
        if (pushed - __atomic_load_n(&p->t->finished, __ATOMIC_ACQUIRE) > p->slots)
            __atomic_store_n(&p->over_bound, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* With the threads held in fn, the producer stops at n_slots items pushed; let go, every item runs.
 * Both threads were in fn at once (the items run in parallel). */
IRIS_TEST(workq_bounded_slots) {
    items *t = items_new(40);
    REQUIRE(t);
    t->gate = 0;
    producer p = {.t = t, .slots = 3};
    iris_err err = {0};
    REQUIRE(iris_workq_init(&p.q, 2, 3, ITEM_BYTES, work, t, &err) == 0);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, produce, &p) == 0);
    double t0 = now_s();
    while (__atomic_load_n(&p.pushed, __ATOMIC_ACQUIRE) < 3 && now_s() - t0 < WAIT_S) usleep(500);
    while (__atomic_load_n(&t->in_fn, __ATOMIC_ACQUIRE) < 2 && now_s() - t0 < WAIT_S) usleep(500);
    usleep(50 * 1000); /* time for a push past the bound to show */
    int pushed_held = __atomic_load_n(&p.pushed, __ATOMIC_ACQUIRE);
    int in_fn_held = __atomic_load_n(&t->in_fn, __ATOMIC_ACQUIRE);
    __atomic_store_n(&t->gate, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    CHECK_EQ_INT(p.rc, 0);
    CHECKF(pushed_held == 3, "%d items pushed with every thread held (3 slots)", pushed_held);
    CHECK_EQ_INT(in_fn_held, 2);
    CHECK(iris_workq_close(p.q, &err) == 0);
    iris_workq_free(p.q);
    CHECK_EQ_INT(p.pushed, 40);
    CHECK(!p.over_bound);
    CHECK(all_ran_once(t));
    CHECK(!t->bad_bytes && !t->held_too_long);
    CHECK_EQ_INT(t->max_in_fn, 2);
    items_free(t);
}

typedef struct beside {
    pthread_t th;
    int started, rc_other, rc_here;
    int done; /* the other thread's queue closed (atomic) */
    int done_in_job;
    items *other, *here;
} beside;

static void *queue_main(void *arg) {
    beside *b = arg;
    b->rc_other = run_queue(b->other, 2, 4, ITEM_BYTES, NULL, NULL);
    __atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Range 0 of a pool job (this thread) runs a queue itself, starts one on another thread and holds
 * the pool until that one has closed. */
static void hold_pool(void *ctx, int64_t i0, int64_t i1) {
    beside *b = ctx;
    if (i0 != 0) return;
    b->started = pthread_create(&b->th, NULL, queue_main, b) == 0;
    b->rc_here = run_queue(b->here, 2, 4, ITEM_BYTES, NULL, NULL);
    for (double t0 = now_s(); b->started && !__atomic_load_n(&b->done, __ATOMIC_ACQUIRE) && now_s() - t0 < WAIT_S;)
        usleep(200);
    b->done_in_job = __atomic_load_n(&b->done, __ATOMIC_ACQUIRE);
}

IRIS_TEST(workq_beside_a_pool_job) {
    if (iris_pool_threads() < 2) IRIS_TEST_SKIP("a pool of one thread runs each job on its caller: nothing to hold");
    beside b = {.other = items_new(60), .here = items_new(60)};
    REQUIRE(b.other && b.here);
    iris_pool_for(iris_pool_threads(), hold_pool, &b);
    if (b.started) pthread_join(b.th, NULL);
    CHECK(b.started);
    CHECKF(b.done_in_job, "a queue on another thread waited for the pool job to end");
    CHECK(b.rc_other == 0 && b.rc_here == 0);
    CHECK(all_ran_once(b.other) && all_ran_once(b.here));
    items_free(b.other), items_free(b.here);
}
