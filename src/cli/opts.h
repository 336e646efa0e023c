/* opts.h: the one option parser of the iris command.
 *
 * Every command describes its options as tables of iris_opt (a name, an
 * optional short letter, a kind that says how the value is checked, where it
 * goes, its help line) and calls iris_cli_parse once.  The conventions are
 * GNU's: `--opt value` and `--opt=value`, short forms (`-m value`), options
 * and positionals in any order, `--` ends the options, `-` alone is a
 * positional (stdin).  -h/--help prints the command's own help (its usage,
 * what it does, its tables) on stdout.
 *
 * Usage errors have one form, on stderr, naming the flag as typed on the
 * command line:
 *     iris CMD: --max-tokens '-1': give a whole number from 0 to 16777216 (see iris CMD --help)
 * and exit status 2 (runtime errors are 1, cli.h).
 *
 * Owns nothing: values are written to the caller's variables (`dst`);
 * strings point into argv. */
#ifndef IRIS_CLI_OPTS_H
#define IRIS_CLI_OPTS_H

#include <stdint.h>
#include <stdio.h>

typedef enum iris_opt_kind {
    IRIS_OPT_END = 0,   /* the row that ends a table (name NULL); with help set: a heading */
    IRIS_OPT_FLAG,      /* int *dst = 1; takes no value */
    IRIS_OPT_STR,       /* const char **dst */
    IRIS_OPT_LIST,      /* const char *dst[max], repeatable; the count in *seen */
    IRIS_OPT_INT,       /* long long *dst, in [lo, hi] */
    IRIS_OPT_NUM,       /* double *dst, in [lo, hi] */
    IRIS_OPT_SIZE,      /* uint64_t *dst: bytes or a number with a unit (8GiB), >= lo */
    IRIS_OPT_CHOICE,    /* const char **dst, one of `arg` ("cpu|cuda|auto") */
} iris_opt_kind;

typedef struct iris_opt {
    const char *name;   /* "--max-tokens"; NULL: a heading (help set) or the end of the table */
    char short_name;    /* 'm' for -m, 0 for none */
    iris_opt_kind kind;
    void *dst;
    const char *arg;    /* the value's placeholder in --help (N, SIZE); CHOICE: the choices a|b|c */
    const char *help;   /* may hold '\n' for more lines */
    double lo, hi;      /* INT, NUM: the range; SIZE: the smallest */
    const char *want;   /* what the message asks for instead of the range ("a fraction in (0, 1]") */
    int *seen;          /* set to 1 when given (LIST: the count), when not NULL */
    int max;            /* LIST: room in dst */
} iris_opt;

#define IRIS_OPT_HEADING(text) {NULL, 0, IRIS_OPT_END, NULL, NULL, text, 0, 0, NULL, NULL, 0}
#define IRIS_OPT_TABLE_END {NULL, 0, IRIS_OPT_END, NULL, NULL, NULL, 0, 0, NULL, NULL, 0}

#define IRIS_CLI_MAX_TABLES 6

typedef struct iris_cli_spec {
    const char *cmd;                            /* "plan" */
    const char *usage;                          /* after "usage: iris CMD "; '\n' starts another form */
    const char *about;                          /* what it does (after the usage), or NULL */
    const iris_opt *tables[IRIS_CLI_MAX_TABLES]; /* NULL after the last */
    const char *footer;                         /* after the options, or NULL */
    int max_pos;                                /* positionals accepted (more: a usage error) */
} iris_cli_spec;

/* Parse argv[1..argc-1] (argv[0] is the command).  Positionals go to pos
 * (room for spec->max_pos), their count to *n_pos.  Returns -1 to go on,
 * 0 when --help was printed (exit 0), 2 after a usage error was printed. */
int iris_cli_parse(const iris_cli_spec *spec, int argc, char **argv, const char **pos, int *n_pos);

/* The command's help: usage, about, every table, footer. */
void iris_cli_help(const iris_cli_spec *spec, FILE *f);

/* Print a usage error in the one form and return 2. */
int iris_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The row of `name` in a table, or NULL (to change a shared row's help). */
iris_opt *iris_opt_find(iris_opt *table, const char *name);

#endif
