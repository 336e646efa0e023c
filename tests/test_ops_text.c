/* test_ops_text.c: the text decoder (model/text.c) on the CUDA backend, end
 * to end on the tiny fixtures (tools/make_tiny_models.py), part of
 * build/iris-test-gpu.
 *
 * References: transformers run in fp32 (logits.npy), transformers run in
 * bf16 (logits_bf16.npy, tiny-gqa), and our CPU backend.  The tolerance comes
 * from the data: transformers' own bf16 run lies d_ref = max|bf16 - fp32|
 * from the fp32 logits; ours, also computed in bf16 with fp32 accumulation
 * but rounding at other places, must lie within 2·d_ref of the fp32 logits
 * and of the bf16 logits.  Models without a bf16 reference use the largest
 * relative distance seen on tiny-gqa (d_ref / max|logit|) times their own
 * max|logit| (bf16 rounding scales with the values; tiny-fp8's logits are
 * about 1.4 times tiny-gqa's).
 * Greedy tokens must equal the reference's wherever its top-2 margin exceeds
 * 2·(d_ref + our distance), i.e. where no bf16 rounding can swap them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "err.h"
#include "formats/config.h"
#include "formats/safetensors.h"
#include "model/text.h"
#include "engine/runner.h"
#include "ops_util.h"
#include "test.h"
#include "tiny_fixture.h"

/* Tiny fixture `name` loaded with the placement of planner.h (host: the table stays in host
 * memory; fp8: the lm_head quantized at load), uploaded to b. */
static void load_tiny_placed(const char *name, iris_backend *b, int host, int fp8, iris_st **st, iris_text *t) {
    char dir[256];
    iris_config cfg;
    iris_err err = {0};
    snprintf(dir, sizeof dir, "%s/%s/model", TINY_DIR, name);
    REQUIRE(iris_config_load(dir, &cfg, &err) == 0);
    REQUIRE(iris_st_open(dir, st, &err) == 0);
    REQUIRE(iris_text_load(*st, &cfg, t, &err) == 0);
    if (host) REQUIRE(iris_text_embed_host(t, &err) == 0);
    if (fp8) REQUIRE(iris_text_lm_head_fp8(t, &err) == 0);
    REQUIRE(iris_text_upload(t, b, &err) == 0);
}

#ifdef IRIS_CUDA
#include "backend/cuda/cuda_testing.h"

static float max_abs_diff(const float *a, const float *b, int64_t n) {
    float d = 0;
    for (int64_t i = 0; i < n; i++) {
        float e = fabsf(a[i] - b[i]);
        if (!(e <= d)) d = isnan(e) ? INFINITY : e;
    }
    return d;
}

/* Logits of every position of a scenario, on backend b (weights uploaded there). */
/* bf16: the image rows go in as bf16 bits (image_embeds16, rounded to nearest even as the backend's
 * put_f32 rounds fp32 rows), the engine's form on the GPU. */
static int run_scenario(iris_text *t, iris_backend *b, const char *model, const char *s, float *logits, int *n_out,
                        int bf16) {
    char p[256];
    tiny_arr ids, pos, emb = {0}, ds = {0};
    snprintf(p, sizeof p, "inputs/%s/input_ids.npy", s);
    if (tiny_load(p, &ids)) return -1;
    snprintf(p, sizeof p, "inputs/%s/position_ids.npy", s);
    if (tiny_load(p, &pos)) return -1;
    snprintf(p, sizeof p, "%s/%s/image_embeds.npy", model, s);
    if (tiny_exists(p)) {
        if (tiny_load(p, &emb)) return -1;
        snprintf(p, sizeof p, "%s/%s/deepstack.npy", model, s);
        if (tiny_load(p, &ds)) return -1;
    }
    int n = (int)ids.n;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *pos3 = malloc(sizeof(int32_t) * 3 * (size_t)n), bt[64];
    for (int i = 0; i < n; i++) tok[i] = (int32_t)ids.i64[i];
    for (int i = 0; i < 3 * n; i++) pos3[i] = (int32_t)pos.i64[i];
    for (int i = 0; i < 64; i++) bt[i] = 63 - i; /* blocks in reverse: the paging must be followed */
    iris_text_seq q = {0};
    q.n_new = n, q.tokens = tok, q.pos = pos3, q.pos_stride = n, q.block_table = bt, q.logits_from = 0;
    uint16_t *e16 = NULL, *d16 = NULL;
    if (emb.f32) {
        q.image_embeds = emb.f32;
        q.n_deepstack = (int)ds.shape[0];
        for (int d = 0; d < q.n_deepstack; d++) q.deepstack[d] = ds.f32 + (size_t)d * emb.shape[0] * emb.shape[1];
        if (bf16) {
            e16 = malloc(sizeof(uint16_t) * emb.n), d16 = malloc(sizeof(uint16_t) * (ds.n ? ds.n : 1));
            for (int64_t i = 0; i < (int64_t)emb.n; i++) e16[i] = ops_bf16_bits(emb.f32[i]);
            for (int64_t i = 0; i < (int64_t)ds.n; i++) d16[i] = ops_bf16_bits(ds.f32[i]);
            q.image_embeds = NULL, q.image_embeds16 = e16;
            for (int d = 0; d < q.n_deepstack; d++)
                q.deepstack[d] = NULL, q.deepstack16[d] = d16 + (size_t)d * emb.shape[0] * emb.shape[1];
        }
    }
    iris_kv_cache kv;
    iris_err err = {0};
    int rc = iris_kv_cache_init(&kv, &t->cfg, 64, b, &err);
    if (!rc) rc = iris_runner_forward(t, b, &kv, &q, 1, logits, NULL, NULL, &err);
    if (rc) fprintf(stderr, "  %s/%s on %s: %s\n", model, s, b->name, err.msg);
    iris_kv_cache_free(&kv);
    free(tok), free(pos3), free(e16), free(d16);
    tiny_free(&ids), tiny_free(&pos), tiny_free(&emb), tiny_free(&ds);
    *n_out = n;
    return rc;
}

IRIS_TEST(gpu_text_tiny_fixtures) {
    OPS_NEED_GPU();
    /* the fourth pass: tiny-fp8 with BF16 copies of its linears (densify), which prefill chunks of
     * more than 16 rows read (the image, two_images and multi_turn scenarios) */
    static const char *models[] = {"tiny-gqa", "tiny-mqa", "tiny-fp8", "tiny-fp8"};
    static const char *labels[] = {"tiny-gqa", "tiny-mqa", "tiny-fp8", "tiny-fp8 dense"};
    static const char *scen[] = {"text", "image", "two_images", "multi_turn"};
    iris_err err = {0};
    iris_backend *gpu = NULL, *cpu = NULL;
    REQUIRE(iris_backend_cuda_open(0, (size_t)512 << 20, &gpu, &err) == 0);
    REQUIRE(iris_backend_cpu_open(&cpu, &err) == 0);
    float d_rel_max = 0;
    for (int mi = 0; mi < 4; mi++) {
        char dir[256];
        snprintf(dir, sizeof dir, "%s/%s/model", TINY_DIR, models[mi]);
        iris_config cfg;
        iris_st *st = NULL;
        iris_text tg, tc;
        REQUIRE(iris_config_load(dir, &cfg, &err) == 0);
        REQUIRE(iris_st_open(dir, &st, &err) == 0);
        REQUIRE(iris_text_load(st, &cfg, &tg, &err) == 0);
        REQUIRE(iris_text_load(st, &cfg, &tc, &err) == 0);
        int rc = iris_text_upload(&tg, gpu, &err);
        CHECKF(rc == 0, "%s: upload: %s", models[mi], err.msg);
        if (!rc && mi == 3) {
            rc = iris_text_densify(&tg, gpu, &err);
            CHECKF(rc == 0 && tg.layers[0].q_proj.dense && tg.layers[0].down_proj.dense, "%s: densify: %s", labels[mi],
                   err.msg);
        }
        int V = tg.cfg.vocab_size;
        for (int si = 0; rc == 0 && si < 4; si++) {
            char p[256];
            tiny_arr ref, ref16 = {0};
            snprintf(p, sizeof p, "%s/%s/logits.npy", models[mi], scen[si]);
            REQUIRE(tiny_load(p, &ref) == 0);
            snprintf(p, sizeof p, "%s/%s/logits_bf16.npy", models[mi], scen[si]);
            int has16 = tiny_exists(p) && tiny_load(p, &ref16) == 0;
            int n = (int)ref.shape[0] * (ref.ndim == 3 ? (int)ref.shape[1] : 1);
            if (ref.ndim == 2) n = (int)ref.shape[0];
            float *lg = malloc(sizeof(float) * (size_t)ref.n), *lc = malloc(sizeof(float) * (size_t)ref.n);
            int ng = 0, nc = 0;
            int rg = run_scenario(&tg, gpu, models[mi], scen[si], lg, &ng, 0);
            int rcpu = run_scenario(&tc, cpu, models[mi], scen[si], lc, &nc, 0);
            if (rg == 0) {
                /* image rows as bf16 bits (uploaded as they are): the same logits, bit for bit */
                float *l16 = malloc(sizeof(float) * (size_t)ref.n);
                int n16 = 0;
                CHECK(run_scenario(&tg, gpu, models[mi], scen[si], l16, &n16, 1) == 0);
                CHECKF(n16 == ng && max_abs_diff(l16, lg, (int64_t)ng * tg.cfg.vocab_size) == 0,
                       "%s/%s: bf16 image rows give other logits", labels[mi], scen[si]);
                free(l16);
            }
            CHECKF(rg == 0 && rcpu == 0, "%s/%s: forward failed", labels[mi], scen[si]);
            if (rg == 0 && rcpu == 0) {
                n = ng;
                int64_t cnt = (int64_t)n * V;
                float ref_max = 0;
                for (int64_t i = 0; i < cnt; i++) ref_max = fabsf(ref.f32[i]) > ref_max ? fabsf(ref.f32[i]) : ref_max;
                float d_ref = has16 ? max_abs_diff(ref16.f32, ref.f32, cnt) : d_rel_max * ref_max;
                if (has16 && ref_max > 0 && d_ref / ref_max > d_rel_max) d_rel_max = d_ref / ref_max;
                float d32 = max_abs_diff(lg, ref.f32, cnt), dcpu = max_abs_diff(lg, lc, cnt);
                float d16 = has16 ? max_abs_diff(lg, ref16.f32, cnt) : NAN;
                /* greedy agreement where the fp32 reference's margin is safe */
                int safe = 0, agree = 0;
                for (int r = 0; r < n; r++) {
                    const float *a = ref.f32 + (size_t)r * V, *g = lg + (size_t)r * V;
                    int best = 0, gb = 0;
                    for (int v = 1; v < V; v++) {
                        if (a[v] > a[best]) best = v;
                        if (g[v] > g[gb]) gb = v;
                    }
                    float second = -INFINITY;
                    for (int v = 0; v < V; v++)
                        if (v != best && a[v] > second) second = a[v];
                    if (a[best] - second > 2 * (d_ref + d32)) {
                        safe++;
                        agree += gb == best;
                    }
                }
                printf("  %s/%s: %d tokens; cuda vs fp32 %.3g, vs bf16 %.3g, vs cpu %.3g; transformers bf16 vs fp32 %.3g;"
                       " greedy %d/%d\n",
                       labels[mi], scen[si], n, d32, d16, dcpu, d_ref, agree, safe);
                CHECKF(d_ref > 0, "%s/%s: no bf16 reference distance to scale the tolerance", labels[mi], scen[si]);
                CHECKF(d32 <= 2 * d_ref, "%s/%s: cuda vs transformers fp32 %g > 2 x %g", labels[mi], scen[si], d32, d_ref);
                CHECKF(dcpu <= 2 * d_ref + 1e-3f, "%s/%s: cuda vs cpu %g", labels[mi], scen[si], dcpu);
                if (has16) CHECKF(d16 <= 2 * d_ref, "%s/%s: cuda vs transformers bf16 %g > 2 x %g", labels[mi], scen[si], d16, d_ref);
                CHECKF(agree == safe, "%s/%s: greedy token differs at %d of %d safe positions", labels[mi], scen[si],
                       safe - agree, safe);
            }
            free(lg), free(lc);
            tiny_free(&ref), tiny_free(&ref16);
        }
        iris_text_free(&tg), iris_text_free(&tc);
        iris_st_close(st);
    }
    gpu->destroy(gpu);
    cpu->destroy(cpu);
}
/* Decode steps of `ns` sequences (the text scenario's prompt, each sequence in its own blocks,
 * prefilled once), then `steps` greedy decode steps; the logits of every step into out
 * [steps][ns][V], through one runner (graphs: the decode steps may replay graphs); *n_graphs: the
 * graphs the runner kept.  decode_run_shrink: a runner for max_seqs sequences, and from step g
 * only the first max(1, ns - g / shrink) sequences step (their rows of out; the rest stay 0). */
static int decode_run_shrink(iris_text *t, iris_backend *b, int ns, int steps, int graphs, float *out, int *n_graphs,
                             int max_seqs, int shrink);
static int decode_run(iris_text *t, iris_backend *b, int ns, int steps, int graphs, float *out, int *n_graphs) {
    return decode_run_shrink(t, b, ns, steps, graphs, out, n_graphs, ns, 0);
}
static int decode_run_shrink(iris_text *t, iris_backend *b, int ns, int steps, int graphs, float *out, int *n_graphs,
                             int max_seqs, int shrink) {
    tiny_arr ids, pos;
    if (tiny_load("inputs/text/input_ids.npy", &ids) || tiny_load("inputs/text/position_ids.npy", &pos)) return -1;
    int n = (int)ids.n, V = t->cfg.vocab_size, per = (n + steps + IRIS_KV_BLOCK - 1) / IRIS_KV_BLOCK;
    iris_kv_cache kv;
    iris_err err = {0};
    int rc = iris_kv_cache_init(&kv, &t->cfg, ns * per, b, &err);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(n + steps) * ns), *pos3 = malloc(sizeof(int32_t) * 3 * (size_t)n);
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)ns * per), *p1 = malloc(sizeof(int32_t) * 3 * (size_t)ns);
    float *lg = malloc(sizeof(float) * (size_t)ns * V);
    iris_text_seq *q = calloc((size_t)ns, sizeof *q);
    for (int i = 0; i < 3 * n; i++) pos3[i] = (int32_t)pos.i64[i];
    int maxpos = 0;
    for (int i = 0; i < 3 * n; i++) maxpos = pos3[i] > maxpos ? pos3[i] : maxpos;
    for (int s = 0; s < ns; s++) {
        for (int j = 0; j < per; j++) bt[s * per + j] = (ns - 1 - s) * per + j;   /* sequences in reverse block order */
        for (int i = 0; i < n; i++) tok[s * (n + steps) + i] = (int32_t)ids.i64[i];
    }
    /* prefill every sequence (plain steps), then decode all together */
    for (int s = 0; !rc && s < ns; s++) {
        iris_text_seq pq = {.n_new = n, .tokens = tok + s * (n + steps), .pos = pos3, .pos_stride = n,
                            .block_table = bt + s * per, .logits_from = n - 1};
        rc = iris_runner_forward(t, b, &kv, &pq, 1, lg + (size_t)s * V, NULL, NULL, &err);
    }
    iris_runner *run = NULL;
    iris_runner_limits lim = {.max_rows = max_seqs, .max_seqs = max_seqs, .max_context = n + steps, .no_graphs = !graphs};
    if (!rc) rc = iris_runner_open(t, b, &kv, &lim, &run, &err);
    memset(out, 0, sizeof(float) * (size_t)steps * ns * V);
    for (int g = 0; !rc && g < steps; g++) {
        int act = shrink ? (ns - g / shrink > 1 ? ns - g / shrink : 1) : ns;
        for (int s = 0; s < act; s++) {
            const float *l = lg + (size_t)s * V;
            int best = 0;
            for (int v = 1; v < V; v++) best = l[v] > l[best] ? v : best;
            tok[s * (n + steps) + n + g] = best + s < V ? best + s : best;   /* the sequences part ways */
            p1[3 * s] = p1[3 * s + 1] = p1[3 * s + 2] = maxpos + 1 + g;
            q[s] = (iris_text_seq){.n_past = n + g, .n_new = 1, .tokens = tok + s * (n + steps) + n + g,
                                   .pos = p1 + 3 * s, .pos_stride = 1, .block_table = bt + s * per, .logits_from = 0};
        }
        iris_runner_out o;
        rc = iris_runner_step(run, q, act, NULL, &o, &err);
        if (!rc && o.n_rows != act) rc = iris_err_set(&err, IRIS_EINVAL, "%d logits rows for %d sequences", o.n_rows, act);
        if (!rc) memcpy(lg, o.logits, sizeof(float) * (size_t)act * V);
        if (!rc) memcpy(out + (size_t)g * ns * V, lg, sizeof(float) * (size_t)act * V);
    }
    if (n_graphs) *n_graphs = iris_runner_n_graphs(run);
    iris_runner_close(run);
    if (rc) fprintf(stderr, "  decode_run: %s\n", err.msg);
    iris_kv_cache_free(&kv);
    free(tok), free(pos3), free(bt), free(p1), free(lg), free(q);
    tiny_free(&ids), tiny_free(&pos);
    return rc;
}


/* Decode steps replayed from CUDA graphs give the same logits, bit for bit, as the same steps run
 * op by op (same kernels, same order, same buffers' contents), across block boundaries and with
 * 1 and 3 sequences; and the graphs are really used (the cache holds them). */
IRIS_TEST(gpu_text_decode_graphs) {
    OPS_NEED_GPU();
    iris_err err = {0};
    iris_backend *gpu = NULL;
    REQUIRE(iris_backend_cuda_open(0, (size_t)512 << 20, &gpu, &err) == 0);
    static const char *models[] = {"tiny-gqa", "tiny-fp8"};
    for (int mi = 0; mi < 2; mi++) {
        iris_st *st = NULL;
        iris_text t;
        load_tiny_placed(models[mi], gpu, 0, 0, &st, &t);
        int V = t.cfg.vocab_size, steps = 40;
        for (int ns = 1; ns <= 3; ns += 2) {
            float *a = malloc(sizeof(float) * (size_t)steps * ns * V), *g = malloc(sizeof(float) * (size_t)steps * ns * V);
            int na = -1, ng = -1;
            int ra = decode_run(&t, gpu, ns, steps, 0, a, &na);
            CHECK(na == 0);
            int rg = decode_run(&t, gpu, ns, steps, 1, g, &ng);
            CHECKF(ra == 0 && rg == 0, "%s: decode failed", models[mi]);
            CHECKF(ng > 0, "%s: no graph was recorded", models[mi]);
            int64_t diff = 0;
            for (int64_t i = 0; i < (int64_t)steps * ns * V; i++) diff += a[i] != g[i];
            printf("  %s, %d sequence(s), %d decode steps: %lld of %lld logits differ with graphs\n", models[mi], ns, steps,
                   (long long)diff, (long long)steps * ns * V);
            CHECK(diff == 0);
            free(a), free(g);
        }
        iris_text_free(&t);
        iris_st_close(st);
    }
    gpu->destroy(gpu);
}
/* A batch that shrinks one sequence at a time (8 down to 1, a runner for 8) replays graphs padded
 * to the plan's batch sizes (8, 4, 2, 1: four graphs, where a graph a size would be eight; a batch
 * of a size in the list is not padded, or 4, 2 and 1 would take 8, 4 and 2: three), and each
 * sequence's logits agree with the same steps op by op within bf16 noise (1e-2 of the largest: a
 * padded step's products may take other kernels), with the same greedy token wherever the top-2
 * margin exceeds twice the distance. */
IRIS_TEST(gpu_text_decode_graphs_padded) {
    OPS_NEED_GPU();
    iris_err err = {0};
    iris_backend *gpu = NULL;
    REQUIRE(iris_backend_cuda_open(0, (size_t)512 << 20, &gpu, &err) == 0);
    static const char *models[] = {"tiny-gqa", "tiny-fp8"};
    for (int mi = 0; mi < 2; mi++) {
        iris_st *st = NULL;
        iris_text t;
        load_tiny_placed(models[mi], gpu, 0, 0, &st, &t);
        const int V = t.cfg.vocab_size, steps = 40, ns = 8;
        size_t n = (size_t)steps * ns * V;
        float *a = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n);
        int na = -1, ng = -1;
        int ra = decode_run_shrink(&t, gpu, ns, steps, 0, a, &na, 8, 5);
        int rg = decode_run_shrink(&t, gpu, ns, steps, 1, g, &ng, 8, 5);
        CHECKF(ra == 0 && rg == 0, "%s: decode failed", models[mi]);
        CHECKF(ng == 4, "%s: %d graphs kept for batches of 8 down to 1 (want 4: 8, 4, 2, 1)", models[mi], ng);
        float dmax = max_abs_diff(a, g, (int64_t)n), big = 0;
        for (size_t i = 0; i < n; i++) big = fabsf(a[i]) > big ? fabsf(a[i]) : big;
        /* (a sequence that no longer steps has rows of zeros: no margin, not decided) */
        int tokens = 0, same = tiny_greedy_same(g, a, steps * ns, V, 2 * dmax, &tokens);
        printf("  %s: %d graphs; logits max-abs %.3g of %.3g (%s); greedy %d/%d\n", models[mi], ng, dmax, big,
               dmax == 0 ? "same bits" : "other bits", same, tokens);
        CHECK(dmax <= 1e-2f * big);
        CHECK(tokens > 0 && same == tokens);
        free(a), free(g);
        iris_text_free(&t);
        iris_st_close(st);
    }
    gpu->destroy(gpu);
}
/* Decode steps through the persistent decode kernel (backend.h decode_layers, on tiny-fp8: FP8
 * layers of 128 columns) against the same steps op by op: it ran on every step, the logits agree
 * within bf16 noise (1e-2 of the largest; the two sum the products in other orders), and each
 * step's greedy token is the same wherever the ops' top-2 margin exceeds twice the distance. */
IRIS_TEST(gpu_text_decode_stack) {
    OPS_NEED_GPU();
    iris_err err = {0};
    iris_backend *gpu = NULL;
    REQUIRE(iris_backend_cuda_open(0, (size_t)512 << 20, &gpu, &err) == 0);
    iris_st *st = NULL;
    iris_text t;
    if (iris_cuda_set_decode_stack(gpu, 1)) {
        gpu->destroy(gpu);
        IRIS_TEST_SKIP("the kernels were built without sm_90 code (JIT from older PTX): no persistent decode kernel");
    }
    load_tiny_placed("tiny-fp8", gpu, 0, 0, &st, &t);
    int V = t.cfg.vocab_size, steps = 40;
    for (int ns = 1; ns <= 4; ns += 3) {
        size_t n = (size_t)steps * ns * V;
        float *a = malloc(sizeof(float) * n), *s = malloc(sizeof(float) * n);
        iris_cuda_set_decode_stack(gpu, 0);
        int ra = decode_run(&t, gpu, ns, steps, 1, a, NULL);
        iris_cuda_set_decode_stack(gpu, 1);
        int before = iris_cuda_decode_stack_runs(gpu);
        /* no graphs: every step launches it (a graph would replay one launch) */
        int rs = decode_run(&t, gpu, ns, steps, 0, s, NULL);
        REQUIRE(ra == 0 && rs == 0);
        int runs = iris_cuda_decode_stack_runs(gpu) - before;
        CHECKF(runs == steps, "tiny-fp8, %d sequence(s): the persistent kernel ran %d times in %d steps", ns, runs, steps);
        float d = max_abs_diff(a, s, (int64_t)n), top = 0;
        for (size_t i = 0; i < n; i++) top = fabsf(a[i]) > top ? fabsf(a[i]) : top;
        int decided = 0, same = tiny_greedy_same(s, a, steps * ns, V, 2 * d, &decided);
        printf("  tiny-fp8, %d sequence(s), %d decode steps: max|d| %.3g of max|logit| %.3g; greedy tokens equal on "
               "%d of %d decided rows\n", ns, steps, d, top, same, decided);
        CHECK(d <= 1e-2f * top);
        CHECK(same == decided && decided > 0);
        free(a), free(s);
    }
    iris_text_free(&t);
    iris_st_close(st);
    gpu->destroy(gpu);
}
#endif


/* --embeddings host on CUDA: decode steps (graphs replayed, the rows uploaded before each) give
 * the logits of the device lookup bit for bit, with 1 and 3 sequences; --lm-head-dtype fp8 on
 * CUDA (the FP8 linear over 151,936-row-like shapes of the fixture) against the CPU's FP8
 * lm_head on the same decode: within 2e-2 of the largest logit, as the FP8 layers' tests. */
IRIS_TEST(gpu_text_placement) {
    OPS_NEED_GPU();
    iris_err err = {0};
    iris_backend *gpu = NULL, *cpu = NULL;
    REQUIRE(iris_backend_cuda_open(0, (size_t)512 << 20, &gpu, &err) == 0);
    REQUIRE(iris_backend_cpu_open(&cpu, &err) == 0);
    static const char *models[] = {"tiny-gqa", "tiny-fp8"};
    for (int mi = 0; mi < 2; mi++) {
        iris_st *sa = NULL, *sb = NULL, *sc = NULL, *sd = NULL;
        iris_text ta, tb, tc, td;
        load_tiny_placed(models[mi], gpu, 0, 0, &sa, &ta);
        load_tiny_placed(models[mi], gpu, 1, 0, &sb, &tb);
        load_tiny_placed(models[mi], gpu, 1, 1, &sc, &tc);
        load_tiny_placed(models[mi], cpu, 1, 1, &sd, &td);
        int V = ta.cfg.vocab_size, steps = 12;
        for (int ns = 1; ns <= 3; ns += 2) {
            size_t n = (size_t)steps * ns * V;
            float *a = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n);
            int na = -1, ng = -1;
            int ra = decode_run(&ta, gpu, ns, steps, 1, a, &na), rg = decode_run(&tb, gpu, ns, steps, 1, g, &ng);
            CHECKF(ra == 0 && rg == 0, "%s: decode failed", models[mi]);
            CHECKF(ng > 0, "%s: no graph was recorded with host embeddings", models[mi]);
            int64_t diff = 0;
            for (size_t i = 0; i < n; i++) diff += a[i] != g[i];
            printf("  %s, %d sequence(s), host embeddings: %lld of %zu logits differ from the device table's\n",
                   models[mi], ns, (long long)diff, n);
            CHECK(diff == 0);
            free(a), free(g);
        }
        float *c = malloc(sizeof(float) * (size_t)V), *d = malloc(sizeof(float) * (size_t)V);
        int rc = decode_run(&tc, gpu, 1, 1, 1, c, NULL), rd = decode_run(&td, cpu, 1, 1, 0, d, NULL);
        CHECKF(rc == 0 && rd == 0, "%s: fp8 lm_head decode failed", models[mi]);
        float mx = 0, dm = 0;
        for (int v = 0; v < V; v++) {
            mx = fabsf(d[v]) > mx ? fabsf(d[v]) : mx;
            dm = fabsf(c[v] - d[v]) > dm ? fabsf(c[v] - d[v]) : dm;
        }
        printf("  %s, FP8 lm_head: CUDA against the CPU max-abs %.3g (largest logit %.3g)\n", models[mi], dm, mx);
        CHECK(tc.lm_head.dtype == IRIS_DT_F8_E4M3 && !tc.lm_head_q);
        CHECK(dm <= 2e-2f * mx);
        free(c), free(d);
        iris_text_free(&ta), iris_text_free(&tb), iris_text_free(&tc), iris_text_free(&td);
        iris_st_close(sa), iris_st_close(sb), iris_st_close(sc), iris_st_close(sd);
    }
    cpu->destroy(cpu);
    gpu->destroy(gpu);
}
