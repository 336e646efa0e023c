/* test_video_server.c: video_url parts through `iris serve` (the tiny model):
 * data:, file:// and http:// videos answered (the same prompt; an http 404 a 400),
 * mm_processor_kwargs honoured and checked, bad videos a 400 naming the part with the server unharmed, and the official
 * openai npm client sending a video_url part (tests/node/openai_video.mjs). */
#include <curl/curl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "formats/video.h"
#include "server_harness.h"
#include "test.h"

#define CLIP "tests/fixtures/video/c_odd.mkv"

/* A chat body with one video_url part (url as given) and extra top-level members. */
static char *video_body(const char *url, const char *extra) {
    size_t n = strlen(url) + (extra ? strlen(extra) : 0) + 512;
    char *b = malloc(n);
    snprintf(b, n, "{\"max_tokens\":6,\"temperature\":0,%s%s\"messages\":[{\"role\":\"user\",\"content\":["
             "{\"type\":\"video_url\",\"video_url\":{\"url\":\"%s\"}},{\"type\":\"text\",\"text\":\"What happens?\"}]}]}",
             extra ? extra : "", extra && *extra ? "," : "", url);
    return b;
}

static char *data_url_of(const char *mime, const void *data, size_t n) {
    static const char *tb = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    size_t m = strlen(mime) + 16 + 4 * ((n + 2) / 3) + 1;
    char *s = malloc(m), *o = s + sprintf(s, "data:%s;base64,", mime);
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *o++ = tb[v >> 18 & 63], *o++ = tb[v >> 12 & 63];
        *o++ = i + 1 < n ? tb[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tb[v & 63] : '=';
    }
    *o = 0;
    return s;
}

/* A local origin: /clip.mkv is the clip, anything else a 404. */
static enum MHD_Result origin_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                      const char *version, const char *up, size_t *up_n, void **ptr) {
    size_t n = 0;
    char *clip = strcmp(url, "/clip.mkv") ? NULL : ts_slurp(CLIP, &n);
    struct MHD_Response *r = clip ? MHD_create_response_from_buffer(n, clip, MHD_RESPMEM_MUST_FREE)
                                  : MHD_create_response_from_buffer(9, "not found", MHD_RESPMEM_PERSISTENT);
    if (clip) MHD_add_response_header(r, "Content-Type", "video/x-matroska");
    enum MHD_Result ret = MHD_queue_response(c, clip ? 200 : 404, r);
    MHD_destroy_response(r);
    return ret;
}

static long long prompt_tokens(const char *out) {
    json_t *j = ts_json(out);
    long long n = ts_jint(j, "usage.prompt_tokens");
    json_decref(j);
    return n;
}

IRIS_TEST(video_server) {
    if (!iris_video_supported()) IRIS_TEST_SKIP("built without video support (VIDEO=0)");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char cwd[1024], extra[1200];
    REQUIRE(getcwd(cwd, sizeof cwd));
    snprintf(extra, sizeof extra, "--allowed-local-media-path %s/tests/fixtures/video --allowed-media-networks 127.0.0.1/32",
             cwd);
    ts_server s;
    REQUIRE(ts_server_start(&s, extra) == 0);
    size_t n = 0;
    char *clip = ts_slurp(CLIP, &n);
    REQUIRE(clip);
    char *url = data_url_of("video/x-matroska", clip, n), *out = NULL;
    char *body = video_body(url, NULL);
    long st = ts_post(s.port, "/v1/chat/completions", body, &out);
    CHECKF(st == 200, "data: video: %ld %s", st, out);
    /* 25 frames at 10 fps: 5 sampled -> 6, 3 temporal patches of 96x160 (15 tokens each), each with
       its timestamp text and markers, plus the question */
    long long pt = prompt_tokens(out);
    CHECKF(pt > 3 * 15 + 10, "prompt_tokens %lld", pt);
    free(out);
    free(body);
    /* the same clip as a file:// URL: the same prompt */
    char furl[1200];
    snprintf(furl, sizeof furl, "file://%s/" CLIP, cwd);
    body = video_body(furl, NULL);
    st = ts_post(s.port, "/v1/chat/completions", body, &out);
    CHECKF(st == 200 && prompt_tokens(out) == pt, "file:// video: %ld %s", st, out);
    free(out);
    free(body);
    /* over http from a local origin: the same prompt; a missing one a 400 naming the part */
    struct MHD_Daemon *origin = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, origin_handler, NULL,
                                                 MHD_OPTION_END);
    REQUIRE(origin);
    int oport = MHD_get_daemon_info(origin, MHD_DAEMON_INFO_BIND_PORT)->port;
    char hurl[128];
    snprintf(hurl, sizeof hurl, "http://127.0.0.1:%d/clip.mkv", oport);
    body = video_body(hurl, NULL);
    st = ts_post(s.port, "/v1/chat/completions", body, &out);
    CHECKF(st == 200 && prompt_tokens(out) == pt, "http video: %ld %s", st, out);
    free(out);
    free(body);
    snprintf(hurl, sizeof hurl, "http://127.0.0.1:%d/missing.mkv", oport);
    body = video_body(hurl, NULL);
    st = ts_post(s.port, "/v1/chat/completions", body, &out);
    ts_check_error(st, out, 400, "messages[0].content[0].video_url", "http video 404");
    CHECK_CONTAINS(out, "could not fetch");
    free(out);
    free(body);
    MHD_stop_daemon(origin);
    /* fps 4: 10 frames, 5 temporal patches: more tokens */
    body = video_body(url, "\"mm_processor_kwargs\":{\"fps\":4}");
    st = ts_post(s.port, "/v1/chat/completions", body, &out);
    CHECKF(st == 200 && prompt_tokens(out) > pt, "fps 4: %ld %s", st, out);
    free(out);
    free(body);
    body = video_body(url, "\"mm_processor_kwargs\":{\"fps\":-1}");
    st = ts_post(s.port, "/v1/chat/completions", body, &out);
    ts_check_error(st, out, 400, "mm_processor_kwargs.fps", "a negative fps");
    free(out);
    free(body);
    /* a truncated clip, an audio-only WAV, text: 400 invalid_video naming the part */
    const char *bad[3];
    char *trunc = data_url_of("video/x-matroska", clip, 300), *txt = data_url_of("video/mp4", "hello world", 11);
    uint8_t wav[44 + 64] = {'R', 'I', 'F', 'F', 100, 0, 0, 0, 'W', 'A', 'V', 'E', 'f', 'm', 't', ' ', 16, 0, 0, 0, 1, 0,
                            1, 0, 0x40, 0x1f, 0, 0, 0x80, 0x3e, 0, 0, 2, 0, 16, 0, 'd', 'a', 't', 'a', 64, 0, 0, 0};
    char *aud = data_url_of("audio/wav", wav, sizeof wav);
    bad[0] = trunc, bad[1] = aud, bad[2] = txt;
    for (int i = 0; i < 3; i++) {
        body = video_body(bad[i], NULL);
        st = ts_post(s.port, "/v1/chat/completions", body, &out);
        ts_check_error(st, out, 400, "messages[0].content[0].video_url", "a bad video");
        free(out);
        free(body);
    }
    body = video_body("file:///etc/passwd", NULL);
    st = ts_post(s.port, "/v1/chat/completions", body, &out);
    ts_check_error(st, out, 400, "messages[0].content[0].video_url", "a file outside the allowed folder");
    free(out);
    free(body);
    ts_check_alive(s.port, "bad videos");
    /* the official client */
    char why[160];
    if (ts_node_ready("openai", why, sizeof why) == 0) {
        int rc = 0;
        char *buf = ts_node_run("openai_video.mjs", s.port, 300, &rc);
        CHECKF(rc == 0, "openai client with a video:\n%s", buf ? buf : "");
        CHECK_CONTAINS(buf, "PASS");
        free(buf);
    } else {
        CHECKF(0, "%s", why);
    }
    CHECK_EQ_INT(ts_server_stop(&s), 0);
    free(trunc);
    free(aud);
    free(txt);
    free(url);
    free(clip);
}
