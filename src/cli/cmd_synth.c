/* cmd_synth.c: `iris synth --like 2B|4B|tiny --dtype bf16|fp8 DIR`: a
 * real-shape checkpoint with random weights for benchmarks (tools/synth.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "err.h"
#include "tools/synth.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: iris synth --like 2B|4B|tiny [--dtype bf16|fp8] DIR [options]\n"
            "       iris synth --like 2B|4B|tiny [--dtype bf16|fp8] --list\n\n"
            "Write a Qwen3-VL checkpoint with the real tensor names and shapes and random\n"
            "values (BF16 ~ N(0, 0.02), norms ~ 1; FP8 in Qwen's 128x128 block format),\n"
            "with config.json, generation_config.json and the preprocessor configs.\n"
            "For speed and memory benchmarks: the answers are noise.\n\n"
            "  --like SHAPE       2B, 4B, or tiny (3 layers, for tests)\n"
            "  --dtype DTYPE      bf16 (default) or fp8\n"
            "  --seed N           PRNG seed (default 0); the same seed writes the same bytes\n"
            "  --tokenizer PATH   copy this tokenizer.json (and tokenizer_config.json,\n"
            "                     chat_template.* found beside it) into DIR\n"
            "  --vocab-size N     override the vocabulary size (default 151936)\n"
            "  --threads N        generator threads (default: all cores)\n"
            "  --list             print the tensors (name, dtype, shape) and totals; write nothing\n");
}

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

static int parse_int(const char *opt, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) {
        fprintf(stderr, "iris synth: %s %s: expected an integer in [%lld, %lld]\n", opt, v, lo, hi);
        return 2;
    }
    *out = x;
    return 0;
}

int iris_cmd_synth(int argc, char **argv) {
    iris_synth_opts o = {0};
    const char *dir = NULL;
    int list = 0;
    long long v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--list")) {
            list = 1;
            continue;
        }
        if (a[0] == '-' && a[1]) {
            if (i + 1 >= argc) {
                fprintf(stderr, "iris synth: %s needs a value\n\n", a);
                usage(stderr);
                return 2;
            }
            const char *val = argv[++i];
            if (!strcmp(a, "--like")) {
                o.like = val;
            } else if (!strcmp(a, "--dtype")) {
                if (!strcasecmp(val, "fp8")) o.fp8 = 1;
                else if (!strcasecmp(val, "bf16")) o.fp8 = 0;
                else {
                    fprintf(stderr, "iris synth: --dtype %s: use bf16 or fp8\n", val);
                    return 2;
                }
            } else if (!strcmp(a, "--seed")) {
                if (parse_int(a, val, 0, 0x7fffffffffffffffLL, &v)) return 2;
                o.seed = (uint64_t)v;
            } else if (!strcmp(a, "--tokenizer")) {
                o.tokenizer = val;
            } else if (!strcmp(a, "--vocab-size")) {
                if (parse_int(a, val, 1, 1 << 24, &v)) return 2;
                o.vocab_size = (int)v;
            } else if (!strcmp(a, "--threads")) {
                if (parse_int(a, val, 1, 64, &v)) return 2;
                o.n_threads = (int)v;
            } else {
                fprintf(stderr, "iris synth: unknown option %s\n\n", a);
                usage(stderr);
                return 2;
            }
            continue;
        }
        if (dir) {
            fprintf(stderr, "iris synth: one DIR, got a second argument '%s'\n", a);
            return 2;
        }
        dir = a;
    }
    if (!o.like || (!dir && !list)) {
        usage(stderr);
        return 2;
    }
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
