/* test_grammar_server.c: structured output through `iris serve`: response_format parsed into
 * iris_sampling.json_schema (openai.c), and tests/node/structured_output.mjs (the official
 * openai npm client, answers validated with ajv) against the tiny random model. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "server/openai.h"
#include "server_harness.h"
#include "test.h"

IRIS_TEST(grammar_openai_parse) {
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                       "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x_1\",\"strict\":"
                       "true,\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}}";
    iris_sampling s = {0};
    iris_oai_request q;
    iris_oai_err e = {0};
    CHECK_EQ_INT(iris_oai_parse(body, strlen(body), IRIS_OAI_CHAT, &s, &q, &e), 0);
    CHECK_STR(s.json_schema, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}");
    iris_oai_request_free(&q);
    const char *obj = "{\"model\":\"m\",\"prompt\":\"hi\",\"response_format\":{\"type\":\"json_object\"}}";
    memset(&s, 0, sizeof s);
    CHECK_EQ_INT(iris_oai_parse(obj, strlen(obj), IRIS_OAI_COMPLETION, &s, &q, &e), 0);
    CHECK_STR(s.json_schema, "{\"type\":\"object\"}");
    iris_oai_request_free(&q);
    const char *text = "{\"model\":\"m\",\"prompt\":\"hi\",\"response_format\":{\"type\":\"text\"}}";
    memset(&s, 0, sizeof s);
    CHECK_EQ_INT(iris_oai_parse(text, strlen(text), IRIS_OAI_COMPLETION, &s, &q, &e), 0);
    CHECK(s.json_schema == NULL);
    iris_oai_request_free(&q);
}

/* A bad schema over HTTP: 400, param response_format, the keyword named. */
IRIS_TEST(grammar_server_bad_schema) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ts_server s;
    REQUIRE(ts_server_start(&s, NULL) == 0);
    char *out = NULL;
    long st = ts_post(s.port, "/v1/chat/completions",
                      "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"response_format\":"
                      "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":\"object\","
                      "\"minProperties\":2}}}}",
                      &out);
    CHECK_EQ_INT(st, 400);
    CHECK_CONTAINS(out, "\\\"minProperties\\\"");
    CHECK_CONTAINS(out, "\"param\":\"response_format\"");
    free(out);
    CHECK_EQ_INT(ts_server_stop(&s), 0);
}

IRIS_TEST(grammar_server_node_client) {
    ts_node_client_test("ajv", "structured_output.mjs");
}
