/* test_page.c: the page `iris serve` answers at / (src/server/page/, embedded by the Makefile):
 * served without a key, with its security headers, byte for byte the files of the repository;
 * and tests/node/page.mjs, the page in headless Chromium (Debian's) driven by playwright-core
 * against a server of the demo model with --api-key, which saves a screenshot to
 * build/test-artifacts/page.png.  The browser test is skipped, naming what is missing, only when
 * Chromium or playwright-core is absent (scripts/setup installs both). */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/page.h"
#include "server_harness.h"
#include "test.h"

#define DEMO_MODEL "models/demo"
#define DEMO_IMAGE "tests/fixtures/demo/images/square.png"

/* A response's headers (lower-cased names, as curl gives them) into out. */
static size_t on_header(char *b, size_t sz, size_t n, void *ud) {
    strncat(ud, b, 4095 - strlen(ud) < sz * n ? 4095 - strlen(ud) : sz * n);
    return sz * n;
}

static long get(int port, const char *path, char *headers, char **body) {
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    headers[0] = 0;
    CURL *c = curl_easy_init();
    FILE *f = NULL;
    size_t n = 0;
    *body = NULL;
    f = open_memstream(body, &n);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, headers);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
    long st = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    curl_easy_cleanup(c);
    fclose(f);
    return st;
}

IRIS_TEST(page_assets_embedded) {
    static const char *files[][2] = {{"/", "src/server/page/index.html"},
                                     {"/page.css", "src/server/page/page.css"},
                                     {"/page.js", "src/server/page/page.js"}};
    for (int i = 0; i < 3; i++) {
        const iris_page_asset *a = iris_page_find(files[i][0]);
        REQUIRE(a != NULL);
        size_t n = 0;
        char *want = ts_slurp(files[i][1], &n);
        REQUIRE(want != NULL);
        CHECKF(a->n == n && !memcmp(a->data, want, n), "%s is not %s as built (rebuild?)", files[i][0], files[i][1]);
        free(want);
    }
    CHECK(iris_page_find("/v1/models") == NULL);
    CHECK(iris_page_find("/page.js.map") == NULL);
    /* the ids tests and users drive the page by */
    const iris_page_asset *html = iris_page_find("/");
    char *s = strndup((const char *)html->data, html->n);
    static const char *ids[] = {"id=\"image\"", "id=\"prompt\"", "id=\"send\"", "id=\"error\"", "id=\"stage-img\""};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) CHECK_CONTAINS(s, ids[i]);
    free(s);
}

/* GET / is public on a server with a key; the API keeps asking for it. */
IRIS_TEST(page_public_api_keyed) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ts_server s;
    REQUIRE(ts_server_start_model(&s, DEMO_MODEL, "--api-key sekrit") == 0);
    char h[4096], *body = NULL;
    CHECK_EQ_INT(get(s.port, "/", h, &body), 200);
    CHECK_CONTAINS(h, "text/html");
    CHECK_CONTAINS(h, "Content-Security-Policy: default-src 'none'; script-src 'self'");
    CHECK_CONTAINS(h, "X-Content-Type-Options: nosniff");
    CHECK_CONTAINS(body, "<script src=\"/page.js\"");
    free(body);
    CHECK_EQ_INT(get(s.port, "/page.js", h, &body), 200);
    CHECK_CONTAINS(h, "text/javascript");
    CHECK_CONTAINS(body, "bbox_2d");
    free(body);
    CHECK_EQ_INT(get(s.port, "/v1/models", h, &body), 401);
    free(body);
    CHECK_EQ_INT(get(s.port, "/nope.html", h, &body), 404);
    free(body);
    CHECK_EQ_INT(ts_http(s.port, "POST", "/", "{}", 2, NULL, NULL), 405);
    CHECK_EQ_INT(ts_server_stop(&s), 0);
}

/* What is missing for the browser test, or NULL. */
static const char *browser_missing(void) {
    if (system("node --version > /dev/null 2>&1")) return "node is not installed (scripts/setup installs it)";
    if (access(getenv("CHROMIUM") ? getenv("CHROMIUM") : "/usr/bin/chromium", X_OK))
        return "Chromium is not installed (scripts/setup: apt-get install chromium)";
    if (access(".cache/node/node_modules/playwright-core/package.json", R_OK))
        return "the playwright-core npm package is missing (scripts/setup installs it into .cache/node)";
    return NULL;
}

IRIS_TEST(page_browser) {
    const char *missing = browser_missing();
    if (missing) IRIS_TEST_SKIP("%s", missing);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char cmd[1024];
    int rc = 0;
    snprintf(cmd, sizeof cmd, "%s caption -q -m %s %s", ts_bin(), DEMO_MODEL, DEMO_IMAGE);
    char *caption = iris_test_popen(cmd, &rc);
    REQUIRE(caption && rc == 0);
    caption[strcspn(caption, "\n")] = 0;
    CHECK(strlen(caption) > 0 && !strchr(caption, '\''));
    ts_server keyed;
    REQUIRE(ts_server_start_model(&keyed, DEMO_MODEL, "--api-key page-test-key") == 0);
    snprintf(cmd, sizeof cmd,
             "timeout 60 node tests/node/page.mjs %d page-test-key %s '%s' build/test-artifacts/page.png 2>&1",
             keyed.port, DEMO_IMAGE, caption);
    char *out = iris_test_popen(cmd, &rc);
    CHECKF(rc == 0, "page.mjs failed (exit %d):\n%s", rc, out ? out : "");
    if (getenv("IRIS_TEST_VERBOSE")) fprintf(stderr, "%s", out ? out : "");
    CHECK_CONTAINS(out, "PASS");
    free(out);
    free(caption);
    CHECK_EQ_INT(ts_server_stop(&keyed), 0);
}
