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
#include "err.h"
#include "hub/resolve.h"
#include "formats/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: iris detokenize [--skip-special] [-n] TOKENIZER IDS...\n\n"
            "Print the text of token ids (separated by spaces or commas; a JSON array such as\n"
            "the output of `iris tokenize` works too; without IDS they are read from stdin).\n\n"
            "  TOKENIZER       a tokenizer.json, a model directory, or a repo id in the HF cache\n"
            "  --skip-special  leave out special tokens such as <|im_end|>\n"
            "  -n              no newline after the text\n");
}

static int load_tokenizer(const char *arg, iris_tok **tok, iris_err *err) {
    struct stat st;
    if (stat(arg, &st) == 0) return iris_tok_load(arg, tok, err);
    char dir[4096];
    iris_err rerr = {0};
    if (iris_model_resolve(arg, dir, sizeof dir, &rerr) == 0) return iris_tok_load(dir, tok, err);
    return iris_err_set(err, IRIS_ENOTFOUND, "%s: no such file or directory, nor a model in the Hugging Face cache",
                        arg);
}

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
    int flags = 0, newline = 1, first = 0;
    for (int i = 1; i < argc && !first; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--skip-special")) {
            flags |= IRIS_TOK_SKIP_SPECIAL;
        } else if (!strcmp(argv[i], "-n")) {
            newline = 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "iris detokenize: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            first = i;
        }
    }
    if (!first) {
        usage(stderr);
        return 2;
    }
    iris_err err = {0};
    iris_tok_ids ids = {0};
    int rc = 0;
    if (first + 1 < argc) {
        for (int i = first + 1; i < argc && !rc; i++) rc = parse_ids(argv[i], &ids, &err);
    } else {
        char *line = NULL;
        size_t cap = 0;
        while (!rc && getline(&line, &cap, stdin) >= 0) rc = parse_ids(line, &ids, &err);
        free(line);
    }
    iris_tok *tok = NULL;
    if (!rc) rc = load_tokenizer(argv[first], &tok, &err);
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
    return rc ? iris_cli_fail(&err) : 0;
}
