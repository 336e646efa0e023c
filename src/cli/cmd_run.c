/* cmd_run.c: `iris run [MODEL] [--image PATH]... [--system TEXT] PROMPT` and
 * the fixed-prompt shortcuts `iris caption IMAGE`, `iris ask IMAGE QUESTION`,
 * `iris describe IMAGE` (all with -m/--model).
 *
 * One path, as the server's: open the engine (it loads the model, once),
 * build the prompt with the one builder (engine/prompt.c; images decoded
 * once, at the size the engine's memory plan admits), submit, stream.  The
 * engine runs one sequence at the default context (the largest that fits,
 * up to the model's), and checks that the prompt and --max-tokens fit it.
 * Sampling flags are written over the model's generation_config.json
 * defaults (iris_request_params_default).
 *
 * Output: the answer streams to stdout; with --json nothing streams and one
 * JSON object is printed at the end (text, finish reason, token counts,
 * timings).  `describe --json` also constrains the answer to SCENE_SCHEMA
 * (objects with label, colour, attributes, position, count; setting; visible
 * text) and adds it parsed as "scene" (null when it was cut short).  A
 * Thinking model's reasoning (what precedes "</think>", split as the server's
 * reasoning_content) streams to stderr, as Ollama shows it, so stdout keeps the
 * answer alone; --reasoning off hides it (and asks plain Qwen3 not to think);
 * with --json it is the "reasoning" field.  The statistics line goes to
 * stderr with --verbose, or when
 * stderr is a terminal; --quiet leaves only errors on stderr.  Without a
 * model the demo model answers, and one notice on stderr says so.  The
 * prompt may come from --prompt-file FILE or `-` (stdin).
 *
 * caption, ask and describe also take many images (several, directories,
 * --from LIST): batch mode (batch.h) builds and submits each image's prompt
 * through the same two functions (build_prompt, submit_prompt) on an engine
 * of max_num_seqs sequences, and writes JSON lines; with --json each line
 * also has what --json prints for one image (finish reason, usage,
 * timings, describe's "scene"), but "model".  --ignore-eos (with
 * --max-tokens) makes answers of a fixed length, for benchmarks.
 *
 * Videos: `iris run --video PATH`, or one video file given to caption, ask
 * or describe (recognized by its first bytes), with --fps and --max-frames
 * over the model's video settings (engine/prompt.h). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batch.h"
#include "cli.h"
#include "default_model.h"
#include "engine/engine.h"
#include "engine_flags.h"
#include "formats/video.h"
#include "err.h"
#include "opts.h"
#include "pool.h"
#include "server/reasoning.h"

#define MAX_IMAGES 64

static const char *CAPTION_PROMPT = "Describe this image in one sentence.";
static const char *CAPTION_VIDEO_PROMPT = "Describe this video in one sentence.";
#define MAX_VIDEOS 8
static const char *DESCRIBE_PROMPT =
    "Analyze this scene. List the objects you see with their colours and positions, describe the setting and "
    "any activities, and transcribe any visible text.";
static const char *DESCRIBE_JSON_PROMPT =
    "Analyze this scene as JSON: the objects you see (label, colour, attributes, position in the image, count), "
    "the setting, and any visible text.";
/* `describe --json`: bounded everywhere, so an answer always finishes (at most ~2,000 bytes of
 * plain text); shown by `iris describe --help`. */
#define SCENE_SCHEMA                                                                                              \
    "{\"type\":\"object\",\"properties\":{"                                                                            \
    "\"objects\":{\"type\":\"array\",\"maxItems\":8,\"items\":{\"type\":\"object\",\"properties\":{"                   \
    "\"label\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":32},"                                                \
    "\"colour\":{\"type\":\"string\",\"maxLength\":16},"                                                                 \
    "\"attributes\":{\"type\":\"array\",\"maxItems\":3,\"items\":{\"type\":\"string\",\"maxLength\":16}},"              \
    "\"position\":{\"enum\":[\"top left\",\"top\",\"top right\",\"left\",\"centre\",\"right\",\"bottom left\","        \
    "\"bottom\",\"bottom right\"]},"                                                                                    \
    "\"count\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":99}},"                                                    \
    "\"required\":[\"label\",\"colour\",\"attributes\",\"position\",\"count\"],\"additionalProperties\":false}},"      \
    "\"setting\":{\"type\":\"string\",\"maxLength\":120},"                                                               \
    "\"text\":{\"type\":\"array\",\"maxItems\":4,\"items\":{\"type\":\"string\",\"maxLength\":60}}},"                  \
    "\"required\":[\"objects\",\"setting\",\"text\"],\"additionalProperties\":false}"
#define SCENE_SCHEMA_HELP \
    "\nWith --json the answer follows this JSON Schema (and is given parsed as \"scene\"):\n" \
    "  {\"objects\": [{\"label\": str (1-32), \"colour\": str (<= 16), \"attributes\": [str (<= 16)] (<= 3),\n" \
    "                \"position\": \"top left\"|\"top\"|\"top right\"|\"left\"|\"centre\"|\"right\"|\n" \
    "                            \"bottom left\"|\"bottom\"|\"bottom right\", \"count\": 1-99}] (<= 8),\n" \
    "   \"setting\": str (<= 120), \"text\": [str (<= 60)] (<= 4)}   (lengths in characters)"

enum { F_TEMP, F_TOPK, F_TOPP, F_MINP, F_REP, F_PRES, F_FREQ, F_SEED, F_MAXTOK, F_N };

typedef struct run_args {
    const char *cmd, *model, *system, *prompt, *prompt_file, *schema_file;
    const char *images[MAX_IMAGES];
    int n_images;
    const char *videos[MAX_VIDEOS];  /* --video, or a video file given to caption/ask/describe */
    int n_videos;
    double fps;           /* --fps: frames sampled a second (0: the model's, 2) */
    long long max_frames; /* --max-frames (0: the model's, 768) */
    long long max_video_pixels; /* --max-video-pixels (0: the model's) */
    const char *glob, *from, *out;  /* batch mode (batch.h) */
    int unordered, resume;
    const char *stop[IRIS_MAX_STOP];
    int n_stop;
    long long threads;
    int json, quiet, verbose, demo, json_object, ignore_eos;
    int scene;            /* describe --json: the answer follows SCENE_SCHEMA */
    const char *reasoning;  /* --reasoning on|off (NULL: on) */
    int have[F_N];        /* which sampling flags were given, to write over the defaults */
    double fv[F_N];
    long long iv[F_N];
    char *prompt_buf;     /* --prompt-file or stdin (freed at the end) */
    char *schema_buf;     /* --json-schema's file (freed at the end) */
    iris_cli_engine ce;   /* the engine's flags (engine_flags.h) */
    iris_opt own[42];
} run_args;

#define OPT(n, sh, k, d, a, h, l, u, w, s) \
    (iris_opt) { n, sh, k, d, a, h, l, u, w, s, 0 }

/* This command's own rows: the model, the prompt, sampling and output. */
static const iris_opt *own_table(run_args *a) {
    int run = !strcmp(a->cmd, "run"), ask = !strcmp(a->cmd, "ask"), n = 0;
    iris_opt *t = a->own;
    t[n++] = OPT("--model", 'm', IRIS_OPT_STR, &a->model, "MODEL",
                 "a model directory or a repo id (Org/Name); default: the demo model", 0, 0, NULL, NULL);
    if (run) {
        t[n] = OPT("--image", 0, IRIS_OPT_LIST, a->images, "PATH", "an image (repeatable)", 0, 0, NULL, &a->n_images);
        t[n++].max = MAX_IMAGES;
    }
    if (run) {
        t[n] = OPT("--video", 0, IRIS_OPT_LIST, a->videos, "PATH", "a video (repeatable; after the images)", 0, 0, NULL,
                   &a->n_videos);
        t[n++].max = MAX_VIDEOS;
    }
    t[n++] = OPT("--fps", 0, IRIS_OPT_NUM, &a->fps, "F", "video: frames sampled a second (default 2, Qwen3-VL's)",
                 1e-3, 1000, "a number in [0.001, 1000]", NULL);
    t[n++] = OPT("--max-frames", 0, IRIS_OPT_INT, &a->max_frames, "N", "video: frames sampled at most (default 768)",
                 2, 100000, NULL, NULL);
    t[n++] = OPT("--max-video-pixels", 0, IRIS_OPT_INT, &a->max_video_pixels, "N",
                 "video: the sampled frames together resized to at most N pixels\n(default: the model's, 25,165,824)",
                 4096, 1e12, NULL, NULL);
    t[n++] = OPT("--system", 0, IRIS_OPT_STR, &a->system, "TEXT", "a system message", 0, 0, NULL, NULL);
    if (run || ask)
        t[n++] = OPT("--prompt-file", 0, IRIS_OPT_STR, &a->prompt_file, "FILE",
                     run ? "read the prompt from FILE (- for stdin) instead of PROMPT"
                         : "read the question from FILE (- for stdin) instead of QUESTION",
                     0, 0, NULL, NULL);
    t[n++] = (iris_opt)IRIS_OPT_HEADING("sampling (defaults: the model's generation_config.json)");
    t[n++] = OPT("--temperature", 0, IRIS_OPT_NUM, &a->fv[F_TEMP], "F", "0 is greedy", 0, 100, NULL, &a->have[F_TEMP]);
    t[n++] = OPT("--top-k", 0, IRIS_OPT_INT, &a->iv[F_TOPK], "N", "0 is off", 0, 1 << 24, NULL, &a->have[F_TOPK]);
    t[n++] = OPT("--top-p", 0, IRIS_OPT_NUM, &a->fv[F_TOPP], "F", "in (0, 1]; 1 is off", 1e-9, 1,
                 "a number in (0, 1]", &a->have[F_TOPP]);
    t[n++] = OPT("--min-p", 0, IRIS_OPT_NUM, &a->fv[F_MINP], "F", "in [0, 1]; 0 is off", 0, 1, NULL, &a->have[F_MINP]);
    t[n++] = OPT("--repetition-penalty", 0, IRIS_OPT_NUM, &a->fv[F_REP], "F", "> 0; 1 is off", 1e-9, 100,
                 "a number in (0, 100]", &a->have[F_REP]);
    t[n++] = OPT("--presence-penalty", 0, IRIS_OPT_NUM, &a->fv[F_PRES], "F", "in [-2, 2]", -2, 2, NULL,
                 &a->have[F_PRES]);
    t[n++] = OPT("--frequency-penalty", 0, IRIS_OPT_NUM, &a->fv[F_FREQ], "F", "in [-2, 2]", -2, 2, NULL,
                 &a->have[F_FREQ]);
    t[n++] = OPT("--seed", 0, IRIS_OPT_INT, &a->iv[F_SEED], "N", "the sampler's seed", 0, 9.2e18, NULL,
                 &a->have[F_SEED]);
    t[n++] = OPT("--max-tokens", 0, IRIS_OPT_INT, &a->iv[F_MAXTOK], "N", "tokens to generate at most (0: no limit)", 0,
                 1 << 24, NULL, &a->have[F_MAXTOK]);
    t[n++] = OPT("--ignore-eos", 0, IRIS_OPT_FLAG, &a->ignore_eos, NULL,
                 "the model's end tokens do not stop the answer: --max-tokens does\n(benchmarks)", 0, 0, NULL, NULL);
    t[n] = OPT("--stop", 0, IRIS_OPT_LIST, a->stop, "TEXT",
               "stop when the answer contains TEXT (repeatable; TEXT is not printed)", 0, 0, NULL, &a->n_stop);
    t[n++].max = IRIS_MAX_STOP;
    t[n++] = OPT("--json-schema", 0, IRIS_OPT_STR, &a->schema_file, "FILE",
                 "the answer is JSON that follows the JSON Schema in FILE (keywords\niris cannot honour are refused)",
                 0, 0, NULL, NULL);
    t[n++] = OPT("--json-object", 0, IRIS_OPT_FLAG, &a->json_object, NULL, "the answer is a JSON object", 0, 0, NULL,
                 NULL);
    t[n++] = (iris_opt)IRIS_OPT_HEADING("output");
    if (!run) {
        t[n++] = OPT("--from", 0, IRIS_OPT_STR, &a->from, "LIST", "also the images listed in LIST, one path a line (- for stdin)",
                     0, 0, NULL, NULL);
        t[n++] = OPT("--glob", 0, IRIS_OPT_STR, &a->glob, "PATTERN",
                     "in directories, the files whose name matches PATTERN (default:\n*.png, *.jpg, *.jpeg, *.webp)", 0,
                     0, NULL, NULL);
        t[n++] = OPT("--out", 'o', IRIS_OPT_STR, &a->out, "FILE", "many images: the JSON lines go to FILE (default stdout)",
                     0, 0, NULL, NULL);
        t[n++] = OPT("--resume", 0, IRIS_OPT_FLAG, &a->resume, NULL,
                     "skip the images FILE (--out) already answers; append the others", 0, 0, NULL, NULL);
        t[n++] = OPT("--unordered", 0, IRIS_OPT_FLAG, &a->unordered, NULL,
                     "many images: each line as its image finishes (default: input order)", 0, 0, NULL, NULL);
    }
    t[n++] = OPT("--json", 0, IRIS_OPT_FLAG, &a->json, NULL,
                 strcmp(a->cmd, "describe") ? "one JSON object on stdout: text, finish_reason, usage, timings"
                                            : "one JSON object on stdout: text, finish_reason, usage, timings;\n"
                                              "the answer follows the scene schema below, parsed as \"scene\"", 0, 0, NULL, NULL);
    t[n++] = OPT("--reasoning", 0, IRIS_OPT_CHOICE, &a->reasoning, "on|off",
                 "Thinking models: on (default) shows the reasoning on stderr, the\nanswer on stdout (--json: "
                 "\"reasoning\"); off hides it, and turns\nthinking off where the model can (plain Qwen3)",
                 0, 0, NULL, NULL);
    t[n++] = OPT("--quiet", 'q', IRIS_OPT_FLAG, &a->quiet, NULL, "nothing on stderr but errors", 0, 0, NULL, NULL);
    t[n++] = OPT("--verbose", 'v', IRIS_OPT_FLAG, &a->verbose, NULL,
                 "the statistics line on stderr (default: when stderr is a terminal)", 0, 0, NULL, NULL);
    t[n++] = OPT("--threads", 0, IRIS_OPT_INT, &a->threads, "N", "CPU threads (default: the machine's cores)", 1, 1024,
                 NULL, NULL);
    t[n] = (iris_opt)IRIS_OPT_TABLE_END;
    return t;
}

#define BATCH_ABOUT                                                                                      \
    "\nMany images (several, a directory walked recursively, --from LIST) load the model\n"             \
    "once and run together: one JSON line per image, {\"image\", \"text\", \"tokens\", \"ms\"}\n"        \
    "or {\"image\", \"error\"}, in input order (--json adds finish_reason, usage, timings);\n" \
    "exit status 1 when any image failed."

static void spec_of(run_args *a, iris_cli_spec *sp, int max_pos) {
    memset(sp, 0, sizeof *sp);
    sp->cmd = a->cmd;
    if (!strcmp(a->cmd, "run")) {
        sp->usage = "[MODEL] [--image PATH]... [--video PATH]... [options] PROMPT\n"
                    "[MODEL] [--image PATH]... [--video PATH]... --prompt-file FILE";
        sp->about = "Answers PROMPT (- reads it from stdin) about the images, streamed to stdout.";
        sp->max_pos = 2;
    } else if (!strcmp(a->cmd, "ask")) {
        sp->usage = "[-m MODEL] [options] IMAGE|VIDEO QUESTION\n[-m MODEL] [options] IMAGE|DIR... [--from LIST] QUESTION";
        sp->about = "Answers QUESTION (- reads it from stdin) about IMAGE (or VIDEO: MP4, WebM, MKV, MOV...),\n"
                    "streamed to stdout." BATCH_ABOUT;
    } else {
        sp->usage = "[-m MODEL] [options] IMAGE|VIDEO\n[-m MODEL] [options] IMAGE|DIR... [--from LIST] [-o FILE]";
        sp->about = !strcmp(a->cmd, "caption")
                        ? "Captions IMAGE in one sentence, streamed to stdout." BATCH_ABOUT
                        : "Describes IMAGE: objects, setting, activities, visible text." BATCH_ABOUT SCENE_SCHEMA_HELP;
    }

    if (strcmp(a->cmd, "run")) sp->max_pos = max_pos;
    sp->tables[0] = own_table(a);
    sp->tables[1] = iris_cli_engine_flags(&a->ce, strcmp(a->cmd, "run") ? IRIS_CLI_E_RUN | IRIS_CLI_E_SCHED
                                                                          : IRIS_CLI_E_RUN);
    sp->footer = "MODEL is a model directory (Hugging Face layout) or a repo id, downloaded into the\n"
                 "Hugging Face cache on first use (unless --offline).  Without it the demo model\n"
                 "answers: a 7.8M-parameter toy trained on synthetic shapes (models/demo).\n"
                 "SIZE is bytes or a number with a unit (512MiB, 8GiB).\n" IRIS_VIDEO_HELP_LINE;
}

/* The sampling flags given, written over the model's defaults in p. */
static void apply_flags(const run_args *a, iris_sampling *p) {
    if (a->have[F_TEMP]) p->temperature = (float)a->fv[F_TEMP];
    if (a->have[F_TOPK]) p->top_k = (int)a->iv[F_TOPK];
    if (a->have[F_TOPP]) p->top_p = (float)a->fv[F_TOPP];
    if (a->have[F_MINP]) p->min_p = (float)a->fv[F_MINP];
    if (a->have[F_REP]) p->repetition_penalty = (float)a->fv[F_REP];
    if (a->have[F_PRES]) p->presence_penalty = (float)a->fv[F_PRES];
    if (a->have[F_FREQ]) p->frequency_penalty = (float)a->fv[F_FREQ];
    if (a->have[F_SEED]) p->seed = a->iv[F_SEED];
    if (a->have[F_MAXTOK]) p->max_tokens = (int)a->iv[F_MAXTOK];
    if (a->have[F_TEMP] && a->fv[F_TEMP] > 0) p->do_sample = 1;
    if (a->ignore_eos) p->ignore_eos = 1;
    for (int i = 0; i < a->n_stop; i++) p->stop[p->n_stop++] = a->stop[i];
}

/* The answer's text (kept for --json) and the final event. */
typedef struct answer {
    char *text;
    size_t len, cap;
} answer;

static int answer_add(answer *w, const char *s, size_t n) {
    if (w->len + n + 1 > w->cap) {
        size_t cap = (w->len + n + 1) * 2;
        char *t = realloc(w->text, cap);
        if (!t) return -1;
        w->text = t, w->cap = cap;
    }
    memcpy(w->text + w->len, s, n);
    w->len += n;
    w->text[w->len] = 0;
    return 0;
}

/* The members of an answer's --json object after "text" (and in batch mode, after "ms"): the finish
 * reason, usage and timings, and describe --json's "scene" (null when cut short).  -1 when out of
 * memory. */
static int answer_fields(const run_args *a, json_t *o, const char *text, size_t len, int finish, const iris_usage *u) {
    double gen_s = u->total_s - u->ttft_s;
    int rc = json_object_set_new(o, "finish_reason", json_string(iris_finish_reason_name(finish)));
    rc |= json_object_set_new(o, "usage", json_pack("{s:i, s:i}", "prompt_tokens", u->prompt_tokens,
                                                    "completion_tokens", u->completion_tokens));
    rc |= json_object_set_new(o, "timings", json_pack("{s:f, s:f, s:f}", "ttft_s", u->ttft_s, "total_s", u->total_s,
                                                      "decode_tok_per_s",
                                                      u->completion_tokens > 1 && gen_s > 0
                                                          ? (u->completion_tokens - 1) / gen_s : 0.0));
    if (a->scene) {
        json_t *sc = json_loadb(text, len, 0, NULL);
        rc |= json_object_set_new(o, "scene", sc ? sc : json_null());
    }
    return rc ? -1 : 0;
}

static void print_json(const run_args *a, const iris_event *ev, const answer *w, const answer *why) {
    json_t *o = json_pack("{s:s, s:s#}", "model", a->model, "text", w->text ? w->text : "", w->len);
    if (o && answer_fields(a, o, w->text ? w->text : "", w->len, ev->finish_reason, &ev->usage)) json_decref(o), o = NULL;
    if (o && why) json_object_set_new(o, "reasoning", json_stringn(why->text ? why->text : "", why->len));
    if (o) json_dumpf(o, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
    fputc('\n', stdout);
    json_decref(o);
}

static int reasoning_off(const run_args *a) { return a->reasoning && !strcmp(a->reasoning, "off"); }

/* One delta: a Thinking model's reasoning (reasoning.h) to stderr or, with --json, kept aside;
 * the answer to stdout or kept.  -1 when out of memory. */
static int put_text(const run_args *a, iris_reasoning *rs, const iris_event *ev, answer *w, answer *why, int *shown) {
    iris_reasoning_piece pc = {.content = (char *)ev->text, .content_len = ev->text_len};
    int split = rs->on, rc = 0;
    if (split && iris_reasoning_feed(rs, ev->text, ev->text_len, ev->kind == IRIS_EVENT_DONE, &pc)) return -1;
    if (pc.reasoning_len && !reasoning_off(a)) {
        if (a->json) rc = answer_add(why, pc.reasoning, pc.reasoning_len);
        else if (!a->quiet) fwrite(pc.reasoning, 1, pc.reasoning_len, stderr), *shown = 1;
    }
    if (pc.content_len) {
        if (*shown == 1) fputc('\n', stderr), *shown = 2; /* the reasoning ends its own line */
        if (a->json) rc |= answer_add(w, pc.content, pc.content_len);
        else fwrite(pc.content, 1, pc.content_len, stdout), fflush(stdout);
    }
    if (split) iris_reasoning_piece_free(&pc);
    return rc;
}

/* Stream the request's text to stdout (or keep it for --json), then the statistics.  A Thinking
 * model's reasoning goes to stderr (--reasoning off: nowhere). */
static int stream(iris_engine *e, const run_args *a, iris_request *r, iris_err *err) {
    iris_event ev;
    answer w = {0}, why = {0};
    iris_reasoning rs;
    iris_reasoning_init(&rs, iris_engine_reasoning(e, reasoning_off(a)));
    int shown = 0;
    while (iris_request_next(r, &ev, -1) == IRIS_OK) {
        if ((ev.text_len || (rs.on && ev.kind == IRIS_EVENT_DONE)) && put_text(a, &rs, &ev, &w, &why, &shown)) {
            free(w.text), free(why.text);
            return iris_err_set(err, IRIS_ENOMEM, "out of memory");
        }
        if (ev.kind != IRIS_EVENT_DONE) continue;
        if (ev.finish_reason == IRIS_FINISH_REASON_ERROR) {
            free(w.text), free(why.text);
            *err = ev.err;
            return ev.err.code ? ev.err.code : IRIS_EINVAL;
        }
        const iris_usage *u = &ev.usage;
        double gen_s = u->total_s - u->ttft_s;
        if (shown == 1) fputc('\n', stderr); /* reasoning cut short, no answer after it */
        if (a->json) print_json(a, &ev, &w, rs.on && !reasoning_off(a) ? &why : NULL);
        else fprintf(stdout, "\n");
        fflush(stdout);
        if (!a->quiet && (a->verbose || isatty(2)))
            fprintf(stderr, "iris: %d prompt tokens, %d generated (%s), time to first token %.3f s, %.1f tok/s\n",
                    u->prompt_tokens, u->completion_tokens, iris_finish_reason_name(ev.finish_reason), u->ttft_s,
                    u->completion_tokens > 1 && gen_s > 0 ? (u->completion_tokens - 1) / gen_s : 0.0);
        free(w.text), free(why.text);
        return IRIS_OK;
    }
    free(w.text), free(why.text);
    return iris_err_set(err, IRIS_EINVAL, "the engine's channel failed");
}

/* The prompt of one user turn about images[0..n) and a->videos (the one builder, engine/prompt.c). */
static int build_prompt(iris_engine *e, const run_args *a, const char *const *images, int n, iris_prompt *p,
                        iris_err *err) {
    iris_prompt_image ims[MAX_IMAGES];
    iris_prompt_video vids[MAX_VIDEOS];
    memset(ims, 0, sizeof ims);
    memset(vids, 0, sizeof vids);
    for (int i = 0; i < n; i++) ims[i].path = images[i];
    int nv = images == a->images ? a->n_videos : 0;
    for (int i = 0; i < nv; i++)
        vids[i] = (iris_prompt_video){.path = a->videos[i], .fps = a->fps, .max_frames = (int)a->max_frames};
    json_t *msgs = iris_prompt_one_turn_av(a->system, n, nv, a->prompt);
    if (!msgs) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    iris_prompt_ctx ctx;
    iris_engine_prompt_ctx(e, &ctx);
    ctx.no_thinking = reasoning_off(a);
    ctx.max_video_pixels = a->max_video_pixels;
    int rc = iris_prompt_build_media(&ctx, msgs, ims, n, vids, nv, p, NULL, err);
    json_decref(msgs);
    return rc;
}

/* The request: the built prompt (the engine's on success) with the sampling flags over the
 * model's defaults; events to on_event when given, else to the request's queue. */
static int submit_prompt(iris_engine *e, const run_args *a, iris_prompt *p, iris_event_fn on_event, void *ud,
                         iris_request **r, iris_err *err) {
    iris_request_params rp;
    iris_request_params_default(e, &rp);
    apply_flags(a, &rp.sampling);
    if (a->schema_buf) rp.sampling.json_schema = a->schema_buf;
    else if (a->scene) rp.sampling.json_schema = SCENE_SCHEMA;
    else if (a->json_object) rp.sampling.json_schema = "{\"type\":\"object\"}";
    rp.prompt = p;
    rp.no_thinking = reasoning_off(a);      /* as build_prompt: a grammar waits for a reasoning's end */
    rp.on_event = on_event;
    rp.ud = ud;
    int rc = iris_engine_submit(e, &rp, r, err);
    iris_prompt_free(p);  /* the engine's now (zeroed) unless submit failed early */
    return rc;
}

/* One user turn through the engine: the prompt, the request, the answer. */
static int generate(iris_engine *e, const run_args *a, iris_err *err) {
    iris_prompt p;
    int rc = build_prompt(e, a, a->images, a->n_images, &p, err);
    if (rc) return rc;
    iris_request *r = NULL;
    rc = submit_prompt(e, a, &p, NULL, NULL, &r, err);
    if (!rc) rc = stream(e, a, r, err);
    iris_request_free(r);
    return rc;
}

/* Batch mode (batch.h): the same prompt and request, one image each. */
typedef struct batch_ud {
    iris_engine *e;
    const run_args *a;
} batch_ud;

static int batch_build(void *ud, const char *path, iris_prompt *p, iris_err *err) {
    batch_ud *u = ud;
    return build_prompt(u->e, u->a, &path, 1, p, err);
}

static int batch_submit(void *ud, iris_prompt *p, iris_event_fn on_event, void *ev_ud, iris_request **r,
                        iris_err *err) {
    batch_ud *u = ud;
    return submit_prompt(u->e, u->a, p, on_event, ev_ud, r, err);
}

/* --json in batch mode: each line also has what --json prints for one image (but "model"). */
static int batch_fields(void *ud, json_t *line, const char *text, size_t len, int finish, const iris_usage *u) {
    batch_ud *b = ud;
    return b->a->json ? answer_fields(b->a, line, text, len, finish, u) : 0;
}

/* Once, on stderr, when the demo model answers because no model was given. */
static void demo_notice(const run_args *a) {
    if (a->quiet) return;
    fprintf(stderr,
            "iris %s: no model given: the demo model answers (7.8M parameters, trained on synthetic shapes; its\n"
            "  answers about real photos are meaningless).  For a real model: iris %s -m Qwen/Qwen3-VL-2B-Instruct-FP8 "
            "...\n  (downloaded on first use; `iris plan Qwen/Qwen3-VL-4B-Instruct-FP8` shows what fits your GPU)\n",
            a->cmd, a->cmd);
}

/* Sequences in the engine at once in batch mode, unless --max-num-seqs: the engine's default on a
 * GPU, fewer on the CPU, where a step's time grows with its batch. */
static int batch_seqs(const iris_engine_opts *eo) {
#ifdef IRIS_CUDA
    if (!eo->device || strcmp(eo->device, "cpu")) return eo->max_num_seqs > 0 ? eo->max_num_seqs : 64;
#endif
    (void)eo;
    return 16;
}

/* Many images (batch.h): the list first (nothing to do loads no model), then one engine. */
static int run_batch(run_args *a, iris_engine_opts *eo, const char *const *paths, int n, iris_err *err) {
    if (!a->ce.seen[CE_SEQS]) eo->max_num_seqs = batch_seqs(eo);
    int waiting = eo->max_waiting > 0 ? eo->max_waiting : 256;
    iris_batch_opts bo = {.glob = a->glob, .from = a->from, .out = a->out, .unordered = a->unordered,
                          .resume = a->resume, .quiet = a->quiet,
                          .max_in_flight = eo->max_num_seqs < waiting ? eo->max_num_seqs : waiting};
    iris_batch *b = NULL;
    int rc = iris_batch_prepare(&bo, paths, n, &b, err);
    if (!rc && !iris_batch_count(b)) {
        if (!a->quiet) fprintf(stderr, "iris: every image is already in %s\n", a->out);
        iris_batch_free(b);
        return 0;
    }
    iris_engine *e = NULL;
    if (!rc) eo->host_warm = iris_batch_count(b) < bo.max_in_flight ? iris_batch_count(b) : bo.max_in_flight;
    if (!rc) rc = iris_engine_open(eo, &e, err);
    if (!rc) {
        batch_ud u = {e, a};
        iris_batch_ops ops = {&u, batch_build, batch_submit, batch_fields};
        rc = iris_batch_run(b, &ops, err);
    }
    iris_engine_close(e);
    iris_batch_free(b);
    return rc;
}

/* One image (or `run`'s images) as plain text, or many (batch) as JSON lines. */
static int run_common(run_args *a, const char *const *paths, int n_paths, int batch) {
    iris_err err = {0};
    if (a->n_stop)
        for (int i = 0; i < a->n_stop; i++)
            if (!*a->stop[i]) return iris_cli_usage_error(a->cmd, "--stop '': give a non-empty text");
    if (a->schema_file && a->json_object)
        return iris_cli_usage_error(a->cmd, "give --json-schema FILE or --json-object, not both");
    if (a->ignore_eos && !(a->have[F_MAXTOK] && a->iv[F_MAXTOK] > 0))
        return iris_cli_usage_error(a->cmd, "--ignore-eos: give --max-tokens N too");
    if (a->resume && !a->out) return iris_cli_usage_error(a->cmd, "--resume reads and appends to --out FILE: give it");
    if (a->schema_file && !(a->schema_buf = iris_cli_read_text(a->schema_file, &err))) return iris_cli_fail(&err);
    iris_cli_quiet(a->quiet);
    /* the engine's info lines are statistics too: shown with --verbose or on a terminal */
    if (!a->quiet && !a->verbose && !isatty(2) && !getenv("IRIS_LOG")) iris_log_set_level(IRIS_LOG_WARN);
    if (a->threads) iris_pool_set_threads((int)a->threads);
    if (a->demo) demo_notice(a);
    iris_engine_opts eo;
    iris_engine_opts_default(&eo);
    iris_cli_engine_apply(&a->ce, &eo);
    eo.model = a->model;
    int rc;
    if (batch) {
        rc = run_batch(a, &eo, paths, n_paths, &err);
    } else {
        eo.max_num_seqs = 1;
        iris_engine *e = NULL;
        rc = iris_engine_open(&eo, &e, &err);
        if (!rc) rc = generate(e, a, &err);
        iris_engine_close(e);
    }
    free(a->prompt_buf);
    free(a->schema_buf);
    return rc < 0 ? iris_cli_fail(&err) : rc;
}

/* The prompt from --prompt-file or `-` (stdin) when asked: 0, or the exit status. */
static int read_prompt(run_args *a, const char *given) {
    const char *path = a->prompt_file;
    if (path && given) return iris_cli_usage_error(a->cmd, "give the prompt once: --prompt-file or an argument");
    if (!path && given && !strcmp(given, "-")) path = "-";
    if (!path) {
        a->prompt = given;
        return 0;
    }
    iris_err err = {0};
    if (!(a->prompt_buf = iris_cli_read_text(path, &err))) return iris_cli_fail(&err);
    a->prompt = a->prompt_buf;
    return 0;
}

/* The model when none was given: the demo model (noticed), or a usage error. */
static int default_model(run_args *a) {
    if (a->model) return 0;
    if (!(a->model = iris_default_model_dir()))
        return iris_cli_usage_error(a->cmd, "no --model and no demo model found (models/demo beside the executable, "
                                            "or $IRIS_DEMO_MODEL): give -m MODEL, a model directory or a repo id");
    a->demo = 1;
    return 0;
}

static int parse(run_args *a, int argc, char **argv, const char **pos, int *n_pos) {
    memset(a, 0, sizeof *a);
    a->cmd = argv[0];
    iris_cli_spec sp;
    spec_of(a, &sp, argc);
    return iris_cli_parse(&sp, argc, argv, pos, n_pos);
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A file whose first bytes are a video container's (formats/video.h); images are everything else. */
static int is_video_file(const char *path) {
    unsigned char head[256];
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    return iris_video_sniff(head, n); /* animated GIFs too: the image decoders take none */
}

/* caption, describe: IMAGE...; ask: IMAGE... QUESTION (or --prompt-file).  One image file is
 * answered as plain text; several, a directory, --from or --out go through batch mode. */
static int fixed_args(run_args *a, const char **pos, int n_pos, const char *prompt, int wants_question) {
    int rc, n_img = n_pos - (wants_question && !a->prompt_file);
    if (n_img < 1 && !(a->from && n_img == 0))
        return iris_cli_usage_error(a->cmd, "give %s", wants_question && !a->prompt_file ? "IMAGE and QUESTION"
                                                                                          : "IMAGE (or several, a directory, --from LIST)");
    if ((rc = default_model(a))) return rc;
    if (wants_question) {
        if ((rc = read_prompt(a, n_img < n_pos ? pos[n_pos - 1] : NULL))) return rc;
    } else {
        a->prompt = prompt;
    }
    if (!strcmp(a->cmd, "describe") && a->json && !a->schema_file && !a->json_object) {
        a->scene = 1;
        a->prompt = DESCRIBE_JSON_PROMPT;
    }
    int batch = n_img != 1 || a->from || a->out || a->resume || is_dir(pos[0]);
    if (!batch && is_video_file(pos[0])) {
        a->videos[a->n_videos++] = pos[0];
        if (a->prompt == CAPTION_PROMPT) a->prompt = CAPTION_VIDEO_PROMPT;
    } else if (!batch) {
        a->images[a->n_images++] = pos[0];
    }
    return run_common(a, pos, n_img, batch);
}

static int fixed_prompt(int argc, char **argv, const char *prompt, int wants_question) {
    run_args a;
    const char **pos = calloc((size_t)argc + 1, sizeof *pos);
    if (!pos) return fprintf(stderr, "iris: out of memory\n"), 1;
    int n_pos, rc = parse(&a, argc, argv, pos, &n_pos);
    if (rc < 0) rc = fixed_args(&a, pos, n_pos, prompt, wants_question);
    free(pos);
    return rc;
}

int iris_cmd_caption(int argc, char **argv) { return fixed_prompt(argc, argv, CAPTION_PROMPT, 0); }
int iris_cmd_describe(int argc, char **argv) { return fixed_prompt(argc, argv, DESCRIBE_PROMPT, 0); }
int iris_cmd_ask(int argc, char **argv) { return fixed_prompt(argc, argv, NULL, 1); }

int iris_cmd_run(int argc, char **argv) {
    run_args a;
    const char *pos[2];
    int n_pos, rc = parse(&a, argc, argv, pos, &n_pos);
    if (rc >= 0) return rc;
    /* [MODEL] PROMPT, or [MODEL] with --prompt-file */
    int want_prompt = !a.prompt_file;
    if (n_pos < want_prompt) return iris_cli_usage_error("run", "give the PROMPT (or --prompt-file FILE)");
    if (n_pos > want_prompt + 1) return iris_cli_usage_error("run", "unexpected argument '%s'", pos[n_pos - 1]);
    if (n_pos == want_prompt + 1) {
        if (a.model) return iris_cli_usage_error("run", "MODEL given twice ('%s' and -m %s)", pos[0], a.model);
        a.model = pos[0];
    }
    if ((rc = default_model(&a))) return rc;
    if ((rc = read_prompt(&a, want_prompt ? pos[n_pos - 1] : NULL))) return rc;
    return run_common(&a, NULL, 0, 0);
}
