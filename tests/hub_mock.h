/* hub_mock.h: a local stand-in for the Hugging Face Hub, for test_hub.c.
 *
 * A libmicrohttpd server on 127.0.0.1 (its own threads) answering the
 * endpoints `iris pull` uses, with the headers the real Hub sends:
 *   GET  /api/models/{org}/{name}/revision/{rev}   {"sha", "siblings": [{rfilename, size, blobId, lfs}]}
 *   HEAD|GET /{org}/{name}/resolve/{rev}/{file}    regular files: 200 + ETag "<git blob sha1>";
 *        LFS files: 302 to http://localhost:PORT/cdn/<sha256> with X-Linked-Etag "<sha256>",
 *        X-Linked-Size and X-Repo-Commit
 *   GET  /cdn/{sha256}                             the bytes, with Range support (206)
 * Errors as the Hub gives them: 401 + X-Error-Code RepoNotFound for unknown
 * repos, 404 RevisionNotFound, 401/403 GatedRepo on gated repos' files.
 *
 * Repos: tiny/qwen3-vl (config.json, generation_config.json, tokenizer.json,
 * model.safetensors of ~600 kB in LFS, plus README.md and onnx/model.onnx
 * that iris skips); tiny/gated (the same, gated); tiny/huge (the listing
 * claims a 1 PB safetensors file); tiny/gguf (no safetensors); tiny/old-name
 * (renamed: 307 with a relative Location to tiny/qwen3-vl); tiny/plan (the
 * tiny fixture model's config.json and model.safetensors from
 * tests/fixtures/tiny/tiny-gqa/model, served with byte ranges, for iris plan). */
#ifndef IRIS_HUB_MOCK_H
#define IRIS_HUB_MOCK_H

#include <stdatomic.h>
#include <stddef.h>

#define HUB_MOCK_COMMIT "4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f70"
#define HUB_MOCK_COMMIT_GATED "aaaabbbbccccddddeeeeffff0000111122223333"

typedef struct hub_mock_stats {
    atomic_int n_api, n_head, n_get_resolve, n_get_cdn;
    atomic_long last_range_start; /* -1: the last CDN GET had no Range */
    atomic_long cut_at;           /* where the cut transfer stopped (bytes of the file) */
    atomic_int cdn_saw_auth;      /* an Authorization header reached the CDN */
    atomic_int api_saw_auth;
    atomic_long plan_bytes;       /* bytes of tiny/plan's files sent (iris plan from the Hub) */
    /* Behaviour switches (set by the test before a pull). */
    atomic_int cut_once;          /* the next CDN GET sends half the bytes, then drops the connection */
    atomic_int corrupt;           /* the CDN serves one wrong byte */
} hub_mock_stats;

/* Starts the server (once per process); returns its base URL, e.g.
 * "http://127.0.0.1:41234", or NULL when it cannot start. */
const char *hub_mock_start(void);
hub_mock_stats *hub_mock_stats_get(void);
void hub_mock_reset(void);
/* The content of a file of tiny/qwen3-vl, and its SHA-256 / git blob id. */
const unsigned char *hub_mock_file(const char *name, size_t *len, const char **sha256, const char **git_sha1);

#endif
