/* test_int4.c: 4-bit W4A16 weights (compressed-tensors pack-quantized).
 *
 * The nibble order and the offset of 8 against hand-made words, both ways
 * (iris_int4_pack, and the CPU backend's dequantization of an I4 view); the
 * round-to-nearest numbers of one group; the quantization configs and
 * checkpoints iris refuses, by name; `iris quantize --int4` read back; and
 * parity of the tiny int4 checkpoints (tools/ref_int4.py, three variants)
 * with transformers on the same weights dequantized by hand. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu_internal.h"
#include "engine/planner.h"
#include "engine/runner.h"
#include "formats/config.h"
#include "model/weights.h"
#include "npy.h"
#include "test.h"
#include "tiny_fixture.h"
#include "tools/inspect.h"
#include "tools/int4.h"
#include "tools/quantize.h"
#include "tools/synth.h"

static const char *variants[] = {"tiny-int4-sym", "tiny-int4-asym", "tiny-int4-g64"};

/* Element i of a row is nibble i % 8 (from the low bits) of word i / 8, stored as q + 8. */
IRIS_TEST(int4_pack_words) {
    int8_t q[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
    uint32_t w[2];
    iris_int4_pack(q, 16, w);
    CHECK(w[0] == 0x76543210u);
    CHECK(w[1] == 0xFEDCBA98u);
    /* zero points [rows 10, groups 2] pack along the rows: word [r / 8][g], nibble r % 8 */
    int8_t z[20];
    for (int r = 0; r < 10; r++) z[r * 2] = (int8_t)(r - 8), z[r * 2 + 1] = (int8_t)(7 - r);
    uint32_t zw[4];
    iris_int4_pack_zero(z, 10, 2, zw);
    CHECK(zw[0] == 0x76543210u);   /* group 0, rows 0..7: -8..-1 */
    CHECK(zw[1] == 0x89ABCDEFu);   /* group 1, rows 0..7: 7..0 */
    CHECK(zw[2] == 0x00000098u);   /* group 0, rows 8, 9: 0, 1; the rest padding */
    CHECK(zw[3] == 0x00000067u);   /* group 1, rows 8, 9: -1, -2 */
}

/* The CPU backend reads hand-made words: w = bf16((q - zero) · scale). */
IRIS_TEST(int4_cpu_dequant_words) {
    uint32_t words[2 * 2] = {0x76543210u, 0xFEDCBA98u,   /* row 0: q = -8..7 */
                             0x88888888u, 0x0000000Fu};  /* row 1: q = 0 x 8, then 7, -8 x 7 */
    uint16_t scales[2 * 2] = {0x3F80, 0x4000,            /* row 0: 1, 2 */
                              0x3E00, 0x3DCD};           /* row 1: 0.125, bf16(0.1) */
    uint32_t zeros[1 * 2] = {0x00000038u, 0x00000000u};  /* group 0: row 0 zero 0, row 1 zero -5; group 1: -8, -8 */
    iris_tensor t = {.data = words, .dtype = IRIS_DT_I4, .rows = 2, .cols = 16, .qscale = scales,
                     .qscale_dtype = IRIS_DT_BF16, .group = 8};
    float row[16];
    iris_cpu_widen_row(&t, 0, row);
    for (int c = 0; c < 16; c++) CHECKF(row[c] == (float)(c - 8) * (c < 8 ? 1.0f : 2.0f), "col %d: %g", c, row[c]);
    t.qzero = zeros;
    iris_cpu_widen_row(&t, 0, row);
    for (int c = 0; c < 16; c++)
        CHECKF(row[c] == (float)(c - 8 - (c < 8 ? 0 : -8)) * (c < 8 ? 1.0f : 2.0f), "zero: col %d: %g", c, row[c]);
    iris_cpu_widen_row(&t, 1, row);
    for (int c = 0; c < 8; c++) CHECKF(row[c] == 5 * 0.125f, "row 1 col %d: %g", c, row[c]);
    float s1 = 0.10009765625f;                            /* bf16 0x3DCD */
    CHECKF(row[8] == iris_f32_round_bf16(15 * s1), "row 1 col 8: %g", row[8]);
    for (int c = 9; c < 16; c++) CHECKF(row[c] == 0.0f, "row 1 col %d: %g", c, row[c]);
    CHECK(15 * s1 != iris_f32_round_bf16(15 * s1));       /* the product really is rounded */
}

/* One group, by hand: symmetric scale max|w| / 7.5, asymmetric (max - min) / 15 with a zero point. */
IRIS_TEST(int4_quantize_group) {
    float w[8] = {0.75f, -0.5f, 0.1f, 0.0f, 0.2f, -0.05f, 0.3f, 0.7f};
    uint16_t s;
    int8_t z, q[8];
    iris_int4_quantize_group(w, 8, 1, &s, &z, q);
    CHECK(s == 0x3DCD);                                   /* bf16(0.1) = 0.10009765625 */
    CHECK(z == 0);
    const int8_t want[8] = {7, -5, 1, 0, 2, 0, 3, 7};     /* 0.75 / 0.1001 = 7.49 -> 7; -0.05 / 0.1 -> -0 */
    for (int i = 0; i < 8; i++) CHECKF(q[i] == want[i], "sym %d: %d", i, q[i]);
    iris_int4_quantize_group(w, 8, 0, &s, &z, q);
    CHECK(s == 0x3DAB);                                   /* bf16(1.25 / 15) = 0.08349609375 */
    CHECK(z == -2);                                       /* round(-8 + 0.5 / 0.0835) = round(-2.01) */
    CHECK(q[1] == -8 && q[0] == 7 && q[3] == -2);         /* -5.99 - 2; 8.98 - 2; 0 - 2 */
    float zero[8] = {0};
    iris_int4_quantize_group(zero, 8, 1, &s, &z, q);
    CHECK(s == 0x3C00 && q[0] == 0);                      /* an all-zero group: scale bf16's eps */
}

/* config.json's quantization_config: what iris reads and what it refuses, by name. */
static int read_qc(const char *qc, iris_config *cfg, iris_err *err) {
    char text[4096];
    snprintf(text, sizeof text, "{\"model_type\": \"qwen3_vl\", \"quantization_config\": %s}", qc);
    *err = (iris_err){0};
    return iris_config_read(text, "config.json", cfg, err);
}

/* A compressed-tensors config of one group; `w_extra` adds or replaces weights keys (later keys
 * would be duplicates, which config.json refuses, so every default is a parameter). */
static const char *ct(char *buf, size_t n, int bits, const char *type, const char *strategy, int gs,
                      const char *actorder, const char *w_extra, const char *g_extra) {
    snprintf(buf, n,
             "{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": "
             "{\"group_0\": {\"targets\": [\"Linear\"]%s, \"weights\": {\"num_bits\": %d, \"type\": \"%s\", "
             "\"strategy\": \"%s\", \"group_size\": %d, \"symmetric\": false, \"actorder\": %s%s}}}}",
             g_extra, bits, type, strategy, gs, actorder, w_extra);
    return buf;
}

IRIS_TEST(int4_config_refusals) {
    iris_config cfg;
    iris_err err;
    char b[1024];
    REQUIRE(read_qc(ct(b, sizeof b, 4, "int", "group", 64, "null", "", ""), &cfg, &err) == 0);
    CHECK(cfg.quantization_config.int4 && cfg.quantization_config.group_size == 64);
    CHECK(!cfg.quantization_config.symmetric && !cfg.quantization_config.fp8);
    /* actorder "weight" reorders while quantizing but stores no g_idx: readable */
    CHECK(read_qc(ct(b, sizeof b, 4, "int", "group", 128, "\"weight\"", ", \"dynamic\": false", ""), &cfg, &err) == 0);
    CHECK(cfg.quantization_config.group_size == 128);
    struct { const char *qc, *names; } bad[] = {
        {"{\"quant_method\": \"gptq\", \"bits\": 4, \"desc_act\": true}", "\"gptq\""},
        {"{\"quant_method\": \"awq\", \"bits\": 4}", "\"awq\""},
        {"{\"quant_method\": \"compressed-tensors\", \"format\": \"marlin-24\", \"config_groups\": {}}", "\"marlin-24\""},
        {"{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"quantization_status\": "
         "\"frozen\", \"config_groups\": {}}", "\"frozen\""},
        {"{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": {}}",
         "config_groups"},
        {"{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": {\"a\": "
         "{\"weights\": {\"num_bits\": 4, \"type\": \"int\", \"strategy\": \"group\", \"group_size\": 64}}, \"b\": "
         "{\"weights\": {\"num_bits\": 4, \"type\": \"int\", \"strategy\": \"group\", \"group_size\": 128}}}}",
         "one weight scheme"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = read_qc(bad[i].qc, &cfg, &err);
        CHECKF(rc == IRIS_EUNSUPPORTED || rc == IRIS_EFORMAT, "accepted: %s", bad[i].qc);
        CHECK_CONTAINS(err.msg, bad[i].names);
    }
    struct { int bits; const char *type, *strategy; int gs; const char *actorder, *w_extra, *g_extra, *names; } w[] = {
        {4, "int", "group", 128, "\"group\"", "", "", "activation order \"group\""},
        {4, "int", "group", 128, "true", "", "", "activation order"},
        {3, "int", "group", 128, "null", "", "", "3-bit int"},
        {8, "int", "group", 128, "null", "", "", "8-bit int"},
        {4, "float", "group", 128, "null", "", "", "4-bit float"},
        {4, "int", "channel", 128, "null", "", "", "strategy \"channel\""},
        {4, "int", "group", 20, "null", "", "", "group_size 20"},
        {4, "int", "group", 128, "null", ", \"dynamic\": true", "", "dynamic"},
        {4, "int", "group", 128, "null", "", ", \"input_activations\": {\"num_bits\": 8}", "input activations"},
        {4, "int", "group", 128, "null", "", ", \"format\": \"int-quantized\"", "\"int-quantized\""},
    };
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) {
        ct(b, sizeof b, w[i].bits, w[i].type, w[i].strategy, w[i].gs, w[i].actorder, w[i].w_extra, w[i].g_extra);
        CHECKF(read_qc(b, &cfg, &err) == IRIS_EUNSUPPORTED, "accepted: %s", b);
        CHECK_CONTAINS(err.msg, w[i].names);
    }
}

/* A copy of a tiny int4 checkpoint with config.json edited (the rest linked). */
static int edited_copy(const char *name, void (*edit)(json_t *qc), char *dir, size_t n) {
    char src[512], path[600], target[1200], cwd[512];
    snprintf(dir, n, "/tmp/iris-test-int4-%d-XXXXXX", (int)getpid());
    if (!mkdtemp(dir) || !getcwd(cwd, sizeof cwd)) return -1;
    snprintf(src, sizeof src, "%s/%s/model", TINY_DIR, name);
    snprintf(path, sizeof path, "%s/config.json", src);
    json_t *cfg = json_load_file(path, 0, NULL);
    if (!cfg) return -1;
    edit(cfg);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = json_dump_file(cfg, path, JSON_INDENT(1));
    json_decref(cfg);
    static const char *files[] = {"model.safetensors", "tokenizer.json"};
    for (int i = 0; !rc && i < 2; i++) {
        snprintf(target, sizeof target, "%s/%s/%s", cwd, src, files[i]);
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        rc = symlink(target, path);
    }
    return rc;
}

static void remove_copy(const char *dir) {
    static const char *files[] = {"config.json", "model.safetensors", "tokenizer.json"};
    char path[700];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

static json_t *weights_of(json_t *cfg) {
    json_t *qc = json_object_get(cfg, "quantization_config");
    return json_object_get(json_object_get(json_object_get(qc, "config_groups"), "group_0"), "weights");
}
static void group_64(json_t *cfg) { json_object_set_new(weights_of(cfg), "group_size", json_integer(64)); }
static void asymmetric(json_t *cfg) { json_object_set_new(weights_of(cfg), "symmetric", json_false()); }
static void no_quant(json_t *cfg) {
    json_object_set_new(json_object_get(cfg, "quantization_config"), "quant_method", json_string("none"));
}
/* the int4 config over the BF16 tiny-gqa weights */
static void int4_over_bf16(json_t *cfg) {
    char path[300];
    snprintf(path, sizeof path, "%s/tiny-int4-sym/model/config.json", TINY_DIR);
    json_t *q = json_load_file(path, 0, NULL);
    json_object_set(cfg, "quantization_config", json_object_get(q, "quantization_config"));
    json_decref(q);
}

/* Checkpoints that disagree with their config are refused at open, naming the tensor. */
IRIS_TEST(int4_bad_checkpoints) {
    static const struct { const char *model; void (*edit)(json_t *); int code; const char *names[2]; } bad[] = {
        {"tiny-int4-sym", group_64, IRIS_EFORMAT,
         {"model.language_model.layers.0.self_attn.q_proj.weight_scale\" is BF16 [128, 2]", "[128, 1]"}},
        {"tiny-int4-sym", asymmetric, IRIS_ENOTFOUND, {"weight_zero_point\" is missing", "layers.0.self_attn.q_proj"}},
        {"tiny-int4-asym", no_quant, IRIS_EUNSUPPORTED, {"quant_method \"none\"", "compressed-tensors"}},
        {"tiny-gqa", int4_over_bf16, IRIS_EFORMAT, {"no decoder linear has a weight_packed", "--int4"}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char dir[256];
        REQUIRE(edited_copy(bad[i].model, bad[i].edit, dir, sizeof dir) == 0);
        iris_model *m = (iris_model *)1;
        iris_err err = {0};
        CHECK_EQ_INT(iris_model_open(dir, NULL, &m, &err), bad[i].code);
        CHECK(m == NULL);
        for (int k = 0; k < 2; k++) CHECK_CONTAINS(err.msg, bad[i].names[k]);
        remove_copy(dir);
    }
}

/* The fixtures open as int4, and the CPU backend is the one that runs them. */
IRIS_TEST(int4_open_tiny) {
    for (int vi = 0; vi < 3; vi++) {
        char dir[256];
        snprintf(dir, sizeof dir, "%s/%s/model", TINY_DIR, variants[vi]);
        iris_model *m = NULL;
        iris_err err = {0};
        REQUIRE(iris_model_open(dir, NULL, &m, &err) == 0);
        const iris_text_config *t = &m->cfg.text_config;
        CHECK_EQ_INT(m->text.n_int4, 7 * t->num_hidden_layers);
        const iris_text_layer *L = &m->text.layers[1];
        CHECK_EQ_INT(L->down_proj.dtype, IRIS_DT_I4);
        CHECK_EQ_INT(L->down_proj.group, vi == 2 ? 64 : 32);
        CHECK_EQ_INT(L->down_proj.qzero != NULL, vi != 0);
        CHECK_EQ_INT(m->text.embed_tokens.dtype, IRIS_DT_BF16);
        char line[512];
        iris_model_describe(m, line, sizeof line);
        CHECK_CONTAINS(line, "4-bit");
        iris_model_close(m);
    }
}

/* `iris quantize --int4` read back: each weight within half a step (plus the bf16 rounding of the
 * scale) of the BF16 original, and the model describes itself as 4-bit. */
IRIS_TEST(int4_quantize_roundtrip) {
    char out[256], src[256];
    snprintf(out, sizeof out, "/tmp/iris-test-int4q-%d", (int)getpid());
    snprintf(src, sizeof src, "%s/tiny-gqa/model", TINY_DIR);
    for (int asym = 0; asym < 2; asym++) {
        iris_quantize_opts o = {.int4 = 1, .group_size = 32, .asymmetric = asym};
        iris_err err = {0};
        REQUIRE(iris_quantize_dir_opts(src, out, &o, &err) == 0);
        iris_model *q = NULL, *b = NULL;
        REQUIRE(iris_model_open(out, NULL, &q, &err) == 0);
        REQUIRE(iris_model_open(src, NULL, &b, &err) == 0);
        CHECK_EQ_INT(q->text.n_int4, 21);
        CHECK_EQ_INT(q->cfg.quantization_config.symmetric, !asym);
        float worst = 0;
        for (int il = 0; il < 3; il++) {
            const iris_tensor *wq = &q->text.layers[il].gate_proj, *wb = &b->text.layers[il].gate_proj;
            float *rq = malloc(sizeof(float) * (size_t)wq->cols), *rb = malloc(sizeof(float) * (size_t)wq->cols);
            for (int64_t r = 0; r < wq->rows; r++) {
                iris_cpu_widen_row(wq, r, rq);
                iris_cpu_widen_row(wb, r, rb);
                for (int64_t c = 0; c < wq->cols; c++) {
                    float s = iris_bf16_to_f32(((const uint16_t *)wq->qscale)[r * (wq->cols / 32) + c / 32]);
                    float e = fabsf(rq[c] - rb[c]) / s;
                    worst = e > worst ? e : worst;
                }
            }
            free(rq), free(rb);
        }
        printf("  --int4 %s: worst |w_int4 - w_bf16| %.3f steps\n", asym ? "--asym" : "(symmetric)", worst);
        CHECK(worst > 0.3f && worst <= 0.6f);   /* half a step, the rounding of the scale and of the zero */
        iris_model_close(q);
        iris_model_close(b);
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf %s", out);
        CHECK(system(cmd) == 0);
    }
    iris_quantize_opts bad = {.int4 = 1, .group_size = 48};
    iris_err err = {0};
    CHECK_EQ_INT(iris_quantize_dir_opts(src, out, &bad, &err), IRIS_EUNSUPPORTED);
    CHECK_CONTAINS(err.msg, "group size 48");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", out);
    CHECK(system(cmd) == 0);
}

/* The int4 fixtures against transformers on the same weights dequantized by hand: `iris logits`
 * (the whole pipeline: template, tokenizer, image, vision, decoder) within 1e-3 at every position,
 * the same arg-max wherever the reference's top-2 margin is not a near-tie, and 24 greedy tokens
 * of the text conversation through the runner (decode steps over the paged cache) and of the image
 * one through the engine. */
static void check_logits(const char *variant, const char *scen, const char *args) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    char cmd[1024], out[256], ref_path[256];
    snprintf(out, sizeof out, "/tmp/iris-test-int4-%d.npy", (int)getpid());
    snprintf(cmd, sizeof cmd, "%s logits " TINY_DIR "/%s/model %s --device cpu --out %s 2>/dev/null", bin, variant, args,
             out);
    snprintf(ref_path, sizeof ref_path, "%s/%s/logits.npy", variant, scen);
    tiny_arr ref;
    REQUIRE(tiny_load(ref_path, &ref) == 0);
    REQUIRE(system(cmd) == 0);
    float *got = NULL;
    int64_t shape[8];
    int nd = 0;
    iris_err err = {0};
    REQUIRE(iris_npy_read_f32(out, &got, shape, &nd, &err) == 0);
    unlink(out);
    CHECK(nd == 2 && shape[0] == ref.shape[0] && shape[1] == ref.shape[1]);
    if (nd == 2 && shape[0] * shape[1] == ref.n) {
        float d = 0, r = 0;
        for (int64_t i = 0; i < ref.n; i++) {
            float e = fabsf(got[i] - ref.f32[i]);
            d = e > d || isnan(e) ? (isnan(e) ? INFINITY : e) : d;
            r = fabsf(ref.f32[i]) > r ? fabsf(ref.f32[i]) : r;
        }
        int decided, same = tiny_greedy_same(got, ref.f32, (int)shape[0], (int)shape[1], 1e-3f, &decided);
        printf("  %s / %s: %lld positions, logits max-abs %.3g (rel %.3g), arg-max %d/%d\n", variant, scen,
               (long long)shape[0], d, r > 0 ? d / r : 0, same, decided);
        CHECKF(d <= 1e-3f, "%s/%s: logits max-abs %g", variant, scen, d);
        CHECKF(same == decided, "%s/%s: arg-max differs at %d of %d positions", variant, scen, decided - same, decided);
    }
    free(got);
    tiny_free(&ref);
}

static void check_greedy(const char *variant) {
    char dir[256], p[256];
    snprintf(dir, sizeof dir, "%s/%s/model", TINY_DIR, variant);
    tiny_arr ids, pos, greedy;
    snprintf(p, sizeof p, "%s/text/greedy.npy", variant);
    REQUIRE(tiny_load(p, &greedy) == 0 && greedy.i64 && greedy.n == 24);
    REQUIRE(tiny_load("inputs/text/input_ids.npy", &ids) == 0);
    REQUIRE(tiny_load("inputs/text/position_ids.npy", &pos) == 0);
    iris_model *m = NULL;
    iris_backend *be = NULL;
    iris_err err = {0};
    iris_model_opts o = {.text_only = 1};
    REQUIRE(iris_model_open(dir, &o, &m, &err) == 0);
    REQUIRE(iris_backend_cpu_open(&be, &err) == 0);
    int n = (int)ids.n, V = m->cfg.text_config.vocab_size;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *p3 = malloc(sizeof(int32_t) * 3 * (size_t)n), bt[8];
    for (int i = 0; i < n; i++) tok[i] = (int32_t)ids.i64[i];
    for (int i = 0; i < 3 * n; i++) p3[i] = (int32_t)pos.i64[i];
    for (int b = 0; b < 8; b++) bt[b] = 7 - b;
    iris_kv_cache kv;
    REQUIRE(iris_kv_cache_init(&kv, &m->cfg.text_config, 8, be, &err) == 0);
    float *lg = malloc(sizeof(float) * (size_t)V);
    iris_text_seq q = {.n_new = n, .tokens = tok, .pos = p3, .pos_stride = n, .block_table = bt, .logits_from = n - 1};
    REQUIRE(iris_runner_forward(&m->text, be, &kv, &q, 1, lg, NULL, NULL, &err) == 0);
    int g = 0;
    for (; g < 24; g++) {
        int best = 0;
        for (int v = 1; v < V; v++) best = lg[v] > lg[best] ? v : best;
        if (best != (int)greedy.i64[g]) break;
        int32_t t = best, pp[3] = {n + g, n + g, n + g};  /* text only: rope delta 0 */
        iris_text_seq d = {.n_past = n + g, .n_new = 1, .tokens = &t, .pos = pp, .pos_stride = 1, .block_table = bt};
        REQUIRE(iris_runner_forward(&m->text, be, &kv, &d, 1, lg, NULL, NULL, &err) == 0);
    }
    printf("  %s / text: %d of 24 greedy tokens as transformers\n", variant, g);
    CHECKF(g == 24, "%s: greedy token %d differs", variant, g);
    free(lg), free(tok), free(p3);
    iris_kv_cache_free(&kv);
    be->destroy(be);
    iris_model_close(m);
    tiny_free(&ids), tiny_free(&pos), tiny_free(&greedy);
}

/* The image conversation's 24 greedy tokens through the engine on the CPU (the one path: prompt
 * builder, vision, prefill, decode steps, sampler). */
static void check_image_greedy(const char *variant) {
    char dir[256], p[256];
    snprintf(dir, sizeof dir, "%s/%s/model", TINY_DIR, variant);
    snprintf(p, sizeof p, "%s/image/greedy.npy", variant);
    tiny_arr greedy;
    REQUIRE(tiny_load(p, &greedy) == 0 && greedy.i64 && greedy.n == 24);
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = dir;
    o.device = "cpu";
    iris_engine *e = NULL;
    iris_err err = {0};
    REQUIRE(iris_engine_open(&o, &e, &err) == 0);
    tiny_greedy_run g;
    CHECKF(tiny_image_greedy(e, greedy.i64, 24, 60000, &g, &err) == 0, "%s: %s", variant, err.msg);
    printf("  %s / image: %d of %d greedy tokens as transformers (engine, CPU)\n", variant, g.same, g.n);
    CHECKF(g.n == 24 && g.same == 24, "%s: %d of %d greedy image tokens as transformers", variant, g.same, g.n);
    if (!strcmp(variant, variants[0])) {
        /* The helper's two counts: one token changed in the reference is one fewer equal token by token,
         * and the end of the equal prefix. */
        int64_t moved[24];
        memcpy(moved, greedy.i64, sizeof moved);
        moved[5] ^= 1;
        CHECK(tiny_image_greedy(e, moved, 24, 60000, &g, &err) == 0);
        CHECKF(g.n == 24 && g.same == 23 && g.prefix == 5, "%d tokens, %d equal, %d before the difference", g.n,
               g.same, g.prefix);
    }
    iris_engine_close(e);
    tiny_free(&greedy);
}

IRIS_TEST(int4_parity) {
    for (int vi = 0; vi < 3; vi++) {
        check_logits(variants[vi], "text", "--prompt 'Hello, who are you?'");
        check_logits(variants[vi], "image", "--image " TINY_DIR "/images/a.png --prompt 'What is in this image?'");
        check_greedy(variants[vi]);
        check_image_greedy(variants[vi]);
    }
}

/* `iris synth --dtype int4`: real names and shapes the loader binds as 4-bit, and the planner counts
 * the packed words, scales and shapes as stored. */
IRIS_TEST(int4_synth_and_plan) {
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/iris-test-int4s-%d", (int)getpid());
    iris_synth_opts o = {.like = "tiny", .int4 = 1, .vocab_size = 512, .n_threads = 1,
                         .tokenizer = TINY_DIR "/tokenizer/tokenizer.json"};
    iris_err err = {0};
    REQUIRE(iris_synth_write(dir, &o, &err) == 0);
    iris_model *m = NULL;
    REQUIRE(iris_model_open(dir, NULL, &m, &err) == 0);
    CHECK_EQ_INT(m->text.n_int4, 21);
    CHECK_EQ_INT(m->text.layers[2].down_proj.cols, 384);
    CHECK_EQ_INT(m->text.layers[2].down_proj.group, 128);
    CHECK(m->text.layers[2].down_proj.qzero == NULL);
    iris_plan_model pm;
    REQUIRE(iris_plan_model_init(&m->cfg, m->st, "synth", &pm, &err) == 0);
    CHECK_EQ_INT(pm.n_int4_linears, 21);
    CHECK_EQ_INT(pm.n_decoder_linears, 21);
    CHECK_EQ_INT(pm.linear_max_in, 384);
    uint64_t want = 0;
    for (int i = 0; i < iris_st_count(m->st); i++) want += iris_plan_align(iris_st_at(m->st, i)->n_bytes);
    CHECK(pm.weight_bytes == want);
    CHECK(pm.dtype_bytes[IRIS_DT_I32] > 0 && pm.dtype_bytes[IRIS_DT_F8_E4M3] == 0);
    /* a 4-bit linear packs 8 weights a word: the q_proj words are 1/4 of its BF16 bytes */
    const iris_st_tensor *pk = iris_st_find(m->st, "model.language_model.layers.0.self_attn.q_proj.weight_packed");
    REQUIRE(pk);
    CHECK(pk->n_bytes == 256 * 128 / 2);
    iris_model_close(m);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* `iris inspect` names the scheme and counts a packed word as 8 parameters (scales are bookkeeping):
 * the int4 fixture has the parameters of the BF16 model it was quantized from. */
IRIS_TEST(int4_inspect) {
    json_t *q = NULL, *b = NULL;
    iris_err err = {0};
    REQUIRE(iris_inspect(TINY_DIR "/tiny-int4-asym/model", &q, &err) == 0);
    REQUIRE(iris_inspect(TINY_DIR "/tiny-gqa/model", &b, &err) == 0);
    json_t *tq = json_object_get(q, "totals"), *tb = json_object_get(b, "totals");
    CHECK(json_integer_value(json_object_get(tq, "params")) == json_integer_value(json_object_get(tb, "params")));
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(q, "int4"), "linears")), 21);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    iris_inspect_print(f, q, 0);
    fclose(f);
    CHECK_CONTAINS(buf, "int4 W4A16 (compressed-tensors pack-quantized), groups of 32, with zero points; 21 4-bit");
    free(buf);
    json_decref(q);
    json_decref(b);
}
