/* tok_encode.c: text -> token ids, the way HF `tokenizers` encodes with
 * add_special_tokens=False (see tokenizer.h for the stages).
 *
 * Owns: the word cache (whole pre-tokenized pieces -> ids, bounded, guarded
 * by a mutex so one iris_tok serves many threads).
 *
 * HF details reproduced here, with their source (tokenizers/src/...):
 *   - added tokens: aho-corasick leftmost-longest over the raw text, the
 *     search resuming after a match even when single_word rejects it
 *     (tokenizer/added_vocabulary.rs find_matches); lstrip/rstrip widen the
 *     match over white space; normalized added tokens are matched in the
 *     normalized text of what is left;
 *   - Split "Isolated": every match and every gap between matches is a
 *     piece (normalizer.rs split);
 *   - BPE: symbols in a linked list, a priority queue of (rank, position),
 *     stale entries skipped when popped (models/bpe/word.rs merge_all);
 *     bytes missing from the vocab become unk or are dropped.
 * Invalid UTF-8 is refused before anything is appended.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "err.h"
#include "tok_internal.h"

/* ---- UTF-8 -------------------------------------------------------------- */

int iris_utf8_check(const char *str, size_t len, size_t *bad_at) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
        if (c >= 0xc2 && c <= 0xdf) n = 2;
        else if (c >= 0xe0 && c <= 0xef) {
            n = 3;
            if (c == 0xe0) lo = 0xa0;       /* no overlongs */
            else if (c == 0xed) hi = 0x9f; /* no surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 4;
            if (c == 0xf0) lo = 0x90;
            else if (c == 0xf4) hi = 0x8f; /* <= U+10FFFF */
        } else {
            if (bad_at) *bad_at = i;
            return IRIS_EINVAL;
        }
        if (i + n > len || s[i + 1] < lo || s[i + 1] > hi) {
            if (bad_at) *bad_at = i;
            return IRIS_EINVAL;
        }
        for (size_t k = 2; k < n; k++)
            if ((s[i + k] & 0xc0) != 0x80) {
                if (bad_at) *bad_at = i;
                return IRIS_EINVAL;
            }
        i += n;
    }
    return 0;
}

int iris_tok_nfc(const char *s, size_t len, char **out, size_t *out_len, iris_err *err) {
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (n < 0) return iris_err_set(err, IRIS_EINVAL, "NFC normalization failed: %s", utf8proc_errmsg(n));
    *out = (char *)dst;
    *out_len = (size_t)n;
    return 0;
}

static int32_t decode_cp(const unsigned char *s, size_t len, size_t i, size_t *n) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate(s + i, (utf8proc_ssize_t)(len - i), &cp);
    *n = k > 0 ? (size_t)k : 1;
    return k > 0 ? cp : -1;
}

/* Rust's char::is_whitespace (the White_Space property). */
static int is_space_cp(int32_t cp) {
    if ((cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85) return 1;
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

/* Rust regex's \w: letters, marks, decimal and letter numbers, connectors. */
static int is_word_cp(int32_t cp) {
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC: return 1;
    default: return 0;
    }
}

/* The code point that ends s[0..end) (end > 0). */
static int32_t cp_before(const unsigned char *s, size_t end) {
    size_t i = end - 1, n;
    while (i > 0 && (s[i] & 0xc0) == 0x80) i--;
    return decode_cp(s, end, i, &n);
}

/* ---- the word cache ----------------------------------------------------- */

enum { CACHE_SLOTS = 1 << 17, CACHE_MAX_WORDS = CACHE_SLOTS / 2, CACHE_MAX_KEY = 256,
       CACHE_KEYS_BYTES = 4 << 20, CACHE_MAX_IDS = 1 << 20 };

void iris_tok_cache_free(tok_cache *c) {
    free(c->slots);
    free(c->keys);
    free(c->ids);
    c->slots = NULL;
    c->keys = NULL;
    c->ids = NULL;
}

/* Copy a cached result into out; 1 when found.  Caller holds the lock. */
static int cache_get(tok_cache *c, const char *w, size_t len, uint64_t h, iris_tok_ids *out, iris_err *err, int *rc) {
    if (!c->slots) return 0;
    size_t i = h & (c->cap - 1);
    for (; c->slots[i].hash; i = (i + 1) & (c->cap - 1)) {
        struct tok_cache_slot *s = &c->slots[i];
        if (s->hash == h && s->key_len == len && !memcmp(c->keys + s->key_off, w, len)) {
            for (uint32_t k = 0; k < s->n_ids; k++)
                if ((*rc = iris_tok_ids_push(out, c->ids[s->ids_off + k], err))) return 1;
            return 1;
        }
    }
    return 0;
}

static void cache_put(tok_cache *c, const char *w, size_t len, uint64_t h, const int32_t *ids, size_t n) {
    if (!c->slots) {
        c->slots = calloc(CACHE_SLOTS, sizeof *c->slots);
        c->keys = malloc(CACHE_KEYS_BYTES);
        c->ids = malloc(CACHE_MAX_IDS * sizeof *c->ids);
        if (!c->slots || !c->keys || !c->ids) {
            iris_tok_cache_free(c); /* no cache: slower, still correct */
            return;
        }
        c->cap = CACHE_SLOTS;
        c->keys_cap = CACHE_KEYS_BYTES;
        c->ids_cap = CACHE_MAX_IDS;
    }
    if (c->n >= CACHE_MAX_WORDS || c->keys_len + len > c->keys_cap || c->ids_len + n > c->ids_cap) {
        memset(c->slots, 0, c->cap * sizeof *c->slots);
        c->n = c->keys_len = c->ids_len = 0;
    }
    size_t i = h & (c->cap - 1);
    while (c->slots[i].hash) {
        if (c->slots[i].hash == h && c->slots[i].key_len == len && !memcmp(c->keys + c->slots[i].key_off, w, len))
            return; /* another thread got here first */
        i = (i + 1) & (c->cap - 1);
    }
    struct tok_cache_slot *s = &c->slots[i];
    s->hash = h;
    s->key_off = (uint32_t)c->keys_len;
    s->key_len = (uint32_t)len;
    s->ids_off = (uint32_t)c->ids_len;
    s->n_ids = (uint32_t)n;
    if (len) memcpy(c->keys + c->keys_len, w, len);
    c->keys_len += len;
    if (n) memcpy(c->ids + c->ids_len, ids, n * sizeof *ids);
    c->ids_len += n;
    c->n++;
}

/* ---- BPE on one piece --------------------------------------------------- */

typedef struct sym {
    int32_t id, prev, next;
} sym;

/* Scratch reused across the pieces of one encode call. */
typedef struct scratch {
    sym *syms;
    uint64_t *heap;
    size_t cap;
} scratch;

static int scratch_fit(scratch *sc, size_t n, iris_err *err) {
    if (n <= sc->cap) return 0;
    size_t cap = n < 64 ? 64 : n * 2;
    sym *s = realloc(sc->syms, cap * sizeof *s);
    if (s) sc->syms = s;
    uint64_t *h = s ? realloc(sc->heap, cap * 2 * sizeof *h) : NULL;
    if (!s || !h) return iris_err_set(err, IRIS_ENOMEM, "out of memory for a %zu-byte word", n);
    sc->heap = h;
    sc->cap = cap;
    return 0;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        uint64_t mv = v;
        if (l < *n && h[l] < mv) m = l, mv = h[l];
        if (l + 1 < *n && h[l + 1] < mv) m = l + 1;
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = v;
    return top;
}

static void push_pair(const iris_tok *t, sym *s, int32_t pos, uint64_t *heap, size_t *nh) {
    int32_t nx = s[pos].next, rank, id;
    if (nx >= 0 && iris_tok_mergemap_get(&t->merges, s[pos].id, s[nx].id, &rank, &id))
        heap_push(heap, nh, (uint64_t)(uint32_t)rank << 32 | (uint32_t)pos);
}

static int bpe_word(const iris_tok *t, const char *w, size_t len, scratch *sc, iris_tok_ids *out, iris_err *err) {
    if (t->ignore_merges) {
        int32_t id = iris_tok_strmap_get(&t->vocab_bl, w, len);
        if (id >= 0) return iris_tok_ids_push(out, id, err);
    }
    int rc = scratch_fit(sc, len, err);
    if (rc) return rc;
    sym *s = sc->syms;
    int32_t n = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t id = t->byte_id[(unsigned char)w[i]];
        if (id < 0) id = t->unk_id;
        if (id < 0) continue; /* HF drops characters missing from a vocab without unk */
        s[n].id = id;
        s[n].prev = n - 1;
        s[n].next = -1;
        if (n > 0) s[n - 1].next = n;
        n++;
    }
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < n; i++) push_pair(t, s, i, sc->heap, &nh);
    while (nh) {
        uint64_t top = heap_pop(sc->heap, &nh);
        int32_t pos = (int32_t)(uint32_t)top, want = (int32_t)(top >> 32), rank, id;
        if (s[pos].id < 0) continue;
        int32_t nx = s[pos].next;
        if (nx < 0 || !iris_tok_mergemap_get(&t->merges, s[pos].id, s[nx].id, &rank, &id) || rank != want) continue;
        s[pos].id = id;
        s[pos].next = s[nx].next;
        if (s[nx].next >= 0) s[s[nx].next].prev = pos;
        s[nx].id = -1;
        if (s[pos].prev >= 0) push_pair(t, s, s[pos].prev, sc->heap, &nh);
        push_pair(t, s, pos, sc->heap, &nh);
    }
    for (int32_t i = n ? 0 : -1; i >= 0; i = s[i].next)
        if ((rc = iris_tok_ids_push(out, s[i].id, err))) return rc;
    return 0;
}

static int encode_word(iris_tok *t, const char *w, size_t len, scratch *sc, iris_tok_ids *out, iris_err *err) {
    if (!len) return 0;
    int rc = 0;
    uint64_t h = 0;
    if (len <= CACHE_MAX_KEY) {
        h = iris_tok_hash(w, len) | 1; /* 0 marks an empty slot */
        pthread_mutex_lock(&t->cache.lock);
        int hit = cache_get(&t->cache, w, len, h, out, err, &rc);
        pthread_mutex_unlock(&t->cache.lock);
        if (hit) return rc;
    }
    size_t first = out->n;
    if ((rc = bpe_word(t, w, len, sc, out, err))) return rc;
    if (len <= CACHE_MAX_KEY) {
        pthread_mutex_lock(&t->cache.lock);
        cache_put(&t->cache, w, len, h, out->n > first ? out->ids + first : NULL, out->n - first);
        pthread_mutex_unlock(&t->cache.lock);
    }
    return 0;
}

/* ---- pre-tokenization --------------------------------------------------- */

static int pre_tokenize(iris_tok *t, const char *s, size_t len, pcre2_match_data *md, scratch *sc, iris_tok_ids *out,
                        iris_err *err) {
    if (!t->split_re) return encode_word(t, s, len, sc, out, err);
    size_t off = 0, prev = 0;
    int rc;
    while (off < len) {
        int m = pcre2_match(t->split_re, (PCRE2_SPTR)s, len, off, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m == PCRE2_ERROR_JIT_STACKLIMIT) /* the interpreter keeps its frames on the heap */
            m = pcre2_match(t->split_re, (PCRE2_SPTR)s, len, off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof msg);
            return iris_err_set(err, IRIS_ELIMIT, "the split regex failed at byte %zu: %s", off, (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* an empty match splits nothing; step one character */
            off = me + 1;
            while (off < len && ((unsigned char)s[off] & 0xc0) == 0x80) off++;
            continue;
        }
        if (ms > prev && (rc = encode_word(t, s + prev, ms - prev, sc, out, err))) return rc;
        if ((rc = encode_word(t, s + ms, me - ms, sc, out, err))) return rc;
        prev = off = me;
    }
    if (prev < len) return encode_word(t, s + prev, len - prev, sc, out, err);
    return 0;
}

/* ---- added tokens ------------------------------------------------------- */

/* What encodes the text between added tokens: normalize + split + BPE
 * (stage 0), or split + BPE of already normalized text (stage 1). */
typedef struct enc_ctx {
    iris_tok *t;
    pcre2_match_data *md;
    scratch sc;
    iris_tok_ids *out;
} enc_ctx;

static int encode_text(enc_ctx *c, const char *s, size_t len, int normalized, iris_err *err);

/* Cut the added tokens whose `normalized` flag is `want_normalized` out of
 * s, encoding the text between them with encode_text. */
static int split_added(enc_ctx *c, const char *str, size_t len, int want_normalized, iris_err *err) {
    iris_tok *t = c->t;
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, start_offset = 0;
    int rc;
    while (i < len) {
        if (!t->added_first[s[i]]) {
            i++;
            continue;
        }
        const tok_added *best = NULL;
        for (int k = 0; k < t->n_added; k++) {
            const tok_added *a = &t->added[k];
            if (a->normalized != want_normalized || a->len > len - i || (best && a->len <= best->len)) continue;
            if (!memcmp(s + i, a->content, a->len)) best = a;
        }
        if (!best) {
            i++;
            continue;
        }
        size_t start = i, stop = i + best->len;
        i = stop; /* aho-corasick resumes after the match, used or not */
        if (best->single_word) {
            size_t n;
            int word_before = start > 0 && is_word_cp(cp_before(s, start));
            int word_after = stop < len && is_word_cp(decode_cp(s, len, stop, &n));
            if (word_before || word_after) continue;
        }
        if (best->lstrip) {
            while (start > start_offset && is_space_cp(cp_before(s, start))) {
                size_t j = start - 1;
                while (j > 0 && (s[j] & 0xc0) == 0x80) j--;
                start = j;
            }
        }
        if (best->rstrip) {
            size_t n;
            while (stop < len && is_space_cp(decode_cp(s, len, stop, &n))) stop += n;
            i = stop;
        }
        if (start > start_offset && (rc = encode_text(c, str + start_offset, start - start_offset, want_normalized, err)))
            return rc;
        if ((rc = iris_tok_ids_push(c->out, best->id, err))) return rc;
        start_offset = stop;
    }
    if (start_offset < len) return encode_text(c, str + start_offset, len - start_offset, want_normalized, err);
    return 0;
}

static int encode_text(enc_ctx *c, const char *s, size_t len, int normalized, iris_err *err) {
    iris_tok *t = c->t;
    if (normalized) return pre_tokenize(t, s, len, c->md, &c->sc, c->out, err);
    int ascii = 1;
    for (size_t i = 0; i < len && ascii; i++) ascii = (unsigned char)s[i] < 0x80;
    char *norm = NULL;
    size_t nlen = len;
    if (t->normalizer == TOK_NORM_NFC && !ascii) { /* ASCII is already NFC */
        int rc = iris_tok_nfc(s, len, &norm, &nlen, err);
        if (rc) return rc;
        s = norm;
    }
    int rc = t->has_normalized_added ? split_added(c, s, nlen, 1, err) : pre_tokenize(t, s, nlen, c->md, &c->sc, c->out, err);
    free(norm);
    return rc;
}

int iris_tok_encode(const iris_tok *ct, const char *text, size_t len, iris_tok_ids *out, iris_err *err) {
    iris_tok *t = (iris_tok *)ct; /* only the mutex-guarded cache changes */
    size_t bad;
    if (iris_utf8_check(text, len, &bad))
        return iris_err_set(err, IRIS_EINVAL, "text is not valid UTF-8: byte 0x%02x at offset %zu", (unsigned char)text[bad],
                            bad);
    enc_ctx c = {.t = t, .out = out};
    if (t->split_re && !(c.md = pcre2_match_data_create_from_pattern(t->split_re, NULL)))
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    size_t first = out->n;
    int rc = t->n_added ? split_added(&c, text, len, 0, err) : encode_text(&c, text, len, 0, err);
    if (rc) out->n = first;
    pcre2_match_data_free(c.md);
    free(c.sc.syms);
    free(c.sc.heap);
    return rc;
}
