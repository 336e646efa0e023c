/* cuda_elementwise.cu: y += x, g = silu(g)·u, tanh- and erf-GELU on BF16
 * views.
 *
 * Thread mapping: one thread per 8 consecutive elements of a row (16-byte
 * loads and stores) when the rows allow it (cols and ld multiples of 8,
 * 16-byte aligned data), else one thread per element; a grid-stride loop
 * covers [rows, cols].  Memory-bound: each element is read and written once.
 * Numerics: fp32 inside, one bf16 rounding per PyTorch op that HF runs
 * (silu·mul rounds silu(g) first, as eager PyTorch does, QWEN3VL.md §6.2). */
#include "cuda_internal.cuh"

struct op_add {
    __device__ float operator()(float y, float x) const { return y + x; }
};
struct op_silu_mul {
    __device__ float operator()(float g, float u) const { return round_bf16(g / (1.0f + expf(-g))) * u; }
};
struct op_gelu_tanh {
    __device__ float operator()(float x, float) const {
        const float k = 0.7978845608028654f; /* sqrt(2/pi) */
        return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
    }
};
struct op_gelu_erf {
    __device__ float operator()(float x, float) const { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
};

/* y[r][c] = f(y[r][c], x[r][c]) (x may be NULL for unary ops). */
template <typename F, int VEC>
__global__ void k_binary(bf16 *y, int64_t ldy, const bf16 *x, int64_t ldx, int64_t rows, int64_t units, F f) {
    int64_t total = rows * units;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / units, c = (i % units) * VEC;
        bf16 *yp = y + r * ldy + c;
        if (VEC == 8) {
            uint4 yv = *(const uint4 *)yp, xv = make_uint4(0, 0, 0, 0);
            if (x) xv = *(const uint4 *)(x + r * ldx + c);
            bf16 *ye = (bf16 *)&yv;
            const bf16 *xe = (const bf16 *)&xv;
#pragma unroll
            for (int k = 0; k < 8; k++) ye[k] = f2bf(f(bf2f(ye[k]), x ? bf2f(xe[k]) : 0.0f));
            *(uint4 *)yp = yv;
        } else {
            *yp = f2bf(f(bf2f(*yp), x ? bf2f(x[r * ldx + c]) : 0.0f));
        }
    }
}

template <typename F>
static int run_binary(iris_backend *b, iris_tensor *y, const iris_tensor *x, F f, const char *what) {
    if (y->dtype != IRIS_DT_BF16 || (x && x->dtype != IRIS_DT_BF16))
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda %s: activations must be BF16", what);
    if (x && (x->rows != y->rows || x->cols != y->cols))
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda %s: shapes [%lld,%lld] and [%lld,%lld] differ", what,
                              (long long)y->rows, (long long)y->cols, (long long)x->rows, (long long)x->cols);
    if (y->rows <= 0 || y->cols <= 0) return 0;
    cuda_ctx *c = cuda_of(b);
    int64_t ldy = tld(y), ldx = x ? tld(x) : 0;
    int vec = y->cols % 8 == 0 && ldy % 8 == 0 && is_aligned16(y->data) &&
              (!x || (ldx % 8 == 0 && is_aligned16(x->data)));
    int64_t units = vec ? y->cols / 8 : y->cols, total = y->rows * units;
    int threads = 256;
    int64_t blocks = (total + threads - 1) / threads;
    if (blocks > 65536) blocks = 65536;
    const bf16 *xp = x ? (const bf16 *)x->data : NULL;
    if (vec)
        k_binary<F, 8><<<(int)blocks, threads, 0, c->stream>>>((bf16 *)y->data, ldy, xp, ldx, y->rows, units, f);
    else
        k_binary<F, 1><<<(int)blocks, threads, 0, c->stream>>>((bf16 *)y->data, ldy, xp, ldx, y->rows, units, f);
    return iris_cuda_check(b, what);
}

int iris_cuda_add(iris_backend *b, iris_tensor *y, const iris_tensor *x) { return run_binary(b, y, x, op_add(), "add"); }
int iris_cuda_silu_mul(iris_backend *b, iris_tensor *g, const iris_tensor *u) {
    return run_binary(b, g, u, op_silu_mul(), "silu_mul");
}
int iris_cuda_gelu_tanh(iris_backend *b, iris_tensor *x) { return run_binary(b, x, NULL, op_gelu_tanh(), "gelu_tanh"); }
int iris_cuda_gelu_erf(iris_backend *b, iris_tensor *x) { return run_binary(b, x, NULL, op_gelu_erf(), "gelu_erf"); }
