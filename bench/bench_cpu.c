/* bench_cpu.c: prefill and decode speed of the CPU backend on a real-shape
 * checkpoint (make one with `iris synth --like 2B --dtype bf16|fp8 DIR`), and
 * the machine's memory bandwidth, which bounds decode (every weight byte is
 * read once per decoded token).  The steps are the engine's own (its runner,
 * driven while it has no requests).
 *
 *   build/bench/bench_cpu MODEL_DIR [prompt_tokens=128] [gen_tokens=8] [threads=0]
 *
 * Prints one JSON object. Figures are reported, never asserted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "engine/runner.h"
#include "pool.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct {
    const float *src;
    float *dst;
    double *sum;
} bw_ctx;

static void bw_read(void *p, int64_t i0, int64_t i1) {
    bw_ctx *c = p;
    /* 16 independent lanes: one running sum would be bound by the add latency
     * (about a third of the bus on this VM), not by memory */
    float acc[16] = {0};
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16)
        for (int u = 0; u < 16; u++) acc[u] += c->src[i + u];
    double s = 0;
    for (int u = 0; u < 16; u++) s += acc[u];
    for (; i < i1; i++) s += c->src[i];
    c->sum[i0 ? 1 : 0] += s; /* keep the loads alive */
}

/* Read bandwidth over a 1 GiB buffer with the pool's threads (best of 5). */
static double bandwidth_gbs(void) {
    size_t n = (size_t)1 << 28;
    float *a = malloc(n * sizeof(float));
    if (!a) return 0;
    for (size_t i = 0; i < n; i++) a[i] = (float)(i & 1023);
    double sum[2] = {0, 0}, best = 0;
    bw_ctx c = {a, NULL, sum};
    for (int k = 0; k < 5; k++) {
        double t0 = now();
        iris_pool_for((int64_t)n, bw_read, &c);
        double gbs = n * sizeof(float) / (now() - t0) / 1e9;
        best = gbs > best ? gbs : best;
    }
    free(a);
    return best + 0 * sum[0];
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [prompt_tokens] [gen_tokens] [threads]\n", argv[0]);
        return 2;
    }
    int n_prompt = argc > 2 ? atoi(argv[2]) : 128, n_gen = argc > 3 ? atoi(argv[3]) : 8;
    if (n_prompt < 1 || n_gen < 1) {
        fprintf(stderr, "bench_cpu: prompt_tokens and gen_tokens must be positive\n");
        return 2;
    }
    if (argc > 4) iris_pool_set_threads(atoi(argv[4]));
    int n_ctx = n_prompt + n_gen;
    /* The engine on the CPU, sized for this one sequence; its runner's step is what is timed. */
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = argv[1];
    o.device = "cpu";
    o.max_num_seqs = 1;
    o.max_batch_tokens = n_prompt;
    o.max_model_len = n_ctx;
    o.prefix_caching = 0;
    iris_err err = {0};
    iris_engine *e = NULL;
    if (iris_engine_open(&o, &e, &err)) {
        fprintf(stderr, "bench_cpu: %s\n", err.msg);
        return 1;
    }
    const iris_model *m = iris_engine_model(e);
    const iris_text *t = iris_engine_text(e);
    iris_runner *run = iris_engine_runner(e);
    /* bytes read per decoded token: every decoder weight + the lm_head (the embedding row is one row) */
    double weight_bytes = 0;
    for (int i = 0; i < iris_st_count(m->st); i++) {
        const iris_st_tensor *x = iris_st_at(m->st, i);
        if (strstr(x->name, "model.language_model.layers.") || strstr(x->name, "lm_head") ||
            (m->cfg.tie_word_embeddings && strstr(x->name, "embed_tokens")))
            weight_bytes += (double)x->n_bytes;
    }
    int V = t->cfg.vocab_size, n_blocks = (n_ctx + IRIS_KV_BLOCK - 1) / IRIS_KV_BLOCK;
    int32_t *tok = malloc(sizeof(int32_t) * n_ctx), *pos = malloc(sizeof(int32_t) * 3 * n_ctx);
    int32_t *bt = malloc(sizeof(int32_t) * n_blocks);
    for (int i = 0; i < n_ctx; i++) tok[i] = (int32_t)((i * 7919) % 150000 % V);
    for (int i = 0; i < n_blocks; i++) bt[i] = i;
    for (int d = 0; d < 3; d++)
        for (int i = 0; i < n_prompt; i++) pos[d * n_prompt + i] = i;
    iris_runner_out out;
    /* Touch the weights once so the page cache, not the disk, is measured. */
    iris_text_seq w = {.n_new = 1, .tokens = tok, .pos = pos, .pos_stride = n_prompt, .block_table = bt, .logits_from = 0};
    int rc = iris_runner_step(run, &w, 1, NULL, &out, &err);
    iris_text_seq q = {.n_new = n_prompt, .tokens = tok, .pos = pos, .pos_stride = n_prompt, .block_table = bt,
                       .logits_from = n_prompt - 1};
    double t0 = now();
    if (!rc) rc = iris_runner_step(run, &q, 1, NULL, &out, &err);
    double t_prefill = now() - t0;
    t0 = now();
    for (int g = 0; g < n_gen && !rc; g++) {
        int32_t p3[3] = {n_prompt + g, n_prompt + g, n_prompt + g};
        iris_text_seq d = {.n_past = n_prompt + g, .n_new = 1, .tokens = &tok[n_prompt + g], .pos = p3, .pos_stride = 1,
                           .block_table = bt, .logits_from = 0};
        rc = iris_runner_step(run, &d, 1, NULL, &out, &err);
    }
    double t_decode = now() - t0;
    if (rc) {
        fprintf(stderr, "bench_cpu: %s\n", err.msg);
        iris_engine_close(e);
        return 1;
    }
    double bw = bandwidth_gbs();
    double tok_s = n_gen / t_decode, bound = bw * 1e9 / weight_bytes;
    printf("{\"model\": \"%s\", \"threads\": %d, \"fp8_linears\": %d, \"prompt_tokens\": %d, \"prefill_tok_s\": %.2f, "
           "\"gen_tokens\": %d, \"decode_tok_s\": %.3f, \"weight_bytes_per_token\": %.0f, \"read_bandwidth_gb_s\": %.2f, "
           "\"decode_bound_tok_s\": %.3f, \"fraction_of_bound\": %.3f}\n",
           argv[1], iris_pool_threads(), t->n_fp8, n_prompt, n_prompt / t_prefill, n_gen, tok_s, weight_bytes, bw, bound,
           tok_s / bound);
    iris_engine_close(e);
    free(tok), free(pos), free(bt);
    return 0;
}
