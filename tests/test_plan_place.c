/* test_plan_place.c: the memory plan's placement for small cards (planner.h --embeddings,
 * --lm-head-dtype; planner_place.c): Qwen3-VL-8B with 4-bit linears (iris synth --like 8B --dtype
 * int4 headers: untied BF16 embeddings and lm_head of 151,936 x 4,096) under a 7 GiB cap with an
 * 8K context, the auto rule, the flags that pin it, the refusal that names what fits, and the 4B
 * (tied) whose plan auto leaves alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/planner.h"
#include "test.h"
#include "tools/synth.h"

#define GIB (1ull << 30)

static char g_dir[3][64];

static void remove_dirs(void) {
    char p[128];
    for (int i = 0; i < 3; i++) {
        if (!g_dir[i][0]) continue;
        snprintf(p, sizeof p, "%s/model.safetensors", g_dir[i]), unlink(p);
        snprintf(p, sizeof p, "%s/config.json", g_dir[i]), unlink(p);
        rmdir(g_dir[i]);
    }
}

/* Headers of a synth preset (0: 8B int4, 1: 4B fp8, 2: 8B bf16), written once, loaded into m. */
static int load_preset(int which, iris_plan_model *m) {
    static const char *like[3] = {"8B", "4B", "8B"};
    iris_err err = {0};
    if (!g_dir[which][0]) {
        snprintf(g_dir[which], sizeof g_dir[which], "/tmp/iris-plan-place-XXXXXX");
        if (!mkdtemp(g_dir[which])) return g_dir[which][0] = 0, -1;
        static int registered;
        if (!registered++) atexit(remove_dirs);
        iris_synth_opts so = {.like = like[which], .int4 = which == 0, .fp8 = which == 1};
        if (iris_synth_write_headers(g_dir[which], &so, &err)) {
            fprintf(stderr, "  %s\n", err.msg);
            return -1;
        }
    }
    int rc = iris_plan_model_load(g_dir[which], which == 0 ? "8B-INT4" : which == 1 ? "4B-FP8" : "8B", m, &err);
    if (rc) fprintf(stderr, "  %s\n", err.msg);
    return rc;
}

static uint64_t limit_budget(uint64_t limit) {
    iris_plan_budget_opts o = {.gpu_memory_limit = limit};
    uint64_t b = 0;
    char how[128];
    iris_err err = {0};
    return iris_plan_budget(&o, 80 * GIB, 79 * GIB, &b, how, sizeof how, &err) ? 0 : b;
}

/* A test's plan: preset which's model in m, default settings in st, and a zeroed plan (the
 * caller frees it); NULL, the failure recorded, when the preset does not load. */
static iris_plan *plan_setup(int which, iris_plan_model *m, iris_plan_settings *st) {
    iris_plan_settings_default(st);
    if (load_preset(which, m)) {
        iris_test_fail(__FILE__, __LINE__, "preset %d does not load", which);
        return NULL;
    }
    iris_plan *p = calloc(1, sizeof *p);
    if (!p) iris_test_fail(__FILE__, __LINE__, "out of memory");
    return p;
}

static void show(const iris_plan *p) {
    if (!getenv("IRIS_PLANNER_VERBOSE")) return;
    char *t = iris_plan_format(p);
    fprintf(stderr, "%s", t ? t : "");
    free(t);
}

/* The table and the lm_head of the 8B: BF16 [151,936, 4,096] each, untied. */
IRIS_TEST(plan_place_8b_int4_model) {
    iris_plan_model m;
    REQUIRE(load_preset(0, &m) == 0);
    uint64_t table = 151936ull * 4096 * 2;
    CHECK_EQ_INT(m.embed_bytes, table);
    CHECK_EQ_INT(m.lm_head_bytes, table);
    CHECK_EQ_INT(m.lm_head_dtype, IRIS_DT_BF16);
    CHECK_EQ_INT(m.embed_dtype, IRIS_DT_BF16);
    /* FP8 copy: one byte a weight, fp32 multipliers of 1,187 x 32 blocks (aligned to 256 B) */
    CHECK_EQ_INT(m.lm_head_fp8_scale_bytes, (1187ull * 32 * 4 + 255) / 256 * 256);
    CHECK_EQ_INT(m.lm_head_fp8_bytes, 151936ull * 4096 + m.lm_head_fp8_scale_bytes);
    CHECK(m.n_int4_linears == 7 * 36);
    CHECK_EQ_INT(iris_plan_placed_weights(&m, 1, 1, NULL), m.weight_bytes - 2 * table + m.lm_head_fp8_bytes);
    CHECK_EQ_INT(iris_plan_placed_weights(&m, 1, 0, NULL), m.weight_bytes - table);
    CHECK_EQ_INT(iris_plan_placed_weights(&m, 0, 0, NULL), m.weight_bytes);
}

/* The figure: 8B-INT4 under --gpu-memory-limit 7GiB with --max-model-len 8192 fits,
 * auto taking both the host table and the FP8 lm_head, and the plan says so with the bytes. */
IRIS_TEST(plan_place_8b_int4_7gib_8k) {
    uint64_t budget = limit_budget(7 * GIB);
    REQUIRE(budget == 7 * GIB);
    iris_plan_model m;
    iris_plan_settings st;
    iris_plan *p = plan_setup(0, &m, &st);
    REQUIRE(p);
    st.max_model_len = 8192;
    iris_err err = {0};
    int rc = iris_plan_make(&m, &st, budget, "--gpu-memory-limit 7.00 GiB", 0, p, &err);
    show(p);
    CHECKF(rc == 0, "%s", err.msg);
    CHECK(p->fits);
    CHECK_EQ_INT(p->context, 8192);
    CHECK(p->total_bytes <= 7 * GIB);
    CHECK(p->embed_host && p->embed_auto);
    CHECK(p->lm_head_fp8 && p->lm_head_auto);
    CHECK_EQ_INT(p->part_bytes[IRIS_PART_WEIGHTS], iris_plan_placed_weights(&m, 1, 1, NULL));
    CHECK_EQ_INT(p->lm_head_bytes, m.lm_head_fp8_bytes);
    /* tried in order: all on the card, the table on the host, then the FP8 lm_head */
    CHECK_EQ_INT(p->n_place_tries, 3);
    CHECK(!p->place_tries[0].fits && !p->place_tries[1].fits && p->place_tries[2].fits);
    /* the FP8 codes and multipliers are in the weights' dtypes; the table's BF16 bytes are not */
    CHECK_EQ_INT(p->dtype_bytes[IRIS_DT_F8_E4M3], 151936ull * 4096);
    CHECK_EQ_INT(p->dtype_bytes[IRIS_DT_BF16], m.dtype_bytes[IRIS_DT_BF16] - 2 * 151936ull * 4096 * 2);
    char *t = iris_plan_format(p);
    REQUIRE(t);
    CHECK_CONTAINS(t, "token embeddings: in host memory, 1.16 GiB off the card; each step uploads its rows (8,192 B a token); auto");
    CHECK_CONTAINS(t, "lm_head: FP8 quantized at load, 593.6 MiB on the card");
    CHECK_CONTAINS(t, "(stored BF16 1.16 GiB); auto: as stored it left no context that fits");
    CHECK_CONTAINS(t, "context: 8,192 tokens");
    free(t);
    char *j = iris_plan_json(p);
    REQUIRE(j);
    CHECK_CONTAINS(j, "\"embeddings\": \"host\"");
    CHECK_CONTAINS(j, "\"lm_head_dtype\": \"F8_E4M3\"");
    CHECK_CONTAINS(j, "\"target_context\": 8192");
    free(j);

    /* the same with a 1 MP image budget explicit and --kv-cache-dtype fp8: more room, the same choices */
    st.kv_cache_dtype = IRIS_KV_FP8;
    CHECK(iris_plan_make(&m, &st, budget, "", 0, p, &err) == 0);
    CHECK(p->embed_host);
    free(p);
}

/* Without --max-model-len auto takes the host table (exact) for a longer context but keeps the
 * stored lm_head: the logits change only when nothing else fits. */
IRIS_TEST(plan_place_8b_int4_7gib_auto_context) {
    iris_plan_model m;
    iris_plan_settings st;
    iris_plan *p = plan_setup(0, &m, &st);
    REQUIRE(p);
    iris_err err = {0};
    CHECKF(iris_plan_make(&m, &st, 7 * GIB, "", 0, p, &err) == 0, "%s", err.msg);
    show(p);
    CHECK(p->embed_host && !p->lm_head_fp8);
    CHECK(p->context >= IRIS_PLAN_MIN_CONTEXT && p->context < 8192);
    char *t = iris_plan_format(p);
    REQUIRE(t);
    CHECK_CONTAINS(t, "lm_head: BF16 as stored, 1.16 GiB on the card; auto: FP8 only when nothing else fits");
    CHECK_CONTAINS(t, "auto: on the card they left no context that fits (the aim: 8,192)");
    free(t);
    free(p);
}

/* Flags pin the choice; pinned so that it cannot fit, the refusal names what would. */
IRIS_TEST(plan_place_8b_int4_flags) {
    iris_plan_model m;
    iris_plan_settings st;
    iris_plan *p = plan_setup(0, &m, &st);
    REQUIRE(p);
    st.max_model_len = 8192;
    st.embeddings = IRIS_EMBED_DEVICE;
    st.lm_head_dtype = IRIS_LM_HEAD_STORED;
    iris_err err = {0};
    CHECK_EQ_INT(iris_plan_make(&m, &st, 7 * GIB, "--gpu-memory-limit 7.00 GiB", 0, p, &err), IRIS_ELIMIT);
    show(p);
    CHECK(!p->fits && !p->embed_host && !p->lm_head_fp8);
    CHECK_CONTAINS(err.msg, "does not fit in 7.00 GiB");
    char *t = iris_plan_format(p);
    REQUIRE(t);
    CHECK_CONTAINS(t, "token embeddings: on the card, 1.16 GiB; --embeddings device");
    CHECK_CONTAINS(t, "lm_head: BF16 as stored, 1.16 GiB on the card; --lm-head-dtype stored");
    CHECK_CONTAINS(t, "  --embeddings host (the token-embedding table in host memory");
    CHECK_CONTAINS(t, "  --lm-head-dtype fp8 --embeddings host (the lm_head quantized to FP8 at load, weights on the card");
    CHECK_CONTAINS(t, "): fits, context 8,192 tokens");
    int n_place = 0;
    for (int i = 0; i < p->n_suggestions; i++) {
        const iris_plan_suggestion *g = &p->suggestions[i];
        if (g->kind == IRIS_SUGGEST_EMBED_HOST) {
            n_place++;
            CHECK(!g->fits);
        }
        if (g->kind == IRIS_SUGGEST_LM_HEAD_FP8) {
            n_place++;
            CHECK(g->fits && g->context == 8192);
        }
    }
    CHECK_EQ_INT(n_place, 2);
    free(t);

    /* --embeddings host --lm-head-dtype fp8 given: the same plan auto made */
    st.embeddings = IRIS_EMBED_HOST;
    st.lm_head_dtype = IRIS_LM_HEAD_FP8;
    CHECK(iris_plan_make(&m, &st, 7 * GIB, "", 0, p, &err) == 0);
    CHECK(p->embed_host && p->lm_head_fp8 && !p->embed_auto && !p->lm_head_auto);
    t = iris_plan_format(p);
    REQUIRE(t);
    CHECK_CONTAINS(t, "; --embeddings host\n");
    CHECK_CONTAINS(t, "; --lm-head-dtype fp8\n");
    free(t);
    /* a context that nothing fits: refused, naming the largest context that does */
    st.embeddings = IRIS_EMBED_AUTO;
    st.lm_head_dtype = IRIS_LM_HEAD_AUTO;
    st.max_model_len = 65536;
    CHECK_EQ_INT(iris_plan_make(&m, &st, 7 * GIB, "", 0, p, &err), IRIS_ELIMIT);
    t = iris_plan_format(p);
    REQUIRE(t);
    CHECK_CONTAINS(t, "--max-model-len ");
    CHECK_CONTAINS(t, ": the largest that fits (context ");
    CHECK_CONTAINS(t, "--lm-head-dtype fp8 --embeddings host");
    free(t);
    /* bad values */
    st.max_model_len = 8192;
    st.embeddings = 7;
    CHECK_EQ_INT(iris_plan_make(&m, &st, 7 * GIB, "", 0, p, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "--embeddings: give auto, device or host");
    CHECK_EQ_INT(iris_plan_embed_parse("host"), IRIS_EMBED_HOST);
    CHECK_EQ_INT(iris_plan_embed_parse("gpu"), -1);
    CHECK_EQ_INT(iris_plan_lm_head_parse("fp8"), IRIS_LM_HEAD_FP8);
    CHECK_EQ_INT(iris_plan_lm_head_parse("bf16"), IRIS_LM_HEAD_STORED);
    CHECK_EQ_INT(iris_plan_lm_head_parse(NULL), -1);
    free(p);
}

/* The 4B (tied lm_head) on an 8 GB card: its table alone saves nothing on the host, and auto does
 * not quantize the lm_head of a plan that fits: the plan is the one it always was. */
IRIS_TEST(plan_place_4b_fp8_unchanged) {
    iris_plan_model m;
    iris_plan_settings st;
    iris_plan *p = plan_setup(1, &m, &st);
    REQUIRE(p);
    iris_err err = {0};
    CHECKF(iris_plan_make(&m, &st, 7 * GIB - (512ull << 20), "", 0, p, &err) == 0, "%s", err.msg);
    show(p);
    CHECK(!p->embed_host && !p->lm_head_fp8);
    CHECK(p->lm_head_tied);
    CHECK_EQ_INT(p->part_bytes[IRIS_PART_WEIGHTS], m.weight_bytes);
    CHECK_EQ_INT(p->n_place_tries, 1);
    /* asked for: host table + FP8 lm_head saves half the table (the card keeps the FP8 copy) */
    st.embeddings = IRIS_EMBED_HOST;
    st.lm_head_dtype = IRIS_LM_HEAD_FP8;
    CHECK(iris_plan_make(&m, &st, 7 * GIB - (512ull << 20), "", 0, p, &err) == 0);
    CHECK_EQ_INT(p->part_bytes[IRIS_PART_WEIGHTS], m.weight_bytes - m.embed_bytes + m.lm_head_fp8_bytes);
    /* host table alone, tied: the card keeps it for the logits */
    st.lm_head_dtype = IRIS_LM_HEAD_STORED;
    CHECK(iris_plan_make(&m, &st, 7 * GIB - (512ull << 20), "", 0, p, &err) == 0);
    CHECK(p->embed_host);
    CHECK_EQ_INT(p->part_bytes[IRIS_PART_WEIGHTS], m.weight_bytes);
    CHECK_EQ_INT(p->lm_head_bytes, m.embed_bytes);
    free(p);
}

/* The issue's `iris plan ... --vram 8GiB --reserved 1GiB` (6.5 GiB): the table on the host is not
 * enough, so auto quantizes the lm_head too; 8K then needs the FP8 KV cache, and the refusal says
 * so, the setting planned with the placement chosen again (as a run with it would be). */
IRIS_TEST(plan_place_8b_int4_8gib_card) {
    iris_plan_budget_opts o = {0};
    uint64_t budget = 0;
    char how[128];
    iris_err err = {0};
    REQUIRE(iris_plan_budget(&o, 8 * GIB, 7 * GIB, &budget, how, sizeof how, &err) == 0);
    iris_plan_model m;
    iris_plan_settings st;
    iris_plan *p = plan_setup(0, &m, &st);
    REQUIRE(p);
    CHECKF(iris_plan_make(&m, &st, budget, how, 0, p, &err) == 0, "%s", err.msg);
    show(p);
    CHECK(p->embed_host && p->lm_head_fp8);
    CHECK(p->context >= IRIS_PLAN_MIN_CONTEXT && p->context < 8192);
    int64_t ctx_bf16 = p->context;
    st.max_model_len = 8192;
    CHECK_EQ_INT(iris_plan_make(&m, &st, budget, how, 0, p, &err), IRIS_ELIMIT);
    show(p);
    int kv = 0;
    for (int i = 0; i < p->n_suggestions; i++)
        if (p->suggestions[i].kind == IRIS_SUGGEST_KV_FP8) {
            kv = 1;
            CHECK(p->suggestions[i].fits && p->suggestions[i].context == 8192);
            CHECK_EQ_INT(p->suggestions[i].weight_bytes, iris_plan_placed_weights(&m, 1, 1, NULL));
        }
    CHECK(kv);
    char *t = iris_plan_format(p);
    REQUIRE(t);
    CHECK_CONTAINS(t, "  --kv-cache-dtype fp8: fits, context 8,192 tokens");
    free(t);
    st.kv_cache_dtype = IRIS_KV_FP8;
    CHECK(iris_plan_make(&m, &st, budget, how, 0, p, &err) == 0);
    CHECK(p->embed_host && p->lm_head_fp8 && p->context == 8192);
    st.max_model_len = 0;
    CHECK(iris_plan_make(&m, &st, budget, how, 0, p, &err) == 0);
    printf("  8B-INT4 on an 8 GB card (6.5 GiB): context %lld tokens with a BF16 KV cache, %lld with FP8\n",
           (long long)ctx_bf16, (long long)p->context);
    CHECK(p->context > 2 * ctx_bf16 - 64);
    free(p);
}
