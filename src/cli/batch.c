/* batch.c: many images through one engine (batch.h).
 *
 * The list: each path given is a file (kept as given, whatever its name) or
 * a directory, walked recursively with its entries in name order (names
 * starting with '.' skipped), keeping the files whose name matches --glob,
 * or without it the image extensions (.png .jpg .jpeg .webp, any case).
 * --from's lines are paths too (blank lines skipped).  With --resume the
 * output file is read first: an image with a line holding "text" is done;
 * one whose line holds "error" is tried again.  The file is then appended
 * to (a last line cut short, as a killed run leaves it, is cut off first).
 *
 * The run: worker threads take the next image in list order and build its
 * prompt (decode, resize, patchify, tokenize: ops->build), at most a few
 * images ahead of the submitting thread, so memory stays bounded.  The
 * main thread submits the built prompts in list order while fewer than
 * max_in_flight requests are in the engine; events arrive on the engine
 * thread (on_event: append, and at DONE mark the image done and wake the
 * main thread), which writes each finished image's line: in list order, or
 * in order of finishing with unordered.  A failed build or request is a
 * line with "error"; the run goes on.  One lock and one condition guard the
 * shared state (indices, states, the done queue). */
#include "batch.h"
#include "clock.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/prompt.h"
#include "err.h"

enum { S_PENDING, S_BUILT, S_RUNNING, S_DONE };

typedef struct item {
    const char *path;
    struct iris_batch *b;
    int state;
    iris_prompt prompt;
    char *err;                  /* the failure's message, or NULL */
    char *text;
    size_t len, cap;
    int oom, tokens, finish;
    iris_usage usage;
    double t_build, t_start, ms;
    iris_request *req;
} item;

struct iris_batch {
    iris_batch_opts o;
    char **all;                 /* every path gathered (owned) */
    int n_all, cap_all, n_skipped;
    item *it;
    int n;
    FILE *out;
    const iris_batch_ops *ops;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int next_build, next_submit, next_emit, n_emitted, in_flight, lookahead, stop;
    int *done_q, done_head, done_tail;
    int n_failed;
    double t0, last_bar;
};

/* ---- the list ------------------------------------------------------------------------------ */

static int add_path(iris_batch *b, const char *p, iris_err *err) {
    if (b->n_all == b->cap_all) {
        int nc = b->cap_all ? b->cap_all * 2 : 64;
        char **t = realloc(b->all, sizeof *t * (size_t)nc);
        if (!t) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
        b->all = t, b->cap_all = nc;
    }
    if (!(b->all[b->n_all] = strdup(p))) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    b->n_all++;
    return 0;
}

static int wanted(const iris_batch *b, const char *name) {
    if (b->o.glob) return fnmatch(b->o.glob, name, 0) == 0;
    const char *dot = strrchr(name, '.');
    static const char *ext[] = {".png", ".jpg", ".jpeg", ".webp"};
    for (size_t i = 0; dot && i < sizeof ext / sizeof *ext; i++)
        if (!strcasecmp(dot, ext[i])) return 1;
    return 0;
}

static int by_name(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

/* The files under dir, recursively, in name order. */
static int walk(iris_batch *b, const char *dir, int depth, iris_err *err) {
    if (depth > 64) return iris_err_set(err, IRIS_ELIMIT, "%s: directories nested too deep", dir);
    DIR *d = opendir(dir);
    if (!d) return iris_err_set(err, IRIS_EIO, "%s: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, cap = 0, rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            char **t = realloc(names, sizeof *t * (size_t)cap);
            if (!t) { rc = iris_err_set(err, IRIS_ENOMEM, "out of memory"); break; }
            names = t;
        }
        if (!(names[n] = strdup(de->d_name))) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
        else n++;
    }
    closedir(d);
    if (n) qsort(names, (size_t)n, sizeof *names, by_name);
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    for (int i = 0; i < n; i++) {
        if (!rc) {
            char *full = malloc(dl + strlen(names[i]) + 2);
            if (!full) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
            else {
                sprintf(full, "%.*s/%s", (int)dl, dir, names[i]);
                struct stat st;
                if (stat(full, &st) == 0 && S_ISDIR(st.st_mode)) rc = walk(b, full, depth + 1, err);
                else if (wanted(b, names[i])) rc = add_path(b, full, err);
                free(full);
            }
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

static int gather(iris_batch *b, const char *p, iris_err *err) {
    struct stat st;
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) return walk(b, p, 0, err);
    return add_path(b, p, err);  /* a file, or a path that fails later on its own line */
}

static int read_from(iris_batch *b, const char *list, iris_err *err) {
    FILE *f = strcmp(list, "-") ? fopen(list, "r") : stdin;
    if (!f) return iris_err_set(err, IRIS_EIO, "--from %s: %s", list, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ')) line[--len] = 0;
        if (len) rc = gather(b, line, err);
    }
    free(line);
    if (f != stdin) fclose(f);
    return rc;
}

/* --resume: the images the output file already answers (sorted, for bsearch); a last line cut
 * short (a run killed while writing) is cut off the file. */
static int read_done(const char *path, char ***done, int *n_done, iris_err *err) {
    *done = NULL, *n_done = 0;
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : iris_err_set(err, IRIS_EIO, "--resume %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int n = 0, room = 0, rc = 0;
    char **d = NULL;
    long whole = 0;  /* the bytes of the complete lines */
    int cut = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        if ((cut = line[len - 1] != '\n')) break;
        whole += len;
        json_t *o = json_loads(line, JSON_DECODE_ANY, NULL);
        const char *im = json_string_value(json_object_get(o, "image"));
        if (im && json_is_string(json_object_get(o, "text"))) {
            if (n == room) {
                room = room ? room * 2 : 64;
                char **t = realloc(d, sizeof *t * (size_t)room);
                if (!t) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
                else d = t;
            }
            if (!rc && !(d[n++] = strdup(im))) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    if (!rc && cut && truncate(path, whole))
        rc = iris_err_set(err, IRIS_EIO, "--resume %s: %s", path, strerror(errno));
    if (n) qsort(d, (size_t)n, sizeof *d, by_name);
    *done = d, *n_done = n;
    return rc;
}

int iris_batch_prepare(const iris_batch_opts *o, const char *const *paths, int n, iris_batch **out, iris_err *err) {
    *out = NULL;
    iris_batch *b = calloc(1, sizeof *b);
    if (!b) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    b->o = *o;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    *out = b;
    int rc = 0;
    for (int i = 0; !rc && i < n; i++) rc = gather(b, paths[i], err);
    if (!rc && o->from) rc = read_from(b, o->from, err);
    if (!rc && !b->n_all) rc = iris_err_set(err, IRIS_ENOTFOUND, "no images found");
    char **done = NULL;
    int n_done = 0;
    if (!rc && o->resume) rc = read_done(o->out, &done, &n_done, err);
    if (!rc && !(b->it = calloc((size_t)b->n_all, sizeof *b->it)))
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
    if (!rc && !(b->done_q = calloc((size_t)b->n_all, sizeof *b->done_q)))
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < b->n_all; i++) {
        if (n_done && bsearch(&b->all[i], done, (size_t)n_done, sizeof *done, by_name)) {
            b->n_skipped++;
            continue;
        }
        b->it[b->n].path = b->all[i];
        b->it[b->n++].b = b;
    }
    for (int i = 0; i < n_done; i++) free(done[i]);
    free(done);
    if (!rc && o->out && b->n) {
        if (!(b->out = fopen(o->out, o->resume ? "a" : "w")))
            rc = iris_err_set(err, IRIS_EIO, "%s: %s", o->out, strerror(errno));
    } else if (!rc && !o->out) {
        b->out = stdout;
    }
    return rc;
}

int iris_batch_count(const iris_batch *b) { return b->n; }

void iris_batch_free(iris_batch *b) {
    if (!b) return;
    for (int i = 0; i < b->n; i++) {
        iris_prompt_free(&b->it[i].prompt);
        iris_request_free(b->it[i].req);
        free(b->it[i].text);
        free(b->it[i].err);
    }
    for (int i = 0; i < b->n_all; i++) free(b->all[i]);
    if (b->out && b->out != stdout) fclose(b->out);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b->all), free(b->it), free(b->done_q), free(b);
}

/* ---- the run -------------------------------------------------------------------------------- */

/* Called with the lock held. */
static void finish(iris_batch *b, item *t) {
    t->state = S_DONE;
    b->done_q[b->done_tail++] = (int)(t - b->it);
    pthread_cond_broadcast(&b->cv);
}

static void *worker(void *arg) {
    iris_batch *b = arg;
    pthread_mutex_lock(&b->mu);
    while (!b->stop && b->next_build < b->n) {
        if (b->next_build >= b->next_submit + b->lookahead) {
            pthread_cond_wait(&b->cv, &b->mu);
            continue;
        }
        item *t = &b->it[b->next_build++];
        pthread_mutex_unlock(&b->mu);
        iris_err e = {0};
        double t0 = iris_now_s();
        int rc = b->ops->build(b->ops->ud, t->path, &t->prompt, &e);
        pthread_mutex_lock(&b->mu);
        t->t_build = iris_now_s() - t0;
        if (rc) t->err = strdup(e.msg[0] ? e.msg : iris_strerror(rc));
        t->state = S_BUILT;
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* The engine thread: keep the text, and at DONE the counts. */
static void on_event(void *ud, const iris_event *ev) {
    item *t = ud;
    if (ev->text_len && !t->oom) {
        if (t->len + ev->text_len + 1 > t->cap) {
            size_t cap = (t->len + ev->text_len + 1) * 2;
            char *s = realloc(t->text, cap);
            if (s) t->text = s, t->cap = cap;
            else t->oom = 1;
        }
        if (!t->oom) {
            memcpy(t->text + t->len, ev->text, ev->text_len);
            t->len += ev->text_len;
            t->text[t->len] = 0;
        }
    }
    if (ev->kind != IRIS_EVENT_DONE) return;
    iris_batch *b = t->b;
    pthread_mutex_lock(&b->mu);
    t->tokens = ev->usage.completion_tokens;
    t->usage = ev->usage;
    t->finish = ev->finish_reason;
    t->ms = (t->t_build + iris_now_s() - t->t_start) * 1e3;
    if (ev->finish_reason == IRIS_FINISH_REASON_ERROR)
        t->err = strdup(ev->err.msg[0] ? ev->err.msg : iris_strerror(ev->err.code));
    else if (t->oom)
        t->err = strdup("out of memory");
    b->in_flight--;
    finish(b, t);
    pthread_mutex_unlock(&b->mu);
}

/* Submit the built images in list order while there is room; called and returns with the lock. */
static void submit_ready(iris_batch *b) {
    while (b->next_submit < b->n && b->in_flight < b->o.max_in_flight && b->it[b->next_submit].state == S_BUILT) {
        item *t = &b->it[b->next_submit++];
        pthread_cond_broadcast(&b->cv);  /* the workers may go further ahead */
        if (t->err) {
            finish(b, t);
            continue;
        }
        t->state = S_RUNNING;
        b->in_flight++;
        pthread_mutex_unlock(&b->mu);
        iris_err e = {0};
        iris_request *r = NULL;
        t->t_start = iris_now_s();
        int rc = b->ops->submit(b->ops->ud, &t->prompt, on_event, t, &r, &e);
        iris_prompt_free(&t->prompt);
        pthread_mutex_lock(&b->mu);
        t->req = r;
        if (rc) {
            t->err = strdup(e.msg[0] ? e.msg : iris_strerror(rc));
            b->in_flight--;
            finish(b, t);
        }
    }
}

static int write_line(iris_batch *b, item *t) {
    json_t *o = t->err ? json_pack("{s:s, s:s}", "image", t->path, "error", t->err)
                       : json_pack("{s:s, s:s#, s:i, s:I}", "image", t->path, "text", t->text ? t->text : "",
                                   t->len, "tokens", t->tokens, "ms", (json_int_t)llround(t->ms));
    if (t->err) b->n_failed++;
    int rc = o ? 0 : -1;
    if (o && !t->err && b->ops->fields)
        rc = b->ops->fields(b->ops->ud, o, t->text ? t->text : "", t->len, t->finish, &t->usage);
    if (!rc) rc = json_dumpf(o, b->out, JSON_COMPACT);
    json_decref(o);
    if (!rc && fputc('\n', b->out) == EOF) rc = -1;
    if (!rc) fflush(b->out);
    iris_request_free(t->req);
    t->req = NULL;
    free(t->text);
    t->text = NULL;
    b->n_emitted++;
    return rc;
}

/* The bar on stderr, when it is a terminal that the lines do not go to. */
static void progress(iris_batch *b, int last) {
    if (b->o.quiet || !isatty(2) || (b->out == stdout && isatty(1))) return;
    double t = iris_now_s();
    if (!last && t - b->last_bar < 0.1) return;
    b->last_bar = t;
    double el = t - b->t0, rate = el > 0 ? b->n_emitted / el : 0;
    int eta = rate > 0 ? (int)((b->n - b->n_emitted) / rate) : 0, w = 30, fill = b->n ? w * b->n_emitted / b->n : w;
    char bar[64];
    for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '-';
    bar[w] = 0;
    fprintf(stderr, "\r[%s] %d/%d  %.1f images/s  ETA %d:%02d  ", bar, b->n_emitted, b->n, rate, eta / 60, eta % 60);
    if (last) fputc('\n', stderr);
}

/* Write the finished lines that may go now; called and returns with the lock. */
static int emit_ready(iris_batch *b) {
    int rc = 0;
    for (;;) {
        item *t = NULL;
        if (b->o.unordered && b->done_head < b->done_tail) t = &b->it[b->done_q[b->done_head++]];
        else if (!b->o.unordered && b->next_emit < b->n && b->it[b->next_emit].state == S_DONE)
            t = &b->it[b->next_emit++];
        if (!t) return rc;
        if (write_line(b, t)) rc = -1;
        progress(b, 0);
    }
}

int iris_batch_run(iris_batch *b, const iris_batch_ops *ops, iris_err *err) {
    b->ops = ops;
    if (b->o.max_in_flight < 1) b->o.max_in_flight = 1;
    int nw = b->o.workers;
    if (nw <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        nw = nc >= 16 ? 8 : nc >= 4 ? (int)nc / 2 : 2;
    }
    if (nw > b->n) nw = b->n;
    b->lookahead = b->o.max_in_flight / 2 + 2 * nw;
    b->t0 = iris_now_s();
    pthread_t th[16];
    int started = 0;
    for (int i = 0; i < nw && i < 16; i++)
        if (!pthread_create(&th[i], NULL, worker, b)) started++;
    int rc = 0;
    pthread_mutex_lock(&b->mu);
    if (!started) {
        b->stop = 1;
        rc = iris_err_set(err, IRIS_ENOMEM, "could not start the prompt-building threads");
    }
    while (!rc && b->n_emitted < b->n) {
        submit_ready(b);
        if (emit_ready(b)) rc = iris_err_set(err, IRIS_EIO, "%s: %s", b->o.out ? b->o.out : "stdout", strerror(errno));
        else if (b->n_emitted < b->n) pthread_cond_wait(&b->cv, &b->mu);
    }
    b->stop = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    /* a write error stopped the loop: let the requests in flight end before their items go */
    for (int i = 0; i < b->n; i++)
        if (b->it[i].req) iris_request_cancel(b->it[i].req);
    pthread_mutex_lock(&b->mu);
    while (b->in_flight) pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
    progress(b, 1);
    double el = iris_now_s() - b->t0;
    if (!b->o.quiet)
        fprintf(stderr, "iris: %d image%s in %.1f s (%.2f images/s), %d failed%s", b->n_emitted,
                b->n_emitted == 1 ? "" : "s", el, el > 0 ? b->n_emitted / el : 0.0, b->n_failed,
                b->n_skipped ? "" : "\n");
    if (!b->o.quiet && b->n_skipped) fprintf(stderr, ", %d skipped (already in %s)\n", b->n_skipped, b->o.out);
    if (rc) return rc;
    return b->n_failed ? 1 : 0;
}
