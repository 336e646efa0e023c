/* planner.h: the GPU memory plan.  Every byte iris will hold on the device is
 * computed here, before anything is allocated, from config.json, the
 * safetensors headers (no tensor data) and the settings.
 *
 * The contract (why the plan is exact by construction): the CUDA backend makes
 * ONE device allocation of `device_bytes` and carves it with the regions of
 * the plan (`iris_plan_region_find(plan, "lm.qkv")->offset`), never with its
 * own arithmetic; the step loop never allocates.  Every region is a multiple
 * of IRIS_PLAN_ALIGN (256 B, the CUDA allocator's alignment) and starts at an
 * aligned offset.  The weights region holds every stored tensor (a tied
 * lm_head.weight excluded) in the checkpoint's tensor order, each in a slot
 * of iris_plan_align(n_bytes) bytes, in its stored dtype: BF16 stays BF16,
 * FP8 stays FP8 beside its fp32 weight_scale_inv.  Two parts are not carved
 * from the allocation because the driver owns them: the CUDA context with the
 * libraries' own memory (measured with cudaMemGetInfo around context and
 * handle creation by the backend; IRIS_PLAN_CONTEXT_ESTIMATE until then, and
 * always in `iris plan`), and the instantiated CUDA graphs
 * (IRIS_PLAN_GRAPH_ESTIMATE each, one graph per decode batch-size bucket).
 *
 * The activations part is shared, not summed: the engine thread runs the
 * vision encoder and the decoder steps one after the other on one stream, so
 * the vision regions ("vision.*") and the decoder step regions ("lm.*") start
 * at the same offset and the part is the larger of the two.  The image
 * embeddings (merged + DeepStack rows) live in their own part because they
 * are kept across steps until their tokens are prefilled; the scheduler must
 * shorten a prefill chunk so that the images it touches fit in
 * `image_room_tokens` rows (>= one largest image, so progress is guaranteed).
 *
 * The budget (iris_plan_budget): --gpu-memory-limit, else
 * --gpu-memory-utilization x total, both capped at the free memory; else the
 * free memory minus --gpu-memory-margin.  The KV cache gets everything the
 * other parts leave, in whole 16-token blocks.  The context is the requested
 * --max-model-len, else the largest length for which one full-length sequence
 * fits in the pool, capped at max_position_embeddings; a context below
 * IRIS_PLAN_MIN_CONTEXT (or the model's own maximum when that is smaller)
 * does not start.  When the settings do not fit, the plan still lists every
 * part (the KV cache at the minimum it needs) and the settings that would fit.
 *
 * Does not: touch a GPU, read tensor data, or decide the KV block layout
 * inside the KV region (kv_pool's business).
 */
#ifndef IRIS_PLANNER_H
#define IRIS_PLANNER_H

#include <stddef.h>
#include <stdint.h>

#include "iris.h"
#include "formats/config.h"
#include "formats/safetensors.h"

#define IRIS_MIB (1ull << 20)
#define IRIS_GIB (1ull << 30)

#define IRIS_PLAN_ALIGN 256u                 /* cudaMalloc's alignment; every region is a multiple */
#define IRIS_KV_BLOCK_TOKENS 16              /* tokens per paged-KV block */
#define IRIS_PLAN_MIN_CONTEXT 4096           /* shortest context iris starts with */
#define IRIS_PLAN_DEFAULT_MAX_NUM_SEQS 64
#define IRIS_PLAN_DEFAULT_MAX_BATCH_TOKENS 2048
/* max_batch_tokens 0 (the engine's default): the plan chooses the step's token budget.  It starts
 * from the default (or max_num_seqs, when larger) and takes the largest of 8192 and 4096 whose
 * plan keeps the context and gives up at most IRIS_PLAN_AUTO_BATCH_KV_PERCENT of the KV blocks (or
 * still holds max_num_seqs sequences of that context): a card with room takes several images'
 * prefill chunks and their encoder pass a step, an 8 GB card keeps its cache. */
#define IRIS_PLAN_AUTO_BATCH_TOKENS_MAX 8192
#define IRIS_PLAN_AUTO_BATCH_KV_PERCENT 2
/* 1024x1024 = 1,024 image tokens: Qwen's processor allows 16,777,216 pixels
 * (16,384 tokens, ~1.4 GiB of encoder scratch), too much beside a 4B model
 * on an 8 GB card; ~1 MP is the usual Qwen-VL serving limit.  Larger images
 * are resized down (smart_resize's max_pixels), so raise it when there is room. */
#define IRIS_PLAN_DEFAULT_MAX_IMAGE_PIXELS (1024ll * 1024)
/* Below 512x512, smart_resize's own minimum-size rules (min_pixels 65,536,
 * at least one 32-pixel row) could produce images larger than the limit. */
#define IRIS_PLAN_MIN_IMAGE_PIXELS (512ll * 512)
/* Videos: a video's sampled frames, resized together, hold at most max_video_pixels pixels
 * (Qwen3-VL's video size.longest_edge, 25,165,824: 12,288 tokens), and each temporal patch (two
 * frames, one vision item) at most the largest image, so the encoder scratch and the embedding
 * rows of an image cover it: a video costs context, not memory.  The plan admits the largest video
 * whose pads leave IRIS_PLAN_VIDEO_ROOM_TOKENS of the context (a quarter of a shorter one) to the
 * text, the timestamps and the answer (video_pixels: max_video_pixels lowered to that); the
 * engine resizes every video within it, and refuses a prompt that still does not fit with the
 * --max-frames / --fps that would. */
#define IRIS_PLAN_DEFAULT_MAX_VIDEO_PIXELS 25165824LL
#define IRIS_PLAN_MIN_VIDEO_PIXELS (4LL * 32 * 32)   /* min_frames of one 32x32 patch row */
#define IRIS_PLAN_VIDEO_ROOM_TOKENS 1024
#define IRIS_PLAN_DEFAULT_MARGIN (512ull * IRIS_MIB)
/* Estimates used until the CUDA backend measures them (and by `iris plan`):
 * the context with IRIS_CUDA_STACK_LIMIT plus the cuBLASLt handle, 328.8 + 2
 * MiB rounded up; a captured decode-sized graph (600 nodes) 2 MiB.  Measured
 * by tools/measure_cuda_overhead.cu (results: tools/measure_cuda_overhead_h100.txt)
 * on an H100; the context's local memory is SMs x threads/SM x stack limit,
 * so smaller cards need less. */
#define IRIS_PLAN_CONTEXT_ESTIMATE (336ull * IRIS_MIB)
#define IRIS_PLAN_GRAPH_ESTIMATE (2ull * IRIS_MIB)
/* Part of the contract: the backend sets cudaLimitStackSize to this before
 * its first kernel (our kernels need little stack; the default 1 KiB costs
 * ~200 MiB more on an H100), keeps CUDA_MODULE_LOADING lazy (eager loading
 * adds ~340 MiB for cuBLASLt alone) and creates no cuBLAS handle. */
#define IRIS_CUDA_STACK_LIMIT 256
#define IRIS_PLAN_CUBLASLT_WORKSPACE (32ull * IRIS_MIB)  /* carved: passed to every cublasLtMatmul */
#define IRIS_PLAN_ATTN_SPLITS 16             /* split-KV partials per (sequence, head) in decode attention */
#define IRIS_PLAN_SEQ_SAMPLE_BYTES 256       /* per sequence: sampling params, RNG state, token, top logprobs */
#define IRIS_FP8_BLOCK 128                   /* weight_scale_inv covers 128x128 weight blocks */
#define IRIS_PLAN_MAX_REGIONS 48
#define IRIS_PLAN_MAX_GRAPHS 64
#define IRIS_PLAN_MAX_SUGGESTIONS 8

typedef enum iris_kv_dtype { IRIS_KV_BF16 = 0, IRIS_KV_FP8 = 1 } iris_kv_dtype;

/* --dense-weights: BF16 copies of an FP8 checkpoint's decoder linears beside the FP8 codes, for
 * prefill and large batches (no dequantization per product).  auto: when the plan fits with them
 * and they take at most IRIS_PLAN_DENSE_AUTO_PERCENT of the budget (an H100 yes, an 8 GB card no). */
typedef enum iris_dense_mode { IRIS_DENSE_AUTO = 0, IRIS_DENSE_ON = 1, IRIS_DENSE_OFF = 2 } iris_dense_mode;
#define IRIS_PLAN_DENSE_AUTO_PERCENT 10

/* The vision worker (engine_vision.c): a second vision encoder on its own thread and stream, which
 * encodes the images of requests waiting for their prefill while the decoder's steps run, so the
 * steps go on while images are encoded.  It needs its own encoder scratch for
 * IRIS_PLAN_WORKER_IMAGES of the largest images a pass ("worker.vision", as the activations' vision
 * users) and cuBLASLt workspace ("worker.workspace").  auto: with vision,
 * more than one sequence, when the part takes at most IRIS_PLAN_WORKER_AUTO_PERCENT of the budget
 * and the plan fits with it (an H100 yes: ~0.2 GB of 79; an 8 GB card no). */
typedef enum iris_worker_mode { IRIS_WORKER_AUTO = 0, IRIS_WORKER_ON = 1, IRIS_WORKER_OFF = 2 } iris_worker_mode;
#define IRIS_PLAN_WORKER_AUTO_PERCENT 1
#define IRIS_PLAN_WORKER_IMAGES 2

/* Placement for small cards (issue 31): --embeddings keeps the token-embedding table in host memory
 * (the step gathers its rows on the CPU and uploads them: hidden_size * 2 bytes a token, a few KB a
 * decode step; the numbers are the device lookup's bit for bit); --lm-head-dtype fp8 quantizes a
 * BF16 lm_head to block FP8 at load (128x128 blocks with fp32 multipliers, as `iris quantize`
 * writes; half the bytes, an accuracy cost measured in docs/design.md).  A tied lm_head is the
 * table: with the table on the host the card holds the lm_head alone (its BF16 copy, or FP8).
 * auto (both defaults): host embeddings (exact) when the context would stay below the requested
 * --max-model-len, else below IRIS_PLAN_AUTO_PLACE_CONTEXT tokens (or the model's maximum) with the
 * table on the card; the FP8 lm_head (other logits) of an untied model only when the plan does
 * not fit otherwise (planner_place.c).  A flag pins its choice. */
typedef enum iris_embed_mode { IRIS_EMBED_AUTO = 0, IRIS_EMBED_DEVICE = 1, IRIS_EMBED_HOST = 2 } iris_embed_mode;
typedef enum iris_lm_head_mode { IRIS_LM_HEAD_AUTO = 0, IRIS_LM_HEAD_STORED = 1, IRIS_LM_HEAD_FP8 = 2 } iris_lm_head_mode;
#define IRIS_PLAN_AUTO_PLACE_CONTEXT 8192
#define IRIS_PLAN_MAX_PLACE_TRIES 4

/* The parts of the plan, in the order they are printed. */
typedef enum iris_plan_part {
    IRIS_PART_WEIGHTS,
    IRIS_PART_DENSE,         /* BF16 copies of the FP8 decoder linears (--dense-weights) */
    IRIS_PART_KV_CACHE,
    IRIS_PART_ACTIVATIONS,   /* max(vision encoder, decoder step) */
    IRIS_PART_IMAGE_EMBEDS,  /* merged + DeepStack rows kept until prefilled */
    IRIS_PART_SAMPLING,      /* logits and sampling buffers */
    IRIS_PART_STEP_META,     /* token ids, positions, slot mapping, block tables */
    IRIS_PART_WORKSPACE,     /* cuBLASLt workspace */
    IRIS_PART_VISION_WORKER, /* a second encoder's scratch and workspace (the vision worker) */
    IRIS_PART_CUDA_GRAPHS,   /* driver-owned: estimate */
    IRIS_PART_CUDA_CONTEXT,  /* driver-owned: measured or estimate */
    IRIS_PART_COUNT
} iris_plan_part;

/* The settings; 0 (or IRIS_KV_BF16) means the default. */
typedef struct iris_plan_settings {
    int64_t max_model_len;     /* 0: the largest that fits, up to max_position_embeddings */
    int max_num_seqs;          /* sequences decoded together (64) */
    int max_batch_tokens;      /* tokens per step, the prefill chunk (2048; iris_plan_make: 0 chooses, see
                                  IRIS_PLAN_AUTO_BATCH_TOKENS_MAX); >= max_num_seqs */
    int64_t max_image_pixels;  /* smart_resize's max_pixels for every image (1,048,576) */
    int64_t max_video_pixels;  /* a video's frames together after resizing (25,165,824; see above) */
    int kv_cache_dtype;        /* iris_kv_dtype */
    int dense_weights;         /* iris_dense_mode */
    int text_only;             /* --text-only: no vision tower on the card, no image buffers (vLLM's
                                  --language-model-only); a model without one plans so anyway */
    int embeddings;            /* iris_embed_mode */
    int lm_head_dtype;         /* iris_lm_head_mode */
    int vision_worker;         /* iris_worker_mode */
} iris_plan_settings;

/* What the planner needs from a checkpoint (headers only). */
typedef struct iris_plan_model {
    iris_config cfg;
    char label[512];                     /* names the model in messages */
    uint64_t weight_bytes;               /* sum of aligned slots, as on the GPU */
    uint64_t dtype_bytes[IRIS_DT_COUNT]; /* the same, per stored dtype */
    int n_tensors;                       /* tensors placed (a tied lm_head excluded) */
    int tied_lm_head_skipped;            /* 1 when lm_head.weight is stored but tied */
    int n_decoder_linears;               /* the 7 linears of every decoder layer */
    int n_fp8_linears;                   /* of which FP8 (QWEN3VL.md §2 rule) */
    int n_int4_linears;                  /* of which 4-bit (weight_packed: compressed-tensors W4A16) */
    uint64_t fp8_weight_bytes;           /* weights if every decoder linear were block-FP8 */
    uint64_t dense_bytes;                /* BF16 copies of the FP8 decoder linears (aligned slots) */
    int64_t linear_max_in;               /* largest in_features of a decoder linear */
    int64_t linear_max_elems;            /* largest out*in of a decoder linear */
    uint64_t vision_weight_bytes;        /* of weight_bytes, the vision tower's ("model.visual.*") */
    uint64_t vision_dtype_bytes[IRIS_DT_COUNT];
    uint64_t embed_bytes;                /* of weight_bytes, the token-embedding table's slot */
    int embed_dtype;
    uint64_t lm_head_bytes;              /* of weight_bytes, the stored lm_head's slots ("lm_head.*"; 0 when tied) */
    int lm_head_dtype;                   /* its dtype (tied: the table's); IRIS_DT_I4 when packed */
    uint64_t lm_head_fp8_bytes;          /* an FP8 copy: align(V * H) codes + align(fp32 multipliers) */
    uint64_t lm_head_fp8_scale_bytes;    /* of which the multipliers */
} iris_plan_model;

typedef struct iris_plan_region {
    char name[32];      /* "lm.qkv", "vision.mlp", "kv.pool", ... */
    int part;           /* iris_plan_part */
    uint64_t offset;    /* from the base of the one allocation */
    uint64_t bytes;     /* a multiple of IRIS_PLAN_ALIGN */
} iris_plan_region;

/* One placement the plan tried (auto): the context it gave (0: did not fit). */
typedef struct iris_plan_place_try {
    int embed_host, lm_head_fp8, fits;
    int64_t context;
    uint64_t weight_bytes;
} iris_plan_place_try;

typedef enum iris_plan_suggestion_kind {
    IRIS_SUGGEST_EMBED_HOST,
    IRIS_SUGGEST_LM_HEAD_FP8,
    IRIS_SUGGEST_MAX_MODEL_LEN,
    IRIS_SUGGEST_MAX_IMAGE_PIXELS,
    IRIS_SUGGEST_MAX_BATCH_TOKENS,
    IRIS_SUGGEST_KV_FP8,
    IRIS_SUGGEST_FP8_CHECKPOINT,
    IRIS_SUGGEST_FP8_CHECKPOINT_KV_FP8,
} iris_plan_suggestion_kind;

/* One alternative that was planned: fits says whether it would start; value
 * is the setting's value (0 for the dtype switches); context and n_full_seqs
 * are what it would give. */
typedef struct iris_plan_suggestion {
    int kind;
    int fits;
    int64_t value;
    int64_t context;
    int64_t n_full_seqs;
    uint64_t weight_bytes;   /* the weights it assumes (FP8 checkpoint estimate) */
} iris_plan_suggestion;

typedef struct iris_plan {
    iris_plan_settings settings;     /* defaults filled; max_model_len as requested (0: auto) */
    char label[512];
    int weights_fp8;                 /* some decoder linears are FP8 */
    int weights_int4;                /* some decoder linears are 4-bit (W4A16) */
    int dense;                       /* the plan holds BF16 copies of them (IRIS_PART_DENSE) */
    int vision_worker;               /* the plan holds the vision worker's part (IRIS_PART_VISION_WORKER) */
    int text_only;                   /* no vision tower, no image buffers (settings or model) */
    uint64_t vision_weight_bytes;    /* what the vision tower would take (left off when text_only) */
    int embed_host;                  /* the token-embedding table stays in host memory */
    int lm_head_fp8;                 /* the lm_head is quantized to FP8 at load */
    int embed_auto, lm_head_auto;    /* chosen by auto (not by a flag) */
    int lm_head_tied;
    int lm_head_stored_dtype;        /* as stored (tied: the table's) */
    uint64_t embed_bytes;            /* the table (on the card unless embed_host) */
    uint64_t embed_row_bytes;        /* one token's row as the step uploads it (BF16) */
    uint64_t lm_head_bytes;          /* the lm_head on the card as planned (tied on the card: 0, the table) */
    uint64_t lm_head_stored_bytes;   /* what it takes as stored (tied: the table's bytes) */
    uint64_t lm_head_fp8_bytes;      /* what an FP8 copy takes */
    int64_t place_target;            /* the context auto placement aims for */
    int n_place_tries;
    iris_plan_place_try place_tries[IRIS_PLAN_MAX_PLACE_TRIES];
    uint64_t budget_bytes;
    char budget_source[256];         /* how the budget was set, for the table */
    int context_measured;            /* 0: IRIS_PLAN_CONTEXT_ESTIMATE */

    int fits;
    char why[256];                   /* when !fits: what does not fit */
    int64_t context;                 /* the context chosen (when !fits: the minimum asked for) */
    int context_auto;
    int64_t max_position_embeddings;
    int64_t n_full_seqs;             /* full-length sequences the pool holds at once */
    uint64_t kv_bytes_per_token, kv_block_bytes;
    int64_t kv_blocks;               /* blocks in the pool (when !fits: blocks needed) */
    int64_t image_tokens, image_patches, image_room_tokens;
    int64_t video_pixels, video_tokens;  /* the largest video admitted (<= max_video_pixels) */
    uint64_t vision_bytes, lm_step_bytes;  /* the two users of the activations part */
    int n_graphs;
    int graph_batch[IRIS_PLAN_MAX_GRAPHS]; /* decode batch-size buckets captured */

    uint64_t part_bytes[IRIS_PART_COUNT];
    uint64_t dtype_bytes[IRIS_DT_COUNT];
    uint64_t device_bytes;           /* the one allocation: every carved part */
    uint64_t total_bytes;            /* device_bytes + graphs + context */

    int n_regions;
    iris_plan_region regions[IRIS_PLAN_MAX_REGIONS];
    int n_suggestions;               /* only when !fits */
    iris_plan_suggestion suggestions[IRIS_PLAN_MAX_SUGGESTIONS];
} iris_plan;

/* ---- the formulas (used by the plan and by the backend that carves it) ---- */
uint64_t iris_plan_align(uint64_t n_bytes);
/* --kv-cache-dtype: "bf16" or "fp8" -> IRIS_KV_*, anything else (NULL too) -> -1; and back. */
int iris_plan_kv_dtype_parse(const char *s);
/* --embeddings: "auto", "device" or "host" -> IRIS_EMBED_*; --lm-head-dtype: "auto", "stored" (or
 * "bf16") or "fp8" -> IRIS_LM_HEAD_*; anything else (NULL too) -> -1. */
int iris_plan_embed_parse(const char *s);
int iris_plan_lm_head_parse(const char *s);
/* --dense-weights: "auto", "on" or "off" -> IRIS_DENSE_*, anything else (NULL too) -> -1. */
int iris_plan_dense_parse(const char *s);
/* Whether --dense-weights `mode` (iris_dense_mode) keeps BF16 copies of m's FP8 decoder linears under
 * a budget of `budget` bytes: on yes, off no, auto when they are at most IRIS_PLAN_DENSE_AUTO_PERCENT
 * of it; never for a model without FP8 linears.  iris_plan_make also drops them on auto when the
 * plan would not fit with them; iris bench asks this alone (its arena is not planned). */
int iris_plan_dense_wanted(const iris_plan_model *m, int mode, uint64_t budget);
const char *iris_plan_kv_dtype_name(int kv_dtype);
/* K and V of every layer: 2 * num_hidden_layers * num_key_value_heads * head_dim * (2 bf16 | 1 fp8). */
uint64_t iris_plan_kv_bytes_per_token(const iris_text_config *t, int kv_dtype);
/* IRIS_KV_BLOCK_TOKENS * iris_plan_kv_bytes_per_token. */
uint64_t iris_plan_kv_block_bytes(const iris_text_config *t, int kv_dtype);
/* Merged tokens of the largest image smart_resize admits under max_pixels:
 * both sides are multiples of factor = patch_size * spatial_merge_size and
 * their product is <= max_pixels (true for max_pixels >= IRIS_PLAN_MIN_IMAGE_PIXELS),
 * so tokens <= floor(max_pixels / factor^2).  Patches = tokens * merge^2. */
int64_t iris_plan_image_tokens(const iris_vision_config *v, int64_t max_image_pixels);
/* Pad tokens of a video whose resized frames hold video_pixels pixels together: each temporal patch
 * of temporal_patch_size frames gives h*w / factor^2 tokens, so tokens <= video_pixels / (factor^2 *
 * temporal_patch_size). */
int64_t iris_plan_video_tokens(const iris_vision_config *v, int64_t video_pixels);
/* The video budget admitted in a context of `context` tokens: max_video_pixels lowered so that
 * iris_plan_video_tokens leaves IRIS_PLAN_VIDEO_ROOM_TOKENS, or a quarter of a context shorter than
 * four times that (at least IRIS_PLAN_MIN_VIDEO_PIXELS). */
int64_t iris_plan_video_pixels(const iris_vision_config *v, int64_t max_video_pixels, int64_t context);
/* The decode batch-size buckets captured as graphs: 1, 2, 4, 8, then every
 * multiple of 8 up to max_num_seqs, and max_num_seqs itself.  Returns the count. */
int iris_plan_graph_buckets(int max_num_seqs, int out[IRIS_PLAN_MAX_GRAPHS]);
/* The batch size a decode step of n sequences runs as (the runner pads it): the smallest of the
 * n_buckets sizes that holds n, or n itself past the largest. */
int iris_plan_graph_pick(const int *buckets, int n_buckets, int n);

/* 1 when m's stored lm_head can be quantized at load (BF16 or F32). */
int iris_plan_lm_head_quantizable(const iris_plan_model *m);
/* The weights on the card with the table on the host (embed_host) and the lm_head in FP8
 * (lm_head_fp8); dtb (may be NULL) receives them by dtype. */
uint64_t iris_plan_placed_weights(const iris_plan_model *m, int embed_host, int lm_head_fp8, uint64_t *dtb);

/* ---- model, settings, budget ---- */
/* Weights summary from the parsed headers.  `label` names the model in messages. */
int iris_plan_model_init(const iris_config *cfg, const iris_st *st, const char *label, iris_plan_model *m,
                         iris_err *err);
/* config.json + the safetensors headers of directory `dir` (nothing else is read). */
int iris_plan_model_load(const char *dir, const char *label, iris_plan_model *m, iris_err *err);
void iris_plan_settings_default(iris_plan_settings *s);

typedef struct iris_plan_budget_opts {
    uint64_t gpu_memory_limit;      /* bytes, 0: unset */
    double gpu_memory_utilization;  /* (0, 1], 0: unset */
    uint64_t gpu_memory_margin;     /* bytes kept free in the default mode */
    int margin_set;                 /* 0: IRIS_PLAN_DEFAULT_MARGIN */
} iris_plan_budget_opts;

/* The budget from the options and the device's total and free memory (free
 * as it was before this process took anything).  `how` receives a short
 * description ("--gpu-memory-limit 7.00 GiB").  Fails when nothing is left. */
int iris_plan_budget(const iris_plan_budget_opts *o, uint64_t total_bytes, uint64_t free_bytes, uint64_t *budget,
                     char *how, size_t how_size, iris_err *err);

/* Plan `m` under the settings and the budget.  context_bytes is the measured
 * context (0: IRIS_PLAN_CONTEXT_ESTIMATE).  Returns 0 when it fits;
 * IRIS_ELIMIT when it does not (p is complete: every part, and the
 * suggestions; err holds a one-line summary, iris_plan_format the full
 * message); IRIS_EINVAL for a bad setting (p is not usable). */
int iris_plan_make(const iris_plan_model *m, const iris_plan_settings *s, uint64_t budget_bytes,
                   const char *budget_source, uint64_t context_bytes, iris_plan *p, iris_err *err);

const iris_plan_region *iris_plan_region_find(const iris_plan *p, const char *name);
const char *iris_plan_part_name(int part);   /* "weights", "kv cache", ... */

/* ---- output (planner_report.c); both results are malloc'd, the caller frees ---- */
/* The table when the plan fits; the one failure message (every part, the
 * budget, then the settings that would fit) when it does not. */
char *iris_plan_format(const iris_plan *p);
/* The plan as JSON text: exact bytes everywhere. */
char *iris_plan_json(const iris_plan *p);
/* "3.96 GiB" (>= 1 GiB, 2 decimals) or "112.0 MiB". */
const char *iris_plan_human(uint64_t n_bytes, char buf[32]);

/* "7GiB", "7G", "7000MiB", "7.5GiB", "1048576": K/M/G/T and KiB.. are powers
 * of 1024 (an "8 GB" card holds 8 GiB); kB/MB/GB/TB are powers of 1000. */
int iris_plan_parse_bytes(const char *s, uint64_t *out, iris_err *err);

#endif
