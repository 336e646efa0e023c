/* test_server.c: `iris serve` as a client sees it: the real binary (env
 * IRIS_BIN, default build/iris) on the tiny model, on a free loopback port,
 * driven with libcurl (and raw sockets for a slow client).  Every endpoint,
 * every error status, the malformed-request corpus (the server keeps
 * serving after each), concurrent clients whose outputs equal the same
 * requests run alone, disconnect cancelling, SIGTERM draining, and the
 * official openai npm client (tests/node/openai_client.mjs). */
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

#include "test.h"
#include "tiny_fixture.h"

#define MODEL TINY_DIR "/tiny-gqa/model"
#define IMG_A TINY_DIR "/images/a.png"
#define IMG_B TINY_DIR "/images/b.png"

typedef struct server {
    pid_t pid;
    int port;
    char log[64];
} server;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long k = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)k + 1);
    if (b && fread(b, 1, (size_t)k, f) != (size_t)k) k = 0;
    if (b) b[k] = 0;
    fclose(f);
    if (n) *n = (size_t)k;
    return b;
}

/* ---- HTTP client ---- */

typedef struct body {
    char *p;
    size_t n;
} body;

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud) {
    body *b = ud;
    size_t k = size * nmemb;
    char *q = realloc(b->p, b->n + k + 1);
    if (!q) return 0;
    b->p = q;
    memcpy(b->p + b->n, ptr, k);
    b->n += k;
    b->p[b->n] = 0;
    return k;
}

/* method GET/POST/...; returns the status (0 on a transport error), the
 * body in *out (malloc'd, NUL-terminated; caller frees). */
static long http(int port, const char *method, const char *path, const char *data, size_t n, const char *auth,
                 char **out) {
    CURL *c = curl_easy_init();
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    body b = {0};
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (auth) h = curl_slist_append(h, auth);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    if (data) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, data);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (out) *out = b.p ? b.p : strdup("");
    else free(b.p);
    return status;
}

static long post(int port, const char *path, const char *json, char **out) {
    return http(port, "POST", path, json, strlen(json), NULL, out);
}

/* ---- the server process ---- */

static int start_server(server *s, const char *extra) {
    memset(s, 0, sizeof *s);
    signal(SIGPIPE, SIG_IGN); /* writes to a socket the server closed are errors, not death */
    snprintf(s->log, sizeof s->log, "/tmp/iris-serve-test-%d-%ld.log", (int)getpid(), (long)random());
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "exec %s serve %s --port 0 --device cpu --kv-cache-bytes 64MiB --served-model-name tiny %s",
             bin, MODEL, extra ? extra : "");
    s->pid = fork();
    if (s->pid == 0) {
        int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        dup2(fd, 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    double t0 = now_s();
    while (now_s() - t0 < 20) {
        char *log = slurp(s->log, NULL);
        const char *p = log ? strstr(log, "listening on http://127.0.0.1:") : NULL;
        if (p) s->port = atoi(p + strlen("listening on http://127.0.0.1:"));
        int ready = log && strstr(log, "ready in");
        free(log);
        if (s->port && ready) return 0;
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) break;
        nap_ms(20);
    }
    char *log = slurp(s->log, NULL);
    fprintf(stderr, "iris serve did not start:\n%s\n", log ? log : "(no log)");
    free(log);
    return -1;
}

/* SIGTERM and wait; returns the exit status (-1 on a signal or timeout). */
static int stop_server(server *s) {
    if (s->pid <= 0) return -1;
    kill(s->pid, SIGTERM);
    int st = 0;
    double t0 = now_s();
    while (waitpid(s->pid, &st, WNOHANG) == 0) {
        if (now_s() - t0 > 30) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
            return -1;
        }
        nap_ms(10);
    }
    s->pid = 0;
    unlink(s->log);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- JSON helpers ---- */

static json_t *parse(const char *s) {
    json_error_t je;
    return s ? json_loads(s, JSON_ALLOW_NUL, &je) : NULL;
}

static const char *jstr(json_t *o, const char *path) {
    /* dotted path with numeric parts as array indexes: "choices.0.message.content" */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *cur = o;
    for (char *sv = NULL, *tok = strtok_r(buf, ".", &sv); tok && cur; tok = strtok_r(NULL, ".", &sv))
        cur = json_is_array(cur) ? json_array_get(cur, (size_t)atoi(tok)) : json_object_get(cur, tok);
    return json_string_value(cur);
}

/* The string at path with NUL bytes shown as 0x01 (generated text may hold
 * U+0000), malloc'd, or NULL. */
static char *jtext(json_t *o, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *cur = o;
    for (char *sv = NULL, *tok = strtok_r(buf, ".", &sv); tok && cur; tok = strtok_r(NULL, ".", &sv))
        cur = json_is_array(cur) ? json_array_get(cur, (size_t)atoi(tok)) : json_object_get(cur, tok);
    if (!json_is_string(cur)) return NULL;
    size_t n = json_string_length(cur);
    char *t = malloc(n + 1);
    memcpy(t, json_string_value(cur), n);
    for (size_t i = 0; i < n; i++)
        if (!t[i]) t[i] = 1;
    t[n] = 0;
    return t;
}

static long long jint(json_t *o, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *cur = o;
    for (char *sv = NULL, *tok = strtok_r(buf, ".", &sv); tok && cur; tok = strtok_r(NULL, ".", &sv))
        cur = json_is_array(cur) ? json_array_get(cur, (size_t)atoi(tok)) : json_object_get(cur, tok);
    return json_is_integer(cur) ? json_integer_value(cur) : -1;
}

static char *b64_file(const char *path) {
    size_t n;
    char *raw = slurp(path, &n);
    if (!raw) return NULL;
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(n / 3 * 4 + 8);
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned char)raw[i] << 16;
        if (i + 1 < n) v |= (unsigned char)raw[i + 1] << 8;
        if (i + 2 < n) v |= (unsigned char)raw[i + 2];
        o[k++] = tbl[(v >> 18) & 63];
        o[k++] = tbl[(v >> 12) & 63];
        o[k++] = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
        o[k++] = i + 2 < n ? tbl[v & 63] : '=';
    }
    o[k] = 0;
    free(raw);
    return o;
}

/* A chat body with an optional image (data: URL) and the given extras. */
static char *chat_body(const char *img_url, const char *text, const char *extra) {
    size_t n = (img_url ? strlen(img_url) : 0) + strlen(text) + (extra ? strlen(extra) : 0) + 512;
    char *b = malloc(n);
    if (img_url)
        snprintf(b, n,
                 "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                 "\"image_url\":{\"url\":\"%s\"}},{\"type\":\"text\",\"text\":\"%s\"}]}]%s%s}",
                 img_url, text, extra ? "," : "", extra ? extra : "");
    else
        snprintf(b, n, "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]%s%s}", text,
                 extra ? "," : "", extra ? extra : "");
    return b;
}

static char *data_url(const char *path) {
    char *b = b64_file(path);
    if (!b) return NULL;
    char *u = malloc(strlen(b) + 32);
    sprintf(u, "data:image/png;base64,%s", b);
    free(b);
    return u;
}

/* The content of a non-streamed chat answer (malloc'd) or NULL. */
static char *chat_text(int port, const char *req, long *status, char **finish) {
    char *out = NULL;
    *status = post(port, "/v1/chat/completions", req, &out);
    json_t *j = parse(out);
    char *r = jtext(j, "choices.0.message.content");
    if (finish) *finish = jstr(j, "choices.0.finish_reason") ? strdup(jstr(j, "choices.0.finish_reason")) : NULL;
    json_decref(j);
    free(out);
    return r;
}

/* Parse an SSE body: concatenated content (chat delta.content or text), the
 * finish_reason, the usage chunk's completion_tokens, and whether it ended
 * with [DONE].  Returns the number of data lines, -1 on a malformed one. */
static int sse_parse(const char *s, char **text, char **finish, long long *usage_tokens, int *done) {
    size_t cap = 4096, n = 0;
    *text = calloc(1, cap);
    *finish = NULL;
    *usage_tokens = -1;
    *done = 0;
    int lines = 0;
    while (s && *s) {
        const char *end = strstr(s, "\n\n");
        if (!end) return -1;
        if (strncmp(s, "data: ", 6)) return -1;
        lines++;
        if (!strncmp(s + 6, "[DONE]", 6)) {
            *done = 1;
            if (end[2]) return -1; /* nothing after [DONE] */
            break;
        }
        char *line = strndup(s + 6, (size_t)(end - s - 6));
        json_t *j = parse(line);
        free(line);
        if (!j) return -1;
        char *t = jtext(j, "choices.0.delta.content");
        if (!t) t = jtext(j, "choices.0.text");
        if (t) {
            size_t k = strlen(t);
            if (n + k + 1 > cap) *text = realloc(*text, cap = (n + k + 1) * 2);
            memcpy(*text + n, t, k + 1);
            n += k;
            free(t);
        }
        const char *f = jstr(j, "choices.0.finish_reason");
        if (f) *finish = strdup(f);
        if (json_is_object(json_object_get(j, "usage"))) *usage_tokens = jint(j, "usage.completion_tokens");
        json_decref(j);
        s = end + 2;
    }
    return lines;
}

/* ---- a tiny HTTP origin for remote image URLs ---- */

static enum MHD_Result origin_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                      const char *version, const char *up, size_t *up_n, void **ptr) {
    size_t n = 0;
    char *png = strcmp(url, "/a.png") ? NULL : slurp(IMG_A, &n);
    struct MHD_Response *r = png ? MHD_create_response_from_buffer(n, png, MHD_RESPMEM_MUST_FREE)
                                 : MHD_create_response_from_buffer(9, "not found", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(c, png ? 200 : 404, r);
    MHD_destroy_response(r);
    return ret;
}

/* ====================================================================== */

static void check_error(long status, const char *out, long want, const char *param, const char *what) {
    CHECKF(status == want, "%s: status %ld, want %ld: %s", what, status, want, out ? out : "");
    json_t *j = parse(out);
    json_t *e = json_object_get(j, "error");
    CHECKF(json_is_string(json_object_get(e, "message")) && json_is_string(json_object_get(e, "type")) &&
               json_object_get(e, "param") && json_object_get(e, "code"),
           "%s: not an OpenAI error body: %s", what, out ? out : "");
    if (param) CHECKF(jstr(e, "param") && !strcmp(jstr(e, "param"), param), "%s: param %s, want %s", what,
                      jstr(e, "param") ? jstr(e, "param") : "null", param);
    json_decref(j);
}

static void check_alive(int port, const char *after) {
    char *out = NULL;
    long st = http(port, "GET", "/health", NULL, 0, NULL, &out);
    CHECKF(st == 200, "server not healthy after %s (status %ld)", after, st);
    free(out);
}

IRIS_TEST(server_endpoints_and_generation) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    server s;
    char extra[512];
    snprintf(extra, sizeof extra, "--allowed-local-media-path %s/images", TINY_DIR);
    REQUIRE(start_server(&s, extra) == 0);
    int port = s.port;
    char *out = NULL;

    CHECK_EQ_INT(http(port, "GET", "/health", NULL, 0, NULL, &out), 200);
    free(out);
    CHECK_EQ_INT(http(port, "GET", "/v1/models", NULL, 0, NULL, &out), 200);
    json_t *j = parse(out);
    CHECK_STR(jstr(j, "object"), "list");
    CHECK_STR(jstr(j, "data.0.id"), "tiny");
    CHECK_STR(jstr(j, "data.0.object"), "model");
    json_decref(j);
    free(out);
    CHECK_EQ_INT(http(port, "GET", "/v1/models/tiny", NULL, 0, NULL, &out), 200);
    free(out);
    long st = http(port, "GET", "/v1/models/other", NULL, 0, NULL, &out);
    check_error(st, out, 404, "model", "GET /v1/models/other");
    free(out);
    st = http(port, "GET", "/v2/nothing", NULL, 0, NULL, &out);
    check_error(st, out, 404, NULL, "unknown route");
    free(out);
    st = http(port, "GET", "/v1/chat/completions", NULL, 0, NULL, &out);
    check_error(st, out, 405, NULL, "GET on a POST route");
    free(out);

    /* Chat, non-streamed: usage, finish_reason length, deterministic per seed. */
    char *req = chat_body(NULL, "Hello there", "\"max_tokens\":12,\"seed\":5,\"temperature\":0.8");
    st = post(port, "/v1/chat/completions", req, &out);
    CHECK_EQ_INT(st, 200);
    j = parse(out);
    CHECK_STR(jstr(j, "object"), "chat.completion");
    CHECK_STR(jstr(j, "model"), "tiny");
    CHECK(jstr(j, "id") && !strncmp(jstr(j, "id"), "chatcmpl-", 9));
    CHECK_STR(jstr(j, "choices.0.message.role"), "assistant");
    CHECK_STR(jstr(j, "choices.0.finish_reason"), "length");
    CHECK_EQ_INT(jint(j, "usage.completion_tokens"), 12);
    CHECK(jint(j, "usage.prompt_tokens") > 3);
    CHECK_EQ_INT(jint(j, "usage.total_tokens"), jint(j, "usage.prompt_tokens") + 12);
    char *text1 = jtext(j, "choices.0.message.content");
    json_decref(j);
    free(out);
    REQUIRE(text1);
    char *text2 = chat_text(port, req, &st, NULL);
    CHECK(text2 && !strcmp(text1, text2));
    free(text2);

    /* The same request streamed: same text, role first, finish then usage then [DONE]. */
    char *sreq = chat_body(NULL, "Hello there",
                           "\"max_tokens\":12,\"seed\":5,\"temperature\":0.8,\"stream\":true,"
                           "\"stream_options\":{\"include_usage\":true}");
    st = post(port, "/v1/chat/completions", sreq, &out);
    CHECK_EQ_INT(st, 200);
    CHECK_CONTAINS(out, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}");
    char *stext, *finish;
    long long utok;
    int done;
    int lines = sse_parse(out, &stext, &finish, &utok, &done);
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
            char *r3 = chat_body(NULL, "Hello there", ex);
            char *fin = NULL;
            char *t3 = chat_text(port, r3, &st, &fin);
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
    char *url = data_url(IMG_A);
    req = chat_body(url, "What is this?", "\"max_tokens\":6,\"seed\":1");
    char *img_text = chat_text(port, req, &st, NULL);
    CHECK_EQ_INT(st, 200);
    CHECK(img_text != NULL);
    free(req);
    char fileurl[512], absdir[512];
    REQUIRE(realpath(IMG_A, absdir));
    snprintf(fileurl, sizeof fileurl, "file://%s", absdir);
    req = chat_body(fileurl, "What is this?", "\"max_tokens\":6,\"seed\":1");
    char *t = chat_text(port, req, &st, NULL);
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
    req = chat_body(httpurl, "What is this?", "\"max_tokens\":6,\"seed\":1");
    t = chat_text(port, req, &st, NULL);
    CHECK_EQ_INT(st, 200);
    CHECK(t && img_text && !strcmp(t, img_text));
    free(t);
    free(req);
    snprintf(httpurl, sizeof httpurl, "http://127.0.0.1:%d/missing.png", oport);
    req = chat_body(httpurl, "What is this?", "\"max_tokens\":6");
    st = post(port, "/v1/chat/completions", req, &out);
    check_error(st, out, 400, "messages[0].content[0].image_url", "http image 404");
    CHECK_CONTAINS(out, "could not fetch");
    free(out);
    free(req);
    MHD_stop_daemon(origin);
    req = chat_body("file:///etc/hostname", "x", NULL);
    st = post(port, "/v1/chat/completions", req, &out);
    check_error(st, out, 400, "messages[0].content[0].image_url", "file:// outside the allowed directory");
    free(out);
    free(req);
    free(img_text);

    /* Logprobs: one entry per token with top_logprobs alternatives. */
    req = chat_body(url, "Describe", "\"max_tokens\":5,\"seed\":2,\"logprobs\":true,\"top_logprobs\":3");
    st = post(port, "/v1/chat/completions", req, &out);
    CHECK_EQ_INT(st, 200);
    j = parse(out);
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
    st = post(port, "/v1/completions", "{\"model\":\"tiny\",\"prompt\":\"Once upon\",\"max_tokens\":7,\"seed\":9}", &out);
    CHECK_EQ_INT(st, 200);
    j = parse(out);
    CHECK_STR(jstr(j, "object"), "text_completion");
    CHECK_EQ_INT(jint(j, "usage.completion_tokens"), 7);
    char *ctext = jtext(j, "choices.0.text");
    json_decref(j);
    free(out);
    st = post(port, "/v1/completions",
              "{\"prompt\":\"Once upon\",\"max_tokens\":7,\"seed\":9,\"stream\":true}", &out);
    CHECK_EQ_INT(st, 200);
    lines = sse_parse(out, &stext, &finish, &utok, &done);
    CHECK(lines >= 2 && done);
    CHECK(ctext && !strcmp(stext, ctext));
    CHECK_STR(finish, "length");
    CHECK_EQ_INT(utok, -1); /* no usage chunk unless asked */
    free(stext);
    free(finish);
    free(ctext);
    free(out);

    /* /metrics after all that. */
    CHECK_EQ_INT(http(port, "GET", "/metrics", NULL, 0, NULL, &out), 200);
    CHECK_CONTAINS(out, "iris:http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"}");
    CHECK_CONTAINS(out, "status=\"400\"}");
    CHECK_CONTAINS(out, "iris:time_to_first_token_seconds_bucket{le=\"+Inf\"}");
    CHECK_CONTAINS(out, "iris:inter_token_latency_seconds_count");
    CHECK_CONTAINS(out, "iris:num_requests_waiting 0");
    CHECK_CONTAINS(out, "iris:kv_blocks_used");
    CHECK_CONTAINS(out, "iris:prefix_cache_hits_total");
    CHECK_CONTAINS(out, "iris:image_cache_hits_total");
    free(out);

    CHECK_EQ_INT(stop_server(&s), 0);
}

/* ---- the malformed-request corpus ---- */

static int connect_port(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

IRIS_TEST(server_malformed_requests) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    server s;
    REQUIRE(start_server(&s, "--body-timeout 1 --max-model-len 256") == 0);
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
        st = post(port, "/v1/chat/completions", cases[i].body, &out);
        check_error(st, out, cases[i].status, cases[i].param, cases[i].what);
        free(out);
        check_alive(port, cases[i].what);
    }

    /* Deeply nested JSON. */
    size_t depth = 200000;
    char *deep = malloc(depth * 2 + 1);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    deep[depth * 2] = 0;
    st = post(port, "/v1/chat/completions", deep, &out);
    check_error(st, out, 400, NULL, "deeply nested JSON");
    free(out);
    free(deep);
    check_alive(port, "deep nesting");

    /* A prompt longer than the context (--max-model-len 256). */
    char *longtext = malloc(20000);
    for (int i = 0; i < 2000; i++) memcpy(longtext + i * 5, "word ", 5);
    longtext[10000] = 0;
    char *req = chat_body(NULL, longtext, NULL);
    st = post(port, "/v1/chat/completions", req, &out);
    check_error(st, out, 400, "messages", "prompt over the context");
    CHECK_CONTAINS(out, "context");
    free(out);
    free(req);
    free(longtext);

    /* 50 MB body: 413 without reading it all. */
    size_t big = 50u << 20;
    char *huge = malloc(big);
    memset(huge, ' ', big);
    memcpy(huge, "{\"messages\":\"", 13);
    st = http(port, "POST", "/v1/chat/completions", huge, big, NULL, &out);
    check_error(st, out, 413, NULL, "50 MB body");
    free(out);
    free(huge);
    check_alive(port, "a 50 MB body");

    /* A client sending one byte at a time: 408 once --body-timeout (1 s) passes. */
    int fd = connect_port(port);
    REQUIRE(fd >= 0);
    const char *hdr = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: 200\r\n\r\n";
    CHECK(write(fd, hdr, strlen(hdr)) == (ssize_t)strlen(hdr));
    char resp[4096] = {0};
    double t0 = now_s();
    int got = 0;
    for (int i = 0; i < 40 && !got; i++) {
        if (write(fd, "{", 1) != 1) break;
        check_alive(port, "a trickling client"); /* others are served meanwhile */
        nap_ms(150);
        ssize_t k = recv(fd, resp, sizeof resp - 1, MSG_DONTWAIT);
        if (k > 0) got = 1;
    }
    close(fd);
    CHECKF(got && strstr(resp, " 408 "), "slow client: %s", resp);
    CHECK(now_s() - t0 < 5);
    check_alive(port, "the slow client");

    /* A client that disconnects mid-stream: its request is cancelled at once. */
    fd = connect_port(port);
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
        nap_ms(20);
        http(port, "GET", "/metrics", NULL, 0, NULL, &out);
        cancelled = strstr(out, "iris:num_requests_running 0\n") && strstr(out, "iris:num_requests_inflight 0\n");
        free(out);
    }
    CHECK(cancelled);
    check_alive(port, "a disconnect");
    CHECK_EQ_INT(stop_server(&s), 0);
}

IRIS_TEST(server_auth_queue_and_remote_refusal) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    server s;
    REQUIRE(start_server(&s, "--api-key sekrit --no-remote-images --max-num-seqs 1 --max-waiting 1") == 0);
    int port = s.port;
    char *out = NULL;
    const char *req = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2}";
    long st = post(port, "/v1/chat/completions", req, &out);
    check_error(st, out, 401, NULL, "no API key");
    free(out);
    st = http(port, "POST", "/v1/chat/completions", req, strlen(req), "Authorization: Bearer wrong", &out);
    check_error(st, out, 401, NULL, "wrong API key");
    free(out);
    st = http(port, "GET", "/v1/models", NULL, 0, "Authorization: Bearer sekri", &out);
    check_error(st, out, 401, NULL, "a prefix of the key");
    free(out);
    CHECK_EQ_INT(http(port, "POST", "/v1/chat/completions", req, strlen(req), "Authorization: Bearer sekrit", &out), 200);
    free(out);
    CHECK_EQ_INT(http(port, "GET", "/health", NULL, 0, NULL, &out), 200); /* probes need no key */
    free(out);

    const char *remote = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
                         "\"http://127.0.0.1:9/a.png\"}}]}]}";
    st = http(port, "POST", "/v1/chat/completions", remote, strlen(remote), "Authorization: Bearer sekrit", &out);
    check_error(st, out, 400, "messages[0].content[0].image_url", "--no-remote-images");
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
            long code = http(port, "POST", "/v1/chat/completions", lr, strlen(lr), "Authorization: Bearer sekrit", &o);
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
    check_alive(port, "a full queue");
    CHECK_EQ_INT(stop_server(&s), 0);
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
    return chat_body(j->image ? (j->seed % 4 < 2 ? g_url_a : g_url_b) : NULL, j->seed % 3 ? "Tell me more" : "Hi", ex);
}

static char *run_job(const job *j, long *status) {
    char *out = NULL;
    *status = post(j->port, "/v1/chat/completions", j->req, &out);
    char *text = NULL;
    if (*status == 200 && j->stream) {
        char *finish;
        long long u;
        int done;
        if (sse_parse(out, &text, &finish, &u, &done) < 0 || !done) {
            free(text);
            text = NULL;
        }
        free(finish);
    } else if (*status == 200) {
        json_t *js = parse(out);
        text = jtext(js, "choices.0.message.content");
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
    server s;
    REQUIRE(start_server(&s, "--max-num-seqs 16") == 0);
    g_url_a = data_url(IMG_A);
    g_url_b = data_url(IMG_B);
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
    double t0 = now_s();
    for (int c = 0; c < CLIENTS; c++) pthread_create(&th[c], NULL, job_thread, jobs[c]);
    for (int c = 0; c < CLIENTS; c++) pthread_join(th[c], NULL);
    double t_conc = now_s() - t0;
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
    CHECK_EQ_INT(stop_server(&s), 0);
}

/* The same image request before and after other requests that share its
 * first KV block (same image, other text) or its text (other image): the
 * answers must be equal, as they are with --no-prefix-caching. */
IRIS_TEST(server_prefix_cache_images) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    server s;
    REQUIRE(start_server(&s, NULL) == 0);
    char *a = data_url(IMG_A), *b = data_url(IMG_B);
    const char *ex = "\"max_tokens\":8,\"seed\":36,\"temperature\":0.9,\"top_k\":50";
    char *ra = chat_body(a, "Hi", ex), *rb = chat_body(b, "Hi", ex);
    char *ra2 = chat_body(a, "Tell me more", ex), *rb2 = chat_body(b, "Tell me more", ex);
    long st;
    char *first = chat_text(s.port, ra, &st, NULL);
    CHECK_EQ_INT(st, 200);
    free(chat_text(s.port, rb, &st, NULL));
    free(chat_text(s.port, ra2, &st, NULL));
    free(chat_text(s.port, rb2, &st, NULL));
    char *again = chat_text(s.port, ra, &st, NULL);
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
    CHECK_EQ_INT(stop_server(&s), 0);
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
    a->status = post(a->port, "/v1/chat/completions",
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":400,\"ignore_eos\":true}",
                     &out);
    json_t *j = parse(out);
    a->tokens = jint(j, "usage.completion_tokens");
    json_decref(j);
    free(out);
    return NULL;
}

IRIS_TEST(server_sigterm_drains) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    server s;
    REQUIRE(start_server(&s, "--shutdown-timeout 20") == 0);
    drain_arg a = {.port = s.port};
    pthread_t th;
    pthread_create(&th, NULL, drain_client, &a);
    int running = 0;
    for (int i = 0; i < 200 && !running; i++) {
        char *out = NULL;
        http(s.port, "GET", "/metrics", NULL, 0, NULL, &out);
        running = out && strstr(out, "iris:num_requests_inflight 1\n");
        free(out);
        if (!running) nap_ms(5);
    }
    CHECK(running);
    int port = s.port;
    kill(s.pid, SIGTERM);
    nap_ms(100);
    char *out = NULL;
    CHECK_EQ_INT(http(port, "GET", "/health", NULL, 0, NULL, &out), 0); /* no longer accepting */
    free(out);
    pthread_join(th, NULL);
    CHECK_EQ_INT(a.status, 200);
    /* The tiny model may emit an end token before 400; either way it finished, not cancelled. */
    CHECK(a.tokens > 0);
    int st = 0;
    double t0 = now_s();
    while (waitpid(s.pid, &st, WNOHANG) == 0 && now_s() - t0 < 20) nap_ms(10);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char *log = slurp(s.log, NULL);
    CHECK_CONTAINS(log, "draining");
    CHECK(log && !strstr(log, "cancelled"));
    free(log);
    unlink(s.log);
}

/* ---- the official openai npm client ---- */

IRIS_TEST(server_openai_node_client) {
    int have_node = system("node --version > /dev/null 2>&1") == 0;
    CHECKF(have_node, "node is not installed: run scripts/setup (it installs nodejs and npm)");
    if (!have_node) return;
    FILE *f = fopen(".cache/node/node_modules/openai/package.json", "r");
    CHECKF(f != NULL, "the openai npm package is missing: run scripts/setup (npm install --prefix .cache/node openai)");
    if (!f) return;
    fclose(f);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    server s;
    REQUIRE(start_server(&s, NULL) == 0);
    char cmd[256], buf[8192] = {0};
    snprintf(cmd, sizeof cmd, "node tests/node/openai_client.mjs %d tiny 2>&1", s.port);
    FILE *p = popen(cmd, "r");
    REQUIRE(p);
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    int rc = pclose(p);
    CHECKF(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "openai client failed:\n%s", buf);
    CHECK_CONTAINS(buf, "PASS");
    CHECK_EQ_INT(stop_server(&s), 0);
}
