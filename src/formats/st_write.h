/* st_write.h: writing a safetensors file, streamed tensor by tensor.
 *
 * Owns: the open `PATH.tmp` file, the declared tensor table and a write
 * buffer.  Use: declare every tensor (name, dtype, shape), begin (the header
 * is written), then write each tensor's bytes in the order iris_st_writer_next
 * gives, in as many pieces as convenient; finish renames PATH.tmp to PATH.
 * Any failure, or a close before finish, removes PATH.tmp: a half-written file
 * never appears under PATH.
 * Layout (as the safetensors library writes it): tensors ordered by element
 * size, largest first, then by name, so every tensor's offset is a multiple of
 * its element size; the header is padded with spaces so the data starts at a
 * multiple of 8; no holes between tensors; `__metadata__` {"format": "pt"}.
 * Does not: hold tensor data (a multi-GB model streams through a few MB).
 */
#ifndef IRIS_ST_WRITE_H
#define IRIS_ST_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "iris.h"
#include "formats/safetensors.h"

typedef struct iris_st_writer iris_st_writer;

/* Start a file at `path` (written as `path`.tmp until finish).  Freed with
 * iris_st_writer_close. */
int iris_st_writer_open(const char *path, iris_st_writer **out, iris_err *err);
/* Declare a tensor; returns its index (declaration order, >= 0) or an error
 * (duplicate or empty name, bad shape). */
int iris_st_writer_add(iris_st_writer *w, const char *name, iris_dtype dtype, int n_dims, const int64_t *shape,
                       iris_err *err);
/* Add a `__metadata__` string entry ("format": "pt" is always there). */
int iris_st_writer_meta(iris_st_writer *w, const char *key, const char *value, iris_err *err);
/* Fix the order and write the header. */
int iris_st_writer_begin(iris_st_writer *w, iris_err *err);
/* The declared index of the tensor whose bytes are due next, or -1 when all
 * are written. */
int iris_st_writer_next(const iris_st_writer *w);
/* Append bytes of the current tensor (they may run on into the next ones). */
int iris_st_writer_write(iris_st_writer *w, const void *data, size_t n_bytes, iris_err *err);
/* Check every byte was written, flush, close and rename into place. */
int iris_st_writer_finish(iris_st_writer *w, iris_err *err);
/* Free; removes the temporary file unless finish succeeded.  NULL ok. */
void iris_st_writer_close(iris_st_writer *w);
/* Total bytes the file will have (header included); valid after begin. */
uint64_t iris_st_writer_file_bytes(const iris_st_writer *w);

/* Copy the file `src` to `dst` the same way (through `dst`.tmp, renamed when
 * complete); follows symlinks (HF cache snapshots are links to blobs). */
int iris_st_copy_file(const char *src, const char *dst, iris_err *err);
/* Write `len` bytes to `path` through `path`.tmp. */
int iris_st_write_file(const char *path, const void *data, size_t len, iris_err *err);

#endif
