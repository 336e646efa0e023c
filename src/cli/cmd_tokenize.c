/* cmd_tokenize.c: `iris tokenize TOKENIZER [TEXT]`: text -> token ids as a
 * JSON array, the way HF tokenizers encodes with add_special_tokens=False.
 *
 * TOKENIZER is a tokenizer.json, a model directory holding one, or a repo id
 * in the Hugging Face cache.  Without TEXT, stdin is encoded byte for byte
 * (a trailing newline is part of the text).  With --jsonl every stdin line
 * is a JSON string and every output line the JSON array of its ids. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "opts.h"
#include "err.h"
#include "hub/resolve.h"
#include "formats/tokenizer.h"

/* Load TOKENIZER given as a file, a directory or a cached repo id. */
int iris_cli_load_tokenizer(const char *arg, iris_tok **tok, iris_err *err) {
    struct stat st;
    if (stat(arg, &st) == 0) return iris_tok_load(arg, tok, err);
    char dir[4096];
    iris_err rerr = {0};
    if (iris_model_resolve(arg, dir, sizeof dir, &rerr) == 0) return iris_tok_load(dir, tok, err);
    return iris_err_set(err, IRIS_ENOTFOUND, "%s: no such file or directory, nor a model in the Hugging Face cache",
                        arg);
}

static void print_ids(const iris_tok_ids *ids) {
    putchar('[');
    for (size_t i = 0; i < ids->n; i++) printf(i ? ", %d" : "%d", (int)ids->ids[i]);
    fputs("]\n", stdout);
}

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            return NULL;
        }
        buf = nb;
        cap *= 2;
    }
    *len = n;
    return buf;
}

static int run_jsonl(iris_tok *tok, iris_err *err) {
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t n;
    int rc = 0;
    iris_tok_ids ids = {0};
    while (!rc && (n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        json_error_t je;
        json_t *s = json_loadb(line, (size_t)n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!json_is_string(s)) {
            rc = iris_err_set(err, IRIS_EINVAL, "stdin line %zu: not a JSON string%s%s", lineno, s ? "" : ": ",
                              s ? "" : je.text);
        } else {
            ids.n = 0;
            rc = iris_tok_encode(tok, json_string_value(s), json_string_length(s), &ids, err);
            if (rc) iris_err_prefix(err, "stdin line %zu", lineno);
            else print_ids(&ids);
        }
        json_decref(s);
    }
    free(line);
    iris_tok_ids_free(&ids);
    return rc;
}

int iris_cmd_tokenize(int argc, char **argv) {
    const char *pos[2] = {0};
    int n_pos = 0, jsonl = 0;
    iris_opt own[] = {
        {"--jsonl", 0, IRIS_OPT_FLAG, &jsonl, NULL, "each stdin line is a JSON string; print one JSON array per line", 0,
         0, NULL, NULL, 0},
        IRIS_OPT_TABLE_END,
    };
    iris_cli_spec sp = {
        .cmd = "tokenize",
        .usage = "TOKENIZER [TEXT]\nTOKENIZER --jsonl < lines.jsonl",
        .about = "Print the token ids of TEXT as a JSON array (no BOS/EOS is added; special-token\n"
                 "strings such as <|im_start|> in the text become their ids).\n\n"
                 "  TOKENIZER   a tokenizer.json, a model directory, or a repo id in the HF cache\n"
                 "  TEXT        the text (after -- when it starts with -); without it stdin is\n"
                 "              read, byte for byte",
        .max_pos = 2,
        .tables = {own},
    };
    int st = iris_cli_parse(&sp, argc, argv, pos, &n_pos);
    if (st >= 0) return st;
    if (n_pos < 1) return iris_cli_usage_error("tokenize", "give TOKENIZER");
    if (jsonl && n_pos != 1) return iris_cli_usage_error("tokenize", "--jsonl reads stdin: give no TEXT");
    iris_err err = {0};
    iris_tok *tok = NULL;
    if (iris_cli_load_tokenizer(pos[0], &tok, &err)) return iris_cli_fail(&err);
    int rc;
    if (jsonl) {
        rc = run_jsonl(tok, &err);
    } else {
        size_t len;
        char *stdin_text = NULL;
        const char *text = pos[1];
        if (text) len = strlen(text);
        else if (!(text = stdin_text = read_all(stdin, &len)))
            rc = iris_err_set(&err, IRIS_ENOMEM, "out of memory reading stdin");
        iris_tok_ids ids = {0};
        rc = text ? iris_tok_encode(tok, text, len, &ids, &err) : IRIS_ENOMEM;
        if (!rc) print_ids(&ids);
        iris_tok_ids_free(&ids);
        free(stdin_text);
    }
    iris_tok_free(tok);
    if (fflush(stdout) != 0 && !rc) rc = iris_err_set(&err, IRIS_EIO, "writing stdout failed");
    return rc ? iris_cli_fail(&err) : 0;
}
