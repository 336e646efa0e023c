/* generate.c: POST /v1/chat/completions and /v1/completions, from a whole
 * body to the answer: parse and validate (openai.c, straight into the
 * engine's sampling parameters), check the model name, fetch the images
 * (media.c) and build the prompt (the one builder, engine/prompt.c), submit
 * (the engine checks the context: its refusal is the client's 400), then
 * either collect the whole answer or stream it as server-sent events.
 *
 * Parameters left out take the model's generation_config.json values (as
 * vLLM does), so a bare request samples the way the model card says.
 *
 * The reply of a model that thinks: its reasoning split off first, then its
 * <tool_call> blocks parsed from the rest (tool_calls.h iris_reply_feed); a
 * response_format or tools grammar (a forced tool_choice too) starts after
 * the reasoning's "</think>" (the engine's, engine_req.c), as vLLM's.
 *
 * Images: fetched on the connection's thread, then decoded and made into
 * the prompt in one of --image-workers decode slots; up to --image-queue
 * requests wait for a slot (a full queue is a 503 image_queue_full, like
 * the engine's queue_full).  The builder's budget (prompt.h): images
 * resized to the engine's --max-image-pixels (iris_engine_prompt_ctx, the
 * same cap as the CLI's), each refused above IRIS_PROMPT_DECODE_RATIO times
 * that before decoding, and the server's own: a request's images bounded by
 * --max-request-pixels, all from the headers.
 *
 * Disconnects: at least every 50 ms, whether tokens are flowing or not, we
 * peek at the client's socket (while waiting for a decode slot, and while
 * the engine generates, streamed or not); a closed socket cancels the
 * request (the engine frees its KV blocks at its next step).  When MHD
 * itself notices (a failed write) it destroys the response, whose free
 * callback cancels too.
 *
 * Ownership: a streamed srv_gen belongs to its MHD response (freed in
 * gen_free); a non-streamed one lives on the handler's stack frame.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "engine/engine.h"
#include "err.h"
#include "log.h"
#include "server/server_internal.h"
#include "server/tool_calls.h"

#define WAIT_MS 50

int srv_client_gone(int fd) {
    if (fd < 0) return 0;
    char ch;
    ssize_t k = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* The client's socket looked at no more than every WAIT_MS. */
static int gen_client_gone(srv_gen *g) {
    double now = srv_now();
    if (now - g->t_check < WAIT_MS * 1e-3) return 0;
    g->t_check = now;
    return srv_client_gone(g->fd);
}

static void deadline_in(struct timespec *ts, long ms) {
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_nsec += ms * 1000000L;
    if (ts->tv_nsec >= 1000000000L) ts->tv_sec++, ts->tv_nsec -= 1000000000L;
}

/* A decode slot: 0, IRIS_ELIMIT when the queue is full, IRIS_ECANCELLED when the client left
 * while waiting. */
static int gate_enter(iris_server *s, int fd) {
    pthread_mutex_lock(&s->gate_mu);
    if (s->gate_busy >= s->o.image_workers) {
        if (s->gate_waiting >= s->o.image_queue) {
            pthread_mutex_unlock(&s->gate_mu);
            return IRIS_ELIMIT;
        }
        s->gate_waiting++;
        while (s->gate_busy >= s->o.image_workers) {
            struct timespec ts;
            deadline_in(&ts, WAIT_MS);
            pthread_cond_timedwait(&s->gate_cv, &s->gate_mu, &ts);
            if (s->gate_busy >= s->o.image_workers && srv_client_gone(fd)) {
                s->gate_waiting--;
                pthread_mutex_unlock(&s->gate_mu);
                return IRIS_ECANCELLED;
            }
        }
        s->gate_waiting--;
    }
    s->gate_busy++;
    pthread_mutex_unlock(&s->gate_mu);
    return 0;
}

static void gate_leave(iris_server *s) {
    pthread_mutex_lock(&s->gate_mu);
    s->gate_busy--;
    pthread_cond_signal(&s->gate_cv);
    pthread_mutex_unlock(&s->gate_mu);
}

static void free_images(srv_image *im, int n) {
    for (int i = 0; i < n; i++) free(im[i].data);
}

/* Fetch every image_url; on failure fill e (400 naming the part). */
/* Fetch the n URLs of one kind ("image" or "video") into im; on a failure, *bad is the index and
 * what was fetched is freed. */
static int fetch_media(const char *const *urls, int n, const iris_media_opts *mo, const char *kind, srv_image *im,
                       int *bad, iris_oai_err *e) {
    for (int i = 0; i < n; i++) {
        *bad = i;
        iris_err err = {0};
        snprintf(im[i].label, sizeof im[i].label, "%s %d", kind, i + 1);
        if (iris_media_fetch(urls[i], mo, &im[i].data, &im[i].n, &err)) {
            free_images(im, i);
            return iris_oai_fail(e, 400, "invalid_request_error", NULL, !strcmp(kind, "video") ? "invalid_video"
                                 : "invalid_image", "%s %d: %s", kind, i + 1, err.msg);
        }
    }
    return 0;
}

static int fetch_images(iris_server *s, const iris_oai_request *q, srv_image *im, int *bad, iris_oai_err *e) {
    return fetch_media((const char *const *)q->image_urls, q->n_images, &s->media, "image", im, bad, e);
}

/* The OpenAI param of the idx-th part of type `type` ("image_url", "video_url"):
 * "messages[m].content[p].<type>". */
static void part_param(const json_t *messages, const char *type, int idx, char *out, size_t cap) {
    size_t mi, pi;
    json_t *m, *p;
    int k = 0;
    snprintf(out, cap, "messages");
    json_array_foreach(messages, mi, m) {
        json_t *c = json_object_get(m, "content");
        if (!json_is_array(c)) continue;
        json_array_foreach(c, pi, p) {
            const char *t = json_string_value(json_object_get(p, "type"));
            if (t && !strcmp(t, type) && k++ == idx) {
                snprintf(out, cap, "messages[%zu].content[%zu].%s", mi, pi, type);
                return;
            }
        }
    }
}

/* ---- videos (video_url parts; media.c's fetch, a larger size limit) ---- */

#define SRV_VIDEO_MAX_BYTES (256u << 20)

static int fetch_videos(iris_server *s, const iris_oai_request *q, srv_image *vid, int *bad, iris_oai_err *e) {
    iris_media_opts mo = s->media;
    if (mo.max_bytes < SRV_VIDEO_MAX_BYTES) mo.max_bytes = SRV_VIDEO_MAX_BYTES;
    return fetch_media((const char *const *)q->video_urls, q->n_videos, &mo, "video", vid, bad, e);
}

/* ---- logprobs ---- */

static void fill_logprob(const iris_tok *tok, const iris_event *ev, iris_oai_logprob *lp) {
    memset(lp, 0, sizeof *lp);
    lp->token = iris_tok_token(tok, ev->token, &lp->token_len);
    lp->logprob = ev->logprob;
    lp->n_top = ev->n_top < IRIS_OAI_MAX_TOP_LOGPROBS ? ev->n_top : IRIS_OAI_MAX_TOP_LOGPROBS;
    for (int i = 0; i < lp->n_top; i++) {
        lp->top_tokens[i] = iris_tok_token(tok, ev->top_ids[i], &lp->top_lens[i]);
        lp->top_logprobs[i] = ev->top_logprobs[i];
    }
}

static json_t *event_logprobs(srv_gen *g, const iris_tok *tok, const iris_event *ev) {
    iris_oai_logprob lp;
    fill_logprob(tok, ev, &lp);
    if (g->kind == IRIS_OAI_CHAT) return json_pack("{s:[o]}", "content", iris_oai_chat_logprob(&lp));
    json_t *o = iris_oai_completion_logprobs_new();
    iris_oai_completion_logprob_add(o, &lp, g->text_off);
    return o;
}

static const char *finish_name(const srv_gen *g, int reason) {
    if (reason == IRIS_FINISH_REASON_LENGTH) return "length";
    return g->tools && iris_tool_parser_n_calls(g->tools) > 0 ? "tool_calls" : "stop";
}

static void note_token(srv_gen *g) {
    double now = srv_now();
    if (g->n_tokens > 0) iris_metrics_inter_token(g->s->metrics, now - g->t_last);
    g->t_last = now;
    g->n_tokens++;
}

static void note_done(srv_gen *g, const iris_event *ev) {
    iris_metrics_generation(g->s->metrics, ev->usage.prompt_tokens, ev->usage.completion_tokens,
                            ev->usage.completion_tokens > 0 ? ev->usage.ttft_s : -1, ev->usage.total_s);
    iris_log(IRIS_LOG_INFO, "serve", "%s %s: prompt %d (cached %d), generated %d, ttft %.3f s, total %.3f s, %s",
             g->id, g->kind == IRIS_OAI_CHAT ? "chat" : "completion", ev->usage.prompt_tokens,
             ev->usage.cached_tokens, ev->usage.completion_tokens, ev->usage.ttft_s, ev->usage.total_s,
             iris_finish_reason_name(ev->finish_reason));
}

/* ---- streaming ---- */

static int out_put(srv_gen *g, char *sse, size_t n) {
    if (!sse) return -1;
    if (g->out_n + n > g->out_cap) {
        size_t cap = g->out_cap ? g->out_cap : 4096;
        while (cap < g->out_n + n) cap *= 2;
        char *q = realloc(g->out, cap);
        if (!q) {
            free(sse);
            return -1;
        }
        g->out = q;
        g->out_cap = cap;
    }
    memcpy(g->out + g->out_n, sse, n);
    g->out_n += n;
    free(sse);
    return 0;
}

static int out_json(srv_gen *g, json_t *j) {
    size_t n = 0;
    char *sse = iris_oai_sse(j, &n);
    return out_put(g, sse, n);
}

static const char *model_name(srv_gen *g) {
    return g->s->served;
}

/* The one way generated text goes out when streamed: a chunk of content, or of what the reply
 * parser makes of it (tool_calls.h iris_reply_feed): a Thinking model's delta.reasoning_content,
 * then content and delta.tool_calls (the <tool_call> markup never reaches content); nothing when
 * all of it is held back and there are no logprobs to send.  `final`: the end of the output.
 * lp is stolen. */
static int stream_text(srv_gen *g, const char *text, size_t n, json_t *lp, int final) {
    if (!g->rs.on && !g->tools) {
        if (n == 0 && !lp) return 0;
        return out_json(g, iris_oai_chunk(g->kind, g->id, g->created, model_name(g), NULL, text, n, NULL, lp,
                                          g->include_usage));
    }
    iris_reply_piece pc;
    if (iris_reply_feed(&g->rs, g->tools, text, n, final, &pc)) {
        json_decref(lp);
        return -1;
    }
    int rc = 0;
    if (pc.r.reasoning || pc.content || pc.calls || lp) {
        json_t *ch = iris_oai_chunk(g->kind, g->id, g->created, model_name(g), NULL, g->rs.on ? "" : pc.content,
                                    g->rs.on ? 0 : pc.content_len, NULL, lp, g->include_usage);
        if (g->rs.on) iris_reasoning_apply(ch, 1, pc.r.reasoning, pc.r.reasoning_len, pc.content, pc.content_len);
        if (pc.calls) iris_oai_chunk_set_tool_calls(ch, pc.calls);
        pc.calls = NULL;
        rc = out_json(g, ch);
    }
    iris_reply_piece_free(&pc);
    return rc;
}

/* Produce the next SSE bytes into g->out.  Returns 0, or -1 when the
 * stream must end with an error (client gone, out of memory). */
static int produce(srv_gen *g) {
    iris_engine *eng = atomic_load(&g->s->eng);
    if (g->phase == 0) {
        g->phase = 1;
        if (g->kind == IRIS_OAI_CHAT)
            return out_json(g, iris_oai_chunk(g->kind, g->id, g->created, model_name(g), "assistant", "", 0, NULL,
                                              NULL, g->include_usage));
    }
    if (g->phase == 2) {
        g->phase = 3;
        return out_put(g, strdup("data: [DONE]\n\n"), 14);
    }
    iris_event ev;
    int rc = iris_request_next(g->r, &ev, WAIT_MS);
    if (rc != IRIS_ELIMIT && rc) return -1;
    if ((rc || ev.kind == IRIS_EVENT_DELTA) && gen_client_gone(g)) {
        iris_request_cancel(g->r);
        return -1;
    }
    if (rc) return 0;
    const iris_tok *tok = iris_engine_model(eng)->tok;
    if (ev.kind == IRIS_EVENT_DELTA) {
        note_token(g);
        json_t *lp = g->logprobs ? event_logprobs(g, tok, &ev) : NULL;
        g->text_off += ev.text_len;
        return stream_text(g, ev.text, ev.text_len, lp, 0);
    }
    /* DONE */
    note_done(g, &ev);
    g->phase = 2;
    if (stream_text(g, ev.text, ev.text_len, NULL, 1)) return -1;
    if (ev.finish_reason == IRIS_FINISH_REASON_ERROR || ev.finish_reason == IRIS_FINISH_REASON_CANCELLED) {
        iris_oai_err e;
        if (ev.finish_reason == IRIS_FINISH_REASON_ERROR)
            iris_oai_fail(&e, 500, "server_error", NULL, NULL, "generation failed: %s", ev.err.msg);
        else
            iris_oai_fail(&e, 503, "server_error", NULL, "cancelled", "the request was cancelled (server shutdown)");
        char *body = iris_oai_error_body(&e);
        size_t n = body ? strlen(body) : 0;
        char *sse = body ? malloc(n + 9) : NULL;
        if (sse) snprintf(sse, n + 9, "data: %s\n\n", body);
        free(body);
        return out_put(g, sse, n + 8);
    }
    if (out_json(g, iris_oai_chunk(g->kind, g->id, g->created, model_name(g), NULL, g->kind == IRIS_OAI_CHAT ? NULL : "",
                                   0, finish_name(g, ev.finish_reason), NULL, g->include_usage)))
        return -1;
    if (g->include_usage)
        return out_json(g, iris_oai_usage_chunk(g->kind, g->id, g->created, model_name(g), ev.usage.prompt_tokens,
                                                ev.usage.completion_tokens));
    return 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    srv_gen *g = cls;
    while (g->out_off == g->out_n) {
        g->out_n = g->out_off = 0;
        if (g->phase == 3) return MHD_CONTENT_READER_END_OF_STREAM;
        if (produce(g)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t k = g->out_n - g->out_off;
    if (k > max) k = max;
    memcpy(buf, g->out + g->out_off, k);
    g->out_off += k;
    return (ssize_t)k;
}

static void gen_release(srv_gen *g) {
    srv_gen_unregister(g->s, g);
    iris_request_free(g->r); /* cancels it when still running */
    iris_tool_parser_free(g->tools);
    iris_metrics_inflight(g->s->metrics, -1);
    free(g->out);
}

static void stream_free(void *cls) {
    srv_gen *g = cls;
    gen_release(g);
    free(g);
}

/* ---- the whole answer at once ---- */

/* The chat.completion (or text_completion) of the whole text: a Thinking model's reasoning split
 * off (reasoning.h), then, when tool calls are parsed, the same parser as streaming fed the rest
 * at once (content before the calls, then message.tool_calls).  lpo is stolen. */
static json_t *whole_answer(srv_gen *g, const char *text, size_t n, json_t *lpo, const iris_event *ev) {
    const char *rs = NULL, *body = text ? text : "";
    size_t rn = 0, bn = n;
    if (g->rs.on) iris_reasoning_split(text ? text : "", n, &rs, &rn, &body, &bn);
    if (!body) body = "", bn = 0;
    iris_tool_delta d = {0};
    if (g->tools && iris_tool_parser_feed(g->tools, body, bn, 1, &d)) {
        json_decref(lpo);
        return NULL;
    }
    json_decref(d.calls);
    int calls = g->tools && iris_tool_parser_n_calls(g->tools) > 0;
    const char *c = calls ? d.content : body;
    size_t cn = calls ? d.content_len : bn;
    json_t *resp = iris_oai_response(g->kind, g->id, g->created, model_name(g), c, cn,
                                     finish_name(g, ev->finish_reason), lpo, ev->usage.prompt_tokens,
                                     ev->usage.completion_tokens);
    if (calls) iris_oai_response_set_tool_calls(resp, iris_tool_parser_calls(g->tools), d.content_len);
    if (g->rs.on && resp) iris_reasoning_apply(resp, 0, rs, rn, c, cn);
    return resp;
}

static enum MHD_Result collect(struct MHD_Connection *c, srv_conn *cc, srv_gen *g) {
    iris_engine *eng = atomic_load(&g->s->eng);
    const iris_tok *tok = iris_engine_model(eng)->tok;
    char *text = NULL;
    size_t n = 0, cap = 0;
    json_t *lps = NULL;
    if (g->logprobs) lps = g->kind == IRIS_OAI_CHAT ? json_array() : iris_oai_completion_logprobs_new();
    iris_event ev;
    int gone = 0;
    for (;;) {
        int rc = iris_request_next(g->r, &ev, WAIT_MS);
        if ((rc == IRIS_ELIMIT || (!rc && ev.kind == IRIS_EVENT_DELTA)) && !gone && gen_client_gone(g)) {
            gone = 1;
            iris_request_cancel(g->r);
        }
        if (rc == IRIS_ELIMIT) continue;
        if (rc) {
            memset(&ev, 0, sizeof ev);
            ev.finish_reason = IRIS_FINISH_REASON_ERROR;
            snprintf(ev.err.msg, sizeof ev.err.msg, "the engine's channel failed (%s)", iris_strerror(rc));
            break;
        }
        if (ev.kind == IRIS_EVENT_DELTA) note_token(g);
        if (ev.kind == IRIS_EVENT_DELTA && g->logprobs) {
            iris_oai_logprob lp;
            fill_logprob(tok, &ev, &lp);
            if (g->kind == IRIS_OAI_CHAT) json_array_append_new(lps, iris_oai_chat_logprob(&lp));
            else iris_oai_completion_logprob_add(lps, &lp, n);
        }
        if (ev.text_len) {
            if (n + ev.text_len + 1 > cap) {
                cap = (n + ev.text_len + 1) * 2;
                char *q = realloc(text, cap);
                if (!q) {
                    iris_request_cancel(g->r);
                    continue;
                }
                text = q;
            }
            memcpy(text + n, ev.text, ev.text_len);
            n += ev.text_len;
        }
        if (ev.kind == IRIS_EVENT_DONE) break;
    }
    if (ev.kind == IRIS_EVENT_DONE) note_done(g, &ev);
    enum MHD_Result ret;
    if (gone) {
        ret = MHD_NO; /* nobody to answer */
        json_decref(lps);
    } else if (ev.finish_reason == IRIS_FINISH_REASON_ERROR || ev.finish_reason == IRIS_FINISH_REASON_CANCELLED) {
        iris_oai_err e;
        if (ev.finish_reason == IRIS_FINISH_REASON_ERROR)
            iris_oai_fail(&e, 500, "server_error", NULL, NULL, "generation failed: %s", ev.err.msg);
        else
            iris_oai_fail(&e, 503, "server_error", NULL, "cancelled", "the request was cancelled (server shutdown)");
        json_decref(lps);
        ret = srv_reply_error(c, cc, &e, 0);
    } else {
        json_t *lpo = lps && g->kind == IRIS_OAI_CHAT ? json_pack("{s:o}", "content", lps) : lps;
        json_t *o = whole_answer(g, text, n, lpo, &ev);
        ret = srv_reply_json(c, cc, 200, o);
    }
    free(text);
    return ret;
}

/* ---- the handler ---- */

static enum MHD_Result reply(struct MHD_Connection *c, srv_conn *cc, iris_oai_err *e, iris_oai_request *q) {
    iris_oai_request_free(q);
    return srv_reply_error(c, cc, e, 0);
}

/* A chat request's prompt: its images fetched, then the one prompt builder; on failure e is the
 * client's error, naming the image_url that failed. */
static int chat_prompt(iris_server *s, iris_engine *eng, const iris_oai_request *q, int fd, iris_prompt *prompt,
                       iris_oai_err *e) {
    srv_image im[IRIS_OAI_MAX_IMAGES], vid[IRIS_OAI_MAX_VIDEOS];
    iris_prompt_image pim[IRIS_OAI_MAX_IMAGES];
    iris_prompt_video pvid[IRIS_OAI_MAX_VIDEOS];
    memset(im, 0, sizeof im);
    memset(pim, 0, sizeof pim);
    memset(vid, 0, sizeof vid);
    memset(pvid, 0, sizeof pvid);
    int bad = -1;
    if (q->n_images > 0 && !iris_engine_model(eng)->has_vision)
        return iris_oai_fail(e, 400, "invalid_request_error", "messages", "images_not_supported",
                             "the messages hold %d image(s), but this server runs the model text only (%s): send "
                             "text, or start the server without --text-only", q->n_images,
                             iris_engine_model(eng)->cfg.has_vision ? "--text-only" : "it has no vision tower");
    if (fetch_images(s, q, im, &bad, e)) {
        part_param(q->messages, "image_url", bad, e->param, sizeof e->param);
        return -1;
    }
    if (fetch_videos(s, q, vid, &bad, e)) {
        free_images(im, q->n_images);
        part_param(q->messages, "video_url", bad, e->param, sizeof e->param);
        return -1;
    }
    for (int i = 0; i < q->n_videos; i++)
        pvid[i] = (iris_prompt_video){.data = vid[i].data, .n = vid[i].n, .label = vid[i].label,
                                      .fps = q->video_fps, .max_frames = q->video_max_frames};
    int media = q->n_images > 0 || q->n_videos > 0;
    for (int i = 0; i < q->n_images; i++)
        pim[i] = (iris_prompt_image){.data = im[i].data, .n = im[i].n, .label = im[i].label};
    iris_prompt_ctx ctx;
    iris_engine_prompt_ctx(eng, &ctx);
    /* The image cap is the engine's (--max-image-pixels, for every front door); the request's is ours. */
    ctx.max_total_pixels = s->o.max_request_pixels > 0 ? s->o.max_request_pixels : 64 * ctx.max_image_pixels;
    ctx.tools = q->tools;
    ctx.no_thinking = iris_reasoning_disabled_by(q->body);
    ctx.max_video_pixels = s->o.max_video_pixels;
    iris_err err = {0};
    int rc = media ? gate_enter(s, fd) : 0;
    if (rc) {
        free_images(im, q->n_images);
        free_images(vid, q->n_videos);
        if (rc == IRIS_ELIMIT)
            return iris_oai_fail(e, 503, "server_error", NULL, "image_queue_full", "the server is busy: %d requests "
                                 "are waiting to decode images (--image-queue); retry later", s->o.image_queue);
        return iris_oai_fail(e, 499, "invalid_request_error", NULL, "client_closed", "the client went away");
    }
    rc = iris_prompt_build_media(&ctx, q->messages, pim, q->n_images, pvid, q->n_videos, prompt, &bad, &err);
    if (media) gate_leave(s);
    free_images(im, q->n_images);
    free_images(vid, q->n_videos);
    if (!rc) return 0;
    if (bad >= q->n_images) {
        iris_oai_fail(e, rc == IRIS_ENOMEM ? 500 : 400, rc == IRIS_ENOMEM ? "server_error" : "invalid_request_error",
                      NULL, "invalid_video", "%s", err.msg);
        part_param(q->messages, "video_url", bad - q->n_images, e->param, sizeof e->param);
    } else if (bad >= 0) {
        iris_oai_fail(e, 400, "invalid_request_error", NULL, "invalid_image", "%s", err.msg);
        part_param(q->messages, "image_url", bad, e->param, sizeof e->param);
    } else {
        iris_oai_fail(e, rc == IRIS_ENOMEM ? 500 : 400, rc == IRIS_ENOMEM ? "server_error" : "invalid_request_error",
                      "messages", NULL, "%s", err.msg);
    }
    return -1;
}

/* The client's error for a request the engine refused.  A prompt or max_tokens over the
 * context is the engine's check (iris.h iris_engine_submit): its message, its param. */
static void submit_error(int rc, const iris_err *err, iris_oai_kind kind, iris_oai_err *e) {
    const char *pparam = kind == IRIS_OAI_CHAT ? "messages" : "prompt";
    int context = !strcmp(err->param, "prompt") || !strcmp(err->param, "max_tokens");
    if (err->param[0] && (rc == IRIS_EINVAL || rc == IRIS_ELIMIT))
        iris_oai_fail(e, 400, "invalid_request_error", strcmp(err->param, "prompt") ? err->param : pparam,
                      context ? "context_length_exceeded" : NULL, "%s", err->msg);
    else if (rc == IRIS_ELIMIT && strstr(err->msg, "queue"))
        iris_oai_fail(e, 503, "server_error", NULL, "queue_full", "the server is busy: %s; retry later", err->msg);
    else if (rc == IRIS_ECANCELLED)
        iris_oai_fail(e, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
    else if (rc == IRIS_ENOMEM || rc == IRIS_EDEVICE || rc == IRIS_EIO)
        iris_oai_fail(e, 500, "server_error", NULL, NULL, "%s", err->msg);
    else
        iris_oai_fail(e, 400, "invalid_request_error", rc == IRIS_ELIMIT ? pparam : NULL, NULL, "%s", err->msg);
}

enum MHD_Result srv_generate(struct MHD_Connection *c, srv_conn *cc, iris_oai_kind kind) {
    iris_server *s = cc->s;
    iris_engine *eng = atomic_load(&s->eng);
    iris_request_params rp;
    iris_request_params_default(eng, &rp);
    iris_oai_request q;
    iris_oai_err e;
    /* the body's sampling parameters straight over the model's defaults */
    if (iris_oai_parse(cc->body, cc->n, kind, &rp.sampling, &q, &e)) return reply(c, cc, &e, &q);
    if (q.model && strcmp(q.model, s->served) && !(s->model_arg && !strcmp(q.model, s->model_arg))) {
        iris_oai_fail(&e, 404, "not_found_error", "model", "model_not_found",
                      "The model `%.200s` does not exist; this server serves `%.200s`.", q.model, s->served);
        return reply(c, cc, &e, &q);
    }

    /* A model that thinks: its reply is split here, and the engine starts a grammar (response_format,
     * tools, a forced call) after the reasoning, by the same iris_engine_reasoning. */
    rp.no_thinking = kind == IRIS_OAI_CHAT && iris_reasoning_disabled_by(q.body);
    int thinks = kind == IRIS_OAI_CHAT && iris_engine_reasoning(eng, rp.no_thinking);

    iris_err err = {0};
    iris_prompt *prompt = NULL;
    if (kind == IRIS_OAI_CHAT) {
        prompt = calloc(1, sizeof *prompt);
        if (!prompt) iris_oai_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!prompt || chat_prompt(s, eng, &q, ci ? ci->connect_fd : -1, prompt, &e)) {
            free(prompt);
            return reply(c, cc, &e, &q);
        }
        rp.prompt = prompt;
    } else {
        if (!*q.prompt) {
            iris_oai_fail(&e, 400, "invalid_request_error", "prompt", NULL, "'prompt' is empty");
            return reply(c, cc, &e, &q);
        }
        rp.prompt_text = q.prompt;
    }

    srv_gen local, *g = q.stream ? calloc(1, sizeof *g) : &local;
    if (!g) {
        if (prompt) iris_prompt_free(prompt);
        free(prompt);
        iris_oai_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        return reply(c, cc, &e, &q);
    }
    memset(g, 0, sizeof *g);
    g->s = s;
    g->kind = kind;
    iris_reasoning_init(&g->rs, thinks);
    g->created = (int64_t)time(NULL);
    uint64_t seq = atomic_fetch_add(&s->next_id, 1);
    snprintf(g->id, sizeof g->id, "%s%016" PRIx64 "%08" PRIx64, kind == IRIS_OAI_CHAT ? "chatcmpl-" : "cmpl-",
             s->id_salt, seq);
    g->logprobs = rp.sampling.logprobs;
    g->top_logprobs = rp.sampling.top_logprobs;
    g->include_usage = q.include_usage;
    uint64_t call_seed = s->id_salt ^ (seq * 0x9e3779b97f4a7c15ull);
    if (q.tool_mode != IRIS_OAI_TOOLS_OFF && !(g->tools = iris_tool_parser_new(call_seed))) {
        if (g != &local) free(g);
        if (prompt) iris_prompt_free(prompt);
        free(prompt);
        iris_oai_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        return reply(c, cc, &e, &q);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    g->fd = ci ? ci->connect_fd : -1;
    g->t_submit = srv_now();

    int rc = iris_engine_submit(eng, &rp, &g->r, &err);
    /* The engine takes the prompt's arrays over (zeroing our struct) once it
     * has accepted the prompt, even if a later check fails; whatever is
     * still ours is freed here. */
    if (prompt) iris_prompt_free(prompt);
    free(prompt);
    if (rc) {
        iris_tool_parser_free(g->tools);
        if (g != &local) free(g);
        submit_error(rc, &err, kind, &e);
        return reply(c, cc, &e, &q);
    }
    iris_metrics_inflight(s->metrics, +1);
    srv_gen_register(s, g);
    iris_oai_request_free(&q);

    if (g == &local) {
        enum MHD_Result ret = collect(c, cc, g);
        gen_release(g);
        return ret;
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, g, stream_free);
    if (!resp) {
        stream_free(g);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    srv_add_cors(resp, cc);
    cc->status = 200;
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}
