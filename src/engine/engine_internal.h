/* engine_internal.h: the engine's and the requests' state, shared by
 * engine.c (the engine thread and its step) and engine_req.c (submission on
 * callers' threads and the per-request channels).
 *
 * Locking: e->mu guards the inbox, the stopping flags and the published
 * stats; r->mu guards a request's event queue.  Everything else in the
 * engine (model, cache, pool, scheduler, sequences, samplers) belongs to the
 * engine thread alone once a request is in the inbox.  A request is freed
 * when both the engine (after its DONE event) and the caller
 * (iris_request_free) have let go of it (`refs`). */
#ifndef IRIS_ENGINE_INTERNAL_H
#define IRIS_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "backend/backend.h"
#include "clock.h"
#include "engine/engine.h"
#include "engine/kv_pool.h"
#include "engine/runner.h"
#include "engine/sched.h"
#include "iris.h"
#include "engine/prompt.h"
#include "model/sampler.h"
#include "model/text.h"
#include "formats/tokenizer.h"
#include "model/vision.h"
#include "model/weights.h"

/* The bf16 pixel rows an engine's requests hold at once (engine_req.c pixels_bf16): half of the CUDA
 * backend's page-locked pool, so that the encoder rows find room there too. */
#define IRIS_PX16_CAP ((size_t)1 << 30)

typedef struct req_event {
    iris_event ev;
    char *text;                 /* malloc'd copy (queue mode) */
} req_event;

struct iris_request {
    iris_engine *e;             /* valid while the engine holds the request */
    iris_seq seq;
    iris_prompt prompt;
    iris_seq_image *images;     /* [prompt.n_images] */
    iris_vision_out *vout;      /* [prompt.n_images]: embeddings while needed */
    uint16_t *px16;             /* the pixel rows as bf16 in the backend's host memory (made at submit,
                                   engine_req.c), until every image is encoded; NULL: converted then */
    size_t px16_bytes;
    void (*px16_free)(void *p);
    int n_encoded;              /* images encoded so far */
    iris_sampler *sampler;
    iris_stop_matcher *stop;
    iris_tok_stream ts;
    int logprobs, max_len;
    double t_submit, t_first;
    int finished;

    iris_event_fn on_event;
    void *ud;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    req_event *q;               /* ring of queued events */
    int q_head, q_n, q_cap;
    char *cur_text;             /* text of the event last returned by iris_request_next */
    int done_read;
    atomic_int cancel;
    atomic_int refs;
};

struct iris_engine {
    iris_engine_opts o;
    char dir[4096];             /* the resolved model directory */
    iris_model *model;          /* the one loaded model (weights.h), owned */
    iris_preprocessor_config pc; /* the model's, with max_pixels lowered to what the memory plan admits */
    iris_video_opts vopts;       /* the model's video_preprocessor_config.json (formats/video.h) */
    iris_backend *be;
    iris_kv_cache kv;
    iris_kv_pool *pool;
    iris_sched sched;
    iris_sched_batch batch;
    int max_model_len, n_blocks;
    int kv_plan_dtype;          /* IRIS_KV_BF16 or IRIS_KV_FP8 (--kv-cache-dtype, parsed at open) */
    int on_gpu;                 /* the CUDA backend (the plan below sized it) */
    int use_worker;             /* the vision worker runs (the plan's choice, or o.vision_worker on the CPU) */
    int max_image_tokens;       /* images over this are refused at submit (0: no limit; CPU) */
    char *plan_text;            /* the memory plan's table (CUDA), for iris_engine_plan_text */
    iris_runner *runner;        /* one step over the decoder (runner.h) */
    /* The step's host inputs, sized at open: sequences [max_num_seqs], positions [3][max_batch_tokens],
     * image rows of chunks that touch several images (gathered), and per logits row what sampling
     * needs (runner.h iris_runner_sampling) and whose row it is. */
    iris_text_seq *step_seqs;
    int32_t *step_pos;
    char *step_img;
    size_t step_img_bytes;
    int *top_need, *top_pen;    /* [max_num_seqs] */
    struct iris_request **top_req; /* [max_num_seqs]: the request of each logits row */
    iris_vocab *vocab;          /* the tokens' trie for grammars (model/grammar.h), made at the first
                                 * constrained submit (set under mu, immutable after) */

    pthread_t thread;
    int thread_started, joined;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    iris_request **inbox;
    int n_inbox, cap_inbox;
    iris_request **done;        /* finished this step; the engine's reference dropped at its end */
    int n_done, cap_done;
    int n_queued;               /* inbox + waiting in the scheduler (the bounded queue) */
    int stopping;
    int64_t next_id;
    iris_engine_stats stats;    /* published after every step */
    uint64_t images_encoded, requests_finished, generated_tokens, prompt_tokens;
    double vision_s, prefill_s, decode_s;
    atomic_size_t px16_bytes;   /* the requests' px16 (at most IRIS_PX16_CAP) */
    struct iris_vworker *vw;    /* the vision worker (engine_vision.c), or NULL */
    uint64_t images_ahead;
    double worker_s;
};

/* Deliver an event (callback or queue).  text may be NULL. */
void iris_req_emit(iris_request *r, const iris_event *ev);
/* Drop one reference; frees the request at zero. */
void iris_req_unref(iris_request *r);
/* Take page-locked buffers for n requests' images (-1: max_num_seqs) into the backend's pool at
 * open (iris_engine_opts.host_warm; engine_req.c). */
void iris_req_warm_host(iris_engine *e, int n);
/* Free r's bf16 pixel rows (px16), if it holds them. */
void iris_req_release_px16(iris_engine *e, iris_request *r);
/* Fail r (error finish, its sequence out of the scheduler); engine thread. */
void iris_engine_fail(iris_engine *e, iris_request *r, const iris_err *why);
/* Encode the images step b's chunks reach that have no embeddings yet (engine_vision.c; engine
 * thread). */
int iris_engine_encode_images(iris_engine *e, const iris_sched_batch *b, iris_err *err);

/* The vision worker (engine_vision.c; all but its own thread's loop on the engine thread): a thread
 * with its own encoder (on CUDA a fork of the engine's backend: its own stream, planned scratch and
 * workspace) that encodes images of running and waiting requests ahead of their chunks, up to
 * IRIS_VW_JOBS at a time, while the steps run (the scheduler's defer_images keeps their chunks back
 * until they are ready).  open: after the runner (its scratch comes from the engine's backend). */
#define IRIS_VW_JOBS 4
int iris_engine_worker_open(iris_engine *e, iris_err *err);
void iris_engine_worker_close(iris_engine *e);
/* Whether it holds jobs (queued, running or done but not taken). */
int iris_engine_worker_busy(iris_engine *e);
/* Take the finished encodes into their requests (wait: first wait for one while any is in flight). */
void iris_engine_worker_collect(iris_engine *e, int wait);
/* Hand it the next images of the running, then the first waiting, requests (oldest first) that
 * have no embeddings, are not being encoded and that no cached prefix covers. */
void iris_engine_worker_submit(iris_engine *e);
/* r is finishing: its queued encodes are dropped, a running one waited for, their outputs freed. */
void iris_engine_worker_forget(iris_engine *e, iris_request *r);

#endif
