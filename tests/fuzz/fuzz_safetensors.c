/* fuzz_safetensors.c: libFuzzer target for the safetensors header parser.
 *
 * The input is a whole file (length field, header JSON, data) handed to
 * iris_st_parse_buffer.  On success every tensor's bytes are touched so that
 * ASan catches a view that escapes the buffer; on failure the message must be
 * non-empty (every malformed file gets one clear error). */
#include <stdint.h>
#include <stdlib.h>

#include "formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* A private copy of exactly `size` bytes so reads past the end are caught. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) __builtin_memcpy(buf, data, size);
    iris_st *st = NULL;
    iris_err err = {0};
    int rc = iris_st_parse_buffer(buf, size, "fuzz.safetensors", &st, &err);
    if (rc == 0) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < iris_st_count(st); i++) {
            const iris_st_tensor *t = iris_st_at(st, i);
            if (t->n_bytes) sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->n_bytes - 1];
            if (iris_st_find(st, t->name) == NULL) abort();
        }
        (void)sink;
        iris_st_close(st);
    } else if (st != NULL || err.msg[0] == 0) {
        abort();
    }
    free(buf);
    return 0;
}
