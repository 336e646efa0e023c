/* test_engine.c: the engine on the CPU with the tiny-gqa fixture (a real
 * Qwen3-VL checkpoint and tokenizer): concurrent requests give each the
 * output it gets alone with the same seed (with and without preemption), a
 * repeated image is served from the prefix cache without the vision
 * encoder, cancellation frees blocks, the queue is bounded, stop strings,
 * callbacks and bad requests. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "engine/engine.h"
#include "iris.h"
#include "engine/prompt.h"
#include "test.h"

#define TINY_MODEL "tests/fixtures/tiny/tiny-gqa/model"
#define MAXTOK 64

typedef struct job {
    const char *text;
    const char *image;       /* NULL: text only */
    int64_t seed;
    int greedy, max_tokens;
    /* results */
    int tokens[MAXTOK], n_tokens, finish, cached;
    char out[1024];
} job;

static job JOBS[] = {
    {"Describe the picture.", "tests/fixtures/tiny/images/a.png", 11, 0, 24, {0}, 0, 0, 0, ""},
    {"What is this?", "tests/fixtures/tiny/images/b.png", 12, 1, 20, {0}, 0, 0, 0, ""},
    {"Tell me a story about a cat and a dog who live in a small house by the sea.", NULL, 13, 0, 30, {0}, 0, 0, 0, ""},
    {"Describe the picture.", "tests/fixtures/tiny/images/a.png", 14, 0, 16, {0}, 0, 0, 0, ""},
    {"hi", NULL, 15, 1, 12, {0}, 0, 0, 0, ""},
    {"Compare.", "tests/fixtures/tiny/images/c.png", 16, 0, 28, {0}, 0, 0, 0, ""},
    {"Describe the picture.", "tests/fixtures/tiny/images/a.png", 11, 0, 24, {0}, 0, 0, 0, ""},
};
#define N_JOBS ((int)(sizeof JOBS / sizeof JOBS[0]))

static int g_worker;  /* engine_vision_worker: open_engine's engines run the vision worker */

static iris_engine *open_engine(int kv_blocks, int max_num_seqs, int max_batch_tokens, int caching, int max_waiting) {
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    if (g_worker) o.vision_worker = 1;
    o.model = TINY_MODEL;
    o.kv_blocks = kv_blocks;
    o.max_num_seqs = max_num_seqs;
    o.max_batch_tokens = max_batch_tokens;
    o.prefix_caching = caching;
    if (max_waiting) o.max_waiting = max_waiting;
    iris_engine *e = NULL;
    iris_err err = {0};
    if (iris_engine_open(&o, &e, &err)) iris_test_fail(__FILE__, __LINE__, "engine open: %s", err.msg);
    return e;
}

/* The stats once every request seen has had its DONE event: the engine publishes them
 * before it sends each DONE, so they are final then (no waiting for the step to end). */
static void idle_stats(iris_engine *e, iris_engine_stats *st) {
    iris_engine_get_stats(e, st);
    CHECKF(st->n_running + st->n_waiting == 0, "%d running, %d waiting after the last DONE", st->n_running,
           st->n_waiting);
}

static char *messages_for(const job *j) {
    static char buf[N_JOBS + 1][512];
    static int at;
    char *m = buf[at++ % (N_JOBS + 1)];
    if (j->image)
        snprintf(m, 512, "[{\"role\":\"user\",\"content\":[{\"type\":\"image\"},{\"type\":\"text\",\"text\":\"%s\"}]}]",
                 j->text);
    else
        snprintf(m, 512, "[{\"role\":\"user\",\"content\":\"%s\"}]", j->text);
    return m;
}

static int submit(iris_engine *e, const job *j, iris_request **r, iris_err *err) {
    iris_request_params p;
    iris_request_params_default(e, &p);
    p.messages_json = messages_for(j);
    p.image_paths = &j->image;
    p.n_images = j->image ? 1 : 0;
    p.sampling.seed = j->seed;
    p.sampling.max_tokens = j->max_tokens;
    p.sampling.ignore_eos = 1;  /* a random tiny model: full-length outputs compare more tokens */
    if (j->greedy) p.sampling.do_sample = 0, p.sampling.temperature = 0;
    else p.sampling.do_sample = 1, p.sampling.temperature = 1.0f, p.sampling.top_k = 0, p.sampling.top_p = 1.0f;
    return iris_engine_submit(e, &p, r, err);
}

static void collect(iris_request *r, job *j) {
    j->n_tokens = 0;
    j->out[0] = 0;
    size_t o = 0;
    iris_event ev;
    while (iris_request_next(r, &ev, 60000) == IRIS_OK) {
        if (ev.text_len && o + ev.text_len < sizeof j->out) memcpy(j->out + o, ev.text, ev.text_len), o += ev.text_len;
        j->out[o] = 0;
        if (ev.kind == IRIS_EVENT_DONE) {
            j->finish = ev.finish_reason;
            j->cached = ev.usage.cached_tokens;
            CHECK_EQ_INT(ev.usage.completion_tokens, j->n_tokens);
            break;
        }
        if (j->n_tokens < MAXTOK) j->tokens[j->n_tokens++] = ev.token;
    }
}

/* Each job alone, on an engine without prefix caching. */
static void run_alone(job *ref) {
    iris_engine *e = open_engine(64, 4, 256, 0, 0);
    if (!e) return;
    for (int i = 0; i < N_JOBS; i++) {
        ref[i] = JOBS[i];
        iris_request *r;
        iris_err err = {0};
        if (submit(e, &ref[i], &r, &err)) {
            iris_test_fail(__FILE__, __LINE__, "job %d: %s", i, err.msg);
            continue;
        }
        collect(r, &ref[i]);
        iris_request_free(r);
        CHECK_EQ_INT(ref[i].finish, IRIS_FINISH_REASON_LENGTH);
        CHECK_EQ_INT(ref[i].n_tokens, ref[i].max_tokens);
    }
    iris_engine_close(e);
}

static void run_together(iris_engine *e, job *got) {
    iris_request *r[N_JOBS] = {0};
    for (int i = 0; i < N_JOBS; i++) {
        got[i] = JOBS[i];
        iris_err err = {0};
        if (submit(e, &got[i], &r[i], &err)) iris_test_fail(__FILE__, __LINE__, "job %d: %s", i, err.msg);
    }
    for (int i = 0; i < N_JOBS; i++)
        if (r[i]) collect(r[i], &got[i]), iris_request_free(r[i]);
}

static void compare(const job *ref, const job *got, const char *what) {
    for (int i = 0; i < N_JOBS; i++) {
        CHECKF(got[i].n_tokens == ref[i].n_tokens && !memcmp(got[i].tokens, ref[i].tokens, sizeof(int) * ref[i].n_tokens),
               "%s: job %d differs from its run alone (%d vs %d tokens)", what, i, got[i].n_tokens, ref[i].n_tokens);
        CHECK_STR(got[i].out, ref[i].out);
    }
}

IRIS_TEST(engine_concurrent_equals_alone) {
    job ref[N_JOBS], got[N_JOBS];
    run_alone(ref);
    /* Sampled jobs with different seeds differ; the same job twice does not. */
    CHECK(memcmp(ref[0].tokens, ref[3].tokens, sizeof(int) * 16));
    CHECK(!memcmp(ref[0].tokens, ref[6].tokens, sizeof(int) * 24));
    /* All at once, prompts chunked by a 48-token budget, prefix caching on. */
    iris_engine *e = open_engine(256, 8, 48, 1, 0);
    REQUIRE(e);
    run_together(e, got);
    compare(ref, got, "concurrent");
    iris_engine_stats st;
    idle_stats(e, &st);
    CHECK_EQ_INT(st.requests_finished, N_JOBS);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK(st.preemptions == 0);
    iris_engine_close(e);

    /* A pool far too small for all of them: preemption and recomputation. */
    e = open_engine(14, 8, 48, 1, 0);
    REQUIRE(e);
    run_together(e, got);
    compare(ref, got, "preempted");
    idle_stats(e, &st);
    CHECKF(st.preemptions > 0, "no preemption with 14 blocks");
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    iris_engine_close(e);
}

/* The vision worker (on the CPU when asked): concurrent image requests get what each gets alone, with
 * their images encoded beside the steps (with and without preemption); a lone request is encoded
 * before its step; requests cancelled with their images in the worker's hands finish cleanly. */
IRIS_TEST(engine_vision_worker) {
    job ref[N_JOBS], got[N_JOBS];
    run_alone(ref);
    g_worker = 1;
    iris_engine_stats st;
    for (int pass = 0; pass < 2; pass++) {
        iris_engine *e = open_engine(pass ? 14 : 256, 8, 48, 1, 0);
        if (!e) break;
        run_together(e, got);
        compare(ref, got, pass ? "worker, preempted" : "worker");
        idle_stats(e, &st);
        CHECK_EQ_INT(st.requests_finished, N_JOBS);
        CHECK_EQ_INT(st.kv_blocks_used, 0);
        /* five image jobs, three of the same picture: at least the others' go to the worker */
        CHECKF(st.images_ahead >= 2 && st.images_ahead <= st.images_encoded, "%llu of %llu images by the worker",
               (unsigned long long)st.images_ahead, (unsigned long long)st.images_encoded);
        CHECK(st.worker_s > 0);
        if (pass) CHECKF(st.preemptions > 0, "no preemption with 14 blocks");
        iris_engine_close(e);
    }
    /* One request alone: its image is encoded before its step, not handed over. */
    iris_engine *e = open_engine(64, 4, 256, 1, 0);
    REQUIRE(e);
    job one = JOBS[1];
    iris_request *r;
    iris_err err = {0};
    REQUIRE(submit(e, &one, &r, &err) == 0);
    collect(r, &one);
    iris_request_free(r);
    CHECK(one.n_tokens == ref[1].n_tokens && !memcmp(one.tokens, ref[1].tokens, sizeof(int) * ref[1].n_tokens));
    idle_stats(e, &st);
    CHECK_EQ_INT(st.images_encoded, 1);
    CHECK_EQ_INT(st.images_ahead, 0);
    /* A long text request runs; image requests behind it are cancelled at once, whether queued,
     * encoding or encoded. */
    job t = JOBS[2];
    t.max_tokens = 1000;
    iris_request *rs[7] = {0};
    REQUIRE(submit(e, &t, &rs[0], &err) == 0);
    iris_event ev;
    CHECK_EQ_INT(iris_request_next(rs[0], &ev, 60000), IRIS_OK);
    const char *imgs[3] = {"tests/fixtures/tiny/images/a.png", "tests/fixtures/tiny/images/b.png",
                           "tests/fixtures/tiny/images/c.png"};
    for (int i = 1; i < 7; i++) {
        job k = JOBS[1];
        k.image = imgs[i % 3];
        k.seed = 100 + i;  /* distinct prompts would not matter: nothing is cached before a block fills */
        if (submit(e, &k, &rs[i], &err)) iris_test_fail(__FILE__, __LINE__, "job %d: %s", i, err.msg);
    }
    for (int i = 6; i >= 0; i--) iris_request_cancel(rs[i]);
    for (int i = 0; i < 7; i++) {
        if (!rs[i]) continue;
        int done = 0;
        while (iris_request_next(rs[i], &ev, 60000) == IRIS_OK)
            if (ev.kind == IRIS_EVENT_DONE) {
                CHECKF(ev.finish_reason == IRIS_FINISH_REASON_CANCELLED || ev.finish_reason == IRIS_FINISH_REASON_LENGTH,
                       "request %d: finish reason %d", i, ev.finish_reason);
                done = 1;
                break;
            }
        CHECK(done);
        iris_request_free(rs[i]);
    }
    idle_stats(e, &st);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    iris_engine_close(e);
    g_worker = 0;
}

IRIS_TEST(engine_prefix_cache_hit) {
    iris_engine *e = open_engine(64, 4, 256, 1, 0);
    REQUIRE(e);
    job a = JOBS[0], b = JOBS[0];
    iris_request *r;
    iris_err err = {0};
    iris_engine_stats s0, s1, s2;
    REQUIRE(submit(e, &a, &r, &err) == 0);
    collect(r, &a);
    iris_request_free(r);
    idle_stats(e, &s0);
    CHECK_EQ_INT(s0.images_encoded, 1);
    CHECK_EQ_INT(a.cached, 0);
    REQUIRE(submit(e, &b, &r, &err) == 0);
    collect(r, &b);
    iris_request_free(r);
    idle_stats(e, &s1);
    /* The vision encoder did not run again; only the tail of the prompt was prefilled. */
    CHECK_EQ_INT(s1.images_encoded, 1);
    CHECK_EQ_INT(s1.images_cached, 1);
    CHECK(b.cached > 0);
    CHECKF(s1.prefill_tokens - s0.prefill_tokens < s0.prefill_tokens / 2, "prefilled %llu then %llu",
           (unsigned long long)s0.prefill_tokens, (unsigned long long)(s1.prefill_tokens - s0.prefill_tokens));
    CHECK(b.n_tokens == a.n_tokens && !memcmp(a.tokens, b.tokens, sizeof(int) * a.n_tokens));
    /* Another picture with the same text shares nothing of the image. */
    job c = JOBS[0];
    c.image = "tests/fixtures/tiny/images/b.png";
    REQUIRE(submit(e, &c, &r, &err) == 0);
    collect(r, &c);
    iris_request_free(r);
    idle_stats(e, &s2);
    CHECK_EQ_INT(s2.images_encoded, 2);
    CHECK(c.cached < b.cached);
    /* Prompts built by the caller without image keys: the engine keys each image by its pixel rows
     * (c.png encoded once, then found in the cache; a.png again, its key being of other bytes than
     * the prompt-built one above, and not mistaken for c.png). */
    const char *imgs[3] = {"tests/fixtures/tiny/images/c.png", "tests/fixtures/tiny/images/c.png",
                           "tests/fixtures/tiny/images/a.png"};
    const int encoded[3] = {3, 3, 4};
    for (int k = 0; k < 3; k++) {
        iris_prompt *pr = calloc(1, sizeof *pr);
        json_error_t je;
        json_t *msgs = json_loads(messages_for(&JOBS[0]), 0, &je);
        REQUIRE(pr && msgs);
        iris_prompt_ctx ctx;
        iris_engine_prompt_ctx(e, &ctx);
        iris_prompt_image im = {.path = imgs[k]};
        REQUIRE(iris_prompt_build(&ctx, msgs, &im, 1, pr, NULL, &err) == 0);
        json_decref(msgs);
        CHECK(pr->image_keys != NULL);
        free(pr->image_keys);
        pr->image_keys = NULL;
        iris_request_params p;
        iris_request_params_default(e, &p);
        p.prompt = pr;
        p.sampling.max_tokens = 4;
        p.sampling.do_sample = 0;
        job d = JOBS[0];
        REQUIRE(iris_engine_submit(e, &p, &r, &err) == 0);
        collect(r, &d);
        iris_request_free(r);
        iris_prompt_free(pr);
        free(pr);
        iris_engine_stats s3;
        idle_stats(e, &s3);
        CHECKF(s3.images_encoded == (uint64_t)encoded[k], "keyless prompt %d: %llu images encoded, want %d", k,
               (unsigned long long)s3.images_encoded, encoded[k]);
        if (k == 1) CHECK(d.cached > 0);
    }
    iris_engine_close(e);
}

IRIS_TEST(engine_cancel_and_queue) {
    iris_engine *e = open_engine(64, 1, 64, 1, 2);
    REQUIRE(e);
    job j = JOBS[2];
    j.max_tokens = 1000;
    iris_request *r[5] = {0};
    iris_err err = {0};
    int accepted = 0, rejected = 0;
    for (int i = 0; i < 5; i++) {
        int rc = submit(e, &j, &r[i], &err);
        if (rc == 0) accepted++;
        else {
            CHECK_EQ_INT(rc, IRIS_ELIMIT);
            CHECK_CONTAINS(err.msg, "queue is full");
            rejected++;
        }
    }
    CHECK(accepted >= 2 && accepted <= 3);
    CHECK(rejected >= 2);
    /* Let the first stream a little, then cancel everything. */
    iris_event ev;
    for (int k = 0; k < 3; k++) CHECK_EQ_INT(iris_request_next(r[0], &ev, 60000), IRIS_OK);
    for (int i = 0; i < 5; i++) iris_request_cancel(r[i]);
    for (int i = 0; i < 5; i++) {
        if (!r[i]) continue;
        int done = 0;
        while (iris_request_next(r[i], &ev, 60000) == IRIS_OK)
            if (ev.kind == IRIS_EVENT_DONE) {
                CHECK_EQ_INT(ev.finish_reason, IRIS_FINISH_REASON_CANCELLED);
                CHECK(ev.usage.completion_tokens < 1000);
                done = 1;
                break;
            }
        CHECK(done);
        CHECK_EQ_INT(iris_request_next(r[i], &ev, 0), IRIS_EINVAL);  /* nothing after DONE */
        iris_request_free(r[i]);
    }
    iris_engine_stats st;
    idle_stats(e, &st);
    CHECK_EQ_INT(st.kv_blocks_used, 0);
    CHECK_EQ_INT(st.n_running + st.n_waiting, 0);
    iris_engine_shutdown(e);
    CHECK_EQ_INT(submit(e, &JOBS[4], &r[0], &err), IRIS_ECANCELLED);
    iris_engine_close(e);
}

typedef struct cb_state {
    pthread_mutex_t mu;
    int n_delta, done, finish;
    char text[1024];
    iris_engine *e;
    iris_engine_stats at_done;  /* the stats as the DONE event came */
} cb_state;

static void on_event(void *ud, const iris_event *ev) {
    cb_state *s = ud;
    pthread_mutex_lock(&s->mu);
    size_t o = strlen(s->text);
    if (ev->text_len && o + ev->text_len < sizeof s->text) memcpy(s->text + o, ev->text, ev->text_len), s->text[o + ev->text_len] = 0;
    if (ev->kind == IRIS_EVENT_DELTA) s->n_delta++;
    else s->done = 1, s->finish = ev->finish_reason;
    if (ev->kind == IRIS_EVENT_DONE && s->e) iris_engine_get_stats(s->e, &s->at_done);
    pthread_mutex_unlock(&s->mu);
}

IRIS_TEST(engine_stop_strings_and_callback) {
    iris_engine *e = open_engine(64, 4, 256, 1, 0);
    REQUIRE(e);
    job a = JOBS[4];
    a.max_tokens = 40;
    iris_request *r;
    iris_err err = {0};
    REQUIRE(submit(e, &a, &r, &err) == 0);
    collect(r, &a);
    iris_request_free(r);
    size_t n = strlen(a.out);
    REQUIRE(n > 12);
    /* Stop on a piece of the middle of that text: the same request ends just before it. */
    char stop[5];
    memcpy(stop, a.out + n / 2, 4);
    stop[4] = 0;
    const char *first = strstr(a.out, stop);
    REQUIRE(first);
    iris_request_params p;
    iris_request_params_default(e, &p);
    p.messages_json = messages_for(&a);
    p.sampling.seed = a.seed;
    p.sampling.max_tokens = a.max_tokens;
    p.sampling.ignore_eos = 1;
    p.sampling.do_sample = 0, p.sampling.temperature = 0;
    p.sampling.stop[0] = stop;
    p.sampling.n_stop = 1;
    cb_state s = {.mu = PTHREAD_MUTEX_INITIALIZER, .e = e};
    p.on_event = on_event;
    p.ud = &s;
    REQUIRE(iris_engine_submit(e, &p, &r, &err) == 0);
    iris_engine_shutdown(e);  /* drains: the request finishes before this returns */
    CHECK(s.done);
    /* The stats were published before the DONE event left (mid-step): the request is
     * counted and no longer running, its blocks are free (a /metrics read after an answer). */
    CHECK_EQ_INT(s.at_done.requests_finished, 2);
    CHECK_EQ_INT(s.at_done.n_running + s.at_done.n_waiting, 0);
    CHECK_EQ_INT(s.at_done.kv_blocks_used, 0);
    CHECK_EQ_INT(s.finish, IRIS_FINISH_REASON_STOP);
    CHECK_EQ_INT(strlen(s.text), (size_t)(first - a.out));
    CHECK(!strncmp(s.text, a.out, (size_t)(first - a.out)));
    CHECK(s.n_delta < a.n_tokens);
    iris_request_free(r);
    iris_engine_close(e);
}

IRIS_TEST(engine_bad_requests) {
    iris_engine *e = open_engine(4, 2, 64, 1, 0);  /* 64 tokens of KV cache */
    REQUIRE(e);
    iris_request_params p;
    iris_request *r;
    iris_err err = {0};
    iris_request_params_default(e, &p);
    CHECK_EQ_INT(iris_engine_submit(e, &p, &r, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "exactly one");
    p.messages_json = "[{\"role\": \"user\", ";
    CHECK_EQ_INT(iris_engine_submit(e, &p, &r, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "invalid JSON");
    p.messages_json = NULL;
    char longp[2000];
    for (int i = 0; i < 1999; i++) longp[i] = i % 5 ? 'a' + i % 26 : ' ';
    longp[1999] = 0;
    p.prompt_text = longp;
    CHECK_EQ_INT(iris_engine_submit(e, &p, &r, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "KV cache tokens");
    CHECK_CONTAINS(err.msg, "the context of this model is 64 tokens");
    CHECK_STR(err.param, "prompt");   /* the server's 400 names the prompt (messages) */
    p.prompt_text = "hello";
    p.sampling.max_tokens = 1 << 24;  /* beyond any context */
    CHECK_EQ_INT(iris_engine_submit(e, &p, &r, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "max_tokens 16777216");
    CHECK_STR(err.param, "max_tokens");
    p.sampling.max_tokens = 0;
    p.sampling.temperature = -1;
    CHECK_EQ_INT(iris_engine_submit(e, &p, &r, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "temperature");
    p.sampling.temperature = 0;
    p.sampling.top_logprobs = 99;
    CHECK_EQ_INT(iris_engine_submit(e, &p, &r, &err), IRIS_EINVAL);
    /* A plain-text prompt runs; max_tokens 0 runs to the end of the cache. */
    p.sampling.top_logprobs = 3;
    p.sampling.ignore_eos = 1;
    REQUIRE(iris_engine_submit(e, &p, &r, &err) == 0);
    iris_event ev;
    int n = 0, fin = 0;
    while (iris_request_next(r, &ev, 60000) == IRIS_OK) {
        if (ev.kind == IRIS_EVENT_DONE) {
            fin = ev.finish_reason;
            CHECK_EQ_INT(ev.usage.prompt_tokens + ev.usage.completion_tokens, 64);
            break;
        }
        CHECK_EQ_INT(ev.n_top, 3);
        CHECK(ev.logprob <= 0 && ev.top_ids[0] >= 0);
        n++;
    }
    CHECK_EQ_INT(fin, IRIS_FINISH_REASON_LENGTH);
    CHECK(n > 0);
    iris_request_free(r);
    iris_engine_close(e);

    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = "tests/fixtures/tiny/no-such-model";
    iris_engine *bad = NULL;
    CHECK(iris_engine_open(&o, &bad, &err) != 0 && !bad);
    CHECK_CONTAINS(err.msg, "no-such-model");
    o.model = TINY_MODEL;
    o.device = "tpu";
    CHECK_EQ_INT(iris_engine_open(&o, &bad, &err), IRIS_EINVAL);
    o.device = NULL;
    o.dense_weights = "always";
    CHECK_EQ_INT(iris_engine_open(&o, &bad, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "--dense-weights 'always'");
}

/* The whole pipeline through the engine (chat template, tokenizer, image
 * preprocessing, vision, chunked batched prefill, decode) against
 * transformers' greedy generation (tests/fixtures/tiny/manifest.json): the
 * four scenarios of all three tiny models at once with a 24-token step
 * budget.  A token may differ only where the reference's top-2 margin is a
 * near-tie (< 1e-3); the rest of that sequence is then not compared. */
#include <jansson.h>

IRIS_TEST(engine_greedy_matches_transformers) {
    static const char *models[] = {"tiny-gqa", "tiny-mqa", "tiny-fp8"};
    static const char *scen[] = {"text", "image", "two_images", "multi_turn"};
    json_error_t je;
    json_t *man = json_load_file("tests/fixtures/tiny/manifest.json", 0, &je);
    REQUIRE(man);
    for (int mi = 0; mi < 3; mi++) {
        iris_engine_opts o;
        iris_engine_opts_default(&o);
        char dir[256];
        snprintf(dir, sizeof dir, "tests/fixtures/tiny/%s/model", models[mi]);
        o.model = dir;
        o.kv_blocks = 64;
        o.max_num_seqs = 4;
        o.max_batch_tokens = 24;
        iris_engine *e = NULL;
        iris_err err = {0};
        REQUIRE(iris_engine_open(&o, &e, &err) == 0);
        iris_request *r[4] = {0};
        json_t *ref[4];
        for (int si = 0; si < 4; si++) {
            json_t *sc = json_object_get(json_object_get(man, "scenarios"), scen[si]);
            ref[si] = json_object_get(json_object_get(json_object_get(json_object_get(man, "models"), models[mi]),
                                                      "scenarios"), scen[si]);
            char *msgs = json_dumps(json_object_get(sc, "messages"), 0);
            json_t *imgs = json_object_get(sc, "images");
            char paths[4][128];
            const char *pp[4];
            int ni = (int)json_array_size(imgs);
            for (int k = 0; k < ni && k < 4; k++) {
                snprintf(paths[k], sizeof paths[k], "tests/fixtures/tiny/images/%s",
                         json_string_value(json_array_get(imgs, (size_t)k)));
                pp[k] = paths[k];
            }
            iris_request_params p;
            iris_request_params_default(e, &p);
            p.messages_json = msgs;
            p.image_paths = pp;
            p.n_images = ni;
            p.sampling.do_sample = 0, p.sampling.temperature = 0;
            p.sampling.max_tokens = 24;
            p.sampling.ignore_eos = 1;
            if (iris_engine_submit(e, &p, &r[si], &err))
                iris_test_fail(__FILE__, __LINE__, "%s/%s: %s", models[mi], scen[si], err.msg);
            free(msgs);
        }
        for (int si = 0; si < 4; si++) {
            if (!r[si]) continue;
            json_t *greedy = json_object_get(ref[si], "greedy"), *margins = json_object_get(ref[si], "greedy_margins");
            iris_event ev;
            int g = 0, diverged = 0;
            CHECK_EQ_INT(json_integer_value(json_object_get(ref[si], "n_tokens")) > 0, 1);
            while (iris_request_next(r[si], &ev, 60000) == IRIS_OK && ev.kind == IRIS_EVENT_DELTA) {
                int want = (int)json_integer_value(json_array_get(greedy, (size_t)g));
                if (!diverged && ev.token != want) {
                    double margin = json_real_value(json_array_get(margins, (size_t)g));
                    CHECKF(margin < 1e-3, "%s/%s: greedy token %d is %d, transformers %d (margin %g)", models[mi],
                           scen[si], g, ev.token, want, margin);
                    diverged = 1;
                }
                g++;
            }
            CHECK_EQ_INT(ev.kind, IRIS_EVENT_DONE);
            CHECK_EQ_INT(ev.usage.prompt_tokens, json_integer_value(json_object_get(ref[si], "n_tokens")));
            CHECK_EQ_INT(g, 24);
            iris_request_free(r[si]);
        }
        iris_engine_close(e);
    }
    json_decref(man);
}

/* `iris run` streams what the engine generates for the same request. */
IRIS_TEST(engine_cli_run) {
    job j = {"hi", NULL, 5, 1, 10, {0}, 0, 0, 0, ""};
    iris_engine *e = open_engine(64, 1, 256, 1, 0);
    REQUIRE(e);
    iris_request_params p;
    iris_request_params_default(e, &p);
    p.messages_json = messages_for(&j);
    p.sampling.do_sample = 0, p.sampling.temperature = 0;
    p.sampling.max_tokens = j.max_tokens;
    iris_request *r;
    iris_err err = {0};
    REQUIRE(iris_engine_submit(e, &p, &r, &err) == 0);
    collect(r, &j);
    iris_request_free(r);
    iris_engine_close(e);
    CHECK(strlen(j.out) > 0);
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    char cmd[512], out[2048];
    snprintf(cmd, sizeof cmd, "%s run " TINY_MODEL " --temperature 0 --max-tokens 10 hi 2>/dev/null", bin);
    FILE *f = popen(cmd, "r");
    REQUIRE(f);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    CHECK_EQ_INT(pclose(f), 0);
    REQUIRE(n > 0 && out[n - 1] == '\n');
    out[n - 1] = 0;
    CHECK_STR(out, j.out);
}
