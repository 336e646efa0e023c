/* test_hub.c: `iris pull`, the cache it leaves and `iris ls`, against the
 * mock Hub of hub_mock.c on loopback (no network). */
#include "test.h"

#include <jansson.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hub_mock.h"
#include "hub/hub.h"
#include "hub/resolve.h"

#define REPO_DIR_FMT "%s/models--tiny--qwen3-vl"

/* Each test gets an empty cache in a temp dir and a clean environment. */
typedef struct env {
    char tmp[64], cache[128], repo_dir[200];
    const char *base;
} env;

static const char *saved_names[] = {"HF_HUB_CACHE", "HF_HOME", "HF_TOKEN", "HF_TOKEN_PATH", "HF_ENDPOINT",
                                    "HF_HUB_OFFLINE", "HUGGING_FACE_HUB_TOKEN"};
enum { N_SAVED = sizeof saved_names / sizeof *saved_names };
static char *saved[N_SAVED];

static int setup(env *e) {
    e->base = hub_mock_start();
    if (!e->base) return -1;
    hub_mock_reset();
    strcpy(e->tmp, "/tmp/iris-hub-XXXXXX");
    if (!mkdtemp(e->tmp)) return -1;
    snprintf(e->cache, sizeof e->cache, "%s/hub", e->tmp);
    snprintf(e->repo_dir, sizeof e->repo_dir, REPO_DIR_FMT, e->cache);
    for (int i = 0; i < N_SAVED; i++) {
        const char *v = getenv(saved_names[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(saved_names[i]);
    }
    setenv("HF_HUB_CACHE", e->cache, 1);
    setenv("HF_TOKEN_PATH", "/nonexistent/iris-test-token", 1); /* never the developer's own token */
    setenv("HF_ENDPOINT", e->base, 1);
    return 0;
}

static void teardown(env *e) {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->tmp);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", e->tmp);
    for (int i = 0; i < N_SAVED; i++) {
        if (saved[i]) setenv(saved_names[i], saved[i], 1);
        else unsetenv(saved_names[i]);
        free(saved[i]);
        saved[i] = NULL;
    }
}

static iris_hub_opts quiet_opts(int retries) {
    iris_hub_opts o;
    iris_hub_opts_default(&o);
    o.progress = 0;
    o.retries = retries;
    return o;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* 1 when `path` holds exactly the mock's file `name`. */
static int same_content(const char *path, const char *name) {
    size_t len;
    const char *sha, *git;
    const unsigned char *want = hub_mock_file(name, &len, &sha, &git);
    FILE *f = fopen(path, "rb");
    if (!f || !want) {
        if (f) fclose(f);
        return 0;
    }
    unsigned char *buf = malloc(len + 1);
    size_t n = fread(buf, 1, len + 1, f);
    fclose(f);
    int ok = n == len && !memcmp(buf, want, len);
    free(buf);
    return ok;
}

static const char *sha_of(const char *name) {
    size_t len;
    const char *sha, *git;
    hub_mock_file(name, &len, &sha, &git);
    return sha;
}

static const char *git_of(const char *name) {
    size_t len;
    const char *sha, *git;
    hub_mock_file(name, &len, &sha, &git);
    return git;
}

IRIS_TEST(hub_wanted_files) {
    const char *yes[] = {"config.json", "tokenizer.json", "tokenizer_config.json", "preprocessor_config.json",
                         "generation_config.json", "chat_template.json", "chat_template.jinja",
                         "model.safetensors", "model-00001-of-00002.safetensors", "model.safetensors.index.json",
                         "vocab.json", "merges.txt"};
    const char *no[] = {"README.md", "onnx/model.onnx", "sub/model.safetensors", "pytorch_model.bin",
                        ".gitattributes", "model.gguf", "../config.json", ".safetensors", "LICENSE"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) CHECKF(iris_hub_wanted_file(yes[i]), "%s not wanted", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) CHECKF(!iris_hub_wanted_file(no[i]), "%s wanted", no[i]);
}

/* A full pull, the layout transformers reads, then a second pull that fetches nothing. */
IRIS_TEST(hub_pull_full_then_nothing) {
    env e;
    REQUIRE(setup(&e) == 0);
    hub_mock_stats *st = hub_mock_stats_get();
    iris_hub_opts o = quiet_opts(0);
    o.token = "hf_testtoken";
    iris_hub_result res;
    iris_err err = {0};
    int rc = iris_hub_pull("tiny/qwen3-vl", &o, &res, &err);
    CHECKF(rc == 0, "pull failed: %s", err.msg);
    CHECK_STR(res.commit, HUB_MOCK_COMMIT);
    CHECK_EQ_INT(res.n_files, 4); /* config, generation_config, tokenizer, safetensors; not README, onnx/ */
    CHECK_EQ_INT(res.n_downloaded, 4);
    CHECK(res.bytes_downloaded > 600000);
    CHECK_EQ_INT(atomic_load(&st->n_get_cdn), 1);
    CHECK(atomic_load(&st->api_saw_auth));
    CHECK(!atomic_load(&st->cdn_saw_auth)); /* the token is not sent to the CDN */

    char path[600], link[600], want[600];
    /* refs/main holds the commit; snapshots link into blobs by etag, relatively. */
    char commit[41];
    CHECK_EQ_INT(iris_hub_read_ref(e.repo_dir, "main", commit, &err), 0);
    CHECK_STR(commit, HUB_MOCK_COMMIT);
    snprintf(path, sizeof path, "%s/snapshots/%s/model.safetensors", e.repo_dir, HUB_MOCK_COMMIT);
    ssize_t n = readlink(path, link, sizeof link - 1);
    REQUIRE(n > 0);
    link[n] = 0;
    snprintf(want, sizeof want, "../../blobs/%s", sha_of("model.safetensors"));
    CHECK_STR(link, want);
    CHECK(same_content(path, "model.safetensors"));
    snprintf(path, sizeof path, "%s/snapshots/%s/config.json", e.repo_dir, HUB_MOCK_COMMIT);
    n = readlink(path, link, sizeof link - 1);
    REQUIRE(n > 0);
    link[n] = 0;
    snprintf(want, sizeof want, "../../blobs/%s", git_of("config.json"));
    CHECK_STR(link, want);
    CHECK(same_content(path, "config.json"));
    snprintf(path, sizeof path, "%s/snapshots/%s/README.md", e.repo_dir, HUB_MOCK_COMMIT);
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/blobs/%s.incomplete", e.repo_dir, sha_of("model.safetensors"));
    CHECK(access(path, F_OK) != 0);

    /* The model resolves by repo id to that snapshot, as transformers finds it. */
    char dir[4096];
    CHECKF(iris_model_resolve("tiny/qwen3-vl", dir, sizeof dir, &err) == 0, "%s", err.msg);
    CHECK_STR(dir, res.dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(same_content(path, "config.json"));

    /* Second pull: one listing request, no HEAD, no file bytes. */
    hub_mock_reset();
    rc = iris_hub_pull("tiny/qwen3-vl", &o, &res, &err);
    CHECKF(rc == 0, "second pull failed: %s", err.msg);
    CHECK_EQ_INT(res.n_downloaded, 0);
    CHECK_EQ_INT(res.bytes_downloaded, 0);
    CHECK_EQ_INT(atomic_load(&st->n_api), 1);
    CHECK_EQ_INT(atomic_load(&st->n_head), 0);
    CHECK_EQ_INT(atomic_load(&st->n_get_resolve) + atomic_load(&st->n_get_cdn), 0);

    /* A pull by commit hash writes no ref and reuses the same snapshot. */
    rc = iris_hub_pull("tiny/qwen3-vl@" HUB_MOCK_COMMIT, &o, &res, &err);
    CHECKF(rc == 0, "%s", err.msg);
    CHECK_EQ_INT(res.n_downloaded, 0);
    snprintf(path, sizeof path, "%s/refs/" HUB_MOCK_COMMIT, e.repo_dir);
    CHECK(access(path, F_OK) != 0);

    /* A renamed repo: relative redirects are followed, the cache keeps the name asked for. */
    rc = iris_hub_pull("tiny/old-name", &o, &res, &err);
    CHECKF(rc == 0, "renamed repo: %s", err.msg);
    CHECK_EQ_INT(res.n_files, 4);
    snprintf(path, sizeof path, "%s/models--tiny--old-name/snapshots/%s/config.json", e.cache, HUB_MOCK_COMMIT);
    CHECK(same_content(path, "config.json"));

    /* A deleted snapshot link comes back from the blob already there, with no download. */
    snprintf(path, sizeof path, "%s/snapshots/%s/model.safetensors", e.repo_dir, HUB_MOCK_COMMIT);
    unlink(path);
    hub_mock_reset();
    rc = iris_hub_pull("tiny/qwen3-vl", &o, &res, &err);
    CHECKF(rc == 0, "%s", err.msg);
    CHECK(same_content(path, "model.safetensors"));
    CHECK_EQ_INT(atomic_load(&st->n_head), 1);
    CHECK_EQ_INT(atomic_load(&st->n_get_cdn), 0);
    teardown(&e);
}

/* The connection drops midway: the partial file stays and the next pull resumes it with Range. */
IRIS_TEST(hub_pull_interrupted_resumes) {
    env e;
    REQUIRE(setup(&e) == 0);
    hub_mock_stats *st = hub_mock_stats_get();
    iris_hub_opts o = quiet_opts(0);
    atomic_store(&st->cut_once, 1);
    iris_err err = {0};
    int rc = iris_hub_pull("tiny/qwen3-vl", &o, NULL, &err);
    CHECK(rc != 0);
    CHECK_CONTAINS(err.msg, "model.safetensors");
    CHECK_CONTAINS(err.msg, "resumes");
    char part[600];
    snprintf(part, sizeof part, "%s/blobs/%s.incomplete", e.repo_dir, sha_of("model.safetensors"));
    long have = file_size(part);
    CHECKF(have > 0 && have <= atomic_load(&st->cut_at), "partial file has %ld bytes (cut at %ld)", have,
           (long)atomic_load(&st->cut_at));
    char ref[600];
    snprintf(ref, sizeof ref, "%s/refs/main", e.repo_dir);
    CHECK(access(ref, F_OK) != 0); /* no ref to an incomplete snapshot */

    iris_hub_result res;
    rc = iris_hub_pull("tiny/qwen3-vl", &o, &res, &err);
    CHECKF(rc == 0, "resumed pull failed: %s", err.msg);
    CHECK_EQ_INT(atomic_load(&st->last_range_start), have);
    CHECK_EQ_INT(res.bytes_downloaded + (uint64_t)have > 600000 ? 1 : 0, 1);
    char blob[600];
    snprintf(blob, sizeof blob, "%s/blobs/%s", e.repo_dir, sha_of("model.safetensors"));
    CHECK(same_content(blob, "model.safetensors"));
    CHECK(access(part, F_OK) != 0);

    /* Within one pull, a dropped transfer is retried from where it stopped. */
    teardown(&e);
    REQUIRE(setup(&e) == 0);
    atomic_store(&st->cut_once, 1);
    o = quiet_opts(2);
    rc = iris_hub_pull("tiny/qwen3-vl", &o, &res, &err);
    CHECKF(rc == 0, "pull with retry failed: %s", err.msg);
    CHECK_EQ_INT(atomic_load(&st->n_get_cdn), 2);
    CHECK(atomic_load(&st->last_range_start) > 0);
    snprintf(blob, sizeof blob, "%s/blobs/%s", e.repo_dir, sha_of("model.safetensors"));
    CHECK(same_content(blob, "model.safetensors"));
    teardown(&e);
}

IRIS_TEST(hub_pull_corrupt_removed) {
    env e;
    REQUIRE(setup(&e) == 0);
    atomic_store(&hub_mock_stats_get()->corrupt, 1);
    iris_hub_opts o = quiet_opts(0);
    iris_err err = {0};
    CHECK_EQ_INT(iris_hub_pull("tiny/qwen3-vl", &o, NULL, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "checksum mismatch");
    CHECK_CONTAINS(err.msg, sha_of("model.safetensors"));
    CHECK_CONTAINS(err.msg, "removed");
    char path[600];
    snprintf(path, sizeof path, "%s/blobs/%s", e.repo_dir, sha_of("model.safetensors"));
    CHECK(access(path, F_OK) != 0);
    strcat(path, ".incomplete");
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/snapshots/%s/model.safetensors", e.repo_dir, HUB_MOCK_COMMIT);
    CHECK(access(path, F_OK) != 0);
    char dir[4096];
    CHECK(iris_model_resolve("tiny/qwen3-vl", dir, sizeof dir, &err) != 0); /* no ref was written */
    teardown(&e);
}

IRIS_TEST(hub_pull_errors) {
    env e;
    REQUIRE(setup(&e) == 0);
    iris_hub_opts o = quiet_opts(0);
    iris_err err = {0};
    /* Gated: without a token (401), then with one that has no access (403). */
    CHECK(iris_hub_pull("tiny/gated", &o, NULL, &err) != 0);
    CHECK_CONTAINS(err.msg, "tiny/gated is a gated model and no token was given");
    CHECK_CONTAINS(err.msg, "accept its conditions");
    CHECK_CONTAINS(err.msg, "HF_TOKEN");
    o.token = "hf_wrong";
    CHECK(iris_hub_pull("tiny/gated", &o, NULL, &err) != 0);
    CHECK_CONTAINS(err.msg, "HTTP 403");
    CHECK_CONTAINS(err.msg, "the token in use has no access");
    o.token = NULL;
    /* The token file is read when HF_TOKEN is unset. */
    char tokfile[200];
    snprintf(tokfile, sizeof tokfile, "%s/token", e.tmp);
    FILE *f = fopen(tokfile, "w");
    REQUIRE(f);
    fputs("hf_fromfile\n", f);
    fclose(f);
    setenv("HF_TOKEN_PATH", tokfile, 1);
    CHECK(iris_hub_pull("tiny/gated", &o, NULL, &err) != 0);
    CHECK_CONTAINS(err.msg, "HTTP 403");
    unsetenv("HF_TOKEN_PATH");
    setenv("HF_TOKEN_PATH", "/nonexistent/iris-test-token", 1);

    CHECK_EQ_INT(iris_hub_pull("tiny/nope", &o, NULL, &err), IRIS_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "tiny/nope");
    CHECK_CONTAINS(err.msg, "not found");
    CHECK_EQ_INT(iris_hub_pull("tiny/qwen3-vl@nobranch", &o, NULL, &err), IRIS_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "revision 'nobranch'");
    CHECK_EQ_INT(iris_hub_pull("tiny/gguf", &o, NULL, &err), IRIS_EUNSUPPORTED);
    CHECK_CONTAINS(err.msg, "safetensors");
    /* Disk full, known before the first byte from the listing's sizes. */
    CHECK_EQ_INT(iris_hub_pull("tiny/huge", &o, NULL, &err), IRIS_ELIMIT);
    CHECK_CONTAINS(err.msg, "not enough disk space");
    CHECK_CONTAINS(err.msg, "1.00 PB");
    CHECK_EQ_INT(atomic_load(&hub_mock_stats_get()->n_get_cdn), 0);
    /* Network down: nothing listens on port 1. */
    o.endpoint = "http://127.0.0.1:1";
    CHECK_EQ_INT(iris_hub_pull("tiny/qwen3-vl", &o, NULL, &err), IRIS_EIO);
    CHECK_CONTAINS(err.msg, "cannot reach http://127.0.0.1:1");
    o.endpoint = "ftp://example.com";
    CHECK_EQ_INT(iris_hub_pull("tiny/qwen3-vl", &o, NULL, &err), IRIS_EINVAL);
    CHECK_EQ_INT(iris_hub_pull("not a repo", &o, NULL, &err), IRIS_EINVAL);
    teardown(&e);
}

IRIS_TEST(hub_offline_and_ensure) {
    env e;
    REQUIRE(setup(&e) == 0);
    hub_mock_stats *st = hub_mock_stats_get();
    iris_err err = {0};
    char dir[4096];
    setenv("HF_HUB_OFFLINE", "1", 1);
    iris_hub_opts o = quiet_opts(0);
    CHECK_EQ_INT(iris_hub_pull("tiny/qwen3-vl", &o, NULL, &err), IRIS_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "HF_HUB_OFFLINE");
    CHECK_CONTAINS(err.msg, "iris pull tiny/qwen3-vl");
    CHECK(iris_model_ensure("tiny/qwen3-vl", dir, sizeof dir, 1, &err) != 0);
    CHECK_CONTAINS(err.msg, "HF_HUB_OFFLINE");
    CHECK_CONTAINS(err.msg, "iris pull tiny/qwen3-vl");
    CHECK_EQ_INT(atomic_load(&st->n_api) + atomic_load(&st->n_head), 0);

    /* Online, ensure pulls a missing model once (progress off: stderr not a tty in tests). */
    unsetenv("HF_HUB_OFFLINE");
    CHECK(iris_model_ensure("tiny/qwen3-vl", dir, sizeof dir, 0, &err) != 0);
    CHECK_CONTAINS(err.msg, "iris pull tiny/qwen3-vl");
    CHECKF(iris_model_ensure("tiny/qwen3-vl", dir, sizeof dir, 1, &err) == 0, "%s", err.msg);
    CHECK_CONTAINS(dir, HUB_MOCK_COMMIT);
    CHECK_EQ_INT(atomic_load(&st->n_get_cdn), 1);

    /* Offline again, the cached model resolves without a request. */
    setenv("HF_HUB_OFFLINE", "1", 1);
    hub_mock_reset();
    iris_hub_result res;
    CHECKF(iris_hub_pull("tiny/qwen3-vl", &o, &res, &err) == 0, "%s", err.msg);
    CHECK_STR(res.commit, HUB_MOCK_COMMIT);
    CHECK_STR(res.dir, dir);
    CHECKF(iris_model_ensure("tiny/qwen3-vl", dir, sizeof dir, 1, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(atomic_load(&st->n_api) + atomic_load(&st->n_head), 0);

    /* iris_hub_list sees it, supported. */
    iris_hub_model *v = NULL;
    int n = 0;
    CHECK_EQ_INT(iris_hub_list(&v, &n, &err), 0);
    REQUIRE(n == 1);
    CHECK_STR(v[0].repo, "tiny/qwen3-vl");
    CHECK_STR(v[0].refs, "main");
    CHECK_STR(v[0].model_type, "qwen3_vl");
    CHECK(v[0].supported);
    CHECK(v[0].size_bytes > 600000);
    CHECK_STR(v[0].dir, dir);
    free(v);
    teardown(&e);
}

/* Runs a shell command, returns its exit status and its stdout+stderr. */
static int run_cmd(const char *cmd, char *out, size_t out_size) {
    int st;
    char *s = iris_test_popen(cmd, &st);
    snprintf(out, out_size, "%s", s ? s : "");
    free(s);
    return st;
}

IRIS_TEST(hub_cli_pull_ls) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    REQUIRE(access(bin, X_OK) == 0 || (fprintf(stderr, "  %s not built (set IRIS_BIN)\n", bin), 0));
    env e;
    REQUIRE(setup(&e) == 0);
    char cmd[1200], out[8192], want[600];
    snprintf(cmd, sizeof cmd, "%s pull tiny/qwen3-vl 2>&1", bin);
    CHECK_EQ_INT(run_cmd(cmd, out, sizeof out), 0);
    snprintf(want, sizeof want, REPO_DIR_FMT "/snapshots/%s\n", e.cache, HUB_MOCK_COMMIT);
    CHECK_CONTAINS(out, want);                          /* the snapshot dir on stdout */
    CHECK_CONTAINS(out, "pull tiny/qwen3-vl: ");        /* plain progress lines: stderr is not a tty */
    CHECK_CONTAINS(out, "4/4 files");
    CHECK_CONTAINS(out, "pulled commit 4d5e6f708192");
    snprintf(cmd, sizeof cmd, "%s pull tiny/qwen3-vl 2>&1", bin);
    CHECK_EQ_INT(run_cmd(cmd, out, sizeof out), 0);
    CHECK_CONTAINS(out, "nothing downloaded");
    snprintf(cmd, sizeof cmd, "%s ls", bin);
    CHECK_EQ_INT(run_cmd(cmd, out, sizeof out), 0);
    CHECK_CONTAINS(out, "tiny/qwen3-vl");
    CHECK_CONTAINS(out, "qwen3_vl");
    CHECK_CONTAINS(out, "yes");
    snprintf(cmd, sizeof cmd, "%s ls --json", bin);
    CHECK_EQ_INT(run_cmd(cmd, out, sizeof out), 0);
    CHECK_CONTAINS(out, "\"supported\": true");
    snprintf(cmd, sizeof cmd, "%s pull tiny/gated 2>&1", bin);
    CHECK_EQ_INT(run_cmd(cmd, out, sizeof out), 1);
    CHECK_CONTAINS(out, "iris: tiny/gated is a gated model");
    snprintf(cmd, sizeof cmd, "HF_HUB_OFFLINE=1 %s pull tiny/other 2>&1", bin);
    CHECK_EQ_INT(run_cmd(cmd, out, sizeof out), 1);
    CHECK_CONTAINS(out, "iris pull tiny/other");
    snprintf(cmd, sizeof cmd, "%s pull 2>&1", bin);
    CHECK_EQ_INT(run_cmd(cmd, out, sizeof out), 2);
    snprintf(cmd, sizeof cmd, "%s pull --help", bin);
    CHECK_EQ_INT(run_cmd(cmd, out, sizeof out), 0);
    CHECK_CONTAINS(out, "HF_TOKEN");
    teardown(&e);
}

/* One download rule for every command that opens a model (engine_flags.h): a repo id missing from
 * the cache is downloaded after saying so, unless --offline or HF_HUB_OFFLINE=1; iris serve the
 * same, without --download. */
IRIS_TEST(hub_cli_download_rule) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    env e;
    REQUIRE(setup(&e) == 0);
    char cmd[1200], out[16384];
    /* --offline and HF_HUB_OFFLINE: no request, the error names iris pull */
    snprintf(cmd, sizeof cmd, "%s run -m tiny/qwen3-vl --offline --max-tokens 2 hi 2>&1", bin);
    CHECK_EQ_INT(run_cmd(cmd, out, sizeof out), 1);
    CHECK_CONTAINS(out, "iris pull tiny/qwen3-vl");
    snprintf(cmd, sizeof cmd, "HF_HUB_OFFLINE=1 %s serve tiny/qwen3-vl --port 0 2>&1", bin);
    CHECK_EQ_INT(run_cmd(cmd, out, sizeof out), 1);
    CHECK_CONTAINS(out, "iris pull tiny/qwen3-vl");
    CHECK_EQ_INT(atomic_load(&hub_mock_stats_get()->n_api), 0);
    /* serve: downloads without --download (the mock's model then fails its config check: exit 1,
     * but after the download, which is what is checked here) */
    snprintf(cmd, sizeof cmd, "timeout -s TERM 20 %s serve tiny/qwen3-vl --port 0 --device cpu 2>&1", bin);
    run_cmd(cmd, out, sizeof out);
    CHECK_CONTAINS(out, "tiny/qwen3-vl is not in the cache: downloading it");
    CHECK_CONTAINS(out, "4/4 files");
    CHECK_CONTAINS(out, "out_hidden_size");
    CHECK(atomic_load(&hub_mock_stats_get()->n_get_cdn) > 0);
    /* run: the cached copy, nothing downloaded again; --quiet: only the (model's) error */
    hub_mock_reset();
    snprintf(cmd, sizeof cmd, "%s run -m tiny/qwen3-vl -q --max-tokens 2 hi 2>&1 >/dev/null", bin);
    CHECK_EQ_INT(run_cmd(cmd, out, sizeof out), 1);
    CHECKF(!strstr(out, "downloading") && strstr(out, "out_hidden_size"), "%s", out);
    CHECK_EQ_INT(atomic_load(&hub_mock_stats_get()->n_get_cdn), 0);
    teardown(&e);
}

/* iris plan of a repo id not in the cache, online: config.json and the safetensors header by range
 * requests (a few KB of the 675 kB file), the same plan as from the files themselves, nothing in
 * the cache. */
IRIS_TEST(hub_cli_plan_online) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    env e;
    REQUIRE(setup(&e) == 0);
    char cmd[1200], out[65536], local[65536];
    snprintf(cmd, sizeof cmd, "%s plan tiny/plan --plan-json 2>/tmp/iris-plan-online-%d.err", bin, (int)getpid());
    CHECK_EQ_INT(run_cmd(cmd, out, sizeof out), 0);
    long sent = atomic_load(&hub_mock_stats_get()->plan_bytes);
    CHECKF(sent > 1000 && sent < 20000, "%ld bytes sent for the plan", sent);
    snprintf(cmd, sizeof cmd, "cat /tmp/iris-plan-online-%d.err; rm -f /tmp/iris-plan-online-%d.err", (int)getpid(),
             (int)getpid());
    char err_text[4096];
    run_cmd(cmd, err_text, sizeof err_text);
    CHECK_CONTAINS(err_text, "from the Hub: config.json and the safetensors headers");
    snprintf(cmd, sizeof cmd, "%s plan tests/fixtures/tiny/tiny-gqa/model --plan-json 2>/dev/null", bin);
    CHECK_EQ_INT(run_cmd(cmd, local, sizeof local), 0);
    json_t *a = json_loads(out, 0, NULL), *b = json_loads(local, 0, NULL);
    REQUIRE(a && b);
    json_object_del(a, "model"), json_object_del(b, "model");
    CHECKF(json_equal(a, b), "online:\n%s\nlocal:\n%s", out, local);
    json_decref(a), json_decref(b);
    CHECK(access(e.repo_dir, F_OK) != 0);   /* nothing went into the cache */
    /* a repo the Hub does not have: exit 1, said */
    snprintf(cmd, sizeof cmd, "%s plan tiny/nope 2>&1", bin);
    CHECK_EQ_INT(run_cmd(cmd, out, sizeof out), 1);
    CHECK_CONTAINS(out, "tiny/nope");
    teardown(&e);
}
