/* cmd_plan.c: `iris plan MODEL`: the memory plan of a model on a card, from
 * config.json and the safetensors headers only (no tensor data is read, no
 * GPU is used), so a user learns what fits before downloading the weights or
 * starting a server.  The card is described by --vram and --reserved; the
 * budget follows the same rules as on a GPU (src/engine/planner.h).
 * Exit status: 0 fits, 1 does not fit or fails (one message on stderr; with
 * --plan-json the JSON is still printed), 2 bad usage. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/planner.h"
#include "err.h"
#include "hub/resolve.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: iris plan MODEL [options]\n\n"
            "Prints every byte MODEL would take on a GPU and the context that fits, from\n"
            "config.json and the safetensors headers alone (nothing is loaded, no GPU is used).\n"
            "MODEL is a directory or Org/Name[@revision] in the Hugging Face cache.\n\n"
            "the card:\n"
            "  --vram SIZE                  its memory (default 8GiB)\n"
            "  --reserved SIZE              held by others, e.g. the desktop (default 0)\n"
            "the budget, as on a GPU (first given wins):\n"
            "  --gpu-memory-limit SIZE      a hard cap\n"
            "  --gpu-memory-utilization F   a fraction of --vram\n"
            "  --gpu-memory-margin SIZE     else free memory minus this (default 512MiB)\n"
            "the settings:\n"
            "  --max-model-len N            context length (default: the largest that fits, >= 4096)\n"
            "  --max-num-seqs N             sequences decoded together (default 64)\n"
            "  --max-batch-tokens N         tokens per step, the prefill chunk (default 2048)\n"
            "  --max-image-pixels N         images are resized to at most N pixels (default 1048576)\n"
            "  --kv-cache-dtype bf16|fp8    (default bf16)\n"
            "  --dense-weights auto|on|off  BF16 copies of FP8 decoder linears (default auto: when they\n"
            "                               take at most 10%% of the budget and the plan still fits)\n"
            "  --plan-json                  print the plan as JSON (exact bytes)\n\n"
            "SIZE is bytes or a number with a unit: 8GiB, 8G, 7000MiB (K/M/G/T and KiB.. are\n"
            "powers of 1024; kB/MB/GB/TB powers of 1000).  The CUDA context is an estimate here\n"
            "(336 MiB); on a GPU it is measured.\n");
}

static int parse_int(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "iris plan: %s '%s': give a whole number from %lld to %lld\n", opt, v ? v : "", (long long)lo,
                (long long)hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_size(const char *opt, const char *v, uint64_t *out) {
    iris_err err = {0};
    if (iris_plan_parse_bytes(v, out, &err)) {
        fprintf(stderr, "iris plan: %s %s\n", opt, err.msg);
        return -1;
    }
    return 0;
}

int iris_cmd_plan(int argc, char **argv) {
    const char *model = NULL;
    int as_json = 0;
    uint64_t vram = 8ull * IRIS_GIB, reserved = 0;
    int card_given = 0;
    iris_plan_budget_opts bo = {0};
    iris_plan_settings s;
    iris_plan_settings_default(&s);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        int bad = 0, takes = 1;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--plan-json")) {
            as_json = 1, takes = 0;
        } else if (!strcmp(a, "--vram")) {
            bad = parse_size(a, v, &vram), card_given = 1;
        } else if (!strcmp(a, "--reserved")) {
            card_given = 1;
            bad = v && !strcmp(v, "0") ? (reserved = 0, 0) : parse_size(a, v, &reserved);
        } else if (!strcmp(a, "--gpu-memory-limit")) {
            bad = parse_size(a, v, &bo.gpu_memory_limit);
        } else if (!strcmp(a, "--gpu-memory-margin")) {
            bo.margin_set = 1;
            bad = v && !strcmp(v, "0") ? (bo.gpu_memory_margin = 0, 0) : parse_size(a, v, &bo.gpu_memory_margin);
        } else if (!strcmp(a, "--gpu-memory-utilization")) {
            char *end;
            errno = 0;
            bo.gpu_memory_utilization = v ? strtod(v, &end) : 0;
            if (!v || !*v || *end || errno || !(bo.gpu_memory_utilization > 0 && bo.gpu_memory_utilization <= 1)) {
                fprintf(stderr, "iris plan: --gpu-memory-utilization '%s': give a fraction in (0, 1], e.g. 0.9\n",
                        v ? v : "");
                bad = -1;
            }
        } else if (!strcmp(a, "--max-model-len")) {
            if (!(bad = parse_int(a, v, 1, 1ll << 30, &n))) s.max_model_len = n;
        } else if (!strcmp(a, "--max-num-seqs")) {
            if (!(bad = parse_int(a, v, 1, 4096, &n))) s.max_num_seqs = (int)n;
        } else if (!strcmp(a, "--max-batch-tokens")) {
            if (!(bad = parse_int(a, v, 1, 1 << 20, &n))) s.max_batch_tokens = (int)n;
        } else if (!strcmp(a, "--max-image-pixels")) {
            if (!(bad = parse_int(a, v, 1, 1ll << 34, &n))) s.max_image_pixels = n;
        } else if (!strcmp(a, "--dense-weights")) {
            int dm = iris_plan_dense_parse(v);
            if (dm >= 0) s.dense_weights = dm;
            else {
                fprintf(stderr, "iris plan: --dense-weights '%s': give auto, on or off\n", v ? v : "");
                bad = -1;
            }
        } else if (!strcmp(a, "--kv-cache-dtype")) {
            int kd = iris_plan_kv_dtype_parse(v);
            if (kd >= 0) s.kv_cache_dtype = kd;
            else {
                fprintf(stderr, "iris plan: --kv-cache-dtype '%s': give bf16 or fp8\n", v ? v : "");
                bad = -1;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "iris plan: unknown option '%s'\n", a);
            bad = -1;
        } else if (!model) {
            model = a, takes = 0;
        } else {
            fprintf(stderr, "iris plan: one MODEL only ('%s' and '%s')\n", model, a);
            bad = -1;
        }
        if (bad) {
            usage(stderr);
            return 2;
        }
        i += takes;
    }
    if (!model) {
        fprintf(stderr, "iris plan: give MODEL (a directory or Org/Name in the Hugging Face cache)\n");
        usage(stderr);
        return 2;
    }

    iris_err err = {0};
    char dir[4096], how[200], source[256], a[32], b[32];
    if (reserved >= vram) {
        fprintf(stderr, "iris: --reserved %s leaves nothing of --vram %s\n", iris_plan_human(reserved, a),
                iris_plan_human(vram, b));
        return 1;
    }
    uint64_t budget;
    if (iris_model_resolve(model, dir, sizeof dir, &err)) return iris_cli_fail(&err);
    if (iris_plan_budget(&bo, vram, vram - reserved, &budget, how, sizeof how, &err)) return iris_cli_fail(&err);
    /* The card matters to the budget only in the free-memory mode, or when a
     * cap was limited by it. */
    if (card_given || (!bo.gpu_memory_limit && bo.gpu_memory_utilization == 0))
        snprintf(source, sizeof source, "%s card, %s reserved; %s", iris_plan_human(vram, a),
                 iris_plan_human(reserved, b), how);
    else
        snprintf(source, sizeof source, "%s", how);

    iris_plan_model m;
    if (iris_plan_model_load(dir, model, &m, &err)) return iris_cli_fail(&err);
    iris_plan *p = malloc(sizeof *p);
    if (!p) return iris_cli_fail(&(iris_err){.code = IRIS_ENOMEM, .msg = "out of memory"});
    int rc = iris_plan_make(&m, &s, budget, source, 0, p, &err);
    if (rc && rc != IRIS_ELIMIT) {
        free(p);
        return iris_cli_fail(&err);
    }
    char *text = iris_plan_format(p);
    if (as_json) {
        char *js = iris_plan_json(p);
        if (js) puts(js);
        free(js);
    }
    if (rc == IRIS_ELIMIT) fprintf(stderr, "iris: %s", text ? text : err.msg);
    else if (!as_json && text) fputs(text, stdout);
    free(text);
    free(p);
    return rc ? 1 : 0;
}
