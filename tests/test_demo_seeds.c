/* test_demo_seeds.c: the demo model's scene seeds cannot mix training and
 * evaluation (tools/demo_seeds.py, python3's standard library only).
 *
 * `demo_seeds.py check`: the table's ranges (every training run's, the
 * evaluation's, the fixtures', the tokenizer corpus', make demo's examples)
 * are pairwise disjoint but the two declared legacy nestings, and its guard
 * refuses runs into them.  tools/train_demo.py itself refuses, before it
 * imports numpy or torch, a --first-scene/--steps or --seconds/--max-steps
 * combination that enters another range (exit 2), and allows run 22's
 * command (--dry-run: the guard alone, exit 0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static char *run(const char *args, int *st) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "python3 %s 2>&1", args);
    char *out = iris_test_popen(cmd, st);
    return out ? out : strdup("");
}

IRIS_TEST(demo_seeds_disjoint) {
    int st;
    char *out = run("tools/demo_seeds.py check", &st);
    if (st == 127) {
        free(out);
        IRIS_TEST_SKIP("python3 not found (scripts/setup installs it)");
    }
    CHECKF(st == 0, "demo_seeds.py check exit %d: %s", st, out);
    CHECK(strstr(out, "OK") != NULL);
    free(out);
    /* the guard directly: the evaluation's first scene, and run 22's own range */
    out = run("tools/demo_seeds.py guard 40000000 96", &st);
    CHECKF(st == 1 && strstr(out, "refused"), "guard into the evaluation: exit %d: %s", st, out);
    free(out);
    out = run("tools/demo_seeds.py guard 21000000 192000", &st);
    CHECKF(st == 0 && strstr(out, "allowed"), "guard on run 22's range: exit %d: %s", st, out);
    free(out);
}

IRIS_TEST(demo_train_refuses_overlap) {
    static const char *refused[] = {
        /* run 11's range, into the first held-out scenes */
        "--first-scene 10000000 --steps 100 --batch-scenes 96",
        /* a later range running into the evaluation with --seconds and a step cap */
        "--first-scene 39990000 --seconds 380 --max-steps 200 --batch-scenes 96",
        /* the evaluation itself */
        "--first-scene 40000000 --steps 1",
        /* the fixtures */
        "--first-scene 41000000 --seconds 60",
        /* no training range there */
        "--first-scene 500000 --steps 10",
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        char args[512];
        int st;
        snprintf(args, sizeof args, "tools/train_demo.py train build/demo-seeds-refused %s", refused[i]);
        char *out = run(args, &st);
        if (st == 127) {
            free(out);
            IRIS_TEST_SKIP("python3 not found (scripts/setup installs it)");
        }
        CHECKF(st == 2 && strstr(out, "refused by tools/demo_seeds.py"), "train %s: exit %d: %s", refused[i], st,
               out);
        free(out);
    }
    /* run 22's command (tools/demo_run.sh) is allowed: scenes 21,000,000 to the end of its range */
    int st;
    char *out = run("tools/train_demo.py train build/demo-seeds-run22 --init models/demo --seconds 380 --lr 1.5e-4 "
                    "--first-scene 21000000 --batch-scenes 96 --pixels 131072 --dry-run",
                    &st);
    CHECKF(st == 0 && strstr(out, "allowed: scenes 21000000-21999935 at most (10416 steps)"), "run 22: exit %d: %s",
           st, out);
    free(out);
}
