/* server_harness.c: the shared helpers of the `iris serve` tests (see
 * server_harness.h), the node client tests' one body among them. */
#include "server_harness.h"
#include "test.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

double ts_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void ts_nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

char *ts_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long k = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = k >= 0 ? malloc((size_t)k + 1) : NULL;
    if (b && fread(b, 1, (size_t)k, f) != (size_t)k) k = 0;
    if (b) b[k] = 0;
    fclose(f);
    if (n) *n = b ? (size_t)k : 0;
    return b;
}

const char *ts_bin(void) {
    const char *b = getenv("IRIS_BIN");
    return b && *b ? b : "build/iris";
}

/* ---- HTTP client ---- */

size_t ts_on_write(char *ptr, size_t size, size_t nmemb, void *ud) {
    ts_body *b = ud;
    size_t k = size * nmemb;
    char *q = realloc(b->p, b->n + k + 1);
    if (!q) return 0;
    b->p = q;
    memcpy(b->p + b->n, ptr, k);
    b->n += k;
    b->p[b->n] = 0;
    return k;
}

long ts_http(int port, const char *method, const char *path, const char *data, size_t n, const char *auth,
             char **out) {
    CURL *c = curl_easy_init();
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    ts_body b = {0};
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
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, ts_on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (out) *out = b.p ? b.p : strdup("");
    else free(b.p);
    return status;
}

long ts_post(int port, const char *path, const char *json, char **out) {
    return ts_http(port, "POST", path, json, strlen(json), NULL, out);
}

int ts_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

int ts_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (!bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* ---- the server process ---- */

int ts_server_start_model(ts_server *s, const char *model, const char *extra) {
    memset(s, 0, sizeof *s);
    signal(SIGPIPE, SIG_IGN); /* writes to a socket the server closed are errors, not death */
    snprintf(s->log, sizeof s->log, "/tmp/iris-serve-test-%d-%ld.log", (int)getpid(), (long)random());
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "exec %s serve %s --port 0 --device cpu --kv-cache-bytes 64MiB --served-model-name tiny %s",
             ts_bin(), model, extra ? extra : "");
    s->pid = fork();
    if (s->pid == 0) {
        int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        dup2(fd, 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    double t0 = ts_now();
    while (ts_now() - t0 < 20) {
        char *log = ts_slurp(s->log, NULL);
        const char *p = log ? strstr(log, "listening on http://127.0.0.1:") : NULL;
        if (p) s->port = atoi(p + strlen("listening on http://127.0.0.1:"));
        int ready = log && strstr(log, "ready in");
        free(log);
        if (s->port && ready) return 0;
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) break;
        ts_nap_ms(20);
    }
    char *log = ts_slurp(s->log, NULL);
    fprintf(stderr, "iris serve did not start:\n%s\n", log ? log : "(no log)");
    free(log);
    return -1;
}

int ts_server_start(ts_server *s, const char *extra) {
    return ts_server_start_model(s, TS_MODEL, extra);
}

int ts_wait_exit(pid_t pid, double timeout_s) {
    int st = 0;
    double t0 = ts_now();
    pid_t r;
    while ((r = waitpid(pid, &st, WNOHANG)) == 0) {
        if (ts_now() - t0 > timeout_s) return -2;
        ts_nap_ms(5);
    }
    if (r != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int ts_server_stop(ts_server *s) {
    if (s->pid <= 0) return -1;
    kill(s->pid, SIGTERM);
    int rc = ts_wait_exit(s->pid, 30);
    if (rc == -2) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        rc = -1;
    }
    s->pid = 0;
    unlink(s->log);
    return rc;
}

/* ---- JSON and SSE ---- */

json_t *ts_json(const char *s) {
    json_error_t je;
    return s ? json_loads(s, JSON_ALLOW_NUL, &je) : NULL;
}

static json_t *at_path(json_t *o, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *cur = o;
    for (char *sv = NULL, *tok = strtok_r(buf, ".", &sv); tok && cur; tok = strtok_r(NULL, ".", &sv))
        cur = json_is_array(cur) ? json_array_get(cur, (size_t)atoi(tok)) : json_object_get(cur, tok);
    return cur;
}

const char *ts_jstr(json_t *o, const char *path) {
    return json_string_value(at_path(o, path));
}

char *ts_jtext(json_t *o, const char *path) {
    json_t *cur = at_path(o, path);
    if (!json_is_string(cur)) return NULL;
    size_t n = json_string_length(cur);
    char *t = malloc(n + 1);
    memcpy(t, json_string_value(cur), n);
    for (size_t i = 0; i < n; i++)
        if (!t[i]) t[i] = 1;
    t[n] = 0;
    return t;
}

long long ts_jint(json_t *o, const char *path) {
    json_t *cur = at_path(o, path);
    return json_is_integer(cur) ? json_integer_value(cur) : -1;
}

static char *b64_file(const char *path) {
    size_t n;
    char *raw = ts_slurp(path, &n);
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

char *ts_data_url(const char *path) {
    char *b = b64_file(path);
    if (!b) return NULL;
    char *u = malloc(strlen(b) + 32);
    sprintf(u, "data:image/png;base64,%s", b);
    free(b);
    return u;
}

char *ts_chat_body(const char *img_url, const char *text, const char *extra) {
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

char *ts_chat_text(int port, const char *req, long *status, char **finish) {
    char *out = NULL;
    *status = ts_post(port, "/v1/chat/completions", req, &out);
    json_t *j = ts_json(out);
    char *r = ts_jtext(j, "choices.0.message.content");
    if (finish) *finish = ts_jstr(j, "choices.0.finish_reason") ? strdup(ts_jstr(j, "choices.0.finish_reason")) : NULL;
    json_decref(j);
    free(out);
    return r;
}

int ts_sse_parse(const char *s, char **text, char **finish, long long *usage_tokens, int *done) {
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
        json_t *j = ts_json(line);
        free(line);
        if (!j) return -1;
        char *t = ts_jtext(j, "choices.0.delta.content");
        if (!t) t = ts_jtext(j, "choices.0.text");
        if (t) {
            size_t k = strlen(t);
            if (n + k + 1 > cap) *text = realloc(*text, cap = (n + k + 1) * 2);
            memcpy(*text + n, t, k + 1);
            n += k;
            free(t);
        }
        const char *f = ts_jstr(j, "choices.0.finish_reason");
        if (f) {
            free(*finish);
            *finish = strdup(f);
        }
        if (json_is_object(json_object_get(j, "usage"))) *usage_tokens = ts_jint(j, "usage.completion_tokens");
        json_decref(j);
        s = end + 2;
    }
    return lines;
}

void ts_check_error(long status, const char *out, long want, const char *param, const char *what) {
    CHECKF(status == want, "%s: status %ld, want %ld: %s", what, status, want, out ? out : "");
    json_t *j = ts_json(out);
    json_t *e = json_object_get(j, "error");
    CHECKF(json_is_string(json_object_get(e, "message")) && json_is_string(json_object_get(e, "type")) &&
               json_object_get(e, "param") && json_object_get(e, "code"),
           "%s: not an OpenAI error body: %s", what, out ? out : "");
    if (param)
        CHECKF(ts_jstr(e, "param") && !strcmp(ts_jstr(e, "param"), param), "%s: param %s, want %s", what,
               ts_jstr(e, "param") ? ts_jstr(e, "param") : "null", param);
    json_decref(j);
}

void ts_check_alive(int port, const char *after) {
    char *out = NULL;
    long st = ts_http(port, "GET", "/health", NULL, 0, NULL, &out);
    CHECKF(st == 200, "server not healthy after %s (status %ld)", after, st);
    free(out);
}

int ts_node_ready(const char *pkg, char *why, size_t cap) {
    if (system("node --version > /dev/null 2>&1") != 0) {
        snprintf(why, cap, "node is not installed: run scripts/setup (it installs nodejs and npm)");
        return -1;
    }
    char path[256];
    snprintf(path, sizeof path, ".cache/node/node_modules/%s/package.json", pkg);
    if (access(path, R_OK) != 0) {
        snprintf(why, cap, "the %s npm package is missing: run scripts/setup", pkg);
        return -1;
    }
    return 0;
}

char *ts_node_run(const char *script, int port, int timeout_s, int *rc) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "timeout %d node tests/node/%s %d tiny 2>&1", timeout_s, script, port);
    int st = -1;
    char *out = iris_test_popen(cmd, &st);
    *rc = st;
    return out;
}

void ts_node_client_test(const char *pkg, const char *script) {
    char why[160];
    int ready = ts_node_ready(pkg, why, sizeof why) == 0;
    CHECKF(ready, "%s", why);
    if (!ready) return;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ts_server s;
    REQUIRE(ts_server_start(&s, NULL) == 0);
    int rc = 0;
    char *buf = ts_node_run(script, s.port, 300, &rc);
    CHECKF(rc == 0, "%s failed:\n%s", script, buf ? buf : "");
    if (getenv("IRIS_TEST_VERBOSE")) fprintf(stderr, "%s", buf ? buf : "");
    CHECK_CONTAINS(buf, "PASS");
    free(buf);
    CHECK_EQ_INT(ts_server_stop(&s), 0);
}
