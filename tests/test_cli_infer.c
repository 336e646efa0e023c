/* test_cli_infer.c: `iris run|caption|ask|describe|logits` through the real
 * binary (env IRIS_BIN, default build/iris): usage, and bad input giving a
 * clear message and a non-zero exit (a missing tensor, a wrong shape, an
 * image that does not decode, a prompt longer than the context), and --max-image-pixels
 * resizing on the CPU too. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "tiny_fixture.h"

#define MODEL TINY_DIR "/tiny-gqa/model"
#define IMG TINY_DIR "/images/a.png"

/* Runs `iris ARGS 2>&1`; returns the exit status, output in out. */
static int iris(const char *args, char *out, size_t cap) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", bin, args);
    int st;
    char *s = iris_test_popen(cmd, &st);
    snprintf(out, cap, "%s", s ? s : "");
    free(s);
    return st;
}

/* A copy of the tiny model whose config.json has text/vision key `key` set
 * to `val` (links to the other files). */
static void broken_model(const char *dir, const char *part, const char *key, int val) {
    char path[512], src[512];
    mkdir(dir, 0755);
    const char *files[] = {"model.safetensors", "tokenizer.json", "preprocessor_config.json", "generation_config.json"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        snprintf(src, sizeof src, "%s/%s", MODEL, files[i]);
        char *abs = realpath(src, NULL);
        unlink(path);
        if (abs && symlink(abs, path)) perror(path);
        free(abs);
    }
    json_error_t je;
    json_t *cfg = json_load_file(MODEL "/config.json", 0, &je);
    json_object_set_new(json_object_get(cfg, part), key, json_integer(val));
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_dump_file(cfg, path, JSON_INDENT(1));
    json_decref(cfg);
}

IRIS_TEST(cli_infer_usage) {
    char out[8192];
    const char *cmds[] = {"run", "caption", "ask", "describe", "logits"};
    for (int i = 0; i < 5; i++) {
        char a[64];
        snprintf(a, sizeof a, "%s --help", cmds[i]);
        CHECK_EQ_INT(iris(a, out, sizeof out), 0);
        CHECK_CONTAINS(out, "usage: iris");
    }
    CHECK_EQ_INT(iris("caption", out, sizeof out), 2);   /* no image */
    CHECK_CONTAINS(out, "IMAGE");
    CHECK_CONTAINS(out, "iris caption --help");
    /* no --model: the default model; one that is missing is named */
    setenv("IRIS_DEMO_MODEL", "/nonexistent-demo-model", 1);
    CHECK_EQ_INT(iris("caption " IMG, out, sizeof out), 1);
    unsetenv("IRIS_DEMO_MODEL");
    CHECK_CONTAINS(out, "/nonexistent-demo-model");
    /* --device cuda: runs where there is a GPU; elsewhere one clear error pointing to --device cpu */
    int rc = iris("run " MODEL " --device cuda --max-tokens 2 hi", out, sizeof out);
    if (rc == 0) {
        CHECK_CONTAINS(out, "on cuda");
    } else {
        CHECK_EQ_INT(rc, 1);
        CHECK_CONTAINS(out, "--device cpu");
    }
    CHECK_EQ_INT(iris("run " MODEL " --device tpu hi", out, sizeof out), 2);
    CHECK_EQ_INT(iris("run " MODEL " --gpu-memory-utilization 1.5 hi", out, sizeof out), 2);
    CHECK_CONTAINS(out, "--gpu-memory-utilization");
    CHECK_EQ_INT(iris("run " MODEL " --gpu-memory-limit lots hi", out, sizeof out), 2);
    CHECK_EQ_INT(iris("run " MODEL " --temperature warm hi", out, sizeof out), 2);
    CHECK_CONTAINS(out, "--temperature 'warm': give a number");
    CHECK_EQ_INT(iris("logits " MODEL " --prompt hi", out, sizeof out), 2);   /* no --out */
    CHECK_EQ_INT(iris("run " MODEL " --top-p 7 hi", out, sizeof out), 2);    /* named by its flag */
    CHECK_CONTAINS(out, "--top-p '7'");
}

IRIS_TEST(cli_infer_bad_input) {
    char out[8192];
    /* an image that does not decode */
    CHECK_EQ_INT(iris("run " MODEL " --image " MODEL "/config.json hi", out, sizeof out), 1);
    CHECK_CONTAINS(out, "config.json");
    CHECK_CONTAINS(out, "not an image");
    CHECK_EQ_INT(iris("ask --model " MODEL " /nonexistent.png hi", out, sizeof out), 1);
    CHECK_CONTAINS(out, "/nonexistent.png");
    /* a missing tensor */
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/iris-test-cli-%d-a", (int)getpid());
    broken_model(dir, "vision_config", "depth", 4);
    char a[512];
    snprintf(a, sizeof a, "caption --model %s " IMG, dir);
    CHECK_EQ_INT(iris(a, out, sizeof out), 1);
    CHECK_CONTAINS(out, "model.visual.blocks.3.norm1.weight");
    CHECK_CONTAINS(out, "missing");
    /* a wrong shape */
    snprintf(dir, sizeof dir, "/tmp/iris-test-cli-%d-b", (int)getpid());
    broken_model(dir, "vision_config", "intermediate_size", 80);
    snprintf(a, sizeof a, "caption --model %s " IMG, dir);
    CHECK_EQ_INT(iris(a, out, sizeof out), 1);
    CHECK_CONTAINS(out, "model.visual.blocks.0.mlp.linear_fc1.weight");
    CHECK_CONTAINS(out, "shape");
    /* a prompt longer than the context */
    snprintf(dir, sizeof dir, "/tmp/iris-test-cli-%d-c", (int)getpid());
    broken_model(dir, "text_config", "max_position_embeddings", 20);
    snprintf(a, sizeof a, "run %s --image " IMG " \"What is in this image?\"", dir);
    CHECK_EQ_INT(iris(a, out, sizeof out), 1);
    CHECK_CONTAINS(out, "the context of this model is 20 tokens");
    char rm[512];
    snprintf(rm, sizeof rm, "rm -rf /tmp/iris-test-cli-%d-a /tmp/iris-test-cli-%d-b /tmp/iris-test-cli-%d-c",
             (int)getpid(), (int)getpid(), (int)getpid());
    CHECK(system(rm) == 0);
}

/* "N prompt tokens" of a `-v` statistics line, or -1. */
static int prompt_tokens(const char *out) {
    const char *p = strstr(out, " prompt tokens");
    if (!p) return -1;
    while (p > out && p[-1] >= '0' && p[-1] <= '9') p--;
    return atoi(p);
}

/* --max-image-pixels resizes the image on every front door (the CLI here; the server's tests
 * cover it there), also on the CPU, where no memory plan applies it: the demo model's 131,072-pixel
 * scene (128 image tokens) comes down to at most 40,000 pixels (39 tokens of 32x32 pixels). */
IRIS_TEST(cli_max_image_pixels_resizes) {
    char out[8192];
    CHECK_EQ_INT(iris("caption examples/images/scene1.png -v --max-tokens 4", out, sizeof out), 0);
    int whole = prompt_tokens(out);
    CHECK_EQ_INT(iris("caption examples/images/scene1.png -v --max-tokens 4 --max-image-pixels 40000", out, sizeof out), 0);
    int capped = prompt_tokens(out);
    CHECKF(whole > 128 && capped > 0 && capped <= whole - 128 + 39, "prompt tokens %d as given, %d capped", whole, capped);
}
