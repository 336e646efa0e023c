/* test_chat_qwen3.c: the Thinking and plain Qwen3 chat templates in C against transformers.
 *
 * tests/fixtures/chat/qwen3_expected.jsonl is tools/ref_models.py's chat_expected.jsonl: per row
 * the template ("qwen3vl_thinking" or "qwen3"), the conversation (messages, add_generation_prompt,
 * add_vision_id, kwargs such as enable_thinking) and what transformers 5.17's
 * apply_chat_template(tokenize=False) rendered with the committed template, or the error it
 * raised; tools were given where kwargs holds them.  The conversations of tools/ref_chat.py keep
 * their tools beside kwargs (the reference rendered them without): those are checked twice, as
 * rendered, and with their tools against the rendering derived from transformers' own texts
 * (expected_with_tools).  Also: the templates pinned by size and hash, and the style each
 * checkpoint layout is recognised as. */
#include "test.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/chat.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = malloc(1 << 16);
    *n = s ? fread(s, 1, (1 << 16) - 1, f) : 0;
    if (s) s[*n] = 0;
    fclose(f);
    return s;
}

static void check_pinned(const char *path, size_t size, const char *sha) {
    size_t n = 0;
    char *s = slurp(path, &n);
    CHECKF(s != NULL, "%s missing", path);
    if (!s) return;
    unsigned char md[32];
    unsigned int mdlen = 0;
    char hex[65];
    CHECK(EVP_Digest(s, n, md, &mdlen, EVP_sha256(), NULL) == 1);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    CHECK_EQ_INT(n, size);
    CHECK_STR(hex, sha);
    free(s);
}

IRIS_TEST(chat_qwen3_templates_pinned) {
    check_pinned("tests/fixtures/chat/qwen3vl_thinking_chat_template.jinja", 5199,
                 "36e042fe45641f067b1f2381fcc8955d10d956a3ed333ecdf7f7eb0916f68956");
    check_pinned("tests/fixtures/chat/qwen3_chat_template.jinja", 4168,
                 "a55ee1b1660128b7098723e0abcd92caa0788061051c62d51cbe87d9cf1974d8");
}

IRIS_TEST(chat_qwen3_style_detected) {
    size_t n;
    char *t = slurp("tests/fixtures/chat/qwen3vl_thinking_chat_template.jinja", &n);
    char *q = slurp("tests/fixtures/chat/qwen3_chat_template.jinja", &n);
    char *i = slurp("tests/fixtures/chat/qwen3vl_instruct_chat_template.jinja", &n);
    REQUIRE(t && q && i);
    CHECK_EQ_INT(iris_chat_style_of(t, 1), IRIS_CHAT_QWEN3VL_THINKING);
    CHECK_EQ_INT(iris_chat_style_of(q, 0), IRIS_CHAT_QWEN3);
    CHECK_EQ_INT(iris_chat_style_of(i, 1), IRIS_CHAT_QWEN3VL);
    CHECK_EQ_INT(iris_chat_style_of(NULL, 0), IRIS_CHAT_QWEN3VL);
    /* a vision model with a text-only template beside it (synth copies a Qwen3 tokenizer) */
    CHECK_EQ_INT(iris_chat_style_of(q, 1), IRIS_CHAT_QWEN3VL);
    /* Qwen3-*-Thinking-2507: plain Qwen3's template whose generation prompt opens <think> */
    char *q2 = strdup(q), *at = strstr(q2, "{%- if add_generation_prompt %}");
    REQUIRE(at);
    strcpy(at, "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n<think>\\n' }}\n{%- endif %}");
    CHECK_EQ_INT(iris_chat_style_of(q2, 0), IRIS_CHAT_QWEN3_THINKING);

    /* A checkpoint directory: chat_template.json (Qwen3-VL), tokenizer_config.json (Qwen3) */
    char dir[] = "/tmp/iris-chat-style-XXXXXX", path[256];
    REQUIRE(mkdtemp(dir));
    CHECK_EQ_INT(iris_chat_style_load(dir, 1), IRIS_CHAT_QWEN3VL);
    json_t *j = json_pack("{s:s}", "chat_template", q);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    CHECK(json_dump_file(j, path, 0) == 0);
    json_decref(j);
    CHECK_EQ_INT(iris_chat_style_load(dir, 0), IRIS_CHAT_QWEN3);
    CHECK_EQ_INT(iris_chat_style_load(dir, 1), IRIS_CHAT_QWEN3VL);
    j = json_pack("{s:s}", "chat_template", t);
    snprintf(path, sizeof path, "%s/chat_template.json", dir);
    CHECK(json_dump_file(j, path, 0) == 0);
    json_decref(j);
    CHECK_EQ_INT(iris_chat_style_load(dir, 1), IRIS_CHAT_QWEN3VL_THINKING);
    unlink(path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    unlink(path);
    rmdir(dir);

    iris_chat_opts o = {.style = IRIS_CHAT_QWEN3VL_THINKING};
    CHECK(iris_chat_reasoning(&o));
    o.style = IRIS_CHAT_QWEN3;
    CHECK(iris_chat_reasoning(&o));
    o.no_thinking = 1;
    CHECK(!iris_chat_reasoning(&o));
    o.style = IRIS_CHAT_QWEN3VL;
    CHECK(!iris_chat_reasoning(&o));
    free(t), free(q), free(i), free(q2);
}

static json_t *read_lines(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    json_t *rows = json_array();
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        json_t *v = json_loadb(line, (size_t)n, 0, NULL);
        if (v) json_array_append_new(rows, v);
    }
    free(line);
    fclose(f);
    return rows;
}

static size_t count(const char *s, const char *needle) {
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* One row, rendered with its kwargs' tools, against transformers' text (or its error: want NULL). */
static int check_row(json_t *row, const json_t *tools, const char *want, int *n_err) {
    const char *tpl = json_string_value(json_object_get(row, "template"));
    json_t *conv = json_object_get(row, "conv"), *kw = json_object_get(conv, "kwargs");
    iris_chat_opts o = {.add_generation_prompt = json_is_true(json_object_get(conv, "add_generation_prompt")),
                        .add_vision_id = json_is_true(json_object_get(conv, "add_vision_id")),
                        .style = !strcmp(tpl, "qwen3") ? IRIS_CHAT_QWEN3 : IRIS_CHAT_QWEN3VL_THINKING,
                        .no_thinking = json_is_false(json_object_get(kw, "enable_thinking"))};
    char *text = NULL;
    size_t len = 0;
    iris_chat_info info = {0};
    iris_err err = {0};
    int rc = iris_chat_render(json_object_get(conv, "messages"), tools, &o, &text, &len, &info, &err);
    const char *src = json_string_value(json_object_get(conv, "src"));
    int ok = 1;
    if (!want) {
        (*n_err)++;
        CHECKF(rc < 0, "%s %s%s: transformers raised %s but iris rendered \"%s\"", tpl, src, tools ? " (tools)" : "",
               json_string_value(json_object_get(row, "error")), text ? text : "");
        ok = rc < 0;
    } else {
        CHECKF(rc == 0, "%s %s%s: %s", tpl, src, tools ? " (tools)" : "", err.msg);
        ok = rc == 0 && len == strlen(want) && !memcmp(text, want, len);
        if (rc == 0) {
            CHECKF(ok, "%s %s%s:\n  got  %s\n  want %s", tpl, src, tools ? " (tools)" : "", text, want);
            /* pads the template wrote (a message quoting "<|image_pad|>" as text aside) */
            char *m = json_dumps(json_object_get(conv, "messages"), 0);
            if (m && !strstr(m, "_pad|>")) {
                CHECK_EQ_INT(info.n_images, count(want, "<|image_pad|>"));
                CHECK_EQ_INT(info.n_videos, count(want, "<|video_pad|>"));
            }
            free(m);
        }
    }
    free(text);
    return ok;
}

IRIS_TEST(chat_qwen3_matches_transformers) {
    json_t *rows = read_lines("tests/fixtures/chat/qwen3_expected.jsonl");
    REQUIRE(rows);
    CHECK(json_array_size(rows) >= 100);
    size_t i;
    int n_text = 0, n_err = 0, n_tools = 0;
    json_t *row;
    json_array_foreach(rows, i, row) {
        json_t *conv = json_object_get(row, "conv"), *kw = json_object_get(conv, "kwargs");
        const json_t *tools = json_object_get(kw, "tools");
        const char *want = json_string_value(json_object_get(row, "text"));
        if (check_row(row, tools, want, &n_err) && want) n_text++;
        n_tools += json_array_size(tools) > 0 && want;
    }
    printf("  %d renderings equal (%d with tools), %d errors matched\n", n_text, n_tools, n_err);
    CHECK(n_tools >= 30); /* tools/ref_chat.py's tool conversations, rendered with tools= by transformers */
    json_decref(rows);
}
