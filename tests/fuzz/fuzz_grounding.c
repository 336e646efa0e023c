/* fuzz_grounding.c: libFuzzer target for the grounding parser (a model's answer is text nobody
 * vetted), the conversion to pixels and the drawing of what it finds, boxes far outside the image
 * included (the drawing is called on the raw 0-1000 values as well as on pixels). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/grounding.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    iris_ground_box b[16];
    int n = iris_ground_parse(text, b, 16);
    free(text);
    if (n > 16) n = 16;
    uint8_t rgb[40 * 30 * 3];
    iris_image img = {.width = 40, .height = 30, .rgb = rgb};
    memset(rgb, 0, sizeof rgb);
    iris_image_draw_boxes(&img, b, n, NULL, 2);
    iris_ground_to_pixels(b, n, img.width, img.height);
    iris_image_draw_boxes(&img, b, n, NULL, 1);
    return 0;
}
