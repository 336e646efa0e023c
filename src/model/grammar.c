/* grammar.c: the matcher (grammar.h says what it is; grammar_build.c builds grammars,
 * grammar_schema.c writes them from JSON Schemas, grammar_vocab.c builds the trie).
 *
 * The matcher's state is a set of parse stacks.  A stack is a persistent list of element
 * positions (the top is the next byte set to match, below it where to return when that
 * alternative ends), hash-consed in an arena so a stack is one int and node 0 is the empty
 * stack (the output is complete).  Advancing by a byte keeps the stacks whose top set holds the
 * byte, steps them past it and expands rule references until every top is a byte set again.
 * Sets are interned and (set, byte) -> set memoized in rows; bytes the same stacks' tops allow
 * lead to the same set, so one step fills its byte class of a row.
 *
 * The mask inside a string (text_mask; xgrammar's split into context-independent tokens and
 * context-dependent ones): when the set reads string text as a string does (every character
 * leads to one same set, text_next, as deep as any token's text: text_ok, or exactly d deep and
 * then no further, the last d characters under a maxLength: text_exact), a token that is all
 * text is decided by its code points alone, so those bits are one copy of a row the vocabulary
 * precomputed (row d: the tokens of at most d code points), and only the ~4,900 mixed tokens
 * (text, then a quote, a backslash, a control byte...) run through the memo, each from the
 * chain's set after its text part, in runs whose first byte the set may refuse at once and
 * whose neighbours share a prefix, answers kept by (set after that byte, tail) across masks.
 * The chain is proven from the stacks (text_chars_exit: each reader of a text lead byte ends
 * its alternative after exactly that character, one parent for all), else stepped, through
 * the middle of characters without memo rows where every top treats a byte range alike.
 * Elsewhere, a depth-first walk of the vocabulary trie carrying the stack set: only children
 * whose byte some top allows are entered (the root's and its children's read from byte
 * lists), a child whose set empties is pruned with its subtree, every token ending at a reached
 * node is allowed; a subtree of string text is allowed whole (or by its per-node list sorted by
 * code points) under the same chain tests.
 * The sets, the memo and the stacks they made are kept across masks (the next step's states
 * were mostly met by the last one), until they pass a budget: then they are dropped and the
 * arena is rebuilt with the current stacks alone (ids change, the mask cache goes), which also
 * bounds the arena over a long output.  The last few masks are cached by their stack set.
 *
 * Invariants: every stack in a set has a GE_CHARS element on top or is node 0; sets carry no
 * duplicates.  A set past MAX_SET stacks or an arena past MAX_STACK_NODES is IRIS_ELIMIT (a
 * pathologically ambiguous schema fails its request, never stalls the engine).
 * Owns: the matcher's arena, hash table, set buffers, memo, chain and mask cache.
 */
#include "model/grammar_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

/* ---- matcher ---------------------------------------------------------------------------- */

#define N_CACHE 8
#define MAX_STACK_NODES (1 << 23)  /* past this, or a set past MAX_SET stacks, a request's grammar */
#define MAX_SET (1 << 16)          /* fails with IRIS_ELIMIT (a pathologically ambiguous schema) */

typedef struct gnode {
    int32_t el, parent, slot;
} gnode;

typedef struct mask_entry {
    int32_t *set;
    int n, cap;
    uint32_t *mask;
    int valid;
} mask_entry;

#define MAX_MEMO_ROWS 4096  /* 256 ints each: 4 MiB at most during a walk */
#define KEEP_MEMO_ROWS 1024 /* kept between masks: 1.25 MiB with their classes */
#define KEEP_SET_INTS (1 << 18)  /* the kept sets' stacks, at most (1 MiB) */
#define KEEP_NODES (1 << 18)     /* stacks made since the last reset, at most (3 MiB) */

typedef struct wset {
    int32_t off, n, row;
    int32_t text_lo, text_fail; /* every string text of text_lo code points is accepted; not of text_fail */
    int32_t text_next;        /* the one set every text character leads to (-1 none, -3 unknown) */
    int32_t text_max;         /* text_exact's answer (-3 unknown) */
    uint32_t hash;
    uint32_t allow[8];        /* bytes some top allows */
} wset;

typedef struct wslot {
    uint32_t gen;
    int32_t id;
} wslot;

struct iris_grammar_matcher {
    const iris_grammar *g;
    const iris_vocab *v;
    gnode *nodes;
    uint32_t *stamp;          /* [cap_nodes] dedupe marks */
    int n_nodes, cap_nodes;
    uint32_t cur_stamp;
    int32_t *ht;              /* node id + 1, 0 empty; linear probing */
    uint32_t ht_mask;
    int ht_grown;             /* the table was rehashed since the last rollback */
    int32_t *cur;             /* the current stack set, sorted */
    int n_cur, cap_cur;
    int32_t *buf;             /* the memo's sets [0, buf_base), then scratch */
    int n_buf, cap_buf, buf_base;
    int arena_base;           /* nodes in the arena after the last memo_reset */
    int keep_rows;            /* memo rows kept between masks (KEEP_MEMO_ROWS; tests lower it) */
    int oom;
    uint32_t *mask;           /* the walk's output */
    mask_entry cache[N_CACHE];
    int cache_next;
    uint64_t cache_hits;
    /* The walks' sets, interned and kept across masks until memo_reset: set i is
     * buf[ws[i].off ..+ ws[i].n); memo rows map a set and a byte to the next set (-2 unknown,
     * -1 empty). */
    wset *ws;
    int n_ws, cap_ws;
    wslot *wht;               /* set hash table; entries of other walks are stale by gen */
    uint32_t wht_mask, gen;
    int32_t *memo;
    int n_rows, cap_rows;
    uint8_t *cls;             /* [row * 256 + byte]: the byte's class for that row's set */
    int cap_cls;
    int no_text;              /* 1: never text_mask (tests compare it with the walk) */
    int text_k;               /* text_mask's depth: the most code points it asks text_ok about */
    uint64_t text_masks;      /* masks text_mask made (tests check the path is taken) */
    int32_t *chain, *tstate;  /* text_mask's sets after j characters, and along a mixed token */
    int cap_chain, cap_tstate;
    uint32_t *sfx_q;          /* [n_sfx] the set a mixed token's suffix was last run from | accepted << 31, */
    uint32_t *sfx_gen;        /* under memo generation sfx_gen (0: never) */
};

static uint32_t node_hash(int32_t el, int32_t parent) {
    uint64_t h = ((uint64_t)(uint32_t)el << 32 | (uint32_t)parent) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32);
}

static int ht_rebuild(iris_grammar_matcher *m, uint32_t size) {
    int32_t *ht = calloc(size, sizeof *ht);
    if (!ht) return -1;
    free(m->ht);
    m->ht = ht;
    m->ht_mask = size - 1;
    for (int i = 1; i < m->n_nodes; i++) {
        uint32_t s = node_hash(m->nodes[i].el, m->nodes[i].parent) & m->ht_mask;
        while (ht[s]) s = (s + 1) & m->ht_mask;
        ht[s] = i + 1;
        m->nodes[i].slot = (int32_t)s;
    }
    return 0;
}

/* The stack (el on top of parent), made if new; -1 when out of memory. */
static int32_t intern(iris_grammar_matcher *m, int32_t el, int32_t parent) {
    uint32_t s = node_hash(el, parent) & m->ht_mask;
    for (int32_t id; (id = m->ht[s]); s = (s + 1) & m->ht_mask)
        if (m->nodes[id - 1].el == el && m->nodes[id - 1].parent == parent) return id - 1;
    if (m->n_nodes >= MAX_STACK_NODES) return m->oom = 2, -1;
    if (m->n_nodes + 1 > m->cap_nodes) {
        int nc = m->cap_nodes * 2;
        gnode *nn = realloc(m->nodes, (size_t)nc * sizeof *nn);
        if (nn) m->nodes = nn;
        uint32_t *ns = nn ? realloc(m->stamp, (size_t)nc * sizeof *ns) : NULL;
        if (!ns) return m->oom = 1, -1;
        m->stamp = ns;
        memset(ns + m->cap_nodes, 0, (size_t)(nc - m->cap_nodes) * sizeof *ns);
        m->cap_nodes = nc;
    }
    int32_t id = m->n_nodes++;
    m->nodes[id] = (gnode){el, parent, (int32_t)s};
    m->stamp[id] = 0;
    m->ht[s] = id + 1;
    if ((uint32_t)m->n_nodes * 2 > m->ht_mask) {
        if (ht_rebuild(m, (m->ht_mask + 1) * 2)) return m->oom = 1, -1;
        m->ht_grown = 1;
    }
    return id;
}

static void rollback(iris_grammar_matcher *m, int mark) {
    if (m->ht_grown) {
        m->n_nodes = mark;
        if (ht_rebuild(m, m->ht_mask + 1)) m->oom = 1;
        m->ht_grown = 0;
        return;
    }
    for (int i = m->n_nodes - 1; i >= mark; i--) m->ht[m->nodes[i].slot] = 0;
    m->n_nodes = mark;
}

static void push_buf(iris_grammar_matcher *m, int32_t x) {
    if (m->n_buf >= MAX_STACK_NODES) {
        m->oom = 2;
        return;
    }
    if (gm_grow((void **)&m->buf, &m->cap_buf, m->n_buf + 1, sizeof *m->buf)) {
        m->oom = 1;
        return;
    }
    m->buf[m->n_buf++] = x;
}

/* The stack after the element at `el` of `parent`'s alternative: parent itself at its end. */
static int32_t next_of(iris_grammar_matcher *m, int32_t el, int32_t parent) {
    return m->g->el[el + 1].type == GE_END ? parent : intern(m, el + 1, parent);
}

/* Append to buf the stacks `n` stands for with a byte set (or nothing) on top. */
static void expand(iris_grammar_matcher *m, int32_t n) {
    if (n < 0 || m->stamp[n] == m->cur_stamp) return;
    m->stamp[n] = m->cur_stamp;
    if (n == 0) {
        push_buf(m, 0);
        return;
    }
    const gelem *e = &m->g->el[m->nodes[n].el];
    if (e->type == GE_CHARS) {
        push_buf(m, n);
        return;
    }
    int32_t cont = next_of(m, m->nodes[n].el, m->nodes[n].parent);
    const grule *r = &m->g->rules[e->arg];
    for (int a = 0; a < r->n; a++) {
        int first = r->alts[a];
        expand(m, m->g->el[first].type == GE_END ? cont : intern(m, first, cont));
    }
}

/* Advance the set buf[off .. off+n) by byte c, appending the result to buf; returns its size. */
static int advance(iris_grammar_matcher *m, int off, int n, int c) {
    int start = m->n_buf;
    m->cur_stamp++;
    for (int i = 0; i < n; i++) {
        int32_t s = m->buf[off + i];
        if (s == 0) continue;
        const gnode *nd = &m->nodes[s];
        if (!gset_has(&m->g->sets[m->g->el[nd->el].arg], c)) continue;
        expand(m, next_of(m, nd->el, nd->parent));
    }
    if (m->n_buf - start > MAX_SET) m->oom = 2;
    return m->n_buf - start;
}

static void allowed_bytes(const iris_grammar_matcher *m, int off, int n, uint32_t w[8]) {
    memset(w, 0, 8 * sizeof *w);
    for (int i = 0; i < n; i++) {
        int32_t s = m->buf[off + i];
        if (!s) continue;
        const gset *set = &m->g->sets[m->g->el[m->nodes[s].el].arg];
        for (int k = 0; k < 8; k++) w[k] |= set->w[k];
    }
}

static uint32_t set_hash(const int32_t *a, int n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)a[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ (h >> 32));
}

/* The set buf[off ..+ n] as an id of this walk (the new copy dropped when it is known). */
static int intern_set(iris_grammar_matcher *m, int off, int n) {
    uint32_t h = set_hash(m->buf + off, n);
    uint32_t s = h & m->wht_mask;
    for (; m->wht[s].gen == m->gen; s = (s + 1) & m->wht_mask) {
        const wset *w = &m->ws[m->wht[s].id];
        if (w->hash == h && w->n == n && !memcmp(m->buf + w->off, m->buf + off, (size_t)n * sizeof *m->buf)) {
            m->n_buf = off;
            return m->wht[s].id;
        }
    }
    if (gm_grow((void **)&m->ws, &m->cap_ws, m->n_ws + 1, sizeof *m->ws)) return m->oom = 1, -1;
    int id = m->n_ws++;
    wset *w = &m->ws[id];
    *w = (wset){.off = off, .n = n, .row = -1, .text_lo = 0, .text_fail = INT32_MAX, .text_next = -3, .text_max = -3,
                .hash = h};
    allowed_bytes(m, off, n, w->allow);
    m->wht[s] = (wslot){m->gen, id};
    if ((uint32_t)m->n_ws * 2 > m->wht_mask) {  /* grow: re-insert this walk's sets */
        uint32_t size = (m->wht_mask + 1) * 2;
        wslot *nt = calloc(size, sizeof *nt);
        if (!nt) return m->oom = 1, -1;
        free(m->wht);
        m->wht = nt;
        m->wht_mask = size - 1;
        for (int i = 0; i < m->n_ws; i++) {
            uint32_t k = m->ws[i].hash & m->wht_mask;
            while (m->wht[k].gen == m->gen) k = (k + 1) & m->wht_mask;
            m->wht[k] = (wslot){m->gen, i};
        }
    }
    return id;
}

/* The set after set `sid` reads byte c: an id, or -1 when empty. */
/* A memo row for set sid: bytes no top allows are -1 at once, the rest unknown (-2), and each
 * byte's class: bytes that the same stacks' tops allow lead to the same set (advance depends
 * only on which stacks match), so one step fills its whole class.  -1 when no row can be had. */
static int memo_row(iris_grammar_matcher *m, int sid) {
    if (m->n_rows >= MAX_MEMO_ROWS) return -1;
    if (gm_grow((void **)&m->memo, &m->cap_rows, (m->n_rows + 1) * 256, sizeof *m->memo) ||
        gm_grow((void **)&m->cls, &m->cap_cls, (m->n_rows + 1) * 256, 1))
        return m->oom = 1, -1;
    int row = m->ws[sid].row = m->n_rows++;
    int32_t *memo = m->memo + row * 256;
    uint8_t *cls = m->cls + row * 256;
    const wset *w = &m->ws[sid];
    uint64_t sig[256], seen[256];
    int n_seen = 0, n_allowed = 0;
    for (int k = 0; k < 8; k++) n_allowed += __builtin_popcount(w->allow[k]);
    int classes = w->n <= 64 && n_allowed >= 16;  /* else classes would cost more than they save */
    if (classes) memset(sig, 0, sizeof sig);
    for (int i = 0; i < w->n && classes; i++) {
        int32_t st = m->buf[w->off + i];
        if (!st) continue;
        const gset *set = &m->g->sets[m->g->el[m->nodes[st].el].arg];
        for (int k = 0; k < 8; k++)
            for (uint32_t x = set->w[k]; x; x &= x - 1) sig[k * 32 + __builtin_ctz(x)] |= 1ull << i;
    }
    for (int b = 0; b < 256; b++) {
        int allowed = (w->allow[b >> 5] >> (b & 31)) & 1;
        memo[b] = allowed ? -2 : -1;
        if (!classes) {
            cls[b] = (uint8_t)b;
            continue;
        }
        if (b && sig[b] == sig[b - 1]) {  /* runs of one class are the common case */
            cls[b] = cls[b - 1];
            continue;
        }
        int k = 0;
        while (k < n_seen && seen[k] != sig[b]) k++;
        if (k == n_seen) seen[n_seen++] = sig[b];
        cls[b] = (uint8_t)k;
    }
    return row;
}

static int step_set(iris_grammar_matcher *m, int sid, int c) {
    int row = m->ws[sid].row;
    if (row < 0 && !m->oom) row = memo_row(m, sid);
    if (row >= 0 && m->memo[row * 256 + c] != -2) return m->memo[row * 256 + c];
    int start = m->n_buf;
    int n = advance(m, m->ws[sid].off, m->ws[sid].n, c);
    int id = n ? intern_set(m, start, n) : -1;
    if (row >= 0) {
        const uint8_t *cls = m->cls + row * 256;
        for (int b = 0; b < 256; b++)
            if (cls[b] == cls[c]) m->memo[row * 256 + b] = id;
    }
    return id;
}

/* The set bytes lo..hi all lead to from sid when every top holds all of them or none (advance
 * then does not depend on which): one advance and no memo row (the middle of a character, met
 * once per set by text_next).  -1 when empty, -2 when the tops tell the bytes apart. */
static int range_step(iris_grammar_matcher *m, int sid, int lo, int hi) {
    if (m->ws[sid].row >= 0) return -2;
    uint32_t r[8] = {0};
    for (int b = lo; b <= hi; b++) r[b >> 5] |= 1u << (b & 31);
    int off = m->ws[sid].off, n = m->ws[sid].n;
    for (int i = 0; i < n; i++) {
        int32_t st = m->buf[off + i];
        if (!st) continue;
        const gset *set = &m->g->sets[m->g->el[m->nodes[st].el].arg];
        int some = 0, all = 1;
        for (int k = 0; k < 8; k++) {
            uint32_t x = set->w[k] & r[k];
            some |= x != 0;
            all &= x == r[k];
        }
        if (some && !all) return -2;
    }
    int start = m->n_buf;
    int c = advance(m, off, n, lo);
    return c ? intern_set(m, start, c) : -1;
}

/* The set all of bytes lo..hi lead to from sid, then `need` - 1 more continuation bytes: -1
 * when they differ or one is refused. */
static int same_after(iris_grammar_matcher *m, int sid, int need, int lo, int hi) {
    int y = range_step(m, sid, lo, hi);
    if (y == -2) {
        y = step_set(m, sid, lo);
        for (int c = lo + 1; c <= hi && y >= 0; c++)
            if (step_set(m, sid, c) != y) y = -1;
    }
    return y < 0 || need == 1 ? y : same_after(m, y, need - 1, 0x80, 0xBF);
}

/* Bytes that start a character of string text (text_step). */
static const uint32_t text_lead[8] = {0, 0xFFFFFFFBu, 0xEFFFFFFFu, 0x7FFFFFFFu, 0, 0, 0xFFFFFFFCu, 0x001FFFFFu};

/* 1 when every character of string text takes set sid's stacks that read its first byte out of
 * their alternatives, to one same parent p: each such stack's top starts a run of byte sets that
 * ends its alternative after exactly that character's bytes and holds all of their ranges, and
 * every text lead byte is read.  Then every character, byte by byte, leaves exactly expand(p),
 * as 'a' does (advance expands p for the first stack that exits and no more): what a string's
 * character rule does, proven from the stacks instead of stepping each character. */
static int text_chars_exit(const iris_grammar_matcher *m, int sid) {
    const wset *w = &m->ws[sid];
    const iris_grammar *g = m->g;
    uint32_t seen[8] = {0};
    int32_t parent = -1;
    for (int i = 0; i < w->n; i++) {
        int32_t s = m->buf[w->off + i];
        if (!s) continue;
        int e = m->nodes[s].el;
        const gset *top = &g->sets[g->el[e].arg];
        uint32_t l[8], any = 0;
        for (int k = 0; k < 8; k++) {
            l[k] = top->w[k] & text_lead[k];
            seen[k] |= l[k];
            any |= l[k];
        }
        if (!any) continue;
        if (parent >= 0 && m->nodes[s].parent != parent) return 0;
        parent = m->nodes[s].parent;
        /* n: the one character length of every byte in l; r: their second bytes (bit c - 0x80) */
        int n = (l[1] | l[2] | l[3]) ? 1 : 0;
        uint64_t r = 0;
        for (int k = 6; k < 8; k++)
            for (uint32_t x = l[k]; x; x &= x - 1) {
                int cp, st = text_step(0, k * 32 + __builtin_ctz(x), &cp), lo = (st >> 8) & 0xFF, hi = st & 0xFF;
                if (n && (st >> 16) + 1 != n) return 0;
                n = (st >> 16) + 1;
                r |= (~0ull >> (63 - (hi - lo))) << (lo - 0x80);
            }
        for (int k = 1; k < n; k++) {
            if (g->el[e + k].type != GE_CHARS) return 0;
            const gset *cs = &g->sets[g->el[e + k].arg];
            uint64_t have = (uint64_t)cs->w[5] << 32 | cs->w[4], need = k == 1 ? r : ~0ull;  /* 0x80..0xBF */
            if ((have & need) != need) return 0;
        }
        if (g->el[e + n].type != GE_END) return 0;
    }
    return parent >= 0 && !memcmp(seen, text_lead, sizeof seen);
}

/* The one set that every character of string text (text_step) leads to from sid, or -1: proven
 * by text_chars_exit, else stepped; lead bytes that reach one set with one continuation range
 * share its same_after. */
static int text_next(iris_grammar_matcher *m, int sid) {
    if (m->ws[sid].text_next != -3) return m->ws[sid].text_next;
    int t = step_set(m, sid, 'a'), last_x = -3, last_st = 0, last_y = -1;
    if (t >= 0 && text_chars_exit(m, sid)) return m->ws[sid].text_next = t;
    for (int b = 0x20; b < 0x100 && t >= 0 && !m->oom; b++) {
        int cp, st = text_step(0, b, &cp);
        if (st < 0) continue;
        int x = step_set(m, sid, b);
        if (st > 0 && x >= 0 && (x != last_x || st != last_st)) {
            last_x = x;
            last_st = st;
            last_y = same_after(m, x, st >> 16, (st >> 8) & 0xFF, st & 0xFF);
        }
        if (st > 0 && x >= 0) x = last_y;
        if (x != t) t = -1;
    }
    m->ws[sid].text_next = t;
    return t;
}

/* 1 when set sid surely accepts every string text of up to k code points. */
static int text_ok(iris_grammar_matcher *m, int sid, int k) {
    wset *w = &m->ws[sid];
    if (k <= w->text_lo) return 1;
    if (k >= w->text_fail) return 0;
    int t = text_next(m, sid);
    int ok = t < 0 ? 0 : t == sid ? 1 : text_ok(m, t, k - 1);
    w = &m->ws[sid];  /* step_set may have moved ws */
    if (ok) w->text_lo = t == sid ? INT32_MAX : k;
    else w->text_fail = k;
    return ok;
}

/* d when set sid accepts every string text of up to d code points (d <= lim) and no text of
 * d + 1: a chain of d text_next sets ending in one whose tops allow no byte that starts text
 * (a string's last characters under maxLength); else -1. */
static int text_exact(iris_grammar_matcher *m, int sid, int lim) {
    if (m->ws[sid].text_max != -3) return m->ws[sid].text_max <= lim ? m->ws[sid].text_max : -1;
    int d = 0;
    for (int k = 0; k < 8 && !d; k++) d = (m->ws[sid].allow[k] & text_lead[k]) != 0;
    if (d) {
        int t = lim > 0 ? text_next(m, sid) : -1;
        d = t < 0 || t == sid ? -1 : text_exact(m, t, lim - 1);
        if (d >= 0) d++;
    }
    if (d >= 0 || lim >= m->text_k) m->ws[sid].text_max = d;  /* a -1 under a smaller lim may be a cut */
    return d;
}

static void walk(iris_grammar_matcher *m, int t, int sid, int list);

/* Trie node ci reached from set sid: its tokens, its subtree whole or by code points, or a walk
 * below it (list: ci's children list in the vocabulary, -1 none). */
static void visit(iris_grammar_matcher *m, int ci, int sid, int list) {
    const iris_vocab *v = m->v;
    const vnode *c = &v->nodes[ci];
    int nid = step_set(m, sid, c->byte);
    if (nid < 0) return;
    int last = c->tok0 + c->n_tok;
    int text = c->end > ci + 1 && c->text_cp >= 0;
    int whole = text && text_ok(m, nid, c->text_cp);
    if (whole) last = sub_end(v, ci);
    for (int i = c->tok0; i < last; i++) {
        int id = v->ids[i];
        m->mask[id >> 5] |= 1u << (id & 31);
    }
    int d = text && !whole ? text_exact(m, nid, c->text_cp) : -1;
    if (d >= 0) {  /* the subtree's tokens of at most d code points, by the node's list */
        const int32_t *ids = v->by_cp + v->cp_off[ci];
        const uint8_t *cps = v->cp_in + v->cp_off[ci];
        for (int i = 0, n = sub_end(v, ci) - c->tok0; i < n && cps[i] <= d; i++)
            m->mask[ids[i] >> 5] |= 1u << (ids[i] & 31);
    } else if (c->end > ci + 1 && !whole) walk(m, ci, nid, list);
}

/* The children of trie node t from set sid: from its children list when the vocabulary keeps
 * one (the root's and its children's: bytes in a row, so only allowed children are read), else
 * sibling by sibling. */
static void walk(iris_grammar_matcher *m, int t, int sid, int list) {
    const iris_vocab *v = m->v;
    if (list >= 0) {
        for (int k = v->kid_off[list]; k < v->kid_off[list + 1] && !m->oom; k++) {
            int b = v->kid_b[k];
            if ((m->ws[sid].allow[b >> 5] >> (b & 31)) & 1) visit(m, v->kid_n[k], sid, t == 0 ? 1 + b : -1);
        }
        return;
    }
    for (int ci = t + 1, end = v->nodes[t].end; ci < end && !m->oom; ci = v->nodes[ci].end) {
        int b = v->nodes[ci].byte;
        if ((m->ws[sid].allow[b >> 5] >> (b & 31)) & 1) visit(m, ci, sid, -1);
    }
}

/* Masks inside strings, from the vocabulary's token classes (grammar_internal.h).  When set sid
 * reads string text the way a string does (every text character leads to one same next set, for
 * as many characters as any token holds: text_ok; or for exactly d and then no more: text_exact),
 * a token that is all text is accepted by its code points alone, so those bits are one copy of a
 * precomputed row, and only the mixed tokens (text, then a quote, a backslash, a control byte...)
 * are run through the memo, each from the chain's set after its text part, neighbours in the
 * sorted list sharing their steps.  Exact, like the walk.  Returns 1 when it filled m->mask. */
static int text_mask(iris_grammar_matcher *m, int sid) {
    const iris_vocab *v = m->v;
    if (!v->text_ok || m->no_text) return 0;
    int k = m->text_k, d = k + 1;
    if (!text_ok(m, sid, k) && (d = text_exact(m, sid, k)) <= 0) return 0;  /* 0: no text, a short walk */
    int n = d < v->mix_jmax ? d : v->mix_jmax;
    if (gm_grow((void **)&m->chain, &m->cap_chain, n + 1, sizeof *m->chain) ||
        gm_grow((void **)&m->tstate, &m->cap_tstate, v->mix_len + 1, sizeof *m->tstate))
        return m->oom = 1, 1;
    m->chain[0] = sid;
    for (int i = 1; i <= n; i++)
        if ((m->chain[i] = text_next(m, m->chain[i - 1])) < 0) return 0;  /* only out of memory */
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    int r = d >= v->text_max ? TEXT_ROWS : d < TEXT_ROWS ? d : TEXT_ROWS - 1;
    const uint32_t *row = v->text_rows + (size_t)r * words;
    memcpy(m->mask, row, words * sizeof *m->mask);
    for (int i = 0; d < v->text_max && i < v->n_long && v->long_cp[i] <= d; i++)
        m->mask[v->long_ids[i] >> 5] |= 1u << (v->long_ids[i] & 31);
    /* Mixed tokens, a run (one j, one first byte b) at a time from q, the set after b: a token's
     * answer is that of its bytes after b from q, kept by suffix id until memo_reset (the same
     * closing quote ends strings of every length).  Else st[i] is the set after the first i
     * bytes of the last token stepped, valid up to `have`, `fail` the byte it failed at (-1:
     * none), `l` the bytes it shares with this one. */
    if (!m->sfx_q) m->sfx_q = calloc((size_t)v->n_sfx + 1, sizeof *m->sfx_q);
    if (!m->sfx_gen) m->sfx_gen = calloc((size_t)v->n_sfx + 1, sizeof *m->sfx_gen);
    if (!m->sfx_q || !m->sfx_gen) return m->oom = 1, 1;
    int32_t *st = m->tstate;
    for (int gi = 0; gi < v->n_grp && !m->oom; gi++) {
        int x0 = v->mix_grp[gi], j = v->mix_j[x0];
        if (j > n) break;
        int b = (unsigned char)v->str[v->mix_ids[x0]][v->mix_off[x0]];
        if (!((m->ws[m->chain[j]].allow[b >> 5] >> (b & 31)) & 1)) continue;
        int q = step_set(m, m->chain[j], b);
        if (q < 0) continue;
        st[0] = m->chain[j];
        st[1] = q;
        int have = 1, fail = -1, l = 1;
        for (int x = x0; x < v->mix_grp[gi + 1] && !m->oom; x++) {
            int id = v->mix_ids[x], sfx = v->mix_sfx[x];
            if (x > x0 && v->mix_lcp[x] < l) l = v->mix_lcp[x];
            if (m->sfx_gen[sfx] == m->gen && (m->sfx_q[sfx] & 0x7FFFFFFF) == (uint32_t)q) {
                if (m->sfx_q[sfx] >> 31) m->mask[id >> 5] |= 1u << (id & 31);
                continue;
            }
            const unsigned char *s = (const unsigned char *)v->str[id] + v->mix_off[x];
            int len = (int)v->len[id] - v->mix_off[x];
            if (!(fail >= 0 && l > fail)) {  /* else the same failing prefix */
                if (l < have) have = l;
                fail = -1;
                for (; have < len; have++) {
                    int c = s[have], y = -1;
                    if ((m->ws[st[have]].allow[c >> 5] >> (c & 31)) & 1) y = step_set(m, st[have], c);
                    if (y < 0) break;
                    st[have + 1] = y;
                }
                if (have < len) fail = have;
            }
            int ok = fail < 0;
            if (ok) m->mask[id >> 5] |= 1u << (id & 31);
            m->sfx_gen[sfx] = m->gen;
            m->sfx_q[sfx] = (uint32_t)q | (uint32_t)ok << 31;
            l = len;  /* the next token's shared bytes are counted from this one */
        }
    }
    m->text_masks++;
    return 1;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Rebuild the arena with only the current set's stacks: each stack's elements are read out
 * (top first), then interned again from the bottom.  Ids change, so the mask cache goes. */
static int compact(iris_grammar_matcher *m) {
    size_t total = 0;
    for (int i = 0; i < m->n_cur; i++)
        for (int32_t s = m->cur[i]; s > 0; s = m->nodes[s].parent) total++;
    int32_t *els = malloc((total + 1) * sizeof *els), *len = malloc(((size_t)m->n_cur + 1) * sizeof *len);
    if (!els || !len) {
        free(els);
        free(len);
        return -1;
    }
    size_t k = 0;
    for (int i = 0; i < m->n_cur; i++) {
        len[i] = 0;
        for (int32_t s = m->cur[i]; s > 0; s = m->nodes[s].parent) els[k++] = m->nodes[s].el, len[i]++;
    }
    m->n_nodes = 1;
    memset(m->ht, 0, ((size_t)m->ht_mask + 1) * sizeof *m->ht);
    m->ht_grown = 0;
    k = 0;
    for (int i = 0; i < m->n_cur; i++) {
        int32_t p = 0;
        for (int d = len[i] - 1; d >= 0 && p >= 0; d--) p = intern(m, els[k + (size_t)d], p);
        k += (size_t)len[i];
        m->cur[i] = p;
    }
    free(els);
    free(len);
    qsort(m->cur, (size_t)m->n_cur, sizeof *m->cur, cmp_i32);
    for (int i = 0; i < N_CACHE; i++) m->cache[i].valid = 0;
    return m->oom ? -1 : 0;
}

/* Forget the walks' sets and memo (and, with `arena`, every stack but the current ones). */
static void memo_reset(iris_grammar_matcher *m, int arena) {
    m->gen++;
    m->n_ws = m->n_rows = 0;
    m->n_buf = m->buf_base = 0;
    if (m->cap_rows > KEEP_MEMO_ROWS * 256) {  /* a rare wide walk (a long enum) gives it back */
        free(m->memo);
        free(m->cls);
        m->memo = NULL;
        m->cls = NULL;
        m->cap_rows = m->cap_cls = 0;
    }
    if (arena && compact(m)) m->oom = 1;
    m->arena_base = m->n_nodes;
}

/* Replace the current set by buf[off .. off+n), sorted. */
static int set_cur(iris_grammar_matcher *m, int off, int n) {
    if (gm_grow((void **)&m->cur, &m->cap_cur, n, sizeof *m->cur)) return -1;
    memcpy(m->cur, m->buf + off, (size_t)n * sizeof *m->cur);
    qsort(m->cur, (size_t)n, sizeof *m->cur, cmp_i32);
    m->n_cur = n;
    return 0;
}

int iris_grammar_matcher_init(iris_grammar_matcher **out, const iris_grammar *g, const iris_vocab *v,
                              iris_err *err) {
    *out = NULL;
    iris_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    m->g = g;
    m->v = v;
    m->cap_nodes = 1024;
    m->nodes = malloc((size_t)m->cap_nodes * sizeof *m->nodes);
    m->stamp = calloc((size_t)m->cap_nodes, sizeof *m->stamp);
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    m->mask = malloc(words * sizeof *m->mask);
    int rc = !m->nodes || !m->stamp || !m->mask;
    if (!rc) {
        m->nodes[0] = (gnode){-1, -1, -1};
        m->n_nodes = 1;
        rc = ht_rebuild(m, 4096);
    }
    if (!rc) {
        m->wht = calloc(1024, sizeof *m->wht);
        m->wht_mask = 1023;
        m->gen = 1;  /* slots of gen 0 are empty */
        m->keep_rows = KEEP_MEMO_ROWS;
        m->text_k = v->text_max > v->mix_jmax ? v->text_max : v->mix_jmax;
        if (m->text_k < 127) m->text_k = 127;
        rc = !m->wht;
    }
    /* The start: the root rule as if referenced from an alternative of its own. */
    int32_t root = -1;
    if (!rc) {
        const grule *r = &g->rules[g->root];
        m->cur_stamp++;
        for (int a = 0; a < r->n; a++)
            expand(m, g->el[r->alts[a]].type == GE_END ? 0 : intern(m, r->alts[a], 0));
        root = m->n_buf;
        rc = m->oom || set_cur(m, 0, root);
        m->n_buf = 0;
        m->arena_base = m->n_nodes;
    }
    if (rc) {
        iris_grammar_matcher_free(m);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory starting the grammar");
    }
    *out = m;
    return IRIS_OK;
}

void iris_grammar_matcher_free(iris_grammar_matcher *m) {
    if (!m) return;
    for (int i = 0; i < N_CACHE; i++) {
        free(m->cache[i].set);
        free(m->cache[i].mask);
    }
    free(m->nodes);
    free(m->stamp);
    free(m->ht);
    free(m->cur);
    free(m->buf);
    free(m->mask);
    free(m->ws);
    free(m->wht);
    free(m->memo);
    free(m->cls);
    free(m->chain);
    free(m->tstate);
    free(m->sfx_q);
    free(m->sfx_gen);
    free(m);
}

void gm_keep_rows(iris_grammar_matcher *m, int rows) { m->keep_rows = rows; }
void gm_no_text(iris_grammar_matcher *m, int off) { m->no_text = off; }
uint64_t gm_text_masks(const iris_grammar_matcher *m) { return m->text_masks; }

uint64_t iris_grammar_matcher_cache_hits(const iris_grammar_matcher *m) { return m->cache_hits; }

int iris_grammar_matcher_complete(const iris_grammar_matcher *m) { return m->n_cur > 0 && m->cur[0] == 0; }

int iris_grammar_matcher_can_continue(const iris_grammar_matcher *m) {
    return m->n_cur > 1 || (m->n_cur == 1 && m->cur[0] != 0);
}

static mask_entry *cache_find(iris_grammar_matcher *m) {
    for (int i = 0; i < N_CACHE; i++) {
        mask_entry *c = &m->cache[i];
        if (c->valid && c->n == m->n_cur && !memcmp(c->set, m->cur, (size_t)m->n_cur * sizeof *m->cur))
            return c;
    }
    return NULL;
}

static int limit_err(iris_grammar_matcher *m, iris_err *err, const char *what) {
    int too_big = m->oom == 2;
    m->oom = 0;
    if (too_big)
        return iris_err_set(err, IRIS_ELIMIT, "%s: too many parse stacks (a schema too ambiguous, such as "
                                              "nested anyOf of overlapping branches)", what);
    return iris_err_set(err, IRIS_ENOMEM, "out of memory %s", what);
}

int iris_grammar_matcher_mask(iris_grammar_matcher *m, uint32_t *mask, iris_err *err) {
    size_t words = ((size_t)m->v->n_vocab + 31) / 32;
    mask_entry *c = cache_find(m);
    if (c) {
        memcpy(mask, c->mask, words * sizeof *mask);
        m->cache_hits++;
        return IRIS_OK;
    }
    m->n_buf = m->buf_base;
    for (int i = 0; i < m->n_cur; i++) push_buf(m, m->cur[i]);
    int root = m->oom ? -1 : intern_set(m, m->buf_base, m->n_cur);
    if (root >= 0 && !text_mask(m, root)) {
        memset(m->mask, 0, words * sizeof *m->mask);
        walk(m, 0, root, 0);
    }
    m->buf_base = m->n_buf;
    if (m->oom) {
        memo_reset(m, 0);
        return limit_err(m, err, "computing a grammar mask");
    }
    if (m->n_rows > m->keep_rows || m->n_buf > KEEP_SET_INTS || m->n_nodes - m->arena_base > KEEP_NODES)
        memo_reset(m, 1);
    if (m->oom) return limit_err(m, err, "computing a grammar mask");
    memcpy(mask, m->mask, words * sizeof *mask);
    c = &m->cache[m->cache_next];
    if (!c->mask) c->mask = malloc(words * sizeof *c->mask);
    if (c->mask && !gm_grow((void **)&c->set, &c->cap, m->n_cur, sizeof *c->set)) {
        uint32_t *old = c->mask;  /* the entry takes this mask; its old buffer is the next mask's */
        c->mask = m->mask;
        m->mask = old;
        memcpy(c->set, m->cur, (size_t)m->n_cur * sizeof *c->set);
        c->n = m->n_cur;
        c->valid = 1;
        m->cache_next = (m->cache_next + 1) % N_CACHE;
    }
    return IRIS_OK;
}

int iris_grammar_matcher_accept_bytes(iris_grammar_matcher *m, const char *s, size_t n, iris_err *err) {
    int base = m->buf_base;
    m->n_buf = base;
    for (int i = 0; i < m->n_cur; i++) push_buf(m, m->cur[i]);
    int cnt = m->n_cur;
    for (size_t i = 0; i < n && cnt && !m->oom; i++) {
        int off2 = m->n_buf;
        cnt = advance(m, base, cnt, (unsigned char)s[i]);
        memmove(m->buf + base, m->buf + off2, (size_t)cnt * sizeof *m->buf);  /* keep buf small */
        m->n_buf = base + cnt;
    }
    int rc = IRIS_OK;
    if (m->oom) {
        memo_reset(m, 0);
        rc = limit_err(m, err, "advancing the grammar");
    } else if (!cnt) rc = iris_err_set(err, IRIS_EINVAL, "the output does not follow the grammar here");
    else if (set_cur(m, base, cnt)) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
    m->n_buf = m->buf_base;
    return rc;
}

int iris_grammar_matcher_accept_token(iris_grammar_matcher *m, int token, iris_err *err) {
    if (token < 0 || token >= m->v->n_vocab || !m->v->str[token])
        return iris_err_set(err, IRIS_EINVAL, "token %d is not allowed by the grammar", token);
    return iris_grammar_matcher_accept_bytes(m, m->v->str[token], m->v->len[token], err);
}

int iris_grammar_matcher_allows(iris_grammar_matcher *m, const char *s, size_t n) {
    int mark = m->n_nodes;
    m->n_buf = m->buf_base;
    for (int i = 0; i < m->n_cur; i++) push_buf(m, m->cur[i]);
    int off = m->buf_base, cnt = m->n_cur;
    for (size_t i = 0; i < n && cnt && !m->oom; i++) {
        int off2 = m->n_buf;
        cnt = advance(m, off, cnt, (unsigned char)s[i]);
        off = off2;
    }
    rollback(m, mark);
    m->n_buf = m->buf_base;
    int ok = cnt > 0 && !m->oom;
    m->oom = 0;
    return ok;
}
