/* test_tools.c: tool calls below the server: the grammar of Qwen3's <tool_call> blocks
 * (model/grammar_tools.c) byte by byte and through token masks over the real Qwen vocabulary
 * (where "<tool_call>" is one added token), and the engine constraining a tiny model's output
 * to calls that parse and follow the tool's parameters. */
#include <jansson.h>
#include <stdlib.h>

#include "engine/engine.h"
#include "formats/tokenizer.h"
#include "model/grammar.h"
#include "test.h"

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather.\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},\"unit\":{\"enum\":"
    "[\"c\",\"f\"]}},\"required\":[\"city\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]";

static iris_vocab *qwen_vocab(iris_tok **tok_out) {
    static iris_tok *tok;
    static iris_vocab *v;
    iris_err err = {0};
    const char *path = iris_test_asset("qwen3/tokenizer.json");
    if (!v && (!path || iris_tok_load(path, &tok, &err) || iris_vocab_build(tok, iris_tok_n_vocab(tok), &v, &err)))
        iris_test_fail(__FILE__, __LINE__, "the Qwen tokenizer: %s", path ? err.msg : "missing");
    if (tok_out) *tok_out = tok;
    return v;
}

/* 1 when text is accepted whole and complete, 0 when not. */
static int accepts(const char *only, int required, int parallel, const char *text) {
    iris_grammar *g = NULL;
    iris_err err = {0};
    if (iris_grammar_from_tools(TOOLS, only, required, parallel, &g, &err)) {
        iris_test_fail(__FILE__, __LINE__, "tools grammar: %s", err.msg);
        return -1;
    }
    iris_grammar_matcher *m = NULL;
    int ok = -1;
    if (qwen_vocab(NULL) && !iris_grammar_matcher_init(&m, g, qwen_vocab(NULL), &err))
        ok = !iris_grammar_matcher_accept_bytes(m, text, strlen(text), NULL) && iris_grammar_matcher_complete(m);
    iris_grammar_matcher_free(m);
    iris_grammar_free(g);
    return ok;
}

#define CALL_W "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
#define CALL_N "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"

IRIS_TEST(tools_grammar_required) {
    CHECK(accepts(NULL, 1, 1, CALL_W) == 1);
    CHECK(accepts(NULL, 1, 1, CALL_N) == 1);
    CHECK(accepts(NULL, 1, 1, CALL_W "\n" CALL_N) == 1);    /* parallel, joined as the template joins */
    CHECK(accepts(NULL, 1, 0, CALL_W "\n" CALL_N) == 0);    /* parallel_tool_calls false */
    CHECK(accepts(NULL, 1, 1, "") == 0);                     /* a call is required */
    CHECK(accepts(NULL, 1, 1, "Sure. " CALL_W) == 0);        /* no text with required */
    CHECK(accepts(NULL, 1, 1, CALL_W " ") == 0);
    CHECK(accepts(NULL, 1, 1, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>") == 0);
    /* the arguments follow the parameters: maxLength, additionalProperties, required */
    CHECK(accepts(NULL, 1, 1, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Amsterdam!\"}}\n"
                              "</tool_call>") == 0);
    CHECK(accepts(NULL, 1, 1, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"x\"}}\n"
                              "</tool_call>") == 0);
    CHECK(accepts(NULL, 1, 1, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"x\",\"unit\":"
                              "\"f\"}}\n</tool_call>") == 1);
    CHECK(accepts(NULL, 1, 1, "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"x\": 1}}\n</tool_call>") == 0);
    /* a named function: only that one */
    CHECK(accepts("now", 0, 1, CALL_N) == 1);
    CHECK(accepts("now", 0, 1, CALL_W) == 0);
    CHECK(accepts("now", 0, 1, "text") == 0);
}

IRIS_TEST(tools_grammar_auto) {
    CHECK(accepts(NULL, 0, 1, "") == 1);
    CHECK(accepts(NULL, 0, 1, "Just text, <b>html</b> and <tool_cal> <tool_callx") == 1);
    CHECK(accepts(NULL, 0, 1, "It is sunny.\n" CALL_W) == 1);
    CHECK(accepts(NULL, 0, 1, "<<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>") == 1);
    CHECK(accepts(NULL, 0, 1, CALL_W "\n" CALL_N) == 1);
    CHECK(accepts(NULL, 0, 0, CALL_W "\n" CALL_N) == 0);
    CHECK(accepts(NULL, 0, 1, CALL_W " and text after") == 0);    /* nothing but calls after a call */
    CHECK(accepts(NULL, 0, 1, "x <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>") == 0);
    CHECK(accepts(NULL, 0, 1, "x <tool_call> free text") == 0);     /* once opened, a call */
}

IRIS_TEST(tools_grammar_bad) {
    iris_grammar *g = NULL;
    iris_err err = {0};
    CHECK_EQ_INT(iris_grammar_from_tools(TOOLS, "missing", 0, 1, &g, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "tool_choice: no tool is named \"missing\"");
    CHECK_EQ_INT(iris_grammar_from_tools("[]", NULL, 0, 1, &g, &err), IRIS_EINVAL);
    const char *bad = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                      "\"minProperties\":1}}}]";
    CHECK_EQ_INT(iris_grammar_from_tools(bad, NULL, 1, 1, &g, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "tools[0].function.parameters (\"f\")");
    CHECK_CONTAINS(err.msg, "minProperties");
    CHECK(g == NULL);
}

/* The mask lets the single added token "<tool_call>" open a call in auto mode, and in required
 * mode it is allowed at the start while plain text is not. */
IRIS_TEST(tools_grammar_mask_tokens) {
    iris_tok *tok = NULL;
    iris_vocab *v = qwen_vocab(&tok);
    REQUIRE(v && tok);
    int open = iris_tok_find(tok, "<tool_call>"), hello = iris_tok_find(tok, "Hello");
    REQUIRE(open > 0 && hello > 0);
    CHECK(!iris_tok_is_special(tok, open));
    size_t words = ((size_t)iris_vocab_n(v) + 31) / 32;
    uint32_t *mask = calloc(words, sizeof *mask);
    REQUIRE(mask);
    for (int required = 0; required <= 1; required++) {
        iris_grammar *g = NULL;
        iris_grammar_matcher *m = NULL;
        iris_err err = {0};
        REQUIRE(iris_grammar_from_tools(TOOLS, NULL, required, 1, &g, &err) == 0);
        REQUIRE(iris_grammar_matcher_init(&m, g, v, &err) == 0);
        REQUIRE(iris_grammar_matcher_mask(m, mask, &err) == 0);
        CHECK((mask[open >> 5] >> (open & 31)) & 1);
        CHECK_EQ_INT((int)((mask[hello >> 5] >> (hello & 31)) & 1), !required);
        CHECK_EQ_INT(iris_grammar_matcher_complete(m), !required);
        /* after the token, the call's newline and body follow */
        REQUIRE(iris_grammar_matcher_accept_token(m, open, &err) == 0);
        CHECK(!iris_grammar_matcher_complete(m));
        CHECK(iris_grammar_matcher_allows(m, "\n{\"name\": \"now\"", 15));
        CHECK(!iris_grammar_matcher_allows(m, "Hello", 5));
        iris_grammar_matcher_free(m);
        iris_grammar_free(g);
    }
    free(mask);
}

/* Through the engine on the CPU with the tiny-gqa fixture (random weights, its own vocabulary),
 * at temperature 1, ignore_eos on (the grammar alone ends the output): every output is one call
 * in Qwen3's format whose arguments parse and keep the parameters. */
static int submit_tools(iris_engine *e, int64_t seed, const char *only, iris_request **r, iris_err *err) {
    iris_request_params p;
    iris_request_params_default(e, &p);
    p.messages_json = "[{\"role\":\"user\",\"content\":\"What is the weather in Paris?\"}]";
    p.sampling.seed = seed;
    p.sampling.max_tokens = 400;
    p.sampling.ignore_eos = 1;
    p.sampling.do_sample = 1, p.sampling.temperature = 1.0f, p.sampling.top_k = 0, p.sampling.top_p = 1.0f;
    p.sampling.tools_json = TOOLS;
    p.sampling.tools_required = 1;
    p.sampling.tool_name = only;
    p.sampling.single_tool_call = 1;
    return iris_engine_submit(e, &p, r, err);
}

IRIS_TEST(tools_engine_constrained_calls) {
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = "tests/fixtures/tiny/tiny-gqa/model";
    o.kv_blocks = 128;
    o.max_num_seqs = 4;
    iris_engine *e = NULL;
    iris_err err = {0};
    REQUIRE(iris_engine_open(&o, &e, &err) == 0);
    for (int seed = 1; seed <= 4; seed++) {
        iris_request *r = NULL;
        const char *only = seed % 2 ? NULL : "get_weather";
        REQUIRE(submit_tools(e, seed, only, &r, &err) == 0);
        char text[8192];
        size_t n = 0;
        int finish = -1;
        iris_event ev;
        while (iris_request_next(r, &ev, 60000) == IRIS_OK) {
            if (ev.text_len && n + ev.text_len < sizeof text) memcpy(text + n, ev.text, ev.text_len), n += ev.text_len;
            if (ev.kind == IRIS_EVENT_DONE) {
                finish = ev.finish_reason;
                break;
            }
        }
        text[n] = 0;
        iris_request_free(r);
        if (getenv("IRIS_TEST_VERBOSE")) fprintf(stderr, "seed %d: %s\n", seed, text);
        CHECKF(finish == IRIS_FINISH_REASON_STOP, "seed %d: finish %d: %s", seed, finish, text);
        static const char head[] = "<tool_call>\n{\"name\": \"", tail[] = "}\n</tool_call>";
        CHECKF(!strncmp(text, head, sizeof head - 1) && n > sizeof tail && !strcmp(text + n - (sizeof tail - 1), tail),
               "seed %d: not one call: %s", seed, text);
        const char *args = strstr(text, "\"arguments\": ");
        REQUIRE(args);
        json_error_t je;
        json_t *a = json_loadb(args + 13, (size_t)(text + n - (sizeof tail - 1) - (args + 13)), 0, &je);
        CHECKF(json_is_object(a), "seed %d: arguments do not parse (%s): %s", seed, je.text, text);
        if (!strncmp(text + sizeof head - 1, "get_weather\"", 12)) {
            json_t *city = json_object_get(a, "city"), *unit = json_object_get(a, "unit");
            size_t cps = 0;
            for (const char *c = json_string_value(city); c && *c; c++) cps += ((unsigned char)*c & 0xC0) != 0x80;
            CHECKF(json_is_string(city) && cps <= 8, "seed %d: city (maxLength 8): %s", seed, text);
            CHECKF(!unit || (json_is_string(unit) && strchr("cf", json_string_value(unit)[0]) &&
                             json_string_length(unit) == 1), "seed %d: unit: %s", seed, text);
        } else {
            CHECKF(!only && !strncmp(text + sizeof head - 1, "now\"", 4) && json_object_size(a) == 0,
                   "seed %d: %s", seed, text);
        }
        json_decref(a);
    }
    /* a parameters schema iris cannot honour, and an unknown tool, refused at submit */
    iris_request *r = NULL;
    CHECK_EQ_INT(submit_tools(e, 1, "fly", &r, &err), IRIS_EINVAL);
    CHECK_STR(err.param, "tool_choice");
    CHECK(r == NULL);
    iris_engine_close(e);
}
