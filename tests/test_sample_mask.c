/* test_sample_mask.c: constrained rows' token masks applied where the candidates are chosen
 * (backend.h get_topk's mask, engine/runner.c), on the CPU:
 *   - the CPU backend's get_topk against a brute-force selection, masked and free rows in one
 *     call (one allowed token, all, only the last partial word, none, random);
 *   - a grammar sampler drawing from its masked row's candidates (iris_sampler_sample_top) picks
 *     what it picks from the whole row (iris_sampler_sample), greedy and seeded top-k, and refuses
 *     candidates its mask does not allow;
 *   - the runner asks for the masks once a step and returns the masked rows' candidates;
 *   - the engine: constrained requests give the same tokens through the masked candidates as
 *     through whole rows (logprobs), and their output parses.
 * The CUDA kernel is checked against the CPU one in tests/test_ops_sample.c (GPU machine). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "err.h"
#include "engine/runner.h"
#include "formats/tokenizer.h"
#include "model/grammar.h"
#include "model/sampler.h"
#include "clock.h"
#include "test.h"

#define TINY_MODEL "tests/fixtures/tiny/tiny-gqa/model"
#define TINY_END 482   /* <|im_end|> */

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},\"ok\":{\"type\":\"boolean\"}},"
    "\"required\":[\"name\",\"n\"],\"additionalProperties\":false}";

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static int allowed(const uint32_t *m, int64_t c) { return !m || ((m[c >> 5] >> (c & 31)) & 1u); }

/* The k best allowed columns of x[cols] (value desc, lowest column first, NaN as -inf), padded
 * with -1 / -inf: what get_topk promises. */
static void brute_topk(const float *x, int64_t cols, const uint32_t *m, int k, int32_t *ids, float *vals) {
    for (int j = 0; j < k; j++) {
        int64_t best = -1;
        float bv = -INFINITY;
        for (int64_t c = 0; c < cols; c++) {
            if (!allowed(m, c)) continue;
            int taken = 0;
            for (int i = 0; i < j && !taken; i++) taken = ids[i] == c;
            if (taken) continue;
            float v = isnan(x[c]) ? -INFINITY : x[c];
            if (best < 0 || v > bv) best = c, bv = v;
        }
        ids[j] = (int32_t)best, vals[j] = best < 0 ? -INFINITY : bv;
    }
}

IRIS_TEST(sample_mask_cpu_topk) {
    iris_backend *b = NULL;
    iris_err err = {0};
    REQUIRE(iris_backend_cpu_open(&b, &err) == 0);
    const int64_t shapes[][2] = {{7, 151936}, {14, 4099}, {7, 77}, {7, 33}};
    const int ks[] = {9, 28, 64, 1};
    for (int si = 0; si < 4; si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1], words = (cols + 31) / 32 + 1;
        int k = ks[si] < cols ? ks[si] : (int)cols;
        float *x = malloc(sizeof(float) * (size_t)(rows * cols));
        uint32_t *bits = calloc((size_t)(rows * words), 4);
        int32_t *slot = malloc(sizeof(int32_t) * (size_t)rows), *ids = malloc(sizeof(int32_t) * (size_t)(rows * k));
        float *vals = malloc(sizeof(float) * (size_t)(rows * k));
        int32_t want_i[64];
        float want_v[64];
        REQUIRE(x && bits && slot && ids && vals);
        for (int64_t i = 0; i < rows * cols; i++) {
            uint32_t z = rnd() % 97;
            x[i] = z == 0 ? -INFINITY : z == 1 ? NAN : (float)(rnd() % 64) / 8.0f; /* many ties */
        }
        for (int64_t r = 0; r < rows; r++) {
            uint32_t *w = bits + r * words;
            int kind = (int)(r % 7);
            slot[r] = kind == 6 ? -1 : (int32_t)r;
            if (kind == 0) for (int64_t i = 0; i < words; i++) w[i] = rnd();
            if (kind == 1) { int64_t c = rnd() % cols; w[c >> 5] |= 1u << (c & 31); }
            if (kind == 2) for (int64_t i = 0; i < words; i++) w[i] = ~0u;
            if (kind == 3) w[(cols - 1) >> 5] = ~0u, w[(cols - 1) / 32 + 1] = ~0u;  /* past the columns: ignored */
            if (kind == 5) for (int i = 0; i < 5; i++) { int64_t c = rnd() % cols; w[c >> 5] |= 1u << (c & 31); }
        }
        iris_tensor t = {.data = x, .dtype = IRIS_DT_F32, .rows = rows, .cols = cols};
        iris_topk_mask m = {.slot = slot, .bits = bits, .words = words};
        CHECKF(b->get_topk(b, &t, k, &m, ids, vals) == 0, "%s", b->err.msg);
        for (int64_t r = 0; r < rows; r++) {
            brute_topk(x + r * cols, cols, slot[r] >= 0 ? bits + r * words : NULL, k, want_i, want_v);
            for (int j = 0; j < k; j++)
                CHECKF(ids[r * k + j] == want_i[j] && (vals[r * k + j] == want_v[j]),
                       "%lldx%lld k %d row %lld kind %d #%d: %d (%g), want %d (%g)", (long long)rows,
                       (long long)cols, k, (long long)r, (int)(r % 7), j, ids[r * k + j], vals[r * k + j],
                       want_i[j], want_v[j]);
        }
        /* without a mask: the free rows' answer */
        CHECK(b->get_topk(b, &t, k, NULL, ids, vals) == 0);
        brute_topk(x, cols, NULL, k, want_i, want_v);
        CHECK(!memcmp(ids, want_i, sizeof(int32_t) * (size_t)k));
        free(x), free(bits), free(slot), free(ids), free(vals);
    }
    float one = 1.0f;
    int32_t id[2], s0 = 0;
    float v[2];
    uint32_t w0 = 1;
    iris_tensor t1 = {.data = &one, .dtype = IRIS_DT_F32, .rows = 1, .cols = 40};
    iris_topk_mask narrow = {.slot = &s0, .bits = &w0, .words = 1};
    CHECK(b->get_topk(b, &t1, 2, &narrow, id, v) == IRIS_EINVAL);   /* 40 columns need 2 words */
    b->destroy(b);
}

/* ---- the sampler -------------------------------------------------------------------------------- */

static iris_vocab *tiny_vocab(void) {
    static iris_tok *tok;
    static iris_vocab *v;
    iris_err err = {0};
    if (!v && (iris_tok_load(TINY_MODEL "/tokenizer.json", &tok, &err) ||
               iris_vocab_build(tok, iris_tok_n_vocab(tok), &v, &err)))
        iris_test_fail(__FILE__, __LINE__, "%s", err.msg);
    return v;
}

static iris_sampler *grammar_sampler(const iris_sampling *p, int n_vocab) {
    iris_sampler *s = NULL;
    iris_grammar *g = NULL;
    iris_err err = {0};
    iris_stop_ids end = {.n = 1, .ids = {TINY_END}};
    if (iris_sampler_init(&s, p, &end, n_vocab, &err) || iris_grammar_from_schema(SCHEMA, &g, &err) ||
        iris_sampler_set_grammar(s, g, tiny_vocab(), &end, &err))
        iris_test_fail(__FILE__, __LINE__, "%s", err.msg);
    return s;
}

/* Two samplers on one seed, one sampling whole rows, one its masked row's candidates, walk the
 * grammar to its end over random logits: the same token every step. */
static void walk(const iris_sampling *p, int seed) {
    int V = iris_vocab_n(tiny_vocab()), W = (V + 31) / 32;
    iris_sampler *whole = grammar_sampler(p, V), *top = grammar_sampler(p, V);
    float *x = malloc(sizeof(float) * (size_t)V);
    uint32_t *m = malloc(sizeof(uint32_t) * (size_t)W);
    REQUIRE(x && m && whole && top);
    rng = 0x9e3779b97f4a7c15ull * (uint64_t)(seed + 1);
    int need = iris_sampler_top_need(top), n = need + 8, steps = 0, done = 0;
    CHECKF(need > 0, "a constrained sampler needs %d candidates (0: whole rows)", need);
    int32_t ids[64];
    float vals[64];
    iris_err err = {0};
    while (!done && steps < 200) {
        for (int i = 0; i < V; i++) x[i] = (float)(int)(rnd() % 2000) / 100.0f - 10.0f;
        CHECK_EQ_INT(iris_sampler_mask(top, m, &err), 1);
        brute_topk(x, V, m, n, ids, vals);
        int a = iris_sampler_sample(whole, x, NULL, &err);
        int b = iris_sampler_sample_top(top, ids, vals, n, NULL, &err);
        CHECKF(a >= 0 && a == b, "seed %d step %d: whole row %d, masked candidates %d (%s)", seed, steps, a, b,
               err.msg);
        if (a < 0 || a != b) break;
        CHECKF(((m[a >> 5] >> (a & 31)) & 1), "token %d outside the mask", a);
        iris_finish f = iris_sampler_accept(whole, a);
        CHECK(iris_sampler_accept(top, b) == f);
        done = f != IRIS_FINISH_NONE;
        steps++;
    }
    CHECKF(done, "seed %d: no end in %d steps", seed, steps);
    iris_sampler_free(whole), iris_sampler_free(top);
    free(x), free(m);
}

IRIS_TEST(sample_mask_sampler_top) {
    iris_sampling p;
    iris_sampling_default(&p, NULL);
    p.ignore_eos = 1;   /* the grammar still ends it */
    for (int seed = 0; seed < 4; seed++) {
        p.do_sample = 0;
        walk(&p, seed);
        p.do_sample = 1, p.temperature = 1.0f, p.top_k = 5, p.top_p = 0.9f, p.seed = seed;
        walk(&p, seed);
    }
    /* Unmasked candidates: refused when one the grammar does not allow is finite. */
    p.do_sample = 0;
    int V = iris_vocab_n(tiny_vocab()), W = (V + 31) / 32;
    iris_sampler *s = grammar_sampler(&p, V);
    uint32_t *m = malloc(sizeof(uint32_t) * (size_t)W);
    REQUIRE(s && m);
    iris_err err = {0};
    CHECK_EQ_INT(iris_sampler_mask(s, m, &err), 1);
    int bad = -1, good = -1;
    for (int t = 0; t < V && (bad < 0 || good < 0); t++) {
        if ((m[t >> 5] >> (t & 31)) & 1) good = good < 0 ? t : good;
        else bad = bad < 0 ? t : bad;
    }
    REQUIRE(bad >= 0 && good >= 0);
    int32_t ids[2] = {bad, good};
    float vals[2] = {5.0f, 4.0f};
    CHECK_EQ_INT(iris_sampler_sample_top(s, ids, vals, 2, NULL, &err), IRIS_EINVAL);
    ids[0] = good, ids[1] = -1, vals[1] = -INFINITY;   /* one allowed, then the padding */
    CHECK_EQ_INT(iris_sampler_sample_top(s, ids, vals, 2, NULL, &err), good);
    /* an unconstrained sampler has no mask */
    iris_sampler *free_s = NULL;
    REQUIRE(iris_sampler_init(&free_s, &p, NULL, V, &err) == 0);
    CHECK_EQ_INT(iris_sampler_mask(free_s, m, &err), 0);
    CHECK_EQ_INT(iris_sampler_constrained(free_s), 0);
    CHECK_EQ_INT(iris_sampler_constrained(s), 1);
    iris_sampler_free(free_s), iris_sampler_free(s);
    free(m);
}

/* ---- the runner --------------------------------------------------------------------------------- */

static iris_engine *open_tiny(void) {
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = TINY_MODEL;
    o.kv_blocks = 128;
    o.max_num_seqs = 8;
    o.prefix_caching = 0;
    iris_engine *e = NULL;
    iris_err err = {0};
    if (iris_engine_open(&o, &e, &err)) iris_test_fail(__FILE__, __LINE__, "engine open: %s", err.msg);
    return e;
}

typedef struct mask_ctx {
    const uint32_t *bits;       /* [rows, W] */
    int W, calls[8];
} mask_ctx;

/* Row 3 is free, row 5's mask fails (it goes unmasked), the others are theirs. */
static int test_mask(void *ud, int row, uint32_t *words, iris_err *err) {
    mask_ctx *c = ud;
    __atomic_fetch_add(&c->calls[row], 1, __ATOMIC_RELAXED);
    if (row == 5) return iris_err_set(err, IRIS_EINVAL, "row 5's grammar cannot go on");
    memcpy(words, c->bits + (size_t)row * c->W, sizeof(uint32_t) * (size_t)c->W);
    return 1;
}

IRIS_TEST(sample_mask_runner) {
    iris_engine *e = open_tiny();
    REQUIRE(e);
    iris_runner *run = iris_engine_runner(e);
    const int V = iris_engine_text(e)->cfg.vocab_size, W = (V + 31) / 32, N = 7;
    int32_t tok[N], pos[3 * N], bt[1] = {0};
    for (int i = 0; i < N; i++) tok[i] = (int32_t)(17 + 31 * i), pos[i] = pos[N + i] = pos[2 * N + i] = i;
    iris_text_seq q = {.n_new = N, .tokens = tok, .pos = pos, .pos_stride = N, .block_table = bt, .logits_from = 0};
    iris_runner_out out;
    iris_err err = {0};
    double t0 = iris_now_s();
    REQUIRE(iris_runner_step(run, &q, 1, NULL, &out, &err) == 0);
    double wall = iris_now_s() - t0;
    /* the time until the forward was issued: part of the step (on the CPU, the forward itself) */
    CHECKF(out.launch_s > 0 && out.launch_s <= wall, "issued after %g s of a %g s step", out.launch_s, wall);
    float *whole = malloc(sizeof(float) * (size_t)N * V);
    uint32_t *bits = calloc((size_t)N * W, 4);
    REQUIRE(whole && bits);
    memcpy(whole, out.logits, sizeof(float) * (size_t)N * V);
    for (int r = 0; r < N; r++) {
        uint32_t *w = bits + (size_t)r * W;
        if (r == 0) w[3] = 1u << 7;                                 /* one token: 103 */
        if (r == 1) for (int i = 0; i < W; i++) w[i] = 0x0f0f0f0fu;
        if (r == 2) w[(V - 1) >> 5] = ~0u;                          /* the last word only */
        if (r == 4) for (int i = 0; i < W; i++) w[i] = ~0u;
        if (r == 6) w[0] = 0x3u, w[W - 1] = 1u << ((V - 1) & 31);  /* three, apart */
    }
    int need[N], masked[N];
    for (int r = 0; r < N; r++) need[r] = r % 2 ? 5 : 1, masked[r] = r != 3;
    mask_ctx mc = {.bits = bits, .W = W};
    iris_runner_sampling smp = {.need = need, .masked = masked, .mask = test_mask, .ud = &mc};
    REQUIRE(iris_runner_step(run, &q, 1, &smp, &out, &err) == 0);   /* the same step again: the same logits */
    CHECK(out.k >= 5 + 1);
    CHECK_EQ_INT(out.n_masked, 5);                                   /* rows 0, 1, 2, 4, 6 */
    for (int r = 0; r < N; r++) {
        CHECK_EQ_INT(mc.calls[r], r == 3 ? 0 : 1);
        CHECKF(!out.whole[r], "row %d came back whole", r);
        int32_t want_i[64];
        float want_v[64];
        brute_topk(whole + (size_t)r * V, V, r == 3 || r == 5 ? NULL : bits + (size_t)r * W, out.k, want_i, want_v);
        for (int j = 0; j < out.k; j++)
            CHECKF(out.ids[r * out.k + j] == want_i[j] && out.vals[r * out.k + j] == want_v[j],
                   "row %d #%d: %d (%g), want %d (%g)", r, j, out.ids[r * out.k + j], out.vals[r * out.k + j],
                   want_i[j], want_v[j]);
    }
    CHECK_EQ_INT(out.ids[0], 103);
    CHECK_EQ_INT(out.ids[1], -1);
    /* no constrained row: no call, the free answer */
    memset(masked, 0, sizeof masked);
    memset(mc.calls, 0, sizeof mc.calls);
    REQUIRE(iris_runner_step(run, &q, 1, &smp, &out, &err) == 0);
    CHECK_EQ_INT(out.n_masked, 0);
    for (int r = 0; r < N; r++) CHECK_EQ_INT(mc.calls[r], 0);
    free(whole), free(bits);
    iris_engine_close(e);
}

/* ---- the engine ----------------------------------------------------------------------------------- */

typedef struct answer {
    char text[2048];
    int tok[256], n, finish;
} answer;

static void ask(iris_engine *e, int sample, int logprobs, int seed, answer *a) {
    memset(a, 0, sizeof *a);
    iris_request_params p;
    iris_request_params_default(e, &p);
    p.messages_json = "[{\"role\":\"user\",\"content\":\"Give me a JSON object.\"}]";
    p.sampling.max_tokens = 200;
    p.sampling.ignore_eos = 1;
    p.sampling.do_sample = sample;
    if (sample) p.sampling.temperature = 1.0f, p.sampling.top_k = 8, p.sampling.top_p = 0.95f, p.sampling.seed = seed;
    p.sampling.logprobs = logprobs;
    p.sampling.json_schema = SCHEMA;
    iris_request *r = NULL;
    iris_err err = {0};
    if (iris_engine_submit(e, &p, &r, &err)) {
        CHECKF(0, "submit: %s", err.msg);
        return;
    }
    iris_event ev;
    size_t n = 0;
    while (iris_request_next(r, &ev, 60000) == IRIS_OK) {
        if (ev.kind == IRIS_EVENT_DONE) {
            a->finish = ev.finish_reason;
            break;
        }
        if (ev.text_len && n + ev.text_len < sizeof a->text)
            memcpy(a->text + n, ev.text, ev.text_len), n += ev.text_len;
        if (a->n < 256) a->tok[a->n++] = ev.token;
    }
    iris_request_free(r);
}

IRIS_TEST(sample_mask_engine_top_equals_whole) {
    iris_engine *e = open_tiny();
    REQUIRE(e);
    for (int c = 0; c < 4; c++) {
        int sample = c > 0;
        answer top, whole;
        ask(e, sample, 0, c, &top);
        ask(e, sample, 1, c, &whole);
        CHECKF(top.finish == IRIS_FINISH_REASON_STOP, "case %d: finish %d: %s", c, top.finish, top.text);
        CHECK_EQ_INT(top.n, whole.n);
        CHECKF(!memcmp(top.tok, whole.tok, sizeof(int) * (size_t)top.n), "case %d: tokens differ", c);
        CHECK_STR(top.text, whole.text);
        json_t *j = json_loads(top.text, 0, NULL);
        CHECKF(json_is_object(j) && json_is_string(json_object_get(j, "name")), "case %d: %s", c, top.text);
        json_decref(j);
    }
    iris_engine_close(e);
}
