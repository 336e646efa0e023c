/* test_server.c: `iris serve` as a client sees it: the real binary (env
 * IRIS_BIN, default build/iris) on the tiny model, on a free loopback port,
 * driven with libcurl (and raw sockets for a slow client).  Every endpoint,
 * every error status, the malformed-request corpus (the server keeps
 * serving after each), concurrent clients whose outputs equal the same
 * requests run alone, disconnect cancelling, SIGTERM draining, and the
 * official openai npm client (tests/node/openai_client.mjs).  The helpers
 * (starting the server, the client, JSON and SSE readers) are in
 * server_harness.c. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server_harness.h"
#include "test.h"

#define IMG_A TS_IMG_A
#define IMG_B TS_IMG_B

/* ---- a tiny HTTP origin for remote image URLs ---- */

static enum MHD_Result origin_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                      const char *version, const char *up, size_t *up_n, void **ptr) {
    size_t n = 0;
    char *png = strcmp(url, "/a.png") ? NULL : ts_slurp(IMG_A, &n);
    struct MHD_Response *r = png ? MHD_create_response_from_buffer(n, png, MHD_RESPMEM_MUST_FREE)
                                 : MHD_create_response_from_buffer(9, "not found", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(c, png ? 200 : 404, r);
    MHD_destroy_response(r);
    return ret;
}

/* ====================================================================== */

IRIS_TEST(server_endpoints_and_generation) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ts_server s;
    char extra[512];
    snprintf(extra, sizeof extra, "--allowed-local-media-path %s/images --allowed-media-networks 127.0.0.1/32", TINY_DIR);
    REQUIRE(ts_server_start(&s, extra) == 0);
    int port = s.port;
    char *out = NULL;

    CHECK_EQ_INT(ts_http(port, "GET", "/health", NULL, 0, NULL, &out), 200);
    free(out);
    CHECK_EQ_INT(ts_http(port, "GET", "/v1/models", NULL, 0, NULL, &out), 200);
    json_t *j = ts_json(out);
    CHECK_STR(ts_jstr(j, "object"), "list");
    CHECK_STR(ts_jstr(j, "data.0.id"), "tiny");
    CHECK_STR(ts_jstr(j, "data.0.object"), "model");
    json_decref(j);
    free(out);
    CHECK_EQ_INT(ts_http(port, "GET", "/v1/models/tiny", NULL, 0, NULL, &out), 200);
    free(out);
    long st = ts_http(port, "GET", "/v1/models/other", NULL, 0, NULL, &out);
    ts_check_error(st, out, 404, "model", "GET /v1/models/other");
    free(out);
    st = ts_http(port, "GET", "/v2/nothing", NULL, 0, NULL, &out);
    ts_check_error(st, out, 404, NULL, "unknown route");
    free(out);
    st = ts_http(port, "GET", "/v1/chat/completions", NULL, 0, NULL, &out);
    ts_check_error(st, out, 405, NULL, "GET on a POST route");
    free(out);

    /* Chat, non-streamed: usage, finish_reason length, deterministic per seed. */
    char *req = ts_chat_body(NULL, "Hello there", "\"max_tokens\":12,\"seed\":5,\"temperature\":0.8");
    st = ts_post(port, "/v1/chat/completions", req, &out);
    CHECK_EQ_INT(st, 200);
    j = ts_json(out);
    CHECK_STR(ts_jstr(j, "object"), "chat.completion");
    CHECK_STR(ts_jstr(j, "model"), "tiny");
    CHECK(ts_jstr(j, "id") && !strncmp(ts_jstr(j, "id"), "chatcmpl-", 9));
    CHECK_STR(ts_jstr(j, "choices.0.message.role"), "assistant");
    CHECK_STR(ts_jstr(j, "choices.0.finish_reason"), "length");
    CHECK_EQ_INT(ts_jint(j, "usage.completion_tokens"), 12);
    CHECK(ts_jint(j, "usage.prompt_tokens") > 3);
    CHECK_EQ_INT(ts_jint(j, "usage.total_tokens"), ts_jint(j, "usage.prompt_tokens") + 12);
    char *text1 = ts_jtext(j, "choices.0.message.content");
    json_decref(j);
    free(out);
    REQUIRE(text1);
    char *text2 = ts_chat_text(port, req, &st, NULL);
    CHECK(text2 && !strcmp(text1, text2));
    free(text2);

    /* The same request streamed: same text, role first, finish then usage then [DONE]. */
    char *sreq = ts_chat_body(NULL, "Hello there",
                           "\"max_tokens\":12,\"seed\":5,\"temperature\":0.8,\"stream\":true,"
                           "\"stream_options\":{\"include_usage\":true}");
    st = ts_post(port, "/v1/chat/completions", sreq, &out);
    CHECK_EQ_INT(st, 200);
    CHECK_CONTAINS(out, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}");
    char *stext, *finish;
    long long utok;
    int done;
    int lines = ts_sse_parse(out, &stext, &finish, &utok, &done);
    CHECKF(lines >= 4, "SSE lines %d: %s", lines, out);
    CHECK(done);
    CHECK_STR(stext, text1);
    CHECK_STR(finish, "length");
    CHECK_EQ_INT(utok, 12);
    free(stext);
    free(finish);
    free(out);
    free(sreq);

    /* A stop string from the middle of the known answer: the answer ends just before it. */
    size_t tl = strlen(text1);
    if (tl >= 6) {
        char stop[8] = {0};
        size_t at = tl / 2;
        memcpy(stop, text1 + at, 3);
        int plain = 1;
        for (int i = 0; i < 3; i++) plain &= stop[i] >= 'a' && stop[i] <= 'z';
        if (plain) {
            char ex[256];
            snprintf(ex, sizeof ex, "\"max_tokens\":12,\"seed\":5,\"temperature\":0.8,\"stop\":[\"%s\"]", stop);
            char *r3 = ts_chat_body(NULL, "Hello there", ex);
            char *fin = NULL;
            char *t3 = ts_chat_text(port, r3, &st, &fin);
            const char *first = strstr(text1, stop);
            CHECK(t3 && first && strlen(t3) == (size_t)(first - text1) && !strncmp(t3, text1, strlen(t3)));
            CHECK_STR(fin, "stop");
            free(t3);
            free(fin);
            free(r3);
        }
    }
    free(req);

    /* Images: data: URL, file:// inside the allowed directory, http:// from a local origin. */
    char *url = ts_data_url(IMG_A);
    req = ts_chat_body(url, "What is this?", "\"max_tokens\":6,\"seed\":1");
    char *img_text = ts_chat_text(port, req, &st, NULL);
    CHECK_EQ_INT(st, 200);
    CHECK(img_text != NULL);
    free(req);
    char fileurl[512], absdir[512];
    REQUIRE(realpath(IMG_A, absdir));
    snprintf(fileurl, sizeof fileurl, "file://%s", absdir);
    req = ts_chat_body(fileurl, "What is this?", "\"max_tokens\":6,\"seed\":1");
    char *t = ts_chat_text(port, req, &st, NULL);
    CHECK_EQ_INT(st, 200);
    CHECK(t && img_text && !strcmp(t, img_text)); /* same bytes, same answer */
    free(t);
    free(req);
    struct MHD_Daemon *origin = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, origin_handler, NULL,
                                                 MHD_OPTION_END);
    REQUIRE(origin);
    int oport = MHD_get_daemon_info(origin, MHD_DAEMON_INFO_BIND_PORT)->port;
    char httpurl[128];
    snprintf(httpurl, sizeof httpurl, "http://127.0.0.1:%d/a.png", oport);
    req = ts_chat_body(httpurl, "What is this?", "\"max_tokens\":6,\"seed\":1");
    t = ts_chat_text(port, req, &st, NULL);
    CHECK_EQ_INT(st, 200);
    CHECK(t && img_text && !strcmp(t, img_text));
    free(t);
    free(req);
    snprintf(httpurl, sizeof httpurl, "http://127.0.0.1:%d/missing.png", oport);
    req = ts_chat_body(httpurl, "What is this?", "\"max_tokens\":6");
    st = ts_post(port, "/v1/chat/completions", req, &out);
    ts_check_error(st, out, 400, "messages[0].content[0].image_url", "http image 404");
    CHECK_CONTAINS(out, "could not fetch");
    free(out);
    free(req);
    MHD_stop_daemon(origin);
    req = ts_chat_body("file:///etc/hostname", "x", NULL);
    st = ts_post(port, "/v1/chat/completions", req, &out);
    ts_check_error(st, out, 400, "messages[0].content[0].image_url", "file:// outside the allowed directory");
    free(out);
    free(req);
    free(img_text);

    /* Logprobs: one entry per token with top_logprobs alternatives. */
    req = ts_chat_body(url, "Describe", "\"max_tokens\":5,\"seed\":2,\"logprobs\":true,\"top_logprobs\":3");
    st = ts_post(port, "/v1/chat/completions", req, &out);
    CHECK_EQ_INT(st, 200);
    j = ts_json(out);
    json_t *lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
    json_t *lc = json_object_get(lp, "content");
    CHECK_EQ_INT(json_array_size(lc), 5);
    CHECK_EQ_INT(json_array_size(json_object_get(json_array_get(lc, 0), "top_logprobs")), 3);
    double l0 = json_number_value(json_object_get(json_array_get(lc, 0), "logprob"));
    CHECK(l0 <= 0 && l0 > -100);
    json_decref(j);
    free(out);
    free(req);
    free(url);

    /* Completions, plain and streamed. */
    st = ts_post(port, "/v1/completions", "{\"model\":\"tiny\",\"prompt\":\"Once upon\",\"max_tokens\":7,\"seed\":9}", &out);
    CHECK_EQ_INT(st, 200);
    j = ts_json(out);
    CHECK_STR(ts_jstr(j, "object"), "text_completion");
    CHECK_EQ_INT(ts_jint(j, "usage.completion_tokens"), 7);
    char *ctext = ts_jtext(j, "choices.0.text");
    json_decref(j);
    free(out);
    st = ts_post(port, "/v1/completions",
              "{\"prompt\":\"Once upon\",\"max_tokens\":7,\"seed\":9,\"stream\":true}", &out);
    CHECK_EQ_INT(st, 200);
    lines = ts_sse_parse(out, &stext, &finish, &utok, &done);
    CHECK(lines >= 2 && done);
    CHECK(ctext && !strcmp(stext, ctext));
    CHECK_STR(finish, "length");
    CHECK_EQ_INT(utok, -1); /* no usage chunk unless asked */
    free(stext);
    free(finish);
    free(ctext);
    free(out);

    /* /metrics after all that. */
    CHECK_EQ_INT(ts_http(port, "GET", "/metrics", NULL, 0, NULL, &out), 200);
    CHECK_CONTAINS(out, "iris:http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"}");
    CHECK_CONTAINS(out, "status=\"400\"}");
    CHECK_CONTAINS(out, "iris:time_to_first_token_seconds_bucket{le=\"+Inf\"}");
    CHECK_CONTAINS(out, "iris:inter_token_latency_seconds_count");
    CHECK_CONTAINS(out, "iris:num_requests_waiting 0");
    CHECK_CONTAINS(out, "iris:kv_blocks_used");
    CHECK_CONTAINS(out, "iris:prefix_cache_hits_total");
    CHECK_CONTAINS(out, "iris:image_cache_hits_total");
    free(out);

    CHECK_EQ_INT(ts_server_stop(&s), 0);
}

/* ---- the malformed-request corpus ---- */

IRIS_TEST(server_malformed_requests) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ts_server s;
    REQUIRE(ts_server_start(&s, "--body-timeout 1 --max-model-len 256") == 0);
    int port = s.port;
    char *out = NULL;
    long st;
    static const struct {
        const char *what, *body, *param;
        long status;
    } cases[] = {
        {"empty body", "", NULL, 400},
        {"truncated JSON", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi", NULL, 400},
        {"not an object", "[1,2,3]", NULL, 400},
        {"binary garbage", "\x01\x02\xff\xfe", NULL, 400},
        {"messages not an array", "{\"messages\":\"hi\"}", "messages", 400},
        {"content wrong type", "{\"messages\":[{\"role\":\"user\",\"content\":42}]}", "messages[0].content", 400},
        {"max_tokens a string", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":\"9\"}",
         "max_tokens", 400},
        {"huge integer", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":123456789012345678901234567890}",
         NULL, 400},
        {"huge float", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":1e400}", NULL, 400},
        {"temperature out of range", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":9}",
         "temperature", 400},
        {"n = 2", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", "n", 400},
        {"invalid base64",
         "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
         "\"data:image/png;base64,%%%%\"}}]}]}",
         "messages[0].content[0].image_url", 400},
        {"a text file as an image",
         "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image_url\","
         "\"image_url\":{\"url\":\"data:image/png;base64,SGVsbG8sIHdvcmxkIQo=\"}}]}]}",
         "messages[0].content[1].image_url", 400},
        {"truncated PNG",
         "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
         "\"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB\"}}]}]}",
         "messages[0].content[0].image_url", 400},
        {"max_tokens over the context", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":100000}",
         "max_tokens", 400},
        {"unknown model", "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "model", 404},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        st = ts_post(port, "/v1/chat/completions", cases[i].body, &out);
        ts_check_error(st, out, cases[i].status, cases[i].param, cases[i].what);
        if (!strcmp(cases[i].what, "max_tokens over the context")) CHECK_CONTAINS(out, "max_tokens 100000");
        free(out);
        ts_check_alive(port, cases[i].what);
    }

    /* Deeply nested JSON. */
    size_t depth = 200000;
    char *deep = malloc(depth * 2 + 1);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    deep[depth * 2] = 0;
    st = ts_post(port, "/v1/chat/completions", deep, &out);
    ts_check_error(st, out, 400, NULL, "deeply nested JSON");
    free(out);
    free(deep);
    ts_check_alive(port, "deep nesting");

    /* A prompt longer than the context (--max-model-len 256). */
    char *longtext = malloc(20000);
    for (int i = 0; i < 2000; i++) memcpy(longtext + i * 5, "word ", 5);
    longtext[10000] = 0;
    char *req = ts_chat_body(NULL, longtext, NULL);
    st = ts_post(port, "/v1/chat/completions", req, &out);
    ts_check_error(st, out, 400, "messages", "prompt over the context");
    /* the engine's check (iris_engine_submit), its message passed through */
    CHECK_CONTAINS(out, "the context of this model is 256 tokens");
    CHECK_CONTAINS(out, "context_length_exceeded");
    free(out);
    free(req);
    free(longtext);

    /* 50 MB body: 413 without reading it all. */
    size_t big = 50u << 20;
    char *huge = malloc(big);
    memset(huge, ' ', big);
    memcpy(huge, "{\"messages\":\"", 13);
    st = ts_http(port, "POST", "/v1/chat/completions", huge, big, NULL, &out);
    ts_check_error(st, out, 413, NULL, "50 MB body");
    free(out);
    free(huge);
    ts_check_alive(port, "a 50 MB body");

    /* A client sending one byte at a time: 408 once --body-timeout (1 s) passes. */
    int fd = ts_connect(port);
    REQUIRE(fd >= 0);
    const char *hdr = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: 200\r\n\r\n";
    CHECK(write(fd, hdr, strlen(hdr)) == (ssize_t)strlen(hdr));
    char resp[4096] = {0};
    double t0 = ts_now();
    int got = 0;
    for (int i = 0; i < 40 && !got; i++) {
        if (write(fd, "{", 1) != 1) break;
        ts_check_alive(port, "a trickling client"); /* others are served meanwhile */
        ts_nap_ms(150);
        ssize_t k = recv(fd, resp, sizeof resp - 1, MSG_DONTWAIT);
        if (k > 0) got = 1;
    }
    close(fd);
    CHECKF(got && strstr(resp, " 408 "), "slow client: %s", resp);
    CHECK(ts_now() - t0 < 5);
    ts_check_alive(port, "the slow client");

    /* A client that disconnects mid-stream: its request is cancelled at once. */
    fd = ts_connect(port);
    REQUIRE(fd >= 0);
    const char *sbody = "{\"messages\":[{\"role\":\"user\",\"content\":\"go\"}],\"max_tokens\":200,\"stream\":true,"
                        "\"ignore_eos\":true}";
    char sreq[1024];
    snprintf(sreq, sizeof sreq,
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s", strlen(sbody), sbody);
    CHECK(write(fd, sreq, strlen(sreq)) == (ssize_t)strlen(sreq));
    ssize_t k = recv(fd, resp, sizeof resp - 1, 0); /* the first chunk */
    CHECK(k > 0);
    close(fd);
    int cancelled = 0;
    for (int i = 0; i < 100 && !cancelled; i++) {
        ts_nap_ms(20);
        ts_http(port, "GET", "/metrics", NULL, 0, NULL, &out);
        cancelled = strstr(out, "iris:num_requests_running 0\n") && strstr(out, "iris:num_requests_inflight 0\n");
        free(out);
    }
    CHECK(cancelled);
    ts_check_alive(port, "a disconnect");
    CHECK_EQ_INT(ts_server_stop(&s), 0);
}

IRIS_TEST(server_auth_queue_and_remote_refusal) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ts_server s;
    REQUIRE(ts_server_start(&s, "--api-key sekrit --no-remote-images --max-num-seqs 1 --max-waiting 1") == 0);
    int port = s.port;
    char *out = NULL;
    const char *req = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2}";
    long st = ts_post(port, "/v1/chat/completions", req, &out);
    ts_check_error(st, out, 401, NULL, "no API key");
    free(out);
    st = ts_http(port, "POST", "/v1/chat/completions", req, strlen(req), "Authorization: Bearer wrong", &out);
    ts_check_error(st, out, 401, NULL, "wrong API key");
    free(out);
    st = ts_http(port, "GET", "/v1/models", NULL, 0, "Authorization: Bearer sekri", &out);
    ts_check_error(st, out, 401, NULL, "a prefix of the key");
    free(out);
    CHECK_EQ_INT(ts_http(port, "POST", "/v1/chat/completions", req, strlen(req), "Authorization: Bearer sekrit", &out), 200);
    free(out);
    CHECK_EQ_INT(ts_http(port, "GET", "/health", NULL, 0, NULL, &out), 200); /* probes need no key */
    free(out);

    const char *remote = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
                         "\"http://127.0.0.1:9/a.png\"}}]}]}";
    st = ts_http(port, "POST", "/v1/chat/completions", remote, strlen(remote), "Authorization: Bearer sekrit", &out);
    ts_check_error(st, out, 400, "messages[0].content[0].image_url", "--no-remote-images");
    CHECK_CONTAINS(out, "disabled");
    free(out);

    /* --max-num-seqs 1 --max-waiting 1: six long requests at once; those the
     * engine cannot queue get 503 queue_full, the others complete. */
    enum { N = 6 };
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            char *o = NULL;
            const char *lr =
                "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":300,\"ignore_eos\":true}";
            long code = ts_http(port, "POST", "/v1/chat/completions", lr, strlen(lr), "Authorization: Bearer sekrit", &o);
            int ok = code == 200 || (code == 503 && strstr(o, "queue_full"));
            _exit(code == 200 ? 0 : ok ? 3 : 1);
        }
    }
    int n200 = 0, n503 = 0, nbad = 0;
    for (int i = 0; i < N; i++) {
        int wst;
        waitpid(kids[i], &wst, 0);
        int code = WIFEXITED(wst) ? WEXITSTATUS(wst) : 1;
        n200 += code == 0;
        n503 += code == 3;
        nbad += code != 0 && code != 3;
    }
    CHECKF(nbad == 0 && n200 >= 1 && n503 >= 1, "queue: %d ok, %d 503, %d bad", n200, n503, nbad);
    ts_check_alive(port, "a full queue");
    CHECK_EQ_INT(ts_server_stop(&s), 0);
}

/* ---- concurrency: every request equals the same request run alone ---- */

typedef struct job {
    int port, stream, image, seed;
    char *req;
    char *text;       /* concurrent answer */
    long status;
} job;

static char *g_url_a, *g_url_b;

static char *job_body(const job *j) {
    char ex[256];
    snprintf(ex, sizeof ex, "\"max_tokens\":%d,\"seed\":%d,\"temperature\":0.9,\"top_k\":50%s", 8 + j->seed % 9,
             j->seed, j->stream ? ",\"stream\":true" : "");
    return ts_chat_body(j->image ? (j->seed % 4 < 2 ? g_url_a : g_url_b) : NULL, j->seed % 3 ? "Tell me more" : "Hi", ex);
}

static char *run_job(const job *j, long *status) {
    char *out = NULL;
    *status = ts_post(j->port, "/v1/chat/completions", j->req, &out);
    char *text = NULL;
    if (*status == 200 && j->stream) {
        char *finish;
        long long u;
        int done;
        if (ts_sse_parse(out, &text, &finish, &u, &done) < 0 || !done) {
            free(text);
            text = NULL;
        }
        free(finish);
    } else if (*status == 200) {
        json_t *js = ts_json(out);
        text = ts_jtext(js, "choices.0.message.content");
        json_decref(js);
    }
    free(out);
    return text;
}

static void *job_thread(void *arg) {
    job *jobs = arg;
    for (job *j = jobs; j->req; j++) j->text = run_job(j, &j->status);
    return NULL;
}

IRIS_TEST(server_concurrent_equals_alone) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ts_server s;
    REQUIRE(ts_server_start(&s, "--max-num-seqs 16") == 0);
    g_url_a = ts_data_url(IMG_A);
    g_url_b = ts_data_url(IMG_B);
    enum { CLIENTS = 32, PER = 3 };
    static job jobs[CLIENTS][PER + 1];
    for (int c = 0; c < CLIENTS; c++) {
        for (int k = 0; k < PER; k++) {
            job *j = &jobs[c][k];
            memset(j, 0, sizeof *j);
            j->port = s.port;
            j->seed = c * PER + k;
            j->stream = (c + k) % 2;
            j->image = c % 3 == 0;
            j->req = job_body(j);
        }
        memset(&jobs[c][PER], 0, sizeof jobs[c][PER]);
    }
    pthread_t th[CLIENTS];
    double t0 = ts_now();
    for (int c = 0; c < CLIENTS; c++) pthread_create(&th[c], NULL, job_thread, jobs[c]);
    for (int c = 0; c < CLIENTS; c++) pthread_join(th[c], NULL);
    double t_conc = ts_now() - t0;
    int ok = 0, same = 0;
    for (int c = 0; c < CLIENTS; c++)
        for (int k = 0; k < PER; k++) {
            job *j = &jobs[c][k];
            ok += j->status == 200 && j->text;
            long st;
            char *alone = run_job(j, &st); /* the same request with nothing beside it */
            int eq = alone && j->text && !strcmp(alone, j->text);
            same += eq;
            CHECKF(eq, "request %d (stream %d, image %d): concurrent \"%s\" != alone \"%s\"", j->seed, j->stream,
                   j->image, j->text ? j->text : "(none)", alone ? alone : "(none)");
            free(alone);
            free(j->text);
            free(j->req);
        }
    CHECK_EQ_INT(ok, CLIENTS * PER);
    CHECK_EQ_INT(same, CLIENTS * PER);
    printf("    %d concurrent requests (%d clients) in %.2f s; %d equal to the same request alone\n", CLIENTS * PER,
           CLIENTS, t_conc, same);
    free(g_url_a);
    free(g_url_b);
    CHECK_EQ_INT(ts_server_stop(&s), 0);
}

/* The same image request before and after other requests that share its
 * first KV block (same image, other text) or its text (other image): the
 * answers must be equal, as they are with --no-prefix-caching. */
IRIS_TEST(server_prefix_cache_images) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ts_server s;
    REQUIRE(ts_server_start(&s, NULL) == 0);
    char *a = ts_data_url(IMG_A), *b = ts_data_url(IMG_B);
    const char *ex = "\"max_tokens\":8,\"seed\":36,\"temperature\":0.9,\"top_k\":50";
    char *ra = ts_chat_body(a, "Hi", ex), *rb = ts_chat_body(b, "Hi", ex);
    char *ra2 = ts_chat_body(a, "Tell me more", ex), *rb2 = ts_chat_body(b, "Tell me more", ex);
    long st;
    char *first = ts_chat_text(s.port, ra, &st, NULL);
    CHECK_EQ_INT(st, 200);
    free(ts_chat_text(s.port, rb, &st, NULL));
    free(ts_chat_text(s.port, ra2, &st, NULL));
    free(ts_chat_text(s.port, rb2, &st, NULL));
    char *again = ts_chat_text(s.port, ra, &st, NULL);
    CHECKF(first && again && !strcmp(first, again), "image A + \"Hi\": first \"%s\", after other requests \"%s\"",
           first ? first : "(none)", again ? again : "(none)");
    free(first);
    free(again);
    free(ra);
    free(rb);
    free(ra2);
    free(rb2);
    free(a);
    free(b);
    CHECK_EQ_INT(ts_server_stop(&s), 0);
}

/* ---- SIGTERM drains ---- */

typedef struct drain_arg {
    int port;
    long status;
    long long tokens;
} drain_arg;

static void *drain_client(void *p) {
    drain_arg *a = p;
    char *out = NULL;
    a->status = ts_post(a->port, "/v1/chat/completions",
                        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":400,\"ignore_eos\":true}",
                        &out);
    json_t *j = ts_json(out);
    a->tokens = ts_jint(j, "usage.completion_tokens");
    json_decref(j);
    free(out);
    return NULL;
}

IRIS_TEST(server_sigterm_drains) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ts_server s;
    REQUIRE(ts_server_start(&s, "--shutdown-timeout 20") == 0);
    drain_arg a = {.port = s.port};
    pthread_t th;
    pthread_create(&th, NULL, drain_client, &a);
    int running = 0;
    for (int i = 0; i < 200 && !running; i++) {
        char *out = NULL;
        ts_http(s.port, "GET", "/metrics", NULL, 0, NULL, &out);
        running = out && strstr(out, "iris:num_requests_inflight 1\n");
        free(out);
        if (!running) ts_nap_ms(5);
    }
    CHECK(running);
    int port = s.port;
    kill(s.pid, SIGTERM);
    ts_nap_ms(100);
    char *out = NULL;
    CHECK_EQ_INT(ts_http(port, "GET", "/health", NULL, 0, NULL, &out), 0); /* no longer accepting */
    free(out);
    pthread_join(th, NULL);
    CHECK_EQ_INT(a.status, 200);
    /* The tiny model may emit an end token before 400; either way it finished, not cancelled. */
    CHECK(a.tokens > 0);
    int st = 0;
    double t0 = ts_now();
    while (waitpid(s.pid, &st, WNOHANG) == 0 && ts_now() - t0 < 20) ts_nap_ms(10);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char *log = ts_slurp(s.log, NULL);
    CHECK_CONTAINS(log, "draining");
    CHECK(log && !strstr(log, "cancelled"));
    free(log);
    unlink(s.log);
}

/* ---- the official openai npm client ---- */

IRIS_TEST(server_openai_node_client) {
    ts_node_client_test("openai", "openai_client.mjs");
}
