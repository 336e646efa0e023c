/* test_ops_attn.c: the CUDA attention ops (paged attention for prefill and decode, with BF16
 * and E4M3 caches and both flash kernels; vision segment attention) and the fused ops around
 * them (add_rms_norm, qk_norm_rope_kv, qk_norm_rope_attn) checked
 * against the CPU backend (the numeric reference) on random inputs of odd sizes, with the
 * helpers of ops_util.h; part of build/iris-test-gpu (not of `make test`: CI has no GPU), run by
 * scripts/gpu-check.  Without a CUDA device every test is skipped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "tools/quantize.h"
#include "ops_util.h"
#include "test.h"

#ifdef IRIS_CUDA
#include "backend/cuda/cuda_info.h"
#include "backend/cuda/cuda_testing.h"

/* ---- paged attention ---------------------------------------------------------------------- */

typedef struct {
    int n_past, n_new;
} step_seq;

static int g_impl; /* flash kernel under test: 0 the default (wgmma where it runs, else mma.sync), 1 WMMA,
                    * 2-4 the mma kernel's other paged layouts, 5 mma.sync's default layout */
static int g_kv8;  /* the caches hold E4M3 codes (--kv-cache-dtype fp8) */
static int g_nseqs = 1; /* CUDA's meta says how many sequences the step has (n_seqs), else 0 */
static int g_layouts; /* check_paged also runs impls 2, 3 and 4 and wants g_impl 0's bits from them */
static int g_no_cpu;  /* check_paged skips the CPU reference (long steps at full head counts: bits only) */
static int g_lone;    /* the meta lists the attention tiles and lone rows (iris_attn_meta), as the runner's does */
static const char *const impl_name[] = {"", " (wmma)", " (mma, tiles in order)", " (mma, 2 heads a CTA)",
                                        " (mma, 2 heads a CTA, 3 stages)", " (mma)"};

/* n bytes of device memory, downloaded. */
static uint8_t *dev_read_bytes(const void *d, size_t n) {
    uint8_t *t = malloc(n ? n : 1);
    int rc = ops_cuda->sync(ops_cuda);
    if (!rc) rc = ops_cuda->download(ops_cuda, t, d, n);
    if (rc) fprintf(stderr, "  cuda: %s\n", ops_cuda->err.msg), memset(t, 0xff, n);
    return t;
}

/* One step over sequences that bring n_new rows after n_past cached tokens: the
 * cache is filled through kv_write (history and new rows alike), then attention
 * of the new rows is compared. */
static void check_paged(const step_seq *ss, int n_seqs, int nq, int nkv, int hd) {
    int width = nkv * hd, max_blocks = 0, n_hist = 0, n_rows = 0;
    for (int s = 0; s < n_seqs; s++) {
        int nb = (ss[s].n_past + ss[s].n_new + 15) / 16;
        if (nb > max_blocks) max_blocks = nb;
        n_hist += ss[s].n_past + ss[s].n_new;
        n_rows += ss[s].n_new;
    }
    int n_blocks = n_seqs * max_blocks + 3;
    /* Block tables: a random permutation of the pool, so neighbouring blocks are far apart. */
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)n_blocks), *bt = malloc(sizeof(int32_t) * (size_t)(n_seqs * max_blocks));
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)(ops_rnd_u32() % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int i = 0; i < n_seqs * max_blocks; i++) bt[i] = perm[i];
    /* Every token of every sequence: its slot, K and V. */
    int32_t *slot_all = malloc(sizeof(int32_t) * (size_t)n_hist);
    int32_t *row_seq = malloc(sizeof(int32_t) * (size_t)n_rows), *row_ctx = malloc(sizeof(int32_t) * (size_t)n_rows);
    int32_t *slot_new = malloc(sizeof(int32_t) * (size_t)n_rows);
    int t = 0, r = 0;
    for (int s = 0; s < n_seqs; s++)
        for (int j = 0; j < ss[s].n_past + ss[s].n_new; j++, t++) {
            slot_all[t] = bt[s * max_blocks + j / 16] * 16 + j % 16;
            if (j >= ss[s].n_past) {
                row_seq[r] = s, row_ctx[r] = j + 1, slot_new[r] = slot_all[t];
                r++;
            }
        }
    float *k = ops_rnd_vec((int64_t)n_hist * width, -1, 1), *v = ops_rnd_vec((int64_t)n_hist * width, -1, 1);
    float *q = ops_rnd_vec((int64_t)n_rows * nq * hd, -1.5f, 1.5f);

    /* CPU */
    /* (k and v are bf16 values: an E4M3 cache gets the same codes on both backends) */
    size_t ces = g_kv8 ? 1 : sizeof(float);
    float *ck = NULL, *cv = NULL, *ref = NULL;
    if (!g_no_cpu) {
        ck = calloc((size_t)n_blocks * 16 * width, ces), cv = calloc((size_t)n_blocks * 16 * width, ces);
        iris_kv_layer ckv = {ck, cv, g_kv8 ? IRIS_DT_F8_E4M3 : IRIS_DT_F32, n_blocks, nkv, hd};
        iris_attn_meta hm = {.n_rows = n_hist, .block_tables = bt, .max_blocks = max_blocks, .slot = slot_all};
        iris_tensor tk = ops_view(k, IRIS_DT_F32, n_hist, width, 0), tv = ops_view(v, IRIS_DT_F32, n_hist, width, 0);
        REQUIRE(ops_cpu->kv_write(ops_cpu, &ckv, &tk, &tv, &hm) == 0);
        ref = malloc(sizeof(float) * (size_t)n_rows * nq * hd);
        iris_attn_meta cm = {.n_rows = n_rows, .row_seq = row_seq, .row_ctx = row_ctx, .block_tables = bt,
                             .max_blocks = max_blocks, .slot = slot_new};
        iris_tensor cq = ops_view(q, IRIS_DT_F32, n_rows, (int64_t)nq * hd, 0);
        iris_tensor co = ops_view(ref, IRIS_DT_F32, n_rows, (int64_t)nq * hd, 0);
        REQUIRE(ops_cpu->attn_paged(ops_cpu, &cq, &ckv, &cm, nq, &co) == 0);
    }

    /* CUDA */
    size_t cache_elems = (size_t)n_blocks * 16 * width;
    void *gk = ops_dev_poison((int64_t)cache_elems), *gv = ops_dev_poison((int64_t)cache_elems);
    iris_kv_layer gkv = {gk, gv, g_kv8 ? IRIS_DT_F8_E4M3 : IRIS_DT_BF16, n_blocks, nkv, hd};
    void *d_bt = ops_dev_copy(bt, sizeof(int32_t) * (size_t)(n_seqs * max_blocks));
    void *d_slot_all = ops_dev_copy(slot_all, sizeof(int32_t) * (size_t)n_hist);
    void *d_row_seq = ops_dev_copy(row_seq, sizeof(int32_t) * (size_t)n_rows), *d_row_ctx = ops_dev_copy(row_ctx, sizeof(int32_t) * (size_t)n_rows);
    void *d_slot_new = ops_dev_copy(slot_new, sizeof(int32_t) * (size_t)n_rows);
    void *dk = ops_dev_bf16(k, (int64_t)n_hist * width), *dv = ops_dev_bf16(v, (int64_t)n_hist * width);
    iris_attn_meta ghm = {.n_rows = n_hist, .block_tables = d_bt, .max_blocks = max_blocks, .slot = d_slot_all};
    iris_tensor gtk = ops_view(dk, IRIS_DT_BF16, n_hist, width, 0), gtv = ops_view(dv, IRIS_DT_BF16, n_hist, width, 0);
    CHECKF(ops_cuda->kv_write(ops_cuda, &gkv, &gtk, &gtv, &ghm) == 0, "%s", ops_cuda->err.msg);
    void *dq = ops_dev_bf16(q, (int64_t)n_rows * nq * hd), *dout = ops_dev_poison((int64_t)n_rows * nq * hd);
    iris_attn_meta gm = {.n_rows = n_rows, .row_seq = d_row_seq, .row_ctx = d_row_ctx, .block_tables = d_bt,
                         .max_blocks = max_blocks, .slot = d_slot_new, .n_seqs = g_nseqs ? n_seqs : 0};
    int32_t *lone = malloc(sizeof(int32_t) * (size_t)n_rows * 2);
    void *d_lone = NULL;
    if (g_lone) {
        gm.n_lone = iris_attn_tiles(row_seq, n_rows, lone, &gm.n_tiles, lone + n_rows);
        d_lone = ops_dev_copy(lone, sizeof(int32_t) * (size_t)n_rows * 2);
        gm.tiles = d_lone;
        gm.lone_rows = (const int32_t *)d_lone + n_rows;
    }
    iris_tensor gq = ops_view(dq, IRIS_DT_BF16, n_rows, (int64_t)nq * hd, 0), go = ops_view(dout, IRIS_DT_BF16, n_rows, (int64_t)nq * hd, 0);
    int rc = ops_cuda->attn_paged(ops_cuda, &gq, &gkv, &gm, nq, &go);
    CHECKF(rc == 0, "%s", ops_cuda->err.msg);
    float *got = ops_dev_read_bf16(dout, (int64_t)n_rows * nq * hd);
    char what[128];
    int len = snprintf(what, sizeof what, "attn_paged%s%s%s %d/%d x %d:", impl_name[g_impl], g_kv8 ? " (fp8 cache)" : "",
                       g_lone ? " (lone rows)" : "", nq, nkv, hd);
    for (int s = 0; s < n_seqs && len < (int)sizeof what - 16; s++)
        len += snprintf(what + len, sizeof what - (size_t)len, " %d+%d", ss[s].n_past, ss[s].n_new);
    /* P is rounded to bf16 in the flash kernel: 2^-9 of each weight, so at most that of max|v|. */
    if (!g_no_cpu)
        ops_compare(what, got, (int64_t)nq * hd, ref, (int64_t)nq * hd, n_rows, (int64_t)nq * hd, 4e-3f, 4e-3f);
    /* The earlier layouts of the mma kernel compute each row as its default does (impl 5: the
     * default's own layout where the default is the wgmma kernel): the same bits; the default
     * within the CPU's tolerance of it (long steps have no CPU reference). */
    void *mma = NULL;
    if (g_layouts) {
        mma = ops_dev_poison((int64_t)n_rows * nq * hd);
        iris_tensor gm5 = ops_view(mma, IRIS_DT_BF16, n_rows, (int64_t)nq * hd, 0);
        iris_cuda_set_attn_impl(ops_cuda, 5);
        rc = ops_cuda->attn_paged(ops_cuda, &gq, &gkv, &gm, nq, &gm5);
        iris_cuda_set_attn_impl(ops_cuda, g_impl);
        CHECKF(rc == 0, "%s", ops_cuda->err.msg);
        float *m5 = ops_dev_read_bf16(mma, (int64_t)n_rows * nq * hd);
        char tag[160];
        snprintf(tag, sizeof tag, "%s vs mma.sync", what);
        ops_compare(tag, got, (int64_t)nq * hd, m5, (int64_t)nq * hd, n_rows, (int64_t)nq * hd, 4e-3f, 4e-3f);
        free(m5);
    }
    for (int impl = 2; g_layouts && impl < 5; impl++) {
        void *alt = ops_dev_poison((int64_t)n_rows * nq * hd);
        iris_tensor ga = ops_view(alt, IRIS_DT_BF16, n_rows, (int64_t)nq * hd, 0);
        iris_cuda_set_attn_impl(ops_cuda, impl);
        rc = ops_cuda->attn_paged(ops_cuda, &gq, &gkv, &gm, nq, &ga);
        iris_cuda_set_attn_impl(ops_cuda, g_impl);
        CHECKF(rc == 0, "%s", ops_cuda->err.msg);
        char tag[160];
        snprintf(tag, sizeof tag, "%s vs%s", what, impl_name[impl]);
        ops_same_bits(mma, alt, (int64_t)n_rows * nq * hd, tag);
        ops_cuda->free(ops_cuda, alt);
    }
    if (mma) ops_cuda->free(ops_cuda, mma);

    /* The cache itself holds exactly the written rows (E4M3: the CPU's codes, byte for byte). */
    int kv_ok = 1;
    if (g_kv8 && !g_no_cpu) {
        uint8_t *gk8 = dev_read_bytes(gk, cache_elems), *gv8 = dev_read_bytes(gv, cache_elems);
        for (int i = 0; i < n_hist && kv_ok; i++)
            for (int e = 0; e < width; e++) {
                size_t at = (size_t)slot_all[i] * width + e;
                if (gk8[at] != ((uint8_t *)ck)[at] || gv8[at] != ((uint8_t *)cv)[at]) kv_ok = 0;
            }
        free(gk8), free(gv8);
    } else if (!g_kv8) {
        float *cache_k = ops_dev_read_bf16(gk, (int64_t)cache_elems);
        for (int i = 0; i < n_hist && kv_ok; i++)
            for (int e = 0; e < width; e++)
                if (cache_k[(size_t)slot_all[i] * width + e] != k[(size_t)i * width + e]) kv_ok = 0;
        free(cache_k);
    }
    CHECKF(kv_ok, "kv_write%s: cache rows differ from the written k, v", g_kv8 ? " (fp8)" : "");

    void *bufs[] = {gk, gv, d_bt, d_slot_all, d_row_seq, d_row_ctx, d_slot_new, dk, dv, dq, dout, d_lone};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) ops_cuda->free(ops_cuda, bufs[i]);
    free(lone), free(perm), free(bt), free(slot_all), free(row_seq), free(row_ctx), free(slot_new), free(k), free(v), free(q);
    free(ck), free(cv), free(ref), free(got);
}

IRIS_TEST(gpu_ops_attn_paged) {
    OPS_BACKENDS();
    /* decode rows, one per sequence; a long one (split over the context) */
    step_seq d1[] = {{0, 1}, {36, 1}, {700, 1}};
    check_paged(d1, 3, 16, 8, 128);
    check_paged(d1, 3, 6, 2, 128);
    check_paged(d1, 3, 4, 1, 16);
    step_seq d2[] = {{2999, 1}};
    check_paged(d2, 1, 32, 8, 128);
    /* 12 rows of GQA groups of 4 at long contexts: split for 2 CTAs an SM, not 4 (the rule's edges
     * below: 4B's groups measured faster so up to 24 rows, 2B's groups of 2 from 32 rows on) */
    step_seq d3[12];
    for (int i = 0; i < 12; i++) d3[i] = (step_seq){300 + 97 * i, 1};
    check_paged(d3, 12, 32, 8, 128);
    step_seq d4[40]; /* and 40 rows of groups of 2: 2 an SM too */
    for (int i = 0; i < 40; i++) d4[i] = (step_seq){200 + 37 * i, 1};
    check_paged(d4, 40, 16, 8, 128);
    /* the tensor-core decode kernel: groups of 4 from 8 rows (d3 above: split contexts); 9 decode
     * rows beside a prefill whose 6-row tail the decode kernel takes too, rows listed and not */
    CHECK(iris_cuda_attn_tc(8, 4, 128, 1) && iris_cuda_attn_tc(64, 4, 128, 1));
    CHECK(!iris_cuda_attn_tc(7, 4, 128, 1) && !iris_cuda_attn_tc(64, 2, 128, 1) && !iris_cuda_attn_tc(64, 8, 128, 1) &&
          !iris_cuda_attn_tc(64, 4, 64, 1) && !iris_cuda_attn_tc(64, 4, 128, 0));
    step_seq m1[] = {{0, 70}, {5, 1}, {90, 1}, {700, 1}, {17, 1}, {33, 1}, {1, 1}, {2000, 1}, {64, 1}, {300, 1}};
    check_paged(m1, 10, 32, 8, 128);
    g_lone = 1;
    check_paged(m1, 10, 32, 8, 128);
    g_lone = 0;
    CHECK(iris_cuda_attn_ctas_per_sm(1, 2) == 2 && iris_cuda_attn_ctas_per_sm(1, 4) == 2);
    CHECK(iris_cuda_attn_ctas_per_sm(8, 2) == 4 && iris_cuda_attn_ctas_per_sm(31, 2) == 4);
    CHECK(iris_cuda_attn_ctas_per_sm(32, 2) == 2 && iris_cuda_attn_ctas_per_sm(64, 2) == 2);
    CHECK(iris_cuda_attn_ctas_per_sm(8, 4) == 2 && iris_cuda_attn_ctas_per_sm(24, 4) == 2);
    CHECK(iris_cuda_attn_ctas_per_sm(25, 4) == 4 && iris_cuda_attn_ctas_per_sm(64, 4) == 4);
    /* the tensor-core kernel's splits on 132 SMs (4B: 8 kv heads a row): 64 rows 1 (1.94 waves of its
     * 2 CTAs an SM), 48 rows 2 (2.9 waves, not 1.45), 32 rows 2, 8 rows 5 (the fewest to fill them) */
    CHECK(iris_cuda_attn_tc_splits(512, 132) == 1 && iris_cuda_attn_tc_splits(384, 132) == 2);
    CHECK(iris_cuda_attn_tc_splits(256, 132) == 2 && iris_cuda_attn_tc_splits(64, 132) == 5);
    CHECK(iris_cuda_attn_tc_splits(2048, 132) == 1);
    /* prefill: a chunk after a cached prefix, a decode row, a short prompt, a long one */
    step_seq p1[] = {{20, 150}, {40, 1}, {0, 9}, {0, 200}};
    step_seq p2[] = {{0, 5}, {0, 3}};
    /* one sequence's prefill: the decode kernel launched only on a tail of < 8 rows (69 = 64 + 5), on
     * none (136 = 2 x 64 + 8: the flash kernel takes the tail; 128), and on every row when the
     * sequence count is not given */
    step_seq s1[] = {{0, 69}}, s2[] = {{30, 136}}, s3[] = {{17, 128}};
    for (g_nseqs = 1; g_nseqs >= 0; g_nseqs--) {
        check_paged(s1, 1, 16, 8, 128);
        check_paged(s1, 1, 4, 1, 16);
    }
    g_nseqs = 1;
    check_paged(s2, 1, 6, 2, 128);
    check_paged(s3, 1, 16, 8, 128);
    for (g_impl = 0; g_impl < 6; g_impl++) {
        iris_cuda_set_attn_impl(ops_cuda, g_impl);
        check_paged(p1, 4, 16, 8, 128);
        check_paged(p1, 4, 6, 2, 128);
        check_paged(p1, 4, 4, 4, 64);
        check_paged(p1, 4, 8, 2, 32);
        check_paged(p1, 4, 4, 1, 16);
        check_paged(p2, 2, 8, 8, 256);
    }
    g_impl = 0;
    iris_cuda_set_attn_impl(ops_cuda, 0);
    /* the attention tiles and lone rows listed, as the runner lists them: each sequence's tiles from
     * its first row for the flash kernels (every layout, and the WMMA one, which drops the lists),
     * the decode kernel over the lone rows alone (every row must come from one of them: the output
     * starts poisoned); sequences that straddle the old 64-row grid, tails of fewer than 8 rows and of
     * 8 or more, decode rows, a step of decode rows and one short tail (no tile at all) */
    step_seq l1[] = {{0, 70}, {12, 1}, {5, 1}, {0, 130}}, l2[] = {{3, 64}, {64, 64}}, l3[] = {{9, 1}, {0, 5}, {30, 1}};
    g_lone = 1;
    for (g_impl = 0; g_impl < 6; g_impl++) {
        iris_cuda_set_attn_impl(ops_cuda, g_impl);
        check_paged(p1, 4, 16, 8, 128);
        check_paged(l1, 4, 16, 8, 128);
        check_paged(l1, 4, 6, 2, 128);
    }
    g_impl = 0;
    iris_cuda_set_attn_impl(ops_cuda, 0);
    check_paged(p1, 4, 4, 1, 16);
    check_paged(l2, 2, 16, 8, 128);
    check_paged(l3, 3, 16, 8, 128);
    check_paged(s1, 1, 16, 8, 128);
    check_paged(p2, 2, 8, 8, 256);
    g_kv8 = 1;
    check_paged(l1, 4, 16, 8, 128);
    g_kv8 = 0, g_lone = 0;
    /* an E4M3 cache: decode rows (split and not) and prefill tiles, both flash kernels asked for
     * (the WMMA one hands an E4M3 cache to the mma kernel) */
    g_kv8 = 1;
    check_paged(d1, 3, 16, 8, 128);
    check_paged(d1, 3, 4, 1, 16);
    check_paged(d2, 1, 32, 8, 128);
    for (g_impl = 0; g_impl < 2; g_impl++) {
        iris_cuda_set_attn_impl(ops_cuda, g_impl);
        check_paged(p1, 4, 16, 8, 128);
        check_paged(p1, 4, 8, 2, 32);
        check_paged(p2, 2, 8, 8, 256);
    }
    g_kv8 = 0, g_impl = 0;
    iris_cuda_set_attn_impl(ops_cuda, 0);
}

/* A long prompt as the engine prefills it: 11,982 tokens (a 30-second 720p clip's prompt at the
 * default sampling) in steps of 8,192 rows (an 80 GB card's token budget), so the second step's
 * 3,790 rows see 8,193 to 11,982 keys through the block table.  Against the CPU at small head
 * counts and few rows at the end of that context (GQA groups of 2 and 4: impls 3 and 4 take two
 * query heads a CTA; of 3: one); both steps at 2B's and 4B's heads with every mma layout against
 * the default bit for bit; the multi-sequence steps of gpu_ops_attn_paged too. */
IRIS_TEST(gpu_ops_attn_paged_long) {
    OPS_BACKENDS();
    step_seq c1[] = {{0, 8192}}, c2[] = {{8192, 3790}}, c3[] = {{11000, 982}}, c4[] = {{8192, 200}};
    step_seq p1[] = {{20, 150}, {40, 1}, {0, 9}, {0, 200}}, p3[] = {{700, 77}, {0, 64}, {5, 130}};
    g_layouts = 1;
    check_paged(c3, 1, 4, 2, 128);
    check_paged(c4, 1, 8, 2, 64);
    check_paged(c3, 1, 6, 2, 128);
    check_paged(p1, 4, 16, 8, 128);
    check_paged(p1, 4, 8, 2, 32);
    check_paged(p3, 3, 16, 8, 128);
    check_paged(p3, 3, 4, 1, 16);
    g_no_cpu = 1;
    check_paged(c1, 1, 16, 8, 128);
    check_paged(c2, 1, 16, 8, 128);
    check_paged(c2, 1, 32, 8, 128);
    g_kv8 = 1;
    check_paged(c2, 1, 16, 8, 128);
    g_kv8 = 0;
    g_no_cpu = 0;
    g_kv8 = 1;
    check_paged(c3, 1, 4, 2, 128);
    g_kv8 = 0;
    g_layouts = 0;
}

/* ---- fused ops: CUDA's kernels against the CPU's plain sequence --------------------------------- */

static void check_add_rms(int64_t rows, int64_t cols, int with_d) {
    float *x = ops_rnd_vec(rows * cols, -2, 2), *d = ops_rnd_vec(rows * cols, -2, 2), *w = ops_rnd_vec(cols, 0.5f, 1.5f);
    float *rx = malloc(sizeof(float) * (size_t)(rows * cols)), *ry = malloc(sizeof(float) * (size_t)(rows * cols));
    /* the CPU's residual add is fp32; CUDA rounds it to bf16 (as the plain CUDA add): feed the CPU the rounded sum */
    for (int64_t i = 0; i < rows * cols; i++) rx[i] = with_d ? ops_round_bf(x[i] + d[i]) : x[i];
    iris_tensor cx = ops_view(rx, IRIS_DT_F32, rows, cols, 0), cw = ops_view(w, IRIS_DT_F32, 1, cols, 0), cy = ops_view(ry, IRIS_DT_F32, rows, cols, 0);
    REQUIRE(iris_backend_add_rms_norm(ops_cpu, &cx, NULL, &cw, 1e-6f, &cy) == 0);
    void *dx = ops_dev_bf16(x, rows * cols), *dd = ops_dev_bf16(d, rows * cols), *dw = ops_dev_bf16(w, cols), *dy = ops_dev_poison(rows * cols);
    iris_tensor gx = ops_view(dx, IRIS_DT_BF16, rows, cols, 0), gd = ops_view(dd, IRIS_DT_BF16, rows, cols, 0),
                gw = ops_view(dw, IRIS_DT_BF16, 1, cols, 0), gy = ops_view(dy, IRIS_DT_BF16, rows, cols, 0);
    REQUIRE(ops_cuda->add_rms_norm != NULL);
    CHECKF(iris_backend_add_rms_norm(ops_cuda, &gx, with_d ? &gd : NULL, &gw, 1e-6f, &gy) == 0, "%s", ops_cuda->err.msg);
    float *gotx = ops_dev_read_bf16(dx, rows * cols), *goty = ops_dev_read_bf16(dy, rows * cols);
    char what[96];
    snprintf(what, sizeof what, "add_rms_norm [%lld,%lld]%s: x", (long long)rows, (long long)cols, with_d ? "" : " (no d)");
    ops_compare(what, gotx, cols, rx, cols, rows, cols, 0, 0);
    snprintf(what, sizeof what, "add_rms_norm [%lld,%lld]%s: y", (long long)rows, (long long)cols, with_d ? "" : " (no d)");
    ops_compare(what, goty, cols, ry, cols, rows, cols, 8e-3f, 1e-3f);
    ops_cuda->free(ops_cuda, dx), ops_cuda->free(ops_cuda, dd), ops_cuda->free(ops_cuda, dw), ops_cuda->free(ops_cuda, dy);
    free(x), free(d), free(w), free(rx), free(ry), free(gotx), free(goty);
}

/* Interleaved-MRoPE tables for head size hd as Qwen3-VL's text model has them: rotary pair j takes
 * position component dim_of[j] (t, h, w interleaved over the first 60 pairs), at frequency inv[j]. */
static void mrope_tables(int hd, int *dim_of, float *inv) {
    for (int j = 0; j < hd / 2; j++) {
        dim_of[j] = j % 3 == 1 && j < 60 ? 1 : j % 3 == 2 && j < 60 ? 2 : 0;
        inv[j] = 1.0f / powf(5e6f, (float)(2 * j) / (float)hd);
    }
}

/* n distinct cache slots of the s there are (n <= s), scattered: a stride prime to s, backwards. */
static void scatter_slots(int32_t *slot, int n, int s) {
    int st = 3;
    for (;;) { /* the first odd stride whose greatest common divisor with s is 1 */
        int a = s, b = st;
        while (b) {
            int t = a % b;
            a = b, b = t;
        }
        if (a == 1) break;
        st += 2;
    }
    for (int i = 0; i < n; i++) slot[i] = (int32_t)((s - 1 - (int64_t)i * st % s + s) % s);
}

/* A q/k prologue test's inputs: n rows of nq + nkv heads of hd, q, k and v in [-2, 2), norm weights
 * in [0.5, 1.5), positions under 5,000, n distinct scattered slots of a cache of n_blocks blocks,
 * Qwen3-VL's MRoPE tables. */
typedef struct {
    int n_blocks;
    int64_t wq, wk;
    float *q, *k, *v, *qw, *kw;
    int32_t *pos, *slot;
    int dim_of[128];
    float inv[128];
} qk_case;

static qk_case qk_case_make(int n, int nq, int nkv, int hd) {
    qk_case c = {.n_blocks = (n + 15) / 16 + 2, .wq = (int64_t)nq * hd, .wk = (int64_t)nkv * hd};
    c.q = ops_rnd_vec(n * c.wq, -2, 2), c.k = ops_rnd_vec(n * c.wk, -2, 2), c.v = ops_rnd_vec(n * c.wk, -2, 2);
    c.qw = ops_rnd_vec(hd, 0.5f, 1.5f), c.kw = ops_rnd_vec(hd, 0.5f, 1.5f);
    c.pos = malloc(sizeof(int32_t) * 3 * (size_t)n), c.slot = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < 3 * n; i++) c.pos[i] = (int32_t)(ops_rnd_u32() % 5000);
    scatter_slots(c.slot, n, c.n_blocks * 16);
    mrope_tables(hd, c.dim_of, c.inv);
    return c;
}

static void qk_case_free(qk_case *c) {
    free(c->q), free(c->k), free(c->v), free(c->qw), free(c->kw), free(c->pos), free(c->slot);
}

static void check_qk_prologue(int n, int nq, int nkv, int hd) {
    qk_case c = qk_case_make(n, nq, nkv, hd);
    const int n_blocks = c.n_blocks, *dim_of = c.dim_of;
    const int64_t wq = c.wq, wk = c.wk;
    float *q = c.q, *k = c.k, *v = c.v, *qw = c.qw, *kw = c.kw, *inv = c.inv;
    int32_t *pos = c.pos, *slot = c.slot;
    size_t ce = (size_t)n_blocks * 16 * wk;
    float *rq = malloc(sizeof(float) * (size_t)(n * wq)), *rk = malloc(sizeof(float) * (size_t)(n * wk));
    memcpy(rq, q, sizeof(float) * (size_t)(n * wq));
    memcpy(rk, k, sizeof(float) * (size_t)(n * wk));
    float *ck = calloc(ce, sizeof(float)), *cv = calloc(ce, sizeof(float));
    iris_kv_layer ckv = {ck, cv, IRIS_DT_F32, n_blocks, nkv, hd};
    iris_attn_meta cm = {.n_rows = n, .slot = slot};
    iris_tensor cq = ops_view(rq, IRIS_DT_F32, n, wq, 0), ck_ = ops_view(rk, IRIS_DT_F32, n, wk, 0), cv_ = ops_view(v, IRIS_DT_F32, n, wk, 0);
    iris_tensor cqw = ops_view(qw, IRIS_DT_F32, 1, hd, 0), ckw = ops_view(kw, IRIS_DT_F32, 1, hd, 0);
    REQUIRE(iris_backend_qk_norm_rope_kv(ops_cpu, &cq, &ck_, &cv_, &cqw, &ckw, 1e-6f, nq, pos, n, dim_of, inv, &ckv, &cm) == 0);

    void *dq = ops_dev_bf16(q, n * wq), *dk = ops_dev_bf16(k, n * wk), *dv = ops_dev_bf16(v, n * wk);
    void *dqw = ops_dev_bf16(qw, hd), *dkw = ops_dev_bf16(kw, hd), *dpos = ops_dev_copy(pos, sizeof(int32_t) * 3 * (size_t)n);
    void *dslot = ops_dev_copy(slot, sizeof(int32_t) * (size_t)n), *gk = ops_dev_poison((int64_t)ce), *gv = ops_dev_poison((int64_t)ce);
    iris_kv_layer gkv = {gk, gv, g_kv8 ? IRIS_DT_F8_E4M3 : IRIS_DT_BF16, n_blocks, nkv, hd};
    iris_attn_meta gm = {.n_rows = n, .slot = dslot};
    iris_tensor gq = ops_view(dq, IRIS_DT_BF16, n, wq, 0), gk_ = ops_view(dk, IRIS_DT_BF16, n, wk, 0), gv_ = ops_view(dv, IRIS_DT_BF16, n, wk, 0);
    iris_tensor gqw = ops_view(dqw, IRIS_DT_BF16, 1, hd, 0), gkw = ops_view(dkw, IRIS_DT_BF16, 1, hd, 0);
    REQUIRE(ops_cuda->qk_norm_rope_kv != NULL);
    CHECKF(iris_backend_qk_norm_rope_kv(ops_cuda, &gq, &gk_, &gv_, &gqw, &gkw, 1e-6f, nq, dpos, n, dim_of, inv, &gkv, &gm) == 0,
           "%s", ops_cuda->err.msg);
    float *oq = ops_dev_read_bf16(dq, n * wq), *ok = ops_dev_read_bf16(dk, n * wk), *okc, *ovc;
    if (g_kv8) { /* the codes, widened: E4M3 of the returned k and of the given v */
        uint8_t *k8 = dev_read_bytes(gk, ce), *v8 = dev_read_bytes(gv, ce);
        okc = malloc(sizeof(float) * ce), ovc = malloc(sizeof(float) * ce);
        for (size_t i = 0; i < ce; i++) okc[i] = iris_fp8_e4m3_decode(k8[i]), ovc[i] = iris_fp8_e4m3_decode(v8[i]);
        free(k8), free(v8);
    } else {
        okc = ops_dev_read_bf16(gk, (int64_t)ce), ovc = ops_dev_read_bf16(gv, (int64_t)ce);
    }
    char what[96];
    /* norm output rounded twice, rotary once more: 3 bf16 roundings; the rotation can cancel, so the
     * absolute part is 3 roundings (2^-9 each, 6e-3) of the largest value, not of the result */
    snprintf(what, sizeof what, "qk_norm_rope_kv %d/%d x %d: q", nq, nkv, hd);
    ops_compare(what, oq, wq, rq, wq, n, wq, 1.2e-2f, 6e-3f);
    snprintf(what, sizeof what, "qk_norm_rope_kv %d/%d x %d: k", nq, nkv, hd);
    ops_compare(what, ok, wk, rk, wk, n, wk, 1.2e-2f, 6e-3f);
    int cache_ok = 1;
    for (int i = 0; i < n; i++)
        for (int64_t e = 0; e < wk; e++) {
            float want_k = ok[(size_t)i * wk + e], want_v = v[(size_t)i * wk + e];
            if (g_kv8)
                want_k = iris_fp8_e4m3_decode(iris_fp8_e4m3_encode(want_k)),
                want_v = iris_fp8_e4m3_decode(iris_fp8_e4m3_encode(want_v));
            cache_ok &= okc[(size_t)slot[i] * wk + e] == want_k;
            cache_ok &= ovc[(size_t)slot[i] * wk + e] == want_v;
        }
    CHECKF(cache_ok, "qk_norm_rope_kv %d/%d x %d: cache rows are not the returned k and the given v", nq, nkv, hd);
    void *bufs[] = {dq, dk, dv, dqw, dkw, dpos, dslot, gk, gv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ops_cuda->free(ops_cuda, bufs[i]);
    qk_case_free(&c);
    free(rq), free(rk), free(ck), free(cv), free(oq), free(ok), free(okc), free(ovc);
}

/* qk_norm_rope_attn on a decode-only step (one new row a sequence after n_past[s] cached tokens):
 * the decode kernel doing qk_norm_rope_kv itself gives the bits of the two kernels, in o and in the
 * whole cache (each path on its own copy of the cache, q and k). */
static void check_qk_attn(const int *n_past, int n, int nq, int nkv, int hd) {
    int width = nkv * hd, max_blocks = 0;
    for (int s = 0; s < n; s++)
        if ((n_past[s] + 16) / 16 > max_blocks) max_blocks = (n_past[s] + 16) / 16;
    int n_blocks = n * max_blocks + 2, n_hist = 0;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)(n * max_blocks)), *pos = malloc(sizeof(int32_t) * 3 * (size_t)n);
    int32_t *row_seq = malloc(sizeof(int32_t) * (size_t)n), *row_ctx = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *slot = malloc(sizeof(int32_t) * (size_t)n), *hslot = malloc(sizeof(int32_t) * (size_t)(n * max_blocks * 16));
    for (int i = 0; i < n * max_blocks; i++) bt[i] = (int32_t)((i * 7 + 1) % n_blocks); /* scattered, distinct */
    for (int s = 0; s < n; s++) {
        row_seq[s] = s, row_ctx[s] = n_past[s] + 1;
        slot[s] = bt[s * max_blocks + n_past[s] / 16] * 16 + n_past[s] % 16;
        for (int j = 0; j < n_past[s]; j++) hslot[n_hist++] = bt[s * max_blocks + j / 16] * 16 + j % 16;
        for (int d = 0; d < 3; d++) pos[d * n + s] = (int32_t)(n_past[s] + (int)(ops_rnd_u32() % 7));
    }
    int dim_of[128];
    float inv[128];
    mrope_tables(hd, dim_of, inv);
    int64_t wq = (int64_t)nq * hd;
    float *q = ops_rnd_vec(n * wq, -2, 2), *k = ops_rnd_vec((int64_t)n * width, -2, 2), *v = ops_rnd_vec((int64_t)n * width, -2, 2);
    float *hk = ops_rnd_vec((int64_t)(n_hist + 1) * width, -1, 1), *hv = ops_rnd_vec((int64_t)(n_hist + 1) * width, -1, 1);
    float *qw = ops_rnd_vec(hd, 0.5f, 1.5f), *kw = ops_rnd_vec(hd, 0.5f, 1.5f);
    void *dqw = ops_dev_bf16(qw, hd), *dkw = ops_dev_bf16(kw, hd), *dpos = ops_dev_copy(pos, sizeof(int32_t) * 3 * (size_t)n);
    void *dbt = ops_dev_copy(bt, sizeof(int32_t) * (size_t)(n * max_blocks)), *dslot = ops_dev_copy(slot, sizeof(int32_t) * (size_t)n);
    void *dseq = ops_dev_copy(row_seq, sizeof(int32_t) * (size_t)n), *dctx = ops_dev_copy(row_ctx, sizeof(int32_t) * (size_t)n);
    void *dhslot = ops_dev_copy(hslot, sizeof(int32_t) * (size_t)(n_hist + 1));
    void *dhk = ops_dev_bf16(hk, (int64_t)(n_hist + 1) * width), *dhv = ops_dev_bf16(hv, (int64_t)(n_hist + 1) * width);
    iris_tensor gqw = ops_view(dqw, IRIS_DT_BF16, 1, hd, 0), gkw = ops_view(dkw, IRIS_DT_BF16, 1, hd, 0);
    size_t ce = (size_t)n_blocks * 16 * width;
    void *cache[2][2], *out[2];
    for (int p = 0; p < 2; p++) { /* p = 0: the two kernels; 1: one */
        cache[p][0] = ops_dev_poison((int64_t)ce), cache[p][1] = ops_dev_poison((int64_t)ce);
        iris_kv_layer kv = {cache[p][0], cache[p][1], g_kv8 ? IRIS_DT_F8_E4M3 : IRIS_DT_BF16, n_blocks, nkv, hd};
        iris_attn_meta hm = {.n_rows = n_hist, .block_tables = dbt, .max_blocks = max_blocks, .slot = dhslot};
        iris_tensor th = ops_view(dhk, IRIS_DT_BF16, n_hist, width, 0), tv = ops_view(dhv, IRIS_DT_BF16, n_hist, width, 0);
        if (n_hist) CHECKF(ops_cuda->kv_write(ops_cuda, &kv, &th, &tv, &hm) == 0, "%s", ops_cuda->err.msg);
        void *dq = ops_dev_bf16(q, n * wq), *dk = ops_dev_bf16(k, (int64_t)n * width), *dv = ops_dev_bf16(v, (int64_t)n * width);
        out[p] = ops_dev_poison(n * wq);
        iris_tensor gq = ops_view(dq, IRIS_DT_BF16, n, wq, 0), gk = ops_view(dk, IRIS_DT_BF16, n, width, 0);
        iris_tensor gv = ops_view(dv, IRIS_DT_BF16, n, width, 0), go = ops_view(out[p], IRIS_DT_BF16, n, wq, 0);
        iris_attn_meta m = {.n_rows = n, .row_seq = dseq, .row_ctx = dctx, .block_tables = dbt,
                            .max_blocks = max_blocks, .slot = dslot, .n_seqs = n};
        iris_cuda_set_qk_attn(ops_cuda, p);
        int rc = iris_backend_qk_norm_rope_attn(ops_cuda, &gq, &gk, &gv, &gqw, &gkw, 1e-6f, nq, dpos, n, dim_of, inv, &kv, &m, &go);
        iris_cuda_set_qk_attn(ops_cuda, 1);
        CHECKF(rc == 0, "%s", ops_cuda->err.msg);
        ops_cuda->free(ops_cuda, dq), ops_cuda->free(ops_cuda, dk), ops_cuda->free(ops_cuda, dv);
    }
    char what[128];
    int len = snprintf(what, sizeof what, "qk_norm_rope_attn%s %d/%d x %d:", g_kv8 ? " (fp8 cache)" : "", nq, nkv, hd);
    for (int s = 0; s < n && len < (int)sizeof what - 12; s++) len += snprintf(what + len, sizeof what - (size_t)len, " %d", n_past[s]);
    ops_same_bits(out[0], out[1], n * wq, what);
    uint8_t *c0 = dev_read_bytes(cache[0][0], ce * 2), *c1 = dev_read_bytes(cache[1][0], ce * 2);
    uint8_t *v0 = dev_read_bytes(cache[0][1], ce * 2), *v1 = dev_read_bytes(cache[1][1], ce * 2);
    CHECKF(!memcmp(c0, c1, ce * 2) && !memcmp(v0, v1, ce * 2), "%s the caches differ", what);
    free(c0), free(c1), free(v0), free(v1);
    for (int p = 0; p < 2; p++) ops_cuda->free(ops_cuda, cache[p][0]), ops_cuda->free(ops_cuda, cache[p][1]), ops_cuda->free(ops_cuda, out[p]);
    void *bufs[] = {dqw, dkw, dpos, dbt, dslot, dseq, dctx, dhslot, dhk, dhv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ops_cuda->free(ops_cuda, bufs[i]);
    free(bt), free(pos), free(row_seq), free(row_ctx), free(slot), free(hslot);
    free(q), free(k), free(v), free(hk), free(hv), free(qw), free(kw);
}

IRIS_TEST(gpu_ops_qk_attn) {
    OPS_BACKENDS();
    REQUIRE(ops_cuda->qk_norm_rope_attn != NULL);
    /* contexts of one token, within a block, split over the context (the newest key in the last
     * split, or alone in a split: 1024 = 64 blocks, the 1,025th key) */
    const int d3[] = {0, 36, 700}, d1[] = {2999}, d4[] = {1024, 15, 16, 1}, d6[] = {5, 80, 0, 300, 17, 2};
    for (g_kv8 = 0; g_kv8 < 2; g_kv8++) {
        check_qk_attn(d3, 3, 16, 8, 128); /* 2B's heads */
        check_qk_attn(d1, 1, 32, 8, 128); /* 4B's */
        check_qk_attn(d4, 4, 16, 8, 128);
        check_qk_attn(d3, 3, 8, 8, 64);   /* no grouping */
        check_qk_attn(d3, 3, 4, 2, 32);   /* tiny-gqa */
        check_qk_attn(d4, 4, 4, 1, 16);   /* tiny-mqa: a group of 4 */
        check_qk_attn(d3, 3, 8, 1, 128);  /* a group of 8 over 4 warps */
        check_qk_attn(d3, 3, 4, 2, 256);  /* past QK_ATTN_MAX_HD: the two kernels both times */
        check_qk_attn(d6, 6, 16, 8, 128); /* past QK_ATTN_MAX_ROWS: the same */
    }
    g_kv8 = 0;
}

/* A prefill's rows (QK_ROWS and more: a warp takes several heads of a row) give the bits of the same
 * rows taken 50 at a time (a warp a head), in q, k and the cache. */
static void check_qk_rows_bits(int n, int nq, int nkv) {
    const int hd = 128;
    qk_case c = qk_case_make(n, nq, nkv, hd);
    const int n_blocks = c.n_blocks, *dim_of = c.dim_of;
    const int64_t wq = c.wq, wk = c.wk;
    float *q = c.q, *k = c.k, *v = c.v, *qw = c.qw, *kw = c.kw, *inv = c.inv;
    size_t ce = (size_t)n_blocks * 16 * wk, esz = g_kv8 ? 1 : 2;
    void *dqw = ops_dev_bf16(qw, hd), *dkw = ops_dev_bf16(kw, hd), *dv = ops_dev_bf16(v, n * wk);
    void *dpos = ops_dev_copy(c.pos, sizeof(int32_t) * 3 * (size_t)n), *dslot = ops_dev_copy(c.slot, sizeof(int32_t) * (size_t)n);
    iris_tensor gqw = ops_view(dqw, IRIS_DT_BF16, 1, hd, 0), gkw = ops_view(dkw, IRIS_DT_BF16, 1, hd, 0);
    uint8_t *out[2][4]; /* [whole, chunked][q, k, k cache, v cache] */
    for (int way = 0; way < 2; way++) {
        void *dq = ops_dev_bf16(q, n * wq), *dk = ops_dev_bf16(k, n * wk);
        void *gk = ops_dev_poison((int64_t)ce), *gv = ops_dev_poison((int64_t)ce);
        iris_kv_layer gkv = {gk, gv, g_kv8 ? IRIS_DT_F8_E4M3 : IRIS_DT_BF16, n_blocks, nkv, hd};
        for (int r0 = 0; r0 < n; r0 += way ? 50 : n) {
            int m = way ? (n - r0 < 50 ? n - r0 : 50) : n;
            iris_attn_meta gm = {.n_rows = m, .slot = (int32_t *)dslot + r0};
            iris_tensor gq = ops_view((uint16_t *)dq + r0 * wq, IRIS_DT_BF16, m, wq, 0);
            iris_tensor gk_ = ops_view((uint16_t *)dk + r0 * wk, IRIS_DT_BF16, m, wk, 0);
            iris_tensor gv_ = ops_view((uint16_t *)dv + r0 * wk, IRIS_DT_BF16, m, wk, 0);
            CHECKF(iris_backend_qk_norm_rope_kv(ops_cuda, &gq, &gk_, &gv_, &gqw, &gkw, 1e-6f, nq, (int32_t *)dpos + r0, n,
                                                dim_of, inv, &gkv, &gm) == 0,
                   "%s", ops_cuda->err.msg);
        }
        out[way][0] = dev_read_bytes(dq, (size_t)(n * wq) * 2), out[way][1] = dev_read_bytes(dk, (size_t)(n * wk) * 2);
        out[way][2] = dev_read_bytes(gk, ce * esz), out[way][3] = dev_read_bytes(gv, ce * esz);
        ops_cuda->free(ops_cuda, dq), ops_cuda->free(ops_cuda, dk), ops_cuda->free(ops_cuda, gk), ops_cuda->free(ops_cuda, gv);
    }
    size_t len[4] = {(size_t)(n * wq) * 2, (size_t)(n * wk) * 2, ce * esz, ce * esz};
    const char *name[4] = {"q", "k", "k cache", "v cache"};
    for (int i = 0; i < 4; i++) {
        CHECKF(memcmp(out[0][i], out[1][i], len[i]) == 0, "qk_norm_rope_kv %d rows of %d/%d heads%s: %s differs from 50 rows a call",
               n, nq, nkv, g_kv8 ? " (fp8 cache)" : "", name[i]);
        free(out[0][i]), free(out[1][i]);
    }
    void *bufs[] = {dqw, dkw, dv, dpos, dslot};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ops_cuda->free(ops_cuda, bufs[i]);
    qk_case_free(&c);
}

IRIS_TEST(gpu_ops_fused) {
    OPS_BACKENDS();
    check_add_rms(37, 264, 1);
    check_add_rms(5, 131, 1);
    check_add_rms(3, 2048, 0);
    check_add_rms(1, 4096, 1); /* the block kernel's row in registers: 8B's width, 4B's, and past it */
    check_add_rms(2, 2560, 1);
    check_add_rms(300, 2048, 1); /* a prefill's rows: a warp a row */
    check_add_rms(150, 2560, 1);
    check_add_rms(1, 5120, 1);
    check_qk_prologue(23, 16, 8, 128);
    check_qk_prologue(9, 6, 2, 32);
    check_qk_prologue(1, 4, 1, 16);
    check_qk_prologue(300, 16, 8, 128); /* a prefill's rows: several heads a warp */
    check_qk_rows_bits(300, 16, 8);
    check_qk_rows_bits(130, 12, 4);
    check_qk_rows_bits(128, 6, 3);
    check_qk_rows_bits(129, 6, 2);
    g_kv8 = 1; /* into an E4M3 cache */
    check_qk_prologue(23, 16, 8, 128);
    check_qk_prologue(9, 6, 2, 32);
    check_qk_rows_bits(300, 32, 8);
    g_kv8 = 0;
}

/* ---- segment attention (vision) ------------------------------------------------------------- */

static void check_segments(const int *cu, int n_seg, int nh, int hd) {
    int64_t n = cu[n_seg], w = (int64_t)nh * hd, ld = 3 * w;
    float *qkv = ops_rnd_vec(n * ld, -1.5f, 1.5f), *ref = malloc(sizeof(float) * (size_t)(n * w));
    iris_tensor cqkv = ops_view(qkv, IRIS_DT_F32, n, ld, 0), co = ops_view(ref, IRIS_DT_F32, n, w, 0);
    REQUIRE(ops_cpu->attn_segments(ops_cpu, &cqkv, nh, hd, cu, n_seg, &co) == 0);
    void *dqkv = ops_dev_bf16(qkv, n * ld), *dout = ops_dev_poison(n * w);
    iris_tensor gqkv = ops_view(dqkv, IRIS_DT_BF16, n, ld, 0), go = ops_view(dout, IRIS_DT_BF16, n, w, 0);
    CHECKF(ops_cuda->attn_segments(ops_cuda, &gqkv, nh, hd, cu, n_seg, &go) == 0, "%s", ops_cuda->err.msg);
    float *got = ops_dev_read_bf16(dout, n * w);
    char what[128];
    int len = snprintf(what, sizeof what, "attn_segments%s %d x %d:", g_impl == 1 ? " (wmma)" : g_impl == 5 ? " (mma)" : "",
                       nh, hd);
    for (int s = 0; s < n_seg && len < (int)sizeof what - 8; s++)
        len += snprintf(what + len, sizeof what - (size_t)len, " %d", cu[s + 1] - cu[s]);
    ops_compare(what, got, w, ref, w, n, w, 4e-3f, 4e-3f);
    ops_cuda->free(ops_cuda, dqkv), ops_cuda->free(ops_cuda, dout);
    free(qkv), free(ref), free(got);
}

IRIS_TEST(gpu_ops_attn_segments) {
    OPS_BACKENDS();
    /* the wgmma kernel runs wherever it can: a 9.0 device and a build with sm_90a code */
    int cap = iris_cuda_capability(ops_cuda);
    CHECKF(iris_cuda_wgmma_on(ops_cuda) == (cap == 90 && iris_cuda_archs_have_arch_sass(iris_cuda_archs(), 9, 0)),
           "wgmma %s on compute capability %d with CUDA_ARCHS \"%s\"", iris_cuda_wgmma_on(ops_cuda) ? "on" : "off", cap,
           iris_cuda_archs());
    int a[] = {0, 37, 250, 300};
    int b[] = {0, 129};
    int c[] = {0, 1, 1025};
    int d[] = {0, 70, 133};
    /* 0: the default (head size 64: wgmma on a 9.0 device with sm_90a code), 1 WMMA, 5 mma.sync */
    static const int impls[] = {0, 1, 5};
    for (int ii = 0; ii < 3; ii++) {
        g_impl = impls[ii];
        iris_cuda_set_attn_impl(ops_cuda, g_impl);
        check_segments(a, 3, 3, 64);
        check_segments(b, 1, 2, 128);
        check_segments(c, 2, 16, 64);
        check_segments(d, 2, 4, 32);
        check_segments(d, 2, 2, 16);
        check_segments(a, 3, 3, 72); /* Qwen3-VL-8B's vision heads (1152 / 16): the mma kernel for either impl */
        check_segments(b, 1, 2, 72);
        check_segments(c, 2, 16, 72);
    }
    g_impl = 0;
    iris_cuda_set_attn_impl(ops_cuda, 0);
}

/* Several images of different sizes in one launch (the vision encoder's step of many requests):
 * segments of patch counts as images give them (1,024, 576 and 256 rows, 16 heads of 64 and of 72,
 * the 8B's vision heads; for 72 also a 1024 x 1024 image's 4,096 rows beside 256), one of a
 * single row, empty ones, and more segments than one launch takes (IRIS_FLASH_MAX_SEGS: several
 * launches), each row's attention within its own segment as the CPU computes it. */
IRIS_TEST(gpu_ops_attn_segments_many) {
    OPS_BACKENDS();
    int img[] = {0, 1024, 1600, 1856};
    int odd[] = {0, 64, 64, 65, 300, 300, 428, 429};
    int many[41];
    many[0] = 0;
    for (int s = 0; s < 40; s++) many[s + 1] = many[s] + (s % 7 == 3 ? 0 : 1 + (s * 37) % 150);
    static const int impls[] = {0, 1, 5};
    for (int ii = 0; ii < 3; ii++) {
        g_impl = impls[ii];
        iris_cuda_set_attn_impl(ops_cuda, g_impl);
        check_segments(img, 3, 16, 64);
        check_segments(odd, 7, 4, 64);
        check_segments(many, 40, 2, 64);
        check_segments(many, 40, 2, 128);
        check_segments(many, 40, 4, 32);
        check_segments(img, 3, 16, 72);
        check_segments(odd, 7, 4, 72);
        check_segments(many, 40, 2, 72);
    }
    g_impl = 0;
    iris_cuda_set_attn_impl(ops_cuda, 0);
    int big[] = {0, 4096, 4352}; /* a 1024 x 1024 image (64 x 64 patches) and a 256 x 256 one in one launch */
    check_segments(big, 2, 16, 72);
    check_segments(big, 2, 16, 64);
}

#endif
