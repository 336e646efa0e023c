/* bench_grammar.c: structured output's cost on the CPU: compiling a JSON Schema and the
 * per-step token mask over the real Qwen vocabulary (151,936 tokens).
 *
 *   make CUDA=0 build/bench/bench_grammar
 *   build/bench/bench_grammar [TOKENIZER] [--walks N]
 *
 * TOKENIZER defaults to the cached Qwen tokenizer (.cache/assets/qwen3/tokenizer.json).  For
 * each schema (a simple object with bounded strings and with free ones, a nested object with
 * arrays, an enum of 1,000 strings, a recursive $ref tree): compile time (median of 20), then N seeded walks (default 8) that pick
 * a random allowed token each step until the output is complete (at most 300 steps), timing
 * every mask: median, p99 and mean over all steps, and median and p99 over the steps the matcher's mask cache did
 * not answer (a new parse state: the trie walk itself).  Figures are reported, never asserted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/grammar.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double p) {
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

static char *enum_schema(void) {
    static const char *syl[] = {"ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po"};
    size_t cap = 64 * 1024, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n, "{\"type\":\"object\",\"properties\":{\"word\":{\"enum\":[");
    for (int i = 0; i < 1000; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s\"%s%s%s item %d\"", i ? "," : "", syl[i % 10], syl[i / 10 % 10],
                              syl[i / 100], i);
    snprintf(s + n, cap - n, "]}},\"required\":[\"word\"],\"additionalProperties\":false}");
    return s;
}

int main(int argc, char **argv) {
    const char *tokpath = ".cache/assets/qwen3/tokenizer.json";
    int walks = 8;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--walks") && i + 1 < argc) walks = atoi(argv[++i]);
        else tokpath = argv[i];
    }
    iris_err err = {0};
    iris_tok *tok = NULL;
    iris_vocab *v = NULL;
    if (iris_tok_load(tokpath, &tok, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    double t0 = now_s();
    if (iris_vocab_build(tok, 151936, &v, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("vocabulary: %d tokens, trie of %d nodes built in %.1f ms\n", iris_vocab_n(v), iris_vocab_n_nodes(v),
           (now_s() - t0) * 1e3);
    char *en = enum_schema();
    struct {
        const char *name, *schema;
    } cases[] = {
        {"simple object",
         "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":20},\"age\":{\"type\":"
         "\"integer\",\"minimum\":0,\"maximum\":150},\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\","
         "\"ok\"],\"additionalProperties\":false}"},
        {"simple, free strings",
         "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
         "\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\",\"ok\"],\"additionalProperties\":false}"},
        {"nested + arrays",
         "{\"type\":\"object\",\"properties\":{\"setting\":{\"type\":\"string\",\"maxLength\":30},\"objects\":{"
         "\"type\":\"array\",\"maxItems\":4,\"items\":{\"type\":\"object\",\"properties\":{\"label\":{\"type\":"
         "\"string\",\"maxLength\":12},\"colour\":{\"enum\":[\"red\",\"green\",\"blue\",\"white\",\"black\"]},"
         "\"box\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":1000},\"minItems\":4,"
         "\"maxItems\":4},\"score\":{\"type\":\"number\"}},\"required\":[\"label\",\"box\"],\"additionalProperties\":"
         "false}},\"text\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":16},\"maxItems\":3}},"
         "\"required\":[\"setting\",\"objects\"],\"additionalProperties\":false}"},
        {"enum of 1,000 strings", en},
        {"recursive $ref",
         "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
         "\"kids\":{\"type\":\"array\",\"maxItems\":2,\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"name\"],"
         "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}"},
    };
    size_t words = (151936 + 31) / 32;
    uint32_t *mask = malloc(words * sizeof *mask);
    int *allowed = malloc(151936 * sizeof *allowed);
    double *all = malloc(sizeof(double) * 300 * (size_t)walks), *miss = malloc(sizeof(double) * 300 * (size_t)walks);
    printf("%-22s %10s %6s | %8s %8s %8s | %8s %8s %6s\n", "schema", "compile", "steps", "median", "p99", "mean",
           "miss med", "miss p99", "misses");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double ct[20];
        iris_grammar *g = NULL;
        for (int i = 0; i < 20; i++) {
            iris_grammar_free(g);
            double a = now_s();
            if (iris_grammar_from_schema(cases[c].schema, &g, &err)) {
                fprintf(stderr, "%s: %s\n", cases[c].name, err.msg);
                return 1;
            }
            ct[i] = now_s() - a;
        }
        int n_all = 0, n_miss = 0, unfinished = 0;
        for (int w = 0; w < walks; w++) {
            uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(w + 1);
            iris_grammar_matcher *m = NULL;
            if (iris_grammar_matcher_init(&m, g, v, &err)) return 1;
            int step = 0;
            for (; step < 300 && !iris_grammar_matcher_complete(m); step++) {
                uint64_t h = iris_grammar_matcher_cache_hits(m);
                double a = now_s();
                if (iris_grammar_matcher_mask(m, mask, &err)) return 1;
                double dt = now_s() - a;
                all[n_all++] = dt;
                if (iris_grammar_matcher_cache_hits(m) == h) miss[n_miss++] = dt;
                int na = 0;
                for (int t = 0; t < 151936; t++)
                    if ((mask[t >> 5] >> (t & 31)) & 1) allowed[na++] = t;
                if (!na || iris_grammar_matcher_accept_token(m, allowed[rnd(&seed) % (uint64_t)na], &err)) break;
            }
            unfinished += !iris_grammar_matcher_complete(m);
            iris_grammar_matcher_free(m);
        }
        double sum = 0;
        for (int i = 0; i < n_all; i++) sum += all[i];
        printf("%-22s %7.2f ms %6d | %5.0f us %5.0f us %5.0f us | %5.0f us %5.0f us %6d", cases[c].name,
               pct(ct, 20, 0.5) * 1e3, n_all, pct(all, n_all, 0.5) * 1e6, pct(all, n_all, 0.99) * 1e6,
               n_all ? sum / n_all * 1e6 : 0, pct(miss, n_miss, 0.5) * 1e6, pct(miss, n_miss, 0.99) * 1e6, n_miss);
        if (unfinished) printf("  (%d of %d walks cut at 300 steps)", unfinished, walks);
        printf("\n");
        iris_grammar_free(g);
    }
    free(en);
    free(mask);
    free(allowed);
    free(all);
    free(miss);
    iris_vocab_free(v);
    iris_tok_free(tok);
    return 0;
}
