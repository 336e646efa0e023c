/* resolve.c: turning what the user typed (a directory or `Org/Name[@rev]`)
 * into a model directory, read-only, from the Hugging Face hub cache.
 *
 * The cache layout is huggingface_hub's, so models that transformers or vLLM
 * downloaded are found where they are:
 *     <cache>/models--Org--Name/refs/<revision>      one line: the commit hash
 *     <cache>/models--Org--Name/snapshots/<commit>/   files (links into blobs/)
 * The cache directory is $HF_HUB_CACHE, else $HF_HOME/hub, else
 * $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (the same
 * precedence as huggingface_hub's constants.py).
 *
 * Nothing here touches the network; downloading is hub.c (`iris pull`). */
#include "resolve.h"

#include <ctype.h>
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"

static const char *env_nonempty(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static const char *home_dir(void) {
    const char *h = env_nonempty("HOME");
    if (h) return h;
    struct passwd *pw = getpwuid(getuid());
    return pw && pw->pw_dir ? pw->pw_dir : "/";
}

int iris_hub_cache_dir(char *out, size_t out_size, iris_err *err) {
    const char *v;
    int n;
    if ((v = env_nonempty("HF_HUB_CACHE")) || (v = env_nonempty("HUGGINGFACE_HUB_CACHE")))
        n = snprintf(out, out_size, "%s", v);
    else if ((v = env_nonempty("HF_HOME")))
        n = snprintf(out, out_size, "%s/hub", v);
    else if ((v = env_nonempty("XDG_CACHE_HOME")))
        n = snprintf(out, out_size, "%s/huggingface/hub", v);
    else
        n = snprintf(out, out_size, "%s/.cache/huggingface/hub", home_dir());
    if (n < 0 || (size_t)n >= out_size)
        return iris_err_set(err, IRIS_ELIMIT, "hub cache path is too long (%d bytes, at most %zu)", n, out_size - 1);
    return 0;
}

/* Characters the Hub allows in an org or repo name. */
static int name_ok(const char *s, size_t n) {
    if (n == 0 || n > 96) return 0;
    if (s[0] == '.' || s[0] == '-') return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(isalnum(c) || c == '-' || c == '_' || c == '.')) return 0;
        if (c == '.' && i + 1 < n && s[i + 1] == '.') return 0;
    }
    return 1;
}

int iris_hub_is_commit(const char *s) {
    if (!s || strlen(s) != 40) return 0;
    for (int i = 0; i < 40; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i])) return 0;
    return 1;
}

int iris_hub_repo_parse(const char *model, char *repo, size_t repo_size, char *rev, size_t rev_size,
                        iris_err *err) {
    const char *at = strchr(model, '@');
    size_t repo_len = at ? (size_t)(at - model) : strlen(model);
    const char *slash = memchr(model, '/', repo_len);
    int ok = slash && name_ok(model, (size_t)(slash - model)) &&
             name_ok(slash + 1, repo_len - (size_t)(slash + 1 - model));
    const char *r = at ? at + 1 : "main";
    /* A revision is a branch, tag or commit; refs/pr/N is allowed, "..", a
     * leading '/' and control characters are not (it becomes a path). */
    if (ok && (!*r || strlen(r) > 255 || r[0] == '/' || strstr(r, "..") || strchr(r, '@'))) ok = 0;
    for (const char *p = r; ok && *p; p++)
        if ((unsigned char)*p < 0x21 || *p == '\\') ok = 0;
    if (!ok)
        return iris_err_set(err, IRIS_EINVAL,
                            "model '%s' is not a directory and not a Hugging Face repo id "
                            "(Org/Name or Org/Name@revision)", model);
    if (repo_len >= repo_size || strlen(r) >= rev_size)
        return iris_err_set(err, IRIS_ELIMIT, "model '%s': repo id or revision too long", model);
    memcpy(repo, model, repo_len);
    repo[repo_len] = 0;
    snprintf(rev, rev_size, "%s", r);
    return 0;
}

int iris_hub_repo_dir(const char *repo, char *out, size_t out_size, iris_err *err) {
    char cache[4096];
    int rc = iris_hub_cache_dir(cache, sizeof cache, err);
    if (rc) return rc;
    const char *slash = strchr(repo, '/');
    if (!slash) return iris_err_set(err, IRIS_EINVAL, "repo id '%s' has no '/' (Org/Name)", repo);
    int n = snprintf(out, out_size, "%s/models--%.*s--%s", cache, (int)(slash - repo), repo, slash + 1);
    if (n < 0 || (size_t)n >= out_size)
        return iris_err_set(err, IRIS_ELIMIT, "cache path for '%s' is too long", repo);
    return 0;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Reads the commit a ref points to; 0, or IRIS_ENOTFOUND when the file is absent. */
int iris_hub_read_ref(const char *repo_dir, const char *rev, char commit[41], iris_err *err) {
    char path[4608];
    snprintf(path, sizeof path, "%s/refs/%s", repo_dir, rev);
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT || errno == ENOTDIR)
            return iris_err_set(err, IRIS_ENOTFOUND, "%s: no such ref", path);
        return iris_err_set(err, IRIS_EIO, "%s: %s", path, strerror(errno));
    }
    char line[128] = {0};
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = 0;
    while (n && isspace((unsigned char)line[n - 1])) line[--n] = 0;
    if (!iris_hub_is_commit(line))
        return iris_err_set(err, IRIS_EFORMAT, "%s: expected a 40-character commit hash, found \"%.60s\"", path,
                            line);
    memcpy(commit, line, 41);
    return 0;
}

int iris_model_resolve(const char *model, char *out, size_t out_size, iris_err *err) {
    if (!model || !*model) return iris_err_set(err, IRIS_EINVAL, "no model given (a directory or Org/Name)");
    struct stat st;
    if (stat(model, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return iris_err_set(err, IRIS_EINVAL,
                                "model '%s' is a file, not a directory: give the directory that holds "
                                "config.json and the *.safetensors files", model);
        if (strlen(model) >= out_size) return iris_err_set(err, IRIS_ELIMIT, "model path '%s' is too long", model);
        snprintf(out, out_size, "%s", model);
        return 0;
    }
    /* Looks like a path but is not there: say so rather than "not a repo id". */
    if (model[0] == '/' || model[0] == '.' || model[0] == '~' || strstr(model, "//") ||
        (strchr(model, '/') && strchr(strchr(model, '/') + 1, '/') && !strchr(model, '@')))
        return iris_err_set(err, IRIS_ENOTFOUND, "model directory '%s' does not exist", model);

    char repo[256], rev[256], repo_dir[4608], cache[4096];
    int rc = iris_hub_repo_parse(model, repo, sizeof repo, rev, sizeof rev, err);
    if (rc) return rc;
    if ((rc = iris_hub_cache_dir(cache, sizeof cache, err))) return rc;
    if ((rc = iris_hub_repo_dir(repo, repo_dir, sizeof repo_dir, err))) return rc;
    const char *at = strchr(model, '@') ? "@" : "", *rev_arg = strchr(model, '@') ? rev : "";
    if (!is_dir(repo_dir))
        return iris_err_set(err, IRIS_ENOTFOUND,
                            "model %s is not in the Hugging Face cache (searched %s; set HF_HUB_CACHE or HF_HOME "
                            "to use another cache); download it with: iris pull %s%s%s",
                            repo, cache, repo, at, rev_arg);
    char commit[41];
    if (iris_hub_is_commit(rev)) {
        memcpy(commit, rev, 41);
    } else {
        iris_err rerr = {0};
        rc = iris_hub_read_ref(repo_dir, rev, commit, &rerr);
        if (rc == IRIS_ENOTFOUND)
            return iris_err_set(err, IRIS_ENOTFOUND,
                                "model %s: revision '%s' is not in the cache (no %s/refs/%s); download it with: "
                                "iris pull %s@%s", repo, rev, repo_dir, rev, repo, rev);
        if (rc) return iris_err_set(err, rc, "model %s: %s", repo, rerr.msg);
    }
    int n = snprintf(out, out_size, "%s/snapshots/%s", repo_dir, commit);
    if (n < 0 || (size_t)n >= out_size) return iris_err_set(err, IRIS_ELIMIT, "snapshot path too long");
    if (!is_dir(out))
        return iris_err_set(err, IRIS_ENOTFOUND,
                            "model %s: revision '%s' is commit %s, but %s is missing (an interrupted or deleted "
                            "download); download it again with: iris pull %s%s%s",
                            repo, rev, commit, out, repo, at, rev_arg);
    return 0;
}
