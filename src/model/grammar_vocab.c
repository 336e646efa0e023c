/* grammar_vocab.c: the vocabulary trie the grammar matcher walks (grammar.h says what it is;
 * grammar_internal.h has its layout).
 *
 * The tokenizer's tokens (special tokens and empty ones left out) are sorted by their bytes
 * and laid out as a trie in preorder, so a subtree's tokens are one contiguous run of ids.
 * Each node at a UTF-8 character boundary records the most code points of string text below
 * it when every token below continues with string text (text_step), which lets the matcher
 * take such a subtree whole.  At each such node with children, the subtree's tokens are also
 * kept sorted by their code points below the node (a counting sort: at most 126), so a set
 * that accepts any text of up to d code points and none longer takes a prefix of that list.
 * Owns: the trie's nodes, the sorted ids, the per-node lists; the token bytes are the
 * tokenizer's (it must outlive the vocabulary).
 */
#include "model/grammar_internal.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, (size_t)nc * elem);
    if (!np) return -1;
    *p = np;
    *cap = nc;
    return 0;
}

static int cmp_tok(const void *a, const void *b, void *arg) {
    const iris_vocab *v = arg;
    int x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t n = v->len[x] < v->len[y] ? v->len[x] : v->len[y];
    int c = memcmp(v->str[x], v->str[y], n);
    if (c) return c;
    return v->len[x] < v->len[y] ? -1 : v->len[x] > v->len[y];
}

/* Append the node reached by `byte` covering ids[lo..hi) (all sharing their first d bytes)
 * and its subtree, in preorder; st is the UTF-8 state after the node's path (-1: not text).
 * Returns the most code points of string text below it, -1 when some token below is not
 * text, -2 when out of memory. */
static int trie_fill(iris_vocab *v, int byte, int lo, int hi, size_t d, int st) {
    if (grow((void **)&v->nodes, &v->cap_nodes, v->n_nodes + 1, sizeof *v->nodes)) return -2;
    int at = v->n_nodes++;
    int i = lo;
    while (i < hi && v->len[v->ids[i]] == d) i++;
    v->nodes[at] = (vnode){.tok0 = lo, .n_tok = (uint16_t)(i - lo), .byte = (uint8_t)byte};
    int below = st < 0 ? -1 : 0;
    for (int j = i; j < hi;) {
        unsigned char b = (unsigned char)v->str[v->ids[j]][d];
        int j0 = j, cp = 0;
        while (j < hi && (unsigned char)v->str[v->ids[j]][d] == b) j++;
        int st2 = st < 0 ? -1 : text_step(st, b, &cp);
        int k = trie_fill(v, b, j0, j, d + 1, st2);
        if (k == -2) return -2;
        if (k < 0 || st2 < 0) below = -1;
        else if (below >= 0 && k + cp > below) below = k + cp;
    }
    v->nodes[at].end = v->n_nodes;
    if (below > 126) below = -1;
    v->nodes[at].text_cp = (int8_t)(st == 0 ? below : -1);
    return below;
}

/* Code points of a token that is string text (bytes that are not UTF-8 continuations), at
 * most 255. */
static int tok_cp(const iris_vocab *v, int t) {
    int n = 0;
    for (size_t i = 0; i < v->len[t] && n < 255; i++) n += ((unsigned char)v->str[t][i] & 0xC0) != 0x80;
    return n;
}

/* Fill the by-code-point lists of node i's subtree (pcp: code points of i's path), counting
 * entries into *at; with fill 0 only count.  Counting sort: code points are at most 126. */
static void cp_fill(iris_vocab *v, int i, int pcp, size_t *at, int fill) {
    const vnode *nd = &v->nodes[i];
    if (nd->text_cp >= 0 && nd->end > i + 1) {
        int lo = nd->tok0, hi = sub_end(v, i);
        if (fill) {
            int cnt[128] = {0};
            for (int k = lo; k < hi; k++) cnt[v->cp_of[k] - pcp]++;
            for (int c = 0, sum = 0; c < 128; c++) {
                int x = cnt[c];
                cnt[c] = sum;
                sum += x;
            }
            v->cp_off[i] = (int32_t)*at;
            for (int k = lo; k < hi; k++) {
                int c = v->cp_of[k] - pcp;
                size_t j = *at + (size_t)cnt[c]++;
                v->by_cp[j] = v->ids[k];
                v->cp_in[j] = (uint8_t)c;
            }
        }
        *at += (size_t)(hi - lo);
    }
    for (int c = i + 1; c < nd->end; c = v->nodes[c].end)
        cp_fill(v, c, pcp + ((v->nodes[c].byte & 0xC0) != 0x80), at, fill);
}

static int cp_build(iris_vocab *v) {
    size_t n = 0;
    cp_fill(v, 0, 0, &n, 0);
    v->cp_off = malloc((size_t)v->n_nodes * sizeof *v->cp_off);
    v->by_cp = malloc((n + 1) * sizeof *v->by_cp);
    v->cp_in = malloc(n + 1);
    v->cp_of = malloc((size_t)v->n_ids + 1);
    if (!v->cp_off || !v->by_cp || !v->cp_in || !v->cp_of) return -1;
    for (int i = 0; i < v->n_nodes; i++) v->cp_off[i] = -1;
    for (int k = 0; k < v->n_ids; k++) v->cp_of[k] = (uint8_t)tok_cp(v, v->ids[k]);
    n = 0;
    cp_fill(v, 0, 0, &n, 1);
    free(v->cp_of);  /* only the build needs each token's own count */
    v->cp_of = NULL;
    return 0;
}

int iris_vocab_build(const iris_tok *tok, int n_vocab, iris_vocab **out, iris_err *err) {
    *out = NULL;
    iris_vocab *v = calloc(1, sizeof *v);
    if (!v) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    v->n_vocab = n_vocab;
    v->str = calloc((size_t)n_vocab, sizeof *v->str);
    v->len = calloc((size_t)n_vocab, sizeof *v->len);
    v->ids = malloc((size_t)n_vocab * sizeof *v->ids);
    int n = 0, rc = (!v->str || !v->len || !v->ids);
    for (int t = 0; !rc && t < n_vocab; t++) {
        size_t len = 0;
        const char *s = iris_tok_token(tok, t, &len);
        if (!s || !len || iris_tok_is_special(tok, t)) continue;
        v->str[t] = s;
        v->len[t] = len;
        v->ids[n++] = t;
    }
    if (!rc) {
        qsort_r(v->ids, (size_t)n, sizeof *v->ids, cmp_tok, v);
        v->n_ids = n;
        rc = trie_fill(v, 0, 0, n, 0, 0) == -2;  /* the root (its byte unused) */
    }
    if (!rc) rc = cp_build(v);
    if (rc) {
        iris_vocab_free(v);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory building the vocabulary trie");
    }
    *out = v;
    return IRIS_OK;
}

void iris_vocab_free(iris_vocab *v) {
    if (!v) return;
    free(v->nodes);
    free(v->cp_off);
    free(v->by_cp);
    free(v->cp_in);
    free(v->cp_of);
    free(v->ids);
    free(v->str);
    free(v->len);
    free(v);
}

int iris_vocab_n(const iris_vocab *v) { return v->n_vocab; }
int iris_vocab_n_nodes(const iris_vocab *v) { return v->n_nodes; }

