/* config.c: config.json, generation_config.json, preprocessor_config.json.
 *
 * What transformers 5.17 does with these files is the reference (checked by
 * tests/test_config.c against tests/fixtures/loader/hf_configs.json, written
 * by tools/ref_loader.py on the GPU machine):
 *   - Missing text/vision keys take the Qwen3VLTextConfig / Qwen3VLVisionConfig
 *     class defaults (a 7B-like shape, not the 2B/4B one); head_dim defaults
 *     to 128, not hidden/heads (hidden/heads only when it is null).
 *   - Rope: text_config.rope_parameters, else text_config.rope_scaling +
 *     rope_theta (the 4.57 form); rope_theta defaults to 500000 and
 *     mrope_section to [24, 20, 20] (modeling_qwen3_vl's fallback).  Keys at
 *     the top level are not read, as in transformers.
 *   - The vision rope theta is vision_config.rope_parameters.rope_theta, 10000.
 *   - Tying lm_head to embed_tokens follows the top-level tie_word_embeddings
 *     only (default false); text_config's copy does not tie the model.
 *   - generation_config: a present file's missing keys are GenerationConfig's
 *     defaults (greedy, top_k 50, top_p 1, temperature 1); a missing file is
 *     Qwen3-VL's published one (QWEN3VL.md §1.3).
 *   - preprocessor_config: size.shortest_edge / longest_edge are pixel areas
 *     (min/max pixels); top-level min_pixels / max_pixels override them; a
 *     present file's missing keys are Qwen2VLImageProcessor's defaults; a
 *     missing file is Qwen3-VL's published one (QWEN3VL.md §1.4).
 *   - model_type "qwen3" (Qwen3ForCausalLM): the same text keys read from the
 *     top level with Qwen3Config's defaults where they differ (rope_theta
 *     10000, max_position_embeddings 32768), no vision_config (zeroed,
 *     has_vision 0), sliding-window attention refused.
 * Owns nothing: results are plain structs.
 */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#define MAX_DIM 1000000             /* sanity bound on any width or count */
#define MAX_VOCAB (16 << 20)
#define MAX_POSITIONS (1 << 30)

/* ---- typed getters: null or absent keeps the default ---- */

typedef struct ctx {
    const char *label;  /* the file, for messages */
    const char *where;  /* "text_config." or "" */
    iris_err *err;
} ctx;

static int get_int(const ctx *c, json_t *obj, const char *key, int *out) {
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < -2147483647 || json_integer_value(v) > 2147483647)
        return iris_err_set(c->err, IRIS_EFORMAT, "%s: %s%s must be an integer", c->label, c->where, key);
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_int64(const ctx *c, json_t *obj, const char *key, int64_t *out) {
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return iris_err_set(c->err, IRIS_EFORMAT, "%s: %s%s must be an integer", c->label, c->where, key);
    *out = json_integer_value(v);
    return 0;
}

static int get_num(const ctx *c, json_t *obj, const char *key, double *out) {
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return iris_err_set(c->err, IRIS_EFORMAT, "%s: %s%s must be a number", c->label, c->where, key);
    *out = json_number_value(v);
    return 0;
}

static int get_float(const ctx *c, json_t *obj, const char *key, float *out) {
    double d = *out;
    int rc = get_num(c, obj, key, &d);
    *out = (float)d;
    return rc;
}

static int get_bool(const ctx *c, json_t *obj, const char *key, int *out) {
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return iris_err_set(c->err, IRIS_EFORMAT, "%s: %s%s must be true or false", c->label, c->where, key);
    *out = json_is_true(v);
    return 0;
}

static int get_str(const ctx *c, json_t *obj, const char *key, char *out, size_t size) {
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return iris_err_set(c->err, IRIS_EFORMAT, "%s: %s%s must be a string", c->label, c->where, key);
    if (strlen(json_string_value(v)) >= size)
        return iris_err_set(c->err, IRIS_EFORMAT, "%s: %s%s \"%.40s...\" is too long", c->label, c->where, key,
                            json_string_value(v));
    strcpy(out, json_string_value(v));
    return 0;
}

/* An array of up to `max` integers; *n receives the count. */
static int get_int_array(const ctx *c, json_t *obj, const char *key, int *out, int max, int *n) {
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v)) return iris_err_set(c->err, IRIS_EFORMAT, "%s: %s%s must be an array of integers", c->label, c->where, key);
    if (json_array_size(v) > (size_t)max)
        return iris_err_set(c->err, IRIS_ELIMIT, "%s: %s%s has %zu entries, at most %d are supported", c->label,
                            c->where, key, json_array_size(v), max);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || json_integer_value(x) < -2147483647 || json_integer_value(x) > 2147483647)
            return iris_err_set(c->err, IRIS_EFORMAT, "%s: %s%s[%zu] must be an integer", c->label, c->where, key, i);
        out[i] = (int)json_integer_value(x);
    }
    *n = (int)json_array_size(v);
    return 0;
}

static json_t *get_obj(const ctx *c, json_t *obj, const char *key, int *rc) {
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) return NULL;
    if (!json_is_object(v)) *rc = iris_err_set(c->err, IRIS_EFORMAT, "%s: %s%s must be an object", c->label, c->where, key);
    return json_is_object(v) ? v : NULL;
}

static json_t *load_text(const char *text, const char *label, iris_err *err) {
    json_error_t jerr;
    json_t *root = json_loads(text ? text : "", JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        iris_err_set(err, IRIS_EFORMAT, "%s: not valid JSON: %s (line %d, column %d)", label, jerr.text, jerr.line,
                     jerr.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        iris_err_set(err, IRIS_EFORMAT, "%s: not a JSON object", label);
        return NULL;
    }
    return root;
}

/* ---- config.json ---- */

static int read_rope(const ctx *c, json_t *tc, iris_text_config *t) {
    int rc = 0;
    json_t *rp = get_obj(c, tc, "rope_parameters", &rc);
    if (rc) return rc;
    ctx rc_ctx = *c;
    char where[48];
    snprintf(where, sizeof where, "%s%s.", c->where, rp ? "rope_parameters" : "rope_scaling");
    rc_ctx.where = where;
    if (!rp) {
        if ((rc = get_num(c, tc, "rope_theta", &t->rope_theta))) return rc;
        rp = get_obj(c, tc, "rope_scaling", &rc);
        if (rc) return rc;
    }
    if (!rp) return 0;
    char type[32] = "default";
    if ((rc = get_str(&rc_ctx, rp, "rope_type", type, sizeof type))) return rc;
    if (!json_object_get(rp, "rope_type") && (rc = get_str(&rc_ctx, rp, "type", type, sizeof type))) return rc;
    /* "mrope" is how Qwen2-VL-era configs spelled the plain multimodal rope. */
    if (strcmp(type, "default") && strcmp(type, "mrope"))
        return iris_err_set(c->err, IRIS_EUNSUPPORTED,
                            "%s: %srope_type \"%s\" is not supported (iris implements \"default\" multimodal rope)",
                            c->label, rc_ctx.where, type);
    if ((rc = get_num(&rc_ctx, rp, "rope_theta", &t->rope_theta))) return rc;
    int n = 3;
    if ((rc = get_int_array(&rc_ctx, rp, "mrope_section", t->mrope_section, 3, &n))) return rc;
    if (n != 3)
        return iris_err_set(c->err, IRIS_EFORMAT, "%s: %smrope_section has %d entries; it needs 3 (t, h, w)", c->label,
                            rc_ctx.where, n);
    return get_bool(&rc_ctx, rp, "mrope_interleaved", &t->mrope_interleaved);
}

/* `flat`: a Qwen3ForCausalLM config, the text keys at the top level. */
static int read_text(const ctx *top, json_t *tc, iris_text_config *t, int flat) {
    ctx c = *top;
    c.where = flat ? "" : "text_config.";
    /* Qwen3VLTextConfig's class defaults (transformers 5.17); Qwen3Config's differ where noted. */
    t->vocab_size = 151936;
    t->hidden_size = 4096;
    t->intermediate_size = 22016;
    t->num_hidden_layers = 32;
    t->num_attention_heads = 32;
    t->num_key_value_heads = 32;
    t->head_dim = 128;
    t->max_position_embeddings = flat ? 32768 : 128000;
    t->rms_norm_eps = 1e-6f;
    t->rope_theta = flat ? 10000.0 : 500000.0;
    t->mrope_section[0] = 24, t->mrope_section[1] = 20, t->mrope_section[2] = 20;
    t->mrope_interleaved = 1;
    t->attention_bias = 0;
    strcpy(t->hidden_act, "silu");
    int rc;
    if ((rc = get_int(&c, tc, "vocab_size", &t->vocab_size)) || (rc = get_int(&c, tc, "hidden_size", &t->hidden_size)) ||
        (rc = get_int(&c, tc, "intermediate_size", &t->intermediate_size)) ||
        (rc = get_int(&c, tc, "num_hidden_layers", &t->num_hidden_layers)) ||
        (rc = get_int(&c, tc, "num_attention_heads", &t->num_attention_heads)) ||
        (rc = get_int(&c, tc, "num_key_value_heads", &t->num_key_value_heads)) ||
        (rc = get_int(&c, tc, "max_position_embeddings", &t->max_position_embeddings)) ||
        (rc = get_float(&c, tc, "rms_norm_eps", &t->rms_norm_eps)) ||
        (rc = get_bool(&c, tc, "attention_bias", &t->attention_bias)) ||
        (rc = get_str(&c, tc, "hidden_act", t->hidden_act, sizeof t->hidden_act)))
        return rc;
    /* As in transformers: absent keys take the class defaults (32, 128); an
     * explicit null num_key_value_heads means MHA, a null head_dim hidden/heads. */
    json_t *kv = tc ? json_object_get(tc, "num_key_value_heads") : NULL;
    if (kv && json_is_null(kv)) t->num_key_value_heads = t->num_attention_heads;
    json_t *hd = tc ? json_object_get(tc, "head_dim") : NULL;
    if (hd && json_is_null(hd)) t->head_dim = t->num_attention_heads > 0 ? t->hidden_size / t->num_attention_heads : 0;
    else if ((rc = get_int(&c, tc, "head_dim", &t->head_dim))) return rc;
    if (flat) {
        /* 1-D RoPE as an MRoPE whose one section is every frequency (config.h). */
        t->mrope_section[0] = t->head_dim / 2, t->mrope_section[1] = t->mrope_section[2] = 0;
        t->mrope_interleaved = 0;
        int sliding = 0;
        if ((rc = get_bool(&c, tc, "use_sliding_window", &sliding))) return rc;
        if (sliding)
            return iris_err_set(c.err, IRIS_EUNSUPPORTED,
                                "%s: use_sliding_window is true; iris runs full attention only", c.label);
    }
    return read_rope(&c, tc, t);
}

static int read_vision(const ctx *top, json_t *vc, iris_vision_config *v) {
    ctx c = *top;
    c.where = "vision_config.";
    /* Qwen3VLVisionConfig's class defaults (transformers 5.17). */
    v->depth = 27;
    v->hidden_size = 1152;
    v->intermediate_size = 4304;
    v->num_heads = 16;
    v->in_channels = 3;
    v->patch_size = 16;
    v->temporal_patch_size = 2;
    v->spatial_merge_size = 2;
    v->out_hidden_size = 3584;
    v->num_position_embeddings = 2304;
    v->n_deepstack = 3;
    v->deepstack_visual_indexes[0] = 8, v->deepstack_visual_indexes[1] = 16, v->deepstack_visual_indexes[2] = 24;
    v->rope_theta = 10000.0;
    strcpy(v->hidden_act, "gelu_pytorch_tanh");
    int rc = 0;
    if ((rc = get_int(&c, vc, "depth", &v->depth)) || (rc = get_int(&c, vc, "hidden_size", &v->hidden_size)) ||
        (rc = get_int(&c, vc, "intermediate_size", &v->intermediate_size)) ||
        (rc = get_int(&c, vc, "num_heads", &v->num_heads)) || (rc = get_int(&c, vc, "in_channels", &v->in_channels)) ||
        (rc = get_int(&c, vc, "patch_size", &v->patch_size)) ||
        (rc = get_int(&c, vc, "temporal_patch_size", &v->temporal_patch_size)) ||
        (rc = get_int(&c, vc, "spatial_merge_size", &v->spatial_merge_size)) ||
        (rc = get_int(&c, vc, "out_hidden_size", &v->out_hidden_size)) ||
        (rc = get_int(&c, vc, "num_position_embeddings", &v->num_position_embeddings)) ||
        (rc = get_int_array(&c, vc, "deepstack_visual_indexes", v->deepstack_visual_indexes, IRIS_MAX_DEEPSTACK,
                            &v->n_deepstack)) ||
        (rc = get_str(&c, vc, "hidden_act", v->hidden_act, sizeof v->hidden_act)))
        return rc;
    json_t *rp = get_obj(&c, vc, "rope_parameters", &rc);
    if (rc) return rc;
    ctx rc_ctx = c;
    rc_ctx.where = "vision_config.rope_parameters.";
    return get_num(&rc_ctx, rp, "rope_theta", &v->rope_theta);
}

/* One compressed-tensors scheme's "weights": 4-bit int per group, static, no activation order. */
static int read_ct_weights(const ctx *c, const char *group, json_t *w, iris_quant_config *q) {
    int bits = 0, gs = 0, sym = 1, dyn = 0, rc;
    char type[16] = "", strategy[16] = "", actorder[16] = "";
    json_t *ao = json_object_get(w, "actorder");
    if (json_is_true(ao)) strcpy(actorder, "true");
    if ((rc = get_int(c, w, "num_bits", &bits)) || (rc = get_int(c, w, "group_size", &gs)) ||
        (rc = get_bool(c, w, "symmetric", &sym)) || (rc = get_bool(c, w, "dynamic", &dyn)) ||
        (rc = get_str(c, w, "type", type, sizeof type)) || (rc = get_str(c, w, "strategy", strategy, sizeof strategy)) ||
        (!json_is_boolean(ao) && (rc = get_str(c, w, "actorder", actorder, sizeof actorder))))
        return rc;
    const char *why = NULL;
    char buf[96];
    if (bits != 4 || strcmp(type, "int"))
        snprintf(buf, sizeof buf, "%d-bit %s weights (iris reads 4-bit int)", bits, type[0] ? type : "?"), why = buf;
    else if (strcmp(strategy, "group"))
        snprintf(buf, sizeof buf, "strategy \"%s\" (iris reads \"group\")", strategy), why = buf;
    else if (gs <= 0 || gs % 8)
        snprintf(buf, sizeof buf, "group_size %d (iris reads a positive multiple of 8: 32, 64, 128)", gs), why = buf;
    else if (actorder[0] && strcmp(actorder, "weight"))
        snprintf(buf, sizeof buf, "activation order \"%s\" (GPTQ act-order with weight_g_idx)", actorder), why = buf;
    else if (dyn)
        why = "dynamic weight quantization";
    if (why)
        return iris_err_set(c->err, IRIS_EUNSUPPORTED,
                            "%s: quantization_config.config_groups.%s.weights: %s is not supported; iris reads "
                            "W4A16 pack-quantized checkpoints (4-bit int, strategy group, static, no act-order)",
                            c->label, group, why);
    if (q->group_size && (q->group_size != gs || q->symmetric != sym))
        return iris_err_set(c->err, IRIS_EUNSUPPORTED,
                            "%s: quantization_config.config_groups mix group sizes or symmetric and asymmetric "
                            "weights (%d/%s and %d/%s); iris reads one weight scheme per checkpoint",
                            c->label, q->group_size, q->symmetric ? "symmetric" : "asymmetric", gs,
                            sym ? "symmetric" : "asymmetric");
    q->group_size = gs;
    q->symmetric = sym;
    return 0;
}

/* quant_method "compressed-tensors" (llm-compressor): format "pack-quantized", W4A16 groups only. */
static int read_compressed_tensors(const ctx *c, json_t *qc, iris_quant_config *q) {
    char fmt[48] = "", status[32] = "";
    int rc;
    if ((rc = get_str(c, qc, "format", fmt, sizeof fmt)) || (rc = get_str(c, qc, "quantization_status", status,
                                                                          sizeof status)))
        return rc;
    if (strcmp(fmt, "pack-quantized"))
        return iris_err_set(c->err, IRIS_EUNSUPPORTED,
                            "%s: quantization_config.format \"%s\" is not supported (iris reads compressed-tensors "
                            "\"pack-quantized\" W4A16 checkpoints)",
                            c->label, fmt);
    if (status[0] && strcmp(status, "compressed"))
        return iris_err_set(c->err, IRIS_EUNSUPPORTED,
                            "%s: quantization_config.quantization_status \"%s\" is not supported (only "
                            "\"compressed\": packed 4-bit weights)",
                            c->label, status);
    json_t *kv = json_object_get(qc, "kv_cache_scheme");
    if (kv && !json_is_null(kv))
        return iris_err_set(c->err, IRIS_EUNSUPPORTED,
                            "%s: quantization_config.kv_cache_scheme is not supported (iris quantizes the KV cache "
                            "itself: --kv-cache-dtype fp8)",
                            c->label);
    json_t *groups = get_obj(c, qc, "config_groups", &rc);
    if (rc) return rc;
    if (!groups || !json_object_size(groups))
        return iris_err_set(c->err, IRIS_EFORMAT, "%s: quantization_config.config_groups is missing or empty", c->label);
    const char *name;
    json_t *g;
    json_object_foreach(groups, name, g) {
        char gfmt[48] = "";
        ctx gc = *c;
        gc.where = "quantization_config.config_groups.*.";
        json_t *w = json_is_object(g) ? json_object_get(g, "weights") : NULL, *a;
        if (!json_is_object(w))
            return iris_err_set(c->err, IRIS_EFORMAT, "%s: quantization_config.config_groups.%s has no \"weights\" "
                                "object", c->label, name);
        if ((rc = get_str(&gc, g, "format", gfmt, sizeof gfmt))) return rc;
        if (gfmt[0] && strcmp(gfmt, "pack-quantized"))
            return iris_err_set(c->err, IRIS_EUNSUPPORTED,
                                "%s: quantization_config.config_groups.%s.format \"%s\" is not supported (only "
                                "\"pack-quantized\")",
                                c->label, name, gfmt);
        if ((a = json_object_get(g, "input_activations")) && !json_is_null(a))
            return iris_err_set(c->err, IRIS_EUNSUPPORTED,
                                "%s: quantization_config.config_groups.%s quantizes input activations; iris reads "
                                "weight-only W4A16 checkpoints",
                                c->label, name);
        gc.where = "quantization_config.config_groups.*.weights.";
        if ((rc = read_ct_weights(&gc, name, w, q))) return rc;
    }
    q->int4 = 1;
    return 0;
}

/* ---- compressed-tensors' ignore list ---- */

static const char *const ct_linears[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                          "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

int iris_quant_ignores(const iris_quant_config *q, int il, int k) {
    if (il < 0 || il >= IRIS_QUANT_IGNORE_LAYERS || k < 0 || k > 6) return 0;
    int bit = il * 7 + k;
    return (q->ignored[bit / 8] >> (bit % 8)) & 1;
}

/* Whether entry `e` (re: its compiled "re:" pattern, or NULL) names module `name`: equal, or the
 * regex matching from its start (compressed-tensors' is_match: re.match). */
static int entry_matches(const char *e, const pcre2_code *re, pcre2_match_data *md, const char *name) {
    if (!re) return !strcmp(e, name);
    return pcre2_match(re, (PCRE2_SPTR)name, strlen(name), 0, PCRE2_ANCHORED, md, NULL) >= 0;
}

/* quantization_config.ignore against the decoder's linears and the lm_head (config.h). */
static int read_ignore(const ctx *c, json_t *qc, const char *prefix, int n_layers, iris_quant_config *q) {
    json_t *list = json_object_get(qc, "ignore"), *v;
    size_t i;
    if (!list || json_is_null(list)) return 0;
    if (!json_is_array(list))
        return iris_err_set(c->err, IRIS_EFORMAT, "%s: quantization_config.ignore must be a list of module names",
                            c->label);
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    if (!md) return iris_err_set(c->err, IRIS_ENOMEM, "out of memory");
    int rc = 0, L = n_layers < IRIS_QUANT_IGNORE_LAYERS ? n_layers : IRIS_QUANT_IGNORE_LAYERS;
    json_array_foreach(list, i, v) {
        const char *e = json_string_value(v);
        if (!e) {
            rc = iris_err_set(c->err, IRIS_EFORMAT, "%s: quantization_config.ignore[%zu] is not a string", c->label, i);
            break;
        }
        q->n_ignore++;
        pcre2_code *re = NULL;
        if (!strncmp(e, "re:", 3)) {
            int ec;
            PCRE2_SIZE eo;
            re = pcre2_compile((PCRE2_SPTR)(e + 3), PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
            if (!re) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(ec, msg, sizeof msg);
                rc = iris_err_set(c->err, IRIS_EFORMAT, "%s: quantization_config.ignore[%zu] \"%s\": %s at offset %zu",
                                  c->label, i, e, (const char *)msg, (size_t)eo);
                break;
            }
        }
        char name[160];
        q->lm_head_ignored |= entry_matches(e, re, md, "lm_head");
        for (int il = 0; il < L; il++)
            for (int k = 0; k < 7; k++) {
                snprintf(name, sizeof name, "%slayers.%d.%s", prefix, il, ct_linears[k]);
                if (entry_matches(e, re, md, name)) q->ignored[(il * 7 + k) / 8] |= (uint8_t)(1u << ((il * 7 + k) % 8));
            }
        pcre2_code_free(re);
    }
    pcre2_match_data_free(md);
    return rc;
}

static int read_quant(const ctx *top, json_t *qc, iris_quant_config *q) {
    ctx c = *top;
    c.where = "quantization_config.";
    memset(q, 0, sizeof *q);
    if (!qc) return 0;
    char method[32] = "", fmt[32] = "e4m3";
    int rc, n = 2;
    if ((rc = get_str(&c, qc, "quant_method", method, sizeof method))) return rc;
    if (!strcmp(method, "compressed-tensors")) return read_compressed_tensors(&c, qc, q);
    if ((rc = get_str(&c, qc, "fmt", fmt, sizeof fmt))) return rc;
    if (strcmp(method, "fp8"))
        return iris_err_set(c.err, IRIS_EUNSUPPORTED,
                            "%s: quantization_config.quant_method \"%s\" is not supported (iris reads BF16 checkpoints, "
                            "Qwen's block-FP8 ones, quant_method \"fp8\", and 4-bit W4A16 ones, quant_method "
                            "\"compressed-tensors\" with format \"pack-quantized\")",
                            c.label, method);
    if (strcmp(fmt, "e4m3"))
        return iris_err_set(c.err, IRIS_EUNSUPPORTED,
                            "%s: quantization_config.fmt \"%s\" is not supported (only \"e4m3\")", c.label, fmt);
    q->fp8 = 1;
    q->weight_block_size[0] = q->weight_block_size[1] = 128;
    if ((rc = get_int_array(&c, qc, "weight_block_size", q->weight_block_size, 2, &n))) return rc;
    if (n != 2 || q->weight_block_size[0] <= 0 || q->weight_block_size[1] <= 0)
        return iris_err_set(c.err, IRIS_EFORMAT,
                            "%s: quantization_config.weight_block_size must be two positive integers ([128, 128])",
                            c.label);
    return 0;
}

int iris_config_read(const char *json_text, const char *label, iris_config *cfg, iris_err *err) {
    memset(cfg, 0, sizeof *cfg);
    json_t *root = load_text(json_text, label, err);
    if (!root) return err ? err->code : IRIS_EFORMAT;
    ctx c = {label, "", err};
    int rc = 0;
    if (!json_is_string(json_object_get(root, "model_type"))) {
        rc = iris_err_set(err, IRIS_EFORMAT, "%s: \"model_type\" is missing; is this a Hugging Face config.json?", label);
        goto out;
    }
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", json_string_value(json_object_get(root, "model_type")));
    int flat = !strcmp(cfg->model_type, "qwen3");
    if (!flat && strcmp(cfg->model_type, "qwen3_vl")) {
        rc = iris_err_set(err, IRIS_EUNSUPPORTED,
                          "%s: model_type \"%s\" is not supported; iris runs model_type \"qwen3_vl\" "
                          "(Qwen3VLForConditionalGeneration: Qwen3-VL 2B/4B/8B, BF16 or FP8) and \"qwen3\" "
                          "(Qwen3ForCausalLM: Qwen3 text models)",
                          label, json_string_value(json_object_get(root, "model_type")));
        goto out;
    }
    const char *arch = flat ? "Qwen3ForCausalLM" : "Qwen3VLForConditionalGeneration";
    strcpy(cfg->architecture, arch);
    strcpy(cfg->text_prefix, flat ? "model." : "model.language_model.");
    cfg->has_vision = !flat;
    json_t *archs = json_object_get(root, "architectures");
    if (archs && !json_is_null(archs)) {
        if (!json_is_array(archs) || json_array_size(archs) == 0 || !json_is_string(json_array_get(archs, 0))) {
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: \"architectures\" must be a list of class names", label);
            goto out;
        }
        const char *a = json_string_value(json_array_get(archs, 0));
        if (strcmp(a, arch)) {
            rc = iris_err_set(err, IRIS_EUNSUPPORTED,
                              "%s: architecture \"%.60s\" is not supported; for model_type \"%s\" iris runs %s",
                              label, a, cfg->model_type, arch);
            goto out;
        }
    }
    cfg->image_token_id = 151655;
    cfg->video_token_id = 151656;
    cfg->vision_start_token_id = 151652;
    cfg->vision_end_token_id = 151653;
    if ((rc = get_int(&c, root, "image_token_id", &cfg->image_token_id)) ||
        (rc = get_int(&c, root, "video_token_id", &cfg->video_token_id)) ||
        (rc = get_int(&c, root, "vision_start_token_id", &cfg->vision_start_token_id)) ||
        (rc = get_int(&c, root, "vision_end_token_id", &cfg->vision_end_token_id)) ||
        (rc = get_bool(&c, root, "tie_word_embeddings", &cfg->tie_word_embeddings)))
        goto out;
    json_t *tc = flat ? root : get_obj(&c, root, "text_config", &rc),
           *vc = rc || flat ? NULL : get_obj(&c, root, "vision_config", &rc),
           *qc = rc ? NULL : get_obj(&c, root, "quantization_config", &rc);
    if (rc || (rc = read_text(&c, tc, &cfg->text_config, flat)) || (rc = read_vision(&c, vc, &cfg->vision_config)) ||
        (rc = read_quant(&c, qc, &cfg->quantization_config)))
        goto out;
    if (cfg->quantization_config.int4 &&
        (rc = read_ignore(&c, qc, cfg->text_prefix, cfg->text_config.num_hidden_layers, &cfg->quantization_config)))
        goto out;
    /* text_config's own key, for display; the model ties by the top-level one. */
    cfg->text_config.tie_word_embeddings = cfg->tie_word_embeddings;
    ctx tcx = {label, "text_config.", err};
    if (!flat) rc = get_bool(&tcx, tc, "tie_word_embeddings", &cfg->text_config.tie_word_embeddings);
    if (flat) { /* no vision tower: no taps, no image tokens to place */
        memset(&cfg->vision_config, 0, sizeof cfg->vision_config);
        cfg->vision_config.rope_theta = 10000.0;
    }
out:
    json_decref(root);
    return rc;
}

static int positive(const char *label, const char *name, long long v, long long max, iris_err *err) {
    if (v <= 0) return iris_err_set(err, IRIS_EFORMAT, "%s: %s is %lld; it must be positive", label, name, v);
    if (v > max) return iris_err_set(err, IRIS_ELIMIT, "%s: %s is %lld, over the sanity limit %lld", label, name, v, max);
    return 0;
}

int iris_config_validate(const iris_config *cfg, const char *label, iris_err *err) {
    const iris_text_config *t = &cfg->text_config;
    const iris_vision_config *v = &cfg->vision_config;
    int rc;
    if ((rc = positive(label, "text_config.vocab_size", t->vocab_size, MAX_VOCAB, err)) ||
        (rc = positive(label, "text_config.hidden_size", t->hidden_size, MAX_DIM, err)) ||
        (rc = positive(label, "text_config.intermediate_size", t->intermediate_size, MAX_DIM, err)) ||
        (rc = positive(label, "text_config.num_hidden_layers", t->num_hidden_layers, 4096, err)) ||
        (rc = positive(label, "text_config.num_attention_heads", t->num_attention_heads, 4096, err)) ||
        (rc = positive(label, "text_config.num_key_value_heads", t->num_key_value_heads, 4096, err)) ||
        (rc = positive(label, "text_config.head_dim", t->head_dim, 4096, err)) ||
        (rc = positive(label, "text_config.max_position_embeddings", t->max_position_embeddings, MAX_POSITIONS, err)))
        return rc;
    if (cfg->has_vision &&
        ((rc = positive(label, "vision_config.depth", v->depth, 4096, err)) ||
        (rc = positive(label, "vision_config.hidden_size", v->hidden_size, MAX_DIM, err)) ||
        (rc = positive(label, "vision_config.intermediate_size", v->intermediate_size, MAX_DIM, err)) ||
        (rc = positive(label, "vision_config.num_heads", v->num_heads, 4096, err)) ||
        (rc = positive(label, "vision_config.in_channels", v->in_channels, 16, err)) ||
        (rc = positive(label, "vision_config.patch_size", v->patch_size, 1024, err)) ||
        (rc = positive(label, "vision_config.temporal_patch_size", v->temporal_patch_size, 64, err)) ||
        (rc = positive(label, "vision_config.spatial_merge_size", v->spatial_merge_size, 64, err)) ||
        (rc = positive(label, "vision_config.out_hidden_size", v->out_hidden_size, MAX_DIM, err)) ||
         (rc = positive(label, "vision_config.num_position_embeddings", v->num_position_embeddings, MAX_DIM, err))))
        return rc;
    if (t->num_attention_heads % t->num_key_value_heads)
        return iris_err_set(err, IRIS_EFORMAT,
                            "%s: text_config.num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)",
                            label, t->num_attention_heads, t->num_key_value_heads);
    if (t->head_dim % 2)
        return iris_err_set(err, IRIS_EFORMAT, "%s: text_config.head_dim is %d; rope needs it even", label, t->head_dim);
    int sum = 0;
    for (int i = 0; i < 3; i++) {
        if (t->mrope_section[i] < 0)
            return iris_err_set(err, IRIS_EFORMAT, "%s: mrope_section[%d] is %d; it must not be negative", label, i,
                                t->mrope_section[i]);
        sum += t->mrope_section[i];
    }
    if (sum != t->head_dim / 2)
        return iris_err_set(err, IRIS_EFORMAT,
                            "%s: mrope_section [%d, %d, %d] sums to %d but must sum to head_dim/2 = %d", label,
                            t->mrope_section[0], t->mrope_section[1], t->mrope_section[2], sum, t->head_dim / 2);
    if (!(t->rms_norm_eps > 0) || !isfinite(t->rms_norm_eps))
        return iris_err_set(err, IRIS_EFORMAT, "%s: text_config.rms_norm_eps is %g; it must be positive", label,
                            t->rms_norm_eps);
    if (!(t->rope_theta > 0) || !isfinite(t->rope_theta) || !(v->rope_theta > 0) || !isfinite(v->rope_theta))
        return iris_err_set(err, IRIS_EFORMAT, "%s: rope_theta (text %g, vision %g) must be positive", label,
                            t->rope_theta, v->rope_theta);
    if (strcmp(t->hidden_act, "silu"))
        return iris_err_set(err, IRIS_EUNSUPPORTED, "%s: text_config.hidden_act \"%s\" is not supported (only \"silu\")",
                            label, t->hidden_act);
    if (!cfg->has_vision) return 0;
    if (strcmp(v->hidden_act, "gelu_pytorch_tanh"))
        return iris_err_set(err, IRIS_EUNSUPPORTED,
                            "%s: vision_config.hidden_act \"%s\" is not supported (only \"gelu_pytorch_tanh\")", label,
                            v->hidden_act);
    if (v->hidden_size % v->num_heads || (v->hidden_size / v->num_heads) % 4)
        return iris_err_set(err, IRIS_EFORMAT,
                            "%s: vision_config.hidden_size (%d) must split into num_heads (%d) heads whose size is a "
                            "multiple of 4 (2-D rope)",
                            label, v->hidden_size, v->num_heads);
    if (v->out_hidden_size != t->hidden_size)
        return iris_err_set(err, IRIS_EFORMAT,
                            "%s: vision_config.out_hidden_size (%d) differs from text_config.hidden_size (%d); the "
                            "merger's output is placed into the text embeddings",
                            label, v->out_hidden_size, t->hidden_size);
    int side = (int)lround(sqrt((double)v->num_position_embeddings));
    if (side * side != v->num_position_embeddings)
        return iris_err_set(err, IRIS_EFORMAT,
                            "%s: vision_config.num_position_embeddings (%d) is not a square (it is a side x side grid)",
                            label, v->num_position_embeddings);
    for (int i = 0; i < v->n_deepstack; i++)
        if (v->deepstack_visual_indexes[i] < 0 || v->deepstack_visual_indexes[i] >= v->depth)
            return iris_err_set(err, IRIS_EFORMAT,
                                "%s: vision_config.deepstack_visual_indexes[%d] is %d, outside the %d vision blocks",
                                label, i, v->deepstack_visual_indexes[i], v->depth);
    if (v->n_deepstack > t->num_hidden_layers)
        return iris_err_set(err, IRIS_EFORMAT, "%s: %d deepstack taps but only %d text layers to add them to", label,
                            v->n_deepstack, t->num_hidden_layers);
    return 0;
}

int iris_config_parse(const char *json_text, const char *label, iris_config *cfg, iris_err *err) {
    int rc = iris_config_read(json_text, label, cfg, err);
    return rc ? rc : iris_config_validate(cfg, label, err);
}

/* ---- files ---- */

/* Read dir/name into a malloc'd string (caller frees); IRIS_ENOTFOUND if absent. */
static int read_file(const char *dir, const char *name, char *path, size_t path_size, char **out, iris_err *err) {
    *out = NULL;
    if (snprintf(path, path_size, "%s/%s", dir, name) >= (int)path_size)
        return iris_err_set(err, IRIS_ELIMIT, "path too long: %s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return iris_err_set(err, errno == ENOENT ? IRIS_ENOTFOUND : IRIS_EIO, "%s: cannot open: %s", path,
                            strerror(errno));
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    int rc = 0;
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) rc = iris_err_set(err, IRIS_EIO, "%s: cannot read", path);
    else if (n > (16 << 20)) rc = iris_err_set(err, IRIS_ELIMIT, "%s: %ld bytes, larger than any config (16 MiB)", path, n);
    else if (!(buf = malloc((size_t)n + 1))) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
    else if (fread(buf, 1, (size_t)n, f) != (size_t)n) rc = iris_err_set(err, IRIS_EIO, "%s: read failed", path);
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    if (strlen(buf) != (size_t)n) {
        free(buf);
        return iris_err_set(err, IRIS_EFORMAT, "%s: contains a NUL byte; not a JSON text file", path);
    }
    *out = buf;
    return 0;
}

int iris_config_load(const char *dir, iris_config *cfg, iris_err *err) {
    char path[4096], *text;
    int rc = read_file(dir, "config.json", path, sizeof path, &text, err);
    if (rc == IRIS_ENOTFOUND)
        return iris_err_set(err, rc, "%s: no config.json; a model directory needs one (Hugging Face layout)", dir);
    if (rc) return rc;
    rc = iris_config_parse(text, path, cfg, err);
    free(text);
    return rc;
}

void iris_generation_config_default(iris_generation_config *gc) {
    /* Qwen3-VL's published generation_config.json (QWEN3VL.md §1.3). */
    memset(gc, 0, sizeof *gc);
    gc->bos_token_id = 151643;
    gc->pad_token_id = 151643;
    gc->n_eos = 2;
    gc->eos_token_id[0] = 151645;
    gc->eos_token_id[1] = 151643;
    gc->do_sample = 1;
    gc->top_k = 20;
    gc->top_p = 0.8f;
    gc->temperature = 0.7f;
    gc->repetition_penalty = 1.0f;
}

int iris_generation_config_parse(const char *json_text, const char *label, iris_generation_config *gc, iris_err *err) {
    /* transformers' GenerationConfig defaults for keys the file leaves out. */
    memset(gc, 0, sizeof *gc);
    gc->bos_token_id = gc->pad_token_id = -1;
    gc->top_k = 50;
    gc->top_p = 1.0f;
    gc->temperature = 1.0f;
    gc->repetition_penalty = 1.0f;
    json_t *root = load_text(json_text, label, err);
    if (!root) return err ? err->code : IRIS_EFORMAT;
    ctx c = {label, "", err};
    int rc;
    json_t *eos = json_object_get(root, "eos_token_id");
    if ((rc = get_int(&c, root, "bos_token_id", &gc->bos_token_id)) ||
        (rc = get_int(&c, root, "pad_token_id", &gc->pad_token_id)) ||
        (rc = get_bool(&c, root, "do_sample", &gc->do_sample)) || (rc = get_int(&c, root, "top_k", &gc->top_k)) ||
        (rc = get_float(&c, root, "top_p", &gc->top_p)) || (rc = get_float(&c, root, "temperature", &gc->temperature)) ||
        (rc = get_float(&c, root, "repetition_penalty", &gc->repetition_penalty)))
        goto out;
    if (json_is_integer(eos)) {
        if ((rc = get_int(&c, root, "eos_token_id", &gc->eos_token_id[0]))) goto out;
        gc->n_eos = 1;
    } else if ((rc = get_int_array(&c, root, "eos_token_id", gc->eos_token_id, 8, &gc->n_eos))) {
        goto out;
    }
    for (int i = 0; i < gc->n_eos; i++)
        if (gc->eos_token_id[i] < 0) {
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: eos_token_id %d is negative", label, gc->eos_token_id[i]);
            goto out;
        }
    if (gc->top_k < 0 || !(gc->top_p > 0 && gc->top_p <= 1) || !(gc->temperature >= 0) || !(gc->repetition_penalty > 0))
        rc = iris_err_set(err, IRIS_EFORMAT,
                          "%s: sampling values out of range (top_k %d >= 0, 0 < top_p %g <= 1, temperature %g >= 0, "
                          "repetition_penalty %g > 0)",
                          label, gc->top_k, gc->top_p, gc->temperature, gc->repetition_penalty);
out:
    json_decref(root);
    return rc;
}

int iris_generation_config_load(const char *dir, iris_generation_config *gc, iris_err *err) {
    char path[4096], *text;
    int rc = read_file(dir, "generation_config.json", path, sizeof path, &text, err);
    if (rc == IRIS_ENOTFOUND) {
        iris_generation_config_default(gc);
        return 0;
    }
    if (rc) return rc;
    rc = iris_generation_config_parse(text, path, gc, err);
    free(text);
    return rc;
}

void iris_preprocessor_config_default(iris_preprocessor_config *pc) {
    /* Qwen3-VL's published preprocessor_config.json (QWEN3VL.md §1.4). */
    pc->min_pixels = 65536;
    pc->max_pixels = 16777216;
    pc->patch_size = 16;
    pc->temporal_patch_size = 2;
    pc->merge_size = 2;
    for (int i = 0; i < 3; i++) pc->image_mean[i] = pc->image_std[i] = 0.5f;
}

static int get_float3(const ctx *c, json_t *obj, const char *key, float out[3]) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_number(v)) {
        out[0] = out[1] = out[2] = (float)json_number_value(v);
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) != 3)
        return iris_err_set(c->err, IRIS_EFORMAT, "%s: %s must be a number or a list of 3 numbers", c->label, key);
    for (int i = 0; i < 3; i++) {
        if (!json_is_number(json_array_get(v, (size_t)i)))
            return iris_err_set(c->err, IRIS_EFORMAT, "%s: %s[%d] must be a number", c->label, key, i);
        out[i] = (float)json_number_value(json_array_get(v, (size_t)i));
    }
    return 0;
}

int iris_preprocessor_config_parse(const char *json_text, const char *label, iris_preprocessor_config *pc,
                                   iris_err *err) {
    /* Qwen2VLImageProcessor's defaults (transformers 5.17) for what is left out. */
    static const float clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
    static const float clip_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    pc->min_pixels = 56 * 56;
    pc->max_pixels = 28 * 28 * 1280;
    pc->patch_size = 14;
    pc->temporal_patch_size = 2;
    pc->merge_size = 2;
    memcpy(pc->image_mean, clip_mean, sizeof clip_mean);
    memcpy(pc->image_std, clip_std, sizeof clip_std);
    json_t *root = load_text(json_text, label, err);
    if (!root) return err ? err->code : IRIS_EFORMAT;
    ctx c = {label, "", err}, cs = {label, "size.", err};
    int rc = 0;
    json_t *size = get_obj(&c, root, "size", &rc);
    if (rc || (rc = get_int64(&cs, size, "shortest_edge", &pc->min_pixels)) ||
        (rc = get_int64(&cs, size, "longest_edge", &pc->max_pixels)) ||
        (rc = get_int64(&c, root, "min_pixels", &pc->min_pixels)) ||
        (rc = get_int64(&c, root, "max_pixels", &pc->max_pixels)) ||
        (rc = get_int(&c, root, "patch_size", &pc->patch_size)) ||
        (rc = get_int(&c, root, "temporal_patch_size", &pc->temporal_patch_size)) ||
        (rc = get_int(&c, root, "merge_size", &pc->merge_size)) ||
        (rc = get_float3(&c, root, "image_mean", pc->image_mean)) || (rc = get_float3(&c, root, "image_std", pc->image_std)))
        goto out;
    if (pc->min_pixels <= 0 || pc->max_pixels < pc->min_pixels || pc->max_pixels > ((int64_t)1 << 40)) {
        rc = iris_err_set(err, IRIS_EFORMAT,
                          "%s: min_pixels %lld / max_pixels %lld (size.shortest_edge / longest_edge, pixel areas) "
                          "must satisfy 0 < min <= max",
                          label, (long long)pc->min_pixels, (long long)pc->max_pixels);
        goto out;
    }
    if (pc->patch_size <= 0 || pc->patch_size > 1024 || pc->temporal_patch_size <= 0 || pc->temporal_patch_size > 64 ||
        pc->merge_size <= 0 || pc->merge_size > 64) {
        rc = iris_err_set(err, IRIS_EFORMAT, "%s: patch_size %d, temporal_patch_size %d, merge_size %d must be positive",
                          label, pc->patch_size, pc->temporal_patch_size, pc->merge_size);
        goto out;
    }
    for (int i = 0; i < 3; i++)
        if (!(pc->image_std[i] > 0)) {
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: image_std[%d] is %g; it must be positive", label, i,
                              pc->image_std[i]);
            goto out;
        }
out:
    json_decref(root);
    return rc;
}

int iris_preprocessor_config_load(const char *dir, iris_preprocessor_config *pc, iris_err *err) {
    char path[4096], *text;
    int rc = read_file(dir, "preprocessor_config.json", path, sizeof path, &text, err);
    if (rc == IRIS_ENOTFOUND) {
        iris_preprocessor_config_default(pc);
        return 0;
    }
    if (rc) return rc;
    rc = iris_preprocessor_config_parse(text, path, pc, err);
    free(text);
    return rc;
}
