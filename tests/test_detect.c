/* test_detect.c: grounding answers (formats/grounding.c), boxes drawn and written as PNG
 * (formats/image_draw.c), and `iris detect` end to end on the demo model. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/grounding.h"
#include "server_harness.h"
#include "test.h"

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

IRIS_TEST(detect_parse_forms) {
    iris_ground_box b[8];
    /* the cookbook's form: a fenced list */
    const char *fenced = "```json\n[\n  {\"bbox_2d\": [10, 20, 300, 400], \"label\": \"red car\"},\n"
                         "  {\"bbox_2d\": [500.5, 0, 1000, 999], \"label\": \"blue car\"}\n]\n```";
    CHECK_EQ_INT(iris_ground_parse(fenced, b, 8), 2);
    CHECK(NEAR(b[0].x1, 10) && NEAR(b[0].y1, 20) && NEAR(b[0].x2, 300) && NEAR(b[0].y2, 400));
    CHECK_STR(b[0].label, "red car");
    CHECK(NEAR(b[1].x1, 500.5) && NEAR(b[1].y2, 999) && !b[1].is_point);
    CHECK_STR(b[1].label, "blue car");
    /* one object alone, no label */
    CHECK_EQ_INT(iris_ground_parse("{\"bbox_2d\":[1,2,3,4]}", b, 8), 1);
    CHECK(b[0].label[0] == 0 && NEAR(b[0].x2, 3));
    /* prose around, a point, a nested wrapper, strings holding braces */
    const char *mixed = "Here: {\"objects\": [{\"label\": \"a } {\", \"bbox_2d\": [5, 6, 7, 8]}]} and "
                        "{\"point_2d\": [250, 750], \"label\": \"cup\"}.";
    CHECK_EQ_INT(iris_ground_parse(mixed, b, 8), 2);
    CHECK_STR(b[0].label, "a } {");
    CHECK(NEAR(b[0].x1, 5) && NEAR(b[0].y2, 8));
    CHECK(b[1].is_point && NEAR(b[1].x1, 250) && NEAR(b[1].y1, 750) && NEAR(b[1].x2, 250));
    CHECK_STR(b[1].label, "cup");
    /* not boxes: wrong counts, strings for numbers, a truncated last object (the first kept) */
    CHECK_EQ_INT(iris_ground_parse("{\"bbox_2d\": [1, 2, 3]} {\"bbox_2d\": [\"1\", 2, 3, 4]}", b, 8), 0);
    CHECK_EQ_INT(iris_ground_parse("[{\"bbox_2d\": [1, 2, 3, 4]}, {\"bbox_2d\": [5, 6", b, 8), 1);
    CHECK_EQ_INT(iris_ground_parse("A blue square on a gray background.", b, 8), 0);
    CHECK_EQ_INT(iris_ground_parse(NULL, b, 8), 0);
    /* a non-string label is ignored, the box kept */
    CHECK_EQ_INT(iris_ground_parse("{\"bbox_2d\": [1, 2, 3, 4], \"label\": 7}", b, 8), 1);
    CHECK(b[0].label[0] == 0);
    /* a long label is cut at a character's start (valid UTF-8 stays valid) */
    char lab[300] = "{\"point_2d\": [1, 2], \"label\": \"";
    for (int i = 0; i < 80; i++) strcat(lab, "\xc3\xa9"); /* 160 bytes of é */
    strcat(lab, "\"}");
    CHECK_EQ_INT(iris_ground_parse(lab, b, 8), 1);
    CHECK_EQ_INT(strlen(b[0].label), 126);
    json_t *js = json_string(b[0].label); /* NULL for invalid UTF-8 */
    CHECK(js != NULL);
    json_decref(js);
    /* more than max: all counted, max written */
    CHECK_EQ_INT(iris_ground_parse("{\"point_2d\":[1,1]}{\"point_2d\":[2,2]}{\"point_2d\":[3,3]}", b, 2), 3);
    CHECK(NEAR(b[1].x1, 2));
}

IRIS_TEST(detect_to_pixels) {
    /* x * width / 1000 on the original image (Qwen's cookbook), clamped, corners ordered */
    iris_ground_box b[3] = {{.x1 = 100, .y1 = 200, .x2 = 500, .y2 = 800},
                            {.x1 = 900, .y1 = 1100, .x2 = -20, .y2 = 500},
                            {.is_point = 1, .x1 = 500, .y1 = 500, .x2 = 500, .y2 = 500}};
    iris_ground_to_pixels(b, 3, 640, 480);
    CHECK(NEAR(b[0].x1, 64) && NEAR(b[0].y1, 96) && NEAR(b[0].x2, 320) && NEAR(b[0].y2, 384));
    CHECK(NEAR(b[1].x1, 0) && NEAR(b[1].x2, 576) && NEAR(b[1].y1, 240) && NEAR(b[1].y2, 480));
    CHECK(NEAR(b[2].x1, 320) && NEAR(b[2].y1, 240));
    /* odd sizes keep fractions: 333 of 1000 of 97 px */
    iris_ground_box c = {.x1 = 333, .y1 = 0, .x2 = 1000, .y2 = 1000};
    iris_ground_to_pixels(&c, 1, 97, 13);
    CHECK(NEAR(c.x1, 333 * 97 / 1000.0) && NEAR(c.x2, 97) && NEAR(c.y2, 13));
}

static const uint8_t *px(const iris_image *im, int x, int y) {
    return im->rgb + ((size_t)y * im->width + x) * 3;
}

IRIS_TEST(detect_annotate_png) {
    iris_image im = {.width = 120, .height = 90};
    im.rgb = malloc((size_t)im.width * im.height * 3);
    REQUIRE(im.rgb);
    memset(im.rgb, 128, (size_t)im.width * im.height * 3);
    iris_ground_box b = {.x1 = 30, .y1 = 40, .x2 = 90, .y2 = 80};
    strcpy(b.label, "Car 1");
    const uint8_t red[3] = {255, 0, 0};
    iris_image_draw_boxes(&im, &b, 1, red, 2);
    char path[64];
    snprintf(path, sizeof path, "/tmp/iris-annotate-%d.png", (int)getpid());
    iris_err err = {0};
    REQUIRE(iris_image_write_png(&im, path, &err) == 0);
    free(im.rgb);
    iris_image back = {0};
    REQUIRE(iris_image_decode_file(path, NULL, &back, &err) == 0);
    unlink(path);
    CHECK_EQ_INT(back.width, 120);
    CHECK_EQ_INT(back.height, 90);
    /* every edge drawn, 2 px thick; inside and outside untouched */
    int edges[][2] = {{60, 40}, {60, 41}, {60, 80}, {60, 79}, {30, 60}, {31, 60}, {90, 60}, {89, 60}};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) {
        const uint8_t *p = px(&back, edges[i][0], edges[i][1]);
        CHECKF(p[0] == 255 && p[1] == 0 && p[2] == 0, "edge pixel (%d, %d) is %d,%d,%d", edges[i][0], edges[i][1],
               p[0], p[1], p[2]);
    }
    CHECK(px(&back, 60, 60)[0] == 128 && px(&back, 60, 42)[0] == 128 && px(&back, 10, 10)[0] == 128);
    CHECK(px(&back, 91, 60)[0] == 128 && px(&back, 60, 81)[0] == 128);
    /* the label: a red bar above the box (rows 31..39) with white glyph pixels in it */
    int white = 0, bar = 0;
    for (int y = 31; y < 40; y++)
        for (int x = 30; x < 30 + 5 * 6 + 1; x++) {
            const uint8_t *p = px(&back, x, y);
            white += p[0] == 255 && p[1] == 255 && p[2] == 255;
            bar += p[0] == 255 && p[1] == 0;
        }
    CHECK(white > 20 && bar > 100);
    CHECK(iris_image_write_png(&back, "/nonexistent-dir/x.png", &err) == IRIS_EIO);
    CHECK_CONTAINS(err.msg, "/nonexistent-dir/x.png: cannot write");
    iris_image_free(&back);
}

/* The CLI: usage errors, and the demo model's answer either as boxes inside the image or, when it
 * gives none (it is trained on captions and questions, not grounding), exit 1 with its answer. */
IRIS_TEST(detect_cli) {
    char cmd[512];
    int rc = 0;
    snprintf(cmd, sizeof cmd, "%s detect tests/fixtures/demo/images/square.png 2>&1", ts_bin());
    char *out = iris_test_popen(cmd, &rc);
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "give IMAGE and QUERY");
    free(out);
    snprintf(cmd, sizeof cmd, "%s detect -q /nonexistent.png square 2>&1", ts_bin());
    out = iris_test_popen(cmd, &rc);
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "/nonexistent.png");
    free(out);
    char png[64];
    snprintf(png, sizeof png, "/tmp/iris-detect-%d.png", (int)getpid());
    snprintf(cmd, sizeof cmd, "%s detect -q -m models/demo tests/fixtures/demo/images/square.png 'blue square' "
             "--annotate %s 2>/tmp/iris-detect-%d.err", ts_bin(), png, (int)getpid());
    out = iris_test_popen(cmd, &rc);
    snprintf(cmd, sizeof cmd, "/tmp/iris-detect-%d.err", (int)getpid());
    char *err = ts_slurp(cmd, NULL);
    unlink(cmd);
    if (rc == 0) {
        json_t *j = json_loads(out ? out : "", 0, NULL);
        CHECKF(json_is_array(j) && json_array_size(j) > 0, "not a JSON list of boxes: %s", out ? out : "");
        size_t i;
        json_t *o;
        json_array_foreach(j, i, o) {
            json_t *box = json_object_get(o, "box");
            CHECK(json_is_string(json_object_get(o, "label")));
            if (!box) continue;
            /* square.png is 210 x 160 */
            CHECK(json_integer_value(json_array_get(box, 0)) <= json_integer_value(json_array_get(box, 2)));
            CHECK(json_integer_value(json_array_get(box, 2)) <= 210 && json_integer_value(json_array_get(box, 3)) <= 160);
        }
        json_decref(j);
        CHECK(access(png, R_OK) == 0);
    } else {
        CHECKF(rc == 1, "exit %d, stderr: %s", rc, err ? err : "");
        CHECK_CONTAINS(err, "no boxes in the model's answer:");
        CHECK(out && !out[0]); /* nothing on stdout */
        CHECK(access(png, F_OK) != 0);
    }
    unlink(png);
    free(out);
    free(err);
}
