/* engine_req.c: requests on the callers' side: building and validating a
 * request on the caller's thread (the prompt through the one builder,
 * prompt.c; the sampling parameters, a JSON Schema or tools compiled to a grammar
 * (model/grammar.h; the vocabulary trie made once per engine, at the first
 * such request), which a model that thinks starts after its "</think>"; the one
 * context-length check; content
 * hashes of the images), the bounded queue into the engine, and the
 * per-request event channel (a callback on the engine thread, or a queue a
 * caller blocks on); on a GPU, the page-locked memory of the requests' pixel
 * rows (made bf16 on the caller's thread; a server's buffers taken at open).
 *
 * Does not: touch the model, the cache or the scheduler (the engine
 * thread's, engine.c). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine_internal.h"
#include "clock.h"
#include "err.h"
#include "log.h"
#include "sha256.h"

const char *iris_finish_reason_name(int reason) {
    switch (reason) {
    case IRIS_FINISH_REASON_STOP: return "stop";
    case IRIS_FINISH_REASON_LENGTH: return "length";
    case IRIS_FINISH_REASON_CANCELLED: return "cancelled";
    case IRIS_FINISH_REASON_ERROR: return "error";
    default: return NULL;
    }
}

void iris_request_params_default(const iris_engine *e, iris_request_params *p) {
    memset(p, 0, sizeof *p);
    iris_sampling_default(&p->sampling, e ? &e->model->gc : NULL);
}

/* ---- the channel -------------------------------------------------------------------------- */

static void req_destroy(iris_request *r) {
    for (int i = 0; i < r->q_n; i++) free(r->q[(r->q_head + i) % r->q_cap].text);
    free(r->q);
    free(r->cur_text);
    for (int i = 0; r->vout && i < r->prompt.n_images; i++) iris_vision_out_free(&r->vout[i]);
    free(r->vout);
    free(r->images);
    if (r->px16) r->px16_free(r->px16); /* the engine lets go of them when it finishes r; not reached then */
    iris_prompt_free(&r->prompt);
    iris_seq_free(&r->seq);
    iris_sampler_free(r->sampler);
    iris_stop_free(r->stop);
    iris_tok_stream_free(&r->ts);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void iris_req_unref(iris_request *r) {
    if (r && atomic_fetch_sub(&r->refs, 1) == 1) req_destroy(r);
}

void iris_req_emit(iris_request *r, const iris_event *ev) {
    if (r->on_event) {
        r->on_event(r->ud, ev);
        return;
    }
    pthread_mutex_lock(&r->mu);
    if (r->q_n == r->q_cap) {
        int nc = r->q_cap ? r->q_cap * 2 : 16;
        req_event *nq = malloc(sizeof *nq * (size_t)nc);
        if (!nq) {  /* out of host memory: keep the DONE event at least, by dropping a delta */
            if (ev->kind != IRIS_EVENT_DONE || !r->q_n) goto out;
            r->q_n--;
        } else {
            for (int i = 0; i < r->q_n; i++) nq[i] = r->q[(r->q_head + i) % r->q_cap];
            free(r->q);
            r->q = nq, r->q_head = 0, r->q_cap = nc;
        }
    }
    req_event *slot = &r->q[(r->q_head + r->q_n) % r->q_cap];
    slot->ev = *ev;
    slot->text = NULL;
    if (ev->text && ev->text_len) {
        slot->text = malloc(ev->text_len + 1);
        if (slot->text) memcpy(slot->text, ev->text, ev->text_len), slot->text[ev->text_len] = 0;
        else slot->ev.text_len = 0;
    }
    r->q_n++;
    pthread_cond_broadcast(&r->cv);
out:
    pthread_mutex_unlock(&r->mu);
}

int iris_request_next(iris_request *r, iris_event *ev, int timeout_ms) {
    if (!r || r->on_event) return IRIS_EINVAL;
    struct timespec until;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&r->mu);
    while (r->q_n == 0 && !r->done_read) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&r->cv, &r->mu);
        } else if (pthread_cond_timedwait(&r->cv, &r->mu, &until) == ETIMEDOUT && r->q_n == 0) {
            pthread_mutex_unlock(&r->mu);
            return IRIS_ELIMIT;
        }
    }
    if (r->q_n == 0) {
        pthread_mutex_unlock(&r->mu);
        return IRIS_EINVAL;
    }
    req_event *slot = &r->q[r->q_head];
    r->q_head = (r->q_head + 1) % r->q_cap;
    r->q_n--;
    free(r->cur_text);
    r->cur_text = slot->text;
    *ev = slot->ev;
    ev->text = r->cur_text ? r->cur_text : "";
    if (ev->kind == IRIS_EVENT_DONE) r->done_read = 1;
    pthread_mutex_unlock(&r->mu);
    return IRIS_OK;
}

void iris_request_cancel(iris_request *r) {
    if (r) atomic_store(&r->cancel, 1);
}

void iris_request_free(iris_request *r) {
    if (!r) return;
    atomic_store(&r->cancel, 1);
    iris_req_unref(r);
}

/* ---- building a request ------------------------------------------------------------------- */

/* An image's content key when the prompt brings none: SHA-256 of its grid and of its pixel rows
 * (what the vision encoder sees), the rows in pieces on several cores (sha256.h; 25 MB of pixels of
 * a 1024x1024 image took ~19 ms on one core).  Prompts built by iris carry a key made from the
 * resized uint8 image instead, an eighth of the bytes (image.h iris_image_prep_key). */
static int image_hash(const int *grid, const float *rows, size_t n_floats, iris_kv_key *out) {
    return iris_sha256_pieces(grid, 3 * sizeof *grid, rows, n_floats * sizeof *rows, out->b);
}

/* The token ranges of the prompt's images (runs of image_token_id, and the
 * runs of video_token_id of each video's temporal patches, in order) and their
 * content hashes. */
static int find_images(iris_engine *e, iris_request *r, iris_err *err) {
    iris_prompt *p = &r->prompt;
    if (p->n_images == 0) return IRIS_OK;
    if (!e->model->has_vision)
        return iris_err_set(err, IRIS_EUNSUPPORTED, "the prompt holds %d image(s), but this model runs text only",
                            p->n_images);
    r->images = calloc((size_t)p->n_images, sizeof *r->images);
    r->vout = calloc((size_t)p->n_images, sizeof *r->vout);
    if (!r->images || !r->vout) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    int m = e->model->cfg.vision_config.spatial_merge_size, patch_dim = e->model->vision.patch_dim;
    int64_t row0 = 0;
    int j = 0, n = (int)p->ids.n;
    for (int i = 0; i < p->n_images; i++) {
        const int *g = p->grid_thw + 3 * i;
        int n_tok = g[0] * (g[1] / m) * (g[2] / m);
        /* an image's run of <|image_pad|>, or a video's temporal patch: a run of <|video_pad|> */
        const int32_t img_id = e->model->cfg.image_token_id, vid_id = e->model->cfg.video_token_id;
        while (j < n && p->ids.ids[j] != img_id && p->ids.ids[j] != vid_id) j++;
        int k = j;
        while (k < n && k - j < n_tok && j < n && p->ids.ids[k] == p->ids.ids[j]) k++;
        if (k - j != n_tok)
            return iris_err_set(err, IRIS_EINVAL, "image %d: the prompt holds %d image tokens where its grid %dx%dx%d "
                                "needs %d", i + 1, k - j, g[0], g[1], g[2], n_tok);
        if (e->max_image_tokens > 0 && n_tok > e->max_image_tokens)
            return iris_err_set(err, IRIS_ELIMIT, "image %d: %dx%d patches are %d tokens; the memory plan admits %d "
                                "(--max-image-pixels %lld): resize it, or raise --max-image-pixels", i + 1, g[1], g[2],
                                n_tok, e->max_image_tokens, (long long)e->pc.max_pixels);
        int64_t rows = (int64_t)g[0] * g[1] * g[2];
        if (row0 + rows > p->n_rows)
            return iris_err_set(err, IRIS_EINVAL, "image %d: pixel_values has %lld rows; the grids need more", i + 1,
                                (long long)p->n_rows);
        r->images[i].start = j;
        r->images[i].n_tokens = n_tok;
        /* only the prefix cache reads the key: none is made with prefix caching off */
        if (e->o.prefix_caching && p->image_keys)
            memcpy(r->images[i].hash.b, p->image_keys[i], IRIS_KV_KEY_BYTES);
        else if (e->o.prefix_caching &&
                 image_hash(g, p->pixel_values + row0 * patch_dim, (size_t)rows * patch_dim, &r->images[i].hash))
            return iris_err_set(err, IRIS_ENOMEM, "SHA-256 of image %d failed (libcrypto)", i + 1);
        row0 += rows;
        j = k;
    }
    return IRIS_OK;
}

/* The pixel rows as the GPU encoder takes them (bf16 in the backend's page-locked memory, vision.h
 * iris_vision_encode_each), made here on the submitting thread, so that the engine thread only
 * starts their copy where it converted them: a 1 MP image's 6.3 M values took 1.0-1.3 ms of each
 * image's encode there (H100).  An engine's requests hold at most IRIS_PX16_CAP bytes of them
 * (engine_internal.h), half of the backend's page-locked pool, so that the image embeddings find
 * room there too; past it, or without such memory, the engine converts at encode time. */
static void pixels_bf16(iris_engine *e, iris_request *r) {
    iris_backend *b = e->be;
    const iris_prompt *p = &r->prompt;
    if (!e->on_gpu || !b->host_alloc || !b->host_free || b->act != IRIS_DT_BF16 || p->n_images < 1 ||
        !p->pixel_values || p->n_rows < 1)
        return;
    size_t n = (size_t)p->n_rows * (size_t)e->model->vision.patch_dim, bytes = n * sizeof(uint16_t);
    if (atomic_fetch_add(&e->px16_bytes, bytes) + bytes > IRIS_PX16_CAP) {
        atomic_fetch_sub(&e->px16_bytes, bytes);
        return;
    }
    uint16_t *h = b->host_alloc(b, bytes);
    if (!h) {
        atomic_fetch_sub(&e->px16_bytes, bytes);
        return;
    }
    iris_backend_f32_to_bf16(h, p->pixel_values, n, 1);
    r->px16 = h, r->px16_bytes = bytes, r->px16_free = b->host_free;
}

/* Page-locked buffers for n requests' largest images, taken now and handed back to the backend's pool
 * (cuda_mem.cu), which keeps them: the pixel rows of each (pixels_bf16, within IRIS_PX16_CAP), and
 * encoder rows for the images a step and the vision worker hold at once.  Taken while requests run
 * (the first concurrent wave of a server), each cudaMallocHost of a 1 MP image's 13 MB took 5-30 ms
 * and held the driver's lock, stalling the engine thread's launches: 566 ms of the GPU's idle time in
 * a 192-image run (H200, 2B-FP8, CUPTI API trace). */
void iris_req_warm_host(iris_engine *e, int n) {
    iris_backend *b = e->be;
    const iris_config *c = &e->model->cfg;
    if (n < 0) n = e->o.max_num_seqs;
    if (!e->on_gpu || n < 1 || !b->host_alloc || !b->host_free || !e->model->has_vision || e->max_image_tokens < 1)
        return;
    int64_t m = c->vision_config.spatial_merge_size, T = e->max_image_tokens;
    size_t px = (size_t)(T * m * m) * (size_t)e->model->vision.patch_dim * sizeof(uint16_t);
    size_t row = (size_t)T * (size_t)c->vision_config.out_hidden_size * sizeof(uint16_t);
    int n_ds = c->vision_config.n_deepstack, n_px = n, n_out = e->o.max_batch_tokens / (int)T + 1 + IRIS_VW_JOBS;
    if ((size_t)n_px * px > IRIS_PX16_CAP) n_px = (int)(IRIS_PX16_CAP / px);
    if (n_out > n) n_out = n;
    int total = n_px + 2 * n_out, got = 0;  /* an encoder output: its rows, then its DeepStack rows (vision.c) */
    void **p = calloc((size_t)total, sizeof *p);
    if (!p) return;
    double t0 = iris_now_s();
    size_t bytes = 0;
    for (int k = 0; k < total; k++) {
        size_t want = k < n_px ? px : (k - n_px) % 2 == 0 ? row : row * (size_t)(n_ds ? n_ds : 1);
        if (!(p[k] = b->host_alloc(b, want))) break;
        got++, bytes += want;
    }
    for (int k = 0; k < got; k++) b->host_free(p[k]);
    free(p);
    iris_log(IRIS_LOG_INFO, "engine", "page-locked host memory: %d buffers, %.0f MiB for %d requests' images, in %.0f ms%s",
             got, bytes / 1048576.0, n, (iris_now_s() - t0) * 1e3, got < total ? " (the pool's limit reached)" : "");
}

void iris_req_release_px16(iris_engine *e, iris_request *r) {
    if (!r->px16) return;
    r->px16_free(r->px16);
    atomic_fetch_sub(&e->px16_bytes, r->px16_bytes);
    r->px16 = NULL, r->px16_bytes = 0;
}

/* The request's prompt, built by the one builder (prompt.h) unless the caller brings it. */
static int build_prompt(iris_engine *e, const iris_request_params *p, iris_prompt *out, iris_err *err) {
    int n_src = (p->messages_json != NULL) + (p->prompt_text != NULL) + (p->prompt != NULL);
    if (n_src != 1)
        return iris_err_set(err, IRIS_EINVAL, "a request needs exactly one of messages_json, prompt_text and prompt "
                            "(%d given)", n_src);
    if (p->prompt) {
        *out = *p->prompt;
        return IRIS_OK;
    }
    memset(out, 0, sizeof *out);
    iris_prompt_ctx ctx;
    iris_engine_prompt_ctx(e, &ctx);
    ctx.no_thinking = p->no_thinking;
    if (p->prompt_text) return iris_prompt_build_text(&ctx, p->prompt_text, out, err);
    if (p->n_images < 0 || (p->n_images > 0 && !p->image_paths))
        return iris_err_set(err, IRIS_EINVAL, "n_images %d without image_paths", p->n_images);
    json_error_t je;
    json_t *msgs = json_loads(p->messages_json, 0, &je);
    if (!msgs)
        return iris_err_set(err, IRIS_EINVAL, "messages: invalid JSON at line %d column %d: %s", je.line, je.column,
                            je.text);
    iris_prompt_image *ims = p->n_images > 0 ? calloc((size_t)p->n_images, sizeof *ims) : NULL;
    int rc = p->n_images > 0 && !ims ? iris_err_set(err, IRIS_ENOMEM, "out of memory") : IRIS_OK;
    for (int i = 0; !rc && i < p->n_images; i++) ims[i].path = p->image_paths[i];
    if (!rc) rc = iris_prompt_build(&ctx, msgs, ims, p->n_images, out, NULL, err);
    free(ims);
    json_decref(msgs);
    return rc;
}

/* A video prompt over the context: about how many frames would fit, appended to the message.
 * A temporal patch costs its <|video_pad|> run plus the timestamp and markers before the next
 * (the gap between runs, measured). */
static void video_hint(const iris_engine *e, const iris_prompt *p, int cap, int max_tokens, iris_err *err) {
    int32_t vid = e->model->cfg.video_token_id;
    int n = (int)p->ids.n, pads = 0, runs = 0, first = -1, last = -1;
    for (int i = 0; i < n; i++)
        if (p->ids.ids[i] == vid) {
            pads++, runs += i == 0 || p->ids.ids[i - 1] != vid, last = i;
            if (first < 0) first = i;
        }
    if (!err || runs == 0) return;
    int span = last - first + 1, gap = runs > 1 ? (span - pads + runs - 2) / (runs - 1) : 8;
    int per = (span + gap + runs - 1) / runs, video = span + gap;
    int room = cap - 1 - (max_tokens > 0 ? max_tokens : 0) - (n - video);
    int frames = room > 0 ? 2 * (room / (per > 0 ? per : 1)) : 0;
    size_t len = strlen(err->msg);
    snprintf(err->msg + len, sizeof err->msg - len, "; the video(s) take about %d of the %d tokens: about %d frames "
             "would fit (--max-frames / mm_processor_kwargs.max_frames, or a lower --fps or --max-video-pixels)",
             video, n, frames);
}

/* The one context-length check: the prompt leaves room for a token in the context and the
 * KV cache, and max_tokens fits the context.  err->param names what to change. */
static int check_context(const iris_engine *e, int n, int max_tokens, int cap, iris_err *err) {
    int rc = IRIS_OK;
    if (n >= cap) {
        rc = iris_err_set(err, IRIS_EINVAL, "the prompt has %d tokens; the context of this model is %d tokens (%s), "
                          "so at most %d fit: shorten the prompt or use fewer or smaller images", n, cap,
                          cap == e->max_model_len ? "max_model_len" : "KV cache tokens", cap - 1);
        if (err) snprintf(err->param, sizeof err->param, "prompt");
    } else if (max_tokens > 0 && n + max_tokens > e->max_model_len) {
        rc = iris_err_set(err, IRIS_EINVAL, "max_tokens %d: the prompt's %d tokens leave room for %d in the context "
                          "of this model (%d tokens): lower max_tokens or shorten the prompt", max_tokens, n,
                          e->max_model_len - n, e->max_model_len);
        if (err) snprintf(err->param, sizeof err->param, "max_tokens");
    }
    return rc;
}

/* The engine's vocabulary trie, made once (outside the lock: ~0.1 s for Qwen's vocabulary). */
static const iris_vocab *engine_vocab(iris_engine *e, iris_err *err) {
    pthread_mutex_lock(&e->mu);
    iris_vocab *v = e->vocab;
    pthread_mutex_unlock(&e->mu);
    if (v) return v;
    if (iris_vocab_build(e->model->tok, e->model->cfg.text_config.vocab_size, &v, err)) return NULL;
    pthread_mutex_lock(&e->mu);
    if (e->vocab) iris_vocab_free(v);
    else e->vocab = v;
    v = e->vocab;
    pthread_mutex_unlock(&e->mu);
    return v;
}

/* The token after which a constrained reply's grammar starts, -1 from the first: a chat reply that
 * opens with reasoning (iris_engine_reasoning, as the server's and the CLI's reasoning split) is
 * free until the "</think>" token, as vLLM starts the grammar once its reasoning parser says the
 * reasoning ended.  A plain text prompt has no reasoning split: the grammar starts at once. */
static int grammar_start(const iris_engine *e, const iris_request_params *p, int *after, iris_err *err) {
    *after = -1;
    if (p->prompt_text || !iris_engine_reasoning(e, p->no_thinking)) return IRIS_OK;
    *after = iris_tok_find(e->model->tok, "</think>");
    if (*after < 0 || *after >= e->model->cfg.text_config.vocab_size)
        return iris_err_set(err, IRIS_EUNSUPPORTED, "this model thinks, but its vocabulary has no \"</think>\" token "
                            "to start the grammar after");
    return IRIS_OK;
}

/* Constrain the request's sampler to its JSON Schema or its tools, compiled here on the caller's
 * thread; the grammar starts after the reasoning of a model that thinks (grammar_start). */
static int constrain(iris_engine *e, iris_request *r, const iris_request_params *p, const iris_stop_ids *end,
                     iris_err *err) {
    const iris_sampling *sp = &p->sampling;
    iris_grammar *g = NULL;
    int after = -1;
    int rc = grammar_start(e, p, &after, err);
    if (rc) return rc;
    if (sp->json_schema && sp->tools_json)
        rc = iris_err_set(err, IRIS_EINVAL, "a JSON Schema and tools cannot constrain one request together");
    else if (sp->tools_json)
        rc = iris_grammar_from_tools(sp->tools_json, sp->tool_name, sp->tools_required, !sp->single_tool_call, &g,
                                     err);
    else
        rc = iris_grammar_from_schema(sp->json_schema, &g, err);
    const iris_vocab *v = rc ? NULL : engine_vocab(e, err);
    if (!rc && !v) rc = err && err->code ? err->code : IRIS_ENOMEM;
    if (!rc) {
        rc = iris_sampler_set_grammar(r->sampler, g, v, end, err);    /* g is the sampler's */
        if (!rc && after >= 0) rc = iris_sampler_grammar_after(r->sampler, after, err);
        return rc;
    }
    iris_grammar_free(g);
    if (err && rc == IRIS_EINVAL)
        snprintf(err->param, sizeof err->param, "%s",
                 !sp->tools_json ? "response_format" : !strncmp(err->msg, "tool_choice", 11) ? "tool_choice" : "tools");
    return rc;
}

int iris_engine_submit(iris_engine *e, const iris_request_params *p, iris_request **out, iris_err *err) {
    *out = NULL;
    iris_request *r = calloc(1, sizeof *r);
    if (!r) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    atomic_init(&r->refs, 1);
    atomic_init(&r->cancel, 0);
    r->t_submit = iris_now_s();
    r->on_event = p->on_event;
    r->ud = p->ud;
    const iris_sampling *sp = &p->sampling;
    r->logprobs = sp->logprobs || sp->top_logprobs > 0;
    iris_tok_stream_init(&r->ts, e->model->tok, IRIS_TOK_SKIP_SPECIAL);
    if (err) err->param[0] = 0;
    int rc = iris_sampling_check(sp, err);
    if (!rc) rc = build_prompt(e, p, &r->prompt, err);
    if (rc) {
        iris_req_unref(r);
        return rc;
    }
    if (p->prompt) memset(p->prompt, 0, sizeof *p->prompt);  /* ours now, even if the checks below fail */
    int n = (int)r->prompt.ids.n;
    int cap = e->max_model_len < e->n_blocks * IRIS_KV_BLOCK ? e->max_model_len : e->n_blocks * IRIS_KV_BLOCK;
    iris_stop_ids stop;
    iris_stop_ids_default(&stop, &e->model->gc);
    if (n < 1) rc = iris_err_set(err, IRIS_EINVAL, "the prompt is empty");
    else rc = check_context(e, n, sp->max_tokens, cap, err);
    if (rc && r->prompt.n_videos > 0) video_hint(e, &r->prompt, cap, sp->max_tokens, err);
    if (!rc) rc = iris_sampler_init(&r->sampler, sp, &stop, e->model->cfg.text_config.vocab_size, err);
    if (!rc) rc = iris_sampler_add_prompt(r->sampler, r->prompt.ids.ids, n, err);
    if (!rc && (sp->json_schema || sp->tools_json)) rc = constrain(e, r, p, &stop, err);
    if (!rc) rc = iris_stop_init(&r->stop, sp->stop, sp->n_stop, err);
    if (!rc) rc = find_images(e, r, err);
    if (!rc) rc = iris_seq_init(&r->seq, 0, r->prompt.ids.ids, n, err);
    if (rc) {
        iris_req_unref(r);
        return rc;
    }
    r->seq.images = r->images;
    r->seq.n_images = r->prompt.n_images;
    r->seq.ud = r;
    r->max_len = cap;
    r->e = e;
    pixels_bf16(e, r);

    pthread_mutex_lock(&e->mu);
    if (e->stopping) rc = iris_err_set(err, IRIS_ECANCELLED, "the engine is shutting down");
    else if (e->n_queued >= e->o.max_waiting)
        rc = iris_err_set(err, IRIS_ELIMIT, "the engine's queue is full (%d requests waiting); try again later",
                          e->n_queued);
    else if (e->n_inbox == e->cap_inbox) {
        int nc = e->cap_inbox ? e->cap_inbox * 2 : 16;
        iris_request **ni = realloc(e->inbox, sizeof *ni * (size_t)nc);
        if (!ni) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
        else e->inbox = ni, e->cap_inbox = nc;
    }
    if (!rc) {
        r->seq.id = e->next_id++;
        atomic_store(&r->refs, 2);  /* the caller's and the engine's */
        e->inbox[e->n_inbox++] = r;
        e->n_queued++;
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (rc) {
        iris_req_release_px16(e, r);
        iris_req_unref(r);
        return rc;
    }
    *out = r;
    return IRIS_OK;
}
