/* cuda_decode.cuh: what the persistent decode kernel (cuda_decode.cu) and its host side
 * (cuda_decode_launch.cu) share: the limits, the kernel's arguments (ds_args, one struct passed
 * by value as __grid_constant__), the shared-memory head whose size the host lays out, and the
 * tile arithmetic both walk by. */
#ifndef IRIS_CUDA_DECODE_CUH
#define IRIS_CUDA_DECODE_CUH

#include "cuda_internal.cuh"

#define DS_WARPS 8                       /* consumer warps */
#define DS_PRODUCERS 4                   /* producer warps: chunk n is producer n % DS_PRODUCERS's */
#define DS_THREADS ((DS_WARPS + DS_PRODUCERS) * 32)
#define DS_MAX_LAYERS 64
#define DS_MAX_ROWS 4
#define DS_HD 128
#define DS_GMAX 4
#define DS_PAD 64                        /* bytes after each weight row of a slot: rows g and g + 1 of a
                                            lane group land in different banks */
#define DS_MAX_RING 32
#define DS_MIN_RING 4
#define DS_MAX_SPLITS 64
#define DS_EVENTS 13                     /* trace stamps a layer (k_decode_stack) */
#define DS_BT 64                         /* block-table entries of the CTA's attention item kept in shared memory */
#define DS_GP (2 * 16 * DS_MAX_ROWS)     /* a stream-K piece's partial sums: [row of x][16 rows][gate, up] */
#define DS_MAX_GRID 256                  /* CTAs (SMs) whose pieces' sums c->ds_part holds */
#define DS_SK_OP 0xa                     /* o_proj + down_proj: the stream-K mask of the default, with a kernel
                                            instance of its own */
static_assert((size_t)DS_MAX_GRID * DS_GP * 8 <= DS_SKPART_BYTES, "c->ds_part holds every CTA's piece sums");

enum { W_Q, W_K, W_V, W_O, W_G, W_U, W_D, W_N };

struct ds_layer {
    const uint8_t *w[W_N];
    const float *s[W_N];
    const void *ln1, *ln2, *qn, *kn;
    bf16 *kc, *vc;
};

struct ds_args {
    ds_layer L[DS_MAX_LAYERS];
    int n_layers, R, H, FF, nq, nkv, g, cw, ring, splits, max_blocks, pos_stride, xld;
    int ln_dt, qk_dt;
    int run[4];    /* GEMV phase ph stream-K in runs of run[ph] chunks (0: whole tiles; ds_pieces) */
    int tiles[4];  /* GEMV phase ph's 16-row tiles (ds_tiles), read as they are: no arithmetic to hold */
    unsigned long long *gpart; /* stream-K pieces' tagged partial sums: [grid][DS_GP], zero between launches */
    unsigned long long *qkvt;  /* the q/k/v GEMV's outputs as tagged words (qkv_at), zero between layers */
    unsigned x_off, ring_off, slot_bytes;
    float eps, scale;
    bf16 *h, *o, *gb;
    float *part;
    int *count;
    unsigned *bar;
    unsigned long long *trace; /* IRIS_CUDA_DS_TRACE: [grid][n_layers][DS_EVENTS] globaltimer stamps, or NULL */
    const int32_t *row_seq, *row_ctx, *block_tables, *slot, *pos;
    int64_t n_slots;
    float inv_freq[DS_HD / 2];
    int dim_of[DS_HD / 2];
};

/* Attention's shared memory (phase 2); the GEMV epilogue's sums (phases 1, 3-5) share it. */
struct ds_attn_smem {
    __align__(16) float q[DS_GMAX][4][36]; /* the group's query heads, normalized, rotated, scaled: quarters
                                            of 32 padded to 36 (the walk's 4 quarters in different banks) */
    float x[DS_WARPS][DS_HD];            /* qk_head's scratch, a warp each */
    bf16 in[DS_WARPS][DS_HD];            /* a head's values as loaded */
    __align__(16) bf16 k[DS_HD];         /* the newest key and value (the owning split) */
    __align__(16) bf16 v[DS_HD];
    float m[DS_WARPS][DS_GMAX], l[DS_WARPS][DS_GMAX];
    __align__(16) float acc[DS_WARPS][DS_GMAX][DS_HD]; /* also the walk's value rows, a warp's 2 KB */
    int last;
};
struct ds_head {
    uint64_t full[DS_MAX_RING], empty[DS_MAX_RING];
    float inv[DS_HD / 2];
    int dim[DS_HD / 2];
    /* the step's metadata, read once (not in every layer's attention chain): the rows' context,
     * sequence, cache slot and rotary angles; the block-table entries of this CTA's attention item
     * (item blockIdx.x: keys from bt0·16, nbt entries; nbt 0: read them from global memory) */
    int ctx[DS_MAX_ROWS], seq[DS_MAX_ROWS], slot[DS_MAX_ROWS];
    float sn[DS_MAX_ROWS][DS_HD / 2], cs[DS_MAX_ROWS][DS_HD / 2];
    int bt[DS_BT], bt0, nbt;
    float ss[DS_WARPS][DS_MAX_ROWS];
    union {
        ds_attn_smem at;
        float red[DS_WARPS][2][16][8];   /* [warp][gate, up][row][token] */
    } u;
};

/* Phase ph's (0 q/k/v, 1 o_proj, 2 gate/up, 3 down_proj) 16-row tiles and input width, for the
 * kernel's walk and the host's stream-K rule alike. */
static __host__ __device__ __forceinline__ int ds_tiles(int ph, int H, int FF, int nq, int nkv) {
    return ph == 0 ? (nq + 2 * nkv) * DS_HD / 16 : ph == 2 ? FF / 16 : H / 16;
}
static __host__ __device__ __forceinline__ int ds_k(int ph, int H, int FF, int nq) {
    return ph == 1 ? nq * DS_HD : ph == 3 ? FF : H;
}


/* The kernel instance for the GEMV phases that go stream-K (mask sk: 0 none, DS_SK_OP, else the
 * generic one that reads a.run), defined beside the kernel in cuda_decode.cu. */
typedef void (*ds_kernel_fn)(ds_args);
ds_kernel_fn iris_cuda_ds_kernel(int sk);

#endif
