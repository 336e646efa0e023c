/* test_grammar_engine.c: constrained sampling through the engine on the CPU with the tiny-gqa
 * fixture (random weights, its own 512-token vocabulary): at temperature 1 and several seeds,
 * constrained and free requests share steps; every constrained output parses, keeps the
 * schema and ends with stop (even with ignore_eos); a constrained request gives the same tokens
 * alone as in the batch; a bad schema is IRIS_EINVAL naming the keyword.  `iris describe
 * --json` on the demo model keeps its scene schema. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "iris.h"
#include "test.h"

#define TINY_MODEL "tests/fixtures/tiny/tiny-gqa/model"

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},\"ok\":{\"type\":\"boolean\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"x\",\"yz\"]},\"maxItems\":3}},"
    "\"required\":[\"name\",\"n\"],\"additionalProperties\":false}";

typedef struct out {
    char text[4096];
    int tokens[512], n_tokens, finish;
} out;

static iris_engine *open_tiny(void) {
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = TINY_MODEL;
    o.kv_blocks = 128;
    o.max_num_seqs = 8;
    iris_engine *e = NULL;
    iris_err err = {0};
    if (iris_engine_open(&o, &e, &err)) iris_test_fail(__FILE__, __LINE__, "engine open: %s", err.msg);
    return e;
}

static int submit(iris_engine *e, const char *schema, int64_t seed, int max_tokens, iris_request **r, iris_err *err) {
    iris_request_params p;
    iris_request_params_default(e, &p);
    p.messages_json = "[{\"role\":\"user\",\"content\":\"Give me a JSON object.\"}]";
    p.sampling.seed = seed;
    p.sampling.max_tokens = max_tokens;
    p.sampling.ignore_eos = 1;  /* the grammar still ends a constrained output */
    p.sampling.do_sample = 1, p.sampling.temperature = 1.0f, p.sampling.top_k = 0, p.sampling.top_p = 1.0f;
    p.sampling.json_schema = schema;
    return iris_engine_submit(e, &p, r, err);
}

static void collect(iris_request *r, out *o) {
    size_t n = 0;
    iris_event ev;
    o->n_tokens = 0;
    while (iris_request_next(r, &ev, 60000) == IRIS_OK) {
        if (ev.text_len && n + ev.text_len < sizeof o->text) memcpy(o->text + n, ev.text, ev.text_len), n += ev.text_len;
        o->text[n] = 0;
        if (ev.kind == IRIS_EVENT_DONE) {
            o->finish = ev.finish_reason;
            break;
        }
        if (o->n_tokens < 512) o->tokens[o->n_tokens++] = ev.token;
    }
}

static void check_output(const out *o, int seed) {
    if (getenv("IRIS_TEST_VERBOSE")) fprintf(stderr, "seed %d (%d tokens): %s\n", seed, o->n_tokens, o->text);
    CHECKF(o->finish == IRIS_FINISH_REASON_STOP, "seed %d: finish %d, text %s", seed, o->finish, o->text);
    json_error_t je;
    json_t *j = json_loads(o->text, 0, &je);
    CHECKF(j != NULL, "seed %d: \"%s\" does not parse: %s", seed, o->text, je.text);
    if (!j) return;
    json_t *name = json_object_get(j, "name"), *n = json_object_get(j, "n"), *tags = json_object_get(j, "tags");
    CHECK(json_is_string(name));
    CHECK(json_is_integer(n) && json_integer_value(n) >= 0 && json_integer_value(n) <= 99);
    CHECK(!tags || (json_is_array(tags) && json_array_size(tags) <= 3));
    const char *k;
    json_t *v;
    json_object_foreach(j, k, v) CHECKF(!strcmp(k, "name") || !strcmp(k, "n") || !strcmp(k, "ok") ||
                                        !strcmp(k, "tags"), "seed %d: key %s", seed, k);
    json_decref(j);
}

IRIS_TEST(grammar_engine_constrained_batch) {
    iris_engine *e = open_tiny();
    REQUIRE(e);
    enum { N = 6 };
    iris_request *r[N] = {0};
    out *o = calloc(N + 1, sizeof *o);
    iris_err err = {0};
    /* Seeds 1..4 constrained, two free requests in the same steps. */
    for (int i = 0; i < N; i++) {
        int rc = submit(e, i < 4 ? SCHEMA : NULL, i + 1, i < 4 ? 300 : 20, &r[i], &err);
        CHECKF(rc == 0, "request %d: %s", i, err.msg);
    }
    for (int i = 0; i < N; i++)
        if (r[i]) collect(r[i], &o[i]), iris_request_free(r[i]);
    for (int i = 0; i < 4; i++) check_output(&o[i], i + 1);
    for (int i = 4; i < N; i++) {
        CHECK_EQ_INT(o[i].finish, IRIS_FINISH_REASON_LENGTH);
        CHECK_EQ_INT(o[i].n_tokens, 20);
    }
    /* Seed 1 alone: the same tokens as in the batch. */
    iris_request *alone = NULL;
    REQUIRE(!submit(e, SCHEMA, 1, 300, &alone, &err));
    collect(alone, &o[N]);
    iris_request_free(alone);
    CHECK_EQ_INT(o[N].n_tokens, o[0].n_tokens);
    CHECK_STR(o[N].text, o[0].text);
    /* Any JSON object. */
    REQUIRE(!submit(e, "{\"type\":\"object\"}", 9, 400, &alone, &err));
    collect(alone, &o[N]);
    iris_request_free(alone);
    json_t *j = json_loads(o[N].text, 0, NULL);
    CHECKF(json_is_object(j) || o[N].finish == IRIS_FINISH_REASON_LENGTH, "\"%s\"", o[N].text);
    json_decref(j);
    free(o);
    iris_engine_close(e);
}

IRIS_TEST(grammar_engine_bad_schema) {
    iris_engine *e = open_tiny();
    REQUIRE(e);
    iris_request *r = NULL;
    iris_err err = {0};
    int rc = submit(e, "{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", 1, 10, &r, &err);
    CHECK_EQ_INT(rc, IRIS_EINVAL);
    CHECK(r == NULL);
    CHECK_CONTAINS(err.msg, "\"pattern\"");
    CHECK_STR(err.param, "response_format");
    iris_engine_close(e);
}

/* `iris describe --json` on the demo model: at several seeds the answer finishes with stop,
 * parses, and keeps the scene schema (cmd_run.c's SCENE_SCHEMA), given parsed as "scene". */
IRIS_TEST(grammar_describe_json_demo) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    static const char *const positions[] = {"top left", "top",    "top right", "left",        "centre",
                                            "right",    "bottom left", "bottom", "bottom right"};
    for (int seed = 1; seed <= 3; seed++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "%s describe examples/images/scene1.png --json -q --temperature 1 --seed %d 2>&1",
                 bin, seed);
        int st = 0;
        char *res = iris_test_popen(cmd, &st);
        CHECKF(st == 0, "seed %d: exit %d: %s", seed, st, res ? res : "");
        json_t *o = res ? json_loads(res, 0, NULL) : NULL;
        CHECKF(o != NULL, "seed %d: not one JSON object: %s", seed, res ? res : "");
        json_t *sc = json_object_get(o, "scene"), *objs = json_object_get(sc, "objects");
        json_t *text = json_object_get(sc, "text"), *setting = json_object_get(sc, "setting");
        CHECKF(o && !strcmp(json_string_value(json_object_get(o, "finish_reason")), "stop"), "seed %d: %s", seed, res);
        CHECKF(json_is_object(sc) && json_object_size(sc) == 3, "seed %d: scene %s", seed, res ? res : "");
        CHECK(json_is_string(setting) && json_string_length(setting) <= 120 * 4);
        CHECK(json_is_array(text) && json_array_size(text) <= 4);
        CHECK(json_is_array(objs) && json_array_size(objs) <= 8);
        size_t i;
        json_t *ob;
        json_array_foreach(objs, i, ob) {
            json_t *pos = json_object_get(ob, "position"), *cnt = json_object_get(ob, "count");
            json_t *lab = json_object_get(ob, "label"), *attr = json_object_get(ob, "attributes");
            int known = 0;
            for (size_t k = 0; json_is_string(pos) && k < sizeof positions / sizeof *positions; k++)
                known |= !strcmp(json_string_value(pos), positions[k]);
            CHECKF(known, "seed %d: position %s", seed, res);
            CHECK(json_is_integer(cnt) && json_integer_value(cnt) >= 1 && json_integer_value(cnt) <= 99);
            CHECK(json_is_string(lab) && json_string_length(lab) >= 1);
            CHECK(json_is_string(json_object_get(ob, "colour")));
            CHECK(json_is_array(attr) && json_array_size(attr) <= 3);
            CHECK(json_object_size(ob) == 5);
        }
        if (getenv("IRIS_TEST_VERBOSE")) fprintf(stderr, "%s", res ? res : "");
        json_decref(o);
        free(res);
    }
}
