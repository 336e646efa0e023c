/* fuzz_openai_request.c: libFuzzer target for the server's request parser
 * (iris_oai_parse, both routes), then, for what parses, the data: URL
 * decoder on every image URL (no network or files: remote and file:// URLs
 * are refused by the options), the chat template on the messages and the
 * response and error builders.  Nothing may crash, leak or read out of
 * bounds, whatever the bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/chat.h"
#include "server/media.h"
#include "server/openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int kind = 0; kind < 2; kind++) {
        iris_oai_request q;
        iris_oai_err e;
        iris_sampling sp = {.temperature = 0.7f, .top_p = 0.8f, .top_k = 20, .repetition_penalty = 1.0f, .seed = -1};
        if (iris_oai_parse((const char *)data, size, (iris_oai_kind)kind, &sp, &q, &e) != 0) {
            free(iris_oai_error_body(&e));
            iris_oai_request_free(&q);
            continue;
        }
        iris_media_opts mo = {.allow_remote = 0, .local_dir = NULL, .max_bytes = 1 << 20};
        for (int i = 0; i < q.n_images; i++) {
            uint8_t *bytes = NULL;
            size_t n = 0;
            iris_err err;
            if (iris_media_fetch(q.image_urls[i], &mo, &bytes, &n, &err) == 0) free(bytes);
        }
        if (q.messages) {
            iris_chat_opts co = {.add_generation_prompt = 1};
            char *text = NULL;
            size_t len = 0;
            iris_err err;
            if (iris_chat_render(q.messages, NULL, &co, &text, &len, NULL, &err) == 0) free(text);
        }
        const char *t = q.prompt ? q.prompt : "x";
        json_t *r = iris_oai_response(q.kind, "id", 0, "m", t, strlen(t), "stop", NULL, 1, 2);
        size_t n = 0;
        free(iris_oai_sse(r, &n));
        iris_oai_request_free(&q);
    }
    return 0;
}
