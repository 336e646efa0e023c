/* cmd_logits.c: `iris logits MODEL [--image PATH]... [--system TEXT] --prompt
 * TEXT --out FILE.npy [--last N] [--hidden-states DIR] [--device cpu|cuda]`:
 * renders one user turn (images first, then the text, then the generation
 * prompt), runs the prompt through the engine's model (one prefill) and writes
 * float32 logits [n, vocab] of every position or of the last N; with
 * --hidden-states, the residual stream entering every layer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine_flags.h"
#include "opts.h"
#include "err.h"
#include "engine/engine.h"
#include "engine/prompt.h"
#include "npy.h"

#include <errno.h>
#include <sys/stat.h>

typedef struct {
    const char *dir;
    int rc;
    iris_err *err;
} hidden_out;

/* Writes the residual stream entering layer il as DIR/layer_<il>.npy [n, hidden]. */
static void save_hidden(void *ud, int il, const float *h, int n_rows, int hidden) {
    hidden_out *ho = ud;
    if (ho->rc) return;
    char path[4200];
    snprintf(path, sizeof path, "%s/layer_%02d.npy", ho->dir, il);
    int64_t shape[2] = {n_rows, hidden};
    ho->rc = iris_npy_write_f32(path, h, shape, 2, ho->err);
}

int iris_cmd_logits(int argc, char **argv) {
    const char *model = NULL, *system = NULL, *prompt = NULL, *out = NULL, *hidden = NULL;
    const char *images[64];
    int n_images = 0;
    long long last = 0;
    iris_cli_engine ce;
    memset(&ce, 0, sizeof ce);
    iris_opt own[] = {
        {"--image", 0, IRIS_OPT_LIST, images, "PATH", "an image (repeatable)", 0, 0, NULL, &n_images, 64},
        {"--system", 0, IRIS_OPT_STR, &system, "TEXT", "a system message", 0, 0, NULL, NULL, 0},
        {"--prompt", 0, IRIS_OPT_STR, &prompt, "TEXT", "the user's text (required)", 0, 0, NULL, NULL, 0},
        {"--out", 'o', IRIS_OPT_STR, &out, "FILE.npy", "where to write the logits (required)", 0, 0, NULL, NULL, 0},
        {"--last", 0, IRIS_OPT_INT, &last, "N", "only the last N positions (default: all)", 0, 1 << 30, NULL, NULL, 0},
        {"--hidden-states", 0, IRIS_OPT_STR, &hidden, "DIR", "also the residual stream entering every layer, as .npy",
         0, 0, NULL, NULL, 0},
        IRIS_OPT_TABLE_END,
    };
    iris_cli_spec sp = {
        .cmd = "logits",
        .usage = "MODEL [--image PATH]... [--system TEXT] --prompt TEXT -o FILE.npy [options]",
        .about = "Writes the float32 logits of the prompt's positions as a .npy [n, vocab].  The device is\n"
                 "cpu (fp32, the reference) unless --device cuda (bf16).",
        .max_pos = 1,
        .tables = {own, iris_cli_engine_flags(&ce, IRIS_CLI_E_DEVICE | IRIS_CLI_E_HUB)},
    };
    const char *pos[1];
    int n_pos, st = iris_cli_parse(&sp, argc, argv, pos, &n_pos);
    if (st >= 0) return st;
    if (!n_pos || !prompt || !out)
        return iris_cli_usage_error("logits", "give %s", !n_pos ? "MODEL" : !prompt ? "--prompt TEXT" : "--out FILE.npy");
    model = pos[0];
    if (hidden && mkdir(hidden, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "iris logits: --hidden-states %s: %s\n", hidden, strerror(errno));
        return 1;
    }
    /* The engine, on the CPU (fp32, the reference) unless --device cuda (bf16), with room for this
     * one prompt; its vision encoder and decoder make the logits. */
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    iris_cli_engine_apply(&ce, &o);
    o.model = model;
    o.device = o.device && !strcmp(o.device, "cuda") ? "cuda" : "cpu";
    o.max_num_seqs = 1;
    o.prefix_caching = 0;
    iris_err err = {0};
    iris_engine *e = NULL;
    if (iris_engine_open(&o, &e, &err)) return iris_cli_fail(&err);
    iris_prompt p;
    memset(&p, 0, sizeof p);
    float *logits = NULL;
    json_t *msgs = iris_prompt_one_turn(system, n_images, prompt);
    iris_prompt_ctx ctx;
    iris_engine_prompt_ctx(e, &ctx);
    iris_prompt_image ims[64];
    for (int i = 0; i < n_images; i++) ims[i] = (iris_prompt_image){.path = images[i]};
    int rc = msgs ? iris_prompt_build(&ctx, msgs, ims, n_images, &p, NULL, &err)
                  : iris_err_set(&err, IRIS_ENOMEM, "out of memory");
    int n = (int)p.ids.n, V = ctx.cfg->text_config.vocab_size;
    int n_out = last > 0 && last < n ? (int)last : n;
    if (!rc && !(logits = malloc(sizeof(float) * (size_t)n_out * V)))
        rc = iris_err_set(&err, IRIS_ENOMEM, "out of memory for %d x %d logits", n_out, V);
    hidden_out ho = {hidden, 0, &err};
    if (!rc) rc = iris_engine_prompt_logits(e, &p, n_out, hidden ? save_hidden : NULL, &ho, logits, &err);
    if (!rc) rc = ho.rc;
    if (!rc) {
        int64_t shape[2] = {n_out, V};
        rc = iris_npy_write_f32(out, logits, shape, 2, &err);
    }
    if (!rc) fprintf(stderr, "iris logits: %d prompt tokens, %d image(s); wrote [%d, %d] to %s\n", n, p.n_images, n_out, V,
                     out);
    free(logits);
    json_decref(msgs);
    iris_prompt_free(&p);
    iris_engine_close(e);
    return rc ? iris_cli_fail(&err) : 0;
}
