/* test_place_ignore.c: compressed-tensors' `ignore` list (config.h iris_quant_ignores): a 4-bit
 * checkpoint whose config leaves layer 0's down_proj unquantized, written here from tiny-8b
 * (iris quantize --int4, then that one linear put back in BF16 with the safetensors writer),
 * loads it in its stored dtype and computes with it; a config that names a packed linear is
 * refused naming it; names and "re:" patterns match as compressed-tensors matches them. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine/runner.h"
#include "formats/config.h"
#include "formats/safetensors.h"
#include "formats/st_write.h"
#include "model/text.h"
#include "test.h"
#include "tiny_fixture.h"
#include "tools/quantize.h"

#define TINY8B "tests/fixtures/models/tiny-8b/model"
#define DOWN0 "model.language_model.layers.0.mlp.down_proj"

/* config.json of `from` with quantization_config.ignore = `ignore` (JSON text) into `to`. */
static int write_config(const char *from, const char *to, const char *ignore) {
    char p[300];
    snprintf(p, sizeof p, "%s/config.json", from);
    json_t *c = json_load_file(p, 0, NULL), *ig = json_loads(ignore, 0, NULL);
    if (!c || !ig) return -1;
    json_object_set_new(json_object_get(c, "quantization_config"), "ignore", ig);
    snprintf(p, sizeof p, "%s/config.json", to);
    int rc = json_dump_file(c, p, JSON_INDENT(1));
    json_decref(c);
    return rc;
}

/* The int4 checkpoint q4 with DOWN0 back in BF16 (from the source) into dir/model.safetensors. */
static int write_mixed(const char *q4, const char *dir, iris_err *err) {
    iris_st *a = NULL, *src = NULL;
    iris_st_writer *w = NULL;
    const void *data[2048];
    size_t bytes[2048];
    char p[300];
    int rc = iris_st_open(q4, &a, err);
    if (!rc) rc = iris_st_open(TINY8B, &src, err);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (!rc) rc = iris_st_writer_open(p, &w, err);
    for (int i = 0; !rc && i < iris_st_count(a); i++) {
        const iris_st_tensor *t = iris_st_at(a, i);
        if (!strncmp(t->name, DOWN0 ".", strlen(DOWN0) + 1)) continue;
        int idx = iris_st_writer_add(w, t->name, t->dtype, t->n_dims, t->shape, err);
        if (idx < 0 || idx >= 2048) rc = idx < 0 ? idx : -1;
        else data[idx] = t->data, bytes[idx] = (size_t)t->n_bytes;
    }
    const iris_st_tensor *d = rc ? NULL : iris_st_find(src, DOWN0 ".weight");
    if (!rc && d) {
        int idx = iris_st_writer_add(w, d->name, d->dtype, d->n_dims, d->shape, err);
        if (idx < 0) rc = idx;
        else data[idx] = d->data, bytes[idx] = (size_t)d->n_bytes;
    }
    if (!rc) rc = iris_st_writer_begin(w, err);
    for (int i; !rc && (i = iris_st_writer_next(w)) >= 0;) rc = iris_st_writer_write(w, data[i], bytes[i], err);
    if (!rc) rc = iris_st_writer_finish(w, err);
    iris_st_writer_close(w);
    iris_st_close(a), iris_st_close(src);
    return rc;
}

static int load_text(const char *dir, iris_st **st, iris_text *t, iris_err *err) {
    iris_config cfg;
    int rc = iris_config_load(dir, &cfg, err);
    if (!rc) rc = iris_st_open(dir, st, err);
    if (!rc) rc = iris_text_load(*st, &cfg, t, err);
    return rc;
}

/* Every row's logits of tiny-8b's text prompt on the CPU into out [n, V]; n or -1. */
static int prefill(iris_text *t, float *out) {
    iris_err err = {0};
    iris_backend *cpu = NULL;
    tiny_arr ids, pos;
    if (tiny_load("../models/tiny-8b/text/input_ids.npy", &ids) || tiny_load("../models/tiny-8b/text/position_ids.npy", &pos))
        return -1;
    int n = (int)ids.n, rows = -1;
    int32_t tok[64], p3[192], bt[2] = {0, 1};
    for (int i = 0; i < n; i++) tok[i] = (int32_t)ids.i64[i];
    for (int i = 0; i < 3 * n; i++) p3[i] = (int32_t)pos.i64[i];
    iris_kv_cache kv = {0};
    if (n <= 32 && !iris_backend_cpu_open(&cpu, &err) && !iris_kv_cache_init(&kv, &t->cfg, 2, cpu, &err)) {
        iris_text_seq q = {.n_new = n, .tokens = tok, .pos = p3, .pos_stride = n, .block_table = bt};
        if (!iris_runner_forward(t, cpu, &kv, &q, 1, out, NULL, NULL, &err)) rows = n;
        iris_kv_cache_free(&kv);
    }
    if (rows < 0) fprintf(stderr, "  prefill: %s\n", err.msg);
    if (cpu) cpu->destroy(cpu);
    tiny_free(&ids), tiny_free(&pos);
    return rows;
}

IRIS_TEST(place_ignore_list_checkpoint) {
    char root[64], q4[96], mix[96], bad[96], cmd[200];
    snprintf(root, sizeof root, "/tmp/iris-place-ignore-XXXXXX");
    REQUIRE(mkdtemp(root));
    snprintf(q4, sizeof q4, "%s/q4", root);
    snprintf(mix, sizeof mix, "%s/mix", root);
    snprintf(bad, sizeof bad, "%s/bad", root);
    iris_err err = {0};
    iris_quantize_opts qo = {.int4 = 1, .group_size = 32};
    REQUIRE(iris_quantize_dir_opts(TINY8B, q4, &qo, &err) == 0);
    REQUIRE(mkdir(mix, 0755) == 0 && mkdir(bad, 0755) == 0);
    REQUIRE(write_mixed(q4, mix, &err) == 0);
    REQUIRE(write_config(q4, mix, "[\"lm_head\", \"re:.*visual.*\", \"" DOWN0 "\"]") == 0);

    iris_st *sq = NULL, *sm = NULL;
    iris_text tq, tm;
    REQUIRE(load_text(q4, &sq, &tq, &err) == 0);
    int rc = load_text(mix, &sm, &tm, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc == 0) {
        CHECK_EQ_INT(tm.layers[0].down_proj.dtype, IRIS_DT_BF16);
        CHECK_EQ_INT(tm.layers[0].up_proj.dtype, IRIS_DT_I4);
        CHECK_EQ_INT(tm.layers[1].down_proj.dtype, IRIS_DT_I4);
        CHECK_EQ_INT(tm.n_ignored, 1);
        CHECK_EQ_INT(tm.n_int4, 4 * 7 - 1);
        CHECK_EQ_INT(tq.n_ignored, 0);
        /* it computes with the BF16 linear: the int4 model with that one view swapped gives the
         * same logits bit for bit, and they differ from the all-int4 model's */
        enum { V = 512 };
        float *a = malloc(sizeof(float) * 32 * V), *b = malloc(sizeof(float) * 32 * V), *c = malloc(sizeof(float) * 32 * V);
        REQUIRE(a && b && c);
        int n0 = prefill(&tq, c);
        tq.layers[0].down_proj = tm.layers[0].down_proj;
        int n1 = prefill(&tm, a), n2 = prefill(&tq, b);
        REQUIRE(n0 > 0 && n1 == n0 && n2 == n0);
        CHECK(memcmp(a, b, sizeof(float) * (size_t)n1 * V) == 0);
        CHECK(memcmp(a, c, sizeof(float) * (size_t)n1 * V) != 0);
        free(a), free(b), free(c);
        iris_text_free(&tm);
    }
    iris_text_free(&tq);
    iris_st_close(sq), iris_st_close(sm);

    /* the config names a linear stored 4-bit: refused, naming it */
    snprintf(cmd, sizeof cmd, "cp %s/model.safetensors %s/", q4, bad);
    REQUIRE(system(cmd) == 0);
    REQUIRE(write_config(q4, bad, "[\"lm_head\", \"model.language_model.layers.1.self_attn.q_proj\"]") == 0);
    iris_st *sb = NULL;
    iris_text tb;
    CHECK_EQ_INT(load_text(bad, &sb, &tb, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "tensor \"model.language_model.layers.1.self_attn.q_proj.weight_packed\": "
                            "quantization_config.ignore names");
    iris_st_close(sb);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
}

/* Names and patterns as compressed-tensors matches them: a name is equal or nothing, "re:" is
 * Python's re.match (from the start, not to the end); class names and vision modules name no
 * decoder linear; a bad pattern is refused naming it. */
IRIS_TEST(place_ignore_list_matching) {
    static const char *head = "{\"model_type\": \"qwen3_vl\", \"text_config\": {\"num_hidden_layers\": 3}, "
                              "\"vision_config\": {}, \"quantization_config\": {\"quant_method\": "
                              "\"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": {\"g\": "
                              "{\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 4, \"type\": \"int\", "
                              "\"strategy\": \"group\", \"group_size\": 128, \"symmetric\": true, \"dynamic\": false}}}, "
                              "\"ignore\": %s}}";
    char js[2048];
    iris_config c;
    iris_err err = {0};
    snprintf(js, sizeof js, head, "[\"lm_head\", \"re:.*visual.*\", \"re:.*mlp.down_proj\", \"Linear\", "
                                  "\"model.language_model.layers.2.self_attn.o_proj\"]");
    REQUIRE(iris_config_read(js, "cfg", &c, &err) == 0);
    const iris_quant_config *q = &c.quantization_config;
    CHECK(q->int4 && q->lm_head_ignored);
    CHECK_EQ_INT(q->n_ignore, 5);
    for (int il = 0; il < 3; il++)
        for (int k = 0; k < 7; k++)
            CHECKF(iris_quant_ignores(q, il, k) == (k == 6 || (il == 2 && k == 3)), "layer %d linear %d", il, k);
    CHECK(!iris_quant_ignores(q, 3, 6));   /* past the layers */
    /* anchored at the start: "mlp" alone matches no module name */
    snprintf(js, sizeof js, head, "[\"re:mlp\", \"re:model\\\\.language_model\\\\.layers\\\\.1\\\\.\"]");
    REQUIRE(iris_config_read(js, "cfg", &c, &err) == 0);
    CHECK(!c.quantization_config.lm_head_ignored);
    for (int k = 0; k < 7; k++) CHECK(!iris_quant_ignores(&c.quantization_config, 0, k) && iris_quant_ignores(&c.quantization_config, 1, k));
    snprintf(js, sizeof js, head, "[\"re:(unclosed\"]");
    CHECK_EQ_INT(iris_config_read(js, "cfg", &c, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "quantization_config.ignore[0] \"re:(unclosed\"");
    snprintf(js, sizeof js, head, "\"lm_head\"");
    CHECK_EQ_INT(iris_config_read(js, "cfg", &c, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "quantization_config.ignore must be a list");
}
