/* cmd_logits.c: `iris logits MODEL [--image PATH]... [--system TEXT] --prompt
 * TEXT --out FILE.npy [--last N] [--hidden-states DIR] [--device cpu|cuda]`:
 * renders one user turn (images first, then the text, then the generation
 * prompt), runs the prompt and writes float32 logits [n, vocab] of every
 * position or of the last N; with --hidden-states, every layer's output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "err.h"
#include "infer.h"
#ifdef IRIS_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#include "model/text.h"
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

/* One prefill of the whole prompt; the logits of every position, or of the last `last`. */
static int run_logits(iris_model *m, const iris_prompt *p, const iris_vision_out *vo_cpu, long last, const char *out,
                      const char *hidden_dir, int cuda, iris_err *err) {
    iris_text text;
    iris_backend *b = NULL;
    int rc = iris_text_load(m->st, &m->cfg, &text, err);
    if (rc) return rc;
    int n = (int)p->ids.n, V = text.cfg.vocab_size;
    int n_out = last > 0 && last < n ? (int)last : n;
    const iris_vision_out *vo = vo_cpu;
    iris_vision_out vo_dev;
    memset(&vo_dev, 0, sizeof vo_dev);
    if (cuda) {
#ifdef IRIS_CUDA
        /* One allocation: every tensor of the checkpoint, the prompt's KV cache and its step (bf16), the logits. */
        const iris_text_config *c = &text.cfg;
        size_t w = 0;
        for (int i = 0; i < iris_st_count(m->st); i++) w += (size_t)iris_st_at(m->st, i)->n_bytes + 256;
        size_t kvb = (size_t)(n + IRIS_KV_BLOCK) * c->num_hidden_layers * c->num_key_value_heads * c->head_dim * 2 * 2;
        size_t act = (size_t)n * (4 * (size_t)c->hidden_size + 2 * (size_t)c->intermediate_size +
                                  2 * (size_t)c->num_attention_heads * c->head_dim) * 2 +
                     (size_t)n_out * V * 2 + (size_t)n * c->hidden_size * 4 * 4;
        size_t vis = p->n_rows * (size_t)(m->vision.patch_dim + 8 * m->cfg.vision_config.hidden_size +
                                          2 * m->cfg.vision_config.intermediate_size) * 2;
        rc = iris_backend_cuda_open(0, w + kvb + act + vis + ((size_t)256 << 20), &b, err);
        if (!rc && p->n_images > 0) {
            /* the vision encoder on the GPU too: these are the logits of the CUDA path */
            rc = iris_vision_upload(&m->vision, b, err);
            if (!rc) rc = iris_vision_encode_on(&m->vision, b, p->pixel_values, p->n_rows, p->grid_thw, p->n_images,
                                                &vo_dev, NULL, err);
            if (!rc) vo = &vo_dev;
        }
#else
        rc = iris_err_set(err, IRIS_EUNSUPPORTED, "--device cuda: this iris was built without CUDA; use --device cpu");
#endif
    } else {
        rc = iris_backend_cpu_open(&b, err);
    }
    if (!rc) rc = iris_text_upload(&text, b, err);
    if (rc) {
        iris_vision_out_free(&vo_dev);
        iris_text_free(&text);
        if (b) b->destroy(b);
        return rc;
    }
    iris_kv_cache kv;
    memset(&kv, 0, sizeof kv);
    int32_t *bt = NULL, *tok = NULL;
    float *logits = NULL;
    rc = iris_kv_cache_init(&kv, &text.cfg, (n + IRIS_KV_BLOCK - 1) / IRIS_KV_BLOCK, b, err);
    if (rc) goto done;
    bt = malloc(sizeof(int32_t) * (size_t)kv.n_blocks);
    tok = malloc(sizeof(int32_t) * (size_t)n);
    logits = malloc(sizeof(float) * (size_t)n_out * V);
    if (!bt || !tok || !logits) {
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory for %d x %d logits", n_out, V);
        goto done;
    }
    for (int k = 0; k < kv.n_blocks; k++) bt[k] = k;
    for (int i = 0; i < n; i++) tok[i] = p->ids.ids[i];
    iris_text_seq q = {.n_new = n, .tokens = tok, .pos = p->pos, .pos_stride = n, .block_table = bt,
                       .logits_from = n - n_out};
    if (vo->n_tokens > 0) {
        q.image_embeds = vo->embeds;
        q.n_deepstack = vo->n_deepstack;
        for (int d = 0; d < vo->n_deepstack; d++) q.deepstack[d] = vo->deepstack + (size_t)d * vo->n_tokens * vo->out_hidden;
    }
    hidden_out ho = {hidden_dir, 0, err};
    if (hidden_dir && mkdir(hidden_dir, 0755) != 0 && errno != EEXIST) {
        rc = iris_err_set(err, IRIS_EIO, "--hidden-states %s: %s", hidden_dir, strerror(errno));
        goto done;
    }
    rc = iris_text_forward(&text, b, &kv, &q, 1, logits, hidden_dir ? save_hidden : NULL, &ho, err);
    if (!rc) rc = ho.rc;
    if (!rc) {
        int64_t shape[2] = {n_out, V};
        rc = iris_npy_write_f32(out, logits, shape, 2, err);
    }
    if (!rc) fprintf(stderr, "iris logits: %d prompt tokens, %d image(s); wrote [%d, %d] to %s\n", n, p->n_images, n_out, V, out);
done:
    free(bt), free(tok), free(logits);
    if (kv.layers) iris_kv_cache_free(&kv);
    iris_vision_out_free(&vo_dev);
    iris_text_free(&text);
    b->destroy(b);
    return rc;
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
    int cuda = device && !strcmp(device, "cuda");
    iris_err err = {0};
    iris_model *m = NULL;
    if (infer_open(model, &m, &err)) return iris_cli_fail(&err);
    iris_prompt p;
    iris_vision_out vo;
    int rc = infer_prepare(m, system, images, n_images, prompt, &p, &vo, &err);
    if (!rc) {
        rc = run_logits(m, &p, &vo, last, out, hidden, cuda, &err);
        iris_vision_out_free(&vo);
        iris_prompt_free(&p);
    }
    iris_model_close(m);
    return rc ? iris_cli_fail(&err) : 0;
}
