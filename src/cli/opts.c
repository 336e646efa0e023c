/* opts.c: the one option parser of the iris command (opts.h). */
#include "opts.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "engine/planner.h"

int iris_cli_usage_error(const char *cmd, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "iris %s: %s (see iris %s --help)\n", cmd, msg, cmd);
    return 2;
}

iris_opt *iris_opt_find(iris_opt *t, const char *name) {
    for (; t->name || t->help; t++)
        if (t->name && !strcmp(t->name, name)) return t;
    return NULL;
}

/* The row that `a` names ("--name", "--name=v" or "-x"); *inline_v gets what follows '='. */
static const iris_opt *find(const iris_cli_spec *spec, const char *a, const char **inline_v) {
    *inline_v = NULL;
    for (int ti = 0; ti < IRIS_CLI_MAX_TABLES && spec->tables[ti]; ti++)
        for (const iris_opt *o = spec->tables[ti]; o->name || o->help; o++) {
            if (!o->name) continue;
            if (a[1] != '-') {
                if (o->short_name && a[1] == o->short_name && !a[2]) return o;
                continue;
            }
            size_t n = strlen(o->name);
            if (!strncmp(a, o->name, n) && (a[n] == 0 || a[n] == '=')) {
                if (a[n] == '=') *inline_v = a + n + 1;
                return o;
            }
        }
    return NULL;
}

static void range_text(const iris_opt *o, const char *what, char *buf, size_t n) {
    if (o->want) snprintf(buf, n, "%s", o->want);
    else snprintf(buf, n, "%s from %.15g to %.15g", what, o->lo, o->hi);
}

/* Check v and store it: 0, or 2 after the message. */
static int store(const char *cmd, const iris_opt *o, const char *flag, const char *v) {
    char want[160];
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case IRIS_OPT_STR:
        *(const char **)o->dst = v;
        break;
    case IRIS_OPT_LIST: {
        int *n = o->seen;
        if (*n >= o->max) return iris_cli_usage_error(cmd, "%s: at most %d", flag, o->max);
        ((const char **)o->dst)[(*n)++] = v;
        return 0;
    }
    case IRIS_OPT_INT: {
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno || (double)x < o->lo || (double)x > o->hi) {
            range_text(o, "a whole number", want, sizeof want);
            return iris_cli_usage_error(cmd, "%s '%s': give %s", flag, v, want);
        }
        *(long long *)o->dst = x;
        break;
    }
    case IRIS_OPT_NUM: {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x) || x < o->lo || x > o->hi) {
            range_text(o, "a number", want, sizeof want);
            return iris_cli_usage_error(cmd, "%s '%s': give %s", flag, v, want);
        }
        *(double *)o->dst = x;
        break;
    }
    case IRIS_OPT_SIZE: {
        iris_err e = {0};
        uint64_t b = 0;
        if (strcmp(v, "0") && iris_plan_parse_bytes(v, &b, &e))
            return iris_cli_usage_error(cmd, "%s %s", flag, e.msg);
        if ((double)b < o->lo)
            return iris_cli_usage_error(cmd, "%s '%s': give a size of at least %.0f bytes", flag, v, o->lo);
        *(uint64_t *)o->dst = b;
        break;
    }
    case IRIS_OPT_CHOICE: {
        size_t n = strlen(v);
        const char *c = o->arg;
        int ok = 0;
        while (c && *c && !ok) {
            const char *bar = strchr(c, '|');
            size_t len = bar ? (size_t)(bar - c) : strlen(c);
            ok = n && len == n && !strncmp(c, v, n);
            c = bar ? bar + 1 : c + len;
        }
        if (!ok) return iris_cli_usage_error(cmd, "%s '%s': give one of %s", flag, v, o->arg);
        *(const char **)o->dst = v;
        break;
    }
    default:
        break;
    }
    if (o->seen) *o->seen = 1;
    return 0;
}

int iris_cli_parse(const iris_cli_spec *spec, int argc, char **argv, const char **pos, int *n_pos) {
    const char *cmd = spec->cmd;
    int only_pos = 0;
    *n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && !strcmp(a, "--")) {
            only_pos = 1;
            continue;
        }
        if (only_pos || a[0] != '-' || !a[1]) {
            if (*n_pos >= spec->max_pos)
                return iris_cli_usage_error(cmd, spec->max_pos ? "unexpected argument '%s'" : "'%s': takes no argument",
                                            a);
            pos[(*n_pos)++] = a;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            iris_cli_help(spec, stdout);
            return 0;
        }
        const char *v;
        const iris_opt *o = find(spec, a, &v);
        if (!o) {
            const char *eq = strchr(a, '=');
            return iris_cli_usage_error(cmd, "unknown option %.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        }
        if (o->kind == IRIS_OPT_FLAG) {
            if (v) return iris_cli_usage_error(cmd, "%s takes no value", o->name);
            *(int *)o->dst = 1;
            if (o->seen) *o->seen = 1;
            continue;
        }
        if (!v) {
            if (i + 1 >= argc) return iris_cli_usage_error(cmd, "%s needs a value (%s)", o->name, o->arg);
            v = argv[++i];
        }
        if (store(cmd, o, o->name, v)) return 2;
    }
    return -1;
}

/* "  -m, --model MODEL" then the help, its later lines aligned under the first. */
static void help_row(FILE *f, const iris_opt *o) {
    char left[96];
    const char *sp = o->kind == IRIS_OPT_FLAG ? "" : " ", *arg = o->kind == IRIS_OPT_FLAG ? "" : o->arg;
    int n = o->short_name ? snprintf(left, sizeof left, "  -%c, %s%s%s", o->short_name, o->name, sp, arg)
                          : snprintf(left, sizeof left, "      %s%s%s", o->name, sp, arg);
    const int col = 32;
    fputs(left, f);
    if (n >= col - 1) fprintf(f, "\n%*s", col, "");
    else fprintf(f, "%*s", col - n, "");
    for (const char *h = o->help ? o->help : ""; *h; h++) {
        fputc(*h, f);
        if (*h == '\n') fprintf(f, "%*s", col, "");
    }
    fputc('\n', f);
}

void iris_cli_help(const iris_cli_spec *spec, FILE *f) {
    const char *u = spec->usage ? spec->usage : "";
    fprintf(f, "usage: iris %s ", spec->cmd);
    for (; *u; u++) {
        fputc(*u, f);
        if (*u == '\n') fprintf(f, "       iris %s ", spec->cmd);
    }
    fputc('\n', f);
    if (spec->about) fprintf(f, "\n%s\n", spec->about);
    int headed = 0;
    for (int ti = 0; ti < IRIS_CLI_MAX_TABLES && spec->tables[ti]; ti++)
        for (const iris_opt *o = spec->tables[ti]; o->name || o->help; o++) {
            if (!o->name) {
                fprintf(f, "\n%s:\n", o->help);
                headed = 1;
                continue;
            }
            if (!headed) fprintf(f, "\noptions:\n");
            headed = 1;
            help_row(f, o);
        }
    if (!headed) fprintf(f, "\noptions:\n");
    fprintf(f, "  -h, --help                    this help\n");
    if (spec->footer) fprintf(f, "\n%s\n", spec->footer);
}
