/* test_cli_opts.c: the command line's conventions, through the real binary
 * (env IRIS_BIN, default build/iris): one parser (src/cli/opts.h) for every
 * command, so `--opt=value` and the short forms work everywhere, every usage
 * error is one line naming the flag and exits 2, runtime errors exit 1,
 * `iris help CMD` is the command's --help, and each --help lists only its
 * own options. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "tiny_fixture.h"

#define MODEL TINY_DIR "/tiny-gqa/model"
#define IMG TINY_DIR "/images/a.png"

/* Runs `iris ARGS` with stdout and stderr together (or only stdout when `merge` is 0); the exit status. */
static int iris_run(const char *args, int merge, char **out) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s %s", bin, args, merge ? "2>&1" : "2>/dev/null");
    int st;
    *out = iris_test_popen(cmd, &st);
    if (!*out) *out = strdup("");
    return st;
}

static int lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Every usage error: exit 2, one line "iris CMD: ... (see iris CMD --help)" naming the flag. */
IRIS_TEST(cli_opts_usage_errors) {
    static const struct {
        const char *args, *cmd, *names;
    } cases[] = {
        {"run " MODEL " --max-tokens -1 hi", "run", "--max-tokens '-1'"},
        {"run " MODEL " --temperature=-1 hi", "run", "--temperature '-1'"},
        {"caption --bogus " IMG, "caption", "unknown option --bogus"},
        {"caption -x " IMG, "caption", "unknown option -x"},
        {"ask -m", "ask", "--model needs a value"},
        {"run " MODEL " --json=yes hi", "run", "--json takes no value"},
        {"plan " MODEL " --vram lots", "plan", "--vram 'lots'"},
        {"plan " MODEL " --max-num-seqs 0", "plan", "--max-num-seqs '0'"},
        {"serve " MODEL " --port 70000", "serve", "--port '70000'"},
        {"serve " MODEL " --kv-cache-dtype fp4", "serve", "--kv-cache-dtype 'fp4': give one of bf16|fp8"},
        {"serve " MODEL " --nope", "serve", "unknown option --nope"},
        {"bench " MODEL " --batch 0,8", "bench", "--batch '0,8'"},
        {"bench " MODEL " --gen-tokens=0", "bench", "--gen-tokens '0'"},
        {"synth --like 7B /tmp/x", "synth", "--like '7B': give one of"},
        {"synth --like tiny --seed -3 /tmp/x", "synth", "--seed '-3'"},
        {"pull --jobs 99 a/b", "pull", "--jobs '99'"},
        {"preprocess " IMG " --min-pixels 0 -o /tmp/x.npy", "preprocess", "--min-pixels '0'"},
        {"logits " MODEL " --prompt hi", "logits", "give --out"},
        {"inspect " MODEL " extra", "inspect", "unexpected argument 'extra'"},
        {"ls --vram=", "ls", "--vram ''"},
        {"tokenize", "tokenize", "give TOKENIZER"},
        {"quantize a", "quantize", "give IN_DIR and OUT_DIR"},
        {"version --x", "version", "unknown option --x"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out;
        int st = iris_run(cases[i].args, 1, &out);
        char head[64], tail[64];
        snprintf(head, sizeof head, "iris %s: ", cases[i].cmd);
        snprintf(tail, sizeof tail, "(see iris %s --help)\n", cases[i].cmd);
        CHECKF(st == 2, "iris %s: exit %d, not 2: %s", cases[i].args, st, out);
        CHECKF(!strncmp(out, head, strlen(head)) && lines(out) == 1, "iris %s: not one line: %s", cases[i].args, out);
        CHECKF(strstr(out, cases[i].names) != NULL, "iris %s: does not name \"%s\": %s", cases[i].args,
               cases[i].names, out);
        CHECKF(strlen(out) >= strlen(tail) && !strcmp(out + strlen(out) - strlen(tail), tail), "iris %s: %s",
               cases[i].args, out);
        free(out);
    }
    /* a runtime error is 1 */
    char *out;
    CHECK_EQ_INT(iris_run("inspect /nonexistent-model-dir", 1, &out), 1);
    free(out);
    CHECK_EQ_INT(iris_run("nosuchcommand", 1, &out), 2);
    CHECK_CONTAINS(out, "unknown command 'nosuchcommand'");
    free(out);
}

/* --opt=value and the short forms mean what --opt value means. */
IRIS_TEST(cli_opts_forms) {
    char *a, *b, *c;
    CHECK_EQ_INT(iris_run("run " MODEL " --max-tokens 5 --temperature 0 Hello", 0, &a), 0);
    CHECK_EQ_INT(iris_run("run --model=" MODEL " --max-tokens=5 --temperature=0 Hello", 0, &b), 0);
    CHECK_EQ_INT(iris_run("run -m " MODEL " Hello --max-tokens 5 --temperature 0", 0, &c), 0);
    CHECK(strlen(a) > 1);
    CHECK_STR(b, a);
    CHECK_STR(c, a);
    free(a), free(b), free(c);
    /* -o for --out */
    char args[512], path[128];
    snprintf(path, sizeof path, "/tmp/iris-test-opts-%d.npy", (int)getpid());
    snprintf(args, sizeof args, "preprocess " IMG " -o %s", path);
    CHECK_EQ_INT(iris_run(args, 1, &a), 0);
    CHECK_CONTAINS(a, "grid_thw");
    free(a);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (f) fclose(f);
    remove(path);
    /* `--` ends the options: a text that starts with - */
    CHECK_EQ_INT(iris_run("tokenize " MODEL " -- -x", 1, &a), 0);
    CHECK_CONTAINS(a, "[");
    free(a);
    /* -V and --version */
    CHECK_EQ_INT(iris_run("-V", 1, &a), 0);
    CHECK_EQ_INT(iris_run("--version", 1, &b), 0);
    CHECK_CONTAINS(a, "iris ");
    CHECK_STR(a, b);
    free(a), free(b);
}

/* `iris help CMD` is `iris CMD --help`; each help lists only its command's options. */
IRIS_TEST(cli_opts_help) {
    const char *cmds[] = {"run", "caption", "ask", "describe", "logits", "plan", "serve", "bench", "synth", "pull",
                          "ls", "inspect", "quantize", "tokenize", "detokenize", "preprocess", "version"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char a[64], *h1, *h2;
        snprintf(a, sizeof a, "help %s", cmds[i]);
        CHECK_EQ_INT(iris_run(a, 1, &h1), 0);
        snprintf(a, sizeof a, "%s --help", cmds[i]);
        CHECK_EQ_INT(iris_run(a, 1, &h2), 0);
        char want[64];
        snprintf(want, sizeof want, "usage: iris %s ", cmds[i]);
        CHECKF(!strncmp(h1, want, strlen(want)), "iris help %s: %.200s", cmds[i], h1);
        CHECK_STR(h1, h2);
        CHECK_CONTAINS(h1, "-h, --help");
        free(h1), free(h2);
    }
    char *h;
    CHECK_EQ_INT(iris_run("caption --help", 1, &h), 0);
    CHECKF(!strstr(h, "--image") && !strstr(h, "--prompt-file") && !strstr(h, "--port"), "%s", h);
    CHECK_CONTAINS(h, "--max-tokens");
    CHECK_CONTAINS(h, "--gpu-memory-limit");
    free(h);
    CHECK_EQ_INT(iris_run("run --help", 1, &h), 0);
    CHECK_CONTAINS(h, "--image PATH");
    CHECK_CONTAINS(h, "--prompt-file");
    CHECK(!strstr(h, "--port"));
    free(h);
    CHECK_EQ_INT(iris_run("serve --help", 1, &h), 0);
    CHECK_CONTAINS(h, "--port");
    CHECK_CONTAINS(h, "--max-num-seqs");
    CHECK(!strstr(h, "--temperature"));
    free(h);
    CHECK_EQ_INT(iris_run("help nosuch", 1, &h), 2);
    free(h);
    CHECK_EQ_INT(iris_run("help", 1, &h), 0);
    CHECK_CONTAINS(h, "iris help COMMAND");
    free(h);
}
