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
#include "err.h"
#include "hub/resolve.h"
#include "formats/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: iris tokenize TOKENIZER [TEXT]\n"
            "       iris tokenize TOKENIZER --jsonl < lines.jsonl\n\n"
            "Print the token ids of TEXT as a JSON array (no BOS/EOS is added; special-token\n"
            "strings such as <|im_start|> in the text become their ids).\n\n"
            "  TOKENIZER   a tokenizer.json, a model directory, or a repo id in the HF cache\n"
            "  TEXT        the text; without it stdin is read, byte for byte\n"
            "  --jsonl     each stdin line is a JSON string; print one JSON array per line\n");
}

/* Load TOKENIZER given as a file, a directory or a cached repo id. */
static int load_tokenizer(const char *arg, iris_tok **tok, iris_err *err) {
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
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--jsonl")) {
            jsonl = 1;
        } else if (!strcmp(argv[i], "--")) {
            for (i++; i < argc && n_pos < 2; i++) pos[n_pos++] = argv[i];
            if (i < argc) n_pos = 3;
            break;
        } else if (argv[i][0] == '-' && argv[i][1] && n_pos == 0) {
            fprintf(stderr, "iris tokenize: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (n_pos < 2) {
            pos[n_pos++] = argv[i];
        } else {
            n_pos = 3;
        }
    }
    if (n_pos < 1 || n_pos > 2 || (jsonl && n_pos != 1)) {
        usage(stderr);
        return 2;
    }
    iris_err err = {0};
    iris_tok *tok = NULL;
    if (load_tokenizer(pos[0], &tok, &err)) return iris_cli_fail(&err);
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
