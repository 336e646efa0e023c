/* chat.c: the chat template of Qwen3-VL-2B/4B-Instruct in C.
 *
 * The template reproduced is the Jinja text of Qwen's chat_template.json for
 * Qwen3-VL-*-Instruct (5,292 bytes, SHA-256 3636d0f0bd6b...291a489e4; kept
 * verbatim in tests/fixtures/chat/qwen3vl_instruct_chat_template.jinja),
 * as transformers renders it (trim_blocks, lstrip_blocks; its tojson is
 * Python's json.dumps with ensure_ascii=False).  Not the Thinking variant
 * (whose generation prompt ends in "<think>\n") and not Qwen2-VL's (which
 * injects a default system prompt).  Every branch below names the template
 * lines it stands for; tests/test_chat.c checks the output against
 * transformers' on the conversations in tests/fixtures/chat/.
 *
 * Tools: given, they open the prompt with a system turn listing them (the
 * system message's text first), each as `tool | tojson`; assistant
 * tool_calls render as <tool_call>\n{"name": .., "arguments": ..}\n</tool_call>
 * (string arguments verbatim, others through tojson), and consecutive
 * "tool" messages share one user turn of <tool_response> blocks.
 *
 * Template behaviour kept on purpose, odd as some of it is:
 *   - only messages[0] may be a system message; a later one is dropped, and
 *     so is any message whose role is not user/assistant/tool;
 *   - in a system message only parts with a "text" key count (no images);
 *   - a part is an image when its type is "image" or it has an "image" or
 *     "image_url" key; else a video when type "video" or a "video" key (or,
 *     as vLLM maps OpenAI's parts, type "video_url" or a "video_url" key);
 *     else its "text" if it has one; anything else renders nothing;
 *   - no newline between an image block and the text after it.
 * Where the template would render Python reprs of odd values (a non-string
 * text, a non-object part) we refuse with IRIS_EINVAL instead.
 */
#include "chat.h"
#include "chat_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "sbuf.h"

/* Jinja truthiness of a JSON value (missing = Undefined = false). */
static int truthy(const json_t *v) {
    if (!v || json_is_null(v) || json_is_false(v)) return 0;
    if (json_is_string(v)) return json_string_length(v) > 0;
    if (json_is_array(v)) return json_array_size(v) > 0;
    if (json_is_object(v)) return json_object_size(v) > 0;
    if (json_is_integer(v)) return json_integer_value(v) != 0;
    if (json_is_real(v)) return json_real_value(v) != 0.0;
    return 1;
}

/* ---- tojson: Python's json.dumps(x, ensure_ascii=False) ----------------- */

static void dump_string(iris_sbuf *b, const char *s, size_t n) {
    iris_sbuf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        switch (c) {
        case '"': iris_sbuf_puts(b, "\\\""); break;
        case '\\': iris_sbuf_puts(b, "\\\\"); break;
        case '\n': iris_sbuf_puts(b, "\\n"); break;
        case '\r': iris_sbuf_puts(b, "\\r"); break;
        case '\t': iris_sbuf_puts(b, "\\t"); break;
        case '\b': iris_sbuf_puts(b, "\\b"); break;
        case '\f': iris_sbuf_puts(b, "\\f"); break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                iris_sbuf_puts(b, esc);
            } else {
                iris_sbuf_put(b, (const char *)&s[i], 1);
            }
        }
    }
    iris_sbuf_put(b, "\"", 1);
}

/* Python's float repr: the shortest digits that round-trip, positional for
 * exponents -4..15, else d.ddde+XX. */
static void dump_real(iris_sbuf *b, double v) {
    char digits[40], out[64];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(digits, sizeof digits, "%.*e", p - 1, v);
        if (strtod(digits, NULL) == v) break;
    }
    /* digits: [-]d[.ddd]e[+-]XX */
    char *e = strchr(digits, 'e');
    int exp = atoi(e + 1);
    *e = 0;
    const char *m = digits;
    int neg = *m == '-';
    if (neg) m++;
    char mant[24];
    size_t nm = 0;
    for (const char *q = m; *q; q++)
        if (*q != '.') mant[nm++] = *q;
    mant[nm] = 0;
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            o += (size_t)snprintf(out + o, sizeof out - o, "0.");
            for (int k = 0; k < -exp - 1; k++) out[o++] = '0';
            o += (size_t)snprintf(out + o, sizeof out - o, "%s", mant);
        } else {
            for (int k = 0; k <= exp; k++) out[o++] = (size_t)k < nm ? mant[k] : '0';
            out[o++] = '.';
            if ((size_t)exp + 1 < nm) o += (size_t)snprintf(out + o, sizeof out - o, "%s", mant + exp + 1);
            else out[o++] = '0';
        }
        out[o] = 0;
    } else {
        out[o++] = mant[0];
        if (nm > 1) {
            out[o++] = '.';
            memcpy(out + o, mant + 1, nm - 1);
            o += nm - 1;
        }
        snprintf(out + o, sizeof out - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    iris_sbuf_puts(b, out);
}

static void dump_json(iris_sbuf *b, const json_t *v) {
    char num[32];
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        int first = 1;
        iris_sbuf_put(b, "{", 1);
        json_object_foreach((json_t *)v, k, x) {
            if (!first) iris_sbuf_puts(b, ", ");
            first = 0;
            dump_string(b, k, strlen(k));
            iris_sbuf_puts(b, ": ");
            dump_json(b, x);
        }
        iris_sbuf_put(b, "}", 1);
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        iris_sbuf_put(b, "[", 1);
        json_array_foreach((json_t *)v, i, x) {
            if (i) iris_sbuf_puts(b, ", ");
            dump_json(b, x);
        }
        iris_sbuf_put(b, "]", 1);
    } else if (json_is_string(v)) {
        dump_string(b, json_string_value(v), json_string_length(v));
    } else if (json_is_integer(v)) {
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
        iris_sbuf_puts(b, num);
    } else if (json_is_real(v)) {
        dump_real(b, json_real_value(v));
    } else if (json_is_true(v)) {
        iris_sbuf_puts(b, "true");
    } else if (json_is_false(v)) {
        iris_sbuf_puts(b, "false");
    } else {
        iris_sbuf_puts(b, "null");
    }
}

/* ---- the template ------------------------------------------------------- */

typedef struct render {
    iris_sbuf out;
    const iris_chat_opts *opts;
    int n_images, n_videos;
} render;

/* `{{- x.text }}`: text must be a string here (see the file comment). */
static int put_text(render *r, const json_t *text, size_t mi, size_t pi, iris_err *err) {
    if (!json_is_string(text))
        return iris_err_set(err, IRIS_EINVAL, "message %zu, content part %zu: \"text\" must be a string", mi, pi);
    iris_sbuf_put(&r->out, json_string_value(text), json_string_length(text));
    return 0;
}

static int is_image_part(const json_t *p) {
    const char *type = json_string_value(json_object_get(p, "type"));
    return (type && !strcmp(type, "image")) || json_object_get(p, "image") || json_object_get(p, "image_url");
}

static int is_video_part(const json_t *p) {
    const char *type = json_string_value(json_object_get(p, "type"));
    return (type && (!strcmp(type, "video") || !strcmp(type, "video_url"))) || json_object_get(p, "video") ||
           json_object_get(p, "video_url");
}

/* The loop over a message's content parts shared by user and tool turns:
 *   image -> ['Picture N: '] <|vision_start|><|image_pad|><|vision_end|>
 *   video -> ['Video N: ']   <|vision_start|><|video_pad|><|vision_end|>
 *   'text' in part -> part.text */
static int put_content(render *r, const json_t *content, size_t mi, int text_only, iris_err *err) {
    if (!content) return 0; /* Undefined: the for loop renders nothing */
    if (json_is_null(content)) /* None: `for x in None` raises */
        return iris_err_set(err, IRIS_EINVAL, "message %zu: \"content\" is null; leave it out or give a string", mi);
    if (json_is_string(content)) {
        iris_sbuf_put(&r->out, json_string_value(content), json_string_length(content));
        return 0;
    }
    if (!json_is_array(content))
        return iris_err_set(err, IRIS_EINVAL, "message %zu: \"content\" must be a string or an array of parts", mi);
    size_t pi;
    json_t *p;
    json_array_foreach((json_t *)content, pi, p) {
        if (!json_is_object(p))
            return iris_err_set(err, IRIS_EINVAL, "message %zu, content part %zu is not an object", mi, pi);
        char label[48];
        if (!text_only && is_image_part(p)) {
            r->n_images++;
            if (r->opts->add_vision_id) {
                snprintf(label, sizeof label, "Picture %d: ", r->n_images);
                iris_sbuf_puts(&r->out, label);
            }
            iris_sbuf_puts(&r->out, "<|vision_start|><|image_pad|><|vision_end|>");
        } else if (!text_only && is_video_part(p)) {
            r->n_videos++;
            if (r->opts->add_vision_id) {
                snprintf(label, sizeof label, "Video %d: ", r->n_videos);
                iris_sbuf_puts(&r->out, label);
            }
            iris_sbuf_puts(&r->out, "<|vision_start|><|video_pad|><|vision_end|>");
        } else if (json_object_get(p, "text")) {
            int rc = put_text(r, json_object_get(p, "text"), mi, pi, err);
            if (rc) return rc;
        }
    }
    return 0;
}

/* {%- if message.tool_calls %} ... {%- endif %} of an assistant turn (chat_internal.h). */
int iris_chat_put_tool_calls(iris_sbuf *b, const json_t *m, size_t mi, int has_content, iris_err *err) {
    const json_t *calls = json_object_get(m, "tool_calls");
    if (!truthy(calls)) return 0;
    if (!json_is_array(calls)) return iris_err_set(err, IRIS_EINVAL, "message %zu: \"tool_calls\" must be an array", mi);
    size_t ci;
    json_t *call;
    json_array_foreach((json_t *)calls, ci, call) {
        if (!json_is_object(call))
            return iris_err_set(err, IRIS_EINVAL, "message %zu, tool call %zu is not an object", mi, ci);
        if ((ci == 0 && has_content) || ci > 0) iris_sbuf_puts(b, "\n");
        const json_t *fn = json_object_get(call, "function");
        if (truthy(fn)) call = (json_t *)fn;
        if (!json_is_object(call))
            return iris_err_set(err, IRIS_EINVAL, "message %zu, tool call %zu: \"function\" is not an object", mi, ci);
        const json_t *name = json_object_get(call, "name"), *args = json_object_get(call, "arguments");
        if (name && !json_is_string(name))
            return iris_err_set(err, IRIS_EINVAL, "message %zu, tool call %zu: \"name\" must be a string", mi, ci);
        if (!args)
            return iris_err_set(err, IRIS_EINVAL, "message %zu, tool call %zu has no \"arguments\"", mi, ci);
        iris_sbuf_puts(b, "<tool_call>\n{\"name\": \"");
        if (name) iris_sbuf_put(b, json_string_value(name), json_string_length(name));
        iris_sbuf_puts(b, "\", \"arguments\": ");
        if (json_is_string(args)) iris_sbuf_put(b, json_string_value(args), json_string_length(args));
        else dump_json(b, args);
        iris_sbuf_puts(b, "}\n</tool_call>");
    }
    return 0;
}

static const char *role_of(const json_t *m) { return json_string_value(json_object_get(m, "role")); }

/* {%- if tools %}: the system turn that lists the tools, messages[0]'s text first when it is a
 * system message, then the tools block every template shares (iris_chat_put_tools). */
static int put_tools(render *r, const json_t *tools, const json_t *first, iris_err *err) {
    iris_sbuf_puts(&r->out, "<|im_start|>system\n");
    const char *role0 = role_of(first);
    if (role0 && !strcmp(role0, "system")) {
        int rc = put_content(r, json_object_get(first, "content"), 0, 1, err);
        if (rc) return rc;
        iris_sbuf_puts(&r->out, "\n\n");
    }
    iris_chat_put_tools(&r->out, tools);
    return 0;
}

void iris_chat_put_tools(iris_sbuf *b, const json_t *tools) {
    iris_sbuf_puts(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
                   "with function signatures within <tools></tools> XML tags:\n<tools>");
    size_t i;
    json_t *t;
    json_array_foreach((json_t *)tools, i, t) {
        iris_sbuf_puts(b, "\n");
        dump_json(b, t);
    }
    iris_sbuf_puts(b, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                   "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                   "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
}

int iris_chat_render(const json_t *messages, const json_t *tools, const iris_chat_opts *opts, char **out,
                     size_t *out_len, iris_chat_info *info, iris_err *err) {
    *out = NULL;
    static const iris_chat_opts defaults = {0};
    if (!opts) opts = &defaults;
    if (opts->style != IRIS_CHAT_QWEN3VL) return iris_chat_render_qwen3(messages, tools, opts, out, out_len, info, err);
    if (tools && json_is_null(tools)) tools = NULL;
    if (tools && !json_is_array(tools)) return iris_err_set(err, IRIS_EINVAL, "\"tools\" must be an array");
    if (tools && json_array_size(tools) == 0) tools = NULL; /* an empty list is false */
    if (!json_is_array(messages)) return iris_err_set(err, IRIS_EINVAL, "\"messages\" must be an array");
    /* The template reads messages[0].role first: an empty list fails there. */
    if (json_array_size(messages) == 0) return iris_err_set(err, IRIS_EINVAL, "\"messages\" is empty");
    size_t mi, n = json_array_size(messages);
    json_t *m;
    json_array_foreach((json_t *)messages, mi, m)
        if (!json_is_object(m)) return iris_err_set(err, IRIS_EINVAL, "message %zu is not an object", mi);

    render r = {.opts = opts};
    int rc = 0;
    /* {%- if tools %} the tools' system turn (put_tools), else {%- if messages[0].role == 'system' %}
     * '<|im_start|>system\n' + text parts + '<|im_end|>\n' */
    const json_t *first = json_array_get(messages, 0);
    const char *role0 = role_of(first);
    if (tools) {
        rc = put_tools(&r, tools, first, err);
    } else if (role0 && !strcmp(role0, "system")) {
        iris_sbuf_puts(&r.out, "<|im_start|>system\n");
        rc = put_content(&r, json_object_get(first, "content"), 0, 1, err);
        iris_sbuf_puts(&r.out, "<|im_end|>\n");
    }
    for (mi = 0; mi < n && !rc; mi++) {
        m = json_array_get(messages, mi);
        const char *role = role_of(m);
        const json_t *content = json_object_get(m, "content");
        if (!role) continue;
        if (!strcmp(role, "user")) {
            iris_sbuf_puts(&r.out, "<|im_start|>user\n");
            rc = put_content(&r, content, mi, 0, err);
            iris_sbuf_puts(&r.out, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            /* Assistant content: text parts only. */
            iris_sbuf_puts(&r.out, "<|im_start|>assistant\n");
            rc = put_content(&r, content, mi, 1, err);
            if (!rc) rc = iris_chat_put_tool_calls(&r.out, m, mi, truthy(content), err);
            iris_sbuf_puts(&r.out, "<|im_end|>\n");
        } else if (!strcmp(role, "tool")) {
            /* Consecutive tool turns share one user turn. */
            const char *prev = mi > 0 ? role_of(json_array_get(messages, mi - 1)) : NULL;
            const char *next = mi + 1 < n ? role_of(json_array_get(messages, mi + 1)) : NULL;
            if (mi == 0 || !prev || strcmp(prev, "tool")) iris_sbuf_puts(&r.out, "<|im_start|>user");
            iris_sbuf_puts(&r.out, "\n<tool_response>\n");
            rc = put_content(&r, content, mi, 0, err);
            iris_sbuf_puts(&r.out, "\n</tool_response>");
            if (mi + 1 == n || !next || strcmp(next, "tool")) iris_sbuf_puts(&r.out, "<|im_end|>\n");
        }
        /* system (handled above when first) and other roles render nothing. */
    }
    if (!rc && opts->add_generation_prompt) iris_sbuf_puts(&r.out, "<|im_start|>assistant\n");
    if (!rc && r.out.oom) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory rendering the chat");
    if (!rc && !r.out.p) iris_sbuf_puts(&r.out, "");
    if (rc) {
        free(r.out.p);
        return rc;
    }
    *out = r.out.p;
    if (out_len) *out_len = r.out.n;
    if (info) {
        info->n_images = r.n_images;
        info->n_videos = r.n_videos;
    }
    return 0;
}

int iris_chat_tokenize(const iris_tok *tok, const char *prompt, size_t len, const int32_t *image_tokens,
                       size_t n_images, iris_tok_ids *out, iris_err *err) {
    int32_t pad = iris_tok_find(tok, "<|image_pad|>"), vpad = iris_tok_find(tok, "<|video_pad|>");
    iris_tok_ids ids = {0};
    int rc = iris_tok_encode(tok, prompt, len, &ids, err);
    size_t k = 0, first = out->n;
    for (size_t i = 0; i < ids.n && !rc; i++) {
        if ((ids.ids[i] == pad && pad >= 0) || (ids.ids[i] == vpad && vpad >= 0)) {
            if (k >= n_images) {
                rc = iris_err_set(err, IRIS_EINVAL, "the prompt holds more image pads than the %zu images given",
                                  n_images);
                break;
            }
            if (image_tokens[k] <= 0) {
                rc = iris_err_set(err, IRIS_EINVAL, "image %zu: token count %d must be positive", k,
                                  (int)image_tokens[k]);
                break;
            }
            for (int32_t j = 0; j < image_tokens[k] && !rc; j++) rc = iris_tok_ids_push(out, ids.ids[i], err);
            k++;
        } else {
            rc = iris_tok_ids_push(out, ids.ids[i], err);
        }
    }
    if (!rc && k != n_images)
        rc = iris_err_set(err, IRIS_EINVAL, "%zu images given but the prompt holds %zu image pads", n_images, k);
    if (rc) out->n = first;
    iris_tok_ids_free(&ids);
    return rc;
}
