/* cmd_pull.c: `iris pull Org/Name[@revision]`: download a model from the
 * Hugging Face Hub into the shared cache (src/hub/hub.h).  The snapshot
 * directory goes to stdout (for scripts), everything else to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "opts.h"
#include "hub/hub.h"
#include "hub/resolve.h"

int iris_cmd_pull(int argc, char **argv) {
    iris_hub_opts o;
    iris_hub_opts_default(&o);
    long long jobs = 8;
    int quiet = 0;
    iris_opt own[] = {
        {"--jobs", 'j', IRIS_OPT_INT, &jobs, "N", "files downloaded at once (default 8)", 1, 32, NULL, NULL, 0},
        {"--quiet", 'q', IRIS_OPT_FLAG, &quiet, NULL, "no progress on stderr", 0, 0, NULL, NULL, 0},
        IRIS_OPT_TABLE_END,
    };
    iris_cli_spec sp = {
        .cmd = "pull",
        .usage = "Org/Name[@revision] [options]",
        .about = "Downloads what iris needs of a Hugging Face Hub model (config, generation and\n"
                 "preprocessor configs, tokenizer, chat template, *.safetensors and their index)\n"
                 "into the Hugging Face cache that transformers and vLLM use, and prints the\n"
                 "snapshot directory.  Files already there are not fetched again; an interrupted\n"
                 "pull resumes where it stopped; LFS files are checked against their SHA-256.",
        .footer = "environment:\n"
                  "  HF_ENDPOINT     the Hub (default https://huggingface.co)\n"
                  "  HF_TOKEN        access token for gated or private models (else the file\n"
                  "                  $HF_HOME/token or ~/.cache/huggingface/token)\n"
                  "  HF_HUB_CACHE    the cache (else $HF_HOME/hub, else ~/.cache/huggingface/hub)\n"
                  "  HF_HUB_OFFLINE  1: no network; succeed only if the model is in the cache",
        .max_pos = 1,
        .tables = {own},
    };
    const char *pos[1];
    int n_pos, st = iris_cli_parse(&sp, argc, argv, pos, &n_pos);
    if (st >= 0) return st;
    if (!n_pos) return iris_cli_usage_error("pull", "give Org/Name");
    const char *model = pos[0];
    o.n_parallel = (int)jobs;
    if (quiet) o.progress = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    iris_hub_result res;
    iris_err err = {0};
    if (iris_hub_pull(model, &o, &res, &err)) return iris_cli_fail(&err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (o.progress) {
        if (!res.n_files)
            fprintf(stderr, "%s: in the cache (offline: nothing checked against the Hub)\n", model);
        else if (!res.n_downloaded)
            fprintf(stderr, "%s: already in the cache (commit %.12s, %d files), nothing downloaded\n", model,
                    res.commit, res.n_files);
        else {
            char b[32];
            double mb_s = s > 0 ? (double)res.bytes_downloaded / s / 1e6 : 0;
            snprintf(b, sizeof b, "%.1f MB", (double)res.bytes_downloaded / 1e6);
            fprintf(stderr, "%s: pulled commit %.12s: %d of %d files, %s in %.1f s (%.1f MB/s)\n", model, res.commit,
                    res.n_downloaded, res.n_files, b, s, mb_s);
        }
    }
    printf("%s\n", res.dir);
    return 0;
}
