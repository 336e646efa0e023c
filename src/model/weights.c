/* weights.c: opening a Qwen3-VL model (weights.h).
 *
 * The order matters for the messages a user sees: config.json first (its
 * errors name the key), then the safetensors headers (their errors name the
 * file and byte offsets), then the decoder and the vision tower, whose
 * binders name the tensor and both shapes, then the small files beside them
 * (generation and preprocessor configs, the tokenizer).  Every error is
 * prefixed with the directory so a message from a server log points at the
 * checkpoint.  Placement on a backend happens last, once every view is known
 * to be well formed, so a bad checkpoint never touches the device. */
#include "weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "err.h"
#include "formats/chat.h"
#include "log.h"

/* A compressed-tensors config must quantize something: a checkpoint whose linears are all BF16 under
 * such a config was not written the way the config says. */
static int check_int4(const iris_model *m, iris_err *err) {
    if (!m->cfg.quantization_config.int4 || m->text.n_int4) return IRIS_OK;
    return iris_err_set(err, IRIS_EFORMAT,
                        "config.json declares compressed-tensors 4-bit quantization but no decoder linear has a "
                        "weight_packed; re-quantize with `iris quantize --int4` or drop quantization_config");
}

static int load(iris_model *m, const iris_model_opts *opts, iris_err *err) {
    iris_log(IRIS_LOG_DEBUG, "model", "opening checkpoint %s", m->dir);
    int rc = iris_config_load(m->dir, &m->cfg, err);
    if (!rc) rc = iris_st_open(m->dir, &m->st, err);
    if (!rc) rc = iris_text_load(m->st, &m->cfg, &m->text, err);
    if (!rc) {
        m->n_fp8 = m->text.n_fp8;
        m->n_ignored = m->text.n_ignored;
        m->lm_head_tied = m->text.lm_head.data == m->text.embed_tokens.data;
        if (m->cfg.quantization_config.fp8 && m->n_fp8 == 0)
            rc = iris_err_set(err, IRIS_EFORMAT,
                              "config.json declares fp8 quantization but no decoder linear is F8_E4M3 with a "
                              "weight_scale_inv; re-quantize with `iris quantize` or drop quantization_config");
    }
    if (!rc) rc = check_int4(m, err);
    if (!rc && !opts->text_only && m->cfg.has_vision) {
        rc = iris_vision_load(m->st, &m->cfg.vision_config, &m->vision, err);
        m->has_vision = rc == 0;
    }
    if (!rc) rc = iris_generation_config_load(m->dir, &m->gc, err);
    if (!rc) rc = iris_preprocessor_config_load(m->dir, &m->pc, err);
    if (!rc) rc = iris_tok_load(m->dir, &m->tok, err);
    if (!rc) m->chat_style = iris_chat_style_load(m->dir, m->cfg.has_vision);
    if (!rc && opts->backend) rc = iris_model_place(m, opts->backend, opts->dense, err);
    return rc;
}

int iris_model_open(const char *dir, const iris_model_opts *opts, iris_model **out, iris_err *err) {
    static const iris_model_opts defaults = {0};
    if (!opts) opts = &defaults;
    *out = NULL;
    if (!dir || !*dir) return iris_err_set(err, IRIS_EINVAL, "model: no directory given");
    iris_model *m = calloc(1, sizeof *m);
    if (!m) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    if (strlen(dir) >= sizeof m->dir) {
        free(m);
        return iris_err_set(err, IRIS_EINVAL, "model directory path is %zu bytes long; the limit is %zu", strlen(dir),
                            sizeof m->dir - 1);
    }
    strcpy(m->dir, dir);

    int rc = load(m, opts, err);
    if (rc) {
        iris_err_prefix(err, "model %s", dir);
        iris_model_close(m);
        return rc;
    }
    *out = m;
    return IRIS_OK;
}

int iris_model_place(iris_model *m, iris_backend *b, int dense, iris_err *err) {
    iris_model_placement pl = {.dense = dense};
    return iris_model_place_with(m, b, &pl, err);
}

int iris_model_place_with(iris_model *m, iris_backend *b, const iris_model_placement *pl, iris_err *err) {
    static const iris_model_placement none = {0};
    if (!pl) pl = &none;
    if (m->on) return iris_err_set(err, IRIS_EINVAL, "model %s: the weights are already on %s", m->dir, m->on->name);
    int rc = pl->embed_host ? iris_text_embed_host(&m->text, err) : 0;
    if (!rc && pl->lm_head_fp8) {
        double t0 = iris_now_s();
        rc = iris_text_lm_head_fp8(&m->text, err);
        if (!rc)
            iris_log(IRIS_LOG_INFO, "model", "lm_head quantized to block FP8 at load (--lm-head-dtype fp8) in %.1f s",
                     iris_now_s() - t0);
    }
    if (!rc) rc = iris_text_upload(&m->text, b, err);
    if (!rc && pl->dense) rc = iris_text_densify(&m->text, b, err);
    if (!rc && m->has_vision) rc = iris_vision_upload(&m->vision, b, err);
    if (!rc) m->on = b;
    return rc;
}

void iris_model_close(iris_model *m) {
    if (!m) return;
    if (m->has_vision) iris_vision_free(&m->vision);
    iris_text_free(&m->text);
    iris_st_close(m->st);
    iris_tok_free(m->tok);
    free(m);
}

void iris_model_describe(const iris_model *m, char *buf, size_t n) {
    const iris_text_config *t = &m->cfg.text_config;
    const iris_vision_config *v = &m->cfg.vision_config;
    char vis[160] = "no vision tower";
    if (m->has_vision)
        snprintf(vis, sizeof vis, "vision %d blocks x %d, DeepStack %d", v->depth, v->hidden_size, v->n_deepstack);
    if (!m->has_vision && m->cfg.has_vision) snprintf(vis, sizeof vis, "vision tower left off (text only)");
    char ign[64] = "";
    if (m->n_ignored) snprintf(ign, sizeof ign, " (%d left unquantized by its ignore list)", m->n_ignored);
    snprintf(buf, n, "%s: %d layers, hidden %d, %d/%d heads x %d, vocab %d; %s; %s%s; lm_head %s%s; embeddings %s; "
             "%s chat; weights on %s",
             m->cfg.architecture[0] ? m->cfg.architecture : "Qwen3-VL", t->num_hidden_layers, t->hidden_size,
             t->num_attention_heads, t->num_key_value_heads, t->head_dim, t->vocab_size, vis,
             m->n_fp8 ? "FP8 block-scaled linears" : m->text.n_int4 ? "4-bit W4A16 linears" : "BF16", ign,
             m->lm_head_tied ? "tied" : "untied", m->text.lm_head_fp8 ? ", FP8 (quantized at load)" : "",
             m->text.embed_host ? "in host memory" : "with the weights", iris_chat_style_name(m->chat_style),
             m->on ? m->on->name : "cpu");
}
