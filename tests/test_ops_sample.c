/* test_ops_sample.c: get_topk with token masks (constrained decoding, backend.h iris_topk_mask)
 * on CUDA against the CPU backend's get_topk on the same bf16-valued rows: ids and values bit
 * for bit, masked and free rows in one call, masks with one allowed token, all allowed, only the
 * last (partial) word, none, random densities; and every returned id allowed, padded with -1 /
 * -inf past the allowed ones.  Then the engine on CUDA (tiny-gqa): constrained requests, alone
 * and sharing steps with free ones, give through the masked candidates the tokens they give
 * through whole rows masked on the host (logprobs), and their output parses. */
#ifdef IRIS_CUDA
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "iris.h"
#include "ops_util.h"
#include "test.h"
#include "tiny_fixture.h"

enum { M_RANDOM, M_ONE, M_ALL, M_LAST_WORD, M_NONE, M_SPARSE, M_FREE, M_KINDS };

/* Row r's mask of kind `kind` into w [words] (M_FREE: none, slot -1). */
static void make_mask(uint32_t *w, int64_t words, int64_t cols, int kind) {
    memset(w, 0, (size_t)words * 4);
    switch (kind) {
    case M_RANDOM:
        for (int64_t i = 0; i < words; i++) w[i] = ops_rnd_u32() ^ (ops_rnd_u32() << 16);
        break;
    case M_ONE: {
        int64_t c = ops_rnd_u32() % cols;
        w[c >> 5] |= 1u << (c & 31);
        break;
    }
    case M_ALL:
        for (int64_t i = 0; i < words; i++) w[i] = 0xffffffffu;
        break;
    case M_LAST_WORD:
        w[(cols - 1) >> 5] = 0xffffffffu;   /* bits past the columns set too: they must be ignored */
        break;
    case M_SPARSE:
        for (int i = 0; i < 7; i++) {
            int64_t c = ops_rnd_u32() % cols;
            w[c >> 5] |= 1u << (c & 31);
        }
        break;
    default:
        break;
    }
}

static void check_masked(int64_t rows, int64_t cols, int k, int ties) {
    int64_t n = rows * cols, words = (cols + 31) / 32 + 3;  /* a wider stride than needed */
    float *x = malloc(sizeof(float) * (size_t)n);
    int32_t *slot = malloc(sizeof(int32_t) * (size_t)rows);
    uint32_t *bits = calloc((size_t)(rows * words), 4);
    int32_t *ids[2] = {malloc(sizeof(int32_t) * (size_t)(rows * k)), malloc(sizeof(int32_t) * (size_t)(rows * k))};
    float *vals[2] = {malloc(sizeof(float) * (size_t)(rows * k)), malloc(sizeof(float) * (size_t)(rows * k))};
    REQUIRE(x && slot && bits && ids[0] && ids[1] && vals[0] && vals[1]);
    for (int64_t i = 0; i < n; i++) {
        float v = ties ? ops_round_bf(8.0f + (float)(ops_rnd_u32() % 64) / 16.0f)
                       : ops_round_bf(ops_rnd_uniform(-20.0f, 20.0f));
        uint32_t z = ops_rnd_u32() % 97;
        x[i] = z == 0 ? -INFINITY : z == 1 ? NAN : v;
    }
    int n_masks = 0;
    for (int64_t r = 0; r < rows; r++) {
        int kind = (int)(r % M_KINDS);
        slot[r] = kind == M_FREE ? -1 : n_masks;
        if (kind != M_FREE) make_mask(bits + (int64_t)n_masks++ * words, words, cols, kind);
    }
    void *dx = ops_dev_bf16(x, n);
    void *dslot = ops_dev_copy(slot, sizeof(int32_t) * (size_t)rows);
    void *dbits = ops_dev_copy(bits, sizeof(uint32_t) * (size_t)(n_masks * words));
    REQUIRE(dx && dslot && dbits);
    iris_tensor tc = {.data = dx, .dtype = IRIS_DT_BF16, .rows = rows, .cols = cols};
    iris_tensor th = {.data = x, .dtype = IRIS_DT_F32, .rows = rows, .cols = cols};
    iris_topk_mask mc = {.slot = dslot, .bits = dbits, .words = words};
    iris_topk_mask mh = {.slot = slot, .bits = bits, .words = words};
    int rc = ops_cuda->get_topk(ops_cuda, &tc, k, &mc, ids[0], vals[0]);
    CHECKF(rc == 0, "cuda get_topk masked %lldx%lld k %d: %s", (long long)rows, (long long)cols, k, ops_cuda->err.msg);
    rc |= ops_cpu->get_topk(ops_cpu, &th, k, &mh, ids[1], vals[1]);
    CHECKF(rc == 0, "cpu get_topk masked: %s", ops_cpu->err.msg);
    int bad = 0;
    for (int64_t r = 0; r < rows && !rc && !bad; r++) {
        const uint32_t *m = slot[r] >= 0 ? bits + (int64_t)slot[r] * words : NULL;
        int64_t allowed = 0;
        for (int64_t c = 0; c < cols; c++) allowed += !m || ((m[c >> 5] >> (c & 31)) & 1);
        for (int j = 0; j < k && !bad; j++) {
            int32_t gi = ids[0][r * k + j], ri = ids[1][r * k + j];
            float gv = vals[0][r * k + j], rv = vals[1][r * k + j];
            int same = gi == ri && (gv == rv || (isinf(gv) && isinf(rv) && gv < 0 && rv < 0));
            int ok_id = j < allowed ? gi >= 0 && gi < cols && (!m || ((m[gi >> 5] >> (gi & 31)) & 1))
                                    : gi == -1 && isinf(gv) && gv < 0;
            if (!same || !ok_id) {
                CHECKF(0, "masked get_topk %lldx%lld k %d ties %d: row %lld (mask kind %d, %lld allowed) #%d: cuda %d "
                       "(%g), cpu %d (%g)", (long long)rows, (long long)cols, k, ties, (long long)r,
                       (int)(r % M_KINDS), (long long)allowed, j, gi, gv, ri, rv);
                bad = 1;
            }
        }
    }
    ops_cuda->free(ops_cuda, dx), ops_cuda->free(ops_cuda, dslot), ops_cuda->free(ops_cuda, dbits);
    free(x), free(slot), free(bits), free(ids[0]), free(ids[1]), free(vals[0]), free(vals[1]);
}

/* A mask that allows everything gives the unmasked call's answer, and the unmasked CUDA call the
 * CPU's (the free rows' path through the same reference). */
static void check_all_allowed_is_free(int64_t rows, int64_t cols, int k) {
    int64_t n = rows * cols, words = (cols + 31) / 32;
    float *x = ops_rnd_vec(n, -12.0f, 12.0f);
    int32_t *slot = malloc(sizeof(int32_t) * (size_t)rows), *id[3];
    uint32_t *bits = malloc(sizeof(uint32_t) * (size_t)words);
    float *v[3];
    for (int i = 0; i < 3; i++)
        id[i] = malloc(sizeof(int32_t) * (size_t)(rows * k)), v[i] = malloc(sizeof(float) * (size_t)(rows * k));
    REQUIRE(x && slot && bits && id[0] && id[1] && id[2] && v[0] && v[1] && v[2]);
    for (int64_t r = 0; r < rows; r++) slot[r] = 0;
    for (int64_t i = 0; i < words; i++) bits[i] = 0xffffffffu;
    void *dx = ops_dev_bf16(x, n), *dslot = ops_dev_copy(slot, sizeof(int32_t) * (size_t)rows);
    void *dbits = ops_dev_copy(bits, sizeof(uint32_t) * (size_t)words);
    REQUIRE(dx && dslot && dbits);
    iris_tensor tc = {.data = dx, .dtype = IRIS_DT_BF16, .rows = rows, .cols = cols};
    iris_tensor th = {.data = x, .dtype = IRIS_DT_F32, .rows = rows, .cols = cols};
    iris_topk_mask mc = {.slot = dslot, .bits = dbits, .words = words};
    CHECK(ops_cuda->get_topk(ops_cuda, &tc, k, NULL, id[0], v[0]) == 0);
    CHECK(ops_cuda->get_topk(ops_cuda, &tc, k, &mc, id[1], v[1]) == 0);
    CHECK(ops_cpu->get_topk(ops_cpu, &th, k, NULL, id[2], v[2]) == 0);
    CHECK(!memcmp(id[0], id[1], sizeof(int32_t) * (size_t)(rows * k)));
    CHECK(!memcmp(v[0], v[1], sizeof(float) * (size_t)(rows * k)));
    CHECK(!memcmp(id[0], id[2], sizeof(int32_t) * (size_t)(rows * k)));
    CHECK(!memcmp(v[0], v[2], sizeof(float) * (size_t)(rows * k)));
    ops_cuda->free(ops_cuda, dx), ops_cuda->free(ops_cuda, dslot), ops_cuda->free(ops_cuda, dbits);
    free(x), free(slot), free(bits);
    for (int i = 0; i < 3; i++) free(id[i]), free(v[i]);
}

IRIS_TEST(gpu_ops_topk_masked) {
    OPS_BACKENDS();
    check_masked(M_KINDS, 151936, 1, 0);
    check_masked(M_KINDS, 151936, 9, 0);
    check_masked(2 * M_KINDS, 151936, 28, 1);
    check_masked(M_KINDS, 151936, 64, 0);
    check_masked(M_KINDS + 3, 4099, 17, 1);
    check_masked(M_KINDS, 77, 64, 1);
    check_masked(64, 151936, 28, 0);
    check_masked(450, 151936, 64, 1);   /* more rows than one group of the scratch */
    check_all_allowed_is_free(5, 151936, 28);
    check_all_allowed_is_free(3, 1000, 1);
    /* a mask narrower than the rows is refused */
    iris_tensor t = {.data = NULL, .dtype = IRIS_DT_BF16, .rows = 1, .cols = 100};
    int32_t s0 = 0, id[4];
    uint32_t w[4] = {0};
    float v[4];
    iris_topk_mask m = {.slot = &s0, .bits = w, .words = 3};
    CHECK(ops_cuda->get_topk(ops_cuda, &t, 4, &m, id, v) == IRIS_EINVAL);
}

/* ---- the engine on CUDA ---------------------------------------------------------------------- */

#define N_REQ 4

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},\"ok\":{\"type\":\"boolean\"}},"
    "\"required\":[\"name\",\"n\"],\"additionalProperties\":false}";

typedef struct answer {
    char text[2048];
    int tok[256], n, finish;
} answer;

/* n requests in the same steps (n 1: alone): even ones constrained, odd ones free (24 tokens);
 * sample: seeded top-k; logprobs: whole rows. */
static void ask_batch(iris_engine *e, int n, int sample, int logprobs, int seed, answer *a) {
    iris_request *r[N_REQ] = {0};
    iris_err err = {0};
    for (int i = 0; i < n; i++) {
        memset(&a[i], 0, sizeof a[i]);
        iris_request_params p;
        iris_request_params_default(e, &p);
        p.messages_json = "[{\"role\":\"user\",\"content\":\"Give me a JSON object.\"}]";
        p.sampling.max_tokens = i % 2 ? 24 : 200;
        p.sampling.ignore_eos = 1;
        p.sampling.do_sample = sample;
        if (sample)
            p.sampling.temperature = 1.0f, p.sampling.top_k = 8, p.sampling.top_p = 0.95f, p.sampling.seed = seed + i;
        p.sampling.logprobs = logprobs;
        p.sampling.json_schema = i % 2 ? NULL : SCHEMA;
        CHECKF(iris_engine_submit(e, &p, &r[i], &err) == 0, "submit: %s", err.msg);
    }
    for (int i = 0; i < n; i++) {
        iris_event ev;
        size_t len = 0;
        while (r[i] && iris_request_next(r[i], &ev, 120000) == IRIS_OK) {
            if (ev.kind == IRIS_EVENT_DONE) {
                a[i].finish = ev.finish_reason;
                break;
            }
            if (ev.text_len && len + ev.text_len < sizeof a[i].text)
                memcpy(a[i].text + len, ev.text, ev.text_len), len += ev.text_len;
            if (a[i].n < 256) a[i].tok[a[i].n++] = ev.token;
        }
        iris_request_free(r[i]);
    }
}

static void check_json(const answer *a, const char *what) {
    CHECKF(a->finish == IRIS_FINISH_REASON_STOP, "%s: finish %d: %s", what, a->finish, a->text);
    json_t *j = json_loads(a->text, 0, NULL);
    CHECKF(json_is_object(j) && json_is_string(json_object_get(j, "name")) && json_is_integer(json_object_get(j, "n")),
           "%s: %s", what, a->text);
    json_decref(j);
}

IRIS_TEST(gpu_engine_masked_top_equals_whole) {
    OPS_NEED_GPU();
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = TINY_DIR "/tiny-gqa/model";
    o.device = "cuda";
    o.max_num_seqs = 8;
    o.prefix_caching = 0;     /* both runs prefill the same chunks: the same logits */
    o.gpu_memory_limit = (uint64_t)2 << 30;
    iris_engine *e = NULL;
    iris_err err = {0};
    REQUIRE(iris_engine_open(&o, &e, &err) == 0);
    /* alone (the same batch shapes both ways): the same tokens */
    for (int c = 0; c < 3; c++) {
        answer top, whole;
        ask_batch(e, 1, c > 0, 0, 10 * c, &top);
        ask_batch(e, 1, c > 0, 1, 10 * c, &whole);
        CHECK_EQ_INT(top.n, whole.n);
        CHECKF(!memcmp(top.tok, whole.tok, sizeof(int) * (size_t)top.n), "case %d: masked candidates and whole rows "
               "part", c);
        check_json(&top, "alone");
        fprintf(stderr, "  case %d: %s\n", c, top.text);
    }
    /* constrained and free requests sharing steps */
    answer b[N_REQ];
    ask_batch(e, N_REQ, 1, 0, 7, b);
    for (int i = 0; i < N_REQ; i++) {
        if (i % 2) CHECK_EQ_INT(b[i].n, 24);
        else check_json(&b[i], "in a batch");
    }
    iris_engine_close(e);
}

#endif
