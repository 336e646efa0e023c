/* hub.h: downloading models from the Hugging Face Hub into the shared cache
 * (`iris pull`), and making sure a model is present before a command runs.
 *
 * The cache layout is huggingface_hub's, so transformers, vLLM and iris share
 * one copy (resolve.h finds it):
 *     models--Org--Name/blobs/<etag>            file contents (etag = SHA-256 for LFS files)
 *     models--Org--Name/snapshots/<commit>/F    relative symlink to ../../blobs/<etag>
 *     models--Org--Name/refs/<revision>         the commit the revision resolved to
 * Environment, as huggingface_hub reads it: HF_ENDPOINT (default
 * https://huggingface.co), HF_TOKEN (else the file $HF_TOKEN_PATH, else
 * $HF_HOME/token, else ~/.cache/huggingface/token), HF_HUB_OFFLINE=1 (no
 * network at all). */
#ifndef IRIS_HUB_H
#define IRIS_HUB_H

#include <stddef.h>
#include <stdint.h>

#include "iris.h"

typedef struct iris_hub_opts {
    const char *endpoint; /* NULL: $HF_ENDPOINT, else https://huggingface.co */
    const char *token;    /* NULL: $HF_TOKEN or the token file; "" for none */
    int offline;          /* -1: from $HF_HUB_OFFLINE; 0 online; 1 cache only */
    int n_parallel;       /* files downloaded at once; 0: 8 */
    int retries;          /* attempts after a dropped transfer (resumed); -1: 3 */
    int progress;         /* -1: a bar on a terminal stderr, plain lines otherwise; 0: silent; 1: always */
} iris_hub_opts;

/* Defaults for every field (as the comments above). */
void iris_hub_opts_default(iris_hub_opts *opts);
/* The `progress` that iris_hub_opts_default gives from now on (the command
 * line's --quiet: 0); also what iris_model_ensure uses. */
void iris_hub_set_default_progress(int progress);

typedef struct iris_hub_result {
    char commit[41];
    char dir[4096];            /* snapshots/<commit> */
    int n_files;               /* files iris needs in the revision */
    int n_downloaded;          /* of those, fetched now (0 when all were cached) */
    uint64_t bytes_downloaded; /* bytes received now, resumed parts excluded */
    uint64_t bytes_total;      /* size of the n_files files */
} iris_hub_result;

/* Download `Org/Name[@revision]` (what iris needs of it) into the hub cache.
 * Files already in the snapshot are not fetched again; interrupted downloads
 * (blobs/<etag>.incomplete) resume with a Range request; LFS files are
 * checked against their SHA-256 (a mismatching file is removed).  `opts` and
 * `res` may be NULL. */
int iris_hub_pull(const char *model, const iris_hub_opts *opts, iris_hub_result *res, iris_err *err);

/* Resolve MODEL (resolve.h); when it is a repo id missing from the cache and
 * `allow_download` is set and the Hub is not offline, say so and pull it
 * first (with progress on stderr).  Otherwise the error names the command to
 * run. */
int iris_model_ensure(const char *model, char *dir_out, size_t dir_size, int allow_download, iris_err *err);

/* 1 when iris downloads this repo file (configs, tokenizer, chat template,
 * safetensors and their index). */
int iris_hub_wanted_file(const char *name);

/* One model found in the cache by iris_hub_list. */
typedef struct iris_hub_model {
    char repo[256];          /* Org/Name */
    char refs[256];          /* revisions with a ref, comma-separated ("main") */
    char dir[4096];          /* snapshot of main (else the newest snapshot), "" if none */
    uint64_t size_bytes;     /* sum of blobs/ (every revision) */
    int n_snapshots;
    char model_type[64];     /* from config.json, "" when unreadable */
    int supported;           /* model_type qwen3_vl */
    int incomplete;          /* has blobs/ *.incomplete (an interrupted pull) */
} iris_hub_model;

/* The models in the hub cache, sorted by repo id; *out is malloc'd (caller
 * frees), *n_out its count.  A missing cache directory is 0 models, not an
 * error. */
int iris_hub_list(iris_hub_model **out, int *n_out, iris_err *err);

/* `iris plan` for a repo id not in the cache: into the existing directory
 * `dir`, config.json, the shard index when there is one, and every
 * safetensors file as a sparse copy holding its header alone (hub_plan.c),
 * read with HTTP range requests; *bytes_read: what was downloaded.  Nothing
 * goes to the cache; HF_HUB_OFFLINE is the caller's to check. */
int iris_hub_fetch_headers(const char *model, const char *dir, uint64_t *bytes_read, iris_err *err);

/* Write a safetensors file of `data_bytes` of data whose data is a hole: the
 * 8-byte length, the header `hdr`, then a sparse extent (no disk used). */
int iris_hub_write_sparse_st(const char *path, const char *hdr, size_t hlen, uint64_t data_bytes, iris_err *err);

#endif
