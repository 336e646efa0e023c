/* cmd_inspect.c: `iris inspect MODEL`: the config summary, every tensor, totals
 * by dtype and by part, FP8 linears and warnings (src/tools/inspect.h).
 * Reads headers only; nothing is loaded. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tools/inspect.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: iris inspect MODEL [--json] [--summary]\n\n"
            "Shows what iris sees in a checkpoint without loading it: the config summary\n"
            "(config.json, generation_config.json, preprocessor_config.json), a table of\n"
            "tensors (name, dtype, shape, bytes), totals by dtype and by part (vision,\n"
            "language model, embeddings), the FP8 linears, and warnings where the tensors\n"
            "do not match the config.\n\n"
            "MODEL is a model directory, a repo id Org/Name[@revision] in the Hugging Face\n"
            "cache, or a single .safetensors / model.safetensors.index.json file.\n\n"
            "  --json      the report as one JSON object\n"
            "  --summary   leave out the per-tensor table\n");
}

int iris_cmd_inspect(int argc, char **argv) {
    const char *model = NULL;
    int as_json = 0, with_tensors = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            as_json = 1;
        } else if (!strcmp(argv[i], "--summary")) {
            with_tensors = 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "iris inspect: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (model) {
            fprintf(stderr, "iris inspect: one MODEL only ('%s' and '%s')\n", model, argv[i]);
            return 2;
        } else {
            model = argv[i];
        }
    }
    if (!model) {
        usage(stderr);
        return 2;
    }
    iris_err err = {0};
    json_t *report = NULL;
    if (iris_inspect(model, &report, &err)) return iris_cli_fail(&err);
    if (as_json) {
        if (!with_tensors) json_object_del(report, "tensors");
        json_dumpf(report, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
        fputc('\n', stdout);
    } else {
        iris_inspect_print(stdout, report, with_tensors);
    }
    json_decref(report);
    return 0;
}
