/* caption.c: caption an image with a running `iris serve`.
 *
 *     iris serve Qwen/Qwen3-VL-2B-Instruct-FP8 &
 *     build/examples/caption photo.jpg
 *
 * The image goes as a data: URL in an OpenAI chat completion, the way
 * users' Python scripts sent it to vLLM.  See iris_client.h for IRIS_URL,
 * IRIS_MODEL and IRIS_API_KEY. */
#include "iris_client.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
        return 2;
    }
    return ic_ask_image(argv[1], "Write a one-sentence caption for this image.", 64);
}
