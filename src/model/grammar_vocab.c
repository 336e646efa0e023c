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
 * For masks inside strings (grammar.c text_mask) every token is also classed once by its string
 * text (text_build): all text (its code points; rows of bitmasks by code points, row d the
 * tokens of at most d, 33 rows of 18,992 bytes for Qwen's 151,936 tokens, ~627 KB) or mixed
 * (text, then a byte that is not; 4,938 for Qwen, sorted by their text part's code points and
 * then their bytes from its last character boundary).  A few ms of the build.
 * Owns: the trie's nodes, the sorted ids, the per-node lists, the text rows and lists; the
 * token bytes are the tokenizer's (it must outlive the vocabulary).
 */
#include "model/grammar_internal.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"

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
    if (gm_grow((void **)&v->nodes, &v->cap_nodes, v->n_nodes + 1, sizeof *v->nodes)) return -2;
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

/* The children lists of the root and of its children (grammar_internal.h, kid_off). */
static int kids_build(iris_vocab *v) {
    int n = 0, child[256];
    for (int b = 0; b < 256; b++) child[b] = -1;
    for (int c = 1; c < v->nodes[0].end; c = v->nodes[c].end) {
        child[v->nodes[c].byte] = c;
        n++;
        for (int g = c + 1; g < v->nodes[c].end; g = v->nodes[g].end) n++;
    }
    v->kid_b = malloc((size_t)n + 1);
    v->kid_n = malloc(((size_t)n + 1) * sizeof *v->kid_n);
    if (!v->kid_b || !v->kid_n) return -1;
    int k = 0;
    for (int l = 0; l < 257; l++) {
        v->kid_off[l] = k;
        int t = l == 0 ? 0 : child[l - 1];
        for (int c = t + 1; t >= 0 && c < v->nodes[t].end; c = v->nodes[c].end) {
            v->kid_b[k] = v->nodes[c].byte;
            v->kid_n[k++] = c;
        }
    }
    v->kid_off[257] = k;
    return 0;
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

/* Token t's string text: its code points when every byte is text (-1 when not), and in *j,
 * *off the code points and byte offset of the text part's last character boundary. */
static int tok_text(const iris_vocab *v, int t, int *j, int *off) {
    int st = 0, cp, n = 0;
    for (size_t i = 0; i < v->len[t]; i++) {
        if (st == 0) *j = n, *off = (int)i;
        st = text_step(st, (unsigned char)v->str[t][i], &cp);
        if (st < 0) return -1;
        n += cp;
    }
    return n;
}

typedef struct tkey {
    int32_t id, cp;
    int j, off;
} tkey;

static int cmp_cp(const void *a, const void *b) {
    const tkey *x = a, *y = b;
    return x->cp != y->cp ? (x->cp > y->cp) - (x->cp < y->cp) : (x->id > y->id) - (x->id < y->id);
}

static int cmp_mix(const void *a, const void *b, void *arg) {
    const iris_vocab *v = arg;
    const tkey *x = a, *y = b;
    if (x->j != y->j) return (x->j > y->j) - (x->j < y->j);
    size_t nx = v->len[x->id] - (size_t)x->off, ny = v->len[y->id] - (size_t)y->off;
    int c = memcmp(v->str[x->id] + x->off, v->str[y->id] + y->off, nx < ny ? nx : ny);
    return c ? c : (nx > ny) - (nx < ny);
}

static int cmp_sfx(const void *a, const void *b, void *arg) {
    const tkey *x = a, *y = b;
    tkey u = *x, w = *y;
    u.j = w.j = 0;
    return cmp_mix(&u, &w, arg);
}

/* The mixed tokens' runs (mix_grp), each one's prefix shared with the one before in its run
 * (mix_lcp) and its suffix id (mix_sfx: one id per distinct bytes from mix_off). */
static int mix_runs(iris_vocab *v, tkey *mix) {
    int n = v->n_mix;
    v->mix_grp = malloc(((size_t)n + 1) * sizeof *v->mix_grp);
    v->mix_sfx = malloc(((size_t)n + 1) * sizeof *v->mix_sfx);
    v->mix_lcp = malloc(((size_t)n + 1) * sizeof *v->mix_lcp);
    if (!v->mix_grp || !v->mix_sfx || !v->mix_lcp) return -1;
    for (int k = 0; k < n; k++) {
        const char *s = v->str[mix[k].id] + mix[k].off, *p = k ? v->str[mix[k - 1].id] + mix[k - 1].off : NULL;
        if (!k || mix[k].j != mix[k - 1].j || *s != *p) {
            v->mix_grp[v->n_grp++] = k;
            v->mix_lcp[k] = 0;
            continue;
        }
        size_t l = 0, ns = v->len[mix[k].id] - (size_t)mix[k].off, np = v->len[mix[k - 1].id] - (size_t)mix[k - 1].off;
        while (l < ns && l < np && s[l] == p[l]) l++;
        v->mix_lcp[k] = (uint16_t)l;
    }
    v->mix_grp[v->n_grp] = n;
    for (int k = 0; k < n; k++) mix[k].cp = k;  /* the position, through the sort by suffix */
    qsort_r(mix, (size_t)n, sizeof *mix, cmp_sfx, v);
    for (int k = 0; k < n; k++) {
        if (k && cmp_sfx(&mix[k - 1], &mix[k], v)) v->n_sfx++;
        v->mix_sfx[mix[k].cp] = v->n_sfx;
    }
    v->n_sfx += n > 0;
    return 0;
}

/* The tokens by string text (grammar_internal.h, text_rows and mix_ids). */
static int text_build(iris_vocab *v) {
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    tkey *pure = malloc(((size_t)v->n_ids + 1) * sizeof *pure), *mix = malloc(((size_t)v->n_ids + 1) * sizeof *mix);
    v->text_rows = calloc((TEXT_ROWS + 1) * words, sizeof *v->text_rows);
    if (!pure || !mix || !v->text_rows) {
        free(pure);
        free(mix);
        return -1;
    }
    int n_pure = 0, n_mix = 0, n_long = 0;
    v->text_ok = 1;
    for (int t = 0; t < v->n_vocab; t++) {  /* in id order: the tokenizer's bytes in a row */
        if (!v->str[t]) continue;
        int j = 0, off = 0, cp = tok_text(v, t, &j, &off);
        if (v->len[t] > 65535) v->text_ok = 0;
        if (cp >= 0) pure[n_pure++] = (tkey){t, cp, 0, 0};
        else mix[n_mix++] = (tkey){t, 0, j, off};
    }
    /* Each token's bit in the row of its code points, then row d |= row d - 1; the long ones
     * (few) sorted by their code points. */
    uint32_t *all = v->text_rows + (size_t)TEXT_ROWS * words;
    v->text_max = 0;
    for (int k = 0; k < n_pure; k++) {
        int id = pure[k].id, cp = pure[k].cp;
        if (cp > v->text_max) v->text_max = cp;
        if (cp < TEXT_ROWS) v->text_rows[(size_t)cp * words + (size_t)(id >> 5)] |= 1u << (id & 31);
        else pure[n_long++] = pure[k];
        all[id >> 5] |= 1u << (id & 31);
    }
    for (int d = 1; d < TEXT_ROWS; d++) {
        uint32_t *row = v->text_rows + (size_t)d * words;
        const uint32_t *prev = row - words;
        for (size_t w = 0; w < words; w++) row[w] |= prev[w];
    }
    qsort(pure, (size_t)n_long, sizeof *pure, cmp_cp);
    qsort_r(mix, (size_t)n_mix, sizeof *mix, cmp_mix, v);
    v->long_ids = malloc(((size_t)n_long + 1) * sizeof *v->long_ids);
    v->long_cp = malloc(((size_t)n_long + 1) * sizeof *v->long_cp);
    v->mix_ids = malloc(((size_t)n_mix + 1) * sizeof *v->mix_ids);
    v->mix_j = malloc(((size_t)n_mix + 1) * sizeof *v->mix_j);
    v->mix_off = malloc(((size_t)n_mix + 1) * sizeof *v->mix_off);
    int rc = !v->long_ids || !v->long_cp || !v->mix_ids || !v->mix_j || !v->mix_off;
    for (int k = 0; !rc && k < n_long; k++) {
        v->long_ids[k] = pure[k].id;
        v->long_cp[k] = pure[k].cp;
    }
    v->n_long = n_long;
    for (int k = 0; !rc && k < n_mix; k++) {
        v->mix_ids[k] = mix[k].id;
        v->mix_j[k] = (uint16_t)mix[k].j;
        v->mix_off[k] = (uint16_t)mix[k].off;
        if (mix[k].j > v->mix_jmax) v->mix_jmax = mix[k].j;
        if ((int)v->len[mix[k].id] - mix[k].off > v->mix_len) v->mix_len = (int)v->len[mix[k].id] - mix[k].off;
    }
    v->n_mix = n_mix;
    if (!rc) rc = mix_runs(v, mix);
    free(pure);
    free(mix);
    return rc ? -1 : 0;
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
    if (!rc) rc = kids_build(v);
    if (!rc) rc = text_build(v);
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
    free(v->kid_b);
    free(v->kid_n);
    free(v->text_rows);
    free(v->long_ids);
    free(v->long_cp);
    free(v->mix_ids);
    free(v->mix_grp);
    free(v->mix_sfx);
    free(v->mix_lcp);
    free(v->mix_j);
    free(v->mix_off);
    free(v->ids);
    free(v->str);
    free(v->len);
    free(v);
}

int iris_vocab_n(const iris_vocab *v) { return v->n_vocab; }
int iris_vocab_n_nodes(const iris_vocab *v) { return v->n_nodes; }

