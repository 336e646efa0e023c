/* hub_fetch.c: one file of a pull, the way huggingface_hub's hf_hub_download
 * does it, so the cache it leaves is the one transformers reads.
 *
 *   1. HEAD {endpoint}/{repo}/resolve/{commit}/{file}, following only
 *      relative redirects (renamed repos): the etag is X-Linked-Etag, else
 *      ETag (quotes and W/ stripped); for LFS files it is the SHA-256 of the
 *      content and the answer is a 302 to the CDN, whose absolute Location is
 *      where the bytes come from (without our Authorization header).
 *   2. blobs/<etag> already there (another revision has it): just link.
 *   3. Otherwise, under .locks/models--Org--Name/<etag>.lock (flock, as
 *      huggingface_hub's filelock, so concurrent pulls do not collide), append
 *      to blobs/<etag>.incomplete with `Range: bytes=<have>-`; a server that
 *      answers 200 instead of 206 restarts the file.  Dropped transfers are
 *      retried from where they stopped.
 *   4. LFS files: SHA-256 of the whole content must equal the etag (and the
 *      listing's lfs.sha256); a mismatch removes the file.  Then rename to
 *      blobs/<etag> and link snapshots/<commit>/<file> -> ../../blobs/<etag>.
 *
 * Invariants: blobs/<etag> only ever holds complete, verified content; the
 * etag (from the network) is checked to be a plain file name before use. */
#include "hub_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "err.h"

/* Response headers we read; reset at every status line (redirect hops). */
typedef struct hub_hdrs {
    long status;
    char etag[160], linked_etag[160], location[4096], error_code[64], error_message[512];
    uint64_t linked_size, content_length;
    int has_linked_size, has_content_length;
} hub_hdrs;

static void copy_value(char *dst, size_t dst_size, const char *v, size_t n) {
    while (n && (*v == ' ' || *v == '\t')) v++, n--;
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ')) n--;
    if (n >= dst_size) n = dst_size - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

static size_t on_header(char *buf, size_t sz, size_t nitems, void *ud) {
    hub_hdrs *h = ud;
    size_t len = sz * nitems;
    if (len >= 5 && !strncmp(buf, "HTTP/", 5)) {
        memset(h, 0, sizeof *h);
        const char *sp = memchr(buf, ' ', len);
        if (sp) h->status = strtol(sp + 1, NULL, 10);
        return len;
    }
    const char *colon = memchr(buf, ':', len);
    if (!colon) return len;
    size_t klen = (size_t)(colon - buf), vlen = len - klen - 1;
    const char *v = colon + 1;
    char tmp[64];
#define IS(name) (klen == strlen(name) && !strncasecmp(buf, name, klen))
    if (IS("ETag")) copy_value(h->etag, sizeof h->etag, v, vlen);
    else if (IS("X-Linked-Etag")) copy_value(h->linked_etag, sizeof h->linked_etag, v, vlen);
    else if (IS("Location")) copy_value(h->location, sizeof h->location, v, vlen);
    else if (IS("X-Error-Code")) copy_value(h->error_code, sizeof h->error_code, v, vlen);
    else if (IS("X-Error-Message")) copy_value(h->error_message, sizeof h->error_message, v, vlen);
    else if (IS("X-Linked-Size")) {
        copy_value(tmp, sizeof tmp, v, vlen);
        h->linked_size = strtoull(tmp, NULL, 10);
        h->has_linked_size = 1;
    } else if (IS("Content-Length")) {
        copy_value(tmp, sizeof tmp, v, vlen);
        h->content_length = strtoull(tmp, NULL, 10);
        h->has_content_length = 1;
    }
#undef IS
    return len;
}

/* huggingface_hub's _normalize_etag: drop a weak "W/" prefix and the quotes. */
static void normalize_etag(const char *in, char *out, size_t out_size) {
    if (!strncmp(in, "W/", 2)) in += 2;
    size_t n = strlen(in);
    if (n >= 2 && in[0] == '"' && in[n - 1] == '"') in++, n -= 2;
    copy_value(out, out_size, in, n);
}

static int etag_is_safe(const char *e) {
    size_t n = strlen(e);
    if (n == 0 || n > 128 || e[0] == '.') return 0;
    for (size_t i = 0; i < n; i++)
        if (!((e[i] >= '0' && e[i] <= '9') || (e[i] >= 'a' && e[i] <= 'z') || (e[i] >= 'A' && e[i] <= 'Z') ||
              e[i] == '-' || e[i] == '_' || e[i] == '.'))
            return 0;
    return 1;
}

static int is_sha256_hex(const char *s) {
    if (strlen(s) != 64) return 0;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

static int on_xfer(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    const hub_pull *p = ud;
    return atomic_load(&p->cancel) ? 1 : 0;
}

CURL *hub_curl_new(const hub_pull *p, const char *url, int with_auth, long timeout_s, struct curl_slist **hl) {
    CURL *c = curl_easy_init();
    if (!c) return NULL;
    *hl = curl_slist_append(NULL, "Accept-Encoding: identity");
    if (with_auth && p->auth[0]) *hl = curl_slist_append(*hl, p->auth);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hl);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "iris/" IRIS_VERSION);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 15L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    if (timeout_s > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
    return c;
}

/* A transfer of the pull: stalls (no byte for a minute) fail and are resumed; cancellable. */
static CURL *easy_new(hub_pull *p, const char *url, struct curl_slist **hl, int with_auth) {
    CURL *c = hub_curl_new(p, url, with_auth, 0, hl);
    if (!c) return NULL;
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, p);
    return c;
}

/* Replace the path of `url` by an absolute path `loc` ("/x?y"). */
static int join_relative(const char *url, const char *loc, char *out, size_t out_size) {
    const char *s = strstr(url, "://");
    if (!s) return -1;
    const char *path = strchr(s + 3, '/');
    size_t origin = path ? (size_t)(path - url) : strlen(url);
    int n = snprintf(out, out_size, "%.*s%s", (int)origin, url, loc);
    return n < 0 || (size_t)n >= out_size ? -1 : 0;
}

static int transient_curl(CURLcode rc) {
    return rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR ||
           rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_GOT_NOTHING || rc == CURLE_COULDNT_CONNECT ||
           rc == CURLE_HTTP2 || rc == CURLE_HTTP2_STREAM || rc == CURLE_SSL_CONNECT_ERROR;
}

static void backoff(int attempt) {
    struct timespec ts = {0, 250000000L * (attempt < 4 ? attempt : 4)};
    nanosleep(&ts, NULL);
}

/* HEAD the resolve URL; on success fills etag, size and the URL to GET. */
static int head_file(hub_pull *p, hub_file *f, char *etag, size_t etag_size, uint64_t *size, char *get_url,
                     size_t get_url_size, int *get_with_auth, iris_err *err) {
    char qname[1600], url[4096], what[700];
    snprintf(what, sizeof what, "file %s", f->name);
    if (!hub_url_quote(f->name, 1, qname, sizeof qname)) return iris_err_set(err, IRIS_ELIMIT, "%s: name too long", what);
    snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", p->endpoint, p->repo, p->commit, qname);
    hub_hdrs h;
    for (int hop = 0, attempt = 0;; hop++) {
        struct curl_slist *hl = NULL;
        CURL *c = easy_new(p, url, &hl, 1);
        if (!c) return iris_err_set(err, IRIS_ENOMEM, "curl_easy_init failed");
        char ebuf[CURL_ERROR_SIZE] = {0};
        memset(&h, 0, sizeof h);
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
        CURLcode rc = curl_easy_perform(c);
        curl_easy_cleanup(c);
        curl_slist_free_all(hl);
        if (rc == CURLE_ABORTED_BY_CALLBACK) return iris_err_set(err, IRIS_ECANCELLED, "%s: cancelled", what);
        if (rc != CURLE_OK) {
            if (transient_curl(rc) && attempt++ < p->retries) {
                backoff(attempt);
                hop--;
                continue;
            }
            return hub_curl_error(p->endpoint, rc, ebuf, what, err);
        }
        if (h.status >= 300 && h.status < 400 && h.location[0]) {
            if (h.location[0] == '/' && hop < 5) {
                char next[4096];
                if (join_relative(url, h.location, next, sizeof next))
                    return iris_err_set(err, IRIS_EFORMAT, "%s: bad redirect to '%s'", what, h.location);
                snprintf(url, sizeof url, "%s", next);
                continue;
            }
            if (strncmp(h.location, "http://", 7) && strncmp(h.location, "https://", 8))
                return iris_err_set(err, IRIS_EFORMAT, "%s: unexpected redirect to '%.200s'", what, h.location);
            snprintf(get_url, get_url_size, "%s", h.location);
            *get_with_auth = 0; /* a presigned CDN URL: our token stays with the Hub */
            break;
        }
        if (h.status >= 500 && attempt++ < p->retries) {
            backoff(attempt);
            hop--;
            continue;
        }
        if (h.status != 200)
            return hub_http_error(p, h.status, h.error_code, h.error_message, what, err);
        snprintf(get_url, get_url_size, "%s", url);
        *get_with_auth = 1;
        break;
    }
    normalize_etag(h.linked_etag[0] ? h.linked_etag : h.etag, etag, etag_size);
    if (!etag[0])
        return iris_err_set(err, IRIS_EFORMAT, "%s: the server sent no ETag, so it cannot be stored in the cache "
                            "(is HF_ENDPOINT=%s a Hugging Face Hub?)", what, p->endpoint);
    if (!etag_is_safe(etag)) return iris_err_set(err, IRIS_EFORMAT, "%s: unusable ETag '%.80s'", what, etag);
    *size = h.has_linked_size ? h.linked_size : h.has_content_length && h.status == 200 ? h.content_length : f->size;
    return 0;
}

typedef struct dl {
    hub_pull *p;
    CURL *c;
    int fd;
    uint64_t offset;
    EVP_MD_CTX *sha;
    int checked;
    long status;
    int write_errno;
} dl;

static int rehash_prefix(EVP_MD_CTX *sha, int fd, uint64_t n) {
    static const size_t chunk = 1 << 20;
    char *buf = malloc(chunk);
    if (!buf) return -1;
    uint64_t off = 0;
    int rc = 0;
    while (off < n) {
        ssize_t r = pread(fd, buf, n - off < chunk ? (size_t)(n - off) : chunk, (off_t)off);
        if (r <= 0) {
            rc = -1;
            break;
        }
        EVP_DigestUpdate(sha, buf, (size_t)r);
        off += (uint64_t)r;
    }
    free(buf);
    return rc;
}

static size_t on_data(char *ptr, size_t sz, size_t n, void *ud) {
    dl *d = ud;
    size_t len = sz * n;
    if (!d->checked) {
        d->checked = 1;
        curl_easy_getinfo(d->c, CURLINFO_RESPONSE_CODE, &d->status);
        if (d->status == 200 && d->offset > 0) {
            /* The server ignored our Range: start the file over. */
            if (ftruncate(d->fd, 0) != 0) {
                d->write_errno = errno;
                return 0;
            }
            atomic_fetch_sub(&d->p->bytes_done, d->offset);
            d->offset = 0;
            if (d->sha) EVP_DigestInit_ex(d->sha, EVP_sha256(), NULL);
        } else if (d->status != 200 && d->status != 206) {
            return 0;
        }
    }
    for (size_t w = 0; w < len;) {
        ssize_t r = pwrite(d->fd, ptr + w, len - w, (off_t)(d->offset + w));
        if (r < 0) {
            if (errno == EINTR) continue;
            d->write_errno = errno;
            return 0;
        }
        w += (size_t)r;
    }
    if (d->sha) EVP_DigestUpdate(d->sha, ptr, len);
    d->offset += len;
    atomic_fetch_add(&d->p->bytes_now, len);
    atomic_fetch_add(&d->p->bytes_done, len);
    return len;
}

static void hex(const unsigned char *b, unsigned n, char *out) {
    for (unsigned i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

/* Download into `tmp` (appending to what is there) until it holds the whole
 * file; checks the SHA-256 when `want_sha` is set. */
static int download(hub_pull *p, hub_file *f, const char *url, int with_auth, const char *tmp, uint64_t size,
                    const char *want_sha, iris_err *err) {
    char what[700];
    snprintf(what, sizeof what, "file %s", f->name);
    int fd = open(tmp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return iris_err_set(err, IRIS_EIO, "%s: cannot write %s: %s", what, tmp, strerror(errno));
    struct stat st;
    fstat(fd, &st);
    dl d = {.p = p, .fd = fd, .offset = (uint64_t)st.st_size};
    if (size && d.offset > size) {
        /* Longer than the file can be: not a prefix of it. */
        if (ftruncate(fd, 0) != 0) d.offset = 0;
        d.offset = 0;
    }
    atomic_fetch_add(&p->bytes_done, d.offset);
    if (want_sha) {
        d.sha = EVP_MD_CTX_new();
        if (!d.sha || !EVP_DigestInit_ex(d.sha, EVP_sha256(), NULL) || rehash_prefix(d.sha, fd, d.offset)) {
            EVP_MD_CTX_free(d.sha);
            close(fd);
            return iris_err_set(err, IRIS_EIO, "%s: cannot hash %s", what, tmp);
        }
    }
    int rc = 0;
    for (int attempt = 0; !(size && d.offset == size);) {
        struct curl_slist *hl = NULL;
        hub_hdrs h;
        memset(&h, 0, sizeof h);
        d.c = easy_new(p, url, &hl, with_auth);
        if (!d.c) {
            rc = iris_err_set(err, IRIS_ENOMEM, "curl_easy_init failed");
            break;
        }
        char ebuf[CURL_ERROR_SIZE] = {0}, range[48];
        d.checked = 0;
        d.status = 0;
        curl_easy_setopt(d.c, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(d.c, CURLOPT_MAXREDIRS, 5L);
        curl_easy_setopt(d.c, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(d.c, CURLOPT_WRITEDATA, &d);
        curl_easy_setopt(d.c, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(d.c, CURLOPT_HEADERDATA, &h);
        curl_easy_setopt(d.c, CURLOPT_ERRORBUFFER, ebuf);
        if (d.offset) {
            snprintf(range, sizeof range, "%llu-", (unsigned long long)d.offset);
            curl_easy_setopt(d.c, CURLOPT_RANGE, range);
        }
        CURLcode cc = curl_easy_perform(d.c);
        if (!d.checked) curl_easy_getinfo(d.c, CURLINFO_RESPONSE_CODE, &d.status);
        curl_easy_cleanup(d.c);
        curl_slist_free_all(hl);
        if (d.write_errno) {
            rc = iris_err_set(err, d.write_errno == ENOSPC ? IRIS_ELIMIT : IRIS_EIO, "%s: writing %s: %s%s", what,
                              tmp, strerror(d.write_errno),
                              d.write_errno == ENOSPC ? " (free some space and run the pull again: it resumes)" : "");
            break;
        }
        if (cc == CURLE_ABORTED_BY_CALLBACK) {
            rc = iris_err_set(err, IRIS_ECANCELLED, "%s: cancelled", what);
            break;
        }
        if (cc == CURLE_OK && d.status == 416 && size && d.offset == size) break;
        if (cc == CURLE_OK && (d.status == 200 || d.status == 206)) {
            if (!size || d.offset == size) break;
            /* Short body without a transport error: treat as a dropped transfer. */
            cc = CURLE_PARTIAL_FILE;
            snprintf(ebuf, sizeof ebuf, "got %llu of %llu bytes", (unsigned long long)d.offset,
                     (unsigned long long)size);
        }
        int retry = (cc != CURLE_OK && transient_curl(cc)) || (cc == CURLE_OK && d.status >= 500) ||
                    (cc == CURLE_WRITE_ERROR && d.status >= 500);
        if (retry && attempt++ < p->retries) {
            backoff(attempt);
            continue;
        }
        if (cc != CURLE_OK && cc != CURLE_WRITE_ERROR) {
            rc = hub_curl_error(p->endpoint, cc, ebuf, what, err);
            if (d.offset)
                iris_err_prefix(err, "%s stopped after %llu bytes (kept in %s; the next pull resumes there)", what,
                                (unsigned long long)d.offset, tmp);
        } else {
            rc = hub_http_error(p, d.status, h.error_code, h.error_message, what, err);
        }
        break;
    }
    if (!rc && want_sha) {
        unsigned char md[32];
        unsigned mdlen = 0;
        char got[65];
        EVP_DigestFinal_ex(d.sha, md, &mdlen);
        hex(md, 32, got);
        if (strcmp(got, want_sha)) {
            rc = iris_err_set(err, IRIS_EFORMAT,
                              "%s: checksum mismatch: the downloaded bytes have SHA-256 %s, the Hub says %s; the "
                              "bad file was removed, run the pull again", what, got, want_sha);
            unlink(tmp);
        }
    }
    if (!rc && fsync(fd) != 0) rc = iris_err_set(err, IRIS_EIO, "%s: fsync %s: %s", what, tmp, strerror(errno));
    EVP_MD_CTX_free(d.sha);
    close(fd);
    return rc;
}

/* snapshots/<commit>/<name> -> ../../blobs/<etag> (one more ../ per folder in name). */
static int link_snapshot(hub_pull *p, const hub_file *f, const char *etag, iris_err *err) {
    char link_path[5200], dir[5200], target[1024] = "";
    snprintf(link_path, sizeof link_path, "%s/snapshots/%s/%s", p->repo_dir, p->commit, f->name);
    snprintf(dir, sizeof dir, "%s", link_path);
    *strrchr(dir, '/') = 0;
    int rc = hub_mkdirs(dir);
    if (rc) return iris_err_set(err, IRIS_EIO, "cannot create %s: %s", dir, strerror(-rc));
    for (const char *s = f->name; (s = strchr(s, '/')); s++) strcat(target, "../");
    strcat(target, "../../blobs/");
    strncat(target, etag, sizeof target - strlen(target) - 1);
    unlink(link_path);
    if (symlink(target, link_path) != 0)
        return iris_err_set(err, IRIS_EIO, "cannot link %s -> %s: %s", link_path, target, strerror(errno));
    return 0;
}

int hub_fetch_file(hub_pull *p, hub_file *f, iris_err *err) {
    char etag[160], url[4096];
    uint64_t size = 0;
    int with_auth = 0;
    int rc = head_file(p, f, etag, sizeof etag, &size, url, sizeof url, &with_auth, err);
    if (rc) return rc;
    /* For LFS files the etag is the SHA-256 of the content (and the listing
     * says so too); for regular files it is the git blob id, not a checksum
     * of the bytes we could recompute cheaply, so only LFS files are verified. */
    const char *want_sha = is_sha256_hex(etag) ? etag : NULL;
    if (f->sha256[0] && want_sha && strcmp(f->sha256, etag))
        return iris_err_set(err, IRIS_EFORMAT, "file %s: the listing says SHA-256 %s but the file's ETag is %s", f->name,
                            f->sha256, etag);
    if (f->sha256[0]) want_sha = f->sha256;

    char blob[4800], tmp[4900], lock_dir[4800], lock_path[5000];
    snprintf(blob, sizeof blob, "%s/blobs/%s", p->repo_dir, etag);
    snprintf(tmp, sizeof tmp, "%s.incomplete", blob);
    struct stat st;
    if (stat(blob, &st) != 0) {
        /* .locks/ sits beside the models-- folders, as huggingface_hub keeps it. */
        const char *folder = strrchr(p->repo_dir, '/');
        snprintf(lock_dir, sizeof lock_dir, "%.*s/.locks%s", (int)(folder - p->repo_dir), p->repo_dir, folder);
        if ((rc = hub_mkdirs(lock_dir)))
            return iris_err_set(err, IRIS_EIO, "cannot create %s: %s", lock_dir, strerror(-rc));
        snprintf(lock_path, sizeof lock_path, "%s/%s.lock", lock_dir, etag);
        int lfd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (lfd < 0) return iris_err_set(err, IRIS_EIO, "cannot open %s: %s", lock_path, strerror(errno));
        while (flock(lfd, LOCK_EX) != 0 && errno == EINTR) {}
        if (stat(blob, &st) != 0) { /* not fetched by someone else meanwhile */
            rc = download(p, f, url, with_auth, tmp, size, want_sha, err);
            if (!rc && rename(tmp, blob) != 0)
                rc = iris_err_set(err, IRIS_EIO, "cannot rename %s to %s: %s", tmp, blob, strerror(errno));
            if (!rc) atomic_fetch_add(&p->n_downloaded, 1);
        } else {
            atomic_fetch_add(&p->bytes_done, size);
        }
        close(lfd); /* releases the flock */
        if (rc) return rc;
    } else {
        atomic_fetch_add(&p->bytes_done, size);
    }
    return link_snapshot(p, f, etag, err);
}
