/* cmd_logits.c: `iris logits MODEL [--image PATH]... [--system TEXT] --prompt
 * TEXT --out FILE.npy [--last N] [--hidden-states DIR] [--device cpu]`:
 * renders one user turn (images first, then the text, then the generation
 * prompt), runs the prompt and writes float32 logits [n, vocab] of every
 * position or of the last N; with --hidden-states, every layer's output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "err.h"
#include "infer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: iris logits MODEL [--image PATH]... [--system TEXT] --prompt TEXT --out FILE.npy\n"
               "                   [--last N] [--hidden-states DIR] [--device cpu]\n\n"
               "Writes the float32 logits of the prompt's positions as a .npy [n, vocab].\n");
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
    if (device && strcmp(device, "cpu") && strcmp(device, "auto")) {
        fprintf(stderr, "iris logits: --device %s: only cpu is available in this build\n", device);
        return 2;
    }
    (void)hidden;
    iris_err err = {0};
    infer_model m;
    if (infer_open(model, &m, &err)) return iris_cli_fail(&err);
    iris_prompt p;
    iris_vision_out vo;
    int rc = infer_prepare(&m, system, images, n_images, prompt, 0, &p, &vo, &err);
    if (!rc) {
        rc = infer_decode(&m, &err);
        iris_vision_out_free(&vo);
        iris_prompt_free(&p);
    }
    infer_close(&m);
    return rc ? iris_cli_fail(&err) : 0;
}
