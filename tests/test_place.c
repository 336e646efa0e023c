/* test_place.c: the placement for small cards on the CPU (planner.h --embeddings,
 * --lm-head-dtype; text.h iris_text_embed_host / iris_text_lm_head_fp8): host embeddings give the
 * default's logits bit for bit through the runner (prefill and decode); the FP8 lm_head is the
 * bytes `iris quantize` writes for the same matrix and its logits stay within a stated tolerance
 * of transformers' (tests/fixtures/models/tiny-8b: untied lm_head, as the 8B), greedy equal
 * wherever the reference's top-2 margin is over twice the largest difference; the engine and the
 * CLI take both flags (greedy answers equal). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine/runner.h"
#include "formats/config.h"
#include "formats/safetensors.h"
#include "model/text.h"
#include "test.h"
#include "tiny_fixture.h"
#include "tools/quantize.h"

#define TINY8B "tests/fixtures/models/tiny-8b/model"

/* The text scenario of tiny-8b through the runner on the CPU, placed as asked: every prompt row's
 * logits, then one decode step's, into out [(n + 1), V]; returns n + 1 rows or -1. */
static int run_tiny8b(int host, int fp8, float *out, int cap_rows) {
    iris_err err = {0};
    iris_config cfg;
    iris_st *st = NULL;
    iris_text t;
    iris_backend *cpu = NULL;
    tiny_arr ids, pos;
    if (tiny_load("../models/tiny-8b/text/input_ids.npy", &ids) || tiny_load("../models/tiny-8b/text/position_ids.npy", &pos))
        return -1;
    int n = (int)ids.n, rows = -1;
    if (n + 1 > cap_rows || iris_config_load(TINY8B, &cfg, &err) || iris_st_open(TINY8B, &st, &err)) goto out;
    if (iris_text_load(st, &cfg, &t, &err)) goto out_st;
    if ((host && iris_text_embed_host(&t, &err)) || (fp8 && iris_text_lm_head_fp8(&t, &err)) ||
        iris_backend_cpu_open(&cpu, &err) || iris_text_upload(&t, cpu, &err))
        goto out_t;
    iris_kv_cache kv;
    if (iris_kv_cache_init(&kv, &t.cfg, 4, cpu, &err)) goto out_t;
    int32_t tok[64], p3[3 * 64], bt[4] = {2, 0, 3, 1}, next;
    for (int i = 0; i < n; i++) tok[i] = (int32_t)ids.i64[i];
    for (int i = 0; i < 3 * n; i++) p3[i] = (int32_t)pos.i64[i];
    iris_text_seq q = {.n_new = n, .tokens = tok, .pos = p3, .pos_stride = n, .block_table = bt, .logits_from = 0};
    int V = t.cfg.vocab_size;
    if (!iris_runner_forward(&t, cpu, &kv, &q, 1, out, NULL, NULL, &err)) {
        next = 7;  /* a fixed token: the decode row must not depend on the prefill's argmax */
        int32_t p1[3] = {p3[n - 1] + 1, p3[2 * n - 1] + 1, p3[3 * n - 1] + 1};
        iris_text_seq d = {.n_past = n, .n_new = 1, .tokens = &next, .pos = p1, .pos_stride = 1, .block_table = bt};
        if (!iris_runner_forward(&t, cpu, &kv, &d, 1, out + (size_t)n * V, NULL, NULL, &err)) rows = n + 1;
    }
    iris_kv_cache_free(&kv);
out_t:
    iris_text_free(&t);
out_st:
    iris_st_close(st);
out:
    if (rows < 0) fprintf(stderr, "  tiny-8b: %s\n", err.msg);
    if (cpu) cpu->destroy(cpu);
    tiny_free(&ids), tiny_free(&pos);
    return rows;
}

IRIS_TEST(place_host_embeddings_bit_equal) {
    enum { CAP = 64, V = 512 };
    float *a = malloc(sizeof(float) * CAP * V), *b = malloc(sizeof(float) * CAP * V);
    REQUIRE(a && b);
    int na = run_tiny8b(0, 0, a, CAP), nb = run_tiny8b(1, 0, b, CAP);
    REQUIRE(na > 1 && na == nb);
    CHECK(memcmp(a, b, sizeof(float) * (size_t)na * V) == 0);
    /* with the FP8 lm_head too: the table's place changes nothing */
    int nc = run_tiny8b(0, 1, a, CAP), nd = run_tiny8b(1, 1, b, CAP);
    REQUIRE(nc == na && nd == na);
    CHECK(memcmp(a, b, sizeof(float) * (size_t)na * V) == 0);
    free(a), free(b);
}

/* The FP8 lm_head's logits against transformers' (fp32, BF16 weights) and against the BF16 lm_head
 * on the same CPU: the stated tolerance is 3% of the largest reference logit (FP8 e4m3 keeps 3
 * mantissa bits: a weight's rounding is up to 1/16 of it, averaged down over the 64-wide dot
 * products); greedy equal where the margin allows. */
IRIS_TEST(place_lm_head_fp8_tolerance) {
    enum { CAP = 64, V = 512 };
    float *a = malloc(sizeof(float) * CAP * V), *c = malloc(sizeof(float) * CAP * V);
    REQUIRE(a && c);
    int na = run_tiny8b(0, 0, a, CAP), nc = run_tiny8b(0, 1, c, CAP);
    REQUIRE(na > 1 && nc == na);
    tiny_arr ref;
    REQUIRE(tiny_load("../models/tiny-8b/text/logits.npy", &ref) == 0);
    int n = (int)ref.shape[0];
    REQUIRE(n == na - 1);
    float mx = 0, d_bf16 = 0, d_fp8 = 0, d_ab = 0;
    for (int64_t i = 0; i < (int64_t)n * V; i++) {
        mx = fmaxf(mx, fabsf(ref.f32[i]));
        d_bf16 = fmaxf(d_bf16, fabsf(a[i] - ref.f32[i]));
        d_fp8 = fmaxf(d_fp8, fabsf(c[i] - ref.f32[i]));
    }
    for (int64_t i = 0; i < (int64_t)na * V; i++) d_ab = fmaxf(d_ab, fabsf(a[i] - c[i]));
    int decided = 0, same = tiny_greedy_same(c, ref.f32, n, V, 2 * d_fp8, &decided);
    printf("  tiny-8b, %d rows: against transformers max-abs BF16 lm_head %.3g, FP8 lm_head %.3g (largest logit "
           "%.3g, %.2f%%); FP8 against BF16 %.3g; greedy %d of %d decided rows equal\n",
           n, d_bf16, d_fp8, mx, 100.0 * d_fp8 / mx, d_ab, same, decided);
    CHECK(d_bf16 < 1e-3f);   /* the reference itself holds */
    CHECK(d_fp8 > 0);        /* the lm_head really is another one */
    CHECK(d_fp8 <= 0.03f * mx);
    CHECK_EQ_INT(same, decided);
    tiny_free(&ref);
    free(a), free(c);
}

/* The loader's FP8 copy is the quantizer's: the bytes `iris quantize` writes for a decoder linear
 * equal iris_quantize_fp8_matrix's for the same BF16 matrix (one quantizer, two callers). */
IRIS_TEST(place_fp8_matrix_is_the_quantizers) {
    char out[64];
    snprintf(out, sizeof out, "/tmp/iris-place-q-XXXXXX");
    REQUIRE(mkdtemp(out));
    iris_err err = {0};
    char sub[96];
    snprintf(sub, sizeof sub, "%s/q", out);
    CHECKF(iris_quantize_dir(TINY8B, sub, &err) == 0, "%s", err.msg);
    iris_st *src = NULL, *dst = NULL;
    REQUIRE(iris_st_open(TINY8B, &src, &err) == 0);
    REQUIRE(iris_st_open(sub, &dst, &err) == 0);
    const char *name = "model.language_model.layers.1.mlp.down_proj.weight";
    const iris_st_tensor *w = iris_st_find(src, name), *q = iris_st_find(dst, name),
                         *s = iris_st_find(dst, "model.language_model.layers.1.mlp.down_proj.weight_scale_inv");
    REQUIRE(w && q && s && q->dtype == IRIS_DT_F8_E4M3);
    int64_t rows = w->shape[0], cols = w->shape[1];
    uint8_t *codes = malloc((size_t)(rows * cols));
    float *inv = malloc(s->n_bytes);
    REQUIRE(codes && inv);
    CHECK(iris_quantize_fp8_matrix(name, w->data, w->dtype, rows, cols, codes, inv, &err) == 0);
    CHECK(memcmp(codes, q->data, (size_t)(rows * cols)) == 0);
    CHECK(memcmp(inv, s->data, s->n_bytes) == 0);
    /* a non-finite element is refused with its place */
    float bad[4] = {1, 2, NAN, 4};
    CHECK(iris_quantize_fp8_matrix("x", bad, IRIS_DT_F32, 2, 2, codes, inv, &err) == IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "tensor \"x\": element [1, 0] is not finite");
    free(codes), free(inv);
    iris_st_close(src), iris_st_close(dst);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    CHECK(system(cmd) == 0);
}

/* The flags through the CLI and the engine on the CPU: the greedy answer of the demo model is the
 * same with the table on the host, and an unknown value is a usage error naming the choices. */
IRIS_TEST(place_cli_flags) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    static const char *flags[] = {"", "--embeddings host", "--embeddings host --lm-head-dtype fp8"};
    char *outs[3] = {0};
    for (int i = 0; i < 3; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "%s run models/demo 'Describe a cat.' --device cpu --temperature 0 --max-tokens 12 %s "
                 "2>/dev/null", bin, flags[i]);
        int st = -1;
        outs[i] = iris_test_popen(cmd, &st);
        CHECKF(st == 0 && outs[i] && outs[i][0], "%s: exit %d", flags[i], st);
    }
    if (outs[0] && outs[1]) CHECK(!strcmp(outs[0], outs[1]));
    printf("  demo greedy: '%s' default, '%s' with the FP8 lm_head\n", outs[0] ? strtok(outs[0], "\n") : "",
           outs[2] ? strtok(outs[2], "\n") : "");
    for (int i = 0; i < 3; i++) free(outs[i]);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "%s run models/demo hi --device cpu --embeddings gpu 2>&1", bin);
    int st = 0;
    char *o = iris_test_popen(cmd, &st);
    CHECK(st == 2);
    if (o) CHECK_CONTAINS(o, "--embeddings 'gpu': give one of auto|device|host");
    free(o);
}
