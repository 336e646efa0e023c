/* test_grammar_text.c: the matcher's masks inside strings from the vocabulary's token classes
 * (grammar.c text_mask, grammar_vocab.c text_build) against the trie walk they replace and the
 * byte matcher, bit for bit over the real Qwen vocabulary: the tables themselves, strings read
 * a character (or a byte) at a time through every remaining length of a maxLength, escapes,
 * multi-byte UTF-8 cut anywhere, and seeded random walks that favour tokens leaving a string
 * (quotes, backslashes) over schemas with numbers, enums, patterns, nesting and tool calls. */
#include <jansson.h>
#include <stdlib.h>

#include "model/grammar_internal.h"
#include "test.h"

#define NV 151936
#define WORDS ((NV + 31) / 32)

typedef struct qv {
    iris_tok *tok;
    iris_vocab *v;
} qv;

static int qv_open(qv *q) {
    memset(q, 0, sizeof *q);
    const char *path = iris_test_asset("qwen3/tokenizer.json");
    if (!path) return -1;
    iris_err err = {0};
    if (iris_tok_load(path, &q->tok, &err) || iris_vocab_build(q->tok, NV, &q->v, &err)) {
        iris_test_fail(__FILE__, __LINE__, "%s", err.msg);
        return -2;
    }
    return 0;
}

static void qv_close(qv *q) {
    iris_vocab_free(q->v);
    iris_tok_free(q->tok);
}

static int bit(const uint32_t *m, int t) { return (m[t >> 5] >> (t & 31)) & 1; }

/* Code points of s when it is JSON string text written raw (printable ASCII but '"', '\\' and
 * DEL; well-formed UTF-8 with no surrogates, overlongs or code points past U+10FFFF, the last
 * character possibly cut short), else -1.  Written apart from grammar_internal.h's text_step. */
static int raw_text_cp(const unsigned char *s, size_t n) {
    int cp = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        int more;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            if (c < 0x20 || c == '"' || c == '\\' || c == 0x7F) return -1;
            more = 0;
        } else if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else return -1;
        cp++;
        i++;
        for (int k = 0; k < more && i < n; k++, i++) {
            if (s[i] < (k ? 0x80 : lo) || s[i] > (k ? 0xBF : hi)) return -1;
        }
    }
    return cp;
}

/* The vocabulary's token classes against raw_text_cp for every token: rows by code points, the
 * long list, and the mixed tokens (each once, in order, with their text part's boundary). */
IRIS_TEST(grammar_text_tables_qwen) {
    qv q;
    int rc = qv_open(&q);
    if (rc == -1) IRIS_TEST_SKIP("no qwen3 tokenizer asset (IRIS_ASSETS)");
    REQUIRE(rc == 0);
    const iris_vocab *v = q.v;
    REQUIRE(v->text_ok);
    int bad = 0, n_pure = 0, n_other = 0, max_cp = 0;
    unsigned char *in_mix = calloc(NV, 1);
    for (int x = 0; x < v->n_mix; x++) in_mix[v->mix_ids[x]]++;
    for (int t = 0; t < NV; t++) {
        size_t len = 0;
        const char *s = iris_tok_token(q.tok, t, &len);
        int used = s && len && !iris_tok_is_special(q.tok, t);
        int cp = used ? raw_text_cp((const unsigned char *)s, len) : -1;
        n_pure += cp >= 0;
        n_other += used && cp < 0;
        if (cp > max_cp) max_cp = cp;
        for (int d = 0; d <= TEXT_ROWS; d++) {
            int want = cp >= 0 && (d == TEXT_ROWS || cp <= d);
            if (bit(v->text_rows + (size_t)d * WORDS, t) != want && bad++ < 5)
                fprintf(stderr, "token %d \"%.*s\" (%d code points): row %d has %d\n", t, (int)len, s, cp, d, !want);
        }
        if (in_mix[t] != (used && cp < 0) && bad++ < 5) fprintf(stderr, "token %d: %d times mixed\n", t, in_mix[t]);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(v->text_max, max_cp);
    CHECK_EQ_INT(v->n_mix, n_other);
    CHECKF(n_pure > 140000 && n_other > 1000, "%d pure, %d mixed", n_pure, n_other);
    int n_long = 0;
    for (int t = 0; t < NV; t++) {
        size_t len = 0;
        const char *s = iris_tok_token(q.tok, t, &len);
        n_long += s && len && !iris_tok_is_special(q.tok, t) && raw_text_cp((const unsigned char *)s, len) >= TEXT_ROWS;
    }
    CHECK_EQ_INT(v->n_long, n_long);
    for (int i = 0; i < v->n_long; i++) {
        size_t len = 0;
        const char *s = iris_tok_token(q.tok, v->long_ids[i], &len);
        CHECK_EQ_INT(raw_text_cp((const unsigned char *)s, len), v->long_cp[i]);
        CHECK(i == 0 || v->long_cp[i - 1] <= v->long_cp[i]);
    }
    /* Mixed: the bytes before mix_off are mix_j whole characters of text; sorted by (j, bytes
     * from mix_off); runs of one j and one byte start at mix_grp. */
    int order = 0, bound = 0, grp = 0, g = 0;
    for (int x = 0; x < v->n_mix; x++) {
        const unsigned char *s = (const unsigned char *)v->str[v->mix_ids[x]];
        size_t len = v->len[v->mix_ids[x]];
        int off = v->mix_off[x];
        bound += raw_text_cp(s, (size_t)off) != v->mix_j[x] || raw_text_cp(s, len) >= 0 || off >= (int)len;
        int starts = 1;
        if (x) {
            const unsigned char *p = (const unsigned char *)v->str[v->mix_ids[x - 1]] + v->mix_off[x - 1];
            size_t pl = v->len[v->mix_ids[x - 1]] - v->mix_off[x - 1], l = len - (size_t)off;
            int c = memcmp(p, s + off, pl < l ? pl : l);
            if (!c) c = (pl > l) - (pl < l);
            order += v->mix_j[x - 1] > v->mix_j[x] || (v->mix_j[x - 1] == v->mix_j[x] && c > 0);
            starts = v->mix_j[x - 1] != v->mix_j[x] || p[0] != s[off];
        }
        if (starts) grp += g >= v->n_grp || v->mix_grp[g++] != x;
    }
    CHECK_EQ_INT(bound, 0);
    CHECK_EQ_INT(order, 0);
    CHECK_EQ_INT(grp, 0);
    CHECK_EQ_INT(g, v->n_grp);
    CHECK_EQ_INT(v->mix_grp[v->n_grp], v->n_mix);
    free(in_mix);
    qv_close(&q);
}

/* Two matchers over one grammar kept in step: `fast` takes masks inside strings from the token
 * classes, `slow` walks the trie. */
typedef struct pair {
    iris_grammar_matcher *fast, *slow;
    uint32_t *mf, *ms;
    int states, text_states, ref_states;
} pair;

static void pair_init(pair *p, const iris_grammar *g, const iris_vocab *v, int keep_rows) {
    memset(p, 0, sizeof *p);
    iris_err err = {0};
    if (iris_grammar_matcher_init(&p->fast, g, v, &err) || iris_grammar_matcher_init(&p->slow, g, v, &err))
        iris_test_fail(__FILE__, __LINE__, "%s", err.msg);
    gm_no_text(p->slow, 1);
    if (keep_rows >= 0) gm_keep_rows(p->fast, keep_rows);
    p->mf = malloc(WORDS * sizeof *p->mf);
    p->ms = malloc(WORDS * sizeof *p->ms);
}

static void pair_free(pair *p) {
    iris_grammar_matcher_free(p->fast);
    iris_grammar_matcher_free(p->slow);
    free(p->mf);
    free(p->ms);
}

/* Both masks of this state, compared bit for bit, and with `ref` also against the byte matcher
 * token by token; returns the mismatches (-1 when a mask fails). */
static int pair_check(pair *p, const qv *q, int ref, const char *where) {
    iris_err err = {0};
    uint64_t before = gm_text_masks(p->fast);
    if (iris_grammar_matcher_mask(p->fast, p->mf, &err) || iris_grammar_matcher_mask(p->slow, p->ms, &err)) {
        fprintf(stderr, "%s: %s\n", where, err.msg);
        return -1;
    }
    p->states++;
    p->text_states += gm_text_masks(p->fast) > before;
    int bad = 0;
    for (int t = 0; t < NV; t++) {
        int want = bit(p->ms, t);
        if (ref) {
            size_t len = 0;
            const char *s = iris_tok_token(q->tok, t, &len);
            want = s && len && !iris_tok_is_special(q->tok, t) && iris_grammar_matcher_allows(p->fast, s, len);
            if (want != bit(p->ms, t) && bad++ < 5)
                fprintf(stderr, "%s: token %d: walk %d, bytes %d\n", where, t, !want, want);
        }
        if (bit(p->mf, t) != want && bad++ < 5) {
            size_t len = 0;
            const char *s = iris_tok_token(q->tok, t, &len);
            fprintf(stderr, "%s: token %d \"%.*s\": text mask %d, reference %d\n", where, t, (int)len, s, !want, want);
        }
    }
    p->ref_states += ref;
    return bad;
}

static int pair_accept(pair *p, const char *s, size_t n) {
    iris_err err = {0};
    int a = iris_grammar_matcher_accept_bytes(p->fast, s, n, &err);
    int b = iris_grammar_matcher_accept_bytes(p->slow, s, n, NULL);
    if (a != b) fprintf(stderr, "accept \"%.*s\": %d against %d\n", (int)n, s, a, b);
    return a || b ? -1 : 0;
}

static iris_grammar *schema(const char *json) {
    iris_grammar *g = NULL;
    iris_err err = {0};
    if (iris_grammar_from_schema(json, &g, &err)) iris_test_fail(__FILE__, __LINE__, "%s: %s", json, err.msg);
    return g;
}

/* Strings read a piece at a time: every remaining length of a maxLength (with a minLength), a
 * character cut after each of its bytes, escapes (\n, \", \\, \u00e9 cut inside), then a
 * free string, keys, an integer, an enum, a pattern refusing one character (its stacks read
 * every lead byte but not every continuation) and two strings of different bounds at once
 * (stacks of two parents); the masks at every state, the byte matcher at every other. */
IRIS_TEST(grammar_text_mask_steps_qwen) {
    qv q;
    int rc = qv_open(&q);
    if (rc == -1) IRIS_TEST_SKIP("no qwen3 tokenizer asset (IRIS_ASSETS)");
    REQUIRE(rc == 0);
    iris_grammar *g = schema(
        "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":3,\"maxLength\":14},"
        "\"f\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"},\"e\":{\"enum\":[\"ab\\\"c\",\"a\\\\b\","
        "\"caf\\u00e9\"]},\"p\":{\"type\":\"string\",\"pattern\":\"^[^\\\\u00e9]{0,6}$\"},\"u\":{\"anyOf\":"
        "[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"string\",\"minLength\":4,\"maxLength\":5}]}},"
        "\"required\":[\"s\",\"f\",\"n\",\"e\",\"p\",\"u\"],\"additionalProperties\":false}");
    REQUIRE(g != NULL);
    const char *pieces[] = {"{\"s\":\"", "a", "\xc3", "\xa9", "\xe4", "\xb8", "\xad", "\\", "n", "\xf0", "\x9f",
                            "\x98", "\x80", "\\\"", "\\\\", "\\u", "00", "e", "9", " ", "Z", "~", "/", "x", "\"",
                            ",\"f\":\"", "q", "\\t", "\xe2\x82\xac", "\"", ",\"n\":", "-", "12", ",\"e\":\"", "ab",
                            "\\\"", "c\"", ",\"p\":\"", "x", "\xc3\xa8", "\"", ",\"u\":\"", "a",
                            "\xc3\xa9", "\xe4\xb8\xad", "b", "\"", "}"};
    for (int keep = 0; keep < 2; keep++) {
        pair p;
        pair_init(&p, g, q.v, keep ? -1 : 0);
        for (size_t i = 0; i < sizeof pieces / sizeof *pieces; i++) {
            char where[64];
            snprintf(where, sizeof where, "keep %d piece %zu", keep, i);
            CHECKF(pair_accept(&p, pieces[i], strlen(pieces[i])) == 0, "%s", where);
            CHECKF(pair_check(&p, &q, keep && (i % 2 == 0 || i >= 38), where) == 0, "%s", where);
        }
        CHECK(iris_grammar_matcher_complete(p.fast));
        CHECKF(p.text_states >= 20, "%d of %d states from the token classes", p.text_states, p.states);
        pair_free(&p);
    }
    iris_grammar_free(g);
    qv_close(&q);
}

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A random allowed token of mask, a token with a quote or a backslash half the time when one is
 * allowed (they leave strings and escape); -1 when none. */
static int pick(const qv *q, const uint32_t *mask, uint64_t *seed, int *all, int *esc) {
    int na = 0, ne = 0;
    for (int t = 0; t < NV; t++) {
        if (!bit(mask, t)) continue;
        all[na++] = t;
        size_t len = 0;
        const char *s = iris_tok_token(q->tok, t, &len);
        if (memchr(s, '"', len) || memchr(s, '\\', len)) esc[ne++] = t;
    }
    if (!na) return -1;
    if (ne && rnd(seed) % 2) return esc[rnd(seed) % (uint64_t)ne];
    return all[rnd(seed) % (uint64_t)na];
}

/* Seeded walks through each grammar, both masks compared at every step; returns the states
 * whose mask came from the token classes (-1 on a mismatch). */
static int walks(const qv *q, const iris_grammar *g, int n_seeds, int keep_rows, const char *name) {
    int *all = malloc(NV * sizeof *all), *esc = malloc(NV * sizeof *esc), states = 0, text = 0, ok = 1;
    for (int seed_i = 1; seed_i <= n_seeds && ok; seed_i++) {
        uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)seed_i + 77;
        pair p;
        pair_init(&p, g, q->v, keep_rows);
        for (int step = 0; step < 120 && ok; step++) {
            char where[96];
            snprintf(where, sizeof where, "%s seed %d step %d", name, seed_i, step);
            if (pair_check(&p, q, 0, where)) ok = 0;
            int done = iris_grammar_matcher_complete(p.fast);
            if (done && (!iris_grammar_matcher_can_continue(p.fast) || rnd(&seed) % 4 == 0)) break;
            int t = ok ? pick(q, p.mf, &seed, all, esc) : -1;
            if (t < 0) break;
            size_t len = 0;
            const char *s = iris_tok_token(q->tok, t, &len);
            if (pair_accept(&p, s, len)) ok = 0;
        }
        states += p.states;
        text += p.text_states;
        pair_free(&p);
    }
    if (getenv("IRIS_TEST_VERBOSE")) fprintf(stderr, "%s: %d states, %d from the token classes\n", name, states, text);
    free(all);
    free(esc);
    return ok ? text : -1;
}

IRIS_TEST(grammar_text_mask_walks_qwen) {
    qv q;
    int rc = qv_open(&q);
    if (rc == -1) IRIS_TEST_SKIP("no qwen3 tokenizer asset (IRIS_ASSETS)");
    REQUIRE(rc == 0);
    static const char *const schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"caption\":{\"type\":\"string\",\"maxLength\":60},\"count\":{\"type\":"
        "\"integer\"},\"tags\":{\"type\":\"array\",\"maxItems\":8,\"items\":{\"type\":\"string\",\"maxLength\":12}}},"
        "\"required\":[\"caption\",\"count\",\"tags\"],\"additionalProperties\":false}",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":5},\"b\":"
        "{\"type\":\"string\"},\"x\":{\"type\":\"number\"},\"k\":{\"enum\":[\"red\",\"dark \\\"blue\\\"\",\"a\\\\b\","
        "\"\\u00e9t\\u00e9\",7,null]}},\"required\":[\"a\",\"b\",\"x\",\"k\"],\"additionalProperties\":false}",
        "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
        "\"kids\":{\"type\":\"array\",\"maxItems\":2,\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"name\"],"
        "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}",
        "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"string\",\"maxLength\":3},{\"type\":\"string\","
        "\"pattern\":\"^[a-z\\\"]{2,6}$\"},{\"type\":\"object\"}]},\"maxItems\":4}",
        "{\"type\":\"object\"}",
    };
    int text = 0, n;
    for (size_t i = 0; i < sizeof schemas / sizeof *schemas; i++) {
        iris_grammar *g = schema(schemas[i]);
        REQUIRE(g != NULL);
        char name[32];
        snprintf(name, sizeof name, "schema %zu", i);
        CHECKF((n = walks(&q, g, 4, -1, name)) >= 0, "%s", name);
        text += n;
        snprintf(name, sizeof name, "schema %zu, no memo kept", i);
        CHECKF((n = walks(&q, g, 2, 0, name)) >= 0, "%s", name);
        text += n;
        iris_grammar_free(g);
    }
    CHECKF(text > 150, "%d states from the token classes", text);
    iris_grammar *g = NULL;
    iris_err err = {0};
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\","
                        "\"properties\":{\"item\":{\"type\":\"string\",\"maxLength\":10},\"n\":{\"type\":\"integer\"}},"
                        "\"required\":[\"item\"]}}}]";
    REQUIRE(!iris_grammar_from_tools(tools, NULL, 1, 1, &g, &err));
    CHECK(walks(&q, g, 3, -1, "tool call") > 10);
    iris_grammar_free(g);
    qv_close(&q);
}
