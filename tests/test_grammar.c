/* test_grammar.c: the grammar engine (model/grammar.c, grammar_schema.c): which bytes a
 * schema's grammar accepts, the keywords it refuses, and token masks over the real Qwen
 * vocabulary checked token by token against the byte matcher, plus seeded random walks
 * through the mask whose every output parses and keeps the schema's constraints. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <jansson.h>
#include <pcre2.h>
#include <stdlib.h>

#include "model/grammar_internal.h"
#include "test.h"

/* The tiny fixture's vocabulary (byte matching needs any one), loaded once. */
static iris_vocab *tiny_vocab(void) {
    static iris_tok *tok;
    static iris_vocab *v;
    iris_err err = {0};
    if (!v && (iris_tok_load("tests/fixtures/tiny/tiny-gqa/model/tokenizer.json", &tok, &err) ||
               iris_vocab_build(tok, iris_tok_n_vocab(tok), &v, &err)))
        iris_test_fail(__FILE__, __LINE__, "%s", err.msg);
    return v;
}

/* 1 when the whole text is accepted and complete, 0 when not, -1 on error. */
static int accepts(const char *schema, const char *text) {
    iris_grammar *g = NULL;
    iris_err err = {0};
    if (iris_grammar_from_schema(schema, &g, &err)) {
        iris_test_fail(__FILE__, __LINE__, "schema %s: %s", schema, err.msg);
        return -1;
    }
    iris_grammar_matcher *m = NULL;
    int ok = -1;
    if (tiny_vocab() && !iris_grammar_matcher_init(&m, g, tiny_vocab(), &err))
        ok = !iris_grammar_matcher_accept_bytes(m, text, strlen(text), NULL) && iris_grammar_matcher_complete(m);
    iris_grammar_matcher_free(m);
    iris_grammar_free(g);
    return ok;
}

IRIS_TEST(grammar_schema_accepts) {
    const char *obj = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":4},"
                      "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},\"tags\":{\"type\":\"array\","
                      "\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":2}},\"required\":[\"name\"],"
                      "\"additionalProperties\":false}";
    CHECK(accepts(obj, "{\"name\":\"bob\"}") == 1);
    CHECK(accepts(obj, "{\"name\": \"bob\", \"age\": 7}") == 1);
    CHECK(accepts(obj, "{\"name\":\"bob\",\"age\":120,\"tags\":[\"a\",\"b\"]}") == 1);
    CHECK(accepts(obj, "{\"name\":\"bob\",\"tags\":[]}") == 1);
    CHECK(accepts(obj, "{\"age\":7}") == 0);                          /* name is required */
    CHECK(accepts(obj, "{\"name\":\"bobby\"}") == 0);                 /* maxLength 4 */
    CHECK(accepts(obj, "{\"name\":\"b\",\"age\":121}") == 0);         /* maximum */
    CHECK(accepts(obj, "{\"name\":\"b\",\"age\":-1}") == 0);          /* minimum */
    CHECK(accepts(obj, "{\"name\":\"b\",\"age\":07}") == 0);          /* leading zero */
    CHECK(accepts(obj, "{\"name\":\"b\",\"tags\":[\"a\",\"a\",\"b\"]}") == 0);  /* maxItems */
    CHECK(accepts(obj, "{\"name\":\"b\",\"x\":1}") == 0);             /* additionalProperties */
    CHECK(accepts(obj, "{\"name\":\"b\"} ") == 0);                    /* nothing after the value */
    CHECK(accepts(obj, "{\"name\":\"\xc3\xa9\\n\\u00e9\"}") == 1);    /* UTF-8 and escapes, 3 code points */
    CHECK(accepts(obj, "{\"name\":\"\xed\xa0\x80\"}") == 0);          /* a surrogate in UTF-8 */
    CHECK(accepts(obj, "{\"name\":\"\xc0\xaf\"}") == 0);              /* overlong */

    const char *rng = "{\"type\":\"integer\",\"minimum\":-37,\"maximum\":1234}";
    char buf[32];
    int bad = 0;
    for (int x = -60; x <= 1300; x++) {
        snprintf(buf, sizeof buf, "%d", x);
        bad += accepts(rng, buf) != (x >= -37 && x <= 1234);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(accepts("{\"type\":\"integer\",\"exclusiveMinimum\":5,\"exclusiveMaximum\":7}", "6") == 1);
    CHECK(accepts("{\"type\":\"integer\",\"exclusiveMinimum\":5,\"exclusiveMaximum\":7}", "5") == 0);

    const char *num = "{\"type\":[\"number\",\"null\"]}";
    CHECK(accepts(num, "-0.5e+10") == 1);
    CHECK(accepts(num, "null") == 1);
    CHECK(accepts(num, "1.") == 0);
    CHECK(accepts(num, "\"1\"") == 0);

    const char *tree = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                       "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"],"
                       "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}";
    CHECK(accepts(tree, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4,\"kids\":[]}]}]}") == 1);
    CHECK(accepts(tree, "{\"v\":1,\"kids\":[{\"kids\":[]}]}") == 0);

    const char *tuple = "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"boolean\"},{\"const\":\"x\"}],"
                        "\"items\":false,\"minItems\":1}";
    CHECK(accepts(tuple, "[true,\"x\"]") == 1);
    CHECK(accepts(tuple, "[false]") == 1);
    CHECK(accepts(tuple, "[]") == 0);
    CHECK(accepts(tuple, "[true,\"x\",1]") == 0);

    const char *any = "{\"anyOf\":[{\"type\":\"string\",\"minLength\":2},{\"type\":\"integer\"}]}";
    CHECK(accepts(any, "\"ab\"") == 1);
    CHECK(accepts(any, "\"a\"") == 0);
    CHECK(accepts(any, "42") == 1);
    CHECK(accepts("{\"type\":\"object\"}", "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}") == 1);
    CHECK(accepts("{\"type\":\"object\"}", "[1]") == 0);
}

IRIS_TEST(grammar_schema_refuses) {
    const char *bad[][2] = {
        {"{\"type\":\"string\",\"pattern\":\"^(a)\\\\1$\"}", "backreferences"},
        {"{\"type\":\"string\",\"pattern\":\"^a(?=b)\"}", "lookahead"},
        {"{\"type\":\"string\",\"pattern\":\"(?<!a)b\"}", "lookbehind"},
        {"{\"type\":\"string\",\"pattern\":\"a^b\"}", "anchor ^"},
        {"{\"type\":\"string\",\"pattern\":\"^(a?)*$\"}", "empty string"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\bword\"}", "word boundaries"},
        {"{\"type\":\"string\",\"pattern\":\"^[a-\"}", "closing ]"},
        {"{\"type\":\"string\",\"pattern\":\"^a{2000}$\"}", "above 1000"},
        {"{\"type\":\"string\",\"pattern\":\"^a$\",\"maxLength\":3}", "\"pattern\" beside"},
        {"{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"ipv4\"}}}",
         "\"format\": \"ipv4\" is not supported"},
        {"{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"ipv4\"}}}",
         "at #/properties/d"},
        {"{\"type\":\"object\",\"minProperties\":1}", "\"minProperties\""},
        {"{\"allOf\":[{\"type\":\"string\"}]}", "\"allOf\""},
        {"{\"$ref\":\"#/$defs/nope\"}", "#/$defs/nope"},
        {"{\"$ref\":\"http://x.org/s.json\"}", "http://x.org/s.json"},
        {"{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/a\"}",
         "refers to itself"},
        {"{\"type\":\"number\",\"minimum\":0}", "\"minimum\""},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "\"uniqueItems\""},
        {"{\"type\":\"object\",\"properties\":{},\"required\":[\"a\"]}", "\"a\""},
        {"{\"type\":\"stringy\"}", "stringy"},
        {"{\"type\":\"string\",\"anyOf\":[{\"maxLength\":1}]}", "\"type\" beside \"anyOf\""},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "minLength"},
        /* a whole number past long long's range (fuzz_json_schema's find of 2026-11-28) */
        {"{\"type\":\"array\",\"maxItems\":5.5e65}", "above 100000"},
        {"{\"type\":\"array\",\"maxItems\":2.5}", "non-negative integers"},
        {"{nope", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        iris_grammar *g = NULL;
        iris_err err = {0};
        int rc = iris_grammar_from_schema(bad[i][0], &g, &err);
        CHECKF(rc == IRIS_EINVAL && g == NULL, "schema %s: rc %d", bad[i][0], rc);
        CHECKF(strstr(err.msg, bad[i][1]) != NULL, "schema %s: message \"%s\" lacks %s", bad[i][0], err.msg,
               bad[i][1]);
        iris_grammar_free(g);
    }
}

IRIS_TEST(grammar_pattern_accepts) {
    const char *code = "{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3,5}(?:\\\\.[a-z]+)?$\"}";
    CHECK(accepts(code, "\"AB-123\"") == 1);
    CHECK(accepts(code, "\"AB-12345.xy\"") == 1);
    CHECK(accepts(code, "\"AB-12\"") == 0);
    CHECK(accepts(code, "\"AB-123456\"") == 0);
    CHECK(accepts(code, "\"ab-123\"") == 0);
    CHECK(accepts(code, "\"AB-123.\"") == 0);
    const char *anywhere = "{\"pattern\":\"b+c|^x\"}";  /* no type: pattern implies a string */
    CHECK(accepts(anywhere, "\"abbcd\"") == 1);
    CHECK(accepts(anywhere, "\"xyz\"") == 1);
    CHECK(accepts(anywhere, "\"yx\"") == 0);
    CHECK(accepts(anywhere, "\"ac\"") == 0);
    /* a quote and a backslash in the pattern are written escaped; . writes no newline */
    const char *esc = "{\"type\":\"string\",\"pattern\":\"^\\\"[^a-z]\\\\\\\\.$\"}";
    CHECK(accepts(esc, "\"\\\"A\\\\\xc3\xa9\"") == 1);
    CHECK(accepts(esc, "\"\\\"a\\\\x\"") == 0);
    CHECK(accepts(esc, "\"\\\"A\\\\\\n\"") == 0);
    const char *alt = "{\"type\":\"string\",\"pattern\":\"^(?:red|dark (?<shade>blue|green))\\\\s?!{0,2}$\"}";
    CHECK(accepts(alt, "\"dark green !!\"") == 1);
    CHECK(accepts(alt, "\"red\"") == 1);
    CHECK(accepts(alt, "\"red!!!\"") == 0);
    CHECK(accepts(alt, "\"dark red\"") == 0);
    const char *date = "{\"type\":\"string\",\"format\":\"date\"}";
    CHECK(accepts(date, "\"2024-02-29\"") == 1);
    CHECK(accepts(date, "\"2000-02-29\"") == 1);
    CHECK(accepts(date, "\"1900-02-29\"") == 0);
    CHECK(accepts(date, "\"2023-02-29\"") == 0);
    CHECK(accepts(date, "\"2023-04-31\"") == 0);
    CHECK(accepts(date, "\"2023-12-31\"") == 1);
    CHECK(accepts(date, "\"2023-13-01\"") == 0);
    const char *dt = "{\"type\":\"string\",\"format\":\"date-time\"}";
    CHECK(accepts(dt, "\"2023-01-02T23:59:59.123456789+05:30\"") == 1);
    CHECK(accepts(dt, "\"2023-01-02T23:59:59Z\"") == 1);
    CHECK(accepts(dt, "\"2023-01-02T24:00:00Z\"") == 0);
    CHECK(accepts(dt, "\"2023-01-02T23:59:59\"") == 0);
    CHECK(accepts("{\"format\":\"time\"}", "\"00:00:60Z\"") == 0);
    CHECK(accepts("{\"format\":\"uuid\"}", "\"123e4567-E89b-12d3-a456-426614174000\"") == 1);
    CHECK(accepts("{\"format\":\"uuid\"}", "\"123e4567e89b-12d3-a456-426614174000\"") == 0);
    const char *mail = "{\"type\":\"string\",\"format\":\"email\"}";
    CHECK(accepts(mail, "\"first.last+tag@mail.example.org\"") == 1);
    CHECK(accepts(mail, "\"a@b\"") == 0);
    CHECK(accepts(mail, "\"a..b@example.org\"") == 0);
    CHECK(accepts(mail, "\"a@-x.org\"") == 0);
    CHECK(accepts("{\"type\":[\"string\",\"null\"],\"format\":\"date\"}", "null") == 1);
}

/* A schema past the compile budget fails at once with IRIS_ELIMIT naming its part. */
IRIS_TEST(grammar_compile_limit) {
    char *schema = malloc(1 << 16);
    size_t n = (size_t)snprintf(schema, 1 << 16, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                                                  "\"list\":{\"type\":\"array\",\"prefixItems\":[");
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(schema + n, (1 << 16) - n, "%s{\"type\":\"string\",\"maxLength\":90000}", i ? "," : "");
    snprintf(schema + n, (1 << 16) - n, "]}}}");
    iris_grammar *g = NULL;
    iris_err err = {0};
    int rc = iris_grammar_from_schema(schema, &g, &err);
    CHECK_EQ_INT(rc, IRIS_ELIMIT);
    CHECK(g == NULL);
    CHECK_CONTAINS(err.msg, "#/properties/list/prefixItems/");
    CHECK_CONTAINS(err.msg, "too large");
    /* through a $ref the message names the definition; nested repetition counts are one rule
     * each, so a pattern's {1000} inside {1000} fits */
    const char *viaref = "{\"$defs\":{\"big\":{\"type\":\"array\",\"prefixItems\":[{\"maxLength\":99999},"
                         "{\"maxLength\":99999},{\"maxLength\":99999},{\"maxLength\":99999},{\"maxLength\":99999}]}},"
                         "\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/big\"}}";
    CHECK_EQ_INT(iris_grammar_from_schema(viaref, &g, &err), IRIS_ELIMIT);
    CHECK_CONTAINS(err.msg, "#/$defs/big/prefixItems/");
    const char *nested = "{\"type\":\"string\",\"pattern\":\"^(?:(?:[a-z]{1000}){1000}){1000}$\"}";
    CHECK_EQ_INT(iris_grammar_from_schema(nested, &g, &err), 0);
    iris_grammar_free(g);
    free(schema);
}

/* Ambiguity that doubles the parse stacks at every '[' ends in IRIS_ELIMIT, not a stalled step. */
IRIS_TEST(grammar_ambiguous_limit) {
    const char *schema = "{\"$defs\":{\"a\":{\"anyOf\":[{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/a\"}},"
                         "{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/a\"}}]}},\"$ref\":\"#/$defs/a\"}";
    iris_grammar *g = NULL;
    iris_grammar_matcher *m = NULL;
    iris_err err = {0};
    REQUIRE(!iris_grammar_from_schema(schema, &g, &err));
    REQUIRE(tiny_vocab() && !iris_grammar_matcher_init(&m, g, tiny_vocab(), &err));
    int rc = 0, i = 0;
    for (; i < 40 && !rc; i++) rc = iris_grammar_matcher_accept_bytes(m, "[", 1, &err);
    CHECK_EQ_INT(rc, IRIS_ELIMIT);
    CHECK_CONTAINS(err.msg, "too many parse stacks");
    CHECKF(i > 10, "failed after %d brackets", i);
    iris_grammar_matcher_free(m);
    iris_grammar_free(g);
}

typedef struct qwen {
    iris_tok *tok;
    iris_vocab *v;
} qwen;

static int qwen_open(qwen *q) {
    memset(q, 0, sizeof *q);
    const char *path = iris_test_asset("qwen3/tokenizer.json");
    if (!path) return -1;
    iris_err err = {0};
    if (iris_tok_load(path, &q->tok, &err) || iris_vocab_build(q->tok, 151936, &q->v, &err)) {
        iris_test_fail(__FILE__, __LINE__, "%s", err.msg);
        return -2;
    }
    return 0;
}

static void qwen_close(qwen *q) {
    iris_vocab_free(q->v);
    iris_tok_free(q->tok);
}

/* The mask against every token tried alone through the byte matcher; returns mismatches. */
static int mask_vs_bytes(iris_grammar_matcher *m, const qwen *q, uint32_t *mask, int *n_allowed) {
    iris_err err = {0};
    if (iris_grammar_matcher_mask(m, mask, &err)) return -1;
    int bad = 0;
    *n_allowed = 0;
    for (int t = 0; t < 151936; t++) {
        size_t len = 0;
        const char *s = iris_tok_token(q->tok, t, &len);
        int want = s && len && !iris_tok_is_special(q->tok, t) && iris_grammar_matcher_allows(m, s, len);
        int got = (mask[t >> 5] >> (t & 31)) & 1;
        *n_allowed += got;
        if (want != got && bad++ < 5) fprintf(stderr, "token %d \"%.*s\": mask %d, bytes %d\n", t, (int)len, s, got, want);
    }
    return bad;
}

IRIS_TEST(grammar_mask_qwen) {
    qwen q;
    int rc = qwen_open(&q);
    if (rc == -1) IRIS_TEST_SKIP("no qwen3 tokenizer asset (IRIS_ASSETS)");
    REQUIRE(rc == 0);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"n\":{\"type\":"
                         "\"integer\",\"minimum\":1,\"maximum\":50},\"ok\":{\"type\":\"boolean\"}},\"required\":"
                         "[\"name\",\"n\",\"ok\"],\"additionalProperties\":false}";
    iris_grammar *g = NULL;
    iris_grammar_matcher *m = NULL;
    iris_err err = {0};
    REQUIRE(!iris_grammar_from_schema(schema, &g, &err));
    REQUIRE(!iris_grammar_matcher_init(&m, g, q.v, &err));
    uint32_t *mask = malloc(151936 / 8);
    /* States along one output: start, inside the key, inside a string value (multi-byte UTF-8
     * cut in half), in the integer, before the boolean, complete. */
    const char *steps[] = {"", "{\"na", "me\": \"caf\xc3", "\xa9 ", "\",\"n\":4", ",\"ok\":", "tru", "e}"};
    int expect_some[] = {1, 1, 1, 1, 1, 1, 1, 0};
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
        CHECKF(!iris_grammar_matcher_accept_bytes(m, steps[i], strlen(steps[i]), &err), "step %zu: %s", i, err.msg);
        int n_allowed = 0;
        CHECKF(mask_vs_bytes(m, &q, mask, &n_allowed) == 0, "step %zu", i);
        CHECKF((n_allowed > 0) == expect_some[i], "step %zu: %d allowed", i, n_allowed);
    }
    CHECK(iris_grammar_matcher_complete(m));
    CHECK(!iris_grammar_matcher_can_continue(m));
    iris_grammar_matcher_free(m);
    iris_grammar_free(g);
    /* A bounded string (whole subtrees are taken only within its budget), with and without a
     * minimum, at several budgets and in the middle of a character. */
    const char *bounded = "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":2,"
                          "\"maxLength\":7},\"t\":{\"type\":\"string\",\"maxLength\":40}},\"required\":[\"s\",\"t\"],"
                          "\"additionalProperties\":false}";
    REQUIRE(!iris_grammar_from_schema(bounded, &g, &err));
    REQUIRE(!iris_grammar_matcher_init(&m, g, q.v, &err));
    const char *bsteps[] = {"{\"s\":\"", "a", "\xe4\xb8", "\xad b", "cd", "\",\"t\":\"", "0123456789abcdefghij",
                            "0123456789abcdefg"};
    for (size_t i = 0; i < sizeof bsteps / sizeof *bsteps; i++) {
        CHECKF(!iris_grammar_matcher_accept_bytes(m, bsteps[i], strlen(bsteps[i]), &err), "bounded %zu: %s", i,
               err.msg);
        int n_allowed = 0;
        CHECKF(mask_vs_bytes(m, &q, mask, &n_allowed) == 0, "bounded step %zu", i);
        CHECKF(n_allowed > 0, "bounded step %zu: nothing allowed", i);
    }
    free(mask);
    iris_grammar_matcher_free(m);
    iris_grammar_free(g);
    qwen_close(&q);
}

/* The matcher keeps its memo and stacks across masks until a budget drops them and rebuilds
 * the current stacks (ids change, the mask cache goes).  With no budget (a reset after every
 * mask) and with the default one, along an enum and a bounded string, masks match the bytes
 * token by token, states met again included. */
IRIS_TEST(grammar_mask_reset_qwen) {
    qwen q;
    int rc = qwen_open(&q);
    if (rc == -1) IRIS_TEST_SKIP("no qwen3 tokenizer asset (IRIS_ASSETS)");
    REQUIRE(rc == 0);
    static const char *syl[] = {"ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po"};
    size_t cap = 64 * 1024, n = 0;
    char *schema = malloc(cap);
    n += (size_t)snprintf(schema + n, cap - n, "{\"type\":\"object\",\"properties\":{\"w\":{\"enum\":[");
    for (int i = 0; i < 600; i++)
        n += (size_t)snprintf(schema + n, cap - n, "%s\"%s%s%s %d\"", i ? "," : "", syl[i % 10], syl[i / 10 % 10],
                              syl[i / 100], i);
    snprintf(schema + n, cap - n, "]},\"s\":{\"type\":\"string\",\"maxLength\":5}},\"required\":[\"w\",\"s\"],"
                                  "\"additionalProperties\":false}");
    iris_grammar *g = NULL;
    iris_grammar_matcher *m = NULL;
    iris_err err = {0};
    REQUIRE(!iris_grammar_from_schema(schema, &g, &err));
    uint32_t *mask = malloc(151936 / 8);
    const char *steps[] = {"{\"w\":\"", "", "ka", "lo", "ka 1", "0\",\"s\":\"ab", "", "c"};
    for (int keep = 0; keep < 2; keep++) {
        REQUIRE(!iris_grammar_matcher_init(&m, g, q.v, &err));
        if (!keep) gm_keep_rows(m, 0);
        for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
            CHECKF(!iris_grammar_matcher_accept_bytes(m, steps[i], strlen(steps[i]), &err), "keep %d step %zu: %s",
                   keep, i, err.msg);
            int n_allowed = 0;
            CHECKF(mask_vs_bytes(m, &q, mask, &n_allowed) == 0, "keep %d step %zu", keep, i);
            CHECKF(n_allowed > 0, "keep %d step %zu: nothing allowed", keep, i);
        }
        iris_grammar_matcher_free(m);
    }
    free(mask);
    free(schema);
    iris_grammar_free(g);
    qwen_close(&q);
}

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random tokens from the mask until complete; the text, or NULL when it did not finish. */
static char *random_walk(const qwen *q, iris_grammar_matcher *m, uint64_t seed, uint32_t *mask) {
    static char text[1 << 14];
    size_t n = 0;
    int *allowed = malloc(151936 * sizeof *allowed);
    for (int step = 0; step < 400; step++) {
        if (iris_grammar_matcher_complete(m) && (!iris_grammar_matcher_can_continue(m) || rnd(&seed) % 4 == 0)) break;
        if (iris_grammar_matcher_mask(m, mask, NULL)) break;
        int na = 0;
        for (int t = 0; t < 151936; t++)
            if ((mask[t >> 5] >> (t & 31)) & 1) allowed[na++] = t;
        if (!na) break;
        int t = allowed[rnd(&seed) % (uint64_t)na];
        size_t len = 0;
        const char *s = iris_tok_token(q->tok, t, &len);
        if (iris_grammar_matcher_accept_token(m, t, NULL) || n + len >= sizeof text) break;
        memcpy(text + n, s, len);
        n += len;
    }
    free(allowed);
    text[n] = 0;
    return iris_grammar_matcher_complete(m) ? text : NULL;
}

IRIS_TEST(grammar_random_walk_qwen) {
    qwen q;
    int rc = qwen_open(&q);
    if (rc == -1) IRIS_TEST_SKIP("no qwen3 tokenizer asset (IRIS_ASSETS)");
    REQUIRE(rc == 0);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"label\":{\"type\":\"string\",\"minLength\":1,"
                         "\"maxLength\":6},\"count\":{\"type\":\"integer\",\"minimum\":-3,\"maximum\":300},"
                         "\"colour\":{\"enum\":[\"red\",\"green\",\"dark blue\"]},\"box\":{\"type\":\"array\","
                         "\"items\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":999},\"minItems\":4,"
                         "\"maxItems\":4}},\"required\":[\"label\",\"count\",\"box\"],\"additionalProperties\":false}";
    iris_grammar *g = NULL;
    iris_err err = {0};
    REQUIRE(!iris_grammar_from_schema(schema, &g, &err));
    uint32_t *mask = malloc(151936 / 8);
    for (uint64_t seed = 1; seed <= 6; seed++) {
        iris_grammar_matcher *m = NULL;
        REQUIRE(!iris_grammar_matcher_init(&m, g, q.v, &err));
        char *text = random_walk(&q, m, seed * 0x9e3779b97f4a7c15ull, mask);
        CHECKF(text != NULL, "seed %d did not finish", (int)seed);
        if (getenv("IRIS_TEST_VERBOSE")) fprintf(stderr, "seed %d: %s\n", (int)seed, text ? text : "");
        json_error_t je;
        json_t *j = text ? json_loads(text, 0, &je) : NULL;
        CHECKF(j != NULL, "seed %d: %s does not parse", (int)seed, text ? text : "");
        if (j) {
            json_t *label = json_object_get(j, "label"), *count = json_object_get(j, "count");
            json_t *box = json_object_get(j, "box"), *col = json_object_get(j, "colour");
            CHECK(json_is_string(label) && json_string_length(label) >= 1);
            CHECK(json_is_integer(count) && json_integer_value(count) >= -3 && json_integer_value(count) <= 300);
            CHECK(json_is_array(box) && json_array_size(box) == 4);
            CHECK(!col || (json_is_string(col) && (!strcmp(json_string_value(col), "red") ||
                           !strcmp(json_string_value(col), "green") || !strcmp(json_string_value(col), "dark blue"))));
            size_t n_keys = json_object_size(j);
            CHECK(n_keys == 3 || n_keys == 4);
        }
        json_decref(j);
        iris_grammar_matcher_free(m);
    }
    free(mask);
    iris_grammar_free(g);
    qwen_close(&q);
}

/* 1 when `s` is a valid RFC 3339 date/time/date-time, a uuid or an email, checked by hand (not
 * through the grammar's patterns). */
static int leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static int valid_date(const char *s) {
    int y, mo, d, n = 0;
    if (sscanf(s, "%4d-%2d-%2d%n", &y, &mo, &d, &n) != 3 || n != 10) return 0;
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return mo >= 1 && mo <= 12 && d >= 1 && d <= days[mo - 1] + (mo == 2 && leap(y));
}

static int valid_time(const char *s) {
    int h, mi, sec, n = 0;
    if (sscanf(s, "%2d:%2d:%2d%n", &h, &mi, &sec, &n) != 3 || n != 8 || h > 23 || mi > 59 || sec > 59) return 0;
    s += 8;
    if (*s == '.') {
        size_t k = strspn(s + 1, "0123456789");
        if (k < 1) return 0;
        s += 1 + k;
    }
    if (!strcmp(s, "Z")) return 1;
    return (*s == '+' || *s == '-') && sscanf(s + 1, "%2d:%2d%n", &h, &mi, &n) == 2 && n == 5 && !s[6] && h <= 23 &&
           mi <= 59;
}

static int valid_uuid(const char *s) {
    for (int i = 0; i < 36; i++)
        if ((i == 8 || i == 13 || i == 18 || i == 23) ? s[i] != '-' : !isxdigit((unsigned char)s[i])) return 0;
    return s[36] == 0;
}

static int valid_email(const char *s) {
    const char *at = strchr(s, '@');
    if (!at || at == s || strchr(at + 1, '@') || s[0] == '.' || at[-1] == '.' || strstr(s, "..")) return 0;
    for (const char *c = s; c < at; c++)
        if (!isalnum((unsigned char)*c) && !strchr("!#$%&'*+/=?^_`{|}~-.", *c)) return 0;
    int labels = 0;
    for (const char *l = at + 1; *l; labels++) {
        size_t k = strspn(l, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-");
        if (k < 1 || k > 63 || l[0] == '-' || l[k - 1] == '-' || (l[k] && l[k] != '.')) return 0;
        l += k + (l[k] == '.');
        if (!l[0] && l[-1] == '.') return 0;
    }
    return labels >= 2;
}

/* Random walks under patterns and formats over the Qwen vocabulary: every string written
 * matches its pattern in PCRE2 (ECMA-262 syntax of the subset, \u escapes as JavaScript's) and
 * every format validates. */
IRIS_TEST(grammar_pattern_walk_qwen) {
    qwen q;
    int rc = qwen_open(&q);
    if (rc == -1) IRIS_TEST_SKIP("no qwen3 tokenizer asset (IRIS_ASSETS)");
    REQUIRE(rc == 0);
    static const char *const patterns[] = {
        "^[A-Z]{2}-\\d{3,5}(?:\\.[a-z]{1,6})?$",
        "^(?:red|green|dark (?:blue|grey))[!?]{0,3}$",
        "^\\w{1,12}@[^\\s\"]{1,8}\\.(com|org)$",
        "^[^a-z]{1,5}\"\\\\.{2}$",
        "^\\u00e9[\\u4e00-\\u9fff]{1,3}\\x41?$",
        "^\\S{2}\\s\\D\\W$",
    };
    const char *formats[] = {"date", "time", "date-time", "uuid", "email"};
    uint32_t *mask = malloc(151936 / 8);
    int checked = 0;
    for (size_t i = 0; i < sizeof patterns / sizeof *patterns + 5; i++) {
        int is_fmt = i >= sizeof patterns / sizeof *patterns;
        const char *what = is_fmt ? formats[i - sizeof patterns / sizeof *patterns] : patterns[i];
        json_t *sj = json_pack("{s:s, s:s}", "type", "string", is_fmt ? "format" : "pattern", what);
        char *schema = json_dumps(sj, JSON_COMPACT);
        iris_grammar *g = NULL;
        iris_err err = {0};
        CHECKF(!iris_grammar_from_schema(schema, &g, &err), "%s: %s", schema, err.msg);
        int errc;
        PCRE2_SIZE erro;
        pcre2_code *re = is_fmt ? NULL
                                : pcre2_compile((PCRE2_SPTR)what, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_ALT_BSUX, &errc,
                                                &erro, NULL);
        CHECKF(is_fmt || re, "pcre2 does not compile %s", what);
        for (uint64_t seed = 1; g && seed <= 4; seed++) {
            iris_grammar_matcher *m = NULL;
            REQUIRE(!iris_grammar_matcher_init(&m, g, q.v, &err));
            char *text = random_walk(&q, m, seed * 0x9e3779b97f4a7c15ull + i, mask);
            CHECKF(text != NULL, "%s seed %d did not finish", what, (int)seed);
            json_error_t je;
            json_t *j = text ? json_loads(text, JSON_DECODE_ANY, &je) : NULL;
            CHECKF(json_is_string(j), "%s seed %d: %s is not a JSON string", what, (int)seed, text ? text : "");
            if (getenv("IRIS_TEST_VERBOSE")) fprintf(stderr, "%s: %s\n", what, text ? text : "");
            if (json_is_string(j)) {
                const char *v = json_string_value(j);
                int ok;
                if (!is_fmt) {
                    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
                    ok = pcre2_match(re, (PCRE2_SPTR)v, json_string_length(j), 0, 0, md, NULL) >= 0;
                    pcre2_match_data_free(md);
                } else if (!strcmp(what, "date-time")) {
                    char d[11] = {0};
                    memcpy(d, v, strlen(v) >= 10 ? 10 : strlen(v));
                    ok = strlen(v) > 11 && v[10] == 'T' && valid_date(d) && valid_time(v + 11);
                } else {
                    ok = !strcmp(what, "date") ? valid_date(v) : !strcmp(what, "time") ? valid_time(v)
                         : !strcmp(what, "uuid") ? valid_uuid(v) : valid_email(v);
                }
                CHECKF(ok, "%s seed %d: \"%s\" does not match", what, (int)seed, v);
                checked += ok;
            }
            json_decref(j);
            iris_grammar_matcher_free(m);
        }
        pcre2_code_free(re);
        iris_grammar_free(g);
        free(schema);
        json_decref(sj);
    }
    CHECK_EQ_INT(checked, 4 * (int)(sizeof patterns / sizeof *patterns + 5));
    free(mask);
    qwen_close(&q);
}
