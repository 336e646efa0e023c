/* cmd_plan.c: `iris plan MODEL`: the memory plan of a model on a card, from
 * config.json and the safetensors headers only (no tensor data is read, no
 * GPU is used), so a user learns what fits before downloading the weights or
 * starting a server.  A repo id not in the cache is planned from the Hub's
 * config.json and headers (a few KB by range requests), or offline from the
 * built-in table of the published checkpoints; stderr says which.  The card is described by --vram and --reserved; the
 * budget follows the same rules as on a GPU (src/engine/planner.h).
 * Exit status: 0 fits, 1 does not fit or fails (one message on stderr; with
 * --plan-json the JSON is still printed), 2 bad usage. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "engine/planner.h"
#include "engine_flags.h"
#include "opts.h"
#include "err.h"
#include "hub/hub.h"
#include "hub/resolve.h"
#include "tools/synth.h"

static int env_true(const char *name) {
    const char *v = getenv(name);
    return v && (!strcmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "yes") || !strcasecmp(v, "true"));
}

/* The temporary directory of find_shapes, and what is in it. */
static void remove_tmp(const char *tmp) {
    if (!tmp[0]) return;
    DIR *d = opendir(tmp);
    struct dirent *de;
    char path[4400];
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.') snprintf(path, sizeof path, "%s/%s", tmp, de->d_name), unlink(path);
    if (d) closedir(d);
    rmdir(tmp);
}

/* MODEL as a directory the planner reads (config.json + safetensors headers), and where its shapes
 * come from, said on stderr: a directory or the Hugging Face cache as they are; else, for a repo
 * id, the Hub (config.json and the headers alone, by range requests, into a temporary directory
 * `tmp`), else (offline, or the Hub out of reach) the built-in table of the published Qwen3-VL
 * checkpoints (tools/synth.h). */
static int find_shapes(const char *model, char *dir, size_t n, char tmp[64], iris_err *err) {
    iris_err re = {0};
    int rc = iris_model_resolve(model, dir, n, &re);
    char repo[256], rev[256];
    if (rc != IRIS_ENOTFOUND || iris_hub_repo_parse(model, repo, sizeof repo, rev, sizeof rev, NULL)) {
        if (rc) *err = re;
        else if (strcmp(dir, model)) fprintf(stderr, "iris plan: %s: from the Hugging Face cache (%s)\n", model, dir);
        return rc;
    }
    snprintf(tmp, 64, "/tmp/iris-plan-XXXXXX");
    if (!mkdtemp(tmp)) {
        tmp[0] = 0;
        return iris_err_set(err, IRIS_EIO, "cannot create a temporary directory: %s", strerror(errno));
    }
    snprintf(dir, n, "%s", tmp);
    iris_synth_opts so;
    int known = iris_synth_known_repo(model, &so), offline = env_true("HF_HUB_OFFLINE");
    iris_err he = {0};
    uint64_t got = 0;
    if (!offline && (rc = iris_hub_fetch_headers(model, tmp, &got, &he)) == 0) {
        fprintf(stderr, "iris plan: %s: not in the cache; from the Hub: config.json and the safetensors headers "
                        "(%.1f kB read, nothing downloaded)\n", model, (double)got / 1e3);
        return 0;
    }
    if (known && !(rc = iris_synth_write_headers(tmp, &so, err))) {
        fprintf(stderr, "iris plan: %s: not in the cache; from iris's built-in table of the published Qwen3-VL "
                        "checkpoints (%s%s%s)\n", model, offline ? "offline" : "the Hub could not be asked: ",
                offline ? "" : he.msg, "");
        return 0;
    }
    remove_tmp(tmp);
    tmp[0] = 0;
    if (!known && !offline) {
        *err = he;
        return rc;
    }
    if (known) return rc;
    char list[1024] = "";
    for (int i = 0; iris_synth_known_name(i); i += 2)   /* the table pairs each with its -FP8 twin */
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s[-FP8]", i ? ", " : "", iris_synth_known_name(i));
    return iris_err_set(err, IRIS_ENOTFOUND,
                        "%s is not in the Hugging Face cache and HF_HUB_OFFLINE is set: offline, iris knows the shapes "
                        "of %s; go online (iris plan reads only config.json and the safetensors headers) or iris pull "
                        "%s", model, list, model);
}

int iris_cmd_plan(int argc, char **argv) {
    const char *model = NULL;
    int as_json = 0, vram_given = 0, reserved_given = 0, video_given = 0;
    long long max_video_pixels = 0;
    uint64_t vram = 8ull * IRIS_GIB, reserved = 0;
    iris_cli_engine ce;
    memset(&ce, 0, sizeof ce);
    iris_opt card[] = {
        IRIS_OPT_HEADING("the card"),
        {"--vram", 0, IRIS_OPT_SIZE, &vram, "SIZE", "its memory (default 8GiB)", 1, 0, NULL, &vram_given, 0},
        {"--reserved", 0, IRIS_OPT_SIZE, &reserved, "SIZE", "held by others, e.g. the desktop (default 0)", 0, 0, NULL,
         &reserved_given, 0},
        {"--max-video-pixels", 0, IRIS_OPT_INT, &max_video_pixels, "N",
         "a video's sampled frames together after resizing (default 25,165,824,\nQwen3-VL's; lowered to what the "
         "context admits)", 4096, 1e12, NULL, &video_given, 0},
        {"--plan-json", 0, IRIS_OPT_FLAG, &as_json, NULL, "print the plan as JSON (exact bytes)", 0, 0, NULL, NULL, 0},
        IRIS_OPT_TABLE_END,
    };
    iris_cli_spec sp = {
        .cmd = "plan",
        .usage = "MODEL [options]",
        .about = "Prints every byte MODEL would take on a GPU and the context that fits, from\n"
                 "config.json and the safetensors headers alone (nothing is loaded, no GPU is used).\n"
                 "MODEL is a directory or Org/Name[@revision]: from the Hugging Face cache when it is\n"
                 "there, else from the Hub (config.json and the safetensors headers, a few KB), else\n"
                 "(offline) from the shapes of the published Qwen3-VL checkpoints built into iris.",
        .footer = "The budget, as on a GPU: --gpu-memory-limit, else --gpu-memory-utilization x --vram,\n"
                  "else the free memory (--vram less --reserved) less --gpu-memory-margin.\n"
                  "SIZE is bytes or a number with a unit: 8GiB, 8G, 7000MiB (K/M/G/T and KiB.. are\n"
                  "powers of 1024; kB/MB/GB/TB powers of 1000).  The CUDA context is an estimate here\n"
                  "(336 MiB); on a GPU it is measured.",
        .max_pos = 1,
        .tables = {card, iris_cli_engine_flags(&ce, IRIS_CLI_E_MEMORY | IRIS_CLI_E_IMAGE | IRIS_CLI_E_KV |
                                                        IRIS_CLI_E_LEN | IRIS_CLI_E_SCHED | IRIS_CLI_E_HUB)},
    };
    const char *pos[1];
    int n_pos, st = iris_cli_parse(&sp, argc, argv, pos, &n_pos);
    if (st >= 0) return st;
    if (!n_pos) return iris_cli_usage_error("plan", "give MODEL (a directory or Org/Name)");
    model = pos[0];
    int card_given = vram_given || reserved_given;
    iris_plan_budget_opts bo = {0};
    iris_plan_settings s;
    iris_plan_settings_default(&s);
    s.max_batch_tokens = 0;  /* as the engine on a GPU: the plan chooses unless given */
    iris_cli_engine_plan(&ce, &s, &bo);
    if (video_given) s.max_video_pixels = max_video_pixels;

    iris_err err = {0};
    char dir[4096], how[200], source[256], a[32], b[32];
    if (reserved >= vram) {
        fprintf(stderr, "iris: --reserved %s leaves nothing of --vram %s\n", iris_plan_human(reserved, a),
                iris_plan_human(vram, b));
        return 1;
    }
    uint64_t budget;
    char tmp[64] = "";
    if (find_shapes(model, dir, sizeof dir, tmp, &err)) return iris_cli_fail(&err);
    if (iris_plan_budget(&bo, vram, vram - reserved, &budget, how, sizeof how, &err)) {
        remove_tmp(tmp);
        return iris_cli_fail(&err);
    }
    /* The card matters to the budget only in the free-memory mode, or when a
     * cap was limited by it. */
    if (card_given || (!bo.gpu_memory_limit && bo.gpu_memory_utilization == 0))
        snprintf(source, sizeof source, "%s card, %s reserved; %s", iris_plan_human(vram, a),
                 iris_plan_human(reserved, b), how);
    else
        snprintf(source, sizeof source, "%s", how);

    iris_plan_model m;
    int lrc = iris_plan_model_load(dir, model, &m, &err);
    remove_tmp(tmp);
    if (lrc) return iris_cli_fail(&err);
    iris_plan *p = malloc(sizeof *p);
    if (!p) return iris_cli_fail(&(iris_err){.code = IRIS_ENOMEM, .msg = "out of memory"});
    int rc = iris_plan_make(&m, &s, budget, source, 0, p, &err);
    if (rc && rc != IRIS_ELIMIT) {
        free(p);
        return iris_cli_fail(&err);
    }
    char *text = iris_plan_format(p);
    if (as_json) {
        char *js = iris_plan_json(p);
        if (js) puts(js);
        free(js);
    }
    if (rc == IRIS_ELIMIT) fprintf(stderr, "iris: %s", text ? text : err.msg);
    else if (!as_json && text) fputs(text, stdout);
    free(text);
    free(p);
    return rc ? 1 : 0;
}
