/* main.c: the iris command: dispatch to subcommands (cli.h). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#include "cli_cmds.h"

int iris_cli_fail(const iris_err *err) {
    fprintf(stderr, "iris: %s\n", err && err->msg[0] ? err->msg : iris_strerror(err ? err->code : -1));
    return 1;
}

static void usage(FILE *f) {
    fprintf(f, "iris %s: Qwen3-VL inference on the CPU or one GPU\n\nusage: iris COMMAND [ARGS]\n\ncommands:\n",
            IRIS_VERSION);
    for (size_t i = 0; iris_cli_cmds[i].name; i++)
        fprintf(f, "  %-12s %s\n", iris_cli_cmds[i].name, iris_cli_cmds[i].summary);
    fprintf(f, "\n`iris COMMAND --help` for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("iris %s\n", IRIS_VERSION);
        return 0;
    }
    for (size_t i = 0; iris_cli_cmds[i].name; i++)
        if (!strcmp(argv[1], iris_cli_cmds[i].name)) return iris_cli_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "iris: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
