/* cmd_quantize.c: `iris quantize IN_DIR OUT_DIR [--int4 ...]`: a BF16 Qwen3-VL checkpoint
 * to Qwen's block-FP8 format or 4-bit W4A16 (tools/quantize.h says exactly what changes). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "opts.h"
#include "err.h"
#include "tools/quantize.h"
#include "hub/resolve.h"

int iris_cmd_quantize(int argc, char **argv) {
    int int4 = 0, asym = 0, seen_gs = 0;
    long long gs = 128;
    iris_opt own[] = {
        {"--int4", 0, IRIS_OPT_FLAG, &int4, NULL,
         "write 4-bit W4A16 instead (compressed-tensors pack-quantized, as\nllm-compressor; round to nearest per group)", 0,
         0, NULL, NULL, 0},
        {"--group-size", 0, IRIS_OPT_INT, &gs, "N", "--int4: columns per scale, a multiple of 8 (default 128)", 8, 1 << 20,
         NULL, &seen_gs, 0},
        {"--asym", 0, IRIS_OPT_FLAG, &asym, NULL, "--int4: asymmetric, with a zero point per group", 0, 0, NULL, NULL, 0},
        IRIS_OPT_TABLE_END,
    };
    iris_cli_spec sp = {
        .cmd = "quantize",
        .usage = "IN_DIR OUT_DIR [--int4 [--group-size N] [--asym]]",
        .about = "Write Qwen's FP8 format from a BF16 checkpoint: the 7 linear layers of every\n"
                 "decoder layer become F8_E4M3 with an F32 weight_scale_inv per 128x128 block;\n"
                 "the vision tower, embeddings and norms are copied unchanged; config.json gains\n"
                 "quantization_config; tokenizer and processor files are copied.  With --int4\n"
                 "those linears become 4-bit (weight_packed, weight_scale per group of N columns,\n"
                 "weight_zero_point with --asym), readable by transformers and vLLM.\n\n"
                 "  IN_DIR    a BF16 model directory (or a repo id in the Hugging Face cache)\n"
                 "  OUT_DIR   where to write (created if missing)",
        .max_pos = 2,
        .tables = {own},
    };
    const char *pos[2];
    int n_pos, st = iris_cli_parse(&sp, argc, argv, pos, &n_pos);
    if (st >= 0) return st;
    if (n_pos != 2) return iris_cli_usage_error("quantize", "give IN_DIR and OUT_DIR");
    if (!int4 && (seen_gs || asym)) return iris_cli_usage_error("quantize", "--group-size and --asym go with --int4");
    if (gs % 8) return iris_cli_usage_error("quantize", "--group-size must be a multiple of 8 (32, 64, 128)");
    iris_err err = {0};
    char in_dir[4096];
    if (iris_model_resolve(pos[0], in_dir, sizeof in_dir, &err)) return iris_cli_fail(&err);
    iris_quantize_opts o = {.int4 = int4, .group_size = (int)gs, .asymmetric = asym};
    if (iris_quantize_dir_opts(in_dir, pos[1], &o, &err)) return iris_cli_fail(&err);
    fprintf(stderr, "iris quantize: wrote %s\n", pos[1]);
    return 0;
}
