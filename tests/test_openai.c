/* test_openai.c: the server's pure pieces: the OpenAI request parser (every
 * parameter, every refusal with its param), the response and chunk
 * builders, base64 and data: URLs, file:// confinement, and the Prometheus
 * text.  The HTTP server itself is tested in test_server.c. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/media.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "test.h"

/* The defaults a request's sampling starts from (the server passes the model's). */
static const iris_sampling DEFAULTS = {.do_sample = 1, .temperature = 0.7f, .top_p = 0.8f, .top_k = 20,
                                       .repetition_penalty = 1.0f, .seed = -1};

/* The request's sampling as parsed by the last parse(). */
static iris_sampling parsed;

static int parse(const char *body, iris_oai_kind kind, iris_oai_request *q, iris_oai_err *e) {
    memset(e, 0, sizeof *e);
    parsed = DEFAULTS;
    return iris_oai_parse(body, strlen(body), kind, &parsed, q, e);
}

/* Expect a 400 naming `param` (NULL: none). */
static void refused(const char *body, iris_oai_kind kind, const char *param, const char *in_msg) {
    iris_oai_request q;
    iris_oai_err e;
    int rc = parse(body, kind, &q, &e);
    CHECKF(rc != 0, "accepted: %s", body);
    CHECKF(e.status == 400, "status %d for %s", e.status, body);
    if (param) CHECKF(!strcmp(e.param, param), "param \"%s\" (want \"%s\") for %s: %s", e.param, param, body, e.message);
    else CHECKF(e.param[0] == 0, "param \"%s\" for %s", e.param, body);
    if (in_msg) CHECKF(strstr(e.message, in_msg) != NULL, "message \"%s\" lacks \"%s\"", e.message, in_msg);
    iris_oai_request_free(&q);
}

IRIS_TEST(openai_parse_chat_full) {
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":["
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,AAAA\"}},"
        "{\"type\":\"text\",\"text\":\"What?\"},{\"type\":\"image_url\",\"image_url\":\"http://x/y.jpg\"}]}],"
        "\"max_tokens\":7,\"max_completion_tokens\":9,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":-1,\"min_p\":0.1,"
        "\"presence_penalty\":1.5,\"frequency_penalty\":-2,\"repetition_penalty\":1.05,\"seed\":-5,"
        "\"stop\":[\"a\",\"bc\"],\"n\":1,\"logprobs\":true,\"top_logprobs\":4,\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"user\":\"ignored\"}";
    iris_oai_request q;
    iris_oai_err e;
    REQUIRE(parse(body, IRIS_OAI_CHAT, &q, &e) == 0);
    CHECK_STR(q.model, "m");
    CHECK_EQ_INT(q.n_images, 2);
    CHECK_STR(q.image_urls[0], "data:image/png;base64,AAAA");
    CHECK_STR(q.image_urls[1], "http://x/y.jpg");
    const iris_sampling *sp = &parsed;
    CHECK_EQ_INT(sp->max_tokens, 9); /* max_completion_tokens wins */
    CHECK(fabsf(sp->temperature - 0.5f) < 1e-6f && sp->do_sample == 1);
    CHECK(fabsf(sp->top_p - 0.9f) < 1e-6f);
    CHECK_EQ_INT(sp->top_k, 0);      /* -1: off */
    CHECK(fabsf(sp->min_p - 0.1f) < 1e-6f && fabsf(sp->presence_penalty - 1.5f) < 1e-6f);
    CHECK(fabsf(sp->frequency_penalty + 2) < 1e-6f && fabsf(sp->repetition_penalty - 1.05f) < 1e-6f);
    CHECK(sp->seed == (int64_t)((uint64_t)-5 & INT64_MAX)); /* a negative seed is still a seed */
    CHECK_EQ_INT(sp->n_stop, 2);
    CHECK_STR(sp->stop[1], "bc");
    CHECK(sp->logprobs && sp->top_logprobs == 4 && q.stream && q.include_usage);
    CHECK(json_array_size(q.messages) == 2);
    iris_oai_request_free(&q);

    REQUIRE(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":\"END\",\"temperature\":null}",
                  IRIS_OAI_CHAT, &q, &e) == 0);
    /* what the body leaves out (or sends as null) keeps its default */
    CHECK(q.model == NULL && parsed.max_tokens == 0 && !q.stream);
    CHECK(parsed.temperature == 0.7f && parsed.do_sample == 1 && parsed.top_k == 20 &&
          parsed.top_p == 0.8f && parsed.seed == -1);
    CHECK_EQ_INT(parsed.n_stop, 1);
    CHECK_STR(parsed.stop[0], "END");
    iris_oai_request_free(&q);
    REQUIRE(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":0,\"seed\":7}", IRIS_OAI_CHAT,
                  &q, &e) == 0);
    CHECK(parsed.temperature == 0 && parsed.do_sample == 0 && parsed.seed == 7);
    iris_oai_request_free(&q);
}

IRIS_TEST(openai_parse_completion) {
    iris_oai_request q;
    iris_oai_err e;
    REQUIRE(parse("{\"prompt\":\"Hello\",\"logprobs\":3,\"max_tokens\":4}", IRIS_OAI_COMPLETION, &q, &e) == 0);
    CHECK_STR(q.prompt, "Hello");
    CHECK(parsed.logprobs == 1 && parsed.top_logprobs == 3 && parsed.max_tokens == 4);
    iris_oai_request_free(&q);
    REQUIRE(parse("{\"prompt\":[\"one\"]}", IRIS_OAI_COMPLETION, &q, &e) == 0);
    CHECK_STR(q.prompt, "one");
    iris_oai_request_free(&q);
    refused("{\"prompt\":[\"a\",\"b\"]}", IRIS_OAI_COMPLETION, "prompt", "exactly one");
    refused("{\"prompt\":[1,2,3]}", IRIS_OAI_COMPLETION, "prompt", NULL);
    refused("{}", IRIS_OAI_COMPLETION, "prompt", "required");
    refused("{\"prompt\":\"x\",\"echo\":true}", IRIS_OAI_COMPLETION, "echo", NULL);
    refused("{\"prompt\":\"x\",\"suffix\":\"y\"}", IRIS_OAI_COMPLETION, "suffix", NULL);
    refused("{\"prompt\":\"x\",\"logprobs\":true}", IRIS_OAI_COMPLETION, "logprobs", "integer");
    refused("{\"prompt\":\"x\",\"logprobs\":21}", IRIS_OAI_COMPLETION, "logprobs", NULL);
}

IRIS_TEST(openai_parse_refusals) {
    const iris_oai_kind C = IRIS_OAI_CHAT;
#define M "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
    refused("", C, NULL, "not valid JSON");
    refused("{\"messages\":[{\"role\":\"user\",\"content\":\"tr", C, NULL, "not valid JSON");
    refused("[1,2]", C, NULL, "JSON object");
    refused("{" M ",\"max_tokens\":99999999999999999999999}", C, NULL, "not valid JSON");
    refused("{}", C, "messages", "required");
    refused("{\"messages\":{}}", C, "messages", NULL);
    refused("{\"messages\":[]}", C, "messages", "empty");
    refused("{\"messages\":[3]}", C, "messages[0]", NULL);
    refused("{\"messages\":[{\"content\":\"x\"}]}", C, "messages[0].role", NULL);
    refused("{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", C, "messages[0].role", "wizard");
    refused("{\"messages\":[{\"role\":\"user\",\"content\":5}]}", C, "messages[0].content", NULL);
    refused("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio\"}]}]}", C, "messages[0].content[0]",
            "audio");
    refused("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}", C,
            "messages[0].content[0]", NULL);
    refused("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":[{\"type\":"
            "\"image_url\",\"image_url\":{\"url\":3}}]}]}",
            C, "messages[1].content[0].image_url", NULL);
    refused("{" M ",\"model\":7}", C, "model", NULL);
    refused("{" M ",\"max_tokens\":0}", C, "max_tokens", NULL);
    refused("{" M ",\"max_tokens\":\"5\"}", C, "max_tokens", "integer");
    refused("{" M ",\"max_completion_tokens\":-1}", C, "max_completion_tokens", NULL);
    refused("{" M ",\"temperature\":2.5}", C, "temperature", "[0, 2]");
    refused("{" M ",\"temperature\":\"hot\"}", C, "temperature", "number");
    refused("{" M ",\"top_p\":0}", C, "top_p", NULL);
    refused("{" M ",\"top_k\":1.5}", C, "top_k", NULL);
    refused("{" M ",\"top_k\":-2}", C, "top_k", NULL);
    refused("{" M ",\"min_p\":1.5}", C, "min_p", NULL);
    refused("{" M ",\"presence_penalty\":3}", C, "presence_penalty", NULL);
    refused("{" M ",\"frequency_penalty\":-2.5}", C, "frequency_penalty", NULL);
    refused("{" M ",\"repetition_penalty\":0}", C, "repetition_penalty", NULL);
    refused("{" M ",\"seed\":1.5}", C, "seed", NULL);
    refused("{" M ",\"stop\":5}", C, "stop", NULL);
    refused("{" M ",\"stop\":[\"\"]}", C, "stop", "empty");
    refused("{" M ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\","
            "\"o\",\"p\",\"q\"]}",
            C, "stop", NULL);
    refused("{" M ",\"n\":2}", C, "n", "only n = 1");
    refused("{" M ",\"n\":\"1\"}", C, "n", NULL);
    refused("{" M ",\"logprobs\":1}", C, "logprobs", NULL);
    refused("{" M ",\"top_logprobs\":3}", C, "top_logprobs", "logprobs");
    refused("{" M ",\"logprobs\":true,\"top_logprobs\":21}", C, "top_logprobs", NULL);
    refused("{" M ",\"stream\":\"yes\"}", C, "stream", NULL);
    refused("{" M ",\"stream_options\":{\"include_usage\":true}}", C, "stream_options", "stream");
    refused("{" M ",\"stream\":true,\"stream_options\":{\"include_usage\":1}}", C, "stream_options.include_usage",
            NULL);
    refused("{" M ",\"tools\":[{\"type\":\"function\"}]}", C, "tools[0].function", "'name'");
    refused("{" M ",\"tools\":\"get_weather\"}", C, "tools", "array");
    refused("{" M ",\"response_format\":{\"type\":\"yaml\"}}", C, "response_format.type", "yaml");
    refused("{" M ",\"response_format\":{\"type\":\"json_schema\"}}", C, "response_format.json_schema", NULL);
    refused("{" M ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a b\",\"schema\":{}}}}",
            C, "response_format.json_schema.name", NULL);
#undef M
    /* Deep nesting: jansson's depth limit turns it into a parse error, not a stack overflow. */
    size_t depth = 100000;
    char *deep = malloc(depth * 2 + 1);
    REQUIRE(deep);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    deep[depth * 2] = 0;
    refused(deep, C, NULL, "not valid JSON");
    free(deep);
    /* Too many images. */
    char *many = malloc(100000);
    REQUIRE(many);
    int n = sprintf(many, "{\"messages\":[{\"role\":\"user\",\"content\":[");
    for (int i = 0; i < IRIS_OAI_MAX_IMAGES + 1; i++)
        n += sprintf(many + n, "%s{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:,\"}}", i ? "," : "");
    sprintf(many + n, "]}]}");
    refused(many, C, "messages[0].content[64].image_url", "too many images");
    free(many);
}

IRIS_TEST(openai_builders) {
    iris_oai_err e;
    iris_oai_fail(&e, 400, "invalid_request_error", "temperature", NULL, "bad \"value\" %d", 3);
    char *b = iris_oai_error_body(&e);
    json_error_t je;
    json_t *j = json_loads(b, 0, &je);
    REQUIRE(j);
    json_t *err = json_object_get(j, "error");
    CHECK_STR(json_string_value(json_object_get(err, "message")), "bad \"value\" 3");
    CHECK_STR(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    CHECK_STR(json_string_value(json_object_get(err, "param")), "temperature");
    CHECK(json_is_null(json_object_get(err, "code")));
    json_decref(j);
    free(b);

    /* Invalid UTF-8 in generated text becomes U+FFFD, the JSON stays valid. */
    json_t *r = iris_oai_response(IRIS_OAI_CHAT, "chatcmpl-1", 5, "m", "a\xE4\xBD", 3, "length", NULL, 10, 3);
    REQUIRE(r);
    json_t *msg = json_object_get(json_array_get(json_object_get(r, "choices"), 0), "message");
    CHECK_STR(json_string_value(json_object_get(msg, "content")), "a\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK_STR(json_string_value(json_object_get(msg, "role")), "assistant");
    CHECK_STR(json_string_value(json_object_get(r, "object")), "chat.completion");
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(r, "usage"), "total_tokens")), 13);
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(r, "choices"), 0), "finish_reason")),
              "length");
    json_decref(r);

    size_t n = 0;
    char *sse = iris_oai_sse(iris_oai_chunk(IRIS_OAI_CHAT, "c", 1, "m", "assistant", "", 0, NULL, NULL, 1), &n);
    REQUIRE(sse);
    CHECK(!strncmp(sse, "data: {", 7) && !strcmp(sse + n - 2, "\n\n") && strlen(sse) == n);
    CHECK_CONTAINS(sse, "\"object\":\"chat.completion.chunk\"");
    CHECK_CONTAINS(sse, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}");
    CHECK_CONTAINS(sse, "\"usage\":null");
    CHECK_CONTAINS(sse, "\"finish_reason\":null");
    free(sse);
    sse = iris_oai_sse(iris_oai_usage_chunk(IRIS_OAI_COMPLETION, "c", 1, "m", 4, 2), &n);
    CHECK_CONTAINS(sse, "\"choices\":[]");
    CHECK_CONTAINS(sse, "\"total_tokens\":6");
    free(sse);

    iris_oai_logprob lp = {.token = " hi", .token_len = 3, .logprob = -0.5f, .n_top = 1,
                           .top_tokens = {" hi"}, .top_lens = {3}, .top_logprobs = {-0.5f}};
    json_t *c = iris_oai_chat_logprob(&lp);
    CHECK_EQ_INT(json_array_size(json_object_get(c, "bytes")), 3);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(c, "bytes"), 0)), 32);
    CHECK_EQ_INT(json_array_size(json_object_get(c, "top_logprobs")), 1);
    json_decref(c);
    json_t *cl = iris_oai_completion_logprobs_new();
    iris_oai_completion_logprob_add(cl, &lp, 7);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(cl, "text_offset"), 0)), 7);
    CHECK(json_object_get(json_array_get(json_object_get(cl, "top_logprobs"), 0), " hi") != NULL);
    json_decref(cl);
}

IRIS_TEST(openai_base64_and_urls) {
    uint8_t *out = NULL;
    size_t n = 0;
    iris_err err;
    REQUIRE(iris_media_base64("aGVsbG8=", 8, &out, &n, &err) == 0);
    CHECK(n == 5 && !memcmp(out, "hello", 5));
    free(out);
    REQUIRE(iris_media_base64("aGVsbG8", 7, &out, &n, &err) == 0); /* padding optional */
    CHECK(n == 5 && !memcmp(out, "hello", 5));
    free(out);
    REQUIRE(iris_media_base64("aGV\nsbG8h", 9, &out, &n, &err) == 0);
    CHECK(n == 6 && !memcmp(out, "hello!", 6));
    free(out);
    CHECK(iris_media_base64("aGV*bG8=", 8, &out, &n, &err) == IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "offset 3");
    CHECK(iris_media_base64("aGVsb", 5, &out, &n, &err) == IRIS_EFORMAT);
    CHECK(iris_media_base64("aGVs=bG8", 8, &out, &n, &err) == IRIS_EFORMAT);

    iris_media_opts o = {.allow_remote = 0, .local_dir = NULL, .max_bytes = 16};
    REQUIRE(iris_media_fetch("data:image/png;base64,aGVsbG8=", &o, &out, &n, &err) == 0);
    CHECK(n == 5);
    free(out);
    CHECK(iris_media_fetch("data:image/png,hello", &o, &out, &n, &err) == IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "base64");
    CHECK(iris_media_fetch("data:image/png;base64,@@", &o, &out, &n, &err) == IRIS_EFORMAT);
    CHECK(iris_media_fetch("data:image/png;base64,aGVsbG8gaGVsbG8gaGVsbG8gaGVsbG8=", &o, &out, &n, &err) ==
          IRIS_ELIMIT);
    CHECK(iris_media_fetch("http://127.0.0.1:9/x.png", &o, &out, &n, &err) == IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "--no-remote-images");
    CHECK(iris_media_fetch("file:///etc/passwd", &o, &out, &n, &err) == IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "--allowed-local-media-path");
    CHECK(iris_media_fetch("ftp://x/y", &o, &out, &n, &err) == IRIS_EINVAL);

    /* file:// confined to the allowed directory, symlinks refused. */
    char dir[] = "/tmp/iris-media-XXXXXX";
    REQUIRE(mkdtemp(dir));
    char path[256], link[256], url[300];
    snprintf(path, sizeof path, "%s/a.bin", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    fputs("abc", f);
    fclose(f);
    o.local_dir = dir;
    snprintf(url, sizeof url, "file://%s", path);
    REQUIRE(iris_media_fetch(url, &o, &out, &n, &err) == 0);
    CHECK(n == 3 && !memcmp(out, "abc", 3));
    free(out);
    snprintf(url, sizeof url, "file://%s/../%s", dir, strrchr(dir, '/') + 1);
    CHECK(iris_media_fetch(url, &o, &out, &n, &err) != 0); /* a directory */
    snprintf(link, sizeof link, "%s/escape", dir);
    CHECK(symlink("/etc/hostname", link) == 0);
    snprintf(url, sizeof url, "file://%s", link);
    CHECK(iris_media_fetch(url, &o, &out, &n, &err) == IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "is not a regular file inside the allowed media directory");
    CHECK(iris_media_fetch("file:///etc/hostname", &o, &out, &n, &err) == IRIS_EINVAL);
    unlink(link);
    unlink(path);
    rmdir(dir);
}

IRIS_TEST(openai_metrics_text) {
    iris_metrics *m = iris_metrics_new();
    REQUIRE(m);
    iris_metrics_request(m, "/v1/chat/completions", 200);
    iris_metrics_request(m, "/v1/chat/completions", 200);
    iris_metrics_request(m, "/v1/chat/completions", 400);
    iris_metrics_generation(m, 12, 5, 0.003, 0.02);
    iris_metrics_inter_token(m, 0.004);
    iris_metrics_inter_token(m, 2.0);
    iris_metrics_engine me = {.queue_depth = 3, .running = 2, .kv_blocks_used = 7, .kv_blocks_total = 64,
                              .prefix_cache_hits = 1, .prefix_cache_queries = 4, .image_cache_hits = 0,
                              .image_cache_queries = 2};
    size_t n = 0;
    char *t = iris_metrics_render(m, &me, &n);
    REQUIRE(t);
    CHECK(strlen(t) == n);
    CHECK_CONTAINS(t, "iris:http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2\n");
    CHECK_CONTAINS(t, "status=\"400\"} 1\n");
    CHECK_CONTAINS(t, "iris:prompt_tokens_total 12\n");
    CHECK_CONTAINS(t, "iris:generation_tokens_total 5\n");
    CHECK_CONTAINS(t, "iris:time_to_first_token_seconds_bucket{le=\"0.0025\"} 0\n");
    CHECK_CONTAINS(t, "iris:time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n");
    CHECK_CONTAINS(t, "iris:inter_token_latency_seconds_bucket{le=\"0.005\"} 1\n");
    CHECK_CONTAINS(t, "iris:inter_token_latency_seconds_bucket{le=\"+Inf\"} 2\n");
    CHECK_CONTAINS(t, "iris:inter_token_latency_seconds_count 2\n");
    CHECK_CONTAINS(t, "iris:num_requests_waiting 3\n");
    CHECK_CONTAINS(t, "iris:kv_blocks_used 7\n");
    CHECK_CONTAINS(t, "# TYPE iris:time_to_first_token_seconds histogram\n");
    /* the router's gauges, under vLLM's names too */
    CHECK_CONTAINS(t, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\n");
    CHECK_CONTAINS(t, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n");
    CHECK_CONTAINS(t, "# TYPE iris:kv_cache_usage_perc gauge\niris:kv_cache_usage_perc 0.109375\n");
    CHECK_CONTAINS(t, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.109375\n");
    CHECK_CONTAINS(t, "vllm:gpu_cache_usage_perc 0.109375\n");
    free(t);
    iris_metrics_free(m);
}
