/* chat_qwen3.c: the chat templates of the Qwen3 family that think, rendered in C (chat.h).
 *
 * Three templates, each kept verbatim under tests/fixtures/chat/ and checked against
 * transformers' apply_chat_template by tests/test_chat_qwen3.c:
 *   - IRIS_CHAT_QWEN3VL_THINKING: Qwen3-VL-*-Thinking's chat_template.json
 *     (qwen3vl_thinking_chat_template.jinja): content through its render_content macro
 *     (images and videos in every role, the system message too), the generation prompt
 *     "<|im_start|>assistant\n<think>\n";
 *   - IRIS_CHAT_QWEN3: plain Qwen3's tokenizer_config template (qwen3_chat_template.jinja):
 *     string content only (a list renders as ''), enable_thinking=False closes an empty
 *     think block in the generation prompt;
 *   - IRIS_CHAT_QWEN3_THINKING: the same with the generation prompt opening <think>
 *     (Qwen3-*-Thinking-2507).
 * What they share and Qwen3-VL-Instruct's template (chat.c) does not: an assistant turn after the
 * last real user query shows its reasoning ("<think>\nR\n</think>\n\n" + content), taken from
 * reasoning_content or split off the content at "</think>"; earlier turns drop it.
 *
 * Template behaviour kept on purpose: images in the Thinking system message are rendered in the
 * header without being counted, then counted when the loop passes that message, so with
 * add_vision_id the header says "Picture 0: " and later pictures are numbered after it; images of
 * messages whose role renders nothing (not user, system, assistant or tool) still advance the
 * count.  Where Jinja fails (a null content in render_content, a list in plain Qwen3's system
 * message) or would render a Python repr, we answer IRIS_EINVAL; plain Qwen3 renders a null
 * content as '', as transformers does.
 * Tools: the same system turn, <tool_call> blocks and <tool_response> user turns as Instruct's
 * (chat_internal.h, shared with chat.c); what differs is the reasoning of assistant turns that
 * carry tool_calls (kept after the last real query, so a multi-step tool loop shows each step's
 * <think> block) and that a tool call's newline follows the content left after that split.
 */
#include "chat.h"
#include "chat_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "sbuf.h"

typedef struct render {
    iris_sbuf out;
    const iris_chat_opts *opts;
    int vl;                        /* the Thinking VL template's render_content */
    int image_count, video_count;  /* the template's counters (labels) */
    int n_images, n_videos;        /* pads written to the output */
} render;

/* A rendered piece of content with the pads it holds. */
typedef struct piece {
    iris_sbuf b;
    int n_images, n_videos;
} piece;

static int is_image_part(const json_t *p) {
    const char *type = json_string_value(json_object_get(p, "type"));
    return json_object_get(p, "image") || json_object_get(p, "image_url") || (type && !strcmp(type, "image"));
}

static int is_video_part(const json_t *p) {
    const char *type = json_string_value(json_object_get(p, "type"));
    return json_object_get(p, "video") || (type && !strcmp(type, "video"));
}

/* The content of message mi as the template sees it: render_content(content, count) for the
 * VL template; `content if content is string else ''` for plain Qwen3. */
static int content_of(render *r, const json_t *content, int count, size_t mi, piece *out, iris_err *err) {
    memset(out, 0, sizeof *out);
    iris_sbuf_put(&out->b, "", 0);
    if (r->vl && json_is_null(content)) /* render_content iterates it: Jinja's TypeError */
        return iris_err_set(err, IRIS_EINVAL, "message %zu: \"content\" is null; this model's template needs a "
                            "string or a list of parts (send \"\" for none)", mi);
    if (!content || json_is_null(content)) return 0;
    if (json_is_string(content)) {
        iris_sbuf_put(&out->b, json_string_value(content), json_string_length(content));
        return 0;
    }
    if (!r->vl) return 0;
    if (!json_is_array(content))
        return iris_err_set(err, IRIS_EINVAL, "message %zu: \"content\" must be a string or an array of parts", mi);
    size_t pi;
    json_t *p;
    char label[48];
    json_array_foreach((json_t *)content, pi, p) {
        if (!json_is_object(p))
            return iris_err_set(err, IRIS_EINVAL, "message %zu, content part %zu is not an object", mi, pi);
        if (is_image_part(p)) {
            if (count) r->image_count++;
            if (r->opts->add_vision_id) {
                snprintf(label, sizeof label, "Picture %d: ", r->image_count);
                iris_sbuf_puts(&out->b, label);
            }
            iris_sbuf_puts(&out->b, "<|vision_start|><|image_pad|><|vision_end|>");
            out->n_images++;
        } else if (is_video_part(p)) {
            if (count) r->video_count++;
            if (r->opts->add_vision_id) {
                snprintf(label, sizeof label, "Video %d: ", r->video_count);
                iris_sbuf_puts(&out->b, label);
            }
            iris_sbuf_puts(&out->b, "<|vision_start|><|video_pad|><|vision_end|>");
            out->n_videos++;
        } else if (json_object_get(p, "text")) {
            const json_t *t = json_object_get(p, "text");
            if (!json_is_string(t))
                return iris_err_set(err, IRIS_EINVAL, "message %zu, content part %zu: \"text\" must be a string", mi,
                                    pi);
            iris_sbuf_put(&out->b, json_string_value(t), json_string_length(t));
        }
    }
    return 0;
}

static void emit(render *r, const piece *pc) {
    iris_sbuf_put(&r->out, pc->b.p, pc->b.n);
    r->n_images += pc->n_images;
    r->n_videos += pc->n_videos;
}

static const char *role_of(const json_t *m) { return json_string_value(json_object_get(m, "role")); }

static int starts_with(const char *s, size_t n, const char *pre) {
    size_t k = strlen(pre);
    return n >= k && !memcmp(s, pre, k);
}

static int ends_with(const char *s, size_t n, const char *suf) {
    size_t k = strlen(suf);
    return n >= k && !memcmp(s + n - k, suf, k);
}

/* ns.last_query_index: the last user message that is not a wrapped tool response. */
static int last_query_index(render *r, const json_t *messages, size_t n, size_t *out, iris_err *err) {
    *out = n - 1;
    for (size_t k = n; k-- > 0;) {
        const json_t *m = json_array_get(messages, k);
        const char *role = role_of(m);
        const json_t *content = json_object_get(m, "content");
        if (!role || strcmp(role, "user")) continue;
        if (!r->vl && !json_is_string(content)) continue;  /* plain Qwen3: `message.content is string and ...` */
        piece pc;
        int rc = content_of(r, content, 0, k, &pc, err);
        int wrapped = !rc && starts_with(pc.b.p, pc.b.n, "<tool_response>") &&
                      ends_with(pc.b.p, pc.b.n, "</tool_response>");
        free(pc.b.p);
        if (rc) return rc;
        if (!wrapped) {
            *out = k;
            return 0;
        }
    }
    return 0;
}

/* Python's s.strip(chars) variants for '\n'. */
static void trim_nl(const char **s, size_t *n, int left, int right) {
    while (left && *n && **s == '\n') (*s)++, (*n)--;
    while (right && *n && (*s)[*n - 1] == '\n') (*n)--;
}

static const char *find_last(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (!memcmp(s + i, needle, k)) return s + i;
    return NULL;
}

static const char *find_first(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k)) return s + i;
    return NULL;
}

/* An assistant turn: the reasoning kept after the last query, dropped before it. */
static int put_assistant(render *r, const json_t *m, size_t mi, size_t n, size_t lqi, iris_err *err) {
    piece pc;
    int rc = content_of(r, json_object_get(m, "content"), 1, mi, &pc, err);
    if (rc) {
        free(pc.b.p);
        return rc;
    }
    const char *c = pc.b.p, *reason = "";
    size_t cn = pc.b.n, rn = 0;
    const json_t *rcj = json_object_get(m, "reasoning_content");
    const char *end = find_first(c, cn, "</think>");
    if (json_is_string(rcj)) {
        reason = json_string_value(rcj), rn = json_string_length(rcj);
    } else if (end) {
        /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
        size_t before = (size_t)(end - c);
        trim_nl(&c, &before, 0, 1);
        const char *open = find_last(c, before, "<think>");
        reason = open ? open + 7 : c;
        rn = before - (size_t)(reason - c);
        trim_nl(&reason, &rn, 1, 0);
        /* content.split('</think>')[-1].lstrip('\n') */
        const char *last = find_last(pc.b.p, pc.b.n, "</think>") + 8;
        c = last, cn = pc.b.n - (size_t)(last - pc.b.p);
        trim_nl(&c, &cn, 1, 0);
    }
    iris_sbuf_puts(&r->out, "<|im_start|>assistant\n");
    if (mi > lqi && (mi + 1 == n || rn > 0)) {
        const char *rs = reason;
        size_t rsn = rn;
        trim_nl(&rs, &rsn, 1, 1);
        iris_sbuf_puts(&r->out, "<think>\n");
        iris_sbuf_put(&r->out, rs, rsn);
        iris_sbuf_puts(&r->out, "\n</think>\n\n");
        trim_nl(&c, &cn, 1, 0);
    }
    iris_sbuf_put(&r->out, c, cn);
    r->n_images += pc.n_images;
    r->n_videos += pc.n_videos;
    rc = iris_chat_put_tool_calls(&r->out, m, mi, cn > 0, err);
    free(pc.b.p);
    if (!rc) iris_sbuf_puts(&r->out, "<|im_end|>\n");
    return rc;
}

static int put_message(render *r, const json_t *messages, size_t mi, size_t n, size_t lqi, iris_err *err) {
    const json_t *m = json_array_get(messages, mi);
    const char *role = role_of(m);
    if (role && !strcmp(role, "assistant")) return put_assistant(r, m, mi, n, lqi, err);
    piece pc;
    int rc = content_of(r, json_object_get(m, "content"), 1, mi, &pc, err);
    if (!rc && role && (!strcmp(role, "user") || (!strcmp(role, "system") && mi > 0))) {
        iris_sbuf_puts(&r->out, "<|im_start|>");
        iris_sbuf_puts(&r->out, role);
        iris_sbuf_puts(&r->out, "\n");
        emit(r, &pc);
        iris_sbuf_puts(&r->out, "<|im_end|>\n");
    } else if (!rc && role && !strcmp(role, "tool")) {
        const char *prev = mi > 0 ? role_of(json_array_get(messages, mi - 1)) : NULL;
        const char *next = mi + 1 < n ? role_of(json_array_get(messages, mi + 1)) : NULL;
        if (mi == 0 || !prev || strcmp(prev, "tool")) iris_sbuf_puts(&r->out, "<|im_start|>user");
        iris_sbuf_puts(&r->out, "\n<tool_response>\n");
        emit(r, &pc);
        iris_sbuf_puts(&r->out, "\n</tool_response>");
        if (mi + 1 == n || !next || strcmp(next, "tool")) iris_sbuf_puts(&r->out, "<|im_end|>\n");
    }
    free(pc.b.p);
    return rc;
}

int iris_chat_render_qwen3(const json_t *messages, const json_t *tools, const iris_chat_opts *opts, char **out,
                           size_t *out_len, iris_chat_info *info, iris_err *err) {
    *out = NULL;
    if (tools && json_is_null(tools)) tools = NULL;
    if (tools && !json_is_array(tools)) return iris_err_set(err, IRIS_EINVAL, "\"tools\" must be an array");
    if (tools && json_array_size(tools) == 0) tools = NULL; /* an empty list is false */
    if (!json_is_array(messages)) return iris_err_set(err, IRIS_EINVAL, "\"messages\" must be an array");
    size_t n = json_array_size(messages), mi;
    if (n == 0) return iris_err_set(err, IRIS_EINVAL, "\"messages\" is empty");
    json_t *m;
    json_array_foreach((json_t *)messages, mi, m)
        if (!json_is_object(m)) return iris_err_set(err, IRIS_EINVAL, "message %zu is not an object", mi);
    render r = {.opts = opts, .vl = opts->style == IRIS_CHAT_QWEN3VL_THINKING};
    int rc = 0;
    const json_t *first = json_array_get(messages, 0);
    const char *role0 = role_of(first);
    /* {%- if tools %} the tools' system turn, messages[0]'s content + '\n\n' first when a system
     * message; else that system message alone. */
    int sys = role0 && !strcmp(role0, "system");
    if (sys || tools) iris_sbuf_puts(&r.out, "<|im_start|>system\n");
    if (sys) {
        const json_t *c = json_object_get(first, "content");
        if (!r.vl && !json_is_string(c)) {
            rc = iris_err_set(err, IRIS_EINVAL, "message 0: this model's template needs the system \"content\" as a "
                              "string");
        } else {
            piece pc;
            rc = content_of(&r, c, 0, 0, &pc, err);
            if (!rc) emit(&r, &pc);
            free(pc.b.p);
        }
        iris_sbuf_puts(&r.out, tools ? "\n\n" : "<|im_end|>\n");
    }
    if (tools && !rc) iris_chat_put_tools(&r.out, tools);
    size_t lqi = 0;
    if (!rc) rc = last_query_index(&r, messages, n, &lqi, err);
    for (mi = 0; mi < n && !rc; mi++) rc = put_message(&r, messages, mi, n, lqi, err);
    if (!rc && opts->add_generation_prompt) {
        iris_sbuf_puts(&r.out, "<|im_start|>assistant\n");
        if (opts->style != IRIS_CHAT_QWEN3) iris_sbuf_puts(&r.out, "<think>\n");
        else if (opts->no_thinking) iris_sbuf_puts(&r.out, "<think>\n\n</think>\n\n");
    }
    if (!rc && r.out.oom) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory rendering the chat");
    if (rc) {
        free(r.out.p);
        return rc;
    }
    if (!r.out.p) iris_sbuf_puts(&r.out, "");
    *out = r.out.p;
    if (out_len) *out_len = r.out.n;
    if (info) {
        info->n_images = r.n_images;
        info->n_videos = r.n_videos;
    }
    return 0;
}

/* ---- which template a checkpoint has ------------------------------------------------------ */

int iris_chat_style_of(const char *t, int vision) {
    /* A vision model's template renders images; one that cannot (a text tokenizer's, copied
     * beside a synthetic checkpoint) is not the model's: Instruct's is used. */
    if (!t || (vision && !strstr(t, "<|image_pad|>"))) return IRIS_CHAT_QWEN3VL;
    if (strstr(t, "enable_thinking")) return IRIS_CHAT_QWEN3;
    if (strstr(t, "<|im_start|>assistant\\n<think>\\n"))
        return strstr(t, "<|image_pad|>") ? IRIS_CHAT_QWEN3VL_THINKING : IRIS_CHAT_QWEN3_THINKING;
    return IRIS_CHAT_QWEN3VL;
}

const char *iris_chat_style_name(int style) {
    switch (style) {
    case IRIS_CHAT_QWEN3VL_THINKING: return "Qwen3-VL Thinking";
    case IRIS_CHAT_QWEN3: return "Qwen3 (enable_thinking)";
    case IRIS_CHAT_QWEN3_THINKING: return "Qwen3 Thinking";
    default: return "Qwen3-VL Instruct";
    }
}

int iris_chat_reasoning(const iris_chat_opts *o) {
    return o->style == IRIS_CHAT_QWEN3VL_THINKING || o->style == IRIS_CHAT_QWEN3_THINKING ||
           (o->style == IRIS_CHAT_QWEN3 && !o->no_thinking);
}

/* The text of dir/name, or NULL (caller frees); only files under 4 MiB. */
static char *slurp(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && n < (4 << 20) && fseek(f, 0, SEEK_SET) == 0 && (s = malloc((size_t)n + 1))) {
        if (fread(s, 1, (size_t)n, f) != (size_t)n) {
            free(s);
            s = NULL;
        } else {
            s[n] = 0;
        }
    }
    fclose(f);
    return s;
}

/* "chat_template" of a JSON file: a string, or the "default" entry of a list of named ones. */
static int style_of_json(const char *text, int vision, int *style) {
    json_t *root = text ? json_loads(text, 0, NULL) : NULL;
    json_t *t = root ? json_object_get(root, "chat_template") : NULL;
    size_t i;
    json_t *x;
    if (json_is_array(t)) {
        json_t *list = t;
        t = NULL;
        json_array_foreach(list, i, x) {
            const char *name = json_string_value(json_object_get(x, "name"));
            if (name && !strcmp(name, "default")) t = json_object_get(x, "template");
        }
    }
    int found = json_is_string(t);
    if (found) *style = iris_chat_style_of(json_string_value(t), vision);
    json_decref(root);
    return found;
}

int iris_chat_style_load(const char *dir, int vision) {
    int style = IRIS_CHAT_QWEN3VL;
    char *s = slurp(dir, "chat_template.jinja");
    if (s) {
        style = iris_chat_style_of(s, vision);
        free(s);
        return style;
    }
    static const char *const files[] = {"chat_template.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        s = slurp(dir, files[i]);
        int found = style_of_json(s, vision, &style);
        free(s);
        if (found) break;
    }
    return style;
}

/* ---- string-content templates ---------------------------------------------------------- */

int iris_chat_string_content(int style) { return style == IRIS_CHAT_QWEN3 || style == IRIS_CHAT_QWEN3_THINKING; }

json_t *iris_chat_flatten_text(const json_t *messages, int *n_media) {
    *n_media = 0;
    json_t *out = json_deep_copy(messages);
    size_t mi, pi;
    json_t *m, *p;
    json_array_foreach(out, mi, m) {
        json_t *c = json_object_get(m, "content");
        if (!json_is_array(c)) continue;
        iris_sbuf b = {0};
        iris_sbuf_put(&b, "", 0);
        int first = 1;
        json_array_foreach(c, pi, p) {
            if (json_is_object(p) && (is_image_part(p) || is_video_part(p))) {
                (*n_media)++;
            } else if (json_is_object(p) && json_is_string(json_object_get(p, "text"))) {
                if (!first) iris_sbuf_put(&b, "\n", 1);
                iris_sbuf_put(&b, json_string_value(json_object_get(p, "text")), json_string_length(json_object_get(p, "text")));
                first = 0;
            }
        }
        if (!b.oom && json_object_set_new(m, "content", json_stringn(b.p, b.n))) b.oom = 1;
        free(b.p);
        if (b.oom) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}
