/* test_positions.c: get_rope_index against the position ids transformers
 * passed to its language model (tests/fixtures/tiny/inputs/<scenario>/). */
#include <stdlib.h>

#include "model/positions.h"
#include "test.h"
#include "tiny_fixture.h"

static const char *scenarios[] = {"text", "image", "two_images", "multi_turn"};
static const int expected_delta[] = {0, -8, -8, 0};   /* manifest.json rope_delta */

IRIS_TEST(positions_match_transformers) {
    for (int s = 0; s < 4; s++) {
        char p[256];
        tiny_arr ids, grid, ref;
        snprintf(p, sizeof p, "inputs/%s/input_ids.npy", scenarios[s]);
        REQUIRE(tiny_load(p, &ids) == 0 && ids.i64);
        snprintf(p, sizeof p, "inputs/%s/image_grid_thw.npy", scenarios[s]);
        REQUIRE(tiny_load(p, &grid) == 0 && grid.i64);
        snprintf(p, sizeof p, "inputs/%s/position_ids.npy", scenarios[s]);
        REQUIRE(tiny_load(p, &ref) == 0 && ref.i64);
        int n = (int)ids.n, n_img = (int)(grid.n / 3);
        REQUIRE(ref.n == 3 * (int64_t)n);
        int32_t *id32 = malloc(sizeof(int32_t) * n), *pos = malloc(sizeof(int32_t) * 3 * n);
        int g[24];
        for (int i = 0; i < n; i++) id32[i] = (int32_t)ids.i64[i];
        for (int i = 0; i < 3 * n_img && i < 24; i++) g[i] = (int)grid.i64[i];
        int delta = 12345;
        iris_err err = {0};
        CHECKF(iris_pos_rope_index(id32, n, 492, g, n_img, 2, pos, &delta, &err) == 0, "%s: %s", scenarios[s],
               err.msg);
        int bad = -1;
        for (int i = 0; i < 3 * n && bad < 0; i++)
            if (pos[i] != ref.i64[i]) bad = i;
        CHECKF(bad < 0, "%s: position row %d token %d: %d, transformers %lld", scenarios[s], bad / n, bad % n,
               bad >= 0 ? pos[bad] : 0, bad >= 0 ? (long long)ref.i64[bad] : 0LL);
        CHECK_EQ_INT(delta, expected_delta[s]);
        /* the first decoded token follows the largest prompt position */
        int32_t maxp = 0;
        for (int i = 0; i < 3 * n; i++) maxp = pos[i] > maxp ? pos[i] : maxp;
        CHECK_EQ_INT(iris_pos_decode(n, delta), maxp + 1);
        free(id32);
        free(pos);
        tiny_free(&ids);
        tiny_free(&grid);
        tiny_free(&ref);
    }
}

IRIS_TEST(positions_bad_input) {
    int32_t ids[6] = {1, 492, 492, 492, 2, 3};
    int32_t pos[18];
    int g[3] = {1, 4, 4};   /* needs 4 tokens, the prompt has 3 */
    iris_err err = {0};
    CHECK(iris_pos_rope_index(ids, 6, 492, g, 1, 2, pos, NULL, &err) == IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "needs 4");
    CHECK(iris_pos_rope_index(ids, 6, 492, g, 0, 2, pos, NULL, &err) == IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "only 0 image");
    int g2[3] = {1, 2, 6};  /* 3 tokens: (a, b) = (0, 0..2), then cur += 3 */
    CHECK(iris_pos_rope_index(ids, 6, 492, g2, 1, 2, pos, NULL, &err) == 0);
    CHECK_EQ_INT(pos[6 + 2], 1);   /* h of the second image token */
    CHECK_EQ_INT(pos[12 + 3], 3);  /* w of the third */
    CHECK_EQ_INT(pos[4], 4);       /* text after the image: 1 + max(1, 3) */
}
