/* metrics.h: the server's counters and latency histograms, written out in
 * Prometheus' text exposition format for GET /metrics.
 *
 * Owns: the counters (one mutex; every update is a few adds).  Engine-side
 * gauges (queue depth, KV blocks, cache hits) are not stored here: the
 * caller passes them to iris_metrics_render as read at that moment.
 */
#ifndef IRIS_SERVER_METRICS_H
#define IRIS_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct iris_metrics iris_metrics;

/* Engine gauges and counters as the engine reports them; a negative value
 * means "not known" and the line is left out. */
typedef struct iris_metrics_engine {
    int64_t queue_depth, running;
    int64_t kv_blocks_used, kv_blocks_total;
    int64_t prefix_cache_hits, prefix_cache_queries;
    int64_t image_cache_hits, image_cache_queries;
} iris_metrics_engine;

/* NULL when out of memory; freed with iris_metrics_free (NULL ok). */
iris_metrics *iris_metrics_new(void);
void iris_metrics_free(iris_metrics *m);

/* One finished HTTP request (any route) with its status. */
void iris_metrics_request(iris_metrics *m, const char *endpoint, int status);
/* One finished generation: token counts and latencies in seconds; ttft < 0
 * when no token came out. */
void iris_metrics_generation(iris_metrics *m, int prompt_tokens, int generated_tokens, double ttft, double e2e);
void iris_metrics_inter_token(iris_metrics *m, double seconds);
void iris_metrics_inflight(iris_metrics *m, int delta);

/* The exposition text, malloc'd (caller frees).  `eng` may be NULL. */
char *iris_metrics_render(iris_metrics *m, const iris_metrics_engine *eng, size_t *len);

#endif
