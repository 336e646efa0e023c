/* hub.c: `iris pull`: one revision of a Hub repo into the shared cache.
 *
 * The steps follow huggingface_hub's snapshot_download:
 *   1. GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true: the commit
 *      (`sha`) and the files (`siblings`: rfilename, size, lfs.sha256).
 *   2. Keep the files iris reads (iris_hub_wanted_file); those already linked
 *      in snapshots/<commit>/ are done, so a second pull fetches nothing.
 *   3. Check the free space (statvfs) against what is still to come.
 *   4. Worker threads fetch files (hub_fetch.c) while one thread draws the
 *      progress on stderr; the first failure cancels the others, whose
 *      partial files stay for the next pull to resume.
 *   5. refs/<rev> gets the commit last, so a ref only ever names a snapshot
 *      that was complete when it was written.
 * HF_HUB_OFFLINE=1 skips all of it: the model resolves from the cache or the
 * error says what to run.  Also here: iris_model_ensure (pull on first use). */
#include "hub_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "resolve.h"

#define API_MAX_BYTES (64u << 20)

/* ---- small helpers shared with hub_fetch.c ---- */

char *hub_url_quote(const char *s, int keep_slash, char *out, size_t out_size) {
    static const char hexd[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                    *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/');
        if (o + (plain ? 1 : 3) >= out_size) return NULL;
        if (plain) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hexd[*p >> 4];
            out[o++] = hexd[*p & 15];
        }
    }
    out[o] = 0;
    return out;
}

const char *hub_fmt_bytes(uint64_t n, char buf[32]) {
    const char *u[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    double v = (double)n;
    int i = 0;
    while (v >= 1000 && i < 5) v /= 1000, i++;
    if (i == 0) snprintf(buf, 32, "%llu B", (unsigned long long)n);
    else snprintf(buf, 32, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, u[i]);
    return buf;
}

int hub_mkdirs(const char *path) {
    char tmp[4800];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return -ENAMETOOLONG;
    for (char *s = tmp + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -errno;
            *s = c;
            if (!c) break;
        }
    }
    return 0;
}

int hub_curl_error(const char *endpoint, int curl_code, const char *detail, const char *what, iris_err *err) {
    const char *d = detail && *detail ? detail : curl_easy_strerror((CURLcode)curl_code);
    switch (curl_code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
        return iris_err_set(err, IRIS_EIO,
                            "%s: cannot reach %s (%s): check the network connection (or HF_ENDPOINT); a model already "
                            "in the cache works without it (HF_HUB_OFFLINE=1)", what, endpoint, d);
    case CURLE_OPERATION_TIMEDOUT:
        return iris_err_set(err, IRIS_EIO, "%s: the connection to %s timed out (%s); run the pull again, it resumes",
                            what, endpoint, d);
    case CURLE_PEER_FAILED_VERIFICATION:
        return iris_err_set(err, IRIS_EIO, "%s: TLS certificate check failed for %s (%s)", what, endpoint, d);
    default:
        return iris_err_set(err, IRIS_EIO, "%s: download from %s failed: %s; run the pull again, it resumes", what,
                            endpoint, d);
    }
}

int hub_http_error(const hub_pull *p, long status, const char *code, const char *msg, const char *what,
                   iris_err *err) {
    char extra[600] = "";
    if (msg && *msg) snprintf(extra, sizeof extra, " (the Hub says: %.500s)", msg);
    int have_token = p->auth[0] != 0;
    if (code && !strcmp(code, "GatedRepo"))
        return iris_err_set(err, IRIS_EIO,
                            "%s is a gated model and %s%s: log in on %s/%s and accept its conditions, "
                            "then create a read token at %s/settings/tokens and set HF_TOKEN=<token> (or save it in "
                            "~/.cache/huggingface/token)%s",
                            p->repo, have_token ? "the token in use has no access to it" : "no token was given",
                            status == 403 ? " (HTTP 403)" : status == 401 ? " (HTTP 401)" : "", p->endpoint, p->repo,
                            p->endpoint, extra);
    if ((code && !strcmp(code, "RepoNotFound")) || (status == 404 && !strncmp(what, "repository", 10)) ||
        (status == 401 && !have_token && !strncmp(what, "repository", 10)))
        return iris_err_set(err, IRIS_ENOTFOUND,
                            "%s: not found on %s (HTTP %ld): check the name (Org/Name, as on the model page); if the "
                            "repository is private, set HF_TOKEN to a token that can read it%s",
                            what, p->endpoint, status, extra);
    if (code && !strcmp(code, "RevisionNotFound"))
        return iris_err_set(err, IRIS_ENOTFOUND, "%s: revision not found in %s (HTTP %ld)%s", what, p->repo, status,
                            extra);
    if ((code && !strcmp(code, "EntryNotFound")) || status == 404)
        return iris_err_set(err, IRIS_ENOTFOUND, "%s: not found in %s at %s (HTTP %ld)%s", what, p->repo,
                            p->commit ? p->commit : "that revision", status, extra);
    if (status == 401 || status == 403)
        return iris_err_set(err, IRIS_EIO,
                            "%s: access denied (HTTP %ld): %s%s", what, status,
                            have_token ? "the token in use (HF_TOKEN or the token file) cannot read this repository; "
                                         "use one that can"
                                       : "this repository needs a token: set HF_TOKEN=<token> (from "
                                         "https://huggingface.co/settings/tokens)",
                            extra);
    if (status == 429)
        return iris_err_set(err, IRIS_EIO, "%s: the Hub is rate-limiting this machine (HTTP 429); wait a minute and "
                            "run the pull again (it resumes)%s", what, extra);
    return iris_err_set(err, IRIS_EIO, "%s: the server answered HTTP %ld%s; run the pull again later (it resumes)",
                        what, status, extra);
}

/* ---- which files, and the listing ---- */

int iris_hub_wanted_file(const char *name) {
    static const char *exact[] = {"config.json", "generation_config.json", "preprocessor_config.json",
                                  "video_preprocessor_config.json", "tokenizer.json", "tokenizer_config.json",
                                  "chat_template.json", "chat_template.jinja", "model.safetensors.index.json",
                                  "vocab.json", "merges.txt", "special_tokens_map.json", "added_tokens.json"};
    if (!name[0] || name[0] == '.' || strchr(name, '/') || strchr(name, '\\')) return 0;
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (!strcmp(name, exact[i])) return 1;
    size_t n = strlen(name);
    return n > 12 && !strcmp(name + n - 12, ".safetensors");
}

static int env_true(const char *name) {
    const char *v = getenv(name);
    return v && (!strcmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "yes") || !strcasecmp(v, "true"));
}

static int default_progress = -1;

void iris_hub_set_default_progress(int progress) { default_progress = progress; }

void iris_hub_opts_default(iris_hub_opts *o) {
    memset(o, 0, sizeof *o);
    o->offline = -1;
    o->retries = -1;
    o->progress = default_progress;
}

void hub_find_token(char *out, size_t out_size) {
    const char *t = getenv("HF_TOKEN");
    if (!t || !*t) t = getenv("HUGGING_FACE_HUB_TOKEN");
    out[0] = 0;
    if (t && *t) {
        snprintf(out, out_size, "%s", t);
        return;
    }
    char path[4200];
    const char *v;
    if ((v = getenv("HF_TOKEN_PATH")) && *v) snprintf(path, sizeof path, "%s", v);
    else if ((v = getenv("HF_HOME")) && *v) snprintf(path, sizeof path, "%s/token", v);
    else if ((v = getenv("XDG_CACHE_HOME")) && *v) snprintf(path, sizeof path, "%s/huggingface/token", v);
    else snprintf(path, sizeof path, "%s/.cache/huggingface/token", getenv("HOME") ? getenv("HOME") : "/");
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (fgets(out, (int)out_size, f)) {
        size_t n = strlen(out);
        while (n && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' ')) out[--n] = 0;
    }
    fclose(f);
}

typedef struct membuf {
    char *data;
    size_t len;
    int over;
} membuf;

static size_t on_body(char *ptr, size_t sz, size_t n, void *ud) {
    membuf *b = ud;
    size_t len = sz * n;
    if (b->len + len > API_MAX_BYTES) {
        b->over = 1;
        return 0;
    }
    char *nd = realloc(b->data, b->len + len + 1);
    if (!nd) return 0;
    b->data = nd;
    memcpy(b->data + b->len, ptr, len);
    b->len += len;
    b->data[b->len] = 0;
    return len;
}

typedef struct api_hdrs {
    char code[64], message[512];
} api_hdrs;

static size_t on_api_header(char *buf, size_t sz, size_t n, void *ud) {
    api_hdrs *h = ud;
    size_t len = sz * n;
    char *dst = NULL;
    size_t cap = 0, k = 0;
    if (len > 13 && !strncasecmp(buf, "X-Error-Code:", 13)) dst = h->code, cap = sizeof h->code, k = 13;
    else if (len > 16 && !strncasecmp(buf, "X-Error-Message:", 16)) dst = h->message, cap = sizeof h->message, k = 16;
    if (dst) {
        while (k < len && buf[k] == ' ') k++;
        size_t m = len - k;
        while (m && (buf[k + m - 1] == '\r' || buf[k + m - 1] == '\n')) m--;
        if (m >= cap) m = cap - 1;
        memcpy(dst, buf + k, m);
        dst[m] = 0;
    }
    return len;
}

/* Step 1: the commit and the wanted files of the revision. */
static int list_revision(hub_pull *p, const char *rev, char commit[41], iris_err *err) {
    char qrev[800], url[4096], what[400];
    snprintf(what, sizeof what, "repository %s", p->repo);
    if (!hub_url_quote(rev, 0, qrev, sizeof qrev)) return iris_err_set(err, IRIS_ELIMIT, "revision too long");
    snprintf(url, sizeof url, "%s/api/models/%s/revision/%s?blobs=true", p->endpoint, p->repo, qrev);
    struct curl_slist *hl = NULL;
    CURL *c = hub_curl_new(p, url, 1, 120L, &hl);
    if (!c) return iris_err_set(err, IRIS_ENOMEM, "curl_easy_init failed");
    membuf body = {0};
    api_hdrs h = {{0}, {0}};
    char ebuf[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_api_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
    CURLcode cc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_slist_free_all(hl);
    int rc = 0;
    json_t *root = NULL;
    if (body.over) rc = iris_err_set(err, IRIS_ELIMIT, "%s: the file listing is over %u MB", what, API_MAX_BYTES >> 20);
    else if (cc != CURLE_OK) rc = hub_curl_error(p->endpoint, cc, ebuf, what, err);
    else if (status != 200) {
        if (!strcmp(h.code, "RevisionNotFound")) snprintf(what, sizeof what, "revision '%s' of %s", rev, p->repo);
        rc = hub_http_error(p, status, h.code, h.message, what, err);
    }
    if (!rc) {
        json_error_t je;
        root = json_loadb(body.data ? body.data : "", body.len, 0, &je);
        const char *sha = json_string_value(json_object_get(root, "sha"));
        json_t *sib = json_object_get(root, "siblings");
        if (!root || !sha || !iris_hub_is_commit(sha) || !json_is_array(sib))
            rc = iris_err_set(err, IRIS_EFORMAT, "%s: unexpected answer from %s (no commit sha or file list)%s%s",
                              what, url, root ? "" : ": ", root ? "" : je.text);
        else memcpy(commit, sha, 41);
        /* A gated repo lists its files to anyone but serves them only with a
         * token: without one, say so now rather than after the first HEAD. */
        json_t *gated = json_object_get(root, "gated");
        if (!rc && !p->auth[0] && (json_is_true(gated) || json_is_string(gated)))
            rc = hub_http_error(p, 0, "GatedRepo", "", what, err);
        size_t n = rc ? 0 : json_array_size(sib);
        p->files = rc ? NULL : calloc(n ? n : 1, sizeof *p->files);
        if (!rc && !p->files) rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
        for (size_t i = 0; !rc && i < n; i++) {
            json_t *s = json_array_get(sib, i);
            const char *name = json_string_value(json_object_get(s, "rfilename"));
            if (!name || strlen(name) >= sizeof p->files[0].name || !iris_hub_wanted_file(name)) continue;
            hub_file *f = &p->files[p->n_files++];
            snprintf(f->name, sizeof f->name, "%s", name);
            json_t *lfs = json_object_get(s, "lfs");
            json_int_t size = json_integer_value(json_object_get(s, "size"));
            if (!size) size = json_integer_value(json_object_get(lfs, "size"));
            f->size = size > 0 ? (uint64_t)size : 0;
            const char *sha256 = json_string_value(json_object_get(lfs, "sha256"));
            if (sha256 && strlen(sha256) == 64) snprintf(f->sha256, sizeof f->sha256, "%s", sha256);
        }
    }
    json_decref(root);
    free(body.data);
    return rc;
}

/* ---- progress ---- */

typedef struct progress {
    hub_pull *p;
    int tty, done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct timespec t0;
    double last_line;
    double ts[32];
    uint64_t bs[32];
    int n, head;
} progress;

static double since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void draw(progress *g, int final) {
    hub_pull *p = g->p;
    double t = since(&g->t0);
    uint64_t now = atomic_load(&p->bytes_now), done = atomic_load(&p->bytes_done);
    if (done > p->bytes_total) done = p->bytes_total;
    /* Speed over the last ~6 s of samples: steady, yet follows changes. */
    g->ts[g->head] = t;
    g->bs[g->head] = now;
    int oldest = g->n < 32 ? 0 : (g->head + 1) % 32;
    g->head = (g->head + 1) % 32;
    if (g->n < 32) g->n++;
    double dt = t - g->ts[oldest];
    double speed = final ? (t > 0 ? (double)now / t : 0) : dt > 0.1 ? (double)(now - g->bs[oldest]) / dt : 0;
    char a[32], b[32], s[32], left[32] = "--:--";
    double eta = speed > 0 ? (double)(p->bytes_total - done) / speed : -1;
    if (eta >= 0 && eta < 360000) snprintf(left, sizeof left, "%d:%02d", (int)eta / 60, (int)eta % 60);
    int pct = p->bytes_total ? (int)(100.0 * (double)done / (double)p->bytes_total) : 100;
    hub_fmt_bytes(done, a);
    hub_fmt_bytes(p->bytes_total, b);
    hub_fmt_bytes((uint64_t)speed, s);
    int nd = atomic_load(&p->n_done);
    if (g->tty) {
        char bar[31];
        int fill = pct * 30 / 100;
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : ' ';
        bar[30] = 0;
        fprintf(stderr, "\r\033[K%s %3d%% |%s| %s / %s  %s/s  %s left  %d/%d files%s", p->repo, pct, bar, a, b, s,
                final ? "0:00" : left, nd, p->n_files, final ? "\n" : "");
    } else if (final || t - g->last_line >= 5.0) {
        fprintf(stderr, "pull %s: %s / %s (%d%%), %s/s, %s left, %d/%d files\n", p->repo, a, b, pct, s,
                final ? "0:00" : left, nd, p->n_files);
        g->last_line = t;
    }
    fflush(stderr);
}

static void *progress_main(void *ud) {
    progress *g = ud;
    pthread_mutex_lock(&g->mu);
    while (!g->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        if (!g->done) draw(g, 0);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* ---- workers ---- */

static void *worker_main(void *ud) {
    hub_pull *p = ud;
    for (;;) {
        int i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n_files || atomic_load(&p->cancel)) break;
        hub_file *f = &p->files[i];
        if (f->cached) continue;
        iris_err e = {0};
        if (hub_fetch_file(p, f, &e)) {
            pthread_mutex_lock(p->mu);
            /* The first real failure wins over the "cancelled" of the others. */
            if (!p->failed || (p->err.code == IRIS_ECANCELLED && e.code != IRIS_ECANCELLED)) p->err = e;
            p->failed = 1;
            pthread_mutex_unlock(p->mu);
            atomic_store(&p->cancel, 1);
            break;
        }
        atomic_fetch_add(&p->n_done, 1);
    }
    return NULL;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static int file_present(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int write_ref(const char *repo_dir, const char *rev, const char *commit, iris_err *err) {
    char path[5000], tmp[5100];
    snprintf(path, sizeof path, "%s/refs/%s", repo_dir, rev);
    char dir[5000];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = 0;
    int rc = hub_mkdirs(dir);
    if (rc) return iris_err_set(err, IRIS_EIO, "cannot create %s: %s", dir, strerror(-rc));
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f || fputs(commit, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        if (f) unlink(tmp);
        return iris_err_set(err, IRIS_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    return 0;
}

static int pull_online(hub_pull *p, const char *rev, const iris_hub_opts *o, iris_hub_result *res, iris_err *err) {
    char commit[41];
    int rc = list_revision(p, rev, commit, err);
    if (rc) return rc;
    p->commit = commit;
    int has_config = 0, has_weights = 0;
    for (int i = 0; i < p->n_files; i++) {
        has_config |= !strcmp(p->files[i].name, "config.json");
        has_weights |= strstr(p->files[i].name, ".safetensors") != NULL;
    }
    if (!has_config || !has_weights)
        return iris_err_set(err, IRIS_EUNSUPPORTED,
                            "repository %s@%s has no %s: iris needs a transformers checkpoint in safetensors format",
                            p->repo, rev, !has_config ? "config.json" : "*.safetensors weights");

    /* Step 2-3: what is there already, and room for the rest. */
    uint64_t need = 0, known_total = 0;
    int unknown_sizes = 0, n_todo = 0;
    for (int i = 0; i < p->n_files; i++) {
        hub_file *f = &p->files[i];
        char path[5200];
        snprintf(path, sizeof path, "%s/snapshots/%s/%s", p->repo_dir, commit, f->name);
        f->cached = file_present(path);
        known_total += f->size;
        if (f->cached) {
            atomic_fetch_add(&p->bytes_done, f->size);
            atomic_fetch_add(&p->n_done, 1);
            continue;
        }
        n_todo++;
        if (!f->size) unknown_sizes = 1;
        f->have = 0;
        if (f->sha256[0]) {
            struct stat st;
            snprintf(path, sizeof path, "%s/blobs/%s", p->repo_dir, f->sha256);
            if (stat(path, &st) == 0) continue; /* blob shared with another revision */
            snprintf(path, sizeof path, "%s/blobs/%s.incomplete", p->repo_dir, f->sha256);
            if (stat(path, &st) == 0 && (uint64_t)st.st_size <= f->size) f->have = (uint64_t)st.st_size;
        }
        need += f->size - f->have;
    }
    p->bytes_total = known_total;
    char blobs[4700];
    snprintf(blobs, sizeof blobs, "%s/blobs", p->repo_dir);
    if (n_todo && (rc = hub_mkdirs(blobs)))
        return iris_err_set(err, IRIS_EIO, "cannot create %s: %s", blobs, strerror(-rc));
    struct statvfs vfs;
    if (n_todo && need && statvfs(blobs, &vfs) == 0) {
        uint64_t avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
        if (avail < need) {
            char a[32], b[32];
            return iris_err_set(err, IRIS_ELIMIT,
                                "not enough disk space for %s: %s still to download%s, %s free in %s; free some space "
                                "or point HF_HUB_CACHE at a bigger disk",
                                p->repo, hub_fmt_bytes(need, a), unknown_sizes ? " (at least)" : "",
                                hub_fmt_bytes(avail, b), p->repo_dir);
        }
    }

    /* Step 4: the downloads. */
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    p->mu = &mu;
    progress g = {.p = p, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    clock_gettime(CLOCK_MONOTONIC, &g.t0);
    g.tty = isatty(STDERR_FILENO);
    int show = o->progress < 0 ? 1 : o->progress;
    pthread_t prog, workers[32];
    int n_workers = o->n_parallel > 0 ? o->n_parallel : 8;
    if (n_workers > 32) n_workers = 32;
    if (n_workers > n_todo) n_workers = n_todo;
    int started = 0, prog_started = 0;
    if (n_todo) {
        char nb[32];
        if (show)
            fprintf(stderr, "pulling %s@%s (commit %.12s): %d of %d files to download, %s in all\n", p->repo, rev,
                    commit, n_todo, p->n_files, hub_fmt_bytes(known_total, nb));
        if (show) prog_started = pthread_create(&prog, NULL, progress_main, &g) == 0;
        for (; started < n_workers; started++)
            if (pthread_create(&workers[started], NULL, worker_main, p) != 0) break;
        if (!started) worker_main(p);
        for (int i = 0; i < started; i++) pthread_join(workers[i], NULL);
        if (prog_started) {
            pthread_mutex_lock(&g.mu);
            g.done = 1;
            pthread_cond_signal(&g.cv);
            pthread_mutex_unlock(&g.mu);
            pthread_join(prog, NULL);
            if (!p->failed) draw(&g, 1);
            else if (g.tty) fputc('\n', stderr);
        }
    }
    if (p->failed) {
        if (err) *err = p->err;
        return p->err.code ? p->err.code : IRIS_EIO;
    }
    /* Step 5: the ref, last. */
    char snap[4800];
    snprintf(snap, sizeof snap, "%s/snapshots/%s", p->repo_dir, commit);
    if ((rc = hub_mkdirs(snap))) return iris_err_set(err, IRIS_EIO, "cannot create %s: %s", snap, strerror(-rc));
    if (!iris_hub_is_commit(rev) && (rc = write_ref(p->repo_dir, rev, commit, err))) return rc;
    if (res) {
        memcpy(res->commit, commit, 41);
        snprintf(res->dir, sizeof res->dir, "%s", snap);
        res->n_files = p->n_files;
        res->n_downloaded = atomic_load(&p->n_downloaded);
        res->bytes_downloaded = atomic_load(&p->bytes_now);
        res->bytes_total = known_total;
    }
    return 0;
}

int iris_hub_pull(const char *model, const iris_hub_opts *opts, iris_hub_result *res, iris_err *err) {
    iris_hub_opts o;
    if (opts) o = *opts;
    else iris_hub_opts_default(&o);
    if (res) memset(res, 0, sizeof *res);
    char repo[256], rev[256];
    int rc = iris_hub_repo_parse(model ? model : "", repo, sizeof repo, rev, sizeof rev, err);
    if (rc) return rc;
    int offline = o.offline < 0 ? env_true("HF_HUB_OFFLINE") : o.offline;
    if (offline) {
        char dir[4096];
        iris_err e = {0};
        if (iris_model_resolve(model, dir, sizeof dir, &e) == 0) {
            if (res) {
                snprintf(res->dir, sizeof res->dir, "%s", dir);
                snprintf(res->commit, sizeof res->commit, "%s", strrchr(dir, '/') + 1);
            }
            return 0;
        }
        return iris_err_set(err, IRIS_ENOTFOUND, "HF_HUB_OFFLINE is set (nothing is downloaded; unset it to pull) "
                            "and %s", e.msg);
    }

    hub_pull p;
    memset(&p, 0, sizeof p);
    char endpoint[1024], token[1024];
    const char *ep = o.endpoint ? o.endpoint : getenv("HF_ENDPOINT");
    snprintf(endpoint, sizeof endpoint, "%s", ep && *ep ? ep : "https://huggingface.co");
    for (size_t n = strlen(endpoint); n && endpoint[n - 1] == '/';) endpoint[--n] = 0;
    if (strncmp(endpoint, "http://", 7) && strncmp(endpoint, "https://", 8))
        return iris_err_set(err, IRIS_EINVAL, "HF_ENDPOINT '%s' is not an http(s) URL", endpoint);
    if (o.token) snprintf(token, sizeof token, "%s", o.token);
    else hub_find_token(token, sizeof token);
    if (token[0]) snprintf(p.auth, sizeof p.auth, "Authorization: Bearer %s", token);
    p.endpoint = endpoint;
    p.repo = repo;
    p.retries = o.retries < 0 ? 3 : o.retries;
    if ((rc = iris_hub_repo_dir(repo, p.repo_dir, sizeof p.repo_dir, err))) return rc;
    pthread_once(&curl_once, curl_init_once);
    rc = pull_online(&p, rev, &o, res, err);
    free(p.files);
    return rc;
}

int iris_model_ensure(const char *model, char *dir_out, size_t dir_size, int allow_download, iris_err *err) {
    iris_err e = {0};
    int rc = iris_model_resolve(model, dir_out, dir_size, &e);
    if (rc == 0) return 0;
    char repo[256], rev[256];
    if (rc != IRIS_ENOTFOUND || iris_hub_repo_parse(model, repo, sizeof repo, rev, sizeof rev, NULL) != 0) {
        if (err) *err = e;
        return rc;
    }
    if (!allow_download || env_true("HF_HUB_OFFLINE")) {
        if (err) *err = e;
        if (env_true("HF_HUB_OFFLINE"))
            iris_err_prefix(err, "HF_HUB_OFFLINE is set (unset it to download)");
        return rc;
    }
    const char *ep = getenv("HF_ENDPOINT");
    if (default_progress)   /* said even when the log is quiet: a download is never silent, unless --quiet */
        fprintf(stderr, "iris: %s is not in the cache: downloading it from %s (as `iris pull %s`; --offline "
                        "never downloads)\n", model, ep && *ep ? ep : "https://huggingface.co", model);
    iris_hub_result res;
    if ((rc = iris_hub_pull(model, NULL, &res, err))) return rc;
    if (strlen(res.dir) >= dir_size) return iris_err_set(err, IRIS_ELIMIT, "model path too long");
    snprintf(dir_out, dir_size, "%s", res.dir);
    return 0;
}
