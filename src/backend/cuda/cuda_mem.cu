/* cuda_mem.cu: the CUDA backend's open/destroy, its device arena and the op
 * table.
 *
 * Memory policy (DESIGN.md "Memory is planned"): open makes the one
 * cudaMalloc of arena_bytes; `alloc` carves 256-byte aligned pieces from it
 * with a first-fit free list (sorted spans, neighbours merged on free), so
 * the step loop never allocates from the driver.  The cuBLASLt workspace and
 * the ops' scratch (FP8 dequantization rows, split-attention partials) are
 * carved at open too.  Owns: the stream, the cuBLASLt handle, the arena.
 * Does not: decide sizes (the planner does) or move weights (the model code
 * uploads through `upload`). */
#include <stdarg.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_info.h"
#include "cuda_internal.cuh"

#define ARENA_ALIGN 256

int iris_cuda_fail(iris_backend *b, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err.msg, sizeof b->err.msg, fmt, ap);
    va_end(ap);
    b->err.code = code;
    return code;
}

int iris_cuda_status(iris_backend *b, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 0;
    return iris_cuda_fail(b, IRIS_EDEVICE, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

int iris_cuda_check(iris_backend *b, const char *what) { return iris_cuda_status(b, cudaGetLastError(), what); }

extern "C" int iris_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

/* ---- arena ------------------------------------------------------------------------------- */

static int spans_insert(cuda_ctx *c, int at, cuda_span s) {
    if (c->n_spans == c->cap_spans) {
        int cap = c->cap_spans ? c->cap_spans * 2 : 64;
        cuda_span *p = (cuda_span *)realloc(c->spans, sizeof *p * (size_t)cap);
        if (!p) return -1;
        c->spans = p;
        c->cap_spans = cap;
    }
    memmove(c->spans + at + 1, c->spans + at, sizeof *c->spans * (size_t)(c->n_spans - at));
    c->spans[at] = s;
    c->n_spans++;
    return 0;
}

static void spans_remove(cuda_ctx *c, int at) {
    memmove(c->spans + at, c->spans + at + 1, sizeof *c->spans * (size_t)(c->n_spans - at - 1));
    c->n_spans--;
}

static void *arena_alloc(cuda_ctx *c, size_t bytes) {
    bytes = (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    if (!bytes) bytes = ARENA_ALIGN;
    for (int i = 0; i < c->n_spans; i++) {
        cuda_span *s = &c->spans[i];
        if (s->used || s->bytes < bytes) continue;
        if (s->bytes > bytes) {
            cuda_span rest = {s->off + bytes, s->bytes - bytes, 0};
            s->bytes = bytes;
            if (spans_insert(c, i + 1, rest)) { /* keep the span whole on failure */
                c->spans[i].bytes += rest.bytes;
                return NULL;
            }
        }
        c->spans[i].used = 1;
        c->used_bytes += bytes;
        if (c->used_bytes > c->peak_bytes) c->peak_bytes = c->used_bytes;
        return c->arena + c->spans[i].off;
    }
    return NULL;
}

static void arena_free(cuda_ctx *c, void *p) {
    if (!p) return;
    size_t off = (size_t)((char *)p - c->arena);
    int lo = 0, hi = c->n_spans - 1, at = -1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c->spans[mid].off == off) {
            at = mid;
            break;
        }
        if (c->spans[mid].off < off) lo = mid + 1;
        else hi = mid - 1;
    }
    if (at < 0 || !c->spans[at].used) return; /* not ours, or freed twice: ignore */
    c->spans[at].used = 0;
    c->used_bytes -= c->spans[at].bytes;
    if (at + 1 < c->n_spans && !c->spans[at + 1].used) {
        c->spans[at].bytes += c->spans[at + 1].bytes;
        spans_remove(c, at + 1);
    }
    if (at > 0 && !c->spans[at - 1].used) {
        c->spans[at - 1].bytes += c->spans[at].bytes;
        spans_remove(c, at);
    }
}

static void *cu_alloc(iris_backend *b, size_t bytes) { return arena_alloc(cuda_of(b), bytes); }
static void cu_free(iris_backend *b, void *p) { arena_free(cuda_of(b), p); }
/* A fork carves nothing: its buffers come from its parent before the two run side by side. */
static void *fork_alloc(iris_backend *b, size_t bytes) {
    iris_cuda_fail(b, IRIS_EINVAL, "cuda: a forked backend does not allocate (%zu bytes asked)", bytes);
    return NULL;
}
static void fork_free(iris_backend *b, void *p) { (void)b, (void)p; }

/* Host → device is asynchronous on the stream; pageable sources are staged by
 * the driver before the call returns, so `src` may be reused at once (no
 * pinned memory required: WSL2 limits it, DESIGN.md). */
static int cu_upload(iris_backend *b, void *dst, const void *src, size_t bytes) {
    return iris_cuda_status(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_of(b)->stream), "upload");
}

static int cu_download(iris_backend *b, void *dst, const void *src, size_t bytes) {
    cuda_ctx *c = cuda_of(b);
    int rc = iris_cuda_status(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), "download");
    if (rc) return rc;
    return iris_cuda_status(b, cudaStreamSynchronize(c->stream), "download");
}

static int cu_download_async(iris_backend *b, void *dst, const void *src, size_t bytes) {
    return iris_cuda_status(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_of(b)->stream), "download");
}

/* bf16 device rows to fp32 host floats through a page-locked staging buffer (a pageable copy of a
 * batch's logits, 19 MB at 64 rows of Qwen's vocabulary, ran at a fraction of the bus and was
 * most of a large decode step).  Taken at open at PINNED_MIN (put_f32's two pieces; the top-k
 * candidates of 8,192 rows) and grown by doubling at least: cudaFreeHost waits for the whole
 * device, and growing it to each larger batch as a run's batches grew (1 to 64 rows of
 * candidates) took 9 frees of 1-27 ms on the engine thread in the first two seconds of a
 * 128-image run (H200, 2B-FP8, CUPTI API trace). */
#define PINNED_MIN ((size_t)4 << 20)
static int pinned_room(iris_backend *b, size_t bytes) {
    cuda_ctx *c = cuda_of(b);
    if (bytes <= c->pinned_bytes) return 0;
    if (c->pinned) cudaFreeHost(c->pinned);
    size_t want = bytes + (bytes >> 2);
    if (want < 2 * c->pinned_bytes) want = 2 * c->pinned_bytes;
    if (want < PINNED_MIN) want = PINNED_MIN;
    c->pinned = NULL, c->pinned_bytes = 0;
    if (cudaMallocHost((void **)&c->pinned, want) != cudaSuccess) {
        cudaGetLastError();
        c->pinned = NULL;
        return iris_cuda_fail(b, IRIS_ENOMEM, "cuda: %zu bytes of page-locked host memory", want);
    }
    c->pinned_bytes = want;
    return 0;
}

/* bytes of device memory into the page-locked staging buffer, returned in *host once the copy is
 * done (valid until the next staged copy).  One copy and one wait where a pageable download pays
 * the driver's own staging: a decode step's top-k candidates come back this way. */
int iris_cuda_download_staged(iris_backend *b, const void *src, size_t bytes, const void **host) {
    cuda_ctx *c = cuda_of(b);
    if (pinned_room(b, bytes)) return b->err.code;
    int rc = iris_cuda_status(b, cudaMemcpyAsync(c->pinned, src, bytes, cudaMemcpyDeviceToHost, c->stream), "download");
    if (!rc) rc = iris_cuda_status(b, cudaStreamSynchronize(c->stream), "download");
    *host = c->pinned;
    return rc;
}

static int cu_get_f32(iris_backend *b, float *dst, const void *src, size_t n) {
    cuda_ctx *c = cuda_of(b);
    if (pinned_room(b, n * 2)) return b->err.code;
    int rc = iris_cuda_status(b, cudaMemcpyAsync(c->pinned, src, n * 2, cudaMemcpyDeviceToHost, c->stream), "download");
    if (!rc) rc = iris_cuda_status(b, cudaStreamSynchronize(c->stream), "download");
    if (rc) return rc;
    iris_backend_bf16_to_f32(dst, (const uint16_t *)c->pinned, n, n >= IRIS_CONV_POOL_MIN);
    return 0;
}

/* fp32 host rows to bf16 device activations (round to nearest even, as iris_backend_put_f32),
 * converted straight into the page-locked staging buffer; returns once the copy is done.  Large
 * arrays (an image's pixel rows) go in PUT_CHUNK pieces through the staging buffer's two halves:
 * a piece is converted while the one before it is copied.  H100, a 1 MP image's 6.3 M values (the
 * engine's debug log, three each): 1.46-1.79 ms in one piece, 0.96-1.34 ms in pieces. */
#define PUT_CHUNK ((size_t)1 << 20)
static_assert(PINNED_MIN >= 2 * PUT_CHUNK * sizeof(uint16_t), "put_f32's two pieces fit the staging buffer taken at open");
static int cu_put_f32(iris_backend *b, void *dst, const float *src, size_t n) {
    cuda_ctx *c = cuda_of(b);
    const size_t piece = n <= 2 * PUT_CHUNK ? n : PUT_CHUNK; /* one piece, or halves of PUT_CHUNK */
    if (pinned_room(b, (piece < n ? 2 * piece : n) * 2)) return b->err.code;
    int rc = 0;
    for (size_t o = 0, k = 0; !rc && o < n; o += piece, k ^= 1) {
        size_t m = n - o < piece ? n - o : piece;
        uint16_t *h = (uint16_t *)c->pinned + k * piece;
        if (o >= 2 * piece) rc = iris_cuda_status(b, cudaEventSynchronize(c->put_ev[k]), "upload");
        if (rc) break;
        iris_backend_f32_to_bf16(h, src + o, m, n >= IRIS_CONV_POOL_MIN); /* a large array's last piece too */
        rc = iris_cuda_status(b, cudaMemcpyAsync((uint16_t *)dst + o, h, m * 2, cudaMemcpyHostToDevice, c->stream),
                              "upload");
        if (!rc && piece < n) rc = iris_cuda_status(b, cudaEventRecord(c->put_ev[k], c->stream), "upload");
    }
    if (!rc) rc = iris_cuda_status(b, cudaStreamSynchronize(c->stream), "upload");
    return rc;
}

/* Page-locked host buffers for rows that cross to the host and back each request (the image
 * embeddings: a pageable copy of a 1024x1024 image's 16 MB ran at 9-15 GB/s and took ~3 ms of its
 * time to first token; the pixel rows the engine converts at submit).  Process-wide and kept for
 * reuse (cudaMallocHost of megabytes takes about as long as the copies it saves), at most
 * HOST_POOL_BYTES in all; past that, or when the driver refuses, host_alloc returns NULL.  Any
 * thread may ask (the engine's submitters do): the backend's device is made current first. */
#define HOST_POOL_SLOTS 512
#define HOST_POOL_BYTES (2ull << 30)
static struct {
    void *p;
    size_t bytes;
    int used;
} g_host[HOST_POOL_SLOTS];
static size_t g_host_total;
static pthread_mutex_t g_host_mu = PTHREAD_MUTEX_INITIALIZER;

static void *cu_host_alloc(iris_backend *b, size_t bytes) {
    size_t want = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
    void *p = NULL;
    pthread_mutex_lock(&g_host_mu);
    int best = -1, empty = -1;
    for (int i = 0; i < HOST_POOL_SLOTS; i++) {
        if (!g_host[i].p) {
            if (empty < 0) empty = i;
        } else if (!g_host[i].used && g_host[i].bytes >= want && g_host[i].bytes <= 2 * want &&
                   (best < 0 || g_host[i].bytes < g_host[best].bytes)) {
            best = i;
        }
    }
    if (best >= 0) {
        g_host[best].used = 1;
        p = g_host[best].p;
    } else if (empty >= 0 && g_host_total + want <= HOST_POOL_BYTES) {
        if (cudaSetDevice(cuda_of(b)->device) == cudaSuccess && cudaMallocHost(&p, want) == cudaSuccess) {
            g_host[empty].p = p, g_host[empty].bytes = want, g_host[empty].used = 1;
            g_host_total += want;
        } else {
            cudaGetLastError();
            p = NULL;
        }
    }
    pthread_mutex_unlock(&g_host_mu);
    return p;
}

static void cu_host_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&g_host_mu);
    for (int i = 0; i < HOST_POOL_SLOTS; i++)
        if (g_host[i].p == p) g_host[i].used = 0;
    pthread_mutex_unlock(&g_host_mu);
}

static int cu_sync(iris_backend *b) { return iris_cuda_status(b, cudaStreamSynchronize(cuda_of(b)->stream), "sync"); }

extern "C" int iris_cuda_mem_info(iris_backend *b, iris_cuda_mem *m) {
    cuda_ctx *c = cuda_of(b);
    size_t fr = 0, tot = 0;
    int rc = iris_cuda_status(b, cudaMemGetInfo(&fr, &tot), "cudaMemGetInfo");
    if (rc) return rc;
    m->arena_bytes = c->arena_bytes;
    m->used_bytes = c->used_bytes;
    m->peak_bytes = c->peak_bytes;
    m->device_used = tot - fr;
    m->device_total = tot;
    return 0;
}

extern "C" void iris_cuda_set_gemv_rows(iris_backend *b, int rows) {
    cuda_ctx *c = cuda_of(b);
    c->w8_max_rows = rows < 0 ? GEMV_ROWS : rows;
    c->mma_max_rows = rows < 0 ? GEMV_MMA_ROWS : rows;
    c->bf16_max_rows = rows < 0 ? GEMV_BF16_ROWS : rows;
}
extern "C" void iris_cuda_set_attn_impl(iris_backend *b, int impl) { cuda_of(b)->attn_impl = impl; }
extern "C" const void *iris_cuda_staging(iris_backend *b, size_t *bytes) {
    *bytes = cuda_of(b)->pinned_bytes;
    return cuda_of(b)->pinned;
}
extern "C" int iris_cuda_wgmma_on(iris_backend *b) { return cuda_of(b)->wgmma; }
extern "C" int iris_cuda_capability(iris_backend *b) { return cuda_of(b)->prop.major * 10 + cuda_of(b)->prop.minor; }
extern "C" void iris_cuda_set_gemv_smem(iris_backend *b, int on) { cuda_of(b)->gemv_smem = on; }
extern "C" void iris_cuda_set_qk_attn(iris_backend *b, int on) { cuda_of(b)->qk_attn = on; }
extern "C" int iris_cuda_set_fp8_mma(iris_backend *b, int on) {
    cuda_ctx *c = cuda_of(b);
    int has = c->prop.major == 9;
    c->fp8_mma = has && on;
    return has;
}

struct iris_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

extern "C" int iris_cuda_graph_begin(iris_backend *b) {
    return iris_cuda_status(b, cudaStreamBeginCapture(cuda_of(b)->stream, cudaStreamCaptureModeThreadLocal),
                            "graph capture begin");
}

extern "C" int iris_cuda_graph_end(iris_backend *b, iris_cuda_graph **out) {
    *out = NULL;
    iris_cuda_graph *g = (iris_cuda_graph *)calloc(1, sizeof *g);
    cudaGraph_t graph = NULL;
    int rc = iris_cuda_status(b, cudaStreamEndCapture(cuda_of(b)->stream, &graph), "graph capture end");
    if (!g) {
        if (graph) cudaGraphDestroy(graph);
        return rc ? rc : iris_cuda_fail(b, IRIS_ENOMEM, "out of memory");
    }
    if (!rc) rc = iris_cuda_status(b, cudaGraphInstantiate(&g->exec, graph, 0), "graph instantiate");
    g->graph = graph;
    if (rc) {
        iris_cuda_graph_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

extern "C" int iris_cuda_graph_replay(iris_backend *b, iris_cuda_graph *g) {
    return iris_cuda_status(b, cudaGraphLaunch(g->exec, cuda_of(b)->stream), "graph launch");
}

extern "C" void iris_cuda_graph_free(iris_cuda_graph *g) {
    if (!g) return;
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    free(g);
}

/* The op table's graph hooks (backend.h). */
static int cu_graph_end(iris_backend *b, void **g) { return iris_cuda_graph_end(b, (iris_cuda_graph **)g); }
static int cu_graph_replay(iris_backend *b, void *g) { return iris_cuda_graph_replay(b, (iris_cuda_graph *)g); }
static void cu_graph_free(void *g) { iris_cuda_graph_free((iris_cuda_graph *)g); }

extern "C" void iris_cuda_set_graphs(iris_backend *b, int on) {
    b->graph_begin = on ? iris_cuda_graph_begin : NULL;
    b->graph_end = on ? cu_graph_end : NULL;
    b->graph_replay = on ? cu_graph_replay : NULL;
    b->graph_free = on ? cu_graph_free : NULL;
}

extern "C" int iris_cuda_mark(iris_backend *b) {
    cuda_ctx *c = cuda_of(b);
    return iris_cuda_status(b, cudaEventRecord(c->ev0, c->stream), "event record");
}

extern "C" double iris_cuda_elapsed_ms(iris_backend *b) {
    cuda_ctx *c = cuda_of(b);
    float ms = -1;
    if (cudaEventRecord(c->ev1, c->stream) != cudaSuccess || cudaEventSynchronize(c->ev1) != cudaSuccess ||
        cudaEventElapsedTime(&ms, c->ev0, c->ev1) != cudaSuccess)
        return -1;
    return ms;
}

static void cu_destroy(iris_backend *b) {
    if (!b) return;
    cuda_ctx *c = cuda_of(b);
    if (c) {
        cudaSetDevice(c->device);
        if (c->stream) cudaStreamSynchronize(c->stream);
        if (c->lt) cublasLtDestroy(c->lt);
        if (c->ev0) cudaEventDestroy(c->ev0);
        if (c->ev1) cudaEventDestroy(c->ev1);
        for (int i = 0; i < 2; i++)
            if (c->put_ev[i]) cudaEventDestroy(c->put_ev[i]);
        if (c->stream) cudaStreamDestroy(c->stream);
        if (c->parent) arena_free(c->parent, c->lt_ws);
        else if (c->arena) cudaFree(c->arena);
        if (c->ds_trace_buf) cudaFree(c->ds_trace_buf);
        if (c->pinned) cudaFreeHost(c->pinned);
        free(c->spans);
        free(c);
    }
    free(b);
}

/* Scratch carved at open: cuBLASLt workspace (32 MiB is what Hopper's
 * heuristics ask for), 8 Mi bf16 of dequantized FP8 rows (the large-batch
 * linear dequantizes a weight in row chunks of this size), 2 Mi floats of
 * split-context attention partials. */
#define LT_WS_BYTES (32u << 20)
#define DQ_ELEMS (8u << 20)
#define ATTN_PART_ELEMS (2u << 20)
#define ATTN_COUNT_N 4096u /* >= the (row, kv head) pairs of a split launch: fewer than 4 CTAs an SM */
#define DS_BAR_BYTES 256u  /* the persistent decode kernel's grid barrier (cuda_decode.cu) */

/* The scratch carved at open besides the cuBLASLt workspace (which the memory plan counts). */
extern "C" size_t iris_cuda_scratch_bytes(void) {
    return (size_t)DQ_ELEMS * 2 + (size_t)ATTN_PART_ELEMS * 4 + (size_t)ATTN_COUNT_N * 4 + DS_BAR_BYTES + DS_PART_BYTES +
           6 * ARENA_ALIGN;
}

/* The developers' switches of the CUDA backend (docs/env.md): the one place that reads them, at
 * open.  Each is a way around a fast path (for a card it misbehaves on, or to profile without it)
 * or a debugging aid; the choices they override are made by rules measured once (see each). */
typedef struct switches {
    int graphs;             /* IRIS_CUDA_GRAPHS=0: no graph hooks, every step launched op by op */
    int fused;              /* IRIS_CUDA_FUSED=0: no fused ops (backend/fused.c runs the plain ones) */
    int gemv_mma;           /* IRIS_CUDA_GEMV_MMA=0: FP8 decode linears on the FMA GEMV, not the tensor cores */
    int pdl;                /* IRIS_CUDA_PDL=0: decode kernels launched the plain way */
    int decode_stack;       /* IRIS_CUDA_DECODE_STACK=0: never the persistent kernel, 1: every step it takes */
    int fp8_mma;            /* IRIS_CUDA_FP8_MMA=1: W8A8 prefill on sm_90 (other numbers; cuda_linear.cu) */
    int wgmma;              /* IRIS_CUDA_WGMMA=0: the vision attention on mma.sync where wgmma would run */
    const char *ds_trace;   /* IRIS_CUDA_DS_TRACE=FILE: the persistent kernel's phase stamps (bench/ds_trace.py) */
} switches;

/* "0" turns a switch off, "1" on; anything else (or unset) leaves dflt. */
static int env_switch(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && !strcmp(v, "0") ? 0 : v && !strcmp(v, "1") ? 1 : dflt;
}

static switches read_switches(void) {
    switches s;
    s.graphs = env_switch("IRIS_CUDA_GRAPHS", 1);
    s.fused = env_switch("IRIS_CUDA_FUSED", 1);
    s.gemv_mma = env_switch("IRIS_CUDA_GEMV_MMA", 1);
    s.pdl = env_switch("IRIS_CUDA_PDL", 1);
    s.decode_stack = env_switch("IRIS_CUDA_DECODE_STACK", -1);
    s.fp8_mma = env_switch("IRIS_CUDA_FP8_MMA", 0);
    s.wgmma = env_switch("IRIS_CUDA_WGMMA", 1);
    s.ds_trace = getenv("IRIS_CUDA_DS_TRACE");
    if (s.ds_trace && !*s.ds_trace) s.ds_trace = NULL;
    return s;
}

/* c's stream (the greatest priority, or the least) and events. */
static cudaError_t stream_and_events(cuda_ctx *c, int greatest) {
    int least = 0, most = 0;
    cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &most);
    if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&c->stream, cudaStreamNonBlocking, greatest ? most : least);
    if (e == cudaSuccess) e = cudaEventCreate(&c->ev0);
    if (e == cudaSuccess) e = cudaEventCreate(&c->ev1);
    for (int i = 0; i < 2 && e == cudaSuccess; i++) e = cudaEventCreateWithFlags(&c->put_ev[i], cudaEventDisableTiming);
    return e;
}

/* The device, its stream, events, arena and cuBLASLt handle into c; 0 or an error in err. */
static int open_device(cuda_ctx *c, int device, size_t arena_bytes, iris_err *err) {
    c->device = device;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess && iris_cuda_small_stack() != 0) e = cudaErrorUnknown;
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&c->prop, device);
    if (e == cudaSuccess) e = stream_and_events(c, 1);
    if (e == cudaSuccess) e = cudaMalloc((void **)&c->arena, arena_bytes);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        return iris_err_set(err, IRIS_EDEVICE, "cuda: device %d: %s while taking the %zu-byte arena (free %zu of %zu)",
                            device, cudaGetErrorString(e), arena_bytes, fr, tot);
    }
    c->arena_bytes = arena_bytes;
    cuda_span whole = {0, arena_bytes, 0};
    if (spans_insert(c, 0, whole)) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    if (cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS)
        return iris_err_set(err, IRIS_EDEVICE, "cuda: cublasLtCreate failed on device %d", device);
    return 0;
}

/* The ops' scratch, carved from the arena (iris_cuda_scratch_bytes and the workspace fit). */
static void carve_scratch(cuda_ctx *c) {
    c->lt_ws_bytes = LT_WS_BYTES;
    c->lt_ws = arena_alloc(c, c->lt_ws_bytes);
    c->dq_elems = DQ_ELEMS;
    c->dq = (bf16 *)arena_alloc(c, c->dq_elems * 2);
    c->attn_part_elems = ATTN_PART_ELEMS;
    c->attn_part = (float *)arena_alloc(c, c->attn_part_elems * 4);
    c->attn_count_n = ATTN_COUNT_N;
    c->attn_count = (int *)arena_alloc(c, c->attn_count_n * 4);
    if (!c->attn_count || cudaMemsetAsync(c->attn_count, 0, c->attn_count_n * 4, c->stream) != cudaSuccess)
        c->attn_count_n = 0; /* no merge counters: decode attention does not split */
    c->ds_bar = (unsigned *)arena_alloc(c, DS_BAR_BYTES);
    c->ds_part = arena_alloc(c, DS_PART_BYTES);
    if (c->ds_part && cudaMemsetAsync(c->ds_part, 0, DS_PART_BYTES, c->stream) != cudaSuccess) c->ds_part = NULL;
}

/* The kernels' choices: the measured defaults, and the switches where set. */
static void set_choices(iris_backend *b, const switches *sw) {
    cuda_ctx *c = cuda_of(b);
    /* what needs sm_90 is compiled out of kernels JIT-compiled from older PTX: it stays off */
    int major = iris_cuda_kernels_major(iris_cuda_archs(), iris_cuda_ptx(), c->prop.major, c->prop.minor);
    iris_cuda_set_gemv_rows(b, -1); /* products of more rows go to cuBLASLt */
    c->fp8_mma = sw->fp8_mma && c->prop.major == 9;
    c->wgmma = sw->wgmma && c->prop.major == 9 && c->prop.minor == 0 && iris_cuda_archs_have_arch_sass(iris_cuda_archs(), 9, 0);
    c->gemv_mma = sw->gemv_mma && major >= 8;
    c->gemv_smem = 1;
    c->pdl = sw->pdl && major >= 9;
    c->qk_attn = 1;
    c->ds_compiled = major >= 9;
    c->decode_stack = c->ds_compiled ? sw->decode_stack : 0;
    c->ds_split = -1;
    c->ds_trace = sw->ds_trace;
}

/* The op table (backend.h); the optional entries as the switches allow. */
static void set_ops(iris_backend *b, const switches *sw) {
    b->name = "cuda";
    b->act = IRIS_DT_BF16;
    b->alloc = cu_alloc;
    b->free = cu_free;
    b->upload = cu_upload;
    b->download = cu_download;
    b->sync = cu_sync;
    b->linear = iris_cuda_linear;
    b->linear_epi = iris_cuda_linear_epi;
    b->embed = iris_cuda_embed;
    b->rms_norm = iris_cuda_rms_norm;
    b->layer_norm = iris_cuda_layer_norm;
    b->add = iris_cuda_add;
    b->silu_mul = iris_cuda_silu_mul;
    b->gelu_tanh = iris_cuda_gelu_tanh;
    b->gelu_erf = iris_cuda_gelu_erf;
    b->rope = iris_cuda_rope;
    b->kv_write = iris_cuda_kv_write;
    b->attn_paged = iris_cuda_attn_paged;
    b->attn_segments = iris_cuda_attn_segments;
    b->set_rows = iris_cuda_set_rows;
    b->add_rows = iris_cuda_add_rows;
    b->get_rows = iris_cuda_get_rows;
    b->interp4 = iris_cuda_interp4;
    b->destroy = cu_destroy;
    if (sw->fused) {
        iris_cuda_fused_init(b);
        iris_cuda_linear_fused_init(b);
    }
    b->get_f32 = cu_get_f32;
    b->put_f32 = cu_put_f32;
    b->densify = iris_cuda_densify;
    b->host_alloc = cu_host_alloc;
    b->download_async = cu_download_async;
    b->host_free = cu_host_free;
    b->get_topk = iris_cuda_get_topk;
    b->decode_layers = iris_cuda_decode_layers;
    iris_cuda_set_graphs(b, sw->graphs);
}

extern "C" int iris_backend_cuda_open(int device, size_t arena_bytes, iris_backend **out, iris_err *err) {
    *out = NULL;
    size_t scratch = LT_WS_BYTES + ARENA_ALIGN + iris_cuda_scratch_bytes(); /* and the cuBLASLt workspace */
    if (arena_bytes < scratch + (16u << 20))
        return iris_err_set(err, IRIS_EINVAL, "cuda: arena of %zu bytes is too small: the backend's scratch alone takes %zu",
                            arena_bytes, scratch);
    int n = iris_cuda_device_count();
    if (n > 0 && (device < 0 || device >= n))
        return iris_err_set(err, IRIS_EINVAL, "cuda: device %d does not exist (%d device%s)", device, n, n == 1 ? "" : "s");
    char why[512];
    if (!iris_cuda_usable(device, why, sizeof why))
        return iris_err_set(err, IRIS_EDEVICE, "cuda: %s", why[0] ? why : "no CUDA device found (driver missing or no GPU)");

    iris_backend *b = (iris_backend *)calloc(1, sizeof *b);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    b->ctx = c;
    int rc = open_device(c, device, arena_bytes, err);
    if (rc) {
        cu_destroy(b);
        return rc;
    }
    carve_scratch(c);
    switches sw = read_switches();
    set_choices(b, &sw);
    set_ops(b, &sw);
    if (pinned_room(b, PINNED_MIN)) memset(&b->err, 0, sizeof b->err); /* (taken later, or reported then) */
    *out = b;
    return 0;
}

/* A second handle on b's device for another host thread (cuda_backend.h iris_backend_cuda_fork). */
extern "C" int iris_backend_cuda_fork(iris_backend *b, iris_backend **out, iris_err *err) {
    *out = NULL;
    cuda_ctx *p = cuda_of(b);
    iris_backend *f = (iris_backend *)calloc(1, sizeof *f);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!f || !c) {
        free(f);
        free(c);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    *f = *b;
    memset(&f->err, 0, sizeof f->err);
    f->ctx = c;
    /* the parent's choices and device; none of its scratch (the decoder's ops, not the encoder's) */
    c->device = p->device, c->prop = p->prop, c->parent = p;
    c->w8_max_rows = p->w8_max_rows, c->gemv_mma = p->gemv_mma, c->mma_max_rows = p->mma_max_rows;
    c->bf16_max_rows = p->bf16_max_rows, c->gemv_smem = p->gemv_smem, c->pdl = p->pdl, c->qk_attn = p->qk_attn;
    c->fp8_mma = p->fp8_mma, c->attn_impl = p->attn_impl, c->wgmma = p->wgmma;
    c->ds_split = -1;
    f->alloc = fork_alloc, f->free = fork_free;
    f->decode_layers = NULL;
    f->graph_begin = NULL, f->graph_end = NULL, f->graph_replay = NULL, f->graph_free = NULL;
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) e = stream_and_events(c, 0);
    int rc = 0;
    if (e != cudaSuccess) {
        cudaGetLastError();
        rc = iris_err_set(err, IRIS_EDEVICE, "cuda: a second stream on device %d: %s", c->device, cudaGetErrorString(e));
    } else if (cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS) {
        c->lt = NULL;
        rc = iris_err_set(err, IRIS_EDEVICE, "cuda: cublasLtCreate failed on device %d", c->device);
    } else if (!(c->lt_ws = arena_alloc(p, LT_WS_BYTES))) {
        rc = iris_err_set(err, IRIS_ENOMEM, "cuda: no room in the arena for a second cuBLASLt workspace (%u bytes)",
                          LT_WS_BYTES);
    }
    c->lt_ws_bytes = c->lt_ws ? LT_WS_BYTES : 0;
    if (rc) {
        cu_destroy(f);
        return rc;
    }
    *out = f;
    return 0;
}
