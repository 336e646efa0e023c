/* cuda_backend.h: the CUDA backend's C surface beyond backend.h.
 *
 * iris_backend_cuda_open (declared in backend.h) takes one device allocation
 * of arena_bytes at open; every later `alloc`, the cuBLASLt workspace and the
 * ops' scratch are carved from it, so nothing calls cudaMalloc afterwards.
 * Included by C code only under #ifdef IRIS_CUDA. */
#ifndef IRIS_CUDA_BACKEND_H
#define IRIS_CUDA_BACKEND_H

#include <stddef.h>

#include "backend/backend.h"

/* Number of CUDA devices usable now (0 when there is no GPU or no driver). */
int iris_cuda_device_count(void);

typedef struct iris_cuda_mem {
    size_t arena_bytes;     /* the one allocation */
    size_t used_bytes;      /* carved now (scratch included) */
    size_t peak_bytes;      /* the most carved at once */
    size_t device_used;     /* whole device: total - free (cudaMemGetInfo), all processes */
    size_t device_total;
} iris_cuda_mem;

/* Bytes the backend carves at open besides the cuBLASLt workspace: FP8
 * dequantization rows and split-KV attention partials.  The engine adds them
 * to the memory plan's allocation (and takes them from its budget). */
size_t iris_cuda_scratch_bytes(void);

/* Arena and device memory figures of a CUDA backend. */
int iris_cuda_mem_info(iris_backend *b, iris_cuda_mem *m);

/* Linear: batches of up to `rows` rows use the W8A16 / W16A16 kernels, larger
 * ones cuBLASLt (FP8 weights dequantized to BF16 tiles first); rows < 0: the
 * defaults (16, and 32 where FP8 weights take the tensor-core kernel).  For
 * measurements; the defaults come from the benchmark (see cuda_linear.cu). */
void iris_cuda_set_gemv_rows(iris_backend *b, int rows);

/* FP8 weights, larger batches: 1 multiplies on FP8 tensor cores with the activations quantized
 * per token and 128 columns (W8A8, sm_90 only; cuda_linear.cu), 0 (default) dequantizes the
 * weight to BF16 tiles for cuBLASLt (W8A16, transformers' numbers).  Default from
 * $IRIS_CUDA_FP8_MMA at open.  Returns 1 where the device has it (sm_90), else 0 (and it stays off). */
int iris_cuda_set_fp8_mma(iris_backend *b, int on);

/* Flash attention kernel: 0 register-resident mma.sync (default), 1 WMMA with
 * the output tile in shared memory (kept as the check and the baseline). */
void iris_cuda_set_attn_impl(iris_backend *b, int impl);
/* The tensor-core GEMV's weight tiles through shared memory where they fit one wave (1, the default)
 * or always through registers (0); the two give the same bits (tests/test_ops.c). */
void iris_cuda_set_gemv_smem(iris_backend *b, int on);
/* Decode-only steps' attention doing qk_norm_rope_kv itself (backend.h qk_norm_rope_attn; on unless
 * IRIS_CUDA_QK_ATTN=0 at open); off: the two kernels. */
void iris_cuda_set_qk_attn(iris_backend *b, int on);
/* Decode-only steps of 1..4 sequences through every decoder layer in one persistent kernel
 * (backend.h decode_layers, cuda_decode.cu): mode -1 where it measured faster than the ops (the
 * default: for decoder layers under 64 MiB 1 sequence at any length, 2 within 8,448 tokens, 3
 * within 3,200, 4 within 2,176; for larger layers 1-4 at any length), 1 every step it takes, 0 never
 * (IRIS_CUDA_DECODE_STACK=1 / 0 at open). */
void iris_cuda_set_decode_stack(iris_backend *b, int mode);
/* Launches of that kernel so far (graph captures included; replays not), for the tests. */
int iris_cuda_decode_stack_runs(iris_backend *b);
/* Its GEMV phases (bit 0 q/k/v, 1 o_proj, 2 gate/up, 3 down_proj) that share their chunks out
 * stream-K rather than by whole tiles: -1 (the default) o_proj and down_proj where the whole tiles
 * of both share out unevenly over the SMs (4B on 132), else none; or the mask given
 * (IRIS_CUDA_DS_SPLIT=MASK at open); and the mask of its last launch. */
void iris_cuda_set_decode_split(iris_backend *b, int mask);
int iris_cuda_decode_split_last(iris_backend *b);
/* The mask the default gives decoder layers of these shapes (hidden H, intermediate FF, nq / nkv
 * heads of 128) on a GPU of `sms` SMs. */
int iris_cuda_decode_split_default(int sms, int H, int FF, int nq, int nkv);
/* Decode attention: the CTAs an SM its context splits aim at for `rows` rows of GQA groups of
 * `group` query heads (IRIS_CUDA_ATTN_CTAS=N at open overrides it). */
int iris_cuda_attn_ctas_per_sm(int rows, int group);

/* CUDA graphs: ops issued between capture_begin and capture_end are recorded,
 * not run; replay runs them again with the same pointers (the caller
 * rewrites the step's metadata in place before each replay).  The graph is
 * the caller's; free it with iris_cuda_graph_free (NULL is fine). */
typedef struct iris_cuda_graph iris_cuda_graph;
int iris_cuda_graph_begin(iris_backend *b);
int iris_cuda_graph_end(iris_backend *b, iris_cuda_graph **out);
int iris_cuda_graph_replay(iris_backend *b, iris_cuda_graph *g);
void iris_cuda_graph_free(iris_cuda_graph *g);

/* Wall time of the stream's work between two marks, in milliseconds (events
 * on the stream): mark, issue ops, elapsed. */
int iris_cuda_mark(iris_backend *b);
double iris_cuda_elapsed_ms(iris_backend *b);

#endif
