/* test_kv_pool.c: the KV block pool: states, keys, LRU eviction, and a seeded
 * random walk with the invariant checker after every operation. */
#include <stdint.h>
#include <stdlib.h>

#include "engine/kv_pool.h"
#include "model/text.h"
#include "test.h"

static uint64_t rng_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return *s = x;
}

static void key_of(int v, iris_kv_key *k) {
    int32_t toks[IRIS_KV_BLOCK];
    for (int i = 0; i < IRIS_KV_BLOCK; i++) toks[i] = v * 100 + i;
    iris_kv_pool_key(NULL, toks, NULL, 0, k);
}

IRIS_TEST(kv_pool_alloc_release) {
    iris_err err = {0};
    iris_kv_pool *p;
    REQUIRE(iris_kv_pool_init(&p, 4, 1, &err) == 0);
    int b[4], refs[4] = {0};
    for (int i = 0; i < 4; i++) {
        b[i] = iris_kv_pool_alloc(p);
        CHECK(b[i] >= 0 && b[i] < 4);
        refs[b[i]]++;
    }
    CHECK_EQ_INT(iris_kv_pool_alloc(p), -1);
    CHECK_EQ_INT(iris_kv_pool_n_available(p), 0);
    CHECK_EQ_INT(iris_kv_pool_check(p, refs, &err), 0);
    iris_kv_pool_ref(p, b[2]);
    refs[b[2]]++;
    iris_kv_pool_release(p, b[2]);
    refs[b[2]]--;
    CHECK_EQ_INT(iris_kv_pool_check(p, refs, &err), 0);
    CHECK_EQ_INT(iris_kv_pool_n_available(p), 0);
    iris_kv_pool_release(p, b[2]);
    refs[b[2]]--;
    CHECK_EQ_INT(iris_kv_pool_n_available(p), 1);
    CHECK_EQ_INT(iris_kv_pool_check(p, refs, &err), 0);
    /* The checker notices a wrong expectation. */
    refs[b[0]]++;
    CHECK_EQ_INT(iris_kv_pool_check(p, refs, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "references");
    iris_kv_pool_free(p);
    CHECK(iris_kv_pool_init(&p, 0, 1, &err) == IRIS_EINVAL);
    iris_kv_pool_free(NULL);
}

IRIS_TEST(kv_pool_keys) {
    int32_t t[IRIS_KV_BLOCK];
    for (int i = 0; i < IRIS_KV_BLOCK; i++) t[i] = i;
    iris_kv_key a, b, c, d, e, img1, img2;
    key_of(1, &img1);
    key_of(2, &img2);
    iris_kv_pool_key(NULL, t, NULL, 0, &a);
    iris_kv_pool_key(NULL, t, NULL, 0, &b);
    CHECK(!memcmp(a.b, b.b, 32));
    iris_kv_pool_key(NULL, t, &img1, 1, &c);
    iris_kv_pool_key(NULL, t, &img2, 1, &d);
    CHECK(memcmp(a.b, c.b, 32) && memcmp(c.b, d.b, 32));
    iris_kv_pool_key(&a, t, NULL, 0, &e); /* same tokens after another block */
    CHECK(memcmp(a.b, e.b, 32));
    t[15] = 99;
    iris_kv_pool_key(NULL, t, NULL, 0, &e);
    CHECK(memcmp(a.b, e.b, 32));
}

IRIS_TEST(kv_pool_prefix_cache_lru) {
    iris_err err = {0};
    iris_kv_pool *p;
    REQUIRE(iris_kv_pool_init(&p, 3, 1, &err) == 0);
    iris_kv_key k[3];
    int b[3];
    for (int i = 0; i < 3; i++) {
        key_of(i, &k[i]);
        b[i] = iris_kv_pool_alloc(p);
        CHECK_EQ_INT(iris_kv_pool_publish(p, b[i], &k[i]), 1);
    }
    /* Keyed blocks are found by their key. */
    CHECK_EQ_INT(iris_kv_pool_lookup(p, &k[1]), b[1]);
    for (int i = 0; i < 3; i++) iris_kv_pool_release(p, b[i]);  /* LRU order: 0, 1, 2 */
    CHECK_EQ_INT(iris_kv_pool_n_cached(p), 3);
    CHECK_EQ_INT(iris_kv_pool_check(p, (int[3]){0, 0, 0}, &err), 0);
    /* Reviving block 0 takes it off the LRU; the next alloc evicts block 1. */
    iris_kv_pool_ref(p, b[0]);
    int n = iris_kv_pool_alloc(p);
    CHECK_EQ_INT(n, b[1]);
    CHECK_EQ_INT(iris_kv_pool_lookup(p, &k[1]), -1);
    CHECK_EQ_INT(iris_kv_pool_lookup(p, &k[2]), b[2]);
    int dup = iris_kv_pool_publish(p, n, &k[0]);
    CHECK_EQ_INT(dup, 0);
    int refs[3] = {0};
    refs[b[0]] = 1, refs[n] = 1;
    CHECK_EQ_INT(iris_kv_pool_check(p, refs, &err), 0);
    iris_kv_pool_release(p, n);  /* unkeyed: back to the free list, not cached */
    refs[n] = 0;
    CHECK_EQ_INT(iris_kv_pool_n_cached(p), 1);
    CHECK_EQ_INT(iris_kv_pool_n_available(p), 2);
    CHECK_EQ_INT(iris_kv_pool_check(p, refs, &err), 0);
    iris_kv_pool_free(p);

    /* Caching off: nothing is ever keyed. */
    REQUIRE(iris_kv_pool_init(&p, 2, 0, &err) == 0);
    int x = iris_kv_pool_alloc(p);
    CHECK_EQ_INT(iris_kv_pool_publish(p, x, &k[0]), 0);
    CHECK_EQ_INT(iris_kv_pool_lookup(p, &k[0]), -1);
    iris_kv_pool_release(p, x);
    CHECK_EQ_INT(iris_kv_pool_n_cached(p), 0);
    CHECK_EQ_INT(iris_kv_pool_check(p, NULL, &err), 0);
    iris_kv_pool_free(p);
}

/* Random holders take, share, key and drop blocks; the checker runs after
 * every operation against references counted independently. */
IRIS_TEST(kv_pool_random_walk) {
    enum { NB = 32, NH = 12, STEPS = 20000 };
    iris_err err = {0};
    iris_kv_pool *p;
    REQUIRE(iris_kv_pool_init(&p, NB, 1, &err) == 0);
    int held[NH][NB], n_held[NH] = {0}, refs[NB] = {0};
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int n_evict_hits = 0, n_revived = 0;
    for (int step = 0; step < STEPS; step++) {
        int h = (int)(rng_next(&rng) % NH), op = (int)(rng_next(&rng) % 4);
        if (op == 0 && n_held[h] < NB) {           /* take a fresh block */
            int b = iris_kv_pool_alloc(p);
            if (b >= 0) {
                CHECK_EQ_INT(refs[b], 0);
                held[h][n_held[h]++] = b, refs[b]++;
            } else {
                CHECK_EQ_INT(iris_kv_pool_n_available(p), 0);
            }
        } else if (op == 1 && n_held[h] < NB) {    /* share a block by key */
            iris_kv_key k;
            key_of((int)(rng_next(&rng) % 40), &k);
            int b = iris_kv_pool_lookup(p, &k);
            if (b >= 0) {
                n_revived += refs[b] == 0;
                iris_kv_pool_ref(p, b);
                held[h][n_held[h]++] = b, refs[b]++;
                n_evict_hits++;
            }
        } else if (op == 2 && n_held[h] > 0) {     /* key one of its blocks */
            iris_kv_key k;
            key_of((int)(rng_next(&rng) % 40), &k);
            iris_kv_pool_publish(p, held[h][rng_next(&rng) % n_held[h]], &k);
        } else if (op == 3 && n_held[h] > 0) {     /* drop its last block */
            int b = held[h][--n_held[h]];
            iris_kv_pool_release(p, b), refs[b]--;
        }
        if (iris_kv_pool_check(p, refs, &err)) {
            iris_test_fail(__FILE__, __LINE__, "step %d: %s", step, err.msg);
            break;
        }
    }
    CHECK(n_evict_hits > 100);
    CHECK(n_revived > 10);
    for (int h = 0; h < NH; h++)
        while (n_held[h]) {
            int b = held[h][--n_held[h]];
            iris_kv_pool_release(p, b), refs[b]--;
        }
    CHECK_EQ_INT(iris_kv_pool_n_used(p), 0);
    CHECK_EQ_INT(iris_kv_pool_n_available(p), NB);
    CHECK_EQ_INT(iris_kv_pool_check(p, refs, &err), 0);
    iris_kv_pool_free(p);
}

/* Alloc reuses the block freed last before any never-used block (their pages
 * are mapped, their lines maybe cached); never-used ones go in id order. */
IRIS_TEST(kv_pool_reuses_freed_first) {
    iris_err err = {0};
    for (int caching = 0; caching < 2; caching++) {
        iris_kv_pool *p;
        REQUIRE(iris_kv_pool_init(&p, 8, caching, &err) == 0);
        int a = iris_kv_pool_alloc(p), b = iris_kv_pool_alloc(p), c = iris_kv_pool_alloc(p);
        CHECK(a == 0 && b == 1 && c == 2);
        iris_kv_pool_release(p, b);
        CHECK_EQ_INT(iris_kv_pool_alloc(p), b);  /* not never-used block 3 */
        iris_kv_pool_release(p, a);
        iris_kv_pool_release(p, c);
        CHECK_EQ_INT(iris_kv_pool_alloc(p), c);  /* last freed first */
        CHECK_EQ_INT(iris_kv_pool_alloc(p), a);
        CHECK_EQ_INT(iris_kv_pool_alloc(p), 3);  /* then the never-used, in id order */
        CHECK_EQ_INT(iris_kv_pool_alloc(p), 4);
        CHECK_EQ_INT(iris_kv_pool_check(p, (int[8]){1, 1, 1, 1, 1, 0, 0, 0}, &err), 0);
        iris_kv_pool_free(p);
    }
}

/* With prefix caching the freed-first order changes nothing for cached
 * blocks: they stay findable while any free block (freed or never used) is
 * left, and are evicted oldest release first only after. */
IRIS_TEST(kv_pool_freed_first_keeps_cache) {
    iris_err err = {0};
    iris_kv_pool *p;
    REQUIRE(iris_kv_pool_init(&p, 6, 1, &err) == 0);
    iris_kv_key k[2];
    key_of(1, &k[0]);
    key_of(2, &k[1]);
    int b[4];
    for (int i = 0; i < 4; i++) b[i] = iris_kv_pool_alloc(p);
    CHECK_EQ_INT(iris_kv_pool_publish(p, b[0], &k[0]), 1);
    CHECK_EQ_INT(iris_kv_pool_publish(p, b[1], &k[1]), 1);
    for (int i = 3; i >= 0; i--) iris_kv_pool_release(p, b[i]);  /* as a sequence: last block first */
    CHECK_EQ_INT(iris_kv_pool_n_cached(p), 2);
    CHECK_EQ_INT(iris_kv_pool_n_available(p), 6);
    /* free: b[2] (freed last), b[3], never-used 4 and 5; the cached b[1], b[0] untouched */
    CHECK_EQ_INT(iris_kv_pool_alloc(p), b[2]);
    CHECK_EQ_INT(iris_kv_pool_alloc(p), b[3]);
    CHECK_EQ_INT(iris_kv_pool_alloc(p), 4);
    CHECK_EQ_INT(iris_kv_pool_alloc(p), 5);
    CHECK_EQ_INT(iris_kv_pool_lookup(p, &k[0]), b[0]);
    CHECK_EQ_INT(iris_kv_pool_lookup(p, &k[1]), b[1]);
    CHECK_EQ_INT(iris_kv_pool_n_cached(p), 2);
    /* free list empty: the LRU head goes, released longest ago (b[1], released before b[0]) */
    CHECK_EQ_INT(iris_kv_pool_alloc(p), b[1]);
    CHECK_EQ_INT(iris_kv_pool_lookup(p, &k[1]), -1);
    CHECK_EQ_INT(iris_kv_pool_lookup(p, &k[0]), b[0]);
    CHECK_EQ_INT(iris_kv_pool_alloc(p), b[0]);
    CHECK_EQ_INT(iris_kv_pool_alloc(p), -1);
    CHECK_EQ_INT(iris_kv_pool_check(p, (int[6]){1, 1, 1, 1, 1, 1}, &err), 0);
    iris_kv_pool_free(p);
}

/* A seeded walk checks every alloc against the order written out from
 * scratch: the free block released last, else the never-used block of the
 * lowest id, else the cached block released longest ago. */
IRIS_TEST(kv_pool_alloc_order_walk) {
    enum { NB = 24, STEPS = 20000 };
    iris_err err = {0};
    for (int caching = 0; caching < 2; caching++) {
        iris_kv_pool *p;
        REQUIRE(iris_kv_pool_init(&p, NB, caching, &err) == 0);
        /* the reference: refs, keyed, never used, and the time of each block's last release to 0 */
        int refs[NB] = {0}, keyed[NB] = {0}, fresh[NB];
        long released[NB] = {0}, now = 0;
        int held[4 * NB], n_held = 0, n_fresh_after_free = 0, n_evicted = 0;
        for (int b = 0; b < NB; b++) fresh[b] = 1;
        uint64_t rng = 0x2545f4914f6cdd1dull + (uint64_t)caching;
        for (int step = 0; step < STEPS; step++) {
            int op = (int)(rng_next(&rng) % 8);
            if (op < 3 && n_held < 4 * NB) {                               /* alloc: is it the expected block? */
                int want = -1, cached = -1;
                for (int b = 0; b < NB; b++)
                    if (!refs[b] && !keyed[b] && !fresh[b] && (want < 0 || released[b] > released[want])) want = b;
                for (int b = 0; want < 0 && b < NB; b++)
                    if (fresh[b]) want = b;
                for (int b = 0; b < NB; b++)
                    if (!refs[b] && keyed[b] && (cached < 0 || released[b] < released[cached])) cached = b;
                if (want < 0) want = cached;
                int got = iris_kv_pool_alloc(p);
                if (got != want) {
                    iris_test_fail(__FILE__, __LINE__, "caching %d, step %d: alloc gave %d, expected %d", caching,
                                   step, got, want);
                    break;
                }
                if (got < 0) continue;
                n_fresh_after_free += fresh[got] && now > 0;
                n_evicted += keyed[got];
                fresh[got] = keyed[got] = 0;
                refs[got]++, held[n_held++] = got;
            } else if (op == 3 && n_held < 4 * NB) {    /* share a keyed block by its key */
                iris_kv_key k;
                key_of((int)(rng_next(&rng) % 30), &k);
                int b = iris_kv_pool_lookup(p, &k);
                if (b >= 0) iris_kv_pool_ref(p, b), refs[b]++, held[n_held++] = b;
            } else if (op == 4 && n_held > 0) {         /* key a held block */
                iris_kv_key k;
                key_of((int)(rng_next(&rng) % 30), &k);
                int b = held[rng_next(&rng) % (uint64_t)n_held];
                if (iris_kv_pool_publish(p, b, &k)) keyed[b] = 1;
            } else if (op > 4 && n_held > 0) {          /* drop a held reference */
                int i = (int)(rng_next(&rng) % (uint64_t)n_held), b = held[i];
                held[i] = held[--n_held];
                iris_kv_pool_release(p, b);
                if (--refs[b] == 0) released[b] = ++now;
            }
            if (iris_kv_pool_check(p, refs, &err)) {
                iris_test_fail(__FILE__, __LINE__, "caching %d, step %d: %s", caching, step, err.msg);
                break;
            }
        }
        CHECK(n_fresh_after_free > 0);
        CHECK(caching ? n_evicted > 50 : n_evicted == 0);
        iris_kv_pool_free(p);
    }
}
