/* resolve.h: turning what the user typed into a model directory.
 *
 * MODEL is a directory in Hugging Face layout, or `Org/Name[@revision]` looked
 * up in the HF hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else
 * ~/.cache/huggingface/hub; models--Org--Name/refs/<revision or main> holds a
 * commit hash, and snapshots/<commit>/ is the directory (a 40-hex revision is
 * used as the commit directly). */
#ifndef IRIS_RESOLVE_H
#define IRIS_RESOLVE_H

#include <stddef.h>

#include "iris.h"

/* The hub cache directory in use (as above). */
int iris_hub_cache_dir(char *out, size_t out_size, iris_err *err);
/* Resolve MODEL to a directory path written to `out`. */
int iris_model_resolve(const char *model, char *out, size_t out_size, iris_err *err);

/* Helpers shared with hub.c (iris pull) and `iris ls`. */
/* Split `Org/Name[@revision]` (revision defaults to "main"); IRIS_EINVAL when
 * it is not a repo id. */
int iris_hub_repo_parse(const char *model, char *repo, size_t repo_size, char *rev, size_t rev_size,
                        iris_err *err);
/* <cache>/models--Org--Name for repo "Org/Name". */
int iris_hub_repo_dir(const char *repo, char *out, size_t out_size, iris_err *err);
/* The commit in <repo_dir>/refs/<rev>; IRIS_ENOTFOUND when there is no such ref. */
int iris_hub_read_ref(const char *repo_dir, const char *rev, char commit[41], iris_err *err);
/* 1 when s is a full 40-character lowercase hex commit hash. */
int iris_hub_is_commit(const char *s);

#endif
