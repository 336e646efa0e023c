/* test_cli_plan.c: `iris plan` before the download (env IRIS_BIN, default
 * build/iris): a published Qwen3-VL repo id that is not in the cache is
 * planned offline from the built-in table of shapes (src/tools/synth.c),
 * saying so; an unknown one offline names what iris knows.  The table's
 * header-only checkpoints hold exactly the bytes QWEN3VL.md §1.5 computes.
 * (Online, from the Hub's headers: test_hub.c hub_cli_plan_online.) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "test.h"
#include "tools/synth.h"

static char *iris_cmd(const char *env, const char *args, int *st) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "HF_HUB_CACHE=/nonexistent-iris-cache %s %s %s", env, bin, args);
    char *s = iris_test_popen(cmd, st);
    return s ? s : strdup("");
}

IRIS_TEST(cli_plan_offline_table) {
    int st;
    char *out = iris_cmd("HF_HUB_OFFLINE=1", "plan Qwen/Qwen3-VL-4B-Instruct-FP8 --vram 8GiB --reserved 1GiB 2>&1", &st);
    CHECKF(st == 0, "exit %d: %s", st, out);
    CHECK_CONTAINS(out, "built-in table");
    CHECK_CONTAINS(out, "Memory plan for Qwen/Qwen3-VL-4B-Instruct-FP8 (FP8 weights)");
    CHECK_CONTAINS(out, "context:");
    free(out);
    /* --offline is the same rule; the JSON plan has the table's weights */
    out = iris_cmd("", "plan --offline Qwen/Qwen3-VL-2B-Instruct --plan-json 2>/dev/null", &st);
    CHECK_EQ_INT(st, 0);
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    CHECKF(o != NULL, "%s", out);
    /* 2B BF16: 4,255,064,064 bytes of tensors (QWEN3VL.md §1.5), in 256-byte slots */
    json_int_t bf16 = json_integer_value(json_object_get(json_object_get(o, "weight_bytes_by_dtype"), "BF16"));
    CHECKF(bf16 >= 4255064064LL && bf16 < 4255064064LL + 625 * 256, "BF16 weights %lld", (long long)bf16);
    CHECK_EQ_INT(json_integer_value(json_object_get(o, "max_position_embeddings")), 262144);
    json_decref(o);
    free(out);
    /* 8B, Thinking, a revision: known too (untied: lm_head stored) */
    out = iris_cmd("HF_HUB_OFFLINE=1", "plan Qwen/Qwen3-VL-8B-Thinking-FP8@main --vram 24GiB 2>&1", &st);
    CHECKF(st == 0, "exit %d: %s", st, out);
    CHECK_CONTAINS(out, "built-in table");
    free(out);
    /* an unknown repo offline: exit 1, naming the known ones */
    out = iris_cmd("HF_HUB_OFFLINE=1", "plan someone/other-model 2>&1", &st);
    CHECK_EQ_INT(st, 1);
    CHECK_CONTAINS(out, "Qwen/Qwen3-VL-4B-Instruct[-FP8]");
    CHECK_CONTAINS(out, "iris pull someone/other-model");
    free(out);
}

/* The table against QWEN3VL.md §1.5: the header-only copies hold exactly the stored bytes. */
IRIS_TEST(cli_plan_table_bytes) {
    static const struct {
        const char *repo;
        unsigned long long bytes;
        int n_tensors;
    } want[] = {
        {"Qwen/Qwen3-VL-2B-Instruct", 4255064064ull, 625},
        {"Qwen/Qwen3-VL-4B-Thinking", 8875631616ull, 713},
        {"qwen/qwen3-vl-2b-instruct-fp8", 2846121984ull, 0},
        {"Qwen/Qwen3-VL-4B-Instruct-FP8", 5243202816ull, 965},
        {"Qwen/Qwen3-VL-8B-Instruct", 8767123696ull * 2, 750},   /* 8.77B parameters, lm_head included */
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        iris_synth_opts o;
        REQUIRE(iris_synth_known_repo(want[i].repo, &o) == 1);
        char dir[] = "/tmp/iris-test-plan-XXXXXX";
        REQUIRE(mkdtemp(dir));
        iris_err err = {0};
        CHECKF(iris_synth_write_headers(dir, &o, &err) == 0, "%s", err.msg);
        iris_st *st = NULL;
        CHECKF(iris_st_open_headers(dir, &st, &err) == 0, "%s", err.msg);
        if (st) {
            CHECKF(iris_st_total_bytes(st) == want[i].bytes, "%s: %llu bytes, not %llu", want[i].repo,
                   (unsigned long long)iris_st_total_bytes(st), want[i].bytes);
            if (want[i].n_tensors) CHECK_EQ_INT(iris_st_count(st), want[i].n_tensors);
        }
        iris_st_close(st);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "du -k %s/model.safetensors | cut -f1", dir);
        int s;
        char *du = iris_test_popen(cmd, &s);
        CHECKF(du && atol(du) < 1024, "the header-only file takes %s kB on disk", du ? du : "?");   /* sparse */
        free(du);
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(system(cmd) == 0);
    }
    iris_synth_opts o;
    CHECK_EQ_INT(iris_synth_known_repo("Qwen/Qwen3-VL-4B-Instruct-AWQ", &o), 0);
}
