/* cmd_inspect.c: `iris inspect MODEL`: the config summary, every tensor, totals
 * by dtype and by part, FP8 linears and warnings (src/tools/inspect.h).
 * Reads headers only; nothing is loaded. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "opts.h"
#include "tools/inspect.h"

int iris_cmd_inspect(int argc, char **argv) {
    int as_json = 0, summary = 0;
    iris_opt own[] = {
        {"--json", 0, IRIS_OPT_FLAG, &as_json, NULL, "the report as one JSON object", 0, 0, NULL, NULL, 0},
        {"--summary", 0, IRIS_OPT_FLAG, &summary, NULL, "leave out the per-tensor table", 0, 0, NULL, NULL, 0},
        IRIS_OPT_TABLE_END,
    };
    iris_cli_spec sp = {
        .cmd = "inspect",
        .usage = "MODEL [--json] [--summary]",
        .about = "Shows what iris sees in a checkpoint without loading it: the config summary\n"
                 "(config.json, generation_config.json, preprocessor_config.json), a table of\n"
                 "tensors (name, dtype, shape, bytes), totals by dtype and by part (vision,\n"
                 "language model, embeddings), the FP8 linears, and warnings where the tensors\n"
                 "do not match the config.\n\n"
                 "MODEL is a model directory, a repo id Org/Name[@revision] in the Hugging Face\n"
                 "cache, or a single .safetensors / model.safetensors.index.json file.",
        .max_pos = 1,
        .tables = {own},
    };
    const char *pos[1];
    int n_pos, st = iris_cli_parse(&sp, argc, argv, pos, &n_pos);
    if (st >= 0) return st;
    if (!n_pos) return iris_cli_usage_error("inspect", "give MODEL");
    const char *model = pos[0];
    int with_tensors = !summary;
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
