/* hub_internal.h: what hub.c (the pull: listing, planning, workers) and
 * hub_fetch.c (one file: HEAD, resumable GET, SHA-256, link) share.  Not a
 * public interface. */
#ifndef IRIS_HUB_INTERNAL_H
#define IRIS_HUB_INTERNAL_H

#include <curl/curl.h>
#include <stdatomic.h>
#include <stdint.h>

#include "hub.h"

/* One file of the revision that iris wants. */
typedef struct hub_file {
    char name[512];     /* rfilename, relative to the repo root */
    uint64_t size;      /* from the listing; 0 when unknown */
    char sha256[65];    /* LFS files: the content's SHA-256 from the listing; "" otherwise */
    int cached;         /* already in snapshots/<commit>/ with its blob */
    uint64_t have;      /* bytes already in blobs/<etag>.incomplete (when the blob is known) */
} hub_file;

/* The state of one pull, shared by the worker threads. */
typedef struct hub_pull {
    const char *endpoint; /* no trailing slash */
    const char *repo;     /* Org/Name */
    const char *commit;
    char auth[1100];      /* "Authorization: Bearer ..." or "" */
    char repo_dir[4608];  /* <cache>/models--Org--Name */
    int retries;

    hub_file *files;
    int n_files;
    atomic_int next;      /* the next file a worker takes */
    atomic_int cancel;    /* set on the first failure: other transfers stop (and stay resumable) */
    atomic_int n_done, n_downloaded;
    atomic_uint_least64_t bytes_now;   /* bytes received in this pull */
    atomic_uint_least64_t bytes_done;  /* bytes present (cached, resumed or received) */
    uint64_t bytes_total;

    /* The first error, under `mu`. */
    void *mu;
    int failed;
    iris_err err;
} hub_pull;

/* Fetch files[i] into blobs/ and link it from the snapshot.  Thread-safe
 * across different files. */
int hub_fetch_file(hub_pull *p, hub_file *f, iris_err *err);

/* Turn an HTTP failure of the Hub into a message saying what to do.
 * `what` names the request ("repository Org/Name", "file config.json"). */
int hub_http_error(const hub_pull *p, long status, const char *x_error_code, const char *x_error_message,
                   const char *what, iris_err *err);
/* Turn a libcurl failure into a message (network down, timeouts). */
int hub_curl_error(const char *endpoint, int curl_code, const char *detail, const char *what, iris_err *err);

/* A curl handle for a request of the pull to `url`: the user agent, `Accept-Encoding: identity`,
 * the token when with_auth, http(s) only (redirects too), a 15 s connect timeout and, when
 * timeout_s > 0, that whole-transfer limit.  *hl holds the headers: curl_slist_free_all it after
 * curl_easy_cleanup. */
CURL *hub_curl_new(const hub_pull *p, const char *url, int with_auth, long timeout_s, struct curl_slist **hl);
/* A URL-encoded copy of s ('/' kept when keep_slash); NULL on overflow. */
char *hub_url_quote(const char *s, int keep_slash, char *out, size_t out_size);
/* Human-readable bytes: "1.23 GB". */
const char *hub_fmt_bytes(uint64_t n, char buf[32]);
/* HF_TOKEN, else the token file (huggingface_hub's order); "" when none. */
void hub_find_token(char *out, size_t out_size);
/* mkdir -p; 0 or -errno. */
int hub_mkdirs(const char *path);

#endif
