/* test_image_cap.c: the image cap is the engine's one setting (iris.h max_image_pixels,
 * --max-image-pixels, 1,048,576 by default), taken by every front door through
 * iris_engine_prompt_ctx: `iris caption` and `iris serve` resize the same 1536x1024 picture
 * (1,572,864 pixels) to the same bound, on the CPU, with the tiny model given Qwen3-VL's real
 * size.longest_edge (16,777,216) so that only the cap resizes it. */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "formats/grounding.h"
#include "formats/image.h"
#include "iris.h"
#include "server_harness.h"
#include "test.h"

#define CAP_W 1536
#define CAP_H 1024

/* A grey gradient PNG of w x h at path, through the project's PNG writer; 0 or -1. */
static int write_png(const char *path, uint32_t w, uint32_t h) {
    iris_image im = {.width = (int)w, .height = (int)h, .rgb = malloc((size_t)w * h * 3)};
    if (!im.rgb) return -1;
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) memset(im.rgb + ((size_t)y * w + x) * 3, (x + y) & 0xff, 3);
    iris_err err = {0};
    int rc = iris_image_write_png(&im, path, &err) ? -1 : 0;
    free(im.rgb);
    return rc;
}

/* dir: the tiny model (links) with preprocessor_config.json's size.longest_edge 16,777,216. */
static int big_model(const char *dir) {
    const char *files[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                           "generation_config.json", "chat_template.json"};
    char path[512], src[512];
    mkdir(dir, 0755);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        snprintf(src, sizeof src, "%s/%s", TS_MODEL, files[i]);
        char *abs = realpath(src, NULL);
        unlink(path);
        int bad = !abs || symlink(abs, path);
        free(abs);
        if (bad) return -1;
    }
    json_error_t je;
    json_t *pc = json_load_file(TS_MODEL "/preprocessor_config.json", 0, &je);
    if (!pc) return -1;
    json_object_set_new(json_object_get(pc, "size"), "longest_edge", json_integer(16777216));
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    int rc = json_dump_file(pc, path, JSON_INDENT(1));
    json_decref(pc);
    return rc;
}

static void rm_model(const char *dir) {
    const char *files[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                           "generation_config.json", "chat_template.json", "preprocessor_config.json"};
    char path[512];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* `iris caption MODEL IMG -v EXTRA`: the "N prompt tokens" of its statistics line, or -1. */
static int cli_prompt_tokens(const char *model, const char *img, const char *extra) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s caption -m %s %s -v --device cpu --max-tokens 1 %s 2>&1", ts_bin(), model, img, extra);
    int st = -1;
    char *out = iris_test_popen(cmd, &st);
    const char *p = out && st == 0 ? strstr(out, " prompt tokens") : NULL;
    int n = -1;
    if (p) {
        while (p > out && p[-1] >= '0' && p[-1] <= '9') p--;
        n = atoi(p);
    } else {
        fprintf(stderr, "%s: exit %d\n%s\n", cmd, st, out ? out : "(no output)");
    }
    free(out);
    return n;
}

/* One image and "x" to `iris serve MODEL EXTRA`: the answer's usage.prompt_tokens, or -1. */
static long long server_prompt_tokens(const char *model, const char *img, const char *extra) {
    ts_server s;
    if (ts_server_start_model(&s, model, extra)) return -1;
    char *url = ts_data_url(img), *out = NULL;
    char *req = ts_chat_body(url, "x", "\"max_tokens\":1");
    long st = ts_post(s.port, "/v1/chat/completions", req, &out);
    json_t *j = st == 200 ? ts_json(out) : NULL;
    long long n = j ? ts_jint(j, "usage.prompt_tokens") : -1;
    if (n < 0) fprintf(stderr, "iris serve %s: status %ld: %s\n", extra, st, out ? out : "");
    json_decref(j);
    free(out);
    free(req);
    free(url);
    ts_server_stop(&s);
    return n;
}

/* The engine resolves the default once; its prompt context carries it (or the value given). */
IRIS_TEST(image_cap_engine_default) {
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = TS_MODEL;
    o.device = "cpu";
    o.kv_cache_bytes = 16u << 20;
    CHECK_EQ_INT(o.max_image_pixels, 0);
    iris_engine *e = NULL;
    iris_err err = {0};
    REQUIRE(iris_engine_open(&o, &e, &err) == 0);
    iris_prompt_ctx ctx;
    iris_engine_prompt_ctx(e, &ctx);
    CHECK_EQ_INT(ctx.max_image_pixels, 1048576);
    iris_engine_close(e);
    o.max_image_pixels = 40000;
    REQUIRE(iris_engine_open(&o, &e, &err) == 0);
    iris_engine_prompt_ctx(e, &ctx);
    CHECK_EQ_INT(ctx.max_image_pixels, 40000);
    iris_engine_close(e);
}

/* The CLI and the server: the same cap, by default and as given.  The picture uncapped would be
 * 1,536 image tokens; at 1,048,576 pixels it is at most 1,024, at 65,536 at most 64. */
IRIS_TEST(image_cap_cli_and_server) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char dir[64], img[64];
    snprintf(dir, sizeof dir, "/tmp/iris-cap-model-%d", (int)getpid());
    snprintf(img, sizeof img, "/tmp/iris-cap-%d.png", (int)getpid());
    REQUIRE(big_model(dir) == 0);
    REQUIRE(write_png(img, CAP_W, CAP_H) == 0);
    int text = cli_prompt_tokens(TS_MODEL, TS_IMG_A, "--max-image-pixels 1024"); /* one image token */
    long long stext = server_prompt_tokens(TS_MODEL, TS_IMG_A, "--max-image-pixels 1024");
    int cli = cli_prompt_tokens(dir, img, "");
    int cli_small = cli_prompt_tokens(dir, img, "--max-image-pixels 65536");
    long long srv = server_prompt_tokens(dir, img, "");
    long long srv_small = server_prompt_tokens(dir, img, "--max-image-pixels 65536");
    CHECKF(text > 0 && stext > 0, "one-token prompts: CLI %d, server %lld", text, stext);
    /* Default: resized below 1,024 tokens, close to it (smart_resize keeps the aspect to 32 px). */
    CHECKF(cli - (text - 1) > 900 && cli - (text - 1) <= 1024, "CLI, default cap: %d image tokens", cli - (text - 1));
    CHECKF(srv - (stext - 1) == cli - (text - 1), "server, default cap: %lld image tokens, CLI %d",
           srv - (stext - 1), cli - (text - 1));
    CHECKF(cli_small - (text - 1) > 0 && cli_small - (text - 1) <= 64, "CLI, 65536: %d image tokens",
           cli_small - (text - 1));
    CHECKF(srv_small - (stext - 1) == cli_small - (text - 1), "server, 65536: %lld image tokens, CLI %d",
           srv_small - (stext - 1), cli_small - (text - 1));
    unlink(img);
    rm_model(dir);
}
