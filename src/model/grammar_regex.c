/* grammar_regex.c: a JSON Schema `pattern` (ECMA-262 syntax, a subset) -> grammar rules that
 * write the JSON text of the strings it matches, and the `format`s as fixed patterns.
 *
 * The subset: literal characters (UTF-8 included), escapes \. \\ \/ and every other escaped
 * ASCII punctuation, \n \r \t \f \v \0 \xHH \uHHHH; classes [abc] [a-z] [^...] with those
 * escapes and \d \w \s \D \W \S inside; . \d \D \w \W \s \S; groups (...) (?:...) (?<name>...);
 * alternation |; quantifiers ? * + {m} {m,} {m,n} (m, n <= 1000; a lazy ? after one changes
 * nothing about which strings match); ^ only at the start and $ only at the end of the
 * pattern or of one of its top-level alternatives.  A side without its anchor matches anywhere
 * (any string text may come before or after it), as JSON Schema says.  Refused by name:
 * backreferences (\1, \k<..>), lookahead and lookbehind ((?=, (?!, (?<=, (?<!), word
 * boundaries (\b \B), \p{..}, \cX, inline flags, possessive quantifiers, anchors elsewhere,
 * and a repeated part that can match the empty string under * + or {m,} ((a?)*).
 *
 * Which strings are written (each matches the pattern, in ECMA-262 and in PCRE2 alike):
 * characters are written raw (UTF-8), except " and \ (\" and \\) and control characters
 * (\b \f \n \r \t, else \u00XX); \d \w are ASCII as in ECMA-262; \s and a class holding it
 * write ASCII whitespace only, while \S, [^\s] and . exclude every ECMA-262 white space or line
 * terminator they must (. writes no \n, \r, U+2028, U+2029); surrogates are never written.
 *
 * Formats (gb_format_pattern gives each one's pattern, compiled as above):
 *   date       RFC 3339 full-date YYYY-MM-DD, days checked against the month, 29 February in
 *              leap years only;
 *   time       RFC 3339 full-time HH:MM:SS, 1 to 9 fraction digits optional, then Z or
 *              +HH:MM/-HH:MM (hours 00-23, minutes and seconds 00-59; no leap second);
 *   date-time  date "T" time;
 *   uuid       8-4-4-4-12 hexadecimal digits, either case;
 *   email      1 to 8 dot-separated atoms of 1 to 64 of RFC 5322's atext characters
 *              ([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]), "@", 2 to 8 dot-separated labels of 1 to 63
 *              letters, digits or inner hyphens (no quoted local parts, no IP literals; bounded,
 *              so an email always finishes).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar_internal.h"

#define MAX_REPEAT 1000
#define MAX_RANGES 256
#define MAX_NEST 64

typedef struct cpr {
    uint32_t lo, hi;
} cpr;

typedef struct cclass {
    cpr r[MAX_RANGES];
    int n;
} cclass;

typedef struct rx {
    iris_grammar *g;
    const unsigned char *p, *end;
    int any;  /* rule: any string text, for an unanchored side */
    char *msg;
    size_t cap;
    int bad, depth;
} rx;

/* An element of a sequence: a byte set or a rule, and whether it can match nothing. */
typedef struct item {
    int type, arg, nullable;
} item;

static int rx_fail(rx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rx_fail(rx *x, const char *fmt, ...) {
    if (!x->bad) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->msg, x->cap, fmt, ap);
        va_end(ap);
        x->bad = 1;
    }
    return -1;
}

static int rx_oom(rx *x) { return rx_fail(x, "the grammar grew past its limit or memory ran out"); }

static int new_rule(rx *x) {
    int r = gb_rule(x->g);
    return r < 0 ? rx_oom(x) : r;
}

static void add_alt(rx *x, int rule, gseq *q) {
    if (!x->bad && gb_alt(x->g, rule, q)) rx_oom(x);
    q->n = 0;
}

/* ---- character classes: sorted ranges of code points ------------------------------------- */

static void cls_add(rx *x, cclass *c, uint32_t lo, uint32_t hi) {
    if (c->n == MAX_RANGES) {
        rx_fail(x, "a character class of more than %d ranges", MAX_RANGES);
        return;
    }
    c->r[c->n++] = (cpr){lo, hi};
}

static int cmp_cpr(const void *a, const void *b) {
    const cpr *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

static void cls_norm(cclass *c) {
    qsort(c->r, (size_t)c->n, sizeof *c->r, cmp_cpr);
    int k = 0;
    for (int i = 0; i < c->n; i++) {
        if (k && c->r[i].lo <= c->r[k - 1].hi + 1) {
            if (c->r[i].hi > c->r[k - 1].hi) c->r[k - 1].hi = c->r[i].hi;
        } else c->r[k++] = c->r[i];
    }
    c->n = k;
}

/* c := every code point (surrogates aside) not in c. */
static void cls_negate(cclass *c) {
    cls_norm(c);
    cclass o = {.n = 0};
    uint32_t next = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->r[i].lo > next) o.r[o.n++] = (cpr){next, c->r[i].lo - 1};
        next = c->r[i].hi + 1;
    }
    if (next <= 0x10FFFF) o.r[o.n++] = (cpr){next, 0x10FFFF};
    *c = o;
}

/* ECMA-262's white space and line terminators (\s). */
static const cpr SPACES[] = {{0x09, 0x0D}, {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                             {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

/* \d \w \s (ascii_only: only the ASCII spaces) or their negations \D \W \S, added to c. */
static void cls_escape(rx *x, cclass *c, int e, int ascii_only) {
    cclass t = {.n = 0};
    int lower = e >= 'a';
    switch (e | 0x20) {
    case 'd': cls_add(x, &t, '0', '9'); break;
    case 'w':
        cls_add(x, &t, '0', '9');
        cls_add(x, &t, 'A', 'Z');
        cls_add(x, &t, '_', '_');
        cls_add(x, &t, 'a', 'z');
        break;
    default:
        for (size_t i = 0; i < sizeof SPACES / sizeof *SPACES; i++)
            if (!(lower && ascii_only && SPACES[i].lo >= 0x80)) cls_add(x, &t, SPACES[i].lo, SPACES[i].hi);
    }
    if (!lower) cls_negate(&t);
    for (int i = 0; i < t.n; i++) cls_add(x, c, t.r[i].lo, t.r[i].hi);
}

static int utf8_len(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

static void utf8_put(uint32_t c, unsigned char *b) {
    int n = utf8_len(c);
    if (n == 1) b[0] = (unsigned char)c;
    else {
        for (int i = n - 1; i > 0; i--, c >>= 6) b[i] = (unsigned char)(0x80 | (c & 0x3F));
        b[0] = (unsigned char)((n == 2 ? 0xC0 : n == 3 ? 0xE0 : 0xF0) | c);
    }
}

/* Alternatives of `rule` for the code points a..b of one UTF-8 length, split until each is a
 * run of byte ranges (the usual split at continuation-byte boundaries). */
static void utf8_alts(rx *x, int rule, uint32_t a, uint32_t b) {
    int n = utf8_len(a);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((a & ~m) == (b & ~m)) continue;
        if (a & m) {
            utf8_alts(x, rule, a, a | m);
            utf8_alts(x, rule, (a | m) + 1, b);
            return;
        }
        if ((b & m) != m) {
            utf8_alts(x, rule, a, (b & ~m) - 1);
            utf8_alts(x, rule, b & ~m, b);
            return;
        }
    }
    unsigned char A[4], B[4];
    utf8_put(a, A);
    utf8_put(b, B);
    gseq q = {0};
    for (int k = 0; k < n; k++) gseq_chars(x->g, &q, A[k] == B[k] ? gb_set_byte(x->g, A[k]) : gb_set_range(x->g, A[k], B[k]));
    add_alt(x, rule, &q);
    free(q.e);
}

/* A class as an element: one byte set when it writes single raw bytes only, else a rule. */
static item cls_emit(rx *x, cclass *c) {
    cls_norm(c);
    gset raw = {{0}};
    int n_raw = 0, r = -1;
    gseq q = {0};
    for (int i = 0; i < c->n && !x->bad; i++)
        for (uint32_t cp = c->r[i].lo; cp <= c->r[i].hi && cp < 0x80; cp++) {
            if (cp >= 0x20 && cp != '"' && cp != '\\') {
                raw.w[cp >> 5] |= 1u << (cp & 31);
                n_raw++;
                continue;
            }
            char esc[8];
            const char *shorts = "\b\f\n\r\t", *names = "bfnrt", *at = cp ? strchr(shorts, (int)cp) : NULL;
            if (cp == '"' || cp == '\\') snprintf(esc, sizeof esc, "\\%c", (char)cp);
            else if (at) snprintf(esc, sizeof esc, "\\%c", names[at - shorts]);
            else snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
            if (r < 0) r = new_rule(x);
            gseq_lit(x->g, &q, esc, strlen(esc));
            add_alt(x, r, &q);
        }
    for (int i = 0; i < c->n && !x->bad; i++) {
        uint32_t lo = c->r[i].lo < 0x80 ? 0x80 : c->r[i].lo, hi = c->r[i].hi;
        uint32_t cuts[][2] = {{lo, hi < 0x7FF ? hi : 0x7FF}, {lo > 0x800 ? lo : 0x800, hi < 0xD7FF ? hi : 0xD7FF},
                              {lo > 0xE000 ? lo : 0xE000, hi < 0xFFFF ? hi : 0xFFFF}, {lo > 0x10000 ? lo : 0x10000, hi}};
        for (int k = 0; k < 4; k++) {
            if (cuts[k][0] > cuts[k][1] || cuts[k][0] > 0x10FFFF) continue;
            if (r < 0) r = new_rule(x);
            utf8_alts(x, r, cuts[k][0], cuts[k][1]);
        }
    }
    if (x->bad || (!n_raw && r < 0)) {
        free(q.e);
        if (!x->bad) rx_fail(x, "a character class that matches nothing");
        return (item){GE_REF, -1, 0};
    }
    int one = -1;
    for (int b = 0; n_raw == 1 && b < 128; b++)
        if (gset_has(&raw, b)) one = b;
    int set = one >= 0 ? gb_set_byte(x->g, one) : n_raw ? gb_set(x->g, &raw) : -1;
    if (n_raw && set >= 0 && r >= 0) {
        gseq_chars(x->g, &q, set);
        add_alt(x, r, &q);
    }
    free(q.e);
    if (n_raw && set < 0) return rx_oom(x), (item){GE_REF, -1, 0};
    return r < 0 ? (item){GE_CHARS, set, 0} : (item){GE_REF, r, 0};
}

/* ---- the parser ------------------------------------------------------------------------------ */

static int peek(const rx *x) { return x->p < x->end ? *x->p : -1; }

/* The next code point of the pattern (valid UTF-8: it came through a JSON parser). */
static uint32_t next_cp(rx *x) {
    uint32_t c = *x->p++;
    int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    if (more) c &= 0x3F >> more;
    for (; more && x->p < x->end; more--) c = c << 6 | (*x->p++ & 0x3F);
    return c;
}

static int hex_digits(rx *x, int n, uint32_t *out) {
    *out = 0;
    for (int i = 0; i < n; i++) {
        int c = peek(x);
        int v = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
        if (v < 0) return rx_fail(x, "\\%c needs %d hexadecimal digits", n == 2 ? 'x' : 'u', n);
        *out = *out << 4 | (uint32_t)v;
        x->p++;
    }
    return 0;
}

/* After a backslash: a code point (>= 0), or the class letter as -'d' etc., or -1 (refused). */
static long escape(rx *x, int in_class) {
    if (x->p >= x->end) return rx_fail(x, "the pattern ends with a lone backslash");
    int c = *x->p;
    if (c >= 0x80) return (long)next_cp(x);
    x->p++;
    uint32_t v;
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': return -c;
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    case 'x': return hex_digits(x, 2, &v) ? -1 : (long)v;
    case 'u':
        if (hex_digits(x, 4, &v)) return -1;
        if (v >= 0xD800 && v <= 0xDFFF) return rx_fail(x, "\\u%04X: surrogate escapes are not supported", v);
        return (long)v;
    case 'b':
        if (in_class) return '\b';
        /* fall through */
    case 'B': return rx_fail(x, "word boundaries (\\%c) are not supported", c);
    case 'k': return rx_fail(x, "backreferences (\\k<name>) are not supported");
    case 'p': case 'P': return rx_fail(x, "Unicode property escapes (\\%c{...}) are not supported", c);
    case 'c': return rx_fail(x, "control escapes (\\cX) are not supported");
    case '0':
        if (peek(x) >= '0' && peek(x) <= '9') return rx_fail(x, "octal escapes are not supported");
        return 0;
    }
    if (c >= '1' && c <= '9') return rx_fail(x, "backreferences (\\%c) are not supported", c);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return rx_fail(x, "unknown escape \\%c", c);
    return c;
}

/* [...] after the '[' */
static item parse_class(rx *x) {
    cclass c = {.n = 0};
    int neg = peek(x) == '^';
    if (neg) x->p++;
    for (int first = 1; !x->bad; first = 0) {
        if (x->p >= x->end) return rx_fail(x, "a character class without its closing ]"), (item){GE_REF, -1, 0};
        if (*x->p == ']' && !first) break;
        if (*x->p == ']') return rx_fail(x, "an empty character class []"), (item){GE_REF, -1, 0};
        long lo;
        if (*x->p == '\\') {
            x->p++;
            lo = escape(x, 1);
        } else lo = (long)next_cp(x);
        if (x->bad) break;
        if (lo < -1) {
            cls_escape(x, &c, (int)-lo, !neg);
            continue;
        }
        long hi = lo;
        if (peek(x) == '-' && x->p + 1 < x->end && x->p[1] != ']') {
            x->p++;
            if (*x->p == '\\') {
                x->p++;
                hi = escape(x, 1);
            } else hi = (long)next_cp(x);
            if (hi < -1) return rx_fail(x, "a range ending in a class escape"), (item){GE_REF, -1, 0};
            if (hi < lo) return rx_fail(x, "a range out of order in a character class"), (item){GE_REF, -1, 0};
        }
        cls_add(x, &c, (uint32_t)lo, (uint32_t)hi);
    }
    if (x->bad) return (item){GE_REF, -1, 0};
    x->p++;
    if (neg) cls_negate(&c);
    return cls_emit(x, &c);
}

static int parse_alt(rx *x, int top, int *nullable);

/* One atom: a literal, a class, a group or an escape. */
static item parse_atom(rx *x) {
    int c = peek(x);
    cclass cl = {.n = 0};
    if (c == '(') {
        x->p++;
        if (peek(x) == '?') {
            const char *s = (const char *)x->p;
            size_t left = (size_t)(x->end - x->p);
            if (left >= 2 && s[1] == ':') x->p += 2;
            else if (left >= 3 && (s[1] == '=' || s[1] == '!' || (s[1] == '<' && (s[2] == '=' || s[2] == '!'))))
                return rx_fail(x, "lookahead and lookbehind (%.3s) are not supported", s - 1), (item){GE_REF, -1, 0};
            else if (left >= 2 && (s[1] == '<' || (s[1] == 'P' && left >= 3 && s[2] == '<'))) {
                const char *gt = memchr(s, '>', left);
                if (!gt) return rx_fail(x, "a group name without its closing >"), (item){GE_REF, -1, 0};
                x->p = (const unsigned char *)gt + 1;
            } else return rx_fail(x, "inline flags and other (? groups are not supported"), (item){GE_REF, -1, 0};
        }
        if (++x->depth > MAX_NEST) return rx_fail(x, "groups nested deeper than %d", MAX_NEST), (item){GE_REF, -1, 0};
        int nullable = 0, r = parse_alt(x, 0, &nullable);
        x->depth--;
        if (r < 0) return (item){GE_REF, -1, 0};
        if (peek(x) != ')') return rx_fail(x, "a group without its closing )"), (item){GE_REF, -1, 0};
        x->p++;
        return (item){GE_REF, r, nullable};
    }
    if (c == '[') {
        x->p++;
        return parse_class(x);
    }
    if (c == '.') {
        x->p++;
        const uint32_t nl[][2] = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};
        for (int i = 0; i < 3; i++) cls_add(x, &cl, nl[i][0], nl[i][1]);
        cls_negate(&cl);
        return cls_emit(x, &cl);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{')
        return rx_fail(x, "a quantifier (%c) with nothing to repeat", c), (item){GE_REF, -1, 0};
    if (c == '^' || c == '$')
        return rx_fail(x, "the anchor %c is supported only at the start (^) or end ($) of the pattern", c),
               (item){GE_REF, -1, 0};
    long cp;
    if (c == '\\') {
        x->p++;
        cp = escape(x, 0);
    } else cp = (long)next_cp(x);
    if (x->bad) return (item){GE_REF, -1, 0};
    if (cp < -1) cls_escape(x, &cl, (int)-cp, 1);
    else cls_add(x, &cl, (uint32_t)cp, (uint32_t)cp);
    return cls_emit(x, &cl);
}

static void seq_item(gseq *q, item it) {
    if (it.type == GE_CHARS) gseq_chars(NULL, q, it.arg);
    else gseq_ref(q, it.arg);
}

/* A quantifier's counts when one follows: 1 and *mn, *mx (-1: unbounded), else 0. */
static int quantifier(rx *x, long *mn, long *mx) {
    int c = peek(x);
    if (c == '?' || c == '*' || c == '+') {
        x->p++;
        *mn = c == '+';
        *mx = c == '?' ? 1 : -1;
        return 1;
    }
    if (c != '{') return 0;
    char *e;
    const char *s = (const char *)x->p + 1;
    if (*s < '0' || *s > '9') return rx_fail(x, "a { that is not a quantifier {m}, {m,} or {m,n} (write \\{)");
    *mn = strtol(s, &e, 10);
    *mx = *mn;
    if (*e == ',') {
        s = e + 1;
        *mx = *s == '}' ? -1 : (*s >= '0' && *s <= '9') ? strtol(s, &e, 10) : -2;
        if (*s == '}') e = (char *)s;
    }
    if (*mx == -2 || *e != '}') return rx_fail(x, "a malformed quantifier {m}, {m,} or {m,n}");
    if (*mn > MAX_REPEAT || *mx > MAX_REPEAT) return rx_fail(x, "repetition counts above %d are not supported", MAX_REPEAT);
    if (*mx >= 0 && *mx < *mn) return rx_fail(x, "a quantifier {%ld,%ld} out of order", *mn, *mx);
    x->p = (const unsigned char *)e + 1;
    return 1;
}

/* `it` repeated mn..mx times (mx -1: unbounded) as a rule. */
static item repeat(rx *x, item it, long mn, long mx) {
    if (mx < 0 && it.nullable)
        return rx_fail(x, "a repeated part that can match the empty string (such as (a?)*) is not supported"),
               (item){GE_REF, -1, 0};
    gseq q = {0};
    int tail = new_rule(x);
    add_alt(x, tail, &q);
    if (mx < 0) {
        seq_item(&q, it);
        gseq_ref(&q, tail);
        add_alt(x, tail, &q);
    }
    for (long k = mn; mx >= 0 && k < mx && !x->bad; k++) {
        int t = new_rule(x);
        add_alt(x, t, &q);
        seq_item(&q, it);
        gseq_ref(&q, tail);
        add_alt(x, t, &q);
        tail = t;
    }
    int r = new_rule(x);
    for (long k = 0; k < mn; k++) seq_item(&q, it);
    gseq_ref(&q, tail);
    add_alt(x, r, &q);
    free(q.e);
    return (item){GE_REF, x->bad ? -1 : r, mn == 0 || it.nullable};
}

/* Alternatives up to ')' or the end; at the top, each may carry its ^ and $. */
static int parse_alt(rx *x, int top, int *nullable) {
    int r = new_rule(x);
    gseq q = {0};
    while (!x->bad) {
        int anchored = 0, all_null = 1;
        if (top && peek(x) == '^') {
            x->p++;
            anchored = 1;
        }
        if (top && !anchored) gseq_ref(&q, x->any);
        while (!x->bad && x->p < x->end && *x->p != '|' && *x->p != ')') {
            if (top && *x->p == '$' && (x->p + 1 == x->end || x->p[1] == '|')) {
                x->p++;
                anchored |= 2;
                break;
            }
            item it = parse_atom(x);
            long mn = 0, mx = 0;
            if (!x->bad && quantifier(x, &mn, &mx)) {
                if (peek(x) == '+') rx_fail(x, "possessive quantifiers are not supported");
                if (peek(x) == '?') x->p++;
                if (!x->bad) it = repeat(x, it, mn, mx);
            }
            if (x->bad) break;
            all_null &= it.nullable;
            seq_item(&q, it);
        }
        if (top && !(anchored & 2)) gseq_ref(&q, x->any);
        *nullable |= all_null;
        add_alt(x, r, &q);
        if (peek(x) != '|') break;
        x->p++;
    }
    free(q.e);
    if (x->bad) return -1;
    if (top && x->p < x->end) return rx_fail(x, "an unbalanced )");
    return r;
}

int gb_regex(iris_grammar *g, const char *pattern, int any_text, char *msg, size_t cap) {
    rx x = {.g = g, .p = (const unsigned char *)pattern, .end = (const unsigned char *)pattern + strlen(pattern),
            .any = any_text, .msg = msg, .cap = cap};
    int nullable = 0, r = parse_alt(&x, 1, &nullable);
    return x.bad ? -1 : r;
}

/* RFC 3339 full-date and full-time (the opening comment says what each admits). */
#define DATE                                                                                        \
    "(?:(?:\\d\\d(?:[02468][48]|[13579][26]|[2468]0)|(?:[02468][048]|[13579][26])00)-02-29"                \
    "|\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)"          \
    "|02-(?:0[1-9]|1\\d|2[0-8])))"
#define TIME "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,9})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)"
#define ATEXT "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
#define LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"

const char *gb_format_pattern(const char *format) {
    static const char *const formats[][2] = {
        {"date", "^" DATE "$"},
        {"time", "^" TIME "$"},
        {"date-time", "^" DATE "T" TIME "$"},
        {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
        {"email", "^" ATEXT "{1,64}(?:\\." ATEXT "{1,64}){0,7}@(?:" LABEL "\\.){1,7}" LABEL "$"},
    };
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
        if (!strcmp(format, formats[i][0])) return formats[i][1];
    return NULL;
}
