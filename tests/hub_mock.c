/* hub_mock.c: the mock Hugging Face Hub of hub_mock.h (no tests here). */
#include "hub_mock.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mfile {
    const char *name;
    unsigned char *data;
    size_t len;
    int lfs;
    char sha256[65], git_sha1[41], pointer_sha1[41];
} mfile;

enum { N_FILES = 6 };
static mfile g_files[N_FILES];
static hub_mock_stats g_stats;
static char g_base[64];
static int g_port;
static struct MHD_Daemon *g_daemon;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void digest(const EVP_MD *md, const void *hdr, size_t hdr_len, const void *data, size_t len, char *hex) {
    unsigned char out[64];
    unsigned n = 0;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_DigestInit_ex(c, md, NULL);
    if (hdr_len) EVP_DigestUpdate(c, hdr, hdr_len);
    EVP_DigestUpdate(c, data, len);
    EVP_DigestFinal_ex(c, out, &n);
    EVP_MD_CTX_free(c);
    for (unsigned i = 0; i < n; i++) sprintf(hex + 2 * i, "%02x", out[i]);
}

/* git's blob id: sha1("blob <len>\0" + content), what the Hub sends as ETag. */
static void git_sha1(const void *data, size_t len, char *hex) {
    char hdr[64];
    int n = snprintf(hdr, sizeof hdr, "blob %zu", len);
    digest(EVP_sha1(), hdr, (size_t)n + 1, data, len, hex);
}

static void add_file(int i, const char *name, const char *text, size_t len, int lfs) {
    mfile *f = &g_files[i];
    f->name = name;
    f->len = len ? len : strlen(text);
    f->data = malloc(f->len + 1);
    if (text) memcpy(f->data, text, f->len);
    f->lfs = lfs;
}

static void make_files(void) {
    add_file(0, "config.json",
             "{\"architectures\": [\"Qwen3VLForConditionalGeneration\"], \"model_type\": \"qwen3_vl\", "
             "\"text_config\": {\"hidden_size\": 64}}\n", 0, 0);
    add_file(1, "generation_config.json", "{\"do_sample\": true, \"temperature\": 0.7}\n", 0, 0);
    add_file(2, "tokenizer.json", "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\"}}\n", 0, 0);
    add_file(3, "README.md", "# tiny\n", 0, 0);
    add_file(4, "onnx/model.onnx", "not wanted", 0, 1);
    /* A valid safetensors file: one F32 tensor of 150,000 values. */
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[150000],\"data_offsets\":[0,600000]}}";
    size_t hl = strlen(hdr), len = 8 + hl + 600000;
    add_file(5, "model.safetensors", NULL, len, 1);
    unsigned char *d = g_files[5].data;
    for (int b = 0; b < 8; b++) d[b] = (unsigned char)((uint64_t)hl >> (8 * b));
    memcpy(d + 8, hdr, hl);
    uint32_t x = 12345;
    for (size_t i = 8 + hl; i < len; i++) {
        x = x * 1664525u + 1013904223u;
        d[i] = (unsigned char)(x >> 24);
    }
    for (int i = 0; i < N_FILES; i++) {
        mfile *f = &g_files[i];
        digest(EVP_sha256(), NULL, 0, f->data, f->len, f->sha256);
        git_sha1(f->data, f->len, f->git_sha1);
        char ptr[256];
        int n = snprintf(ptr, sizeof ptr, "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %zu\n",
                         f->sha256, f->len);
        git_sha1(ptr, (size_t)n, f->pointer_sha1);
    }
}

static const mfile *find_file(const char *name) {
    for (int i = 0; i < N_FILES; i++)
        if (!strcmp(g_files[i].name, name)) return &g_files[i];
    return NULL;
}

static const mfile *find_sha(const char *sha) {
    for (int i = 0; i < N_FILES; i++)
        if (!strcmp(g_files[i].sha256, sha)) return &g_files[i];
    return NULL;
}

static enum MHD_Result send_buf(struct MHD_Connection *c, unsigned status, const void *data, size_t len,
                                const char **headers) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    for (int i = 0; headers && headers[i]; i += 2) MHD_add_response_header(r, headers[i], headers[i + 1]);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *code, const char *msg) {
    char body[600];
    snprintf(body, sizeof body, "{\"error\": \"%s\"}", msg);
    const char *h[] = {"X-Error-Code", code, "X-Error-Message", msg, "Content-Type", "application/json", NULL};
    return send_buf(c, status, body, strlen(body), h);
}

static const char *repo_commit(const char *repo) {
    if (!strcmp(repo, "tiny/qwen3-vl")) return HUB_MOCK_COMMIT;
    if (!strcmp(repo, "tiny/gated")) return HUB_MOCK_COMMIT_GATED;
    if (!strcmp(repo, "tiny/huge")) return "1111111111111111111111111111111111111111";
    if (!strcmp(repo, "tiny/gguf")) return "2222222222222222222222222222222222222222";
    return NULL;
}

/* A renamed repo: the Hub answers 307 with a relative Location to the new name. */
static enum MHD_Result renamed(struct MHD_Connection *c, const char *fmt, const char *a, const char *b) {
    char loc[1400];
    snprintf(loc, sizeof loc, fmt, a, b);
    const char *h[] = {"Location", loc, NULL};
    return send_buf(c, 307, "", 0, h);
}

static enum MHD_Result api(struct MHD_Connection *c, const char *repo, const char *rev) {
    if (!strcmp(repo, "tiny/old-name")) return renamed(c, "/api/models/tiny/qwen3-vl/revision/%s%s", rev, "");
    const char *commit = repo_commit(repo);
    if (!commit) return send_error(c, 401, "RepoNotFound", "Repository not found");
    if (strcmp(rev, "main") && strcmp(rev, commit))
        return send_error(c, 404, "RevisionNotFound", "Invalid rev id");
    json_t *sib = json_array();
    int huge = !strcmp(repo, "tiny/huge"), gguf = !strcmp(repo, "tiny/gguf");
    for (int i = 0; i < N_FILES; i++) {
        const mfile *f = &g_files[i];
        if (gguf && (!strcmp(f->name, "model.safetensors"))) continue;
        json_int_t size = huge && f->lfs ? (json_int_t)1000000000000000LL : (json_int_t)f->len;
        json_t *s = json_pack("{s:s, s:I, s:s}", "rfilename", f->name, "size", size, "blobId",
                              f->lfs ? f->pointer_sha1 : f->git_sha1);
        if (f->lfs)
            json_object_set_new(s, "lfs", json_pack("{s:s, s:I, s:i}", "sha256", f->sha256, "size", size,
                                                    "pointerSize", 134));
        json_array_append_new(sib, s);
    }
    if (gguf) json_array_append_new(sib, json_pack("{s:s, s:i}", "rfilename", "model-q8_0.gguf", "size", 1000));
    json_t *root = json_pack("{s:s, s:s, s:s, s:o, s:o}", "id", repo, "modelId", repo, "sha", commit, "gated",
                             !strcmp(repo, "tiny/gated") ? json_string("manual") : json_false(), "siblings", sib);
    char *body = json_dumps(root, 0);
    const char *h[] = {"Content-Type", "application/json", NULL};
    enum MHD_Result r = send_buf(c, 200, body, strlen(body), h);
    free(body);
    json_decref(root);
    return r;
}

/* tiny/plan: the files of tests/fixtures/tiny/tiny-gqa/model read from disk (the tests run in the
 * repository's root), served directly with Range support ("bytes=a-b" and "bytes=a-"), for
 * `iris plan` from the Hub; the bytes sent are counted. */
static enum MHD_Result plan_file(struct MHD_Connection *c, const char *name) {
    char path[1200];
    snprintf(path, sizeof path, "tests/fixtures/tiny/tiny-gqa/model/%s", name);
    FILE *f = strstr(name, "..") ? NULL : fopen(path, "rb");
    if (!f) return send_error(c, 404, "EntryNotFound", "Entry not found");
    fseek(f, 0, SEEK_END);
    size_t len = (size_t)ftell(f), a = 0, b = len ? len - 1 : 0;
    const char *range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range");
    if (range && !strncmp(range, "bytes=", 6)) {
        char *end;
        a = strtoull(range + 6, &end, 10);
        if (*end == '-' && end[1]) b = strtoull(end + 1, NULL, 10);
        if (b >= len) b = len - 1;
    }
    size_t n = a <= b && a < len ? b - a + 1 : 0;
    unsigned char *body = malloc(n ? n : 1);
    fseek(f, (long)a, SEEK_SET);
    n = fread(body, 1, n, f);
    fclose(f);
    atomic_fetch_add(&g_stats.plan_bytes, (long)n);
    char cr[96];
    snprintf(cr, sizeof cr, "bytes %zu-%zu/%zu", a, a + n - 1, len);
    const char *h[] = {"Content-Range", cr, "Accept-Ranges", "bytes", NULL};
    enum MHD_Result r = send_buf(c, range ? 206 : 200, body, n, range ? h : h + 2);
    free(body);
    return r;
}

static enum MHD_Result resolve(struct MHD_Connection *c, const char *repo, const char *rev, const char *name) {
    if (!strcmp(repo, "tiny/plan")) return plan_file(c, name);
    if (!strcmp(repo, "tiny/old-name")) return renamed(c, "/tiny/qwen3-vl/resolve/%s/%s", rev, name);
    const char *commit = repo_commit(repo);
    if (!commit) return send_error(c, 401, "RepoNotFound", "Repository not found");
    if (!strcmp(repo, "tiny/gated")) {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        char msg[256];
        snprintf(msg, sizeof msg, "Access to model %s is restricted and you are not in the authorized list.", repo);
        return send_error(c, auth ? 403 : 401, "GatedRepo", msg);
    }
    if (strcmp(rev, "main") && strcmp(rev, commit)) return send_error(c, 404, "RevisionNotFound", "Invalid rev id");
    const mfile *f = find_file(name);
    if (!f) return send_error(c, 404, "EntryNotFound", "Entry not found");
    char etag[80], size[32], loc[256];
    snprintf(size, sizeof size, "%zu", f->len);
    if (!f->lfs) {
        snprintf(etag, sizeof etag, "\"%s\"", f->git_sha1);
        const char *h[] = {"ETag", etag, "X-Repo-Commit", commit, "Accept-Ranges", "bytes", NULL};
        return send_buf(c, 200, f->data, f->len, h);
    }
    char linked[80];
    snprintf(etag, sizeof etag, "\"%s\"", f->pointer_sha1);
    snprintf(linked, sizeof linked, "\"%s\"", f->sha256);
    /* "localhost": the CDN is another host name, as cdn-lfs.huggingface.co is. */
    snprintf(loc, sizeof loc, "http://localhost:%d/cdn/%s?X-Amz-Signature=abc", g_port, f->sha256);
    const char *h[] = {"ETag", etag, "X-Linked-Etag", linked, "X-Linked-Size", size, "X-Repo-Commit", commit,
                       "Location", loc, NULL};
    return send_buf(c, 302, "", 0, h);
}

typedef struct cutter {
    unsigned char *data; /* the body, from the range start; owned */
    size_t stop;         /* bytes of the body sent before the drop */
} cutter;

static void cutter_free(void *cls) {
    cutter *ct = cls;
    free(ct->data);
    free(ct);
}

static ssize_t cut_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    cutter *ct = cls;
    if (pos >= ct->stop) return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t n = ct->stop - (size_t)pos;
    if (n > max) n = max;
    if (n > 16384) n = 16384;
    memcpy(buf, ct->data + pos, n);
    return (ssize_t)n;
}

static enum MHD_Result cdn(struct MHD_Connection *c, const char *sha) {
    const mfile *f = find_sha(sha);
    if (!f) return send_error(c, 404, "NoSuchKey", "no such object");
    atomic_fetch_add(&g_stats.n_get_cdn, 1);
    if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization")) atomic_store(&g_stats.cdn_saw_auth, 1);
    const char *range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range");
    size_t start = 0;
    if (range && !strncmp(range, "bytes=", 6)) start = strtoull(range + 6, NULL, 10);
    atomic_store(&g_stats.last_range_start, range ? (long)start : -1L);
    if (start >= f->len) {
        char cr[64];
        snprintf(cr, sizeof cr, "bytes */%zu", f->len);
        const char *h[] = {"Content-Range", cr, NULL};
        return send_buf(c, 416, "", 0, h);
    }
    unsigned char *body = malloc(f->len - start);
    memcpy(body, f->data + start, f->len - start);
    if (atomic_load(&g_stats.corrupt)) body[(f->len - start) / 2] ^= 0x5a;
    char cr[96], etag[80];
    snprintf(cr, sizeof cr, "bytes %zu-%zu/%zu", start, f->len - 1, f->len);
    snprintf(etag, sizeof etag, "\"%s\"", f->sha256);
    struct MHD_Response *r;
    if (atomic_exchange(&g_stats.cut_once, 0)) {
        cutter *ct = malloc(sizeof *ct);
        ct->data = body;
        ct->stop = (f->len - start) / 2;
        atomic_store(&g_stats.cut_at, (long)(start + ct->stop));
        r = MHD_create_response_from_callback(f->len - start, 16384, cut_reader, ct, cutter_free);
    } else {
        r = MHD_create_response_from_buffer(f->len - start, body, MHD_RESPMEM_MUST_FREE);
    }
    MHD_add_response_header(r, "ETag", etag);
    MHD_add_response_header(r, "Accept-Ranges", "bytes");
    if (range) MHD_add_response_header(r, "Content-Range", cr);
    enum MHD_Result ret = MHD_queue_response(c, range ? 206 : 200, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **con_cls) {
    (void)cls, (void)version, (void)upload_data, (void)upload_data_size, (void)con_cls;
    int head = !strcmp(method, "HEAD");
    char org[128], name[128], rest[1024];
    if (!strncmp(url, "/api/models/", 12)) {
        atomic_fetch_add(&g_stats.n_api, 1);
        if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization")) atomic_store(&g_stats.api_saw_auth, 1);
        char rev[256];
        if (sscanf(url + 12, "%127[^/]/%127[^/]/revision/%255s", org, name, rev) != 3)
            return send_error(c, 404, "NotFound", "bad api path");
        char repo[260];
        snprintf(repo, sizeof repo, "%s/%s", org, name);
        return api(c, repo, rev);
    }
    if (!strncmp(url, "/cdn/", 5)) return cdn(c, url + 5);
    char rev[256];
    if (sscanf(url, "/%127[^/]/%127[^/]/resolve/%255[^/]/%1023s", org, name, rev, rest) == 4) {
        atomic_fetch_add(head ? &g_stats.n_head : &g_stats.n_get_resolve, 1);
        char repo[260];
        snprintf(repo, sizeof repo, "%s/%s", org, name);
        return resolve(c, repo, rev, rest);
    }
    return send_error(c, 404, "NotFound", "no such path");
}

static void start_once(void) {
    make_files();
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    g_daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL,
                                handler, NULL, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_END);
    if (!g_daemon) return;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(g_daemon, MHD_DAEMON_INFO_BIND_PORT);
    g_port = info ? info->port : 0;
    snprintf(g_base, sizeof g_base, "http://127.0.0.1:%d", g_port);
}

const char *hub_mock_start(void) {
    pthread_once(&g_once, start_once);
    return g_daemon && g_port ? g_base : NULL;
}

hub_mock_stats *hub_mock_stats_get(void) { return &g_stats; }

void hub_mock_reset(void) {
    atomic_store(&g_stats.n_api, 0);
    atomic_store(&g_stats.n_head, 0);
    atomic_store(&g_stats.n_get_resolve, 0);
    atomic_store(&g_stats.n_get_cdn, 0);
    atomic_store(&g_stats.last_range_start, -2L);
    atomic_store(&g_stats.cut_at, -1L);
    atomic_store(&g_stats.cdn_saw_auth, 0);
    atomic_store(&g_stats.api_saw_auth, 0);
    atomic_store(&g_stats.plan_bytes, 0L);
    atomic_store(&g_stats.cut_once, 0);
    atomic_store(&g_stats.corrupt, 0);
}

const unsigned char *hub_mock_file(const char *name, size_t *len, const char **sha256, const char **git) {
    hub_mock_start();
    const mfile *f = find_file(name);
    if (!f) return NULL;
    *len = f->len;
    *sha256 = f->sha256;
    *git = f->git_sha1;
    return f->data;
}
