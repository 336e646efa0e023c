/* test_planner.c: the memory planner against bytes computed by hand.
 *
 * Real-shape Qwen3-VL-2B and 4B checkpoints, BF16 and FP8 (QWEN3VL.md §2, §3
 * names and shapes), are written header-only into a temp dir: the real
 * safetensors header, then ftruncate to the full size (sparse, no disk
 * used), beside their config.json.  The expected plans below are written out
 * from the shapes and the formulas documented in planner.h, not from the
 * planner's code. */
#include "test.h"

#include <ctype.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/planner.h"
#include "formats/image.h"
#include "model/vision.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

typedef struct spec {
    const char *name;
    int H, I, L, nq; /* text hidden, MLP, layers, q heads (8 kv heads, head_dim 128 in both) */
} spec;
static const spec SPEC_2B = {"2B", 2048, 6144, 28, 16};
static const spec SPEC_4B = {"4B", 2560, 9728, 36, 32};

/* ---- header-only checkpoints ---- */

typedef struct writer {
    json_t *hdr;
    uint64_t off;
} writer;

static void tensor(writer *w, const char *dtype, uint64_t esize, int nd, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void tensor(writer *w, const char *dtype, uint64_t esize, int nd, const int64_t *shape, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    uint64_t n = esize;
    json_t *sh = json_array();
    for (int i = 0; i < nd; i++) n *= (uint64_t)shape[i], json_array_append_new(sh, json_integer(shape[i]));
    json_object_set_new(w->hdr, name,
                        json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtype, "shape", sh, "data_offsets",
                                  (json_int_t)w->off, (json_int_t)(w->off + n)));
    w->off += n;
}
#define T1(w, a, ...) tensor(w, "BF16", 2, 1, (int64_t[]){a}, __VA_ARGS__)
#define T2(w, a, b, ...) tensor(w, "BF16", 2, 2, (int64_t[]){a, b}, __VA_ARGS__)

/* A decoder linear [out, in]: BF16, or F8_E4M3 + F32 weight_scale_inv [ceil(out/128), ceil(in/128)]. */
static void linear(writer *w, int fp8, int64_t out, int64_t in, int il, const char *what) {
    if (!fp8) {
        T2(w, out, in, "model.language_model.layers.%d.%s.weight", il, what);
        return;
    }
    tensor(w, "F8_E4M3", 1, 2, (int64_t[]){out, in}, "model.language_model.layers.%d.%s.weight", il, what);
    tensor(w, "F32", 4, 2, (int64_t[]){(out + 127) / 128, (in + 127) / 128},
           "model.language_model.layers.%d.%s.weight_scale_inv", il, what);
}

static int write_checkpoint(const char *dir, const spec *s, int fp8) {
    writer w = {json_object(), 0};
    const char *v = "model.visual.";
    tensor(&w, "BF16", 2, 5, (int64_t[]){1024, 3, 2, 16, 16}, "%spatch_embed.proj.weight", v);
    T1(&w, 1024, "%spatch_embed.proj.bias", v);
    T2(&w, 2304, 1024, "%spos_embed.weight", v);
    for (int b = 0; b < 24; b++) {
        T1(&w, 1024, "%sblocks.%d.norm1.weight", v, b), T1(&w, 1024, "%sblocks.%d.norm1.bias", v, b);
        T1(&w, 1024, "%sblocks.%d.norm2.weight", v, b), T1(&w, 1024, "%sblocks.%d.norm2.bias", v, b);
        T2(&w, 3072, 1024, "%sblocks.%d.attn.qkv.weight", v, b), T1(&w, 3072, "%sblocks.%d.attn.qkv.bias", v, b);
        T2(&w, 1024, 1024, "%sblocks.%d.attn.proj.weight", v, b), T1(&w, 1024, "%sblocks.%d.attn.proj.bias", v, b);
        T2(&w, 4096, 1024, "%sblocks.%d.mlp.linear_fc1.weight", v, b);
        T1(&w, 4096, "%sblocks.%d.mlp.linear_fc1.bias", v, b);
        T2(&w, 1024, 4096, "%sblocks.%d.mlp.linear_fc2.weight", v, b);
        T1(&w, 1024, "%sblocks.%d.mlp.linear_fc2.bias", v, b);
    }
    T1(&w, 1024, "%smerger.norm.weight", v), T1(&w, 1024, "%smerger.norm.bias", v);
    T2(&w, 4096, 4096, "%smerger.linear_fc1.weight", v), T1(&w, 4096, "%smerger.linear_fc1.bias", v);
    T2(&w, s->H, 4096, "%smerger.linear_fc2.weight", v), T1(&w, s->H, "%smerger.linear_fc2.bias", v);
    for (int k = 0; k < 3; k++) {
        T1(&w, 4096, "%sdeepstack_merger_list.%d.norm.weight", v, k);
        T1(&w, 4096, "%sdeepstack_merger_list.%d.norm.bias", v, k);
        T2(&w, 4096, 4096, "%sdeepstack_merger_list.%d.linear_fc1.weight", v, k);
        T1(&w, 4096, "%sdeepstack_merger_list.%d.linear_fc1.bias", v, k);
        T2(&w, s->H, 4096, "%sdeepstack_merger_list.%d.linear_fc2.weight", v, k);
        T1(&w, s->H, "%sdeepstack_merger_list.%d.linear_fc2.bias", v, k);
    }
    T2(&w, 151936, s->H, "model.language_model.embed_tokens.weight");
    int64_t q = s->nq * 128;
    for (int il = 0; il < s->L; il++) {
        T1(&w, s->H, "model.language_model.layers.%d.input_layernorm.weight", il);
        linear(&w, fp8, q, s->H, il, "self_attn.q_proj");
        linear(&w, fp8, 1024, s->H, il, "self_attn.k_proj");
        linear(&w, fp8, 1024, s->H, il, "self_attn.v_proj");
        linear(&w, fp8, s->H, q, il, "self_attn.o_proj");
        T1(&w, 128, "model.language_model.layers.%d.self_attn.q_norm.weight", il);
        T1(&w, 128, "model.language_model.layers.%d.self_attn.k_norm.weight", il);
        T1(&w, s->H, "model.language_model.layers.%d.post_attention_layernorm.weight", il);
        linear(&w, fp8, s->I, s->H, il, "mlp.gate_proj");
        linear(&w, fp8, s->I, s->H, il, "mlp.up_proj");
        linear(&w, fp8, s->H, s->I, il, "mlp.down_proj");
    }
    T1(&w, s->H, "model.language_model.norm.weight");

    char *js = json_dumps(w.hdr, JSON_COMPACT);
    json_decref(w.hdr);
    if (!js) return -1;
    size_t n = strlen(js), padded = (n + 7) / 8 * 8;
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644), rc = -1;
    if (fd >= 0) {
        uint8_t len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
        char *pad = malloc(padded);
        if (pad) {
            memcpy(pad, js, n);
            memset(pad + n, ' ', padded - n);
            if (write(fd, len8, 8) == 8 && write(fd, pad, padded) == (ssize_t)padded &&
                ftruncate(fd, (off_t)(8 + padded + w.off)) == 0)
                rc = 0;
            free(pad);
        }
        close(fd);
    }
    free(js);
    if (rc) return rc;

    /* config.json: QWEN3VL.md §1.1, plus Qwen's block-FP8 section for FP8. */
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "{\"architectures\": [\"Qwen3VLForConditionalGeneration\"], \"image_token_id\": 151655,\n"
            " \"model_type\": \"qwen3_vl\", \"tie_word_embeddings\": true, \"video_token_id\": 151656,\n"
            " \"vision_start_token_id\": 151652, \"vision_end_token_id\": 151653,\n"
            " \"text_config\": {\"attention_bias\": false, \"bos_token_id\": 151643, \"eos_token_id\": 151645,\n"
            "  \"head_dim\": 128, \"hidden_act\": \"silu\", \"hidden_size\": %d, \"intermediate_size\": %d,\n"
            "  \"max_position_embeddings\": 262144, \"model_type\": \"qwen3_vl_text\", \"num_attention_heads\": %d,\n"
            "  \"num_hidden_layers\": %d, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06,\n"
            "  \"rope_scaling\": {\"mrope_interleaved\": true, \"mrope_section\": [24, 20, 20], \"rope_type\": "
            "\"default\"},\n"
            "  \"rope_theta\": 5000000, \"tie_word_embeddings\": true, \"vocab_size\": 151936},\n"
            " \"vision_config\": {\"deepstack_visual_indexes\": [5, 11, 17], \"depth\": 24, \"hidden_act\": "
            "\"gelu_pytorch_tanh\",\n"
            "  \"hidden_size\": 1024, \"in_channels\": 3, \"intermediate_size\": 4096, \"model_type\": \"qwen3_vl\",\n"
            "  \"num_heads\": 16, \"num_position_embeddings\": 2304, \"out_hidden_size\": %d, \"patch_size\": 16,\n"
            "  \"spatial_merge_size\": 2, \"temporal_patch_size\": 2}%s}\n",
            s->H, s->I, s->nq, s->L, s->H,
            fp8 ? ",\n \"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", "
                  "\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}"
                : "");
    return fclose(f) ? -1 : 0;
}

static char g_root[64];

static void remove_models(void) {
    const char *names[] = {"2B", "2B-FP8", "4B", "4B-FP8"};
    char p[256];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s/model.safetensors", g_root, names[i]), unlink(p);
        snprintf(p, sizeof p, "%s/%s/config.json", g_root, names[i]), unlink(p);
        snprintf(p, sizeof p, "%s/%s", g_root, names[i]), rmdir(p);
    }
    rmdir(g_root);
}

/* The directory of the 2B/4B BF16/FP8 checkpoint (written once per run), or NULL. */
static const char *model_dir(const spec *s, int fp8) {
    static char dirs[4][128];
    static int state; /* 0 not tried, 1 ready, -1 failed */
    if (!state) {
        state = -1;
        snprintf(g_root, sizeof g_root, "/tmp/iris-planner-XXXXXX");
        if (!mkdtemp(g_root)) return NULL;
        if (getenv("IRIS_PLANNER_KEEP")) fprintf(stderr, "  checkpoints kept in %s\n", g_root);
        else atexit(remove_models);
        const spec *sp[4] = {&SPEC_2B, &SPEC_2B, &SPEC_4B, &SPEC_4B};
        for (int i = 0; i < 4; i++) {
            snprintf(dirs[i], sizeof dirs[i], "%s/%s%s", g_root, sp[i]->name, i % 2 ? "-FP8" : "");
            if (mkdir(dirs[i], 0755) || write_checkpoint(dirs[i], sp[i], i % 2)) return NULL;
        }
        state = 1;
    }
    return state == 1 ? dirs[(s == &SPEC_4B) * 2 + fp8] : NULL;
}

/* A '-' before a digit that does not follow a letter or digit ("-3.79 GiB"). */
static int has_negative_number(const char *t) {
    for (const char *p = t; p && *p; p++)
        if (*p == '-' && isdigit((unsigned char)p[1]) && (p == t || !isalnum((unsigned char)p[-1]))) return 1;
    return 0;
}

static int load(const spec *s, int fp8, iris_plan_model *m) {
    const char *dir = model_dir(s, fp8);
    iris_err err = {0};
    if (!dir) return -1;
    int rc = iris_plan_model_load(dir, dir, m, &err);
    if (rc) fprintf(stderr, "  %s\n", err.msg);
    return rc;
}

/* ---- the plans by hand ---- */

/* Weights: QWEN3VL.md §1.5 parameter counts (every tensor's bytes is a
 * multiple of 256, so no alignment padding in BF16). */
static uint64_t hand_weights(const spec *s, int fp8) {
    uint64_t params = s == &SPEC_2B ? 2127532032ull : 4437815808ull;
    if (!fp8) return params * 2;
    uint64_t H = (uint64_t)s->H, I = (uint64_t)s->I, Q = (uint64_t)s->nq * 128;
    /* the 7 linears of a layer: q [Q,H], k and v [1024,H], o [H,Q], gate and up [I,H], down [H,I] */
    uint64_t lin = Q * H + 2 * 1024 * H + H * Q + 3 * I * H;
    /* scales, fp32 per 128x128 block, each tensor padded to 256 B */
#define PAD(x) (((x) + 255) / 256 * 256)
    uint64_t scales = PAD(Q / 128 * H / 128 * 4) + 2 * PAD(8 * H / 128 * 4) + PAD(H / 128 * Q / 128 * 4) +
                      3 * PAD(I / 128 * H / 128 * 4);
    return (params - (uint64_t)s->L * lin) * 2 + (uint64_t)s->L * (lin + scales);
}

/* Everything but the KV pool and its block tables, for the default settings:
 * 64 sequences, 2048-token steps, 1,048,576-pixel images. */
static uint64_t hand_fixed(const spec *s, int fp8) {
    uint64_t H = (uint64_t)s->H, I = (uint64_t)s->I, Q = (uint64_t)s->nq * 128, T = 2048;
    /* vision: 1,048,576 / 32^2 = 1,024 tokens = 4,096 patches; per patch
     * pixels 1536 + x, h 1024 + qkv 3072 + attn 1024 + fc1 4096, bf16, and
     * (row, col) int32; then 4,097 int32 image boundaries (16,388 -> 16,640). */
    uint64_t vision = 4096ull * (1536 + 1024 + 1024 + 3072 + 1024 + 4096) * 2 + 4096ull * 8 + 16640;
    /* decoder step, bf16 per token: x, h [H], qkv [Q + 2*1024], attn [Q],
     * gate_up [2I], act [I]; split-KV partials 64 x heads x 16 x 130 fp32. */
    uint64_t step = T * (2 * H + Q + 2048 + Q + 2 * I + I) * 2 + 64ull * s->nq * 16 * 130 * 4;
    /* FP8: one [I, H] weight dequantized to bf16 beats quantizing [2048, I] activations */
    if (fp8) step += I * H * 2;
    uint64_t act = step > vision ? step : vision;
    /* image embeddings: max(1,024, 2,048) rows x out (= H) x bf16 x (merged + 3 DeepStack) */
    uint64_t embeds = 2048 * H * 2 * 4;
    /* sampling: 64 x 151,936 x (fp32 logits + u16 counts) + 64 x 256 */
    uint64_t sampling = 64ull * 151936 * (4 + 2) + 64 * 256;
    /* step metadata: 2,048 x int32 x (ids + 3 positions + row_seq + row_ctx + slot + image row +
     * attention tile + lone row) + 64 logits rows x int32 */
    uint64_t meta = 2048 * 4 * 10 + 64 * 4;
    /* cuBLASLt 32 MiB, graphs 11 x 2 MiB (batch 1 2 4 8 16 24 32 40 48 56 64), context 336 MiB */
    return hand_weights(s, fp8) + act + embeds + sampling + meta + 32 * MIB + 11 * 2 * MIB + 336 * MIB;
}

/* The automatic context: a context of b blocks needs b pool blocks plus a
 * block-table column of 64 x 4 = 256 bytes (so the table stays 256-aligned);
 * the largest b with fixed + b*(block + 256) <= budget. */
static int64_t hand_context(uint64_t budget, uint64_t fixed, uint64_t kv_per_token) {
    if (budget <= fixed) return 0;
    return (int64_t)((budget - fixed) / (16 * kv_per_token + 256)) * 16;
}

static uint64_t budget_8g_1g(void) {
    iris_plan_budget_opts o = {0};
    uint64_t b = 0;
    char how[128];
    iris_err err = {0};
    if (iris_plan_budget(&o, 8 * GIB, 8 * GIB - 1 * GIB, &b, how, sizeof how, &err)) return 0;
    return b;
}

static void check_fits(const spec *s, int fp8, uint64_t budget, int64_t min_context) {
    iris_plan_model m;
    REQUIRE(load(s, fp8, &m) == 0);
    iris_plan_settings st;
    iris_plan_settings_default(&st);
    iris_plan *p = calloc(1, sizeof *p);
    iris_err err = {0};
    REQUIRE(p);
    int rc = iris_plan_make(&m, &st, budget, "test", 0, p, &err);
    CHECKF(rc == 0, "%s%s: %s", s->name, fp8 ? "-FP8" : "", err.msg);
    uint64_t kv = 2ull * s->L * 8 * 128 * 2; /* K+V, every layer, 8 kv heads x 128, bf16 */
    CHECK_EQ_INT(p->kv_bytes_per_token, kv);
    CHECK_EQ_INT(p->kv_bytes_per_token, s == &SPEC_2B ? 114688 : 147456);
    CHECK_EQ_INT(p->part_bytes[IRIS_PART_WEIGHTS], hand_weights(s, fp8));
    CHECK_EQ_INT(p->dtype_bytes[IRIS_DT_F8_E4M3], fp8 ? (uint64_t)s->L * ((uint64_t)s->nq * 128 * s->H * 2 + 2048ull * s->H + 3ull * s->I * s->H) : 0);
    uint64_t fixed = hand_fixed(s, fp8);
    int64_t ctx = hand_context(budget, fixed, kv);
    CHECK_EQ_INT(p->context, ctx);
    CHECK(p->context >= min_context);
    /* the pool: whatever is left once the block tables for ctx are in */
    int64_t pool = (int64_t)((budget - fixed - (uint64_t)ctx / 16 * 256) / (16 * kv));
    CHECK_EQ_INT(p->kv_blocks, pool);
    CHECK_EQ_INT(p->n_full_seqs, pool / (ctx / 16));
    CHECK(p->total_bytes <= budget);
    CHECK_EQ_INT(p->total_bytes, fixed + (uint64_t)ctx / 16 * 256 + (uint64_t)pool * 16 * kv);
    if (getenv("IRIS_PLANNER_VERBOSE")) {
        char *t = iris_plan_format(p);
        fprintf(stderr, "%s", t ? t : "");
        free(t);
    }
    free(p);
}

IRIS_TEST(planner_2b_bf16_8gib) {
    /* 8 GiB card, 1 GiB held by the desktop, 512 MiB margin: 6.5 GiB. */
    CHECK_EQ_INT(budget_8g_1g(), 7 * GIB - 512 * MIB);
    check_fits(&SPEC_2B, 0, budget_8g_1g(), 18272); /* 18,272 tokens, 1 full-length sequence */
}
IRIS_TEST(planner_2b_fp8_8gib) { check_fits(&SPEC_2B, 1, budget_8g_1g(), 30336); }
IRIS_TEST(planner_4b_fp8_8gib) { check_fits(&SPEC_4B, 1, budget_8g_1g(), 6624); }
IRIS_TEST(planner_4b_fp8_7gib_limit) {
    /* The figure: 4B-FP8 under --gpu-memory-limit 7GiB with at least 8,192 tokens. */
    iris_plan_budget_opts o = {.gpu_memory_limit = 7 * GIB};
    uint64_t b = 0;
    char how[128];
    iris_err err = {0};
    REQUIRE(iris_plan_budget(&o, 80 * GIB, 79 * GIB, &b, how, sizeof how, &err) == 0);
    CHECK_EQ_INT(b, 7 * GIB);
    CHECK_CONTAINS(how, "--gpu-memory-limit 7.00 GiB");
    check_fits(&SPEC_4B, 1, b, 8192);
}

IRIS_TEST(planner_4b_bf16_8gib_fails) {
    iris_plan_model m;
    REQUIRE(load(&SPEC_4B, 0, &m) == 0);
    CHECK_EQ_INT(m.weight_bytes, 8875631616ull);
    CHECK_EQ_INT(m.fp8_weight_bytes, hand_weights(&SPEC_4B, 1)); /* the FP8 estimate from BF16 shapes */
    iris_plan_settings st;
    iris_plan_settings_default(&st);
    iris_plan *p = calloc(1, sizeof *p);
    REQUIRE(p);
    iris_err err = {0};
    uint64_t budget = budget_8g_1g();
    CHECK_EQ_INT(iris_plan_make(&m, &st, budget, "8.00 GiB card, 1.00 GiB reserved", 0, p, &err), IRIS_ELIMIT);
    CHECK(!p->fits);
    CHECK_CONTAINS(err.msg, "does not fit in 6.50 GiB");
    /* the failing plan still lists the KV cache a 4,096-token context needs */
    CHECK_EQ_INT(p->context, 4096);
    CHECK_EQ_INT(p->part_bytes[IRIS_PART_KV_CACHE], 4096ull * 147456);
    CHECK_EQ_INT(p->total_bytes, hand_fixed(&SPEC_4B, 0) + 256 * 256 + 4096ull * 147456);
    char *t = iris_plan_format(p);
    REQUIRE(t);
    for (int i = 0; i < IRIS_PART_COUNT; i++) CHECK_CONTAINS(t, iris_plan_part_name(i));
    CHECK_CONTAINS(t, "8,875,631,616");          /* the weights, exact */
    CHECK_CONTAINS(t, "8.27 GiB");               /* and human */
    CHECK_CONTAINS(t, "budget");
    CHECK_CONTAINS(t, "6.50 GiB");
    CHECK_CONTAINS(t, "--max-model-len: none");  /* no context fits with BF16 weights */
    CHECK_CONTAINS(t, "--kv-cache-dtype fp8: does not fit");
    CHECK_CONTAINS(t, "FP8 checkpoint");
    CHECK(!has_negative_number(t));
    /* the FP8 checkpoint gives exactly the 4B-FP8 plan: 6,624 tokens */
    int64_t fp8_ctx = hand_context(budget, hand_fixed(&SPEC_4B, 1), 147456);
    char want[64];
    snprintf(want, sizeof want, "fits, context %lld,%03lld tokens", (long long)(fp8_ctx / 1000),
             (long long)(fp8_ctx % 1000));
    CHECK_CONTAINS(t, want);
    int found = 0;
    for (int i = 0; i < p->n_suggestions; i++) {
        const iris_plan_suggestion *g = &p->suggestions[i];
        if (g->kind == IRIS_SUGGEST_FP8_CHECKPOINT) {
            found = 1;
            CHECK(g->fits);
            CHECK_EQ_INT(g->context, fp8_ctx);
            CHECK_EQ_INT(g->weight_bytes, hand_weights(&SPEC_4B, 1));
        }
        if (g->kind == IRIS_SUGGEST_MAX_MODEL_LEN || g->kind == IRIS_SUGGEST_KV_FP8) CHECK(!g->fits);
    }
    CHECK(found);
    free(t);
    free(p);
}

IRIS_TEST(planner_explicit_context) {
    iris_plan_model m;
    REQUIRE(load(&SPEC_2B, 0, &m) == 0);
    iris_plan_settings st;
    iris_plan_settings_default(&st);
    iris_plan *p = calloc(1, sizeof *p);
    REQUIRE(p);
    iris_err err = {0};
    uint64_t budget = budget_8g_1g(), fixed = hand_fixed(&SPEC_2B, 0);
    /* 8,192 tokens: the pool still gets everything left, 512 blocks a sequence */
    st.max_model_len = 8192;
    CHECK_EQ_INT(iris_plan_make(&m, &st, budget, "", 0, p, &err), 0);
    int64_t pool = (int64_t)((budget - fixed - 512 * 256) / (16 * 114688));
    CHECK_EQ_INT(p->kv_blocks, pool);
    CHECK_EQ_INT(p->n_full_seqs, pool / 512);
    CHECK_EQ_INT(p->context, 8192);
    /* the whole native length does not fit; the largest that does is the automatic one */
    st.max_model_len = 262144;
    CHECK_EQ_INT(iris_plan_make(&m, &st, budget, "", 0, p, &err), IRIS_ELIMIT);
    CHECK(p->n_suggestions > 0 && p->suggestions[0].kind == IRIS_SUGGEST_MAX_MODEL_LEN);
    CHECK(p->suggestions[0].fits);
    CHECK_EQ_INT(p->suggestions[0].value, hand_context(budget, fixed, 114688));
    char *t = iris_plan_format(p);
    CHECK_CONTAINS(t, "--max-model-len 18272: the largest that fits");
    CHECK_CONTAINS(t, "--kv-cache-dtype fp8: does not fit");
    free(t);
    /* FP8 KV halves the bytes a token: 57,344 */
    st.max_model_len = 0;
    st.kv_cache_dtype = IRIS_KV_FP8;
    CHECK_EQ_INT(iris_plan_make(&m, &st, budget, "", 0, p, &err), 0);
    CHECK_EQ_INT(p->kv_bytes_per_token, 57344);
    CHECK_EQ_INT(p->context, hand_context(budget, fixed, 57344));
    free(p);
}

IRIS_TEST(planner_image_suggestion) {
    /* 2B-FP8 with 16,777,216-pixel images (65,536 patches: 1.44 GiB of encoder
     * scratch) under a 5.25 GiB limit with a 16K context: smaller images fit. */
    iris_plan_model m;
    REQUIRE(load(&SPEC_2B, 1, &m) == 0);
    iris_plan_settings st;
    iris_plan_settings_default(&st);
    st.max_image_pixels = 16777216;
    st.max_model_len = 16384;
    iris_plan *p = calloc(1, sizeof *p);
    REQUIRE(p);
    iris_err err = {0};
    uint64_t budget = 5 * GIB + 256 * MIB;
    CHECK_EQ_INT(iris_plan_make(&m, &st, budget, "", 0, p, &err), IRIS_ELIMIT);
    CHECK_EQ_INT(p->image_patches, 65536);
    CHECK_EQ_INT(p->vision_bytes, 65536ull * 23552 + 65536 * 8 + (65537 * 4 + 255) / 256 * 256);
    int64_t got = 0;
    for (int i = 0; i < p->n_suggestions; i++)
        if (p->suggestions[i].kind == IRIS_SUGGEST_MAX_IMAGE_PIXELS && p->suggestions[i].fits)
            got = p->suggestions[i].value;
    /* by hand: with images of t tokens the vision scratch is 4t patches x
     * 23,560 B + the boundaries, sharing its part with the decoder step; the
     * embeddings room grows past 2,048 rows; the largest t whose plan fits */
    uint64_t step = 2048ull * (2 * 2048 + 2048 + 2048 + 2048 + 3 * 6144) * 2 + 64ull * 16 * 16 * 130 * 4 +
                    6144ull * 2048 * 2;
    uint64_t fixed_no_act = hand_fixed(&SPEC_2B, 1) - step;
    uint64_t rest = budget - fixed_no_act - 1024 * 256 - 1024ull * 16 * 114688; /* tables + 1,024 blocks */
    int64_t t = 0;
    for (int64_t k = 16384; k >= 256; k--) {
        uint64_t patches = 4 * (uint64_t)k, room = (uint64_t)(k > 2048 ? k : 2048);
        uint64_t vision = patches * 23560 + (patches * 4 + 4 + 255) / 256 * 256;
        uint64_t need = (vision > step ? vision : step) + (room - 2048) * 2048 * 2 * 4;
        if (need <= rest) {
            t = k;
            break;
        }
    }
    CHECK(t > 2048); /* the encoder, not the decoder step, is what limits here */
    CHECK_EQ_INT(got, t * 1024);
    char *txt = iris_plan_format(p);
    char want[96];
    snprintf(want, sizeof want, "--max-image-pixels %lld: the largest that fits", (long long)t * 1024);
    CHECK_CONTAINS(txt, want);
    free(txt);
    free(p);
}

IRIS_TEST(planner_formulas) {
    iris_text_config t = {.num_hidden_layers = 28, .num_key_value_heads = 8, .head_dim = 128};
    CHECK_EQ_INT(iris_plan_kv_bytes_per_token(&t, IRIS_KV_BF16), 28 * 2 * 8 * 128 * 2);
    CHECK_EQ_INT(iris_plan_kv_bytes_per_token(&t, IRIS_KV_FP8), 28 * 2 * 8 * 128);
    CHECK_EQ_INT(iris_plan_kv_block_bytes(&t, IRIS_KV_BF16), 16 * 114688);
    CHECK_EQ_INT(iris_plan_align(1), 256);
    CHECK_EQ_INT(iris_plan_align(256), 256);
    CHECK_EQ_INT(iris_plan_align(6080), 6144);
    iris_vision_config v = {.patch_size = 16, .spatial_merge_size = 2};
    CHECK_EQ_INT(iris_plan_image_tokens(&v, 1048576), 1024);
    CHECK_EQ_INT(iris_plan_image_tokens(&v, 1048575), 1023);
    CHECK_EQ_INT(iris_plan_image_tokens(&v, 16777216), 16384);
    int b[IRIS_PLAN_MAX_GRAPHS];
    int n = iris_plan_graph_buckets(64, b);
    int want[] = {1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64};
    CHECK_EQ_INT(n, 11);
    for (int i = 0; i < n && i < 11; i++) CHECK_EQ_INT(b[i], want[i]);
    CHECK_EQ_INT(iris_plan_graph_buckets(1, b), 1);
    n = iris_plan_graph_buckets(5, b);
    CHECK_EQ_INT(n, 4);
    CHECK_EQ_INT(b[3], 5);
    n = iris_plan_graph_buckets(4096, b);
    CHECK(n <= IRIS_PLAN_MAX_GRAPHS);
    CHECK_EQ_INT(b[n - 1], 4096);
    /* a decode step runs as the smallest listed size that holds it: a listed size as it is */
    n = iris_plan_graph_buckets(64, b);
    static const int steps[][2] = {{1, 1},  {2, 2},   {3, 4},   {5, 8},   {8, 8},
                                   {9, 16}, {16, 16}, {17, 24}, {57, 64}, {64, 64}};
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++)
        CHECK_EQ_INT(iris_plan_graph_pick(b, n, steps[i][0]), steps[i][1]);
    n = iris_plan_graph_buckets(5, b); /* 1, 2, 4, 5 */
    CHECK_EQ_INT(iris_plan_graph_pick(b, n, 5), 5);
    CHECK_EQ_INT(iris_plan_graph_pick(b, n, 3), 4);
    CHECK_EQ_INT(iris_plan_graph_pick(b, n, 6), 6); /* past the largest: as it is */
}

/* The image bound against the real smart_resize over many shapes. */
IRIS_TEST(planner_image_bound_smart_resize) {
    iris_vision_config v = {.patch_size = 16, .spatial_merge_size = 2};
    int64_t limits[] = {IRIS_PLAN_MIN_IMAGE_PIXELS, 1048576, 1000000, 4194304, 16777216};
    uint32_t x = 12345;
    for (size_t li = 0; li < sizeof limits / sizeof *limits; li++) {
        int64_t maxp = limits[li], worst = 0;
        for (int k = 0; k < 4000; k++) {
            x = x * 1103515245u + 12345u;
            int h = 1 + (int)((x >> 8) % 6000);
            x = x * 1103515245u + 12345u;
            int w = 1 + (int)((x >> 8) % 6000);
            if (k % 4 == 0) w = h * 200 < 20000 ? h * 200 : w; /* the extreme aspect ratios */
            if (k % 4 == 1) h = w * 199 / 1 < 20000 ? w * 199 : h;
            int oh, ow;
            iris_err err = {0};
            if (iris_image_smart_resize(h, w, 32, 65536, maxp, &oh, &ow, &err)) continue;
            int64_t tokens = (int64_t)oh * ow / 1024;
            if (tokens > worst) worst = tokens;
            CHECKF(tokens <= iris_plan_image_tokens(&v, maxp), "%dx%d -> %dx%d over the %lld-pixel bound", h, w, oh, ow,
                   (long long)maxp);
        }
        CHECK(worst > 0);
    }
    int oh, ow;
    iris_err err = {0};
    REQUIRE(iris_image_smart_resize(4000, 4000, 32, 65536, 1048576, &oh, &ow, &err) == 0);
    CHECK_EQ_INT((int64_t)oh * ow / 1024, iris_plan_image_tokens(&v, 1048576)); /* attained */
}

/* --dense-weights: BF16 copies of the FP8 decoder linears, 2 bytes a parameter (every shape here is
 * a multiple of 128, so the slots need no padding): on an 80 GB card auto takes them, on the 8 GiB
 * card (over 10% of the budget) it does not; on is honoured or reported as not fitting. */
IRIS_TEST(planner_dense_weights) {
    CHECK_EQ_INT(iris_plan_dense_parse("auto"), IRIS_DENSE_AUTO);
    CHECK_EQ_INT(iris_plan_dense_parse("on"), IRIS_DENSE_ON);
    CHECK_EQ_INT(iris_plan_dense_parse("off"), IRIS_DENSE_OFF);
    CHECK_EQ_INT(iris_plan_dense_parse("yes"), -1);
    CHECK_EQ_INT(iris_plan_dense_parse(NULL), -1);
    iris_plan_model m, mb;
    REQUIRE(load(&SPEC_2B, 1, &m) == 0);
    REQUIRE(load(&SPEC_2B, 0, &mb) == 0);
    const spec *s = &SPEC_2B;
    uint64_t f8 = (uint64_t)s->L * ((uint64_t)s->nq * 128 * s->H * 2 + 2048ull * s->H + 3ull * s->I * s->H);
    CHECK_EQ_INT(m.dense_bytes, 2 * f8);
    CHECK_EQ_INT(mb.dense_bytes, 0);
    /* the rule alone (iris bench uses it): on, off, auto at 10% of the budget, never without FP8 */
    CHECK(iris_plan_dense_wanted(&m, IRIS_DENSE_ON, 1));
    CHECK(!iris_plan_dense_wanted(&m, IRIS_DENSE_OFF, 78 * GIB));
    CHECK(iris_plan_dense_wanted(&m, IRIS_DENSE_AUTO, 2 * f8 * 10));
    CHECK(!iris_plan_dense_wanted(&m, IRIS_DENSE_AUTO, 2 * f8 * 10 - 1));
    CHECK(!iris_plan_dense_wanted(&mb, IRIS_DENSE_ON, 78 * GIB));
    iris_plan *on = calloc(1, sizeof *on), *off = calloc(1, sizeof *off);
    REQUIRE(on && off);
    iris_plan_settings st;
    iris_plan_settings_default(&st);
    iris_err err = {0};
    uint64_t big = 78 * GIB;
    REQUIRE(iris_plan_make(&m, &st, big, "", 0, on, &err) == 0); /* auto */
    CHECK(on->dense);
    CHECK_EQ_INT(on->part_bytes[IRIS_PART_DENSE], 2 * f8);
    const iris_plan_region *d = iris_plan_region_find(on, "weights.dense");
    REQUIRE(d);
    CHECK_EQ_INT(d->bytes, 2 * f8);
    CHECK_EQ_INT(d->offset, hand_weights(s, 1)); /* right after the weights */
    st.dense_weights = IRIS_DENSE_OFF;
    REQUIRE(iris_plan_make(&m, &st, big, "", 0, off, &err) == 0);
    CHECK(!off->dense);
    CHECK_EQ_INT(off->part_bytes[IRIS_PART_DENSE], 0);
    CHECK(!iris_plan_region_find(off, "weights.dense"));
    /* the copies come out of the KV cache, byte for byte up to whole blocks */
    CHECK(on->total_bytes <= big && off->total_bytes <= big);
    CHECK(on->kv_blocks < off->kv_blocks);
    CHECK((uint64_t)(off->kv_blocks - on->kv_blocks) * on->kv_block_bytes >= 2 * f8 - on->kv_block_bytes - 256 * 16384);
    char *t = iris_plan_format(off);
    CHECK_CONTAINS(t, "--dense-weights off");
    free(t);
    /* the 8 GiB card: auto leaves them out (2.8 GB is over 10% of 6.5 GiB), with the reason */
    st.dense_weights = IRIS_DENSE_AUTO;
    REQUIRE(iris_plan_make(&m, &st, budget_8g_1g(), "", 0, on, &err) == 0);
    CHECK(!on->dense);
    CHECK_EQ_INT(on->part_bytes[IRIS_PART_DENSE], 0);
    t = iris_plan_format(on);
    CHECK_CONTAINS(t, "over 10% of the budget");
    free(t);
    /* asked for there: 2B still fits (a shorter context), 4B does not and says so */
    st.dense_weights = IRIS_DENSE_ON;
    REQUIRE(iris_plan_make(&m, &st, budget_8g_1g(), "", 0, on, &err) == 0);
    CHECK(on->dense);
    CHECK_EQ_INT(on->part_bytes[IRIS_PART_DENSE], 2 * f8);
    iris_plan_model m4;
    REQUIRE(load(&SPEC_4B, 1, &m4) == 0);
    CHECK_EQ_INT(iris_plan_make(&m4, &st, budget_8g_1g(), "", 0, off, &err), IRIS_ELIMIT);
    CHECK(!off->fits);
    CHECK_EQ_INT(off->part_bytes[IRIS_PART_DENSE], m4.dense_bytes);
    /* a BF16 checkpoint has nothing to copy */
    REQUIRE(iris_plan_make(&mb, &st, big, "", 0, off, &err) == 0);
    CHECK(!off->dense);
    CHECK_EQ_INT(off->part_bytes[IRIS_PART_DENSE], 0);
    st.dense_weights = 7;
    CHECK_EQ_INT(iris_plan_make(&m, &st, big, "", 0, off, &err), IRIS_EINVAL);
    free(on);
    free(off);
}

/* The vision worker's part: a second encoder's scratch (the activations' vision users again) and a
 * cuBLASLt workspace.  auto takes it on an 80 GB card (0.2% of the budget) and not on the 8 GiB
 * card (over 1%), nor with one sequence; on and off are honoured; it comes out of the KV cache. */
IRIS_TEST(planner_vision_worker) {
    iris_plan_model m;
    REQUIRE(load(&SPEC_2B, 1, &m) == 0);
    iris_plan *on = calloc(1, sizeof *on), *off = calloc(1, sizeof *off);
    REQUIRE(on && off);
    iris_plan_settings st;
    iris_plan_settings_default(&st);
    iris_err err = {0};
    uint64_t big = 78 * GIB;
    REQUIRE(iris_plan_make(&m, &st, big, "", 0, on, &err) == 0); /* auto */
    CHECK(on->vision_worker);
    const iris_plan_region *w = iris_plan_region_find(on, "worker.vision"), *ws = iris_plan_region_find(on, "worker.workspace");
    REQUIRE(w && ws);
    CHECK_EQ_INT(on->part_bytes[IRIS_PART_VISION_WORKER], w->bytes + IRIS_PLAN_CUBLASLT_WORKSPACE);
    /* IRIS_PLAN_WORKER_IMAGES (2) of the largest images a pass: the vision users' regions for both */
    CHECK(w->bytes > on->vision_bytes && w->bytes <= 2 * on->vision_bytes);
    CHECK_EQ_INT(ws->offset, w->offset + w->bytes);
    CHECK_EQ_INT(ws->bytes, IRIS_PLAN_CUBLASLT_WORKSPACE);
    CHECK(w->offset + w->bytes + ws->bytes <= on->device_bytes);
    st.vision_worker = IRIS_WORKER_OFF;
    REQUIRE(iris_plan_make(&m, &st, big, "", 0, off, &err) == 0);
    CHECK(!off->vision_worker);
    CHECK_EQ_INT(off->part_bytes[IRIS_PART_VISION_WORKER], 0);
    CHECK(!iris_plan_region_find(off, "worker.vision"));
    CHECK(on->kv_blocks < off->kv_blocks);
    CHECK(on->device_bytes + (uint64_t)(off->kv_blocks - on->kv_blocks) * on->kv_block_bytes >= off->device_bytes);
    char *t = iris_plan_format(off);
    CHECK_CONTAINS(t, "none (off)");
    free(t);
    /* the 8 GiB card: auto leaves it out, with the reason; on is honoured */
    st.vision_worker = IRIS_WORKER_AUTO;
    REQUIRE(iris_plan_make(&m, &st, budget_8g_1g(), "", 0, on, &err) == 0);
    CHECK(!on->vision_worker);
    t = iris_plan_format(on);
    CHECK_CONTAINS(t, "over 1% of the budget");
    free(t);
    st.vision_worker = IRIS_WORKER_ON;
    REQUIRE(iris_plan_make(&m, &st, budget_8g_1g(), "", 0, on, &err) == 0);
    CHECK(on->vision_worker);
    /* one sequence: nothing to overlap */
    st.vision_worker = IRIS_WORKER_AUTO;
    st.max_num_seqs = 1;
    st.max_batch_tokens = 2048;
    REQUIRE(iris_plan_make(&m, &st, big, "", 0, on, &err) == 0);
    CHECK(!on->vision_worker);
    /* what the encoder asks of its scratch for the largest image fits the plan's vision users (the
     * runner lends its activations, the worker has "worker.vision" of that size) */
    const spec *sp[2] = {&SPEC_2B, &SPEC_4B};
    for (int k = 0; k < 2; k++) {
        iris_plan_model mk;
        REQUIRE(load(sp[k], 1, &mk) == 0);
        st.vision_worker = IRIS_WORKER_ON;
        REQUIRE(iris_plan_make(&mk, &st, big, "", 0, on, &err) == 0);
        const iris_vision_config *vc = &mk.cfg.vision_config;
        iris_vision v = {.cfg = *vc, .patch_dim = vc->in_channels * vc->temporal_patch_size * vc->patch_size * vc->patch_size};
        size_t need = iris_vision_scratch_bytes(&v, IRIS_DT_BF16, on->image_patches);
        CHECKF(need > 0 && need <= on->vision_bytes, "%s: the encoder's scratch %zu over the plan's %llu", sp[k]->name,
               need, (unsigned long long)on->vision_bytes);
        const iris_plan_region *wv = iris_plan_region_find(on, "worker.vision");
        REQUIRE(wv);
        need = iris_vision_scratch_bytes(&v, IRIS_DT_BF16, IRIS_PLAN_WORKER_IMAGES * on->image_patches);
        CHECKF(need <= wv->bytes, "%s: the worker's scratch %zu over its region's %llu", sp[k]->name, need,
               (unsigned long long)wv->bytes);
    }
    st.max_num_seqs = 0;
    st.vision_worker = 3;
    CHECK_EQ_INT(iris_plan_make(&m, &st, big, "", 0, off, &err), IRIS_EINVAL);
    free(on);
    free(off);
}

IRIS_TEST(planner_regions) {
    iris_plan_model m;
    REQUIRE(load(&SPEC_4B, 1, &m) == 0);
    iris_plan_settings st;
    iris_plan_settings_default(&st);
    iris_plan *p = calloc(1, sizeof *p);
    REQUIRE(p);
    iris_err err = {0};
    REQUIRE(iris_plan_make(&m, &st, 7 * GIB, "", 0, p, &err) == 0);
    const iris_plan_region *act_v = iris_plan_region_find(p, "vision.pixels");
    const iris_plan_region *act_l = iris_plan_region_find(p, "lm.x");
    const iris_plan_region *kv = iris_plan_region_find(p, "kv.pool");
    const iris_plan_region *w = iris_plan_region_find(p, "weights");
    REQUIRE(act_v && act_l && kv && w && iris_plan_region_find(p, "lm.fp8"));
    CHECK_EQ_INT(w->offset, 0);
    CHECK_EQ_INT(w->bytes, hand_weights(&SPEC_4B, 1));
    CHECK_EQ_INT(kv->offset, w->bytes);
    CHECK_EQ_INT(kv->bytes, (uint64_t)p->kv_blocks * 16 * 147456);
    CHECK_EQ_INT(act_v->offset, act_l->offset); /* the shared part */
    uint64_t carved = 0;
    for (int i = 0; i < p->n_regions; i++) {
        const iris_plan_region *a = &p->regions[i];
        CHECK_EQ_INT(a->offset % 256, 0);
        CHECK_EQ_INT(a->bytes % 256, 0);
        CHECK(a->offset + a->bytes <= p->device_bytes);
        for (int j = 0; j < i; j++) {
            const iris_plan_region *c = &p->regions[j];
            int overlap = a->offset < c->offset + c->bytes && c->offset < a->offset + a->bytes;
            int shared = a->part == IRIS_PART_ACTIVATIONS && c->part == IRIS_PART_ACTIVATIONS &&
                         strncmp(a->name, c->name, 3) != 0;
            CHECKF(!overlap || shared, "%s overlaps %s", a->name, c->name);
        }
        if (a->part != IRIS_PART_ACTIVATIONS) carved += a->bytes;
    }
    CHECK_EQ_INT(carved + p->part_bytes[IRIS_PART_ACTIVATIONS], p->device_bytes);
    CHECK_EQ_INT(p->device_bytes + p->part_bytes[IRIS_PART_CUDA_GRAPHS] + p->part_bytes[IRIS_PART_CUDA_CONTEXT],
                 p->total_bytes);
    /* a measured context replaces the estimate byte for byte */
    uint64_t before = p->total_bytes - p->part_bytes[IRIS_PART_CUDA_CONTEXT];
    REQUIRE(iris_plan_make(&m, &st, 7 * GIB, "", 123456768, p, &err) == 0);
    CHECK_EQ_INT(p->part_bytes[IRIS_PART_CUDA_CONTEXT], 123456768);
    CHECK(p->context_measured);
    CHECK(p->total_bytes - p->part_bytes[IRIS_PART_CUDA_CONTEXT] >= before); /* more left for KV */
    char *js = iris_plan_json(p);
    json_error_t je;
    json_t *o = js ? json_loads(js, 0, &je) : NULL;
    REQUIRE(o);
    CHECK_EQ_INT(json_integer_value(json_object_get(o, "total_bytes")), p->total_bytes);
    CHECK_EQ_INT(json_array_size(json_object_get(o, "regions")), p->n_regions);
    json_decref(o);
    free(js);
    free(p);
}

IRIS_TEST(planner_parse_bytes_and_budget) {
    uint64_t v = 0;
    iris_err err = {0};
    CHECK(iris_plan_parse_bytes("7GiB", &v, &err) == 0 && v == 7 * GIB);
    CHECK(iris_plan_parse_bytes("7G", &v, &err) == 0 && v == 7 * GIB);
    CHECK(iris_plan_parse_bytes("7gi", &v, &err) == 0 && v == 7 * GIB);
    CHECK(iris_plan_parse_bytes("7000MiB", &v, &err) == 0 && v == 7000 * MIB);
    CHECK(iris_plan_parse_bytes("7.5GiB", &v, &err) == 0 && v == 7 * GIB + 512 * MIB);
    CHECK(iris_plan_parse_bytes("8GB", &v, &err) == 0 && v == 8000000000ull);
    CHECK(iris_plan_parse_bytes("123456", &v, &err) == 0 && v == 123456);
    CHECK(iris_plan_parse_bytes("512 MiB", &v, &err) == 0 && v == 512 * MIB);
    const char *bad[] = {"", "GiB", "-1GiB", "7XB", "0", "1e3", "7GiBs", "99999999999TiB", "0.1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECKF(iris_plan_parse_bytes(bad[i], &v, &err) == IRIS_EINVAL, "'%s' accepted", bad[i]);
        CHECK_CONTAINS(err.msg, "'");
    }
    CHECK(iris_plan_parse_bytes(NULL, &v, &err) == IRIS_EINVAL);

    char how[200];
    uint64_t b;
    iris_plan_budget_opts o = {0};
    CHECK(iris_plan_budget(&o, 80 * GIB, 70 * GIB, &b, how, sizeof how, &err) == 0 && b == 70 * GIB - 512 * MIB);
    o.margin_set = 1, o.gpu_memory_margin = GIB;
    CHECK(iris_plan_budget(&o, 80 * GIB, 70 * GIB, &b, how, sizeof how, &err) == 0 && b == 69 * GIB);
    CHECK(iris_plan_budget(&o, 80 * GIB, GIB, &b, how, sizeof how, &err) == IRIS_ELIMIT);
    CHECK_CONTAINS(err.msg, "--gpu-memory-margin");
    o.gpu_memory_utilization = 0.5;
    CHECK(iris_plan_budget(&o, 80 * GIB, 70 * GIB, &b, how, sizeof how, &err) == 0 && b == 40 * GIB);
    CHECK(iris_plan_budget(&o, 80 * GIB, 30 * GIB, &b, how, sizeof how, &err) == 0 && b == 30 * GIB);
    CHECK_CONTAINS(how, "capped at the free");
    o.gpu_memory_utilization = 1.5;
    CHECK(iris_plan_budget(&o, 80 * GIB, 70 * GIB, &b, how, sizeof how, &err) == IRIS_EINVAL);
    o.gpu_memory_limit = 7 * GIB; /* wins over the utilization */
    CHECK(iris_plan_budget(&o, 80 * GIB, 70 * GIB, &b, how, sizeof how, &err) == 0 && b == 7 * GIB);
    CHECK(iris_plan_budget(&o, 8 * GIB, 6 * GIB, &b, how, sizeof how, &err) == 0 && b == 6 * GIB);
    CHECK(iris_plan_budget(&o, 8 * GIB, 9 * GIB, &b, how, sizeof how, &err) == IRIS_EINVAL);
}

IRIS_TEST(planner_bad_input) {
    iris_plan_model m;
    REQUIRE(load(&SPEC_2B, 0, &m) == 0);
    iris_plan *p = calloc(1, sizeof *p);
    REQUIRE(p);
    iris_err err = {0};
    iris_plan_settings st;
    iris_plan_settings_default(&st);
    st.max_model_len = 1000;
    CHECK_EQ_INT(iris_plan_make(&m, &st, 7 * GIB, "", 0, p, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "--max-model-len 1000");
    st.max_model_len = 300000;
    CHECK_EQ_INT(iris_plan_make(&m, &st, 7 * GIB, "", 0, p, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "262144");
    iris_plan_settings_default(&st);
    st.max_batch_tokens = 32; /* below 64 sequences */
    CHECK_EQ_INT(iris_plan_make(&m, &st, 7 * GIB, "", 0, p, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "--max-batch-tokens 32");
    iris_plan_settings_default(&st);
    st.max_image_pixels = 1000;
    CHECK_EQ_INT(iris_plan_make(&m, &st, 7 * GIB, "", 0, p, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "--max-image-pixels 1000");
    /* a tiny budget: everything listed, nothing negative, no crash */
    iris_plan_settings_default(&st);
    CHECK_EQ_INT(iris_plan_make(&m, &st, 1, "", 0, p, &err), IRIS_ELIMIT);
    char *t = iris_plan_format(p);
    CHECK_CONTAINS(t, "does not fit");
    CHECK(t && !has_negative_number(t));
    free(t);
    /* untied without an lm_head: a clear error */
    iris_plan_model m2;
    iris_config cfg = m.cfg;
    cfg.tie_word_embeddings = 0;
    iris_st *st_h = NULL;
    REQUIRE(iris_st_open_headers(model_dir(&SPEC_2B, 0), &st_h, &err) == 0);
    CHECK_EQ_INT(iris_plan_model_init(&cfg, st_h, "untied", &m2, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "lm_head.weight");
    iris_st_close(st_h);
    /* a directory without weights */
    char empty[64];
    snprintf(empty, sizeof empty, "/tmp/iris-planner-empty-XXXXXX");
    REQUIRE(mkdtemp(empty));
    CHECK(iris_plan_model_load(empty, empty, &m2, &err) != 0);
    CHECK_CONTAINS(err.msg, empty);
    rmdir(empty);
    free(p);
}

/* ---- the CLI ---- */

IRIS_TEST(planner_cli) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    REQUIRE(access(bin, X_OK) == 0 || (fprintf(stderr, "  %s not built (set IRIS_BIN)\n", bin), 0));
    const char *d2 = model_dir(&SPEC_2B, 1), *d4 = model_dir(&SPEC_4B, 0);
    REQUIRE(d2 && d4);
    char cmd[1024];
    int status;
    snprintf(cmd, sizeof cmd, "%s plan %s --vram 8GiB --reserved 1GiB --plan-json 2>/dev/null", bin, d2);
    char *out = iris_test_popen(cmd, &status);
    REQUIRE(out);
    CHECK_EQ_INT(status, 0);
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    CHECKF(o, "not JSON: %s", je.text);
    if (o) {
        CHECK(json_is_true(json_object_get(o, "fits")));
        CHECK_EQ_INT(json_integer_value(json_object_get(o, "budget_bytes")), 7 * GIB - 512 * MIB);
        CHECK_EQ_INT(json_integer_value(json_object_get(o, "kv_bytes_per_token")), 114688);
        CHECK_EQ_INT(json_integer_value(json_object_get(o, "context")),
                     hand_context(7 * GIB - 512 * MIB, hand_fixed(&SPEC_2B, 1), 114688));
        CHECK_EQ_INT(json_integer_value(json_object_get(o, "full_length_seqs")), 1);
        json_t *parts = json_object_get(o, "parts");
        CHECK_STR(json_string_value(json_object_get(json_array_get(parts, 0), "name")), "weights");
        CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(parts, 0), "bytes")), hand_weights(&SPEC_2B, 1));
        CHECK(json_is_true(json_object_get(json_array_get(parts, IRIS_PART_CUDA_CONTEXT), "estimate")));
        json_decref(o);
    }
    free(out);
    /* the table */
    snprintf(cmd, sizeof cmd, "%s plan %s --vram 8GiB --reserved 1GiB 2>&1", bin, d2);
    out = iris_test_popen(cmd, &status);
    CHECK_EQ_INT(status, 0);
    CHECK_CONTAINS(out, "context: 30,336 tokens (the largest that fits");
    CHECK_CONTAINS(out, "full-length sequences at once: 1");
    CHECK_CONTAINS(out, "estimate");
    free(out);
    /* 4B-BF16 on the same card: one message on stderr, exit 1 */
    snprintf(cmd, sizeof cmd, "%s plan %s --vram 8GiB --reserved 1GiB 2>&1 >/dev/null", bin, d4);
    out = iris_test_popen(cmd, &status);
    CHECK_EQ_INT(status, 1);
    CHECK_CONTAINS(out, "iris: ");
    CHECK_CONTAINS(out, "does not fit in 6.50 GiB");
    CHECK_CONTAINS(out, "FP8 checkpoint");
    CHECK_CONTAINS(out, "fits, context 6,624 tokens");
    free(out);
    /* the same under a 7 GiB limit with an FP8 KV cache still fails, as JSON */
    snprintf(cmd, sizeof cmd, "%s plan %s --gpu-memory-limit 7GiB --kv-cache-dtype fp8 --plan-json 2>/dev/null", bin, d4);
    out = iris_test_popen(cmd, &status);
    CHECK_EQ_INT(status, 1);
    o = out ? json_loads(out, 0, &je) : NULL;
    CHECK(o && json_is_false(json_object_get(o, "fits")));
    CHECK(o && json_array_size(json_object_get(o, "suggestions")) > 0);
    json_decref(o);
    free(out);
    /* a repo id in the HF cache: the message names the FP8 repo to pull */
    char hub[128], p1[512], cwd_cmd[1200];
    snprintf(hub, sizeof hub, "%s/hub", g_root);
    const char *commit = "0123456789abcdef0123456789abcdef01234567";
    snprintf(cmd, sizeof cmd, "mkdir -p %s/models--Qwen--Qwen3-VL-4B-Instruct/refs %s/models--Qwen--Qwen3-VL-4B-Instruct/snapshots"
             " && printf %s > %s/models--Qwen--Qwen3-VL-4B-Instruct/refs/main"
             " && ln -s %s %s/models--Qwen--Qwen3-VL-4B-Instruct/snapshots/%s",
             hub, hub, commit, hub, d4, hub, commit);
    REQUIRE(system(cmd) == 0);
    snprintf(cwd_cmd, sizeof cwd_cmd, "HF_HUB_CACHE=%s %s plan Qwen/Qwen3-VL-4B-Instruct --vram 8GiB --reserved 1GiB 2>&1", hub,
             bin);
    out = iris_test_popen(cwd_cmd, &status);
    CHECK_EQ_INT(status, 1);
    CHECK_CONTAINS(out, "iris: Qwen/Qwen3-VL-4B-Instruct does not fit in 6.50 GiB");
    CHECK_CONTAINS(out, "iris pull Qwen/Qwen3-VL-4B-Instruct-FP8");
    free(out);
    snprintf(p1, sizeof p1, "rm -rf %s", hub);
    CHECK(system(p1) == 0);
    /* bad usage */
    snprintf(cmd, sizeof cmd, "%s plan %s --vram 8XB 2>&1", bin, d2);
    out = iris_test_popen(cmd, &status);
    CHECK_EQ_INT(status, 2);
    CHECK_CONTAINS(out, "'8XB' is not a size");
    free(out);
    snprintf(cmd, sizeof cmd, "%s plan --help", bin);
    out = iris_test_popen(cmd, &status);
    CHECK_EQ_INT(status, 0);
    CHECK_CONTAINS(out, "--max-image-pixels");
    free(out);
}

/* max_batch_tokens 0: the plan chooses the step's budget (planner.h): 8192 on an 80 GB card, the
 * default where a larger one would shorten the automatic context of an 8 GB card, and with a
 * fixed context the largest candidate that keeps all but IRIS_PLAN_AUTO_BATCH_KV_PERCENT of the
 * KV blocks. */
IRIS_TEST(planner_auto_batch_tokens) {
    iris_plan_model m;
    REQUIRE(load(&SPEC_2B, 1, &m) == 0);
    iris_plan *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    REQUIRE(a && b);
    iris_plan_settings st;
    iris_plan_settings_default(&st);
    iris_err err = {0};
    uint64_t big = 78 * GIB;
    REQUIRE(iris_plan_make(&m, &st, big, "", 0, b, &err) == 0); /* the default, 2048 */
    st.max_batch_tokens = 0;
    REQUIRE(iris_plan_make(&m, &st, big, "", 0, a, &err) == 0);
    CHECK_EQ_INT(a->settings.max_batch_tokens, IRIS_PLAN_AUTO_BATCH_TOKENS_MAX);
    CHECK_EQ_INT(a->context, b->context);
    CHECK_EQ_INT(a->n_suggestions, 0);   /* the chosen plan is whole: nothing left from the candidates' passes */
    CHECK_EQ_INT(a->n_regions, b->n_regions);
    CHECK(a->kv_blocks * 100 >= b->kv_blocks * (100 - IRIS_PLAN_AUTO_BATCH_KV_PERCENT) && a->kv_blocks < b->kv_blocks);
    CHECK(a->part_bytes[IRIS_PART_ACTIVATIONS] > b->part_bytes[IRIS_PART_ACTIVATIONS]);
    printf("  2B-FP8, 78 GiB: %d-token steps, %lld KV blocks (%lld at 2048)\n", a->settings.max_batch_tokens,
           (long long)a->kv_blocks, (long long)b->kv_blocks);
    /* an 8 GB card: a larger step would shorten the automatic context, so the default stays */
    REQUIRE(iris_plan_make(&m, &st, budget_8g_1g(), "", 0, a, &err) == 0);
    st.max_batch_tokens = IRIS_PLAN_DEFAULT_MAX_BATCH_TOKENS;
    REQUIRE(iris_plan_make(&m, &st, budget_8g_1g(), "", 0, b, &err) == 0);
    CHECK_EQ_INT(a->settings.max_batch_tokens, IRIS_PLAN_DEFAULT_MAX_BATCH_TOKENS);
    CHECK_EQ_INT(a->context, b->context);
    CHECK_EQ_INT(a->kv_blocks, b->kv_blocks);
    /* a fixed 8K context on that card: the largest candidate within the KV blocks' allowance */
    st.max_model_len = 8192;
    REQUIRE(iris_plan_make(&m, &st, budget_8g_1g(), "", 0, b, &err) == 0);
    int64_t base = b->kv_blocks, want = IRIS_PLAN_DEFAULT_MAX_BATCH_TOKENS;
    for (int c = IRIS_PLAN_AUTO_BATCH_TOKENS_MAX; c > IRIS_PLAN_DEFAULT_MAX_BATCH_TOKENS; c /= 2) {
        st.max_batch_tokens = c;
        if (iris_plan_make(&m, &st, budget_8g_1g(), "", 0, b, &err) == 0 &&
            b->kv_blocks * 100 >= base * (100 - IRIS_PLAN_AUTO_BATCH_KV_PERCENT)) {
            want = c;
            break;
        }
    }
    st.max_batch_tokens = 0;
    REQUIRE(iris_plan_make(&m, &st, budget_8g_1g(), "", 0, a, &err) == 0);
    CHECK_EQ_INT(a->settings.max_batch_tokens, want);
    CHECK_EQ_INT(a->context, 8192);
    printf("  2B-FP8, 8 GiB card, 8K context: %lld-token steps, %lld KV blocks (%lld at 2048)\n",
           (long long)want, (long long)a->kv_blocks, (long long)base);
    /* more sequences than the default budget: the start is max_num_seqs */
    st.max_model_len = 0;
    st.max_num_seqs = 3000;
    REQUIRE(iris_plan_make(&m, &st, big, "", 0, a, &err) == 0);
    CHECK(a->settings.max_batch_tokens >= 3000);
    free(a), free(b);
}
