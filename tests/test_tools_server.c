/* test_tools_server.c: tool calls on the server: tools, tool_choice and parallel_tool_calls
 * parsed into the request and its sampling (and the 400s for bad ones), the <tool_call> parser
 * fed whole, in two pieces split at every byte and byte by byte (the same calls and content
 * each way), and tests/node/tool_calls.mjs (the official openai npm client, arguments validated
 * with ajv) against `iris serve` on the tiny random model. */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/openai.h"
#include "server/tool_calls.h"
#include "server_harness.h"
#include "test.h"

#define WEATHER                                                                                                   \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","            \
    "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}"
#define NOW "{\"type\":\"function\",\"function\":{\"name\":\"now\",\"description\":\"The time.\"}}"
#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static int parse(const char *body, iris_sampling *s, iris_oai_request *q, iris_oai_err *e) {
    memset(s, 0, sizeof *s);
    memset(e, 0, sizeof *e);
    return iris_oai_parse(body, strlen(body), IRIS_OAI_CHAT, s, q, e);
}

IRIS_TEST(tools_openai_parse) {
    iris_sampling s;
    iris_oai_request q;
    iris_oai_err e;
    CHECK_EQ_INT(parse("{" MSGS ",\"tools\":[" WEATHER "," NOW "]}", &s, &q, &e), 0);
    CHECK_EQ_INT(q.tool_mode, IRIS_OAI_TOOLS_AUTO);
    CHECK(s.tools_json && strstr(s.tools_json, "\"get_weather\"") && !s.tools_required && !s.tool_name);
    CHECK_EQ_INT(s.single_tool_call, 0);
    CHECK_EQ_INT(json_array_size(q.tools), 2);
    iris_oai_request_free(&q);
    CHECK_EQ_INT(parse("{" MSGS ",\"tools\":[" WEATHER "],\"tool_choice\":\"required\",\"parallel_tool_calls\":"
                       "false}", &s, &q, &e), 0);
    CHECK(s.tools_required && s.single_tool_call && q.tool_mode == IRIS_OAI_TOOLS_REQUIRED);
    iris_oai_request_free(&q);
    CHECK_EQ_INT(parse("{" MSGS ",\"tools\":[" WEATHER "," NOW "],\"tool_choice\":{\"type\":\"function\","
                       "\"function\":{\"name\":\"now\"}}}", &s, &q, &e), 0);
    CHECK_STR(s.tool_name, "now");
    CHECK_EQ_INT(q.tool_mode, IRIS_OAI_TOOLS_REQUIRED);
    iris_oai_request_free(&q);
    /* none: the tools are still listed in the prompt, the output is not constrained */
    CHECK_EQ_INT(parse("{" MSGS ",\"tools\":[" WEATHER "],\"tool_choice\":\"none\"}", &s, &q, &e), 0);
    CHECK(q.tool_mode == IRIS_OAI_TOOLS_OFF && q.tools && !s.tools_json);
    iris_oai_request_free(&q);
    CHECK_EQ_INT(parse("{" MSGS ",\"tools\":[]}", &s, &q, &e), 0);
    CHECK(!q.tools && !s.tools_json);
    iris_oai_request_free(&q);
    /* history: an assistant turn with tool_calls and content null, the tool's result */
    CHECK_EQ_INT(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":null,"
                       "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"now\","
                       "\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"12:00\"}],"
                       "\"tools\":[" NOW "]}", &s, &q, &e), 0);
    CHECK(json_object_get(json_array_get(q.messages, 1), "content") == NULL); /* left out for the template */
    iris_oai_request_free(&q);
}

IRIS_TEST(tools_openai_bad_input) {
    const char *bad[][2] = {
        {"{" MSGS ",\"tools\":{}}", "tools"},
        {"{" MSGS ",\"tools\":[{\"type\":\"retrieval\"}]}", "tools[0]"},
        {"{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"bad name\"}}]}", "tools[0].function.name"},
        {"{" MSGS ",\"tools\":[" NOW "," NOW "]}", "tools[1].function.name"},
        {"{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[1]}}]}",
         "tools[0].function.parameters"},
        {"{" MSGS ",\"tools\":[" NOW "],\"tool_choice\":\"always\"}", "tool_choice"},
        {"{" MSGS ",\"tools\":[" NOW "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"later\"}}}",
         "tool_choice"},
        {"{" MSGS ",\"tool_choice\":\"required\"}", "tool_choice"},
        {"{" MSGS ",\"tools\":[" NOW "],\"n\":2}", "n"},
        {"{" MSGS ",\"tools\":[" NOW "],\"parallel_tool_calls\":1}", "parallel_tool_calls"},
        {"{" MSGS ",\"tools\":[" NOW "],\"response_format\":{\"type\":\"json_object\"}}", "response_format"},
        {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":3}}]}]}",
         "messages[0].tool_calls[0]"},
    };
    const char *why[] = {"must be an array", "\"function\"", "1 to 64", "two tools are named \"now\"",
                         "JSON Schema object", "\"always\"", "\"later\", which is not among", "only allowed when",
                         "with tools", "true or false", "not supported", "string of JSON"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        iris_sampling s;
        iris_oai_request q;
        iris_oai_err e;
        int rc = parse(bad[i][0], &s, &q, &e);
        CHECKF(rc < 0 && e.status == 400, "case %zu accepted", i);
        CHECKF(!strcmp(e.param, bad[i][1]), "case %zu: param %s, want %s", i, e.param, bad[i][1]);
        CHECKF(strstr(e.message, why[i]) != NULL, "case %zu: \"%s\" lacks \"%s\"", i, e.message, why[i]);
        iris_oai_request_free(&q);
    }
    iris_sampling s;
    iris_oai_request q;
    iris_oai_err e;
    memset(&s, 0, sizeof s);
    const char *comp = "{\"prompt\":\"x\",\"tools\":[" NOW "]}";
    CHECK(iris_oai_parse(comp, strlen(comp), IRIS_OAI_COMPLETION, &s, &q, &e) < 0);
    CHECK_STR(e.param, "tools");
    iris_oai_request_free(&q);
}

/* What a parser made of text fed in the given pieces: content and the calls assembled from the
 * deltas the way a streaming client does. */
typedef struct assembled {
    char content[1024];
    size_t n;
    json_t *calls; /* [{id, name, arguments}] */
    int bad;       /* a delta out of shape */
} assembled;

static void take(assembled *a, const iris_tool_delta *d) {
    if (d->content_len && a->n + d->content_len < sizeof a->content) {
        memcpy(a->content + a->n, d->content, d->content_len);
        a->n += d->content_len;
    }
    size_t i;
    json_t *x;
    json_array_foreach(d->calls, i, x) {
        size_t idx = (size_t)json_integer_value(json_object_get(x, "index"));
        json_t *fn = json_object_get(x, "function");
        if (idx == json_array_size(a->calls)) {
            /* a call's first delta: id, type, name, empty arguments */
            a->bad |= !json_is_string(json_object_get(x, "id")) || !json_is_string(json_object_get(fn, "name")) ||
                      strcmp(json_string_value(json_object_get(fn, "arguments")), "") ||
                      strcmp(json_string_value(json_object_get(x, "type")), "function");
            json_array_append_new(a->calls, json_pack("{s:O, s:O, s:s}", "id", json_object_get(x, "id"), "name",
                                                      json_object_get(fn, "name"), "arguments", ""));
        } else if (idx + 1 == json_array_size(a->calls) && !json_object_get(x, "id")) {
            json_t *c = json_array_get(a->calls, idx);
            char *args = NULL;
            if (asprintf(&args, "%s%s", json_string_value(json_object_get(c, "arguments")),
                         json_string_value(json_object_get(fn, "arguments"))) < 0)
                args = NULL;
            json_object_set_new(c, "arguments", json_string(args ? args : ""));
            free(args);
        } else {
            a->bad = 1;
        }
    }
}

/* Feed text in pieces of `step` bytes (0: whole), starting with a first piece of `first`. */
static void run_parser(const char *text, size_t first, size_t step, assembled *a) {
    memset(a, 0, sizeof *a);
    a->calls = json_array();
    iris_tool_parser *p = iris_tool_parser_new(42);
    size_t n = strlen(text), at = 0;
    iris_tool_delta d;
    while (at < n) {
        size_t k = at == 0 && first ? first : step ? step : n;
        if (k > n - at) k = n - at;
        if (iris_tool_parser_feed(p, text + at, k, 0, &d)) a->bad = 1;
        take(a, &d);
        json_decref(d.calls);
        at += k;
    }
    if (iris_tool_parser_feed(p, "", 0, 1, &d)) a->bad = 1;
    take(a, &d);
    json_decref(d.calls);
    /* the non-streamed calls agree with the assembled deltas */
    json_t *whole = iris_tool_parser_calls(p);
    size_t i;
    json_t *c;
    json_array_foreach(whole, i, c) {
        json_t *s = json_array_get(a->calls, i), *fn = json_object_get(c, "function");
        a->bad |= !s || !json_equal(json_object_get(c, "id"), json_object_get(s, "id")) ||
                  !json_equal(json_object_get(fn, "arguments"), json_object_get(s, "arguments"));
    }
    a->bad |= json_array_size(whole) != json_array_size(a->calls);
    json_decref(whole);
    iris_tool_parser_free(p);
}

/* Whether one run gave the content and calls wanted; reports the first difference. */
static int same(const assembled *a, size_t mode, const char *content, int n_calls, const char *const *names,
                const char *const *args) {
    char why[256] = "";
    if (a->bad) snprintf(why, sizeof why, "a delta out of shape");
    else if (a->n != strlen(content) || memcmp(a->content, content, a->n))
        snprintf(why, sizeof why, "content \"%.*s\", want \"%s\"", (int)a->n, a->content, content);
    else if ((int)json_array_size(a->calls) != n_calls)
        snprintf(why, sizeof why, "%zu calls, want %d", json_array_size(a->calls), n_calls);
    for (int i = 0; !why[0] && i < n_calls; i++) {
        json_t *c = json_array_get(a->calls, (size_t)i);
        const char *id = json_string_value(json_object_get(c, "id"));
        const char *nm = json_string_value(json_object_get(c, "name"));
        const char *ar = json_string_value(json_object_get(c, "arguments"));
        if (!id || strlen(id) != 29 || strncmp(id, "call_", 5)) snprintf(why, sizeof why, "call %d: id %s", i, id);
        else if (strcmp(nm, names[i])) snprintf(why, sizeof why, "call %d: name %s, want %s", i, nm, names[i]);
        else if (strcmp(ar, args[i])) snprintf(why, sizeof why, "call %d: arguments %s, want %s", i, ar, args[i]);
    }
    if (why[0]) iris_test_fail(__FILE__, __LINE__, "split %zu: %s", mode, why);
    return !why[0];
}

/* Whole, in two pieces split at every byte, and byte by byte: the same content and calls. */
static void check_every_split(const char *text, const char *content, int n_calls, const char *const *names,
                              const char *const *args) {
    size_t n = strlen(text);
    for (size_t mode = 0; mode < n + 2; mode++) {
        assembled a;
        if (mode == n + 1) run_parser(text, 0, 1, &a); /* byte by byte */
        else run_parser(text, mode, 0, &a);            /* two pieces (mode 0: whole) */
        int ok = same(&a, mode, content, n_calls, names, args);
        json_decref(a.calls);
        if (!ok) break;
    }
}

IRIS_TEST(tools_parser_split_anywhere) {
    const char *names[] = {"get_weather", "now"};
    const char *args[] = {"{\"city\": \"Pa\\\"ris}\", \"n\": [1, {\"k\": \"</tool_call>\"}]}", "{}"};
    check_every_split("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa\\\"ris}\", "
                      "\"n\": [1, {\"k\": \"</tool_call>\"}]}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", "
                      "\"arguments\": {}}\n</tool_call>\n",
                      "Let me check.", 2, names, args);
    check_every_split("<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>", "", 1, names + 1, args + 1);
    /* compact spacing and a scalar argument value still parse */
    const char *n2[] = {"f"}, *a2[] = {"12"};
    check_every_split("<tool_call>{\"name\":\"f\",\"arguments\":12}</tool_call>", "", 1, n2, a2);
}

IRIS_TEST(tools_parser_plain_text) {
    /* no call: the text comes out byte for byte, however it was split, "<tool" look-alikes included */
    const char *text = "A <b>bold</b> <tool_cal> <tool_callx and <tool \n  ";
    check_every_split(text, text, 0, NULL, NULL);
    /* a block whose head is not a call is text */
    check_every_split("x <tool_call> not json </tool_call>", "x <tool_call> not json </tool_call>", 0, NULL, NULL);
    /* cut off mid-arguments (max_tokens): the call with the arguments so far */
    const char *names[] = {"get_weather"}, *args[] = {"{\"city\": \"Par"};
    check_every_split("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par", "", 1, names, args);
}

IRIS_TEST(tools_server_node_client) {
    ts_node_client_test("ajv", "tool_calls.mjs");
}
