/* bench_attn.c: paged prefill attention over a long prompt, the mma kernel's layouts side by side.
 *
 *   make build/bench/bench_attn && build/bench/bench_attn [2B|4B] [CONTEXT] [CHUNK] [bf16|fp8]
 *
 * Defaults: 2B's heads (16 query heads, 8 kv heads, head_dim 128; 4B: 32 / 8 / 128), CONTEXT 11,982
 * (the 30-second 720p clip's prompt at the default sampling), CHUNK 8,192 (the step's token budget on
 * an 80 GB card), a BF16 cache.  One sequence's prompt is prefilled in chunks of CHUNK rows, each
 * chunk's rows attending causally over the paged cache (blocks of 16 tokens in a shuffled order)
 * that holds the prompt up to them; also the whole prompt as one chunk (what SDPA computes in
 * transformers) and a 1,024-row prompt (a short one must not get slower).  For each case and each
 * kernel layout (iris_cuda_set_attn_impl: 2 the mma kernel, a CTA a query head, row tiles in
 * order; 5 the same heaviest tiles first; 3 heaviest first and two query heads a CTA where the GQA
 * group is even; 4 that with three K/V stages in flight (a BF16 cache); 1 the WMMA kernel; 0 the
 * default, the wgmma kernel where it runs) one JSON line: the median time of 7 runs,
 * TFLOP/s counting exactly the work a causal mask leaves (4 · head_dim flops a query head a visible
 * key), and whether the output has the same bits as layout 2's.  Figures are reported, never
 * asserted (tests/test_ops_attn.c asserts the bits).
 *
 *   build/bench/bench_attn segments [IMAGES] [PATCHES] [HEADS] [HEAD_DIM]
 *
 * The vision encoder's attention: IMAGES segments of PATCHES rows in one call (defaults 8 x 4,096,
 * a 1024 x 1024 image's patches, 16 heads of 64: Qwen3-VL-2B's and 4B's encoder), the default
 * kernel (wgmma where it runs) and the mma.sync one (impl 5) side by side: a JSON line each with
 * the median of 7 runs, TFLOP/s (4 · N² · head_dim a head and segment) and the largest difference
 * of the two outputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_testing.h"

static iris_backend *B;
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

static void die(const char *what) {
    fprintf(stderr, "bench_attn: %s: %s\n", what, B ? B->err.msg : "");
    exit(1);
}
#define OK(x)                                                                                              \
    do {                                                                                                   \
        if ((x) != 0) die(#x);                                                                             \
    } while (0)

/* n elements of random device data: bf16 in [-1, 1), or E4M3 codes without NaN. */
static void *dev_random(size_t n, int fp8) {
    size_t es = fp8 ? 1 : 2, bytes = n * es;
    uint8_t *h = malloc(bytes ? bytes : 1);
    if (!h) die("host memory");
    for (size_t i = 0; i < n; i++) {
        if (fp8) {
            uint8_t q = (uint8_t)rnd();
            h[i] = (q & 0x7f) == 0x7f ? q ^ 1 : q;
        } else {
            float f = (float)(rnd() & 0xffff) / 32768.0f - 1.0f;
            uint32_t u;
            memcpy(&u, &f, 4);
            uint16_t v = (uint16_t)(u >> 16);
            memcpy(h + 2 * i, &v, 2);
        }
    }
    void *d = B->alloc(B, bytes ? bytes : 1);
    if (!d) die("arena exhausted");
    OK(B->upload(B, d, h, bytes));
    free(h);
    return d;
}

static void *dev_ints(const int32_t *h, size_t n) {
    void *d = B->alloc(B, n * 4);
    if (!d) die("arena exhausted");
    OK(B->upload(B, d, h, n * 4));
    return d;
}

typedef struct {
    int nq, nkv, hd;
    iris_kv_layer kv;
    const int32_t *bt_host;
    int max_blocks;
} cache;

/* One chunk: rows [past, past + n) of the prompt. */
typedef struct {
    iris_attn_meta meta;
    iris_tensor q, o;
    double flops;
} chunk;

static iris_tensor tview(void *d, int64_t rows, int64_t cols) {
    iris_tensor t;
    memset(&t, 0, sizeof t);
    t.data = d, t.dtype = IRIS_DT_BF16, t.rows = rows, t.cols = cols;
    return t;
}

static void chunk_make(chunk *c, const cache *k, int past, int n) {
    int32_t *rs = malloc(sizeof(int32_t) * (size_t)n), *rc = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *slot = malloc(sizeof(int32_t) * (size_t)n);
    c->flops = 0;
    for (int j = 0; j < n; j++) {
        int p = past + j;
        rs[j] = 0, rc[j] = p + 1, slot[j] = k->bt_host[p / 16] * 16 + p % 16;
        c->flops += 4.0 * k->hd * (p + 1) * k->nq;
    }
    c->meta = (iris_attn_meta){.n_rows = n, .row_seq = dev_ints(rs, (size_t)n), .row_ctx = dev_ints(rc, (size_t)n),
                               .block_tables = dev_ints(k->bt_host, (size_t)k->max_blocks), .max_blocks = k->max_blocks,
                               .slot = dev_ints(slot, (size_t)n), .n_seqs = 1};
    int64_t w = (int64_t)k->nq * k->hd;
    c->q = tview(dev_random((size_t)n * (size_t)w, 0), n, w);
    void *o = B->alloc(B, (size_t)n * (size_t)w * 2);
    if (!o) die("arena exhausted");
    c->o = tview(o, n, w);
    free(rs), free(rc), free(slot);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double time_chunk(const cache *k, chunk *c) {
    double t[7];
    OK(B->attn_paged(B, &c->q, &k->kv, &c->meta, k->nq, &c->o)); /* warm-up */
    for (int i = 0; i < 7; i++) {
        OK(B->sync(B));
        OK(iris_cuda_mark(B));
        OK(B->attn_paged(B, &c->q, &k->kv, &c->meta, k->nq, &c->o));
        t[i] = iris_cuda_elapsed_ms(B);
    }
    qsort(t, 7, sizeof *t, cmp_double);
    return t[3];
}

/* Every layout on one chunk: a JSON line each. */
static void bench_chunk(const cache *k, const char *name, int past, int n, int fp8) {
    chunk c;
    chunk_make(&c, k, past, n);
    size_t bytes = (size_t)n * (size_t)k->nq * (size_t)k->hd * 2;
    uint8_t *ref = malloc(bytes), *got = malloc(bytes);
    static const int impls[] = {2, 5, 3, 4, 1, 0};
    static const char *names[] = {"mma: a CTA a head, tiles in order", "mma: heaviest tiles first",
                                  "mma: heaviest first, 2 heads a CTA", "mma: heaviest first, 2 heads a CTA, 3 stages",
                                  "wmma", "default (wgmma for a BF16 cache of head 128 where it runs)"};
    for (int i = 0; i < 6; i++) {
        iris_cuda_set_attn_impl(B, impls[i]);
        double ms = time_chunk(k, &c);
        OK(B->sync(B));
        OK(B->download(B, i == 0 ? ref : got, c.o.data, bytes));
        int same = i == 0 || memcmp(ref, got, bytes) == 0; /* the wgmma kernel's bits differ */
        printf("{\"bench\":\"attn_paged_prefill\",\"case\":\"%s\",\"heads\":[%d,%d,%d],\"cache\":\"%s\",\"past\":%d,"
               "\"rows\":%d,\"impl\":%d,\"layout\":\"%s\",\"ms\":%.3f,\"TFLOPs\":%.1f,\"same_bits_as_before\":%s}\n",
               name, k->nq, k->nkv, k->hd, fp8 ? "fp8" : "bf16", past, n, impls[i], names[i], ms,
               c.flops / (ms * 1e-3) / 1e12, same ? "true" : "false");
        fflush(stdout);
    }
    iris_cuda_set_attn_impl(B, 0);
    free(ref), free(got);
}

static float bf16_f(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int bench_segments(int n_img, int patches, int nh, int hd) {
    int64_t n = (int64_t)n_img * patches, w = (int64_t)nh * hd;
    int *cu = malloc(sizeof(int) * (size_t)(n_img + 1));
    for (int i = 0; i <= n_img; i++) cu[i] = i * patches;
    iris_tensor qkv = tview(dev_random((size_t)(n * 3 * w), 0), n, 3 * w);
    void *o = B->alloc(B, (size_t)(n * w * 2));
    if (!o) die("arena exhausted");
    iris_tensor out = tview(o, n, w);
    size_t bytes = (size_t)(n * w * 2);
    uint16_t *ref = malloc(bytes), *got = malloc(bytes);
    double flops = 4.0 * patches * (double)patches * hd * nh * n_img;
    static const int impls[] = {5, 0};
    static const char *names[] = {"mma.sync", "default"};
    for (int i = 0; i < 2; i++) {
        iris_cuda_set_attn_impl(B, impls[i]);
        double t[7];
        OK(B->attn_segments(B, &qkv, nh, hd, cu, n_img, &out));
        for (int r = 0; r < 7; r++) {
            OK(B->sync(B));
            OK(iris_cuda_mark(B));
            OK(B->attn_segments(B, &qkv, nh, hd, cu, n_img, &out));
            t[r] = iris_cuda_elapsed_ms(B);
        }
        qsort(t, 7, sizeof *t, cmp_double);
        OK(B->sync(B));
        OK(B->download(B, i == 0 ? ref : got, o, bytes));
        double diff = 0;
        for (int64_t e = 0; i > 0 && e < n * w; e++) {
            double d = fabs((double)bf16_f(ref[e]) - (double)bf16_f(got[e]));
            if (d > diff || d != d) diff = d;
        }
        printf("{\"bench\":\"attn_segments\",\"images\":%d,\"patches\":%d,\"heads\":%d,\"head_dim\":%d,"
               "\"kernel\":\"%s\",\"wgmma\":%s,\"ms\":%.3f,\"TFLOPs\":%.1f,\"max_diff_vs_mma\":%.3g}\n",
               n_img, patches, nh, hd, names[i], i && iris_cuda_wgmma_on(B) && hd == 64 ? "true" : "false", t[3],
               flops / (t[3] * 1e-3) / 1e12, diff);
        fflush(stdout);
    }
    iris_cuda_set_attn_impl(B, 0);
    free(cu), free(ref), free(got);
    return 0;
}

/* The CUDA backend into B: 0, or 1 with why on stderr. */
static int open_cuda(void) {
    if (iris_cuda_device_count() == 0) {
        fprintf(stderr, "bench_attn: no CUDA device\n");
        return 1;
    }
    iris_err err = {0};
    if (iris_backend_cuda_open(0, (size_t)8 << 30, &B, &err)) {
        fprintf(stderr, "bench_attn: %s\n", err.msg);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *like = argc > 1 ? argv[1] : "2B";
    if (strcmp(like, "segments") == 0) {
        if (open_cuda()) return 1;
        int rc = bench_segments(argc > 2 ? atoi(argv[2]) : 8, argc > 3 ? atoi(argv[3]) : 4096,
                                argc > 4 ? atoi(argv[4]) : 16, argc > 5 ? atoi(argv[5]) : 64);
        B->destroy(B);
        return rc;
    }
    int context = argc > 2 ? atoi(argv[2]) : 11982, chunk_rows = argc > 3 ? atoi(argv[3]) : 8192;
    int fp8 = argc > 4 && strcmp(argv[4], "fp8") == 0;
    if (context < 1 || chunk_rows < 1) {
        fprintf(stderr, "usage: bench_attn [2B|4B] [CONTEXT] [CHUNK] [bf16|fp8]\n");
        return 2;
    }
    if (open_cuda()) return 1;
    cache k;
    memset(&k, 0, sizeof k);
    k.nq = strcmp(like, "4B") == 0 ? 32 : 16, k.nkv = 8, k.hd = 128;
    k.max_blocks = (context + 15) / 16;
    int n_blocks = k.max_blocks + 8;
    /* the sequence's blocks: a shuffled part of the pool, as a long-running engine's */
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)n_blocks);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    k.bt_host = perm;
    size_t elems = (size_t)n_blocks * 16 * (size_t)k.nkv * (size_t)k.hd;
    k.kv = (iris_kv_layer){dev_random(elems, fp8), dev_random(elems, fp8), fp8 ? IRIS_DT_F8_E4M3 : IRIS_DT_BF16,
                           n_blocks, k.nkv, k.hd};
    for (int past = 0; past < context; past += chunk_rows) {
        int n = context - past < chunk_rows ? context - past : chunk_rows;
        bench_chunk(&k, "chunk", past, n, fp8);
    }
    if (chunk_rows < context) bench_chunk(&k, "whole prompt", 0, context, fp8);
    if (context >= 1024) bench_chunk(&k, "short prompt", 0, 1024, fp8);
    free(perm);
    B->destroy(B);
    return 0;
}
