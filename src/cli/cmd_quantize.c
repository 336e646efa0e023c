/* cmd_quantize.c: `iris quantize IN_DIR OUT_DIR`: a BF16 Qwen3-VL checkpoint
 * to Qwen's block-FP8 format (tools/quantize.h says exactly what changes). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "err.h"
#include "tools/quantize.h"
#include "hub/resolve.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: iris quantize IN_DIR OUT_DIR\n\n"
            "Write Qwen's FP8 format from a BF16 checkpoint: the 7 linear layers of every\n"
            "decoder layer become F8_E4M3 with an F32 weight_scale_inv per 128x128 block;\n"
            "the vision tower, embeddings and norms are copied unchanged; config.json gains\n"
            "quantization_config; tokenizer and processor files are copied.\n\n"
            "  IN_DIR    a BF16 model directory (or a repo id in the Hugging Face cache)\n"
            "  OUT_DIR   where to write (created if missing)\n");
}

int iris_cmd_quantize(int argc, char **argv) {
    const char *pos[2];
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "iris quantize: unknown option %s\n\n", argv[i]);
            usage(stderr);
            return 2;
        }
        if (n_pos == 2) {
            fprintf(stderr, "iris quantize: one IN_DIR and one OUT_DIR, got a third argument '%s'\n\n", argv[i]);
            usage(stderr);
            return 2;
        }
        pos[n_pos++] = argv[i];
    }
    if (n_pos != 2) {
        usage(stderr);
        return 2;
    }
    iris_err err = {0};
    char in_dir[4096];
    if (iris_model_resolve(pos[0], in_dir, sizeof in_dir, &err)) return iris_cli_fail(&err);
    if (iris_quantize_dir(in_dir, pos[1], &err)) return iris_cli_fail(&err);
    fprintf(stderr, "iris quantize: wrote %s\n", pos[1]);
    return 0;
}
