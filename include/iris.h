/* iris.h: the public API of libiris.
 *
 * iris runs Qwen3-VL vision-language models on the CPU or one GPU.  This
 * header is the narrow surface for programs linking libiris: status codes,
 * the error value, logging, and the engine (requests, parameters, events);
 * internal modules keep their own headers under src/.
 */
#ifndef IRIS_H
#define IRIS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IRIS_VERSION "0.1.0"

/* Status codes: 0 is success, negative is failure. */
enum {
    IRIS_OK = 0,
    IRIS_EINVAL = -1,      /* a bad argument or setting */
    IRIS_ENOMEM = -2,      /* host allocation failed */
    IRIS_EIO = -3,         /* open/read/write/mmap failed */
    IRIS_EFORMAT = -4,     /* malformed file or input */
    IRIS_EUNSUPPORTED = -5,/* valid but not supported (model type, dtype, ...) */
    IRIS_ENOTFOUND = -6,   /* a file, tensor or model that is not there */
    IRIS_ELIMIT = -7,      /* over a configured or hard limit */
    IRIS_EDEVICE = -8,     /* the GPU failed */
    IRIS_ECANCELLED = -9,
};

/* The error value: fallible functions take `iris_err *err` last. */
typedef struct iris_err {
    int code;
    char msg[1024];
    char param[32];     /* the request parameter the error is about ("prompt", "max_tokens"), else ""; set by
                           iris_engine_submit for a request that does not fit the context */
} iris_err;

const char *iris_strerror(int code);

enum { IRIS_LOG_DEBUG = 0, IRIS_LOG_INFO = 1, IRIS_LOG_WARN = 2, IRIS_LOG_ERROR = 3 };
void iris_log_set_level(int level);


/* ==== engine ==================================================================================
 * The engine: one thread owns the model (text decoder + vision encoder), the
 * paged KV cache, the block pool and the scheduler.  Any thread submits
 * requests and reads their output through a per-request channel; any thread
 * may cancel.  Requests are batched continuously (decodes first, then prompt
 * chunks under a per-step token budget), share KV blocks through prefix
 * caching (token ids + image content hashes), and are preempted and
 * recomputed when blocks run out.  Sampling is per request and seeded, so a
 * request's output does not depend on what else runs beside it.
 *
 *     iris_engine_opts o; iris_engine_opts_default(&o); o.model = "Qwen/Qwen3-VL-2B-Instruct";
 *     iris_engine *e; iris_engine_open(&o, &e, &err);
 *     iris_request_params rp; iris_request_params_default(e, &rp);
 *     rp.messages_json = "[{\"role\":\"user\",\"content\":\"Hi\"}]"; rp.sampling.max_tokens = 64;
 *     iris_request *r; iris_engine_submit(e, &rp, &r, &err);
 *     iris_event ev; while (iris_request_next(r, &ev, -1) == IRIS_OK && ev.kind == IRIS_EVENT_DELTA) fwrite(ev.text, 1, ev.text_len, stdout);
 *     iris_request_free(r); iris_engine_close(e);
 * ============================================================================================ */

typedef struct iris_engine iris_engine;
typedef struct iris_request iris_request;
struct iris_prompt; /* src/engine/prompt.h: an already rendered, tokenized and preprocessed prompt */

typedef struct iris_engine_opts {
    const char *model;          /* a model directory or an HF repo id (Org/Name[@rev]) */
    int allow_download;         /* fetch a repo id missing from the HF cache (default 0) */
    const char *device;         /* "cpu", "cuda" or "auto" (NULL: auto: cuda when this build has it and a GPU is there) */
    int max_num_seqs;           /* sequences running at once (0: 64) */
    int max_batch_tokens;       /* tokens per step, decodes + prefill chunks (0: 2048 on the CPU; on a GPU the
                                   memory plan chooses 2048 to 8192, engine/planner.h) */
    int max_model_len;          /* prompt + generated tokens per request (0: the model's max) */
    int max_waiting;            /* bounded waiting queue; submit beyond it is IRIS_ELIMIT (0: 256) */
    int kv_blocks;              /* 16-token KV blocks (0: from kv_cache_bytes) */
    size_t kv_cache_bytes;      /* CPU: host memory for the KV cache when kv_blocks is 0 (0: 1 GiB) */
    int prefix_caching;         /* 1 (default): share full blocks between requests; 0: off */
    /* CUDA: the memory plan (src/engine/planner.h) sizes the one device allocation from these. */
    uint64_t gpu_memory_limit;      /* hard cap in bytes (0: unset) */
    double gpu_memory_utilization;  /* a fraction of the device's memory (0: unset) */
    uint64_t gpu_memory_margin;     /* kept free when neither is set (0 with margin_set 0: 512 MiB) */
    int gpu_memory_margin_set;
    long long max_image_pixels;     /* largest image after resizing (0: 1,048,576), for every caller of the engine's
                                       prompt context (CLI and server) and the memory plan; larger ones are resized down */
    const char *kv_cache_dtype;     /* "bf16" (NULL: the default) or "fp8": e4m3 codes, half the bytes (CPU and CUDA) */
    const char *dense_weights;      /* CUDA, FP8 checkpoints: "auto" (NULL), "on" or "off": BF16 copies of the decoder
                                       linears for prefill and large batches (planner.h iris_dense_mode) */
    int text_only;                  /* leave the vision tower off (no memory for it); requests with images are
                                       refused (IRIS_EUNSUPPORTED).  A model without one runs so anyway. */
    const char *embeddings;         /* "auto" (NULL), "device" or "host": the token-embedding table in host memory,
                                       each step's rows uploaded (planner.h iris_embed_mode; auto: small cards) */
    const char *lm_head_dtype;      /* "auto" (NULL), "stored" or "fp8": the lm_head quantized to block FP8 at load
                                       (planner.h iris_lm_head_mode; auto: when the context needs it) */
    int vision_worker;              /* a second vision encoder on its own thread (CUDA: and stream) that encodes the
                                       images of requests waiting for their prefill while the steps run: 0 auto (CUDA:
                                       the memory plan, planner.h iris_worker_mode; the CPU: off), 1 on (the CPU too),
                                       2 off */
    int host_warm;                  /* CUDA: page-locked host buffers for this many requests' images taken at open
                                       (their bf16 pixel rows and encoder rows; 0: as requests need them; -1:
                                       max_num_seqs requests).  A server
                                       or a run over many images gives its concurrency: taken mid-run, each costs
                                       ms of the driver's time, during which the GPU waits (engine.c warm_host) */
} iris_engine_opts;

void iris_engine_opts_default(iris_engine_opts *o);
/* Loads the model, starts the engine thread.  Free with iris_engine_close. */
int iris_engine_open(const iris_engine_opts *o, iris_engine **out, iris_err *err);
/* Stops accepting requests (submit returns IRIS_ECANCELLED), lets the
 * requests in flight finish, then returns; iris_engine_close calls it. */
void iris_engine_shutdown(iris_engine *e);
/* Shutdown, join the thread, free the model.  Requests not yet freed by
 * their callers stay valid (their channel holds the final event). */
void iris_engine_close(iris_engine *e);

typedef struct iris_model_info {
    char dir[4096];             /* the resolved model directory */
    int vocab_size, max_model_len, kv_blocks, n_layers, hidden_size;
    int image_token_id;
    int max_num_seqs, max_batch_tokens;   /* the scheduler's sizes, as given or chosen */
} iris_model_info;
void iris_engine_model_info(const iris_engine *e, iris_model_info *out);

/* ---- requests ---- */
#define IRIS_MAX_STOP 16
#define IRIS_MAX_LOGPROBS 20

typedef enum iris_finish_reason {
    IRIS_FINISH_REASON_NONE = 0,
    IRIS_FINISH_REASON_STOP,       /* a stop token or stop string */
    IRIS_FINISH_REASON_LENGTH,     /* max_tokens or the context */
    IRIS_FINISH_REASON_CANCELLED,  /* iris_request_cancel, or engine shutdown before it started */
    IRIS_FINISH_REASON_ERROR,      /* see the event's err */
} iris_finish_reason;
const char *iris_finish_reason_name(int reason); /* "stop", "length", "cancelled", "error" */

typedef struct iris_event iris_event;
/* Called on the engine thread for every event; must not block (copy and
 * return).  ev and its text are valid during the call only. */
typedef void (*iris_event_fn)(void *ud, const iris_event *ev);

/* How a request picks its tokens and when it stops: one struct from the OpenAI request or the
 * command line's flags to the sampler (src/model/sampler.h holds the order of operations).
 * iris_request_params_default fills the model's generation_config.json values. */
typedef struct iris_sampling {
    int do_sample;                         /* 0: greedy */
    float temperature;                     /* 0: greedy */
    float top_p;                           /* >= 1: off */
    float min_p;                           /* <= 0: off */
    int top_k;                             /* <= 0: off */
    float repetition_penalty;              /* 1: off */
    float presence_penalty, frequency_penalty; /* 0: off; [-2, 2] */
    int64_t seed;                          /* < 0: from the clock */
    int max_tokens;                        /* 0: up to the context */
    const char *stop[IRIS_MAX_STOP];       /* stop strings (copied at submit) */
    int n_stop;
    int ignore_eos;                        /* 1: the model's end tokens do not stop */
    int logprobs;                          /* 1: each delta carries its token's logprob */
    int top_logprobs;                      /* 0..IRIS_MAX_LOGPROBS alternatives per token */
    const char *json_schema;               /* NULL, or a JSON Schema (text) the output must follow:
                                            * compiled at submit (an unsupported keyword is
                                            * IRIS_EINVAL naming it); {"type":"object"}: any object */
    const char *tools_json;                /* NULL, or an OpenAI tools array (JSON text): tool calls in
                                            * Qwen3's <tool_call> format are constrained to these tools
                                            * and their parameters (not with json_schema) */
    int tools_required;                    /* with tools_json: 0 (auto) text, or calls once "<tool_call>"
                                            * appears; 1 calls only (tool_choice "required") */
    const char *tool_name;                 /* with tools_json: NULL, or calls of this tool only */
    int single_tool_call;                  /* 1: at most one call (OpenAI's parallel_tool_calls false) */
} iris_sampling;

typedef struct iris_request_params {
    /* The prompt: exactly one of the three. */
    const char *messages_json;             /* OpenAI-style messages (a JSON array); image parts are */
    const char *const *image_paths;        /*   the files in image_paths, in order of appearance */
    int n_images;
    const char *prompt_text;               /* a plain text prompt, tokenized as is (no chat template) */
    struct iris_prompt *prompt;            /* built by the caller; the engine takes it over on success */
    int no_thinking;                       /* a chat prompt's enable_thinking=False (plain Qwen3's template):
                                            * messages_json is built so, a caller's prompt must have been;
                                            * a model that thinks for this prompt (iris_engine_reasoning)
                                            * starts a json_schema or tools grammar after its "</think>" */

    iris_sampling sampling;

    /* Output: events go to `on_event` when set (on the engine thread), else
     * to the request's queue read with iris_request_next. */
    iris_event_fn on_event;
    void *ud;
} iris_request_params;

void iris_request_params_default(const iris_engine *e, iris_request_params *p);

typedef struct iris_usage {
    int prompt_tokens;
    int completion_tokens;
    int cached_tokens;          /* prompt tokens taken from the prefix cache, not computed */
    double ttft_s;              /* submit to first token */
    double total_s;             /* submit to finish */
} iris_usage;

enum { IRIS_EVENT_DELTA = 1, IRIS_EVENT_DONE = 2 };

struct iris_event {
    int kind;                   /* IRIS_EVENT_DELTA, then one IRIS_EVENT_DONE */
    /* DELTA: one generated token and the text it completes (possibly empty:
     * a partial UTF-8 sequence or a held-back prefix of a stop string). */
    int token;
    const char *text;           /* NUL-terminated; valid until the next event of this request */
    size_t text_len;
    float logprob;              /* when params.logprobs */
    int n_top;
    int top_ids[IRIS_MAX_LOGPROBS];
    float top_logprobs[IRIS_MAX_LOGPROBS];
    /* DONE: why, and the counts (text may hold the last released text). */
    int finish_reason;          /* iris_finish_reason */
    iris_usage usage;
    iris_err err;               /* IRIS_FINISH_REASON_ERROR: what failed */
};

/* Validates the parameters and the prompt (on the caller's thread: chat
 * template, tokenization and image preprocessing happen here) and queues
 * the request.  This is the one context-length check of iris: IRIS_EINVAL
 * with err->param "prompt" for a prompt that cannot fit the context or the
 * KV cache, "max_tokens" for max_tokens beyond the context (the server's
 * 400, with this message).  IRIS_ELIMIT when the waiting queue is full (the
 * server's 503) or an image is over what the memory plan admits; IRIS_EINVAL
 * for a bad parameter (named); errors of the prompt's images as the image decoder
 * reports them; IRIS_ECANCELLED after shutdown.  On success *out is the
 * caller's handle: free it with iris_request_free.  A prompt given in
 * params.prompt belongs to the engine once its checks start (the caller's
 * struct is zeroed; iris_prompt_free on it is then harmless). */
int iris_engine_submit(iris_engine *e, const iris_request_params *p, iris_request **out, iris_err *err);
/* The next event, blocking up to timeout_ms (< 0: forever).  Returns IRIS_OK
 * with *ev filled, IRIS_ELIMIT on timeout, IRIS_EINVAL when the request uses
 * a callback or its DONE event was already read. */
int iris_request_next(iris_request *r, iris_event *ev, int timeout_ms);
/* Cancel from any thread: the request ends with finish_reason cancelled and
 * its KV blocks are freed at the engine's next step.  Idempotent. */
void iris_request_cancel(iris_request *r);
/* Releases the caller's handle (cancels the request if it is still running). */
void iris_request_free(iris_request *r);

/* Counters since open, for /metrics, benchmarks and tests.  Published after each step and before
 * each request's DONE event: whoever has a request's DONE sees it counted and no longer running. */
typedef struct iris_engine_stats {
    int n_running, n_waiting;           /* now */
    int kv_blocks_total, kv_blocks_used, kv_blocks_cached; /* now: held by sequences / reusable cached */
    uint64_t steps;
    uint64_t requests_finished;
    uint64_t prompt_tokens;             /* prompt tokens of admitted requests */
    uint64_t prefill_tokens;            /* tokens actually run through prefill (recomputes included) */
    uint64_t prefix_hit_tokens;         /* tokens taken from the prefix cache */
    uint64_t generated_tokens;
    uint64_t images_encoded;            /* vision encoder runs (one per image) */
    uint64_t images_ahead;              /* of which by the vision worker, beside the steps */
    double vision_s;                    /* the engine thread's time in the vision encoder */
    double worker_s;                    /* the vision worker's time in its encoder */
    double prefill_s;                   /* decoder and sampling time of steps with prompt rows (decodes beside them
                                           included) */
    double decode_s;                    /* decoder and sampling time of steps of decodes only */
    uint64_t images_cached;             /* images whose tokens all came from the prefix cache */
    uint64_t preemptions;
} iris_engine_stats;
void iris_engine_get_stats(iris_engine *e, iris_engine_stats *out);

#ifdef __cplusplus
}
#endif
#endif
