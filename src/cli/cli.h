/* cli.h: the subcommands of the iris command.  Each lives in src/cli/cmd_NAME.c
 * as `int iris_cmd_NAME(int argc, char **argv)` (argv[0] is the subcommand) and
 * returns the process exit status: 0 ok, 1 failure (the message already on
 * stderr), 2 bad usage. */
#ifndef IRIS_CLI_H
#define IRIS_CLI_H

#include "iris.h"

typedef int (*iris_cmd_fn)(int argc, char **argv);

typedef struct iris_cli_cmd {
    const char *name;
    iris_cmd_fn fn;
    const char *summary;
} iris_cli_cmd;

/* Print "iris: <message>" for a failed call and return 1. */
int iris_cli_fail(const iris_err *err);

#endif
