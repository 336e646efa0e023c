/* test_inspect.c: the `iris inspect` report on transformers' tiny sharded
 * checkpoint (by directory and by repo id in an HF cache layout), FP8 linear
 * detection, and the config/tensor cross-check warnings. */
#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/inspect.h"
#include "test.h"

#define TINY "tests/fixtures/loader/tiny_sharded"

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (e->d_type == DT_DIR) rm_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    s[n] = 0;
    fclose(f);
    return s;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void write_st(const char *path, const char *header, size_t data_len) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    uint64_t n = strlen(header);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(n >> (8 * i));
    fwrite(len8, 1, 8, f);
    fputs(header, f);
    for (size_t i = 0; i < data_len; i++) fputc(0, f);
    fclose(f);
}

static long long ji(const json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

static const json_t *part_row(const json_t *report, const char *part) {
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(json_object_get(report, "totals"), "by_part"), i, r)
        if (!strcmp(json_string_value(json_object_get(r, "part")), part)) return r;
    return NULL;
}

/* Totals against the listing the `safetensors` package gave for the same
 * files, and the parameter count transformers wrote into the index. */
static void check_tiny_report(const json_t *r) {
    json_error_t jerr;
    json_t *ref = json_load_file("tests/fixtures/loader/tiny_sharded.json", 0, &jerr);
    REQUIRE(ref);
    long long want_params[3] = {0}, want_n[3] = {0};
    const char *parts[3] = {"vision", "language model", "embeddings"};
    const char *name;
    json_t *t;
    json_object_foreach(json_object_get(ref, "tensors"), name, t) {
        long long n = 1;
        size_t d;
        json_t *x;
        json_array_foreach(json_object_get(t, "shape"), d, x) n *= json_integer_value(x);
        int p = !strncmp(name, "model.visual.", 13) ? 0 : strstr(name, "embed_tokens") ? 2 : 1;
        want_params[p] += n;
        want_n[p]++;
    }
    const json_t *tot = json_object_get(r, "totals");
    CHECK_EQ_INT(ji(tot, "tensors"), json_object_size(json_object_get(ref, "tensors")));
    CHECK_EQ_INT(ji(tot, "params"), 254752); /* index metadata.total_parameters */
    CHECK_EQ_INT(ji(tot, "bytes"), 509504);  /* index metadata.total_size */
    for (int p = 0; p < 3; p++) {
        const json_t *row = part_row(r, parts[p]);
        CHECKF(row != NULL, "no part %s", parts[p]);
        if (!row) continue;
        CHECK_EQ_INT(ji(row, "params"), want_params[p]);
        CHECK_EQ_INT(ji(row, "tensors"), want_n[p]);
        CHECK_EQ_INT(ji(row, "bytes"), 2 * want_params[p]); /* all BF16 */
    }
    CHECK_STR(json_string_value(json_object_get(r, "lm_head")), "tied");
    CHECK_EQ_INT(json_array_size(json_object_get(r, "warnings")), 0);
    CHECK_EQ_INT(json_array_size(json_object_get(r, "files")), 4);
    const json_t *tc = json_object_get(json_object_get(r, "config"), "text_config");
    CHECK_EQ_INT(ji(tc, "hidden_size"), 64);
    CHECK_EQ_INT(ji(tc, "num_hidden_layers"), 2);
    /* Name order with numbers compared as numbers. */
    const json_t *ts = json_object_get(r, "tensors");
    CHECK_STR(json_string_value(json_object_get(json_array_get(ts, 0), "name")), "model.language_model.embed_tokens.weight");
    json_decref(ref);
}

IRIS_TEST(inspect_model_directory) {
    json_t *r = NULL;
    iris_err err = {0};
    int rc = iris_inspect(TINY, &r, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc) return;
    check_tiny_report(r);
    /* The text form prints the same totals. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    iris_inspect_print(f, r, 1);
    fclose(f);
    CHECK_CONTAINS(buf, "qwen3_vl (Qwen3VLForConditionalGeneration)");
    CHECK_CONTAINS(buf, "model.visual.patch_embed.proj.weight");
    CHECK_CONTAINS(buf, "[32, 3, 2, 16, 16]");
    CHECK_CONTAINS(buf, "254752");
    CHECK_CONTAINS(buf, "509504");
    CHECK_CONTAINS(buf, "lm_head tied");
    free(buf);
    json_decref(r);
}

/* A repo id resolved in a Hugging Face hub cache layout (refs/main ->
 * snapshots/<commit>/ with links into the files). */
IRIS_TEST(inspect_repo_id_in_hf_cache) {
    char cache[] = "/tmp/iris-hub-XXXXXX", p[1024], abs[1024], cwd[512];
    REQUIRE(mkdtemp(cache));
    REQUIRE(getcwd(cwd, sizeof cwd));
    const char *commit = "0123456789abcdef0123456789abcdef01234567";
    snprintf(p, sizeof p, "%s/models--Tiny--Qwen3-VL", cache);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/models--Tiny--Qwen3-VL/refs", cache);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/models--Tiny--Qwen3-VL/refs/main", cache);
    write_text(p, commit);
    snprintf(p, sizeof p, "%s/models--Tiny--Qwen3-VL/snapshots", cache);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/models--Tiny--Qwen3-VL/snapshots/%s", cache, commit);
    mkdir(p, 0755);
    DIR *d = opendir(TINY);
    REQUIRE(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(abs, sizeof abs, "%s/%s/%s", cwd, TINY, e->d_name);
        snprintf(p, sizeof p, "%s/models--Tiny--Qwen3-VL/snapshots/%s/%s", cache, commit, e->d_name);
        CHECK(symlink(abs, p) == 0);
    }
    closedir(d);
    const char *old = getenv("HF_HUB_CACHE");
    char *saved = old ? strdup(old) : NULL;
    setenv("HF_HUB_CACHE", cache, 1);
    const char *ids[2] = {"Tiny/Qwen3-VL", "Tiny/Qwen3-VL@0123456789abcdef0123456789abcdef01234567"};
    for (int k = 0; k < 2; k++) {
        json_t *r = NULL;
        iris_err err = {0};
        int rc = iris_inspect(ids[k], &r, &err);
        CHECKF(rc == 0, "%s: %s", ids[k], err.msg);
        if (rc) continue;
        CHECK_CONTAINS(json_string_value(json_object_get(r, "dir")), commit);
        check_tiny_report(r);
        json_decref(r);
    }
    json_t *r = NULL;
    iris_err err = {0};
    CHECK_EQ_INT(iris_inspect("Tiny/Absent", &r, &err), IRIS_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "Tiny/Absent");
    if (saved) setenv("HF_HUB_CACHE", saved, 1);
    else unsetenv("HF_HUB_CACHE");
    free(saved);
    rm_tree(cache);
}

IRIS_TEST(inspect_fp8_linears_single_file) {
    char dir[] = "/tmp/iris-insp-XXXXXX", p[256];
    REQUIRE(mkdtemp(dir));
    snprintf(p, sizeof p, "%s/m.safetensors", dir);
    write_st(p,
             "{\"model.language_model.layers.0.self_attn.q_proj.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[256,128],\"data_offsets\":[0,32768]},"
             "\"model.language_model.layers.0.self_attn.q_proj.weight_scale_inv\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[32768,32776]},"
             "\"model.language_model.layers.0.self_attn.k_proj.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[128,128],\"data_offsets\":[32776,49160]},"
             "\"model.visual.blocks.0.attn.qkv.weight\":{\"dtype\":\"BF16\",\"shape\":[6,2],\"data_offsets\":[49160,49184]}}",
             49184);
    json_t *r = NULL;
    iris_err err = {0};
    int rc = iris_inspect(p, &r, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        const json_t *fp8 = json_object_get(r, "fp8");
        CHECK_EQ_INT(ji(fp8, "linears"), 1);
        CHECK_EQ_INT(json_array_size(json_object_get(fp8, "unscaled_f8_weights")), 1);
        CHECK_CONTAINS(json_string_value(json_array_get(json_object_get(r, "warnings"), 0)),
                       "1 F8_E4M3 weights have no sibling weight_scale_inv (first: model.language_model.layers.0.self_attn.k_proj.weight)");
        CHECK(json_object_get(r, "config") == NULL);
        /* The scale is not a parameter but its bytes count. */
        const json_t *lm = part_row(r, "language model");
        CHECK(lm && ji(lm, "params") == 256 * 128 + 128 * 128 && ji(lm, "bytes") == 49160);
        const json_t *v = part_row(r, "vision");
        CHECK(v && ji(v, "params") == 12 && ji(v, "bytes") == 24);
        json_decref(r);
    }
    rm_tree(dir);
}

/* Tensors that do not match the config: reported, not fatal. */
IRIS_TEST(inspect_warns_on_mismatch) {
    char dir[] = "/tmp/iris-insp-XXXXXX", p[256];
    REQUIRE(mkdtemp(dir));
    char *cfg = slurp(TINY "/config.json");
    REQUIRE(cfg);
    /* Untie: the top-level key (the one transformers ties by). */
    const char *key = "\"tie_word_embeddings\": true,\n  \"transformers_version\"";
    char *tie = strstr(cfg, key);
    REQUIRE(tie);
    size_t n = strlen(cfg) + 8;
    char *untied = malloc(n);
    snprintf(untied, n, "%.*s\"tie_word_embeddings\": false,%s", (int)(tie - cfg), cfg,
             tie + strlen("\"tie_word_embeddings\": true,"));
    free(cfg);
    cfg = untied;
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, cfg);
    free(cfg);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    write_st(p, "{\"model.language_model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[999,64],\"data_offsets\":[0,127872]}}",
             127872);
    json_t *r = NULL;
    iris_err err = {0};
    int rc = iris_inspect(dir, &r, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        char *all = json_dumps(json_object_get(r, "warnings"), 0);
        CHECK_CONTAINS(all, "embed_tokens is [999, 64] but config.json says vocab_size 1000 x hidden_size 64");
        CHECK_CONTAINS(all, "the checkpoint has 0 text layers, config.json says num_hidden_layers 2");
        CHECK_CONTAINS(all, "the checkpoint has 0 vision blocks, config.json says depth 2");
        CHECK_CONTAINS(all, "lm_head.weight is not stored and config.json does not tie it");
        CHECK_STR(json_string_value(json_object_get(r, "lm_head")), "missing");
        free(all);
        json_decref(r);
    }
    /* A broken config is an error naming the file. */
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, "{\"model_type\": \"llava\"}");
    CHECK_EQ_INT(iris_inspect(dir, &r, &err), IRIS_EUNSUPPORTED);
    CHECK_CONTAINS(err.msg, "config.json: model_type \"llava\" is not supported");
    rm_tree(dir);
}

IRIS_TEST(inspect_parts) {
    CHECK_STR(iris_inspect_part("model.visual.blocks.0.attn.qkv.weight"), "vision");
    CHECK_STR(iris_inspect_part("visual.merger.linear_fc1.weight"), "vision");
    CHECK_STR(iris_inspect_part("model.language_model.embed_tokens.weight"), "embeddings");
    CHECK_STR(iris_inspect_part("lm_head.weight"), "embeddings");
    CHECK_STR(iris_inspect_part("model.language_model.layers.3.mlp.up_proj.weight_scale_inv"), "language model");
    CHECK_STR(iris_inspect_part("model.language_model.norm.weight"), "language model");
}
