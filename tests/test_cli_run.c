/* test_cli_run.c: `iris run` flags that shape the answer: --stop cuts the
 * streamed text before the stop string and reports finish "stop";
 * --threads 1 gives the same greedy answer as the default thread count.
 * `iris caption` loads the model once and decodes its image once; `iris bench`
 * times the steps of the engine's own runner (one load, one runner); --json-schema
 * answers follow their schema. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include <jansson.h>

#include <unistd.h>

static char *capture(const char *cmd) {
    int st;
    return iris_test_popen(cmd, &st);
}

IRIS_TEST(cli_run_stop_and_threads) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    const char *model = "tests/fixtures/tiny/tiny-gqa/model";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s run %s Hello --temperature 0 --max-tokens 16 2>/dev/null", bin, model);
    char *full = capture(cmd);
    REQUIRE(full && strlen(full) > 6);
    snprintf(cmd, sizeof cmd, "%s run %s Hello --temperature 0 --max-tokens 16 --threads 1 2>/dev/null", bin, model);
    char *one = capture(cmd);
    CHECK_STR(one, full);
    /* stop at the second occurrence-free point: the 3 characters starting at offset 4 */
    char stop[4];
    memcpy(stop, full + 4, 3);
    stop[3] = 0;
    char *at = strstr(full, stop);
    REQUIRE(at);
    snprintf(cmd, sizeof cmd, "%s run %s Hello --temperature 0 --max-tokens 16 --verbose --stop '%s' 2>&1 >/tmp/iris-stop-%d.txt",
             bin, model, stop, (int)getpid());
    char *err = capture(cmd);
    CHECK_CONTAINS(err, "(stop)");
    snprintf(cmd, sizeof cmd, "cat /tmp/iris-stop-%d.txt; rm -f /tmp/iris-stop-%d.txt", (int)getpid(), (int)getpid());
    char *cut = capture(cmd);
    REQUIRE(cut);
    /* the answer is everything before the stop string, then the final newline */
    CHECK_EQ_INT(strlen(cut), (at - full) + 1);
    CHECK(strncmp(cut, full, (size_t)(at - full)) == 0);
    free(full), free(one), free(err), free(cut);
    snprintf(cmd, sizeof cmd, "%s run %s Hello --threads 0 2>&1", bin, model);
    char *bad = capture(cmd);
    CHECK_CONTAINS(bad, "--threads '0'");
    free(bad);
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

/* `iris ARGS` with the debug log (stderr joined): its output once it exited 0 having opened the
 * checkpoint exactly once (NULL after a failed check). */
static char *run_loaded_once(const char *args) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "IRIS_LOG=debug %s %s 2>&1", bin, args);
    int st;
    char *out = iris_test_popen(cmd, &st);
    if (!out) return NULL;
    CHECKF(st == 0, "exit %d: %s", st, out);
    CHECKF(count(out, "opening checkpoint") == 1, "the checkpoint was opened %d times:\n%s",
           count(out, "opening checkpoint"), out);
    return out;
}

/* One load of the checkpoint and one decode of the image per command (the engine's loader and the
 * one prompt builder, engine/prompt.c), told by the debug log. */
IRIS_TEST(cli_caption_loads_once) {
    char *out = run_loaded_once("caption -v --model tests/fixtures/tiny/tiny-gqa/model "
                                "tests/fixtures/tiny/images/a.png --max-tokens 3 --temperature 0");
    REQUIRE(out);
    CHECKF(count(out, "a.png: ") == 1, "the image was decoded %d times:\n%s", count(out, "a.png: "), out);
    CHECK_CONTAINS(out, "3 generated");
    free(out);
}

/* iris bench opens the engine (one checkpoint open, one runner: the engine's) and reports a
 * prefill and every asked batch size from the runner's step. */
IRIS_TEST(cli_bench_through_engine) {
    char *out = run_loaded_once("bench tests/fixtures/tiny/tiny-gqa/model --device cpu --batch 1,3 "
                                "--prompt-tokens 20 --gen-tokens 3");
    REQUIRE(out);
    CHECKF(count(out, "[runner] opened") == 1, "%d runners opened:\n%s", count(out, "[runner] opened"), out);
    CHECK_CONTAINS(out, "\"prefill\":{\"tokens\":32,");
    CHECK_CONTAINS(out, "{\"batch\":1,");
    CHECK_CONTAINS(out, "{\"batch\":3,");
    free(out);
}

/* --json-schema FILE: at temperature 1 and several seeds the demo model's answer parses and follows
 * the schema (an enum, a bounded integer, required keys, nothing else); a schema keyword iris cannot
 * honour is refused by name. */
IRIS_TEST(cli_json_schema) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    char path[64], cmd[1024];
    snprintf(path, sizeof path, "/tmp/iris-schema-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs("{\"type\":\"object\",\"properties\":{\"shape\":{\"enum\":[\"square\",\"circle\"]},"
          "\"count\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}},\"required\":[\"shape\",\"count\"],"
          "\"additionalProperties\":false}", f);
    fclose(f);
    for (int seed = 1; seed <= 4; seed++) {
        snprintf(cmd, sizeof cmd, "%s ask examples/images/scene1.png 'How many squares?' --json-schema %s "
                 "--temperature 1 --seed %d -q", bin, path, seed);
        int st;
        char *out = iris_test_popen(cmd, &st);
        REQUIRE(out);
        CHECKF(st == 0, "seed %d: exit %d", seed, st);
        json_error_t je;
        json_t *j = json_loads(out, 0, &je);
        CHECKF(j && json_is_object(j), "seed %d: not a JSON object: %s", seed, out);
        if (j) {
            const char *shape = json_string_value(json_object_get(j, "shape"));
            json_t *count = json_object_get(j, "count");
            CHECKF(shape && (!strcmp(shape, "square") || !strcmp(shape, "circle")), "seed %d: shape in %s", seed, out);
            CHECKF(json_is_integer(count) && json_integer_value(count) >= 0 && json_integer_value(count) <= 9,
                   "seed %d: count in %s", seed, out);
            CHECKF(json_object_size(j) == 2, "seed %d: extra keys in %s", seed, out);
        }
        json_decref(j);
        free(out);
    }
    f = fopen(path, "w");
    REQUIRE(f);
    fputs("{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", f);  /* lookahead: outside the subset */
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s ask examples/images/scene1.png x --json-schema %s -q 2>&1", bin, path);
    int st;
    char *out = iris_test_popen(cmd, &st);
    CHECK(st == 1);
    CHECK_CONTAINS(out, "\"pattern\"");
    free(out);
    unlink(path);
}
