/* tiny_fixture.c: .npy reading for the tiny fixtures (int64 here; float32
 * through src/base/npy.h), and the image conversation's greedy run (tiny_image_greedy). */
#include "tiny_fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "npy.h"

int tiny_exists(const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", TINY_DIR, rel);
    return access(path, R_OK) == 0;
}

int tiny_vision_load(const char *model, iris_config *cfg, iris_st **st, iris_vision *vis, iris_err *err) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/%s/model", TINY_DIR, model);
    int rc = iris_config_load(dir, cfg, err);
    if (!rc) rc = iris_st_open(dir, st, err);
    if (!rc) rc = iris_vision_load(*st, &cfg->vision_config, vis, err);
    return rc;
}

int tiny_greedy_same(const float *got, const float *ref, int rows, int V, float margin, int *decided) {
    int same = 0;
    *decided = 0;
    for (int r = 0; r < rows; r++) {
        const float *g = got + (size_t)r * V, *w = ref + (size_t)r * V;
        int ig = 0, iw = 0;
        for (int v = 1; v < V; v++) ig = g[v] > g[ig] ? v : ig, iw = w[v] > w[iw] ? v : iw;
        float second = -INFINITY;
        for (int v = 0; v < V; v++)
            if (v != iw && w[v] > second) second = w[v];
        if (w[iw] - second > margin) ++*decided, same += ig == iw;
    }
    return same;
}

static int read_i64(const char *path, tiny_arr *out) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    unsigned char pre[10];
    int rc = -1;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) goto done;
    size_t hl = pre[8] | (size_t)pre[9] << 8;
    if (pre[6] != 1) {  /* v2/v3: 4-byte header length */
        unsigned char b[2];
        if (fread(b, 1, 2, f) != 2) goto done;
        hl = pre[8] | (size_t)pre[9] << 8 | (size_t)b[0] << 16 | (size_t)b[1] << 24;
    }
    char *h = calloc(1, hl + 1);
    if (!h || fread(h, 1, hl, f) != hl) { free(h); goto done; }
    if (!strstr(h, "'<i8'") || strstr(h, "'fortran_order': True")) { free(h); goto done; }
    const char *s = strstr(h, "'shape': (");
    if (!s) { free(h); goto done; }
    s += 10;
    out->ndim = 0;
    out->n = 1;
    while (*s && *s != ')') {
        char *e;
        long long v = strtoll(s, &e, 10);
        if (e == s) break;
        out->shape[out->ndim++] = v;
        out->n *= v;
        s = e;
        while (*s == ',' || *s == ' ') s++;
    }
    free(h);
    out->i64 = malloc((size_t)(out->n ? out->n : 1) * 8);
    if (!out->i64 || fread(out->i64, 8, (size_t)out->n, f) != (size_t)out->n) goto done;
    rc = 0;
done:
    fclose(f);
    return rc;
}

int tiny_load(const char *rel, tiny_arr *out) {
    memset(out, 0, sizeof *out);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", TINY_DIR, rel);
    if (read_i64(path, out) == 0) return 0;
    free(out->i64);
    memset(out, 0, sizeof *out);
    iris_err err = {0};
    int nd;
    if (iris_npy_read_f32(path, &out->f32, out->shape, &nd, &err) == 0) {
        out->ndim = nd;
        out->n = 1;
        for (int i = 0; i < nd; i++) out->n *= out->shape[i];
        return 0;
    }
    fprintf(stderr, "fixture %s: %s\n", path, err.msg);
    return -1;
}

void tiny_free(tiny_arr *a) {
    if (!a) return;
    free(a->i64);
    free(a->f32);
    memset(a, 0, sizeof *a);
}

int tiny_image_greedy(iris_engine *e, const int64_t *ref, int n_ref, int timeout_ms, tiny_greedy_run *out,
                      iris_err *err) {
    memset(out, 0, sizeof *out);
    const char *imgs[1] = {TINY_DIR "/images/a.png"};
    iris_request_params rp;
    iris_request_params_default(e, &rp);
    rp.messages_json = "[{\"role\":\"user\",\"content\":[{\"type\":\"image\"},{\"type\":\"text\","
                       "\"text\":\"What is in this image?\"}]}]";
    rp.image_paths = imgs;
    rp.n_images = 1;
    rp.sampling.do_sample = 0;
    rp.sampling.max_tokens = n_ref;
    rp.sampling.ignore_eos = 1;
    iris_request *r = NULL;
    int rc = iris_engine_submit(e, &rp, &r, err);
    if (rc) return rc;
    iris_event ev;
    while (iris_request_next(r, &ev, timeout_ms) == IRIS_OK && ev.kind != IRIS_EVENT_DONE) {
        if (out->n >= n_ref) continue;
        int eq = ev.token == (int)ref[out->n];
        out->same += eq;
        out->prefix += eq && out->prefix == out->n;
        out->n++;
    }
    iris_request_free(r);
    return IRIS_OK;
}
