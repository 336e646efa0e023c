/* analyze_scene.c: a structured scene analysis of an image from a running
 * `iris serve`: objects, setting, activities, visible text and mood.
 *
 *     build/examples/analyze_scene street.jpg
 *
 * See iris_client.h for IRIS_URL, IRIS_MODEL and IRIS_API_KEY. */
#include "iris_client.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
        return 2;
    }
    return ic_ask_image(argv[1],
                        "Analyze this scene. List, under these headings: Objects; Setting; "
                        "Activities; Visible text; Mood.",
                        512);
}
