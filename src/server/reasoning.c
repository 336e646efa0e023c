/* reasoning.c: the reasoning split of Thinking models' replies (reasoning.h). */
#include "server/reasoning.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

void iris_reasoning_init(iris_reasoning *r, int on) {
    memset(r, 0, sizeof *r);
    r->on = on;
}

int iris_reasoning_disabled_by(const json_t *body) {
    const json_t *kw = json_object_get(body, "chat_template_kwargs");
    return json_is_false(json_object_get(kw, "enable_thinking"));
}

static const char *find(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k)) return s + i;
    return NULL;
}

void iris_reasoning_split(const char *text, size_t n, const char **reasoning, size_t *reasoning_len,
                          const char **content, size_t *content_len) {
    const char *open = find(text, n, OPEN);
    if (open) n -= (size_t)(open + strlen(OPEN) - text), text = open + strlen(OPEN);
    const char *close = find(text, n, CLOSE);
    *reasoning = text;
    *reasoning_len = close ? (size_t)(close - text) : n;
    *content = NULL;
    *content_len = 0;
    if (close && (size_t)(close - text) + strlen(CLOSE) < n) {
        *content = close + strlen(CLOSE);
        *content_len = n - (size_t)(*content - text);
    }
}

/* Bytes at the end of s[0..n) that begin `tag` without completing it. */
static size_t partial_tail(const char *s, size_t n, const char *tag) {
    size_t k = strlen(tag);
    for (size_t len = k - 1; len > 0; len--)
        if (len <= n && !memcmp(s + n - len, tag, len)) return len;
    return 0;
}

static char *dup_range(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

int iris_reasoning_feed(iris_reasoning *r, const char *text, size_t n, int final, iris_reasoning_piece *out) {
    memset(out, 0, sizeof *out);
    char *cat = malloc(r->n_held + n + 1);
    if (!cat) return IRIS_ENOMEM;
    memcpy(cat, r->held, r->n_held);
    if (n) memcpy(cat + r->n_held, text, n);
    size_t len = r->n_held + n;
    r->n_held = 0;
    const char *s = cat, *reason = NULL, *content = NULL;
    size_t rn = 0, cn = 0;
    if (!r->on || r->in_content) {
        content = s, cn = len;
    } else {
        /* As vLLM's streaming parser: a "<think>" is dropped with what precedes it in its delta. */
        const char *open = find(s, len, OPEN);
        if (open) len -= (size_t)(open + strlen(OPEN) - s), s = open + strlen(OPEN);
        const char *close = find(s, len, CLOSE);
        if (close) {
            reason = s, rn = (size_t)(close - s);
            content = close + strlen(CLOSE), cn = len - rn - strlen(CLOSE);
            r->in_content = 1;
        } else {
            size_t hold = final ? 0 : partial_tail(s, len, CLOSE);
            size_t h2 = final ? 0 : partial_tail(s, len, OPEN);
            hold = h2 > hold ? h2 : hold;
            reason = s, rn = len - hold;
            memcpy(r->held, s + rn, hold);
            r->n_held = hold;
        }
    }
    int rc = 0;
    if (rn && !(out->reasoning = dup_range(reason, rn))) rc = IRIS_ENOMEM;
    if (cn && !(out->content = dup_range(content, cn))) rc = IRIS_ENOMEM;
    out->reasoning_len = out->reasoning ? rn : 0;
    out->content_len = out->content ? cn : 0;
    free(cat);
    return rc;
}

void iris_reasoning_piece_free(iris_reasoning_piece *p) {
    if (!p) return;
    free(p->reasoning);
    free(p->content);
    memset(p, 0, sizeof *p);
}

/* A JSON string of s[0..n), invalid UTF-8 bytes as U+FFFD (as openai.c's text); null for NULL. */
static json_t *str_or_null(const char *s, size_t n) {
    if (!s) return json_null();
    json_t *v = json_stringn(s, n);
    if (v) return v;
    char *buf = malloc(n * 3 + 1);
    size_t o = 0;
    for (size_t i = 0; buf && i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) memcpy(buf + o, "\xEF\xBF\xBD", 3), o += 3, i++;
        else memcpy(buf + o, s + i, (size_t)k), o += (size_t)k, i += (size_t)k;
    }
    v = buf ? json_stringn(buf, o) : NULL;
    free(buf);
    return v ? v : json_null();
}

json_t *iris_reasoning_apply(json_t *o, int chunk, const char *reasoning, size_t reasoning_len, const char *content,
                             size_t content_len) {
    json_t *choice = json_array_get(json_object_get(o, "choices"), 0);
    json_t *m = json_object_get(choice, chunk ? "delta" : "message");
    if (!json_is_object(m)) return o;
    if (chunk) {
        json_object_del(m, "content");
        if (reasoning && reasoning_len) json_object_set_new(m, "reasoning_content", str_or_null(reasoning, reasoning_len));
        if (content && content_len) json_object_set_new(m, "content", str_or_null(content, content_len));
    } else {
        json_object_set_new(m, "reasoning_content", str_or_null(reasoning, reasoning_len));
        json_object_set_new(m, "content", content && content_len ? str_or_null(content, content_len) : json_null());
    }
    return o;
}
