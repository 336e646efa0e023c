/* cpu_sample.c: the CPU backend's get_topk (backend.h), the reference of cuda_sample.cu: the k
 * largest values of each fp32 row with their columns, value-descending, the lowest column first
 * among equal values, NaN counted as -inf, a masked row's disallowed columns never returned and
 * its list padded with id -1, value -inf when it allows fewer than k columns.
 *
 * Order: one 64-bit key a column, as the CUDA kernel builds it (the value's bits made
 * order-preserving above the complement of the column), so both select by the same total order
 * and return the same ids and values for the same (bf16-valued) rows.  A row is one pass with a
 * size-k min-heap of keys (k <= 64), then the heap sorted; rows run on the thread pool.
 * Exact: a selection, no arithmetic on the values. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_internal.h"
#include "pool.h"

#define TOPK_MAX 64

typedef struct topk_job {
    const float *x;
    int64_t ld, cols;
    int k;
    const iris_topk_mask *mask;
    int32_t *ids;
    float *vals;
} topk_job;

static uint64_t key_of(float v, int64_t col) {
    if (isnan(v)) v = -INFINITY;
    uint32_t u;
    memcpy(&u, &v, 4);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((uint64_t)u << 32) | (uint32_t)~(uint32_t)col;
}

static float value_of(uint64_t key) {
    uint32_t u = (uint32_t)(key >> 32);
    u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* Sift key into the min-heap h[0..k) in place of its root. */
static void heap_replace(uint64_t *h, int k, uint64_t key) {
    int c = 0;
    for (;;) {
        int l = 2 * c + 1, r = l + 1, m = c;
        uint64_t mv = key;
        if (l < k && h[l] < mv) m = l, mv = h[l];
        if (r < k && h[r] < mv) m = r;
        if (m == c) break;
        h[c] = h[m];
        c = m;
    }
    h[c] = key;
}

static void topk_rows(void *ctx, int64_t r0, int64_t r1) {
    const topk_job *j = ctx;
    const int k = j->k;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * j->ld;
        const uint32_t *m = NULL;
        if (j->mask && j->mask->slot[r] >= 0) m = j->mask->bits + (int64_t)j->mask->slot[r] * j->mask->words;
        uint64_t h[TOPK_MAX];
        for (int i = 0; i < k; i++) h[i] = 0;   /* key 0: an empty slot, below every column's key */
        for (int64_t c = 0; c < j->cols; c++) {
            if (m && !((m[c >> 5] >> (c & 31)) & 1u)) continue;
            uint64_t key = key_of(x[c], c);
            if (key > h[0]) heap_replace(h, k, key);
        }
        /* the heap, largest first: k pops of the root */
        for (int n = k; n > 0; n--) {
            uint64_t top = h[0];
            int32_t id = top ? (int32_t)~(uint32_t)top : -1;
            float v = top ? value_of(top) : -INFINITY;
            h[0] = h[n - 1];
            /* sift the moved last element down within the first n - 1 */
            int c = 0;
            for (;;) {
                int l = 2 * c + 1, rr = l + 1, mn = c;
                if (l < n - 1 && h[l] < h[mn]) mn = l;
                if (rr < n - 1 && h[rr] < h[mn]) mn = rr;
                if (mn == c) break;
                uint64_t t = h[c];
                h[c] = h[mn], h[mn] = t;
                c = mn;
            }
            /* the min-heap pops smallest first: fill from the end */
            j->ids[r * k + n - 1] = id;
            j->vals[r * k + n - 1] = v;
        }
    }
}

int iris_cpu_get_topk(iris_backend *b, const iris_tensor *x, int k, const iris_topk_mask *mask, int32_t *ids,
                      float *vals) {
    if (x->dtype != IRIS_DT_F32)
        return iris_cpu_fail(b, IRIS_EUNSUPPORTED, "cpu get_topk: %s rows (F32 activations only)",
                             iris_dtype_name(x->dtype));
    if (k < 1 || k > TOPK_MAX || k > x->cols || x->cols > 0x7fffffff)
        return iris_cpu_fail(b, IRIS_EINVAL, "cpu get_topk: k %d of rows of %lld (1 <= k <= %d and <= the columns)", k,
                             (long long)x->cols, TOPK_MAX);
    if (mask && (!mask->slot || !mask->bits || mask->words < (x->cols + 31) / 32))
        return iris_cpu_fail(b, IRIS_EINVAL, "cpu get_topk: a mask of %lld words for rows of %lld columns",
                             (long long)mask->words, (long long)x->cols);
    topk_job j = {.x = x->data, .ld = iris_tensor_ld(x), .cols = x->cols, .k = k, .mask = mask, .ids = ids,
                  .vals = vals};
    if (x->rows > 1) iris_pool_for(x->rows, topk_rows, &j);
    else topk_rows(&j, 0, x->rows);
    return 0;
}
