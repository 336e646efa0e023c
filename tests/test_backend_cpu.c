/* test_backend_cpu.c: every CPU backend op against a naive scalar reference
 * written here (double accumulation, weights decoded by independent code),
 * on odd sizes, strided rows and poisoned (NaN) outputs so an unwritten
 * element fails.  The CPU backend is the numeric reference of the project
 * (test_ops_*.c check CUDA against it), so this is where its own arithmetic is
 * pinned down: the e4m3fn decode on all 256 codes, FP8 products equal to the
 * product with the dequantized BF16 weight, paged attention over shuffled
 * blocks equal to contiguous causal attention, vision attention confined to
 * its segments. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "pool.h"
#include "tools/quantize.h"
#include "test.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float unif(void) { return (float)(rnd() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; } /* [-1, 1) */

static float *fvec(size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = unif();
    return p;
}
static float *poisoned(size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static iris_tensor f32_view(float *d, int64_t rows, int64_t cols, int64_t ld) {
    return (iris_tensor){.data = d, .dtype = IRIS_DT_F32, .rows = rows, .cols = cols, .ld = ld};
}

/* Independent decoders: bit patterns built by hand, not the backend's tables. */
static float ref_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t to_bf16_trunc(float x) { /* any bf16 value will do for inputs */
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}
static double ref_f16(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}
static float ref_e4m3(uint8_t b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    uint32_t u;
    if (e == 0) { /* subnormal: m · 2^-9, exact in fp32 */
        float f = (float)m / 512.0f;
        return s ? -f : f;
    }
    u = ((uint32_t)s << 31) | ((uint32_t)(e - 7 + 127) << 23) | ((uint32_t)m << 20);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static float ref_round_bf16(float x) { /* nearest even, via the double nearest bf16 neighbours */
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    memcpy(&flo, &lo, 4);
    memcpy(&fhi, &hi, 4);
    double dlo = fabs((double)x - flo), dhi = fabs((double)fhi - x);
    if (dlo < dhi) return flo;
    if (dhi < dlo) return fhi;
    return (lo >> 16) & 1 ? fhi : flo;
}

static iris_backend *cpu(void) {
    static iris_backend *b;
    iris_err err = {0};
    if (!b && iris_backend_cpu_open(&b, &err)) return NULL;
    return b;
}

/* A backend opened with IRIS_CPU_AVX2=0 (the scalar reference paths); the caller destroys it. */
static iris_backend *cpu_scalar(void) {
    const char *was = getenv("IRIS_CPU_AVX2");
    char *keep = was ? strdup(was) : NULL;
    setenv("IRIS_CPU_AVX2", "0", 1);
    iris_backend *b = NULL;
    iris_err err = {0};
    int rc = iris_backend_cpu_open(&b, &err);
    if (keep) setenv("IRIS_CPU_AVX2", keep, 1);
    else unsetenv("IRIS_CPU_AVX2");
    free(keep);
    return rc ? NULL : b;
}

/* Largest |got - want| / (|want| + scale) over n; NaN counts as failure. */
static double rel_err(const float *got, const double *want, int64_t n, double scale) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]) / (fabs(want[i]) + scale);
        if (!(e <= w)) w = isnan(e) ? INFINITY : e;
    }
    return w;
}

/* ---- FP8 ---------------------------------------------------------------------------------- */

IRIS_TEST(backend_cpu_fp8_all_codes) {
    /* A 512x1 FP8 weight holding every code twice, under scale 1 (rows 0..255) and
     * 1/3 (rows 256..511, so the bf16 rounding of q · scale matters); x = [1] reads
     * each dequantized value back through the backend's own decode. */
    iris_backend *b = cpu();
    REQUIRE(b);
    uint8_t codes[512];
    for (int i = 0; i < 512; i++) codes[i] = (uint8_t)i;
    float scales[4] = {1.0f, 1.0f, 1.0f / 3.0f, 1.0f / 3.0f}, one = 1.0f, y[512];
    iris_tensor w = {.data = codes, .dtype = IRIS_DT_F8_E4M3, .rows = 512, .cols = 1, .scale = scales,
                     .block = {128, 128}};
    for (int n = 1; n <= 9; n += 8) { /* the decode path and the sgemm path */
        float x[9];
        for (int i = 0; i < n; i++) x[i] = one;
        float *yy = poisoned((size_t)n * 512);
        iris_tensor xv = f32_view(x, n, 1, 0), yv = f32_view(yy, n, 512, 0);
        REQUIRE(b->linear(b, &xv, &w, NULL, &yv) == 0);
        memcpy(y, yy + (n - 1) * 512, sizeof y);
        free(yy);
        int bad = 0, nan_ok = 1;
        for (int r = 0; r < 512; r++) {
            float want = ref_round_bf16(ref_e4m3((uint8_t)r) * scales[r / 128]);
            if (isnan(want)) nan_ok &= isnan(y[r]) != 0;
            else if (y[r] != want && bad++ < 4)
                iris_test_fail(__FILE__, __LINE__, "row %d (code 0x%02x) decodes to %g, want %g", r, r & 255, y[r], want);
        }
        CHECK_EQ_INT(bad, 0);
        CHECK(nan_ok);
    }
    /* the independent decoder itself, on known values */
    CHECK(ref_e4m3(0x7e) == 448.0f && ref_e4m3(0xfe) == -448.0f && ref_e4m3(0x01) == 0x1p-9f &&
          ref_e4m3(0x08) == 0x1p-6f && ref_e4m3(0x38) == 1.0f && ref_e4m3(0x80) == 0.0f && isnan(ref_e4m3(0x7f)));
}

/* ---- linear ------------------------------------------------------------------------------- */

typedef struct {
    iris_tensor w;
    void *mem;
    float *scale;
    double *deq; /* [rows, cols] the reference's decoded weight */
} wt;

static wt make_weight(iris_dtype dt, int64_t rows, int64_t cols, int64_t ld) {
    wt r = {0};
    r.deq = malloc(sizeof(double) * (size_t)(rows * cols));
    r.w = (iris_tensor){.dtype = dt, .rows = rows, .cols = cols, .ld = ld};
    int64_t L = ld ? ld : cols;
    if (dt == IRIS_DT_F8_E4M3) {
        int bo = 128, bi = 128;
        int64_t sr = (rows + bo - 1) / bo, sc = (cols + bi - 1) / bi;
        uint8_t *q = malloc((size_t)(rows * L));
        r.scale = malloc(sizeof(float) * (size_t)(sr * sc));
        for (int64_t i = 0; i < sr * sc; i++) r.scale[i] = 0.001f + 0.01f * (float)(rnd() % 1000) / 1000.0f;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) {
                uint8_t c;
                do c = (uint8_t)rnd(); while ((c & 0x7f) == 0x7f); /* no NaN codes */
                q[i * L + j] = c;
                r.deq[i * cols + j] = ref_round_bf16(ref_e4m3(c) * r.scale[(i / bo) * sc + j / bi]);
            }
        r.mem = q;
        r.w.scale = r.scale;
        r.w.block[0] = bo, r.w.block[1] = bi;
    } else if (dt == IRIS_DT_BF16 || dt == IRIS_DT_F16) {
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(rows * L));
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) {
                float v = unif() * 0.5f;
                uint16_t bits;
                if (dt == IRIS_DT_BF16) {
                    bits = to_bf16_trunc(v);
                    r.deq[i * cols + j] = ref_bf16(bits);
                } else {
                    bits = (uint16_t)((rnd() & 0x8000) | (0x2c00 + rnd() % 0x1000)); /* normal halves near 0.1..0.5 */
                    r.deq[i * cols + j] = ref_f16(bits);
                }
                h[i * L + j] = bits;
            }
        r.mem = h;
    } else {
        float *f = malloc(sizeof(float) * (size_t)(rows * L));
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) r.deq[i * cols + j] = f[i * L + j] = unif();
        r.mem = f;
    }
    r.w.data = r.mem;
    return r;
}
static void free_weight(wt *w) { free(w->mem), free(w->scale), free(w->deq); }

IRIS_TEST(backend_cpu_linear_vs_scalar) {
    iris_backend *b = cpu();
    REQUIRE(b);
    const iris_dtype dts[] = {IRIS_DT_F32, IRIS_DT_BF16, IRIS_DT_F16, IRIS_DT_F8_E4M3};
    const char *dn[] = {"f32", "bf16", "f16", "fp8"};
    const int ns[] = {1, 3, 8, 9, 37};               /* the dot path (<= 8 rows) and the sgemm path */
    const int64_t shapes[][2] = {{259, 133}, {1037, 300}}; /* partial FP8 blocks; > one 1024-row tile */
    for (int di = 0; di < 4; di++)
        for (int si = 0; si < 2; si++) {
            int64_t out = shapes[si][0], in = shapes[si][1];
            wt w = make_weight(dts[di], out, in, si ? in + 3 : 0);
            float *bias = fvec((size_t)out);
            for (int ni = 0; ni < 5; ni++) {
                int n = ns[ni], use_bias = (ni + si) % 2;
                int64_t ldx = in + 7, ldy = out + 5;
                float *x = fvec((size_t)(n * ldx)), *y = poisoned((size_t)(n * ldy));
                double *want = malloc(sizeof(double) * (size_t)(n * out)), *mag = malloc(sizeof(double) * (size_t)(n * out));
                float *got = malloc(sizeof(float) * (size_t)(n * out));
                for (int i = 0; i < n; i++)
                    for (int64_t r = 0; r < out; r++) {
                        double s = use_bias ? bias[r] : 0, a = fabs(s);
                        for (int64_t k = 0; k < in; k++) {
                            s += (double)x[i * ldx + k] * w.deq[r * in + k];
                            a += fabs((double)x[i * ldx + k] * w.deq[r * in + k]);
                        }
                        want[i * out + r] = s, mag[i * out + r] = a;
                    }
                iris_tensor xv = f32_view(x, n, in, ldx), yv = f32_view(y, n, out, ldy), bv = f32_view(bias, 1, out, 0);
                int rc = b->linear(b, &xv, &w.w, use_bias ? &bv : NULL, &yv);
                CHECKF(rc == 0, "%s: %s", dn[di], b->err.msg);
                for (int i = 0; i < n; i++) memcpy(got + i * out, y + i * ldy, sizeof(float) * (size_t)out);
                /* fp32 accumulation: error relative to Σ|x·w| (cancellation makes |y| itself small) */
                double e = 0;
                for (int64_t i = 0; i < n * out; i++) {
                    double d = fabs(got[i] - want[i]) / mag[i];
                    if (!(d <= e)) e = isnan(d) ? INFINITY : d;
                }
                CHECKF(e < 2e-6, "linear %s [%d x %lld] · [%lld x %lld]ᵀ: rel err %g", dn[di], n, (long long)in,
                       (long long)out, (long long)in, e);
                /* the padding between strided rows is left alone */
                CHECKF(isnan(y[ldy - 1]), "linear %s wrote past the row end", dn[di]);
                free(x), free(y), free(want), free(mag), free(got);
            }
            free(bias);
            free_weight(&w);
        }
    /* shape mismatch is an error, not a crash */
    float x[4], y[4];
    wt w = make_weight(IRIS_DT_F32, 2, 3, 0);
    iris_tensor xv = f32_view(x, 1, 4, 0), yv = f32_view(y, 1, 2, 0);
    CHECK(b->linear(b, &xv, &w.w, NULL, &yv) == IRIS_EINVAL);
    free_weight(&w);
}

/* The sgemm path's BF16 tiles widened eight values at a time (AVX2) hold the scalar widening's bits:
 * the product is bit for bit the scalar reference backend's (IRIS_CPU_AVX2=0), over one tile and
 * several (in = 1100: out 2000 in two), with a bias, strided x and y. */
IRIS_TEST(backend_cpu_linear_bf16_tiles_bits) {
    iris_backend *b = cpu(), *scalar = cpu_scalar();
    REQUIRE(b && scalar);
    uint64_t rng = g_rng; /* the later tests' data as without this one: several have tight bounds */
    const int64_t shapes[][3] = {{37, 2000, 1100}, {576, 768, 192}, {9, 5, 61}}; /* n, out, in */
    for (int si = 0; si < 3; si++) {
        int64_t n = shapes[si][0], out = shapes[si][1], in = shapes[si][2], ldx = in + 3, ldy = out + 1;
        wt w = make_weight(IRIS_DT_BF16, out, in, 0);
        float *bias = fvec((size_t)out), *x = fvec((size_t)(n * ldx));
        float *y = poisoned((size_t)(n * ldy)), *want = poisoned((size_t)(n * ldy));
        iris_tensor xv = f32_view(x, n, in, ldx), yv = f32_view(y, n, out, ldy), bv = f32_view(bias, 1, out, 0),
                    wv = f32_view(want, n, out, ldy);
        CHECKF(b->linear(b, &xv, &w.w, &bv, &yv) == 0, "%s", b->err.msg);
        CHECKF(scalar->linear(scalar, &xv, &w.w, &bv, &wv) == 0, "%s", scalar->err.msg);
        int64_t diff = 0;
        for (int64_t i = 0; i < n; i++) diff += memcmp(y + i * ldy, want + i * ldy, sizeof(float) * (size_t)out) != 0;
        CHECKF(diff == 0, "[%lld x %lld] · [%lld x %lld]ᵀ: %lld rows differ from the scalar widening's", (long long)n,
               (long long)in, (long long)out, (long long)in, (long long)diff);
        CHECK(isnan(y[ldy - 1]) && !isnan(y[0]));
        free(bias), free(x), free(y), free(want);
        free_weight(&w);
    }
    scalar->destroy(scalar);
    g_rng = rng;
}

/* b->alloc and b->free keep freed blocks for reuse: the same block back for a size of its class
 * (64-byte aligned), none for a size under half its class or for small blocks, a bound on what is
 * kept (blocks and bytes), and every block the system gave either in use or in the cache. */
IRIS_TEST(backend_cpu_block_cache) {
    iris_backend *b = NULL;
    iris_err err = {0};
    REQUIRE(iris_backend_cpu_open(&b, &err) == 0);
    iris_cpu_ctx *c = b->ctx;
    char *p = b->alloc(b, 1 << 20);
    REQUIRE(p);
    CHECK((uintptr_t)p % 64 == 0);
    memset(p, 1, 1 << 20);
    b->free(b, p);
    CHECK_EQ_INT(c->n_cached, 1);
    char *q = b->alloc(b, (1 << 20) - 1000); /* the same class */
    CHECK(q == p);
    CHECK_EQ_INT(c->n_cached, 0);
    CHECK_EQ_INT(c->cached_bytes, 0);
    char *r = b->alloc(b, 400 << 10); /* under half the cached block's class: a new block */
    b->free(b, q);
    char *s = b->alloc(b, 400 << 10);
    CHECK(s != q && r != q);
    CHECK_EQ_INT(c->n_cached, 1);
    b->free(b, r), b->free(b, s);
    CHECK_EQ_INT(c->n_cached, 3);
    int64_t live = c->n_live;
    void *t = b->alloc(b, 1000); /* small blocks go back to malloc */
    b->free(b, t);
    CHECK_EQ_INT(c->n_cached, 3);
    CHECK_EQ_INT(c->n_live, live);
    /* the bound: 40 blocks of 16 MiB freed (never touched, so never paged in) */
    enum { NB = 40 };
    void *big[NB];
    for (int i = 0; i < NB; i++) REQUIRE((big[i] = b->alloc(b, (size_t)16 << 20)));
    for (int i = 0; i < NB; i++) b->free(b, big[i]);
    CHECK(c->n_cached <= IRIS_CPU_CACHE_SLOTS);
    CHECK(c->cached_bytes <= IRIS_CPU_CACHE_BYTES);
    CHECK_EQ_INT(c->cached_bytes, IRIS_CPU_CACHE_BYTES); /* 16 of them, the newest, exactly at the bound */
    CHECK_EQ_INT(c->n_live, c->n_cached);
    void *u = b->alloc(b, (size_t)16 << 20);
    CHECK(u == big[NB - 1] || u == big[NB - 16]); /* one of those kept */
    b->free(b, u);
    CHECK_EQ_INT(c->n_live, c->n_cached);
    b->destroy(b); /* gives the cache back: valgrind's leak check on this test shows none */
}

/* Each pool worker's scratch is its own: reserved for every worker up front, a worker finds its
 * slot already that size, and no two workers share one. */
typedef struct {
    iris_cpu_ctx *c;
    int worker[IRIS_POOL_MAX_THREADS];
    float *buf[IRIS_POOL_MAX_THREADS];
} scratch_probe;

static void probe_scratch(void *p, int64_t i0, int64_t i1) {
    scratch_probe *s = p;
    s->worker[i0] = iris_pool_worker();
    s->buf[i0] = iris_cpu_scratch(s->c, 5000);
    for (int i = 0; s->buf[i0] && i < 5000; i++) s->buf[i0][i] = (float)i0;
}

IRIS_TEST(backend_cpu_worker_scratch) {
    iris_backend *b = cpu();
    REQUIRE(b);
    int n = iris_pool_threads();
    if (n < 2) IRIS_TEST_SKIP("one pool thread: no workers to tell apart");
    scratch_probe s = {.c = b->ctx};
    REQUIRE(iris_cpu_scratch_reserve(s.c, 5000) == 0);
    float *before[IRIS_POOL_MAX_THREADS];
    memcpy(before, s.c->scratch, sizeof(float *) * (size_t)n);
    iris_pool_for(n, probe_scratch, &s); /* one item a worker */
    for (int i = 0; i < n; i++) {
        CHECKF(s.buf[i] == before[s.worker[i]], "worker %d's scratch moved after the reserve", s.worker[i]);
        for (int j = 0; j < i; j++) CHECK(s.worker[i] != s.worker[j] && s.buf[i] != s.buf[j]);
        CHECK(s.buf[i] && s.buf[i][4999] == (float)i);
    }
    CHECK_EQ_INT(s.worker[0], 0); /* the caller runs the first range */
}

/* FP8 weights give the product of their dequantized BF16 form (transformers' dequant). */
IRIS_TEST(backend_cpu_linear_fp8_equals_bf16) {
    iris_backend *b = cpu();
    REQUIRE(b);
    int64_t out = 300, in = 260;
    wt w8 = make_weight(IRIS_DT_F8_E4M3, out, in, 0);
    uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)(out * in));
    for (int64_t i = 0; i < out * in; i++) {
        float f = (float)w8.deq[i]; /* already a bf16 value */
        uint32_t u;
        memcpy(&u, &f, 4);
        CHECK((u & 0xffff) == 0);
        wb[i] = (uint16_t)(u >> 16);
    }
    iris_tensor wbv = {.data = wb, .dtype = IRIS_DT_BF16, .rows = out, .cols = in};
    for (int n = 1; n <= 17; n += 16) {
        float *x = fvec((size_t)(n * in)), *y8 = poisoned((size_t)(n * out)), *yb = poisoned((size_t)(n * out));
        iris_tensor xv = f32_view(x, n, in, 0), y8v = f32_view(y8, n, out, 0), ybv = f32_view(yb, n, out, 0);
        REQUIRE(b->linear(b, &xv, &w8.w, NULL, &y8v) == 0);
        REQUIRE(b->linear(b, &xv, &wbv, NULL, &ybv) == 0);
        /* equal up to summation order (the two dtypes may take different kernels) */
        double d = 0;
        for (int64_t i = 0; i < n * out; i++) {
            double mag = 0;
            for (int64_t k = 0; k < in; k++) mag += fabs(x[(i / out) * in + k] * w8.deq[(i % out) * in + k]);
            double e = fabs(y8[i] - yb[i]) / mag;
            if (!(e <= d)) d = isnan(e) ? INFINITY : e;
        }
        CHECKF(d < 1e-6, "n %d: fp8 and its bf16 dequantization differ by %g of sum |x w|", n, d);
        free(x), free(y8), free(yb);
    }
    free(wb);
    free_weight(&w8);
}

/* ---- row-wise ops ------------------------------------------------------------------------- */

IRIS_TEST(backend_cpu_norms) {
    iris_backend *b = cpu();
    REQUIRE(b);
    const int rows = 13, d = 77, ld = 80;
    const float eps = 1e-6f;
    for (int layer = 0; layer < 2; layer++)
        for (int alias = 0; alias < 2; alias++) {
            float *x = fvec((size_t)rows * ld), *y = alias ? x : poisoned((size_t)rows * ld);
            for (int i = 0; i < rows * ld; i++) x[i] *= 3.0f;
            double *want = malloc(sizeof(double) * rows * d);
            wt w = make_weight(IRIS_DT_BF16, 1, d, 0);
            float *bias = fvec(d);
            for (int r = 0; r < rows; r++) {
                double mean = 0, var = 0, ss = 0;
                for (int i = 0; i < d; i++) mean += x[r * ld + i], ss += (double)x[r * ld + i] * x[r * ld + i];
                mean /= d;
                for (int i = 0; i < d; i++) var += (x[r * ld + i] - mean) * (x[r * ld + i] - mean);
                for (int i = 0; i < d; i++)
                    want[r * d + i] = layer ? (x[r * ld + i] - mean) / sqrt(var / d + eps) * w.deq[i] + bias[i]
                                            : x[r * ld + i] / sqrt(ss / d + eps) * w.deq[i];
            }
            iris_tensor xv = f32_view(x, rows, d, ld), yv = f32_view(y, rows, d, ld), bv = f32_view(bias, 1, d, 0);
            int rc = layer ? b->layer_norm(b, &xv, &w.w, &bv, eps, &yv) : b->rms_norm(b, &xv, &w.w, eps, &yv);
            CHECK(rc == 0);
            float *got = malloc(sizeof(float) * rows * d);
            for (int r = 0; r < rows; r++) memcpy(got + r * d, y + r * ld, sizeof(float) * d);
            double e = rel_err(got, want, rows * d, 1.0);
            CHECKF(e < 1e-5, "%s (alias %d): rel err %g", layer ? "layer_norm" : "rms_norm", alias, e);
            free(got), free(want), free(bias), free_weight(&w);
            if (!alias) free(y);
            free(x);
        }
}

/* add, silu_mul, gelu_tanh, gelu_erf against double precision: on 7 rows (one thread) and 200
 * (split across the pool), on the AVX2 activations and on a backend opened with IRIS_CPU_AVX2=0
 * (libm's). */
static void elementwise_case(iris_backend *b, int rows, const char *path) {
    const int d = 101, ld = 103, n = rows * d;
    float *x = fvec((size_t)rows * ld), *u = fvec((size_t)rows * ld), *orig = malloc(sizeof(float) * rows * ld);
    for (int i = 0; i < rows * ld; i++) x[i] *= 6.0f; /* cover the tails of silu and gelu */
    x[0] = -100.0f, x[1] = 100.0f, x[2] = -12.0f, x[3] = 0.0f; /* exp's clamps, the far tails, zero */
    double *want = malloc(sizeof(double) * n);
    float *got = malloc(sizeof(float) * n);
    for (int op = 0; op < 4; op++) {
        memcpy(orig, x, sizeof(float) * rows * ld);
        iris_tensor xv = f32_view(x, rows, d, ld), uv = f32_view(u, rows, d, ld);
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < d; i++) {
                double v = x[r * ld + i], w = u[r * ld + i];
                want[r * d + i] = op == 0 ? v + w
                                : op == 1 ? v / (1 + exp(-v)) * w
                                : op == 2 ? 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                                          : 0.5 * v * (1 + erf(v / sqrt(2.0)));
            }
        int rc = op == 0 ? b->add(b, &xv, &uv) : op == 1 ? b->silu_mul(b, &xv, &uv) : op == 2 ? b->gelu_tanh(b, &xv)
                                                                                              : b->gelu_erf(b, &xv);
        CHECK(rc == 0);
        for (int r = 0; r < rows; r++) memcpy(got + r * d, x + r * ld, sizeof(float) * d);
        double e = rel_err(got, want, n, 1.0); /* fp32 1 + tanh(..) cancels in the far tail: absolute */
        CHECKF(e < 2e-6, "%s, %d rows: elementwise op %d: rel err %g", path, rows, op, e);
        for (int i = 0; i < n; i++) CHECKF(isfinite(got[i]), "%s op %d: element %d is %g", path, op, i, got[i]);
        for (int r = 0; r < rows; r++) /* the stride gap is untouched */
            CHECK(memcmp(x + r * ld + d, orig + r * ld + d, sizeof(float) * (ld - d)) == 0);
        memcpy(x, orig, sizeof(float) * rows * ld);
    }
    free(x), free(u), free(orig), free(want), free(got);
}

IRIS_TEST(backend_cpu_elementwise) {
    iris_backend *b = cpu(), *scalar = cpu_scalar();
    REQUIRE(b && scalar);
    for (int rows = 7; rows <= 200; rows += 193) {
        elementwise_case(b, rows, iris_cpu_has_avx2() ? "avx2" : "scalar");
        elementwise_case(scalar, rows, "scalar");
    }
    scalar->destroy(scalar);
}

IRIS_TEST(backend_cpu_rope_mrope) {
    /* Interleaved MRoPE: slot j takes position component dim_of[j]; NeoX pairing j ↔ j + hd/2. */
    iris_backend *b = cpu();
    REQUIRE(b);
    const int n = 11, nh = 3, hd = 40, half = hd / 2, stride = 14;
    int dim_of[20];
    float inv_freq[20];
    for (int j = 0; j < half; j++) {
        dim_of[j] = j % 3 == 1 && j < 9 ? 1 : j % 3 == 2 && j < 9 ? 2 : 0;
        inv_freq[j] = (float)pow(5e5, -2.0 * j / hd);
    }
    int32_t pos[3 * 14];
    for (int i = 0; i < 3 * stride; i++) pos[i] = (int32_t)(rnd() % 300);
    float *x = fvec((size_t)n * nh * hd);
    double *want = malloc(sizeof(double) * n * nh * hd);
    for (int r = 0; r < n; r++)
        for (int h = 0; h < nh; h++)
            for (int j = 0; j < half; j++) {
                double a = (double)pos[dim_of[j] * stride + r] * inv_freq[j];
                double x1 = x[(r * nh + h) * hd + j], x2 = x[(r * nh + h) * hd + j + half];
                want[(r * nh + h) * hd + j] = x1 * cos(a) - x2 * sin(a);
                want[(r * nh + h) * hd + j + half] = x2 * cos(a) + x1 * sin(a);
            }
    iris_tensor xv = f32_view(x, n, nh * hd, 0);
    CHECK(b->rope(b, &xv, nh, hd, pos, stride, dim_of, inv_freq) == 0);
    /* fp32 angles up to 300 rad: ~2e-5 absolute on values of magnitude up to 1, so the error is
     * taken against 1 (near-zero outputs would make any relative bound a matter of the seed) */
    double e = rel_err(x, want, n * nh * hd, 1.0);
    CHECKF(e < 1e-4, "rope: err %g", e);
    free(x), free(want);
}

IRIS_TEST(backend_cpu_rows) {
    iris_backend *b = cpu();
    REQUIRE(b);
    const int V = 29, d = 19, n = 6;
    wt table = make_weight(IRIS_DT_BF16, V, d, 0);
    int32_t ids[6] = {0, 28, 5, 5, 17, 3};
    float *y = poisoned(n * d);
    iris_tensor yv = f32_view(y, n, d, 0);
    CHECK(b->embed(b, &table.w, ids, n, &yv) == 0);
    int ok = 1;
    for (int i = 0; i < n; i++)
        for (int e = 0; e < d; e++) ok &= y[i * d + e] == (float)table.deq[ids[i] * d + e];
    CHECK(ok);
    int32_t bad_id = V;
    iris_tensor y1 = f32_view(y, 1, d, 0);
    CHECK(b->embed(b, &table.w, &bad_id, 1, &y1) == IRIS_EINVAL);
    CHECK_CONTAINS(b->err.msg, "29");

    /* set_rows / add_rows / get_rows on an [8, d] activation */
    float *act = fvec(8 * d), *src = fvec(3 * d), *ref = malloc(sizeof(float) * 8 * d), *g = poisoned(3 * d);
    memcpy(ref, act, sizeof(float) * 8 * d);
    int32_t idx[3] = {6, 0, 3};
    iris_tensor av = f32_view(act, 8, d, 0), sv = f32_view(src, 3, d, 0), gv = f32_view(g, 3, d, 0);
    CHECK(b->add_rows(b, &av, idx, &sv) == 0);
    for (int i = 0; i < 3; i++)
        for (int e = 0; e < d; e++) ref[idx[i] * d + e] += src[i * d + e];
    CHECK(memcmp(act, ref, sizeof(float) * 8 * d) == 0);
    CHECK(b->set_rows(b, &av, idx, &sv) == 0);
    for (int i = 0; i < 3; i++) memcpy(ref + idx[i] * d, src + i * d, sizeof(float) * d);
    CHECK(memcmp(act, ref, sizeof(float) * 8 * d) == 0);
    int32_t gi[3] = {7, 6, 7};
    CHECK(b->get_rows(b, &av, gi, 3, &gv) == 0);
    for (int i = 0; i < 3; i++) CHECK(memcmp(g + i * d, ref + gi[i] * d, sizeof(float) * d) == 0);

    /* interp4: 4 weighted taps of a table */
    int32_t ti[2 * 4] = {0, 1, 2, 3, 28, 27, 0, 14};
    float tw[2 * 4] = {0.1f, 0.2f, 0.3f, 0.4f, 0.25f, 0.25f, 0.5f, 0.0f};
    float *iy = poisoned(2 * d);
    iris_tensor iv = f32_view(iy, 2, d, 0);
    CHECK(b->interp4(b, &table.w, ti, tw, 2, &iv) == 0);
    double want[2 * 19];
    for (int i = 0; i < 2; i++)
        for (int e = 0; e < d; e++) {
            want[i * d + e] = 0;
            for (int k = 0; k < 4; k++) want[i * d + e] += tw[i * 4 + k] * table.deq[ti[i * 4 + k] * d + e];
        }
    CHECK(rel_err(iy, want, 2 * d, 1.0) < 1e-6); /* 4 fp32 products of values up to 1: ~2e-7 */
    free(y), free(act), free(src), free(ref), free(g), free(iy);
    free_weight(&table);
}

/* ---- attention ---------------------------------------------------------------------------- */

/* Contiguous causal attention of one sequence in double: q [n, nq·hd] for tokens
 * [past, past + n) over k, v [past + n, nkv·hd]. */
static void ref_causal(const float *q, const float *k, const float *v, int past, int n, int nq, int nkv, int hd,
                       double *o) {
    double *s = malloc(sizeof(double) * (size_t)(past + n));
    for (int i = 0; i < n; i++)
        for (int h = 0; h < nq; h++) {
            int kh = h / (nq / nkv), ctx = past + i + 1;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < ctx; j++) {
                double d = 0;
                for (int e = 0; e < hd; e++) d += (double)q[(i * nq + h) * hd + e] * k[(j * nkv + kh) * hd + e];
                s[j] = d / sqrt(hd);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j < ctx; j++) sum += (s[j] = exp(s[j] - mx));
            for (int e = 0; e < hd; e++) {
                double a = 0;
                for (int j = 0; j < ctx; j++) a += s[j] / sum * v[(j * nkv + kh) * hd + e];
                o[(i * nq + h) * hd + e] = a;
            }
        }
    free(s);
}

IRIS_TEST(backend_cpu_paged_attention) {
    /* Two sequences in one step over shuffled blocks (GQA 6:2, hd 28: a tail past eight lanes): one with 21 tokens
     * cached and 13 new (a prefill chunk), one decoding its 40th token. */
    iris_backend *b = cpu();
    REQUIRE(b);
    enum { NQ = 6, NKV = 2, HD = 28, NB = 12, BLK = 16 };
    const int past[2] = {21, 39}, nnew[2] = {13, 1}, kd = NKV * HD, qd = NQ * HD;
    const int32_t tables[2][4] = {{9, 2, 11, -1}, {4, 0, 7, -1}};
    float *kc = poisoned((size_t)NB * BLK * kd), *vc = poisoned((size_t)NB * BLK * kd);
    iris_kv_layer kv = {.k = kc, .v = vc, .dtype = IRIS_DT_F32, .n_blocks = NB, .n_kv_heads = NKV, .head_dim = HD};
    float *K[2], *Vv[2], *Q[2];
    for (int s = 0; s < 2; s++) {
        int tot = past[s] + nnew[s];
        K[s] = fvec((size_t)tot * kd), Vv[s] = fvec((size_t)tot * kd), Q[s] = fvec((size_t)nnew[s] * qd);
        for (int i = 0; i < tot * kd; i++) K[s][i] *= 2.0f;
    }
    /* the cached tokens, written one step earlier */
    for (int s = 0; s < 2; s++) {
        int32_t slot[64], seq0[64], ctx0[64];
        for (int j = 0; j < past[s]; j++) slot[j] = tables[s][j / BLK] * BLK + j % BLK, seq0[j] = 0, ctx0[j] = 1;
        iris_attn_meta m = {.n_rows = past[s], .row_seq = seq0, .row_ctx = ctx0, .block_tables = tables[s],
                            .max_blocks = 4, .slot = slot};
        iris_tensor kv_ = f32_view(K[s], past[s], kd, 0), vv_ = f32_view(Vv[s], past[s], kd, 0);
        REQUIRE(b->kv_write(b, &kv, &kv_, &vv_, &m) == 0);
    }
    /* this step: rows of both sequences, flattened */
    int R = nnew[0] + nnew[1];
    float *q = malloc(sizeof(float) * (size_t)R * qd), *k = malloc(sizeof(float) * (size_t)R * kd),
          *v = malloc(sizeof(float) * (size_t)R * kd), *o = poisoned((size_t)R * qd);
    int32_t row_seq[14], row_ctx[14], slot[14];
    for (int s = 0, r = 0; s < 2; s++)
        for (int i = 0; i < nnew[s]; i++, r++) {
            int j = past[s] + i;
            memcpy(q + r * qd, Q[s] + i * qd, sizeof(float) * qd);
            memcpy(k + r * kd, K[s] + j * kd, sizeof(float) * kd);
            memcpy(v + r * kd, Vv[s] + j * kd, sizeof(float) * kd);
            row_seq[r] = s, row_ctx[r] = j + 1, slot[r] = tables[s][j / BLK] * BLK + j % BLK;
        }
    iris_attn_meta m = {.n_rows = R, .row_seq = row_seq, .row_ctx = row_ctx, .block_tables = &tables[0][0],
                        .max_blocks = 4, .slot = slot};
    iris_tensor kt = f32_view(k, R, kd, 0), vt = f32_view(v, R, kd, 0), qt = f32_view(q, R, qd, 0),
                ot = f32_view(o, R, qd, 0);
    REQUIRE(b->kv_write(b, &kv, &kt, &vt, &m) == 0);
    iris_backend *scalar = cpu_scalar(); /* the AVX2 rows (where the CPU has it) and the scalar ones */
    REQUIRE(scalar);
    for (int pass = 0; pass < 2; pass++) {
        iris_backend *bk = pass ? scalar : b;
        for (int i = 0; i < R * qd; i++) o[i] = NAN;
        REQUIRE(bk->attn_paged(bk, &qt, &kv, &m, NQ, &ot) == 0);
        for (int s = 0, r0 = 0; s < 2; r0 += nnew[s], s++) {
            double *want = malloc(sizeof(double) * (size_t)nnew[s] * qd);
            ref_causal(Q[s], K[s], Vv[s], past[s], nnew[s], NQ, NKV, HD, want);
            double e = rel_err(o + r0 * qd, want, (int64_t)nnew[s] * qd, 1e-2);
            CHECKF(e < 1e-5, "paged attention (%s), sequence %d: rel err %g vs contiguous", pass ? "scalar" : "default", s, e);
            free(want);
        }
    }
    scalar->destroy(scalar);
    /* a slot outside the cache and a row seeing more than its table are errors */
    int32_t bad_slot = NB * BLK;
    iris_attn_meta mb = m;
    mb.n_rows = 1, mb.slot = &bad_slot;
    CHECK(b->kv_write(b, &kv, &kt, &vt, &mb) == IRIS_EINVAL);
    int32_t big_ctx = 4 * BLK + 1;
    mb.row_ctx = &big_ctx;
    CHECK(b->attn_paged(b, &qt, &kv, &mb, NQ, &ot) == IRIS_EINVAL);
    for (int s = 0; s < 2; s++) free(K[s]), free(Vv[s]), free(Q[s]);
    free(q), free(k), free(v), free(o), free(kc), free(vc);
}

/* Segment attention in double precision: o[i, h] for qkv rows [q | k | v] (nh heads of hd, row
 * stride ld), segments cu[0..n_seg]. */
static void ref_segments(const float *qkv, int ld, int nh, int hd, const int *cu, int n_seg, double *want) {
    double *s = malloc(sizeof(double) * (size_t)cu[n_seg]);
    for (int sg = 0; sg < n_seg; sg++)
        for (int i = cu[sg]; i < cu[sg + 1]; i++)
            for (int h = 0; h < nh; h++) {
                double mx = -INFINITY, sum = 0;
                for (int j = cu[sg]; j < cu[sg + 1]; j++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += (double)qkv[i * ld + h * hd + e] * qkv[j * ld + nh * hd + h * hd + e];
                    s[j - cu[sg]] = d / sqrt(hd);
                    mx = s[j - cu[sg]] > mx ? s[j - cu[sg]] : mx;
                }
                for (int j = 0; j < cu[sg + 1] - cu[sg]; j++) sum += (s[j] = exp(s[j] - mx));
                for (int e = 0; e < hd; e++) {
                    double a = 0;
                    for (int j = cu[sg]; j < cu[sg + 1]; j++) a += s[j - cu[sg]] / sum * qkv[j * ld + 2 * nh * hd + h * hd + e];
                    want[((int64_t)i * nh + h) * hd + e] = a;
                }
            }
    free(s);
}

IRIS_TEST(backend_cpu_segment_attention) {
    /* Vision attention: bidirectional, confined to each segment (image). */
    iris_backend *b = cpu();
    REQUIRE(b);
    enum { NH = 3, HD = 10 };
    const int cu[4] = {0, 5, 22, 23}, N = 23, ld = 3 * NH * HD + 2;
    float *qkv = fvec((size_t)N * ld), *o = poisoned((size_t)N * NH * HD);
    double *want = malloc(sizeof(double) * N * NH * HD);
    ref_segments(qkv, ld, NH, HD, cu, 3, want);
    iris_tensor qv = f32_view(qkv, N, 3 * NH * HD, ld), ov = f32_view(o, N, NH * HD, 0);
    CHECK(b->attn_segments(b, &qv, NH, HD, cu, 3, &ov) == 0);
    double e = rel_err(o, want, N * NH * HD, 1e-2);
    CHECKF(e < 1e-5, "segment attention: rel err %g", e);
    /* a one-token segment attends to itself only: o = v */
    CHECK(fabsf(o[22 * NH * HD] - qkv[22 * ld + 2 * NH * HD]) < 1e-6f);
    free(qkv), free(o), free(want);
}

/* Vision attention's AVX2 tiles (eight rows of a head at once, FMA, a vector exp) against the
 * scalar rows (a backend opened with IRIS_CPU_AVX2=0) within float rounding, on segments shorter and
 * longer than a tile and head sizes with and without a tail of fewer than eight; and a row's numbers
 * its own, bit for bit, whatever rows share its tile: the same segments after a 3-row segment (the
 * pool's split and so the tiles fall elsewhere) give the same bits. */
IRIS_TEST(backend_cpu_segment_attention_tiles) {
    iris_backend *b = cpu(), *scalar = cpu_scalar();
    REQUIRE(b && scalar);
    const int cu[7] = {0, 1, 8, 16, 25, 42, 82}, n_seg = 6, N = 82, NH = 3, SH = 3;
    int cu2[8] = {0};
    for (int s = 0; s <= n_seg; s++) cu2[s + 1] = cu[s] + SH;
    const int hds[2] = {20, 64};
    for (int k = 0; k < 2; k++) {
        int hd = hds[k], ld = 3 * NH * hd + 5, W = NH * hd;
        float *qkv2 = fvec((size_t)(N + SH) * ld), *qkv = qkv2 + (size_t)SH * ld;
        for (size_t i = 0; i < (size_t)(N + SH) * ld; i++) qkv2[i] *= 3.0f;  /* peaked softmaxes too */
        float *o1 = poisoned((size_t)N * W), *o2 = poisoned((size_t)N * W), *o3 = poisoned((size_t)(N + SH) * W);
        iris_tensor qv = f32_view(qkv, N, 3 * W, ld), qv2 = f32_view(qkv2, N + SH, 3 * W, ld),
                    ov1 = f32_view(o1, N, W, 0), ov2 = f32_view(o2, N, W, 0), ov3 = f32_view(o3, N + SH, W, 0);
        CHECK(b->attn_segments(b, &qv, NH, hd, cu, n_seg, &ov1) == 0);
        CHECK(scalar->attn_segments(scalar, &qv, NH, hd, cu, n_seg, &ov2) == 0);
        CHECK(b->attn_segments(b, &qv2, NH, hd, cu2, n_seg + 1, &ov3) == 0);
        double *want = malloc(sizeof(double) * (size_t)N * W);
        ref_segments(qkv, ld, NH, hd, cu, n_seg, want);
        double e1 = rel_err(o1, want, (int64_t)N * W, 1e-2), e2 = rel_err(o2, want, (int64_t)N * W, 1e-2);
        fprintf(stderr, "  head size %d against double precision: tiles %.3g, scalar rows %.3g\n", hd, e1, e2);
        /* peaked scores: fp32 rounding of a score is amplified by its exp, ~1e-4 both ways here */
        CHECKF(e1 < 2 * e2 + 1e-6 && e1 < 1e-3, "head size %d: tiles rel err %g (scalar rows %g)", hd, e1, e2);
        free(want);
        int diff = 0;
        for (int i = 0; i < N * W; i++) diff += memcmp(&o1[i], &o3[(size_t)SH * W + i], sizeof(float)) != 0;
        CHECKF(diff == 0, "head size %d: %d of %d outputs change when the tiles fall elsewhere", hd, diff, N * W);
        CHECK(!isnan(o1[0]) && !isnan(o1[N * W - 1]));
        free(qkv2), free(o1), free(o2), free(o3);
    }
    scalar->destroy(scalar);
}

/* Vision attention sixteen rows a vector (AVX-512) gives the eight-row AVX2 tiles' bits, on segments
 * shorter and longer than either tile and head sizes with tails of every kind (20: 16 + 4, 36: 32 +
 * 4, 64, 72: 64 + 8). */
IRIS_TEST(backend_cpu_segment_attention_avx512) {
    if (!iris_cpu_has_avx512() || !iris_cpu_has_avx2()) IRIS_TEST_SKIP("no AVX-512F on this CPU");
    const char *sw = getenv("IRIS_CPU_AVX2");
    if (sw && !strcmp(sw, "0")) IRIS_TEST_SKIP("IRIS_CPU_AVX2=0: the AVX2 and AVX-512 tiles are off");
    iris_backend *b = NULL, *b2 = NULL;
    iris_err err = {0};
    REQUIRE(iris_backend_cpu_open(&b, &err) == 0 && iris_backend_cpu_open(&b2, &err) == 0);
    CHECK(((iris_cpu_ctx *)b->ctx)->avx512);
    ((iris_cpu_ctx *)b2->ctx)->avx512 = 0;
    uint64_t rng = g_rng;
    const int cu[8] = {0, 1, 8, 16, 33, 50, 90, 119}, n_seg = 7, N = 119, NH = 3;
    const int hds[4] = {20, 36, 64, 72};
    for (int k = 0; k < 4; k++) {
        int hd = hds[k], ld = 3 * NH * hd + 5, W = NH * hd;
        float *qkv = fvec((size_t)N * ld);
        for (size_t i = 0; i < (size_t)N * ld; i++) qkv[i] *= 3.0f;
        float *o1 = poisoned((size_t)N * W), *o2 = poisoned((size_t)N * W);
        iris_tensor qv = f32_view(qkv, N, 3 * W, ld), ov1 = f32_view(o1, N, W, 0), ov2 = f32_view(o2, N, W, 0);
        CHECK(b->attn_segments(b, &qv, NH, hd, cu, n_seg, &ov1) == 0);
        CHECK(b2->attn_segments(b2, &qv, NH, hd, cu, n_seg, &ov2) == 0);
        int diff = 0;
        for (int i = 0; i < N * W; i++) diff += memcmp(&o1[i], &o2[i], sizeof(float)) != 0;
        CHECKF(diff == 0, "head size %d: %d of %d outputs differ from the AVX2 tiles'", hd, diff, N * W);
        CHECK(!isnan(o1[0]) && !isnan(o1[N * W - 1]));
        free(qkv), free(o1), free(o2);
    }
    g_rng = rng;
    b->destroy(b), b2->destroy(b2);
}

/* The AVX2 decode kernel directly, FP8 included (the linear routes FP8 to the
 * table path by measurement, so the kernel's FP8 decode is pinned down here). */

IRIS_TEST(backend_cpu_avx2_kernel) {
    if (!iris_cpu_has_avx2()) IRIS_TEST_SKIP("no AVX2 on this CPU: kernel not exercised");
    iris_fp8_table_init();
    /* every code, exactly: an 8-column row of code c, x = e_0, under two scales */
    const float scales[2] = {1.0f, 1.0f / 3.0f};
    int bad = 0, nan_ok = 1;
    for (int si = 0; si < 2; si++)
        for (int c = 0; c < 256; c++) {
            uint8_t row[8];
            memset(row, c, sizeof row);
            float x[8] = {1, 0, 0, 0, 0, 0, 0, 0}, y;
            iris_tensor w = {.data = row, .dtype = IRIS_DT_F8_E4M3, .rows = 1, .cols = 8, .scale = &scales[si],
                             .block = {128, 128}};
            REQUIRE(iris_cpu_dot_row_avx2(&w, 0, x, 1, 8, &y, 1) == 0);
            float want = ref_round_bf16(ref_e4m3((uint8_t)c) * scales[si]);
            if (isnan(want)) nan_ok &= isnan(y) != 0;
            else if (y != want && bad++ < 4)
                iris_test_fail(__FILE__, __LINE__, "code 0x%02x x %g: %g, want %g", c, scales[si], y, want);
        }
    CHECK_EQ_INT(bad, 0);
    CHECK(nan_ok);

    /* long rows with several scale blocks and a tail, 1 and 3 x rows */
    enum { IN = 517 };
    uint8_t q[IN];
    for (int i = 0; i < IN; i++) {
        q[i] = (uint8_t)((i * 37 + 11) % 256);
        if ((q[i] & 0x7f) == 0x7f) q[i] = 0x00;
    }
    float sc[5] = {1.0f, 0.3f, 1.0f / 3.0f, 7.0f, 0.01f}, x[3 * IN], y[3 * 4];
    iris_tensor w = {.data = q, .dtype = IRIS_DT_F8_E4M3, .rows = 1, .cols = IN, .scale = sc, .block = {128, 128}};
    wt b16 = make_weight(IRIS_DT_BF16, 2, IN, 0);
    for (int n = 1; n <= 3; n += 2)
        for (int bf = 0; bf < 2; bf++) {
            for (int i = 0; i < n * IN; i++) x[i] = unif();
            REQUIRE(iris_cpu_dot_row_avx2(bf ? &b16.w : &w, bf, x, n, IN, y, 4) == 0);
            for (int i = 0; i < n; i++) {
                double want = 0, mag = 0;
                for (int k = 0; k < IN; k++) {
                    double wk = bf ? b16.deq[IN + k] : ref_round_bf16(ref_e4m3(q[k]) * sc[k / 128]);
                    want += x[i * IN + k] * wk, mag += fabs(x[i * IN + k] * wk);
                }
                CHECKF(fabs(y[i * 4] - want) <= 1e-6 * mag, "%s row, n %d, x row %d: %g vs %g", bf ? "bf16" : "fp8", n,
                       i, y[i * 4], want);
            }
        }
    free_weight(&b16);
}

/* An E4M3 cache (--kv-cache-dtype fp8): kv_write stores each value's code (saturating at 448),
 * and attention over it equals attention over an F32 cache holding the decoded codes. */
IRIS_TEST(backend_cpu_paged_attention_fp8) {
    iris_backend *b = cpu();
    REQUIRE(b);
    enum { NQ = 4, NKV = 2, HD = 16, NB = 4, BLK = 16, N = 37 };
    const int kd = NKV * HD, qd = NQ * HD;
    int32_t table[4] = {2, 0, 3, 1}, slot[N], seq[N], ctx[N];
    float *k = fvec((size_t)N * kd), *v = fvec((size_t)N * kd), *q = fvec((size_t)N * qd);
    for (int i = 0; i < N * kd; i++) k[i] *= 3.0f;
    k[5] = 1000.0f, v[7] = -1e6f; /* saturate */
    for (int j = 0; j < N; j++) slot[j] = table[j / BLK] * BLK + j % BLK, seq[j] = 0, ctx[j] = j + 1;
    uint8_t *k8 = calloc((size_t)NB * BLK * kd, 1), *v8 = calloc((size_t)NB * BLK * kd, 1);
    float *kf = calloc((size_t)NB * BLK * kd, sizeof(float)), *vf = calloc((size_t)NB * BLK * kd, sizeof(float));
    float *kr = malloc(sizeof(float) * (size_t)N * kd), *vr = malloc(sizeof(float) * (size_t)N * kd);
    for (int i = 0; i < N * kd; i++)
        kr[i] = iris_fp8_e4m3_decode(iris_fp8_e4m3_encode(k[i])), vr[i] = iris_fp8_e4m3_decode(iris_fp8_e4m3_encode(v[i]));
    CHECK(kr[5] == 448.0f && vr[7] == -448.0f);
    iris_kv_layer c8 = {.k = k8, .v = v8, .dtype = IRIS_DT_F8_E4M3, .n_blocks = NB, .n_kv_heads = NKV, .head_dim = HD};
    iris_kv_layer c32 = {.k = kf, .v = vf, .dtype = IRIS_DT_F32, .n_blocks = NB, .n_kv_heads = NKV, .head_dim = HD};
    iris_attn_meta m = {.n_rows = N, .row_seq = seq, .row_ctx = ctx, .block_tables = table, .max_blocks = 4, .slot = slot};
    iris_tensor kt = f32_view(k, N, kd, 0), vt = f32_view(v, N, kd, 0), krt = f32_view(kr, N, kd, 0),
                vrt = f32_view(vr, N, kd, 0), qt = f32_view(q, N, qd, 0);
    REQUIRE(b->kv_write(b, &c8, &kt, &vt, &m) == 0);
    REQUIRE(b->kv_write(b, &c32, &krt, &vrt, &m) == 0);
    int codes_ok = 1;
    for (int j = 0; j < N; j++)
        for (int e = 0; e < kd; e++)
            codes_ok &= k8[(size_t)slot[j] * kd + e] == iris_fp8_e4m3_encode(k[j * kd + e]) &&
                        v8[(size_t)slot[j] * kd + e] == iris_fp8_e4m3_encode(v[j * kd + e]);
    CHECKF(codes_ok, "fp8 cache: the stored codes are not the values' E4M3 codes");
    float *o8 = poisoned((size_t)N * qd), *o32 = poisoned((size_t)N * qd);
    iris_tensor o8t = f32_view(o8, N, qd, 0), o32t = f32_view(o32, N, qd, 0);
    REQUIRE(b->attn_paged(b, &qt, &c8, &m, NQ, &o8t) == 0);
    REQUIRE(b->attn_paged(b, &qt, &c32, &m, NQ, &o32t) == 0);
    float d = 0;
    for (int i = 0; i < N * qd; i++) d = fabsf(o8[i] - o32[i]) > d ? fabsf(o8[i] - o32[i]) : d;
    CHECKF(d == 0.0f, "fp8 cache attention differs from F32 over the decoded codes by %g", d);
    /* a cache of another dtype is refused, not misread */
    iris_kv_layer cbad = c32;
    cbad.dtype = IRIS_DT_BF16;
    CHECK(b->attn_paged(b, &qt, &cbad, &m, NQ, &o8t) == IRIS_EUNSUPPORTED);
    CHECK(b->kv_write(b, &cbad, &kt, &vt, &m) == IRIS_EUNSUPPORTED);
    free(k), free(v), free(q), free(k8), free(v8), free(kf), free(vf), free(kr), free(vr), free(o8), free(o32);
}

/* The attention tiles (backend.h), which the runner lists for the CUDA flash and decode kernels:
 * each sequence's rows in 64-row pieces from its first row, a piece of 8 rows or more a tile, the
 * rows of a shorter one lone. */
IRIS_TEST(backend_attn_tiles) {
    int32_t seq[300], tiles[300], lone[300];
    int n = 0, nt = -1;
    for (int i = 0; i < 70; i++) seq[n++] = 0;  /* rows 0-69: tiles at 0 (64 rows), lone 64-69 (6) */
    seq[n++] = 1, seq[n++] = 2;                 /* rows 70, 71: decode rows, lone */
    for (int i = 0; i < 130; i++) seq[n++] = 3; /* rows 72-201: tiles at 72, 136 (64 each), 200-201 lone */
    int k = iris_attn_tiles(seq, n, tiles, &nt, lone);
    CHECKF(nt == 3 && tiles[0] == 0 && tiles[1] == 72 && tiles[2] == 136, "%d tiles: %d %d %d", nt, tiles[0],
           tiles[1], tiles[2]);
    CHECKF(k == 10 && lone[0] == 64 && lone[5] == 69 && lone[6] == 70 && lone[7] == 71 && lone[8] == 200 &&
               lone[9] == 201,
           "%d lone rows", k);
    for (int i = 0; i < 12; i++) seq[202 + i] = 4; /* a sequence's last piece of 8 rows or more: a tile */
    k = iris_attn_tiles(seq, 214, tiles, &nt, lone);
    CHECKF(nt == 4 && tiles[3] == 202 && k == 10, "%d tiles, %d lone rows with a 12-row sequence", nt, k);
    for (int i = 0; i < 3; i++) seq[i] = i; /* one row a sequence: every row lone */
    CHECK(iris_attn_tiles(seq, 3, tiles, &nt, lone) == 3 && nt == 0 && lone[2] == 2);
}
