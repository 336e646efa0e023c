/* grammar_schema.c: JSON Schema -> grammar (grammar_internal.h's rules), compact JSON out.
 *
 * Honoured: type (object, array, string, number, integer, boolean, null, and lists of them),
 * properties, required, additionalProperties (false, true or a schema; with properties given,
 * only the declared properties are written, in their declared order), enum, const, anyOf,
 * oneOf (as anyOf: a value matching two branches is not excluded), local $ref ("#", "#/$defs/..",
 * any JSON pointer into the document, recursion included) with $defs/definitions, items,
 * prefixItems, minItems, maxItems, uniqueItems false, minLength, maxLength (in code points),
 * minimum, maximum, exclusiveMinimum, exclusiveMaximum on integers, pattern (grammar_regex.c's
 * subset of ECMA-262 regexes) and format (date, time, date-time, uuid, email: each a fixed
 * pattern, grammar_regex.c) on strings, neither beside minLength/maxLength nor each other;
 * annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
 * readOnly, writeOnly) are ignored.  Every other keyword, and every other format, is refused by
 * name (IRIS_EINVAL); a message names the schema part too (at #/properties/x).
 *
 * Bounds the grammar adds so that output always finishes: integers have at most 16 digits
 * unless minimum/maximum say otherwise; numbers at most 16 integer digits, 16 fraction digits
 * and a 3-digit exponent; whitespace is one optional space after ':' and ','.  Strings are
 * UTF-8 without overlongs or surrogates, escapes as JSON allows.
 *
 * Refused as well: a $ref that does not resolve, left recursion (a schema that refers to itself
 * before writing anything), false schemas, required names missing from properties, bounds
 * that admit nothing.  Compile work is bounded: a grammar past COMPILE_MAX_ELEMS elements or a
 * compile past COMPILE_MAX_MS is IRIS_ELIMIT naming the schema part being compiled (a
 * pathological schema fails its request at once instead of holding the caller).
 */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "err.h"
#include "clock.h"
#include "model/grammar_internal.h"

#define INT_DIGITS 16
#define MAX_DEPTH 64
#define FIRST_ANNOTATION 24  /* index of "title" in honoured[] */
#define COMPILE_MAX_ELEMS (1 << 20)
#define COMPILE_MAX_MS 250

typedef struct ref_entry {
    char *ref;
    int rule;
} ref_entry;

typedef struct sc {
    iris_grammar *g;
    json_t *root;
    iris_err *err;
    int rc;
    ref_entry *refs;
    int n_refs, cap_refs;
    int depth;
    int digit, ws, chr, sbody, string, value, number, integer;  /* shared rules and sets, -1 until made */
    gseq q;
    char path[256];  /* the JSON pointer of the schema part being compiled */
    double t_end;    /* the compile's deadline (CLOCK_MONOTONIC seconds) */
} sc;

static int fail(sc *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(sc *s, const char *fmt, ...) {
    if (!s->rc) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (s->path[0]) s->rc = iris_err_set(s->err, IRIS_EINVAL, "json schema: %s (at #%s)", msg, s->path);
        else s->rc = iris_err_set(s->err, IRIS_EINVAL, "json schema: %s", msg);
    }
    return -1;
}

/* Past the compile budget: IRIS_ELIMIT naming the schema part. */
static int over_limit(sc *s, const char *what, int n) {
    if (!s->rc)
        s->rc = iris_err_set(s->err, IRIS_ELIMIT, "json schema: compiling #%s %s %d%s: the schema is too large (lower "
                             "bounds such as maxLength, maxItems or repetition counts, or use fewer branches)",
                             s->path, what, n, *what == 't' ? " ms" : " elements");
    return -1;
}

static int oom(sc *s) {
    if (s->g->over) return over_limit(s, "grows the grammar past", COMPILE_MAX_ELEMS);
    return fail(s, "out of memory building the grammar");
}

/* Add one alternative to rule r: fmt is a run of 'l' (a literal, const char *), 'r' (a rule
 * id, int) and 'c' (a byte set id, int). */
static void alt(sc *s, int r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    for (const char *f = fmt; *f; f++) {
        if (*f == 'l') {
            const char *t = va_arg(ap, const char *);
            gseq_lit(s->g, &s->q, t, strlen(t));
        } else if (*f == 'r') gseq_ref(&s->q, va_arg(ap, int));
        else gseq_chars(s->g, &s->q, va_arg(ap, int));
    }
    va_end(ap);
    if (gb_alt(s->g, r, &s->q)) oom(s);
}

static int rule(sc *s) {
    int r = gb_rule(s->g);
    if (r < 0) oom(s);
    if (r > 0 && (r & 1023) == 0 && iris_now_s() > s->t_end) return over_limit(s, "takes longer than", COMPILE_MAX_MS);
    return r;
}

static int range(sc *s, int lo, int hi) {
    int r = gb_set_range(s->g, lo, hi);
    if (r < 0) oom(s);
    return r;
}

/* D_k: up to k digits. */
static int digits_upto(sc *s, int k) {
    int d = rule(s);
    alt(s, d, "");
    for (int i = 1; i <= k && !s->rc; i++) {
        int n = rule(s);
        alt(s, n, "");
        alt(s, n, "cr", s->digit, d);
        d = n;
    }
    return d;
}

static int set_of(sc *s, const char *bytes) {
    gset t = {{0}};
    for (const unsigned char *b = (const unsigned char *)bytes; *b; b++) t.w[*b >> 5] |= 1u << (*b & 31);
    int r = gb_set(s->g, &t);
    if (r < 0) oom(s);
    return r;
}

static int string_char(sc *s) {
    int c = rule(s), cont = range(s, 0x80, 0xBF);
    gset plain = {{0}};
    for (int b = 0x20; b <= 0x7F; b++)
        if (b != '"' && b != '\\') plain.w[b >> 5] |= 1u << (b & 31);
    int pl = gb_set(s->g, &plain);
    int es = set_of(s, "\"\\/bfnrt"), hx = set_of(s, "0123456789abcdefABCDEF");
    if (pl < 0) return oom(s);
    alt(s, c, "c", pl);
    alt(s, c, "lc", "\\", es);
    alt(s, c, "lcccc", "\\u", hx, hx, hx, hx);
    alt(s, c, "cc", range(s, 0xC2, 0xDF), cont);
    alt(s, c, "lcc", "\xE0", range(s, 0xA0, 0xBF), cont);
    alt(s, c, "ccc", range(s, 0xE1, 0xEC), cont, cont);
    alt(s, c, "lcc", "\xED", range(s, 0x80, 0x9F), cont);
    alt(s, c, "ccc", range(s, 0xEE, 0xEF), cont, cont);
    alt(s, c, "lccc", "\xF0", range(s, 0x90, 0xBF), cont, cont);
    alt(s, c, "cccc", range(s, 0xF1, 0xF3), cont, cont, cont);
    alt(s, c, "lccc", "\xF4", range(s, 0x80, 0x8F), cont, cont);
    return c;
}

/* The rules every schema may use: any JSON value and its parts. */
static void shared_rules(sc *s) {
    s->digit = range(s, '0', '9');
    s->ws = rule(s);
    alt(s, s->ws, "");
    alt(s, s->ws, "l", " ");
    s->chr = string_char(s);
    s->sbody = rule(s);
    alt(s, s->sbody, "");
    alt(s, s->sbody, "rr", s->chr, s->sbody);
    s->string = rule(s);
    alt(s, s->string, "lrl", "\"", s->sbody, "\"");
    int nat = rule(s), d15 = digits_upto(s, INT_DIGITS - 1);
    alt(s, nat, "l", "0");
    alt(s, nat, "cr", range(s, '1', '9'), d15);
    s->integer = rule(s);
    alt(s, s->integer, "r", nat);
    alt(s, s->integer, "lr", "-", nat);
    int frac = rule(s), ex = rule(s), sign = rule(s);
    alt(s, frac, "");
    alt(s, frac, "lcr", ".", s->digit, digits_upto(s, 15));
    alt(s, sign, "");
    alt(s, sign, "l", "+");
    alt(s, sign, "l", "-");
    alt(s, ex, "");
    alt(s, ex, "crcr", set_of(s, "eE"), sign, s->digit, digits_upto(s, 2));
    s->number = rule(s);
    alt(s, s->number, "rrr", s->integer, frac, ex);
    s->value = rule(s);
    int obj = rule(s), arr = rule(s), member = rule(s), mtail = rule(s), atail = rule(s);
    alt(s, member, "rlrr", s->string, ":", s->ws, s->value);
    alt(s, mtail, "");
    alt(s, mtail, "lrrr", ",", s->ws, member, mtail);
    alt(s, obj, "l", "{}");
    alt(s, obj, "lrrl", "{", member, mtail, "}");
    alt(s, atail, "");
    alt(s, atail, "lrrr", ",", s->ws, s->value, atail);
    alt(s, arr, "l", "[]");
    alt(s, arr, "lrrl", "[", s->value, atail, "]");
    alt(s, s->value, "r", obj);
    alt(s, s->value, "r", arr);
    alt(s, s->value, "r", s->string);
    alt(s, s->value, "r", s->number);
    alt(s, s->value, "l", "true");
    alt(s, s->value, "l", "false");
    alt(s, s->value, "l", "null");
}

/* ---- keywords ----------------------------------------------------------------------------- */

static const char *const honoured[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf", "oneOf", "$ref",
    "$defs", "definitions", "items", "prefixItems", "minItems", "maxItems", "uniqueItems", "minLength",
    "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern", "format",
    /* annotations, from FIRST_ANNOTATION on */
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", NULL};

static int check_keywords(sc *s, json_t *node) {
    const char *k;
    json_t *v;
    json_object_foreach(node, k, v) {
        int ok = 0;
        for (int i = 0; honoured[i] && !ok; i++) ok = !strcmp(k, honoured[i]);
        if (!ok) return fail(s, "keyword \"%s\" is not supported", k);
        if (!strcmp(k, "uniqueItems") && json_is_true(v))
            return fail(s, "keyword \"uniqueItems\": true is not supported");
    }
    return 0;
}

static int compile(sc *s, json_t *node);

/* compile() of the part at path + "/" + seg, then "/" + key (escaped) when given, then "/" +
 * index when >= 0; the path stays at the part when it fails, so the message names it. */
static int compile_at(sc *s, json_t *node, const char *seg, const char *key, long index) {
    size_t keep = strlen(s->path), n = keep, cap = sizeof s->path;
    char *p = s->path;
    n += (size_t)snprintf(p + n, cap - n, "/%s", seg);
    if (key && n + 1 < cap) p[n++] = '/';
    for (const char *c = key; c && *c && n + 3 < cap; c++) {
        if (*c == '~' || *c == '/') p[n++] = '~', p[n++] = *c == '~' ? '0' : '1';
        else p[n++] = *c;
    }
    if (n >= cap) n = cap - 1;
    p[n] = 0;
    if (index >= 0) snprintf(p + n, cap - n, "/%ld", index);
    int r = compile(s, node);
    if (!s->rc) p[keep] = 0;
    return r;
}

/* A literal JSON value (enum, const), compact as the grammar writes it. */
static void literal_alt(sc *s, int r, json_t *v) {
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) {
        oom(s);
        return;
    }
    alt(s, r, "l", t);
    free(t);
}

/* ---- $ref ----------------------------------------------------------------------------------- */

static json_t *resolve(sc *s, const char *ref) {
    if (ref[0] != '#') return NULL;
    json_t *at = s->root;
    const char *p = ref + 1;
    if (*p && *p != '/') return NULL;
    while (*p && at) {
        p++;
        char tok[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char c = *p;
            if (c == '~' && (p[1] == '0' || p[1] == '1')) c = *++p == '0' ? '~' : '/';
            if (n + 1 < sizeof tok) tok[n++] = c;
        }
        tok[n] = 0;
        if (json_is_object(at)) at = json_object_get(at, tok);
        else if (json_is_array(at)) at = json_array_get(at, (size_t)strtoul(tok, NULL, 10));
        else at = NULL;
    }
    return at;
}

static int compile_ref(sc *s, const char *ref) {
    for (int i = 0; i < s->n_refs; i++)
        if (!strcmp(s->refs[i].ref, ref)) return s->refs[i].rule;
    json_t *target = resolve(s, ref);
    if (!target) return fail(s, "$ref \"%s\" does not resolve (only local references such as \"#/$defs/Name\")", ref);
    if (s->n_refs == s->cap_refs) {
        int nc = s->cap_refs ? 2 * s->cap_refs : 8;
        ref_entry *nr = realloc(s->refs, (size_t)nc * sizeof *nr);
        if (!nr) return oom(s);
        s->refs = nr;
        s->cap_refs = nc;
    }
    int r = rule(s);
    char *copy = strdup(ref);
    if (!copy || r < 0) return oom(s);
    s->refs[s->n_refs++] = (ref_entry){copy, r};
    char saved[sizeof s->path];
    memcpy(saved, s->path, sizeof saved);
    snprintf(s->path, sizeof s->path, "%s", ref + 1);  /* the target's own pointer */
    int t = compile(s, target);
    if (s->rc) return -1;
    memcpy(s->path, saved, sizeof saved);
    alt(s, r, "r", t);
    return s->rc ? -1 : r;
}

/* ---- objects ---------------------------------------------------------------------------------- */

static int in_required(json_t *req, const char *name) {
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), name)) return 1;
    return 0;
}

/* "{" members of one value schema `vr` under any keys "}" */
static int map_of(sc *s, int vr) {
    int r = rule(s), member = rule(s), tail = rule(s);
    alt(s, member, "rlrr", s->string, ":", s->ws, vr);
    alt(s, tail, "");
    alt(s, tail, "lrrr", ",", s->ws, member, tail);
    alt(s, r, "l", "{}");
    alt(s, r, "lrrl", "{", member, tail, "}");
    return r;
}

static int compile_object(sc *s, json_t *node) {
    json_t *props = json_object_get(node, "properties"), *req = json_object_get(node, "required");
    json_t *add = json_object_get(node, "additionalProperties");
    if (props && !json_is_object(props)) return fail(s, "\"properties\" must be an object");
    if (req && !json_is_array(req)) return fail(s, "\"required\" must be an array of names");
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) {
        if (!json_is_string(v)) return fail(s, "\"required\" must be an array of names");
        if (!json_object_get(props, json_string_value(v)))
            return fail(s, "required property \"%s\" is not in \"properties\"", json_string_value(v));
    }
    if (!props || !json_object_size(props)) {
        if (json_is_false(add)) {
            int r = rule(s);
            alt(s, r, "l", "{}");
            return r;
        }
        int vr = json_is_object(add) ? compile_at(s, add, "additionalProperties", NULL, -1) : s->value;
        return vr < 0 ? -1 : map_of(s, vr);
    }
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return fail(s, "\"additionalProperties\" must be a boolean or a schema");
    /* A_i: the properties from i on with none written yet; B_i: with one written (commas). */
    size_t n = json_object_size(props);
    int *ab = malloc(2 * (n + 1) * sizeof *ab);
    if (!ab) return oom(s);
    int *A = ab, *B = ab + n + 1;
    A[n] = rule(s);
    B[n] = rule(s);
    alt(s, A[n], "");
    alt(s, B[n], "");
    const char **keys = malloc(n * sizeof *keys);
    json_t **vals = malloc(n * sizeof *vals);
    if (!keys || !vals) oom(s);
    const char *k;
    size_t j = 0;
    if (keys && vals) json_object_foreach(props, k, v) keys[j] = k, vals[j++] = v;
    for (size_t p = n; p-- > 0 && !s->rc;) {
        int vr = compile_at(s, vals[p], "properties", keys[p], -1);
        json_t *ks = json_string(keys[p]);
        char *kl = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
        json_decref(ks);
        if (!kl) {
            oom(s);
            break;
        }
        int kv = rule(s);
        alt(s, kv, "llrr", kl, ":", s->ws, vr);
        free(kl);
        A[p] = rule(s);
        B[p] = rule(s);
        alt(s, A[p], "rr", kv, B[p + 1]);
        alt(s, B[p], "lrrr", ",", s->ws, kv, B[p + 1]);
        if (!in_required(req, keys[p])) {
            alt(s, A[p], "r", A[p + 1]);
            alt(s, B[p], "r", B[p + 1]);
        }
    }
    int r = s->rc ? -1 : rule(s);
    if (!s->rc) alt(s, r, "lrl", "{", A[0], "}");
    free(ab);
    free(keys);
    free(vals);
    return s->rc ? -1 : r;
}

/* ---- arrays, strings, integers ---------------------------------------------------------------- */

/* A non-negative integer keyword, or def when absent; -2 when malformed.  A whole number written
 * as a real past long long's range (5.5e65) is LLONG_MAX: above any limit the callers take. */
static long long count_kw(json_t *node, const char *k, long long def) {
    json_t *v = json_object_get(node, k);
    if (!v) return def;
    if (json_is_integer(v) && json_integer_value(v) >= 0) return json_integer_value(v);
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d >= 9.2e18 && d == floor(d)) return LLONG_MAX;
        if (d >= 0 && d < 9.2e18 && d == (double)(long long)d) return (long long)d;
    }
    return -2;
}

static int compile_array(sc *s, json_t *node) {
    json_t *items = json_object_get(node, "items"), *pre = json_object_get(node, "prefixItems");
    long long mn = count_kw(node, "minItems", 0), mx = count_kw(node, "maxItems", -1);
    if (mn == -2 || (mx < -1)) return fail(s, "\"minItems\"/\"maxItems\" must be non-negative integers");
    if (pre && !json_is_array(pre)) return fail(s, "\"prefixItems\" must be an array of schemas");
    if (items && !json_is_boolean(items) && !json_is_object(items))
        return fail(s, "\"items\" must be a schema (an array of schemas is \"prefixItems\")");
    long long k = pre ? (long long)json_array_size(pre) : 0;
    if (json_is_false(items) && (mx < 0 || mx > k)) mx = k;
    if (mx >= 0 && mn > mx) return fail(s, "minItems %lld is above maxItems %lld: no array fits", mn, mx);
    if (mx > 100000 || mn > 100000) return fail(s, "minItems/maxItems above 100000 are not supported");
    int ir = json_is_object(items) ? compile_at(s, items, "items", NULL, -1) : s->value;
    long long L = mx >= 0 ? mx : (k > mn ? k : mn) > 1 ? (k > mn ? k : mn) : 1;
    int *er = malloc((size_t)(L + 1) * sizeof *er);  /* er[j]: the rule of element j */
    if (!er) return oom(s);
    for (long long j = 0; j < L && !s->rc; j++) er[j] = j < k ? compile_at(s, json_array_get(pre, (size_t)j), "prefixItems", NULL, (long)j) : ir;
    if (s->rc) {
        free(er);
        return -1;
    }
    /* T_j: after j elements. */
    int t = rule(s);
    alt(s, t, "");
    if (mx < 0) alt(s, t, "lrrr", ",", s->ws, ir, t);
    for (long long j = L - 1; j >= 1 && !s->rc; j--) {
        int tj = rule(s);
        if (j >= mn) alt(s, tj, "");
        alt(s, tj, "lrrr", ",", s->ws, er[j], t);
        t = tj;
    }
    int e = rule(s), r = rule(s);
    if (mn == 0) alt(s, e, "");
    if (L >= 1) alt(s, e, "rr", er[0], t);
    alt(s, r, "lrl", "[", e, "]");
    free(er);
    return s->rc ? -1 : r;
}

/* "\"" pattern "\"" for `pattern` or `format` (grammar_regex.c). */
static int compile_pattern(sc *s, json_t *node) {
    json_t *pat = json_object_get(node, "pattern"), *fmt = json_object_get(node, "format");
    const char *kw = pat ? "pattern" : "format", *re;
    if (pat && fmt) return fail(s, "keyword \"pattern\" beside \"format\" is not supported");
    if (json_object_get(node, "minLength") || json_object_get(node, "maxLength"))
        return fail(s, "keyword \"%s\" beside \"minLength\"/\"maxLength\" is not supported", kw);
    if (!json_is_string(pat ? pat : fmt)) return fail(s, "\"%s\" must be a string", kw);
    if (pat) re = json_string_value(pat);
    else if (!(re = gb_format_pattern(json_string_value(fmt))))
        return fail(s, "keyword \"format\": \"%.60s\" is not supported (date, time, date-time, uuid and email are)",
                    json_string_value(fmt));
    char msg[200];
    int body = gb_regex(s->g, re, s->sbody, msg, sizeof msg);
    if (body < 0 && s->g->over) return oom(s);
    if (body < 0) return fail(s, "keyword \"pattern\" \"%.80s\": %s", re, msg);
    int r = rule(s);
    alt(s, r, "lrl", "\"", body, "\"");
    return s->rc ? -1 : r;
}

static int compile_string(sc *s, json_t *node) {
    if (json_object_get(node, "pattern") || json_object_get(node, "format")) return compile_pattern(s, node);
    long long mn = count_kw(node, "minLength", 0), mx = count_kw(node, "maxLength", -1);
    if (mn == -2 || mx < -1) return fail(s, "\"minLength\"/\"maxLength\" must be non-negative integers");
    if (mx >= 0 && mn > mx) return fail(s, "minLength %lld is above maxLength %lld: no string fits", mn, mx);
    if (mx > 100000 || mn > 100000) return fail(s, "minLength/maxLength above 100000 are not supported");
    if (mn == 0 && mx < 0) return s->string;
    int tail = s->sbody;
    if (mx >= 0) {
        tail = rule(s);
        alt(s, tail, "");
        for (long long i = mn + 1; i <= mx && !s->rc; i++) {
            int n = rule(s);
            alt(s, n, "");
            alt(s, n, "rr", s->chr, tail);
            tail = n;
        }
    }
    for (long long i = 0; i < mn && !s->rc; i++) {
        int n = rule(s);
        alt(s, n, "rr", s->chr, tail);
        tail = n;
    }
    int r = rule(s);
    alt(s, r, "lrl", "\"", tail, "\"");
    return s->rc ? -1 : r;
}

/* Alternatives of rule r for every n-digit string from l to h (n >= 1, l <= h), after the sets
 * pre[0..k). */
static void same_len(sc *s, int r, int *pre, int k, const char *l, const char *h, int n) {
    if (s->rc) return;
    if (n == 0) {
        for (int i = 0; i < k; i++) gseq_chars(s->g, &s->q, pre[i]);
        if (gb_alt(s->g, r, &s->q)) oom(s);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    if (l[0] == h[0]) {
        pre[k] = gb_set_byte(s->g, l[0]);
        same_len(s, r, pre, k + 1, l + 1, h + 1, n - 1);
        return;
    }
    if (!strncmp(l + 1, zeros, (size_t)n - 1) && !strncmp(h + 1, nines, (size_t)n - 1)) {
        pre[k] = range(s, l[0], h[0]);
        for (int i = 1; i < n; i++) pre[k + i] = s->digit;
        same_len(s, r, pre, k + n, "", "", 0);
        return;
    }
    pre[k] = gb_set_byte(s->g, l[0]);
    same_len(s, r, pre, k + 1, l + 1, nines, n - 1);
    if (l[0] + 1 <= h[0] - 1) {
        pre[k] = range(s, l[0] + 1, h[0] - 1);
        for (int i = 1; i < n; i++) pre[k + i] = s->digit;
        same_len(s, r, pre, k + n, "", "", 0);
    }
    pre[k] = gb_set_byte(s->g, h[0]);
    same_len(s, r, pre, k + 1, zeros, h + 1, n - 1);
}

/* Alternatives of r for a..b (0 <= a <= b), after `sign` ("" or "-"). */
static void pos_range(sc *s, int r, const char *sign, long long a, long long b) {
    long long p = 1;  /* 10^(n-1) */
    for (int n = 1; n <= 19 && !s->rc; n++) {
        long long lo = n == 1 ? 0 : p, hi = n == 19 ? b : p * 10 - 1;
        if (lo < a) lo = a;
        if (hi > b) hi = b;
        if (lo <= hi) {
            char ls[24], hs[24];
            snprintf(ls, sizeof ls, "%lld", lo);
            snprintf(hs, sizeof hs, "%lld", hi);
            int pre[48], k = 0;
            if (*sign) pre[k++] = gb_set_byte(s->g, '-');
            same_len(s, r, pre, k, ls, hs, n);
        }
        if (n < 19) p *= 10;
    }
}

static int bound(sc *s, json_t *node, const char *kw, int upper, long long *out) {
    json_t *v = json_object_get(node, kw);
    if (!v) return 0;
    if (!json_is_number(v)) return fail(s, "\"%s\" must be a number", kw);
    double x = json_number_value(v);
    if (x > 1e18 || x < -1e18) return fail(s, "\"%s\" %g is beyond the integers iris writes (|x| <= 1e18)", kw, x);
    long long f = (long long)x;  /* toward zero */
    int excl = !strncmp(kw, "exclusive", 9);
    if (upper) {
        if ((double)f > x) f--;
        if (excl && (double)f == x) f--;
        if (f < *out) *out = f;
    } else {
        if ((double)f < x) f++;
        if (excl && (double)f == x) f++;
        if (f > *out) *out = f;
    }
    return 0;
}

static int compile_integer(sc *s, json_t *node) {
    const char *kws[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    int any = 0;
    for (int i = 0; i < 4; i++) any |= json_object_get(node, kws[i]) != NULL;
    if (!any) return s->integer;
    long long lo = -1000000000000000000LL, hi = 1000000000000000000LL, big = 9999999999999999LL;
    if (bound(s, node, "minimum", 0, &lo) || bound(s, node, "exclusiveMinimum", 0, &lo) ||
        bound(s, node, "maximum", 1, &hi) || bound(s, node, "exclusiveMaximum", 1, &hi))
        return -1;
    if (lo == -1000000000000000000LL) lo = hi < -big ? hi : -big;
    if (hi == 1000000000000000000LL) hi = lo > big ? lo : big;
    if (lo > hi) return fail(s, "integer bounds admit nothing (from %lld to %lld)", lo, hi);
    int r = rule(s);
    if (lo < 0) pos_range(s, r, "-", hi < 0 ? -hi : 1, -lo);
    if (hi >= 0) pos_range(s, r, "", lo > 0 ? lo : 0, hi);
    return s->rc ? -1 : r;
}

static int compile_type(sc *s, json_t *node, const char *t) {
    if (!strcmp(t, "object")) return compile_object(s, node);
    if (!strcmp(t, "array")) return compile_array(s, node);
    if (!strcmp(t, "string")) return compile_string(s, node);
    if (!strcmp(t, "integer")) return compile_integer(s, node);
    if (!strcmp(t, "number")) {
        const char *kws[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
        for (int i = 0; i < 4; i++)
            if (json_object_get(node, kws[i]))
                return fail(s, "keyword \"%s\" is supported on integers only, not on numbers", kws[i]);
        return s->number;
    }
    int r = rule(s);
    if (!strcmp(t, "boolean")) {
        alt(s, r, "l", "true");
        alt(s, r, "l", "false");
    } else if (!strcmp(t, "null")) alt(s, r, "l", "null");
    else return fail(s, "unknown type \"%s\"", t);
    return r;
}

/* The type a schema without "type" describes by its keywords, or NULL (any value). */
static const char *implied_type(json_t *node) {
    static const char *const by[][2] = {{"properties", "object"}, {"additionalProperties", "object"},
                                        {"required", "object"},   {"items", "array"},
                                        {"prefixItems", "array"}, {"minItems", "array"},
                                        {"maxItems", "array"},    {"minLength", "string"},
                                        {"maxLength", "string"},  {"pattern", "string"},
                                        {"format", "string"},     {"minimum", "integer"},
                                        {"maximum", "integer"},   {"exclusiveMinimum", "integer"},
                                        {"exclusiveMaximum", "integer"}};
    for (size_t i = 0; i < sizeof by / sizeof by[0]; i++)
        if (json_object_get(node, by[i][0])) return by[i][1];
    return NULL;
}

/* ---- a schema ----------------------------------------------------------------------------------- */

static int compile_any_of(sc *s, json_t *list, const char *kw) {
    if (!json_is_array(list) || !json_array_size(list)) return fail(s, "\"%s\" must be a non-empty array", kw);
    int r = rule(s);
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
        int b = compile_at(s, v, kw, NULL, (long)i);
        if (b < 0) return -1;
        alt(s, r, "r", b);
    }
    return s->rc ? -1 : r;
}

/* Validation keywords other than `except` beside a combinator (refused: they would be ignored). */
static int lone(sc *s, json_t *node, const char *kw, const char *also) {
    const char *k;
    json_t *v;
    json_object_foreach(node, k, v) {
        if (!strcmp(k, kw) || (also && !strcmp(k, also)) || !strcmp(k, "$defs") || !strcmp(k, "definitions"))
            continue;
        int annotation = 0;
        for (int i = 0; honoured[i]; i++)
            if (!strcmp(k, honoured[i])) annotation = i >= FIRST_ANNOTATION;
        if (!annotation) return fail(s, "keyword \"%s\" beside \"%s\" is not supported", k, kw);
    }
    return 0;
}

static int compile(sc *s, json_t *node) {
    if (s->rc) return -1;
    if (json_is_true(node)) return s->value;
    if (json_is_false(node)) return fail(s, "a false schema admits no value");
    if (!json_is_object(node)) return fail(s, "a schema must be an object or a boolean");
    if (check_keywords(s, node)) return -1;
    if (++s->depth > MAX_DEPTH) return fail(s, "schemas nested deeper than %d are not supported", MAX_DEPTH);
    int r = -1;
    json_t *v, *t = json_object_get(node, "type");
    if ((v = json_object_get(node, "$ref"))) {
        if (!json_is_string(v)) r = fail(s, "\"$ref\" must be a string");
        else if (!lone(s, node, "$ref", NULL)) r = compile_ref(s, json_string_value(v));
    } else if ((v = json_object_get(node, "const"))) {
        if (!lone(s, node, "const", "type")) literal_alt(s, r = rule(s), v);
    } else if ((v = json_object_get(node, "enum"))) {
        if (!json_is_array(v) || !json_array_size(v)) r = fail(s, "\"enum\" must be a non-empty array");
        else if (!lone(s, node, "enum", "type")) {
            r = rule(s);
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) literal_alt(s, r, e);
        }
    } else if ((v = json_object_get(node, "anyOf"))) {
        if (!lone(s, node, "anyOf", NULL)) r = compile_any_of(s, v, "anyOf");
    } else if ((v = json_object_get(node, "oneOf"))) {
        if (!lone(s, node, "oneOf", NULL)) r = compile_any_of(s, v, "oneOf");
    } else if (json_is_string(t)) {
        r = compile_type(s, node, json_string_value(t));
    } else if (json_is_array(t) && json_array_size(t)) {
        r = rule(s);
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e) {
            int b = json_is_string(e) ? compile_type(s, node, json_string_value(e)) : fail(s, "\"type\" lists names");
            if (b < 0) break;
            alt(s, r, "r", b);
        }
    } else if (t) {
        r = fail(s, "\"type\" must be a name or a list of names");
    } else {
        const char *it = implied_type(node);
        r = it ? compile_type(s, node, it) : s->value;
    }
    s->depth--;
    return s->rc ? -1 : r;
}

/* ---- left recursion ------------------------------------------------------------------------- */

static int nullable_fix(const iris_grammar *g, unsigned char *nul) {
    int changed = 1;
    while (changed) {
        changed = 0;
        for (int r = 0; r < g->n_rules; r++) {
            if (nul[r]) continue;
            for (int a = 0; a < g->rules[r].n && !nul[r]; a++) {
                const gelem *e = &g->el[g->rules[r].alts[a]];
                while (e->type == GE_REF && nul[e->arg]) e++;
                if (e->type == GE_END) nul[r] = changed = 1;
            }
        }
    }
    return 0;
}

/* 1 when rule r reaches itself through first positions (color: 0 new, 1 on the path, 2 done). */
static int left_cycle(const iris_grammar *g, const unsigned char *nul, unsigned char *color, int r) {
    if (color[r] == 1) return 1;
    if (color[r] == 2) return 0;
    color[r] = 1;
    for (int a = 0; a < g->rules[r].n; a++)
        for (const gelem *e = &g->el[g->rules[r].alts[a]]; e->type == GE_REF; e++) {
            if (left_cycle(g, nul, color, e->arg)) return 1;
            if (!nul[e->arg]) break;
        }
    color[r] = 2;
    return 0;
}

static int check_left_recursion(sc *s) {
    const iris_grammar *g = s->g;
    unsigned char *nul = calloc((size_t)g->n_rules * 2, 1);
    if (!nul) return oom(s);
    unsigned char *color = nul + g->n_rules;
    nullable_fix(g, nul);
    int bad = 0;
    for (int r = 0; r < g->n_rules && !bad; r++) bad = left_cycle(g, nul, color, r);
    free(nul);
    return bad ? fail(s, "the schema refers to itself before writing anything (a $ref cycle through "
                         "anyOf/oneOf/$ref only)") : 0;
}

int iris_grammar_from_schema(const char *schema_json, iris_grammar **out, iris_err *err) {
    *out = NULL;
    json_error_t je;
    json_t *root = json_loads(schema_json, JSON_DECODE_ANY, &je);
    if (!root) return iris_err_set(err, IRIS_EINVAL, "json schema: not valid JSON: %s (at %d:%d)", je.text, je.line,
                                   je.column);
    sc s = {.root = root, .err = err};
    s.g = calloc(1, sizeof *s.g);
    if (!s.g) {
        json_decref(root);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    gb_init(s.g);
    s.g->max_el = COMPILE_MAX_ELEMS;
    s.t_end = iris_now_s() + COMPILE_MAX_MS / 1e3;
    shared_rules(&s);
    int r = s.rc ? -1 : compile(&s, root);
    if (!s.rc) check_left_recursion(&s);
    for (int i = 0; i < s.n_refs; i++) free(s.refs[i].ref);
    free(s.refs);
    free(s.q.e);
    json_decref(root);
    if (s.rc || r < 0) {
        iris_grammar_free(s.g);
        return s.rc ? s.rc : iris_err_set(err, IRIS_EINVAL, "json schema: cannot be compiled");
    }
    s.g->root = r;
    *out = s.g;
    return IRIS_OK;
}
