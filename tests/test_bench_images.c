/* test_bench_images.c: `iris bench MODEL --images N` (src/cli/cmd_bench_images.c) on the demo
 * model on the CPU, through a real build/iris process: the JSON's counts are those of the run
 * asked for (every picture answered with exactly G tokens, each through the vision encoder, none
 * from the cache), the rates and percentiles are consistent with each other, the time split adds
 * up, and a bad --image is a usage error.  bench/serve_load.py, the same measure over HTTP, runs
 * against `iris serve` on the demo model with the same checks of its counts. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_harness.h"
#include "test.h"

static const char *bin(void) { return getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris"; }

static double num(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

IRIS_TEST(bench_images_demo_cpu) {
    char cmd[1024];
    int st;
    snprintf(cmd, sizeof cmd, "%s bench models/demo --images 5 --image 80x64 --concurrency 2 --gen-tokens 4 "
             "--device cpu 2>/dev/null", bin());
    char *out = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 0);
    json_error_t je;
    json_t *o = out ? json_loads(out, 0, &je) : NULL;
    CHECKF(o != NULL, "not one JSON object: %s", out ? out : "(nothing)");
    if (!o) {
        free(out);
        return;
    }
    CHECK_STR(json_string_value(json_object_get(o, "device")), "cpu");
    CHECK(num(o, "images") == 5 && num(o, "concurrency") == 2 && num(o, "gen_tokens") == 4);
    CHECK_EQ_INT((int)num(o, "completed"), 5);
    CHECK_EQ_INT((int)num(o, "failed"), 0);
    CHECK_EQ_INT((int)num(o, "generated_tokens"), 20);
    double wall = num(o, "wall_s"), ips = num(o, "images_per_s"), tps = num(o, "gen_tok_per_s");
    CHECK(wall > 0);
    CHECKF(ips > 0 && ips * wall > 4.9 && ips * wall < 5.1, "images/s %.3f over %.3f s", ips, wall);
    CHECKF(tps * wall > 19.5 && tps * wall < 20.5, "tok/s %.3f over %.3f s", tps, wall);
    double p50 = num(o, "latency_ms_p50"), p99 = num(o, "latency_ms_p99");
    double t50 = num(o, "ttft_ms_p50"), t99 = num(o, "ttft_ms_p99");
    CHECKF(p50 > 0 && p50 <= p99 && p99 <= wall * 1e3 + 1, "latency p50 %.1f p99 %.1f wall %.3f", p50, p99, wall);
    CHECKF(t50 > 0 && t50 <= p50 && t99 <= p99, "ttft p50 %.1f p99 %.1f", t50, t99);
    json_t *eng = json_object_get(o, "engine");
    CHECK_EQ_INT((int)num(eng, "images_encoded"), 5);  /* distinct pictures: none from the cache */
    CHECK_EQ_INT((int)num(eng, "images_cached"), 0);
    CHECK(num(eng, "steps") >= 4);  /* at least the 4 tokens of the last request */
    CHECK(num(eng, "vision_s") > 0 && num(eng, "prefill_steps_s") > 0 && num(eng, "decode_steps_s") >= 0);
    json_t *sp = json_object_get(eng, "split");
    double sum = num(sp, "vision") + num(sp, "prefill") + num(sp, "decode");
    CHECKF(sum > 0.99 && sum < 1.01, "the split adds up to %.3f", sum);
    json_t *mem = json_object_get(o, "memory");
    CHECK(json_is_integer(json_object_get(mem, "gpu_peak_bytes")) && num(mem, "gpu_peak_bytes") == 0);
    CHECK(num(mem, "host_peak_rss_bytes") > 0);
    json_decref(o);
    free(out);
    /* a bad size is a usage error naming the flag */
    snprintf(cmd, sizeof cmd, "%s bench models/demo --images 2 --image 80 --device cpu 2>&1", bin());
    out = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 2);
    CHECK_CONTAINS(out, "--image");
    free(out);
}

/* bench/serve_load.py with C clients over N requests: every request answered with its G tokens. */
IRIS_TEST(bench_serve_load_demo_cpu) {
    if (system("python3 -c 'import json' >/dev/null 2>&1") != 0) IRIS_TEST_SKIP("no python3");
    int port = ts_free_port();
    REQUIRE(port > 0);
    char cmd[1024];
    int st;
    snprintf(cmd, sizeof cmd, "SERVE_LOG=/dev/null timeout 120 python3 bench/serve_load.py %s models/demo --requests 4 "
             "--concurrency 2 --image 64x64 --max-tokens 4 --port %d -- --device cpu", bin(), port);
    char *out = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 0);
    json_t *o = out ? json_loads(out, 0, NULL) : NULL;
    CHECKF(o != NULL, "not one JSON object: %s", out ? out : "(nothing)");
    if (o) {
        CHECK_EQ_INT((int)num(o, "completed"), 4);
        CHECK_EQ_INT((int)num(o, "n_errors"), 0);
        CHECK_EQ_INT((int)num(o, "concurrency"), 2);
        CHECK_EQ_INT((int)num(o, "generated_tokens"), 16);
        double wall = num(o, "wall_s"), ips = num(o, "images_per_s");
        CHECKF(ips > 0 && ips * wall > 3.9 && ips * wall < 4.1, "images/s %.3f over %.3f s", ips, wall);
        double p50 = num(o, "latency_ms_p50"), p99 = num(o, "latency_ms_p99");
        CHECKF(p50 > 0 && p50 <= p99 && num(o, "ttft_ms_p50") <= p50, "latency p50 %.1f p99 %.1f", p50, p99);
        CHECK(json_is_integer(json_object_get(o, "gpu_memory_peak_bytes")));
        CHECK_EQ_INT((int)num(o, "exit_code"), 0);
    }
    json_decref(o);
    free(out);
}
