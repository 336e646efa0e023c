/* http.c: the HTTP side of `iris serve` with libmicrohttpd: the daemon, the
 * routes, bearer authentication, body limits, the non-generating endpoints
 * (/health, /v1/models, /metrics) and draining on shutdown.
 *
 * A request's life in the access handler (called repeatedly by MHD):
 *   1st call (headers only): route, method, API key, Content-Length against
 *     --max-body-bytes.  Anything refused here is answered at once (MHD then
 *     closes the connection instead of reading a body nobody wants).
 *   upload calls: append to the body; over the limit -> 413, past the body
 *     deadline (a client trickling bytes) -> 408 (fail_midbody).
 *   last call: dispatch (generate.c for the two generation routes).
 * inflight counts requests from their first call to MHD's completion
 * notice, so draining waits for streams still being written.
 *
 * Hostile clients.  Thread per connection (measured against MHD's epoll
 * thread pool: docs/performance.md "Server"): a slow client costs one idle
 * thread, and generation may block its thread.  What bounds them:
 *  - the watchdog thread shuts the socket of a connection whose first
 *    request head has not arrived within --header-timeout of the accept, or
 *    whose body has not within --body-timeout more; a kept-alive
 *    connection gets both plus a second between requests (MHD's own
 *    timeout is an idle timeout: a client dripping a byte a second resets
 *    it);
 *  - MHD_OPTION_PER_IP_CONNECTION_LIMIT under MHD_OPTION_CONNECTION_LIMIT,
 *    so one address cannot take every connection;
 *  - the listening socket is ours, bound without SO_REUSEPORT (a second
 *    server on the port fails "port in use"), handed to MHD.
 * POST routes need Content-Type: application/json (415 otherwise: a web
 * page's "simple" cross-site POST is text/plain or a form); CORS headers
 * and preflights (OPTIONS) only for the origins of --allowed-origins.
 *
 * Not done here: anything model-specific (generate.c) and
 * JSON schema checks (openai.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "server/page.h"
#include "server/server_internal.h"

enum { R_NONE, R_HEALTH, R_MODELS, R_MODEL, R_CHAT, R_COMPLETIONS, R_METRICS, R_PAGE };

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void iris_server_opts_default(iris_server_opts *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8000;
    o->max_body_bytes = 32u << 20;
    o->allow_remote_images = 1;
    o->max_image_bytes = 20u << 20;
    o->image_timeout_ms = 10000;
    o->image_queue = 256;
    o->header_timeout_s = 10;
    o->body_timeout_s = 30;
    o->max_connections = 1024;
    o->max_connections_per_client = 256;
}

/* ---- CORS ---- */

void srv_add_cors(struct MHD_Response *r, const srv_conn *cc) {
    if (!cc || !cc->origin[0]) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", cc->origin);
    MHD_add_response_header(r, "Vary", "Origin");
}

/* The request's Origin when --allowed-origins lists it (or is "*"). */
static void cors_origin(iris_server *s, struct MHD_Connection *c, srv_conn *cc) {
    const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!s->origins || !o || !*o || strlen(o) >= sizeof cc->origin) return;
    size_t n = strlen(o);
    for (const char *p = s->origins; *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if ((k == 1 && *p == '*') || (k == n && !strncmp(p, o, n))) {
            memcpy(cc->origin, o, n + 1);
            return;
        }
        p += k + (e != NULL);
    }
}

/* "application/json", any case, alone or with parameters (; charset=utf-8). */
static int is_json_type(const char *ct) {
    if (!ct) return 0;
    while (*ct == ' ' || *ct == '\t') ct++;
    if (strncasecmp(ct, "application/json", 16)) return 0;
    char e = ct[16];
    return e == 0 || e == ';' || e == ' ' || e == '\t';
}

/* ---- replies ---- */

static enum MHD_Result queue(struct MHD_Connection *c, srv_conn *cc, int status, const char *type, char *body,
                             size_t n, int close) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (close) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    srv_add_cors(r, cc);
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    if (cc) cc->status = status;
    return ret;
}

enum MHD_Result srv_reply_error(struct MHD_Connection *c, srv_conn *cc, const iris_oai_err *e, int close) {
    char *body = iris_oai_error_body(e);
    if (!body) return MHD_NO;
    if (e->status >= 500 || e->status == 401)
        iris_log(IRIS_LOG_INFO, "serve", "%s -> %d %s", cc ? cc->endpoint : "?", e->status, e->message);
    return queue(c, cc, e->status, "application/json", body, strlen(body), close);
}

enum MHD_Result srv_reply_json(struct MHD_Connection *c, srv_conn *cc, int status, json_t *j) {
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!body) return MHD_NO;
    return queue(c, cc, status, "application/json", body, strlen(body), 0);
}

static enum MHD_Result fail(struct MHD_Connection *c, srv_conn *cc, int status, const char *type, const char *code,
                            int close, const char *msg) {
    iris_oai_err e;
    iris_oai_fail(&e, status, type, NULL, code, "%s", msg);
    return srv_reply_error(c, cc, &e, close);
}

/* An error while the body is still arriving.  libmicrohttpd (0.9.75)
 * cannot queue a response before the whole body is read, so the answer is
 * written to the socket directly and the connection closed (the handler
 * returns MHD_NO): the trickling or oversized client gets its status
 * instead of a silent close. */
static enum MHD_Result fail_midbody(struct MHD_Connection *c, srv_conn *cc, int status, const char *reason,
                                    const char *code, const char *msg) {
    iris_oai_err e;
    iris_oai_fail(&e, status, "invalid_request_error", NULL, code, "%s", msg);
    char *body = iris_oai_error_body(&e);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (body && ci) {
        char head[256];
        int n = snprintf(head, sizeof head,
                         "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         "Content-Length: %zu\r\n\r\n", status, reason, strlen(body));
        if (send(ci->connect_fd, head, (size_t)n, MSG_NOSIGNAL) == n)
            (void)!send(ci->connect_fd, body, strlen(body), MSG_NOSIGNAL);
    }
    free(body);
    cc->status = status;
    cc->answered = 1;
    return MHD_NO;
}

/* ---- sockets and their deadlines ---- */

static void sock_phase(iris_server *s, srv_sock *k, int phase) {
    if (!k) return;
    pthread_mutex_lock(&s->sock_mu);
    /* from accept, the head and the body count from the start; a kept-alive
     * connection's from when the previous answer ended */
    if (!(phase == 1 && k->phase == 0)) k->t0 = srv_now();
    k->phase = phase;
    pthread_mutex_unlock(&s->sock_mu);
}

/* MHD's connection notices: a record per socket, removed (under the lock)
 * before MHD closes the descriptor, so the watchdog never shuts a reused
 * descriptor. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    iris_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        srv_sock *k = calloc(1, sizeof *k);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!k || !ci) {
            free(k);
            return;
        }
        k->fd = ci->connect_fd;
        k->t0 = srv_now();
        pthread_mutex_lock(&s->sock_mu);
        k->next = s->socks;
        if (s->socks) s->socks->prev = k;
        s->socks = k;
        pthread_mutex_unlock(&s->sock_mu);
        *socket_context = k;
        return;
    }
    srv_sock *k = *socket_context;
    if (!k) return;
    pthread_mutex_lock(&s->sock_mu);
    if (k->prev) k->prev->next = k->next;
    else s->socks = k->next;
    if (k->next) k->next->prev = k->prev;
    pthread_mutex_unlock(&s->sock_mu);
    free(k);
    *socket_context = NULL;
}

/* Every 50 ms: shut the sockets past their head or body deadline (MHD's
 * thread then sees the end of the stream and closes the connection). */
static void *watchdog_main(void *arg) {
    iris_server *s = arg;
    pthread_mutex_lock(&s->sock_mu);
    while (!s->watchdog_stop) {
        double now = srv_now(), head = s->o.header_timeout_s, body = s->o.body_timeout_s;
        for (srv_sock *k = s->socks; k; k = k->next) {
            double limit = k->phase == 0 ? head : k->phase == 1 ? head + body : k->phase == 3 ? head + body + 1 : 0;
            if (!k->cut && limit > 0 && now - k->t0 > limit) {
                k->cut = 1;
                shutdown(k->fd, SHUT_RDWR);
                iris_log(IRIS_LOG_DEBUG, "serve", "closed a connection whose request %s did not arrive in %.1f s",
                         k->phase == 0 ? "head" : "body", limit);
            }
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->sock_cv, &s->sock_mu, &ts);
    }
    pthread_mutex_unlock(&s->sock_mu);
    return NULL;
}

/* ---- routes ---- */

/* A CORS preflight from an allowed origin. */
static enum MHD_Result preflight(struct MHD_Connection *c, srv_conn *cc) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    srv_add_cors(r, cc);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    cc->answered = 1;
    cc->status = 204;
    enum MHD_Result ret = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    return ret;
}

static int route_of(const char *url, const char **endpoint) {
    static const struct {
        const char *path;
        int route;
    } routes[] = {{"/health", R_HEALTH},
                  {"/v1/models", R_MODELS},
                  {"/v1/chat/completions", R_CHAT},
                  {"/v1/completions", R_COMPLETIONS},
                  {"/metrics", R_METRICS}};
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (!strcmp(url, routes[i].path)) {
            *endpoint = routes[i].path;
            return routes[i].route;
        }
    if (!strncmp(url, "/v1/models/", 11)) {
        *endpoint = "/v1/models/{id}";
        return R_MODEL;
    }
    if (iris_page_find(url)) { /* the page (page.c): public, no API key */
        *endpoint = "/";
        return R_PAGE;
    }
    *endpoint = "other";
    return R_NONE;
}

static int authorized(iris_server *s, struct MHD_Connection *c) {
    if (!s->api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return 0;
    h += 7;
    while (*h == ' ') h++;
    /* Compare every byte whatever the first difference (no timing hint). */
    size_t a = strlen(h), b = strlen(s->api_key);
    unsigned diff = (unsigned)(a != b);
    for (size_t i = 0; i < a && i < b; i++) diff |= (unsigned char)h[i] ^ (unsigned char)s->api_key[i];
    return diff == 0;
}

static json_t *model_object(iris_server *s) {
    iris_engine *e = atomic_load(&s->eng);
    iris_model_info mi = {0};
    if (e) iris_engine_model_info(e, &mi);
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", s->served, "object", "model", "created",
                          (json_int_t)s->started, "owned_by", "iris", "root", e ? mi.dir : s->served);
    if (m && e) json_object_set_new(m, "max_model_len", json_integer(mi.max_model_len));
    return m;
}

static enum MHD_Result metrics_reply(struct MHD_Connection *c, srv_conn *cc) {
    iris_server *s = cc->s;
    iris_engine *e = atomic_load(&s->eng);
    iris_metrics_engine me = {-1, -1, -1, -1, -1, -1, -1, -1};
    if (e) {
        iris_engine_stats st;
        iris_engine_get_stats(e, &st);
        me.queue_depth = st.n_waiting;
        me.running = st.n_running;
        me.kv_blocks_used = st.kv_blocks_used;
        me.kv_blocks_total = st.kv_blocks_total;
        me.prefix_cache_hits = (int64_t)st.prefix_hit_tokens / 16;
        me.prefix_cache_queries = (int64_t)st.prompt_tokens / 16;
        me.image_cache_hits = (int64_t)st.images_cached;
        me.image_cache_queries = (int64_t)(st.images_cached + st.images_encoded);
    }
    size_t n = 0;
    char *text = iris_metrics_render(s->metrics, e ? &me : NULL, &n);
    if (!text) return MHD_NO;
    return queue(c, cc, 200, "text/plain; version=0.0.4; charset=utf-8", text, n, 0);
}

static enum MHD_Result dispatch(struct MHD_Connection *c, srv_conn *cc, const char *url) {
    iris_server *s = cc->s;
    int ready = atomic_load(&s->eng) != NULL;
    switch (cc->route) {
    case R_HEALTH:
        if (atomic_load(&s->draining))
            return fail(c, cc, 503, "server_error", "shutting_down", 1, "the server is shutting down");
        if (!ready) return fail(c, cc, 503, "server_error", "loading", 0, "the model is still loading");
        return queue(c, cc, 200, "application/json", strdup("{\"status\":\"ok\"}"), 15, 0);
    case R_METRICS:
        return metrics_reply(c, cc);
    case R_PAGE:
        return srv_page_reply(c, cc, url);
    case R_MODELS:
        return srv_reply_json(c, cc, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", model_object(s)));
    case R_MODEL: {
        const char *id = url + strlen("/v1/models/");
        if (strcmp(id, s->served) && !(s->model_arg && !strcmp(id, s->model_arg))) {
            iris_oai_err e;
            iris_oai_fail(&e, 404, "not_found_error", "model", "model_not_found", "The model `%.200s` does not exist.",
                          id);
            return srv_reply_error(c, cc, &e, 0);
        }
        return srv_reply_json(c, cc, 200, model_object(s));
    }
    case R_CHAT:
    case R_COMPLETIONS:
        if (atomic_load(&s->draining))
            return fail(c, cc, 503, "server_error", "shutting_down", 1, "the server is shutting down");
        if (!ready) return fail(c, cc, 503, "server_error", "loading", 0, "the model is still loading; retry later");
        return srv_generate(c, cc, cc->route == R_CHAT ? IRIS_OAI_CHAT : IRIS_OAI_COMPLETION);
    }
    return MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    iris_server *s = cls;
    srv_conn *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        cc->s = s;
        cc->t0 = srv_now();
        cc->route = route_of(url, &cc->endpoint);
        *con_cls = cc;
        const union MHD_ConnectionInfo *si = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        cc->sock = si ? si->socket_context : NULL;
        sock_phase(s, cc->sock, 1);
        cors_origin(s, c, cc);
        pthread_mutex_lock(&s->mu);
        s->inflight++;
        pthread_mutex_unlock(&s->mu);

        int post = cc->route == R_CHAT || cc->route == R_COMPLETIONS;
        if (cc->route == R_NONE) {
            char msg[300];
            snprintf(msg, sizeof msg, "no route %s %.200s", method, url);
            cc->answered = 1;
            return fail(c, cc, 404, "not_found_error", "not_found", 0, msg);
        }
        if (!strcmp(method, "OPTIONS") && cc->origin[0]) return preflight(c, cc);
        if (strcmp(method, post ? "POST" : "GET") && !(!post && !strcmp(method, "HEAD"))) {
            char msg[300];
            snprintf(msg, sizeof msg, "%s %s: use %s", method, url, post ? "POST" : "GET");
            cc->answered = 1;
            return fail(c, cc, 405, "invalid_request_error", "method_not_allowed", 1, msg);
        }
        if (!strncmp(url, "/v1/", 4) && !authorized(s, c)) {
            cc->answered = 1;
            return fail(c, cc, 401, "authentication_error", "invalid_api_key", 1,
                        "missing or wrong API key: send the header 'Authorization: Bearer <key>'");
        }
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        if (post && !is_json_type(ct)) {
            char msg[300];
            snprintf(msg, sizeof msg, "Content-Type %.100s%s%s: send the body as 'Content-Type: application/json'",
                     ct ? "'" : "missing", ct ? ct : "", ct ? "' is not JSON" : "");
            cc->answered = 1;
            return fail(c, cc, 415, "invalid_request_error", "unsupported_media_type", 1, msg);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body_bytes) {
            char msg[200];
            snprintf(msg, sizeof msg, "the body is %s bytes, over the limit of %zu (--max-body-bytes)", cl,
                     s->o.max_body_bytes);
            cc->answered = 1;
            return fail(c, cc, 413, "invalid_request_error", "request_too_large", 1, msg);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t k = *upload_size;
        if (cc->answered) {
            *upload_size = 0; /* discard the rest of a refused body */
            return MHD_YES;
        }
        if (cc->n + k > s->o.max_body_bytes) {
            char msg[200];
            snprintf(msg, sizeof msg, "the body is over the limit of %zu bytes (--max-body-bytes)", s->o.max_body_bytes);
            return fail_midbody(c, cc, 413, "Content Too Large", "request_too_large", msg);
        }
        if (srv_now() - cc->t0 > s->o.body_timeout_s) {
            char msg[200];
            snprintf(msg, sizeof msg, "the body did not arrive within %.0f s (--body-timeout)", s->o.body_timeout_s);
            return fail_midbody(c, cc, 408, "Request Timeout", "request_timeout", msg);
        }
        if (cc->n + k + 1 > cc->cap) {
            size_t cap = cc->cap ? cc->cap : 4096;
            while (cap < cc->n + k + 1) cap *= 2;
            char *q = realloc(cc->body, cap);
            if (!q) return MHD_NO;
            cc->body = q;
            cc->cap = cap;
        }
        memcpy(cc->body + cc->n, upload_data, k);
        cc->n += k;
        *upload_size = 0;
        return MHD_YES;
    }
    if (cc->answered) return MHD_YES;
    cc->answered = 1;
    sock_phase(s, cc->sock, 2);
    return dispatch(c, cc, url);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    iris_server *s = cls;
    srv_conn *cc = *con_cls;
    if (!cc) return;
    sock_phase(s, cc->sock, 3); /* kept alive: idle until the next request */
    iris_metrics_request(s->metrics, cc->endpoint, cc->status ? cc->status : 499);
    free(cc->body);
    free(cc);
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    s->inflight--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = 0;
    iris_log(IRIS_LOG_DEBUG, "http", "%s", msg);
}

/* ---- life cycle ---- */

static char *dup_or_null(const char *s) {
    return s ? strdup(s) : NULL;
}

/* The listening socket, bound exclusively: SO_REUSEADDR only (on Linux it
 * allows rebinding past TIME_WAIT, never a second listener), no
 * SO_REUSEPORT.  *port gets the port bound (the one chosen for 0). */
static int listen_on(const struct addrinfo *ai, const char *host, int *port, iris_err *err) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return iris_err_set(err, IRIS_EIO, "cannot listen on %s:%d: socket: %s", host, *port, strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 511)) {
        int e = errno;
        close(fd);
        if (e == EADDRINUSE)
            return iris_err_set(err, IRIS_EIO, "cannot listen on %s:%d: port in use (another server is listening "
                                "there; pick another --port)", host, *port);
        return iris_err_set(err, IRIS_EIO, "cannot listen on %s:%d: %s", host, *port, strerror(e));
    }
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    if (!getsockname(fd, (struct sockaddr *)&sa, &len))
        *port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                               : ((struct sockaddr_in *)&sa)->sin_port);
    return fd;
}

static int default_workers(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 2 ? 2 : n > 16 ? 16 : (int)n;
}

int iris_server_start(const iris_server_opts *o, iris_server **out, iris_err *err) {
    *out = NULL;
    iris_server *s = calloc(1, sizeof *s);
    if (!s) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    s->o = *o;
    s->host = dup_or_null(o->host ? o->host : "127.0.0.1");
    s->api_key = o->api_key && *o->api_key ? strdup(o->api_key) : NULL;
    s->served = strdup(o->served_model_name ? o->served_model_name : "iris");
    s->model_arg = dup_or_null(o->model_arg);
    s->media_dir = dup_or_null(o->local_media_dir);
    s->origins = o->allowed_origins && *o->allowed_origins ? strdup(o->allowed_origins) : NULL;
    s->networks = dup_or_null(o->media_networks);
    if (s->o.image_workers <= 0) s->o.image_workers = default_workers();
    if (s->o.image_queue < 0) s->o.image_queue = 0;
    if (s->o.max_connections <= 0) s->o.max_connections = 1024;
    if (s->o.max_connections_per_client <= 0 || s->o.max_connections_per_client > s->o.max_connections)
        s->o.max_connections_per_client = s->o.max_connections;
    s->metrics = iris_metrics_new();
    s->started = (int64_t)time(NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->gate_mu, NULL);
    pthread_cond_init(&s->gate_cv, NULL);
    pthread_mutex_init(&s->sock_mu, NULL);
    pthread_cond_init(&s->sock_cv, NULL);
    if (getrandom(&s->id_salt, sizeof s->id_salt, 0) != sizeof s->id_salt) s->id_salt = (uint64_t)time(NULL);
    s->media = (iris_media_opts){.allow_remote = o->allow_remote_images, .local_dir = s->media_dir,
                                 .max_bytes = o->max_image_bytes ? o->max_image_bytes : (20u << 20),
                                 .timeout_ms = o->image_timeout_ms, .allow_private = o->allow_private_media,
                                 .networks = s->networks};
    if (!s->host || !s->served || !s->metrics) {
        iris_server_stop(s);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST},
                    *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    if (o->port < 0 || o->port > 65535 || getaddrinfo(s->host, port, &hints, &ai) || !ai) {
        if (ai) freeaddrinfo(ai);
        iris_err_set(err, IRIS_EINVAL, "--host %s --port %d: not a numeric address and port", s->host, o->port);
        iris_server_stop(s);
        return IRIS_EINVAL;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
                     MHD_USE_ITC | MHD_USE_POLL;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->port = o->port;
    int lfd = listen_on(ai, s->host, &s->port, err);
    freeaddrinfo(ai);
    if (lfd < 0) {
        iris_server_stop(s);
        return IRIS_EIO;
    }
    double idle = s->o.header_timeout_s + (s->o.body_timeout_s > 0 ? s->o.body_timeout_s : 30) + 1;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                            MHD_OPTION_LISTEN_SOCKET, lfd,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->o.max_connections,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->o.max_connections_per_client,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)idle,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                            MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1u << 20),
                            MHD_OPTION_END);
    if (!s->d) {
        close(lfd);
        iris_err_set(err, IRIS_EIO, "cannot listen on %s:%d: libmicrohttpd refused to start", s->host, o->port);
        iris_server_stop(s);
        return IRIS_EIO;
    }
    if (s->o.header_timeout_s > 0 && !pthread_create(&s->watchdog, NULL, watchdog_main, s)) s->watchdog_on = 1;
    *out = s;
    return 0;
}

int iris_server_port(const iris_server *s) {
    return s ? s->port : -1;
}

void iris_server_set_engine(iris_server *s, iris_engine *e) {
    atomic_store(&s->eng, e);
}

int iris_server_drain(iris_server *s, double timeout_s) {
    if (!s || !s->d) return 0;
    atomic_store(&s->draining, 1);
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
    double deadline = srv_now() + (timeout_s > 0 ? timeout_s : 0);
    pthread_mutex_lock(&s->mu);
    while ((s->inflight > 0 || s->gens) && srv_now() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    int left = 0;
    for (srv_gen *g = s->gens; g; g = g->next) {
        iris_request_cancel(g->r);
        left++;
    }
    pthread_mutex_unlock(&s->mu);
    return left;
}

/* The generations with an engine request, so a drain can cancel them. */
void srv_gen_register(iris_server *s, srv_gen *g) {
    pthread_mutex_lock(&s->mu);
    g->prev = NULL;
    g->next = s->gens;
    if (s->gens) s->gens->prev = g;
    s->gens = g;
    pthread_mutex_unlock(&s->mu);
}

void srv_gen_unregister(iris_server *s, srv_gen *g) {
    pthread_mutex_lock(&s->mu);
    if (g->prev) g->prev->next = g->next;
    else if (s->gens == g) s->gens = g->next;
    if (g->next) g->next->prev = g->prev;
    g->prev = g->next = NULL;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void iris_server_stop(iris_server *s) {
    if (!s) return;
    if (s->watchdog_on) {
        pthread_mutex_lock(&s->sock_mu);
        s->watchdog_stop = 1;
        pthread_cond_broadcast(&s->sock_cv);
        pthread_mutex_unlock(&s->sock_mu);
        pthread_join(s->watchdog, NULL);
    }
    if (s->d) MHD_stop_daemon(s->d);
    iris_metrics_free(s->metrics);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->gate_mu);
    pthread_cond_destroy(&s->gate_cv);
    pthread_mutex_destroy(&s->sock_mu);
    pthread_cond_destroy(&s->sock_cv);
    free(s->origins);
    free(s->networks);
    free(s->host);
    free(s->api_key);
    free(s->served);
    free(s->model_arg);
    free(s->media_dir);
    free(s);
}
