/* npy.h: NumPy .npy files of float32 (little-endian, C order), written and read.
 *
 * The format (numpy/lib/format.py): magic "\x93NUMPY", version, a header
 * length, then an ASCII dict {'descr': '<f4', 'fortran_order': False,
 * 'shape': (...), } padded with spaces to a multiple of 64 bytes and ended by
 * '\n', then the raw data.  We write version 1.0; we read 1.0, 2.0 and 3.0.
 * Used for pixel_values (iris preprocess) and logits dumps.  The reader
 * checks the header and that the file holds exactly the bytes the shape
 * says, so a truncated or foreign file is a clear error, never a crash. */
#ifndef IRIS_NPY_H
#define IRIS_NPY_H

#include <stdint.h>
#include <stdio.h>

#include "iris.h"

#define IRIS_NPY_MAX_DIMS 8

/* Writes data (product of shape elements, float32) to path. */
int iris_npy_write_f32(const char *path, const float *data, const int64_t *shape, int ndim, iris_err *err);

/* Writes only the header to f, for callers that stream the data after it
 * (n_elements * 4 bytes must follow). */
int iris_npy_write_header_f32(FILE *f, const int64_t *shape, int ndim, iris_err *err);

/* Reads a '<f4' C-order array.  *data is malloc'd (the caller frees it);
 * shape receives up to IRIS_NPY_MAX_DIMS dimensions, *ndim their count. */
int iris_npy_read_f32(const char *path, float **data, int64_t shape[IRIS_NPY_MAX_DIMS], int *ndim,
                      iris_err *err);

#endif
