/* test_prompt.c: the whole prompt path (chat template, tiny tokenizer, image
 * preprocessing, pad expansion, positions) against the inputs transformers
 * built for the tiny fixtures (tests/fixtures/tiny/inputs, manifest.json). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>

#include "formats/config.h"
#include "engine/prompt.h"
#include "formats/tokenizer.h"
#include "test.h"
#include "tiny_fixture.h"

IRIS_TEST(prompt_matches_transformers) {
    const char *dir = TINY_DIR "/tiny-gqa/model";
    iris_err err = {0};
    iris_config cfg;
    iris_preprocessor_config pc;
    iris_tok *tok = NULL;
    REQUIRE(iris_config_load(dir, &cfg, &err) == 0);
    REQUIRE(iris_preprocessor_config_load(dir, &pc, &err) == 0);
    CHECK_EQ_INT(pc.min_pixels, 1024);
    REQUIRE(iris_tok_load(TINY_DIR "/tiny-gqa/model/tokenizer.json", &tok, &err) == 0);
    json_error_t je;
    json_t *man = json_load_file(TINY_DIR "/manifest.json", 0, &je);
    REQUIRE(man);
    const char *sname;
    json_t *scen;
    json_object_foreach(json_object_get(man, "scenarios"), sname, scen) {
        json_t *imgs = json_object_get(scen, "images");
        const char *paths[8];
        char buf[8][256];
        int n = (int)json_array_size(imgs);
        REQUIRE(n <= 8);
        for (int i = 0; i < n; i++) {
            snprintf(buf[i], sizeof buf[i], "%s/images/%s", TINY_DIR, json_string_value(json_array_get(imgs, i)));
            paths[i] = buf[i];
        }
        iris_prompt p;
        int rc = iris_prompt_build(tok, &cfg, &pc, json_object_get(scen, "messages"), paths, n, &p, &err);
        CHECKF(rc == 0, "%s: %s", sname, err.msg);
        if (rc) continue;
        CHECK_STR(p.text, json_string_value(json_object_get(scen, "text")));
        char rel[256];
        tiny_arr ids, grid, pos, pv;
        snprintf(rel, sizeof rel, "inputs/%s/input_ids.npy", sname);
        REQUIRE(tiny_load(rel, &ids) == 0);
        CHECK_EQ_INT(p.ids.n, ids.n);
        int same = p.ids.n == (size_t)ids.n;
        for (int64_t i = 0; same && i < ids.n; i++) same = p.ids.ids[i] == ids.i64[i];
        CHECKF(same, "%s: token ids differ from transformers'", sname);
        snprintf(rel, sizeof rel, "inputs/%s/position_ids.npy", sname);
        REQUIRE(tiny_load(rel, &pos) == 0);
        same = pos.n == 3 * (int64_t)p.ids.n;
        for (int64_t i = 0; same && i < pos.n; i++) same = p.pos[i] == pos.i64[i];
        CHECKF(same, "%s: positions differ", sname);
        snprintf(rel, sizeof rel, "inputs/%s/image_grid_thw.npy", sname);
        REQUIRE(tiny_load(rel, &grid) == 0);
        CHECK_EQ_INT(grid.n, 3 * p.n_images);
        for (int64_t i = 0; i < grid.n && i < 3 * p.n_images; i++) CHECK_EQ_INT(p.grid_thw[i], grid.i64[i]);
        if (n > 0) {
            snprintf(rel, sizeof rel, "inputs/%s/pixel_values.npy", sname);
            REQUIRE(tiny_load(rel, &pv) == 0);
            CHECK_EQ_INT(pv.shape[0], p.n_rows);
            if (pv.shape[0] == p.n_rows) {
                float d = 0;
                for (int64_t i = 0; i < pv.n; i++) d = fmaxf(d, fabsf(p.pixel_values[i] - pv.f32[i]));
                printf("  %s: %zu tokens, pixel_values max-abs %.3g\n", sname, p.ids.n, d);
                CHECKF(d == 0, "%s: pixel_values differ by %g", sname, d);
            }
            tiny_free(&pv);
        }
        tiny_free(&ids);
        tiny_free(&pos);
        tiny_free(&grid);
        iris_prompt_free(&p);
    }
    json_decref(man);
    iris_tok_free(tok);
}

IRIS_TEST(prompt_errors) {
    const char *dir = TINY_DIR "/tiny-gqa/model";
    iris_err err = {0};
    iris_config cfg;
    iris_preprocessor_config pc;
    iris_tok *tok = NULL;
    REQUIRE(iris_config_load(dir, &cfg, &err) == 0);
    REQUIRE(iris_preprocessor_config_load(dir, &pc, &err) == 0);
    REQUIRE(iris_tok_load(TINY_DIR "/tiny-gqa/model/tokenizer.json", &tok, &err) == 0);
    json_t *m = iris_prompt_one_turn(NULL, 1, "hi");
    const char *bad[1] = {TINY_DIR "/tiny-gqa/model/config.json"};   /* not an image */
    iris_prompt p;
    CHECK(iris_prompt_build(tok, &cfg, &pc, m, bad, 1, &p, &err) != 0);
    CHECK_CONTAINS(err.msg, "config.json");
    CHECK(iris_prompt_build(tok, &cfg, &pc, m, bad, 0, &p, &err) == IRIS_EINVAL);
    CHECK_CONTAINS(err.msg, "1 image part");
    json_decref(m);
    iris_tok_free(tok);
}
