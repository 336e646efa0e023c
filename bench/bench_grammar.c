/* bench_grammar.c: structured output's cost on the CPU: compiling a JSON Schema and the
 * per-step token mask over the real Qwen vocabulary (151,936 tokens).
 *
 *   make CUDA=0 build/bench/bench_grammar
 *   build/bench/bench_grammar [TOKENIZER] [--walks N] [--schema FILE]... [--only NAME]
 *                             [--clock wall|cpu] [--batch N] [--threads T] [--no-text]
 *
 * TOKENIZER defaults to the cached Qwen tokenizer (.cache/assets/qwen3/tokenizer.json).  For
 * each schema (a simple object with bounded strings and with free ones, a nested object with
 * arrays, an enum of 1,000 strings, a recursive $ref tree, obj.json: a 60-character string, an
 * integer and up to 8 strings of 12; and each --schema FILE; --only keeps the schemas whose name
 * starts with NAME): compile time (median of 20), then N seeded walks (default 8) that pick a
 * random allowed token each step until the output is complete (at most 300 steps), timing every
 * mask: median, p99 and mean over all steps, and median and p99 over the steps the matcher's
 * mask cache did not answer (a new parse state).  --clock cpu times with the thread's CPU clock
 * (steadier on a shared machine).  --batch N (> 1): N walks at once, each step's N masks
 * computed on the engine's thread pool of T threads (default: the machine's cores) as the
 * runner does (engine/runner.c), timing the wall clock of each step's N masks.  --no-text: the
 * matcher walks the trie inside strings too (grammar.c text_mask off), for comparison.
 * Figures are reported, never asserted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/grammar_internal.h"
#include "pool.h"

static clockid_t clk = CLOCK_MONOTONIC;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(clk, &ts);
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

/* obj.json of the GPU benchmark (docs/performance.md): the schema `iris bench --json-schema` runs. */
static const char obj_json[] =
    "{\"type\":\"object\",\"properties\":{\"caption\":{\"type\":\"string\",\"maxLength\":60},\"count\":{\"type\":"
    "\"integer\"},\"tags\":{\"type\":\"array\",\"maxItems\":8,\"items\":{\"type\":\"string\",\"maxLength\":12}}},"
    "\"required\":[\"caption\",\"count\",\"tags\"],\"additionalProperties\":false}";

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

typedef struct row {
    iris_grammar_matcher *m;
    uint32_t *mask;
    uint64_t seed;
    int live, failed;
} row;

static void mask_rows(void *ctx, int64_t i0, int64_t i1) {
    row *r = ctx;
    for (int64_t i = i0; i < i1; i++)
        if (r[i].live) r[i].failed = iris_grammar_matcher_mask(r[i].m, r[i].mask, NULL) != 0;
}

/* A random allowed token of r's mask accepted; 0 when the walk ends (complete or stuck). */
static int take(row *r, int *allowed) {
    int na = 0;
    for (int t = 0; t < 151936; t++)
        if ((r->mask[t >> 5] >> (t & 31)) & 1) allowed[na++] = t;
    return na && !iris_grammar_matcher_accept_token(r->m, allowed[rnd(&r->seed) % (uint64_t)na], NULL);
}

typedef struct opts {
    int walks, batch, no_text;
} opts;

/* Steps timed over o->walks walks, o->batch at once: times into all (and the steps the mask
 * cache did not answer into miss, batch 1 only); returns steps, -1 on error. */
static int run_walks(const iris_grammar *g, const iris_vocab *v, const opts *o, double *all, double *miss,
                     int *n_miss, int *unfinished, int *allowed) {
    int n_all = 0, nb = o->batch;
    row *r = calloc((size_t)nb, sizeof *r);
    for (int i = 0; i < nb; i++) r[i].mask = malloc((151936 + 31) / 32 * sizeof *r[i].mask);
    iris_err err = {0};
    for (int w0 = 0; w0 < o->walks; w0 += nb) {
        for (int i = 0; i < nb; i++) {
            r[i].seed = 0x9e3779b97f4a7c15ull * (uint64_t)(w0 + i + 1);
            r[i].live = w0 + i < o->walks;
            if (r[i].live && iris_grammar_matcher_init(&r[i].m, g, v, &err)) return -1;
            if (r[i].live && o->no_text) gm_no_text(r[i].m, 1);
        }
        for (int step = 0; step < 300; step++) {
            int live = 0;
            for (int i = 0; i < nb; i++) {
                if (r[i].live && iris_grammar_matcher_complete(r[i].m)) r[i].live = 0;
                live += r[i].live;
            }
            if (!live) break;
            uint64_t h = nb == 1 ? iris_grammar_matcher_cache_hits(r[0].m) : 0;
            double a = now_s();
            if (nb == 1) mask_rows(r, 0, 1);
            else iris_pool_for(nb, mask_rows, r);
            double dt = now_s() - a;
            all[n_all++] = dt;
            if (nb == 1 && iris_grammar_matcher_cache_hits(r[0].m) == h) miss[(*n_miss)++] = dt;
            for (int i = 0; i < nb; i++)
                if (r[i].live && (r[i].failed || !take(&r[i], allowed))) r[i].live = 0;
        }
        for (int i = 0; i < nb; i++) {
            if (w0 + i < o->walks) *unfinished += !iris_grammar_matcher_complete(r[i].m);
            iris_grammar_matcher_free(r[i].m);
            r[i].m = NULL;
        }
    }
    for (int i = 0; i < nb; i++) free(r[i].mask);
    free(r);
    return n_all;
}

int main(int argc, char **argv) {
    const char *tokpath = ".cache/assets/qwen3/tokenizer.json", *only = NULL;
    const char *files[8];
    int n_files = 0, threads = 0;
    opts o = {8, 1, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--walks") && i + 1 < argc) o.walks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) o.batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--schema") && i + 1 < argc && n_files < 8) files[n_files++] = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--clock") && i + 1 < argc) clk = strcmp(argv[++i], "cpu") ? CLOCK_MONOTONIC
                                                                                              : CLOCK_THREAD_CPUTIME_ID;
        else if (!strcmp(argv[i], "--no-text")) o.no_text = 1;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        } else tokpath = argv[i];
    }
    if (o.batch < 1) o.batch = 1;
    if (o.walks < o.batch) o.walks = o.batch;
    if (o.batch > 1 && clk != CLOCK_MONOTONIC) {
        fprintf(stderr, "--batch times the wall clock (--clock wall)\n");
        return 2;
    }
    iris_pool_set_threads(threads);
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
    printf("vocabulary: %d tokens, trie of %d nodes built in %.1f ms (%s clock)\n", iris_vocab_n(v),
           iris_vocab_n_nodes(v), (now_s() - t0) * 1e3, clk == CLOCK_MONOTONIC ? "wall" : "thread CPU");
    if (o.batch > 1)
        printf("batch %d: each step's %d masks on %d pool threads; times are per step, all rows\n", o.batch, o.batch,
               iris_pool_threads());
    char *en = enum_schema();
    struct {
        const char *name;
        char *schema;
    } cases[16] = {
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
        {"obj.json", (char *)obj_json},
    };
    int n_cases = 6;
    for (int i = 0; i < n_files; i++) {
        if (!(cases[n_cases].schema = read_text(files[i]))) {
            fprintf(stderr, "cannot read %s: left out\n", files[i]);
            continue;
        }
        const char *base = strrchr(files[i], '/');
        cases[n_cases++].name = base ? base + 1 : files[i];
    }
    int steps_max = 300 * o.walks;
    int *allowed = malloc(151936 * sizeof *allowed);
    double *all = malloc(sizeof(double) * (size_t)steps_max), *miss = malloc(sizeof(double) * (size_t)steps_max);
    printf("%-22s %10s %6s | %8s %8s %8s | %8s %8s %6s\n", "schema", "compile", "steps", "median", "p99", "mean",
           "miss med", "miss p99", "misses");
    for (int c = 0; c < n_cases; c++) {
        if (only && strncmp(cases[c].name, only, strlen(only))) continue;
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
        int n_miss = 0, unfinished = 0;
        int n_all = run_walks(g, v, &o, all, miss, &n_miss, &unfinished, allowed);
        if (n_all < 0) {
            fprintf(stderr, "%s: a matcher failed to start\n", cases[c].name);
            return 1;
        }
        double sum = 0;
        for (int i = 0; i < n_all; i++) sum += all[i];
        printf("%-22s %7.2f ms %6d | %5.0f us %5.0f us %5.0f us", cases[c].name, pct(ct, 20, 0.5) * 1e3, n_all,
               pct(all, n_all, 0.5) * 1e6, pct(all, n_all, 0.99) * 1e6, n_all ? sum / n_all * 1e6 : 0);
        if (o.batch == 1)
            printf(" | %5.0f us %5.0f us %6d", pct(miss, n_miss, 0.5) * 1e6, pct(miss, n_miss, 0.99) * 1e6, n_miss);
        if (unfinished) printf("  (%d of %d walks cut at 300 steps)", unfinished, o.walks);
        printf("\n");
        iris_grammar_free(g);
    }
    for (int i = 6; i < n_cases; i++) free(cases[i].schema);
    free(en);
    free(allowed);
    free(all);
    free(miss);
    iris_vocab_free(v);
    iris_tok_free(tok);
    return 0;
}
