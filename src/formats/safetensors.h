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

#include "dtype.h"
#include "iris.h"


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
    uint64_t file_offset; /* absolute byte offset of the data in its file (for pread loaders) */
} iris_st_tensor;

typedef struct iris_st iris_st;

/* Limits on what a header may hold (beyond them a file is refused as malformed). */
#define IRIS_ST_MAX_HEADER_BYTES (100u << 20)
#define IRIS_ST_MAX_TENSORS 1000000
#define IRIS_ST_MAX_NAME_BYTES 1024


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

/* The FP8 rule of QWEN3VL.md §2: 1 when `<prefix>.weight` is F8_E4M3 and a
 * sibling `<prefix>.weight_scale_inv` exists, else 0.  `prefix` is the linear's
 * name without ".weight" ("model.language_model.layers.0.self_attn.q_proj"). */
int iris_st_is_fp8_linear(const iris_st *st, const char *prefix);
/* The `__metadata__` value for `key` (first file that has it), NULL if absent. */
const char *iris_st_metadata(const iris_st *st, const char *key);
/* Sum of n_bytes over every tensor. */
uint64_t iris_st_total_bytes(const iris_st *st);

#endif
