/* planner_internal.h: what planner.c and planner_place.c share (not for other modules).
 *
 * A planning pass works from plan_in: the settings with defaults filled, the weights to assume
 * on the card (the checkpoint's as placed, or the FP8 estimate) and the budget.
 * iris_plan_compute is one pass (every part, the KV pool, the context, the layout; never fails);
 * iris_plan_once adds the auto rules of --dense-weights and the vision worker (with them, else
 * without: the worker first).
 * planner_place.c chooses where the embeddings and the lm_head go (planner.h, --embeddings,
 * --lm-head-dtype) by running passes. */
#ifndef IRIS_PLANNER_INTERNAL_H
#define IRIS_PLANNER_INTERNAL_H

#include "planner.h"

typedef struct plan_in {
    const iris_plan_model *m;
    iris_plan_settings s;
    uint64_t weight_bytes;
    int fp8_linears;       /* decoder linears run from FP8: the lm.fp8 scratch exists */
    uint64_t dense_bytes;  /* BF16 copies of them planned (0: none) */
    uint64_t dense_wanted; /* the copies --dense-weights asks for (iris_plan_once may drop them on auto) */
    int worker;            /* the vision worker's part planned */
    int worker_wanted;     /* asked for, or auto's size rule holds (iris_plan_once may drop it on auto) */
    uint64_t budget, context_bytes;
} plan_in;

void iris_plan_compute(const plan_in *in, iris_plan *p);
void iris_plan_once(plan_in *in, iris_plan *p);

/* The placement chosen (planner_place.c): in->weight_bytes and p as its pass left them, the
 * choice in *out (copied into the final plan by iris_plan_place_fill, after the passes that
 * follow, which start from a zeroed plan). */
typedef struct plan_place {
    int embed_host, lm_head_fp8, embed_auto, lm_head_auto;
    uint64_t most_saving;  /* the weights of the last candidate auto takes with the same logits (what the FP8
                              checkpoint's estimate assumes) */
    int64_t target;
    int n_tries;
    iris_plan_place_try tries[IRIS_PLAN_MAX_PLACE_TRIES];
    uint64_t dtype_bytes[IRIS_DT_COUNT];  /* the weights on the card by dtype */
} plan_place;

void iris_plan_place_choose(plan_in *in, iris_plan *p, plan_place *out);
void iris_plan_place_fill(const plan_in *in, const plan_place *pl, iris_plan *p);
/* When the plan does not fit: the placements the flags ruled out that would (suggestions). */
void iris_plan_place_suggest(const plan_in *in, const plan_place *pl, iris_plan *p, iris_plan *alt);

#endif
