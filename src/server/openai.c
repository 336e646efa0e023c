/* openai.c: parsing and validating OpenAI request bodies, building response
 * bodies, SSE chunks and error bodies (see openai.h).
 *
 * Validation follows OpenAI's API reference and vLLM's extensions (top_k,
 * min_p, repetition_penalty, ignore_eos): every rejected value gives a 400 whose param
 * names it ("messages[1].content[0].image_url", "temperature") and whose
 * message says what is allowed.  JSON null means "not given" for every
 * optional field, as the official clients may send it.  Unknown fields are
 * ignored (clients send "user", "metadata", ...); fields whose meaning we
 * cannot honour (n > 1, echo, suffix) are refused rather than silently
 * ignored.  response_format json_object and json_schema become
 * iris_sampling.json_schema (the engine compiles it at submit); tools,
 * tool_choice and parallel_tool_calls are tool_calls.c's.  A null message
 * content is left out for the chat template (an assistant turn that only
 * calls tools).
 *
 * Text going out is valid UTF-8: bytes that are not (a token's partial
 * character) become U+FFFD, as OpenAI's servers do.
 */
#include "server/openai.h"
#include "server/tool_calls.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

int iris_oai_fail(iris_oai_err *e, int status, const char *type, const char *param, const char *code,
                  const char *fmt, ...) {
    if (e) {
        e->status = status;
        snprintf(e->type, sizeof e->type, "%s", type ? type : "invalid_request_error");
        snprintf(e->param, sizeof e->param, "%s", param ? param : "");
        snprintf(e->code, sizeof e->code, "%s", code ? code : "");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->message, sizeof e->message, fmt, ap);
        va_end(ap);
    }
    return status > 0 ? -status : IRIS_EINVAL;
}

#define BAD(param, ...) iris_oai_fail(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

void iris_oai_request_free(iris_oai_request *r) {
    if (!r) return;
    free(r->model);
    json_decref(r->messages);
    free(r->prompt);
    free(r->json_schema);
    json_decref(r->tools);
    free(r->tools_json);
    free(r->tool_name);
    for (int i = 0; i < r->n_images; i++) free(r->image_urls[i]);
    for (int i = 0; i < r->n_videos; i++) free(r->video_urls[i]);
    json_decref(r->body);
    memset(r, 0, sizeof *r);
}

/* ---- typed getters: 0 absent/null, 1 present, <0 error ---- */

static int get_number(json_t *o, const char *key, double lo, double hi, int lo_open, float *out, iris_oai_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return BAD(key, "'%s' must be a number", key);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi || (lo_open && d == lo))
        return BAD(key, "'%s' is %g; it must be in %s%g, %g]", key, d, lo_open ? "(" : "[", lo, hi);
    *out = (float)d;
    return 1;
}

static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, iris_oai_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return BAD(key, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return BAD(key, "'%s' is %lld; it must be in [%lld, %lld]", key, x, lo, hi);
    *out = x;
    return 1;
}

static int get_bool(json_t *o, const char *key, int *out, iris_oai_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return BAD(key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 1;
}

/* ---- messages ---- */

static int add_image(iris_oai_request *r, json_t *iu, const char *param, iris_oai_err *e) {
    const char *url = NULL;
    if (json_is_string(iu)) url = json_string_value(iu);
    else if (json_is_object(iu) && json_is_string(json_object_get(iu, "url")))
        url = json_string_value(json_object_get(iu, "url"));
    else
        return BAD(param, "'%s' must be an object {\"url\": string}", param);
    if (!*url) return BAD(param, "'%s' has an empty url", param);
    if (r->n_images >= IRIS_OAI_MAX_IMAGES)
        return BAD(param, "too many images: at most %d per request", IRIS_OAI_MAX_IMAGES);
    r->image_urls[r->n_images] = strdup(url);
    if (!r->image_urls[r->n_images]) return iris_oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    r->n_images++;
    return 0;
}

/* An assistant message's tool_calls: [{id, type "function", function: {name, arguments}}], the
 * arguments a JSON string (as the clients send them back) or an object. */
static int check_history_calls(json_t *m, size_t mi, iris_oai_err *e) {
    json_t *calls = json_object_get(m, "tool_calls");
    char p[96];
    snprintf(p, sizeof p, "messages[%zu].tool_calls", mi);
    if (!calls || json_is_null(calls)) return 0;
    if (!json_is_array(calls)) return BAD(p, "'%s' must be an array", p);
    size_t ci;
    json_t *c;
    json_array_foreach(calls, ci, c) {
        snprintf(p, sizeof p, "messages[%zu].tool_calls[%zu]", mi, ci);
        json_t *fn = json_object_get(c, "function");
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        if (!json_is_object(c) || !json_is_object(fn))
            return BAD(p, "'%s' must be an object {\"id\", \"type\": \"function\", \"function\": {\"name\", "
                          "\"arguments\"}}", p);
        if (!json_is_string(name)) return BAD(p, "'%s.function.name' must be a string", p);
        if (!json_is_string(args) && !json_is_object(args))
            return BAD(p, "'%s.function.arguments' must be a string of JSON", p);
    }
    return 0;
}

/* The messages as the chat template takes them: a null content (OpenAI's assistant turn that
 * only calls tools) left out, which the template reads as no content. */
static json_t *template_messages(json_t *msgs) {
    size_t mi;
    json_t *m;
    int nulls = 0;
    json_array_foreach(msgs, mi, m) nulls |= json_is_null(json_object_get(m, "content"));
    if (!nulls) return json_incref(msgs);
    json_t *copy = json_deep_copy(msgs);
    json_array_foreach(copy, mi, m) if (json_is_null(json_object_get(m, "content"))) json_object_del(m, "content");
    return copy;
}

/* A video_url part, as vLLM accepts it: {"url": string} or a string (data:, http(s), file://). */
static int add_video(iris_oai_request *r, json_t *vu, const char *param, iris_oai_err *e) {
    const char *url = NULL;
    if (json_is_string(vu)) url = json_string_value(vu);
    else if (json_is_object(vu) && json_is_string(json_object_get(vu, "url")))
        url = json_string_value(json_object_get(vu, "url"));
    else
        return BAD(param, "'%s' must be an object {\"url\": string}", param);
    if (!*url) return BAD(param, "'%s' has an empty url", param);
    if (r->n_videos >= IRIS_OAI_MAX_VIDEOS)
        return BAD(param, "too many videos: at most %d per request", IRIS_OAI_MAX_VIDEOS);
    if (!(r->video_urls[r->n_videos] = strdup(url)))
        return iris_oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    r->n_videos++;
    return 0;
}

/* mm_processor_kwargs (vLLM): the video sampling of this request, fps and max_frames. */
static int parse_mm_kwargs(iris_oai_request *r, json_t *body, iris_oai_err *e) {
    json_t *k = json_object_get(body, "mm_processor_kwargs");
    if (!k || json_is_null(k)) return 0;
    if (!json_is_object(k)) return BAD("mm_processor_kwargs", "'mm_processor_kwargs' must be an object");
    float fps = 0;
    long long mf = 0;
    int rc = get_number(k, "fps", 0, 1000, 1, &fps, e);
    if (rc < 0) return BAD("mm_processor_kwargs.fps", "'mm_processor_kwargs.fps' must be a number in (0, 1000]");
    if (rc > 0) r->video_fps = fps;
    rc = get_int(k, "max_frames", 2, 100000, &mf, e);
    if (rc < 0)
        return BAD("mm_processor_kwargs.max_frames", "'mm_processor_kwargs.max_frames' must be an integer in "
                   "[2, 100000]");
    if (rc > 0) r->video_max_frames = (int)mf;
    return 0;
}

static int check_messages(iris_oai_request *r, json_t *msgs, iris_oai_err *e) {
    if (!msgs || json_is_null(msgs)) return BAD("messages", "'messages' is required");
    if (!json_is_array(msgs)) return BAD("messages", "'messages' must be an array of message objects");
    if (json_array_size(msgs) == 0) return BAD("messages", "'messages' is empty");
    static const char *roles[] = {"system", "developer", "user", "assistant", "tool"};
    char p[96];
    size_t mi;
    json_t *m;
    json_array_foreach(msgs, mi, m) {
        snprintf(p, sizeof p, "messages[%zu]", mi);
        if (!json_is_object(m)) return BAD(p, "'%s' must be an object", p);
        json_t *role = json_object_get(m, "role");
        snprintf(p, sizeof p, "messages[%zu].role", mi);
        if (!json_is_string(role)) return BAD(p, "'%s' must be a string", p);
        int known = 0;
        for (size_t k = 0; k < sizeof roles / sizeof *roles; k++) known |= !strcmp(json_string_value(role), roles[k]);
        if (!known)
            return BAD(p, "'%s' is \"%.40s\"; it must be system, developer, user, assistant or tool", p,
                       json_string_value(role));
        if (!strcmp(json_string_value(role), "assistant")) {
            int rc = check_history_calls(m, mi, e);
            if (rc) return rc;
        }
        json_t *c = json_object_get(m, "content");
        snprintf(p, sizeof p, "messages[%zu].content", mi);
        if (!c || json_is_null(c) || json_is_string(c)) continue;
        if (!json_is_array(c)) return BAD(p, "'%s' must be a string or an array of content parts", p);
        size_t pi;
        json_t *part;
        json_array_foreach(c, pi, part) {
            snprintf(p, sizeof p, "messages[%zu].content[%zu]", mi, pi);
            if (!json_is_object(part)) return BAD(p, "'%s' must be an object", p);
            const char *type = json_string_value(json_object_get(part, "type"));
            if (!type) return BAD(p, "'%s.type' must be a string", p);
            if (!strcmp(type, "text")) {
                if (!json_is_string(json_object_get(part, "text")))
                    return BAD(p, "'%s.text' must be a string", p);
            } else if (!strcmp(type, "image_url")) {
                size_t n = strlen(p);
                snprintf(p + n, sizeof p - n, ".image_url");
                int rc = add_image(r, json_object_get(part, "image_url"), p, e);
                if (rc) return rc;
            } else if (!strcmp(type, "video_url")) {
                size_t n = strlen(p);
                snprintf(p + n, sizeof p - n, ".video_url");
                int rc = add_video(r, json_object_get(part, "video_url"), p, e);
                if (rc) return rc;
            } else {
                return BAD(p, "content part type \"%.40s\" is not supported (text, image_url, video_url)", type);
            }
        }
    }
    return 0;
}

/* ---- the request ---- */

static int parse_stop(iris_sampling *s, json_t *v, iris_oai_err *e) {
    if (!v || json_is_null(v)) return 0;
    json_t *one[1] = {v};
    size_t n = 1;
    if (json_is_array(v)) n = json_array_size(v);
    else if (!json_is_string(v)) return BAD("stop", "'stop' must be a string or an array of strings");
    if (n > IRIS_OAI_MAX_STOP) return BAD("stop", "'stop' has %zu strings; at most %d", n, IRIS_OAI_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *str = json_is_array(v) ? json_array_get(v, i) : one[0];
        if (!json_is_string(str)) return BAD("stop", "'stop[%zu]' must be a string", i);
        if (json_string_length(str) == 0) return BAD("stop", "'stop' strings must not be empty");
        s->stop[s->n_stop++] = json_string_value(str);
    }
    return 0;
}

/* The sampling fields of body o, each written over its default when given. */
static int parse_sampling(json_t *o, iris_oai_kind kind, iris_sampling *s, iris_oai_err *e) {
    long long x;
    int rc;
    /* max_completion_tokens replaces max_tokens in OpenAI's chat API; when
     * both are given the newer name wins. */
    if ((rc = get_int(o, "max_tokens", 1, 1 << 30, &x, e)) < 0) return rc;
    if (rc) s->max_tokens = (int)x;
    if ((rc = get_int(o, "max_completion_tokens", 1, 1 << 30, &x, e)) < 0) return rc;
    if (rc) s->max_tokens = (int)x;
    if ((rc = get_number(o, "temperature", 0, 2, 0, &s->temperature, e)) < 0) return rc;
    if (rc) s->do_sample = s->temperature > 0;
    if ((rc = get_number(o, "top_p", 0, 1, 1, &s->top_p, e)) < 0) return rc;
    if ((rc = get_int(o, "top_k", -1, 1 << 30, &x, e)) < 0) return rc;
    if (rc) s->top_k = x < 0 ? 0 : (int)x;
    if ((rc = get_number(o, "min_p", 0, 1, 0, &s->min_p, e)) < 0) return rc;
    if ((rc = get_number(o, "presence_penalty", -2, 2, 0, &s->presence_penalty, e)) < 0) return rc;
    if ((rc = get_number(o, "frequency_penalty", -2, 2, 0, &s->frequency_penalty, e)) < 0) return rc;
    if ((rc = get_number(o, "repetition_penalty", 0, 100, 1, &s->repetition_penalty, e)) < 0) return rc;
    if ((rc = get_int(o, "seed", INT64_MIN, INT64_MAX, &x, e)) < 0) return rc;
    if (rc) s->seed = x < 0 ? (int64_t)((uint64_t)x & INT64_MAX) : x;
    if ((rc = parse_stop(s, json_object_get(o, "stop"), e))) return rc;
    if (kind == IRIS_OAI_CHAT) {
        if ((rc = get_bool(o, "logprobs", &s->logprobs, e)) < 0) return rc;
        if ((rc = get_int(o, "top_logprobs", 0, IRIS_OAI_MAX_TOP_LOGPROBS, &x, e)) < 0) return rc;
        if (rc) {
            if (!s->logprobs) return BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
            s->top_logprobs = (int)x;
        }
    } else {
        if ((rc = get_int(o, "logprobs", 0, IRIS_OAI_MAX_TOP_LOGPROBS, &x, e)) < 0) return rc;
        if (rc) {
            s->logprobs = 1;
            s->top_logprobs = (int)x;
        }
    }
    if ((rc = get_bool(o, "ignore_eos", &s->ignore_eos, e)) < 0) return rc;
    return 0;
}

static int parse_prompt(iris_oai_request *r, json_t *v, iris_oai_err *e) {
    if (!v || json_is_null(v)) return BAD("prompt", "'prompt' is required");
    if (json_is_array(v)) {
        if (json_array_size(v) != 1 || !json_is_string(json_array_get(v, 0)))
            return BAD("prompt", "'prompt' must be a string (or a list of exactly one string)");
        v = json_array_get(v, 0);
    }
    if (!json_is_string(v)) return BAD("prompt", "'prompt' must be a string");
    r->prompt = strdup(json_string_value(v));
    if (!r->prompt) return iris_oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

/* response_format: "text"; "json_object" (any JSON object); "json_schema" with json_schema
 * {name, schema, strict, description}.  The schema itself is compiled at submit (engine_req.c),
 * whose refusal names the keyword (param "response_format"). */
static int parse_response_format(json_t *o, iris_oai_request *r, iris_sampling *s, iris_oai_err *e) {
    json_t *v = json_object_get(o, "response_format");
    if (!v || json_is_null(v)) return 0;
    const char *t = json_string_value(json_object_get(v, "type"));
    if (!json_is_object(v) || !t)
        return BAD("response_format", "'response_format' must be an object with a 'type' (\"text\", "
                                      "\"json_object\" or \"json_schema\")");
    if (!strcmp(t, "text")) return 0;
    if (!strcmp(t, "json_object")) {
        r->json_schema = strdup("{\"type\":\"object\"}");
    } else if (!strcmp(t, "json_schema")) {
        json_t *js = json_object_get(v, "json_schema");
        if (!json_is_object(js))
            return BAD("response_format.json_schema", "'response_format.json_schema' must be an object with "
                                                      "'name' and 'schema'");
        json_t *name = json_object_get(js, "name"), *schema = json_object_get(js, "schema");
        json_t *strict = json_object_get(js, "strict");
        if (!json_is_string(name) || json_string_length(name) == 0 || json_string_length(name) > 64 ||
            strspn(json_string_value(name), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
                json_string_length(name))
            return BAD("response_format.json_schema.name", "'response_format.json_schema.name' must be 1 to 64 "
                                                           "characters of a-z, A-Z, 0-9, _ and -");
        if (!json_is_object(schema) && !json_is_boolean(schema))
            return BAD("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON "
                                                             "Schema object");
        if (strict && !json_is_null(strict) && !json_is_boolean(strict))
            return BAD("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a "
                                                             "boolean");
        r->json_schema = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    } else {
        return BAD("response_format.type", "'response_format.type' \"%s\" is not one of \"text\", "
                                           "\"json_object\", \"json_schema\"", t);
    }
    if (!r->json_schema) return iris_oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    s->json_schema = r->json_schema;
    return 0;
}

static int refuse_unsupported(json_t *o, iris_oai_kind kind, iris_oai_err *e) {
    json_t *v;
    if (kind == IRIS_OAI_COMPLETION) {
        if (json_is_true(json_object_get(o, "echo"))) return BAD("echo", "'echo' is not supported");
        if ((v = json_object_get(o, "suffix")) && !json_is_null(v)) return BAD("suffix", "'suffix' is not supported");
    }
    long long n = 1;
    int rc = get_int(o, "n", LLONG_MIN, LLONG_MAX, &n, e);
    if (rc < 0) return rc;
    if (n != 1) {
        json_t *t = json_object_get(o, "tools");
        return BAD("n", "'n' is %lld; only n = 1 is supported%s", n,
                   json_is_array(t) && json_array_size(t) ? " (with tools as without)" : "");
    }
    if ((rc = get_int(o, "best_of", LLONG_MIN, LLONG_MAX, &n, e)) < 0) return rc;
    if (rc && n != 1) return BAD("best_of", "'best_of' is %lld; only 1 is supported", n);
    return 0;
}

int iris_oai_parse(const char *body, size_t len, iris_oai_kind kind, iris_sampling *sampling, iris_oai_request *r,
                   iris_oai_err *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    json_error_t je;
    json_t *o = json_loadb(body ? body : "", len, 0, &je);
    if (!o)
        return BAD(NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    r->body = o;
    int rc = 0;
    if (!json_is_object(o)) {
        rc = BAD(NULL, "the body must be a JSON object");
        goto out;
    }
    if ((rc = refuse_unsupported(o, kind, e))) goto out;

    json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) {
            rc = BAD("model", "'model' must be a string");
            goto out;
        }
        if (!(r->model = strdup(json_string_value(model)))) {
            rc = iris_oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
            goto out;
        }
    }
    if (kind == IRIS_OAI_CHAT) {
        if ((rc = check_messages(r, json_object_get(o, "messages"), e))) goto out;
        if ((rc = parse_mm_kwargs(r, o, e))) goto out;
        if (!(r->messages = template_messages(json_object_get(o, "messages")))) {
            rc = iris_oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
            goto out;
        }
    } else if ((rc = parse_prompt(r, json_object_get(o, "prompt"), e))) {
        goto out;
    }

    if ((rc = parse_sampling(o, kind, sampling, e))) goto out;
    if ((rc = parse_response_format(o, r, sampling, e))) goto out;
    if ((rc = iris_oai_parse_tools(o, r, sampling, e))) goto out;
    if ((rc = get_bool(o, "stream", &r->stream, e)) < 0) goto out;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!r->stream) {
            rc = BAD("stream_options", "'stream_options' is only allowed when 'stream' is true");
            goto out;
        }
        if (!json_is_object(so)) {
            rc = BAD("stream_options", "'stream_options' must be an object");
            goto out;
        }
        int iu = 0;
        if ((rc = get_bool(so, "include_usage", &iu, e)) < 0) {
            snprintf(e->param, sizeof e->param, "stream_options.include_usage");
            goto out;
        }
        r->include_usage = iu;
    }
    rc = 0;
out:
    return rc;
}

/* ---- responses ---- */

/* A JSON string of (s, n), invalid UTF-8 replaced by U+FFFD. */
static json_t *ustr(const char *s, size_t n) {
    if (!s) s = "", n = 0;
    json_t *j = json_stringn(s, n);
    if (j) return j;
    char *buf = malloc(n * 3 + 1);
    if (!buf) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(buf + o, s + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        }
    }
    j = json_stringn(buf, o);
    free(buf);
    return j;
}

char *iris_oai_error_body(const iris_oai_err *e) {
    json_t *err = json_pack("{s:o, s:s, s:o, s:o}", "message", ustr(e->message, strlen(e->message)), "type",
                            e->type[0] ? e->type : "invalid_request_error", "param",
                            e->param[0] ? json_string(e->param) : json_null(), "code",
                            e->code[0] ? json_string(e->code) : json_null());
    json_t *j = json_pack("{s:o}", "error", err);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

static json_t *bytes_array(const char *s, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

json_t *iris_oai_chat_logprob(const iris_oai_logprob *lp) {
    json_t *top = json_array();
    for (int i = 0; i < lp->n_top; i++)
        json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", ustr(lp->top_tokens[i], lp->top_lens[i]),
                                             "logprob", (double)lp->top_logprobs[i], "bytes",
                                             bytes_array(lp->top_tokens[i], lp->top_lens[i])));
    return json_pack("{s:o, s:f, s:o, s:o}", "token", ustr(lp->token, lp->token_len), "logprob", (double)lp->logprob,
                     "bytes", bytes_array(lp->token, lp->token_len), "top_logprobs", top);
}

json_t *iris_oai_completion_logprobs_new(void) {
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

void iris_oai_completion_logprob_add(json_t *o, const iris_oai_logprob *lp, size_t text_offset) {
    json_array_append_new(json_object_get(o, "tokens"), ustr(lp->token, lp->token_len));
    json_array_append_new(json_object_get(o, "token_logprobs"), json_real(lp->logprob));
    json_t *top = json_object();
    for (int i = 0; i < lp->n_top; i++) {
        json_t *k = ustr(lp->top_tokens[i], lp->top_lens[i]);
        if (k) json_object_set_new(top, json_string_value(k), json_real(lp->top_logprobs[i]));
        json_decref(k);
    }
    json_array_append_new(json_object_get(o, "top_logprobs"), top);
    json_array_append_new(json_object_get(o, "text_offset"), json_integer((json_int_t)text_offset));
}

static json_t *usage(int prompt_tokens, int completion_tokens) {
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", prompt_tokens, "completion_tokens", completion_tokens,
                     "total_tokens", prompt_tokens + completion_tokens);
}

json_t *iris_oai_response(iris_oai_kind kind, const char *id, int64_t created, const char *model, const char *text,
                          size_t text_len, const char *finish, json_t *logprobs, int prompt_tokens,
                          int completion_tokens) {
    json_t *choice;
    if (kind == IRIS_OAI_CHAT)
        choice = json_pack("{s:i, s:{s:s, s:o}, s:o, s:s}", "index", 0, "message", "role", "assistant", "content",
                           ustr(text, text_len), "logprobs", logprobs ? logprobs : json_null(), "finish_reason",
                           finish ? finish : "stop");
    else
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "text", ustr(text, text_len), "logprobs",
                           logprobs ? logprobs : json_null(), "finish_reason", finish ? finish : "stop");
    return json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", id, "object",
                     kind == IRIS_OAI_CHAT ? "chat.completion" : "text_completion", "created", (json_int_t)created,
                     "model", model, "choices", choice, "usage", usage(prompt_tokens, completion_tokens));
}

json_t *iris_oai_chunk(iris_oai_kind kind, const char *id, int64_t created, const char *model, const char *role,
                       const char *text, size_t text_len, const char *finish, json_t *logprobs, int usage_null) {
    json_t *choice = json_pack("{s:i}", "index", 0);
    if (kind == IRIS_OAI_CHAT) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string(role));
        if (text) json_object_set_new(delta, "content", ustr(text, text_len));
        json_object_set_new(choice, "delta", delta);
    } else {
        json_object_set_new(choice, "text", ustr(text ? text : "", text ? text_len : 0));
    }
    json_object_set_new(choice, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", id, "object",
                          kind == IRIS_OAI_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)created, "model", model, "choices", choice);
    if (j && usage_null) json_object_set_new(j, "usage", json_null());
    return j;
}

json_t *iris_oai_usage_chunk(iris_oai_kind kind, const char *id, int64_t created, const char *model,
                             int prompt_tokens, int completion_tokens) {
    return json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", id, "object",
                     kind == IRIS_OAI_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)created, "model", model, "choices", "usage",
                     usage(prompt_tokens, completion_tokens));
}

char *iris_oai_sse(json_t *j, size_t *len) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) return NULL;
    size_t n = strlen(s);
    char *out = malloc(n + 9);
    if (out) {
        memcpy(out, "data: ", 6);
        memcpy(out + 6, s, n);
        memcpy(out + 6 + n, "\n\n", 3);
        if (len) *len = n + 8;
    }
    free(s);
    return out;
}
