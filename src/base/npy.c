/* npy.c: .npy float32 writer and reader (format described in npy.h).
 *
 * Owns nothing beyond the arrays it hands back.  Invariants: every header
 * field read from a file is bounds-checked; the data size is computed with
 * overflow checks and compared with the file size before anything is
 * allocated. */
#include "npy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"

static const char NPY_MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

/* Element count, or -1 on a negative dimension or overflow. */
static int64_t shape_elements(const int64_t *shape, int ndim) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] && n > INT64_MAX / 4 / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

int iris_npy_write_header_f32(FILE *f, const int64_t *shape, int ndim, iris_err *err) {
    if (ndim < 0 || ndim > IRIS_NPY_MAX_DIMS)
        return iris_err_set(err, IRIS_EINVAL, "npy: %d dimensions (at most %d)", ndim, IRIS_NPY_MAX_DIMS);
    if (shape_elements(shape, ndim) < 0) return iris_err_set(err, IRIS_EINVAL, "npy: bad shape");
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int i = 0; i < ndim; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%" PRId64, i ? ", " : "", shape[i]);
    /* numpy writes (5,) for one dimension and () for a scalar */
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", ndim == 1 ? "," : "");
    /* magic(6) + version(2) + len(2) + dict + padding + '\n' is a multiple of 64 */
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    uint16_t hlen = (uint16_t)(n + pad + 1);
    unsigned char pre[10];
    memcpy(pre, NPY_MAGIC, 6);
    pre[6] = 1;
    pre[7] = 0;
    pre[8] = (unsigned char)(hlen & 0xff);
    pre[9] = (unsigned char)(hlen >> 8);
    if (fwrite(pre, 1, 10, f) != 10 || fwrite(dict, 1, (size_t)n, f) != (size_t)n)
        return iris_err_set(err, IRIS_EIO, "npy: write failed: %s", strerror(errno));
    for (int i = 0; i < pad; i++)
        if (fputc(' ', f) == EOF) return iris_err_set(err, IRIS_EIO, "npy: write failed: %s", strerror(errno));
    if (fputc('\n', f) == EOF) return iris_err_set(err, IRIS_EIO, "npy: write failed: %s", strerror(errno));
    return 0;
}

int iris_npy_write_f32(const char *path, const float *data, const int64_t *shape, int ndim, iris_err *err) {
    int64_t n = shape_elements(shape, ndim);
    if (n < 0) return iris_err_set(err, IRIS_EINVAL, "npy %s: bad shape", path);
    FILE *f = fopen(path, "wb");
    if (!f) return iris_err_set(err, IRIS_EIO, "npy %s: cannot create: %s", path, strerror(errno));
    int rc = iris_npy_write_header_f32(f, shape, ndim, err);
    if (rc == 0 && n > 0 && fwrite(data, sizeof(float), (size_t)n, f) != (size_t)n)
        rc = iris_err_set(err, IRIS_EIO, "npy %s: write failed: %s", path, strerror(errno));
    if (fclose(f) != 0 && rc == 0) rc = iris_err_set(err, IRIS_EIO, "npy %s: close failed: %s", path, strerror(errno));
    if (rc) iris_err_prefix(err, "%s", path);
    return rc;
}

/* Finds `'key':` in the header dict and returns a pointer past the colon and spaces. */
static const char *dict_value(const char *dict, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(dict, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

int iris_npy_read_f32(const char *path, float **data, int64_t shape[IRIS_NPY_MAX_DIMS], int *ndim,
                      iris_err *err) {
    *data = NULL;
    *ndim = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return iris_err_set(err, IRIS_EIO, "npy %s: cannot open: %s", path, strerror(errno));
    int rc = 0;
    char *dict = NULL;
    struct stat st;
    unsigned char pre[12];
    if (fstat(fileno(f), &st) != 0 || fread(pre, 1, 10, f) != 10 || memcmp(pre, NPY_MAGIC, 6) != 0) {
        rc = iris_err_set(err, IRIS_EFORMAT, "npy %s: not a .npy file (bad magic)", path);
        goto out;
    }
    uint32_t hlen;
    long data_off;
    if (pre[6] == 1) {
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
        data_off = 10 + (long)hlen;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) {
            rc = iris_err_set(err, IRIS_EFORMAT, "npy %s: truncated header", path);
            goto out;
        }
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
        data_off = 12 + (long)hlen;
    } else {
        rc = iris_err_set(err, IRIS_EUNSUPPORTED, "npy %s: format version %d.%d", path, pre[6], pre[7]);
        goto out;
    }
    if (hlen > 65536 || data_off > st.st_size) {
        rc = iris_err_set(err, IRIS_EFORMAT, "npy %s: header length %u past the end of the file", path, hlen);
        goto out;
    }
    dict = malloc(hlen + 1);
    if (!dict) {
        rc = iris_err_set(err, IRIS_ENOMEM, "npy %s: out of memory", path);
        goto out;
    }
    if (fread(dict, 1, hlen, f) != hlen) {
        rc = iris_err_set(err, IRIS_EFORMAT, "npy %s: truncated header", path);
        goto out;
    }
    dict[hlen] = 0;
    const char *d = dict_value(dict, "descr");
    if (!d || strncmp(d, "'<f4'", 5) != 0) {
        rc = iris_err_set(err, IRIS_EUNSUPPORTED, "npy %s: dtype is not little-endian float32 ('<f4')", path);
        goto out;
    }
    const char *fo = dict_value(dict, "fortran_order");
    if (!fo || strncmp(fo, "False", 5) != 0) {
        rc = iris_err_set(err, IRIS_EUNSUPPORTED, "npy %s: only C-order arrays are read", path);
        goto out;
    }
    const char *s = dict_value(dict, "shape");
    if (!s || *s != '(') {
        rc = iris_err_set(err, IRIS_EFORMAT, "npy %s: no shape in the header", path);
        goto out;
    }
    s++;
    int nd = 0;
    for (;;) {
        while (*s == ' ' || *s == ',') s++;
        if (*s == ')') break;
        if (*s < '0' || *s > '9' || nd == IRIS_NPY_MAX_DIMS) {
            rc = iris_err_set(err, IRIS_EFORMAT, "npy %s: bad shape in the header", path);
            goto out;
        }
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || v < 0) {
            rc = iris_err_set(err, IRIS_EFORMAT, "npy %s: bad shape in the header", path);
            goto out;
        }
        shape[nd++] = v;
        s = end;
    }
    int64_t n = shape_elements(shape, nd);
    if (n < 0 || (int64_t)st.st_size - data_off != n * 4) {
        rc = iris_err_set(err, IRIS_EFORMAT, "npy %s: the shape needs %" PRId64 " bytes of data, the file has %" PRId64,
                          path, n < 0 ? (int64_t)-1 : n * 4, (int64_t)st.st_size - data_off);
        goto out;
    }
    float *buf = malloc(n > 0 ? (size_t)n * 4 : 1);
    if (!buf) {
        rc = iris_err_set(err, IRIS_ENOMEM, "npy %s: out of memory for %" PRId64 " floats", path, n);
        goto out;
    }
    if (n > 0 && fread(buf, 4, (size_t)n, f) != (size_t)n) {
        free(buf);
        rc = iris_err_set(err, IRIS_EIO, "npy %s: read failed", path);
        goto out;
    }
    *data = buf;
    *ndim = nd;
out:
    free(dict);
    fclose(f);
    return rc;
}
