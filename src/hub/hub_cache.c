/* hub_cache.c: what is in the Hugging Face hub cache (`iris ls`).
 *
 * Reads the layout of resolve.h/hub.h without changing anything: every
 * models--Org--Name folder, its refs, its snapshots, the size of its blobs
 * and the model_type of the snapshot `main` points to.  Datasets and spaces
 * (datasets--*, spaces--*) are not models and are skipped. */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "err.h"
#include "hub.h"
#include "resolve.h"

static void add_ref(iris_hub_model *m, const char *name) {
    size_t n = strlen(m->refs);
    if (n + strlen(name) + 2 < sizeof m->refs) snprintf(m->refs + n, sizeof m->refs - n, "%s%s", n ? "," : "", name);
}

static void scan_refs(iris_hub_model *m, const char *repo_dir) {
    char path[4800];
    snprintf(path, sizeof path, "%s/refs", repo_dir);
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    /* "main" first, then the others as readdir gives them. */
    char main_commit[41];
    if (iris_hub_read_ref(repo_dir, "main", main_commit, NULL) == 0) add_ref(m, "main");
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "main")) continue;
        char c[41];
        if (iris_hub_read_ref(repo_dir, e->d_name, c, NULL) == 0) add_ref(m, e->d_name);
    }
    closedir(d);
}

static void scan_snapshots(iris_hub_model *m, const char *repo_dir) {
    char path[4800], commit[41];
    snprintf(path, sizeof path, "%s/snapshots", repo_dir);
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    time_t newest = 0;
    char newest_name[256] = "";
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sp[5100];
        struct stat st;
        snprintf(sp, sizeof sp, "%s/%s", path, e->d_name);
        if (stat(sp, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        m->n_snapshots++;
        if (!newest_name[0] || st.st_mtime > newest) {
            newest = st.st_mtime;
            snprintf(newest_name, sizeof newest_name, "%s", e->d_name);
        }
    }
    closedir(d);
    struct stat st;
    if (iris_hub_read_ref(repo_dir, "main", commit, NULL) == 0) {
        snprintf(m->dir, sizeof m->dir, "%s/%s", path, commit);
        if (stat(m->dir, &st) == 0 && S_ISDIR(st.st_mode)) return;
    }
    if (newest_name[0]) snprintf(m->dir, sizeof m->dir, "%s/%s", path, newest_name);
    else m->dir[0] = 0;
}

static void scan_blobs(iris_hub_model *m, const char *repo_dir) {
    char path[4800];
    snprintf(path, sizeof path, "%s/blobs", repo_dir);
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char bp[5100];
        struct stat st;
        snprintf(bp, sizeof bp, "%s/%s", path, e->d_name);
        if (stat(bp, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        size_t n = strlen(e->d_name);
        if (n > 11 && !strcmp(e->d_name + n - 11, ".incomplete")) m->incomplete = 1;
        else m->size_bytes += (uint64_t)st.st_size;
    }
    closedir(d);
}

static void read_model_type(iris_hub_model *m) {
    if (!m->dir[0]) return;
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", m->dir);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    const char *t = json_string_value(json_object_get(root, "model_type"));
    if (t) snprintf(m->model_type, sizeof m->model_type, "%s", t);
    m->supported = t && !strcmp(t, "qwen3_vl");
    json_decref(root);
}

static int cmp_model(const void *a, const void *b) {
    return strcasecmp(((const iris_hub_model *)a)->repo, ((const iris_hub_model *)b)->repo);
}

int iris_hub_list(iris_hub_model **out, int *n_out, iris_err *err) {
    *out = NULL;
    *n_out = 0;
    char cache[4096];
    int rc = iris_hub_cache_dir(cache, sizeof cache, err);
    if (rc) return rc;
    DIR *d = opendir(cache);
    if (!d) return 0;
    iris_hub_model *v = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        const char *sep = strncmp(name, "models--", 8) ? NULL : strstr(name + 8, "--");
        if (!sep || sep == name + 8 || !sep[2]) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            iris_hub_model *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) {
                free(v);
                closedir(d);
                return iris_err_set(err, IRIS_ENOMEM, "out of memory listing %s", cache);
            }
            v = nv;
        }
        iris_hub_model *m = &v[n];
        memset(m, 0, sizeof *m);
        snprintf(m->repo, sizeof m->repo, "%.*s/%s", (int)(sep - (name + 8)), name + 8, sep + 2);
        char repo_dir[4400];
        snprintf(repo_dir, sizeof repo_dir, "%s/%s", cache, name);
        struct stat st;
        if (stat(repo_dir, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        scan_refs(m, repo_dir);
        scan_snapshots(m, repo_dir);
        scan_blobs(m, repo_dir);
        read_model_type(m);
        n++;
    }
    closedir(d);
    if (n) qsort(v, (size_t)n, sizeof *v, cmp_model);
    *out = v;
    *n_out = n;
    return 0;
}
