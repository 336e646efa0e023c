/* metrics.c: counters and histograms for GET /metrics (see metrics.h).
 *
 * Names follow vLLM's where one exists, with the iris: prefix, so existing
 * dashboards need only the prefix changed.  Histogram buckets are the upper
 * bounds in seconds; counts are cumulative in the output, as Prometheus
 * requires ("le" buckets include everything below them).
 *
 * A cluster's router (the Gateway API Inference Extension's endpoint
 * picker: llm-d, KServe) reads three gauges of its model-server protocol:
 * requests queued, requests running, KV-cache utilization as a fraction in
 * [0, 1].  They are written under iris's names and again under the vLLM
 * names the picker reads by default (vllm:num_requests_waiting,
 * vllm:num_requests_running, vllm:kv_cache_usage_perc, and
 * vllm:gpu_cache_usage_perc, vLLM's name for the last before its V1), so an
 * unchanged router config picks among iris servers as among vLLM ones.  KV
 * usage is the blocks held by sequences over the pool; cached blocks that
 * nothing holds are free for the taking and do not count.
 */
#include "server/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_BUCKETS 14
static const double bucket_le[N_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                            0.25,  0.5,    1,     2.5,  5,     10,  30};

typedef struct hist {
    uint64_t count[N_BUCKETS + 1]; /* last: +Inf */
    double sum;
    uint64_t n;
} hist;

#define MAX_KEYS 48
typedef struct req_key {
    char endpoint[32];
    int status;
    uint64_t n;
} req_key;

struct iris_metrics {
    pthread_mutex_t mu;
    req_key reqs[MAX_KEYS];
    int n_reqs;
    uint64_t prompt_tokens, generated_tokens, n_generations;
    int64_t inflight;
    hist ttft, itl, e2e;
};

iris_metrics *iris_metrics_new(void) {
    iris_metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void iris_metrics_free(iris_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void hist_add(hist *h, double v) {
    int b = 0;
    while (b < N_BUCKETS && v > bucket_le[b]) b++;
    h->count[b]++;
    h->sum += v;
    h->n++;
}

void iris_metrics_request(iris_metrics *m, const char *endpoint, int status) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    int i;
    for (i = 0; i < m->n_reqs; i++)
        if (m->reqs[i].status == status && !strcmp(m->reqs[i].endpoint, endpoint)) break;
    if (i == m->n_reqs && m->n_reqs < MAX_KEYS) {
        /* Unknown routes are folded into one label so a scanner cannot grow the table. */
        snprintf(m->reqs[i].endpoint, sizeof m->reqs[i].endpoint, "%s", endpoint);
        m->reqs[i].status = status;
        m->n_reqs++;
    }
    if (i < m->n_reqs) m->reqs[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void iris_metrics_generation(iris_metrics *m, int prompt_tokens, int generated_tokens, double ttft, double e2e) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)(prompt_tokens > 0 ? prompt_tokens : 0);
    m->generated_tokens += (uint64_t)(generated_tokens > 0 ? generated_tokens : 0);
    m->n_generations++;
    if (ttft >= 0) hist_add(&m->ttft, ttft);
    if (e2e >= 0) hist_add(&m->e2e, e2e);
    pthread_mutex_unlock(&m->mu);
}

void iris_metrics_inter_token(iris_metrics *m, double seconds) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    hist_add(&m->itl, seconds);
    pthread_mutex_unlock(&m->mu);
}

void iris_metrics_inflight(iris_metrics *m, int delta) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->inflight += delta;
    pthread_mutex_unlock(&m->mu);
}

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = b->p ? vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap) : -1;
        va_end(ap);
        if (k >= 0 && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 8192;
        char *q = realloc(b->p, cap);
        if (!q) return;
        b->p = q;
        b->cap = cap;
    }
}

static void put_hist(buf *b, const char *name, const char *help, const hist *h) {
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < N_BUCKETS; i++) {
        cum += h->count[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, bucket_le[i], (unsigned long long)cum);
    }
    cum += h->count[N_BUCKETS];
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)cum, name, h->sum,
        name, (unsigned long long)h->n);
}

static void put_gauge(buf *b, const char *name, const char *type, const char *help, int64_t v) {
    if (v < 0) return;
    put(b, "# HELP %s %s\n# TYPE %s %s\n%s %lld\n", name, help, name, type, name, (long long)v);
}

static void put_frac(buf *b, const char *name, const char *help, double v) {
    put(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.6f\n", name, help, name, name, v);
}

/* The router's gauges (see the opening comment) besides iris's own queue and running ones. */
static void put_router_gauges(buf *b, const iris_metrics_engine *eng) {
    put_gauge(b, "vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled.", eng->queue_depth);
    put_gauge(b, "vllm:num_requests_running", "gauge", "Requests running in the engine.", eng->running);
    if (eng->kv_blocks_used < 0 || eng->kv_blocks_total <= 0) return;
    double usage = (double)eng->kv_blocks_used / (double)eng->kv_blocks_total;
    put_frac(b, "iris:kv_cache_usage_perc", "KV-cache usage: blocks held by requests over the pool (1: full).", usage);
    put_frac(b, "vllm:kv_cache_usage_perc", "KV-cache usage: blocks held by requests over the pool (1: full).", usage);
    put_frac(b, "vllm:gpu_cache_usage_perc", "KV-cache usage (vLLM's name before its V1).", usage);
}

char *iris_metrics_render(iris_metrics *m, const iris_metrics_engine *eng, size_t *len) {
    buf b = {0};
    put(&b, "# HELP iris:http_requests_total HTTP requests by endpoint and status.\n"
            "# TYPE iris:http_requests_total counter\n");
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < m->n_reqs; i++)
        put(&b, "iris:http_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", m->reqs[i].endpoint,
            m->reqs[i].status, (unsigned long long)m->reqs[i].n);
    put_gauge(&b, "iris:prompt_tokens_total", "counter", "Prompt tokens processed.", (int64_t)m->prompt_tokens);
    put_gauge(&b, "iris:generation_tokens_total", "counter", "Tokens generated.", (int64_t)m->generated_tokens);
    put_gauge(&b, "iris:request_success_total", "counter", "Generations finished.", (int64_t)m->n_generations);
    put_gauge(&b, "iris:num_requests_inflight", "gauge", "Generation requests being served.", m->inflight);
    put_hist(&b, "iris:time_to_first_token_seconds", "Time from request to the first generated token.", &m->ttft);
    put_hist(&b, "iris:inter_token_latency_seconds", "Time between consecutive generated tokens.", &m->itl);
    put_hist(&b, "iris:e2e_request_latency_seconds", "Time from request to the last token.", &m->e2e);
    pthread_mutex_unlock(&m->mu);
    if (eng) {
        put_gauge(&b, "iris:num_requests_waiting", "gauge", "Requests queued in the engine.", eng->queue_depth);
        put_gauge(&b, "iris:num_requests_running", "gauge", "Requests the engine is running.", eng->running);
        put_gauge(&b, "iris:kv_blocks_used", "gauge", "KV cache blocks in use.", eng->kv_blocks_used);
        put_gauge(&b, "iris:kv_blocks_total", "gauge", "KV cache blocks in the pool.", eng->kv_blocks_total);
        put_gauge(&b, "iris:prefix_cache_hits_total", "counter", "Prompt blocks found in the prefix cache.",
                  eng->prefix_cache_hits);
        put_gauge(&b, "iris:prefix_cache_queries_total", "counter", "Prompt blocks looked up in the prefix cache.",
                  eng->prefix_cache_queries);
        put_gauge(&b, "iris:image_cache_hits_total", "counter", "Images whose encoding was found in the cache.",
                  eng->image_cache_hits);
        put_gauge(&b, "iris:image_cache_queries_total", "counter", "Images looked up in the encoder cache.",
                  eng->image_cache_queries);
        put_router_gauges(&b, eng);
    }
    if (len) *len = b.n;
    return b.p;
}
