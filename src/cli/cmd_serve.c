/* cmd_serve.c: `iris serve MODEL`: the OpenAI-compatible HTTP server
 * (src/server/server.h) in front of the engine (include/iris.h).
 *
 * Order of events: listen first (so /health answers 503 while the model
 * loads and a load balancer can tell "starting" from "down"), open the
 * engine, mark the server ready, then wait for SIGTERM or SIGINT.  On the
 * signal: stop accepting, let the requests in flight finish within
 * --shutdown-timeout (what is left is cancelled), stop the engine, exit 0.
 * Exit 1 when the model does not load or the port cannot be bound, 2 on bad
 * usage.
 *
 * SIGTERM is an orderly exit 0 from the first instruction of ours on,
 * start-up included: the handler is installed from .preinit_array (below),
 * before the shared libraries' constructors run (OpenBLAS's thread pool;
 * the CUDA libraries are loaded later, with the CUDA backend:
 * backend/cuda/cuda_loader.c), so a SIGTERM sent before main() does not
 * kill the server with the default action (exit status 143).  A signal that
 * arrives while the model loads is acted on once iris_engine_open returns (it
 * cannot be interrupted): the server then exits without ever becoming ready.
 * What is left to the kernel's default action is the dynamic loader's
 * mapping and relocating of the libraries before any code of ours can run: a
 * few ms.
 *
 * Flags: the server's own rows in server_table (opts.h: one row a flag,
 * its kind checks the value), the engine's from engine_flags.h.
 */
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "default_model.h"
#include "engine_flags.h"
#include "formats/video.h"
#include "err.h"
#include "log.h"
#include "opts.h"
#include "server/server.h"

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) {
    stop_signal = sig;
}

/* SIGTERM and SIGINT set stop_signal; SIGPIPE is ignored so a client closing
 * mid-write is an error code, not death.  SA_RESTART: the libraries whose
 * constructors may be interrupted (see the header) do not expect EINTR;
 * the wait loop below uses nanosleep, which a handled signal always
 * interrupts. */
static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* glibc calls the executable's .preinit_array functions with (argc, argv,
 * envp) after relocation and before any constructor of any shared library.
 * Only `iris serve` changes its signals; the other commands keep the default
 * (SIGTERM ends them at once).  argv[1] is compared by hand: nothing here
 * may rely on a library being initialised. */
static void preinit_serve(int argc, char **argv, char **envp) {
    (void)envp;
    static const char serve[] = "serve";
    if (argc < 2 || !argv || !argv[1]) return;
    for (size_t i = 0; i < sizeof serve; i++)
        if (argv[1][i] != serve[i]) return;
    install_signals();
}
__attribute__((section(".preinit_array"), used)) static void (*const preinit_serve_ptr)(int, char **, char **) =
    preinit_serve;

typedef struct serve_args {
    iris_server_opts so;
    iris_engine_opts eo;
    double shutdown_timeout, body_timeout, image_timeout, header_timeout;
    long long port, max_conns, max_conns_client, max_request_pixels, image_workers, image_queue, max_video_pixels;
    int seen_video_pixels;
    int seen_header, seen_conns, seen_conns_client, seen_request_pixels, seen_workers, seen_queue;
    uint64_t max_body_bytes, max_image_bytes;
    int no_remote_images, seen_body, seen_image_timeout, seen_port, seen_body_bytes, seen_image_bytes;
    const char *model;
    iris_cli_engine ce;
    iris_opt own[32];
} serve_args;

#define OPT(n, k, d, a, h, l, u, s) \
    (iris_opt) { n, 0, k, d, a, h, l, u, NULL, s, 0 }

/* The server's own rows (the engine's are engine_flags.h's).  A flag of the server is one row
 * here: name, kind (how its value is checked), where it goes, its help. */
static const iris_opt *server_table(serve_args *s) {
    iris_server_opts *so = &s->so;
    iris_opt *t = s->own;
    int n = 0;
    t[n++] = (iris_opt)IRIS_OPT_HEADING("the server");
    t[n++] = (iris_opt){"--model", 'm', IRIS_OPT_STR, &s->model, "MODEL", "the model (or give MODEL)", 0, 0, NULL, NULL, 0};
    t[n++] = OPT("--host", IRIS_OPT_STR, &so->host, "ADDR", "address to listen on (default 127.0.0.1; 0.0.0.0 for all)", 0,
                 0, NULL);
    t[n++] = OPT("--port", IRIS_OPT_INT, &s->port, "N", "(default 8000; 0 picks a free port, printed at start)", 0,
                 65535, &s->seen_port);
    t[n++] = OPT("--api-key", IRIS_OPT_STR, &so->api_key, "KEY",
                 "require 'Authorization: Bearer KEY' on /v1/* (default $IRIS_API_KEY;\nnone when both are unset)", 0,
                 0, NULL);
    t[n++] = OPT("--served-model-name", IRIS_OPT_STR, &so->served_model_name, "NAME",
                 "the model id clients send and /v1/models lists (default: MODEL)", 0, 0, NULL);
    t[n++] = OPT("--max-body-bytes", IRIS_OPT_SIZE, &s->max_body_bytes, "SIZE",
                 "larger request bodies get 413 (default 32MiB)", 1, 0, &s->seen_body_bytes);
    t[n++] = OPT("--body-timeout", IRIS_OPT_NUM, &s->body_timeout, "S",
                 "a body must arrive within S seconds, else 408 (default 30)", 0.1, 86400, &s->seen_body);
    t[n++] = OPT("--header-timeout", IRIS_OPT_NUM, &s->header_timeout, "S",
                 "a request's head must arrive within S seconds, else the connection\nis closed (default 10)", 0.1,
                 86400, &s->seen_header);
    t[n++] = OPT("--max-connections", IRIS_OPT_INT, &s->max_conns, "N", "open connections at once (default 1024)", 1,
                 1 << 20, &s->seen_conns);
    t[n++] = OPT("--max-connections-per-client", IRIS_OPT_INT, &s->max_conns_client, "N",
                 "from one client address (default 256)", 1, 1 << 20, &s->seen_conns_client);
    t[n++] = OPT("--allowed-origins", IRIS_OPT_STR, &so->allowed_origins, "LIST",
                 "origins (https://a.example,...; * for any) whose web pages may call\nthe API (CORS); default none. "
                 " POST bodies must be\nContent-Type: application/json (else 415)", 0, 0, NULL);
    t[n++] = OPT("--allow-private-media-urls", IRIS_OPT_FLAG, &so->allow_private_media, NULL,
                 "let http(s) image URLs reach private, loopback and link-local\naddresses (refused by default, after "
                 "every redirect too)", 0, 0, NULL);
    t[n++] = OPT("--allowed-media-networks", IRIS_OPT_STR, &so->media_networks, "LIST",
                 "private networks image URLs may reach anyway (10.1.0.0/16,...)", 0, 0, NULL);
    t[n++] = OPT("--max-request-pixels", IRIS_OPT_INT, &s->max_request_pixels, "N",
                 "a request's images together, as decoded (default 64 x\n--max-image-pixels); refused before decoding",
                 1, 1e12, &s->seen_request_pixels);
    t[n++] = OPT("--max-video-pixels", IRIS_OPT_INT, &s->max_video_pixels, "N",
                 "a video's sampled frames together are resized to at most N pixels\n(default: the model's, 25,165,824; "
                 "each frame also within\n--max-image-pixels)", 4096, 1e12, &s->seen_video_pixels);
    t[n++] = OPT("--image-workers", IRIS_OPT_INT, &s->image_workers, "N",
                 "requests decoding images at once (default: the cores, 2-16)", 1, 256, &s->seen_workers);
    t[n++] = OPT("--image-queue", IRIS_OPT_INT, &s->image_queue, "N",
                 "requests waiting to decode before 503 (default 256)", 0, 1 << 20, &s->seen_queue);
    t[n++] = OPT("--no-remote-images", IRIS_OPT_FLAG, &s->no_remote_images, NULL,
                 "refuse http(s) image URLs (data: URLs always work)", 0, 0, NULL);
    t[n++] = OPT("--max-image-bytes", IRIS_OPT_SIZE, &s->max_image_bytes, "SIZE",
                 "largest image file accepted (default 20MiB)", 1, 0, &s->seen_image_bytes);
    t[n++] = OPT("--image-timeout", IRIS_OPT_NUM, &s->image_timeout, "S",
                 "an http(s) image's whole download (default 10)", 0.1, 3600, &s->seen_image_timeout);
    t[n++] = OPT("--allowed-local-media-path", IRIS_OPT_STR, &so->local_media_dir, "DIR",
                 "allow file:// image URLs inside DIR", 0, 0, NULL);
    t[n++] = OPT("--shutdown-timeout", IRIS_OPT_NUM, &s->shutdown_timeout, "S",
                 "on SIGTERM/SIGINT, wait S seconds for requests in flight before\ncancelling them (default 30)", 0,
                 86400, NULL);
    t[n] = (iris_opt)IRIS_OPT_TABLE_END;
    return t;
}

/* The command line into s: -1 to serve, else the exit status (0 for --help, 2 bad usage). */
static int parse(int argc, char **argv, serve_args *s) {
    iris_cli_spec sp = {
        .cmd = "serve",
        .usage = "[MODEL] [options]",
        .about = "An OpenAI-compatible API for MODEL (a directory or Org/Name[@revision], downloaded into\n"
                 "the Hugging Face cache on first use unless --offline; default: the demo model):\n"
                 "POST /v1/chat/completions (text, image_url and video_url parts, streaming), POST /v1/completions,\n"
                 "GET /v1/models, GET /health (503 until loaded), GET /metrics.",
        .footer = "SIZE is bytes or a number with a unit (512MiB, 1GiB, 20MB).\n" IRIS_VIDEO_HELP_LINE,
        .max_pos = 1,
    };
    sp.tables[0] = server_table(s);
    iris_opt *eng = iris_cli_engine_flags(&s->ce, ~0u);
    iris_opt *px = iris_opt_find(eng, "--max-image-pixels");
    if (px)
        px->help = "images are resized down to at most N pixels, on the CPU as on a\nGPU, whose memory plan is sized "
                   "for N (default 1048576); images\nover 32 x N pixels are refused before decoding";
    sp.tables[1] = eng;
    const char *pos[1];
    int n_pos, rc = iris_cli_parse(&sp, argc, argv, pos, &n_pos);
    if (rc >= 0) return rc;
    if (n_pos && s->model) return iris_cli_usage_error("serve", "one MODEL only ('%s' and '%s')", s->model, pos[0]);
    if (n_pos) s->model = pos[0];
    if (!s->model && !(s->model = iris_default_model_dir()))   /* the demo model by default */
        return iris_cli_usage_error("serve", "give MODEL (no demo model found beside the executable)");
    iris_server_opts *so = &s->so;
    if (s->seen_port) so->port = (int)s->port;
    if (s->seen_body_bytes) so->max_body_bytes = (size_t)s->max_body_bytes;
    if (s->seen_body) so->body_timeout_s = s->body_timeout;
    if (s->no_remote_images) so->allow_remote_images = 0;
    if (s->seen_image_bytes) so->max_image_bytes = (size_t)s->max_image_bytes;
    if (s->seen_image_timeout) so->image_timeout_ms = (long)(s->image_timeout * 1000);
    if (s->seen_header) so->header_timeout_s = s->header_timeout;
    if (s->seen_conns) so->max_connections = (int)s->max_conns;
    if (s->seen_conns_client) so->max_connections_per_client = (int)s->max_conns_client;
    if (s->seen_request_pixels) so->max_request_pixels = s->max_request_pixels;
    if (s->seen_video_pixels) so->max_video_pixels = s->max_video_pixels;
    if (s->seen_workers) so->image_workers = (int)s->image_workers;
    if (s->seen_queue) so->image_queue = (int)s->image_queue;
    iris_cli_engine_apply(&s->ce, &s->eo);
    s->eo.model = s->model;
    s->eo.host_warm = -1; /* as many clients at once as it runs sequences */
    so->model_arg = s->model;
    if (!so->served_model_name) so->served_model_name = s->model;
    return -1;
}

/* Listen, load, serve until a signal, drain. */
static int serve(const serve_args *s) {
    const iris_server_opts *so = &s->so;
    iris_err err = {0};
    iris_server *srv = NULL;
    if (iris_server_start(so, &srv, &err)) {
        curl_global_cleanup();
        return iris_cli_fail(&err);
    }
    fprintf(stderr, "iris serve: listening on http://%s:%d (loading %s)\n", so->host, iris_server_port(srv), s->model);
    fflush(stderr);

    iris_engine *eng = NULL;
    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    if (iris_engine_open(&s->eo, &eng, &err)) {
        iris_server_stop(srv);
        curl_global_cleanup();
        return iris_cli_fail(&err);
    }
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    if (!stop_signal) { /* a signal during the load: never become ready */
        iris_server_set_engine(srv, eng);
        fprintf(stderr, "iris serve: ready in %.2f s: model \"%s\"%s\n",
                (double)(ts1.tv_sec - ts0.tv_sec) + (ts1.tv_nsec - ts0.tv_nsec) * 1e-9, so->served_model_name,
                so->api_key && *so->api_key ? ", API key required" : "");
        fflush(stderr);
    }

    while (!stop_signal) {
        struct timespec nap = {0, 100 * 1000000L};
        nanosleep(&nap, NULL);
    }
    fprintf(stderr, "iris serve: %s: draining (up to %.0f s)\n", stop_signal == SIGINT ? "SIGINT" : "SIGTERM",
            s->shutdown_timeout);
    fflush(stderr);
    int left = iris_server_drain(srv, s->shutdown_timeout);
    if (left)
        fprintf(stderr, "iris serve: cancelled %d request(s) still running after %.0f s\n", left, s->shutdown_timeout);
    iris_engine_shutdown(eng);
    iris_server_stop(srv);
    iris_engine_close(eng);
    curl_global_cleanup();
    fprintf(stderr, "iris serve: stopped\n");
    return 0;
}

int iris_cmd_serve(int argc, char **argv) {
    serve_args s;
    memset(&s, 0, sizeof s);
    iris_server_opts_default(&s.so);
    iris_engine_opts_default(&s.eo);
    s.so.api_key = getenv("IRIS_API_KEY");
    s.shutdown_timeout = 30;
    int rc = parse(argc, argv, &s);
    if (rc >= 0) return rc;

    /* Again (already done from .preinit_array where glibc runs it), before
     * any thread of ours exists; then libcurl's global state. */
    install_signals();
    if (stop_signal) {
        fprintf(stderr, "iris serve: %s before start-up: stopped\n", stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
        return 0;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return serve(&s);
}
