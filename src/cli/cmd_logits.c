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
#include "err.h"
#include "engine/engine.h"
#include "engine/prompt.h"
#include "npy.h"

#include <errno.h>
#include <sys/stat.h>

static void usage(FILE *f) {
    fprintf(f, "usage: iris logits MODEL [--image PATH]... [--system TEXT] --prompt TEXT --out FILE.npy\n"
               "                   [--last N] [--hidden-states DIR] [--device cpu|cuda]\n\n"
               "Writes the float32 logits of the prompt's positions as a .npy [n, vocab].\n");
}

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
    const char *model = NULL, *system = NULL, *prompt = NULL, *out = NULL, *hidden = NULL, *device = NULL;
    const char *images[64];
    int n_images = 0;
    long last = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            usage(stdout);
            return 0;
        }
        if (s[0] == '-' && s[1] == '-') {
            if (i + 1 >= argc) {
                fprintf(stderr, "iris logits: %s needs a value\n", s);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(s, "--image") && n_images < 64) images[n_images++] = v;
            else if (!strcmp(s, "--system")) system = v;
            else if (!strcmp(s, "--prompt")) prompt = v;
            else if (!strcmp(s, "--out")) out = v;
            else if (!strcmp(s, "--hidden-states")) hidden = v;
            else if (!strcmp(s, "--device")) device = v;
            else if (!strcmp(s, "--last")) {
                char *e;
                last = strtol(v, &e, 10);
                if (e == v || *e || last < 0) {
                    fprintf(stderr, "iris logits: --last expects a count, got \"%s\"\n", v);
                    return 2;
                }
            } else {
                fprintf(stderr, "iris logits: unknown option %s\n", s);
                return 2;
            }
        } else if (!model) {
            model = s;
        } else {
            fprintf(stderr, "iris logits: unexpected argument \"%s\"\n", s);
            return 2;
        }
    }
    if (!model || !prompt || !out) {
        usage(stderr);
        return 2;
    }
    if (device && strcmp(device, "cpu") && strcmp(device, "cuda")) {
        fprintf(stderr, "iris logits: --device %s: use cpu (fp32, the reference) or cuda (bf16)\n", device);
        return 2;
    }
    if (hidden && mkdir(hidden, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "iris logits: --hidden-states %s: %s\n", hidden, strerror(errno));
        return 1;
    }
    /* The engine, on the CPU (fp32, the reference) unless --device cuda (bf16), with room for this
     * one prompt; its vision encoder and decoder make the logits. */
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = model;
    o.device = device && !strcmp(device, "cuda") ? "cuda" : "cpu";
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
