/* engine_flags.h: the engine's flags, declared once for every command that
 * opens the engine or plans for it (run, caption, ask, describe, logits,
 * serve, plan, bench): the device, the GPU memory budget, images, the KV
 * cache, the scheduler's sizes and the download rule.  A command asks for
 * the groups it has (IRIS_CLI_E_*), puts the returned table among its own
 * (opts.h), and after parsing fills iris_engine_opts (or the planner's
 * settings) with iris_cli_engine_apply / _plan: only the flags given are
 * written, over the defaults the command set.
 *
 * The download rule, the same for every command: a repo id missing from the
 * Hugging Face cache is downloaded after saying so, with progress on stderr,
 * unless --offline or HF_HUB_OFFLINE=1 (then the error names `iris pull`).
 * --offline sets HF_HUB_OFFLINE=1 for the process, so every hub call obeys. */
#ifndef IRIS_CLI_ENGINE_FLAGS_H
#define IRIS_CLI_ENGINE_FLAGS_H

#include <stdint.h>

#include "engine/planner.h"
#include "iris.h"
#include "opts.h"

enum {
    IRIS_CLI_E_DEVICE = 1 << 0,  /* --device */
    IRIS_CLI_E_MEMORY = 1 << 1,  /* --gpu-memory-limit, --gpu-memory-utilization, --gpu-memory-margin */
    IRIS_CLI_E_IMAGE = 1 << 2,   /* --max-image-pixels, --text-only */
    IRIS_CLI_E_KV = 1 << 3,      /* --kv-cache-dtype, --dense-weights, --embeddings, --lm-head-dtype */
    IRIS_CLI_E_LEN = 1 << 4,     /* --max-model-len */
    IRIS_CLI_E_SCHED = 1 << 5,   /* --max-num-seqs, --max-batch-tokens */
    IRIS_CLI_E_SERVER = 1 << 6,  /* --max-waiting, --kv-cache-bytes, --no-prefix-caching, --download */
    IRIS_CLI_E_HUB = 1 << 7,     /* --offline */
    IRIS_CLI_E_RUN = IRIS_CLI_E_DEVICE | IRIS_CLI_E_MEMORY | IRIS_CLI_E_IMAGE | IRIS_CLI_E_KV | IRIS_CLI_E_LEN |
                     IRIS_CLI_E_HUB,
};

enum { CE_DEVICE, CE_LIMIT, CE_UTIL, CE_MARGIN, CE_PIXELS, CE_KV, CE_DENSE, CE_EMBED, CE_LM_HEAD, CE_LEN, CE_SEQS,
       CE_BATCH, CE_WAITING, CE_KV_BYTES, CE_N };

typedef struct iris_cli_engine {
    const char *device, *kv_cache_dtype, *dense_weights, *embeddings, *lm_head_dtype;
    uint64_t gpu_memory_limit, gpu_memory_margin, kv_cache_bytes;
    double gpu_memory_utilization;
    long long max_image_pixels, max_model_len, max_num_seqs, max_batch_tokens, max_waiting;
    int no_prefix_caching, download, offline, text_only;
    int seen[CE_N];
    iris_opt table[26];
} iris_cli_engine;

/* The rows of the groups in `which`, under a heading; the table lives in ce. */
iris_opt *iris_cli_engine_flags(iris_cli_engine *ce, unsigned which);

/* The flags given, written over eo (allow_download: 1 unless --offline). */
void iris_cli_engine_apply(const iris_cli_engine *ce, iris_engine_opts *eo);

/* The same for `iris plan`: the planner's settings and budget options. */
void iris_cli_engine_plan(const iris_cli_engine *ce, iris_plan_settings *s, iris_plan_budget_opts *bo);

#endif
