/* runner.h: one engine step over the text decoder.
 *
 * The runner turns a list of sequences (text.h iris_text_seq: host tokens, positions, block
 * tables, image rows) into the flat batch the model's forward reads (text.h iris_text_batch):
 * rows of all sequences in order, the attention metadata (row -> sequence, visible context,
 * cache slot, block tables), the image rows and the rows whose logits are wanted, uploaded in
 * one copy.  It owns:
 *   - the step buffers, host and device, sized once at open from the limits (the engine's
 *     memory plan): no allocation in the step loop on either side;
 *   - the CUDA-graph cache: a decode-only step (one new token a sequence, no image rows) is
 *     recorded once per (sequences, logits rows, table width, cache) and replayed;
 *   - the choice between each logits row's top-k candidates picked on the device and whole fp32
 *     rows on the host (what sampling needs: model/sampler.h iris_sampler_top_need);
 *   - constrained rows' token masks: asked of the caller while the device runs the forward,
 *     uploaded, applied where the candidates are chosen (runner.c's opening says how).
 * The device activations region is shared with the vision encoder's scratch
 * (iris_runner_scratch): the engine encodes a step's images before the step runs, on the same
 * thread and stream, and nothing in the region outlives a step.
 *
 * Threads: one runner belongs to one thread at a time (the engine's). */
#ifndef IRIS_ENGINE_RUNNER_H
#define IRIS_ENGINE_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "iris.h"
#include "model/text.h"

typedef struct iris_runner iris_runner;

typedef struct iris_runner_limits {
    int max_rows;               /* rows a step (the engine's max_batch_tokens) */
    int max_seqs;               /* sequences a step */
    int max_context;            /* tokens of one sequence (sizes the block tables) */
    int max_logits;             /* logits rows a step (0: max_seqs) */
    int n_deepstack;            /* DeepStack taps of the image rows (the vision config's) */
    size_t scratch_bytes;       /* the vision encoder's scratch to share the activations with (0: none) */
    int trace;                  /* keep a host buffer for hidden-state traces (iris_runner_step_trace) */
    int no_graphs;              /* op by op even where the backend records graphs (tests compare the two) */
    int masks;                  /* room for constrained rows' token masks (iris_runner_sampling.mask):
                                   ~19 KB a logits row on the host (pinned) and on the device */
} iris_runner_limits;

/* Most candidates a logits row brings from the device. */
#define IRIS_RUNNER_TOP_MAX 64
/* Candidates a row brings past what its request needs: ties at the boundary within this many
 * are resolved on the host; a longer tie brings the whole row. */
#define IRIS_RUNNER_TIE_MARGIN 8

/* What sampling needs of each logits row of a step (NULL to iris_runner_step: whole rows). */
typedef struct iris_runner_sampling {
    const int *need;            /* [rows]: tokens the row's sampler needs (0: the whole row) */
    const int *penalized;       /* [rows] or NULL: 1 where the row's request has penalties */
    /* For penalized rows: does a penalty apply to token id?  Such a row's candidates are enough
     * when need[row] tokens no penalty touches lie above its last candidate. */
    int (*penalizes)(void *ud, int row, int32_t id);
    void *ud;
    /* Constrained rows (masked NULL: none).  masked[row] 1: mask(ud, row, words, err) writes the
     * row's allowed tokens into words (bit t % 32 of words[t / 32]: token t; ceil(vocab / 32)
     * words, as model/sampler.h iris_sampler_mask) and returns 1 (0: not constrained after all;
     * negative: failed, and the row goes unmasked: the caller's sampler keeps the failure).
     * Called once a step for each such row, after the forward is launched and before the
     * candidates are chosen, on the thread pool (distinct rows at once).  A masked row's
     * candidates are those of the masked row; a whole row comes back unmasked (the host sampler
     * masks it).  Needs a runner opened with limits.masks. */
    const int *masked;
    int (*mask)(void *ud, int row, uint32_t *words, iris_err *err);
} iris_runner_sampling;

/* What a step returns, valid until the next step: row i (the i-th wanted logits row, sequence
 * after sequence) is whole[i] ? logits[i * vocab ...] : its k candidates ids/vals[i * k ...],
 * value-descending, lowest id first among equals. */
typedef struct iris_runner_out {
    int k;                      /* candidates a row (0: every row whole) */
    const int *whole;           /* [rows] */
    const int32_t *ids;         /* [rows, k] */
    const float *vals;          /* [rows, k] */
    const float *logits;        /* [rows, vocab] fp32 */
    int n_rows;                 /* logits rows of the step */
    int n_masked;               /* rows whose candidates were chosen under their mask */
    double mask_s;              /* wall seconds the host spent on the step's masks (the device runs the
                                   forward meanwhile: hidden while below the forward's time) */
    double launch_s;            /* wall seconds from the step's start until its forward was issued:
                                   the host's metadata, copies and launches (or graph replay) on a
                                   GPU, which runs the forward after; the whole forward on the CPU */
} iris_runner_out;

/* A runner for decoder t on backend b (where t's weights and kv live).  Free with
 * iris_runner_close. */
int iris_runner_open(const iris_text *t, iris_backend *b, iris_kv_cache *kv, const iris_runner_limits *lim,
                     iris_runner **out, iris_err *err);
void iris_runner_close(iris_runner *r);

/* One step: appends every sequence's new K/V to its blocks and produces the wanted rows'
 * logits as `smp` asks (NULL: whole rows).  Inputs are host memory. */
int iris_runner_step(iris_runner *r, const iris_text_seq *seqs, int n_seqs, const iris_runner_sampling *smp,
                     iris_runner_out *out, iris_err *err);
/* The same, op by op, calling trace with the residual stream entering every layer (needs
 * limits.trace); whole rows. */
int iris_runner_step_trace(iris_runner *r, const iris_text_seq *seqs, int n_seqs, iris_text_trace_fn trace,
                           void *ud, iris_runner_out *out, iris_err *err);

/* Decode graphs recorded and kept (tests: were they used?). */
int iris_runner_n_graphs(const iris_runner *r);

/* The device region the vision encoder may use as scratch between steps (NULL, 0: none). */
void *iris_runner_scratch(iris_runner *r, size_t *bytes);

/* One step with a runner sized for it (tests and tools that run one forward): opens a runner,
 * steps, copies every wanted row's fp32 logits to `logits` ([rows, vocab], the caller's), and
 * closes it. */
int iris_runner_forward(const iris_text *t, iris_backend *b, iris_kv_cache *kv, const iris_text_seq *seqs, int n_seqs,
                        float *logits, iris_text_trace_fn trace, void *ud, iris_err *err);

#endif
