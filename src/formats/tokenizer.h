/* tokenizer.h: the byte-level BPE tokenizer of Qwen3-VL, built from a
 * Hugging Face tokenizer.json.
 *
 * What it reproduces (HF `tokenizers`, encode with add_special_tokens=False):
 *   1. added tokens (special or not) are cut out of the text first, leftmost
 *      longest match; non-normalized ones in the raw text, normalized ones in
 *      the NFC text; lstrip/rstrip/single_word as HF applies them;
 *   2. the normalizer (NFC, a Sequence of NFC, or none) on the rest;
 *   3. the pre-tokenizer: Split with the file's regex (PCRE2, UTF + UCP, JIT)
 *      and/or ByteLevel (GPT-2's regex when its use_regex is true);
 *   4. byte-level BPE: bytes mapped to GPT-2's printable characters, merges
 *      applied lowest rank first (leftmost on ties), as HF's Word::merge_all.
 * No BOS/EOS is added.  Decoding maps the bytes back and replaces invalid
 * UTF-8 with U+FFFD per maximal invalid subsequence (Rust's from_utf8_lossy,
 * what HF's ByteLevel decoder does); added tokens decode to their text.
 *
 * Nothing depends on Qwen's ids: the demo and test models ship their own
 * tokenizer.json with the special tokens elsewhere; look ids up by string
 * with iris_tok_find().
 *
 * Thread safety: a loaded tokenizer is immutable except for an internal
 * word cache guarded by a mutex, so any number of threads may encode and
 * decode with one iris_tok at once.  An iris_tok_stream belongs to one
 * thread.
 */
#ifndef IRIS_TOKENIZER_H
#define IRIS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "iris.h"

typedef struct iris_tok iris_tok;

/* A growable list of token ids.  Zero-initialise; free with iris_tok_ids_free. */
typedef struct iris_tok_ids {
    int32_t *ids;
    size_t n, cap;
} iris_tok_ids;

void iris_tok_ids_free(iris_tok_ids *v);
int iris_tok_ids_push(iris_tok_ids *v, int32_t id, iris_err *err);

/* Load PATH: a tokenizer.json file, or a directory holding one.  The caller
 * frees the result with iris_tok_free. */
int iris_tok_load(const char *path, iris_tok **out, iris_err *err);
/* Load from tokenizer.json text in memory (`name` only labels messages). */
int iris_tok_load_json(const char *json, size_t len, const char *name, iris_tok **out, iris_err *err);
void iris_tok_free(iris_tok *tok);

/* One more than the largest id of any token (vocab or added). */
int32_t iris_tok_n_vocab(const iris_tok *tok);
/* The id of the token whose text is exactly `text` (an added token such as
 * "<|im_start|>" or a vocab entry such as "user", in plain text, not in the
 * byte-level alphabet), or -1. */
int32_t iris_tok_find(const iris_tok *tok, const char *text);
/* The decoded bytes of token `id` (not NUL-terminated; *len set), or NULL
 * when no token has that id. */
const char *iris_tok_token(const iris_tok *tok, int32_t id, size_t *len);
/* 1 when `id` is an added token marked special, else 0. */
int iris_tok_is_special(const iris_tok *tok, int32_t id);

/* Encode len bytes of UTF-8 text, appending the ids to *out.  Invalid UTF-8
 * is IRIS_EINVAL naming the byte offset (nothing is appended then). */
int iris_tok_encode(const iris_tok *tok, const char *text, size_t len, iris_tok_ids *out, iris_err *err);

enum { IRIS_TOK_SKIP_SPECIAL = 1 };

/* Decode ids to a NUL-terminated UTF-8 string that the caller frees with
 * free().  Ids with no token are skipped (as HF does); special added tokens
 * are skipped with IRIS_TOK_SKIP_SPECIAL, else written as their text. */
int iris_tok_decode(const iris_tok *tok, const int32_t *ids, size_t n, int flags, char **out, size_t *out_len,
                    iris_err *err);

/* Incremental decoding for streaming: push ids one at a time and get the
 * text that is complete so far.  Never emits part of a UTF-8 sequence; the
 * concatenation of all pieces plus the flush equals iris_tok_decode of the
 * whole list.  Zero-initialise nothing: use iris_tok_stream_init. */
typedef struct iris_tok_stream {
    const iris_tok *tok;
    int flags;
    unsigned char pend[4]; /* bytes of an unfinished UTF-8 sequence */
    int n_pend;
    char *buf; /* the text returned by the last call, owned by the stream */
    size_t buf_cap;
} iris_tok_stream;

void iris_tok_stream_init(iris_tok_stream *s, const iris_tok *tok, int flags);
/* Push one id; *text and *len are the newly complete text (maybe empty), valid
 * until the next call on s. */
int iris_tok_stream_push(iris_tok_stream *s, int32_t id, const char **text, size_t *len, iris_err *err);
/* End of stream: an unfinished sequence becomes U+FFFD. */
int iris_tok_stream_flush(iris_tok_stream *s, const char **text, size_t *len, iris_err *err);
void iris_tok_stream_free(iris_tok_stream *s);

/* Check that s[0..len) is valid UTF-8; on failure return IRIS_EINVAL and set
 * *bad_at to the offset of the first invalid byte. */
int iris_utf8_check(const char *s, size_t len, size_t *bad_at);

#endif
