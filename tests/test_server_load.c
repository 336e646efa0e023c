/* test_server_load.c: `iris serve` under load, and scaled out behind nginx.
 *
 * server_load_200_clients: 200 clients at once for 30 s ($IRIS_LOAD_SECONDS
 * to change it) against one server on the tiny model (CPU): chat and text
 * completions, streamed and not, with and without an image, half the clients
 * keeping their connection and half opening one per request.  Every request
 * must complete, and every answer must equal the same request run alone
 * (same seed) before the load started.  The requests are drawn from a fixed
 * set of distinct ones (DISTINCT), so "alone" is run once per distinct
 * request and the check covers every one of the thousands sent.  The
 * figures (requests, req/s, latency percentiles) are printed, never
 * asserted.
 *
 * server_scale_out_nginx: two servers behind nginx (the Debian package,
 * installed by scripts/setup; the test fails without it), run unprivileged
 * from a generated config in a temporary directory on free ports.  /health
 * is the readiness gate: nginx starts once both answer 200.  Open-source
 * nginx has no active health checks, so failover is passive:
 * `proxy_next_upstream error timeout http_503 non_idempotent` retries a
 * request on the other server when the first refuses the connection, drops
 * it or answers 503 (a draining server answers 503 "shutting_down" on
 * connections nginx keeps alive), POSTs included, and max_fails=1 takes the
 * server out of rotation at once.  Under load one server gets SIGTERM: it
 * stops accepting, finishes what it was serving and exits 0; no request
 * fails, and every answer equals the same request alone.
 *
 * Threads: the clients are pthreads with one libcurl easy handle each; the
 * only shared state is the read-only request table. */
#include <curl/curl.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server_harness.h"
#include "test.h"

/* ---- the distinct requests and their answers alone ---- */

typedef struct lreq {
    char *body;
    const char *path;       /* /v1/chat/completions or /v1/completions */
    int chat, stream, image;
    char *want;             /* the answer alone: text, finish_reason, completion tokens */
    char *want_finish;
    long long want_tokens;
} lreq;

enum { DISTINCT = 96 };

static const char *const prompts[] = {"Hi", "Tell me more", "What is in the picture?", "Describe the scene",
                                      "Count the shapes", "Once upon a time"};

/* Request i: kind i % 4 (chat text, chat + image A, chat + image B, text
 * completion), streamed when (i / 4) is odd, seed i, 6..24 tokens, greedy
 * for one in five, else sampled. */
static void make_request(lreq *r, int i, const char *url_a, const char *url_b) {
    memset(r, 0, sizeof *r);
    int kind = i % 4;
    r->stream = (i / 4) % 2;
    r->chat = kind < 3;
    r->image = kind == 1 || kind == 2;
    r->path = r->chat ? "/v1/chat/completions" : "/v1/completions";
    char ex[256];
    snprintf(ex, sizeof ex, "\"max_tokens\":%d,\"seed\":%d,\"temperature\":%s,\"top_k\":%d%s", 6 + i % 19, i,
             i % 5 ? "0.9" : "0", 20 + i % 40,
             r->stream ? ",\"stream\":true,\"stream_options\":{\"include_usage\":true}" : "");
    const char *text = prompts[i % (int)(sizeof prompts / sizeof *prompts)];
    if (r->chat) {
        r->body = ts_chat_body(r->image ? (kind == 1 ? url_a : url_b) : NULL, text, ex);
    } else {
        r->body = malloc(512);
        snprintf(r->body, 512, "{\"model\":\"tiny\",\"prompt\":\"%s\",%s}", text, ex);
    }
}

/* The text, finish_reason and completion tokens of an answer; 0, or -1
 * with *why set when it is not a whole, well-formed answer. */
static int read_answer(const lreq *r, long status, const char *out, char **text, char **finish, long long *tokens,
                       const char **why) {
    *text = *finish = NULL;
    *tokens = -1;
    if (status != 200) {
        *why = status ? "HTTP status" : "transport error";
        return -1;
    }
    if (r->stream) {
        int done = 0;
        if (ts_sse_parse(out, text, finish, tokens, &done) < 0 || !done) {
            *why = "malformed or unfinished event stream";
            return -1;
        }
        return 0;
    }
    json_t *j = ts_json(out);
    *text = ts_jtext(j, r->chat ? "choices.0.message.content" : "choices.0.text");
    const char *f = ts_jstr(j, "choices.0.finish_reason");
    *finish = f ? strdup(f) : NULL;
    *tokens = ts_jint(j, "usage.completion_tokens");
    json_decref(j);
    if (!*text) {
        *why = "no text in the answer";
        return -1;
    }
    return 0;
}

/* ---- one client ---- */

typedef struct client {
    int id, port, keep_alive;
    double deadline;
    const lreq *reqs;
    int n_ok, n_failed, n_stream, n_image;
    long long tokens;
    double *lat;                 /* seconds, one per request */
    int n_lat, cap_lat;
    char first_failure[600];
    /* Behind nginx: which server answered (its X-Upstream header, nginx's
     * $upstream_addr, "A, B" when A failed and B answered). */
    const char *addr_a, *addr_b; /* "127.0.0.1:PORT"; A gets SIGTERM; NULL: no accounting */
    const _Atomic double *t_term; /* when A got SIGTERM (0 before) */
    int n_a, n_b, n_retried, n_unknown, n_a_across_term;
} client;

typedef struct upstream {
    char addr[128];
} upstream;

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *ud) {
    upstream *u = ud;
    size_t k = size * nmemb;
    if (k > 12 && !strncasecmp(ptr, "X-Upstream:", 11)) {
        size_t a = 11, b = k;
        while (a < b && ptr[a] == ' ') a++;
        while (b > a && (ptr[b - 1] == '\r' || ptr[b - 1] == '\n' || ptr[b - 1] == ' ')) b--;
        snprintf(u->addr, sizeof u->addr, "%.*s", (int)(b - a), ptr + a);
    }
    return k;
}

static void *client_main(void *arg) {
    client *c = arg;
    CURL *h = NULL;
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    for (int k = 0; ts_now() < c->deadline; k++) {
        const lreq *r = &c->reqs[(c->id * 37 + k * 11) % DISTINCT];
        if (!h) h = curl_easy_init();
        char url[128];
        snprintf(url, sizeof url, "http://127.0.0.1:%d%s", c->port, r->path);
        ts_body b = {0};
        upstream up = {{0}};
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &up);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ts_on_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        double t0 = ts_now();
        long status = 0;
        CURLcode cc = curl_easy_perform(h);
        if (cc == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        double dt = ts_now() - t0;
        if (!c->keep_alive) {
            curl_easy_cleanup(h);
            h = NULL;
        }
        char *text, *finish;
        long long tokens;
        const char *why = NULL;
        int bad = read_answer(r, status, b.p, &text, &finish, &tokens, &why);
        if (!bad && (strcmp(text, r->want) || !finish || strcmp(finish, r->want_finish) || tokens != r->want_tokens)) {
            bad = 1;
            why = "differs from the same request alone";
        }
        if (bad) {
            if (!c->n_failed)
                snprintf(c->first_failure, sizeof c->first_failure,
                         "client %d, request %d (%s, stream %d, image %d): %s (status %ld, curl %d): got \"%.80s\" "
                         "(%s, %lld tokens), alone \"%.80s\" (%s, %lld tokens)",
                         c->id, (int)(r - c->reqs), r->path, r->stream, r->image, why, status, (int)cc,
                         text ? text : "", finish ? finish : "-", tokens, r->want, r->want_finish, r->want_tokens);
            c->n_failed++;
        } else {
            c->n_ok++;
            c->n_stream += r->stream;
            c->n_image += r->image;
            c->tokens += tokens;
            if (c->n_lat == c->cap_lat) {
                c->cap_lat = c->cap_lat ? 2 * c->cap_lat : 64;
                c->lat = realloc(c->lat, sizeof *c->lat * (size_t)c->cap_lat);
            }
            c->lat[c->n_lat++] = dt;
            if (c->addr_a) {
                if (strchr(up.addr, ',')) c->n_retried++;
                else if (!strcmp(up.addr, c->addr_b)) c->n_b++;
                else if (!strcmp(up.addr, c->addr_a)) {
                    double tt = atomic_load(c->t_term);
                    c->n_a++;
                    c->n_a_across_term += tt > 0 && t0 < tt; /* in flight when A got SIGTERM: drained */
                } else {
                    c->n_unknown++;
                }
            }
        }
        free(text);
        free(finish);
        free(b.p);
    }
    if (h) curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    return NULL;
}

/* Samples /metrics while the clients run: the peaks of requests in flight
 * (being served), running in the engine and waiting in its queue. */
typedef struct sampler {
    int port;
    double until;
    long long peak_inflight, peak_running, peak_waiting;
} sampler;

static long long gauge(const char *metrics, const char *name) {
    const char *at = metrics ? strstr(metrics, name) : NULL;
    return at ? atoll(at + strlen(name)) : -1;
}

static void *sampler_main(void *arg) {
    sampler *sm = arg;
    while (ts_now() < sm->until) {
        char *out = NULL;
        if (ts_http(sm->port, "GET", "/metrics", NULL, 0, NULL, &out) == 200) {
            long long v;
            if ((v = gauge(out, "\niris:num_requests_inflight ")) > sm->peak_inflight) sm->peak_inflight = v;
            if ((v = gauge(out, "\niris:num_requests_running ")) > sm->peak_running) sm->peak_running = v;
            if ((v = gauge(out, "\niris:num_requests_waiting ")) > sm->peak_waiting) sm->peak_waiting = v;
        }
        free(out);
        ts_nap_ms(100);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The requests' answers alone, one at a time on an idle server. */
static int run_alone(int port, lreq *reqs) {
    for (int i = 0; i < DISTINCT; i++) {
        lreq *r = &reqs[i];
        char *out = NULL;
        long st = ts_post(port, r->path, r->body, &out);
        const char *why = NULL;
        int bad = read_answer(r, st, out, &r->want, &r->want_finish, &r->want_tokens, &why);
        CHECKF(!bad && r->want_finish && r->want_tokens > 0, "request %d alone: %s (status %ld): %.300s", i,
               why ? why : "no finish_reason or usage", st, out ? out : "");
        free(out);
        if (bad || !r->want_finish) return -1;
    }
    return 0;
}

static void free_requests(lreq *reqs) {
    for (int i = 0; i < DISTINCT; i++) {
        free(reqs[i].body);
        free(reqs[i].want);
        free(reqs[i].want_finish);
    }
}

IRIS_TEST(server_load_200_clients) {
    enum { CLIENTS = 200 };
    curl_global_init(CURL_GLOBAL_DEFAULT);
    double seconds = getenv("IRIS_LOAD_SECONDS") ? atof(getenv("IRIS_LOAD_SECONDS")) : 30;
    if (!(seconds > 0)) seconds = 30;
    ts_server s;
    REQUIRE(ts_server_start(&s, NULL) == 0);
    char *url_a = ts_data_url(TS_IMG_A), *url_b = ts_data_url(TS_IMG_B);
    static lreq reqs[DISTINCT];
    for (int i = 0; i < DISTINCT; i++) make_request(&reqs[i], i, url_a, url_b);
    double t_alone = ts_now();
    int alone_ok = run_alone(s.port, reqs) == 0;
    t_alone = ts_now() - t_alone;

    static client cl[CLIENTS];
    pthread_t th[CLIENTS];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 512 * 1024);
    double t0 = ts_now();
    int started = 0;
    for (int i = 0; alone_ok && i < CLIENTS; i++) {
        cl[i] = (client){.id = i, .port = s.port, .keep_alive = i % 2, .deadline = t0 + seconds, .reqs = reqs};
        if (pthread_create(&th[i], &attr, client_main, &cl[i])) break;
        started++;
    }
    pthread_attr_destroy(&attr);
    CHECK_EQ_INT(started, alone_ok ? CLIENTS : 0);
    sampler sm = {.port = s.port, .until = t0 + seconds};
    pthread_t th_sm;
    int sampling = pthread_create(&th_sm, NULL, sampler_main, &sm) == 0;
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    double elapsed = ts_now() - t0;
    if (sampling) pthread_join(th_sm, NULL);

    int ok = 0, failed = 0, n_stream = 0, n_image = 0, idle = 0, shown = 0;
    long long tokens = 0;
    size_t n_lat = 0;
    for (int i = 0; i < started; i++) n_lat += (size_t)cl[i].n_lat;
    double *lat = malloc(sizeof *lat * (n_lat ? n_lat : 1));
    n_lat = 0;
    for (int i = 0; i < started; i++) {
        client *c = &cl[i];
        ok += c->n_ok;
        failed += c->n_failed;
        n_stream += c->n_stream;
        n_image += c->n_image;
        tokens += c->tokens;
        idle += c->n_ok + c->n_failed == 0;
        memcpy(lat + n_lat, c->lat, sizeof *lat * (size_t)c->n_lat);
        n_lat += (size_t)c->n_lat;
        if (c->n_failed && shown++ < 5) CHECKF(0, "%d failed request(s); the first: %s", c->n_failed, c->first_failure);
        free(c->lat);
    }
    CHECKF(failed == 0, "%d of %d requests failed", failed, ok + failed);
    CHECKF(idle == 0, "%d clients completed no request in %.0f s", idle, seconds);
    CHECK(ok > CLIENTS);
    /* The clients were served at once, not one connection after another. */
    CHECKF(sm.peak_inflight >= CLIENTS / 2, "at most %lld requests in flight at once with %d clients",
           sm.peak_inflight, CLIENTS);
    qsort(lat, n_lat, sizeof *lat, cmp_double);
    double p50 = n_lat ? lat[n_lat / 2] : 0, p99 = n_lat ? lat[(size_t)((double)(n_lat - 1) * 0.99)] : 0;
    printf("    alone: %d distinct requests in %.2f s\n", DISTINCT, t_alone);
    printf("    load: %d clients (%d keeping their connection), %.1f s: %d requests completed (%d streamed, %d with an "
           "image), %d failed; %.1f req/s, %.0f generated tok/s; latency p50 %.3f s, p99 %.3f s, max %.3f s\n",
           started, started / 2, elapsed, ok, n_stream, n_image, failed, ok / elapsed, tokens / elapsed, p50, p99,
           n_lat ? lat[n_lat - 1] : 0);
    printf("    peaks: %lld requests in flight, %lld running in the engine, %lld waiting in its queue\n",
           sm.peak_inflight, sm.peak_running, sm.peak_waiting);
    printf("    every answer equal to its request alone (same seed): %s\n", failed ? "NO" : "yes");
    free(lat);

    char *out = NULL;
    CHECK_EQ_INT(ts_http(s.port, "GET", "/metrics", NULL, 0, NULL, &out), 200);
    CHECK_CONTAINS(out, "iris:num_requests_running 0\n");
    CHECK_CONTAINS(out, "iris:num_requests_waiting 0\n");
    free(out);
    CHECK_EQ_INT(ts_server_stop(&s), 0);
    free_requests(reqs);
    free(url_a);
    free(url_b);
}

/* ---- scale-out: two servers behind nginx ---- */

static const char *nginx_path(void) {
    static char path[512];
    FILE *p = popen("command -v nginx 2>/dev/null", "r");
    size_t n = p ? fread(path, 1, sizeof path - 1, p) : 0;
    if (p) pclose(p);
    path[n] = 0;
    while (n && (path[n - 1] == '\n' || path[n - 1] == ' ')) path[--n] = 0;
    if (n && access(path, X_OK) == 0) return path;
    static const char *const where[] = {"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"};
    for (size_t i = 0; i < sizeof where / sizeof *where; i++)
        if (access(where[i], X_OK) == 0) return where[i];
    return NULL;
}

/* nginx in front of ports a and b, listening on port, everything under dir
 * (pid file, logs, temp paths), in the foreground.  Request bodies stay in
 * memory and responses are not buffered (server-sent events pass as they
 * come), so the workers write no files: when the test runs as root they
 * run as nobody, and the directory only has to be traversable. */
static int write_nginx_conf(const char *dir, int port, int a, int b) {
    char path[256];
    snprintf(path, sizeof path, "%s/nginx.conf", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "daemon off;\n"
            "worker_processes 1;\n"
            "pid %s/nginx.pid;\n"
            "error_log %s/error.log warn;\n"
            "events { worker_connections 1024; }\n"
            "http {\n"
            "    access_log off;\n"
            "    client_body_temp_path %s/body;\n"
            "    proxy_temp_path %s/proxy;\n"
            "    fastcgi_temp_path %s/fastcgi;\n"
            "    uwsgi_temp_path %s/uwsgi;\n"
            "    scgi_temp_path %s/scgi;\n"
            "    client_max_body_size 32m;\n"
            "    client_body_buffer_size 1m;\n"
            "    upstream iris {\n"
            "        server 127.0.0.1:%d max_fails=1 fail_timeout=30s;\n"
            "        server 127.0.0.1:%d max_fails=1 fail_timeout=30s;\n"
            "        keepalive 32;\n"
            "    }\n"
            "    server {\n"
            "        listen 127.0.0.1:%d;\n"
            "        location / {\n"
            "            proxy_pass http://iris;\n"
            "            proxy_http_version 1.1;\n"
            "            proxy_set_header Connection \"\";\n"
            "            proxy_buffering off;\n"
            "            proxy_read_timeout 120s;\n"
            "            proxy_next_upstream error timeout http_503 non_idempotent;\n"
            "            proxy_next_upstream_tries 2;\n"
            "            add_header X-Upstream $upstream_addr always;\n"
            "        }\n"
            "    }\n"
            "}\n",
            dir, dir, dir, dir, dir, dir, dir, a, b, port);
    return fclose(f) ? -1 : 0;
}

/* Start nginx (-p dir -c dir/nginx.conf -e dir/error.log) and wait until
 * its /health answers 200; the pid, or -1 with its log on stderr. */
static pid_t start_nginx(const char *bin, const char *dir, int port) {
    char conf[256], elog[256], out[256], prefix[256];
    snprintf(conf, sizeof conf, "%s/nginx.conf", dir);
    snprintf(elog, sizeof elog, "%s/error.log", dir);
    snprintf(out, sizeof out, "%s/nginx.out", dir);
    snprintf(prefix, sizeof prefix, "%s/", dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(bin, "nginx", "-p", prefix, "-c", conf, "-e", elog, (char *)NULL);
        _exit(127);
    }
    for (double t0 = ts_now(); ts_now() - t0 < 15; ts_nap_ms(20)) {
        if (ts_http(port, "GET", "/health", NULL, 0, NULL, NULL) == 200) return pid;
        if (waitpid(pid, NULL, WNOHANG) == pid) break;
    }
    char *a = ts_slurp(out, NULL), *b = ts_slurp(elog, NULL);
    fprintf(stderr, "nginx did not start on port %d:\n%s%s\n", port, a ? a : "", b ? b : "");
    free(a);
    free(b);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static int stop_nginx(pid_t pid) {
    kill(pid, SIGQUIT); /* graceful: finish the connections, then exit */
    int rc = ts_wait_exit(pid, 15);
    if (rc == -2) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return rc;
}

IRIS_TEST(server_scale_out_nginx) {
    enum { CLIENTS = 24 };
    const double seconds = 5, term_at = 1.5;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *nginx = nginx_path();
    CHECKF(nginx, "nginx is not installed: run scripts/setup (it installs the Debian package nginx)");
    if (!nginx) return;

    ts_server a, b;
    REQUIRE(ts_server_start(&a, NULL) == 0);
    if (ts_server_start(&b, NULL)) {
        ts_server_stop(&a);
        REQUIRE(0);
    }
    /* Readiness: what an orchestrator checks before it routes to a server. */
    CHECK_EQ_INT(ts_http(a.port, "GET", "/health", NULL, 0, NULL, NULL), 200);
    CHECK_EQ_INT(ts_http(b.port, "GET", "/health", NULL, 0, NULL, NULL), 200);

    char *url_a = ts_data_url(TS_IMG_A), *url_b = ts_data_url(TS_IMG_B);
    static lreq reqs[DISTINCT];
    for (int i = 0; i < DISTINCT; i++) make_request(&reqs[i], i, url_a, url_b);
    int alone_ok = run_alone(b.port, reqs) == 0;

    char dir[64] = "/tmp/iris-nginx-XXXXXX";
    REQUIRE(mkdtemp(dir));
    chmod(dir, 0755);
    pid_t ng = -1;
    int port = 0;
    for (int attempt = 0; attempt < 3 && ng < 0; attempt++) { /* a free port can be taken before nginx binds it */
        port = ts_free_port();
        if (port && !write_nginx_conf(dir, port, a.port, b.port)) ng = start_nginx(nginx, dir, port);
    }
    CHECKF(ng > 0, "nginx did not start (config and logs in %s)", dir);

    static client cl[CLIENTS];
    pthread_t th[CLIENTS];
    int started = 0;
    static _Atomic double t_term;
    atomic_store(&t_term, 0.0);
    char addr_a[64], addr_b[64];
    snprintf(addr_a, sizeof addr_a, "127.0.0.1:%d", a.port);
    snprintf(addr_b, sizeof addr_b, "127.0.0.1:%d", b.port);
    double t0 = ts_now();
    for (int i = 0; alone_ok && ng > 0 && i < CLIENTS; i++) {
        cl[i] = (client){.id = i, .port = port, .keep_alive = i % 2, .deadline = t0 + seconds, .reqs = reqs,
                         .addr_a = addr_a, .addr_b = addr_b, .t_term = &t_term};
        if (pthread_create(&th[i], NULL, client_main, &cl[i])) break;
        started++;
    }
    int a_exit = -3;
    long long a_busy = -1;
    if (started) {
        /* SIGTERM once A is serving a few requests, so the drain has work. */
        ts_nap_ms((int)(term_at * 1000));
        for (double tw = ts_now(); ts_now() - tw < 5 && a_busy < 3; ts_nap_ms(2)) {
            char *m = NULL;
            ts_http(a.port, "GET", "/metrics", NULL, 0, NULL, &m);
            a_busy = gauge(m, "\niris:num_requests_inflight ");
            free(m);
        }
        atomic_store(&t_term, ts_now());
        kill(a.pid, SIGTERM);
        a_exit = ts_wait_exit(a.pid, 30);
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    double elapsed = ts_now() - t0;

    int ok = 0, failed = 0, n_a = 0, n_b = 0, retried = 0, unknown = 0, across = 0, shown = 0;
    for (int i = 0; i < started; i++) {
        client *c = &cl[i];
        ok += c->n_ok;
        failed += c->n_failed;
        n_a += c->n_a;
        n_b += c->n_b;
        retried += c->n_retried;
        unknown += c->n_unknown;
        across += c->n_a_across_term;
        if (c->n_failed && shown++ < 5) CHECKF(0, "%d failed request(s); the first: %s", c->n_failed, c->first_failure);
        free(c->lat);
    }
    CHECK_EQ_INT(started, alone_ok && ng > 0 ? CLIENTS : 0);
    CHECKF(failed == 0, "%d of %d requests through nginx failed", failed, ok + failed);
    CHECKF(a_exit == 0, "the server sent SIGTERM exited with %d, want 0", a_exit);
    char *log = ts_slurp(a.log, NULL);
    CHECK_CONTAINS(log, "draining");
    CHECKF(log && !strstr(log, "cancelled"), "the drained server cancelled requests:\n%s", log ? log : "");
    free(log);
    unlink(a.log);
    /* The scenario happened: both served, A was serving when it got SIGTERM
     * and finished those, and nginx moved at least one request from A to B. */
    CHECKF(n_a > 0 && n_b > 0, "requests served: %d by A, %d by B", n_a, n_b);
    CHECKF(unknown == 0, "%d answers without a known X-Upstream", unknown);
    CHECKF(across > 0, "no request was in flight on A when it got SIGTERM");
    CHECKF(retried > 0, "nginx retried no request on B after A stopped");
    printf("    nginx + 2 servers, %d clients, %.1f s, SIGTERM to A at %.1f s (%lld requests in flight on it): %d "
           "requests completed, %d failed (%.1f req/s); A served %d (%d of them in flight at its SIGTERM, drained), "
           "B %d, %d retried from A to B; A exited %d\n",
           started, elapsed, atomic_load(&t_term) - t0, a_busy, ok, failed, ok / elapsed, n_a, across, n_b, retried,
           a_exit);

    CHECK_EQ_INT(ts_http(port, "GET", "/health", NULL, 0, NULL, NULL), 200); /* B alone behind nginx */
    if (ng > 0) CHECK_EQ_INT(stop_nginx(ng), 0);
    CHECK_EQ_INT(ts_server_stop(&b), 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!failed && system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    free_requests(reqs);
    free(url_a);
    free(url_b);
}
