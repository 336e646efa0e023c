/* test_cli_output.c: the inference commands' output for scripts, through
 * the real binary (env IRIS_BIN, default build/iris): --json is one JSON
 * object on stdout with the text, the finish reason, token counts and
 * timings; --quiet leaves stderr empty; the statistics line only with
 * --verbose (stderr is a pipe here, not a terminal); the prompt from stdin
 * (`-`) or --prompt-file gives the same answer as the argument; the demo
 * model says once that it is the demo model, naming how to use a real one. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "tiny_fixture.h"

#define MODEL TINY_DIR "/tiny-gqa/model"
#define IMG TINY_DIR "/images/a.png"
#define GEN " --max-tokens 6 --temperature 0"

static const char *bin(void) { return getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris"; }

/* `iris ARGS`: stdout (or stderr alone when `which` is 2) and the exit status. */
static char *iris_out(const char *pre, const char *args, int which, int *st) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s %s %s", pre, bin(), args, which == 2 ? "2>&1 >/dev/null" : "2>/dev/null");
    char *s = iris_test_popen(cmd, st);
    return s ? s : strdup("");
}

IRIS_TEST(cli_output_json) {
    int st;
    char *plain = iris_out("", "run " MODEL " Hello" GEN, 1, &st);
    CHECK_EQ_INT(st, 0);
    char *js = iris_out("", "run " MODEL " Hello --json" GEN, 1, &st);
    CHECK_EQ_INT(st, 0);
    json_error_t je;
    json_t *o = json_loads(js, 0, &je);   /* exactly one JSON value on stdout */
    CHECKF(o != NULL, "not one JSON object: %s (%s)", js, je.text);
    if (o) {
        const char *text = json_string_value(json_object_get(o, "text"));
        REQUIRE(text);
        /* the same text as streamed (which ends with one newline) */
        CHECKF(strlen(plain) == strlen(text) + 1 && !strncmp(plain, text, strlen(text)), "json \"%s\" vs \"%s\"", text,
               plain);
        CHECK_STR(json_string_value(json_object_get(o, "finish_reason")), "length");
        json_t *u = json_object_get(o, "usage");
        CHECK_EQ_INT(json_integer_value(json_object_get(u, "completion_tokens")), 6);
        CHECK(json_integer_value(json_object_get(u, "prompt_tokens")) > 5);
        json_t *t = json_object_get(o, "timings");
        CHECK(json_is_number(json_object_get(t, "ttft_s")) && json_is_number(json_object_get(t, "total_s")));
        CHECK(json_number_value(json_object_get(t, "total_s")) >= json_number_value(json_object_get(t, "ttft_s")));
    }
    json_decref(o);
    free(js);
    /* caption --json too */
    js = iris_out("", "caption -m " MODEL " " IMG " --json" GEN, 1, &st);
    CHECK_EQ_INT(st, 0);
    o = json_loads(js, 0, &je);
    CHECKF(o && json_is_string(json_object_get(o, "text")), "%s", js);
    json_decref(o);
    free(js);
    free(plain);
}

IRIS_TEST(cli_output_quiet_and_stats) {
    int st;
    /* a pipe is not a terminal: no statistics, no engine log, unless --verbose */
    char *err = iris_out("", "run " MODEL " Hello" GEN, 2, &st);
    CHECK_EQ_INT(st, 0);
    CHECKF(err[0] == 0, "stderr without --verbose: %s", err);
    free(err);
    err = iris_out("", "run " MODEL " Hello --verbose" GEN, 2, &st);
    CHECK_CONTAINS(err, "6 generated (length)");
    free(err);
    /* --quiet: nothing, even with the demo model's notice and the log asked for */
    err = iris_out("IRIS_LOG=debug", "caption -q " IMG GEN, 2, &st);
    CHECK_EQ_INT(st, 0);
    CHECKF(err[0] == 0, "stderr with --quiet: %s", err);
    free(err);
    /* errors still come through */
    err = iris_out("", "caption -q -m " MODEL " /nonexistent.png", 2, &st);
    CHECK_EQ_INT(st, 1);
    CHECK_CONTAINS(err, "/nonexistent.png");
    free(err);
}

IRIS_TEST(cli_output_prompt_sources) {
    int st;
    char *arg = iris_out("", "run " MODEL " 'Hello there'" GEN, 1, &st);
    CHECK_EQ_INT(st, 0);
    char *in = iris_out("printf 'Hello there\\n' |", "run " MODEL " -" GEN, 1, &st);
    CHECK_EQ_INT(st, 0);
    CHECK_STR(in, arg);
    char path[128], cmd[256];
    snprintf(path, sizeof path, "/tmp/iris-test-prompt-%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs("Hello there\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "run " MODEL " --prompt-file %s" GEN, path);
    char *file = iris_out("", cmd, 1, &st);
    CHECK_EQ_INT(st, 0);
    CHECK_STR(file, arg);
    /* ask: the question from stdin */
    char *q1 = iris_out("", "ask -m " MODEL " " IMG " 'What is it?'" GEN, 1, &st);
    char *q2 = iris_out("echo 'What is it?' |", "ask -m " MODEL " " IMG " -" GEN, 1, &st);
    CHECK_EQ_INT(st, 0);
    CHECK_STR(q2, q1);
    /* a prompt given twice, or a missing file */
    free(iris_out("", "run " MODEL " hi --prompt-file /dev/null", 1, &st));
    CHECK_EQ_INT(st, 2);
    char *e = iris_out("", "run " MODEL " --prompt-file /nonexistent-prompt.txt", 2, &st);
    CHECK_EQ_INT(st, 1);
    CHECK_CONTAINS(e, "/nonexistent-prompt.txt");
    remove(path);
    free(arg), free(in), free(file), free(q1), free(q2), free(e);
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

IRIS_TEST(cli_output_demo_notice) {
    int st;
    char *err = iris_out("", "caption " IMG GEN, 2, &st);
    CHECK_EQ_INT(st, 0);
    CHECKF(count(err, "demo model") == 1, "the notice %d times: %s", count(err, "demo model"), err);
    CHECK_CONTAINS(err, "-m Qwen/Qwen3-VL-");   /* how to use a real one */
    free(err);
    /* a model given: no notice */
    err = iris_out("", "caption -m " MODEL " " IMG GEN, 2, &st);
    CHECK(!strstr(err, "demo model"));
    free(err);
}
