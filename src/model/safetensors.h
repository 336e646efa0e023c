/* safetensors.h: memory-mapped safetensors checkpoints, single or sharded.
 *
 * Owns: the mmaps of every file of a checkpoint and the parsed tensor table.
 * Invariants: every tensor's [begin, end) lies inside its file's data area,
 * end - begin == numel(shape) * dtype size (overflow-checked), tensors of one
 * file do not overlap, names are unique across the whole checkpoint.  Every
 * violation is one clear error naming the file, the tensor and the numbers.
 * Does not: convert dtypes or copy data (views point into the mmap).
 */
#ifndef IRIS_SAFETENSORS_H
#define IRIS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "iris.h"

typedef enum iris_dtype {
    IRIS_DT_F64, IRIS_DT_F32, IRIS_DT_F16, IRIS_DT_BF16, IRIS_DT_F8_E4M3, IRIS_DT_F8_E5M2,
    IRIS_DT_I64, IRIS_DT_I32, IRIS_DT_I16, IRIS_DT_I8, IRIS_DT_U8, IRIS_DT_BOOL,
    IRIS_DT_COUNT
} iris_dtype;

#define IRIS_MAX_DIMS 8

typedef struct iris_st_tensor {
    const char *name;
    iris_dtype dtype;
    int n_dims;
    int64_t shape[IRIS_MAX_DIMS];
    uint64_t n_elems;
    uint64_t n_bytes;
    const void *data;   /* into the mmap; valid until iris_st_close */
    int file;           /* index into the checkpoint's files */
} iris_st_tensor;

typedef struct iris_st iris_st;

/* Size in bytes of one element; name as in the format ("BF16"); parse a name (-1 if unknown). */
size_t iris_dtype_size(iris_dtype dt);
const char *iris_dtype_name(iris_dtype dt);
int iris_dtype_from_name(const char *name);

/* Open a checkpoint: a .safetensors file, a model.safetensors.index.json, or a
 * directory holding either.  The result is freed with iris_st_close. */
int iris_st_open(const char *path, iris_st **out, iris_err *err);
/* Parse only the headers (no tensor data is read; data pointers are NULL):
 * for `iris plan` on a model not yet fully downloaded/loaded. */
int iris_st_open_headers(const char *path, iris_st **out, iris_err *err);
void iris_st_close(iris_st *st);

int iris_st_count(const iris_st *st);
const iris_st_tensor *iris_st_at(const iris_st *st, int i);
const iris_st_tensor *iris_st_find(const iris_st *st, const char *name);  /* NULL if absent */
const char *iris_st_file_path(const iris_st *st, int file);
int iris_st_n_files(const iris_st *st);

/* Parse and validate one file's bytes (header + data) already in memory; for
 * tests and the fuzz target.  `label` names the file in messages. */
int iris_st_parse_buffer(const uint8_t *buf, size_t len, const char *label, iris_st **out, iris_err *err);

#endif
