/* batch.h: many images through one engine, for `iris caption|ask|describe`
 * given several images, a directory or --from LIST (cmd_run.c).
 *
 * iris_batch_prepare gathers the list (files as given, directories walked
 * recursively in name order, keeping image files or the names --glob
 * matches, --from's lines), drops what --resume finds already answered in
 * the output file, and opens the output.  iris_batch_run then keeps up to
 * max_in_flight requests in the engine (its continuous batching) while a
 * few worker threads build the next images' prompts ahead of it.  The
 * prompt building and the request itself are the caller's (ops), so the
 * command keeps one request path for one image and for many.
 *
 * Output: one JSON line per image, {"image", "text", "tokens", "ms"} (and
 * what ops->fields adds) or {"image", "error"}, in input order (or as they
 * finish with unordered);
 * progress on stderr: a bar on a terminal that the lines do not go to; a
 * summary line at the end. */
#ifndef IRIS_CLI_BATCH_H
#define IRIS_CLI_BATCH_H

#include <jansson.h>

#include "iris.h"

struct iris_prompt;

typedef struct iris_batch_opts {
    const char *glob;     /* directories: keep the file names that match (fnmatch); NULL: image extensions */
    const char *from;     /* a file of paths, one a line ("-": stdin), or NULL */
    const char *out;      /* the JSONL file, or NULL for stdout */
    int unordered, resume, quiet;
    int max_in_flight;    /* requests in the engine at once */
    int workers;          /* prompt-building threads (0: from the cores) */
} iris_batch_opts;

typedef struct iris_batch_ops {
    void *ud;
    /* Build the prompt of the image at path (any worker thread). */
    int (*build)(void *ud, const char *path, struct iris_prompt *p, iris_err *err);
    /* Submit a built prompt (taken over as iris_engine_submit does); events go to on_event(ev_ud). */
    int (*submit)(void *ud, struct iris_prompt *p, iris_event_fn on_event, void *ev_ud, iris_request **r,
                  iris_err *err);
    /* Optional: more members for an answered image's line (the main thread), from its text and the
     * request's end; 0, or -1 when out of memory. */
    int (*fields)(void *ud, json_t *line, const char *text, size_t len, int finish_reason, const iris_usage *u);
} iris_batch_ops;

typedef struct iris_batch iris_batch;

/* The list from paths[0..n) and o->from, less the images already in o->out with --resume; the
 * output opened.  *out is freed with iris_batch_free. */
int iris_batch_prepare(const iris_batch_opts *o, const char *const *paths, int n, iris_batch **out, iris_err *err);
/* Images left to do (0 when --resume found everything done). */
int iris_batch_count(const iris_batch *b);
/* Runs the images; returns 0 when all were answered, 1 when any failed (their lines say why), or a
 * negative status when the output could not be written (err set). */
int iris_batch_run(iris_batch *b, const iris_batch_ops *ops, iris_err *err);
void iris_batch_free(iris_batch *b);

#endif
