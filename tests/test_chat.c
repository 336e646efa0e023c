/* test_chat.c: the Qwen3-VL chat template in C against transformers.
 *
 * tests/fixtures/chat/conversations.jsonl holds the conversations
 * (tools/ref_chat.py make); chat_expected.jsonl what transformers 5.17's
 * apply_chat_template(tokenize=False) rendered on the GPU machine with the
 * committed template qwen3vl_instruct_chat_template.jinja, or the error it
 * raised, plus the real tokenizer's ids of the prompt with every
 * <|image_pad|> expanded to the conversation's image_tokens counts.
 * Conversations with a "tools" list were rendered with tools=. */
#include "test.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <stdlib.h>

#include "formats/chat.h"
#include "formats/tokenizer.h"

static json_t *read_lines(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    json_t *rows = json_array();
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *v = json_loadb(line, (size_t)n, JSON_DECODE_ANY, &je);
        if (!v) {
            fprintf(stderr, "  %s: %s\n", path, je.text);
            json_decref(rows);
            rows = NULL;
            break;
        }
        json_array_append_new(rows, v);
    }
    free(line);
    fclose(f);
    return rows;
}

IRIS_TEST(chat_template_is_qwen3vl_instruct) {
    /* The reference text must stay the one pinned for Qwen3-VL-Instruct. */
    FILE *f = fopen("tests/fixtures/chat/qwen3vl_instruct_chat_template.jinja", "rb");
    REQUIRE(f);
    unsigned char buf[8192], md[32];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CHECK_EQ_INT(n, 5292);
    unsigned int mdlen = 0;
    REQUIRE(EVP_Digest(buf, n, md, &mdlen, EVP_sha256(), NULL) == 1);
    char hex[65];
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    CHECK_STR(hex, "3636d0f0bd6bef02654cdffdc447b79cb2cef8ab02cc75267345946291a489e4");
}

IRIS_TEST(chat_matches_transformers) {
    json_t *convs = read_lines("tests/fixtures/chat/conversations.jsonl");
    json_t *want = read_lines("tests/fixtures/chat/chat_expected.jsonl");
    REQUIRE(convs && want);
    CHECK(json_array_size(convs) >= 20);
    CHECK_EQ_INT(json_array_size(convs), json_array_size(want));
    const char *tokpath = iris_test_asset("qwen3/tokenizer.json");
    iris_tok *tok = NULL;
    iris_err err = {0};
    CHECKF(tokpath && iris_tok_load(tokpath, &tok, &err) == 0, "the Qwen tokenizer: %s",
           tokpath ? err.msg : "missing, run scripts/setup");
    size_t i, n_ids_checked = 0, n_tools = 0;
    json_t *c;
    json_array_foreach(convs, i, c) {
        json_t *w = json_array_get(want, i);
        n_tools += json_array_size(json_object_get(c, "tools")) > 0;
        iris_chat_opts opts = {.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
                               .add_vision_id = json_is_true(json_object_get(c, "add_vision_id"))};
        char *text = NULL;
        size_t len = 0;
        iris_chat_info info = {0};
        err = (iris_err){0};
        int rc = iris_chat_render(json_object_get(c, "messages"), json_object_get(c, "tools"), &opts, &text, &len,
                                  &info, &err);
        if (json_object_get(w, "error")) {
            CHECKF(rc < 0, "conversation %zu: transformers raised %s but iris rendered \"%s\"", i + 1,
                   json_string_value(json_object_get(w, "error")), text);
            free(text);
            continue;
        }
        const char *wt = json_string_value(json_object_get(w, "text"));
        CHECKF(rc == 0 && len == strlen(wt) && !strcmp(text, wt), "conversation %zu:\n    iris: \"%s\"\n    HF:   \"%s\"", i + 1,
               rc ? err.msg : text, wt);
        json_t *counts = json_object_get(c, "image_tokens"), *wids = json_object_get(w, "ids");
        CHECK_EQ_INT(info.n_images, json_array_size(counts));
        if (tok && wids && rc == 0) {
            int32_t cnt[16];
            size_t nc = json_array_size(counts);
            REQUIRE(nc <= 16);
            for (size_t k = 0; k < nc; k++) cnt[k] = (int32_t)json_integer_value(json_array_get(counts, k));
            iris_tok_ids ids = {0};
            rc = iris_chat_tokenize(tok, text, len, cnt, nc, &ids, &err);
            int same = rc == 0 && ids.n == json_array_size(wids);
            for (size_t k = 0; same && k < ids.n; k++) same = ids.ids[k] == json_integer_value(json_array_get(wids, k));
            CHECKF(same, "conversation %zu: ids differ from HF's (%s)", i + 1, rc ? err.msg : "values");
            n_ids_checked++;
            iris_tok_ids_free(&ids);
        }
        free(text);
    }
    CHECK(n_ids_checked >= 20);
    CHECK(n_tools >= 15); /* tools=: one or several, nested, unicode, with tool history */
    iris_tok_free(tok);
    json_decref(convs);
    json_decref(want);
}

static int render(const char *messages_json, const char *tools_json, char **text, iris_err *err) {
    json_t *m = json_loads(messages_json, JSON_DECODE_ANY, NULL), *t = tools_json ? json_loads(tools_json, 0, NULL) : NULL;
    iris_chat_opts opts = {.add_generation_prompt = 1};
    int rc = iris_chat_render(m, t, &opts, text, NULL, NULL, err);
    json_decref(m);
    json_decref(t);
    return rc;
}

IRIS_TEST(chat_bad_input) {
    char *text = NULL;
    iris_err err = {0};
    CHECK_EQ_INT(render("[{\"role\":\"user\",\"content\":\"x\"}]", "{\"type\":\"function\"}", &text, &err),
                 IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "\"tools\" must be an array");
    CHECK(!text);
    /* A tool is rendered as given, on its own line, in the system turn. */
    CHECK_EQ_INT(render("[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"x\"}]",
                        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"n\":1.5e-7}}]", &text, &err),
                 0);
    CHECK_CONTAINS(text, "<|im_start|>system\nS\n\n# Tools\n\n");
    CHECK_CONTAINS(text, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"f\", \"n\": 1.5e-07}}\n</tools>");
    CHECK_CONTAINS(text, "</tool_call><|im_end|>\n<|im_start|>user\nx<|im_end|>\n");
    free(text);
    text = NULL;
    /* An empty tools list is no tools. */
    CHECK_EQ_INT(render("[{\"role\":\"user\",\"content\":\"x\"}]", "[]", &text, &err), 0);
    CHECK_STR(text, "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
    free(text);
    text = NULL;
    const char *bad[][2] = {
        {"{\"role\":\"user\"}", "must be an array"},
        {"[]", "empty"},
        {"[\"hi\"]", "message 0 is not an object"},
        {"[{\"role\":\"user\",\"content\":[\"hi\"]}]", "message 0, content part 0 is not an object"},
        {"[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\"},{\"text\":5}]}]",
         "message 1, content part 1: \"text\" must be a string"},
        {"[{\"role\":\"user\",\"content\":7}]", "string or an array"},
        {"[{\"role\":\"user\",\"content\":null}]", "\"content\" is null"},
        {"[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]}]", "no \"arguments\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err = (iris_err){0};
        CHECKF(render(bad[i][0], NULL, &text, &err) == IRIS_EINVAL, "case %zu rendered", i);
        CHECK_CONTAINS(err.msg, bad[i][1]);
        CHECK(!text);
    }
}

IRIS_TEST(chat_tokenize_counts) {
    const char *tokpath = iris_test_asset("qwen3/tokenizer.json");
    REQUIRE(tokpath);
    iris_tok *tok = NULL;
    iris_err err = {0};
    REQUIRE(iris_tok_load(tokpath, &tok, &err) == 0);
    const char *p = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Hi<|im_end|>\n";
    iris_tok_ids ids = {0};
    int32_t three = 3, two[2] = {1, 1}, zero = 0;
    REQUIRE(iris_chat_tokenize(tok, p, strlen(p), &three, 1, &ids, &err) == 0);
    int32_t want[] = {151644, 872, 198, 151652, 151655, 151655, 151655, 151653, 13048, 151645, 198};
    CHECK_EQ_INT(ids.n, 11);
    for (size_t i = 0; i < ids.n && i < 11; i++) CHECK_EQ_INT(ids.ids[i], want[i]);
    size_t n0 = ids.n;
    CHECK_EQ_INT(iris_chat_tokenize(tok, p, strlen(p), two, 2, &ids, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "2 images given but the prompt holds 1");
    CHECK_EQ_INT(iris_chat_tokenize(tok, p, strlen(p), NULL, 0, &ids, &err), IRIS_EINVAL);
    CHECK_EQ_INT(iris_chat_tokenize(tok, p, strlen(p), &zero, 1, &ids, &err), IRIS_EINVAL);
    const char *v = "<|vision_start|><|video_pad|><|vision_end|>";
    CHECK_EQ_INT(iris_chat_tokenize(tok, v, strlen(v), NULL, 0, &ids, &err), IRIS_EINVAL);
    CHECK_EQ_INT(ids.n, n0); /* failures append nothing */
    int32_t vt = 2; /* a video's temporal patch: its pad repeated, as a video pad */
    REQUIRE(iris_chat_tokenize(tok, v, strlen(v), &vt, 1, &ids, &err) == 0);
    CHECK_EQ_INT(ids.n, n0 + 4);
    CHECK(ids.ids[n0 + 1] == 151656 && ids.ids[n0 + 2] == 151656 && ids.ids[n0 + 3] == 151653);
    iris_tok_ids_free(&ids);
    iris_tok_free(tok);
}
