/* engine_flags.c: the engine's flags, declared once (engine_flags.h). */
#include "engine_flags.h"

#include <stdlib.h>
#include <string.h>

#define ROW(n, k, d, a, h, l, u, w, s) \
    (iris_opt) { n, 0, k, d, a, h, l, u, w, s, 0 }

iris_opt *iris_cli_engine_flags(iris_cli_engine *ce, unsigned which) {
    iris_opt *t = ce->table;
    int n = 0;
    t[n++] = (iris_opt)IRIS_OPT_HEADING("the engine");
    if (which & IRIS_CLI_E_DEVICE)
        t[n++] = ROW("--device", IRIS_OPT_CHOICE, &ce->device, "cpu|cuda|auto",
                     "where to run (auto: cuda when this build has it and there is a GPU)", 0, 0, NULL,
                     &ce->seen[CE_DEVICE]);
    if (which & IRIS_CLI_E_MEMORY) {
        t[n++] = ROW("--gpu-memory-limit", IRIS_OPT_SIZE, &ce->gpu_memory_limit, "SIZE",
                     "CUDA: a hard cap on the GPU memory iris takes", 1, 0, NULL, &ce->seen[CE_LIMIT]);
        t[n++] = ROW("--gpu-memory-utilization", IRIS_OPT_NUM, &ce->gpu_memory_utilization, "F",
                     "CUDA: else a fraction of the GPU's memory", 1e-9, 1, "a fraction in (0, 1]",
                     &ce->seen[CE_UTIL]);
        t[n++] = ROW("--gpu-memory-margin", IRIS_OPT_SIZE, &ce->gpu_memory_margin, "SIZE",
                     "CUDA: else the free memory less SIZE (default 512MiB)", 0, 0, NULL, &ce->seen[CE_MARGIN]);
    }
    if (which & IRIS_CLI_E_IMAGE)
        t[n++] = ROW("--max-image-pixels", IRIS_OPT_INT, &ce->max_image_pixels, "N",
                     "images are resized to at most N pixels; the GPU memory plan is\nsized for it (default 1048576)",
                     1, 17179869184.0, NULL, &ce->seen[CE_PIXELS]);
    if (which & IRIS_CLI_E_IMAGE)
        t[n++] = ROW("--text-only", IRIS_OPT_FLAG, &ce->text_only, NULL,
                     "leave the vision tower off: less memory, images are refused\n(vLLM's --language-model-only)",
                     0, 0, NULL, NULL);
    if (which & IRIS_CLI_E_KV) {
        t[n++] = ROW("--kv-cache-dtype", IRIS_OPT_CHOICE, &ce->kv_cache_dtype, "bf16|fp8",
                     "the KV cache's element type (default bf16; fp8 halves it)", 0, 0, NULL, &ce->seen[CE_KV]);
        t[n++] = ROW("--dense-weights", IRIS_OPT_CHOICE, &ce->dense_weights, "auto|on|off",
                     "FP8 models on a GPU: BF16 copies of the decoder linears for prefill\n(auto: when they take at "
                     "most 10% of the budget and the plan fits)",
                     0, 0, NULL, &ce->seen[CE_DENSE]);
        t[n++] = ROW("--embeddings", IRIS_OPT_CHOICE, &ce->embeddings, "auto|device|host",
                     "where the token-embedding table lives (host: each step uploads its\nrows; auto: host when the "
                     "context would stay under 8192 tokens)", 0, 0, NULL, &ce->seen[CE_EMBED]);
        t[n++] = ROW("--lm-head-dtype", IRIS_OPT_CHOICE, &ce->lm_head_dtype, "auto|stored|fp8",
                     "fp8: a BF16 lm_head quantized to block FP8 at load, half the bytes\n(auto: after host "
                     "embeddings, when the context still needs it)", 0, 0, NULL, &ce->seen[CE_LM_HEAD]);
    }
    if (which & IRIS_CLI_E_LEN)
        t[n++] = ROW("--max-model-len", IRIS_OPT_INT, &ce->max_model_len, "N",
                     "prompt + generated tokens (default: the largest that fits, up to\nthe model's)", 1, 1 << 24,
                     NULL, &ce->seen[CE_LEN]);
    if (which & IRIS_CLI_E_SCHED) {
        t[n++] = ROW("--max-num-seqs", IRIS_OPT_INT, &ce->max_num_seqs, "N", "sequences decoded together (default 64)",
                     1, 65536, NULL, &ce->seen[CE_SEQS]);
        t[n++] = ROW("--max-batch-tokens", IRIS_OPT_INT, &ce->max_batch_tokens, "N",
                     "tokens per engine step, decodes and prefill chunks (default: 2048\non the CPU; on a GPU the memory plan chooses 2048 to 8192)", 1, 1 << 24, NULL,
                     &ce->seen[CE_BATCH]);
    }
    if (which & IRIS_CLI_E_SERVER) {
        t[n++] = ROW("--max-waiting", IRIS_OPT_INT, &ce->max_waiting, "N", "queued requests before 503 (default 256)", 1,
                     1 << 20, NULL, &ce->seen[CE_WAITING]);
        t[n++] = ROW("--kv-cache-bytes", IRIS_OPT_SIZE, &ce->kv_cache_bytes, "SIZE",
                     "CPU: host memory for the KV cache (default 1GiB)", 1, 0, NULL, &ce->seen[CE_KV_BYTES]);
        t[n++] = ROW("--no-prefix-caching", IRIS_OPT_FLAG, &ce->no_prefix_caching, NULL,
                     "do not share KV blocks between requests", 0, 0, NULL, NULL);
        t[n++] = ROW("--download", IRIS_OPT_FLAG, &ce->download, NULL,
                     "accepted for older scripts: a missing repo is downloaded anyway\n(unless --offline)", 0, 0, NULL,
                     NULL);
    }
    if (which & IRIS_CLI_E_HUB)
        t[n++] = ROW("--offline", IRIS_OPT_FLAG, &ce->offline, NULL,
                     "never download: a repo id must be in the Hugging Face cache\n(as HF_HUB_OFFLINE=1)", 0, 0, NULL,
                     NULL);
    t[n] = (iris_opt)IRIS_OPT_TABLE_END;
    return t;
}

void iris_cli_engine_apply(const iris_cli_engine *ce, iris_engine_opts *eo) {
    const int *s = ce->seen;
    if (s[CE_DEVICE]) eo->device = ce->device;
    if (s[CE_LIMIT]) eo->gpu_memory_limit = ce->gpu_memory_limit;
    if (s[CE_UTIL]) eo->gpu_memory_utilization = ce->gpu_memory_utilization;
    if (s[CE_MARGIN]) eo->gpu_memory_margin = ce->gpu_memory_margin, eo->gpu_memory_margin_set = 1;
    if (s[CE_PIXELS]) eo->max_image_pixels = ce->max_image_pixels;
    if (ce->text_only) eo->text_only = 1;
    if (s[CE_KV]) eo->kv_cache_dtype = ce->kv_cache_dtype;
    if (s[CE_DENSE]) eo->dense_weights = ce->dense_weights;
    if (s[CE_EMBED]) eo->embeddings = ce->embeddings;
    if (s[CE_LM_HEAD]) eo->lm_head_dtype = ce->lm_head_dtype;
    if (s[CE_LEN]) eo->max_model_len = (int)ce->max_model_len;
    if (s[CE_SEQS]) eo->max_num_seqs = (int)ce->max_num_seqs;
    if (s[CE_BATCH]) eo->max_batch_tokens = (int)ce->max_batch_tokens;
    if (s[CE_WAITING]) eo->max_waiting = (int)ce->max_waiting;
    if (s[CE_KV_BYTES]) eo->kv_cache_bytes = (size_t)ce->kv_cache_bytes;
    if (ce->no_prefix_caching) eo->prefix_caching = 0;
    eo->allow_download = !ce->offline;
    if (ce->offline) setenv("HF_HUB_OFFLINE", "1", 1);
}

void iris_cli_engine_plan(const iris_cli_engine *ce, iris_plan_settings *st, iris_plan_budget_opts *bo) {
    const int *s = ce->seen;
    if (s[CE_LIMIT]) bo->gpu_memory_limit = ce->gpu_memory_limit;
    if (s[CE_UTIL]) bo->gpu_memory_utilization = ce->gpu_memory_utilization;
    if (s[CE_MARGIN]) bo->gpu_memory_margin = ce->gpu_memory_margin, bo->margin_set = 1;
    if (s[CE_PIXELS]) st->max_image_pixels = ce->max_image_pixels;
    if (ce->text_only) st->text_only = 1;
    if (s[CE_KV]) st->kv_cache_dtype = iris_plan_kv_dtype_parse(ce->kv_cache_dtype);
    if (s[CE_DENSE]) st->dense_weights = iris_plan_dense_parse(ce->dense_weights);
    if (s[CE_EMBED]) st->embeddings = iris_plan_embed_parse(ce->embeddings);
    if (s[CE_LM_HEAD]) st->lm_head_dtype = iris_plan_lm_head_parse(ce->lm_head_dtype);
    if (s[CE_LEN]) st->max_model_len = ce->max_model_len;
    if (s[CE_SEQS]) st->max_num_seqs = (int)ce->max_num_seqs;
    if (s[CE_BATCH]) st->max_batch_tokens = (int)ce->max_batch_tokens;
    if (ce->offline) setenv("HF_HUB_OFFLINE", "1", 1);
}
