/* tokenizer.c: loading a Hugging Face tokenizer.json into an iris_tok, and
 * the lookups (id <-> text).  Encoding is in tok_encode.c, decoding in
 * tok_decode.c; the shared struct is in tok_internal.h.
 *
 * What is accepted (anything else is IRIS_EUNSUPPORTED naming the field):
 *   model:         BPE; vocab {text: id}; merges as "a b" strings or [a, b]
 *                  pairs; unk_token, ignore_merges; no dropout, no subword
 *                  prefix/suffix, no byte_fallback;
 *   added_tokens:  id, content, special, normalized, lstrip, rstrip, single_word;
 *   normalizer:    null, NFC, or a Sequence of NFC;
 *   pre_tokenizer: Split(Regex or String, Isolated) and/or ByteLevel
 *                  (add_prefix_space false), alone or in a Sequence;
 *   decoder:       ByteLevel (alone or in a Sequence).
 * The post_processor is ignored: iris never adds BOS/EOS (as HF's
 * add_special_tokens=False).  Vocab texts are stored decoded from GPT-2's
 * byte alphabet, so a token's text is the bytes it stands for.
 */
#include "tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "tok_internal.h"

/* ---- hashing and the two tables ---------------------------------------- */

uint64_t iris_tok_hash(const char *s, size_t len) {
    /* FNV-1a with a final mix; enough for token-sized keys. */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

static int strmap_init(tok_strmap *m, size_t n_expected) {
    size_t cap = 16;
    while (cap < n_expected * 2) cap <<= 1;
    m->slots = calloc(cap, sizeof *m->slots);
    m->cap = cap;
    m->n = 0;
    return m->slots ? 0 : IRIS_ENOMEM;
}

/* Insert or overwrite; the key memory must outlive the map. */
static void strmap_put(tok_strmap *m, const char *key, uint32_t len, int32_t val) {
    size_t i = iris_tok_hash(key, len) & (m->cap - 1);
    while (m->slots[i].key) {
        if (m->slots[i].len == len && !memcmp(m->slots[i].key, key, len)) {
            m->slots[i].val = val;
            return;
        }
        i = (i + 1) & (m->cap - 1);
    }
    m->slots[i].key = key;
    m->slots[i].len = len;
    m->slots[i].val = val;
    m->n++;
}

int32_t iris_tok_strmap_get(const tok_strmap *m, const char *key, size_t len) {
    if (!m->slots) return -1;
    size_t i = iris_tok_hash(key, len) & (m->cap - 1);
    while (m->slots[i].key) {
        if (m->slots[i].len == len && !memcmp(m->slots[i].key, key, len)) return m->slots[i].val;
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static int mergemap_init(tok_mergemap *m, size_t n_expected) {
    size_t cap = 16;
    while (cap < n_expected * 2) cap <<= 1;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return IRIS_ENOMEM;
    for (size_t i = 0; i < cap; i++) m->slots[i].key = UINT64_MAX;
    m->cap = cap;
    m->n = 0;
    return 0;
}

static void mergemap_put(tok_mergemap *m, int32_t left, int32_t right, int32_t rank, int32_t id) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = mix64(key) & (m->cap - 1);
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != key) i = (i + 1) & (m->cap - 1);
    if (m->slots[i].key == UINT64_MAX) m->n++;
    m->slots[i].key = key; /* a repeated pair keeps the later rank, as HF's HashMap insert */
    m->slots[i].rank = rank;
    m->slots[i].id = id;
}

int iris_tok_mergemap_get(const tok_mergemap *m, int32_t left, int32_t right, int32_t *rank, int32_t *id) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = mix64(key) & (m->cap - 1);
    for (;;) {
        const struct tok_merge_slot *s = &m->slots[i];
        if (s->key == key) {
            *rank = s->rank;
            *id = s->id;
            return 1;
        }
        if (s->key == UINT64_MAX) return 0;
        i = (i + 1) & (m->cap - 1);
    }
}

/* ---- GPT-2's byte alphabet ---------------------------------------------- */

/* Byte b is written as the code point byte_cp[b]: printable Latin-1 bytes as
 * themselves, the other 68 as 256, 257, ... in byte order. */
static void byte_alphabet(uint16_t byte_cp[256], int16_t cp_byte[324]) {
    int n = 0;
    for (int i = 0; i < 324; i++) cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        byte_cp[b] = (uint16_t)(printable ? b : 256 + n++);
        cp_byte[byte_cp[b]] = (int16_t)b;
    }
}

/* Decode one UTF-8 code point at s[*i] (input already validated by jansson). */
static int32_t next_cp(const unsigned char *s, size_t len, size_t *i) {
    unsigned c = s[*i];
    int n = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (*i + (size_t)n > len) {
        *i = len;
        return -1;
    }
    int32_t cp = n == 1 ? (int32_t)c : n == 2 ? (int32_t)(c & 0x1f) : n == 3 ? (int32_t)(c & 0x0f) : (int32_t)(c & 7);
    for (int k = 1; k < n; k++) cp = cp << 6 | (s[*i + (size_t)k] & 0x3f);
    *i += (size_t)n;
    return cp;
}

/* The bytes a byte-level vocab text stands for; a text with a character
 * outside the alphabet stands for its own UTF-8 (HF's ByteLevel decoder
 * falls back the same way).  Returns a malloc'd buffer. */
static char *byte_level_decode(const char *s, size_t len, const int16_t cp_byte[324], uint32_t *out_len) {
    char *out = malloc(len + 1);
    if (!out) return NULL;
    size_t i = 0, n = 0;
    while (i < len) {
        int32_t cp = next_cp((const unsigned char *)s, len, &i);
        if (cp < 0 || cp >= 324 || cp_byte[cp] < 0) {
            memcpy(out, s, len);
            n = len;
            break;
        }
        out[n++] = (char)cp_byte[cp];
    }
    out[n] = 0;
    *out_len = (uint32_t)n;
    return out;
}

/* ---- loading ------------------------------------------------------------ */

static int load_model(iris_tok *t, json_t *model, const char *name, json_t **vocab_out, iris_err *err) {
    if (!json_is_object(model)) return iris_err_set(err, IRIS_EFORMAT, "%s: no \"model\" object", name);
    const char *type = json_string_value(json_object_get(model, "type"));
    if (type && strcmp(type, "BPE"))
        return iris_err_set(err, IRIS_EUNSUPPORTED, "%s: model type \"%s\" is not supported (only BPE)", name, type);
    json_t *v;
    if ((v = json_object_get(model, "dropout")) && !json_is_null(v))
        return iris_err_set(err, IRIS_EUNSUPPORTED, "%s: BPE dropout is not supported", name);
    const char *keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const char *s = json_string_value(json_object_get(model, keys[k]));
        if (s && *s) return iris_err_set(err, IRIS_EUNSUPPORTED, "%s: model.%s \"%s\" is not supported", name, keys[k], s);
    }
    if (json_is_true(json_object_get(model, "byte_fallback")))
        return iris_err_set(err, IRIS_EUNSUPPORTED, "%s: model.byte_fallback is not supported", name);
    t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return iris_err_set(err, IRIS_EFORMAT, "%s: model.vocab is not an object", name);
    *vocab_out = vocab;
    return 0;
}

static int load_merges(iris_tok *t, json_t *model, json_t *vocab, const char *name, iris_err *err) {
    json_t *merges = json_object_get(model, "merges");
    if (!merges || json_is_null(merges)) merges = NULL;
    else if (!json_is_array(merges)) return iris_err_set(err, IRIS_EFORMAT, "%s: model.merges is not an array", name);
    size_t n = merges ? json_array_size(merges) : 0;
    if (mergemap_init(&t->merges, n) < 0) return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", name);
    char *buf = NULL;
    size_t buf_cap = 0;
    int rc = 0;
    for (size_t r = 0; r < n && !rc; r++) {
        json_t *m = json_array_get(merges, r);
        const char *a, *b;
        size_t la, lb;
        char pair[2][512];
        if (json_is_string(m)) {
            /* The old form "a b": exactly one space (byte-level texts have none). */
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            size_t ls = json_string_length(m);
            if (!sp || strchr(sp + 1, ' ') || (size_t)(sp - s) >= sizeof pair[0] || ls - (size_t)(sp - s) > sizeof pair[1]) {
                rc = iris_err_set(err, IRIS_EFORMAT, "%s: merge %zu \"%s\" is not two tokens separated by one space", name, r, s);
                break;
            }
            la = (size_t)(sp - s);
            lb = ls - la - 1;
            memcpy(pair[0], s, la);
            pair[0][la] = 0;
            memcpy(pair[1], sp + 1, lb + 1);
            a = pair[0];
            b = pair[1];
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            la = strlen(a);
            lb = strlen(b);
        } else {
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: merge %zu is neither \"a b\" nor [\"a\", \"b\"]", name, r);
            break;
        }
        json_t *ja = json_object_get(vocab, a), *jb = json_object_get(vocab, b);
        if (!json_is_integer(ja) || !json_is_integer(jb)) {
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: merge %zu (\"%s\", \"%s\"): \"%s\" is not in the vocab", name, r, a, b,
                              json_is_integer(ja) ? b : a);
            break;
        }
        if (la + lb + 1 > buf_cap) {
            buf_cap = (la + lb + 1) * 2;
            char *nb = realloc(buf, buf_cap);
            if (!nb) {
                rc = iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", name);
                break;
            }
            buf = nb;
        }
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb + 1);
        json_t *jab = json_object_get(vocab, buf);
        if (!json_is_integer(jab)) {
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: merge %zu (\"%s\", \"%s\"): the merged token \"%s\" is not in the vocab",
                              name, r, a, b, buf);
            break;
        }
        mergemap_put(&t->merges, (int32_t)json_integer_value(ja), (int32_t)json_integer_value(jb), (int32_t)r,
                     (int32_t)json_integer_value(jab));
    }
    free(buf);
    return rc;
}

static int load_normalizer(iris_tok *t, json_t *norm, const char *name, iris_err *err) {
    if (!norm || json_is_null(norm)) return 0;
    const char *type = json_string_value(json_object_get(norm, "type"));
    if (type && !strcmp(type, "NFC")) {
        t->normalizer = TOK_NORM_NFC;
        return 0;
    }
    if (type && !strcmp(type, "Sequence")) {
        json_t *list = json_object_get(norm, "normalizers"), *item;
        size_t i;
        json_array_foreach(list, i, item) {
            int rc = load_normalizer(t, item, name, err);
            if (rc) return rc;
        }
        return 0;
    }
    return iris_err_set(err, IRIS_EUNSUPPORTED, "%s: normalizer \"%s\" is not supported (only NFC)", name, type ? type : "?");
}

/* GPT-2's split regex, what ByteLevel(use_regex=true) applies. */
static const char gpt2_regex[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int compile_split(iris_tok *t, const char *pattern, size_t len, int literal, const char *name, iris_err *err) {
    if (t->split_re)
        return iris_err_set(err, IRIS_EUNSUPPORTED, "%s: more than one splitting pre-tokenizer is not supported", name);
    int ec;
    PCRE2_SIZE eo;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    t->split_re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &ec, &eo, NULL);
    if (!t->split_re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return iris_err_set(err, IRIS_EFORMAT, "%s: the split regex does not compile at offset %zu: %s", name, (size_t)eo,
                            (char *)msg);
    }
    /* JIT when the platform has it; the interpreter is the fallback. */
    pcre2_jit_compile(t->split_re, PCRE2_JIT_COMPLETE);
    return 0;
}

static int load_pre_tokenizer(iris_tok *t, json_t *pt, int *has_byte_level, const char *name, iris_err *err) {
    if (!pt || json_is_null(pt)) return 0;
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (!type) return iris_err_set(err, IRIS_EFORMAT, "%s: a pre_tokenizer has no type", name);
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(pt, "pretokenizers"), *item;
        size_t i;
        json_array_foreach(list, i, item) {
            int rc = load_pre_tokenizer(t, item, has_byte_level, name, err);
            if (rc) return rc;
        }
        return 0;
    }
    if (!strcmp(type, "Split")) {
        json_t *pat = json_object_get(pt, "pattern");
        const char *behavior = json_string_value(json_object_get(pt, "behavior"));
        if (behavior && strcmp(behavior, "Isolated"))
            return iris_err_set(err, IRIS_EUNSUPPORTED, "%s: Split behavior \"%s\" is not supported (only Isolated)", name,
                                behavior);
        if (json_is_true(json_object_get(pt, "invert")))
            return iris_err_set(err, IRIS_EUNSUPPORTED, "%s: Split with invert is not supported", name);
        json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
        if (json_is_string(re)) return compile_split(t, json_string_value(re), json_string_length(re), 0, name, err);
        if (json_is_string(lit)) return compile_split(t, json_string_value(lit), json_string_length(lit), 1, name, err);
        return iris_err_set(err, IRIS_EFORMAT, "%s: Split has no Regex or String pattern", name);
    }
    if (!strcmp(type, "ByteLevel")) {
        *has_byte_level = 1;
        if (json_is_true(json_object_get(pt, "add_prefix_space")))
            return iris_err_set(err, IRIS_EUNSUPPORTED, "%s: ByteLevel add_prefix_space=true is not supported", name);
        json_t *ur = json_object_get(pt, "use_regex");
        if (!ur || json_is_true(ur)) return compile_split(t, gpt2_regex, sizeof gpt2_regex - 1, 0, name, err);
        return 0;
    }
    return iris_err_set(err, IRIS_EUNSUPPORTED, "%s: pre_tokenizer \"%s\" is not supported", name, type);
}

static int decoder_is_byte_level(json_t *d) {
    const char *type = json_string_value(json_object_get(d, "type"));
    if (!type) return 0;
    if (!strcmp(type, "ByteLevel")) return 1;
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(d, "decoders"), *item;
        size_t i;
        int found = 0;
        json_array_foreach(list, i, item) {
            if (!decoder_is_byte_level(item)) return 0;
            found = 1;
        }
        return found;
    }
    return 0;
}

static int set_token(iris_tok *t, int32_t id, char *bytes, uint32_t len, const char *name, iris_err *err) {
    if (id < 0 || id >= t->n_tokens) {
        free(bytes);
        return iris_err_set(err, IRIS_EFORMAT, "%s: token id %d is out of range", name, (int)id);
    }
    free(t->tokens[id].bytes);
    t->tokens[id].bytes = bytes;
    t->tokens[id].len = len;
    return 0;
}

static int load_added(iris_tok *t, json_t *list, const char *name, iris_err *err) {
    size_t n = json_array_size(list);
    if (!n) return 0;
    t->added = calloc(n, sizeof *t->added);
    if (!t->added) return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", name);
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(list, i);
        json_t *jid = json_object_get(a, "id"), *jc = json_object_get(a, "content");
        if (!json_is_integer(jid) || !json_is_string(jc) || json_string_length(jc) == 0)
            return iris_err_set(err, IRIS_EFORMAT, "%s: added_tokens[%zu] needs an integer id and a non-empty content",
                                name, i);
        tok_added *ad = &t->added[t->n_added++];
        ad->id = (int32_t)json_integer_value(jid);
        ad->special = json_is_true(json_object_get(a, "special"));
        ad->normalized = json_is_true(json_object_get(a, "normalized"));
        ad->lstrip = json_is_true(json_object_get(a, "lstrip"));
        ad->rstrip = json_is_true(json_object_get(a, "rstrip"));
        ad->single_word = json_is_true(json_object_get(a, "single_word"));
        const char *c = json_string_value(jc);
        size_t cl = json_string_length(jc);
        char *text = malloc(cl + 1);
        if (!text) return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", name);
        memcpy(text, c, cl + 1);
        int rc = set_token(t, ad->id, text, (uint32_t)cl, name, err);
        if (rc) return rc;
        t->tokens[ad->id].added = 1;
        t->tokens[ad->id].special = ad->special;
        /* HF matches normalized added tokens in normalized text, so their
         * pattern is normalized too. */
        if (ad->normalized && t->normalizer == TOK_NORM_NFC) {
            size_t nl;
            rc = iris_tok_nfc(c, cl, &ad->content, &nl, err);
            if (rc) return iris_err_prefix(err, "%s: added token %d", name, (int)ad->id);
            ad->len = (uint32_t)nl;
        } else {
            ad->content = malloc(cl + 1);
            if (!ad->content) return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", name);
            memcpy(ad->content, c, cl + 1);
            ad->len = (uint32_t)cl;
        }
        if (ad->normalized) t->has_normalized_added = 1;
        t->added_first[(unsigned char)ad->content[0]] = 1;
    }
    return 0;
}

int iris_tok_load_json(const char *text, size_t len, const char *name, iris_tok **out, iris_err *err) {
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root)
        return iris_err_set(err, IRIS_EFORMAT, "%s: invalid JSON at line %d column %d: %s", name, je.line, je.column,
                            je.text);
    iris_tok *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(root);
        return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", name);
    }
    pthread_mutex_init(&t->cache.lock, NULL);
    t->unk_id = -1;
    int rc;
    json_t *model = json_object_get(root, "model"), *vocab = NULL, *added = json_object_get(root, "added_tokens");
    int has_byte_level = 0;
    if (!json_is_object(root)) {
        rc = iris_err_set(err, IRIS_EFORMAT, "%s: the top level is not a JSON object", name);
        goto done;
    }
    if ((rc = load_model(t, model, name, &vocab, err))) goto done;
    if ((rc = load_normalizer(t, json_object_get(root, "normalizer"), name, err))) goto done;
    if ((rc = load_pre_tokenizer(t, json_object_get(root, "pre_tokenizer"), &has_byte_level, name, err))) goto done;
    if (!has_byte_level) {
        rc = iris_err_set(err, IRIS_EUNSUPPORTED, "%s: not a byte-level BPE tokenizer (no ByteLevel pre_tokenizer)", name);
        goto done;
    }
    if (!decoder_is_byte_level(json_object_get(root, "decoder"))) {
        rc = iris_err_set(err, IRIS_EUNSUPPORTED, "%s: the decoder is not ByteLevel", name);
        goto done;
    }

    /* Size the id space from the largest id anywhere. */
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) > 100000000) {
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: vocab entry \"%s\" has no valid id", name, key);
            goto done;
        }
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    if (added && !json_is_array(added)) {
        rc = iris_err_set(err, IRIS_EFORMAT, "%s: added_tokens is not an array", name);
        goto done;
    }
    size_t i;
    json_array_foreach(added, i, val) {
        json_int_t id = json_integer_value(json_object_get(val, "id"));
        if (id < 0 || id > 100000000) {
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: added_tokens[%zu] has id %lld out of range", name, i, (long long)id);
            goto done;
        }
        if (id > max_id) max_id = id;
    }
    t->n_tokens = (int32_t)(max_id + 1);
    t->tokens = calloc((size_t)t->n_tokens + 1, sizeof *t->tokens);
    if (!t->tokens) {
        rc = iris_err_set(err, IRIS_ENOMEM, "%s: out of memory for %d tokens", name, (int)t->n_tokens);
        goto done;
    }
    uint16_t byte_cp[256];
    int16_t cp_byte[324];
    byte_alphabet(byte_cp, cp_byte);
    json_object_foreach(vocab, key, val) {
        uint32_t bl;
        char *bytes = byte_level_decode(key, strlen(key), cp_byte, &bl);
        if (!bytes) {
            rc = iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", name);
            goto done;
        }
        if ((rc = set_token(t, (int32_t)json_integer_value(val), bytes, bl, name, err))) goto done;
    }
    for (int b = 0; b < 256; b++) {
        char one[4];
        uint16_t cp = byte_cp[b];
        size_t n = cp < 0x80 ? 1 : 2;
        if (n == 1) one[0] = (char)cp;
        else {
            one[0] = (char)(0xc0 | cp >> 6);
            one[1] = (char)(0x80 | (cp & 0x3f));
        }
        one[n] = 0;
        json_t *jid = json_object_get(vocab, one);
        t->byte_id[b] = json_is_integer(jid) ? (int32_t)json_integer_value(jid) : -1;
    }
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    if (unk) {
        json_t *jid = json_object_get(vocab, unk);
        if (!json_is_integer(jid)) {
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: unk_token \"%s\" is not in the vocab", name, unk);
            goto done;
        }
        t->unk_id = (int32_t)json_integer_value(jid);
    }
    if ((rc = load_merges(t, model, vocab, name, err))) goto done;
    if ((rc = load_added(t, added, name, err))) goto done;

    if (strmap_init(&t->by_text, json_object_size(vocab) + (size_t)t->n_added) < 0) {
        rc = iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", name);
        goto done;
    }
    for (int32_t id = 0; id < t->n_tokens; id++)
        if (t->tokens[id].bytes && !t->tokens[id].added) strmap_put(&t->by_text, t->tokens[id].bytes, t->tokens[id].len, id);
    for (int k = 0; k < t->n_added; k++) {
        tok_token *tk = &t->tokens[t->added[k].id];
        strmap_put(&t->by_text, tk->bytes, tk->len, t->added[k].id);
    }
    if (t->ignore_merges) {
        /* Whole-word lookups happen on raw bytes: the model's own entries only. */
        if (strmap_init(&t->vocab_bl, json_object_size(vocab)) < 0) {
            rc = iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", name);
            goto done;
        }
        json_object_foreach(vocab, key, val) {
            int32_t id = (int32_t)json_integer_value(val);
            if (!t->tokens[id].added) strmap_put(&t->vocab_bl, t->tokens[id].bytes, t->tokens[id].len, id);
        }
    }
    rc = 0;
done:
    json_decref(root);
    if (rc) {
        iris_tok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int iris_tok_load(const char *path, iris_tok **out, iris_err *err) {
    *out = NULL;
    char file[4096];
    struct stat st;
    if (stat(path, &st) != 0) return iris_err_set(err, IRIS_ENOTFOUND, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        if ((size_t)snprintf(file, sizeof file, "%s/tokenizer.json", path) >= sizeof file)
            return iris_err_set(err, IRIS_EINVAL, "%s: path too long", path);
        if (stat(file, &st) != 0)
            return iris_err_set(err, IRIS_ENOTFOUND, "%s: no tokenizer.json in this directory", path);
    } else {
        if ((size_t)snprintf(file, sizeof file, "%s", path) >= sizeof file)
            return iris_err_set(err, IRIS_EINVAL, "%s: path too long", path);
    }
    FILE *f = fopen(file, "rb");
    if (!f) return iris_err_set(err, IRIS_EIO, "%s: %s", file, strerror(errno));
    char *buf = malloc((size_t)st.st_size + 1);
    size_t n = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf) return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory reading %lld bytes", file, (long long)st.st_size);
    if (bad || n != (size_t)st.st_size) {
        free(buf);
        return iris_err_set(err, IRIS_EIO, "%s: short read (%zu of %lld bytes)", file, n, (long long)st.st_size);
    }
    int rc = iris_tok_load_json(buf, n, file, out, err);
    free(buf);
    return rc;
}

void iris_tok_free(iris_tok *t) {
    if (!t) return;
    if (t->tokens)
        for (int32_t i = 0; i < t->n_tokens; i++) free(t->tokens[i].bytes);
    free(t->tokens);
    for (int k = 0; k < t->n_added; k++) free(t->added[k].content);
    free(t->added);
    free(t->by_text.slots);
    free(t->vocab_bl.slots);
    free(t->merges.slots);
    pcre2_code_free(t->split_re);
    iris_tok_cache_free(&t->cache);
    pthread_mutex_destroy(&t->cache.lock);
    free(t);
}

/* ---- lookups ------------------------------------------------------------ */

int32_t iris_tok_n_vocab(const iris_tok *t) { return t->n_tokens; }

int32_t iris_tok_find(const iris_tok *t, const char *text) {
    return iris_tok_strmap_get(&t->by_text, text, strlen(text));
}

const char *iris_tok_token(const iris_tok *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_tokens || !t->tokens[id].bytes) return NULL;
    if (len) *len = t->tokens[id].len;
    return t->tokens[id].bytes;
}

int iris_tok_is_special(const iris_tok *t, int32_t id) {
    return id >= 0 && id < t->n_tokens && t->tokens[id].special;
}

void iris_tok_ids_free(iris_tok_ids *v) {
    if (!v) return;
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

int iris_tok_ids_push(iris_tok_ids *v, int32_t id, iris_err *err) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->ids, cap * sizeof *p);
        if (!p) return iris_err_set(err, IRIS_ENOMEM, "out of memory for %zu token ids", cap);
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return 0;
}
