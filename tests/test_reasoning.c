/* test_reasoning.c: the reasoning split of Thinking models (src/server/reasoning.h) against the
 * rule of vLLM's qwen3 reasoning parser, whole and streamed in every chunking. */
#include "test.h"

#include <stdlib.h>
#include <string.h>

#include "server/reasoning.h"

typedef struct {
    const char *text, *reasoning, *content; /* NULL: none (null in JSON) */
} split_case;

/* vLLM (qwen3_reasoning_parser.py extract_reasoning, thinking enabled): "<think>" dropped with
 * what precedes it; before the first "</think>" reasoning, after it content (None if empty);
 * no "</think>": all reasoning. */
static const split_case cases[] = {
    {"I think.\n</think>\n\nThe answer is 4.", "I think.\n", "\n\nThe answer is 4."},
    {"<think>\nplan\n</think>\n\nok", "\nplan\n", "\n\nok"},
    {"no end yet, cut short", "no end yet, cut short", NULL},
    {"</think>just content", "", "just content"},
    {"all reasoning</think>", "all reasoning", NULL},
    {"a</think>b</think>c", "a", "b</think>c"},
    {"junk<think>r</think>c", "r", "c"},
    {"", "", NULL},
    {"caf\xc3\xa9 \xe2\x9c\x93</think>\xf0\x9f\x8c\x8d", "caf\xc3\xa9 \xe2\x9c\x93", "\xf0\x9f\x8c\x8d"},
};

static int same(const char *a, size_t an, const char *b) {
    if (!b) return a == NULL || an == 0;
    return a && an == strlen(b) && !memcmp(a, b, an);
}

IRIS_TEST(reasoning_split_whole) {
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *r, *c;
        size_t rn, cn;
        iris_reasoning_split(cases[i].text, strlen(cases[i].text), &r, &rn, &c, &cn);
        CHECKF(same(r, rn, cases[i].reasoning), "case %zu: reasoning \"%.*s\"", i, (int)rn, r ? r : "");
        CHECKF(same(c, cn, cases[i].content), "case %zu: content \"%.*s\"", i, (int)cn, c ? c : "");
    }
}

/* Streamed in pieces of k bytes (and token-like pieces at the tags): the concatenated parts
 * equal the whole split; no piece is lost or repeated. */
IRIS_TEST(reasoning_split_streamed) {
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *t = cases[i].text;
        size_t n = strlen(t);
        if (strstr(t, "junk")) continue; /* text before "<think>": below */
        for (size_t k = 1; k <= n + 1; k++) {
            iris_reasoning rs;
            iris_reasoning_init(&rs, 1);
            char r[256] = "", c[256] = "";
            size_t rn = 0, cn = 0;
            for (size_t off = 0; off <= n; off += k) {
                size_t m = off + k <= n ? k : n - off;
                iris_reasoning_piece p;
                REQUIRE(iris_reasoning_feed(&rs, t + off, m, off + k > n, &p) == 0);
                memcpy(r + rn, p.reasoning ? p.reasoning : "", p.reasoning_len), rn += p.reasoning_len;
                memcpy(c + cn, p.content ? p.content : "", p.content_len), cn += p.content_len;
                iris_reasoning_piece_free(&p);
                if (off + k > n) break;
            }
            const char *want_c = cases[i].content ? cases[i].content : "";
            CHECKF(rn == strlen(cases[i].reasoning) && !memcmp(r, cases[i].reasoning, rn),
                   "case %zu, pieces of %zu: reasoning \"%.*s\"", i, k, (int)rn, r);
            CHECKF(cn == strlen(want_c) && !memcmp(c, want_c, cn), "case %zu, pieces of %zu: content \"%.*s\"", i,
                   k, (int)cn, c);
        }
    }
    /* Text before a "<think>" already sent stays reasoning (vLLM streaming drops only what
     * precedes it in the same delta; its whole-text answer would be "r"). */
    static const char *const toks[] = {"junk", "<think>", "r", "</think>", "c"};
    iris_reasoning ts;
    iris_reasoning_init(&ts, 1);
    char r[32] = "", c[32] = "";
    for (int i = 0; i < 5; i++) {
        iris_reasoning_piece p;
        REQUIRE(iris_reasoning_feed(&ts, toks[i], strlen(toks[i]), i == 4, &p) == 0);
        if (p.reasoning) strcat(r, p.reasoning);
        if (p.content) strcat(c, p.content);
        iris_reasoning_piece_free(&p);
    }
    CHECK_STR(r, "junkr");
    CHECK_STR(c, "c");
    /* off: everything is content, nothing held */
    iris_reasoning rs;
    iris_reasoning_init(&rs, 0);
    iris_reasoning_piece p;
    REQUIRE(iris_reasoning_feed(&rs, "a</thi", 6, 0, &p) == 0);
    CHECK(p.reasoning == NULL && p.content_len == 6);
    iris_reasoning_piece_free(&p);
}

IRIS_TEST(reasoning_apply_json) {
    json_t *o = json_pack("{s:[{s:i, s:{s:s, s:s}}]}", "choices", "index", 0, "message", "role", "assistant",
                          "content", "R</think>C");
    iris_reasoning_apply(o, 0, "R", 1, NULL, 0);
    json_t *m = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    CHECK_STR(json_string_value(json_object_get(m, "reasoning_content")), "R");
    CHECK(json_is_null(json_object_get(m, "content")));
    json_decref(o);
    o = json_pack("{s:[{s:i, s:{s:s}}]}", "choices", "index", 0, "delta", "content", "");
    iris_reasoning_apply(o, 1, NULL, 0, "C", 1);
    m = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "delta");
    CHECK(json_object_get(m, "reasoning_content") == NULL);
    CHECK_STR(json_string_value(json_object_get(m, "content")), "C");
    json_decref(o);
    json_t *body = json_pack("{s:{s:b}}", "chat_template_kwargs", "enable_thinking", 0);
    CHECK(iris_reasoning_disabled_by(body));
    json_object_set_new(json_object_get(body, "chat_template_kwargs"), "enable_thinking", json_true());
    CHECK(!iris_reasoning_disabled_by(body));
    CHECK(!iris_reasoning_disabled_by(NULL));
    json_decref(body);
}
