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
 * before the shared libraries' constructors run.  Those take ~0.35 s on a
 * CUDA build (cuBLASLt's and cudart's initialisers, OpenBLAS's thread pool),
 * and a SIGTERM sent then, before main(), used to kill the server with the
 * default action (exit status 143).  A signal that arrives while the model
 * loads is acted on once iris_engine_open returns (it cannot be
 * interrupted): the server then exits without ever becoming ready.  What is
 * left to the kernel's default action is the dynamic loader's mapping and
 * relocating of the libraries before any code of ours can run: a few ms on
 * a CPU build, ~0.13 s with cuBLASLt linked (loading the CUDA libraries with
 * dlopen when the CUDA backend opens would remove that).
 */
#include <curl/curl.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "default_model.h"
#include "engine/planner.h"
#include "err.h"
#include "log.h"
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

static void usage(FILE *f) {
    fprintf(f,
            "usage: iris serve MODEL [options]\n\n"
            "An OpenAI-compatible API for MODEL (a directory or Org/Name[@revision] in the Hugging\n"
            "Face cache): POST /v1/chat/completions (text and image_url parts, streaming),\n"
            "POST /v1/completions, GET /v1/models, GET /health (503 until loaded), GET /metrics.\n\n"
            "the server:\n"
            "  --host ADDR                   address to listen on (default 127.0.0.1; 0.0.0.0 for all)\n"
            "  --port N                      (default 8000; 0 picks a free port, printed at start)\n"
            "  --api-key KEY                 require 'Authorization: Bearer KEY' on /v1/* (default\n"
            "                                $IRIS_API_KEY; none when both are unset)\n"
            "  --served-model-name NAME      the model id clients send and /v1/models lists\n"
            "                                (default: MODEL as given)\n"
            "  --max-body-bytes SIZE         larger request bodies get 413 (default 32MiB)\n"
            "  --header-timeout S            a request's head must arrive within S seconds, else the\n"
            "                                connection is closed (default 10)\n"
            "  --body-timeout S              a body must arrive within S seconds, else 408 (default 30)\n"
            "  --max-connections N           open connections at once (default 1024)\n"
            "  --max-connections-per-client N  from one client address (default 256)\n"
            "  --allowed-origins LIST        origins (https://a.example,...; * for any) whose web pages\n"
            "                                may call the API (CORS); default none.  POST bodies must be\n"
            "                                Content-Type: application/json (else 415)\n"
            "  --no-remote-images            refuse http(s) image URLs (data: URLs always work)\n"
            "  --allow-private-media-urls    let http(s) image URLs reach private, loopback and link-local\n"
            "                                addresses (refused by default, after every redirect too)\n"
            "  --allowed-media-networks LIST private networks image URLs may reach anyway (10.1.0.0/16,...)\n"
            "  --max-image-bytes SIZE        largest image file accepted (default 20MiB)\n"
            "  --image-timeout S             an http(s) image's whole download (default 10)\n"
            "  --max-image-pixels N          images are resized down to at most N pixels, on the CPU as on\n"
            "                                a GPU, whose memory plan is sized for N (default 1048576);\n"
            "                                images over 32 x N pixels are refused before decoding\n"
            "  --max-request-pixels N        a request's images together, as decoded (default 64 x the\n"
            "                                above); refused before decoding\n"
            "  --image-workers N             requests decoding images at once (default: the cores, 2-16)\n"
            "  --image-queue N               requests waiting to decode before 503 (default 256)\n"
            "  --dense-weights auto|on|off   FP8 models: BF16 copies of the decoder linears for prefill and\n"
            "                                large batches (default auto: when they take at most 10%% of the\n"
            "                                GPU memory budget and the plan still fits)\n"
            "  --kv-cache-dtype bf16|fp8     the KV cache's element type (default bf16; fp8 halves it,\n"
            "                                e4m3 codes with scale 1 as vLLM's uncalibrated fp8 cache)\n"
            "  --allowed-local-media-path DIR  allow file:// image URLs inside DIR\n"
            "  --shutdown-timeout S          on SIGTERM/SIGINT, wait S seconds for requests in\n"
            "                                flight before cancelling them (default 30)\n"
            "the engine:\n"
            "  --device cpu|cuda|auto        (default auto: cuda when there is a GPU)\n"
            "  --gpu-memory-limit SIZE       CUDA: a hard cap on the process's GPU memory\n"
            "  --gpu-memory-utilization F    CUDA: a fraction of the GPU's memory\n"
            "  --gpu-memory-margin SIZE      CUDA: else the free memory less SIZE (default 512MiB)\n"
            "  --max-model-len N             prompt + generated tokens per request (default: the model's)\n"
            "  --max-num-seqs N              sequences running at once (default 64)\n"
            "  --max-batch-tokens N          tokens per engine step (default 2048)\n"
            "  --max-waiting N               queued requests before 503 (default 256)\n"
            "  --kv-cache-bytes SIZE         CPU: host memory for the KV cache (default 1GiB)\n"
            "  --no-prefix-caching           do not share KV blocks between requests\n"
            "  --download                    fetch a repo id missing from the HF cache\n\n"
            "SIZE is bytes or a number with a unit (512MiB, 1GiB, 20MB).\n");
}

static int num(const char *opt, const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || !*v || *end || errno || !(x >= lo && x <= hi)) {
        fprintf(stderr, "iris serve: %s '%s': give a number from %g to %g\n", opt, v ? v : "", lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int size(const char *opt, const char *v, size_t *out) {
    iris_err err = {0};
    uint64_t b = 0;
    if (!v || iris_plan_parse_bytes(v, &b, &err) || b == 0) {
        fprintf(stderr, "iris serve: %s '%s': %s\n", opt, v ? v : "", v && err.msg[0] ? err.msg : "give a size");
        return -1;
    }
    *out = (size_t)b;
    return 0;
}

typedef struct serve_args {
    iris_server_opts so;
    iris_engine_opts eo;
    double shutdown_timeout;
    const char *model;
} serve_args;

/* Option a (its value v) when it is the server's: 0 done, -1 a bad value (said), 1 not the
 * server's.  *takes 0: a flag without a value. */
static int server_option(serve_args *s, const char *a, const char *v, int *takes) {
    iris_server_opts *so = &s->so;
    double x = 0;
    int bad = 0;
    if (!strcmp(a, "--host")) {
        so->host = v;
    } else if (!strcmp(a, "--port")) {
        bad = num(a, v, 0, 65535, &x);
        so->port = (int)x;
    } else if (!strcmp(a, "--api-key")) {
        so->api_key = v;
    } else if (!strcmp(a, "--served-model-name")) {
        so->served_model_name = v;
    } else if (!strcmp(a, "--max-body-bytes")) {
        bad = size(a, v, &so->max_body_bytes);
    } else if (!strcmp(a, "--body-timeout")) {
        bad = num(a, v, 0.1, 86400, &so->body_timeout_s);
    } else if (!strcmp(a, "--header-timeout")) {
        bad = num(a, v, 0.1, 86400, &so->header_timeout_s);
    } else if (!strcmp(a, "--max-connections")) {
        bad = num(a, v, 1, 1 << 20, &x);
        so->max_connections = (int)x;
    } else if (!strcmp(a, "--max-connections-per-client")) {
        bad = num(a, v, 1, 1 << 20, &x);
        so->max_connections_per_client = (int)x;
    } else if (!strcmp(a, "--allowed-origins")) {
        so->allowed_origins = v;
    } else if (!strcmp(a, "--allow-private-media-urls")) {
        so->allow_private_media = 1, *takes = 0;
    } else if (!strcmp(a, "--allowed-media-networks")) {
        so->media_networks = v;
    } else if (!strcmp(a, "--max-request-pixels")) {
        bad = num(a, v, 1, 1e12, &x);
        so->max_request_pixels = (long long)x;
    } else if (!strcmp(a, "--image-workers")) {
        bad = num(a, v, 1, 256, &x);
        so->image_workers = (int)x;
    } else if (!strcmp(a, "--image-queue")) {
        bad = num(a, v, 0, 1 << 20, &x);
        so->image_queue = (int)x;
    } else if (!strcmp(a, "--no-remote-images")) {
        so->allow_remote_images = 0, *takes = 0;
    } else if (!strcmp(a, "--max-image-bytes")) {
        bad = size(a, v, &so->max_image_bytes);
    } else if (!strcmp(a, "--image-timeout")) {
        bad = num(a, v, 0.1, 3600, &x);
        so->image_timeout_ms = (long)(x * 1000);
    } else if (!strcmp(a, "--max-image-pixels")) {
        bad = num(a, v, 1, 1e12, &x);
        so->max_image_pixels = (long long)x;
        s->eo.max_image_pixels = (long long)x;
    } else if (!strcmp(a, "--allowed-local-media-path")) {
        so->local_media_dir = v;
    } else if (!strcmp(a, "--shutdown-timeout")) {
        bad = num(a, v, 0, 86400, &s->shutdown_timeout);
    } else {
        return 1;
    }
    return bad ? -1 : 0;
}

/* The same for the engine's options. */
static int engine_option(iris_engine_opts *eo, const char *a, const char *v, int *takes) {
    double x = 0;
    size_t gb = 0;
    int bad = 0;
    if (!strcmp(a, "--device")) {
        eo->device = v;
        if (v && strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "auto")) {
            fprintf(stderr, "iris serve: --device '%s': use cpu, cuda or auto\n", v);
            bad = 1;
        }
    } else if (!strcmp(a, "--gpu-memory-limit")) {
        bad = size(a, v, &gb);
        eo->gpu_memory_limit = gb;
    } else if (!strcmp(a, "--gpu-memory-margin")) {
        bad = size(a, v, &gb);
        eo->gpu_memory_margin = gb, eo->gpu_memory_margin_set = 1;
    } else if (!strcmp(a, "--gpu-memory-utilization")) {
        bad = num(a, v, 0.01, 1, &eo->gpu_memory_utilization);
    } else if (!strcmp(a, "--dense-weights")) {
        eo->dense_weights = v;
        if (v && iris_plan_dense_parse(v) < 0) {
            fprintf(stderr, "iris serve: --dense-weights '%s': give auto, on or off\n", v);
            bad = 1;
        }
    } else if (!strcmp(a, "--kv-cache-dtype")) {
        eo->kv_cache_dtype = v;
        if (v && iris_plan_kv_dtype_parse(v) < 0) {
            fprintf(stderr, "iris serve: --kv-cache-dtype '%s': give bf16 or fp8\n", v);
            bad = 1;
        }
    } else if (!strcmp(a, "--max-model-len")) {
        bad = num(a, v, 1, 1 << 24, &x);
        eo->max_model_len = (int)x;
    } else if (!strcmp(a, "--max-num-seqs")) {
        bad = num(a, v, 1, 1 << 16, &x);
        eo->max_num_seqs = (int)x;
    } else if (!strcmp(a, "--max-batch-tokens")) {
        bad = num(a, v, 1, 1 << 24, &x);
        eo->max_batch_tokens = (int)x;
    } else if (!strcmp(a, "--max-waiting")) {
        bad = num(a, v, 1, 1 << 20, &x);
        eo->max_waiting = (int)x;
    } else if (!strcmp(a, "--kv-cache-bytes")) {
        bad = size(a, v, &eo->kv_cache_bytes);
    } else if (!strcmp(a, "--no-prefix-caching")) {
        eo->prefix_caching = 0, *takes = 0;
    } else if (!strcmp(a, "--download")) {
        eo->allow_download = 1, *takes = 0;
    } else {
        return 1;
    }
    return bad ? -1 : 0;
}

/* The command line into s: -1 to serve, else the exit status (0 for --help, 2 bad usage). */
static int parse(int argc, char **argv, serve_args *s) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1, rc = 1;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (a[0] == '-') {
            rc = server_option(s, a, v, &takes);
            if (rc == 1) rc = engine_option(&s->eo, a, v, &takes);
            if (rc == 1) {
                fprintf(stderr, "iris serve: unknown option %s (see iris serve --help)\n", a);
                return 2;
            }
        } else if (!s->model) {
            s->model = a, takes = 0;
        } else {
            fprintf(stderr, "iris serve: one MODEL only ('%s' and '%s')\n", s->model, a);
            return 2;
        }
        if (takes && !v) {
            fprintf(stderr, "iris serve: %s needs a value\n", a);
            return 2;
        }
        if (rc < 0) return 2;
        i += takes;
    }
    if (!s->model && !(s->model = iris_default_model_dir())) {   /* the demo model by default */
        usage(stderr);
        return 2;
    }
    s->eo.model = s->model;
    s->so.model_arg = s->model;
    if (!s->so.served_model_name) s->so.served_model_name = s->model;
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
