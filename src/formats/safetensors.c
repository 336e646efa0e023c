/* safetensors.c: opening and validating safetensors checkpoints.
 *
 * Format: 8 bytes little-endian N, then N bytes of JSON (the header), then the
 * data area.  The header maps tensor names to {dtype, shape, data_offsets:
 * [begin, end]} (offsets relative to the data area) plus an optional
 * "__metadata__" object of string -> string.
 *
 * Owns: one mmap per file (or, for headers-only opens, nothing but the table),
 * the tensor table, the names, and a hash index for iris_st_find.
 * Invariants after a successful open (every one checked, with 64-bit
 * overflow-checked arithmetic, before any data pointer is formed):
 *   - 8 + N <= file size; N <= IRIS_ST_MAX_HEADER_BYTES;
 *   - begin <= end <= data-area size, end - begin == numel * dtype size;
 *   - tensors of one file do not overlap (checked after sorting by begin);
 *   - names are unique across the checkpoint (jansson's JSON_REJECT_DUPLICATES
 *     inside one header, the hash index across shards);
 *   - with an index, every tensor sits in the shard the index names for it.
 * Gaps between tensors are allowed (the format's writer never makes them, but
 * they harm nothing).  Data pointers may be unaligned if the writer did not pad
 * the header to 8 bytes; readers copy or use unaligned loads.
 * Does not: convert dtypes, copy tensor data, or interpret tensor names.
 */
#include "safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"

typedef struct st_file {
    char *path;             /* as used in messages */
    const uint8_t *map;     /* whole file (NULL for headers-only and buffers) */
    size_t map_bytes;
    uint64_t data_start;    /* 8 + header length */
    uint64_t data_bytes;    /* file size - data_start */
    json_t *metadata;       /* "__metadata__" object or NULL */
} st_file;

struct iris_st {
    st_file *files;
    int n_files;
    iris_st_tensor *t;
    int n, cap;
    int *hash;              /* open addressing: tensor index + 1, 0 = empty */
    size_t hash_cap;
};

/* ---- the table ---- */

static iris_st *st_new(void) { return calloc(1, sizeof(iris_st)); }

void iris_st_close(iris_st *st) {
    if (!st) return;
    for (int i = 0; i < st->n_files; i++) {
        if (st->files[i].map) munmap((void *)st->files[i].map, st->files[i].map_bytes);
        json_decref(st->files[i].metadata);
        free(st->files[i].path);
    }
    for (int i = 0; i < st->n; i++) free((char *)st->t[i].name);
    free(st->files);
    free(st->t);
    free(st->hash);
    free(st);
}

static int add_file(iris_st *st, const char *path, iris_err *err) {
    st_file *f = realloc(st->files, (size_t)(st->n_files + 1) * sizeof *f);
    if (!f) return iris_err_set(err, IRIS_ENOMEM, "out of memory opening %s", path);
    st->files = f;
    memset(&f[st->n_files], 0, sizeof *f);
    if (!(f[st->n_files].path = strdup(path))) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    return st->n_files++;
}

static iris_st_tensor *add_tensor(iris_st *st, iris_err *err) {
    if (st->n == st->cap) {
        int cap = st->cap ? st->cap * 2 : 64;
        iris_st_tensor *t = realloc(st->t, (size_t)cap * sizeof *t);
        if (!t) {
            iris_err_set(err, IRIS_ENOMEM, "out of memory for the tensor table (%d tensors)", st->n);
            return NULL;
        }
        st->t = t;
        st->cap = cap;
    }
    iris_st_tensor *t = &st->t[st->n++];
    memset(t, 0, sizeof *t);
    return t;
}

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Build the name index; a name seen twice (across shards: one header cannot
 * hold duplicates) is an error naming both files. */
static int build_hash(iris_st *st, iris_err *err) {
    size_t cap = 16;
    while (cap < (size_t)st->n * 2) cap *= 2;
    free(st->hash);
    st->hash_cap = cap;
    if (!(st->hash = calloc(cap, sizeof *st->hash))) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    for (int i = 0; i < st->n; i++) {
        size_t h = hash_name(st->t[i].name) & (cap - 1);
        while (st->hash[h]) {
            const iris_st_tensor *o = &st->t[st->hash[h] - 1];
            if (!strcmp(o->name, st->t[i].name))
                return iris_err_set(err, IRIS_EFORMAT, "tensor \"%s\" is stored twice: in %s and in %s", o->name,
                                    st->files[o->file].path, st->files[st->t[i].file].path);
            h = (h + 1) & (cap - 1);
        }
        st->hash[h] = i + 1;
    }
    return 0;
}

int iris_st_count(const iris_st *st) { return st ? st->n : 0; }

const iris_st_tensor *iris_st_at(const iris_st *st, int i) {
    return st && i >= 0 && i < st->n ? &st->t[i] : NULL;
}

const iris_st_tensor *iris_st_find(const iris_st *st, const char *name) {
    if (!st || !st->hash || !name) return NULL;
    size_t h = hash_name(name) & (st->hash_cap - 1);
    while (st->hash[h]) {
        const iris_st_tensor *t = &st->t[st->hash[h] - 1];
        if (!strcmp(t->name, name)) return t;
        h = (h + 1) & (st->hash_cap - 1);
    }
    return NULL;
}

const char *iris_st_file_path(const iris_st *st, int file) {
    return st && file >= 0 && file < st->n_files ? st->files[file].path : NULL;
}

int iris_st_n_files(const iris_st *st) { return st ? st->n_files : 0; }

int iris_st_is_fp8_linear(const iris_st *st, const char *prefix) {
    char name[IRIS_ST_MAX_NAME_BYTES + 32];
    if (snprintf(name, sizeof name, "%s.weight", prefix) >= (int)sizeof name) return 0;
    const iris_st_tensor *w = iris_st_find(st, name);
    if (!w || w->dtype != IRIS_DT_F8_E4M3) return 0;
    snprintf(name, sizeof name, "%s.weight_scale_inv", prefix);
    return iris_st_find(st, name) != NULL;
}

const char *iris_st_metadata(const iris_st *st, const char *key) {
    for (int i = 0; st && i < st->n_files; i++) {
        json_t *v = st->files[i].metadata ? json_object_get(st->files[i].metadata, key) : NULL;
        if (v) return json_string_value(v);
    }
    return NULL;
}

uint64_t iris_st_total_bytes(const iris_st *st) {
    uint64_t s = 0;
    for (int i = 0; st && i < st->n; i++) s += st->t[i].n_bytes;
    return s;
}

/* ---- one header ---- */

/* A JSON number that is a non-negative integer, else -1. */
static int64_t json_uint(const json_t *v) {
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    return x < 0 ? -1 : (int64_t)x;
}

/* Name the key jansson rejected as a duplicate: its error position is just
 * past the key's closing quote. */
static void duplicate_key_name(const char *hdr, size_t len, size_t pos, char *out, size_t out_size) {
    out[0] = 0;
    if (pos == 0 || pos > len || hdr[pos - 1] != '"') return;
    size_t end = pos - 1, b = end;
    while (b > 0 && !(hdr[b - 1] == '"' && (b < 2 || hdr[b - 2] != '\\'))) b--;
    if (b == 0) return;
    size_t n = end - b < out_size - 1 ? end - b : out_size - 1;
    memcpy(out, hdr + b, n);
    out[n] = 0;
}

typedef struct span {
    uint64_t begin, end;
    int idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static void fmt_shape(const iris_st_tensor *t, char *buf, size_t size) {
    size_t o = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < t->n_dims && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (o < size) snprintf(buf + o, size - o, "]");
}

/* Validate one tensor entry and append it to the table. */
static int parse_entry(iris_st *st, int file, const char *name, json_t *v, iris_err *err) {
    const char *label = st->files[file].path;
    size_t name_len = strlen(name);
    if (name_len == 0) return iris_err_set(err, IRIS_EFORMAT, "%s: a tensor has an empty name", label);
    if (name_len > IRIS_ST_MAX_NAME_BYTES)
        return iris_err_set(err, IRIS_ELIMIT, "%s: tensor name \"%.60s...\" is %zu bytes long (at most %d)", label,
                            name, name_len, IRIS_ST_MAX_NAME_BYTES);
    if (!json_is_object(v))
        return iris_err_set(err, IRIS_EFORMAT, "%s: tensor \"%s\": its header entry is not a JSON object", label,
                            name);
    json_t *jdt = json_object_get(v, "dtype"), *jshape = json_object_get(v, "shape"),
           *joff = json_object_get(v, "data_offsets");
    if (!json_is_string(jdt))
        return iris_err_set(err, IRIS_EFORMAT, "%s: tensor \"%s\": \"dtype\" is missing or not a string", label, name);
    int dt = iris_dtype_from_name(json_string_value(jdt));
    if (dt < 0)
        return iris_err_set(err, IRIS_EUNSUPPORTED,
                            "%s: tensor \"%s\": unknown dtype \"%s\" (known: F64, F32, F16, BF16, F8_E4M3, F8_E5M2, "
                            "I64, I32, I16, I8, U8, BOOL)",
                            label, name, json_string_value(jdt));
    if (!json_is_array(jshape))
        return iris_err_set(err, IRIS_EFORMAT, "%s: tensor \"%s\": \"shape\" is missing or not an array", label, name);
    size_t n_dims = json_array_size(jshape);
    if (n_dims > IRIS_MAX_DIMS)
        return iris_err_set(err, IRIS_ELIMIT, "%s: tensor \"%s\": %zu dimensions, at most %d are supported", label,
                            name, n_dims, IRIS_MAX_DIMS);
    if (!json_is_array(joff) || json_array_size(joff) != 2)
        return iris_err_set(err, IRIS_EFORMAT,
                            "%s: tensor \"%s\": \"data_offsets\" is missing or not an array of two integers", label,
                            name);
    int64_t begin = json_uint(json_array_get(joff, 0)), end = json_uint(json_array_get(joff, 1));
    if (begin < 0 || end < 0)
        return iris_err_set(err, IRIS_EFORMAT,
                            "%s: tensor \"%s\": \"data_offsets\" must be two non-negative integers", label, name);

    iris_st_tensor *t = add_tensor(st, err);
    if (!t) return IRIS_ENOMEM;
    t->dtype = (iris_dtype)dt;
    t->file = file;
    t->n_dims = (int)n_dims;
    uint64_t numel = 1;
    for (size_t d = 0; d < n_dims; d++) {
        int64_t x = json_uint(json_array_get(jshape, d));
        if (x < 0) {
            st->n--;
            return iris_err_set(err, IRIS_EFORMAT, "%s: tensor \"%s\": shape entry %zu is not a non-negative integer",
                                label, name, d);
        }
        t->shape[d] = x;
        if (__builtin_mul_overflow(numel, (uint64_t)x, &numel)) {
            st->n--;
            return iris_err_set(err, IRIS_EFORMAT,
                                "%s: tensor \"%s\": the element count of its shape overflows 64 bits", label, name);
        }
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(numel, (uint64_t)iris_dtype_size(dt), &bytes)) {
        st->n--;
        return iris_err_set(err, IRIS_EFORMAT, "%s: tensor \"%s\": %llu elements of %s overflow 64 bits of bytes",
                            label, name, (unsigned long long)numel, iris_dtype_name(dt));
    }
    t->n_elems = numel;
    t->n_bytes = bytes;
    if (!(t->name = strdup(name))) {
        st->n--;
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    char shape[160];
    fmt_shape(t, shape, sizeof shape);
    const st_file *f = &st->files[file];
    if (begin > end)
        return iris_err_set(err, IRIS_EFORMAT, "%s: tensor \"%s\": data_offsets [%lld, %lld] begin after they end",
                            label, name, (long long)begin, (long long)end);
    if ((uint64_t)end > f->data_bytes)
        return iris_err_set(err, IRIS_EFORMAT,
                            "%s: tensor \"%s\": data ends at byte %lld, past the end of the file's data (%llu bytes); "
                            "the file is truncated or its header is wrong",
                            label, name, (long long)end, (unsigned long long)f->data_bytes);
    if ((uint64_t)(end - begin) != bytes)
        return iris_err_set(err, IRIS_EFORMAT,
                            "%s: tensor \"%s\": shape %s of %s needs %llu bytes but data_offsets [%lld, %lld] hold %lld",
                            label, name, shape, iris_dtype_name(dt), (unsigned long long)bytes, (long long)begin,
                            (long long)end, (long long)(end - begin));
    t->file_offset = f->data_start + (uint64_t)begin;
    t->data = f->map ? f->map + t->file_offset : NULL;
    return 0;
}

/* Parse header bytes `hdr[0..len)` of file `file` whose data area holds
 * `data_bytes` bytes (the file's data_start/data_bytes/map are set). */
static int parse_header(iris_st *st, int file, const char *hdr, size_t len, iris_err *err) {
    const char *label = st->files[file].path;
    json_error_t jerr;
    json_t *root = json_loadb(hdr, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_duplicate_key) {
            char key[IRIS_ST_MAX_NAME_BYTES + 1];
            duplicate_key_name(hdr, len, (size_t)jerr.position, key, sizeof key);
            return iris_err_set(err, IRIS_EFORMAT, "%s: the header names \"%s\" twice (at byte %d of the header)",
                                label, key, jerr.position);
        }
        return iris_err_set(err, IRIS_EFORMAT, "%s: the header is not valid JSON: %s (line %d, column %d, byte %d)",
                            label, jerr.text, jerr.line, jerr.column, jerr.position);
    }
    int rc = 0;
    if (!json_is_object(root)) {
        rc = iris_err_set(err, IRIS_EFORMAT, "%s: the header is not a JSON object", label);
        goto out;
    }
    if (json_object_size(root) > IRIS_ST_MAX_TENSORS + 1) {
        rc = iris_err_set(err, IRIS_ELIMIT, "%s: the header lists %zu tensors (at most %d)", label,
                          json_object_size(root), IRIS_ST_MAX_TENSORS);
        goto out;
    }
    int first = st->n;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(v)) {
                rc = iris_err_set(err, IRIS_EFORMAT, "%s: \"__metadata__\" is not an object of strings", label);
                goto out;
            }
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    rc = iris_err_set(err, IRIS_EFORMAT, "%s: \"__metadata__\" value \"%s\" is not a string", label,
                                      mk);
                    goto out;
                }
            }
            st->files[file].metadata = json_incref(v);
            continue;
        }
        if ((rc = parse_entry(st, file, key, v, err))) goto out;
    }
    /* Overlaps: sort this file's tensors by begin; each must start at or after
     * the previous end (empty tensors occupy nothing). */
    int n = st->n - first;
    span *sp = n ? malloc((size_t)n * sizeof *sp) : NULL;
    if (n && !sp) {
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
        goto out;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        const iris_st_tensor *t = &st->t[first + i];
        if (!t->n_bytes) continue;
        sp[m].begin = t->file_offset - st->files[file].data_start;
        sp[m].end = sp[m].begin + t->n_bytes;
        sp[m++].idx = first + i;
    }
    if (m > 1) qsort(sp, (size_t)m, sizeof *sp, cmp_span);
    for (int i = 1; i < m && !rc; i++)
        if (sp[i].begin < sp[i - 1].end)
            rc = iris_err_set(err, IRIS_EFORMAT,
                              "%s: tensor \"%s\" (bytes %llu..%llu) overlaps tensor \"%s\" (bytes %llu..%llu)", label,
                              st->t[sp[i].idx].name, (unsigned long long)sp[i].begin, (unsigned long long)sp[i].end,
                              st->t[sp[i - 1].idx].name, (unsigned long long)sp[i - 1].begin,
                              (unsigned long long)sp[i - 1].end);
    free(sp);
out:
    json_decref(root);
    return rc;
}

/* Read the 8-byte length and check it against the file size. */
static int check_header_len(const char *label, const uint8_t len8[8], uint64_t file_bytes, uint64_t *hlen,
                            iris_err *err) {
    if (file_bytes < 8)
        return iris_err_set(err, IRIS_EFORMAT,
                            "%s: the file is %llu bytes, too short for the 8-byte header length; it is truncated or "
                            "not a safetensors file",
                            label, (unsigned long long)file_bytes);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];
    *hlen = n;
    if (n > IRIS_ST_MAX_HEADER_BYTES)
        return iris_err_set(err, IRIS_ELIMIT,
                            "%s: header length %llu is over the %u-byte limit; the file is damaged or not a "
                            "safetensors file",
                            label, (unsigned long long)n, IRIS_ST_MAX_HEADER_BYTES);
    if (n > file_bytes - 8)
        return iris_err_set(err, IRIS_EFORMAT,
                            "%s: header length %llu runs past the end of the file (%llu bytes); the file is truncated",
                            label, (unsigned long long)n, (unsigned long long)file_bytes);
    if (n < 2)
        return iris_err_set(err, IRIS_EFORMAT, "%s: header length %llu is too short to hold a JSON object", label,
                            (unsigned long long)n);
    return 0;
}

int iris_st_parse_buffer(const uint8_t *buf, size_t len, const char *label, iris_st **out, iris_err *err) {
    *out = NULL;
    iris_st *st = st_new();
    if (!st) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    int rc, file = add_file(st, label ? label : "(buffer)", err);
    uint64_t hlen = 0;
    if (file < 0) {
        rc = file;
        goto fail;
    }
    if ((rc = check_header_len(st->files[0].path, buf, len, &hlen, err))) goto fail;
    st->files[0].data_start = 8 + hlen;
    st->files[0].data_bytes = len - 8 - hlen;
    if ((rc = parse_header(st, 0, (const char *)buf + 8, hlen, err))) goto fail;
    for (int i = 0; i < st->n; i++) st->t[i].data = buf + st->t[i].file_offset;
    if ((rc = build_hash(st, err))) goto fail;
    *out = st;
    return 0;
fail:
    iris_st_close(st);
    return rc;
}

/* ---- files ---- */

/* Open one file into `st`: mmap it whole, or (headers_only) pread the header. */
static int load_file(iris_st *st, const char *path, int headers_only, iris_err *err) {
    int file = add_file(st, path, err);
    if (file < 0) return file;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return iris_err_set(err, errno == ENOENT ? IRIS_ENOTFOUND : IRIS_EIO, "%s: cannot open: %s", path,
                            strerror(errno));
    int rc = 0;
    char *hdr = NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rc = iris_err_set(err, IRIS_EIO, "%s: not a regular file", path);
        goto out;
    }
    uint64_t size = (uint64_t)sb.st_size, hlen = 0;
    uint8_t len8[8] = {0};
    if (size >= 8 && pread(fd, len8, 8, 0) != 8) {
        rc = iris_err_set(err, IRIS_EIO, "%s: cannot read the header length: %s", path, strerror(errno));
        goto out;
    }
    if ((rc = check_header_len(path, len8, size, &hlen, err))) goto out;
    st_file *f = &st->files[file];
    f->data_start = 8 + hlen;
    f->data_bytes = size - 8 - hlen;
    if (headers_only) {
        if (!(hdr = malloc(hlen))) {
            rc = iris_err_set(err, IRIS_ENOMEM, "%s: out of memory for a %llu-byte header", path,
                              (unsigned long long)hlen);
            goto out;
        }
        size_t got = 0;
        while (got < hlen) {
            ssize_t r = pread(fd, hdr + got, hlen - got, (off_t)(8 + got));
            if (r <= 0) {
                rc = iris_err_set(err, IRIS_EIO, "%s: cannot read the header: %s", path,
                                  r < 0 ? strerror(errno) : "unexpected end of file");
                goto out;
            }
            got += (size_t)r;
        }
        rc = parse_header(st, file, hdr, hlen, err);
    } else {
        void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            rc = iris_err_set(err, IRIS_EIO, "%s: cannot mmap %llu bytes: %s", path, (unsigned long long)size,
                              strerror(errno));
            goto out;
        }
        f->map = map;
        f->map_bytes = size;
        rc = parse_header(st, file, (const char *)f->map + 8, hlen, err);
    }
out:
    free(hdr);
    close(fd);
    return rc;
}

static int path_is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int path_exists(const char *p) { return access(p, F_OK) == 0; }

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Open the shards named by an index.json and check the weight map against
 * what each shard holds. */
static int load_index(iris_st *st, const char *index_path, int headers_only, iris_err *err) {
    json_error_t jerr;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (!path_exists(index_path))
            return iris_err_set(err, IRIS_ENOTFOUND, "%s: cannot open: %s", index_path, strerror(ENOENT));
        return iris_err_set(err, IRIS_EFORMAT, "%s: not valid JSON: %s (line %d, column %d)", index_path, jerr.text,
                            jerr.line, jerr.column);
    }
    int rc = 0;
    char *dir = strdup(index_path), *path = NULL;
    const char **shards = NULL;
    json_t *wm = json_object_get(root, "weight_map");
    if (!dir) {
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
        goto out;
    }
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else strcpy(dir, ".");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        rc = iris_err_set(err, IRIS_EFORMAT, "%s: \"weight_map\" is missing, empty or not an object", index_path);
        goto out;
    }
    /* The distinct shard names, in order of first appearance. */
    size_t n_shards = 0;
    shards = calloc(json_object_size(wm), sizeof *shards);
    if (!shards) {
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        const char *fn = json_string_value(v);
        if (!fn || !*fn) {
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: weight_map entry \"%s\" is not a file name", index_path, key);
            goto out;
        }
        if (fn[0] == '/' || strstr(fn, "..")) {
            rc = iris_err_set(err, IRIS_EFORMAT,
                              "%s: weight_map entry \"%s\" names \"%s\", outside the checkpoint's directory",
                              index_path, key, fn);
            goto out;
        }
        size_t s = 0;
        while (s < n_shards && strcmp(shards[s], fn)) s++;
        if (s == n_shards) shards[n_shards++] = fn;
    }
    for (size_t s = 0; s < n_shards; s++) {
        free(path);
        if (!(path = malloc(strlen(dir) + strlen(shards[s]) + 2))) {
            rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
            goto out;
        }
        sprintf(path, "%s/%s", dir, shards[s]);
        if (!path_exists(path)) {
            rc = iris_err_set(err, IRIS_ENOTFOUND, "%s: shard \"%s\" named by the index is missing (%s)", index_path,
                              shards[s], path);
            goto out;
        }
        if ((rc = load_file(st, path, headers_only, err))) goto out;
    }
    if ((rc = build_hash(st, err))) goto out;
    /* Every tensor the index names is in the shard it names; every tensor of
     * every shard is in the index. */
    json_object_foreach(wm, key, v) {
        const iris_st_tensor *t = iris_st_find(st, key);
        const char *want = json_string_value(v);
        if (!t) {
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: tensor \"%s\" is not in shard \"%s\" where the index puts it",
                              index_path, key, want);
            goto out;
        }
        /* Shard paths were built as dir + "/" + the index's file name. */
        if (strcmp(st->files[t->file].path + strlen(dir) + 1, want)) {
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: tensor \"%s\" is in shard %s but the index puts it in \"%s\"",
                              index_path, key, st->files[t->file].path, want);
            goto out;
        }
    }
    for (int i = 0; i < st->n; i++)
        if (!json_object_get(wm, st->t[i].name)) {
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: tensor \"%s\" of shard %s is not in the index's weight_map",
                              index_path, st->t[i].name, st->files[st->t[i].file].path);
            goto out;
        }
out:
    free(path);
    free(shards);
    free(dir);
    json_decref(root);
    return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A directory: its index, else model.safetensors, else every *.safetensors. */
static int load_dir(iris_st *st, const char *dir, int headers_only, iris_err *err) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir) >= (int)sizeof path)
        return iris_err_set(err, IRIS_ELIMIT, "path too long: %s", dir);
    if (path_exists(path)) return load_index(st, path, headers_only, err);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (path_exists(path)) return load_file(st, path, headers_only, err);
    DIR *d = opendir(dir);
    if (!d) return iris_err_set(err, IRIS_EIO, "%s: cannot read the directory: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!ends_with(e->d_name, ".safetensors")) continue;
        char **nn = realloc(names, (size_t)(n + 1) * sizeof *nn);
        if (!nn || !(nn[n] = strdup(e->d_name))) {
            names = nn ? nn : names;
            rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
            break;
        }
        names = nn;
        n++;
    }
    closedir(d);
    if (!rc && n == 0)
        rc = iris_err_set(err, IRIS_ENOTFOUND,
                          "%s: no model.safetensors.index.json, model.safetensors or other *.safetensors file", dir);
    if (!rc) qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; !rc && i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        rc = load_file(st, path, headers_only, err);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

static int st_open(const char *path, int headers_only, iris_st **out, iris_err *err) {
    *out = NULL;
    if (!path || !*path) return iris_err_set(err, IRIS_EINVAL, "no checkpoint path given");
    iris_st *st = st_new();
    if (!st) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    int rc;
    if (path_is_dir(path)) rc = load_dir(st, path, headers_only, err);
    else if (ends_with(path, ".json")) rc = load_index(st, path, headers_only, err);
    else rc = load_file(st, path, headers_only, err);
    if (!rc) rc = build_hash(st, err);
    if (rc) {
        iris_st_close(st);
        return rc;
    }
    *out = st;
    return 0;
}

int iris_st_open(const char *path, iris_st **out, iris_err *err) { return st_open(path, 0, out, err); }

int iris_st_open_headers(const char *path, iris_st **out, iris_err *err) { return st_open(path, 1, out, err); }
