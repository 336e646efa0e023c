/* cmd_ls.c: `iris ls`: the models in the Hugging Face cache, their size, and
 * whether iris runs their architecture (src/model/hub.h, iris_hub_list). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/hub.h"
#include "model/resolve.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: iris ls [--json]\n\n"
            "Lists the models in the Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub,\n"
            "else ~/.cache/huggingface/hub): repo id, size on disk, revisions, model_type\n"
            "and whether iris supports it (qwen3_vl).  Run one with `iris run Org/Name`.\n\n"
            "  --json   one JSON array instead of the table\n");
}

static const char *fmt_size(uint64_t n, char buf[32]) {
    const char *u[] = {"B", "kB", "MB", "GB", "TB"};
    double v = (double)n;
    int i = 0;
    while (v >= 1000 && i < 4) v /= 1000, i++;
    if (i == 0) snprintf(buf, 32, "%llu B", (unsigned long long)n);
    else snprintf(buf, 32, "%.1f %s", v, u[i]);
    return buf;
}

int iris_cmd_ls(int argc, char **argv) {
    int as_json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            as_json = 1;
        } else {
            fprintf(stderr, "iris ls: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    iris_err err = {0};
    char cache[4096];
    if (iris_hub_cache_dir(cache, sizeof cache, &err)) return iris_cli_fail(&err);
    iris_hub_model *v;
    int n;
    if (iris_hub_list(&v, &n, &err)) return iris_cli_fail(&err);
    if (as_json) {
        json_t *arr = json_array();
        for (int i = 0; i < n; i++) {
            json_t *o = json_pack("{s:s, s:I, s:s, s:s, s:s, s:b, s:i, s:b}", "repo", v[i].repo, "size_bytes",
                                  (json_int_t)v[i].size_bytes, "refs", v[i].refs, "dir", v[i].dir, "model_type",
                                  v[i].model_type, "supported", v[i].supported, "snapshots", v[i].n_snapshots,
                                  "incomplete", v[i].incomplete);
            if (o) json_array_append_new(arr, o);
        }
        char *s = json_dumps(arr, JSON_INDENT(2));
        if (s) puts(s);
        free(s);
        json_decref(arr);
        free(v);
        return 0;
    }
    if (!n) {
        fprintf(stderr, "no models in %s; download one with: iris pull Qwen/Qwen3-VL-2B-Instruct-FP8\n", cache);
        free(v);
        return 0;
    }
    printf("%-44s %9s  %-12s %-16s %s\n", "MODEL", "SIZE", "REFS", "TYPE", "IRIS");
    for (int i = 0; i < n; i++) {
        char sz[32];
        const char *iris = v[i].supported ? "yes" : v[i].model_type[0] ? "no (architecture)"
                                                    : v[i].dir[0]     ? "no (no config.json)"
                                                                      : "no (no snapshot)";
        printf("%-44s %9s  %-12s %-16s %s%s\n", v[i].repo, fmt_size(v[i].size_bytes, sz),
               v[i].refs[0] ? v[i].refs : "-", v[i].model_type[0] ? v[i].model_type : "-", iris,
               v[i].incomplete ? " (interrupted pull: run iris pull again)" : "");
    }
    printf("\n%d model%s in %s\n", n, n == 1 ? "" : "s", cache);
    free(v);
    return 0;
}
