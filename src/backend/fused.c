/* fused.c: the optional fused ops of backend.h, called through one helper
 * each: the backend's fused kernel when it has one (CUDA), else the plain
 * sequence of ops it stands for (the CPU backend, which is the reference the
 * fused kernels are tested against in tests/test_ops_attn.c). */
#include <stdio.h>

#include "backend/backend.h"

int iris_backend_add_rms_norm(iris_backend *b, iris_tensor *x, const iris_tensor *d, const iris_tensor *w, float eps,
                              iris_tensor *y) {
    if (b->add_rms_norm) return b->add_rms_norm(b, x, d, w, eps, y);
    int rc = d ? b->add(b, x, d) : 0;
    return rc ? rc : b->rms_norm(b, x, w, eps, y);
}

int iris_backend_qk_norm_rope_kv(iris_backend *b, iris_tensor *q, iris_tensor *k, const iris_tensor *v,
                                 const iris_tensor *qw, const iris_tensor *kw, float eps, int n_q_heads,
                                 const int32_t *pos, int pos_stride, const int *dim_of, const float *inv_freq,
                                 iris_kv_layer *kv, const iris_attn_meta *meta) {
    if (b->qk_norm_rope_kv)
        return b->qk_norm_rope_kv(b, q, k, v, qw, kw, eps, n_q_heads, pos, pos_stride, dim_of, inv_freq, kv, meta);
    int hd = kv->head_dim, nkv = kv->n_kv_heads;
    /* per-head views: one row per (token, head) */
    iris_tensor qh = {.data = q->data, .dtype = q->dtype, .rows = q->rows * n_q_heads, .cols = hd};
    iris_tensor kh = {.data = k->data, .dtype = k->dtype, .rows = k->rows * nkv, .cols = hd};
    if (iris_tensor_ld(q) != (int64_t)n_q_heads * hd || iris_tensor_ld(k) != (int64_t)nkv * hd) {
        b->err.code = IRIS_EINVAL;
        snprintf(b->err.msg, sizeof b->err.msg, "qk_norm_rope_kv: q and k must be contiguous rows of heads");
        return IRIS_EINVAL;
    }
    int rc = b->rms_norm(b, &qh, qw, eps, &qh);
    if (!rc) rc = b->rms_norm(b, &kh, kw, eps, &kh);
    if (!rc) rc = b->rope(b, q, n_q_heads, hd, pos, pos_stride, dim_of, inv_freq);
    if (!rc) rc = b->rope(b, k, nkv, hd, pos, pos_stride, dim_of, inv_freq);
    if (!rc) rc = b->kv_write(b, kv, k, v, meta);
    return rc;
}

int iris_backend_qk_norm_rope_attn(iris_backend *b, iris_tensor *q, iris_tensor *k, const iris_tensor *v,
                                   const iris_tensor *qw, const iris_tensor *kw, float eps, int n_q_heads,
                                   const int32_t *pos, int pos_stride, const int *dim_of, const float *inv_freq,
                                   iris_kv_layer *kv, const iris_attn_meta *meta, iris_tensor *o) {
    if (b->qk_norm_rope_attn)
        return b->qk_norm_rope_attn(b, q, k, v, qw, kw, eps, n_q_heads, pos, pos_stride, dim_of, inv_freq, kv, meta, o);
    int rc = iris_backend_qk_norm_rope_kv(b, q, k, v, qw, kw, eps, n_q_heads, pos, pos_stride, dim_of, inv_freq, kv, meta);
    return rc ? rc : b->attn_paged(b, q, kv, meta, n_q_heads, o);
}

int iris_backend_linear_n(iris_backend *b, const iris_tensor *x, int m, const iris_tensor *const *ws,
                          iris_tensor *const *ys, const iris_tensor *joint) {
    if (b->linear_n) return b->linear_n(b, x, m, ws, ys, joint);
    int rc = 0;
    for (int i = 0; i < m && !rc; i++) rc = b->linear(b, x, ws[i], NULL, ys[i]);
    return rc;
}

int iris_backend_linear_swiglu(iris_backend *b, const iris_tensor *x, const iris_tensor *wg, const iris_tensor *wu,
                               iris_tensor *g, iris_tensor *u, const iris_tensor *joint) {
    if (b->linear_swiglu) return b->linear_swiglu(b, x, wg, wu, g, u, joint);
    int rc = b->linear(b, x, wg, NULL, g);
    if (!rc) rc = b->linear(b, x, wu, NULL, u);
    return rc ? rc : b->silu_mul(b, g, u);
}

int iris_backend_linear_epi(iris_backend *b, const iris_tensor *x, const iris_tensor *w, const iris_tensor *bias,
                            int epi, iris_tensor *y, iris_tensor *tmp) {
    if (b->linear_epi) {
        int rc = b->linear_epi(b, x, w, bias, epi, y);
        if (rc != IRIS_EUNSUPPORTED) return rc;
    }
    if (epi == IRIS_EPI_GELU_TANH) {
        int rc = b->linear(b, x, w, bias, y);
        return rc ? rc : b->gelu_tanh(b, y);
    }
    int rc = b->linear(b, x, w, bias, tmp);
    return rc ? rc : b->add(b, y, tmp);
}
