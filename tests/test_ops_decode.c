/* test_ops_decode.c: the CUDA backend's decode_layers (the persistent decode kernel,
 * cuda_decode.cu) against the same step run op by op on the same backend (the ops that
 * model/text.c calls, each checked against the CPU in test_ops_*.c), part of build/iris-test-gpu.
 *
 * Random FP8 decoder layers of the real shapes (2B, 4B) and of a narrow model (128-column
 * chunks), 1 to 4 sequences with histories in a scattered paged cache, from one token to
 * past the context splits.  What must hold: the kernel ran (the backend counts its launches);
 * the residual stream after the last layer agrees with the ops' within bf16 noise (the two sum
 * the products in other orders, so a rounding may fall the other way and travel: the bound is
 * in units of the largest value, 1e-2; a wrong index, mask or scale is off by the values
 * themselves); every cache row the step wrote agrees likewise, and every other cache row is
 * untouched (bit for bit). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "ops_util.h"
#include "test.h"

#ifdef IRIS_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_testing.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static float unif(float lo, float hi) { return ops_uniform(&rng, lo, hi); }

typedef struct {
    iris_backend *b;
    void *bufs[512];
    int n;
} dev_mem;

static void *dput(dev_mem *m, const void *h, size_t bytes) {
    void *d = m->b->alloc(m->b, bytes);
    if (d) {
        m->b->upload(m->b, d, h, bytes);
        m->bufs[m->n++] = d;
    }
    return d;
}
/* n random bf16 values in [lo, hi) on the device */
static void *drand_bf16(dev_mem *m, int64_t n, float lo, float hi) {
    uint16_t *t = malloc(2 * (size_t)n);
    for (int64_t i = 0; i < n; i++) t[i] = ops_bf16_bits(unif(lo, hi));
    void *d = dput(m, t, 2 * (size_t)n);
    free(t);
    return d;
}
static iris_tensor tview(void *p, iris_dtype dt, int64_t rows, int64_t cols) {
    iris_tensor t = {.data = p, .dtype = dt, .rows = rows, .cols = cols};
    return t;
}
/* an FP8 weight [out, in] with 128x128 block scales: codes of any finite value, dequantized ~ 0.1 */
static iris_tensor drand_fp8(dev_mem *m, int64_t out, int64_t in) {
    uint8_t *w = malloc((size_t)(out * in));
    for (int64_t i = 0; i < out * in; i++) {
        uint8_t q = (uint8_t)ops_rand(&rng);
        w[i] = (q & 0x7f) == 0x7f ? q ^ 1 : q;
    }
    int64_t ns = ((out + 127) / 128) * ((in + 127) / 128);
    float *s = malloc(sizeof(float) * (size_t)ns);
    for (int64_t i = 0; i < ns; i++) s[i] = unif(0.5f, 2.0f) / 448.0f * 0.1f;
    iris_tensor t = tview(dput(m, w, (size_t)(out * in)), IRIS_DT_F8_E4M3, out, in);
    t.scale = dput(m, s, sizeof(float) * (size_t)ns);
    t.block[0] = t.block[1] = 128;
    free(w), free(s);
    return t;
}
static uint16_t *dget(iris_backend *b, const void *d, size_t n) {
    uint16_t *t = malloc(2 * n);
    if (b->sync(b) || b->download(b, t, d, 2 * n)) fprintf(stderr, "  cuda: %s\n", b->err.msg);
    return t;
}

/* One decode step of len(n_past) sequences through n_layers random layers, both ways. */
/* want_run 0: the backend must decline the step (decode_layers returns 1), nothing else checked. */
static void check_stack(iris_backend *b, int H, int FF, int nq, int nkv, int n_layers, const int *n_past, int R,
                        int want_run) {
    const int hd = 128, qw = nq * hd, kw = nkv * hd;
    const float eps = 1e-6f;
    dev_mem m = {.b = b};
    int max_blocks = 0;
    for (int s = 0; s < R; s++)
        if ((n_past[s] + 16) / 16 > max_blocks) max_blocks = (n_past[s] + 16) / 16;
    const int n_blocks = R * max_blocks + 3;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)(R * max_blocks)), meta_h[4][4], *pos = malloc(sizeof(int32_t) * 3 * (size_t)R);
    for (int i = 0; i < R * max_blocks; i++) bt[i] = (int32_t)((i * 7 + 2) % n_blocks); /* scattered, distinct */
    for (int s = 0; s < R; s++) {
        meta_h[0][s] = s;                                                           /* row_seq */
        meta_h[1][s] = n_past[s] + 1;                                               /* row_ctx */
        meta_h[2][s] = bt[s * max_blocks + n_past[s] / 16] * 16 + n_past[s] % 16; /* slot */
        for (int d = 0; d < 3; d++) pos[d * R + s] = n_past[s] + (int32_t)(ops_rand(&rng) % 5);
    }
    int dim_of[64];
    float inv[64];
    for (int j = 0; j < 64; j++) {
        dim_of[j] = j % 3 == 1 && j < 60 ? 1 : j % 3 == 2 && j < 60 ? 2 : 0;
        inv[j] = 1.0f / powf(5e6f, (float)(2 * j) / (float)hd);
    }
    void *dseq = dput(&m, meta_h[0], sizeof(int32_t) * R), *dctx = dput(&m, meta_h[1], sizeof(int32_t) * R);
    void *dslot = dput(&m, meta_h[2], sizeof(int32_t) * R), *dbt = dput(&m, bt, sizeof(int32_t) * (size_t)(R * max_blocks));
    void *dpos = dput(&m, pos, sizeof(int32_t) * 3 * (size_t)R);
    iris_attn_meta meta = {.n_rows = R, .row_seq = dseq, .row_ctx = dctx, .block_tables = dbt,
                           .max_blocks = max_blocks, .slot = dslot, .n_seqs = R};

    iris_tensor *W = malloc(sizeof(iris_tensor) * (size_t)n_layers * IRIS_DL_N);
    const iris_tensor *(*wl)[IRIS_DL_N] = malloc(sizeof *wl * (size_t)n_layers);
    for (int il = 0; il < n_layers; il++) {
        iris_tensor *w = W + (size_t)il * IRIS_DL_N;
        w[IRIS_DL_INPUT_NORM] = tview(drand_bf16(&m, H, 0.5f, 1.5f), IRIS_DT_BF16, 1, H);
        w[IRIS_DL_POST_NORM] = tview(drand_bf16(&m, H, 0.5f, 1.5f), IRIS_DT_BF16, 1, H);
        w[IRIS_DL_Q_NORM] = tview(drand_bf16(&m, hd, 0.5f, 1.5f), IRIS_DT_BF16, 1, hd);
        w[IRIS_DL_K_NORM] = tview(drand_bf16(&m, hd, 0.5f, 1.5f), IRIS_DT_BF16, 1, hd);
        w[IRIS_DL_Q] = drand_fp8(&m, qw, H), w[IRIS_DL_K] = drand_fp8(&m, kw, H), w[IRIS_DL_V] = drand_fp8(&m, kw, H);
        w[IRIS_DL_O] = drand_fp8(&m, H, qw), w[IRIS_DL_GATE] = drand_fp8(&m, FF, H), w[IRIS_DL_UP] = drand_fp8(&m, FF, H);
        w[IRIS_DL_DOWN] = drand_fp8(&m, H, FF);
        for (int i = 0; i < IRIS_DL_N; i++) wl[il][i] = &w[i];
    }
    /* the embeddings and the caches' history (random everywhere, as earlier steps left them) */
    const size_t ce = (size_t)n_blocks * 16 * kw;
    uint16_t *h0 = malloc(2 * (size_t)R * H), *c0 = malloc(2 * ce * 2 * n_layers);
    for (int64_t i = 0; i < (int64_t)R * H; i++) h0[i] = ops_bf16_bits(unif(-1, 1));
    for (size_t i = 0; i < ce * 2 * n_layers; i++) c0[i] = ops_bf16_bits(unif(-1, 1));
    uint16_t *out[2], *cache[2];
    int runs_before = iris_cuda_decode_stack_runs(b);
    for (int p = 0; p < 2; p++) { /* p = 0: the ops; 1: decode_layers */
        void *dh = dput(&m, h0, 2 * (size_t)R * H), *dc = dput(&m, c0, 2 * ce * 2 * n_layers);
        iris_kv_layer *kv = malloc(sizeof *kv * (size_t)n_layers);
        for (int il = 0; il < n_layers; il++)
            kv[il] = (iris_kv_layer){(char *)dc + 2 * ce * 2 * il, (char *)dc + 2 * ce * (2 * il + 1), IRIS_DT_BF16,
                                     n_blocks, nkv, hd};
        iris_tensor h = tview(dh, IRIS_DT_BF16, R, H), x = tview(drand_bf16(&m, (int64_t)R * H, -1, 1), IRIS_DT_BF16, R, H);
        iris_tensor q = tview(drand_bf16(&m, (int64_t)R * qw, -1, 1), IRIS_DT_BF16, R, qw);
        iris_tensor k = tview(drand_bf16(&m, (int64_t)R * kw, -1, 1), IRIS_DT_BF16, R, kw);
        iris_tensor v = tview(drand_bf16(&m, (int64_t)R * kw, -1, 1), IRIS_DT_BF16, R, kw);
        iris_tensor o = tview(drand_bf16(&m, (int64_t)R * qw, -1, 1), IRIS_DT_BF16, R, qw);
        iris_tensor g = tview(drand_bf16(&m, (int64_t)R * FF, -1, 1), IRIS_DT_BF16, R, FF);
        iris_tensor u = tview(drand_bf16(&m, (int64_t)R * FF, -1, 1), IRIS_DT_BF16, R, FF);
        int rc = 0;
        if (p == 1) {
            iris_decode_stack ds = {.n_layers = n_layers, .w = (const iris_tensor *const(*)[IRIS_DL_N])wl, .kv = kv,
                                    .h = &h, .q = &q, .k = &k, .v = &v, .o = &o, .g = &g, .eps = eps,
                                    .n_q_heads = nq, .pos = dpos, .pos_stride = R, .dim_of = dim_of,
                                    .inv_freq = inv, .meta = &meta};
            REQUIRE(b->decode_layers != NULL);
            rc = b->decode_layers(b, &ds);
            if (!want_run) {
                CHECKF(rc == 1, "decode_layers took a step of %d rows it should decline (rc %d)", R, rc);
                free(kv), free(out[0]), free(cache[0]);
                out[0] = out[1] = cache[0] = cache[1] = NULL;
                goto done;
            }
        } else {
            for (int il = 0; !rc && il < n_layers; il++) {
                const iris_tensor *const *w = wl[il];
                const iris_tensor *ws[3] = {w[IRIS_DL_Q], w[IRIS_DL_K], w[IRIS_DL_V]};
                iris_tensor *ys[3] = {&q, &k, &v};
                rc = iris_backend_add_rms_norm(b, &h, il ? &x : NULL, w[IRIS_DL_INPUT_NORM], eps, &x);
                if (!rc) rc = iris_backend_linear_n(b, &x, 3, ws, ys, NULL);
                if (!rc)
                    rc = iris_backend_qk_norm_rope_attn(b, &q, &k, &v, w[IRIS_DL_Q_NORM], w[IRIS_DL_K_NORM], eps, nq, dpos,
                                                        R, dim_of, inv, &kv[il], &meta, &o);
                if (!rc) rc = b->linear(b, &o, w[IRIS_DL_O], NULL, &x);
                if (!rc) rc = iris_backend_add_rms_norm(b, &h, &x, w[IRIS_DL_POST_NORM], eps, &x);
                if (!rc) rc = iris_backend_linear_swiglu(b, &x, w[IRIS_DL_GATE], w[IRIS_DL_UP], &g, &u, NULL);
                if (!rc) rc = b->linear(b, &g, w[IRIS_DL_DOWN], NULL, &x);
            }
            if (!rc) rc = b->add(b, &h, &x);
        }
        CHECKF(rc == 0, "%s: %s", p ? "decode_layers" : "the ops", b->err.msg);
        out[p] = dget(b, dh, (size_t)R * H);
        cache[p] = dget(b, dc, ce * 2 * n_layers);
        free(kv);
    }
    char what[160];
    int len = snprintf(what, sizeof what, "decode_layers H %d FF %d %d/%d heads, %d layers, past", H, FF, nq, nkv, n_layers);
    for (int s = 0; s < R && len < (int)sizeof what - 8; s++) len += snprintf(what + len, sizeof what - (size_t)len, " %d", n_past[s]);
    CHECKF(iris_cuda_decode_stack_runs(b) == runs_before + 1, "%s: the persistent kernel did not run", what);
    double maxref = 0, maxd = 0;
    for (int64_t i = 0; i < (int64_t)R * H; i++) {
        double r = ops_bf16_val(out[0][i]), d = fabs(ops_bf16_val(out[1][i]) - r);
        maxref = fmax(maxref, fabs(r));
        maxd = isnan(d) || d > maxd ? (isnan(d) ? INFINITY : d) : maxd;
    }
    /* the cache: the step's rows (each layer's new k and v) within the same bound, the rest as it was */
    double maxc = 0, maxcd = 0;
    int64_t moved = 0;
    for (int il = 0; il < 2 * n_layers; il++)
        for (size_t e = 0; e < ce; e++) {
            size_t i = (size_t)il * ce + e;
            int64_t sl = (int64_t)(e / kw);
            int fresh = 0;
            for (int s = 0; s < R; s++) fresh |= sl == meta_h[2][s];
            if (!fresh) {
                moved += cache[0][i] != c0[i] || cache[1][i] != c0[i];
                continue;
            }
            double r = ops_bf16_val(cache[0][i]), d = fabs(ops_bf16_val(cache[1][i]) - r);
            maxc = fmax(maxc, fabs(r));
            maxcd = isnan(d) || d > maxcd ? (isnan(d) ? INFINITY : d) : maxcd;
        }
    printf("    %s: h max|d| %.3g of max %.3g, new cache rows max|d| %.3g of max %.3g\n", what, maxd, maxref, maxcd, maxc);
    CHECKF(maxd <= 1e-2 * maxref, "%s: h differs by %g (max %g)", what, maxd, maxref);
    CHECKF(maxcd <= 1e-2 * maxc, "%s: new cache rows differ by %g (max %g)", what, maxcd, maxc);
    CHECKF(moved == 0, "%s: %lld cache values outside the step's slots changed", what, (long long)moved);
done:
    for (int i = 0; i < m.n; i++) b->free(b, m.bufs[i]);
    free(bt), free(pos), free(W), free(wl), free(h0), free(c0);
    for (int p = 0; p < 2; p++) free(out[p]), free(cache[p]);
}

IRIS_TEST(gpu_ops_decode_stack) {
    OPS_NEED_GPU();
    iris_err err = {0};
    iris_backend *b = NULL;
    REQUIRE(iris_backend_cuda_open(0, (size_t)2 << 30, &b, &err) == 0);
    if (iris_cuda_set_decode_stack(b, 1)) { /* opt-in (cuda_decode_launch.cu) */
        b->destroy(b);
        IRIS_TEST_SKIP("the kernels were built without sm_90 code (JIT from older PTX): no persistent decode kernel");
    }
    const int p1[] = {1023}, p3[] = {0, 37, 700}, p4[] = {2999, 15, 16, 1}, p0[] = {0};
    check_stack(b, 2048, 6144, 16, 8, 2, p1, 1, 1); /* 2B's shapes */
    check_stack(b, 2048, 6144, 16, 8, 2, p0, 1, 1);
    check_stack(b, 2048, 6144, 16, 8, 2, p3, 3, 1);
    int sms = 0;
    REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess && sms > 0);
    CHECKF(iris_cuda_decode_split_last(b) == iris_cuda_decode_split_default(sms, 2048, 6144, 16, 8),
           "2B: stream-K phases %#x", iris_cuda_decode_split_last(b));
    check_stack(b, 2560, 9728, 32, 8, 2, p1, 1, 1); /* 4B's */
    CHECKF(iris_cuda_decode_split_last(b) == iris_cuda_decode_split_default(sms, 2560, 9728, 32, 8),
           "4B: stream-K phases %#x", iris_cuda_decode_split_last(b));
    /* the rule: on 132 SMs (H100, H200) 4B's o_proj (160 tiles of 8 chunks) and down_proj (160 of
     * 19), while 2B's share out; on 30 (an RTX 5060) 2B's down_proj alone would qualify, a mask
     * without its own kernel instance: none; on 114 (an H100 PCIe) 4B's q/k/v too, which the default
     * leaves whole; past 256 SMs none (the pieces' sums would not fit) */
    CHECK(iris_cuda_decode_split_default(132, 2560, 9728, 32, 8) == 0xa);
    CHECK(iris_cuda_decode_split_default(132, 2048, 6144, 16, 8) == 0);
    CHECK(iris_cuda_decode_split_default(30, 2048, 6144, 16, 8) == 0);
    CHECK(iris_cuda_decode_split_default(114, 2560, 9728, 32, 8) == 0xa);
    CHECK(iris_cuda_decode_split_default(300, 2560, 9728, 32, 8) == 0);
    check_stack(b, 2560, 9728, 32, 8, 2, p4, 4, 1);
    check_stack(b, 128, 384, 2, 1, 3, p3, 3, 1);    /* narrow (the tiny synth shape): 128-column chunks */
    /* GQA groups of 1 and 3 (the attention walk's lanes hold a key's quarter for every head of the group) */
    check_stack(b, 2048, 6144, 8, 8, 2, p3, 3, 1);
    check_stack(b, 2048, 6144, 24, 8, 2, p4, 4, 1);
    /* every phase stream-K (tiles cut between CTAs, each finished by its first piece's CTA), and none */
    iris_cuda_set_decode_split(b, 15);
    check_stack(b, 2048, 6144, 16, 8, 2, p3, 3, 1);
    CHECK(iris_cuda_decode_split_last(b) == 15);
    check_stack(b, 2560, 9728, 32, 8, 2, p1, 1, 1);
    check_stack(b, 2560, 9728, 32, 8, 2, p4, 4, 1);
    CHECK(iris_cuda_decode_split_last(b) == 15);
    iris_cuda_set_decode_split(b, 0);
    check_stack(b, 2560, 9728, 32, 8, 2, p4, 4, 1);
    CHECK(iris_cuda_decode_split_last(b) == 0);
    iris_cuda_set_decode_split(b, -1);
    /* an attention item of more keys than the block-table entries the kernel keeps in shared memory
     * (64 blocks): row 0's items read their entries from global memory, row 1's from the copy */
    const int plong[] = {17000, 5};
    check_stack(b, 2048, 6144, 16, 8, 2, plong, 2, 1);
    /* the default takes, for layers under 64 MiB, 1 row at any length, 2 rows while the block
     * tables are within 8,448 tokens, 3 within 3,200, 4 within 2,176; for larger layers 1-4 rows at
     * any length (cuda_decode_launch.cu) */
    iris_cuda_set_decode_stack(b, -1);
    const int p2d[] = {8447, 5}, p2l[] = {8448, 5}, p3d[] = {3199, 5, 9}, p3l[] = {3200, 5, 9};
    const int p4d[] = {2175, 5, 9, 1}, p4l[] = {2176, 5, 9, 1};
    check_stack(b, 2048, 6144, 16, 8, 2, plong, 1, 1); /* one row of 17,001 tokens */
    check_stack(b, 2048, 6144, 16, 8, 2, p2d, 2, 1);
    check_stack(b, 2048, 6144, 16, 8, 2, p2l, 2, 0);
    check_stack(b, 2048, 6144, 16, 8, 2, p3d, 3, 1);
    check_stack(b, 2048, 6144, 16, 8, 2, p3l, 3, 0);
    check_stack(b, 2048, 6144, 16, 8, 2, p4d, 4, 1);
    check_stack(b, 2048, 6144, 16, 8, 2, p4l, 4, 0);
    check_stack(b, 2560, 9728, 32, 8, 2, plong, 2, 1); /* two rows, one of 17,001 tokens */
    check_stack(b, 2560, 9728, 32, 8, 2, p4, 4, 1);
    iris_cuda_set_decode_stack(b, 1);
    /* what it declines leaves the step to the ops: more than 4 rows */
    iris_tensor h = tview(NULL, IRIS_DT_BF16, 5, 2048);
    iris_attn_meta meta = {.n_rows = 5, .max_blocks = 1, .n_seqs = 5};
    iris_decode_stack ds = {.n_layers = 1, .h = &h, .meta = &meta, .n_q_heads = 16};
    CHECK(b->decode_layers(b, &ds) == 1);
    /* and everything when it is off (the default) */
    iris_cuda_set_decode_stack(b, 0);
    meta.n_rows = meta.n_seqs = 1;
    CHECK(b->decode_layers(b, &ds) == 1);
    b->destroy(b);
}
#else
IRIS_TEST(gpu_ops_decode_stack_not_built) { IRIS_TEST_SKIP("built without CUDA"); }
#endif
