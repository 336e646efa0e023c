/* media.c: fetching the bytes of an image_url (see media.h).
 *
 * data: URLs are decoded with OpenSSL's base64 decoder after a strict scan
 * (so an error names the offset of the first bad character).  http(s) goes
 * through libcurl restricted to http and https, redirects included (no
 * file://, gopher:// ... by way of a redirect), with a whole-transfer
 * timeout and a size cap enforced while receiving, not after.  file:// is
 * resolved with realpath() and must lie inside the allowed directory after
 * symlinks are followed.
 */
#include "server/media.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"

static int b64_value(unsigned char c) {
    return isalnum(c) || c == '+' || c == '/';
}

int iris_media_base64(const char *s, size_t len, uint8_t **out, size_t *n, iris_err *err) {
    *out = NULL;
    *n = 0;
    char *clean = malloc(len + 4);
    if (!clean) return iris_err_set(err, IRIS_ENOMEM, "out of memory decoding %zu bytes of base64", len);
    size_t k = 0, pad = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
        if (c == '=') {
            pad++;
            continue;
        }
        if (!b64_value(c) || pad) {
            free(clean);
            if (pad) return iris_err_set(err, IRIS_EFORMAT, "invalid base64: data after the '=' padding (offset %zu)", i);
            return iris_err_set(err, IRIS_EFORMAT, "invalid base64: byte 0x%02x at offset %zu", c, i);
        }
        clean[k++] = (char)c;
    }
    if (k % 4 == 1 || pad > 2) {
        free(clean);
        return iris_err_set(err, IRIS_EFORMAT, "invalid base64: truncated (%zu characters)", k);
    }
    size_t missing = (4 - k % 4) % 4;
    for (size_t i = 0; i < missing; i++) clean[k++] = '=';
    uint8_t *buf = malloc(k / 4 * 3 + 1);
    if (!buf) {
        free(clean);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory decoding %zu bytes of base64", len);
    }
    int got = k ? EVP_DecodeBlock(buf, (const unsigned char *)clean, (int)k) : 0;
    free(clean);
    if (got < 0) {
        free(buf);
        return iris_err_set(err, IRIS_EFORMAT, "invalid base64");
    }
    /* EVP_DecodeBlock counts the padding as zero bytes; the original '='
     * were dropped above and re-added as `missing`. */
    *n = (size_t)got - missing;
    *out = buf;
    return 0;
}

static int fetch_data(const char *url, const iris_media_opts *o, uint8_t **data, size_t *n, iris_err *err) {
    const char *comma = strchr(url, ',');
    if (!comma) return iris_err_set(err, IRIS_EINVAL, "data: URL without a ',' before the data");
    const char *meta = url + 5;
    size_t mlen = (size_t)(comma - meta);
    if (mlen < 7 || strncmp(comma - 7, ";base64", 7))
        return iris_err_set(err, IRIS_EINVAL, "data: URL is not base64 (expected data:image/...;base64,...)");
    size_t len = strlen(comma + 1);
    if (len / 4 * 3 > o->max_bytes + 3)
        return iris_err_set(err, IRIS_ELIMIT, "data: URL image is %zu bytes, over the limit of %zu", len / 4 * 3,
                            o->max_bytes);
    int rc = iris_media_base64(comma + 1, len, data, n, err);
    if (rc) {
        iris_err_prefix(err, "data: URL");
        return rc;
    }
    if (*n == 0) {
        free(*data);
        *data = NULL;
        return iris_err_set(err, IRIS_EINVAL, "data: URL holds no data");
    }
    return 0;
}

typedef struct sink {
    uint8_t *p;
    size_t n, cap, max;
    int over;
} sink;

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud) {
    sink *s = ud;
    size_t k = size * nmemb;
    if (s->n + k > s->max) {
        s->over = 1;
        return 0; /* aborts the transfer */
    }
    if (s->n + k > s->cap) {
        size_t cap = s->cap ? s->cap : 65536;
        while (cap < s->n + k) cap *= 2;
        uint8_t *q = realloc(s->p, cap);
        if (!q) return 0;
        s->p = q;
        s->cap = cap;
    }
    memcpy(s->p + s->n, ptr, k);
    s->n += k;
    return k;
}

static int fetch_http(const char *url, const iris_media_opts *o, uint8_t **data, size_t *n, iris_err *err) {
    if (!o->allow_remote)
        return iris_err_set(err, IRIS_EINVAL,
                            "http(s) image URLs are disabled on this server (--no-remote-images); send a data: URL");
    CURL *c = curl_easy_init();
    if (!c) return iris_err_set(err, IRIS_ENOMEM, "curl_easy_init failed");
    sink s = {.max = o->max_bytes};
    char ebuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, o->timeout_ms > 0 ? o->timeout_ms : 10000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)o->max_bytes);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "iris/" IRIS_VERSION);
    CURLcode cc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    int rc = 0;
    if (s.over || cc == CURLE_FILESIZE_EXCEEDED)
        rc = iris_err_set(err, IRIS_ELIMIT, "image at %.200s is over the limit of %zu bytes", url, o->max_bytes);
    else if (cc != CURLE_OK)
        rc = iris_err_set(err, IRIS_EIO, "could not fetch the image at %.200s: %s", url,
                          ebuf[0] ? ebuf : curl_easy_strerror(cc));
    else if (s.n == 0)
        rc = iris_err_set(err, IRIS_EINVAL, "the image at %.200s is empty", url);
    if (rc) {
        free(s.p);
        return rc;
    }
    *data = s.p;
    *n = s.n;
    return 0;
}

static int fetch_file(const char *url, const iris_media_opts *o, uint8_t **data, size_t *n, iris_err *err) {
    if (!o->local_dir)
        return iris_err_set(err, IRIS_EINVAL,
                            "file:// image URLs are refused: start the server with --allowed-local-media-path DIR");
    const char *path = url + 7;
    if (path[0] != '/') return iris_err_set(err, IRIS_EINVAL, "file:// URL must hold an absolute path (file:///...)");
    char dir[PATH_MAX], real[PATH_MAX];
    if (!realpath(o->local_dir, dir))
        return iris_err_set(err, IRIS_EIO, "--allowed-local-media-path %s: %s", o->local_dir, strerror(errno));
    if (!realpath(path, real)) return iris_err_set(err, IRIS_ENOTFOUND, "%.300s: %s", path, strerror(errno));
    size_t dl = strlen(dir);
    if (strncmp(real, dir, dl) || (real[dl] != '/' && !(dl == 1 && dir[0] == '/')))
        return iris_err_set(err, IRIS_EINVAL, "%.300s is outside the allowed media directory", path);
    struct stat st;
    if (stat(real, &st) || !S_ISREG(st.st_mode))
        return iris_err_set(err, IRIS_EINVAL, "%.300s is not a regular file", path);
    if ((size_t)st.st_size > o->max_bytes)
        return iris_err_set(err, IRIS_ELIMIT, "%.300s is %lld bytes, over the limit of %zu", path,
                            (long long)st.st_size, o->max_bytes);
    FILE *f = fopen(real, "rb");
    if (!f) return iris_err_set(err, IRIS_EIO, "%.300s: %s", path, strerror(errno));
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    size_t got = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (!buf || got != (size_t)st.st_size) {
        free(buf);
        return iris_err_set(err, IRIS_EIO, "%.300s: short read", path);
    }
    *data = buf;
    *n = got;
    return 0;
}

int iris_media_fetch(const char *url, const iris_media_opts *o, uint8_t **data, size_t *n, iris_err *err) {
    *data = NULL;
    *n = 0;
    if (!strncasecmp(url, "data:", 5)) return fetch_data(url, o, data, n, err);
    if (!strncasecmp(url, "http://", 7) || !strncasecmp(url, "https://", 8)) return fetch_http(url, o, data, n, err);
    if (!strncasecmp(url, "file://", 7)) return fetch_file(url, o, data, n, err);
    return iris_err_set(err, IRIS_EINVAL, "unsupported image URL \"%.40s...\": use data:, http(s):// or file://", url);
}
