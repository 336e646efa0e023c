/* test_demo_server.c: the demo model through `iris serve` (no MODEL: the
 * default demo model), asked as users' OpenAI clients ask: a chat completion
 * with a data-URL image.  The fixed held-out scene holds one blue square on a
 * gray background (tests/fixtures/demo/images/square.png). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

static char *sh(const char *cmd) {
    int st;
    return iris_test_popen(cmd, &st);
}

IRIS_TEST(demo_server_caption_and_count) {
    const char *bin = getenv("IRIS_BIN") ? getenv("IRIS_BIN") : "build/iris";
    char cmd[4096], log[64];
    snprintf(log, sizeof log, "/tmp/iris-demo-srv-%d.log", (int)getpid());
    snprintf(cmd, sizeof cmd, "%s serve --port 0 > %s 2>&1 & echo $!", bin, log);
    char *pid = sh(cmd);
    REQUIRE(pid && atoi(pid) > 0);
    int port = 0;
    for (int i = 0; i < 100 && !port; i++) {
        usleep(100000);
        snprintf(cmd, sizeof cmd, "grep -o '127.0.0.1:[0-9]*' %s | head -1 | cut -d: -f2", log);
        char *p = sh(cmd);
        if (p) port = atoi(p);
        free(p);
    }
    CHECKF(port > 0, "the server did not print its address (log %s)", log);
    if (port) {
        for (int i = 0; i < 100; i++) { /* ready when /health says 200 */
            snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/health", port);
            char *c = sh(cmd);
            int ok = c && !strcmp(c, "200");
            free(c);
            if (ok) break;
            usleep(100000);
        }
        const char *q[2][2] = {{"Describe this image in one sentence.", "blue square"},
                               {"How many squares are there?", "\"content\":\"1\""}};
        for (int k = 0; k < 2; k++) {
            snprintf(cmd, sizeof cmd,
                     "printf '{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
                     "{\"url\":\"data:image/png;base64,%%s\"}},{\"type\":\"text\",\"text\":\"%s\"}]}],"
                     "\"temperature\":0,\"max_tokens\":40}' \"$(base64 -w0 tests/fixtures/demo/images/square.png)\" | "
                     "curl -s http://127.0.0.1:%d/v1/chat/completions -H 'Content-Type: application/json' -d @-",
                     q[k][0], port);
            char *body = sh(cmd);
            CHECK_CONTAINS(body, "\"finish_reason\":");
            CHECK_CONTAINS(body, q[k][1]);
            free(body);
        }
    }
    snprintf(cmd, sizeof cmd, "kill -TERM %d; sleep 0.3; rm -f %s", atoi(pid), log);
    free(sh(cmd));
    free(pid);
}
