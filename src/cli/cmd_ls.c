/* cmd_ls.c: `iris ls`: the models in the Hugging Face cache, their size,
 * whether iris runs their architecture (src/hub/hub.h, iris_hub_list), and
 * with --vram whether they fit such a card (the memory planner,
 * src/engine/planner.h, on the safetensors headers: nothing is loaded). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "opts.h"
#include "hub/hub.h"
#include "hub/resolve.h"
#include "engine/planner.h"
#ifdef IRIS_CUDA
#include "backend/cuda/cuda_info.h"
#endif

/* Plans a model for the card; writes "yes, 30336-token context" or "no: ..." to buf. */
static int fits(const char *dir, uint64_t vram, uint64_t reserved, char *buf, size_t n, int64_t *ctx) {
    iris_err err = {0};
    iris_plan_model m;
    *ctx = 0;
    if (iris_plan_model_load(dir, dir, &m, &err)) {
        snprintf(buf, n, "? (%s)", err.msg);
        return -1;
    }
    iris_plan_settings s;
    iris_plan_settings_default(&s);
    iris_plan_budget_opts bo = {0};
    uint64_t budget;
    char how[128];
    iris_plan *p = calloc(1, sizeof *p);
    if (p && iris_plan_budget(&bo, vram, vram - reserved, &budget, how, sizeof how, &err)) {
        snprintf(buf, n, "no: %s", err.msg); /* nothing left of the card for iris */
        free(p);
        return 0;
    }
    if (!p || iris_plan_make(&m, &s, budget, how, 0, p, &err)) {
        snprintf(buf, n, "? (%s)", p ? err.msg : "out of memory");
        free(p);
        return -1;
    }
    int ok = p->fits;
    if (ok) {
        snprintf(buf, n, "yes, %lld-token context", (long long)p->context);
        *ctx = p->context;
    } else {
        snprintf(buf, n, "no: %s", p->why);
    }
    free(p);
    return ok;
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
    uint64_t vram = 0, reserved = 0;
    iris_opt own[] = {
        {"--json", 0, IRIS_OPT_FLAG, &as_json, NULL, "one JSON array instead of the table", 0, 0, NULL, NULL, 0},
        {"--vram", 0, IRIS_OPT_SIZE, &vram, "SIZE",
         "also plan each supported model for a card of SIZE (e.g. 8GiB) with\nthe default settings: does it fit, and "
         "the context it gets", 1, 0, NULL, NULL, 0},
        {"--reserved", 0, IRIS_OPT_SIZE, &reserved, "SIZE", "memory the desktop holds on that card (default 0)", 0, 0,
         NULL, NULL, 0},
        IRIS_OPT_TABLE_END,
    };
    iris_cli_spec sp = {
        .cmd = "ls",
        .usage = "[--json] [--vram SIZE [--reserved SIZE]]",
        .about = "Lists the models in the Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub,\n"
                 "else ~/.cache/huggingface/hub): repo id, size on disk, revisions, model_type\n"
                 "and whether iris supports it (qwen3_vl).  Run one with `iris run Org/Name`.",
        .footer = "On a machine with a GPU (CUDA build) the FITS column is planned for that GPU\n"
                  "as it is now, unless --vram is given.",
        .tables = {own},
    };
    int n_pos, st = iris_cli_parse(&sp, argc, argv, NULL, &n_pos);
    if (st >= 0) return st;
#ifdef IRIS_CUDA
    /* Without --vram: this machine's GPU, as it is now (what others hold counts as reserved). */
    if (!vram) {
        size_t gfree = 0, gtotal = 0;
        char why[512];
        if (!iris_cuda_usable(0, why, sizeof why) && why[0]) fprintf(stderr, "iris ls: warning: %s\n", why);
        if (iris_cuda_device_memory(0, &gfree, &gtotal) == 0 && gtotal > 0) {
            vram = gtotal;
            reserved = gtotal - gfree;
        }
    }
#endif
    if (reserved && reserved >= vram) {
        fprintf(stderr, "iris ls: --reserved needs a larger --vram\n");
        return 2;
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
            if (o && vram && v[i].supported && v[i].dir[0]) {
                char buf[512];
                int64_t ctx;
                int f = fits(v[i].dir, vram, reserved, buf, sizeof buf, &ctx);
                json_object_set_new(o, "fits", f < 0 ? json_null() : json_boolean(f));
                json_object_set_new(o, "fits_detail", json_string(buf));
                if (f > 0) json_object_set_new(o, "context", json_integer(ctx));
            }
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
    printf("%-44s %9s  %-12s %-16s %-18s%s\n", "MODEL", "SIZE", "REFS", "TYPE", "IRIS", vram ? "FITS" : "");
    for (int i = 0; i < n; i++) {
        char sz[32];
        const char *iris = v[i].supported ? "yes" : v[i].model_type[0] ? "no (architecture)"
                                                    : v[i].dir[0]     ? "no (no config.json)"
                                                                      : "no (no snapshot)";
        char fit[512] = "";
        int64_t ctx;
        if (vram && v[i].supported && v[i].dir[0]) fits(v[i].dir, vram, reserved, fit, sizeof fit, &ctx);
        printf("%-44s %9s  %-12s %-16s %-18s%s%s\n", v[i].repo, fmt_size(v[i].size_bytes, sz),
               v[i].refs[0] ? v[i].refs : "-", v[i].model_type[0] ? v[i].model_type : "-", iris, fit,
               v[i].incomplete ? " (interrupted pull: run iris pull again)" : "");
    }
    printf("\n%d model%s in %s\n", n, n == 1 ? "" : "s", cache);
    if (vram) {
        char a[32], b[32];
        printf("FITS: planned for a %s card with %s reserved and the default settings (iris plan MODEL --vram ... for the details)\n",
               iris_plan_human(vram, a), iris_plan_human(reserved, b));
    }
    free(v);
    return 0;
}
