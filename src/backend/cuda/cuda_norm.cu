/* cuda_norm.cu: RMSNorm and LayerNorm over the rows of BF16 views.
 *
 * Thread mapping: one warp per row, 8 warps a block (or, for a few long rows
 * as in decode, a block of 256 threads per row); lanes stride over the
 * row (8 elements a lane per step, 16-byte loads, when the row allows it).
 * Memory-bound: the row is read twice (RMS) or three times (LayerNorm: mean,
 * then the centred variance, then the output), the later passes from L1/L2;
 * a LayerNorm of 1,024 or 2,048 columns with BF16 weights (the vision
 * encoder's) keeps the row in registers and reads it once.
 * Numerics: statistics in fp32 (two-pass variance); RMSNorm rounds like
 * Qwen3VLTextRMSNorm, w · bf16(x · rsqrt(mean(x²) + eps)) then bf16
 * (QWEN3VL.md §6.2); LayerNorm rounds once, as F.layer_norm in bf16 (§5). */
#include "cuda_internal.cuh"

#define NORM_WARPS 8

/* Sum over the row of g(x[i]) for one warp. */
template <int VEC, typename G>
static __device__ float row_sum(const bf16 *x, int64_t d, G g) {
    int lane = threadIdx.x & 31;
    float s = 0;
    if (VEC) {
        for (int64_t i = (int64_t)lane * 8; i < d; i += 256) {
            uint4 v = *(const uint4 *)(x + i);
            const bf16 *e = (const bf16 *)&v;
#pragma unroll
            for (int k = 0; k < 8; k++) s += g(bf2f(e[k]));
        }
    } else {
        for (int64_t i = lane; i < d; i += 32) s += g(bf2f(x[i]));
    }
    return warp_sum(s);
}

struct id_f {
    __device__ float operator()(float v) const { return v; }
};
struct sq_f {
    __device__ float operator()(float v) const { return v * v; }
};
struct csq_f {
    float m;
    __device__ float operator()(float v) const { return (v - m) * (v - m); }
};

template <int VEC, int LAYER>
__global__ void k_norm(const bf16 *x, int64_t ldx, bf16 *y, int64_t ldy, int64_t rows, int64_t d, const void *w, int wdt,
                       const void *bias, int bdt, float eps) {
    int64_t r = (int64_t)blockIdx.x * NORM_WARPS + threadIdx.x / 32;
    if (r >= rows) return;
    int lane = threadIdx.x & 31;
    const bf16 *xr = x + r * ldx;
    bf16 *yr = y + r * ldy;
    float mean = 0, inv;
    if (LAYER) {
        mean = row_sum<VEC>(xr, d, id_f()) / (float)d;
        csq_f g = {mean};
        inv = rsqrtf(row_sum<VEC>(xr, d, g) / (float)d + eps);
    } else {
        inv = rsqrtf(row_sum<VEC>(xr, d, sq_f()) / (float)d + eps);
    }
    int64_t step = VEC ? 256 : 32;
    for (int64_t i = (int64_t)lane * (VEC ? 8 : 1); i < d; i += step) {
        float v[8];
        if (VEC) {
            uint4 u = *(const uint4 *)(xr + i);
            const bf16 *e = (const bf16 *)&u;
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = bf2f(e[k]);
        } else {
            v[0] = bf2f(xr[i]);
        }
        bf16 o[8];
#pragma unroll
        for (int k = 0; k < (VEC ? 8 : 1); k++) {
            float wk = load_vec(w, wdt, i + k);
            if (LAYER) o[k] = f2bf((v[k] - mean) * inv * wk + (bias ? load_vec(bias, bdt, i + k) : 0.0f));
            else o[k] = f2bf(wk * round_bf16(v[k] * inv));
        }
        if (VEC) *(uint4 *)(yr + i) = *(const uint4 *)o;
        else yr[i] = o[0];
    }
}

/* Few rows (decode): one block of 256 threads per row, so a row is not one warp's serial walk. */
#define NB 256
template <int VEC, int LAYER>
__global__ void __launch_bounds__(NB) k_norm_block(const bf16 *x, int64_t ldx, bf16 *y, int64_t ldy, int64_t d,
                                                   const void *w, int wdt, const void *bias, int bdt, float eps) {
    __shared__ float red[NB / 32];
    int64_t r = blockIdx.x;
    const bf16 *xr = x + r * ldx;
    bf16 *yr = y + r * ldy;
    int64_t step = VEC ? NB * 8 : NB, i0 = (int64_t)threadIdx.x * (VEC ? 8 : 1);
    float s = 0;
    for (int64_t i = i0; i < d; i += step) {
        if (VEC) {
            uint4 u = *(const uint4 *)(xr + i);
            const bf16 *e = (const bf16 *)&u;
#pragma unroll
            for (int k = 0; k < 8; k++) s += LAYER ? bf2f(e[k]) : bf2f(e[k]) * bf2f(e[k]);
        } else {
            float v = bf2f(xr[i]);
            s += LAYER ? v : v * v;
        }
    }
    float mean = 0, inv;
    if (LAYER) {
        mean = block_sum(s, red, NB / 32) / (float)d;
        float c = 0;
        for (int64_t i = i0; i < d; i += step)
            for (int k = 0; k < (VEC ? 8 : 1); k++) {
                float v = bf2f(xr[i + k]) - mean;
                c += v * v;
            }
        inv = rsqrtf(block_sum(c, red, NB / 32) / (float)d + eps);
    } else {
        inv = rsqrtf(block_sum(s, red, NB / 32) / (float)d + eps);
    }
    for (int64_t i = i0; i < d; i += step) {
        bf16 o[8];
#pragma unroll
        for (int k = 0; k < (VEC ? 8 : 1); k++) {
            float v = bf2f(xr[i + k]), wk = load_vec(w, wdt, i + k);
            if (LAYER) o[k] = f2bf((v - mean) * inv * wk + (bias ? load_vec(bias, bdt, i + k) : 0.0f));
            else o[k] = f2bf(wk * round_bf16(v * inv));
        }
        if (VEC) *(uint4 *)(yr + i) = *(const uint4 *)o;
        else yr[i] = o[0];
    }
}

/* LayerNorm of rows of NV · 256 elements with BF16 weight and bias (the vision encoder's): the
 * row stays in the lane's registers (one read), the weights come in 16-byte loads; the sums in
 * k_norm<1, 1>'s order. */
template <int NV>
__global__ void k_layer_norm_reg(const bf16 *x, int64_t ldx, bf16 *y, int64_t ldy, int64_t rows, const bf16 *w,
                                 const bf16 *bias, float eps) {
    int64_t r = (int64_t)blockIdx.x * NORM_WARPS + threadIdx.x / 32;
    if (r >= rows) return;
    const int lane = threadIdx.x & 31, d = NV * 256;
    const bf16 *xr = x + r * ldx;
    bf16 *yr = y + r * ldy;
    uint4 u[NV];
    float s = 0;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        u[j] = *(const uint4 *)(xr + lane * 8 + j * 256);
        const bf16 *e = (const bf16 *)&u[j];
#pragma unroll
        for (int k = 0; k < 8; k++) s += bf2f(e[k]);
    }
    const float mean = warp_sum(s) / (float)d;
    float c = 0;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const bf16 *e = (const bf16 *)&u[j];
#pragma unroll
        for (int k = 0; k < 8; k++) c += (bf2f(e[k]) - mean) * (bf2f(e[k]) - mean);
    }
    const float inv = rsqrtf(warp_sum(c) / (float)d + eps);
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const int i = lane * 8 + j * 256;
        uint4 wv = *(const uint4 *)(w + i), bv = *(const uint4 *)(bias + i);
        const bf16 *e = (const bf16 *)&u[j], *we = (const bf16 *)&wv, *be = (const bf16 *)&bv;
        bf16 o[8];
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] = f2bf((bf2f(e[k]) - mean) * inv * bf2f(we[k]) + bf2f(be[k]));
        *(uint4 *)(yr + i) = *(const uint4 *)o;
    }
}

static int norm(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias, float eps,
                iris_tensor *y, int layer) {
    const char *what = layer ? "layer_norm" : "rms_norm";
    if (x->dtype != IRIS_DT_BF16 || y->dtype != IRIS_DT_BF16)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda %s: activations must be BF16", what);
    if (y->rows != x->rows || y->cols != x->cols || w->rows * w->cols != x->cols)
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda %s: x [%lld,%lld], weight of %lld, y [%lld,%lld] do not match", what,
                              (long long)x->rows, (long long)x->cols, (long long)(w->rows * w->cols), (long long)y->rows,
                              (long long)y->cols);
    if (x->rows <= 0) return 0;
    int64_t ldx = tld(x), ldy = tld(y);
    int vec = x->cols % 8 == 0 && ldx % 8 == 0 && ldy % 8 == 0 && is_aligned16(x->data) && is_aligned16(y->data);
    unsigned blocks = (unsigned)((x->rows + NORM_WARPS - 1) / NORM_WARPS);
    cudaStream_t s = cuda_of(b)->stream;
    const void *bp = bias ? bias->data : NULL;
    int bdt = bias ? bias->dtype : IRIS_DT_F32;
#define NORM_LAUNCH(V, L)                                                                                              \
    k_norm<V, L><<<blocks, NORM_WARPS * 32, 0, s>>>((const bf16 *)x->data, ldx, (bf16 *)y->data, ldy, x->rows, x->cols, \
                                                     w->data, w->dtype, bp, bdt, eps)
#define NORMB_LAUNCH(V, L)                                                                                             \
    k_norm_block<V, L><<<(unsigned)x->rows, NB, 0, s>>>((const bf16 *)x->data, ldx, (bf16 *)y->data, ldy, x->cols, w->data, \
                                                        w->dtype, bp, bdt, eps)
    int reg = layer && vec && bias && w->dtype == IRIS_DT_BF16 && bias->dtype == IRIS_DT_BF16 && is_aligned16(w->data) &&
              is_aligned16(bias->data) && (x->cols == 1024 || x->cols == 2048) && x->rows > 128;
    if (reg) {
        if (x->cols == 1024)
            k_layer_norm_reg<4><<<blocks, NORM_WARPS * 32, 0, s>>>((const bf16 *)x->data, ldx, (bf16 *)y->data, ldy,
                                                                   x->rows, (const bf16 *)w->data, (const bf16 *)bp, eps);
        else
            k_layer_norm_reg<8><<<blocks, NORM_WARPS * 32, 0, s>>>((const bf16 *)x->data, ldx, (bf16 *)y->data, ldy,
                                                                   x->rows, (const bf16 *)w->data, (const bf16 *)bp, eps);
    } else if (x->rows <= 128 && x->cols >= 1024) {
        if (layer) {
            if (vec) NORMB_LAUNCH(1, 1);
            else NORMB_LAUNCH(0, 1);
        } else {
            if (vec) NORMB_LAUNCH(1, 0);
            else NORMB_LAUNCH(0, 0);
        }
    } else if (layer) {
        if (vec) NORM_LAUNCH(1, 1);
        else NORM_LAUNCH(0, 1);
    } else {
        if (vec) NORM_LAUNCH(1, 0);
        else NORM_LAUNCH(0, 0);
    }
#undef NORM_LAUNCH
#undef NORMB_LAUNCH
    return iris_cuda_check(b, what);
}

int iris_cuda_rms_norm(iris_backend *b, const iris_tensor *x, const iris_tensor *w, float eps, iris_tensor *y) {
    return norm(b, x, w, NULL, eps, y, 0);
}

int iris_cuda_layer_norm(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias,
                         float eps, iris_tensor *y) {
    return norm(b, x, w, bias, eps, y, 1);
}
