/* cmd_pull.c: `iris pull Org/Name[@revision]`: download a model from the
 * Hugging Face Hub into the shared cache (src/hub/hub.h).  The snapshot
 * directory goes to stdout (for scripts), everything else to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "hub/hub.h"
#include "hub/resolve.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: iris pull Org/Name[@revision] [--jobs N] [--quiet]\n\n"
            "Downloads what iris needs of a Hugging Face Hub model (config, generation and\n"
            "preprocessor configs, tokenizer, chat template, *.safetensors and their index)\n"
            "into the Hugging Face cache that transformers and vLLM use, and prints the\n"
            "snapshot directory.  Files already there are not fetched again; an interrupted\n"
            "pull resumes where it stopped; LFS files are checked against their SHA-256.\n\n"
            "  --jobs N    files downloaded at once (default 8)\n"
            "  --quiet     no progress on stderr\n\n"
            "environment:\n"
            "  HF_ENDPOINT     the Hub (default https://huggingface.co)\n"
            "  HF_TOKEN        access token for gated or private models (else the file\n"
            "                  $HF_HOME/token or ~/.cache/huggingface/token)\n"
            "  HF_HUB_CACHE    the cache (else $HF_HOME/hub, else ~/.cache/huggingface/hub)\n"
            "  HF_HUB_OFFLINE  1: no network; succeed only if the model is in the cache\n");
}

int iris_cmd_pull(int argc, char **argv) {
    iris_hub_opts o;
    iris_hub_opts_default(&o);
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            o.progress = 0;
        } else if (!strcmp(argv[i], "--jobs") || !strcmp(argv[i], "-j")) {
            char *end = NULL;
            long n = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (!end || *end || n < 1 || n > 32) {
                fprintf(stderr, "iris pull: --jobs takes a number from 1 to 32\n");
                return 2;
            }
            o.n_parallel = (int)n;
            i++;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "iris pull: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (model) {
            fprintf(stderr, "iris pull: one model at a time ('%s' and '%s')\n", model, argv[i]);
            return 2;
        } else {
            model = argv[i];
        }
    }
    if (!model) {
        usage(stderr);
        return 2;
    }
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
