/* st_write.c: the streaming safetensors writer (contract in st_write.h).
 *
 * Owns: the temporary file descriptor, a copy of every declared name and
 * shape, and an 8 MiB write buffer (pieces at least that large bypass it).
 * Invariant: after begin, bytes written so far == offset of the current
 * tensor + bytes of it already written; finish refuses a short file.
 * Every write error (ENOSPC included) is reported with the path, and the
 * temporary file is removed.
 */
#include "formats/st_write.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"

#define WBUF_BYTES (8u << 20)

typedef struct wtensor {
    char *name;
    iris_dtype dtype;
    int n_dims;
    int64_t shape[IRIS_MAX_DIMS];
    uint64_t n_bytes, offset;
} wtensor;

struct iris_st_writer {
    char *path, *tmp;
    int fd;
    int began, finished, failed;
    wtensor *t;
    int n, cap;
    int *order;             /* file order -> declared index */
    int cur;                /* position in `order` of the tensor being written */
    uint64_t cur_done;      /* bytes of it written */
    json_t *meta;
    uint8_t *buf;
    size_t n_buf;
    uint64_t header_bytes, data_bytes;
};

int iris_st_writer_open(const char *path, iris_st_writer **out, iris_err *err) {
    *out = NULL;
    iris_st_writer *w = calloc(1, sizeof *w);
    if (!w) return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", path);
    w->fd = -1;
    w->path = strdup(path);
    w->tmp = malloc(strlen(path) + 5);
    w->meta = json_object();
    if (!w->path || !w->tmp || !w->meta) {
        iris_st_writer_close(w);
        return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", path);
    }
    strcpy(w->tmp, path);
    strcat(w->tmp, ".tmp");
    json_object_set_new(w->meta, "format", json_string("pt"));
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        int e = errno;
        iris_st_writer_close(w);
        return iris_err_set(err, IRIS_EIO, "cannot create %s.tmp: %s", path, strerror(e));
    }
    *out = w;
    return 0;
}

void iris_st_writer_close(iris_st_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (!w->finished && w->tmp) unlink(w->tmp);
    for (int i = 0; i < w->n; i++) free(w->t[i].name);
    free(w->t);
    free(w->order);
    free(w->buf);
    json_decref(w->meta);
    free(w->path);
    free(w->tmp);
    free(w);
}

int iris_st_writer_add(iris_st_writer *w, const char *name, iris_dtype dtype, int n_dims, const int64_t *shape,
                       iris_err *err) {
    if (w->began) return iris_err_set(err, IRIS_EINVAL, "%s: tensor \"%s\" declared after the header", w->path, name);
    if (!name || !name[0] || strlen(name) > 1024)
        return iris_err_set(err, IRIS_EINVAL, "%s: a tensor name must have 1 to 1024 bytes", w->path);
    if ((int)dtype < 0 || dtype >= IRIS_DT_COUNT)
        return iris_err_set(err, IRIS_EINVAL, "%s: tensor \"%s\": unknown dtype %d", w->path, name, (int)dtype);
    if (n_dims < 0 || n_dims > IRIS_MAX_DIMS)
        return iris_err_set(err, IRIS_EINVAL, "%s: tensor \"%s\": %d dimensions (at most %d)", w->path, name, n_dims,
                            IRIS_MAX_DIMS);
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->t[i].name, name))
            return iris_err_set(err, IRIS_EINVAL, "%s: tensor \"%s\" declared twice", w->path, name);
    uint64_t n_elems = 1;
    for (int d = 0; d < n_dims; d++) {
        if (shape[d] < 0)
            return iris_err_set(err, IRIS_EINVAL, "%s: tensor \"%s\": negative dimension %lld", w->path, name,
                                (long long)shape[d]);
        if (shape[d] && n_elems > UINT64_MAX / 16 / (uint64_t)shape[d])
            return iris_err_set(err, IRIS_EINVAL, "%s: tensor \"%s\": too many elements", w->path, name);
        n_elems *= (uint64_t)shape[d];
    }
    if (w->n == w->cap) {
        int nc = w->cap ? w->cap * 2 : 64;
        wtensor *t = realloc(w->t, (size_t)nc * sizeof *t);
        if (!t) return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", w->path);
        w->t = t;
        w->cap = nc;
    }
    wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", w->path);
    t->dtype = dtype;
    t->n_dims = n_dims;
    for (int d = 0; d < n_dims; d++) t->shape[d] = shape[d];
    t->n_bytes = n_elems * iris_dtype_size(dtype);
    return w->n++;
}

int iris_st_writer_meta(iris_st_writer *w, const char *key, const char *value, iris_err *err) {
    if (w->began) return iris_err_set(err, IRIS_EINVAL, "%s: metadata \"%s\" after the header", w->path, key);
    if (json_object_set_new(w->meta, key, json_string(value)))
        return iris_err_set(err, IRIS_EINVAL, "%s: metadata \"%s\": not valid UTF-8", w->path, key);
    return 0;
}

static int cmp_order(const void *a, const void *b, void *arg) {
    const wtensor *t = arg, *x = &t[*(const int *)a], *y = &t[*(const int *)b];
    size_t sx = iris_dtype_size(x->dtype), sy = iris_dtype_size(y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int fail_io(iris_st_writer *w, int e, iris_err *err) {
    w->failed = 1;
    if (e == ENOSPC || e == EDQUOT)
        return iris_err_set(err, IRIS_EIO, "writing %s: the disk is full (%s)", w->tmp, strerror(e));
    return iris_err_set(err, IRIS_EIO, "writing %s: %s", w->tmp, strerror(e));
}

static int write_all(iris_st_writer *w, const void *data, size_t n, iris_err *err) {
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t k = write(w->fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return fail_io(w, errno, err);
        }
        if (k == 0) return fail_io(w, EIO, err);
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int flush_buf(iris_st_writer *w, iris_err *err) {
    if (!w->n_buf) return 0;
    int rc = write_all(w, w->buf, w->n_buf, err);
    w->n_buf = 0;
    return rc;
}

static int put(iris_st_writer *w, const void *data, size_t n, iris_err *err) {
    if (n >= WBUF_BYTES) {
        int rc = flush_buf(w, err);
        return rc ? rc : write_all(w, data, n, err);
    }
    if (w->n_buf + n > WBUF_BYTES) {
        int rc = flush_buf(w, err);
        if (rc) return rc;
    }
    memcpy(w->buf + w->n_buf, data, n);
    w->n_buf += n;
    return 0;
}

static void skip_empty(iris_st_writer *w) {
    while (w->cur < w->n && w->t[w->order[w->cur]].n_bytes == 0) w->cur++;
}

int iris_st_writer_begin(iris_st_writer *w, iris_err *err) {
    if (w->began) return iris_err_set(err, IRIS_EINVAL, "%s: header already written", w->path);
    w->order = malloc((size_t)(w->n ? w->n : 1) * sizeof *w->order);
    w->buf = malloc(WBUF_BYTES);
    if (!w->order || !w->buf) return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", w->path);
    for (int i = 0; i < w->n; i++) w->order[i] = i;
    qsort_r(w->order, (size_t)w->n, sizeof *w->order, cmp_order, w->t);
    json_t *h = json_object();
    if (!h) return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", w->path);
    json_object_set(h, "__metadata__", w->meta);
    uint64_t off = 0;
    int bad = 0;
    for (int k = 0; k < w->n; k++) {
        wtensor *t = &w->t[w->order[k]];
        t->offset = off;
        off += t->n_bytes;
        json_t *shape = json_array(), *offs = json_array(), *o = json_object();
        for (int d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
        json_array_append_new(offs, json_integer((json_int_t)t->offset));
        json_array_append_new(offs, json_integer((json_int_t)(t->offset + t->n_bytes)));
        json_object_set_new(o, "dtype", json_string(iris_dtype_name(t->dtype)));
        json_object_set_new(o, "shape", shape);
        json_object_set_new(o, "data_offsets", offs);
        bad |= json_object_set_new(h, t->name, o) != 0;
    }
    w->data_bytes = off;
    char *text = bad ? NULL : json_dumps(h, JSON_COMPACT);
    json_decref(h);
    if (!text) return iris_err_set(err, IRIS_EINVAL, "%s: a tensor name is not valid UTF-8", w->path);
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7; /* 8 + padded is a multiple of 8 */
    uint8_t hdr[8];
    for (int i = 0; i < 8; i++) hdr[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int rc = put(w, hdr, 8, err);
    if (!rc) rc = put(w, text, len, err);
    for (size_t i = len; !rc && i < padded; i++) rc = put(w, " ", 1, err);
    free(text);
    w->header_bytes = 8 + padded;
    w->began = 1;
    w->cur = 0;
    w->cur_done = 0;
    skip_empty(w);
    return rc;
}

int iris_st_writer_next(const iris_st_writer *w) {
    return w->began && w->cur < w->n ? w->order[w->cur] : -1;
}

uint64_t iris_st_writer_file_bytes(const iris_st_writer *w) { return w->header_bytes + w->data_bytes; }

int iris_st_writer_write(iris_st_writer *w, const void *data, size_t n_bytes, iris_err *err) {
    if (!w->began) return iris_err_set(err, IRIS_EINVAL, "%s: data written before the header", w->path);
    if (w->failed) return iris_err_set(err, IRIS_EIO, "%s: an earlier write failed", w->tmp);
    const uint8_t *p = data;
    while (n_bytes > 0) {
        if (w->cur >= w->n)
            return iris_err_set(err, IRIS_EINVAL, "%s: %zu bytes more than the declared tensors hold", w->path,
                                n_bytes);
        wtensor *t = &w->t[w->order[w->cur]];
        uint64_t rem = t->n_bytes - w->cur_done;
        size_t take = n_bytes < rem ? n_bytes : (size_t)rem;
        int rc = put(w, p, take, err);
        if (rc) return rc;
        p += take;
        n_bytes -= take;
        w->cur_done += take;
        if (w->cur_done == t->n_bytes) {
            w->cur++;
            w->cur_done = 0;
            skip_empty(w);
        }
    }
    return 0;
}

int iris_st_writer_finish(iris_st_writer *w, iris_err *err) {
    if (!w->began) return iris_err_set(err, IRIS_EINVAL, "%s: finished before the header", w->path);
    if (w->failed) return iris_err_set(err, IRIS_EIO, "%s: an earlier write failed", w->tmp);
    if (w->cur < w->n) {
        const wtensor *t = &w->t[w->order[w->cur]];
        return iris_err_set(err, IRIS_EINVAL, "%s: tensor \"%s\" has %llu of its %llu bytes; the file is incomplete",
                            w->path, t->name, (unsigned long long)w->cur_done, (unsigned long long)t->n_bytes);
    }
    int rc = flush_buf(w, err);
    if (rc) return rc;
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0) return fail_io(w, errno, err);
    if (rename(w->tmp, w->path) != 0)
        return iris_err_set(err, IRIS_EIO, "renaming %s to %s: %s", w->tmp, w->path, strerror(errno));
    w->finished = 1;
    return 0;
}

static int write_fd_all(int fd, const void *data, size_t n) {
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return k < 0 ? errno : EIO;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int iris_st_write_file(const char *path, const void *data, size_t len, iris_err *err) {
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 5);
    if (!tmp) return iris_err_set(err, IRIS_ENOMEM, "%s: out of memory", path);
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".tmp", 5);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int rc = iris_err_set(err, IRIS_EIO, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    int e = write_fd_all(fd, data, len);
    if (close(fd) != 0 && !e) e = errno;
    if (!e && rename(tmp, path) != 0) e = errno;
    int rc = 0;
    if (e) {
        unlink(tmp);
        rc = iris_err_set(err, IRIS_EIO, "writing %s: %s", path,
                          e == ENOSPC || e == EDQUOT ? "the disk is full" : strerror(e));
    }
    free(tmp);
    return rc;
}

int iris_st_copy_file(const char *src, const char *dst, iris_err *err) {
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) return iris_err_set(err, IRIS_EIO, "cannot open %s: %s", src, strerror(errno));
    size_t dl = strlen(dst);
    char *tmp = malloc(dl + 5);
    uint8_t *buf = malloc(1u << 20);
    int out = -1, e = 0, rc = 0;
    if (!tmp || !buf) {
        rc = iris_err_set(err, IRIS_ENOMEM, "copying %s: out of memory", src);
        goto done;
    }
    memcpy(tmp, dst, dl);
    memcpy(tmp + dl, ".tmp", 5);
    out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        rc = iris_err_set(err, IRIS_EIO, "cannot create %s: %s", tmp, strerror(errno));
        goto done;
    }
    for (;;) {
        ssize_t k = read(in, buf, 1u << 20);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            rc = iris_err_set(err, IRIS_EIO, "reading %s: %s", src, strerror(errno));
            break;
        }
        if (k == 0) break;
        if ((e = write_fd_all(out, buf, (size_t)k)) != 0) break;
    }
    if (close(out) != 0 && !e) e = errno;
    out = -1;
    if (!rc && !e && rename(tmp, dst) != 0) e = errno;
    if (!rc && e)
        rc = iris_err_set(err, IRIS_EIO, "writing %s: %s", dst,
                          e == ENOSPC || e == EDQUOT ? "the disk is full" : strerror(e));
    if (rc) unlink(tmp);
done:
    close(in);
    free(tmp);
    free(buf);
    return rc;
}
