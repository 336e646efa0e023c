/* kv_pool.h: the KV block pool: which of the cache's 16-token blocks are
 * free, held by sequences, or cached for reuse by a later prompt.
 *
 * Every block is in exactly one state:
 *   free    ref 0, no key, on the free list (reused last freed first);
 *   cached  ref 0, keyed, on the LRU list (reusable by a prompt with the same
 *           prefix; evicted, oldest first, when the free list is empty);
 *   used    ref > 0 (one reference per sequence whose block table names it),
 *           keyed or not, on no list.
 * A key (iris_kv_key) names the content of a full block: SHA-256 over the
 * previous block's key, the block's 16 token ids and the content hash of
 * every image whose tokens fall in the block (kv_pool_key), so equal keys
 * mean equal K/V.  At most one block holds a given key (the hash table maps
 * key -> block).
 *
 * Owns: the block metadata only; the K/V memory is the model's
 * iris_kv_cache, indexed by the same block ids.  Not thread-safe: the engine
 * thread alone uses a pool.  iris_kv_pool_check verifies every invariant
 * above (the tests run it after every scheduler step).
 */
#ifndef IRIS_KV_POOL_H
#define IRIS_KV_POOL_H

#include <stdint.h>

#include "iris.h"

#define IRIS_KV_KEY_BYTES 32

typedef struct iris_kv_key {
    uint8_t b[IRIS_KV_KEY_BYTES];
} iris_kv_key;

typedef struct iris_kv_pool iris_kv_pool;

/* n_blocks blocks, all free.  prefix_caching 0: blocks are never keyed (a
 * released block goes straight back to the free list).  Free with
 * iris_kv_pool_free. */
int iris_kv_pool_init(iris_kv_pool **out, int n_blocks, int prefix_caching, iris_err *err);
void iris_kv_pool_free(iris_kv_pool *p);

int iris_kv_pool_n_blocks(const iris_kv_pool *p);
/* Blocks that alloc can hand out now: free + cached. */
int iris_kv_pool_n_available(const iris_kv_pool *p);
int iris_kv_pool_n_cached(const iris_kv_pool *p);
int iris_kv_pool_n_used(const iris_kv_pool *p);
int iris_kv_pool_prefix_caching(const iris_kv_pool *p);

/* A fresh block (ref 1, no key): from the free list (the block freed last
 * first, then the never-used ones in id order), else the least recently
 * released cached block (its key forgotten).  -1 when none is available. */
int iris_kv_pool_alloc(iris_kv_pool *p);
/* The block holding `key` (used or cached), or -1.  Does not take a reference. */
int iris_kv_pool_lookup(const iris_kv_pool *p, const iris_kv_key *key);
/* One more reference (a cached block becomes used). */
void iris_kv_pool_ref(iris_kv_pool *p, int block);
/* One reference less; at 0 a keyed block becomes cached (most recently
 * used end of the LRU), an unkeyed one free. */
void iris_kv_pool_release(iris_kv_pool *p, int block);
/* Give a used, full block its content key.  When another block already
 * holds the key this one stays unkeyed (it is freed, not cached, at its last
 * release).  Returns 1 when keyed, 0 when not (duplicate or caching off). */
int iris_kv_pool_publish(iris_kv_pool *p, int block, const iris_kv_key *key);
int iris_kv_pool_ref_count(const iris_kv_pool *p, int block);
int iris_kv_pool_is_keyed(const iris_kv_pool *p, int block);

/* The key of a full block: SHA-256(prev key or 32 zero bytes for the first
 * block || the IRIS_KV_BLOCK token ids as little-endian int32 || the image
 * hashes given, in order). */
void iris_kv_pool_key(const iris_kv_key *prev, const int32_t *tokens, const iris_kv_key *images, int n_images,
                      iris_kv_key *out);

/* Checks every invariant; `refs` (may be NULL) is the expected reference
 * count of each block, counted from the sequences' block tables by the
 * caller.  IRIS_EFORMAT with the first violation described. */
int iris_kv_pool_check(const iris_kv_pool *p, const int *refs, iris_err *err);

#endif
