/* server.h: `iris serve`, the OpenAI-compatible HTTP server.
 *
 * Threads: libmicrohttpd runs one thread per connection.  A connection
 * thread reads the body, parses and validates it (openai.c), fetches and
 * decodes the images and builds the prompt (engine/prompt.c), submits it to
 * the engine and then streams the engine's events back (generate.c).  The
 * engine thread owns the model; nothing here touches it except through
 * include/iris.h's request API.
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
    long long max_image_pixels;      /* refused before decoding (0: the decoder's default) */
    double body_timeout_s;           /* the whole body must arrive within it, else 408 (30 s) */
    int max_connections;             /* simultaneous connections (1024) */
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
