/* infer.c: model opening, prompt preparation and generation (through the
 * engine) for the inference commands. */
#include "infer.h"

#include <stdio.h>
#include <string.h>

#include "err.h"
#include "engine/engine.h"
#include "hub/hub.h"

/* Tokens an answer may take when --max-tokens is not given (a caption or a scene analysis is far shorter). */
#define INFER_DEFAULT_ROOM 8192

int infer_open(const char *model, infer_model *m, iris_err *err) {
    memset(m, 0, sizeof *m);
    int rc = iris_model_ensure(model, m->dir, sizeof m->dir, 1, err);
    if (!rc) rc = iris_config_load(m->dir, &m->cfg, err);
    if (!rc) rc = iris_generation_config_load(m->dir, &m->gc, err);
    if (!rc) rc = iris_preprocessor_config_load(m->dir, &m->pc, err);
    if (!rc) {
        char path[4200];
        snprintf(path, sizeof path, "%s/tokenizer.json", m->dir);
        rc = iris_tok_load(path, &m->tok, err);
    }
    if (!rc) rc = iris_st_open(m->dir, &m->st, err);
    if (!rc) rc = iris_vision_load(m->st, &m->cfg.vision_config, &m->vis, err);
    if (rc) {
        iris_err_prefix(err, "model %s", model);
        infer_close(m);
    }
    return rc;
}

void infer_close(infer_model *m) {
    if (!m) return;
    iris_vision_free(&m->vis);
    iris_st_close(m->st);
    iris_tok_free(m->tok);
    memset(m, 0, sizeof *m);
}

/* The prompt of one user turn, checked against the context. */
static int build_prompt_pc(infer_model *m, const iris_preprocessor_config *pc, const char *system,
                           const char *const *images, int n_images, const char *text, int max_new, iris_prompt *p,
                           iris_err *err) {
    json_t *msgs = iris_prompt_one_turn(system, n_images, text);
    if (!msgs) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    int rc = iris_prompt_build(m->tok, &m->cfg, pc, msgs, images, n_images, p, err);
    json_decref(msgs);
    if (rc) return rc;
    int64_t ctx = m->cfg.text_config.max_position_embeddings;
    if ((int64_t)p->ids.n + (max_new > 0 ? max_new : 0) > ctx) {
        rc = iris_err_set(err, IRIS_ELIMIT,
                          "the prompt has %zu tokens%s%d to generate; the context of this model is %lld tokens "
                          "(text_config.max_position_embeddings): shorten the prompt, use fewer or smaller images, "
                          "or lower --max-tokens", p->ids.n, max_new > 0 ? " and " : "", max_new > 0 ? max_new : 0,
                          (long long)ctx);
        iris_prompt_free(p);
    }
    return rc;
}

static int build_prompt(infer_model *m, const char *system, const char *const *images, int n_images, const char *text,
                        int max_new, iris_prompt *p, iris_err *err) {
    return build_prompt_pc(m, &m->pc, system, images, n_images, text, max_new, p, err);
}

int infer_prepare(infer_model *m, const char *system, const char *const *images, int n_images, const char *text,
                  int max_new, iris_prompt *p, iris_vision_out *vo, iris_err *err) {
    memset(vo, 0, sizeof *vo);
    int rc = build_prompt(m, system, images, n_images, text, max_new, p, err);
    if (!rc && p->n_images > 0) {
        rc = iris_vision_encode(&m->vis, p->pixel_values, p->n_rows, p->grid_thw, p->n_images, vo, NULL, err);
        if (rc) iris_prompt_free(p);
    }
    return rc;
}

int infer_generate(infer_model *m, const char *system, const char *const *images, int n_images, const char *text,
                   const iris_sampling_params *sp, const char *const *stop, int n_stop, const char *device,
                   const iris_engine_opts *gpu, iris_err *err) {
    iris_prompt p;
    int rc = build_prompt(m, system, images, n_images, text, sp->max_tokens, &p, err);
    if (rc) return rc;
    /* One request: a cache sized to it when max_tokens is given, else the default budget. */
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = m->dir;
    o.device = device;
    if (gpu) {
        o.gpu_memory_limit = gpu->gpu_memory_limit;
        o.gpu_memory_utilization = gpu->gpu_memory_utilization;
        o.gpu_memory_margin = gpu->gpu_memory_margin;
        o.gpu_memory_margin_set = gpu->gpu_memory_margin_set;
        o.max_image_pixels = gpu->max_image_pixels;
        o.kv_cache_dtype = gpu->kv_cache_dtype;
        o.dense_weights = gpu->dense_weights;
    }
    o.max_num_seqs = 1;
    /* One request: the context it can use (the cache is sized to it: on a GPU the rest stays free). */
    o.max_model_len = (int)p.ids.n + (sp->max_tokens > 0 ? sp->max_tokens : INFER_DEFAULT_ROOM);
    iris_engine *e = NULL;
    rc = iris_engine_open(&o, &e, err);
    if (rc) {
        iris_prompt_free(&p);
        return rc;
    }
    /* On a GPU the memory plan may cap the image size: prepare the images again as the engine admits them. */
    const iris_preprocessor_config *epc = iris_engine_preprocessor_config(e);
    if (n_images > 0 && epc->max_pixels != m->pc.max_pixels) {
        iris_prompt_free(&p);
        rc = build_prompt_pc(m, epc, system, images, n_images, text, sp->max_tokens, &p, err);
        if (rc) {
            iris_engine_close(e);
            return rc;
        }
    }
    iris_request_params rp;
    iris_request_params_default(e, &rp);
    rp.prompt = &p;
    rp.do_sample = sp->do_sample;
    rp.temperature = sp->temperature;
    rp.top_k = sp->top_k;
    rp.top_p = sp->top_p;
    rp.min_p = sp->min_p;
    rp.repetition_penalty = sp->repetition_penalty;
    rp.presence_penalty = sp->presence_penalty;
    rp.frequency_penalty = sp->frequency_penalty;
    rp.seed = sp->seed;
    rp.max_tokens = sp->max_tokens;
    for (int i = 0; i < n_stop && i < IRIS_MAX_STOP; i++) rp.stop[rp.n_stop++] = stop[i];
    iris_request *r = NULL;
    rc = iris_engine_submit(e, &rp, &r, err);
    iris_prompt_free(&p);  /* the engine's now (zeroed) unless submit failed */
    iris_event ev;
    while (!rc && iris_request_next(r, &ev, -1) == IRIS_OK) {
        if (ev.text_len) {
            fwrite(ev.text, 1, ev.text_len, stdout);
            fflush(stdout);
        }
        if (ev.kind != IRIS_EVENT_DONE) continue;
        if (ev.finish_reason == IRIS_FINISH_REASON_ERROR) {
            *err = ev.err;
            rc = ev.err.code ? ev.err.code : IRIS_EINVAL;
            break;
        }
        const iris_usage *u = &ev.usage;
        double gen_s = u->total_s - u->ttft_s;
        fprintf(stdout, "\n");
        fprintf(stderr, "iris: %d prompt tokens, %d generated (%s), time to first token %.3f s, %.1f tok/s\n",
                u->prompt_tokens, u->completion_tokens, iris_finish_reason_name(ev.finish_reason), u->ttft_s,
                u->completion_tokens > 1 && gen_s > 0 ? (u->completion_tokens - 1) / gen_s : 0.0);
        break;
    }
    iris_request_free(r);
    iris_engine_close(e);
    return rc;
}
