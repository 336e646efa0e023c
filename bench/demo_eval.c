/* demo_eval.c: greedy answers of a model to a list of (image, prompt) items
 * through the engine (libiris), for the demo model's held-out evaluation
 * (tools/train_demo.py iris-eval) and its agreement with transformers.
 *
 *   make BUILD=build/x build/x/bench/demo_eval
 *   build/x/bench/demo_eval MODEL ITEMS.tsv [--max-tokens N] > out.jsonl
 *
 * ITEMS.tsv: one item a line, "IMAGE_PATH<TAB>PROMPT[<TAB>MAX_TOKENS]" (one
 * user turn: the image, then the prompt; MAX_TOKENS, when given, replaces
 * --max-tokens for that item: grounding answers are longer).  Output: one JSON line per item, in input order:
 * {"tokens": [...generated ids, end token excluded...], "text": "..."}.
 * Items run in waves of up to 64 concurrent requests (continuous batching);
 * greedy, so an item's answer does not depend on its neighbours.  Timing
 * goes to stderr; figures are reported, never asserted. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "iris.h"

#define WAVE 64

typedef struct item {
    char *image, *prompt;
    int max_tokens; /* 0: --max-tokens */
} item;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int read_items(const char *path, item **out, int *n) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "demo_eval: cannot open %s\n", path);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int cnt = 0, room = 0;
    item *it = NULL;
    while ((len = getline(&line, &cap, f)) > 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        char *tab = strchr(line, '\t');
        if (!tab) {
            fprintf(stderr, "demo_eval: %s line %d: no tab between image and prompt\n", path, cnt + 1);
            free(line), fclose(f);
            return -1;
        }
        *tab = 0;
        if (cnt == room) {
            room = room ? 2 * room : 256;
            item *g = realloc(it, sizeof *it * (size_t)room);
            if (!g) exit(1);
            it = g;
        }
        char *tab2 = strchr(tab + 1, '\t');
        it[cnt].max_tokens = 0;
        if (tab2) {
            *tab2 = 0;
            it[cnt].max_tokens = atoi(tab2 + 1);
        }
        it[cnt].image = strdup(line);
        it[cnt].prompt = strdup(tab + 1);
        cnt++;
    }
    free(line);
    fclose(f);
    *out = it;
    *n = cnt;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: demo_eval MODEL ITEMS.tsv [--max-tokens N]\n");
        return 2;
    }
    int max_tokens = 160;
    for (int i = 3; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "--max-tokens")) max_tokens = atoi(argv[i + 1]);
    item *items = NULL;
    int n = 0;
    if (read_items(argv[2], &items, &n)) return 1;
    iris_err err = {0};
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = argv[1];
    o.max_num_seqs = WAVE;
    iris_engine *e = NULL;
    if (iris_engine_open(&o, &e, &err)) {
        fprintf(stderr, "demo_eval: %s\n", err.msg);
        return 1;
    }
    double t0 = now_s();
    long n_tokens = 0;
    int rc = 0;
    for (int w = 0; w < n && !rc; w += WAVE) {
        int m = n - w < WAVE ? n - w : WAVE;
        iris_request *req[WAVE] = {0};
        json_t *msgs[WAVE] = {0};
        for (int k = 0; k < m && !rc; k++) {
            const item *it = &items[w + k];
            msgs[k] = json_pack("[{s:s, s:[{s:s}, {s:s, s:s}]}]", "role", "user", "content", "type", "image", "type",
                                "text", "text", it->prompt);
            char *mj = json_dumps(msgs[k], JSON_COMPACT);
            iris_request_params rp;
            iris_request_params_default(e, &rp);
            rp.messages_json = mj;
            rp.image_paths = (const char *const *)&it->image;
            rp.n_images = 1;
            rp.sampling.do_sample = 0;
            rp.sampling.max_tokens = it->max_tokens > 0 ? it->max_tokens : max_tokens;
            if (iris_engine_submit(e, &rp, &req[k], &err)) {
                fprintf(stderr, "demo_eval: item %d (%s): %s\n", w + k + 1, it->image, err.msg);
                rc = 1;
            }
            free(mj);
        }
        for (int k = 0; k < m; k++) {
            if (!req[k]) continue;
            json_t *toks = json_array();
            size_t tcap = 4096, tlen = 0;
            char *text = malloc(tcap);
            iris_event ev;
            while (iris_request_next(req[k], &ev, -1) == IRIS_OK) {
                if (ev.kind == IRIS_EVENT_DELTA) json_array_append_new(toks, json_integer(ev.token));
                if (ev.text_len) {
                    while (tlen + ev.text_len + 1 > tcap) text = realloc(text, tcap *= 2);
                    memcpy(text + tlen, ev.text, ev.text_len);
                    tlen += ev.text_len;
                }
                if (ev.kind == IRIS_EVENT_DONE) {
                    if (ev.finish_reason == IRIS_FINISH_REASON_ERROR) {
                        fprintf(stderr, "demo_eval: item %d: %s\n", w + k + 1, ev.err.msg);
                        rc = 1;
                    }
                    break;
                }
            }
            text[tlen] = 0;
            n_tokens += (long)json_array_size(toks);
            json_t *o_ = json_pack("{s:o, s:s}", "tokens", toks, "text", text);
            char *s = json_dumps(o_, JSON_COMPACT | JSON_ENSURE_ASCII);
            printf("%s\n", s);
            free(s), free(text);
            json_decref(o_);
            json_decref(msgs[k]);
            iris_request_free(req[k]);
        }
        fflush(stdout);
        fprintf(stderr, "demo_eval: %d/%d items, %.1f s\n", w + m, n, now_s() - t0);
    }
    double dt = now_s() - t0;
    fprintf(stderr, "demo_eval: %d items, %ld generated tokens in %.1f s (%.2f items/s)\n", n, n_tokens, dt,
            dt > 0 ? n / dt : 0.0);
    iris_engine_close(e);
    for (int i = 0; i < n; i++) free(items[i].image), free(items[i].prompt);
    free(items);
    return rc;
}
