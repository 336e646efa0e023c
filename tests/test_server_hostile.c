/* test_server_hostile.c: `iris serve` against a hostile client, each hole
 * of issue 26 reproduced from outside the process (the real binary on the
 * tiny model, curl and raw sockets): a decompression bomb, a client that
 * drops a non-streamed request, 1,024 clients dripping their headers, a
 * second server on a port in use, file:// probing, image URLs aimed at
 * private addresses (directly, by name and by redirect), and cross-site
 * "simple" POSTs.  Helpers in server_harness.c. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server_harness.h"
#include "test.h"

/* A raw HTTP exchange from source address src (NULL: any): the request as given, the whole
 * answer (until the server closes, at most 10 s) into out; the bytes read, -1 if no connection. */
static ssize_t raw_http(int port, const char *src, const char *req, char *out, size_t cap) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    if (src) {
        inet_pton(AF_INET, src, &a.sin_addr);
        if (bind(fd, (struct sockaddr *)&a, sizeof a)) return close(fd), -1;
    }
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) return close(fd), -1;
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) < 0) return close(fd), -1;
    size_t n = 0;
    ssize_t k;
    while (n + 1 < cap && (k = recv(fd, out + n, cap - 1 - n, 0)) > 0) n += (size_t)k;
    out[n] = 0;
    close(fd);
    return (ssize_t)n;
}

/* A server's peak resident memory (VmHWM) in KiB, or -1. */
static long peak_kib(pid_t pid) {
    char path[64], st[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, st, sizeof st - 1) : -1;
    if (fd >= 0) close(fd);
    st[n > 0 ? n : 0] = 0;
    const char *p = strstr(st, "VmHWM:");
    return p ? atol(p + 6) : -1;
}

/* A 1-bit grey PNG of w x h zeros, written to path (a ~20 KB file of 169 Mpx at 13000^2). */
static int write_bomb(const char *path, uint32_t w, uint32_t h) {
    size_t row = (w + 7) / 8, len = row * h;
    uint8_t *img = calloc(len, 1);
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    struct spng_ihdr ih = {.width = w, .height = h, .bit_depth = 1, .color_type = SPNG_COLOR_TYPE_GRAYSCALE};
    int rc = -1;
    if (img && ctx && !spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1) && !spng_set_ihdr(ctx, &ih) &&
        !spng_set_option(ctx, SPNG_FILTER_CHOICE, SPNG_DISABLE_FILTERING) &&
        !spng_encode_image(ctx, img, len, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE)) {
        size_t n = 0;
        int e = 0;
        void *png = spng_get_png_buffer(ctx, &n, &e);
        FILE *f = png ? fopen(path, "wb") : NULL;
        if (f && fwrite(png, 1, n, f) == n) rc = 0;
        if (f) fclose(f);
        free(png);
    }
    spng_ctx_free(ctx);
    free(img);
    return rc;
}

/* ---- 1. decompression bombs and the image budget ---- */

IRIS_TEST(server_hostile_image_bomb) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char bomb[64];
    snprintf(bomb, sizeof bomb, "/tmp/iris-bomb-%d.png", (int)getpid());
    REQUIRE(write_bomb(bomb, 13000, 13000) == 0);
    ts_server s;
    REQUIRE(ts_server_start(&s, NULL) == 0);
    long before = peak_kib(s.pid);
    char *url = ts_data_url(bomb), *out = NULL;
    char *req = ts_chat_body(url, "x", "\"max_tokens\":1");
    long st = ts_post(s.port, "/v1/chat/completions", req, &out);
    /* before: 200 after ~3 s of CPU and ~0.5 GB for this 20 KB file */
    ts_check_error(st, out, 400, "messages[0].content[0].image_url", "13000x13000 1-bit PNG");
    CHECK_CONTAINS(out, "13000x13000");
    CHECK_CONTAINS(out, "over the limit");
    long after = peak_kib(s.pid);
    CHECKF(after > 0 && after - before < 100 * 1024, "peak memory %ld KiB -> %ld KiB", before, after);
    free(out);
    free(req);
    free(url);
    unlink(bomb);
    ts_check_alive(s.port, "the bomb");
    CHECK_EQ_INT(ts_server_stop(&s), 0);

    /* Two images that each pass but together exceed --max-request-pixels 300000. */
    REQUIRE(ts_server_start(&s, "--max-request-pixels 300000") == 0);
    REQUIRE(write_bomb(bomb, 400, 400) == 0);
    url = ts_data_url(bomb);
    size_t cap = 2 * strlen(url) + 512;
    req = malloc(cap);
    snprintf(req, cap, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
             "\"%s\"}},{\"type\":\"image_url\",\"image_url\":{\"url\":\"%s\"}}]}],\"max_tokens\":1}", url, url);
    st = ts_post(s.port, "/v1/chat/completions", req, &out);
    ts_check_error(st, out, 400, "messages[0].content[1].image_url", "two images over --max-request-pixels");
    CHECK_CONTAINS(out, "--max-request-pixels");
    free(out);
    free(req);
    free(url);
    unlink(bomb);
    ts_check_alive(s.port, "two images over the request's budget");
    CHECK_EQ_INT(ts_server_stop(&s), 0);

    /* --help says what holds, on the CPU as on a GPU. */
    char cmd[512], buf[8192] = {0};
    snprintf(cmd, sizeof cmd, "%s serve --help", ts_bin());
    FILE *p = popen(cmd, "r");
    REQUIRE(p);
    buf[fread(buf, 1, sizeof buf - 1, p)] = 0;
    pclose(p);
    CHECK_CONTAINS(buf, "on the CPU as on");
    CHECK_CONTAINS(buf, "refused before decoding");
    CHECK_CONTAINS(buf, "--image-queue");
}

/* The decode slots: one worker and no queue, many image requests at once: some 503
 * image_queue_full, the others answered, nothing else. */
typedef struct img_job {
    int port;
    const char *req;
    long status;
    int queue_full;
} img_job;

static void *img_job_main(void *arg) {
    img_job *j = arg;
    char *out = NULL;
    j->status = ts_post(j->port, "/v1/chat/completions", j->req, &out);
    j->queue_full = out && strstr(out, "image_queue_full") != NULL;
    free(out);
    return NULL;
}

IRIS_TEST(server_hostile_image_queue) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char png[64];
    snprintf(png, sizeof png, "/tmp/iris-big-%d.png", (int)getpid());
    REQUIRE(write_bomb(png, 1400, 1400) == 0); /* under the tiny model's decode bound, slow enough to overlap */
    ts_server s;
    REQUIRE(ts_server_start(&s, "--image-workers 1 --image-queue 0") == 0);
    char *url = ts_data_url(png);
    char *req = ts_chat_body(url, "x", "\"max_tokens\":1");
    enum { N = 12 };
    img_job jobs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        jobs[i] = (img_job){.port = s.port, .req = req};
        pthread_create(&th[i], NULL, img_job_main, &jobs[i]);
    }
    int ok = 0, full = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        ok += jobs[i].status == 200;
        full += jobs[i].status == 503 && jobs[i].queue_full;
    }
    CHECKF(ok >= 1 && full >= 1 && ok + full == N, "%d answered, %d image_queue_full of %d", ok, full, N);
    free(req);
    free(url);
    unlink(png);
    ts_check_alive(s.port, "a full image queue");
    CHECK_EQ_INT(ts_server_stop(&s), 0);
}

/* ---- 2. a dropped non-streamed request ---- */

IRIS_TEST(server_hostile_dropped_request) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ts_server s;
    REQUIRE(ts_server_start(&s, NULL) == 0);
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"go\"}],\"max_tokens\":3800,\"ignore_eos\":true}";
    int fd = ts_connect(s.port);
    REQUIRE(fd >= 0);
    char req[1024];
    snprintf(req, sizeof req, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
    CHECK(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
    int running = 0;
    char *out = NULL;
    for (int i = 0; i < 200 && !running; i++) {
        ts_http(s.port, "GET", "/metrics", NULL, 0, NULL, &out);
        running = out && strstr(out, "iris:num_requests_running 1\n");
        free(out);
        if (!running) ts_nap_ms(10);
    }
    CHECK(running);
    ts_nap_ms(100);
    close(fd);
    double t0 = ts_now(), waited = -1;
    while (ts_now() - t0 < 60) {
        ts_http(s.port, "GET", "/metrics", NULL, 0, NULL, &out);
        int idle = out && strstr(out, "iris:num_requests_running 0\n") && strstr(out, "iris:num_requests_inflight 0\n");
        free(out);
        if (idle) {
            waited = ts_now() - t0;
            break;
        }
        ts_nap_ms(5);
    }
    printf("    non-streamed request dropped: cancelled %.0f ms after the close\n", waited * 1e3);
    CHECK(waited >= 0);
    /* before: generated all 3,800 tokens (finish "length") after the close */
    char *log = ts_slurp(s.log, NULL);
    CHECKF(log && strstr(log, ", cancelled") && !strstr(log, "generated 3800"), "log:\n%s", log ? log : "");
    free(log);
    ts_check_alive(s.port, "a dropped request");
    CHECK_EQ_INT(ts_server_stop(&s), 0);
}

/* ---- 3. slow headers ---- */

IRIS_TEST(server_hostile_slow_headers) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ts_server s;
    REQUIRE(ts_server_start(&s, "--header-timeout 2") == 0);
    enum { N = 1024 };
    static int fds[N];
    int n = 0;
    for (int i = 0; i < N; i++) {
        fds[i] = ts_connect(s.port);
        if (fds[i] >= 0 && send(fds[i], "GET /health HTTP/1.1\r\n", 22, MSG_NOSIGNAL) == 22) n++;
    }
    CHECK_EQ_INT(n, N);
    char resp[4096];
    double t0 = ts_now();
    int served = 0, cut = 0;
    while (ts_now() - t0 < 4) {
        for (int i = 0; i < N; i++)
            if (fds[i] >= 0) (void)!send(fds[i], "X", 1, MSG_NOSIGNAL); /* a byte of a header line */
        /* a normal client (another address) is served meanwhile */
        double t1 = ts_now();
        ssize_t k = raw_http(s.port, "127.0.0.2", "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", resp,
                             sizeof resp);
        int ok = k > 0 && strstr(resp, " 200 ");
        CHECKF(ok, "a normal client among %d slow ones: %s", N, k > 0 ? resp : "no answer");
        served += ok && ts_now() - t1 < 1;
        ts_nap_ms(300);
    }
    CHECK(served >= 5);
    /* --header-timeout 2: every slow client has been cut off by now */
    for (int i = 0; i < N; i++) {
        if (fds[i] < 0) continue;
        struct timeval tv = {0, 200000};
        setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char ch;
        ssize_t k = recv(fds[i], &ch, 1, 0);
        cut += k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
        close(fds[i]);
    }
    CHECKF(cut == N, "%d of %d slow clients cut off", cut, N);
    ts_check_alive(s.port, "1,024 slow clients");
    CHECK_EQ_INT(ts_server_stop(&s), 0);
}

/* ---- 4. a second server on a port in use ---- */

IRIS_TEST(server_hostile_port_in_use) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ts_server a;
    REQUIRE(ts_server_start(&a, NULL) == 0);
    char log[64], cmd[1024];
    snprintf(log, sizeof log, "/tmp/iris-serve-second-%d.log", (int)getpid());
    snprintf(cmd, sizeof cmd, "exec %s serve %s --port %d --device cpu --kv-cache-bytes 64MiB > %s 2>&1", ts_bin(),
             TS_MODEL, a.port, log);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int rc = ts_wait_exit(pid, 20);
    if (rc == -2) { /* before: it started and shared the port */
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    CHECK_EQ_INT(rc, 1);
    char *text = ts_slurp(log, NULL);
    CHECK_CONTAINS(text, "port in use");
    free(text);
    unlink(log);
    ts_check_alive(a.port, "a second server on its port");
    CHECK_EQ_INT(ts_server_stop(&a), 0);
}

/* ---- 5. file:// probing ---- */

/* The error message of a file:// URL's answer with the path cut off ("PATH is not ..." -> "is not ..."). */
static char *file_error(int port, const char *path, long *status) {
    char url[600];
    snprintf(url, sizeof url, "file://%s", path);
    char *req = ts_chat_body(url, "x", "\"max_tokens\":1"), *out = NULL;
    *status = ts_post(port, "/v1/chat/completions", req, &out);
    free(req);
    json_t *j = ts_json(out);
    const char *m = ts_jstr(j, "error.message");
    const char *rest = m ? strstr(m, path) : NULL;
    char *r = rest ? strdup(rest + strlen(path)) : m ? strdup(m) : NULL;
    json_decref(j);
    free(out);
    return r;
}

IRIS_TEST(server_hostile_file_probe) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char dir[64], path[256], real[512];
    snprintf(dir, sizeof dir, "/tmp/iris-media-%d", (int)getpid());
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/a.png", dir);
    size_t n = 0;
    char *png = ts_slurp(TS_IMG_A, &n);
    FILE *f = fopen(path, "wb");
    REQUIRE(f && png);
    fwrite(png, 1, n, f);
    fclose(f);
    free(png);
    snprintf(path, sizeof path, "%s/link.png", dir);
    REQUIRE(realpath(TS_IMG_B, real)); /* a symlink inside, to an image outside */
    CHECK(symlink(real, path) == 0);
    ts_server s;
    char extra[128];
    snprintf(extra, sizeof extra, "--allowed-local-media-path %s", dir);
    REQUIRE(ts_server_start(&s, extra) == 0);

    long st = 0;
    snprintf(path, sizeof path, "%s/a.png", dir);
    char *ok = file_error(s.port, path, &st);
    CHECK_EQ_INT(st, 200);
    free(ok);
    char p_dotdot[256], p_link[256], p_missing_in[256];
    snprintf(p_dotdot, sizeof p_dotdot, "%s/../../etc/hostname", dir);
    snprintf(p_link, sizeof p_link, "%s/link.png", dir);
    snprintf(p_missing_in, sizeof p_missing_in, "%s/missing.png", dir);
    const char *paths[] = {"/etc/hostname", "/nonexistent/zz.png", "/etc", p_dotdot, p_link, p_missing_in};
    char *first = NULL;
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        char *m = file_error(s.port, paths[i], &st);
        CHECK_EQ_INT(st, 400);
        if (!first) first = m ? strdup(m) : NULL;
        /* before: "is outside the allowed media directory" for one, "No such file or directory" for another */
        CHECKF(m && first && !strcmp(m, first), "%s: \"%s\" differs from \"%s\"", paths[i], m ? m : "",
               first ? first : "");
        free(m);
    }
    free(first);
    ts_check_alive(s.port, "file:// probes");
    CHECK_EQ_INT(ts_server_stop(&s), 0);
    unlink(p_link);
    snprintf(path, sizeof path, "%s/a.png", dir);
    unlink(path);
    rmdir(dir);
}

/* ---- 6. private destinations of image URLs ---- */

static int g_origin_port;

static enum MHD_Result origin_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                      const char *version, const char *up, size_t *up_n, void **ptr) {
    struct MHD_Response *r;
    int status = 200;
    if (!strcmp(url, "/a.png")) {
        size_t n = 0;
        char *png = ts_slurp(TS_IMG_A, &n);
        r = MHD_create_response_from_buffer(n, png, MHD_RESPMEM_MUST_FREE);
    } else if (!strcmp(url, "/text")) {
        r = MHD_create_response_from_buffer(5, "hello", MHD_RESPMEM_PERSISTENT);
    } else if (!strcmp(url, "/redir")) { /* to another loopback address, same origin server */
        char loc[128];
        snprintf(loc, sizeof loc, "http://127.0.0.2:%d/a.png", g_origin_port);
        r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(r, "Location", loc);
        status = 302;
    } else {
        r = MHD_create_response_from_buffer(9, "not found", MHD_RESPMEM_PERSISTENT);
        status = 404;
    }
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

/* The answer to an image URL: the status, and the error message with the URL cut out. */
static char *url_error(int port, const char *fmt, int uport, long *status) {
    char url[256];
    snprintf(url, sizeof url, fmt, uport);
    char *req = ts_chat_body(url, "x", "\"max_tokens\":1,\"seed\":1"), *out = NULL;
    *status = ts_post(port, "/v1/chat/completions", req, &out);
    free(req);
    json_t *j = ts_json(out);
    const char *m = ts_jstr(j, "error.message");
    const char *at = m ? strstr(m, url) : NULL;
    char *r = NULL;
    if (m) {
        size_t k = at ? (size_t)(at - m) : strlen(m);
        r = malloc(strlen(m) + 1);
        memcpy(r, m, k);
        strcpy(r + k, at ? at + strlen(url) : "");
    }
    json_decref(j);
    free(out);
    return r;
}

IRIS_TEST(server_hostile_private_urls) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    struct MHD_Daemon *origin = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, origin_handler, NULL,
                                                 MHD_OPTION_END);
    REQUIRE(origin);
    int op = g_origin_port = MHD_get_daemon_info(origin, MHD_DAEMON_INFO_BIND_PORT)->port;
    int closed = ts_free_port();
    long st = 0;

    /* Default: loopback refused by address, by name and whatever is there, with one text. */
    ts_server s;
    REQUIRE(ts_server_start(&s, NULL) == 0);
    const char *urls[] = {"http://127.0.0.1:%d/a.png", "http://localhost:%d/a.png", "http://127.0.0.1:%d/text",
                          "http://[::ffff:127.0.0.1]:%d/a.png", "http://169.254.169.254:%d/latest"};
    char *first = NULL;
    for (size_t i = 0; i < sizeof urls / sizeof *urls; i++) {
        char *m = url_error(s.port, urls[i], op, &st);
        CHECKF(st == 400, "%s: status %ld", urls[i], st); /* before: 200 for the image */
        if (!first) first = m ? strdup(m) : NULL;
        CHECKF(m && first && !strcmp(m, first), "%s: \"%s\" vs \"%s\"", urls[i], m ? m : "", first ? first : "");
        free(m);
    }
    char *m = url_error(s.port, "http://127.0.0.1:%d/a.png", closed, &st); /* a closed port: the same text */
    CHECKF(m && first && !strcmp(m, first), "closed port: \"%s\" vs \"%s\"", m ? m : "", first ? first : "");
    CHECK(first && !strstr(first, "not an image"));
    free(m);
    free(first);
    CHECK_EQ_INT(ts_server_stop(&s), 0);

    /* An allowed network, and a redirect out of it: refused after the redirect. */
    REQUIRE(ts_server_start(&s, "--allowed-media-networks 127.0.0.1/32") == 0);
    free(url_error(s.port, "http://127.0.0.1:%d/a.png", op, &st));
    CHECK_EQ_INT(st, 200);
    m = url_error(s.port, "http://127.0.0.1:%d/redir", op, &st);
    CHECK_EQ_INT(st, 400);
    CHECK_CONTAINS(m, "could not fetch");
    free(m);
    CHECK_EQ_INT(ts_server_stop(&s), 0);

    /* --allow-private-media-urls: the redirect is followed. */
    REQUIRE(ts_server_start(&s, "--allow-private-media-urls") == 0);
    free(url_error(s.port, "http://127.0.0.1:%d/redir", op, &st));
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(ts_server_stop(&s), 0);
    MHD_stop_daemon(origin);
}

/* ---- 7. cross-site requests ---- */

static void post_with(int port, const char *headers, char *resp, size_t cap) {
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1}";
    char req[1024];
    snprintf(req, sizeof req, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s"
             "Content-Length: %zu\r\n\r\n%s", headers, strlen(body), body);
    resp[0] = 0;
    raw_http(port, NULL, req, resp, cap);
}

IRIS_TEST(server_hostile_cross_site) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ts_server s;
    REQUIRE(ts_server_start(&s, NULL) == 0);
    char resp[8192];
    static const char *const refused[] = {"Content-Type: text/plain\r\nOrigin: http://evil.example\r\n",
                                          "Content-Type: application/x-www-form-urlencoded\r\n",
                                          "Content-Type: multipart/form-data; boundary=x\r\n", "",
                                          "Content-Type: application/jsonp\r\n"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        post_with(s.port, refused[i], resp, sizeof resp);
        CHECKF(strstr(resp, "HTTP/1.1 415 ") && strstr(resp, "application/json"), "%s-> %s", refused[i], resp);
        CHECK(!strstr(resp, "Access-Control-Allow-Origin"));
    }
    post_with(s.port, "Content-Type: Application/JSON; charset=utf-8\r\n", resp, sizeof resp);
    CHECKF(strstr(resp, "HTTP/1.1 200 "), "%s", resp);
    /* no CORS without --allowed-origins: a preflight gets no permission */
    raw_http(s.port, NULL, "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Origin: http://a.example\r\nAccess-Control-Request-Method: POST\r\n\r\n", resp, sizeof resp);
    CHECKF(!strstr(resp, "Access-Control-Allow-Origin") && !strstr(resp, " 204 "), "%s", resp);
    CHECK_EQ_INT(ts_server_stop(&s), 0);

    REQUIRE(ts_server_start(&s, "--allowed-origins http://a.example,http://b.example") == 0);
    raw_http(s.port, NULL, "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Origin: http://b.example\r\nAccess-Control-Request-Method: POST\r\n\r\n", resp, sizeof resp);
    CHECKF(strstr(resp, " 204 ") && strstr(resp, "Access-Control-Allow-Origin: http://b.example"), "%s", resp);
    post_with(s.port, "Content-Type: application/json\r\nOrigin: http://a.example\r\n", resp, sizeof resp);
    CHECKF(strstr(resp, " 200 ") && strstr(resp, "Access-Control-Allow-Origin: http://a.example"), "%s", resp);
    post_with(s.port, "Content-Type: application/json\r\nOrigin: http://evil.example\r\n", resp, sizeof resp);
    CHECKF(strstr(resp, " 200 ") && !strstr(resp, "Access-Control-Allow-Origin"), "%s", resp);
    CHECK_EQ_INT(ts_server_stop(&s), 0);
}
