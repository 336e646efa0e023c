/* test_tools_thinking.c: tool calls with a model that thinks.  The reply parser
 * (tool_calls.h iris_reply_feed) on Thinking replies, whole and split at every byte: the reasoning
 * before "</think>" is reasoning_content (a "<tool_call>" in it is not a call), the <tool_call>
 * blocks after it are tool calls.  Then the server on tiny-qwen3 (plain Qwen3's template, which
 * thinks by default): a request with tools is accepted and its prompt is the C render with the
 * tools turn (the same token count as that text sent to /v1/completions), and a forced
 * tool_choice is accepted while the model thinks (its grammar waits for "</think>": a reply cut
 * short while thinking is all reasoning; test_grammar_thinking.c checks the calls after it) and
 * with thinking off; the same prompt check on a copy of tiny-8b carrying Qwen3-VL-Thinking's
 * chat_template.json. */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/chat.h"
#include "server/reasoning.h"
#include "server/tool_calls.h"
#include "server_harness.h"
#include "test.h"

#define MODELS "tests/fixtures/models"

typedef struct reply {
    char reasoning[512], content[512];
    json_t *calls; /* message.tool_calls */
    int n_calls;
} reply;

static void append(char *dst, const char *s, size_t n) {
    size_t k = strlen(dst);
    if (s && k + n < 512) memcpy(dst + k, s, n), dst[k + n] = 0;
}

/* The reply fed in pieces of `step` bytes (0: whole). */
static int feed(const char *text, size_t step, reply *out) {
    memset(out, 0, sizeof *out);
    iris_reasoning rs;
    iris_reasoning_init(&rs, 1);
    iris_tool_parser *p = iris_tool_parser_new(7);
    size_t n = strlen(text), at = 0;
    int rc = p ? 0 : -1;
    do {
        size_t k = step && n - at > step ? step : n - at;
        iris_reply_piece pc;
        rc = iris_reply_feed(&rs, p, text + at, k, at + k == n, &pc);
        if (rc) break;
        append(out->reasoning, pc.r.reasoning, pc.r.reasoning_len);
        append(out->content, pc.content, pc.content_len);
        iris_reply_piece_free(&pc);
        at += k;
    } while (at < n);
    out->n_calls = p ? iris_tool_parser_n_calls(p) : 0;
    out->calls = p ? iris_tool_parser_calls(p) : NULL;
    iris_tool_parser_free(p);
    return rc;
}

static void check_reply(const char *text, const char *reasoning, const char *content, int n_calls,
                        const char *name0, const char *args0) {
    size_t n = strlen(text);
    for (size_t step = 0; step <= n; step = step ? step + 1 : 1) {
        reply r;
        CHECK_EQ_INT(feed(text, step, &r), 0);
        int ok = !strcmp(r.reasoning, reasoning) && !strcmp(r.content, content) && r.n_calls == n_calls;
        const json_t *fn = json_object_get(json_array_get(r.calls, 0), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        if (n_calls) ok = ok && name && args && !strcmp(name, name0) && !strcmp(args, args0);
        CHECKF(ok, "step %zu: reasoning \"%s\" content \"%s\" %d call(s) %s(%s)", step, r.reasoning, r.content,
               r.n_calls, name ? name : "-", args ? args : "-");
        json_decref(r.calls);
        if (!ok) break;
    }
    /* the whole reply's split is reasoning.h's */
    const char *wr, *wc;
    size_t wrn, wcn;
    iris_reasoning_split(text, n, &wr, &wrn, &wc, &wcn);
    CHECK(strlen(reasoning) == wrn && !memcmp(reasoning, wr, wrn));
}

IRIS_TEST(tools_thinking_reply_parse) {
    /* the Thinking template's prompt opens <think>: the reply starts inside it */
    check_reply("The user wants weather; call get_weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
                "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                "The user wants weather; call get_weather.\n", "", 1, "get_weather", "{\"city\": \"Paris\"}");
    /* plain Qwen3 writes <think> itself; content before the call stays content */
    check_reply("<think>\nR\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n"
                "</tool_call>",
                "\nR\n", "\n\nLet me check.", 1, "now", "{}");
    /* a call written while reasoning is reasoning, not a call */
    check_reply("maybe <tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>?</think>\n\nNo call.",
                "maybe <tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>?", "\n\nNo call.", 0, NULL, NULL);
    /* cut short while thinking: all reasoning, nothing parsed */
    check_reply("still <tool_call> thinking", "still <tool_call> thinking", "", 0, NULL, NULL);
}

#define TOOL                                                                                                      \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather of a city.\","        \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}"
#define CONV                                                                                                      \
    "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"        \
    "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"Use the tool.\",\"tool_calls\":"          \
    "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","                                 \
    "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"                                                     \
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"21 C\"}]"

static long long prompt_tokens(int port, const char *path, const char *body) {
    char *out = NULL;
    long st = ts_post(port, path, body, &out);
    CHECKF(st == 200, "%s: %ld %s", path, st, out ? out : "");
    json_t *j = ts_json(out);
    long long n = ts_jint(j, "usage.prompt_tokens");
    json_decref(j);
    free(out);
    return n;
}

/* The prompt tokens of CONV with tools on the server must be those of the C render sent raw. */
static void check_prompt(int port, int style) {
    json_t *msgs = json_loads(CONV, 0, NULL), *tools = json_loads("[" TOOL "]", 0, NULL);
    iris_chat_opts o = {.add_generation_prompt = 1, .style = style};
    char *text = NULL;
    iris_err err = {0};
    CHECK(iris_chat_render(msgs, tools, &o, &text, NULL, NULL, &err) == 0);
    json_t *cbody = json_pack("{s:s,s:i,s:i}", "prompt", text ? text : "", "max_tokens", 4, "temperature", 0);
    char *completion = json_dumps(cbody, 0);
    const char *chat = "{\"messages\":" CONV ",\"tools\":[" TOOL "],\"max_tokens\":4,\"temperature\":0}";
    long long chat_n = prompt_tokens(port, "/v1/chat/completions", chat);
    long long want_n = prompt_tokens(port, "/v1/completions", completion);
    printf("  %s with tools: %lld prompt tokens, the C render sent raw: %lld\n", iris_chat_style_name(style), chat_n,
           want_n);
    CHECK(chat_n > 100);
    CHECK_EQ_INT(chat_n, want_n);
    free(completion), free(text);
    json_decref(cbody), json_decref(msgs), json_decref(tools);
}

IRIS_TEST(tools_thinking_server) {
    /* the prompt the server must build: plain Qwen3's template with the tools turn */
    json_t *msgs = json_loads(CONV, 0, NULL), *tools = json_loads("[" TOOL "]", 0, NULL);
    REQUIRE(msgs && tools);
    iris_chat_opts o = {.add_generation_prompt = 1, .style = IRIS_CHAT_QWEN3};
    char *text = NULL;
    iris_err err = {0};
    REQUIRE(iris_chat_render(msgs, tools, &o, &text, NULL, NULL, &err) == 0);
    CHECK_CONTAINS(text, "<|im_start|>system\nBe brief.\n\n# Tools\n");
    CHECK_CONTAINS(text, "<|im_start|>assistant\n<think>\nUse the tool.\n</think>\n\n<tool_call>\n{\"name\": "
                         "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
                         "<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n");
    ts_server s;
    REQUIRE(ts_server_start_model(&s, MODELS "/tiny-qwen3/model", "") == 0);
    check_prompt(s.port, IRIS_CHAT_QWEN3);
    const char *fmt = "{\"messages\":" CONV ",\"tools\":[" TOOL "],\"temperature\":0%s}";
    char body[2048];
    /* streamed too, with delta.reasoning_content */
    snprintf(body, sizeof body, fmt, ",\"stream\":true,\"ignore_eos\":true,\"max_tokens\":4");
    char *out = NULL;
    CHECK_EQ_INT(ts_post(s.port, "/v1/chat/completions", body, &out), 200);
    CHECK(out && strstr(out, "\"reasoning_content\"") && strstr(out, "data: [DONE]"));
    free(out);

    /* a forced call while the model thinks: accepted, and 4 tokens are free reasoning (a grammar
     * from the first token would have made them "<tool_call>..." content); thinking off below */
    snprintf(body, sizeof body, fmt, ",\"tool_choice\":\"required\",\"max_tokens\":4,\"ignore_eos\":true");
    out = NULL;
    CHECK_EQ_INT(ts_post(s.port, "/v1/chat/completions", body, &out), 200);
    json_t *jr = ts_json(out);
    CHECKF(ts_jstr(jr, "choices.0.message.reasoning_content") && !ts_jstr(jr, "choices.0.message.content") &&
               !json_object_get(json_object_get(json_array_get(json_object_get(jr, "choices"), 0), "message"),
                                "tool_calls"),
           "a forced call cut short while thinking: %s", out ? out : "");
    json_decref(jr);
    free(out);
    snprintf(body, sizeof body, fmt,
             ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
             "\"chat_template_kwargs\":{\"enable_thinking\":false},\"max_tokens\":200");
    out = NULL;
    CHECK_EQ_INT(ts_post(s.port, "/v1/chat/completions", body, &out), 200);
    /* the grammar forces the call (cut short by max_tokens, its markup stays content) */
    json_t *j = ts_json(out);
    const char *name = ts_jstr(j, "choices.0.message.tool_calls.0.function.name");
    const char *content = ts_jstr(j, "choices.0.message.content");
    CHECKF((name && !strcmp(name, "get_weather")) ||
               (content && !strncmp(content, "<tool_call>\n{\"name\": \"get_weather\"", 33)),
           "no forced call in %s", out ? out : "");
    json_decref(j);
    free(out);
    CHECK_EQ_INT(ts_server_stop(&s), 0);
    free(text);
    json_decref(msgs);
    json_decref(tools);
}

IRIS_TEST(tools_thinking_vl_server) {
    char dir[] = "/tmp/iris-tools-thinking-XXXXXX", cmd[512], path[256], real[PATH_MAX];
    REQUIRE(mkdtemp(dir) && realpath(MODELS "/tiny-8b/model", real));
    snprintf(cmd, sizeof cmd, "cp -rs '%s/.' '%s/' && rm -f '%s/chat_template.json' '%s/chat_template.jinja'",
             real, dir, dir, dir);
    CHECK(system(cmd) == 0);
    char *t = ts_slurp("tests/fixtures/chat/qwen3vl_thinking_chat_template.jinja", NULL);
    json_t *j = json_pack("{s:s}", "chat_template", t ? t : "");
    snprintf(path, sizeof path, "%s/chat_template.json", dir);
    CHECK(t && json_dump_file(j, path, 0) == 0);
    json_decref(j), free(t);
    ts_server s;
    if (ts_server_start_model(&s, dir, "") == 0) {
        check_prompt(s.port, IRIS_CHAT_QWEN3VL_THINKING);
        char *out = NULL;
        const char *req = "{\"messages\":" CONV ",\"tools\":[" TOOL "],\"max_tokens\":4,\"tool_choice\":\"required\","
                          "\"ignore_eos\":true}";
        CHECK_EQ_INT(ts_post(s.port, "/v1/chat/completions", req, &out), 200);  /* the grammar after </think> */
        json_t *jr = ts_json(out);
        CHECKF(ts_jstr(jr, "choices.0.message.reasoning_content") != NULL, "%s", out ? out : "");
        json_decref(jr);
        free(out);
        CHECK_EQ_INT(ts_server_stop(&s), 0);
    } else {
        iris_test_fail(__FILE__, __LINE__, "server did not start");
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}
