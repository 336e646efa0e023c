/* cuda_gemv_i4.cu: 4-bit (I4, W4A16: backend.h) weights on CUDA — the decode GEMV for up to 16
 * tokens a launch (I4_GEMV_ROWS in all) on the tensor cores, the per-row reference GEMV, and the dequantization to BF16
 * rows that larger products multiply through cuBLASLt (cuda_linear.cu linear_i4).
 *
 * The tensor-core GEMV (k_gemv4_mma): the shape of cuda_gemv_mma.cu's FP8 kernel.  A CTA owns 16
 * output rows (one m16 tile; rows past `out` are clamped on load and not stored) and KW warps
 * (launch4's measured rule) split its columns in 128-column super-steps (warp w takes w, w + KW,
 * ...).  A warp holds U super-steps in registers (4 KB of weights; the first U loaded before
 * pdl_wait) and refills each slot with its next super-step as soon as that slot's mmas are issued,
 * so that the other slots' loads stay in flight behind the arithmetic.  Measured (H100, 8B's shapes,
 * best split each, cold weights): 7-14% faster than loading U at a time and then computing them
 * (o_proj, one round a warp: 3% slower), 3-19% faster than a cp.async ring in shared memory 8 KB a
 * warp deep and 30-55% than one 16 KB deep.  In a super-step lane (g = lane/4, t = lane%4)
 * loads 16 bytes (4 words, 32 weights) of row g and of row g + 8 at columns [128 s + 32 t, +32),
 * the scale (and packed zero point) of each row's group there (a group is a multiple of 32
 * columns, so one per load), and token g's x at those columns.  Word i's nibbles k and k + 4 land
 * in one register as a bf16 pair with one shift and one mask, and the mma's k index is permuted to
 * match: for word i, pair k = (column 8i + k, 8i + k + 4); the x words are permuted the same way
 * (one byte-permute per pair).  Tokens are the mma's n: one or two tiles of 8; rows of x past n
 * are a copy of the last one, never stored.  The KW partial tiles are summed through shared
 * memory in warp order, then bias or SwiGLU and one rounding to bf16 (cuda_mma.cuh).  Columns
 * past the last whole super-step (in a multiple of 32, not of 128) weigh 0 (their x as 0, nothing
 * loaded).  The weights are read past L1 (L1::no_allocate: each byte once), so that x stays there
 * for the CTAs after; for one token (XS) each CTA first copies x's row to shared memory, already
 * in the mma's k order, and the super-steps read their x there (no L2 round trip and no byte
 * permutes in the loop).  Measured (H100, iris bench 8B-INT4 at batch 1, 128-token prompt): 332 ->
 * 336 tok/s streamed alone, 352 with x in shared memory; batch 8 2,330 -> 2,410.
 *
 * Numerics: every weight is bf16((q - zero) · scale) as the CPU reference computes it.  q - zero
 * is exact in bf16 (a magic-number conversion: 0x4300 | nibble is 128 + nibble); with BF16 scales
 * the product is one bf16x2 fma with -0 (its fp32 value is exact, 5 x 8 significant bits, so the one
 * rounding to bf16 is the reference's); F16 and F32 scales take the fp32 product and the same
 * rounding.  Products and sums in fp32 (the tensor core's accumulation; the order of the sum
 * differs from the CPU's, as between any two GEMV schedules).
 * Memory-bound: each weight byte is read once; floor bytes(words + scales) / bandwidth. */
#include "cuda_mma.cuh"

#define I4_MAXW 8   /* warps a CTA */
#define I4_COLS 128 /* columns a super-step: 4 lanes x 32 */
#define I4_XS_BYTES (32 << 10) /* one token's x staged in shared memory up to this (in <= 16,384) */

/* Up to three I4 weights of one input width, group and scale dtype over the same x (one linear, the
 * q, k, v projections, or gate and up), by value to the kernel. */
struct gemv4_set {
    const uint32_t *q[3];
    const void *scale[3];
    const uint32_t *zero[3]; /* NULL: symmetric */
    const void *bias[3];
    bf16 *y[3];
    int64_t ldy[3], out[3];
    int bdt[3], m, group, gsh; /* gsh: log2(group) where a power of two, else -1 */
    int64_t in;
};

/* An I4 weight's pointers and shape, for the reference kernels. */
struct iris_tensor_i4 {
    const uint32_t *q;          /* [rows, cols / 8] words */
    const void *scale;          /* [rows, cols / group] in scale_dt */
    const uint32_t *zero;       /* [ceil(rows / 8), cols / group] packed zero points; NULL: symmetric */
    int scale_dt, group;
    int64_t rows, cols;
};

static iris_tensor_i4 i4_of(const iris_tensor *w) {
    iris_tensor_i4 q = {(const uint32_t *)w->data, w->qscale, w->qzero, (int)w->qscale_dtype, w->group, w->rows, w->cols};
    return q;
}

/* d = a · b + c on bf16 pairs, one rounding each (sm_80+). */
static __device__ __forceinline__ uint32_t bf2_fma(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* Scale element i raw: bf16 / f16 bits, or f32 bits (SDT 0 / 1 / 2). */
template <int SDT> static __device__ __forceinline__ uint32_t i4_scale_raw(const void *s, int64_t i) {
    if (SDT == 2) return __float_as_uint(__ldg((const float *)s + i));
    return __ldg((const unsigned short *)s + i);
}
/* The raw scale as the pair step4 multiplies by: BF16 doubled into a bf16 pair; else fp32 bits. */
template <int SDT> static __device__ __forceinline__ uint32_t i4_scale_op(uint32_t raw) {
    if (SDT == 0) return raw | raw << 16;
    if (SDT == 1) return __float_as_uint(f16_to_f32((uint16_t)raw));
    return raw;
}

/* Nibbles at bits 0-3 and 16-19 of v (stored q + 8) → the bf16 pair bf16((q - zero) · scale).
 * negz: the pair -(128 + stored zero) (symmetric: stored 8); s: i4_scale_op's. */
template <int SDT> static __device__ __forceinline__ uint32_t i4_pair(uint32_t v, uint32_t negz, uint32_t s) {
    const uint32_t d = bf2_fma(v | 0x43004300u, 0x3f803f80u, negz); /* (128 + q) · 1 - (128 + z): exact */
    if (SDT == 0) return bf2_fma(d, s, 0x80008000u);
    const float f = __uint_as_float(s);
    __nv_bfloat162 r = __floats2bfloat162_rn(__uint_as_float(d << 16) * f, __uint_as_float(d & 0xffff0000u) * f);
    return *(uint32_t *)&r;
}

/* The mmas of one super-step of one matrix: rows g (words wa, scale sa, zero pair za) and g + 8 (wb,
 * sb, zb) dequantized once, times the x pairs of NT groups of 8 tokens (X[nt][4 i + k]: word i's
 * pair k). */
template <int SDT, int NT>
static __device__ __forceinline__ void step4(float (*c)[4], uint4 wa, uint4 wb, uint32_t sa, uint32_t sb, uint32_t za,
                                             uint32_t zb, const uint32_t (*X)[16]) {
    const uint32_t a4[4] = {wa.x, wa.y, wa.z, wa.w}, b4[4] = {wb.x, wb.y, wb.z, wb.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint32_t A[4], B[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            A[k] = i4_pair<SDT>((a4[i] >> (4 * k)) & 0x000f000fu, za, sa);
            B[k] = i4_pair<SDT>((b4[i] >> (4 * k)) & 0x000f000fu, zb, sb);
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const uint32_t a0[4] = {A[0], B[0], A[1], B[1]}, a1[4] = {A[2], B[2], A[3], B[3]};
            mma16816(c[nt], a0, X[nt][4 * i], X[nt][4 * i + 1]);
            mma16816(c[nt], a1, X[nt][4 * i + 2], X[nt][4 * i + 3]);
        }
    }
}

/* SWIGLU: p.q[0] gate, p.q[1] up, y = silu(bf16(gate)) ⊙ bf16(up) into p.y[0] (the roundings of
 * linear, linear, silu_mul); else the CTAs walk p's matrices in order, bias added before the one
 * rounding. */
template <int SDT, int SWIGLU, int NT, int XS>
__global__ void __launch_bounds__(I4_MAXW * 32, 2) k_gemv4_mma(const gemv4_set p, const bf16 *__restrict__ x,
                                                                int64_t ldx, int n) {
    extern __shared__ float red[]; /* [KW][1 + SWIGLU][NT * 128], then (XS) x's row in mma order */
    constexpr int U = (SWIGLU ? 2 : 4) / NT; /* super-steps in flight a warp: 4 KB of weights (2 KB for 9-16 tokens) */
    const int KW = blockDim.x / 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int i;
    const int64_t tile = gemv_mma_tile<SWIGLU>(p, i);
    const int j = SWIGLU ? 1 : i; /* the second matrix (up) */
    const int64_t r0 = tile * 16, out = p.out[i], in = p.in, wpr = in / 8, ng = in / p.group;
    const int64_t ra = min(r0 + g, out - 1), rb = min(r0 + g + 8, out - 1);
    const int sha = 4 * (int)(ra & 7), shb = 4 * (int)(rb & 7);
    const uint32_t *Q0 = p.q[i], *Q1 = p.q[j], *Z0 = p.zero[i], *Z1 = p.zero[j];
    const void *S0 = p.scale[i], *S1 = p.scale[j];
    const int64_t steps = (in + I4_COLS - 1) / I4_COLS;
    const bf16 *xr[NT];
    float c0[NT][4], c1[NT][4];
    gemv_mma_begin<NT>(x, ldx, n, g, xr, c0, c1);
    /* The slots' loads: weights, raw scales and zero words (0x88888888, every nibble 8, when
     * symmetric); a lane past the columns holds zero words and scales (its products are 0). */
    uint4 wa[U], wb[U], ua[U], ub[U];
    uint32_t sa[U], sb[U], su[U], sv[U], za[U], zb[U], zu[U], zv[U];
    auto load_sz = [&](const void *S, const uint32_t *Z, int64_t c, uint32_t &s0, uint32_t &s1, uint32_t &z0,
                       uint32_t &z1) {
        const int64_t gi = p.gsh >= 0 ? c >> p.gsh : c / p.group;
        s0 = i4_scale_raw<SDT>(S, ra * ng + gi);
        s1 = i4_scale_raw<SDT>(S, rb * ng + gi);
        z0 = Z ? __ldg(Z + (ra >> 3) * ng + gi) : 0x88888888u;
        z1 = Z ? __ldg(Z + (rb >> 3) * ng + gi) : 0x88888888u;
    };
    /* slot u ← super-step st (nothing past the warp's last) */
    auto load_slot = [&](int u, int64_t st) {
        if (st >= steps) return;
        const int64_t c = st * I4_COLS + t * 32;
        if (c < in) {
            wa[u] = ldg_stream((const uint4 *)(Q0 + ra * wpr + c / 8));
            wb[u] = ldg_stream((const uint4 *)(Q0 + rb * wpr + c / 8));
            load_sz(S0, Z0, c, sa[u], sb[u], za[u], zb[u]);
            if (SWIGLU) {
                ua[u] = ldg_stream((const uint4 *)(Q1 + ra * wpr + c / 8));
                ub[u] = ldg_stream((const uint4 *)(Q1 + rb * wpr + c / 8));
                load_sz(S1, Z1, c, su[u], sv[u], zu[u], zv[u]);
            }
        } else {
            wa[u] = wb[u] = ua[u] = ub[u] = make_uint4(0, 0, 0, 0);
            sa[u] = sb[u] = su[u] = sv[u] = 0;
            za[u] = zb[u] = zu[u] = zv[u] = 0x88888888u;
        }
    };
    pdl_launch_next();
#pragma unroll
    for (int u = 0; u < U; u++) load_slot(u, warp + (int64_t)u * KW);
    pdl_wait();
    /* XS (one token): the CTA copies x's row to shared memory once, each 16 bytes (8 columns) in the
     * mma's k order, so that a super-step reads a lane's 64 bytes of it without a round trip to L2
     * and without permuting them */
    uint4 *xs = (uint4 *)(red + KW * (1 + SWIGLU) * NT * 128);
    if (XS) {
#pragma unroll 4
        for (int64_t b = threadIdx.x; b < in / 8; b += blockDim.x) {
            const uint4 v = *(const uint4 *)(x + 8 * b);
            xs[b] = make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632), __byte_perm(v.y, v.w, 0x5410),
                               __byte_perm(v.y, v.w, 0x7632));
        }
        __syncthreads();
    }
    for (int64_t s0 = warp; s0 < steps; s0 += (int64_t)KW * U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t st = s0 + (int64_t)u * KW, c = st * I4_COLS + t * 32;
            if (st >= steps) break;
            uint32_t X[NT][16];
            if (XS) {
#pragma unroll
                for (int w = 0; w < 4; w++) {
                    const uint4 v = c < in ? xs[c / 8 + w] : make_uint4(0, 0, 0, 0);
                    X[0][4 * w] = v.x, X[0][4 * w + 1] = v.y, X[0][4 * w + 2] = v.z, X[0][4 * w + 3] = v.w;
                }
            } else
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int w = 0; w < 4; w++) {
                    uint4 v = c < in ? *(const uint4 *)(xr[nt] + c + 8 * w) : make_uint4(0, 0, 0, 0);
                    X[nt][4 * w] = __byte_perm(v.x, v.z, 0x5410);     /* columns 8w, 8w + 4 */
                    X[nt][4 * w + 1] = __byte_perm(v.x, v.z, 0x7632); /* 8w + 1, 8w + 5 */
                    X[nt][4 * w + 2] = __byte_perm(v.y, v.w, 0x5410);
                    X[nt][4 * w + 3] = __byte_perm(v.y, v.w, 0x7632);
                }
            /* -(128 + zero) as a bf16 pair: 0xc300 | zero, both halves */
            const uint32_t nza = 0xc300c300u | ((za[u] >> sha) & 15u) * 0x10001u;
            const uint32_t nzb = 0xc300c300u | ((zb[u] >> shb) & 15u) * 0x10001u;
            step4<SDT, NT>(c0, wa[u], wb[u], i4_scale_op<SDT>(sa[u]), i4_scale_op<SDT>(sb[u]), nza, nzb, X);
            if (SWIGLU) {
                const uint32_t nzu = 0xc300c300u | ((zu[u] >> sha) & 15u) * 0x10001u;
                const uint32_t nzv = 0xc300c300u | ((zv[u] >> shb) & 15u) * 0x10001u;
                step4<SDT, NT>(c1, ua[u], ub[u], i4_scale_op<SDT>(su[u]), i4_scale_op<SDT>(sv[u]), nzu, nzv, X);
            }
            load_slot(u, st + (int64_t)KW * U); /* the slot's next super-step, in flight behind the others */
        }
    }

    gemv_mma_finish<SWIGLU, NT>(p, i, red, c0, c1, r0, out, n);
}

/* The split (no more warps than super-steps): 8 warps a CTA where the CTAs of 8 fit one wave; else 4
 * where those of 4 do; past one wave, 8 for up to 4 waves of 8 at 1-8 tokens, else 4.  Measured on an
 * H100 80GB HBM3 (bench_cuda int4, every split forced, weights cycled through 256 MB as a step reads
 * them; us at 1 / 8 tokens): q/k/v (384 tiles) 4 warps 9.59 / 9.80 against 8 10.39 / 11.59; o_proj
 * and down_proj (256) 8: 6.52 / 7.02 and 15.14 / 16.00, 4: 8.98 / 9.31 and 24.92 / 25.27; gate/up
 * (768) 8: 26.62 / 27.78, 4: 26.88 / 28.97, 2: 30.84 / 31.83 (the one-wave rule before took 2),
 * 16 tokens 4: 33.20, 8: 34.98; an I4 lm_head (151,936 rows, 9,496 tiles) 4: 154.99 / 164.79, 2:
 * 152.35 / 178.32, 8: 175.31 / 186.85.  cx->i4_kw forces one (bench_cuda int4 measures each). */
template <int SDT, int SWIGLU, int NT, int XS>
static void launch4(const cuda_ctx *cx, const gemv4_set &p, const bf16 *x, int64_t ldx, int n) {
    const int64_t steps = (p.in + I4_COLS - 1) / I4_COLS;
    int64_t tiles = 0;
    for (int i = 0; i < (SWIGLU ? 1 : p.m); i++) tiles += (p.out[i] + 15) / 16;
    auto red_of = [&](int kw) { return (size_t)kw * (1 + SWIGLU) * NT * 128 * sizeof(float) + (XS ? (size_t)p.in * 2 : 0); };
    auto kern = k_gemv4_mma<SDT, SWIGLU, NT, XS>;
    int kw = cx->i4_kw;
    if (kw <= 0 || kw > I4_MAXW) {
        const int64_t sms = cx->prop.multiProcessorCount;
        const int64_t w8 = (int64_t)gemv_mma_slots(kern, 8, red_of(8)) * sms, w4 = (int64_t)gemv_mma_slots(kern, 4, red_of(4)) * sms;
        kw = tiles <= w8 ? 8 : tiles <= w4 ? 4 : NT == 1 && tiles <= 4 * w8 ? 8 : 4;
    }
    if (kw > steps) kw = (int)steps;
    launch(cx, kern, dim3((unsigned)tiles), dim3(kw * 32), red_of(kw), p, x, ldx, n);
}

template <int SDT>
static void launch4_n(const cuda_ctx *cx, const gemv4_set &p, const bf16 *x, int64_t ldx, int n, int swiglu) {
    const int xs = n == 1 && p.in * 2 <= I4_XS_BYTES;
    if (swiglu) {
        if (xs) launch4<SDT, 1, 1, 1>(cx, p, x, ldx, n);
        else if (n <= 8) launch4<SDT, 1, 1, 0>(cx, p, x, ldx, n);
        else launch4<SDT, 1, 2, 0>(cx, p, x, ldx, n);
    } else {
        if (xs) launch4<SDT, 0, 1, 1>(cx, p, x, ldx, n);
        else if (n <= 8) launch4<SDT, 0, 1, 0>(cx, p, x, ldx, n);
        else launch4<SDT, 0, 2, 0>(cx, p, x, ldx, n);
    }
}

/* An I4 weight the tensor-core GEMV takes, of `in` columns, `group`, scales of `sdt`. */
static int gemv4_fits(const iris_tensor *w, int64_t in, int group, int sdt) {
    return w->dtype == IRIS_DT_I4 && w->cols == in && w->group == group && (int)w->qscale_dtype == sdt &&
           group > 0 && group % 32 == 0 && in % group == 0 && w->qscale && tld(w) == w->cols &&
           is_aligned16(w->data) && w->rows > 0;
}

int iris_cuda_gemv_i4(iris_backend *b, const iris_tensor *x, int m, const iris_tensor *const *ws, const iris_tensor *bias,
                      iris_tensor *const *ys, int swiglu) {
    cuda_ctx *cx = cuda_of(b);
    const int64_t n = x->rows, in = x->cols;
    if (cx->i4_ref || !cx->gemv_mma || m < 1 || m > 3 || (swiglu && m != 2) || (bias && m != 1) || n < 1 ||
        n > (cx->i4_rows > 0 ? cx->i4_rows : I4_GEMV_ROWS) || x->dtype != IRIS_DT_BF16 || tld(x) % 8 ||
        !is_aligned16(x->data))
        return 1;
    const int group = ws[0]->group, sdt = (int)ws[0]->qscale_dtype;
    if (sdt != IRIS_DT_BF16 && sdt != IRIS_DT_F16 && sdt != IRIS_DT_F32) return 1;
    if (bias && (bias->rows * bias->cols != ws[0]->rows || (bias->dtype != IRIS_DT_BF16 && bias->dtype != IRIS_DT_F32)))
        return 1;
    gemv4_set p;
    memset(&p, 0, sizeof p);
    p.m = m, p.group = group, p.in = in, p.gsh = (group & (group - 1)) ? -1 : __builtin_ctz((unsigned)group);
    for (int i = 0; i < m; i++) {
        const iris_tensor *w = ws[i], *y = ys[swiglu ? 0 : i];
        if (!gemv4_fits(w, in, group, sdt) || y->dtype != IRIS_DT_BF16 || y->rows != n || y->cols != ws[swiglu ? 0 : i]->rows)
            return 1;
        p.q[i] = (const uint32_t *)w->data, p.scale[i] = w->qscale, p.zero[i] = w->qzero;
        p.y[i] = (bf16 *)y->data, p.ldy[i] = tld(y), p.out[i] = w->rows;
        p.bias[i] = NULL, p.bdt[i] = -1;
    }
    if (swiglu && ws[1]->rows != ws[0]->rows) return 1;
    if (bias) p.bias[0] = bias->data, p.bdt[0] = bias->dtype;
    /* 16 tokens a launch (more only where iris_cuda_set_i4_rows allows them) */
    gemv4_set pc = p;
    for (int64_t t0 = 0; t0 < n; t0 += 16) {
        const int nc = (int)(n - t0 < 16 ? n - t0 : 16);
        const bf16 *xd = (const bf16 *)x->data + t0 * tld(x);
        for (int i = 0; i < m; i++) pc.y[i] = p.y[i] + t0 * p.ldy[i];
        if (sdt == IRIS_DT_BF16) launch4_n<0>(cx, pc, xd, tld(x), nc, swiglu);
        else if (sdt == IRIS_DT_F16) launch4_n<1>(cx, pc, xd, tld(x), nc, swiglu);
        else launch4_n<2>(cx, pc, xd, tld(x), nc, swiglu);
        cx->i4_runs++;
    }
    return iris_cuda_check(b, swiglu ? "linear_swiglu (4-bit gemv)" : m > 1 ? "linear_n (4-bit gemv)" : "linear (4-bit gemv)");
}

/* ---- the reference GEMV and the dequantization --------------------------------------------- */

/* Word wi (8 weights, one group: the group is a multiple of 8) of row r of an I4 weight as fp32,
 * each bf16((q - zero) · scale) as the CPU backend and compressed-tensors compute it. */
static __device__ __forceinline__ void i4_word(const iris_tensor_i4 &w, int64_t r, int64_t wi, float *f) {
    uint32_t q = __ldg(w.q + r * (w.cols / 8) + wi);
    int64_t ng = w.cols / w.group, g = wi * 8 / w.group;
    float s = load_vec(w.scale, w.scale_dt, r * ng + g);
    int z = w.zero ? (int)((__ldg(w.zero + (r / 8) * ng + g) >> (4 * (r % 8))) & 15u) - 8 : 0;
#pragma unroll
    for (int k = 0; k < 8; k++) f[k] = round_bf16((float)((int)((q >> (4 * k)) & 15u) - 8 - z) * s);
}

/* y[t, row] = x[t] · W[row] for t < n <= 8: one warp per output row, lanes stride over its words
 * (one 4-byte load a lane); fp32 accumulators, a warp reduction, the bias added before the one
 * rounding.  Any group of 8s and any alignment; the check and baseline of k_gemv4_mma. */
template <int NT>
__global__ void __launch_bounds__(128) k_gemv_i4(iris_tensor_i4 w, const bf16 *__restrict__ x, int64_t ldx, int n,
                                                 bf16 *y, int64_t ldy, const void *bias, int bdt) {
    int lane = threadIdx.x & 31;
    int64_t row = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= w.rows) return;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    for (int64_t wi = lane; wi < w.cols / 8; wi += 32) {
        float f[8];
        i4_word(w, row, wi, f);
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (t < n) {
                const bf16 *xr = x + (int64_t)t * ldx + wi * 8;
#pragma unroll
                for (int k = 0; k < 8; k++) acc[t] += bf2f(xr[k]) * f[k];
            }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float v = warp_sum(acc[t]);
        if (lane == 0 && t < n) y[(int64_t)t * ldy + row] = f2bf(v + (bias ? load_vec(bias, bdt, row) : 0.0f));
    }
}

int iris_cuda_gemv_i4_ref(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const void *bias, int bdt,
                          iris_tensor *y) {
    cuda_ctx *cx = cuda_of(b);
    const int64_t n = x->rows;
    if (n > 8) return 1;
    iris_tensor_i4 q = i4_of(w);
    unsigned grid = (unsigned)((w->rows + 3) / 4);
    const bf16 *xd = (const bf16 *)x->data;
    bf16 *yd = (bf16 *)y->data;
    if (n <= 1) k_gemv_i4<1><<<grid, 128, 0, cx->stream>>>(q, xd, tld(x), (int)n, yd, tld(y), bias, bdt);
    else if (n <= 4) k_gemv_i4<4><<<grid, 128, 0, cx->stream>>>(q, xd, tld(x), (int)n, yd, tld(y), bias, bdt);
    else k_gemv_i4<8><<<grid, 128, 0, cx->stream>>>(q, xd, tld(x), (int)n, yd, tld(y), bias, bdt);
    return iris_cuda_check(b, "linear (4-bit reference gemv)");
}

/* Rows [r0, r0 + nr) as BF16 into dst [nr, in]: one thread per word (8 weights), any layout. */
__global__ void k_dequant_i4(iris_tensor_i4 w, int64_t r0, int64_t nr, bf16 *dst) {
    int64_t words = w.cols / 8, total = nr * words;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = r0 + i / words, wi = i % words;
        float f[8];
        i4_word(w, r, wi, f);
        bf16 *d = dst + (r - r0) * w.cols + wi * 8;
#pragma unroll
        for (int k = 0; k < 8; k++) d[k] = f2bf(f[k]);
    }
}

/* The same, one thread per 16-byte load (32 weights of one group: a group of a multiple of 32,
 * aligned words) and four 16-byte stores, the pairs of i4_pair put back in column order. */
template <int SDT>
__global__ void k_dequant_i4_vec(iris_tensor_i4 w, int64_t r0, int64_t nr, bf16 *dst) {
    const int64_t units = w.cols / 32, total = nr * units, ng = w.cols / w.group;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = r0 + i / units, c = (i % units) * 32, gi = c / w.group;
        const uint4 q = __ldg((const uint4 *)(w.q + r * (w.cols / 8) + c / 8));
        const uint32_t s = i4_scale_op<SDT>(i4_scale_raw<SDT>(w.scale, r * ng + gi));
        const uint32_t zw = w.zero ? __ldg(w.zero + (r >> 3) * ng + gi) : 0x88888888u;
        const uint32_t nz = 0xc300c300u | ((zw >> (4 * (r & 7))) & 15u) * 0x10001u;
        const uint32_t q4[4] = {q.x, q.y, q.z, q.w};
        uint4 *d = (uint4 *)(dst + (r - r0) * w.cols + c);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t P[4];
#pragma unroll
            for (int e = 0; e < 4; e++) P[e] = i4_pair<SDT>((q4[k] >> (4 * e)) & 0x000f000fu, nz, s);
            /* P[e] = (column e, column e + 4) → (0,1), (2,3), (4,5), (6,7) */
            d[k] = make_uint4(__byte_perm(P[0], P[1], 0x5410), __byte_perm(P[2], P[3], 0x5410),
                              __byte_perm(P[0], P[1], 0x7632), __byte_perm(P[2], P[3], 0x7632));
        }
    }
}

void iris_cuda_dequant_i4(const cuda_ctx *cx, const iris_tensor *w, int64_t r0, int64_t nr, bf16 *dst) {
    const iris_tensor_i4 q = i4_of(w);
    const int sdt = (int)w->qscale_dtype;
    const int vec = w->group % 32 == 0 && is_aligned16(w->data) && is_aligned16(dst) &&
                    (sdt == IRIS_DT_BF16 || sdt == IRIS_DT_F16 || sdt == IRIS_DT_F32);
    const int64_t total = vec ? nr * (w->cols / 32) : nr * (w->cols / 8), blocks = (total + 255) / 256;
    const unsigned grid = (unsigned)(blocks > 65536 ? 65536 : blocks);
    if (!vec) k_dequant_i4<<<grid, 256, 0, cx->stream>>>(q, r0, nr, dst);
    else if (sdt == IRIS_DT_BF16) k_dequant_i4_vec<0><<<grid, 256, 0, cx->stream>>>(q, r0, nr, dst);
    else if (sdt == IRIS_DT_F16) k_dequant_i4_vec<1><<<grid, 256, 0, cx->stream>>>(q, r0, nr, dst);
    else k_dequant_i4_vec<2><<<grid, 256, 0, cx->stream>>>(q, r0, nr, dst);
}

extern "C" void iris_cuda_set_i4_ref(iris_backend *b, int on) { cuda_of(b)->i4_ref = on; }
extern "C" int iris_cuda_i4_gemv_runs(iris_backend *b) { return cuda_of(b)->i4_runs; }
extern "C" void iris_cuda_set_i4_warps(iris_backend *b, int kw) { cuda_of(b)->i4_kw = kw; }
extern "C" void iris_cuda_set_i4_rows(iris_backend *b, int rows) { cuda_of(b)->i4_rows = rows; }
