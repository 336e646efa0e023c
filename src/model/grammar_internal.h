/* grammar_internal.h: the compiled grammar's layout and the builder grammar_schema.c uses;
 * the vocabulary trie's layout (grammar_vocab.c builds it, grammar.c's matcher walks it).
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

/* *p (room for *cap elements of elem bytes) grown by doubling to hold need; -1 when out of memory
 * (grammar_build.c; the builder, the matcher and the vocabulary's tables use it). */
int gm_grow(void **p, int *cap, int need, size_t elem);

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
/* With off 1 the matcher never takes its masks inside strings from the vocabulary's token classes
 * (grammar.c, text_mask) and walks the trie instead: the tests compare the two. */
void gm_no_text(iris_grammar_matcher *m, int off);
uint64_t gm_text_masks(const iris_grammar_matcher *m);  /* masks made by text_mask so far */

/* A `pattern` (grammar_regex.c says which regex subset) as a rule writing the JSON string text
 * (without the quotes) of the strings it matches; any_text is the rule of any string text, put
 * on an unanchored side.  -1 with a message in msg when refused or past the grammar's limit. */
int gb_regex(iris_grammar *g, const char *pattern, int any_text, char *msg, size_t cap);
/* The pattern iris writes for a `format` (date, time, date-time, uuid, email), or NULL. */
const char *gb_format_pattern(const char *format);

/* ---- the vocabulary trie (grammar_vocab.c builds it; the matcher walks it) ---- */

/* Nodes in preorder: a node's subtree is nodes (self, end); its first child is self + 1 and
 * each child's sibling starts where the child's subtree ends, so a walk reads memory in order. */
typedef struct vnode {
    int32_t end;              /* one past the last node of the subtree */
    int32_t tok0;             /* tokens ending here: ids[tok0 .. tok0+n_tok) */
    uint16_t n_tok;
    uint8_t byte;
    int8_t text_cp;           /* at a character boundary, every token below continues with string text
                               * (text_step): its most code points; else -1 */
} vnode;

/* Bytes that stand for themselves inside a JSON string. */
#define PLAIN_BYTE(b) ((b) >= 0x20 && (b) < 0x7F && (b) != '"' && (b) != '\\')

struct iris_vocab {
    int n_vocab;
    vnode *nodes;
    int n_nodes, cap_nodes;
    int32_t *ids;             /* token ids sorted by their bytes; a subtree's tokens are contiguous */
    int n_ids;
    const char **str;         /* [n_vocab] bytes of each token (the tokenizer's), NULL if none */
    size_t *len;
    /* At each node whose subtree is string text (text_cp >= 0, with children): the subtree's
     * tokens by code points below the node, by_cp[cp_off[node] ..+ subtree size), their counts
     * in cp_in (cp_off -1 elsewhere).  cp_of: code points of ids[k], during the build. */
    int32_t *cp_off, *by_cp;
    uint8_t *cp_in, *cp_of;
    /* Tokens by string text, for the matcher's masks inside strings (grammar.c, text_mask).
     * Pure text tokens (every byte string text by text_step from a character boundary; the last
     * character may be cut): row d < TEXT_ROWS of text_rows (words uint32 each) holds those of
     * at most d code points, row TEXT_ROWS all of them; long_ids those of TEXT_ROWS or more code
     * points sorted by them (long_cp).  text_max: their most code points.  Mixed tokens (string
     * text, then a byte that is not: a quote, a backslash, a control byte, DEL, invalid UTF-8):
     * mix_ids sorted by mix_j (code points before the last character boundary of the text
     * part) and then by their bytes from that boundary (mix_off), so neighbours share a prefix.
     * Runs of one mix_j and one byte at mix_off start at mix_grp[0 .. n_grp) (mix_grp[n_grp]:
     * n_mix); mix_lcp: the bytes from mix_off a token shares with the one before in its run;
     * mix_sfx: the id of its bytes from mix_off (n_sfx distinct).  mix_jmax: the largest mix_j,
     * mix_len the most bytes from mix_off on.  text_ok 0 when a token is too long for these
     * (then none are used). */
    /* Children lists of the root (list 0) and of its child by byte b (list 1 + b, empty when
     * none): kid_b / kid_n[kid_off[l] .. kid_off[l + 1]) their bytes and nodes, so a walk there
     * reads bytes in a row instead of nodes spread over the trie. */
    int32_t kid_off[258];
    uint8_t *kid_b;
    int32_t *kid_n;
    uint32_t *text_rows;
    int32_t *long_ids, *long_cp;
    int n_long, text_max;
    int32_t *mix_ids, *mix_grp, *mix_sfx;
    uint16_t *mix_j, *mix_off, *mix_lcp;
    int n_mix, n_grp, n_sfx, mix_jmax, mix_len, text_ok;
};

#define TEXT_ROWS 32  /* rows of text_rows below the last (33 x 18,992 bytes for Qwen's vocabulary) */

/* UTF-8 inside a JSON string: the state after byte b in state st, or -1 when b cannot stand for
 * itself there (a quote, a backslash, a control byte, invalid UTF-8).  st 0 is a character
 * boundary, else (bytes still to come) << 16 | the next byte's range lo << 8 | hi.  *cp: 1 when b
 * starts a character. */
static inline int text_step(int st, int b, int *cp) {
    *cp = st == 0;
    if (st > 0) {
        if (b < ((st >> 8) & 0xFF) || b > (st & 0xFF)) return -1;
        return (st >> 16) == 1 ? 0 : ((st >> 16) - 1) << 16 | 0x80BF;
    }
    if (b < 0x80) return PLAIN_BYTE(b) ? 0 : -1;
    if (b >= 0xC2 && b <= 0xDF) return 1 << 16 | 0x80BF;
    if (b == 0xE0) return 2 << 16 | 0xA0BF;
    if (b == 0xED) return 2 << 16 | 0x809F;
    if (b >= 0xE1 && b <= 0xEF) return 2 << 16 | 0x80BF;
    if (b == 0xF0) return 3 << 16 | 0x90BF;
    if (b >= 0xF1 && b <= 0xF3) return 3 << 16 | 0x80BF;
    if (b == 0xF4) return 3 << 16 | 0x808F;
    return -1;
}

/* The tokens of node i's subtree: ids[tok0 .. sub_end). */
static inline int sub_end(const iris_vocab *v, int i) {
    int e = v->nodes[i].end;
    return e < v->n_nodes ? v->nodes[e].tok0 : v->n_ids;
}

#endif
