/* cmd_quantize.c: `iris quantize IN_DIR OUT_DIR`: a BF16 Qwen3-VL checkpoint
 * to Qwen's block-FP8 format (tools/quantize.h says exactly what changes). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "opts.h"
#include "err.h"
#include "tools/quantize.h"
#include "hub/resolve.h"

int iris_cmd_quantize(int argc, char **argv) {
    iris_opt none[] = {IRIS_OPT_TABLE_END};
    iris_cli_spec sp = {
        .cmd = "quantize",
        .usage = "IN_DIR OUT_DIR",
        .about = "Write Qwen's FP8 format from a BF16 checkpoint: the 7 linear layers of every\n"
                 "decoder layer become F8_E4M3 with an F32 weight_scale_inv per 128x128 block;\n"
                 "the vision tower, embeddings and norms are copied unchanged; config.json gains\n"
                 "quantization_config; tokenizer and processor files are copied.\n\n"
                 "  IN_DIR    a BF16 model directory (or a repo id in the Hugging Face cache)\n"
                 "  OUT_DIR   where to write (created if missing)",
        .max_pos = 2,
        .tables = {none},
    };
    const char *pos[2];
    int n_pos, st = iris_cli_parse(&sp, argc, argv, pos, &n_pos);
    if (st >= 0) return st;
    if (n_pos != 2) return iris_cli_usage_error("quantize", "give IN_DIR and OUT_DIR");
    iris_err err = {0};
    char in_dir[4096];
    if (iris_model_resolve(pos[0], in_dir, sizeof in_dir, &err)) return iris_cli_fail(&err);
    if (iris_quantize_dir(in_dir, pos[1], &err)) return iris_cli_fail(&err);
    fprintf(stderr, "iris quantize: wrote %s\n", pos[1]);
    return 0;
}
