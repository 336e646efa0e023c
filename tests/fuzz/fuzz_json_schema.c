/* fuzz_json_schema.c: libFuzzer target for the JSON Schema compiler (model/grammar_schema.c)
 * and the matcher: whatever the bytes, compiling either fails with a message or gives a
 * grammar; a grammar is then started over the tiny fixture's vocabulary, fed the input's bytes
 * one by one while they are accepted, and a mask taken.  Nothing may crash, leak, read out of
 * bounds or loop. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/grammar.h"

static iris_vocab *vocab(void) {
    static iris_tok *tok;
    static iris_vocab *v;
    static int tried;
    if (!tried) {
        tried = 1;
        iris_err err;
        if (!iris_tok_load("tests/fixtures/tiny/tiny-gqa/model/tokenizer.json", &tok, &err))
            iris_vocab_build(tok, iris_tok_n_vocab(tok), &v, &err);
    }
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    iris_grammar *g = NULL;
    iris_err err;
    if (iris_grammar_from_schema(text, &g, &err) == 0 && vocab()) {
        iris_grammar_matcher *m = NULL;
        if (iris_grammar_matcher_init(&m, g, vocab(), &err) == 0) {
            for (size_t i = 0; i < size && i < 256; i++)
                if (iris_grammar_matcher_accept_bytes(m, text + i, 1, &err)) break;
            uint32_t *mask = malloc(((size_t)iris_vocab_n(vocab()) + 31) / 32 * sizeof *mask);
            if (mask) iris_grammar_matcher_mask(m, mask, &err);
            free(mask);
            iris_grammar_matcher_free(m);
        }
    }
    iris_grammar_free(g);
    free(text);
    return 0;
}
