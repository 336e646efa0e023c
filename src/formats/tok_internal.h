/* tok_internal.h: the inside of iris_tok, shared by tokenizer.c (loading,
 * lookup), tok_encode.c (encoding) and tok_decode.c (decoding).  Not for use
 * outside these three files.
 *
 * Invariants after a successful load:
 *   - tokens[id] (bytes, len) is the decoded text of every id that exists;
 *     tokens[id].bytes == NULL marks an id with no token;
 *   - byte_id[b] is the id of the one-byte token for byte b, or -1;
 *   - the merge table maps (left id, right id) to (rank, merged id);
 *   - by_text maps decoded token text to id (added tokens win over vocab).
 */
#ifndef IRIS_TOK_INTERNAL_H
#define IRIS_TOK_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* An open-addressing table from byte strings to int32 values.  The keys
 * point into memory owned elsewhere (the token texts). */
typedef struct tok_strmap {
    struct tok_strmap_slot {
        const char *key;
        uint32_t len;
        int32_t val;
    } *slots;
    size_t cap, n; /* cap is a power of two */
} tok_strmap;

/* (left, right) -> (rank, merged id). */
typedef struct tok_mergemap {
    struct tok_merge_slot {
        uint64_t key; /* left << 32 | right; UINT64_MAX = empty */
        int32_t rank, id;
    } *slots;
    size_t cap, n;
} tok_mergemap;

typedef struct tok_token {
    char *bytes;
    uint32_t len;
    uint8_t added, special;
} tok_token;

typedef struct tok_added {
    int32_t id;
    char *content; /* as matched: NFC-normalized when `normalized` */
    uint32_t len;
    uint8_t special, normalized, lstrip, rstrip, single_word;
} tok_added;

/* The cache of whole-word BPE results (word bytes -> ids), bounded; cleared
 * when full.  Guarded by `lock`. */
typedef struct tok_cache {
    pthread_mutex_t lock;
    struct tok_cache_slot {
        uint64_t hash;    /* 0 = empty */
        uint32_t key_off; /* into keys */
        uint32_t key_len;
        uint32_t ids_off; /* into ids */
        uint32_t n_ids;
    } *slots;
    size_t cap, n;
    char *keys;
    size_t keys_len, keys_cap;
    int32_t *ids;
    size_t ids_len, ids_cap;
} tok_cache;

enum { TOK_NORM_NONE = 0, TOK_NORM_NFC = 1 };

struct iris_tok {
    tok_token *tokens;
    int32_t n_tokens; /* max id + 1 */
    tok_strmap by_text;
    tok_mergemap merges;
    int32_t byte_id[256];
    int32_t unk_id;    /* -1 when the model has no unk_token */
    int ignore_merges; /* model.ignore_merges: whole word in vocab wins */
    tok_strmap vocab_bl; /* vocab in byte-level text, only when ignore_merges */

    tok_added *added;
    int n_added;
    int has_normalized_added;
    uint8_t added_first[256]; /* 1 when some added token starts with this byte */

    int normalizer; /* TOK_NORM_* */
    pcre2_code *split_re; /* NULL: no regex split */
    int split_isolated;   /* behavior: only "Isolated" is supported */
    int byte_level_prefix_space;

    tok_cache cache;
};

uint64_t iris_tok_hash(const char *s, size_t len);
int32_t iris_tok_strmap_get(const tok_strmap *m, const char *key, size_t len);
int iris_tok_mergemap_get(const tok_mergemap *m, int32_t left, int32_t right, int32_t *rank, int32_t *id);
int iris_tok_nfc(const char *s, size_t len, char **out, size_t *out_len, iris_err *err);
void iris_tok_cache_free(tok_cache *c);

#endif
