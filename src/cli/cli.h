/* cli.h: the subcommands of the iris command.  Each lives in src/cli/cmd_NAME.c
 * as `int iris_cmd_NAME(int argc, char **argv)` (argv[0] is the subcommand) and
 * returns the process exit status: 0 ok, 1 failure (the message already on
 * stderr), 2 bad usage.  Options are parsed by the one parser (opts.h); the
 * engine's flags are declared once (engine_flags.h). */
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

/* --quiet: from now on only errors on stderr (the log's level, the hub's progress). */
void iris_cli_quiet(int quiet);

/* The whole of the file at `path` ("-": stdin) as a string, one trailing
 * newline removed; NULL with err set when it cannot be read.  The caller
 * frees it. */
char *iris_cli_read_text(const char *path, iris_err *err);

/* The tokenizer of a tokenizer.json, a model directory or a cached repo id
 * (cmd_tokenize.c; tokenize and detokenize).  Free with iris_tok_free. */
struct iris_tok;
int iris_cli_load_tokenizer(const char *arg, struct iris_tok **tok, iris_err *err);

/* `iris bench MODEL --images N ...`: image throughput (cmd_bench_images.c); iris_cmd_bench hands
 * its command line over when --images is given. */
int iris_cmd_bench_images(int argc, char **argv);

#endif
