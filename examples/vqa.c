/* vqa.c: visual question answering against a running `iris serve`.
 *
 *     build/examples/vqa photo.jpg "How many people are in the picture?"
 *
 * See iris_client.h for IRIS_URL, IRIS_MODEL and IRIS_API_KEY. */
#include "iris_client.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s IMAGE QUESTION\n", argv[0]);
        return 2;
    }
    return ic_ask_image(argv[1], argv[2], 256);
}
