/* cmd_bench_images.c: `iris bench MODEL --images N [--image WxH] [--concurrency C]
 * [--gen-tokens G]`: image throughput through the engine, as one JSON object.
 *
 * N synthetic WxH pictures, each of different content (a colour offset by
 * its index), so neither the prefix cache nor the image keys can spare the
 * vision encoder any of them, go through the CLI batch mode's path
 * (batch.h): worker threads build the prompts ahead (resize, patchify,
 * tokenize), and up to C requests are in the engine at once, continuously
 * batched; each answer is exactly G greedy tokens (end tokens ignored).  One
 * request with one more picture runs first, alone, and is not counted (it
 * warms up kernels and plans).  bench/serve_load.py sends the same pictures
 * to `iris serve` over HTTP, for the same figures from outside.
 *
 * Printed: images/s and generated tok/s over the wall time of the N, the
 * latency of each request (submit to its last token; and to its first) at
 * p50 and p99, the engine's time split over the run (vision encoder,
 * decoder steps with prompt rows, decoder steps of decodes only: the
 * counters of iris_engine_stats), and the peak memory: the device arena's
 * peak and the device's used memory on CUDA (0 on the CPU), the process's
 * peak RSS.  Figures are reported, never asserted (DESIGN.md). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "backend/backend.h"
#include "clock.h"
#include "batch.h"
#include "cli.h"
#include "engine/engine.h"
#include "engine/prompt.h"
#include "engine_flags.h"
#include "err.h"
#include "opts.h"
#ifdef IRIS_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#define BENCH_QUESTION "Write a one-sentence caption for this image."
#define SYNTH_PREFIX "synthetic-"

typedef struct bench_images {
    const char *model, *image;
    long long n, conc, gen;
    int w, h;
    iris_cli_engine ce;
    iris_engine *e;
    json_t *msgs;
    double *lat, *ttft;         /* per finished request: submit to the last token, to the first (s) */
    int *tokens, n_res, n_failed;
} bench_images;

/* One request's events: counted here (counted 0: the warm-up), then on to the batch's handler. */
typedef struct relay {
    bench_images *x;
    int counted;
    iris_event_fn fn;
    void *ud;
} relay;

/* Picture i: gradients and a checkerboard, red and green offset by i's two low bytes, so
 * pictures 0..65535 all differ, after resizing too. */
static void picture(int i, int w, int h, uint8_t *rgb) {
    int dr = i & 255, dg = (i >> 8) & 255;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = rgb + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(255 * x / (w > 1 ? w - 1 : 1) + dr);
            p[1] = (uint8_t)(255 * y / (h > 1 ? h - 1 : 1) + dg);
            p[2] = (uint8_t)(((x / 32 + y / 32) & 1) ? 200 : 40);
        }
}

/* batch.h's build: the path is SYNTH_PREFIX and the picture's index (any worker thread). */
static int build(void *ud, const char *path, iris_prompt *p, iris_err *err) {
    bench_images *x = ud;
    int i = atoi(path + strlen(SYNTH_PREFIX));
    iris_image im = {.width = x->w, .height = x->h, .rgb = malloc((size_t)x->w * x->h * 3)};
    if (!im.rgb) return iris_err_set(err, IRIS_ENOMEM, "out of memory for a %dx%d picture", x->w, x->h);
    picture(i, x->w, x->h, im.rgb);
    iris_prompt_image pim = {.image = &im};
    iris_prompt_ctx pctx;
    iris_engine_prompt_ctx(x->e, &pctx);
    int rc = iris_prompt_build(&pctx, x->msgs, &pim, 1, p, NULL, err);
    free(im.rgb);
    return rc;
}

/* The engine thread: a finished request's figures (one slot each, taken atomically). */
static void on_event(void *ud, const iris_event *ev) {
    relay *r = ud;
    iris_event_fn fn = r->fn;
    void *fud = r->ud;
    if (ev->kind == IRIS_EVENT_DONE) {
        bench_images *x = r->x;
        if (r->counted) {
            int k = __atomic_fetch_add(&x->n_res, 1, __ATOMIC_RELAXED);
            x->lat[k] = ev->usage.total_s;
            x->ttft[k] = ev->usage.ttft_s;
            x->tokens[k] = ev->usage.completion_tokens;
            if (ev->finish_reason == IRIS_FINISH_REASON_ERROR) __atomic_fetch_add(&x->n_failed, 1, __ATOMIC_RELAXED);
        }
        free(r);
    }
    if (fn) fn(fud, ev);
}

/* Exactly gen greedy tokens for prompt p (taken over as iris_engine_submit does). */
static int submit_req(bench_images *x, int counted, iris_prompt *p, iris_event_fn fn, void *ev_ud, iris_request **out,
                      iris_err *err) {
    relay *r = malloc(sizeof *r);
    if (!r) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    *r = (relay){x, counted, fn, ev_ud};
    iris_request_params rp;
    iris_request_params_default(x->e, &rp);
    rp.prompt = p;
    rp.sampling.do_sample = 0;
    rp.sampling.temperature = 0;
    rp.sampling.max_tokens = (int)x->gen;
    rp.sampling.ignore_eos = 1;
    rp.on_event = on_event;
    rp.ud = r;
    int rc = iris_engine_submit(x->e, &rp, out, err);
    if (rc) free(r);
    return rc;
}

static int submit(void *ud, iris_prompt *p, iris_event_fn fn, void *ev_ud, iris_request **out, iris_err *err) {
    return submit_req(ud, 1, p, fn, ev_ud, out, err);
}

/* The warm-up: picture N alone, not counted. */
typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    iris_err err;
} waiter;

static void warm_done(void *ud, const iris_event *ev) {
    waiter *w = ud;
    if (ev->kind != IRIS_EVENT_DONE) return;
    pthread_mutex_lock(&w->mu);
    if (ev->finish_reason == IRIS_FINISH_REASON_ERROR) w->err = ev->err;
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int warm_up(bench_images *x, iris_err *err) {
    char name[48];
    snprintf(name, sizeof name, SYNTH_PREFIX "%lld", x->n);
    iris_prompt p;
    int rc = build(x, name, &p, err);
    if (rc) return rc;
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, {0}};
    iris_request *r = NULL;
    rc = submit_req(x, 0, &p, warm_done, &w, &r, err);
    iris_prompt_free(&p);
    pthread_mutex_lock(&w.mu);
    while (!rc && !w.done) pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    iris_request_free(r);
    if (!rc && w.err.code) *err = w.err, rc = w.err.code;
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double u = *(const double *)a, v = *(const double *)b;
    return u < v ? -1 : u > v;
}

/* The p-quantile of n sorted values, in ms. */
static double pct_ms(const double *sorted, int n, double p) {
    if (n <= 0) return 0;
    int i = (int)(p * n);
    return sorted[i < n ? i : n - 1] * 1e3;
}

/* The command line into x: -1 to go on, else the exit status (help: 0, bad usage: 2). */
static int parse_args(int argc, char **argv, bench_images *x) {
    x->image = "1024x1024", x->conc = 32, x->gen = 64;
    iris_opt own[] = {
        {"--images", 0, IRIS_OPT_INT, &x->n, "N", "pictures to caption, each of different content", 1, 65535, NULL,
         NULL, 0},
        {"--image", 0, IRIS_OPT_STR, &x->image, "WxH", "their size (default 1024x1024; not resized down: the plan "
         "admits\nits pixels)", 0, 0, NULL, NULL, 0},
        {"--concurrency", 0, IRIS_OPT_INT, &x->conc, "C", "requests in the engine at once (default 32; also\n"
         "--max-num-seqs unless given)", 1, 4096, NULL, NULL, 0},
        {"--gen-tokens", 0, IRIS_OPT_INT, &x->gen, "G", "tokens of each answer, end tokens ignored (default 64)", 1,
         1 << 16, NULL, NULL, 0},
        IRIS_OPT_TABLE_END,
    };
    iris_cli_spec sp = {
        .cmd = "bench",
        .usage = "MODEL --images N [--image WxH] [--concurrency C] [--gen-tokens G] [options]",
        .about = "Image throughput through the engine, as JSON: N distinct pictures, C requests at once,\n"
                 "G-token answers: images/s, generated tok/s, latency p50/p99, the engine's time split\n"
                 "(vision encoder, prefill steps, decode steps) and peak memory.",
        .max_pos = 1,
        .tables = {own, iris_cli_engine_flags(&x->ce, IRIS_CLI_E_DEVICE | IRIS_CLI_E_MEMORY | IRIS_CLI_E_KV |
                                                          IRIS_CLI_E_SCHED | IRIS_CLI_E_SERVER | IRIS_CLI_E_HUB)},
    };
    const char *pos[1];
    int n_pos, rc = iris_cli_parse(&sp, argc, argv, pos, &n_pos);
    if (rc >= 0) return rc;
    if (!n_pos) return iris_cli_usage_error("bench", "give MODEL");
    x->model = pos[0];
    char tail;
    if (sscanf(x->image, "%dx%d%c", &x->w, &x->h, &tail) != 2 || x->w < 1 || x->h < 1 || x->w > 16384 ||
        x->h > 16384)
        return iris_cli_usage_error("bench", "--image '%s': give the pictures' size as WxH (each 1..16384)", x->image);
    return -1;
}

/* The run's figures, as JSON members after the opening ones. */
static void report(bench_images *x, double wall, const iris_engine_stats *s0, const iris_engine_stats *s1) {
    int n = x->n_res;
    long long gen = 0;
    for (int i = 0; i < n; i++) gen += x->tokens[i];
    qsort(x->lat, (size_t)n, sizeof *x->lat, cmp_double);
    qsort(x->ttft, (size_t)n, sizeof *x->ttft, cmp_double);
    double vis = s1->vision_s - s0->vision_s, pre = s1->prefill_s - s0->prefill_s, dec = s1->decode_s - s0->decode_s;
    double busy = vis + pre + dec;
    printf(",\"completed\":%d,\"failed\":%d,\"generated_tokens\":%lld,\"wall_s\":%.3f,\"images_per_s\":%.2f,"
           "\"gen_tok_per_s\":%.1f,\"latency_ms_p50\":%.1f,\"latency_ms_p99\":%.1f,\"ttft_ms_p50\":%.1f,"
           "\"ttft_ms_p99\":%.1f",
           n - x->n_failed, x->n_failed, gen, wall, wall > 0 ? (n - x->n_failed) / wall : 0.0,
           wall > 0 ? gen / wall : 0.0, pct_ms(x->lat, n, 0.5), pct_ms(x->lat, n, 0.99), pct_ms(x->ttft, n, 0.5),
           pct_ms(x->ttft, n, 0.99));
    printf(",\"engine\":{\"steps\":%llu,\"images_encoded\":%llu,\"images_ahead\":%llu,\"worker_s\":%.3f,"
           "\"images_cached\":%llu,\"prefill_tokens\":%llu,"
           "\"prefix_hit_tokens\":%llu,\"preemptions\":%llu,\"vision_s\":%.3f,\"prefill_steps_s\":%.3f,"
           "\"decode_steps_s\":%.3f,\"split\":{\"vision\":%.3f,\"prefill\":%.3f,\"decode\":%.3f},"
           "\"split_note\":\"engine thread time: the vision encoder; decoder and sampling of steps with prompt rows "
           "(decodes beside them included); of steps of decodes only\"}",
           (unsigned long long)(s1->steps - s0->steps), (unsigned long long)(s1->images_encoded - s0->images_encoded),
           (unsigned long long)(s1->images_ahead - s0->images_ahead), s1->worker_s - s0->worker_s,
           (unsigned long long)(s1->images_cached - s0->images_cached),
           (unsigned long long)(s1->prefill_tokens - s0->prefill_tokens),
           (unsigned long long)(s1->prefix_hit_tokens - s0->prefix_hit_tokens),
           (unsigned long long)(s1->preemptions - s0->preemptions), vis, pre, dec, busy > 0 ? vis / busy : 0,
           busy > 0 ? pre / busy : 0, busy > 0 ? dec / busy : 0);
    size_t peak = 0, arena = 0, used = 0;
#ifdef IRIS_CUDA
    iris_backend *be = iris_engine_backend(x->e);
    iris_cuda_mem cm;
    if (!strcmp(be->name, "cuda") && iris_cuda_mem_info(be, &cm) == 0)
        peak = cm.peak_bytes, arena = cm.arena_bytes, used = cm.device_used;
#endif
    struct rusage ru;
    long rss = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
    printf(",\"memory\":{\"gpu_peak_bytes\":%zu,\"gpu_arena_bytes\":%zu,\"gpu_device_used_bytes\":%zu,"
           "\"host_peak_rss_bytes\":%lld}", peak, arena, used, (long long)rss * 1024);
}

static int run(bench_images *x, iris_err *err) {
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.device = "cuda";
    o.max_num_seqs = (int)x->conc;
    iris_cli_engine_apply(&x->ce, &o);
    o.model = x->model;
    o.max_image_pixels = (long long)x->w * x->h;
    o.host_warm = (int)x->conc;  /* as a server for that many clients */
    double t0 = iris_now_s();
    int rc = iris_engine_open(&o, &x->e, err);
    double t_load = iris_now_s() - t0;
    if (rc) return rc;
    x->msgs = iris_prompt_one_turn(NULL, 1, BENCH_QUESTION);
    x->lat = calloc((size_t)x->n, sizeof *x->lat);
    x->ttft = calloc((size_t)x->n, sizeof *x->ttft);
    x->tokens = calloc((size_t)x->n, sizeof *x->tokens);
    char **names = calloc((size_t)x->n, sizeof *names);
    if (!x->msgs || !x->lat || !x->ttft || !x->tokens || !names) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
    for (long long i = 0; !rc && i < x->n; i++)
        if (!(names[i] = malloc(48))) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
        else snprintf(names[i], 48, SYNTH_PREFIX "%lld", i);
    iris_model_info mi;
    iris_engine_model_info(x->e, &mi);
    if (!rc)
        printf("{\"model\":\"%s\",\"device\":\"%s\",\"load_s\":%.3f,\"images\":%lld,\"image\":\"%dx%d\","
               "\"concurrency\":%lld,\"gen_tokens\":%lld,\"max_num_seqs\":%d,\"max_batch_tokens\":%d",
               mi.dir, iris_engine_backend(x->e)->name, t_load, x->n, x->w, x->h, x->conc, x->gen, mi.max_num_seqs,
               mi.max_batch_tokens);
    fflush(stdout);
    if (!rc) rc = warm_up(x, err);
    iris_batch *b = NULL;
    iris_batch_opts bo = {.out = "/dev/null", .unordered = 1, .quiet = 1, .max_in_flight = (int)x->conc};
    if (!rc) rc = iris_batch_prepare(&bo, (const char *const *)names, (int)x->n, &b, err);
    iris_engine_stats s0, s1;
    double wall = 0;
    if (!rc) {
        iris_engine_get_stats(x->e, &s0);
        iris_batch_ops ops = {.ud = x, .build = build, .submit = submit};
        double a = iris_now_s();
        int st = iris_batch_run(b, &ops, err);
        wall = iris_now_s() - a;
        iris_engine_get_stats(x->e, &s1);
        if (st < 0) rc = st;
    }
    if (!rc) report(x, wall, &s0, &s1);
    printf("}\n");
    iris_batch_free(b);
    for (long long i = 0; names && i < x->n; i++) free(names[i]);
    free(names);
    return rc;
}

int iris_cmd_bench_images(int argc, char **argv) {
    bench_images x;
    memset(&x, 0, sizeof x);
    int st = parse_args(argc, argv, &x);
    if (st >= 0) return st;
    iris_err err = {0};
    int rc = run(&x, &err);
    iris_engine_close(x.e);
    json_decref(x.msgs);
    free(x.lat), free(x.ttft), free(x.tokens);
    if (rc) return iris_cli_fail(&err);
    return x.n_failed ? 1 : 0;
}
