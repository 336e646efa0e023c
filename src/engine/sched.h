/* sched.h: the scheduler: which sequences run in the next step, and how many
 * of their tokens.
 *
 * A step has a token budget (max_batch_tokens) and at most max_num_seqs
 * running sequences.  Each step, in this order:
 *   1. cancelled sequences (their flag set from any step) are dropped and
 *      their blocks released;
 *   2. every running sequence that is decoding gets its one token;
 *   3. running sequences part-way through their prompt get the next chunk
 *      of it, oldest first, from the budget left;
 *   4. waiting sequences are admitted in FIFO order while the budget, the
 *      sequence limit and the free blocks allow: their longest prefix of
 *      full blocks already in the pool (same tokens and images, kv_pool.h)
 *      is shared instead of computed, and the rest starts as a chunk.
 * When a sequence needs a block and none is free, the newest running
 * sequence is preempted: its blocks are released and it goes back to the
 * head of the waiting queue, to be recomputed (prompt + tokens generated so
 * far) when blocks free up; nothing is dropped.
 *
 * A sequence's tokens are its prompt followed by its generated tokens; the
 * first n_computed have K/V in its blocks.  A step runs tokens [n_computed,
 * n_computed + n_new) and, when that reaches the end of the tokens, wants the
 * logits of the last one (the caller samples and appends a token).  Images:
 * the caller encodes an image before the first chunk that touches its tokens
 * (iris_seq_image.ready) and may drop its embeddings once n_computed passes
 * its last token.  With defer_images, a chunk of a step that has other work
 * ends before an image without embeddings (the caller encodes it beside the
 * steps, `pending`, and the chunk goes on once it is ready); a step with
 * nothing else still encodes before it, so a lone request waits for nothing.
 *
 * Owns: the waiting and running lists (pointers to the caller's sequences),
 * the sequences' block tables and block keys.  Not thread-safe: the engine
 * thread alone calls it (cancel flags are set through the engine, which
 * copies them into `cancel` at the start of a step).
 */
#ifndef IRIS_SCHED_H
#define IRIS_SCHED_H

#include <stdint.h>

#include "engine/kv_pool.h"
#include "iris.h"

typedef enum iris_seq_status { IRIS_SEQ_NEW = 0, IRIS_SEQ_WAITING, IRIS_SEQ_RUNNING, IRIS_SEQ_FINISHED } iris_seq_status;

typedef struct iris_seq_image {
    int start, n_tokens;     /* its token range in the sequence */
    iris_kv_key hash;        /* content hash (pixels and grid) */
    int ready;               /* the caller has its embeddings */
    int pending;             /* the caller is encoding it beside the steps: no chunk reaches it until ready */
    float *embeds;           /* caller's: [n_tokens, hidden] */
    float *deepstack;        /* caller's: [n_deepstack, n_tokens, hidden] */
} iris_seq_image;

typedef struct iris_seq {
    int64_t id;
    int status;               /* iris_seq_status */
    int32_t *tokens;          /* [n_tokens] (malloc'd, see iris_seq_init) */
    int n_tokens, cap_tokens;
    int n_prompt;
    int n_computed;           /* tokens with K/V in the blocks */
    int *blocks;              /* block table, [n_blocks] */
    int n_blocks, cap_blocks;
    iris_kv_key *keys;        /* keys of full blocks 0..n_keys-1 (the hash chain) */
    int n_keys, cap_keys;
    iris_seq_image *images;   /* sorted by start; owned by the caller */
    int n_images;
    int cancel;               /* set: dropped at the next step */
    int n_new;                /* this step: tokens to run */
    int want_logits;          /* this step: the last token's logits are needed */
    int n_cached;             /* prompt tokens shared from the prefix cache at first admission */
    int admitted;             /* was admitted at least once */
    int n_preempted;
    void *ud;                 /* the caller's */
} iris_seq;

/* tokens: the prompt (copied).  Free with iris_seq_free (not the images). */
int iris_seq_init(iris_seq *s, int64_t id, const int32_t *tokens, int n, iris_err *err);
void iris_seq_free(iris_seq *s);
/* Append a generated token. */
int iris_seq_append(iris_seq *s, int32_t token, iris_err *err);

typedef struct iris_sched_opts {
    int max_num_seqs;         /* running at once */
    int max_batch_tokens;     /* tokens per step (>= 1) */
    int max_waiting;          /* iris_sched_add beyond this is IRIS_ELIMIT */
    int defer_images;         /* 1: a chunk ends before an image without embeddings when the step already has
                                 other work (the caller encodes it beside the steps); 0: encoded before the step */
} iris_sched_opts;

typedef struct iris_sched_stats {
    uint64_t steps, prefill_tokens, decode_tokens, prefix_hit_tokens, images_cached, preemptions, cancelled;
} iris_sched_stats;

typedef struct iris_sched {
    iris_sched_opts o;
    iris_kv_pool *pool;       /* not owned */
    iris_seq **waiting;       /* FIFO, [n_waiting] */
    int n_waiting, cap_waiting;
    iris_seq **running;       /* admission order, [n_running] */
    int n_running, cap_running;
    iris_sched_stats stats;
} iris_sched;

/* The step's plan: the sequences to run (each with n_new and want_logits
 * set, in the order decodes, then prefill chunks), and those dropped because
 * they were cancelled (finished, blocks released: the caller reports and
 * frees them). */
typedef struct iris_sched_batch {
    iris_seq **seqs;
    int n_seqs, n_tokens;
    int n_encoder;           /* image tokens of the images the step's chunks reach first (to encode) */
    iris_seq **cancelled;
    int n_cancelled;
    int cap;
} iris_sched_batch;

int iris_sched_init(iris_sched *s, const iris_sched_opts *o, iris_kv_pool *pool, iris_err *err);
void iris_sched_free(iris_sched *s);
void iris_sched_batch_free(iris_sched_batch *b);

/* Queue a sequence (status WAITING).  IRIS_ELIMIT when the waiting queue is full. */
int iris_sched_add(iris_sched *s, iris_seq *seq, iris_err *err);
/* Plan the next step into b (reused between steps).  An empty batch with
 * sequences waiting means none fits yet.  Errors: IRIS_ENOMEM only. */
int iris_sched_step(iris_sched *s, iris_sched_batch *b, iris_err *err);
/* The step ran: advance n_computed and key (publish) the blocks that became full. */
void iris_sched_commit(iris_sched *s, iris_sched_batch *b);
/* A running or waiting sequence is done (stop, length, error): release its
 * blocks and forget it (status FINISHED). */
void iris_sched_finish(iris_sched *s, iris_seq *seq);
/* Whether anything is waiting or running. */
int iris_sched_busy(const iris_sched *s);
/* The prompt tokens of waiting sequence seq that the prefix cache would give it now (full blocks,
 * at least one token left to compute), as its admission would count them. */
int iris_sched_cached_tokens(iris_sched *s, iris_seq *seq);

/* Every invariant: block references counted from the sequences' tables equal
 * the pool's, each sequence's blocks cover its computed tokens, keys match
 * the block contents, the lists are consistent (kv_pool_check too). */
int iris_sched_check(const iris_sched *s, iris_err *err);

#endif
