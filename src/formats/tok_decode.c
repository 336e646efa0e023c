/* tok_decode.c: token ids -> text, whole or incrementally for streaming.
 *
 * A token's text is the bytes it stands for (tokenizer.c decodes the byte
 * alphabet at load time), so decoding is concatenation followed by one
 * UTF-8 repair: every maximal invalid subsequence becomes one U+FFFD, the
 * rule of Rust's String::from_utf8_lossy that HF's ByteLevel decoder uses.
 * The stream decoder applies the same rule to bytes as they arrive and holds
 * back only an unfinished sequence that could still become valid, so its
 * pieces concatenate to exactly the whole decode.
 *
 * Ids with no token are skipped, as HF's decode does (models have more
 * embedding rows than tokens).  Added tokens are written as their text;
 * IRIS_TOK_SKIP_SPECIAL drops those marked special.
 */
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "tok_internal.h"

typedef struct dbuf {
    char *p;
    size_t n, cap;
} dbuf;

static int dbuf_fit(dbuf *b, size_t more) {
    if (b->n + more + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + more + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return IRIS_ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

/* Append the repaired text of s[0..len) to b.  When !final, an unfinished
 * but so far valid sequence at the end is left unconsumed.  Returns the
 * number of bytes consumed, or (size_t)-1 when out of memory. */
static size_t utf8_repair(dbuf *b, const unsigned char *s, size_t len, int final) {
    static const char fffd[3] = {(char)0xef, (char)0xbf, (char)0xbd};
    /* Worst case every byte becomes 3. */
    if (dbuf_fit(b, len * 3)) return (size_t)-1;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            b->p[b->n++] = (char)c;
            i++;
            continue;
        }
        size_t n;
        unsigned lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) n = 2;
        else if (c >= 0xe0 && c <= 0xef) {
            n = 3;
            if (c == 0xe0) lo = 0xa0;
            else if (c == 0xed) hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 4;
            if (c == 0xf0) lo = 0x90;
            else if (c == 0xf4) hi = 0x8f;
        } else {
            memcpy(b->p + b->n, fffd, 3);
            b->n += 3;
            i++;
            continue;
        }
        size_t k = 1; /* bytes of the sequence that are valid so far */
        while (k < n && i + k < len) {
            unsigned d = s[i + k];
            if (k == 1 ? (d < lo || d > hi) : (d & 0xc0) != 0x80) break;
            k++;
        }
        if (k == n) {
            memcpy(b->p + b->n, s + i, n);
            b->n += n;
            i += n;
        } else if (i + k == len && !final) {
            break; /* may still complete */
        } else {
            memcpy(b->p + b->n, fffd, 3);
            b->n += 3;
            i += k;
        }
    }
    b->p[b->n] = 0;
    return i;
}

int iris_tok_decode(const iris_tok *t, const int32_t *ids, size_t n, int flags, char **out, size_t *out_len,
                    iris_err *err) {
    *out = NULL;
    dbuf raw = {0}, text = {0};
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_tokens || !t->tokens[id].bytes) continue;
        if ((flags & IRIS_TOK_SKIP_SPECIAL) && t->tokens[id].special) continue;
        if (dbuf_fit(&raw, t->tokens[id].len)) goto oom;
        memcpy(raw.p + raw.n, t->tokens[id].bytes, t->tokens[id].len);
        raw.n += t->tokens[id].len;
    }
    if (utf8_repair(&text, (const unsigned char *)raw.p, raw.n, 1) == (size_t)-1) goto oom;
    if (!text.p && dbuf_fit(&text, 0)) goto oom;
    text.p[text.n] = 0;
    free(raw.p);
    *out = text.p;
    if (out_len) *out_len = text.n;
    return 0;
oom:
    free(raw.p);
    free(text.p);
    return iris_err_set(err, IRIS_ENOMEM, "out of memory decoding %zu ids", n);
}

void iris_tok_stream_init(iris_tok_stream *s, const iris_tok *tok, int flags) {
    memset(s, 0, sizeof *s);
    s->tok = tok;
    s->flags = flags;
}

static int stream_feed(iris_tok_stream *s, const char *bytes, size_t n, int final, const char **text, size_t *len,
                       iris_err *err) {
    dbuf in = {0}, outb = {.p = s->buf, .cap = s->buf_cap};
    if (dbuf_fit(&in, (size_t)s->n_pend + n)) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    memcpy(in.p, s->pend, (size_t)s->n_pend);
    if (n) memcpy(in.p + s->n_pend, bytes, n);
    in.n = (size_t)s->n_pend + n;
    size_t used = utf8_repair(&outb, (const unsigned char *)in.p, in.n, final);
    s->buf = outb.p;
    s->buf_cap = outb.cap;
    if (used == (size_t)-1) {
        free(in.p);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    /* What is left is a proper prefix of one sequence: at most 3 bytes. */
    s->n_pend = (int)(in.n - used);
    memcpy(s->pend, in.p + used, (size_t)s->n_pend);
    free(in.p);
    *text = s->buf ? s->buf : "";
    *len = outb.n;
    return 0;
}

int iris_tok_stream_push(iris_tok_stream *s, int32_t id, const char **text, size_t *len, iris_err *err) {
    const iris_tok *t = s->tok;
    if (id < 0 || id >= t->n_tokens || !t->tokens[id].bytes ||
        ((s->flags & IRIS_TOK_SKIP_SPECIAL) && t->tokens[id].special))
        return stream_feed(s, NULL, 0, 0, text, len, err);
    return stream_feed(s, t->tokens[id].bytes, t->tokens[id].len, 0, text, len, err);
}

int iris_tok_stream_flush(iris_tok_stream *s, const char **text, size_t *len, iris_err *err) {
    return stream_feed(s, NULL, 0, 1, text, len, err);
}

void iris_tok_stream_free(iris_tok_stream *s) {
    if (!s) return;
    free(s->buf);
    s->buf = NULL;
    s->buf_cap = 0;
}
