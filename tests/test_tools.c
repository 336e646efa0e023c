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
