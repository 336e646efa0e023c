/* test_cli_batch.c: `iris caption|ask` over many images (batch mode, src/cli/batch.c), through
 * real build/iris processes and the demo model: the JSON lines come in input order (--unordered:
 * the same set), a directory and --from give the same set, --resume skips what the output file
 * already answers and redoes a line that was removed, a file that is not an image gets an error
 * line and exit status 1 while the others are answered, a greedy answer in batch mode is the
 * single-image run's text, --json adds the single-image --json members to each line (and
 * --ignore-eos makes every answer --max-tokens long), and 40 distinct pictures (written here with
 * iris's PNG writer) come back in input order, each the text a run of its own gives. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/grounding.h"
#include "formats/image.h"
#include "test.h"

static const char *bin(void) { return getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris"; }

/* Short greedy answers: the order and the bookkeeping are under test, not the captions. */
#define FLAGS "--temperature 0 --max-tokens 6 -q"

static const char *IMGS[] = {"scene1.png", "scene2.png", "scene3.png", "square.png"};
#define N_IMGS 4

/* A directory with the example images (one in a subdirectory) and a list of them in another order. */
static void make_dir(char *dir, size_t n) {
    snprintf(dir, n, "/tmp/iris-batch-%d", (int)getpid());
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "rm -rf %s && mkdir -p %s/sub && cp examples/images/scene1.png examples/images/scene2.png %s/ && "
             "cp examples/images/scene3.png %s/sub/ && cp examples/images/square.png %s/ && echo notes > %s/notes.txt",
             dir, dir, dir, dir, dir, dir);
    CHECK(system(cmd) == 0);
}

static void rm_dir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* The JSON lines of out, as parsed objects (n of them). */
static int parse_lines(const char *out, json_t **objs, int max) {
    int n = 0;
    for (const char *p = out; p && *p && n < max;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        objs[n] = json_loadb(p, len, 0, NULL);
        CHECKF(objs[n] != NULL, "not a JSON line: %.*s", (int)len, p);
        if (objs[n]) n++;
        p = e ? e + 1 : NULL;
    }
    return n;
}

static const char *image_of(json_t *o) { return json_string_value(json_object_get(o, "image")); }
static const char *text_of(json_t *o) { return json_string_value(json_object_get(o, "text")); }

static void free_lines(json_t **o, int n) {
    for (int i = 0; i < n; i++) json_decref(o[i]);
}

/* The sorted "image" values, joined: a set to compare. */
static void set_of(json_t **o, int n, char *buf, size_t cap) {
    const char *names[64];
    for (int i = 0; i < n && i < 64; i++) names[i] = image_of(o[i]) ? image_of(o[i]) : "";
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            const char *t = names[j];
            names[j] = names[j - 1], names[j - 1] = t;
        }
    buf[0] = 0;
    for (int i = 0; i < n; i++) snprintf(buf + strlen(buf), cap - strlen(buf), "%s;", names[i]);
}

IRIS_TEST(cli_batch_order_and_sets) {
    char dir[256], cmd[2048], list[300];
    make_dir(dir, sizeof dir);
    snprintf(list, sizeof list, "%s.list", dir);
    /* the list in an order the directory walk does not give */
    FILE *f = fopen(list, "w");
    REQUIRE(f);
    fprintf(f, "%s/square.png\n%s/sub/scene3.png\n\n%s/scene1.png\n%s/scene2.png\n", dir, dir, dir, dir);
    fclose(f);
    int st;
    snprintf(cmd, sizeof cmd, "%s caption --from %s " FLAGS, bin(), list);
    char *a = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 0);
    json_t *la[16], *lb[16], *lc[16];
    int na = parse_lines(a, la, 16);
    REQUIRE(na == N_IMGS);
    const char *want[] = {"square.png", "sub/scene3.png", "scene1.png", "scene2.png"};
    for (int i = 0; i < na; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, want[i]);
        CHECKF(image_of(la[i]) && !strcmp(image_of(la[i]), p), "line %d: %s, want %s", i, image_of(la[i]), p);
        CHECKF(text_of(la[i]) && *text_of(la[i]), "line %d has no text", i);
        CHECK(json_integer_value(json_object_get(la[i], "tokens")) > 0);
        CHECK(json_is_integer(json_object_get(la[i], "ms")));
    }
    /* the directory (recursive; notes.txt is not an image) and --unordered: the same set */
    snprintf(cmd, sizeof cmd, "%s caption %s --unordered " FLAGS, bin(), dir);
    char *b = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 0);
    int nb = parse_lines(b, lb, 16);
    char sa[2048], sb[2048], sc[2048];
    set_of(la, na, sa, sizeof sa);
    set_of(lb, nb, sb, sizeof sb);
    CHECK_STR(sb, sa);
    /* --glob picks by file name: only the scenes */
    snprintf(cmd, sizeof cmd, "%s caption %s --glob 'scene*' " FLAGS, bin(), dir);
    char *c = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 0);
    int nc = parse_lines(c, lc, 16);
    CHECK_EQ_INT(nc, 3);
    set_of(lc, nc, sc, sizeof sc);
    CHECK(!strstr(sc, "square.png"));
    /* the same image's text in every run: the answers do not depend on the batch */
    for (int i = 0; i < nb; i++)
        for (int j = 0; j < na; j++)
            if (!strcmp(image_of(lb[i]), image_of(la[j]))) CHECK_STR(text_of(lb[i]), text_of(la[j]));
    free_lines(la, na), free_lines(lb, nb), free_lines(lc, nc);
    free(a), free(b), free(c);
    remove(list);
    rm_dir(dir);
}

/* Greedy: an image's text in batch mode is what the single-image run prints; `ask` takes many too. */
IRIS_TEST(cli_batch_greedy_equals_single) {
    char cmd[2048];
    int st;
    snprintf(cmd, sizeof cmd, "%s caption examples/images/scene2.png --temperature 0 -q", bin());
    char *one = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 0);
    REQUIRE(one && strlen(one) > 2);
    CHECK(one[0] != '{');  /* one image: plain text as before */
    one[strcspn(one, "\n")] = 0;
    snprintf(cmd, sizeof cmd, "%s caption examples/images/scene1.png examples/images/scene2.png "
             "examples/images/scene4.png --temperature 0 -q", bin());
    char *many = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 0);
    json_t *l[8];
    int n = parse_lines(many, l, 8);
    REQUIRE(n == 3);
    CHECK_STR(image_of(l[1]), "examples/images/scene2.png");
    CHECK_STR(text_of(l[1]), one);
    free_lines(l, n);
    snprintf(cmd, sizeof cmd, "%s ask examples/images/scene1.png examples/images/scene5.png 'What colour is it?' "
             "--json-object --max-tokens 24 -q", bin());
    char *asked = iris_test_popen(cmd, &st);
    n = parse_lines(asked, l, 8);
    CHECK_EQ_INT(n, 2);
    for (int i = 0; i < n; i++) {  /* --json-object holds per image: each text is an object (or its start) */
        const char *t = text_of(l[i]) ? text_of(l[i]) : "";
        t += strspn(t, " \n\t");
        CHECKF(*t == '{', "not an object: %s", t);
        json_t *o = json_loads(t, 0, NULL);
        CHECKF(json_is_object(o) || json_integer_value(json_object_get(l[i], "tokens")) == 24, "not an object: %s", t);
        json_decref(o);
    }
    free_lines(l, n);
    free(one), free(many), free(asked);
}

static int count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

IRIS_TEST(cli_batch_resume) {
    char dir[256], cmd[2048], out[300];
    make_dir(dir, sizeof dir);
    snprintf(out, sizeof out, "%s.jsonl", dir);
    remove(out);
    int st;
    snprintf(cmd, sizeof cmd, "%s caption %s -o %s " FLAGS, bin(), dir, out);
    free(iris_test_popen(cmd, &st));
    CHECK_EQ_INT(st, 0);
    CHECK_EQ_INT(count_lines(out), N_IMGS);
    /* again with --resume: nothing to do, nothing added */
    snprintf(cmd, sizeof cmd, "%s caption %s -o %s --resume --temperature 0 --max-tokens 6 2>&1", bin(), dir, out);
    char *again = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 0);
    CHECK_CONTAINS(again, "already");
    CHECK_EQ_INT(count_lines(out), N_IMGS);
    /* drop the second line and cut the last one short (a killed run): both are redone, the cut
     * line is cut off */
    snprintf(cmd, sizeof cmd, "sed -i '2d' %s && truncate -s -5 %s && tail -c 40 %s", out, out, out);
    free(iris_test_popen(cmd, &st));
    snprintf(cmd, sizeof cmd, "%s caption %s -o %s --resume " FLAGS, bin(), dir, out);
    free(iris_test_popen(cmd, &st));
    CHECK_EQ_INT(st, 0);
    snprintf(cmd, sizeof cmd, "cat %s", out);
    char *all = iris_test_popen(cmd, &st);
    json_t *l[16];
    int n = parse_lines(all, l, 16);  /* every line JSON: the cut one is gone */
    CHECK_EQ_INT(n, N_IMGS);
    char s[2048];
    set_of(l, n, s, sizeof s);
    for (int i = 0; i < N_IMGS; i++) CHECKF(strstr(s, IMGS[i]), "%s missing after --resume: %s", IMGS[i], s);
    free_lines(l, n);
    free(again), free(all);
    /* --resume needs the file it reads */
    snprintf(cmd, sizeof cmd, "%s caption %s --resume 2>&1", bin(), dir);
    char *bad = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 2);
    CHECK_CONTAINS(bad, "--out");
    free(bad);
    remove(out);
    rm_dir(dir);
}

IRIS_TEST(cli_batch_bad_image) {
    char dir[256], cmd[2048];
    make_dir(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "echo 'not an image' > %s/x.png", dir);
    CHECK(system(cmd) == 0);
    int st;
    snprintf(cmd, sizeof cmd, "%s caption %s --temperature 0 --max-tokens 6 2>%s.err", bin(), dir, dir);
    char *out = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 1);
    json_t *l[16];
    int n = parse_lines(out, l, 16), errors = 0, texts = 0;
    CHECK_EQ_INT(n, N_IMGS + 1);
    for (int i = 0; i < n; i++) {
        const char *im = image_of(l[i]);
        if (json_object_get(l[i], "error")) {
            errors++;
            CHECKF(im && strstr(im, "/x.png"), "error for %s", im);
            CHECK(json_string_value(json_object_get(l[i], "error"))[0] != 0);
        } else if (text_of(l[i]) && *text_of(l[i])) {
            texts++;
        }
    }
    CHECK_EQ_INT(errors, 1);
    CHECK_EQ_INT(texts, N_IMGS);
    free_lines(l, n);
    snprintf(cmd, sizeof cmd, "cat %s.err; rm -f %s.err", dir, dir);
    char *err = iris_test_popen(cmd, &st);
    CHECK_CONTAINS(err, "1 failed");
    free(out), free(err);
    rm_dir(dir);
}

/* --json in batch mode: each line has the single-image --json members but "model", consistent with
 * "tokens"; describe --json's "scene" too; --ignore-eos: every answer exactly --max-tokens long. */
IRIS_TEST(cli_batch_json) {
    char cmd[2048];
    int st;
    snprintf(cmd, sizeof cmd, "%s caption examples/images/scene1.png examples/images/scene3.png " FLAGS, bin());
    char *plain = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 0);
    snprintf(cmd, sizeof cmd, "%s caption examples/images/scene1.png examples/images/scene3.png --json " FLAGS, bin());
    char *js = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 0);
    json_t *lp[4], *lj[4];
    int np = parse_lines(plain, lp, 4), nj = parse_lines(js, lj, 4);
    REQUIRE(np == 2 && nj == 2);
    for (int i = 0; i < 2; i++) {
        json_t *o = lj[i], *u = json_object_get(o, "usage"), *t = json_object_get(o, "timings");
        CHECK_STR(image_of(o), image_of(lp[i]));
        CHECK_STR(text_of(o), text_of(lp[i]));  /* greedy: --json changes nothing but the members */
        CHECK(json_object_get(o, "model") == NULL);
        CHECK(json_object_get(lp[i], "usage") == NULL);
        CHECK_STR(json_string_value(json_object_get(o, "finish_reason")), "length");
        CHECK_EQ_INT((int)json_integer_value(json_object_get(u, "completion_tokens")),
                     (int)json_integer_value(json_object_get(o, "tokens")));
        CHECK(json_integer_value(json_object_get(u, "prompt_tokens")) > 100);
        double ttft = json_number_value(json_object_get(t, "ttft_s")), total = json_number_value(json_object_get(t, "total_s"));
        CHECKF(ttft > 0 && total >= ttft, "ttft %g total %g", ttft, total);
    }
    free_lines(lp, np), free_lines(lj, nj);
    free(plain), free(js);
    /* describe --json: the scene schema per image, given parsed as "scene" (null when cut short) */
    snprintf(cmd, sizeof cmd, "%s describe examples/images/scene1.png examples/images/scene2.png --json "
             "--temperature 0 --max-tokens 400 -q", bin());
    char *d = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 0);
    int nd = parse_lines(d, lj, 4);
    CHECK_EQ_INT(nd, 2);
    for (int i = 0; i < nd; i++) {
        json_t *sc = json_object_get(lj[i], "scene");
        CHECKF(sc != NULL, "line %d has no \"scene\"", i);
        const char *fr = json_string_value(json_object_get(lj[i], "finish_reason"));
        if (fr && !strcmp(fr, "stop")) CHECK(json_is_object(sc) && json_is_array(json_object_get(sc, "objects")));
        else CHECK(json_is_null(sc));
    }
    free_lines(lj, nd);
    free(d);
    /* --ignore-eos: the end token does not stop an answer; it needs --max-tokens */
    snprintf(cmd, sizeof cmd, "%s caption examples/images/scene1.png examples/images/scene3.png --json --ignore-eos "
             "--temperature 0 --max-tokens 40 -q", bin());
    char *long_ = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 0);
    int nl = parse_lines(long_, lj, 4);
    CHECK_EQ_INT(nl, 2);
    for (int i = 0; i < nl; i++) {
        CHECK_EQ_INT((int)json_integer_value(json_object_get(lj[i], "tokens")), 40);
        CHECK_STR(json_string_value(json_object_get(lj[i], "finish_reason")), "length");
    }
    free_lines(lj, nl);
    free(long_);
    snprintf(cmd, sizeof cmd, "%s caption examples/images/scene1.png --ignore-eos 2>&1", bin());
    char *bad = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 2);
    CHECK_CONTAINS(bad, "--max-tokens");
    free(bad);
}

/* Picture k of the many-images test: a background and a square in one of nine cells, colours and
 * cell from k, so every picture differs. */
static int write_picture(const char *path, int k) {
    static const uint8_t pal[6][3] = {{220, 35, 35}, {35, 160, 55}, {35, 75, 225}, {240, 210, 25}, {130, 50, 175},
                                      {250, 250, 250}};
    iris_image im = {.width = 96 + 8 * (k % 5), .height = 80 + 4 * (k % 7)};
    im.rgb = malloc((size_t)im.width * im.height * 3);
    if (!im.rgb) return -1;
    const uint8_t *bg = pal[5 - k % 2 * 5], *fg = pal[k % 5];
    int cx = (k / 5) % 3, cy = (k / 15) % 3, side = im.width / 4;
    for (int y = 0; y < im.height; y++)
        for (int x = 0; x < im.width; x++) {
            int in = x >= cx * im.width / 3 + 4 && x < cx * im.width / 3 + 4 + side && y >= cy * im.height / 3 + 2 &&
                     y < cy * im.height / 3 + 2 + side;
            memcpy(im.rgb + ((size_t)y * im.width + x) * 3, in ? fg : bg, 3);
        }
    iris_err err = {0};
    int rc = iris_image_write_png(&im, path, &err);
    free(im.rgb);
    return rc;
}

/* Many distinct images on the CPU (more than the engine's sequences and the workers' lookahead):
 * one line each in input order, answers of exactly --max-tokens, and the first, a middle and the
 * last image's texts the same as a run of that image alone. */
IRIS_TEST(cli_batch_many_images) {
    enum { N = 40 };
    char dir[256], cmd[2048], path[512];
    snprintf(dir, sizeof dir, "/tmp/iris-batch-many-%d", (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    REQUIRE(system(cmd) == 0);
    for (int k = 0; k < N; k++) {
        snprintf(path, sizeof path, "%s/p%02d.png", dir, k);
        REQUIRE(write_picture(path, k) == 0);
    }
    int st;
    snprintf(cmd, sizeof cmd, "%s caption %s --temperature 0 --max-tokens 8 --ignore-eos -q", bin(), dir);
    char *out = iris_test_popen(cmd, &st);
    CHECK_EQ_INT(st, 0);
    json_t *l[N + 1];
    int n = parse_lines(out, l, N + 1);
    CHECK_EQ_INT(n, N);
    for (int k = 0; k < n; k++) {
        snprintf(path, sizeof path, "%s/p%02d.png", dir, k);
        CHECKF(image_of(l[k]) && !strcmp(image_of(l[k]), path), "line %d: %s, want %s", k, image_of(l[k]), path);
        CHECKF(text_of(l[k]) && *text_of(l[k]), "line %d has no text", k);
        CHECK_EQ_INT((int)json_integer_value(json_object_get(l[k], "tokens")), 8);
    }
    const int alone[3] = {0, N / 2 + 1, N - 1};
    for (int i = 0; i < 3 && n == N; i++) {
        snprintf(cmd, sizeof cmd, "%s caption %s/p%02d.png --temperature 0 --max-tokens 8 --ignore-eos -q", bin(), dir,
                 alone[i]);
        char *one = iris_test_popen(cmd, &st);
        CHECK_EQ_INT(st, 0);
        if (one) one[strcspn(one, "\n")] = 0;
        CHECKF(one && !strcmp(one, text_of(l[alone[i]]) ? text_of(l[alone[i]]) : ""), "image %d: alone \"%s\", in the batch \"%s\"",
               alone[i], one, text_of(l[alone[i]]));
        free(one);
    }
    free_lines(l, n);
    free(out);
    rm_dir(dir);
}
