/* main.c: the iris command: dispatch to subcommands (cli.h), `iris help
 * [CMD]`, -V/--version, and the small helpers every command shares. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_cmds.h"
#include "err.h"
#include "hub/hub.h"
#include "opts.h"

int iris_cli_fail(const iris_err *err) {
    fprintf(stderr, "iris: %s\n", err && err->msg[0] ? err->msg : iris_strerror(err ? err->code : -1));
    return 1;
}

void iris_cli_quiet(int quiet) {
    if (!quiet) return;
    iris_log_set_level(IRIS_LOG_ERROR);
    iris_hub_set_default_progress(0);
}

char *iris_cli_read_text(const char *path, iris_err *err) {
    int is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        iris_err_set(err, IRIS_EIO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t n = 0, cap = 1 << 12;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb, cap *= 2;
    }
    int bad = ferror(f);
    if (!is_stdin) fclose(f);
    if (!buf || bad) {
        free(buf);
        iris_err_set(err, buf ? IRIS_EIO : IRIS_ENOMEM, "%s: %s", is_stdin ? "stdin" : path,
                     buf ? "read failed" : "out of memory");
        return NULL;
    }
    if (n && buf[n - 1] == '\n') n--;
    if (n && buf[n - 1] == '\r') n--;
    buf[n] = 0;
    return buf;
}

static void usage(FILE *f) {
    fprintf(f, "iris %s: Qwen3-VL inference on the CPU or one GPU\n\nusage: iris COMMAND [ARGS]\n\ncommands:\n",
            IRIS_VERSION);
    for (size_t i = 0; iris_cli_cmds[i].name; i++)
        fprintf(f, "  %-12s %s\n", iris_cli_cmds[i].name, iris_cli_cmds[i].summary);
    fprintf(f, "\n`iris help COMMAND` or `iris COMMAND --help` for a command's options; -V, --version.\n"
               "Without a model, run/caption/ask/describe use the tiny demo model; for real answers:\n"
               "  iris plan Qwen/Qwen3-VL-4B-Instruct-FP8 --vram 8GiB     # what fits, before downloading\n"
               "  iris caption -m Qwen/Qwen3-VL-4B-Instruct-FP8 photo.jpg  # downloads on first use\n");
}

static const iris_cli_cmd *find_cmd(const char *name) {
    for (size_t i = 0; iris_cli_cmds[i].name; i++)
        if (!strcmp(name, iris_cli_cmds[i].name)) return &iris_cli_cmds[i];
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *a = argv[1];
    if (!strcmp(a, "--help") || !strcmp(a, "-h") || (!strcmp(a, "help") && argc == 2)) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(a, "--version") || !strcmp(a, "-V")) {
        printf("iris %s\n", IRIS_VERSION);
        return 0;
    }
    if (!strcmp(a, "help")) {   /* iris help CMD: the command's own --help */
        const iris_cli_cmd *c = find_cmd(argv[2]);
        if (!c || argc > 3) {
            fprintf(stderr, "iris help: %s '%s' (see iris --help)\n", c ? "one command, not" : "no command",
                    c ? argv[3] : argv[2]);
            return 2;
        }
        char *sub[] = {argv[2], "--help", NULL};
        return c->fn(2, sub);
    }
    const iris_cli_cmd *c = find_cmd(a);
    if (c) return c->fn(argc - 1, argv + 1);
    fprintf(stderr, "iris: unknown %s '%s' (see iris --help)\n", a[0] == '-' ? "option" : "command", a);
    return 2;
}
