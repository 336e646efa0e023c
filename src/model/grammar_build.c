/* grammar_build.c: the grammar builder (grammar_internal.h's gb_* and gseq_*, what
 * grammar_schema.c, grammar_regex.c and grammar_tools.c write grammars with) and its release.
 *
 * A grammar grows rule by rule: gb_rule makes an empty rule, gb_alt appends one alternative (a
 * run of elements gathered in a gseq, then a GE_END) to it, gb_set* add byte sets (a single
 * byte's set is made once).  Past the grammar's element limit (max_el, else
 * GRAMMAR_MAX_ELEMS) gb_alt refuses and marks the grammar `over`, so the compiler fails the
 * schema with IRIS_ELIMIT instead of growing without bound.
 * Owns: the grammar's elements, sets and rules.
 */
#include "model/grammar_internal.h"

#include <stdlib.h>
#include <string.h>

/* *p (room for *cap elements of elem bytes) grown by doubling to hold need; -1 when out of memory. */
int gm_grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, (size_t)nc * elem);
    if (!np) return -1;
    *p = np;
    *cap = nc;
    return 0;
}

int gb_init(iris_grammar *g) {
    memset(g, 0, sizeof *g);
    for (int i = 0; i < 256; i++) g->byte_set[i] = -1;
    g->root = -1;
    return 0;
}

int gb_rule(iris_grammar *g) {
    if (gm_grow((void **)&g->rules, &g->cap_rules, g->n_rules + 1, sizeof *g->rules)) return -1;
    memset(&g->rules[g->n_rules], 0, sizeof *g->rules);
    return g->n_rules++;
}

int gb_set(iris_grammar *g, const gset *s) {
    if (gm_grow((void **)&g->sets, &g->cap_sets, g->n_sets + 1, sizeof *g->sets)) return -1;
    g->sets[g->n_sets] = *s;
    return g->n_sets++;
}

int gb_set_range(iris_grammar *g, int lo, int hi) {
    gset s = {{0}};
    for (int b = lo; b <= hi; b++) s.w[b >> 5] |= 1u << (b & 31);
    return gb_set(g, &s);
}

int gb_set_byte(iris_grammar *g, int b) {
    if (g->byte_set[b] < 0) g->byte_set[b] = gb_set_range(g, b, b);
    return g->byte_set[b];
}

static void gseq_push(gseq *q, int type, int arg) {
    if (q->bad || gm_grow((void **)&q->e, &q->cap, q->n + 1, sizeof *q->e) || arg < 0) {
        q->bad = 1;
        return;
    }
    q->e[q->n++] = (gelem){type, arg};
}

void gseq_chars(iris_grammar *g, gseq *q, int set) {
    (void)g;
    gseq_push(q, GE_CHARS, set);
}

void gseq_ref(gseq *q, int rule) { gseq_push(q, GE_REF, rule); }

void gseq_lit(iris_grammar *g, gseq *q, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) gseq_push(q, GE_CHARS, gb_set_byte(g, (unsigned char)s[i]));
}

int gb_alt(iris_grammar *g, int rule, gseq *q) {
    int over = g->n_el + q->n + 1 > (g->max_el ? g->max_el : GRAMMAR_MAX_ELEMS);
    int bad = q->bad || rule < 0 || over;
    if (over) g->over = 1;
    if (!bad) bad = gm_grow((void **)&g->el, &g->cap_el, g->n_el + q->n + 1, sizeof *g->el);
    grule *r = bad ? NULL : &g->rules[rule];
    if (!bad) bad = gm_grow((void **)&r->alts, &r->cap, r->n + 1, sizeof *r->alts);
    if (bad) {
        q->n = 0;
        q->bad = 0;
        return -1;
    }
    r->alts[r->n++] = g->n_el;
    if (q->n) memcpy(g->el + g->n_el, q->e, (size_t)q->n * sizeof *q->e);
    g->n_el += q->n;
    g->el[g->n_el++] = (gelem){GE_END, 0};
    q->n = 0;
    return 0;
}

void iris_grammar_free(iris_grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->n_rules; i++) free(g->rules[i].alts);
    free(g->rules);
    free(g->el);
    free(g->sets);
    free(g);
}

int iris_grammar_n_rules(const iris_grammar *g) { return g->n_rules; }
