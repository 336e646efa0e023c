/* sched.c: continuous batching with chunked prefill, prefix caching and
 * preemption (sched.h).
 *
 * The budget of a step is spent decodes first (one token each, so running
 * requests keep streaming however long the prompts behind them are), then
 * on the next chunk of prompts already started, then on new admissions.
 * Images reached by a step's chunks without embeddings yet are encoded
 * before the step; their tokens count against an encoder budget of
 * max_batch_tokens a step (vLLM's rule), so the encoder pass stays in
 * proportion to the step and the decodes beside it keep their pace: a
 * chunk that would reach an image over the rest of that budget ends before
 * the image (an image larger than the whole budget goes alone).
 * Blocks are taken as chunks need them.  When none is left the newest
 * running sequence gives its blocks back (preemption by recomputation, as
 * vLLM: cheaper than swapping on a GPU that has no room to swap to, and
 * the prefix cache often keeps the victim's blocks for its return).
 */
#include "sched.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "model/text.h"

#define BLK IRIS_KV_BLOCK

static int grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap : 8;
    while (nc < need) nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

int iris_seq_init(iris_seq *s, int64_t id, const int32_t *tokens, int n, iris_err *err) {
    memset(s, 0, sizeof *s);
    s->id = id;
    if (n <= 0) return iris_err_set(err, IRIS_EINVAL, "request %lld: empty prompt", (long long)id);
    if (grow((void **)&s->tokens, &s->cap_tokens, n + 16, sizeof *s->tokens))
        return iris_err_set(err, IRIS_ENOMEM, "out of memory for a %d-token prompt", n);
    memcpy(s->tokens, tokens, (size_t)n * sizeof *tokens);
    s->n_tokens = s->n_prompt = n;
    return IRIS_OK;
}

void iris_seq_free(iris_seq *s) {
    if (!s) return;
    free(s->tokens), free(s->blocks), free(s->keys);
    s->tokens = NULL, s->blocks = NULL, s->keys = NULL;
}

int iris_seq_append(iris_seq *s, int32_t token, iris_err *err) {
    if (grow((void **)&s->tokens, &s->cap_tokens, s->n_tokens + 1, sizeof *s->tokens))
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    s->tokens[s->n_tokens++] = token;
    return IRIS_OK;
}

/* ---- keys --------------------------------------------------------------------------------- */

static void block_key(const iris_seq *s, int k, iris_kv_key *out) {
    iris_kv_key img[64];
    int n_img = 0, lo = k * BLK, hi = lo + BLK;
    for (int i = 0; i < s->n_images && n_img < 64; i++)
        if (s->images[i].start < hi && s->images[i].start + s->images[i].n_tokens > lo) img[n_img++] = s->images[i].hash;
    iris_kv_pool_key(k ? &s->keys[k - 1] : NULL, s->tokens + lo, img, n_img, out);
}

/* Keys of the first n full blocks (n * BLK <= n_tokens). */
static int ensure_keys(iris_seq *s, int n) {
    if (n <= s->n_keys) return 0;
    if (grow((void **)&s->keys, &s->cap_keys, n, sizeof *s->keys)) return -1;
    for (int k = s->n_keys; k < n; k++) block_key(s, k, &s->keys[k]);
    s->n_keys = n;
    return 0;
}

/* ---- lists -------------------------------------------------------------------------------- */

int iris_sched_init(iris_sched *s, const iris_sched_opts *o, iris_kv_pool *pool, iris_err *err) {
    memset(s, 0, sizeof *s);
    if (o->max_num_seqs < 1 || o->max_batch_tokens < 1 || o->max_waiting < 1)
        return iris_err_set(err, IRIS_EINVAL, "scheduler: max_num_seqs %d, max_batch_tokens %d, max_waiting %d must "
                            "all be >= 1", o->max_num_seqs, o->max_batch_tokens, o->max_waiting);
    s->o = *o;
    s->pool = pool;
    return IRIS_OK;
}

void iris_sched_free(iris_sched *s) {
    if (!s) return;
    free(s->waiting), free(s->running);
    memset(s, 0, sizeof *s);
}

void iris_sched_batch_free(iris_sched_batch *b) {
    if (!b) return;
    free(b->seqs), free(b->cancelled);
    memset(b, 0, sizeof *b);
}

int iris_sched_busy(const iris_sched *s) { return s->n_waiting + s->n_running > 0; }

/* The longest cached prefix of full blocks of seq, leaving at least one token to compute; *n_revive
 * (may be NULL) gets how many of them no sequence holds now. */
static int cached_blocks(iris_sched *s, iris_seq *seq, int *n_revive) {
    int limit = (seq->n_tokens - 1) / BLK, nm = 0, nr = 0;
    if (iris_kv_pool_prefix_caching(s->pool) && ensure_keys(seq, limit) == 0)
        for (; nm < limit; nm++) {
            int blk = iris_kv_pool_lookup(s->pool, &seq->keys[nm]);
            if (blk < 0) break;
            nr += iris_kv_pool_ref_count(s->pool, blk) == 0;
        }
    if (n_revive) *n_revive = nr;
    return nm;
}

int iris_sched_cached_tokens(iris_sched *s, iris_seq *seq) { return cached_blocks(s, seq, NULL) * BLK; }

int iris_sched_add(iris_sched *s, iris_seq *seq, iris_err *err) {
    if (s->n_waiting >= s->o.max_waiting)
        return iris_err_set(err, IRIS_ELIMIT, "the waiting queue is full (%d requests); try again later",
                            s->o.max_waiting);
    if (grow((void **)&s->waiting, &s->cap_waiting, s->n_waiting + 1, sizeof *s->waiting))
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    s->waiting[s->n_waiting++] = seq;
    seq->status = IRIS_SEQ_WAITING;
    return IRIS_OK;
}

static void remove_at(iris_seq **arr, int *n, int i) {
    memmove(arr + i, arr + i + 1, (size_t)(*n - i - 1) * sizeof *arr);
    (*n)--;
}

static int index_of(iris_seq **arr, int n, const iris_seq *x) {
    for (int i = 0; i < n; i++)
        if (arr[i] == x) return i;
    return -1;
}

/* Last block first, so a cached prefix loses its tail before its head. */
static void release_blocks(iris_sched *s, iris_seq *seq) {
    for (int k = seq->n_blocks - 1; k >= 0; k--) iris_kv_pool_release(s->pool, seq->blocks[k]);
    seq->n_blocks = 0;
    seq->n_computed = 0;
    seq->n_new = 0;
    seq->want_logits = 0;
}

static void unbatch(iris_sched_batch *b, iris_seq *seq) {
    int i = index_of(b->seqs, b->n_seqs, seq);
    if (i < 0) return;
    b->n_tokens -= seq->n_new;
    remove_at(b->seqs, &b->n_seqs, i);
}

static void preempt(iris_sched *s, iris_sched_batch *b, iris_seq *v) {
    unbatch(b, v);
    release_blocks(s, v);
    int i = index_of(s->running, s->n_running, v);
    if (i >= 0) remove_at(s->running, &s->n_running, i);
    /* To the head of the queue: it was admitted before everything waiting.
     * The room exists: cap_waiting >= max_waiting + max_num_seqs (see step). */
    memmove(s->waiting + 1, s->waiting, (size_t)s->n_waiting * sizeof *s->waiting);
    s->waiting[0] = v;
    s->n_waiting++;
    v->status = IRIS_SEQ_WAITING;
    v->n_preempted++;
    s->stats.preemptions++;
}

void iris_sched_finish(iris_sched *s, iris_seq *seq) {
    release_blocks(s, seq);
    int i = index_of(s->running, s->n_running, seq);
    if (i >= 0) remove_at(s->running, &s->n_running, i);
    i = index_of(s->waiting, s->n_waiting, seq);
    if (i >= 0) remove_at(s->waiting, &s->n_waiting, i);
    seq->status = IRIS_SEQ_FINISHED;
}

/* ---- the step ----------------------------------------------------------------------------- */

/* Blocks so that the first `n` tokens have slots; 0 or -1 (pool empty; the
 * blocks taken so far stay with the sequence). */
static int cover(iris_sched *s, iris_seq *seq, int n) {
    int need = (n + BLK - 1) / BLK;
    if (grow((void **)&seq->blocks, &seq->cap_blocks, need, sizeof *seq->blocks)) return -1;
    while (seq->n_blocks < need) {
        int blk = iris_kv_pool_alloc(s->pool);
        if (blk < 0) return -1;
        seq->blocks[seq->n_blocks++] = blk;
    }
    return 0;
}

/* Image tokens to encode for a chunk of n tokens from lo: the images it reaches without
 * embeddings. */
static int encoder_tokens(const iris_seq *seq, int lo, int n) {
    int t = 0;
    for (int i = 0; i < seq->n_images; i++) {
        const iris_seq_image *im = &seq->images[i];
        if (!im->ready && im->start < lo + n && im->start + im->n_tokens > lo) t += im->n_tokens;
    }
    return t;
}

/* The chunk of up to n tokens from lo that the step's encoder budget allows: it ends before the
 * first image over the budget's rest (0: not this step), unless nothing is to be encoded yet; and
 * before an image being encoded beside the steps, or (defer_images) one the step would have to
 * encode while it has other work. */
static int encoder_cut(const iris_sched *s, const iris_sched_batch *b, const iris_seq *seq, int lo, int n) {
    int used = b->n_encoder;
    for (int i = 0; i < seq->n_images; i++) {
        const iris_seq_image *im = &seq->images[i];
        if (im->ready || im->start >= lo + n || im->start + im->n_tokens <= lo) continue;
        if (im->pending || (s->o.defer_images && b->n_seqs > 0) ||
            (used > 0 && used + im->n_tokens > s->o.max_batch_tokens))
            return im->start > lo ? im->start - lo : 0;
        used += im->n_tokens;
    }
    return n;
}

static void schedule(iris_sched_batch *b, iris_seq *seq, int n_new) {
    b->n_encoder += encoder_tokens(seq, seq->n_computed, n_new);
    seq->n_new = n_new;
    seq->want_logits = seq->n_computed + n_new == seq->n_tokens;
    b->seqs[b->n_seqs++] = seq;
    b->n_tokens += n_new;
}

/* Try to run up to `want` tokens of a running sequence, preempting the
 * newest running sequences while no block is left.  0 when scheduled, 1
 * when `seq` itself was preempted. */
static int run_chunk(iris_sched *s, iris_sched_batch *b, iris_seq *seq, int want) {
    for (;;) {
        int room = (seq->n_blocks + iris_kv_pool_n_available(s->pool)) * BLK - seq->n_computed;
        int n = want < room ? want : room;
        if (n > 0) {
            cover(s, seq, seq->n_computed + n);
            schedule(b, seq, n);
            return 0;
        }
        iris_seq *victim = s->running[s->n_running - 1];
        preempt(s, b, victim);
        if (victim == seq) return 1;
    }
}

static void admit(iris_sched *s, iris_sched_batch *b) {
    while (s->n_waiting > 0 && s->n_running < s->o.max_num_seqs && b->n_tokens < s->o.max_batch_tokens) {
        iris_seq *seq = s->waiting[0];
        int budget = s->o.max_batch_tokens - b->n_tokens;
        int n_revive = 0, nm = cached_blocks(s, seq, &n_revive);
        int avail = iris_kv_pool_n_available(s->pool) - n_revive;
        int want = seq->n_tokens - nm * BLK;
        if (want > budget) want = budget;
        if (want > avail * BLK) want = avail * BLK;
        if (want > 0) want = encoder_cut(s, b, seq, nm * BLK, want);
        if (want <= 0) break;  /* FIFO: nothing behind it overtakes */
        if (grow((void **)&seq->blocks, &seq->cap_blocks, nm + 1, sizeof *seq->blocks)) break;
        for (int k = 0; k < nm; k++) {
            int blk = iris_kv_pool_lookup(s->pool, &seq->keys[k]);
            iris_kv_pool_ref(s->pool, blk);
            seq->blocks[seq->n_blocks++] = blk;
        }
        seq->n_computed = nm * BLK;
        s->stats.prefix_hit_tokens += (uint64_t)nm * BLK;
        for (int i = 0; i < seq->n_images; i++)
            if (!seq->images[i].ready && seq->images[i].start + seq->images[i].n_tokens <= seq->n_computed)
                s->stats.images_cached++;
        if (!seq->admitted) seq->n_cached = nm * BLK < seq->n_prompt ? nm * BLK : seq->n_prompt;
        seq->admitted = 1;
        remove_at(s->waiting, &s->n_waiting, 0);
        s->running[s->n_running++] = seq;
        seq->status = IRIS_SEQ_RUNNING;
        cover(s, seq, seq->n_computed + want);
        schedule(b, seq, want);
    }
}

int iris_sched_step(iris_sched *s, iris_sched_batch *b, iris_err *err) {
    b->n_seqs = b->n_tokens = b->n_cancelled = b->n_encoder = 0;
    int cap = s->n_running + s->n_waiting + 1;
    if (grow((void **)&b->seqs, &b->cap, cap, sizeof *b->seqs) ||
        !(b->cancelled = realloc(b->cancelled, (size_t)b->cap * sizeof *b->cancelled)) ||
        grow((void **)&s->running, &s->cap_running, s->o.max_num_seqs, sizeof *s->running) ||
        grow((void **)&s->waiting, &s->cap_waiting, s->o.max_waiting + s->o.max_num_seqs + 1, sizeof *s->waiting))
        return iris_err_set(err, IRIS_ENOMEM, "out of memory scheduling %d sequences", cap);
    s->stats.steps++;

    /* 1. Cancellations. */
    iris_seq **lists[2] = {s->running, s->waiting};
    int *counts[2] = {&s->n_running, &s->n_waiting};
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < *counts[l];) {
            iris_seq *seq = lists[l][i];
            if (!seq->cancel) {
                i++;
                continue;
            }
            release_blocks(s, seq);
            remove_at(lists[l], counts[l], i);
            seq->status = IRIS_SEQ_FINISHED;
            b->cancelled[b->n_cancelled++] = seq;
            s->stats.cancelled++;
        }

    /* 2. Decodes, oldest first. */
    for (int i = 0; i < s->n_running && b->n_tokens < s->o.max_batch_tokens; i++) {
        iris_seq *seq = s->running[i];
        if (seq->n_tokens - seq->n_computed != 1) continue;
        if (run_chunk(s, b, seq, 1)) break;
    }
    /* 3. Prompts part-way through their prefill. */
    for (int i = 0; i < s->n_running && b->n_tokens < s->o.max_batch_tokens; i++) {
        iris_seq *seq = s->running[i];
        int rest = seq->n_tokens - seq->n_computed;
        if (rest <= 1 || index_of(b->seqs, b->n_seqs, seq) >= 0) continue;
        int budget = s->o.max_batch_tokens - b->n_tokens;
        int want = encoder_cut(s, b, seq, seq->n_computed, rest < budget ? rest : budget);
        if (want > 0 && run_chunk(s, b, seq, want)) break;
    }
    /* 4. Admissions. */
    admit(s, b);
    /* A decode is one token after the prompt whose K/V is all there; the
     * rest (prompt chunks, recomputation after preemption) is prefill. */
    for (int i = 0; i < b->n_seqs; i++) {
        iris_seq *seq = b->seqs[i];
        if (seq->n_new == 1 && seq->n_computed >= seq->n_prompt) s->stats.decode_tokens++;
        else s->stats.prefill_tokens += (uint64_t)seq->n_new;
    }
    return IRIS_OK;
}

void iris_sched_commit(iris_sched *s, iris_sched_batch *b) {
    for (int i = 0; i < b->n_seqs; i++) {
        iris_seq *seq = b->seqs[i];
        int full0 = seq->n_computed / BLK;
        seq->n_computed += seq->n_new;
        seq->n_new = 0;
        int full1 = seq->n_computed / BLK;
        if (full1 > full0 && iris_kv_pool_prefix_caching(s->pool) && ensure_keys(seq, full1) == 0)
            for (int k = full0; k < full1; k++) iris_kv_pool_publish(s->pool, seq->blocks[k], &seq->keys[k]);
    }
}

/* ---- the checker -------------------------------------------------------------------------- */

int iris_sched_check(const iris_sched *s, iris_err *err) {
    int nb = iris_kv_pool_n_blocks(s->pool);
    int *refs = calloc((size_t)nb, sizeof *refs);
    if (!refs) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    int rc = IRIS_OK;
    if (s->n_running > s->o.max_num_seqs)
        rc = iris_err_set(err, IRIS_EFORMAT, "sched: %d running > max_num_seqs %d", s->n_running, s->o.max_num_seqs);
    for (int i = 0; !rc && i < s->n_waiting; i++) {
        const iris_seq *q = s->waiting[i];
        if (q->status != IRIS_SEQ_WAITING || q->n_blocks || q->n_computed || index_of(s->running, s->n_running, q) >= 0)
            rc = iris_err_set(err, IRIS_EFORMAT, "sched: waiting seq %lld has status %d, %d blocks, %d computed",
                              (long long)q->id, q->status, q->n_blocks, q->n_computed);
    }
    for (int i = 0; !rc && i < s->n_running; i++) {
        const iris_seq *q = s->running[i];
        if (q->status != IRIS_SEQ_RUNNING || q->n_computed < 0 || q->n_computed > q->n_tokens ||
            q->n_blocks * BLK < q->n_computed || q->n_blocks > (q->n_tokens + BLK - 1) / BLK) {
            rc = iris_err_set(err, IRIS_EFORMAT, "sched: running seq %lld: status %d, %d of %d tokens computed, %d blocks",
                              (long long)q->id, q->status, q->n_computed, q->n_tokens, q->n_blocks);
            break;
        }
        for (int k = 0; k < q->n_blocks; k++) {
            int blk = q->blocks[k];
            if (blk < 0 || blk >= nb) {
                rc = iris_err_set(err, IRIS_EFORMAT, "sched: seq %lld names block %d of %d", (long long)q->id, blk, nb);
                break;
            }
            refs[blk]++;
            /* A keyed block this sequence has computed holds exactly its key. */
            if (k < q->n_computed / BLK && k < q->n_keys && iris_kv_pool_is_keyed(s->pool, blk) &&
                iris_kv_pool_lookup(s->pool, &q->keys[k]) != blk) {
                rc = iris_err_set(err, IRIS_EFORMAT, "sched: seq %lld block %d (%d) is keyed with another content",
                                  (long long)q->id, k, blk);
                break;
            }
        }
        /* The key chain matches the tokens (the last key covers the whole chain). */
        if (!rc && q->n_keys > 0) {
            iris_kv_key want;
            block_key(q, q->n_keys - 1, &want);
            if (memcmp(want.b, q->keys[q->n_keys - 1].b, sizeof want.b))
                rc = iris_err_set(err, IRIS_EFORMAT, "sched: seq %lld key %d does not match its tokens", (long long)q->id,
                                  q->n_keys - 1);
        }
    }
    if (!rc) rc = iris_kv_pool_check(s->pool, refs, err);
    free(refs);
    return rc;
}
