/* grammar_internal.h: the compiled grammar's layout and the builder grammar_schema.c uses.
 *
 * A grammar is rules; a rule is alternatives; an alternative is a run of elements in `el`
 * ending with a GE_END element.  An element is a byte set (GE_CHARS, index into `sets`) or a
 * reference to a rule (GE_REF).  An empty alternative is a lone GE_END.  No rule may derive
 * itself as its own first element (left recursion), which the schema compiler never writes.
 */
#ifndef IRIS_GRAMMAR_INTERNAL_H
#define IRIS_GRAMMAR_INTERNAL_H

#include "model/grammar.h"

enum { GE_END = 0, GE_CHARS = 1, GE_REF = 2 };

typedef struct gelem {
    int32_t type, arg;
} gelem;

typedef struct gset {
    uint32_t w[8];  /* bit b: byte b allowed */
} gset;

typedef struct grule {
    int *alts;      /* element index of each alternative's first element */
    int n, cap;
} grule;

struct iris_grammar {
    gelem *el;
    int n_el, cap_el;
    gset *sets;
    int n_sets, cap_sets;
    int byte_set[256];  /* set id of each single byte, -1 until made */
    grule *rules;
    int n_rules, cap_rules;
    int root;
    int max_el;         /* elements at most (0: GRAMMAR_MAX_ELEMS) */
    int over;           /* 1 once gb_alt refused an alternative past max_el */
};

#define GRAMMAR_MAX_ELEMS (1 << 22)

static inline int gset_has(const gset *s, int b) { return (s->w[b >> 5] >> (b & 31)) & 1; }

/* Builder: each returns an id (>= 0) or -1 when out of memory or past GRAMMAR_MAX_ELEMS. */
int gb_init(iris_grammar *g);
int gb_rule(iris_grammar *g);
int gb_set_range(iris_grammar *g, int lo, int hi);  /* bytes lo..hi */
int gb_set_byte(iris_grammar *g, int b);
int gb_set(iris_grammar *g, const gset *s);

/* A growable run of elements, added to a rule as one alternative with gb_alt. */
typedef struct gseq {
    gelem *e;
    int n, cap, bad;
} gseq;
void gseq_chars(iris_grammar *g, gseq *q, int set);
void gseq_ref(gseq *q, int rule);
void gseq_lit(iris_grammar *g, gseq *q, const char *s, size_t n);
int gb_alt(iris_grammar *g, int rule, gseq *q);  /* adds q (then empties it); -1 on failure */

/* Memo rows a matcher keeps between masks (past them its memo is dropped and its stacks
 * rebuilt); tests lower it to 0 to run that reset after every mask. */
void gm_keep_rows(iris_grammar_matcher *m, int rows);

/* A `pattern` (grammar_regex.c says which regex subset) as a rule writing the JSON string text
 * (without the quotes) of the strings it matches; any_text is the rule of any string text, put
 * on an unanchored side.  -1 with a message in msg when refused or past the grammar's limit. */
int gb_regex(iris_grammar *g, const char *pattern, int any_text, char *msg, size_t cap);
/* The pattern iris writes for a `format` (date, time, date-time, uuid, email), or NULL. */
const char *gb_format_pattern(const char *format);

#endif
