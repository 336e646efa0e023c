/* test_ls_fits.c: `iris ls --vram SIZE` plans every supported model in the
 * HF cache for such a card: a tiny model fits 8 GiB and not 16 MiB. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "test.h"

static char *run(const char *cmd) {
    int st;
    return iris_test_popen(cmd, &st);
}

IRIS_TEST(ls_vram_fits_column) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    char dir[] = "/tmp/iris-ls-XXXXXX", cmd[2048];
    REQUIRE(mkdtemp(dir));
    const char *commit = "0123456789abcdef0123456789abcdef01234567";
    snprintf(cmd, sizeof cmd,
             "set -e; d=%s/models--Tiny--Gqa; mkdir -p $d/refs $d/blobs $d/snapshots/%s; echo -n %s > $d/refs/main; "
             "cp tests/fixtures/tiny/tiny-gqa/model/* $d/snapshots/%s/",
             dir, commit, commit, commit);
    REQUIRE(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "HF_HUB_CACHE=%s %s ls --json --vram 8GiB --reserved 1GiB", dir, bin);
    char *out = run(cmd);
    REQUIRE(out);
    json_error_t je;
    json_t *arr = json_loads(out, 0, &je);
    CHECKF(json_is_array(arr) && json_array_size(arr) == 1, "ls --json: %s", out);
    json_t *m = json_array_get(arr, 0);
    CHECK(json_is_true(json_object_get(m, "fits")));
    CHECK(json_integer_value(json_object_get(m, "context")) >= 4096);
    json_decref(arr);
    free(out);
    snprintf(cmd, sizeof cmd, "HF_HUB_CACHE=%s %s ls --vram 16MiB", dir, bin);
    out = run(cmd);
    CHECK_CONTAINS(out, "Tiny/Gqa");
    CHECK_CONTAINS(out, "FITS");
    CHECK_CONTAINS(out, "no: ");
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}
