/* test_config.c: config.json / generation_config.json / preprocessor_config.json.
 *
 * The reference is transformers 5.17: tests/fixtures/loader/hf_configs.json
 * holds, for each case, the JSON given to AutoConfig / GenerationConfig /
 * AutoImageProcessor and what transformers resolved it to (defaults, both rope
 * forms, which tie_word_embeddings really ties lm_head), written on the GPU
 * machine by tools/ref_loader.py.  The 2B and 4B configs of QWEN3VL.md §1.1
 * are also written out here, and every rejection is checked for its code and
 * the value it names. */
#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

#include "formats/config.h"
#include "test.h"

static json_t *hf_fixture(void) {
    json_error_t jerr;
    return json_load_file("tests/fixtures/loader/hf_configs.json", 0, &jerr);
}

static long long ji(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

/* Cases whose values transformers accepts but that cannot run (its defaults
 * mix a 7B-like text tower with a vision tower of another width, or a tiny
 * head_dim with the default mrope_section): iris rejects them in validate. */
static const char *expected_rejection(const char *name) {
    if (!strcmp(name, "minimal_defaults"))
        return "vision_config.out_hidden_size (3584) differs from text_config.hidden_size";
    if (!strcmp(name, "text_no_head_dim")) return "mrope_section [6, 5, 5] sums to 16 but must sum to head_dim/2 = 64";
    if (!strcmp(name, "text_no_rope")) return "mrope_section [24, 20, 20] sums to 64 but must sum to head_dim/2 = 8";
    return NULL;
}

IRIS_TEST(config_matches_transformers) {
    json_t *fx = hf_fixture();
    REQUIRE(fx);
    json_t *cases = json_object_get(fx, "config");
    REQUIRE(json_array_size(cases) >= 10);
    size_t i;
    json_t *cs;
    json_array_foreach(cases, i, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        json_t *hf = json_object_get(cs, "hf"), *ht = json_object_get(hf, "text"), *hv = json_object_get(hf, "vision"),
               *htop = json_object_get(hf, "top");
        char *text = json_dumps(json_object_get(cs, "input"), 0);
        iris_config cfg;
        iris_err err = {0};
        int rc = iris_config_read(text, name, &cfg, &err);
        CHECKF(rc == 0, "%s: %s", name, err.msg);
        if (rc == 0) {
            const iris_text_config *t = &cfg.text_config;
            const iris_vision_config *v = &cfg.vision_config;
#define EQ(a, b) CHECKF((long long)(a) == (long long)(b), "%s: %s = %lld, transformers %lld", name, #a, (long long)(a), (long long)(b))
            EQ(t->vocab_size, ji(ht, "vocab_size"));
            EQ(t->hidden_size, ji(ht, "hidden_size"));
            EQ(t->intermediate_size, ji(ht, "intermediate_size"));
            EQ(t->num_hidden_layers, ji(ht, "num_hidden_layers"));
            EQ(t->num_attention_heads, ji(ht, "num_attention_heads"));
            EQ(t->num_key_value_heads, ji(ht, "num_key_value_heads"));
            EQ(t->head_dim, ji(ht, "head_dim"));
            EQ(t->max_position_embeddings, ji(ht, "max_position_embeddings"));
            EQ(t->attention_bias, json_is_true(json_object_get(ht, "attention_bias")));
            CHECKF(t->rms_norm_eps == (float)json_number_value(json_object_get(ht, "rms_norm_eps")), "%s: eps", name);
            CHECK_STR(t->hidden_act, json_string_value(json_object_get(ht, "hidden_act")));
            json_t *rp = json_object_get(ht, "rope_parameters");
            CHECKF(t->rope_theta == json_number_value(json_object_get(rp, "rope_theta")), "%s: rope_theta %g", name,
                   t->rope_theta);
            json_t *ms = json_object_get(rp, "mrope_section");
            for (int k = 0; k < 3; k++) {
                /* Absent in the config: modeling_qwen3_vl falls back to [24, 20, 20]. */
                long long want = ms ? json_integer_value(json_array_get(ms, (size_t)k)) : (k ? 20 : 24);
                EQ(t->mrope_section[k], want);
            }
            if (json_object_get(rp, "mrope_interleaved"))
                EQ(t->mrope_interleaved, json_is_true(json_object_get(rp, "mrope_interleaved")));
            EQ(v->depth, ji(hv, "depth"));
            EQ(v->hidden_size, ji(hv, "hidden_size"));
            EQ(v->intermediate_size, ji(hv, "intermediate_size"));
            EQ(v->num_heads, ji(hv, "num_heads"));
            EQ(v->in_channels, ji(hv, "in_channels"));
            EQ(v->patch_size, ji(hv, "patch_size"));
            EQ(v->temporal_patch_size, ji(hv, "temporal_patch_size"));
            EQ(v->spatial_merge_size, ji(hv, "spatial_merge_size"));
            EQ(v->out_hidden_size, ji(hv, "out_hidden_size"));
            EQ(v->num_position_embeddings, ji(hv, "num_position_embeddings"));
            json_t *ds = json_object_get(hv, "deepstack_visual_indexes");
            EQ(v->n_deepstack, json_array_size(ds));
            for (int k = 0; k < v->n_deepstack && k < (int)json_array_size(ds); k++)
                EQ(v->deepstack_visual_indexes[k], json_integer_value(json_array_get(ds, (size_t)k)));
            CHECK_STR(v->hidden_act, json_string_value(json_object_get(hv, "hidden_act")));
            CHECKF(v->rope_theta == json_number_value(json_object_get(json_object_get(hv, "rope_parameters"), "rope_theta")),
                   "%s: vision rope_theta %g", name, v->rope_theta);
            EQ(cfg.image_token_id, ji(htop, "image_token_id"));
            EQ(cfg.video_token_id, ji(htop, "video_token_id"));
            EQ(cfg.vision_start_token_id, ji(htop, "vision_start_token_id"));
            EQ(cfg.vision_end_token_id, ji(htop, "vision_end_token_id"));
            /* What really ties lm_head in transformers. */
            EQ(cfg.tie_word_embeddings, json_is_true(json_object_get(hf, "lm_head_tied")));
            json_t *ttie = json_object_get(ht, "tie_word_embeddings");
            if (json_is_boolean(ttie)) EQ(cfg.text_config.tie_word_embeddings, json_is_true(ttie));
            json_t *q = json_object_get(htop, "quantization_config");
            int fp8 = json_is_object(q) && !strcmp(json_string_value(json_object_get(q, "quant_method")), "fp8");
            EQ(cfg.quantization_config.fp8, fp8);
            if (fp8) {
                EQ(cfg.quantization_config.weight_block_size[0], json_integer_value(json_array_get(json_object_get(q, "weight_block_size"), 0)));
                EQ(cfg.quantization_config.weight_block_size[1], json_integer_value(json_array_get(json_object_get(q, "weight_block_size"), 1)));
            }
#undef EQ
            rc = iris_config_validate(&cfg, name, &err);
            const char *rej = expected_rejection(name);
            if (rej) {
                CHECKF(rc == IRIS_EFORMAT, "%s: validate gave %d, expected a rejection", name, rc);
                if (rc) CHECK_CONTAINS(err.msg, rej);
            } else {
                CHECKF(rc == 0, "%s: %s", name, err.msg);
            }
        }
        free(text);
    }
    json_decref(fx);
}

/* QWEN3VL.md §1.1, written out (the legacy rope form). */
static const char *CFG_2B =
    "{\"architectures\":[\"Qwen3VLForConditionalGeneration\"],\"image_token_id\":151655,\"model_type\":\"qwen3_vl\","
    "\"text_config\":{\"attention_bias\":false,\"attention_dropout\":0.0,\"bos_token_id\":151643,\"dtype\":\"bfloat16\","
    "\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":2048,\"initializer_range\":0.02,"
    "\"intermediate_size\":6144,\"max_position_embeddings\":262144,\"model_type\":\"qwen3_vl_text\","
    "\"num_attention_heads\":16,\"num_hidden_layers\":28,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-06,"
    "\"rope_scaling\":{\"mrope_interleaved\":true,\"mrope_section\":[24,20,20],\"rope_type\":\"default\"},"
    "\"rope_theta\":5000000,\"tie_word_embeddings\":true,\"use_cache\":true,\"vocab_size\":151936},"
    "\"tie_word_embeddings\":true,\"transformers_version\":\"4.57.0.dev0\",\"video_token_id\":151656,"
    "\"vision_config\":{\"deepstack_visual_indexes\":[5,11,17],\"depth\":24,\"hidden_act\":\"gelu_pytorch_tanh\","
    "\"hidden_size\":1024,\"in_channels\":3,\"initializer_range\":0.02,\"intermediate_size\":4096,"
    "\"model_type\":\"qwen3_vl\",\"num_heads\":16,\"num_position_embeddings\":2304,\"out_hidden_size\":2048,"
    "\"patch_size\":16,\"spatial_merge_size\":2,\"temporal_patch_size\":2},"
    "\"vision_end_token_id\":151653,\"vision_start_token_id\":151652}";

/* The 4B one in the newer form transformers 5 writes (rope_parameters). */
static const char *CFG_4B =
    "{\"architectures\":[\"Qwen3VLForConditionalGeneration\"],\"model_type\":\"qwen3_vl\",\"tie_word_embeddings\":true,"
    "\"text_config\":{\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":2560,\"intermediate_size\":9728,"
    "\"max_position_embeddings\":262144,\"num_attention_heads\":32,\"num_hidden_layers\":36,\"num_key_value_heads\":8,"
    "\"rms_norm_eps\":1e-06,\"rope_parameters\":{\"mrope_interleaved\":true,\"mrope_section\":[24,20,20],"
    "\"rope_type\":\"default\",\"rope_theta\":5000000.0},\"tie_word_embeddings\":true,\"vocab_size\":151936},"
    "\"vision_config\":{\"deepstack_visual_indexes\":[5,11,17],\"depth\":24,\"hidden_act\":\"gelu_pytorch_tanh\","
    "\"hidden_size\":1024,\"in_channels\":3,\"intermediate_size\":4096,\"num_heads\":16,"
    "\"num_position_embeddings\":2304,\"out_hidden_size\":2560,\"patch_size\":16,\"spatial_merge_size\":2,"
    "\"temporal_patch_size\":2,\"rope_parameters\":{\"rope_theta\":10000.0,\"rope_type\":\"axial\"}}}";

IRIS_TEST(config_qwen3vl_2b_4b) {
    iris_config c;
    iris_err err = {0};
    int rc = iris_config_parse(CFG_2B, "2B/config.json", &c, &err);
    CHECKF(rc == 0, "%s", err.msg);
    CHECK_STR(c.model_type, "qwen3_vl");
    CHECK_STR(c.architecture, "Qwen3VLForConditionalGeneration");
    CHECK_EQ_INT(c.text_config.hidden_size, 2048);
    CHECK_EQ_INT(c.text_config.num_hidden_layers, 28);
    CHECK_EQ_INT(c.text_config.num_attention_heads, 16);
    CHECK_EQ_INT(c.text_config.num_key_value_heads, 8);
    CHECK_EQ_INT(c.text_config.intermediate_size, 6144);
    CHECK(c.text_config.rope_theta == 5e6);
    CHECK_EQ_INT(c.text_config.mrope_section[0], 24);
    CHECK_EQ_INT(c.text_config.mrope_interleaved, 1);
    CHECK_EQ_INT(c.tie_word_embeddings, 1);
    CHECK_EQ_INT(c.vision_config.out_hidden_size, 2048);
    CHECK_EQ_INT(c.vision_config.n_deepstack, 3);
    CHECK_EQ_INT(c.vision_config.deepstack_visual_indexes[2], 17);
    CHECK(c.vision_config.rope_theta == 10000.0);
    CHECK_EQ_INT(c.quantization_config.fp8, 0);
    rc = iris_config_parse(CFG_4B, "4B/config.json", &c, &err);
    CHECKF(rc == 0, "%s", err.msg);
    CHECK_EQ_INT(c.text_config.hidden_size, 2560);
    CHECK_EQ_INT(c.text_config.num_hidden_layers, 36);
    CHECK_EQ_INT(c.text_config.num_attention_heads, 32);
    CHECK_EQ_INT(c.text_config.intermediate_size, 9728);
    CHECK(c.text_config.rope_theta == 5e6);
    CHECK_EQ_INT(c.text_config.mrope_section[2], 20);
    CHECK_EQ_INT(c.vision_config.out_hidden_size, 2560);
    CHECK_EQ_INT(c.image_token_id, 151655); /* defaulted: not in this file */
}

/* Patch one key of the 2B config: replace the first `from` with `to`. */
static int parse_patched(const char *from, const char *to, iris_config *c, iris_err *err) {
    const char *p = strstr(CFG_2B, from);
    if (!p) {
        iris_test_fail(__FILE__, __LINE__, "pattern %s not in CFG_2B", from);
        return 99;
    }
    size_t n = strlen(CFG_2B) + strlen(to) + 1;
    char *s = malloc(n);
    snprintf(s, n, "%.*s%s%s", (int)(p - CFG_2B), CFG_2B, to, p + strlen(from));
    int rc = iris_config_parse(s, "config.json", c, err);
    free(s);
    return rc;
}

IRIS_TEST(config_unsupported_model) {
    iris_config c;
    iris_err err = {0};
    CHECK_EQ_INT(parse_patched("\"model_type\":\"qwen3_vl\",\"text", "\"model_type\":\"qwen2_5_vl\",\"text", &c, &err),
                 IRIS_EUNSUPPORTED);
    CHECK_CONTAINS(err.msg, "config.json: model_type \"qwen2_5_vl\" is not supported");
    CHECK_CONTAINS(err.msg, "qwen3_vl");
    CHECK_EQ_INT(parse_patched("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration", &c, &err),
                 IRIS_EUNSUPPORTED);
    CHECK_CONTAINS(err.msg, "architecture \"Qwen3VLMoeForConditionalGeneration\" is not supported");
    CHECK_EQ_INT(iris_config_parse("{\"architectures\":[\"X\"]}", "config.json", &c, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "\"model_type\" is missing");
    CHECK_EQ_INT(parse_patched("\"rope_type\":\"default\"", "\"rope_type\":\"yarn\"", &c, &err), IRIS_EUNSUPPORTED);
    CHECK_CONTAINS(err.msg, "rope_type \"yarn\" is not supported");
    CHECK_EQ_INT(parse_patched("\"tie_word_embeddings\":true,\"transformers",
                               "\"quantization_config\":{\"quant_method\":\"awq\"},\"transformers", &c, &err),
                 IRIS_EUNSUPPORTED);
    CHECK_CONTAINS(err.msg, "quant_method \"awq\" is not supported");
    CHECK_EQ_INT(parse_patched("\"hidden_act\":\"silu\"", "\"hidden_act\":\"gelu\"", &c, &err), IRIS_EUNSUPPORTED);
    CHECK_CONTAINS(err.msg, "text_config.hidden_act \"gelu\"");
}

IRIS_TEST(config_fp8_quantization) {
    iris_config c;
    iris_err err = {0};
    int rc = parse_patched("\"tie_word_embeddings\":true,\"transformers",
                           "\"quantization_config\":{\"activation_scheme\":\"dynamic\",\"fmt\":\"e4m3\",\"quant_method\":"
                           "\"fp8\",\"weight_block_size\":[128,128],\"modules_to_not_convert\":[\"lm_head\"]},"
                           "\"tie_word_embeddings\":true,\"transformers",
                           &c, &err);
    CHECKF(rc == 0, "%s", err.msg);
    CHECK_EQ_INT(c.quantization_config.fp8, 1);
    CHECK_EQ_INT(c.quantization_config.weight_block_size[1], 128);
    CHECK_EQ_INT(parse_patched("\"tie_word_embeddings\":true,\"transformers",
                               "\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[128]},"
                               "\"transformers", &c, &err),
                 IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "weight_block_size must be two positive integers");
}

IRIS_TEST(config_out_of_range) {
    iris_config c;
    iris_err err = {0};
    CHECK_EQ_INT(parse_patched("\"num_attention_heads\":16", "\"num_attention_heads\":0", &c, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "config.json: text_config.num_attention_heads is 0; it must be positive");
    CHECK_EQ_INT(parse_patched("\"num_key_value_heads\":8", "\"num_key_value_heads\":-3", &c, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "num_key_value_heads is -3");
    CHECK_EQ_INT(parse_patched("\"num_key_value_heads\":8", "\"num_key_value_heads\":6", &c, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "num_attention_heads (16) is not a multiple of num_key_value_heads (6)");
    CHECK_EQ_INT(parse_patched("[24,20,20]", "[24,20,24]", &c, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "mrope_section [24, 20, 24] sums to 68 but must sum to head_dim/2 = 64");
    CHECK_EQ_INT(parse_patched("[24,20,20]", "[24,40]", &c, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "mrope_section has 2 entries");
    CHECK_EQ_INT(parse_patched("[5,11,17]", "[5,11,24]", &c, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "deepstack_visual_indexes[2] is 24, outside the 24 vision blocks");
    CHECK_EQ_INT(parse_patched("\"hidden_size\":2048", "\"hidden_size\":\"2048\"", &c, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "text_config.hidden_size must be an integer");
    CHECK_EQ_INT(parse_patched("\"hidden_size\":2048", "\"hidden_size\":2304", &c, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "out_hidden_size (2048) differs from text_config.hidden_size (2304)");
    CHECK_EQ_INT(parse_patched("\"num_position_embeddings\":2304", "\"num_position_embeddings\":2300", &c, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "num_position_embeddings (2300) is not a square");
    CHECK_EQ_INT(parse_patched("\"vocab_size\":151936", "\"vocab_size\":2000000000", &c, &err), IRIS_ELIMIT);
    CHECK_CONTAINS(err.msg, "vocab_size is 2000000000, over the sanity limit");
    CHECK_EQ_INT(parse_patched("\"rms_norm_eps\":1e-06", "\"rms_norm_eps\":0", &c, &err), IRIS_EFORMAT);
    CHECK_EQ_INT(iris_config_parse("{\"model_type\":", "config.json", &c, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "config.json: not valid JSON");
    CHECK_EQ_INT(parse_patched("\"depth\":24", "\"depth\":24,\"depth\":2", &c, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "duplicate");
}

IRIS_TEST(config_load_dirs) {
    iris_config c;
    iris_err err = {0};
    /* transformers 5.17's own serialisation of a tiny model. */
    int rc = iris_config_load("tests/fixtures/loader/tiny_sharded", &c, &err);
    CHECKF(rc == 0, "%s", err.msg);
    CHECK_EQ_INT(c.text_config.hidden_size, 64);
    CHECK_EQ_INT(c.text_config.mrope_section[0], 4);
    CHECK_EQ_INT(c.tie_word_embeddings, 1);
    char dir[] = "/tmp/iris-cfg-XXXXXX";
    REQUIRE(mkdtemp(dir));
    CHECK_EQ_INT(iris_config_load(dir, &c, &err), IRIS_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "no config.json");
    /* Missing generation / preprocessor configs: Qwen3-VL's published ones. */
    iris_generation_config gc;
    CHECK_EQ_INT(iris_generation_config_load(dir, &gc, &err), 0);
    CHECK_EQ_INT(gc.n_eos, 2);
    CHECK_EQ_INT(gc.eos_token_id[0], 151645);
    CHECK_EQ_INT(gc.eos_token_id[1], 151643);
    CHECK_EQ_INT(gc.top_k, 20);
    CHECK(gc.temperature == 0.7f && gc.top_p == 0.8f && gc.do_sample == 1);
    iris_preprocessor_config pc;
    CHECK_EQ_INT(iris_preprocessor_config_load(dir, &pc, &err), 0);
    CHECK_EQ_INT(pc.min_pixels, 65536);
    CHECK_EQ_INT(pc.max_pixels, 16777216);
    CHECK_EQ_INT(pc.patch_size, 16);
    CHECK(pc.image_mean[0] == 0.5f && pc.image_std[2] == 0.5f);
    rmdir(dir);
}

/* GenerationConfig reference cases: null in transformers means "the class
 * default" (greedy, top_k 50, top_p 1, temperature 1). */
IRIS_TEST(config_generation_matches_transformers) {
    json_t *fx = hf_fixture();
    REQUIRE(fx);
    size_t i;
    json_t *cs;
    int n = 0;
    json_array_foreach(json_object_get(fx, "generation"), i, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        json_t *hf = json_object_get(cs, "hf");
        char *text = json_dumps(json_object_get(cs, "input"), 0);
        iris_generation_config gc;
        iris_err err = {0};
        int rc = iris_generation_config_parse(text, name, &gc, &err);
        free(text);
        CHECKF(rc == 0, "%s: %s", name, err.msg);
        json_t *v;
#define OR(k, d) ((v = json_object_get(hf, k)) && !json_is_null(v) ? json_number_value(v) : (d))
        CHECKF(gc.bos_token_id == OR("bos_token_id", -1), "%s bos", name);
        CHECKF(gc.pad_token_id == OR("pad_token_id", -1), "%s pad", name);
        CHECKF(gc.top_k == OR("top_k", 50), "%s top_k", name);
        CHECKF(gc.top_p == (float)OR("top_p", 1.0), "%s top_p", name);
        CHECKF(gc.temperature == (float)OR("temperature", 1.0), "%s temperature", name);
        CHECKF(gc.repetition_penalty == (float)OR("repetition_penalty", 1.0), "%s rep", name);
        CHECKF(gc.do_sample == json_is_true(json_object_get(hf, "do_sample")), "%s do_sample", name);
#undef OR
        json_t *eos = json_object_get(hf, "eos_token_id");
        if (json_is_integer(eos)) {
            CHECK_EQ_INT(gc.n_eos, 1);
            CHECK_EQ_INT(gc.eos_token_id[0], json_integer_value(eos));
        } else {
            CHECK_EQ_INT(gc.n_eos, json_array_size(eos));
            for (int k = 0; k < gc.n_eos; k++) CHECK_EQ_INT(gc.eos_token_id[k], json_integer_value(json_array_get(eos, (size_t)k)));
        }
        n++;
    }
    CHECK_EQ_INT(n, 3);
    json_decref(fx);
    iris_generation_config gc;
    iris_err err = {0};
    CHECK_EQ_INT(iris_generation_config_parse("{\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}", "g.json", &gc, &err), IRIS_ELIMIT);
    CHECK_CONTAINS(err.msg, "g.json: eos_token_id has 9 entries");
    CHECK_EQ_INT(iris_generation_config_parse("{\"eos_token_id\":\"x\"}", "g.json", &gc, &err), IRIS_EFORMAT);
    CHECK_EQ_INT(iris_generation_config_parse("{\"top_p\":0}", "g.json", &gc, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "top_p 0");
}

/* Qwen2VLImageProcessor reference cases: min/max pixels from the size areas,
 * top-level min_pixels/max_pixels winning over size, class defaults. */
IRIS_TEST(config_preprocessor_matches_transformers) {
    json_t *fx = hf_fixture();
    REQUIRE(fx);
    size_t i;
    json_t *cs;
    int n = 0;
    json_array_foreach(json_object_get(fx, "preprocessor"), i, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        json_t *hf = json_object_get(json_object_get(cs, "hf"), "slow");
        char *text = json_dumps(json_object_get(cs, "input"), 0);
        iris_preprocessor_config pc;
        iris_err err = {0};
        int rc = iris_preprocessor_config_parse(text, name, &pc, &err);
        free(text);
        CHECKF(rc == 0, "%s: %s", name, err.msg);
        const char *size = json_string_value(json_object_get(hf, "size"));
        REQUIRE(size);
        const char *lo = strstr(size, "shortest_edge="), *hi = strstr(size, "longest_edge=");
        REQUIRE(lo && hi);
        CHECKF(pc.min_pixels == atoll(lo + 14), "%s: min_pixels %lld vs %s", name, (long long)pc.min_pixels, size);
        CHECKF(pc.max_pixels == atoll(hi + 13), "%s: max_pixels %lld vs %s", name, (long long)pc.max_pixels, size);
        CHECK_EQ_INT(pc.patch_size, ji(hf, "patch_size"));
        CHECK_EQ_INT(pc.temporal_patch_size, ji(hf, "temporal_patch_size"));
        CHECK_EQ_INT(pc.merge_size, ji(hf, "merge_size"));
        for (int k = 0; k < 3; k++) {
            CHECK(pc.image_mean[k] == (float)json_number_value(json_array_get(json_object_get(hf, "image_mean"), (size_t)k)));
            CHECK(pc.image_std[k] == (float)json_number_value(json_array_get(json_object_get(hf, "image_std"), (size_t)k)));
        }
        n++;
    }
    CHECK_EQ_INT(n, 4);
    json_decref(fx);
    iris_preprocessor_config pc;
    iris_err err = {0};
    CHECK_EQ_INT(iris_preprocessor_config_parse("{\"size\":{\"shortest_edge\":1000,\"longest_edge\":10}}", "p.json", &pc, &err),
                 IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "p.json: min_pixels 1000 / max_pixels 10");
    CHECK_EQ_INT(iris_preprocessor_config_parse("{\"image_std\":[0.5,0,0.5]}", "p.json", &pc, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "image_std[1] is 0");
}
