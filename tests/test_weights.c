/* test_weights.c: iris_model_open on the tiny transformers checkpoints
 * (tied and untied heads, BF16 and FP8) and on broken copies of them: a
 * config that disagrees with a tensor's shape, a missing layer, a vision
 * tower that does not match (fatal unless text_only), an fp8 config over
 * BF16 weights, a directory that is not there.  The opened model's decoder
 * reproduces transformers' logits (the views really are the checkpoint's). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/runner.h"
#include "model/weights.h"
#include "test.h"
#include "tiny_fixture.h"

static void model_dir(const char *name, char *dir, size_t n) { snprintf(dir, n, "%s/%s/model", TINY_DIR, name); }

IRIS_TEST(weights_open_tiny) {
    const char *names[] = {"tiny-gqa", "tiny-mqa", "tiny-fp8"};
    for (int i = 0; i < 3; i++) {
        char dir[256];
        model_dir(names[i], dir, sizeof dir);
        iris_model *m = NULL;
        iris_err err = {0};
        int rc = iris_model_open(dir, NULL, &m, &err);
        CHECKF(rc == 0, "%s: %s", names[i], err.msg);
        if (rc) continue;
        const iris_text_config *t = &m->cfg.text_config;
        CHECK(m->has_vision);
        CHECK_EQ_INT(m->lm_head_tied, iris_st_find(m->st, "lm_head.weight") == NULL);
        CHECK_EQ_INT(m->lm_head_tied, m->cfg.tie_word_embeddings);
        /* FP8: the 7 linears of every layer (lm_head stays BF16, modules_to_not_convert) */
        CHECK_EQ_INT(m->n_fp8, m->cfg.quantization_config.fp8 ? 7 * t->num_hidden_layers : 0);
        const iris_text_layer *L = &m->text.layers[t->num_hidden_layers - 1];
        CHECK_EQ_INT((int)L->q_proj.rows, t->num_attention_heads * t->head_dim);
        CHECK_EQ_INT((int)L->k_proj.rows, t->num_key_value_heads * t->head_dim);
        CHECK_EQ_INT((int)L->down_proj.cols, t->intermediate_size);
        CHECK_EQ_INT(L->gate_proj.dtype, m->n_fp8 ? IRIS_DT_F8_E4M3 : IRIS_DT_BF16);
        if (m->n_fp8) CHECK(L->gate_proj.scale != NULL && L->gate_proj.block[0] == 128 && L->gate_proj.block[1] == 128);
        char line[512];
        iris_model_describe(m, line, sizeof line);
        CHECK_CONTAINS(line, m->lm_head_tied ? "lm_head tied" : "lm_head untied");
        CHECK_CONTAINS(line, m->n_fp8 ? "FP8" : "BF16");
        iris_model_close(m);
    }
    iris_model_close(NULL);
}

/* The text scenario through the opened model matches transformers' logits. */
IRIS_TEST(weights_model_runs) {
    char dir[256];
    model_dir("tiny-mqa", dir, sizeof dir);
    iris_model *m = NULL;
    iris_err err = {0};
    iris_model_opts o = {.text_only = 1};
    REQUIRE(iris_model_open(dir, &o, &m, &err) == 0);
    CHECK(!m->has_vision);
    tiny_arr ids, pos, ref;
    REQUIRE(tiny_load("inputs/text/input_ids.npy", &ids) == 0);
    REQUIRE(tiny_load("inputs/text/position_ids.npy", &pos) == 0);
    REQUIRE(tiny_load("tiny-mqa/text/logits.npy", &ref) == 0);
    int n = (int)ids.n, V = m->cfg.text_config.vocab_size;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *p3 = malloc(sizeof(int32_t) * 3 * (size_t)n), bt[8];
    for (int i = 0; i < n; i++) tok[i] = (int32_t)ids.i64[i];
    for (int i = 0; i < 3 * n; i++) p3[i] = (int32_t)pos.i64[i];
    for (int b = 0; b < 8; b++) bt[b] = 7 - b; /* blocks out of order on purpose */
    iris_backend *be = NULL;
    REQUIRE(iris_backend_cpu_open(&be, &err) == 0);
    iris_kv_cache kv;
    REQUIRE(iris_kv_cache_init(&kv, &m->cfg.text_config, 8, be, &err) == 0);
    iris_text_seq q = {.n_new = n, .tokens = tok, .pos = p3, .pos_stride = n, .block_table = bt, .logits_from = 0};
    float *logits = malloc(sizeof(float) * (size_t)n * V);
    int rc = iris_runner_forward(&m->text, be, &kv, &q, 1, logits, NULL, NULL, &err);
    CHECKF(rc == 0, "%s", err.msg);
    float d = 0;
    for (int64_t i = 0; rc == 0 && i < (int64_t)n * V; i++) {
        float e = fabsf(logits[i] - ref.f32[i]);
        if (!(e <= d)) d = isnan(e) ? INFINITY : e;
    }
    CHECKF(rc == 0 && d <= 1e-3f, "max abs logits diff %g vs transformers", d);
    free(logits), free(tok), free(p3);
    iris_kv_cache_free(&kv);
    be->destroy(be);
    tiny_free(&ids), tiny_free(&pos), tiny_free(&ref);
    iris_model_close(m);
}

/* A temporary copy of tiny model `name`: the safetensors linked, config.json
 * rewritten by `edit`.  Returns 0 and the directory in dir. */
static int broken_copy(const char *name, void (*edit)(json_t *cfg), char *dir, size_t n) {
    char src[512], path[512], target[512];
    snprintf(dir, n, "/tmp/iris-test-weights-%d-XXXXXX", (int)getpid());
    if (!mkdtemp(dir)) return -1;
    model_dir(name, src, sizeof src);
    json_t *cfg = NULL;
    snprintf(path, sizeof path, "%s/config.json", src);
    cfg = json_load_file(path, 0, NULL);
    if (!cfg) return -1;
    edit(cfg);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = json_dump_file(cfg, path, JSON_INDENT(1));
    json_decref(cfg);
    if (rc) return -1;
    char cwd[512];
    if (!getcwd(cwd, sizeof cwd)) return -1;
    /* the weights and the tokenizer beside them (a model directory holds both: weights.h) */
    static const char *files[] = {"model.safetensors", "tokenizer.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(target, sizeof target, "%s/%s/%s", cwd, src, files[i]);
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (symlink(target, path)) return -1;
    }
    return 0;
}

static void remove_copy(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    rmdir(dir);
}

static void set_text_int(json_t *cfg, const char *key, int delta) {
    json_t *t = json_object_get(cfg, "text_config");
    json_object_set_new(t, key, json_integer(json_integer_value(json_object_get(t, key)) + delta));
}
static void wider_mlp(json_t *cfg) { set_text_int(cfg, "intermediate_size", 32); }
static void more_layers(json_t *cfg) { set_text_int(cfg, "num_hidden_layers", 1); }
static void deeper_vision(json_t *cfg) {
    json_t *v = json_object_get(cfg, "vision_config");
    json_object_set_new(v, "depth", json_integer(json_integer_value(json_object_get(v, "depth")) + 1));
}
static void claims_fp8(json_t *cfg) {
    json_t *q = json_pack("{s:s, s:s, s:[i,i]}", "quant_method", "fp8", "fmt", "e4m3", "weight_block_size", 128, 128);
    json_object_set_new(cfg, "quantization_config", q);
}

IRIS_TEST(weights_bad_checkpoints) {
    char dir[256];
    iris_model *m = (iris_model *)1;
    iris_err err = {0};

    CHECK(iris_model_open("/nonexistent/iris-model", NULL, &m, &err) < 0);
    CHECK(m == NULL);
    CHECK_CONTAINS(err.msg, "/nonexistent/iris-model");

    /* a shape that disagrees with config.json: the tensor and both shapes */
    REQUIRE(broken_copy("tiny-gqa", wider_mlp, dir, sizeof dir) == 0);
    err = (iris_err){0};
    CHECK_EQ_INT(iris_model_open(dir, NULL, &m, &err), IRIS_EFORMAT);
    CHECK(m == NULL);
    CHECK_CONTAINS(err.msg, dir);
    CHECK_CONTAINS(err.msg, "model.language_model.layers.0.mlp.gate_proj.weight");
    CHECK_CONTAINS(err.msg, "[128, 64]");
    CHECK_CONTAINS(err.msg, "[160, 64]");
    remove_copy(dir);

    /* a layer the checkpoint does not have */
    REQUIRE(broken_copy("tiny-gqa", more_layers, dir, sizeof dir) == 0);
    err = (iris_err){0};
    CHECK_EQ_INT(iris_model_open(dir, NULL, &m, &err), IRIS_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "model.language_model.layers.3.");
    remove_copy(dir);

    /* the vision tower only matters when it is loaded */
    REQUIRE(broken_copy("tiny-mqa", deeper_vision, dir, sizeof dir) == 0);
    err = (iris_err){0};
    CHECK_EQ_INT(iris_model_open(dir, NULL, &m, &err), IRIS_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "model.visual.blocks.");
    iris_model_opts o = {.text_only = 1};
    err = (iris_err){0};
    CHECKF(iris_model_open(dir, &o, &m, &err) == 0, "%s", err.msg);
    iris_model_close(m);
    remove_copy(dir);

    /* fp8 declared over BF16 weights */
    REQUIRE(broken_copy("tiny-mqa", claims_fp8, dir, sizeof dir) == 0);
    err = (iris_err){0};
    CHECK_EQ_INT(iris_model_open(dir, NULL, &m, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "fp8");
    remove_copy(dir);
}
