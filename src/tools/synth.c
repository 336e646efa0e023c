/* synth.c: `iris synth`: random real-shape checkpoints (contract in synth.h).
 *
 * Owns: three 65536-entry lookup tables (bf16 N(0,0.02), bf16 N(1,0.02), e4m3
 * codes of N(0,1)*448/4.5), a 64 MiB generation buffer and, while a piece is
 * generated, one pthread per core.  Every 1 MiB sub-chunk of a tensor has its
 * own PRNG stream seeded from (seed, tensor name, sub-chunk index), so the
 * bytes do not depend on the thread count.
 * Also: the table of the published checkpoints' shapes (iris_synth_known_repo)
 * and header-only copies of them (iris_synth_write_headers) for `iris plan`.
 * Does not: produce meaningful weights (the logits are noise), or a tied
 * lm_head (not stored, as the real 2B/4B files; the 8B's is untied, stored).
 * Text presets (qwen3-0.6b, qwen3-tiny) write Qwen3ForCausalLM checkpoints:
 * no vision tower, the decoder under "model.", Qwen3's flat config.json.
 */
#include "tools/synth.h"

#include <errno.h>
#include <stdarg.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "rng.h"
#include "log.h"
#include "tools/quantize.h"
#include "formats/st_write.h"
#include "hub/hub.h"

#define SUB_BYTES (1u << 20)
#define PIECE_BYTES (64u << 20)
#define MAX_THREADS 64

typedef struct preset {
    const char *name;
    int hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim;
    int vocab_size;
    int v_depth, v_hidden_size, v_intermediate_size, v_num_heads, v_num_position_embeddings, v_out_hidden_size;
    int n_deepstack, deepstack[3];
    int mrope_section[3];
    int tie_word_embeddings;   /* 0: lm_head.weight is stored (8B) */
    int text;                  /* Qwen3ForCausalLM: no vision tower, tensors under "model.", 1-D RoPE */
} preset;

/* The shapes of the published checkpoints: 2B and 4B from QWEN3VL.md §1.1; 8B from its config.json
 * (a SigLIP-2-sized ViT of 27 blocks, DeepStack from blocks 8/16/24, an untied lm_head), which
 * QWEN3VL.md does not cover. */
static const preset g_presets[] = {
    {"2B", 2048, 6144, 28, 16, 8, 128, 151936, 24, 1024, 4096, 16, 2304, 2048, 3, {5, 11, 17}, {24, 20, 20}, 1, 0},
    {"4B", 2560, 9728, 36, 32, 8, 128, 151936, 24, 1024, 4096, 16, 2304, 2560, 3, {5, 11, 17}, {24, 20, 20}, 1, 0},
    {"8B", 4096, 12288, 36, 32, 8, 128, 151936, 27, 1152, 4304, 16, 2304, 4096, 3, {8, 16, 24}, {24, 20, 20}, 0, 0},
    /* tiny: LM dims multiples of 128 (a valid FP8 model), GQA 2:1, 3 layers, a 3-block ViT with an 8x8 grid. */
    {"tiny", 128, 384, 3, 2, 1, 128, 151936, 3, 64, 128, 2, 64, 128, 2, {0, 1, 0}, {24, 20, 20}, 1, 0},
    /* Plain Qwen3 text models (Qwen3ForCausalLM): Qwen3-0.6B's shape (its config.json: 28 layers,
     * hidden 1024, 16/8 heads x 128, tied), and a tiny one whose LM dims are multiples of 128. */
    {"qwen3-0.6b", 1024, 3072, 28, 16, 8, 128, 151936, 0, 0, 0, 0, 0, 0, 0, {0}, {64, 0, 0}, 1, 1},
    {"qwen3-tiny", 128, 384, 3, 2, 1, 128, 151936, 0, 0, 0, 0, 0, 0, 0, {0}, {64, 0, 0}, 1, 1},
};

static const preset *find_preset(const char *like, iris_err *err) {
    for (size_t i = 0; i < sizeof g_presets / sizeof *g_presets; i++)
        if (like && !strcasecmp(like, g_presets[i].name)) return &g_presets[i];
    iris_err_set(err, IRIS_EINVAL, "--like %s: unknown shape (use 2B, 4B, 8B, tiny, qwen3-0.6b or qwen3-tiny)",
                 like ? like : "(none)");
    return NULL;
}

/* The published Qwen3-VL checkpoints (Hugging Face repo ids) and their shapes. */
static const struct {
    const char *repo, *like;
    int fp8;
} g_known[] = {
    {"Qwen/Qwen3-VL-2B-Instruct", "2B", 0},     {"Qwen/Qwen3-VL-2B-Instruct-FP8", "2B", 1},
    {"Qwen/Qwen3-VL-2B-Thinking", "2B", 0},     {"Qwen/Qwen3-VL-2B-Thinking-FP8", "2B", 1},
    {"Qwen/Qwen3-VL-4B-Instruct", "4B", 0},     {"Qwen/Qwen3-VL-4B-Instruct-FP8", "4B", 1},
    {"Qwen/Qwen3-VL-4B-Thinking", "4B", 0},     {"Qwen/Qwen3-VL-4B-Thinking-FP8", "4B", 1},
    {"Qwen/Qwen3-VL-8B-Instruct", "8B", 0},     {"Qwen/Qwen3-VL-8B-Instruct-FP8", "8B", 1},
    {"Qwen/Qwen3-VL-8B-Thinking", "8B", 0},     {"Qwen/Qwen3-VL-8B-Thinking-FP8", "8B", 1},
};

int iris_synth_known_repo(const char *repo, iris_synth_opts *o) {
    size_t n = strcspn(repo, "@");   /* a revision does not change the shapes */
    for (size_t i = 0; i < sizeof g_known / sizeof *g_known; i++)
        if (strlen(g_known[i].repo) == n && !strncasecmp(repo, g_known[i].repo, n)) {
            memset(o, 0, sizeof *o);
            o->like = g_known[i].like;
            o->fp8 = g_known[i].fp8;
            return 1;
        }
    return 0;
}

const char *iris_synth_known_name(int i) {
    return i >= 0 && i < (int)(sizeof g_known / sizeof *g_known) ? g_known[i].repo : NULL;
}

/* ---- the tensor list ---- */

typedef enum { K_WEIGHT, K_NORM, K_BIAS, K_F8, K_SCALE, K_I4, K_I4_SCALE, K_I4_SHAPE } kind;

/* Linears: BF16, Qwen's block FP8, or compressed-tensors' 4-bit groups of SYNTH_GROUP columns. */
enum { LIN_BF16, LIN_FP8, LIN_INT4 };
#define SYNTH_GROUP 128

typedef struct emit_ctx {
    iris_synth_tensor_fn fn;
    void *ctx;
    void (*fn_kind)(void *ctx, const char *name, iris_dtype dt, int n_dims, const int64_t *shape, kind k);
} emit_ctx;

static void emit(emit_ctx *e, kind k, iris_dtype dt, int n_dims, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void emit(emit_ctx *e, kind k, iris_dtype dt, int n_dims, const int64_t *shape, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (e->fn) e->fn(e->ctx, name, dt, n_dims, shape);
    if (e->fn_kind) e->fn_kind(e->ctx, name, dt, n_dims, shape, k);
}

#define S1(a) ((const int64_t[]){(a)})
#define S2(a, b) ((const int64_t[]){(a), (b)})

static void linear(emit_ctx *e, int mode, int64_t out, int64_t in, const char *prefix) {
    if (mode == LIN_BF16) {
        emit(e, K_WEIGHT, IRIS_DT_BF16, 2, S2(out, in), "%s.weight", prefix);
        return;
    }
    if (mode == LIN_INT4) {
        emit(e, K_I4, IRIS_DT_I32, 2, S2(out, in / 8), "%s.weight_packed", prefix);
        emit(e, K_I4_SCALE, IRIS_DT_BF16, 2, S2(out, in / SYNTH_GROUP), "%s.weight_scale", prefix);
        /* shape [2]; the weight's dims ride behind it for the generator (collect) */
        emit(e, K_I4_SHAPE, IRIS_DT_I64, 1, ((const int64_t[]){2, out, in}), "%s.weight_shape", prefix);
        return;
    }
    emit(e, K_F8, IRIS_DT_F8_E4M3, 2, S2(out, in), "%s.weight", prefix);
    emit(e, K_SCALE, IRIS_DT_F32, 2, S2((out + 127) / 128, (in + 127) / 128), "%s.weight_scale_inv", prefix);
}

static void list_vision(const preset *p, emit_ctx *e) {
    int64_t vh = p->v_hidden_size, vi = p->v_intermediate_size, mh = vh * 4, out = p->v_out_hidden_size;
    emit(e, K_WEIGHT, IRIS_DT_BF16, 5, ((const int64_t[]){vh, 3, 2, 16, 16}), "model.visual.patch_embed.proj.weight");
    emit(e, K_BIAS, IRIS_DT_BF16, 1, S1(vh), "model.visual.patch_embed.proj.bias");
    emit(e, K_WEIGHT, IRIS_DT_BF16, 2, S2(p->v_num_position_embeddings, vh), "model.visual.pos_embed.weight");
    for (int b = 0; b < p->v_depth; b++) {
        const char *pre = "model.visual.blocks";
        emit(e, K_NORM, IRIS_DT_BF16, 1, S1(vh), "%s.%d.norm1.weight", pre, b);
        emit(e, K_BIAS, IRIS_DT_BF16, 1, S1(vh), "%s.%d.norm1.bias", pre, b);
        emit(e, K_NORM, IRIS_DT_BF16, 1, S1(vh), "%s.%d.norm2.weight", pre, b);
        emit(e, K_BIAS, IRIS_DT_BF16, 1, S1(vh), "%s.%d.norm2.bias", pre, b);
        emit(e, K_WEIGHT, IRIS_DT_BF16, 2, S2(3 * vh, vh), "%s.%d.attn.qkv.weight", pre, b);
        emit(e, K_BIAS, IRIS_DT_BF16, 1, S1(3 * vh), "%s.%d.attn.qkv.bias", pre, b);
        emit(e, K_WEIGHT, IRIS_DT_BF16, 2, S2(vh, vh), "%s.%d.attn.proj.weight", pre, b);
        emit(e, K_BIAS, IRIS_DT_BF16, 1, S1(vh), "%s.%d.attn.proj.bias", pre, b);
        emit(e, K_WEIGHT, IRIS_DT_BF16, 2, S2(vi, vh), "%s.%d.mlp.linear_fc1.weight", pre, b);
        emit(e, K_BIAS, IRIS_DT_BF16, 1, S1(vi), "%s.%d.mlp.linear_fc1.bias", pre, b);
        emit(e, K_WEIGHT, IRIS_DT_BF16, 2, S2(vh, vi), "%s.%d.mlp.linear_fc2.weight", pre, b);
        emit(e, K_BIAS, IRIS_DT_BF16, 1, S1(vh), "%s.%d.mlp.linear_fc2.bias", pre, b);
    }
    emit(e, K_NORM, IRIS_DT_BF16, 1, S1(vh), "model.visual.merger.norm.weight");
    emit(e, K_BIAS, IRIS_DT_BF16, 1, S1(vh), "model.visual.merger.norm.bias");
    emit(e, K_WEIGHT, IRIS_DT_BF16, 2, S2(mh, mh), "model.visual.merger.linear_fc1.weight");
    emit(e, K_BIAS, IRIS_DT_BF16, 1, S1(mh), "model.visual.merger.linear_fc1.bias");
    emit(e, K_WEIGHT, IRIS_DT_BF16, 2, S2(out, mh), "model.visual.merger.linear_fc2.weight");
    emit(e, K_BIAS, IRIS_DT_BF16, 1, S1(out), "model.visual.merger.linear_fc2.bias");
    for (int k = 0; k < p->n_deepstack; k++) {
        const char *pre = "model.visual.deepstack_merger_list";
        emit(e, K_NORM, IRIS_DT_BF16, 1, S1(mh), "%s.%d.norm.weight", pre, k);
        emit(e, K_BIAS, IRIS_DT_BF16, 1, S1(mh), "%s.%d.norm.bias", pre, k);
        emit(e, K_WEIGHT, IRIS_DT_BF16, 2, S2(mh, mh), "%s.%d.linear_fc1.weight", pre, k);
        emit(e, K_BIAS, IRIS_DT_BF16, 1, S1(mh), "%s.%d.linear_fc1.bias", pre, k);
        emit(e, K_WEIGHT, IRIS_DT_BF16, 2, S2(out, mh), "%s.%d.linear_fc2.weight", pre, k);
        emit(e, K_BIAS, IRIS_DT_BF16, 1, S1(out), "%s.%d.linear_fc2.bias", pre, k);
    }
}

static void list_tensors(const preset *p, int vocab, int fp8, emit_ctx *e) {  /* fp8: LIN_* */
    if (!p->text) list_vision(p, e);
    const char *lm = p->text ? "model." : "model.language_model.";
    int64_t h = p->hidden_size, im = p->intermediate_size, hd = p->head_dim;
    int64_t q = p->num_attention_heads * hd, kv = p->num_key_value_heads * hd;
    emit(e, K_WEIGHT, IRIS_DT_BF16, 2, S2(vocab, h), "%sembed_tokens.weight", lm);
    for (int il = 0; il < p->num_hidden_layers; il++) {
        char pre[128];
        snprintf(pre, sizeof pre, "%slayers.%d", lm, il);
        char n[192];
        emit(e, K_NORM, IRIS_DT_BF16, 1, S1(h), "%s.input_layernorm.weight", pre);
        snprintf(n, sizeof n, "%s.self_attn.q_proj", pre), linear(e, fp8, q, h, n);
        snprintf(n, sizeof n, "%s.self_attn.k_proj", pre), linear(e, fp8, kv, h, n);
        snprintf(n, sizeof n, "%s.self_attn.v_proj", pre), linear(e, fp8, kv, h, n);
        snprintf(n, sizeof n, "%s.self_attn.o_proj", pre), linear(e, fp8, h, q, n);
        emit(e, K_NORM, IRIS_DT_BF16, 1, S1(hd), "%s.self_attn.q_norm.weight", pre);
        emit(e, K_NORM, IRIS_DT_BF16, 1, S1(hd), "%s.self_attn.k_norm.weight", pre);
        emit(e, K_NORM, IRIS_DT_BF16, 1, S1(h), "%s.post_attention_layernorm.weight", pre);
        snprintf(n, sizeof n, "%s.mlp.gate_proj", pre), linear(e, fp8, im, h, n);
        snprintf(n, sizeof n, "%s.mlp.up_proj", pre), linear(e, fp8, im, h, n);
        snprintf(n, sizeof n, "%s.mlp.down_proj", pre), linear(e, fp8, h, im, n);
    }
    emit(e, K_NORM, IRIS_DT_BF16, 1, S1(h), "%snorm.weight", lm);
    if (!p->tie_word_embeddings) emit(e, K_WEIGHT, IRIS_DT_BF16, 2, S2(vocab, h), "lm_head.weight");
}

static int lin_mode(const iris_synth_opts *o) { return o->int4 ? LIN_INT4 : o->fp8 ? LIN_FP8 : LIN_BF16; }

int iris_synth_list(const iris_synth_opts *o, iris_synth_tensor_fn fn, void *ctx, iris_err *err) {
    const preset *p = find_preset(o->like, err);
    if (!p) return IRIS_EINVAL;
    emit_ctx e = {fn, ctx, NULL};
    list_tensors(p, o->vocab_size > 0 ? o->vocab_size : p->vocab_size, lin_mode(o), &e);
    return 0;
}

/* ---- the config files (QWEN3VL.md §1.1, §1.3, §1.4) ---- */

static json_t *int_array(const int *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

/* Qwen3ForCausalLM's config.json (Qwen3-0.6B's keys): the text keys at the top level. */
static json_t *text_model_config(const iris_synth_opts *o, const preset *p) {
    json_t *c = json_object();
    json_object_set_new(c, "architectures", json_pack("[s]", "Qwen3ForCausalLM"));
    json_object_set_new(c, "attention_bias", json_false());
    json_object_set_new(c, "attention_dropout", json_real(0.0));
    json_object_set_new(c, "bos_token_id", json_integer(151643));
    json_object_set_new(c, "eos_token_id", json_integer(151645));
    json_object_set_new(c, "head_dim", json_integer(p->head_dim));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    json_object_set_new(c, "hidden_size", json_integer(p->hidden_size));
    json_object_set_new(c, "initializer_range", json_real(0.02));
    json_object_set_new(c, "intermediate_size", json_integer(p->intermediate_size));
    json_object_set_new(c, "max_position_embeddings", json_integer(40960));
    json_object_set_new(c, "max_window_layers", json_integer(p->num_hidden_layers));
    json_object_set_new(c, "model_type", json_string("qwen3"));
    json_object_set_new(c, "num_attention_heads", json_integer(p->num_attention_heads));
    json_object_set_new(c, "num_hidden_layers", json_integer(p->num_hidden_layers));
    json_object_set_new(c, "num_key_value_heads", json_integer(p->num_key_value_heads));
    json_object_set_new(c, "rms_norm_eps", json_real(1e-6));
    json_object_set_new(c, "rope_scaling", json_null());
    json_object_set_new(c, "rope_theta", json_integer(1000000));
    json_object_set_new(c, "sliding_window", json_null());
    json_object_set_new(c, "tie_word_embeddings", json_boolean(p->tie_word_embeddings));
    json_object_set_new(c, "torch_dtype", json_string("bfloat16"));
    json_object_set_new(c, "transformers_version", json_string("4.51.0"));
    json_object_set_new(c, "use_cache", json_true());
    json_object_set_new(c, "use_sliding_window", json_false());
    json_object_set_new(c, "vocab_size", json_integer(o->vocab_size > 0 ? o->vocab_size : p->vocab_size));
    if (o->fp8)
        json_object_set_new(c, "quantization_config",
                            json_pack("{s:s, s:s, s:s, s:[i,i], s:[s]}", "quant_method", "fp8", "fmt", "e4m3",
                                      "activation_scheme", "dynamic", "weight_block_size", 128, 128,
                                      "modules_to_not_convert", "lm_head"));
    return c;
}

int iris_synth_config_json(const iris_synth_opts *o, char **out, iris_err *err) {
    *out = NULL;
    const preset *p = find_preset(o->like, err);
    if (!p) return IRIS_EINVAL;
    if (p->text) {
        json_t *c = text_model_config(o, p);
        *out = json_dumps(c, JSON_INDENT(2));
        json_decref(c);
        return *out ? 0 : iris_err_set(err, IRIS_ENOMEM, "synth: out of memory");
    }
    json_t *c = json_object(), *t = json_object(), *v = json_object(), *rs = json_object();
    json_object_set_new(c, "architectures", json_pack("[s]", "Qwen3VLForConditionalGeneration"));
    json_object_set_new(c, "image_token_id", json_integer(151655));
    json_object_set_new(c, "model_type", json_string("qwen3_vl"));
    json_object_set_new(t, "attention_bias", json_false());
    json_object_set_new(t, "attention_dropout", json_real(0.0));
    json_object_set_new(t, "bos_token_id", json_integer(151643));
    json_object_set_new(t, "dtype", json_string("bfloat16"));
    json_object_set_new(t, "eos_token_id", json_integer(151645));
    json_object_set_new(t, "head_dim", json_integer(p->head_dim));
    json_object_set_new(t, "hidden_act", json_string("silu"));
    json_object_set_new(t, "hidden_size", json_integer(p->hidden_size));
    json_object_set_new(t, "initializer_range", json_real(0.02));
    json_object_set_new(t, "intermediate_size", json_integer(p->intermediate_size));
    json_object_set_new(t, "max_position_embeddings", json_integer(262144));
    json_object_set_new(t, "model_type", json_string("qwen3_vl_text"));
    json_object_set_new(t, "num_attention_heads", json_integer(p->num_attention_heads));
    json_object_set_new(t, "num_hidden_layers", json_integer(p->num_hidden_layers));
    json_object_set_new(t, "num_key_value_heads", json_integer(p->num_key_value_heads));
    json_object_set_new(t, "rms_norm_eps", json_real(1e-6));
    json_object_set_new(rs, "mrope_interleaved", json_true());
    json_object_set_new(rs, "mrope_section", int_array(p->mrope_section, 3));
    json_object_set_new(rs, "rope_type", json_string("default"));
    json_object_set_new(t, "rope_scaling", rs);
    json_object_set_new(t, "rope_theta", json_integer(5000000));
    json_object_set_new(t, "tie_word_embeddings", json_boolean(p->tie_word_embeddings));
    json_object_set_new(t, "use_cache", json_true());
    json_object_set_new(t, "vocab_size", json_integer(o->vocab_size > 0 ? o->vocab_size : p->vocab_size));
    json_object_set_new(c, "text_config", t);
    json_object_set_new(c, "tie_word_embeddings", json_boolean(p->tie_word_embeddings));
    json_object_set_new(c, "transformers_version", json_string("4.57.0.dev0"));
    json_object_set_new(c, "video_token_id", json_integer(151656));
    json_object_set_new(v, "deepstack_visual_indexes", int_array(p->deepstack, p->n_deepstack));
    json_object_set_new(v, "depth", json_integer(p->v_depth));
    json_object_set_new(v, "hidden_act", json_string("gelu_pytorch_tanh"));
    json_object_set_new(v, "hidden_size", json_integer(p->v_hidden_size));
    json_object_set_new(v, "in_channels", json_integer(3));
    json_object_set_new(v, "initializer_range", json_real(0.02));
    json_object_set_new(v, "intermediate_size", json_integer(p->v_intermediate_size));
    json_object_set_new(v, "model_type", json_string("qwen3_vl"));
    json_object_set_new(v, "num_heads", json_integer(p->v_num_heads));
    json_object_set_new(v, "num_position_embeddings", json_integer(p->v_num_position_embeddings));
    json_object_set_new(v, "out_hidden_size", json_integer(p->v_out_hidden_size));
    json_object_set_new(v, "patch_size", json_integer(16));
    json_object_set_new(v, "spatial_merge_size", json_integer(2));
    json_object_set_new(v, "temporal_patch_size", json_integer(2));
    json_object_set_new(c, "vision_config", v);
    json_object_set_new(c, "vision_end_token_id", json_integer(151653));
    json_object_set_new(c, "vision_start_token_id", json_integer(151652));
    if (o->int4)
        json_object_set_new(c, "quantization_config", iris_quantize_int4_config(SYNTH_GROUP, 1));
    else if (o->fp8)
        json_object_set_new(c, "quantization_config",
                            json_pack("{s:s, s:s, s:s, s:[i,i], s:[s,s]}", "quant_method", "fp8", "fmt", "e4m3",
                                      "activation_scheme", "dynamic", "weight_block_size", 128, 128,
                                      "modules_to_not_convert", "lm_head", "model.visual"));
    *out = json_dumps(c, JSON_INDENT(2));
    json_decref(c);
    return *out ? 0 : iris_err_set(err, IRIS_ENOMEM, "synth: out of memory");
}

static const char g_generation_config[] =
    "{\n    \"bos_token_id\": 151643,\n    \"pad_token_id\": 151643,\n    \"do_sample\": true,\n"
    "    \"eos_token_id\": [\n        151645,\n        151643\n    ],\n    \"top_k\": 20,\n    \"top_p\": 0.8,\n"
    "    \"repetition_penalty\": 1.0,\n    \"temperature\": 0.7,\n    \"transformers_version\": \"4.56.0\"\n}\n";
static const char g_preprocessor_config[] =
    "{\n    \"size\": {\n        \"longest_edge\": 16777216,\n        \"shortest_edge\": 65536\n    },\n"
    "    \"patch_size\": 16,\n    \"temporal_patch_size\": 2,\n    \"merge_size\": 2,\n"
    "    \"image_mean\": [0.5, 0.5, 0.5],\n    \"image_std\": [0.5, 0.5, 0.5],\n"
    "    \"processor_class\": \"Qwen3VLProcessor\",\n    \"image_processor_type\": \"Qwen2VLImageProcessorFast\"\n}\n";
static const char g_video_preprocessor_config[] =
    "{\n    \"size\": {\n        \"longest_edge\": 25165824,\n        \"shortest_edge\": 4096\n    },\n"
    "    \"patch_size\": 16,\n    \"temporal_patch_size\": 2,\n    \"merge_size\": 2,\n"
    "    \"image_mean\": [0.5, 0.5, 0.5],\n    \"image_std\": [0.5, 0.5, 0.5],\n"
    "    \"processor_class\": \"Qwen3VLProcessor\",\n    \"video_processor_type\": \"Qwen3VLVideoProcessor\"\n}\n";

/* ---- random values ---- */

static uint16_t g_tab_w[65536], g_tab_norm[65536];
static uint8_t g_tab_f8[65536];
static pthread_once_t g_tab_once = PTHREAD_ONCE_INIT;

static uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1); /* round to nearest even (finite inputs) */
    return (uint16_t)(u >> 16);
}

/* Standard normal quantile by bisection on erfc: exact to float precision. */
static double normal_quantile(double pr) {
    double lo = -10.0, hi = 10.0;
    for (int it = 0; it < 64; it++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < pr) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

static void build_tables(void) {
    for (int i = 0; i < 32768; i++) {
        double z = normal_quantile((i + 0.5) / 65536.0); /* negative half; the other is its mirror */
        int j = 65535 - i;
        g_tab_w[i] = to_bf16((float)(0.02 * z));
        g_tab_w[j] = to_bf16((float)(-0.02 * z));
        g_tab_norm[i] = to_bf16((float)(1.0 + 0.02 * z));
        g_tab_norm[j] = to_bf16((float)(1.0 - 0.02 * z));
        g_tab_f8[i] = iris_fp8_e4m3_encode((float)(z * 448.0 / 4.5));
        g_tab_f8[j] = iris_fp8_e4m3_encode((float)(-z * 448.0 / 4.5));
    }
}


typedef struct rng { uint64_t s[4]; } rng;

static void rng_seed(rng *r, uint64_t a, uint64_t b, uint64_t c) {
    uint64_t x = iris_mix64(a ^ iris_mix64(b ^ iris_mix64(c)));
    for (int i = 0; i < 4; i++) r->s[i] = x = iris_mix64(x + (uint64_t)i);
}

static uint64_t rng_next(rng *r) { return iris_xoshiro_next(r->s); }

typedef struct gtensor {
    char name[256];
    iris_dtype dtype;
    int n_dims;
    int64_t shape[5];
    kind k;
    uint64_t hash, n_bytes;
    int64_t aux[2];             /* K_I4_SHAPE: the weight's [out, in], its contents */
} gtensor;

/* Bytes [b0, b1) of tensor t, b0 a multiple of SUB_BYTES. */
static void gen_bytes(const gtensor *t, uint64_t seed, uint64_t b0, uint64_t b1, uint8_t *dst) {
    for (uint64_t c0 = b0; c0 < b1; c0 += SUB_BYTES) {
        uint64_t c1 = c0 + SUB_BYTES < b1 ? c0 + SUB_BYTES : b1;
        rng r;
        rng_seed(&r, seed, t->hash, c0 / SUB_BYTES);
        uint8_t *d = dst + (c0 - b0);
        size_t n = (size_t)(c1 - c0);
        if (t->k == K_I4_SHAPE) {
            memcpy(d, t->aux, sizeof t->aux);
        } else if (t->k == K_I4) {
            for (size_t i = 0; i + 8 <= n; i += 8) {   /* uniform codes: every nibble of random bits */
                uint64_t x = rng_next(&r);
                memcpy(d + i, &x, 8);
            }
        } else if (t->k == K_I4_SCALE) {
            uint16_t *h = (uint16_t *)d;
            for (size_t i = 0; i < n / 2; i++) {
                double u = (double)(rng_next(&r) >> 11) * 0x1.0p-53;
                h[i] = to_bf16((float)(0.02 / 4.61 * (0.75 + 0.5 * u)));   /* codes -8..7 have sd 4.61 */
            }
        } else if (t->k == K_SCALE) {
            float *f = (float *)d;
            for (size_t i = 0; i < n / 4; i++) {
                double u = (double)(rng_next(&r) >> 11) * 0x1.0p-53;
                f[i] = (float)(0.02 * 4.5 / 448.0 * (0.75 + 0.5 * u));
            }
        } else if (t->k == K_F8) {
            size_t i = 0;
            for (; i + 4 <= n; i += 4) {
                uint64_t x = rng_next(&r);
                d[i] = g_tab_f8[x & 0xffff];
                d[i + 1] = g_tab_f8[(x >> 16) & 0xffff];
                d[i + 2] = g_tab_f8[(x >> 32) & 0xffff];
                d[i + 3] = g_tab_f8[x >> 48];
            }
            for (uint64_t x = rng_next(&r); i < n; i++, x >>= 16) d[i] = g_tab_f8[x & 0xffff];
        } else {
            const uint16_t *tab = t->k == K_NORM ? g_tab_norm : g_tab_w;
            uint16_t *h = (uint16_t *)d;
            size_t ne = n / 2, i = 0;
            for (; i + 4 <= ne; i += 4) {
                uint64_t x = rng_next(&r);
                h[i] = tab[x & 0xffff];
                h[i + 1] = tab[(x >> 16) & 0xffff];
                h[i + 2] = tab[(x >> 32) & 0xffff];
                h[i + 3] = tab[x >> 48];
            }
            for (uint64_t x = rng_next(&r); i < ne; i++, x >>= 16) h[i] = tab[x & 0xffff];
        }
    }
}

typedef struct gen_job {
    const gtensor *t;
    uint64_t seed, b0, b1;
    uint8_t *dst;
    int part, n_parts;
} gen_job;

static void *gen_worker(void *arg) {
    gen_job *j = arg;
    uint64_t n_sub = (j->b1 - j->b0 + SUB_BYTES - 1) / SUB_BYTES;
    for (uint64_t s = (uint64_t)j->part; s < n_sub; s += (uint64_t)j->n_parts) {
        uint64_t a = j->b0 + s * SUB_BYTES, b = a + SUB_BYTES < j->b1 ? a + SUB_BYTES : j->b1;
        gen_bytes(j->t, j->seed, a, b, j->dst + (a - j->b0));
    }
    return NULL;
}

static void gen_parallel(const gtensor *t, uint64_t seed, uint64_t b0, uint64_t b1, uint8_t *dst, int n_threads) {
    uint64_t n_sub = (b1 - b0 + SUB_BYTES - 1) / SUB_BYTES;
    if (n_threads <= 1 || n_sub < 2) {
        gen_bytes(t, seed, b0, b1, dst);
        return;
    }
    int nt = n_threads < (int)n_sub ? n_threads : (int)n_sub;
    pthread_t th[MAX_THREADS];
    gen_job jobs[MAX_THREADS];
    int ok[MAX_THREADS] = {0};
    for (int i = 0; i < nt; i++) {
        jobs[i] = (gen_job){t, seed, b0, b1, dst, i, nt};
        ok[i] = i > 0 && pthread_create(&th[i], NULL, gen_worker, &jobs[i]) == 0;
    }
    /* Part 0, and any part whose thread could not start, run here. */
    for (int i = 0; i < nt; i++)
        if (!ok[i]) gen_worker(&jobs[i]);
    for (int i = 1; i < nt; i++)
        if (ok[i]) pthread_join(th[i], NULL);
}

/* ---- writing ---- */

typedef struct glist {
    gtensor *t;
    int n, cap;
    int oom;
} glist;

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

static void collect(void *ctx, const char *name, iris_dtype dt, int n_dims, const int64_t *shape, kind k) {
    glist *l = ctx;
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 512;
        gtensor *t = realloc(l->t, (size_t)nc * sizeof *t);
        if (!t) {
            l->oom = 1;
            return;
        }
        l->t = t;
        l->cap = nc;
    }
    gtensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dt;
    t->n_dims = n_dims;
    uint64_t ne = 1;
    for (int d = 0; d < n_dims; d++) ne *= (uint64_t)(t->shape[d] = shape[d]);
    t->k = k;
    if (k == K_I4_SHAPE) t->aux[0] = shape[1], t->aux[1] = shape[2];
    t->hash = fnv1a(name);
    t->n_bytes = ne * iris_dtype_size(dt);
}

static int copy_beside(const char *tok_path, const char *name, const char *dir, int required, iris_err *err) {
    char src[4096], dst[4096];
    if (required) {
        snprintf(src, sizeof src, "%s", tok_path);
    } else {
        const char *slash = strrchr(tok_path, '/');
        int dl = slash ? (int)(slash - tok_path) : 1;
        snprintf(src, sizeof src, "%.*s/%s", dl, slash ? tok_path : ".", name);
        if (access(src, R_OK) != 0) return 0;
    }
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    return iris_st_copy_file(src, dst, err);
}

static int write_text(const char *dir, const char *name, const char *text, iris_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return iris_st_write_file(path, text, strlen(text), err);
}

int iris_synth_write(const char *dir, const iris_synth_opts *o, iris_err *err) {
    const preset *p = find_preset(o->like, err);
    if (!p) return IRIS_EINVAL;
    if (o->vocab_size < 0) return iris_err_set(err, IRIS_EINVAL, "vocabulary size %d: must be > 0", o->vocab_size);
    if (o->tokenizer && access(o->tokenizer, R_OK) != 0)
        return iris_err_set(err, IRIS_ENOTFOUND, "--tokenizer %s: %s", o->tokenizer, strerror(errno));
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return iris_err_set(err, IRIS_EIO, "cannot create %s: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return iris_err_set(err, IRIS_EINVAL, "%s is not a directory", dir);
    pthread_once(&g_tab_once, build_tables);

    int n_threads = o->n_threads > 0 ? o->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;

    glist l = {0};
    emit_ctx e = {NULL, &l, collect};
    list_tensors(p, o->vocab_size > 0 ? o->vocab_size : p->vocab_size, lin_mode(o), &e);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    iris_st_writer *w = NULL;
    uint8_t *buf = NULL;
    char *cfg = NULL;
    int rc = l.oom ? iris_err_set(err, IRIS_ENOMEM, "synth: out of memory") : 0;
    if (!rc) rc = iris_st_writer_open(path, &w, err);
    for (int i = 0; !rc && i < l.n; i++) {
        int idx = iris_st_writer_add(w, l.t[i].name, l.t[i].dtype, l.t[i].n_dims, l.t[i].shape, err);
        if (idx < 0) rc = idx;
    }
    if (!rc) rc = iris_st_writer_meta(w, "iris_synth", "random weights for benchmarks", err);
    if (!rc && !(buf = malloc(PIECE_BYTES))) rc = iris_err_set(err, IRIS_ENOMEM, "synth: out of memory");
    if (!rc) rc = iris_st_writer_begin(w, err);
    if (!rc)
        iris_log(IRIS_LOG_INFO, "synth", "%s %s: %d tensors, %.2f GB -> %s (%d threads)", p->name,
                 o->int4 ? "int4" : o->fp8 ? "fp8" : "bf16", l.n, (double)iris_st_writer_file_bytes(w) / 1e9, path, n_threads);
    uint64_t total = rc ? 0 : iris_st_writer_file_bytes(w), written = 0, next_report = total / 10;
    for (int idx; !rc && (idx = iris_st_writer_next(w)) >= 0;) {
        const gtensor *t = &l.t[idx];
        for (uint64_t off = 0; !rc && off < t->n_bytes; off += PIECE_BYTES) {
            uint64_t end = off + PIECE_BYTES < t->n_bytes ? off + PIECE_BYTES : t->n_bytes;
            gen_parallel(t, o->seed, off, end, buf, n_threads);
            rc = iris_st_writer_write(w, buf, (size_t)(end - off), err);
            written += end - off;
            if (!rc && written >= next_report && total > (64u << 20)) {
                iris_log(IRIS_LOG_INFO, "synth", "%.0f%%", 100.0 * (double)written / (double)total);
                next_report += total / 10;
            }
        }
    }
    if (!rc) rc = iris_st_writer_finish(w, err);
    if (!rc) rc = iris_synth_config_json(o, &cfg, err);
    if (!rc) {
        size_t n = strlen(cfg);
        char *c2 = realloc(cfg, n + 2);
        if (c2) cfg = c2, cfg[n] = '\n', cfg[n + 1] = '\0';
        rc = write_text(dir, "config.json", cfg, err);
    }
    if (!rc) rc = write_text(dir, "generation_config.json", g_generation_config, err);
    if (!rc && !p->text) rc = write_text(dir, "preprocessor_config.json", g_preprocessor_config, err);
    if (!rc && !p->text) rc = write_text(dir, "video_preprocessor_config.json", g_video_preprocessor_config, err);
    if (!rc && o->tokenizer) {
        rc = copy_beside(o->tokenizer, "tokenizer.json", dir, 1, err);
        static const char *const side[] = {"tokenizer_config.json", "chat_template.json", "chat_template.jinja",
                                           "vocab.json", "merges.txt"};
        for (size_t i = 0; !rc && i < sizeof side / sizeof *side; i++)
            rc = copy_beside(o->tokenizer, side[i], dir, 0, err);
    }
    free(cfg);
    free(buf);
    free(l.t);
    iris_st_writer_close(w);
    return rc;
}

/* ---- header-only checkpoints, for `iris plan` ---- */

typedef struct header_ctx {
    json_t *h;
    uint64_t off;   /* the data's bytes so far */
} header_ctx;

static void add_header_entry(void *ctx, const char *name, iris_dtype dt, int n_dims, const int64_t *shape) {
    header_ctx *c = ctx;
    uint64_t ne = 1;
    json_t *sh = json_array();
    for (int d = 0; d < n_dims; d++) json_array_append_new(sh, json_integer(shape[d])), ne *= (uint64_t)shape[d];
    uint64_t nb = ne * iris_dtype_size(dt);
    json_object_set_new(c->h, name, json_pack("{s:s, s:o, s:[I,I]}", "dtype", iris_dtype_name(dt), "shape", sh,
                                              "data_offsets", (json_int_t)c->off, (json_int_t)(c->off + nb)));
    c->off += nb;
}

int iris_synth_write_headers(const char *dir, const iris_synth_opts *o, iris_err *err) {
    const preset *p = find_preset(o->like, err);
    if (!p) return IRIS_EINVAL;
    header_ctx c = {json_pack("{s:{s:s}}", "__metadata__", "format", "pt"), 0};
    emit_ctx e = {add_header_entry, &c, NULL};
    list_tensors(p, o->vocab_size > 0 ? o->vocab_size : p->vocab_size, lin_mode(o), &e);
    json_t *h = c.h;
    uint64_t data = c.off;
    char *hdr = json_dumps(h, JSON_COMPACT), *cfg = NULL, path[4096];
    json_decref(h);
    int rc = hdr ? 0 : iris_err_set(err, IRIS_ENOMEM, "synth: out of memory");
    if (!rc) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = iris_hub_write_sparse_st(path, hdr, strlen(hdr), data, err);
    }
    if (!rc) rc = iris_synth_config_json(o, &cfg, err);
    if (!rc) rc = write_text(dir, "config.json", cfg, err);
    free(hdr);
    free(cfg);
    return rc;
}
