/* media.h: the bytes behind an image_url: data: URLs (base64), http(s)
 * URLs fetched with libcurl under a size and a time limit, and file:// URLs
 * inside one allowed directory.
 *
 * Every failure is the client's problem (HTTP 400), and says nothing the
 * client could not know: an http(s) fetch fails with one text whatever the
 * cause (refused destination, closed port, 404, too large, too slow), and a
 * file:// URL that is not a regular file inside the allowed directory gets
 * one text whether the path exists or not.  A data: URL's message names
 * what was wrong, never echoing the URL.
 */
#ifndef IRIS_SERVER_MEDIA_H
#define IRIS_SERVER_MEDIA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "iris.h"

typedef struct iris_media_opts {
    int allow_remote;        /* fetch http(s) URLs */
    const char *local_dir;   /* file:// URLs must resolve inside it; NULL refuses them */
    size_t max_bytes;        /* largest image file accepted, any kind of URL */
    long timeout_ms;         /* whole http(s) transfer */
    int allow_private;       /* http(s) may connect to private, loopback, link-local, ... addresses */
    const char *networks;    /* "CIDR,CIDR" (IPv4 or IPv6) allowed even so; NULL: none */
} iris_media_opts;

/* Whether http(s) may connect to address sa: public unicast, or allowed by o. */
int iris_media_addr_allowed(const struct sockaddr *sa, const iris_media_opts *o);

/* The image file's bytes: *data is malloc'd (caller frees).  Codes:
 * IRIS_EINVAL (malformed or refused URL), IRIS_ELIMIT (over max_bytes),
 * IRIS_EIO (fetch or read failed), IRIS_ENOTFOUND. */
int iris_media_fetch(const char *url, const iris_media_opts *o, uint8_t **data, size_t *n, iris_err *err);

/* Base64 (RFC 4648, standard alphabet, padding optional, whitespace
 * ignored) to bytes; *out malloc'd.  IRIS_EFORMAT names the first bad
 * character's offset. */
int iris_media_base64(const char *s, size_t len, uint8_t **out, size_t *n, iris_err *err);

#endif
