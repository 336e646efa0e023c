/* test_sched.c: the scheduler in seeded simulations.  A fake "forward"
 * writes into a shadow KV cache, for every slot, a fingerprint of the whole
 * prefix it belongs to (tokens and images); before each step every
 * scheduled sequence's visible slots are read back through its block
 * table, so a block shared wrongly, evicted while held, or reused with other
 * content is caught at the step it happens.  The invariant checker runs after
 * every step. */
#include <stdint.h>
#include <stdlib.h>

#include "engine/sched.h"
#include "model/text.h"
#include "test.h"

static uint64_t rng_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return *s = x;
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

typedef struct sim_req {
    iris_seq seq;
    iris_seq_image img[2];
    uint64_t *fp;            /* fingerprint of tokens [0, j] */
    int cap_fp, max_new, done;
} sim_req;

static uint64_t image_word(const iris_seq *s, int j) {
    for (int i = 0; i < s->n_images; i++)
        if (j >= s->images[i].start && j < s->images[i].start + s->images[i].n_tokens) {
            uint64_t w;
            memcpy(&w, s->images[i].hash.b, sizeof w);
            return w;
        }
    return 0;
}

static void fp_extend(sim_req *r) {
    if (r->cap_fp < r->seq.n_tokens) {
        r->cap_fp = r->seq.n_tokens * 2;
        r->fp = realloc(r->fp, sizeof *r->fp * (size_t)r->cap_fp);
    }
    for (int j = 0; j < r->seq.n_tokens; j++)
        r->fp[j] = mix(j ? r->fp[j - 1] : 1, (uint64_t)(uint32_t)r->seq.tokens[j] ^ image_word(&r->seq, j) << 1);
}

typedef struct sim {
    iris_kv_pool *pool;
    iris_sched s;
    uint64_t *kv;            /* [n_blocks * BLOCK] fingerprints */
    int n_blocks;
} sim;

/* Reads every slot the step's attention sees and writes the new ones. */
static int sim_forward(sim *m, iris_sched_batch *b, int step) {
    for (int i = 0; i < b->n_seqs; i++) {
        iris_seq *q = b->seqs[i];
        sim_req *r = q->ud;
        for (int j = 0; j < q->n_computed; j++) {
            uint64_t got = m->kv[q->blocks[j / IRIS_KV_BLOCK] * IRIS_KV_BLOCK + j % IRIS_KV_BLOCK];
            if (got != r->fp[j]) {
                iris_test_fail(__FILE__, __LINE__, "step %d: seq %lld reads a wrong K/V at token %d (block %d)", step,
                               (long long)q->id, j, q->blocks[j / IRIS_KV_BLOCK]);
                return -1;
            }
        }
        for (int j = q->n_computed; j < q->n_computed + q->n_new; j++) {
            /* Images must be ready before their tokens run (the engine's contract, mirrored here). */
            for (int k = 0; k < q->n_images; k++)
                if (j >= q->images[k].start && j < q->images[k].start + q->images[k].n_tokens) q->images[k].ready = 1;
            m->kv[q->blocks[j / IRIS_KV_BLOCK] * IRIS_KV_BLOCK + j % IRIS_KV_BLOCK] = r->fp[j];
        }
    }
    return 0;
}

static void make_req(sim_req *r, int64_t id, uint64_t *rng, int max_prompt, int max_new) {
    int n = 1 + (int)(rng_next(rng) % (uint64_t)max_prompt);
    int32_t *t = malloc(sizeof *t * (size_t)n);
    int family = (int)(rng_next(rng) % 4);  /* shared prefixes: four "system prompts" */
    for (int j = 0; j < n; j++) t[j] = j < 40 ? family * 1000 + j : (int32_t)(rng_next(rng) % 500);
    memset(r, 0, sizeof *r);
    iris_err err;
    iris_seq_init(&r->seq, id, t, n, &err);
    free(t);
    /* Half the requests carry an image (one of three "pictures") at token 8. */
    if (n > 30 && rng_next(rng) % 2) {
        r->img[0].start = 8;
        r->img[0].n_tokens = 4 + (int)(rng_next(rng) % 20);
        int pic = (int)(rng_next(rng) % 3);
        memset(r->img[0].hash.b, 0, 32);
        r->img[0].hash.b[0] = (uint8_t)(pic + 1);
        for (int j = 8; j < 8 + r->img[0].n_tokens; j++) r->seq.tokens[j] = 77;
        r->seq.images = r->img;
        r->seq.n_images = 1;
    }
    r->max_new = 1 + (int)(rng_next(rng) % (uint64_t)max_new);
    r->seq.ud = r;
    fp_extend(r);
}

typedef struct sim_cfg {
    uint64_t seed;
    int n_blocks, max_num_seqs, max_batch_tokens, max_waiting, steps, max_prompt, max_new;
    int caching;
    int cancel_per_mille, arrive_per_mille;
} sim_cfg;

typedef struct sim_out {
    int finished, cancelled, rejected, arrived;
    iris_sched_stats st;
} sim_out;

static void run_sim(const sim_cfg *c, sim_out *o) {
    memset(o, 0, sizeof *o);
    iris_err err = {0};
    sim m = {.n_blocks = c->n_blocks};
    if (iris_kv_pool_init(&m.pool, c->n_blocks, c->caching, &err)) {
        iris_test_fail(__FILE__, __LINE__, "%s", err.msg);
        return;
    }
    iris_sched_opts so = {c->max_num_seqs, c->max_batch_tokens, c->max_waiting, 0};
    iris_sched_init(&m.s, &so, m.pool, &err);
    m.kv = calloc((size_t)c->n_blocks * IRIS_KV_BLOCK, sizeof *m.kv);
    int cap_reqs = c->steps + 8, n_reqs = 0;
    sim_req **reqs = calloc((size_t)cap_reqs, sizeof *reqs);
    uint64_t rng = c->seed;
    iris_sched_batch b = {0};
    int failed = 0;
    for (int step = 0; step < c->steps * 2 && !failed; step++) {
        int arriving = step < c->steps;
        if (!arriving && !iris_sched_busy(&m.s)) break;
        /* Arrivals, in bursts. */
        while (arriving && (int)(rng_next(&rng) % 1000) < c->arrive_per_mille && n_reqs < cap_reqs) {
            sim_req *r = malloc(sizeof *r);
            make_req(r, n_reqs, &rng, c->max_prompt, c->max_new);
            o->arrived++;
            if (iris_sched_add(&m.s, &r->seq, &err)) {
                CHECK_EQ_INT(err.code, IRIS_ELIMIT);
                o->rejected++;
                iris_seq_free(&r->seq);
                free(r->fp);
                free(r);
                continue;
            }
            reqs[n_reqs++] = r;
        }
        /* Cancellations of random live requests. */
        if (n_reqs && (int)(rng_next(&rng) % 1000) < c->cancel_per_mille) {
            sim_req *r = reqs[rng_next(&rng) % (uint64_t)n_reqs];
            if (!r->done) r->seq.cancel = 1;
        }
        if (iris_sched_step(&m.s, &b, &err)) {
            iris_test_fail(__FILE__, __LINE__, "step %d: %s", step, err.msg);
            break;
        }
        CHECKF(b.n_tokens <= c->max_batch_tokens && b.n_seqs <= c->max_num_seqs, "step %d: %d tokens, %d seqs", step,
               b.n_tokens, b.n_seqs);
        for (int i = 0; i < b.n_cancelled; i++) {
            sim_req *r = b.cancelled[i]->ud;
            CHECK(r->seq.status == IRIS_SEQ_FINISHED && r->seq.n_blocks == 0);
            r->done = 1;
            o->cancelled++;
        }
        /* Decodes are never stalled by prompts: every running sequence with one
         * token to go is in the batch. */
        for (int i = 0; i < m.s.n_running; i++) {
            iris_seq *q = m.s.running[i];
            int in = 0;
            for (int k = 0; k < b.n_seqs; k++) in |= b.seqs[k] == q;
            if (q->n_tokens - q->n_computed == 1 && !in) {
                iris_test_fail(__FILE__, __LINE__, "step %d: decode of seq %lld stalled", step, (long long)q->id);
                failed = 1;
            }
        }
        if (iris_sched_check(&m.s, &err)) {
            iris_test_fail(__FILE__, __LINE__, "step %d (after schedule): %s", step, err.msg);
            break;
        }
        if (sim_forward(&m, &b, step)) break;
        iris_sched_commit(&m.s, &b);
        for (int i = 0; i < b.n_seqs; i++) {
            iris_seq *q = b.seqs[i];
            sim_req *r = q->ud;
            if (!q->want_logits) continue;
            iris_seq_append(q, (int32_t)(rng_next(&rng) % 500), &err);
            fp_extend(r);
            if (q->n_tokens - q->n_prompt >= r->max_new) {
                iris_sched_finish(&m.s, q);
                r->done = 1;
                o->finished++;
            }
        }
        if (iris_sched_check(&m.s, &err)) {
            iris_test_fail(__FILE__, __LINE__, "step %d (after commit): %s", step, err.msg);
            break;
        }
    }
    CHECK(!iris_sched_busy(&m.s));
    CHECK_EQ_INT(iris_kv_pool_n_used(m.pool), 0);
    CHECK_EQ_INT(o->finished + o->cancelled + o->rejected, o->arrived);
    for (int i = 0; i < n_reqs; i++) {
        CHECK(reqs[i]->done);
        iris_seq_free(&reqs[i]->seq);
        free(reqs[i]->fp);
        free(reqs[i]);
    }
    o->st = m.s.stats;
    free(reqs);
    free(m.kv);
    iris_sched_batch_free(&b);
    iris_sched_free(&m.s);
    iris_kv_pool_free(m.pool);
}

IRIS_TEST(sched_simulation) {
    /* A tight pool (preemptions), shared prefixes and images (cache hits),
     * cancellations, a small waiting queue (rejections). */
    for (uint64_t seed = 1; seed <= 4; seed++) {
        sim_cfg c = {.seed = seed * 0x2545f4914f6cdd1dull, .n_blocks = 40, .max_num_seqs = 8, .max_batch_tokens = 64,
                     .max_waiting = 12, .steps = 3000, .max_prompt = 120, .max_new = 60, .caching = 1,
                     .cancel_per_mille = 30, .arrive_per_mille = 250};
        sim_out o;
        run_sim(&c, &o);
        CHECKF(o.st.preemptions > 0 && o.st.prefix_hit_tokens > 0 && o.st.images_cached > 0 && o.rejected > 0 &&
                   o.cancelled > 0 && o.finished > 100,
               "seed %llu: %d finished, %d cancelled, %d rejected, %llu preemptions, %llu prefix hits, %llu images "
               "cached", (unsigned long long)seed, o.finished, o.cancelled, o.rejected,
               (unsigned long long)o.st.preemptions, (unsigned long long)o.st.prefix_hit_tokens,
               (unsigned long long)o.st.images_cached);
    }
    /* No prefix caching, a pool with room for one long request, one-token budget per sequence. */
    sim_cfg c = {.seed = 99, .n_blocks = 12, .max_num_seqs = 3, .max_batch_tokens = 3, .max_waiting = 4,
                 .steps = 3000, .max_prompt = 100, .max_new = 80, .caching = 0, .cancel_per_mille = 10,
                 .arrive_per_mille = 100};
    sim_out o;
    run_sim(&c, &o);
    CHECK(o.finished > 10);
    CHECK_EQ_INT(o.st.prefix_hit_tokens, 0);
}

/* A second request with the same prompt and image shares every full block
 * but the last token's; another picture at the same place shares nothing. */
IRIS_TEST(sched_prefix_hit) {
    iris_err err = {0};
    iris_kv_pool *pool;
    REQUIRE(iris_kv_pool_init(&pool, 16, 1, &err) == 0);
    iris_sched s;
    iris_sched_opts so = {4, 256, 8, 0};
    REQUIRE(iris_sched_init(&s, &so, pool, &err) == 0);
    int32_t toks[40];
    for (int j = 0; j < 40; j++) toks[j] = j >= 5 && j < 25 ? 77 : j;
    iris_seq q[3];
    iris_seq_image im[3] = {{.start = 5, .n_tokens = 20}, {.start = 5, .n_tokens = 20}, {.start = 5, .n_tokens = 20}};
    im[0].hash.b[0] = im[1].hash.b[0] = 1;
    im[2].hash.b[0] = 2;
    iris_sched_batch b = {0};
    for (int i = 0; i < 3; i++) {
        REQUIRE(iris_seq_init(&q[i], i, toks, 40, &err) == 0);
        q[i].images = &im[i];
        q[i].n_images = 1;
        REQUIRE(iris_sched_add(&s, &q[i], &err) == 0);
        REQUIRE(iris_sched_step(&s, &b, &err) == 0);
        REQUIRE(b.n_seqs == 1 && b.seqs[0] == &q[i]);
        CHECK_EQ_INT(q[i].n_computed, i == 1 ? 32 : 0);
        CHECK_EQ_INT(q[i].n_new, i == 1 ? 8 : 40);
        CHECK_EQ_INT(q[i].n_cached, i == 1 ? 32 : 0);
        im[i].ready = 1;
        iris_sched_commit(&s, &b);
        CHECK_EQ_INT(iris_sched_check(&s, &err), 0);
        iris_sched_finish(&s, &q[i]);
        CHECK_EQ_INT(iris_sched_check(&s, &err), 0);
    }
    CHECK_EQ_INT(s.stats.images_cached, 1);
    CHECK_EQ_INT(s.stats.prefix_hit_tokens, 32);
    for (int i = 0; i < 3; i++) iris_seq_free(&q[i]);
    iris_sched_batch_free(&b);
    iris_sched_free(&s);
    iris_kv_pool_free(pool);
}

/* Chunked prefill: a long prompt runs in budget-sized chunks beside a decoding
 * sequence, which gets its token every step. */
IRIS_TEST(sched_chunked_prefill) {
    iris_err err = {0};
    iris_kv_pool *pool;
    REQUIRE(iris_kv_pool_init(&pool, 64, 1, &err) == 0);
    iris_sched s;
    iris_sched_opts so = {4, 32, 8, 0};
    REQUIRE(iris_sched_init(&s, &so, pool, &err) == 0);
    int32_t shortp[5] = {1, 2, 3, 4, 5}, longp[300];
    for (int j = 0; j < 300; j++) longp[j] = 1000 + j;
    iris_seq a, l;
    REQUIRE(iris_seq_init(&a, 1, shortp, 5, &err) == 0);
    REQUIRE(iris_seq_init(&l, 2, longp, 300, &err) == 0);
    iris_sched_batch b = {0};
    iris_sched_add(&s, &a, &err);
    iris_sched_step(&s, &b, &err);
    iris_sched_commit(&s, &b);
    iris_seq_append(&a, 9, &err);
    iris_sched_add(&s, &l, &err);
    int steps = 0;
    while (l.n_computed < 300 && steps < 100) {
        REQUIRE(iris_sched_step(&s, &b, &err) == 0);
        REQUIRE(b.n_seqs == 2);
        CHECK(b.seqs[0] == &a && a.n_new == 1);
        CHECK(b.seqs[1] == &l && l.n_new == (300 - l.n_computed < 31 ? 300 - l.n_computed : 31));
        CHECK_EQ_INT(l.want_logits, l.n_computed + l.n_new == 300);
        iris_sched_commit(&s, &b);
        iris_seq_append(&a, 9, &err);
        CHECK_EQ_INT(iris_sched_check(&s, &err), 0);
        steps++;
    }
    CHECK_EQ_INT(steps, 10); /* ceil(300 / 31) */
    iris_sched_finish(&s, &a);
    iris_sched_finish(&s, &l);
    CHECK_EQ_INT(iris_kv_pool_n_used(pool), 0);
    iris_seq_free(&a);
    iris_seq_free(&l);
    iris_sched_batch_free(&b);
    iris_sched_free(&s);
    iris_kv_pool_free(pool);
}

/* The encoder budget: a step's chunks reach at most max_batch_tokens image tokens to encode.  Two
 * prompts of 10 text tokens and a 100-token image, a 150-token budget: the first runs whole, the
 * second only up to its image (its text), and its image comes in the next step, beside the first's
 * decode; an image over the whole budget still goes when it is the step's first. */
IRIS_TEST(sched_encoder_budget) {
    iris_err err = {0};
    iris_kv_pool *pool;
    REQUIRE(iris_kv_pool_init(&pool, 64, 0, &err) == 0);
    iris_sched s;
    iris_sched_opts so = {4, 150, 8, 0};
    REQUIRE(iris_sched_init(&s, &so, pool, &err) == 0);
    int32_t toks[300];
    for (int j = 0; j < 300; j++) toks[j] = j;
    iris_seq q[3];
    iris_seq_image im[3] = {{.start = 10, .n_tokens = 100}, {.start = 10, .n_tokens = 100},
                            {.start = 0, .n_tokens = 200}};
    int len[3] = {112, 112, 202};
    iris_sched_batch b = {0};
    for (int i = 0; i < 3; i++) {
        im[i].hash.b[0] = (unsigned char)(i + 1);
        REQUIRE(iris_seq_init(&q[i], i, toks, len[i], &err) == 0);
        q[i].images = &im[i];
        q[i].n_images = 1;
    }
    REQUIRE(iris_sched_add(&s, &q[0], &err) == 0 && iris_sched_add(&s, &q[1], &err) == 0);
    REQUIRE(iris_sched_step(&s, &b, &err) == 0);
    REQUIRE(b.n_seqs == 2);
    CHECK_EQ_INT(q[0].n_new, 112);
    CHECK_EQ_INT(q[1].n_new, 10);   /* 38 tokens of budget left, but its image is over the encoder's */
    CHECK_EQ_INT(b.n_encoder, 100);
    im[0].ready = 1;
    iris_sched_commit(&s, &b);
    CHECK_EQ_INT(iris_sched_check(&s, &err), 0);
    REQUIRE(iris_seq_append(&q[0], 7, &err) == 0);
    REQUIRE(iris_sched_step(&s, &b, &err) == 0);
    REQUIRE(b.n_seqs == 2 && b.seqs[0] == &q[0]);
    CHECK_EQ_INT(q[0].n_new, 1);    /* the decode first */
    CHECK_EQ_INT(q[1].n_new, 102);
    CHECK_EQ_INT(b.n_encoder, 100);
    im[1].ready = 1;
    iris_sched_commit(&s, &b);
    iris_sched_finish(&s, &q[0]);
    iris_sched_finish(&s, &q[1]);
    /* an image of 200 tokens over a 150-token budget: alone, in chunks */
    REQUIRE(iris_sched_add(&s, &q[2], &err) == 0);
    REQUIRE(iris_sched_step(&s, &b, &err) == 0);
    REQUIRE(b.n_seqs == 1);
    CHECK_EQ_INT(q[2].n_new, 150);
    CHECK_EQ_INT(b.n_encoder, 200);
    iris_sched_commit(&s, &b);
    CHECK_EQ_INT(iris_sched_check(&s, &err), 0);
    for (int i = 0; i < 3; i++) iris_seq_free(&q[i]);
    iris_sched_batch_free(&b);
    iris_sched_free(&s);
    iris_kv_pool_free(pool);
}
