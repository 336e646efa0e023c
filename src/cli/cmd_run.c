/* cmd_run.c: `iris run MODEL [--image PATH]... [--system TEXT] PROMPT` and the
 * fixed-prompt shortcuts `iris caption IMAGE`, `iris ask IMAGE QUESTION`,
 * `iris describe IMAGE` (all with --model).
 *
 * One path, as the server's: open the engine (it loads the model, once),
 * build the prompt with the one builder (engine/prompt.c; images decoded
 * once, at the size the engine's memory plan admits), submit, stream.  The
 * engine runs one sequence at the default context (the largest that fits,
 * up to the model's), and checks that the prompt and --max-tokens fit it.
 * Sampling flags are written over the model's generation_config.json
 * defaults (iris_request_params_default).  The answer streams to stdout; a
 * summary line (prompt tokens, generated tokens, time to first token,
 * tok/s) goes to stderr at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "default_model.h"
#include "err.h"
#include "engine/planner.h"
#include "engine/engine.h"
#include "pool.h"

#define MAX_IMAGES 64

static const char *CAPTION_PROMPT = "Describe this image in one sentence.";
static const char *DESCRIBE_PROMPT =
    "Analyze this scene. List the objects you see with their colours and positions, describe the setting and "
    "any activities, and transcribe any visible text.";

typedef struct run_args {
    const char *model, *system, *prompt;
    const char *images[MAX_IMAGES];
    int n_images;
    iris_engine_opts eo;   /* --device and the GPU memory settings over the defaults */
    const char *stop[IRIS_MAX_STOP];
    int n_stop;
    int threads;
    int have[16];   /* which sampling flags were given, to write over the defaults */
    float fv[16];
    long long iv[16];
} run_args;

enum { F_TEMP, F_TOPK, F_TOPP, F_MINP, F_REP, F_PRES, F_FREQ, F_SEED, F_MAXTOK, F_N };
static const char *flag_names[F_N] = {"--temperature", "--top-k", "--top-p", "--min-p", "--repetition-penalty",
                                      "--presence-penalty", "--frequency-penalty", "--seed", "--max-tokens"};

static void usage(FILE *f, const char *cmd) {
    if (!strcmp(cmd, "run"))
        fprintf(f, "usage: iris run [MODEL] [--image PATH]... [--system TEXT] [options] PROMPT\n");
    else if (!strcmp(cmd, "ask"))
        fprintf(f, "usage: iris ask [--model MODEL] [options] IMAGE QUESTION\n");
    else
        fprintf(f, "usage: iris %s [--model MODEL] [options] IMAGE\n", cmd);
    fprintf(f, "\nMODEL is a model directory (Hugging Face layout) or a repo id in the HF cache;\n"
               "without it, the demo model (models/demo, or $IRIS_DEMO_MODEL).\n"
               "options:\n"
               "  --image PATH           an image (repeatable; run only)\n"
               "  --system TEXT          a system message\n"
               "  --device cpu|cuda|auto where to run (default auto: cuda when there is a GPU)\n"
               "  --gpu-memory-limit SIZE  --gpu-memory-utilization F  --gpu-memory-margin SIZE\n"
               "                         the GPU memory budget (default: free memory less 512MiB)\n"
               "  --max-image-pixels N   on a GPU, images are resized to at most N pixels (default 1048576)\n"
               "  --kv-cache-dtype bf16|fp8  the KV cache's element type (default bf16; fp8 halves it)\n"
               "  --dense-weights auto|on|off  FP8 models on a GPU: BF16 copies of the decoder linears for\n"
               "                         prefill (default auto: when they take at most 10%% of the budget)\n"
               "  --temperature F  --top-k N  --top-p F  --min-p F\n"
               "  --repetition-penalty F  --presence-penalty F  --frequency-penalty F\n"
               "  --seed N  --max-tokens N   (defaults: the model's generation_config.json;\n"
               "                         --temperature 0 is greedy)\n"
               "  --stop TEXT            stop when the answer contains TEXT (repeatable; TEXT is not printed)\n"
               "  --threads N            CPU threads (default: the machine's cores)\n");
}

static int parse(int argc, char **argv, run_args *a, int positional_max, const char **pos, int *n_pos) {
    *n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) return 1;
        int takes = !strcmp(s, "--image") || !strcmp(s, "--system") || !strcmp(s, "--model") ||
                    !strcmp(s, "--device") || !strcmp(s, "--stop") || !strcmp(s, "--threads") ||
                    !strcmp(s, "--gpu-memory-limit") || !strcmp(s, "--gpu-memory-utilization") ||
                    !strcmp(s, "--gpu-memory-margin") || !strcmp(s, "--max-image-pixels") ||
                    !strcmp(s, "--kv-cache-dtype") || !strcmp(s, "--dense-weights");
        int fi = -1;
        for (int k = 0; k < F_N; k++)
            if (!strcmp(s, flag_names[k])) fi = k;
        if (takes || fi >= 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "iris %s: %s needs a value\n", argv[0], s);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(s, "--image")) {
                if (a->n_images >= MAX_IMAGES) {
                    fprintf(stderr, "iris %s: at most %d images\n", argv[0], MAX_IMAGES);
                    return 2;
                }
                a->images[a->n_images++] = v;
            } else if (!strcmp(s, "--system")) {
                a->system = v;
            } else if (!strcmp(s, "--model")) {
                a->model = v;
            } else if (!strcmp(s, "--device")) {
                a->eo.device = v;
            } else if (!strcmp(s, "--gpu-memory-limit") || !strcmp(s, "--gpu-memory-margin")) {
                iris_err e = {0};
                uint64_t bytes = 0;
                if (iris_plan_parse_bytes(v, &bytes, &e)) {
                    fprintf(stderr, "iris %s: %s: %s\n", argv[0], s, e.msg);
                    return 2;
                }
                if (!strcmp(s, "--gpu-memory-limit")) a->eo.gpu_memory_limit = bytes;
                else a->eo.gpu_memory_margin = bytes, a->eo.gpu_memory_margin_set = 1;
            } else if (!strcmp(s, "--gpu-memory-utilization") || !strcmp(s, "--max-image-pixels")) {
                char *e;
                double x = strtod(v, &e);
                int util = !strcmp(s, "--gpu-memory-utilization");
                if (e == v || *e || !(util ? x > 0 && x <= 1 : x >= 1 && x <= 1e12)) {
                    fprintf(stderr, "iris %s: %s expects %s, got \"%s\"\n", argv[0], s,
                            util ? "a fraction in (0, 1]" : "a pixel count", v);
                    return 2;
                }
                if (util) a->eo.gpu_memory_utilization = x;
                else a->eo.max_image_pixels = (long long)x;
            } else if (!strcmp(s, "--kv-cache-dtype")) {
                if (iris_plan_kv_dtype_parse(v) < 0) {
                    fprintf(stderr, "iris %s: --kv-cache-dtype '%s': give bf16 or fp8\n", argv[0], v);
                    return 2;
                }
                a->eo.kv_cache_dtype = v;
            } else if (!strcmp(s, "--dense-weights")) {
                if (iris_plan_dense_parse(v) < 0) {
                    fprintf(stderr, "iris %s: --dense-weights '%s': give auto, on or off\n", argv[0], v);
                    return 2;
                }
                a->eo.dense_weights = v;
            } else if (!strcmp(s, "--stop")) {
                if (a->n_stop >= IRIS_MAX_STOP || !*v) {
                    fprintf(stderr, "iris %s: --stop: at most %d non-empty stop strings\n", argv[0], IRIS_MAX_STOP);
                    return 2;
                }
                a->stop[a->n_stop++] = v;
            } else if (!strcmp(s, "--threads")) {
                char *e;
                long t = strtol(v, &e, 10);
                if (e == v || *e || t < 1 || t > 1024) {
                    fprintf(stderr, "iris %s: --threads expects a count from 1 to 1024, got \"%s\"\n", argv[0], v);
                    return 2;
                }
                a->threads = (int)t;
            } else {
                char *e;
                if (fi == F_TOPK || fi == F_SEED || fi == F_MAXTOK) a->iv[fi] = strtoll(v, &e, 10);
                else a->fv[fi] = strtof(v, &e);
                if (e == v || *e) {
                    fprintf(stderr, "iris %s: %s expects a number, got \"%s\"\n", argv[0], s, v);
                    return 2;
                }
                a->have[fi] = 1;
            }
        } else if (s[0] == '-' && s[1] == '-') {
            fprintf(stderr, "iris %s: unknown option %s\n", argv[0], s);
            return 2;
        } else {
            if (*n_pos >= positional_max) {
                fprintf(stderr, "iris %s: unexpected argument \"%s\"\n", argv[0], s);
                return 2;
            }
            pos[(*n_pos)++] = s;
        }
    }
    return 0;
}

/* The sampling flags given, written over the model's defaults in p. */
static void apply_flags(const run_args *a, iris_sampling *p) {
    if (a->have[F_TEMP]) p->temperature = a->fv[F_TEMP];
    if (a->have[F_TOPK]) p->top_k = (int)a->iv[F_TOPK];
    if (a->have[F_TOPP]) p->top_p = a->fv[F_TOPP];
    if (a->have[F_MINP]) p->min_p = a->fv[F_MINP];
    if (a->have[F_REP]) p->repetition_penalty = a->fv[F_REP];
    if (a->have[F_PRES]) p->presence_penalty = a->fv[F_PRES];
    if (a->have[F_FREQ]) p->frequency_penalty = a->fv[F_FREQ];
    if (a->have[F_SEED]) p->seed = a->iv[F_SEED];
    if (a->have[F_MAXTOK]) p->max_tokens = (int)a->iv[F_MAXTOK];
    if (a->have[F_TEMP] && a->fv[F_TEMP] > 0) p->do_sample = 1;
    for (int i = 0; i < a->n_stop; i++) p->stop[p->n_stop++] = a->stop[i];
}

/* Stream the request's text to stdout, then the summary line to stderr. */
static int stream(iris_request *r, iris_err *err) {
    iris_event ev;
    while (iris_request_next(r, &ev, -1) == IRIS_OK) {
        if (ev.text_len) {
            fwrite(ev.text, 1, ev.text_len, stdout);
            fflush(stdout);
        }
        if (ev.kind != IRIS_EVENT_DONE) continue;
        if (ev.finish_reason == IRIS_FINISH_REASON_ERROR) {
            *err = ev.err;
            return ev.err.code ? ev.err.code : IRIS_EINVAL;
        }
        const iris_usage *u = &ev.usage;
        double gen_s = u->total_s - u->ttft_s;
        fprintf(stdout, "\n");
        fprintf(stderr, "iris: %d prompt tokens, %d generated (%s), time to first token %.3f s, %.1f tok/s\n",
                u->prompt_tokens, u->completion_tokens, iris_finish_reason_name(ev.finish_reason), u->ttft_s,
                u->completion_tokens > 1 && gen_s > 0 ? (u->completion_tokens - 1) / gen_s : 0.0);
        return IRIS_OK;
    }
    return iris_err_set(err, IRIS_EINVAL, "the engine's channel failed");
}

/* One user turn through the engine: the prompt, the request, the answer. */
static int generate(iris_engine *e, const run_args *a, iris_err *err) {
    iris_prompt_image ims[MAX_IMAGES];
    memset(ims, 0, sizeof ims);
    for (int i = 0; i < a->n_images; i++) ims[i].path = a->images[i];
    json_t *msgs = iris_prompt_one_turn(a->system, a->n_images, a->prompt);
    if (!msgs) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    iris_prompt_ctx ctx;
    iris_engine_prompt_ctx(e, &ctx);
    iris_prompt p;
    int rc = iris_prompt_build(&ctx, msgs, ims, a->n_images, &p, NULL, err);
    json_decref(msgs);
    if (rc) return rc;
    iris_request_params rp;
    iris_request_params_default(e, &rp);
    apply_flags(a, &rp.sampling);
    rp.prompt = &p;
    iris_request *r = NULL;
    rc = iris_engine_submit(e, &rp, &r, err);
    iris_prompt_free(&p);  /* the engine's now (zeroed) unless submit failed early */
    if (!rc) rc = stream(r, err);
    iris_request_free(r);
    return rc;
}

static int run_common(run_args *a) {
    iris_err err = {0};
    const char *dev = a->eo.device;
    if (dev && strcmp(dev, "cpu") && strcmp(dev, "auto") && strcmp(dev, "cuda")) {
        fprintf(stderr, "iris: --device must be cpu, cuda or auto, not \"%s\"\n", dev);
        return 2;
    }
    if (a->threads) iris_pool_set_threads(a->threads);
    a->eo.model = a->model;
    a->eo.allow_download = 1;
    a->eo.max_num_seqs = 1;
    iris_engine *e = NULL;
    if (iris_engine_open(&a->eo, &e, &err)) return iris_cli_fail(&err);
    int rc = generate(e, a, &err);
    iris_engine_close(e);
    return rc ? iris_cli_fail(&err) : 0;
}

static void args_init(run_args *a) {
    memset(a, 0, sizeof *a);
    iris_engine_opts_default(&a->eo);
}

static int fixed_prompt(int argc, char **argv, const char *prompt, int wants_question) {
    run_args a;
    args_init(&a);
    const char *pos[2];
    int n_pos, rc = parse(argc, argv, &a, wants_question ? 2 : 1, pos, &n_pos);
    if (rc == 1) {
        usage(stdout, argv[0]);
        return 0;
    }
    if (rc) return rc;
    if (n_pos != (wants_question ? 2 : 1) || a.n_images) {
        usage(stderr, argv[0]);
        return 2;
    }
    if (!a.model && !(a.model = iris_default_model_dir())) {
        fprintf(stderr, "iris %s: no --model and no demo model found (models/demo beside the executable, or "
                        "$IRIS_DEMO_MODEL): pass --model MODEL, a model directory or a repo id in the Hugging Face "
                        "cache\n", argv[0]);
        return 2;
    }
    a.images[a.n_images++] = pos[0];
    a.prompt = wants_question ? pos[1] : prompt;
    return run_common(&a);
}

int iris_cmd_caption(int argc, char **argv) { return fixed_prompt(argc, argv, CAPTION_PROMPT, 0); }
int iris_cmd_describe(int argc, char **argv) { return fixed_prompt(argc, argv, DESCRIBE_PROMPT, 0); }
int iris_cmd_ask(int argc, char **argv) { return fixed_prompt(argc, argv, NULL, 1); }

int iris_cmd_run(int argc, char **argv) {
    run_args a;
    args_init(&a);
    const char *pos[2];
    int n_pos, rc = parse(argc, argv, &a, 2, pos, &n_pos);
    if (rc == 1) {
        usage(stdout, "run");
        return 0;
    }
    if (rc) return rc;
    if (n_pos == 2 && !a.model) {
        a.model = pos[0];
        a.prompt = pos[1];
    } else if (n_pos == 1 && (a.model || (a.model = iris_default_model_dir()))) {
        a.prompt = pos[0];   /* iris run [--model M] PROMPT: the demo model by default */
    } else {
        usage(stderr, "run");
        return 2;
    }
    return run_common(&a);
}
