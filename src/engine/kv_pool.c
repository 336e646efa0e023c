/* kv_pool.c: the KV block pool (kv_pool.h): reference counts, a free list, an
 * LRU list of cached blocks and a key -> block hash table.
 *
 * Layout: parallel arrays indexed by block id.  The free list and the LRU
 * list share one set of prev/next links (a block is on at most one list;
 * `where` says which).  The hash table chains blocks through `chain`, the
 * bucket picked by the key's first 8 bytes (a SHA-256 is already uniform).
 * The free list is a stack in front of a queue: a released unkeyed block goes
 * to its head and alloc takes the head, so the block freed last (its memory
 * likely still in cache, its pages already mapped) is reused first, and the
 * never-used blocks, queued in id order at init, are touched only when no
 * freed one is left.  Cached blocks are reused only when the free list is
 * empty, as before: eviction takes the LRU head, the block released longest
 * ago.  Sequences release their blocks last to first, so the tail of a
 * cached prefix is evicted before its head and what stays cached is still a
 * usable prefix.
 */
#include "kv_pool.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "model/text.h"

enum { ON_NONE = 0, ON_FREE = 1, ON_LRU = 2 };

typedef struct list {
    int head, tail, n;
} list;

struct iris_kv_pool {
    int n_blocks, caching;
    int *ref;
    uint8_t *keyed, *where;
    iris_kv_key *keys;
    int *prev, *next;       /* list links */
    list free_list, lru;
    int n_used;
    int n_buckets;
    int *bucket, *chain;    /* hash table: bucket -> first block, block -> next block */
};

static void list_push_tail(iris_kv_pool *p, list *l, int b, int where) {
    p->prev[b] = l->tail;
    p->next[b] = -1;
    if (l->tail >= 0) p->next[l->tail] = b;
    else l->head = b;
    l->tail = b;
    l->n++;
    p->where[b] = (uint8_t)where;
}

static void list_push_head(iris_kv_pool *p, list *l, int b, int where) {
    p->prev[b] = -1;
    p->next[b] = l->head;
    if (l->head >= 0) p->prev[l->head] = b;
    else l->tail = b;
    l->head = b;
    l->n++;
    p->where[b] = (uint8_t)where;
}

static void list_remove(iris_kv_pool *p, list *l, int b) {
    if (p->prev[b] >= 0) p->next[p->prev[b]] = p->next[b];
    else l->head = p->next[b];
    if (p->next[b] >= 0) p->prev[p->next[b]] = p->prev[b];
    else l->tail = p->prev[b];
    p->prev[b] = p->next[b] = -1;
    l->n--;
    p->where[b] = ON_NONE;
}

static int bucket_of(const iris_kv_pool *p, const iris_kv_key *k) {
    uint64_t h;
    memcpy(&h, k->b, sizeof h);
    return (int)(h % (uint64_t)p->n_buckets);
}

static void hash_remove(iris_kv_pool *p, int b) {
    int *at = &p->bucket[bucket_of(p, &p->keys[b])];
    while (*at >= 0 && *at != b) at = &p->chain[*at];
    if (*at == b) *at = p->chain[b];
    p->chain[b] = -1;
    p->keyed[b] = 0;
}

int iris_kv_pool_init(iris_kv_pool **out, int n_blocks, int prefix_caching, iris_err *err) {
    *out = NULL;
    if (n_blocks <= 0) return iris_err_set(err, IRIS_EINVAL, "KV pool: %d blocks; need at least 1", n_blocks);
    iris_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return iris_err_set(err, IRIS_ENOMEM, "out of memory for the KV pool");
    size_t n = (size_t)n_blocks;
    p->n_blocks = n_blocks;
    p->caching = prefix_caching != 0;
    p->n_buckets = n_blocks * 2 + 1;
    p->ref = calloc(n, sizeof *p->ref);
    p->keyed = calloc(n, 1);
    p->where = calloc(n, 1);
    p->keys = calloc(n, sizeof *p->keys);
    p->prev = malloc(n * sizeof *p->prev);
    p->next = malloc(n * sizeof *p->next);
    p->chain = malloc(n * sizeof *p->chain);
    p->bucket = malloc((size_t)p->n_buckets * sizeof *p->bucket);
    if (!p->ref || !p->keyed || !p->where || !p->keys || !p->prev || !p->next || !p->chain || !p->bucket) {
        iris_kv_pool_free(p);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory for a KV pool of %d blocks", n_blocks);
    }
    p->free_list = p->lru = (list){-1, -1, 0};
    for (int i = 0; i < p->n_buckets; i++) p->bucket[i] = -1;
    for (int b = 0; b < n_blocks; b++) {
        p->chain[b] = -1;
        list_push_tail(p, &p->free_list, b, ON_FREE);
    }
    *out = p;
    return IRIS_OK;
}

void iris_kv_pool_free(iris_kv_pool *p) {
    if (!p) return;
    free(p->ref), free(p->keyed), free(p->where), free(p->keys);
    free(p->prev), free(p->next), free(p->chain), free(p->bucket);
    free(p);
}

int iris_kv_pool_n_blocks(const iris_kv_pool *p) { return p->n_blocks; }
int iris_kv_pool_n_available(const iris_kv_pool *p) { return p->free_list.n + p->lru.n; }
int iris_kv_pool_n_cached(const iris_kv_pool *p) { return p->lru.n; }
int iris_kv_pool_n_used(const iris_kv_pool *p) { return p->n_used; }
int iris_kv_pool_prefix_caching(const iris_kv_pool *p) { return p->caching; }
int iris_kv_pool_ref_count(const iris_kv_pool *p, int b) { return p->ref[b]; }
int iris_kv_pool_is_keyed(const iris_kv_pool *p, int b) { return p->keyed[b]; }

int iris_kv_pool_alloc(iris_kv_pool *p) {
    int b;
    if (p->free_list.n) {
        b = p->free_list.head;
        list_remove(p, &p->free_list, b);
    } else if (p->lru.n) {
        b = p->lru.head;
        list_remove(p, &p->lru, b);
        hash_remove(p, b);
    } else {
        return -1;
    }
    p->ref[b] = 1;
    p->n_used++;
    return b;
}

int iris_kv_pool_lookup(const iris_kv_pool *p, const iris_kv_key *key) {
    if (!p->caching) return -1;
    for (int b = p->bucket[bucket_of(p, key)]; b >= 0; b = p->chain[b])
        if (!memcmp(p->keys[b].b, key->b, IRIS_KV_KEY_BYTES)) return b;
    return -1;
}

void iris_kv_pool_ref(iris_kv_pool *p, int b) {
    if (p->ref[b] == 0) {
        /* Only a cached block can be revived; a free one has no content worth sharing. */
        list_remove(p, p->where[b] == ON_LRU ? &p->lru : &p->free_list, b);
        p->n_used++;
    }
    p->ref[b]++;
}

void iris_kv_pool_release(iris_kv_pool *p, int b) {
    if (p->ref[b] <= 0) return;
    if (--p->ref[b]) return;
    p->n_used--;
    if (p->keyed[b]) list_push_tail(p, &p->lru, b, ON_LRU);
    else list_push_head(p, &p->free_list, b, ON_FREE);
}

int iris_kv_pool_publish(iris_kv_pool *p, int b, const iris_kv_key *key) {
    if (!p->caching || p->keyed[b] || p->ref[b] <= 0) return 0;
    if (iris_kv_pool_lookup(p, key) >= 0) return 0;
    p->keys[b] = *key;
    p->keyed[b] = 1;
    int *head = &p->bucket[bucket_of(p, key)];
    p->chain[b] = *head;
    *head = b;
    return 1;
}

void iris_kv_pool_key(const iris_kv_key *prev, const int32_t *tokens, const iris_kv_key *images, int n_images,
                      iris_kv_key *out) {
    static const iris_kv_key zero;
    uint8_t tok[IRIS_KV_BLOCK * 4];
    for (int i = 0; i < IRIS_KV_BLOCK; i++) {
        uint32_t v = (uint32_t)tokens[i];
        tok[4 * i] = (uint8_t)v, tok[4 * i + 1] = (uint8_t)(v >> 8);
        tok[4 * i + 2] = (uint8_t)(v >> 16), tok[4 * i + 3] = (uint8_t)(v >> 24);
    }
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned int len = 0;
    int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) &&
             EVP_DigestUpdate(c, (prev ? prev : &zero)->b, IRIS_KV_KEY_BYTES) && EVP_DigestUpdate(c, tok, sizeof tok);
    for (int i = 0; ok && i < n_images; i++) ok = EVP_DigestUpdate(c, images[i].b, IRIS_KV_KEY_BYTES);
    ok = ok && EVP_DigestFinal_ex(c, out->b, &len) && len == IRIS_KV_KEY_BYTES;
    EVP_MD_CTX_free(c);
    /* libcrypto failing on SHA-256 means it is broken; an all-zero key would
     * alias every block, so fall back to a key no lookup can match twice. */
    if (!ok) {
        static uint64_t unique;
        memset(out->b, 0xff, sizeof out->b);
        uint64_t u = ++unique;
        memcpy(out->b, &u, sizeof u);
    }
}

int iris_kv_pool_check(const iris_kv_pool *p, const int *refs, iris_err *err) {
    int n_free = 0, n_lru = 0, n_used = 0;
    for (int b = 0; b < p->n_blocks; b++) {
        if (refs && refs[b] != p->ref[b])
            return iris_err_set(err, IRIS_EFORMAT, "KV pool: block %d has %d references; %d sequences hold it", b,
                                p->ref[b], refs[b]);
        if (p->ref[b] < 0) return iris_err_set(err, IRIS_EFORMAT, "KV pool: block %d has ref %d", b, p->ref[b]);
        int want = p->ref[b] > 0 ? ON_NONE : p->keyed[b] ? ON_LRU : ON_FREE;
        if (p->where[b] != want)
            return iris_err_set(err, IRIS_EFORMAT, "KV pool: block %d (ref %d, %s) is on list %d, expected %d", b,
                                p->ref[b], p->keyed[b] ? "keyed" : "unkeyed", p->where[b], want);
        n_used += p->ref[b] > 0;
        if (p->keyed[b]) {
            if (!p->caching) return iris_err_set(err, IRIS_EFORMAT, "KV pool: block %d keyed with caching off", b);
            if (iris_kv_pool_lookup(p, &p->keys[b]) != b)
                return iris_err_set(err, IRIS_EFORMAT, "KV pool: block %d's key does not find it in the table", b);
        }
    }
    /* Walk both lists: links consistent, lengths as counted. */
    const list *ls[2] = {&p->free_list, &p->lru};
    for (int k = 0; k < 2; k++) {
        int prev = -1, n = 0;
        for (int b = ls[k]->head; b >= 0; prev = b, b = p->next[b]) {
            if (++n > p->n_blocks) return iris_err_set(err, IRIS_EFORMAT, "KV pool: list %d has a cycle", k + 1);
            if (p->prev[b] != prev || p->where[b] != k + 1)
                return iris_err_set(err, IRIS_EFORMAT, "KV pool: block %d badly linked on list %d", b, k + 1);
        }
        if (prev != ls[k]->tail || n != ls[k]->n)
            return iris_err_set(err, IRIS_EFORMAT, "KV pool: list %d holds %d blocks, counted %d", k + 1, n, ls[k]->n);
        if (k == 0) n_free = n;
        else n_lru = n;
    }
    if (n_used != p->n_used || n_free + n_lru + n_used != p->n_blocks)
        return iris_err_set(err, IRIS_EFORMAT, "KV pool: free %d + cached %d + used %d (counted %d) != %d blocks",
                            n_free, n_lru, n_used, p->n_used, p->n_blocks);
    /* Every chained block is keyed and in its key's bucket. */
    int n_chained = 0;
    for (int h = 0; h < p->n_buckets; h++)
        for (int b = p->bucket[h]; b >= 0; b = p->chain[b]) {
            if (++n_chained > p->n_blocks) return iris_err_set(err, IRIS_EFORMAT, "KV pool: hash chain cycle");
            if (!p->keyed[b] || bucket_of(p, &p->keys[b]) != h)
                return iris_err_set(err, IRIS_EFORMAT, "KV pool: block %d in bucket %d is unkeyed or misplaced", b, h);
        }
    int n_keyed = 0;
    for (int b = 0; b < p->n_blocks; b++) n_keyed += p->keyed[b];
    if (n_keyed != n_chained)
        return iris_err_set(err, IRIS_EFORMAT, "KV pool: %d keyed blocks but %d in the table", n_keyed, n_chained);
    return IRIS_OK;
}
