/* cmd_synth.c: `iris synth --like 2B|4B|8B|tiny --dtype bf16|fp8|int4 DIR`: a
 * real-shape checkpoint with random weights for benchmarks (tools/synth.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "opts.h"
#include "err.h"
#include "tools/synth.h"

static void print_tensor(void *ctx, const char *name, iris_dtype dt, int n_dims, const int64_t *shape) {
    uint64_t *tot = ctx, ne = 1;
    printf("%s %s [", name, iris_dtype_name(dt));
    for (int d = 0; d < n_dims; d++) {
        printf(d ? ", %lld" : "%lld", (long long)shape[d]);
        ne *= (uint64_t)shape[d];
    }
    printf("]\n");
    tot[0]++;
    tot[1] += ne;
    tot[2] += ne * iris_dtype_size(dt);
}

int iris_cmd_synth(int argc, char **argv) {
    iris_synth_opts o = {0};
    const char *dtype = "bf16";
    long long seed = 0, vocab = 0, threads = 0;
    int list = 0, seen_vocab = 0, seen_threads = 0;
    iris_opt own[] = {
        {"--like", 0, IRIS_OPT_CHOICE, &o.like, "2B|4B|8B|tiny|qwen3-0.6b|qwen3-tiny",
         "the shape: Qwen3-VL 2B, 4B, 8B, or tiny (3 layers, for tests); a plain\nQwen3 text model: qwen3-0.6b, "
         "qwen3-tiny", 0, 0, NULL, NULL, 0},
        {"--dtype", 0, IRIS_OPT_CHOICE, &dtype, "bf16|fp8|int4", "bf16 (default), fp8 or int4 (W4A16, groups of 128)", 0, 0, NULL, NULL, 0},
        {"--seed", 0, IRIS_OPT_INT, &seed, "N", "PRNG seed (default 0); the same seed writes the same bytes", 0, 9.2e18,
         NULL, NULL, 0},
        {"--tokenizer", 0, IRIS_OPT_STR, &o.tokenizer, "PATH",
         "copy this tokenizer.json (and tokenizer_config.json, chat_template.*\nfound beside it) into DIR", 0, 0, NULL,
         NULL, 0},
        {"--vocab-size", 0, IRIS_OPT_INT, &vocab, "N", "override the vocabulary size (default 151936)", 1, 1 << 24, NULL,
         &seen_vocab, 0},
        {"--threads", 0, IRIS_OPT_INT, &threads, "N", "generator threads (default: all cores)", 1, 64, NULL,
         &seen_threads, 0},
        {"--list", 0, IRIS_OPT_FLAG, &list, NULL, "print the tensors (name, dtype, shape) and totals; write nothing", 0, 0,
         NULL, NULL, 0},
        IRIS_OPT_TABLE_END,
    };
    iris_cli_spec sp = {
        .cmd = "synth",
        .usage = "--like SHAPE [--dtype bf16|fp8|int4] DIR [options]\n--like SHAPE [--dtype bf16|fp8|int4] --list",
        .about = "Write a Qwen3-VL checkpoint with the real tensor names and shapes and random\n"
                 "values (BF16 ~ N(0, 0.02), norms ~ 1; FP8 in Qwen's 128x128 block format;\n"
                 "int4 as compressed-tensors' pack-quantized W4A16),\n"
                 "with config.json, generation_config.json and the preprocessor configs.\n"
                 "For speed and memory benchmarks: the answers are noise.",
        .max_pos = 1,
        .tables = {own},
    };
    const char *pos[1];
    int n_pos, st = iris_cli_parse(&sp, argc, argv, pos, &n_pos);
    if (st >= 0) return st;
    const char *dir = n_pos ? pos[0] : NULL;
    if (!o.like) return iris_cli_usage_error("synth", "give --like 2B|4B|8B|tiny|qwen3-0.6b|qwen3-tiny");
    if (!dir && !list) return iris_cli_usage_error("synth", "give DIR (or --list)");
    o.fp8 = !strcmp(dtype, "fp8");
    o.int4 = !strcmp(dtype, "int4");
    o.seed = (uint64_t)seed;
    if (seen_vocab) o.vocab_size = (int)vocab;
    if (seen_threads) o.n_threads = (int)threads;
    iris_err err = {0};
    if (list) {
        uint64_t tot[3] = {0};
        if (iris_synth_list(&o, print_tensor, tot, &err)) return iris_cli_fail(&err);
        printf("# %llu tensors, %llu parameters, %llu bytes of tensor data\n", (unsigned long long)tot[0],
               (unsigned long long)tot[1], (unsigned long long)tot[2]);
        return 0;
    }
    if (iris_synth_write(dir, &o, &err)) return iris_cli_fail(&err);
    fprintf(stderr, "iris synth: wrote %s\n", dir);
    return 0;
}
