/* cuda_rows.cu: row gathers and scatters — token embedding, set/add/get rows
 * (image-embedding injection, DeepStack additions, merge shuffles) and the
 * 4-tap position-embedding interpolation of the vision encoder.
 *
 * Thread mapping: a grid-stride loop over (row, column) of the output, one
 * thread per element; consecutive threads walk a row, so loads and stores
 * coalesce.  Memory-bound.  Indices live in device memory; an index outside
 * its table gives a zero row (embed, get_rows, interp4) or is skipped
 * (set/add_rows): the host validates token ids and indices before the upload,
 * since a device-side error could not be reported without a sync.
 * Numerics: interp4 sums the 4 weighted taps in fp32 and rounds once
 * (QWEN3VL.md §5.2). */
#include "cuda_internal.cuh"

static unsigned grid_for(int64_t total) {
    int64_t blocks = (total + 255) / 256;
    return (unsigned)(blocks > 65536 ? 65536 : blocks < 1 ? 1 : blocks);
}

#define GRID_LOOP(i, total) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (total); i += (int64_t)gridDim.x * blockDim.x)

__global__ void k_gather(const void *x, int xdt, int64_t xrows, int64_t ldx, const int32_t *idx, int64_t n, int64_t cols,
                         bf16 *y, int64_t ldy) {
    GRID_LOOP(i, n * cols) {
        int64_t r = i / cols, c = i % cols;
        int64_t s = idx[r];
        y[r * ldy + c] = f2bf(s >= 0 && s < xrows ? load_vec(x, xdt, s * ldx + c) : 0.0f);
    }
}

template <int ADD>
__global__ void k_scatter(bf16 *y, int64_t yrows, int64_t ldy, const int32_t *idx, const bf16 *x, int64_t ldx,
                          int64_t n, int64_t cols) {
    GRID_LOOP(i, n * cols) {
        int64_t r = i / cols, c = i % cols;
        int64_t d = idx[r];
        if (d < 0 || d >= yrows) continue;
        float v = bf2f(x[r * ldx + c]);
        if (ADD) v += bf2f(y[d * ldy + c]);
        y[d * ldy + c] = f2bf(v);
    }
}

__global__ void k_interp4(const void *t, int tdt, int64_t trows, int64_t ldt, const int32_t *idx, const float *w, int64_t n,
                          int64_t cols, bf16 *y, int64_t ldy) {
    GRID_LOOP(i, n * cols) {
        int64_t r = i / cols, c = i % cols;
        float s = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int64_t row = idx[r * 4 + k];
            if (row >= 0 && row < trows) s += load_vec(t, tdt, row * ldt + c) * w[r * 4 + k];
        }
        y[r * ldy + c] = f2bf(s);
    }
}

static int float_dtype(int dt) { return dt == IRIS_DT_BF16 || dt == IRIS_DT_F16 || dt == IRIS_DT_F32; }

int iris_cuda_embed(iris_backend *b, const iris_tensor *table, const int32_t *ids, int n, iris_tensor *y) {
    return iris_cuda_get_rows(b, table, ids, n, y);
}

int iris_cuda_get_rows(iris_backend *b, const iris_tensor *x, const int32_t *idx, int n, iris_tensor *y) {
    if (!float_dtype(x->dtype) || y->dtype != IRIS_DT_BF16)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda get_rows: table %s into %s (BF16/F16/F32 into BF16)",
                              iris_dtype_name(x->dtype), iris_dtype_name(y->dtype));
    if (y->cols != x->cols || y->rows < n)
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda get_rows: %d rows of %lld into [%lld,%lld]", n, (long long)x->cols,
                              (long long)y->rows, (long long)y->cols);
    if (n <= 0) return 0;
    k_gather<<<grid_for((int64_t)n * x->cols), 256, 0, cuda_of(b)->stream>>>(x->data, x->dtype, x->rows, tld(x), idx, n,
                                                                               x->cols, (bf16 *)y->data, tld(y));
    return iris_cuda_check(b, "get_rows");
}

static int scatter(iris_backend *b, iris_tensor *y, const int32_t *idx, const iris_tensor *x, int add) {
    const char *what = add ? "add_rows" : "set_rows";
    if (x->dtype != IRIS_DT_BF16 || y->dtype != IRIS_DT_BF16)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda %s: activations must be BF16", what);
    if (y->cols != x->cols)
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda %s: rows of %lld into rows of %lld", what, (long long)x->cols,
                              (long long)y->cols);
    if (x->rows <= 0) return 0;
    unsigned g = grid_for(x->rows * x->cols);
    cudaStream_t s = cuda_of(b)->stream;
    if (add)
        k_scatter<1><<<g, 256, 0, s>>>((bf16 *)y->data, y->rows, tld(y), idx, (const bf16 *)x->data, tld(x), x->rows,
                                        x->cols);
    else
        k_scatter<0><<<g, 256, 0, s>>>((bf16 *)y->data, y->rows, tld(y), idx, (const bf16 *)x->data, tld(x), x->rows,
                                        x->cols);
    return iris_cuda_check(b, what);
}

int iris_cuda_set_rows(iris_backend *b, iris_tensor *y, const int32_t *idx, const iris_tensor *x) {
    return scatter(b, y, idx, x, 0);
}
int iris_cuda_add_rows(iris_backend *b, iris_tensor *y, const int32_t *idx, const iris_tensor *x) {
    return scatter(b, y, idx, x, 1);
}

int iris_cuda_interp4(iris_backend *b, const iris_tensor *table, const int32_t *idx, const float *w, int n,
                      iris_tensor *y) {
    if (!float_dtype(table->dtype) || y->dtype != IRIS_DT_BF16)
        return iris_cuda_fail(b, IRIS_EUNSUPPORTED, "cuda interp4: table %s into %s", iris_dtype_name(table->dtype),
                              iris_dtype_name(y->dtype));
    if (y->cols != table->cols || y->rows < n)
        return iris_cuda_fail(b, IRIS_EINVAL, "cuda interp4: %d rows of %lld into [%lld,%lld]", n,
                              (long long)table->cols, (long long)y->rows, (long long)y->cols);
    if (n <= 0) return 0;
    k_interp4<<<grid_for((int64_t)n * table->cols), 256, 0, cuda_of(b)->stream>>>(
        table->data, table->dtype, table->rows, tld(table), idx, w, n, table->cols, (bf16 *)y->data, tld(y));
    return iris_cuda_check(b, "interp4");
}
