/* test_server_gauges.c: the gauges a cluster's router reads from /metrics (src/server/metrics.c),
 * under load: `iris serve` on the tiny fixture with room for 2 sequences, 6 clients each asking
 * for a long answer at once.  While they run, every scrape has the vLLM-named gauges equal to
 * iris's own and the KV usage a fraction; they move (2 running, some waiting, the KV cache in
 * use); once every answer is in, nothing runs or waits and no block is held. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_harness.h"
#include "test.h"

enum { CLIENTS = 6, SEQS = 2 };

typedef struct gclient {
    int port;
    long status;
} gclient;

static void *client_main(void *arg) {
    gclient *c = arg;
    char *body = ts_chat_body(NULL, "Count to a thousand.", "\"max_tokens\":1500,\"ignore_eos\":true");
    char *out = NULL;
    c->status = body ? ts_post(c->port, "/v1/chat/completions", body, &out) : 0;
    free(out);
    free(body);
    return NULL;
}

/* The value after "\nNAME " in a scrape, or -1. */
static double value(const char *m, const char *name) {
    char key[96];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = m ? strstr(m, key) : NULL;
    return at ? atof(at + strlen(key)) : -1;
}

IRIS_TEST(server_router_gauges_move) {
    ts_server s;
    REQUIRE(ts_server_start(&s, "--max-num-seqs 2") == 0);
    gclient cl[CLIENTS];
    pthread_t th[CLIENTS];
    int started = 0;
    for (int i = 0; i < CLIENTS; i++) {
        cl[i] = (gclient){.port = s.port};
        if (pthread_create(&th[i], NULL, client_main, &cl[i]) == 0) started++;
    }
    CHECK_EQ_INT(started, CLIENTS);
    double peak_run = 0, peak_wait = 0, peak_kv = 0, t_end = ts_now() + 60;
    int scrapes = 0, mismatched = 0, bad_frac = 0;
    for (;;) {
        char *m = NULL;
        if (ts_http(s.port, "GET", "/metrics", NULL, 0, NULL, &m) == 200) {
            double run = value(m, "vllm:num_requests_running"), wait = value(m, "vllm:num_requests_waiting");
            double kv = value(m, "vllm:kv_cache_usage_perc");
            mismatched += run != value(m, "iris:num_requests_running") || wait != value(m, "iris:num_requests_waiting") ||
                          kv != value(m, "iris:kv_cache_usage_perc") || kv != value(m, "vllm:gpu_cache_usage_perc");
            int bad = !(kv >= 0 && kv <= 1) || run < 0 || run > SEQS || wait < 0;
            if (bad && !bad_frac) fprintf(stderr, "running %g, waiting %g, kv %g\n", run, wait, kv);
            bad_frac += bad;
            if (run > peak_run) peak_run = run;
            if (wait > peak_wait) peak_wait = wait;
            if (kv > peak_kv) peak_kv = kv;
            scrapes++;
        }
        int done = 1;
        for (int i = 0; i < CLIENTS; i++) done &= cl[i].status != 0;
        free(m);
        if (done || ts_now() > t_end) break;
        ts_nap_ms(5);
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < CLIENTS; i++) CHECK_EQ_INT(cl[i].status, 200);
    CHECKF(scrapes > 3, "%d scrapes", scrapes);
    CHECKF(mismatched == 0, "%d scrapes where a vllm: gauge differs from iris's", mismatched);
    CHECKF(bad_frac == 0, "%d scrapes with a gauge out of its range", bad_frac);
    CHECKF(peak_run == SEQS, "running peaked at %g, want %d", peak_run, SEQS);
    CHECKF(peak_wait >= 1, "waiting peaked at %g", peak_wait);
    CHECKF(peak_kv > 0, "KV usage peaked at %g", peak_kv);
    char *m = NULL;
    CHECK_EQ_INT(ts_http(s.port, "GET", "/metrics", NULL, 0, NULL, &m), 200);
    CHECK_CONTAINS(m, "\nvllm:num_requests_running 0\n");
    CHECK_CONTAINS(m, "\nvllm:num_requests_waiting 0\n");
    CHECK_CONTAINS(m, "\nvllm:kv_cache_usage_perc 0.000000\n");
    CHECK_CONTAINS(m, "# TYPE vllm:kv_cache_usage_perc gauge\n");
    free(m);
    CHECK_EQ_INT(ts_server_stop(&s), 0);
}
