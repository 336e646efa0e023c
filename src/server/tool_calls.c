/* tool_calls.c: the request's tools and the parser of <tool_call> blocks (tool_calls.h).
 *
 * The parser is a small state machine over the text:
 *   TEXT  content; a suffix that could still grow into "<tool_call>" (and the whitespace before
 *         it) is held back until the next piece says what it is.
 *   HEAD  after "<tool_call>": `{"name": "NAME", "arguments": ` with any whitespace, buffered
 *         until the name is whole; then the call's first delta (index, id, type, name).
 *   ARGS  the arguments value, passed through as fragments while a JSON scanner (depth, strings,
 *         escapes) finds where it ends.
 *   TAIL  what is left up to "</tool_call>" (the closing brace, newlines), dropped.
 * A head that is not the expected shape gives the block back as content (only text the grammar
 * did not shape can do that).  After a call, whitespace between calls is dropped; other text
 * is content.
 */
#include "server/tool_calls.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"

#define BAD(param, ...) iris_oai_fail(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)
#define MAX_TOOLS 128

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";

/* ---- the request ---------------------------------------------------------------------------- */

static int valid_name(const char *s) {
    size_t n = strlen(s);
    return n >= 1 && n <= 64 &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

static int check_tool(json_t *tools, size_t i, iris_oai_err *e) {
    char p[64];
    json_t *t = json_array_get(tools, i);
    snprintf(p, sizeof p, "tools[%zu]", i);
    if (!json_is_object(t)) return BAD(p, "'%s' must be an object {\"type\": \"function\", \"function\": {...}}", p);
    const char *type = json_string_value(json_object_get(t, "type"));
    if (!type || strcmp(type, "function"))
        return BAD(p, "'%s.type' must be \"function\" (the only tool type supported)", p);
    json_t *fn = json_object_get(t, "function");
    snprintf(p, sizeof p, "tools[%zu].function", i);
    if (!json_is_object(fn)) return BAD(p, "'%s' must be an object with a 'name'", p);
    json_t *name = json_object_get(fn, "name"), *desc = json_object_get(fn, "description");
    json_t *params = json_object_get(fn, "parameters"), *strict = json_object_get(fn, "strict");
    snprintf(p, sizeof p, "tools[%zu].function.name", i);
    if (!json_is_string(name) || !valid_name(json_string_value(name)))
        return BAD(p, "'%s' must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -", p);
    for (size_t k = 0; k < i; k++) {
        json_t *other = json_object_get(json_object_get(json_array_get(tools, k), "function"), "name");
        if (json_equal(other, name))
            return BAD(p, "'%s': two tools are named \"%s\"", p, json_string_value(name));
    }
    snprintf(p, sizeof p, "tools[%zu].function.description", i);
    if (desc && !json_is_null(desc) && !json_is_string(desc)) return BAD(p, "'%s' must be a string", p);
    snprintf(p, sizeof p, "tools[%zu].function.parameters", i);
    if (params && !json_is_null(params) && !json_is_object(params))
        return BAD(p, "'%s' must be a JSON Schema object", p);
    snprintf(p, sizeof p, "tools[%zu].function.strict", i);
    if (strict && !json_is_null(strict) && !json_is_boolean(strict)) return BAD(p, "'%s' must be a boolean", p);
    return 0;
}

/* tool_choice: the mode, and the name of a named function (a pointer into o). */
static int parse_choice(json_t *o, json_t *tools, int *mode, const char **name, iris_oai_err *e) {
    json_t *c = json_object_get(o, "tool_choice");
    *mode = tools ? IRIS_OAI_TOOLS_AUTO : IRIS_OAI_TOOLS_OFF;
    *name = NULL;
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) {
        const char *v = json_string_value(c);
        if (!strcmp(v, "none")) *mode = IRIS_OAI_TOOLS_OFF;
        else if (!strcmp(v, "auto")) *mode = IRIS_OAI_TOOLS_AUTO;
        else if (!strcmp(v, "required")) *mode = IRIS_OAI_TOOLS_REQUIRED;
        else return BAD("tool_choice", "'tool_choice' \"%.40s\" is not \"none\", \"auto\", \"required\" or "
                                       "{\"type\": \"function\", \"function\": {\"name\": ...}}", v);
    } else {
        const char *type = json_string_value(json_object_get(c, "type"));
        *name = json_string_value(json_object_get(json_object_get(c, "function"), "name"));
        if (!json_is_object(c) || !type || strcmp(type, "function") || !*name)
            return BAD("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                                      "\"function\", \"function\": {\"name\": ...}}");
        *mode = IRIS_OAI_TOOLS_REQUIRED;
    }
    if (*mode != IRIS_OAI_TOOLS_OFF && !tools)
        return BAD("tool_choice", "'tool_choice' is only allowed when 'tools' are given");
    if (*name) {
        size_t i;
        json_t *t;
        json_t *want = json_object_get(json_object_get(c, "function"), "name");
        json_array_foreach(tools, i, t) if (json_equal(json_object_get(json_object_get(t, "function"), "name"), want))
            return 0;
        return BAD("tool_choice", "'tool_choice' names the function \"%.64s\", which is not among 'tools'", *name);
    }
    return 0;
}

int iris_oai_parse_tools(json_t *o, iris_oai_request *r, iris_sampling *s, iris_oai_err *e) {
    json_t *tools = json_object_get(o, "tools");
    if (tools && json_is_null(tools)) tools = NULL;
    if (tools && !json_is_array(tools)) return BAD("tools", "'tools' must be an array of tools");
    if (tools && json_array_size(tools) == 0) tools = NULL;
    if (tools && r->kind != IRIS_OAI_CHAT) return BAD("tools", "'tools' is only for /v1/chat/completions");
    if (tools && json_array_size(tools) > MAX_TOOLS)
        return BAD("tools", "'tools' has %zu tools; at most %d", json_array_size(tools), MAX_TOOLS);
    for (size_t i = 0; tools && i < json_array_size(tools); i++) {
        int rc = check_tool(tools, i, e);
        if (rc) return rc;
    }
    const char *name;
    int rc = parse_choice(o, tools, &r->tool_mode, &name, e);
    if (rc) return rc;
    int parallel = 1;
    json_t *pv = json_object_get(o, "parallel_tool_calls");
    if (pv && !json_is_null(pv)) {
        if (!json_is_boolean(pv)) return BAD("parallel_tool_calls", "'parallel_tool_calls' must be true or false");
        parallel = json_is_true(pv);
    }
    if (!tools) return 0;
    r->tools = json_incref(tools);
    if (r->tool_mode == IRIS_OAI_TOOLS_OFF) return 0;
    if (s->json_schema)
        return BAD("response_format", "'response_format' with 'tools' is not supported: use tool_choice \"none\" "
                                      "for a structured answer, or leave response_format out");
    r->tools_json = json_dumps(tools, JSON_COMPACT);
    r->tool_name = name ? strdup(name) : NULL;
    if (!r->tools_json || (name && !r->tool_name))
        return iris_oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    s->tools_json = r->tools_json;
    s->tools_required = r->tool_mode == IRIS_OAI_TOOLS_REQUIRED;
    s->tool_name = r->tool_name;
    s->single_tool_call = !parallel;
    return 0;
}

/* ---- the parser ----------------------------------------------------------------------------- */

enum { P_TEXT, P_HEAD, P_ARGS, P_TAIL };

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

typedef struct call {
    char id[32];
    char *name;
    buf args;
} call;

struct iris_tool_parser {
    int state;
    uint64_t seed;
    buf hold;     /* TEXT: held back; HEAD, TAIL: the block so far */
    buf ws;       /* HEAD: the whitespace before "<tool_call>", content again if no call follows */
    buf out;      /* this feed's content */
    call *calls;
    int n_calls, cap_calls;
    /* ARGS: the JSON scanner */
    int depth, in_str, esc, started, scalar;
    int oom;
};

static void put(iris_tool_parser *p, buf *b, const char *s, size_t n) {
    if (p->oom || !n) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            p->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void drop(buf *b, size_t k) {
    memmove(b->p, b->p + k, b->n - k);
    b->n -= k;
    if (b->p) b->p[b->n] = 0;
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

iris_tool_parser *iris_tool_parser_new(uint64_t seed) {
    iris_tool_parser *p = calloc(1, sizeof *p);
    if (p) p->seed = seed;
    return p;
}

void iris_tool_parser_free(iris_tool_parser *p) {
    if (!p) return;
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].args.p);
    }
    free(p->calls);
    free(p->hold.p);
    free(p->ws.p);
    free(p->out.p);
    free(p);
}

int iris_tool_parser_n_calls(const iris_tool_parser *p) { return p->n_calls; }

/* The length of the longest suffix of s[0..n) that is a proper prefix of OPEN. */
static size_t open_prefix(const char *s, size_t n) {
    for (size_t k = n < sizeof OPEN - 2 ? n : sizeof OPEN - 2; k > 0; k--)
        if (!memcmp(s + n - k, OPEN, k)) return k;
    return 0;
}

static void *find(const char *s, size_t n, const char *t) { return memmem(s, n, t, strlen(t)); }

/* TEXT: emit what surely is content; move to HEAD at "<tool_call>". */
static void on_text(iris_tool_parser *p, int final) {
    buf *h = &p->hold;
    char *at = h->n ? find(h->p, h->n, OPEN) : NULL;
    size_t keep;
    if (at) {
        size_t k = (size_t)(at - h->p), e = k;
        while (e > 0 && is_ws(h->p[e - 1])) e--;
        if (p->n_calls == 0 || e > 0) put(p, &p->out, h->p, e);
        p->ws.n = 0;
        put(p, &p->ws, h->p + e, k - e);
        drop(h, k + sizeof OPEN - 1);
        p->state = P_HEAD;
        return;
    }
    if (final) {
        keep = 0;
        if (p->n_calls > 0) { /* whitespace after the calls */
            size_t e = h->n;
            while (e > 0 && is_ws(h->p[e - 1])) e--;
            h->n = e;
        }
    } else {
        keep = open_prefix(h->p, h->n);
        while (keep < h->n && is_ws(h->p[h->n - keep - 1])) keep++;
    }
    size_t emit = h->n - keep, start = 0;
    if (p->n_calls > 0) /* between calls: leading whitespace is not content */
        while (start < emit && is_ws(h->p[start])) start++;
    if (start < emit) put(p, &p->out, h->p + start, emit - start);
    drop(h, emit);
}

/* HEAD: 1 matched (name and where the arguments start), 0 need more, -1 not a call head. */
static int match_head(const char *s, size_t n, size_t *name0, size_t *name1, size_t *args0) {
    static const char *parts[] = {"{", "\"name\"", ":", "\"", NULL, ",", "\"arguments\"", ":"};
    size_t i = 0;
    for (int k = 0; k < 8; k++) {
        if (k != 4)
            while (i < n && is_ws(s[i])) i++;
        if (k == 4) {
            *name0 = i;
            while (i < n && s[i] != '"' && s[i] != '\\' && s[i] != '\n') i++;
            if (i == n) return 0;
            if (s[i] != '"') return -1;
            *name1 = i++;
            continue;
        }
        size_t m = strlen(parts[k]);
        size_t have = n - i < m ? n - i : m;
        if (memcmp(s + i, parts[k], have)) return -1;
        if (have < m) return 0;
        i += m;
    }
    while (i < n && is_ws(s[i])) i++;
    if (i == n) return 0;
    *args0 = i;
    return 1;
}

static json_t *start_delta(const call *c, int index) {
    return json_pack("{s:i, s:s, s:s, s:{s:s, s:s}}", "index", index, "id", c->id, "type", "function", "function",
                     "name", c->name, "arguments", "");
}

static void on_head(iris_tool_parser *p, iris_tool_delta *d) {
    size_t n0 = 0, n1 = 0, a0 = 0;
    int m = match_head(p->hold.p ? p->hold.p : "", p->hold.n, &n0, &n1, &a0);
    if (m == 0) return;
    if (m < 0) { /* not a call: the block is text */
        put(p, &p->out, p->ws.p, p->ws.n);
        put(p, &p->out, OPEN, sizeof OPEN - 1);
        p->state = P_TEXT;
        return;
    }
    if (p->n_calls == p->cap_calls) {
        int nc = p->cap_calls ? p->cap_calls * 2 : 4;
        call *q = realloc(p->calls, (size_t)nc * sizeof *q);
        if (!q) {
            p->oom = 1;
            return;
        }
        p->calls = q;
        p->cap_calls = nc;
    }
    call *c = &p->calls[p->n_calls];
    memset(c, 0, sizeof *c);
    c->name = strndup(p->hold.p + n0, n1 - n0);
    if (!c->name) {
        p->oom = 1;
        return;
    }
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t x = mix(p->seed ^ mix((uint64_t)p->n_calls + 1));
    memcpy(c->id, "call_", 5);
    for (int i = 0; i < 24; i++) {
        if (i % 8 == 0) x = mix(x);
        c->id[5 + i] = al[(x >> (8 * (i % 8))) % 62];
    }
    c->id[29] = 0;
    json_array_append_new(d->calls ? d->calls : (d->calls = json_array()), start_delta(c, p->n_calls));
    p->n_calls++;
    drop(&p->hold, a0);
    p->state = P_ARGS;
    p->depth = p->in_str = p->esc = p->started = p->scalar = 0;
}

/* ARGS: pass the value's bytes of s through as a fragment; returns how many bytes it used (the
 * value ended there when the state moved to TAIL). */
static size_t on_args(iris_tool_parser *p, const char *s, size_t n, iris_tool_delta *d) {
    size_t i = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (!p->started) {
            if (is_ws(c)) continue;
            p->started = 1;
            p->scalar = c != '{' && c != '[' && c != '"';
        }
        if (p->in_str) {
            if (p->esc) p->esc = 0;
            else if (c == '\\') p->esc = 1;
            else if (c == '"') p->in_str = 0;
        } else if (p->scalar && (is_ws(c) || c == ',' || c == '}' || c == ']')) {
            p->state = P_TAIL; /* the delimiter is not the value's */
            break;
        } else if (c == '"') {
            p->in_str = 1;
        } else if (c == '{' || c == '[') {
            p->depth++;
        } else if (c == '}' || c == ']') {
            p->depth--;
        }
        if (!p->scalar && p->depth <= 0 && !p->in_str) {
            p->state = P_TAIL;
            i++;
            break;
        }
    }
    call *c = &p->calls[p->n_calls - 1];
    size_t k0 = 0;
    while (c->args.n == 0 && k0 < i && is_ws(s[k0])) k0++;
    if (i > k0) {
        put(p, &c->args, s + k0, i - k0);
        json_array_append_new(d->calls ? d->calls : (d->calls = json_array()),
                              json_pack("{s:i, s:{s:s%}}", "index", p->n_calls - 1, "function", "arguments", s + k0,
                                        i - k0));
    }
    return i;
}

static void on_tail(iris_tool_parser *p) {
    char *at = find(p->hold.p ? p->hold.p : "", p->hold.n, CLOSE);
    if (!at) return;
    drop(&p->hold, (size_t)(at - p->hold.p) + sizeof CLOSE - 1);
    p->state = P_TEXT;
}

int iris_tool_parser_feed(iris_tool_parser *p, const char *s, size_t n, int final, iris_tool_delta *d) {
    memset(d, 0, sizeof *d);
    p->out.n = 0;
    for (;;) {
        int st = p->state;
        if (st == P_ARGS) {
            /* what HEAD left over first, then the new bytes */
            if (p->hold.n) {
                buf h = p->hold;
                size_t u = on_args(p, h.p, h.n, d);
                drop(&p->hold, u);
            } else if (n) {
                size_t u = on_args(p, s, n, d);
                s += u;
                n -= u;
            }
        } else {
            put(p, &p->hold, s, n);
            n = 0;
            if (st == P_TEXT) on_text(p, final);
            else if (st == P_HEAD) on_head(p, d);
            else on_tail(p);
        }
        if (p->oom) break;
        if (p->state == st && (st != P_ARGS || (!n && !p->hold.n))) break;
    }
    if (final && p->state == P_HEAD) { /* an unfinished head is text */
        put(p, &p->out, p->ws.p, p->ws.n);
        put(p, &p->out, OPEN, sizeof OPEN - 1);
        put(p, &p->out, p->hold.p, p->hold.n);
        p->hold.n = 0;
        p->state = P_TEXT;
    }
    if (p->oom) {
        json_decref(d->calls);
        d->calls = NULL;
        return IRIS_ENOMEM;
    }
    d->content = p->out.p;
    d->content_len = p->out.n;
    return 0;
}

json_t *iris_tool_parser_calls(const iris_tool_parser *p) {
    json_t *a = json_array();
    for (int i = 0; i < p->n_calls && a; i++) {
        const call *c = &p->calls[i];
        json_array_append_new(a, json_pack("{s:s, s:s, s:{s:s, s:s%}}", "id", c->id, "type", "function", "function",
                                           "name", c->name, "arguments", c->args.p ? c->args.p : "", c->args.n));
    }
    return a;
}

/* ---- responses ------------------------------------------------------------------------------ */

void iris_oai_chunk_set_tool_calls(json_t *chunk, json_t *calls) {
    json_t *delta = json_object_get(json_array_get(json_object_get(chunk, "choices"), 0), "delta");
    if (delta) json_object_set_new(delta, "tool_calls", calls);
    else json_decref(calls);
}

void iris_oai_response_set_tool_calls(json_t *resp, json_t *calls, size_t content_len) {
    json_t *msg = json_object_get(json_array_get(json_object_get(resp, "choices"), 0), "message");
    if (!msg) {
        json_decref(calls);
        return;
    }
    if (!content_len) json_object_set_new(msg, "content", json_null());
    json_object_set_new(msg, "tool_calls", calls);
}

int iris_reply_feed(iris_reasoning *rs, iris_tool_parser *tools, const char *s, size_t n, int final,
                    iris_reply_piece *out) {
    memset(out, 0, sizeof *out);
    const char *c = s;
    size_t cn = n;
    if (rs->on) {
        if (iris_reasoning_feed(rs, s, n, final, &out->r)) return IRIS_ENOMEM;
        c = out->r.content, cn = out->r.content_len;
    }
    if (!tools) {
        out->content = cn ? c : NULL, out->content_len = cn;
        return 0;
    }
    iris_tool_delta d = {0};
    if ((cn || final) && iris_tool_parser_feed(tools, cn ? c : "", cn, final, &d)) {
        iris_reasoning_piece_free(&out->r);
        return IRIS_ENOMEM;
    }
    out->content = d.content_len ? d.content : NULL, out->content_len = d.content_len;
    out->calls = d.calls;
    return 0;
}

void iris_reply_piece_free(iris_reply_piece *p) {
    iris_reasoning_piece_free(&p->r);
    json_decref(p->calls);
    p->calls = NULL;
}
