/* cmd_detect.c: `iris detect [-m MODEL] IMAGE "the red cars" [--annotate out.png]`:
 * Qwen3-VL grounding from the command line.
 *
 * The prompt is Qwen's own for grounding (QwenLM/Qwen3-VL
 * cookbooks/2d_grounding.ipynb):
 *     Locate every instance that belongs to the following categories: "QUERY".
 *     Report bbox coordinates in JSON format.
 * and the model answers {"bbox_2d": [x1, y1, x2, y2], "label": ...} objects
 * on a 0-1000 scale relative to the image (formats/grounding.c parses them
 * and says why x * width / 1000 gives pixels of the original image).
 *
 * One path, as `iris ask`: the image is decoded once (its size for the
 * conversion, its pixels for --annotate), the prompt built by the one
 * builder (engine/prompt.c) from that decoded image, the request submitted
 * to the engine with the model's sampling defaults (flags over them), the
 * answer collected whole.
 *
 * Output: on stdout a JSON list, [{"label": "...", "box": [x1, y1, x2, y2]}]
 * in whole pixels of the original image (points: "point": [x, y]);
 * --annotate FILE writes the image with the boxes and labels drawn (PNG).
 * An answer without any box is an error: exit 1, with the raw answer on
 * stderr so the user sees what the model said instead (an empty list would
 * look like "nothing there" when the model did not ground at all). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "default_model.h"
#include "engine/engine.h"
#include "engine_flags.h"
#include "err.h"
#include "formats/grounding.h"
#include "opts.h"
#include "pool.h"

#define MAX_BOXES 256

static const char *GROUND_PROMPT =
    "Locate every instance that belongs to the following categories: \"%s\". Report bbox coordinates in JSON format.";

typedef struct detect_args {
    const char *model, *annotate, *image, *query;
    double temperature;
    long long max_tokens, seed, threads;
    int have_temp, have_max, have_seed, quiet, verbose, raw, demo;
    iris_cli_engine ce;
} detect_args;

#define OPT(n, sh, k, d, a, h, l, u, w, s) \
    (iris_opt) { n, sh, k, d, a, h, l, u, w, s, 0 }

static void spec_of(detect_args *a, iris_cli_spec *sp, iris_opt *t) {
    int n = 0;
    t[n++] = OPT("--model", 'm', IRIS_OPT_STR, &a->model, "MODEL",
                 "a model directory or a repo id (Org/Name); default: the demo model", 0, 0, NULL, NULL);
    t[n++] = OPT("--annotate", 0, IRIS_OPT_STR, &a->annotate, "FILE",
                 "also write the image with the boxes and labels drawn, as PNG", 0, 0, NULL, NULL);
    t[n++] = OPT("--raw", 0, IRIS_OPT_FLAG, &a->raw, NULL, "also print the model's answer on stderr", 0, 0, NULL, NULL);
    t[n++] = OPT("--temperature", 0, IRIS_OPT_NUM, &a->temperature, "F", "0 is greedy (default: the model's)", 0, 100,
                 NULL, &a->have_temp);
    t[n++] = OPT("--seed", 0, IRIS_OPT_INT, &a->seed, "N", "the sampler's seed", 0, 9.2e18, NULL, &a->have_seed);
    t[n++] = OPT("--max-tokens", 0, IRIS_OPT_INT, &a->max_tokens, "N", "tokens to generate at most (default 2048)", 1,
                 1 << 24, NULL, &a->have_max);
    t[n++] = OPT("--quiet", 'q', IRIS_OPT_FLAG, &a->quiet, NULL, "nothing on stderr but errors", 0, 0, NULL, NULL);
    t[n++] = OPT("--verbose", 'v', IRIS_OPT_FLAG, &a->verbose, NULL, "the engine's information lines on stderr", 0, 0,
                 NULL, NULL);
    t[n++] = OPT("--threads", 0, IRIS_OPT_INT, &a->threads, "N", "CPU threads (default: the machine's cores)", 1, 1024,
                 NULL, NULL);
    t[n] = (iris_opt)IRIS_OPT_TABLE_END;
    memset(sp, 0, sizeof *sp);
    sp->cmd = "detect";
    sp->usage = "[-m MODEL] [options] IMAGE QUERY";
    sp->about = "Finds QUERY (\"the red cars\", \"person, dog\") in IMAGE and prints the boxes as JSON,\n"
                "[{\"label\": ..., \"box\": [x1, y1, x2, y2]}], in pixels of IMAGE.  Exit status 1 when the\n"
                "model's answer holds no box (the answer is then printed on stderr).";
    sp->tables[0] = t;
    sp->tables[1] = iris_cli_engine_flags(&a->ce, IRIS_CLI_E_RUN);
    sp->footer = "Without MODEL the demo model answers (models/demo), which does not ground real photos.";
    sp->max_pos = 2;
}

/* The model's whole answer to the grounding prompt about img (malloc'd into *text). */
static int ask(iris_engine *e, const detect_args *a, const iris_image *img, char **text, iris_err *err) {
    size_t qn = strlen(GROUND_PROMPT) + strlen(a->query) + 1;
    char *q = malloc(qn);
    if (!q) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    snprintf(q, qn, GROUND_PROMPT, a->query);
    json_t *msgs = iris_prompt_one_turn(NULL, 1, q);
    free(q);
    if (!msgs) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    iris_prompt_image im = {.image = img, .label = a->image};
    iris_prompt_ctx ctx;
    iris_engine_prompt_ctx(e, &ctx);
    iris_prompt p;
    int rc = iris_prompt_build(&ctx, msgs, &im, 1, &p, NULL, err);
    json_decref(msgs);
    if (rc) return rc;
    iris_request_params rp;
    iris_request_params_default(e, &rp);
    if (a->have_temp) rp.sampling.temperature = (float)a->temperature, rp.sampling.do_sample = a->temperature > 0;
    if (a->have_seed) rp.sampling.seed = a->seed;
    rp.sampling.max_tokens = a->have_max ? (int)a->max_tokens : 2048;
    rp.prompt = &p;
    iris_request *r = NULL;
    rc = iris_engine_submit(e, &rp, &r, err);
    iris_prompt_free(&p);
    if (rc) return rc;
    size_t len = 0;
    char *buf = calloc(1, 1);
    iris_event ev;
    rc = IRIS_EINVAL;
    while (buf && iris_request_next(r, &ev, -1) == IRIS_OK) {
        if (ev.text_len) {
            char *nb = realloc(buf, len + ev.text_len + 1);
            if (!nb) {
                rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
                break;
            }
            buf = nb;
            memcpy(buf + len, ev.text, ev.text_len);
            buf[len += ev.text_len] = 0;
        }
        if (ev.kind != IRIS_EVENT_DONE) continue;
        rc = ev.finish_reason == IRIS_FINISH_REASON_ERROR ? (*err = ev.err, ev.err.code ? ev.err.code : IRIS_EINVAL)
                                                          : IRIS_OK;
        break;
    }
    iris_request_free(r);
    if (!buf) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    if (rc == IRIS_EINVAL && !err->msg[0]) iris_err_set(err, IRIS_EINVAL, "the engine's channel failed");
    if (rc) free(buf);
    else *text = buf;
    return rc;
}

static void print_boxes(const iris_ground_box *b, int n) {
    json_t *list = json_array();
    for (int i = 0; i < n; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "label", json_string(b[i].label));
        if (b[i].is_point)
            json_object_set_new(o, "point", json_pack("[i, i]", (int)(b[i].x1 + 0.5), (int)(b[i].y1 + 0.5)));
        else
            json_object_set_new(o, "box", json_pack("[i, i, i, i]", (int)(b[i].x1 + 0.5), (int)(b[i].y1 + 0.5),
                                                   (int)(b[i].x2 + 0.5), (int)(b[i].y2 + 0.5)));
        json_array_append_new(list, o);
    }
    json_dumpf(list, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
    fputc('\n', stdout);
    json_decref(list);
}

/* The answer's boxes, printed and drawn: 0, 1 when there is none. */
static int report(const detect_args *a, const char *answer, iris_image *img, iris_err *err) {
    static iris_ground_box boxes[MAX_BOXES];
    int n = iris_ground_parse(answer, boxes, MAX_BOXES);
    if (a->raw || !n) fprintf(stderr, "%s%s\n", n ? "" : "iris detect: no boxes in the model's answer:\n", answer);
    if (!n) return 1;
    if (n > MAX_BOXES) n = MAX_BOXES;
    iris_ground_to_pixels(boxes, n, img->width, img->height);
    print_boxes(boxes, n);
    if (!a->annotate) return 0;
    iris_image_draw_boxes(img, boxes, n, NULL, img->width < 400 && img->height < 400 ? 1 : 3);
    return iris_image_write_png(img, a->annotate, err) ? -1 : 0;
}

static int run(detect_args *a) {
    iris_err err = {0};
    iris_cli_quiet(a->quiet);
    if (!a->quiet && !a->verbose && !getenv("IRIS_LOG")) iris_log_set_level(IRIS_LOG_WARN);
    if (a->threads) iris_pool_set_threads((int)a->threads);
    if (a->demo && !a->quiet)
        fprintf(stderr, "iris detect: no model given: the demo model answers (trained on synthetic shapes; for real "
                        "images: iris detect -m Qwen/Qwen3-VL-2B-Instruct-FP8 ...)\n");
    iris_image img = {0};
    int rc = iris_image_decode_file(a->image, NULL, &img, &err);
    iris_engine_opts eo;
    iris_engine_opts_default(&eo);
    iris_cli_engine_apply(&a->ce, &eo);
    eo.model = a->model;
    eo.max_num_seqs = 1;
    iris_engine *e = NULL;
    char *answer = NULL;
    if (!rc) rc = iris_engine_open(&eo, &e, &err);
    if (!rc) rc = ask(e, a, &img, &answer, &err);
    iris_engine_close(e);
    if (!rc) rc = report(a, answer, &img, &err);
    free(answer);
    iris_image_free(&img);
    return rc < 0 ? iris_cli_fail(&err) : rc;
}

int iris_cmd_detect(int argc, char **argv) {
    detect_args a;
    memset(&a, 0, sizeof a);
    iris_opt own[16];
    iris_cli_spec sp;
    spec_of(&a, &sp, own);
    const char *pos[2];
    int n_pos, rc = iris_cli_parse(&sp, argc, argv, pos, &n_pos);
    if (rc >= 0) return rc;
    if (n_pos != 2) return iris_cli_usage_error("detect", "give IMAGE and QUERY (what to find, e.g. \"the red cars\")");
    if (!*pos[1]) return iris_cli_usage_error("detect", "QUERY '': say what to find");
    a.image = pos[0], a.query = pos[1];
    if (!a.model) {
        if (!(a.model = iris_default_model_dir()))
            return iris_cli_usage_error("detect", "no --model and no demo model found: give -m MODEL");
        a.demo = 1;
    }
    return run(&a);
}
