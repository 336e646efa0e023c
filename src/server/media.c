/* media.c: fetching the bytes of an image_url (see media.h).
 *
 * data: URLs are decoded with OpenSSL's base64 decoder after a strict scan
 * (so an error names the offset of the first bad character).
 *
 * http(s) goes through libcurl restricted to http and https, redirects
 * included (no file://, gopher:// ... by way of a redirect), with a
 * whole-transfer timeout and a size cap enforced while receiving, not
 * after.  Every socket curl opens, for the first URL and after every
 * redirect, passes open_checked first: the resolved address must be public
 * unicast (iris_media_addr_allowed) unless the server allows private ones,
 * so a name that resolves to 127.0.0.1 or a redirect to 169.254.169.254 is
 * refused before connecting.  Proxies from the environment are not used
 * (the address checked is the one connected to).  Whatever fails, the
 * client gets one text; the cause goes to the log.
 *
 * file:// paths must lie, as written, under the allowed directory; they are
 * opened from the directory down, one component at a time with openat and
 * O_NOFOLLOW (no "..", no symlinks, no race between a check and the open),
 * and anything that is not a regular file there gets one text, whether the
 * path exists or not.
 */
#include "server/media.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "log.h"

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

/* ---- destinations ---- */

/* IPv4 (host order) that is not public unicast: this network, private
 * (RFC 1918), shared (100.64/10), loopback, link-local, IETF protocol
 * assignments, benchmarking, multicast, reserved, broadcast. */
static int v4_special(uint32_t a) {
    return (a >> 24) == 0 || (a >> 24) == 10 || (a >> 24) == 127 || (a & 0xffc00000u) == 0x64400000u ||
           (a & 0xffff0000u) == 0xa9fe0000u || (a & 0xfff00000u) == 0xac100000u ||
           (a & 0xffff0000u) == 0xc0a80000u || (a & 0xffffff00u) == 0xc0000000u ||
           (a & 0xfffe0000u) == 0xc6120000u || (a >> 28) >= 14;
}

static uint32_t be32(const uint8_t *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* IPv6 that is not public unicast, the IPv4 inside mapped, compatible,
 * NAT64 and 6to4 addresses judged as IPv4. */
static int v6_special(const uint8_t *b) {
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, zero[12] = {0},
                         nat64[12] = {0, 0x64, 0xff, 0x9b};
    if (!memcmp(b, mapped, 12) || !memcmp(b, zero, 12) || !memcmp(b, nat64, 12)) return v4_special(be32(b + 12));
    if (b[0] == 0x20 && b[1] == 0x02) return v4_special(be32(b + 2));
    return (b[0] & 0xfe) == 0xfc || (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) ||
           (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) || b[0] == 0xff;
}

/* Whether the first `bits` bits of a and b agree. */
static int prefix_eq(const uint8_t *a, const uint8_t *b, int bits) {
    int k = bits / 8, r = bits % 8;
    if (memcmp(a, b, (size_t)k)) return 0;
    return !r || ((a[k] ^ b[k]) & (0xff << (8 - r)) & 0xff) == 0;
}

/* The address is in one of the networks "CIDR,CIDR" (a bare address is /32 or /128). */
static int in_networks(const char *list, int family, const uint8_t *addr) {
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        char one[80];
        if (k < sizeof one) {
            memcpy(one, p, k);
            one[k] = 0;
            char *slash = strchr(one, '/');
            if (slash) *slash = 0;
            uint8_t net[16];
            int fam = strchr(one, ':') ? AF_INET6 : AF_INET, max = fam == AF_INET6 ? 128 : 32;
            int bits = slash ? atoi(slash + 1) : max;
            if (fam == family && bits >= 0 && bits <= max && inet_pton(fam, one, net) == 1 &&
                prefix_eq(addr, net, bits))
                return 1;
        }
        p += k + (e != NULL);
    }
    return 0;
}

int iris_media_addr_allowed(const struct sockaddr *sa, const iris_media_opts *o) {
    if (o->allow_private) return 1;
    if (sa->sa_family == AF_INET) {
        const uint8_t *b = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
        return !v4_special(be32(b)) || in_networks(o->networks, AF_INET, b);
    }
    if (sa->sa_family == AF_INET6) {
        const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!v6_special(b)) return 1;
        return in_networks(o->networks, AF_INET6, b) || (!memcmp(b, mapped, 12) && in_networks(o->networks, AF_INET, b + 12));
    }
    return 0;
}

/* ---- http(s) ---- */

typedef struct sink {
    uint8_t *p;
    size_t n, cap, max;
    int over;
    const iris_media_opts *o;
    int refused;                 /* a destination was not allowed */
} sink;

/* curl's socket opener: every connection, after every redirect, to an allowed address only. */
static curl_socket_t open_checked(void *ud, curlsocktype purpose, struct curl_sockaddr *a) {
    sink *s = ud;
    if (purpose != CURLSOCKTYPE_IPCXN || !iris_media_addr_allowed(&a->addr, s->o)) {
        s->refused = 1;
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

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
    sink s = {.max = o->max_bytes, .o = o};
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
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_checked);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &s);
    CURLcode cc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    if (s.over || s.refused || cc != CURLE_OK || s.n == 0) {
        iris_log(IRIS_LOG_INFO, "media", "%.200s: %s", url,
                 s.refused ? "a private, loopback or link-local address (--allow-private-media-urls)"
                 : s.over || cc == CURLE_FILESIZE_EXCEEDED ? "over --max-image-bytes"
                 : cc != CURLE_OK ? (ebuf[0] ? ebuf : curl_easy_strerror(cc)) : "empty");
        free(s.p);
        return iris_err_set(err, IRIS_EIO, "could not fetch the image at %.200s (a public http(s) address must "
                            "answer 200 with at most %zu bytes within %.0f s)", url, o->max_bytes,
                            (o->timeout_ms > 0 ? o->timeout_ms : 10000L) / 1000.0);
    }
    *data = s.p;
    *n = s.n;
    return 0;
}

/* path with the directory dir (no trailing '/') as its prefix: the rest after the '/', else NULL. */
static const char *under(const char *path, const char *dir) {
    size_t n = strlen(dir);
    while (n > 0 && dir[n - 1] == '/') n--;
    if (strncmp(path, dir, n) || path[n] != '/') return NULL;
    return path + n + 1;
}

/* The regular file at rest (components under the directory dfd, which is closed here) opened
 * without following a symlink or leaving the directory: the descriptor, or -1. */
static int open_beneath(int dfd, const char *rest) {
    while (dfd >= 0) {
        while (*rest == '/') rest++;
        const char *e = strchr(rest, '/');
        size_t k = e ? (size_t)(e - rest) : strlen(rest);
        char name[NAME_MAX + 1];
        if (k == 0 || k > NAME_MAX || (k == 1 && rest[0] == '.') || (k == 2 && !strncmp(rest, "..", 2))) break;
        memcpy(name, rest, k);
        name[k] = 0;
        rest += k;
        while (*rest == '/') rest++;
        int last = *rest == 0;
        int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (last ? O_NONBLOCK : O_DIRECTORY));
        close(dfd);
        if (last) return fd;
        dfd = fd;
    }
    if (dfd >= 0) close(dfd);
    return -1;
}

static int fetch_file(const char *url, const iris_media_opts *o, uint8_t **data, size_t *n, iris_err *err) {
    if (!o->local_dir)
        return iris_err_set(err, IRIS_EINVAL,
                            "file:// image URLs are refused: start the server with --allowed-local-media-path DIR");
    const char *path = url + 7;
    if (path[0] != '/') return iris_err_set(err, IRIS_EINVAL, "file:// URL must hold an absolute path (file:///...)");
    char dir[PATH_MAX];
    if (!realpath(o->local_dir, dir))
        return iris_err_set(err, IRIS_EIO, "--allowed-local-media-path %s: %s", o->local_dir, strerror(errno));
    const char *rest = under(path, dir);
    if (!rest) rest = under(path, o->local_dir);
    int fd = rest ? open_beneath(open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rest) : -1;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        if (fd >= 0) close(fd);
        return iris_err_set(err, IRIS_EINVAL, "%.300s is not a regular file inside the allowed media directory "
                            "(symbolic links and '..' are not followed)", path);
    }
    if ((size_t)st.st_size > o->max_bytes) {
        close(fd);
        return iris_err_set(err, IRIS_ELIMIT, "%.300s is %lld bytes, over the limit of %zu", path,
                            (long long)st.st_size, o->max_bytes);
    }
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t k = read(fd, buf + got, (size_t)st.st_size - got);
        if (k <= 0 && !(k < 0 && errno == EINTR)) break;
        if (k > 0) got += (size_t)k;
    }
    close(fd);
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
