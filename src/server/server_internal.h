/* server_internal.h: what the server's files share (http.c, generate.c):
 * the server struct, a connection's request state and a generation's
 * state.  Not for use outside src/server/. */
#ifndef IRIS_SERVER_INTERNAL_H
#define IRIS_SERVER_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "iris.h"
#include "engine/prompt.h"
#include "server/media.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/reasoning.h"
#include "server/server.h"

/* One generation: the engine request and what streaming it back needs.
 * Streamed ones outlive the access handler (MHD owns them through the
 * response until its free callback). */
typedef struct srv_gen {
    struct srv_gen *prev, *next;       /* the server's list, under mu */
    struct iris_server *s;
    iris_request *r;
    int fd;                            /* the client's socket, to notice a disconnect */
    iris_oai_kind kind;
    char id[48];
    int64_t created;
    int logprobs, top_logprobs, include_usage;
    char *out;                         /* SSE bytes produced, not yet handed to MHD */
    size_t out_n, out_off, out_cap;
    int phase;                         /* 0 role chunk due, 1 streaming, 2 [DONE] queued, 3 ended */
    size_t text_off;                   /* completions logprobs text_offset */
    double t_submit, t_last, t_check;  /* t_check: the last look at the client's socket */
    int n_tokens;
    struct iris_tool_parser *tools;    /* the <tool_call> parser when calls are parsed (tool_calls.h), else NULL */
    iris_reasoning rs;                 /* Thinking models: reasoning_content split off (reasoning.h) */
} srv_gen;

/* One client socket, from accept to close (MHD's connection notices), for
 * the watchdog that enforces the head and body deadlines. */
typedef struct srv_sock {
    struct srv_sock *prev, *next;      /* the server's list, under sock_mu */
    int fd;
    double t0;                         /* accept, or when the phase began (see http.c's sock_phase) */
    int phase;                         /* 0 first head arriving, 1 body arriving, 2 being answered, 3 kept alive */
    int cut;                           /* the watchdog shut it down */
} srv_sock;

struct iris_server {
    iris_server_opts o;
    char *host, *api_key, *served, *model_arg, *media_dir; /* owned copies of the opts' strings */
    char *origins, *networks;
    struct MHD_Daemon *d;
    int port;
    _Atomic(iris_engine *) eng;        /* NULL while loading */
    atomic_int draining;
    iris_metrics *metrics;
    iris_media_opts media;
    int64_t started;                   /* unix time, for /v1/models "created" */
    atomic_uint_fast64_t next_id;
    uint64_t id_salt;

    pthread_mutex_t mu;                /* guards inflight and the generation list */
    pthread_cond_t cv;                 /* signalled when inflight drops */
    int inflight;                      /* requests being handled, from headers to completion */
    srv_gen *gens;                     /* generations with an engine request, for cancellation */

    pthread_mutex_t gate_mu;           /* the decode slots (generate.c) */
    pthread_cond_t gate_cv;
    int gate_busy, gate_waiting;

    pthread_mutex_t sock_mu;           /* the client sockets and the watchdog */
    pthread_cond_t sock_cv;
    srv_sock *socks;
    pthread_t watchdog;
    int watchdog_on, watchdog_stop;
};

/* A connection's current request. */
typedef struct srv_conn {
    iris_server *s;
    int route;
    const char *endpoint;              /* metrics label */
    char *body;
    size_t n, cap;
    double t0;                         /* headers received (monotonic seconds) */
    int status;                        /* the status queued, for metrics */
    int answered;                      /* a response was queued before the body ended */
    srv_sock *sock;                    /* its socket's record (NULL if MHD gave none) */
    char origin[256];                  /* the Origin to allow (CORS), "" for none */
} srv_conn;

/* One image of a request: its bytes and a label for messages. */
typedef struct srv_image {
    uint8_t *data;
    size_t n;
    char label[64];
} srv_image;

double srv_now(void);
/* Queue an OpenAI error body with e->status (and "Connection: close" when
 * `close`). */
enum MHD_Result srv_reply_error(struct MHD_Connection *c, srv_conn *cc, const iris_oai_err *e, int close);
enum MHD_Result srv_reply_json(struct MHD_Connection *c, srv_conn *cc, int status, json_t *j);
/* The CORS headers of cc's origin, when it is allowed. */
void srv_add_cors(struct MHD_Response *r, const srv_conn *cc);
/* Whether the client of socket fd has closed it (a non-blocking peek). */
int srv_client_gone(int fd);

void srv_gen_register(iris_server *s, srv_gen *g);
void srv_gen_unregister(iris_server *s, srv_gen *g);

/* POST /v1/chat/completions and /v1/completions with the whole body read. */
enum MHD_Result srv_generate(struct MHD_Connection *c, srv_conn *cc, iris_oai_kind kind);

#endif
