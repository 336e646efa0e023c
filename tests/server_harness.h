/* server_harness.h: what the `iris serve` tests share (test_server.c,
 * test_server_startup.c, test_server_load.c): the real binary started on a
 * free loopback port, a libcurl client, and the JSON / SSE readers that
 * turn an answer into its text.
 *
 * The binary is $IRIS_BIN (default build/iris); the model is the tiny
 * fixture (TS_MODEL) unless a test passes its own.  Every string returned is
 * malloc'd and freed by the caller.  Nothing here calls exit(). */
#ifndef IRIS_SERVER_HARNESS_H
#define IRIS_SERVER_HARNESS_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

#include "tiny_fixture.h"

#define TS_MODEL TINY_DIR "/tiny-gqa/model"
#define TS_IMG_A TINY_DIR "/images/a.png"
#define TS_IMG_B TINY_DIR "/images/b.png"

double ts_now(void);                 /* monotonic seconds */
void ts_nap_ms(int ms);
char *ts_slurp(const char *path, size_t *n); /* a whole file, NUL-terminated; NULL if unreadable */
const char *ts_bin(void);            /* $IRIS_BIN or build/iris */

/* ---- HTTP client ---- */

/* One request to 127.0.0.1:port.  Returns the status (0 on a transport
 * error); the body in *out when out is given (never NULL then). */
long ts_http(int port, const char *method, const char *path, const char *data, size_t n, const char *auth,
             char **out);
long ts_post(int port, const char *path, const char *json, char **out);
/* A response body that grows as libcurl delivers it (CURLOPT_WRITEFUNCTION ts_on_write,
 * CURLOPT_WRITEDATA a ts_body starting {0}): NUL-terminated, the caller frees p. */
typedef struct ts_body {
    char *p;
    size_t n;
} ts_body;
size_t ts_on_write(char *ptr, size_t size, size_t nmemb, void *ud);
/* A connected TCP socket to 127.0.0.1:port, or -1. */
int ts_connect(int port);
/* A port nothing listens on right now (bound, read, closed), or 0. */
int ts_free_port(void);

/* ---- the server process ---- */

typedef struct ts_server {
    pid_t pid;
    int port;
    char log[64];                    /* its stderr and stdout */
} ts_server;

/* `iris serve MODEL --port 0 --device cpu --kv-cache-bytes 64MiB
 * --served-model-name tiny EXTRA` (extra split by /bin/sh); waits for "ready
 * in" in its log.  0, or -1 with the log on stderr. */
int ts_server_start(ts_server *s, const char *extra);
int ts_server_start_model(ts_server *s, const char *model, const char *extra);
/* SIGTERM and wait (SIGKILL after 30 s); the exit status, -1 on a signal or
 * a timeout.  Removes the log. */
int ts_server_stop(ts_server *s);

/* The node tests (tests/node/): 0 when node and the npm package .cache/node/node_modules/<pkg> are
 * installed, else -1 with the reason (naming scripts/setup) in why. */
int ts_node_ready(const char *pkg, char *why, size_t cap);
/* `timeout T node tests/node/SCRIPT PORT tiny 2>&1`: its output (caller frees; NULL if it could
 * not start) and, in *rc, 0 when it exited 0. */
char *ts_node_run(const char *script, int port, int timeout_s, int *rc);
/* The body of a node client test: fails (naming scripts/setup) without node and pkg; else starts
 * the tiny model's server, runs SCRIPT against it and checks it exits 0 having printed PASS. */
void ts_node_client_test(const char *pkg, const char *script);
/* Wait for the process to end (up to timeout_s); the exit status, -1 on a
 * signal, -2 when it is still running. */
int ts_wait_exit(pid_t pid, double timeout_s);

/* ---- JSON and SSE ---- */

json_t *ts_json(const char *s);
/* Dotted paths with numeric parts as array indexes: "choices.0.message.content". */
const char *ts_jstr(json_t *o, const char *path);
/* The string at path with NUL bytes shown as 0x01 (generated text may hold U+0000), malloc'd, or NULL. */
char *ts_jtext(json_t *o, const char *path);
long long ts_jint(json_t *o, const char *path); /* -1 when absent */

/* A data: URL of a PNG file. */
char *ts_data_url(const char *path);
/* A chat body with an optional image URL and extra top-level members ("\"seed\":1,..."). */
char *ts_chat_body(const char *img_url, const char *text, const char *extra);
/* The content of a non-streamed chat answer, or NULL; *finish (optional) its finish_reason. */
char *ts_chat_text(int port, const char *req, long *status, char **finish);
/* Parse an SSE body: concatenated content (chat delta.content or text), the
 * finish_reason, the usage chunk's completion_tokens (-1 without one), and
 * whether it ended with [DONE].  Returns the number of data lines, -1 on a
 * malformed one. */
int ts_sse_parse(const char *s, char **text, char **finish, long long *usage_tokens, int *done);

/* CHECKs that status is `want` with an OpenAI error body (naming param when given). */
void ts_check_error(long status, const char *out, long want, const char *param, const char *what);
/* CHECKs that /health answers 200. */
void ts_check_alive(int port, const char *after);

#endif
