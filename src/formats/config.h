/* config.h: config.json, generation_config.json and preprocessor_config.json.
 *
 * Field names are the HF keys, so one grep crosses both.  Both rope forms are
 * read: the legacy `rope_scaling` + `rope_theta` and the newer
 * `rope_parameters`.  Two model types are accepted: "qwen3_vl"
 * (Qwen3VLForConditionalGeneration: text_config + vision_config) and "qwen3"
 * (Qwen3ForCausalLM: the text fields at the top level, no vision tower, 1-D
 * RoPE, read as an MRoPE whose sections are [head_dim/2, 0, 0]: every
 * frequency uses the one position, which is what 1-D RoPE computes).
 * Anything else is a clear error.  Missing optional keys take the
 * transformers defaults of the config class. */
#ifndef IRIS_CONFIG_H
#define IRIS_CONFIG_H

#include <stdint.h>

#include "iris.h"

#define IRIS_MAX_DEEPSTACK 8

typedef struct iris_text_config {
    int hidden_size;
    int intermediate_size;
    int num_hidden_layers;
    int num_attention_heads;
    int num_key_value_heads;
    int head_dim;
    int vocab_size;
    int max_position_embeddings;
    float rms_norm_eps;
    double rope_theta;
    int mrope_section[3];
    int mrope_interleaved;
    int attention_bias;
    int tie_word_embeddings;
    char hidden_act[32];
} iris_text_config;

typedef struct iris_vision_config {
    int depth;
    int hidden_size;
    int intermediate_size;
    int num_heads;
    int in_channels;
    int patch_size;
    int temporal_patch_size;
    int spatial_merge_size;
    int out_hidden_size;
    int num_position_embeddings;
    int n_deepstack;
    int deepstack_visual_indexes[IRIS_MAX_DEEPSTACK];
    double rope_theta;          /* 10000 unless the config says otherwise */
    char hidden_act[32];
} iris_vision_config;

#define IRIS_QUANT_IGNORE_LAYERS 512  /* layers the ignore bits cover (num_hidden_layers beyond: none ignored) */

typedef struct iris_quant_config {
    int fp8;                    /* quantization_config.quant_method == "fp8" */
    int weight_block_size[2];   /* [128, 128] */
    int int4;                   /* quant_method "compressed-tensors", format "pack-quantized", 4-bit int
                                   weights per group (W4A16): linears stored as weight_packed */
    int group_size;             /* int4: config_groups.*.weights.group_size (a multiple of 8) */
    int symmetric;              /* int4: 1 without zero points; 0 with weight_zero_point */
    /* int4: compressed-tensors' `ignore` list resolved against the decoder's linears (module names
     * "<text_prefix>layers.<il>.<self_attn|mlp>.<x>_proj" and "lm_head"; an entry is a name, or
     * "re:" and a Python regex matched from the start, as compressed-tensors does; class names
     * and vision modules name nothing here): bit il * 7 + k of `ignored` for the k-th linear of
     * layer il in q, k, v, o, gate, up, down order.  Those stay in their stored dtype. */
    int n_ignore;               /* entries in the list */
    int lm_head_ignored;
    uint8_t ignored[IRIS_QUANT_IGNORE_LAYERS * 7 / 8];
} iris_quant_config;

/* 1 when the int4 config's ignore list names linear k (0..6: q, k, v, o, gate, up, down) of layer il. */
int iris_quant_ignores(const iris_quant_config *q, int il, int k);

typedef struct iris_config {
    char model_type[32];
    char architecture[64];
    int has_vision;             /* a vision_config (Qwen3-VL); 0 for Qwen3ForCausalLM */
    char text_prefix[32];       /* the decoder's tensors: "model.language_model." (VL) or "model." */
    int image_token_id, video_token_id, vision_start_token_id, vision_end_token_id;
    int tie_word_embeddings;
    iris_text_config text_config;
    iris_vision_config vision_config;
    iris_quant_config quantization_config;
} iris_config;

typedef struct iris_generation_config {
    int bos_token_id, pad_token_id;
    int n_eos;
    int eos_token_id[8];
    int do_sample;
    int top_k;
    float top_p, temperature, repetition_penalty;
} iris_generation_config;

typedef struct iris_preprocessor_config {
    int64_t min_pixels;         /* size.shortest_edge (an area), default 65536 */
    int64_t max_pixels;         /* size.longest_edge (an area), default 16777216 */
    int patch_size, temporal_patch_size, merge_size;
    float image_mean[3], image_std[3];
} iris_preprocessor_config;

/* config.json in two steps (iris_config_parse does both): read fills every
 * field from the JSON or its transformers 5.17 default and fails only on wrong
 * types, unsupported model types/architectures/rope types/quantization;
 * validate checks ranges and consistency (heads dividing, mrope_section summing
 * to head_dim/2, vision out == text hidden, ...). */
int iris_config_read(const char *json_text, const char *label, iris_config *cfg, iris_err *err);
int iris_config_validate(const iris_config *cfg, const char *label, iris_err *err);
/* From text: a present file's missing keys take transformers' class defaults
 * (GenerationConfig; Qwen2VLImageProcessor), which differ from Qwen3-VL's files. */
int iris_generation_config_parse(const char *json_text, const char *label, iris_generation_config *gc, iris_err *err);
int iris_preprocessor_config_parse(const char *json_text, const char *label, iris_preprocessor_config *pc,
                                   iris_err *err);
void iris_generation_config_default(iris_generation_config *gc);

/* Each reads `dir`/<name>.json.  A missing generation or preprocessor config
 * fills the Qwen3-VL defaults (QWEN3VL.md §1.3, §1.4) and succeeds; a missing
 * config.json is an error. */
int iris_config_load(const char *dir, iris_config *cfg, iris_err *err);
int iris_config_parse(const char *json_text, const char *label, iris_config *cfg, iris_err *err);
int iris_generation_config_load(const char *dir, iris_generation_config *gc, iris_err *err);
int iris_preprocessor_config_load(const char *dir, iris_preprocessor_config *pc, iris_err *err);
void iris_preprocessor_config_default(iris_preprocessor_config *pc);

#endif
