/* test_resolve.c: model resolution against a fake hub cache built in a temp dir. */
#include "test.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hub/resolve.h"

#define COMMIT_A "0123456789abcdef0123456789abcdef01234567"
#define COMMIT_B "fedcba9876543210fedcba9876543210fedcba98"

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void rm_rf(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", dir);
}

/* Saves and restores the cache environment so tests do not leak into each other. */
typedef struct {
    char *v[4];
} env_save;
static const char *env_names[4] = {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"};
static void env_push(env_save *s) {
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(env_names[i]);
        s->v[i] = v ? strdup(v) : NULL;
        unsetenv(env_names[i]);
    }
}
static void env_pop(env_save *s) {
    for (int i = 0; i < 4; i++) {
        if (s->v[i]) setenv(env_names[i], s->v[i], 1);
        else unsetenv(env_names[i]);
        free(s->v[i]);
    }
}

/* tmp/hub/models--Qwen--Tiny-VL/{refs/main -> A, refs/v1 -> B, snapshots/A/config.json};
 * snapshots/B is deliberately missing. */
static int make_cache(char *tmp) {
    char p[4200];
    strcpy(tmp, "/tmp/iris-resolve-XXXXXX");
    if (!mkdtemp(tmp)) return -1;
    const char *dirs[] = {"hub", "hub/models--Qwen--Tiny-VL", "hub/models--Qwen--Tiny-VL/refs",
                          "hub/models--Qwen--Tiny-VL/snapshots", "hub/models--Qwen--Tiny-VL/snapshots/" COMMIT_A,
                          "hub/models--Qwen--Tiny-VL/refs/refs", "hub/models--Qwen--Tiny-VL/refs/refs/pr", "plain"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(p, sizeof p, "%s/%s", tmp, dirs[i]);
        if (mkdir(p, 0755)) return -1;
    }
    snprintf(p, sizeof p, "%s/hub/models--Qwen--Tiny-VL/refs/main", tmp);
    write_file(p, COMMIT_A);
    snprintf(p, sizeof p, "%s/hub/models--Qwen--Tiny-VL/refs/v1", tmp);
    write_file(p, COMMIT_B "\n");
    /* huggingface_hub keeps revision "refs/pr/3" at refs/refs/pr/3. */
    snprintf(p, sizeof p, "%s/hub/models--Qwen--Tiny-VL/refs/refs/pr/3", tmp);
    write_file(p, COMMIT_A "\n");
    snprintf(p, sizeof p, "%s/hub/models--Qwen--Tiny-VL/refs/broken", tmp);
    write_file(p, "not a hash");
    snprintf(p, sizeof p, "%s/hub/models--Qwen--Tiny-VL/snapshots/" COMMIT_A "/config.json", tmp);
    write_file(p, "{\"model_type\": \"qwen3_vl\"}");
    snprintf(p, sizeof p, "%s/file.txt", tmp);
    write_file(p, "x");
    return 0;
}

IRIS_TEST(resolve_cache_dir_precedence) {
    env_save s;
    env_push(&s);
    char out[4096];
    iris_err err = {0};
    setenv("HOME", getenv("HOME") ? getenv("HOME") : "/root", 1);
    CHECK_EQ_INT(iris_hub_cache_dir(out, sizeof out, &err), 0);
    char want[4096];
    snprintf(want, sizeof want, "%s/.cache/huggingface/hub", getenv("HOME"));
    CHECK_STR(out, want);
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    CHECK_EQ_INT(iris_hub_cache_dir(out, sizeof out, &err), 0);
    CHECK_STR(out, "/x/cache/huggingface/hub");
    setenv("HF_HOME", "/h/home", 1);
    CHECK_EQ_INT(iris_hub_cache_dir(out, sizeof out, &err), 0);
    CHECK_STR(out, "/h/home/hub");
    setenv("HF_HUB_CACHE", "/h/cache", 1);
    CHECK_EQ_INT(iris_hub_cache_dir(out, sizeof out, &err), 0);
    CHECK_STR(out, "/h/cache");
    char small[8];
    CHECK_EQ_INT(iris_hub_cache_dir(small, sizeof small, &err), IRIS_ELIMIT);
    env_pop(&s);
}

IRIS_TEST(resolve_repo_parse) {
    char repo[256], rev[256];
    iris_err err = {0};
    CHECK_EQ_INT(iris_hub_repo_parse("Qwen/Qwen3-VL-2B-Instruct-FP8", repo, sizeof repo, rev, sizeof rev, &err), 0);
    CHECK_STR(repo, "Qwen/Qwen3-VL-2B-Instruct-FP8");
    CHECK_STR(rev, "main");
    CHECK_EQ_INT(iris_hub_repo_parse("a-b/c.d_e@refs/pr/1", repo, sizeof repo, rev, sizeof rev, &err), 0);
    CHECK_STR(repo, "a-b/c.d_e");
    CHECK_STR(rev, "refs/pr/1");
    const char *bad[] = {"noslash", "/abs", "a/", "/b", "a/b/c", "a/b@", "a/b@../x", "a b/c", "a/b@x y",
                         "../b", "a/..b", "a/b@x@y"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECKF(iris_hub_repo_parse(bad[i], repo, sizeof repo, rev, sizeof rev, &err) == IRIS_EINVAL,
               "'%s' accepted as a repo id", bad[i]);
    }
    CHECK_CONTAINS(err.msg, "not a Hugging Face repo id");
    CHECK(iris_hub_is_commit(COMMIT_A));
    CHECK(!iris_hub_is_commit("0123456789ABCDEF0123456789abcdef01234567"));
    CHECK(!iris_hub_is_commit("main"));
}

IRIS_TEST(resolve_fake_cache) {
    char tmp[64], out[4096], want[4200];
    REQUIRE(make_cache(tmp) == 0);
    env_save s;
    env_push(&s);
    char hub[200];
    snprintf(hub, sizeof hub, "%s/hub", tmp);
    setenv("HF_HUB_CACHE", hub, 1);
    iris_err err = {0};

    /* refs/main -> snapshots/<commit>, and the config is readable there. */
    CHECK_EQ_INT(iris_model_resolve("Qwen/Tiny-VL", out, sizeof out, &err), 0);
    snprintf(want, sizeof want, "%s/models--Qwen--Tiny-VL/snapshots/" COMMIT_A, hub);
    CHECK_STR(out, want);
    char cfg[4300];
    snprintf(cfg, sizeof cfg, "%s/config.json", out);
    CHECK(access(cfg, R_OK) == 0);
    CHECK_EQ_INT(iris_model_resolve("Qwen/Tiny-VL@main", out, sizeof out, &err), 0);
    CHECK_STR(out, want);
    CHECKF(iris_model_resolve("Qwen/Tiny-VL@refs/pr/3", out, sizeof out, &err) == 0, "%s", err.msg);
    CHECK_STR(out, want);
    /* A full commit hash is used directly, with no ref needed. */
    CHECK_EQ_INT(iris_model_resolve("Qwen/Tiny-VL@" COMMIT_A, out, sizeof out, &err), 0);
    CHECK_STR(out, want);

    /* HF_HOME/hub is used when HF_HUB_CACHE is unset. */
    unsetenv("HF_HUB_CACHE");
    setenv("HF_HOME", tmp, 1);
    CHECK_EQ_INT(iris_model_resolve("Qwen/Tiny-VL", out, sizeof out, &err), 0);
    CHECK_STR(out, want);

    /* A directory is taken as it is. */
    char plain[200];
    snprintf(plain, sizeof plain, "%s/plain", tmp);
    CHECK_EQ_INT(iris_model_resolve(plain, out, sizeof out, &err), 0);
    CHECK_STR(out, plain);

    /* Errors name the problem and the fix. */
    CHECK_EQ_INT(iris_model_resolve("Qwen/Other", out, sizeof out, &err), IRIS_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "not in the Hugging Face cache");
    CHECK_CONTAINS(err.msg, hub);
    CHECK_CONTAINS(err.msg, "iris pull Qwen/Other");
    CHECK_EQ_INT(iris_model_resolve("Qwen/Tiny-VL@dev", out, sizeof out, &err), IRIS_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "revision 'dev'");
    CHECK_CONTAINS(err.msg, "iris pull Qwen/Tiny-VL@dev");
    CHECK_EQ_INT(iris_model_resolve("Qwen/Tiny-VL@v1", out, sizeof out, &err), IRIS_ENOTFOUND);
    CHECK_CONTAINS(err.msg, COMMIT_B);
    CHECK_CONTAINS(err.msg, "is missing");
    CHECK_EQ_INT(iris_model_resolve("Qwen/Tiny-VL@" COMMIT_B, out, sizeof out, &err), IRIS_ENOTFOUND);
    CHECK_EQ_INT(iris_model_resolve("Qwen/Tiny-VL@broken", out, sizeof out, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "40-character commit hash");
    char file[200];
    snprintf(file, sizeof file, "%s/file.txt", tmp);
    CHECK_EQ_INT(iris_model_resolve(file, out, sizeof out, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "not a directory");
    CHECK_EQ_INT(iris_model_resolve("gibberish", out, sizeof out, &err), IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "'gibberish' is not a directory and not a Hugging Face repo id");
    CHECK_EQ_INT(iris_model_resolve("/nonexistent/dir/x", out, sizeof out, &err), IRIS_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "does not exist");
    CHECK_EQ_INT(iris_model_resolve("", out, sizeof out, &err), IRIS_EINVAL);
    CHECK_EQ_INT(iris_model_resolve("Qwen/Tiny-VL", out, 10, &err), IRIS_ELIMIT);
    CHECK_EQ_INT(iris_model_resolve("Qwen/Tiny-VL@broken", out, sizeof out, NULL), IRIS_EFORMAT);

    env_pop(&s);
    rm_rf(tmp);
}
