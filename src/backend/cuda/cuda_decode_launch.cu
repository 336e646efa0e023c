/* cuda_decode_launch.cu: the host side of the persistent decode kernel (cuda_decode.cu).
 * iris_cuda_decode_layers checks a decode step's shapes and weights, decides whether the kernel
 * takes it, lays out its shared memory, picks the stream-K phases and the attention's context
 * splits, fills ds_args (~11 KB, a static: one engine thread owns the backend) and launches one
 * grid of one CTA an SM for all the layers.  It owns no device memory: the grid barrier's counter,
 * the stream-K and q/k/v words (c->ds_part) and the attention's partials and counters are carved
 * at open (cuda_mem.cu); the counter is zeroed before each launch, the words by their readers.
 * What it declines (returns 1; model/text.c then runs the ops): BF16 or F16 weights, non-BF16 norm
 * weights, an E4M3 KV cache, head_dim other than 128, GQA groups over 4, hidden sizes over 4,096,
 * more than 4 rows, shapes not in whole 16-row tiles or 128-column chunks, cards before sm_90,
 * and by default (c->decode_stack -1) the steps where it measured slower than the ops.
 * Shared memory: ds_head (mbarriers, the step's metadata, the attention's and epilogues' scratch),
 * x (the step's rows of the widest GEMV input), then as many weight slots as fit, up to DS_MAX_RING.
 * A measuring aid: with c->ds_trace (IRIS_CUDA_DS_TRACE=FILE) every CTA's globaltimer stamps at the
 * phase ends of every layer go to FILE after an uncaptured step, for bench/ds_trace.py. */
#include <stdio.h>

#include "cuda_decode.cuh"

static int fp8_ok(const iris_tensor *w, int64_t rows, int64_t cols) {
    return w && w->dtype == IRIS_DT_F8_E4M3 && w->rows == rows && w->cols == cols && tld(w) == cols && w->scale &&
           w->block[0] == 128 && w->block[1] == 128 && is_aligned16(w->data) && is_aligned16(w->scale) && rows % 16 == 0;
}
static int act_ok(const iris_tensor *t, int64_t rows, int64_t cols) {
    return t && t->dtype == IRIS_DT_BF16 && t->rows == rows && t->cols == cols && tld(t) == cols && is_aligned16(t->data);
}
static int vec_ok(const iris_tensor *t, int64_t n, int dt) {
    return t && t->rows * t->cols == n && (int)t->dtype == dt &&
           (dt == IRIS_DT_BF16 || dt == IRIS_DT_F16 || dt == IRIS_DT_F32);
}

/* The chunk width for these shapes: 512 columns, or 256 / 128 where a matrix's width needs it; 0 if
 * none fits. */
static int ds_chunk_width(int64_t H, int64_t FF, int64_t qw) {
    int cw = 512;
    while (cw >= 128 && (H % cw || FF % cw || qw % cw)) cw /= 2;
    return cw >= 128 ? cw : 0;
}

/* The GEMV phases that go stream-K on `grid` CTAs, and their runs (chunks a CTA).  A phase may where
 * the CTA with the most chunks of whole tiles would have 15% more than an even share.  By default
 * (force < 0) only o_proj and down_proj, and only both together (4B on 132 SMs: o_proj 16 against
 * 10 chunks, down_proj 38 against 24; 2B none, every phase within 4%): the one mask with a kernel
 * instance of its own that measured faster; any other would take the generic instance, whose
 * loops alone cost 3-4%.  force >= 0: the phases of that mask that have enough chunks. */
static int ds_split_rule(int grid, int H, int FF, int nq, int nkv, int cw, int force, int run[4]) {
    int sk = 0;
    for (int ph = 0; ph < 4; ph++) {
        const int64_t tiles = ds_tiles(ph, H, FF, nq, nkv), nch = ds_k(ph, H, FF, nq) / cw;
        const int64_t whole = (tiles + grid - 1) / grid * nch, even = (tiles * nch + grid - 1) / grid;
        const int want = force >= 0 ? (force >> ph) & 1 : (ph & 1) && whole * 100 >= even * 115;
        run[ph] = want && tiles * nch >= 2 * grid && grid <= DS_MAX_GRID ? (int)even : 0;
        if (run[ph]) sk |= 1 << ph;
    }
    if (force < 0 && sk != DS_SK_OP) sk = 0, memset(run, 0, 4 * sizeof *run);
    return sk;
}

extern "C" int iris_cuda_decode_split_default(int sms, int H, int FF, int nq, int nkv) {
    const int cw = ds_chunk_width(H, FF, (int64_t)nq * DS_HD);
    int run[4];
    return cw && sms > 0 ? ds_split_rule(sms, H, FF, nq, nkv, cw, -1, run) : 0;
}
extern "C" int iris_cuda_set_decode_stack(iris_backend *b, int mode) {
    cuda_ctx *c = cuda_of(b);
    if (mode && !c->ds_compiled) return IRIS_EUNSUPPORTED;   /* compiled out of older PTX: it stays off */
    c->decode_stack = mode;
    return IRIS_OK;
}
extern "C" int iris_cuda_decode_stack_runs(iris_backend *b) { return cuda_of(b)->ds_runs; }
extern "C" void iris_cuda_set_decode_split(iris_backend *b, int mask) { cuda_of(b)->ds_split = mask < 0 ? -1 : mask & 15; }
extern "C" int iris_cuda_decode_split_last(iris_backend *b) { return cuda_of(b)->ds_split_last; }

int iris_cuda_decode_layers(iris_backend *b, const iris_decode_stack *d) {
    cuda_ctx *c = cuda_of(b);
    const iris_attn_meta *mt = d->meta;
    const int R = mt->n_rows, NL = d->n_layers;
    if (!c->decode_stack || c->prop.major < 9 || !c->ds_bar || mt->n_seqs != R || R < 1 || R > DS_MAX_ROWS || NL < 1 ||
        NL > DS_MAX_LAYERS)
        return 1;
    const int nq = d->n_q_heads, nkv = d->kv[0].n_kv_heads, hd = d->kv[0].head_dim;
    const int64_t H = d->h->cols, FF = d->g->cols;
    if (hd != DS_HD || nkv <= 0 || nq % nkv || nq / nkv > DS_GMAX || (int64_t)R * nkv > (int64_t)c->attn_count_n ||
        (int64_t)R * (nq + 2 * nkv) * hd * 8 > DS_QKV_BYTES)
        return 1;
    if (!act_ok(d->h, R, H) || !act_ok(d->q, R, (int64_t)nq * hd) || !act_ok(d->k, R, (int64_t)nkv * hd) ||
        !act_ok(d->v, R, (int64_t)nkv * hd) || !act_ok(d->o, R, (int64_t)nq * hd) || !act_ok(d->g, R, FF))
        return 1;
    const int cw = ds_chunk_width(H, FF, (int64_t)nq * hd);
    if (!cw || H > 2 * DS_WARPS * 256) return 1;
    /* By default (mode -1) only where it measured faster than the ops (H100, iris bench): while the
     * block tables' width (the context rounded up to 128 tokens) is within a limit that falls with
     * the rows, the attention's share growing with both.  Layers of 64 MiB or more (4B-FP8): 1-4
     * rows at any length; smaller (2B-FP8): 1 row at any length, 2 to 8,448 tokens, 3 to 3,200, 4 to
     * 2,176 (2B batch 2 at ~12,300 tokens: 799-804 tok/s op by op, 722-723 here). */
    const int64_t layer_bytes = ((int64_t)(nq + 2 * nkv) * hd + 3 * FF) * H + H * (int64_t)nq * hd;
    const int big = layer_bytes >= ((int64_t)64 << 20);
    const int64_t ctx_limit = big || R == 1 ? INT64_MAX : R == 2 ? 8448 : R == 3 ? 3200 : 2176;
    if (c->decode_stack < 0 && (int64_t)mt->max_blocks * IRIS_KV_BLOCK > ctx_limit) return 1;
    const int ln_dt = d->w[0][IRIS_DL_INPUT_NORM]->dtype, qk_dt = d->w[0][IRIS_DL_Q_NORM]->dtype;
    static ds_args a; /* ~11 KB of kernel parameters (one engine thread owns the backend) */
    memset(&a, 0, sizeof a);
    for (int il = 0; il < NL; il++) {
        const iris_tensor *const *w = d->w[il];
        const iris_kv_layer *kv = &d->kv[il];
        const int64_t shape[W_N][2] = {{(int64_t)nq * hd, H}, {(int64_t)nkv * hd, H}, {(int64_t)nkv * hd, H},
                                       {H, (int64_t)nq * hd}, {FF, H}, {FF, H}, {H, FF}};
        for (int i = 0; i < W_N; i++) {
            const iris_tensor *t = w[IRIS_DL_Q + i];
            if (!fp8_ok(t, shape[i][0], shape[i][1])) return 1;
            a.L[il].w[i] = (const uint8_t *)t->data;
            a.L[il].s[i] = t->scale;
        }
        if (ln_dt != IRIS_DT_BF16 || !is_aligned16(w[IRIS_DL_INPUT_NORM]->data) ||
            !is_aligned16(w[IRIS_DL_POST_NORM]->data) || !vec_ok(w[IRIS_DL_INPUT_NORM], H, ln_dt) ||
            !vec_ok(w[IRIS_DL_POST_NORM], H, ln_dt) ||
            !vec_ok(w[IRIS_DL_Q_NORM], hd, qk_dt) || !vec_ok(w[IRIS_DL_K_NORM], hd, qk_dt))
            return 1;
        if (kv->dtype != IRIS_DT_BF16 || kv->n_kv_heads != nkv || kv->head_dim != hd || !kv->k || !kv->v) return 1;
        a.L[il].ln1 = w[IRIS_DL_INPUT_NORM]->data, a.L[il].ln2 = w[IRIS_DL_POST_NORM]->data;
        a.L[il].qn = w[IRIS_DL_Q_NORM]->data, a.L[il].kn = w[IRIS_DL_K_NORM]->data;
        a.L[il].kc = (bf16 *)kv->k, a.L[il].vc = (bf16 *)kv->v;
    }
    /* shared memory: the head, x (the step's rows of the widest input), the ring of weight slots */
    const int64_t kmax = H > FF ? (H > (int64_t)nq * hd ? H : (int64_t)nq * hd) : (FF > (int64_t)nq * hd ? FF : (int64_t)nq * hd);
    const size_t x_off = (sizeof(ds_head) + 127) & ~(size_t)127, xld = (size_t)kmax + 8;
    const size_t ring_off = (x_off + (size_t)R * xld * 2 + 127) & ~(size_t)127;
    const size_t slot_bytes = 16 * (size_t)(cw + DS_PAD) + 16, smax = c->prop.sharedMemPerBlockOptin;
    if (ring_off + DS_MIN_RING * slot_bytes > smax) return 1;
    int ring = (int)((smax - ring_off) / slot_bytes);
    if (ring > DS_MAX_RING) ring = DS_MAX_RING;
    const size_t smem = ring_off + (size_t)ring * slot_bytes;
    const int grid = c->prop.multiProcessorCount; /* one CTA an SM: every CTA resident (the grid barriers) */
    int run[4] = {0, 0, 0, 0};
    const int sk = c->ds_part ? ds_split_rule(grid, (int)H, (int)FF, nq, nkv, cw, c->ds_split, run) : 0;
    /* the kernel built for these stream-K phases, or the one for any */
    const int ki = sk == 0 ? 0 : sk == DS_SK_OP ? 1 : 2;
    const ds_kernel_fn kern = iris_cuda_ds_kernel(sk);
    static size_t allowed[3];
    if (smem > allowed[ki]) {
        if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
            cudaGetLastError();
            return 1;
        }
        allowed[ki] = smem;
    }
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, DS_THREADS, smem) != cudaSuccess ||
        per_sm < 1) {
        cudaGetLastError();
        return 1;
    }
    int splits = grid / (R * nkv);
    splits = splits < 1 ? 1 : splits > DS_MAX_SPLITS ? DS_MAX_SPLITS : splits;
    while (splits > 1 && (size_t)R * nq * splits * (hd + 2) > c->attn_part_elems) splits--;
    if (splits > 1 && c->attn_count_n == 0) splits = 1;

    a.n_layers = NL, a.R = R, a.H = (int)H, a.FF = (int)FF, a.nq = nq, a.nkv = nkv, a.g = nq / nkv, a.cw = cw;
    a.ring = ring, a.splits = splits, a.max_blocks = mt->max_blocks, a.pos_stride = d->pos_stride, a.xld = (int)xld;
    a.ln_dt = ln_dt, a.qk_dt = qk_dt;
    for (int ph = 0; ph < 4; ph++) a.run[ph] = run[ph], a.tiles[ph] = ds_tiles(ph, (int)H, (int)FF, nq, nkv);
    a.gpart = (unsigned long long *)c->ds_part;
    a.qkvt = (unsigned long long *)((char *)c->ds_part + DS_SKPART_BYTES);
    a.x_off = (unsigned)x_off, a.ring_off = (unsigned)ring_off, a.slot_bytes = (unsigned)slot_bytes;
    a.eps = d->eps, a.scale = 1.0f / sqrtf((float)hd);
    a.h = (bf16 *)d->h->data;
    a.o = (bf16 *)d->o->data, a.gb = (bf16 *)d->g->data;
    a.part = c->attn_part, a.count = c->attn_count, a.bar = c->ds_bar;
    a.row_seq = mt->row_seq, a.row_ctx = mt->row_ctx, a.block_tables = mt->block_tables, a.slot = mt->slot;
    a.pos = d->pos, a.n_slots = (int64_t)d->kv[0].n_blocks * IRIS_KV_BLOCK;
    for (int j = 0; j < hd / 2; j++) a.inv_freq[j] = d->inv_freq[j], a.dim_of[j] = d->dim_of[j];

    /* A measuring aid (IRIS_CUDA_DS_TRACE=FILE, read at open): every CTA's stamps at the phase ends
     * of every layer, written to FILE (raw u64, [grid][layers][DS_EVENTS]) after the step, for
     * bench/ds_trace.py.  Not while a graph is recorded (a replay does not come back here; use
     * IRIS_CUDA_GRAPHS=0); its buffer is a cudaMalloc of its own, freed at close. */
    const size_t trace_n = (size_t)grid * NL * DS_EVENTS;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (c->ds_trace && cudaStreamIsCapturing(c->stream, &cap) == cudaSuccess && cap == cudaStreamCaptureStatusNone) {
        if (c->ds_trace_n < trace_n) {
            cudaFree(c->ds_trace_buf);
            c->ds_trace_n = cudaMalloc((void **)&c->ds_trace_buf, trace_n * 8) == cudaSuccess ? trace_n : 0;
            if (!c->ds_trace_n) c->ds_trace_buf = NULL;
        }
        a.trace = c->ds_trace_buf;
    }
    if (cudaMemsetAsync(c->ds_bar, 0, sizeof(unsigned), c->stream) != cudaSuccess)
        return iris_cuda_status(b, cudaGetLastError(), "decode_layers: barrier reset");
    kern<<<grid, DS_THREADS, smem, c->stream>>>(a);
    c->ds_runs++;
    c->ds_split_last = sk;
    int rc = iris_cuda_check(b, "decode_layers");
    if (!rc && a.trace) {
        unsigned long long *h = (unsigned long long *)malloc(trace_n * 8);
        FILE *f = h && cudaStreamSynchronize(c->stream) == cudaSuccess &&
                          cudaMemcpy(h, a.trace, trace_n * 8, cudaMemcpyDeviceToHost) == cudaSuccess
                      ? fopen(c->ds_trace, "wb")
                      : NULL;
        if (f) {
            int hdr[3] = {grid, NL, DS_EVENTS};
            fwrite(hdr, sizeof hdr, 1, f);
            fwrite(h, 8, trace_n, f);
            fclose(f);
        }
        free(h);
    }
    return rc;
}
