/* test_sampler.c: sampling (greedy, penalties, top-k/top-p/min-p, seeds, the
 * sampled distribution), finish reasons and stop strings. */
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "model/sampler.h"

/* Qwen3-VL's end tokens (generation_config.json's defaults). */
static const iris_stop_ids *qwen_stop(void) {
    static iris_stop_ids s;
    iris_stop_ids_default(&s, NULL);
    return &s;
}

static iris_sampling plain(void) {
    iris_sampling p;
    iris_sampling_default(&p, NULL);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.seed = 1234;
    return p;
}

/* probs of `logits` under params `p` (fresh sampler, optional history). */
static int probs_of(const iris_sampling *p, const float *logits, int n, float *probs, const int *prompt,
                    int n_prompt, const int *gen, int n_gen) {
    iris_sampler *s = NULL;
    iris_err err = {0};
    if (iris_sampler_init(&s, p, qwen_stop(), n, &err)) return -1;
    if (n_prompt) iris_sampler_add_prompt(s, prompt, n_prompt, &err);
    for (int i = 0; i < n_gen; i++) iris_sampler_accept(s, gen[i]);
    int rc = iris_sampler_probs(s, logits, probs, &err);
    iris_sampler_free(s);
    return rc;
}

static void check_probs(const float *got, const double *want, int n, double tol, const char *what) {
    for (int i = 0; i < n; i++)
        CHECKF(fabs((double)got[i] - want[i]) <= tol, "%s: p[%d] = %.7f, want %.7f", what, i, got[i], want[i]);
}

IRIS_TEST(sampler_greedy_is_argmax) {
    iris_sampling p = plain();
    p.do_sample = 0;
    float logits[6] = {1.0f, 3.0f, -2.0f, 3.0f, 2.9f, NAN};
    iris_sampler *s = NULL;
    iris_err err = {0};
    REQUIRE(iris_sampler_init(&s, &p, qwen_stop(), 6, &err) == 0);
    CHECK_EQ_INT(iris_sampler_sample(s, logits, NULL, &err), 1); /* first of the tied maxima */
    float probs[6];
    REQUIRE(iris_sampler_probs(s, logits, probs, &err) == 0);
    CHECK(probs[1] == 1.0f && probs[3] == 0.0f);
    iris_sampler_free(s);
    /* temperature 0 is greedy too, whatever do_sample says */
    p.do_sample = 1;
    p.temperature = 0.0f;
    REQUIRE(iris_sampler_init(&s, &p, qwen_stop(), 6, &err) == 0);
    float l2[6] = {0.0f, 0.1f, 5.0f, 0.2f, -1.0f, 4.99f};
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(iris_sampler_sample(s, l2, NULL, &err), 2);
    float bad[3] = {NAN, -INFINITY, NAN};
    iris_sampler_free(s);
    REQUIRE(iris_sampler_init(&s, &p, qwen_stop(), 3, &err) == 0);
    CHECK(iris_sampler_sample(s, bad, NULL, &err) < 0);
    CHECK_CONTAINS(err.msg, "NaN or -inf");
    iris_sampler_free(s);
}

IRIS_TEST(sampler_top_k) {
    iris_sampling p = plain();
    p.top_k = 2;
    float l[5] = {1, 2, 3, 4, 5};
    float got[5];
    REQUIRE(probs_of(&p, l, 5, got, NULL, 0, NULL, 0) == 0);
    double e4 = exp(4.0), e5 = exp(5.0);
    double want[5] = {0, 0, 0, e4 / (e4 + e5), e5 / (e4 + e5)};
    check_probs(got, want, 5, 1e-6, "top_k=2");
    /* ties at the k-th value are kept, as HF's `scores < topk[..., -1]` */
    float t[4] = {5, 4, 4, 1};
    REQUIRE(probs_of(&p, t, 4, got, NULL, 0, NULL, 0) == 0);
    double z = exp(5.0) + 2 * exp(4.0);
    double want2[4] = {exp(5.0) / z, exp(4.0) / z, exp(4.0) / z, 0};
    check_probs(got, want2, 4, 1e-6, "top_k=2 with a tie");
    /* temperature is applied before top-k/top-p: T=2 halves the logits */
    p.temperature = 2.0f;
    REQUIRE(probs_of(&p, l, 5, got, NULL, 0, NULL, 0) == 0);
    double h4 = exp(2.0), h5 = exp(2.5);
    double want3[5] = {0, 0, 0, h4 / (h4 + h5), h5 / (h4 + h5)};
    check_probs(got, want3, 5, 1e-6, "top_k=2, T=2");
}

IRIS_TEST(sampler_top_p_min_p) {
    iris_sampling p = plain();
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    float got[4];
    p.top_p = 0.75f; /* mass above token 2 is 0.8 >= 0.75: keep 0 and 1 */
    REQUIRE(probs_of(&p, l, 4, got, NULL, 0, NULL, 0) == 0);
    check_probs(got, (double[]){0.625, 0.375, 0, 0}, 4, 1e-6, "top_p=0.75");
    p.top_p = 0.85f;
    REQUIRE(probs_of(&p, l, 4, got, NULL, 0, NULL, 0) == 0);
    check_probs(got, (double[]){0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, 4, 1e-6, "top_p=0.85");
    p.top_p = 0.4f; /* the first token alone exceeds it: at least one token stays */
    REQUIRE(probs_of(&p, l, 4, got, NULL, 0, NULL, 0) == 0);
    check_probs(got, (double[]){1, 0, 0, 0}, 4, 1e-6, "top_p=0.4");
    /* min_p 0.2: keep p >= 0.2 * 0.5 = 0.1 */
    p.top_p = 1.0f;
    p.min_p = 0.2f;
    REQUIRE(probs_of(&p, l, 4, got, NULL, 0, NULL, 0) == 0);
    check_probs(got, (double[]){0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, 4, 1e-6, "min_p=0.2");
    p.min_p = 0.5f; /* keep p >= 0.25 */
    REQUIRE(probs_of(&p, l, 4, got, NULL, 0, NULL, 0) == 0);
    check_probs(got, (double[]){0.625, 0.375, 0, 0}, 4, 1e-6, "min_p=0.5");
    /* top-p sees the distribution renormalized after top-k (HF order) */
    float q[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    p.min_p = 0.0f;
    p.top_p = 0.5f;
    REQUIRE(probs_of(&p, q, 4, got, NULL, 0, NULL, 0) == 0);
    check_probs(got, (double[]){4.0 / 7, 3.0 / 7, 0, 0}, 4, 1e-6, "top_p=0.5 alone");
    p.top_k = 2; /* renormalized: 4/7 > 0.5 above token 1 */
    REQUIRE(probs_of(&p, q, 4, got, NULL, 0, NULL, 0) == 0);
    check_probs(got, (double[]){1, 0, 0, 0}, 4, 1e-6, "top_k=2 then top_p=0.5");
}

IRIS_TEST(sampler_top_p_large_vocab) {
    /* The cut-lowering path: a flat tail holding most of the mass. */
    enum { N = 5000 };
    float *l = malloc(N * sizeof *l), *got = malloc(N * sizeof *got);
    REQUIRE(l && got);
    for (int i = 0; i < N; i++) l[i] = i < 3 ? 10.0f - (float)i : -(float)(i % 7) * 0.01f; /* head 87% of the mass */
    iris_sampling p = plain();
    p.top_p = 0.9f;
    REQUIRE(probs_of(&p, l, N, got, NULL, 0, NULL, 0) == 0);
    /* reference: full sort by value, then the HF rule */
    double z = 0;
    for (int i = 0; i < N; i++) z += exp((double)l[i] - 10.0);
    int *idx = malloc(N * sizeof *idx);
    REQUIRE(idx);
    for (int i = 0; i < N; i++) idx[i] = i;
    for (int i = 1; i < N; i++) { /* insertion sort, stable, descending */
        int v = idx[i], j = i;
        while (j > 0 && l[idx[j - 1]] < l[v]) idx[j] = idx[j - 1], j--;
        idx[j] = v;
    }
    double above = 0, kept = 0;
    int n_keep = 0;
    for (int k = 0; k < N; k++) {
        if (k > 0 && above >= 0.9) break;
        above += exp((double)l[idx[k]] - 10.0) / z;
        kept += exp((double)l[idx[k]] - 10.0);
        n_keep++;
    }
    int n_nonzero = 0;
    double sum = 0;
    for (int i = 0; i < N; i++) {
        n_nonzero += got[i] > 0;
        sum += got[i];
    }
    CHECK_EQ_INT(n_nonzero, n_keep);
    CHECK(fabs(sum - 1.0) < 1e-5);
    CHECK(n_keep > 3 && n_keep < N);
    for (int k = 0; k < n_keep; k++) {
        double want = exp((double)l[idx[k]] - 10.0) / kept;
        CHECKF(fabs(got[idx[k]] - want) < 1e-6, "token %d: %g vs %g", idx[k], got[idx[k]], want);
    }
    free(idx);
    free(l);
    free(got);
}

IRIS_TEST(sampler_penalties) {
    iris_sampling p = plain();
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    float l[5] = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
    int prompt[3] = {0, 1, 0}, gen[2] = {3, 3};
    /* by hand: 0: 2/2 = 1; 1: -1*2 = -2; 2: untouched; 3: 3/2 - 0.5*2 - 0.25 = 0.25; 4: untouched */
    double x[5] = {1.0, -2.0, 0.5, 0.25, 0.0}, z = 0, want[5];
    for (int i = 0; i < 5; i++) z += exp(x[i]);
    for (int i = 0; i < 5; i++) want[i] = exp(x[i]) / z;
    float got[5];
    REQUIRE(probs_of(&p, l, 5, got, prompt, 3, gen, 2) == 0);
    check_probs(got, want, 5, 1e-6, "penalties");
    /* presence/frequency count generated tokens only: prompt tokens unaffected */
    iris_sampling q = plain();
    q.presence_penalty = 1.0f;
    q.frequency_penalty = 1.0f;
    REQUIRE(probs_of(&q, l, 5, got, prompt, 3, NULL, 0) == 0);
    z = 0;
    for (int i = 0; i < 5; i++) z += exp((double)l[i]);
    for (int i = 0; i < 5; i++) want[i] = exp((double)l[i]) / z;
    check_probs(got, want, 5, 1e-6, "presence/frequency ignore the prompt");
    /* greedy sees the penalties too (HF applies processors before argmax) */
    iris_sampling g = plain();
    g.do_sample = 0;
    g.repetition_penalty = 1.5f;
    float two[2] = {2.0f, 1.9f};
    iris_sampler *s = NULL;
    iris_err err = {0};
    REQUIRE(iris_sampler_init(&s, &g, qwen_stop(), 2, &err) == 0);
    CHECK_EQ_INT(iris_sampler_sample(s, two, NULL, &err), 0);
    REQUIRE(iris_sampler_add_prompt(s, (int[]){0}, 1, &err) == 0);
    CHECK_EQ_INT(iris_sampler_sample(s, two, NULL, &err), 1);
    CHECK(iris_sampler_add_prompt(s, (int[]){7}, 1, &err) < 0);
    CHECK_CONTAINS(err.msg, "outside the vocabulary");
    iris_sampler_free(s);
}

static void draw(int64_t seed, int n, int *out) {
    iris_sampling p = plain();
    p.seed = seed;
    p.temperature = 0.9f;
    float l[16];
    for (int i = 0; i < 16; i++) l[i] = (float)((i * 37) % 11) * 0.3f;
    iris_sampler *s = NULL;
    iris_err err = {0};
    if (iris_sampler_init(&s, &p, qwen_stop(), 16, &err)) return;
    for (int i = 0; i < n; i++) out[i] = iris_sampler_sample(s, l, NULL, &err);
    iris_sampler_free(s);
}

IRIS_TEST(sampler_seed_reproducible) {
    int a[64], b[64], c[64];
    draw(42, 64, a);
    draw(42, 64, b);
    draw(43, 64, c);
    CHECK(!memcmp(a, b, sizeof a));
    CHECK(memcmp(a, c, sizeof a) != 0);
    int distinct = 0;
    for (int i = 1; i < 64; i++) distinct += a[i] != a[0];
    CHECK(distinct > 0);
}

IRIS_TEST(sampler_distribution_matches_softmax) {
    enum { V = 8, N = 20000 };
    const float l[V] = {1.0f, 0.5f, 2.0f, -1.0f, 0.0f, 1.5f, -0.5f, 0.8f};
    const float T = 0.7f;
    iris_sampling p = plain();
    p.temperature = T;
    p.seed = 7;
    iris_sampler *s = NULL;
    iris_err err = {0};
    REQUIRE(iris_sampler_init(&s, &p, qwen_stop(), V, &err) == 0);
    int count[V] = {0};
    for (int i = 0; i < N; i++) {
        int t = iris_sampler_sample(s, l, NULL, &err);
        REQUIRE(t >= 0 && t < V);
        count[t]++;
    }
    iris_sampler_free(s);
    double z = 0, chi2 = 0, maxabs = 0;
    for (int i = 0; i < V; i++) z += exp((double)l[i] / T);
    for (int i = 0; i < V; i++) {
        double e = N * exp((double)l[i] / T) / z;
        chi2 += (count[i] - e) * (count[i] - e) / e;
        double d = fabs(count[i] / (double)N - e / N);
        if (d > maxabs) maxabs = d;
    }
    /* 7 degrees of freedom: P(chi2 > 24.32) = 0.001 */
    CHECKF(chi2 < 24.32, "chi-square %.2f over 7 dof", chi2);
    CHECKF(maxabs < 0.012, "max abs frequency error %.4f", maxabs);
}

IRIS_TEST(sampler_finish_and_logprobs) {
    iris_generation_config gc = {.bos_token_id = 151643, .pad_token_id = 151643, .n_eos = 2,
                                 .eos_token_id = {151645, 151643}, .do_sample = 1, .top_k = 20,
                                 .top_p = 0.8f, .temperature = 0.7f, .repetition_penalty = 1.0f};
    iris_sampling p;
    iris_sampling_default(&p, &gc);
    iris_stop_ids stop;
    iris_stop_ids_default(&stop, &gc);
    CHECK_EQ_INT(stop.n, 2);
    CHECK_EQ_INT(stop.ids[0], 151645);
    CHECK_EQ_INT(stop.ids[1], 151643);
    CHECK_EQ_INT(p.top_k, 20);
    CHECK(p.top_p == 0.8f && p.temperature == 0.7f);
    p.max_tokens = 3;
    iris_sampler *s = NULL;
    iris_err err = {0};
    REQUIRE(iris_sampler_init(&s, &p, &stop, 151936, &err) == 0);
    CHECK_EQ_INT(iris_sampler_accept(s, 10), IRIS_FINISH_NONE);
    CHECK_EQ_INT(iris_sampler_accept(s, 11), IRIS_FINISH_NONE);
    CHECK_EQ_INT(iris_sampler_accept(s, 12), IRIS_FINISH_LENGTH);
    CHECK_STR(iris_finish_name(IRIS_FINISH_LENGTH), "length");
    iris_sampler_free(s);
    p.max_tokens = 0;
    REQUIRE(iris_sampler_init(&s, &p, &stop, 151936, &err) == 0);
    CHECK_EQ_INT(iris_sampler_accept(s, 151643), IRIS_FINISH_STOP);
    CHECK_STR(iris_finish_name(IRIS_FINISH_STOP), "stop");
    iris_sampler_free(s);
    p.ignore_eos = 1;   /* the end tokens do not stop */
    REQUIRE(iris_sampler_init(&s, &p, &stop, 151936, &err) == 0);
    CHECK_EQ_INT(iris_sampler_accept(s, 151643), IRIS_FINISH_NONE);
    iris_sampler_free(s);
    p.ignore_eos = 0;

    /* logprobs are of the raw logits, most likely first */
    iris_sampling q = plain();
    q.do_sample = 0;
    q.top_logprobs = 3;
    q.repetition_penalty = 3.0f;
    float l[5] = {0.1f, 2.0f, -1.0f, 1.0f, 1.9f};
    REQUIRE(iris_sampler_init(&s, &q, qwen_stop(), 5, &err) == 0);
    iris_sample_out out;
    CHECK_EQ_INT(iris_sampler_sample(s, l, &out, &err), 1);
    double z = 0;
    for (int i = 0; i < 5; i++) z += exp((double)l[i]);
    CHECK(fabs(out.logprob - (2.0 - log(z))) < 1e-5);
    CHECK_EQ_INT(out.n_top, 3);
    CHECK_EQ_INT(out.top_ids[0], 1);
    CHECK_EQ_INT(out.top_ids[1], 4);
    CHECK_EQ_INT(out.top_ids[2], 3);
    CHECK(fabs(out.top_logprobs[2] - (1.0 - log(z))) < 1e-5);
    iris_sampler_accept(s, 1); /* penalized now: 2/3 < 1.9 */
    CHECK_EQ_INT(iris_sampler_sample(s, l, &out, &err), 4);
    CHECK(fabs(out.logprob - (1.9 - log(z))) < 1e-5);
    iris_sampler_free(s);

    q.top_p = 0.0f;
    CHECK(iris_sampler_init(&s, &q, qwen_stop(), 5, &err) < 0);
    CHECK_CONTAINS(err.msg, "top_p");
    q.top_p = 1.0f;
    q.temperature = -1.0f;
    CHECK(iris_sampler_init(&s, &q, qwen_stop(), 5, &err) < 0);
    CHECK_CONTAINS(err.msg, "temperature");
}

/* Feed pieces, collect the emitted text; returns 1 if a stop string ended it. */
static int feed_all(iris_stop_matcher *m, const char *const *pieces, int n, char *out, size_t cap) {
    size_t o = 0;
    iris_err err = {0};
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        const char *e;
        size_t ne;
        int stop = iris_stop_feed(m, pieces[i], strlen(pieces[i]), &e, &ne, &err);
        if (o + ne < cap) memcpy(out + o, e, ne), o += ne;
        out[o] = '\0';
        if (stop) return 1;
    }
    const char *e;
    size_t ne;
    iris_stop_flush(m, &e, &ne);
    if (o + ne < cap) memcpy(out + o, e, ne), o += ne;
    out[o] = '\0';
    return 0;
}

IRIS_TEST(sampler_stop_strings) {
    const char *stops[2] = {"</end>", "STOP"};
    iris_stop_matcher *m = NULL;
    iris_err err = {0};
    char out[256];
    REQUIRE(iris_stop_init(&m, stops, 2, &err) == 0);
    /* a stop string split over three tokens */
    const char *a[] = {"Hello </", "en", "d> more", "never"};
    CHECK_EQ_INT(feed_all(m, a, 4, out, sizeof out), 1);
    CHECK_STR(out, "Hello ");
    CHECK_EQ_INT(iris_stop_which(m), 0);
    iris_stop_free(m);

    /* held text is released when it cannot be a stop string any more */
    REQUIRE(iris_stop_init(&m, stops, 2, &err) == 0);
    const char *e;
    size_t ne;
    CHECK_EQ_INT(iris_stop_feed(m, "abc </e", 7, &e, &ne, &err), 0);
    CHECK_EQ_INT((int)ne, 4);
    CHECK(!memcmp(e, "abc ", 4));
    CHECK_EQ_INT(iris_stop_feed(m, "x", 1, &e, &ne, &err), 0);
    CHECK_EQ_INT((int)ne, 4);
    CHECK(!memcmp(e, "</ex", 4));
    iris_stop_free(m);

    /* the generation ends another way: held text is flushed */
    REQUIRE(iris_stop_init(&m, stops, 2, &err) == 0);
    const char *b[] = {"go ST", "O"};
    CHECK_EQ_INT(feed_all(m, b, 2, out, sizeof out), 0);
    CHECK_STR(out, "go STO");
    CHECK_EQ_INT(iris_stop_which(m), -1);
    iris_stop_free(m);

    /* the earliest of two stop strings wins, inside one piece */
    REQUIRE(iris_stop_init(&m, stops, 2, &err) == 0);
    const char *c[] = {"xSTOPy</end>"};
    CHECK_EQ_INT(feed_all(m, c, 1, out, sizeof out), 1);
    CHECK_STR(out, "x");
    CHECK_EQ_INT(iris_stop_which(m), 1);
    iris_stop_free(m);

    /* UTF-8 stop string across a multi-byte boundary */
    const char *u[] = {"\xe3\x80\x82"}; /* "。" */
    REQUIRE(iris_stop_init(&m, u, 1, &err) == 0);
    const char *d[] = {"ok\xe3", "\x80", "\x82tail"};
    CHECK_EQ_INT(feed_all(m, d, 3, out, sizeof out), 1);
    CHECK_STR(out, "ok");
    iris_stop_free(m);

    /* no stop strings: pass-through */
    REQUIRE(iris_stop_init(&m, NULL, 0, &err) == 0);
    const char *f[] = {"a", "b"};
    CHECK_EQ_INT(feed_all(m, f, 2, out, sizeof out), 0);
    CHECK_STR(out, "ab");
    iris_stop_free(m);

    const char *bad[1] = {""};
    CHECK(iris_stop_init(&m, bad, 1, &err) < 0);
    CHECK_CONTAINS(err.msg, "empty");
}

/* Parity with transformers: raw logits of a tiny random Qwen3-VL and the
 * scores generate() processed from them (output_logits / output_scores), for
 * several settings; made by tools/check_fp8_sampler.py on the GPU machine. */
#include <jansson.h>

static int sampler_hf_parity(const char *json_path, const char *bin_path) {
    json_error_t je;
    json_t *root = json_load_file(json_path, 0, &je);
    FILE *f = fopen(bin_path, "rb");
    if (!root || !f) {
        iris_test_fail(__FILE__, __LINE__, "fixture %s / %s missing", json_path, bin_path);
        if (f) fclose(f);
        json_decref(root);
        return 0;
    }
    int V = (int)json_integer_value(json_object_get(root, "vocab"));
    json_t *cases = json_object_get(root, "cases");
    float *raw = malloc((size_t)V * 4), *sc = malloc((size_t)V * 4), *got = malloc((size_t)V * 4);
    double *want = malloc((size_t)V * sizeof *want);
    size_t i;
    json_t *c;
    int n_done = 0;
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        long off = (long)json_integer_value(json_object_get(c, "offset"));
        if (fseek(f, off, SEEK_SET) || fread(raw, 4, (size_t)V, f) != (size_t)V || fread(sc, 4, (size_t)V, f) != (size_t)V)
            break;
        iris_sampling p = plain();
        p.temperature = (float)json_number_value(json_object_get(c, "temperature"));
        p.top_k = (int)json_integer_value(json_object_get(c, "top_k"));
        p.top_p = (float)json_number_value(json_object_get(c, "top_p"));
        json_t *mp = json_object_get(c, "min_p"), *rp = json_object_get(c, "repetition_penalty");
        p.min_p = json_is_number(mp) ? (float)json_number_value(mp) : 0.0f;
        p.repetition_penalty = json_is_number(rp) ? (float)json_number_value(rp) : 1.0f;
        json_t *pr = json_object_get(c, "prompt");
        int prompt[64], n_prompt = 0;
        size_t k;
        json_t *v;
        json_array_foreach(pr, k, v) if (n_prompt < 64) prompt[n_prompt++] = (int)json_integer_value(v);
        double m = -INFINITY, z = 0;
        int kept = 0;
        for (int t = 0; t < V; t++)
            if (sc[t] > -1e38f && sc[t] > m) m = sc[t];
        for (int t = 0; t < V; t++) z += sc[t] > -1e38f ? exp((double)sc[t] - m) : 0.0;
        for (int t = 0; t < V; t++) {
            want[t] = sc[t] > -1e38f ? exp((double)sc[t] - m) / z : 0.0;
            kept += sc[t] > -1e38f;
        }
        if (probs_of(&p, raw, V, got, prompt, n_prompt, NULL, 0)) {
            iris_test_fail(__FILE__, __LINE__, "case %s: sampler failed", name);
            continue;
        }
        int n_got = 0, support_diff = 0;
        double maxabs = 0;
        for (int t = 0; t < V; t++) {
            n_got += got[t] > 0;
            support_diff += (got[t] > 0) != (want[t] > 0);
            maxabs = fmax(maxabs, fabs(got[t] - want[t]));
        }
        CHECKF(support_diff == 0, "case %s: kept %d tokens, transformers %d", name, n_got, kept);
        CHECKF(maxabs < 2e-6, "case %s: max abs probability difference %.3g", name, maxabs);
        n_done++;
    }
    free(raw);
    free(sc);
    free(got);
    free(want);
    fclose(f);
    int n_cases = (int)json_array_size(cases);
    json_decref(root);
    CHECKF(n_done == n_cases && n_cases > 0, "%d of %d cases read", n_done, n_cases);
    return n_done;
}

IRIS_TEST(sampler_matches_transformers) {
    const char *j = getenv("IRIS_SAMPLER_FIXTURE");
    if (j) { /* another fixture run (tools/check_fp8_sampler.py output) */
        char b[1024];
        snprintf(b, sizeof b, "%.*s.bin", (int)strlen(j) - 5, j);
        sampler_hf_parity(j, b);
        return;
    }
    sampler_hf_parity("tests/fixtures/sampler/hf_scores.json", "tests/fixtures/sampler/hf_scores.bin");
}

/* Near-tied logits moved by rounding-sized amounts (what a different batch
 * size or a prefix-cache hit does) must not change a seeded draw: the draw
 * walks the kept tokens in id order, so only a u within that distance of a
 * boundary can flip. */
IRIS_TEST(sampler_seeded_draws_stable_under_rounding) {
    enum { V = 512, DRAWS = 400 };
    float a[V], b[V];
    unsigned x = 12345;
    for (int i = 0; i < V; i++) {
        x = x * 1103515245u + 12345u;
        a[i] = 1.0f + (float)(x >> 16 & 1023) * 1e-7f; /* 512 near-equal logits */
        x = x * 1103515245u + 12345u;
        b[i] = a[i] + (float)((int)(x >> 16 & 7) - 3) * 1e-7f; /* reorders many near-ties */
    }
    iris_sampling p;
    iris_sampling_default(&p, NULL);
    p.do_sample = 1;
    p.temperature = 0.9f;
    p.top_k = 50;
    p.top_p = 1.0f;
    p.seed = 36;
    iris_err err = {0};
    iris_sampler *sa = NULL, *sb = NULL;
    REQUIRE(iris_sampler_init(&sa, &p, qwen_stop(), V, &err) == 0);
    REQUIRE(iris_sampler_init(&sb, &p, qwen_stop(), V, &err) == 0);
    int same = 0;
    for (int d = 0; d < DRAWS; d++) same += iris_sampler_sample(sa, a, NULL, &err) == iris_sampler_sample(sb, b, NULL, &err);
    CHECKF(same >= DRAWS * 9 / 10, "only %d of %d seeded draws agree after a 3e-7 perturbation", same, DRAWS);
    iris_sampler_free(sa);
    iris_sampler_free(sb);
}

/* The k most likely (value desc, id asc) of a row, as a backend's get_topk gives them. */
static void top_of(const float *row, int V, int n, int32_t *ids, float *vals) {
    for (int j = 0; j < n; j++) {
        int best = -1;
        for (int i = 0; i < V; i++) {
            float v = isnan(row[i]) ? -INFINITY : row[i];
            int taken = 0;
            for (int q = 0; q < j && !taken; q++) taken = ids[q] == i;
            if (taken) continue;
            float bv = best < 0 ? 0 : (isnan(row[best]) ? -INFINITY : row[best]);
            if (best < 0 || v > bv) best = i;
        }
        ids[j] = best;
        vals[j] = isnan(row[best]) ? -INFINITY : row[best];
    }
}

static float bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* The GPU path (the most likely tokens only) picks the token the whole row picks, draw for draw
 * with the same seed, on bf16 rows full of ties, for greedy and every warper; a tie that runs past
 * the candidates is reported (IRIS_ELIMIT), never guessed. */
IRIS_TEST(sampler_top_candidates_equal_whole_row) {
    enum { V = 700, ROWS = 150 };
    static float row[V];
    struct { int do_sample; float t; int k; float top_p, min_p; } cfg[] = {
        {0, 0.7f, 20, 0.8f, 0.0f}, {1, 0.7f, 20, 0.8f, 0.0f}, {1, 1.0f, 5, 1.0f, 0.0f}, {1, 1.3f, 40, 0.95f, 0.05f},
        {1, 0.5f, 1, 1.0f, 0.0f},  {1, 2.0f, 64, 0.5f, 0.2f}, {1, 0.0f, 20, 0.8f, 0.0f},
    };
    unsigned x = 99;
    int compared = 0, limited = 0;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        iris_sampling p = plain();
        p.do_sample = cfg[c].do_sample, p.temperature = cfg[c].t, p.top_k = cfg[c].k;
        p.top_p = cfg[c].top_p, p.min_p = cfg[c].min_p, p.seed = 7 + (int)c;
        iris_err err = {0};
        iris_sampler *full = NULL, *top = NULL;
        REQUIRE(iris_sampler_init(&full, &p, qwen_stop(), V, &err) == 0);
        REQUIRE(iris_sampler_init(&top, &p, qwen_stop(), V, &err) == 0);
        int need = iris_sampler_top_need(top);
        CHECK_EQ_INT(need, cfg[c].do_sample && cfg[c].t > 0 ? cfg[c].k : 1);
        for (int r = 0; r < ROWS; r++) {
            /* logits on a coarse bf16 grid (many equal values; every third row spread wide, for
             * min-p and top-p to cut), some -inf and NaN, a few rows with fewer finite values than k */
            int sparse = r % 25 == 3;
            for (int i = 0; i < V; i++) {
                x = x * 1103515245u + 12345u;
                float v = bf16_round(8.0f + (float)((x >> 16) % 2048) / (r % 3 ? 256.0f : 8.0f));
                if (r % 7 == 0 && i % 13 == 0) v = -INFINITY;
                if (r % 11 == 0 && i % 17 == 0) v = NAN;
                if (sparse && i % 50) v = -INFINITY;
                row[i] = v;
            }
            int n = need + 8 > V ? V : need + 8;
            int32_t ids[IRIS_SAMPLER_MAX_TOP];
            float vals[IRIS_SAMPLER_MAX_TOP];
            top_of(row, V, n, ids, vals);
            int t_top = iris_sampler_sample_top(top, ids, vals, n, NULL, &err);
            if (t_top == IRIS_ELIMIT) {
                /* the caller's fallback: the whole row (which also keeps the PRNGs in step) */
                limited++;
                t_top = iris_sampler_sample(top, row, NULL, &err);
            }
            int t_full = iris_sampler_sample(full, row, NULL, &err);
            CHECKF(t_top == t_full, "config %zu row %d: %d from the top %d, %d from the whole row", c, r, t_top, n,
                   t_full);
            compared++;
        }
        /* requests that need the whole row say so */
        iris_sampler_free(full);
        iris_sampler_free(top);
    }
    CHECK(compared == ROWS * 7);
    CHECKF(limited < compared / 4, "%d of %d rows fell back to the whole row", limited, compared);
    iris_sampling p = plain();
    p.do_sample = 1, p.temperature = 0.7f, p.top_k = 20;
    p.repetition_penalty = 1.1f;   /* lowering penalties: the candidates do (the test below) */
    iris_sampler *s = NULL;
    iris_err err = {0};
    REQUIRE(iris_sampler_init(&s, &p, qwen_stop(), V, &err) == 0);
    CHECK_EQ_INT(iris_sampler_top_need(s), 20);
    iris_sampler_free(s);
    p.repetition_penalty = 1.0f, p.top_logprobs = 2;
    REQUIRE(iris_sampler_init(&s, &p, qwen_stop(), V, &err) == 0);
    CHECK_EQ_INT(iris_sampler_top_need(s), 0);
    iris_sampler_free(s);
    p.top_logprobs = 0, p.top_k = 0;
    REQUIRE(iris_sampler_init(&s, &p, qwen_stop(), V, &err) == 0);
    CHECK_EQ_INT(iris_sampler_top_need(s), 0);
    iris_sampler_free(s);
}

/* With penalties that lower logits (repetition >= 1, presence/frequency >= 0) the candidates still
 * give the whole row's token, draw for draw, as the history grows; a row whose untouched
 * candidates run out is reported (IRIS_ELIMIT) for the caller to take the whole row; penalties
 * that raise logits need the whole row (top_need 0). */
IRIS_TEST(sampler_top_candidates_with_penalties) {
    enum { V = 700, ROWS = 200, K = 64 };
    static float row[V];
    struct { int do_sample; float t; int k; float top_p, rp, pres, freq; } cfg[] = {
        {0, 0.7f, 20, 0.8f, 1.3f, 0.0f, 0.0f}, {1, 0.7f, 20, 0.8f, 1.05f, 1.5f, 0.0f}, {1, 1.0f, 40, 0.95f, 1.0f, 0.0f, 0.7f},
        {1, 0.9f, 8, 1.0f, 1.2f, 0.5f, 0.3f},  {0, 1.0f, 20, 1.0f, 1.0f, 1.5f, 0.0f},
    };
    unsigned x = 4242;
    int compared = 0, limited = 0;
    int prompt[300];
    for (int i = 0; i < 300; i++) prompt[i] = (i * 7) % V;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        iris_sampling p = plain();
        p.do_sample = cfg[c].do_sample, p.temperature = cfg[c].t, p.top_k = cfg[c].k, p.top_p = cfg[c].top_p;
        p.repetition_penalty = cfg[c].rp, p.presence_penalty = cfg[c].pres, p.frequency_penalty = cfg[c].freq;
        p.seed = 99 + (int)c;
        iris_err err = {0};
        iris_sampler *full = NULL, *top = NULL;
        REQUIRE(iris_sampler_init(&full, &p, qwen_stop(), V, &err) == 0);
        REQUIRE(iris_sampler_init(&top, &p, qwen_stop(), V, &err) == 0);
        REQUIRE(iris_sampler_add_prompt(full, prompt, 300, &err) == 0);
        REQUIRE(iris_sampler_add_prompt(top, prompt, 300, &err) == 0);
        int need = iris_sampler_top_need(top);
        CHECK_EQ_INT(need, cfg[c].do_sample ? cfg[c].k : 1);
        CHECK_EQ_INT(iris_sampler_has_penalties(top), 1);
        for (int r = 0; r < ROWS; r++) {
            for (int i = 0; i < V; i++) {
                x = x * 1103515245u + 12345u;
                row[i] = bf16_round(4.0f + (float)((x >> 16) % 2048) / (r % 2 ? 64.0f : 512.0f));
                if (r % 9 == 0 && i % 11 == 0) row[i] = -row[i];     /* negative logits: rp multiplies */
            }
            int32_t ids[K];
            float vals[K];
            top_of(row, V, K, ids, vals);
            int t_top = iris_sampler_sample_top(top, ids, vals, K, NULL, &err);
            if (t_top == IRIS_ELIMIT) limited++, t_top = iris_sampler_sample(top, row, NULL, &err);
            int t_full = iris_sampler_sample(full, row, NULL, &err);
            CHECKF(t_top == t_full, "config %zu row %d: %d from the top %d, %d from the whole row", c, r, t_top, K,
                   t_full);
            iris_sampler_accept(top, t_top);
            iris_sampler_accept(full, t_full);
            compared++;
        }
        iris_sampler_free(full);
        iris_sampler_free(top);
    }
    fprintf(stderr, "  %d rows compared, %d fell back to the whole row\n", compared, limited);
    CHECK(compared == ROWS * 5);
    CHECKF(limited < compared / 2, "%d of %d rows fell back to the whole row", limited, compared);
    iris_sampling p = plain();
    p.do_sample = 1, p.top_k = 20, p.repetition_penalty = 0.9f; /* raises repeated logits */
    iris_sampler *s = NULL;
    iris_err err = {0};
    REQUIRE(iris_sampler_init(&s, &p, qwen_stop(), V, &err) == 0);
    CHECK_EQ_INT(iris_sampler_top_need(s), 0);
    iris_sampler_free(s);
    p.repetition_penalty = 1.0f, p.presence_penalty = -0.5f;
    REQUIRE(iris_sampler_init(&s, &p, qwen_stop(), V, &err) == 0);
    CHECK_EQ_INT(iris_sampler_top_need(s), 0);
    iris_sampler_free(s);
}
