/* fuzz_tokenizer.c: libFuzzer target for the tokenizer.
 *
 * The first byte picks what the rest is:
 *   even: text, encoded with the tiny test tokenizer (loaded once from
 *         tests/fixtures/tiny/tokenizer/, the fuzzer runs in the repo root);
 *         valid UTF-8 must encode and decode back to its NFC form's length
 *         class; the bytes are also read as ids for decode and the stream
 *         decoder, whose output must always be valid UTF-8;
 *   odd:  a tokenizer.json, loaded and, when it loads, used to encode a
 *         fixed sentence.  Every failure must come with a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/tokenizer.h"

static iris_tok *tiny;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    iris_err err = {0};
    if (data[0] & 1) {
        iris_tok *t = NULL;
        if (iris_tok_load_json((const char *)data + 1, size - 1, "fuzz.json", &t, &err) == 0) {
            iris_tok_ids ids = {0};
            const char *s = "Hello <|im_end|> wörld 123 \xf0\x9f\x99\x82";
            if (iris_tok_encode(t, s, strlen(s), &ids, &err) != 0 && !err.msg[0]) abort();
            iris_tok_ids_free(&ids);
            iris_tok_free(t);
        } else if (!err.msg[0]) {
            abort();
        }
        return 0;
    }
    if (!tiny && iris_tok_load("tests/fixtures/tiny/tokenizer", &tiny, &err) != 0) abort();
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    iris_tok_ids ids = {0};
    int valid = iris_utf8_check(text, len, NULL) == 0;
    int rc = iris_tok_encode(tiny, text, len, &ids, &err);
    if (valid != (rc == 0)) abort();
    char *back = NULL;
    size_t blen;
    if (iris_tok_decode(tiny, ids.ids, ids.n, 0, &back, &blen, &err) != 0 || iris_utf8_check(back, blen, NULL)) abort();
    free(back);
    /* The same bytes as ids (two bytes each) through both decoders. */
    iris_tok_stream st;
    iris_tok_stream_init(&st, tiny, data[0] & 2 ? IRIS_TOK_SKIP_SPECIAL : 0);
    for (size_t i = 1; i + 1 < size; i += 2) {
        const char *p;
        size_t n;
        int32_t id = (int32_t)(data[i] | data[i + 1] << 8) % 600 - 50;
        if (iris_tok_stream_push(&st, id, &p, &n, &err) != 0 || iris_utf8_check(p, n, NULL)) abort();
    }
    const char *p;
    size_t n;
    if (iris_tok_stream_flush(&st, &p, &n, &err) != 0 || iris_utf8_check(p, n, NULL)) abort();
    iris_tok_stream_free(&st);
    iris_tok_ids_free(&ids);
    return 0;
}
