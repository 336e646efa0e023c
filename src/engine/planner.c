/* planner.c: the GPU memory plan (the contract is in planner.h).
 *
 * Each part's formula is written once, beside the function that sizes it
 * (weights_part, vision_regions, lm_regions, embeds_regions, sampling_regions,
 * meta_regions); compute() adds the parts, gives the KV cache what is left
 * and lays the regions out; iris_plan_make validates the settings and, when
 * the plan does not fit, plans the alternatives (planner_suggest below).
 * All arithmetic is on uint64_t with every input bounded first (settings,
 * config widths), so no product can overflow and no size goes negative.
 * Owns nothing: the plan is a plain struct.
 */
#include "planner.h"
#include "planner_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

#define BF16 2u
#define F32 4u
#define I32 4u

uint64_t iris_plan_align(uint64_t n) { return (n + (IRIS_PLAN_ALIGN - 1)) & ~(uint64_t)(IRIS_PLAN_ALIGN - 1); }

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

int iris_plan_kv_dtype_parse(const char *s) {
    return !s ? -1 : !strcmp(s, "bf16") ? IRIS_KV_BF16 : !strcmp(s, "fp8") ? IRIS_KV_FP8 : -1;
}

const char *iris_plan_kv_dtype_name(int kv_dtype) { return kv_dtype == IRIS_KV_FP8 ? "fp8" : "bf16"; }

int iris_plan_embed_parse(const char *s) {
    return !s ? -1 : !strcmp(s, "auto") ? IRIS_EMBED_AUTO : !strcmp(s, "device") ? IRIS_EMBED_DEVICE
                   : !strcmp(s, "host") ? IRIS_EMBED_HOST : -1;
}

int iris_plan_lm_head_parse(const char *s) {
    return !s ? -1 : !strcmp(s, "auto") ? IRIS_LM_HEAD_AUTO
                   : !strcmp(s, "stored") || !strcmp(s, "bf16") ? IRIS_LM_HEAD_STORED
                   : !strcmp(s, "fp8") ? IRIS_LM_HEAD_FP8 : -1;
}

int iris_plan_dense_parse(const char *s) {
    return !s ? -1 : !strcmp(s, "auto") ? IRIS_DENSE_AUTO : !strcmp(s, "on") ? IRIS_DENSE_ON
                   : !strcmp(s, "off") ? IRIS_DENSE_OFF : -1;
}

int iris_plan_dense_wanted(const iris_plan_model *m, int mode, uint64_t budget) {
    if (m->n_fp8_linears <= 0 || !m->dense_bytes || mode == IRIS_DENSE_OFF) return 0;
    return mode == IRIS_DENSE_ON || m->dense_bytes * 100 <= budget * IRIS_PLAN_DENSE_AUTO_PERCENT;
}

uint64_t iris_plan_kv_bytes_per_token(const iris_text_config *t, int kv_dtype) {
    uint64_t elem = kv_dtype == IRIS_KV_FP8 ? 1 : BF16;
    return 2ull * (uint64_t)t->num_hidden_layers * (uint64_t)t->num_key_value_heads * (uint64_t)t->head_dim * elem;
}

uint64_t iris_plan_kv_block_bytes(const iris_text_config *t, int kv_dtype) {
    return IRIS_KV_BLOCK_TOKENS * iris_plan_kv_bytes_per_token(t, kv_dtype);
}

int64_t iris_plan_image_tokens(const iris_vision_config *v, int64_t max_image_pixels) {
    int64_t factor = (int64_t)v->patch_size * v->spatial_merge_size;
    if (factor <= 0 || max_image_pixels <= 0) return 0;
    return max_image_pixels / (factor * factor);
}

int64_t iris_plan_video_tokens(const iris_vision_config *v, int64_t video_pixels) {
    int64_t factor = (int64_t)v->patch_size * v->spatial_merge_size;
    int64_t tf = v->temporal_patch_size > 0 ? v->temporal_patch_size : 2;
    if (factor <= 0 || video_pixels <= 0) return 0;
    return video_pixels / (factor * factor * tf);
}

int64_t iris_plan_video_pixels(const iris_vision_config *v, int64_t max_video_pixels, int64_t context) {
    int64_t factor = (int64_t)v->patch_size * v->spatial_merge_size;
    int64_t tf = v->temporal_patch_size > 0 ? v->temporal_patch_size : 2;
    int64_t px = max_video_pixels > 0 ? max_video_pixels : IRIS_PLAN_DEFAULT_MAX_VIDEO_PIXELS;
    int64_t room = context - (context < 4 * IRIS_PLAN_VIDEO_ROOM_TOKENS ? context / 4 : IRIS_PLAN_VIDEO_ROOM_TOKENS);
    if (factor > 0 && room < px / (factor * factor * tf)) px = room * factor * factor * tf;
    return px < IRIS_PLAN_MIN_VIDEO_PIXELS ? IRIS_PLAN_MIN_VIDEO_PIXELS : px;
}

int iris_plan_graph_buckets(int max_num_seqs, int out[IRIS_PLAN_MAX_GRAPHS]) {
    int n = 0;
    for (int b = 1; b <= 8 && b <= max_num_seqs; b *= 2) out[n++] = b;
    /* Steps of 8 up to 256 sequences, then steps of 64, so the count stays bounded. */
    for (int b = 16; b <= max_num_seqs && n < IRIS_PLAN_MAX_GRAPHS - 1; b += b < 256 ? 8 : 64) out[n++] = b;
    if (n == 0 || out[n - 1] != max_num_seqs) out[n++] = max_num_seqs;
    return n;
}

int iris_plan_graph_pick(const int *buckets, int n_buckets, int n) {
    int pick = n;
    for (int i = n_buckets - 1; i >= 0 && buckets[i] >= n; i--) pick = buckets[i];
    return pick;
}

const char *iris_plan_part_name(int part) {
    static const char *names[IRIS_PART_COUNT] = {
        "weights", "dense weights", "kv cache", "activations", "image embeddings", "sampling",
        "step metadata", "cuBLASLt workspace", "vision worker", "CUDA graphs", "CUDA context",
    };
    return part >= 0 && part < IRIS_PART_COUNT ? names[part] : "?";
}

/* ---- weights ---- */

static const char *const decoder_linears[7] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj",
};

/* "<text_prefix>layers.<n>.<one of decoder_linears>.<suffix>" (text_prefix "model.language_model."
 * or Qwen3ForCausalLM's "model."): the linears a block-FP8 checkpoint stores as F8_E4M3
 * (QWEN3VL.md §2, suffix "weight") and a 4-bit one packs (suffix "weight_packed"). */
static int is_decoder_linear(const char *name, const char *text_prefix, const char *suffix) {
    char pre[64];
    snprintf(pre, sizeof pre, "%slayers.", text_prefix[0] ? text_prefix : "model.language_model.");
    size_t n = strlen(pre);
    if (strncmp(name, pre, n)) return 0;
    const char *p = name + n;
    if (!isdigit((unsigned char)*p)) return 0;
    while (isdigit((unsigned char)*p)) p++;
    if (*p++ != '.') return 0;
    for (int i = 0; i < 7; i++) {
        size_t k = strlen(decoder_linears[i]);
        if (!strncmp(p, decoder_linears[i], k) && p[k] == '.' && !strcmp(p + k + 1, suffix)) return 1;
    }
    return 0;
}

int iris_plan_model_init(const iris_config *cfg, const iris_st *st, const char *label, iris_plan_model *m,
                         iris_err *err) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    snprintf(m->label, sizeof m->label, "%s", label ? label : "model");
    int has_lm_head = 0;
    char embed_name[96];
    snprintf(embed_name, sizeof embed_name, "%sembed_tokens.weight",
             cfg->text_prefix[0] ? cfg->text_prefix : "model.language_model.");
    m->embed_dtype = m->lm_head_dtype = IRIS_DT_BF16;
    for (int i = 0; i < iris_st_count(st); i++) {
        const iris_st_tensor *t = iris_st_at(st, i);
        if (!strcmp(t->name, embed_name)) {
            m->embed_bytes = iris_plan_align(t->n_bytes);
            m->embed_dtype = t->dtype;
            if (cfg->tie_word_embeddings) m->lm_head_dtype = t->dtype;
        }
        if (!strncmp(t->name, "lm_head.", 8) && !cfg->tie_word_embeddings) {
            /* lm_head.weight (BF16, F32 or FP8 with its weight_scale_inv) or a packed one's parts */
            m->lm_head_bytes += iris_plan_align(t->n_bytes);
            if (!strcmp(t->name, "lm_head.weight")) m->lm_head_dtype = t->dtype;
            if (!strcmp(t->name, "lm_head.weight_packed")) m->lm_head_dtype = IRIS_DT_I4, has_lm_head = 1;
        }
        if (!strcmp(t->name, "lm_head.weight")) {
            has_lm_head = 1;
            /* Tied: the GPU uses embed_tokens for the logits, no second copy. */
            if (cfg->tie_word_embeddings) {
                m->tied_lm_head_skipped = 1;
                continue;
            }
        }
        /* Weights: every stored tensor in a slot of align(n_bytes), in its
         * stored dtype (F8_E4M3 weights and their F32 scales included). */
        uint64_t slot = iris_plan_align(t->n_bytes);
        m->weight_bytes += slot;
        m->dtype_bytes[t->dtype] += slot;
        m->n_tensors++;
        if (!strncmp(t->name, "model.visual.", 13)) {
            m->vision_weight_bytes += slot;
            m->vision_dtype_bytes[t->dtype] += slot;
        }
        if (is_decoder_linear(t->name, cfg->text_prefix, "weight_packed") && t->n_dims == 2) {
            /* 4-bit: the packed words, scales and zero points are counted as stored (above and
             * below); the FP8 estimate is not offered for a checkpoint already smaller. */
            int64_t out = t->shape[0], in = t->shape[1] * 8;
            m->n_decoder_linears++;
            m->n_int4_linears++;
            if (in > m->linear_max_in) m->linear_max_in = in;
            if (out * in > m->linear_max_elems) m->linear_max_elems = out * in;
            m->fp8_weight_bytes += slot;
        } else if (is_decoder_linear(t->name, cfg->text_prefix, "weight") && t->n_dims == 2) {
            int64_t out = t->shape[0], in = t->shape[1];
            m->n_decoder_linears++;
            if (in > m->linear_max_in) m->linear_max_in = in;
            if (out * in > m->linear_max_elems) m->linear_max_elems = out * in;
            char prefix[IRIS_ST_MAX_NAME_BYTES + 1];
            snprintf(prefix, sizeof prefix, "%.*s", (int)(strlen(t->name) - strlen(".weight")), t->name);
            if (iris_st_is_fp8_linear(st, prefix)) {
                m->n_fp8_linears++;
                m->fp8_weight_bytes += slot;
                m->dense_bytes += iris_plan_align((uint64_t)out * (uint64_t)in * BF16);
            } else {
                /* FP8 checkpoint estimate: 1 byte a parameter + fp32 scales
                 * for every 128x128 block (ceil on both sides). */
                m->fp8_weight_bytes += iris_plan_align((uint64_t)out * (uint64_t)in) +
                                       iris_plan_align(ceil_div((uint64_t)out, IRIS_FP8_BLOCK) *
                                                       ceil_div((uint64_t)in, IRIS_FP8_BLOCK) * F32);
            }
        } else {
            m->fp8_weight_bytes += slot;
        }
    }
    {
        uint64_t V = (uint64_t)cfg->text_config.vocab_size, H = (uint64_t)cfg->text_config.hidden_size;
        m->lm_head_fp8_scale_bytes = iris_plan_align(ceil_div(V, IRIS_FP8_BLOCK) * ceil_div(H, IRIS_FP8_BLOCK) * F32);
        m->lm_head_fp8_bytes = iris_plan_align(V * H) + m->lm_head_fp8_scale_bytes;
    }
    if (!cfg->tie_word_embeddings && !has_lm_head)
        return iris_err_set(err, IRIS_EFORMAT,
                            "%s: tie_word_embeddings is false but no lm_head.weight is stored; the checkpoint is "
                            "incomplete",
                            m->label);
    if (m->n_tensors == 0) return iris_err_set(err, IRIS_EFORMAT, "%s: the checkpoint holds no tensors", m->label);
    return 0;
}

int iris_plan_model_load(const char *dir, const char *label, iris_plan_model *m, iris_err *err) {
    iris_config cfg;
    int rc = iris_config_load(dir, &cfg, err);
    if (rc) return rc;
    iris_st *st = NULL;
    if ((rc = iris_st_open_headers(dir, &st, err))) return rc;
    rc = iris_plan_model_init(&cfg, st, label ? label : dir, m, err);
    iris_st_close(st);
    return rc;
}

void iris_plan_settings_default(iris_plan_settings *s) {
    memset(s, 0, sizeof *s);
    s->max_num_seqs = IRIS_PLAN_DEFAULT_MAX_NUM_SEQS;
    s->max_batch_tokens = IRIS_PLAN_DEFAULT_MAX_BATCH_TOKENS;
    s->max_image_pixels = IRIS_PLAN_DEFAULT_MAX_IMAGE_PIXELS;
    s->max_video_pixels = IRIS_PLAN_DEFAULT_MAX_VIDEO_PIXELS;
    s->kv_cache_dtype = IRIS_KV_BF16;
}

/* ---- sizes and budget ---- */

const char *iris_plan_human(uint64_t n, char buf[32]) {
    if (n >= IRIS_GIB) snprintf(buf, 32, "%.2f GiB", (double)n / (double)IRIS_GIB);
    else snprintf(buf, 32, "%.1f MiB", (double)n / (double)IRIS_MIB);
    return buf;
}

int iris_plan_parse_bytes(const char *s, uint64_t *out, iris_err *err) {
    static const struct {
        const char *suffix;
        long double mult;
    } units[] = {
        {"", 1},           {"b", 1},
        {"k", 1024.0L},    {"ki", 1024.0L},    {"kib", 1024.0L},    {"kb", 1e3L},
        {"m", 1048576.0L}, {"mi", 1048576.0L}, {"mib", 1048576.0L}, {"mb", 1e6L},
        {"g", 1073741824.0L}, {"gi", 1073741824.0L}, {"gib", 1073741824.0L}, {"gb", 1e9L},
        {"t", 1099511627776.0L}, {"ti", 1099511627776.0L}, {"tib", 1099511627776.0L}, {"tb", 1e12L},
    };
    const char *p = s ? s : "";
    if (!isdigit((unsigned char)*p) && *p != '.') goto bad;
    long double v = 0;
    int digits = 0;
    for (; isdigit((unsigned char)*p); p++, digits++) v = v * 10 + (*p - '0');
    if (*p == '.') {
        long double scale = 0.1L;
        for (p++; isdigit((unsigned char)*p); p++, digits++, scale /= 10) v += (*p - '0') * scale;
    }
    if (!digits || digits > 30) goto bad;
    while (*p == ' ') p++;
    char suf[8];
    size_t n = strlen(p);
    if (n >= sizeof suf) goto bad;
    for (size_t i = 0; i <= n; i++) suf[i] = (char)tolower((unsigned char)p[i]);
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        if (strcmp(suf, units[i].suffix)) continue;
        long double bytes = floorl(v * units[i].mult);
        if (!(bytes >= 1)) return iris_err_set(err, IRIS_EINVAL, "'%s' is not a positive size", s);
        if (bytes > 9.2e18L) return iris_err_set(err, IRIS_EINVAL, "'%s' is too large a size", s);
        *out = (uint64_t)bytes;
        return 0;
    }
bad:
    return iris_err_set(err, IRIS_EINVAL,
                        "'%s' is not a size: give bytes or a number with a unit (7GiB, 7G, 7000MiB, 7.5GB)",
                        s ? s : "");
}

int iris_plan_budget(const iris_plan_budget_opts *o, uint64_t total, uint64_t free_bytes, uint64_t *budget,
                     char *how, size_t how_size, iris_err *err) {
    char a[32], b[32], c[32];
    if (free_bytes > total)
        return iris_err_set(err, IRIS_EINVAL, "free memory %s is more than the total %s", iris_plan_human(free_bytes, a),
                            iris_plan_human(total, b));
    if (o->gpu_memory_limit) {
        /* A hard cap: never more than asked, and never more than is free. */
        *budget = o->gpu_memory_limit < free_bytes ? o->gpu_memory_limit : free_bytes;
        snprintf(how, how_size, "--gpu-memory-limit %s%s%s", iris_plan_human(o->gpu_memory_limit, a),
                 *budget < o->gpu_memory_limit ? ", capped at the free " : "",
                 *budget < o->gpu_memory_limit ? iris_plan_human(free_bytes, b) : "");
    } else if (o->gpu_memory_utilization != 0) {
        double u = o->gpu_memory_utilization;
        if (!(u > 0 && u <= 1))
            return iris_err_set(err, IRIS_EINVAL, "--gpu-memory-utilization %g: give a fraction in (0, 1], e.g. 0.9", u);
        uint64_t want = (uint64_t)floor(u * (double)total);
        *budget = want < free_bytes ? want : free_bytes;
        snprintf(how, how_size, "--gpu-memory-utilization %.2f of %s%s%s", u, iris_plan_human(total, a),
                 *budget < want ? ", capped at the free " : "", *budget < want ? iris_plan_human(free_bytes, b) : "");
    } else {
        uint64_t margin = o->margin_set ? o->gpu_memory_margin : IRIS_PLAN_DEFAULT_MARGIN;
        if (free_bytes <= margin)
            return iris_err_set(err, IRIS_ELIMIT,
                                "only %s of GPU memory is free, not more than the %s margin kept for others "
                                "(--gpu-memory-margin); close what holds the card or lower the margin",
                                iris_plan_human(free_bytes, a), iris_plan_human(margin, b));
        *budget = free_bytes - margin;
        snprintf(how, how_size, "free %s less a %s margin = %s", iris_plan_human(free_bytes, a), iris_plan_human(margin, b),
                 iris_plan_human(*budget, c));
    }
    if (*budget == 0) return iris_err_set(err, IRIS_ELIMIT, "no GPU memory is free");
    return 0;
}

/* ---- the parts ---- */

typedef struct sized {
    const char *name;
    int part;
    uint64_t bytes;   /* aligned */
} sized;

typedef struct region_list {
    int n;
    sized r[IRIS_PLAN_MAX_REGIONS];
} region_list;

static void add(region_list *l, const char *name, int part, uint64_t raw_bytes) {
    if (l->n < IRIS_PLAN_MAX_REGIONS) l->r[l->n++] = (sized){name, part, iris_plan_align(raw_bytes)};
}

static uint64_t sum_from(const region_list *l, int from) {
    uint64_t s = 0;
    for (int i = from; i < l->n; i++) s += l->r[i].bytes;
    return s;
}

/* The vision encoder over the largest image: N patches, width D, MLP F, all
 * bf16.  Flash-style attention keeps no N x N scores; the rotary angles and
 * the interpolated position embedding are computed in the kernels from the
 * per-patch (row, col) below.  The merger and the DeepStack mergers reuse
 * these buffers (their T = N/merge^2 rows of merge^2*D fit in h and mlp). */
static uint64_t vision_regions(const plan_in *in, int64_t n_patches, region_list *l) {
    const iris_vision_config *v = &in->m->cfg.vision_config;
    uint64_t N = (uint64_t)n_patches, D = (uint64_t)v->hidden_size, F = (uint64_t)v->intermediate_size;
    uint64_t m2 = (uint64_t)v->spatial_merge_size * (uint64_t)v->spatial_merge_size;
    uint64_t row = (uint64_t)v->in_channels * (uint64_t)v->temporal_patch_size * (uint64_t)v->patch_size *
                   (uint64_t)v->patch_size;
    int first = l->n;
    add(l, "vision.pixels", IRIS_PART_ACTIVATIONS, N * row * BF16);       /* pixel_values [N, C*tp*p*p] */
    add(l, "vision.x", IRIS_PART_ACTIVATIONS, N * D * BF16);              /* residual stream [N, D] */
    add(l, "vision.h", IRIS_PART_ACTIVATIONS, N * D * BF16);              /* norm / proj / fc2 out [N, D] */
    add(l, "vision.qkv", IRIS_PART_ACTIVATIONS, N * 3 * D * BF16);        /* [N, 3D] */
    add(l, "vision.attn", IRIS_PART_ACTIVATIONS, N * D * BF16);           /* attention out [N, D] */
    add(l, "vision.mlp", IRIS_PART_ACTIVATIONS, max_u64(N * F, N / m2 * m2 * D) * BF16); /* fc1 [N, F] */
    add(l, "vision.pos", IRIS_PART_ACTIVATIONS, N * 2 * I32);             /* (row, col) of every patch */
    add(l, "vision.cu_seqlens", IRIS_PART_ACTIVATIONS, (N + 1) * I32);    /* image boundaries */
    return sum_from(l, first);
}

/* One decoder step over T = max_batch_tokens rows (prefill chunk, or decode
 * rows, or both) and S = max_num_seqs sequences, bf16 unless said:
 *   x [T,H] residual; h [T,H] norm / o_proj / down_proj out; qkv [T, Q+2K];
 *   attn [T,Q]; gate_up [T,2I]; act [T,I] (SiLU(gate)*up);
 *   attn_partials: split-KV decode attention, fp32 [S, nq, splits, head_dim+2]
 *   (partial output, running max, running sum);
 *   fp8 (FP8 decoder linears): max(per-token-group activation quantization
 *   [T, in] e4m3 + fp32 scales [T, in/128], one weight dequantized to bf16
 *   [out, in]), whichever path the backend measured faster fits. */
static uint64_t lm_regions(const plan_in *in, region_list *l) {
    const iris_text_config *t = &in->m->cfg.text_config;
    uint64_t T = (uint64_t)in->s.max_batch_tokens, S = (uint64_t)in->s.max_num_seqs;
    uint64_t H = (uint64_t)t->hidden_size, I = (uint64_t)t->intermediate_size;
    uint64_t Q = (uint64_t)t->num_attention_heads * (uint64_t)t->head_dim;
    uint64_t K = (uint64_t)t->num_key_value_heads * (uint64_t)t->head_dim;
    int first = l->n;
    add(l, "lm.x", IRIS_PART_ACTIVATIONS, T * H * BF16);
    add(l, "lm.h", IRIS_PART_ACTIVATIONS, T * H * BF16);
    add(l, "lm.qkv", IRIS_PART_ACTIVATIONS, T * (Q + 2 * K) * BF16);
    add(l, "lm.attn", IRIS_PART_ACTIVATIONS, T * Q * BF16);
    add(l, "lm.gate_up", IRIS_PART_ACTIVATIONS, T * 2 * I * BF16);
    add(l, "lm.act", IRIS_PART_ACTIVATIONS, T * I * BF16);
    add(l, "lm.attn_partials", IRIS_PART_ACTIVATIONS,
        S * (uint64_t)t->num_attention_heads * IRIS_PLAN_ATTN_SPLITS * ((uint64_t)t->head_dim + 2) * F32);
    if (in->fp8_linears) {
        uint64_t in_f = (uint64_t)in->m->linear_max_in;
        uint64_t quant = iris_plan_align(T * in_f) + iris_plan_align(T * ceil_div(in_f, IRIS_FP8_BLOCK) * F32);
        add(l, "lm.fp8", IRIS_PART_ACTIVATIONS, max_u64(quant, (uint64_t)in->m->linear_max_elems * BF16));
    }
    return sum_from(l, first);
}

/* Image embeddings kept until their tokens are prefilled: R rows of the
 * merger output and of each DeepStack merger, bf16 [R, out_hidden_size];
 * R = max(tokens of the largest image, max_batch_tokens). */
static void embeds_regions(const plan_in *in, int64_t room, region_list *l) {
    const iris_vision_config *v = &in->m->cfg.vision_config;
    uint64_t row = (uint64_t)in->m->cfg.text_config.hidden_size * BF16;  /* == out_hidden_size */
    add(l, "embeds.merged", IRIS_PART_IMAGE_EMBEDS, (uint64_t)room * row);
    if (v->n_deepstack > 0 && !in->s.text_only)
        add(l, "embeds.deepstack", IRIS_PART_IMAGE_EMBEDS, (uint64_t)v->n_deepstack * (uint64_t)room * row);
}

/* Logits of every sequence of the largest batch, fp32 [S, V] (sampling works
 * in place: penalties, temperature, top-k/top-p/min-p selection, softmax);
 * per-sequence token counts for the penalties, uint16 [S, V]; and
 * IRIS_PLAN_SEQ_SAMPLE_BYTES of parameters, RNG state and results a sequence. */
static void sampling_regions(const plan_in *in, region_list *l) {
    uint64_t S = (uint64_t)in->s.max_num_seqs, V = (uint64_t)in->m->cfg.text_config.vocab_size;
    add(l, "sample.logits", IRIS_PART_SAMPLING, S * V * F32);
    add(l, "sample.counts", IRIS_PART_SAMPLING, S * V * 2);
    add(l, "sample.seq", IRIS_PART_SAMPLING, S * IRIS_PLAN_SEQ_SAMPLE_BYTES);
}

/* What the host uploads for a step, int32 (engine/runner.c's pack_meta): token ids [T], MRoPE
 * positions [3, T], sequence, visible context and KV slot of every row [T] each, image rows [T],
 * logits rows [S], attention tiles and lone rows [T] each; block tables [S, ceil(context / 16)]. */
static void meta_regions(const plan_in *in, int64_t context, region_list *l) {
    uint64_t T = (uint64_t)in->s.max_batch_tokens, S = (uint64_t)in->s.max_num_seqs;
    add(l, "meta.token_ids", IRIS_PART_STEP_META, T * I32);
    add(l, "meta.positions", IRIS_PART_STEP_META, 3 * T * I32);
    add(l, "meta.row_seq", IRIS_PART_STEP_META, T * I32);
    add(l, "meta.row_ctx", IRIS_PART_STEP_META, T * I32);
    add(l, "meta.slots", IRIS_PART_STEP_META, T * I32);
    add(l, "meta.image_rows", IRIS_PART_STEP_META, T * I32);
    add(l, "meta.logits_rows", IRIS_PART_STEP_META, S * I32);
    add(l, "meta.attn_tiles", IRIS_PART_STEP_META, T * I32);
    add(l, "meta.lone_rows", IRIS_PART_STEP_META, T * I32);
    add(l, "meta.block_tables", IRIS_PART_STEP_META, S * ceil_div((uint64_t)context, IRIS_KV_BLOCK_TOKENS) * I32);
}

/* The vision worker's encoder scratch: the vision users' regions for IRIS_PLAN_WORKER_IMAGES images of
 * `patches` patches each. */
static uint64_t worker_scratch(const plan_in *in, int64_t patches) {
    region_list t = {0};
    return vision_regions(in, IRIS_PLAN_WORKER_IMAGES * patches, &t);
}

/* Every part but the KV cache, for a context of `context` tokens (only the
 * block tables depend on it). */
static void fixed_parts(const plan_in *in, int64_t context, iris_plan *p, region_list *l) {
    const iris_vision_config *v = &in->m->cfg.vision_config;
    l->n = 0;
    memset(p->part_bytes, 0, sizeof p->part_bytes);
    /* Text only: no image is admitted, so no encoder scratch and no DeepStack rows; the merged
     * rows' region stays at max_batch_tokens rows, the runner's input-embedding rows. */
    p->image_tokens = in->s.text_only ? 0 : iris_plan_image_tokens(v, in->s.max_image_pixels);
    p->image_patches = p->image_tokens * v->spatial_merge_size * v->spatial_merge_size;
    p->image_room_tokens = p->image_tokens > in->s.max_batch_tokens ? p->image_tokens : in->s.max_batch_tokens;

    add(l, "weights", IRIS_PART_WEIGHTS, in->weight_bytes);
    if (in->dense_bytes) add(l, "weights.dense", IRIS_PART_DENSE, in->dense_bytes);
    p->vision_bytes = in->s.text_only ? 0 : vision_regions(in, p->image_patches, l);
    p->lm_step_bytes = lm_regions(in, l);
    embeds_regions(in, p->image_room_tokens, l);
    sampling_regions(in, l);
    meta_regions(in, context, l);
    add(l, "cublaslt.workspace", IRIS_PART_WORKSPACE, IRIS_PLAN_CUBLASLT_WORKSPACE);
    if (in->worker && !in->s.text_only) {
        add(l, "worker.vision", IRIS_PART_VISION_WORKER, worker_scratch(in, p->image_patches));
        add(l, "worker.workspace", IRIS_PART_VISION_WORKER, IRIS_PLAN_CUBLASLT_WORKSPACE);
    }

    for (int i = 0; i < l->n; i++)
        if (l->r[i].part != IRIS_PART_ACTIVATIONS) p->part_bytes[l->r[i].part] += l->r[i].bytes;
    p->part_bytes[IRIS_PART_ACTIVATIONS] = max_u64(p->vision_bytes, p->lm_step_bytes);
    p->n_graphs = iris_plan_graph_buckets(in->s.max_num_seqs, p->graph_batch);
    p->part_bytes[IRIS_PART_CUDA_GRAPHS] = (uint64_t)p->n_graphs * IRIS_PLAN_GRAPH_ESTIMATE;
    p->part_bytes[IRIS_PART_CUDA_CONTEXT] = in->context_bytes ? in->context_bytes : IRIS_PLAN_CONTEXT_ESTIMATE;
}

static uint64_t sum_parts_but_kv(const iris_plan *p) {
    uint64_t s = 0;
    for (int i = 0; i < IRIS_PART_COUNT; i++)
        if (i != IRIS_PART_KV_CACHE) s += p->part_bytes[i];
    return s;
}

/* Blocks of `block` bytes whose aligned region fits in `left`. */
static int64_t blocks_in(uint64_t left, uint64_t block) {
    uint64_t n = left / block;
    while (n > 0 && iris_plan_align(n * block) > left) n--;
    return (int64_t)n;
}

/* 1 when a and b share the group before their first '.' ("vision", "lm"). */
static int same_group(const char *a, const char *b) {
    const char *da = strchr(a, '.'), *db = strchr(b, '.');
    return da && db && da - a == db - b && !strncmp(a, b, (size_t)(da - a));
}

/* Regions get their offsets part by part, in part order; in the activations
 * part each user (vision.*, lm.*) starts again at the part's base. */
static void lay_out(iris_plan *p, const region_list *l, uint64_t kv_bytes) {
    uint64_t base = 0;
    p->n_regions = 0;
    for (int part = 0; part < IRIS_PART_CUDA_GRAPHS; part++) {
        uint64_t off = base;
        const char *prev = NULL;
        if (part == IRIS_PART_KV_CACHE) {
            iris_plan_region *r = &p->regions[p->n_regions++];
            snprintf(r->name, sizeof r->name, "kv.pool");
            r->part = part, r->offset = base, r->bytes = kv_bytes;
        }
        for (int i = 0; i < l->n; i++) {
            if (l->r[i].part != part || p->n_regions >= IRIS_PLAN_MAX_REGIONS) continue;
            if (part == IRIS_PART_ACTIVATIONS && prev && !same_group(prev, l->r[i].name)) off = base;
            prev = l->r[i].name;
            iris_plan_region *r = &p->regions[p->n_regions++];
            snprintf(r->name, sizeof r->name, "%s", l->r[i].name);
            r->part = part, r->offset = off, r->bytes = l->r[i].bytes;
            off += r->bytes;
        }
        base += p->part_bytes[part];
    }
    p->device_bytes = base;
    p->total_bytes = base + p->part_bytes[IRIS_PART_CUDA_GRAPHS] + p->part_bytes[IRIS_PART_CUDA_CONTEXT];
}

/* Whether a context of `ctx` tokens fits: the pool left after every other
 * part (block tables sized for ctx) holds one full-length sequence.  Leaves
 * the parts for ctx in p and l, the pool's block count in *blocks. */
static int context_fits(const plan_in *in, int64_t ctx, iris_plan *p, region_list *l, int64_t *blocks) {
    fixed_parts(in, ctx, p, l);
    uint64_t fixed = sum_parts_but_kv(p);
    *blocks = fixed < in->budget ? blocks_in(in->budget - fixed, p->kv_block_bytes) : 0;
    return *blocks >= (int64_t)ceil_div((uint64_t)ctx, IRIS_KV_BLOCK_TOKENS);
}

/* One planning pass: every part, the KV pool from what is left, the context,
 * the layout.  Sets p->fits; never fails.  The automatic context is the
 * largest c <= max_position_embeddings, a whole number of blocks (or the
 * maximum itself), for which context_fits(c) holds; that is monotone in c
 * (a longer context needs more blocks and longer block tables), so a binary
 * search over block counts finds it. */
void iris_plan_compute(const plan_in *in, iris_plan *p) {
    const iris_text_config *t = &in->m->cfg.text_config;
    region_list l;
    int64_t max_pos = t->max_position_embeddings;
    int64_t min_ctx = max_pos < IRIS_PLAN_MIN_CONTEXT ? max_pos : IRIS_PLAN_MIN_CONTEXT;
    int64_t want = in->s.max_model_len ? in->s.max_model_len : min_ctx;

    p->settings = in->s;
    p->budget_bytes = in->budget;
    p->context_auto = in->s.max_model_len == 0;
    p->max_position_embeddings = max_pos;
    p->kv_bytes_per_token = iris_plan_kv_bytes_per_token(t, in->s.kv_cache_dtype);
    p->kv_block_bytes = iris_plan_kv_block_bytes(t, in->s.kv_cache_dtype);
    p->fits = 0;
    p->why[0] = 0;

    int64_t blocks, ctx = want;
    if (context_fits(in, want, p, &l, &blocks)) {
        if (p->context_auto) {
            int64_t lo = (int64_t)ceil_div((uint64_t)want, IRIS_KV_BLOCK_TOKENS);
            int64_t hi = (int64_t)ceil_div((uint64_t)max_pos, IRIS_KV_BLOCK_TOKENS);
            while (lo < hi) {   /* invariant: lo blocks of context fit */
                int64_t mid = lo + (hi - lo + 1) / 2, c = mid * IRIS_KV_BLOCK_TOKENS;
                if (context_fits(in, c < max_pos ? c : max_pos, p, &l, &blocks)) lo = mid;
                else hi = mid - 1;
            }
            ctx = lo * IRIS_KV_BLOCK_TOKENS < max_pos ? lo * IRIS_KV_BLOCK_TOKENS : max_pos;
            if (ctx < want) ctx = want;
            context_fits(in, ctx, p, &l, &blocks);
        }
        p->context = ctx;
        p->kv_blocks = blocks;
        p->n_full_seqs = blocks / (int64_t)ceil_div((uint64_t)ctx, IRIS_KV_BLOCK_TOKENS);
        p->fits = 1;
    } else {
        uint64_t fixed = sum_parts_but_kv(p);
        int64_t need = (int64_t)ceil_div((uint64_t)want, IRIS_KV_BLOCK_TOKENS);
        char a[32], b[32];
        p->context = want;
        p->kv_blocks = need;
        p->n_full_seqs = 0;
        if (fixed >= in->budget)
            snprintf(p->why, sizeof p->why, "the weights and buffers alone need %s, over the %s budget",
                     iris_plan_human(fixed, a), iris_plan_human(in->budget, b));
        else
            snprintf(p->why, sizeof p->why,
                     "a context of %lld tokens needs %s of KV cache but only %s is left after the weights and "
                     "buffers",
                     (long long)want, iris_plan_human(iris_plan_align((uint64_t)need * p->kv_block_bytes), a),
                     iris_plan_human(in->budget - fixed, b));
    }
    p->part_bytes[IRIS_PART_KV_CACHE] = iris_plan_align((uint64_t)p->kv_blocks * p->kv_block_bytes);
    lay_out(p, &l, p->part_bytes[IRIS_PART_KV_CACHE]);
}

/* ---- settings, suggestions ---- */

static int check_settings(const iris_plan_model *m, iris_plan_settings *s, iris_err *err) {
    const iris_text_config *t = &m->cfg.text_config;
    const iris_vision_config *v = &m->cfg.vision_config;
    if (!m->cfg.has_vision) s->text_only = 1;
    if (t->num_hidden_layers <= 0 || t->num_key_value_heads <= 0 || t->head_dim <= 0 || t->hidden_size <= 0 ||
        t->vocab_size <= 0 || t->max_position_embeddings <= 0 ||
        (!s->text_only && (v->patch_size <= 0 || v->spatial_merge_size <= 0 || v->hidden_size <= 0 ||
                           v->out_hidden_size <= 0)))
        return iris_err_set(err, IRIS_EFORMAT, "%s: config.json has a zero or negative dimension", m->label);
    if (!s->max_num_seqs) s->max_num_seqs = IRIS_PLAN_DEFAULT_MAX_NUM_SEQS;
    if (!s->max_batch_tokens) s->max_batch_tokens = IRIS_PLAN_DEFAULT_MAX_BATCH_TOKENS;
    if (!s->max_image_pixels) s->max_image_pixels = IRIS_PLAN_DEFAULT_MAX_IMAGE_PIXELS;
    if (!s->max_video_pixels) s->max_video_pixels = IRIS_PLAN_DEFAULT_MAX_VIDEO_PIXELS;
    if (s->max_video_pixels < IRIS_PLAN_MIN_VIDEO_PIXELS || s->max_video_pixels > (1ll << 40))
        return iris_err_set(err, IRIS_EINVAL, "--max-video-pixels %lld: give %lld to %lld",
                            (long long)s->max_video_pixels, (long long)IRIS_PLAN_MIN_VIDEO_PIXELS, 1ll << 40);
    if (s->max_num_seqs < 1 || s->max_num_seqs > 4096)
        return iris_err_set(err, IRIS_EINVAL, "--max-num-seqs %d: give 1 to 4096", s->max_num_seqs);
    if (s->max_batch_tokens < s->max_num_seqs || s->max_batch_tokens > (1 << 20))
        return iris_err_set(err, IRIS_EINVAL,
                            "--max-batch-tokens %d: give %d (--max-num-seqs, one decode row a sequence) to 1048576",
                            s->max_batch_tokens, s->max_num_seqs);
    if (s->max_image_pixels < IRIS_PLAN_MIN_IMAGE_PIXELS || s->max_image_pixels > (1ll << 34))
        return iris_err_set(err, IRIS_EINVAL, "--max-image-pixels %lld: give %lld (512x512) to %lld",
                            (long long)s->max_image_pixels, (long long)IRIS_PLAN_MIN_IMAGE_PIXELS, 1ll << 34);
    if (s->kv_cache_dtype != IRIS_KV_BF16 && s->kv_cache_dtype != IRIS_KV_FP8)
        return iris_err_set(err, IRIS_EINVAL, "--kv-cache-dtype: give bf16 or fp8");
    if (s->dense_weights < IRIS_DENSE_AUTO || s->dense_weights > IRIS_DENSE_OFF)
        return iris_err_set(err, IRIS_EINVAL, "--dense-weights: give auto, on or off");
    if (s->embeddings < IRIS_EMBED_AUTO || s->embeddings > IRIS_EMBED_HOST)
        return iris_err_set(err, IRIS_EINVAL, "--embeddings: give auto, device or host");
    if (s->vision_worker < IRIS_WORKER_AUTO || s->vision_worker > IRIS_WORKER_OFF)
        return iris_err_set(err, IRIS_EINVAL, "vision worker: give auto, on or off");
    if (s->lm_head_dtype < IRIS_LM_HEAD_AUTO || s->lm_head_dtype > IRIS_LM_HEAD_FP8)
        return iris_err_set(err, IRIS_EINVAL, "--lm-head-dtype: give auto, stored or fp8");
    if (s->lm_head_dtype == IRIS_LM_HEAD_FP8 && m->lm_head_dtype != IRIS_DT_F8_E4M3 && !iris_plan_lm_head_quantizable(m))
        return iris_err_set(err, IRIS_EINVAL, "%s: --lm-head-dtype fp8: the lm_head is stored as %s; a BF16 or F32 one "
                            "is quantized (give --lm-head-dtype stored)", m->label,
                            iris_dtype_name((iris_dtype)m->lm_head_dtype));
    int64_t max_pos = t->max_position_embeddings;
    int64_t min_ctx = max_pos < IRIS_PLAN_MIN_CONTEXT ? max_pos : IRIS_PLAN_MIN_CONTEXT;
    if (s->max_model_len && (s->max_model_len < min_ctx || s->max_model_len > max_pos))
        return iris_err_set(err, IRIS_EINVAL, "--max-model-len %lld: give %lld to %lld (the model's max_position_embeddings)",
                            (long long)s->max_model_len, (long long)min_ctx, (long long)max_pos);
    return 0;
}

static void suggestion(iris_plan *p, int kind, const iris_plan *alt, int64_t value, uint64_t weights) {
    if (p->n_suggestions >= IRIS_PLAN_MAX_SUGGESTIONS) return;
    p->suggestions[p->n_suggestions++] = (iris_plan_suggestion){
        .kind = kind, .fits = alt->fits, .value = value, .context = alt->fits ? alt->context : 0,
        .n_full_seqs = alt->fits ? alt->n_full_seqs : 0, .weight_bytes = weights};
}

/* One alternative as iris_plan_make would plan it: the embeddings and the lm_head placed again by
 * the same rule (planner_place.c), the dense copies as decided; in->weight_bytes gets the weights. */
static void pass(plan_in *in, iris_plan *alt) {
    plan_in t = *in;
    plan_place pl;
    t.dense_wanted = in->dense_bytes;
    iris_plan_place_choose(&t, alt, &pl);
    in->weight_bytes = t.weight_bytes;
}

/* The largest value in [lo, hi] for which `set` makes the plan fit (fit is
 * monotone in each of these settings); 0 when even lo does not. */
static int64_t largest_fitting(plan_in *in, int64_t lo, int64_t hi, void (*set)(plan_in *, int64_t), iris_plan *alt) {
    int64_t best = 0;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        set(in, mid);
        pass(in, alt);
        if (alt->fits) best = mid, lo = mid + 1;
        else hi = mid - 1;
    }
    if (best) {
        set(in, best);
        pass(in, alt);
    }
    return best;
}

static void set_image_tokens(plan_in *in, int64_t tokens) {
    const iris_vision_config *v = &in->m->cfg.vision_config;
    int64_t f = (int64_t)v->patch_size * v->spatial_merge_size;
    in->s.max_image_pixels = tokens * f * f;
}
static void set_batch_tokens(plan_in *in, int64_t n) { in->s.max_batch_tokens = (int)n; }

static void suggest(const plan_in *in0, const plan_place *pl, iris_plan *p) {
    iris_plan *alt = malloc(sizeof *alt);
    if (!alt) return;
    memset(alt, 0, sizeof *alt);
    plan_in in = *in0;
    p->n_suggestions = 0;

    /* The largest context with everything else as asked. */
    in.s.max_model_len = 0;
    pass(&in, alt);
    suggestion(p, IRIS_SUGGEST_MAX_MODEL_LEN, alt, alt->fits ? alt->context : 0, in.weight_bytes);

    /* Smaller images, down to 512x512. */
    in = *in0;
    const iris_vision_config *v = &in.m->cfg.vision_config;
    int64_t f = (int64_t)v->patch_size * v->spatial_merge_size;
    int64_t tok_now = in.s.text_only ? 0 : iris_plan_image_tokens(v, in.s.max_image_pixels);
    int64_t tok_min = f > 0 ? IRIS_PLAN_MIN_IMAGE_PIXELS / (f * f) : 0;
    if (tok_now > tok_min) {
        int64_t tok = largest_fitting(&in, tok_min, tok_now - 1, set_image_tokens, alt);
        suggestion(p, IRIS_SUGGEST_MAX_IMAGE_PIXELS, alt, tok * f * f, in.weight_bytes);
    }

    /* A smaller prefill chunk, down to max_num_seqs. */
    in = *in0;
    if (in.s.max_batch_tokens > in.s.max_num_seqs) {
        int64_t n = largest_fitting(&in, in.s.max_num_seqs, in.s.max_batch_tokens - 1, set_batch_tokens, alt);
        suggestion(p, IRIS_SUGGEST_MAX_BATCH_TOKENS, alt, n, in.weight_bytes);
    }

    in = *in0;
    if (in.s.kv_cache_dtype == IRIS_KV_BF16) {
        in.s.kv_cache_dtype = IRIS_KV_FP8;
        pass(&in, alt);
        suggestion(p, IRIS_SUGGEST_KV_FP8, alt, 0, in.weight_bytes);
        in = *in0;
    }

    /* Qwen's block-FP8 checkpoint of the same model (estimated from these
     * BF16 shapes), alone and with an FP8 KV cache. */
    if (in.m->n_fp8_linears == 0 && in.m->n_int4_linears == 0 && in.m->n_decoder_linears > 0) {
        /* its embeddings and lm_head placed as in this plan */
        in.weight_bytes = (uint64_t)((int64_t)in.m->fp8_weight_bytes + (int64_t)in0->weight_bytes -
                                     (int64_t)in.m->weight_bytes);
        in.fp8_linears = 1;
        iris_plan_compute(&in, alt);
        suggestion(p, IRIS_SUGGEST_FP8_CHECKPOINT, alt, 0, in.weight_bytes);
        if (!alt->fits && in.s.kv_cache_dtype == IRIS_KV_BF16) {
            in.s.kv_cache_dtype = IRIS_KV_FP8;
            iris_plan_compute(&in, alt);
            suggestion(p, IRIS_SUGGEST_FP8_CHECKPOINT_KV_FP8, alt, 0, in.weight_bytes);
        }
    }
    iris_plan_place_suggest(in0, pl, p, alt);
    free(alt);
}

void iris_plan_once(plan_in *in, iris_plan *p) {
    /* BF16 copies of the FP8 linears: on when asked; auto when they take at most
     * IRIS_PLAN_DENSE_AUTO_PERCENT of the budget and the plan fits with them (else without them).
     * The vision worker the same (IRIS_PLAN_WORKER_AUTO_PERCENT), given up first. */
    in->dense_bytes = in->dense_wanted;
    in->worker = in->worker_wanted;
    iris_plan_compute(in, p);
    if (in->worker && in->s.vision_worker == IRIS_WORKER_AUTO && !p->fits) {
        in->worker = 0;
        iris_plan_compute(in, p);
    }
    if (in->dense_bytes && in->s.dense_weights == IRIS_DENSE_AUTO && !p->fits) {
        in->dense_bytes = 0;
        iris_plan_compute(in, p);
    }
}

/* Whether the plan asks for the vision worker's part (planner.h iris_worker_mode): on yes, off no,
 * auto with vision, more than one sequence and at most IRIS_PLAN_WORKER_AUTO_PERCENT of the budget. */
static int worker_wanted(const plan_in *in) {
    const iris_plan_settings *s = &in->s;
    if (s->text_only || s->vision_worker == IRIS_WORKER_OFF) return 0;
    if (s->vision_worker == IRIS_WORKER_ON) return 1;
    const iris_vision_config *v = &in->m->cfg.vision_config;
    int64_t patches = iris_plan_image_tokens(v, s->max_image_pixels) * v->spatial_merge_size * v->spatial_merge_size;
    uint64_t bytes = worker_scratch(in, patches) + IRIS_PLAN_CUBLASLT_WORKSPACE;
    return s->max_num_seqs > 1 && bytes * 100 <= in->budget * IRIS_PLAN_WORKER_AUTO_PERCENT;
}

/* The automatic step budget (planner.h, IRIS_PLAN_AUTO_BATCH_TOKENS_MAX): p, the plan that fits
 * with the starting budget, becomes the plan of the largest candidate that keeps its context and
 * (nearly) its KV blocks. */
static void auto_batch_tokens(plan_in *in, iris_plan *p) {
    static const int cand[] = {IRIS_PLAN_AUTO_BATCH_TOKENS_MAX, IRIS_PLAN_AUTO_BATCH_TOKENS_MAX / 2};
    iris_plan *alt = calloc(1, sizeof *alt);  /* compute() leaves what iris_plan_make fills later zero */
    if (!alt) return;
    int64_t full = (int64_t)in->s.max_num_seqs * (int64_t)ceil_div((uint64_t)p->context, IRIS_KV_BLOCK_TOKENS);
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
        if (cand[i] <= in->s.max_batch_tokens) break;
        plan_in t = *in;
        t.s.max_batch_tokens = cand[i];
        iris_plan_compute(&t, alt);
        int keeps = alt->fits && alt->context >= p->context &&
                    (alt->kv_blocks * 100 >= p->kv_blocks * (100 - IRIS_PLAN_AUTO_BATCH_KV_PERCENT) ||
                     alt->kv_blocks >= full);
        if (keeps) {
            *in = t;
            *p = *alt;
            break;
        }
    }
    free(alt);
}

int iris_plan_make(const iris_plan_model *m, const iris_plan_settings *s_in, uint64_t budget, const char *budget_source,
                   uint64_t context_bytes, iris_plan *p, iris_err *err) {
    memset(p, 0, sizeof *p);
    iris_plan_settings s = *s_in;
    int auto_batch = s.max_batch_tokens == 0;
    if (auto_batch && s.max_num_seqs > IRIS_PLAN_DEFAULT_MAX_BATCH_TOKENS) s.max_batch_tokens = s.max_num_seqs;
    int rc = check_settings(m, &s, err);
    if (rc) return rc;
    if (budget == 0) return iris_err_set(err, IRIS_EINVAL, "the GPU memory budget is 0 bytes");
    /* Text only: the vision tower's tensors stay off the card (also in the FP8 estimate). */
    iris_plan_model lm = *m;
    if (s.text_only) {
        lm.weight_bytes -= m->vision_weight_bytes;
        lm.fp8_weight_bytes -= m->vision_weight_bytes;
        for (int d = 0; d < IRIS_DT_COUNT; d++) lm.dtype_bytes[d] -= m->vision_dtype_bytes[d];
        m = &lm;
    }
    plan_in in = {.m = m, .s = s, .weight_bytes = m->weight_bytes, .fp8_linears = m->n_fp8_linears > 0,
                  .budget = budget, .context_bytes = context_bytes};
    in.dense_wanted = iris_plan_dense_wanted(m, s.dense_weights, budget) ? m->dense_bytes : 0;
    in.worker_wanted = worker_wanted(&in);
    /* Where the embeddings and the lm_head go (planner_place.c), each candidate one pass. */
    plan_place pl;
    iris_plan_place_choose(&in, p, &pl);
    if (auto_batch && p->fits) auto_batch_tokens(&in, p);
    p->dense = in.dense_bytes != 0;
    p->vision_worker = in.worker;
    p->text_only = s.text_only;
    p->vision_weight_bytes = lm.vision_weight_bytes;
    snprintf(p->label, sizeof p->label, "%s", m->label);
    snprintf(p->budget_source, sizeof p->budget_source, "%s", budget_source ? budget_source : "");
    iris_plan_place_fill(&in, &pl, p);
    p->weights_fp8 = m->n_fp8_linears > 0;
    p->weights_int4 = m->n_int4_linears > 0;
    p->context_measured = context_bytes != 0;
    if (!s.text_only) {
        p->video_pixels = iris_plan_video_pixels(&m->cfg.vision_config, s.max_video_pixels, p->context);
        p->video_tokens = iris_plan_video_tokens(&m->cfg.vision_config, p->video_pixels);
    }
    if (p->fits) return 0;
    in.weight_bytes = pl.most_saving;
    suggest(&in, &pl, p);
    char a[32], b[32];
    return iris_err_set(err, IRIS_ELIMIT, "%s does not fit in %s: %s (needs %s in all)", m->label,
                        iris_plan_human(budget, a), p->why, iris_plan_human(p->total_bytes, b));
}

const iris_plan_region *iris_plan_region_find(const iris_plan *p, const char *name) {
    for (int i = 0; i < p->n_regions; i++)
        if (!strcmp(p->regions[i].name, name)) return &p->regions[i];
    return NULL;
}
