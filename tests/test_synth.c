/* test_synth.c: `iris synth`: the 2B/4B shapes against QWEN3VL.md §1.5's
 * counts, a tiny checkpoint written and read back (names and shapes from its
 * config.json, value statistics, FP8 format), reproducibility by seed. */
#include "test.h"

#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

#include "err.h"
#include "tools/quantize.h"
#include "formats/safetensors.h"
#include "tools/synth.h"

typedef struct totals {
    uint64_t n, params, bytes, linear_params, n_scale;
} totals;

static void add(void *ctx, const char *name, iris_dtype dt, int n_dims, const int64_t *shape) {
    totals *t = ctx;
    uint64_t ne = 1;
    for (int d = 0; d < n_dims; d++) ne *= (uint64_t)shape[d];
    t->n++;
    t->params += ne;
    t->bytes += ne * iris_dtype_size(dt);
    if (iris_quantize_is_target(name)) t->linear_params += ne;
    if (strstr(name, "weight_scale_inv")) t->n_scale += ne;
}

IRIS_TEST(synth_shapes_match_spec) {
    /* QWEN3VL.md §1.5: parameters, bf16 bytes and the FP8 byte estimates */
    struct {
        const char *like;
        int fp8;
        uint64_t params, bytes, linear, scales;
    } cases[] = {
        {"2B", 0, 2127532032ull, 4255064064ull, 1409286144ull, 0},
        {"4B", 0, 4437815808ull, 8875631616ull, 3633315840ull, 0},
        {"2B", 1, 2127532032ull + 86016, 2846121984ull, 1409286144ull, 86016},
        {"4B", 1, 4437815808ull + 221760, 5243202816ull, 3633315840ull, 221760},
        /* Qwen3-VL-8B: 8,767,123,696 parameters (576,388,336 vision + 8,190,735,360 text with an
         * untied lm_head); FP8: 36 x 11,776 scale blocks, ~9.86 GiB */
        {"8B", 0, 8767123696ull, 17534247392ull, 6945767424ull, 0},
        {"8B", 1, 8767123696ull + 423936, 10590175712ull, 6945767424ull, 423936},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        iris_synth_opts o = {.like = cases[i].like, .fp8 = cases[i].fp8};
        totals t = {0};
        iris_err err = {0};
        REQUIRE(iris_synth_list(&o, add, &t, &err) == 0);
        CHECKF(t.params == cases[i].params, "%s fp8=%d: %llu params", cases[i].like, cases[i].fp8,
               (unsigned long long)t.params);
        CHECKF(t.bytes == cases[i].bytes, "%s fp8=%d: %llu bytes", cases[i].like, cases[i].fp8,
               (unsigned long long)t.bytes);
        CHECK(t.linear_params == cases[i].linear);
        CHECK(t.n_scale == cases[i].scales);
    }
    iris_synth_opts bad = {.like = "7B"};
    totals t = {0};
    iris_err err = {0};
    CHECK(iris_synth_list(&bad, add, &t, &err) < 0);
    CHECK_CONTAINS(err.msg, "--like 7B");
}

static int64_t cfg_int(json_t *cfg, const char *sub, const char *key) {
    return json_integer_value(json_object_get(json_object_get(cfg, sub), key));
}

static void check_shape(const iris_st *st, const char *name, iris_dtype dt, int n_dims, const int64_t *shape) {
    const iris_st_tensor *t = iris_st_find(st, name);
    CHECKF(t != NULL, "tensor %s missing", name);
    if (!t) return;
    CHECKF(t->dtype == dt, "%s: dtype %s", name, iris_dtype_name(t->dtype));
    CHECKF(t->n_dims == n_dims, "%s: %d dims", name, t->n_dims);
    for (int d = 0; d < n_dims && d < t->n_dims; d++)
        CHECKF(t->shape[d] == shape[d], "%s: dim %d is %lld, want %lld", name, d, (long long)t->shape[d],
               (long long)shape[d]);
}

static void stats_bf16(const iris_st_tensor *t, double *mean, double *sd) {
    const uint16_t *h = t->data;
    double s = 0, s2 = 0;
    for (uint64_t i = 0; i < t->n_elems; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        s += f;
        s2 += (double)f * f;
    }
    *mean = s / (double)t->n_elems;
    *sd = sqrt(s2 / (double)t->n_elems - *mean * *mean);
}

static int files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int eq = fa && fb;
    while (eq) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) eq = 0;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

IRIS_TEST(synth_tiny_checkpoint) {
    char root[] = "/tmp/iris-test-synth-XXXXXX";
    REQUIRE(mkdtemp(root));
    char d1[300], d2[300], d3[300], d4[300], p[400], q[400];
    snprintf(d1, sizeof d1, "%s/a", root);
    snprintf(d2, sizeof d2, "%s/b", root);
    snprintf(d3, sizeof d3, "%s/c", root);
    snprintf(d4, sizeof d4, "%s/fp8", root);
    iris_err err = {0};
    iris_synth_opts o = {.like = "tiny", .seed = 5, .vocab_size = 1024, .n_threads = 1};
    REQUIRE(iris_synth_write(d1, &o, &err) == 0);

    snprintf(p, sizeof p, "%s/config.json", d1);
    json_error_t je;
    json_t *cfg = json_load_file(p, 0, &je);
    REQUIRE(cfg);
    int64_t H = cfg_int(cfg, "text_config", "hidden_size"), I = cfg_int(cfg, "text_config", "intermediate_size");
    int64_t L = cfg_int(cfg, "text_config", "num_hidden_layers"), hd = cfg_int(cfg, "text_config", "head_dim");
    int64_t nq = cfg_int(cfg, "text_config", "num_attention_heads");
    int64_t nkv = cfg_int(cfg, "text_config", "num_key_value_heads"), V = cfg_int(cfg, "text_config", "vocab_size");
    int64_t vh = cfg_int(cfg, "vision_config", "hidden_size"), vd = cfg_int(cfg, "vision_config", "depth");
    int64_t vi = cfg_int(cfg, "vision_config", "intermediate_size");
    int64_t vo = cfg_int(cfg, "vision_config", "out_hidden_size");
    int64_t np = cfg_int(cfg, "vision_config", "num_position_embeddings");
    size_t n_ds = json_array_size(json_object_get(json_object_get(cfg, "vision_config"), "deepstack_visual_indexes"));
    CHECK(V == 1024 && H > 0 && L > 0 && vh > 0 && n_ds > 0);
    CHECK_STR(json_string_value(json_object_get(cfg, "model_type")), "qwen3_vl");
    CHECK(json_object_get(cfg, "quantization_config") == NULL);
    json_decref(cfg);

    iris_st *st = NULL;
    REQUIRE(iris_st_open(d1, &st, &err) == 0);
    /* §3 names and shapes from the config's numbers */
    int64_t n_expected = 3 + vd * 12 + 6 + (int64_t)n_ds * 6 + 1 + L * 11 + 1;
    CHECK_EQ_INT(iris_st_count(st), n_expected);
    check_shape(st, "model.language_model.embed_tokens.weight", IRIS_DT_BF16, 2, (int64_t[]){V, H});
    check_shape(st, "model.visual.patch_embed.proj.weight", IRIS_DT_BF16, 5, (int64_t[]){vh, 3, 2, 16, 16});
    check_shape(st, "model.visual.pos_embed.weight", IRIS_DT_BF16, 2, (int64_t[]){np, vh});
    char n[200];
    snprintf(n, sizeof n, "model.visual.blocks.%lld.attn.qkv.weight", (long long)(vd - 1));
    check_shape(st, n, IRIS_DT_BF16, 2, (int64_t[]){3 * vh, vh});
    snprintf(n, sizeof n, "model.visual.blocks.%lld.mlp.linear_fc1.weight", (long long)(vd - 1));
    check_shape(st, n, IRIS_DT_BF16, 2, (int64_t[]){vi, vh});
    check_shape(st, "model.visual.merger.linear_fc2.weight", IRIS_DT_BF16, 2, (int64_t[]){vo, 4 * vh});
    snprintf(n, sizeof n, "model.visual.deepstack_merger_list.%d.norm.weight", (int)n_ds - 1);
    check_shape(st, n, IRIS_DT_BF16, 1, (int64_t[]){4 * vh});
    for (int64_t il = 0; il < L; il++) {
        snprintf(n, sizeof n, "model.language_model.layers.%lld.self_attn.q_proj.weight", (long long)il);
        check_shape(st, n, IRIS_DT_BF16, 2, (int64_t[]){nq * hd, H});
        snprintf(n, sizeof n, "model.language_model.layers.%lld.self_attn.k_proj.weight", (long long)il);
        check_shape(st, n, IRIS_DT_BF16, 2, (int64_t[]){nkv * hd, H});
        snprintf(n, sizeof n, "model.language_model.layers.%lld.self_attn.o_proj.weight", (long long)il);
        check_shape(st, n, IRIS_DT_BF16, 2, (int64_t[]){H, nq * hd});
        snprintf(n, sizeof n, "model.language_model.layers.%lld.self_attn.k_norm.weight", (long long)il);
        check_shape(st, n, IRIS_DT_BF16, 1, (int64_t[]){hd});
        snprintf(n, sizeof n, "model.language_model.layers.%lld.mlp.down_proj.weight", (long long)il);
        check_shape(st, n, IRIS_DT_BF16, 2, (int64_t[]){H, I});
    }
    CHECK(iris_st_find(st, "lm_head.weight") == NULL); /* tied, as the real files */
    double mean, sd;
    stats_bf16(iris_st_find(st, "model.language_model.embed_tokens.weight"), &mean, &sd);
    CHECKF(fabs(mean) < 1e-3 && fabs(sd - 0.02) < 1e-3, "embedding mean %g sd %g", mean, sd);
    stats_bf16(iris_st_find(st, "model.language_model.layers.0.input_layernorm.weight"), &mean, &sd);
    CHECKF(fabs(mean - 1.0) < 0.01 && sd > 0.01 && sd < 0.03, "norm mean %g sd %g", mean, sd);
    iris_st_close(st);
    snprintf(p, sizeof p, "%s/generation_config.json", d1);
    CHECK(access(p, R_OK) == 0);
    snprintf(p, sizeof p, "%s/preprocessor_config.json", d1);
    CHECK(access(p, R_OK) == 0);

    /* same seed, other thread count: the same bytes; another seed: different */
    o.n_threads = 4;
    REQUIRE(iris_synth_write(d2, &o, &err) == 0);
    o.seed = 6;
    REQUIRE(iris_synth_write(d3, &o, &err) == 0);
    snprintf(p, sizeof p, "%s/model.safetensors", d1);
    snprintf(q, sizeof q, "%s/model.safetensors", d2);
    CHECK(files_equal(p, q));
    snprintf(q, sizeof q, "%s/model.safetensors", d3);
    CHECK(!files_equal(p, q));

    /* FP8: every decoder linear F8_E4M3 + F32 scales, dequantized ~ N(0, 0.02) */
    o.fp8 = 1;
    REQUIRE(iris_synth_write(d4, &o, &err) == 0);
    REQUIRE(iris_st_open(d4, &st, &err) == 0);
    CHECK_EQ_INT(iris_st_count(st), n_expected + 7 * L);
    const iris_st_tensor *w = iris_st_find(st, "model.language_model.layers.1.mlp.gate_proj.weight");
    const iris_st_tensor *s = iris_st_find(st, "model.language_model.layers.1.mlp.gate_proj.weight_scale_inv");
    REQUIRE(w && s && w->dtype == IRIS_DT_F8_E4M3 && s->dtype == IRIS_DT_F32);
    CHECK(w->shape[0] == I && w->shape[1] == H && s->shape[0] == (I + 127) / 128 && s->shape[1] == (H + 127) / 128);
    CHECK(iris_st_is_fp8_linear(st, "model.language_model.layers.0.self_attn.v_proj"));
    double sum = 0, sum2 = 0;
    const uint8_t *c = w->data;
    const float *sc = s->data;
    for (int64_t r = 0; r < I; r++)
        for (int64_t k = 0; k < H; k++) {
            double x = iris_fp8_e4m3_decode(c[r * H + k]) * sc[(r / 128) * s->shape[1] + k / 128];
            sum += x;
            sum2 += x * x;
        }
    double m = sum / (double)(I * H), v = sqrt(sum2 / (double)(I * H) - m * m);
    CHECKF(fabs(m) < 1e-3 && fabs(v - 0.02) < 2e-3, "fp8 dequantized mean %g sd %g", m, v);
    iris_st_close(st);
    snprintf(p, sizeof p, "%s/config.json", d4);
    cfg = json_load_file(p, 0, &je);
    REQUIRE(cfg);
    CHECK_STR(json_string_value(json_object_get(json_object_get(cfg, "quantization_config"), "quant_method")), "fp8");
    json_decref(cfg);

    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
}
