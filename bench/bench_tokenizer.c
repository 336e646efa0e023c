/* bench_tokenizer.c: encoding speed of the tokenizer on one core.
 *
 *   make BUILD=build/x build/x/bench/bench_tokenizer
 *   build/x/bench/bench_tokenizer [TOKENIZER [FILE]] [--mb N]
 *
 * TOKENIZER defaults to the cached Qwen tokenizer (.cache/assets/qwen3/).
 * Without FILE the text is N MB (default 20) of synthetic English: a Zipf
 * mix of common words and made-up words from syllables (a long tail of
 * ~100k distinct words, so the word cache does not see only repeats), with
 * capitals, numbers, punctuation and paragraphs.  With FILE, that file is
 * the text (e.g. `find /usr/share/doc -name copyright | xargs cat > t.txt`).
 * The text is encoded in 64 KiB pieces cut at spaces, once with a fresh
 * tokenizer (cold word cache) and once more (warm); MB/s for each.
 * Figures are reported, never asserted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/tokenizer.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static const char *common[] = {
    "the", "of", "and", "to", "a", "in", "is", "that", "it", "was", "for", "on", "are", "as", "with", "his", "they",
    "at", "be", "this", "from", "have", "or", "by", "one", "had", "not", "but", "what", "all", "were", "when", "we",
    "there", "can", "an", "your", "which", "their", "said", "if", "do", "will", "each", "about", "how", "up", "out",
    "them", "then", "she", "many", "some", "so", "these", "would", "other", "into", "has", "more", "her", "two",
    "like", "him", "see", "time", "could", "no", "make", "than", "first", "been", "its", "who", "now", "people", "my",
    "made", "over", "did", "down", "only", "way", "find", "use", "may", "water", "long", "little", "very", "after",
    "words", "called", "just", "where", "most", "know", "government", "company", "system", "program", "question",
    "during", "without", "another", "important", "development", "information", "international", "understanding"};
static const char *syll[] = {"ka", "ter", "lo", "mi", "gra", "phy", "tion", "al", "pre", "con", "struct", "ing",
                             "ed", "ous", "ment", "ly", "re", "de", "sen", "val", "ize", "ab", "ster", "qui",
                             "bro", "chan", "dle", "ex", "for", "ning", "sub", "trans", "port", "ver", "sion"};

static char *synth_text(size_t bytes) {
    char *t = malloc(bytes + 64);
    size_t n = 0, in_sentence = 0;
    size_t n_common = sizeof common / sizeof *common, n_syll = sizeof syll / sizeof *syll;
    while (n < bytes) {
        char w[64];
        uint32_t r = rnd() % 1000;
        if (r < 700) { /* Zipf-ish over the common words */
            size_t k = (size_t)((double)n_common * ((double)(rnd() % 1000) / 1000.0) * ((double)(rnd() % 1000) / 1000.0));
            snprintf(w, sizeof w, "%s", common[k]);
        } else if (r < 960) {
            size_t len = 0, ns = 1 + rnd() % 4;
            for (size_t s = 0; s < ns; s++) len += (size_t)snprintf(w + len, sizeof w - len, "%s", syll[rnd() % n_syll]);
        } else {
            snprintf(w, sizeof w, "%u", rnd() % (r < 990 ? 100 : 100000));
        }
        if (in_sentence == 0 && w[0] >= 'a' && w[0] <= 'z') w[0] = (char)(w[0] - 32);
        n += (size_t)sprintf(t + n, "%s", w);
        in_sentence++;
        uint32_t p = rnd() % 100;
        if (in_sentence > 6 && p < 10) {
            n += (size_t)sprintf(t + n, "%s", p < 7 ? "." : p < 9 ? "?" : "!");
            in_sentence = 0;
            n += (size_t)sprintf(t + n, "%s", rnd() % 12 == 0 ? "\n\n" : " ");
        } else {
            n += (size_t)sprintf(t + n, "%s", p < 16 ? ", " : p < 17 ? "'s " : " ");
        }
    }
    t[n] = 0;
    return t;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

/* Encode text in ~64 KiB pieces ending at a space; returns seconds. */
static double encode_all(iris_tok *tok, const char *text, size_t len, size_t *n_ids, int *failed) {
    iris_tok_ids ids = {0};
    iris_err err = {0};
    *n_ids = 0;
    double t0 = now_s();
    for (size_t off = 0; off < len;) {
        size_t end = off + 65536 < len ? off + 65536 : len;
        while (end < len && text[end] != ' ') end++;
        ids.n = 0;
        if (iris_tok_encode(tok, text + off, end - off, &ids, &err)) {
            fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
            *failed = 1;
            break;
        }
        *n_ids += ids.n;
        off = end;
    }
    double dt = now_s() - t0;
    iris_tok_ids_free(&ids);
    return dt;
}

int main(int argc, char **argv) {
    const char *tokpath = ".cache/assets/qwen3/tokenizer.json", *file = NULL;
    size_t mb = 20;
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mb") && i + 1 < argc) mb = (size_t)atoi(argv[++i]);
        else if (n_pos == 0 && ++n_pos) tokpath = argv[i];
        else if (n_pos == 1 && ++n_pos) file = argv[i];
    }
    size_t len;
    char *text = file ? read_file(file, &len) : synth_text(mb << 20);
    if (!text) {
        fprintf(stderr, "bench_tokenizer: cannot read %s\n", file);
        return 1;
    }
    if (!file) len = strlen(text);
    iris_err err = {0};
    iris_tok *tok = NULL;
    double t0 = now_s();
    if (iris_tok_load(tokpath, &tok, &err)) {
        fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
        return 1;
    }
    double t_load = now_s() - t0;
    size_t n_ids;
    int failed = 0;
    double cold = encode_all(tok, text, len, &n_ids, &failed);
    double warm = encode_all(tok, text, len, &n_ids, &failed);
    printf("{\"tokenizer\": \"%s\", \"text\": \"%s\", \"bytes\": %zu, \"ids\": %zu, \"load_s\": %.3f, "
           "\"cold_MBps\": %.1f, \"warm_MBps\": %.1f}\n",
           tokpath, file ? file : "synthetic English", len, n_ids, t_load, len / 1e6 / cold, len / 1e6 / warm);
    iris_tok_free(tok);
    free(text);
    return failed;
}
