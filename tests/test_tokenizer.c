/* test_tokenizer.c: the byte-level BPE tokenizer against HF `tokenizers`.
 *
 * Fixtures (tools/ref_tokenizer.py; ids recorded on the GPU machine with
 * tokenizers 0.23.2, Tokenizer.from_file + add_special_tokens=False):
 *   tests/fixtures/tokenizer/corpus.jsonl       2,286 strings, one JSON string a line
 *   tests/fixtures/tokenizer/qwen3_ids.jsonl    the real Qwen tokenizer's ids, one array a line
 *   tests/fixtures/tokenizer/qwen3_decode.jsonl id lists and HF's decode (with/without specials)
 *   tests/fixtures/tokenizer/tiny_ids.jsonl     the tiny test tokenizer (specials at ids 480+)
 *   tests/fixtures/tokenizer/flags_*            added tokens with lstrip/rstrip/single_word/
 *                                               normalized, merges in the "a b" form
 * The real tokenizer is the cached asset qwen3/tokenizer.json (scripts/setup);
 * the CLI tests run the iris binary named by $IRIS_BIN (default build/iris).
 */
#include "test.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "formats/tok_internal.h"
#include "formats/tokenizer.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

/* Every line of a JSONL file, parsed; NULL when the file is missing. */
static json_t *read_jsonl(const char *path) {
    char *text = slurp(path, NULL);
    if (!text) return NULL;
    json_t *rows = json_array();
    for (char *line = text, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) nl = line + strlen(line) - 1;
        json_error_t je;
        json_t *v = json_loadb(line, (size_t)(nl - line + 1), JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!v) {
            fprintf(stderr, "  %s: bad line: %s\n", path, je.text);
            json_decref(rows);
            free(text);
            return NULL;
        }
        json_array_append_new(rows, v);
        if (!nl[1]) break;
    }
    free(text);
    return rows;
}

/* The real tokenizer, loaded once and shared by the tests (never freed). */
static iris_tok *load_qwen(void) {
    static iris_tok *shared;
    if (shared) return shared;
    const char *path = iris_test_asset("qwen3/tokenizer.json");
    if (!path) {
        iris_test_fail(__FILE__, __LINE__, "the Qwen tokenizer is missing: run scripts/setup");
        return NULL;
    }
    iris_err err = {0};
    iris_tok *tok = NULL;
    if (iris_tok_load(path, &tok, &err)) iris_test_fail(__FILE__, __LINE__, "load: %s", err.msg);
    return shared = tok;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    fprintf(stderr, "    %s [", label);
    for (size_t i = 0; i < n && i < 60; i++) fprintf(stderr, i ? ", %d" : "%d", (int)ids[i]);
    fprintf(stderr, "%s] (%zu ids)\n", n > 60 ? ", ..." : "", n);
}

/* Encode every text and compare with the expected id arrays; report the
 * first mismatches with the string and both lists. */
static void check_encodings(iris_tok *tok, json_t *texts, json_t *expected, const char *what) {
    size_t n_bad = 0, n = json_array_size(texts);
    CHECK_EQ_INT(n, json_array_size(expected));
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(texts, i), *want = json_array_get(expected, i);
        iris_tok_ids ids = {0};
        iris_err err = {0};
        int rc = iris_tok_encode(tok, json_string_value(s), json_string_length(s), &ids, &err);
        int same = rc == 0 && ids.n == json_array_size(want);
        for (size_t k = 0; same && k < ids.n; k++) same = ids.ids[k] == json_integer_value(json_array_get(want, k));
        if (!same && n_bad++ < 5) {
            char *q = json_dumps(s, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
            iris_test_fail(__FILE__, __LINE__, "%s line %zu: %.300s%s", what, i + 1, q, rc ? err.msg : "");
            free(q);
            print_ids("iris", ids.ids, ids.n);
            int32_t w[64];
            size_t nw = json_array_size(want);
            for (size_t k = 0; k < nw && k < 64; k++) w[k] = (int32_t)json_integer_value(json_array_get(want, k));
            print_ids("HF  ", w, nw);
        }
        iris_tok_ids_free(&ids);
    }
    if (n_bad) iris_test_fail(__FILE__, __LINE__, "%s: %zu of %zu strings differ from HF", what, n_bad, n);
}

IRIS_TEST(tokenizer_corpus_qwen3) {
    iris_tok *tok = load_qwen();
    json_t *texts = read_jsonl("tests/fixtures/tokenizer/corpus.jsonl");
    json_t *ids = read_jsonl("tests/fixtures/tokenizer/qwen3_ids.jsonl");
    REQUIRE(tok && texts && ids);
    CHECK(json_array_size(texts) >= 2000);
    check_encodings(tok, texts, ids, "qwen3");
    json_decref(texts);
    json_decref(ids);
}

/* Split {"text", "ids"} rows into two arrays. */
static void split_rows(json_t *rows, json_t **texts, json_t **ids) {
    *texts = json_array();
    *ids = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        json_array_append(*texts, json_object_get(r, "text"));
        json_array_append(*ids, json_object_get(r, "ids"));
    }
}

IRIS_TEST(tokenizer_tiny_and_flags) {
    const char *files[2][2] = {{"tests/fixtures/tiny/tokenizer/tokenizer.json", "tests/fixtures/tokenizer/tiny_ids.jsonl"},
                               {"tests/fixtures/tokenizer/flags_tokenizer.json", "tests/fixtures/tokenizer/flags_ids.jsonl"}};
    for (int f = 0; f < 2; f++) {
        iris_err err = {0};
        iris_tok *tok = NULL;
        CHECKF(iris_tok_load(files[f][0], &tok, &err) == 0, "%s", err.msg);
        json_t *rows = read_jsonl(files[f][1]), *texts, *ids;
        REQUIRE(tok && rows);
        split_rows(rows, &texts, &ids);
        check_encodings(tok, texts, ids, files[f][1]);
        json_decref(texts);
        json_decref(ids);
        json_decref(rows);
        iris_tok_free(tok);
    }
}

IRIS_TEST(tokenizer_decode_matches_hf) {
    iris_tok *tok = load_qwen();
    json_t *rows = read_jsonl("tests/fixtures/tokenizer/qwen3_decode.jsonl");
    REQUIRE(tok && rows);
    size_t i, n_bad = 0;
    json_t *r;
    json_array_foreach(rows, i, r) {
        json_t *jids = json_object_get(r, "ids");
        size_t n = json_array_size(jids);
        int32_t *ids = malloc((n + 1) * sizeof *ids);
        for (size_t k = 0; k < n; k++) ids[k] = (int32_t)json_integer_value(json_array_get(jids, k));
        for (int skip = 0; skip < 2; skip++) {
            const char *want = json_string_value(json_object_get(r, skip ? "text_skip" : "text"));
            char *text = NULL;
            size_t len = 0;
            iris_err err = {0};
            int rc = iris_tok_decode(tok, ids, n, skip ? IRIS_TOK_SKIP_SPECIAL : 0, &text, &len, &err);
            if ((rc || strcmp(text, want)) && n_bad++ < 5)
                iris_test_fail(__FILE__, __LINE__, "decode line %zu (skip %d): \"%s\" != HF \"%s\"", i + 1, skip,
                               text ? text : err.msg, want);
            /* The stream decoder: pieces are valid UTF-8 and add up to the same text. */
            iris_tok_stream st;
            iris_tok_stream_init(&st, tok, skip ? IRIS_TOK_SKIP_SPECIAL : 0);
            char acc[8192];
            size_t acc_n = 0;
            const char *piece;
            size_t pn;
            for (size_t k = 0; k <= n; k++) {
                rc = k < n ? iris_tok_stream_push(&st, ids[k], &piece, &pn, &err) : iris_tok_stream_flush(&st, &piece, &pn, &err);
                CHECK_EQ_INT(rc, 0);
                CHECK(iris_utf8_check(piece, pn, NULL) == 0);
                if (acc_n + pn < sizeof acc) memcpy(acc + acc_n, piece, pn);
                acc_n += pn;
            }
            CHECK(acc_n < sizeof acc);
            acc[acc_n < sizeof acc ? acc_n : 0] = 0;
            if (strcmp(acc, want) && n_bad++ < 5)
                iris_test_fail(__FILE__, __LINE__, "stream line %zu: \"%s\" != HF \"%s\"", i + 1, acc, want);
            iris_tok_stream_free(&st);
            free(text);
        }
        free(ids);
    }
    CHECK_EQ_INT(n_bad, 0);
    json_decref(rows);
}

/* decode(encode(s)) gives back s after NFC (outside added tokens). */
IRIS_TEST(tokenizer_round_trip) {
    iris_tok *tok = load_qwen();
    json_t *texts = read_jsonl("tests/fixtures/tokenizer/corpus.jsonl");
    REQUIRE(tok && texts);
    size_t i, n_bad = 0;
    json_t *s;
    json_array_foreach(texts, i, s) {
        iris_tok_ids ids = {0};
        iris_err err = {0};
        char *back = NULL, *nfc = NULL;
        size_t blen = 0, nlen = 0;
        CHECK(iris_tok_encode(tok, json_string_value(s), json_string_length(s), &ids, &err) == 0);
        CHECK(iris_tok_decode(tok, ids.ids, ids.n, 0, &back, &blen, &err) == 0);
        CHECK(iris_tok_nfc(json_string_value(s), json_string_length(s), &nfc, &nlen, &err) == 0);
        if ((!back || !nfc || blen != nlen || memcmp(back, nfc, nlen)) && n_bad++ < 3)
            iris_test_fail(__FILE__, __LINE__, "line %zu does not round-trip: \"%.200s\" -> \"%.200s\"", i + 1,
                           json_string_value(s), back ? back : "(null)");
        free(back);
        free(nfc);
        iris_tok_ids_free(&ids);
    }
    CHECK_EQ_INT(n_bad, 0);
    json_decref(texts);
}

IRIS_TEST(tokenizer_specials_and_lookup) {
    iris_tok *tok = load_qwen();
    REQUIRE(tok);
    /* QWEN3VL.md 1.2, checked against tokenizer.json. */
    CHECK_EQ_INT(iris_tok_find(tok, "<|endoftext|>"), 151643);
    CHECK_EQ_INT(iris_tok_find(tok, "<|im_start|>"), 151644);
    CHECK_EQ_INT(iris_tok_find(tok, "<|im_end|>"), 151645);
    CHECK_EQ_INT(iris_tok_find(tok, "<|image_pad|>"), 151655);
    CHECK_EQ_INT(iris_tok_find(tok, "</think>"), 151668);
    CHECK_EQ_INT(iris_tok_find(tok, "user"), 872);
    CHECK_EQ_INT(iris_tok_find(tok, "assistant"), 77091);
    CHECK_EQ_INT(iris_tok_find(tok, "\n"), 198);
    CHECK_EQ_INT(iris_tok_find(tok, "no such token at all"), -1);
    CHECK_EQ_INT(iris_tok_n_vocab(tok), 151669);
    CHECK(iris_tok_is_special(tok, 151645));
    CHECK(!iris_tok_is_special(tok, 151667)); /* <think> is added but not special */
    CHECK(!iris_tok_is_special(tok, 872));

    const char *s = "x<|im_start|>user\nHi<|im_end|><think>ok";
    iris_tok_ids ids = {0};
    iris_err err = {0};
    REQUIRE(iris_tok_encode(tok, s, strlen(s), &ids, &err) == 0);
    int32_t want[] = {87, 151644, 872, 198, 13048, 151645, 151667, 562};
    CHECK_EQ_INT(ids.n, 8);
    for (size_t i = 0; i < ids.n && i < 8; i++) CHECK_EQ_INT(ids.ids[i], want[i]);
    char *text = NULL;
    REQUIRE(iris_tok_decode(tok, ids.ids, ids.n, IRIS_TOK_SKIP_SPECIAL, &text, NULL, &err) == 0);
    CHECK_STR(text, "xuser\nHi<think>ok");
    free(text);
    /* Ids with no token are skipped, as HF does. */
    int32_t odd[] = {9707, 151700, -5, 151935, 0};
    REQUIRE(iris_tok_decode(tok, odd, 5, 0, &text, NULL, &err) == 0);
    CHECK_STR(text, "Hello!");
    free(text);
    iris_tok_ids_free(&ids);
}

IRIS_TEST(tokenizer_stream_split_utf8) {
    iris_tok *tok = load_qwen();
    REQUIRE(tok);
    /* Single-byte tokens of multi-byte characters, pushed one at a time. */
    int32_t c3 = iris_tok_find(tok, "\xc3"), a9 = iris_tok_find(tok, "\xa9"), f0 = iris_tok_find(tok, "\xf0");
    int32_t a = iris_tok_find(tok, "a");
    REQUIRE(c3 >= 0 && a9 >= 0 && f0 >= 0 && a >= 0);
    iris_tok_stream st;
    iris_err err = {0};
    const char *p;
    size_t n;
    iris_tok_stream_init(&st, tok, 0);
    CHECK(iris_tok_stream_push(&st, c3, &p, &n, &err) == 0 && n == 0);
    CHECK(iris_tok_stream_push(&st, a9, &p, &n, &err) == 0 && n == 2 && !memcmp(p, "\xc3\xa9", 2));
    CHECK(iris_tok_stream_push(&st, c3, &p, &n, &err) == 0 && n == 0);
    /* A sequence that cannot complete becomes U+FFFD at once. */
    CHECK(iris_tok_stream_push(&st, a, &p, &n, &err) == 0 && n == 4 && !memcmp(p, "\xef\xbf\xbd" "a", 4));
    CHECK(iris_tok_stream_push(&st, f0, &p, &n, &err) == 0 && n == 0);
    CHECK(iris_tok_stream_flush(&st, &p, &n, &err) == 0 && n == 3 && !memcmp(p, "\xef\xbf\xbd", 3));
    iris_tok_stream_free(&st);

    /* Real text whose tokens cut characters (emoji with ZWJ, CJK). */
    const char *s = "🤷🏽‍♀️ 你好 👨‍👩‍👧‍👦 naïve";
    iris_tok_ids ids = {0};
    REQUIRE(iris_tok_encode(tok, s, strlen(s), &ids, &err) == 0);
    iris_tok_stream_init(&st, tok, 0);
    char acc[256];
    size_t acc_n = 0, n_empty = 0;
    for (size_t i = 0; i <= ids.n; i++) {
        CHECK((i < ids.n ? iris_tok_stream_push(&st, ids.ids[i], &p, &n, &err) : iris_tok_stream_flush(&st, &p, &n, &err)) == 0);
        CHECK(iris_utf8_check(p, n, NULL) == 0);
        n_empty += n == 0;
        REQUIRE(acc_n + n < sizeof acc);
        memcpy(acc + acc_n, p, n);
        acc_n += n;
    }
    acc[acc_n] = 0;
    CHECK_STR(acc, s);
    CHECK(n_empty > 0); /* some tokens really were partial characters */
    iris_tok_stream_free(&st);
    iris_tok_ids_free(&ids);
}

IRIS_TEST(tokenizer_invalid_utf8) {
    iris_tok *tok = load_qwen();
    REQUIRE(tok);
    const char *bad[] = {"a\xff", "\xc0\x80", "ab\xed\xa0\x80", "\xe4\xbd", "\xf5\x80\x80\x80", "x\x80y", "\xf4\x90\x80\x80",
                         "\xe0\x80\xaf"};
    size_t at[] = {1, 0, 2, 0, 0, 1, 0, 0};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        iris_tok_ids ids = {0};
        iris_err err = {0};
        iris_tok_ids_push(&ids, 7, &err);
        CHECK_EQ_INT(iris_tok_encode(tok, bad[i], strlen(bad[i]), &ids, &err), IRIS_EINVAL);
        CHECK_CONTAINS(err.msg, "not valid UTF-8");
        char where[32];
        snprintf(where, sizeof where, "offset %zu", at[i]);
        CHECK_CONTAINS(err.msg, where);
        CHECK_EQ_INT(ids.n, 1); /* nothing appended */
        iris_tok_ids_free(&ids);
    }
    /* NUL bytes are text like any other. */
    iris_tok_ids ids = {0};
    iris_err err = {0};
    CHECK(iris_tok_encode(tok, "a\0b", 3, &ids, &err) == 0 && ids.n == 3);
    iris_tok_ids_free(&ids);
}

IRIS_TEST(tokenizer_bad_files) {
    struct {
        const char *json, *want;
    } cases[] = {
        {"{", "invalid JSON"},
        {"[]", "not a JSON object"},
        {"{}", "no \"model\""},
        {"{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", "WordPiece"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":[]}}", "model.vocab"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"pre_tokenizer\":{\"type\":\"Whitespace\"}}", "Whitespace"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"}}",
         NULL},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\"]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},"
         "\"decoder\":{\"type\":\"ByteLevel\"}}", "\"b\" is not in the vocab"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[[\"a\",\"b\"]]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},"
         "\"decoder\":{\"type\":\"ByteLevel\"}}", "merged token \"ab\""},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"abc\"]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},"
         "\"decoder\":{\"type\":\"ByteLevel\"}}", "separated by one space"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-3}},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"}}",
         "no valid id"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{}},\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"}},"
         "\"decoder\":{\"type\":\"ByteLevel\"}}", "does not compile"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{}},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},"
         "\"added_tokens\":[{\"id\":5}]}", "added_tokens[0]"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{}},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"Metaspace\"}}",
         "decoder"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        iris_tok *tok = NULL;
        iris_err err = {0};
        int rc = iris_tok_load_json(cases[i].json, strlen(cases[i].json), "t.json", &tok, &err);
        if (cases[i].want) {
            CHECKF(rc < 0 && !tok, "case %zu loaded", i);
            CHECK_CONTAINS(err.msg, cases[i].want);
            CHECK_CONTAINS(err.msg, "t.json");
        } else {
            CHECKF(rc == 0, "case %zu: %s", i, err.msg);
            iris_tok_ids ids = {0};
            /* GPT-2's split gives "a" and " b"; " b" has no byte tokens in this
             * vocab and HF drops what the vocab lacks. */
            CHECK(tok && iris_tok_encode(tok, "a b", 3, &ids, &err) == 0 && ids.n == 1 && ids.ids[0] == 0);
            iris_tok_ids_free(&ids);
        }
        iris_tok_free(tok);
    }
    iris_tok *tok = NULL;
    iris_err err = {0};
    CHECK_EQ_INT(iris_tok_load("tests/fixtures/no/such/tokenizer.json", &tok, &err), IRIS_ENOTFOUND);
    CHECK_EQ_INT(iris_tok_load("tests/fixtures", &tok, &err), IRIS_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "no tokenizer.json");
}

/* Many threads share one tokenizer (and its word cache). */
typedef struct thread_arg {
    iris_tok *tok;
    json_t *texts, *ids;
    int bad;
} thread_arg;

static void *encode_all(void *p) {
    thread_arg *a = p;
    for (size_t i = 0; i < json_array_size(a->texts); i++) {
        json_t *s = json_array_get(a->texts, i), *want = json_array_get(a->ids, i);
        iris_tok_ids ids = {0};
        if (iris_tok_encode(a->tok, json_string_value(s), json_string_length(s), &ids, NULL) ||
            ids.n != json_array_size(want))
            a->bad++;
        for (size_t k = 0; k < ids.n && k < json_array_size(want); k++)
            a->bad += ids.ids[k] != json_integer_value(json_array_get(want, k));
        iris_tok_ids_free(&ids);
    }
    return NULL;
}

IRIS_TEST(tokenizer_threads) {
    iris_tok *tok = load_qwen();
    json_t *texts = read_jsonl("tests/fixtures/tokenizer/corpus.jsonl");
    json_t *ids = read_jsonl("tests/fixtures/tokenizer/qwen3_ids.jsonl");
    REQUIRE(tok && texts && ids);
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){tok, texts, ids, 0};
        REQUIRE(pthread_create(&th[i], NULL, encode_all, &args[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(args[i].bad, 0);
    }
    json_decref(texts);
    json_decref(ids);
}

/* ---- the CLI ------------------------------------------------------------ */

static const char *iris_bin(void) {
    const char *b = getenv("IRIS_BIN");
    return b && *b ? b : "build/iris";
}

/* Run a shell command; its stdout (and stderr when merge) into a malloc'd string. */
static char *run_cmd(const char *cmd, int *status) { return iris_test_popen(cmd, status); }

IRIS_TEST(tokenizer_cli) {
    const char *tokpath = iris_test_asset("qwen3/tokenizer.json");
    REQUIRE(tokpath);
    REQUIRE(access(iris_bin(), X_OK) == 0 || (fprintf(stderr, "  %s not built (set IRIS_BIN)\n", iris_bin()), 0));
    char cmd[2048];
    int st;
    /* --jsonl over the whole corpus prints exactly HF's lines. */
    snprintf(cmd, sizeof cmd, "%s tokenize --jsonl %s < tests/fixtures/tokenizer/corpus.jsonl", iris_bin(), tokpath);
    char *out = run_cmd(cmd, &st), *want = slurp("tests/fixtures/tokenizer/qwen3_ids.jsonl", NULL);
    REQUIRE(out && want);
    CHECK_EQ_INT(st, 0);
    CHECK(strcmp(out, want) == 0);
    free(out);
    free(want);

    snprintf(cmd, sizeof cmd, "%s tokenize %s 'Hello, world!<|im_end|>'", iris_bin(), tokpath);
    out = run_cmd(cmd, &st);
    CHECK_EQ_INT(st, 0);
    CHECK_STR(out, "[9707, 11, 1879, 0, 151645]\n");
    free(out);
    snprintf(cmd, sizeof cmd, "printf 'a b' | %s tokenize %s", iris_bin(), tokpath);
    out = run_cmd(cmd, &st);
    CHECK_EQ_INT(st, 0);
    CHECK_STR(out, "[64, 293]\n");
    free(out);
    snprintf(cmd, sizeof cmd, "%s detokenize -n %s '[9707, 11, 1879, 0, 151645]'", iris_bin(), tokpath);
    out = run_cmd(cmd, &st);
    CHECK_EQ_INT(st, 0);
    CHECK_STR(out, "Hello, world!<|im_end|>");
    free(out);
    snprintf(cmd, sizeof cmd, "%s detokenize --skip-special %s 9707 151645 0", iris_bin(), tokpath);
    out = run_cmd(cmd, &st);
    CHECK_EQ_INT(st, 0);
    CHECK_STR(out, "Hello!\n");
    free(out);

    /* Bad input: a message and exit status 1; bad usage: 2. */
    snprintf(cmd, sizeof cmd, "%s tokenize %s \"$(printf 'a\\377')\" 2>&1", iris_bin(), tokpath);
    out = run_cmd(cmd, &st);
    CHECK_EQ_INT(st, 1);
    CHECK_CONTAINS(out, "iris: text is not valid UTF-8: byte 0xff at offset 1");
    free(out);
    snprintf(cmd, sizeof cmd, "printf '\"ok\"\\n42\\n' | %s tokenize --jsonl %s 2>&1", iris_bin(), tokpath);
    out = run_cmd(cmd, &st);
    CHECK_EQ_INT(st, 1);
    CHECK_CONTAINS(out, "stdin line 2: not a JSON string");
    free(out);
    snprintf(cmd, sizeof cmd, "%s detokenize %s 12 x7 2>&1", iris_bin(), tokpath);
    out = run_cmd(cmd, &st);
    CHECK_EQ_INT(st, 1);
    CHECK_CONTAINS(out, "\"x7\" is not a token id");
    free(out);
    snprintf(cmd, sizeof cmd, "%s tokenize tests/fixtures/nothing-here 'x' 2>&1", iris_bin());
    out = run_cmd(cmd, &st);
    CHECK_EQ_INT(st, 1);
    CHECK_CONTAINS(out, "nothing-here");
    free(out);
    snprintf(cmd, sizeof cmd, "%s tokenize 2>&1", iris_bin());
    out = run_cmd(cmd, &st);
    CHECK_EQ_INT(st, 2);
    free(out);
    snprintf(cmd, sizeof cmd, "%s tokenize --help && %s detokenize --help", iris_bin(), iris_bin());
    out = run_cmd(cmd, &st);
    CHECK_EQ_INT(st, 0);
    CHECK_CONTAINS(out, "usage: iris tokenize");
    CHECK_CONTAINS(out, "usage: iris detokenize");
    free(out);
}
