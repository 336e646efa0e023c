/* iris_client.h: the little that the example clients of `iris serve` share:
 * reading an image into a data: URL, POSTing a chat completion with libcurl
 * and printing the answer.  Header-only so each example stays one file to
 * copy.  Environment: IRIS_URL (default http://127.0.0.1:8000), IRIS_MODEL
 * (default: the first model /v1/models lists), IRIS_API_KEY or
 * OPENAI_API_KEY (sent as a bearer token when set). */
#ifndef IRIS_EXAMPLE_CLIENT_H
#define IRIS_EXAMPLE_CLIENT_H

#include <curl/curl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ic_buf {
    char *p;
    size_t n;
} ic_buf;

static size_t ic_on_data(char *ptr, size_t size, size_t nmemb, void *ud) {
    ic_buf *b = ud;
    size_t k = size * nmemb;
    char *q = realloc(b->p, b->n + k + 1);
    if (!q) return 0;
    b->p = q;
    memcpy(b->p + b->n, ptr, k);
    b->n += k;
    b->p[b->n] = 0;
    return k;
}

static const char *ic_base_url(void) {
    const char *u = getenv("IRIS_URL");
    return u && *u ? u : "http://127.0.0.1:8000";
}

/* GET or POST (body != NULL) path; returns the HTTP status (0: no
 * connection) and the response body in *out (caller frees). */
static long ic_request(const char *path, const char *body, char **out) {
    const char *key = getenv("IRIS_API_KEY") ? getenv("IRIS_API_KEY") : getenv("OPENAI_API_KEY");
    char url[1024], auth[1024];
    snprintf(url, sizeof url, "%s%s", ic_base_url(), path);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (key && *key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
        h = curl_slist_append(h, auth);
    }
    ic_buf b = {0};
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, ic_on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    long status = 0;
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    else fprintf(stderr, "cannot reach %s: %s (is `iris serve` running?)\n", url, curl_easy_strerror(rc));
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    *out = b.p;
    return status;
}

/* "data:image/...;base64,..." for a file, malloc'd; NULL with a message. */
static char *ic_data_url(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *raw = malloc((size_t)n + 1);
    if (!raw || fread(raw, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "%s: cannot read\n", path);
        fclose(f);
        free(raw);
        return NULL;
    }
    fclose(f);
    const char *mime = "image/jpeg";
    if (n > 4 && !memcmp(raw, "\x89PNG", 4)) mime = "image/png";
    else if (n > 12 && !memcmp(raw + 8, "WEBP", 4)) mime = "image/webp";
    size_t cap = 32 + strlen(mime) + ((size_t)n + 2) / 3 * 4 + 1;
    char *url = malloc(cap);
    int k = snprintf(url, cap, "data:%s;base64,", mime);
    EVP_EncodeBlock((unsigned char *)url + k, raw, (int)n);
    free(raw);
    return url;
}

/* The model to ask for: $IRIS_MODEL, else the server's first model. */
static char *ic_model(void) {
    if (getenv("IRIS_MODEL")) return strdup(getenv("IRIS_MODEL"));
    char *out = NULL;
    char *id = NULL;
    long st = ic_request("/v1/models", NULL, &out);
    if (st && st != 200) fprintf(stderr, "GET /v1/models: HTTP %ld: %s\n", st, out ? out : "");
    if (st == 200) {
        json_t *j = json_loads(out, 0, NULL);
        const char *s = json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
        if (s) id = strdup(s);
        json_decref(j);
    }
    free(out);
    return id;
}

/* One user turn: an image and a question; prints the answer (or the
 * server's error) and returns the process exit status. */
static int ic_ask_image(const char *image, const char *question, int max_tokens) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *url = ic_data_url(image);
    char *model = url ? ic_model() : NULL;
    if (!url || !model) {
        if (url) fprintf(stderr, "no model to ask at %s\n", ic_base_url());
        free(url);
        return 1;
    }
    json_t *req = json_pack("{s:s, s:[{s:s, s:[{s:s, s:{s:s}}, {s:s, s:s}]}], s:i}", "model", model, "messages",
                            "role", "user", "content", "type", "image_url", "image_url", "url", url, "type", "text",
                            "text", question, "max_tokens", max_tokens);
    char *body = json_dumps(req, JSON_COMPACT);
    char *out = NULL;
    long status = ic_request("/v1/chat/completions", body, &out);
    int rc = 1;
    json_t *j = out ? json_loads(out, 0, NULL) : NULL;
    const char *answer = json_string_value(
        json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "content"));
    if (status == 200 && answer) {
        printf("%s\n", answer);
        rc = 0;
    } else if (status) {
        const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        fprintf(stderr, "HTTP %ld: %s\n", status, msg ? msg : (out ? out : ""));
    }
    json_decref(j);
    json_decref(req);
    free(out);
    free(body);
    free(url);
    free(model);
    curl_global_cleanup();
    return rc;
}

#endif
