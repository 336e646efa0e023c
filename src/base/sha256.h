/* sha256.h: SHA-256 (libcrypto) of a short head and a large buffer, the buffer hashed in pieces on
 * several threads: the content keys of images (prefix caching), which are megabytes each.
 *
 * The digest is SHA-256(head || d_0 || ... || d_{k-1}), d_i the SHA-256 of the i-th of k equal
 * pieces of the buffer (64-byte aligned sizes; k = ceil(n / 1 MiB), at most 16): it depends on
 * the bytes alone, not on the machine's cores (the pieces are spread over at most that many
 * threads). */
#ifndef IRIS_SHA256_H
#define IRIS_SHA256_H

#include <stddef.h>

#define IRIS_SHA256_BYTES 32

/* 0, or -1 when libcrypto fails. */
int iris_sha256_pieces(const void *head, size_t head_len, const void *data, size_t n, unsigned char out[IRIS_SHA256_BYTES]);

#endif
