/* server.h: `iris serve`, the OpenAI-compatible HTTP server.
 *
 * Threads: libmicrohttpd runs one thread per connection.  A connection
 * thread reads the body, parses and validates it (openai.c), fetches the
 * images, takes one of the decode slots (a bounded pool with a bounded
 * queue: full is a 503) to decode them and build the prompt
 * (engine/prompt.c), submits it to the engine and then streams the engine's
 * events back (generate.c).  The engine thread owns the model; nothing here
 * touches it except through include/iris.h's request API.
 *
 * Hostile clients: a connection's request head must arrive within
 * header_timeout_s and its body within body_timeout_s (a watchdog thread
 * shuts the socket of one that does not); one client address holds at most
 * max_connections_per_client of the max_connections; a client that goes
 * away is noticed within ~50 ms, streamed or not, and its request
 * cancelled.  POST bodies must be Content-Type: application/json (415);
 * no CORS header is sent unless allowed_origins names the page's origin.
 * The port is bound exclusively: a second server on it fails "port in use".
 *
 * Life cycle: iris_server_start listens at once and answers /health with
 * 503 (and generation routes with 503) until iris_server_set_engine marks it
 * ready; iris_server_drain stops accepting, answers 503 on connections that
 * stay open, and waits for the requests in flight; iris_server_stop frees.
 */
#ifndef IRIS_SERVER_H
#define IRIS_SERVER_H

#include <stddef.h>

#include "iris.h"

typedef struct iris_server_opts {
    const char *host;                /* "127.0.0.1"; "0.0.0.0" or "::" for all */
    int port;                        /* 0: any free port (see iris_server_port) */
    const char *api_key;             /* NULL: no authentication */
    const char *served_model_name;   /* the id /v1/models lists and requests may name */
    const char *model_arg;           /* MODEL as given on the command line, also accepted */
    size_t max_body_bytes;           /* 413 above it (32 MiB) */
    int allow_remote_images;         /* fetch http(s) image URLs (1) */
    const char *local_media_dir;     /* file:// URLs inside it; NULL refuses them */
    size_t max_image_bytes;          /* an image file's size limit (20 MiB) */
    long image_timeout_ms;           /* an http(s) image's whole transfer (10 s) */
    int allow_private_media;         /* http(s) image URLs may reach private, loopback, link-local addresses (0) */
    const char *media_networks;      /* "CIDR,CIDR": private networks image URLs may reach anyway (NULL) */
    long long max_request_pixels;    /* a request's images, decoded, added up (0: 64 x the engine's
                                        max_image_pixels, iris.h; images are resized and refused by that one) */
    long long max_video_pixels;      /* a video's sampled frames together resized to at most this (0: the
                                        model's video_preprocessor_config.json, 25,165,824) */
    int image_workers;               /* requests decoding images at once (0: the cores, 2 to 16) */
    int image_queue;                 /* requests waiting for a decode slot before 503 (256) */
    double header_timeout_s;         /* a request's whole head must arrive within it (10 s) */
    double body_timeout_s;           /* the whole body must arrive within it, else 408 (30 s) */
    int max_connections;             /* simultaneous connections (1024) */
    int max_connections_per_client;  /* from one client address (256) */
    const char *allowed_origins;     /* "https://a.example,https://b.example" or "*": CORS; NULL: none */
} iris_server_opts;

typedef struct iris_server iris_server;

void iris_server_opts_default(iris_server_opts *o);
int iris_server_start(const iris_server_opts *o, iris_server **out, iris_err *err);
/* The port it listens on (the one chosen when opts.port was 0). */
int iris_server_port(const iris_server *s);
/* Ready: generation routes and /health answer from now on.  The engine
 * stays the caller's (close it after iris_server_stop). */
void iris_server_set_engine(iris_server *s, iris_engine *e);
/* Stop accepting connections and new requests, wait up to timeout_s for
 * the requests in flight, then cancel what is left.  Returns the number of
 * requests that had to be cancelled. */
int iris_server_drain(iris_server *s, double timeout_s);
/* Close every connection and free (NULL ok). */
void iris_server_stop(iris_server *s);

#endif
