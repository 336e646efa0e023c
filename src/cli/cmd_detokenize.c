/* cmd_detokenize.c: `iris detokenize TOKENIZER IDS...`: token ids -> text.
 *
 * IDS are integers separated by spaces or commas, brackets allowed, so the
 * output of `iris tokenize` can be pasted back; without IDS they are read
 * from stdin.  Invalid UTF-8 in the decoded bytes becomes U+FFFD and ids
 * with no token are skipped with a warning (both as HF's decode). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "opts.h"
#include "err.h"
#include "hub/resolve.h"
#include "formats/tokenizer.h"

/* Parse the ids in s (spaces, commas and brackets separate them). */
static int parse_ids(const char *s, iris_tok_ids *ids, iris_err *err) {
    while (*s) {
        if (isspace((unsigned char)*s) || *s == ',' || *s == '[' || *s == ']') {
            s++;
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX ||
            (*end && !isspace((unsigned char)*end) && *end != ',' && *end != ']')) {
            int n = 0;
            while (s[n] && !isspace((unsigned char)s[n]) && s[n] != ',' && s[n] != ']' && n < 40) n++;
            return iris_err_set(err, IRIS_EINVAL, "\"%.*s\" is not a token id (a non-negative integer)", n, s);
        }
        int rc = iris_tok_ids_push(ids, (int32_t)v, err);
        if (rc) return rc;
        s = end;
    }
    return 0;
}

int iris_cmd_detokenize(int argc, char **argv) {
    int skip = 0, no_newline = 0;
    iris_opt own[] = {
        {"--skip-special", 0, IRIS_OPT_FLAG, &skip, NULL, "leave out special tokens such as <|im_end|>", 0, 0, NULL, NULL,
         0},
        {"--no-newline", 'n', IRIS_OPT_FLAG, &no_newline, NULL, "no newline after the text", 0, 0, NULL, NULL, 0},
        IRIS_OPT_TABLE_END,
    };
    iris_cli_spec sp = {
        .cmd = "detokenize",
        .usage = "[--skip-special] [-n] TOKENIZER IDS...",
        .about = "Print the text of token ids (separated by spaces or commas; a JSON array such as\n"
                 "the output of `iris tokenize` works too; without IDS they are read from stdin).\n"
                 "TOKENIZER is a tokenizer.json, a model directory, or a repo id in the HF cache.",
        .max_pos = argc,
        .tables = {own},
    };
    const char **pos = calloc((size_t)argc + 1, sizeof *pos);
    int n_pos = 0, st = pos ? iris_cli_parse(&sp, argc, argv, pos, &n_pos) : 1;
    if (st < 0 && !n_pos) st = iris_cli_usage_error("detokenize", "give TOKENIZER");
    if (st >= 0) {
        free(pos);
        return st;
    }
    int flags = skip ? IRIS_TOK_SKIP_SPECIAL : 0, newline = !no_newline;
    iris_err err = {0};
    iris_tok_ids ids = {0};
    int rc = 0;
    if (n_pos > 1) {
        for (int i = 1; i < n_pos && !rc; i++) rc = parse_ids(pos[i], &ids, &err);
    } else {
        char *line = NULL;
        size_t cap = 0;
        while (!rc && getline(&line, &cap, stdin) >= 0) rc = parse_ids(line, &ids, &err);
        free(line);
    }
    iris_tok *tok = NULL;
    if (!rc) rc = iris_cli_load_tokenizer(pos[0], &tok, &err);
    char *text = NULL;
    size_t len = 0;
    if (!rc) {
        for (size_t i = 0; i < ids.n; i++)
            if (!iris_tok_token(tok, ids.ids[i], NULL))
                fprintf(stderr, "iris detokenize: warning: no token has id %d (skipped)\n", (int)ids.ids[i]);
        rc = iris_tok_decode(tok, ids.ids, ids.n, flags, &text, &len, &err);
    }
    if (!rc) {
        fwrite(text, 1, len, stdout);
        if (newline) putchar('\n');
        if (fflush(stdout) != 0) rc = iris_err_set(&err, IRIS_EIO, "writing stdout failed");
    }
    free(text);
    iris_tok_free(tok);
    iris_tok_ids_free(&ids);
    free(pos);
    return rc ? iris_cli_fail(&err) : 0;
}
