/* engine.c: the engine thread (iris.h engine section, engine.h).
 *
 * One thread owns the model (text decoder and vision encoder on the
 * backend), the paged KV cache, the block pool and the scheduler.  Its loop:
 * take submitted requests from the inbox, copy cancel flags, plan a step
 * (sched.c), encode the images the step's chunks reach for the first time,
 * run the decoder over the flat batch, sample the sequences whose prompt or
 * decode step completed, detokenize, apply stop strings, and send the
 * events; then publish the counters.  It sleeps on a condition variable
 * when there is nothing to do.
 *
 * Image embeddings: encoded just before the first chunk that needs them,
 * the step's images together (engine_vision.c), kept with the request until
 * every one of the image's tokens has its K/V in the cache, then freed; an
 * image whose tokens all come from the prefix cache is never encoded.
 *
 * Shutdown drains: no new submissions, everything queued or running
 * finishes, then the thread exits.  A failed step (the backend) fails the
 * requests of that step with finish_reason error; the others go on.
 *
 * Loading: the one loader (model/weights.h) opens the model (configs,
 * tokenizer, checkpoint, views) and places it on the backend: the CPU, or
 * CUDA (--device cuda, or auto with a GPU), where the memory plan
 * (planner.c) first sizes the one device allocation, the KV cache and the
 * context, and caps the image size (the preprocessor config the prompt
 * builder gets, iris_engine_prompt_ctx).
 *
 * Does not: render chats, tokenize prompts or decode images (callers'
 * threads, engine_req.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "err.h"
#include "log.h"
#include "formats/chat.h"
#include "hub/hub.h"
#include "engine/planner.h"
#include "model/positions.h"
#ifdef IRIS_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_info.h"
#endif

#define DEFAULT_KV_BYTES (1ull << 30)

void iris_engine_opts_default(iris_engine_opts *o) {
    memset(o, 0, sizeof *o);
    o->max_num_seqs = 64;
    o->max_batch_tokens = 0;    /* the CPU: IRIS_PLAN_DEFAULT_MAX_BATCH_TOKENS; a GPU: the plan chooses */
    o->max_waiting = 256;
    o->prefix_caching = 1;
}

const iris_model *iris_engine_model(const iris_engine *e) { return e->model; }

void iris_engine_prompt_ctx(const iris_engine *e, iris_prompt_ctx *out) {
    memset(out, 0, sizeof *out);
    out->tok = e->model->tok;
    out->cfg = &e->model->cfg;
    out->pc = &e->pc;
    out->chat_style = e->model->chat_style;
    out->text_only = !e->model->has_vision;
    out->video = &e->vopts;
    out->max_image_pixels = e->o.max_image_pixels; /* --max-image-pixels or its default, for every front door */
}

int iris_engine_reasoning(const iris_engine *e, int no_thinking) {
    iris_chat_opts o = {.style = e->model->chat_style, .no_thinking = no_thinking};
    return iris_chat_reasoning(&o);
}

const iris_text *iris_engine_text(const iris_engine *e) { return &e->model->text; }
iris_backend *iris_engine_backend(iris_engine *e) { return e->be; }
iris_runner *iris_engine_runner(iris_engine *e) { return e->runner; }

size_t iris_engine_weight_bytes(const iris_engine *e) {
    size_t n = 0;
    for (int i = 0; i < iris_st_count(e->model->st); i++) n += (size_t)iris_st_at(e->model->st, i)->n_bytes;
    return n;
}

void iris_engine_model_info(const iris_engine *e, iris_model_info *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->dir, sizeof out->dir, "%s", e->dir);
    out->vocab_size = e->model->cfg.text_config.vocab_size;
    out->max_model_len = e->max_model_len;
    out->kv_blocks = e->n_blocks;
    out->n_layers = e->model->cfg.text_config.num_hidden_layers;
    out->hidden_size = e->model->cfg.text_config.hidden_size;
    out->image_token_id = e->model->cfg.image_token_id;
    out->max_num_seqs = e->o.max_num_seqs;
    out->max_batch_tokens = e->o.max_batch_tokens;
}

/* ---- finishing requests ------------------------------------------------------------------- */

/* The counters readers see (iris_engine_get_stats); under e->mu. */
static void publish_stats(iris_engine *e) {
    iris_engine_stats *s = &e->stats;
    s->n_running = e->sched.n_running;
    s->n_waiting = e->sched.n_waiting + e->n_inbox;
    s->kv_blocks_total = e->n_blocks;
    s->kv_blocks_used = iris_kv_pool_n_used(e->pool);
    s->kv_blocks_cached = iris_kv_pool_n_cached(e->pool);
    s->steps = e->sched.stats.steps;
    s->requests_finished = e->requests_finished;
    s->prompt_tokens = e->prompt_tokens;
    s->prefill_tokens = e->sched.stats.prefill_tokens;
    s->prefix_hit_tokens = e->sched.stats.prefix_hit_tokens;
    s->generated_tokens = e->generated_tokens;
    s->images_encoded = e->images_encoded;
    s->images_ahead = e->images_ahead;
    s->worker_s = e->worker_s;
    s->vision_s = e->vision_s;
    s->prefill_s = e->prefill_s;
    s->decode_s = e->decode_s;
    s->images_cached = e->sched.stats.images_cached;
    s->preemptions = e->sched.stats.preemptions;
}

/* Finish r: its last event, with the usage.  The stats are published first (the scheduler
 * has let go of r's sequence by now), so whoever gets the event and then asks for the stats
 * (a client reading /metrics after its answer) finds the request counted and no longer
 * running.  have_mu: the caller holds e->mu. */
static void finish_at(iris_engine *e, iris_request *r, int reason, const iris_err *why, int have_mu) {
    if (r->finished) return;
    r->finished = 1;
    iris_event ev = {.kind = IRIS_EVENT_DONE, .finish_reason = reason, .text = ""};
    /* Release what the stop matcher and the detokenizer still hold. */
    if (reason == IRIS_FINISH_REASON_LENGTH || (reason == IRIS_FINISH_REASON_STOP && iris_stop_which(r->stop) < 0)) {
        const char *t = NULL, *emit = NULL;
        size_t n = 0, n_emit = 0;
        iris_err ignore = {0};
        if (!iris_tok_stream_flush(&r->ts, &t, &n, &ignore) && n)
            iris_stop_feed(r->stop, t, n, &emit, &n_emit, &ignore);
        if (iris_stop_which(r->stop) < 0) iris_stop_flush(r->stop, &emit, &n_emit);
        if (emit && n_emit) ev.text = emit, ev.text_len = n_emit;
    }
    if (why) ev.err = *why;
    double now = iris_now_s();
    ev.usage.prompt_tokens = r->seq.n_prompt;
    ev.usage.completion_tokens = iris_sampler_n_generated(r->sampler);
    ev.usage.cached_tokens = r->seq.n_cached;
    ev.usage.ttft_s = r->t_first > 0 ? r->t_first - r->t_submit : 0;
    ev.usage.total_s = now - r->t_submit;
    iris_log(IRIS_LOG_DEBUG, "engine", "request %lld: %s, %d prompt (%d cached), %d generated, %.3f s",
             (long long)r->seq.id, iris_finish_reason_name(reason), ev.usage.prompt_tokens, ev.usage.cached_tokens,
             ev.usage.completion_tokens, ev.usage.total_s);
    e->requests_finished++;
    if (!have_mu) pthread_mutex_lock(&e->mu);
    publish_stats(e);
    if (!have_mu) pthread_mutex_unlock(&e->mu);
    iris_req_emit(r, &ev);
    iris_engine_worker_forget(e, r);
    for (int i = 0; r->vout && i < r->prompt.n_images; i++) iris_vision_out_free(&r->vout[i]);
    iris_req_release_px16(e, r);
    /* The step may still look at r (its batch): let go of it at the end of the step. */
    if (e->n_done == e->cap_done) {
        int nc = e->cap_done ? e->cap_done * 2 : 16;
        iris_request **nd = realloc(e->done, sizeof *nd * (size_t)nc);
        if (!nd) {
            iris_log(IRIS_LOG_ERROR, "engine", "out of memory: request %lld is leaked", (long long)r->seq.id);
            return;
        }
        e->done = nd, e->cap_done = nc;
    }
    e->done[e->n_done++] = r;
}

static void finish(iris_engine *e, iris_request *r, int reason, const iris_err *why) {
    finish_at(e, r, reason, why, 0);
}

static void release_done(iris_engine *e) {
    for (int i = 0; i < e->n_done; i++) iris_req_unref(e->done[i]);
    e->n_done = 0;
}

void iris_engine_fail(iris_engine *e, iris_request *r, const iris_err *why) {
    iris_sched_finish(&e->sched, &r->seq);
    finish(e, r, IRIS_FINISH_REASON_ERROR, why);
}

/* ---- one step ----------------------------------------------------------------------------- */

/* iris_runner_sampling.penalizes: does the request of logits row `row` penalize token id? */
static int row_penalizes(void *ud, int row, int32_t id) {
    iris_engine *e = ud;
    return iris_sampler_penalizes(e->top_req[row]->sampler, id);
}

/* iris_runner_sampling.mask: the allowed tokens of logits row `row`'s constrained request (called
 * from the thread pool for distinct rows: distinct samplers). */
static int row_mask(void *ud, int row, uint32_t *words, iris_err *err) {
    iris_engine *e = ud;
    return iris_sampler_mask(e->top_req[row]->sampler, words, err);
}

/* An encoder output's embedding rows (taps 0) or DeepStack rows (taps 1), whichever type it holds. */
static const char *vout_rows(const iris_vision_out *o, int taps) {
    if (o->embeds16) return (const char *)(taps ? o->deepstack16 : o->embeds16);
    return (const char *)(taps ? o->deepstack : o->embeds);
}

/* Sequence r's part of the step: its tokens, positions (into the step's positions buffer at row
 * `row0`, stride max_batch_tokens) and image rows (where the encoder left them when the chunk
 * touches one image, else gathered into the step's image buffer at `*img_at` bytes). */
static int prepare(iris_engine *e, iris_request *r, int row0, size_t *img_at, iris_text_seq *ts, iris_err *err) {
    iris_seq *q = &r->seq;
    int n = q->n_new, c0 = q->n_computed, H = e->model->cfg.text_config.hidden_size, np = q->n_prompt;
    int T = e->o.max_batch_tokens;
    int32_t *pos = e->step_pos + row0;
    for (int i = 0; i < n; i++) {
        int j = c0 + i;
        for (int d = 0; d < 3; d++)
            pos[(size_t)d * T + i] = j < np ? r->prompt.pos[(size_t)d * np + j] : iris_pos_decode(j, r->prompt.rope_delta);
    }
    memset(ts, 0, sizeof *ts);
    ts->n_past = c0;
    ts->n_new = n;
    ts->tokens = q->tokens + c0;
    ts->pos = pos;
    ts->pos_stride = T;
    ts->block_table = q->blocks;
    ts->logits_from = q->want_logits ? n - 1 : n;
    /* Image rows of this chunk, in token order. */
    int n_rows = 0, n_ds = 0, n_touch = 0, only = -1;
    for (int i = 0; i < q->n_images; i++) {
        const iris_seq_image *im = &q->images[i];
        int a = im->start > c0 ? im->start : c0, b = im->start + im->n_tokens < c0 + n ? im->start + im->n_tokens : c0 + n;
        if (b > a) n_rows += b - a, n_ds = r->vout[i].n_deepstack, n_touch++, only = i;
    }
    if (!n_rows) return IRIS_OK;
    /* Rows are fp32 (CPU) or bf16 bits (GPU: iris_vision_encode_bf16), as the encoder left them. */
    int b16 = r->vout[only].embeds16 != NULL;
    size_t es = b16 ? sizeof(uint16_t) : sizeof(float);
    const char *emb = NULL, *ds[IRIS_MAX_DEEPSTACK] = {0};
    if (n_touch == 1) {
        /* One image in the chunk (the usual case): its rows are used where they are, no copy. */
        const iris_seq_image *im = &q->images[only];
        size_t off = (size_t)((im->start > c0 ? im->start : c0) - im->start) * H * es;
        emb = vout_rows(&r->vout[only], 0) + off;
        for (int d = 0; d < n_ds; d++) ds[d] = vout_rows(&r->vout[only], 1) + (size_t)d * im->n_tokens * H * es + off;
    } else {
        size_t need = es * (size_t)n_rows * H * (1 + (size_t)n_ds);
        if (*img_at + need > e->step_img_bytes)
            return iris_err_set(err, IRIS_ELIMIT, "%d image rows of %d images in one chunk: over the step's buffer",
                                n_rows, n_touch);
        char *img = e->step_img + *img_at;
        *img_at += need;
        int at = 0;
        for (int i = 0; i < q->n_images; i++) {
            const iris_seq_image *im = &q->images[i];
            int a = im->start > c0 ? im->start : c0, b = im->start + im->n_tokens < c0 + n ? im->start + im->n_tokens : c0 + n;
            if (b <= a) continue;
            if ((r->vout[i].embeds16 != NULL) != b16)
                return iris_err_set(err, IRIS_EINVAL, "image %d: rows of another type than the others", i + 1);
            size_t off = (size_t)(a - im->start) * H * es, len = (size_t)(b - a) * H * es;
            memcpy(img + (size_t)at * H * es, vout_rows(&r->vout[i], 0) + off, len);
            for (int d = 0; d < n_ds; d++)
                memcpy(img + ((size_t)(1 + d) * n_rows + at) * H * es,
                       vout_rows(&r->vout[i], 1) + (size_t)d * im->n_tokens * H * es + off, len);
            at += b - a;
        }
        emb = img;
        for (int d = 0; d < n_ds; d++) ds[d] = img + (size_t)(1 + d) * n_rows * H * es;
    }
    ts->n_deepstack = n_ds;
    if (b16) {
        ts->image_embeds16 = (const uint16_t *)emb;
        for (int d = 0; d < n_ds; d++) ts->deepstack16[d] = (const uint16_t *)ds[d];
    } else {
        ts->image_embeds = (const float *)emb;
        for (int d = 0; d < n_ds; d++) ts->deepstack[d] = (const float *)ds[d];
    }
    return IRIS_OK;
}

/* A sampled token: stream it, and finish the request when it ends.  The token comes from the
 * whole row of logits, or (logits NULL) from the row's k most likely tokens ids/vals. */
static void emit_token(iris_engine *e, iris_request *r, const float *logits, const int32_t *ids, const float *vals,
                       int k) {
    iris_err err = {0};
    iris_sample_out so;
    int tok = logits ? iris_sampler_sample(r->sampler, logits, &so, &err)
                     : iris_sampler_sample_top(r->sampler, ids, vals, k, &so, &err);
    if (tok < 0 || iris_seq_append(&r->seq, tok, &err)) {
        iris_engine_fail(e, r, &err);
        return;
    }
    if (r->t_first == 0) r->t_first = iris_now_s();
    e->generated_tokens++;
    iris_finish fr = iris_sampler_accept(r->sampler, tok);
    iris_event ev = {.kind = IRIS_EVENT_DELTA, .token = tok, .text = ""};
    if (r->logprobs) {
        ev.logprob = so.logprob;
        ev.n_top = so.n_top;
        memcpy(ev.top_ids, so.top_ids, sizeof ev.top_ids);
        memcpy(ev.top_logprobs, so.top_logprobs, sizeof ev.top_logprobs);
    }
    int stop_hit = 0;
    if (fr != IRIS_FINISH_STOP) {  /* a stop token's own text is never shown */
        const char *t = NULL, *emit = NULL;
        size_t n = 0, n_emit = 0;
        if (iris_tok_stream_push(&r->ts, tok, &t, &n, &err) == 0 && n) {
            stop_hit = iris_stop_feed(r->stop, t, n, &emit, &n_emit, &err) == 1;
            if (emit && n_emit) ev.text = emit, ev.text_len = n_emit;
        }
    }
    iris_req_emit(r, &ev);
    int reason = stop_hit || fr == IRIS_FINISH_STOP ? IRIS_FINISH_REASON_STOP
                 : fr == IRIS_FINISH_LENGTH || r->seq.n_tokens >= r->max_len ? IRIS_FINISH_REASON_LENGTH
                                                                              : IRIS_FINISH_REASON_NONE;
    if (reason) {
        iris_sched_finish(&e->sched, &r->seq);
        finish(e, r, reason, NULL);
    }
}

/* What sampling needs of each logits row: the candidates its sampler needs (0: the whole row:
 * logprobs, or more than the runner brings), and whether its request has penalties. */
static void sampling_needs(iris_engine *e, iris_sched_batch *b, iris_runner_sampling *smp) {
    int n_lg = 0, *masked = e->top_need + 2 * (size_t)e->o.max_num_seqs;
    for (int i = 0; i < b->n_seqs; i++) {
        iris_request *r = b->seqs[i]->ud;
        if (!r->seq.want_logits) continue;
        e->top_req[n_lg] = r;
        e->top_need[n_lg] = r->logprobs ? 0 : iris_sampler_top_need(r->sampler);
        e->top_pen[n_lg] = iris_sampler_has_penalties(r->sampler);
        masked[n_lg] = iris_sampler_constrained(r->sampler);
        n_lg++;
    }
    *smp = (iris_runner_sampling){.need = e->top_need, .penalized = e->top_pen, .penalizes = row_penalizes, .ud = e,
                                  .masked = masked, .mask = row_mask};
}

static void step(iris_engine *e) {
    iris_err err = {0};
    iris_sched_batch *b = &e->batch;
    iris_engine_worker_collect(e, 0);
    if (iris_sched_step(&e->sched, b, &err)) {
        iris_log(IRIS_LOG_ERROR, "engine", "%s", err.msg);
        return;
    }
    for (int i = 0; i < b->n_cancelled; i++) finish(e, b->cancelled[i]->ud, IRIS_FINISH_REASON_CANCELLED, NULL);
    if (b->n_seqs == 0) {
        /* Every chunk waits for an image the worker encodes: wait for one. */
        if (iris_engine_worker_busy(e)) {
            iris_engine_worker_submit(e);
            iris_engine_worker_collect(e, 1);
            return;
        }
        /* Nothing fits although nothing runs: cannot happen with the submit
         * checks; fail the head rather than spin. */
        if (e->sched.n_running == 0 && e->sched.n_waiting > 0) {
            iris_request *r = e->sched.waiting[0]->ud;
            iris_err_set(&err, IRIS_ELIMIT, "request needs more KV blocks than the cache has (%d)", e->n_blocks);
            iris_engine_fail(e, r, &err);
        }
        return;
    }
    int n = b->n_seqs, rc = IRIS_OK, n_rows = 0, prompt_rows = 0;
    iris_text_seq *ts = e->step_seqs;
    size_t img_at = 0;
    double t0 = iris_now_s();
    rc = iris_engine_encode_images(e, b, &err);
    double t_vis = iris_now_s() - t0;
    e->vision_s += t_vis;
    if (!rc) iris_engine_worker_submit(e);
    for (int i = 0; !rc && i < n; i++) {
        iris_request *r = b->seqs[i]->ud;
        rc = prepare(e, r, n_rows, &img_at, &ts[i], &err);
        n_rows += r->seq.n_new;
        prompt_rows += r->seq.n_computed < r->seq.n_prompt;
    }
    double t1 = iris_now_s();
    iris_runner_sampling smp;
    iris_runner_out out;
    sampling_needs(e, b, &smp);
    if (!rc) rc = iris_runner_step(e->runner, ts, n, &smp, &out, &err);
    double t2 = iris_now_s();
    if (rc) {
        iris_log(IRIS_LOG_ERROR, "engine", "step of %d sequences failed: %s", n, err.msg);
        /* The K/V of this step may be half written: fail its sequences (their blocks are unkeyed). */
        for (int i = 0; i < n; i++) iris_engine_fail(e, b->seqs[i]->ud, &err);
        return;
    }
    iris_sched_commit(&e->sched, b);
    int row = 0, V = e->model->cfg.text_config.vocab_size, k = out.k;
    for (int i = 0; i < n; i++) {
        iris_request *r = b->seqs[i]->ud;
        if (!r->seq.want_logits) continue;
        if (k > 0 && !out.whole[row])
            emit_token(e, r, NULL, out.ids + (size_t)row * k, out.vals + (size_t)row * k, k);
        else
            emit_token(e, r, out.logits + (size_t)row * V, NULL, NULL, 0);
        row++;
    }
    *(prompt_rows ? &e->prefill_s : &e->decode_s) += iris_now_s() - t1;
    iris_log(IRIS_LOG_DEBUG, "engine", "step: %d seqs, %d rows: vision %.2f ms, inputs %.2f ms, decoder %.2f ms "
             "(issued after %.2f), sampling %.2f ms (%s, %d masked)", n, n_rows, t_vis * 1e3, (t1 - t0 - t_vis) * 1e3,
             (t2 - t1) * 1e3, out.launch_s * 1e3, (iris_now_s() - t2) * 1e3, k > 0 ? "top-k rows" : "whole rows",
             out.n_masked);
    /* Drop the embeddings of images whose tokens are all in the cache. */
    for (int i = 0; i < n; i++) {
        iris_request *r = b->seqs[i]->ud;
        if (r->finished) continue;
        for (int k2 = 0; k2 < r->seq.n_images; k2++) {
            iris_seq_image *im = &r->seq.images[k2];
            if (im->ready && im->start + im->n_tokens <= r->seq.n_computed) {
                iris_vision_out_free(&r->vout[k2]);
                im->embeds = im->deepstack = NULL;
                im->ready = 0;
            }
        }
    }
}

/* ---- a prompt's logits (iris logits) ----------------------------------------------------------- */

int iris_engine_prompt_logits(iris_engine *e, const iris_prompt *p, int n_out, iris_text_trace_fn trace, void *ud,
                              float *logits, iris_err *err) {
    int n = (int)p->ids.n, nb = (n + IRIS_KV_BLOCK - 1) / IRIS_KV_BLOCK;
    if (n < 1 || n_out < 1 || n_out > n)
        return iris_err_set(err, IRIS_EINVAL, "logits of %d of the prompt's %d positions", n_out, n);
    if (nb > e->n_blocks)
        return iris_err_set(err, IRIS_ELIMIT, "the prompt's %d tokens need %d KV blocks; the engine has %d", n, nb,
                            e->n_blocks);
    iris_vision_out vo;
    memset(&vo, 0, sizeof vo);
    int rc = IRIS_OK;
    if (p->n_images > 0) {
        /* every image in one encoder call, as requests encode them (bf16 rows on a GPU) */
        size_t sb = 0;
        void *scratch = iris_runner_scratch(e->runner, &sb);
        if (sb < iris_vision_scratch_bytes(&e->model->vision, e->be->act, p->n_rows)) scratch = NULL, sb = 0;
        rc = e->on_gpu ? iris_vision_encode_bf16(&e->model->vision, e->be, scratch, sb, p->pixel_values, p->n_rows, p->grid_thw,
                                                 p->n_images, &vo, err)
                       : iris_vision_encode(&e->model->vision, p->pixel_values, p->n_rows, p->grid_thw, p->n_images, &vo, NULL, err);
        if (rc) return rc;
    }
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)nb);
    if (!bt) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
    for (int k = 0; !rc && k < nb; k++) bt[k] = k;
    iris_text_seq q = {.n_new = n, .tokens = p->ids.ids, .pos = p->pos, .pos_stride = n, .block_table = bt,
                       .logits_from = n - n_out, .n_deepstack = vo.n_deepstack};
    size_t H = (size_t)vo.out_hidden, T = (size_t)vo.n_tokens;
    for (int d = 0; d < vo.n_deepstack; d++) {
        if (vo.embeds16) q.deepstack16[d] = vo.deepstack16 + d * T * H;
        else q.deepstack[d] = vo.deepstack + d * T * H;
    }
    q.image_embeds = vo.embeds, q.image_embeds16 = vo.embeds16;
    iris_runner_limits lim = {.max_rows = n, .max_seqs = 1, .max_context = n, .max_logits = n_out,
                              .n_deepstack = vo.n_deepstack, .trace = trace != NULL};
    iris_runner *r = NULL;
    iris_runner_out out;
    if (!rc) rc = iris_runner_open(&e->model->text, e->be, &e->kv, &lim, &r, err);
    if (!rc) rc = iris_runner_step_trace(r, &q, 1, trace, ud, &out, err);
    if (!rc) memcpy(logits, out.logits, sizeof(float) * (size_t)n_out * e->model->cfg.text_config.vocab_size);
    iris_runner_close(r);
    free(bt);
    iris_vision_out_free(&vo);
    return rc;
}

static void *engine_main(void *arg) {
    iris_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->n_inbox && !iris_sched_busy(&e->sched) && !e->stopping) pthread_cond_wait(&e->cv, &e->mu);
        if (e->stopping && !e->n_inbox && !iris_sched_busy(&e->sched)) break;
        int n_in = e->n_inbox;
        for (int i = 0; i < n_in; i++) {
            iris_request *r = e->inbox[i];
            e->n_inbox = n_in - i - 1;  /* r leaves the inbox (stats published meanwhile count it once) */
            iris_err err = {0};
            if (iris_sched_add(&e->sched, &r->seq, &err)) {
                finish_at(e, r, IRIS_FINISH_REASON_ERROR, &err, 1);
                e->n_queued--;
                continue;
            }
            e->prompt_tokens += (uint64_t)r->seq.n_prompt;
        }
        release_done(e);
        pthread_mutex_unlock(&e->mu);

        iris_seq **lists[2] = {e->sched.running, e->sched.waiting};
        int counts[2] = {e->sched.n_running, e->sched.n_waiting};
        for (int l = 0; l < 2; l++)
            for (int i = 0; i < counts[l]; i++) {
                iris_request *r = lists[l][i]->ud;
                lists[l][i]->cancel = atomic_load(&r->cancel);
            }
        step(e);
        release_done(e);

        pthread_mutex_lock(&e->mu);
        e->n_queued = e->sched.n_waiting + e->n_inbox;
        publish_stats(e);
    }
    publish_stats(e);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- open / close ------------------------------------------------------------------------- */

/* Which backend: cpu, cuda, or auto (cuda when this build has it, a GPU is there and the build
 * has kernels for it; else the CPU, with a warning that says why when there is a GPU or a
 * driver that cannot serve this build). */
static int pick_device(const char *d, int *cuda, iris_err *err) {
    *cuda = 0;
    if (d && strcmp(d, "cpu") && strcmp(d, "cuda") && strcmp(d, "auto"))
        return iris_err_set(err, IRIS_EINVAL, "device \"%s\": use cpu, cuda or auto", d);
    if (d && !strcmp(d, "cpu")) return IRIS_OK;
#ifdef IRIS_CUDA
    char why[512];
    if (iris_cuda_usable(0, why, sizeof why)) {
        *cuda = 1;
        return IRIS_OK;
    }
    if (d && !strcmp(d, "cuda"))
        return iris_err_set(err, IRIS_EDEVICE, "device cuda: %s; use --device cpu",
                            why[0] ? why : "no CUDA device is usable here (no GPU, or no driver)");
    if (why[0]) iris_log(IRIS_LOG_WARN, "engine", "the GPU is not used: %s; running on the CPU", why);
#else
    if (d && !strcmp(d, "cuda"))
        return iris_err_set(err, IRIS_EUNSUPPORTED, "device cuda: this iris was built without CUDA (nvcc was not "
                                                    "found at build time); use --device cpu");
#endif
    return IRIS_OK;
}

/* The KV cache's element type on backend b: its activation dtype, or E4M3 codes for
 * --kv-cache-dtype fp8 (half of BF16, a quarter of the CPU's F32). */
static iris_dtype kv_dtype_on(const iris_engine *e, const iris_backend *b) {
    return e->kv_plan_dtype == IRIS_KV_FP8 ? IRIS_DT_F8_E4M3 : b->act;
}

/* Bytes of one cache block (K and V of every layer) in dtype dt. */
static size_t kv_block_bytes(const iris_text_config *tc, iris_dtype dt) {
    return (size_t)2 * tc->num_hidden_layers * IRIS_KV_BLOCK * tc->num_key_value_heads * tc->head_dim *
           iris_dtype_size(dt);
}

/* The weights onto e->be (the decoder, its dense copies, the vision tower: weights.h), the
 * embeddings and the lm_head where the plan (or on the CPU the flags) put them. */
static int place(iris_engine *e, const iris_model_placement *pl, iris_err *err) {
    return iris_model_place_with(e->model, e->be, pl, err);
}

#ifdef IRIS_CUDA
/* The memory plan for this device, then the one allocation it sizes, the
 * weights and the KV cache in it.  The budget is measured with the context
 * already made (cudaMemGetInfo makes it), so the context's estimate is added
 * back to the free memory: the carved parts still get exactly what the plan
 * says, and they fit in what is free now less the margin. */
static int load_cuda(iris_engine *e, iris_err *err) {
    const iris_engine_opts *o = &e->o;
    iris_plan_model pm;
    int rc = iris_plan_model_init(&e->model->cfg, e->model->st, e->dir, &pm, err);
    if (rc) return rc;
    size_t fr = 0, tot = 0;
    if (iris_cuda_device_memory(0, &fr, &tot))
        return iris_err_set(err, IRIS_EDEVICE, "device cuda: cudaMemGetInfo failed on device 0");
    iris_plan_budget_opts bo = {.gpu_memory_limit = o->gpu_memory_limit,
                                .gpu_memory_utilization = o->gpu_memory_utilization,
                                .gpu_memory_margin = o->gpu_memory_margin,
                                .margin_set = o->gpu_memory_margin_set};
    uint64_t budget = 0, free_before = (uint64_t)fr + IRIS_PLAN_CONTEXT_ESTIMATE;
    char how[256];
    if (free_before > tot) free_before = tot;
    rc = iris_plan_budget(&bo, tot, free_before, &budget, how, sizeof how, err);
    if (rc) return rc;
    /* The backend's own scratch comes out of the budget first (the plan does not list it). */
    uint64_t scratch = iris_cuda_scratch_bytes();
    if (budget <= scratch) return iris_err_set(err, IRIS_ELIMIT, "the GPU memory budget (%s) leaves nothing", how);
    budget -= scratch;
    size_t hl = strlen(how);
    snprintf(how + hl, sizeof how - hl, ", less %.1f MiB of backend scratch", scratch / 1048576.0);
    iris_plan_settings ps;
    iris_plan_settings_default(&ps);
    ps.max_num_seqs = o->max_num_seqs;
    ps.max_batch_tokens = o->max_batch_tokens;
    ps.kv_cache_dtype = e->kv_plan_dtype;
    ps.dense_weights = o->dense_weights ? iris_plan_dense_parse(o->dense_weights) : IRIS_DENSE_AUTO;
    ps.text_only = !e->model->has_vision;
    ps.embeddings = o->embeddings ? iris_plan_embed_parse(o->embeddings) : IRIS_EMBED_AUTO;
    ps.lm_head_dtype = o->lm_head_dtype ? iris_plan_lm_head_parse(o->lm_head_dtype) : IRIS_LM_HEAD_AUTO;
    ps.max_image_pixels = o->max_image_pixels;
    ps.max_video_pixels = e->vopts.max_pixels;
    ps.vision_worker = o->vision_worker;
    int64_t max_pos = e->model->cfg.text_config.max_position_embeddings;
    int64_t min_ctx = max_pos < IRIS_PLAN_MIN_CONTEXT ? max_pos : IRIS_PLAN_MIN_CONTEXT;
    if (o->max_model_len > 0) ps.max_model_len = o->max_model_len < min_ctx ? min_ctx
                                                : o->max_model_len > max_pos ? max_pos : o->max_model_len;
    iris_plan *plan = calloc(1, sizeof *plan);
    if (!plan) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    rc = iris_plan_make(&pm, &ps, budget, how, 0, plan, err);
    char *text = rc == IRIS_OK || rc == IRIS_ELIMIT ? iris_plan_format(plan) : NULL;
    if (rc) {
        /* Every part, the budget and the settings that would fit: the whole message, then the summary. */
        if (text) fprintf(stderr, "%s\n", text);
        free(text);
        free(plan);
        return rc;
    }
    e->plan_text = text;
    iris_log(IRIS_LOG_INFO, "engine", "memory plan for %s:\n%s", e->dir, text ? text : "");
    e->max_model_len = (int)plan->context;
    e->o.max_batch_tokens = plan->settings.max_batch_tokens;  /* chosen by the plan when not given */
    e->n_blocks = (int)plan->kv_blocks;
    e->max_image_tokens = (int)plan->image_tokens;
    /* Images are resized to what the plan admits (smart_resize's max_pixels). */
    if (e->pc.max_pixels > ps.max_image_pixels) e->pc.max_pixels = ps.max_image_pixels;
    uint64_t device_bytes = plan->device_bytes;
    /* More blocks than every sequence at full length would never be used: give them back. */
    int64_t need = (int64_t)o->max_num_seqs * ((plan->context + IRIS_KV_BLOCK - 1) / IRIS_KV_BLOCK);
    if (need < plan->kv_blocks) {
        device_bytes -= plan->part_bytes[IRIS_PART_KV_CACHE] - iris_plan_align((uint64_t)need * plan->kv_block_bytes);
        e->n_blocks = (int)need;
        iris_log(IRIS_LOG_INFO, "engine", "KV cache: %lld blocks are enough for %d sequences of %lld tokens; the "
                 "allocation is %.1f MiB smaller than the plan's", (long long)need, o->max_num_seqs,
                 (long long)plan->context, (plan->kv_blocks - need) * (double)plan->kv_block_bytes / 1048576.0);
    }
    iris_model_placement pl = {.dense = plan->dense, .embed_host = plan->embed_host, .lm_head_fp8 = plan->lm_head_fp8};
    e->use_worker = plan->vision_worker;
    free(plan);
    rc = iris_backend_cuda_open(0, device_bytes + scratch, &e->be, err);
    if (!rc) rc = place(e, &pl, err);
    if (!rc) rc = iris_kv_cache_init_dtype(&e->kv, &e->model->cfg.text_config, e->n_blocks, kv_dtype_on(e, e->be), e->be, err);
    if (!rc && e->be->sync && e->be->sync(e->be)) rc = iris_err_set(err, IRIS_EDEVICE, "%s", e->be->err.msg);
    if (rc) return rc;
    iris_cuda_mem mi;
    if (iris_cuda_mem_info(e->be, &mi) == 0)
        iris_log(IRIS_LOG_INFO, "engine", "device memory: one allocation of %.1f MiB, %.1f MiB carved after loading "
                 "(weights, KV cache, workspaces)", mi.arena_bytes / 1048576.0, mi.used_bytes / 1048576.0);
    e->on_gpu = 1;
    return IRIS_OK;
}
#endif

/* The CPU backend: the KV cache in host memory, sized by kv_blocks or kv_cache_bytes. */
static int load_cpu(iris_engine *e, iris_err *err) {
    const iris_engine_opts *o = &e->o;
    const iris_text_config *tc = &e->model->cfg.text_config;
    if (!e->o.max_batch_tokens)
        e->o.max_batch_tokens = o->max_num_seqs > IRIS_PLAN_DEFAULT_MAX_BATCH_TOKENS ? o->max_num_seqs
                                                                                   : IRIS_PLAN_DEFAULT_MAX_BATCH_TOKENS;
    /* No plan on the CPU: the placement flags as given (auto keeps the stored form). */
    iris_model_placement pl = {.embed_host = o->embeddings && iris_plan_embed_parse(o->embeddings) == IRIS_EMBED_HOST,
                               .lm_head_fp8 = o->lm_head_dtype && iris_plan_lm_head_parse(o->lm_head_dtype) ==
                                                                      IRIS_LM_HEAD_FP8};
    e->use_worker = o->vision_worker == IRIS_WORKER_ON;  /* auto: off (the encoder already takes every core) */
    int rc = iris_backend_cpu_open(&e->be, err);
    if (!rc) rc = place(e, &pl, err);
    if (rc) return rc;
    e->max_model_len = o->max_model_len > 0 && o->max_model_len < tc->max_position_embeddings
                           ? o->max_model_len : tc->max_position_embeddings;
    size_t block_bytes = kv_block_bytes(tc, kv_dtype_on(e, e->be));
    e->n_blocks = o->kv_blocks;
    if (e->n_blocks <= 0) {
        size_t bytes = o->kv_cache_bytes ? o->kv_cache_bytes : DEFAULT_KV_BYTES;
        size_t want = (size_t)(e->max_model_len + IRIS_KV_BLOCK - 1) / IRIS_KV_BLOCK * (size_t)o->max_num_seqs;
        size_t fit = bytes / block_bytes;
        e->n_blocks = (int)(want < fit ? want : fit);
    }
    if (e->n_blocks < 1)
        return iris_err_set(err, IRIS_ELIMIT, "kv_cache_bytes %zu holds no 16-token block (%zu bytes each)",
                            o->kv_cache_bytes, block_bytes);
    return iris_kv_cache_init_dtype(&e->kv, tc, e->n_blocks, kv_dtype_on(e, e->be), e->be, err);
}

/* The runner and the step's host inputs, sized from the settings (and on a GPU from the plan:
 * the largest image's patches size the vision scratch the runner's activations lend). */
static int open_runner(iris_engine *e, iris_err *err) {
    const iris_engine_opts *o = &e->o;
    const iris_config *c = &e->model->cfg;
    int m = c->vision_config.spatial_merge_size;
    iris_runner_limits lim = {.max_rows = o->max_batch_tokens, .max_seqs = o->max_num_seqs,
                              .max_context = e->max_model_len,
                              .n_deepstack = e->model->has_vision ? c->vision_config.n_deepstack : 0,
                              .masks = 1};
    if (e->on_gpu && e->max_image_tokens > 0)
        lim.scratch_bytes = iris_vision_scratch_bytes(&e->model->vision, e->be->act, (int64_t)e->max_image_tokens * m * m);
    int rc = iris_runner_open(&e->model->text, e->be, &e->kv, &lim, &e->runner, err);
    if (rc) return rc;
    size_t S = (size_t)o->max_num_seqs, T = (size_t)o->max_batch_tokens;
    e->step_img_bytes = T * (size_t)c->text_config.hidden_size * (1 + (size_t)lim.n_deepstack) *
                        (e->on_gpu ? sizeof(uint16_t) : sizeof(float));
    e->step_seqs = calloc(S, sizeof *e->step_seqs);
    e->step_pos = malloc(3 * T * sizeof *e->step_pos);
    e->step_img = malloc(e->step_img_bytes);
    e->top_need = malloc(3 * S * sizeof(int));     /* need, penalized, masked: [S] each */
    e->top_req = malloc(S * sizeof *e->top_req);
    if (!e->step_seqs || !e->step_pos || !e->step_img || !e->top_need || !e->top_req)
        return iris_err_set(err, IRIS_ENOMEM, "out of memory for the step's inputs");
    e->top_pen = e->top_need + S;
    return IRIS_OK;
}

static int load(iris_engine *e, iris_err *err) {
    const iris_engine_opts *o = &e->o;
    int cuda = 0;
    int rc = pick_device(o->device, &cuda, err);
    if (!rc) rc = iris_model_ensure(o->model, e->dir, sizeof e->dir, o->allow_download, err);
    iris_model_opts mo = {.text_only = o->text_only};
    if (!rc) rc = iris_model_open(e->dir, &mo, &e->model, err);
    if (rc) return rc;
    e->pc = e->model->pc;
    iris_video_opts_default(&e->vopts);
    if ((rc = iris_video_opts_load(e->dir, &e->vopts, err))) return rc;
    const iris_text_config *tc = &e->model->cfg.text_config;
    if (cuda) {
#ifdef IRIS_CUDA
        rc = load_cuda(e, err);
#endif
    } else {
        rc = load_cpu(e, err);
    }
    if (rc) return rc;
    /* Videos within what the context admits (planner.h): larger ones are resized down. */
    e->vopts.max_pixels = iris_plan_video_pixels(&e->model->cfg.vision_config, e->vopts.max_pixels, e->max_model_len);
    if (e->vopts.min_pixels > e->vopts.max_pixels) e->vopts.min_pixels = e->vopts.max_pixels;
    iris_dtype kv_dt = e->kv.layers[0].dtype;
    size_t block_bytes = kv_block_bytes(tc, kv_dt);
    rc = iris_kv_pool_init(&e->pool, e->n_blocks, o->prefix_caching, err);
    e->use_worker = e->use_worker && e->model->has_vision;
    iris_sched_opts so = {o->max_num_seqs, o->max_batch_tokens, o->max_waiting + o->max_num_seqs, e->use_worker};
    if (!rc) rc = iris_sched_init(&e->sched, &so, e->pool, err);
    if (rc) return rc;
    if ((rc = open_runner(e, err))) return rc;
    if (e->use_worker && (rc = iris_engine_worker_open(e, err))) return rc;
    iris_req_warm_host(e, o->host_warm);
    iris_log(IRIS_LOG_INFO, "engine", "%s on %s: %d layers, hidden %d, vocab %d; KV cache %d blocks (%d tokens, %.1f MiB, %s), "
             "context %d, %d seqs x %d tokens a step, prefix caching %s", e->dir, e->be->name, tc->num_hidden_layers,
             tc->hidden_size, tc->vocab_size, e->n_blocks, e->n_blocks * IRIS_KV_BLOCK,
             (double)block_bytes * e->n_blocks / (1 << 20), kv_dt == IRIS_DT_F8_E4M3 ? "fp8" : iris_dtype_name(kv_dt),
             e->max_model_len, o->max_num_seqs, o->max_batch_tokens,
             o->prefix_caching ? "on" : "off");
    return IRIS_OK;
}

static void unload(iris_engine *e) {
#ifdef IRIS_CUDA
    iris_cuda_mem mi;
    if (e->on_gpu && e->be && iris_cuda_mem_info(e->be, &mi) == 0)
        iris_log(IRIS_LOG_INFO, "engine", "device memory: peak %.1f MiB carved of the %.1f MiB allocation (%.1f MiB never used)",
                 mi.peak_bytes / 1048576.0, mi.arena_bytes / 1048576.0, (mi.arena_bytes - mi.peak_bytes) / 1048576.0);
#endif
    iris_sched_batch_free(&e->batch);
    iris_sched_free(&e->sched);
    iris_kv_pool_free(e->pool);
    if (e->kv.layers) iris_kv_cache_free(&e->kv);
    iris_engine_worker_close(e);
    iris_runner_close(e->runner);
    e->runner = NULL;
    iris_model_close(e->model);
    if (e->be) e->be->destroy(e->be);
    free(e->plan_text);
    free(e->step_seqs);
    free(e->step_pos);
    free(e->step_img);
    free(e->top_need);
    free(e->top_req);
    free(e->inbox);
    free(e->done);
}

int iris_engine_open(const iris_engine_opts *o, iris_engine **out, iris_err *err) {
    *out = NULL;
    if (!o || !o->model) return iris_err_set(err, IRIS_EINVAL, "engine: no model given");
    iris_engine *e = calloc(1, sizeof *e);
    if (!e) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    iris_engine_opts_default(&e->o);
    e->o.model = o->model;
    e->o.allow_download = o->allow_download;
    e->o.device = o->device;
    if (o->max_num_seqs > 0) e->o.max_num_seqs = o->max_num_seqs;
    if (o->max_batch_tokens > 0) e->o.max_batch_tokens = o->max_batch_tokens;
    if (o->max_waiting > 0) e->o.max_waiting = o->max_waiting;
    e->o.max_model_len = o->max_model_len;
    e->o.kv_blocks = o->kv_blocks;
    e->o.kv_cache_bytes = o->kv_cache_bytes;
    e->o.prefix_caching = o->prefix_caching;
    e->o.gpu_memory_limit = o->gpu_memory_limit;
    e->o.gpu_memory_utilization = o->gpu_memory_utilization;
    e->o.gpu_memory_margin = o->gpu_memory_margin;
    e->o.gpu_memory_margin_set = o->gpu_memory_margin_set;
    /* The one image cap (iris.h): every front door's prompt context and the memory plan take it. */
    e->o.max_image_pixels = o->max_image_pixels > 0 ? o->max_image_pixels : IRIS_PLAN_DEFAULT_MAX_IMAGE_PIXELS;
    e->o.kv_cache_dtype = o->kv_cache_dtype;
    e->kv_plan_dtype = o->kv_cache_dtype ? iris_plan_kv_dtype_parse(o->kv_cache_dtype) : IRIS_KV_BF16;
    if (e->kv_plan_dtype < 0) {
        iris_err_set(err, IRIS_EINVAL, "--kv-cache-dtype '%s': give bf16 or fp8", o->kv_cache_dtype);
        free(e);
        return IRIS_EINVAL;
    }
    e->o.dense_weights = o->dense_weights;
    e->o.text_only = o->text_only;
    e->o.embeddings = o->embeddings;
    e->o.lm_head_dtype = o->lm_head_dtype;
    e->o.vision_worker = o->vision_worker;
    e->o.host_warm = o->host_warm;
    if (o->vision_worker < IRIS_WORKER_AUTO || o->vision_worker > IRIS_WORKER_OFF) {
        iris_err_set(err, IRIS_EINVAL, "vision_worker %d: give 0 (auto), 1 (on) or 2 (off)", o->vision_worker);
        free(e);
        return IRIS_EINVAL;
    }
    if ((o->dense_weights && iris_plan_dense_parse(o->dense_weights) < 0) ||
        (o->embeddings && iris_plan_embed_parse(o->embeddings) < 0) ||
        (o->lm_head_dtype && iris_plan_lm_head_parse(o->lm_head_dtype) < 0)) {
        if (o->dense_weights && iris_plan_dense_parse(o->dense_weights) < 0)
            iris_err_set(err, IRIS_EINVAL, "--dense-weights '%s': give auto, on or off", o->dense_weights);
        else if (o->embeddings && iris_plan_embed_parse(o->embeddings) < 0)
            iris_err_set(err, IRIS_EINVAL, "--embeddings '%s': give auto, device or host", o->embeddings);
        else
            iris_err_set(err, IRIS_EINVAL, "--lm-head-dtype '%s': give auto, stored or fp8", o->lm_head_dtype);
        free(e);
        return IRIS_EINVAL;
    }
    if (e->o.max_batch_tokens && e->o.max_batch_tokens < e->o.max_num_seqs) e->o.max_batch_tokens = e->o.max_num_seqs;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    int rc = load(e, err);
    if (!rc) publish_stats(e);  /* the pool's size for /metrics before the first step */
    if (!rc && pthread_create(&e->thread, NULL, engine_main, e))
        rc = iris_err_set(err, IRIS_ENOMEM, "could not start the engine thread");
    if (rc) {
        if (err && strncmp(err->msg, "model ", 6)) iris_err_prefix(err, "model %s", o->model); /* named once */
        unload(e);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        free(e);
        return rc;
    }
    e->thread_started = 1;
    *out = e;
    return IRIS_OK;
}

void iris_engine_shutdown(iris_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stopping = 1;
    pthread_cond_broadcast(&e->cv);
    int join = e->thread_started && !e->joined;
    e->joined = 1;
    pthread_mutex_unlock(&e->mu);
    if (join) pthread_join(e->thread, NULL);
}

void iris_engine_close(iris_engine *e) {
    if (!e) return;
    iris_engine_shutdown(e);
    unload(e);
    iris_vocab_free(e->vocab);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

void iris_engine_get_stats(iris_engine *e, iris_engine_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    pthread_mutex_unlock(&e->mu);
}
