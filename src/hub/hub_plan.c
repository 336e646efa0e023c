/* hub_plan.c: what `iris plan` needs of a Hub repo that is not in the cache,
 * without its weights: config.json (and the shard index when there is one),
 * and of every safetensors file its header alone, read with HTTP range
 * requests (8 bytes for the header's length, then the header: a few KB to
 * ~100 KB per file).  Each file is written as a sparse copy: the 8-byte
 * length, the header, and a hole up to the file's full size (from the
 * Content-Range total), so the planner's header reader
 * (iris_st_open_headers), which checks every tensor's offsets against the
 * file size, reads it unchanged and nothing is stored on disk for the data.
 * A server that ignores the end of a Range is cut off once the bytes needed
 * have arrived.  Nothing is written to the Hugging Face cache. */
#include "hub_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "err.h"
#include "formats/safetensors.h"
#include "resolve.h"

#define SMALL_FILE_MAX (16u << 20)   /* config.json, the index */

int iris_hub_write_sparse_st(const char *path, const char *hdr, size_t hlen, uint64_t data_bytes, iris_err *err) {
    uint64_t total = 8 + hlen + data_bytes;
    uint8_t len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (uint8_t)((uint64_t)hlen >> (8 * b));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return iris_err_set(err, IRIS_EIO, "%s: cannot create: %s", path, strerror(errno));
    int ok = write(fd, len8, 8) == 8 && write(fd, hdr, hlen) == (ssize_t)hlen && ftruncate(fd, (off_t)total) == 0;
    int e = errno;
    if (close(fd) != 0) ok = 0;
    return ok ? 0 : iris_err_set(err, IRIS_EIO, "%s: cannot write: %s", path, strerror(e));
}

typedef struct range_buf {
    uint8_t *data;
    size_t len, want;     /* bytes kept, bytes wanted (the body is cut there) */
    uint64_t total;       /* from Content-Range: bytes a-b/TOTAL (0: unknown) */
    char code[64];        /* X-Error-Code */
} range_buf;

static size_t on_data(char *ptr, size_t sz, size_t n, void *ud) {
    range_buf *b = ud;
    size_t len = sz * n, take = b->want - b->len < len ? b->want - b->len : len;
    memcpy(b->data + b->len, ptr, take);
    b->len += take;
    return b->len < b->want ? len : 0;   /* 0 once enough: a server ignoring the Range's end is cut off */
}

static size_t on_header(char *buf, size_t sz, size_t n, void *ud) {
    range_buf *b = ud;
    size_t len = sz * n;
    char line[256];
    snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), buf);
    const char *slash = strchr(line, '/');
    if (!strncasecmp(line, "Content-Range:", 14) && slash) b->total = strtoull(slash + 1, NULL, 10);
    if (!strncasecmp(line, "HTTP/", 5)) b->code[0] = 0;   /* a redirect's headers come first */
    if (!strncasecmp(line, "X-Error-Code:", 13)) sscanf(line + 13, " %63[^\r\n]", b->code);
    return len;
}

/* GET the repo file `name`: bytes [from, from + want) with a Range when ranged, else the whole
 * (at most `want`) file.  IRIS_ENOTFOUND when the Hub has no such file. */
static int get(const hub_pull *p, const char *rev, const char *name, int ranged, uint64_t from, range_buf *b,
               iris_err *err) {
    char url[4096], range[64], what[700];
    snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", p->endpoint, p->repo, rev, name);
    snprintf(what, sizeof what, "%s/%s", p->repo, name);
    struct curl_slist *hl = NULL;
    CURL *c = hub_curl_new(p, url, 1, 60L, &hl);
    if (!c) return iris_err_set(err, IRIS_ENOMEM, "curl_easy_init failed");
    char ebuf[CURL_ERROR_SIZE] = {0};
    b->len = 0, b->total = 0, b->code[0] = 0;
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);   /* LFS files redirect to the CDN; the Range goes along */
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, b);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
    if (ranged) {
        snprintf(range, sizeof range, "%" PRIu64 "-%" PRIu64, from, from + b->want - 1);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    CURLcode cc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_slist_free_all(hl);
    if (cc == CURLE_WRITE_ERROR && b->len == b->want) cc = CURLE_OK;   /* cut off on purpose */
    if (cc != CURLE_OK) return hub_curl_error(p->endpoint, cc, ebuf, what, err);
    if (status != 200 && status != 206) return hub_http_error(p, status, b->code, "", what, err);
    if (ranged && b->len < b->want)
        return iris_err_set(err, IRIS_EFORMAT, "%s: %zu bytes at offset %" PRIu64 " asked, %zu received", what,
                            b->want, from, b->len);
    return 0;
}

/* One safetensors file: its header (two range requests) into a sparse copy in dir. */
static int fetch_st_header(const hub_pull *p, const char *rev, const char *name, const char *dir, uint64_t *read,
                           iris_err *err) {
    uint8_t len8[8];
    range_buf b = {.data = len8, .want = 8};
    int rc = get(p, rev, name, 1, 0, &b, err);
    if (rc) return rc;
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)len8[i] << (8 * i);
    if (hlen == 0 || hlen > IRIS_ST_MAX_HEADER_BYTES || (b.total && 8 + hlen > b.total))
        return iris_err_set(err, IRIS_EFORMAT, "%s/%s: a header of %" PRIu64 " bytes is not a safetensors header",
                            p->repo, name, hlen);
    if (!b.total)
        return iris_err_set(err, IRIS_EFORMAT, "%s/%s: the Hub did not say the file's size (no Content-Range)",
                            p->repo, name);
    uint64_t total = b.total;
    range_buf h = {.data = malloc(hlen), .want = (size_t)hlen};
    if (!h.data) return iris_err_set(err, IRIS_ENOMEM, "out of memory for a %" PRIu64 "-byte header", hlen);
    rc = get(p, rev, name, 1, 8, &h, err);
    char path[4600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!rc && strchr(name, '/')) rc = iris_err_set(err, IRIS_EFORMAT, "%s: shards in subfolders are not supported", name);
    if (!rc) rc = iris_hub_write_sparse_st(path, (const char *)h.data, h.len, total - 8 - hlen, err);
    free(h.data);
    *read += 8 + hlen;
    return rc;
}

/* A small file (config.json, the index) into dir; IRIS_ENOTFOUND when absent. */
static int fetch_small(const hub_pull *p, const char *rev, const char *name, const char *dir, char **text,
                       uint64_t *read, iris_err *err) {
    range_buf b = {.data = malloc(SMALL_FILE_MAX + 1), .want = SMALL_FILE_MAX};
    if (!b.data) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    int rc = get(p, rev, name, 0, 0, &b, err);
    if (!rc && b.len == SMALL_FILE_MAX) rc = iris_err_set(err, IRIS_ELIMIT, "%s: over %u MB", name, SMALL_FILE_MAX >> 20);
    if (!rc) {
        b.data[b.len] = 0;
        *read += b.len;
        char path[4600];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(b.data, 1, b.len, f) != b.len) rc = iris_err_set(err, IRIS_EIO, "%s: cannot write", path);
        if (f && fclose(f) != 0 && !rc) rc = iris_err_set(err, IRIS_EIO, "%s: cannot write", path);
    }
    if (!rc && text) *text = (char *)b.data;
    else free(b.data);
    return rc;
}

int iris_hub_fetch_headers(const char *model, const char *dir, uint64_t *bytes_read, iris_err *err) {
    char repo[256], rev[256], token[1024];
    *bytes_read = 0;
    int rc = iris_hub_repo_parse(model, repo, sizeof repo, rev, sizeof rev, err);
    if (rc) return rc;
    const char *ep = getenv("HF_ENDPOINT");
    char endpoint[1024];
    snprintf(endpoint, sizeof endpoint, "%s", ep && *ep ? ep : "https://huggingface.co");
    size_t el = strlen(endpoint);
    while (el && endpoint[el - 1] == '/') endpoint[--el] = 0;
    hub_pull p = {.endpoint = endpoint, .repo = repo};
    hub_find_token(token, sizeof token);
    if (token[0]) snprintf(p.auth, sizeof p.auth, "Authorization: Bearer %s", token);
    char qrev[800];
    if (!hub_url_quote(rev, 0, qrev, sizeof qrev)) return iris_err_set(err, IRIS_ELIMIT, "revision too long");
    if ((rc = fetch_small(&p, qrev, "config.json", dir, NULL, bytes_read, err))) return rc;
    char *index = NULL;
    iris_err ie = {0};
    rc = fetch_small(&p, qrev, "model.safetensors.index.json", dir, &index, bytes_read, &ie);
    if (rc == IRIS_ENOTFOUND) return fetch_st_header(&p, qrev, "model.safetensors", dir, bytes_read, err);
    if (rc) {
        *err = ie;
        return rc;
    }
    /* every shard the index names, once */
    json_error_t je;
    json_t *root = json_loads(index, 0, &je), *map = json_object_get(root, "weight_map"), *seen = json_object();
    free(index);
    if (!json_is_object(map)) rc = iris_err_set(err, IRIS_EFORMAT, "%s: model.safetensors.index.json has no weight_map", repo);
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v) {
        const char *shard = json_string_value(v);
        if (rc || !shard || json_object_get(seen, shard)) continue;
        json_object_set_new(seen, shard, json_true());
        rc = fetch_st_header(&p, qrev, shard, dir, bytes_read, err);
    }
    json_decref(seen);
    json_decref(root);
    return rc;
}
