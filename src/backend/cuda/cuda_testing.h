/* cuda_testing.h: the CUDA backend's knobs and counters for tests and benchmarks only
 * (tests/test_ops*.c, bench/bench_cuda.c).  The product never calls them: the engine and the
 * model reach the backend through backend.h's op table and cuda_backend.h.  Each setter forces
 * one of the backend's choices on an open backend, so that a test can compare the two paths or
 * a benchmark time them; the defaults are what the measurements beside each rule chose.
 * Included by C code only under #ifdef IRIS_CUDA. */
#ifndef IRIS_CUDA_TESTING_H
#define IRIS_CUDA_TESTING_H

#include "backend/backend.h"

/* Linear: batches of up to `rows` rows use the W8A16 / W16A16 kernels, larger
 * ones cuBLASLt (FP8 weights dequantized to BF16 tiles first); rows < 0: the
 * defaults (16, and 32 where FP8 weights take the tensor-core kernel; 4 for BF16 weights).
 * The defaults come from the benchmark (see cuda_internal.cuh GEMV_ROWS). */
void iris_cuda_set_gemv_rows(iris_backend *b, int rows);

/* FP8 weights, larger batches: 1 multiplies on FP8 tensor cores with the activations quantized
 * per token and 128 columns (W8A8, sm_90 only; cuda_linear.cu), 0 (default) dequantizes the
 * weight to BF16 tiles for cuBLASLt (W8A16, transformers' numbers).  Default from
 * $IRIS_CUDA_FP8_MMA at open.  Returns 1 where the device has it (sm_90), else 0 (and it stays off). */
int iris_cuda_set_fp8_mma(iris_backend *b, int on);

/* 4-bit weights, decode-sized products: 1 through the per-row reference GEMV (up to 8 rows; more
 * dequantize to BF16 for cuBLASLt), 0 (the default) the tensor-core GEMV (cuda_gemv_i4.cu, up to
 * 16 rows, the fused q/k/v and SwiGLU launches included). */
void iris_cuda_set_i4_ref(iris_backend *b, int on);
/* Launches of that tensor-core GEMV so far (graph captures included; replays not), for the tests. */
int iris_cuda_i4_gemv_runs(iris_backend *b);
/* Its warps a CTA (1-8, each splitting the columns), or 0: the rule of cuda_gemv_i4.cu launch4. */
void iris_cuda_set_i4_warps(iris_backend *b, int kw);
/* The rows a product may have to take it (in launches of 16 tokens), or 0: the default, 16. */
void iris_cuda_set_i4_rows(iris_backend *b, int rows);

/* Flash attention kernel: 0 register-resident mma.sync (default), 1 WMMA with
 * the output tile in shared memory (kept as the check and the baseline); for
 * prefill over the paged cache the mma kernel also as 2 (its layout before: a CTA
 * a query head, row tiles in order; the default takes the heaviest tiles first),
 * 3 (heaviest first, two query heads of a kv head a CTA) and 4 (3 with three K/V
 * stages in flight); all the same bits as 5, mma.sync's default layout (bench/bench_attn.c).
 * 0, the default, is that kernel too except where the wgmma one runs (cuda_attn_wgmma.cu: the
 * vision encoder's segments of head size 64, paged prefill of head size 128 over a BF16 cache). */
void iris_cuda_set_attn_impl(iris_backend *b, int impl);
/* 1 when the segments of head size 64 go to the wgmma kernel (impl 0); the device's compute
 * capability as 10 · major + minor. */
int iris_cuda_wgmma_on(iris_backend *b);
int iris_cuda_capability(iris_backend *b);
/* The tensor-core GEMV's weight tiles through shared memory where they fit one wave (1, the default)
 * or always through registers (0); the two give the same bits (tests/test_ops_linear.c). */
void iris_cuda_set_gemv_smem(iris_backend *b, int on);
/* Decode-only steps' attention doing qk_norm_rope_kv itself (backend.h qk_norm_rope_attn; on by
 * default); off: the two kernels. */
void iris_cuda_set_qk_attn(iris_backend *b, int on);
/* The op table's graph hooks (backend.h graph_begin ...): on (the default, unless IRIS_CUDA_GRAPHS=0
 * at open) or NULL, so that the model runs every step op by op. */
void iris_cuda_set_graphs(iris_backend *b, int on);
/* Decode-only steps of 1..4 sequences through every decoder layer in one persistent kernel
 * (backend.h decode_layers, cuda_decode.cu): mode -1 where it measured faster than the ops (the
 * default: for decoder layers under 64 MiB 1 sequence at any length, 2 within 8,448 tokens, 3
 * within 3,200, 4 within 2,176; for larger layers 1-4 at any length), 1 every step it takes, 0 never
 * (IRIS_CUDA_DECODE_STACK=1 / 0 at open).  IRIS_EUNSUPPORTED (and off) where the kernels were
 * JIT-compiled from PTX older than sm_90, which compiles the kernel out. */
int iris_cuda_set_decode_stack(iris_backend *b, int mode);
/* Launches of that kernel so far (graph captures included; replays not), for the tests. */
int iris_cuda_decode_stack_runs(iris_backend *b);
/* Its GEMV phases (bit 0 q/k/v, 1 o_proj, 2 gate/up, 3 down_proj) that share their chunks out
 * stream-K rather than by whole tiles: -1 (the default) o_proj and down_proj where the whole tiles
 * of both share out unevenly over the SMs (4B on 132), else none; or the mask given; and the mask
 * of its last launch. */
void iris_cuda_set_decode_split(iris_backend *b, int mask);
int iris_cuda_decode_split_last(iris_backend *b);
/* The mask the default gives decoder layers of these shapes (hidden H, intermediate FF, nq / nkv
 * heads of 128) on a GPU of `sms` SMs. */
int iris_cuda_decode_split_default(int sms, int H, int FF, int nq, int nkv);
/* Decode attention: the CTAs an SM its context splits aim at for `rows` rows of GQA groups of
 * `group` query heads. */
int iris_cuda_attn_ctas_per_sm(int rows, int group);
/* 1 where attn_paged gives `rows` decode rows to the tensor-core decode kernel (cuda_attn.cu). */
int iris_cuda_attn_tc(int rows, int group, int hd, int kv_bf16);
/* The tensor-core kernel's context splits for `ctas` (row, kv head) pairs on `sms` SMs, before the
 * context's length bounds them. */
int iris_cuda_attn_tc_splits(int ctas, int sms);

/* CUDA graphs by hand (bench_cuda): ops issued between capture_begin and capture_end are
 * recorded, not run; replay runs them again with the same pointers (the caller rewrites the
 * step's metadata in place before each replay).  The graph is the caller's; free it with
 * iris_cuda_graph_free (NULL is fine).  The model uses the op table's hooks instead. */
typedef struct iris_cuda_graph iris_cuda_graph;
int iris_cuda_graph_begin(iris_backend *b);
int iris_cuda_graph_end(iris_backend *b, iris_cuda_graph **out);
int iris_cuda_graph_replay(iris_backend *b, iris_cuda_graph *g);
void iris_cuda_graph_free(iris_cuda_graph *g);

/* The page-locked staging buffer of get_f32, put_f32 and get_topk's downloads (cuda_mem.cu
 * pinned_room): its address, and its size in *bytes. */
const void *iris_cuda_staging(iris_backend *b, size_t *bytes);

/* Wall time of the stream's work between two marks, in milliseconds (events
 * on the stream): mark, issue ops, elapsed. */
int iris_cuda_mark(iris_backend *b);
double iris_cuda_elapsed_ms(iris_backend *b);

#endif
