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

#endif
